//! A link entry's learning step (an L2 switch's `learn T(eth.src) -> output in_port;
//! goto T;` at its header's start) run on the packet's bytes, before the packet's run
//! state is made: the header starts at byte 0, so its fields are at fixed offsets and
//! need no decoder offsets. A packet whose lookup ends it (an output, a flood, a drop)
//! costs no more; one that goes on (a miss block, a `goto`) or whose fields are near its
//! end is handed to the instruction loop, which sees the same state as if it had run
//! the step itself.

use super::Flat;
use crate::nfs::pipeline::plan::{Bytes, Pkt, State};
use crate::nfs::pipeline::table::Act;
use crate::packet::{Meta, Packet, FLOOD, MAX_BATCH};

/// What the entry's step did with a packet.
pub enum Early {
    /// The packet ended: its drop reason, if dropped.
    End(Option<u8>),
    /// The step ran; the loop goes on at this instruction with the entry's header
    /// entered (two steps counted).
    Loop(usize),
    /// Not run: the packet runs whole (no entry for its link, or cut short, or a field
    /// near its end).
    Whole,
}

/// A chunk's step keys, read once by [`Flat::entry_keys`]: per packet, the learned key
/// (masked) and the key looked up, for the packets whose bit is set.
pub struct Keys {
    k: [(u64, u64); MAX_BATCH],
    ok: u32,
}

impl Default for Keys {
    fn default() -> Self {
        Keys {
            k: [(0, 0); MAX_BATCH],
            ok: 0,
        }
    }
}

impl Flat {
    /// A chunk's first pass: each packet's step keys, read where its entry's header
    /// starts (none: no entry for its link, cut short, or a field near its end), and their
    /// slots prefetched when the table is large (see [`Flat::prefetch`]).
    #[inline(always)]
    pub fn entry_keys(&self, s: &State, chunk: &[Packet], keys: &mut Keys) {
        let fetch = self
            .entry
            .iter()
            .flatten()
            .any(|e| s.tables[e.step.table as usize].worth_prefetching());
        keys.ok = 0;
        for (i, (pk, k)) in chunk.iter().zip(keys.k.iter_mut()).enumerate() {
            let Some(e) = &self.entry[pk.meta().link as usize % 4] else {
                continue;
            };
            let d = pk.data();
            if e.len as usize > d.len() {
                continue;
            }
            let st = &e.step;
            if let (Some(key), Some(look)) = (st.src.peek(d, 0), st.dst.peek(d, 0)) {
                *k = (key & st.mask, look);
                keys.ok |= 1 << (i % MAX_BATCH);
                if fetch {
                    s.tables[st.table as usize].prefetch(k.0 as u128, look as u128);
                }
            }
        }
    }

    /// The entry's step for packet `i` of the chunk whose keys are `keys`, on its meta.
    #[inline(always)]
    pub fn entry_step(&self, s: &mut State, m: &mut Meta, keys: &Keys, i: usize) -> Early {
        if keys.ok & (1 << (i % MAX_BATCH)) == 0 {
            return Early::Whole;
        }
        let Some(e) = &self.entry[m.link as usize % 4] else {
            return Early::Whole;
        };
        let (k, look) = keys.k[i % MAX_BATCH];
        let t = e.step.table as usize;
        let act = Act::Output(m.in_port);
        match s.tables[t].learn_lookup(k as u128, act, look as u128, m.now_ns) {
            Some(Act::Output(port)) => m.egress = port,
            Some(Act::Flood) => m.egress = FLOOD,
            Some(Act::Drop(r)) => return Early::End(Some(r)),
            Some(Act::Pass) => {}
            Some(Act::Goto(to)) => return Early::Loop(self.apply[to as usize] as usize),
            None => match &self.miss_end[t] {
                Some(end) => return Early::End(end.end(s, m, None)),
                None => return Early::Loop(self.miss[t] as usize),
            },
        }
        Early::End(None)
    }

    /// Enters the header of a packet [`Flat::entry_step`] sent to the loop, as the
    /// step's `match link` arm did.
    #[inline(always)]
    pub fn entered<D: Bytes>(&self, p: &mut Pkt<D>) {
        if let Some(e) = &self.entry[p.m.link as usize % 4] {
            p.fit(e.dec as usize, 0, e.len as usize);
            p.cur = e.len as usize;
        }
    }
}
