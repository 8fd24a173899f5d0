//! A table's miss block that only counts and ends the packet (`miss { count floods;
//! flood; }`, the learning switches' own), read at load time as a fixed ending: a miss
//! of an L2 entry's step (see `entry.rs`) adds to its counters and sets the verdict in
//! place, without making the packet's run state and entering the instruction loop.

use super::{Flat, Ins};
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
    pub fn end(
        &self,
        counters: &mut [(String, u64)],
        m: &mut Meta,
        drop: Option<u8>,
    ) -> Option<u8> {
        for &c in &self.counts[..self.n as usize] {
            counters[c as usize].1 += 1;
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

#[cfg(test)]
mod tests {
    use super::How;
    use crate::nfs::pipeline::nf::compile;

    fn ends(src: &str) -> Vec<Option<(Vec<u16>, String)>> {
        let c = compile("t.stv", src, &Default::default()).expect("compiles");
        let f = c.plan.flat();
        f.miss_end
            .iter()
            .map(|e| e.map(|e| (e.counts[..e.n as usize].to_vec(), format!("{:?}", e.how))))
            .collect()
    }

    /// The MAC switch's `miss { count floods; flood; }` is a fixed ending; counting and
    /// dropping is one too; a miss block that goes on to another table or outputs by a
    /// field is not (it runs in the instruction loop).
    #[test]
    fn fixed_miss_endings_are_recognised() {
        let path = format!(
            "{}/examples/pipeline/mac_switch.stv",
            env!("CARGO_MANIFEST_DIR")
        );
        let mac = std::fs::read_to_string(path).expect("the example");
        assert_eq!(ends(&mac), [Some((vec![0], format!("{:?}", How::Flood)))]);
        let src = "drops not_ethernet, unknown;
            layout ethernet { dst: 48; src: 48; type: 16; }
            table a { key eth.dst exact; capacity 16; miss { count x; count y; drop unknown; } }
            table b { key eth.src exact; capacity 16; miss { goto a; } }
            table c { key eth.type exact; capacity 16; miss { output eth.type; } }
            decoder eth: ethernet {
              extract dst, src, type;
              short { drop not_ethernet; }
              if eth.type == 1 { goto c; }
              goto b;
            }
            start { match link { ethernet => next eth; _ => drop not_ethernet; } }";
        assert_eq!(
            ends(src),
            [
                Some((vec![0, 1], format!("{:?}", How::Drop(1)))),
                None,
                None
            ]
        );
    }
}
