//! Packets whose headers lie (lengths, offsets, quotes) and the state an attacker's traffic
//! builds up: each case crafted byte by byte, run through the NF that reads it, and every
//! output byte or checksum that matters checked against a value computed here from scratch.

mod common;

use common::nat::step;

use catena::nfs::{Nat, NatConfig};
use etherparse::PacketBuilder;
use std::collections::BTreeMap;

const S: u64 = 1_000_000_000;
const IN: [u8; 4] = [10, 0, 0, 5];
const OUT: [u8; 4] = [93, 184, 216, 34];
const PUB: [u8; 4] = [198, 51, 100, 1];
const MALFORMED: u8 = 5;

/// RFC 1071 sum of `b`, as it would be checked: 0 when the checksum inside is right.
fn fold(b: &[u8]) -> u16 {
    let mut s: u32 = b
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

fn nat() -> Nat {
    Nat::new(&NatConfig {
        public: vec![PUB.into()],
        ports: (1024, 65535),
        ..NatConfig::default()
    })
    .unwrap()
}

/// An ICMP port unreachable from OUT to PUB quoting `quoted`, with its IP total length
/// set to `total` (the bytes past it stay in the frame, as Ethernet padding does) and
/// both checksums right over the datagram that length says.
fn unreachable(quoted: &[u8], total: usize) -> Vec<u8> {
    let mut v = Vec::new();
    PacketBuilder::ethernet2([1; 6], [2; 6])
        .ipv4(OUT, PUB, 64)
        .icmpv4(etherparse::Icmpv4Type::DestinationUnreachable(
            etherparse::icmpv4::DestUnreachableHeader::Port,
        ))
        .write(&mut v, quoted)
        .unwrap();
    v[16..18].copy_from_slice(&(total as u16).to_be_bytes());
    v[24..26].copy_from_slice(&[0, 0]);
    let c = fold(&v[14..34]);
    v[24..26].copy_from_slice(&c.to_be_bytes());
    v[36..38].copy_from_slice(&[0, 0]);
    let c = fold(&v[34..14 + total]);
    v[36..38].copy_from_slice(&c.to_be_bytes());
    v
}

/// An ICMP error whose IP total length ends before the quote (the quote is padding past
/// the datagram) must not be translated: rewriting the padding and folding that change
/// into the ICMP checksum, which covers only the datagram, wrote a wrong checksum.
#[test]
fn nat_never_translates_an_icmp_quote_past_the_ip_total_length() {
    let mut n = nat();
    let mut v = Vec::new();
    PacketBuilder::ethernet2([1; 6], [2; 6])
        .ipv4(IN, OUT, 64)
        .udp(5555, 9999)
        .write(&mut v, b"hello udp!")
        .unwrap();
    let o = step(&mut n, &v, 0).unwrap();
    let quoted = &o[14..];
    // The whole error, then one whose length stops inside the ICMP header, one that
    // stops after it, and one that stops inside the quoted ports.
    let full = 20 + 8 + quoted.len();
    let back = step(&mut n, &unreachable(quoted, full), S).expect("translated");
    assert_eq!(fold(&back[14..34]), 0, "ip checksum");
    assert_eq!(fold(&back[34..14 + full]), 0, "icmp checksum");
    assert_eq!(
        &back[14 + 28..],
        &v[14..],
        "the quote is the datagram as sent"
    );
    for total in [27, 28, 20 + 8 + 20, 20 + 8 + 20 + 2] {
        let e = unreachable(quoted, total);
        match step(&mut n, &e, 2 * S) {
            Err(r) => assert_eq!(r, MALFORMED, "total length {total}"),
            Ok(b) => panic!(
                "total length {total}: forwarded, ip sum {:#x}, icmp sum {:#x} (0 = right)",
                fold(&b[14..34]),
                fold(&b[34..14 + total])
            ),
        }
    }
}

/// A classic pcap of Ethernet frames, one per millisecond.
fn write_pcap(path: &std::path::Path, frames: &[Vec<u8>]) {
    let mut f = Vec::new();
    f.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    f.extend_from_slice(&[
        2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 1, 0, 0, 0,
    ]);
    for (i, p) in frames.iter().enumerate() {
        for v in [1000, (i as u32) * 1000, p.len() as u32, p.len() as u32] {
            f.extend_from_slice(&v.to_le_bytes());
        }
        f.extend_from_slice(p);
    }
    std::fs::write(path, f).unwrap();
}

const CLIENT: [u8; 4] = [192, 168, 1, 10];
const SERVER: [u8; 4] = [93, 184, 216, 34];

/// Suricata's and catena's alert counts per sid on `frames`, written to `DIR/NAME.pcap`,
/// each tool's output in a folder of its own.
fn alerts(
    dir: &std::path::Path,
    name: &str,
    frames: &[Vec<u8>],
    rules: &std::path::Path,
) -> (BTreeMap<u32, u64>, BTreeMap<u32, u64>) {
    let pcap = dir.join(format!("{name}.pcap"));
    write_pcap(&pcap, frames);
    let fresh = |tool: &str| {
        let d = dir.join(format!("{tool}-{name}"));
        std::fs::create_dir_all(&d).unwrap();
        d
    };
    let theirs = common::suricata_alert_counts(&pcap, rules, &fresh("suricata"));
    (
        theirs,
        common::catena_ids_counts(&pcap, rules, &fresh("catena")),
    )
}

/// Suricata required, a fresh folder and `text` written in it as the rules file: the
/// folder (kept while it lives) and the file's path.
fn rules_file(text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    common::require("suricata");
    let dir = common::tempdir();
    let rules = dir.path().join("r.rules");
    std::fs::write(&rules, text).unwrap();
    (dir, rules)
}

/// A TCP segment of the connection CLIENT:40000 <-> SERVER:80; `to_server` picks the
/// direction, `flags` among "SAPF", window 65535 (no scaling).
fn seg(to_server: bool, seq: u32, ack: u32, flags: &str, payload: &[u8]) -> Vec<u8> {
    seg_over(false, to_server, seq, ack, flags, payload)
}

const CLIENT6: [u8; 16] = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const SERVER6: [u8; 16] = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

/// [`seg`] over IPv6 (CLIENT6, SERVER6) when `v6`.
fn seg_over(v6: bool, to_server: bool, seq: u32, ack: u32, flags: &str, payload: &[u8]) -> Vec<u8> {
    let (sp, dp) = if to_server { (40000, 80) } else { (80, 40000) };
    let eth = PacketBuilder::ethernet2([1; 6], [2; 6]);
    let ip = match (v6, to_server) {
        (false, true) => eth.ipv4(CLIENT, SERVER, 64),
        (false, false) => eth.ipv4(SERVER, CLIENT, 64),
        (true, true) => eth.ipv6(CLIENT6, SERVER6, 64),
        (true, false) => eth.ipv6(SERVER6, CLIENT6, 64),
    };
    let mut b = ip.tcp(sp, dp, seq, 65535);
    for c in flags.chars() {
        b = match c {
            'S' => b.syn(),
            'A' => b.ack(ack),
            'P' => b.psh(),
            'F' => b.fin(),
            _ => b,
        };
    }
    let mut v = Vec::new();
    b.write(&mut v, payload).unwrap();
    v
}

/// One forged segment far past the server's window (a gigabyte ahead, or 2^31 - 1) made
/// the client's direction give up reassembly, and the IDS saw none of the request that
/// followed in order; Suricata ignores the segment as out of window and alerts on the
/// request. The rules that match the real request must fire as Suricata's do.
#[test]
fn a_segment_far_past_the_window_does_not_blind_the_ids() {
    let (dir, rules) = rules_file(
        "alert tcp any any -> any 80 (msg:\"stream\"; flow:to_server; content:\"/real\"; sid:3;)\n\
         alert http any any -> any any (msg:\"uri\"; http.uri; content:\"/real\"; sid:4;)\n",
    );
    let req = b"GET /real HTTP/1.1\r\nHost: a.example\r\n\r\n";
    let fake = b"GET /fake HTTP/1.1\r\nHost: a.example\r\n\r\n";
    let resp = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nabcd";
    let (a, b) = (1000u32, 5000u32);
    let n = req.len() as u32;
    for jump in [0x4000_0000u32, 0x7fff_ffff, 70_000] {
        let frames = vec![
            seg(true, a, 0, "S", b""),
            seg(false, b, a + 1, "SA", b""),
            seg(true, a + 1, b + 1, "A", b""),
            seg(true, a + 1 + jump, b + 1, "AP", fake),
            seg(true, a + 1, b + 1, "AP", req),
            seg(false, b + 1, a + 1 + n, "AP", resp),
            seg(true, a + 1 + n, b + 1 + resp.len() as u32, "AF", b""),
            seg(false, b + 1 + resp.len() as u32, a + 2 + n, "AF", b""),
            seg(true, a + 2 + n, b + 2 + resp.len() as u32, "A", b""),
        ];
        let (theirs, ours) = alerts(dir.path(), &format!("jump{jump}"), &frames, &rules);
        assert_eq!(
            theirs.get(&3),
            Some(&1),
            "suricata, jump {jump}: {theirs:?}"
        );
        assert_eq!(
            theirs.get(&4),
            Some(&1),
            "suricata, jump {jump}: {theirs:?}"
        );
        assert_eq!(
            ours, theirs,
            "jump {jump}: ours {ours:?}, suricata {theirs:?}"
        );
    }
}

/// A connection picked up mid-stream on the client's request: Suricata starts the
/// server's stream at that request's ACK (stream-tcp.c's midstream pickup), so server
/// bytes the capture lost before the server's first segment are a hole at the stream's
/// start, and once the client acknowledges past it the raw stream is inspected up to the
/// end of what is held, the response's unacknowledged bytes included. The stack started
/// that stream at the server's first captured byte (no hole), so it inspected only up to
/// the ACK and missed an alert on each rule: the hole of 1,000 bytes gave us one `d2` and
/// one `d3` where Suricata gives two. Without a hole both agree.
#[test]
fn a_mid_stream_pickup_starts_the_other_side_at_its_ack() {
    let (dir, rules) = rules_file(
        "alert tcp any any -> any any (msg:\"d2\"; content:\"d2\"; sid:1;)\n\
         alert tcp any any -> any any (msg:\"d3\"; content:\"d3\"; sid:2;)\n\
         alert tcp-stream any any -> any any (msg:\"d2 stream\"; content:\"d2\"; sid:3;)\n\
         alert tcp-stream any any -> any any (msg:\"d3 stream\"; content:\"d3\"; sid:4;)\n\
         alert http any any -> any any (msg:\"uri\"; http.uri; content:\"/b\"; sid:6;)\n",
    );
    let r1 = b"GET /a HTTP/1.1\r\nHost: h\r\n\r\n";
    let r2 = b"GET /b HTTP/1.1\r\nHost: h\r\n\r\n";
    let body = [&[b'y'; 590][..], b"d2", b"zzzzzzzz"].concat();
    let resp = [
        &b"HTTP/1.1 200 OK\r\nContent-Length: 30\r\n\r\n"[..],
        &[b'q'; 10],
        b"d3",
        &[b'q'; 18],
    ]
    .concat();
    let tail = b"more d2 bytes";
    let (c, x) = (1000u32, 50_000u32);
    let (n1, n2) = (r1.len() as u32, r2.len() as u32);
    for (hole, want) in [(1000u32, 2u64), (0, 1)] {
        // The server's bytes x..x + hole were sent before the capture began.
        let s = x + hole;
        let r = resp.len() as u32;
        let frames = vec![
            seg(true, c, x, "AP", r1),
            seg(false, s, c + n1, "A", &[b'x'; 1400]),
            seg(false, s + 1400, c + n1, "AP", &body),
            seg(true, c + n1, s + 2000, "AP", r2),
            seg(false, s + 2000, c + n1 + n2, "AP", &resp),
            seg(false, s + 2000 + r, c + n1 + n2, "AP", tail),
            seg(
                true,
                c + n1 + n2,
                s + 2000 + r + tail.len() as u32,
                "A",
                b"",
            ),
        ];
        let (theirs, ours) = alerts(dir.path(), &format!("pickup{hole}"), &frames, &rules);
        assert_eq!(
            theirs.get(&2),
            Some(&want),
            "suricata, hole {hole}: {theirs:?}"
        );
        assert_eq!(
            ours, theirs,
            "hole {hole}: ours {ours:?}, suricata {theirs:?}"
        );
    }
}

/// A pickup whose other side lost its first 10,000 bytes and then sends 84,000 more that
/// the client never acknowledges: behind the hole at that stream's start they would
/// overflow the reassembly ring (64 KiB) and give the direction up, and no rule would
/// see them; Suricata holds them and inspects them at the flow's end. The hole is
/// skipped when the ring would overflow, so each rule fires as Suricata's does.
#[test]
fn a_pickup_whose_other_side_overflows_the_ring_is_still_inspected() {
    let (dir, rules) = rules_file(
        "alert tcp any any -> any any (msg:\"d2\"; content:\"d2\"; sid:1;)\n\
         alert tcp-stream any any -> any any (msg:\"d3 stream\"; content:\"d3\"; sid:4;)\n",
    );
    let r1 = b"GET /a HTTP/1.1\r\nHost: h\r\n\r\n";
    let (c, x, n) = (1000u32, 50_000u32, r1.len() as u32);
    let mut frames = vec![seg(true, c, x, "AP", r1)];
    let mut at = x + 10_000;
    for i in 0..60 {
        let mut p = vec![b'z'; 1400];
        if i == 30 {
            p[100..102].copy_from_slice(b"d3");
        }
        if i == 59 {
            p[1300..1302].copy_from_slice(b"d2");
        }
        frames.push(seg(false, at, c + n, "A", &p));
        at += 1400;
    }
    frames.push(seg(false, at, c + n, "AF", b""));
    let (theirs, ours) = alerts(dir.path(), "pickup_overflow", &frames, &rules);
    assert_eq!(theirs.get(&1), Some(&1), "suricata: {theirs:?}");
    assert_eq!(theirs.get(&4), Some(&1), "suricata: {theirs:?}");
    assert_eq!(ours, theirs, "ours {ours:?}, suricata {theirs:?}");
}

/// `good` with its IP total length set to `total` (header checksum fixed), padded to the
/// 60-byte Ethernet minimum with the rest of the original frame: the bytes past the
/// datagram are what they were, as if a sender's padding held them.
fn cut_by_total(good: &[u8], total: u16) -> Vec<u8> {
    let mut v = good.to_vec();
    v.resize(v.len().max(60), 0);
    v[16..18].copy_from_slice(&total.to_be_bytes());
    v[24..26].copy_from_slice(&[0, 0]);
    let c = fold(&v[14..34]);
    v[24..26].copy_from_slice(&c.to_be_bytes());
    v
}

/// NAT with FastPath `fast` (`false`, `true` recording from a flow's first packet, or
/// `"auto"`) over `frames`: the output pcap's frames and the NAT's drops by reason.
fn nat_run(frames: &[Vec<u8>], fast: &str) -> (Vec<Vec<u8>>, Vec<(String, u64)>) {
    use catena::io::{PcapHeader, Trace};
    use catena::packet::LinkKind;
    use catena::runtime::{Chain, ChainConfig, NoProgress, RunOptions, Runner};
    let t = Trace::from_packets(
        LinkKind::Ethernet,
        PcapHeader::new(1, false),
        frames
            .iter()
            .enumerate()
            .map(|(i, f)| (1_000_000_000 + i as u64 * 1000, f.as_slice())),
    );
    let text = format!(
        "name = \"n\"\nfastpath = {fast}\nfastpath_record = 1\n[[nf]]\nname = \"nat\"\nkind = \"nat\"\ninside = \"10.0.0.0/8\"\npublic = \"198.51.100.1\"\n"
    );
    let cfg = ChainConfig::parse(&text, "n.toml").expect("config");
    let mut r = Runner::new(Chain::from_config(&cfg).expect("chain"), t.max_packet_len());
    let dir = common::tempdir();
    let out = dir.path().join("out.pcap");
    let opts = RunOptions {
        outputs: vec![("out".into(), out.clone())],
        ..Default::default()
    };
    let s = r.run(&t, &opts, &mut NoProgress).expect("run");
    let o = Trace::open(&out).expect("output");
    let frames = (0..o.len()).map(|i| o.packet(i).to_vec()).collect();
    let nat = s.nfs.iter().find(|n| n.name == "nat").expect("nat summary");
    let drops = nat.drops.iter().filter(|(_, n)| *n > 0).cloned().collect();
    (frames, drops)
}

/// An ICMP echo whose IP total length ends inside the ICMP header (its identifier in the
/// padding), and TCP or UDP whose total length cuts the transport header (ports or
/// checksum in the padding): the identifier or ports were rewritten and the checksum
/// patched for bytes the receiver never sums. Each is dropped `malformed` now, with
/// FastPath off, on and auto alike (a recorded flow's later packet must not be
/// consolidated on bytes past the datagram); the whole packets of the same flows are
/// still translated, every checksum right.
#[test]
fn nat_drops_transport_headers_cut_by_the_ip_total_length_with_and_without_fastpath() {
    let build = |proto: &str| {
        let b = PacketBuilder::ethernet2([1; 6], [2; 6]).ipv4(IN, OUT, 64);
        let mut v = Vec::new();
        match proto {
            "icmp" => b.icmpv4_echo_request(0x1234, 1).write(&mut v, b""),
            "udp" => b.udp(5555, 53).write(&mut v, b""),
            _ => b.tcp(40000, 80, 1, 65535).syn().write(&mut v, b""),
        }
        .unwrap();
        v
    };
    let mut frames = Vec::new();
    let mut bad = 0;
    for (proto, cuts) in [
        ("icmp", &[24u16, 25, 26, 27][..]),
        ("udp", &[20, 24, 27][..]),
        ("tcp", &[20, 24, 34, 39][..]),
    ] {
        let good = build(proto);
        frames.push(good.clone());
        for &t in cuts {
            frames.push(cut_by_total(&good, t));
            frames.push(cut_by_total(&good, t));
            bad += 2;
        }
        frames.push(good);
    }
    let (off, off_drops) = nat_run(&frames, "false");
    assert_eq!(
        off_drops,
        vec![("malformed".to_string(), bad)],
        "drops, FastPath off"
    );
    assert_eq!(off.len(), 6, "the whole packets are translated");
    for o in &off {
        assert_eq!(&o[26..30], &PUB, "source translated");
        let end = 14 + usize::from(u16::from_be_bytes([o[16], o[17]]));
        assert_eq!(fold(&o[14..34]), 0, "ip checksum");
        if o[23] == 1 {
            assert_eq!(fold(&o[34..end]), 0, "icmp checksum");
        }
    }
    for fast in ["true", "\"auto\""] {
        let (on, drops) = nat_run(&frames, fast);
        assert_eq!(drops, off_drops, "drops, FastPath {fast}");
        assert!(on == off, "output frames, FastPath {fast} vs off");
    }
}

/// IPv4 fragments of the Ethernet frame `full` (its IP header without options): each
/// `(offset, end, more)` a fragment of the IP payload's bytes `offset..end`, header
/// checksum right, in the order given.
fn fragments(full: &[u8], parts: &[(usize, usize, bool)]) -> Vec<Vec<u8>> {
    let body = &full[34..];
    parts
        .iter()
        .map(|&(off, end, more)| {
            let mut f = full[..34].to_vec();
            f.extend_from_slice(&body[off..end]);
            f[16..18].copy_from_slice(&(20 + (end - off) as u16).to_be_bytes());
            let fl = if more { 0x2000 } else { 0 } | (off / 8) as u16;
            f[20..22].copy_from_slice(&fl.to_be_bytes());
            f[24..26].copy_from_slice(&[0, 0]);
            let c = fold(&f[14..34]);
            f[24..26].copy_from_slice(&c.to_be_bytes());
            f
        })
        .collect()
}

/// The fragment tests' rules: the request's path on the stream and in the URI, and the
/// forged path an overlap may put in its place.
const FRAG_RULES: &str =
    "alert tcp any any -> any 80 (msg:\"stream\"; flow:to_server; content:\"/evil\"; sid:1;)\n\
         alert http any any -> any any (msg:\"uri\"; http.uri; content:\"/evil\"; sid:2;)\n\
         alert tcp any any -> any 80 (msg:\"other\"; flow:to_server; content:\"/good\"; sid:3;)\n";

/// The request the fragment tests split: its path (`/evil`, bytes 4..9) lies at bytes
/// 24..29 of the IP payload, behind the 20-byte TCP header, where the overlaps write.
const FRAG_REQUEST: &[u8] = b"GET /evil HTTP/1.1\r\nHost: a.example\r\nUser-Agent: frag\r\n\r\n";

/// A request whose TCP segment is split in IP fragments: Suricata defragments it and
/// alerts; the IDS saw nothing. In order, out of order, with overlaps whose bytes differ
/// (Suricata's `windows` policy for IPv4 under its packaged configuration: a later
/// fragment starting inside a held one loses the shared bytes, the request stays
/// `/evil`; one starting lower but ending inside a held one loses them too, the request
/// becomes `/good`), and with a fragment missing (no
/// datagram, no alert): ours equal Suricata's each time.
#[test]
fn ip_fragments_do_not_blind_the_ids() {
    let (dir, rules) = rules_file(FRAG_RULES);
    let req = FRAG_REQUEST;
    let resp = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nabcd";
    let (a, b) = (1000u32, 5000u32);
    let n = req.len() as u32;
    let full = seg(true, a + 1, b + 1, "AP", req);
    let tcp_len = full.len() - 34;
    // The overlapping fragment rewrites bytes 24..32 of the IP payload (the path after
    // the TCP header's 20 bytes) with `/good`: kept out by the lower fragment (`windows`).
    let mut forged = full.clone();
    forged[34 + 24..34 + 29].copy_from_slice(b"/good");
    let cases: Vec<(&str, Vec<Vec<u8>>)> = vec![
        (
            "in order",
            fragments(&full, &[(0, 24, true), (24, tcp_len, false)]),
        ),
        (
            "out of order",
            fragments(
                &full,
                &[(24, 48, true), (48, tcp_len, false), (0, 24, true)],
            ),
        ),
        (
            "overlap",
            [
                fragments(&full, &[(0, 32, true)]),
                fragments(&forged, &[(24, 40, true)]),
                fragments(&full, &[(40, tcp_len, false)]),
            ]
            .concat(),
        ),
        (
            // A later fragment that starts lower but ends inside the held one: the held
            // one's bytes are copied last (`/good`).
            "overlap from below",
            [
                fragments(&forged, &[(24, 48, true)]),
                fragments(&full, &[(0, 32, true)]),
                fragments(&full, &[(48, tcp_len, false)]),
            ]
            .concat(),
        ),
        (
            "missing",
            fragments(&full, &[(0, 24, true), (48, tcp_len, false)]),
        ),
    ];
    for (name, frags) in cases {
        let mut frames = vec![
            seg(true, a, 0, "S", b""),
            seg(false, b, a + 1, "SA", b""),
            seg(true, a + 1, b + 1, "A", b""),
        ];
        frames.extend(frags);
        frames.extend([
            seg(false, b + 1, a + 1 + n, "AP", resp),
            seg(true, a + 1 + n, b + 1 + resp.len() as u32, "AF", b""),
            seg(false, b + 1 + resp.len() as u32, a + 2 + n, "AF", b""),
            seg(true, a + 2 + n, b + 2 + resp.len() as u32, "A", b""),
        ]);
        let (theirs, ours) = alerts(dir.path(), &name.replace(' ', "_"), &frames, &rules);
        if name == "missing" {
            assert!(theirs.is_empty(), "suricata, {name}: {theirs:?}");
        } else if name == "overlap from below" {
            assert_eq!(theirs.get(&3), Some(&1), "suricata, {name}: {theirs:?}");
        } else {
            assert_eq!(theirs.get(&1), Some(&1), "suricata, {name}: {theirs:?}");
            assert_eq!(theirs.get(&2), Some(&1), "suricata, {name}: {theirs:?}");
        }
        assert_eq!(ours, theirs, "{name}: ours {ours:?}, suricata {theirs:?}");
    }
}

/// A TCP segment with an IPv4 total length of 0 (a segmentation offload's capture, as the
/// merged trace holds four): Suricata's decoder refuses it (`iplen_smaller_than_hlen`:
/// no flow, no alert, its payload not in the stream); the IDS alerted on it as the first
/// packet of a flow of its own, or tracked it with its captured payload. One such segment
/// inside a connection, one alone on a connection of its own.
#[test]
fn a_segment_with_ip_total_length_0_is_refused_as_suricata_refuses_it() {
    let (dir, rules) = rules_file(
        "alert ip any any -> any any (msg:\"ip\"; sid:1;)\n\
         alert tcp any any -> any any (msg:\"tcp\"; sid:2;)\n\
         alert tcp any any -> any 80 (msg:\"content\"; content:\"/tso\"; sid:3;)\n\
         alert tcp-pkt any any -> any any (msg:\"packet\"; content:\"/tso\"; sid:4;)\n",
    );
    let no_total = |mut f: Vec<u8>| {
        f[16..18].copy_from_slice(&[0, 0]);
        f[24..26].copy_from_slice(&[0, 0]);
        let c = fold(&f[14..34]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
        f
    };
    let req = b"GET /tso HTTP/1.1\r\nHost: a.example\r\n\r\n";
    let (a, b) = (1000u32, 5000u32);
    let mut alone = no_total(seg(true, 7000, 9000, "AP", req));
    alone[34..36].copy_from_slice(&40001u16.to_be_bytes());
    let frames = vec![
        seg(true, a, 0, "S", b""),
        seg(false, b, a + 1, "SA", b""),
        seg(true, a + 1, b + 1, "A", b""),
        no_total(seg(true, a + 1, b + 1, "AP", req)),
        alone,
    ];
    let (theirs, ours) = alerts(dir.path(), "tso", &frames, &rules);
    // The oracle gives nothing for the two segments: its counts are the handshake's.
    let (handshake, _) = alerts(dir.path(), "handshake", &frames[..3], &rules);
    assert!(!theirs.is_empty(), "suricata: {theirs:?}");
    assert_eq!(theirs, handshake, "suricata, with the segments and without");
    assert_eq!(ours, theirs, "ours {ours:?}, suricata {theirs:?}");
}

/// An IPv6 datagram in two fragments, the transport header in the first: Suricata's
/// alerts on the datagram (its flow, its protocol's rules) must be ours. The branch that
/// brought IPv4 defragmentation lost them for IPv6 (session 28); since session 29 the
/// stack reassembles IPv6 too.
#[test]
fn ipv6_first_fragments_still_stand_for_their_datagram() {
    let (dir, rules) = rules_file(
        "alert ip any any -> any any (msg:\"ip\"; sid:1;)\n\
         alert udp any any -> any 53 (msg:\"udp\"; sid:2;)\n",
    );
    let payload: Vec<u8> = (0..64u8).collect();
    let mut full = Vec::new();
    PacketBuilder::ethernet2([1; 6], [2; 6])
        .ipv6(
            [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
            64,
        )
        .udp(40000, 53)
        .write(&mut full, &payload)
        .unwrap();
    // The IPv6 payload (UDP header and data) in two fragments: bytes 0..32, 32..72.
    let body = &full[54..];
    let frag = |off: usize, end: usize, more: bool| {
        let mut f = full[..54].to_vec();
        f[18..20].copy_from_slice(&(8 + (end - off) as u16).to_be_bytes());
        f[20] = 44; // next header: fragment
        let fl = (off as u16) | u16::from(more);
        f.extend_from_slice(&[17, 0]);
        f.extend_from_slice(&fl.to_be_bytes());
        f.extend_from_slice(&0x1234_5678u32.to_be_bytes());
        f.extend_from_slice(&body[off..end]);
        f
    };
    let frames = vec![frag(0, 32, true), frag(32, body.len(), false)];
    let (theirs, ours) = alerts(dir.path(), "v6frag", &frames, &rules);
    assert_eq!(
        theirs.get(&2),
        Some(&1),
        "suricata alerts on the datagram: {theirs:?}"
    );
    assert_eq!(ours, theirs, "ours {ours:?}, suricata {theirs:?}");
}

/// The connection CLIENT:40000 -> SERVER:80 (over IPv6 when `v6`) whose request of
/// `n` bytes is carried by `frags` (IP fragments of one segment at sequence 1001), then
/// a response and both FINs.
fn fragmented_request(v6: bool, n: u32, frags: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    let resp = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nabcd";
    let (a, b, r) = (1000u32, 5000u32, resp.len() as u32);
    let mut frames = vec![
        seg_over(v6, true, a, 0, "S", b""),
        seg_over(v6, false, b, a + 1, "SA", b""),
        seg_over(v6, true, a + 1, b + 1, "A", b""),
    ];
    frames.extend(frags);
    frames.extend([
        seg_over(v6, false, b + 1, a + 1 + n, "AP", resp),
        seg_over(v6, true, a + 1 + n, b + 1 + r, "AF", b""),
        seg_over(v6, false, b + 1 + r, a + 2 + n, "AF", b""),
        seg_over(v6, true, a + 2 + n, b + 2 + r, "A", b""),
    ]);
    frames
}

/// A fragment covered whole by a later one was still counted in the bytes held, so a
/// hole after the covering fragment went unseen: the datagram was declared complete and
/// built with stale bytes in the hole, and the IDS alerted on it; Suricata (the furthest
/// end held) waits for the missing bytes and sees no request.
#[test]
fn a_covered_ip_fragment_does_not_hide_a_hole() {
    let (dir, rules) = rules_file(FRAG_RULES);
    let req = FRAG_REQUEST;
    let full = seg(true, 1001, 5001, "AP", req);
    let tcp_len = full.len() - 34;
    // Bytes 32..40 of the IP payload never come.
    let frags = fragments(&full, &[(8, 16, true), (0, 32, true), (40, tcp_len, false)]);
    let frames = fragmented_request(false, req.len() as u32, frags);
    let (theirs, ours) = alerts(dir.path(), "covered_hole", &frames, &rules);
    assert!(theirs.is_empty(), "suricata: {theirs:?}");
    assert_eq!(ours, theirs, "ours {ours:?}, suricata {theirs:?}");
}

/// IPv6 fragments of the Ethernet frame `full` (IPv6 header without extensions), each
/// `(offset, end, more)` a fragment of the IPv6 payload's bytes `offset..end` with
/// identification 0x1234_5678; with `dstopts`, an 8-byte destination-options header
/// (unfragmentable) before the fragment header.
fn fragments6(full: &[u8], parts: &[(usize, usize, bool)], dstopts: bool) -> Vec<Vec<u8>> {
    let body = &full[54..];
    let next = full[20];
    parts
        .iter()
        .map(|&(off, end, more)| {
            let mut f = full[..54].to_vec();
            let ext = if dstopts {
                f[20] = 60;
                // Next header: fragment; length 0 (8 bytes); a PadN option of 4 bytes.
                f.extend_from_slice(&[44, 0, 1, 4, 0, 0, 0, 0]);
                8
            } else {
                f[20] = 44;
                0
            };
            f[18..20].copy_from_slice(&((ext + 8 + end - off) as u16).to_be_bytes());
            f.extend_from_slice(&[next, 0]);
            f.extend_from_slice(&((off as u16) | u16::from(more)).to_be_bytes());
            f.extend_from_slice(&0x1234_5678u32.to_be_bytes());
            f.extend_from_slice(&body[off..end]);
            f
        })
        .collect()
}

/// IPv6 fragments were not reassembled: a request split across them (or a UDP payload)
/// went unseen by every rule on bytes past the first fragment, where Suricata
/// reassembles and alerts. In order, out of order, duplicated, overlaps from above and
/// below whose bytes differ (Suricata's `bsd` policy for IPv6: the request stays `/evil`
/// both times, where IPv4's `windows` keeps `/good` from below), with an unfragmentable
/// extension header before the fragment header (its next header must be carried), an
/// atomic fragment, and with a fragment missing: ours equal Suricata's each time.
#[test]
fn ipv6_fragments_do_not_blind_the_ids() {
    let (dir, rules) = rules_file(&format!(
        "{FRAG_RULES}alert udp any any -> any 53 (msg:\"udp\"; content:\"tail-of-query\"; sid:4;)\n"
    ));
    let req = FRAG_REQUEST;
    let n = req.len() as u32;
    let full = seg_over(true, true, 1001, 5001, "AP", req);
    let tcp_len = full.len() - 54;
    // Bytes 24..29 of the IPv6 payload (the path after the TCP header) made `/good`.
    let mut forged = full.clone();
    forged[54 + 24..54 + 29].copy_from_slice(b"/good");
    let cases: Vec<(&str, Vec<Vec<u8>>)> = vec![
        (
            "in order",
            fragments6(&full, &[(0, 24, true), (24, tcp_len, false)], false),
        ),
        (
            "out of order",
            fragments6(
                &full,
                &[(24, 48, true), (48, tcp_len, false), (0, 24, true)],
                false,
            ),
        ),
        (
            "duplicated",
            fragments6(
                &full,
                &[
                    (0, 24, true),
                    (0, 24, true),
                    (24, tcp_len, false),
                    (24, tcp_len, false),
                ],
                false,
            ),
        ),
        (
            "overlap",
            [
                fragments6(&full, &[(0, 32, true)], false),
                fragments6(&forged, &[(24, 40, true)], false),
                fragments6(&full, &[(40, tcp_len, false)], false),
            ]
            .concat(),
        ),
        (
            "overlap from below",
            [
                fragments6(&forged, &[(24, 48, true)], false),
                fragments6(&full, &[(0, 32, true)], false),
                fragments6(&full, &[(48, tcp_len, false)], false),
            ]
            .concat(),
        ),
        (
            "dstopts",
            fragments6(&full, &[(24, tcp_len, false), (0, 24, true)], true),
        ),
        (
            // Offset 0, no more fragments: Suricata decodes past the fragment header.
            "atomic",
            fragments6(&full, &[(0, tcp_len, false)], false),
        ),
        (
            "missing",
            fragments6(&full, &[(0, 24, true), (48, tcp_len, false)], false),
        ),
    ];
    for (name, frags) in cases {
        let frames = fragmented_request(true, n, frags);
        let (theirs, ours) = alerts(
            dir.path(),
            &format!("v6_{}", name.replace(' ', "_")),
            &frames,
            &rules,
        );
        if name == "missing" {
            assert!(theirs.is_empty(), "suricata, {name}: {theirs:?}");
        } else {
            assert_eq!(theirs.get(&1), Some(&1), "suricata, {name}: {theirs:?}");
            assert_eq!(theirs.get(&2), Some(&1), "suricata, {name}: {theirs:?}");
        }
        assert_eq!(ours, theirs, "{name}: ours {ours:?}, suricata {theirs:?}");
    }
    // A UDP datagram whose matching bytes are in its second fragment.
    let mut q = Vec::new();
    PacketBuilder::ethernet2([1; 6], [2; 6])
        .ipv6(CLIENT6, SERVER6, 64)
        .udp(40000, 53)
        .write(
            &mut q,
            &[
                b"0123456789abcdef0123456789abcdef".as_slice(),
                b"tail-of-query",
            ]
            .concat(),
        )
        .unwrap();
    let end = q.len() - 54;
    let frames = fragments6(&q, &[(16, end, false), (0, 16, true)], false);
    let (theirs, ours) = alerts(dir.path(), "v6_udp", &frames, &rules);
    assert_eq!(theirs.get(&4), Some(&1), "suricata, udp: {theirs:?}");
    assert_eq!(ours, theirs, "udp: ours {ours:?}, suricata {theirs:?}");
}
