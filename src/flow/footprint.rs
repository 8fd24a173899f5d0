//! Bytes the bounded tables take at their configured capacity, so `catena check` can say
//! what a chain will allocate before it allocates it (each NF adds up its own tables).

/// A hashbrown table reserved for `capacity` elements of `T` (buckets rounded up to a
/// power of two at 7/8 load, one control byte per bucket plus a group's worth).
pub fn hash_table_bytes<T>(capacity: usize) -> usize {
    let buckets = match capacity {
        0 => return 0,
        1..=3 => 4,
        4..=7 => 8,
        c => (c.saturating_mul(8) / 7).next_power_of_two(),
    };
    buckets.saturating_mul(std::mem::size_of::<T>() + 1) + 16
}

/// A [`super::Index`] made for `capacity` entries.
pub fn index_bytes(capacity: usize) -> usize {
    (capacity.max(4).saturating_mul(2))
        .next_power_of_two()
        .saturating_mul(8)
}

/// A vector grown one index at a time up to `n` elements (amortised doubling leaves its
/// capacity under `2n`).
pub fn grown_vec_bytes<T>(n: usize) -> usize {
    vec_bytes::<T>(n.saturating_mul(2))
}

/// A vector of `n` elements of `T`.
pub fn vec_bytes<T>(n: usize) -> usize {
    n.saturating_mul(std::mem::size_of::<T>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_table_bytes_match_what_hashbrown_allocates() {
        for cap in [1usize, 5, 100, 1000, 65_536] {
            let m: hashbrown::HashMap<u64, u64, crate::flow::Hasher> =
                hashbrown::HashMap::with_capacity_and_hasher(cap, Default::default());
            let est = hash_table_bytes::<(u64, u64)>(cap);
            // hashbrown's own figure, within its alignment padding.
            let got = m.allocation_size();
            assert!(
                est.abs_diff(got) <= 16,
                "{cap}: estimated {est}, allocated {got}"
            );
        }
        assert_eq!(index_bytes(100), 256 * 8);
        assert_eq!(vec_bytes::<u32>(10), 40);
    }
}
