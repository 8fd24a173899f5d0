//! A run of consecutive `ip_filter`s classified once per packet (issue 20).
//!
//! Three filters one after the other each pack their own key from the packet's bytes and
//! look up their own verdict cache. Fused, the run's first filter (the *lead*) packs one
//! key under the union of the filters' key masks, looks up one cache entry, and on a miss
//! decodes the packet's [`Key`] once and classifies it with every filter's classifier in
//! turn, stopping at the first that drops it, exactly as the packet would travel. The
//! entry holds every filter's verdict; the lead writes them into the packet's
//! `filter_verdicts`, and each later filter (a *follower*) reads its own there, counts
//! its hit and drops or passes the packet. The runtime still walks every filter as its
//! own node, so every NF's counters (in, out, drops by reason, per-rule hits) are those
//! of the filters run one after the other.
//!
//! Why it is exact: each filter's verdict is a function of its own masked key, which the
//! union-masked key determines, and of its rules. A follower whose rules change (a
//! command) stops reading verdicts and decides alone; a lead whose rules change stops
//! writing them. A packet without a verdict for a follower (none written, or written by
//! another run: the run's id is checked) is classified by the follower itself, so a
//! verdict is never taken from stale rules.
//!
//! Verdicts are packed into the cache's 32-bit value, one field per filter holding its
//! hit counter index + 1 (the last value: dropped as malformed; 0: not reached). A run is
//! cut where the fields would not fit (about 1,000 rules per filter fit three).

use std::sync::atomic::{AtomicU32, Ordering};

use super::*;

/// Ids of fused runs, so a follower never reads another run's verdicts.
static NEXT_RUN: AtomicU32 = AtomicU32::new(1);

/// What the lead holds of each follower.
pub(super) struct Member {
    classifier: Classifier,
    /// Rules of the follower: hit index `rules` is its default.
    rules: usize,
    /// Per hit index: whether it drops the packet.
    deny: Vec<bool>,
    malformed: Malformed,
    shift: u32,
}

/// The lead's side of a fused run.
pub(super) struct Lead {
    /// The run's id, in the high half of `filter_verdicts`.
    tag: u64,
    /// The lead's own field (the low bits).
    own: u32,
    members: Vec<Member>,
}

impl Lead {
    pub(super) fn memory(&self) -> usize {
        self.members.iter().map(|m| m.classifier.memory()).sum()
    }
}

/// A follower's field in `filter_verdicts`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Follow {
    tag: u32,
    shift: u32,
    mask: u32,
}

/// Bits of a field for a filter of `rules` rules: values 1 to `rules + 2`.
fn width(rules: usize) -> u32 {
    usize::BITS - (rules + 2).leading_zeros()
}

/// The hit index (or `rules + 1` for a malformed drop) of a packet whose key is `key`
/// (None: malformed, then `bpf` is BPF's reading of it, if asked for).
#[inline]
fn decide(
    c: &Classifier,
    rules: usize,
    malformed: Malformed,
    key: Option<&Key>,
    bpf: Option<&Key>,
) -> usize {
    let k = match key {
        Some(k) => k,
        None if malformed == Malformed::Pass => match bpf {
            Some(k) => k,
            None => return rules + 1,
        },
        None => return rules + 1,
    };
    c.classify(k).map_or(rules, |i| i as usize)
}

impl IpFilter {
    /// Fuses `run` (consecutive filters: each one's only output goes to the next, which
    /// has no other input) from its start; returns how many were fused (1: none, the
    /// second's field would not fit, or a filter is fused already).
    pub fn fuse(run: &mut [&mut IpFilter]) -> usize {
        let Some((lead, rest)) = run.split_first_mut() else {
            return 0;
        };
        if lead.lead.is_some() || lead.follow.is_some() {
            return 1;
        }
        let own = width(lead.rules.len());
        let mut used = own;
        let mut n = 0;
        for f in rest.iter() {
            let w = width(f.rules.len());
            if used + w > 32 || f.lead.is_some() || f.follow.is_some() {
                break;
            }
            used += w;
            n += 1;
        }
        if n == 0 {
            return 1;
        }
        let tag = NEXT_RUN.fetch_add(1, Ordering::Relaxed);
        let mut shift = own;
        let mut mask = lead.mask;
        let mut members = Vec::with_capacity(n);
        for f in rest[..n].iter_mut() {
            let w = width(f.rules.len());
            let m = f.mask;
            mask.a |= m.a;
            mask.b |= m.b;
            mask.sport |= m.sport;
            mask.icmp |= m.icmp;
            mask.v6 |= m.v6;
            members.push(Member {
                classifier: std::mem::replace(&mut f.classifier, Classifier::new(&[])),
                rules: f.rules.len(),
                deny: f.actions.iter().map(|&a| a == Action::Deny).collect(),
                malformed: f.malformed,
                shift,
            });
            f.lent = true;
            f.follow = Some(Follow {
                tag,
                shift,
                mask: (1 << w) - 1,
            });
            shift += w;
        }
        lead.mask = mask;
        lead.cache.clear();
        lead.lead = Some(Box::new(Lead {
            tag: u64::from(tag) << 32,
            own: (1 << own) - 1,
            members,
        }));
        n + 1
    }

    /// Filters fused behind this one (0 when it is no run's first).
    pub fn fused_behind(&self) -> usize {
        self.lead.as_ref().map_or(0, |l| l.members.len())
    }

    /// Every filter's field of the run for packet `p`: the key decoded once, each
    /// classifier in turn until one drops the packet.
    #[inline(never)]
    fn decide_run(&self, p: &mut Packet) -> u32 {
        let Some(lead) = self.lead.as_deref() else {
            return 0;
        };
        let key = packet_key(p);
        let pass = self.malformed == Malformed::Pass
            || lead.members.iter().any(|m| m.malformed == Malformed::Pass);
        let bpf = if key.is_none() && pass {
            bpf_key(p)
        } else {
            None
        };
        let n = self.rules.len();
        let own = decide(
            &self.classifier,
            n,
            self.malformed,
            key.as_ref(),
            bpf.as_ref(),
        );
        let mut v = own as u32 + 1;
        if own > n || self.actions.get(own) == Some(&Action::Deny) {
            return v;
        }
        for m in &lead.members {
            let h = decide(
                &m.classifier,
                m.rules,
                m.malformed,
                key.as_ref(),
                bpf.as_ref(),
            );
            v |= (h as u32 + 1) << m.shift;
            if h > m.rules || m.deny.get(h) == Some(&true) {
                break;
            }
        }
        v
    }

    /// The lead's batch: one key and one cache lookup per packet for the whole run.
    #[inline]
    pub(super) fn process_lead(&mut self, batch: &mut Batch) {
        let (tag, own) = match self.lead.as_deref() {
            Some(l) => (l.tag, l.own),
            None => return,
        };
        let malformed = self.rules.len() + 1;
        self.cache.grow();
        for chunk in batch.as_mut_slice().chunks_mut(MAX_BATCH) {
            // Uninitialised, as in the unfused `process` (which says why).
            let mut keys = [MaybeUninit::<(u64, u64)>::uninit(); MAX_BATCH];
            let mut at = [MaybeUninit::<usize>::uninit(); MAX_BATCH];
            for ((p, k), i) in chunk.iter_mut().zip(&mut keys).zip(&mut at) {
                let w = *k.write(key_words(packed(&self.mask, p)));
                if w.1 != 0 {
                    self.cache.prefetch(*i.write(self.cache.bucket(w)));
                }
            }
            for ((p, k), i) in chunk.iter_mut().zip(&keys).zip(&at) {
                // SAFETY: pass 1 wrote the key of every packet of the chunk.
                let k = unsafe { k.assume_init_read() };
                // `b == 0`: uncached or malformed (`key_words`).
                let v = if k.1 != 0 {
                    // SAFETY: pass 1 wrote `i` for every key with `b != 0`.
                    let i = unsafe { i.assume_init_read() };
                    // SAFETY: `i` is `bucket` of this key, taken after this batch's
                    // `grow` (nothing else resizes the buckets), so in bounds.
                    match unsafe { self.cache.get_in(i, k) } {
                        Some(v) => v,
                        None => {
                            let v = self.decide_run(p);
                            self.cache.put_at(i, k, v);
                            v
                        }
                    }
                } else {
                    self.decide_run(p)
                };
                p.meta_mut().filter_verdicts = tag | u64::from(v);
                let hit = (v & own) as usize - 1;
                if hit >= malformed {
                    p.drop_with(MALFORMED);
                    continue;
                }
                self.count(p, hit);
            }
        }
    }

    /// A follower's batch: each packet's verdict as the lead decided it.
    #[inline]
    pub(super) fn process_follow(&mut self, batch: &mut Batch, f: Follow) {
        let malformed = self.rules.len() + 1;
        let pkts = batch.as_mut_slice();
        // The common case first, in a loop of its own: a verdict of this run and FastPath
        // not asking. The counters and actions are cut to the hit indices once, so the
        // loop checks no bounds; the first packet that is not this case ends it and the
        // general loop below takes the rest.
        let mut i = 0;
        if let (Some(hits), Some(actions)) = (
            self.hits.get_mut(..malformed),
            self.actions.get(..malformed),
        ) {
            while let Some(p) = pkts.get_mut(i) {
                let m = p.meta();
                let s = m.filter_verdicts;
                let field = (s as u32 >> f.shift) & f.mask;
                if (s >> 32) as u32 != f.tag || field == 0 || matches!(m.fast, FastMark::Want) {
                    break;
                }
                let hit = field as usize - 1;
                if hit < malformed {
                    hits[hit] += 1;
                    if actions[hit] == Action::Deny {
                        p.drop_with(DENIED);
                    }
                } else {
                    p.drop_with(MALFORMED);
                }
                i += 1;
            }
        }
        for p in &mut pkts[i..] {
            let s = p.meta().filter_verdicts;
            let field = if (s >> 32) as u32 == f.tag {
                (s as u32 >> f.shift) & f.mask
            } else {
                0
            };
            let hit = match field.checked_sub(1) {
                Some(h) => h as usize,
                None => self.decide_alone(p),
            };
            if hit >= malformed {
                p.drop_with(MALFORMED);
                continue;
            }
            self.count(p, hit);
        }
    }

    /// A follower's verdict for a packet the lead decided nothing for (rules changed
    /// ahead of it in the run): its own classifier, rebuilt if it was lent.
    #[inline(never)]
    fn decide_alone(&mut self, p: &mut Packet) -> usize {
        if self.lent {
            self.classifier = Classifier::new(&self.rules);
            self.lent = false;
        }
        match packet_key(p) {
            Some(k) => self
                .classifier
                .classify(&k)
                .map_or(self.rules.len(), |i| i as usize),
            None => self.classify_malformed(p).unwrap_or(self.rules.len() + 1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::Trace;
    use crate::packet::Verdict;

    /// The bench's three filters (`cli/bench/e2e.rs`, `F1`..`F3`).
    const BENCH: [(&[&str], Action); 3] = [
        (
            &[
                "deny src net 10.0.250.0/24",
                "deny src net 10.0.251.0/24",
                "deny src host 10.0.1.1",
                "deny src host 10.0.2.2",
                "deny dst net 203.0.113.0/24",
                "deny dst net 198.51.100.0/24",
                "deny dst host 93.184.216.34",
                "deny dst host 142.250.0.1",
                "deny ip frag",
            ],
            Action::Allow,
        ),
        (
            &[
                "deny tcp dst port 23",
                "deny tcp dst port 445",
                "deny tcp dst port 135",
                "deny udp dst port 1900",
                "deny udp dst port 137",
                "deny icmp type 5",
            ],
            Action::Allow,
        ),
        (
            &[
                "deny src net 10.0.252.0/24",
                "deny tcp dst port 22",
                "deny udp dst port 123",
                "deny ip frag",
                "allow tcp dst port 80",
                "allow tcp dst port 443",
            ],
            Action::Deny,
        ),
    ];

    /// IPv6 addresses (classified uncached), TCP flags, ICMP types, malformed frames
    /// passed to the rules, and a filter that drops most of what reaches it.
    const MIXED: [(&[&str], Action); 4] = [
        (
            &[
                "deny src net 2001:db8::/32",
                "deny tcp flags syn,!ack and dst port 22",
                "allow udp src port 53",
                "deny icmp6 type 135",
            ],
            Action::Allow,
        ),
        (
            &[
                "deny ip frag",
                "deny udp dst portrange 6000-7000",
                "allow ip",
            ],
            Action::Allow,
        ),
        (
            &["allow tcp", "allow udp", "deny icmp type 8", "allow icmp"],
            Action::Deny,
        ),
        (&["deny src host 192.168.1.1", "allow all"], Action::Deny),
    ];

    fn filters(set: &[(&[&str], Action)], pass: bool) -> Vec<IpFilter> {
        set.iter()
            .enumerate()
            .map(|(i, (rules, default))| {
                let f = IpFilter::new(parse_rules(rules.iter().copied()).unwrap(), *default);
                // Every other filter passes malformed frames to its rules.
                let m = if pass && i % 2 == 0 {
                    Malformed::Pass
                } else {
                    Malformed::Drop
                };
                f.with_malformed(m)
            })
            .collect()
    }

    /// What happened to each packet (the filter and reason that dropped it, or None),
    /// and per filter: packets in, out, dropped as denied and as malformed.
    type Outcome = (Vec<Option<(usize, u8)>>, Vec<[u64; 4]>);

    /// Runs the trace through `fs` in batches as the walk does; `commands` are
    /// (before packet, filter, command).
    fn run(fs: &mut [IpFilter], t: &Trace, commands: &[(usize, usize, &str)]) -> Outcome {
        let cx = Context::default();
        let mut fate = vec![None; t.len()];
        let mut counts = vec![[0u64; 4]; fs.len()];
        let mut start = 0;
        while start < t.len() {
            let end = (start + MAX_BATCH).min(t.len());
            for &(at, f, cmd) in commands {
                if (start..end).contains(&at) {
                    fs[f].control(cmd).unwrap();
                }
            }
            let mut batch = Batch::new();
            for i in start..end {
                let mut p = Packet::from_bytes(t.packet(i));
                p.meta_mut().link = t.link();
                p.meta_mut().seq = i as u64;
                batch.push(p);
            }
            for (k, f) in fs.iter_mut().enumerate() {
                counts[k][0] += batch.len() as u64;
                f.process(&mut batch, &cx);
                let mut kept = Batch::new();
                for p in batch.drain() {
                    match p.meta().verdict {
                        Verdict::Out(_) => {
                            counts[k][1] += 1;
                            kept.push(p);
                        }
                        Verdict::Drop(r) => {
                            counts[k][2 + r as usize] += 1;
                            fate[p.meta().seq as usize] = Some((k, r));
                        }
                    }
                }
                batch = kept;
            }
            start = end;
        }
        (fate, counts)
    }

    fn trace(name: &str) -> Option<Trace> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../shared/datasets")
            .join(name);
        match Trace::open(&path) {
            Ok(t) => Some(t),
            Err(e) => {
                eprintln!("skipped {}: {e}", path.display());
                None
            }
        }
    }

    /// Fused and one after the other: the same packet dropped by the same filter for
    /// the same reason, the same counters, the same per-rule hits.
    fn check(set: &[(&[&str], Action)], pass: bool, commands: &[(usize, usize, &str)]) {
        let names = [
            "bench/ndpi-ether-merged.pcap",
            "ndpi/pcap/KakaoTalk_talk.pcap",
            "ndpi/pcap/6in4tunnel.pcap",
            "retina/quic.pcap",
        ];
        let mut seen = 0;
        let mut dropped = vec![0u64; set.len()];
        for name in names {
            let Some(t) = trace(name) else { continue };
            seen += 1;
            let mut alone = filters(set, pass);
            let want = run(&mut alone, &t, commands);
            let mut fused = filters(set, pass);
            let mut refs: Vec<&mut IpFilter> = fused.iter_mut().collect();
            assert_eq!(IpFilter::fuse(&mut refs), set.len(), "{name}");
            assert_eq!(fused[0].fused_behind(), set.len() - 1);
            let got = run(&mut fused, &t, commands);
            assert_eq!(got.1, want.1, "{name}: counters per filter");
            let first = (0..t.len()).find(|&i| got.0[i] != want.0[i]);
            assert_eq!(first, None, "{name}: first packet treated differently");
            for (k, (a, b)) in alone.iter().zip(&fused).enumerate() {
                assert_eq!(a.hits(), b.hits(), "{name}: hits of filter {k}");
            }
            for (d, c) in dropped.iter_mut().zip(&want.1) {
                *d += c[2] + c[3];
            }
        }
        assert!(seen > 0, "no dataset found under ../shared/datasets");
        // Not vacuous: every filter drops some packets.
        assert!(
            dropped.iter().all(|&d| d > 0),
            "drops per filter: {dropped:?}"
        );
    }

    #[test]
    fn the_bench_filters_fused_decide_and_count_as_one_after_the_other() {
        check(&BENCH, false, &[]);
    }

    #[test]
    fn ipv6_flags_and_malformed_frames_fused_decide_as_one_after_the_other() {
        check(&MIXED, true, &[]);
    }

    #[test]
    fn rule_changes_mid_run_unfuse_without_changing_a_verdict() {
        // A follower changes (the one after it then gets packets the lead decided
        // nothing for), then the lead.
        check(
            &BENCH,
            false,
            &[
                (200, 1, "rules deny udp; allow all"),
                (400, 0, "rules deny tcp dst port 443"),
                (600, 2, "rules allow all"),
            ],
        );
    }

    #[test]
    fn a_run_is_cut_where_the_verdicts_would_not_fit() {
        let big: Vec<String> = (0..1000)
            .map(|i| format!("deny host 10.9.{}.{}", i / 200, i % 200))
            .collect();
        let mut fs: Vec<IpFilter> = (0..4)
            .map(|_| {
                IpFilter::new(
                    parse_rules(big.iter().map(|s| s.as_str())).unwrap(),
                    Action::Allow,
                )
            })
            .collect();
        let mut refs: Vec<&mut IpFilter> = fs.iter_mut().collect();
        // 1,000 rules take 10 bits: three fit in 32.
        assert_eq!(IpFilter::fuse(&mut refs), 3);
        assert_eq!(
            IpFilter::fuse(&mut refs[3..]),
            1,
            "one filter alone is no run"
        );
        let mut refs: Vec<&mut IpFilter> = fs.iter_mut().collect();
        assert_eq!(
            IpFilter::fuse(&mut refs),
            1,
            "fused filters do not fuse again"
        );
    }
}
