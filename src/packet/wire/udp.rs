//! UDP header (RFC 768) and its checksum over the IPv4 or IPv6 pseudo header.

use super::{get16, ip_proto, set16, WireError};
use crate::packet::checksum;

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const LENGTH: usize = 4;
    pub const CHECKSUM: usize = 6;
    pub const PAYLOAD: usize = 8;
}

pub const HEADER_LEN: usize = field::PAYLOAD;

/// A view of a UDP datagram at the start of `buf`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Udp<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Udp<T> {
    #[inline]
    pub fn new_unchecked(buf: T) -> Self {
        Udp { buf }
    }

    /// Checks the 8-byte header and length >= 8. A length beyond the buffer (snapped
    /// capture) is accepted; the payload is clamped to the buffer.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let b = buf.as_ref();
        if b.len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        if usize::from(get16(b, field::LENGTH)) < HEADER_LEN {
            return Err(WireError::BadLength);
        }
        Ok(Udp { buf })
    }

    #[inline]
    pub fn into_inner(self) -> T {
        self.buf
    }
    #[inline]
    pub fn src_port(&self) -> u16 {
        get16(self.buf.as_ref(), field::SRC_PORT)
    }
    #[inline]
    pub fn dst_port(&self) -> u16 {
        get16(self.buf.as_ref(), field::DST_PORT)
    }
    /// Header plus payload length per the header.
    #[inline]
    pub fn len(&self) -> u16 {
        get16(self.buf.as_ref(), field::LENGTH)
    }
    /// The length field says there is no payload.
    #[inline]
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) <= HEADER_LEN
    }
    /// 0 means "no checksum" (allowed for IPv4 only).
    #[inline]
    pub fn checksum(&self) -> u16 {
        get16(self.buf.as_ref(), field::CHECKSUM)
    }
    #[inline]
    pub fn header_len(&self) -> usize {
        HEADER_LEN
    }
    /// The datagram's bytes as the length field bounds them (and the buffer).
    #[inline]
    fn datagram(&self) -> &[u8] {
        let b = self.buf.as_ref();
        &b[..usize::from(self.len()).min(b.len())]
    }
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let d = self.datagram();
        &d[HEADER_LEN.min(d.len())..]
    }
    /// Checksum is right given the pseudo-header sum (length = the UDP length field).
    /// A zero checksum ("none") is accepted: callers that need IPv6's mandatory checksum
    /// check `checksum() != 0` too.
    #[inline]
    pub fn verify_checksum(&self, pseudo: u16) -> bool {
        self.checksum() == 0 || checksum::add(pseudo, checksum::sum(self.datagram())) == 0xffff
    }
    #[inline]
    pub fn verify_checksum_v4(&self, src: [u8; 4], dst: [u8; 4]) -> bool {
        self.verify_checksum(checksum::pseudo_v4(src, dst, ip_proto::UDP, self.len()))
    }
    #[inline]
    pub fn verify_checksum_v6(&self, src: &[u8; 16], dst: &[u8; 16]) -> bool {
        self.checksum() != 0
            && self.verify_checksum(checksum::pseudo_v6(
                src,
                dst,
                ip_proto::UDP,
                u32::from(self.len()),
            ))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Udp<T> {
    #[inline]
    pub fn set_src_port(&mut self, v: u16) {
        set16(self.buf.as_mut(), field::SRC_PORT, v)
    }
    #[inline]
    pub fn set_dst_port(&mut self, v: u16) {
        set16(self.buf.as_mut(), field::DST_PORT, v)
    }
    #[inline]
    pub fn set_len(&mut self, v: u16) {
        set16(self.buf.as_mut(), field::LENGTH, v)
    }
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        set16(self.buf.as_mut(), field::CHECKSUM, v)
    }
    /// Computes the checksum given the pseudo-header sum; a computed 0 is sent as 0xffff
    /// because 0 means "none".
    pub fn fill_checksum(&mut self, pseudo: u16) {
        self.set_checksum(0);
        let c = !checksum::add(pseudo, checksum::sum(self.datagram()));
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }
    pub fn fill_checksum_v4(&mut self, src: [u8; 4], dst: [u8; 4]) {
        self.fill_checksum(checksum::pseudo_v4(src, dst, ip_proto::UDP, self.len()))
    }
    pub fn fill_checksum_v6(&mut self, src: &[u8; 16], dst: &[u8; 16]) {
        self.fill_checksum(checksum::pseudo_v6(
            src,
            dst,
            ip_proto::UDP,
            u32::from(self.len()),
        ))
    }
    // A checksum of 0 means none was sent: it must stay 0. Else the RFC 1624 result, with
    // 0 written as its equal 0xffff.
    #[inline]
    fn patch(&mut self, f: impl FnOnce(u16) -> u16) {
        let c = self.checksum();
        if c != 0 {
            let n = f(c);
            self.set_checksum(if n == 0 { 0xffff } else { n });
        }
    }
    /// Sets the source port and patches the checksum (unless it is 0 = none).
    #[inline]
    pub fn set_src_port_update(&mut self, v: u16) {
        let old = self.src_port();
        self.patch(|c| checksum::update16(c, old, v));
        self.set_src_port(v);
    }
    /// Sets the destination port and patches the checksum (unless it is 0 = none).
    #[inline]
    pub fn set_dst_port_update(&mut self, v: u16) {
        let old = self.dst_port();
        self.patch(|c| checksum::update16(c, old, v));
        self.set_dst_port(v);
    }
    /// Patches the checksum for a pseudo-header address change (4 or 16 bytes).
    #[inline]
    pub fn update_pseudo_addr(&mut self, old: &[u8], new: &[u8]) {
        self.patch(|c| checksum::update_bytes(c, old, new));
    }
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let len = usize::from(self.len());
        let b = self.buf.as_mut();
        let end = len.min(b.len());
        &mut b[HEADER_LEN.min(end)..end]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::wire::Ipv6;

    // A real DHCPv6 solicit over IPv6 (android.pcap), UDP checksum 0x51cf.
    const PKT: [u8; 100] = [
        0x60, 0x04, 0xd8, 0xa9, 0x00, 0x3c, 0x11, 0x01, 0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x4e, 0x6a,
        0xf6, 0xff, 0xfe, 0x9f, 0xf6, 0x27, 0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2,
        // udp
        0x02, 0x22, 0x02, 0x23, 0x00, 0x3c, 0x51, 0xcf, 0x01, 0xd8, 0xe4, 0xfe, 0x00, 0x01, 0x00,
        0x0e, 0x00, 0x01, 0x00, 0x01, 0x25, 0xe5, 0x14, 0x8e, 0x4c, 0x6a, 0xf6, 0x9f, 0xf6, 0x27,
        0x00, 0x03, 0x00, 0x0c, 0x0e, 0x00, 0x08, 0xca, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x08, 0x00, 0x02, 0x00, 0x00, 0x00, 0x06, 0x00, 0x04, 0x00, 0x17, 0x00, 0x18,
    ];

    #[test]
    fn parse_getters_and_real_checksum() {
        let ip = Ipv6::new_checked(&PKT[..]).unwrap();
        assert_eq!(
            (ip.traffic_class(), ip.flow_label(), ip.hop_limit()),
            (0, 0x4d8a9, 1)
        );
        let u = Udp::new_checked(ip.payload()).unwrap();
        assert_eq!(
            (u.src_port(), u.dst_port(), u.len(), u.checksum()),
            (546, 547, 60, 0x51cf)
        );
        assert_eq!(u.payload().len(), 52);
        assert!(!u.is_empty());
        assert!(u.verify_checksum_v6(&ip.src(), &ip.dst()));
        assert!(!u.verify_checksum_v6(&[0; 16], &ip.dst()));
    }

    #[test]
    fn rewrite_and_emit() {
        let mut b = PKT;
        let (s, d) = (
            Ipv6::new_unchecked(&PKT[..]).src(),
            Ipv6::new_unchecked(&PKT[..]).dst(),
        );
        let mut u = Udp::new_checked(&mut b[40..]).unwrap();
        u.set_src_port_update(1);
        u.set_dst_port_update(65535);
        let new = [0x20; 16];
        u.update_pseudo_addr(&s, &new);
        assert!(u.verify_checksum_v6(&new, &d));
        let c = u.checksum();
        u.fill_checksum_v6(&new, &d);
        assert_eq!(c, u.checksum());
        // Emit over IPv4 with no checksum; port rewrites must keep it 0.
        let mut b = [0u8; 12];
        let mut u = Udp::new_unchecked(&mut b[..]);
        u.set_len(12);
        u.set_src_port(53);
        u.payload_mut().copy_from_slice(b"ping");
        u.set_dst_port_update(9);
        assert_eq!((u.checksum(), u.dst_port()), (0, 9));
        assert!(u.verify_checksum_v4([1, 1, 1, 1], [2, 2, 2, 2]));
        u.fill_checksum_v4([1, 1, 1, 1], [2, 2, 2, 2]);
        assert!(u.checksum() != 0 && u.verify_checksum_v4([1, 1, 1, 1], [2, 2, 2, 2]));
        assert_eq!(u.payload(), b"ping");
    }

    #[test]
    fn bad_inputs_are_errors() {
        for n in 0..8 {
            assert_eq!(
                Udp::new_checked(&PKT[40..40 + n]),
                Err(WireError::Truncated)
            );
        }
        assert_eq!(
            Udp::new_checked(&[0, 1, 0, 2, 0, 7, 0, 0][..]),
            Err(WireError::BadLength)
        );
        // Snapped: length beyond the buffer, payload clamped.
        let u = Udp::new_checked(&PKT[40..50]).unwrap();
        assert_eq!(u.payload().len(), 2);
        assert!(!u.verify_checksum_v6(&[0; 16], &[0; 16]));
    }
}
