//! Input that fails mid-run with several workers, from the CLI: a record whose length
//! is absurd after 5,000 good ones (a real capture, cut and corrupted). Every way
//! `catena run --workers 2` takes a file (the shared map; `--copy`, the held index) ends
//! as one worker does: exit 1, one line naming the file, the record and its offset, the
//! summary with the 5,000 packets, and the same output bytes, which tcpdump reads whole
//! (tcpdump too stops at that record after 5,000 packets). A pipe, which only one worker
//! streams, is refused with several in one line that says so.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{dataset, tempdir};
use serde_json::Value;

const GOOD: usize = 5000;

/// The merged capture's first `GOOD` records, then one whose caplen is 0x7fffffff and
/// 200,000 bytes of what followed it; returns the bad record's offset.
fn corrupt(path: &Path) -> usize {
    let src = std::fs::read(dataset("bench/ndpi-ether-merged.pcap")).unwrap();
    let mut off = 24;
    for _ in 0..GOOD {
        let incl = u32::from_le_bytes(src[off + 8..off + 12].try_into().unwrap()) as usize;
        off += 16 + incl;
    }
    let mut b = src[..off + 200_000].to_vec();
    b[off + 8..off + 12].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
    std::fs::write(path, b).unwrap();
    off
}

fn catena(args: &[&str]) -> std::process::Output {
    let child = Command::new(env!("CARGO_BIN_EXE_catena"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::wait::exit_within(child, Duration::from_secs(60), "catena run")
}

fn tcpdump_count(f: &Path) -> String {
    let o = Command::new("tcpdump")
        .args(["--count", "-r"])
        .arg(f)
        .output()
        .expect("tcpdump");
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

#[test]
fn a_corrupt_record_mid_file_ends_every_sharded_path_as_one_worker_does() {
    let dir = tempdir();
    let input = dir.path().join("corrupt.pcap");
    let at = corrupt(&input);
    // tcpdump, the oracle, stops at the same record.
    assert_eq!(tcpdump_count(&input), format!("{GOOD} packets"));
    let wire = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/wire.toml");
    let want = format!(
        "error: {}: record {} at byte offset {at}: absurd caplen 2147483647 (more than 262144 = max(snaplen, 262144), capped at 256 MiB)\n",
        input.display(),
        GOOD + 1
    );
    let mut outputs = Vec::new();
    for (workers, extra) in [("1", None), ("2", None), ("2", Some("--copy"))] {
        let what = format!("--workers {workers} {}", extra.unwrap_or(""));
        let out = dir.path().join(format!("out{}.pcap", outputs.len()));
        let mut args = vec![
            "run",
            wire,
            "-i",
            input.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--json",
            "--workers",
            workers,
        ];
        args.extend(extra);
        let o = catena(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{what}: {err}");
        assert_eq!(err, want, "{what}");
        let v: Value = serde_json::from_slice(&o.stdout).expect("the summary");
        assert_eq!(v["packets_in"], GOOD as u64, "{what}: {v}");
        assert_eq!(v["packets_out"], GOOD as u64, "{what}: {v}");
        assert_eq!(tcpdump_count(&out), format!("{GOOD} packets"), "{what}");
        outputs.push(std::fs::read(&out).unwrap());
    }
    assert!(
        outputs[1] == outputs[0],
        "--workers 2: not one worker's output"
    );
    assert!(
        outputs[2] == outputs[0],
        "--workers 2 --copy: not one worker's output"
    );
}

#[test]
fn a_pipe_with_several_workers_is_refused_saying_one_worker_streams_it() {
    let dir = tempdir();
    let input = dir.path().join("corrupt.pcap");
    corrupt(&input);
    let bytes = std::fs::read(&input).unwrap();
    let wire = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/wire.toml");
    let mut child = Command::new(env!("CARGO_BIN_EXE_catena"))
        .args(["run", wire, "-i", "/dev/stdin", "--workers", "2"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // Whatever catena reads of it; a refusal closes the pipe (EPIPE here, ignored).
    let feed = std::thread::spawn(move || {
        let _ = stdin.write_all(&bytes);
    });
    let o = common::wait::exit_within(child, Duration::from_secs(30), "catena run");
    feed.join().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(
        err,
        "error: /dev/stdin: 2 workers need a file (they share it), not a pipe or a device: one worker streams those\n"
    );
    assert!(o.stdout.is_empty());
}
