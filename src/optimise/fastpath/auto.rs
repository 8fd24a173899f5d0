//! `fastpath = "auto"`: whether consolidation pays on this chain and this traffic,
//! decided while running. A few chunks are timed with the TSC in each mode (cycles per
//! packet, the misses' recordings included when on); every so often the other mode is
//! tried for a while, and the chain stays in it only when it is clearly cheaper
//! (hysteresis), so the decision does not flap on noise.
//!
//! Switching never changes output: off, the chain runs as without FastPath; on again, the
//! table starts empty (the runtime flushes it when switching off, after handing the
//! entries' counts to the NFs), so no entry can rely on NF state it did not see.

use serde::Serialize;

/// Chunks between timed chunks (a power of two).
const SAMPLE_EVERY: u64 = 8;
/// Chunks in the kept mode before the other one is tried again.
const STAY: u64 = 2048;
/// Chunks a trial of the other mode lasts; only its second half is timed, so an
/// empty table filling up (on) or caches refilling (off) do not count against it.
const TRIAL: u64 = 256;
/// The other mode must cost at most this many eighths of the kept one to be kept.
const HYSTERESIS_EIGHTHS: u64 = 7;

/// What auto decided and what it measured, for the summary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AutoStats {
    /// Consolidation on at the end of the run.
    pub on: bool,
    /// Times consolidation was switched on or off.
    pub switches: u64,
    /// Measured TSC cycles per packet with consolidation on (0 = never measured).
    pub cycles_on: u64,
    /// Measured TSC cycles per packet on the normal path (0 = never measured).
    pub cycles_off: u64,
    /// Chunks timed.
    pub samples: u64,
}

/// A mode's running cost: the sum and count of the timed chunks since it was last entered.
#[derive(Clone, Copy, Default)]
struct Cost {
    cycles: u64,
    packets: u64,
}

impl Cost {
    fn per_packet(&self) -> Option<u64> {
        (self.packets > 0).then(|| self.cycles / self.packets)
    }
}

/// The decision state of one chain.
pub struct Auto {
    on: bool,
    /// Chunks since the mode last changed.
    chunks: u64,
    /// In a trial of the other mode (`on` is the mode tried).
    trial: bool,
    costs: [Cost; 2],
    /// Last whole measurement of each mode, for the report.
    last: [Option<u64>; 2],
    /// A forced schedule (tests): switch before these chunk numbers, never measure.
    forced: Option<Vec<u64>>,
    chunk_no: u64,
    pub stats: AutoStats,
}

/// What the runtime does before a chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Consolidation on for this chunk.
    pub on: bool,
    /// The mode changed from the last chunk (switching off: hand over counts, flush).
    pub switched: bool,
    /// Time this chunk and report it with [`Auto::timed`].
    pub time: bool,
}

impl Auto {
    /// Starts with consolidation on.
    pub fn new() -> Auto {
        Auto {
            on: true,
            chunks: 0,
            trial: false,
            costs: [Cost::default(); 2],
            last: [None; 2],
            forced: None,
            chunk_no: 0,
            stats: AutoStats {
                on: true,
                ..AutoStats::default()
            },
        }
    }

    /// Switches exactly before the given chunk numbers (0-based) and nowhere else: a test
    /// hook that makes mid-trace switching deterministic.
    pub fn forced(at: Vec<u64>) -> Auto {
        let mut a = Auto::new();
        a.forced = Some(at);
        a
    }

    /// The plan for the next chunk.
    pub fn plan(&mut self) -> Plan {
        let n = self.chunk_no;
        self.chunk_no += 1;
        let flip = match &self.forced {
            Some(at) => at.contains(&n),
            None => self.decide(),
        };
        if flip {
            self.on = !self.on;
            self.chunks = 0;
            self.costs[self.on as usize] = Cost::default();
            self.stats.switches += 1;
            self.stats.on = self.on;
        }
        self.chunks += 1;
        let warm = !self.trial || self.chunks > TRIAL / 2;
        Plan {
            on: self.on,
            switched: flip,
            time: self.forced.is_none() && warm && self.chunks % SAMPLE_EVERY == 0,
        }
    }

    /// Whether to change mode before the next chunk (and the trial bookkeeping).
    fn decide(&mut self) -> bool {
        let (mine, other) = (self.on as usize, !self.on as usize);
        if self.trial {
            if self.chunks < TRIAL {
                return false;
            }
            // The trial is over: keep the tried mode only if clearly cheaper.
            self.trial = false;
            return match (self.last[mine], self.last[other]) {
                (Some(tried), Some(kept)) => tried * 8 > kept * HYSTERESIS_EIGHTHS,
                _ => true,
            };
        }
        if self.chunks < STAY {
            return false;
        }
        self.trial = true;
        true
    }

    /// A timed chunk of `packets` packets took `cycles` in the current mode.
    pub fn timed(&mut self, cycles: u64, packets: u64) {
        let m = self.on as usize;
        let c = &mut self.costs[m];
        c.cycles += cycles;
        c.packets += packets;
        self.last[m] = c.per_packet();
        self.stats.samples += 1;
        self.stats.cycles_on = self.last[1].unwrap_or(0);
        self.stats.cycles_off = self.last[0].unwrap_or(0);
    }
}

impl Default for Auto {
    fn default() -> Self {
        Auto::new()
    }
}

/// The time-stamp counter (lives in `flow`, below the NFs that spin on it).
pub use crate::flow::tsc;

#[cfg(test)]
mod tests {
    use super::*;

    fn run(a: &mut Auto, chunks: u64, on_cost: u64, off_cost: u64) {
        for _ in 0..chunks {
            let p = a.plan();
            if p.time {
                a.timed(if p.on { on_cost } else { off_cost } * 32, 32);
            }
        }
    }

    #[test]
    fn stays_on_when_on_is_cheaper() {
        let mut a = Auto::new();
        // Two trials of off, each ended by going back on.
        run(&mut a, 2 * (STAY + TRIAL) + 1, 100, 300);
        assert!(a.stats.on);
        assert_eq!((a.stats.cycles_on, a.stats.cycles_off), (100, 300));
        assert_eq!(a.stats.switches, 4);
    }

    #[test]
    fn switches_off_when_off_is_clearly_cheaper() {
        let mut a = Auto::new();
        run(&mut a, STAY + TRIAL + 1, 300, 100);
        assert!(!a.stats.on);
        assert_eq!(a.stats.switches, 1);
    }

    #[test]
    fn hysteresis_keeps_a_mode_on_a_small_difference() {
        let mut a = Auto::new();
        // Off only 5% cheaper: not enough to leave on.
        run(&mut a, STAY + TRIAL + 1, 100, 95);
        assert!(a.stats.on);
        assert_eq!(a.stats.switches, 2);
    }

    #[test]
    fn forced_schedule_switches_exactly_there() {
        let mut a = Auto::forced(vec![2, 3, 7]);
        let on: Vec<bool> = (0..9).map(|_| a.plan().on).collect();
        assert_eq!(
            on,
            [true, true, false, true, true, true, true, false, false]
        );
        assert_eq!(a.stats.switches, 3);
    }
}
