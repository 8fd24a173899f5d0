//! The bounded table of consolidated entries: 4-way set associative, least recently
//! used way evicted when a set is full, idle timeout on capture time. Allocated once.

use std::hash::BuildHasher;

use super::actions::Actions;
use super::key::FpKey;
use crate::flow::FlowKey;
use crate::packet::Verdict;

/// Most NFs on a consolidated path; longer paths are not consolidated.
pub const MAX_PATH: usize = 8;
/// Most distinct flow keys along a path (each NF that rewrites addresses or ports makes
/// one more).
pub const MAX_KEYS: usize = 4;
const WAYS: usize = 4;

const NO_KEY: FlowKey = FlowKey {
    src: [0; 16],
    dst: [0; 16],
    sport: 0,
    dport: 0,
    proto: 0,
    family: 0,
};

/// One NF on an entry's path.
#[derive(Clone, Copy, Debug)]
pub struct Step {
    pub node: u16,
    /// The NF's generation when recorded: a control change bumps it.
    pub gen: u32,
    /// Out(counted output) or Drop(reason), as the NF decided.
    pub verdict: Verdict,
    pub token: u64,
}

impl Step {
    pub const EMPTY: Step = Step {
        node: 0,
        gen: 0,
        verdict: Verdict::Out(0),
        token: 0,
    };
}

/// A flow's consolidated path and actions. What a hit reads first (key, sink, path
/// length) shares the first cache line.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
pub struct Entry {
    pub key: FpKey,
    pub last_ns: u64,
    pub len: u8,
    pub nkeys: u8,
    pub egress: u16,
    /// The sink the packet reaches, or None when the last step drops it.
    pub sink: Option<u16>,
    /// Per step, the index in `keys` of the flow key as that NF saw it (earlier NFs may
    /// have rewritten it).
    pub step_keys: [u8; MAX_PATH],
    pub steps: [Step; MAX_PATH],
    pub actions: Actions,
    pub keys: [FlowKey; MAX_KEYS],
}

impl Entry {
    pub const EMPTY: Entry = Entry {
        key: FpKey::EMPTY,
        last_ns: 0,
        len: 0,
        nkeys: 0,
        egress: 0,
        sink: None,
        step_keys: [0; MAX_PATH],
        steps: [Step::EMPTY; MAX_PATH],
        actions: Actions::NONE,
        keys: [NO_KEY; MAX_KEYS],
    };

    pub fn path(&self) -> &[Step] {
        &self.steps[..self.len as usize]
    }

    /// The flow key step `i` saw.
    #[inline]
    pub fn key_of(&self, i: usize) -> &FlowKey {
        &self.keys[self.step_keys[i] as usize]
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

    /// The key's hash, for [`find`](Self::find) and [`prefetch`](Self::prefetch).
    #[inline]
    pub fn hash(&self, k: &FpKey) -> u64 {
        self.hasher.hash_one(k)
    }

    /// (first way of the set, tag): the set from the high bits of a multiplied hash.
    #[inline]
    fn place(&self, h: u64) -> (usize, u32) {
        let m = h.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let set = (m >> 32) as usize & (self.sets - 1);
        (set * WAYS, h as u32 | 1)
    }

    #[inline]
    fn way(&self, k: &FpKey, h: u64) -> Option<usize> {
        let (base, tag) = self.place(h);
        (base..base + WAYS).find(|&w| self.tags[w] == tag && self.entries[w].key == *k)
    }

    /// Starts loading the tags a lookup of hash `h` reads, so a chunk's lookups overlap
    /// their cache misses.
    #[inline]
    pub fn prefetch_tags(&self, h: u64) {
        prefetch(&self.tags[self.place(h).0]);
    }

    /// Starts loading every line of the entries whose tag matches hash `h` (after
    /// [`prefetch_tags`](Self::prefetch_tags) had time to work).
    #[inline]
    pub fn prefetch_entry(&self, h: u64) {
        let (base, tag) = self.place(h);
        for w in base..base + WAYS {
            if self.tags[w] == tag {
                let p = &self.entries[w] as *const Entry as *const u8;
                for line in 0..std::mem::size_of::<Entry>().div_ceil(64) {
                    // SAFETY: within the entry, which is one allocation.
                    prefetch(unsafe { &*p.add(line * 64) });
                }
            }
        }
    }

    /// Looks `k` (hash `h`) up at capture time `now`.
    #[inline]
    pub fn find(&mut self, k: &FpKey, h: u64, now: u64) -> Found {
        let Some(w) = self.way(k, h) else {
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
        match self.way(k, self.hash(k)) {
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
        let h = self.hash(&e.key);
        let (base, tag) = self.place(h);
        let mut evicted = false;
        let w = match self.way(&e.key, h) {
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

#[inline]
fn prefetch<T>(r: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch has no architectural effect; the address is a valid reference.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
            r as *const T as *const i8,
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = r;
}
