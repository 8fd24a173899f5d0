//! `catena bench ports` keeps its pcaps and chain files in a private scratch directory
//! (src/cli/bench/scratch.rs), gone when it exits, on success and on error alike: nothing
//! is left in the temp dir. Bounded: `--only` a word no row has, so the bench makes its
//! namespaces and frame files and measures nothing (a few seconds); 60 s at most.
//! Coverage: catena-base removed its fixed-name directory too; what changed is the name
//! (fresh, `mkdir`-only, mode 0700) and that is checked in scratch.rs's unit tests.

mod common;
mod netns;

use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

/// Removes the bench's namespaces (`cbp<pid>{a,c,b}`) if it had to be killed.
struct Cleanup(u32);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for k in ["a", "c", "b"] {
            let n = format!("cbp{}{k}", self.0 % 100_000);
            let _ = Command::new("ip").args(["netns", "del", &n]).output();
        }
    }
}

/// `catena bench ports` with no row wanted, `TMPDIR` at `tmp` and `PATH` at `path`.
fn no_rows(tmp: &Path, path: &str, out: &Path) -> Child {
    let args = [
        "ports",
        "--scale",
        "0.001",
        "--json",
        "--only",
        "no row has this",
    ];
    common::spawn_bench_with(&args, out, tmp, path)
}

fn tools() -> bool {
    ["tcpreplay", "tcpdump"]
        .iter()
        .all(|t| Command::new(t).arg("-V").output().is_ok())
}

#[test]
fn a_finished_ports_bench_leaves_nothing_in_the_temp_dir() {
    if !netns::can_run("a_finished_ports_bench_leaves_nothing_in_the_temp_dir") || !tools() {
        return;
    }
    let (tmp, out) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let path = std::env::var("PATH").unwrap_or_default();
    let child = no_rows(tmp.path(), &path, out.path());
    let _clean = Cleanup(child.id());
    let o = common::wait::success_within(child, Duration::from_secs(60), "in bench ports");
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "[]");
    assert_eq!(common::names_in(tmp.path()), Vec::<String>::new());
}

#[test]
fn a_ports_bench_that_fails_to_set_up_leaves_nothing_either() {
    if !netns::can_run("a_ports_bench_that_fails_to_set_up_leaves_nothing_either") || !tools() {
        return;
    }
    // An `ip` first in PATH that refuses to make veths and passes everything else to the
    // real one: the scratch directory and the namespaces exist, then the lab fails.
    let (_bin, path) = netns::fake_ip(
        "for a in \"$@\"; do [ \"$a\" = veth ] && { echo refused >&2; exit 1; }; done",
    );
    let (tmp, out) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let child = no_rows(tmp.path(), &path, out.path());
    let pid = child.id();
    let _clean = Cleanup(pid);
    // The lab failed: so does the bench.
    let err = common::wait::failure_within(child, Duration::from_secs(60), "in bench ports");
    assert!(err.contains("refused"), "{err}");
    assert_eq!(common::names_in(tmp.path()), Vec::<String>::new());
    // The namespaces went with the lab.
    let ns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let tag = format!("cbp{}", pid % 100_000);
    assert!(
        !String::from_utf8_lossy(&ns.stdout).contains(&tag),
        "the bench left its namespaces"
    );
}
