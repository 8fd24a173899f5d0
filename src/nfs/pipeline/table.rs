//! Run-time tables. Exact tables are hash maps (entries given in the program or by
//! `ctl`, and learned entries in a [`LearnTable`], the native switches' table, so
//! learning, idle expiry and the full count behave exactly as theirs, and a batch can
//! prefetch a packet's slots before it runs); prefix and ternary tables are a list
//! ordered by priority, scanned first match wins.

use std::collections::HashMap;

use crate::flow::{Align64, Hasher, LearnTable, Learned};

/// What an entry does; small and `Copy` so a hit costs no more than a load.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Act {
    Output(u16),
    Flood,
    Drop(u8),
    Goto(u16),
    #[default]
    Pass,
}

#[derive(Clone, Copy, Debug, Default)]
struct LVal {
    act: Act,
    /// When the key was first learned (for the hard timeout; re-learning keeps it).
    born_ns: u64,
}

/// Learned entries keyed by the narrowest integer holding the key (hashing a u32 key
/// costs less than a u128 one), holding just the action (an entry as small as the
/// native switches' ones: fewer cache lines on traces with many addresses); with a hard
/// timeout, also when each was first learned.
enum Learn {
    K32(LearnTable<u32, Act>),
    K64(LearnTable<u64, Act>),
    K128(LearnTable<u128, Act>),
    /// 48 bytes a slot: aligned to 64 so none straddles two lines.
    Hard(LearnTable<u128, LVal, Align64>),
}

/// `$e` for every kind of learned table (`$h`, `$he`: the hard-timeout one, when it
/// differs).
macro_rules! each {
    ($s:expr, $t:ident => $e:expr, $h:ident => $he:expr) => {
        match $s {
            Learn::K32($t) => $e,
            Learn::K64($t) => $e,
            Learn::K128($t) => $e,
            Learn::Hard($h) => $he,
        }
    };
    ($s:expr, $t:ident => $e:expr) => {
        each!($s, $t => $e, $t => $e)
    };
}

/// A quick table's counters, borrowed with its typed learned part.
pub struct Counts<'a> {
    pub hits: &'a mut u64,
    pub misses: &'a mut u64,
    pub full: &'a mut u64,
}

/// A key width a learned table is typed by: a chunk's step chooses it once (see
/// `flat/entry.rs`) rather than dispatching on the width for every packet.
pub trait StepKey: std::hash::Hash + Eq + Copy + Default {
    /// The key from a step's (masked) 64-bit field value, as `learn_lookup` narrows it.
    fn of(k: u64) -> Self;
    /// The table's learned part when it is quick and keyed by `Self`, with its counters.
    fn typed(t: &mut Table) -> Option<(&mut LearnTable<Self, Act>, Counts<'_>)>;
}

macro_rules! step_key {
    ($k:ty, $v:ident) => {
        impl StepKey for $k {
            #[inline(always)]
            fn of(k: u64) -> Self {
                k as $k
            }
            #[inline(always)]
            fn typed(t: &mut Table) -> Option<(&mut LearnTable<Self, Act>, Counts<'_>)> {
                if !t.quick {
                    return None;
                }
                let c = Counts {
                    hits: &mut t.hits,
                    misses: &mut t.misses,
                    full: &mut t.full,
                };
                match t.learned.as_mut()? {
                    Learn::$v(l) => Some((l, c)),
                    _ => None,
                }
            }
        }
    };
}
step_key!(u32, K32);
step_key!(u64, K64);
step_key!(u128, K128);

/// A prefix or ternary entry over the whole (concatenated) key.
#[derive(Clone, Debug)]
pub struct Masked {
    pub value: u128,
    pub mask: u128,
    pub priority: u32,
    pub act: Act,
    pub hits: u64,
}

/// A table that learns has room for `capacity / FIXED_SHARE` fixed entries.
pub const FIXED_SHARE: usize = 16;

/// Learned entries up to which a batch does not prefetch (see [`Table::worth_prefetching`]):
/// 256 slots are at most 16 KiB of cache lines, a third of this machine's 48 KiB L1d.
const PREFETCH_MIN: usize = 256;

pub struct Table {
    pub name: String,
    pub key_bits: u32,
    pub capacity: usize,
    /// Fixed entries at most: the capacity, or in a table that learns a sixteenth of it
    /// (at least 16), so that a learning table's bound is close to its learned part.
    fixed_room: usize,
    hard_ns: u64,
    exact: HashMap<u128, (Act, u64), Hasher>,
    masked: Vec<Masked>,
    /// Whether the table is exact-only (lookups hash) or masked (lookups scan).
    is_exact: bool,
    learned: Option<Learn>,
    /// Exact, no fixed entries, no hard timeout: `learn_lookup` takes its one-dispatch
    /// path (kept up to date by `add_exact` and `del`, so a packet tests one flag).
    quick: bool,
    pub hits: u64,
    pub misses: u64,
    pub full: u64,
}

impl Table {
    /// Bytes the table takes at its bounds, for `catena check`'s memory line: the
    /// learned part as allocated (up front, at the capacity), fixed entries at their
    /// room (they grow as the program and `ctl` add them).
    pub fn memory(&self) -> usize {
        use crate::flow::footprint::{hash_table_bytes, vec_bytes};
        let learned = self
            .learned
            .as_ref()
            .map_or(0, |l| each!(l, t => t.memory()));
        let fixed = if self.is_exact {
            hash_table_bytes::<(u128, (Act, u64))>(self.fixed_room)
        } else {
            vec_bytes::<Masked>(self.fixed_room)
        };
        learned + fixed
    }

    /// `learns` reserves the learned part (capacity entries, idle timeout as native).
    pub fn new(
        name: &str,
        key_bits: u32,
        is_exact: bool,
        capacity: usize,
        learns: bool,
        idle_ns: u64,
        hard_ns: u64,
    ) -> Table {
        let learned = learns.then(|| match key_bits {
            _ if hard_ns != 0 => Learn::Hard(LearnTable::new(capacity, idle_ns)),
            0..=32 => Learn::K32(LearnTable::new(capacity, idle_ns)),
            33..=64 => Learn::K64(LearnTable::new(capacity, idle_ns)),
            _ => Learn::K128(LearnTable::new(capacity, idle_ns)),
        });
        Table {
            name: name.to_string(),
            key_bits,
            capacity,
            fixed_room: if learns {
                (capacity / FIXED_SHARE).max(16).min(capacity)
            } else {
                capacity
            },
            hard_ns,
            exact: HashMap::default(),
            masked: Vec::new(),
            is_exact,
            quick: is_exact && hard_ns == 0,
            learned,
            hits: 0,
            misses: 0,
            full: 0,
        }
    }

    pub fn is_exact(&self) -> bool {
        self.is_exact
    }

    /// Entries given in the program or added by `ctl` (not learned).
    pub fn fixed_len(&self) -> usize {
        self.exact.len() + self.masked.len()
    }

    pub fn learned_len(&self) -> usize {
        self.learned.as_ref().map_or(0, |l| each!(l, t => t.len()))
    }

    fn full_msg(&self) -> String {
        if self.learned.is_some() {
            format!(
                "table `{}` is full ({} fixed entries: a table that learns holds capacity/{FIXED_SHARE} fixed ones; raise its capacity)",
                self.name, self.fixed_room
            )
        } else {
            format!("table `{}` is full ({} entries)", self.name, self.capacity)
        }
    }

    /// Adds or replaces a fixed exact entry; refused beyond the capacity.
    pub fn add_exact(&mut self, key: u128, act: Act) -> Result<(), String> {
        if !self.exact.contains_key(&key) && self.exact.len() >= self.fixed_room {
            return Err(self.full_msg());
        }
        self.exact.insert(key, (act, 0));
        self.quick = false;
        Ok(())
    }

    /// Adds or replaces a masked entry (same value and mask); order kept by priority,
    /// earlier entries first among equals.
    pub fn add_masked(&mut self, e: Masked) -> Result<(), String> {
        if let Some(old) = self
            .masked
            .iter_mut()
            .find(|o| o.value == e.value && o.mask == e.mask && o.priority == e.priority)
        {
            old.act = e.act;
            return Ok(());
        }
        if self.masked.len() >= self.fixed_room {
            return Err(self.full_msg());
        }
        let at = self.masked.partition_point(|o| o.priority >= e.priority);
        self.masked.insert(at, e);
        Ok(())
    }

    /// Removes fixed entries with this key (and, for exact tables, a learned one).
    pub fn del(&mut self, value: u128, mask: u128) -> usize {
        if self.is_exact {
            let n = self.exact.remove(&value).is_some() as usize;
            self.quick = self.hard_ns == 0 && self.exact.is_empty();
            n + self.remove_learned(value) as usize
        } else {
            let before = self.masked.len();
            self.masked
                .retain(|o| !(o.value == value & mask && o.mask == mask));
            before - self.masked.len()
        }
    }

    #[inline]
    pub fn lookup(&mut self, key: u128, now_ns: u64) -> Option<Act> {
        let got = if self.is_exact {
            self.lookup_exact(key, now_ns)
        } else {
            self.masked
                .iter_mut()
                .find(|e| key & e.mask == e.value)
                .map(|e| {
                    e.hits += 1;
                    e.act
                })
        };
        match got {
            Some(_) => self.hits += 1,
            None => self.misses += 1,
        }
        got
    }

    #[inline(always)]
    fn lookup_exact(&mut self, key: u128, now_ns: u64) -> Option<Act> {
        if !self.exact.is_empty() {
            if let Some((a, hits)) = self.exact.get_mut(&key) {
                *hits += 1;
                return Some(*a);
            }
        }
        let hard = self.hard_ns;
        let l = self.learned.as_mut()?;
        each!(l, t => t.get(&(key as _), now_ns), t => {
            let v = t.get(&key, now_ns)?;
            if now_ns.saturating_sub(v.born_ns) > hard {
                t.remove(&key);
                return None;
            }
            Some(v.act)
        })
    }

    /// Learns `key → act` (refreshing its idle timer); a full table is counted.
    #[inline]
    pub fn learn(&mut self, key: u128, act: Act, now_ns: u64) {
        let hard = self.hard_ns;
        let Some(l) = self.learned.as_mut() else {
            return;
        };
        let r = each!(l, t => t.learn(key as _, act, now_ns), t => {
            let born_ns = match t.get(&key, now_ns) {
                Some(v) if now_ns.saturating_sub(v.born_ns) <= hard => v.born_ns,
                _ => now_ns,
            };
            t.learn(key, LVal { act, born_ns }, now_ns)
        });
        if r == Learned::Full {
            self.full += 1;
        }
    }

    /// The key width of a quick table's learned part (32, 64 or 128), else `None`.
    #[inline(always)]
    pub fn quick_bits(&self) -> Option<u32> {
        match self.learned.as_ref().filter(|_| self.quick)? {
            Learn::K32(_) => Some(32),
            Learn::K64(_) => Some(64),
            Learn::K128(_) => Some(128),
            Learn::Hard(_) => None,
        }
    }

    /// Whether a batch gains by prefetching this table's slots: not while it has at most
    /// [`PREFETCH_MIN`] learned entries, whose slots (a cache line each at most) stay in
    /// L1 between packets, so the pass would only hash every key a second time.
    #[inline(always)]
    pub fn worth_prefetching(&self) -> bool {
        self.quick && self.learned_len() > PREFETCH_MIN
    }

    /// Starts loading the learned slots of `key` and `look` (a batch's prefetch pass;
    /// only on the quick path, where `learn_lookup` goes straight to them).
    #[inline(always)]
    pub fn prefetch(&self, key: u128, look: u128) {
        match self.learned.as_ref().filter(|_| self.quick) {
            Some(Learn::K32(t)) => {
                t.prefetch(t.hash(&(key as u32)));
                t.prefetch(t.hash(&(look as u32)));
            }
            Some(Learn::K64(t)) => {
                t.prefetch(t.hash(&(key as u64)));
                t.prefetch(t.hash(&(look as u64)));
            }
            Some(Learn::K128(t)) => {
                t.prefetch(t.hash(&key));
                t.prefetch(t.hash(&look));
            }
            Some(Learn::Hard(_)) | None => {}
        }
    }

    /// Learns `key → act`, then looks `look` up: a learning switch's step (as the native
    /// switches do it), with one dispatch on the key's width for both.
    #[inline(always)]
    pub fn learn_lookup(&mut self, key: u128, act: Act, look: u128, now_ns: u64) -> Option<Act> {
        let (r, got) = match self.learned.as_mut().filter(|_| self.quick) {
            Some(Learn::K32(t)) => (t.learn(key as _, act, now_ns), t.get(&(look as _), now_ns)),
            Some(Learn::K64(t)) => (t.learn(key as _, act, now_ns), t.get(&(look as _), now_ns)),
            Some(Learn::K128(t)) => (t.learn(key, act, now_ns), t.get(&look, now_ns)),
            Some(Learn::Hard(_)) | None => return self.learn_lookup_slow(key, act, look, now_ns),
        };
        if r == Learned::Full {
            self.full += 1;
        }
        match got {
            Some(_) => self.hits += 1,
            None => self.misses += 1,
        }
        got
    }

    /// [`Table::learn_lookup`] with fixed entries or a hard timeout: one after the other.
    #[inline(never)]
    fn learn_lookup_slow(&mut self, key: u128, act: Act, look: u128, now_ns: u64) -> Option<Act> {
        self.learn(key, act, now_ns);
        self.lookup(look, now_ns)
    }

    pub fn remove_learned(&mut self, key: u128) -> bool {
        self.learned
            .as_mut()
            .is_some_and(|l| each!(l, t => t.remove(&(key as _)).is_some()))
    }

    /// Forgets every learned entry; returns how many there were.
    pub fn flush(&mut self) -> usize {
        let n = self.learned_len();
        if let Some(l) = self.learned.as_mut() {
            each!(l, t => t.clear());
        }
        n
    }

    /// Per-entry hit counters of fixed entries, ordered by key for a stable summary.
    pub fn entry_hits(&self) -> Vec<(String, u64)> {
        let mut v: Vec<(u128, u64)> = self.exact.iter().map(|(k, (_, h))| (*k, *h)).collect();
        v.sort();
        let mut out: Vec<(String, u64)> = v
            .into_iter()
            .map(|(k, h)| (format!("{}[{k:#x}].hits", self.name), h))
            .collect();
        out.extend(self.masked.iter().map(|e| {
            (
                format!("{}[{:#x}/{:#x}].hits", self.name, e.value, e.mask),
                e.hits,
            )
        }));
        out
    }
}
