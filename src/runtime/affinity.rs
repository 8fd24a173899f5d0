//! Which cores a thread runs on: the workers pin themselves (`shard.rs`), a parallel
//! group's helper takes a core other than its walk's (`join.rs`), the ring-hop bench
//! puts its two ends on two cores (`ring.rs`). Linux `sched_*affinity`; elsewhere
//! nothing is pinned.

/// Cores the calling thread may run on (its affinity mask), in order; empty if unknown.
pub fn allowed_cores() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity fills it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// Restricts the calling thread to `cores`; false if the system refused (or `cores` is
/// empty).
pub fn set_cores(cores: &[usize]) -> bool {
    if cores.is_empty() {
        return false;
    }
    // SAFETY: as above; the set names the given cores (CPU_SET ignores ones out of range).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cores {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// Pins the calling thread to `core`; false if the system refused.
pub fn pin(core: usize) -> bool {
    set_cores(&[core])
}

/// The core the calling thread runs on now, if the system says.
pub fn current_core() -> Option<usize> {
    // SAFETY: sched_getcpu has no preconditions.
    let c = unsafe { libc::sched_getcpu() };
    usize::try_from(c).ok()
}

/// A plan to split two threads over two cores: the calling thread keeps the core it
/// runs on (`here`), the other gets the rest of the mask. None when the mask has one core
/// (the two must share it). Nothing changes until the threads apply it: the other thread
/// must be started *before* the caller pins itself (a thread starts with its parent's
/// mask, and a thread started on a core its spinning parent holds may not get to run
/// and move: under `SCHED_FIFO` it never did).
pub struct Split {
    /// The caller's mask before, to restore at the end.
    pub mask: Vec<usize>,
    pub here: usize,
    pub other: Vec<usize>,
}

pub fn split_two() -> Option<Split> {
    let mask = allowed_cores();
    if mask.len() < 2 {
        return None;
    }
    let here = current_core()
        .filter(|c| mask.contains(c))
        .unwrap_or(mask[0]);
    let other: Vec<usize> = mask.iter().copied().filter(|&c| c != here).collect();
    Some(Split { mask, here, other })
}
