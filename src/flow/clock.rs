//! The run clock: the one time every NF's timers read (idle timeouts, sweeps, FastPath
//! entry timeouts). Capture timestamps are not a clock: traces step back in time, and
//! one corrupt record can claim the year 2106. The runtime stamps each packet at ingest
//! with the clock's time, by this rule (docs/time.md):
//!
//! - a packet's clock time is the median of three capture timestamps: its own, its
//!   predecessor's and its successor's in the input, so a single packet stamped far from
//!   both neighbours (either way) moves nothing, while a real jump (two packets that
//!   agree) is taken at its first packet;
//! - the first packet has no predecessor: in its place stands the smaller of its own
//!   timestamp and the (lower) median of the first three packets' timestamps, so a first
//!   packet far in the future is caught while an ordinary one keeps its own time; the
//!   last packet has no successor: in its place stands the packet itself;
//! - the clock never goes back: a median earlier than the clock gives the clock.
//!
//! Capture timestamps are still what output files and flow records carry.

/// See the module notes.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunClock {
    /// The previous packet's capture timestamp (None before the first).
    prev: Option<u64>,
    now: u64,
}

#[inline]
fn median3(a: u64, b: u64, c: u64) -> u64 {
    a.max(b).min(a.min(b).max(c))
}

impl RunClock {
    pub const fn new() -> RunClock {
        RunClock { prev: None, now: 0 }
    }

    /// Starts the clock from the input's first (up to three) capture timestamps.
    pub fn start(&mut self, first: impl IntoIterator<Item = u64>) {
        let mut v = [0u64; 3];
        let mut n = 0;
        for t in first.into_iter().take(3) {
            v[n] = t;
            n += 1;
        }
        let t0 = v[0];
        v[..n].sort_unstable();
        self.prev = (n > 0).then(|| t0.min(v[(n - 1) / 2]));
        self.now = 0;
    }

    /// The clock time of the next packet, stamped `ts`, whose successor in the input is
    /// stamped `next` (None for the last packet).
    #[inline]
    pub fn tick(&mut self, ts: u64, next: Option<u64>) -> u64 {
        let m = median3(self.prev.unwrap_or(ts), ts, next.unwrap_or(ts));
        self.prev = Some(ts);
        self.now = self.now.max(m);
        self.now
    }

    /// Steps over packets up to one stamped `last` without ticking each: right only when
    /// their medians do not fall (the clock then ends where it would have, once the next
    /// packet's tick takes the larger median). A sharded worker uses it to pass over the
    /// others' packets (runtime/rss.rs says when it may).
    #[inline]
    pub fn skip_to(&mut self, last: u64) {
        self.prev = Some(last);
    }

    /// [`tick`](Self::tick) for a packet stamped `ts` whose median of neighbours
    /// (`median3(previous, ts, next)`, the previous and next in the input) is already
    /// known: a sharded worker's queue carries it (runtime/rss.rs), so the worker need
    /// not read its neighbours, which are other workers' packets.
    #[inline]
    pub fn advance(&mut self, median: u64, ts: u64) -> u64 {
        self.prev = Some(ts);
        self.now = self.now.max(median);
        self.now
    }

    /// The median [`tick`](Self::tick) takes of a packet stamped `ts` between
    /// packets stamped `prev` and `next`.
    #[inline]
    pub fn median(prev: u64, ts: u64, next: u64) -> u64 {
        median3(prev, ts, next)
    }

    /// The clock's time now (that of the last packet stamped).
    #[inline]
    pub fn now(&self) -> u64 {
        self.now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Clock times for a whole input.
    fn run(ts: &[u64]) -> Vec<u64> {
        let mut c = RunClock::new();
        c.start(ts.iter().copied());
        (0..ts.len())
            .map(|i| c.tick(ts[i], ts.get(i + 1).copied()))
            .collect()
    }

    const OUT: u64 = u32::MAX as u64 * 1_000_000_000;

    #[test]
    fn follows_ordered_time_and_real_jumps_at_once() {
        assert_eq!(run(&[1, 2, 3, 100, 101, 102]), [1, 2, 3, 100, 101, 102]);
        assert_eq!(run(&[0, 0, 100, 100]), [0, 0, 100, 100]);
        // A jump at the very last packet is taken (nothing says it is wrong).
        assert_eq!(run(&[1, 2, 3, 500]), [1, 2, 3, 500]);
        assert_eq!(run(&[7]), [7]);
        assert_eq!(run(&[]), Vec::<u64>::new());
    }

    #[test]
    fn a_single_outlier_moves_nothing() {
        assert_eq!(run(&[OUT, 10, 11, 12]), [11, 11, 11, 12]);
        assert_eq!(run(&[10, OUT, 11, 12]), [10, 11, 12, 12]);
        assert_eq!(run(&[10, 11, OUT, 12, 13]), [10, 11, 12, 13, 13]);
        assert_eq!(run(&[10, 11, 0, 12, 13]), [10, 10, 11, 12, 13]);
        // Two that agree are a real jump.
        assert_eq!(run(&[10, 11, 90, 91, 92]), [10, 11, 90, 91, 92]);
    }

    #[test]
    fn never_goes_back() {
        assert_eq!(
            run(&[50, 51, 52, 10, 11, 12, 60]),
            [50, 51, 51, 51, 51, 51, 60]
        );
    }

    #[test]
    fn median_of_three() {
        for (a, b, c, m) in [
            (1, 2, 3, 2),
            (3, 1, 2, 2),
            (2, 3, 1, 2),
            (5, 5, 1, 5),
            (0, 9, 9, 9),
        ] {
            assert_eq!(median3(a, b, c), m);
        }
    }
}
