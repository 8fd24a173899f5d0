//! An open-addressing index from a flow's hash to its slot in a caller's slab (the NAT's
//! mappings, Maglev's connections). hashbrown offers no way to prefetch a bucket, and
//! with 100k flows every lookup is a cache miss: this index lets an NF prefetch a whole
//! batch's entries, then the slab entries they name, so the misses overlap. Keys stay in
//! the slab and are compared there; an entry is 32 bits of hash (which also picks the
//! home position) and the slot plus one, 8 bytes: an empty entry is 0, so a new index
//! is zeroed memory the kernel hands out on first touch (a NAT's two 4 MiB indexes cost
//! nothing at start-up on a short trace).

const EMPTY: u64 = 0;

/// An entry: the tag above, the slot plus one below (never 0, so never `EMPTY`).
#[inline]
fn entry(tag: u32, slot: u32) -> u64 {
    debug_assert!(slot < u32::MAX);
    u64::from(tag) << 32 | u64::from(slot + 1)
}

#[inline]
fn slot_of(e: u64) -> u32 {
    (e as u32).wrapping_sub(1)
}

pub struct Index {
    e: Entries,
    mask: usize,
}

/// A huge page: an index at least this big is backed by them where the kernel allows.
const HUGE: usize = 2 << 20;

/// The entries: zeroed memory, from the allocator or, from [`HUGE`] bytes up, an
/// anonymous map aligned to a huge page and advised for them (`MADV_HUGEPAGE`; this
/// machine's THP setting is `madvise`). A NAT's two 4 MiB indexes hit at random by a
/// few thousand flows took a fault on nearly every 4 KiB page (a read mapped the zero
/// page, the first insert copied it: ~4,100 faults on the merged trace ×22, more than
/// Click's whole run), and every lookup a likely TLB miss; with huge pages a few faults
/// and four TLB entries. Still touched lazily: a short run pays for what it touches.
struct Entries {
    ptr: std::ptr::NonNull<u64>,
    len: usize,
    /// The map `(base, bytes)` the entries lie in, or `None`: a boxed slice.
    map: Option<(*mut libc::c_void, usize)>,
}

// SAFETY: the entries are owned exclusively, as a box's contents are.
unsafe impl Send for Entries {}
// SAFETY: shared access only reads, through `Deref`.
unsafe impl Sync for Entries {}

impl Entries {
    fn zeroed(len: usize) -> Entries {
        let want = len * std::mem::size_of::<u64>();
        if want >= HUGE {
            // Room to align the start to a huge page inside the map.
            let bytes = want + HUGE;
            // SAFETY: a fresh private anonymous map; nothing else refers to it.
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    bytes,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                    -1,
                    0,
                )
            };
            if base != libc::MAP_FAILED {
                let start = (base as usize).next_multiple_of(HUGE);
                // SAFETY: `start .. start + want` lies inside the map (`bytes` leaves
                // `HUGE` of slack for the alignment); the advice is only a hint.
                unsafe {
                    libc::madvise(start as *mut libc::c_void, want, libc::MADV_HUGEPAGE);
                }
                if let Some(ptr) = std::ptr::NonNull::new(start as *mut u64) {
                    return Entries {
                        ptr,
                        len,
                        map: Some((base, bytes)),
                    };
                }
            }
        }
        let b: Box<[u64]> = vec![EMPTY; len].into_boxed_slice();
        Entries {
            ptr: std::ptr::NonNull::from(Box::leak(b)).cast(),
            len,
            map: None,
        }
    }
}

impl std::ops::Deref for Entries {
    type Target = [u64];
    #[inline(always)]
    fn deref(&self) -> &[u64] {
        // SAFETY: `len` initialised entries (zeroed map or box), aligned, owned.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for Entries {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut [u64] {
        // SAFETY: as in `deref`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Entries {
    fn drop(&mut self) {
        match self.map {
            // SAFETY: the map `zeroed` made, unmapped once.
            Some((base, bytes)) => unsafe {
                libc::munmap(base, bytes);
            },
            // SAFETY: the box `zeroed` leaked, rebuilt once with its own length.
            None => unsafe {
                drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                    self.ptr.as_ptr(),
                    self.len,
                )));
            },
        }
    }
}

impl Index {
    /// Room for `n` entries at most half full, so linear probe runs stay short; callers
    /// never insert more than `n` (nor a slot of `u32::MAX`), so a probe always meets an
    /// empty entry.
    pub fn with_capacity(n: usize) -> Index {
        let size = (n.max(4) * 2).next_power_of_two();
        Index {
            e: Entries::zeroed(size),
            mask: size - 1,
        }
    }

    /// Writes one entry of every 4 KiB page now, so the kernel backs the whole index with
    /// fresh pages at once. Left lazy, a page first read (a miss) maps the shared zero
    /// page and the first insert there copies it, which flushes the TLB of every core the
    /// process runs on: with two sharded workers each such fault interrupts the other
    /// worker (an IPI, ~15 µs under a hypervisor), and a NAT's two 4 MiB indexes took
    /// ~4,000 of them in the first pass over the merged trace.
    pub fn prefault(&mut self) {
        // Unknown to the compiler, so every store is made (it is EMPTY, as the entries).
        let z = std::hint::black_box(EMPTY);
        for i in (0..self.e.len()).step_by(4096 / std::mem::size_of::<u64>()) {
            self.e[i] = z;
        }
    }

    #[inline]
    fn home(&self, tag: u32) -> usize {
        tag as usize & self.mask
    }

    #[inline]
    pub fn prefetch(&self, tag: u32) {
        prefetch(&self.e[self.home(tag)]);
    }

    /// The first slot with hash `tag` for which `is` holds.
    #[inline]
    pub fn find(&self, tag: u32, mut is: impl FnMut(u32) -> bool) -> Option<u32> {
        let mut i = self.home(tag);
        loop {
            let e = self.e[i];
            if e == EMPTY {
                return None;
            }
            if (e >> 32) as u32 == tag && is(slot_of(e)) {
                return Some(slot_of(e));
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Adds `slot` under `tag` (the caller knows its key is absent).
    pub fn insert(&mut self, tag: u32, slot: u32) {
        let mut i = self.home(tag);
        while self.e[i] != EMPTY {
            i = (i + 1) & self.mask;
        }
        self.e[i] = entry(tag, slot);
    }

    /// 32 bits of a 64-bit hash, both halves mixed in.
    #[inline]
    pub fn tag(h: u64) -> u32 {
        (h ^ (h >> 32)) as u32
    }

    /// Refiles `old` under `tag` as `new` (the caller moved the slab entry).
    pub fn replace(&mut self, tag: u32, old: u32, new: u32) {
        let want = entry(tag, old);
        let mut i = self.home(tag);
        loop {
            let e = self.e[i];
            if e == EMPTY {
                return;
            }
            if e == want {
                self.e[i] = entry(tag, new);
                return;
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Removes `slot` filed under `tag`, if there.
    pub fn remove(&mut self, tag: u32, slot: u32) {
        let want = entry(tag, slot);
        let mut i = self.home(tag);
        loop {
            let e = self.e[i];
            if e == EMPTY {
                return;
            }
            if e == want {
                break;
            }
            i = (i + 1) & self.mask;
        }
        // Backward-shift deletion: later entries of the run move into the hole unless
        // their home lies after it, so lookups stay correct without tombstones.
        let mut j = i;
        loop {
            j = (j + 1) & self.mask;
            let e = self.e[j];
            if e == EMPTY {
                break;
            }
            let h = self.home((e >> 32) as u32);
            if j.wrapping_sub(h) & self.mask >= j.wrapping_sub(i) & self.mask {
                self.e[i] = e;
                i = j;
            }
        }
        self.e[i] = EMPTY;
    }
}

/// A hint to load `r`'s cache line; never faults.
#[inline(always)]
pub fn prefetch<T>(r: &T) {
    crate::packet::prefetch_ptr(r);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_find_remove_with_collisions_and_wraparound() {
        let mut ix = Index::with_capacity(8); // 16 entries
                                              // Tags with the same home (15) wrap around the end.
        let tags = [15u32, 31, 47, 63, 14, 30];
        for (s, &t) in tags.iter().enumerate() {
            ix.insert(t, s as u32);
        }
        for (s, &t) in tags.iter().enumerate() {
            assert_eq!(ix.find(t, |_| true), Some(s as u32));
        }
        ix.remove(31, 1);
        ix.remove(14, 4);
        assert_eq!(ix.find(31, |_| true), None);
        assert_eq!(ix.find(14, |_| true), None);
        for &(t, s) in &[(15, 0), (47, 2), (63, 3), (30, 5)] {
            assert_eq!(ix.find(t, |_| true), Some(s), "tag {t}");
        }
        // Same tag, different slots: the predicate picks.
        ix.insert(47, 9);
        assert_eq!(ix.find(47, |s| s == 9), Some(9));
        ix.remove(47, 2);
        assert_eq!(ix.find(47, |_| true), Some(9));
    }

    /// Page faults this thread has taken so far.
    fn minor_faults() -> i64 {
        // SAFETY: getrusage writes the struct it is given.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) }, 0);
        u.ru_minflt
    }

    #[test]
    fn a_prefaulted_index_takes_no_fault_when_filled() {
        let mut ix = Index::with_capacity(1 << 19); // 8 MiB
        ix.prefault();
        let before = minor_faults();
        // A read then a write on every page, as lookups and inserts do: lazily that is
        // two faults a page (the zero page, then its copy).
        for k in (0..(1u32 << 20)).step_by(512) {
            assert_eq!(ix.find(k, |_| true), None);
            ix.insert(k, k);
        }
        let faults = minor_faults() - before;
        assert!(
            faults < 4,
            "{faults} page faults filling a prefaulted index"
        );
    }

    /// Filling a big index at random takes a few faults where the kernel gives huge
    /// pages (`MADV_HUGEPAGE`), not two a 4 KiB page: the NAT's indexes on a real trace.
    #[test]
    fn a_big_index_is_backed_by_huge_pages() {
        let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled");
        if !thp.is_ok_and(|s| s.contains("[always]") || s.contains("[madvise]")) {
            return; // No transparent huge pages here: nothing to check.
        }
        let mut ix = Index::with_capacity(1 << 18); // 4 MiB, a NAT's default
        let before = minor_faults();
        // A read then a write on every 4 KiB page, as lookups and inserts do: with small
        // pages that is two faults a page (the zero page, then its copy), 2,048 here.
        for k in (0..(1u32 << 19)).step_by(512) {
            assert_eq!(ix.find(k, |_| true), None);
            ix.insert(k, k);
        }
        let faults = minor_faults() - before;
        assert!(faults < 64, "{faults} page faults filling a 4 MiB index");
        for k in (0..(1u32 << 19)).step_by(512) {
            assert_eq!(ix.find(k, |_| true), Some(k));
        }
    }

    #[test]
    fn a_new_index_touches_none_of_its_pages() {
        // 1 Mi entries = 16 MiB: filled with a non-zero marker this faults in every page
        // (4,096, or 8 huge pages), zeroed memory from the allocator none.
        let before = minor_faults();
        let ix = std::hint::black_box(Index::with_capacity(1 << 20));
        let faults = minor_faults() - before;
        assert!(faults < 4, "{faults} page faults building a 16 MiB index");
        assert_eq!(ix.find(7, |_| true), None);
        drop(ix);
    }

    #[test]
    fn slot_zero_and_the_largest_slot_are_found() {
        let mut ix = Index::with_capacity(8);
        ix.insert(0, 0);
        ix.insert(5, u32::MAX - 1);
        assert_eq!(ix.find(0, |_| true), Some(0));
        assert_eq!(ix.find(5, |_| true), Some(u32::MAX - 1));
        ix.remove(0, 0);
        assert_eq!(ix.find(0, |_| true), None);
        assert_eq!(ix.find(5, |_| true), Some(u32::MAX - 1));
    }

    #[test]
    fn matches_a_model_under_churn() {
        let mut ix = Index::with_capacity(64);
        let mut model = std::collections::HashMap::new();
        let mut r = 1u64;
        for step in 0..20_000u32 {
            r = r
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let tag = (r >> 40) as u32 & 0xff; // many collisions
            let slot = step;
            if model.len() < 64 && r & 1 == 0 {
                ix.insert(tag, slot);
                model.insert(slot, tag);
            } else if let Some((&s, &t)) = model.iter().next() {
                ix.remove(t, s);
                model.remove(&s);
            }
            for (&s, &t) in &model {
                assert_eq!(ix.find(t, |x| x == s), Some(s));
            }
        }
    }
}
