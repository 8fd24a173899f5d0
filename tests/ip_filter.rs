//! The IP filter (ACL) against tcpdump's BPF on real traces, against a linear scan on
//! random rules, its config errors, and a speed check.

mod common;

use std::process::Command;

use catena::io::Trace;
use catena::nfs::acl::classify::{linear, Classifier, Key};
use catena::nfs::acl::{
    packed, packed_key, packet_key, parse_rules, KeyMask, Packed, Rule, VerdictCache,
};
use catena::packet::Packet;
use common::*;
use proptest::prelude::*;

/// Ethernet traces with VLANs, IPv6, ICMP/ICMPv6 and IPv4/IPv6 fragments among them.
const TRACES: &[&str] = &[
    "bench/ndpi-ether-merged.pcap",
    "ndpi/pcap/dns_fragmented.pcap",
    "ndpi/pcap/ip_fragmented_garbage.pcap",
    "ndpi/pcap/icmp-tunnel.pcap",
    "ndpi/pcap/1kxun.pcap",
];

/// A BPF expression, with the constants kept apart so composition can simplify.
#[derive(Clone, Debug)]
enum Bpf {
    True,
    False,
    E(String),
}

/// The BPF of an ordered rule list: `allow A; deny B; allow C; default D` passes
/// `A or (not B and (C or D))`.
fn compose(rules: &[(&str, &str)], default_allow: bool) -> Bpf {
    let mut acc = if default_allow { Bpf::True } else { Bpf::False };
    for (rule, bpf) in rules.iter().rev() {
        let allow = rule.starts_with("allow");
        let r = if bpf.is_empty() {
            Bpf::True
        } else {
            Bpf::E(format!("({bpf})"))
        };
        acc = match (allow, r, acc) {
            (true, Bpf::True, _) => Bpf::True,
            (true, _, Bpf::True) => Bpf::True,
            (true, r, Bpf::False) => r,
            (true, Bpf::E(r), Bpf::E(a)) => Bpf::E(format!("({r} or {a})")),
            (false, Bpf::True, _) => Bpf::False,
            (false, _, Bpf::False) => Bpf::False,
            (false, Bpf::E(r), Bpf::True) => Bpf::E(format!("(not {r})")),
            (false, Bpf::E(r), Bpf::E(a)) => Bpf::E(format!("(not {r} and {a})")),
            (_, Bpf::False, a) => a,
        };
    }
    acc
}

/// tcpdump does not look inside VLAN tags unless told (`vlan` shifts later offsets), so
/// the filter is spelled out for untagged frames and for one and two tags.
fn with_vlans(e: &str) -> String {
    let untagged = |o: u32| {
        format!("not (ether[{o}:2] = 0x8100 or ether[{o}:2] = 0x88a8 or ether[{o}:2] = 0x9100)")
    };
    format!(
        "({} and {e}) or (vlan and (({} and {e}) or (vlan and {e})))",
        untagged(12),
        untagged(16)
    )
}

/// Each case: rules with the BPF of each (empty: `all`), and the default action.
type Case = (&'static [(&'static str, &'static str)], bool);

const CASES: &[Case] = &[
    (&[("allow tcp", "tcp")], false),
    (&[("allow udp dst port 53", "udp dst port 53")], false),
    (&[("allow port 80 or 443", "port 80 or port 443")], false),
    (
        &[("allow src net 192.168.0.0/16", "ip src net 192.168.0.0/16")],
        false,
    ),
    (&[("allow ip6", "ip6")], false),
    (&[("allow icmp", "icmp")], false),
    (
        &[(
            "allow icmp type echo-request or echo-reply",
            "icmp[0] = 8 or icmp[0] = 0",
        )],
        false,
    ),
    (&[("allow not ip", "not ip")], false),
    (
        &[("allow portrange 1000-2000", "portrange 1000-2000")],
        false,
    ),
    (
        &[(
            "allow tcp flags syn,!ack",
            "(ip and tcp[13] & 0x12 = 0x02) or (ip6 and ip6[6] = 6 and ip6[53] & 0x12 = 0x02)",
        )],
        false,
    ),
    (&[("allow ip6 and udp", "ip6 and udp")], false),
    (&[("allow icmp6", "icmp6")], false),
    (&[("allow not port 80", "not port 80")], false),
    (
        &[("allow host 95.237.48.208", "ip host 95.237.48.208")],
        false,
    ),
    (
        &[("allow dst net 2a00:1450::/32", "ip6 dst net 2a00:1450::/32")],
        false,
    ),
    (
        &[(
            "allow proto 17 and not (src port 53 or 123)",
            "proto 17 and not (src port 53 or src port 123)",
        )],
        false,
    ),
    (
        &[(
            "allow icmp6 type neighbor-solicitation or neighbor-advertisement",
            "ip6 and ip6[6] = 58 and (ip6[40] = 135 or ip6[40] = 136)",
        )],
        false,
    ),
    (
        &[
            ("deny src net 10.0.0.0/8", "ip src net 10.0.0.0/8"),
            ("allow tcp port 80 or 443", "tcp port 80 or tcp port 443"),
            ("allow udp port domain", "udp port 53"),
        ],
        false,
    ),
    (
        &[
            ("allow icmp", "icmp"),
            ("deny ip6", "ip6"),
            ("allow udp", "udp"),
        ],
        false,
    ),
    (
        &[
            (
                "deny tcp flags rst",
                "(ip and tcp[13] & 4 != 0) or (ip6 and ip6[6] = 6 and ip6[53] & 4 != 0)",
            ),
            ("allow tcp", "tcp"),
        ],
        false,
    ),
    (&[("deny port 53", "port 53"), ("deny icmp", "icmp")], true),
    (
        &[
            (
                "allow host 192.168.2.100 and port 443",
                "ip host 192.168.2.100 and port 443",
            ),
            ("deny host 192.168.2.100", "ip host 192.168.2.100"),
            ("allow all", ""),
        ],
        false,
    ),
    (
        &[
            ("deny ip6 and not icmp6", "ip6 and not icmp6"),
            ("allow not tcp", "not tcp"),
            ("deny all", ""),
        ],
        true,
    ),
    (
        &[
            ("allow dst port 80", "dst port 80"),
            ("deny src port 80", "src port 80"),
            ("allow tcp and portrange 0-1023", "tcp and portrange 0-1023"),
            ("deny udp", "udp"),
            ("allow all", ""),
        ],
        false,
    ),
    (
        &[
            (
                "deny src host 172.16.0.8 or 172.16.42.216",
                "ip src host 172.16.0.8 or ip src host 172.16.42.216",
            ),
            (
                "allow not (net 172.16.0.0/12) and tcp",
                "not (ip net 172.16.0.0/12) and tcp",
            ),
            ("allow ip6 and not port 443", "ip6 and not port 443"),
        ],
        false,
    ),
];

fn chain(rules: &[&str], default_allow: bool) -> String {
    let list: Vec<String> = rules.iter().map(|r| format!("{r:?}")).collect();
    format!(
        "[[nf]]\nname = \"acl\"\nkind = \"ip_filter\"\ndefault = \"{}\"\nrules = [{}]\n",
        if default_allow { "allow" } else { "deny" },
        list.join(", ")
    )
}

#[test]
fn ip_filter_equals_tcpdump_on_real_traces() {
    require("tcpdump");
    assert!(CASES.len() >= 20);
    let dir = tempdir();
    let (mut compared, mut passed) = (0usize, 0usize);
    for (case, (rules, default_allow)) in CASES.iter().enumerate() {
        let texts: Vec<&str> = rules.iter().map(|r| r.0).collect();
        let cfg = chain(&texts, *default_allow);
        let bpf = compose(rules, *default_allow);
        for rel in TRACES {
            let src = dataset(rel);
            let trace = Trace::open(&src).unwrap();
            let ours = dir.path().join("ours.pcap");
            let s = run_chain(&cfg, &trace, Some(&ours));
            assert_eq!(s.packets_in, s.packets_out + s.packets_dropped);
            let expected = match &bpf {
                Bpf::False => Vec::new(),
                Bpf::True => packets(&src),
                Bpf::E(e) => {
                    let theirs = dir.path().join("theirs.pcap");
                    let o = Command::new("tcpdump")
                        .arg("-r")
                        .arg(&src)
                        .arg("-w")
                        .arg(&theirs)
                        .arg(with_vlans(e))
                        .output()
                        .unwrap();
                    assert!(
                        o.status.success(),
                        "tcpdump {e}: {}",
                        String::from_utf8_lossy(&o.stderr)
                    );
                    packets(&theirs)
                }
            };
            let got = packets(&ours);
            if got != expected {
                let first = got
                    .iter()
                    .zip(&expected)
                    .position(|(a, b)| a != b)
                    .unwrap_or(got.len().min(expected.len()));
                panic!(
                    "case {case} {texts:?} on {rel}: catena passed {}, tcpdump {} ({bpf:?}); first difference at forwarded packet {first}",
                    got.len(),
                    expected.len()
                );
            }
            assert_eq!(s.packets_out as usize, got.len());
            compared += trace.len();
            passed += got.len();
        }
    }
    assert!(compared > 1_000_000, "only {compared} packets compared");
    assert!(passed > 300_000, "only {passed} packets passed in all");
    println!("{compared} packets compared, {passed} passed");
}

/// Random ordered rule sets, each rule written both ways, against tcpdump: ordering over
/// many rules, negations and mixed fields on real traffic.
#[test]
fn random_rule_sets_equal_tcpdump() {
    require("tcpdump");
    // A tiny LCG: deterministic without a seed file.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut rnd = move |n: u64| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) % n
    };
    let prims: &[(&str, &str)] = &[
        ("tcp", "tcp"),
        ("udp", "udp"),
        ("icmp", "icmp"),
        ("ip6", "ip6"),
        ("(tcp or udp)", "(tcp or udp)"),
        ("src net 192.168.2.0/24", "ip src net 192.168.2.0/24"),
        ("dst net 172.16.0.0/12", "ip dst net 172.16.0.0/12"),
        ("net 95.237.48.0/24", "ip net 95.237.48.0/24"),
        ("host 192.168.2.100", "ip host 192.168.2.100"),
        ("net 2a00:1450::/32", "ip6 net 2a00:1450::/32"),
        ("port 443", "port 443"),
        ("port 80 or 8080", "(port 80 or port 8080)"),
        ("dst port 53", "dst port 53"),
        ("src portrange 1024-49151", "src portrange 1024-49151"),
        ("port 5353", "port 5353"),
        ("icmp type echo-request", "icmp[0] = 8"),
        (
            "tcp flags syn",
            "((ip and tcp[13] & 2 != 0) or (ip6 and ip6[6] = 6 and ip6[53] & 2 != 0))",
        ),
        (
            "tcp flags fin",
            "((ip and tcp[13] & 1 != 0) or (ip6 and ip6[6] = 6 and ip6[53] & 1 != 0))",
        ),
    ];
    let dir = tempdir();
    let mut compared = 0;
    for set in 0..12 {
        let n = 5 + rnd(36) as usize;
        let mut rules: Vec<(String, String)> = Vec::new();
        for _ in 0..n {
            let allow = rnd(2) == 0;
            let (mut text, mut bpf) =
                (if allow { "allow" } else { "deny" }.to_string(), Vec::new());
            for _ in 0..1 + rnd(3) {
                let (t, b) = prims[rnd(prims.len() as u64) as usize];
                if rnd(4) == 0 {
                    let t = if t.starts_with('(') {
                        format!("not {t}")
                    } else {
                        format!("not ({t})")
                    };
                    text.push_str(&format!(" {t}"));
                    bpf.push(format!("not ({b})"));
                } else {
                    text.push_str(&format!(" {t}"));
                    bpf.push(format!("({b})"));
                }
            }
            rules.push((text, bpf.join(" and ")));
        }
        let default_allow = rnd(2) == 0;
        let pairs: Vec<(&str, &str)> = rules
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        let texts: Vec<&str> = pairs.iter().map(|p| p.0).collect();
        let cfg = chain(&texts, default_allow);
        let bpf = compose(&pairs, default_allow);
        for rel in &TRACES[..3] {
            let src = dataset(rel);
            let trace = Trace::open(&src).unwrap();
            let ours = dir.path().join("ours.pcap");
            run_chain(&cfg, &trace, Some(&ours));
            let expected = match &bpf {
                Bpf::False => Vec::new(),
                Bpf::True => packets(&src),
                Bpf::E(e) => {
                    let theirs = dir.path().join("theirs.pcap");
                    let o = Command::new("tcpdump")
                        .arg("-r")
                        .arg(&src)
                        .arg("-w")
                        .arg(&theirs)
                        .arg(with_vlans(e))
                        .output()
                        .unwrap();
                    assert!(
                        o.status.success(),
                        "tcpdump: {}",
                        String::from_utf8_lossy(&o.stderr)
                    );
                    packets(&theirs)
                }
            };
            let got = packets(&ours);
            assert!(
                got == expected,
                "set {set} on {rel}: catena passed {}, tcpdump {}\nrules: {texts:#?}",
                got.len(),
                expected.len()
            );
            compared += trace.len();
        }
    }
    assert!(compared > 1_000_000, "only {compared} packets compared");
}

/// Random keys biased to hit rule values.
fn key_strategy() -> impl Strategy<Value = Key> {
    let addr4 = prop_oneof![
        Just(0x0a00_0001u32),
        Just(0x0a01_0203),
        Just(0xc0a8_0101),
        Just(0xc0a8_0264),
        any::<u32>()
    ];
    let port = prop_oneof![
        Just(53u16),
        Just(80),
        Just(443),
        Just(1024),
        Just(1500),
        any::<u16>()
    ];
    (
        0u8..4,
        prop_oneof![Just(6u8), Just(17), Just(1), Just(58), any::<u8>()],
        (addr4.clone(), addr4),
        (
            any::<u128>(),
            prop_oneof![Just(0x2001_0db8u128 << 96), any::<u128>()],
        ),
        proptest::option::of((port.clone(), port)),
        proptest::option::of(any::<u8>()),
        proptest::option::of(any::<u8>()),
    )
        .prop_map(|(fam, proto, (s4, d4), (s6, d6), ports, icmp, flags)| {
            let mut k = Key {
                proto: 512,
                ..Key::default()
            };
            match fam {
                0 => {}
                1 | 2 => {
                    k.proto = proto as u16;
                    k.src4 = Some(s4);
                    k.dst4 = Some(d4);
                }
                _ => {
                    k.proto = 256 + proto as u16;
                    k.src6 = Some(s6);
                    k.dst6 = Some(d6);
                }
            }
            if fam != 0 {
                if let Some((s, d)) = ports {
                    k.sport = Some(s);
                    k.dport = Some(d);
                }
                k.flags = flags;
                k.icmp = icmp.map(|t| t as u16 + if fam == 3 { 256 } else { 0 });
            }
            k
        })
}

fn rule_strategy() -> impl Strategy<Value = String> {
    let prim = prop_oneof![
        Just("tcp".to_string()),
        Just("udp".to_string()),
        Just("icmp".to_string()),
        Just("ip".to_string()),
        Just("ip6".to_string()),
        Just("(tcp or udp)".to_string()),
        (0u8..4).prop_map(|b| format!("src net 10.{b}.0.0/16")),
        (0u8..4).prop_map(|b| format!("dst host 192.168.{b}.1")),
        (0u8..255).prop_map(|b| format!("net 192.168.{b}.0/24")),
        Just("host 10.0.0.1".to_string()),
        Just("net 2001:db8::/32".to_string()),
        Just("src net ::/0".to_string()),
        prop_oneof![Just(53u16), Just(80), Just(443), 0u16..2000].prop_map(|p| format!("port {p}")),
        (0u16..2000).prop_map(|p| format!("dst port {p} or {}", p + 1)),
        (0u16..2000, 0u16..600).prop_map(|(a, n)| format!("src portrange {a}-{}", a + n)),
        (0u8..20).prop_map(|t| format!("icmp type {t}")),
        Just("icmp6 type echo-request".to_string()),
        Just("tcp flags syn,!ack".to_string()),
        Just("tcp flags rst".to_string()),
    ];
    (
        any::<bool>(),
        proptest::collection::vec((any::<bool>(), prim), 1..4),
    )
        .prop_map(|(allow, prims)| {
            let mut s = if allow { "allow" } else { "deny" }.to_string();
            for (neg, p) in prims {
                s.push(' ');
                if neg && p.starts_with('(') {
                    s.push_str(&format!("not {p}"));
                } else if neg {
                    s.push_str(&format!("not ({p})"));
                } else {
                    s.push_str(&p);
                }
            }
            s
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn classifier_agrees_with_a_linear_scan(
        texts in proptest::collection::vec(rule_strategy(), 1..1500),
        keys in proptest::collection::vec(key_strategy(), 400),
    ) {
        let rules: Vec<Rule> = parse_rules(texts.iter().map(|s| s.as_str())).unwrap();
        let c = Classifier::new(&rules);
        // Two buckets: keys collide and evict each other all the time.
        let mut cache = VerdictCache::new(2);
        for k in keys.iter().chain(&keys) {
            let want = linear(&rules, &k.values());
            prop_assert_eq!(c.classify(k), want, "{:?}", k);
            // The verdict cache keys on the constrained fields only.
            prop_assert_eq!(c.classify(&c.relevant(k)), want, "relevant {:?}", k);
            if let Some(pk) = VerdictCache::pack(&c.relevant(k)) {
                let v = want.unwrap_or(u32::MAX);
                match cache.get(pk) {
                    Some(got) => prop_assert_eq!(got, v, "cached {:?}", k),
                    None => cache.put(pk, v),
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Any token soup parses or fails with a one-line reason; never a panic.
    #[test]
    fn parser_never_panics(toks in proptest::collection::vec(prop_oneof![
        Just("allow"), Just("deny"), Just("not"), Just("!"), Just("and"), Just("or"),
        Just("("), Just(")"), Just("tcp"), Just("udp"), Just("icmp"), Just("icmp6"),
        Just("ip"), Just("ip6"), Just("proto"), Just("src"), Just("dst"), Just("host"),
        Just("net"), Just("port"), Just("portrange"), Just("type"), Just("flags"),
        Just("80"), Just("1-2"), Just("10.0.0.0/8"), Just("::1"), Just("syn,!ack"),
        Just("echo-request"), Just("all"), Just("70000"), Just("x"), Just("#"),
    ], 0..12)) {
        let line = toks.join(" ");
        if let Err(e) = Rule::parse(&line) {
            prop_assert!(!e.contains('\n') && !e.is_empty());
        }
    }
}

/// The hot path's key, packed from the bytes under the classifier's mask, equals the
/// packed relevant [`Key`] on every packet of the real traces (VLANs, IPv6, ICMP,
/// fragments, truncation), and a tiny cache keyed on it returns what classifying does.
#[test]
fn packed_keys_and_a_colliding_cache_agree_with_the_classifier() {
    let sets: &[&[&str]] = &[
        &[],
        &["allow tcp dst port 80", "deny src net 10.0.0.0/8"],
        &["allow icmp type echo-request or echo-reply"],
        &["deny udp src port 53", "allow icmp6 type echo-request"],
        &["deny tcp flags syn,!ack", "allow dst port 443"],
        &[
            "deny net 2001:db8::/32",
            "allow ip6 and port 53",
            "allow not ip",
        ],
        &[
            "deny src portrange 1000-2000 and icmp type 3",
            "allow dst host 192.168.1.1",
        ],
    ];
    let mut keys = 0usize;
    for texts in sets {
        let rules = parse_rules(texts.iter().copied()).unwrap();
        let c = Classifier::new(&rules);
        let m = KeyMask::new(&c);
        let mut cache = VerdictCache::new(4);
        for rel in TRACES {
            let trace = Trace::open(&dataset(rel)).unwrap();
            for i in 0..trace.len() {
                let mut p = Packet::from_bytes(trace.packet(i));
                // Unparsed (the commonest frames are read without parsing), then parsed.
                let got = packed(&m, &mut p);
                let l = p.layers();
                assert_eq!(got, packed_key(&m, &l, p.data()), "packet {i} of {rel}");
                let k = packet_key(&mut p);
                let want = match k.map(|k| VerdictCache::pack(&c.relevant(&k))) {
                    None => Packed::Malformed,
                    Some(None) => Packed::Uncached,
                    Some(Some((a, b))) => Packed::Key(a, b),
                };
                assert_eq!(got, want, "{texts:?} packet {i} of {rel}");
                if let (Packed::Key(a, b), Some(k)) = (got, k) {
                    keys += 1;
                    let v = c.classify(&k).unwrap_or(u32::MAX);
                    match cache.get((a, b)) {
                        Some(cached) => assert_eq!(cached, v, "{texts:?} packet {i} of {rel}"),
                        None => cache.put((a, b), v),
                    }
                }
            }
        }
    }
    assert!(keys > 500_000, "{keys} keys");
}

/// The unparsed fast path's test of bytes 12..22 (untagged IPv4, IHL 5, no MF, offset
/// 0; DF and the reserved bit free) on literal frames that sit on each side of it: every
/// flags/offset bit, other IHLs and versions, other ethertypes, frames shorter than the
/// TCP flags. The key must be the parsed path's whichever way the test goes.
#[test]
fn the_plain_ipv4_test_agrees_with_parsing_on_every_flag_and_offset_bit() {
    let rules = parse_rules(
        [
            "deny ip frag",
            "deny tcp flags syn",
            "allow tcp dst port 80",
            "allow udp src port 53",
            "allow icmp type 8",
            "allow src net 10.0.0.0/8",
        ]
        .iter()
        .copied(),
    )
    .unwrap();
    let m = KeyMask::new(&Classifier::new(&rules));
    let mut frame = vec![0u8; 14 + 24 + 20];
    frame[12] = 0x08;
    frame[14 + 12..14 + 16].copy_from_slice(&[10, 1, 2, 3]);
    frame[14 + 16..14 + 20].copy_from_slice(&[192, 0, 2, 9]);
    let mut checked = 0;
    for ethertype in [[0x08, 0x00], [0x08, 0x06], [0x81, 0x00], [0x00, 0x08]] {
        for vihl in [0x45u8, 0x46, 0x44, 0x55, 0x65] {
            for flags in [0x00u8, 0x40, 0x80, 0x20, 0x01, 0x1f, 0xc0, 0x60] {
                for offset in [0x00u8, 0x01, 0x80] {
                    for (proto, len) in [(6u8, 58usize), (17, 58), (1, 58), (6, 40), (47, 58)] {
                        let mut f = frame.clone();
                        f[12..14].copy_from_slice(&ethertype);
                        f[14] = vihl;
                        f[14 + 6] = flags;
                        f[14 + 7] = offset;
                        f[14 + 9] = proto;
                        // Ports (or type/code) and TCP flags at both IHLs' offsets.
                        for t in [34, 38] {
                            f[t..t + 4].copy_from_slice(&[0x30, 0x39, 0x00, 0x50]);
                            f[t + 13] = 0x12;
                        }
                        f.truncate(len);
                        let mut p = Packet::from_bytes(&f);
                        let got = packed(&m, &mut p);
                        let l = p.layers();
                        assert_eq!(
                            got,
                            packed_key(&m, &l, p.data()),
                            "ethertype {ethertype:02x?} version/IHL {vihl:#x} flags {flags:#x} offset {offset:#x} proto {proto} length {len}"
                        );
                        checked += 1;
                    }
                }
            }
        }
    }
    assert_eq!(checked, 4 * 5 * 8 * 3 * 5);
}

#[test]
fn every_capture_runs_through_an_acl_without_panic() {
    let chain = chain(
        &[
            "deny src net 10.0.0.0/8 and not tcp flags syn",
            "allow tcp dst port 80 or 443",
            "allow icmp type echo-request or echo-reply",
            "deny ip6 and not (port 53)",
            "allow udp portrange 1000-2000",
            "allow not ip",
        ],
        false,
    );
    let (mut ok, mut packets) = (0, 0u64);
    for p in all_captures() {
        if let Ok(t) = Trace::open(&p) {
            let s = run_chain(&chain, &t, None);
            assert_eq!(
                s.packets_in,
                s.packets_out + s.packets_dropped,
                "{}",
                p.display()
            );
            packets += s.packets_in;
            ok += 1;
        }
    }
    assert!(
        ok > 1300 && packets > 200_000,
        "{ok} captures, {packets} packets"
    );
}

fn check_err(chain_text: &str, want: &str) {
    let cfg = catena::runtime::ChainConfig::parse(chain_text, "t.toml").expect("config");
    let err = match catena::runtime::Chain::from_config(&cfg) {
        Ok(_) => panic!("accepted: {chain_text}"),
        Err(e) => e.to_string(),
    };
    assert!(!err.contains('\n'), "{err}");
    assert!(err.contains(want), "{err:?} does not contain {want:?}");
}

#[test]
fn config_errors_name_the_rule_line_and_reason() {
    let dir = tempdir();
    let f = dir.path().join("acl.txt");
    std::fs::write(
        &f,
        "# web\nallow tcp port 80\n\ndeny net 10.0.0.0/8\nallow prot 6\n",
    )
    .unwrap();
    let file = f.display().to_string();
    check_err(
        &format!("[[nf]]\nname = \"acl\"\nkind = \"ip_filter\"\nrules_file = \"{file}\"\n"),
        &format!("nf `acl`: rule 3 (line 5 of {file}): unknown keyword `prot`"),
    );
    let inline = |r: &str| chain(&["allow udp", r], false);
    check_err(
        &inline("deny src net 10.0.0.0/33"),
        "nf `acl`: rule 2: bad prefix `10.0.0.0/33`: length must be 0..=32",
    );
    check_err(
        &inline("allow dst port 65536"),
        "nf `acl`: rule 2: port 65536 is out of range 0..=65535",
    );
    check_err(
        &inline("allow icmp type echo-requst"),
        "nf `acl`: rule 2: unknown ICMP type `echo-requst`",
    );
    check_err(
        "[[nf]]\nname = \"acl\"\nkind = \"ip_filter\"\ndefault = \"maybe\"\n",
        "nf `acl`: `default` = \"maybe\": use \"deny\" or \"allow\"",
    );
    check_err(
        "[[nf]]\nname = \"acl\"\nkind = \"ip_filter\"\nrules = [1]\n",
        "nf `acl`: `rules`: item 1 is not a string",
    );
    check_err(
        "[[nf]]\nname = \"acl\"\nkind = \"ip_filter\"\nrules_file = \"/nonexistent/acl.txt\"\n",
        "nf `acl`: rules_file `/nonexistent/acl.txt`: ",
    );
}

#[test]
fn rules_file_and_inline_rules_run_in_order() {
    let dir = tempdir();
    let f = dir.path().join("acl.txt");
    std::fs::write(&f, "allow udp   # then the file\n").unwrap();
    let cfg = format!(
        "[[nf]]\nname = \"acl\"\nkind = \"ip_filter\"\nrules = [\"deny udp port 53\"]\nrules_file = \"{}\"\n",
        f.display()
    );
    let trace = Trace::open(&dataset("bench/ndpi-ether-merged.pcap")).unwrap();
    let s = run_chain(&cfg, &trace, None);
    let nf = &s.nfs[0];
    let stat = |k: &str| nf.stats.iter().find(|(n, _)| n == k).map(|x| x.1);
    assert_eq!(stat("rules"), Some(2));
    assert!(stat("rule 1").unwrap() > 0 && stat("rule 2").unwrap() > 0);
    assert_eq!(stat("rule 2").unwrap(), s.packets_out);
}
