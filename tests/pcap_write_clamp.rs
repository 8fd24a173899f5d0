//! The pcap writer writes every packet the reader accepts: timestamps past the format's
//! last instant (second 2^32-1) are clamped to it and counted, never an aborted run
//! (issue 14, point 5). Inputs are written by hand: a µs pcap whose record has a fraction
//! over one second on the last second, and pcapngs with `if_tsresol` 0 (whole seconds)
//! and with a large `if_tsoffset`.

mod common;

use std::path::Path;
use std::process::Command;

use catena::io::Trace;

/// A 60-byte Ethernet/IPv4/UDP frame numbered `n`.
fn frame(n: u8) -> Vec<u8> {
    let mut f = vec![0u8; 60];
    f[12] = 0x08;
    f[14] = 0x45;
    f[17] = 46;
    f[22] = 64;
    f[23] = 17;
    f[26..34].copy_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
    f[34..38].copy_from_slice(&[0x30, 0x39, 0, 53]);
    f[39] = 26;
    f[50] = n;
    f
}

/// Classic µs pcap; each packet is (seconds, fraction field).
fn pcap(ts: &[(u32, u32)]) -> Vec<u8> {
    let mut b = Vec::new();
    for v in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 65535, 1] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    for (i, &(s, f)) in ts.iter().enumerate() {
        let d = frame(i as u8);
        for v in [s, f, d.len() as u32, d.len() as u32] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&d);
    }
    b
}

fn block(b: &mut Vec<u8>, kind: u32, body: &[u8]) {
    let len = (12 + body.len()) as u32;
    b.extend_from_slice(&kind.to_le_bytes());
    b.extend_from_slice(&len.to_le_bytes());
    b.extend_from_slice(body);
    b.extend_from_slice(&len.to_le_bytes());
}

/// pcapng with one Ethernet interface carrying `opts` (code, value) and packets stamped
/// `ts` in the interface's units.
fn pcapng(opts: &[(u16, Vec<u8>)], ts: &[u64]) -> Vec<u8> {
    let mut b = Vec::new();
    let mut shb = 0x1a2b_3c4du32.to_le_bytes().to_vec();
    shb.extend_from_slice(&[1, 0, 0, 0]);
    shb.extend_from_slice(&(-1i64).to_le_bytes());
    block(&mut b, 0x0a0d_0d0a, &shb);
    let mut idb = vec![1, 0, 0, 0];
    idb.extend_from_slice(&65535u32.to_le_bytes());
    for (code, v) in opts {
        idb.extend_from_slice(&code.to_le_bytes());
        idb.extend_from_slice(&(v.len() as u16).to_le_bytes());
        idb.extend_from_slice(v);
        idb.resize(idb.len().next_multiple_of(4), 0);
    }
    idb.extend_from_slice(&[0, 0, 0, 0]);
    block(&mut b, 1, &idb);
    for (i, &t) in ts.iter().enumerate() {
        let d = frame(i as u8);
        let mut epb = 0u32.to_le_bytes().to_vec();
        epb.extend_from_slice(&((t >> 32) as u32).to_le_bytes());
        epb.extend_from_slice(&(t as u32).to_le_bytes());
        epb.extend_from_slice(&(d.len() as u32).to_le_bytes());
        epb.extend_from_slice(&(d.len() as u32).to_le_bytes());
        epb.extend_from_slice(&d);
        block(&mut b, 6, &epb);
    }
    b
}

/// Runs a wire chain over `input`, writing `out`; returns (packets out, clamped).
fn run(input: &Path, out: &Path) -> (u64, u64) {
    let t = Trace::open(input).expect("the reader accepts the input");
    let text = "name = \"w\"\n[input]\nports = 2\n[[nf]]\nname = \"w\"\nkind = \"wire\"\n";
    let s = common::run_chain(text, &t, Some(out));
    let j = serde_json::to_value(&s).unwrap();
    let clamped = j["sinks"][0]["clamped_timestamps"].as_u64().unwrap_or(0);
    (s.packets_out, clamped)
}

/// Every packet's time as tshark reads it from `p` (tcpdump cannot print times past
/// 2106).
fn tshark_times(p: &Path) -> Vec<String> {
    common::require("tshark");
    let o = Command::new("tshark")
        .args(["-T", "fields", "-e", "frame.time_epoch", "-r"])
        .arg(p)
        .output()
        .expect("tshark");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

const LAST: &str = "4294967295.999999000";

#[test]
fn a_fraction_past_the_last_second_is_clamped_and_every_packet_written() {
    let dir = common::tempdir();
    let (i, o) = (dir.path().join("in.pcap"), dir.path().join("out.pcap"));
    let mut ts: Vec<(u32, u32)> = (0..5).map(|k| (1_000 + k, 0)).collect();
    ts.push((u32::MAX, 1_500_000));
    ts.extend((0..5).map(|k| (2_000 + k, 7)));
    std::fs::write(&i, pcap(&ts)).unwrap();
    assert_eq!(run(&i, &o), (11, 1));
    let times = tshark_times(&o);
    assert_eq!(times.len(), 11);
    assert_eq!(times[4], "1004.000000000");
    assert_eq!(times[5], LAST);
    assert_eq!(times[6], "2000.000007000");
}

#[test]
fn pcapng_whole_second_resolution_past_2106_is_clamped() {
    let dir = common::tempdir();
    let (i, o) = (dir.path().join("in.pcapng"), dir.path().join("out.pcap"));
    // if_tsresol 0: units of 10^0 s.
    std::fs::write(&i, pcapng(&[(9, vec![0])], &[5, 6, 5_000_000_000, 7])).unwrap();
    assert_eq!(run(&i, &o), (4, 1));
    let times = tshark_times(&o);
    assert_eq!(times.len(), 4);
    assert_eq!(times[1], "6.000000000");
    assert_eq!(times[2], LAST);
    assert_eq!(times[3], "7.000000000");
}

#[test]
fn pcapng_large_offset_is_clamped() {
    let dir = common::tempdir();
    let (i, o) = (dir.path().join("in.pcapng"), dir.path().join("out.pcap"));
    // if_tsoffset 2^33 s: every packet lands past 2106.
    let off = (1u64 << 33).to_le_bytes().to_vec();
    std::fs::write(&i, pcapng(&[(14, off)], &[1, 2, 3])).unwrap();
    assert_eq!(run(&i, &o), (3, 3));
    assert_eq!(tshark_times(&o), vec![LAST; 3]);
}
