//! The walk lends FastPath what it needs (NFs, the queue of misses, buffers, counters,
//! sinks) through [`Host`], so the consolidation logic stays in `optimise`.

use super::chain::NodeKind;
use super::counters::NodeCounters;
use super::sink::{to_sink, SinkState};
use super::walk::Walk;
use crate::io::Port;
use crate::nfs::Nf;
use crate::optimise::fastpath::{Auto, FastPath, HitOut, Host, Lent, Plan, LENT};
use crate::packet::{Batch, Packet, Pool, Verdict};

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

impl FastPath {
    /// `auto` changed mode before this chunk (`p`): switching off hands the entries'
    /// counts over and flushes the table; a trial of on is called off where the traffic
    /// gave a hit too little to skip ([`Auto::veto_trial`]): the plan returned then runs
    /// the chunk off.
    #[cold]
    #[inline(never)]
    pub(super) fn switched(&mut self, p: Plan, auto: Option<&mut Auto>, walk: &mut Walk) -> Plan {
        if !p.on {
            self.switch_off(walk);
        } else if auto.is_some_and(|a| a.veto_trial(self.traffic_work(walk))) {
            return Plan {
                on: false,
                switched: false,
                time: false,
            };
        }
        p
    }
}
