//! IPv4 header with options (RFC 791).

use super::{arr, get16, set16, WireError};
use crate::packet::checksum;
use std::net::Ipv4Addr;

mod field {
    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const TOTAL_LEN: usize = 2;
    pub const IDENT: usize = 4;
    pub const FLAGS_FRAG: usize = 6;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SRC: usize = 12;
    pub const DST: usize = 16;
    pub const OPTIONS: usize = 20;
}

/// Length of the header without options.
pub const MIN_HEADER_LEN: usize = field::OPTIONS;
const DF: u16 = 0x4000;
const MF: u16 = 0x2000;

/// A view of an IPv4 header (and what follows) at the start of `buf`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Ipv4<T> {
    #[inline]
    pub fn new_unchecked(buf: T) -> Self {
        Ipv4 { buf }
    }

    /// Checks version 4, IHL >= 5, the whole header (options included) present, and
    /// total length >= header length. A total length beyond the buffer (a capture cut by
    /// its snap length) is accepted: [`Ipv4::payload`] is then clamped to the buffer.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let b = buf.as_ref();
        if b.len() < MIN_HEADER_LEN {
            return Err(WireError::Truncated);
        }
        let v = Ipv4::new_unchecked(b);
        if v.version() != 4 {
            return Err(WireError::BadVersion);
        }
        let hl = v.header_len();
        if hl < MIN_HEADER_LEN {
            return Err(WireError::BadHeaderLen);
        }
        if b.len() < hl {
            return Err(WireError::Truncated);
        }
        if usize::from(v.total_len()) < hl {
            return Err(WireError::BadLength);
        }
        Ok(Ipv4 { buf })
    }

    #[inline]
    pub fn into_inner(self) -> T {
        self.buf
    }

    #[inline]
    pub fn version(&self) -> u8 {
        self.buf.as_ref()[field::VER_IHL] >> 4
    }
    /// Header length in 32-bit words.
    #[inline]
    pub fn ihl(&self) -> u8 {
        self.buf.as_ref()[field::VER_IHL] & 0x0f
    }
    /// Header length in bytes (options included).
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.ihl()) * 4
    }
    #[inline]
    pub fn dscp(&self) -> u8 {
        self.buf.as_ref()[field::DSCP_ECN] >> 2
    }
    #[inline]
    pub fn ecn(&self) -> u8 {
        self.buf.as_ref()[field::DSCP_ECN] & 3
    }
    #[inline]
    pub fn total_len(&self) -> u16 {
        get16(self.buf.as_ref(), field::TOTAL_LEN)
    }
    #[inline]
    pub fn ident(&self) -> u16 {
        get16(self.buf.as_ref(), field::IDENT)
    }
    /// The 3 flag bits (reserved, DF, MF) as in the header's top bits: 0..=7.
    #[inline]
    pub fn flags(&self) -> u8 {
        (get16(self.buf.as_ref(), field::FLAGS_FRAG) >> 13) as u8
    }
    #[inline]
    pub fn dont_frag(&self) -> bool {
        get16(self.buf.as_ref(), field::FLAGS_FRAG) & DF != 0
    }
    #[inline]
    pub fn more_frags(&self) -> bool {
        get16(self.buf.as_ref(), field::FLAGS_FRAG) & MF != 0
    }
    /// Fragment offset in 8-byte units.
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        get16(self.buf.as_ref(), field::FLAGS_FRAG) & 0x1fff
    }
    /// True for any fragment (first, middle or last).
    #[inline]
    pub fn is_fragment(&self) -> bool {
        get16(self.buf.as_ref(), field::FLAGS_FRAG) & (MF | 0x1fff) != 0
    }
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.buf.as_ref()[field::TTL]
    }
    #[inline]
    pub fn protocol(&self) -> u8 {
        self.buf.as_ref()[field::PROTOCOL]
    }
    #[inline]
    pub fn checksum(&self) -> u16 {
        get16(self.buf.as_ref(), field::CHECKSUM)
    }
    #[inline]
    pub fn src(&self) -> [u8; 4] {
        arr(self.buf.as_ref(), field::SRC)
    }
    #[inline]
    pub fn dst(&self) -> [u8; 4] {
        arr(self.buf.as_ref(), field::DST)
    }
    #[inline]
    pub fn src_addr(&self) -> Ipv4Addr {
        self.src().into()
    }
    #[inline]
    pub fn dst_addr(&self) -> Ipv4Addr {
        self.dst().into()
    }
    /// The options bytes (empty when IHL = 5).
    #[inline]
    pub fn options(&self) -> &[u8] {
        let b = self.buf.as_ref();
        &b[field::OPTIONS..self.header_len().clamp(field::OPTIONS, b.len())]
    }
    /// The header's bytes, options included.
    #[inline]
    pub fn header(&self) -> &[u8] {
        let b = self.buf.as_ref();
        &b[..self.header_len().min(b.len())]
    }
    /// Bytes from the end of the header to the total length, clamped to the buffer (so
    /// Ethernet padding is excluded and a snapped capture gives what is there).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let b = self.buf.as_ref();
        let (start, end) = self.payload_range(b.len());
        &b[start..end]
    }
    #[inline]
    fn payload_range(&self, len: usize) -> (usize, usize) {
        let end = usize::from(self.total_len()).min(len);
        (self.header_len().min(end), end)
    }
    /// The total length extends past the buffer (the capture was cut short).
    #[inline]
    pub fn is_truncated(&self) -> bool {
        usize::from(self.total_len()) > self.buf.as_ref().len()
    }
    /// The header checksum is right.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        checksum::sum(self.header()) == 0xffff
    }
    /// Sum of the pseudo header for the transport checksum (length = payload length per
    /// the total length field).
    #[inline]
    pub fn pseudo_sum(&self) -> u16 {
        let len = self.total_len().saturating_sub(self.header_len() as u16);
        checksum::pseudo_v4(self.src(), self.dst(), self.protocol(), len)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4<T> {
    /// Sets version 4 and the header length in bytes (a multiple of 4, 20..=60).
    #[inline]
    pub fn set_version_header_len(&mut self, header_len: usize) {
        self.buf.as_mut()[field::VER_IHL] = 0x40 | ((header_len / 4) as u8 & 0x0f);
    }
    #[inline]
    pub fn set_dscp(&mut self, v: u8) {
        let b = self.buf.as_mut();
        b[field::DSCP_ECN] = (b[field::DSCP_ECN] & 3) | (v << 2);
    }
    #[inline]
    pub fn set_ecn(&mut self, v: u8) {
        let b = self.buf.as_mut();
        b[field::DSCP_ECN] = (b[field::DSCP_ECN] & !3) | (v & 3);
    }
    #[inline]
    pub fn set_total_len(&mut self, v: u16) {
        set16(self.buf.as_mut(), field::TOTAL_LEN, v)
    }
    #[inline]
    pub fn set_ident(&mut self, v: u16) {
        set16(self.buf.as_mut(), field::IDENT, v)
    }
    /// Sets the 3 flag bits (reserved, DF, MF).
    #[inline]
    pub fn set_flags(&mut self, v: u8) {
        let w = get16(self.buf.as_ref(), field::FLAGS_FRAG);
        set16(
            self.buf.as_mut(),
            field::FLAGS_FRAG,
            (w & 0x1fff) | (u16::from(v & 7) << 13),
        )
    }
    #[inline]
    pub fn set_dont_frag(&mut self, v: bool) {
        self.set_flag_bit(DF, v)
    }
    #[inline]
    pub fn set_more_frags(&mut self, v: bool) {
        self.set_flag_bit(MF, v)
    }
    #[inline]
    fn set_flag_bit(&mut self, bit: u16, v: bool) {
        let w = get16(self.buf.as_ref(), field::FLAGS_FRAG);
        set16(
            self.buf.as_mut(),
            field::FLAGS_FRAG,
            if v { w | bit } else { w & !bit },
        )
    }
    #[inline]
    pub fn set_frag_offset(&mut self, v: u16) {
        let w = get16(self.buf.as_ref(), field::FLAGS_FRAG);
        set16(
            self.buf.as_mut(),
            field::FLAGS_FRAG,
            (w & 0xe000) | (v & 0x1fff),
        )
    }
    #[inline]
    pub fn set_ttl(&mut self, v: u8) {
        self.buf.as_mut()[field::TTL] = v
    }
    #[inline]
    pub fn set_protocol(&mut self, v: u8) {
        self.buf.as_mut()[field::PROTOCOL] = v
    }
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        set16(self.buf.as_mut(), field::CHECKSUM, v)
    }
    #[inline]
    pub fn set_src(&mut self, a: [u8; 4]) {
        self.buf.as_mut()[field::SRC..field::DST].copy_from_slice(&a)
    }
    #[inline]
    pub fn set_dst(&mut self, a: [u8; 4]) {
        self.buf.as_mut()[field::DST..field::OPTIONS].copy_from_slice(&a)
    }
    /// Recomputes the header checksum from scratch.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(self.header());
        self.set_checksum(c);
    }
    /// Sets the source address and patches the header checksum (RFC 1624). Transport
    /// checksums cover the address too: see `Tcp::update_pseudo_addr` / `Udp::...`.
    #[inline]
    pub fn set_src_update(&mut self, a: [u8; 4]) {
        let c = checksum::update_bytes(self.checksum(), &self.src(), &a);
        self.set_src(a);
        self.set_checksum(c);
    }
    /// Sets the destination address and patches the header checksum.
    #[inline]
    pub fn set_dst_update(&mut self, a: [u8; 4]) {
        let c = checksum::update_bytes(self.checksum(), &self.dst(), &a);
        self.set_dst(a);
        self.set_checksum(c);
    }
    /// Sets the TTL and patches the header checksum.
    #[inline]
    pub fn set_ttl_update(&mut self, v: u8) {
        let old = get16(self.buf.as_ref(), field::TTL);
        self.set_ttl(v);
        let new = get16(self.buf.as_ref(), field::TTL);
        let c = checksum::update16(self.checksum(), old, new);
        self.set_checksum(c);
    }
    /// Sets the DSCP and patches the header checksum.
    #[inline]
    pub fn set_dscp_update(&mut self, v: u8) {
        let old = get16(self.buf.as_ref(), field::VER_IHL);
        self.set_dscp(v);
        let new = get16(self.buf.as_ref(), field::VER_IHL);
        let c = checksum::update16(self.checksum(), old, new);
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
        let (start, end) = self.payload_range(self.buf.as_ref().len());
        &mut self.buf.as_mut()[start..end]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A real IPv4/UDP header (checksum 0xb861) followed by 3 payload bytes and 2 bytes of
    // link-layer padding beyond the total length.
    const PKT: [u8; 25] = [
        0x45, 0x00, 0x00, 0x17, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0xc7, 1, 2, 3, 0xee, 0xee,
    ];

    // IHL 6 with a router-alert option, shaped like an IGMPv2 report (checksum 0x4172).
    const OPT: [u8; 32] = [
        0x46, 0xc0, 0x00, 0x20, 0x00, 0x00, 0x40, 0x00, 0x01, 0x02, 0x41, 0x72, 0xc0, 0xa8, 0x01,
        0x02, 0xe0, 0x00, 0x00, 0xfb, 0x94, 0x04, 0x00, 0x00, 0x16, 0x00, 0x09, 0x04, 0xe0, 0x00,
        0x00, 0xfb,
    ];

    #[test]
    fn parse_getters() {
        let mut b = PKT;
        b[2..4].copy_from_slice(&23u16.to_be_bytes());
        b[10..12].copy_from_slice(&[0, 0]);
        Ipv4::new_unchecked(&mut b[..]).fill_checksum();
        let ip = Ipv4::new_checked(&b[..]).unwrap();
        assert_eq!((ip.version(), ip.ihl(), ip.header_len()), (4, 5, 20));
        assert_eq!(
            (ip.dscp(), ip.ecn(), ip.total_len(), ip.ident()),
            (0, 0, 23, 0)
        );
        assert_eq!(
            (
                ip.flags(),
                ip.dont_frag(),
                ip.more_frags(),
                ip.frag_offset()
            ),
            (2, true, false, 0)
        );
        assert_eq!((ip.ttl(), ip.protocol()), (64, 17));
        assert_eq!(ip.src_addr(), Ipv4Addr::new(192, 168, 0, 1));
        assert_eq!(ip.dst(), [192, 168, 0, 199]);
        assert!(ip.options().is_empty() && !ip.is_fragment() && !ip.is_truncated());
        assert_eq!(ip.payload(), &[1, 2, 3]);
        assert!(ip.verify_checksum());
    }

    #[test]
    fn known_checksum() {
        // With its original total length 0x73 the header's checksum is 0xb861.
        let mut b = [0u8; 0x73];
        b[..20].copy_from_slice(&PKT[..20]);
        b[3] = 0x73;
        let ip = Ipv4::new_checked(&b[..]).unwrap();
        assert_eq!(ip.checksum(), 0xb861);
        assert!(ip.verify_checksum());
    }

    #[test]
    fn options_and_real_checksum() {
        let ip = Ipv4::new_checked(&OPT[..]).unwrap();
        assert_eq!(
            (ip.header_len(), ip.dscp(), ip.ttl(), ip.protocol()),
            (24, 48, 1, 2)
        );
        assert_eq!(ip.options(), &[0x94, 0x04, 0x00, 0x00]);
        assert_eq!(ip.payload().len(), 8);
        assert!(
            ip.verify_checksum(),
            "{:04x}",
            checksum::checksum(ip.header())
        );
    }

    #[test]
    fn setters_update_checksum_incrementally() {
        let mut b = OPT;
        let mut ip = Ipv4::new_checked(&mut b[..]).unwrap();
        ip.set_src_update([10, 0, 0, 1]);
        ip.set_dst_update([8, 8, 4, 4]);
        ip.set_ttl_update(17);
        ip.set_dscp_update(10);
        assert!(ip.verify_checksum());
        let c = ip.checksum();
        ip.fill_checksum();
        assert_eq!(c, ip.checksum());
        assert_eq!(
            (ip.src(), ip.dst(), ip.ttl(), ip.dscp(), ip.ecn()),
            ([10, 0, 0, 1], [8, 8, 4, 4], 17, 10, 0)
        );
    }

    #[test]
    fn emit_round_trip() {
        let mut b = [0u8; 28];
        let mut ip = Ipv4::new_unchecked(&mut b[..]);
        ip.set_version_header_len(20);
        ip.set_dscp(46);
        ip.set_ecn(1);
        ip.set_total_len(28);
        ip.set_ident(0x1234);
        ip.set_flags(0);
        ip.set_more_frags(true);
        ip.set_dont_frag(false);
        ip.set_frag_offset(185);
        ip.set_ttl(63);
        ip.set_protocol(6);
        ip.set_src([1, 2, 3, 4]);
        ip.set_dst([5, 6, 7, 8]);
        ip.payload_mut().copy_from_slice(&[9; 8]);
        ip.fill_checksum();
        let ip = Ipv4::new_checked(&b[..]).unwrap();
        assert_eq!(
            (ip.dscp(), ip.ecn(), ip.ident(), ip.flags()),
            (46, 1, 0x1234, 1)
        );
        assert_eq!(
            (ip.more_frags(), ip.frag_offset(), ip.is_fragment()),
            (true, 185, true)
        );
        assert_eq!(
            (ip.ttl(), ip.protocol(), ip.payload()),
            (63, 6, &[9u8; 8][..])
        );
        assert!(ip.verify_checksum());
        assert_eq!(checksum::checksum(&b[..20]), 0);
    }

    #[test]
    fn bad_inputs_are_errors() {
        for n in 0..20 {
            assert_eq!(Ipv4::new_checked(&PKT[..n]), Err(WireError::Truncated));
        }
        assert_eq!(Ipv4::new_checked(&OPT[..22]), Err(WireError::Truncated));
        let mut b = PKT;
        b[0] = 0x65;
        assert_eq!(Ipv4::new_checked(&b[..]), Err(WireError::BadVersion));
        b[0] = 0x44;
        assert_eq!(Ipv4::new_checked(&b[..]), Err(WireError::BadHeaderLen));
        b[0] = 0x45;
        b[2..4].copy_from_slice(&19u16.to_be_bytes());
        assert_eq!(Ipv4::new_checked(&b[..]), Err(WireError::BadLength));
        // Total length beyond the buffer: accepted, payload clamped.
        b[2..4].copy_from_slice(&1500u16.to_be_bytes());
        let ip = Ipv4::new_checked(&b[..]).unwrap();
        assert!(ip.is_truncated());
        assert_eq!(ip.payload().len(), 5);
    }
}
