//! The synthetic trace generator, checked from outside: every packet is parsed by etherparse
//! (not our code) and every checksum recomputed by it; shares, sizes, TCP sequence numbers
//! and determinism are measured on the result.

use std::collections::HashMap;

use catena::io::gen::{generate, GenOptions, PortMix, Profile, SizeModel};
use catena::io::Trace;
use etherparse::{NetSlice, SlicedPacket, TransportSlice};

#[derive(Default, Debug)]
struct Stats {
    n: usize,
    bytes: u64,
    tcp: usize,
    udp: usize,
    icmp: usize,
    web: usize,
    v6: usize,
    flows: usize,
    /// Flows with at least two packets, and those of them seen in both directions.
    multi: usize,
    both_ways: usize,
    fins: usize,
    data: usize,
}

impl Stats {
    fn mean(&self) -> f64 {
        self.bytes as f64 / self.n as f64
    }
    fn share(&self, x: usize) -> f64 {
        x as f64 / self.n as f64
    }
}

/// Per flow and direction: next sequence number, next IPv4 ident, packets seen.
#[derive(Default)]
struct Side {
    next_seq: Option<u32>,
    next_ident: Option<u16>,
    packets: usize,
}

type Key = (Vec<u8>, Vec<u8>, u16, u16, u8);

/// Parses and checks every packet; panics naming the packet on the first problem.
fn check(t: &Trace) -> Stats {
    let mut s = Stats::default();
    let mut sides: HashMap<Key, Side> = HashMap::new();
    let mut last_ts = 0;
    for i in 0..t.len() {
        let r = t.record(i);
        // The profiles' rates leave room for strictly increasing µs timestamps.
        assert!(r.ts_ns > last_ts, "packet {i}: timestamp does not increase");
        assert_eq!(r.ts_ns % 1000, 0, "packet {i}: not µs resolution");
        last_ts = r.ts_ns;
        let p = t.packet(i);
        assert!(p.len() >= 60, "packet {i}: {} B < 60", p.len());
        s.n += 1;
        s.bytes += p.len() as u64;
        let sp = SlicedPacket::from_ethernet(p).unwrap_or_else(|e| panic!("packet {i}: {e:?}"));
        let (src, dst, src6, dst6, ident) = match sp.net.as_ref().expect("no IP") {
            NetSlice::Ipv4(ip) => {
                let h = ip.header();
                assert_eq!(
                    h.to_header().calc_header_checksum(),
                    h.header_checksum(),
                    "packet {i}: IPv4 checksum"
                );
                assert!(h.ttl() == 64 || h.ttl() == 128);
                (
                    h.source(),
                    h.destination(),
                    None,
                    None,
                    Some(h.identification()),
                )
            }
            NetSlice::Ipv6(ip) => {
                s.v6 += 1;
                let h = ip.header();
                (
                    [0; 4],
                    [0; 4],
                    Some(h.source()),
                    Some(h.destination()),
                    None,
                )
            }
            NetSlice::Arp(_) => panic!("packet {i}: ARP"),
        };
        let addr =
            |a4: [u8; 4], a6: Option<[u8; 16]>| a6.map(|a| a.to_vec()).unwrap_or(a4.to_vec());
        let (sa, da) = (addr(src, src6), addr(dst, dst6));
        let (sport, dport, proto, seq_adv) = match sp.transport.as_ref().expect("no L4") {
            TransportSlice::Tcp(tcp) => {
                s.tcp += 1;
                let c = match (src6, dst6) {
                    (Some(a), Some(b)) => tcp.calc_checksum_ipv6(a, b).unwrap(),
                    _ => tcp.calc_checksum_ipv4(src, dst).unwrap(),
                };
                assert_eq!(c, tcp.checksum(), "packet {i}: TCP checksum");
                if tcp.fin() {
                    s.fins += 1;
                }
                if !tcp.payload().is_empty() {
                    s.data += 1;
                    assert!(tcp.psh() && tcp.ack(), "packet {i}: data without PSH-ACK");
                }
                let adv = tcp.payload().len() as u32 + u32::from(tcp.syn()) + u32::from(tcp.fin());
                (
                    tcp.source_port(),
                    tcp.destination_port(),
                    6,
                    Some((tcp.sequence_number(), adv, tcp.syn())),
                )
            }
            TransportSlice::Udp(udp) => {
                s.udp += 1;
                let h = udp.to_header();
                let c = match (src6, dst6) {
                    (Some(a), Some(b)) => h.calc_checksum_ipv6_raw(a, b, udp.payload()).unwrap(),
                    _ => h.calc_checksum_ipv4_raw(src, dst, udp.payload()).unwrap(),
                };
                assert_eq!(c, udp.checksum(), "packet {i}: UDP checksum");
                (udp.source_port(), udp.destination_port(), 17, None)
            }
            TransportSlice::Icmpv4(ic) => {
                s.icmp += 1;
                assert_eq!(
                    ic.icmp_type().calc_checksum(ic.payload()),
                    ic.checksum(),
                    "packet {i}: ICMP checksum"
                );
                let id = u16::from_be_bytes([ic.bytes5to8()[0], ic.bytes5to8()[1]]);
                (id, id, 1, None)
            }
            TransportSlice::Icmpv6(ic) => {
                s.icmp += 1;
                assert!(
                    ic.is_checksum_valid(src6.unwrap(), dst6.unwrap()),
                    "packet {i}: ICMPv6 checksum"
                );
                let id = u16::from_be_bytes([ic.bytes5to8()[0], ic.bytes5to8()[1]]);
                (id, id, 58, None)
            }
            other => panic!("packet {i}: unexpected {other:?}"),
        };
        if [80, 443].contains(&sport) || [80, 443].contains(&dport) {
            s.web += 1;
        }
        let side = sides.entry((sa, da, sport, dport, proto)).or_default();
        side.packets += 1;
        if let Some((seq, adv, syn)) = seq_adv {
            // Sequence numbers advance by exactly the payload (+1 for SYN/FIN): no gaps.
            if let Some(want) = side.next_seq {
                assert!(!syn, "packet {i}: second SYN in a flow");
                assert_eq!(seq, want, "packet {i}: sequence gap");
            }
            side.next_seq = Some(seq.wrapping_add(adv));
        }
        if let Some(id) = ident {
            if let Some(want) = side.next_ident {
                assert_eq!(id, want, "packet {i}: IPv4 ident does not increment");
            }
            side.next_ident = Some(id.wrapping_add(1));
        }
    }
    // Pair the two directions of each flow.
    for (k, fwd) in &sides {
        let rev: Key = (k.1.clone(), k.0.clone(), k.3, k.2, k.4);
        let back = sides.get(&rev).map_or(0, |x| x.packets);
        if k.0 < k.1 || (k.0 == k.1 && k.2 <= k.3) || back == 0 {
            s.flows += 1;
            if fwd.packets + back >= 2 {
                s.multi += 1;
                if back > 0 {
                    s.both_ways += 1;
                }
            }
        }
    }
    s
}

fn assert_profile(s: &Stats, o: &GenOptions, mean: f64) {
    assert_eq!(s.n, o.count, "count");
    assert!(
        (s.mean() - mean).abs() <= mean * 0.01,
        "mean {} vs {mean}",
        s.mean()
    );
    assert!(
        (s.share(s.tcp) - o.tcp_share).abs() <= 0.015,
        "tcp {}",
        s.share(s.tcp)
    );
    assert!(
        (s.share(s.udp) - o.udp_share).abs() <= 0.015,
        "udp {}",
        s.share(s.udp)
    );
    assert!(
        (s.share(s.web) - o.web_share).abs() <= 0.02,
        "web {}",
        s.share(s.web)
    );
    // Every flow with two packets or more is seen both ways (SYN/SYN-ACK, request/reply).
    assert_eq!(s.multi, s.both_ways, "one-way flows: {s:?}");
    assert!(s.both_ways > 0);
    assert!(s.fins > 0 && s.data > 0, "{s:?}");
}

#[test]
fn smallflows_full_size() {
    let o = GenOptions::profile(Profile::SmallFlows);
    let s = check(&generate(&o).unwrap());
    assert_profile(&s, &o, 646.0);
    assert_eq!(s.n, 14_261);
    // ~1,209 flows (a few mice may have a single packet: still one flow each).
    assert!(s.flows > 1_000 && s.flows <= 1_209, "{s:?}");
}

#[test]
fn bigflows_100k() {
    let o = GenOptions {
        count: 100_000,
        flows: 5_000,
        ..GenOptions::profile(Profile::BigFlows)
    };
    let s = check(&generate(&o).unwrap());
    assert_profile(&s, &o, 449.0);
}

#[test]
fn foursics_200k() {
    let o = GenOptions {
        count: 200_000,
        ..GenOptions::profile(Profile::FourSics)
    };
    let t = generate(&o).unwrap();
    let s = check(&t);
    assert_profile(&s, &o, 76.0);
    // ICS: most packets on Modbus/S7/DNP3 ports.
    let ics = (0..t.len())
        .filter(|&i| {
            let p = t.packet(i);
            let ports = [
                u16::from_be_bytes([p[34], p[35]]),
                u16::from_be_bytes([p[36], p[37]]),
            ];
            ports.iter().any(|x| [502, 102, 20000, 44818].contains(x))
        })
        .count();
    assert!(ics as f64 / t.len() as f64 > 0.8, "ICS share {ics}");
}

#[test]
fn profile_names_parse() {
    assert_eq!("smallflows".parse::<Profile>(), Ok(Profile::SmallFlows));
    assert_eq!("bigflows".parse::<Profile>(), Ok(Profile::BigFlows));
    assert_eq!("4sics".parse::<Profile>(), Ok(Profile::FourSics));
    assert!("tinyflows"
        .parse::<Profile>()
        .unwrap_err()
        .contains("smallflows"));
    assert_eq!(GenOptions::profile(Profile::BigFlows).count, 791_615);
    assert_eq!(GenOptions::profile(Profile::FourSics).count, 2_274_747);
}

#[test]
fn deterministic_by_seed() {
    let o = GenOptions {
        count: 20_000,
        ..GenOptions::profile(Profile::BigFlows)
    };
    let a = generate(&o).unwrap();
    let b = generate(&o).unwrap();
    assert_eq!(a.raw().0, b.raw().0);
    assert_eq!(a.records(), b.records());
    let c = generate(&GenOptions { seed: 2, ..o }).unwrap();
    assert_ne!(a.raw().0, c.raw().0);
}

#[test]
fn fixed_sizes_are_exact() {
    for size in [60, 64, 128, 1514, 9000] {
        let o = GenOptions {
            count: 3_000,
            sizes: SizeModel::Fixed(size),
            flows: 100,
            ..GenOptions::profile(Profile::SmallFlows)
        };
        let t = generate(&o).unwrap();
        assert!(
            (0..t.len()).all(|i| t.packet(i).len() == size),
            "size {size}"
        );
        check(&t);
    }
}

#[test]
fn mix_and_averages() {
    let o = GenOptions {
        count: 20_000,
        sizes: SizeModel::Mix(vec![(64, 1.0), (1500, 1.0)]),
        ..GenOptions::profile(Profile::SmallFlows)
    };
    let t = generate(&o).unwrap();
    let s = check(&t);
    let small = (0..t.len()).filter(|&i| t.packet(i).len() == 64).count();
    let big = (0..t.len()).filter(|&i| t.packet(i).len() == 1500).count();
    // SYN/SYN-ACK/last ACK keep natural sizes under a mix; the rest follow the weights.
    assert!(small + big > t.len() * 8 / 10);
    assert!(
        (small as f64 / big as f64 - 1.0).abs() < 0.1,
        "{small} {big}"
    );
    assert!(s.mean() > 600.0 && s.mean() < 800.0);
    // Handshakes keep natural sizes, so jumbo means need few flows to be reachable.
    for (mean, flows) in [
        (60, 1209),
        (63, 1209),
        (100, 1209),
        (300, 1209),
        (900, 1209),
        (1400, 1209),
        (1480, 1209),
        (3000, 1209),
        (8999, 10),
        (9000, 1),
    ] {
        let o = GenOptions {
            count: 10_000,
            flows,
            sizes: SizeModel::Average(mean),
            ..GenOptions::profile(Profile::SmallFlows)
        };
        let s = check(&generate(&o).unwrap());
        assert!(
            (s.mean() - mean as f64).abs() <= mean as f64 * 0.01,
            "average {mean}: got {}",
            s.mean()
        );
    }
}

#[test]
fn ipv6_and_quic_shares() {
    let o = GenOptions {
        count: 30_000,
        flows: 1_500,
        tcp_share: 0.5,
        udp_share: 0.4,
        web_share: 0.7,
        ipv6_share: 0.3,
        sizes: SizeModel::Average(500),
        ..GenOptions::profile(Profile::BigFlows)
    };
    let s = check(&generate(&o).unwrap());
    assert!((s.share(s.v6) - 0.3).abs() < 0.03, "v6 {}", s.share(s.v6));
    assert!(
        (s.share(s.web) - 0.7).abs() < 0.02,
        "web {}",
        s.share(s.web)
    );
    assert!((s.share(s.tcp) - 0.5).abs() < 0.015);
    assert!((s.share(s.icmp) - 0.1).abs() < 0.015);
    assert_eq!(s.multi, s.both_ways);
}

#[test]
fn tiny_traces() {
    for count in [1, 2, 3, 7] {
        for flows in [1, 2, 5] {
            let o = GenOptions {
                count,
                flows,
                hosts: 2,
                ..GenOptions::profile(Profile::SmallFlows)
            };
            let s = check(&generate(&o).unwrap());
            assert_eq!(s.n, count);
        }
    }
}

#[test]
fn bad_options_are_refused_clearly() {
    let ok = GenOptions::profile(Profile::SmallFlows);
    let cases: Vec<(GenOptions, &str)> = vec![
        (
            GenOptions {
                count: 0,
                ..ok.clone()
            },
            "count",
        ),
        (
            GenOptions {
                flows: 0,
                ..ok.clone()
            },
            "flows",
        ),
        (
            GenOptions {
                hosts: 1,
                ..ok.clone()
            },
            "hosts",
        ),
        (
            GenOptions {
                sizes: SizeModel::Fixed(59),
                ..ok.clone()
            },
            "59",
        ),
        (
            GenOptions {
                sizes: SizeModel::Fixed(9001),
                ..ok.clone()
            },
            "9001",
        ),
        (
            GenOptions {
                sizes: SizeModel::Average(40),
                ..ok.clone()
            },
            "average",
        ),
        (
            GenOptions {
                sizes: SizeModel::Mix(vec![]),
                ..ok.clone()
            },
            "empty",
        ),
        (
            GenOptions {
                sizes: SizeModel::Mix(vec![(100, -1.0)]),
                ..ok.clone()
            },
            "weight",
        ),
        (
            GenOptions {
                sizes: SizeModel::Mix(vec![(100, 0.0)]),
                ..ok.clone()
            },
            "sum",
        ),
        (
            GenOptions {
                tcp_share: 1.2,
                ..ok.clone()
            },
            "tcp_share",
        ),
        (
            GenOptions {
                udp_share: -0.1,
                ..ok.clone()
            },
            "udp_share",
        ),
        (
            GenOptions {
                ipv6_share: f64::NAN,
                ..ok.clone()
            },
            "ipv6_share",
        ),
        (
            GenOptions {
                tcp_share: 0.7,
                udp_share: 0.5,
                ..ok.clone()
            },
            "exceed",
        ),
        (
            GenOptions {
                tcp_share: 0.3,
                udp_share: 0.1,
                web_share: 0.5,
                ..ok.clone()
            },
            "web_share",
        ),
        (
            GenOptions {
                rate_pps: 0.0,
                ..ok.clone()
            },
            "rate_pps",
        ),
        (
            GenOptions {
                ports: PortMix {
                    tcp: vec![(80, 1.0)],
                    udp: vec![],
                },
                ..ok.clone()
            },
            "port",
        ),
    ];
    for (o, word) in cases {
        let e = generate(&o)
            .err()
            .unwrap_or_else(|| panic!("accepted {o:?}"));
        assert!(e.contains(word), "`{e}` should mention `{word}`");
    }
    assert!(ok.validate().is_ok());
}

/// Full-size profiles with timing: `cargo test --release --test gen -- --ignored --nocapture`.
#[test]
#[ignore]
fn full_profiles_report() {
    for p in [Profile::SmallFlows, Profile::BigFlows, Profile::FourSics] {
        let o = GenOptions::profile(p);
        let t0 = std::time::Instant::now();
        let t = generate(&o).unwrap();
        let dt = t0.elapsed();
        let s = check(&t);
        println!(
            "{p}: {} pkts in {:.3} s ({:.1} Mpps), mean {:.2} B, tcp {:.3} udp {:.3} web {:.3}, {} flows ({} both ways), span {:.0} s",
            s.n,
            dt.as_secs_f64(),
            s.n as f64 / dt.as_secs_f64() / 1e6,
            s.mean(),
            s.share(s.tcp),
            s.share(s.udp),
            s.share(s.web),
            s.flows,
            s.both_ways,
            t.span_ns() as f64 / 1e9
        );
        let mean = match o.sizes {
            SizeModel::Average(m) => m as f64,
            _ => unreachable!(),
        };
        assert_profile(&s, &o, mean);
    }
}

/// Writes a profile as pcap for outside tools (tshark, tcpdump):
/// `GEN_PCAP_DIR=/tmp cargo test --test gen dump_pcaps -- --ignored`.
#[test]
#[ignore]
fn dump_pcaps() {
    use std::io::Write;
    let dir = std::env::var("GEN_PCAP_DIR").unwrap_or_else(|_| "/tmp".into());
    for (p, count) in [
        (Profile::SmallFlows, 14_261),
        (Profile::BigFlows, 50_000),
        (Profile::FourSics, 50_000),
    ] {
        let o = GenOptions {
            count,
            ipv6_share: 0.1,
            ..GenOptions::profile(p)
        };
        let t = generate(&o).unwrap();
        let mut out = Vec::new();
        // pcap 2.4 header: magic, version, zone, sigfigs, snaplen, Ethernet.
        out.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
        out.extend_from_slice(&2u16.to_le_bytes());
        out.extend_from_slice(&4u16.to_le_bytes());
        for v in [0u32, 0, 262_144, 1] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for i in 0..t.len() {
            let r = t.record(i);
            for v in [
                (r.ts_ns / 1_000_000_000) as u32,
                (r.ts_ns % 1_000_000_000 / 1000) as u32,
                r.caplen,
                r.wire_len,
            ] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            out.extend_from_slice(t.packet(i));
        }
        let path = format!("{dir}/gen-{p}.pcap");
        std::fs::File::create(&path)
            .unwrap()
            .write_all(&out)
            .unwrap();
    }
}

#[test]
fn timestamps_follow_the_rate() {
    for rate in [50.0, 10_000.0, 400_000.0, 5_000_000.0] {
        let o = GenOptions {
            count: 50_000,
            rate_pps: rate,
            ..GenOptions::profile(Profile::FourSics)
        };
        let t = generate(&o).unwrap();
        let r = t.records();
        assert!(r.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns));
        let span = (r[r.len() - 1].ts_ns - r[0].ts_ns) as f64 / 1e9;
        let want = o.count as f64 / rate;
        assert!(
            (span / want - 1.0).abs() < 0.05,
            "rate {rate}: span {span} s vs {want} s"
        );
    }
}
