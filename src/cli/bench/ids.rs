//! `catena bench ids`: the IDS against Suricata, doing the same work with the same output.
//! Ours: the product path — a chain with one `microbox` NF whose `ids` app writes EVE alert
//! records — timed from the first packet to the flushed output (the chain, rules
//! included, is built before the clock starts); and the whole `catena run` process.
//! Peer: `suricata -c examples/ids/suricata-alerts-only.yaml` (EVE alert records only)
//! with `-k none`, `stream.midstream=true`, `packet-alert-max=255`,
//! `stream.reassembly.randomize-chunk-size=no` (the chunks our stream inspection uses), in `--runmode single`
//! and `autofp`; its start-up and rule loading (the same command on a one-packet trace)
//! is subtracted for its processing time. Alert counts are printed beside the times.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde::Serialize;

use catena::io::Trace;
use catena::nfs::ids::{RuleSet, Vars};
use catena::runtime::{Chain, ChainConfig, NoProgress, RunOptions, Runner};

use super::{median, print_table, traces, write_results, Args};

#[derive(Serialize)]
struct Row {
    trace: String,
    packets: u64,
    rules: usize,
    /// Processing: first packet to flushed EVE file.
    catena_s: f64,
    /// The whole `catena run` process (rule loading included).
    catena_process_s: f64,
    catena_alerts: u64,
    /// Suricata single-threaded: whole process, and with start-up subtracted.
    single_process_s: f64,
    single_s: f64,
    single_alerts: u64,
    autofp_process_s: f64,
    autofp_s: f64,
    autofp_alerts: u64,
    /// Suricata single processing time ÷ catena processing time.
    ratio_single: f64,
    ratio_autofp: f64,
    /// Whole process ÷ whole process (single).
    ratio_process: f64,
}

/// The checked-in rule file: the in-scope suricata-verify rules plus a few common ones.
fn default_rules() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/ids/bench.rules")
}

fn yaml() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/ids/suricata-alerts-only.yaml")
}

fn chain_text(rules: &Path, eve: &Path) -> String {
    format!(
        "[[nf]]\nname = \"ids\"\nkind = \"microbox\"\ntimeout = 600\n\
         apps = [{{ kind = \"ids\", rules_file = '{}', eve = '{}', eve_flows = false }}]\n",
        rules.display(),
        eve.display()
    )
}

fn lines(p: &Path) -> u64 {
    std::fs::read_to_string(p).map_or(0, |s| s.lines().count() as u64)
}

pub fn run(a: &Args) -> anyhow::Result<i32> {
    let rules_path = a.rules.clone().unwrap_or_else(default_rules);
    let text = std::fs::read_to_string(&rules_path)
        .map_err(|e| anyhow::anyhow!("{}: {e}", rules_path.display()))?;
    let (set, warnings) = RuleSet::parse(&text, &Vars::suricata_defaults());
    for w in warnings.iter().take(5) {
        eprintln!("{}: {w}", rules_path.display());
    }
    let n_rules = set.len();
    drop(set);
    let names = if a.traces.is_empty() {
        vec!["merged".to_string()]
    } else {
        a.traces.clone()
    };
    let tmp = std::env::temp_dir().join(format!("catena-bench-ids-{}", std::process::id()));
    std::fs::create_dir_all(&tmp)?;
    let rules_abs = std::fs::canonicalize(&rules_path)?;
    let eve = tmp.join("catena-eve.json");
    let chain_file = tmp.join("chain.toml");
    std::fs::write(&chain_file, chain_text(&rules_abs, &eve))?;
    let cfg = ChainConfig::parse(&chain_text(&rules_abs, &eve), "bench-ids")?;
    let mut rows = Vec::new();
    for name in &names {
        let trace = traces::load(name, a.scale)?;
        let pcap = match name.as_str() {
            "merged" => traces::merged_path(),
            n if Path::new(n).exists() => PathBuf::from(n),
            _ => {
                let p = tmp.join(format!("{name}.pcap"));
                trace.write_pcap(&p)?;
                p
            }
        };
        let packets = trace.len() as u64;
        let one = tmp.join("one.pcap");
        Trace::from_packets(
            trace.link(),
            trace.header(),
            std::iter::once((0u64, trace.packet(0))),
        )
        .write_pcap(&one)?;
        let mut t: [Vec<f64>; 6] = Default::default();
        let mut alerts = [0u64; 3];
        for _ in 0..a.runs {
            let mut r = Runner::new(Chain::from_config(&cfg)?, trace.max_packet_len());
            let s = r.run(&trace, &RunOptions::default(), &mut NoProgress)?;
            t[0].push(s.seconds);
            drop(r);
            alerts[0] = lines(&eve);
            let w = Instant::now();
            let o = Command::new(std::env::current_exe()?)
                .arg("run")
                .arg(&chain_file)
                .arg("-i")
                .arg(&pcap)
                .output()?;
            if !o.status.success() {
                anyhow::bail!("catena run: {}", String::from_utf8_lossy(&o.stderr).trim());
            }
            t[1].push(w.elapsed().as_secs_f64());
            for (k, mode) in ["single", "autofp"].iter().enumerate() {
                let (whole, n) = suricata(&pcap, &rules_path, &tmp, mode)?;
                let (start, _) = suricata(&one, &rules_path, &tmp, mode)?;
                t[2 + 2 * k].push(whole);
                t[3 + 2 * k].push((whole - start).max(1e-6));
                alerts[1 + k] = n;
            }
        }
        let [c, cp, sp, s, ap, au] = t.map(|mut v| median(&mut v));
        rows.push(Row {
            trace: name.clone(),
            packets,
            rules: n_rules,
            catena_s: c,
            catena_process_s: cp,
            catena_alerts: alerts[0],
            single_process_s: sp,
            single_s: s,
            single_alerts: alerts[1],
            autofp_process_s: ap,
            autofp_s: au,
            autofp_alerts: alerts[2],
            ratio_single: s / c.max(1e-9),
            ratio_autofp: au / c.max(1e-9),
            ratio_process: sp / cp.max(1e-9),
        });
    }
    let _ = std::fs::remove_dir_all(&tmp);
    let header = [
        "trace",
        "packets",
        "rules",
        "catena s",
        "catena alerts",
        "single s",
        "single alerts",
        "autofp s",
        "autofp alerts",
        "x single",
        "x autofp",
        "catena proc s",
        "single proc s",
        "x proc",
    ];
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.trace.clone(),
                r.packets.to_string(),
                r.rules.to_string(),
                format!("{:.3}", r.catena_s),
                r.catena_alerts.to_string(),
                format!("{:.3}", r.single_s),
                r.single_alerts.to_string(),
                format!("{:.3}", r.autofp_s),
                r.autofp_alerts.to_string(),
                format!("{:.2}", r.ratio_single),
                format!("{:.2}", r.ratio_autofp),
                format!("{:.3}", r.catena_process_s),
                format!("{:.3}", r.single_process_s),
                format!("{:.2}", r.ratio_process),
            ]
        })
        .collect();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        print_table(&header, &table);
    }
    write_results(a, "ids", &header, &table, &rows)?;
    Ok(0)
}

/// Runs Suricata once: (wall seconds, alert records in its EVE file).
fn suricata(pcap: &Path, rules: &Path, tmp: &Path, mode: &str) -> anyhow::Result<(f64, u64)> {
    let log = tmp.join("suricata");
    let _ = std::fs::remove_dir_all(&log);
    std::fs::create_dir_all(&log)?;
    let t = Instant::now();
    let out = Command::new("suricata")
        .arg("-c")
        .arg(yaml())
        .arg("-r")
        .arg(pcap)
        .arg("-S")
        .arg(rules)
        .args(["-k", "none", "--runmode", mode])
        .args([
            "--set",
            "stream.midstream=true",
            "--set",
            "packet-alert-max=255",
            "--set",
            "stream.reassembly.randomize-chunk-size=no",
        ])
        .arg("-l")
        .arg(&log)
        .output()
        .map_err(|e| anyhow::anyhow!("running suricata: {e} (apt-get install suricata)"))?;
    let secs = t.elapsed().as_secs_f64();
    if !out.status.success() {
        anyhow::bail!(
            "suricata failed: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        );
    }
    Ok((secs, lines(&log.join("eve.json"))))
}
