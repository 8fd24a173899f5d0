//! A per-flow verdict cache in front of the classifier: keys packed into two words,
//! 3-way set-associative buckets of one cache line each, keyed hashing. The classifier is
//! a pure function of the key, so a hit returns exactly what classifying would; a rule
//! change clears the cache. Most packets belong to a flow seen moments before, so most
//! skip the bitmap ANDs. Keys holding IPv6 addresses are not cached (they do not pack
//! into two words); IPv6 packets do pack when no rule reads IPv6 addresses.
//!
//! The packed layout (`b`, high to low): a fill mark (so a zeroed slot is empty), six
//! presence bits, protocol (10 bits), TCP flags (8), source port or ICMP type (16),
//! destination port (16), then in the low bits IPv4 fragmentation's presence (bit 2) and
//! value (bits 0-1). `a` holds the IPv4 source and destination addresses.

use std::hash::BuildHasher;

use super::classify::{Classifier, Key};
use super::rule::Field;
use crate::flow::Hasher;

/// Buckets by default: 8Ki × 64 bytes (24Ki keys), as much as one core's L2; only the
/// buckets flows touch are loaded, and each is prefetched a batch ahead.
pub const DEFAULT_BUCKETS: usize = 8192;

const WAYS: usize = 3;

pub const MARK: u64 = 1 << 63;
pub const P_SRC4: u64 = 1 << 57;
pub const P_DST4: u64 = 1 << 58;
pub const P_SPORT: u64 = 1 << 59;
pub const P_DPORT: u64 = 1 << 60;
pub const P_ICMP: u64 = 1 << 61;
pub const P_FLAGS: u64 = 1 << 62;
pub const PROTO_SHIFT: u32 = 47;
pub const FLAGS_SHIFT: u32 = 39;
/// Source port or ICMP type: a packet has at most one of them.
pub const X_SHIFT: u32 = 23;
pub const DPORT_SHIFT: u32 = 7;
pub const P_FRAG: u64 = 1 << 2;
pub const FRAG_SHIFT: u32 = 0;

/// The packed-key bits of the fields a classifier constrains: masking a packed key of
/// every field gives the packed key of [`Classifier::relevant`], without building a
/// [`Key`]. `sport` and `icmp` gate the shared bits (all ones or zero).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyMask {
    pub a: u64,
    pub b: u64,
    pub sport: u64,
    pub icmp: u64,
    /// Some rule reads IPv6 addresses: IPv6 keys are not cached.
    pub v6: bool,
}

impl KeyMask {
    pub fn new(c: &Classifier) -> KeyMask {
        let on = |f: Field, bits: u64| if c.constrains(f) { bits } else { 0 };
        KeyMask {
            a: on(Field::Src4, 0xffff_ffff << 32) | on(Field::Dst4, 0xffff_ffff),
            b: MARK
                | on(Field::Src4, P_SRC4)
                | on(Field::Dst4, P_DST4)
                | on(Field::Proto, 0x3ff << PROTO_SHIFT)
                | on(Field::Flags, P_FLAGS | 0xff << FLAGS_SHIFT)
                | on(Field::Dport, P_DPORT | 0xffff << DPORT_SHIFT)
                | on(Field::Frag, P_FRAG | 0x3 << FRAG_SHIFT)
                // Gated per packet by `sport` and `icmp`, presence bits included.
                | P_SPORT
                | P_ICMP
                | 0xffff << X_SHIFT,
            sport: on(Field::Sport, !0),
            icmp: on(Field::Icmp, !0),
            v6: c.constrains(Field::Src6) || c.constrains(Field::Dst6),
        }
    }
}

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Bucket {
    /// Newest first; `b` is never 0 for a filled way ([`MARK`]).
    keys: [(u64, u64); WAYS],
    vals: [u32; WAYS],
}

const EMPTY: Bucket = Bucket {
    keys: [(0, 0); WAYS],
    vals: [0; WAYS],
};

/// Buckets a cache starts with (one page). It grows, as keys miss, to the size asked
/// for: a run over a few thousand packets neither clears nor faults in 512 KiB per
/// filter (page faults cost microseconds each here), and one over millions reaches the
/// full size within its first batches.
const FIRST_BUCKETS: usize = 64;
/// Growth factor: 64 -> 8Ki buckets in four steps.
const GROW: usize = 4;

/// `n` empty buckets, zeroed by the allocator (no pass writing `EMPTY` over them).
fn empty_buckets(n: usize) -> Box<[Bucket]> {
    use std::alloc::{alloc_zeroed, handle_alloc_error, Layout};
    let layout = Layout::array::<Bucket>(n.max(1)).expect("bucket count fits memory");
    // SAFETY: the layout has a non-zero size (n >= 1, buckets are 64 bytes).
    let p = unsafe { alloc_zeroed(layout) } as *mut Bucket;
    if p.is_null() {
        handle_alloc_error(layout);
    }
    // SAFETY: `p` holds `n.max(1)` buckets allocated with the global allocator in the
    // layout a `Box<[Bucket]>` of that length frees with; a bucket is integers only and
    // all zeros is `EMPTY`.
    unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, n.max(1))) }
}

pub struct VerdictCache {
    buckets: Box<[Bucket]>,
    /// The size asked for: the buckets grow up to it.
    max: usize,
    /// Per-process random seeds of the index hash.
    seeds: (u64, u64),
    /// Keys put since the buckets were made or emptied.
    puts: usize,
}

impl VerdictCache {
    /// `buckets` is rounded up to a power of two (at least 1).
    pub fn new(buckets: usize) -> VerdictCache {
        let h = Hasher::default();
        let max = buckets.max(1).next_power_of_two();
        VerdictCache {
            buckets: empty_buckets(max.min(FIRST_BUCKETS)),
            max,
            seeds: (h.hash_one(1u64), h.hash_one(2u64)),
            puts: 0,
        }
    }

    /// Bytes of the buckets at their full size (what they may grow to).
    pub fn memory(&self) -> usize {
        self.max * std::mem::size_of::<Bucket>()
    }

    /// Buckets now (they grow to the size asked for; see [`Self::grow`]).
    pub fn buckets(&self) -> usize {
        self.buckets.len()
    }

    pub fn clear(&mut self) {
        // A filter installs its rules right after making its cache: nothing to write.
        if self.puts > 0 {
            self.buckets.fill(EMPTY);
            self.puts = 0;
        }
    }

    /// Called between batches (bucket indices from [`Self::bucket`] do not outlive a
    /// batch): when more keys missed since the buckets were made than they have ways, the
    /// flows do not fit, so the buckets grow, up to the size asked for. The entries move
    /// to the new buckets (oldest first, so each bucket keeps its newest in front).
    #[inline]
    pub fn grow(&mut self) {
        if self.puts > self.buckets.len() * WAYS && self.buckets.len() < self.max {
            self.regrow();
        }
    }

    #[inline(never)]
    fn regrow(&mut self) {
        let bigger = empty_buckets((self.buckets.len() * GROW).min(self.max));
        let old = std::mem::replace(&mut self.buckets, bigger);
        for b in old.iter() {
            for w in (0..WAYS).rev() {
                // A filled way's `b` word holds `MARK`; an empty one is zero.
                if b.keys[w].1 != 0 {
                    self.put(b.keys[w], b.vals[w]);
                }
            }
        }
        self.puts = 0;
    }

    /// The packed key, or None when it does not pack (IPv6 addresses, odd protocol
    /// numbers, both an ICMP type and a source port).
    #[inline]
    pub fn pack(k: &Key) -> Option<(u64, u64)> {
        if k.src6.is_some() || k.dst6.is_some() || k.proto > 0x3ff {
            return None;
        }
        let x = match (k.icmp, k.sport) {
            (Some(_), Some(_)) => return None,
            (Some(t), None) => t,
            (None, s) => s.unwrap_or(0),
        };
        let bit = |present: bool, b: u64| if present { b } else { 0 };
        let a = u64::from(k.src4.unwrap_or(0)) << 32 | u64::from(k.dst4.unwrap_or(0));
        let b = MARK
            | bit(k.src4.is_some(), P_SRC4)
            | bit(k.dst4.is_some(), P_DST4)
            | bit(k.sport.is_some(), P_SPORT)
            | bit(k.dport.is_some(), P_DPORT)
            | bit(k.icmp.is_some(), P_ICMP)
            | bit(k.flags.is_some(), P_FLAGS)
            | bit(k.frag.is_some(), P_FRAG)
            | u64::from(k.frag.unwrap_or(0) & 0x3) << FRAG_SHIFT
            | u64::from(k.proto) << PROTO_SHIFT
            | u64::from(k.flags.unwrap_or(0)) << FLAGS_SHIFT
            | u64::from(x) << X_SHIFT
            | u64::from(k.dport.unwrap_or(0)) << DPORT_SHIFT;
        Some((a, b))
    }

    /// The bucket of a packed key: one folded multiply of the seeded words.
    #[inline]
    pub fn bucket(&self, (a, b): (u64, u64)) -> usize {
        let m = u128::from(a ^ self.seeds.0) * u128::from(b ^ self.seeds.1);
        ((m as u64) ^ (m >> 64) as u64) as usize & (self.buckets.len() - 1)
    }

    /// Starts loading bucket `i` (from [`Self::bucket`]) so a later lookup finds it.
    #[inline]
    pub fn prefetch(&self, i: usize) {
        // No bounds check: a prefetch never faults (the pointer is only formed).
        crate::packet::prefetch_ptr(self.buckets.as_ptr().wrapping_add(i));
    }

    /// [`get_at`](Self::get_at) without checking `i` against the buckets: for an index
    /// [`bucket`](Self::bucket) gave since the buckets last changed size.
    ///
    /// # Safety
    /// `i < self.buckets()`. [`bucket`](Self::bucket) masks its index below the length,
    /// which changes only in [`grow`](Self::grow) (and `new`): an index taken after the
    /// last `grow` is in bounds.
    #[inline]
    pub unsafe fn get_in(&self, i: usize, k: (u64, u64)) -> Option<u32> {
        debug_assert!(i < self.buckets.len());
        // SAFETY: the caller's contract.
        let b = unsafe { self.buckets.get_unchecked(i) };
        (0..WAYS).find(|&w| b.keys[w] == k).map(|w| b.vals[w])
    }

    /// The value cached for the packed key in bucket `i`.
    #[inline]
    pub fn get_at(&self, i: usize, k: (u64, u64)) -> Option<u32> {
        if i >= self.buckets.len() {
            return None;
        }
        // SAFETY: `i` was just checked against the buckets' length.
        unsafe { self.get_in(i, k) }
    }

    /// Caches `v` for the packed key in bucket `i`, evicting the bucket's oldest key.
    #[inline]
    pub fn put_at(&mut self, i: usize, k: (u64, u64), v: u32) {
        self.puts += 1;
        if let Some(b) = self.buckets.get_mut(i) {
            b.keys.copy_within(0..WAYS - 1, 1);
            b.vals.copy_within(0..WAYS - 1, 1);
            b.keys[0] = k;
            b.vals[0] = v;
        }
    }

    #[inline]
    pub fn get(&self, k: (u64, u64)) -> Option<u32> {
        self.get_at(self.bucket(k), k)
    }

    #[inline]
    pub fn put(&mut self, k: (u64, u64), v: u32) {
        self.put_at(self.bucket(k), k, v)
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
        c.put(packed[0], 7);
        c.put(packed[1], 3);
        assert_eq!(c.get(packed[0]), Some(7));
        assert_eq!(c.get(packed[1]), Some(3));
        c.clear();
        assert_eq!(c.get(packed[0]), None);
        let v6 = Key {
            src6: Some(1),
            ..Key::default()
        };
        assert_eq!(VerdictCache::pack(&v6), None);
        assert_eq!(VerdictCache::pack(&key(1, Some(1), Some(1), None)), None);
    }

    #[test]
    fn the_buckets_grow_as_keys_miss_and_never_answer_wrong() {
        let mut c = VerdictCache::new(1000);
        assert_eq!((c.buckets(), c.memory()), (64, 1024 * 64));
        let k = |i: u32| VerdictCache::pack(&key(i, Some(1), None, None)).unwrap();
        let mut sizes = vec![c.buckets()];
        // Kept across a growth: the first keys put are found in the bigger buckets.
        for i in 0..100 {
            c.put(k(i), i);
        }
        for i in 100..193 {
            c.put(k(i), i);
        }
        // Which keys the small buckets still hold depends on the per-process seeds
        // (193 keys, 192 ways); every one of them must survive the growth: a bigger
        // bucket takes entries from one smaller bucket only, so none is evicted.
        let held: Vec<u32> = (0..193).filter(|&i| c.get(k(i)) == Some(i)).collect();
        assert!(!held.is_empty());
        c.grow();
        assert_eq!(c.buckets(), 256);
        let lost: Vec<u32> = held
            .iter()
            .copied()
            .filter(|&i| c.get(k(i)) != Some(i))
            .collect();
        assert!(
            lost.is_empty(),
            "{} of {} held keys lost by the growth: {lost:?}",
            lost.len(),
            held.len()
        );
        for round in 0..3 {
            for i in 0..5000 {
                if i % 64 == 0 {
                    c.grow();
                    sizes.push(c.buckets());
                }
                match c.get(k(i)) {
                    Some(v) => assert_eq!(v, i, "key {i}, round {round}"),
                    None => c.put(k(i), i),
                }
            }
        }
        sizes.dedup();
        assert_eq!(sizes, vec![64, 256, 1024]);
        // At the full size, a key put is found again while its bucket keeps it.
        c.put(k(7), 7);
        assert_eq!(c.get(k(7)), Some(7));
        // Emptied by `clear`, and small caches stay as asked.
        c.clear();
        assert_eq!(c.get(k(7)), None);
        assert_eq!(VerdictCache::new(2).buckets(), 2);
    }

    #[test]
    fn a_bucket_keeps_its_newest_keys() {
        // One bucket: every key collides, the oldest is evicted first.
        let mut c = VerdictCache::new(1);
        let k = |i: u32| VerdictCache::pack(&key(i, Some(1), None, None)).unwrap();
        for i in 0..5 {
            c.put(k(i), i);
        }
        for i in 0..5 {
            let want = (i >= 5 - WAYS as u32).then_some(i);
            assert_eq!(c.get(k(i)), want, "key {i}");
        }
        assert_eq!(VerdictCache::new(1).get(k(0)), None);
    }
}
