//! A fixed set of packet buffers allocated once; alloc and free are a pointer pop and push.

use super::buf::{Packet, HEADROOM};
use super::meta::Meta;

pub struct Pool {
    free: Vec<Packet>,
    /// Buffers made so far, both classes.
    size: usize,
    buf_bytes: usize,
    /// Larger buffers, made on first need: most traces never need one, and a stream
    /// whose snaplen allows 64 KiB packets should not pay for them up front.
    big: Option<Big>,
}

struct Big {
    free: Vec<Packet>,
    made: usize,
    limit: usize,
    make: fn() -> Packet,
    buf_bytes: usize,
}

impl Pool {
    /// `count` buffers that each hold a packet of up to `max_packet` bytes plus headroom.
    /// Buffer sizes come in three classes (2 KiB, 9 KiB jumbo, 64 KiB) so one pool serves
    /// traces with TSO-sized captures too: `count` 2 KiB buffers now and, when
    /// `max_packet` needs more, up to `count` of the larger class made as packets need
    /// them (ask with [`alloc_raw_for`](Self::alloc_raw_for)).
    /// Bytes `Pool::new(count, max_packet)` allocates at most (buffers with their
    /// metadata): the 2 KiB buffers and, when `max_packet` needs them, as many larger ones.
    pub fn bytes(count: usize, max_packet: usize) -> usize {
        let need = max_packet + HEADROOM;
        let per = |class: usize| {
            count
                .saturating_mul(class + std::mem::size_of::<Meta>() + std::mem::size_of::<Packet>())
        };
        let big = if need <= 2048 {
            0
        } else if need <= 9216 + HEADROOM {
            per(9216 + HEADROOM)
        } else {
            per(65536 + HEADROOM)
        };
        per(2048).saturating_add(big)
    }

    pub fn new(count: usize, max_packet: usize) -> Pool {
        let need = max_packet + HEADROOM;
        let small: fn() -> Packet = Packet::new_boxed::<2048>;
        let big = if need <= 2048 {
            None
        } else if need <= 9216 + HEADROOM {
            Some(Packet::new_boxed::<{ 9216 + HEADROOM }> as fn() -> Packet)
        } else {
            Some(Packet::new_boxed::<{ 65536 + HEADROOM }> as fn() -> Packet)
        };
        let free: Vec<Packet> = (0..count).map(|_| small()).collect();
        let buf_bytes = free.first().map_or(2048, |p| p.capacity());
        Pool {
            free,
            size: count,
            buf_bytes,
            big: big.map(|make| Big {
                free: Vec::with_capacity(count),
                made: 0,
                limit: count,
                buf_bytes: make().capacity(),
                make,
            }),
        }
    }

    /// A pool that makes no buffers: it holds up to `n` freed ones until they are handed
    /// back to the pool that made them (a later pipeline stage frees into one).
    pub fn holding(n: usize) -> Pool {
        Pool {
            free: Vec::with_capacity(n),
            size: n,
            buf_bytes: usize::MAX,
            big: None,
        }
    }

    /// A buffer with fresh metadata, or None when every buffer is in use.
    #[inline]
    pub fn alloc(&mut self) -> Option<Packet> {
        let mut p = self.free.pop()?;
        p.forget_view();
        *p.meta_mut() = Meta::default();
        Some(p)
    }

    /// Like [`alloc`](Self::alloc) for a packet of `len` bytes.
    #[inline]
    pub fn alloc_for(&mut self, len: usize) -> Option<Packet> {
        let mut p = self.alloc_raw_for(len)?;
        *p.meta_mut() = Meta::default();
        Some(p)
    }

    /// Like [`alloc`](Self::alloc) but leaves the metadata for the caller to overwrite whole.
    #[inline]
    pub fn alloc_raw(&mut self) -> Option<Packet> {
        let mut p = self.free.pop()?;
        // Freed views of `'static` bytes are forgotten here rather than on free.
        p.forget_view();
        Some(p)
    }

    /// A buffer that holds `len` bytes, metadata left as it was; None when none is free
    /// (or `len` is larger than [`max_packet`](Self::max_packet)).
    #[inline]
    pub fn alloc_raw_for(&mut self, len: usize) -> Option<Packet> {
        if len + HEADROOM <= self.buf_bytes {
            return self.alloc_raw();
        }
        let big = self.big.as_mut()?;
        if len + HEADROOM > big.buf_bytes {
            return None;
        }
        if let Some(mut p) = big.free.pop() {
            p.forget_view();
            return Some(p);
        }
        if big.made == big.limit {
            return None;
        }
        // At most `count` times in a run: the pool's memory stays bounded.
        big.made += 1;
        self.size += 1;
        Some((big.make)())
    }

    #[inline]
    pub fn free(&mut self, mut p: Packet) {
        if self.is_holding() {
            // Kept without a look (see `is_holding`).
            debug_assert!(self.free.len() < self.size, "a holding pool over its size");
            self.free.push(p);
            return;
        }
        // A view of `'static` bytes (a mapped trace) may stay one until the buffer is
        // handed out again: skipping its stores here is a few instructions a packet.
        p.forget_lent_view();
        if let Some(big) = self.big.as_mut().filter(|_| p.capacity() > self.buf_bytes) {
            big.free.push(p);
            return;
        }
        debug_assert!(
            self.free.len() < self.size,
            "packet freed twice or from another pool"
        );
        self.free.push(p);
    }

    /// Frees every packet of `b` ([`free`](Self::free) for each), leaving it empty: the
    /// walk's sinks give back a whole batch at once.
    #[inline]
    pub fn free_batch(&mut self, b: &mut super::Batch) {
        if self.is_holding() {
            debug_assert!(
                self.free.len() + b.len() <= self.size,
                "a holding pool over its size"
            );
            b.move_into(&mut self.free);
            return;
        }
        // One look at each packet, its pointer copied to the free list's end as it goes,
        // counted there when all are of the small class (every packet of a trace whose
        // records fit 2 KiB): no block copy after the loop, whose length-dependent
        // branches mispredicted behind an NF that drops a varying share (session 31).
        let (n, at) = (b.len(), self.free.len());
        if self.free.capacity() - at < n {
            return self.free_batch_slow(b);
        }
        let mut small = true;
        let to = self.free.as_mut_ptr();
        for (i, p) in b.iter_mut().enumerate() {
            p.forget_lent_view();
            small &= p.capacity() <= self.buf_bytes;
            // SAFETY: `at + i < at + n <= capacity` (tested above); a bitwise copy, not
            // counted in the free list unless every packet is small (below), so each
            // packet stays owned exactly once.
            unsafe { to.add(at + i).write(std::ptr::read(p)) };
        }
        if !small {
            return self.free_batch_slow(b);
        }
        debug_assert!(
            at + n <= self.size,
            "packet freed twice or from another pool"
        );
        // SAFETY: the `n` copies above are initialised; the batch forgets its own.
        unsafe {
            self.free.set_len(at + n);
            b.forget_all();
        }
    }

    /// [`free_batch`](Self::free_batch) a packet at a time: a batch with a large-class
    /// buffer, or a free list short of room (for a pool's own buffers, only with one).
    #[cold]
    fn free_batch_slow(&mut self, b: &mut super::Batch) {
        for p in b.drain() {
            self.free(p);
        }
    }

    /// Moves the `n` small-class buffers that the next `n` calls of
    /// [`alloc_raw_for`](Self::alloc_raw_for) would give to the end of `b` (in the free
    /// list's order, the reverse of those calls': one block move, and buffers of a class
    /// are alike), metadata left as it was; false, moving nothing, when fewer are free
    /// or `b` lacks the room (so it never grows). Ingest takes a chunk's buffers at once
    /// instead of one pop and push each.
    ///
    /// Unlike the `alloc` calls, a buffer may still view the `'static` bytes (a mapped
    /// trace) it viewed when freed: the caller gives each one new bytes
    /// ([`Packet::set_view`] or [`Packet::set_bytes`]) before anything reads it, or hands it
    /// back with [`give_back`](Self::give_back).
    #[inline]
    pub fn take_into(&mut self, n: usize, b: &mut super::Batch) -> bool {
        let have = self.free.len();
        if have < n || b.capacity() - b.len() < n {
            return false;
        }
        b.move_tail_from(&mut self.free, n);
        true
    }

    /// Undoes [`take_into`](Self::take_into) for the packets of `b` from `from` on: they go
    /// back on top of the free list in the order they were taken, so the next
    /// `take_into` gives them again in the same places.
    #[inline]
    pub fn give_back(&mut self, b: &mut super::Batch, from: usize) {
        b.move_tail_into(from, &mut self.free);
    }

    /// Largest packet a small-class buffer (the ones [`take_into`](Self::take_into)
    /// gives) holds.
    #[inline]
    pub fn small_max(&self) -> usize {
        self.buf_bytes.saturating_sub(HEADROOM)
    }

    /// A holding pool ([`holding`](Self::holding)) keeps freed buffers without looking at
    /// them: they only go back to the pool that made them, which forgets a lent view as
    /// it takes each one back ([`free`](Self::free)), and every `alloc*` forgets any view
    /// before handing a buffer out. So a later pipeline stage frees a packet without
    /// fetching its line once more (`runtime/ring.rs`: that fetch was ~15 of a ring hop's
    /// ~40 ticks a packet).
    #[inline(always)]
    fn is_holding(&self) -> bool {
        self.buf_bytes == usize::MAX
    }

    /// Holding pools: the first `n` buffers held (at most all), in the order they were
    /// freed, to hand back to the pool that made them, without looking at them.
    #[inline]
    pub fn drain_held(&mut self, n: usize) -> std::vec::Drain<'_, Packet> {
        debug_assert!(
            self.is_holding(),
            "only a holding pool hands its buffers on"
        );
        self.free.drain(..n.min(self.free.len()))
    }

    pub fn available(&self) -> usize {
        self.free.len() + self.big.as_ref().map_or(0, |b| b.free.len())
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// Largest packet a buffer of this pool holds.
    pub fn max_packet(&self) -> usize {
        self.big.as_ref().map_or(self.buf_bytes, |b| b.buf_bytes) - HEADROOM
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_freed_view_no_longer_points_at_the_lent_bytes() {
        let mut pool = Pool::new(1, 1500);
        let mut p = pool.alloc().unwrap();
        let frame = vec![7u8; 60];
        // SAFETY: the packet stops viewing `frame` when it is freed, below, before `frame`
        // goes out of scope.
        assert!(unsafe { p.set_view_unchecked(&frame) });
        assert!(p.is_view());
        pool.free(p);
        let p = pool.alloc().unwrap();
        assert!(!p.is_view());
        assert_eq!(p.len(), 0);
        assert!(!std::ptr::eq(p.data().as_ptr(), frame.as_ptr()));
    }

    #[test]
    fn a_batch_freed_at_once_goes_back_by_class_with_views_forgotten() {
        static FRAME: [u8; 60] = [9u8; 60];
        for mixed in [false, true] {
            let mut pool = Pool::new(3, 65535);
            let mut b = crate::packet::Batch::with_capacity(4);
            let mut v = pool.alloc_raw_for(60).unwrap();
            assert!(v.set_view(&FRAME));
            b.push(v);
            b.push(pool.alloc_raw_for(1500).unwrap());
            if mixed {
                b.push(pool.alloc_raw_for(9000).unwrap());
            }
            pool.free_batch(&mut b);
            assert!(b.is_empty());
            assert_eq!(pool.available(), pool.size());
            // Each buffer came back to its own class: three small ones are there to
            // take, and the large one (if any) is reused rather than a new one made.
            let smalls: Vec<Packet> = (0..3).map(|_| pool.alloc_raw_for(60).unwrap()).collect();
            assert!(smalls.iter().all(|p| !p.is_view() && p.is_empty()));
            assert!(pool.alloc_raw_for(60).is_none());
            let made = pool.size();
            let big = pool.alloc_raw_for(9000).unwrap();
            assert_eq!(pool.size(), made + usize::from(!mixed), "mixed = {mixed}");
            pool.free(big);
            smalls.into_iter().for_each(|p| pool.free(p));
        }
    }

    /// A batch with a large-class buffer in the middle (room for all of it on the free
    /// list, so the fast loop copies every pointer before it sees the large one), and
    /// one with no room left on the free list: each buffer goes back exactly once, to
    /// its class, the small ones in the batch's order.
    #[test]
    fn a_batch_with_a_large_buffer_or_no_room_goes_back_once_in_order() {
        let addr = |p: &Packet| std::ptr::from_ref(p.meta()) as usize;
        for no_room in [false, true] {
            let mut pool = Pool::new(4, 65535);
            let mut smalls: Vec<Packet> = (0..4).map(|_| pool.alloc_raw_for(60).unwrap()).collect();
            // Middle large: 3 packets, room for 4. No room: 5 packets, room for 4.
            let held = smalls.split_off(if no_room { 4 } else { 2 });
            let want: Vec<usize> = smalls.iter().map(addr).collect();
            let big = pool.alloc_raw_for(9000).unwrap();
            let big_at = addr(&big);
            let mut b = crate::packet::Batch::with_capacity(5);
            let mut smalls = smalls.into_iter();
            b.push(smalls.next().unwrap());
            b.push(big);
            smalls.for_each(|p| b.push(p));
            assert_eq!((pool.free.len(), pool.free.capacity()), (0, 4));
            pool.free_batch(&mut b);
            assert!(b.is_empty(), "no_room = {no_room}");
            let got: Vec<usize> = pool.free.iter().map(addr).collect();
            assert_eq!(got, want, "no_room = {no_room}");
            let bigs: Vec<usize> = pool.big.as_ref().unwrap().free.iter().map(addr).collect();
            assert_eq!(bigs, vec![big_at], "no_room = {no_room}");
            held.into_iter().for_each(|p| pool.free(p));
            assert_eq!(
                (pool.available(), pool.size()),
                (5, 5),
                "no_room = {no_room}"
            );
        }
    }

    #[test]
    fn a_freed_static_view_is_forgotten_by_every_alloc() {
        static FRAME: [u8; 60] = [5u8; 60];
        for how in 0..4 {
            let mut pool = Pool::new(1, 65535);
            let mut b = crate::packet::Batch::with_capacity(1);
            let mut v = pool.alloc_raw_for(60).unwrap();
            assert!(v.set_view(&FRAME));
            if how % 2 == 0 {
                pool.free(v);
            } else {
                b.push(v);
                pool.free_batch(&mut b);
            }
            let p = match how {
                0 => pool.alloc().unwrap(),
                1 => pool.alloc_raw().unwrap(),
                2 => pool.alloc_for(60).unwrap(),
                _ => pool.alloc_raw_for(60).unwrap(),
            };
            assert!(!p.is_view() && p.is_empty(), "how = {how}");
            let mut q = p;
            // Writes go to the own buffer, never through the old view.
            assert!(q.extend(&[1, 2, 3]));
            assert_eq!(q.data(), &[1, 2, 3]);
            assert!(FRAME.iter().all(|&x| x == 5));
            pool.free(q);
            // `take_into` leaves the bytes to its caller, who gives new ones.
            assert!(pool.take_into(1, &mut b));
            let mut t = b.drain().next().unwrap();
            assert!(t.set_bytes(&[9; 10]));
            assert_eq!(t.data(), &[9; 10]);
            pool.free(t);
        }
    }

    /// Ingest takes a chunk's buffers at once and gives back those the chunk did not
    /// use: they go back whole (no buffer lost or doubled) and come out of the next take
    /// in the places they had.
    #[test]
    fn buffers_given_back_are_taken_again_in_the_same_places() {
        let mut pool = Pool::new(8, 1500);
        let addr = |p: &Packet| std::ptr::from_ref(p.meta()) as usize;
        let free: Vec<usize> = pool.free.iter().map(addr).collect();
        let mut b = crate::packet::Batch::with_capacity(8);
        assert!(pool.take_into(5, &mut b));
        assert_eq!(pool.available(), 3);
        let taken: Vec<usize> = b.iter().map(addr).collect();
        let mut want = free[3..].to_vec();
        let mut got = taken.clone();
        want.sort_unstable();
        got.sort_unstable();
        assert_eq!(got, want, "the five the next allocs would give");
        pool.give_back(&mut b, 2);
        assert_eq!((b.len(), pool.available()), (2, 6));
        assert!(pool.take_into(3, &mut b));
        assert_eq!(b.iter().map(addr).collect::<Vec<_>>(), taken);
        assert!(!pool.take_into(4, &mut b), "three left, not four");
        assert_eq!(b.len(), 5);
        pool.free_batch(&mut b);
        assert_eq!(pool.available(), 8);
    }

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

    #[test]
    fn large_buffers_are_made_on_first_need_and_bounded() {
        let mut pool = Pool::new(2, 65535);
        assert_eq!((pool.size(), pool.available()), (2, 2));
        let big = pool.alloc_raw_for(60_000).unwrap();
        assert!(big.capacity() >= 60_000);
        let big2 = pool.alloc_raw_for(3000).unwrap();
        assert!(
            pool.alloc_raw_for(3000).is_none(),
            "at most `count` large buffers"
        );
        assert!(pool.alloc_raw_for(70_000).is_none());
        let small = pool.alloc_raw_for(1500).unwrap();
        assert!(small.capacity() < 3000);
        assert_eq!(pool.size(), 4);
        pool.free(big);
        pool.free(big2);
        pool.free(small);
        assert_eq!(pool.available(), pool.size());
        // A freed large buffer is used again, not a new one made.
        let again = pool.alloc_raw_for(9000).unwrap();
        assert!(again.capacity() >= 9000);
        assert_eq!(pool.size(), 4);
        pool.free(again);
    }
}
