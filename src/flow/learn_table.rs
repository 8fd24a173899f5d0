//! The learning switches' and pipeline programs' table: [`TimedTable`]'s semantics (idle
//! timeout, bounded sweep, reclaim when full, refuse when full of live entries) on an
//! open-addressing array of our own, so that a batch can hash every key first, prefetch
//! the slots, then look up (the VPP / DPDK way): hashbrown keeps its control bytes apart
//! from its buckets (two cache lines per miss) and exposes no bucket address to prefetch.
//!
//! Slots hold key, value, last-seen time and list position inline (22 bytes for a u64
//! key and a u16 value), padded and aligned to 32 so that no slot straddles two cache
//! lines: at 24 bytes two slots in eight did, and the batch's one prefetch (of the
//! slot's first byte) left their second line to miss at the lookup. Linear probing at a
//! load of at most 2/3 keeps a lookup on one cache line most of the time; removal shifts
//! the probe run back (no tombstones). The array is allocated once at its capacity:
//! nothing allocates per packet.
//!
//! [`TimedTable`]: super::TimedTable

use std::hash::{BuildHasher, Hash};

use super::timed_table::{RECLAIM_SCAN, SWEEP_STEP};
use super::{prefetch, Hasher, Learned};

/// `pos` of an empty slot.
const EMPTY: u32 = u32::MAX;

/// A slot's alignment, at least its size so that no slot straddles a 64-byte line: 32
/// (the default) holds keys up to u128 with a value of up to 4 bytes.
#[derive(Clone, Copy, Debug, Default)]
#[repr(align(32))]
pub struct Align32;

/// For larger slots (the programs' hard-timeout table: a u128 key and a 16-byte value).
#[derive(Clone, Copy, Debug, Default)]
#[repr(align(64))]
pub struct Align64;

#[derive(Clone, Copy, Debug)]
struct Slot<K, V, A> {
    /// Zero bytes; raises the slot's alignment (and so its size) to `A`'s.
    _align: [A; 0],
    key: K,
    value: V,
    seen_ns: u64,
    /// Position in `order` (with a timeout; 0 without), or [`EMPTY`].
    pos: u32,
}

pub struct LearnTable<K, V, A = Align32> {
    slots: Box<[Slot<K, V, A>]>,
    mask: usize,
    len: usize,
    /// Slot index of every entry, in insertion order, for the sweep (only with a
    /// timeout; reserved up front). An entry's `pos` is its place here.
    order: Vec<u32>,
    /// Where the sweep looks next in `order`.
    cursor: usize,
    capacity: usize,
    /// 0 means entries never expire.
    timeout_ns: u64,
    hasher: Hasher,
}

/// Slots for `capacity` entries: a power of two at a load of at most 2/3.
fn slots_for(capacity: usize) -> usize {
    capacity
        .max(1)
        .saturating_add(capacity / 2)
        .next_power_of_two()
        .max(8)
}

impl<K: Hash + Eq + Copy + Default, V: Copy + Default, A: Copy> LearnTable<K, V, A> {
    /// A table of at most `capacity` entries (at most 2^31) whose entries expire after
    /// `timeout_ns` idle (0: never).
    pub fn new(capacity: usize, timeout_ns: u64) -> Self {
        // A slot larger than its alignment would straddle lines: refused when compiled.
        const { assert!(std::mem::size_of::<Slot<K, V, A>>() <= std::mem::align_of::<Slot<K, V, A>>()) };
        let capacity = capacity.min(1 << 31);
        let n = slots_for(capacity);
        let empty = Slot {
            _align: [],
            key: K::default(),
            value: V::default(),
            seen_ns: 0,
            pos: EMPTY,
        };
        LearnTable {
            slots: vec![empty; n].into_boxed_slice(),
            mask: n - 1,
            len: 0,
            order: Vec::with_capacity(if timeout_ns != 0 { capacity } else { 0 }),
            cursor: 0,
            capacity,
            timeout_ns,
            hasher: Hasher::default(),
        }
    }

    /// Bytes a table of `capacity` entries allocates (for `catena check`).
    pub fn bytes_for(capacity: usize, timeout_ns: u64) -> usize {
        let order = if timeout_ns != 0 { capacity * 4 } else { 0 };
        slots_for(capacity.min(1 << 31)) * std::mem::size_of::<Slot<K, V, A>>() + order
    }

    /// Bytes this table allocated.
    pub fn memory(&self) -> usize {
        self.slots.len() * std::mem::size_of::<Slot<K, V, A>>() + self.order.capacity() * 4
    }

    /// The slot at `i & mask`, in bounds by construction (`mask` is `slots.len() - 1`,
    /// a power of two less one, fixed in `new`): the hot path's accesses skip the bounds
    /// check the compiler cannot drop (it does not know `mask < len`).
    #[inline(always)]
    fn at(&self, i: usize) -> &Slot<K, V, A> {
        // SAFETY: `i & self.mask <= self.mask < self.slots.len()`.
        unsafe { self.slots.get_unchecked(i & self.mask) }
    }

    #[inline(always)]
    fn at_mut(&mut self, i: usize) -> &mut Slot<K, V, A> {
        // SAFETY: as `at`.
        unsafe { self.slots.get_unchecked_mut(i & self.mask) }
    }

    /// The key's hash, for [`prefetch`](Self::prefetch) and the `_with_hash` calls.
    #[inline(always)]
    pub fn hash(&self, key: &K) -> u64 {
        self.hasher.hash_one(key)
    }

    /// Starts loading the slot where a key with hash `h` is looked for.
    #[inline(always)]
    pub fn prefetch(&self, h: u64) {
        prefetch(self.at(h as usize));
    }

    #[inline(always)]
    fn expired(&self, seen_ns: u64, now_ns: u64) -> bool {
        self.timeout_ns != 0 && now_ns.saturating_sub(seen_ns) > self.timeout_ns
    }

    /// The slot holding `key` (hash `h`), live or expired.
    #[inline(always)]
    fn find(&self, key: &K, h: u64) -> Option<usize> {
        let mut i = h as usize & self.mask;
        loop {
            let s = self.at(i);
            if s.pos == EMPTY {
                return None;
            }
            if s.key == *key {
                return Some(i);
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Sets `key → value`, refreshing its idle timer. With a timeout also a bounded sweep
    /// step, as [`TimedTable::learn`](super::TimedTable::learn).
    #[inline]
    pub fn learn(&mut self, key: K, value: V, now_ns: u64) -> Learned {
        self.learn_with_hash(key, self.hash(&key), value, now_ns)
    }

    /// [`learn`](Self::learn) with the key's hash already computed.
    #[inline(always)]
    pub fn learn_with_hash(&mut self, key: K, h: u64, value: V, now_ns: u64) -> Learned {
        if self.timeout_ns != 0 {
            self.sweep_some(now_ns, SWEEP_STEP, false);
        }
        let mut i = h as usize & self.mask;
        loop {
            let s = self.at_mut(i);
            if s.pos == EMPTY {
                break;
            }
            if s.key == key {
                s.value = value;
                s.seen_ns = now_ns;
                return Learned::Updated;
            }
            i = (i + 1) & self.mask;
        }
        if self.len >= self.capacity {
            // Full: take the room of an expired entry if the sweep finds one (the key is
            // known to be absent; the shift may move the empty slot, so probe again).
            if self.timeout_ns == 0 || !self.sweep_some(now_ns, RECLAIM_SCAN, true) {
                return Learned::Full;
            }
            i = h as usize & self.mask;
            while self.slots[i].pos != EMPTY {
                i = (i + 1) & self.mask;
            }
        }
        let pos = if self.timeout_ns != 0 {
            self.order.push(i as u32);
            (self.order.len() - 1) as u32
        } else {
            0
        };
        self.slots[i] = Slot {
            _align: [],
            key,
            value,
            seen_ns: now_ns,
            pos,
        };
        self.len += 1;
        Learned::Inserted
    }

    /// Looks at up to `n` positions from the cursor, freeing expired entries; with
    /// `first`, stops at the first one freed. Returns whether it freed any.
    fn sweep_some(&mut self, now_ns: u64, n: usize, first: bool) -> bool {
        let mut freed = false;
        for _ in 0..n {
            if self.order.is_empty() {
                break;
            }
            if self.cursor >= self.order.len() {
                self.cursor = 0;
            }
            let i = self.order[self.cursor] as usize;
            if !self.expired(self.slots[i].seen_ns, now_ns) {
                self.cursor += 1;
                continue;
            }
            self.remove_at(i);
            freed = true;
            if first {
                break;
            }
        }
        freed
    }

    /// The live value for `key`; an expired entry is a miss (the sweep frees it).
    #[inline]
    pub fn get(&self, key: &K, now_ns: u64) -> Option<V> {
        self.get_with_hash(key, self.hash(key), now_ns)
    }

    /// [`get`](Self::get) with the key's hash already computed.
    #[inline(always)]
    pub fn get_with_hash(&self, key: &K, h: u64, now_ns: u64) -> Option<V> {
        let s = self.at(self.find(key, h)?);
        if self.expired(s.seen_ns, now_ns) {
            return None;
        }
        Some(s.value)
    }

    /// The live value for `key`, mutable, with its idle timer refreshed.
    #[inline]
    pub fn get_mut(&mut self, key: &K, now_ns: u64) -> Option<&mut V> {
        let i = self.find(key, self.hash(key))?;
        if self.expired(self.at(i).seen_ns, now_ns) {
            return None;
        }
        let s = self.at_mut(i);
        s.seen_ns = now_ns;
        Some(&mut s.value)
    }

    /// Removes every entry idle for longer than the timeout, handing each to `gone`.
    /// A whole pass: callers run it once in a while, not per packet.
    pub fn sweep(&mut self, now_ns: u64, mut gone: impl FnMut(K, V)) {
        if self.timeout_ns == 0 {
            return;
        }
        let mut p = 0;
        while p < self.order.len() {
            let i = self.order[p] as usize;
            let s = self.slots[i];
            if self.expired(s.seen_ns, now_ns) {
                self.remove_at(i);
                gone(s.key, s.value);
            } else {
                p += 1;
            }
        }
    }

    /// Every entry (live or expired but not yet freed) with the time it was last seen.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V, u64)> {
        self.slots
            .iter()
            .filter(|s| s.pos != EMPTY)
            .map(|s| (&s.key, &s.value, s.seen_ns))
    }

    /// Removes every entry, keeping the allocation.
    pub fn clear(&mut self) {
        if self.len != 0 {
            self.slots.iter_mut().for_each(|s| s.pos = EMPTY);
        }
        self.len = 0;
        self.order.clear();
        self.cursor = 0;
    }

    pub fn remove(&mut self, key: &K) -> Option<V> {
        let i = self.find(key, self.hash(key))?;
        let v = self.slots[i].value;
        self.remove_at(i);
        Some(v)
    }

    /// Frees slot `i`: out of the sweep list, then the probe run after it shifted back
    /// so every key stays reachable from its home slot without tombstones.
    fn remove_at(&mut self, mut i: usize) {
        if self.timeout_ns != 0 {
            let pos = self.slots[i].pos as usize;
            self.order.swap_remove(pos);
            if let Some(&moved) = self.order.get(pos) {
                self.slots[moved as usize].pos = pos as u32;
            }
        }
        self.len -= 1;
        let mut j = i;
        loop {
            j = (j + 1) & self.mask;
            let s = self.slots[j];
            if s.pos == EMPTY {
                break;
            }
            let home = self.hash(&s.key) as usize & self.mask;
            // `s` stays when its home lies cyclically in (i, j]: the gap at i is not on
            // its probe path.
            let stays = if i <= j {
                i < home && home <= j
            } else {
                i < home || home <= j
            };
            if stays {
                continue;
            }
            self.slots[i] = s;
            if self.timeout_ns != 0 {
                self.order[s.pos as usize] = i as u32;
            }
            i = j;
        }
        self.slots[i].pos = EMPTY;
    }

    /// Entries held, including expired ones the sweep has not reached yet.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::TimedTable;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[test]
    fn learns_updates_expires_and_reclaims() {
        let mut t: LearnTable<u32, u16> = LearnTable::new(2, 1_000);
        assert_eq!(t.learn(1, 1, 0), Learned::Inserted);
        assert_eq!(t.learn(1, 7, 10), Learned::Updated);
        assert_eq!(t.learn(2, 2, 0), Learned::Inserted);
        assert_eq!(t.learn(3, 3, 500), Learned::Full);
        assert_eq!(t.get(&1, 1_010), Some(7));
        assert_eq!(t.get(&1, 1_011), None);
        // The learn's sweep step frees both expired entries before inserting.
        assert_eq!(t.learn(3, 3, 100_000), Learned::Inserted);
        assert_eq!(t.len(), 1);
        assert_eq!(t.learn(4, 4, 100_000), Learned::Inserted);
        assert_eq!(t.remove(&3), Some(3));
        assert_eq!(t.remove(&3), None);
        let mut gone = Vec::new();
        t.sweep(u64::MAX, |k, v| gone.push((k, v)));
        assert_eq!((gone, t.len()), (vec![(4, 4)], 0));
    }

    #[test]
    fn memory_is_what_was_allocated() {
        let t: LearnTable<u64, u16> = LearnTable::new(65_536, 0);
        assert_eq!(t.memory(), 131_072 * 32);
        assert_eq!(LearnTable::<u64, u16>::bytes_for(65_536, 0), t.memory());
        let t: LearnTable<u32, u16> = LearnTable::new(1000, 5);
        assert_eq!(LearnTable::<u32, u16>::bytes_for(1000, 5), t.memory());
    }

    /// Every slot of the tables catena builds (the switches' u64 and u32 keys with a u16
    /// port; the programs' u32/u64/u128 keys with a 4-byte action, and u128 with a
    /// 16-byte value for hard timeouts) lies within one 64-byte cache line, so the one
    /// prefetch of its first byte brings all of it.
    #[test]
    fn no_slot_straddles_a_cache_line() {
        fn check<K: Hash + Eq + Copy + Default, V: Copy + Default, A: Copy>() {
            let t: LearnTable<K, V, A> = LearnTable::new(1000, 5);
            let size = std::mem::size_of::<Slot<K, V, A>>();
            for (i, s) in t.slots.iter().enumerate() {
                let at = s as *const Slot<K, V, A> as usize;
                assert_eq!(at / 64, (at + size - 1) / 64, "slot {i} of {size} bytes");
            }
        }
        check::<u64, u16, Align32>();
        check::<u32, u16, Align32>();
        check::<u32, [u16; 2], Align32>();
        check::<u64, [u16; 2], Align32>();
        check::<u128, [u16; 2], Align32>();
        check::<u128, ([u16; 2], u64), Align64>();
    }

    #[derive(Clone, Debug)]
    enum Op {
        Learn(u8, u16, u16),
        Get(u8, u16),
        GetMut(u8, u16),
        Remove(u8),
        Sweep(u16),
        Clear,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            8 => (any::<u8>(), any::<u16>(), 0u16..2000).prop_map(|(k, v, t)| Op::Learn(k, v, t)),
            4 => (any::<u8>(), 0u16..2000).prop_map(|(k, t)| Op::Get(k, t)),
            1 => (any::<u8>(), 0u16..2000).prop_map(|(k, t)| Op::GetMut(k, t)),
            2 => any::<u8>().prop_map(Op::Remove),
            1 => (0u16..2000).prop_map(Op::Sweep),
            1 => Just(Op::Clear),
        ]
    }

    proptest! {
        /// Against a HashMap model without timeouts: same answers, same full refusals.
        #[test]
        fn agrees_with_a_hash_map(cap in 1usize..40, ops in prop::collection::vec(op(), 0..400)) {
            let mut t: LearnTable<u64, u16> = LearnTable::new(cap, 0);
            let mut m: HashMap<u64, u16> = HashMap::new();
            for o in ops {
                match o {
                    Op::Learn(k, v, _) => {
                        let k = k as u64 * 0x9e37_79b9; // spread, and collide in the low bits
                        let want = if m.contains_key(&k) {
                            Learned::Updated
                        } else if m.len() >= cap {
                            Learned::Full
                        } else {
                            Learned::Inserted
                        };
                        if want != Learned::Full {
                            m.insert(k, v);
                        }
                        prop_assert_eq!(t.learn(k, v, 0), want);
                    }
                    Op::Get(k, _) | Op::GetMut(k, _) => {
                        let k = k as u64 * 0x9e37_79b9;
                        prop_assert_eq!(t.get(&k, 0), m.get(&k).copied());
                        let h = t.hash(&k);
                        t.prefetch(h);
                        prop_assert_eq!(t.get_with_hash(&k, h, 0), m.get(&k).copied());
                    }
                    Op::Remove(k) => {
                        let k = k as u64 * 0x9e37_79b9;
                        prop_assert_eq!(t.remove(&k), m.remove(&k));
                    }
                    Op::Sweep(_) => {}
                    Op::Clear => {
                        t.clear();
                        m.clear();
                    }
                }
                prop_assert_eq!(t.len(), m.len());
            }
            let mut a: Vec<(u64, u16)> = t.iter().map(|(k, v, _)| (*k, *v)).collect();
            let mut b: Vec<(u64, u16)> = m.into_iter().collect();
            a.sort();
            b.sort();
            prop_assert_eq!(a, b);
        }

        /// With timeouts, step for step as TimedTable (the table it replaces): same
        /// learn results, lookups, lengths and swept entries.
        #[test]
        fn agrees_with_timed_table(
            cap in 1usize..24,
            timeout in 1u64..500,
            ops in prop::collection::vec(op(), 0..400),
        ) {
            let mut t: LearnTable<u32, u16> = LearnTable::new(cap, timeout);
            let mut m: TimedTable<u32, u16> = TimedTable::new(cap, timeout);
            let mut now = 0u64;
            for o in ops {
                match o {
                    Op::Learn(k, v, dt) => {
                        now += dt as u64 / 8;
                        prop_assert_eq!(t.learn(k as u32, v, now), m.learn(k as u32, v, now));
                    }
                    Op::Get(k, dt) => {
                        let at = now + dt as u64 / 4;
                        prop_assert_eq!(t.get(&(k as u32), at), m.get(&(k as u32), at));
                    }
                    Op::GetMut(k, dt) => {
                        now += dt as u64 / 8;
                        let a = t.get_mut(&(k as u32), now).map(|v| { *v ^= 1; *v });
                        let b = m.get_mut(&(k as u32), now).map(|v| { *v ^= 1; *v });
                        prop_assert_eq!(a, b);
                    }
                    Op::Remove(k) => {
                        prop_assert_eq!(t.remove(&(k as u32)), m.remove(&(k as u32)));
                    }
                    Op::Sweep(dt) => {
                        let at = now + dt as u64;
                        let (mut a, mut b) = (Vec::new(), Vec::new());
                        t.sweep(at, |k, v| a.push((k, v)));
                        m.sweep(at, |k, v| b.push((k, v)));
                        a.sort();
                        b.sort();
                        prop_assert_eq!(a, b);
                    }
                    Op::Clear => {
                        t.clear();
                        m.clear();
                    }
                }
                prop_assert_eq!(t.len(), m.len());
            }
        }
    }
}
