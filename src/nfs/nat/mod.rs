//! A source NAT with MazuNAT's semantics (Click's `conf/mazu-nat.click`: `IPRewriter` with
//! the pattern `PUBLIC PORTS - -`, plus `ICMPPingRewriter` and `ICMPRewriter`, as that
//! file suggests for ICMP).
//!
//! - Direction comes from addresses: a packet whose source lies in an `inside` prefix goes
//!   out; any other packet comes in. Inside-to-inside packets pass untouched.
//! - Outgoing TCP/UDP flows (keyed by their full 5-tuple, as `IPRewriter` keys them) and
//!   ICMP echo sessions (keyed by the identifier) get a (public address, port) from a
//!   per-protocol pool; source address and port (ICMP: identifier) are rewritten, every
//!   checksum patched incrementally (RFC 1624; a UDP checksum of 0 stays 0).
//! - An incoming packet is translated back only when it is the exact reply of a live
//!   mapping (address- and port-dependent filtering, as `IPRewriter` matches the reply
//!   5-tuple); otherwise it is dropped as `no-mapping`. ICMP errors quoting a mapped packet
//!   are translated both ways, quoted header included (`ICMPRewriter`).
//! - Each mapping holds its own public port, so a live mapping is never shared or reused;
//!   freed ports go to the back of a FIFO free list, so a port is reused as late as possible.
//! - Mappings expire after an idle timeout per protocol, on the run clock (docs/time.md,
//!   so capture time stepping back never ages a mapping); TCP mappings switch to the
//!   short `tcp_linger` once a FIN was seen in both directions or any RST (a SYN from
//!   inside reopens them). A sweep once per second of clock time frees expired mappings;
//!   a lookup that finds an expired one treats it as gone at once.
//! - Non-IPv4 packets (IPv6, ARP, …) pass untouched and are counted: MazuNAT translates
//!   IPv4 only, and IPv6 needs no address sharing. Later IPv4 fragments carry no ports:
//!   inside-to-inside ones pass untouched like every inside-to-inside packet (MazuNAT
//!   routes those around its rewriter); the others are dropped (`fragment`), as MazuNAT's
//!   `IPRewriter` kills non-first fragments on its pattern inputs (`tcprewriter.cc`,
//!   `udprewriter.cc`): without reassembly no port says which mapping they belong to.
//!   First fragments are translated.
//!   IPv4 protocols other than TCP, UDP and ICMP are dropped (`unsupported`), as MazuNAT's
//!   classifiers drop them. There is no hairpinning: an inside packet to a public address
//!   is translated and sent on like any other.
//! - Timeouts default to RFC values rather than `IPRewriter`'s (24 h for TCP, 4 min after
//!   FIN/RST): 7440 s for open TCP (RFC 5382), 4 s linger, 300 s UDP, 60 s ICMP.
//! - `set_pool` changes the public addresses and ports between batches: live mappings keep
//!   theirs until they end (even outside the new pool; their replies are still translated
//!   back), new flows draw from the new pool, skipping pairs live mappings still hold.
//!
//! Config lists (`inside`, `public`) are comma/space separated strings, since NF
//! parameters have no list-of-strings reader yet. Direction is by prefix, not by ingress
//! port: replayed traces draw ingress ports at random, addresses are what they carry.
//!
//! Hot path: per batch, every packet's index entry is hashed and prefetched, then the
//! mappings those name, then packets are translated, so a batch's cache misses overlap
//! (see `flow::Index`). Nothing allocates per packet: the slab, both indexes and the free lists
//! are sized from `capacity` and the pool up front.

use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::net::Ipv4Addr;

use super::consolidate::FastRun;
use super::nf::{named, Stats};
use super::nf::{Consolidate, Context, FastPacket, Nf, Profile, TokenLines};
use super::params::{ParamDoc, ParamError, Params};
use crate::flow::{prefetch, FlowKey, Hasher, Index};
use crate::packet::bytes::{be16, be32, put16, put32};
use crate::packet::checksum::{fold32, update16, update32};
use crate::packet::{Batch, FastMark, Fields, L3Kind, Layers, Packet, MAX_BATCH};

const NO_MAPPING: u8 = 0;
const POOL_EXHAUSTED: u8 = 1;
const TABLE_FULL: u8 = 2;
const FRAGMENT: u8 = 3;
const UNSUPPORTED: u8 = 4;
const MALFORMED: u8 = 5;

const TCP: u8 = 6;
const UDP: u8 = 17;
const ICMP: u8 = 1;

const SEC: u64 = 1_000_000_000;
/// Expired mappings are collected at most this often (capture time).
const SWEEP_EVERY_NS: u64 = SEC;
/// Mappings a sweep in progress examines per packet: bounds the per-packet cost whatever
/// the number of live mappings or the gaps in capture time.
const SWEEP_STEP: usize = 2;
/// Bounds the free lists' memory: 12 bytes per (address, port) of the pool.
const MAX_POOL: usize = 1 << 22;

// Mapping state bits.
const LIVE: u8 = 1;
const FIN_OUT: u8 = 2;
const FIN_IN: u8 = 4;
const RST: u8 = 8;

/// Everything the NAT is configured with; `Default` is the documented defaults.
#[derive(Clone, Debug)]
pub struct NatConfig {
    /// Inside prefixes (address, length).
    pub inside: Vec<(Ipv4Addr, u8)>,
    pub public: Vec<Ipv4Addr>,
    pub ports: (u16, u16),
    /// Idle timeouts in ns; 0 means never.
    pub tcp_timeout_ns: u64,
    pub tcp_linger_ns: u64,
    pub udp_timeout_ns: u64,
    pub icmp_timeout_ns: u64,
    /// Most live mappings.
    pub capacity: usize,
}

impl Default for NatConfig {
    fn default() -> Self {
        NatConfig {
            inside: vec![
                (Ipv4Addr::new(10, 0, 0, 0), 8),
                (Ipv4Addr::new(172, 16, 0, 0), 12),
                (Ipv4Addr::new(192, 168, 0, 0), 16),
            ],
            public: vec![Ipv4Addr::new(198, 51, 100, 1)],
            ports: (1024, 65535),
            // RFC 5382 REQ-5: an established TCP mapping lives at least 2 h 4 min.
            tcp_timeout_ns: 7440 * SEC,
            tcp_linger_ns: 4 * SEC,
            // RFC 4787 REQ-5 asks for at least 2 min; 5 min is IPRewriter's default.
            udp_timeout_ns: 300 * SEC,
            icmp_timeout_ns: 60 * SEC,
            capacity: 1 << 18,
        }
    }
}

/// One translation. Checksum deltas are one's-complement sums of (new − old) words,
/// computed once so a packet's rewrite is a store and an add per checksum. One cache line.
#[derive(Clone, Copy, Debug)]
#[repr(align(64))]
struct Mapping {
    out_key: OutKey,
    inside: u32,
    remote: u32,
    public: u32,
    inside_port: u16,
    remote_port: u16,
    public_port: u16,
    proto: u8,
    state: u8,
    /// Capture time after which the mapping is dead.
    deadline: u64,
    /// Position in `Nat::live`.
    pos: u32,
    /// Which mapping this is (the creation count): FastPath tokens name it, so a flow's
    /// entry never outlives the mapping it was recorded with.
    serial: u32,
    ip_out: u16,
    l4_out: u16,
    ip_in: u16,
    l4_in: u16,
}

/// The inside-side 5-tuple (ICMP: identifier as source port, destination port 0), packed
/// into two words so hashing is two writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct OutKey(u64, u64);

impl OutKey {
    #[inline]
    fn new(src: u32, dst: u32, sport: u16, dport: u16, proto: u8) -> OutKey {
        OutKey(
            (src as u64) << 32 | dst as u64,
            (sport as u64) << 24 | (dport as u64) << 8 | proto as u64,
        )
    }
}

/// (public address, public port, protocol) packed.
#[inline]
fn pub_key(addr: u32, port: u16, proto: u8) -> u64 {
    (addr as u64) << 24 | (port as u64) << 8 | proto as u64
}

#[inline]
fn pool_index(proto: u8) -> usize {
    match proto {
        TCP => 0,
        UDP => 1,
        _ => 2,
    }
}

/// One's-complement sum of `new - old` over 16-bit words.
#[inline]
fn delta(old: &[u16], new: &[u16]) -> u16 {
    let s: u32 = old.iter().map(|&o| u32::from(!o)).sum::<u32>()
        + new.iter().map(|&n| u32::from(n)).sum::<u32>();
    fold32(s)
}

/// The checksum after adding `d` to the covered data (RFC 1624 eqn. 3, pre-summed).
#[inline]
fn patch(c: u16, d: u16) -> u16 {
    !fold32(u32::from(!c) + u32::from(d))
}

#[inline]
fn hi(a: u32) -> u16 {
    (a >> 16) as u16
}

#[inline]
fn lo(a: u32) -> u16 {
    a as u16
}

/// The public (address, port) pairs still free, per protocol, oldest-freed first.
struct Pool {
    addrs: Vec<u32>,
    lo: u16,
    hi: u16,
    /// (worker, workers): this instance owns the pairs whose index in the pool (address
    /// index × range + port offset) is `worker` modulo `workers`, so sharded workers
    /// never hand out the same pair.
    share: (u32, u32),
    /// Entries are `address index << 16 | port`. Capacity is the pool's size and every
    /// pair is either here or held by one live mapping, so pushes never reallocate.
    free: [VecDeque<u32>; 3],
    /// The free lists are filled. `Nat::new` leaves them empty ([`Pool::pending`]): a
    /// sharded run replaces the pool with the worker's share before any packet, so
    /// filling the whole pool first was ~17 M instructions a chain thrown away.
    built: bool,
}

impl Pool {
    fn new(
        addrs: &[Ipv4Addr],
        lo: u16,
        hi: u16,
        share: (u32, u32),
        live: impl Fn(u32, u16, u8) -> bool,
    ) -> Pool {
        let mut pool = Pool::pending(addrs, lo, hi, share);
        pool.fill(live);
        pool
    }

    /// A pool whose free lists are filled only when first needed ([`Pool::ensure`]):
    /// until then no mapping holds a pair, so every pair of the share is free. The lists'
    /// memory is taken here (untouched: no page is faulted in), so `Nat::new` allocates
    /// what `memory()` reports and in the order it always did; only the fill waits.
    fn pending(addrs: &[Ipv4Addr], lo: u16, hi: u16, share: (u32, u32)) -> Pool {
        let n = addrs.len() * (usize::from(hi - lo) + 1);
        let addrs: Vec<u32> = addrs.iter().map(|a| u32::from(*a)).collect();
        Pool {
            addrs,
            lo,
            hi,
            share,
            free: [(); 3].map(|_| VecDeque::with_capacity(n)),
            built: false,
        }
    }

    /// Fills the free lists with this share's pairs that no live mapping holds.
    fn fill(&mut self, live: impl Fn(u32, u16, u8) -> bool) {
        let range = usize::from(self.hi - self.lo) + 1;
        // Only this share's pairs (index K modulo N, `owns`), in index order: a worker's
        // pool of N was built by testing all N shares' pairs (and a hash lookup each),
        // ~25 M instructions a worker for four addresses (session 28).
        let (w, step) = (self.share.0 as usize, (self.share.1 as usize).max(1));
        for (q, proto) in self.free.iter_mut().zip([TCP, UDP, ICMP]) {
            q.clear();
            // Pair index `i · range + k` walked by `step` without a division a pair.
            let (mut i, mut k) = (w / range, w % range);
            while i < self.addrs.len() {
                let p = self.lo + k as u16;
                // A pair still held by a mapping from an earlier pool comes back when
                // that mapping ends.
                if !live(self.addrs[i], p, proto) {
                    q.push_back((i as u32) << 16 | u32::from(p));
                }
                k += step;
                while k >= range {
                    k -= range;
                    i += 1;
                }
            }
        }
        self.built = true;
    }

    /// Fills a pending pool's free lists (no pair is held yet). Once per pool.
    #[cold]
    fn build(&mut self) {
        self.fill(|_, _, _| false);
    }

    #[inline]
    fn ensure(&mut self) {
        if !self.built {
            self.build();
        }
    }

    /// Free pairs for the protocol at `pool_index` `k`.
    fn free_count(&self, k: usize) -> usize {
        if self.built {
            self.free[k].len()
        } else {
            self.size()
        }
    }

    /// Entries the free lists hold room for (all three, as built).
    fn capacity(&self) -> usize {
        self.free.iter().map(|q| q.capacity()).sum()
    }

    #[inline]
    fn take(&mut self, proto: u8) -> Option<(u32, u16)> {
        let e = self.free[pool_index(proto)].pop_front()?;
        Some((self.addrs[(e >> 16) as usize], e as u16))
    }

    /// Returns a pair; pairs outside this pool (from a pool replaced by `set_pool`) are
    /// forgotten.
    fn give(&mut self, addr: u32, port: u16, proto: u8) {
        if port < self.lo || port > self.hi {
            return;
        }
        if let Some(i) = self.addrs.iter().position(|&a| a == addr) {
            if !owns(self.share, self.lo, self.hi, i, port) {
                return;
            }
            let q = &mut self.free[pool_index(proto)];
            if q.len() < q.capacity() {
                q.push_back((i as u32) << 16 | u32::from(port));
            }
        }
    }

    /// Pairs this instance owns.
    fn size(&self) -> usize {
        let all = self.addrs.len() * (usize::from(self.hi - self.lo) + 1);
        let (w, n) = (self.share.0 as usize, self.share.1 as usize);
        all / n + usize::from(w < all % n)
    }
}

/// Whether pair (address index `i`, `port`) of pool `lo..=hi` belongs to `share`.
#[inline]
fn owns(share: (u32, u32), lo: u16, hi: u16, i: usize, port: u16) -> bool {
    let idx = i * (usize::from(hi - lo) + 1) + usize::from(port - lo);
    idx % share.1 as usize == share.0 as usize
}

fn check_pool(public: &[Ipv4Addr], lo: u16, hi: u16) -> Result<(), String> {
    if public.is_empty() {
        return Err("the public address list is empty".into());
    }
    if lo == 0 || lo > hi {
        return Err(format!(
            "port range {lo}-{hi} must be non-empty and not start at 0"
        ));
    }
    let n = public.len() * (usize::from(hi - lo) + 1);
    if n > MAX_POOL {
        return Err(format!(
            "{n} public (address, port) pairs is more than the {MAX_POOL} supported"
        ));
    }
    Ok(())
}

pub struct Nat {
    profile: Profile,
    inside: Vec<(u32, u32)>,
    tcp_timeout_ns: u64,
    tcp_linger_ns: u64,
    udp_timeout_ns: u64,
    icmp_timeout_ns: u64,
    capacity: usize,
    pool: Pool,
    hasher: Hasher,
    /// Inside 5-tuple → slot.
    out: Index,
    /// (public address, port, protocol) → slot.
    back: Index,
    slab: Vec<Mapping>,
    free_slots: Vec<u32>,
    /// Slots of the live mappings, densely, so sweeps cost what is live.
    live: Vec<u32>,
    /// `live[..sweep_cursor]` is what the sweep in progress has still to examine.
    sweep_cursor: usize,
    next_sweep: u64,
    /// When a full sweep may next be forced by an empty pool or full table.
    next_forced: u64,
    // Counters.
    created: u64,
    expired: u64,
    pool_exhausted: u64,
    table_full: u64,
    translated_out: u64,
    translated_in: u64,
    icmp_errors: u64,
    internal: u64,
    not_ipv4: u64,
}

impl Nat {
    pub const PARAMS: &'static [ParamDoc] = &[
        ParamDoc {
            name: "inside",
            ty: "string of prefixes",
            default: "\"10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16\"",
            doc: "source prefixes that are inside (comma/space separated); everything else is outside",
        },
        ParamDoc {
            name: "public",
            ty: "string of addresses",
            default: "\"198.51.100.1\"",
            doc: "public addresses new flows are translated to (comma/space separated; at most 4,194,304 (address, port) pairs with `ports`)",
        },
        ParamDoc {
            name: "ports",
            ty: "\"LO-HI\"",
            default: "\"1024-65535\"",
            doc: "public port (and ICMP identifier) range, one pool per protocol",
        },
        ParamDoc {
            name: "tcp_timeout",
            ty: "seconds",
            default: "7440",
            doc: "idle timeout of open TCP mappings (RFC 5382); 0 = never",
        },
        ParamDoc {
            name: "tcp_linger",
            ty: "seconds",
            default: "4",
            doc: "idle timeout once FIN was seen both ways or any RST",
        },
        ParamDoc {
            name: "udp_timeout",
            ty: "seconds",
            default: "300",
            doc: "idle timeout of UDP mappings; 0 = never",
        },
        ParamDoc {
            name: "icmp_timeout",
            ty: "seconds",
            default: "60",
            doc: "idle timeout of ICMP echo mappings; 0 = never",
        },
        ParamDoc {
            name: "capacity",
            ty: "integer",
            default: "262144",
            doc: "most live mappings (1..=16,777,216); new flows beyond it are dropped (table-full)",
        },
    ];

    pub fn new(cfg: &NatConfig) -> Result<Nat, String> {
        check_pool(&cfg.public, cfg.ports.0, cfg.ports.1)?;
        let inside = cfg
            .inside
            .iter()
            .map(|&(a, len)| {
                let mask = if len == 0 {
                    0
                } else {
                    u32::MAX << (32 - u32::from(len.min(32)))
                };
                (u32::from(a) & mask, mask)
            })
            .collect();
        let cap = cfg.capacity.max(1);
        Ok(Nat {
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
                    | Fields::ICMP
                    | Fields::PAYLOAD,
                // PAYLOAD: the header quoted inside ICMP errors.
                writes: Fields::IP_SRC
                    | Fields::IP_DST
                    | Fields::L4_SRC
                    | Fields::L4_DST
                    | Fields::ICMP
                    | Fields::PAYLOAD,
                may_drop: true,
                changes_length: false,
                per_flow_state: true,
                outputs: &["out"],
                drop_reasons: &[
                    "no-mapping",
                    "pool-exhausted",
                    "table-full",
                    "fragment",
                    "unsupported",
                    "malformed",
                ],
            },
            inside,
            tcp_timeout_ns: cfg.tcp_timeout_ns,
            tcp_linger_ns: cfg.tcp_linger_ns,
            udp_timeout_ns: cfg.udp_timeout_ns,
            icmp_timeout_ns: cfg.icmp_timeout_ns,
            capacity: cap,
            pool: Pool::pending(&cfg.public, cfg.ports.0, cfg.ports.1, (0, 1)),
            hasher: Hasher::default(),
            out: Index::with_capacity(cap),
            back: Index::with_capacity(cap),
            slab: Vec::with_capacity(cap),
            free_slots: Vec::with_capacity(cap),
            live: Vec::with_capacity(cap),
            sweep_cursor: 0,
            next_sweep: 0,
            next_forced: 0,
            created: 0,
            expired: 0,
            pool_exhausted: 0,
            table_full: 0,
            translated_out: 0,
            translated_in: 0,
            icmp_errors: 0,
            internal: 0,
            not_ipv4: 0,
        })
    }

    pub fn from_params(p: &mut Params) -> Result<Nat, ParamError> {
        let d = NatConfig::default();
        let inside = match p.table_str("inside")? {
            None => d.inside.clone(),
            Some(s) => parse_prefixes(s).map_err(|e| p.err(format!("`inside`: {e}")))?,
        };
        let public = match p.table_str("public")? {
            None => d.public.clone(),
            Some(s) => parse_addrs(s).map_err(|e| p.err(format!("`public`: {e}")))?,
        };
        let ports = match p.table_str("ports")? {
            None => d.ports,
            Some(s) => parse_range(s).map_err(|e| p.err(format!("`ports`: {e}")))?,
        };
        let cfg = NatConfig {
            inside,
            public,
            ports,
            tcp_timeout_ns: p.seconds_ns("tcp_timeout", d.tcp_timeout_ns)?,
            tcp_linger_ns: p.seconds_ns("tcp_linger", d.tcp_linger_ns)?,
            udp_timeout_ns: p.seconds_ns("udp_timeout", d.udp_timeout_ns)?,
            icmp_timeout_ns: p.seconds_ns("icmp_timeout", d.icmp_timeout_ns)?,
            capacity: p.int("capacity", d.capacity as i64, 1, 1 << 24)? as usize,
        };
        Nat::new(&cfg).map_err(|e| p.err(e))
    }

    /// Replaces the pool between batches. Mappings already made keep their public
    /// (address, port) until they end; new flows take pairs from the new pool only. A pair
    /// in both pools that a live mapping holds joins the new pool's free list when that
    /// mapping ends; pairs only in the old pool are retired.
    pub fn set_pool(&mut self, public: &[Ipv4Addr], lo: u16, hi: u16) -> Result<(), String> {
        check_pool(public, lo, hi)?;
        let me = &*self;
        // Without live mappings no pair is held: no lookup per pair.
        let none = me.live.is_empty();
        let pool = Pool::new(public, lo, hi, me.pool.share, |a, p, proto| {
            !none && me.back_find(a, p, proto).is_some()
        });
        self.pool = pool;
        Ok(())
    }

    /// Live mappings.
    pub fn mappings(&self) -> usize {
        self.live.len()
    }

    /// Free public pairs for `proto` (6, 17 or 1).
    pub fn free_ports(&self, proto: u8) -> usize {
        self.pool.free_count(pool_index(proto))
    }

    /// The public (address, port) of the live mapping for an inside 5-tuple (ICMP:
    /// identifier as `sport`, `dport` 0), as of capture time `now_ns`.
    pub fn lookup(
        &self,
        proto: u8,
        src: (Ipv4Addr, u16),
        dst: (Ipv4Addr, u16),
        now_ns: u64,
    ) -> Option<(Ipv4Addr, u16)> {
        let k = OutKey::new(src.0.into(), dst.0.into(), src.1, dst.1, proto);
        let m = &self.slab[self.out_find(k)? as usize];
        (now_ns <= m.deadline).then_some((m.public.into(), m.public_port))
    }

    #[inline]
    fn out_tag(&self, k: OutKey) -> u32 {
        tag(self.hasher.hash_one(k))
    }

    #[inline]
    fn back_tag(&self, addr: u32, port: u16, proto: u8) -> u32 {
        tag(self.hasher.hash_one(pub_key(addr, port, proto)))
    }

    #[inline]
    fn out_find(&self, k: OutKey) -> Option<u32> {
        let slab = &self.slab;
        self.out
            .find(self.out_tag(k), |s| slab[s as usize].out_key == k)
    }

    #[inline]
    fn back_find(&self, addr: u32, port: u16, proto: u8) -> Option<u32> {
        let slab = &self.slab;
        self.back.find(self.back_tag(addr, port, proto), |s| {
            let m = &slab[s as usize];
            m.public == addr && m.public_port == port && m.proto == proto
        })
    }

    #[inline]
    fn is_inside(&self, a: u32) -> bool {
        self.inside.iter().any(|&(net, mask)| a & mask == net)
    }

    #[inline]
    fn timeout(&self, proto: u8, state: u8) -> u64 {
        let t = match proto {
            TCP if state & RST != 0 || state & (FIN_OUT | FIN_IN) == FIN_OUT | FIN_IN => {
                self.tcp_linger_ns
            }
            TCP => self.tcp_timeout_ns,
            UDP => self.udp_timeout_ns,
            _ => self.icmp_timeout_ns,
        };
        if t == 0 {
            u64::MAX
        } else {
            t
        }
    }

    /// Ends mapping `i`: its keys leave both tables and its pair returns to the pool.
    fn release(&mut self, i: u32) {
        let m = &mut self.slab[i as usize];
        if m.state & LIVE == 0 {
            return;
        }
        m.state = 0;
        let m = *m;
        self.live.swap_remove(m.pos as usize);
        if let Some(&moved) = self.live.get(m.pos as usize) {
            self.slab[moved as usize].pos = m.pos;
        }
        self.out.remove(self.out_tag(m.out_key), i);
        self.back
            .remove(self.back_tag(m.public, m.public_port, m.proto), i);
        self.pool.give(m.public, m.public_port, m.proto);
        self.free_slots.push(i);
        self.expired += 1;
    }

    /// Frees every mapping idle past its timeout now (tests, pool changes; packets
    /// trigger bounded sweeps on their own).
    pub fn sweep(&mut self, now: u64) {
        self.sweep_cursor = self.live.len();
        self.sweep_some(now, usize::MAX);
    }

    /// Examines up to `budget` mappings of the sweep in progress. It walks `live`
    /// downwards, so the entry a release swaps in was already examined (or is new).
    fn sweep_some(&mut self, now: u64, budget: usize) {
        let mut n = budget;
        while n > 0 {
            self.sweep_cursor = self.sweep_cursor.min(self.live.len());
            if self.sweep_cursor == 0 {
                return;
            }
            self.sweep_cursor -= 1;
            n -= 1;
            let i = self.live[self.sweep_cursor];
            if now > self.slab[i as usize].deadline {
                self.release(i);
            }
        }
    }

    /// Before refusing a new flow for want of room, reclaim what has expired (at most
    /// once per second of capture time, so a flood cannot make every packet sweep).
    #[cold]
    fn reclaim(&mut self, now: u64) -> bool {
        if now < self.next_forced {
            return false;
        }
        self.next_forced = now.saturating_add(SWEEP_EVERY_NS);
        let before = self.live.len();
        self.sweep(now);
        self.live.len() < before
    }

    /// The live mapping for an outgoing flow, made if needed.
    #[inline]
    fn outbound(&mut self, key: OutKey, t: (u32, u32, u16, u16, u8), now: u64) -> Result<u32, u8> {
        if let Some(i) = self.out_find(key) {
            if now <= self.slab[i as usize].deadline {
                return Ok(i);
            }
            self.release(i);
        }
        self.create(key, t, now)
    }

    #[inline(never)]
    fn create(&mut self, key: OutKey, t: (u32, u32, u16, u16, u8), now: u64) -> Result<u32, u8> {
        let proto = t.4;
        let room = |s: &Nat| {
            (!s.free_slots.is_empty() || s.slab.len() < s.capacity)
                && !s.pool.free[pool_index(proto)].is_empty()
        };
        if !room(self) {
            self.reclaim(now);
        }
        let (inside, remote, inside_port, remote_port, proto) = t;
        let slot = match self.free_slots.pop() {
            Some(s) => s,
            None if self.slab.len() < self.capacity => self.slab.len() as u32,
            None => {
                self.table_full += 1;
                return Err(TABLE_FULL);
            }
        };
        let Some((public, public_port)) = self.pool.take(proto) else {
            if (slot as usize) < self.slab.len() {
                self.free_slots.push(slot);
            }
            self.pool_exhausted += 1;
            return Err(POOL_EXHAUSTED);
        };
        let (ia, pa) = ([hi(inside), lo(inside)], [hi(public), lo(public)]);
        let ip_out = delta(&ia, &pa);
        let ip_in = delta(&pa, &ia);
        // ICMP checksums cover no pseudo header: only the identifier changes.
        let (l4_out, l4_in) = if proto == ICMP {
            (
                delta(&[inside_port], &[public_port]),
                delta(&[public_port], &[inside_port]),
            )
        } else {
            (
                delta(&[ia[0], ia[1], inside_port], &[pa[0], pa[1], public_port]),
                delta(&[pa[0], pa[1], public_port], &[ia[0], ia[1], inside_port]),
            )
        };
        let m = Mapping {
            out_key: key,
            inside,
            remote,
            public,
            inside_port,
            remote_port,
            public_port,
            proto,
            state: LIVE,
            deadline: now.saturating_add(self.timeout(proto, 0)),
            pos: self.live.len() as u32,
            serial: self.created as u32,
            ip_out,
            l4_out,
            ip_in,
            l4_in,
        };
        if (slot as usize) < self.slab.len() {
            self.slab[slot as usize] = m;
        } else {
            self.slab.push(m);
        }
        self.live.push(slot);
        self.out.insert(self.out_tag(key), slot);
        self.back
            .insert(self.back_tag(public, public_port, proto), slot);
        self.created += 1;
        Ok(slot)
    }

    /// Refreshes mapping `i` for a packet with TCP flags `flags` (0 when not TCP).
    #[inline]
    fn touch(&mut self, i: u32, now: u64, flags: u8, outgoing: bool) {
        let m = &mut self.slab[i as usize];
        let s = next_state(m.proto, m.state, flags, outgoing);
        let proto = m.proto;
        let t = self.timeout(proto, s);
        let m = &mut self.slab[i as usize];
        m.state = s;
        m.deadline = now.saturating_add(t);
    }

    /// The live mapping whose public side is (`addr`, `port`) for `proto`.
    #[inline]
    fn inbound(&self, addr: u32, port: u16, proto: u8, now: u64) -> Option<u32> {
        let i = self.back_find(addr, port, proto)?;
        (now <= self.slab[i as usize].deadline).then_some(i)
    }

    /// Whether a live mapping would take inbound packet `k` (TCP, UDP or an ICMP echo
    /// reply, by identifier) at `now`: the acceptance test of [`translate`](Self::translate)
    /// and [`icmp`](Self::icmp), from the flow key alone. Out of line: the hits that
    /// translate should not pay for its registers.
    #[inline(never)]
    fn answers(&self, k: &FlowKey, now: u64) -> bool {
        if k.family != 4 {
            return false;
        }
        let a = |b: &[u8; 16]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        let Some(i) = self.inbound(a(&k.dst), k.dport, k.proto, now) else {
            return false;
        };
        let m = &self.slab[i as usize];
        m.remote == a(&k.src) && (k.proto == ICMP || m.remote_port == k.sport)
    }

    /// A later IPv4 fragment: passes when inside-to-inside, else dropped (module notes).
    fn later_fragment(&mut self, l: &Layers, d: &[u8]) -> Result<(), u8> {
        let o3 = l.l3_off as usize;
        if self.is_inside(be32(d, o3 + 12)) && self.is_inside(be32(d, o3 + 16)) {
            self.internal += 1;
            return Ok(());
        }
        Err(FRAGMENT)
    }

    /// Translates one IPv4 packet in place, or says why it is dropped.
    #[inline]
    fn translate(&mut self, l: &Layers, d: &mut [u8], now: u64) -> Result<(), u8> {
        let o3 = l.l3_off as usize;
        let src = be32(d, o3 + 12);
        let dst = be32(d, o3 + 16);
        let outgoing = self.is_inside(src);
        if outgoing && self.is_inside(dst) {
            self.internal += 1;
            return Ok(());
        }
        let proto = l.l4_proto;
        if !matches!(proto, TCP | UDP | ICMP) {
            return Err(UNSUPPORTED);
        }
        if !l.has_l4() {
            return Err(MALFORMED);
        }
        let o4 = l.l4_off as usize;
        if proto == ICMP {
            // Read inside the datagram only: an identifier or a quote in the padding past
            // its end is no part of it, and the ICMP checksum does not cover it.
            let end = usize::from(l.l3_end);
            if end < o4 + 8 {
                return Err(MALFORMED);
            }
            return self.icmp(&mut d[..end], o3, o4, src, dst, outgoing, now);
        }
        let sport = be16(d, o4);
        let dport = be16(d, o4 + 2);
        let (flags, csum) = if proto == TCP {
            (d[o4 + 13], o4 + 16)
        } else {
            (0, o4 + 6)
        };
        if outgoing {
            let key = OutKey::new(src, dst, sport, dport, proto);
            let i = self.outbound(key, (src, dst, sport, dport, proto), now)?;
            self.touch(i, now, flags, true);
            let m = &self.slab[i as usize];
            put32(d, o3 + 12, m.public);
            put16(d, o3 + 10, patch(be16(d, o3 + 10), m.ip_out));
            put16(d, o4, m.public_port);
            patch_l4(d, csum, proto, m.l4_out);
            self.translated_out += 1;
        } else {
            let Some(i) = self.inbound(dst, dport, proto, now) else {
                return Err(NO_MAPPING);
            };
            let m = &self.slab[i as usize];
            if m.remote != src || m.remote_port != sport {
                return Err(NO_MAPPING);
            }
            put32(d, o3 + 16, m.inside);
            put16(d, o3 + 10, patch(be16(d, o3 + 10), m.ip_in));
            put16(d, o4 + 2, m.inside_port);
            patch_l4(d, csum, proto, m.l4_in);
            self.touch(i, now, flags, false);
            self.translated_in += 1;
        }
        Ok(())
    }

    /// ICMP: echo requests out and replies in (`ICMPPingRewriter`), errors quoting a
    /// mapped packet either way (`ICMPRewriter`).
    #[allow(clippy::too_many_arguments)]
    fn icmp(
        &mut self,
        d: &mut [u8],
        o3: usize,
        o4: usize,
        src: u32,
        dst: u32,
        outgoing: bool,
        now: u64,
    ) -> Result<(), u8> {
        match (d[o4], outgoing) {
            (8, true) => {
                let id = be16(d, o4 + 4);
                let key = OutKey::new(src, dst, id, 0, ICMP);
                let i = self.outbound(key, (src, dst, id, 0, ICMP), now)?;
                self.touch(i, now, 0, true);
                let m = &self.slab[i as usize];
                put32(d, o3 + 12, m.public);
                put16(d, o3 + 10, patch(be16(d, o3 + 10), m.ip_out));
                put16(d, o4 + 4, m.public_port);
                put16(d, o4 + 2, patch(be16(d, o4 + 2), m.l4_out));
                self.translated_out += 1;
                Ok(())
            }
            (0, false) => {
                let id = be16(d, o4 + 4);
                let i = self.inbound(dst, id, ICMP, now).ok_or(NO_MAPPING)?;
                let m = &self.slab[i as usize];
                if m.remote != src {
                    return Err(NO_MAPPING);
                }
                put32(d, o3 + 16, m.inside);
                put16(d, o3 + 10, patch(be16(d, o3 + 10), m.ip_in));
                put16(d, o4 + 4, m.inside_port);
                put16(d, o4 + 2, patch(be16(d, o4 + 2), m.l4_in));
                self.touch(i, now, 0, false);
                self.translated_in += 1;
                Ok(())
            }
            // Destination unreachable, source quench, redirect, time exceeded, parameter
            // problem: they quote the offending packet's header.
            (3 | 4 | 5 | 11 | 12, _) => self.icmp_error(d, o3, o4, outgoing, now),
            (_, true) => Err(UNSUPPORTED),
            (_, false) => Err(NO_MAPPING),
        }
    }

    /// Translates an ICMP error whose quoted packet belongs to a live mapping: incoming,
    /// the quoted packet went out translated (public source); outgoing, it came in
    /// translated (inside destination). Errors never refresh a mapping.
    #[inline(never)]
    fn icmp_error(
        &mut self,
        d: &mut [u8],
        o3: usize,
        o4: usize,
        outgoing: bool,
        now: u64,
    ) -> Result<(), u8> {
        // `d` ends where the datagram does (`translate`): a quote cut by the IP total
        // length is malformed, never rewritten in the padding.
        let q3 = o4 + 8;
        if d.len() < q3 + 20 || d[q3] >> 4 != 4 {
            return Err(MALFORMED);
        }
        let q4 = q3 + usize::from(d[q3] & 0x0f) * 4;
        if q4 < q3 + 20 || d.len() < q4 + 8 {
            return Err(MALFORMED);
        }
        if be16(d, q3 + 6) & 0x1fff != 0 {
            return Err(UNSUPPORTED);
        }
        let qp = d[q3 + 9];
        let (qsrc, qdst) = (be32(d, q3 + 12), be32(d, q3 + 16));
        let (qs, qd) = match qp {
            TCP | UDP => (be16(d, q4), be16(d, q4 + 2)),
            ICMP if matches!(d[q4], 0 | 8) => (be16(d, q4 + 4), be16(d, q4 + 4)),
            _ => return Err(UNSUPPORTED),
        };
        let i = if outgoing {
            let dport = if qp == ICMP { 0 } else { qs };
            let key = OutKey::new(qdst, qsrc, qd, dport, qp);
            let i = self.out_find(key).ok_or(NO_MAPPING)?;
            (now <= self.slab[i as usize].deadline)
                .then_some(i)
                .ok_or(NO_MAPPING)?
        } else {
            let i = self.inbound(qsrc, qs, qp, now).ok_or(NO_MAPPING)?;
            let m = &self.slab[i as usize];
            if m.remote != qdst || (qp != ICMP && m.remote_port != qd) {
                return Err(NO_MAPPING);
            }
            i
        };
        let m = self.slab[i as usize];
        // Which addresses and ports change: outer source or destination, quoted
        // destination or source, to the public or inside side.
        let (outer, qaddr, new_addr, new_port) = if outgoing {
            (o3 + 12, q3 + 16, m.public, m.public_port)
        } else {
            (o3 + 16, q3 + 12, m.inside, m.inside_port)
        };
        let qport = match (qp, outgoing) {
            (ICMP, _) => q4 + 4,
            (_, true) => q4 + 2,
            (_, false) => q4,
        };
        let old_outer = be32(d, outer);
        put32(d, outer, new_addr);
        put16(d, o3 + 10, update32(be16(d, o3 + 10), old_outer, new_addr));
        // The ICMP checksum covers the quoted bytes: fold in every word that changes.
        let mut ic = be16(d, o4 + 2);
        let old_addr = be32(d, qaddr);
        put32(d, qaddr, new_addr);
        ic = update32(ic, old_addr, new_addr);
        let qc = be16(d, q3 + 10);
        let qc2 = update32(qc, old_addr, new_addr);
        put16(d, q3 + 10, qc2);
        ic = update16(ic, qc, qc2);
        let old_port = be16(d, qport);
        put16(d, qport, new_port);
        ic = update16(ic, old_port, new_port);
        // The quoted transport checksum, when quoted: UDP's always is, TCP's only when
        // the router quoted more than 8 bytes. An ICMP echo's covers no addresses.
        let qcsum = match qp {
            TCP => q4 + 16,
            UDP => q4 + 6,
            _ => q4 + 2,
        };
        if d.len() >= qcsum + 2 {
            let c = be16(d, qcsum);
            if !(qp == UDP && c == 0) {
                let mut c2 = update16(c, old_port, new_port);
                if qp != ICMP {
                    c2 = update32(c2, old_addr, new_addr);
                }
                if qp == UDP && c2 == 0 {
                    c2 = 0xffff;
                }
                put16(d, qcsum, c2);
                ic = update16(ic, c, c2);
            }
        }
        put16(d, o4 + 2, ic);
        self.icmp_errors += 1;
        Ok(())
    }
}

/// Patches a TCP or UDP checksum by `delta`; a UDP checksum of 0 (none) stays 0 and a
/// computed 0 is sent as 0xffff (RFC 768).
#[inline]
fn patch_l4(d: &mut [u8], at: usize, proto: u8, delta: u16) {
    let c = be16(d, at);
    if proto == UDP {
        if c != 0 {
            let n = patch(c, delta);
            put16(d, at, if n == 0 { 0xffff } else { n });
        }
    } else {
        put16(d, at, patch(c, delta));
    }
}

/// Inside prefixes by the parser `ip_filter` uses too, so both refuse the same forms
/// with the same message (e.g. `10.1.2.3/8`: bits set past the length).
fn parse_prefixes(s: &str) -> Result<Vec<(Ipv4Addr, u8)>, String> {
    let v: Result<Vec<_>, String> = s
        .split([',', ' '])
        .filter(|t| !t.is_empty())
        .map(|t| {
            let p = crate::nfs::prefix::Prefix::parse(t)?;
            match p.addr {
                std::net::IpAddr::V4(a) => Ok((a, p.len)),
                std::net::IpAddr::V6(_) => Err(format!(
                    "`{t}` is an IPv6 prefix; the NAT translates IPv4 only"
                )),
            }
        })
        .collect();
    let v = v?;
    if v.is_empty() {
        return Err("no prefixes given".into());
    }
    Ok(v)
}

fn parse_addrs(s: &str) -> Result<Vec<Ipv4Addr>, String> {
    let v: Result<Vec<_>, String> = s
        .split([',', ' '])
        .filter(|t| !t.is_empty())
        .map(|t| {
            t.parse()
                .map_err(|_| format!("`{t}` is not an IPv4 address"))
        })
        .collect();
    v
}

fn parse_range(s: &str) -> Result<(u16, u16), String> {
    let bad = || format!("`{s}` is not a port range like \"1024-65535\"");
    let (a, b) = s.trim().split_once('-').ok_or_else(bad)?;
    let a: u16 = a.trim().parse().map_err(|_| bad())?;
    let b: u16 = b.trim().parse().map_err(|_| bad())?;
    if a == 0 || a > b {
        return Err(format!("`{s}`: need 1 <= LO <= HI"));
    }
    Ok((a, b))
}

impl Nat {
    /// Which index a packet will be looked up in, and its tag: (1, tag) for `out`,
    /// (2, tag) for `back`, (0, _) for none. Mirrors the decisions of `translate`.
    #[inline]
    fn probe(&self, l: &Layers, d: &[u8]) -> (u8, u32) {
        if l.l3 != L3Kind::Ipv4 || !l.has_l4() || !matches!(l.l4_proto, TCP | UDP | ICMP) {
            return (0, 0);
        }
        let (o3, o4, proto) = (l.l3_off as usize, l.l4_off as usize, l.l4_proto);
        let (src, dst) = (be32(d, o3 + 12), be32(d, o3 + 16));
        let (sport, dport) = match proto {
            ICMP if usize::from(l.l3_end) >= o4 + 8 && matches!(d[o4], 0 | 8) => {
                (be16(d, o4 + 4), be16(d, o4 + 4))
            }
            ICMP => return (0, 0),
            _ => (be16(d, o4), be16(d, o4 + 2)),
        };
        if self.is_inside(src) {
            let dport = if proto == ICMP { 0 } else { dport };
            (1, self.out_tag(OutKey::new(src, dst, sport, dport, proto)))
        } else {
            (2, self.back_tag(dst, dport, proto))
        }
    }

    /// Three passes so that a batch's cache misses overlap instead of queueing: hash and
    /// prefetch every index entry, then prefetch the mappings they name, then translate.
    #[inline]
    fn process_chunk(&mut self, pkts: &mut [Packet]) {
        let mut probes = [(0u8, 0u32); MAX_BATCH];
        for (p, pr) in pkts.iter_mut().zip(probes.iter_mut()) {
            let l = p.layers();
            *pr = self.probe(&l, p.data());
            match *pr {
                (1, t) => self.out.prefetch(t),
                (2, t) => self.back.prefetch(t),
                _ => {}
            }
        }
        for &(w, t) in &probes[..pkts.len()] {
            let s = match w {
                1 => self.out.find(t, |_| true),
                2 => self.back.find(t, |_| true),
                _ => None,
            };
            if let Some(s) = s {
                prefetch(&self.slab[s as usize]);
            }
        }
        // And the mappings the sweep in progress will examine during this chunk.
        let c = self.sweep_cursor.min(self.live.len());
        for &s in &self.live[c.saturating_sub(SWEEP_STEP * pkts.len())..c] {
            prefetch(&self.slab[s as usize]);
        }
        for p in pkts.iter_mut() {
            let l = p.layers();
            let (m, d) = p.split_mut();
            let now = m.now_ns;
            self.tick(now);
            let want = m.fast == FastMark::Want;
            let pre = if want {
                fast_pre(&l, d)
            } else {
                FastPre::default()
            };
            let r = match l.l3 {
                L3Kind::Ipv4 if l.is_later_fragment() => self.later_fragment(&l, d),
                L3Kind::Ipv4 => self.translate(&l, d, now),
                L3Kind::Malformed => Err(MALFORMED),
                _ => {
                    self.not_ipv4 += 1;
                    Ok(())
                }
            };
            if want {
                m.fast = self.fast_mark(&l, pre, r);
            }
            if let Err(r) = r {
                p.drop_with(r);
            }
        }
    }
}

// FastPath token kinds (top byte; then the mapping's slot in 24 bits and its serial).
const FAST_STATIC: u8 = 0;
const FAST_OUT: u8 = 1;
const FAST_IN: u8 = 2;
const FAST_INTERNAL: u8 = 3;
const FAST_NOT_IPV4: u8 = 4;
/// An inbound packet no mapping answered (no slot: valid while none does).
const FAST_NOMAP: u8 = 5;

/// What FastPath recording needs of a packet before it is translated.
#[derive(Clone, Copy, Default)]
struct FastPre {
    src: u32,
    dst: u32,
    sport: u16,
    dport: u16,
    icmp_type: u8,
}

fn fast_pre(l: &Layers, d: &[u8]) -> FastPre {
    let mut f = FastPre::default();
    if l.l3 != L3Kind::Ipv4 || !l.has_l4() {
        return f;
    }
    let (o3, o4) = (l.l3_off as usize, l.l4_off as usize);
    f.src = be32(d, o3 + 12);
    f.dst = be32(d, o3 + 16);
    match l.l4_proto {
        ICMP if usize::from(l.l3_end) >= o4 + 8 => {
            f.icmp_type = d[o4];
            f.sport = be16(d, o4 + 4);
            f.dport = f.sport;
        }
        TCP | UDP => {
            f.sport = be16(d, o4);
            f.dport = be16(d, o4 + 2);
        }
        _ => {}
    }
    f
}

impl Nat {
    /// The run clock (docs/time.md) drives it: a sweep starts once per second of it (when
    /// the last one is done) and advances a few mappings per packet, on both paths alike.
    #[inline]
    fn tick(&mut self, now: u64) {
        if now >= self.next_sweep && self.sweep_cursor == 0 {
            self.next_sweep = now.saturating_add(SWEEP_EVERY_NS);
            self.sweep_cursor = self.live.len();
        }
        if self.sweep_cursor != 0 {
            self.sweep_some(now, SWEEP_STEP);
        }
    }

    /// The FastPath answer for a packet just processed with result `r`. Decisions that
    /// depend on state a later packet may not find (no mapping, an empty pool, a full
    /// table) or on the payload (ICMP errors quote packets) are refused.
    fn fast_mark(&self, l: &Layers, pre: FastPre, r: Result<(), u8>) -> FastMark {
        let icmp_error = l.l4_proto == ICMP && matches!(pre.icmp_type, 3 | 4 | 5 | 11 | 12);
        match r {
            _ if icmp_error && l.l3 == L3Kind::Ipv4 => return FastMark::Refuse,
            Err(FRAGMENT | UNSUPPORTED) => return FastMark::Token((FAST_STATIC as u64) << 56),
            // An unsolicited packet from outside: dropped for as long as no mapping
            // answers it, which a hit checks by the same lookup (`fast_valid`). Inbound
            // ICMP other than echo replies (and errors, refused above) never maps.
            Err(NO_MAPPING) if l.has_l4() && !self.is_inside(pre.src) => {
                let kind = match l.l4_proto {
                    TCP | UDP => FAST_NOMAP,
                    ICMP if pre.icmp_type == 0 => FAST_NOMAP,
                    _ => FAST_STATIC,
                };
                return FastMark::Token((kind as u64) << 56);
            }
            Err(_) => return FastMark::Refuse,
            Ok(()) => {}
        }
        if l.l3 != L3Kind::Ipv4 {
            return FastMark::Token((FAST_NOT_IPV4 as u64) << 56);
        }
        // A later fragment that passed is inside-to-inside (its addresses are in the key).
        if l.is_later_fragment() {
            return FastMark::Token((FAST_INTERNAL as u64) << 56);
        }
        let outgoing = self.is_inside(pre.src);
        if outgoing && self.is_inside(pre.dst) {
            return FastMark::Token((FAST_INTERNAL as u64) << 56);
        }
        let proto = l.l4_proto;
        let slot = if outgoing {
            let dport = if proto == ICMP { 0 } else { pre.dport };
            self.out_find(OutKey::new(pre.src, pre.dst, pre.sport, dport, proto))
        } else {
            self.back_find(pre.dst, pre.dport, proto)
        };
        let kind = if outgoing { FAST_OUT } else { FAST_IN };
        match slot {
            Some(s) if s < 1 << 24 => FastMark::Token(
                (kind as u64) << 56 | (s as u64) << 32 | self.slab[s as usize].serial as u64,
            ),
            _ => FastMark::Refuse,
        }
    }
}

/// 32 bits of a 64-bit hash for the index (both halves mixed in).
#[inline]
fn tag(h: u64) -> u32 {
    (h ^ (h >> 32)) as u32
}

impl Nf for Nat {
    /// Both indexes, the mapping slab and its slot lists at capacity, and the port pools.
    fn memory(&self) -> usize {
        use crate::flow::footprint::{index_bytes, vec_bytes};
        let cap = self.capacity;
        let pairs = self.pool.capacity();
        2 * index_bytes(cap)
            + vec_bytes::<Mapping>(cap)
            + 2 * vec_bytes::<u32>(cap)
            + vec_bytes::<u32>(pairs)
    }

    fn profile(&self) -> &Profile {
        &self.profile
    }

    /// Not an output: the runtime's last call before the first packet, outside the timed
    /// run, where a pool that `shard` did not build (one worker streamed, live runs) is.
    fn open_outputs(&mut self) -> Result<(), String> {
        self.pool.ensure();
        Ok(())
    }

    /// The pool is partitioned: worker K of N owns the pairs whose index is K modulo N
    /// (as VPP gives each thread its own ports), now and after `pool` commands.
    fn shard(&mut self, worker: usize, workers: usize) -> Result<(), String> {
        if workers > self.pool.addrs.len() * (usize::from(self.pool.hi - self.pool.lo) + 1) {
            return Err(format!(
                "{workers} workers need at least as many public (address, port) pairs"
            ));
        }
        let addrs: Vec<Ipv4Addr> = self.pool.addrs.iter().map(|&a| Ipv4Addr::from(a)).collect();
        let (lo, hi) = (self.pool.lo, self.pool.hi);
        self.pool.share = (worker as u32, workers as u32);
        if workers > 1 {
            // Backed now, before the run: lazily, every first insert on a page flushed the
            // TLB of the other workers' cores (see `Index::prefault`).
            self.out.prefault();
            self.back.prefault();
        }
        self.set_pool(&addrs, lo, hi)
    }

    #[inline]
    fn process(&mut self, batch: &mut Batch, _cx: &Context) {
        // Built already by `shard` or `open_outputs` on every runtime path; this is for
        // a caller that processes without either (once, then a predicted branch).
        self.pool.ensure();
        // A node fed by several others may get more than one batch's worth.
        for chunk in batch.as_mut_slice().chunks_mut(MAX_BATCH) {
            self.process_chunk(chunk);
        }
    }

    /// `pool ADDR[,ADDR…] LO-HI`: new flows take public addresses and ports from the new
    /// pool; live mappings keep theirs until they end.
    fn control(&mut self, cmd: &str) -> Result<String, String> {
        let mut words = cmd.split_whitespace();
        match words.next() {
            Some("pool") => {
                let rest: Vec<&str> = words.collect();
                let Some((range, addrs)) = rest.split_last() else {
                    return Err("usage: pool ADDR[,ADDR…] LO-HI".into());
                };
                let addrs = parse_addrs(&addrs.join(" "))?;
                let (lo, hi) = parse_range(range)?;
                self.set_pool(&addrs, lo, hi)?;
                Ok(format!(
                    "pool: {} address(es), ports {lo}-{hi}",
                    addrs.len()
                ))
            }
            _ => Err(format!(
                "unknown command `{cmd}` (commands: pool ADDR… LO-HI)"
            )),
        }
    }

    fn consolidate(&self) -> Option<&dyn Consolidate> {
        Some(self)
    }

    fn consolidate_mut(&mut self) -> Option<&mut dyn Consolidate> {
        Some(self)
    }

    fn stats(&self) -> Stats {
        named(&[
            ("mappings", self.live.len() as u64),
            ("created", self.created),
            ("expired", self.expired),
            ("pool_exhausted", self.pool_exhausted),
            ("table_full", self.table_full),
            ("translated_out", self.translated_out),
            ("translated_in", self.translated_in),
            ("icmp_errors", self.icmp_errors),
            ("internal", self.internal),
            ("passed_not_ipv4", self.not_ipv4),
            ("pool_size", self.pool.size() as u64),
        ])
    }
}

impl Consolidate for Nat {
    fn state_function(&self) -> &'static str {
        "mapping idle-timer refresh, FIN/RST/SYN state, sweep step, counters"
    }

    fn fast_valid(&self, token: u64, p: &FastPacket) -> bool {
        let (kind, slot, serial) = (
            (token >> 56) as u8,
            (token >> 32) as u32 & 0xff_ffff,
            token as u32,
        );
        match kind {
            FAST_OUT | FAST_IN => self.slab.get(slot as usize).is_some_and(|m| {
                // The serial names one mapping ever created, and a mapping's addresses
                // and ports never change: the same serial is the same translation of the
                // same flow (the entry's key pins the packet), so the flow key need not
                // be compared again.
                m.state & LIVE != 0 && p.now_ns <= m.deadline && m.serial == serial
            }),
            FAST_NOMAP => !self.answers(p.key, p.now_ns),
            _ => true,
        }
    }

    /// A check that passes on the state before the run still passes after the run's
    /// earlier state functions: they refresh deadlines and never shorten them (the run
    /// clock never goes back, and a packet with FIN or RST never reaches a fused run),
    /// never clear LIVE nor create a mapping, and a sweep step releases only a mapping
    /// expired at its packet's time, which is no later than a later visit's, whose check
    /// found it live. Two exceptions stop the vouching: an unsolicited packet's drop
    /// holds only while no mapping answers it, and a refresh could make an expired one
    /// answer again, so a no-mapping visit is vouched only when no mapping at all, live
    /// or expired, would answer it; and a SYN reopening a lingering mapping shortens its
    /// deadline when the TCP timeout is below the linger, so the run stops after one.
    fn fast_vouch(&self, run: &FastRun) -> usize {
        let syn_shortens = self.timeout(TCP, LIVE) < self.timeout(TCP, RST);
        if !syn_shortens {
            // No visit's flags matter: each mapping is checked against the run's last
            // time (the run clock never goes back), which is no laxer than its own
            // visit's, without reading the visit's facts.
            let last = run
                .visits
                .last()
                .map(|v| run.fact(&v))
                .map_or(u64::MAX, |f| f.now_ns);
            for (n, v) in run.visits.iter().enumerate() {
                let slot = (v.token >> 32) as usize & 0xff_ffff;
                let ok = match (v.token >> 56) as u8 {
                    FAST_OUT | FAST_IN => self.slab.get(slot).is_some_and(|m| {
                        m.state & LIVE != 0 && last <= m.deadline && m.serial == v.token as u32
                    }),
                    FAST_NOMAP => !self.answers(run.packet(&v).key, 0),
                    _ => true,
                };
                if !ok {
                    return n;
                }
            }
            return run.visits.len();
        }
        for (n, v) in run.visits.iter().enumerate() {
            let (kind, slot, serial) = (
                (v.token >> 56) as u8,
                (v.token >> 32) as u32 & 0xff_ffff,
                v.token as u32,
            );
            let f = run.fact(&v);
            let ok = match kind {
                FAST_OUT | FAST_IN => self.slab.get(slot as usize).is_some_and(|m| {
                    m.state & LIVE != 0 && f.now_ns <= m.deadline && m.serial == serial
                }),
                // At time 0 every mapping still in the index is live.
                FAST_NOMAP => !self.answers(run.packet(&v).key, 0),
                _ => true,
            };
            if !ok {
                return n;
            }
            if syn_shortens && f.tcp_flags & 0x02 != 0 {
                return n + 1;
            }
        }
        run.visits.len()
    }

    fn fast_prefetches(&self) -> bool {
        true
    }

    /// Translated packets (both ways, ICMP errors too): internal, unsupported and
    /// unanswered packets leave a hit nothing of the NAT to skip.
    fn fast_work(&self) -> Option<u64> {
        Some(self.translated_out + self.translated_in + self.icmp_errors)
    }

    /// The mapping a token names: its slot is the token's high half (below the kind).
    fn fast_lines(&self) -> TokenLines {
        TokenLines::of(&self.slab, 0xff_ffff)
    }

    /// (A no-mapping token names slot 0: prefetching it is harmless, and cheaper than a
    /// test on every hit.)
    fn fast_prefetch(&self, token: u64) {
        if let Some(m) = self.slab.get((token >> 32) as usize & 0xff_ffff) {
            prefetch(m);
        }
    }

    fn fast_state(&mut self, token: u64, p: &FastPacket) {
        self.state_at(token, p.now_ns, p.tcp_flags);
    }

    /// As many `fast_state` calls. The run clock never goes back (docs/time.md), so
    /// when no sweep is under way and the last visit comes before the next one starts,
    /// every visit's sweep step would do nothing: skipped.
    fn fast_state_run(&mut self, run: &FastRun) {
        let last = run
            .visits
            .last()
            .map(|v| run.fact(&v))
            .map_or(0, |f| f.now_ns);
        if self.sweep_cursor == 0 && last < self.next_sweep {
            // The timeouts read once for the run, each mapping looked up once.
            let t = self.timeouts();
            for v in run.visits.iter() {
                let f = run.fact(&v);
                let slot = (v.token >> 32) as usize & 0xff_ffff;
                let kind = (v.token >> 56) as u8;
                if kind == FAST_OUT || kind == FAST_IN {
                    if let Some(m) = self.slab.get_mut(slot) {
                        touch_with(m, &t, f.now_ns, f.tcp_flags as u8, kind == FAST_OUT);
                    }
                }
            }
        } else {
            for v in run.visits.iter() {
                let f = run.fact(&v);
                self.state_at(v.token, f.now_ns, f.tcp_flags);
            }
        }
    }

    /// The counters (out, in, internal, not IPv4) are counted in FastPath's entries, so
    /// hits that fold and hits that do not count alike.
    fn fast_counts(&self) -> bool {
        true
    }

    /// The refresh and the sweep step remain.
    fn fast_states(&self) -> bool {
        true
    }

    fn fast_count(&mut self, token: u64, packets: u64) {
        match (token >> 56) as u8 {
            FAST_OUT => self.translated_out += packets,
            FAST_IN => self.translated_in += packets,
            FAST_INTERNAL => self.internal += packets,
            FAST_NOT_IPV4 => self.not_ipv4 += packets,
            _ => {}
        }
    }

    /// A hit's refresh is `deadline = t + timeout(state)` with the state unchanged (no
    /// FIN or RST reaches a hit, and a SYN never folds), and every decision that reads a
    /// deadline asks whether it has passed: refreshes commute (docs/fastpath.md,
    /// "Fold-back").
    fn fast_folds(&self) -> bool {
        true
    }

    /// Not an unanswered inbound flow's: its drop holds only while no mapping answers,
    /// checked on every packet.
    fn fast_foldable(&self, token: u64) -> bool {
        (token >> 56) as u8 != FAST_NOMAP
    }

    /// Every mapping a hit of the period relies on was refreshed at `now` or later, so
    /// its stored deadline is at least `now` plus the shortest timeout: none expires
    /// before that, and no sweep step does anything before the next sweep is due. While
    /// a sweep is under way every hit steps it: no folding.
    fn fast_horizon(&self, now: u64) -> u64 {
        if self.sweep_cursor != 0 {
            return now;
        }
        let t = self.timeouts();
        let shortest = t.tcp.min(t.linger).min(t.udp).min(t.icmp);
        now.saturating_add(shortest).min(self.next_sweep)
    }

    /// The folded hits' refreshes, the last at `last_ns`: `deadline = last_ns +
    /// timeout(state)` unless the mapping was touched later (a deadline is always its
    /// last touch plus its state's timeout, and the state changes only by a touch).
    fn fast_fold(&mut self, token: u64, last_ns: u64) {
        let (kind, slot, serial) = (
            (token >> 56) as u8,
            (token >> 32) as usize & 0xff_ffff,
            token as u32,
        );
        if kind != FAST_OUT && kind != FAST_IN {
            return;
        }
        let Some(&m) = self.slab.get(slot) else {
            return;
        };
        if m.state & LIVE == 0 || m.serial != serial {
            return;
        }
        let d = last_ns.saturating_add(self.timeout(m.proto, m.state));
        let m = &mut self.slab[slot];
        m.deadline = m.deadline.max(d);
    }
}

impl Nat {
    /// A consolidated packet's state function: the sweep step and the mapping's
    /// refresh (its counter is counted in FastPath's entry: `fast_count`).
    #[inline(always)]
    fn state_at(&mut self, token: u64, now: u64, tcp_flags: u16) {
        self.tick(now);
        let slot = (token >> 32) as u32 & 0xff_ffff;
        match (token >> 56) as u8 {
            FAST_OUT => self.touch(slot, now, tcp_flags as u8, true),
            FAST_IN => self.touch(slot, now, tcp_flags as u8, false),
            _ => {}
        }
    }

    /// The idle timeouts [`timeout`](Self::timeout) gives, read once for a run of
    /// refreshes.
    fn timeouts(&self) -> Timeouts {
        Timeouts {
            tcp: self.timeout(TCP, LIVE),
            linger: self.timeout(TCP, RST),
            udp: self.timeout(UDP, LIVE),
            icmp: self.timeout(ICMP, LIVE),
        }
    }
}

/// [`Nat::timeout`] for each protocol and TCP state, as [`Nat::timeouts`] reads them.
#[derive(Clone, Copy)]
struct Timeouts {
    tcp: u64,
    linger: u64,
    udp: u64,
    icmp: u64,
}

/// A mapping's TCP state after a packet with TCP flags `flags` (0 when not TCP):
/// [`Nat::touch`]'s and [`touch_with`]'s one rule.
#[inline(always)]
fn next_state(proto: u8, mut s: u8, flags: u8, outgoing: bool) -> u8 {
    if proto == TCP && flags & 0x07 != 0 {
        if flags & 0x04 != 0 {
            s |= RST;
        }
        if flags & 0x01 != 0 {
            s |= if outgoing { FIN_OUT } else { FIN_IN };
        }
        // A new connection on the same 5-tuple while the old one lingers.
        if outgoing && flags & 0x12 == 0x02 {
            s = LIVE;
        }
    }
    s
}

/// [`Nat::touch`] on mapping `m` with the timeouts read in advance (a fused run's
/// refreshes: one slab look-up, no timeout reads per visit).
#[inline(always)]
fn touch_with(m: &mut Mapping, t: &Timeouts, now: u64, flags: u8, outgoing: bool) {
    // Only TCP mappings change state (`next_state` leaves the others' as they are).
    let timeout = match m.proto {
        TCP => {
            let s = next_state(TCP, m.state, flags, outgoing);
            m.state = s;
            if s & RST != 0 || s & (FIN_OUT | FIN_IN) == FIN_OUT | FIN_IN {
                t.linger
            } else {
                t.tcp
            }
        }
        UDP => t.udp,
        _ => t.icmp,
    };
    m.deadline = now.saturating_add(timeout);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::checksum::{sum, update_bytes};

    #[test]
    fn a_share_s_pool_is_every_nth_pair_in_order_less_the_live_ones() {
        let addrs: Vec<Ipv4Addr> = (1..=3).map(|k| Ipv4Addr::new(198, 51, 100, k)).collect();
        for (lo, hi) in [(1000, 1000), (1000, 1006), (7, 9)] {
            let range = usize::from(hi - lo) + 1;
            for n in 1..=5u32 {
                for w in 0..n {
                    // Held: pairs whose port is a multiple of 3, for UDP only.
                    let live = |_: u32, p: u16, proto: u8| proto == UDP && p.is_multiple_of(3);
                    let pool = Pool::new(&addrs, lo, hi, (w, n), live);
                    for proto in [TCP, UDP, ICMP] {
                        // The model: every pair in index order, kept when its index is w
                        // modulo n and it is not held.
                        let want: Vec<u32> = (0..addrs.len() * range)
                            .filter(|idx| idx % n as usize == w as usize)
                            .map(|idx| ((idx / range) as u32, lo + (idx % range) as u16))
                            .filter(|&(i, p)| !live(u32::from(addrs[i as usize]), p, proto))
                            .map(|(i, p)| i << 16 | u32::from(p))
                            .collect();
                        let got: Vec<u32> = pool.free[pool_index(proto)].iter().copied().collect();
                        assert_eq!(got, want, "{lo}-{hi} share {w}/{n} proto {proto}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_pending_pool_counts_its_share_free_and_fills_as_one_built_at_once() {
        let addrs: Vec<Ipv4Addr> = (1..=2).map(|k| Ipv4Addr::new(203, 0, 113, k)).collect();
        for (w, n) in [(0, 1), (1, 3), (2, 3)] {
            let at_once = Pool::new(&addrs, 5000, 5009, (w, n), |_, _, _| false);
            let mut p = Pool::pending(&addrs, 5000, 5009, (w, n));
            // 2 addresses × 10 ports = 20 pairs: share w of n owns ⌈(20 − w) / n⌉.
            let owned = (20 - w as usize).div_ceil(n as usize);
            for k in 0..3 {
                assert_eq!(p.free_count(k), owned, "pending, share {w}/{n}");
            }
            assert_eq!(p.capacity(), 60);
            p.ensure();
            for k in 0..3 {
                assert!(p.free[k].iter().eq(at_once.free[k].iter()), "share {w}/{n}");
                assert_eq!(p.free_count(k), owned);
            }
            assert_eq!(p.capacity(), 60);
        }
    }

    #[test]
    fn presummed_delta_equals_rfc1624_per_word() {
        let mut r = 3u64;
        for _ in 0..10_000 {
            r = r.wrapping_mul(6364136223846793005).wrapping_add(1);
            let (c, a, b, p, q) = (
                (r >> 48) as u16,
                (r >> 16) as u32,
                r.rotate_left(7) as u32,
                (r >> 3) as u16,
                (r >> 29) as u16,
            );
            let d = delta(&[hi(a), lo(a), p], &[hi(b), lo(b), q]);
            let step = update16(update_bytes(c, &a.to_be_bytes(), &b.to_be_bytes()), p, q);
            // Equal as one's-complement values (0 and 0xffff are both zero).
            assert_eq!(patch(c, d) % 0xffff, step % 0xffff, "c={c:#x}");
        }
        // A header that checksums right still does after a patched address change.
        let mut h = [
            0x45u8, 0, 0, 40, 0, 1, 0, 0, 64, 6, 0, 0, 10, 0, 0, 5, 93, 184, 216, 34,
        ];
        let c = !sum(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        let (old, new) = (0x0a00_0005u32, 0xc633_6401u32);
        let d = delta(&[hi(old), lo(old)], &[hi(new), lo(new)]);
        h[12..16].copy_from_slice(&new.to_be_bytes());
        let c2 = patch(c, d);
        h[10..12].copy_from_slice(&c2.to_be_bytes());
        assert_eq!(sum(&h), 0xffff);
    }

    #[test]
    fn parses_prefixes_addresses_and_ranges() {
        assert_eq!(
            parse_prefixes("10.0.0.0/8, 192.168.0.0/16 1.2.3.4").unwrap(),
            vec![
                (Ipv4Addr::new(10, 0, 0, 0), 8),
                (Ipv4Addr::new(192, 168, 0, 0), 16),
                (Ipv4Addr::new(1, 2, 3, 4), 32)
            ]
        );
        assert!(parse_prefixes("10.0.0.0/33").is_err());
        assert!(parse_prefixes("ten/8").is_err());
        assert!(parse_prefixes(" , ").is_err());
        assert_eq!(
            parse_prefixes("10.1.2.3/8").unwrap_err(),
            "bad prefix `10.1.2.3/8`: bits set past the /8"
        );
        assert!(parse_prefixes("2001:db8::/32").is_err());
        assert_eq!(parse_addrs("1.2.3.4,5.6.7.8").unwrap().len(), 2);
        assert!(parse_addrs("1.2.3").is_err());
        assert_eq!(parse_range("1024-65535"), Ok((1024, 65535)));
        assert!(parse_range("0-10").is_err());
        assert!(parse_range("10-9").is_err());
        assert!(parse_range("80").is_err());
        assert!(parse_range("1-70000").is_err());
    }

    #[test]
    fn config_errors_are_one_line_and_name_the_key() {
        let t: toml::Table = toml::from_str("inside = \"10.0.0.0/40\"").unwrap();
        let mut p = Params::new("n", &t);
        let e = Nat::from_params(&mut p).err().unwrap().to_string();
        assert!(e.contains("`inside`") && !e.contains('\n'), "{e}");
        let t: toml::Table = toml::from_str("ports = \"1-70000\"").unwrap();
        assert!(Nat::from_params(&mut Params::new("n", &t)).is_err());
        let t: toml::Table = toml::from_str("public = \"\"").unwrap();
        assert!(Nat::from_params(&mut Params::new("n", &t)).is_err());
        let t: toml::Table = toml::from_str("inside = [\"10.0.0.0/8\"]").unwrap();
        assert!(Nat::from_params(&mut Params::new("n", &t)).is_err());
    }

    /// Fold-back: hits whose refreshes were deferred, folded in later with the time of
    /// the last one (`fast_fold`), leave the mapping as the sequence of touches would:
    /// hits only before a slow-path RST (lingering since: the fold must not lengthen
    /// the linger deadline with the open timeout the hits saw), hits after it, and hits
    /// on both sides. A fold of a token whose mapping was replaced does nothing.
    #[test]
    fn a_folded_refresh_equals_the_sequence_of_touches() {
        let cfg = NatConfig {
            tcp_linger_ns: 2 * SEC,
            ..NatConfig::default()
        };
        let (inside, remote) = (u32::from(Ipv4Addr::new(10, 0, 0, 1)), 0xcb00_7107);
        let fresh = || {
            let mut n = Nat::new(&cfg).unwrap();
            n.pool.ensure();
            let key = OutKey::new(inside, remote, 4000, 443, TCP);
            let i = n.create(key, (inside, remote, 4000, 443, TCP), 0).unwrap();
            let token =
                (FAST_OUT as u64) << 56 | (i as u64) << 32 | n.slab[i as usize].serial as u64;
            (n, i, token)
        };
        const ACK: u8 = 0x10;
        // (outgoing hit times, RST at, hits after it)
        let cases: [(&[u64], u64, &[u64]); 4] = [
            (&[SEC, 2 * SEC], 3 * SEC, &[]),
            (&[SEC], 3 * SEC, &[3 * SEC + 500, 4 * SEC]),
            (&[], 3 * SEC, &[4 * SEC]),
            (&[SEC, 2 * SEC, 2 * SEC + 7], 2 * SEC + 7, &[2 * SEC + 9]),
        ];
        for (before, rst, after) in cases {
            // The sequence: every hit touches.
            let (mut a, i, _) = fresh();
            a.touch(i, SEC / 2, ACK, true);
            for &t in before {
                a.touch(i, t, ACK, true);
            }
            a.touch(i, rst, 0x04, false);
            for &t in after {
                a.touch(i, t, ACK, true);
            }
            // Folded: the first hit touches (the period's normal hit), the rest fold
            // at the end with the last hit's time.
            let (mut b, j, token) = fresh();
            b.touch(j, SEC / 2, ACK, true);
            b.touch(j, rst, 0x04, false);
            let last = after.last().or(before.last()).copied().unwrap_or(SEC / 2);
            b.fast_fold(token, last);
            let (ma, mb) = (a.slab[i as usize], b.slab[j as usize]);
            assert_eq!(
                (ma.state, ma.deadline),
                (mb.state, mb.deadline),
                "{before:?} {rst} {after:?}"
            );
            assert_eq!(mb.state & RST, RST);
        }
        // Without a slow-path touch: the last hit's time and the open timeout.
        let (mut b, j, token) = fresh();
        b.touch(j, SEC, ACK, true);
        b.fast_fold(token, 5 * SEC);
        assert_eq!(b.slab[j as usize].deadline, 5 * SEC + 7440 * SEC);
        // A fold never shortens (a later slow-path touch stands).
        b.touch(j, 9 * SEC, ACK, true);
        b.fast_fold(token, 6 * SEC);
        assert_eq!(b.slab[j as usize].deadline, 9 * SEC + 7440 * SEC);
        // Another mapping in the slot (another serial): nothing.
        b.release(j);
        let key = OutKey::new(inside, remote, 4001, 443, TCP);
        let k = b
            .create(key, (inside, remote, 4001, 443, TCP), 10 * SEC)
            .unwrap();
        assert_eq!(k, j);
        b.fast_fold(token, 20 * SEC);
        assert_eq!(b.slab[k as usize].deadline, 10 * SEC + 7440 * SEC);
        // Unanswered inbound flows never fold; the horizon is the shortest timeout
        // (the linger here) or the next sweep, and none during a sweep.
        assert!(!b.fast_foldable((FAST_NOMAP as u64) << 56));
        assert!(b.fast_foldable(token));
        b.next_sweep = 100 * SEC;
        assert_eq!(b.fast_horizon(50 * SEC), 52 * SEC);
        assert_eq!(b.fast_horizon(99 * SEC), 100 * SEC);
        b.sweep_cursor = 1;
        assert_eq!(b.fast_horizon(50 * SEC), 50 * SEC);
    }

    #[test]
    fn inside_prefixes_match_by_mask() {
        let n = Nat::new(&NatConfig::default()).unwrap();
        for (a, inside) in [
            ([10, 1, 2, 3], true),
            ([172, 31, 0, 1], true),
            ([172, 32, 0, 1], false),
            ([192, 168, 9, 9], true),
            ([8, 8, 8, 8], false),
        ] {
            assert_eq!(n.is_inside(u32::from_be_bytes(a)), inside, "{a:?}");
        }
    }
}
