//! Reassembly of one direction of a TCP connection into an in-order bytestream.
//!
//! In-order bytes are handed out straight from the segment (zero copy). Segments that
//! arrive ahead of a hole are kept in a ring buffer borrowed from a [`RingPool`] until the
//! hole fills; the ring goes back to the pool as soon as no hole is left, so only flows
//! with reordering or loss hold one.
//!
//! Overlap policy — **first wins** (Snort/Suricata's "first", BSD-like): a byte of the
//! stream, once held (handed out, or buffered out of order), is never replaced by a later
//! segment covering the same sequence number with other bytes. Retransmissions and
//! overlapping segments only contribute the bytes nobody has supplied yet.
//!
//! Bounds: a direction holds at most one ring of `ring_bytes` (a power of two), so it
//! buffers bytes up to `ring_bytes` past the next expected byte, and at most
//! [`MAX_HOLES`] separate out-of-order runs. A segment beyond either bound, or one that
//! finds the pool empty, makes the direction give up (counted by the caller): its ring is
//! returned and it delivers no more bytes. That is the mark for "stream incomplete".

use super::seq;

/// Separate runs of buffered out-of-order bytes a direction may hold.
pub const MAX_HOLES: usize = 16;

/// Rings of one size, allocated on first need up to a fixed count and then recycled, so
/// memory is bounded by `count × ring_bytes` and steady state allocates nothing.
/// An out-of-order buffer: the ring and the list of runs it holds, lent as one piece so
/// a direction that never sees reordering carries only a null pointer.
pub struct Ooo {
    ring: Box<[u8]>,
    /// Buffered runs `[start, end)` in stream offsets, sorted, disjoint, all `> next`.
    holes: [(u64, u64); MAX_HOLES],
}

pub struct RingPool {
    // Boxed so lending one out moves a pointer, not the run list.
    #[allow(clippy::vec_box)]
    free: Vec<Box<Ooo>>,
    made: usize,
    count: usize,
    ring_bytes: usize,
}

impl RingPool {
    /// `ring_bytes` is rounded up to a power of two.
    pub fn new(count: usize, ring_bytes: usize) -> RingPool {
        RingPool {
            free: Vec::with_capacity(count),
            made: 0,
            count,
            ring_bytes: ring_bytes.max(1).next_power_of_two(),
        }
    }

    fn take(&mut self) -> Option<Box<Ooo>> {
        if let Some(r) = self.free.pop() {
            return Some(r);
        }
        if self.made < self.count {
            self.made += 1;
            return Some(Box::new(Ooo {
                ring: vec![0u8; self.ring_bytes].into_boxed_slice(),
                holes: [(0, 0); MAX_HOLES],
            }));
        }
        None
    }

    fn give(&mut self, r: Box<Ooo>) {
        self.free.push(r);
    }

    /// Bytes of every ring the pool may lend (they are made on demand, up to `count`).
    pub fn memory(&self) -> usize {
        self.count
            .saturating_mul(self.ring_bytes + std::mem::size_of::<Ooo>())
    }

    pub fn ring_bytes(&self) -> usize {
        self.ring_bytes
    }

    /// Rings lent out right now.
    pub fn in_use(&self) -> usize {
        self.made - self.free.len()
    }
}

/// A run of in-order bytes for the caller.
#[derive(Debug, PartialEq, Eq)]
pub enum Chunk<'a> {
    /// `payload[off..off + len]` of the segment just given.
    Segment { off: usize, len: usize },
    /// Bytes that had been buffered out of order.
    Buffered(&'a [u8]),
}

/// What a segment did to the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Outcome {
    /// New in-order bytes handed out (from this segment and from the buffer).
    pub delivered: usize,
    /// Bytes of this segment that were already held (retransmission / overlap).
    pub duplicate: usize,
    /// Bytes of this segment buffered ahead of a hole.
    pub buffered: usize,
    /// The direction gave up on this segment (over a bound or no ring free).
    pub gave_up: bool,
}

#[derive(Default)]
pub struct Stream {
    /// Sequence number of stream offset 0 (ISN + 1).
    base: u32,
    started: bool,
    gave_up: bool,
    /// Offset of the next byte to deliver (bytes delivered so far).
    next: u64,
    /// Present while `runs > 0`.
    ooo: Option<Box<Ooo>>,
    runs: u8,
    /// Bytes of acknowledged holes skipped (within `next`).
    skipped: u64,
}

impl Stream {
    /// Sets where the stream starts: the ISN's successor, or the first segment seen on a
    /// mid-stream pickup.
    pub fn start(&mut self, first_seq: u32) {
        self.base = first_seq;
        self.started = true;
    }

    pub fn is_started(&self) -> bool {
        self.started
    }

    pub fn gave_up(&self) -> bool {
        self.gave_up
    }

    /// Stream offset of the next byte to deliver: bytes delivered so far, plus the holes
    /// skipped ([`Stream::skip_acked_hole`]).
    pub fn delivered(&self) -> u64 {
        self.next
    }

    /// Sequence number of the next byte expected.
    pub fn next_seq(&self) -> u32 {
        self.base.wrapping_add(self.next as u32)
    }

    /// Some bytes are buffered behind a hole.
    pub fn has_hole(&self) -> bool {
        self.runs > 0
    }

    /// Returns the ring to the pool (flow end).
    pub fn release(&mut self, pool: &mut RingPool) {
        if let Some(r) = self.ooo.take() {
            pool.give(r);
        }
        self.runs = 0;
    }

    /// Takes the segment `payload` starting at sequence number `seq`, handing every new
    /// in-order run to `out` in stream order.
    pub fn segment(
        &mut self,
        pool: &mut RingPool,
        seq: u32,
        payload: &[u8],
        mut out: impl FnMut(Chunk<'_>),
    ) -> Outcome {
        let mut o = Outcome::default();
        if payload.is_empty() || !self.started || self.gave_up {
            return o;
        }
        // Offsets of the segment relative to the stream; the distance to the next byte
        // is taken modulo 2^32, so sequence wrap-around needs no special case.
        let rel = seq::diff(self.next_seq(), seq);
        let s = self.next as i64 + rel;
        let e = s + payload.len() as i64;
        if e <= self.next as i64 {
            o.duplicate = payload.len();
            return o;
        }
        if s > self.next as i64 {
            self.buffer(pool, s as u64, e as u64, payload, &mut o);
            return o;
        }
        let e = e as u64;
        o.duplicate = (self.next as i64 - s) as usize;
        // First wins: hand out the segment up to the first buffered run, then the run,
        // then the segment again after it, and so on.
        let mut cur = self.next;
        loop {
            let first = match &self.ooo {
                Some(o) if self.runs > 0 => Some(o.holes[0]),
                _ => None,
            };
            if let Some((_, re)) = first.filter(|&(rs, _)| rs <= cur) {
                if e > cur {
                    o.duplicate += (e.min(re) - cur) as usize;
                }
                self.emit_ring(cur, re, &mut out);
                o.delivered += (re - cur) as usize;
                cur = re;
                let n = self.runs as usize;
                if let Some(o) = self.ooo.as_deref_mut() {
                    o.holes.copy_within(1..n, 0);
                }
                self.runs -= 1;
            } else if cur < e {
                let lim = first.map_or(e, |(rs, _)| e.min(rs));
                out(Chunk::Segment {
                    off: (cur as i64 - s) as usize,
                    len: (lim - cur) as usize,
                });
                o.delivered += (lim - cur) as usize;
                cur = lim;
            } else {
                break;
            }
        }
        self.next = cur;
        if self.runs == 0 {
            if let Some(r) = self.ooo.take() {
                pool.give(r);
            }
        }
        o
    }

    /// The receiver acknowledged up to sequence number `ack`. When bytes wait behind a
    /// hole and `ack` reaches past the start of the first buffered run, the receiver got
    /// the hole's bytes and the capture did not: the hole is skipped (as Suricata's
    /// reassembly does once such a gap is acknowledged) and that run handed to `out`.
    /// Returns the hole's length and the run's, or `None` (nothing to skip). One hole per
    /// call: call again while it returns `Some`.
    pub fn skip_acked_hole(
        &mut self,
        pool: &mut RingPool,
        ack: u32,
        mut out: impl FnMut(Chunk<'_>),
    ) -> Option<(u64, u64)> {
        if self.runs == 0 || self.gave_up {
            return None;
        }
        let rel = seq::diff(self.next_seq(), ack);
        let (rs, re) = self.ooo.as_deref()?.holes[0];
        if rel <= 0 || rs >= self.next + rel as u64 {
            return None;
        }
        let hole = rs - self.next;
        self.emit_ring(rs, re, &mut out);
        let n = self.runs as usize;
        if let Some(o) = self.ooo.as_deref_mut() {
            o.holes.copy_within(1..n, 0);
        }
        self.runs -= 1;
        self.next = re;
        self.skipped += hole;
        if self.runs == 0 {
            if let Some(r) = self.ooo.take() {
                pool.give(r);
            }
        }
        Some((hole, re - rs))
    }

    /// The segment of `len` bytes at `seq` would not fit the ring behind the hole before
    /// it (the capture lost bytes of this side: at its start, a pickup's other side
    /// started at the pickup's ACK, or later, its receiver acknowledging what the capture
    /// never showed): buffering it would give the direction up.
    pub fn hole_overflows(&self, seq: u32, len: usize, ring_bytes: usize) -> bool {
        let rel = seq::diff(self.next_seq(), seq);
        self.started && !self.gave_up && rel > 0 && rel as u64 + len as u64 > ring_bytes as u64
    }

    /// Skips the hole before `seq` when no run is held before it (see
    /// [`Stream::hole_overflows`]; runs held before it are skipped first with
    /// [`Stream::skip_acked_hole`]); returns the hole's length.
    pub fn skip_hole_to(&mut self, seq: u32) -> u64 {
        let rel = seq::diff(self.next_seq(), seq);
        if rel <= 0 {
            return 0;
        }
        let to = self.next + rel as u64;
        let held_before = self.runs != 0 && self.ooo.as_deref().is_some_and(|o| o.holes[0].0 < to);
        if held_before {
            return 0;
        }
        self.next = to;
        self.skipped += rel as u64;
        rel as u64
    }

    /// Bytes of holes skipped so far ([`Stream::skip_acked_hole`]): not delivered, though
    /// counted in the stream's offsets.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    fn emit_ring(&self, from: u64, to: u64, out: &mut impl FnMut(Chunk<'_>)) {
        let Some(r) = self.ooo.as_deref().map(|o| &o.ring[..]) else {
            return;
        };
        let mask = r.len() as u64 - 1;
        let (a, b) = ((from & mask) as usize, (to & mask) as usize);
        if to - from == 0 {
            return;
        }
        if a < b {
            out(Chunk::Buffered(&r[a..b]));
        } else {
            out(Chunk::Buffered(&r[a..]));
            if b > 0 {
                out(Chunk::Buffered(&r[..b]));
            }
        }
    }

    /// Keeps `[s, e)` (stream offsets, `s > next`) for later, filling only the gaps
    /// between runs already held (first wins).
    fn buffer(&mut self, pool: &mut RingPool, s: u64, e: u64, payload: &[u8], o: &mut Outcome) {
        if e - self.next > pool.ring_bytes() as u64 {
            return self.give_up(pool, o);
        }
        if self.ooo.is_none() {
            match pool.take() {
                Some(r) => self.ooo = Some(r),
                None => return self.give_up(pool, o),
            }
        }
        let runs = self.runs as usize;
        let buf = self.ooo.as_deref_mut().expect("taken above");
        // Merge into the sorted run list first, so a list overflow gives up before any
        // byte is written.
        let mut merged = [(0u64, 0u64); MAX_HOLES + 1];
        let mut n = 0;
        let (mut ns, mut ne) = (s, e);
        let mut placed = false;
        for &(rs, re) in &buf.holes[..runs] {
            if re < ns {
                merged[n] = (rs, re);
                n += 1;
            } else if rs > ne {
                if !placed {
                    merged[n] = (ns, ne);
                    n += 1;
                    placed = true;
                }
                merged[n] = (rs, re);
                n += 1;
            } else {
                ns = ns.min(rs);
                ne = ne.max(re);
            }
        }
        if !placed {
            merged[n] = (ns, ne);
            n += 1;
        }
        if n > MAX_HOLES {
            return self.give_up(pool, o);
        }
        // Copy the bytes of [s, e) not already held.
        let ring = &mut buf.ring;
        let mask = ring.len() as u64 - 1;
        let mut cur = s;
        let mut i = 0;
        let runs = &buf.holes[..runs];
        while cur < e {
            while i < runs.len() && runs[i].1 <= cur {
                i += 1;
            }
            let (lim, skip_to) = match runs.get(i) {
                Some(&(rs, re)) if rs <= cur => (cur, re.min(e)),
                Some(&(rs, _)) => (rs.min(e), rs.min(e)),
                None => (e, e),
            };
            for off in cur..lim {
                ring[(off & mask) as usize] = payload[(off - s) as usize];
            }
            o.buffered += (lim - cur) as usize;
            o.duplicate += (skip_to - lim) as usize;
            cur = skip_to.max(lim);
        }
        buf.holes[..n].copy_from_slice(&merged[..n]);
        self.runs = n as u8;
    }

    fn give_up(&mut self, pool: &mut RingPool, o: &mut Outcome) {
        self.gave_up = true;
        o.gave_up = true;
        self.release(pool);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds segments (seq, bytes) and collects the stream.
    fn feed(isn: u32, segs: &[(u32, &[u8])], ring: usize) -> (Vec<u8>, Stream, RingPool) {
        let mut pool = RingPool::new(2, ring);
        let mut st = Stream::default();
        st.start(isn);
        let mut got = Vec::new();
        for &(seq, p) in segs {
            st.segment(&mut pool, seq, p, |c| match c {
                Chunk::Segment { off, len } => got.extend_from_slice(&p[off..off + len]),
                Chunk::Buffered(b) => got.extend_from_slice(b),
            });
        }
        (got, st, pool)
    }

    #[test]
    fn in_order_and_reordered() {
        let (got, st, pool) = feed(100, &[(100, b"abc"), (106, b"ghi"), (103, b"def")], 64);
        assert_eq!(got, b"abcdefghi");
        assert_eq!(st.delivered(), 9);
        assert_eq!(pool.in_use(), 0, "ring returned once the hole is filled");
    }

    #[test]
    fn retransmission_is_not_delivered_twice() {
        let (got, ..) = feed(0, &[(0, b"abcd"), (0, b"abcd"), (2, b"cdef")], 64);
        assert_eq!(got, b"abcdef");
    }

    #[test]
    fn overlap_first_wins_in_order() {
        // "XXXX" retransmits 2..6 with other bytes: only 4..6 is new and comes from it.
        let (got, ..) = feed(0, &[(0, b"abcd"), (2, b"XXXX")], 64);
        assert_eq!(got, b"abcdXX");
    }

    #[test]
    fn overlap_first_wins_against_buffered_bytes() {
        // 4..8 "efgh" is buffered first; then 0..10 "0123456789" arrives: bytes 0..4 and
        // 8..10 come from it, 4..8 stay "efgh".
        let (got, ..) = feed(0, &[(4, b"efgh"), (0, b"0123456789")], 64);
        assert_eq!(got, b"0123efgh89");
        // Two buffered runs overlapping each other: 2..5 "CDE" then 4..7 "xyz" → "CDEyz".
        let (got, ..) = feed(0, &[(2, b"CDE"), (4, b"xyz"), (0, b"ab")], 64);
        assert_eq!(got, b"abCDEyz");
    }

    #[test]
    fn sequence_wraps() {
        let isn = u32::MAX - 3;
        let (got, st, _) = feed(
            isn,
            &[
                (isn, b"abcd"),
                (isn.wrapping_add(8), b"ijkl"),
                (isn.wrapping_add(4), b"efgh"),
            ],
            64,
        );
        assert_eq!(got, b"abcdefghijkl");
        assert_eq!(st.next_seq(), 8);
    }

    #[test]
    fn buffered_run_wraps_the_ring() {
        // Ring of 16: after 0..12 was delivered, the run 14..20 sits at ring slots
        // 14, 15, 0..4, across the end of the ring.
        let (got, ..) = feed(0, &[(0, b"0123456789ab"), (14, b"EFGHIJ"), (12, b"CD")], 16);
        assert_eq!(got, b"0123456789abCDEFGHIJ");
    }

    #[test]
    fn over_the_bound_gives_up() {
        let (got, st, pool) = feed(0, &[(0, b"ab"), (20, b"far away"), (2, b"cd")], 16);
        assert_eq!(got, b"ab");
        assert!(st.gave_up());
        assert_eq!(pool.in_use(), 0);
    }

    #[test]
    fn too_many_runs_gives_up() {
        let segs: Vec<(u32, &[u8])> = (0..=MAX_HOLES as u32)
            .map(|i| (2 + 2 * i, &b"x"[..]))
            .collect();
        let (_, st, _) = feed(0, &segs, 64);
        assert!(st.gave_up());
    }

    #[test]
    fn empty_pool_gives_up() {
        let mut pool = RingPool::new(0, 64);
        let mut st = Stream::default();
        st.start(0);
        let o = st.segment(&mut pool, 5, b"late", |_| {});
        assert!(o.gave_up && st.gave_up());
    }

    #[test]
    fn acknowledged_hole_is_skipped() {
        let mut pool = RingPool::new(2, 64);
        let mut st = Stream::default();
        st.start(0);
        let mut got = Vec::new();
        let take = |c: Chunk<'_>, p: &[u8], got: &mut Vec<u8>| match c {
            Chunk::Segment { off, len } => got.extend_from_slice(&p[off..off + len]),
            Chunk::Buffered(b) => got.extend_from_slice(b),
        };
        st.segment(&mut pool, 0, b"ab", |c| take(c, b"ab", &mut got));
        st.segment(&mut pool, 5, b"fgh", |c| take(c, b"fgh", &mut got));
        st.segment(&mut pool, 10, b"kl", |c| take(c, b"kl", &mut got));
        // An ACK up to the hole's start, or to the run's first byte, skips nothing.
        assert_eq!(st.skip_acked_hole(&mut pool, 2, |_| {}), None);
        assert_eq!(st.skip_acked_hole(&mut pool, 5, |_| {}), None);
        assert_eq!(
            st.skip_acked_hole(&mut pool, 6, |c| take(c, b"", &mut got)),
            Some((3, 3))
        );
        assert_eq!(got, b"abfgh");
        assert_eq!((st.delivered(), st.skipped()), (8, 3));
        // The second hole waits for its own acknowledgment.
        assert_eq!(st.skip_acked_hole(&mut pool, 10, |_| {}), None);
        assert_eq!(pool.in_use(), 1);
        assert_eq!(
            st.skip_acked_hole(&mut pool, 12, |c| take(c, b"", &mut got)),
            Some((2, 2))
        );
        assert_eq!(got, b"abfghkl");
        assert_eq!(pool.in_use(), 0, "ring returned once no run is left");
        // In-order bytes go on after the skipped holes.
        st.segment(&mut pool, 12, b"mn", |c| take(c, b"mn", &mut got));
        assert_eq!(got, b"abfghklmn");
    }
}
