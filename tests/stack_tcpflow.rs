//! Reassembled streams against `tcpflow`'s, on real captures.
//!
//! For every IPv4 TCP connection, each direction's bytestream from the stack must equal the
//! file tcpflow writes for it. Excluded, and counted:
//! - directions the stack marks incomplete (it gave up over its buffer bound, or bytes were
//!   still waiting behind a hole when the flow ended — data the capture lost, which tcpflow
//!   writes as a hole of zeros at the file offset);
//! - 4-tuples used by more than one connection in the capture (tcpflow names the later ones
//!   `…c1`, `…c2` by its own rules, so the pairing would be guesswork);
//! - IPv6 connections (tcpflow's file names for them are not parsed here).
//!
//! Connections ended by a RST are checked as a prefix: the stack ends the streams there
//! (the endpoint that reset accepts nothing more), tcpflow keeps writing segments seen
//! after it, so the stack's bytes must be the start of tcpflow's.
//!
//! A direction with retransmitted or overlapping bytes is compared too, but the overlap
//! policies differ (the stack: first wins; tcpflow writes each segment at its offset, so
//! the last wins): a mismatch there is counted as a policy difference, and the test fails
//! on any mismatch in a direction without overlaps, or if policy differences are more than
//! 1% of the directions compared.
//!
//! Both sides pick up connections whose SYN is not in the capture: tcpflow from their
//! first segment, the stack (`midstream = true`) from their first segment with data, which
//! starts the stream at the same byte.
//!
//! tcpflow 1.6 takes every captured byte after the TCP header as payload, Ethernet padding
//! and trailers included (a 60-byte frame carrying a 40-byte RST adds 6 bytes to its
//! file), where the stack stops at the IP length. So both get the same trace with every IP
//! frame cut at the end of its IP packet (written to the tempdir): the bytes compared are
//! then the same definition of payload on both sides.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use catena::flow::FlowKey;
use catena::io::{PcapWriter, Trace};
use catena::nfs::{Context, Microbox, Nf};
use catena::packet::{Batch, L3Kind, Layers, Packet, MAX_BATCH};
use catena::stack::{App, Ctx, EndReason, Event, Kind, Kinds, Level, StackConfig};

struct Conn {
    key: FlowKey,
    bytes: [Vec<u8>; 2],
    incomplete: [bool; 2],
    overlaps: [bool; 2],
    reset: bool,
}

#[derive(Default)]
struct Streams {
    /// One entry per connection, in start order.
    conns: Vec<Conn>,
    /// Flow id → index in `conns` of its current connection.
    current: HashMap<u32, usize>,
}

struct Collector(Arc<Mutex<Streams>>);

impl App for Collector {
    fn name(&self) -> &str {
        "collector"
    }
    fn level(&self) -> Level {
        Level::Bytestream
    }
    fn kinds(&self) -> Kinds {
        Kinds::of(&[Kind::FlowStart, Kind::Data, Kind::FlowEnd])
    }
    fn on_event(&mut self, ev: &Event, cx: &mut Ctx<'_>) {
        let mut s = self.0.lock().unwrap();
        match ev.kind {
            Kind::FlowStart => {
                let key = cx.conn(ev.flow).unwrap().key;
                let i = s.conns.len();
                s.conns.push(Conn {
                    key,
                    bytes: [Vec::new(), Vec::new()],
                    incomplete: [false; 2],
                    overlaps: [false; 2],
                    reset: false,
                });
                s.current.insert(ev.flow, i);
            }
            Kind::Data => {
                let i = s.current[&ev.flow];
                let b = cx.bytes(ev).to_vec();
                s.conns[i].bytes[ev.dir as usize].extend_from_slice(&b);
            }
            Kind::FlowEnd => {
                let i = s.current[&ev.flow];
                let c = cx.conn(ev.flow).unwrap();
                let e = &mut s.conns[i];
                e.incomplete = [c.incomplete(0), c.incomplete(1)];
                e.overlaps = [c.duplicate_bytes[0] > 0, c.duplicate_bytes[1] > 0];
                e.reset = EndReason::from_u32(ev.info) == EndReason::Reset;
            }
            _ => {}
        }
    }
}

/// Runs the stack over the trace and returns every connection's two streams.
fn streams(trace: &Trace) -> Streams {
    let out = Arc::new(Mutex::new(Streams::default()));
    let cfg = StackConfig {
        level: Level::Bytestream,
        flows: 1 << 16,
        timeout_ns: 0,
        midstream: true,
        ring_bytes: 1 << 20,
        rings: 4096,
    };
    let mut mb = Microbox::new(cfg, vec![Box::new(Collector(out.clone()))], false);
    let cx = Context { ports: 2 };
    let mut batch = Batch::new();
    for i in 0..trace.len() {
        let mut p = Packet::from_bytes(trace.packet(i));
        p.meta_mut().link = trace.link();
        p.meta_mut().ts_ns = trace.record(i).ts_ns;
        batch.push(p);
        if batch.len() == MAX_BATCH || i + 1 == trace.len() {
            mb.process(&mut batch, &cx);
            batch.drain();
        }
    }
    mb.finish();
    drop(mb);
    Arc::try_unwrap(out).ok().unwrap().into_inner().unwrap()
}

fn tcpflow_name(k: &FlowKey, dir: usize) -> String {
    let ep =
        |a: &[u8; 16], p: u16| format!("{:03}.{:03}.{:03}.{:03}.{:05}", a[0], a[1], a[2], a[3], p);
    if dir == 0 {
        format!("{}-{}", ep(&k.src, k.sport), ep(&k.dst, k.dport))
    } else {
        format!("{}-{}", ep(&k.dst, k.dport), ep(&k.src, k.sport))
    }
}

#[derive(Default, Debug)]
struct Tally {
    compared: usize,
    bytes: u64,
    incomplete: usize,
    reused: usize,
    ipv6: usize,
    /// Directions of reset connections (compared as a prefix).
    reset: usize,
    overlap_policy: Vec<String>,
    mismatched: Vec<String>,
}

/// The trace with every IPv4/IPv6 frame cut at the end of its IP packet.
fn without_trailers(t: &Trace, out: &Path) {
    let mut w = PcapWriter::create(out, t.header()).unwrap();
    for i in 0..t.len() {
        let d = t.packet(i);
        let l = Layers::parse(t.link(), d);
        let o = l.l3_off as usize;
        let end = match l.l3 {
            L3Kind::Ipv4 => o + u16::from_be_bytes([d[o + 2], d[o + 3]]) as usize,
            L3Kind::Ipv6 => o + 40 + u16::from_be_bytes([d[o + 4], d[o + 5]]) as usize,
            _ => d.len(),
        };
        let d = &d[..end.clamp(o, d.len())];
        w.write_packet(t.record(i).ts_ns, d.len() as u32, d)
            .unwrap();
    }
    w.finish().unwrap();
}

fn compare(rel: &str, t: &mut Tally) {
    let dir = common::tempdir();
    let orig = Trace::open(&common::dataset(rel)).unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("trimmed.pcap");
    without_trailers(&orig, &path);
    let trace = Trace::open(&path).unwrap_or_else(|e| panic!("{e}"));
    let got = streams(&trace);
    let dir = common::tempdir();
    let st = Command::new("tcpflow")
        .arg("-r")
        .arg(&path)
        .arg("-o")
        .arg(dir.path())
        .output()
        .expect("tcpflow runs");
    assert!(st.status.success(), "tcpflow failed on {rel}");
    let files: BTreeMap<String, Vec<u8>> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().into_string().ok()?;
            (n != "report.xml").then(|| (n, std::fs::read(e.path()).unwrap()))
        })
        .collect();
    // 4-tuples seen more than once, by either side.
    let mut uses: HashMap<FlowKey, usize> = HashMap::new();
    for c in &got.conns {
        *uses.entry(c.key.canonical()).or_default() += 1;
    }
    // tcpflow adds `--VLAN` to flows seen with a VLAN tag and `cN` to later connections
    // on the same tuple.
    let lookup = |name: &str| -> (Option<&Vec<u8>>, bool) {
        let mut found = None;
        let mut reused = false;
        for (f, b) in files.range(name.to_string()..) {
            let Some(rest) = f.strip_prefix(name) else {
                break;
            };
            let rest = rest
                .strip_prefix("--")
                .map_or(rest, |r| r.trim_start_matches(|c: char| c.is_ascii_digit()));
            if rest.is_empty() {
                found = Some(b);
            } else if rest.starts_with('c') {
                reused = true;
            }
        }
        (found, reused)
    };
    for c in &got.conns {
        if c.key.family == 6 {
            t.ipv6 += 1;
            continue;
        }
        for d in 0..2 {
            let name = tcpflow_name(&c.key, d);
            let (theirs, reused) = lookup(&name);
            if uses[&c.key.canonical()] > 1 || reused {
                t.reused += 1;
                continue;
            }
            if c.incomplete[d] {
                t.incomplete += 1;
                continue;
            }
            // tcpflow writes no file for a direction without payload.
            let theirs = theirs.map(Vec::as_slice).unwrap_or(&[]);
            let ours = c.bytes[d].as_slice();
            if theirs == ours || (c.reset && theirs.starts_with(ours)) {
                t.reset += usize::from(c.reset);
                t.compared += 1;
                t.bytes += theirs.len() as u64;
                continue;
            }
            let at = theirs.iter().zip(ours).position(|(a, b)| a != b);
            let msg = format!(
                "{rel}: {name}: tcpflow {} bytes, stack {} bytes, first difference at {at:?}",
                theirs.len(),
                ours.len()
            );
            if c.overlaps[d] {
                t.overlap_policy.push(msg);
            } else {
                t.mismatched.push(msg);
            }
        }
    }
}

const TRACES: &[&str] = &[
    "ndpi/pcap/1kxun.pcap",
    "ndpi/pcap/netflix.pcap",
    "ndpi/pcap/alexa-app.pcapng",
    "ndpi/pcap/webex.pcap",
    "ndpi/pcap/instagram.pcap",
    "ndpi/pcap/WebattackRCE.pcap",
    "ndpi/pcap/starcraft_battle.pcap",
    "ndpi/pcap/sites.pcapng",
    "ndpi/pcap/waze.pcap",
    "ndpi/pcap/anyconnect-vpn.pcap",
    "ndpi/pcap/android.pcap",
    "ndpi/pcap/weibo.pcap",
    "ndpi/pcap/bot.pcap",
    "ndpi/pcap/ocsp.pcapng",
    "ndpi/pcap/emotet.pcap",
    "ndpi/pcap/http_ua_splitted_in_two_pkts.pcapng",
];

#[test]
fn streams_equal_tcpflow() {
    common::require("tcpflow");
    let mut t = Tally::default();
    for rel in TRACES {
        compare(rel, &mut t);
    }
    eprintln!("{t:#?}");
    assert!(t.mismatched.is_empty(), "{:#?}", t.mismatched);
    assert!(
        t.overlap_policy.len() * 100 <= t.compared,
        "{:#?}",
        t.overlap_policy
    );
    assert!(t.compared >= 500, "too few directions compared: {t:?}");
    assert!(t.bytes >= 5_000_000, "too few bytes compared: {t:?}");
}
