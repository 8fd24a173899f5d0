//! Maglev load balancer (Eisenbud et al., "Maglev: A Fast and Reliable Software Network
//! Load Balancer", NSDI'16). Packets to the virtual IP (VIP) are spread over backends by
//! consistent hashing: the 5-tuple picks a slot of a prime-sized lookup table that the
//! paper's permutation algorithm fills almost evenly (weights give heavier backends more
//! turns), and a connection table keeps each flow on its backend when the set changes.
//! The chosen backend's address replaces the destination address (checksums patched per
//! RFC 1624), and its MAC the destination MAC when configured.
//!
//! Choices, where the paper leaves them open:
//! - Packets not addressed to the VIP pass untouched (`other = "pass"`, the default), or
//!   are dropped as `not-vip` (`other = "drop"`). Replies from backends do not come back
//!   through Maglev (direct server return), so nothing is rewritten on the way back.
//! - IP fragments hash on the 3-tuple (ports zeroed), so every fragment of a datagram,
//!   including the ones without a transport header, goes to the same backend.
//! - The table hash of backend names (FNV-1a) and the flow hash (foldhash with the
//!   configured `seed`) are fixed, not per process: every Maglev machine of a service
//!   must send a flow to the same backend (paper §3.4), and runs must be reproducible.
//! - On [`Maglev::set_backends`] tracked flows keep their backend if it is still in the
//!   set (even with weight 0: weight 0 drains a backend, it takes no new flows); flows of
//!   a removed backend are rehashed into the new table on their next packet (their
//!   connections are lost anyway) and counted as `rehashed_flows`.
//! - A full connection table refuses new flows (counted as `table_full`); they are still
//!   balanced by the lookup table, which only moves them if the backend set changes.
//! - Frames too short for their L2/IP header, and packets to the VIP whose TCP/UDP header
//!   is cut short (not by fragmentation), are dropped as `malformed`: they have no flow to
//!   follow. First fragments hash on addresses, like the later ones.

use std::hash::BuildHasher;
use std::net::IpAddr;

use foldhash::fast::FixedState;

use super::consolidate::{no_sweep_in, FastRun};
use super::nf::{named, Stats};
use super::nf::{Consolidate, Context, FastPacket, Nf, Profile, TokenLines};
use super::params::{ParamDoc, ParamError, Params};
use crate::flow::{prefetch, FlowKey, Hasher, Index, Learned, WideKey};
use crate::packet::wire::{Ipv4, Tcp, Udp};
use crate::packet::{checksum, Batch, FastMark, Fields, L3Kind, Packet, Verdict, MAX_BATCH};

/// The paper's default: a prime a little above 65,536 for up to a few hundred backends.
pub const DEFAULT_TABLE_SIZE: usize = 65537;
/// Largest table accepted (a prime near 2^24), bounded so a typo cannot take gigabytes.
pub const MAX_TABLE_SIZE: usize = 16_777_213;
/// Backend indices are stored as `u16` to keep the lookup table small (cache friendly).
pub const MAX_BACKENDS: usize = u16::MAX as usize;
/// Largest backend weight, in the config and in commands alike.
pub const MAX_WEIGHT: u32 = u16::MAX as u32;

const EMPTY: u16 = u16::MAX;
const GONE: u16 = u16::MAX;

const NO_BACKEND: u8 = 0;
const NOT_VIP: u8 = 1;
const MALFORMED: u8 = 2;

/// One backend as configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backend {
    pub addr: IpAddr,
    /// Written as the destination MAC of packets sent to this backend, when set.
    pub mac: Option<[u8; 6]>,
    /// Relative share of the lookup table; 0 takes no new flows (draining).
    pub weight: u32,
    /// What the table hashes to place the backend (the address unless named), so a
    /// backend keeps its slots across restarts and on every Maglev machine.
    pub name: String,
}

impl Backend {
    pub fn new(addr: IpAddr) -> Backend {
        Backend {
            addr,
            mac: None,
            weight: 1,
            name: addr.to_string(),
        }
    }

    pub fn with_weight(mut self, w: u32) -> Backend {
        self.weight = w;
        self
    }

    pub fn with_mac(mut self, mac: [u8; 6]) -> Backend {
        self.mac = Some(mac);
        self
    }
}

/// Trial division: table sizes are at most [`MAX_TABLE_SIZE`], so this is cheap.
pub fn is_prime(n: u64) -> bool {
    if n < 2 {
        return false;
    }
    if n.is_multiple_of(2) {
        return n == 2;
    }
    let mut d = 3;
    while d * d <= n {
        if n.is_multiple_of(d) {
            return false;
        }
        d += 2;
    }
    true
}

/// FNV-1a, 64 bit, from a chosen basis (the paper's h1 and h2 need two independent hashes).
fn fnv1a(basis: u64, b: &[u8]) -> u64 {
    let mut h = basis;
    for &x in b {
        h ^= x as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// splitmix64's finaliser: FNV's low bits are weak, and `skip` is taken modulo M-1.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Each backend's (name, weight), as [`populate`] takes them.
fn weighted(backends: &[Backend]) -> Vec<(&str, u32)> {
    backends
        .iter()
        .map(|b| (b.name.as_str(), b.weight))
        .collect()
}

/// A `backends` command parsed, with its lookup table filled off the worker: a table of
/// up to 16M slots takes a noticeable time to fill, which would stall the traffic.
struct PreparedBackends {
    set: Vec<Backend>,
    table: Vec<u16>,
}

/// The paper's `offset` and `skip` for a backend name in a table of `m` slots.
fn offset_skip(name: &str, m: usize) -> (usize, usize) {
    let h1 = mix(fnv1a(0xcbf2_9ce4_8422_2325, name.as_bytes()));
    let h2 = mix(fnv1a(0x6c62_272e_07bb_0142, name.as_bytes()));
    let m = m as u64;
    ((h1 % m) as usize, (h2 % (m - 1) + 1) as usize)
}

/// Fills a lookup table of `m` slots (m prime, ≥ 2) with indices into `backends` (name,
/// weight) by the paper's Pseudocode 1: each backend walks its own permutation of the
/// slots, `offset, offset + skip, …` (mod m), and in turn claims the next slot still free.
/// A backend of weight w takes w turns per round, so shares follow the weights; weight 0
/// takes none. Backends take turns in name order. Empty when no backend has a weight (every new flow then has no backend).
pub fn populate(backends: &[(&str, u32)], m: usize) -> Vec<u16> {
    let mut live: Vec<usize> = (0..backends.len().min(MAX_BACKENDS))
        .filter(|&i| backends[i].1 > 0)
        .collect();
    // Turns go in name order, so the table does not depend on the order of the list.
    live.sort_by_key(|&i| backends[i].0);
    if live.is_empty() || m < 2 {
        return Vec::new();
    }
    // pos[i] is the backend's next candidate slot: permutation[i][next[i]] of the paper,
    // stepped incrementally (skip < m, so one subtraction replaces the modulo).
    let (mut pos, skip): (Vec<usize>, Vec<usize>) =
        live.iter().map(|&i| offset_skip(backends[i].0, m)).unzip();
    let mut entry = vec![EMPTY; m];
    let mut filled = 0;
    loop {
        for (k, &i) in live.iter().enumerate() {
            for _ in 0..backends[i].1 {
                // Always terminates: the permutation visits every slot and one is free.
                let mut c = pos[k];
                while entry[c] != EMPTY {
                    c += skip[k];
                    if c >= m {
                        c -= m;
                    }
                }
                entry[c] = i as u16;
                c += skip[k];
                if c >= m {
                    c -= m;
                }
                pos[k] = c;
                filled += 1;
                if filled == m {
                    return entry;
                }
            }
        }
    }
}

/// A backend of the current set, as the hot path needs it.
#[derive(Clone, Copy, Debug)]
struct Live {
    /// IPv4 addresses in the first 4 bytes.
    addr: [u8; 16],
    mac: Option<[u8; 6]>,
    /// Stable id (index into `known`).
    id: u32,
}

/// Every backend address ever configured, so counters and tracked flows survive changes
/// of the set. Bounded by the distinct addresses configured.
struct Known {
    addr: IpAddr,
    packets: u64,
    /// Index in the current set, or GONE.
    index: u16,
}

pub struct Maglev {
    profile: Profile,
    vip: [u8; 16],
    v6: bool,
    m: usize,
    /// Slot → index into `backends`; empty when no backend takes new flows.
    table: Vec<u16>,
    backends: Vec<Live>,
    known: Vec<Known>,
    /// Flow → stable backend id.
    conns: Conns,
    hasher: FixedState,
    drop_others: bool,
    last_sweep_ns: u64,
    /// Packets since the last sweep: a sweep scans the whole table, so it waits for
    /// enough packets to amortise it (or for the table to fill), besides a second of
    /// capture time (traces compress years into few packets).
    since_sweep: u64,
    sweep_every: u64,
    new_flows: u64,
    rehashed: u64,
    table_full: u64,
    passed: u64,
}

fn addr16(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v) => {
            let mut b = [0; 16];
            b[..4].copy_from_slice(&v.octets());
            b
        }
        IpAddr::V6(v) => v.octets(),
    }
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.split([':', '-']);
    for b in &mut mac {
        let p = parts.next()?;
        if p.is_empty() || p.len() > 2 {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

impl Maglev {
    pub const PARAMS: &'static [ParamDoc] = &[
        ParamDoc {
            name: "vip",
            ty: "IPv4 or IPv6 address",
            default: "required",
            doc: "virtual IP: packets to it are balanced over the backends",
        },
        ParamDoc {
            name: "backends",
            ty: "list of { addr, mac?, weight?, name? }",
            default: "required",
            doc: "backend addresses (same family as the VIP), optional destination MAC, weight (default 1, 0 = drain), name hashed into the table (default: the address)",
        },
        ParamDoc {
            name: "table_size",
            ty: "prime integer",
            default: "65537",
            doc: "lookup table slots M, a prime up to 16,777,213; should be well above 100 x backends",
        },
        ParamDoc {
            name: "capacity",
            ty: "integer",
            default: "65536",
            doc: "most tracked connections (1..=67,108,864); new ones beyond it are hashed but not tracked (counted)",
        },
        ParamDoc {
            name: "timeout",
            ty: "seconds",
            default: "60",
            doc: "idle time after which a connection is forgotten (run clock: docs/time.md; 0 = never)",
        },
        ParamDoc {
            name: "seed",
            ty: "integer",
            default: "0",
            doc: "flow hash key; all Maglev machines of a service must share it",
        },
        ParamDoc {
            name: "other",
            ty: "\"pass\" | \"drop\"",
            default: "\"pass\"",
            doc: "what happens to packets not addressed to the VIP",
        },
    ];

    /// A balancer for `vip` over `backends`; errors are one line naming the problem.
    pub fn new(
        vip: IpAddr,
        backends: &[Backend],
        table_size: usize,
        capacity: usize,
        timeout_ns: u64,
    ) -> Result<Maglev, String> {
        if !(2..=MAX_TABLE_SIZE).contains(&table_size) || !is_prime(table_size as u64) {
            return Err(format!(
                "`table_size` = {table_size} must be a prime in 2..={MAX_TABLE_SIZE}"
            ));
        }
        let mut lb = Maglev {
            profile: Profile {
                reads: Fields::ETH_TYPE
                    | Fields::VLAN
                    | Fields::IP_SRC
                    | Fields::IP_DST
                    | Fields::IP_PROTO
                    | Fields::IP_FRAG
                    | Fields::L4_SRC
                    | Fields::L4_DST
                    | Fields::ICMP,
                writes: Fields::IP_DST,
                may_drop: true,
                changes_length: false,
                per_flow_state: true,
                outputs: &["out"],
                drop_reasons: &["no-backend", "not-vip", "malformed"],
            },
            vip: addr16(vip),
            v6: vip.is_ipv6(),
            m: table_size,
            table: Vec::new(),
            backends: Vec::new(),
            known: Vec::new(),
            // (A token holds a slot in 26 bits: [`Conns::token`].)
            conns: Conns::new(capacity.clamp(1, 1 << 26), timeout_ns),
            hasher: FixedState::with_seed(0),
            drop_others: false,
            last_sweep_ns: 0,
            since_sweep: 0,
            sweep_every: (capacity as u64 / 4).max(1024),
            new_flows: 0,
            rehashed: 0,
            table_full: 0,
            passed: 0,
        };
        lb.set_backends(backends)?;
        Ok(lb)
    }

    /// Keys the flow hash (every machine of a service must use the same seed).
    pub fn with_seed(mut self, seed: u64) -> Maglev {
        self.hasher = FixedState::with_seed(seed);
        self
    }

    /// Drops packets not addressed to the VIP instead of passing them.
    pub fn with_drop_others(mut self, drop: bool) -> Maglev {
        self.drop_others = drop;
        self
    }

    pub fn from_params(p: &mut Params) -> Result<Maglev, ParamError> {
        let vip: IpAddr = match p.table_str("vip")? {
            None => return Err(p.err("`vip` is required, e.g. vip = \"203.0.113.10\"")),
            Some(s) => s
                .parse()
                .map_err(|_| p.err(format!("`vip` = \"{s}\" is not an IP address")))?,
        };
        let backends = parse_backends(p)?;
        let m = p.int(
            "table_size",
            DEFAULT_TABLE_SIZE as i64,
            2,
            MAX_TABLE_SIZE as i64,
        )? as usize;
        let capacity = p.int("capacity", 65536, 1, 1 << 26)? as usize;
        let timeout = p.seconds_ns("timeout", 60_000_000_000)?;
        let seed = p.int("seed", 0, 0, i64::MAX)? as u64;
        let drop = match p.table_str("other")? {
            None | Some("pass") => false,
            Some("drop") => true,
            Some(o) => return Err(p.err(format!("`other` = \"{o}\": use \"pass\" or \"drop\""))),
        };
        if backends.is_empty() {
            return Err(p.err("`backends` needs at least one backend"));
        }
        let lb = Maglev::new(vip, &backends, m, capacity, timeout).map_err(|e| p.err(e))?;
        Ok(lb.with_seed(seed).with_drop_others(drop))
    }

    /// Replaces the backend set (live): the table is rebuilt, tracked flows stay on their
    /// backend while it is in the set, and flows of removed backends are rehashed on their
    /// next packet. On error nothing changes.
    pub fn set_backends(&mut self, backends: &[Backend]) -> Result<(), String> {
        self.set_backends_with(backends, None).map(drop)
    }

    /// [`Maglev::set_backends`] with the lookup table already filled for this set and
    /// table size (by the preparer, off the worker), or None to fill it here. Returns the
    /// table it replaced.
    fn set_backends_with(
        &mut self,
        backends: &[Backend],
        table: Option<Vec<u16>>,
    ) -> Result<Vec<u16>, String> {
        if backends.len() > MAX_BACKENDS.min(self.m) {
            return Err(format!(
                "{} backends: at most {} (and no more than table_size)",
                backends.len(),
                MAX_BACKENDS.min(self.m)
            ));
        }
        let mut addrs = std::collections::HashSet::with_capacity(backends.len());
        let mut names = std::collections::HashSet::with_capacity(backends.len());
        for b in backends {
            if b.addr.is_ipv6() != self.v6 {
                return Err(format!(
                    "backend {} is not of the VIP's address family",
                    b.addr
                ));
            }
            if b.weight > MAX_WEIGHT {
                return Err(format!(
                    "backend {}: weight {}",
                    b.addr,
                    weight_err(b.weight)
                ));
            }
            if !addrs.insert(b.addr) {
                return Err(format!("backend {} is listed twice", b.addr));
            }
            if !names.insert(b.name.as_str()) {
                return Err(format!("backend name `{}` is used twice", b.name));
            }
        }
        for k in &mut self.known {
            k.index = GONE;
        }
        self.backends.clear();
        for (i, b) in backends.iter().enumerate() {
            let id = match self.known.iter().position(|k| k.addr == b.addr) {
                Some(id) => id,
                None => {
                    self.known.push(Known {
                        addr: b.addr,
                        packets: 0,
                        index: GONE,
                    });
                    self.known.len() - 1
                }
            };
            self.known[id].index = i as u16;
            self.backends.push(Live {
                addr: addr16(b.addr),
                mac: b.mac,
                id: id as u32,
            });
        }
        let table = table.unwrap_or_else(|| populate(&weighted(backends), self.m));
        let old = std::mem::replace(&mut self.table, table);
        self.profile.writes = if backends.iter().any(|b| b.mac.is_some()) {
            Fields::IP_DST | Fields::ETH_DST
        } else {
            Fields::IP_DST
        };
        Ok(old)
    }

    /// The backend address of every slot of the lookup table (empty if no backend takes
    /// new flows), for inspecting balance and disruption.
    pub fn table(&self) -> Vec<IpAddr> {
        self.table
            .iter()
            .map(|&i| self.known[self.backends[i as usize].id as usize].addr)
            .collect()
    }

    /// Connections currently tracked.
    pub fn tracked(&self) -> usize {
        self.conns.len()
    }

    /// Packets sent to each backend ever configured, by address.
    pub fn packets_per_backend(&self) -> Vec<(IpAddr, u64)> {
        self.known.iter().map(|k| (k.addr, k.packets)).collect()
    }

    /// The backend (index into `backends`) for a flow: its tracked one, else by the table.
    #[inline]
    fn pick(&mut self, tag: u32, key: &WideKey, now: u64) -> Option<usize> {
        let Maglev {
            conns,
            known,
            backends,
            table,
            hasher,
            ..
        } = self;
        if let Some(id) = conns.get_mut(tag, key, now) {
            let i = known[*id as usize].index;
            if i != GONE {
                return Some(i as usize);
            }
            // Its backend was removed: rehash into the current table.
            let i = slot(table, hasher, key)?;
            *id = backends[i].id;
            self.rehashed += 1;
            return Some(i);
        }
        let i = slot(table, hasher, key)?;
        let id = backends[i].id;
        self.new_flows += 1;
        if conns.learn(tag, *key, id, now) == Learned::Full
            && !(self.sweep(now) && self.conns.learn(tag, *key, id, now) != Learned::Full)
        {
            self.table_full += 1;
        }
        Some(i)
    }

    /// Three passes so that a batch's cache misses overlap instead of queueing: find the
    /// flows and prefetch their index entries, then prefetch the connections those name,
    /// then pick backends and rewrite. Lookups are redone in the last pass (now hits in
    /// cache), since a new flow learned there may be the next packet's.
    #[inline]
    fn process_chunk(&mut self, pkts: &mut [Packet]) {
        let mut flows = [None::<(u32, WideKey)>; MAX_BATCH];
        for (p, f) in pkts.iter_mut().zip(flows.iter_mut()) {
            *f = self.flow_of(p);
            if let Some((tag, _)) = f {
                self.conns.prefetch_index(*tag);
            }
        }
        for (tag, _) in flows[..pkts.len()].iter().flatten() {
            self.conns.prefetch_conn(*tag);
        }
        for (p, f) in pkts.iter_mut().zip(flows) {
            // Sweeps are counted per packet, in packet order, so FastPath's state
            // function (which ticks too) sweeps at the same packet whatever the batches.
            self.tick(p.meta().now_ns);
            if let Some((tag, key)) = f {
                self.forward(p, tag, &key);
            }
        }
    }

    /// The flow (index tag and key) of a packet to the VIP; other packets get their
    /// verdict here.
    #[inline]
    fn flow_of(&mut self, p: &mut Packet) -> Option<(u32, WideKey)> {
        let l = p.layers();
        let (m, d) = p.split_meta();
        if m.fast == FastMark::Want {
            // Refused unless a branch below says otherwise.
            m.fast = FastMark::Refuse;
        }
        let o3 = l.l3_off as usize;
        let to_vip = match l.l3 {
            // Fixed-size compares: a slice compare is a `memcmp` call.
            L3Kind::Ipv4 => {
                !self.v6
                    && d.get(o3 + 16..o3 + 20)
                        .and_then(|a| <[u8; 4]>::try_from(a).ok())
                        == self.vip[..4].try_into().ok()
            }
            L3Kind::Ipv6 => {
                self.v6
                    && d.get(o3 + 24..o3 + 40)
                        .and_then(|a| <[u8; 16]>::try_from(a).ok())
                        == Some(self.vip)
            }
            // Too short for its IP header: whether it is for the VIP is unknowable.
            L3Kind::Malformed => {
                m.verdict = Verdict::Drop(MALFORMED);
                return None;
            }
            _ => false,
        };
        if !to_vip {
            if m.fast == FastMark::Refuse {
                m.fast = FastMark::Token(FAST_PASS);
            }
            self.passed += 1;
            if self.drop_others {
                m.verdict = Verdict::Drop(NOT_VIP);
            }
            return None;
        }
        // A TCP/UDP header cut short (not by fragmentation) has no ports to hash: the
        // packet could not follow its flow.
        let cut = matches!(l.l4_proto, 6 | 17) && !l.has_l4() && !l.is_fragment();
        let key = FlowKey::from_packet(&l, d).filter(|_| !cut);
        let Some(mut key) = key else {
            m.verdict = Verdict::Drop(MALFORMED);
            return None;
        };
        if l.is_fragment() {
            key.sport = 0;
            key.dport = 0;
        }
        let key = WideKey(key);
        Some((self.conns.tag(&key), key))
    }

    /// Picks the backend of a packet to the VIP and rewrites it.
    #[inline]
    fn forward(&mut self, p: &mut Packet, tag: u32, key: &WideKey) {
        let l = p.layers();
        let (m, d) = p.split_mut();
        let o3 = l.l3_off as usize;
        let Some(i) = self.pick(tag, key, m.now_ns) else {
            m.verdict = Verdict::Drop(NO_BACKEND);
            return;
        };
        let b = self.backends[i];
        self.known[b.id as usize].packets += 1;
        // Consolidated only while the flow is tracked on this backend (a full table
        // leaves it untracked: every packet must pick again).
        // The token carries the backend id (FastPath's entry counts the flow's packets
        // and hands them over later, when the slot may hold another connection): ids
        // past 16 bits are not consolidated.
        if m.fast == FastMark::Refuse && b.id < u32::from(u16::MAX) {
            if let Some(s) = self.conns.find(tag, key) {
                if self.conns.slab[s as usize].id == b.id {
                    m.fast = FastMark::Token(self.conns.token(s, b.id));
                }
            }
        }
        // A complete transport header (never in later fragments) has its checksum
        // patched: it covers the destination address through the pseudo header.
        let o4 = l.l4_off as usize;
        let l4 = l.has_l4() && !l.is_later_fragment();
        if self.v6 {
            let mut old = [0u8; 16];
            old.copy_from_slice(&d[o3 + 24..o3 + 40]);
            d[o3 + 24..o3 + 40].copy_from_slice(&b.addr);
            if l4 {
                let t = &mut d[o4..];
                match l.l4_proto {
                    6 => Tcp::new_unchecked(t).update_pseudo_addr(&old, &b.addr),
                    17 => Udp::new_unchecked(t).update_pseudo_addr(&old, &b.addr),
                    58 => {
                        let c = u16::from_be_bytes([t[2], t[3]]);
                        let c = checksum::update_bytes(c, &old, &b.addr);
                        t[2..4].copy_from_slice(&c.to_be_bytes());
                    }
                    _ => {}
                }
            }
        } else {
            let new = [b.addr[0], b.addr[1], b.addr[2], b.addr[3]];
            let old = [d[o3 + 16], d[o3 + 17], d[o3 + 18], d[o3 + 19]];
            Ipv4::new_unchecked(&mut d[o3..]).set_dst_update(new);
            if l4 {
                let t = &mut d[o4..];
                match l.l4_proto {
                    6 => Tcp::new_unchecked(t).update_pseudo_addr(&old, &new),
                    17 => Udp::new_unchecked(t).update_pseudo_addr(&old, &new),
                    _ => {}
                }
            }
        }
        if let Some(mac) = b.mac {
            if l.has_ethernet() {
                d[..6].copy_from_slice(&mac);
            }
        }
    }

    /// Drops idle connections, at most once per second of run-clock time (any jump counts:
    /// traces may step back). Returns whether it ran.
    fn sweep(&mut self, now: u64) -> bool {
        if now.abs_diff(self.last_sweep_ns) < 1_000_000_000 {
            return false;
        }
        self.last_sweep_ns = now;
        self.since_sweep = 0;
        self.conns.sweep(now);
        true
    }
}

/// FastPath token of a packet not for the VIP; otherwise the token is the tracked
/// connection's slot, the table's epoch and the backend id ([`Conns::token`]).
const FAST_PASS: u64 = u64::MAX;

/// The slot bits of a token's high half ([`Conns::token`]).
const TOKEN_SLOT: u64 = (1 << 26) - 1;
/// The epoch bits a token keeps.
const TOKEN_EPOCH: u64 = (1 << 22) - 1;

/// The slot a connection token names (unchecked).
#[inline(always)]
fn token_slot(token: u64) -> usize {
    (token >> 32 & TOKEN_SLOT) as usize
}

/// The connection-table key of a packet on the consolidated path, as `process` makes it.
fn fast_key(p: &FastPacket) -> WideKey {
    let mut k = *p.key;
    if p.fragment {
        k.sport = 0;
        k.dport = 0;
    }
    WideKey(k)
}

impl Maglev {
    /// Frees the slots of idle connections (expired ones are also replaced when their
    /// flow is seen again, so sweeping only matters for room). Counted per packet, so
    /// both paths sweep at the same packet whatever the batches.
    #[inline]
    fn tick(&mut self, now: u64) {
        self.since_sweep += 1;
        if self.since_sweep >= self.sweep_every {
            self.sweep(now);
        }
    }

    /// [`tick`](Self::tick) for the consolidated path, with `sweep`'s own test of the
    /// time inline: once a sweep is due by count, `tick` calls `sweep` on every packet
    /// until a second has passed, and most of those calls return at once (same effect,
    /// no call; the plain path keeps `tick`, where the inline test cost more than the
    /// call, docs/fastpath.md session 17).
    #[inline(always)]
    fn tick_fast(&mut self, now: u64) {
        self.since_sweep += 1;
        if self.since_sweep >= self.sweep_every && now.abs_diff(self.last_sweep_ns) >= 1_000_000_000
        {
            self.sweep(now);
        }
    }
}

/// One tracked connection, one cache line (56 bytes unaligned would straddle two for
/// about half the entries, and the batch prefetch fetches one).
#[derive(Clone, Copy, Debug)]
#[repr(align(64))]
struct Conn {
    key: WideKey,
    /// Stable backend id.
    id: u32,
    /// Last seen (run clock).
    seen: u64,
}

/// The connection table: flow → (stable backend id, last seen). A hit is one probe that
/// also refreshes the entry (the hot path of every packet). Connections sit densely in a
/// slab (a sweep costs what is tracked) behind a [`flow::Index`](crate::flow::Index), so
/// a batch can prefetch its entries before the lookups (see `Maglev::process_chunk`).
struct Conns {
    index: Index,
    slab: Vec<Conn>,
    /// Bumped by every sweep that removes connections (which moves others in the slab),
    /// so a FastPath token (slot, epoch) names the same connection while the epoch holds
    /// (tokens keep its low 22 bits, [`TOKEN_EPOCH`]: a sweep comes at most once a
    /// second of run clock, so a stale token would have to wait 4,194,304 sweeps, 48
    /// days, unchecked, even with entries that never time out, and its check also
    /// compares the backend id).
    epoch: u32,
    hasher: Hasher,
    capacity: usize,
    /// 0: connections never expire.
    timeout_ns: u64,
}

impl Conns {
    fn new(capacity: usize, timeout_ns: u64) -> Conns {
        Conns {
            index: Index::with_capacity(capacity),
            slab: Vec::with_capacity(capacity),
            epoch: 0,
            hasher: Hasher::default(),
            capacity,
            timeout_ns,
        }
    }

    #[inline]
    fn tag(&self, key: &WideKey) -> u32 {
        Index::tag(self.hasher.hash_one(key))
    }

    /// Loads the index entry and (when its first candidate is there) the connection for
    /// `tag`, ahead of [`Conns::get_mut`].
    #[inline]
    fn prefetch_index(&self, tag: u32) {
        self.index.prefetch(tag);
    }

    #[inline]
    fn prefetch_conn(&self, tag: u32) {
        if let Some(s) = self.index.find(tag, |_| true) {
            prefetch(&self.slab[s as usize]);
        }
    }

    /// The FastPath token of the connection in `slot` (< 2^26, the most `capacity`
    /// allows), on backend `id` (< 2^16 - 1): the epoch's bits 16-21 in the top 6 bits,
    /// the slot in the rest of the high half (where [`TokenLines`] reads it, under
    /// [`TOKEN_SLOT`]), the epoch's low 16 bits, the backend id in the low 16.
    #[inline]
    fn token(&self, slot: u32, id: u32) -> u64 {
        let e = u64::from(self.epoch) & TOKEN_EPOCH;
        (e >> 16) << 58 | (slot as u64) << 32 | (e & 0xffff) << 16 | (id as u16 as u64)
    }

    /// The slot a token names, if no sweep has moved connections since.
    #[inline]
    fn slot_of(&self, token: u64) -> Option<usize> {
        let s = token_slot(token);
        let e = (token >> 58) << 16 | (token >> 16) & 0xffff;
        (e == u64::from(self.epoch) & TOKEN_EPOCH && s < self.slab.len()).then_some(s)
    }

    #[inline]
    fn find(&self, tag: u32, key: &WideKey) -> Option<u32> {
        let slab = &self.slab;
        self.index.find(tag, |s| slab[s as usize].key == *key)
    }

    /// The live entry's backend id, its idle timer refreshed; an expired one is a miss
    /// (and is overwritten by the `learn` that follows).
    #[inline]
    fn get_mut(&mut self, tag: u32, key: &WideKey, now: u64) -> Option<&mut u32> {
        let t = self.timeout_ns;
        let s = self.find(tag, key)?;
        let e = &mut self.slab[s as usize];
        if t != 0 && now.saturating_sub(e.seen) > t {
            return None;
        }
        e.seen = e.seen.max(now);
        Some(&mut e.id)
    }

    #[inline]
    fn learn(&mut self, tag: u32, key: WideKey, id: u32, now: u64) -> Learned {
        if let Some(s) = self.find(tag, &key) {
            let e = &mut self.slab[s as usize];
            e.id = id;
            e.seen = now;
            return Learned::Updated;
        }
        if self.slab.len() >= self.capacity {
            return Learned::Full;
        }
        self.index.insert(tag, self.slab.len() as u32);
        self.slab.push(Conn { key, id, seen: now });
        Learned::Inserted
    }

    /// Forgets connections idle past the timeout. Walks the slab downwards, so the entry
    /// a removal swaps in from the end was already examined.
    fn sweep(&mut self, now: u64) {
        let t = self.timeout_ns;
        if t == 0 {
            return;
        }
        let mut removed = false;
        for i in (0..self.slab.len()).rev() {
            let c = self.slab[i];
            if now.saturating_sub(c.seen) <= t {
                continue;
            }
            self.index.remove(self.tag(&c.key), i as u32);
            removed = true;
            let last = self.slab.len() - 1;
            if i != last {
                let moved = self.slab[last];
                self.index
                    .replace(self.tag(&moved.key), last as u32, i as u32);
            }
            self.slab.swap_remove(i);
        }
        if removed {
            self.epoch = self.epoch.wrapping_add(1);
        }
    }

    fn len(&self) -> usize {
        self.slab.len()
    }
}

/// The table's choice for a new flow.
#[inline]
fn slot(table: &[u16], hasher: &FixedState, key: &WideKey) -> Option<usize> {
    if table.is_empty() {
        return None;
    }
    // Lemire's multiply-shift maps the hash onto 0..M without a division.
    let h = hasher.hash_one(key);
    let s = ((h as u128 * table.len() as u128) >> 64) as usize;
    Some(table[s] as usize)
}

/// The one check of a backend's weight, for the config and the `backends` command.
fn weight(w: i64) -> Result<u32, String> {
    u32::try_from(w)
        .ok()
        .filter(|&w| w <= MAX_WEIGHT)
        .ok_or_else(|| weight_err(w))
}

fn weight_err(v: impl std::fmt::Display) -> String {
    format!("{v} must be an integer in 0..={MAX_WEIGHT}")
}

fn parse_backends(p: &mut Params) -> Result<Vec<Backend>, ParamError> {
    let Some(v) = p.value("backends") else {
        return Err(p.err(
            "`backends` is required, e.g. backends = [{ addr = \"10.1.0.1\" }, { addr = \"10.1.0.2\", weight = 2 }]",
        ));
    };
    let Some(arr) = v.as_array() else {
        return Err(p.err("`backends` must be a list of tables like { addr = \"10.1.0.1\" }"));
    };
    let mut out = Vec::with_capacity(arr.len());
    for (n, e) in arr.iter().enumerate() {
        let Some(t) = e.as_table() else {
            return Err(p.err(format!(
                "`backends[{n}]` must be a table like {{ addr = \"10.1.0.1\" }}"
            )));
        };
        let s = |k: &str| -> Result<Option<&str>, ParamError> {
            match t.get(k) {
                None => Ok(None),
                Some(toml::Value::String(s)) => Ok(Some(s.as_str())),
                Some(v) => Err(p.err(format!(
                    "`backends[{n}].{k}` must be a string, not {}",
                    v.type_str()
                ))),
            }
        };
        let Some(a) = s("addr")? else {
            return Err(p.err(format!("`backends[{n}]` needs an `addr`")));
        };
        let addr: IpAddr = a.parse().map_err(|_| {
            p.err(format!(
                "`backends[{n}].addr` = \"{a}\" is not an IP address"
            ))
        })?;
        let mut b = Backend::new(addr);
        if let Some(m) = s("mac")? {
            b.mac = Some(parse_mac(m).ok_or_else(|| {
                p.err(format!(
                    "`backends[{n}].mac` = \"{m}\" is not a MAC like 02:00:00:00:01:01"
                ))
            })?);
        }
        if let Some(name) = s("name")? {
            b.name = name.to_string();
        }
        match t.get("weight") {
            None => {}
            Some(toml::Value::Integer(w)) => {
                b.weight = weight(*w).map_err(|e| p.err(format!("`backends[{n}].weight` = {e}")))?
            }
            Some(v) => return Err(p.err(format!("`backends[{n}].weight` = {}", weight_err(v)))),
        }
        if let Some(k) = t
            .keys()
            .find(|k| !matches!(k.as_str(), "addr" | "mac" | "weight" | "name"))
        {
            return Err(p.err(format!(
                "`backends[{n}]`: unknown key `{k}` (known: addr, mac, weight, name)"
            )));
        }
        out.push(b);
    }
    Ok(out)
}

/// Parses `backends ADDR[:WEIGHT][@MAC] …` into a backend set (not yet checked against
/// the VIP's family or for duplicates: [`Maglev::set_backends`] does that).
fn parse_command(cmd: &str) -> Result<Vec<Backend>, String> {
    let mut words = cmd.split_whitespace();
    if words.next() != Some("backends") {
        return Err(format!(
            "unknown command `{cmd}` (commands: backends ADDR[:WEIGHT][@MAC]…)"
        ));
    }
    let mut set = Vec::new();
    for w in words {
        let (rest, mac) = match w.split_once('@') {
            Some((r, m)) => (
                r,
                Some(parse_mac(m).ok_or_else(|| format!("`{m}` is not a MAC"))?),
            ),
            None => (w, None),
        };
        let (addr, weight) = match rest.rsplit_once(':') {
            Some((a, wt)) if !a.contains(':') || a.starts_with('[') => (
                a.trim_matches(['[', ']']),
                wt.parse::<i64>()
                    .map_err(|_| weight_err(format_args!("weight `{wt}`")))
                    .and_then(weight)
                    .map_err(|e| format!("backend `{w}`: {e}"))?,
            ),
            _ => (rest, 1),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("`{addr}` is not an IP address"))?;
        set.push(Backend {
            addr,
            mac,
            weight,
            name: addr.to_string(),
        });
    }
    if set.is_empty() {
        return Err("give at least one backend".into());
    }
    Ok(set)
}

impl Nf for Maglev {
    /// The lookup table, the backends and the connection table at its capacity.
    fn memory(&self) -> usize {
        use crate::flow::footprint::{index_bytes, vec_bytes};
        vec_bytes::<u16>(self.m)
            + vec_bytes::<Live>(MAX_BACKENDS.min(self.m))
            + index_bytes(self.conns.capacity)
            + vec_bytes::<Conn>(self.conns.capacity)
    }

    fn profile(&self) -> &Profile {
        &self.profile
    }

    fn process(&mut self, batch: &mut Batch, _cx: &Context) {
        // A node fed by several others may get more than one batch's worth.
        for chunk in batch.as_mut_slice().chunks_mut(MAX_BATCH) {
            self.process_chunk(chunk);
        }
    }

    /// `backends ADDR[:WEIGHT][@MAC] …` replaces the backend set: tracked flows stay on
    /// their backend while it remains; flows of removed backends are rehashed.
    fn control(&mut self, cmd: &str) -> Result<String, String> {
        let set = parse_command(cmd)?;
        self.set_backends(&set)?;
        Ok(format!("{} backend(s)", set.len()))
    }

    /// The lookup table is filled off the worker; the worker checks the set and swaps in.
    fn preparer(&self) -> Option<super::Preparer> {
        let m = self.m;
        Some(std::sync::Arc::new(move |cmd: &str| {
            let set = parse_command(cmd)?;
            let table = populate(&weighted(&set), m);
            Ok(Box::new(PreparedBackends { set, table }) as super::Prepared)
        }))
    }

    fn control_prepared(
        &mut self,
        cmd: &str,
        prepared: &mut super::Prepared,
    ) -> Result<String, String> {
        let Some(p) = prepared.downcast_mut::<PreparedBackends>() else {
            return self.control(cmd);
        };
        let table = std::mem::take(&mut p.table);
        // The old table goes back in `prepared`, to be freed by the caller.
        p.table = self.set_backends_with(&p.set, Some(table))?;
        Ok(format!("{} backend(s)", p.set.len()))
    }

    fn consolidate(&self) -> Option<&dyn Consolidate> {
        Some(self)
    }

    fn consolidate_mut(&mut self) -> Option<&mut dyn Consolidate> {
        Some(self)
    }

    fn stats(&self) -> Stats {
        let mut s: Stats = named(&[
            ("backends", self.backends.len() as u64),
            ("tracked_flows", self.conns.len() as u64),
            ("new_flows", self.new_flows),
            ("rehashed_flows", self.rehashed),
            ("table_full", self.table_full),
            ("not_vip", self.passed),
        ]);
        s.extend(
            self.known
                .iter()
                .map(|k| (format!("backend {} packets", k.addr).into(), k.packets)),
        );
        s
    }
}

impl Consolidate for Maglev {
    fn state_function(&self) -> &'static str {
        "connection idle-timer refresh, sweep step (folded); per-backend counter (in the entry)"
    }

    fn fast_valid(&self, token: u64, p: &FastPacket) -> bool {
        self.valid_at(token, p.now_ns)
    }

    /// The run's state functions only move `seen` forward, so a check that passes before
    /// them passes after them, up to the one whose tick sweeps (its own check comes
    /// before its sweep): the sweep may move connections, and the visits after it are
    /// checked one by one.
    fn fast_vouch(&self, run: &FastRun) -> usize {
        if let Some(span) = run
            .span()
            .filter(|&s| self.no_sweep_in(run.visits.len(), s))
        {
            // No visit's tick can sweep: each connection is checked at the run's last
            // time, no laxer than its own visit's, without reading the visit's facts.
            return run
                .visits
                .iter()
                .position(|v| !self.valid_at(v.token, span.1))
                .unwrap_or(run.visits.len());
        }
        let mut since = self.since_sweep;
        for (n, v) in run.visits.iter().enumerate() {
            let now = run.fact(&v).now_ns;
            if !self.valid_at(v.token, now) {
                return n;
            }
            since += 1;
            if since >= self.sweep_every && now.abs_diff(self.last_sweep_ns) >= 1_000_000_000 {
                return n + 1;
            }
        }
        run.visits.len()
    }

    fn fast_prefetches(&self) -> bool {
        true
    }

    /// Packets balanced onto a backend: those not for the VIP only pass.
    fn fast_work(&self) -> Option<u64> {
        Some(self.known.iter().map(|k| k.packets).sum())
    }

    /// The tracked connection a token names: its slot is the token's high half.
    fn fast_lines(&self) -> TokenLines {
        TokenLines::of(&self.conns.slab, TOKEN_SLOT)
    }

    fn fast_prefetch(&self, token: u64) {
        if let Some(c) = self.conns.slab.get(token_slot(token)) {
            prefetch(c);
        }
    }

    fn fast_state(&mut self, token: u64, p: &FastPacket) {
        self.state_at(token, p.now_ns, || fast_key(p));
    }

    fn fast_state_run(&mut self, run: &FastRun) {
        if run
            .span()
            .is_some_and(|s| self.no_sweep_in(run.visits.len(), s))
        {
            // No visit's tick can sweep: the ticks only count, so they are counted at
            // once and each visit only refreshes its connection (nothing else sweeps).
            self.since_sweep += run.visits.len() as u64;
            for v in run.visits.iter() {
                self.refresh_at(v.token, run.fact(&v).now_ns, || fast_key(&run.packet(&v)));
            }
            return;
        }
        for v in run.visits.iter() {
            let now = run.fact(&v).now_ns;
            self.state_at(v.token, now, || fast_key(&run.packet(&v)));
        }
    }

    /// The per-backend counters (and `not_vip`) are counted in FastPath's entries, so
    /// hits that fold and hits that do not count alike; the token names the backend.
    fn fast_counts(&self) -> bool {
        true
    }

    /// The sweep tick and the connection's refresh remain.
    fn fast_states(&self) -> bool {
        true
    }

    fn fast_count(&mut self, token: u64, packets: u64) {
        if token == FAST_PASS {
            self.passed += packets;
        } else if let Some(k) = self.known.get_mut(token as u16 as usize) {
            k.packets += packets;
        }
    }

    /// A hit's refresh is `seen = max(seen, t)`, which commutes with every other
    /// refresh, and its tick only counts: no decision reads either before the horizon
    /// (docs/fastpath.md, "Fold-back", Maglev).
    fn fast_folds(&self) -> bool {
        true
    }

    /// Tracked connections and packets not for the VIP (no state but the tick).
    fn fast_foldable(&self, _token: u64) -> bool {
        true
    }

    /// Every connection a hit of the period relies on was refreshed at `now` or later:
    /// none expires before `now` plus the idle timeout, and no sweep (the only thing
    /// that removes or moves a connection, or reads a tick count) runs within a second
    /// of the last one. A sweep is one pass, never under way across packets.
    fn fast_horizon(&self, now: u64) -> u64 {
        let t = self.conns.timeout_ns;
        let expiry = if t == 0 {
            u64::MAX
        } else {
            now.saturating_add(t)
        };
        expiry.min(self.last_sweep_ns.saturating_add(1_000_000_000))
    }

    /// The folded hits' refreshes, the last at `last_ns`: `seen = max(seen, last_ns)`,
    /// if the token's connection is still in its slot (no sweep comes before a fold).
    fn fast_fold(&mut self, token: u64, last_ns: u64) {
        if token == FAST_PASS {
            return;
        }
        if let Some(s) = self.conns.slot_of(token) {
            let c = &mut self.conns.slab[s];
            if c.id as u16 == token as u16 {
                c.seen = c.seen.max(last_ns);
            }
        }
    }

    /// The folded hits' ticks, counted at once (no sweep before the horizon).
    fn fast_skipped(&mut self, visits: u64) {
        self.since_sweep += visits;
    }

    fn fast_ticks(&self) -> bool {
        true
    }
}

impl Maglev {
    /// No tick of a fused run of `visits` visits spanning `span` can sweep
    /// ([`no_sweep_in`]): its vouch and state run then skip the per-visit sweep test.
    #[inline(always)]
    fn no_sweep_in(&self, visits: usize, span: (u64, u64)) -> bool {
        no_sweep_in(
            self.since_sweep,
            self.sweep_every,
            self.last_sweep_ns,
            visits,
            span,
        )
    }

    /// A consolidated packet's state function: the sweep tick and the connection's
    /// refresh (its backend's counter, or `not_vip`, is counted in FastPath's entry:
    /// `fast_count`); `key` gives the connection's key when the tick moved it.
    #[inline(always)]
    fn state_at(&mut self, token: u64, now: u64, key: impl FnOnce() -> WideKey) {
        self.tick_fast(now);
        self.refresh_at(token, now, key);
    }

    /// [`state_at`](Self::state_at) after its tick.
    #[inline(always)]
    fn refresh_at(&mut self, token: u64, now: u64, key: impl FnOnce() -> WideKey) {
        if token == FAST_PASS {
            return;
        }
        // The tick may have swept (and moved the connection): then find it by its key.
        let slot = self.conns.slot_of(token).or_else(|| {
            let key = key();
            self.conns
                .find(self.conns.tag(&key), &key)
                .map(|s| s as usize)
        });
        if let Some(c) = slot.and_then(|s| self.conns.slab.get_mut(s)) {
            c.seen = c.seen.max(now);
        }
    }
}

impl Maglev {
    /// Whether a token still names a live connection to an existing backend at `now`.
    #[inline]
    fn valid_at(&self, token: u64, now: u64) -> bool {
        if token == FAST_PASS {
            return true;
        }
        // Same epoch: the slot holds the connection recorded (slots move only in sweeps),
        // whose backend changes only by a control command (which invalidates the entry)
        // or once it expired, which this checks as `get_mut` would.
        let Some(slot) = self.conns.slot_of(token) else {
            return false;
        };
        let c = &self.conns.slab[slot];
        let t = self.conns.timeout_ns;
        !(t != 0 && now.saturating_sub(c.seen) > t)
            && c.id as u16 == token as u16
            && self
                .known
                .get(c.id as usize)
                .is_some_and(|k| k.index != GONE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_not_to_the_vip_are_read_in_place() {
        // Only packets to the VIP are rewritten: the others must stay views (no copy).
        let mut f = vec![0u8; 54];
        f[12] = 8;
        f[14] = 0x45;
        f[16..18].copy_from_slice(&40u16.to_be_bytes());
        f[14 + 8] = 64;
        f[14 + 9] = 6;
        f[26..30].copy_from_slice(&[10, 0, 0, 9]);
        f[30..34].copy_from_slice(&[10, 0, 0, 7]);
        let bytes: &'static [u8] = f.leak();
        let mut p = Packet::from_bytes(&[0; 60]);
        assert!(p.set_view(bytes));
        let vip = "10.0.0.100".parse().unwrap();
        let b = Backend::new("10.0.0.1".parse().unwrap());
        let mut lb = Maglev::new(vip, &[b], 251, 64, 1_000_000_000).unwrap();
        let mut batch = Batch::new();
        batch.push(p);
        lb.process(&mut batch, &Context { ports: 2 });
        assert!(batch.as_mut_slice()[0].is_view());
    }

    #[test]
    fn weights_are_capped_alike_in_commands_and_config() {
        let b = |a: &str| Backend::new(a.parse().unwrap());
        let vip = "10.0.0.100".parse().unwrap();
        let mut lb = Maglev::new(vip, &[b("10.0.0.1")], 251, 64, 1_000_000_000).unwrap();
        let e = lb.control("backends 10.0.0.1:65536").unwrap_err();
        assert!(e.contains("must be an integer in 0..=65535"), "{e}");
        assert!(lb.control("backends 10.0.0.1:4294967295").is_err());
        assert!(lb.control("backends 10.0.0.1:-1").is_err());
        assert_eq!(
            lb.control("backends 10.0.0.1:65535 10.0.0.2:0").unwrap(),
            "2 backend(s)"
        );
        let e = lb
            .set_backends(&[b("10.0.0.1").with_weight(70_000)])
            .unwrap_err();
        assert!(e.contains("0..=65535"), "{e}");
        assert!(lb.control("backendsx 10.0.0.1").is_err());
    }

    /// A backend change fills its table off the worker (the preparer knows the table
    /// size); applying the prepared change equals `control`, hands the old table back for
    /// freeing off the worker, and a set the worker refuses changes nothing.
    #[test]
    fn prepared_backends_equal_control_and_return_the_old_table() {
        let b = |a: &str| Backend::new(a.parse().unwrap());
        let vip: IpAddr = "10.0.0.100".parse().unwrap();
        let new = || Maglev::new(vip, &[b("10.0.0.1")], 251, 64, 1_000_000_000).unwrap();
        let (mut direct, mut prepared) = (new(), new());
        let before = prepared.table();
        let cmd = "backends 10.0.0.2:3 10.0.0.3 10.0.0.4:0";
        let prepare = prepared
            .preparer()
            .expect("maglev prepares backend changes");
        let mut p = prepare(cmd).unwrap();
        assert_eq!(direct.control(cmd).unwrap(), "3 backend(s)");
        assert_eq!(
            prepared.control_prepared(cmd, &mut p).unwrap(),
            "3 backend(s)"
        );
        assert_eq!(prepared.table(), direct.table());
        assert_ne!(prepared.table(), before);
        let old = &p.downcast_ref::<PreparedBackends>().unwrap().table;
        assert_eq!(old.len(), 251, "the replaced table goes back to be freed");
        // Family checks stay on the worker: an IPv6 backend for an IPv4 VIP is refused
        // after preparing, and the running set stays.
        let v6 = "backends 2001:db8::1";
        let mut p = prepare(v6).unwrap();
        assert!(prepared.control_prepared(v6, &mut p).is_err());
        assert_eq!(prepared.table(), direct.table());
        assert!(prepare("backends").is_err());
    }

    #[test]
    fn primes() {
        let p: Vec<u64> = (0..30).filter(|&n| is_prime(n)).collect();
        assert_eq!(p, [2, 3, 5, 7, 11, 13, 17, 19, 23, 29]);
        assert!(is_prime(65537) && is_prime(MAX_TABLE_SIZE as u64) && !is_prime(65536));
    }

    #[test]
    fn macs() {
        assert_eq!(parse_mac("02:00:00:00:01:0f"), Some([2, 0, 0, 0, 1, 15]));
        assert_eq!(parse_mac("02:00:00:00:01"), None);
        assert_eq!(parse_mac("02:00:00:00:01:01:01"), None);
        assert_eq!(parse_mac("02:00:00:00:01:xyz"), None);
    }

    fn key(i: u32) -> WideKey {
        let mut k = FlowKey {
            src: [0; 16],
            dst: [0; 16],
            sport: i as u16,
            dport: 80,
            proto: 6,
            family: 4,
        };
        k.src[..4].copy_from_slice(&i.to_be_bytes());
        WideKey(k)
    }

    #[test]
    fn conns_sweep_keeps_exactly_the_live_ones_findable() {
        let mut c = Conns::new(1000, 10);
        for i in 0..1000u32 {
            let k = key(i);
            assert_eq!(
                c.learn(c.tag(&k), k, i, u64::from(i % 7)),
                Learned::Inserted
            );
        }
        let k = key(5000);
        assert_eq!(c.learn(c.tag(&k), k, 1, 0), Learned::Full);
        // At 14, entries last seen at 0..=3 are idle for more than 10.
        c.sweep(14);
        assert_eq!(c.len(), (0..1000).filter(|i| i % 7 >= 4).count());
        for i in 0..1000u32 {
            let k = key(i);
            let got = c.get_mut(c.tag(&k), &k, 14).map(|id| *id);
            assert_eq!(got, (i % 7 >= 4).then_some(i), "flow {i}");
        }
    }

    /// Fold-back: hits whose refreshes were deferred, folded in later with the time of
    /// the last one (`fast_fold`), leave the connection as the refreshes would (`seen`
    /// moved forward, never back); a token of an earlier epoch (a sweep moved the
    /// connections) or of another backend folds nothing. The counters come through
    /// `fast_count` (by the token's backend id, or `not_vip`), the ticks through
    /// `fast_skipped`; the horizon is the idle timeout or the next possible sweep.
    #[test]
    fn a_folded_refresh_equals_the_refreshes_it_defers() {
        const SEC: u64 = 1_000_000_000;
        let vip: IpAddr = "10.0.0.100".parse().unwrap();
        let backends = [Backend::new("10.0.0.1".parse().unwrap())];
        let mut m = Maglev::new(vip, &backends, 251, 64, 10 * SEC).unwrap();
        let (k0, k1) = (key(1), key(2));
        let t0 = m.conns.tag(&k0);
        assert_eq!(m.conns.learn(t0, k0, 0, SEC), Learned::Inserted);
        let t1 = m.conns.tag(&k1);
        assert_eq!(m.conns.learn(t1, k1, 0, SEC), Learned::Inserted);
        let s0 = m.conns.find(t0, &k0).unwrap();
        let token = m.conns.token(s0, 0);
        assert!(m.fast_folds() && m.fast_foldable(token) && m.fast_foldable(FAST_PASS));
        // The sequence: a refresh per hit.
        let mut a = Maglev::new(vip, &backends, 251, 64, 10 * SEC).unwrap();
        a.conns.learn(t0, k0, 0, SEC);
        for t in [2 * SEC, 3 * SEC, 4 * SEC] {
            a.refresh_at(token, t, || k0);
        }
        m.refresh_at(token, 2 * SEC, || k0);
        m.fast_fold(token, 4 * SEC);
        assert_eq!(
            m.conns.slab[s0 as usize].seen,
            a.conns.slab[s0 as usize].seen
        );
        assert_eq!(m.conns.slab[s0 as usize].seen, 4 * SEC);
        // Never back: a later slow-path refresh stands.
        m.conns.get_mut(t0, &k0, 6 * SEC);
        m.fast_fold(token, 5 * SEC);
        assert_eq!(m.conns.slab[s0 as usize].seen, 6 * SEC);
        // Another backend id in the token: nothing.
        m.fast_fold(m.conns.token(s0, 1), 9 * SEC);
        assert_eq!(m.conns.slab[s0 as usize].seen, 6 * SEC);
        // Counters by the token's backend and for packets not for the VIP.
        m.fast_count(token, 5);
        m.fast_count(FAST_PASS, 3);
        assert_eq!(m.known[0].packets, 5);
        assert_eq!(m.passed, 3);
        // Ticks of folded hits.
        let since = m.since_sweep;
        m.fast_skipped(7);
        assert_eq!(m.since_sweep, since + 7);
        // The horizon: the idle timeout from the period's start, or the first time a
        // sweep may run (a second after the last one).
        m.last_sweep_ns = 20 * SEC;
        assert_eq!(m.fast_horizon(20 * SEC + 5), 21 * SEC);
        m.last_sweep_ns = 0;
        assert_eq!(m.fast_horizon(0), SEC);
        m.last_sweep_ns = 100 * SEC;
        let mut n = Maglev::new(vip, &backends, 251, 64, SEC / 2).unwrap();
        n.last_sweep_ns = 100 * SEC;
        assert_eq!(n.fast_horizon(100 * SEC + 7), 100 * SEC + 7 + SEC / 2);
        // A sweep that removes a connection starts a new epoch: the old token folds
        // nothing (the flow's entry fails its check before any such fold).
        m.conns.sweep(15 * SEC);
        let s1 = m.conns.find(t1, &k1);
        assert_eq!(s1, None, "k1 idle past the timeout");
        let s0 = m.conns.find(t0, &k0).unwrap();
        let seen = m.conns.slab[s0 as usize].seen;
        m.fast_fold(token, 16 * SEC);
        assert_eq!(m.conns.slab[s0 as usize].seen, seen);
        assert!(!m.valid_at(token, 15 * SEC));
        assert!(m.valid_at(m.conns.token(s0, 0), 15 * SEC));
    }

    /// A token keeps 22 bits of the epoch: one from 65,536 sweeps ago (which 16 bits let
    /// through) names nothing, one from 2^22 ago would; the slot and the backend id
    /// come back whole at their largest.
    #[test]
    fn a_token_from_65536_epochs_ago_is_stale() {
        let mut c = Conns::new(8, 0);
        for i in 0..4 {
            c.slab.push(Conn {
                key: key(i),
                id: 0,
                seen: 0,
            });
        }
        c.epoch = 5;
        let old = c.token(3, 7);
        assert_eq!(c.slot_of(old), Some(3));
        c.epoch = 5 + 65_536;
        assert_eq!(c.slot_of(old), None);
        c.epoch = 5 + (1 << 22);
        assert_eq!(c.slot_of(old), Some(3));
        c.epoch = u32::MAX;
        let t = c.token(TOKEN_SLOT as u32, 0xfffe);
        assert_eq!(
            (token_slot(t), t as u16, t != FAST_PASS),
            (TOKEN_SLOT as usize, 0xfffe, true)
        );
        assert_eq!(t >> 58 << 16 | (t >> 16) & 0xffff, TOKEN_EPOCH);
    }

    #[test]
    fn small_table_is_full_and_even() {
        let t = populate(&[("a", 1), ("b", 1), ("c", 1)], 7);
        assert_eq!(t.len(), 7);
        let n: Vec<usize> = (0..3)
            .map(|i| t.iter().filter(|&&x| x == i).count())
            .collect();
        assert!(n.iter().all(|&c| c == 2 || c == 3), "{n:?}");
        assert!(populate(&[("a", 0)], 7).is_empty());
    }
}
