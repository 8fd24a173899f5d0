//! Freeflow's MAC learning switch: learn source MAC → ingress port, forward by destination
//! MAC to the learned port (even when that is the ingress port, as the thesis' program
//! does), flood on a miss. Entries never expire unless a timeout is set.

use super::nf::{named, Stats};
use super::nf::{Context, Nf, Profile, StateScope};
use super::params::{ParamDoc, ParamError, Params};
use crate::flow::{LearnTable, Learned};
use crate::packet::{Batch, Fields, LinkKind, Packet, FLOOD, MAX_BATCH};

pub struct MacSwitch {
    profile: Profile,
    table: LearnTable<u64, u16>,
    floods: u64,
    table_full: u64,
}

const NOT_ETHERNET: u8 = 0;

/// The MAC address at `o` as the low 48 bits of a u64: one hash of 8 bytes instead of six
/// single ones, read with one bounds check. Out of range reads 0 rather than panicking.
#[inline]
pub(crate) fn mac_key(b: &[u8], o: usize) -> u64 {
    b.get(o..o + 6).map_or(0, |s| {
        let mut k = [0u8; 8];
        k[2..].copy_from_slice(s);
        u64::from_be_bytes(k)
    })
}

impl MacSwitch {
    pub const PARAMS: &'static [ParamDoc] = &[
        ParamDoc {
            name: "timeout",
            ty: "seconds",
            default: "0 (never)",
            doc: "idle time after which a learned MAC is forgotten (run clock: docs/time.md)",
        },
        ParamDoc {
            name: "capacity",
            ty: "integer",
            default: "65536",
            doc: "most MACs remembered (1..=67,108,864); new ones beyond it are not learned (counted)",
        },
    ];

    pub fn new(capacity: usize, timeout_ns: u64) -> MacSwitch {
        MacSwitch {
            profile: Profile {
                reads: Fields::ETH_SRC | Fields::ETH_DST | Fields::IN_PORT,
                writes: Fields::EGRESS,
                may_drop: true,
                changes_length: false,
                per_flow_state: true,
                outputs: &["out"],
                drop_reasons: &["not-ethernet"],
            },
            table: LearnTable::new(capacity, timeout_ns),
            floods: 0,
            table_full: 0,
        }
    }

    pub fn from_params(p: &mut Params) -> Result<MacSwitch, ParamError> {
        let timeout = p.seconds_ns("timeout", 0)?;
        let cap = p.int("capacity", 65536, 1, 1 << 26)? as usize;
        Ok(MacSwitch::new(cap, timeout))
    }
}

impl MacSwitch {
    /// One frame, its source and destination hashes given.
    #[inline(always)]
    fn one(&mut self, p: &mut Packet, hs: u64, hd: u64) {
        let (m, d) = p.split_meta();
        if m.link != LinkKind::Ethernet || d.len() < 14 {
            p.drop_with(NOT_ETHERNET);
            return;
        }
        let (dst, src) = (mac_key(d, 0), mac_key(d, 6));
        if self.table.learn_with_hash(src, hs, m.in_port, m.now_ns) == Learned::Full {
            self.table_full += 1;
        }
        m.egress = match self.table.get_with_hash(&dst, hd, m.now_ns) {
            Some(port) => port,
            None => {
                self.floods += 1;
                FLOOD
            }
        };
    }
}

impl Nf for MacSwitch {
    fn memory(&self) -> usize {
        self.table.memory()
    }

    fn profile(&self) -> &Profile {
        &self.profile
    }

    fn state_scope(&self) -> StateScope {
        StateScope::Global("learns MAC -> port from every flow")
    }

    /// In chunks of a batch: hash both addresses of every frame and prefetch their
    /// slots, then learn and look up frame by frame (the same order as one at a time).
    #[inline]
    fn process(&mut self, batch: &mut Batch, _cx: &Context) {
        for chunk in batch.as_mut_slice().chunks_mut(MAX_BATCH) {
            let mut hs = [(0u64, 0u64); MAX_BATCH];
            for (p, h) in chunk.iter().zip(hs.iter_mut()) {
                let d = p.data();
                if d.len() >= 14 {
                    *h = (
                        self.table.hash(&mac_key(d, 6)),
                        self.table.hash(&mac_key(d, 0)),
                    );
                    self.table.prefetch(h.0);
                    self.table.prefetch(h.1);
                }
            }
            for (p, &(hs, hd)) in chunk.iter_mut().zip(hs.iter()) {
                self.one(p, hs, hd);
            }
        }
    }

    /// `flush` forgets every learned MAC.
    fn control(&mut self, cmd: &str) -> Result<String, String> {
        match cmd.trim() {
            "flush" => {
                let n = self.table.len();
                self.table.clear();
                Ok(format!("forgot {n} MAC(s)"))
            }
            _ => Err(format!("unknown command `{cmd}` (commands: flush)")),
        }
    }

    fn stats(&self) -> Stats {
        named(&[
            ("entries", self.table.len() as u64),
            ("floods", self.floods),
            ("table_full", self.table_full),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{Packet, Verdict};

    fn frame(dst: u8, src: u8, port: u16, ts_s: u64) -> Packet {
        let mut b = [0u8; 60];
        b[0..6].copy_from_slice(&[2, 0, 0, 0, 0, dst]);
        b[6..12].copy_from_slice(&[2, 0, 0, 0, 0, src]);
        b[12..14].copy_from_slice(&[0x08, 0x00]);
        let mut p = Packet::from_bytes(&b);
        p.meta_mut().in_port = port;
        p.meta_mut().now_ns = ts_s * 1_000_000_000;
        p
    }

    /// Runs one packet at a time so each step's decision can be checked.
    fn step(sw: &mut MacSwitch, p: Packet) -> (u16, Verdict) {
        let mut b = Batch::new();
        b.push(p);
        sw.process(&mut b, &Context { ports: 4 });
        let m = b.iter().next().unwrap().meta();
        (m.egress, m.verdict)
    }

    #[test]
    fn learn_forward_flood_and_timeout() {
        let mut sw = MacSwitch::new(16, 10_000_000_000);
        // A (port 1) -> B: B unknown, flood; A learned on 1.
        assert_eq!(
            step(&mut sw, frame(0xb, 0xa, 1, 0)),
            (FLOOD, Verdict::Out(0))
        );
        // B (port 2) -> A: A known on 1.
        assert_eq!(step(&mut sw, frame(0xa, 0xb, 2, 1)).0, 1);
        // A -> B now goes to 2.
        assert_eq!(step(&mut sw, frame(0xb, 0xa, 1, 2)).0, 2);
        // A moves to port 3: learning follows it.
        assert_eq!(step(&mut sw, frame(0xb, 0xa, 3, 3)).0, 2);
        assert_eq!(step(&mut sw, frame(0xa, 0xb, 2, 4)).0, 3);
        // Destination learned on the ingress port itself: sent back out of it.
        assert_eq!(step(&mut sw, frame(0xa, 0xc, 3, 5)).0, 3);
        // B last seen at 4 s; at 15 s it is older than 10 s: flood again.
        assert_eq!(step(&mut sw, frame(0xb, 0xa, 3, 15)).0, FLOOD);
    }

    #[test]
    fn no_timeout_by_default_and_short_frames_dropped() {
        let mut sw = MacSwitch::new(16, 0);
        step(&mut sw, frame(0xb, 0xa, 1, 0));
        assert_eq!(step(&mut sw, frame(0xa, 0xb, 2, 1_000_000)).0, 1);
        let short = Packet::from_bytes(&[0; 13]);
        assert_eq!(step(&mut sw, short).1, Verdict::Drop(NOT_ETHERNET));
    }

    #[test]
    fn full_table_is_counted() {
        let mut sw = MacSwitch::new(1, 0);
        step(&mut sw, frame(0xb, 0xa, 1, 0));
        step(&mut sw, frame(0xa, 0xb, 2, 0));
        assert_eq!(sw.stats()[2], ("table_full".into(), 1));
        assert_eq!(step(&mut sw, frame(0xb, 0xa, 1, 0)).0, FLOOD);
    }
}
