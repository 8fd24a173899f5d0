//! The time-stamp counter: cycles where `perf` cannot count them.

use std::time::{Duration, Instant};

/// The counter FastPath's `auto` samples with, so benches and the runtime read one clock.
#[inline]
pub fn now() -> u64 {
    catena::optimise::fastpath::auto::tsc()
}

/// TSC ticks per second, measured against the monotonic clock over 100 ms.
pub fn hz() -> f64 {
    let (t0, c0) = (Instant::now(), now());
    std::thread::sleep(Duration::from_millis(100));
    let (dt, dc) = (t0.elapsed().as_secs_f64(), now() - c0);
    dc as f64 / dt
}
