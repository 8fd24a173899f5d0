//! TCP header (RFC 9293) and its checksum over the IPv4 or IPv6 pseudo header.

use super::{get16, get32, ip_proto, set16, set32, WireError};
use crate::packet::checksum;

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const SEQ: usize = 4;
    pub const ACK: usize = 8;
    pub const OFF_FLAGS: usize = 12;
    pub const WINDOW: usize = 14;
    pub const CHECKSUM: usize = 16;
    pub const URGENT: usize = 18;
    pub const OPTIONS: usize = 20;
}

pub const MIN_HEADER_LEN: usize = field::OPTIONS;

/// Flag bits as returned by [`Tcp::flags`] (NS is bit 8, the low bit of byte 12).
pub mod flags {
    pub const FIN: u16 = 0x001;
    pub const SYN: u16 = 0x002;
    pub const RST: u16 = 0x004;
    pub const PSH: u16 = 0x008;
    pub const ACK: u16 = 0x010;
    pub const URG: u16 = 0x020;
    pub const ECE: u16 = 0x040;
    pub const CWR: u16 = 0x080;
    pub const NS: u16 = 0x100;
}

/// A view of a TCP segment: `buf` is the whole segment (header and payload, as bounded by
/// the IP length), since the checksum covers all of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tcp<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Tcp<T> {
    #[inline]
    pub fn new_unchecked(buf: T) -> Self {
        Tcp { buf }
    }

    /// Checks the fixed header, data offset >= 5 and the whole header (options) present.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let b = buf.as_ref();
        if b.len() < MIN_HEADER_LEN {
            return Err(WireError::Truncated);
        }
        let hl = Tcp::new_unchecked(b).header_len();
        if hl < MIN_HEADER_LEN {
            return Err(WireError::BadHeaderLen);
        }
        if b.len() < hl {
            return Err(WireError::Truncated);
        }
        Ok(Tcp { buf })
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
    #[inline]
    pub fn seq(&self) -> u32 {
        get32(self.buf.as_ref(), field::SEQ)
    }
    #[inline]
    pub fn ack(&self) -> u32 {
        get32(self.buf.as_ref(), field::ACK)
    }
    /// Data offset in 32-bit words.
    #[inline]
    pub fn data_offset(&self) -> u8 {
        self.buf.as_ref()[field::OFF_FLAGS] >> 4
    }
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.data_offset()) * 4
    }
    /// The 9 flag bits, NS..FIN; see [`flags`].
    #[inline]
    pub fn flags(&self) -> u16 {
        get16(self.buf.as_ref(), field::OFF_FLAGS) & 0x01ff
    }
    #[inline]
    pub fn fin(&self) -> bool {
        self.flags() & flags::FIN != 0
    }
    #[inline]
    pub fn syn(&self) -> bool {
        self.flags() & flags::SYN != 0
    }
    #[inline]
    pub fn rst(&self) -> bool {
        self.flags() & flags::RST != 0
    }
    #[inline]
    pub fn psh(&self) -> bool {
        self.flags() & flags::PSH != 0
    }
    #[inline]
    pub fn ack_flag(&self) -> bool {
        self.flags() & flags::ACK != 0
    }
    #[inline]
    pub fn urg(&self) -> bool {
        self.flags() & flags::URG != 0
    }
    #[inline]
    pub fn ece(&self) -> bool {
        self.flags() & flags::ECE != 0
    }
    #[inline]
    pub fn cwr(&self) -> bool {
        self.flags() & flags::CWR != 0
    }
    #[inline]
    pub fn ns(&self) -> bool {
        self.flags() & flags::NS != 0
    }
    #[inline]
    pub fn window(&self) -> u16 {
        get16(self.buf.as_ref(), field::WINDOW)
    }
    #[inline]
    pub fn checksum(&self) -> u16 {
        get16(self.buf.as_ref(), field::CHECKSUM)
    }
    #[inline]
    pub fn urgent(&self) -> u16 {
        get16(self.buf.as_ref(), field::URGENT)
    }
    #[inline]
    pub fn options(&self) -> &[u8] {
        let b = self.buf.as_ref();
        &b[field::OPTIONS..self.header_len().clamp(field::OPTIONS, b.len())]
    }
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let b = self.buf.as_ref();
        &b[self.header_len().min(b.len())..]
    }
    /// Checksum is right given the pseudo-header sum (`Ipv4::pseudo_sum`,
    /// `checksum::pseudo_v4/v6` with this segment's length).
    #[inline]
    pub fn verify_checksum(&self, pseudo: u16) -> bool {
        checksum::add(pseudo, checksum::sum(self.buf.as_ref())) == 0xffff
    }
    #[inline]
    pub fn verify_checksum_v4(&self, src: [u8; 4], dst: [u8; 4]) -> bool {
        self.verify_checksum(self.pseudo_v4(src, dst))
    }
    #[inline]
    pub fn verify_checksum_v6(&self, src: &[u8; 16], dst: &[u8; 16]) -> bool {
        self.verify_checksum(self.pseudo_v6(src, dst))
    }
    #[inline]
    fn pseudo_v4(&self, src: [u8; 4], dst: [u8; 4]) -> u16 {
        let len = self.buf.as_ref().len().min(usize::from(u16::MAX)) as u16;
        checksum::pseudo_v4(src, dst, ip_proto::TCP, len)
    }
    #[inline]
    fn pseudo_v6(&self, src: &[u8; 16], dst: &[u8; 16]) -> u16 {
        let len = self.buf.as_ref().len().min(u32::MAX as usize) as u32;
        checksum::pseudo_v6(src, dst, ip_proto::TCP, len)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Tcp<T> {
    #[inline]
    pub fn set_src_port(&mut self, v: u16) {
        set16(self.buf.as_mut(), field::SRC_PORT, v)
    }
    #[inline]
    pub fn set_dst_port(&mut self, v: u16) {
        set16(self.buf.as_mut(), field::DST_PORT, v)
    }
    #[inline]
    pub fn set_seq(&mut self, v: u32) {
        set32(self.buf.as_mut(), field::SEQ, v)
    }
    #[inline]
    pub fn set_ack(&mut self, v: u32) {
        set32(self.buf.as_mut(), field::ACK, v)
    }
    /// Sets the header length in bytes (a multiple of 4, 20..=60).
    #[inline]
    pub fn set_header_len(&mut self, len: usize) {
        let b = self.buf.as_mut();
        b[field::OFF_FLAGS] = (b[field::OFF_FLAGS] & 0x0f) | (((len / 4) as u8) << 4);
    }
    /// Sets the 9 flag bits (the 3 reserved bits are cleared).
    #[inline]
    pub fn set_flags(&mut self, f: u16) {
        let b = self.buf.as_mut();
        b[field::OFF_FLAGS] = (b[field::OFF_FLAGS] & 0xf0) | ((f >> 8) as u8 & 1);
        b[field::OFF_FLAGS + 1] = f as u8;
    }
    #[inline]
    pub fn set_window(&mut self, v: u16) {
        set16(self.buf.as_mut(), field::WINDOW, v)
    }
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        set16(self.buf.as_mut(), field::CHECKSUM, v)
    }
    #[inline]
    pub fn set_urgent(&mut self, v: u16) {
        set16(self.buf.as_mut(), field::URGENT, v)
    }
    /// Computes the checksum from scratch given the pseudo-header sum.
    pub fn fill_checksum(&mut self, pseudo: u16) {
        self.set_checksum(0);
        let c = !checksum::add(pseudo, checksum::sum(self.buf.as_ref()));
        self.set_checksum(c);
    }
    pub fn fill_checksum_v4(&mut self, src: [u8; 4], dst: [u8; 4]) {
        self.fill_checksum(self.pseudo_v4(src, dst))
    }
    pub fn fill_checksum_v6(&mut self, src: &[u8; 16], dst: &[u8; 16]) {
        self.fill_checksum(self.pseudo_v6(src, dst))
    }
    /// Sets the source port and patches the checksum (RFC 1624).
    #[inline]
    pub fn set_src_port_update(&mut self, v: u16) {
        let c = checksum::update16(self.checksum(), self.src_port(), v);
        self.set_src_port(v);
        self.set_checksum(c);
    }
    /// Sets the destination port and patches the checksum.
    #[inline]
    pub fn set_dst_port_update(&mut self, v: u16) {
        let c = checksum::update16(self.checksum(), self.dst_port(), v);
        self.set_dst_port(v);
        self.set_checksum(c);
    }
    /// Patches the checksum for a pseudo-header address change (NAT): `old` and `new`
    /// are the 4- or 16-byte addresses before and after.
    #[inline]
    pub fn update_pseudo_addr(&mut self, old: &[u8], new: &[u8]) {
        let c = checksum::update_bytes(self.checksum(), old, new);
        self.set_checksum(c);
    }
    #[inline]
    pub fn options_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        let b = self.buf.as_mut();
        let end = hl.clamp(field::OPTIONS, b.len());
        &mut b[field::OPTIONS..end]
    }
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        let b = self.buf.as_mut();
        let start = hl.min(b.len());
        &mut b[start..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::wire::Ipv4;

    // A real IPv4/TCP FIN+ACK with timestamps (anyconnect-vpn.pcap).
    const PKT: [u8; 52] = [
        0x45, 0x00, 0x00, 0x34, 0x00, 0x00, 0x40, 0x00, 0x40, 0x06, 0x3f, 0x93, 0x0a, 0x00, 0x00,
        0xe3, 0xb8, 0x19, 0x38, 0x35, // ipv4
        0xde, 0x35, 0x00, 0x50, 0xc6, 0x57, 0x26, 0xbc, 0xd3, 0xf3, 0xfd, 0xdd, 0x80, 0x11, 0x10,
        0x00, 0x45, 0x92, 0x00, 0x00, 0x01, 0x01, 0x08, 0x0a, 0x1c, 0x0d, 0x69, 0x66, 0xb2, 0x2f,
        0x50, 0xea,
    ];

    #[test]
    fn parse_getters_and_real_checksum() {
        let ip = Ipv4::new_checked(&PKT[..]).unwrap();
        assert!(ip.verify_checksum());
        let t = Tcp::new_checked(ip.payload()).unwrap();
        assert_eq!((t.src_port(), t.dst_port()), (0xde35, 80));
        assert_eq!((t.seq(), t.ack()), (0xc657_26bc, 0xd3f3_fddd));
        assert_eq!((t.data_offset(), t.header_len()), (8, 32));
        assert_eq!(t.flags(), flags::FIN | flags::ACK);
        assert!(t.fin() && t.ack_flag());
        assert!(!(t.syn() || t.rst() || t.psh() || t.urg() || t.ece() || t.cwr() || t.ns()));
        assert_eq!((t.window(), t.checksum(), t.urgent()), (0x1000, 0x4592, 0));
        assert_eq!(t.options(), &PKT[40..52]);
        assert!(t.payload().is_empty());
        assert!(t.verify_checksum_v4(ip.src(), ip.dst()));
        assert!(t.verify_checksum(ip.pseudo_sum()));
    }

    #[test]
    fn nat_rewrite_keeps_checksums_valid() {
        let mut b = PKT;
        let (mut ip, seg) = {
            let (h, s) = b.split_at_mut(20);
            (Ipv4::new_checked(h).unwrap(), s)
        };
        let mut t = Tcp::new_checked(seg).unwrap();
        let old = ip.src();
        ip.set_src_update([192, 0, 2, 7]);
        t.update_pseudo_addr(&old, &[192, 0, 2, 7]);
        t.set_src_port_update(40000);
        t.set_dst_port_update(8080);
        assert!(ip.verify_checksum());
        assert!(t.verify_checksum_v4([192, 0, 2, 7], ip.dst()));
        let c = t.checksum();
        t.fill_checksum_v4([192, 0, 2, 7], ip.dst());
        assert_eq!(c, t.checksum());
    }

    #[test]
    fn emit_v6_round_trip() {
        let (s, d) = ([0x20; 16], [0xfe; 16]);
        let mut b = [0u8; 27];
        let mut t = Tcp::new_unchecked(&mut b[..]);
        t.set_src_port(1);
        t.set_dst_port(2);
        t.set_seq(3);
        t.set_ack(4);
        t.set_header_len(24);
        t.set_flags(flags::NS | flags::SYN | flags::CWR | flags::ECE);
        t.set_window(5);
        t.set_urgent(6);
        t.options_mut().copy_from_slice(&[2, 4, 5, 0xb4]);
        t.payload_mut().copy_from_slice(b"abc");
        t.fill_checksum_v6(&s, &d);
        let t = Tcp::new_checked(&b[..]).unwrap();
        assert_eq!((t.src_port(), t.dst_port(), t.seq(), t.ack()), (1, 2, 3, 4));
        assert_eq!(
            (t.header_len(), t.flags(), t.window(), t.urgent()),
            (24, 0x1c2, 5, 6)
        );
        assert!(t.ns() && t.syn() && t.cwr() && t.ece());
        assert_eq!(
            (t.options(), t.payload()),
            (&[2, 4, 5, 0xb4][..], &b"abc"[..])
        );
        assert!(t.verify_checksum_v6(&s, &d));
        assert!(!t.verify_checksum_v6(&d, &d));
    }

    #[test]
    fn bad_inputs_are_errors() {
        for n in 0..20 {
            assert_eq!(
                Tcp::new_checked(&PKT[20..20 + n]),
                Err(WireError::Truncated)
            );
        }
        assert_eq!(Tcp::new_checked(&PKT[20..51]), Err(WireError::Truncated));
        let mut b = PKT;
        b[32] = 0x40;
        assert_eq!(Tcp::new_checked(&b[20..]), Err(WireError::BadHeaderLen));
    }
}
