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

    /// Adds a packet; the caller keeps batches at most [`MAX_BATCH`] long so this never
    /// reallocates.
    #[inline]
    pub fn push(&mut self, p: Packet) {
        debug_assert!(self.pkts.len() < MAX_BATCH);
        self.pkts.push(p);
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

    /// Keeps the packets for which `keep` is true, in order, handing the others to `gone`.
    #[inline]
    pub fn retain_or(&mut self, mut keep: impl FnMut(&Packet) -> bool, mut gone: impl FnMut(Packet)) {
        let mut w = 0;
        for r in 0..self.pkts.len() {
            if keep(&self.pkts[r]) {
                self.pkts.swap(w, r);
                w += 1;
            }
        }
        for p in self.pkts.drain(w..) {
            gone(p);
        }
    }
}

impl<'a> IntoIterator for &'a mut Batch {
    type Item = &'a mut Packet;
    type IntoIter = std::slice::IterMut<'a, Packet>;
    fn into_iter(self) -> Self::IntoIter {
        self.pkts.iter_mut()
    }
}
