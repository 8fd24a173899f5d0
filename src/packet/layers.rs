//! Header offsets found by one walk over the headers, done only when an NF first asks.
//! The walk reads just the bytes it needs (ethertypes, IP header lengths, next-header
//! chains); the typed views in [`super::wire`] read fields at these offsets.

use super::bytes::be16;
use super::meta::LinkKind;

/// What sits at the network layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum L3Kind {
    /// Not decoded yet.
    Unparsed,
    /// A protocol we do not decode (the ethertype is in `ethertype`).
    Other,
    Arp,
    Ipv4,
    Ipv6,
    /// Too short or inconsistent to decode: counted as malformed by NFs that need L3.
    Malformed,
}

/// Offsets are from the start of the packet's bytes.
///
/// `repr(C)` in the order of [`Layers::parse`]'s packed form (byte 0 `l3`, 1 `l4_proto`,
/// …, bytes 10–11 `l3_end`, little-endian): the packed value is the struct's bytes, so a
/// parse stores it whole (two stores) instead of rebuilding it field by field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Layers {
    pub l3: L3Kind,
    /// IP protocol / IPv6 final next header (after extension headers); 0 when not IP.
    pub l4_proto: u8,
    /// Number of 802.1Q / 802.1ad tags skipped.
    pub vlans: u8,
    pub flags: u8,
    /// Ethertype after the tags (0 for raw IP).
    pub ethertype: u16,
    pub l3_off: u16,
    /// Offset of the transport header; meaningful when [`Layers::has_l4`].
    pub l4_off: u16,
    /// Where the IP datagram ends: its total length (IPv4) or payload length (IPv6) as
    /// the header gives it, cut to the bytes captured; bytes past it (Ethernet padding
    /// of a minimum frame) are no part of it. An IPv4 total length shorter than its
    /// header makes the packet malformed, but 0 (a segmentation offload's capture) leaves
    /// the captured end. For other packets, the captured end. At most `u16::MAX`.
    pub l3_end: u16,
}

impl Layers {
    pub const UNPARSED: Layers = Layers {
        l3: L3Kind::Unparsed,
        l4_proto: 0,
        vlans: 0,
        flags: 0,
        ethertype: 0,
        l3_off: 0,
        l4_off: 0,
        l3_end: 0,
    };

    /// The packet is an IP fragment other than the first: no transport header here.
    pub const LATER_FRAGMENT: u8 = 1;
    /// The packet is a fragment (first or later).
    pub const FRAGMENT: u8 = 2;
    /// The transport header is present in full (at least its fixed part).
    pub const L4_COMPLETE: u8 = 4;
    /// The packet has an Ethernet header (so MAC addresses can be read at offset 0).
    pub const ETHERNET: u8 = 8;

    #[inline]
    pub fn is_unparsed(&self) -> bool {
        self.l3 == L3Kind::Unparsed
    }

    #[inline]
    pub fn has_ethernet(&self) -> bool {
        self.flags & Self::ETHERNET != 0
    }

    /// A complete TCP/UDP/ICMP fixed header is present at `l4_off`.
    #[inline]
    pub fn has_l4(&self) -> bool {
        self.flags & Self::L4_COMPLETE != 0
    }

    #[inline]
    pub fn is_later_fragment(&self) -> bool {
        self.flags & Self::LATER_FRAGMENT != 0
    }

    #[inline]
    pub fn is_fragment(&self) -> bool {
        self.flags & Self::FRAGMENT != 0
    }

    /// Walks the headers of `b`, starting at the given link layer.
    #[inline]
    pub fn parse(link: LinkKind, b: &[u8]) -> Layers {
        // Most traffic is untagged Ethernet / IPv4 without options or fragmentation:
        // decide it with a few byte compares, leaving the full walk out of line.
        // Bytes 12..15 in one load: ethertype 0x0800, then version 4 with IHL 5 (the
        // fourth byte, the TOS, shifted out).
        // A total length below the header (0, or a lie) takes the walk, and so does one
        // above 65521, so that the datagram's end (14 + total) needs no clamp to u16.
        let v = if link == LinkKind::Ethernet
            && b.len() >= 34
            && u32::from_be_bytes([b[12], b[13], b[14], b[15]]) >> 8 == 0x08_00_45
            && be16(b, 20) & 0x3fff == 0
            && be16(b, 16).wrapping_sub(20) <= FAST_TOTAL_MAX - 20
        {
            // At most 14 + 65521: a u16.
            let end = (14 + usize::from(be16(b, 16))).min(b.len()) as u32;
            let proto = b[23];
            let complete = end >= L4_END_AT_34[usize::from(proto)];
            FAST_IPV4
                | u128::from(proto) << 8
                | u128::from(u8::from(complete) * Self::L4_COMPLETE) << 24
                | u128::from(end) << 80
        } else {
            Self::parse_walk_packed(link, b)
        };
        Self::unpack(v)
    }

    /// The full walk, out of line, its result returned in registers: a `Layers` returned
    /// through memory made the fast path build its own in a stack slot too, byte by byte,
    /// then reload it whole (a load no store forwards).
    #[inline(never)]
    fn parse_walk_packed(link: LinkKind, b: &[u8]) -> u128 {
        let l = Self::parse_walk(link, b);
        u128::from(l.l3 as u8)
            | u128::from(l.l4_proto) << 8
            | u128::from(l.vlans) << 16
            | u128::from(l.flags) << 24
            | u128::from(l.ethertype) << 32
            | u128::from(l.l3_off) << 48
            | u128::from(l.l4_off) << 64
            | u128::from(l.l3_end) << 80
    }

    /// The packed form's low 12 bytes are a `Layers` (`repr(C)`, fields in the packing's
    /// order); its byte 0 is always an `L3Kind` (every packed value is made from one).
    #[cfg(target_endian = "little")]
    #[inline(always)]
    fn unpack(v: u128) -> Layers {
        let bytes = v.to_le_bytes();
        debug_assert!(bytes[0] <= L3Kind::Malformed as u8);
        // SAFETY: 16 bytes hold the 12 of a `Layers` (align 2 asked of none: an unaligned
        // read); byte 0 is a valid `L3Kind` (see above), the rest are plain integers.
        unsafe { bytes.as_ptr().cast::<Layers>().read_unaligned() }
    }

    #[cfg(not(target_endian = "little"))]
    #[inline(always)]
    fn unpack(v: u128) -> Layers {
        let l3 = match v as u8 {
            0 => L3Kind::Unparsed,
            1 => L3Kind::Other,
            2 => L3Kind::Arp,
            3 => L3Kind::Ipv4,
            4 => L3Kind::Ipv6,
            _ => L3Kind::Malformed,
        };
        Layers {
            l3,
            l4_proto: (v >> 8) as u8,
            vlans: (v >> 16) as u8,
            flags: (v >> 24) as u8,
            ethertype: (v >> 32) as u16,
            l3_off: (v >> 48) as u16,
            l4_off: (v >> 64) as u16,
            l3_end: (v >> 80) as u16,
        }
    }

    #[inline]
    fn parse_walk(link: LinkKind, b: &[u8]) -> Layers {
        let mut l = Layers {
            l3: L3Kind::Malformed,
            l3_end: end_at(b, b.len()),
            ..Layers::UNPARSED
        };
        let (mut off, mut et) = match link {
            LinkKind::Ethernet => {
                if b.len() < 14 {
                    return l;
                }
                l.flags |= Self::ETHERNET;
                (14usize, be16(b, 12))
            }
            LinkKind::LinuxSll => {
                if b.len() < 16 {
                    return l;
                }
                (16, be16(b, 14))
            }
            LinkKind::LinuxSll2 => {
                if b.len() < 20 {
                    return l;
                }
                (20, be16(b, 0))
            }
            LinkKind::RawIp => match b.first().map(|v| v >> 4) {
                Some(4) => (0, 0x0800),
                Some(6) => (0, 0x86dd),
                _ => return l,
            },
        };
        // 802.1Q, 802.1ad and the old QinQ 0x9100: skip up to a sane number of tags.
        while matches!(et, 0x8100 | 0x88a8 | 0x9100) && l.vlans < 8 {
            if b.len() < off + 4 {
                return l;
            }
            et = be16(b, off + 2);
            off += 4;
            l.vlans += 1;
        }
        l.ethertype = if link == LinkKind::RawIp { 0 } else { et };
        l.l3_off = off as u16;
        match et {
            0x0800 => parse_ipv4(&mut l, b, off),
            0x86dd => parse_ipv6(&mut l, b, off),
            0x0806 => {
                l.l3 = if b.len() >= off + 28 {
                    L3Kind::Arp
                } else {
                    L3Kind::Malformed
                };
            }
            _ => l.l3 = L3Kind::Other,
        }
        l
    }
}

/// Tunnels an IDS decodes as Suricata 7 does by default: IPv6 in IPv4 (6in4), IPv4 or
/// IPv6 in IPv6, GRE version 0 (IPv4, IPv6, Ethernet), Teredo (UDP 3544) and VXLAN (UDP
/// 4789). Separate from [`Layers::parse`], so NFs that match the outer header pay nothing.
impl Layers {
    /// The encapsulated packet's layers, offsets into the same bytes; `None` when this
    /// packet carries no tunnel of those kinds (or its inner header is cut short).
    pub fn tunnel_inner(&self, b: &[u8]) -> Option<Layers> {
        if self.l3 == L3Kind::Other && self.ethertype == 0x8864 {
            // A PPPoE session frame: Suricata decodes its IP as the packet's own.
            let mut l = pppoe_inner(b, self.l3_off as usize)?;
            l.vlans = self.vlans;
            return Some(l);
        }
        if self.l3 == L3Kind::Other && self.ethertype == 0x8903 {
            // Cisco FabricPath (DCE): two bytes after the outer Ethernet header, then
            // another Ethernet frame, which Suricata decodes (decode.h).
            let off = self.l3_off as usize + 2;
            if b.len() < off + 14 {
                return None;
            }
            return ether_inner(b, off);
        }
        if !matches!(self.l3, L3Kind::Ipv4 | L3Kind::Ipv6) || self.is_fragment() {
            return None;
        }
        // The inner packet lies inside the outer datagram, never in the padding after it.
        let b = &b[..usize::from(self.l3_end).min(b.len())];
        let off = self.l4_off as usize;
        match self.l4_proto {
            41 => inner_ip(b, off, 0x86dd),
            4 if self.l3 == L3Kind::Ipv6 => inner_ip(b, off, 0x0800),
            47 => gre_inner(b, off),
            17 if self.has_l4() => {
                let (sp, dp) = (be16(b, off), be16(b, off + 2));
                // The datagram's payload as its UDP length gives it.
                let end = (off + usize::from(be16(b, off + 4))).min(b.len());
                let pay = off + 8;
                if end < pay {
                    return None;
                }
                if sp == 3544 || dp == 3544 {
                    if let Some(i) = teredo_inner(b, pay, end) {
                        return Some(i);
                    }
                }
                if (sp == 4789 || dp == 4789)
                    && end >= pay + 8 + 14
                    && b[pay] & 0x08 != 0
                    && b[pay + 7] == 0
                {
                    return ether_inner(b, pay + 8);
                }
                None
            }
            _ => None,
        }
    }
}

/// An IP header of `et` (0x0800 or 0x86dd) at `off`.
fn inner_ip(b: &[u8], off: usize, et: u16) -> Option<Layers> {
    if off > u16::MAX as usize {
        return None;
    }
    let mut l = Layers {
        l3: L3Kind::Malformed,
        ethertype: et,
        l3_off: off as u16,
        l3_end: end_at(b, b.len()),
        ..Layers::UNPARSED
    };
    match et {
        0x0800 => parse_ipv4(&mut l, b, off),
        0x86dd => parse_ipv6(&mut l, b, off),
        _ => return None,
    }
    (l.l3 != L3Kind::Malformed).then_some(l)
}

/// An Ethernet frame at `off` (VLAN tags skipped), IP inside.
fn ether_inner(b: &[u8], off: usize) -> Option<Layers> {
    let (mut p, mut et, mut vlans) = (off + 14, be16(b, off + 12), 0u8);
    while matches!(et, 0x8100 | 0x88a8 | 0x9100) && vlans < 8 {
        et = be16(b, p + 2);
        p += 4;
        vlans += 1;
    }
    let mut l = inner_ip(b, p, et)?;
    l.vlans = vlans;
    Some(l)
}

/// GRE version 0 (RFC 2784/2890): Suricata refuses recursion, version-1 flags and
/// routing it cannot walk; the payload by its protocol type.
fn gre_inner(b: &[u8], off: usize) -> Option<Layers> {
    let (f0, f1) = (*b.get(off)?, *b.get(off + 1)?);
    if f1 & 0x7f == 1 {
        // Version 1 (PPTP): a key, PPP inside; no checksum, routing or recursion.
        if f0 & 0xcf != 0 || f0 & 0x20 == 0 || be16(b, off + 2) != 0x880b {
            return None;
        }
        let p = off + 8 + usize::from(f0 & 0x10 != 0) * 4 + usize::from(f1 & 0x80 != 0) * 4;
        return ppp_inner(b, p);
    }
    if f0 & 0x47 != 0 || f1 & 0x7f != 0 {
        return None;
    }
    let mut p = off + 4;
    p += usize::from(f0 & 0x80 != 0) * 4; // checksum + offset
    p += usize::from(f0 & 0x20 != 0) * 4; // key
    p += usize::from(f0 & 0x10 != 0) * 4; // sequence number
    match be16(b, off + 2) {
        0x6558 => ether_inner(b, p),
        et => inner_ip(b, p, et),
    }
}

/// PPP (RFC 1661): an optional HDLC address and control (0xff 0x03), then a protocol
/// field of one byte (compressed) or two; IPv4 and IPv6 decoded.
fn ppp_inner(b: &[u8], off: usize) -> Option<Layers> {
    ppp_proto_inner(b, off + if *b.get(off)? == 0xff { 2 } else { 0 })
}

/// A PPPoE session header (RFC 2516) at `off`: PPP's protocol field right after its six
/// bytes (no HDLC framing); Suricata (decode-pppoe.c) checks no version and decodes the
/// payload only when the header's length is not zero.
fn pppoe_inner(b: &[u8], off: usize) -> Option<Layers> {
    if b.len() < off + 7 || be16(b, off + 4) == 0 {
        return None;
    }
    ppp_proto_inner(b, off + 6)
}

/// PPP's protocol field at `p`, one byte (odd first byte) or two, then IPv4 or IPv6.
fn ppp_proto_inner(b: &[u8], mut p: usize) -> Option<Layers> {
    let proto = if *b.get(p)? & 1 != 0 {
        p += 1;
        u16::from(b[p - 1])
    } else {
        p += 2;
        be16(b, p - 2)
    };
    match proto {
        0x21 => inner_ip(b, p, 0x0800),
        0x57 => inner_ip(b, p, 0x86dd),
        _ => None,
    }
}

/// Teredo (RFC 4380) as Suricata 7 checks it: an optional origin indication, then an IPv6
/// header whose length fills the datagram exactly.
fn teredo_inner(b: &[u8], pay: usize, end: usize) -> Option<Layers> {
    let mut p = pay;
    if end < p + 40 {
        return None;
    }
    if b[p] == 0 {
        if b[p + 1] != 0 || end < p + 8 + 40 {
            return None;
        }
        p += 8;
    }
    let (nh, plen, hlim) = (b[p + 6], usize::from(be16(b, p + 4)), b[p + 7]);
    if b[p] >> 4 != 6 || hlim == 0 || (nh == 0 && plen < 8) || end != p + 40 + plen {
        return None;
    }
    inner_ip(b, p, 0x86dd)
}

/// The end of a datagram that claims to end at `end`: cut to the capture, and to what
/// an offset can hold.
#[inline(always)]
fn end_at(b: &[u8], end: usize) -> u16 {
    end.min(b.len()).min(usize::from(u16::MAX)) as u16
}

fn parse_ipv4(l: &mut Layers, b: &[u8], off: usize) {
    if b.len() < off + 20 || b[off] >> 4 != 4 {
        return;
    }
    let ihl = ((b[off] & 0x0f) as usize) * 4;
    if ihl < 20 || b.len() < off + ihl {
        return;
    }
    // A total length shorter than the header is a lie: nothing in it can be trusted.
    // 0 is a segmentation offload's capture: the datagram is what was captured.
    let total = usize::from(be16(b, off + 2));
    if total != 0 && total < ihl {
        return;
    }
    l.l3_end = end_at(b, if total == 0 { b.len() } else { off + total });
    l.l3 = L3Kind::Ipv4;
    l.l4_proto = b[off + 9];
    let frag = be16(b, off + 6);
    let (more, offset) = (frag & 0x2000 != 0, frag & 0x1fff);
    if more || offset != 0 {
        l.flags |= Layers::FRAGMENT;
    }
    if offset != 0 {
        l.flags |= Layers::LATER_FRAGMENT;
        return;
    }
    l.l4_off = (off + ihl) as u16;
    mark_l4(l);
}

fn parse_ipv6(l: &mut Layers, b: &[u8], off: usize) {
    if b.len() < off + 40 || b[off] >> 4 != 6 {
        return;
    }
    l.l3_end = end_at(b, off + 40 + usize::from(be16(b, off + 4)));
    if usize::from(l.l3_end) < off + 40 {
        return;
    }
    // Extension headers are walked inside the datagram only.
    let b = &b[..usize::from(l.l3_end)];
    l.l3 = L3Kind::Ipv6;
    let mut next = b[off + 6];
    let mut p = off + 40;
    // Extension headers: hop-by-hop, routing, destination options, fragment, AH, mobility.
    for _ in 0..16 {
        match next {
            0 | 43 | 60 | 135 | 139 | 140 => {
                if b.len() < p + 8 {
                    l.l4_proto = next;
                    return;
                }
                next = b[p];
                p += (b[p + 1] as usize + 1) * 8;
            }
            44 => {
                if b.len() < p + 8 {
                    l.l4_proto = next;
                    return;
                }
                l.flags |= Layers::FRAGMENT;
                let fo = be16(b, p + 2) >> 3;
                next = b[p];
                p += 8;
                if fo != 0 {
                    l.flags |= Layers::LATER_FRAGMENT;
                    l.l4_proto = next;
                    return;
                }
            }
            51 => {
                if b.len() < p + 8 {
                    l.l4_proto = next;
                    return;
                }
                next = b[p];
                p += (b[p + 1] as usize + 2) * 4;
            }
            _ => break,
        }
    }
    l.l4_proto = next;
    if p > u16::MAX as usize {
        return;
    }
    l.l4_off = p as u16;
    mark_l4(l);
}

/// Bytes a complete L4 header needs, by IP protocol (0: not marked): TCP, UDP, ICMP,
/// ICMPv6, SCTP. A table rather than a `match`, whose branch on TCP against UDP
/// mispredicted on mixed traffic (cachegrind, generated bigflows: 0.23 a packet).
const L4_NEED: [u8; 256] = {
    let mut t = [0u8; 256];
    t[6] = 20;
    t[17] = 8;
    t[1] = 4;
    t[58] = 4;
    t[132] = 12;
    t
};

/// The fast path's largest IPv4 total length: 14 + it is at most `u16::MAX`.
const FAST_TOTAL_MAX: u16 = u16::MAX - 14;

/// The fast path's packed `Layers` without its protocol, flags' L4 bit and end: IPv4 at
/// 14, transport at 34, ethertype 0x0800, Ethernet, no tags.
const FAST_IPV4: u128 =
    L3Kind::Ipv4 as u128 | (Layers::ETHERNET as u128) << 24 | 0x0800 << 32 | 14 << 48 | 34 << 64;

/// Per IP protocol, where its fixed transport header ends when it starts at 34; past any
/// datagram's end (`u16::MAX` + 1) for protocols without one.
const L4_END_AT_34: [u32; 256] = {
    let mut t = [1 << 16; 256];
    let mut p = 0;
    while p < 256 {
        if L4_NEED[p] != 0 {
            t[p] = 34 + L4_NEED[p] as u32;
        }
        p += 1;
    }
    t
};

/// Judged inside the datagram ([`Layers::l3_end`]), never in the link layer's padding.
#[inline]
fn mark_l4(l: &mut Layers) {
    let need = usize::from(L4_NEED[usize::from(l.l4_proto)]);
    let complete = (need != 0) & (usize::from(l.l3_end) >= l.l4_off as usize + need);
    l.flags |= Layers::L4_COMPLETE * u8::from(complete);
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The out-of-line walk's packed return gives back every field of its `Layers`,
        /// for every link kind and any bytes (malformed, tagged, IPv6, ARP, other).
        #[test]
        fn the_packed_walk_returns_the_walks_layers(
            link in 0u8..4,
            ethertype in proptest::sample::select(vec![0x0800u16, 0x86dd, 0x0806, 0x8100, 0x88a8, 0x1234]),
            mut bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..120),
        ) {
            if bytes.len() >= 14 {
                bytes[12..14].copy_from_slice(&ethertype.to_be_bytes());
            }
            let link = [LinkKind::Ethernet, LinkKind::RawIp, LinkKind::LinuxSll, LinkKind::LinuxSll2][link as usize];
            proptest::prop_assert_eq!(
                Layers::unpack(Layers::parse_walk_packed(link, &bytes)),
                Layers::parse_walk(link, &bytes)
            );
        }
    }

    proptest::proptest! {
        /// The fast case (untagged Ethernet, IPv4 without options, not a fragment, total
        /// length 20..=65521) gives the walk's `Layers`, field for field, at every total
        /// length, protocol and frame length, frames longer than 65535 bytes included.
        #[test]
        fn the_fast_case_gives_the_walks_layers(
            // Any, and the edges: below the header, the L4 ends, the fast case's last.
            total in proptest::prop_oneof![
                proptest::prelude::any::<u16>(),
                0u16..64,
                65_500u16..=65_535
            ],
            proto in proptest::sample::select(vec![0u8, 1, 6, 17, 47, 58, 132, 255]),
            frag in proptest::sample::select(vec![0u16, 0x4000, 0x2000, 0x0001]),
            len in 0usize..100,
            huge in proptest::prelude::any::<bool>(),
        ) {
            let mut p = v4_around(proto, &[0; 20]);
            p[16..18].copy_from_slice(&total.to_be_bytes());
            p[20..22].copy_from_slice(&frag.to_be_bytes());
            p.resize(if huge { 65_600 } else { len }, 0);
            proptest::prop_assert_eq!(
                Layers::parse(LinkKind::Ethernet, &p),
                Layers::parse_walk(LinkKind::Ethernet, &p)
            );
        }
    }

    #[test]
    fn the_fast_case_at_its_edges() {
        let ipv4 = |l4_proto, flags, l3_end| Layers {
            l3: L3Kind::Ipv4,
            l4_proto,
            vlans: 0,
            flags,
            ethertype: 0x0800,
            l3_off: 14,
            l4_off: 34,
            l3_end,
        };
        let (eth, whole) = (Layers::ETHERNET, Layers::ETHERNET | Layers::L4_COMPLETE);
        // TCP's 20 bytes inside the datagram, or one byte short of it.
        assert_eq!(
            Layers::parse(LinkKind::Ethernet, &padded_tcp(40)),
            ipv4(6, whole, 54)
        );
        assert_eq!(
            Layers::parse(LinkKind::Ethernet, &padded_tcp(39)),
            ipv4(6, eth, 53)
        );
        // UDP's 8, ICMP's 4; GRE has no fixed transport header here.
        let mut p = v4_around(17, &[0; 8]);
        assert_eq!(Layers::parse(LinkKind::Ethernet, &p), ipv4(17, whole, 42));
        p.pop();
        assert_eq!(Layers::parse(LinkKind::Ethernet, &p), ipv4(17, eth, 41));
        let p = v4_around(1, &[8, 0, 0, 0]);
        assert_eq!(Layers::parse(LinkKind::Ethernet, &p), ipv4(1, whole, 38));
        let p = v4_around(47, &[0; 30]);
        assert_eq!(Layers::parse(LinkKind::Ethernet, &p), ipv4(47, eth, 64));
        // The largest total the fast case takes, and past it: the end clamped at 65535.
        for total in [65_521u16, 65_522, 65_535] {
            let mut p = padded_tcp(total);
            p.resize(65_600, 0);
            assert_eq!(
                Layers::parse(LinkKind::Ethernet, &p),
                ipv4(6, whole, 65_535),
                "total {total}"
            );
        }
        // A frame of 34 bytes: the header, nothing after it.
        let p = v4_around(6, &[]);
        assert_eq!(Layers::parse(LinkKind::Ethernet, &p), ipv4(6, eth, 34));
        // A frame cut inside the IPv4 header; a non-IPv4 frame.
        let l = Layers::parse(LinkKind::Ethernet, &padded_tcp(40)[..33]);
        assert_eq!(l.l3, L3Kind::Malformed);
        let mut p = padded_tcp(40);
        p[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
        assert_eq!(Layers::parse(LinkKind::Ethernet, &p).l3, L3Kind::Malformed);
        p[12..14].copy_from_slice(&0x1234u16.to_be_bytes());
        assert_eq!(Layers::parse(LinkKind::Ethernet, &p).l3, L3Kind::Other);
    }

    // Ethernet / 802.1Q vid 5 / IPv4 ihl=6 (one option word) / UDP 1234 -> 53
    const VLAN_V4_OPT_UDP: [u8; 50] = [
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0x81, 0x00, 0x00, 0x05, 0x08, 0x00, // eth + tag
        0x46, 0, 0, 32, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 1, 1, 1,
        0, // ipv4
        0x04, 0xd2, 0x00, 0x35, 0, 8, 0, 0, // udp
    ];

    #[test]
    fn vlan_ipv4_options_udp() {
        let l = Layers::parse(LinkKind::Ethernet, &VLAN_V4_OPT_UDP);
        assert_eq!(l.l3, L3Kind::Ipv4);
        assert_eq!(
            (l.vlans, l.ethertype, l.l3_off, l.l4_off, l.l4_proto),
            (1, 0x0800, 18, 42, 17)
        );
        assert!(l.has_l4() && l.has_ethernet() && !l.is_fragment());
    }

    #[test]
    fn truncated_l4_is_not_complete() {
        let l = Layers::parse(LinkKind::Ethernet, &VLAN_V4_OPT_UDP[..45]);
        assert_eq!(l.l3, L3Kind::Ipv4);
        assert!(!l.has_l4());
    }

    #[test]
    fn short_frame_is_malformed() {
        assert_eq!(
            Layers::parse(LinkKind::Ethernet, &[0; 13]).l3,
            L3Kind::Malformed
        );
        assert_eq!(Layers::parse(LinkKind::RawIp, &[]).l3, L3Kind::Malformed);
    }

    #[test]
    fn ipv6_hop_by_hop_then_tcp() {
        let mut p = vec![0x60, 0, 0, 0, 0, 28, 0, 64];
        p.extend_from_slice(&[0; 32]);
        p.extend_from_slice(&[6, 0, 0, 0, 0, 0, 0, 0]); // hop-by-hop, next = TCP, len 8
        p.extend_from_slice(&[0; 20]);
        let l = Layers::parse(LinkKind::RawIp, &p);
        assert_eq!((l.l3, l.l4_proto, l.l4_off), (L3Kind::Ipv6, 6, 48));
        assert!(l.has_l4());
    }

    /// Ethernet / IPv4 (protocol `proto`) around `inner`.
    fn v4_around(proto: u8, inner: &[u8]) -> Vec<u8> {
        let mut p = vec![0; 12];
        p.extend_from_slice(&[0x08, 0x00, 0x45, 0]);
        p.extend_from_slice(&(20 + inner.len() as u16).to_be_bytes());
        p.extend_from_slice(&[0, 1, 0, 0, 64, proto, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
        p.extend_from_slice(inner);
        p
    }

    /// IPv6 (next header `nh`) around a payload of `len` zero bytes.
    fn v6(nh: u8, len: u16) -> Vec<u8> {
        let mut p = vec![0x60, 0, 0, 0];
        p.extend_from_slice(&len.to_be_bytes());
        p.extend_from_slice(&[nh, 64]);
        p.extend_from_slice(&[0; 32]);
        p.extend(std::iter::repeat_n(0, len as usize));
        p
    }

    #[test]
    fn six_in_four_inner_ipv6_udp() {
        let p = v4_around(41, &v6(17, 8));
        let o = Layers::parse(LinkKind::Ethernet, &p);
        assert_eq!(o.l4_proto, 41);
        let i = o.tunnel_inner(&p).unwrap();
        assert_eq!(
            (i.l3, i.l3_off, i.l4_off, i.l4_proto),
            (L3Kind::Ipv6, 34, 74, 17)
        );
        assert!(i.has_l4());
        // The outer view is untouched: other NFs keep matching the outer header.
        assert_eq!(Layers::parse(LinkKind::Ethernet, &p), o);
    }

    #[test]
    fn vxlan_and_teredo_by_port_and_header() {
        let mut inner = vec![0; 12]; // inner Ethernet
        inner.extend_from_slice(&[0x08, 0x00]);
        inner.extend_from_slice(&v4_around(6, &[0; 20])[14..]);
        let vx = |flags: u8, dport: u16| {
            let mut u = vec![0x30, 0x39];
            u.extend_from_slice(&dport.to_be_bytes());
            u.extend_from_slice(&(16 + inner.len() as u16).to_be_bytes());
            u.extend_from_slice(&[0, 0, flags, 0, 0, 0, 0, 0, 0, 0]);
            u.extend_from_slice(&inner);
            v4_around(17, &u)
        };
        let p = vx(0x08, 4789);
        let i = Layers::parse(LinkKind::Ethernet, &p)
            .tunnel_inner(&p)
            .unwrap();
        assert_eq!((i.l3_off, i.l4_off, i.l4_proto), (64, 84, 6));
        // No I flag, or another port: not VXLAN.
        for p in [vx(0, 4789), vx(0x08, 4790)] {
            assert_eq!(Layers::parse(LinkKind::Ethernet, &p).tunnel_inner(&p), None);
        }
        // Teredo with an origin indication; the IPv6 length must fill the datagram.
        let teredo = |extra: usize| {
            let mut u = vec![0x0d, 0xd8, 0x30, 0x39];
            let mut t = vec![0, 0, 0, 0, 0, 0, 0, 0];
            t.extend_from_slice(&v6(58, 8));
            t.extend(std::iter::repeat_n(0, extra));
            u.extend_from_slice(&(8 + t.len() as u16).to_be_bytes());
            u.extend_from_slice(&[0, 0]);
            u.extend_from_slice(&t);
            v4_around(17, &u)
        };
        let p = teredo(0);
        let i = Layers::parse(LinkKind::Ethernet, &p)
            .tunnel_inner(&p)
            .unwrap();
        assert_eq!((i.l3_off, i.l4_off, i.l4_proto), (50, 90, 58));
        let p = teredo(1);
        assert_eq!(Layers::parse(LinkKind::Ethernet, &p).tunnel_inner(&p), None);
    }

    #[test]
    fn gre_versions_zero_and_one() {
        // Version 0 with a key, IPv4 inside.
        let mut g = vec![0x20, 0x00, 0x08, 0x00, 0, 0, 0, 7];
        g.extend_from_slice(&v4_around(17, &[0; 8])[14..]);
        let p = v4_around(47, &g);
        let i = Layers::parse(LinkKind::Ethernet, &p)
            .tunnel_inner(&p)
            .unwrap();
        assert_eq!((i.l3_off, i.l4_off, i.l4_proto), (42, 62, 17));
        // Version 1 (PPTP): key, sequence and acknowledgment, PPP 0xff03 0x0021.
        let mut g = vec![0x30, 0x81, 0x88, 0x0b, 0, 28, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0];
        g.extend_from_slice(&[0xff, 0x03, 0x00, 0x21]);
        g.extend_from_slice(&v4_around(17, &[0; 8])[14..]);
        let p = v4_around(47, &g);
        let i = Layers::parse(LinkKind::Ethernet, &p)
            .tunnel_inner(&p)
            .unwrap();
        assert_eq!((i.l3_off, i.l4_off, i.l4_proto), (54, 74, 17));
        // Recursion set: refused, as Suricata does.
        let mut p = p;
        p[34] |= 0x01;
        assert_eq!(Layers::parse(LinkKind::Ethernet, &p).tunnel_inner(&p), None);
        // Cut short anywhere: no panic.
        for n in 0..p.len() {
            let _ = Layers::parse(LinkKind::Ethernet, &p[..n]).tunnel_inner(&p[..n]);
        }
    }

    #[test]
    fn pppoe_session_inner_ip_behind_two_vlan_tags() {
        // dns.pcap frame 4: QinQ, PPPoE session 0x556a, PPP 0x0021, IPv4/UDP to port 53.
        let mut p = vec![
            0, 0, 0, 0, 0, 1, 0xd4, 0x94, 0xe8, 0x0e, 0xad, 0xc1, 0x81, 0x00,
        ];
        p.extend_from_slice(&[0x01, 0xa5, 0x81, 0x00, 0x03, 0x11, 0x88, 0x64]);
        p.extend_from_slice(&[0x11, 0x00, 0x55, 0x6a, 0x00, 0x3f, 0x00, 0x21]);
        p.extend_from_slice(&v4_around(17, &[0xb8, 0x97, 0x00, 0x35, 0, 8, 0, 0])[14..]);
        let o = Layers::parse(LinkKind::Ethernet, &p);
        // The outer walk is unchanged: PPPoE is an ethertype it does not decode.
        assert_eq!(
            (o.l3, o.ethertype, o.vlans, o.l3_off),
            (L3Kind::Other, 0x8864, 2, 22)
        );
        let i = o.tunnel_inner(&p).unwrap();
        assert_eq!(
            (i.l3, i.l3_off, i.l4_off, i.l4_proto),
            (L3Kind::Ipv4, 30, 50, 17)
        );
        assert_eq!((i.vlans, i.has_l4()), (2, true));
        // One-byte PPP protocol field (0x21): the IP header a byte earlier.
        let mut q = p.clone();
        q.remove(28);
        let i = Layers::parse(LinkKind::Ethernet, &q)
            .tunnel_inner(&q)
            .unwrap();
        assert_eq!((i.l3_off, i.l4_proto), (29, 17));
        // A zero PPPoE length carries nothing; LCP (0xc021) is not IP.
        let mut z = p.clone();
        z[27] = 0;
        assert_eq!(Layers::parse(LinkKind::Ethernet, &z).tunnel_inner(&z), None);
        let mut c = p.clone();
        c[28] = 0xc0;
        assert_eq!(Layers::parse(LinkKind::Ethernet, &c).tunnel_inner(&c), None);
        for n in 0..p.len() {
            let _ = Layers::parse(LinkKind::Ethernet, &p[..n]).tunnel_inner(&p[..n]);
        }
    }

    #[test]
    fn fabricpath_inner_ethernet_as_suricata() {
        // The merged trace's frame 39381: FabricPath (0x8903), two bytes, an Ethernet
        // frame with one VLAN tag, IPv4/TCP.
        let mut p = vec![0; 12];
        p.extend_from_slice(&[0x89, 0x03, 0x01, 0x03]);
        p.extend_from_slice(&[0; 12]);
        p.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
        p.extend_from_slice(&v4_around(6, &[0; 20])[12..]);
        let o = Layers::parse(LinkKind::Ethernet, &p);
        assert_eq!((o.l3, o.ethertype), (L3Kind::Other, 0x8903));
        let i = o.tunnel_inner(&p).unwrap();
        assert_eq!((i.l3_off, i.l4_off, i.l4_proto, i.vlans), (34, 54, 6, 1));
        for n in 0..p.len() {
            let _ = Layers::parse(LinkKind::Ethernet, &p[..n]).tunnel_inner(&p[..n]);
        }
    }

    /// A 60-byte Ethernet minimum frame: IPv4 with total length `total`, TCP's ports
    /// and the rest of its header in the frame whatever the total says.
    fn padded_tcp(total: u16) -> Vec<u8> {
        let mut p = v4_around(
            6,
            &[0x04, 0xd2, 0x00, 0x50, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02],
        );
        p[16..18].copy_from_slice(&total.to_be_bytes());
        p.resize(60, 0);
        p
    }

    #[test]
    fn the_transport_header_is_judged_inside_the_ip_total_length() {
        // Whole header inside the datagram; the padding after it is not the datagram.
        let l = Layers::parse(LinkKind::Ethernet, &padded_tcp(40));
        assert_eq!((l.l3, l.l3_end), (L3Kind::Ipv4, 54));
        assert!(l.has_l4());
        // The total cuts the TCP header: its ports sit in the padding.
        for total in [20, 24, 39] {
            let l = Layers::parse(LinkKind::Ethernet, &padded_tcp(total));
            assert_eq!(
                (l.l3, l.l3_end),
                (L3Kind::Ipv4, 14 + total),
                "total {total}"
            );
            assert!(!l.has_l4(), "total {total}");
        }
        // Longer than captured: today's truncated handling, the captured end.
        let l = Layers::parse(LinkKind::Ethernet, &padded_tcp(1500));
        assert_eq!(l.l3_end, 60);
        assert!(l.has_l4());
        let l = Layers::parse(LinkKind::Ethernet, &padded_tcp(1500)[..50]);
        assert_eq!(l.l3_end, 50);
        assert!(!l.has_l4());
        // Shorter than the header: malformed, on the fast case and the walk (options)
        // alike. 0, a segmentation offload's capture: the captured end.
        for total in [1, 19] {
            let l = Layers::parse(LinkKind::Ethernet, &padded_tcp(total));
            assert_eq!(l.l3, L3Kind::Malformed, "total {total}");
        }
        let l = Layers::parse(LinkKind::Ethernet, &padded_tcp(0));
        assert_eq!((l.l3, l.l3_end, l.has_l4()), (L3Kind::Ipv4, 60, true));
        let mut p = VLAN_V4_OPT_UDP;
        p[20..22].copy_from_slice(&23u16.to_be_bytes()); // below its 24-byte header
        assert_eq!(Layers::parse(LinkKind::Ethernet, &p).l3, L3Kind::Malformed);
        p[20..22].copy_from_slice(&31u16.to_be_bytes()); // UDP cut at 7 bytes
        let l = Layers::parse(LinkKind::Ethernet, &p);
        assert_eq!((l.l3, l.l3_end, l.has_l4()), (L3Kind::Ipv4, 49, false));
        // ICMP: its 4-byte fixed part inside the total, an echo's identifier not.
        let mut e = v4_around(1, &[8, 0, 0, 0, 0x12, 0x34, 0, 1]);
        e[16..18].copy_from_slice(&25u16.to_be_bytes());
        e.resize(60, 0);
        let l = Layers::parse(LinkKind::Ethernet, &e);
        assert_eq!((l.l3_end, l.has_l4()), (39, true));
    }

    #[test]
    fn ipv6_payload_length_bounds_extension_headers_and_transport() {
        // Hop-by-hop (8 bytes) then TCP, payload length 28: complete.
        let mut p = vec![0x60, 0, 0, 0, 0, 28, 0, 64];
        p.extend_from_slice(&[0; 32]);
        p.extend_from_slice(&[6, 0, 0, 0, 0, 0, 0, 0]);
        p.extend_from_slice(&[0; 20]);
        p.extend_from_slice(&[0; 12]); // trailing bytes past the datagram
        let l = Layers::parse(LinkKind::RawIp, &p);
        assert_eq!((l.l3_end, l.l4_off, l.has_l4()), (68, 48, true));
        // Payload length 27 cuts TCP; 4 cuts the hop-by-hop header itself.
        p[5] = 27;
        let l = Layers::parse(LinkKind::RawIp, &p);
        assert_eq!((l.l3, l.l3_end, l.has_l4()), (L3Kind::Ipv6, 67, false));
        p[5] = 4;
        let l = Layers::parse(LinkKind::RawIp, &p);
        assert_eq!((l.l3, l.l4_proto, l.has_l4()), (L3Kind::Ipv6, 0, false));
    }

    #[test]
    fn a_tunnel_inside_a_short_outer_datagram_is_not_decoded_from_the_padding() {
        // 6in4 whose outer total length ends inside the inner IPv6 header.
        let mut p = v4_around(41, &v6(17, 8));
        let full = Layers::parse(LinkKind::Ethernet, &p);
        assert!(full.tunnel_inner(&p).is_some());
        p[16..18].copy_from_slice(&(20u16 + 30).to_be_bytes());
        let l = Layers::parse(LinkKind::Ethernet, &p);
        assert_eq!(l.tunnel_inner(&p), None);
    }

    #[test]
    fn later_ipv4_fragment_has_no_l4() {
        let mut p = VLAN_V4_OPT_UDP;
        p[18 + 6] = 0x00;
        p[18 + 7] = 0x10; // fragment offset 16*8
        let l = Layers::parse(LinkKind::Ethernet, &p);
        assert!(l.is_later_fragment() && !l.has_l4());
    }
}
