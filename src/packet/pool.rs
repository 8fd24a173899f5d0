//! A fixed set of packet buffers allocated once; alloc and free are a pointer pop and push.

use super::buf::{Packet, HEADROOM};
use super::meta::Meta;

pub struct Pool {
    free: Vec<Packet>,
    size: usize,
    buf_bytes: usize,
}

impl Pool {
    /// `count` buffers that each hold a packet of up to `max_packet` bytes plus headroom.
    /// Buffer sizes come in three classes (2 KiB, 9 KiB jumbo, 64 KiB) so one pool serves
    /// traces with TSO-sized captures too.
    /// Bytes `Pool::new(count, max_packet)` allocates (buffers with their metadata).
    pub fn bytes(count: usize, max_packet: usize) -> usize {
        let need = max_packet + HEADROOM;
        let class = if need <= 2048 {
            2048
        } else if need <= 9216 + HEADROOM {
            9216 + HEADROOM
        } else {
            65536 + HEADROOM
        };
        count.saturating_mul(class + std::mem::size_of::<Meta>() + std::mem::size_of::<Packet>())
    }

    pub fn new(count: usize, max_packet: usize) -> Pool {
        let need = max_packet + HEADROOM;
        let make: fn() -> Packet = if need <= 2048 {
            Packet::new_boxed::<2048>
        } else if need <= 9216 + HEADROOM {
            Packet::new_boxed::<{ 9216 + HEADROOM }>
        } else {
            Packet::new_boxed::<{ 65536 + HEADROOM }>
        };
        let free: Vec<Packet> = (0..count).map(|_| make()).collect();
        let buf_bytes = free.first().map_or(0, |p| p.capacity());
        Pool {
            free,
            size: count,
            buf_bytes,
        }
    }

    /// A buffer with fresh metadata, or None when every buffer is in use.
    #[inline]
    pub fn alloc(&mut self) -> Option<Packet> {
        let mut p = self.free.pop()?;
        *p.meta_mut() = Meta::default();
        Some(p)
    }

    /// Like [`alloc`](Self::alloc) but leaves the metadata for the caller to overwrite whole.
    #[inline]
    pub fn alloc_raw(&mut self) -> Option<Packet> {
        self.free.pop()
    }

    #[inline]
    pub fn free(&mut self, p: Packet) {
        debug_assert!(
            self.free.len() < self.size,
            "packet freed twice or from another pool"
        );
        self.free.push(p);
    }

    pub fn available(&self) -> usize {
        self.free.len()
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// Largest packet a buffer of this pool holds.
    pub fn max_packet(&self) -> usize {
        self.buf_bytes - HEADROOM
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exhausts_and_recycles() {
        let mut pool = Pool::new(2, 1500);
        let a = pool.alloc().unwrap();
        let b = pool.alloc().unwrap();
        assert!(pool.alloc().is_none());
        pool.free(a);
        pool.free(b);
        assert_eq!(pool.available(), 2);
        assert!(pool.max_packet() >= 1500);
    }

    #[test]
    fn size_classes_fit_the_request() {
        assert!(Pool::new(1, 9000).max_packet() >= 9000);
        assert!(Pool::new(1, 65535).max_packet() >= 65535);
    }
}
