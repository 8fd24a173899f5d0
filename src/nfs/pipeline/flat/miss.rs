//! A table's miss block that only counts and ends the packet (`miss { count floods;
//! flood; }`, the learning switches' own), read at load time as a fixed ending: a miss
//! adds to its counters and sets the verdict in place, without entering the instruction
//! loop (two dispatches a flooded packet, and the packet's run state for a step run on
//! the bytes).

use super::{Flat, Ins};
use crate::nfs::pipeline::plan::State;
use crate::packet::{Meta, FLOOD};

/// Counters a fixed ending adds to, at most.
const COUNTS: usize = 2;

/// How a fixed ending ends the packet.
#[derive(Clone, Copy, Debug)]
enum How {
    Flood,
    Drop(u8),
    /// As it is (`pass`, or the block's end).
    Pass,
}

/// The fixed ending of a miss block.
#[derive(Clone, Copy, Debug)]
pub struct MissEnd {
    counts: [u16; COUNTS],
    n: u8,
    how: How,
}

impl Flat {
    /// Table `t`'s miss block as a fixed ending, when it is one.
    pub(super) fn miss_end(&self, t: usize) -> Option<MissEnd> {
        let mut e = MissEnd {
            counts: [0; COUNTS],
            n: 0,
            how: How::Pass,
        };
        let mut pc = *self.miss.get(t)? as usize;
        // Jumps followed at most this often (a loop of jumps is no ending).
        let mut jumps = 4;
        loop {
            match self.ins.get(pc)? {
                Ins::Count(c) if (e.n as usize) < COUNTS => {
                    e.counts[e.n as usize] = *c;
                    e.n += 1;
                }
                Ins::Jump(to) if jumps > 0 => {
                    jumps -= 1;
                    pc = *to as usize;
                    continue;
                }
                Ins::Flood => e.how = How::Flood,
                Ins::Drop(r) => e.how = How::Drop(*r),
                Ins::Done => {}
                _ => return None,
            }
            if !matches!(self.ins[pc], Ins::Count(_)) {
                return Some(e);
            }
            pc += 1;
        }
    }
}

impl MissEnd {
    /// Ends a packet that missed: the drop reason, if dropped (`drop`: the packet's
    /// reason so far, kept by an ending that does not drop).
    #[inline(always)]
    pub fn end(&self, s: &mut State, m: &mut Meta, drop: Option<u8>) -> Option<u8> {
        for &c in &self.counts[..self.n as usize] {
            s.counters[c as usize].1 += 1;
        }
        match self.how {
            How::Flood => {
                m.egress = FLOOD;
                drop
            }
            How::Drop(r) => Some(r),
            How::Pass => drop,
        }
    }
}
