//! A bounded key → value table whose entries expire after an idle timeout.
//! Capacity is reserved up front so inserts never allocate on the hot path; when full,
//! new keys are refused (and counted by the caller) rather than growing the table.

use hashbrown::HashMap;

use super::Hasher;

#[derive(Clone, Copy, Debug)]
struct Slot<V> {
    value: V,
    seen_ns: u64,
}

/// What [`TimedTable::learn`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Learned {
    Inserted,
    Updated,
    /// The table is full and the key is new: nothing stored.
    Full,
}

pub struct TimedTable<K, V> {
    map: HashMap<K, Slot<V>, Hasher>,
    capacity: usize,
    /// 0 means entries never expire.
    timeout_ns: u64,
}

impl<K: std::hash::Hash + Eq + Copy, V: Copy> TimedTable<K, V> {
    pub fn new(capacity: usize, timeout_ns: u64) -> Self {
        TimedTable {
            map: HashMap::with_capacity_and_hasher(capacity, Hasher::default()),
            capacity,
            timeout_ns,
        }
    }

    #[inline]
    fn expired(&self, seen_ns: u64, now_ns: u64) -> bool {
        self.timeout_ns != 0 && now_ns.saturating_sub(seen_ns) > self.timeout_ns
    }

    /// Sets `key → value`, refreshing its idle timer. One hash and probe either way.
    #[inline]
    pub fn learn(&mut self, key: K, value: V, now_ns: u64) -> Learned {
        let full = self.map.len() >= self.capacity;
        match self.map.entry(key) {
            hashbrown::hash_map::Entry::Occupied(mut e) => {
                *e.get_mut() = Slot {
                    value,
                    seen_ns: now_ns,
                };
                Learned::Updated
            }
            hashbrown::hash_map::Entry::Vacant(_) if full => Learned::Full,
            hashbrown::hash_map::Entry::Vacant(e) => {
                e.insert(Slot {
                    value,
                    seen_ns: now_ns,
                });
                Learned::Inserted
            }
        }
    }

    /// The live value for `key`; an expired entry is removed and reported as a miss.
    #[inline]
    pub fn get(&mut self, key: &K, now_ns: u64) -> Option<V> {
        let s = *self.map.get(key)?;
        if self.expired(s.seen_ns, now_ns) {
            self.map.remove(key);
            return None;
        }
        Some(s.value)
    }

    /// The live value for `key`, mutable, with its idle timer refreshed.
    #[inline]
    pub fn get_mut(&mut self, key: &K, now_ns: u64) -> Option<&mut V> {
        let timeout = self.timeout_ns;
        let expired = match self.map.get(key) {
            None => return None,
            Some(s) => timeout != 0 && now_ns.saturating_sub(s.seen_ns) > timeout,
        };
        if expired {
            self.map.remove(key);
            return None;
        }
        let s = self.map.get_mut(key)?;
        s.seen_ns = now_ns;
        Some(&mut s.value)
    }

    /// Removes every entry idle for longer than the timeout, handing each to `gone`.
    /// Callers run it once in a while (per batch or per second of capture time), not per
    /// packet.
    pub fn sweep(&mut self, now_ns: u64, mut gone: impl FnMut(K, V)) {
        if self.timeout_ns == 0 {
            return;
        }
        let t = self.timeout_ns;
        self.map.retain(|k, s| {
            let keep = now_ns.saturating_sub(s.seen_ns) <= t;
            if !keep {
                gone(*k, s.value);
            }
            keep
        });
    }

    /// Every entry with the time it was last seen.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V, u64)> {
        self.map.iter().map(|(k, s)| (k, &s.value, s.seen_ns))
    }

    /// Removes every entry, keeping the reserved capacity.
    pub fn clear(&mut self) {
        self.map.clear();
    }

    pub fn remove(&mut self, key: &K) -> Option<V> {
        self.map.remove(key).map(|s| s.value)
    }

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
        assert_eq!(t.learn(1, 8, 150), Learned::Updated);
        assert_eq!(t.get(&1, 250), Some(8));
        assert_eq!(t.get(&1, 251), None);
        assert!(t.is_empty());
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
