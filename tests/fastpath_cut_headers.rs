//! FastPath on packets whose transport header the capture cut short (header-only
//! snaplens): the filter reads whatever ports are there, so FastPath must give the same
//! verdicts as the chain without it, and both must be tcpdump's (issue 14, point 1).

mod common;

use std::path::Path;
use std::process::Command;

use catena::io::{PcapHeader, PcapWriter, Trace};
use catena::packet::LinkKind;
use catena::runtime::{Chain, ChainConfig, NoProgress, RunOptions, Runner, Summary};

/// Ethernet (optionally one 802.1Q tag) / IPv4 / TCP ACK from 10.0.0.1:40000 to
/// 10.0.0.2:`dport`, cut to `snap` bytes as a header-only capture keeps it.
fn tcp_cut(dport: u16, vlan: bool, snap: usize) -> Vec<u8> {
    let mut v = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
    if vlan {
        v.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
    }
    v.extend_from_slice(&[0x08, 0x00]);
    // IPv4: total length 40 + 100 bytes of payload the capture did not keep.
    v.extend_from_slice(&[0x45, 0, 0, 140, 0, 1, 0x40, 0, 64, 6, 0, 0]);
    v.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
    v.extend_from_slice(&40000u16.to_be_bytes());
    v.extend_from_slice(&dport.to_be_bytes());
    v.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1, 0x50, 0x10, 0x20, 0, 0, 0, 0, 0]);
    v.truncate(snap);
    v
}

fn trace(frames: &[Vec<u8>]) -> Trace {
    Trace::from_packets(
        LinkKind::Ethernet,
        PcapHeader::new(1, false),
        frames
            .iter()
            .enumerate()
            .map(|(i, f)| (1_000_000_000 + i as u64 * 1000, f.as_slice())),
    )
}

/// Runs `allow tcp dst port 443` (default deny) with FastPath off or on (recording a
/// flow's first packet, so consolidation starts as early as it can).
fn run(t: &Trace, fast: bool, out: &Path) -> Summary {
    let text = format!(
        "name = \"cut\"\nfastpath = {fast}\nfastpath_record = 1\n[[nf]]\nname = \"f\"\nkind = \"ip_filter\"\nrules = [\"allow tcp dst port 443\"]\ndefault = \"deny\"\n"
    );
    let cfg = ChainConfig::parse(&text, "cut.toml").expect("config");
    let chain = Chain::from_config(&cfg).expect("chain");
    let mut r = Runner::new(chain, t.max_packet_len());
    let opts = RunOptions {
        outputs: vec![("out".into(), out.to_path_buf())],
        ..Default::default()
    };
    r.run(t, &opts, &mut NoProgress).expect("run")
}

/// Packets tcpdump's BPF passes for `expr` in the trace written to `dir`.
fn tcpdump_count(t: &Trace, expr: &str, dir: &Path) -> u64 {
    common::require("tcpdump");
    let p = dir.join("in.pcap");
    let mut w = PcapWriter::create(&p, t.header()).unwrap();
    w.write_trace(t).unwrap();
    w.finish().unwrap();
    let o = Command::new("tcpdump")
        .args(["-nn", "-r"])
        .arg(&p)
        .arg(expr)
        .output()
        .expect("tcpdump");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    o.stdout.iter().filter(|&&b| b == b'\n').count() as u64
}

/// Off and on give the same output file and the count BPF gives; returns it.
fn same_on_off_as_bpf(t: &Trace, expr: &str) -> u64 {
    let dir = common::tempdir();
    let (a, b) = (dir.path().join("off.pcap"), dir.path().join("on.pcap"));
    let off = run(t, false, &a);
    let on = run(t, true, &b);
    let bpf = tcpdump_count(t, expr, dir.path());
    assert_eq!(off.packets_out, bpf, "without FastPath vs tcpdump `{expr}`");
    assert_eq!(on.packets_out, bpf, "with FastPath vs tcpdump `{expr}`");
    assert!(
        std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap(),
        "output pcaps differ"
    );
    bpf
}

/// 38-byte frames keep the ports but not the rest of the TCP header: 100 to port 443,
/// then 100 to port 22 between the same two hosts. Before the fix FastPath passed 200.
#[test]
fn ports_of_a_cut_tcp_header_decide_with_and_without_fastpath() {
    let mut f: Vec<Vec<u8>> = (0..100).map(|_| tcp_cut(443, false, 38)).collect();
    f.extend((0..100).map(|_| tcp_cut(22, false, 38)));
    assert_eq!(same_on_off_as_bpf(&trace(&f), "tcp dst port 443"), 100);
}

/// The same through an 802.1Q tag at snaplen 54 (16 bytes of TCP), 443 and 22
/// interleaved. Before the fix: 100 without FastPath, 16 with it.
#[test]
fn ports_of_a_cut_tcp_header_behind_a_vlan_tag_decide_the_same() {
    let f: Vec<Vec<u8>> = (0..200)
        .map(|i| tcp_cut(if i % 2 == 0 { 443 } else { 22 }, true, 54))
        .collect();
    assert_eq!(
        same_on_off_as_bpf(&trace(&f), "vlan and tcp dst port 443"),
        100
    );
}

/// Complete headers are still consolidated: the fix only declines cut-short ones.
#[test]
fn complete_headers_still_take_the_fast_path() {
    let f: Vec<Vec<u8>> = (0..200)
        .map(|i| tcp_cut(if i < 100 { 443 } else { 22 }, true, 58))
        .collect();
    let t = trace(&f);
    let dir = common::tempdir();
    let s = run(&t, true, &dir.path().join("on.pcap"));
    assert_eq!(s.packets_out, 100);
    let fp = s.fastpath.expect("fastpath counters");
    assert!(fp.hits >= 100, "{fp:?}");
}
