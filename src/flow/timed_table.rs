//! A bounded key → value table whose entries expire after an idle timeout.
//! Capacity is reserved up front so inserts never allocate on the hot path; when full,
//! new keys are refused (and counted by the caller) rather than growing the table.
//!
//! Expired entries give their room back: with a timeout, every key also sits in a list
//! that a cursor walks, [`SWEEP_STEP`] positions per [`learn`](TimedTable::learn), freeing
//! the expired ones it meets; and a new key that finds the table full first looks at up
//! to [`RECLAIM_SCAN`] more positions for an expired entry to take the place of. So the
//! work per packet is bounded (and so per batch), and it depends only on the sequence of
//! calls, never on how the runtime cuts batches.

use hashbrown::HashMap;

use super::Hasher;

/// List positions the sweep looks at per `learn` (with a timeout).
pub const SWEEP_STEP: usize = 2;
/// List positions a new key looks at for an expired entry when the table is full.
pub const RECLAIM_SCAN: usize = 16;

#[derive(Clone, Copy, Debug)]
struct Slot<V> {
    value: V,
    seen_ns: u64,
    /// Position of the key in `keys` (with a timeout).
    pos: u32,
}

/// What [`TimedTable::learn`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Learned {
    Inserted,
    Updated,
    /// The table is full of live entries and the key is new: nothing stored.
    Full,
}

pub struct TimedTable<K, V> {
    map: HashMap<K, Slot<V>, Hasher>,
    /// Every key, for the sweep (only with a timeout; reserved up front).
    keys: Vec<K>,
    /// Where the sweep looks next in `keys`.
    cursor: usize,
    capacity: usize,
    /// 0 means entries never expire.
    timeout_ns: u64,
}

impl<K: std::hash::Hash + Eq + Copy, V: Copy> TimedTable<K, V> {
    pub fn new(capacity: usize, timeout_ns: u64) -> Self {
        TimedTable {
            map: HashMap::with_capacity_and_hasher(capacity, Hasher::default()),
            keys: Vec::with_capacity(if timeout_ns != 0 { capacity } else { 0 }),
            cursor: 0,
            capacity,
            timeout_ns,
        }
    }

    #[inline]
    fn expired(&self, seen_ns: u64, now_ns: u64) -> bool {
        self.timeout_ns != 0 && now_ns.saturating_sub(seen_ns) > self.timeout_ns
    }

    /// Sets `key → value`, refreshing its idle timer. One hash and probe when nothing
    /// expires; with a timeout also a bounded sweep step (see the module notes).
    #[inline]
    pub fn learn(&mut self, key: K, value: V, now_ns: u64) -> Learned {
        if self.timeout_ns != 0 {
            self.sweep_some(now_ns, SWEEP_STEP, false);
        }
        let mut full = self.map.len() >= self.capacity;
        if full && self.timeout_ns != 0 && !self.map.contains_key(&key) {
            full = !self.sweep_some(now_ns, RECLAIM_SCAN, true);
        }
        let pos = self.keys.len() as u32;
        match self.map.entry(key) {
            hashbrown::hash_map::Entry::Occupied(mut e) => {
                let s = e.get_mut();
                s.value = value;
                s.seen_ns = now_ns;
                Learned::Updated
            }
            hashbrown::hash_map::Entry::Vacant(_) if full => Learned::Full,
            hashbrown::hash_map::Entry::Vacant(e) => {
                e.insert(Slot {
                    value,
                    seen_ns: now_ns,
                    pos,
                });
                if self.timeout_ns != 0 {
                    self.keys.push(key);
                }
                Learned::Inserted
            }
        }
    }

    /// Looks at up to `n` positions from the cursor, freeing expired entries; with
    /// `first`, stops at the first one freed. Returns whether it freed any.
    fn sweep_some(&mut self, now_ns: u64, n: usize, first: bool) -> bool {
        let mut freed = false;
        for _ in 0..n {
            if self.keys.is_empty() {
                break;
            }
            if self.cursor >= self.keys.len() {
                self.cursor = 0;
            }
            let k = self.keys[self.cursor];
            match self.map.get(&k) {
                Some(s) if !self.expired(s.seen_ns, now_ns) => self.cursor += 1,
                Some(_) => {
                    self.remove(&k);
                    freed = true;
                    if first {
                        break;
                    }
                }
                // Never: every listed key is in the map. Dropped rather than looped on.
                None => {
                    self.keys.swap_remove(self.cursor);
                }
            }
        }
        freed
    }

    /// The live value for `key`; an expired entry is a miss (the sweep frees it).
    #[inline]
    pub fn get(&mut self, key: &K, now_ns: u64) -> Option<V> {
        let s = self.map.get(key)?;
        if self.expired(s.seen_ns, now_ns) {
            return None;
        }
        Some(s.value)
    }

    /// The live value for `key`, mutable, with its idle timer refreshed.
    #[inline]
    pub fn get_mut(&mut self, key: &K, now_ns: u64) -> Option<&mut V> {
        let timeout = self.timeout_ns;
        let s = self.map.get_mut(key)?;
        if timeout != 0 && now_ns.saturating_sub(s.seen_ns) > timeout {
            return None;
        }
        s.seen_ns = now_ns;
        Some(&mut s.value)
    }

    /// Removes every entry idle for longer than the timeout, handing each to `gone`.
    /// A whole pass: callers run it once in a while, not per packet.
    pub fn sweep(&mut self, now_ns: u64, mut gone: impl FnMut(K, V)) {
        if self.timeout_ns == 0 {
            return;
        }
        let mut i = 0;
        while i < self.keys.len() {
            let k = self.keys[i];
            match self.map.get(&k) {
                Some(s) if self.expired(s.seen_ns, now_ns) => {
                    let v = s.value;
                    self.remove(&k);
                    gone(k, v);
                }
                _ => i += 1,
            }
        }
    }

    /// Every entry (live or expired but not yet freed) with the time it was last seen.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V, u64)> {
        self.map.iter().map(|(k, s)| (k, &s.value, s.seen_ns))
    }

    /// Removes every entry, keeping the reserved capacity.
    pub fn clear(&mut self) {
        self.map.clear();
        self.keys.clear();
        self.cursor = 0;
    }

    pub fn remove(&mut self, key: &K) -> Option<V> {
        let s = self.map.remove(key)?;
        if self.timeout_ns != 0 {
            let pos = s.pos as usize;
            self.keys.swap_remove(pos);
            if let Some(&moved) = self.keys.get(pos) {
                if let Some(m) = self.map.get_mut(&moved) {
                    m.pos = pos as u32;
                }
            }
        }
        Some(s.value)
    }

    /// Entries held, including expired ones the sweep has not reached yet.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learns_updates_expires() {
        let mut t: TimedTable<u32, u16> = TimedTable::new(4, 100);
        assert_eq!(t.learn(1, 7, 0), Learned::Inserted);
        assert_eq!(t.get(&1, 100), Some(7));
        assert_eq!(t.learn(1, 8, 90), Learned::Updated);
        assert_eq!(t.get(&1, 190), Some(8));
        assert_eq!(t.get(&1, 191), None);
        // Expired but not yet freed: the next learn's sweep step frees it.
        assert_eq!(t.len(), 1);
        assert_eq!(t.learn(2, 1, 400), Learned::Inserted);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn a_full_table_takes_the_place_of_an_expired_entry() {
        let mut t: TimedTable<u32, u16> = TimedTable::new(2, 1_000);
        assert_eq!(t.learn(1, 1, 0), Learned::Inserted);
        assert_eq!(t.learn(2, 2, 0), Learned::Inserted);
        // Both live: full.
        assert_eq!(t.learn(3, 3, 500), Learned::Full);
        assert_eq!(t.learn(3, 3, 100_000), Learned::Inserted);
        assert_eq!(t.learn(4, 4, 100_000), Learned::Inserted);
        assert_eq!(t.len(), 2);
        assert_eq!((t.get(&3, 100_000), t.get(&4, 100_000)), (Some(3), Some(4)));
        assert_eq!(t.get(&1, 100_000), None);
        // Positions stay consistent through removals.
        assert_eq!(t.remove(&3), Some(3));
        assert_eq!(t.learn(5, 5, 100_001), Learned::Inserted);
        let mut gone = Vec::new();
        t.sweep(200_000, |k, _| gone.push(k));
        gone.sort();
        assert_eq!((gone, t.len()), (vec![4, 5], 0));
    }

    #[test]
    fn sweep_hands_out_expired_entries() {
        let mut t: TimedTable<u32, u16> = TimedTable::new(4, 10);
        t.learn(1, 1, 0);
        t.learn(2, 2, 5);
        *t.get_mut(&2, 8).unwrap() = 9;
        let mut gone = Vec::new();
        t.sweep(15, |k, v| gone.push((k, v)));
        assert_eq!(gone, vec![(1, 1)]);
        assert_eq!(
            t.iter().map(|(k, v, s)| (*k, *v, s)).collect::<Vec<_>>(),
            vec![(2, 9, 8)]
        );
    }

    #[test]
    fn full_table_refuses_new_keys() {
        let mut t: TimedTable<u32, u16> = TimedTable::new(1, 0);
        assert_eq!(t.learn(1, 1, 0), Learned::Inserted);
        assert_eq!(t.learn(2, 1, 0), Learned::Full);
        assert_eq!(t.learn(1, 2, u64::MAX), Learned::Updated);
        assert_eq!(t.get(&1, u64::MAX), Some(2));
    }
}
