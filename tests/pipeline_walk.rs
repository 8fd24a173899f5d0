//! The header walk a program spells out runs as catena's `Layers` decode when the
//! compiler recognises it (src/nfs/pipeline/walk.rs). Switching that on must never change
//! output: each program below (the firewall and IPv4 switch, and variants whose walk
//! differs from `Layers` in one way) runs with the walk on and off over the same packets
//! (every link kind, 0–10 VLAN tags of the three tag ethertypes, IPv4 with and without
//! options, bad versions and lengths, fragments, cut at any byte), and every packet's
//! verdict, egress and bytes and every counter must be equal.

use std::collections::HashMap;

use catena::nfs::pipeline::Pipeline;
use catena::nfs::{Context, Nf};
use catena::packet::{Batch, LinkKind, Packet, Verdict, MAX_BATCH};

fn program(name: &str) -> String {
    let p = format!(
        "{}/examples/pipeline/{name}.stv",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

fn compile(src: &str, walk: bool) -> Pipeline {
    let c = catena::nfs::pipeline::compile("t.stv", src, &HashMap::new())
        .unwrap_or_else(|e| panic!("{e}"));
    Pipeline::new(c).with_walk(walk)
}

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// One packet: link kind, ingress port, bytes.
fn packet(r: &mut Rng) -> (LinkKind, u16, Vec<u8>) {
    let link = [
        LinkKind::Ethernet,
        LinkKind::Ethernet,
        LinkKind::LinuxSll,
        LinkKind::LinuxSll2,
        LinkKind::RawIp,
    ][r.below(5) as usize];
    let mut b = Vec::new();
    let ty = |r: &mut Rng| -> u16 {
        [0x0800, 0x0800, 0x0800, 0x86dd, 0x0806, 0x88cc][r.below(6) as usize]
    };
    let mut et = ty(r);
    let tags = [0, 0, 1, 2, 3, 8, 9, 10][r.below(8) as usize];
    let first = if tags > 0 {
        [0x8100u16, 0x88a8, 0x9100][r.below(3) as usize]
    } else {
        et
    };
    match link {
        LinkKind::Ethernet => {
            b.extend_from_slice(&[
                2,
                0,
                0,
                0,
                0,
                r.below(9) as u8,
                2,
                0,
                0,
                0,
                0,
                r.below(9) as u8,
            ]);
            b.extend_from_slice(&first.to_be_bytes());
        }
        LinkKind::LinuxSll => {
            b.extend_from_slice(&[0u8; 14]);
            b.extend_from_slice(&first.to_be_bytes());
        }
        LinkKind::LinuxSll2 => {
            b.extend_from_slice(&first.to_be_bytes());
            b.extend_from_slice(&[0u8; 18]);
        }
        LinkKind::RawIp => et = 0x0800,
    }
    if link != LinkKind::RawIp {
        for i in 0..tags {
            let next = if i + 1 == tags {
                et
            } else {
                [0x8100u16, 0x88a8, 0x9100][r.below(3) as usize]
            };
            b.extend_from_slice(&[0, r.below(4) as u8]);
            b.extend_from_slice(&next.to_be_bytes());
        }
    }
    let version = [4u8, 4, 4, 4, 6, 5][r.below(6) as usize];
    let ihl = [5u8, 5, 5, 6, 15, 4][r.below(6) as usize];
    let frag: u16 = [0, 0, 0, 0x2000, 0x0010][r.below(5) as usize];
    let proto = [6u8, 17, 1][r.below(3) as usize];
    let mut ip = vec![version << 4 | ihl, 0, 0, 60, 0, 1];
    ip.extend_from_slice(&frag.to_be_bytes());
    ip.extend_from_slice(&[64, proto, 0, 0, 10, 0, 0, r.below(9) as u8]);
    ip.extend_from_slice(&[10, 0, 0, r.below(9) as u8]);
    ip.resize(ihl as usize * 4, 0);
    let port = |r: &mut Rng| [80u16, 443, 53, 1234][r.below(4) as usize];
    let (sp, dp) = (port(r), port(r));
    ip.extend_from_slice(&sp.to_be_bytes());
    ip.extend_from_slice(&dp.to_be_bytes());
    ip.extend_from_slice(&[0u8; 16]);
    b.extend_from_slice(&ip);
    // Cut short at any byte now and then.
    if r.below(6) == 0 {
        let n = r.below(b.len() as u64 + 1) as usize;
        b.truncate(n);
    }
    (link, r.below(5) as u16, b)
}

/// Runs `src` with the walk on and off over the same packets; everything must be equal.
fn same_with_and_without_walk(what: &str, src: &str, expect_walk: bool) {
    let (mut on, mut off) = (compile(src, true), compile(src, false));
    assert_eq!(
        on.walk().is_some(),
        expect_walk,
        "{what}: walk {:?}",
        on.walk()
    );
    assert!(off.walk().is_none());
    let mut r = Rng(19);
    let cx = Context { ports: 5 };
    let mut passed = 0;
    for round in 0..200 {
        let pkts: Vec<_> = (0..MAX_BATCH).map(|_| packet(&mut r)).collect();
        let mk = || {
            let mut batch = Batch::new();
            for (i, (link, port, bytes)) in pkts.iter().enumerate() {
                let mut p = Packet::from_bytes(bytes);
                let m = p.meta_mut();
                m.link = *link;
                m.in_port = *port;
                m.ts_ns = (round * MAX_BATCH + i) as u64 * 1_000_000;
                batch.push(p);
            }
            batch
        };
        let (mut x, mut y) = (mk(), mk());
        on.process(&mut x, &cx);
        off.process(&mut y, &cx);
        for (k, (p, q)) in x.iter().zip(y.iter()).enumerate() {
            let (pm, qm) = (p.meta(), q.meta());
            assert_eq!(
                (pm.verdict, pm.egress, p.data()),
                (qm.verdict, qm.egress, q.data()),
                "{what}: packet {} ({:?}, {:02x?})",
                round * MAX_BATCH + k,
                pkts[k].0,
                pkts[k].2
            );
            passed += matches!(pm.verdict, Verdict::Out(_)) as usize;
        }
    }
    assert_eq!(on.stats(), off.stats(), "{what}: counters differ");
    assert!(passed > 100, "{what}: only {passed} packets passed");
}

#[test]
fn the_example_walks_are_recognised_and_change_nothing() {
    for app in ["firewall", "ipv4_switch"] {
        same_with_and_without_walk(app, &program(app), true);
    }
    // Not spelled out as a walk to IPv4: nothing to recognise.
    for app in ["mac_switch", "vlan_switch", "wire"] {
        let p = compile(&program(app), true);
        assert!(p.walk().is_none(), "{app}");
    }
}

#[test]
fn walks_that_differ_from_layers_change_nothing() {
    // The firewall walks IPv6 and ARP too.
    let w = compile(&program("firewall"), true).walk().expect("a walk");
    assert!(w.ends_with("-> ip, ip6, arp"), "{w}");
    let fw = program("firewall");
    let variants: &[(&str, &str, &str, bool)] = &[
        // Fewer tags than Layers skips: deeper stacks run the program's own walk.
        ("repeat 2", "vlan repeat 8", "vlan repeat 2", true),
        // The cooked header's ethertype elsewhere than Layers reads it.
        (
            "sll type moved",
            "layout sll { pkttype: 16; hatype: 16; halen: 16; addr: 64; type: 16; }",
            "layout sll { pkttype: 16; type: 16; halen: 16; addr: 64; hatype: 16; }",
            true,
        ),
        // One tag ethertype is not skipped: tagged Ethernet runs the program's walk.
        (
            "no 0x9100",
            "decoder eth: ethernet {\n  extract type;\n  short { drop malformed; }\n  match eth.type {\n    0x8100, 0x88a8, 0x9100 => next tag;",
            "decoder eth: ethernet {\n  extract type;\n  short { drop malformed; }\n  match eth.type {\n    0x8100, 0x88a8 => next tag;",
            true,
        ),
        // A statement before the ethertype match: not a bare walk on Ethernet.
        (
            "count first",
            "decoder eth: ethernet {\n  extract type;\n  short { drop malformed; }\n",
            "decoder eth: ethernet {\n  extract type;\n  short { drop malformed; }\n  count l2;\n",
            true,
        ),
        // The IPv4 header's length not from ihl: no walk at all.
        ("no size", "  size = ihl * 4;\n", "", false),
        // Raw IP's version 4 is not IPv4 here.
        ("raw 4 is ip6", "    4 => next ip;\n    6 => next ip6;", "    4, 6 => next ip6;", true),
        // IPv6 and ARP walks (`Layers` finds them too): routes that differ in one way.
        // ARP read as IPv6 from the tags only: tagged ARP runs the program's walk.
        (
            "tag arp is ip6",
            "    0x86dd => next ip6;\n    0x0806 => next arp;\n    _ => drop not_ipv4;\n  }\n}\n\ndecoder raw",
            "    0x86dd, 0x0806 => next ip6;\n    _ => drop not_ipv4;\n  }\n}\n\ndecoder raw",
            true,
        ),
        // Cooked v2 does not route IPv6: only the other links walk it.
        (
            "sll2 ip6 not walked",
            "  match sll2.type {\n    0x8100, 0x88a8, 0x9100 => next tag;\n    0x0800 => next ip;\n    0x86dd => next ip6;",
            "  match sll2.type {\n    0x8100, 0x88a8, 0x9100 => next tag;\n    0x0800 => next ip;\n    0x86dd => drop not_ipv4;",
            true,
        ),
        // An ARP header longer than `Layers` checks (cut-short ARP must reach `short`).
        (
            "arp 29 bytes",
            "layout arp { htype: 16;",
            "layout arp { pad: 8; htype: 16;",
            true,
        ),
        // IPv6 decoded with a peek: the offset does not move, not walked.
        ("ip6 peek", "decoder ip6: ipv6 {", "decoder ip6: ipv6 peek {", true),
        // The version check reads another field: kept, not skipped.
        (
            "ip6 checks class",
            "  extract version;\n  short { drop malformed; }\n  if ip6.version != 6 { drop malformed; }",
            "  extract version, class;\n  short { drop malformed; }\n  if ip6.class != 6 { drop malformed; }",
            true,
        ),
    ];
    for &(what, from, to, walk) in variants {
        assert!(fw.contains(from), "{what}: `{from}` not in firewall.stv");
        let src = fw.replace(from, to);
        same_with_and_without_walk(what, &src, walk);
    }
}

#[test]
fn straight_code_after_the_walk_changes_nothing() {
    // The IPv4 body and the ports header's run as straight code after the walk (see
    // `flat/tail.rs`): bodies it covers in part, or ending elsewhere than a step.
    let fw = program("firewall");
    let ip_tests = "  if ip.proto != 6 && ip.proto != 17 { drop not_tcp_udp; }\n";
    let variants: &[(&str, &str, &str)] = &[
        // More drop tests than the straight code holds: the loop runs the rest.
        (
            "five tests",
            ip_tests,
            "  if ip.ttl == 1 { drop malformed; }\n  if ip.tos == 4 { drop malformed; }\n  if ip.len < 40 { drop truncated; }\n  if ip.proto != 6 && ip.proto != 17 { drop not_tcp_udp; }\n",
        ),
        // Two tests on the ports header, one a plain drop.
        (
            "two ports tests",
            "  short { drop truncated; }\n  if l4.src in allow_ports",
            "  short { drop truncated; }\n  if l4.dst == 7 { drop port_denied; }\n  if l4.src in allow_ports",
        ),
        // No learning step at the end: a test that is no drop, then an output.
        (
            "output",
            "    learn hosts(ip.src) -> output in_port;\n    goto hosts;",
            "    if ip.ttl == 64 { goto hosts; }\n    output 1;",
        ),
        // A learn into the table keyed otherwise than the lookup: no step.
        (
            "learn dst",
            "    learn hosts(ip.src) -> output in_port;",
            "    learn hosts(ip.dst) -> output 2;",
        ),
        // A test that is not a drop first: nothing straight at all.
        (
            "count first",
            "  if ip.version != 4 { drop malformed; }\n",
            "  if ip.version != 4 { drop malformed; }\n  count ipv4;\n",
        ),
    ];
    for &(what, from, to) in variants {
        assert!(fw.contains(from), "{what}: `{from}` not in firewall.stv");
        let src = fw.replace(from, to).replace(
            "extract version, proto, frag, src, dst;",
            "extract version, ihl, tos, len, ttl, proto, frag, src, dst;",
        );
        same_with_and_without_walk(what, &src, true);
    }
}
