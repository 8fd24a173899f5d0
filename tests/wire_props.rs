//! Property tests: packets built by etherparse (an independent implementation) are parsed
//! with our views and every field must match etherparse's own parse; checksums must
//! verify; incremental rewrites must keep them valid; arbitrary bytes never panic.

use catena::packet::checksum;
use catena::packet::wire::{
    ethertype, ip_proto, ipv6, Arp, Ethernet, Icmp, Icmpv6, Ipv4, Ipv6, Tcp, Udp, Vlan,
};
use etherparse::{
    IpDscp, IpEcn, IpFragOffset, IpHeaders, IpNumber, Ipv4Header, Ipv4Options, Ipv6Extensions,
    Ipv6FlowLabel, Ipv6Header, Ipv6RawExtHeader, LinkExtSlice, LinkSlice, NetSlice, PacketBuilder,
    SingleVlanHeader, SlicedPacket, TcpHeader, TransportSlice, VlanHeader, VlanId, VlanPcp,
};
use proptest::prelude::*;

/// Everything random about one packet; fields are derived from `e` so one strategy covers
/// all protocols.
#[derive(Debug, Clone)]
struct Spec {
    vlans: u8,
    v6: bool,
    l4: u8,
    e: [u8; 32],
    a: [u8; 32],
    payload: Vec<u8>,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        0u8..3,
        any::<bool>(),
        0u8..3,
        any::<[u8; 32]>(),
        any::<[u8; 32]>(),
        proptest::collection::vec(any::<u8>(), 0..200),
    )
        .prop_map(|(vlans, v6, l4, e, a, payload)| Spec {
            vlans,
            v6,
            l4,
            e,
            a,
            payload,
        })
}

fn u16at(e: &[u8], i: usize) -> u16 {
    u16::from_be_bytes([e[i], e[i + 1]])
}

fn u32at(e: &[u8], i: usize) -> u32 {
    u32::from_be_bytes([e[i], e[i + 1], e[i + 2], e[i + 3]])
}

fn vlan_header(e: &[u8]) -> SingleVlanHeader {
    SingleVlanHeader {
        pcp: VlanPcp::try_new(e[0] & 7).unwrap(),
        drop_eligible_indicator: e[1] & 1 != 0,
        vlan_id: VlanId::try_new(u16at(e, 2) & 0x0fff).unwrap(),
        ether_type: etherparse::EtherType(0), // filled in by the builder
    }
}

/// Builds the packet described by `s`.
fn build(s: &Spec) -> Vec<u8> {
    let e = &s.e;
    let a = &s.a;
    let mut src = [0u8; 6];
    src.copy_from_slice(&a[0..6]);
    let mut dst = [0u8; 6];
    dst.copy_from_slice(&a[6..12]);
    let eth = PacketBuilder::ethernet2(src, dst);
    let ip = if s.v6 {
        let mut exts = Ipv6Extensions::default();
        // Extension headers for the walker: hop-by-hop and/or destination options.
        if e[20] & 1 != 0 {
            let n = 6 + 8 * usize::from(e[21] % 3);
            exts.hop_by_hop_options =
                Some(Ipv6RawExtHeader::new_raw(IpNumber(0), &a[..n]).unwrap());
        }
        if e[20] & 2 != 0 {
            exts.destination_options =
                Some(Ipv6RawExtHeader::new_raw(IpNumber(0), &a[8..14]).unwrap());
        }
        let mut srcip = [0u8; 16];
        srcip.copy_from_slice(&a[0..16]);
        let mut dstip = [0u8; 16];
        dstip.copy_from_slice(&a[16..32]);
        IpHeaders::Ipv6(
            Ipv6Header {
                traffic_class: e[0],
                flow_label: Ipv6FlowLabel::try_new(u32at(e, 1) & 0xfffff).unwrap(),
                payload_length: 0,
                next_header: IpNumber(0),
                hop_limit: e[5],
                source: srcip,
                destination: dstip,
            },
            exts,
        )
    } else {
        let opt_len = 4 * usize::from(e[20] % 4);
        let mut h = Ipv4Header {
            dscp: IpDscp::try_new(e[0] & 63).unwrap(),
            ecn: IpEcn::try_new(e[1] & 3).unwrap(),
            identification: u16at(e, 2),
            dont_fragment: e[4] & 1 != 0,
            // Sometimes a first fragment: the transport header is still there but
            // etherparse (rightly) stops decoding it.
            more_fragments: e[4] & 0x0e == 0,
            fragment_offset: IpFragOffset::ZERO,
            time_to_live: e[5],
            source: [a[12], a[13], a[14], a[15]],
            destination: [a[16], a[17], a[18], a[19]],
            ..Default::default()
        };
        h.options = Ipv4Options::try_from(&a[..opt_len]).unwrap();
        IpHeaders::Ipv4(h, Default::default())
    };
    let net = match s.vlans {
        0 => eth.ip(ip),
        1 => eth.vlan(VlanHeader::Single(vlan_header(&e[6..]))).ip(ip),
        _ => eth
            .vlan(VlanHeader::Double(etherparse::DoubleVlanHeader {
                outer: vlan_header(&e[6..]),
                inner: vlan_header(&e[10..]),
            }))
            .ip(ip),
    };
    let mut out = Vec::new();
    match (s.l4, s.v6) {
        (0, _) => {
            let mut t = TcpHeader::new(u16at(e, 14), u16at(e, 16), u32at(e, 22), u16at(e, 26));
            t.acknowledgment_number = u32at(e, 28);
            let f = u16at(e, 18);
            (t.fin, t.syn, t.rst, t.psh, t.ack, t.urg, t.ece, t.cwr, t.ns) = (
                f & 1 != 0,
                f & 2 != 0,
                f & 4 != 0,
                f & 8 != 0,
                f & 16 != 0,
                f & 32 != 0,
                f & 64 != 0,
                f & 128 != 0,
                f & 256 != 0,
            );
            t.urgent_pointer = u16at(e, 12);
            t.set_options_raw(&a[..4 * usize::from(e[30] % 9)]).unwrap();
            net.tcp_header(t).write(&mut out, &s.payload).unwrap();
        }
        (1, _) => net
            .udp(u16at(e, 14), u16at(e, 16))
            .write(&mut out, &s.payload)
            .unwrap(),
        (_, false) => net
            .icmpv4_echo_request(u16at(e, 14), u16at(e, 16))
            .write(&mut out, &s.payload)
            .unwrap(),
        (_, true) => net
            .icmpv6_echo_request(u16at(e, 14), u16at(e, 16))
            .write(&mut out, &s.payload)
            .unwrap(),
    }
    out
}

/// IPv4 source and destination for the pseudo header.
type V4Pair = ([u8; 4], [u8; 4]);

/// Parses `p` with our views and etherparse and compares every field; returns the number of
/// fields compared.
fn compare(p: &[u8]) -> Result<usize, TestCaseError> {
    let sp = SlicedPacket::from_ethernet(p).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
    let mut n = 0;
    let eth = Ethernet::new_checked(p).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let Some(LinkSlice::Ethernet2(ee)) = &sp.link else {
        return Err(TestCaseError::fail("no eth"));
    };
    prop_assert_eq!(eth.src(), ee.source());
    prop_assert_eq!(eth.dst(), ee.destination());
    prop_assert_eq!(eth.ethertype(), ee.ether_type().0);
    n += 3;
    let l2 = eth
        .l2_info()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(l2.tags().len(), sp.link_exts.len());
    let mut vlans = eth.vlans();
    for (tag, ext) in l2.tags().iter().zip(sp.link_exts.iter()) {
        let LinkExtSlice::Vlan(v) = ext else {
            return Err(TestCaseError::fail("macsec?"));
        };
        let (tpid, view) = vlans.next().unwrap();
        prop_assert!(ethertype::is_vlan(tag.tpid) && tpid == tag.tpid);
        prop_assert_eq!(tag.pcp(), v.priority_code_point().value());
        prop_assert_eq!(tag.dei(), v.drop_eligible_indicator());
        prop_assert_eq!(tag.vid(), v.vlan_identifier().value());
        prop_assert_eq!(
            (view.pcp(), view.dei(), view.vid()),
            (tag.pcp(), tag.dei(), tag.vid())
        );
        prop_assert_eq!(view.ethertype(), v.ether_type().0);
        n += 5;
    }
    let l3 = &p[l2.l3_offset..];
    let (l4, proto, v4): (&[u8], u8, Option<V4Pair>) = match &sp.net {
        Some(NetSlice::Ipv4(s)) => {
            prop_assert_eq!(l2.ethertype, ethertype::IPV4);
            let h = s.header();
            let ip = Ipv4::new_checked(l3).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(ip.version(), 4);
            prop_assert_eq!(ip.ihl(), h.ihl());
            prop_assert_eq!(ip.dscp(), h.dcp().value());
            prop_assert_eq!(ip.ecn(), h.ecn().value());
            prop_assert_eq!(ip.total_len(), h.total_len());
            prop_assert_eq!(ip.ident(), h.identification());
            prop_assert_eq!(ip.dont_frag(), h.dont_fragment());
            prop_assert_eq!(ip.more_frags(), h.more_fragments());
            prop_assert_eq!(ip.frag_offset(), h.fragments_offset().value());
            prop_assert_eq!(ip.is_fragment(), s.is_payload_fragmented());
            prop_assert_eq!(ip.ttl(), h.ttl());
            prop_assert_eq!(ip.protocol(), h.protocol().0);
            prop_assert_eq!(ip.checksum(), h.header_checksum());
            prop_assert_eq!(ip.src(), h.source());
            prop_assert_eq!(ip.dst_addr(), h.destination_addr());
            prop_assert_eq!(ip.options(), h.options());
            prop_assert_eq!(ip.payload(), s.payload().payload);
            prop_assert!(ip.verify_checksum());
            n += 18;
            if ip.is_fragment() {
                prop_assert!(sp.transport.is_none());
                return Ok(n);
            }
            // Re-slice from `l3`: `ip.payload()` borrows the local view.
            let end = usize::from(ip.total_len()).min(l3.len());
            (
                &l3[ip.header_len()..end],
                ip.protocol(),
                Some((ip.src(), ip.dst())),
            )
        }
        Some(NetSlice::Ipv6(s)) => {
            prop_assert_eq!(l2.ethertype, ethertype::IPV6);
            let h = s.header();
            let ip = Ipv6::new_checked(l3).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(ip.version(), 6);
            prop_assert_eq!(ip.traffic_class(), h.traffic_class());
            prop_assert_eq!(ip.flow_label(), h.flow_label().value());
            prop_assert_eq!(ip.payload_len(), h.payload_length());
            prop_assert_eq!(ip.next_header(), h.next_header().0);
            prop_assert_eq!(ip.hop_limit(), h.hop_limit());
            prop_assert_eq!(ip.src(), h.source());
            prop_assert_eq!(ip.dst_addr(), h.destination_addr());
            let w = ip
                .walk_ext()
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(w.next_header, s.payload().ip_number.0);
            prop_assert_eq!(&l3[w.offset..], s.payload().payload);
            prop_assert!(w.has_transport());
            n += 10;
            (&l3[w.offset..], w.next_header, None)
        }
        _ => return Err(TestCaseError::fail("no IP")),
    };
    let v6 = match &sp.net {
        Some(NetSlice::Ipv6(s)) => Some((s.header().source(), s.header().destination())),
        _ => None,
    };
    match &sp.transport {
        Some(TransportSlice::Tcp(t)) => {
            prop_assert_eq!(proto, ip_proto::TCP);
            let v = Tcp::new_checked(l4).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(v.src_port(), t.source_port());
            prop_assert_eq!(v.dst_port(), t.destination_port());
            prop_assert_eq!(v.seq(), t.sequence_number());
            prop_assert_eq!(v.ack(), t.acknowledgment_number());
            prop_assert_eq!(v.data_offset(), t.data_offset());
            prop_assert_eq!(
                [
                    v.fin(),
                    v.syn(),
                    v.rst(),
                    v.psh(),
                    v.ack_flag(),
                    v.urg(),
                    v.ece(),
                    v.cwr(),
                    v.ns()
                ],
                [
                    t.fin(),
                    t.syn(),
                    t.rst(),
                    t.psh(),
                    t.ack(),
                    t.urg(),
                    t.ece(),
                    t.cwr(),
                    t.ns()
                ]
            );
            prop_assert_eq!(v.window(), t.window_size());
            prop_assert_eq!(v.checksum(), t.checksum());
            prop_assert_eq!(v.urgent(), t.urgent_pointer());
            prop_assert_eq!(v.options(), t.options());
            prop_assert_eq!(v.payload(), t.payload());
            match (v4, v6) {
                (Some((s, d)), _) => prop_assert!(v.verify_checksum_v4(s, d)),
                (_, Some((s, d))) => prop_assert!(v.verify_checksum_v6(&s, &d)),
                _ => unreachable!(),
            }
            n += 20;
        }
        Some(TransportSlice::Udp(u)) => {
            prop_assert_eq!(proto, ip_proto::UDP);
            let v = Udp::new_checked(l4).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(v.src_port(), u.source_port());
            prop_assert_eq!(v.dst_port(), u.destination_port());
            prop_assert_eq!(v.len(), u.length());
            prop_assert_eq!(v.checksum(), u.checksum());
            prop_assert_eq!(v.payload(), u.payload());
            match (v4, v6) {
                (Some((s, d)), _) => prop_assert!(v.verify_checksum_v4(s, d)),
                (_, Some((s, d))) => prop_assert!(v.verify_checksum_v6(&s, &d)),
                _ => unreachable!(),
            }
            n += 6;
        }
        Some(TransportSlice::Icmpv4(i)) => {
            prop_assert_eq!(proto, ip_proto::ICMP);
            let v = Icmp::new_checked(l4).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(v.msg_type(), i.type_u8());
            prop_assert_eq!(v.code(), i.code_u8());
            prop_assert_eq!(v.checksum(), i.checksum());
            let b = i.bytes5to8();
            prop_assert_eq!(v.echo_ident(), u16::from_be_bytes([b[0], b[1]]));
            prop_assert_eq!(v.echo_seq(), u16::from_be_bytes([b[2], b[3]]));
            prop_assert_eq!(v.payload(), i.payload());
            prop_assert!(v.verify_checksum());
            n += 7;
        }
        Some(TransportSlice::Icmpv6(i)) => {
            prop_assert_eq!(proto, ip_proto::ICMPV6);
            let v = Icmpv6::new_checked(l4).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(v.msg_type(), i.type_u8());
            prop_assert_eq!(v.code(), i.code_u8());
            prop_assert_eq!(v.checksum(), i.checksum());
            let b = i.bytes5to8();
            prop_assert_eq!(v.echo_ident(), u16::from_be_bytes([b[0], b[1]]));
            prop_assert_eq!(v.echo_seq(), u16::from_be_bytes([b[2], b[3]]));
            prop_assert_eq!(v.payload(), i.payload());
            let (s, d) = v6.unwrap();
            prop_assert!(v.verify_checksum(&s, &d));
            n += 7;
        }
        other => {
            return Err(TestCaseError::fail(format!(
                "unexpected transport {other:?}"
            )))
        }
    }
    Ok(n)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn views_agree_with_etherparse(s in spec()) {
        let p = build(&s);
        let n = compare(&p)?;
        prop_assert!(n >= 10);
    }

    /// NAT-style rewrites with incremental updates give the same bytes as a full recompute.
    #[test]
    fn incremental_rewrite_equals_recompute(s in spec(), new_addr in any::<[u8; 16]>(), port in any::<u16>()) {
        let mut p = build(&s);
        let l2 = Ethernet::new_checked(&p[..]).unwrap().l2_info().unwrap();
        let hl = if s.v6 { 40 } else { Ipv4::new_checked(&p[l2.l3_offset..]).unwrap().header_len() };
        let (hdr, rest) = p[l2.l3_offset..].split_at_mut(hl);
        if s.v6 {
            let mut ip = Ipv6::new_checked(&mut hdr[..]).unwrap();
            let (old, d) = (ip.src(), ip.dst());
            ip.set_src(new_addr);
            let w = ipv6::walk_ext(rest, ip.next_header(), 0).unwrap();
            let l4 = &mut rest[w.offset..];
            match s.l4 {
                0 => {
                    let mut t = Tcp::new_checked(l4).unwrap();
                    t.update_pseudo_addr(&old, &new_addr);
                    t.set_dst_port_update(port);
                    prop_assert!(t.verify_checksum_v6(&new_addr, &d));
                }
                1 => {
                    let mut u = Udp::new_checked(l4).unwrap();
                    u.update_pseudo_addr(&old, &new_addr);
                    u.set_src_port_update(port);
                    prop_assert!(u.verify_checksum_v6(&new_addr, &d));
                }
                _ => {
                    let mut i = Icmpv6::new_checked(l4).unwrap();
                    i.update_pseudo_addr(&old, &new_addr);
                    prop_assert!(i.verify_checksum(&new_addr, &d));
                }
            }
        } else {
            let mut ip = Ipv4::new_checked(&mut hdr[..]).unwrap();
            let na = [new_addr[0], new_addr[1], new_addr[2], new_addr[3]];
            let old = ip.dst();
            ip.set_dst_update(na);
            ip.set_ttl_update(new_addr[4]);
            ip.set_dscp_update(new_addr[5] & 63);
            ip.set_src_update([new_addr[6], new_addr[7], new_addr[8], new_addr[9]]);
            prop_assert!(ip.verify_checksum());
            let c = ip.checksum();
            ip.fill_checksum();
            prop_assert_eq!(c, ip.checksum());
            let (src, frag) = (ip.src(), ip.is_fragment());
            // The pseudo header only saw the destination change; the source is patched
            // below via a second update.
            let l4 = &mut rest[..];
            let orig_src = {
                let q = build(&s);
                Ipv4::new_unchecked(&q[l2.l3_offset..]).src()
            };
            if s.l4 == 0 {
                let mut t = Tcp::new_checked(l4).unwrap();
                t.update_pseudo_addr(&old, &na);
                t.update_pseudo_addr(&orig_src, &src);
                t.set_src_port_update(port);
                prop_assert!(frag || t.verify_checksum_v4(src, na));
                let c = t.checksum();
                t.fill_checksum_v4(src, na);
                prop_assert_eq!(checksum::add(c, 0), checksum::add(t.checksum(), 0));
            } else if s.l4 == 1 {
                let mut u = Udp::new_checked(l4).unwrap();
                u.update_pseudo_addr(&old, &na);
                u.update_pseudo_addr(&orig_src, &src);
                u.set_dst_port_update(port);
                prop_assert!(u.verify_checksum_v4(src, na));
            } else {
                let mut i = Icmp::new_checked(l4).unwrap();
                i.set_echo_ident_update(port);
                prop_assert!(i.verify_checksum());
            }
        }
    }

    /// No input bytes make a `new_checked` or any getter after it panic.
    #[test]
    fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..128), nh in any::<u8>(), off in 0usize..140) {
        poke_all(&b, nh, off);
    }

    /// The same, starting from a valid packet with a few bytes corrupted or cut.
    #[test]
    fn corrupted_packets_never_panic(s in spec(), flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6), cut in any::<usize>()) {
        let mut p = build(&s);
        for (i, v) in flips {
            let n = p.len();
            p[i % n] = v;
        }
        let cut = cut % (p.len() + 1);
        p.truncate(cut);
        if let Ok(e) = Ethernet::new_checked(&p[..]) {
            if let Ok(l2) = e.l2_info() {
                poke_all(&p[l2.l3_offset..], 0, 0);
            }
        }
    }
}

fn poke_all(b: &[u8], nh: u8, off: usize) {
    if let Ok(e) = Ethernet::new_checked(b) {
        let _ = (e.src(), e.dst(), e.ethertype(), e.payload(), e.l2_info());
        for (_, v) in e.vlans() {
            let _ = (v.pcp(), v.dei(), v.vid(), v.ethertype(), v.payload());
        }
    }
    if let Ok(v) = Vlan::new_checked(b) {
        let _ = (v.tci(), v.payload());
    }
    if let Ok(a) = Arp::new_checked(b) {
        let _ = (a.op(), a.sha(), a.spa(), a.tha(), a.tpa());
    }
    if let Ok(ip) = Ipv4::new_checked(b) {
        let _ = (
            ip.options(),
            ip.payload(),
            ip.verify_checksum(),
            ip.pseudo_sum(),
        );
        let _ = (
            ip.dscp(),
            ip.ecn(),
            ip.flags(),
            ip.frag_offset(),
            ip.src_addr(),
            ip.is_truncated(),
        );
    }
    if let Ok(ip) = Ipv6::new_checked(b) {
        let _ = (
            ip.payload(),
            ip.walk_ext(),
            ip.flow_label(),
            ip.traffic_class(),
            ip.pseudo_sum(6, 9),
        );
    }
    let _ = ipv6::walk_ext(b, nh, off);
    if let Ok(t) = Tcp::new_checked(b) {
        let _ = (
            t.options(),
            t.payload(),
            t.flags(),
            t.verify_checksum_v4([0; 4], [0; 4]),
        );
    }
    if let Ok(u) = Udp::new_checked(b) {
        let _ = (u.payload(), u.verify_checksum_v6(&[0; 16], &[1; 16]));
    }
    if let Ok(i) = Icmp::new_checked(b) {
        let _ = (i.payload(), i.echo_ident(), i.verify_checksum());
    }
    if let Ok(i) = Icmpv6::new_checked(b) {
        let _ = (
            i.payload(),
            i.echo_seq(),
            i.verify_checksum(&[0; 16], &[0; 16]),
        );
    }
    // The mutating paths too.
    let mut m = b.to_vec();
    if let Ok(mut ip) = Ipv4::new_checked(&mut m[..]) {
        ip.set_ttl_update(1);
        ip.fill_checksum();
        ip.payload_mut().fill(0);
        ip.options_mut().fill(0);
    }
    let mut m = b.to_vec();
    if let Ok(mut t) = Tcp::new_checked(&mut m[..]) {
        t.set_src_port_update(1);
        t.payload_mut().fill(0);
        t.fill_checksum_v6(&[0; 16], &[0; 16]);
    }
    let mut m = b.to_vec();
    if let Ok(mut u) = Udp::new_checked(&mut m[..]) {
        u.update_pseudo_addr(&[1, 2, 3, 4], &[5, 6, 7, 8]);
        u.fill_checksum_v4([0; 4], [0; 4]);
        u.payload_mut().fill(0);
    }
}

#[test]
fn tcp_checksum_survives_ipv4_fragment_flag() {
    // A first fragment still carries the full TCP header; our views read it regardless.
    let s = Spec {
        vlans: 1,
        v6: false,
        l4: 0,
        e: [0; 32],
        a: [7; 32],
        payload: vec![1, 2, 3],
    };
    let p = build(&s);
    let l2 = Ethernet::new_checked(&p[..]).unwrap().l2_info().unwrap();
    let ip = Ipv4::new_checked(&p[l2.l3_offset..]).unwrap();
    assert!(ip.more_frags());
    let t = Tcp::new_checked(ip.payload()).unwrap();
    assert!(t.verify_checksum(ip.pseudo_sum()));
}
