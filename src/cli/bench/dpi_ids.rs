//! The DPI → IDS chain of `catena bench microboxes` (Microboxes' Figure 7c): one stack,
//! a DPI app then an IDS app with `examples/ids/bench.rules`; the IDS either subscribes to
//! every flow's data ("all events") or only to flows the DPI labelled HTTP ("dynamic").
//! On generated HTTP traffic every flow is HTTP, so the two should cost the same; on the
//! real merged trace most flows are not HTTP and the dynamic IDS skips their bytes.

use serde::Serialize;

use catena::io::gen_http::{generate_http, HttpGenOptions};
use catena::io::Trace;

use super::{median_run, print_table, traces, write_results, Args};

const RULES: &str = include_str!("../../../examples/ids/bench.rules");

#[derive(Serialize)]
struct Row {
    traffic: String,
    subscriptions: String,
    packets: u64,
    mpps: f64,
    ns_per_packet: f64,
    ids_data_events: u64,
    ids_alerts: u64,
    /// Throughput over the all-events run on the same traffic.
    vs_all_events: f64,
}

fn chain(dynamic: bool) -> String {
    let only = if dynamic { "only = [\"HTTP\"], " } else { "" };
    let rules = toml::Value::String(RULES.to_string());
    format!(
        "[input]\nports = 2\n[[nf]]\nname = \"mb\"\nkind = \"microbox\"\n\
         apps = [{{ kind = \"dpi\" }}, {{ kind = \"ids\", {only}rules = {rules} }}]\n"
    )
}

fn stat(s: &catena::runtime::Summary, name: &str) -> u64 {
    s.nfs
        .first()
        .and_then(|n| n.stats.iter().find(|(k, _)| k == name))
        .map_or(0, |(_, v)| *v)
}

pub fn run(a: &Args) -> anyhow::Result<Vec<String>> {
    let http = generate_http(&HttpGenOptions {
        connections: ((20_000.0 * a.scale) as usize).max(1),
        response_bytes: 64,
        ..Default::default()
    })
    .map_err(|e| anyhow::anyhow!(e))?;
    let merged = Trace::open(&traces::merged_path())?;
    let mut rows: Vec<Row> = Vec::new();
    for (label, trace) in [("http-64B", &http), ("merged", &merged)] {
        for dynamic in [false, true] {
            let (s, t) = median_run(a, &chain(dynamic), "dpi-ids", trace, 500_000)?;
            rows.push(Row {
                traffic: label.into(),
                subscriptions: if dynamic { "dynamic" } else { "all-events" }.into(),
                packets: s.packets_in,
                mpps: s.packets_in as f64 / t / 1e6,
                ns_per_packet: t * 1e9 / s.packets_in.max(1) as f64,
                ids_data_events: stat(&s, "ids_data_events"),
                ids_alerts: stat(&s, "ids_alerts"),
                vs_all_events: 0.0,
            });
        }
    }
    for i in 0..rows.len() {
        let base = rows
            .iter()
            .find(|r| r.traffic == rows[i].traffic && r.subscriptions == "all-events")
            .map_or(1.0, |r| r.mpps);
        rows[i].vs_all_events = rows[i].mpps / base.max(1e-12);
    }
    let header = [
        "traffic",
        "IDS subscriptions",
        "packets",
        "Mpps",
        "ns/pkt",
        "IDS data events",
        "alerts",
        "vs all events",
    ];
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.traffic.clone(),
                r.subscriptions.clone(),
                r.packets.to_string(),
                format!("{:.2}", r.mpps),
                format!("{:.1}", r.ns_per_packet),
                r.ids_data_events.to_string(),
                r.ids_alerts.to_string(),
                format!("{:.2}", r.vs_all_events),
            ]
        })
        .collect();
    write_results(a, "microboxes-dpi-ids", &header, &body, &rows)?;
    if a.json {
        return Ok(vec![serde_json::to_string(&rows)?]);
    }
    outln!("\nDPI -> IDS on one stack: IDS subscribed to all data vs only HTTP-labelled flows")?;
    print_table(&header, &body)?;
    Ok(Vec::new())
}
