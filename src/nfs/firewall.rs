//! Freeflow's stateless firewall: the IPv4 learning switch that first drops everything but
//! TCP and UDP with a source or destination port in a list (default 80 and 443).
//!
//! The decision matches the BPF filter `ip and (tcp or udp) and (port P1 or port P2 …)`,
//! VLAN tags aside: like tcpdump, later IP fragments carry no ports and do not match.
//! Frames whose IPv4 header has a bad version or header length are dropped as
//! `malformed` unless `malformed = "pass"`, which reads them as BPF does
//! ([`super::malformed`]).

use super::ipv4_switch::Ipv4Learning;
use super::malformed::{bpf_view, BpfView, Malformed};
use super::nf::Stats;
use super::nf::{Context, Nf, Profile, StateScope};
use super::params::{ParamDoc, ParamError, Params};
use crate::packet::bytes::{be16, be32};
use crate::packet::wire::{Ethernet, Ipv4, Tcp, Udp};
use crate::packet::{Batch, Fields, L3Kind, Packet, MAX_BATCH};

/// How much of the packet is decoded before deciding (the thesis' partial vs full decode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decode {
    /// Only the offsets and the fields the rule needs.
    Partial,
    /// Every field of every header up to L4, as a non-lazy parser would.
    Full,
}

pub struct Firewall {
    profile: Profile,
    /// One bit per port: membership is one load whatever the list's length.
    allowed: Box<[u64; 1024]>,
    learn: Ipv4Learning,
    decode: Decode,
    /// Folded into stats so the full decode's work cannot be optimised away.
    full_sum: u64,
    malformed: Malformed,
}

const NOT_IPV4: u8 = 0;
/// Headers cut short or inconsistent (too short for Ethernet, a bad IP header length).
const MALFORMED: u8 = 5;
const NOT_TCP_UDP: u8 = 1;
const FRAGMENT: u8 = 2;
const TRUNCATED: u8 = 3;
const PORT_DENIED: u8 = 4;
/// IP protocols 6 (TCP) and 17 (UDP), one bit each.
const TCP_UDP: u32 = 1 << 6 | 1 << 17;

impl Firewall {
    pub const PARAMS: &'static [ParamDoc] = &[
        ParamDoc {
            name: "allow_ports",
            ty: "list of ports",
            default: "[80, 443]",
            doc: "TCP/UDP packets pass when their source or destination port is listed",
        },
        ParamDoc {
            name: "decode",
            ty: "\"partial\" | \"full\"",
            default: "\"partial\"",
            doc: "decode only what the rule needs, or every header field first (for comparison)",
        },
        Ipv4Learning::PARAMS[0],
        Ipv4Learning::PARAMS[1],
        Malformed::DOC,
    ];

    pub fn new(ports: &[u16], capacity: usize, timeout_ns: u64) -> Firewall {
        let mut allowed = Box::new([0u64; 1024]);
        for &p in ports {
            allowed[p as usize >> 6] |= 1 << (p & 63);
        }
        Firewall {
            profile: Profile {
                reads: Fields::ETH_TYPE
                    | Fields::VLAN
                    | Fields::IP_SRC
                    | Fields::IP_DST
                    | Fields::IP_PROTO
                    | Fields::IP_FRAG
                    | Fields::L4_SRC
                    | Fields::L4_DST
                    | Fields::IN_PORT,
                writes: Fields::EGRESS,
                may_drop: true,
                changes_length: false,
                per_flow_state: true,
                outputs: &["out"],
                drop_reasons: &[
                    "not-ipv4",
                    "not-tcp-udp",
                    "fragment",
                    "truncated",
                    "port-denied",
                    "malformed",
                ],
            },
            allowed,
            learn: Ipv4Learning::new(capacity, timeout_ns),
            decode: Decode::Partial,
            full_sum: 0,
            malformed: Malformed::Drop,
        }
    }

    /// Sets what frames with an inconsistent IPv4 header get (see [`Malformed`]).
    pub fn with_malformed(mut self, m: Malformed) -> Firewall {
        self.malformed = m;
        self
    }

    pub fn with_decode(mut self, d: Decode) -> Firewall {
        self.decode = d;
        self
    }

    pub fn from_params(p: &mut Params) -> Result<Firewall, ParamError> {
        let ports = p.ports("allow_ports", &[80, 443])?;
        let decode = match p.table_str("decode")? {
            None | Some("partial") => Decode::Partial,
            Some("full") => Decode::Full,
            Some(o) => {
                return Err(p.err(format!("`decode` = \"{o}\": use \"partial\" or \"full\"")))
            }
        };
        let learn = Ipv4Learning::from_params(p)?;
        let malformed = Malformed::from_params(p)?;
        let mut f = Firewall::new(&ports, 1, 0)
            .with_decode(decode)
            .with_malformed(malformed);
        f.learn = learn;
        Ok(f)
    }

    /// A frame with an inconsistent IPv4 header: dropped as `malformed`, or under
    /// `malformed = "pass"` read where BPF reads it (offsets, protocol, later fragment;
    /// ports at `4 × IHL`). None when the packet was dropped.
    #[inline(never)]
    fn bpf_ipv4(&self, p: &mut Packet) -> Option<(usize, usize, u8, bool)> {
        let l = p.layers();
        let view = match self.malformed {
            Malformed::Pass => bpf_view(p.meta().link, &l, p.data()),
            Malformed::Drop => None,
        };
        match view {
            Some(BpfView::V4(o)) => {
                let d = p.data();
                let o4 = o + usize::from(d[o] & 0x0f) * 4;
                Some((o, o4, d[o + 9], be16(d, o + 6) & 0x1fff != 0))
            }
            Some(_) => {
                p.drop_with(NOT_IPV4);
                None
            }
            None => {
                p.drop_with(MALFORMED);
                None
            }
        }
    }

    #[inline]
    fn allows(&self, port: u16) -> bool {
        self.allowed[port as usize >> 6] & (1 << (port & 63)) != 0
    }
}

/// What a non-lazy parser does before any rule runs: validate every header up to L4 with
/// the checked views and extract each field. Returns a fold of the fields so the work
/// cannot be optimised away.
fn full_decode(d: &[u8]) -> u64 {
    let Ok(eth) = Ethernet::new_checked(d) else {
        return 0;
    };
    let Ok(l2) = eth.l2_info() else {
        return 0;
    };
    let mut acc = u64::from_be_bytes([0, 0, d[0], d[1], d[2], d[3], d[4], d[5]])
        ^ u64::from_be_bytes([0, 0, d[6], d[7], d[8], d[9], d[10], d[11]])
        ^ l2.ethertype as u64;
    let Some(ipb) = d.get(l2.l3_offset..) else {
        return acc;
    };
    let Ok(ip) = Ipv4::new_checked(ipb) else {
        return acc;
    };
    acc = acc
        .wrapping_add(
            ip.version() as u64 + ip.header_len() as u64 + ip.dscp() as u64 + ip.ecn() as u64,
        )
        .wrapping_add(ip.total_len() as u64 + ip.ident() as u64 + ip.flags() as u64)
        .wrapping_add(ip.frag_offset() as u64 + ip.ttl() as u64 + ip.protocol() as u64)
        .wrapping_add(ip.checksum() as u64 + ip.options().len() as u64)
        .wrapping_add(u32::from_be_bytes(ip.src()) as u64 + u32::from_be_bytes(ip.dst()) as u64);
    let l4 = &ipb[ip.header_len()..];
    match ip.protocol() {
        6 => {
            if let Ok(t) = Tcp::new_checked(l4) {
                acc = acc
                    .wrapping_add(
                        t.src_port() as u64 + t.dst_port() as u64 + t.seq() as u64 + t.ack() as u64,
                    )
                    .wrapping_add(t.header_len() as u64 + t.flags() as u64 + t.window() as u64)
                    .wrapping_add(
                        t.checksum() as u64 + t.urgent() as u64 + t.options().len() as u64,
                    );
            }
        }
        17 => {
            if let Ok(u) = Udp::new_checked(l4) {
                acc = acc.wrapping_add(
                    u.src_port() as u64
                        + u.dst_port() as u64
                        + u.len() as u64
                        + u.checksum() as u64,
                );
            }
        }
        _ => {}
    }
    acc
}

impl Firewall {
    /// One packet; `h`: its addresses' hashes when the batch prefetched them.
    #[inline(always)]
    fn one(&mut self, p: &mut Packet, h: (u64, u64)) {
        let l = p.layers();
        // IPv4 offsets, protocol and whether it is a later fragment.
        let (o3, o4, proto, later) = match l.l3 {
            L3Kind::Ipv4 => (
                l.l3_off as usize,
                l.l4_off as usize,
                l.l4_proto,
                l.is_later_fragment(),
            ),
            L3Kind::Malformed => match self.bpf_ipv4(p) {
                Some(v) => v,
                None => return,
            },
            _ => {
                p.drop_with(NOT_IPV4);
                return;
            }
        };
        if proto != 6 && proto != 17 {
            p.drop_with(NOT_TCP_UDP);
            return;
        }
        if later {
            p.drop_with(FRAGMENT);
            return;
        }
        let (m, d) = p.split_meta();
        // The ports are all the rule needs, as for BPF: a cut-short header past them is fine.
        if d.len() < o4 + 4 {
            p.drop_with(TRUNCATED);
            return;
        }
        if self.decode == Decode::Full && l.has_ethernet() && l.l3 == L3Kind::Ipv4 {
            self.full_sum = self.full_sum.wrapping_add(full_decode(d));
        }
        let sport = u16::from_be_bytes([d[o4], d[o4 + 1]]);
        let dport = u16::from_be_bytes([d[o4 + 2], d[o4 + 3]]);
        if !(self.allows(sport) || self.allows(dport)) {
            p.drop_with(PORT_DENIED);
            return;
        }
        // Read as BPF does (`malformed = "pass"`): not prefetched, hashed here.
        let h = if l.l3 == L3Kind::Ipv4 {
            h
        } else {
            self.learn.prefetch(d, o3)
        };
        self.learn.switch(m, be32(d, o3 + 12), be32(d, o3 + 16), h);
    }
}

impl Firewall {
    /// One chunk without a branch on the port rule's outcome, a coin toss on mixed
    /// traffic (bigflows: 52 % pass) that the first pass and the switch pass each
    /// mispredicted about half the time (cachegrind: 1.38 mispredicts a packet, against
    /// the IPv4 switch's 0.30). Each packet's outcome is computed (a reason or `PASS`) and
    /// its index written to both lists, the count of the one it belongs to advanced.
    /// Only passed packets touch the table, in their order, so the result is
    /// `in_order`'s.
    #[inline(always)]
    fn split_chunk(&mut self, chunk: &mut [Packet]) {
        const PASS: u8 = u8::MAX;
        let mut pass = [0u8; MAX_BATCH];
        let mut np = 0;
        let mut deny = [(0u8, 0u8); MAX_BATCH];
        let mut nd = 0;
        for (i, p) in chunk.iter_mut().enumerate() {
            let l = p.layers();
            let r = match l.l3 {
                L3Kind::Ipv4 => {
                    // TCP or UDP by one bit of a mask, not `!= 6 && != 17`: that branched
                    // on `== 6` and mispredicted on UDP (0.235 a packet on bigflows); the
                    // branch left is taken the same way for both.
                    let tcp_udp =
                        TCP_UDP.wrapping_shr(u32::from(l.l4_proto)) & 1 != 0 && l.l4_proto < 32;
                    let (d, o4) = (p.data(), l.l4_off as usize);
                    if !tcp_udp {
                        NOT_TCP_UDP
                    } else if l.is_later_fragment() {
                        FRAGMENT
                    } else if d.len() < o4 + 4 {
                        TRUNCATED
                    } else {
                        // `|`, not `||`, and a select: no branch on the outcome (an
                        // `if` here still mispredicted 0.33 times a packet).
                        let ok = self.allows(be16(d, o4)) | self.allows(be16(d, o4 + 2));
                        std::hint::select_unpredictable(ok, PASS, PORT_DENIED)
                    }
                }
                // Malformed::Drop (see `process`): as `bpf_ipv4` decides it.
                L3Kind::Malformed => MALFORMED,
                _ => NOT_IPV4,
            };
            let i = i as u8;
            pass[np] = i;
            np += usize::from(r == PASS);
            deny[nd] = (i, r);
            nd += usize::from(r != PASS);
        }
        let mut hs = [(0u64, 0u64); MAX_BATCH];
        for (&i, h) in pass[..np].iter().zip(hs.iter_mut()) {
            let p = &mut chunk[usize::from(i)];
            let o3 = p.layers().l3_off as usize;
            *h = self.learn.prefetch(p.data(), o3);
        }
        for (&i, &h) in pass[..np].iter().zip(hs.iter()) {
            let p = &mut chunk[usize::from(i)];
            let o3 = p.layers().l3_off as usize;
            let (m, d) = p.split_meta();
            self.learn.switch(m, be32(d, o3 + 12), be32(d, o3 + 16), h);
        }
        for &(i, r) in &deny[..nd] {
            chunk[usize::from(i)].drop_with(r);
        }
    }

    /// One chunk packet by packet: prefetch the learning table's slots of every TCP/UDP
    /// IPv4 packet the port rule passes, then decide each (the order of one at a time).
    #[inline(always)]
    fn in_order(&mut self, chunk: &mut [Packet]) {
        // Partial decodes only: the full one decodes in `one`.
        let quick = self.decode == Decode::Partial;
        let mut hs = [(0u64, 0u64); MAX_BATCH];
        // Packets the first pass found to pass every test of `one`.
        let mut passed = [false; MAX_BATCH];
        for ((p, h), ok) in chunk.iter_mut().zip(hs.iter_mut()).zip(passed.iter_mut()) {
            let l = p.layers();
            if l.l3 != L3Kind::Ipv4 || (l.l4_proto != 6 && l.l4_proto != 17) {
                continue;
            }
            // Only packets the port rule lets through learn and look up.
            let (d, o4) = (p.data(), l.l4_off as usize);
            if d.len() >= o4 + 4 && (self.allows(be16(d, o4)) || self.allows(be16(d, o4 + 2))) {
                *h = self.learn.prefetch(d, l.l3_off as usize);
                *ok = quick && !l.is_later_fragment();
            }
        }
        for ((p, &h), &ok) in chunk.iter_mut().zip(hs.iter()).zip(passed.iter()) {
            if ok {
                // The port rule's tests hold (the pass made them): switch at once.
                let o3 = p.layers().l3_off as usize;
                let (m, d) = p.split_meta();
                self.learn.switch(m, be32(d, o3 + 12), be32(d, o3 + 16), h);
            } else {
                self.one(p, h);
            }
        }
    }
}

impl Nf for Firewall {
    fn memory(&self) -> usize {
        self.learn.memory() + std::mem::size_of_val(&*self.allowed)
    }

    fn profile(&self) -> &Profile {
        &self.profile
    }

    fn state_scope(&self) -> StateScope {
        StateScope::Global("learns address -> port from every flow (as ipv4_switch)")
    }

    /// In chunks of a batch: decide every packet first, then prefetch the learning
    /// table's slots of the packets the port rule passes, then switch those in order.
    #[inline]
    fn process(&mut self, batch: &mut Batch, _cx: &Context) {
        // The split below needs decisions that never touch the table; a full decode and
        // frames read as BPF does go packet by packet.
        let split = self.decode == Decode::Partial && self.malformed == Malformed::Drop;
        for chunk in batch.as_mut_slice().chunks_mut(MAX_BATCH) {
            if split {
                self.split_chunk(chunk);
            } else {
                self.in_order(chunk);
            }
        }
    }
    /// `allow_ports P1 P2 …` replaces the port list (comma or space separated);
    /// `flush` forgets every learned address.
    fn control(&mut self, cmd: &str) -> Result<String, String> {
        let mut words = cmd.split([' ', ',']).filter(|w| !w.is_empty());
        match words.next() {
            Some("allow_ports") => {
                let ports = words
                    .map(|w| {
                        w.parse::<u16>()
                            .map_err(|_| format!("`{w}` is not a port (0..=65535)"))
                    })
                    .collect::<Result<Vec<u16>, String>>()?;
                self.allowed.fill(0);
                for &p in &ports {
                    self.allowed[p as usize >> 6] |= 1 << (p & 63);
                }
                Ok(format!("{} port(s) allowed", ports.len()))
            }
            Some("flush") => Ok(format!("forgot {} address(es)", self.learn.flush())),
            _ => Err(format!(
                "unknown command `{cmd}` (commands: allow_ports P…, flush)"
            )),
        }
    }

    fn stats(&self) -> Stats {
        let mut s = self.learn.stats();
        if self.decode == Decode::Full {
            s.push(("full_decode_checksum".into(), self.full_sum));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::super::ipv4_switch::tests::{step, v4};
    use super::*;
    use crate::packet::{Verdict, FLOOD};

    #[test]
    fn passes_listed_ports_either_way_and_drops_the_rest() {
        let mut fw = Firewall::new(&[80, 443], 16, 0);
        assert_eq!(
            step(&mut fw, v4(1, 2, 6, 5000, 80, 0)),
            (FLOOD, Verdict::Out(0))
        );
        assert_eq!(
            step(&mut fw, v4(2, 1, 6, 443, 5000, 1)),
            (0, Verdict::Out(0))
        );
        assert_eq!(step(&mut fw, v4(1, 2, 17, 80, 9, 2)).1, Verdict::Out(0));
        assert_eq!(
            step(&mut fw, v4(1, 2, 6, 22, 5000, 0)).1,
            Verdict::Drop(PORT_DENIED)
        );
        assert_eq!(
            step(&mut fw, v4(1, 2, 1, 80, 80, 0)).1,
            Verdict::Drop(NOT_TCP_UDP)
        );
    }

    #[test]
    fn drops_happen_before_learning() {
        let mut fw = Firewall::new(&[80], 16, 0);
        // 10.0.0.7 is seen only in denied packets, so it is never learned.
        step(&mut fw, v4(7, 2, 6, 22, 22, 3));
        assert_eq!(step(&mut fw, v4(1, 7, 6, 80, 80, 0)).0, FLOOD);
    }

    #[test]
    fn later_fragments_and_truncated_are_dropped() {
        let mut fw = Firewall::new(&[80], 16, 0);
        let mut p = v4(1, 2, 6, 80, 80, 0);
        p.data_mut()[14 + 7] = 1; // fragment offset 8 bytes
        assert_eq!(step(&mut fw, p).1, Verdict::Drop(FRAGMENT));
        let p = v4(1, 2, 6, 80, 80, 0);
        let short = crate::packet::Packet::from_bytes(&p.data()[..36]);
        assert_eq!(step(&mut fw, short).1, Verdict::Drop(TRUNCATED));
    }

    #[test]
    fn short_headers_are_malformed_not_silently_non_ip() {
        let mut fw = Firewall::new(&[80], 16, 0);
        let p = v4(1, 2, 6, 80, 80, 0);
        // Ethernet says IPv4 but only 10 bytes of the IP header were captured.
        let short = crate::packet::Packet::from_bytes(&p.data()[..24]);
        assert_eq!(step(&mut fw, short).1, Verdict::Drop(MALFORMED));
        let tiny = crate::packet::Packet::from_bytes(&[0u8; 8]);
        assert_eq!(step(&mut fw, tiny).1, Verdict::Drop(MALFORMED));
    }

    /// One chunk of mixed packets, each verdict literal: the chunk's first pass gives every
    /// packet the first test it fails, in the rule's order (not TCP/UDP, later fragment,
    /// ports cut short, port rule), whatever its neighbours' outcomes.
    #[test]
    fn a_mixed_chunk_gives_each_packet_its_own_reason() {
        let mut fw = Firewall::new(&[80, 443], 16, 0);
        let total = |mut p: Packet, t: u16| {
            p.data_mut()[16..18].copy_from_slice(&t.to_be_bytes());
            p
        };
        let later = |mut p: Packet| {
            p.data_mut()[14 + 7] = 1;
            p
        };
        let cut = |p: Packet, n: usize| Packet::from_bytes(&p.data()[..n]);
        let mut arp = vec![0u8; 42];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        let pass = Verdict::Out(0);
        let cases = vec![
            (v4(1, 2, 6, 5000, 80, 0), pass),
            (v4(1, 2, 6, 22, 5000, 0), Verdict::Drop(PORT_DENIED)),
            (v4(1, 2, 17, 443, 9, 1), pass),
            // ICMP with "ports" in the set; a later fragment of it: not TCP/UDP first.
            (v4(1, 2, 1, 80, 80, 0), Verdict::Drop(NOT_TCP_UDP)),
            (later(v4(1, 2, 1, 80, 80, 0)), Verdict::Drop(NOT_TCP_UDP)),
            (later(v4(1, 2, 6, 80, 80, 0)), Verdict::Drop(FRAGMENT)),
            (
                cut(later(v4(1, 2, 6, 80, 80, 0)), 36),
                Verdict::Drop(FRAGMENT),
            ),
            (cut(v4(1, 2, 1, 80, 80, 0), 36), Verdict::Drop(NOT_TCP_UDP)),
            // The ports one byte short, then whole (the rest of TCP cut, as for BPF).
            (cut(v4(1, 2, 6, 80, 80, 0), 37), Verdict::Drop(TRUNCATED)),
            (cut(v4(1, 2, 6, 5000, 80, 0), 38), pass),
            (
                cut(v4(1, 2, 6, 5000, 22, 0), 38),
                Verdict::Drop(PORT_DENIED),
            ),
            // Total length: the frame's (the fast case), shorter than the frame (the
            // ports read where they are, as BPF does), below the header, 0.
            (total(v4(1, 2, 6, 5000, 443, 0), 40), pass),
            (
                total(v4(1, 2, 6, 5000, 22, 0), 40),
                Verdict::Drop(PORT_DENIED),
            ),
            (total(v4(1, 2, 6, 5000, 80, 0), 24), pass),
            (
                total(v4(1, 2, 6, 5000, 80, 0), 19),
                Verdict::Drop(MALFORMED),
            ),
            (total(v4(1, 2, 17, 80, 5000, 0), 0), pass),
            (Packet::from_bytes(&arp), Verdict::Drop(NOT_IPV4)),
            (cut(v4(1, 2, 6, 80, 80, 0), 24), Verdict::Drop(MALFORMED)),
        ];
        let mut b = crate::packet::Batch::new();
        let mut want = Vec::new();
        for (p, v) in cases {
            b.push(p);
            want.push(v);
        }
        fw.process(&mut b, &Context { ports: 5 });
        let got: Vec<Verdict> = b.iter().map(|p| p.meta().verdict).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn full_decode_decides_the_same() {
        let mut a = Firewall::new(&[80, 443], 16, 0);
        let mut b = Firewall::new(&[80, 443], 16, 0).with_decode(Decode::Full);
        for (s, d, pr, sp, dp) in [(1, 2, 6, 80, 9), (2, 1, 17, 9, 9), (3, 1, 6, 443, 1)] {
            assert_eq!(
                step(&mut a, v4(s, d, pr, sp, dp, 1)),
                step(&mut b, v4(s, d, pr, sp, dp, 1))
            );
        }
        assert_ne!(b.stats().last().unwrap().1, 0);
    }
}
