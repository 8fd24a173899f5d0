//! `catena bench dpi`: the DPI engine labelling every flow of a capture, next to
//! `ndpiReader -i FILE` on the same file. Ours is timed in process over the trace already
//! in memory (flow table, header walk, TCP ordering and detection included); for
//! ndpiReader both its own "Packet Processing Time" (reading the pcap included) and the
//! wall time of the whole process (start-up and protocol setup too) are reported.
//! The whole `catena dpi --summary FILE` process is timed too, so the table shows
//! processing next to processing and whole process next to whole process. Ratios are
//! ndpiReader time / our time of the same kind, taken in the same run.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use serde::Serialize;

use catena::nfs::dpi::trace::Labeller;

use super::{median, print_table, traces, write_results, Args};

#[derive(Serialize)]
struct Row {
    tool: String,
    trace: String,
    packets: u64,
    seconds: f64,
    mpps: f64,
    /// Time of this tool over catena's time of the same kind (processing or whole
    /// process; > 1: catena is faster).
    ratio_vs_catena: f64,
    flows: Option<u64>,
    labelled: Option<u64>,
}

fn trace_path(name: &str) -> PathBuf {
    if name == "merged" {
        traces::merged_path()
    } else {
        PathBuf::from(name)
    }
}

/// ndpiReader's wall time and its reported processing time, in seconds.
fn ndpi_reader(path: &std::path::Path) -> anyhow::Result<(f64, f64)> {
    let t0 = Instant::now();
    let out = Command::new("ndpiReader")
        .arg("-i")
        .arg(path)
        .output()
        .map_err(|e| anyhow::anyhow!("ndpiReader: {e} (apt-get install ndpi)"))?;
    let wall = t0.elapsed().as_secs_f64();
    if !out.status.success() {
        anyhow::bail!("ndpiReader -i {} failed: {}", path.display(), out.status);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let ms = text
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("Packet Processing Time:")?
                .trim()
                .strip_suffix("msec")?
                .trim()
                .parse::<f64>()
                .ok()
        })
        .ok_or_else(|| anyhow::anyhow!("ndpiReader printed no \"Packet Processing Time\""))?;
    Ok((wall, ms / 1000.0))
}

pub fn run(a: &Args) -> anyhow::Result<i32> {
    let names = if a.traces.is_empty() {
        vec!["merged".to_string()]
    } else {
        a.traces.clone()
    };
    let mut rows = Vec::new();
    for name in &names {
        let trace = traces::load(name, 1.0)?;
        let path = trace_path(name);
        let n = trace.len() as u64;
        let (mut ours, mut wall, mut proc_) = (Vec::new(), Vec::new(), Vec::new());
        let mut our_wall = Vec::new();
        let mut labels = Vec::new();
        // One untimed warm-up run of each first.
        for i in 0..=a.runs {
            let t0 = Instant::now();
            let mut l = Labeller::new();
            let (bytes, records) = trace.raw();
            for r in records {
                let off = r.off as usize;
                l.packet(trace.link(), &bytes[off..off + r.caplen as usize]);
            }
            labels = l.finish();
            let t = t0.elapsed().as_secs_f64();
            let (w, p) = ndpi_reader(&path)?;
            let t1 = Instant::now();
            let o = Command::new(std::env::current_exe()?)
                .args(["dpi", "--summary"])
                .arg(&path)
                .output()?;
            if !o.status.success() {
                anyhow::bail!("catena dpi: {}", String::from_utf8_lossy(&o.stderr).trim());
            }
            let tw = t1.elapsed().as_secs_f64();
            if i > 0 {
                our_wall.push(tw);
                ours.push(t);
                wall.push(w);
                proc_.push(p);
            }
        }
        let ours = median(&mut ours).max(1e-9);
        let our_wall = median(&mut our_wall).max(1e-9);
        let flows = labels.len() as u64;
        let labelled = labels.iter().filter(|f| f.label().is_some()).count() as u64;
        let row = |tool: &str, s: f64, base: f64, fl: Option<u64>, lb: Option<u64>| Row {
            tool: tool.into(),
            trace: name.clone(),
            packets: n,
            seconds: s,
            mpps: n as f64 / s.max(1e-9) / 1e6,
            ratio_vs_catena: s / base,
            flows: fl,
            labelled: lb,
        };
        rows.push(row(
            "catena dpi (processing)",
            ours,
            ours,
            Some(flows),
            Some(labelled),
        ));
        rows.push(row(
            "ndpiReader (processing)",
            median(&mut proc_),
            ours,
            None,
            None,
        ));
        rows.push(row("catena dpi (wall)", our_wall, our_wall, None, None));
        rows.push(row(
            "ndpiReader (wall)",
            median(&mut wall),
            our_wall,
            None,
            None,
        ));
    }
    let header = [
        "tool",
        "trace",
        "packets",
        "ms",
        "Mpps",
        "× catena",
        "flows",
        "labelled",
    ];
    let opt = |v: Option<u64>| v.map_or("-".into(), |v| v.to_string());
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.tool.clone(),
                r.trace.clone(),
                r.packets.to_string(),
                format!("{:.1}", r.seconds * 1e3),
                format!("{:.2}", r.mpps),
                format!("{:.2}", r.ratio_vs_catena),
                opt(r.flows),
                opt(r.labelled),
            ]
        })
        .collect();
    write_results(a, "dpi", &header, &body, &rows)?;
    if a.json {
        outln!("{}", serde_json::to_string(&rows)?)?;
    } else {
        print_table(&header, &body)?;
        outln!(
            "(median of {} runs; × catena = that tool's time / catena's time of the same kind)",
            a.runs
        )?;
    }
    Ok(0)
}
