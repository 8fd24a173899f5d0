//! Checks that an NF wrote only the header fields its profile declares. On in debug builds
//! (and when asked for); a violation is a bug in the NF and stops the run with its name.
//! FastPath and the parallel planner trust profiles, so a wrong one would silently change
//! output: this catches it where it happens.

use crate::packet::{Batch, Fields, L3Kind, Layers, LinkKind, Packet};

/// How many leading bytes are compared: all headers of interest fit.
const SPAN: usize = 192;

pub struct Snapshot {
    bytes: Vec<[u8; SPAN]>,
    lens: Vec<usize>,
    egress: Vec<u16>,
    in_port: Vec<u16>,
}

impl Snapshot {
    pub fn new(cap: usize) -> Snapshot {
        Snapshot {
            bytes: vec![[0; SPAN]; cap],
            lens: vec![0; cap],
            egress: vec![0; cap],
            in_port: vec![0; cap],
        }
    }

    pub fn take(&mut self, b: &Batch) {
        if self.bytes.len() < b.len() {
            *self = Snapshot::new(b.len());
        }
        for (i, p) in b.iter().enumerate() {
            let d = p.data();
            let n = d.len().min(SPAN);
            self.bytes[i][..n].copy_from_slice(&d[..n]);
            self.lens[i] = d.len();
            self.egress[i] = p.meta().egress;
            self.in_port[i] = p.meta().in_port;
        }
    }

    /// The fields written to packets of `b` since [`take`](Self::take) that `declared`
    /// does not cover, as names; empty when the NF kept to its profile. Only checked when
    /// the NF neither dropped nor reordered: a dropped packet's bytes do not matter.
    pub fn undeclared(
        &self,
        b: &Batch,
        declared: Fields,
        may_change_length: bool,
    ) -> Vec<&'static str> {
        let mut bad = Fields::NONE;
        for (i, p) in b.iter().enumerate() {
            let before = &self.bytes[i][..self.lens[i].min(SPAN)];
            let d = p.data();
            if d.len() != self.lens[i] {
                if !may_change_length {
                    return vec!["length"];
                }
                continue;
            }
            if p.meta().egress != self.egress[i] {
                bad = bad | Fields::EGRESS;
            }
            if p.meta().in_port != self.in_port[i] {
                bad = bad | Fields::IN_PORT;
            }
            let layers = Layers::parse(p.meta().link, before);
            for (o, (x, y)) in before.iter().zip(d).enumerate() {
                if x != y {
                    bad = bad | field_at(&layers, p, o);
                }
            }
        }
        Fields(bad.0 & !declared.0).names()
    }
}

/// The field that byte `o` of the packet belongs to. Checksums count as no field: they
/// follow from whatever else changed.
fn field_at(l: &Layers, p: &Packet, o: usize) -> Fields {
    let l3 = l.l3_off as usize;
    if l.has_ethernet() && p.meta().link == LinkKind::Ethernet && o < 14 {
        return match o {
            0..=5 => Fields::ETH_DST,
            6..=11 => Fields::ETH_SRC,
            _ => Fields::ETH_TYPE,
        };
    }
    if o < l3 {
        return if l3 >= 2 && o >= l3 - 2 {
            Fields::ETH_TYPE
        } else {
            Fields::VLAN
        };
    }
    let l4 = l.l4_off as usize;
    let in_l3 = o - l3;
    match l.l3 {
        L3Kind::Ipv4 if l4 == 0 || o < l4 => match in_l3 {
            1 => Fields::IP_DSCP,
            6 | 7 => Fields::IP_FRAG,
            8 => Fields::IP_TTL,
            9 => Fields::IP_PROTO,
            10 | 11 => Fields::NONE,
            12..=15 => Fields::IP_SRC,
            16..=19 => Fields::IP_DST,
            _ => Fields::IP_FRAG,
        },
        L3Kind::Ipv6 if l4 == 0 || o < l4 => match in_l3 {
            0 | 1 => Fields::IP_DSCP,
            6 => Fields::IP_PROTO,
            7 => Fields::IP_TTL,
            8..=23 => Fields::IP_SRC,
            24..=39 => Fields::IP_DST,
            _ => Fields::IP_FRAG,
        },
        L3Kind::Ipv4 | L3Kind::Ipv6 if l.has_l4() => {
            let in_l4 = o - l4;
            match (l.l4_proto, in_l4) {
                (6 | 17, 0 | 1) => Fields::L4_SRC,
                (6 | 17, 2 | 3) => Fields::L4_DST,
                (6, 4..=11) => Fields::TCP_SEQ,
                (6, 12 | 13) => Fields::TCP_FLAGS,
                (6, 16 | 17) | (17, 6 | 7) | (1 | 58, 2 | 3) => Fields::NONE,
                (6, 14..=19) | (17, 4 | 5) => Fields::PAYLOAD,
                (1 | 58, 0..=7) => Fields::ICMP,
                _ => Fields::PAYLOAD,
            }
        }
        _ => Fields::PAYLOAD,
    }
}
