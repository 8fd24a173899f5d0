//! The NAT NF: crafted packets through `Nat` (every field and checksum of the output checked
//! with etherparse), then a real trace through a chain with tshark as the checksum oracle.

mod common;

use common::nat::step;

use std::net::Ipv4Addr;
use std::process::Command;

use catena::io::Trace;
use catena::nfs::{Context, Nat, NatConfig, Nf};
use catena::packet::{Batch, Packet, Verdict};
use etherparse::{NetHeaders, PacketBuilder, PacketHeaders, TransportHeader};

const S: u64 = 1_000_000_000;
const IN: [u8; 4] = [10, 0, 0, 5];
const IN2: [u8; 4] = [192, 168, 1, 9];
const OUT: [u8; 4] = [93, 184, 216, 34];
const PUB: [u8; 4] = [198, 51, 100, 1];

// Drop reason indices, as in the profile.
const NO_MAPPING: u8 = 0;
const POOL_EXHAUSTED: u8 = 1;
const FRAGMENT: u8 = 3;
const UNSUPPORTED: u8 = 4;

fn nat(ports: (u16, u16)) -> Nat {
    Nat::new(&NatConfig {
        public: vec![PUB.into()],
        ports,
        udp_timeout_ns: 10 * S,
        icmp_timeout_ns: 5 * S,
        tcp_timeout_ns: 100 * S,
        tcp_linger_ns: 4 * S,
        ..NatConfig::default()
    })
    .unwrap()
}

fn tcp(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16, flags: &str) -> Vec<u8> {
    let mut b = PacketBuilder::ethernet2([1; 6], [2; 6])
        .ipv4(src, dst, 64)
        .tcp(sport, dport, 1000, 512);
    for f in flags.chars() {
        b = match f {
            'S' => b.syn(),
            'F' => b.fin(),
            'R' => b.rst(),
            'A' => b.ack(77),
            _ => b,
        };
    }
    let mut v = Vec::new();
    b.write(&mut v, b"hello tcp").unwrap();
    v
}

fn udp(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16) -> Vec<u8> {
    let mut v = Vec::new();
    PacketBuilder::ethernet2([1; 6], [2; 6])
        .ipv4(src, dst, 64)
        .udp(sport, dport)
        .write(&mut v, b"hello udp!")
        .unwrap();
    v
}

fn ping(src: [u8; 4], dst: [u8; 4], id: u16, reply: bool) -> Vec<u8> {
    let b = PacketBuilder::ethernet2([1; 6], [2; 6]).ipv4(src, dst, 64);
    let b = if reply {
        b.icmpv4_echo_reply(id, 7)
    } else {
        b.icmpv4_echo_request(id, 7)
    };
    let mut v = Vec::new();
    b.write(&mut v, b"ping data").unwrap();
    v
}

/// (src, sport, dst, dport) with ICMP echo identifiers as ports, after checking that
/// every checksum of the packet is right (computed by etherparse from scratch).
fn tuple(b: &[u8]) -> ([u8; 4], u16, [u8; 4], u16) {
    let h = PacketHeaders::from_ethernet_slice(b).expect("parses");
    let Some(NetHeaders::Ipv4(ip, _)) = &h.net else {
        panic!("not ipv4")
    };
    assert_eq!(ip.calc_header_checksum(), ip.header_checksum, "ip checksum");
    let payload = h.payload.slice();
    match h.transport.expect("transport") {
        TransportHeader::Tcp(t) => {
            assert_eq!(
                t.calc_checksum_ipv4(ip, payload).unwrap(),
                t.checksum,
                "tcp"
            );
            (ip.source, t.source_port, ip.destination, t.destination_port)
        }
        TransportHeader::Udp(u) => {
            if u.checksum != 0 {
                assert_eq!(
                    u.calc_checksum_ipv4(ip, payload).unwrap(),
                    u.checksum,
                    "udp"
                );
            }
            (ip.source, u.source_port, ip.destination, u.destination_port)
        }
        TransportHeader::Icmpv4(i) => {
            let fresh = etherparse::Icmpv4Header::with_checksum(i.icmp_type.clone(), payload);
            assert_eq!(fresh.checksum, i.checksum, "icmp checksum");
            let id = match i.icmp_type {
                etherparse::Icmpv4Type::EchoRequest(e) | etherparse::Icmpv4Type::EchoReply(e) => {
                    e.id
                }
                _ => 0,
            };
            (ip.source, id, ip.destination, id)
        }
        t => panic!("unexpected {t:?}"),
    }
}

fn stat(n: &Nat, name: &str) -> u64 {
    n.stats().iter().find(|(k, _)| *k == name).unwrap().1
}

#[test]
fn tcp_udp_icmp_go_out_public_and_replies_come_back() {
    let mut n = nat((1024, 65535));
    // TCP
    let o = step(&mut n, &tcp(IN, 40000, OUT, 80, "S"), 0).unwrap();
    let (s, sp, d, dp) = tuple(&o);
    assert_eq!((s, d, dp), (PUB, OUT, 80));
    assert!(sp >= 1024);
    let back = step(&mut n, &tcp(OUT, 80, PUB, sp, "SA"), S).unwrap();
    assert_eq!(tuple(&back), (OUT, 80, IN, 40000));
    // Same flow again: same public port.
    let o2 = step(&mut n, &tcp(IN, 40000, OUT, 80, "A"), 2 * S).unwrap();
    assert_eq!(tuple(&o2).1, sp);
    // UDP
    let o = step(&mut n, &udp(IN2, 5353, OUT, 53), 0).unwrap();
    let (s, up, d, dp) = tuple(&o);
    assert_eq!((s, d, dp), (PUB, OUT, 53));
    let back = step(&mut n, &udp(OUT, 53, PUB, up), S).unwrap();
    assert_eq!(tuple(&back), (OUT, 53, IN2, 5353));
    // ICMP echo: the identifier is the port.
    let o = step(&mut n, &ping(IN, OUT, 0x1234, false), 0).unwrap();
    let (s, id, d, _) = tuple(&o);
    assert_eq!((s, d), (PUB, OUT));
    let back = step(&mut n, &ping(OUT, PUB, id, true), S).unwrap();
    assert_eq!(tuple(&back), (OUT, 0x1234, IN, 0x1234));
    assert_eq!(stat(&n, "mappings"), 3);
    assert_eq!(stat(&n, "created"), 3);
    assert_eq!(stat(&n, "translated_in"), 3);
}

#[test]
fn payload_and_other_headers_are_untouched() {
    let mut n = nat((1024, 65535));
    let i = tcp(IN, 40000, OUT, 80, "SA");
    let o = step(&mut n, &i, 0).unwrap();
    assert_eq!(i.len(), o.len());
    let diff: Vec<usize> = (0..i.len()).filter(|&k| i[k] != o[k]).collect();
    // IP checksum (24, 25), source address (26..30), source port (34, 35), TCP checksum
    // (50, 51): nothing else.
    assert!(
        diff.iter()
            .all(|k| matches!(k, 24 | 25 | 26..=29 | 34 | 35 | 50 | 51)),
        "{diff:?}"
    );
}

#[test]
fn unsolicited_outside_packets_are_dropped_and_counted() {
    let mut n = nat((1024, 65535));
    assert_eq!(
        step(&mut n, &tcp(OUT, 80, PUB, 5000, "S"), 0),
        Err(NO_MAPPING)
    );
    assert_eq!(step(&mut n, &udp(OUT, 53, PUB, 5000), 0), Err(NO_MAPPING));
    assert_eq!(step(&mut n, &ping(OUT, PUB, 9, false), 0), Err(NO_MAPPING));
    assert_eq!(step(&mut n, &ping(OUT, PUB, 9, true), 0), Err(NO_MAPPING));
    // Straight to an inside address: not through the NAT either.
    assert_eq!(step(&mut n, &udp(OUT, 53, IN, 5000), 0), Err(NO_MAPPING));
    // A live mapping only lets its own remote endpoint in.
    let o = step(&mut n, &udp(IN, 7000, OUT, 53), 0).unwrap();
    let p = tuple(&o).1;
    assert_eq!(step(&mut n, &udp(OUT, 54, PUB, p), 0), Err(NO_MAPPING));
    assert_eq!(step(&mut n, &udp(OUT2, 53, PUB, p), 0), Err(NO_MAPPING));
    assert!(step(&mut n, &udp(OUT, 53, PUB, p), 0).is_ok());
    assert_eq!(stat(&n, "created"), 1);
}

const OUT2: [u8; 4] = [93, 184, 216, 35];

#[test]
fn tcp_fin_both_ways_then_linger_frees_the_port() {
    let mut n = nat((2000, 2009));
    let o = step(&mut n, &tcp(IN, 40000, OUT, 80, "S"), 0).unwrap();
    let p = tuple(&o).1;
    assert_eq!(n.free_ports(6), 9);
    step(&mut n, &tcp(OUT, 80, PUB, p, "SA"), S).unwrap();
    step(&mut n, &tcp(IN, 40000, OUT, 80, "FA"), 2 * S).unwrap();
    // One FIN: still the long timeout.
    assert!(step(&mut n, &tcp(OUT, 80, PUB, p, "A"), 20 * S).is_ok());
    step(&mut n, &tcp(OUT, 80, PUB, p, "FA"), 21 * S).unwrap();
    // Last ACK within the linger.
    assert!(step(&mut n, &tcp(IN, 40000, OUT, 80, "A"), 24 * S).is_ok());
    // More than 4 s after the last packet: gone, port back in the pool.
    assert_eq!(
        step(&mut n, &tcp(OUT, 80, PUB, p, "A"), 29 * S),
        Err(NO_MAPPING)
    );
    n.sweep(29 * S);
    assert_eq!(n.free_ports(6), 10);
    assert_eq!((stat(&n, "mappings"), stat(&n, "expired")), (0, 1));
}

#[test]
fn tcp_rst_then_linger_frees_the_port() {
    let mut n = nat((2000, 2009));
    let o = step(&mut n, &tcp(IN, 40000, OUT, 80, "S"), 0).unwrap();
    let p = tuple(&o).1;
    step(&mut n, &tcp(OUT, 80, PUB, p, "RA"), S).unwrap();
    assert!(step(&mut n, &tcp(OUT, 80, PUB, p, "A"), 4 * S).is_ok());
    assert_eq!(
        step(&mut n, &tcp(OUT, 80, PUB, p, "A"), 9 * S),
        Err(NO_MAPPING)
    );
    n.sweep(9 * S);
    assert_eq!(n.free_ports(6), 10);
    // A new connection on the same 5-tuple gets a fresh mapping (the FIFO hands out the
    // port freed longest ago, not the one just freed).
    let o = step(&mut n, &tcp(IN, 40000, OUT, 80, "S"), 10 * S).unwrap();
    assert_ne!(tuple(&o).1, p);
}

#[test]
fn idle_timeout_frees_mappings() {
    let mut n = nat((3000, 3001));
    let o = step(&mut n, &udp(IN, 1111, OUT, 53), 0).unwrap();
    let p = tuple(&o).1;
    // Replies refresh the mapping.
    assert!(step(&mut n, &udp(OUT, 53, PUB, p), 9 * S).is_ok());
    assert!(step(&mut n, &udp(OUT, 53, PUB, p), 18 * S).is_ok());
    assert_eq!(step(&mut n, &udp(OUT, 53, PUB, p), 29 * S), Err(NO_MAPPING));
    // Packets themselves sweep: one second later the port is back without help.
    step(&mut n, &ping(IN, OUT, 1, false), 31 * S).unwrap();
    step(&mut n, &ping(IN, OUT, 1, false), 32 * S).unwrap();
    assert_eq!(n.free_ports(17), 2);
    assert_eq!(stat(&n, "expired"), 1);
    // ICMP mappings time out on their own (shorter) timeout.
    assert_eq!(stat(&n, "mappings"), 1);
    step(&mut n, &udp(IN, 1, IN2, 1), 40 * S).unwrap();
    step(&mut n, &udp(IN, 1, IN2, 1), 42 * S).unwrap();
    assert_eq!(stat(&n, "mappings"), 0);
}

#[test]
fn a_flood_exhausts_a_small_pool_cleanly_and_live_mappings_are_never_reused() {
    let mut n = nat((5000, 5009));
    let mut got = Vec::new();
    for i in 0..25u16 {
        match step(&mut n, &udp(IN, 10000 + i, OUT, 53), u64::from(i)) {
            Ok(o) => got.push((i, tuple(&o).1)),
            Err(r) => assert_eq!(r, POOL_EXHAUSTED),
        }
    }
    assert_eq!(got.len(), 10);
    assert_eq!(stat(&n, "pool_exhausted"), 15);
    assert_eq!(stat(&n, "mappings"), 10);
    let mut ports: Vec<u16> = got.iter().map(|g| g.1).collect();
    ports.sort();
    assert_eq!(ports, (5000..=5009).collect::<Vec<_>>());
    // TCP has its own pool.
    assert!(step(&mut n, &tcp(IN, 1, OUT, 80, "S"), 30).is_ok());
    // While they live, every flow keeps its port and more flows are refused.
    for &(i, p) in &got {
        let o = step(&mut n, &udp(IN, 10000 + i, OUT, 53), 5 * S).unwrap();
        assert_eq!(tuple(&o).1, p);
    }
    assert_eq!(
        step(&mut n, &udp(IN, 20000, OUT, 53), 5 * S),
        Err(POOL_EXHAUSTED)
    );
    // Keep five alive; the other five expire and their ports serve new flows.
    for &(i, _) in &got[..5] {
        step(&mut n, &udp(IN, 10000 + i, OUT, 53), 12 * S).unwrap();
    }
    let mut fresh = Vec::new();
    for i in 0..6u16 {
        match step(&mut n, &udp(IN, 30000 + i, OUT, 53), 16 * S) {
            Ok(o) => fresh.push(tuple(&o).1),
            Err(r) => assert_eq!(r, POOL_EXHAUSTED),
        }
    }
    assert_eq!(fresh.len(), 5);
    for &(_, p) in &got[..5] {
        assert!(!fresh.contains(&p), "live port {p} reused");
    }
    assert_eq!(stat(&n, "pool_exhausted"), 17);
}

#[test]
fn udp_without_checksum_keeps_none() {
    let mut n = nat((1024, 65535));
    let mut b = udp(IN, 1234, OUT, 53);
    b[40] = 0;
    b[41] = 0;
    let o = step(&mut n, &b, 0).unwrap();
    assert_eq!(&o[40..42], &[0, 0]);
    let p = tuple(&o).1;
    let mut r = udp(OUT, 53, PUB, p);
    r[40] = 0;
    r[41] = 0;
    let back = step(&mut n, &r, 1).unwrap();
    assert_eq!(&back[40..42], &[0, 0]);
    assert_eq!(tuple(&back), (OUT, 53, IN, 1234));
}

/// Swaps source and destination (addresses and ports) of a translated packet, fixing
/// checksums from scratch as a remote host would.
fn reply_to(b: &[u8]) -> Vec<u8> {
    let (s, sp, d, dp) = tuple(b);
    let h = PacketHeaders::from_ethernet_slice(b).unwrap();
    match h.transport.unwrap() {
        TransportHeader::Tcp(_) => tcp(d, dp, s, sp, "A"),
        TransportHeader::Udp(_) => udp(d, dp, s, sp),
        _ => ping(d, s, sp, true),
    }
}

#[test]
fn round_trip_reaches_the_inside_host_with_the_original_tuple() {
    let mut n = nat((1024, 65535));
    let mut rng = 12345u64;
    let mut next = || {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (rng >> 33) as u32
    };
    for k in 0..2000u64 {
        let r = next();
        let src = [10, (r >> 8) as u8, r as u8, 1 + (r % 200) as u8];
        let dst = [93, 184, (r >> 16) as u8, 1];
        let (sp, dp) = (
            1024 + (next() % 60000) as u16,
            [53, 80, 443][(r % 3) as usize],
        );
        let pkt = match r % 3 {
            0 => tcp(src, sp, dst, dp, "S"),
            1 => udp(src, sp, dst, dp),
            _ => ping(src, dst, sp, false),
        };
        let ts = k * 1000;
        let orig = tuple(&pkt);
        let o = step(&mut n, &pkt, ts).unwrap();
        assert_eq!(tuple(&o).0, PUB);
        let back = step(&mut n, &reply_to(&o), ts + 500).unwrap();
        let t = tuple(&back);
        assert_eq!((t.0, t.1, t.2, t.3), (orig.2, orig.3, orig.0, orig.1));
    }
}

#[test]
fn icmp_errors_quoting_a_mapped_packet_are_translated_both_ways() {
    let mut n = nat((1024, 65535));
    let o = step(&mut n, &udp(IN, 5555, OUT, 9999), 0).unwrap();
    let p = tuple(&o).1;
    // The remote answers port unreachable, quoting the translated datagram.
    let quoted = &o[14..];
    let mut err = Vec::new();
    PacketBuilder::ethernet2([1; 6], [2; 6])
        .ipv4(OUT, PUB, 64)
        .icmpv4(etherparse::Icmpv4Type::DestinationUnreachable(
            etherparse::icmpv4::DestUnreachableHeader::Port,
        ))
        .write(&mut err, quoted)
        .unwrap();
    let back = step(&mut n, &err, 1).unwrap();
    let h = PacketHeaders::from_ethernet_slice(&back).unwrap();
    let Some(NetHeaders::Ipv4(ip, _)) = &h.net else {
        panic!()
    };
    assert_eq!(ip.destination, IN);
    assert_eq!(ip.calc_header_checksum(), ip.header_checksum);
    let icmp = h.transport.clone().unwrap();
    let TransportHeader::Icmpv4(i) = icmp else {
        panic!()
    };
    let q = h.payload.slice();
    let fresh = etherparse::Icmpv4Header::with_checksum(i.icmp_type.clone(), q);
    assert_eq!(fresh.checksum, i.checksum, "icmp checksum");
    // The quoted datagram is the original one, as the inside host sent it.
    let orig = udp(IN, 5555, OUT, 9999);
    assert_eq!(q, &orig[14..]);
    assert_eq!(stat(&n, "icmp_errors"), 1);
    // Errors about unknown mappings are dropped.
    let mut stray = err.clone();
    stray[14 + 28 + 20] ^= 0x55; // quoted source port
    assert_eq!(step(&mut n, &stray, 2), Err(NO_MAPPING));
    // Inside host errors about a reply it got: quoted destination becomes public.
    let reply_in = step(&mut n, &udp(OUT, 9999, PUB, p), 3).unwrap();
    let mut err2 = Vec::new();
    PacketBuilder::ethernet2([1; 6], [2; 6])
        .ipv4(IN, OUT, 64)
        .icmpv4(etherparse::Icmpv4Type::DestinationUnreachable(
            etherparse::icmpv4::DestUnreachableHeader::Port,
        ))
        .write(&mut err2, &reply_in[14..])
        .unwrap();
    let out = step(&mut n, &err2, 4).unwrap();
    let h = PacketHeaders::from_ethernet_slice(&out).unwrap();
    let Some(NetHeaders::Ipv4(ip, _)) = &h.net else {
        panic!()
    };
    assert_eq!(ip.source, PUB);
    let TransportHeader::Icmpv4(i) = h.transport.clone().unwrap() else {
        panic!()
    };
    let q = h.payload.slice();
    assert_eq!(
        etherparse::Icmpv4Header::with_checksum(i.icmp_type.clone(), q).checksum,
        i.checksum
    );
    assert_eq!(q, &udp(OUT, 9999, PUB, p)[14..]);
}

#[test]
fn set_pool_keeps_existing_mappings_and_moves_new_flows() {
    let mut n = nat((4000, 4001));
    let o = step(&mut n, &udp(IN, 1, OUT, 53), 0).unwrap();
    let old_p = tuple(&o).1;
    let new_pub = Ipv4Addr::new(203, 0, 113, 7);
    n.set_pool(&[new_pub], 6000, 6000).unwrap();
    // The old flow keeps its address and port, and its replies come in.
    let o = step(&mut n, &udp(IN, 1, OUT, 53), S).unwrap();
    assert_eq!((tuple(&o).0, tuple(&o).1), (PUB, old_p));
    assert!(step(&mut n, &udp(OUT, 53, PUB, old_p), S).is_ok());
    // New flows come from the new pool, until it runs out.
    let o = step(&mut n, &udp(IN, 2, OUT, 53), S).unwrap();
    assert_eq!((tuple(&o).0, tuple(&o).1), (new_pub.octets(), 6000));
    assert_eq!(step(&mut n, &udp(IN, 3, OUT, 53), S), Err(POOL_EXHAUSTED));
    // The old mapping ends; its pair is retired, not added to the new pool.
    n.sweep(30 * S);
    assert_eq!(n.free_ports(17), 1);
    assert!(n.set_pool(&[], 1, 2).is_err());
    assert!(n.set_pool(&[new_pub], 9, 8).is_err());
}

#[test]
fn other_traffic_by_policy() {
    let mut n = nat((1024, 65535));
    // IPv6 passes untouched.
    let mut v6 = Vec::new();
    PacketBuilder::ethernet2([1; 6], [2; 6])
        .ipv6([1; 16], [2; 16], 64)
        .udp(1, 2)
        .write(&mut v6, b"x")
        .unwrap();
    assert_eq!(step(&mut n, &v6, 0), Ok(v6.clone()));
    // Inside to inside passes untouched.
    let ii = udp(IN, 1, IN2, 2);
    assert_eq!(step(&mut n, &ii, 0), Ok(ii.clone()));
    // Later fragments, other protocols.
    let mut frag = udp(IN, 1, OUT, 2);
    frag[14 + 7] = 8;
    assert_eq!(step(&mut n, &frag, 0), Err(FRAGMENT));
    let mut gre = udp(IN, 1, OUT, 2);
    gre[14 + 9] = 47;
    assert_eq!(step(&mut n, &gre, 0), Err(UNSUPPORTED));
    assert_eq!(stat(&n, "passed_not_ipv4"), 1);
    assert_eq!(stat(&n, "internal"), 1);
}

#[test]
fn never_panics_on_cut_or_scrambled_packets() {
    let mut n = nat((1024, 1100));
    let mut seeds = vec![
        tcp(IN, 1, OUT, 2, "S"),
        udp(IN, 1, OUT, 2),
        ping(IN, OUT, 3, false),
        ping(OUT, PUB, 3, true),
    ];
    // An ICMP error from outside quoting a translated packet.
    let o = step(&mut n, &udp(IN, 77, OUT, 78), 0).unwrap();
    let mut err = Vec::new();
    PacketBuilder::ethernet2([1; 6], [2; 6])
        .ipv4(OUT, PUB, 64)
        .icmpv4(etherparse::Icmpv4Type::TimeExceeded(
            etherparse::icmpv4::TimeExceededCode::TtlExceededInTransit,
        ))
        .write(&mut err, &o[14..])
        .unwrap();
    seeds.push(err);
    let mut rng = 7u64;
    for s in &seeds {
        for cut in 0..=s.len() {
            let _ = step(&mut n, &s[..cut], 1);
        }
        for k in 0..3000u64 {
            let mut b = s.clone();
            for _ in 0..3 {
                rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1);
                let i = (rng >> 33) as usize % b.len();
                b[i] = (rng >> 20) as u8;
            }
            let _ = step(&mut n, &b, k);
        }
    }
}

#[test]
fn profile_covers_every_write() {
    // The runner's profile check compares header bytes around each NF call.
    let cfg = r#"
edges = ["in -> nat -> out"]
[[nf]]
name = "nat"
kind = "nat"
inside = "10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16"
"#;
    let trace = Trace::open(&common::dataset("bench/ndpi-ether-merged.pcap")).unwrap();
    let c = catena::runtime::ChainConfig::parse(cfg, "t.toml").unwrap();
    let chain = catena::runtime::Chain::from_config(&c).unwrap();
    let mut r = catena::runtime::Runner::new(chain, trace.max_packet_len());
    r.check_profiles(true);
    let s = r
        .run(
            &trace,
            &catena::runtime::RunOptions::default(),
            &mut catena::runtime::NoProgress,
        )
        .expect("no undeclared writes");
    assert_eq!(s.packets_in, s.packets_out + s.packets_dropped);
}

/// (time, IP id, IP length) of every packet tshark finds a bad IP/TCP/UDP/ICMP checksum in.
fn bad_checksums(p: &std::path::Path) -> std::collections::BTreeSet<String> {
    let out = Command::new("tshark")
        .args(["-r"])
        .arg(p)
        .args([
            "-o",
            "ip.check_checksum:TRUE",
            "-o",
            "tcp.check_checksum:TRUE",
            "-o",
            "udp.check_checksum:TRUE",
            "-Y",
            "ip.checksum.status==0 or tcp.checksum.status==0 or udp.checksum.status==0 or icmp.checksum.status==0",
            "-T",
            "fields",
            "-e",
            "frame.time_epoch",
            "-e",
            "ip.id",
            "-e",
            "ip.len",
        ])
        .output()
        .expect("tshark runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn translated_real_trace_keeps_every_good_checksum_good() {
    common::require("tshark");
    let input = common::dataset("bench/ndpi-ether-merged.pcap");
    let dir = common::tempdir();
    let out = dir.path().join("nat.pcap");
    let trace = Trace::open(&input).unwrap();
    let s = common::run_chain(
        r#"
edges = ["in -> nat -> out"]
[[nf]]
name = "nat"
kind = "nat"
inside = "10.0.0.0/8, 192.168.0.0/16, 172.16.0.0/12"
public = "198.51.100.1"
"#,
        &trace,
        Some(&out),
    );
    let nf = &s.nfs[0];
    assert_eq!(nf.packets_in, nf.packets_out + nf.packets_dropped);
    let get = |k: &str| nf.stats.iter().find(|(n, _)| n == k).unwrap().1;
    assert!(get("translated_out") > 10_000, "{:?}", nf.stats);
    // The output is a subset of the input (drops); a packet bad after must have been bad
    // before, matched by capture time, IP id and length (none of which the NAT changes).
    let before = bad_checksums(&input);
    let after = bad_checksums(&out);
    let new_bad: Vec<_> = after.difference(&before).collect();
    assert!(
        new_bad.is_empty(),
        "checksums broken by the NAT: {new_bad:?}"
    );
    // And tshark agrees the translated packets carry the public address.
    let o = Command::new("tshark")
        .arg("-r")
        .arg(&out)
        .args([
            "-Y",
            "ip.src==198.51.100.1",
            "-T",
            "fields",
            "-e",
            "frame.number",
        ])
        .output()
        .unwrap();
    let n = String::from_utf8_lossy(&o.stdout).lines().count() as u64;
    assert!(n >= get("translated_out"), "{n}");
}

/// Nanoseconds per packet of `Nat::process` alone over `pkts` (bytes, capture time),
/// replayed `loops` times with times shifted per loop as the runner does; packet bytes are
/// restored between loops outside the timed part.
fn time_nat(n: &mut Nat, pkts: &[(Vec<u8>, u64)], loops: u64) -> f64 {
    let first = pkts.iter().map(|p| p.1).min().unwrap_or(0);
    let span = pkts.iter().map(|p| p.1).max().unwrap_or(0) - first + 1;
    // 32 buffers reused, as the runner's pool is: the bytes are copied in untimed.
    let mut free: Vec<Packet> = (0..32).map(|_| Packet::from_bytes(&[0; 1600])).collect();
    let mut batch = Batch::new();
    let mut spent = std::time::Duration::ZERO;
    let mut count = 0u64;
    for l in 0..loops {
        for chunk in pkts.chunks(32) {
            for (b, ts) in chunk {
                let mut p = free.pop().unwrap();
                p.set_bytes(b);
                p.meta_mut().ts_ns = ts + l * span;
                p.meta_mut().now_ns = ts + l * span;
                batch.push(p);
            }
            let t = std::time::Instant::now();
            n.process(&mut batch, &Context { ports: 2 });
            spent += t.elapsed();
            free.extend(batch.drain());
            count += chunk.len() as u64;
        }
    }
    spent.as_nanos() as f64 / count as f64
}

/// A measurement, not a test: `cargo test --release --test nat -- --ignored --nocapture`.
#[test]
#[ignore]
fn ns_per_packet() {
    let trace = Trace::open(&common::dataset("bench/ndpi-ether-merged.pcap")).unwrap();
    let pkts: Vec<(Vec<u8>, u64)> = (0..trace.len())
        .map(|i| (trace.packet(i).to_vec(), trace.record(i).ts_ns))
        .collect();
    for cap in [1 << 14, 1 << 18] {
        let mut n = Nat::new(&NatConfig {
            capacity: cap,
            ..NatConfig::default()
        })
        .unwrap();
        let ns = time_nat(&mut n, &pkts, 20);
        println!(
            "merged trace, capacity {cap}: {ns:.1} ns/packet ({:.1} Mpps)",
            1e3 / ns
        );
    }
    // 100k live UDP and TCP flows from inside, 1M packets in random flow order, replies
    // included, all within one idle timeout.
    let mut n = Nat::new(&NatConfig {
        public: vec![PUB.into(), [198, 51, 100, 2].into()],
        ..NatConfig::default()
    })
    .unwrap();
    let flows = 100_000u32;
    let mut rng = 99u64;
    let mut rnd = || {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (rng >> 33) as u32
    };
    let mut pkts = Vec::new();
    for f in 0..flows {
        let src = [10, (f >> 16) as u8, (f >> 8) as u8, f as u8];
        let p = if f % 2 == 0 {
            udp(src, 1000 + (f % 50000) as u16, OUT, 53)
        } else {
            tcp(src, 1000 + (f % 50000) as u16, OUT, 443, "A")
        };
        pkts.push((p, u64::from(f)));
    }
    // Learn every flow once, then time hits: outgoing packets and the replies.
    let mut replies = Vec::new();
    for (p, ts) in &pkts {
        let o = step(&mut n, p, *ts).unwrap();
        replies.push(reply_to(&o));
    }
    let mut mix = Vec::new();
    for k in 0..1_000_000u64 {
        let f = rnd() % flows;
        let b = if k % 2 == 0 {
            &pkts[f as usize].0
        } else {
            &replies[f as usize]
        };
        mix.push((b.clone(), 1_000_000 + k * 100));
    }
    let ns = time_nat(&mut n, &mix, 3);
    println!("100k flows: {ns:.1} ns/packet ({:.1} Mpps)", 1e3 / ns);
    assert_eq!(stat(&n, "mappings"), u64::from(flows));
}

/// Every packet's verdict and bytes after `n`, fed in batches of `size`.
fn outputs(n: &mut Nat, pkts: &[(Vec<u8>, u64)], size: usize) -> Vec<Result<Vec<u8>, u8>> {
    let mut res = Vec::new();
    for chunk in pkts.chunks(size) {
        let mut b = Batch::with_capacity(size);
        for (bytes, ts) in chunk {
            let mut p = Packet::from_bytes(bytes);
            p.meta_mut().ts_ns = *ts;
            p.meta_mut().now_ns = *ts;
            b.push(p);
        }
        n.process(&mut b, &Context { ports: 2 });
        for p in b.iter() {
            res.push(match p.meta().verdict {
                Verdict::Out(_) => Ok(p.data().to_vec()),
                Verdict::Drop(r) => Err(r),
            });
        }
    }
    res
}

#[test]
fn batch_size_never_changes_the_output() {
    // Sweeps advance per packet and prefetching is only a hint, so how packets are
    // batched (which optimisations may change) cannot change ports or verdicts. A small
    // pool and short timeouts make port reuse and exhaustion frequent.
    let trace = Trace::open(&common::dataset("bench/ndpi-ether-merged.pcap")).unwrap();
    let pkts: Vec<(Vec<u8>, u64)> = (0..trace.len())
        .map(|i| (trace.packet(i).to_vec(), trace.record(i).ts_ns))
        .collect();
    let mk = || {
        Nat::new(&NatConfig {
            ports: (40000, 40200),
            udp_timeout_ns: 2 * S,
            tcp_timeout_ns: 30 * S,
            ..NatConfig::default()
        })
        .unwrap()
    };
    let (mut a, mut b, mut c) = (mk(), mk(), mk());
    let one = outputs(&mut a, &pkts, 1);
    assert_eq!(one, outputs(&mut b, &pkts, 32));
    assert_eq!(one, outputs(&mut c, &pkts, 70));
    assert!(stat(&a, "pool_exhausted") > 0 || stat(&a, "expired") > 0);
    assert_eq!(a.stats(), b.stats());
}

#[test]
fn cut_short_headers_are_dropped_as_malformed() {
    const MALFORMED: u8 = 5;
    let mut n = nat((1024, 65535));
    let full = [
        (tcp(IN, 1, OUT, 2, "S"), 14 + 20 + 20),
        (udp(IN, 1, OUT, 2), 14 + 20 + 8),
        (ping(IN, OUT, 3, false), 14 + 20 + 8),
    ];
    for (p, headers) in &full {
        for cut in 0..*headers {
            assert_eq!(step(&mut n, &p[..cut], 1), Err(MALFORMED), "cut at {cut}");
        }
        assert!(step(&mut n, &p[..*headers], 1).is_ok());
    }
}
