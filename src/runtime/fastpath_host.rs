//! The walk lends FastPath what it needs (NFs, the queue of misses, buffers, counters,
//! sinks) through [`Host`], so the consolidation logic stays in `optimise`.

use super::chain::NodeKind;
use super::counters::NodeCounters;
use super::sink::{to_sink, SinkState};
use super::walk::Walk;
use crate::io::Port;
use crate::nfs::Nf;
use crate::optimise::fastpath::{
    auto, traffic_work, Auto, FastConfig, FastPath, FastStats, HitOut, Host, Lent, LENT,
};
use crate::packet::{Batch, Packet, Pool, Verdict, MAX_BATCH};

impl Host for Walk {
    type Out<'a> = WalkOut<'a>;

    #[inline(always)]
    fn nf(&mut self, node: usize) -> Option<&mut dyn Nf> {
        self.nf_mut(node)
    }

    #[inline(always)]
    fn misses(&mut self) -> &mut Batch {
        &mut self.inbox[self.first]
    }

    #[inline]
    fn run_chain(&mut self, f: &mut FastPath) {
        self.drain(Some(f));
    }

    #[inline(always)]
    fn pool(&mut self) -> &mut Pool {
        &mut self.pool
    }

    #[inline(always)]
    fn to_sink(&mut self, node: usize, p: &Packet) {
        sink_one(
            &mut self.counters,
            &mut self.sinks,
            &mut self.tx,
            &mut self.live,
            self.shift,
            node,
            p,
        );
    }

    #[inline(always)]
    fn count(&mut self, node: usize, verdict: Verdict, n: u64) {
        count(&mut self.counters, node, verdict, n);
    }

    fn packets_in(&self, node: usize) -> u64 {
        self.counters.get(node).map_or(0, |c| c.packets_in)
    }

    #[inline]
    fn lend<R>(
        &mut self,
        slots: &[u8],
        f: impl FnOnce(&mut Lent<'_>, &mut Self::Out<'_>) -> R,
    ) -> R {
        let Walk {
            chain,
            pool,
            counters,
            sinks,
            tx,
            live,
            shift,
            ..
        } = self;
        let mut nfs: Lent<'_> = [const { None }; LENT];
        for (node, &s) in chain.nodes.iter_mut().zip(slots) {
            if let (NodeKind::Nf { nf, .. }, Some(slot)) = (&mut node.kind, nfs.get_mut(s as usize))
            {
                *slot = nf.consolidate_mut();
            }
        }
        f(
            &mut nfs,
            &mut WalkOut {
                pool,
                counters,
                sinks,
                tx,
                live,
                shift: *shift,
            },
        )
    }
}

/// The walk's sinks, counters and pool, borrowed apart from its NFs for a run of hits.
pub(super) struct WalkOut<'a> {
    pool: &'a mut Pool,
    counters: &'a mut Vec<NodeCounters>,
    sinks: &'a mut Vec<Option<SinkState>>,
    tx: &'a mut Vec<u64>,
    live: &'a mut Vec<Box<dyn Port>>,
    shift: u64,
}

impl HitOut for WalkOut<'_> {
    #[inline(always)]
    fn to_sink(&mut self, node: usize, p: &Packet) {
        sink_one(
            self.counters,
            self.sinks,
            self.tx,
            self.live,
            self.shift,
            node,
            p,
        );
    }

    #[inline(always)]
    fn free(&mut self, p: Packet) {
        self.pool.free(p);
    }

    #[inline(always)]
    fn free_batch(&mut self, b: &mut Batch) {
        self.pool.free_batch(b);
    }

    #[inline(always)]
    fn count(&mut self, node: usize, verdict: Verdict, n: u64) {
        count(self.counters, node, verdict, n);
    }
}

#[inline(always)]
fn sink_one(
    counters: &mut [NodeCounters],
    sinks: &mut [Option<SinkState>],
    tx: &mut [u64],
    live: &mut [Box<dyn Port>],
    shift: u64,
    node: usize,
    p: &Packet,
) {
    if let Some(c) = counters.get_mut(node) {
        c.packets_in += 1;
        if let Some(Some(s)) = sinks.get_mut(node) {
            to_sink(s, c, tx, live, shift, p);
        }
    }
}

#[inline(always)]
fn count(counters: &mut [NodeCounters], node: usize, verdict: Verdict, n: u64) {
    if let Some(c) = counters.get_mut(node) {
        c.packets_in += n;
        match verdict {
            Verdict::Out(o) => c.out[o as usize] += n,
            Verdict::Drop(r) => c.drops[r as usize] += n,
        }
    }
}

/// `fastpath = "auto"` as a worker runs it: the decision state, FastPath parked while
/// off, and the chunk being timed. Parked, a chunk off runs exactly the code of a run
/// without FastPath (the worker tests `fast` as it does anyway), and the worker looks at
/// auto ([`AutoRun::look`]) only where it already compares its packet count with the
/// next progress report: between decisions a chunk costs nothing more than off.
pub(super) struct AutoRun {
    pub(super) auto: Auto,
    /// FastPath while consolidation is off.
    parked: Option<Box<FastPath>>,
    /// FastPath's settings and the walk's batch capacity, until the first trial builds
    /// it: a run that makes none (off throughout, or its trials called off) pays nothing
    /// for FastPath's set-up.
    unbuilt: Option<(FastConfig, usize)>,
    /// The TSC at the start of the chunk being timed, and its packets.
    timing: Option<(u64, u64)>,
    /// The packet count of the next look (the worker also comes here for its progress
    /// reports: those between two of auto's looks leave it alone).
    next_at: u64,
}

impl AutoRun {
    /// `unbuilt`: FastPath's settings and the batch capacity, to build it when first
    /// needed (None for a chain auto leaves off from the chain).
    pub(super) fn new(auto: Auto, unbuilt: Option<(FastConfig, usize)>) -> AutoRun {
        AutoRun {
            auto,
            parked: None,
            unbuilt,
            timing: None,
            next_at: 0,
        }
    }

    /// Before a chunk of `n` packets, `done` into the run: the chunk timed before it
    /// reported, the plan for this one applied (`fast` parked or back; switching off
    /// hands the entries' counts over and flushes the table; a trial of on is called off
    /// where the traffic gave a hit too little to skip, [`Auto::veto_trial`]). Returns
    /// the packet count at which to look next: after this chunk and the quiet chunks
    /// that follow it (counted as full batches: a short chunk only delays the next look).
    #[cold]
    #[inline(never)]
    pub(super) fn look(
        &mut self,
        fast: &mut Option<Box<FastPath>>,
        walk: &mut Walk,
        done: u64,
        n: u64,
    ) -> u64 {
        if done < self.next_at {
            return self.next_at;
        }
        if let Some((t0, k)) = self.timing.take() {
            self.auto.timed(auto::tsc().wrapping_sub(t0), k);
        }
        let mut p = self.auto.plan();
        if p.on && fast.is_none() {
            let nodes = walk.chain.nodes.len();
            if p.switched && self.auto.veto_trial(traffic_work(walk, nodes)) {
                p.time = false;
            } else {
                self.unpark(fast, walk);
            }
        } else if !p.on {
            if let Some(mut f) = fast.take() {
                f.switch_off(walk);
                self.parked = Some(f);
            }
        }
        if p.time {
            self.timing = Some((auto::tsc(), n));
        }
        let quiet = self.auto.take_quiet();
        self.next_at = done
            .saturating_add(n)
            .saturating_add(quiet.saturating_mul(MAX_BATCH as u64));
        self.next_at
    }

    /// FastPath back from where it waits while off, built at its first use.
    pub(super) fn unpark(&mut self, fast: &mut Option<Box<FastPath>>, walk: &Walk) {
        *fast = self.parked.take().or_else(|| {
            let (cfg, cap) = self.unbuilt.take()?;
            Some(Box::new(FastPath::new(cfg, &walk.chain.nf_slots(), cap)))
        });
    }

    /// The counters of a FastPath never built (no trial): all zero, for the summary.
    pub(super) fn unbuilt_stats(&self) -> Option<FastStats> {
        self.unbuilt.map(|_| FastStats::default())
    }

    /// At the end of a run of `done` packets: the last chunk's timing reported, the quiet
    /// chunks the run did not reach given back to auto (a next run on this runner goes
    /// on from here), FastPath back (off, its table empty) for the summary.
    pub(super) fn end(&mut self, fast: &mut Option<Box<FastPath>>, done: u64) {
        if let Some((t0, k)) = self.timing.take() {
            self.auto.timed(auto::tsc().wrapping_sub(t0), k);
        }
        let unrun = self.next_at.saturating_sub(done) / MAX_BATCH as u64;
        self.auto.give_back_quiet(unrun);
        if fast.is_none() {
            *fast = self.parked.take();
        }
        // A next run counts its packets from 0.
        self.next_at = 0;
    }
}
