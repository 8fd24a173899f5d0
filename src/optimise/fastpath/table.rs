//! The bounded table of consolidated entries: 8-way set associative, least recently
//! used way evicted when a set is full, idle timeout on capture time. Allocated once.

use std::hash::BuildHasher;

use super::actions::Actions;
use super::key::FpKey;
use crate::flow::FlowKey;
use crate::packet::Verdict;

/// Most NFs on a consolidated path; longer paths are not consolidated.
pub const MAX_PATH: usize = 6;
/// Most distinct flow keys along a path (each NF that rewrites addresses or ports makes
/// one more).
pub const MAX_KEYS: usize = 4;
const WAYS: usize = 8;

const NO_KEY: FlowKey = FlowKey {
    src: [0; 16],
    dst: [0; 16],
    sport: 0,
    dport: 0,
    proto: 0,
    family: 0,
};

/// One NF on an entry's path, 16 bytes.
#[derive(Clone, Copy, Debug)]
pub struct Step {
    pub token: u64,
    /// The NF's generation when recorded: a control change bumps it.
    pub gen: u32,
    /// Node index in the low 14 bits, the index of the flow key this NF saw (in the
    /// entry's [`Keys`]) in the top 2: a hit finds the key without touching `Keys`.
    node_key: u16,
    /// Out(counted output) or Drop(reason), as the NF decided.
    pub verdict: Verdict,
}

/// A refused flow's packets after the refusal until one is recorded again (the ones
/// between run the chain unrecorded): refusals are mostly lasting (unsolicited traffic a
/// NAT drops, TCP-flag rules), but a full table or an exhausted pool is not.
pub const RETRY_AFTER: u8 = 16;

/// Most nodes a chain may have for its NFs to be consolidated (node indices fit 14 bits).
pub const MAX_NODES: usize = 1 << 14;

impl Step {
    pub const EMPTY: Step = Step {
        token: 0,
        gen: 0,
        node_key: 0,
        verdict: Verdict::Out(0),
    };

    /// `node` < [`MAX_NODES`], `key` < [`MAX_KEYS`].
    pub fn new(node: usize, key: u8, gen: u32) -> Step {
        debug_assert!(node < MAX_NODES && (key as usize) < MAX_KEYS);
        Step {
            token: 0,
            gen,
            node_key: node as u16 | (key as u16) << 14,
            verdict: Verdict::Out(0),
        }
    }

    #[inline]
    pub fn node(&self) -> usize {
        (self.node_key & 0x3fff) as usize
    }

    #[inline]
    pub fn key_index(&self) -> usize {
        (self.node_key >> 14) as usize
    }
}

/// What a hit reads, in four cache lines: the key, sink and path length in the first,
/// the actions in the next one and a half, then the steps. The flow keys the NFs saw are
/// kept apart in [`Keys`]: only NFs whose state function reads the key (the flow
/// monitor) touch them.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
pub struct Entry {
    pub key: FpKey,
    pub last_ns: u64,
    pub len: u8,
    /// Non-zero: a remembered refusal (no path). Its flow's packets run the chain without
    /// the cost of recording, counting this down; the one that reaches 0 is recorded.
    pub retry: u8,
    pub egress: u16,
    /// The sink the packet reaches, or None when the last step drops it.
    pub sink: Option<u16>,
    pub actions: Actions,
    pub steps: [Step; MAX_PATH],
}

/// Lines of an entry, all of which a hit may read; prefetched together.
const HOT_LINES: usize = 4;

impl Entry {
    pub const EMPTY: Entry = Entry {
        key: FpKey::EMPTY,
        last_ns: 0,
        len: 0,
        retry: 0,
        egress: 0,
        sink: None,
        actions: Actions::NONE,
        steps: [Step::EMPTY; MAX_PATH],
    };

    /// The entry that remembers a refused (or unconsolidatable) recording of `key`.
    pub fn refusal(key: FpKey, now: u64) -> Entry {
        Entry {
            key,
            last_ns: now,
            retry: RETRY_AFTER,
            ..Entry::EMPTY
        }
    }

    pub fn path(&self) -> &[Step] {
        &self.steps[..self.len as usize]
    }
}

/// The distinct flow keys along an entry's path (each NF that rewrites addresses or
/// ports makes one more); [`Step::key_index`] picks one.
#[derive(Clone, Copy, Debug)]
pub struct Keys {
    pub keys: [FlowKey; MAX_KEYS],
    pub n: u8,
}

impl Keys {
    pub const EMPTY: Keys = Keys {
        keys: [NO_KEY; MAX_KEYS],
        n: 0,
    };
}

/// A set's tags, in one aligned half line.
#[derive(Clone, Copy, Debug)]
#[repr(align(32))]
struct Tags([u32; WAYS]);

pub struct Table {
    /// Per set and way: 0 when empty, else the key hash's high half with the low bit set
    /// (the set comes from the low bits).
    tags: Vec<Tags>,
    /// Per way: logical time of last use, for LRU.
    used: Vec<u64>,
    entries: Vec<Entry>,
    keys: Vec<Keys>,
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
            tags: vec![Tags([0; WAYS]); sets],
            used: vec![0; sets * WAYS],
            entries: vec![Entry::EMPTY; sets * WAYS],
            keys: vec![Keys::EMPTY; sets * WAYS],
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

    /// The key's hash, for [`find`](Self::find) and the prefetches: foldhash, then a
    /// full avalanche (murmur3's finaliser), done once per packet. foldhash's fast hash of
    /// these structured keys (flows differing in a few address and port bits) leaves the
    /// set bits clumped: six times the expected overflowing sets without it.
    #[inline]
    pub fn hash(&self, k: &FpKey) -> u64 {
        let h = self.hasher.hash_one(k);
        let mut m = h ^ (h >> 33);
        m = m.wrapping_mul(0xff51_afd7_ed55_8ccd);
        m ^= m >> 33;
        m = m.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        m ^ (m >> 33)
    }

    /// (set, tag) of hash `h`: the set from the low bits, the tag from the high half.
    #[inline]
    fn place(&self, h: u64) -> (usize, u32) {
        (h as usize & (self.sets - 1), (h >> 32) as u32 | 1)
    }

    /// Bit i set: way i of `set` holds `tag` (all ways compared at once).
    #[inline]
    fn matching(&self, set: usize, tag: u32) -> u32 {
        let t = &self.tags[set].0;
        #[cfg(target_arch = "x86_64")]
        // SAFETY: SSE2 is part of x86_64; the loads read the set's 32 aligned bytes.
        unsafe {
            use core::arch::x86_64::*;
            let want = _mm_set1_epi32(tag as i32);
            let lo = _mm_cmpeq_epi32(_mm_load_si128(t.as_ptr() as *const __m128i), want);
            let hi = _mm_cmpeq_epi32(_mm_load_si128(t.as_ptr().add(4) as *const __m128i), want);
            (_mm_movemask_ps(_mm_castsi128_ps(lo)) | _mm_movemask_ps(_mm_castsi128_ps(hi)) << 4)
                as u32
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let mut m = 0u32;
            for (i, &x) in t.iter().enumerate() {
                m |= ((x == tag) as u32) << i;
            }
            m
        }
    }

    /// The way holding `k` (hash `h`), without the side effects of [`find`](Self::find).
    #[inline]
    pub fn way(&self, k: &FpKey, h: u64) -> Option<usize> {
        let (set, tag) = self.place(h);
        let mut m = self.matching(set, tag);
        while m != 0 {
            let w = set * WAYS + m.trailing_zeros() as usize;
            if self.entries[w].key == *k {
                return Some(w);
            }
            m &= m - 1;
        }
        None
    }

    /// Starts loading the tags a lookup of hash `h` reads, so a chunk's lookups overlap
    /// their cache misses.
    #[inline]
    pub fn prefetch_tags(&self, h: u64) {
        prefetch(&self.tags[self.place(h).0]);
    }

    /// Starts loading the lines a hit reads of the entries whose tag matches hash `h` (after
    /// [`prefetch_tags`](Self::prefetch_tags) had time to work).
    #[inline]
    pub fn prefetch_entry(&self, h: u64) {
        let (set, tag) = self.place(h);
        let mut m = self.matching(set, tag);
        while m != 0 {
            let p = &self.entries[set * WAYS + m.trailing_zeros() as usize] as *const Entry
                as *const u8;
            for line in 0..HOT_LINES {
                // SAFETY: within the entry, which is one allocation.
                prefetch(unsafe { &*p.add(line * 64) });
            }
            m &= m - 1;
        }
    }

    /// Looks `k` (hash `h`) up at capture time `now`.
    #[inline]
    pub fn find(&mut self, k: &FpKey, h: u64, now: u64) -> Found {
        let w = self.way(k, h);
        self.find_at(w, now)
    }

    /// [`find`](Self::find) with the way already looked up by [`way`](Self::way), when
    /// nothing was inserted since (removals only empty the way, which this sees).
    #[inline]
    pub fn find_at(&mut self, w: Option<usize>, now: u64) -> Found {
        let Some(w) = w.filter(|&w| self.tags[w / WAYS].0[w % WAYS] != 0) else {
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

    /// The flow key step `step` of entry `w` saw.
    #[inline]
    pub fn key_of(&self, w: usize, step: &Step) -> &FlowKey {
        &self.keys[w].keys[step.key_index()]
    }

    /// One more packet through a remembered refusal; true (and the refusal is gone) when
    /// the flow should be recorded again.
    #[inline]
    pub fn count_down(&mut self, w: usize) -> bool {
        let e = &mut self.entries[w];
        e.retry -= 1;
        if e.retry == 0 {
            self.remove(w);
            return true;
        }
        false
    }

    #[inline]
    pub fn touch(&mut self, w: usize, now: u64) {
        let e = &mut self.entries[w];
        e.last_ns = e.last_ns.max(now);
    }

    pub fn remove(&mut self, w: usize) {
        let t = &mut self.tags[w / WAYS].0[w % WAYS];
        if *t != 0 {
            *t = 0;
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
    pub fn insert(&mut self, e: &Entry, keys: &Keys) -> bool {
        let h = self.hash(&e.key);
        let (set, tag) = self.place(h);
        let base = set * WAYS;
        let mut evicted = false;
        let w = match self.way(&e.key, h) {
            Some(w) => w,
            None => match (base..base + WAYS).find(|&w| self.tags[set].0[w - base] == 0) {
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
        self.tags[set].0[w - base] = tag;
        self.used[w] = self.clock;
        self.entries[w] = *e;
        self.keys[w] = *keys;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry is the four prefetched lines; steps stay 16 bytes.
    #[test]
    fn a_hit_reads_the_first_four_lines() {
        assert_eq!(std::mem::size_of::<Step>(), 16);
        assert_eq!(std::mem::offset_of!(Entry, actions), 64);
        assert_eq!(std::mem::size_of::<Entry>(), HOT_LINES * 64);
        let s = Step::new(MAX_NODES - 1, 3, 7);
        assert_eq!((s.node(), s.key_index(), s.gen), (MAX_NODES - 1, 3, 7));
    }
}
