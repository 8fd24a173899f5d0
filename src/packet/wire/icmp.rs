//! ICMP for IPv4 (RFC 792): type, code, checksum over the whole message, echo fields.

use super::{get16, set16, WireError};
use crate::packet::checksum;

mod field {
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: usize = 2;
    pub const ECHO_IDENT: usize = 4;
    pub const ECHO_SEQ: usize = 6;
    pub const PAYLOAD: usize = 8;
}

pub const HEADER_LEN: usize = field::PAYLOAD;
pub const ECHO_REPLY: u8 = 0;
pub const DEST_UNREACHABLE: u8 = 3;
pub const ECHO_REQUEST: u8 = 8;
pub const TIME_EXCEEDED: u8 = 11;

/// A view of an ICMP message: `buf` is the whole message (the checksum covers it all).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Icmp<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Icmp<T> {
    #[inline]
    pub fn new_unchecked(buf: T) -> Self {
        Icmp { buf }
    }
    /// Checks the 8-byte header (type, code, checksum, 4 type-specific bytes).
    #[inline]
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        if buf.as_ref().len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        Ok(Icmp { buf })
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
    /// Echo identifier (meaningful for echo request/reply).
    #[inline]
    pub fn echo_ident(&self) -> u16 {
        get16(self.buf.as_ref(), field::ECHO_IDENT)
    }
    /// Echo sequence number (meaningful for echo request/reply).
    #[inline]
    pub fn echo_seq(&self) -> u16 {
        get16(self.buf.as_ref(), field::ECHO_SEQ)
    }
    #[inline]
    pub fn header_len(&self) -> usize {
        HEADER_LEN
    }
    /// Bytes after the 8-byte header (echo data, or the quoted datagram of an error).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let b = self.buf.as_ref();
        &b[HEADER_LEN.min(b.len())..]
    }
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        checksum::sum(self.buf.as_ref()) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmp<T> {
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
    /// Sets the echo identifier and patches the checksum (ICMP query NAT rewrites it).
    #[inline]
    pub fn set_echo_ident_update(&mut self, v: u16) {
        let c = checksum::update16(self.checksum(), self.echo_ident(), v);
        self.set_echo_ident(v);
        self.set_checksum(c);
    }
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(self.buf.as_ref());
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
    use crate::packet::wire::Ipv4;

    // A real ping to 8.8.8.8 (googledns_android10.pcap): 56 data bytes.
    fn ping() -> Vec<u8> {
        let mut p = vec![
            0x45, 0x00, 0x00, 0x54, 0x97, 0xd0, 0x40, 0x00, 0x40, 0x01, 0xd0, 0x81, 0xc0, 0xa8,
            0x01, 0x9f, 0x08, 0x08, 0x08, 0x08, // ipv4
            0x08, 0x00, 0xe0, 0x95, 0x00, 0x02, 0x00, 0x01, // icmp
            0x7a, 0x6d, 0xec, 0x5e, 0x00, 0x00, 0x00, 0x00, 0xea, 0xc7, 0x07, 0x00, 0x00, 0x00,
            0x00, 0x00,
        ];
        p.extend(0x10..=0x37u8);
        p
    }

    #[test]
    fn parse_getters_and_real_checksum() {
        let p = ping();
        let ip = Ipv4::new_checked(&p[..]).unwrap();
        assert!(ip.verify_checksum());
        let m = Icmp::new_checked(ip.payload()).unwrap();
        assert_eq!(
            (m.msg_type(), m.code(), m.checksum()),
            (ECHO_REQUEST, 0, 0xe095)
        );
        assert_eq!(
            (m.echo_ident(), m.echo_seq(), m.payload().len()),
            (2, 1, 56)
        );
        assert!(m.verify_checksum());
    }

    #[test]
    fn reply_and_nat() {
        let mut p = ping();
        let mut m = Icmp::new_checked(&mut p[20..]).unwrap();
        m.set_msg_type(ECHO_REPLY);
        m.set_code(0);
        m.fill_checksum();
        assert!(m.verify_checksum());
        m.set_echo_ident_update(0xbeef);
        m.set_echo_seq(m.echo_seq());
        assert!(m.verify_checksum());
        m.payload_mut()[0] ^= 1;
        assert!(!m.verify_checksum());
        assert_eq!(m.echo_ident(), 0xbeef);
    }

    #[test]
    fn truncated_is_error() {
        let p = ping();
        for n in 0..8 {
            assert_eq!(Icmp::new_checked(&p[20..20 + n]), Err(WireError::Truncated));
        }
    }
}
