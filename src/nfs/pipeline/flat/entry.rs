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
use crate::packet::{Meta, FLOOD};

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

impl Flat {
    /// The entry's step for one packet, on its meta and bytes only.
    #[inline(always)]
    pub fn entry_step(&self, s: &mut State, m: &mut Meta, d: &[u8]) -> Early {
        let Some(e) = &self.entry[m.link as usize % 4] else {
            return Early::Whole;
        };
        let st = &e.step;
        let (Some(k), Some(look)) = (st.src.peek(d, 0), st.dst.peek(d, 0)) else {
            return Early::Whole;
        };
        if e.len as usize > d.len() {
            return Early::Whole;
        }
        let t = st.table as usize;
        let act = Act::Output(m.in_port);
        match s.tables[t].learn_lookup((k & st.mask) as u128, act, look as u128, m.now_ns) {
            Some(Act::Output(port)) => m.egress = port,
            Some(Act::Flood) => m.egress = FLOOD,
            Some(Act::Drop(r)) => return Early::End(Some(r)),
            Some(Act::Pass) => {}
            Some(Act::Goto(to)) => return Early::Loop(self.apply[to as usize] as usize),
            None => return Early::Loop(self.miss[t] as usize),
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
