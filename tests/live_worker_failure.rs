//! A live worker whose output fails mid-run, end to end from the CLI (no fault
//! injection): `catena run --workers 2 -o out.pcap` on AF_PACKET ports (one fanout
//! group), with `out.w1.pcap` a symlink to `/dev/full`, so worker 1's first write of its
//! 1 MiB buffer fails with ENOSPC. Expected: the run ends by itself within seconds (no
//! signal sent), exit 1, no panic, one error line naming the worker and the file, and
//! worker 0's file whole: tcpdump reads every packet worker 0 counted, each one of the
//! packets sent. Sender A ⇄ catena (wire) in C ⇄ B over veths with two queues;
//! tcpreplay of 20,000 packets of a real capture (~6 MB). The same with one worker and
//! `out.pcap` itself on `/dev/full`, without and with stages. Root only (skips otherwise).

mod netns;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Command;

use catena::io::Trace;
use netns::{Netns, Proc};
use serde_json::Value;

const N: usize = 20_000;

fn capture(dir: &Path) -> PathBuf {
    netns::merged_capture(dir, N)
}

/// Packets tcpdump reads from `f` (`--count`), and its stderr (where it says so if a
/// record is cut or the header is bad).
fn tcpdump_count(f: &Path) -> (usize, String) {
    let o = Command::new("tcpdump")
        .args(["--count", "-r"])
        .arg(f)
        .output()
        .expect("tcpdump");
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "tcpdump -r {}: {err}", f.display());
    // "N packets" on stdout.
    let out = String::from_utf8_lossy(&o.stdout);
    let n = out
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("tcpdump --count: {out}"));
    (n, err)
}

/// The chain forwarding C's two veths, run with `workers` and `-o out` inside C while
/// A replays the capture; returns catena's exit code, its stderr after the ready line,
/// and its JSON summary. Panics if it does not end by itself within 10 s. With `stages`,
/// two wires on two stages (the sink is the second stage's).
fn run_live(
    ns: &Netns,
    dir: &Path,
    workers: &str,
    out: &Path,
    stages: bool,
) -> (Option<i32>, String, Value) {
    let (a, c_in) = ns.veth_queues(0, 1, "i", 9000, 2);
    let (c_out, _b) = ns.veth_queues(1, 2, "o", 9000, 2);
    let cap = dir.join("cap.pcap");
    let fwd = dir.join("fwd.toml");
    std::fs::write(
        &fwd,
        format!("{}[[port]]\nname = \"in\"\nkind = \"af_packet\"\niface = \"{c_in}\"\n\n[[port]]\nname = \"out\"\nkind = \"af_packet\"\niface = \"{c_out}\"\n\n[[nf]]\nname = \"wire\"\nkind = \"wire\"\n{}",
            if stages { "stages = [[\"wire\"], [\"wire2\"]]\n\n" } else { "" },
            if stages { "\n[[nf]]\nname = \"wire2\"\nkind = \"wire\"\n" } else { "" },
        ),
    )
    .unwrap();
    let bin = env!("CARGO_BIN_EXE_catena");
    let args = [
        bin,
        "run",
        fwd.to_str().unwrap(),
        "--workers",
        workers,
        "--json",
        "-o",
        out.to_str().unwrap(),
    ];
    let mut catena = Proc::piped_in(&ns.names[1], &args);
    let mut err = BufReader::new(catena.0.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    assert!(line.contains("catena: running on 2 port(s)"), "{line}");
    netns::replay(&ns.names[0], &a, &cap);
    // No signal: the failed output ends the run. Before, it ran on until SIGTERM.
    let (stdout, code) = catena.finish(10);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    assert!(!rest.contains("panicked"), "{rest}");
    let v: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("the summary first ({e}): {stdout} {rest}"));
    (code, rest, v)
}

#[test]
fn a_live_worker_whose_file_fills_ends_the_run_naming_it() {
    if !netns::can_run("a_live_worker_whose_file_fills_ends_the_run_naming_it") {
        return;
    }
    let ns = Netns::new(3);
    let dir = tempfile::tempdir().unwrap();
    let cap = capture(dir.path());
    let out = dir.path().join("out.pcap");
    let (w0, w1) = (
        dir.path().join("out.w0.pcap"),
        dir.path().join("out.w1.pcap"),
    );
    std::os::unix::fs::symlink("/dev/full", &w1).unwrap();
    let (code, rest, v) = run_live(&ns, dir.path(), "2", &out, false);
    assert_eq!(code, Some(1), "{rest}");
    assert_eq!(
        rest,
        format!(
            "error: worker 1: {}: writing failed: No space left on device (os error 28)\n",
            w1.display()
        )
    );
    assert_eq!(v["output_errors"].as_array().map(Vec::len), Some(1), "{v}");
    let workers = v["workers"].as_array().expect("per-worker counters");
    let of = |w: u64| {
        workers
            .iter()
            .find(|x| x["worker"] == w)
            .unwrap_or_else(|| panic!("worker {w}: {v}"))
    };
    // Worker 1 had more than its 1 MiB buffer to write (that is how the write came).
    assert!(of(1)["packets_out"].as_u64().unwrap() > 0, "{v}");
    // Worker 0's file is whole: every packet it forwarded, readable by tcpdump, each
    // one byte for byte a packet A sent.
    let forwarded = of(0)["packets_out"].as_u64().unwrap() as usize;
    assert!(forwarded > 0, "{v}");
    let (read, complaint) = tcpdump_count(&w0);
    assert_eq!(read, forwarded, "tcpdump: {complaint}");
    assert!(!complaint.contains("truncated"), "{complaint}");
    let t = Trace::open(&w0).unwrap();
    assert_eq!(t.len(), forwarded);
    let c = Trace::open(&cap).unwrap();
    let sent: std::collections::HashSet<&[u8]> = (0..c.len()).map(|i| c.packet(i)).collect();
    assert!((0..t.len()).all(|i| sent.contains(t.packet(i))));
    assert!(!out.exists(), "no shared file");
}

/// One worker: the same end, the error naming the file alone.
#[test]
fn a_single_live_worker_whose_file_fills_ends_the_run() {
    if !netns::can_run("a_single_live_worker_whose_file_fills_ends_the_run") {
        return;
    }
    one_worker_on_a_full_file(false);
}

/// One worker with two stages: the file is the second stage's sink, written by its
/// thread; the same end (before, the run went on until SIGTERM).
#[test]
fn a_live_chain_with_stages_whose_file_fills_ends_the_run() {
    if !netns::can_run("a_live_chain_with_stages_whose_file_fills_ends_the_run") {
        return;
    }
    one_worker_on_a_full_file(true);
}

fn one_worker_on_a_full_file(stages: bool) {
    let ns = Netns::new(3);
    let dir = tempfile::tempdir().unwrap();
    capture(dir.path());
    let out = dir.path().join("out.pcap");
    std::os::unix::fs::symlink("/dev/full", &out).unwrap();
    let (code, rest, v) = run_live(&ns, dir.path(), "1", &out, stages);
    assert_eq!(code, Some(1), "{rest}");
    assert_eq!(
        rest,
        format!(
            "error: {}: writing failed: No space left on device (os error 28)\n",
            out.display()
        )
    );
    assert_eq!(v["output_errors"].as_array().map(Vec::len), Some(1), "{v}");
    assert!(v["packets_out"].as_u64().unwrap() > 0, "{v}");
}
