//! AF_XDP ports: the XDP program catena attaches is gone when catena ends — by a signal,
//! killed outright, or failing to open a later port — and the errors a user meets are
//! one line saying what to do. Each test makes its own namespace and veth pair.

mod netns;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use netns::{in_ns, Netns};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_catena")
}

fn xdp_on(ns: &Netns, iface: &str) -> bool {
    let o = in_ns(&ns.names[0], &["ip", "link", "show", "dev", iface])
        .output()
        .unwrap();
    assert!(o.status.success());
    String::from_utf8_lossy(&o.stdout).contains("prog/xdp")
}

fn chain(dir: &std::path::Path, ifaces: &[&str]) -> std::path::PathBuf {
    let mut t = String::new();
    for (i, f) in ifaces.iter().enumerate() {
        t += &format!("[[port]]\nname = \"p{i}\"\nkind = \"af_xdp\"\niface = \"{f}\"\n\n");
    }
    t += "[[nf]]\nname = \"wire\"\nkind = \"wire\"\n";
    let p = dir.join("c.toml");
    std::fs::write(&p, t).unwrap();
    p
}

/// Waits (≤ 5 s) for `f` to hold.
fn until(mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(5);
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn xdp_program_is_removed_when_catena_is_killed() {
    if !netns::can_run("xdp_program_is_removed_when_catena_is_killed") {
        return;
    }
    let ns = Netns::new(2);
    let (a, b) = ns.veth(0, 1, "k", 1500);
    let dir = tempfile::tempdir().unwrap();
    let c = chain(dir.path(), &[&a]);
    let mut child = in_ns(&ns.names[0], &[bin(), "run", c.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let on = until(|| xdp_on(&ns, &a));
    // A second catena on the same interface is refused in one line.
    let c2 = chain(dir.path(), &[&a]);
    let o = in_ns(&ns.names[0], &[bin(), "run", c2.to_str().unwrap()])
        .output()
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(on, "catena attached its XDP program");
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.contains(&format!("{a}: queue 0 is taken by another AF_XDP socket")),
        "{e}"
    );
    // SIGKILL gives catena no chance to clean up: the kernel drops the BPF link.
    assert!(until(|| !xdp_on(&ns, &a)), "XDP program left on {a}");
    let _ = b;
}

#[test]
fn a_port_that_fails_to_open_leaves_no_xdp_program_behind() {
    if !netns::can_run("a_port_that_fails_to_open_leaves_no_xdp_program_behind") {
        return;
    }
    let ns = Netns::new(2);
    let (a, b) = ns.veth(0, 1, "f", 1500);
    // Port p0 opens (attaching its program); p1's interface is in the other namespace,
    // so it is not found and the run stops: p0's program must go with it.
    let dir = tempfile::tempdir().unwrap();
    let c = chain(dir.path(), &[&a, &b]);
    let o = in_ns(&ns.names[0], &[bin(), "run", c.to_str().unwrap()])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.contains(&format!("port `p1`: interface `{b}` not found")),
        "{e}"
    );
    assert!(!xdp_on(&ns, &a), "XDP program left on {a} after the error");
}

#[test]
fn af_xdp_without_root_is_one_line() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        // Unprivileged here already: the real case.
        let dir = tempfile::tempdir().unwrap();
        let c = chain(dir.path(), &["lo"]);
        let o = Command::new(bin())
            .args(["run", c.to_str().unwrap()])
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&o.stderr);
        assert_ne!(o.status.code(), Some(0));
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(e.contains("run as root"), "{e}");
        return;
    }
    if Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("skipped af_xdp_without_root_is_one_line: needs setpriv");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let c = chain(dir.path(), &["lo"]);
    let o = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            bin(),
            "run",
            c.to_str().unwrap(),
        ])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert_ne!(o.status.code(), Some(0), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.contains("run as root"), "{e}");
}
