//! SIGINT/SIGTERM during a trace replay (`catena run CHAIN -i X.pcap`): before session
//! 25 the default action killed the process (no summary, the `-o` pcap cut mid-record).
//! Now the replay stops between batches: the packets taken in are processed and
//! written, the output pcap is whole, the summary says the run was interrupted and
//! after how many packets, and the exit status is a shell's for the signal (130, 143),
//! with one worker, several, and stages.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use catena::io::Trace;
use common::*;

/// A small capture, replayed many times: the run lasts minutes unless stopped.
const TRACE: &str = "ndpi/pcap/bittorrent.pcap";

const WIRE: &str = "[input]\nports = 2\n[[nf]]\nname = \"wire\"\nkind = \"wire\"\n";

const STAGES: &str = "stages = [[\"acl\"], [\"wire\"]]\n[input]\nports = 2\n[[nf]]\nname = \"acl\"\nkind = \"ip_filter\"\ndefault = \"allow\"\nrules = [\"deny udp dst port 53\"]\n[[nf]]\nname = \"wire\"\nkind = \"wire\"\n";

/// Whether any file in `dir` holds packets (the replay has begun: the handlers are in).
fn writing(dir: &Path) -> bool {
    std::fs::read_dir(dir).unwrap().flatten().any(|e| {
        e.file_name().to_string_lossy().contains("out.pcap")
            && e.metadata().is_ok_and(|m| m.len() > 4096)
    })
}

/// Runs `chain` over the trace looped, sends `sig` once packets are being written, and
/// checks the interrupted run's summary, status and output.
fn interrupted(chain: &str, extra: &[&str], sig: libc::c_int, name: &str, code: i32) {
    let dir = tempdir();
    let f = dir.path().join("chain.toml");
    std::fs::write(&f, chain).unwrap();
    let out = dir.path().join("out.pcap");
    let mut child = Command::new(env!("CARGO_BIN_EXE_catena"))
        .arg("run")
        .arg(&f)
        .arg("-i")
        .arg(dataset(TRACE))
        .args(["--loops", "1000000", "--json", "-o"])
        .arg(&out)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run catena");
    let t0 = Instant::now();
    while !writing(dir.path()) {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{extra:?}: no output after 60 s"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "{extra:?}: ended early"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // Sent from here: a `&` job of a non-interactive shell would ignore SIGINT.
    // SAFETY: a signal to the child this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, sig) }, 0);
    let t1 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t1.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("{extra:?}: still running 60 s after {name}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let o = child.wait_with_output().unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{extra:?}: {e}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|_| panic!("{extra:?}: no summary; stderr: {e}"));
    let n = v["packets_in"].as_u64().unwrap();
    assert!(n > 0, "{v}");
    assert_eq!(v["interrupted"]["signal"], name, "{v}");
    assert_eq!(v["interrupted"]["after_packets"].as_u64(), Some(n), "{v}");
    assert_eq!(
        e.trim_end(),
        format!("error: interrupted by {name} after {n} packets"),
        "{extra:?}"
    );
    // Whole: every record the summary counts, none cut.
    let t = Trace::open(&out).expect("the output opens");
    assert!(t.error().is_none(), "{extra:?}: {:?}", t.error());
    assert_eq!(t.len() as u64, v["packets_out"].as_u64().unwrap(), "{v}");
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().contains(".part"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn sigint_stops_a_replay_with_its_summary_and_a_whole_output() {
    interrupted(WIRE, &[], libc::SIGINT, "SIGINT", 130);
}

#[test]
fn sigterm_stops_sharded_workers_with_their_summary_and_a_merged_output() {
    interrupted(WIRE, &["--workers", "2"], libc::SIGTERM, "SIGTERM", 143);
}

#[test]
fn sigint_stops_stages_with_their_summary_and_a_whole_output() {
    interrupted(STAGES, &[], libc::SIGINT, "SIGINT", 130);
}
