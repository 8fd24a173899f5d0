//! `catena bench microboxes`: throughput against chain length (1–8 minimal TCP NFs,
//! `tcp_count` at the bytestream level), one consolidated stack for the whole chain vs one
//! stack per NF (the baseline: a chain of mOS-like instances), on generated HTTP traffic
//! with 64 B and 8 KB responses (Microboxes, SIGCOMM'18, the chain-length figure).
//!
//! Rows are [`Case`]s: a group, a label and a chain. Then the DPI → IDS chain with all
//! data events vs dynamic subscriptions (the paper's Figure 7c; [`super::dpi_ids`]), and
//! the real peers side by side: our DPI vs `ndpiReader -i` ([`super::dpi`]) and our IDS
//! vs `suricata -r` ([`super::ids`]) on the same trace and rules.

use serde::Serialize;

use catena::io::gen_http::{generate_http, HttpGenOptions};
use catena::io::Trace;

use super::{chart, print_table, steve, write_results, Args};

#[derive(Serialize)]
struct Row {
    /// Experiment group (e.g. `chain-length`).
    group: String,
    /// Traffic: the response size.
    traffic: String,
    /// Stack arrangement: `consolidated` or `per-nf`.
    mode: String,
    nfs: usize,
    packets: u64,
    mpps: f64,
    gbps: f64,
    ns_per_packet: f64,
    /// Throughput relative to the same mode with 1 NF.
    vs_one_nf: f64,
    /// Consolidated throughput over per-NF-stack throughput at the same length.
    vs_per_nf: f64,
}

/// One measured configuration.
pub struct Case {
    pub group: &'static str,
    pub traffic: String,
    pub mode: &'static str,
    pub nfs: usize,
    pub chain: String,
}

/// A microbox with `n` tcp_count apps, one stack or one per app.
fn chain(n: usize, mode: &str) -> String {
    let apps = vec!["{ kind = \"tcp_count\" }"; n].join(", ");
    format!(
        "[input]\nports = 2\n[[nf]]\nname = \"mb\"\nkind = \"microbox\"\nmode = \"{mode}\"\napps = [{apps}]\n"
    )
}

fn cases(traffic: &str) -> Vec<Case> {
    let mut v = Vec::new();
    for n in 1..=8 {
        for mode in ["consolidated", "per-nf"] {
            v.push(Case {
                group: "chain-length",
                traffic: traffic.to_string(),
                mode,
                nfs: n,
                chain: chain(n, mode),
            });
        }
    }
    v
}

fn measure(a: &Args, c: &Case, trace: &Trace) -> anyhow::Result<(u64, f64, f64)> {
    let (s, t) = super::median_run(a, &c.chain, "microboxes", trace, 1_000_000)?;
    Ok((s.packets_in, t, s.bytes_in as f64))
}

pub fn run(a: &Args) -> anyhow::Result<i32> {
    let mut rows: Vec<Row> = Vec::new();
    for (label, body, conns) in [("64B", 64usize, 20_000f64), ("8KB", 8192, 8_000f64)] {
        let trace = generate_http(&HttpGenOptions {
            connections: ((conns * a.scale) as usize).max(1),
            response_bytes: body,
            ..Default::default()
        })
        .map_err(|e| anyhow::anyhow!(e))?;
        for c in cases(label) {
            let (packets, t, bytes) = measure(a, &c, &trace)?;
            rows.push(Row {
                group: c.group.into(),
                traffic: c.traffic,
                mode: c.mode.into(),
                nfs: c.nfs,
                packets,
                mpps: packets as f64 / t / 1e6,
                gbps: bytes * 8.0 / t / 1e9,
                ns_per_packet: t * 1e9 / packets.max(1) as f64,
                vs_one_nf: 0.0,
                vs_per_nf: 0.0,
            });
        }
    }
    // Ratios within this run.
    let find = |rows: &[Row], g: &str, t: &str, m: &str, n: usize| {
        rows.iter()
            .find(|r| r.group == g && r.traffic == t && r.mode == m && r.nfs == n)
            .map(|r| r.gbps)
    };
    for i in 0..rows.len() {
        let (g, t, m, n) = (
            rows[i].group.clone(),
            rows[i].traffic.clone(),
            rows[i].mode.clone(),
            rows[i].nfs,
        );
        if let Some(one) = find(&rows, &g, &t, &m, 1) {
            rows[i].vs_one_nf = rows[i].gbps / one.max(1e-12);
        }
        if let Some(base) = find(&rows, &g, &t, "per-nf", n) {
            rows[i].vs_per_nf = rows[i].gbps / base.max(1e-12);
        }
    }
    let header = [
        "group",
        "traffic",
        "mode",
        "NFs",
        "packets",
        "Mpps",
        "Gbps",
        "ns/pkt",
        "vs 1 NF",
        "vs per-nf",
    ];
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.group.clone(),
                r.traffic.clone(),
                r.mode.clone(),
                r.nfs.to_string(),
                r.packets.to_string(),
                format!("{:.2}", r.mpps),
                format!("{:.2}", r.gbps),
                format!("{:.1}", r.ns_per_packet),
                format!("{:.2}", r.vs_one_nf),
                format!("{:.2}", r.vs_per_nf),
            ]
        })
        .collect();
    write_results(a, "microboxes", &header, &body, &rows)?;
    let bars: Vec<steve::Row> = rows
        .iter()
        .map(|r| steve::Row {
            app: r.mode.clone(),
            trace: format!("{} x{}", r.traffic, r.nfs),
            packets: r.packets,
            loops: 1,
            mpps: r.mpps,
            data_rate_gbps: r.gbps,
            throughput_gbps: r.gbps,
            ns_per_packet: r.ns_per_packet,
            cycles_per_packet: 0.0,
            forwarded: 1.0,
            runs: a.runs,
        })
        .collect();
    chart::bars(
        &a.out.join("microboxes.svg"),
        "Microboxes: Mpps vs chain length, consolidated vs per-NF stacks",
        &bars,
    )?;
    if a.json {
        outln!("{}", serde_json::to_string(&rows)?)?;
        for line in super::dpi_ids::run(a)? {
            outln!("{line}")?;
        }
        peers(a)?;
    } else {
        print_table(&header, &body)?;
        let at = |t: &str, m: &str, n: usize| find(&rows, "chain-length", t, m, n).unwrap_or(0.0);
        for t in ["64B", "8KB"] {
            outln!(
                "{t}: consolidated at 6 NFs = {:.0}% of 1 NF (target >= 80%), {:.2}x per-NF stacks (target >= 3x)",
                100.0 * at(t, "consolidated", 6) / at(t, "consolidated", 1).max(1e-12),
                at(t, "consolidated", 6) / at(t, "per-nf", 6).max(1e-12)
            )?;
        }
        outln!("(median of {} runs; each run at least 1M packets)", a.runs)?;
        super::dpi_ids::run(a)?;
        outln!("")?;
        peers(a)?;
    }
    Ok(0)
}

/// The real peers on the same traces (and rules): ndpiReader next to our DPI, Suricata
/// next to our IDS. Each prints its own table (or `--json` line).
fn peers(a: &Args) -> anyhow::Result<()> {
    super::dpi::run(a)?;
    super::ids::run(a)?;
    Ok(())
}
