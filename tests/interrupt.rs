//! SIGINT/SIGTERM during a trace replay (`catena run CHAIN -i X.pcap`): before session
//! 25 the default action killed the process (no summary, the `-o` pcap cut mid-record).
//! Now the replay stops between batches: the packets taken in are processed and
//! written, the output pcap is whole, the summary says the run was interrupted and
//! after how many packets, and the exit status is a shell's for the signal (130, 143),
//! with one worker, several (indexed and streamed), and stages; a second signal kills.

mod common;

use std::io::Write;
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
    let extra = [&["--loops", "1000000"], extra].concat();
    interrupted_on(&dir, &dataset(TRACE), chain, &extra, sig, name, code);
}

/// The same over `input`, with the run's own `extra` flags.
fn interrupted_on(
    dir: &tempfile::TempDir,
    input: &Path,
    chain: &str,
    extra: &[&str],
    sig: libc::c_int,
    name: &str,
    code: i32,
) {
    let f = dir.path().join("chain.toml");
    std::fs::write(&f, chain).unwrap();
    let out = dir.path().join("out.pcap");
    let mut child = Command::new(env!("CARGO_BIN_EXE_catena"))
        .arg("run")
        .arg(&f)
        .arg("-i")
        .arg(input)
        .args(["--json", "-o"])
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
    let what = format!("after {name} ({extra:?})");
    let o = wait::exit_within(child, Duration::from_secs(60), &what);
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

/// The streamed sharded path (`--workers N` over a mapped pcap read once, each worker
/// walking the map itself) reads the stop flag per chunk of batches: a single pass long
/// enough to aim a signal at (a generated capture, and a `busy` NF that spends a fixed
/// number of TSC ticks per packet) must stop with its summary and a merged output.
#[test]
fn sigterm_stops_streamed_sharded_workers_reading_the_capture_once() {
    let dir = tempdir();
    let big = dir.path().join("big.pcap");
    let o = Command::new(env!("CARGO_BIN_EXE_catena"))
        .args(["gen", "-n", "200000", "--size", "64", "-o"])
        .arg(&big)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let busy = "[[nf]]\nname = \"b\"\nkind = \"busy\"\ncycles = 20000\n";
    let extra = ["--workers", "2", "--loops", "1"];
    interrupted_on(&dir, &big, busy, &extra, libc::SIGTERM, "SIGTERM", 143);
}

/// After the first SIGINT the handler is gone (`SA_RESETHAND`): a replay stuck where
/// batches do not end (a pipe whose writer went quiet) is killed by the second.
#[test]
fn a_second_sigint_kills_a_replay_that_does_not_stop() {
    let dir = tempdir();
    let fifo = dir.path().join("in.pcap");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path in a directory of this test's own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let f = dir.path().join("chain.toml");
    std::fs::write(&f, WIRE).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_catena"))
        .arg("run")
        .arg(&f)
        .arg("-i")
        .arg(&fifo)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run catena");
    let pid = child.id();
    // Opening the write end waits for catena to open the read end; the header and a few
    // packets, then silence with the pipe held open.
    let mut w = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    let mut head = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    head.extend_from_slice(&[0xff, 0xff, 0, 0, 1, 0, 0, 0]);
    for i in 0..3u32 {
        for v in [1, i, 60, 60] {
            head.extend_from_slice(&v.to_le_bytes());
        }
        head.extend_from_slice(&[0u8; 60]);
    }
    w.write_all(&head).unwrap();
    let limit = Duration::from_secs(60);
    wait::until_catches(pid, libc::SIGINT, true, limit, "the handler");
    // SAFETY: a signal to the child this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGINT) }, 0);
    // Handled (the handler resets itself), and the replay still waits on the pipe.
    wait::until_catches(pid, libc::SIGINT, false, limit, "the first SIGINT handled");
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        wait::catches(pid, libc::SIGTERM),
        "exited after the first SIGINT"
    );
    // SAFETY: as above; the child has not been reaped.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGINT) }, 0);
    let o = wait::exit_within(child, limit, "after the second SIGINT");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(o.status.signal(), Some(libc::SIGINT), "{:?}", o.status);
    drop(w);
}
