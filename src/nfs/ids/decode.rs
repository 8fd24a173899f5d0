//! What the engine needs of one packet's bytes: addresses, ports, TCP sequence and flags,
//! the payload's place, and the header fields of packet keywords. One decoder for the
//! stack's packet events and for the test replay, so both see packets alike.

use std::ops::Range;

use crate::packet::bytes::{be16, be32};
use crate::packet::{L3Kind, Layers};

use super::header::Ip;
use super::pktcheck::PktFields;

#[derive(Clone, Debug)]
pub struct Decoded {
    pub src: Ip,
    pub dst: Ip,
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    /// TCP: (sequence number, flags).
    pub tcp: Option<(u32, u8)>,
    /// TCP: the acknowledgment number (0 otherwise).
    pub tcp_ack: u32,
    /// The payload's bytes in the packet (Ethernet padding excluded).
    pub payload: Range<usize>,
    pub fields: PktFields,
}

/// Whether Suricata 7 gives this packet a flow: it makes flows for TCP, UDP, ICMP,
/// ICMPv6, SCTP, ESP and IPv6-in-IPv4 only, never for an IP fragment (the reassembled packet gets one)
/// nor for an ICMPv4 error message (destination unreachable, source quench, redirect,
/// time exceeded, parameter problem), which joins the quoted packet's flow when that one
/// exists. A packet without a flow is every IP-only rule's "first packet".
pub fn suricata_makes_flow(l: &Layers, d: &Decoded) -> bool {
    if l.is_fragment() {
        return false;
    }
    match d.proto {
        6 | 17 | 58 | 132 | 50 => true,
        // 6in4's outer packets (decode-ipv4.c sets the flow up beside the tunnel).
        41 => l.l3 == L3Kind::Ipv4,
        1 => !matches!(d.fields.icmp_type, 3 | 4 | 5 | 11 | 12),
        _ => false,
    }
}

/// None for non-IP packets, IP headers cut short and an IPv4 total length of 0, which
/// Suricata's decoder refuses (`iplen_smaller_than_hlen`: no flow, no alert).
pub fn decode(l: &Layers, b: &[u8]) -> Option<Decoded> {
    let l3 = l.l3_off as usize;
    let (src, dst) = match l.l3 {
        L3Kind::Ipv4 if b.len() >= l3 + 20 && be16(b, l3 + 2) != 0 => {
            (Ip::V4(be32(b, l3 + 12)), Ip::V4(be32(b, l3 + 16)))
        }
        L3Kind::Ipv6 if b.len() >= l3 + 40 => {
            let a = |o: usize| u128::from_be_bytes(b[o..o + 16].try_into().unwrap_or([0; 16]));
            (Ip::V6(a(l3 + 8)), Ip::V6(a(l3 + 24)))
        }
        _ => return None,
    };
    // The datagram's end as its header gives it (Ethernet padding is not payload).
    let end = usize::from(l.l3_end);
    let proto = l.l4_proto;
    let l4 = l.l4_off as usize;
    let has_l4 = l.has_l4() && !l.is_later_fragment();
    let (sport, dport) = if has_l4 && matches!(proto, 6 | 17) && b.len() >= l4 + 4 {
        (be16(b, l4), be16(b, l4 + 2))
    } else {
        (0, 0)
    };
    let clamp = |from: usize| from.min(end)..end;
    let (payload, tcp) = match proto {
        6 if has_l4 && b.len() >= l4 + 20 => {
            let off = l4 + (b[l4 + 12] >> 4) as usize * 4;
            (clamp(off), Some((be32(b, l4 + 4), b[l4 + 13])))
        }
        17 | 1 | 58 if has_l4 => (clamp(l4 + 8), None),
        _ => (clamp(l4), None),
    };
    let tcp_ack = if tcp.is_some() { be32(b, l4 + 8) } else { 0 };
    let icmp = has_l4 && matches!(proto, 1 | 58) && b.len() >= l4 + 2;
    Some(Decoded {
        src,
        dst,
        sport,
        dport,
        proto,
        tcp,
        tcp_ack,
        payload,
        fields: PktFields {
            tcp_flags: tcp.map_or(0, |t| t.1),
            icmp_type: if icmp { b[l4] } else { 0 },
            icmp_code: if icmp { b[l4 + 1] } else { 0 },
            ttl: if l.l3 == L3Kind::Ipv4 {
                b[l3 + 8]
            } else {
                b[l3 + 7]
            },
        },
    })
}
