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

    /// Keeps the packets for which `keep` is true, in order, handing the others to `gone`.
    /// One pass, `keep` asked once per packet: the packets before the first that goes
    /// are only looked at, the rest move at most once (the walk runs this after every
    /// NF that can drop, and most batches drop nothing).
    #[inline]
    pub fn retain_or(
        &mut self,
        mut keep: impl FnMut(&Packet) -> bool,
        mut gone: impl FnMut(Packet),
    ) {
        // An index loop over a slice: `position` kept three counters live per packet.
        let pkts = &self.pkts[..];
        let mut first = 0;
        while first < pkts.len() && keep(&pkts[first]) {
            first += 1;
        }
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
}
