//! A [`FlowKey`] that hashes as three words instead of field by field: the derived `Hash`
//! feeds each address as a length-prefixed slice, about twice the work per lookup on the
//! hot path of per-flow NFs. Equality is the key's own, compared word by word.

use std::hash::{Hash, Hasher};

use super::FlowKey;

#[derive(Clone, Copy, Debug, Eq, PartialOrd, Ord)]
pub struct WideKey(pub FlowKey);

/// Word-wise, as it hashes: the derived comparison calls `memcmp` for the addresses.
impl PartialEq for WideKey {
    #[inline]
    fn eq(&self, o: &WideKey) -> bool {
        let (a, b) = (&self.0, &o.0);
        u128::from_ne_bytes(a.src) == u128::from_ne_bytes(b.src)
            && u128::from_ne_bytes(a.dst) == u128::from_ne_bytes(b.dst)
            && (a.sport, a.dport, a.proto, a.family) == (b.sport, b.dport, b.proto, b.family)
    }
}

impl Hash for WideKey {
    #[inline]
    fn hash<H: Hasher>(&self, h: &mut H) {
        let k = &self.0;
        h.write_u128(u128::from_ne_bytes(k.src));
        h.write_u128(u128::from_ne_bytes(k.dst));
        h.write_u64(
            k.sport as u64
                | (k.dport as u64) << 16
                | (k.proto as u64) << 32
                | (k.family as u64) << 40,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn equal_keys_hash_alike_and_fields_matter() {
        let s = foldhash::fast::FixedState::with_seed(1);
        let k = FlowKey {
            src: [1; 16],
            dst: [2; 16],
            sport: 3,
            dport: 4,
            proto: 6,
            family: 6,
        };
        assert_eq!(s.hash_one(WideKey(k)), s.hash_one(WideKey(k)));
        for m in [
            FlowKey {
                sport: 4,
                dport: 3,
                ..k
            },
            FlowKey { proto: 17, ..k },
            FlowKey { family: 4, ..k },
            k.reversed(),
        ] {
            assert_ne!(s.hash_one(WideKey(k)), s.hash_one(WideKey(m)));
        }
    }
}
