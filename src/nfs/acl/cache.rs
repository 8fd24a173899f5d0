//! A per-flow verdict cache in front of the classifier: IPv4 (and non-IP) keys packed
//! into two words, direct-mapped, keyed hashing. The classifier is a pure function of the
//! key, so a hit returns exactly what classifying would; a rule change clears the cache.
//! Most packets belong to a flow seen moments before, so most skip the bitmap ANDs.
//! IPv6 keys are not cached (they do not pack into two words).

use std::hash::BuildHasher;

use super::classify::Key;
use crate::flow::Hasher;

/// Slots by default: 16Ki × 24 bytes, small enough to stay in L2.
pub const DEFAULT_SLOTS: usize = 16_384;

/// The `rule` of a cached "no rule matches".
const NO_RULE: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Slot {
    a: u64,
    /// Never 0 for a filled slot (bit 63 is set), so a zeroed slot is empty.
    b: u64,
    rule: u32,
}

const EMPTY: Slot = Slot {
    a: 0,
    b: 0,
    rule: 0,
};

pub struct VerdictCache {
    slots: Vec<Slot>,
    hasher: Hasher,
}

impl VerdictCache {
    /// `slots` is rounded up to a power of two (at least 1).
    pub fn new(slots: usize) -> VerdictCache {
        VerdictCache {
            slots: vec![EMPTY; slots.max(1).next_power_of_two()],
            hasher: Hasher::default(),
        }
    }

    pub fn clear(&mut self) {
        self.slots.fill(EMPTY);
    }

    /// The packed key, or None when it does not pack (IPv6, odd protocol numbers).
    #[inline]
    pub fn pack(k: &Key) -> Option<(u64, u64)> {
        if k.src6.is_some() || k.dst6.is_some() || k.proto > 0x3ff {
            return None;
        }
        // ICMP type shares the source-port bits; a key with both does not pack.
        let x = match (k.icmp, k.sport) {
            (Some(_), Some(_)) => return None,
            (Some(t), None) => t,
            (None, s) => s.unwrap_or(0),
        };
        let present = u64::from(k.src4.is_some())
            | u64::from(k.dst4.is_some()) << 1
            | u64::from(k.sport.is_some()) << 2
            | u64::from(k.dport.is_some()) << 3
            | u64::from(k.icmp.is_some()) << 4
            | u64::from(k.flags.is_some()) << 5;
        let a = u64::from(k.src4.unwrap_or(0)) << 32 | u64::from(k.dst4.unwrap_or(0));
        let b = 1 << 63
            | present << 57
            | u64::from(k.proto) << 47
            | u64::from(k.flags.unwrap_or(0)) << 39
            | u64::from(x) << 23
            | u64::from(k.dport.unwrap_or(0)) << 7;
        Some((a, b))
    }

    #[inline]
    fn index(&self, a: u64, b: u64) -> usize {
        self.hasher.hash_one((a, b)) as usize & (self.slots.len() - 1)
    }

    /// The cached classification of the packed key: Some(first matching rule or None).
    #[inline]
    pub fn get(&self, (a, b): (u64, u64)) -> Option<Option<u32>> {
        let s = self.slots[self.index(a, b)];
        (s.a == a && s.b == b).then_some((s.rule != NO_RULE).then_some(s.rule))
    }

    #[inline]
    pub fn put(&mut self, (a, b): (u64, u64), rule: Option<u32>) {
        let i = self.index(a, b);
        self.slots[i] = Slot {
            a,
            b,
            rule: rule.unwrap_or(NO_RULE),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(src: u32, sport: Option<u16>, icmp: Option<u16>, flags: Option<u8>) -> Key {
        Key {
            proto: 6,
            src4: Some(src),
            dst4: Some(0x0a00_0001),
            sport,
            dport: Some(80),
            icmp,
            flags,
            ..Key::default()
        }
    }

    #[test]
    fn distinct_keys_pack_distinctly_and_hits_return_what_was_put() {
        let keys = [
            key(1, Some(1000), None, None),
            key(1, Some(1000), None, Some(0x02)),
            key(1, None, Some(1000), None),
            key(1, None, None, None),
            key(2, Some(1000), None, None),
            key(1, Some(0), None, None),
        ];
        let packed: Vec<_> = keys
            .iter()
            .map(|k| VerdictCache::pack(k).unwrap())
            .collect();
        for i in 0..packed.len() {
            for j in 0..i {
                assert_ne!(packed[i], packed[j], "keys {i} and {j}");
            }
        }
        let mut c = VerdictCache::new(1024);
        c.put(packed[0], Some(7));
        c.put(packed[1], None);
        assert_eq!(c.get(packed[0]), Some(Some(7)));
        assert_eq!(c.get(packed[1]), Some(None));
        c.clear();
        assert_eq!(c.get(packed[0]), None);
        let v6 = Key {
            src6: Some(1),
            ..Key::default()
        };
        assert_eq!(VerdictCache::pack(&v6), None);
        assert_eq!(VerdictCache::pack(&key(1, Some(1), Some(1), None)), None);
    }
}
