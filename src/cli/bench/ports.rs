//! `catena bench ports`: live forwarding between two veth pairs in three namespaces this
//! benchmark makes (sender A ⇄ forwarder C ⇄ receiver B), for catena's wire and firewall
//! on AF_PACKET (sendmmsg and TX ring) and AF_XDP, next to the kernel forwarding between
//! the same veths (a Linux bridge, IP forwarding), with `tcpreplay --topspeed` into a
//! veth nobody forwards from as the sender's ceiling. Throughput: packets B received over
//! the sender's time; latency: A's and B's tcpdump timestamps of the same packet at a
//! fixed offered rate. Needs root, `ip`, `tcpreplay`, `tcpdump`; removes all it made.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::scratch::Scratch;
use super::{print_table, write_results, Args};
use catena::io::{PcapHeader, PcapWriter, Trace};

const MAC_A: [u8; 6] = [2, 0, 0, 0, 0, 0xa0];
const MAC_C0: [u8; 6] = [2, 0, 0, 0, 0, 0xc0];
const MAC_C1: [u8; 6] = [2, 0, 0, 0, 0, 0xc1];
const MAC_B: [u8; 6] = [2, 0, 0, 0, 0, 0xb0];
/// Where the frames are addressed (and where IP forwarding sends them): a MAC nobody has,
/// so B's stack drops each at once as not for it (`PACKET_OTHERHOST` in `ip_rcv`), as
/// C's does in the ceiling rows. veth runs the receiver's stack on the sending CPU, so a
/// frame for B's own MAC went through a failed route lookup (a `dst` allocated per
/// packet, `ip_error`) on the forwarder's CPU: 46% of catena's cycles in a perf profile,
/// work of the receiver, not of the forwarder. B's veth counts every frame either way.
const MAC_SINK: [u8; 6] = [2, 0, 0, 0, 0, 0xbf];

/// Where frames are addressed: MAC_SINK, or B's own MAC with `CATENA_BENCH_TO_B=1` (the
/// receiver of the runs before session 12, to compare with them).
fn dst_mac() -> [u8; 6] {
    if std::env::var_os("CATENA_BENCH_TO_B").is_some() {
        MAC_B
    } else {
        MAC_SINK
    }
}
/// Offered rate for the latency rows (packets per second).
const LATENCY_PPS: u64 = 20_000;

#[derive(Serialize, Clone)]
struct Row {
    case: String,
    /// Frame size on the wire, with the 4-byte FCS (the pcap holds 4 bytes less).
    frame_bytes: usize,
    sent: u64,
    delivered: u64,
    loss_pct: f64,
    sender_secs: f64,
    mpps: f64,
    gbps: f64,
    /// At LATENCY_PPS offered.
    p50_us: Option<f64>,
    p99_us: Option<f64>,
    /// catena's CPU time over the throughput run, as a share of the sender's time.
    catena_user_pct: Option<f64>,
    catena_sys_pct: Option<f64>,
    kernel_drops: Option<u64>,
    /// catena's TSC cycles per packet in each step of its loop, over the throughput
    /// run: taking batches off the ports, the chain, sending.
    ingest_cycles: Option<f64>,
    chain_cycles: Option<f64>,
    flush_cycles: Option<f64>,
    /// Packets per batch catena took off its ports (per-batch costs spread over these).
    batch_packets: Option<f64>,
    /// catena's CPU time (user + system, from /proc) per packet delivered: the
    /// forwarder's cost, whatever the sender's speed; time descheduled is not in it.
    cpu_ns_per_packet: Option<f64>,
}

fn mac(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn sh(args: &[&str]) -> anyhow::Result<String> {
    let o = Command::new(args[0]).args(&args[1..]).output()?;
    if !o.status.success() {
        anyhow::bail!(
            "{}: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&o.stdout).to_string())
}

fn in_ns(ns: &str, cmd: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).args(cmd);
    c
}

/// The three namespaces; dropping deletes them (and their veths).
struct Lab {
    a: String,
    c: String,
    b: String,
    /// Scratch files (pcaps, the chain): a private directory, removed when the lab is.
    dir: Scratch,
}

impl Lab {
    fn new() -> anyhow::Result<Lab> {
        let t = std::process::id() % 100_000;
        let lab = Lab {
            a: format!("cbp{t}a"),
            c: format!("cbp{t}c"),
            b: format!("cbp{t}b"),
            dir: Scratch::new("bench-ports")?,
        };
        for n in [&lab.a, &lab.c, &lab.b] {
            sh(&["ip", "netns", "add", n])?;
            sh(&["ip", "-n", n, "link", "set", "lo", "up"])?;
            let _ = in_ns(n, &["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"]).output();
            let _ = in_ns(
                n,
                &["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"],
            )
            .output();
        }
        sh(&[
            "ip", "-n", &lab.a, "link", "add", "a0", "type", "veth", "peer", "name", "c0", "netns",
            &lab.c,
        ])?;
        sh(&[
            "ip", "-n", &lab.c, "link", "add", "c1", "type", "veth", "peer", "name", "b0", "netns",
            &lab.b,
        ])?;
        for (n, i, m) in [
            (&lab.a, "a0", MAC_A),
            (&lab.c, "c0", MAC_C0),
            (&lab.c, "c1", MAC_C1),
            (&lab.b, "b0", MAC_B),
        ] {
            sh(&["ip", "-n", n, "link", "set", i, "address", &mac(m), "up"])?;
        }
        Ok(lab)
    }

    fn rx_at_b(&self) -> anyhow::Result<u64> {
        self.rx(&self.b, "b0")
    }

    fn rx(&self, ns: &str, dev: &str) -> anyhow::Result<u64> {
        let s = sh(&["ip", "-n", ns, "-s", "-j", "link", "show", "dev", dev])?;
        let v: serde_json::Value = serde_json::from_str(&s)?;
        Ok(v[0]["stats64"]["rx"]["packets"].as_u64().unwrap_or(0))
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for n in [&self.a, &self.c, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", n]).output();
        }
    }
}

/// A child killed (if still running) and reaped when dropped; `steps` is catena's
/// `step cycles` line (CATENA_STEP_TSC=1) once it has printed it at exit.
struct Proc(Child, Arc<Mutex<Option<String>>>);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// catena's cycles per packet (ingest, chain, flush) and packets per batch from its `step cycles` line, waiting
/// up to 1 s for its stderr to be read to the end.
fn step_cycles(line: &Mutex<Option<String>>) -> Option<[f64; 4]> {
    let end = Instant::now() + Duration::from_secs(1);
    let l = loop {
        if let Some(l) = line.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            break l;
        }
        if Instant::now() > end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let w: Vec<&str> = l.split_whitespace().collect();
    let num = |k: &str| -> Option<f64> {
        let i = w.iter().position(|x| *x == k)?;
        w.get(i + 1)?.parse().ok()
    };
    let n = num("packets")?.max(1.0);
    let b = num("batches")?.max(1.0);
    Some([
        num("ingest")? / n,
        num("chain")? / n,
        num("flush")? / n,
        n / b,
    ])
}

impl Proc {
    /// Spawns `cmd` and waits (≤ 5 s) for `ready` on its stderr, then keeps draining it.
    fn until(mut cmd: Command, ready: &str) -> anyhow::Result<Proc> {
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
        let err = child.stderr.take().expect("piped");
        let steps = Arc::new(Mutex::new(None));
        let p = Proc(child, steps.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        let ready = ready.to_string();
        std::thread::spawn(move || {
            let mut said = String::new();
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if line.starts_with("catena: step cycles:") {
                    *steps.lock().unwrap_or_else(|e| e.into_inner()) = Some(line);
                } else if line.contains(&ready) {
                    let _ = tx.send(Ok(()));
                } else if said.len() < 2000 {
                    said += &line;
                    said.push(' ');
                    let _ = tx.send(Err(said.clone()));
                }
            }
        });
        let end = Instant::now() + Duration::from_secs(5);
        let mut last = String::new();
        while Instant::now() < end {
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(Ok(())) => return Ok(p),
                Ok(Err(s)) => last = s,
                Err(_) => {}
            }
        }
        anyhow::bail!("not ready in 5 s: {last}")
    }

    fn signal_and_wait(mut self, sig: i32) -> String {
        // SAFETY: signalling our own child by its pid.
        unsafe { libc::kill(self.0.id() as i32, sig) };
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.0.try_wait() {
                let mut out = String::new();
                if let Some(mut o) = self.0.stdout.take() {
                    let _ = std::io::Read::read_to_string(&mut o, &mut out);
                }
                return out;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        String::new()
    }

    /// User and system CPU seconds so far (from /proc).
    fn cpu(&self) -> (f64, f64) {
        let s = std::fs::read_to_string(format!("/proc/{}/stat", self.0.id())).unwrap_or_default();
        let f: Vec<&str> = s
            .rsplit_once(')')
            .map_or("", |x| x.1)
            .split_whitespace()
            .collect();
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        let t = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) / hz;
        // utime and stime are fields 14 and 15; index 11 and 12 after the name.
        (t(11), t(12))
    }
}

/// `n` UDP frames of `len` bytes (without FCS), 10.1.0.1 → 10.2.0.2, 256 flows, to port
/// 443 (the firewall's list), the sequence number first in the payload.
fn frames(path: &Path, n: u64, len: usize, dst: [u8; 6]) -> anyhow::Result<()> {
    let mut w = PcapWriter::create(path, PcapHeader::new(1, false))?;
    let mut f = vec![0u8; len];
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&MAC_A);
    f[12..14].copy_from_slice(&[8, 0]);
    let ip_len = (len - 14) as u16;
    f[14..34].copy_from_slice(&[
        0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 1, 0, 1, 10, 2, 0, 2,
    ]);
    f[16..18].copy_from_slice(&ip_len.to_be_bytes());
    let mut sum: u32 = (0..10)
        .map(|i| u32::from(u16::from_be_bytes([f[14 + 2 * i], f[15 + 2 * i]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    f[24..26].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    f[36..38].copy_from_slice(&443u16.to_be_bytes());
    f[38..40].copy_from_slice(&(ip_len - 20).to_be_bytes());
    for i in 0..n {
        f[34..36].copy_from_slice(&(10_000 + (i % 256) as u16).to_be_bytes());
        f[42..46].copy_from_slice(&(i as u32).to_be_bytes());
        w.write_packet(i * 1000, len as u32, &f)?;
    }
    w.finish()?;
    Ok(())
}

/// Replays `pcap` from A (`--topspeed` or `--pps=R`), pinned to CPU 0 when taskset is
/// there; returns the sender's seconds.
fn send(lab: &Lab, pcap: &Path, pps: Option<u64>) -> anyhow::Result<f64> {
    let rate = pps.map_or("--topspeed".to_string(), |r| format!("--pps={r}"));
    let mut cmd: Vec<&str> = Vec::new();
    let pin = Command::new("taskset").arg("-V").output().is_ok();
    if pin {
        cmd.extend(["taskset", "-c", "0"]);
    }
    let p = pcap.to_str().unwrap_or_default();
    cmd.extend(["tcpreplay", "-q", "-i", "a0", &rate, p]);
    let o = in_ns(&lab.a, &cmd).output()?;
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    if !o.status.success() {
        anyhow::bail!("tcpreplay: {out} {}", String::from_utf8_lossy(&o.stderr));
    }
    // "Actual: 300000 packets (19200000 bytes) sent in 0.41 seconds"
    let secs = out
        .split("sent in ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse::<f64>().ok())
        .ok_or_else(|| anyhow::anyhow!("tcpreplay said: {out}"))?;
    Ok(secs.max(1e-6))
}

/// catena as the sender: a pcap port replays `pcap` at top speed through `wire` out of
/// an AF_PACKET or AF_XDP port on a0 (pinned to CPU 0). Returns the seconds from
/// catena's start until `watch` (namespace, interface: c0 when nothing forwards in C, b0
/// behind a forwarder) has counted every packet (sampled every 10 ms) and that count.
#[allow(clippy::too_many_arguments)]
fn send_catena(
    lab: &Lab,
    dir: &Path,
    pcap: &Path,
    kind: &str,
    n: u64,
    watch: (&str, &str),
    pps: Option<u64>,
) -> anyhow::Result<(f64, u64)> {
    let (k, extra) = kind.split_once('\n').unwrap_or((kind, ""));
    let chain = dir.join("sender.toml");
    let rate = pps.map_or(String::new(), |r| format!("rate = \"{r}pps\"\n"));
    std::fs::write(
        &chain,
        format!(
            "[[port]]\nname = \"file\"\nkind = \"pcap\"\npath = \"{}\"\n{rate}\n[[port]]\nname = \"out\"\nkind = \"{k}\"\niface = \"a0\"\n{extra}\n[[nf]]\nname = \"wire\"\nkind = \"wire\"\n",
            pcap.display()
        ),
    )?;
    let before = lab.rx(watch.0, watch.1)?;
    let exe = std::env::current_exe()?;
    let exe = exe.to_str().unwrap_or_default();
    let c = chain.to_str().unwrap_or_default();
    let mut cmd: Vec<&str> = Vec::new();
    if Command::new("taskset").arg("-V").output().is_ok() {
        cmd.extend(["taskset", "-c", "0"]);
    }
    cmd.extend([exe, "run", c]);
    let t0 = Instant::now();
    let p = Proc::until(in_ns(&lab.a, &cmd), "running on")?;
    let (mut last, mut at) = (before, t0);
    let end = Instant::now() + Duration::from_secs(30);
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(10));
        let now = lab.rx(watch.0, watch.1)?;
        if now != last {
            (last, at) = (now, Instant::now());
        } else if now - before >= n || at.elapsed() > Duration::from_millis(500) {
            break;
        }
    }
    drop(p);
    Ok(((at - t0).as_secs_f64().max(1e-6), last - before))
}

/// What forwards between c0 and c1 in namespace C.
#[derive(Clone)]
enum Dut {
    Ceiling,
    Bridge,
    Router,
    Catena {
        kind: &'static str,
        nf: &'static str,
    },
}

impl Dut {
    fn name(&self) -> String {
        match self {
            Dut::Ceiling => "sender ceiling (tcpreplay --topspeed)".into(),
            Dut::Bridge => "linux bridge".into(),
            Dut::Router => "linux ip forwarding".into(),
            Dut::Catena { kind, nf } => format!("catena {nf} {}", kind.replace('\n', " ")),
        }
    }

    /// Sets C up; returns catena's process when it is the forwarder.
    fn start(&self, lab: &Lab, dir: &Path) -> anyhow::Result<Option<Proc>> {
        let c = lab.c.as_str();
        match self {
            Dut::Ceiling => Ok(None),
            Dut::Bridge => {
                sh(&["ip", "-n", c, "link", "add", "br0", "type", "bridge"])?;
                sh(&["ip", "-n", c, "link", "set", "c0", "master", "br0"])?;
                sh(&["ip", "-n", c, "link", "set", "c1", "master", "br0"])?;
                sh(&["ip", "-n", c, "link", "set", "br0", "up"])?;
                Ok(None)
            }
            Dut::Router => {
                sh(&["ip", "-n", c, "addr", "add", "10.1.0.2/24", "dev", "c0"])?;
                sh(&["ip", "-n", c, "addr", "add", "10.2.0.1/24", "dev", "c1"])?;
                sh(&[
                    "ip",
                    "-n",
                    c,
                    "neigh",
                    "replace",
                    "10.2.0.2",
                    "lladdr",
                    &mac(dst_mac()),
                    "dev",
                    "c1",
                    "nud",
                    "permanent",
                ])?;
                in_ns(c, &["sysctl", "-qw", "net.ipv4.ip_forward=1"]).output()?;
                in_ns(c, &["sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0"]).output()?;
                in_ns(c, &["sysctl", "-qw", "net.ipv4.conf.c0.rp_filter=0"]).output()?;
                Ok(None)
            }
            Dut::Catena { kind, nf } => {
                let (k, extra) = kind.split_once('\n').unwrap_or((kind, ""));
                let nf = match *nf {
                    "wire" => "[[nf]]\nname = \"wire\"\nkind = \"wire\"\n",
                    _ => "[[nf]]\nname = \"fw\"\nkind = \"firewall\"\nallow_ports = [443]\n",
                };
                let chain = dir.join("chain.toml");
                std::fs::write(
                    &chain,
                    format!("[[port]]\nname = \"a\"\nkind = \"{k}\"\niface = \"c0\"\n{extra}\n[[port]]\nname = \"b\"\nkind = \"{k}\"\niface = \"c1\"\n{extra}\n{nf}"),
                )?;
                let exe = std::env::current_exe()?;
                let mut cmd: Vec<String> = Vec::new();
                if Command::new("taskset").arg("-V").output().is_ok() {
                    cmd.extend(["taskset".into(), "-c".into(), "1".into()]);
                }
                cmd.extend([
                    exe.display().to_string(),
                    "run".into(),
                    chain.display().to_string(),
                    "--json".into(),
                ]);
                let v: Vec<&str> = cmd.iter().map(String::as_str).collect();
                let mut run = in_ns(c, &v);
                run.env("CATENA_STEP_TSC", "1");
                Ok(Some(Proc::until(run, "running on")?))
            }
        }
    }

    fn stop(&self, lab: &Lab) {
        let c = lab.c.as_str();
        match self {
            Dut::Bridge => {
                let _ = sh(&["ip", "-n", c, "link", "del", "br0"]);
            }
            Dut::Router => {
                let _ = sh(&["ip", "-n", c, "addr", "flush", "dev", "c0"]);
                let _ = sh(&["ip", "-n", c, "addr", "flush", "dev", "c1"]);
                let _ = in_ns(c, &["sysctl", "-qw", "net.ipv4.ip_forward=0"]).output();
            }
            _ => {}
        }
    }
}

/// Waits until B's count stops rising (≤ 2 s) and returns what arrived since `before`.
fn settle(lab: &Lab, before: u64) -> anyhow::Result<u64> {
    let mut last = lab.rx_at_b()?;
    let end = Instant::now() + Duration::from_secs(2);
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
        let now = lab.rx_at_b()?;
        if now == last {
            break;
        }
        last = now;
    }
    Ok(last - before)
}

/// Sends `n` packets at LATENCY_PPS with tcpdump on a0 (out) and b0 (in); returns the
/// p50 and p99 of B's time minus A's for the packets both saw.
fn latency(lab: &Lab, dir: &Path, pcap: &Path) -> anyhow::Result<(f64, f64)> {
    let (at_a, at_b) = (dir.join("lat_a.pcap"), dir.join("lat_b.pcap"));
    let dump = |ns: &str, i: &str, q: &str, f: &Path| {
        Proc::until(
            in_ns(
                ns,
                &[
                    "tcpdump",
                    "-i",
                    i,
                    "-Q",
                    q,
                    "-w",
                    f.to_str().unwrap_or_default(),
                    "-U",
                    "-n",
                    "-s",
                    "96",
                    "-Z",
                    "root",
                    "--time-stamp-precision=nano",
                    "--immediate-mode",
                    "udp",
                ],
            ),
            "listening on",
        )
    };
    let ta = dump(&lab.a, "a0", "out", &at_a)?;
    let tb = dump(&lab.b, "b0", "in", &at_b)?;
    send(lab, pcap, Some(LATENCY_PPS))?;
    std::thread::sleep(Duration::from_millis(300));
    ta.signal_and_wait(libc::SIGINT);
    tb.signal_and_wait(libc::SIGINT);
    let seqs = |p: &Path| -> anyhow::Result<std::collections::HashMap<u32, u64>> {
        let t = Trace::open(p)?;
        let mut m = std::collections::HashMap::new();
        for i in 0..t.len() {
            let d = t.packet(i);
            if d.len() >= 46 {
                m.insert(
                    u32::from_be_bytes([d[42], d[43], d[44], d[45]]),
                    t.record(i).ts_ns,
                );
            }
        }
        Ok(m)
    };
    let (a, b) = (seqs(&at_a)?, seqs(&at_b)?);
    let mut d: Vec<f64> = b
        .iter()
        .filter_map(|(s, tb)| a.get(s).map(|ta| tb.saturating_sub(*ta) as f64 / 1e3))
        .collect();
    if d.is_empty() {
        anyhow::bail!(
            "no packet seen at both A ({} seen) and B ({} seen)",
            a.len(),
            b.len()
        );
    }
    d.sort_by(|x, y| x.total_cmp(y));
    let q = |p: f64| d[((d.len() - 1) as f64 * p).round() as usize];
    Ok((q(0.5), q(0.99)))
}

/// Suffix of the rows whose sender is catena (a pcap port out of AF_XDP on A).
const SENDER_CATENA: &str = "(sender: catena af_xdp)";

/// Stops catena (SIGTERM) and reads its kernel drops (`--json` summary) and TSC steps.
fn finish_catena(p: Proc) -> (Option<u64>, Option<[f64; 4]>) {
    let st = p.1.clone();
    let out = p.signal_and_wait(libc::SIGTERM);
    let steps = step_cycles(&st);
    let drops = serde_json::from_str::<serde_json::Value>(&out)
        .ok()
        .and_then(|v| {
            v["ports"].as_array().map(|ps| {
                ps.iter()
                    .filter_map(|p| p["live"]["kernel_drops"].as_u64())
                    .sum()
            })
        });
    (drops, steps)
}

/// `dut` forwarding `n` frames of `len` bytes from `pcap` sent by catena (AF_XDP on A)
/// at top speed or `pps`.
fn forward_from_catena(
    lab: &Lab,
    dut: &Dut,
    pcap: &Path,
    len: usize,
    n: u64,
    pps: Option<u64>,
    case: String,
) -> anyhow::Result<Row> {
    let dir = lab.dir.path();
    let proc_ = dut.start(lab, dir)?;
    let cpu0 = proc_.as_ref().map(Proc::cpu);
    let (secs, delivered) = send_catena(lab, dir, pcap, "af_xdp", n, (&lab.b, "b0"), pps)?;
    let cpu = match (&proc_, cpu0) {
        (Some(p), Some(c0)) => {
            let c1 = p.cpu();
            Some(((c1.0 - c0.0) / secs * 100.0, (c1.1 - c0.1) / secs * 100.0))
        }
        _ => None,
    };
    let (drops, steps) = proc_.map_or((None, None), finish_catena);
    dut.stop(lab);
    let mpps = delivered as f64 / secs / 1e6;
    Ok(Row {
        case,
        frame_bytes: len + 4,
        sent: n,
        delivered,
        loss_pct: 100.0 * (n.saturating_sub(delivered)) as f64 / n as f64,
        sender_secs: secs,
        mpps,
        gbps: mpps * (len + 24) as f64 * 8.0 / 1e3,
        p50_us: None,
        p99_us: None,
        catena_user_pct: cpu.map(|c| c.0),
        catena_sys_pct: cpu.map(|c| c.1),
        kernel_drops: drops,
        ingest_cycles: steps.map(|c| c[0]),
        chain_cycles: steps.map(|c| c[1]),
        flush_cycles: steps.map(|c| c[2]),
        batch_packets: steps.map(|c| c[3]),
        cpu_ns_per_packet: None,
    })
}

/// The 64-byte row of `case` (exactly).
fn row64<'a>(rows: &'a [Row], case: &str) -> Option<&'a Row> {
    rows.iter().find(|r| r.case == case && r.frame_bytes == 64)
}

/// Rows of one sender: tcpreplay's carry no suffix, catena's end in SENDER_CATENA.
fn suffix(catena_sender: bool) -> String {
    if catena_sender {
        format!(" {SENDER_CATENA}")
    } else {
        String::new()
    }
}

/// The best catena wire row at 64 B of one sender, as a forwarder to run again, and 80%
/// of that sender's bridge rate in packets per second.
fn at_80(rows: &[Row], catena_sender: bool) -> Option<(Dut, u64)> {
    let sfx = suffix(catena_sender);
    let bridge = row64(rows, &format!("linux bridge{sfx}"))?;
    let rate = (bridge.mpps * 0.8 * 1e6) as u64;
    let best = rows
        .iter()
        .filter(|r| {
            r.frame_bytes == 64
                && r.case.starts_with("catena wire")
                && r.case.ends_with(&sfx)
                && (catena_sender || !r.case.contains(SENDER_CATENA))
                && !r.case.contains("at 80%")
        })
        .max_by(|x, y| x.mpps.total_cmp(&y.mpps))?;
    let kind = if best.case.contains("af_xdp") {
        "af_xdp"
    } else if best.case.contains("ring") {
        "af_packet\ntx = \"ring\""
    } else {
        "af_packet"
    };
    (rate > 0).then_some((Dut::Catena { kind, nf: "wire" }, rate))
}

/// One of the targets as this run measured it.
#[derive(Serialize)]
struct Target {
    target: String,
    sender: String,
    value: String,
    goal: String,
    met: bool,
}

/// The three targets at 64 B, per sender, from the rows this run has.
fn targets(rows: &[Row]) -> Vec<Target> {
    let mut t = Vec::new();
    for catena_sender in [false, true] {
        let sfx = suffix(catena_sender);
        let sender = if catena_sender {
            "catena af_xdp"
        } else {
            "tcpreplay"
        };
        let xdp = row64(rows, &format!("catena wire af_xdp{sfx}"));
        let pkt = row64(rows, &format!("catena wire af_packet{sfx}"));
        if let (Some(x), Some(p)) = (xdp, pkt) {
            let r = x.mpps / p.mpps.max(1e-9);
            let d = x.delivered as f64 / (p.delivered as f64).max(1.0);
            t.push(Target {
                target: "AF_XDP / AF_PACKET (wire, Mpps)".into(),
                sender: sender.into(),
                value: format!(
                    "{r:.2}x ({:.3} / {:.3} Mpps; delivered {d:.2}x)",
                    x.mpps, p.mpps
                ),
                goal: ">= 1.5x".into(),
                met: r >= 1.5,
            });
            // Beside it, the forwarders' own cost: it does not depend on the sender
            // keeping up, nor on time catena spent descheduled.
            if let (Some(cx), Some(cp)) = (x.cpu_ns_per_packet, p.cpu_ns_per_packet) {
                let r = cp / cx.max(1e-9);
                t.push(Target {
                    target: "AF_PACKET / AF_XDP catena CPU per packet (wire)".into(),
                    sender: sender.into(),
                    value: format!("{r:.2}x ({cp:.0} / {cx:.0} ns, 10 ms ticks)"),
                    goal: "(beside the 1.5x)".into(),
                    met: r >= 1.5,
                });
            }
        }
        let bridge = row64(rows, &format!("linux bridge{sfx}"));
        let best = rows
            .iter()
            .filter(|r| {
                r.frame_bytes == 64
                    && r.case.starts_with("catena wire")
                    && r.case.ends_with(&sfx)
                    && (catena_sender || !r.case.contains(SENDER_CATENA))
                    && !r.case.contains("at 80%")
            })
            .max_by(|x, y| x.mpps.total_cmp(&y.mpps));
        if let (Some(b), Some(w)) = (bridge, best) {
            let r = w.mpps / b.mpps.max(1e-9);
            t.push(Target {
                target: "best catena / linux bridge (Mpps)".into(),
                sender: sender.into(),
                value: format!("{r:.2}x ({}: {:.3} / {:.3} Mpps)", w.case, w.mpps, b.mpps),
                goal: ">= 0.8x".into(),
                met: r >= 0.8,
            });
        }
        let at = rows.iter().find(|r| {
            r.case.contains("at 80% of bridge")
                && (r.case.contains("sender: catena") == catena_sender)
        });
        if let Some(r) = at {
            let lost = r.sent.saturating_sub(r.delivered);
            t.push(Target {
                target: "loss at 80% of the bridge's rate".into(),
                sender: sender.into(),
                value: format!(
                    "{lost} of {} lost ({:.3} Mpps delivered; kernel drops {})",
                    r.sent,
                    r.mpps,
                    r.kernel_drops.map_or("-".into(), |d| d.to_string())
                ),
                goal: "0 lost".into(),
                met: lost == 0,
            });
        }
    }
    t
}

/// `--only`: rows whose case contains one of the words (all rows without it).
fn wanted(a: &Args, case: &str) -> bool {
    a.only.is_empty() || a.only.iter().any(|w| case.contains(w.as_str()))
}

pub fn run(a: &Args) -> anyhow::Result<i32> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        anyhow::bail!(
            "bench ports needs root: it makes network namespaces and veth pairs (run it with sudo)"
        );
    }
    for tool in ["ip", "tcpreplay", "tcpdump"] {
        if Command::new(tool).arg("-V").output().is_err() {
            anyhow::bail!(
                "bench ports needs `{tool}` (apt-get install iproute2 tcpreplay tcpdump)"
            );
        }
    }
    let lab = Lab::new()?;
    let dir = lab.dir.path();
    let scale = a.scale;
    let duts = [
        Dut::Ceiling,
        Dut::Bridge,
        Dut::Router,
        Dut::Catena {
            kind: "af_packet",
            nf: "wire",
        },
        Dut::Catena {
            kind: "af_packet\ntx = \"ring\"",
            nf: "wire",
        },
        Dut::Catena {
            kind: "af_xdp",
            nf: "wire",
        },
        // The copying receive path beside the default views: what reading in place saves.
        Dut::Catena {
            kind: "af_packet\nrx = \"copy\"",
            nf: "wire",
        },
        Dut::Catena {
            kind: "af_xdp\nrx = \"copy\"",
            nf: "wire",
        },
        Dut::Catena {
            kind: "af_packet",
            nf: "firewall",
        },
        Dut::Catena {
            kind: "af_xdp",
            nf: "firewall",
        },
    ];
    let mut rows: Vec<Row> = Vec::new();
    for len in [60usize, 1514] {
        let n = ((if len == 60 { 300_000.0 } else { 100_000.0 }) * scale).max(1000.0) as u64;
        let nl = ((4000.0 * scale) as u64).max(500);
        let mut files: Vec<(PathBuf, PathBuf)> = Vec::new();
        for (tag, dst) in [("l2", dst_mac()), ("l3", MAC_C0)] {
            let (t, l) = (
                dir.join(format!("{tag}_{len}.pcap")),
                dir.join(format!("{tag}_{len}_lat.pcap")),
            );
            frames(&t, n, len, dst)?;
            frames(&l, nl, len, dst)?;
            files.push((t, l));
        }
        for kind in ["af_packet", "af_packet\ntx = \"ring\"", "af_xdp"] {
            let case = format!(
                "sender ceiling (catena pcap -> {})",
                kind.replace('\n', " ")
            );
            if !wanted(a, &case) {
                continue;
            }
            let (secs, got) = send_catena(&lab, dir, &files[0].0, kind, n, (&lab.c, "c0"), None)?;
            let mpps = got as f64 / secs / 1e6;
            rows.push(Row {
                case: format!(
                    "sender ceiling (catena pcap -> {})",
                    kind.replace('\n', " ")
                ),
                frame_bytes: len + 4,
                sent: n,
                delivered: got,
                loss_pct: 100.0 * (n.saturating_sub(got)) as f64 / n as f64,
                sender_secs: secs,
                mpps,
                gbps: mpps * (len + 24) as f64 * 8.0 / 1e3,
                p50_us: None,
                p99_us: None,
                catena_user_pct: None,
                catena_sys_pct: None,
                kernel_drops: None,
                ingest_cycles: None,
                chain_cycles: None,
                flush_cycles: None,
                batch_packets: None,
                cpu_ns_per_packet: None,
            });
        }
        for dut in duts.iter().filter(|d| wanted(a, &d.name())) {
            let (thr, lat) = if matches!(dut, Dut::Router) {
                &files[1]
            } else {
                &files[0]
            };
            let mut cpu = None;
            let mut drops = None;
            let proc_ = dut.start(&lab, dir)?;
            let before = lab.rx_at_b()?;
            let cpu0 = proc_.as_ref().map(Proc::cpu);
            let secs = send(&lab, thr, None)?;
            let delivered = if matches!(dut, Dut::Ceiling) {
                n
            } else {
                settle(&lab, before)?
            };
            if let (Some(p), Some(c0)) = (&proc_, cpu0) {
                let c1 = p.cpu();
                cpu = Some(((c1.0 - c0.0) / secs * 100.0, (c1.1 - c0.1) / secs * 100.0));
            }
            let (p50, p99) = if matches!(dut, Dut::Ceiling) {
                (None, None)
            } else {
                match latency(&lab, dir, lat) {
                    Ok((x, y)) => (Some(x), Some(y)),
                    Err(e) => {
                        eprintln!("{}: latency: {e}", dut.name());
                        (None, None)
                    }
                }
            };
            let mut steps = None;
            if let Some(p) = proc_ {
                let st = p.1.clone();
                let out = p.signal_and_wait(libc::SIGTERM);
                steps = step_cycles(&st);
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(&out) {
                    drops = v["ports"].as_array().map(|ps| {
                        ps.iter()
                            .filter_map(|p| p["live"]["kernel_drops"].as_u64())
                            .sum()
                    });
                }
            }
            dut.stop(&lab);
            let wire = (len + 4 + 20) as f64; // FCS, preamble and inter-frame gap
            let mpps = delivered as f64 / secs / 1e6;
            rows.push(Row {
                case: dut.name(),
                frame_bytes: len + 4,
                sent: n,
                delivered,
                loss_pct: 100.0 * (n.saturating_sub(delivered)) as f64 / n as f64,
                sender_secs: secs,
                mpps,
                gbps: mpps * wire * 8.0 / 1e3,
                p50_us: p50,
                p99_us: p99,
                catena_user_pct: cpu.map(|c| c.0),
                catena_sys_pct: cpu.map(|c| c.1),
                kernel_drops: drops,
                ingest_cycles: steps.map(|c| c[0]),
                chain_cycles: steps.map(|c| c[1]),
                flush_cycles: steps.map(|c| c[2]),
                batch_packets: steps.map(|c| c[3]),
                cpu_ns_per_packet: None,
            });
            eprintln!("done: {} {} B", dut.name(), len + 4);
        }
    }
    // The same forwarders with catena's AF_XDP sender (faster than tcpreplay here), so
    // that the sender is less the limit.
    for len in [60usize, 1514] {
        let n = ((if len == 60 { 300_000.0 } else { 100_000.0 }) * scale).max(1000.0) as u64;
        let f = dir.join(format!("l2_{len}.pcap"));
        for dut in [
            Dut::Bridge,
            Dut::Catena {
                kind: "af_packet",
                nf: "wire",
            },
            Dut::Catena {
                kind: "af_xdp",
                nf: "wire",
            },
        ] {
            let case = format!("{} {SENDER_CATENA}", dut.name());
            if !wanted(a, &case) {
                continue;
            }
            rows.push(forward_from_catena(&lab, &dut, &f, len, n, None, case)?);
            eprintln!(
                "done: {} {} B",
                rows.last().map_or("", |r| r.case.as_str()),
                len + 4
            );
        }
    }
    // No loss below 80% of the bridge's rate: the best catena wire row (64 B) offered
    // 80% of the bridge's rate by the same sender, tcpreplay and catena's.
    let mut extra = Vec::new();
    let n = ((300_000.0 * scale) as u64).max(1000);
    let f = dir.join("l2_60.pcap");
    for catena_sender in [false, true] {
        let Some((dut, rate)) = at_80(&rows, catena_sender) else {
            continue;
        };
        let case = format!(
            "{} at 80% of bridge ({rate} pps offered{})",
            dut.name(),
            if catena_sender {
                ", sender: catena af_xdp"
            } else {
                ""
            }
        );
        if catena_sender {
            extra.push(forward_from_catena(
                &lab,
                &dut,
                &f,
                60,
                n,
                Some(rate),
                case,
            )?);
            continue;
        }
        let p = dut.start(&lab, dir)?;
        let before = lab.rx_at_b()?;
        let secs = send(&lab, &f, Some(rate))?;
        let delivered = settle(&lab, before)?;
        let (drops, steps) = p.map_or((None, None), finish_catena);
        let mpps = delivered as f64 / secs / 1e6;
        extra.push(Row {
            case,
            frame_bytes: 64,
            sent: n,
            delivered,
            loss_pct: 100.0 * (n.saturating_sub(delivered)) as f64 / n as f64,
            sender_secs: secs,
            mpps,
            gbps: mpps * 88.0 * 8.0 / 1e3,
            p50_us: None,
            p99_us: None,
            catena_user_pct: None,
            catena_sys_pct: None,
            kernel_drops: drops,
            ingest_cycles: steps.map(|c| c[0]),
            chain_cycles: steps.map(|c| c[1]),
            flush_cycles: steps.map(|c| c[2]),
            batch_packets: steps.map(|c| c[3]),
            cpu_ns_per_packet: None,
        });
    }
    rows.extend(extra);
    for r in &mut rows {
        if let (Some(u), Some(y)) = (r.catena_user_pct, r.catena_sys_pct) {
            r.cpu_ns_per_packet =
                Some((u + y) / 100.0 * r.sender_secs * 1e9 / (r.delivered.max(1) as f64));
        }
    }
    let header = [
        "case",
        "frame B",
        "sent",
        "delivered",
        "loss %",
        "Mpps",
        "Gbps",
        "p50 µs",
        "p99 µs",
        "catena usr %",
        "catena sys %",
        "kernel drops",
        "cyc/pkt ingest",
        "chain",
        "flush",
        "pkts/batch",
        "catena CPU ns/pkt",
    ];
    let opt = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.1}"));
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.case.clone(),
                r.frame_bytes.to_string(),
                r.sent.to_string(),
                r.delivered.to_string(),
                format!("{:.2}", r.loss_pct),
                format!("{:.3}", r.mpps),
                format!("{:.3}", r.gbps),
                opt(r.p50_us),
                opt(r.p99_us),
                opt(r.catena_user_pct),
                opt(r.catena_sys_pct),
                r.kernel_drops.map_or("-".into(), |d| d.to_string()),
                r.ingest_cycles.map_or("-".into(), |c| format!("{c:.0}")),
                r.chain_cycles.map_or("-".into(), |c| format!("{c:.0}")),
                r.flush_cycles.map_or("-".into(), |c| format!("{c:.0}")),
                r.batch_packets.map_or("-".into(), |c| format!("{c:.1}")),
                r.cpu_ns_per_packet
                    .map_or("-".into(), |c| format!("{c:.0}")),
            ]
        })
        .collect();
    write_results(a, "ports", &header, &table, &rows)?;
    let goals = targets(&rows);
    let p = a.out.join("ports_targets.json");
    std::fs::write(&p, serde_json::to_string_pretty(&goals)?)
        .map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
    let goal_rows: Vec<Vec<String>> = goals
        .iter()
        .map(|g| {
            vec![
                g.target.clone(),
                g.sender.clone(),
                g.goal.clone(),
                if g.met { "met" } else { "NOT met" }.to_string(),
                g.value.clone(),
            ]
        })
        .collect();
    if a.json {
        outln!("{}", serde_json::to_string(&rows)?)?;
    } else {
        print_table(&header, &table)?;
        outln!("(Mpps = packets B received / sender seconds; latency at {LATENCY_PPS} pps offered; a shared 2-core machine: catena pinned to CPU 1, tcpreplay and the kernel's forwarding to CPU 0)")?;
        outln!("")?;
        outln!("Targets at 64 B (issue 15), from the rows above:")?;
        print_table(
            &["target", "sender", "goal", "this run", "measured"],
            &goal_rows,
        )?;
    }
    Ok(0)
}
