//! The walk lends FastPath what it needs (NFs, the queue of misses, buffers, counters,
//! sinks) through [`Host`], so the consolidation logic stays in `optimise`.

use super::sink::to_sink;
use super::walk::Walk;
use crate::nfs::Nf;
use crate::optimise::fastpath::{FastPath, Host};
use crate::packet::{Batch, Packet, Pool, Verdict};

impl Host for Walk {
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
        if let Some(c) = self.counters.get_mut(node) {
            c.packets_in += 1;
            if let Some(Some(s)) = self.sinks.get_mut(node) {
                to_sink(s, c, &mut self.tx, self.shift, p);
            }
        }
    }

    #[inline(always)]
    fn count(&mut self, node: usize, verdict: Verdict, n: u64) {
        if let Some(c) = self.counters.get_mut(node) {
            c.packets_in += n;
            match verdict {
                Verdict::Out(o) => c.out[o as usize] += n,
                Verdict::Drop(r) => c.drops[r as usize] += n,
            }
        }
    }
}
