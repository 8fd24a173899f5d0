//! `catena bench paflow` with aggregated ends (every hop of the chain aggregated: the
//! bench's own sender packs into stage 1, the last stage into the bench's receiver, which
//! unpacks): every packet arrives byte-equal (all but its send time) and in order, over
//! AF_PACKET and AF_XDP, with NFs on views too. The receiver's own check (`mismatched`)
//! is what this reads; `check`'s unit test in src/cli/bench/paflow.rs shows it refuses
//! any changed byte. Bounded: 1,000 packets per row, 2 stages, 60 s at most; the bench's
//! namespaces (`pf<pid>n<k>`) are removed by it, and by this test if it had to be killed.
//! The bench's stage files live in a private scratch directory, gone when it exits, on
//! success and on error alike: nothing is left in the temp dir.

mod common;
mod netns;

use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use serde_json::Value;

/// Removes the bench's namespaces whatever happened (they are named after its pid).
struct Cleanup(u32);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for k in 0..4 {
            let n = format!("pf{}n{k}", self.0 % 100_000);
            let _ = Command::new("ip").args(["netns", "del", &n]).output();
        }
    }
}

#[test]
fn every_hop_aggregated_delivers_the_same_packets_in_the_same_order() {
    if !netns::can_run("every_hop_aggregated_delivers_the_same_packets_in_the_same_order") {
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let child = common::spawn_bench(
        &[
            "paflow",
            "--runs",
            "1",
            "--scale",
            "0.001",
            "--json",
            "--only",
            "2 64 aggregate af_packet aggregated-ends",
            "--only",
            "2 64 aggregate+nf af_xdp aggregated-ends",
            "--only",
            "2 64 off af_packet plain-ends",
            "--only",
            "2 64 aggregate tx_ring plain-ends",
        ],
        out.path(),
    );
    let clean = Cleanup(child.id());
    // A panic in the wait drops `clean` too: the namespaces go whatever happens.
    let o = common::wait::exit_within(child, Duration::from_secs(60), "in bench paflow");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "bench failed: {err}");
    let rows: Value = serde_json::from_slice(&o.stdout).expect("JSON rows");
    let rows = rows.as_array().expect("an array");
    // Per selection: one top-rate row and two paced rows.
    assert_eq!(rows.len(), 12, "{rows:?}");
    let mut aggregated_ends = 0;
    for r in rows {
        let what = format!("{} {} {}", r["mode"], r["port"], r["ends"]);
        assert_eq!(r["mismatched"], 0, "{what}: {r}");
        assert_eq!(r["sent"], 1000, "{what}: {r}");
        // 1,000 packets fit every ring on the way: none may be lost.
        assert_eq!(r["received"], 1000, "{what}: {r}");
        // Each stage process's CPU per packet, stage 1 first, adds up to the stages'.
        let each: Vec<f64> = r["stage_cpu_ns_per_pkt_each"]
            .as_array()
            .expect("per-stage CPU")
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert_eq!(each.len(), 2, "{what}: {r}");
        let all = r["stage_cpu_ns_per_pkt"].as_f64().unwrap();
        assert!(
            (each.iter().sum::<f64>() - all).abs() < 1e-6 * all.max(1.0),
            "{what}: {r}"
        );
        if r["ends"] == "aggregated" {
            assert_ne!(r["mode"], "off");
            aggregated_ends += 1;
            if r["offered_pps"] == 0 {
                // At top rate the sender's batches of 32 leave as aggregates.
                assert!(r["aggregated_pct"].as_f64().unwrap() > 50.0, "{what}: {r}");
            }
        } else if r["port"] == "tx_ring" {
            // Plain ends, the middle hop aggregated, sent through the TX ring: at top
            // rate a stage's batches leave as aggregates.
            assert_eq!(r["ends"], "plain", "{what}");
            assert_eq!(r["mode"], "aggregate", "{what}");
            if r["offered_pps"] == 0 {
                assert!(r["aggregated_pct"].as_f64().unwrap() > 50.0, "{what}: {r}");
            }
        } else {
            assert_eq!(r["ends"], "plain", "{what}");
            assert_eq!(r["mode"], "off");
            assert_eq!(r["aggregated_pct"], 0.0);
        }
    }
    assert_eq!(aggregated_ends, 6);
    let left = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let tag = format!("pf{}n", clean.0 % 100_000);
    assert!(
        !String::from_utf8_lossy(&left.stdout).contains(&tag),
        "the bench left its namespaces"
    );
}

/// `catena bench paflow`, its smallest veth row (1 stage, 64 B, off, AF_PACKET: 1,000
/// packets at top rate and two paced rows), with `TMPDIR` at `tmp` and `PATH` at `path`.
fn smallest_row(tmp: &Path, path: &str, out: &Path) -> Child {
    let row = "1 64 off af_packet plain-ends";
    let args = [
        "paflow", "--runs", "1", "--scale", "0.001", "--json", "--only", row,
    ];
    common::spawn_bench_with(&args, out, tmp, path)
}

#[test]
fn a_finished_bench_leaves_nothing_in_the_temp_dir() {
    if !netns::can_run("a_finished_bench_leaves_nothing_in_the_temp_dir") {
        return;
    }
    let (tmp, out) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let path = std::env::var("PATH").unwrap_or_default();
    let child = smallest_row(tmp.path(), &path, out.path());
    let _clean = Cleanup(child.id());
    let o = common::wait::success_within(child, Duration::from_secs(60), "in bench paflow");
    let rows: Value = serde_json::from_slice(&o.stdout).expect("JSON rows");
    assert_eq!(rows.as_array().map(Vec::len), Some(3), "{rows}");
    // Before the scratch directory: `pf<pid>s1.toml` stayed here after every run.
    assert_eq!(common::names_in(tmp.path()), Vec::<String>::new());
}

#[test]
fn a_bench_whose_stage_cannot_start_leaves_nothing_either() {
    if !netns::can_run("a_bench_whose_stage_cannot_start_leaves_nothing_either") {
        return;
    }
    // An `ip` first in PATH that refuses `ip netns exec` (how the bench starts a stage)
    // and passes everything else to the real one: stage 1's chain file is written, then
    // the stage exits before running and the bench fails.
    let (_bin, path) =
        netns::fake_ip("if [ \"$1\" = netns ] && [ \"$2\" = exec ]; then exit 1; fi");
    let (tmp, out) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let child = smallest_row(tmp.path(), &path, out.path());
    let _clean = Cleanup(child.id());
    // A stage that never ran fails the bench.
    let err = common::wait::failure_within(child, Duration::from_secs(60), "in bench paflow");
    assert!(err.contains("stage 1 exited before running"), "{err}");
    // Before the scratch directory: `pf<pid>s1.toml` stayed here.
    assert_eq!(common::names_in(tmp.path()), Vec::<String>::new());
}
