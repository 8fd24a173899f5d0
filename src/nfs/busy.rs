//! A busy NF for experiments (the microNF figures): spends `cycles` TSC ticks per packet,
//! reading the fields it declares in `reads` and storing back the bytes of those it
//! declares in `writes` (the same value: the cache line is dirtied, the output is not
//! changed). Its profile is what it declares, so the planners treat it like a real NF.
//!
//! The ticks are paced over the batch: packet `i` of a batch ends `(i + 1) × cycles`
//! after the batch began, so a batch of `n` costs `n × cycles` (plus the last packet's
//! overshoot), a fixed amount per packet as the microNF figures mean. Each packet timed
//! from its own start instead added every spin's overshoot (a turn of `pause` and the
//! clock, ~80 ticks here), and that overshoot follows what the other vCPU does: 32 × 500
//! cost 18,900 ticks on the walk's thread beside a busy helper in the machine's fast state
//! and 22,000–24,000 in its slow one, against 16,300 paced (session 24).

use super::nf::{Context, Nf, Profile};
use super::params::{ParamDoc, ParamError, Params};
use crate::flow::tsc;
use crate::packet::{Batch, Fields, L3Kind, Layers};

pub struct Busy {
    profile: Profile,
    cycles: u64,
    reads: Vec<Fields>,
    writes: Vec<Fields>,
    /// Folded from the bytes read, so the reads are not optimised away.
    sum: u64,
}

/// The fields busy can locate, by profile name.
const FIELDS: &[(&str, Fields)] = &[
    ("eth.dst", Fields::ETH_DST),
    ("eth.src", Fields::ETH_SRC),
    ("ip.src", Fields::IP_SRC),
    ("ip.dst", Fields::IP_DST),
    ("ip.proto", Fields::IP_PROTO),
    ("ip.ttl", Fields::IP_TTL),
    ("l4.src", Fields::L4_SRC),
    ("l4.dst", Fields::L4_DST),
];

/// Where field `f` is in a packet with layers `l` and `len` bytes, if it has it.
#[inline]
fn locate(f: Fields, l: &Layers, len: usize) -> Option<std::ops::Range<usize>> {
    let o = l.l3_off as usize;
    let v6 = l.l3 == L3Kind::Ipv6;
    let ip = matches!(l.l3, L3Kind::Ipv4 | L3Kind::Ipv6);
    let r = match f {
        Fields::ETH_DST if l.has_ethernet() => 0..6,
        Fields::ETH_SRC if l.has_ethernet() => 6..12,
        Fields::IP_SRC if ip => {
            if v6 {
                o + 8..o + 24
            } else {
                o + 12..o + 16
            }
        }
        Fields::IP_DST if ip => {
            if v6 {
                o + 24..o + 40
            } else {
                o + 16..o + 20
            }
        }
        Fields::IP_PROTO if ip => (o + if v6 { 6 } else { 9 })..(o + if v6 { 7 } else { 10 }),
        Fields::IP_TTL if ip => (o + if v6 { 7 } else { 8 })..(o + if v6 { 8 } else { 9 }),
        Fields::L4_SRC if l.has_l4() => l.l4_off as usize..l.l4_off as usize + 2,
        Fields::L4_DST if l.has_l4() => l.l4_off as usize + 2..l.l4_off as usize + 4,
        _ => return None,
    };
    (r.end <= len).then_some(r)
}

impl Busy {
    pub const PARAMS: &'static [ParamDoc] = &[
        ParamDoc {
            name: "cycles",
            ty: "integer",
            default: "500",
            doc: "TSC ticks spent per packet (a spin bounded by the time-stamp counter), 0 to 1,000,000",
        },
        ParamDoc {
            name: "reads",
            ty: "list of fields",
            default: "[]",
            doc: "fields read per packet: eth.src, eth.dst, ip.src, ip.dst, ip.proto, ip.ttl, l4.src, l4.dst",
        },
        ParamDoc {
            name: "writes",
            ty: "list of fields",
            default: "[]",
            doc: "fields written per packet (their own value stored back: output unchanged), same names as reads",
        },
    ];

    pub fn new(cycles: u64, reads: &[Fields], writes: &[Fields]) -> Busy {
        let all = |v: &[Fields]| v.iter().fold(Fields::NONE, |a, &f| a | f);
        Busy {
            profile: Profile {
                reads: all(reads),
                writes: all(writes),
                may_drop: false,
                changes_length: false,
                per_flow_state: false,
                outputs: &["out"],
                drop_reasons: &[],
            },
            cycles,
            reads: reads.to_vec(),
            writes: writes.to_vec(),
            sum: 0,
        }
    }

    pub fn from_params(p: &mut Params) -> Result<Busy, ParamError> {
        let cycles = p.int("cycles", 500, 0, 1_000_000)? as u64;
        let mut lists = [Vec::new(), Vec::new()];
        for (k, key) in ["reads", "writes"].into_iter().enumerate() {
            for name in p.str_list(key)?.unwrap_or_default() {
                let Some(&(_, f)) = FIELDS.iter().find(|(n, _)| *n == name) else {
                    let known: Vec<&str> = FIELDS.iter().map(|(n, _)| *n).collect();
                    return Err(p.err(format!(
                        "`{key}`: unknown field `{name}` (busy knows {})",
                        known.join(", ")
                    )));
                };
                if !lists[k].contains(&f) {
                    lists[k].push(f);
                }
            }
        }
        Ok(Busy::new(cycles, &lists[0], &lists[1]))
    }
}

/// `sum` with the bytes of the fields `reads` folded in.
#[inline]
fn fold(mut sum: u64, reads: &[Fields], l: &Layers, d: &[u8]) -> u64 {
    for &f in reads {
        if let Some(r) = locate(f, l, d.len()) {
            for &b in &d[r] {
                sum = sum.rotate_left(5) ^ u64::from(b);
            }
        }
    }
    sum
}

impl Nf for Busy {
    fn profile(&self) -> &Profile {
        &self.profile
    }

    #[inline]
    fn process(&mut self, batch: &mut Batch, _: &Context) {
        let mut end = tsc();
        for p in batch {
            if self.writes.is_empty() {
                if !self.reads.is_empty() {
                    // Read only: no `&mut` to the bytes, so a view of a mapped trace
                    // stays a view (`data_mut` would copy the whole packet first).
                    let l = p.layers();
                    self.sum = fold(self.sum, &self.reads, &l, p.data());
                }
            } else {
                let l = p.layers();
                let d = p.data_mut();
                self.sum = fold(self.sum, &self.reads, &l, d);
                for &f in &self.writes {
                    if let Some(r) = locate(f, &l, d.len()) {
                        for i in r {
                            d[i] = std::hint::black_box(d[i]);
                        }
                    }
                }
            }
            end = end.wrapping_add(self.cycles);
            while (tsc().wrapping_sub(end) as i64) < 0 {
                std::hint::spin_loop();
            }
        }
        std::hint::black_box(self.sum);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{Packet, Verdict};

    fn params(t: &str) -> Result<Busy, ParamError> {
        let table: toml::Table = toml::from_str(t).unwrap();
        let mut p = Params::new("b", &table);
        let b = Busy::from_params(&mut p)?;
        p.finish(Busy::PARAMS)?;
        Ok(b)
    }

    /// Ethernet + IPv4 (TTL 64) + UDP 1234 -> 53.
    fn udp() -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[12] = 8;
        f[14] = 0x45;
        f[22] = 64;
        f[23] = 17;
        f[34..38].copy_from_slice(&[0x04, 0xd2, 0x00, 0x35]);
        f
    }

    #[test]
    fn profile_is_what_it_declares() {
        let b = params("cycles = 100\nreads = [\"ip.ttl\", \"l4.dst\"]\nwrites = [\"ip.ttl\"]")
            .unwrap();
        assert_eq!(b.profile().reads.to_string(), "ip.ttl,l4.dst");
        assert_eq!(b.profile().writes.to_string(), "ip.ttl");
        assert!(!b.profile().may_drop && !b.profile().changes_length);
        assert_eq!(b.cycles, 100);
        assert_eq!(params("").unwrap().cycles, 500);
        assert_eq!(params("").unwrap().profile().reads.to_string(), "-");
    }

    #[test]
    fn bad_parameters_are_refused_in_one_line() {
        let e = |t: &str| params(t).err().unwrap().to_string();
        assert_eq!(
            e("reads = [\"tcp.window\"]"),
            "nf `b`: `reads`: unknown field `tcp.window` (busy knows eth.dst, eth.src, ip.src, ip.dst, ip.proto, ip.ttl, l4.src, l4.dst)"
        );
        assert_eq!(
            e("cycles = -1"),
            "nf `b`: `cycles` = -1 is out of range 0..=1000000"
        );
        assert_eq!(
            e("cycle = 5"),
            "nf `b`: unknown parameter `cycle` (known: cycles, reads, writes)"
        );
    }

    #[test]
    fn spends_its_cycles_and_leaves_bytes_as_they_were() {
        let mut b = Busy::new(2000, &[Fields::IP_TTL, Fields::L4_DST], &[Fields::IP_TTL]);
        let mut batch = Batch::new();
        for _ in 0..4 {
            batch.push(Packet::from_bytes(&udp()));
        }
        let t0 = tsc();
        b.process(&mut batch, &Context { ports: 1 });
        let spent = tsc() - t0;
        assert!(spent >= 4 * 2000, "4 packets of 2000 ticks took {spent}");
        for p in batch.iter() {
            assert_eq!(p.data(), &udp()[..]);
            assert_eq!(p.meta().verdict, Verdict::Out(0));
        }
        // The fields are where the bytes say: TTL 64, destination port 53.
        let mut p = Packet::from_bytes(&udp());
        let l = p.layers();
        assert_eq!(locate(Fields::IP_TTL, &l, 60), Some(22..23));
        assert_eq!(locate(Fields::L4_DST, &l, 60), Some(36..38));
        assert_eq!(locate(Fields::ETH_SRC, &l, 60), Some(6..12));
        assert_eq!(locate(Fields::L4_DST, &l, 37), None);
    }

    #[test]
    fn a_batch_costs_its_packets_times_the_cycles_not_a_spin_overshoot_each() {
        // 64 × 1,000 ticks: paced, a batch ends one spin turn after 64,000. Timing each
        // packet from its own start added a turn of `pause` and the clock per packet
        // (40–80 ticks here, 2,500 or more a batch). The least of 30 tries, so that a
        // loaded machine's preemptions do not count.
        let mut b = Busy::new(1000, &[Fields::IP_TTL], &[]);
        let mut batch = Batch::with_capacity(64);
        for _ in 0..64 {
            batch.push(Packet::from_bytes(&udp()));
        }
        let cx = Context { ports: 1 };
        let least = (0..30)
            .map(|_| {
                let t0 = tsc();
                b.process(&mut batch, &cx);
                tsc() - t0
            })
            .min()
            .unwrap();
        assert!(
            (64_000..65_000).contains(&least),
            "64 packets of 1,000 ticks took {least} at the least"
        );
    }
}
