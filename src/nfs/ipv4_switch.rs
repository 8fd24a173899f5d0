//! Freeflow's IPv4 learning switch: the MAC switch's logic keyed on IPv4 addresses.
//! Packets that are not IPv4 are dropped (the thesis' program only handles IPv4).

use super::nf::{named, Stats};
use super::nf::{Context, Nf, Profile, StateScope};
use super::params::{ParamDoc, ParamError, Params};
use crate::flow::{LearnTable, Learned};
use crate::packet::bytes::be32;
use crate::packet::{Batch, Fields, L3Kind, Layers, Meta, Packet, FLOOD, MAX_BATCH};

/// The learning part, shared with the firewall.
pub(crate) struct Ipv4Learning {
    table: LearnTable<u32, u16>,
    pub(crate) floods: u64,
    pub(crate) table_full: u64,
}

impl Ipv4Learning {
    pub(crate) const PARAMS: [ParamDoc; 2] = [
        ParamDoc {
            name: "timeout",
            ty: "seconds",
            default: "0 (never)",
            doc: "idle time after which a learned address is forgotten (run clock: docs/time.md)",
        },
        ParamDoc {
            name: "capacity",
            ty: "integer",
            default: "65536",
            doc: "most addresses remembered (1..=67,108,864); new ones beyond it are not learned (counted)",
        },
    ];

    pub(crate) fn new(capacity: usize, timeout_ns: u64) -> Self {
        Ipv4Learning {
            table: LearnTable::new(capacity, timeout_ns),
            floods: 0,
            table_full: 0,
        }
    }

    pub(crate) fn from_params(p: &mut Params) -> Result<Self, ParamError> {
        let timeout = p.seconds_ns("timeout", 0)?;
        let cap = p.int("capacity", 65536, 1, 1 << 26)? as usize;
        Ok(Self::new(cap, timeout))
    }

    /// The hashes of the IPv4 header's source and destination at `o3`, their slots
    /// prefetched: a batch does this for every packet before [`switch`](Self::switch)
    /// runs on the first, so the table's cache misses overlap.
    #[inline(always)]
    pub(crate) fn prefetch(&self, d: &[u8], o3: usize) -> (u64, u64) {
        let h = (
            self.table.hash(&be32(d, o3 + 12)),
            self.table.hash(&be32(d, o3 + 16)),
        );
        self.table.prefetch(h.0);
        self.table.prefetch(h.1);
        h
    }

    /// Learns `src` on the ingress port and sets the egress port for `dst`; `h` is
    /// their hashes from [`prefetch`](Self::prefetch).
    #[inline(always)]
    pub(crate) fn switch(&mut self, m: &mut Meta, src: u32, dst: u32, h: (u64, u64)) {
        if self.table.learn_with_hash(src, h.0, m.in_port, m.now_ns) == Learned::Full {
            self.table_full += 1;
        }
        m.egress = match self.table.get_with_hash(&dst, h.1, m.now_ns) {
            Some(port) => port,
            None => {
                self.floods += 1;
                FLOOD
            }
        };
    }

    /// Forgets every learned address; returns how many there were.
    pub(crate) fn flush(&mut self) -> usize {
        let n = self.table.len();
        self.table.clear();
        n
    }

    /// Bytes of the address table at its capacity.
    pub(crate) fn memory(&self) -> usize {
        self.table.memory()
    }

    pub(crate) fn stats(&self) -> Stats {
        named(&[
            ("entries", self.table.len() as u64),
            ("floods", self.floods),
            ("table_full", self.table_full),
        ])
    }
}

/// The packet's header offsets when it is IPv4; otherwise it is dropped with the NF's
/// reason for non-IPv4 or for cut-short headers, and None is returned.
#[inline]
pub(crate) fn ipv4_or_drop(p: &mut Packet, not_ipv4: u8, malformed: u8) -> Option<Layers> {
    let l = p.layers();
    match l.l3 {
        L3Kind::Ipv4 => Some(l),
        L3Kind::Malformed => {
            p.drop_with(malformed);
            None
        }
        _ => {
            p.drop_with(not_ipv4);
            None
        }
    }
}

pub struct Ipv4Switch {
    profile: Profile,
    learn: Ipv4Learning,
}

const NOT_IPV4: u8 = 0;
/// Headers cut short or inconsistent (too short for Ethernet, a bad IP header length).
const MALFORMED: u8 = 1;

impl Ipv4Switch {
    pub const PARAMS: &'static [ParamDoc] = &Ipv4Learning::PARAMS;

    pub fn new(capacity: usize, timeout_ns: u64) -> Ipv4Switch {
        Ipv4Switch {
            profile: Profile {
                reads: Fields::ETH_TYPE
                    | Fields::VLAN
                    | Fields::IP_SRC
                    | Fields::IP_DST
                    | Fields::IN_PORT,
                writes: Fields::EGRESS,
                may_drop: true,
                changes_length: false,
                per_flow_state: true,
                outputs: &["out"],
                drop_reasons: &["not-ipv4", "malformed"],
            },
            learn: Ipv4Learning::new(capacity, timeout_ns),
        }
    }

    pub fn from_params(p: &mut Params) -> Result<Ipv4Switch, ParamError> {
        let learn = Ipv4Learning::from_params(p)?;
        let mut s = Ipv4Switch::new(1, 0);
        s.learn = learn;
        Ok(s)
    }
}

impl Nf for Ipv4Switch {
    fn memory(&self) -> usize {
        self.learn.memory()
    }

    fn profile(&self) -> &Profile {
        &self.profile
    }

    fn state_scope(&self) -> StateScope {
        StateScope::Global("learns address -> port from every flow")
    }

    /// In chunks of a batch: prefetch every IPv4 packet's two slots, then switch packet
    /// by packet (the same order as one at a time).
    #[inline]
    fn process(&mut self, batch: &mut Batch, _cx: &Context) {
        for chunk in batch.as_mut_slice().chunks_mut(MAX_BATCH) {
            let mut hs = [(0u64, 0u64); MAX_BATCH];
            for (p, h) in chunk.iter_mut().zip(hs.iter_mut()) {
                let l = p.layers();
                if l.l3 == L3Kind::Ipv4 {
                    *h = self.learn.prefetch(p.data(), l.l3_off as usize);
                }
            }
            for (p, &h) in chunk.iter_mut().zip(hs.iter()) {
                let Some(l) = ipv4_or_drop(p, NOT_IPV4, MALFORMED) else {
                    continue;
                };
                let (m, d) = p.split_meta();
                let o = l.l3_off as usize;
                self.learn.switch(m, be32(d, o + 12), be32(d, o + 16), h);
            }
        }
    }

    /// `flush` forgets every learned address.
    fn control(&mut self, cmd: &str) -> Result<String, String> {
        match cmd.trim() {
            "flush" => Ok(format!("forgot {} address(es)", self.learn.flush())),
            _ => Err(format!("unknown command `{cmd}` (commands: flush)")),
        }
    }

    fn stats(&self) -> Stats {
        self.learn.stats()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::packet::{Packet, Verdict};

    /// Ethernet / IPv4 (proto) / 4 bytes of ports; addresses 10.0.0.{src,dst}.
    pub(crate) fn v4(src: u8, dst: u8, proto: u8, sport: u16, dport: u16, port: u16) -> Packet {
        let mut b = vec![0u8; 14 + 20 + 20];
        b[12..14].copy_from_slice(&[0x08, 0x00]);
        b[14] = 0x45;
        b[14 + 9] = proto;
        b[14 + 12..14 + 16].copy_from_slice(&[10, 0, 0, src]);
        b[14 + 16..14 + 20].copy_from_slice(&[10, 0, 0, dst]);
        b[34..36].copy_from_slice(&sport.to_be_bytes());
        b[36..38].copy_from_slice(&dport.to_be_bytes());
        let mut p = Packet::from_bytes(&b);
        p.meta_mut().in_port = port;
        p
    }

    pub(crate) fn step(nf: &mut dyn Nf, p: Packet) -> (u16, Verdict) {
        let mut b = Batch::new();
        b.push(p);
        nf.process(&mut b, &Context { ports: 5 });
        let m = b.iter().next().unwrap().meta();
        (m.egress, m.verdict)
    }

    #[test]
    fn learns_addresses_and_floods_unknown() {
        let mut sw = Ipv4Switch::new(16, 0);
        assert_eq!(step(&mut sw, v4(1, 2, 6, 1, 2, 3)).0, FLOOD);
        assert_eq!(step(&mut sw, v4(2, 1, 6, 1, 2, 4)).0, 3);
        assert_eq!(step(&mut sw, v4(1, 2, 17, 1, 2, 0)).0, 4);
        // Learned port equal to ingress port: forwarded back out of it.
        assert_eq!(step(&mut sw, v4(9, 1, 1, 0, 0, 0)).0, 0);
    }

    #[test]
    fn non_ipv4_is_dropped() {
        let mut sw = Ipv4Switch::new(16, 0);
        let mut arp = vec![0u8; 42];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(
            step(&mut sw, Packet::from_bytes(&arp)).1,
            Verdict::Drop(NOT_IPV4)
        );
        assert_eq!(sw.stats()[0], ("entries".into(), 0));
    }
}
