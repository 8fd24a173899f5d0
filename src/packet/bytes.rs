//! Big-endian field reads and writes at byte offsets, shared by the NFs and the header
//! walker. Each is one bounds check and one load or store (indexing byte by byte costs
//! one check per byte). Callers check lengths first; out of range reads 0 and writes
//! nothing rather than panicking.

#[inline]
pub fn be16(b: &[u8], o: usize) -> u16 {
    b.get(o..o + 2)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u16::from_be_bytes)
}

#[inline]
pub fn be32(b: &[u8], o: usize) -> u32 {
    b.get(o..o + 4)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u32::from_be_bytes)
}

#[inline]
pub fn put16(b: &mut [u8], o: usize, v: u16) {
    if let Some(s) = b.get_mut(o..o + 2) {
        s.copy_from_slice(&v.to_be_bytes());
    }
}

#[inline]
pub fn put32(b: &mut [u8], o: usize, v: u32) {
    if let Some(s) = b.get_mut(o..o + 4) {
        s.copy_from_slice(&v.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_writes_and_never_panics() {
        let mut b = [0x12, 0x34, 0x56, 0x78, 0x9a];
        assert_eq!((be16(&b, 0), be32(&b, 1)), (0x1234, 0x3456_789a));
        assert_eq!((be16(&b, 4), be32(&b, 2)), (0, 0));
        put16(&mut b, 3, 0xbeef);
        put32(&mut b, 3, 1);
        assert_eq!(b, [0x12, 0x34, 0x56, 0xbe, 0xef]);
    }
}
