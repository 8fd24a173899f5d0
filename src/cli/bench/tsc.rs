//! The time-stamp counter: cycles where `perf` cannot count them.

use std::time::{Duration, Instant};

#[inline]
pub fn now() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: rdtsc has no preconditions on x86_64.
    unsafe {
        core::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        use std::sync::OnceLock;
        static T0: OnceLock<Instant> = OnceLock::new();
        T0.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// TSC ticks per second, measured against the monotonic clock over 100 ms.
pub fn hz() -> f64 {
    let (t0, c0) = (Instant::now(), now());
    std::thread::sleep(Duration::from_millis(100));
    let (dt, dc) = (t0.elapsed().as_secs_f64(), now() - c0);
    dc as f64 / dt
}
