//! IPv6 fixed header (RFC 8200) and a bounded extension-header walker.

use super::{arr, get16, get32, ip_proto, set16, set32, WireError};
use crate::packet::checksum;
use std::net::Ipv6Addr;

mod field {
    pub const VER_TC_FLOW: usize = 0;
    pub const PAYLOAD_LEN: usize = 4;
    pub const NEXT_HEADER: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: usize = 8;
    pub const DST: usize = 24;
    pub const PAYLOAD: usize = 40;
    // Within an extension header.
    pub const EXT_NEXT: usize = 0;
    pub const EXT_LEN: usize = 1;
    pub const FRAG_OFF: usize = 2;
    pub const FRAG_IDENT: usize = 4;
}

pub const HEADER_LEN: usize = field::PAYLOAD;
/// Extension headers beyond this many are rejected (a chain this long is an attack).
pub const MAX_EXT_HEADERS: usize = 16;

/// A view of an IPv6 header (and what follows) at the start of `buf`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv6<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Ipv6<T> {
    #[inline]
    pub fn new_unchecked(buf: T) -> Self {
        Ipv6 { buf }
    }

    /// Checks the 40-byte header is present and the version is 6. A payload length beyond
    /// the buffer (snapped capture) is accepted; [`Ipv6::payload`] is then clamped.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let b = buf.as_ref();
        if b.len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        if b[0] >> 4 != 6 {
            return Err(WireError::BadVersion);
        }
        Ok(Ipv6 { buf })
    }

    #[inline]
    pub fn into_inner(self) -> T {
        self.buf
    }
    #[inline]
    pub fn version(&self) -> u8 {
        self.buf.as_ref()[0] >> 4
    }
    #[inline]
    pub fn traffic_class(&self) -> u8 {
        (get32(self.buf.as_ref(), field::VER_TC_FLOW) >> 20) as u8
    }
    /// 20-bit flow label.
    #[inline]
    pub fn flow_label(&self) -> u32 {
        get32(self.buf.as_ref(), field::VER_TC_FLOW) & 0x000f_ffff
    }
    #[inline]
    pub fn payload_len(&self) -> u16 {
        get16(self.buf.as_ref(), field::PAYLOAD_LEN)
    }
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buf.as_ref()[field::NEXT_HEADER]
    }
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.buf.as_ref()[field::HOP_LIMIT]
    }
    #[inline]
    pub fn src(&self) -> [u8; 16] {
        arr(self.buf.as_ref(), field::SRC)
    }
    #[inline]
    pub fn dst(&self) -> [u8; 16] {
        arr(self.buf.as_ref(), field::DST)
    }
    #[inline]
    pub fn src_addr(&self) -> Ipv6Addr {
        self.src().into()
    }
    #[inline]
    pub fn dst_addr(&self) -> Ipv6Addr {
        self.dst().into()
    }
    #[inline]
    pub fn header_len(&self) -> usize {
        HEADER_LEN
    }
    /// Bytes after the fixed header up to the payload length (extension headers included),
    /// clamped to the buffer.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let b = self.buf.as_ref();
        let end = (HEADER_LEN + usize::from(self.payload_len())).min(b.len());
        &b[HEADER_LEN.min(end)..end]
    }
    /// The payload length extends past the buffer.
    #[inline]
    pub fn is_truncated(&self) -> bool {
        HEADER_LEN + usize::from(self.payload_len()) > self.buf.as_ref().len()
    }
    /// Walks the extension headers; offsets in the result are from the start of this view.
    #[inline]
    pub fn walk_ext(&self) -> Result<ExtWalk, WireError> {
        let b = self.buf.as_ref();
        let end = (HEADER_LEN + usize::from(self.payload_len())).min(b.len());
        walk_ext(&b[..end], self.next_header(), HEADER_LEN)
    }
    /// Pseudo-header sum for an upper-layer message of `len` bytes with next header `nh`
    /// (the final one, after extension headers).
    #[inline]
    pub fn pseudo_sum(&self, nh: u8, len: u32) -> u16 {
        checksum::pseudo_v6(&self.src(), &self.dst(), nh, len)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6<T> {
    /// Writes version 6, traffic class and flow label at once.
    #[inline]
    pub fn set_version_tc_flow(&mut self, tc: u8, flow: u32) {
        let w = (6 << 28) | (u32::from(tc) << 20) | (flow & 0x000f_ffff);
        set32(self.buf.as_mut(), field::VER_TC_FLOW, w)
    }
    #[inline]
    pub fn set_traffic_class(&mut self, tc: u8) {
        self.set_version_tc_flow(tc, self.flow_label())
    }
    #[inline]
    pub fn set_flow_label(&mut self, flow: u32) {
        self.set_version_tc_flow(self.traffic_class(), flow)
    }
    #[inline]
    pub fn set_payload_len(&mut self, v: u16) {
        set16(self.buf.as_mut(), field::PAYLOAD_LEN, v)
    }
    #[inline]
    pub fn set_next_header(&mut self, v: u8) {
        self.buf.as_mut()[field::NEXT_HEADER] = v
    }
    #[inline]
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buf.as_mut()[field::HOP_LIMIT] = v
    }
    #[inline]
    pub fn set_src(&mut self, a: [u8; 16]) {
        self.buf.as_mut()[field::SRC..field::DST].copy_from_slice(&a)
    }
    #[inline]
    pub fn set_dst(&mut self, a: [u8; 16]) {
        self.buf.as_mut()[field::DST..field::PAYLOAD].copy_from_slice(&a)
    }
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = (HEADER_LEN + usize::from(self.payload_len())).min(self.buf.as_ref().len());
        &mut self.buf.as_mut()[HEADER_LEN.min(end)..end]
    }
}

/// Fragment header contents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FragInfo {
    /// Offset in 8-byte units.
    pub offset: u16,
    pub more: bool,
    pub ident: u32,
}

/// The result of [`walk_ext`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtWalk {
    /// The first next-header value that is not a skippable extension header (the transport
    /// protocol, or 59 / ESP / anything unknown). After a non-first fragment, the value from
    /// the fragment header: its payload is not a header.
    pub next_header: u8,
    /// Offset where that header starts (may equal the buffer length: nothing follows).
    pub offset: usize,
    /// Set when a fragment header was seen.
    pub frag: Option<FragInfo>,
}

impl ExtWalk {
    /// A transport header starts at `offset` (not a later fragment).
    #[inline]
    pub fn has_transport(&self) -> bool {
        self.frag.is_none_or(|f| f.offset == 0)
    }
}

/// Skips IPv6 extension headers in `b` starting at `offset` with first type `next`:
/// hop-by-hop (0), routing (43), fragment (44), destination options (60), AH (51),
/// mobility (135), HIP (139), shim6 (140). Stops at the first other value, after a
/// non-first fragment, or fails with `Truncated` when a header runs past `b` and
/// `TooManyHeaders` after [`MAX_EXT_HEADERS`]. Never panics.
pub fn walk_ext(b: &[u8], mut next: u8, mut offset: usize) -> Result<ExtWalk, WireError> {
    let mut frag = None;
    for _ in 0..MAX_EXT_HEADERS {
        let len = match next {
            ip_proto::HOPOPT
            | ip_proto::IPV6_ROUTE
            | ip_proto::IPV6_OPTS
            | ip_proto::MOBILITY
            | ip_proto::HIP
            | ip_proto::SHIM6 => 8 * (usize::from(ext_byte(b, offset, field::EXT_LEN)?) + 1),
            // AH counts 32-bit words minus 2 (RFC 4302).
            ip_proto::AH => 4 * (usize::from(ext_byte(b, offset, field::EXT_LEN)?) + 2),
            ip_proto::IPV6_FRAG => 8,
            _ => {
                return Ok(ExtWalk {
                    next_header: next,
                    offset,
                    frag,
                })
            }
        };
        if offset.checked_add(len).is_none_or(|end| end > b.len()) {
            return Err(WireError::Truncated);
        }
        if next == ip_proto::IPV6_FRAG {
            let w = get16(b, offset + field::FRAG_OFF);
            let f = FragInfo {
                offset: w >> 3,
                more: w & 1 != 0,
                ident: get32(b, offset + field::FRAG_IDENT),
            };
            frag = Some(f);
            next = b[offset + field::EXT_NEXT];
            offset += len;
            if f.offset != 0 {
                return Ok(ExtWalk {
                    next_header: next,
                    offset,
                    frag,
                });
            }
            continue;
        }
        next = b[offset + field::EXT_NEXT];
        offset += len;
    }
    match next {
        ip_proto::HOPOPT
        | ip_proto::IPV6_ROUTE
        | ip_proto::IPV6_FRAG
        | ip_proto::IPV6_OPTS
        | ip_proto::AH
        | ip_proto::MOBILITY
        | ip_proto::HIP
        | ip_proto::SHIM6 => Err(WireError::TooManyHeaders),
        _ => Ok(ExtWalk {
            next_header: next,
            offset,
            frag,
        }),
    }
}

#[inline]
fn ext_byte(b: &[u8], offset: usize, at: usize) -> Result<u8, WireError> {
    // The fixed 8 bytes of the extension header must be there before reading its length.
    if offset.checked_add(8).is_none_or(|end| end > b.len()) {
        return Err(WireError::Truncated);
    }
    Ok(b[offset + at])
}

#[cfg(test)]
mod tests {
    use super::*;

    // A real MLDv2 report (android.pcap): IPv6, hop-by-hop with router alert, ICMPv6 143.
    const MLD: [u8; 76] = [
        0x60, 0x00, 0x00, 0x00, 0x00, 0x24, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x16, // fixed header
        0x3a, 0x00, 0x05, 0x02, 0x00, 0x00, 0x01, 0x00, // hop-by-hop, next = 58
        0x8f, 0x00, 0x78, 0xc3, 0x00, 0x00, 0x00, 0x01, 0x04, 0x00, 0x00, 0x00, 0xff, 0x02, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0x01, 0xff, 0x9f, 0xf6, 0x27,
    ];

    #[test]
    fn parse_getters_and_walk() {
        let ip = Ipv6::new_checked(&MLD[..]).unwrap();
        assert_eq!(
            (ip.version(), ip.traffic_class(), ip.flow_label()),
            (6, 0, 0)
        );
        assert_eq!(
            (ip.payload_len(), ip.next_header(), ip.hop_limit()),
            (36, 0, 1)
        );
        assert_eq!(ip.src(), [0; 16]);
        assert_eq!(ip.dst_addr(), "ff02::16".parse::<Ipv6Addr>().unwrap());
        assert_eq!(ip.payload().len(), 36);
        let w = ip.walk_ext().unwrap();
        assert_eq!(
            w,
            ExtWalk {
                next_header: 58,
                offset: 48,
                frag: None
            }
        );
        assert!(w.has_transport());
        // The ICMPv6 checksum verifies over the pseudo header with the final next header.
        let l4 = &MLD[w.offset..];
        let s = checksum::add(ip.pseudo_sum(58, l4.len() as u32), checksum::sum(l4));
        assert_eq!(s, 0xffff);
    }

    #[test]
    fn setters_round_trip() {
        let mut b = MLD;
        let mut ip = Ipv6::new_checked(&mut b[..]).unwrap();
        ip.set_version_tc_flow(0xb8, 0xabcde);
        ip.set_flow_label(0x12345);
        ip.set_traffic_class(0x2a);
        ip.set_payload_len(20);
        ip.set_next_header(6);
        ip.set_hop_limit(255);
        ip.set_src([1; 16]);
        ip.set_dst([2; 16]);
        ip.payload_mut().fill(7);
        let ip = Ipv6::new_checked(&b[..]).unwrap();
        assert_eq!(
            (ip.version(), ip.traffic_class(), ip.flow_label()),
            (6, 0x2a, 0x12345)
        );
        assert_eq!(
            (ip.payload_len(), ip.next_header(), ip.hop_limit()),
            (20, 6, 255)
        );
        assert_eq!((ip.src(), ip.dst()), ([1; 16], [2; 16]));
        assert_eq!(ip.payload(), &[7; 20]);
        assert_eq!(b[60], MLD[60]);
    }

    #[test]
    fn walk_chain_with_fragment_and_ah() {
        // dest opts (16 bytes) -> AH (len 4 => 24 bytes) -> fragment (off 0, M) -> UDP
        let mut b = vec![ip_proto::AH, 1];
        b.extend_from_slice(&[0; 14]);
        b.extend_from_slice(&[ip_proto::IPV6_FRAG, 4]);
        b.extend_from_slice(&[0; 22]);
        b.extend_from_slice(&[ip_proto::UDP, 0, 0x00, 0x01, 0xde, 0xad, 0xbe, 0xef]);
        b.extend_from_slice(&[0; 8]);
        let w = walk_ext(&b, ip_proto::IPV6_OPTS, 0).unwrap();
        let f = FragInfo {
            offset: 0,
            more: true,
            ident: 0xdeadbeef,
        };
        assert_eq!(
            w,
            ExtWalk {
                next_header: 17,
                offset: 48,
                frag: Some(f)
            }
        );
        assert!(w.has_transport());
        // Later fragment: stop right after the fragment header.
        b[42] = 0x01;
        b[43] = 0x00; // offset 32
        let w = walk_ext(&b, ip_proto::IPV6_OPTS, 0).unwrap();
        assert_eq!(
            (w.next_header, w.offset, w.frag.unwrap().offset),
            (17, 48, 32)
        );
        assert!(!w.has_transport());
        // Truncated anywhere inside the chain: an error, never a panic.
        for n in 0..48 {
            assert_eq!(
                walk_ext(&b[..n], ip_proto::IPV6_OPTS, 0),
                Err(WireError::Truncated)
            );
        }
        // Offsets beyond the buffer are fine too.
        assert_eq!(walk_ext(&b, 0, 1000), Err(WireError::Truncated));
        assert_eq!(walk_ext(&b, 6, usize::MAX).unwrap().next_header, 6);
    }

    #[test]
    fn walk_skips_every_listed_type() {
        // routing (43) -> mobility (135) -> HIP (139) -> shim6 (140) -> hop-by-hop (0)
        // -> ESP (50, not skippable: the walk stops there).
        let chain = [
            ip_proto::MOBILITY,
            ip_proto::HIP,
            ip_proto::SHIM6,
            0,
            ip_proto::ESP,
        ];
        let mut b = Vec::new();
        for (i, next) in chain.iter().enumerate() {
            let words = i % 2; // alternate 8- and 16-byte headers
            b.push(*next);
            b.push(words as u8);
            b.extend(std::iter::repeat_n(0xaa, 6 + 8 * words));
        }
        let w = walk_ext(&b, ip_proto::IPV6_ROUTE, 0).unwrap();
        assert_eq!(
            w,
            ExtWalk {
                next_header: ip_proto::ESP,
                offset: b.len(),
                frag: None
            }
        );
        // No next header (59) and unknown values stop the walk in place.
        assert_eq!(walk_ext(&b, ip_proto::IPV6_NONXT, 3).unwrap().offset, 3);
        assert_eq!(walk_ext(&b, 253, 0).unwrap().next_header, 253);
    }

    #[test]
    fn walk_is_bounded() {
        let b = [0u8; 8 * 20]; // 20 hop-by-hop headers each pointing at another
        assert_eq!(walk_ext(&b, 0, 0), Err(WireError::TooManyHeaders));
        let mut b = [0u8; 8 * MAX_EXT_HEADERS + 8];
        b[8 * (MAX_EXT_HEADERS - 1)] = ip_proto::TCP;
        assert_eq!(walk_ext(&b, 0, 0).unwrap().offset, 8 * MAX_EXT_HEADERS);
    }

    #[test]
    fn bad_inputs_are_errors() {
        for n in 0..40 {
            assert_eq!(Ipv6::new_checked(&MLD[..n]), Err(WireError::Truncated));
        }
        let mut b = MLD;
        b[0] = 0x45;
        assert_eq!(Ipv6::new_checked(&b[..]), Err(WireError::BadVersion));
        // Hop-by-hop cut short within the payload length.
        let ip = Ipv6::new_checked(&MLD[..44]).unwrap();
        assert!(ip.is_truncated());
        assert_eq!(ip.walk_ext(), Err(WireError::Truncated));
    }
}
