//! ICMPv6 (RFC 4443): type, code, checksum over the IPv6 pseudo header, echo fields.

use super::{get16, ip_proto, set16, WireError};
use crate::packet::checksum;

mod field {
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: usize = 2;
    pub const ECHO_IDENT: usize = 4;
    pub const ECHO_SEQ: usize = 6;
    pub const PAYLOAD: usize = 8;
}

/// Type, code, checksum; the next 4 bytes are type-specific but always present.
pub const HEADER_LEN: usize = field::PAYLOAD;
pub const ECHO_REQUEST: u8 = 128;
pub const ECHO_REPLY: u8 = 129;
pub const NEIGHBOR_SOLICIT: u8 = 135;
pub const NEIGHBOR_ADVERT: u8 = 136;

/// A view of an ICMPv6 message: `buf` is the whole message (the checksum covers it all).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Icmpv6<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Icmpv6<T> {
    #[inline]
    pub fn new_unchecked(buf: T) -> Self {
        Icmpv6 { buf }
    }
    /// Checks the 8-byte header.
    #[inline]
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        if buf.as_ref().len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        Ok(Icmpv6 { buf })
    }
    #[inline]
    pub fn into_inner(self) -> T {
        self.buf
    }
    #[inline]
    pub fn msg_type(&self) -> u8 {
        self.buf.as_ref()[field::TYPE]
    }
    #[inline]
    pub fn code(&self) -> u8 {
        self.buf.as_ref()[field::CODE]
    }
    #[inline]
    pub fn checksum(&self) -> u16 {
        get16(self.buf.as_ref(), field::CHECKSUM)
    }
    #[inline]
    pub fn echo_ident(&self) -> u16 {
        get16(self.buf.as_ref(), field::ECHO_IDENT)
    }
    #[inline]
    pub fn echo_seq(&self) -> u16 {
        get16(self.buf.as_ref(), field::ECHO_SEQ)
    }
    #[inline]
    pub fn header_len(&self) -> usize {
        HEADER_LEN
    }
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let b = self.buf.as_ref();
        &b[HEADER_LEN.min(b.len())..]
    }
    #[inline]
    fn pseudo(&self, src: &[u8; 16], dst: &[u8; 16]) -> u16 {
        let len = self.buf.as_ref().len().min(u32::MAX as usize) as u32;
        checksum::pseudo_v6(src, dst, ip_proto::ICMPV6, len)
    }
    #[inline]
    pub fn verify_checksum(&self, src: &[u8; 16], dst: &[u8; 16]) -> bool {
        checksum::add(self.pseudo(src, dst), checksum::sum(self.buf.as_ref())) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv6<T> {
    #[inline]
    pub fn set_msg_type(&mut self, v: u8) {
        self.buf.as_mut()[field::TYPE] = v
    }
    #[inline]
    pub fn set_code(&mut self, v: u8) {
        self.buf.as_mut()[field::CODE] = v
    }
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        set16(self.buf.as_mut(), field::CHECKSUM, v)
    }
    #[inline]
    pub fn set_echo_ident(&mut self, v: u16) {
        set16(self.buf.as_mut(), field::ECHO_IDENT, v)
    }
    #[inline]
    pub fn set_echo_seq(&mut self, v: u16) {
        set16(self.buf.as_mut(), field::ECHO_SEQ, v)
    }
    pub fn fill_checksum(&mut self, src: &[u8; 16], dst: &[u8; 16]) {
        self.set_checksum(0);
        let c = !checksum::add(self.pseudo(src, dst), checksum::sum(self.buf.as_ref()));
        self.set_checksum(c);
    }
    /// Patches the checksum for a pseudo-header address change (NAT66 / NPTv6).
    #[inline]
    pub fn update_pseudo_addr(&mut self, old: &[u8; 16], new: &[u8; 16]) {
        let c = checksum::update_bytes(self.checksum(), old, new);
        self.set_checksum(c);
    }
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let b = self.buf.as_mut();
        let start = HEADER_LEN.min(b.len());
        &mut b[start..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::wire::Ipv6;

    // A real neighbour solicitation (android.pcap), checksum 0x4b2e.
    const NS: [u8; 64] = [
        0x60, 0x00, 0x00, 0x00, 0x00, 0x18, 0x3a, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff, 0x9f, 0xf6, 0x27, // ipv6
        0x87, 0x00, 0x4b, 0x2e, 0x00, 0x00, 0x00, 0x00, 0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x4e, 0x6a,
        0xf6, 0xff, 0xfe, 0x9f, 0xf6, 0x27,
    ];

    #[test]
    fn parse_getters_and_real_checksum() {
        let ip = Ipv6::new_checked(&NS[..]).unwrap();
        let m = Icmpv6::new_checked(ip.payload()).unwrap();
        assert_eq!(
            (m.msg_type(), m.code(), m.checksum()),
            (NEIGHBOR_SOLICIT, 0, 0x4b2e)
        );
        assert_eq!(m.payload(), &NS[48..]);
        assert!(m.verify_checksum(&ip.src(), &ip.dst()));
        assert!(!m.verify_checksum(&[1; 16], &ip.dst()));
    }

    #[test]
    fn emit_echo_and_nat() {
        let (s, d) = ([0x20; 16], [0x30; 16]);
        let mut b = [0u8; 13];
        let mut m = Icmpv6::new_unchecked(&mut b[..]);
        m.set_msg_type(ECHO_REQUEST);
        m.set_code(0);
        m.set_echo_ident(0x1234);
        m.set_echo_seq(7);
        m.payload_mut().copy_from_slice(b"hello");
        m.fill_checksum(&s, &d);
        assert!(m.verify_checksum(&s, &d));
        m.update_pseudo_addr(&s, &[0x21; 16]);
        assert!(m.verify_checksum(&[0x21; 16], &d));
        let m = Icmpv6::new_checked(&b[..]).unwrap();
        assert_eq!(
            (m.msg_type(), m.echo_ident(), m.echo_seq()),
            (128, 0x1234, 7)
        );
        assert_eq!(m.payload(), b"hello");
    }

    #[test]
    fn truncated_is_error() {
        for n in 0..8 {
            assert_eq!(
                Icmpv6::new_checked(&NS[40..40 + n]),
                Err(WireError::Truncated)
            );
        }
    }
}
