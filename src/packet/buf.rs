//! A packet: one pooled buffer with headroom, its metadata, and the bytes in use.

use super::layers::Layers;
use super::meta::{Meta, Verdict};

/// Bytes kept free in front of the packet so NFs can push headers without copying.
pub const HEADROOM: usize = 128;

/// The pooled allocation. `D` is `[u8; N]` when built and `[u8]` once pooled, so one pool
/// can hold buffers of any size chosen at run time with a single allocation each.
pub(crate) struct Buf<D: ?Sized> {
    pub(crate) meta: Meta,
    pub(crate) start: u32,
    pub(crate) len: u32,
    pub(crate) data: D,
}

/// A packet owned by exactly one place at a time (a batch, an NF's queue, the pool).
/// Moving it moves one pointer; the bytes never move.
pub struct Packet(pub(crate) Box<Buf<[u8]>>);

impl Packet {
    pub(crate) fn new_boxed<const N: usize>() -> Packet {
        let b: Box<Buf<[u8]>> = Box::new(Buf {
            meta: Meta::default(),
            start: HEADROOM as u32,
            len: 0,
            data: [0u8; N],
        });
        Packet(b)
    }

    /// A stand-alone packet outside any pool (tests, tools). Hot paths use [`super::Pool`].
    pub fn from_bytes(bytes: &[u8]) -> Packet {
        let mut p = if bytes.len() + HEADROOM <= 2048 {
            Packet::new_boxed::<2048>()
        } else {
            Packet::new_boxed::<{ 65536 + HEADROOM }>()
        };
        p.set_bytes(bytes);
        p.0.meta.wire_len = bytes.len() as u32;
        p
    }

    /// Total bytes the buffer can hold including headroom.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.0.data.len()
    }

    /// Replace the contents (headroom restored, metadata reset except what the caller sets).
    /// Returns false, leaving the packet unchanged, if the bytes do not fit.
    #[inline]
    pub fn set_bytes(&mut self, bytes: &[u8]) -> bool {
        let b = &mut *self.0;
        if HEADROOM + bytes.len() > b.data.len() {
            return false;
        }
        b.data[HEADROOM..HEADROOM + bytes.len()].copy_from_slice(bytes);
        b.start = HEADROOM as u32;
        b.len = bytes.len() as u32;
        b.meta.layers = Layers::UNPARSED;
        b.meta.flow_hash = 0;
        b.meta.verdict = Verdict::Out(0);
        true
    }

    /// Appends bytes at the end; false, leaving the packet unchanged, if they do not fit.
    #[inline]
    pub fn extend(&mut self, bytes: &[u8]) -> bool {
        let b = &mut *self.0;
        let end = (b.start + b.len) as usize;
        if end + bytes.len() > b.data.len() {
            return false;
        }
        b.data[end..end + bytes.len()].copy_from_slice(bytes);
        b.len += bytes.len() as u32;
        true
    }

    #[inline]
    pub fn data(&self) -> &[u8] {
        let b = &*self.0;
        &b.data[b.start as usize..(b.start + b.len) as usize]
    }

    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        let b = &mut *self.0;
        &mut b.data[b.start as usize..(b.start + b.len) as usize]
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.0.len as usize
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.0.len == 0
    }

    #[inline]
    pub fn meta(&self) -> &Meta {
        &self.0.meta
    }

    #[inline]
    pub fn meta_mut(&mut self) -> &mut Meta {
        &mut self.0.meta
    }

    /// Both at once, for NFs that read offsets and write bytes.
    #[inline]
    pub fn split_mut(&mut self) -> (&mut Meta, &mut [u8]) {
        let b = &mut *self.0;
        let (s, l) = (b.start as usize, b.len as usize);
        (&mut b.meta, &mut b.data[s..s + l])
    }

    /// Header offsets, decoding them on first use (Steve's partial decode).
    #[inline]
    pub fn layers(&mut self) -> Layers {
        let b = &mut *self.0;
        if b.meta.layers.is_unparsed() {
            let s = b.start as usize;
            b.meta.layers = Layers::parse(b.meta.link, &b.data[s..s + b.len as usize]);
        }
        b.meta.layers
    }

    /// Grow the packet at the front by `n` bytes (for pushing a header); returns the new
    /// front bytes, or None when the headroom is exhausted. Decoded offsets are reset.
    pub fn push_front(&mut self, n: usize) -> Option<&mut [u8]> {
        let b = &mut *self.0;
        if (b.start as usize) < n {
            return None;
        }
        b.start -= n as u32;
        b.len += n as u32;
        b.meta.layers = Layers::UNPARSED;
        let s = b.start as usize;
        Some(&mut b.data[s..s + n])
    }

    /// Remove `n` bytes from the front (for popping a header).
    pub fn pull_front(&mut self, n: usize) -> bool {
        let b = &mut *self.0;
        if (b.len as usize) < n {
            return false;
        }
        b.start += n as u32;
        b.len -= n as u32;
        b.meta.layers = Layers::UNPARSED;
        true
    }

    /// Mark the packet to leave through output `o` of the current NF.
    #[inline]
    pub fn forward(&mut self, o: u8) {
        self.0.meta.verdict = Verdict::Out(o);
    }

    /// Mark the packet dropped with reason index `r` of the current NF's profile.
    #[inline]
    pub fn drop_with(&mut self, r: u8) {
        self.0.meta.verdict = Verdict::Drop(r);
    }
}

impl std::fmt::Debug for Packet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Packet")
            .field("len", &self.len())
            .field("meta", self.meta())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_and_pull_keep_bytes() {
        let mut p = Packet::from_bytes(&[1, 2, 3]);
        p.push_front(2).unwrap().copy_from_slice(&[9, 8]);
        assert_eq!(p.data(), &[9, 8, 1, 2, 3]);
        assert!(p.pull_front(3));
        assert_eq!(p.data(), &[2, 3]);
        assert!(!p.pull_front(3));
    }

    #[test]
    fn extend_appends_within_the_buffer() {
        let mut p = Packet::from_bytes(&[1, 2]);
        assert!(p.extend(&[3, 4]));
        assert_eq!(p.data(), &[1, 2, 3, 4]);
        let room = p.capacity() - HEADROOM - 4;
        assert!(!p.extend(&vec![0; room + 1]));
        assert_eq!(p.len(), 4);
    }

    #[test]
    fn headroom_is_bounded() {
        let mut p = Packet::from_bytes(&[0; 10]);
        assert!(p.push_front(HEADROOM).is_some());
        assert!(p.push_front(1).is_none());
    }

    #[test]
    fn oversize_bytes_are_refused() {
        let mut p = Packet::from_bytes(&[0; 10]);
        assert!(!p.set_bytes(&vec![0; p.capacity()]));
        assert_eq!(p.len(), 10);
    }
}
