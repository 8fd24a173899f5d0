//! One run clock for every NF with timers (issue 14, point 4; docs/time.md): it never goes
//! back and one outlier timestamp does not move it. Each case failed before the clock:
//! the NFs took each packet's own capture time.

mod common;

use catena::io::{PcapHeader, Trace};
use catena::packet::LinkKind;
use catena::runtime::Summary;

const SEC: u64 = 1_000_000_000;
/// The last second a pcap can hold: a corrupt record's favourite.
const FAR: u64 = u32::MAX as u64 * SEC;

fn tcp(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16, syn: bool) -> Vec<u8> {
    let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(src, dst, 64)
        .tcp(sport, dport, 1000, 8192);
    let b = if syn { b.syn() } else { b.ack(1) };
    let mut v = Vec::new();
    b.write(&mut v, if syn { b"" } else { b"data" }).unwrap();
    v
}

fn udp(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16) -> Vec<u8> {
    let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(src, dst, 64)
        .udp(sport, dport);
    let mut v = Vec::new();
    b.write(&mut v, b"payload!").unwrap();
    v
}

fn trace(frames: &[(u64, Vec<u8>)]) -> Trace {
    Trace::from_packets(
        LinkKind::Ethernet,
        PcapHeader::new(1, true),
        frames.iter().map(|(t, f)| (*t, f.as_slice())),
    )
}

fn stat(s: &Summary, nf: usize, name: &str) -> u64 {
    s.nfs[nf]
        .stats
        .iter()
        .find(|(k, _)| k == name)
        .map_or_else(|| panic!("no stat {name}"), |(_, v)| *v)
}

/// A first packet stamped 2^32-1 s, then 300 connections 2 s apart with a 1 s timeout
/// and room for 50: every connection ends idle before the next. Before the clock the
/// microbox's expiry stopped at the outlier: 250 `table_full`.
#[test]
fn one_far_future_first_packet_does_not_stop_the_microbox_expiry() {
    let mut f = vec![(FAR, tcp([10, 9, 9, 9], 999, [10, 0, 0, 2], 80, true))];
    for i in 0..300u16 {
        let t = 1_000 * SEC + u64::from(i) * 2 * SEC;
        f.push((t, tcp([10, 0, 0, 1], 1000 + i, [10, 0, 0, 2], 80, true)));
    }
    let text = "name = \"mb\"\n[[nf]]\nname = \"mb\"\nkind = \"microbox\"\nflows = 50\ntimeout = 1\napps = [{ kind = \"tcp_count\" }]\n";
    let s = common::run_chain(text, &trace(&f), None);
    assert_eq!(stat(&s, 0, "table_full"), 0);
    assert_eq!(stat(&s, 0, "flows"), 301);
    assert_eq!(stat(&s, 0, "ended_idle"), 300);
    assert_eq!(stat(&s, 0, "ended_final"), 1);
}

/// Capture time steps back 16 s inside a live UDP mapping (timeout 20 s), then the flow
/// goes on 16 s after its newest packet: the mapping is still live, so the flow keeps its
/// public port. Before the clock the stepped-back packets pulled the mapping's deadline
/// back, and the flow got a second mapping (a new public port).
#[test]
fn a_nat_mapping_outlives_capture_time_stepping_back() {
    let p = udp([10, 0, 0, 1], 5000, [192, 0, 2, 1], 53);
    let f: Vec<(u64, Vec<u8>)> = [100, 101, 84, 85, 116, 117]
        .iter()
        .map(|&s| (s * SEC, p.clone()))
        .collect();
    let dir = common::tempdir();
    let out = dir.path().join("out.pcap");
    let text = "name = \"nat\"\n[[nf]]\nname = \"nat\"\nkind = \"nat\"\ninside = \"10.0.0.0/8\"\npublic = \"198.51.100.1\"\nudp_timeout = 20\n";
    let s = common::run_chain(text, &trace(&f), Some(&out));
    assert_eq!((stat(&s, 0, "created"), stat(&s, 0, "expired")), (1, 0));
    let ports: Vec<[u8; 2]> = common::packets(&out)
        .iter()
        .map(|(_, b)| [b[34], b[35]])
        .collect();
    assert_eq!(ports.len(), 6);
    assert!(ports.iter().all(|p| *p == ports[0]), "{ports:?}");
}

/// The monitor is full (capacity 2: conversations A and B) when a new flow's packet
/// stamped 2^32-1 s arrives: making room must not sweep at that time, which would end
/// every live flow as idle. Before the clock A and B were exported as idle there and
/// then again as new records; now A and B each give one final record, the odd packet is
/// counted as overflow, and the records carry capture times.
#[test]
fn one_far_future_packet_does_not_end_the_monitors_flows() {
    let a = udp([10, 0, 0, 1], 5000, [192, 0, 2, 1], 53);
    let b = udp([10, 0, 0, 2], 6000, [192, 0, 2, 1], 53);
    let mut f: Vec<(u64, Vec<u8>)> = Vec::new();
    for i in 0..5 {
        f.push((100 * SEC + i * SEC, a.clone()));
        f.push((100 * SEC + i * SEC, b.clone()));
    }
    f.push((FAR, udp([10, 0, 0, 7], 7, [192, 0, 2, 7], 7)));
    for i in 5..10 {
        f.push((100 * SEC + i * SEC, a.clone()));
        f.push((100 * SEC + i * SEC, b.clone()));
    }
    let dir = common::tempdir();
    let rec = dir.path().join("r.jsonl");
    let text = format!(
        "name = \"mon\"\n[[nf]]\nname = \"mon\"\nkind = \"flow_monitor\"\ntimeout = 10\ncapacity = 2\nrecords = \"{}\"\n",
        rec.display()
    );
    let s = common::run_chain(&text, &trace(&f), None);
    assert_eq!(stat(&s, 0, "overflow_packets"), 1);
    let recs: Vec<serde_json::Value> = std::fs::read_to_string(&rec)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(recs.len(), 2, "{recs:?}");
    for r in &recs {
        assert_eq!(r["packets_ab"], 10);
        assert_eq!(r["end"], "final");
        assert_eq!(r["first_ns"], 100 * SEC);
        assert_eq!(r["last_ns"], 109 * SEC);
    }
}

/// A learning switch with capture time stepping back: a station's entry refreshed by a
/// stepped-back frame must not expire earlier than its newest frame says. Before the
/// clock B's entry took the time 50 s and was gone at 105 s (a flood).
#[test]
fn a_switch_entry_is_not_aged_by_capture_time_stepping_back() {
    let fr = |dst: u8, src: u8| {
        let mut f = vec![0u8; 60];
        f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, dst]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, src]);
        f[12] = 0x88;
        f[13] = 0xb5;
        f
    };
    let f = vec![
        (100 * SEC, fr(0xb, 0xa)),
        (100 * SEC, fr(0xa, 0xb)),
        (50 * SEC, fr(0xa, 0xb)),
        (51 * SEC, fr(0xa, 0xb)),
        (105 * SEC, fr(0xb, 0xa)),
        (106 * SEC, fr(0xb, 0xa)),
    ];
    let text = "name = \"sw\"\n[input]\nports = 2\n[[nf]]\nname = \"sw\"\nkind = \"mac_switch\"\ntimeout = 10\n";
    let s = common::run_chain(text, &trace(&f), None);
    // Only the very first frame (B unknown) floods.
    assert_eq!(stat(&s, 0, "floods"), 1);
}

/// Connections 1 s apart (timeout 1 s, room for 4), replayed twice: each ends idle by
/// the next one's time, whatever the batches and across the replay (`--loops 2`; the
/// clock looks ahead into the next loop). Before, the microbox swept once per batch at
/// the batch's first packet, so 32 connections in one batch filled its table.
#[test]
fn loops_continue_the_clock() {
    let f: Vec<(u64, Vec<u8>)> = (0..40u16)
        .map(|i| {
            (
                10 * SEC + u64::from(i) * SEC,
                tcp([10, 0, 0, 1], 1000 + i, [10, 0, 0, 2], 80, true),
            )
        })
        .collect();
    let t = trace(&f);
    let text = "name = \"mb\"\n[[nf]]\nname = \"mb\"\nkind = \"microbox\"\nflows = 4\ntimeout = 1\napps = [{ kind = \"tcp_count\" }]\n";
    let cfg = catena::runtime::ChainConfig::parse(text, "t.toml").unwrap();
    let chain = catena::runtime::Chain::from_config(&cfg).unwrap();
    let mut r = catena::runtime::Runner::new(chain, t.max_packet_len());
    let opts = catena::runtime::RunOptions {
        loops: 2,
        ..Default::default()
    };
    let s = r.run(&t, &opts, &mut catena::runtime::NoProgress).unwrap();
    assert_eq!(stat(&s, 0, "table_full"), 0);
    assert_eq!(stat(&s, 0, "flows"), 80);
}
