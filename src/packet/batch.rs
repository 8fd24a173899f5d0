//! A batch: up to [`MAX_BATCH`] packets processed together by each NF.

use super::buf::Packet;

/// As in BESS and VPP: large enough to amortise per-call costs, small enough for L1.
pub const MAX_BATCH: usize = 32;

pub struct Batch {
    pkts: Vec<Packet>,
}

impl Default for Batch {
    fn default() -> Self {
        Self::new()
    }
}

impl Batch {
    pub fn new() -> Batch {
        Batch {
            pkts: Vec::with_capacity(MAX_BATCH),
        }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.pkts.len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.pkts.is_empty()
    }

    #[inline]
    pub fn is_full(&self) -> bool {
        self.pkts.len() >= MAX_BATCH
    }

    /// Room for `n` packets: a node fed by several others may hold more than one batch.
    pub fn with_capacity(n: usize) -> Batch {
        Batch {
            pkts: Vec::with_capacity(n),
        }
    }

    /// Adds a packet; callers stay within the capacity they asked for, so this never
    /// reallocates.
    #[inline]
    pub fn push(&mut self, p: Packet) {
        debug_assert!(
            self.pkts.len() < self.pkts.capacity(),
            "batch over capacity"
        );
        self.pkts.push(p);
    }

    pub fn capacity(&self) -> usize {
        self.pkts.capacity()
    }

    #[inline]
    pub fn iter(&self) -> std::slice::Iter<'_, Packet> {
        self.pkts.iter()
    }

    #[inline]
    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, Packet> {
        self.pkts.iter_mut()
    }

    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [Packet] {
        &mut self.pkts
    }

    #[inline]
    pub fn drain(&mut self) -> std::vec::Drain<'_, Packet> {
        self.pkts.drain(..)
    }

    /// Moves the last `n` packets of `v` (at most its length) to the end of this batch, in
    /// their order, as one block copy; the caller has checked the room.
    #[inline]
    pub(crate) fn move_tail_from(&mut self, v: &mut Vec<Packet>, n: usize) {
        let from = v.len() - n.min(v.len());
        move_tail(v, from, &mut self.pkts);
    }

    /// Moves the packets from position `from` on to the end of `v`, in their order.
    #[inline]
    pub(crate) fn move_tail_into(&mut self, from: usize, v: &mut Vec<Packet>) {
        move_tail(&mut self.pkts, from, v);
    }

    /// Keeps the packets for which `keep` is true, in order, handing the others to `gone`
    /// in their order; `keep` is asked once per packet, in order. In a batch of at most
    /// [`MAX_BATCH`] packets, those after the first that goes are sorted without a branch
    /// on `keep`'s answer (behind a firewall, forwarded and dropped packets come in no
    /// order a predictor learns: 0.69 mispredicts a packet with a branch, session 23);
    /// larger batches (a node fed by several) take one pass that branches.
    #[inline]
    pub fn retain_or(
        &mut self,
        mut keep: impl FnMut(&Packet) -> bool,
        mut gone: impl FnMut(Packet),
    ) {
        let len = self.pkts.len();
        if len > MAX_BATCH {
            return self.retain_or_long(keep, gone);
        }
        // Most batches behind most NFs drop nothing: the packets before the first that
        // goes are only looked at (a branch learned there), the rest sorted as below.
        let first = self.kept_prefix(&mut keep);
        if first == len {
            return;
        }
        let mut out = [const { std::mem::MaybeUninit::<Packet>::uninit() }; MAX_BATCH];
        let to = out.as_mut_ptr().cast::<Packet>();
        // SAFETY: `out` has room for `len <= MAX_BATCH` packets; it owns none before.
        // After the sort `out[..g]` holds the packets that go, each exactly once.
        unsafe {
            let g = self.sort_from(first, &mut keep, to);
            for i in 0..g {
                gone(to.add(i).read());
            }
        }
    }

    /// How many packets at the front `keep` takes, asking it up to the first it refuses.
    #[inline(always)]
    fn kept_prefix(&self, keep: &mut impl FnMut(&Packet) -> bool) -> usize {
        self.pkts.iter().take_while(|p| keep(p)).count()
    }

    /// Sorts the packets from `first` (which goes) to the end: those `keep` takes stay in
    /// order at the front, the others are written in order at `to`; returns how many.
    /// Each packet is read once, then its bits written both at `w <= r` (a slot already
    /// read) and at `to[g]`; only one of the two counts advances, so at the end the first
    /// `w` slots and `to[..g]` hold every packet exactly once (a copy not counted is
    /// overwritten or forgotten). The length is 0 while packets move, so a panic in
    /// `keep` leaks them instead of dropping one twice.
    ///
    /// # Safety
    /// `first < self.len()`, and `to` has room for `self.len() - first` packets and owns
    /// none of them (the caller takes ownership of `to[..returned]`).
    #[inline(always)]
    unsafe fn sort_from(
        &mut self,
        first: usize,
        keep: &mut impl FnMut(&Packet) -> bool,
        to: *mut Packet,
    ) -> usize {
        let len = self.pkts.len();
        let base = self.pkts.as_mut_ptr();
        // SAFETY: the caller's contract; every index below is `< len`, and `g <= r - first`.
        unsafe {
            self.pkts.set_len(0);
            to.write(base.add(first).read());
            let mut w = first;
            let mut g = 1;
            for r in first + 1..len {
                let p = base.add(r).read();
                let k = keep(&p);
                std::ptr::copy_nonoverlapping(&p, base.add(w), 1);
                to.add(g).write(p);
                w += usize::from(k);
                g += usize::from(!k);
            }
            self.pkts.set_len(w);
            g
        }
    }

    /// [`Batch::retain_or`] that moves the packets `keep` refuses to the end of `gone`, in
    /// their order, instead of handing them out one by one: the caller then frees them
    /// as a block (`Pool::free_batch`), not with a call per packet (behind the firewall,
    /// ~25 instructions a dropped packet, session 31). Sorted without a branch on
    /// `keep`'s answer as in `retain_or` when the batch holds at most [`MAX_BATCH`] and
    /// `gone` has room for all of it; otherwise one pass that branches.
    #[inline]
    pub fn retain_or_move(&mut self, mut keep: impl FnMut(&Packet) -> bool, gone: &mut Batch) {
        let len = self.pkts.len();
        if len > MAX_BATCH || gone.pkts.capacity() - gone.pkts.len() < len {
            return self.retain_or_long(keep, |p| gone.pkts.push(p));
        }
        let first = self.kept_prefix(&mut keep);
        if first == len {
            return;
        }
        let at = gone.pkts.len();
        // SAFETY: `gone` has room for at least `len` more packets (tested above) and its
        // length stays put while they move; `sort_from` writes `g` of them at its end.
        unsafe {
            let g = self.sort_from(first, &mut keep, gone.pkts.as_mut_ptr().add(at));
            gone.pkts.set_len(at + g);
        }
    }

    /// [`Batch::retain_or`] for more than [`MAX_BATCH`] packets, in one pass that
    /// branches: the packets before the first that goes are only looked at, the rest
    /// move at most once.
    #[cold]
    fn retain_or_long(
        &mut self,
        mut keep: impl FnMut(&Packet) -> bool,
        mut gone: impl FnMut(Packet),
    ) {
        let first = self.kept_prefix(&mut keep);
        let len = self.pkts.len();
        if first == len {
            return;
        }
        let base = self.pkts.as_mut_ptr();
        // SAFETY: the length is 0 while packets move, so a panic in `keep` or `gone`
        // leaks the rest instead of dropping one twice; each packet from `first` on is
        // read once, then either written back at `w <= r` (a slot already read) or
        // handed to `gone`; the first `w` slots hold the kept ones at the end.
        unsafe {
            self.pkts.set_len(0);
            gone(base.add(first).read());
            let mut w = first;
            for r in first + 1..len {
                let p = base.add(r).read();
                if keep(&p) {
                    base.add(w).write(p);
                    w += 1;
                } else {
                    gone(p);
                }
            }
            self.pkts.set_len(w);
        }
    }

    /// Empties the batch without dropping its packets.
    ///
    /// # Safety
    /// Each packet must be owned elsewhere already (a bitwise copy kept), or it leaks.
    #[inline]
    pub(crate) unsafe fn forget_all(&mut self) {
        // SAFETY: 0 is always a valid length; the caller keeps the packets.
        unsafe { self.pkts.set_len(0) };
    }

    /// Moves every packet to the end of `to` (one copy of the pointers), leaving the
    /// batch empty.
    #[inline]
    pub(crate) fn move_into(&mut self, to: &mut Vec<Packet>) {
        to.append(&mut self.pkts);
    }
}

impl<'a> IntoIterator for &'a mut Batch {
    type Item = &'a mut Packet;
    type IntoIter = std::slice::IterMut<'a, Packet>;
    fn into_iter(self) -> Self::IntoIter {
        self.pkts.iter_mut()
    }
}

/// Moves `src[from..]` to the end of `dst` in one block copy (`extend` over a `Drain`
/// moved them one by one, ~7 instructions a packet on ingest's path); `dst` grows only
/// if it lacks the room.
#[inline]
fn move_tail(src: &mut Vec<Packet>, from: usize, dst: &mut Vec<Packet>) {
    let n = src.len().saturating_sub(from);
    if n == 0 {
        return;
    }
    dst.reserve(n);
    // SAFETY: `src[from..]` holds `n` initialised packets and `dst` has room for `n`
    // more; the two vectors are distinct (`&mut`), so the ranges do not overlap. The
    // packets are moved: `src` forgets them (its length drops to `from`) before `dst`
    // counts them, so each is owned once.
    unsafe {
        let at = dst.len();
        std::ptr::copy_nonoverlapping(src.as_ptr().add(from), dst.as_mut_ptr().add(at), n);
        src.set_len(from);
        dst.set_len(at + n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retain_or_keeps_order_and_hands_over_the_rest_in_order() {
        let mut b = Batch::with_capacity(8);
        for i in 0..7u8 {
            b.push(Packet::from_bytes(&[i; 20]));
        }
        let mut asked = Vec::new();
        b.retain_or(
            |p| {
                asked.push(p.data()[0]);
                true
            },
            |_| unreachable!("nothing goes"),
        );
        assert_eq!((asked, b.len()), (vec![0, 1, 2, 3, 4, 5, 6], 7));
        let mut asked = Vec::new();
        let mut gone = Vec::new();
        b.retain_or(
            |p| {
                asked.push(p.data()[0]);
                p.data()[0] % 3 != 1
            },
            |p| gone.push(p.data()[0]),
        );
        assert_eq!(asked, [0, 1, 2, 3, 4, 5, 6], "asked once each, in order");
        let kept: Vec<u8> = b.iter().map(|p| p.data()[0]).collect();
        assert_eq!(kept, [0, 2, 3, 5, 6]);
        assert_eq!(gone, [1, 4]);
        let mut to = Vec::new();
        b.move_into(&mut to);
        assert!(b.is_empty());
        assert_eq!(to.len(), 5);
    }

    /// The moving form gives the same split as `retain_or`: kept in order, the rest
    /// appended to `gone` after what it held, in order; and the branching pass when
    /// `gone` lacks the room or the batch is over `MAX_BATCH`.
    #[test]
    fn retain_or_move_appends_the_rest_in_order() {
        for (n, room) in [
            (7, 16),
            (MAX_BATCH, MAX_BATCH + 1),
            (MAX_BATCH, 4),
            (MAX_BATCH + 9, 64),
        ] {
            let mut b = Batch::with_capacity(n);
            for i in 0..n {
                b.push(Packet::from_bytes(&[i as u8; 20]));
            }
            let mut gone = Batch::with_capacity(room);
            gone.push(Packet::from_bytes(&[200; 20]));
            let mut asked = Vec::new();
            b.retain_or_move(
                |p| {
                    asked.push(p.data()[0]);
                    p.data()[0] % 3 != 1
                },
                &mut gone,
            );
            let kept: Vec<u8> = b.iter().map(|p| p.data()[0]).collect();
            let went: Vec<u8> = gone.iter().map(|p| p.data()[0]).collect();
            let all: Vec<u8> = (0..n as u8).collect();
            assert_eq!(asked, all, "{n}: asked once each, in order");
            let want: Vec<u8> = (0..n as u8).filter(|i| i % 3 != 1).collect();
            let mut want_gone = vec![200];
            want_gone.extend((0..n as u8).filter(|i| i % 3 == 1));
            let (k, g) = (kept.len(), went.len());
            assert_eq!((kept, went), (want, want_gone), "{n} packets, room {room}");
            b.retain_or_move(|_| true, &mut gone);
            assert_eq!((b.len(), gone.len()), (k, g), "{n}: nothing goes");
            let mut rest = Batch::with_capacity(room);
            b.retain_or_move(|_| false, &mut rest);
            assert_eq!((b.len(), rest.len()), (0, k), "{n}: everything goes");
        }
    }

    /// A batch over `MAX_BATCH` (a node fed by several) takes the other pass: the same
    /// result. Every packet comes out exactly once (a packet handed out twice would be
    /// freed twice).
    #[test]
    fn retain_or_past_max_batch_and_with_every_packet_gone() {
        for n in [MAX_BATCH, MAX_BATCH + 9] {
            let mut b = Batch::with_capacity(n);
            for i in 0..n {
                b.push(Packet::from_bytes(&[i as u8; 20]));
            }
            let mut gone = Vec::new();
            b.retain_or(|p| p.data()[0] % 4 == 0, |p| gone.push(p.data()[0]));
            let kept: Vec<u8> = b.iter().map(|p| p.data()[0]).collect();
            let want: Vec<u8> = (0..n as u8).filter(|i| i % 4 == 0).collect();
            let went: Vec<u8> = (0..n as u8).filter(|i| i % 4 != 0).collect();
            assert_eq!((kept, gone), (want, went), "{n} packets");
            let mut none = 0;
            b.retain_or(|_| false, |_| none += 1);
            assert_eq!((b.len(), none), (0, n.div_ceil(4)));
        }
    }
}
