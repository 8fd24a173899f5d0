//! FastPath equivalence: for chains of the filter, NAT, Maglev and flow monitor in several
//! orders and lengths, on every capture in ../shared/datasets and on generated traces,
//! the output pcap, the per-NF counters and the flow records are identical with
//! consolidation on and off, also when rules, pools and backends change mid-trace. And
//! the fast path is really taken.

mod common;
mod fastpath_common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use catena::io::gen::{generate, GenOptions, Profile as GenProfile};
use catena::io::{PcapHeader, Trace};
use catena::nfs::{Context, Nf, Profile};
use catena::optimise::fastpath::{FastConfig, FastStats};
use catena::packet::{Batch, Fields};
use catena::packet::{L3Kind, Layers, LinkKind};
use catena::runtime::control::Scheduled;
use catena::runtime::{Chain, ChainConfig, NoProgress, RunOptions, Runner, Summary};
use fastpath_common::{run_chain, Outcome};

/// Chains as letters: F filter, G filter with a TCP-flags rule (refuses TCP flows), N NAT,
/// M Maglev, O flow monitor. Lengths 1 to 6, duplicates included.
const CHAINS: &[&str] = &[
    "F", "N", "M", "O", "FN", "NM", "MO", "OF", "NN", "MM", "GO", "FNM", "MNO", "ONF", "FNMO",
    "OMNF", "NFOM", "GNMO", "FNNMO", "FNMONM",
];

/// The most common IPv4 destination of a trace: Maglev's VIP, so it balances something.
fn top_destination(t: &Trace) -> String {
    let mut n: HashMap<[u8; 4], usize> = HashMap::new();
    for i in 0..t.len() {
        let d = t.packet(i);
        let l = Layers::parse(t.link(), d);
        if l.l3 == L3Kind::Ipv4 {
            let o = l.l3_off as usize + 16;
            *n.entry([d[o], d[o + 1], d[o + 2], d[o + 3]]).or_default() += 1;
        }
    }
    let best = n
        .into_iter()
        .max_by_key(|(a, c)| (*c, *a))
        .map_or([203, 0, 113, 10], |(a, _)| a);
    format!("{}.{}.{}.{}", best[0], best[1], best[2], best[3])
}

struct Setup {
    vip: String,
    inside: &'static str,
    /// Virtual ingress ports (part of the FastPath key).
    ports: u16,
}

fn nf_toml(kind: char, i: usize, s: &Setup, dir: &Path, tag: &str) -> String {
    match kind {
        'F' => format!(
            "[[nf]]\nname = \"f{i}\"\nkind = \"ip_filter\"\nrules = [\"deny udp dst port 53\", \"allow tcp port 80 or 443\", \"deny icmp\", \"deny src net 10.0.0.0/9 and udp\", \"allow ip\", \"allow ip6\"]\n"
        ),
        'G' => format!(
            "[[nf]]\nname = \"g{i}\"\nkind = \"ip_filter\"\nrules = [\"deny tcp flags syn,!ack and dst port 22\", \"allow tcp flags ack\", \"deny udp port 123\", \"allow all\"]\n"
        ),
        'N' => format!(
            "[[nf]]\nname = \"n{i}\"\nkind = \"nat\"\ninside = \"{}\"\npublic = \"198.51.100.{}\"\ncapacity = 8192\nudp_timeout = 20\ntcp_linger = 2\n",
            s.inside,
            i + 1
        ),
        'M' => format!(
            "[[nf]]\nname = \"m{i}\"\nkind = \"maglev\"\nvip = \"{}\"\ntable_size = 251\ncapacity = 4096\ntimeout = 15\nbackends = [{{ addr = \"10.200.0.1\" }}, {{ addr = \"10.200.0.2\", mac = \"02:00:00:00:01:02\" }}, {{ addr = \"10.200.0.3\", weight = 2 }}]\n",
            s.vip
        ),
        // A Maglev whose one backend is its own VIP: the next Maglev balances the flow
        // again (chains of Maglevs that all track the flows, as the bench's do).
        'L' => format!(
            "[[nf]]\nname = \"m{i}\"\nkind = \"maglev\"\nvip = \"{0}\"\ntable_size = 251\ncapacity = 4096\ntimeout = 15\nbackends = [{{ addr = \"{0}\" }}]\n",
            s.vip
        ),
        'O' => format!(
            "[[nf]]\nname = \"o{i}\"\nkind = \"flow_monitor\"\ntimeout = 10\ncapacity = 4096\nrecords = \"{}\"\n",
            dir.join(format!("o{i}-{tag}.jsonl")).display()
        ),
        _ => unreachable!(),
    }
}

/// A change for each NF of the chain, spread over the trace.
fn changes(chain: &str, packets: u64) -> Vec<Scheduled> {
    let mut v = Vec::new();
    for (i, k) in chain.chars().enumerate() {
        let at = packets * (i as u64 + 1) / (chain.len() as u64 + 1);
        let (nf, cmd) = match k {
            'F' => (
                format!("f{i}"),
                "rules deny tcp port 443; allow udp; deny icmp; allow ip".to_string(),
            ),
            'G' => (format!("g{i}"), "rules deny tcp port 80; allow all".into()),
            'N' => (
                format!("n{i}"),
                format!("pool 198.51.100.{} 2000-2999", 100 + i),
            ),
            'M' => (
                format!("m{i}"),
                "backends 10.200.0.1 10.200.0.4:2@02:00:00:00:01:04".into(),
            ),
            'O' => continue,
            _ => unreachable!(),
        };
        v.push(Scheduled { at, nf, cmd });
    }
    v
}

/// Chain `chain` as `run` builds it, with FastPath when `fast` (tag `on`, else `off`).
fn build(chain: &str, s: &Setup, fast: Option<FastConfig>, dir: &Path) -> Chain {
    let tag = if fast.is_some() { "on" } else { "off" };
    let mut text = format!("name = \"eq\"\n[input]\nports = {}\n", s.ports);
    for (i, k) in chain.chars().enumerate() {
        text += &nf_toml(k, i, s, dir, tag);
    }
    let cfg = ChainConfig::parse(&text, "eq.toml").expect("config");
    let mut c = Chain::from_config(&cfg).expect("chain");
    if let Some(f) = fast {
        c.enable_fastpath(f).expect("fastpath");
    }
    c
}

fn run(
    chain: &str,
    s: &Setup,
    trace: &Trace,
    fast: Option<FastConfig>,
    schedule: &[Scheduled],
    dir: &Path,
) -> Outcome {
    let tag = if fast.is_some() { "on" } else { "off" };
    let c = build(chain, s, fast, dir);
    run_chain(c, chain, trace, |_| {}, schedule, dir, tag)
}

/// Runs `chain` on and off and asserts the same output; returns FastPath's counters.
fn equal_on_off(
    chain: &str,
    s: &Setup,
    trace: &Trace,
    fast: FastConfig,
    schedule: &[Scheduled],
    what: &str,
) -> FastStats {
    let dir = common::tempdir();
    let off = run(chain, s, trace, None, schedule, dir.path());
    let on = run(chain, s, trace, Some(fast), schedule, dir.path());
    let ctx = format!("chain {chain} on {what}");
    assert!(off.pcap == on.pcap, "{ctx}: output pcaps differ");
    let j = |x: &Summary| {
        serde_json::to_string(&(
            &x.nfs,
            &x.ports,
            x.packets_in,
            x.packets_out,
            x.packets_dropped,
            x.bytes_out,
            &x.input_drops,
        ))
        .unwrap()
    };
    assert_eq!(j(&off.summary), j(&on.summary), "{ctx}: summaries differ");
    assert_eq!(off.records, on.records, "{ctx}: flow records differ");
    assert!(off.summary.fastpath.is_none());
    let f = on.summary.fastpath.expect("fastpath counters");
    assert_eq!(
        f.hits + f.misses,
        on.summary.packets_in - input_drops(&on.summary)
    );
    f
}

fn input_drops(s: &Summary) -> u64 {
    s.input_drops.iter().map(|(_, n)| n).sum()
}

/// A small table that records a flow's first packet (the unit cases count on it).
fn small() -> FastConfig {
    FastConfig {
        entries: 512,
        timeout_ns: 30_000_000_000,
        record_at: 1,
    }
}

/// [`small`] recording a flow's second packet (the default).
fn small_second() -> FastConfig {
    FastConfig {
        record_at: 2,
        ..small()
    }
}

fn real_setup(t: &Trace) -> Setup {
    Setup {
        vip: top_destination(t),
        inside: "10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 198.51.100.0/24",
        ports: 5,
    }
}

fn gen_setup(t: &Trace) -> Setup {
    Setup {
        vip: top_destination(t),
        inside: "10.0.0.0/9, 198.51.100.0/24",
        ports: 5,
    }
}

fn generated(ipv6: f64, seed: u64) -> Trace {
    generate(&GenOptions {
        count: 12_000,
        flows: 300,
        ipv6_share: ipv6,
        seed,
        ..GenOptions::profile(GenProfile::SmallFlows)
    })
    .expect("generate")
}

#[test]
fn every_capture_through_two_chains_is_equal_on_and_off() {
    let all: Vec<PathBuf> = common::all_captures()
        .into_iter()
        .filter(|p| !p.ends_with("bench/ndpi-ether-merged.pcap"))
        .collect();
    assert!(all.len() > 100, "datasets missing");
    // Two workers: the machine has two cores.
    let (a, b) = all.split_at(all.len() / 2);
    std::thread::scope(|sc| {
        for (part, base) in [(a, 0), (b, a.len())] {
            sc.spawn(move || {
                for (i, p) in part.iter().enumerate() {
                    let Ok(t) = Trace::open(p) else { continue };
                    let s = real_setup(&t);
                    let k = base + i;
                    // The first chain records first packets, the second second ones.
                    let chains = [CHAINS[k % CHAINS.len()], CHAINS[(k * 7 + 3) % CHAINS.len()]];
                    for (chain, cfg) in chains.into_iter().zip([small(), small_second()]) {
                        equal_on_off(chain, &s, &t, cfg, &[], &p.display().to_string());
                    }
                }
            });
        }
    });
}

#[test]
fn every_chain_on_the_merged_trace_is_equal_on_and_off_with_changes() {
    let t = Trace::open(&common::dataset("bench/ndpi-ether-merged.pcap")).unwrap();
    let s = real_setup(&t);
    let n = t.len() as u64;
    std::thread::scope(|sc| {
        for half in [0, 1] {
            let (s, t) = (&s, &t);
            sc.spawn(move || {
                for chain in CHAINS.iter().skip(half).step_by(2) {
                    let f = equal_on_off(chain, s, t, small(), &[], "merged");
                    assert!(f.hits > 0, "{chain}: no hits");
                    let f = equal_on_off(chain, s, t, small_second(), &[], "merged, second");
                    assert!(f.hits > 0 && f.deferred > 0, "{chain}: {f:?}");
                    if !chain.contains('O') {
                        continue;
                    }
                    let f = equal_on_off(
                        chain,
                        s,
                        t,
                        FastConfig::default(),
                        &changes(chain, n),
                        "merged with changes",
                    );
                    if chain.len() > 1 {
                        assert!(f.invalidated > 0, "{chain}: changes invalidated nothing");
                    }
                }
            });
        }
    });
}

#[test]
fn every_chain_on_generated_traces_is_equal_on_and_off_with_changes() {
    for (ipv6, seed) in [(0.0, 7), (0.3, 8)] {
        let t = generated(ipv6, seed);
        let s = gen_setup(&t);
        let n = t.len() as u64;
        for chain in CHAINS {
            let f = equal_on_off(chain, &s, &t, small(), &[], "generated");
            assert!(f.hits > 0, "{chain}: no hits");
            equal_on_off(
                chain,
                &s,
                &t,
                small_second(),
                &changes(chain, n),
                "generated with changes",
            );
        }
    }
}

/// 20,000 packets in 50 flows (4sics-like): most packets are later packets of a flow.
fn fifty_long_flows() -> Trace {
    generate(&GenOptions {
        count: 20_000,
        flows: 50,
        ..GenOptions::profile(GenProfile::FourSics)
    })
    .unwrap()
}

#[test]
fn long_flows_mostly_take_the_fast_path() {
    let t = fifty_long_flows();
    let s = gen_setup(&t);
    let f = equal_on_off("FNMO", &s, &t, small(), &[], "long flows");
    assert!(
        f.hits * 10 > t.len() as u64 * 8,
        "only {} of {} packets hit: {f:?}",
        f.hits,
        t.len()
    );
    assert!(f.installed > 0 && f.installed < 2_000, "{f:?}");
}

/// A sink with no file to write (the bench's, `catena run` without `-o`) counts its hits
/// in the host, not through the sink's writer: its packets and bytes, and every other
/// counter, are the chain's.
#[test]
fn a_sink_that_only_counts_counts_hits_as_the_chain_does() {
    let t = fifty_long_flows();
    let s = gen_setup(&t);
    let dir = common::tempdir();
    let run = |fast: Option<FastConfig>| {
        let mut r = Runner::new(build("FNMO", &s, fast, dir.path()), t.max_packet_len());
        r.run(&t, &RunOptions::default(), &mut NoProgress)
            .expect("run")
    };
    let (off, on) = (run(None), run(Some(small())));
    let f = on.fastpath.as_ref().expect("fastpath counters");
    assert!(
        f.hits * 10 > t.len() as u64 * 8,
        "only {} hits: {f:?}",
        f.hits
    );
    assert!(off.bytes_out > 0 && off.sinks.iter().all(|k| k.path.is_none()));
    let j = |x: &Summary| {
        serde_json::to_string(&(
            &x.nfs,
            &x.ports,
            &x.sinks,
            x.packets_out,
            x.packets_dropped,
            x.bytes_out,
        ))
        .unwrap()
    };
    assert_eq!(j(&off), j(&on), "summaries differ");
}

/// A hit that leaves by no port (`NO_PORT`, port number 65,534) counts on no port, as the
/// chain does, even in a chain of 65,535 ports where that number names one: the sink's
/// counting for hits is the chain's (session 31's inline copy counted it on port 65,534).
#[test]
fn a_hit_that_leaves_by_no_port_counts_on_no_port_with_every_port_number_in_use() {
    // One flow over every port: its packets repeat a (port, flow) key often enough to hit.
    let t = generate(&GenOptions {
        count: 100_000,
        flows: 1,
        ..GenOptions::profile(GenProfile::FourSics)
    })
    .unwrap();
    let s = Setup {
        ports: u16::MAX,
        ..gen_setup(&t)
    };
    let big = FastConfig {
        entries: 1 << 17,
        ..small()
    };
    let dir = common::tempdir();
    let run = |fast: Option<FastConfig>| {
        let mut r = Runner::new(build("FNMO", &s, fast, dir.path()), t.max_packet_len());
        r.run(&t, &RunOptions::default(), &mut NoProgress)
            .expect("run")
    };
    let (off, on) = (run(None), run(Some(big)));
    let f = on.fastpath.as_ref().expect("fastpath counters");
    assert!(f.hits * 20 > t.len() as u64, "only {} hits", f.hits);
    assert_eq!(off.ports.len(), usize::from(u16::MAX));
    for x in [&off, &on] {
        let sent: Vec<_> = x
            .ports
            .iter()
            .filter(|p| p.tx > 0)
            .map(|p| p.port)
            .collect();
        assert!(sent.is_empty(), "packets counted as sent on ports {sent:?}");
    }
    assert_eq!(off.bytes_out, on.bytes_out);
}

/// Paths of 8 NFs are consolidated (they were refused past 6) and stay equal on and off.
#[test]
fn chains_of_eight_take_the_fast_path() {
    let t = generate(&GenOptions {
        count: 5_000,
        flows: 20,
        ..GenOptions::profile(GenProfile::FourSics)
    })
    .unwrap();
    let s = gen_setup(&t);
    let f = equal_on_off("FMOFMOFM", &s, &t, small(), &[], "chain of 8");
    assert!(
        f.hits * 10 > t.len() as u64 * 8,
        "only {} of {} packets hit: {f:?}",
        f.hits,
        t.len()
    );
}

// ---- Unit cases on hand-made packets ----

/// An Ethernet/IPv4/TCP frame with valid checksums.
fn tcp(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, flags: u8) -> Vec<u8> {
    let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(src, dst, 64)
        .tcp(sport, dport, 1000, 8192);
    let b = match flags {
        0x02 => b.syn(),
        0x11 => b.fin().ack(1),
        0x04 => b.rst(),
        _ => b.ack(1),
    };
    let mut v = Vec::new();
    b.write(&mut v, b"payload!").unwrap();
    v
}

/// An Ethernet/IPv4/UDP frame with valid checksums.
fn udp(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
    let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(src, dst, 64)
        .udp(sport, dport);
    let mut v = Vec::new();
    b.write(&mut v, b"payload!").unwrap();
    v
}

/// A trace of `frames`, each followed by a chunk's worth of ARP frames: FastPath installs
/// entries when the chunk that recorded them ends, so packets of one flow in one chunk
/// all take the slow path.
fn trace_of(frames: &[(u64, Vec<u8>)]) -> Trace {
    trace_filled(frames, |_| true)
}

/// [`trace_of`] with the chunk of fillers only after the frames `filled` picks: frames
/// without them share a chunk with the next.
fn trace_filled(frames: &[(u64, Vec<u8>)], filled: impl Fn(usize) -> bool) -> Trace {
    let mut arp = vec![0xffu8; 6];
    arp.extend_from_slice(&[2, 0, 0, 0, 0, 9, 0x08, 0x06]);
    arp.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    arp.resize(60, 0);
    let mut all: Vec<(u64, &[u8])> = Vec::new();
    for (i, (ts, f)) in frames.iter().enumerate() {
        all.push((*ts, f));
        if filled(i) {
            all.extend(std::iter::repeat_n((*ts, arp.as_slice()), 32));
        }
    }
    Trace::from_packets(LinkKind::Ethernet, PcapHeader::new(1, false), all)
}

fn setup() -> Setup {
    Setup {
        vip: "203.0.113.10".into(),
        inside: "10.0.0.0/8",
        ports: 1,
    }
}

const SEC: u64 = 1_000_000_000;

#[test]
fn fin_and_rst_end_entries() {
    let mut f = Vec::new();
    for k in 0..3u8 {
        let (a, b) = ([10, 0, 0, 1 + k], [203, 0, 113, 10]);
        for i in 0..6 {
            f.push((i * SEC / 10, tcp(a, b, 4000, 80, 0x10)));
        }
        f.push((SEC, tcp(a, b, 4000, 80, if k == 0 { 0x04 } else { 0x11 })));
        f.push((SEC + 1, tcp(a, b, 4000, 80, 0x10)));
    }
    let t = trace_of(&f);
    let fs = equal_on_off("FNMO", &setup(), &t, small(), &[], "fin/rst");
    assert_eq!(fs.ended, 3, "{fs:?}");
    assert_eq!(fs.hits, 3 * 5, "{fs:?}");
}

/// Packets of a flow right after its FIN, in the FIN's chunk: the entry is gone, so they
/// take the slow path and are recorded again.
#[test]
fn packets_after_a_fin_in_the_same_chunk_miss() {
    let (a, b) = ([10, 0, 0, 1], [203, 0, 113, 10]);
    let mut f: Vec<(u64, Vec<u8>)> = (0..5)
        .map(|i| (i * SEC / 10, tcp(a, b, 4000, 80, 0x10)))
        .collect();
    f.push((SEC, tcp(a, b, 4000, 80, 0x11)));
    f.push((SEC + 1, tcp(a, b, 4000, 80, 0x10)));
    f.push((SEC + 2, tcp(a, b, 4000, 80, 0x10)));
    // Each of the first five ends its chunk; the FIN and the two after it share one.
    let t = trace_filled(&f, |i| i < 5 || i == 7);
    let fs = equal_on_off("FNMO", &setup(), &t, small(), &[], "after fin");
    assert_eq!((fs.ended, fs.hits, fs.installed), (1, 4, 3), "{fs:?}");
}

/// The packet after the one that ends a remembered refusal's countdown, in the same
/// chunk: the refusal the chunk's probe found is gone, so it is a miss (recorded, and
/// refused again), not one more unrecorded packet of a dead countdown.
#[test]
fn a_refusal_that_ends_mid_chunk_is_gone_for_the_next_packet() {
    let (a, b) = ([10, 0, 0, 1], [203, 0, 113, 10]);
    let f: Vec<(u64, Vec<u8>)> = (0..18)
        .map(|i| (i * SEC / 100, tcp(a, b, 4000, 80, 0x10)))
        .collect();
    // Packets 1-16 each end their chunk; 17 and 18 share one.
    let t = trace_filled(&f, |i| i < 16 || i == 17);
    let fs = equal_on_off("GO", &setup(), &t, small(), &[], "refusal ends mid-chunk");
    // Refused at packets 1, 17 and 18; the 15 between 1 and 17 ran unrecorded.
    assert_eq!((fs.refused, fs.unrecorded, fs.hits), (3, 15, 0), "{fs:?}");
}

#[test]
fn idle_entries_expire() {
    let (a, b) = ([10, 0, 0, 1], [203, 0, 113, 10]);
    let f: Vec<(u64, Vec<u8>)> = [0, SEC, 100 * SEC, 101 * SEC]
        .iter()
        .map(|&ts| (ts, tcp(a, b, 4000, 80, 0x10)))
        .collect();
    let cfg = FastConfig {
        entries: 64,
        timeout_ns: 30 * SEC,
        record_at: 1,
    };
    let fs = equal_on_off("FO", &setup(), &trace_of(&f), cfg, &[], "idle");
    assert_eq!((fs.expired, fs.hits, fs.installed), (1, 2, 2), "{fs:?}");
}

/// Maglev tokens name a connection's slot until a sweep moves connections: a sweep that
/// runs inside a hit's state function (idle flows leave, the live one is moved into a
/// freed slot) must still refresh the right connection, and the next packet re-records.
#[test]
fn a_maglev_sweep_during_hits_moves_the_connection_and_stays_equal() {
    let vip = [203, 0, 113, 10];
    let mut f: Vec<(u64, Vec<u8>)> = (0..50u8)
        .map(|k| (k as u64, tcp([10, 0, 1, k], vip, 5000, 80, 0x10)))
        .collect();
    // The live flow is tracked last, so removing the idle ones moves it.
    f.extend((0..2500u64).map(|i| (SEC + i * SEC / 100, tcp([10, 0, 0, 1], vip, 4000, 80, 0x10))));
    let cfg = FastConfig {
        entries: 64,
        timeout_ns: 0,
        record_at: 1,
    };
    let fs = equal_on_off("MO", &setup(), &trace_of(&f), cfg, &[], "maglev sweep");
    assert!(fs.invalidated >= 1, "{fs:?}");
    assert!(fs.hits >= 2400, "{fs:?}");
}

/// The NAT's sweeps step per packet, from `process` and from a hit's state function
/// alike: here every packet after the 50 idle mappings time out at 20 s is a hit, so
/// those sweeps run only inside hits; a SYN in the middle of a TCP flow goes through the
/// state function too (it may reopen a lingering mapping).
#[test]
fn nat_sweeps_inside_hits_stay_equal() {
    let remote = [203, 0, 113, 7];
    let mut f: Vec<(u64, Vec<u8>)> = (0..50u8)
        .map(|k| (k as u64, udp([10, 0, 1, k], remote, 5000, 53)))
        .collect();
    f.extend((0..2500u64).map(|i| {
        let ts = SEC + i * SEC / 100;
        if i % 2 == 0 {
            (ts, udp([10, 0, 0, 1], remote, 4000, 53))
        } else {
            let flags = if i == 1 || i == 1201 { 0x02 } else { 0x10 };
            (ts, tcp([10, 0, 0, 2], remote, 4001, 443, flags))
        }
    }));
    // No fillers between the packets: they would run the NAT and step its sweeps.
    let t = Trace::from_packets(
        LinkKind::Ethernet,
        PcapHeader::new(1, false),
        f.iter().map(|(ts, p)| (*ts, p.as_slice())),
    );
    let cfg = FastConfig {
        entries: 64,
        timeout_ns: 0,
        record_at: 1,
    };
    for chain in ["NO", "NNF"] {
        let fs = equal_on_off(chain, &setup(), &t, cfg, &[], "nat sweep");
        assert!(fs.hits >= 2450, "{chain}: {fs:?}");
    }
}

/// Round-robin packets 5 ms apart, phase after phase, each phase (length, flows) made of
/// `pkt(flow)` over the flows given, with no fillers: once recorded, every chunk hits whole
/// and takes the fused run.
fn phases(phases: &[(u64, std::ops::Range<u8>)], pkt: impl Fn(u8) -> Vec<u8>) -> Trace {
    let mut f = Vec::new();
    let mut ts = 0u64;
    for (len, flows) in phases {
        let end = ts + len;
        let mut k = flows.clone().cycle();
        while ts < end {
            f.push((ts, pkt(k.next().unwrap())));
            ts += 5_000_000;
        }
    }
    Trace::from_packets(
        LinkKind::Ethernet,
        PcapHeader::new(1, false),
        f.iter().map(|(ts, p)| (*ts, p.as_slice())),
    )
}

/// Fused runs over chunks whose entries have different shapes, packet after packet: a
/// flow through NAT, Maglev and the monitor; one the filter drops (no NF to call); one
/// Maglev only passes (not for the VIP); one from outside the NAT's inside networks.
/// Each chunk is then several runs of one shape, and each NF must see exactly its own
/// visits, in order (the monitor's records and every counter are compared). Fails if a
/// run reads a visit at another shape's step.
#[test]
fn fused_runs_over_chunks_of_several_shapes_stay_equal() {
    let vip = [203, 0, 113, 10];
    let t = phases(&[(4 * SEC, 0..16)], |k| match k % 4 {
        0 => tcp([10, 0, 1, k], vip, 4000, 80, 0x10),
        1 => udp([10, 0, 1, k], vip, 5000, 53),
        2 => tcp([10, 0, 1, k], [203, 0, 113, 7], 4000, 443, 0x10),
        _ => tcp([192, 0, 2, k], vip, 4000, 80, 0x10),
    });
    let fs = equal_on_off("FNMO", &setup(), &t, small(), &[], "several shapes");
    assert!(fs.hits >= 700, "{fs:?}");
}

/// Fused runs while the NAT's sweep expires half of the mappings: flows 0-19 fall silent
/// for 25 s (UDP timeout 20 s) while 20-39 go on hitting whole chunks, so the sweep steps
/// that release the silent flows' mappings run inside fused runs. When those flows
/// resume, their entries are still there (FastPath idle timeout 30 s), and their NAT
/// tokens must fail: the slow path makes new mappings. Fails if a fused run takes a
/// visit its NF did not check (the NAT would refresh a released mapping).
#[test]
fn a_nat_sweep_under_fused_runs_invalidates_the_expired_mappings_entries() {
    let remote = [203, 0, 113, 7];
    let t = phases(
        &[(2 * SEC, 0..40), (25 * SEC, 20..40), (2 * SEC, 0..40)],
        |k| udp([10, 0, 1, k], remote, 5000, 53),
    );
    for chain in ["NO", "NN"] {
        let fs = equal_on_off(chain, &setup(), &t, small(), &[], "nat sweep, fused");
        assert!(fs.invalidated >= 20, "{chain}: {fs:?}");
        assert!(fs.hits >= 5000, "{chain}: {fs:?}");
    }
}

/// Fused runs across a Maglev backend change: the change (a heavy backend added, the
/// old ones kept) invalidates the entries, which are recorded again with the tracked
/// connections' old backends. Then flows 0-19 fall silent past the connection timeout
/// (15 s) while 20-39 go on in fused runs, whose sweeps remove the idle connections
/// (a new epoch). When flows 0-19 resume, their entries are still there (FastPath idle
/// timeout 30 s) but their tokens must fail: the slow path balances them over the new
/// backends. Fails if a fused run takes a visit Maglev did not check.
#[test]
fn a_maglev_backend_change_then_expiry_under_fused_runs_rebalances_like_the_slow_path() {
    let vip = [203, 0, 113, 10];
    let t = phases(
        &[(2 * SEC, 0..40), (22 * SEC, 20..40), (2 * SEC, 0..40)],
        |k| tcp([10, 0, 1, k], vip, 5000, 80, 0x10),
    );
    let change = [Scheduled {
        at: 200,
        nf: "m0".into(),
        cmd: "backends 10.200.0.1 10.200.0.2@02:00:00:00:01:02 10.200.0.3:2 10.200.0.4:6@02:00:00:00:01:04"
            .into(),
    }];
    for chain in ["MO", "FMO"] {
        let change: Vec<Scheduled> = change
            .iter()
            .map(|c| Scheduled {
                nf: format!("m{}", chain.find('M').unwrap()),
                ..c.clone()
            })
            .collect();
        let fs = equal_on_off(chain, &setup(), &t, small(), &change, "maglev, fused");
        assert!(fs.invalidated >= 80, "{chain}: {fs:?}");
        assert!(fs.hits >= 4000, "{chain}: {fs:?}");
    }
}

#[test]
fn a_full_table_evicts_and_counts() {
    let mut f = Vec::new();
    for round in 0..3u64 {
        for k in 0..200u16 {
            let a = [10, 0, (k >> 8) as u8, k as u8];
            f.push((
                round * SEC + k as u64,
                tcp(a, [203, 0, 113, 10], 4000 + k, 80, 0x10),
            ));
        }
    }
    let cfg = FastConfig {
        entries: 16,
        timeout_ns: 0,
        record_at: 1,
    };
    let fs = equal_on_off("FNMO", &setup(), &trace_of(&f), cfg, &[], "tiny table");
    assert!(fs.evicted > 0, "{fs:?}");
    assert!(fs.installed >= 400, "{fs:?}");
}

#[test]
fn a_change_invalidates_entries_through_that_nf() {
    let (a, b) = ([10, 0, 0, 1], [203, 0, 113, 10]);
    let f: Vec<(u64, Vec<u8>)> = (0..40)
        .map(|i| (i * SEC / 100, tcp(a, b, 4000, 443, 0x10)))
        .collect();
    let t = trace_of(&f);
    // Rules change at the 20th packet of the flow (each is followed by 32 fillers): the
    // flow is denied from then on.
    let change = [Scheduled {
        at: 20 * 33,
        nf: "f0".into(),
        cmd: "rules deny tcp port 443; allow all".into(),
    }];
    let fs = equal_on_off("FO", &setup(), &t, small(), &change, "rule change");
    assert_eq!(
        (fs.invalidated, fs.installed, fs.hits),
        (1, 2, 38),
        "{fs:?}"
    );
    // A UDP flow the filter drops never reaches Maglev: a backend change leaves its entry.
    let f: Vec<(u64, Vec<u8>)> = (0..40)
        .map(|i| (i * SEC / 100, udp(a, b, 4000, 443)))
        .collect();
    let change = [Scheduled {
        at: 20 * 33,
        nf: "m1".into(),
        cmd: "backends 10.200.0.9".into(),
    }];
    let fs = equal_on_off(
        "FM",
        &setup(),
        &trace_of(&f),
        small(),
        &change,
        "backend change",
    );
    assert_eq!(
        (fs.invalidated, fs.installed, fs.hits),
        (0, 1, 39),
        "{fs:?}"
    );
}

#[test]
fn hits_counted_in_entries_reach_the_counters_before_a_change_and_at_the_end() {
    // A hit counts in its entry (one byte, handed over at 255); the per-NF counters and
    // the filter's per-rule hit counters must still equal the slow path's: across two
    // hand-overs, before the rule change at the flow's 600th packet (which restarts the
    // filter's hit counters, so hits counted before it must not land after it), and at
    // the end of the run.
    let (a, b) = ([10, 0, 0, 1], [203, 0, 113, 10]);
    let f: Vec<(u64, Vec<u8>)> = (0..700)
        .map(|i| (i * SEC / 1000, tcp(a, b, 4000, 443, 0x10)))
        .collect();
    let change = [Scheduled {
        at: 600 * 33,
        nf: "f0".into(),
        cmd: "rules allow tcp port 443; deny udp; allow all".into(),
    }];
    let fs = equal_on_off("FO", &setup(), &trace_of(&f), small(), &change, "counts");
    assert_eq!(
        (fs.installed, fs.invalidated, fs.hits),
        (2, 1, 698),
        "{fs:?}"
    );
}

#[test]
fn refused_flows_run_the_whole_chain() {
    // G tests TCP flags, so it refuses TCP flows: nothing is consolidated for them. The
    // refusal is remembered: 15 packets run unrecorded, the 16th is recorded again.
    let (a, b) = ([10, 0, 0, 1], [203, 0, 113, 10]);
    let f: Vec<(u64, Vec<u8>)> = (0..30)
        .map(|i| {
            (
                i * SEC / 100,
                tcp(a, b, 4000, 22, if i == 0 { 0x02 } else { 0x10 }),
            )
        })
        .collect();
    let fs = equal_on_off("GNO", &setup(), &trace_of(&f), small(), &[], "refusal");
    assert_eq!(
        (fs.hits, fs.installed, fs.refused, fs.unrecorded),
        (0, 0, 2, 28),
        "{fs:?}"
    );
}

#[test]
fn recording_the_second_packet_skips_one_packet_flows() {
    // 40 flows of one packet, then one of 10: only the long flow is recorded (at its
    // second packet) and its last 8 packets hit; the rest, ARP fillers included, miss.
    let b = [203, 0, 113, 10];
    let mut f: Vec<(u64, Vec<u8>)> = (0..40u8)
        .map(|k| (k as u64, udp([10, 0, 2, k], b, 4000, 53)))
        .collect();
    f.extend((0..10u64).map(|i| (SEC + i, udp([10, 0, 0, 1], b, 4000, 80))));
    let fs = equal_on_off(
        "FNMO",
        &setup(),
        &trace_of(&f),
        small_second(),
        &[],
        "second",
    );
    assert_eq!(
        (fs.deferred, fs.installed, fs.hits, fs.misses),
        (41, 1, 8, 42 + 50 * 32),
        "{fs:?}"
    );
}

#[test]
fn unsolicited_inbound_packets_are_dropped_on_the_fast_path_until_a_mapping_answers() {
    // Replies from outside to the NAT's public port before the inside host has sent
    // anything are dropped (no mapping) on the fast path; once the inside host's packet
    // creates the mapping they answer, the drop entry fails its check and the replies are
    // translated.
    let (inside, remote) = ([10, 0, 0, 1], [203, 0, 113, 7]);
    let public = [198, 51, 100, 1];
    // The NAT maps the first flow to the pool's first port: find it from a run.
    let first_port = 1024;
    let mut f: Vec<(u64, Vec<u8>)> = (0..10u64)
        .map(|i| (i, udp(remote, public, 53, first_port)))
        .collect();
    f.push((SEC, udp(inside, remote, 5000, 53)));
    f.extend((0..10u64).map(|i| (SEC + 1 + i, udp(remote, public, 53, first_port))));
    let fs = equal_on_off("N", &setup(), &trace_of(&f), small(), &[], "unsolicited");
    assert!(fs.hits >= 9, "the drops did not take the fast path: {fs:?}");
    assert_eq!(fs.invalidated, 1, "{fs:?}");
    assert_eq!(fs.refused, 0, "{fs:?}");
}

/// Two outputs, picked by the low bit of the ingress port.
struct Split(Profile);

impl Nf for Split {
    fn profile(&self) -> &Profile {
        &self.0
    }
    fn process(&mut self, b: &mut Batch, _: &Context) {
        for p in b {
            let o = (p.meta().in_port & 1) as u8;
            p.forward(o);
        }
    }
}

fn split() -> Box<dyn Nf> {
    Box::new(Split(Profile {
        reads: Fields::IN_PORT,
        writes: Fields::NONE,
        may_drop: false,
        changes_length: false,
        per_flow_state: false,
        outputs: &["even", "odd"],
        drop_reasons: &[],
    }))
}

#[test]
fn chains_with_merges_are_refused_with_a_clear_error() {
    let mon = || -> Box<dyn Nf> { Box::new(catena::nfs::FlowMonitor::new(16, 0)) };
    let mut c = Chain::linear(
        "m",
        2,
        1,
        vec![
            ("s".into(), split()),
            ("a".into(), mon()),
            ("b".into(), mon()),
        ],
    );
    // s:even -> a -> b, s:odd -> b: `b` has two predecessors.
    c.nodes[1].next = vec![2, 3];
    let e = c.enable_fastpath(FastConfig::default()).unwrap_err();
    assert_eq!(
        e,
        "FastPath needs a chain without merges, but `b` is fed by `s` and `a`"
    );
    // A sink fed by two branches is a merge too: the branches' packets would interleave
    // differently.
    let mut c = Chain::linear("m", 2, 1, vec![("s".into(), split()), ("a".into(), mon())]);
    c.nodes[1].next = vec![2, 3];
    assert!(c.enable_fastpath(FastConfig::default()).is_err());
    // Both outputs into one node is no merge.
    let mut c = Chain::linear("m", 2, 1, vec![("s".into(), split()), ("a".into(), mon())]);
    assert!(c.enable_fastpath(FastConfig::default()).is_ok());
    assert!(c
        .describe()
        .contains("s            always run: refuses consolidation"));
}

#[test]
fn cli_check_shows_the_plan_and_run_reports_the_counters() {
    let dir = common::tempdir();
    let chain = dir.path().join("c.toml");
    std::fs::write(
        &chain,
        "fastpath = true\nfastpath_entries = 1024\n[[nf]]\nname = \"acl\"\nkind = \"ip_filter\"\nrules = [\"allow ip\"]\n[[nf]]\nname = \"sw\"\nkind = \"mac_switch\"\n",
    )
    .unwrap();
    let bin = env!("CARGO_BIN_EXE_catena");
    let out = std::process::Command::new(bin)
        .arg("check")
        .arg(&chain)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("fastpath: on"), "{text}");
    assert!(
        text.contains("acl          consolidated; state function: per-rule hit counter"),
        "{text}"
    );
    assert!(text.contains("sw           always run:"), "{text}");
    let trace = common::dataset("bench/ndpi-ether-merged.pcap");
    let run = |extra: &str| {
        let o = std::process::Command::new(bin)
            .args(["run", "--json", "-i"])
            .arg(&trace)
            .arg(&chain)
            .args((!extra.is_empty()).then_some(extra))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    let on = run("");
    assert!(on["fastpath"]["misses"].as_u64().unwrap() > 0, "{on}");
    let off = run("--no-fastpath");
    assert!(off["fastpath"].is_null());
    assert_eq!(on["nfs"], off["nfs"]);
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "fastpath = \"yes\"\n").unwrap();
    let o = std::process::Command::new(bin)
        .arg("check")
        .arg(&bad)
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && e.contains("bad.toml:1:") && e.lines().count() == 1,
        "{e}"
    );
}

/// The key read straight from the bytes of plain Ethernet / IPv4 / TCP or UDP packets is
/// the key the header walk gives, on every packet of every capture, at several ingress
/// ports; and it declines what it does not cover (tags, options, fragments, short
/// headers, other protocols) so that the walk decides those.
#[test]
fn the_plain_key_is_the_parsed_key_on_every_capture() {
    use catena::optimise::fastpath::FpKey;
    use catena::packet::Pool;
    let mut pool = Pool::new(1, 65_536);
    let (mut plain, mut total) = (0usize, 0usize);
    for path in common::all_captures() {
        let Ok(t) = Trace::open(&path) else { continue };
        for i in 0..t.len() {
            let d = t.packet(i);
            if d.len() > 65_536 {
                continue;
            }
            let mut p = pool.alloc().unwrap();
            p.set_bytes(d);
            p.meta_mut().link = t.link();
            p.meta_mut().in_port = (i % 3) as u16;
            let fast = FpKey::plain(&p);
            let walked = FpKey::parsed(&mut p);
            total += 1;
            if let Some(k) = fast {
                plain += 1;
                assert_eq!(Some(k), walked, "{} packet {i}", path.display());
                let l = p.layers();
                assert!(l.vlans == 0 && l.l3_off == 14 && l.l4_off == 34 && !l.is_fragment());
            }
            pool.free(p);
        }
    }
    // Most of the datasets' traffic is plain: the fast read must be the common case.
    assert!(total > 100_000 && plain * 2 > total, "{plain} of {total}");
}

/// Hand-made packets at the edges of the plain read: each is declined (None) or keyed as
/// the walk keys it.
#[test]
fn the_plain_key_declines_what_it_does_not_cover() {
    use catena::optimise::fastpath::FpKey;
    use catena::packet::Pool;
    let mut udp = vec![0u8; 42];
    udp[12] = 0x08;
    udp[14] = 0x45;
    udp[23] = 17;
    udp[26..30].copy_from_slice(&[10, 0, 0, 1]);
    udp[30..34].copy_from_slice(&[10, 0, 0, 2]);
    udp[34..38].copy_from_slice(&[0x30, 0x39, 0, 53]);
    let mut tcp = udp.clone();
    tcp[23] = 6;
    tcp.resize(54, 0);
    let edit = |b: &[u8], f: &dyn Fn(&mut Vec<u8>)| {
        let mut v = b.to_vec();
        f(&mut v);
        v
    };
    let cases: Vec<(Vec<u8>, bool)> = vec![
        (udp.clone(), true),
        (tcp.clone(), true),
        (edit(&tcp, &|v| v.truncate(53)), false), // TCP header cut short
        (edit(&udp, &|v| v.truncate(41)), false), // UDP header cut short
        (edit(&udp, &|v| v[14] = 0x46), false),   // IPv4 options
        (edit(&udp, &|v| v[20] = 0x20), false),   // more fragments
        (edit(&udp, &|v| v[21] = 0x01), false),   // later fragment
        (edit(&udp, &|v| v[20] = 0x40), true),    // don't fragment: still plain
        (edit(&udp, &|v| v[23] = 1), false),      // ICMP
        (edit(&udp, &|v| v[12] = 0x81), false),   // 802.1Q tag
    ];
    let mut pool = Pool::new(1, 2048);
    for (i, (bytes, is_plain)) in cases.iter().enumerate() {
        let mut p = pool.alloc().unwrap();
        p.set_bytes(bytes);
        let fast = FpKey::plain(&p);
        assert_eq!(fast.is_some(), *is_plain, "case {i}");
        if let Some(k) = fast {
            assert_eq!(Some(k), FpKey::parsed(&mut p), "case {i}");
        }
        pool.free(p);
    }
    // Raw-IP captures never take the plain read.
    let mut p = pool.alloc().unwrap();
    p.set_bytes(&udp);
    p.meta_mut().link = LinkKind::RawIp;
    assert_eq!(FpKey::plain(&p), None);
    pool.free(p);
}

// ---- NAT fold-back (docs/fastpath.md, "Fold-back") ----

/// Three NATs in a row: each sees the one before's public address as inside.
fn three_nats() -> Setup {
    Setup {
        vip: "203.0.113.10".into(),
        inside: "10.0.0.0/8, 198.51.100.0/24",
        ports: 1,
    }
}

/// A trace of `frames` in time order, no fillers (so hits take fused runs).
fn trace_sorted(mut frames: Vec<(u64, Vec<u8>)>) -> Trace {
    frames.sort_by_key(|(ts, _)| *ts);
    Trace::from_packets(
        LinkKind::Ethernet,
        PcapHeader::new(1, false),
        frames.iter().map(|(ts, p)| (*ts, p.as_slice())),
    )
}

/// A packet every `every` ns from `from` until `until` (exclusive): their times.
fn every(from: u64, until: u64, every: u64) -> impl Iterator<Item = u64> {
    (0..)
        .map(move |i| from + i * every)
        .take_while(move |&t| t < until)
}

const MS: u64 = 1_000_000;

/// Flow `k`'s packets (`pkt`) at `times`, then silent until 1 ms under (even `k`) or
/// past (odd `k`) `timeout` after the last of them, then back every `step` for `span`.
/// Returns the time the flow ends.
fn silent_then_back(
    f: &mut Vec<(u64, Vec<u8>)>,
    k: u8,
    times: impl Iterator<Item = u64>,
    timeout: u64,
    (span, step): (u64, u64),
    pkt: impl Fn() -> Vec<u8>,
) -> u64 {
    let n = f.len();
    f.extend(times.map(|t| (t, pkt())));
    let end = f[n..].last().map_or(0, |(t, _)| *t);
    let back = if k.is_multiple_of(2) {
        end + timeout - MS
    } else {
        end + timeout + MS
    };
    f.extend(every(back, back + span, step).map(|t| (t, pkt())));
    back + span
}

/// NAT flows whose later packets fold, then idle to just under (even flows) or just past
/// (odd flows) their mapping's timeout, 1 ms either side of their last packet's
/// deadline: UDP (20 s) and TCP (7,440 s), through three NATs, while a clock flow keeps
/// the sweeps going. Their last packets are folded hits, so the mappings' stored
/// deadlines are older than their last packets': fails without the folds
/// (`fast_fold`, at the end of each fold period), which the just-under flows need to
/// find their mappings alive; the just-past flows hold a fold to the last hit's time.
#[test]
fn nat_flows_that_fold_then_idle_around_the_timeout_stay_equal() {
    let remote = [203, 0, 113, 7];
    let mut f: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut last = 0;
    for k in 0..8u8 {
        let stop = 1500 * MS + k as u64 * 170 * MS;
        let times = every(k as u64 * MS, stop, 40 * MS);
        let pkt = || udp([10, 0, 2, k], remote, 5000 + k as u16, 53);
        let end = silent_then_back(&mut f, k, times, 20 * SEC, (200 * MS, 40 * MS), pkt);
        last = last.max(end);
    }
    for k in 0..4u8 {
        let stop = 1500 * MS + k as u64 * 230 * MS;
        let times = every(k as u64 * MS + 500_000, stop, 40 * MS);
        let pkt = || tcp([10, 0, 3, k], remote, 6000 + k as u16, 443, 0x10);
        let end = silent_then_back(&mut f, k, times, 7440 * SEC, (200 * MS, 40 * MS), pkt);
        last = last.max(end);
    }
    // The clock flow: dense while the UDP flows idle, sparse through the TCP flows' idle.
    let clock = || udp([10, 0, 9, 1], remote, 7000, 53);
    f.extend(every(0, 30 * SEC, 50 * MS).map(|t| (t, clock())));
    f.extend(every(30 * SEC, last, 2 * SEC).map(|t| (t, clock())));
    let t = trace_sorted(f);
    let fs = equal_on_off(
        "NNN",
        &three_nats(),
        &t,
        small(),
        &[],
        "fold around timeouts",
    );
    assert!(fs.folded > 0 && fs.hits > 1000, "{fs:?}");
}

/// A TCP mapping whose outgoing hits fold while an inbound RST on the slow path makes
/// it linger (2 s): the folded refreshes after the RST must give the linger deadline,
/// those before it nothing. The flow then idles to 1 ms under, then 1 ms past, its
/// deadline. Fails without the folds (the mapping expires early) and with a fold that
/// uses the timeout of the state the hits saw rather than the mapping's current one.
#[test]
fn a_mapping_folded_one_way_and_lingering_from_the_other_stays_equal() {
    let (inside, remote, public) = ([10, 0, 0, 2], [203, 0, 113, 7], [198, 51, 100, 1]);
    let out = || tcp(inside, remote, 4001, 443, 0x10);
    let mut f: Vec<(u64, Vec<u8>)> = every(0, 1500 * MS, 10 * MS).map(|t| (t, out())).collect();
    // The NAT's first TCP mapping takes the pool's first port.
    f.push((1000 * MS + 5 * MS, tcp(remote, public, 443, 1024, 0x04)));
    let end = 1490 * MS;
    let under = end + 2 * SEC - MS;
    f.push((under, out()));
    f.push((under + 2 * SEC + MS, out()));
    let clock = || udp([10, 0, 9, 1], remote, 7000, 53);
    f.extend(every(3 * MS, under + 3 * SEC, 10 * MS).map(|t| (t, clock())));
    let t = trace_sorted(f);
    for chain in ["N", "NO"] {
        let fs = equal_on_off(chain, &setup(), &t, small(), &[], "fold and linger");
        assert!(fs.folded > 0, "{chain}: {fs:?}");
    }
}

/// A run that ends with folded hits pending (no fold since): the NATs' counters, which
/// hits count in their entries, and every other stat equal the slow path's. Fails
/// without the hand-over at the end (counts and folds before the summary).
#[test]
fn a_run_that_ends_with_folded_hits_pending_has_equal_nat_stats() {
    let remote = [203, 0, 113, 7];
    let mut f: Vec<(u64, Vec<u8>)> = Vec::new();
    for k in 0..8u8 {
        f.extend(
            every(k as u64 * MS, 800 * MS, 5 * MS)
                .map(|t| (t, udp([10, 0, 2, k], remote, 5000 + k as u16, 53))),
        );
    }
    let t = trace_sorted(f);
    let fs = equal_on_off("NNN", &three_nats(), &t, small(), &[], "ends pending");
    assert!(fs.folded > 500, "{fs:?}");
}

/// A NAT pool change while folded hits are pending: the flows fall silent at 0.6 s, the
/// change comes at 0.62 s (inside the fold period, which ends at the 1 s sweep), and it
/// removes every entry (all go through n0). The flows then come back 1 ms under (even)
/// or past (odd) their UDP timeout. Fails without folding the pending refreshes at the
/// command (before it, or as its invalidation removes the entries): they would be lost.
#[test]
fn a_pool_change_with_folded_hits_pending_stays_equal() {
    let remote = [203, 0, 113, 7];
    let mut f = eight_silent_after_600ms(20 * SEC, |k| {
        udp([10, 0, 2, k], remote, 5000 + k as u16, 53)
    });
    let clock = || udp([10, 0, 9, 1], remote, 7000, 53);
    f.extend(every(2 * MS, 22 * SEC, 5 * MS).map(|t| (t, clock())));
    let t = trace_sorted(f);
    let at = first_at(&t, 620 * MS);
    let change = [Scheduled {
        at,
        nf: "n0".into(),
        cmd: "pool 198.51.100.200 2000-2999".into(),
    }];
    let fs = equal_on_off("NNN", &three_nats(), &t, small(), &change, "pool change");
    assert!(fs.folded > 0 && fs.invalidated > 0, "{fs:?}");
}

/// Flows 0-7 (`pkt(k)`) every 5 ms from k ms until 0.6 s, then silent until 1 ms under
/// (even) or past (odd) `timeout` after their last packet, then back every 10 ms for
/// 100 ms (the command tests: the change comes while their folded hits are pending).
fn eight_silent_after_600ms(timeout: u64, pkt: impl Fn(u8) -> Vec<u8>) -> Vec<(u64, Vec<u8>)> {
    let mut f: Vec<(u64, Vec<u8>)> = Vec::new();
    for k in 0..8u8 {
        let times = every(k as u64 * MS, 600 * MS, 5 * MS);
        silent_then_back(&mut f, k, times, timeout, (100 * MS, 10 * MS), || pkt(k));
    }
    f
}

/// The index of `t`'s first packet at or after `ns` (where a scheduled change goes).
fn first_at(t: &Trace, ns: u64) -> u64 {
    (0..t.len()).find(|&i| t.record(i).ts_ns >= ns).unwrap() as u64
}

/// Flows recorded at 0.4 s, hit once at 0.6 s, then silent until 1 ms under (even) or
/// past (odd) `timeout` after that hit, beside a clock flow of SYNs (a SYN never folds,
/// so every folded hit is one of the flows'). The period runs from the first chunk
/// after the first packet to the 1 s sweep.
fn recorded_then_one_hit(pkt: impl Fn(u8) -> Vec<u8>, clock: Vec<u8>, timeout: u64) -> Trace {
    let mut f: Vec<(u64, Vec<u8>)> = Vec::new();
    for k in 0..8u8 {
        let times = [400 * MS, 600 * MS].map(|t| t + k as u64 * MS).into_iter();
        silent_then_back(&mut f, k, times, timeout, (MS, MS), || pkt(k));
    }
    f.extend(every(0, timeout + 2 * SEC, 5 * MS).map(|t| (t, clock.clone())));
    trace_sorted(f)
}

/// A recording refreshes its NFs' state as a hit that runs them does, so its entry is
/// marked with the fold period and the flow's first hit folds (`folded` counts exactly
/// the 8 flows' one hit each: fails with entries installed unmarked, where that hit runs
/// the NATs and Maglevs to mark its entry). Their refreshes fold at the sweep, which the
/// just-under flows need to find their mappings and connections alive after the
/// silence: through three NATs (UDP, 20 s) and three Maglevs (TCP, 15 s).
#[test]
fn a_flows_first_hit_after_its_recording_folds_and_stays_equal() {
    let (vip, remote) = ([203, 0, 113, 10], [203, 0, 113, 7]);
    let t = recorded_then_one_hit(
        |k| udp([10, 0, 2, k], remote, 5000 + k as u16, 53),
        tcp([10, 0, 9, 1], remote, 7000, 443, 0x02),
        20 * SEC,
    );
    let fs = equal_on_off("NNN", &three_nats(), &t, small(), &[], "first hit folds");
    assert_eq!(fs.folded, 8, "{fs:?}");
    let t = recorded_then_one_hit(
        |k| tcp([10, 0, 2, k], vip, 5000 + k as u16, 80, 0x10),
        tcp([10, 0, 9, 1], vip, 7000, 80, 0x02),
        15 * SEC,
    );
    let fs = equal_on_off("LLM", &three_nats(), &t, small(), &[], "first hit folds");
    assert_eq!(fs.folded, 8, "{fs:?}");
}

// ---- Maglev fold-back (docs/fastpath.md, "Fold-back", Maglev) ----

/// Maglev flows whose later packets fold, then idle to just under (even flows) or just
/// past (odd flows) the connection timeout (15 s), 1 ms either side, through three
/// Maglevs that all track them (`LLM`) and a mixed chain (filter, NAT, Maglev, monitor),
/// while a clock flow to the VIP keeps the sweeps going (a packet a millisecond: a sweep
/// about every 1,024 packets and second). Their last packets are folded hits, so the
/// connections' `seen` is older than their last packets' until the folds: fails without
/// them (`fast_fold`), which the just-under flows need to find their connections alive.
#[test]
fn maglev_flows_that_fold_then_idle_around_the_timeout_stay_equal() {
    let vip = [203, 0, 113, 10];
    let mut f: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut last = 0;
    for k in 0..8u8 {
        let stop = 1500 * MS + k as u64 * 170 * MS;
        let times = every(k as u64 * MS + 300_000, stop, 20 * MS);
        let pkt = || tcp([10, 0, 2, k], vip, 5000 + k as u16, 80, 0x10);
        let end = silent_then_back(&mut f, k, times, 15 * SEC, (200 * MS, 20 * MS), pkt);
        last = last.max(end);
    }
    let clock = || tcp([10, 0, 9, 1], vip, 7000, 80, 0x10);
    f.extend(every(0, last, MS).map(|t| (t, clock())));
    let t = trace_sorted(f);
    for chain in ["LLM", "FNMO"] {
        let fs = equal_on_off(
            chain,
            &three_nats(),
            &t,
            small(),
            &[],
            "maglev fold, timeouts",
        );
        assert!(fs.folded > 1000 && fs.hits > 10_000, "{chain}: {fs:?}");
    }
}

/// A run that ends with folded Maglev hits pending (no fold since): the per-backend
/// counters and `not_vip`, which hits count in their entries, and every other stat
/// equal the slow path's. Idle connections (flows 8-27 stop 50 ms apart, so they expire
/// 15.5-16.45 s) must be swept at the same packet (`tracked_flows` at the end, 16.6 s):
/// the folded hits' ticks count towards the sweep (`fast_skipped`). Fails without the
/// counts in entries (`fast_count`) and without the folded ticks.
#[test]
fn a_run_that_ends_with_folded_hits_pending_has_equal_maglev_stats() {
    let vip = [203, 0, 113, 10];
    let mut f: Vec<(u64, Vec<u8>)> = Vec::new();
    for k in 0..8u8 {
        f.extend(
            every(k as u64 * MS, 16 * SEC + 600 * MS, 2 * MS)
                .map(|t| (t, tcp([10, 0, 2, k], vip, 5000 + k as u16, 80, 0x10))),
        );
    }
    for k in 8..28u8 {
        f.extend(
            every(k as u64 * MS, 500 * MS + (k as u64 - 8) * 50 * MS, 5 * MS)
                .map(|t| (t, tcp([10, 0, 2, k], vip, 5000 + k as u16, 80, 0x10))),
        );
    }
    // Not for the VIP: passed (counted as `not_vip`).
    f.extend(
        every(MS / 2, 800 * MS, 5 * MS)
            .map(|t| (t, udp([10, 0, 3, 1], [203, 0, 113, 7], 4000, 53))),
    );
    let t = trace_sorted(f);
    for chain in ["LLM", "FNMO"] {
        let fs = equal_on_off(
            chain,
            &three_nats(),
            &t,
            small(),
            &[],
            "maglev ends pending",
        );
        assert!(fs.folded > 5000, "{chain}: {fs:?}");
    }
}

/// A Maglev backend change mid-run while folded hits are pending (backends 2 and 3
/// go: their flows are rehashed on their next packet), then the flows idle to just
/// under (even) or past (odd) the connection timeout. Fails without folding the pending
/// refreshes at the command (`fast_fold`, before it or as its invalidation removes the
/// entries).
#[test]
fn a_maglev_backend_change_with_folded_hits_pending_stays_equal() {
    let vip = [203, 0, 113, 10];
    let mut f = eight_silent_after_600ms(15 * SEC, |k| {
        tcp([10, 0, 2, k], vip, 5000 + k as u16, 80, 0x10)
    });
    let clock = || tcp([10, 0, 9, 1], vip, 7000, 80, 0x10);
    f.extend(every(2 * MS, 17 * SEC, MS).map(|t| (t, clock())));
    let t = trace_sorted(f);
    // At about 0.55 s: hits folding, the flows about to fall silent.
    let at = first_at(&t, 550 * MS);
    for chain in ["LLM", "FNMO"] {
        let nf = format!("m{}", chain.rfind('M').unwrap());
        let change = [Scheduled {
            at,
            nf,
            cmd: "backends 10.200.0.1 10.200.0.4:2@02:00:00:00:01:04".into(),
        }];
        let fs = equal_on_off(chain, &three_nats(), &t, small(), &change, "maglev change");
        assert!(fs.folded > 0 && fs.invalidated > 0, "{chain}: {fs:?}");
    }
}
