//! Ethernet II header and 802.1Q / 802.1ad (and 0x9100) VLAN tags.

use super::{arr, ethertype, get16, set16, WireError};

mod field {
    pub const DST: usize = 0;
    pub const SRC: usize = 6;
    pub const ETHERTYPE: usize = 12;
    pub const PAYLOAD: usize = 14;
    // Within a 4-byte VLAN tag (after the TPID, which is the preceding ethertype field).
    pub const TCI: usize = 0;
    pub const INNER_TYPE: usize = 2;
}

pub const HEADER_LEN: usize = field::PAYLOAD;
/// Size of one VLAN tag after its TPID (TCI + inner ethertype).
pub const VLAN_LEN: usize = 4;
/// Stacked tags beyond this are rejected (real networks use one or two).
pub const MAX_VLANS: usize = 8;

/// A view of an Ethernet II header at the start of `buf`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ethernet<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Ethernet<T> {
    #[inline]
    pub fn new_unchecked(buf: T) -> Self {
        Ethernet { buf }
    }

    /// Wraps `buf` if it holds at least the 14-byte header.
    #[inline]
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        if buf.as_ref().len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        Ok(Ethernet { buf })
    }

    #[inline]
    pub fn into_inner(self) -> T {
        self.buf
    }

    #[inline]
    pub fn dst(&self) -> [u8; 6] {
        arr(self.buf.as_ref(), field::DST)
    }

    #[inline]
    pub fn src(&self) -> [u8; 6] {
        arr(self.buf.as_ref(), field::SRC)
    }

    /// The outer ethertype (a TPID when the frame is tagged).
    #[inline]
    pub fn ethertype(&self) -> u16 {
        get16(self.buf.as_ref(), field::ETHERTYPE)
    }

    /// Everything after the 14-byte header (VLAN tags included).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[field::PAYLOAD..]
    }

    /// Iterates over the VLAN tags; stops at the first non-tag ethertype, at a truncated
    /// tag, or after [`MAX_VLANS`] tags.
    #[inline]
    pub fn vlans(&self) -> VlanIter<'_> {
        VlanIter {
            buf: self.buf.as_ref(),
            tpid: self.ethertype(),
            off: field::PAYLOAD,
            n: 0,
        }
    }

    /// Skips all VLAN tags: the tags, the final ethertype and the L3 offset.
    pub fn l2_info(&self) -> Result<L2Info, WireError> {
        let b = self.buf.as_ref();
        let mut info = L2Info {
            tags: [VlanTag::default(); MAX_VLANS],
            n_tags: 0,
            ethertype: self.ethertype(),
            l3_offset: HEADER_LEN,
        };
        while ethertype::is_vlan(info.ethertype) {
            if usize::from(info.n_tags) == MAX_VLANS {
                return Err(WireError::TooManyHeaders);
            }
            let o = info.l3_offset;
            if b.len() < o + VLAN_LEN {
                return Err(WireError::Truncated);
            }
            info.tags[usize::from(info.n_tags)] = VlanTag {
                tpid: info.ethertype,
                tci: get16(b, o + field::TCI),
            };
            info.n_tags += 1;
            info.ethertype = get16(b, o + field::INNER_TYPE);
            info.l3_offset = o + VLAN_LEN;
        }
        Ok(info)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ethernet<T> {
    #[inline]
    pub fn set_dst(&mut self, a: [u8; 6]) {
        self.buf.as_mut()[field::DST..field::DST + 6].copy_from_slice(&a);
    }

    #[inline]
    pub fn set_src(&mut self, a: [u8; 6]) {
        self.buf.as_mut()[field::SRC..field::SRC + 6].copy_from_slice(&a);
    }

    #[inline]
    pub fn set_ethertype(&mut self, v: u16) {
        set16(self.buf.as_mut(), field::ETHERTYPE, v)
    }

    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buf.as_mut()[field::PAYLOAD..]
    }
}

/// The result of [`Ethernet::l2_info`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct L2Info {
    /// Outermost first; only the first `n_tags` are meaningful.
    pub tags: [VlanTag; MAX_VLANS],
    pub n_tags: u8,
    /// The ethertype after the last tag.
    pub ethertype: u16,
    /// Offset of the L3 header from the start of the frame.
    pub l3_offset: usize,
}

impl L2Info {
    #[inline]
    pub fn tags(&self) -> &[VlanTag] {
        &self.tags[..usize::from(self.n_tags)]
    }
}

/// One VLAN tag as values: its TPID and the tag control information.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VlanTag {
    pub tpid: u16,
    pub tci: u16,
}

impl VlanTag {
    #[inline]
    pub fn pcp(&self) -> u8 {
        (self.tci >> 13) as u8
    }
    #[inline]
    pub fn dei(&self) -> bool {
        self.tci & 0x1000 != 0
    }
    #[inline]
    pub fn vid(&self) -> u16 {
        self.tci & 0x0fff
    }
}

/// A view of the 4 bytes following a VLAN TPID: TCI (PCP, DEI, VID) and inner ethertype.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vlan<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Vlan<T> {
    #[inline]
    pub fn new_unchecked(buf: T) -> Self {
        Vlan { buf }
    }

    #[inline]
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        if buf.as_ref().len() < VLAN_LEN {
            return Err(WireError::Truncated);
        }
        Ok(Vlan { buf })
    }

    #[inline]
    pub fn into_inner(self) -> T {
        self.buf
    }

    #[inline]
    pub fn tci(&self) -> u16 {
        get16(self.buf.as_ref(), field::TCI)
    }
    /// Priority code point (3 bits).
    #[inline]
    pub fn pcp(&self) -> u8 {
        (self.tci() >> 13) as u8
    }
    /// Drop eligible indicator.
    #[inline]
    pub fn dei(&self) -> bool {
        self.tci() & 0x1000 != 0
    }
    /// VLAN identifier (12 bits).
    #[inline]
    pub fn vid(&self) -> u16 {
        self.tci() & 0x0fff
    }
    /// Ethertype of what follows this tag.
    #[inline]
    pub fn ethertype(&self) -> u16 {
        get16(self.buf.as_ref(), field::INNER_TYPE)
    }
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[VLAN_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Vlan<T> {
    #[inline]
    pub fn set_tci(&mut self, v: u16) {
        set16(self.buf.as_mut(), field::TCI, v)
    }
    #[inline]
    pub fn set_pcp(&mut self, v: u8) {
        self.set_tci((self.tci() & 0x1fff) | (u16::from(v & 7) << 13))
    }
    #[inline]
    pub fn set_dei(&mut self, v: bool) {
        self.set_tci((self.tci() & !0x1000) | if v { 0x1000 } else { 0 })
    }
    #[inline]
    pub fn set_vid(&mut self, v: u16) {
        self.set_tci((self.tci() & 0xf000) | (v & 0x0fff))
    }
    #[inline]
    pub fn set_ethertype(&mut self, v: u16) {
        set16(self.buf.as_mut(), field::INNER_TYPE, v)
    }
}

/// Iterator over the VLAN tags of a frame; see [`Ethernet::vlans`].
pub struct VlanIter<'a> {
    buf: &'a [u8],
    tpid: u16,
    off: usize,
    n: usize,
}

impl<'a> Iterator for VlanIter<'a> {
    /// The tag's TPID and a view of it.
    type Item = (u16, Vlan<&'a [u8]>);

    fn next(&mut self) -> Option<Self::Item> {
        if !ethertype::is_vlan(self.tpid) || self.n == MAX_VLANS {
            return None;
        }
        let tag = Vlan::new_checked(self.buf.get(self.off..)?).ok()?;
        let tpid = self.tpid;
        self.tpid = tag.ethertype();
        self.off += VLAN_LEN;
        self.n += 1;
        Some((tpid, tag))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // 802.1ad (vid 100, pcp 5) / 802.1Q (vid 200, dei) / IPv4 ...
    const QINQ: [u8; 24] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x88, 0xa8, 0xa0,
        0x64, 0x81, 0x00, 0x10, 0xc8, 0x08, 0x00, 0x45, 0x00,
    ];

    #[test]
    fn parse_getters() {
        let e = Ethernet::new_checked(&QINQ[..]).unwrap();
        assert_eq!(e.dst(), [0xff; 6]);
        assert_eq!(e.src(), [0, 0x11, 0x22, 0x33, 0x44, 0x55]);
        assert_eq!(e.ethertype(), ethertype::QINQ);
        assert_eq!(e.payload().len(), 10);
        let info = e.l2_info().unwrap();
        assert_eq!(
            (info.n_tags, info.ethertype, info.l3_offset),
            (2, 0x0800, 22)
        );
        let t = info.tags();
        assert_eq!(
            (t[0].tpid, t[0].pcp(), t[0].dei(), t[0].vid()),
            (0x88a8, 5, false, 100)
        );
        assert_eq!(
            (t[1].tpid, t[1].pcp(), t[1].dei(), t[1].vid()),
            (0x8100, 0, true, 200)
        );
        let v: Vec<_> = e
            .vlans()
            .map(|(tpid, v)| (tpid, v.vid(), v.ethertype()))
            .collect();
        assert_eq!(v, [(0x88a8, 100, 0x8100), (0x8100, 200, 0x0800)]);
    }

    #[test]
    fn old_qinq_tpid_and_untagged() {
        let mut b = QINQ;
        b[12] = 0x91;
        b[13] = 0x00;
        let info = Ethernet::new_checked(&b[..]).unwrap().l2_info().unwrap();
        assert_eq!(
            (info.n_tags, info.tags()[0].tpid, info.ethertype),
            (2, 0x9100, 0x0800)
        );
        b[12] = 0x86;
        b[13] = 0xdd;
        let e = Ethernet::new_checked(&b[..]).unwrap();
        let info = e.l2_info().unwrap();
        assert_eq!(
            (info.n_tags, info.ethertype, info.l3_offset),
            (0, 0x86dd, 14)
        );
        assert_eq!(e.vlans().count(), 0);
    }

    #[test]
    fn setters_round_trip() {
        let mut b = QINQ;
        let mut e = Ethernet::new_checked(&mut b[..]).unwrap();
        e.set_dst([1, 2, 3, 4, 5, 6]);
        e.set_src([7, 8, 9, 10, 11, 12]);
        e.set_ethertype(0x8100);
        {
            let mut v = Vlan::new_checked(e.payload_mut()).unwrap();
            v.set_vid(0xabc);
            v.set_pcp(3);
            v.set_dei(true);
            v.set_ethertype(0x86dd);
            assert_eq!(
                (v.vid(), v.pcp(), v.dei(), v.ethertype()),
                (0xabc, 3, true, 0x86dd)
            );
        }
        assert_eq!(
            (e.dst(), e.src()),
            ([1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12])
        );
        let info = e.l2_info().unwrap();
        assert_eq!(
            (info.n_tags, info.ethertype, info.l3_offset),
            (1, 0x86dd, 18)
        );
        assert_eq!(&b[12..18], &[0x81, 0x00, 0x7a, 0xbc, 0x86, 0xdd]);
    }

    #[test]
    fn truncated_and_too_many_tags() {
        for n in 0..14 {
            assert_eq!(Ethernet::new_checked(&QINQ[..n]), Err(WireError::Truncated));
        }
        // Tag cut short.
        let e = Ethernet::new_checked(&QINQ[..17]).unwrap();
        assert_eq!(e.l2_info(), Err(WireError::Truncated));
        assert_eq!(e.vlans().count(), 0);
        // Nine tags.
        let mut b = QINQ[..12].to_vec();
        for _ in 0..9 {
            b.extend_from_slice(&[0x81, 0x00, 0x00, 0x01]);
        }
        b.extend_from_slice(&[0x08, 0x00]);
        let e = Ethernet::new_checked(&b[..]).unwrap();
        assert_eq!(e.l2_info(), Err(WireError::TooManyHeaders));
        assert_eq!(e.vlans().count(), MAX_VLANS);
    }
}
