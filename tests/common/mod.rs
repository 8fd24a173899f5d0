//! Shared by the integration tests: dataset paths, running chains, external oracles.
#![allow(dead_code)]

pub mod nat;
pub mod wait;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use catena::io::Trace;
use catena::runtime::{Chain, ChainConfig, NoProgress, RunOptions, Runner, Summary};

/// Starts `catena bench ARGS --out OUT` with stdout and stderr piped, to be awaited with a
/// bound ([`wait::exit_within`]).
pub fn spawn_bench(args: &[&str], out: &Path) -> std::process::Child {
    bench(args, out).spawn().expect("spawn catena bench")
}

/// [`spawn_bench`] with `TMPDIR` at `tmp` and `PATH` at `path`.
pub fn spawn_bench_with(args: &[&str], out: &Path, tmp: &Path, path: &str) -> std::process::Child {
    bench(args, out)
        .env("TMPDIR", tmp)
        .env("PATH", path)
        .spawn()
        .expect("spawn catena bench")
}

fn bench(args: &[&str], out: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_catena"));
    c.arg("bench").args(args).arg("--out").arg(out);
    c.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    c
}

/// The `catena` binary of this build, run with `args` to its end.
pub fn catena(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_catena"))
        .args(args)
        .output()
        .expect("run catena")
}

pub fn datasets() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/datasets"))
}

pub fn dataset(rel: &str) -> PathBuf {
    let p = datasets().join(rel);
    assert!(
        p.exists(),
        "missing dataset {} (the repo must sit beside shared/)",
        p.display()
    );
    p
}

/// Every capture file under the datasets folder.
pub fn all_captures() -> Vec<PathBuf> {
    fn walk(d: &Path, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(d) else { return };
        let mut v: Vec<_> = rd.flatten().map(|e| e.path()).collect();
        v.sort();
        for p in v {
            if p.is_dir() {
                walk(&p, out);
            } else if matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("pcap" | "pcapng" | "cap")
            ) {
                out.push(p);
            }
        }
    }
    let mut v = Vec::new();
    walk(&datasets(), &mut v);
    v
}

/// Fails with an install hint rather than skipping: CI installs the oracles.
pub fn require(tool: &str) {
    let ok = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .map(|o| o.status.success());
    assert!(
        ok.unwrap_or(false),
        "`{tool}` is needed by this test: apt-get install {tool} (see .ci/run)"
    );
}

pub fn run_chain(text: &str, trace: &Trace, output: Option<&Path>) -> Summary {
    let cfg = ChainConfig::parse(text, "test.toml").expect("config");
    let chain = Chain::from_config(&cfg).expect("chain");
    let mut r = Runner::new(chain, trace.max_packet_len());
    let mut opts = RunOptions::default();
    if let Some(o) = output {
        opts.outputs.push(("out".into(), o.to_path_buf()));
    }
    r.run(trace, &opts, &mut NoProgress).expect("run")
}

/// (timestamp µs, bytes) of every packet, for comparing captures across formats.
pub fn packets(p: &Path) -> Vec<(u64, Vec<u8>)> {
    let t = Trace::open(p).unwrap_or_else(|e| panic!("{e}"));
    (0..t.len())
        .map(|i| (t.record(i).ts_ns / 1000, t.packet(i).to_vec()))
        .collect()
}

pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

// IDS per-rule alert counts, ours and Suricata's, for the agreement tests.

pub fn alert_counts(text: &str) -> BTreeMap<u32, u64> {
    text.lines()
        .filter_map(|l| {
            let (s, n) = l.split_once(' ')?;
            Some((s.parse().ok()?, n.parse().ok()?))
        })
        .collect()
}

pub fn suricata_alert_counts(pcap: &Path, rules: &Path, dir: &Path) -> BTreeMap<u32, u64> {
    let o = Command::new("suricata")
        .arg("-r")
        .arg(pcap)
        .arg("-S")
        .arg(rules)
        .arg("-l")
        .arg(dir)
        .args(["-k", "none", "--set", "stream.midstream=true"])
        .args(["--set", "packet-alert-max=255"])
        // Raw stream chunks of exactly 2,560 bytes (not ±10 % at random per run), so
        // stream rules' counts are reproducible (docs/ids.md).
        .args(["--set", "stream.reassembly.randomize-chunk-size=no"])
        .output()
        .expect("suricata");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut m = BTreeMap::new();
    for l in std::fs::read_to_string(dir.join("eve.json"))
        .unwrap()
        .lines()
    {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        if v["event_type"] == "alert" {
            *m.entry(v["alert"]["signature_id"].as_u64().unwrap() as u32)
                .or_insert(0) += 1;
        }
    }
    m
}

/// Runs `catena run` with one `microbox` ids app over `pcap`; `output` is the app's output
/// settings (e.g. `alerts = "ours.txt"`), written into `dir`.
pub fn run_catena_ids(pcap: &Path, rules: &Path, dir: &Path, output: &str) {
    let chain = dir.join("chain.toml");
    std::fs::write(
        &chain,
        format!(
            "[[nf]]\nname = \"ids\"\nkind = \"microbox\"\ntimeout = 600\n\
             apps = [{{ kind = \"ids\", rules_file = '{}', {output} }}]\n",
            rules.display()
        ),
    )
    .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_catena"))
        .arg("run")
        .arg(&chain)
        .arg("-i")
        .arg(pcap)
        .output()
        .expect("catena");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

pub fn catena_ids_counts(pcap: &Path, rules: &Path, dir: &Path) -> BTreeMap<u32, u64> {
    run_catena_ids(pcap, rules, dir, "alerts = \"ours.txt\"");
    alert_counts(&std::fs::read_to_string(dir.join("ours.txt")).unwrap())
}

/// Drops a run summary's fields that depend on the clock (and the sinks' file names), so
/// two runs' summaries compare by their counters.
pub fn drop_timings(v: &mut serde_json::Value) {
    let m = v.as_object_mut().expect("a summary object");
    for k in [
        "seconds",
        "seconds_total",
        "mpps",
        "mpps_total",
        "throughput_gbps",
        "data_rate_gbps",
        "sinks",
    ] {
        m.remove(k);
    }
}

/// What is in `dir`, by name (a test that checks nothing was left behind).
pub fn names_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}
