//! The bounded table of consolidated entries: 4-way set associative, least recently
//! used way evicted when a set is full, idle timeout on capture time. Allocated once.

use std::hash::BuildHasher;

use super::actions::Actions;
use super::key::FpKey;
use crate::flow::FlowKey;
use crate::packet::Verdict;

/// Most NFs on a consolidated path; longer paths are not consolidated.
pub const MAX_PATH: usize = 8;
const WAYS: usize = 4;

/// One NF on an entry's path.
#[derive(Clone, Copy, Debug)]
pub struct Step {
    pub node: u16,
    /// The NF's generation when recorded: a control change bumps it.
    pub gen: u32,
    /// Out(counted output) or Drop(reason), as the NF decided.
    pub verdict: Verdict,
    pub token: u64,
    /// The flow key as this NF saw it (earlier NFs may have rewritten it).
    pub key: FlowKey,
}

impl Step {
    pub const EMPTY: Step = Step {
        node: 0,
        gen: 0,
        verdict: Verdict::Out(0),
        token: 0,
        key: FpKey::EMPTY.flow,
    };
}

/// A flow's consolidated path and actions.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    pub key: FpKey,
    pub last_ns: u64,
    pub steps: [Step; MAX_PATH],
    pub len: u8,
    /// The sink the packet reaches, or None when the last step drops it.
    pub sink: Option<u16>,
    pub egress: u16,
    pub actions: Actions,
}

impl Entry {
    pub const EMPTY: Entry = Entry {
        key: FpKey::EMPTY,
        last_ns: 0,
        steps: [Step::EMPTY; MAX_PATH],
        len: 0,
        sink: None,
        egress: 0,
        actions: Actions::NONE,
    };

    pub fn path(&self) -> &[Step] {
        &self.steps[..self.len as usize]
    }
}

pub struct Table {
    /// Per way: 0 when empty, else the key hash's high half with the low bit set.
    tags: Vec<u32>,
    /// Per way: logical time of last use, for LRU.
    used: Vec<u64>,
    entries: Vec<Entry>,
    sets: usize,
    hasher: crate::flow::Hasher,
    clock: u64,
    timeout_ns: u64,
    live: usize,
}

/// What a table operation did, for the counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found {
    Hit(usize),
    Miss,
    /// The entry was idle past the timeout and is gone.
    Expired,
}

impl Table {
    /// Room for about `capacity` entries (rounded up to a power of two of sets).
    pub fn new(capacity: usize, timeout_ns: u64) -> Table {
        let sets = capacity.div_ceil(WAYS).max(1).next_power_of_two();
        Table {
            tags: vec![0; sets * WAYS],
            used: vec![0; sets * WAYS],
            entries: vec![Entry::EMPTY; sets * WAYS],
            sets,
            hasher: crate::flow::Hasher::default(),
            clock: 0,
            timeout_ns,
            live: 0,
        }
    }

    pub fn capacity(&self) -> usize {
        self.sets * WAYS
    }

    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    #[inline]
    fn place(&self, k: &FpKey) -> (usize, u32) {
        let h = self.hasher.hash_one(k);
        let set = (h as usize) & (self.sets - 1);
        (set * WAYS, (h >> 32) as u32 | 1)
    }

    #[inline]
    fn way(&self, k: &FpKey) -> Option<usize> {
        let (base, tag) = self.place(k);
        (base..base + WAYS).find(|&w| self.tags[w] == tag && self.entries[w].key == *k)
    }

    /// Looks `k` up at capture time `now`.
    #[inline]
    pub fn find(&mut self, k: &FpKey, now: u64) -> Found {
        let Some(w) = self.way(k) else {
            return Found::Miss;
        };
        let e = &self.entries[w];
        if self.timeout_ns != 0 && now.saturating_sub(e.last_ns) > self.timeout_ns {
            self.remove(w);
            return Found::Expired;
        }
        self.clock += 1;
        self.used[w] = self.clock;
        Found::Hit(w)
    }

    #[inline]
    pub fn entry(&self, w: usize) -> &Entry {
        &self.entries[w]
    }

    #[inline]
    pub fn touch(&mut self, w: usize, now: u64) {
        let e = &mut self.entries[w];
        e.last_ns = e.last_ns.max(now);
    }

    pub fn remove(&mut self, w: usize) {
        if self.tags[w] != 0 {
            self.tags[w] = 0;
            self.live -= 1;
        }
    }

    /// Removes the entry for `k`, if any; returns whether there was one.
    pub fn remove_key(&mut self, k: &FpKey) -> bool {
        match self.way(k) {
            Some(w) => {
                self.remove(w);
                true
            }
            None => false,
        }
    }

    /// Installs `e` (replacing an entry of the same key); returns whether another entry
    /// was evicted to make room.
    pub fn insert(&mut self, e: &Entry) -> bool {
        let (base, tag) = self.place(&e.key);
        let mut evicted = false;
        let w = match self.way(&e.key) {
            Some(w) => w,
            None => match (base..base + WAYS).find(|&w| self.tags[w] == 0) {
                Some(w) => {
                    self.live += 1;
                    w
                }
                None => {
                    evicted = true;
                    (base..base + WAYS)
                        .min_by_key(|&w| self.used[w])
                        .unwrap_or(base)
                }
            },
        };
        self.clock += 1;
        self.tags[w] = tag;
        self.used[w] = self.clock;
        self.entries[w] = *e;
        evicted
    }
}
