//! `catena bench`: the papers' experiments, as tables, CSV/JSON and an SVG chart.
//! Timings are medians over several runs; ratios are taken within the same run.

mod chart;
mod dpi;
mod dpi_ids;
mod e2e;
mod fastpath;
mod ids;
mod microboxes;
mod micronf;
mod nfs;
mod ops;
mod paflow;
mod ports;
mod scratch;
mod steve;
mod traces;
mod tsc;

use std::path::PathBuf;

/// Reproduce an experiment and print its table; results go under --out.
#[derive(clap::Args)]
pub struct Args {
    /// steve (apps × traces), steve-decode (partial vs full decode), steve-ops (ns per
    /// operation), nfs (filter, NAT, Maglev, monitor), fastpath (cycles per packet with
    /// header-action consolidation off, on and auto, chains of 1-8 NFs), microboxes (chain
    /// length, consolidated vs per-NF TCP stacks, DPI -> IDS, peers), micronf (workers
    /// scaling, stages on rings, ring hop cost, prefetch), dpi (DPI engine next to ndpiReader), ids
    /// (IDS engine next to Suricata), e2e (`catena run` whole process next to Click
    /// userlevel and tcpdump on the same files; Click from $CLICK or /tmp/click), ports
    /// (live forwarding between veths in namespaces: catena on AF_PACKET and AF_XDP next
    /// to the Linux bridge and IP forwarding; needs root), paflow (PA-Flow: 1-3 `catena
    /// run` stages over veths, AF_PACKET, AF_PACKET through its TX ring (`tx_ring`, 64 B)
    /// and (64 B, latency to the µs) AF_XDP ports; each process's CPU per packet:
    /// aggregation off, on, and on with NFs working on views into the received
    /// aggregates, with the chain's ingress and egress plain or aggregated too; 2-3
    /// in-process stages; needs root).
    name: String,
    /// Runs per measurement; the median is reported.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    runs: u64,
    /// Print the rows as JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Folder for the CSV, JSON and SVG results.
    #[arg(long, default_value = "results")]
    out: PathBuf,
    /// Scale the generated traces' packet counts (e.g. 0.1 for a quick look).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Traces to use (default: smallflows,bigflows,4sics,merged). `merged` is
    /// ../shared/datasets/bench/ndpi-ether-merged.pcap; a path to any pcap works too.
    #[arg(long, value_delimiter = ',')]
    traces: Vec<String>,
    /// Only the rows whose "NF case" contains one of these (e.g. `maglev 10 backends`);
    /// for profiling one case under callgrind. Default: every row.
    #[arg(long)]
    only: Vec<String>,
    /// steve, steve-ops: also run the pipeline-language programs (examples/pipeline/*.stv)
    /// beside the native NFs, in the same run.
    #[arg(long)]
    pipeline: bool,
    /// Rule file for `ids` (default: examples/ids/bench.rules).
    #[arg(long)]
    rules: Option<PathBuf>,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    if !(a.scale > 0.0 && a.scale <= 10.0) {
        anyhow::bail!("--scale {} must be in (0, 10]", a.scale);
    }
    std::fs::create_dir_all(&a.out).map_err(|e| anyhow::anyhow!("{}: {e}", a.out.display()))?;
    match a.name.as_str() {
        "steve" => steve::apps(&a),
        "steve-decode" => steve::decode(&a),
        "steve-ops" => ops::run(&a),
        "nfs" => nfs::run(&a),
        "fastpath" => fastpath::run(&a),
        "microboxes" => microboxes::run(&a),
        "micronf" => micronf::run(&a),
        "dpi" => dpi::run(&a),
        "e2e" => e2e::run(&a),
        "ids" => ids::run(&a),
        "paflow" => paflow::run(&a),
        "ports" => ports::run(&a),
        other => {
            anyhow::bail!(
                "unknown benchmark `{other}` (known: steve, steve-decode, steve-ops, nfs, fastpath, microboxes, micronf, dpi, ids, e2e, paflow, ports)"
            )
        }
    }
}

/// Runs the chain `text` over `trace`, replayed until at least `min_packets` packets: one
/// untimed warm-up run, then `a.runs` timed ones. Returns the last run's summary and the
/// median seconds.
pub fn median_run(
    a: &Args,
    text: &str,
    name: &str,
    trace: &catena::io::Trace,
    min_packets: u64,
) -> anyhow::Result<(catena::runtime::Summary, f64)> {
    use catena::runtime::{Chain, ChainConfig, NoProgress, RunOptions, Runner};
    let cfg = ChainConfig::parse(text, name)?;
    let opts = RunOptions {
        loops: min_packets.div_ceil(trace.len().max(1) as u64),
        ..Default::default()
    };
    let mut secs = Vec::new();
    let mut last = None;
    for i in 0..=a.runs {
        let mut r = Runner::new(Chain::from_config(&cfg)?, trace.max_packet_len());
        let s = r.run(trace, &opts, &mut NoProgress)?;
        if i > 0 {
            secs.push(s.seconds);
            last = Some(s);
        }
    }
    let s = last.expect("runs >= 1");
    Ok((s, median(&mut secs).max(1e-9)))
}

/// Median of the samples (mean of the middle two for an even count).
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        return 0.0;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Writes `name.csv` and `name.json` under the results folder.
pub fn write_results<T: serde::Serialize>(
    a: &Args,
    name: &str,
    header: &[&str],
    rows: &[Vec<String>],
    json: &T,
) -> anyhow::Result<()> {
    let mut csv = header.join(",") + "\n";
    for r in rows {
        csv += &(r.join(",") + "\n");
    }
    let p = a.out.join(format!("{name}.csv"));
    std::fs::write(&p, csv).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
    let p = a.out.join(format!("{name}.json"));
    std::fs::write(&p, serde_json::to_string_pretty(json)?)
        .map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
    Ok(())
}

/// Prints a table with right-aligned columns.
pub fn print_table(header: &[&str], rows: &[Vec<String>]) -> anyhow::Result<()> {
    let mut w: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.len());
        }
    }
    let line = |cells: Vec<&str>| {
        let s: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{:>1$}", c, w[i]))
            .collect();
        outln!("{}", s.join("  "))
    };
    line(header.to_vec())?;
    for r in rows {
        line(r.iter().map(String::as_str).collect())?;
    }
    Ok(())
}
