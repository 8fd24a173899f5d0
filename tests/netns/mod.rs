//! Network namespaces and veth pairs that a test creates and always removes (the guard's
//! Drop deletes the namespaces, which deletes the veths in them), so live tests never
//! touch an interface they did not make.
#![allow(dead_code)]

use std::os::fd::AsRawFd;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// True when this process may create namespaces; otherwise prints why the test skips.
pub fn can_run(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped {test}: needs root (network namespaces and veth pairs)");
        return false;
    }
    if Command::new("ip").arg("-V").output().is_err() {
        eprintln!("skipped {test}: needs `ip` (iproute2)");
        return false;
    }
    true
}

fn ip(args: &[&str]) {
    let o = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        o.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr).trim()
    );
}

/// Runs `cmd` inside namespace `ns`.
pub fn in_ns(ns: &str, cmd: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).args(cmd);
    c
}

/// The first `n` packets of the merged dataset capture, written to `dir/cap.pcap` for
/// tcpreplay to send.
pub fn merged_capture(dir: &std::path::Path, n: usize) -> std::path::PathBuf {
    use catena::io::{PcapWriter, Trace};
    let src = std::path::PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/datasets/bench/ndpi-ether-merged.pcap"
    ));
    let t = Trace::open(&src).unwrap();
    let cap = dir.join("cap.pcap");
    let mut w = PcapWriter::create(&cap, t.header()).unwrap();
    for i in 0..n.min(t.len()) {
        let r = t.record(i);
        w.write_packet(r.ts_ns, r.wire_len, t.packet(i)).unwrap();
    }
    w.finish().unwrap();
    cap
}

/// Replays `cap` out of `iface` in namespace `ns` with `tcpreplay --topspeed`, to the end.
pub fn replay(ns: &str, iface: &str, cap: &std::path::Path) {
    let cap = cap.to_str().expect("a UTF-8 path");
    let s = in_ns(ns, &["tcpreplay", "-q", "-i", iface, "--topspeed", cap])
        .output()
        .expect("run tcpreplay");
    assert!(s.status.success(), "{}", String::from_utf8_lossy(&s.stderr));
}

/// A directory holding an `ip` that first runs the shell lines `guard` (the arguments in
/// `$@`; exiting refuses the step) and then the real `ip`, and PATH with it first: how a
/// test makes one of catena's `ip` steps fail.
pub fn fake_ip(guard: &str) -> (tempfile::TempDir, String) {
    let path = std::env::var("PATH").unwrap_or_default();
    let real = std::env::split_paths(&path)
        .map(|d| d.join("ip"))
        .find(|p| p.is_file())
        .expect("ip in PATH");
    let bin = tempfile::tempdir().unwrap();
    let fake = bin.path().join("ip");
    let script = format!("#!/bin/sh\n{guard}\nexec {} \"$@\"\n", real.display());
    std::fs::write(&fake, script).unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:{path}", bin.path().display());
    (bin, path)
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Namespaces made by one test; all are deleted when it drops (also on panic).
pub struct Netns {
    pub names: Vec<String>,
    tag: String,
}

impl Netns {
    /// `n` fresh namespaces with loopback up and IPv6 off (no stray neighbour
    /// discovery traffic on the veths).
    pub fn new(n: usize) -> Netns {
        let tag = format!(
            "c{}x{}",
            std::process::id() % 100_000,
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut g = Netns {
            names: Vec::new(),
            tag,
        };
        for i in 0..n {
            let name = format!("{}n{i}", g.tag);
            ip(&["netns", "add", &name]);
            g.names.push(name.clone());
            ip(&["-n", &name, "link", "set", "lo", "up"]);
            let o = in_ns(
                &name,
                &["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"],
            )
            .output()
            .expect("sysctl");
            assert!(
                o.status.success(),
                "sysctl: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            let _ = in_ns(
                &name,
                &["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"],
            )
            .output();
        }
        g
    }

    /// A veth pair named after this test (`tag` + suffix, ≤ 15 bytes), one end in
    /// namespace `a`, the other in `b`, both up with `mtu`. Returns the two names.
    pub fn veth(&self, a: usize, b: usize, suffix: &str, mtu: u32) -> (String, String) {
        let (x, y) = (
            format!("{}{suffix}a", self.tag),
            format!("{}{suffix}b", self.tag),
        );
        assert!(x.len() <= 15, "interface name {x} too long");
        let (na, nb) = (&self.names[a], &self.names[b]);
        ip(&[
            "-n", na, "link", "add", &x, "type", "veth", "peer", "name", &y, "netns", nb,
        ]);
        let m = mtu.to_string();
        ip(&["-n", na, "link", "set", &x, "mtu", &m, "up"]);
        ip(&["-n", nb, "link", "set", &y, "mtu", &m, "up"]);
        (x, y)
    }

    /// As [`veth`](Self::veth), with `queues` receive and transmit queues on each end
    /// (the kernel spreads flows over them by hash, as a multi-queue NIC does).
    pub fn veth_queues(
        &self,
        a: usize,
        b: usize,
        suffix: &str,
        mtu: u32,
        queues: u32,
    ) -> (String, String) {
        let (x, y) = (
            format!("{}{suffix}a", self.tag),
            format!("{}{suffix}b", self.tag),
        );
        assert!(x.len() <= 15, "interface name {x} too long");
        let (na, nb) = (&self.names[a], &self.names[b]);
        let q = queues.to_string();
        ip(&[
            "-n",
            na,
            "link",
            "add",
            &x,
            "numtxqueues",
            &q,
            "numrxqueues",
            &q,
            "type",
            "veth",
            "peer",
            "name",
            &y,
            "netns",
            nb,
            "numtxqueues",
            &q,
            "numrxqueues",
            &q,
        ]);
        let m = mtu.to_string();
        ip(&["-n", na, "link", "set", &x, "mtu", &m, "up"]);
        ip(&["-n", nb, "link", "set", &y, "mtu", &m, "up"]);
        (x, y)
    }

    /// Moves the calling thread into namespace `i` (sockets it opens live there).
    pub fn enter(&self, i: usize) {
        let f = std::fs::File::open(format!("/var/run/netns/{}", self.names[i])).expect("netns");
        // SAFETY: setns on a namespace file descriptor; affects this thread only.
        let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(r, 0, "setns: {}", std::io::Error::last_os_error());
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = Command::new("ip").args(["netns", "del", n]).output();
        }
    }
}

/// A child process killed (if still running) and reaped when dropped.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Proc {
    /// `cmd` started in namespace `ns`, its stdout and stderr piped.
    pub fn piped_in(ns: &str, cmd: &[&str]) -> Proc {
        Proc(
            in_ns(ns, cmd)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn in the namespace"),
        )
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: signalling our own child by its pid.
        unsafe { libc::kill(self.0.id() as i32, sig) };
    }

    /// Waits up to `secs` for exit; returns stdout and the exit code.
    pub fn finish(mut self, secs: u64) -> (String, Option<i32>) {
        let end = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Ok(Some(st)) = self.0.try_wait() {
                let mut out = String::new();
                if let Some(mut o) = self.0.stdout.take() {
                    let _ = std::io::Read::read_to_string(&mut o, &mut out);
                }
                return (out, st.code());
            }
            assert!(Instant::now() < end, "process did not exit in {secs} s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
