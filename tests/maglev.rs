//! The Maglev load balancer: table balance, weights and disruption as in the paper (NSDI'16
//! §3.4, §5.3), connection tracking across backend changes, and rewritten packets checked
//! against packets built from scratch by etherparse and against tshark's checksum checks.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;

use catena::io::Trace;
use catena::nfs::{Backend, Context, Maglev, Nf};
use catena::packet::{Batch, Packet, Verdict};
use etherparse::PacketBuilder;

const M: usize = 65537;
const VIP: [u8; 4] = [203, 0, 113, 10];

fn v4(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0a01_0000 + i))
}

fn equal(n: u32) -> Vec<Backend> {
    (1..=n).map(|i| Backend::new(v4(i))).collect()
}

fn lb(backends: &[Backend]) -> Maglev {
    Maglev::new(IpAddr::V4(VIP.into()), backends, M, 1 << 16, 0).expect("maglev")
}

fn counts(t: &[IpAddr]) -> BTreeMap<IpAddr, usize> {
    let mut c = BTreeMap::new();
    for a in t {
        *c.entry(*a).or_default() += 1;
    }
    c
}

#[test]
fn equal_weights_fill_the_table_within_one_percent() {
    for n in [10u32, 100] {
        let t = lb(&equal(n)).table();
        assert_eq!(t.len(), M);
        let c = counts(&t);
        assert_eq!(c.len(), n as usize, "every backend has slots");
        let ideal = M as f64 / n as f64;
        for (a, k) in &c {
            let dev = (*k as f64 - ideal).abs() / ideal;
            assert!(
                dev <= 0.01,
                "{n} backends: {a} has {k} slots, ideal {ideal:.1}"
            );
        }
    }
}

#[test]
fn weights_share_the_table() {
    let b = vec![
        Backend::new(v4(1)).with_weight(2),
        Backend::new(v4(2)).with_weight(1),
    ];
    let c = counts(&lb(&b).table());
    let r = c[&v4(1)] as f64 / c[&v4(2)] as f64;
    assert!((r - 2.0).abs() < 0.02, "2:1 weights gave {r:.3}");

    let b = vec![
        Backend::new(v4(1)).with_weight(3),
        Backend::new(v4(2)).with_weight(1),
        Backend::new(v4(3)).with_weight(1),
        Backend::new(v4(4)).with_weight(0),
    ];
    let c = counts(&lb(&b).table());
    assert!(!c.contains_key(&v4(4)), "weight 0 takes no slots");
    let r = c[&v4(1)] as f64 / (c[&v4(2)] + c[&v4(3)]) as f64 * 2.0;
    assert!((r - 3.0).abs() < 0.05, "3:1:1 weights gave {r:.3}");
}

#[test]
fn tables_are_reproducible() {
    assert!(lb(&equal(10)).table() == lb(&equal(10)).table());
    // Backends are placed by name, not by their position in the list.
    let mut rev = equal(10);
    rev.reverse();
    assert!(lb(&equal(10)).table() == lb(&rev).table());
}

#[test]
fn removing_one_backend_moves_little_more_than_its_slots() {
    for n in [10u32, 100] {
        let before = lb(&equal(n)).table();
        for gone in [1, n / 2, n] {
            let rest: Vec<Backend> = equal(n)
                .into_iter()
                .filter(|b| b.addr != v4(gone))
                .collect();
            let after = lb(&rest).table();
            let changed = before.iter().zip(&after).filter(|(a, b)| a != b).count();
            let own = before.iter().filter(|a| **a == v4(gone)).count();
            let frac = changed as f64 / M as f64;
            // The removed backend's slots must all move; the paper's Figure 10 shows the
            // extra movement stays within a few percent of the table.
            assert!(changed >= own);
            assert!(
                frac <= 1.0 / n as f64 + 0.03,
                "{n} backends, removed {gone}: {changed} of {M} slots changed ({own} were its own)"
            );
            eprintln!(
                "{n} backends, removed #{gone}: {:.2}% of slots changed, {:.2}% beyond its own",
                100.0 * frac,
                100.0 * (changed - own) as f64 / M as f64
            );
        }
    }
}

fn tcp_to_vip(i: u32, payload: &[u8]) -> Vec<u8> {
    let src = (0x0a63_0000u32 + i / 50).to_be_bytes();
    let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(src, VIP, 64)
        .tcp(10_000 + (i % 50) as u16 * 7, 80, i * 1000, 8192);
    let mut v = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut v, payload).unwrap();
    v
}

/// Sends the packets through in batches of 32; returns (verdict, bytes) of each.
fn process(nf: &mut Maglev, pkts: &[Vec<u8>]) -> Vec<(Verdict, Vec<u8>)> {
    let mut out = Vec::new();
    for chunk in pkts.chunks(32) {
        let mut b = Batch::new();
        for (k, d) in chunk.iter().enumerate() {
            let mut p = Packet::from_bytes(d);
            p.meta_mut().ts_ns = 1_000_000_000 + k as u64;
            p.meta_mut().now_ns = 1_000_000_000 + k as u64;
            b.push(p);
        }
        nf.process(&mut b, &Context { ports: 1 });
        out.extend(b.iter().map(|p| (p.meta().verdict, p.data().to_vec())));
    }
    out
}

fn dst_of(d: &[u8]) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(d[30], d[31], d[32], d[33]))
}

#[test]
fn tracked_flows_keep_their_backend_when_the_set_changes() {
    let flows: Vec<Vec<u8>> = (0..5000).map(|i| tcp_to_vip(i, b"x")).collect();
    let mut live = lb(&equal(10));
    let first: Vec<IpAddr> = process(&mut live, &flows)
        .iter()
        .map(|(_, d)| dst_of(d))
        .collect();
    assert_eq!(live.tracked(), 5000);

    // Remove one backend and add two: tracked flows must not move unless theirs left.
    let removed = v4(3);
    let mut set: Vec<Backend> = equal(12)
        .into_iter()
        .filter(|b| b.addr != removed)
        .collect();
    set[0].weight = 0; // drained: keeps its flows, takes no new ones
    live.set_backends(&set).unwrap();
    let second: Vec<IpAddr> = process(&mut live, &flows)
        .iter()
        .map(|(_, d)| dst_of(d))
        .collect();
    let fresh: Vec<IpAddr> = process(&mut lb(&set), &flows)
        .iter()
        .map(|(_, d)| dst_of(d))
        .collect();

    let mut on_removed = 0;
    for i in 0..flows.len() {
        if first[i] == removed {
            on_removed += 1;
            assert_ne!(second[i], removed);
            assert_eq!(second[i], fresh[i], "a rehashed flow follows the new table");
        } else {
            assert_eq!(first[i], second[i], "flow {i} moved");
        }
    }
    // Without tracking, the new table would have moved many flows (so the test has teeth).
    let would_move = (0..flows.len())
        .filter(|&i| first[i] != removed && fresh[i] != first[i])
        .count();
    assert!(
        on_removed > 300 && would_move > 500,
        "{on_removed} {would_move}"
    );
    let stats: HashMap<String, u64> = live
        .stats()
        .into_iter()
        .map(|(k, v)| (k.into_owned(), v))
        .collect();
    assert_eq!(stats["rehashed_flows"], on_removed);
    assert_eq!(stats["tracked_flows"], 5000);
    // Per-backend counters are named by address (made on demand, nothing leaked).
    assert_eq!(
        (1..=12)
            .map(|i| stats[&format!("backend 10.1.0.{i} packets")])
            .sum::<u64>(),
        10_000
    );

    // Per-backend packet counts cover every packet.
    let total: u64 = live.packets_per_backend().iter().map(|(_, n)| n).sum();
    assert_eq!(total, 10_000);
}

#[test]
fn rewritten_packets_equal_packets_built_for_the_backend() {
    let backends = vec![
        Backend::new(v4(1)).with_mac([2, 0, 0, 0, 1, 1]),
        Backend::new(v4(2)).with_mac([2, 0, 0, 0, 1, 2]),
        Backend::new(v4(3)),
    ];
    let mut nf = lb(&backends);
    let src = [198, 51, 100, 7];
    for (i, payload) in [&b""[..], b"odd", b"hello, backend"].iter().enumerate() {
        for proto in ["tcp", "udp"] {
            let build = |dst: [u8; 4], mac: [u8; 6]| {
                let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 9], mac).ipv4(src, dst, 61);
                let mut v = Vec::new();
                if proto == "tcp" {
                    let b = b.tcp(40000 + i as u16, 443, 7, 100).syn().ack(99);
                    b.write(&mut v, payload).unwrap();
                } else {
                    b.udp(40000 + i as u16, 53).write(&mut v, payload).unwrap();
                }
                v
            };
            let out = process(&mut nf, &[build(VIP, [2, 0, 0, 0, 0, 2])]);
            let (verdict, got) = &out[0];
            assert_eq!(*verdict, Verdict::Out(0));
            let IpAddr::V4(be) = dst_of(got) else {
                unreachable!()
            };
            let mac = backends
                .iter()
                .find(|b| b.addr == IpAddr::V4(be))
                .unwrap()
                .mac
                .unwrap_or([2, 0, 0, 0, 0, 2]);
            assert_eq!(got, &build(be.octets(), mac), "{proto} {payload:?}");
        }
    }
}

#[test]
fn ipv6_vip_rewrites_address_and_checksums() {
    let vip: [u8; 16] = "2001:db8::10"
        .parse::<std::net::Ipv6Addr>()
        .unwrap()
        .octets();
    let backs: Vec<Backend> = (1..=3)
        .map(|i| Backend::new(format!("2001:db8:1::{i}").parse().unwrap()))
        .collect();
    let mut nf = Maglev::new(IpAddr::V6(vip.into()), &backs, 251, 64, 0).unwrap();
    let src: [u8; 16] = "2001:db8:ffff::5"
        .parse::<std::net::Ipv6Addr>()
        .unwrap()
        .octets();
    let build = |dst: [u8; 16], udp: bool| {
        let b = PacketBuilder::ethernet2([2; 6], [4; 6]).ipv6(src, dst, 9);
        let mut v = Vec::new();
        if udp {
            b.udp(5353, 5353).write(&mut v, b"abc").unwrap();
        } else {
            b.tcp(1234, 80, 1, 2).write(&mut v, b"abcd").unwrap();
        }
        v
    };
    for udp in [false, true] {
        let out = process(&mut nf, &[build(vip, udp)]);
        let got = &out[0].1;
        let mut dst = [0u8; 16];
        dst.copy_from_slice(&got[38..54]);
        assert!(backs.iter().any(|b| b.addr == IpAddr::from(dst)));
        assert_eq!(got, &build(dst, udp));
    }
    // IPv4 packets do not match an IPv6 VIP: they pass untouched.
    let p = tcp_to_vip(1, b"");
    assert_eq!(process(&mut nf, std::slice::from_ref(&p))[0].1, p);
}

#[test]
fn no_backend_drops_and_other_traffic_passes_or_drops() {
    let mut nf = lb(&[Backend::new(v4(1)).with_weight(0)]);
    let p = tcp_to_vip(1, b"");
    assert_eq!(
        process(&mut nf, std::slice::from_ref(&p))[0].0,
        Verdict::Drop(0)
    );
    let mut other = p.clone();
    other[33] = 11; // destination 203.0.113.11
    let mut nf = lb(&equal(2));
    assert_eq!(
        process(&mut nf, std::slice::from_ref(&other))[0],
        (Verdict::Out(0), other.clone())
    );
    let mut nf = lb(&equal(2)).with_drop_others(true);
    assert_eq!(
        process(&mut nf, std::slice::from_ref(&other))[0].0,
        Verdict::Drop(1)
    );
    // Truncated and garbage packets to the VIP never panic.
    let mut nf = lb(&equal(2));
    let mut junk: Vec<Vec<u8>> = (0..p.len()).map(|n| p[..n].to_vec()).collect();
    junk.push(vec![0xff; 80]);
    assert_eq!(process(&mut nf, &junk).len(), junk.len());
}

#[test]
fn config_errors_are_one_line() {
    let base = |extra: &str| {
        format!(
            "[[nf]]\nname = \"lb\"\nkind = \"maglev\"\nvip = \"203.0.113.10\"\nbackends = [{{ addr = \"10.1.0.1\" }}]\n{extra}"
        )
    };
    let err = |text: &str| {
        let cfg = catena::runtime::ChainConfig::parse(text, "t.toml").unwrap();
        match catena::runtime::Chain::from_config(&cfg) {
            Ok(_) => panic!("accepted: {text}"),
            Err(e) => e.to_string(),
        }
    };
    assert!(err(&base("table_size = 65536")).contains("prime"));
    assert!(err(&base("other = \"maybe\"")).contains("other"));
    assert!(err(&base("bogus = 1")).contains("unknown parameter `bogus`"));
    let t = "[[nf]]\nname = \"lb\"\nkind = \"maglev\"\nvip = \"203.0.113.10\"\n";
    assert!(err(t).contains("`backends` is required"));
    for (b, msg) in [
        ("[{ addr = \"2001:db8::1\" }]", "family"),
        (
            "[{ addr = \"10.1.0.1\" }, { addr = \"10.1.0.1\" }]",
            "twice",
        ),
        ("[{ addr = \"10.1.0.1\", mac = \"zz\" }]", "MAC"),
        ("[{ addr = \"10.1.0.1\", weight = -1 }]", "weight"),
        ("[{ addr = \"10.1.0.1\", port = 1 }]", "unknown key"),
        ("[\"10.1.0.1\"]", "must be a table"),
        ("[]", "at least one"),
    ] {
        let e = err(&format!("{t}backends = {b}\n"));
        assert!(e.contains(msg) && !e.contains('\n'), "{b}: {e}");
    }
    let ok = base("table_size = 251\ncapacity = 10\ntimeout = 5\nseed = 3\nother = \"drop\"");
    let cfg = catena::runtime::ChainConfig::parse(&ok, "t.toml").unwrap();
    assert!(catena::runtime::Chain::from_config(&cfg).is_ok());
}

/// Per frame: (ip.dst, eth.dst, ip checksum status, tcp status, udp status), from tshark
/// with checksum validation on (1 = good, 2 = bad, 3 = not present).
fn tshark_checksums(path: &std::path::Path) -> Vec<[String; 5]> {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(path)
        .args(["-o", "ip.check_checksum:TRUE"])
        .args(["-o", "tcp.check_checksum:TRUE"])
        .args(["-o", "udp.check_checksum:TRUE"])
        .args(["-T", "fields", "-E", "occurrence=f"])
        .args(["-e", "ip.dst", "-e", "eth.dst", "-e", "ip.checksum.status"])
        .args(["-e", "tcp.checksum.status", "-e", "udp.checksum.status"])
        .output()
        .expect("tshark");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let mut f = l.split('\t').map(str::to_string);
            std::array::from_fn(|_| f.next().unwrap_or_default())
        })
        .collect()
}

#[test]
fn checksums_stay_valid_on_the_merged_trace_per_tshark() {
    common::require("tshark");
    let input = common::dataset("bench/ndpi-ether-merged.pcap");
    let trace = Trace::open(&input).unwrap();
    let before = tshark_checksums(&input);
    // The busiest TCP destination of the trace, and a UDP one (mostly without checksums).
    for (vip, n_vip) in [("192.168.2.110", 3169), ("10.35.60.100", 1182)] {
        let dir = common::tempdir();
        let out = dir.path().join("out.pcap");
        let chain = format!(
            r#"[[nf]]
name = "lb"
kind = "maglev"
vip = "{vip}"
backends = [
  {{ addr = "10.1.0.1", mac = "02:00:00:00:01:01" }},
  {{ addr = "10.1.0.2", mac = "02:00:00:00:01:02", weight = 2 }},
  {{ addr = "10.1.0.3" }},
]
"#
        );
        let s = common::run_chain(&chain, &trace, Some(&out));
        assert_eq!(s.packets_out, trace.len() as u64);
        let after = tshark_checksums(&out);
        assert_eq!(before.len(), after.len());
        let mut rewritten = 0;
        let mut per_backend: BTreeMap<String, u64> = BTreeMap::new();
        for (i, (b, a)) in before.iter().zip(&after).enumerate() {
            if b[0] != vip {
                assert_eq!(a, b, "frame {} not to the VIP changed", i + 1);
                continue;
            }
            rewritten += 1;
            *per_backend.entry(a[0].clone()).or_default() += 1;
            let mac = match a[0].as_str() {
                "10.1.0.1" => "02:00:00:00:01:01",
                "10.1.0.2" => "02:00:00:00:01:02",
                "10.1.0.3" => b[1].as_str(),
                o => panic!("frame {}: destination {o} is no backend", i + 1),
            };
            assert_eq!(a[1], mac, "frame {}", i + 1);
            // Checksums that were valid stay valid; absent ones stay absent.
            assert_eq!(&a[2..], &b[2..], "frame {}: checksum status", i + 1);
            assert_eq!(a[2], "1", "frame {}", i + 1);
        }
        assert_eq!(rewritten, n_vip, "{vip}");
        let stats: HashMap<&str, u64> = s.nfs[0]
            .stats
            .iter()
            .map(|(k, v)| (k.as_str(), *v))
            .collect();
        for (addr, n) in &per_backend {
            assert_eq!(stats[format!("backend {addr} packets").as_str()], *n);
        }
        eprintln!("{vip}: {rewritten} packets rewritten, per backend {per_backend:?}");
    }
}

/// The runner's profile check (on in debug builds) compares header bytes after every NF
/// call: Maglev may only write what it declares (IP_DST, ETH_DST with MACs).
#[test]
fn writes_only_declared_fields() {
    use catena::runtime::{Chain, ChainConfig, NoProgress, RunOptions, Runner};
    let trace = Trace::open(&common::dataset("bench/ndpi-ether-merged.pcap")).unwrap();
    for mac in ["", ", mac = \"02:00:00:00:01:01\""] {
        // A VIP with TCP, one with UDP (mostly without checksums).
        for vip in ["192.168.2.110", "10.35.60.100"] {
            let text = format!(
                "[[nf]]\nname = \"lb\"\nkind = \"maglev\"\nvip = \"{vip}\"\nbackends = [{{ addr = \"10.1.0.1\"{mac} }}, {{ addr = \"10.1.0.2\" }}]\n"
            );
            let cfg = ChainConfig::parse(&text, "t.toml").unwrap();
            let mut r = Runner::new(Chain::from_config(&cfg).unwrap(), trace.max_packet_len());
            r.check_profiles(true);
            r.run(&trace, &RunOptions::default(), &mut NoProgress)
                .expect("no undeclared writes");
        }
    }
}

#[test]
fn cut_short_headers_are_dropped_as_malformed() {
    const MALFORMED: Verdict = Verdict::Drop(2);
    let p = tcp_to_vip(1, b"payload");
    let headers = 14 + 20 + 20;
    let cuts: Vec<Vec<u8>> = (0..=headers).map(|c| p[..c].to_vec()).collect();
    let mut lb = lb(&equal(3));
    let out = process(&mut lb, &cuts);
    for (c, (v, _)) in out.iter().enumerate().take(headers) {
        assert_eq!(*v, MALFORMED, "cut at {c}");
    }
    assert_eq!(out[headers].0, Verdict::Out(0));
    // A first fragment balances on addresses only, transport header or not.
    let mut frag = p[..14 + 20 + 4].to_vec();
    frag[14 + 6] = 0x20;
    assert_eq!(process(&mut lb, &[frag])[0].0, Verdict::Out(0));
}
