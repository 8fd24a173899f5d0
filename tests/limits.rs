//! Sizes and memory are bounded (issue 14, point 9): every size parameter has a
//! documented maximum (docs/limits.md) that `check` and `run` enforce; `check` prints the
//! memory the chain will allocate; `run` and `check` refuse a chain above `--max-memory`;
//! no abort or backtrace on 4294967295 FastPath entries or a 20,000-NF chain.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::*;

const TRACE: &str = "ndpi/pcap/dns_fragmented.pcap";

fn catena(chain: &str, args: &[&str]) -> Output {
    let dir = tempdir();
    let f = dir.path().join("chain.toml");
    std::fs::write(&f, chain).unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_catena"));
    c.arg(args[0]).arg(&f).args(&args[1..]);
    if args[0] == "run" {
        c.arg("-i").arg(dataset(TRACE));
    }
    c.output().expect("run catena")
}

/// Refused: non-zero exit, one `error:` line containing `want`, no panic or backtrace.
fn refused(o: &Output, want: &str) {
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "accepted; wanted `{want}`");
    assert!(!e.contains("panicked") && !e.contains("backtrace"), "{e}");
    assert_eq!(e.trim_end().lines().count(), 1, "not one line: {e}");
    assert!(
        e.starts_with("error: ") && e.contains(want),
        "wanted `{want}` in: {e}"
    );
}

fn wires(n: usize) -> String {
    (0..n)
        .map(|i| format!("[[nf]]\nname = \"n{i}\"\nkind = \"wire\"\n"))
        .collect()
}

#[test]
fn huge_fastpath_tables_and_chains_are_one_line_errors() {
    let fp = format!(
        "fastpath = true\nfastpath_entries = 4294967295\n{}",
        wires(1)
    );
    for cmd in ["check", "run"] {
        refused(
            &catena(&fp, &[cmd]),
            "`fastpath_entries` = 4294967295 is out of range 1..=4194304",
        );
        refused(
            &catena(&wires(20_000), &[cmd]),
            "20000 NFs is more than the 4096 a chain may have",
        );
    }
    // The largest chain allowed runs, and its packets balance.
    let o = catena(&wires(4096), &["run", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["nfs"].as_array().unwrap().len(), 4096);
    let n = |k: &str| v[k].as_u64().unwrap();
    assert_eq!(n("packets_in"), n("packets_out") + n("packets_dropped"));
}

/// The memory line: `memory: X at most (…); limit Y (--max-memory)`, X in bytes.
fn memory_line(o: &Output) -> f64 {
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out
        .lines()
        .find(|l| l.starts_with("memory: "))
        .unwrap_or_else(|| panic!("no memory line in: {out}"));
    let mut w = line["memory: ".len()..].split_whitespace();
    let v: f64 = w.next().unwrap().parse().unwrap();
    let unit = match w.next().unwrap() {
        "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        u => panic!("unit {u}"),
    };
    v * unit
}

#[test]
fn check_prints_the_memory_and_both_commands_refuse_above_the_limit() {
    // A flow monitor of 1M flows: its table alone is tens of MiB; twice the capacity
    // roughly doubles the figure.
    let mon =
        |cap: u32| format!("[[nf]]\nname = \"mon\"\nkind = \"flow_monitor\"\ncapacity = {cap}\n");
    let small = catena(&mon(1 << 20), &["check"]);
    assert!(small.status.success());
    let big = catena(&mon(1 << 21), &["check"]);
    let (a, b) = (memory_line(&small), memory_line(&big));
    assert!(a > 32.0 * 1024.0 * 1024.0, "{a}");
    assert!(b > 1.8 * a && b < 2.2 * a, "{a} then {b}");
    for cmd in ["check", "run"] {
        refused(
            &catena(&mon(1 << 21), &[cmd, "--max-memory", "64M"]),
            "above the limit of 64.0 MiB",
        );
        // Refused before the first packet: nothing on stdout.
        assert!(catena(&mon(1 << 21), &[cmd, "--max-memory", "64M"])
            .stdout
            .is_empty());
        assert!(catena(&mon(1 << 10), &[cmd, "--max-memory", "64M"])
            .status
            .success());
    }
    // Reassembly buffers: rings × ring_bytes is 16 TiB here, far over any default.
    let mb = "[[nf]]\nname = \"mb\"\nkind = \"microbox\"\nrings = 1048576\nring_bytes = 16777216\napps = [{ kind = \"tcp_count\" }]\n";
    for cmd in ["check", "run"] {
        refused(&catena(mb, &[cmd]), "nf `mb`: the NFs so far need 16.0 TiB");
    }
    // A bad size is refused by the argument parser, saying what a size looks like.
    let o = catena(&mon(1), &["check", "--max-memory", "lots"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("use a size like 512M, 4G or bytes"));
}

#[test]
fn live_ports_rings_count_toward_the_limit() {
    // An AF_XDP socket pins 36 MiB of UMEM plus its rings, an AF_PACKET one maps 256 blocks
    // of 64 KiB: 52.4 MiB together, refused before any interface is looked up.
    let chain = "[[port]]\nname = \"a\"\nkind = \"af_xdp\"\niface = \"nosuch0\"\n\n\
                 [[port]]\nname = \"b\"\nkind = \"af_packet\"\niface = \"nosuch1\"\n\n\
                 [[nf]]\nname = \"w\"\nkind = \"wire\"\n";
    refused(
        &catena(chain, &["check", "--max-memory", "40M"]),
        "(the largest part: the live ports' rings, 52.4 MiB)",
    );
}

/// NF tables holding the parameters each kind needs besides the one tested; a rules file
/// goes in `dir` (the caller's temporary directory, removed when it drops).
fn nf_with(kind: &str, param: &str, value: &str, dir: &Path) -> String {
    let extra = match kind {
        "maglev" => "vip = \"203.0.113.10\"\nbackends = [{ addr = \"10.0.0.1\" }]\n",
        "microbox" => "apps = [{ kind = \"tcp_count\" }]\n",
        _ => "",
    };
    if param == "rules" {
        let f = dir.join("rules.txt");
        let n: usize = value.parse().unwrap();
        std::fs::write(&f, "allow all\n".repeat(n)).unwrap();
        return format!(
            "[[nf]]\nname = \"x\"\nkind = \"{kind}\"\nrules_file = {:?}\n",
            f.display().to_string()
        );
    }
    format!("[[nf]]\nname = \"x\"\nkind = \"{kind}\"\n{extra}{param} = {value}\n")
}

#[test]
fn every_documented_maximum_is_enforced() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/limits.md")).unwrap();
    let mut rows = 0;
    let dir = tempdir();
    for line in doc
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| kind"))
    {
        let cols: Vec<&str> = line.split('|').map(str::trim).collect();
        let (kind, param, max) = (cols[1], cols[2], cols[3].replace(',', ""));
        let over = (max.parse::<u64>().unwrap() + 1).to_string();
        let chain = match (kind, param) {
            ("chain", "nf") => wires(over.parse().unwrap()),
            ("chain", "sink") => {
                let mut s = wires(1);
                for i in 0..over.parse::<usize>().unwrap() {
                    s.push_str(&format!("[[sink]]\nname = \"s{i}\"\n"));
                }
                s
            }
            ("chain", p) => format!("fastpath = true\n{p} = {over}\n{}", wires(1)),
            (k, p) => nf_with(k, p, &over, dir.path()),
        };
        let o = catena(&chain, &["check"]);
        refused(&o, &max);
        rows += 1;
    }
    assert!(rows >= 15, "{rows} rows in docs/limits.md");
}
