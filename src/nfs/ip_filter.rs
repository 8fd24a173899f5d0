//! IP filter (ACL): ordered allow/deny rules in tcpdump-like syntax, first match wins,
//! then a default action. Denied packets are dropped as `denied`.
//!
//! Syntax and semantics are in [`super::acl::rule`]; classification (bit vectors, no
//! per-packet rule scan) in [`super::acl::classify`]. Matching equals BPF's for what BPF
//! expresses (tested against tcpdump), with these choices:
//! - `ip`/`ip6` are the ethertypes; like BPF, IPv6's protocol is the fixed header's next
//!   header, or the fragment header's when that comes first; other extension headers are
//!   not walked, and ports, ICMPv6 type and TCP flags are read only when the transport
//!   header directly follows the IPv6 header. IPv4 later fragments have no ports, type
//!   or flags, so `port 80` never matches them and `not port 80` always does.
//! - `host`/`net` test IP addresses only (tcpdump's bare `host` also tests ARP).
//! - 802.1Q/802.1ad tags are looked through, as the firewall does.
//! - Frames too short for their L2/IP header are dropped as `malformed` whatever the rules;
//!   so, by default, are frames whose IP header has a bad version or header length
//!   (`malformed = "pass"` classifies those as BPF reads them: [`super::malformed`]).
//! - `ip frag` / `ip unfrag` (Click's) and tcpdump's `ip[6:2] & 0x1fff != 0` (later
//!   fragment) and `ip[6:2] & 0x3fff != 0` (any fragment), or `= 0`, test IPv4
//!   fragmentation; FastPath's key holds the fragment layout, so they consolidate.
//!   A transport header cut short by the snap length has no ports/type/flags (BPF would
//!   reject the whole packet as soon as a rule reads past the end). An IPv6 packet whose
//!   first header is a fragment header has the fragment's next header as protocol, so
//!   `proto 44` does not match it (BPF matches both).
//! - Live changes: [`IpFilter::set_rules`] / [`IpFilter::set_classifier`] swap the whole
//!   rule set between batches; hit counters restart.
//!
//! A per-flow verdict cache ([`super::acl::cache`], 8Ki 3-way buckets of packed keys)
//! sits in front of the classifier; a rule change clears it. It changes no verdict and no
//! counter, only how often the bitmaps are ANDed. Per batch, every packet's key is packed
//! straight from its bytes and its bucket prefetched, then the buckets are read.
//!
//! Consecutive filters of a chain are fused when the run starts ([`fused`]): the first
//! decides every filter's verdict for a packet with one key and one cache lookup, the
//! others read theirs from the packet; verdicts and counters are those of the filters
//! run one after the other.

use super::acl::cache::{
    KeyMask, DPORT_SHIFT, FLAGS_SHIFT, FRAG_SHIFT, MARK, PROTO_SHIFT, P_DPORT, P_DST4, P_FLAGS,
    P_FRAG, P_ICMP, P_SPORT, P_SRC4, X_SHIFT,
};
use super::acl::rule::{Field, FRAG_FIRST, FRAG_LATER, FRAG_NONE, NOT_IP};
use super::acl::{parse_rules, Action, Classifier, Key, Rule, VerdictCache};
use super::malformed::{bpf_view, BpfView, Malformed};
use super::nf::Stats;
use super::nf::{Consolidate, Context, FastPacket, Nf, Profile};
use super::params::{ParamDoc, ParamError, Params};
use crate::packet::bytes::{be16, be32};
use crate::packet::{Batch, FastMark, Fields, L3Kind, Layers, LinkKind, Packet, MAX_BATCH};
use std::mem::MaybeUninit;

#[path = "ip_filter_fused.rs"]
mod fused;

const DENIED: u8 = 0;
const MALFORMED: u8 = 1;

pub struct IpFilter {
    profile: Profile,
    rules: Vec<Rule>,
    /// Action per hit counter (rule index, then the default), beside the classifier so
    /// the hot path touches no `Rule`.
    actions: Vec<Action>,
    classifier: Classifier,
    default: Action,
    /// Hits per rule, then one for the default action.
    hits: Vec<u64>,
    /// Some rule tests TCP flags, which vary within a flow (FastPath refuses TCP then).
    reads_flags: bool,
    /// The cache's key bits the rules read.
    mask: KeyMask,
    /// Hit counter index per packed key.
    cache: VerdictCache,
    /// What frames with an inconsistent IP header get.
    malformed: Malformed,
    /// First of a fused run: the filters after it, whose verdicts it decides.
    lead: Option<Box<fused::Lead>>,
    /// Later in a fused run: where its verdict is in a packet's `filter_verdicts`.
    follow: Option<fused::Follow>,
    /// The classifier went to the first of the run (rebuilt if a packet comes without
    /// a verdict).
    lent: bool,
}

impl IpFilter {
    pub const PARAMS: &'static [ParamDoc] = &[
        ParamDoc {
            name: "rules",
            ty: "list of strings",
            default: "[]",
            doc: "rules in order, e.g. [\"allow tcp dst port 80 or 443\", \"deny src net 10.0.0.0/8\"]; primitives: ip, ip6, tcp, udp, sctp, icmp, icmp6, [ip|ip6] proto N|NAME (`\\udp` too), [src|dst] host|net|port|portrange, icmp[6] type T, tcp flags F, ip frag|unfrag, ip[6:2] & 0x1fff|0x3fff !=|= 0; and/not/or between values of one field",
        },
        ParamDoc {
            name: "rules_file",
            ty: "path",
            default: "-",
            doc: "a file of rules, one per line, `#` comments (path relative to the chain file's folder); follows `rules`; at most 100,000 rules in all",
        },
        ParamDoc {
            name: "default",
            ty: "\"deny\" | \"allow\"",
            default: "\"deny\"",
            doc: "action when no rule matches",
        },
        Malformed::DOC,
    ];

    pub fn new(rules: Vec<Rule>, default: Action) -> IpFilter {
        let mut f = IpFilter {
            profile: Profile {
                reads: Fields::ETH_TYPE
                    | Fields::VLAN
                    | Fields::IP_SRC
                    | Fields::IP_DST
                    | Fields::IP_PROTO
                    | Fields::IP_FRAG
                    | Fields::L4_SRC
                    | Fields::L4_DST
                    | Fields::TCP_FLAGS
                    | Fields::ICMP,
                writes: Fields::NONE,
                may_drop: true,
                changes_length: false,
                per_flow_state: false,
                outputs: &["out"],
                drop_reasons: &["denied", "malformed"],
            },
            rules: Vec::new(),
            actions: Vec::new(),
            mask: KeyMask::new(&Classifier::new(&[])),
            classifier: Classifier::new(&[]),
            default,
            hits: vec![0],
            reads_flags: false,
            cache: VerdictCache::new(crate::nfs::acl::cache::DEFAULT_BUCKETS),
            malformed: Malformed::Drop,
            lead: None,
            follow: None,
            lent: false,
        };
        f.set_rules(rules);
        f
    }

    /// Replaces the rules at once (between batches). Hit counters restart.
    pub fn set_rules(&mut self, rules: Vec<Rule>) {
        let c = Classifier::new(&rules);
        self.set_classifier(rules, c);
    }

    /// Swaps in a classifier built elsewhere (e.g. by a control plane thread) for `rules`.
    pub fn set_classifier(&mut self, rules: Vec<Rule>, classifier: Classifier) {
        self.rules = rules;
        self.classifier = classifier;
        self.installed();
    }

    /// Derives what the hot path reads from the rules and classifier just installed.
    fn installed(&mut self) {
        self.actions = self.rules.iter().map(|r| r.action).collect();
        self.actions.push(self.default);
        self.hits = vec![0; self.rules.len() + 1];
        self.reads_flags = self.classifier.constrains(Field::Flags);
        self.mask = KeyMask::new(&self.classifier);
        self.cache.clear();
        // New rules: the filter decides alone again (the run's first, if it was one,
        // stops deciding for the others, which then decide alone too).
        self.lead = None;
        self.follow = None;
        self.lent = false;
    }

    /// Sets what frames with an inconsistent IP header get (see [`Malformed`]).
    pub fn with_malformed(mut self, m: Malformed) -> IpFilter {
        self.malformed = m;
        self
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    pub fn from_params(p: &mut Params) -> Result<IpFilter, ParamError> {
        let default = match p.table_str("default")? {
            None | Some("deny") => Action::Deny,
            Some("allow") => Action::Allow,
            Some(o) => return Err(p.err(format!("`default` = \"{o}\": use \"deny\" or \"allow\""))),
        };
        let mut rules = Vec::new();
        if let Some(lines) = p.str_list("rules")? {
            rules =
                parse_rules(lines).map_err(|(_, item, e)| p.err(format!("rule {item}: {e}")))?;
        }
        if let Some(file) = p.path("rules_file")? {
            let path = file.display();
            let text = crate::io::text_file::read_text(&file, crate::io::text_file::MAX_TEXT_FILE)
                .map_err(|e| p.err(format!("rules_file `{path}`: {e}")))?;
            let base = rules.len();
            let more = parse_rules(text.lines()).map_err(|(n, line, e)| {
                p.err(format!("rule {} (line {line} of {path}): {e}", base + n))
            })?;
            rules.extend(more);
        }
        if rules.len() > super::acl::MAX_RULES {
            return Err(p.err(format!(
                "{} rules is more than the {} one filter may hold",
                rules.len(),
                super::acl::MAX_RULES
            )));
        }
        let malformed = Malformed::from_params(p)?;
        Ok(IpFilter::new(rules, default).with_malformed(malformed))
    }

    /// Hits of each rule so far, then the default action's.
    pub fn hits(&self) -> &[u64] {
        &self.hits
    }
}

impl IpFilter {
    /// The hit counter index of a well-formed packet: its first matching rule, or the
    /// default's (one past the rules). Out of line: only cache misses get here.
    #[inline(never)]
    fn classify(&self, p: &mut Packet) -> usize {
        let found = packet_key(p).and_then(|k| self.classifier.classify(&k));
        found.map_or(self.rules.len(), |i| i as usize)
    }

    /// The hit counter index of a frame with an inconsistent IP header under
    /// `malformed = "pass"`, or None to drop it as `malformed`.
    #[inline(never)]
    fn classify_malformed(&self, p: &mut Packet) -> Option<usize> {
        if self.malformed != Malformed::Pass {
            return None;
        }
        let k = bpf_key(p)?;
        let found = self.classifier.classify(&k);
        Some(found.map_or(self.rules.len(), |i| i as usize))
    }

    /// Hit counter `hit` with its action in bit [`DENY`]: what the unfused filter caches,
    /// so a hit reads no action (a fused lead caches its run's fields instead, and
    /// clears the cache when it becomes one; rule changes clear it too).
    #[inline]
    fn verdict(&self, hit: usize) -> u32 {
        let deny = self.actions.get(hit).copied().unwrap_or(self.default) == Action::Deny;
        // Hit indices stay far below bit 31: one counter a rule, and rule sets are
        // bounded by memory long before two thousand million.
        hit as u32 | if deny { DENY } else { 0 }
    }

    /// [`count`](Self::count) for a value of [`verdict`](Self::verdict).
    #[inline]
    fn count_verdict(&mut self, p: &mut Packet, v: u32) {
        let hit = (v & !DENY) as usize;
        if let Some(h) = self.hits.get_mut(hit) {
            *h += 1;
        }
        if p.meta().fast == FastMark::Want {
            self.mark(p, hit);
        }
        if v & DENY != 0 {
            p.drop_with(DENIED);
        }
    }

    #[cold]
    #[inline(never)]
    fn mark(&self, p: &mut Packet, hit: usize) {
        let l = p.layers();
        p.meta_mut().fast = match packet_key(p) {
            Some(k) => self.fast_mark(&k, &l, hit),
            None => FastMark::Refuse,
        };
    }

    /// Counts a packet that hit counter `hit` and drops it if that says deny.
    #[inline]
    fn count(&mut self, p: &mut Packet, hit: usize) {
        if let Some(h) = self.hits.get_mut(hit) {
            *h += 1;
        }
        if p.meta().fast == FastMark::Want {
            let l = p.layers();
            p.meta_mut().fast = match packet_key(p) {
                Some(k) => self.fast_mark(&k, &l, hit),
                None => FastMark::Refuse,
            };
        }
        if self.actions.get(hit).copied().unwrap_or(self.default) == Action::Deny {
            p.drop_with(DENIED);
        }
    }

    /// The token is the index of the hit counter the packet bumped. IPv6 extension
    /// headers are read as BPF reads them (raw bytes after the fixed header), which the
    /// flow key does not cover, so such packets are refused too.
    fn fast_mark(&self, k: &Key, l: &Layers, hit: usize) -> FastMark {
        let v6_ext = l.l3 == L3Kind::Ipv6 && l.l4_off != l.l3_off + 40;
        if (self.reads_flags && k.flags.is_some()) || v6_ext {
            FastMark::Refuse
        } else {
            FastMark::Token(hit as u64)
        }
    }
}

#[inline]
fn be128(d: &[u8], o: usize) -> u128 {
    let mut b = [0u8; 16];
    b.copy_from_slice(&d[o..o + 16]);
    u128::from_be_bytes(b)
}

/// The fields rules test, read as BPF reads them; None for a malformed packet.
#[inline]
pub fn packet_key(p: &mut Packet) -> Option<Key> {
    let l = p.layers();
    let d = p.data();
    let o = l.l3_off as usize;
    match l.l3 {
        // Layers guarantees the 20-byte header.
        L3Kind::Ipv4 => Some(v4_fields(
            d,
            o,
            (!l.is_later_fragment()).then_some(l.l4_off),
        )),
        L3Kind::Ipv6 => Some(v6_fields(d, o)),
        L3Kind::Malformed | L3Kind::Unparsed => None,
        L3Kind::Arp | L3Kind::Other => Some(NOT_IP_KEY),
    }
}

const NOT_IP_KEY: Key = Key {
    proto: NOT_IP as u16,
    src4: None,
    dst4: None,
    src6: None,
    dst6: None,
    sport: None,
    dport: None,
    icmp: None,
    flags: None,
    frag: None,
};

/// The key BPF reads from a frame with an inconsistent IP header (bad version, header
/// length below 5 words or past the end): fixed offsets, ports at `4 × IHL`. None when
/// too short for the fixed IP header.
pub fn bpf_key(p: &mut Packet) -> Option<Key> {
    let l = p.layers();
    let d = p.data();
    Some(match bpf_view(p.meta().link, &l, d)? {
        BpfView::V4(o) => {
            let later = be16(d, o + 6) & 0x1fff != 0;
            let t = o + usize::from(d[o] & 0x0f) * 4;
            v4_fields(d, o, (!later).then_some(t as u16))
        }
        BpfView::V6(o) => v6_fields(d, o),
        BpfView::NotIp => NOT_IP_KEY,
    })
}

/// IPv4 fragmentation as [`Field::Frag`] counts it, from the flags-and-offset word.
#[inline]
fn frag_class(word: u16) -> u8 {
    if word & 0x1fff != 0 {
        FRAG_LATER as u8
    } else if word & 0x2000 != 0 {
        FRAG_FIRST as u8
    } else {
        FRAG_NONE as u8
    }
}

/// The key of an IPv4 header at `o` (20 bytes present) with its transport header at `t`
/// (none for a later fragment).
#[inline]
fn v4_fields(d: &[u8], o: usize, t: Option<u16>) -> Key {
    let proto = d[o + 9];
    let mut k = Key {
        proto: proto as u16,
        src4: Some(be32(d, o + 12)),
        dst4: Some(be32(d, o + 16)),
        frag: Some(frag_class(be16(d, o + 6))),
        ..NOT_IP_KEY
    };
    if let Some(t) = t {
        transport(&mut k, d, t as usize, proto, 0);
    }
    k
}

/// The key of an IPv6 header at `o` (40 bytes present).
#[inline]
fn v6_fields(d: &[u8], o: usize) -> Key {
    let nxt = d[o + 6];
    let proto = if nxt == 44 {
        d.get(o + 40).copied().unwrap_or(nxt)
    } else {
        nxt
    };
    let mut k = Key {
        proto: 256 + proto as u16,
        src6: Some(be128(d, o + 8)),
        dst6: Some(be128(d, o + 24)),
        ..NOT_IP_KEY
    };
    transport(&mut k, d, o + 40, nxt, 256);
    k
}

/// Ports, ICMP type and TCP flags of the transport header at `t` (protocol `proto`).
#[inline]
fn transport(k: &mut Key, d: &[u8], t: usize, proto: u8, icmp_base: u16) {
    match proto {
        6 | 17 | 132 if d.len() >= t + 4 => {
            k.sport = Some(be16(d, t));
            k.dport = Some(be16(d, t + 2));
            if proto == 6 && d.len() > t + 13 {
                k.flags = Some(d[t + 13]);
            }
        }
        1 if icmp_base == 0 && d.len() > t => k.icmp = Some(d[t] as u16),
        58 if icmp_base == 256 && d.len() > t => k.icmp = Some(256 + d[t] as u16),
        _ => {}
    }
}

/// What the hot path makes of a packet: its packed relevant key, or why it has none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Packed {
    Key(u64, u64),
    /// IPv6 while some rule reads IPv6 addresses: classified every time.
    Uncached,
    Malformed,
}

/// The cache key read straight from the bytes: equal to
/// `VerdictCache::pack(&classifier.relevant(&packet_key(p)?))` for the classifier `m`
/// was made from, without building a [`Key`] or touching IPv6 addresses.
#[inline]
pub fn packed_key(m: &KeyMask, l: &Layers, d: &[u8]) -> Packed {
    let o = l.l3_off as usize;
    let (a, b) = match l.l3 {
        L3Kind::Ipv4 => {
            // Layers guarantees the 20-byte header: one bounds check for all of it.
            let Some(h) = d.get(o..o + 20).and_then(|h| <&[u8; 20]>::try_from(h).ok()) else {
                return Packed::Malformed;
            };
            let t = (!l.is_later_fragment()).then_some(l.l4_off as usize);
            return v4_key(m, h, d, t);
        }
        L3Kind::Ipv6 => {
            if m.v6 {
                return Packed::Uncached;
            }
            let nxt = d[o + 6];
            let proto = if nxt == 44 {
                d.get(o + 40).copied().unwrap_or(nxt)
            } else {
                nxt
            };
            let b = MARK | (256 + u64::from(proto)) << PROTO_SHIFT;
            (0, b | transport_bits(m, d, o + 40, nxt, 256))
        }
        L3Kind::Malformed | L3Kind::Unparsed => return Packed::Malformed,
        L3Kind::Arp | L3Kind::Other => (0, MARK | (NOT_IP as u64) << PROTO_SHIFT),
    };
    Packed::Key(a & m.a, b & m.b)
}

/// [`packed_key`] of a packet, not parsing the commonest frame (untagged Ethernet / IPv4
/// without options or fragmentation, decided from the bytes as [`Layers::parse`] decides
/// it first) into its metadata: the filter needs no more of it, and a later reader parses.
/// Always inlined (two callers, both per-packet loops): called, its 24-byte result went
/// through memory, about 30 instructions a packet.
/// A [`Packed`] as two words, for the batch loops: a key's `b` always holds [`MARK`]
/// (the mask keeps it), so `b == 0` marks the other two (`a` 0: uncached, 1: malformed).
/// Two words travel in registers where the enum went through the stack.
#[inline(always)]
fn key_words(k: Packed) -> (u64, u64) {
    match k {
        Packed::Key(a, b) => (a, b),
        Packed::Uncached => UNCACHED_WORDS,
        Packed::Malformed => MALFORMED_WORDS,
    }
}

const UNCACHED_WORDS: (u64, u64) = (0, 0);
const MALFORMED_WORDS: (u64, u64) = (1, 0);

#[inline(always)]
pub fn packed(m: &KeyMask, p: &mut Packet) -> Packed {
    let meta = p.meta();
    if meta.layers.is_unparsed() && meta.link == LinkKind::Ethernet {
        let d = p.data();
        if let Some(f) = d.first_chunk::<48>() {
            if plain_v4(f[12..22].try_into().unwrap_or(&[0; 10])) {
                return v4_plain_key(m, f);
            }
        } else if let Some(f) = d.first_chunk::<34>() {
            if plain_v4(f[12..22].try_into().unwrap_or(&[0; 10])) {
                let h: &[u8; 20] = f[14..].try_into().unwrap_or(&[0; 20]);
                return v4_key(m, h, d, Some(34));
            }
        }
    }
    let l = p.layers();
    packed_key(m, &l, p.data())
}

/// Bytes 12..22 of an Ethernet frame say untagged IPv4 without options or fragmentation:
/// ethertype 0x0800, version 4 / IHL 5, no MF and offset 0. Two word compares
/// where five byte compares and branches were (about 6 instructions a packet).
#[inline(always)]
fn plain_v4(h: &[u8; 10]) -> bool {
    let et = u16::from_le_bytes([h[0], h[1]]);
    let w = u64::from_le_bytes([h[2], h[3], h[4], h[5], h[6], h[7], h[8], h[9]]);
    // Byte 14 (version/IHL) is the low byte, bytes 20-21 (flags, offset) the top two;
    // DF and the reserved bit (0xc0 of byte 20) are masked out, as before.
    et == 0x0008 && w & 0xff3f_0000_0000_00ff == 0x45
}

/// [`v4_key`] of an untagged Ethernet / IPv4 frame without options or fragmentation (the
/// caller checked) whose first 48 bytes are `f`: every byte the key reads (a TCP header's
/// flags at most) lies in `f`, so no bounds check is left, and the fragment class is
/// known. Runs for most packets of most traces.
#[inline(always)]
fn v4_plain_key(m: &KeyMask, f: &[u8; 48]) -> Packed {
    let proto = f[23];
    let a = u64::from_be_bytes([f[26], f[27], f[28], f[29], f[30], f[31], f[32], f[33]]);
    let mut b = MARK | P_SRC4 | P_DST4 | P_FRAG | u64::from(proto) << PROTO_SHIFT;
    b |= (FRAG_NONE as u64) << FRAG_SHIFT;
    // Both ports in one load; TCP tested first (most packets of most traces).
    let ports = u64::from(u32::from_be_bytes([f[34], f[35], f[36], f[37]]));
    let port_bits =
        (P_SPORT | (ports >> 16) << X_SHIFT) & m.sport | P_DPORT | (ports & 0xffff) << DPORT_SHIFT;
    b |= if proto == 6 {
        port_bits | P_FLAGS | u64::from(f[47]) << FLAGS_SHIFT
    } else if proto == 17 || proto == 132 {
        port_bits
    } else if proto == 1 {
        (P_ICMP | u64::from(f[34]) << X_SHIFT) & m.icmp
    } else {
        0
    };
    Packed::Key(a & m.a, b & m.b)
}

/// The packed key of an IPv4 packet with header `h` and transport header at `t` (none
/// for a later fragment).
#[inline]
fn v4_key(m: &KeyMask, h: &[u8; 20], d: &[u8], t: Option<usize>) -> Packed {
    let proto = h[9];
    // Source then destination address.
    let a = u64::from_be_bytes([h[12], h[13], h[14], h[15], h[16], h[17], h[18], h[19]]);
    let frag = u64::from(frag_class(u16::from_be_bytes([h[6], h[7]])));
    let mut b = MARK | P_SRC4 | P_DST4 | P_FRAG | u64::from(proto) << PROTO_SHIFT;
    b |= frag << FRAG_SHIFT;
    if let Some(t) = t {
        b |= transport_bits(m, d, t, proto, 0);
    }
    Packed::Key(a & m.a, b & m.b)
}

/// [`transport`] as packed-key bits, the source port and ICMP type already masked.
#[inline]
fn transport_bits(m: &KeyMask, d: &[u8], t: usize, proto: u8, icmp_base: u64) -> u64 {
    match proto {
        6 | 17 | 132 => {
            let Some(&[s0, s1, d0, d1]) = d.get(t..t + 4) else {
                return 0;
            };
            let sport = (P_SPORT | u64::from(u16::from_be_bytes([s0, s1])) << X_SHIFT) & m.sport;
            let mut b = sport | P_DPORT | u64::from(u16::from_be_bytes([d0, d1])) << DPORT_SHIFT;
            if proto == 6 {
                if let Some(&f) = d.get(t + 13) {
                    b |= P_FLAGS | u64::from(f) << FLAGS_SHIFT;
                }
            }
            b
        }
        1 if icmp_base == 0 && d.len() > t => (P_ICMP | u64::from(d[t]) << X_SHIFT) & m.icmp,
        58 if icmp_base == 256 && d.len() > t => {
            (P_ICMP | (256 + u64::from(d[t])) << X_SHIFT) & m.icmp
        }
        _ => 0,
    }
}

/// A rule set parsed and compiled from a command, ready to be swapped in.
struct Compiled {
    rules: Vec<Rule>,
    classifier: Classifier,
}

/// The filter's one command parser: `rules R1; R2; …` (the word `rules`, then rules in
/// the config's syntax separated by `;`), compiled here, wherever the caller runs.
fn prepare(cmd: &str) -> Result<super::Prepared, String> {
    let cmd = cmd.trim();
    let (verb, list) = cmd.split_once(char::is_whitespace).unwrap_or((cmd, ""));
    if verb != "rules" {
        return Err(format!(
            "unknown command `{verb}` (commands: rules R1; R2; …)"
        ));
    }
    let rules = parse_rules(list.split(';')).map_err(|(n, _, e)| format!("rule {n}: {e}"))?;
    let classifier = Classifier::new(&rules);
    Ok(Box::new(Compiled { rules, classifier }))
}

/// The bit of a cached verdict that says deny (see `IpFilter::verdict`).
const DENY: u32 = 1 << 31;

/// At most this many per-rule counters are shown (the busiest first, in rule order).
const SHOWN_RULES: usize = 32;

impl Nf for IpFilter {
    fn profile(&self) -> &Profile {
        &self.profile
    }

    /// Two passes per batch: pack every key and prefetch its bucket, then look up (and
    /// on a miss classify), so the buckets' loads overlap.
    #[inline]
    fn process(&mut self, batch: &mut Batch, _cx: &Context) {
        if self.lead.is_some() {
            return self.process_lead(batch);
        }
        if let Some(f) = self.follow {
            return self.process_follow(batch, f);
        }
        self.cache.grow();
        for chunk in batch.as_mut_slice().chunks_mut(MAX_BATCH) {
            // Pass 1 writes every key pass 2 reads, and the bucket of every key with
            // `b != 0`, the only ones pass 2 reads it for: nothing to clear first (a
            // 512-byte memset and 256 bytes of stores a batch, ~1.8 instructions a packet).
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
                let v = match k {
                    (_, b) if b != 0 => {
                        // SAFETY: pass 1 wrote `i` for every key with `b != 0`.
                        let i = unsafe { i.assume_init_read() };
                        // SAFETY: `i` is `bucket` of this key, taken after this batch's
                        // `grow` (nothing else resizes the buckets), so in bounds.
                        match unsafe { self.cache.get_in(i, k) } {
                            Some(v) => v,
                            None => {
                                let v = self.verdict(self.classify(p));
                                self.cache.put_at(i, k, v);
                                v
                            }
                        }
                    }
                    UNCACHED_WORDS => self.verdict(self.classify(p)),
                    _ => match self.classify_malformed(p) {
                        Some(h) => self.verdict(h),
                        None => {
                            p.drop_with(MALFORMED);
                            continue;
                        }
                    },
                };
                self.count_verdict(p, v);
            }
        }
    }

    /// `rules R1; R2; …` replaces the whole rule list (the default action stays).
    fn control(&mut self, cmd: &str) -> Result<String, String> {
        let mut prepared = prepare(cmd)?;
        self.control_prepared(cmd, &mut prepared)
    }

    /// Rule sets are parsed and compiled off the worker (tens of thousands of rules take
    /// most of a second); the worker swaps them in.
    fn preparer(&self) -> Option<super::Preparer> {
        Some(std::sync::Arc::new(prepare))
    }

    fn control_prepared(
        &mut self,
        cmd: &str,
        prepared: &mut super::Prepared,
    ) -> Result<String, String> {
        let Some(c) = prepared.downcast_mut::<Compiled>() else {
            return self.control(cmd);
        };
        // The old rules and classifier go back in `prepared`, to be freed by the caller.
        std::mem::swap(&mut self.rules, &mut c.rules);
        std::mem::swap(&mut self.classifier, &mut c.classifier);
        self.installed();
        Ok(format!("{} rule(s)", self.rules.len()))
    }

    /// The verdict cache and the classifier (a rule change builds one of similar size);
    /// the first of a fused run also holds the others' classifiers.
    fn memory(&self) -> usize {
        let lent = self.lead.as_ref().map_or(0, |l| l.memory());
        self.cache.memory() + self.classifier.memory() + lent
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }

    fn consolidate(&self) -> Option<&dyn Consolidate> {
        Some(self)
    }

    fn consolidate_mut(&mut self) -> Option<&mut dyn Consolidate> {
        Some(self)
    }

    fn stats(&self) -> Stats {
        let n = self.rules.len();
        let mut hit: Vec<usize> = (0..n).filter(|&i| self.hits[i] > 0).collect();
        if hit.len() > SHOWN_RULES {
            hit.sort_by_key(|&i| std::cmp::Reverse(self.hits[i]));
            hit.truncate(SHOWN_RULES);
            hit.sort_unstable();
        }
        let mut s: Stats = vec![("rules".into(), n as u64)];
        s.extend(
            hit.into_iter()
                .map(|i| (format!("rule {}", i + 1).into(), self.hits[i])),
        );
        s.push(("default".into(), self.hits[n]));
        s
    }
}

impl Consolidate for IpFilter {
    /// The verdict depends only on fields in FastPath's flow key (addresses, protocol,
    /// ports, ICMP type, fragment layout), unless a rule tests TCP flags.
    fn state_function(&self) -> &'static str {
        "per-rule hit counter (counted in the entry, no call per packet)"
    }

    fn fast_checks(&self) -> bool {
        false
    }

    fn fast_valid(&self, _token: u64, _p: &FastPacket) -> bool {
        // Rule changes invalidate through the runtime's per-NF generation.
        true
    }

    fn fast_counts(&self) -> bool {
        true
    }

    fn fast_count(&mut self, token: u64, packets: u64) {
        if let Some(h) = self.hits.get_mut(token as usize) {
            *h += packets;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::ipv4_switch::tests::{step, v4};
    use super::*;
    use crate::packet::Verdict;

    fn filter(rules: &[&str], default: Action) -> IpFilter {
        IpFilter::new(parse_rules(rules.iter().copied()).unwrap(), default)
    }

    #[test]
    fn the_command_word_is_a_whole_word() {
        let mut f = filter(&["allow tcp"], Action::Deny);
        let e = f.control("rulesallow ip").unwrap_err();
        assert!(e.starts_with("unknown command `rulesallow`"), "{e}");
        assert_eq!(f.rules().len(), 1, "a refused command changes nothing");
        assert!(f.control("rule allow ip").is_err());
        assert_eq!(f.control("rules\tallow ip; deny udp").unwrap(), "2 rule(s)");
        assert_eq!(f.control("rules").unwrap(), "0 rule(s)");
    }

    #[test]
    fn a_prepared_rule_set_swaps_in_and_hands_back_the_old_one() {
        let mut f = filter(&["allow tcp", "deny udp", "allow icmp"], Action::Deny);
        let prepare = f.preparer().unwrap();
        let mut p = prepare("rules deny tcp").unwrap();
        assert_eq!(
            f.control_prepared("rules deny tcp", &mut p).unwrap(),
            "1 rule(s)"
        );
        assert_eq!(
            step(&mut f, v4(1, 2, 6, 5000, 80, 0)).1,
            Verdict::Drop(DENIED)
        );
        let old = p.downcast_ref::<Compiled>().unwrap();
        assert_eq!(
            old.rules.len(),
            3,
            "the replaced rules are returned to be freed"
        );
        assert!(prepare("rules allow tcp port 99999").is_err());
    }

    #[test]
    fn first_match_wins_then_default() {
        let mut f = filter(
            &["deny host 10.0.0.9", "allow tcp dst port 80", "deny all"],
            Action::Allow,
        );
        assert_eq!(step(&mut f, v4(1, 2, 6, 5000, 80, 0)).1, Verdict::Out(0));
        assert_eq!(
            step(&mut f, v4(9, 2, 6, 5000, 80, 0)).1,
            Verdict::Drop(DENIED)
        );
        assert_eq!(
            step(&mut f, v4(1, 2, 17, 5000, 80, 0)).1,
            Verdict::Drop(DENIED)
        );
        assert_eq!(f.hits(), &[1, 1, 1, 0]);
        let s = f.stats();
        assert_eq!(s[1], ("rule 1".into(), 1));
        assert_eq!(s.last(), Some(&("default".into(), 0)));
    }

    #[test]
    fn set_rules_swaps_between_batches() {
        let mut f = filter(&["allow udp"], Action::Deny);
        assert_eq!(step(&mut f, v4(1, 2, 17, 1, 2, 0)).1, Verdict::Out(0));
        assert_eq!(step(&mut f, v4(1, 2, 6, 1, 2, 0)).1, Verdict::Drop(DENIED));
        f.set_rules(parse_rules(["deny udp", "allow all"]).unwrap());
        assert_eq!(step(&mut f, v4(1, 2, 17, 1, 2, 0)).1, Verdict::Drop(DENIED));
        assert_eq!(step(&mut f, v4(1, 2, 6, 1, 2, 0)).1, Verdict::Out(0));
        assert_eq!(f.hits(), &[1, 1, 0]);
        f.set_rules(Vec::new());
        assert_eq!(step(&mut f, v4(1, 2, 6, 1, 2, 0)).1, Verdict::Drop(DENIED));
    }

    #[test]
    fn later_fragments_have_no_ports_and_short_frames_are_malformed() {
        let mut f = filter(
            &["allow port 80", "allow not port 81 and udp"],
            Action::Deny,
        );
        let mut p = v4(1, 2, 6, 80, 80, 0);
        p.data_mut()[14 + 7] = 1;
        assert_eq!(step(&mut f, p).1, Verdict::Drop(DENIED));
        let mut p = v4(1, 2, 17, 81, 81, 0);
        p.data_mut()[14 + 7] = 1;
        assert_eq!(step(&mut f, p).1, Verdict::Out(0));
        let short = Packet::from_bytes(&[0u8; 10]);
        assert_eq!(step(&mut f, short).1, Verdict::Drop(MALFORMED));
    }
}
