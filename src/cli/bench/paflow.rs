//! `catena bench paflow`: PA-Flow's experiment. A chain of 1, 2 or 3 stages, each a
//! `catena run` process in its own network namespace, joined by veth pairs this bench
//! makes (and removes); the bench itself sends from the chain's first veth and receives
//! at its last, in a namespace of its own. Packets carry a sequence number and their
//! send time (CLOCK_MONOTONIC), so throughput is counted at the receiver and latency is
//! measured per packet. Modes: `off` (no aggregation), `aggregate` (`aggregate =
//! true` on the veths between stages; the chain's ingress and egress stay plain, as in
//! PA-Flow; a stage copies a received aggregate's packets out) and `aggregate+nf`
//! (PA-Flow's third bar: also `aggregate_views = true`, so a stage's NFs work on the
//! received aggregate's packets as views into the frame, and what leaves is re-packed).
//! The in-process table (2 and 3 stages on rings, every ring aggregating) has the same
//! three modes.
//!
//! Ends: with `plain` ends (PA-Flow's setting) the chain's ingress (the bench's sender ->
//! stage 1) and egress (last stage -> the bench's receiver) carry one packet per frame;
//! with `aggregated` ends (aggregating modes only) the bench's sender packs what it has
//! queued into aggregates bound for stage 1, stage 1's receiving and the last stage's
//! sending port aggregate too, and the receiver unpacks: every hop carries aggregates.
//! Either way the receiver checks every packet byte for byte (all but its send time)
//! against the one sent, and in order; a mismatch fails the bench.
//!
//! Ports: every size on `af_packet` (TPACKET_V3, whose 1 ms block timeout sets a ~1 ms
//! latency floor per hop at low rates), and 64 B again on `af_xdp` (each packet handed
//! over at once), where latency at a low rate is measured to the microsecond, and on
//! `tx_ring` (`af_packet` sending through its TX ring): the stages' ports and the
//! bench's own sender and receiver are all of the row's kind. Each stage process's CPU
//! time and the sender's and receiver's are reported per packet, to say which process
//! is the bottleneck (docs/paflow.md, "Where the time goes, per process").
//!
//! Needs root (namespaces, AF_PACKET, AF_XDP). On a small shared machine every stage process and
//! the bench's sender and receiver compete for the same cores: the figures say what this
//! machine does, and the rates used for latency are scaled to it.

use std::io::{BufRead, BufReader};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use catena::io::af_xdp::ONE_FRAME;
use catena::io::{AfPacket, AfPacketConfig, AfXdp, AfXdpConfig, Port, Recv, RxMode, TxMode};
use catena::optimise::aggregate::{self, Aggregating};
use catena::packet::{Batch, Pool, MAX_BATCH};

use super::scratch::Scratch;
use super::{median, print_table, write_results, Args};

const SIZES: &[usize] = &[64, 128, 256, 512, 1024, 1500];
const MODES: &[&str] = &["off", "aggregate", "aggregate+nf"];
/// Port kinds of the stages (and of the bench's sender and receiver); `af_xdp` rows are
/// 64 B only (throughput and the two latency rates). `tx_ring` is `af_packet` sending
/// through its TPACKET_V2 TX ring (`tx = "ring"`) rather than `sendmmsg`, 64 B only: the
/// per-packet send of the plain ends another way (docs/paflow.md).
const PORTS: &[&str] = &["af_packet", "af_xdp", "tx_ring"];
/// The chain's ingress and egress hops: one packet per frame, or aggregated like the
/// hops between stages (aggregating modes only).
const ENDS: &[&str] = &["plain", "aggregated"];
/// Offered rates for the latency rows (packets per second): low enough that nothing
/// queues, and high enough that batches form on this machine.
const LOW_RATE: u64 = 10_000;
const HIGH_RATE: u64 = 100_000;
/// Where the sequence number and the send time sit in each packet (after Eth/IPv4/UDP).
const STAMP: usize = 42;

#[derive(Serialize, Clone)]
struct Row {
    stages: usize,
    size: usize,
    mode: String,
    /// Port kind of every veth end: `af_packet` or `af_xdp`.
    port: String,
    /// The chain's ingress and egress hops: `plain` (one packet per frame, as PA-Flow's)
    /// or `aggregated` (the bench's sender aggregates into stage 1, the last stage into
    /// the receiver, which unpacks).
    ends: String,
    /// Offered rate in packets per second; 0 for "as fast as the sender goes".
    offered_pps: u64,
    sent: u64,
    received: u64,
    mpps: f64,
    gbps: f64,
    aggregated_pct: f64,
    /// CPU time (user + system) of all stage processes per packet received, ns.
    stage_cpu_ns_per_pkt: f64,
    /// Of it, user time (catena's own code) and system time (the kernel's AF_PACKET
    /// and veth work, including softirq delivery that ran in the stages' context).
    stage_user_ns_per_pkt: f64,
    stage_sys_ns_per_pkt: f64,
    /// CPU time (user + system) of each stage process per packet received, ns, stage 1
    /// first: which process is the busiest (docs/paflow.md, "Where the time goes").
    stage_cpu_ns_per_pkt_each: Vec<f64>,
    /// CPU time of the bench's sender and receiver threads per packet received, ns
    /// (the sender's includes the veth delivery into stage 1 that it triggers).
    sender_cpu_ns_per_pkt: f64,
    receiver_cpu_ns_per_pkt: f64,
    latency_p50_us: f64,
    latency_p99_us: f64,
    /// Packets received out of order or not byte-equal to the one sent (must be 0).
    mismatched: u64,
}

/// Namespaces and processes of one chain; removed when dropped (also on error).
struct Topology {
    names: Vec<String>,
    procs: Vec<Child>,
}

impl Drop for Topology {
    fn drop(&mut self) {
        for p in &mut self.procs {
            let _ = p.kill();
            let _ = p.wait();
        }
        for n in &self.names {
            let _ = Command::new("ip").args(["netns", "del", n]).output();
        }
    }
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    let o = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| anyhow::anyhow!("cannot run `ip` (install iproute2): {e}"))?;
    anyhow::ensure!(
        o.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr).trim()
    );
    Ok(())
}

/// Moves the calling thread into namespace `name`.
fn enter(name: &str) -> anyhow::Result<()> {
    let f = std::fs::File::open(format!("/var/run/netns/{name}"))?;
    // SAFETY: setns on a namespace descriptor; it affects the calling thread only.
    let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    anyhow::ensure!(r == 0, "setns {name}: {}", std::io::Error::last_os_error());
    Ok(())
}

fn mono_ns() -> u64 {
    // SAFETY: clock_gettime fills the timespec given.
    let mut t: libc::timespec = unsafe { std::mem::zeroed() };
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Builds `stages` stage processes, their chain files in `dir`; returns the topology and
/// the bench's two veth ends (send into the chain, receive from it), which live in
/// namespace `names[0]`.
fn build(
    stages: usize,
    (mode, kind, agg_ends): (&str, &str, bool),
    tag: &str,
    dir: &Path,
) -> anyhow::Result<(Topology, String, String)> {
    let aggregate = mode != "off";
    let views = mode == "aggregate+nf";
    let mut t = Topology {
        names: Vec::new(),
        procs: Vec::new(),
    };
    for k in 0..=stages {
        let n = format!("{tag}n{k}");
        ip(&["netns", "add", &n])?;
        t.names.push(n.clone());
        ip(&["-n", &n, "link", "set", "lo", "up"])?;
        let _ = Command::new("ip")
            .args(["netns", "exec", &n, "sysctl", "-qw"])
            .arg("net.ipv6.conf.all.disable_ipv6=1")
            .output();
    }
    // Link k joins node k and node k+1; node stages+1 is the bench's namespace again.
    let node = |k: usize| t.names[k % (stages + 1)].clone();
    let mut ends = Vec::new();
    for k in 0..=stages {
        let (a, b) = (format!("{tag}l{k}a"), format!("{tag}l{k}b"));
        let (na, nb) = (node(k), node(k + 1));
        ip(&[
            "-n", &na, "link", "add", &a, "type", "veth", "peer", "name", &b, "netns", &nb,
        ])?;
        ip(&["-n", &na, "link", "set", &a, "mtu", "9000", "up"])?;
        ip(&["-n", &nb, "link", "set", &b, "mtu", "9000", "up"])?;
        ends.push((a, b));
    }
    let exe = std::env::current_exe()?;
    for k in 1..=stages {
        // Stage k receives on link k-1 and sends on link k; links between two stages
        // aggregate, and with aggregated ends the chain's ingress and egress too.
        let agg_in = aggregate && (k > 1 || agg_ends);
        let agg_out = aggregate && (k < stages || agg_ends);
        let views = if views && agg_in {
            "aggregate_views = true\n"
        } else {
            ""
        };
        let (kind, tx) = match kind {
            "tx_ring" => ("af_packet", "tx = \"ring\"\n"),
            k => (k, ""),
        };
        let chain = format!(
            "[[port]]\nname = \"in\"\nkind = \"{kind}\"\niface = \"{}\"\naggregate = {agg_in}\n{views}{tx}\n[[port]]\nname = \"out\"\nkind = \"{kind}\"\niface = \"{}\"\naggregate = {agg_out}\n{tx}\n[[nf]]\nname = \"wire\"\nkind = \"wire\"\n",
            ends[k - 1].1, ends[k].0
        );
        let path = dir.join(format!("{tag}s{k}.toml"));
        std::fs::write(&path, chain)?;
        let mut c = Command::new("ip")
            .args(["netns", "exec", &t.names[k]])
            .arg(&exe)
            .args(["run", path.to_str().unwrap_or_default(), "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let err = c.stderr.take();
        t.procs.push(c);
        let Some(err) = err else { continue };
        let mut lines = BufReader::new(err).lines();
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            match lines.next() {
                Some(Ok(l)) if l.contains("running on") => break,
                Some(Ok(l)) => anyhow::ensure!(Instant::now() < end, "stage {k}: {l}"),
                _ => anyhow::bail!("stage {k} exited before running"),
            }
        }
        // Keep draining its stderr so it never blocks.
        std::thread::spawn(move || for _ in lines {});
    }
    Ok((t, ends[0].0.clone(), ends[stages].1.clone()))
}

/// Between in-process stages (`aggregate_stages`, docs/paflow.md): a chain of 2 or 3
/// `wire` NFs, one per stage, on rings replays `count` generated packets of each size,
/// aggregation off and on; Mpps is the run's own (`Summary::mpps`), the median of
/// `runs`. `aggregated_pct` is the share of the packets crossing rings (every ring) that
/// crossed inside frames.
#[derive(Serialize, Clone)]
struct InProcessRow {
    stages: usize,
    size: usize,
    mode: String,
    packets: u64,
    mpps: f64,
    aggregated_pct: f64,
    frames: u64,
}

fn in_process(a: &Args, count: u64) -> anyhow::Result<Vec<InProcessRow>> {
    use catena::io::{PcapHeader, Trace};
    use catena::nfs::{Nf, Wire};
    use catena::packet::LinkKind;
    use catena::runtime::{Chain, NoProgress, RunOptions, Runner};
    let mut rows = Vec::new();
    for (stages, &size) in [2usize, 3]
        .into_iter()
        .flat_map(|k| SIZES.iter().map(move |s| (k, s)))
    {
        let name = format!("in-process {stages} {size}");
        if !a.only.is_empty() && !a.only.iter().any(|o| name.contains(o.as_str())) {
            continue;
        }
        let frames: Vec<Vec<u8>> = (0..count.min(50_000))
            .map(|i| {
                let mut b = vec![0u8; size];
                packet(&mut b, i);
                b
            })
            .collect();
        let trace = Trace::from_packets(
            LinkKind::Ethernet,
            PcapHeader::new(1, false),
            frames
                .iter()
                .enumerate()
                .map(|(i, f)| (i as u64 * 1000, f.as_slice())),
        );
        let loops = count.div_ceil(frames.len() as u64).max(1);
        for mode in ["off", "aggregate", "aggregate+nf"] {
            let mut v = Vec::new();
            let mut last = None;
            for _ in 0..a.runs.max(1) {
                let names: Vec<String> = (0..stages).map(|k| format!("w{k}")).collect();
                let nfs: Vec<(String, Box<dyn Nf>)> = names
                    .iter()
                    .map(|n| (n.clone(), Box::new(Wire::new()) as Box<dyn Nf>))
                    .collect();
                // Two ports: `wire` sends port 0's packets out of port 1 and back.
                let mut chain = Chain::linear("paflow", 2, 1, nfs);
                let groups: Vec<Vec<String>> = names.iter().map(|n| vec![n.clone()]).collect();
                chain.set_stages(&groups).map_err(anyhow::Error::msg)?;
                chain
                    .set_aggregate_stages(mode != "off")
                    .map_err(anyhow::Error::msg)?;
                chain.aggregate_views = mode == "aggregate+nf";
                let opts = RunOptions {
                    loops,
                    ..Default::default()
                };
                let s = Runner::new(chain, trace.max_packet_len()).run(
                    &trace,
                    &opts,
                    &mut NoProgress,
                )?;
                v.push(s.mpps);
                last = Some(s);
            }
            let s = last.ok_or_else(|| anyhow::anyhow!("no run"))?;
            let agg = s.aggregate_stages.unwrap_or_default();
            rows.push(InProcessRow {
                stages,
                size,
                mode: mode.to_string(),
                packets: s.packets_in,
                mpps: median(&mut v),
                aggregated_pct: 100.0 * agg.aggregated as f64
                    / (agg.aggregated + agg.plain).max(1) as f64,
                frames: agg.frames,
            });
        }
    }
    Ok(rows)
}

/// One UDP/IPv4 packet of `size` bytes; flows vary with `i` (for realism only: the
/// stages' wire NF does not look).
fn packet(buf: &mut [u8], i: u64) {
    buf.fill(0);
    buf[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    buf[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    buf[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip_len = (buf.len() - 14) as u16;
    buf[14] = 0x45;
    buf[16..18].copy_from_slice(&ip_len.to_be_bytes());
    buf[22] = 64;
    buf[23] = 17;
    buf[26..30].copy_from_slice(&[10, 0, 0, 1]);
    buf[30..34].copy_from_slice(&[10, 0, 1, (i % 250) as u8]);
    buf[34..36].copy_from_slice(&(1024 + (i % 64) as u16).to_be_bytes());
    buf[36..38].copy_from_slice(&53u16.to_be_bytes());
    buf[38..40].copy_from_slice(&(ip_len - 20).to_be_bytes());
}

struct Measured {
    sent: u64,
    received: u64,
    secs: f64,
    lat_ns: Vec<u64>,
    /// CPU time of the sender's and the receiver's thread, ns.
    tx_cpu_ns: u64,
    rx_cpu_ns: u64,
    /// Packets received out of order (a sequence number not above the last one) or
    /// not byte-equal to the one sent.
    mismatched: u64,
    /// Of the packets the sender sent, how many went inside aggregates (aggregated ends).
    tx_aggregated: u64,
}

/// CPU time (user + system) the calling thread has used, ns.
fn thread_cpu_ns() -> u64 {
    // SAFETY: an all-zero rusage is valid; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    tv_ns(ru.ru_utime) + tv_ns(ru.ru_stime)
}

fn tv_ns(t: libc::timeval) -> u64 {
    t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000
}

/// Opens the bench's own port on `iface`: of the row's kind, so that its receiving end
/// adds no block timeout of its own in `af_xdp` rows. With `agg` (aggregated ends) it
/// packs what is sent in one flush into aggregates and unpacks what it receives, as a
/// stage's `aggregate = true` port does (copying on receive, since it keeps received
/// frames across calls while it unpacks them).
fn open_port(kind: &str, iface: &str, agg: bool) -> anyhow::Result<Box<dyn Port>> {
    let rx = if agg { RxMode::Copy } else { RxMode::View };
    let (port, size): (Box<dyn Port>, usize) = if kind == "af_xdp" {
        let mut c = AfXdpConfig::new(iface);
        c.rx = rx;
        let x = AfXdp::open(&c)?;
        // Without scatter-gather an aggregate must fit one UMEM frame (as the stages'
        // ports are told in docs/paflow.md).
        let size = if x.scatter_gather() {
            aggregate::DEFAULT_SIZE
        } else {
            ONE_FRAME
        };
        (Box::new(x), size)
    } else {
        let mut c = AfPacketConfig::new(iface);
        c.rx = rx;
        if kind == "tx_ring" {
            c.tx = TxMode::Ring;
        }
        (Box::new(AfPacket::open(&c)?), aggregate::DEFAULT_SIZE)
    };
    Ok(if agg {
        Box::new(Aggregating::new(port, size))
    } else {
        port
    })
}

/// The sequence number of `data` if it is, byte for byte, the packet the sender made
/// for that number at `size` bytes (all but its send time, which only the sender knew);
/// `exp` is scratch room.
fn check(data: &[u8], size: usize, exp: &mut Vec<u8>) -> Option<u64> {
    if data.len() != size || size < STAMP + 16 {
        return None;
    }
    let seq = u64::from_le_bytes(data[STAMP..STAMP + 8].try_into().ok()?);
    exp.resize(size, 0);
    packet(exp, seq);
    exp[STAMP..STAMP + 8].copy_from_slice(&seq.to_le_bytes());
    let same = data[..STAMP + 8] == exp[..STAMP + 8] && data[STAMP + 16..] == exp[STAMP + 16..];
    same.then_some(seq)
}

/// Sends `count` packets of `size` bytes at `pps` (0: as fast as possible) into `tx_if`
/// and receives them on `rx_if`, both in namespace `ns`, on ports of `kind`; with
/// `agg`, both ends aggregate (see [`open_port`]).
fn measure(
    ns: &str,
    (tx_if, rx_if, kind, agg): (&str, &str, &str, bool),
    size: usize,
    count: u64,
    pps: u64,
) -> anyhow::Result<Measured> {
    let kind_rx = kind.to_string();
    let kind_tx = kind.to_string();
    let ns_rx = ns.to_string();
    let rx_if = rx_if.to_string();
    let sending = Arc::new(AtomicBool::new(true));
    let ready = Arc::new(AtomicU64::new(0));
    let (s2, r2) = (sending.clone(), ready.clone());
    let rx = std::thread::spawn(move || -> anyhow::Result<(u64, f64, Vec<u64>, u64, u64)> {
        enter(&ns_rx)?;
        let mut port = open_port(&kind_rx, &rx_if, agg)?;
        r2.store(1, Ordering::Release);
        // Aggregates (up to 9 KiB) arrive in the pool's larger buffers.
        let max = if agg { aggregate::DEFAULT_SIZE } else { 2048 };
        let mut pool = Pool::new(4 * MAX_BATCH, max);
        let mut b = Batch::new();
        let mut lat = Vec::with_capacity(count as usize);
        let (mut exp, mut next, mut mismatched) = (Vec::new(), 0u64, 0u64);
        let (mut first, mut last) = (None, Instant::now());
        let mut idle_since = Instant::now();
        loop {
            if let Recv::Got(n) = port.recv(&mut pool, &mut b, MAX_BATCH) {
                if n > 0 {
                    let now = mono_ns();
                    last = Instant::now();
                    first.get_or_insert(last);
                    idle_since = last;
                    for p in b.drain() {
                        // Same packets, same order: byte-equal, sequence numbers rising
                        // (a gap is a packet lost in the chain, counted by `received`).
                        match check(p.data(), size, &mut exp) {
                            Some(seq) if seq >= next => next = seq + 1,
                            _ => mismatched += 1,
                        }
                        if let Some(s) = p.data().get(STAMP + 8..STAMP + 16) {
                            let sent = u64::from_le_bytes(s.try_into().unwrap_or_default());
                            lat.push(now.saturating_sub(sent));
                        }
                        pool.free(p);
                    }
                    continue;
                }
            }
            if !s2.load(Ordering::Acquire) && idle_since.elapsed() > Duration::from_millis(300) {
                break;
            }
            // Woken as soon as a packet (AF_XDP) or a block (AF_PACKET) is ready, so the
            // receiver adds no sleep of its own to the latency.
            let mut fds = [libc::pollfd {
                fd: port.fd().unwrap_or(-1),
                events: libc::POLLIN,
                revents: 0,
            }];
            // SAFETY: one initialised pollfd; a 1 ms timeout (to see the sender end).
            unsafe { libc::poll(fds.as_mut_ptr(), 1, 1) };
        }
        let secs = first.map_or(0.0, |f| last.duration_since(f).as_secs_f64());
        Ok((lat.len() as u64, secs, lat, thread_cpu_ns(), mismatched))
    });
    while ready.load(Ordering::Acquire) == 0 && !rx.is_finished() {
        std::thread::sleep(Duration::from_millis(5));
    }
    let ns_tx = ns.to_string();
    let tx_if = tx_if.to_string();
    let tx = std::thread::spawn(move || -> anyhow::Result<(u64, u64, u64)> {
        enter(&ns_tx)?;
        let mut port = open_port(&kind_tx, &tx_if, agg)?;
        let mut buf = vec![0u8; size];
        let start = Instant::now();
        let mut i = 0u64;
        while i < count {
            if let Some(at) = (i * 1_000_000_000).checked_div(pps) {
                let due = start + Duration::from_nanos(at);
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
            }
            // Paced: one packet per send; else a batch per system call.
            let burst = if pps > 0 { 1 } else { MAX_BATCH as u64 };
            for _ in 0..burst.min(count - i) {
                packet(&mut buf, i);
                buf[STAMP..STAMP + 8].copy_from_slice(&i.to_le_bytes());
                buf[STAMP + 8..STAMP + 16].copy_from_slice(&mono_ns().to_le_bytes());
                port.send(&buf, 0, size as u32);
                i += 1;
            }
            port.flush();
        }
        // `tx` counts frames on the wire; aggregates carried `tx_aggregated` packets.
        let c = port.counters();
        let packets = c.tx - c.tx_aggregates + c.tx_aggregated;
        Ok((packets, thread_cpu_ns(), c.tx_aggregated))
    });
    let sent = tx.join().map_err(|_| anyhow::anyhow!("sender panicked"))?;
    sending.store(false, Ordering::Release);
    let (received, secs, lat, rx_cpu_ns, mismatched) = rx
        .join()
        .map_err(|_| anyhow::anyhow!("receiver panicked"))??;
    let (sent, tx_cpu_ns, tx_aggregated) = sent?;
    Ok(Measured {
        sent,
        received,
        secs,
        lat_ns: lat,
        tx_cpu_ns,
        rx_cpu_ns,
        mismatched,
        tx_aggregated,
    })
}

fn pct(v: &mut [u64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_unstable();
    v[((v.len() - 1) as f64 * q) as usize] as f64 / 1000.0
}

/// What the stage processes did: packets sent inside aggregates and packets sent on
/// inter-stage ports, and their CPU time (user + system) in nanoseconds.
struct Stages {
    agg: u64,
    all: u64,
    user_ns: u64,
    sys_ns: u64,
    /// User + system time of each stage process, stage 1 first.
    each_ns: Vec<u64>,
}

/// Stops the stages and collects [`Stages`]; with `agg_ends` the last stage's egress
/// counts among the aggregating links.
fn stop(mut t: Topology, stages: usize, agg_ends: bool) -> Stages {
    let (mut agg, mut all, mut user_ns, mut sys_ns) = (0, 0, 0u64, 0u64);
    let mut each_ns = Vec::with_capacity(stages);
    for (k, p) in t.procs.iter_mut().enumerate() {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(p.id() as i32, libc::SIGTERM) };
        let mut out = String::new();
        if let Some(mut o) = p.stdout.take() {
            let _ = std::io::Read::read_to_string(&mut o, &mut out);
        }
        // wait4 gives the child's CPU time: on this shared machine, CPU per packet is a
        // steadier measure than wall-clock rates. The system time includes the veth
        // delivery to the next stage (done in the sender's context).
        // SAFETY: an all-zero rusage is valid; waiting for our own child.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        let mut st = 0;
        let r = unsafe { libc::wait4(p.id() as i32, &mut st, 0, &mut ru) };
        let (u, s) = if r > 0 {
            (tv_ns(ru.ru_utime), tv_ns(ru.ru_stime))
        } else {
            (0, 0)
        };
        user_ns += u;
        sys_ns += s;
        each_ns.push(u + s);
        let _ = p.wait();
        if k + 1 < stages || agg_ends {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&out) {
                agg += v["ports"][1]["live"]["tx_aggregated"].as_u64().unwrap_or(0);
                all += v["ports"][1]["tx"].as_u64().unwrap_or(0);
            }
        }
    }
    Stages {
        agg,
        all,
        user_ns,
        sys_ns,
        each_ns,
    }
}

fn row(
    (stages, size, mode, port, ends): (usize, usize, &str, &str, &str),
    pps: u64,
    m: &mut Measured,
    mut st: Stages,
) -> Row {
    if ends == "aggregated" {
        // The chain's ingress is an aggregating link too (its egress is in `st`).
        st.agg += m.tx_aggregated;
        st.all += m.sent;
    }
    let mpps = if m.secs > 0.0 {
        m.received as f64 / m.secs / 1e6
    } else {
        0.0
    };
    let per = m.received.max(1) as f64;
    Row {
        stages,
        size,
        mode: mode.to_string(),
        port: port.to_string(),
        ends: ends.to_string(),
        offered_pps: pps,
        sent: m.sent,
        received: m.received,
        mpps,
        gbps: mpps * size as f64 * 8.0 / 1000.0,
        aggregated_pct: if st.all > 0 {
            st.agg as f64 * 100.0 / st.all as f64
        } else {
            0.0
        },
        stage_cpu_ns_per_pkt: (st.user_ns + st.sys_ns) as f64 / per,
        stage_user_ns_per_pkt: st.user_ns as f64 / per,
        stage_sys_ns_per_pkt: st.sys_ns as f64 / per,
        stage_cpu_ns_per_pkt_each: st.each_ns.iter().map(|&n| n as f64 / per).collect(),
        sender_cpu_ns_per_pkt: m.tx_cpu_ns as f64 / per,
        receiver_cpu_ns_per_pkt: m.rx_cpu_ns as f64 / per,
        latency_p50_us: pct(&mut m.lat_ns, 0.5),
        latency_p99_us: pct(&mut m.lat_ns, 0.99),
        mismatched: m.mismatched,
    }
}

pub fn run(a: &Args) -> anyhow::Result<i32> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        anyhow::bail!("bench paflow makes network namespaces and veth pairs: run it as root");
    }
    let count = ((200_000.0 * a.scale) as u64).max(1000);
    let inproc = in_process(a, 5 * count)?;
    let tag = format!("pf{}", std::process::id() % 100_000);
    // The stages' chain files; removed on every way out of this function.
    let scratch = Scratch::new("paflow")?;
    let mut rows = Vec::new();
    // Over every run (also the ones not reported): must stay 0.
    let mut mismatched = 0u64;
    for stages in 1..=3usize {
        for &kind in PORTS {
            for (&mode, &ends) in MODES
                .iter()
                .flat_map(|m| ENDS.iter().map(move |e| (m, e)))
                .filter(|(m, e)| **m != "off" || **e == "plain")
                // tx_ring rows: the plain ends' send another way, against off only.
                .filter(|(m, e)| kind != "tx_ring" || (**m != "aggregate+nf" && **e == "plain"))
            {
                let agg_ends = ends == "aggregated";
                // af_xdp (latency to the µs) and tx_ring: 64 B only.
                let sizes = if kind == "af_packet" {
                    SIZES
                } else {
                    &SIZES[..1]
                };
                for &size in sizes {
                    let only = &a.only;
                    let name = format!("{stages} {size} {mode} {kind} {ends}-ends");
                    if !only.is_empty() && !only.iter().any(|o| name.contains(o.as_str())) {
                        continue;
                    }
                    let id = (stages, size, mode, kind, ends);
                    let mut best: Vec<Row> = Vec::new();
                    for _ in 0..a.runs {
                        let (t, tx, rx) =
                            build(stages, (mode, kind, agg_ends), &tag, scratch.path())?;
                        let ns = t.names[0].clone();
                        let mut m = measure(&ns, (&tx, &rx, kind, agg_ends), size, count, 0)?;
                        let agg = stop(t, stages, agg_ends);
                        best.push(row(id, 0, &mut m, agg));
                    }
                    let mut mp: Vec<f64> = best.iter().map(|r| r.mpps).collect();
                    let med = median(&mut mp);
                    let r = best
                        .iter()
                        .min_by(|x, y| (x.mpps - med).abs().total_cmp(&(y.mpps - med).abs()))
                        .cloned()
                        .ok_or_else(|| anyhow::anyhow!("no run"))?;
                    mismatched += best.iter().map(|r| r.mismatched).sum::<u64>();
                    rows.push(r);
                    if size == 64 {
                        for pps in [LOW_RATE, HIGH_RATE] {
                            // `runs` runs; the one of median p50 is reported.
                            let mut lat: Vec<Row> = Vec::new();
                            for _ in 0..a.runs {
                                let (t, tx, rx) =
                                    build(stages, (mode, kind, agg_ends), &tag, scratch.path())?;
                                let ns = t.names[0].clone();
                                let n = (pps / 2).min(count);
                                let io = (tx.as_str(), rx.as_str(), kind, agg_ends);
                                let mut m = measure(&ns, io, size, n, pps)?;
                                let agg = stop(t, stages, agg_ends);
                                lat.push(row(id, pps, &mut m, agg));
                            }
                            mismatched += lat.iter().map(|r| r.mismatched).sum::<u64>();
                            lat.sort_by(|x, y| x.latency_p50_us.total_cmp(&y.latency_p50_us));
                            let mid = lat.len() / 2;
                            if let Some(r) = lat.into_iter().nth(mid) {
                                rows.push(r);
                            }
                        }
                    }
                }
            }
        }
    }
    let header = [
        "stages",
        "size",
        "mode",
        "port",
        "ends",
        "offered",
        "sent",
        "received",
        "Mpps",
        "Gbps",
        "aggregated %",
        "stage CPU ns/pkt",
        "usr/sys",
        "per stage",
        "sender ns/pkt",
        "receiver ns/pkt",
        "p50 µs",
        "p99 µs",
        "mismatched",
    ];
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.stages.to_string(),
                r.size.to_string(),
                r.mode.clone(),
                r.port.clone(),
                r.ends.clone(),
                if r.offered_pps == 0 {
                    "top".into()
                } else {
                    format!("{} kpps", r.offered_pps / 1000)
                },
                r.sent.to_string(),
                r.received.to_string(),
                format!("{:.3}", r.mpps),
                format!("{:.3}", r.gbps),
                format!("{:.1}", r.aggregated_pct),
                format!("{:.0}", r.stage_cpu_ns_per_pkt),
                format!(
                    "{:.0}/{:.0}",
                    r.stage_user_ns_per_pkt, r.stage_sys_ns_per_pkt
                ),
                r.stage_cpu_ns_per_pkt_each
                    .iter()
                    .map(|n| format!("{n:.0}"))
                    .collect::<Vec<_>>()
                    .join("/"),
                format!("{:.0}", r.sender_cpu_ns_per_pkt),
                format!("{:.0}", r.receiver_cpu_ns_per_pkt),
                format!("{:.1}", r.latency_p50_us),
                format!("{:.1}", r.latency_p99_us),
                r.mismatched.to_string(),
            ]
        })
        .collect();
    write_results(a, "paflow", &header, &table, &rows)?;
    let ih = [
        "in-process stages",
        "size",
        "mode",
        "packets",
        "Mpps",
        "aggregated %",
        "frames",
    ];
    let itable: Vec<Vec<String>> = inproc
        .iter()
        .map(|r| {
            vec![
                r.stages.to_string(),
                r.size.to_string(),
                r.mode.clone(),
                r.packets.to_string(),
                format!("{:.3}", r.mpps),
                format!("{:.1}", r.aggregated_pct),
                r.frames.to_string(),
            ]
        })
        .collect();
    if !inproc.is_empty() {
        write_results(a, "paflow-inprocess", &ih, &itable, &inproc)?;
    }
    if a.json {
        // The rows of the veth chains; the in-process rows are in the results folder.
        outln!("{}", serde_json::to_string_pretty(&rows)?)?;
    } else {
        print_table(&header, &table)?;
        if !inproc.is_empty() {
            outln!("")?;
            print_table(&ih, &itable)?;
            for r in inproc.iter().filter(|r| r.size == 64 && r.mode != "off") {
                let off = inproc
                    .iter()
                    .find(|o| o.stages == r.stages && o.size == 64 && o.mode == "off");
                if let Some(off) = off.filter(|o| o.mpps > 0.0) {
                    outln!(
                        "in-process {} stages, 64 B: {}/off = {:.2}x Mpps (no per-frame cost to remove on a ring: a loss is expected)",
                        r.stages,
                        r.mode,
                        r.mpps / off.mpps
                    )?;
                }
            }
        }
        // Where the time goes (top rate): each process's CPU per packet, the busiest
        // one's ceiling on a core of its own, and the ceiling of all of them sharing
        // the machine's cores (every process here is CPU-bound on the same cores).
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        for r in rows.iter().filter(|r| r.offered_pps == 0) {
            let mut procs = vec![("sender".to_string(), r.sender_cpu_ns_per_pkt)];
            for (k, &n) in r.stage_cpu_ns_per_pkt_each.iter().enumerate() {
                procs.push((format!("stage {}", k + 1), n));
            }
            procs.push(("receiver".to_string(), r.receiver_cpu_ns_per_pkt));
            let sum: f64 = procs.iter().map(|p| p.1).sum();
            let Some((who, most)) = procs.iter().max_by(|a, b| a.1.total_cmp(&b.1)) else {
                continue;
            };
            if sum <= 0.0 || *most <= 0.0 {
                continue;
            }
            let list: Vec<String> = procs.iter().map(|(n, v)| format!("{n} {v:.0}")).collect();
            outln!(
                "{} stage(s), {} B, {}, {}, {} ends: CPU ns per packet {} (sum {sum:.0}); busiest {who}: {:.3} Mpps on a core of its own; all on {cores} cores: {:.3} Mpps; measured {:.3}",
                r.stages,
                r.size,
                r.port,
                r.mode,
                r.ends,
                list.join(", "),
                1e3 / most,
                cores as f64 * 1e3 / sum,
                r.mpps
            )?;
        }
        for s in 1..=3 {
            for &kind in PORTS {
                let at = |m: &str, pps: u64, ends: &str| {
                    rows.iter().find(|r| {
                        r.stages == s
                            && r.size == 64
                            && r.mode == m
                            && r.port == kind
                            && r.offered_pps == pps
                            && r.ends == ends
                    })
                };
                // Always against `off` with plain ends (nothing aggregated anywhere).
                for (mode, ends) in [
                    ("aggregate", "plain"),
                    ("aggregate+nf", "plain"),
                    ("aggregate", "aggregated"),
                    ("aggregate+nf", "aggregated"),
                ] {
                    if let (Some(off), Some(on)) = (at("off", 0, "plain"), at(mode, 0, ends)) {
                        if off.mpps > 0.0 && on.stage_cpu_ns_per_pkt > 0.0 {
                            outln!(
                                "{s} stage(s), 64 B, {kind}, {ends} ends: {mode}/off = {:.2}x Mpps, {:.2}x fewer stage CPU ns per packet; sender {:.0} -> {:.0}, receiver {:.0} -> {:.0} ns per packet (PA-Flow target at 2 stages: >= 2.7x throughput)",
                                on.mpps / off.mpps,
                                off.stage_cpu_ns_per_pkt / on.stage_cpu_ns_per_pkt,
                                off.sender_cpu_ns_per_pkt,
                                on.sender_cpu_ns_per_pkt,
                                off.receiver_cpu_ns_per_pkt,
                                on.receiver_cpu_ns_per_pkt
                            )?;
                        }
                    }
                    let low = (at("off", LOW_RATE, "plain"), at(mode, LOW_RATE, ends));
                    if let (Some(off), Some(on)) = low {
                        outln!(
                            "{s} stage(s), 64 B, {kind}, {ends} ends, {} kpps: p50 {mode} {:.1} µs - off {:.1} µs = {:+.1} µs (PA-Flow target: <= +1 µs)",
                            LOW_RATE / 1000,
                            on.latency_p50_us,
                            off.latency_p50_us,
                            on.latency_p50_us - off.latency_p50_us
                        )?;
                    }
                }
            }
        }
    }
    if mismatched > 0 {
        eprintln!(
            "catena: bench paflow: {mismatched} packets arrived out of order or changed (see the `mismatched` column): aggregation changed the output, a bug"
        );
        return Ok(1);
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(seq: u64, size: usize) -> Vec<u8> {
        let mut b = vec![0u8; size];
        packet(&mut b, seq);
        b[STAMP..STAMP + 8].copy_from_slice(&seq.to_le_bytes());
        b[STAMP + 8..STAMP + 16].copy_from_slice(&123_456u64.to_le_bytes());
        b
    }

    #[test]
    fn the_receiver_check_takes_the_sent_packet_and_refuses_any_change() {
        let mut exp = Vec::new();
        let p = sent(77, 64);
        assert_eq!(check(&p, 64, &mut exp), Some(77));
        // The send time is the sender's own: any value passes.
        let mut t = p.clone();
        t[STAMP + 8] ^= 0xff;
        assert_eq!(check(&t, 64, &mut exp), Some(77));
        // Any other byte changed, or the length, is a mismatch.
        for at in [0, 13, 30, STAMP, STAMP + 16, 63] {
            let mut q = p.clone();
            q[at] ^= 1;
            assert_eq!(check(&q, 64, &mut exp), None, "byte {at}");
        }
        assert_eq!(check(&p[..60], 64, &mut exp), None);
        assert_eq!(check(&sent(77, 128), 64, &mut exp), None);
        // Another packet's bytes under this one's number.
        let mut o = sent(78, 64);
        o[STAMP..STAMP + 8].copy_from_slice(&77u64.to_le_bytes());
        assert_eq!(check(&o, 64, &mut exp), None);
    }
}
