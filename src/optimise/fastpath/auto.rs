//! `fastpath = "auto"`: whether consolidation pays on this chain and this traffic,
//! decided while running, early and cheaply. Chunks are timed with the TSC (cycles per
//! packet, the misses' recordings included when on); a mode's cost is the median of its
//! last few timed chunks, so a chunk the scheduler preempted does not count.
//!
//! The run starts off (the reference, never a loss), measures it over chunks
//! 16,377-16,384, then tries consolidation for a few chunks. A trial that is clearly worse
//! from its first timed chunks ends at once; one that is clearly cheaper (by 1/16) is
//! kept. Trials of the mode not kept come back after a stay that grows sixteenfold each
//! time a trial loses, so at every point of a run where FastPath loses, its trials have
//! taken at most about 1 chunk in 8,192 (2 chunks after at least 16,384 off). The first
//! trial's two chunks cost far more than two chunks off: they build FastPath and fault in
//! the pages of its fresh table (see [`FIRST_TRIAL`]). While on, a trial of off
//! switches off unless on is still cheaper by 1/32 (hysteresis: the mode does not flap
//! on noise). Chains that cannot win are not tried at all ([`super::auto_static_off`]).
//!
//! Switching never changes output: off, the chain runs as without FastPath; on again, the
//! table starts empty (the runtime flushes it when switching off, after handing the
//! entries' counts to the NFs), so no entry can rely on NF state it did not see.

use serde::Serialize;

/// Untimed chunks after a change of mode (caches refilling, the table's first entries).
const WARM: u64 = 1;
/// Timed chunks a measurement of a mode takes (their median is its cost).
const TIMED: usize = 8;
/// A trial ends early when even the cheapest of its first timed chunks costs more than
/// this many eighths (1.25×) of the kept mode's: a trial of a mode that loses costs a few chunks.
const ABORT_AFTER: usize = 2;
const ABORT_EIGHTHS: u64 = 10;
/// ... and at its first timed chunk already when that costs more than 1.5x the kept
/// mode: a trial of a mode that loses by far (consolidation on real traffic full of
/// short flows) costs two chunks (one warm, one timed).
const ABORT_AT_ONCE_EIGHTHS: u64 = 12;
/// Consolidation goes on only when it costs at most 15/16 of off ...
const ON_SIXTEENTHS: u64 = 15;
/// ... and stays on while it costs at most 31/32 of off.
const STAY_ON_32NDS: u64 = 31;
/// Chunks in the kept mode before the next trial of the other: after a trial that won,
/// then sixteen times longer after each that lost, up to the most.
const FIRST_STAY: u64 = 256;
const LOST_GROWTH: u64 = 16;
const MAX_STAY: u64 = 1 << 16;
/// Chunks off before the first trial (524,288 packets). The first trial of on builds
/// FastPath and writes the first entries of a fresh table, whose pages are faulted in
/// one by one as its sets are first written: ~300 page faults in the trial's 2 chunks,
/// ~1.5 M TSC cycles on this VM (session 25: `catena run fastpath-nat-2.toml -i
/// fastpath-again.pcap`, 3,616 minor faults auto against 3,304 off; auto's own figure
/// 21,642 cycles a packet for the trial's timed chunk against 202 off). After 1,024
/// chunks (session 24's value) that was +10 % over off at 2 NATs, the cheapest chain
/// auto tries (~200 cycles a packet, ~6,400 a chunk); after 16,384 it is under 1.5 %.
/// Off's cost is the median of the chunks just before, long past the run's first chunks
/// that pay for page faults in fresh NF tables (which would make off look dearer).
const FIRST_TRIAL: u64 = 16_384;

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
    /// Off for the whole run without a trial, and why: the chain's NFs tell that
    /// consolidation loses ([`super::auto_static_off`]).
    pub static_off: Option<&'static str>,
    /// Trials not made because the traffic gave a hit too little to skip: fewer than
    /// [`super::AUTO_MIN_STATEFUL`] NFs' per-flow work a packet since the last look.
    pub skipped: u64,
    /// That per-flow work at the last look before a trial, in thousandths of an NF a
    /// packet (0 = never looked).
    pub work_permille: u64,
}

/// The last [`TIMED`] per-packet costs of a mode.
#[derive(Clone, Copy, Default)]
struct Samples {
    v: [u64; TIMED],
    n: usize,
    next: usize,
}

impl Samples {
    fn push(&mut self, c: u64) {
        self.v[self.next] = c;
        self.next = (self.next + 1) % TIMED;
        self.n = (self.n + 1).min(TIMED);
    }

    fn median(&self) -> Option<u64> {
        let mut s = self.v;
        let s = &mut s[..self.n];
        s.sort_unstable();
        (self.n > 0).then(|| s[(self.n - 1) / 2])
    }

    fn min(&self) -> Option<u64> {
        self.v[..self.n].iter().copied().min()
    }
}

/// The decision state of one chain.
pub struct Auto {
    on: bool,
    /// Chunks since the mode last changed.
    chunks: u64,
    /// In a trial of the other mode (`on` is the mode tried).
    trial: bool,
    /// Chunks the kept mode lasts before the next trial.
    stay: u64,
    /// Chunks left that [`Auto::plan`] answers without a look at the decision state (the
    /// kept mode, untimed): one decrement a chunk between trials.
    quiet: u64,
    /// The quiet chunks not yet added to `chunks` and `chunk_no`.
    quieted: u64,
    samples: [Samples; 2],
    /// A forced schedule (tests): switch before these chunk numbers, never measure.
    forced: Option<Vec<u64>>,
    chunk_no: u64,
    /// Packets into the chain and per-flow work at the last look before a trial.
    work_mark: (u64, u64),
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
    /// Starts off; the first trial of consolidation follows the first measurement.
    pub fn new() -> Auto {
        Auto {
            on: false,
            chunks: 0,
            trial: false,
            stay: FIRST_TRIAL,
            quiet: 0,
            quieted: 0,
            samples: [Samples::default(); 2],
            forced: None,
            chunk_no: 0,
            work_mark: (0, 0),
            stats: AutoStats::default(),
        }
    }

    /// Off for good, without trials or timing: the chain alone tells that consolidation
    /// loses, for reason `why` ([`super::auto_static_off`]).
    pub fn off_from_chain(why: &'static str) -> Auto {
        let mut a = Auto::new();
        a.stats.static_off = Some(why);
        // Never an edge: every chunk off, untimed.
        a.quiet = u64::MAX;
        a
    }

    /// Starts on and switches exactly before the given chunk numbers (0-based) and
    /// nowhere else: a test hook that makes mid-trace switching deterministic.
    pub fn forced(at: Vec<u64>) -> Auto {
        let mut a = Auto::new();
        a.on = true;
        a.stats.on = true;
        a.forced = Some(at);
        a
    }

    /// The plan for the next chunk.
    #[inline(always)]
    pub fn plan(&mut self) -> Plan {
        // Most chunks: the kept mode, untimed, until its measurement before the next
        // trial (one decrement a chunk; the counts catch up at the next edge).
        if self.quiet != 0 {
            self.quiet -= 1;
            return Plan {
                on: self.on,
                switched: false,
                time: false,
            };
        }
        self.plan_edge()
    }

    /// The quiet chunks that follow the plan just made (the kept mode, untimed), taken at
    /// once: a caller that skips them calls [`plan`](Self::plan) next at the chunk after
    /// them (the runtime, by packet count: it then looks at auto only where it already
    /// compares its count, so a chunk between looks costs nothing). The same as calling
    /// `plan` that many times; the counts catch up at the next edge, as then.
    /// `u64::MAX`: never an edge again (off from the chain).
    pub fn take_quiet(&mut self) -> u64 {
        if self.stats.static_off.is_some() {
            return u64::MAX;
        }
        std::mem::take(&mut self.quiet)
    }

    /// The last quiet chunks [`take_quiet`](Self::take_quiet) gave that a run did not
    /// reach (it ended first) come back: a next run on the same runner plans from where
    /// this one stopped, not `chunks` later (session 25: the bench's second run met a
    /// trial ~8 chunks in, its first run of 512 chunks having taken 16,376 quiet ones).
    pub fn give_back_quiet(&mut self, chunks: u64) {
        if self.stats.static_off.is_none() && self.forced.is_none() {
            self.quiet = self.quiet.saturating_add(chunks);
        }
    }

    /// [`plan`](Self::plan) near a decision: in a trial, in the kept mode's measurement
    /// before one, or forced.
    #[cold]
    #[inline(never)]
    fn plan_edge(&mut self) -> Plan {
        let q = std::mem::take(&mut self.quieted);
        self.chunks += q;
        self.chunk_no += q;
        let n = self.chunk_no;
        self.chunk_no += 1;
        let flip = match &self.forced {
            Some(at) => at.contains(&n),
            None => self.decide(),
        };
        if flip {
            self.on = !self.on;
            self.chunks = 0;
            if self.trial {
                // A fresh measurement of the tried mode.
                self.samples[self.on as usize] = Samples::default();
            }
            self.stats.switches += 1;
            self.stats.on = self.on;
        }
        self.chunks += 1;
        // A trial's chunks past the warm ones are timed, and the kept mode's last few
        // before the next trial (two TSC reads a chunk), so each decision compares the
        // two modes' latest costs and the chunks between trials pay nothing.
        let plan = Plan {
            on: self.on,
            switched: flip,
            time: self.forced.is_none()
                && self.chunks > WARM
                && (self.trial || self.chunks + TIMED as u64 > self.stay),
        };
        if !self.trial && self.forced.is_none() {
            // The kept mode's chunks before its measurement: no decision to look at.
            self.quiet = self.stay.saturating_sub(self.chunks + TIMED as u64);
            self.quieted = self.quiet;
        }
        plan
    }

    /// Whether to change mode before the next chunk (and the trial bookkeeping).
    fn decide(&mut self) -> bool {
        let (mine, other) = (
            &self.samples[self.on as usize],
            &self.samples[!self.on as usize],
        );
        if !self.trial {
            if self.chunks < self.stay || mine.n < TIMED {
                return false;
            }
            self.trial = true;
            return true;
        }
        let Some(kept) = other.median() else {
            // Never measured the kept mode (cannot happen: trials follow a measurement).
            self.trial = false;
            return true;
        };
        let worse_than = |eighths: u64| mine.min().is_some_and(|m| m * 8 > kept * eighths);
        let hopeless = mine.n < TIMED
            && (mine.n >= ABORT_AFTER && worse_than(ABORT_EIGHTHS)
                || mine.n >= 1 && worse_than(ABORT_AT_ONCE_EIGHTHS));
        if !hopeless && mine.n < TIMED {
            return false;
        }
        self.trial = false;
        let tried = mine.median().unwrap_or(u64::MAX);
        let (on, off) = if self.on {
            (tried, kept)
        } else {
            (kept, tried)
        };
        let want_on = if self.on {
            on * 16 <= off * ON_SIXTEENTHS
        } else {
            on * 32 <= off * STAY_ON_32NDS
        };
        let keep_tried = !hopeless && want_on == self.on;
        self.stay = if keep_tried {
            FIRST_STAY
        } else {
            (self.stay * LOST_GROWTH).clamp(FIRST_STAY, MAX_STAY)
        };
        !keep_tried
    }

    /// A trial of consolidation was just planned (`plan` said `switched` and `on`):
    /// given the traffic's `(packets, work)` as [`super::traffic_work`] counts
    /// them now, either let it run (false) or, where the traffic gave a hit too little
    /// to skip, call it off before its first chunk (true: the chunk runs off, as a trial
    /// that lost, without its chunks; the next look comes 16 times later). Not for
    /// forced schedules.
    #[cold]
    #[inline(never)]
    pub fn veto_trial(&mut self, work: (u64, u64)) -> bool {
        if !(self.on && self.trial && self.forced.is_none() && self.traffic_cannot_win(work)) {
            return false;
        }
        self.on = false;
        self.trial = false;
        self.stats.on = false;
        self.stats.switches -= 1;
        self.stats.skipped += 1;
        self.stay = (self.stay * LOST_GROWTH).clamp(FIRST_STAY, MAX_STAY);
        // This chunk is the kept mode's first, as after a trial that lost.
        self.quiet = self.stay.saturating_sub(self.chunks + TIMED as u64);
        self.quieted = self.quiet;
        true
    }

    /// Whether the traffic since the last look, `(packets, work)` as
    /// [`super::traffic_work`] counts them now, gave a hit less per-flow work to
    /// skip than [`super::auto_static_off`] asks of the chain (a filter only counts, a NAT
    /// that translated a third of the packets counts a third): then a trial could only
    /// lose, and is not made. No packets since the last look: no verdict, try.
    fn traffic_cannot_win(&mut self, (packets, work): (u64, u64)) -> bool {
        let (p0, w0) = std::mem::replace(&mut self.work_mark, (packets, work));
        let (p, w) = (packets.saturating_sub(p0), work.saturating_sub(w0));
        if p == 0 {
            return false;
        }
        self.stats.work_permille = w.saturating_mul(1000) / p;
        w < p.saturating_mul(super::AUTO_MIN_STATEFUL as u64)
    }

    /// A timed chunk of `packets` packets took `cycles` in the current mode.
    pub fn timed(&mut self, cycles: u64, packets: u64) {
        if packets == 0 {
            return;
        }
        let m = self.on as usize;
        let s = &mut self.samples[m];
        s.push(cycles / packets);
        self.stats.samples += 1;
        // The reported cost is the median of the samples so far (a sort of eight, only
        // on timed chunks).
        {
            let c = s.median().unwrap_or(0);
            *if m == 1 {
                &mut self.stats.cycles_on
            } else {
                &mut self.stats.cycles_off
            } = c;
        }
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

    /// Where the traffic gives a hit under two NFs' per-flow work a packet, no trial is
    /// made: each look counts as a trial lost (the next look 16 times later); where it
    /// gives two or more, the costs decide as before.
    #[test]
    fn no_trial_where_the_traffic_gives_a_hit_too_little() {
        for (per_packet_x2, trials) in [(3, 0), (4, 2)] {
            let mut a = Auto::new();
            let (mut n, mut starts, mut looks) = (0u64, Vec::new(), 0);
            for c in 0..90_000u64 {
                n += 32;
                let mut p = a.plan();
                if p.switched && p.on {
                    looks += 1;
                    if a.veto_trial((n, n * per_packet_x2 / 2)) {
                        p.on = false;
                    } else {
                        starts.push(c);
                    }
                }
                if p.time {
                    a.timed(if p.on { 300 } else { 100 } * 32, 32);
                }
            }
            assert_eq!(starts.len(), trials, "{per_packet_x2}: {starts:?}");
            assert_eq!(a.stats.skipped, 2 - trials as u64, "{per_packet_x2}");
            assert_eq!(a.stats.work_permille, per_packet_x2 * 500);
            // Looked at 16,384 and 16,384 + 65,536 (after a skip or a lost trial of 2).
            assert_eq!(looks, 2, "{per_packet_x2}");
            assert!(!a.stats.on);
            assert_eq!(a.stats.switches, 2 * trials as u64);
        }
    }

    /// Skipping the quiet chunks at once ([`Auto::take_quiet`], as the runtime does between
    /// its looks) plans the same switches and timed chunks as asking `plan` for each.
    #[test]
    fn taking_the_quiet_chunks_plans_as_asking_for_each() {
        let cost = |on: bool| if on { 300 } else { 100 } * 32;
        let (mut a, mut each) = (Auto::new(), Vec::new());
        for n in 0..100_000u64 {
            let p = a.plan();
            if p.switched || p.time {
                each.push((n, p));
            }
            if p.time {
                a.timed(cost(p.on), 32);
            }
        }
        let (mut b, mut skipped, mut n) = (Auto::new(), Vec::new(), 0u64);
        while n < 100_000 {
            let p = b.plan();
            if p.switched || p.time {
                skipped.push((n, p));
            }
            if p.time {
                b.timed(cost(p.on), 32);
            }
            n += 1 + b.take_quiet();
        }
        assert_eq!(each, skipped);
        assert_eq!(a.stats, b.stats);
        // Two trials (at 16,384 and 81,922), each: off's 8 timed chunks, the switch on
        // (warm), its one timed chunk (it loses by far), the switch back.
        assert_eq!(each.len(), 2 * (TIMED + 3));
    }

    /// Runs `chunks` chunks whose timed ones cost `on_cost` or `off_cost` a packet;
    /// returns how many ran on.
    fn run(a: &mut Auto, chunks: u64, on_cost: u64, off_cost: u64) -> u64 {
        let mut on = 0;
        for _ in 0..chunks {
            let p = a.plan();
            on += p.on as u64;
            if p.time {
                a.timed(if p.on { on_cost } else { off_cost } * 32, 32);
            }
        }
        on
    }

    #[test]
    fn goes_on_at_the_first_trial_when_on_is_cheaper() {
        let mut a = Auto::new();
        // Off measured until chunk 16,384, on tried for WARM + TIMED chunks and kept.
        run(&mut a, FIRST_TRIAL + WARM + TIMED as u64 + 1, 100, 300);
        assert!(a.stats.on);
        assert_eq!((a.stats.cycles_on, a.stats.cycles_off), (100, 300));
        assert_eq!(a.stats.switches, 1);
        // Trials of off come back, lose and go back on.
        let on = run(&mut a, 10_000, 100, 300);
        assert!(a.stats.on && on > 9_900, "{on}");
    }

    #[test]
    fn a_losing_trial_ends_early_and_comes_back_ever_later() {
        let mut a = Auto::new();
        // Off measured until chunk 16,384, then a trial of on that loses by far (3x) after
        // WARM + 1 chunks.
        let on = run(&mut a, FIRST_TRIAL + 10, 300, 100);
        assert!(!a.stats.on);
        assert_eq!(on, WARM + 1);
        assert_eq!(a.stats.switches, 2);
        // One that loses by less (1.5x) after WARM + ABORT_AFTER.
        let mut b = Auto::new();
        let on = run(&mut b, FIRST_TRIAL + 10, 150, 100);
        assert!(!b.stats.on);
        assert_eq!(on, WARM + ABORT_AFTER as u64);
        // Over a long run the trials cost a fraction of a percent of the chunks.
        let on = run(&mut a, 1_000_000, 300, 100);
        assert!(!a.stats.on);
        assert!(on * 1000 < 1_000_000, "{on} chunks on");
    }

    /// Where trials of a losing "on" start (chunk numbers, 0-based), and which chunks
    /// are timed: off's last 8 before each trial and the trial's after its warm one.
    #[test]
    fn losing_trials_come_at_16384_then_65536_chunks_later() {
        let mut a = Auto::new();
        let (mut starts, mut timed) = (Vec::new(), Vec::new());
        for n in 0..150_000u64 {
            let p = a.plan();
            if p.switched && p.on {
                starts.push(n);
            }
            if p.time {
                timed.push(n);
                // On loses by far: each trial ends at its first timed chunk.
                a.timed(if p.on { 300 } else { 100 } * 32, 32);
            }
        }
        // Trial 1 at chunk 16,384 (warm), timed at 16,385, back off at 16,386; 65,536
        // chunks off (counted from the switch back; 16 times 16,384 is past the most),
        // trial 2, then 65,536 again.
        assert_eq!(
            starts,
            [16_384, 16_386 + 65_536, 16_386 + 65_536 + 2 + 65_536]
        );
        assert_eq!(
            timed[..9],
            [16_376, 16_377, 16_378, 16_379, 16_380, 16_381, 16_382, 16_383, 16_385]
        );
        assert_eq!(timed.len(), 3 * (TIMED + 1));
        assert_eq!(a.stats.switches, 6);
        // At every trial's end, trials took at most 1 chunk in 8,192 of the run so far.
        for (i, &s) in starts.iter().enumerate() {
            assert!(2 * (i as u64 + 1) * 8_192 <= s + 2, "{s}");
        }
    }

    #[test]
    fn hysteresis_keeps_off_on_a_small_difference() {
        let mut a = Auto::new();
        // On only 5% cheaper: not enough to go on.
        run(&mut a, FIRST_TRIAL + 1000, 95, 100);
        assert!(!a.stats.on);
        // On by 10%: on, and it stays on when the gap narrows to 4%.
        let mut a = Auto::new();
        run(&mut a, FIRST_TRIAL + 16, 90, 100);
        assert!(a.stats.on);
        run(&mut a, 10_000, 96, 100);
        assert!(a.stats.on);
        // Once on costs as much as off, a trial of off keeps off (trials come back
        // after at most MAX_STAY chunks).
        run(&mut a, MAX_STAY + 100, 100, 100);
        assert!(!a.stats.on);
    }

    #[test]
    fn a_preempted_chunk_does_not_decide() {
        let mut a = Auto::new();
        let mut k = 0;
        for _ in 0..FIRST_TRIAL + 20 {
            let p = a.plan();
            if p.time {
                k += 1;
                // Every fourth timed chunk lost the core for a while.
                let c = if p.on { 100 } else { 300 } * if k % 4 == 0 { 50 } else { 1 };
                a.timed(c * 32, 32);
            }
        }
        assert!(a.stats.on);
        assert_eq!((a.stats.cycles_on, a.stats.cycles_off), (100, 300));
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
