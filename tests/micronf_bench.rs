//! `catena bench micronf` with its smallest rows (a scaling row on the generated 4sics
//! profile, one parallel pair, the ring hop) and `--json --out DIR`: the JSON on stdout,
//! micronf.json, micronf.csv and micronf.svg describe the same rows, the CSV with one
//! cell per header column. Timings are not asserted (a loaded machine), only that they
//! are there. Bounded: 120 s at most.

mod common;

use std::time::Duration;

use serde_json::Value;

/// One CSV line's cells (RFC 4180: a quoted cell may hold commas, `""` is a quote).
fn cells(line: &str) -> Vec<String> {
    let (mut out, mut cell, mut quoted) = (Vec::new(), String::new(), false);
    let mut it = line.chars().peekable();
    while let Some(c) = it.next() {
        match (c, quoted) {
            ('"', true) if it.peek() == Some(&'"') => {
                cell.push('"');
                it.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => out.push(std::mem::take(&mut cell)),
            _ => cell.push(c),
        }
    }
    assert!(!quoted, "unterminated quote: {line}");
    out.push(cell);
    out
}

const HEADER: [&str; 18] = [
    "group",
    "case",
    "workers",
    "stages",
    "prefetch",
    "packets",
    "Mpps",
    "ratio",
    "p50 cyc",
    "p99 cyc",
    "hop cyc/pkt",
    "rt cyc",
    "cyc/pkt",
    "max share",
    "workers Mpps",
    "ceiling ratio",
    "of ceiling",
    "input ns",
];

#[test]
fn the_json_csv_and_svg_hold_the_same_rows() {
    let out = tempfile::tempdir().unwrap();
    let child = common::spawn_bench(
        &[
            "micronf",
            "--runs",
            "1",
            "--json",
            "--only",
            "ip_filter (4sics)",
            "--only",
            "2 busy × 0 cycles",
            "--only",
            "hop",
        ],
        out.path(),
    );
    let o = common::wait::success_within(child, Duration::from_secs(120), "in bench micronf");
    let rows: Value = serde_json::from_slice(&o.stdout).expect("JSON rows on stdout");
    let file: Value =
        serde_json::from_slice(&std::fs::read(out.path().join("micronf.json")).unwrap())
            .expect("micronf.json");
    assert_eq!(rows, file, "stdout and micronf.json");
    let rows = rows.as_array().expect("an array");
    let key = |r: &Value| {
        format!(
            "{} | {} | {}",
            r["group"].as_str().unwrap(),
            r["case"].as_str().unwrap(),
            r["workers"]
        )
    };
    let mut keys: Vec<String> = rows.iter().map(key).collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "hop | one ring hop, 1024 packets, batches of 32 | 1",
            "parallel | 2 busy × 0 cycles, parallel | 1",
            "parallel | 2 busy × 0 cycles, sequential | 1",
            "scaling | ip_filter (4sics) | 1",
            "scaling | ip_filter (4sics) | 2",
        ]
    );
    for r in rows {
        let k = key(r);
        match r["group"].as_str().unwrap() {
            "scaling" => {
                assert!(r["mpps"].as_f64().unwrap() > 0.0, "{k}: {r}");
                assert!(r["packets"].as_u64().unwrap() > 0, "{k}: {r}");
                assert_eq!(r["rounds"].as_array().map(Vec::len), Some(1), "{k}: {r}");
                if r["workers"] == 2 {
                    assert!(r["input_ns"].as_f64().unwrap() > 0.0, "{k}: {r}");
                    // Two workers: the ratio within the round, the ceiling's copies.
                    assert_eq!(r["ratio_rounds"].as_array().map(Vec::len), Some(1));
                    assert!(r["ceiling_mpps"].as_f64().unwrap() > 0.0, "{k}: {r}");
                    let share = r["max_share"].as_f64().unwrap();
                    assert!((0.5..=1.0).contains(&share), "{k}: {r}");
                } else {
                    assert_eq!(r["ratio"], 1.0, "{k}: {r}");
                }
            }
            "parallel" => {
                let (p50, p99) = (r["p50_cycles"].as_u64(), r["p99_cycles"].as_u64());
                assert!(p50.unwrap() <= p99.unwrap(), "{k}: {r}");
            }
            "hop" => {
                assert!(r["hop_cycles"].as_f64().unwrap() > 0.0, "{k}: {r}");
                assert_eq!(r["stages"], 2, "{k}: {r}");
            }
            g => panic!("group {g}"),
        }
    }

    // The CSV: the header, then one line a row, in the JSON's order, one cell a column.
    let csv = std::fs::read_to_string(out.path().join("micronf.csv")).unwrap();
    let mut lines = csv.lines();
    assert_eq!(cells(lines.next().unwrap()), HEADER);
    let lines: Vec<Vec<String>> = lines.map(cells).collect();
    assert_eq!(lines.len(), rows.len(), "{csv}");
    for (l, r) in lines.iter().zip(rows) {
        assert_eq!(l.len(), HEADER.len(), "{l:?}");
        assert_eq!(l[0], r["group"].as_str().unwrap());
        assert_eq!(l[1], r["case"].as_str().unwrap());
        assert_eq!(l[2], r["workers"].to_string());
        assert_eq!(l[3], r["stages"].to_string());
        assert_eq!(l[5], r["packets"].to_string());
        assert_eq!(l[6], format!("{:.3}", r["mpps"].as_f64().unwrap()));
    }

    // The SVG: one labelled bar a row with a throughput.
    let svg = std::fs::read_to_string(out.path().join("micronf.svg")).unwrap();
    assert!(
        svg.starts_with("<svg xmlns='http://www.w3.org/2000/svg'"),
        "{svg}"
    );
    assert!(svg.trim_end().ends_with("</svg>"), "{svg}");
    let bars: Vec<&Value> = rows
        .iter()
        .filter(|r| r["mpps"].as_f64().unwrap() > 0.0)
        .collect();
    assert_eq!(svg.matches("<rect ").count(), bars.len(), "{svg}");
    for r in bars {
        let label = format!(
            ">{} {} (w{} s{})</text>",
            r["group"].as_str().unwrap(),
            r["case"].as_str().unwrap(),
            r["workers"],
            r["stages"]
        );
        assert!(svg.contains(&label), "{label} not in {svg}");
    }
}
