//! `catena bench ids`: the IDS engine against Suricata on the same traces and rules.
//! Ours: the engine fed by the minimal replay (flows + in-order reassembly), one core.
//! Peer: `suricata -r FILE -S RULES -k none --runmode single -l TMPDIR` (default
//! suricata.yaml, so its logging is on), wall time of the whole process including start-up,
//! which is also reported alone (the same command on a one-packet trace).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde::Serialize;

use catena::io::Trace;
use catena::nfs::ids::replay::{replay, ReplayOptions};
use catena::nfs::ids::{Ids, IdsConfig, RuleSet, Vars};

use super::{median, print_table, traces, write_results, Args};

#[derive(Serialize)]
struct Row {
    trace: String,
    packets: u64,
    rules: usize,
    catena_s: f64,
    catena_kpps: f64,
    catena_alerts: usize,
    suricata_s: f64,
    suricata_startup_s: f64,
    suricata_kpps: f64,
    suricata_alerts: usize,
    /// catena packets/s ÷ Suricata packets/s (Suricata's start-up subtracted).
    ratio: f64,
}

/// The checked-in rule file: the in-scope suricata-verify rules plus a few common ones.
fn default_rules() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/ids/bench.rules")
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
        let (mut ours, mut theirs, mut startup) = (Vec::new(), Vec::new(), Vec::new());
        let (mut our_alerts, mut their_alerts) = (0, 0);
        let one = tmp.join("one.pcap");
        Trace::from_packets(
            trace.link(),
            trace.header(),
            std::iter::once((0u64, trace.packet(0))),
        )
        .write_pcap(&one)?;
        for _ in 0..a.runs {
            let (set, _) = RuleSet::parse(&text, &Vars::suricata_defaults());
            let mut ids = Ids::new(set, IdsConfig::default());
            let mut alerts = Vec::with_capacity(1 << 16);
            let t = Instant::now();
            replay(&trace, &mut ids, &ReplayOptions::default(), &mut alerts);
            ours.push(t.elapsed().as_secs_f64());
            our_alerts = alerts.len();
            let (s, n) = suricata(&pcap, &rules_path, &tmp)?;
            theirs.push(s);
            their_alerts = n;
            startup.push(suricata(&one, &rules_path, &tmp)?.0);
        }
        let (o, s, st) = (median(&mut ours), median(&mut theirs), median(&mut startup));
        let s_kpps = packets as f64 / (s - st).max(1e-6) / 1e3;
        let o_kpps = packets as f64 / o.max(1e-9) / 1e3;
        rows.push(Row {
            trace: name.clone(),
            packets,
            rules: n_rules,
            catena_s: o,
            catena_kpps: o_kpps,
            catena_alerts: our_alerts,
            suricata_s: s,
            suricata_startup_s: st,
            suricata_kpps: s_kpps,
            suricata_alerts: their_alerts,
            ratio: o_kpps / s_kpps,
        });
    }
    let _ = std::fs::remove_dir_all(&tmp);
    let header = [
        "trace",
        "packets",
        "rules",
        "catena s",
        "catena kpps",
        "catena alerts",
        "suricata s",
        "startup s",
        "suricata kpps",
        "suricata alerts",
        "ratio",
    ];
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.trace.clone(),
                r.packets.to_string(),
                r.rules.to_string(),
                format!("{:.3}", r.catena_s),
                format!("{:.0}", r.catena_kpps),
                r.catena_alerts.to_string(),
                format!("{:.3}", r.suricata_s),
                format!("{:.3}", r.suricata_startup_s),
                format!("{:.0}", r.suricata_kpps),
                r.suricata_alerts.to_string(),
                format!("{:.2}", r.ratio),
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

/// Runs Suricata once: (wall seconds, alerts in fast.log).
fn suricata(pcap: &Path, rules: &Path, tmp: &Path) -> anyhow::Result<(f64, usize)> {
    let log = tmp.join("suricata");
    let _ = std::fs::remove_dir_all(&log);
    std::fs::create_dir_all(&log)?;
    let t = Instant::now();
    let out = Command::new("suricata")
        .arg("-r")
        .arg(pcap)
        .arg("-S")
        .arg(rules)
        .args(["-k", "none", "--runmode", "single", "-l"])
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
    let alerts = std::fs::read_to_string(log.join("fast.log"))
        .map(|s| s.lines().count())
        .unwrap_or(0);
    Ok((secs, alerts))
}
