//! A fixed-capacity array in its own anonymous mapping, asked for huge pages: for the
//! large buffers a sharded worker fills once a run (`rss::Queue`). Filled from the heap,
//! a 4sics worker's queue (~5 MB) took ~1,300 page faults, each trapping into the kernel
//! to zero 4 KiB: about 2 ms, as long as the run's whole input side; in 2 MiB pages it is
//! a handful of faults (0.4–0.5 ms for 5 MiB on this host, against ~2 ms: a C probe,
//! session 28).

use std::ptr::NonNull;
use std::sync::Mutex;

/// Huge pages: the mapping is aligned to them so the kernel can back it whole.
const HUGE: usize = 2 << 20;

/// Smaller regions come from the heap: a huge page zeroed for a few 4 KiB pages' worth
/// would cost more than their faults.
pub const MAPPED_FROM: usize = 256 << 10;

/// Mappings that dropped regions left, kept for the next ones (`SPARE`): a process that
/// replays again and again (`bench micronf`, whose runs each fill a queue a worker)
/// gets memory already backed, as the heap's freed memory is for the one-worker run,
/// instead of fresh huge pages the kernel zeroes on each run's first touch. Bounded, so
/// a large trace's queues are unmapped as before.
struct Spares {
    /// (start, length) of each kept mapping.
    maps: Vec<(usize, usize)>,
}

/// Most mappings kept, and most bytes over them.
const SPARE_MAPS: usize = 8;
const SPARE_BYTES: usize = 256 << 20;

impl Spares {
    /// The smallest kept mapping of at least `len` bytes, taken out.
    fn take(&mut self, len: usize) -> Option<(usize, usize)> {
        let (k, _) = (self.maps.iter().enumerate())
            .filter(|(_, m)| m.1 >= len)
            .min_by_key(|(_, m)| m.1)?;
        Some(self.maps.swap_remove(k))
    }

    /// Keeps `map` if there is room; gives it back otherwise (to be unmapped).
    fn keep(&mut self, map: (usize, usize)) -> Option<(usize, usize)> {
        let held: usize = self.maps.iter().map(|m| m.1).sum();
        if self.maps.len() < SPARE_MAPS && held.saturating_add(map.1) <= SPARE_BYTES {
            self.maps.push(map);
            None
        } else {
            Some(map)
        }
    }
}

/// Taken and given once a region (a run's queue), never per packet.
static SPARE: Mutex<Spares> = Mutex::new(Spares { maps: Vec::new() });

fn spares() -> std::sync::MutexGuard<'static, Spares> {
    SPARE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Up to `cap` values of `T`, pushed in order; read as a slice. Falls back to the heap
/// when the mapping cannot be made (the same values, 4 KiB pages).
pub struct Region<T: Copy> {
    ptr: NonNull<T>,
    len: usize,
    cap: usize,
    /// The mapping (its start and length) when there is one.
    map: Option<(NonNull<u8>, usize)>,
    /// The fallback's storage (`ptr` points into it): held, never read, so that it
    /// lives (and is freed) with the region.
    #[allow(dead_code)]
    heap: Vec<T>,
}

// SAFETY: a `Region` owns its storage (mapping or vector) as a `Vec<T>` does.
unsafe impl<T: Copy + Send> Send for Region<T> {}
unsafe impl<T: Copy + Sync> Sync for Region<T> {}

impl<T: Copy> Default for Region<T> {
    fn default() -> Region<T> {
        Region::from_heap(Vec::new())
    }
}

impl<T: Copy> Region<T> {
    /// Room for `cap` values: mapped (and advised huge, rounded up to whole huge pages)
    /// when it spans at least [`MAPPED_FROM`] bytes, from the heap otherwise or if the
    /// mapping fails.
    pub fn with_capacity(cap: usize) -> Region<T> {
        let bytes = cap.saturating_mul(std::mem::size_of::<T>());
        let whole = bytes.checked_next_multiple_of(HUGE);
        let len = whole.and_then(|w| w.checked_add(HUGE));
        let (Some(whole), Some(len)) = (whole, len) else {
            return Region::from_heap(Vec::with_capacity(cap));
        };
        if bytes < MAPPED_FROM || std::mem::align_of::<T>() > HUGE {
            return Region::from_heap(Vec::with_capacity(cap));
        }
        // A kept mapping (`Spares`) when one is large enough: already advised and backed.
        if let Some((at, len)) = spares().take(len) {
            let first = (at + HUGE - 1) & !(HUGE - 1);
            return Region {
                // SAFETY: a mapping made below with `HUGE` spare bytes, so `first..first
                // + whole` lies within it; aligned, so at `T`'s alignment; not null.
                ptr: unsafe { NonNull::new_unchecked(first as *mut T) },
                len: 0,
                cap,
                // SAFETY: a successful mapping is not null.
                map: Some((unsafe { NonNull::new_unchecked(at as *mut u8) }, len)),
                heap: Vec::new(),
            };
        }
        // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if at == libc::MAP_FAILED {
            return Region::from_heap(Vec::with_capacity(cap));
        }
        let base = at as usize;
        let first = (base + HUGE - 1) & !(HUGE - 1);
        // SAFETY: `first..first + whole` lies within the mapping (`HUGE` spare bytes); a
        // refused advice leaves 4 KiB pages, which is still correct.
        unsafe { libc::madvise(first as *mut libc::c_void, whole, libc::MADV_HUGEPAGE) };
        Region {
            // SAFETY: within a successful mapping, so not null; aligned to `HUGE`, which
            // is at least `T`'s alignment.
            ptr: unsafe { NonNull::new_unchecked(first as *mut T) },
            len: 0,
            cap,
            // SAFETY: a successful mapping is not null.
            map: Some((unsafe { NonNull::new_unchecked(at as *mut u8) }, len)),
            heap: Vec::new(),
        }
    }

    fn from_heap(mut heap: Vec<T>) -> Region<T> {
        Region {
            // SAFETY: a vector's pointer is never null (dangling when empty).
            ptr: unsafe { NonNull::new_unchecked(heap.as_mut_ptr()) },
            len: 0,
            cap: heap.capacity(),
            map: None,
            heap,
        }
    }

    /// Appends `v`; false (nothing stored) when full.
    #[inline]
    pub fn push(&mut self, v: T) -> bool {
        if self.len == self.cap {
            return false;
        }
        // SAFETY: `len < cap`, within the storage.
        unsafe { self.ptr.as_ptr().add(self.len).write(v) };
        self.len += 1;
        true
    }

    /// Appends `vs`; false (nothing stored) when they do not fit.
    #[inline]
    pub fn extend_from_slice(&mut self, vs: &[T]) -> bool {
        if self.cap - self.len < vs.len() {
            return false;
        }
        // SAFETY: room for `vs` after `len`; `vs` cannot overlap storage only this
        // region reaches.
        unsafe {
            std::ptr::copy_nonoverlapping(vs.as_ptr(), self.ptr.as_ptr().add(self.len), vs.len())
        };
        self.len += vs.len();
        true
    }
}

impl<T: Copy> std::ops::Deref for Region<T> {
    type Target = [T];
    #[inline]
    fn deref(&self) -> &[T] {
        // SAFETY: the first `len` values were written.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> std::ops::DerefMut for Region<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, and `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> Drop for Region<T> {
    fn drop(&mut self) {
        if let Some((at, len)) = self.map {
            // Kept for the next region, or unmapped; either way no longer this one's.
            if let Some((at, len)) = spares().keep((at.as_ptr() as usize, len)) {
                // SAFETY: the mapping made in `with_capacity`, unmapped once.
                unsafe { libc::munmap(at as *mut libc::c_void, len) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_what_was_pushed_mapped_or_not() {
        for cap in [0, 3, MAPPED_FROM, HUGE + 5] {
            let mut r = Region::<u8>::with_capacity(cap);
            assert_eq!(r.map.is_some(), cap >= MAPPED_FROM, "mapped at {cap}");
            let vs: Vec<u8> = (0..cap).map(|i| (i * 7 % 251) as u8).collect();
            let half = cap / 2;
            assert!(r.extend_from_slice(&vs[..half]));
            for &v in &vs[half..] {
                assert!(r.push(v));
            }
            assert!(!r.push(1), "full at {cap}");
            assert!(!r.extend_from_slice(&[1]), "full at {cap}");
            assert_eq!(&r[..], &vs[..]);
            r[0..cap.min(1)].fill(9);
            assert!(cap == 0 || r[0] == 9);
        }
        let mut q = Region::<u64>::with_capacity(HUGE / 8 + 1);
        assert!(q.map.is_some());
        assert_eq!(q.as_ptr() as usize % HUGE, 0);
        assert!(q.push(u64::MAX));
        assert_eq!(&q[..], &[u64::MAX]);
    }

    #[test]
    fn spares_give_the_smallest_fitting_mapping_and_stay_bounded() {
        let mut s = Spares { maps: Vec::new() };
        assert_eq!(s.keep((1 << 30, 6 * HUGE)), None);
        assert_eq!(s.keep((2 << 30, 3 * HUGE)), None);
        assert_eq!(s.keep((3 << 30, 4 * HUGE)), None);
        assert_eq!(s.take(3 * HUGE + 1), Some((3 << 30, 4 * HUGE)));
        assert_eq!(s.take(7 * HUGE), None);
        assert_eq!(s.take(HUGE), Some((2 << 30, 3 * HUGE)));
        assert_eq!(s.take(HUGE), Some((1 << 30, 6 * HUGE)));
        assert_eq!(s.take(1), None);
        // Past the bytes bound, or the count bound, a mapping is given back.
        assert_eq!(s.keep((1, SPARE_BYTES + 1)), Some((1, SPARE_BYTES + 1)));
        for k in 0..SPARE_MAPS {
            assert_eq!(s.keep((k, HUGE)), None);
        }
        assert_eq!(s.keep((99, HUGE)), Some((99, HUGE)));
    }

    #[test]
    fn a_kept_mapping_serves_a_later_region_whole() {
        // Fill, drop (kept or unmapped), fill again: what is read is what was pushed.
        for round in 0..3u8 {
            let cap = HUGE + 5;
            let mut r = Region::<u8>::with_capacity(cap);
            assert!(r.map.is_some());
            assert_eq!(r.as_ptr() as usize % HUGE, 0);
            let vs: Vec<u8> = (0..cap)
                .map(|i| (i * 13 + usize::from(round)) as u8)
                .collect();
            assert!(r.extend_from_slice(&vs));
            assert!(!r.push(0));
            assert_eq!(&r[..], &vs[..]);
        }
    }
}
