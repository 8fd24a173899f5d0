//! Output that cannot be written never ends in exit 0 (issue 14, point 8): an output
//! (pcap sink, flow records, IDS alerts) that cannot be opened — a folder, a missing
//! folder — is one line before the first packet; a write that fails later (`/dev/full`)
//! ends the run non-zero after the summary.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::*;

/// One plain HTTP connection (the rule below alerts 3 times on it).
const TRACE: &str = "ndpi/pcap/http-lines-split.pcap";

fn run(chain: &str, extra: &[&str]) -> Output {
    let dir = tempdir();
    let f = dir.path().join("chain.toml");
    std::fs::write(&f, chain).unwrap();
    Command::new(env!("CARGO_BIN_EXE_catena"))
        .arg("run")
        .arg(&f)
        .arg("-i")
        .arg(dataset(TRACE))
        .arg("--json")
        .args(extra)
        .output()
        .expect("run catena")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Refused before the first packet: non-zero, one `error:` line naming `what`, no summary.
fn refused_up_front(o: &Output, what: &str) {
    let e = stderr(o);
    assert!(!o.status.success(), "exit 0; stderr: {e}");
    assert!(!e.contains("panicked"), "{e}");
    assert_eq!(e.trim_end().lines().count(), 1, "not one line: {e}");
    assert!(e.starts_with("error: ") && e.contains(what), "{e}");
    assert!(
        o.stdout.is_empty(),
        "a summary was printed: the run started"
    );
}

/// Failed while writing: the summary (JSON on stdout), then one `error:` line naming
/// `what`, and a non-zero exit.
fn failed_after_summary(o: &Output, what: &str) {
    let e = stderr(o);
    assert!(!o.status.success(), "exit 0; stderr: {e}");
    assert!(!e.contains("panicked"), "{e}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("the summary first");
    assert!(v["packets_in"].as_u64().unwrap() > 0);
    let errs = v["output_errors"].as_array().expect("output_errors");
    assert!(!errs.is_empty(), "{v}");
    assert_eq!(e.trim_end().lines().count(), 1, "not one line: {e}");
    assert!(e.starts_with("error: ") && e.contains(what), "{e}");
}

fn monitor(records: &Path) -> String {
    format!(
        "[[nf]]\nname = \"mon\"\nkind = \"flow_monitor\"\nrecords = {:?}\n",
        records.display().to_string()
    )
}

fn ids(alerts: &Path) -> String {
    format!(
        "[[nf]]\nname = \"mb\"\nkind = \"microbox\"\napps = [{{ kind = \"ids\", rules = 'alert tcp any any -> any any (msg:\"any\"; content:\"HTTP\"; sid:1;)', alerts = {:?} }}]\n",
        alerts.display().to_string()
    )
}

#[test]
fn flow_records_that_cannot_be_written_fail_the_run() {
    let dir = tempdir();
    refused_up_front(&run(&monitor(dir.path()), &[]), "nf `mon`: records");
    let missing = dir.path().join("no/such/folder/flows.jsonl");
    refused_up_front(&run(&monitor(&missing), &[]), "No such file or directory");
    failed_after_summary(&run(&monitor(Path::new("/dev/full")), &[]), "/dev/full");
    // A writable file: exit 0 and records in it.
    let ok = dir.path().join("flows.jsonl");
    let o = run(&monitor(&ok), &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::read_to_string(&ok).unwrap().lines().count() > 0);
}

#[test]
fn ids_alerts_that_cannot_be_written_fail_the_run() {
    let dir = tempdir();
    refused_up_front(&run(&ids(dir.path()), &[]), "nf `mb`: ids: alerts");
    let missing = dir.path().join("missing/alerts.txt");
    refused_up_front(&run(&ids(&missing), &[]), "No such file or directory");
    failed_after_summary(&run(&ids(Path::new("/dev/full")), &[]), "/dev/full");
    let ok = dir.path().join("alerts.txt");
    let o = run(&ids(&ok), &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    // Suricata 7 gives 2 here too (stream rules alert once per inspected chunk).
    assert_eq!(std::fs::read_to_string(&ok).unwrap(), "1 2\n");
}

#[test]
fn pcap_sinks_that_cannot_be_written_fail_the_run() {
    let dir = tempdir();
    let wire = "[[nf]]\nname = \"w\"\nkind = \"wire\"\n";
    let d = dir.path().display().to_string();
    refused_up_front(&run(wire, &["-o", &d]), "cannot create output");
    let missing = dir.path().join("x/out.pcap").display().to_string();
    refused_up_front(&run(wire, &["-o", &missing]), "cannot create output");
    failed_after_summary(
        &run(wire, &["-o", "/dev/full"]),
        "/dev/full: writing failed",
    );
    // A named sink of the chain file too.
    let named = "edges = [\"in -> w -> log\"]\n[[nf]]\nname = \"w\"\nkind = \"wire\"\n[[sink]]\nname = \"log\"\npath = \"/dev/full\"\n";
    failed_after_summary(&run(named, &[]), "/dev/full: writing failed");
}

/// Standard output that cannot be written (`/dev/full`; a full disk under `> file`):
/// before session 25 every command that prints panicked in `println!` (exit 101, a
/// backtrace). Now one `error: standard output: …` line and exit 1; `run` names the
/// summary as lost and still writes its output pcap whole.
#[test]
fn standard_output_that_cannot_be_written_fails_in_one_line() {
    let dir = tempdir();
    let out = dir.path().join("out.pcap");
    let chain = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/wire.toml");
    let (chain, trace) = (chain.to_str().unwrap(), dataset(TRACE));
    let trace = trace.to_str().unwrap();
    let stv = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/pipeline/wire.stv");
    let stv = stv.to_str().unwrap().to_string();
    let results = dir.path().join("results").to_str().unwrap().to_string();
    let cases: &[(&[&str], &str)] = &[
        (
            &["run", chain, "-i", trace, "-o", out.to_str().unwrap()],
            "(the summary is lost)",
        ),
        (
            &["run", chain, "-i", trace, "--json"],
            "(the summary is lost)",
        ),
        (&["check", chain], ""),
        (&["nfs"], ""),
        (&["dpi", trace], ""),
        (&["dpi", trace, "--json"], ""),
        (&["pipeline", &stv], ""),
        (
            &[
                "bench",
                "steve-ops",
                "--runs",
                "1",
                "--scale",
                "0.01",
                "--out",
                &results,
            ],
            "",
        ),
    ];
    for (args, note) in cases {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let o = Command::new(env!("CARGO_BIN_EXE_catena"))
            .args(*args)
            .stdout(full)
            .output()
            .unwrap();
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {e}");
        assert_eq!(
            e.trim_end().lines().count(),
            1,
            "{args:?}: not one line: {e}"
        );
        assert!(
            e.starts_with("error: standard output: No space left on device") && e.contains(note),
            "{args:?}: {e}"
        );
    }
    // The run's output is whole though its summary was lost.
    assert_eq!(
        packets(&out),
        packets(&dataset(TRACE)),
        "the wire chain forwards every packet"
    );
}

/// Unmounts the test's tmpfs however the test ends.
struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// `--workers 2 -o` on a full disk: each worker's part fails to write. Before session
/// 25 the parts were merged anyway and the merge's complaint (`o.pcap.w0.part: empty
/// file (0 bytes), not a pcap …`) hid the cause; now the cause is the error, once,
/// naming the output. Needs root for a 64 KiB tmpfs (skipped otherwise).
#[test]
fn sharded_output_on_a_full_disk_names_the_cause() {
    let dir = tempdir();
    let full = dir.path().join("full");
    std::fs::create_dir(&full).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
        .arg(&full)
        .output();
    if !mounted.is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: cannot mount a tmpfs (not root?)");
        return;
    }
    let _guard = Mounted(full.clone());
    let out = full.join("o.pcap");
    let chain = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/wire.toml");
    let o = Command::new(env!("CARGO_BIN_EXE_catena"))
        .arg("run")
        .arg(&chain)
        .arg("-i")
        .arg(dataset("bench/ndpi-ether-merged.pcap"))
        .arg("-o")
        .arg(&out)
        .args(["--workers", "2", "--json"])
        .output()
        .unwrap();
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert_eq!(e.trim_end().lines().count(), 1, "not one line: {e}");
    let cause = format!(
        "error: {}: writing failed: No space left on device",
        out.display()
    );
    assert!(e.starts_with(&cause), "{e}");
    assert_eq!(e.matches("No space left").count(), 1, "{e}");
    assert!(!e.contains(".part"), "{e}");
    // The summary says so too, and the parts are gone.
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("the summary");
    assert_eq!(v["output_errors"].as_array().unwrap().len(), 1, "{v}");
    let left: Vec<_> = std::fs::read_dir(&full).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}
