//! `catena dpi FILE`: the application protocol of every flow of a capture.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use catena::io::Trace;
use catena::nfs::dpi::trace::label_trace;

/// Label every flow of a capture by application protocol (payload inspection, with
/// nDPI's port fallback for flows nothing recognised).
#[derive(clap::Args)]
pub struct Args {
    /// A pcap or pcapng file.
    file: PathBuf,
    /// Print only the per-protocol totals.
    #[arg(long)]
    summary: bool,
    /// One JSON object per flow instead of the table.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Flow<'a> {
    flow: String,
    packets: u32,
    proto: &'static str,
    /// "dpi" (payload or IP protocol), "port" (fallback) or "none".
    by: &'static str,
    host: Option<&'a str>,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let trace = Trace::open(&a.file)?;
    let flows = label_trace(&trace);
    let mut totals: BTreeMap<&'static str, (u64, u64)> = BTreeMap::new();
    for f in &flows {
        let (proto, by) = match (f.detected, f.guessed) {
            (Some(p), _) => (p.name(), "dpi"),
            (None, Some(p)) => (p.name(), "port"),
            (None, None) => ("Unknown", "none"),
        };
        let t = totals.entry(proto).or_default();
        t.0 += 1;
        t.1 += u64::from(f.packets);
        if a.summary {
            continue;
        }
        let row = Flow {
            flow: f.key.to_string(),
            packets: f.packets,
            proto,
            by,
            host: f.host.as_deref(),
        };
        if a.json {
            outln!("{}", serde_json::to_string(&row)?)?;
        } else {
            outln!(
                "{}  {} pkts  {} ({}){}",
                row.flow,
                row.packets,
                row.proto,
                row.by,
                row.host.map(|h| format!("  {h}")).unwrap_or_default()
            )?;
        }
    }
    if !a.json || a.summary {
        outln!("{:>28}  {:>7}  {:>9}", "protocol", "flows", "packets")?;
        for (p, (n, k)) in &totals {
            outln!("{p:>28}  {n:>7}  {k:>9}")?;
        }
    }
    // As `run`: a bad record ends the input, the flows before it are labelled, and the
    // labelling fails (one line, after them), so a script never takes it as complete.
    if let Some(e) = trace.error() {
        eprintln!("error: {e} (the flows up to there are labelled)");
        return Ok(1);
    }
    Ok(0)
}
