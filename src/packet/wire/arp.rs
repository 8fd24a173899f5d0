//! ARP for Ethernet hardware and IPv4 protocol addresses (RFC 826).

use super::{arr, ethertype, get16, set16, WireError};

mod field {
    pub const HTYPE: usize = 0;
    pub const PTYPE: usize = 2;
    pub const HLEN: usize = 4;
    pub const PLEN: usize = 5;
    pub const OP: usize = 6;
    pub const SHA: usize = 8;
    pub const SPA: usize = 14;
    pub const THA: usize = 18;
    pub const TPA: usize = 24;
    pub const END: usize = 28;
}

pub const HEADER_LEN: usize = field::END;
pub const HTYPE_ETHERNET: u16 = 1;
pub const OP_REQUEST: u16 = 1;
pub const OP_REPLY: u16 = 2;

/// A view of an Ethernet/IPv4 ARP packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arp<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Arp<T> {
    #[inline]
    pub fn new_unchecked(buf: T) -> Self {
        Arp { buf }
    }

    /// Wraps `buf` if it holds 28 bytes of Ethernet/IPv4 ARP.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let b = buf.as_ref();
        if b.len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        let a = Arp::new_unchecked(b);
        if a.htype() != HTYPE_ETHERNET
            || a.ptype() != ethertype::IPV4
            || a.hlen() != 6
            || a.plen() != 4
        {
            return Err(WireError::Unsupported);
        }
        Ok(Arp { buf })
    }

    #[inline]
    pub fn into_inner(self) -> T {
        self.buf
    }
    #[inline]
    pub fn htype(&self) -> u16 {
        get16(self.buf.as_ref(), field::HTYPE)
    }
    #[inline]
    pub fn ptype(&self) -> u16 {
        get16(self.buf.as_ref(), field::PTYPE)
    }
    #[inline]
    pub fn hlen(&self) -> u8 {
        self.buf.as_ref()[field::HLEN]
    }
    #[inline]
    pub fn plen(&self) -> u8 {
        self.buf.as_ref()[field::PLEN]
    }
    /// 1 = request, 2 = reply.
    #[inline]
    pub fn op(&self) -> u16 {
        get16(self.buf.as_ref(), field::OP)
    }
    /// Sender hardware address.
    #[inline]
    pub fn sha(&self) -> [u8; 6] {
        arr(self.buf.as_ref(), field::SHA)
    }
    /// Sender protocol address.
    #[inline]
    pub fn spa(&self) -> [u8; 4] {
        arr(self.buf.as_ref(), field::SPA)
    }
    /// Target hardware address.
    #[inline]
    pub fn tha(&self) -> [u8; 6] {
        arr(self.buf.as_ref(), field::THA)
    }
    /// Target protocol address.
    #[inline]
    pub fn tpa(&self) -> [u8; 4] {
        arr(self.buf.as_ref(), field::TPA)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Arp<T> {
    /// Writes the fixed Ethernet/IPv4 type and length fields.
    pub fn set_eth_ipv4(&mut self) {
        let b = self.buf.as_mut();
        set16(b, field::HTYPE, HTYPE_ETHERNET);
        set16(b, field::PTYPE, ethertype::IPV4);
        b[field::HLEN] = 6;
        b[field::PLEN] = 4;
    }
    #[inline]
    pub fn set_op(&mut self, v: u16) {
        set16(self.buf.as_mut(), field::OP, v)
    }
    #[inline]
    pub fn set_sha(&mut self, a: [u8; 6]) {
        self.buf.as_mut()[field::SHA..field::SPA].copy_from_slice(&a)
    }
    #[inline]
    pub fn set_spa(&mut self, a: [u8; 4]) {
        self.buf.as_mut()[field::SPA..field::THA].copy_from_slice(&a)
    }
    #[inline]
    pub fn set_tha(&mut self, a: [u8; 6]) {
        self.buf.as_mut()[field::THA..field::TPA].copy_from_slice(&a)
    }
    #[inline]
    pub fn set_tpa(&mut self, a: [u8; 4]) {
        self.buf.as_mut()[field::TPA..field::END].copy_from_slice(&a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Who has 192.168.1.1? Tell 192.168.1.100 (from a real capture).
    const REQ: [u8; 28] = [
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x00, 0x0c, 0x29, 0x12, 0x34, 0x56, 192,
        168, 1, 100, 0, 0, 0, 0, 0, 0, 192, 168, 1, 1,
    ];

    #[test]
    fn parse_getters() {
        let a = Arp::new_checked(&REQ[..]).unwrap();
        assert_eq!(
            (a.htype(), a.ptype(), a.hlen(), a.plen()),
            (1, 0x0800, 6, 4)
        );
        assert_eq!(a.op(), OP_REQUEST);
        assert_eq!(a.sha(), [0x00, 0x0c, 0x29, 0x12, 0x34, 0x56]);
        assert_eq!(a.spa(), [192, 168, 1, 100]);
        assert_eq!(a.tha(), [0; 6]);
        assert_eq!(a.tpa(), [192, 168, 1, 1]);
    }

    #[test]
    fn emit_reply() {
        let mut b = [0u8; 28];
        let mut a = Arp::new_unchecked(&mut b[..]);
        a.set_eth_ipv4();
        a.set_op(OP_REPLY);
        a.set_sha([1, 2, 3, 4, 5, 6]);
        a.set_spa([192, 168, 1, 1]);
        a.set_tha(REQ[8..14].try_into().unwrap());
        a.set_tpa([192, 168, 1, 100]);
        let a = Arp::new_checked(&b[..]).unwrap();
        assert_eq!(
            (a.op(), a.sha(), a.spa()),
            (2, [1, 2, 3, 4, 5, 6], [192, 168, 1, 1])
        );
        assert_eq!(
            (a.tha(), a.tpa()),
            (REQ[8..14].try_into().unwrap(), [192, 168, 1, 100])
        );
    }

    #[test]
    fn rejects_short_and_foreign() {
        for n in 0..28 {
            assert_eq!(Arp::new_checked(&REQ[..n]), Err(WireError::Truncated));
        }
        let mut b = REQ;
        b[1] = 6; // IEEE 802 hardware
        assert_eq!(Arp::new_checked(&b[..]), Err(WireError::Unsupported));
    }
}
