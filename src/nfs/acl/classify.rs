//! First-match classification by bit vectors (Lakshman & Stiliadis, SIGCOMM '98).
//!
//! Every rule variant (an [`Entry`]) gets one bit, in rule order. For each field the value
//! space is cut into elementary segments at every range boundary any atom uses, and each
//! segment stores the bitmap of entries whose atoms on that field hold there (plus one
//! bitmap for "field absent", e.g. ports of an ICMP packet). A packet's verdict is the
//! lowest bit set in the AND of its fields' bitmaps: no per-packet scan of rules, any mix
//! of negations, ranges and prefixes is exact, and the AND stops at the first non-zero
//! word, so high-priority matches are found early.
//!
//! Lookups: a field cut into few segments (up to [`SEARCH_MAX`], what most rule sets
//! give) is a binary search over the segment starts, so a small rule set builds and
//! holds no more than its segments. Otherwise protocol, ICMP type, TCP flags and ports
//! index a direct table (value -> bitmap id); IPv4 addresses a two-level index (per /16,
//! then per /24 where a /16 holds boundaries) ending in a bitmap id or, inside a /24 with
//! boundaries, a short binary search; IPv6 addresses always a binary search. Protocol,
//! ICMP type, flags and fragmentation (tables of at most 513 entries, one page or two)
//! always index a table. Fields no rule constrains are skipped. Identical bitmaps are
//! stored once. Memory is O(segments x entries / 8) bytes per field: 1,000 rules with
//! distinct prefixes take well under 1 MiB; building is proportional to the segments,
//! plus one pass over a 64 Ki-entry table for a large port or IPv4 field.

use hashbrown::HashTable;

use super::rule::{Atom, Field, Rule, ALL_FIELDS, FIELDS};

/// Words ANDed at a time: 256 entries, a few vector instructions per field.
const CHUNK: usize = 4;

/// The packet's values per field (None: absent). Built per packet on the stack.
pub type Values = [Option<u128>; FIELDS];

/// Segments up to which a field is searched rather than indexed: a binary search of
/// 32 starts is five steps within one or two cache lines, and spares building (and
/// faulting in) a 256 KiB table at start-up. Classification runs on verdict-cache misses
/// only.
pub const SEARCH_MAX: usize = 32;

/// Tables over domains up to this many values are always built (a page or two).
const SMALL_DOMAIN: usize = 1024;

/// A field with a small domain (protocol, ICMP type, flags, fragmentation, ports).
struct Direct {
    map: DirectMap,
    absent: u32,
}

enum DirectMap {
    /// Value -> bitmap id.
    Table(Vec<u32>),
    /// Few segments: their starts (sorted, first 0) and bitmap ids.
    Search { starts: Vec<u32>, bms: Vec<u32> },
}

/// Segment starts (sorted, first is 0) and their bitmap ids.
struct Segments<T> {
    starts: Vec<T>,
    bms: Vec<u32>,
    absent: u32,
    /// IPv4 only: per /16, a bitmap id, or (with [`DEEPER`]) a block of `l2`. Empty when
    /// there are at most [`SEARCH_MAX`] segments (then `starts` is searched).
    l1: Vec<u32>,
    /// IPv4 only: blocks of 256 entries per /24: a bitmap id, or (with [`DEEPER`]) the
    /// segment holding the /24's first address, to search from.
    l2: Vec<u32>,
}

pub struct Classifier {
    words: usize,
    /// Entry (bit) -> rule index.
    entry_rule: Vec<u32>,
    /// Bitmaps, `words` u64 each; id 0 is all ones.
    pool: Vec<u64>,
    proto: Option<Direct>,
    icmp: Option<Direct>,
    flags: Option<Direct>,
    frag: Option<Direct>,
    sport: Option<Direct>,
    dport: Option<Direct>,
    src4: Option<Segments<u32>>,
    dst4: Option<Segments<u32>>,
    src6: Option<Segments<u128>>,
    dst6: Option<Segments<u128>>,
}

/// Fast-path packet view: what the lookup needs, without u128 where not needed.
#[derive(Clone, Copy, Debug, Default)]
pub struct Key {
    /// Family and protocol as in [`Field::Proto`] (512: not IP).
    pub proto: u16,
    pub src4: Option<u32>,
    pub dst4: Option<u32>,
    pub src6: Option<u128>,
    pub dst6: Option<u128>,
    pub sport: Option<u16>,
    pub dport: Option<u16>,
    pub icmp: Option<u16>,
    pub flags: Option<u8>,
    /// IPv4 fragmentation as in [`Field::Frag`]; None when not IPv4.
    pub frag: Option<u8>,
}

impl Key {
    pub fn values(&self) -> Values {
        [
            Some(self.proto as u128),
            self.src4.map(u128::from),
            self.dst4.map(u128::from),
            self.src6,
            self.dst6,
            self.sport.map(u128::from),
            self.dport.map(u128::from),
            self.icmp.map(u128::from),
            self.flags.map(u128::from),
            self.frag.map(u128::from),
        ]
    }
}

struct Builder {
    words: usize,
    pool: Vec<u64>,
    /// (hash, id) of every bitmap in the pool.
    dedup: HashTable<(u64, u32)>,
}

impl Classifier {
    /// Builds the classifier for `rules` in priority order.
    pub fn new(rules: &[Rule]) -> Classifier {
        // Entries: every variant of every rule, in rule order.
        let mut entry_rule = Vec::new();
        let mut entries: Vec<&super::rule::Conj> = Vec::new();
        for (i, r) in rules.iter().enumerate() {
            for v in &r.variants {
                entry_rule.push(i as u32);
                entries.push(v);
            }
        }
        let n = entries.len();
        // Padded to whole chunks so the AND below runs on fixed-size blocks (SIMD).
        let words = n.div_ceil(64).div_ceil(CHUNK) * CHUNK;
        let mut b = Builder {
            words,
            pool: Vec::new(),
            dedup: HashTable::new(),
        };
        let mut ones = vec![0u64; words];
        for (i, w) in ones.iter_mut().enumerate() {
            let bits = n.saturating_sub(i * 64).min(64);
            *w = if bits == 64 { !0 } else { (1u64 << bits) - 1 };
        }
        let h = bits_hash(&ones);
        b.intern(&ones, h);
        let per_field = |f: Field| -> Vec<(usize, &[Atom])> {
            entries
                .iter()
                .enumerate()
                .filter(|(_, c)| !c.atoms[f as usize].is_empty())
                .map(|(i, c)| (i, c.atoms[f as usize].as_slice()))
                .collect()
        };
        let mut c = Classifier {
            words,
            entry_rule,
            pool: Vec::new(),
            proto: None,
            icmp: None,
            flags: None,
            frag: None,
            sport: None,
            dport: None,
            src4: None,
            dst4: None,
            src6: None,
            dst6: None,
        };
        for f in ALL_FIELDS {
            let cons = per_field(f);
            if cons.is_empty() {
                continue;
            }
            let max: u128 = match f {
                Field::Proto => 512,
                Field::Icmp => 511,
                Field::Flags => 255,
                Field::Frag => 2,
                Field::Sport | Field::Dport => 65535,
                Field::Src4 | Field::Dst4 => u32::MAX as u128,
                Field::Src6 | Field::Dst6 => u128::MAX,
            };
            let (starts, bms, absent) = b.segments(n, &cons, max);
            match f {
                Field::Proto
                | Field::Icmp
                | Field::Flags
                | Field::Frag
                | Field::Sport
                | Field::Dport => {
                    let map = if starts.len() <= SEARCH_MAX && max as usize >= SMALL_DOMAIN {
                        DirectMap::Search {
                            starts: starts.iter().map(|&s| s as u32).collect(),
                            bms,
                        }
                    } else {
                        let mut table = vec![0u32; max as usize + 1];
                        for (k, &s) in starts.iter().enumerate() {
                            let end = starts.get(k + 1).map_or(max as usize + 1, |&e| e as usize);
                            table[s as usize..end].fill(bms[k]);
                        }
                        DirectMap::Table(table)
                    };
                    let d = Some(Direct { map, absent });
                    match f {
                        Field::Proto => c.proto = d,
                        Field::Icmp => c.icmp = d,
                        Field::Flags => c.flags = d,
                        Field::Frag => c.frag = d,
                        Field::Sport => c.sport = d,
                        _ => c.dport = d,
                    }
                }
                Field::Src4 | Field::Dst4 => {
                    let starts: Vec<u32> = starts.iter().map(|&s| s as u32).collect();
                    let (l1, l2) = if starts.len() <= SEARCH_MAX {
                        (Vec::new(), Vec::new())
                    } else {
                        v4_index(&starts, &bms)
                    };
                    let s = Some(Segments {
                        starts,
                        bms,
                        absent,
                        l1,
                        l2,
                    });
                    if f == Field::Src4 {
                        c.src4 = s
                    } else {
                        c.dst4 = s
                    }
                }
                _ => {
                    let s = Some(Segments {
                        starts,
                        bms,
                        absent,
                        l1: Vec::new(),
                        l2: Vec::new(),
                    });
                    if f == Field::Src6 {
                        c.src6 = s
                    } else {
                        c.dst6 = s
                    }
                }
            }
        }
        c.pool = b.pool;
        c
    }

    /// Number of entries (rule variants), i.e. bits per bitmap.
    pub fn entries(&self) -> usize {
        self.entry_rule.len()
    }

    /// `k` with every field no rule constrains cleared: classification reads only the
    /// constrained fields, so both keys classify alike, and a verdict cache keyed on the
    /// result holds one entry where the full key would spread over many (TCP flags,
    /// source ports).
    #[inline]
    pub fn relevant(&self, k: &Key) -> Key {
        let on = |f| self.constrains(f);
        Key {
            proto: if on(Field::Proto) { k.proto } else { 0 },
            src4: k.src4.filter(|_| on(Field::Src4)),
            dst4: k.dst4.filter(|_| on(Field::Dst4)),
            src6: k.src6.filter(|_| on(Field::Src6)),
            dst6: k.dst6.filter(|_| on(Field::Dst6)),
            sport: k.sport.filter(|_| on(Field::Sport)),
            dport: k.dport.filter(|_| on(Field::Dport)),
            icmp: k.icmp.filter(|_| on(Field::Icmp)),
            flags: k.flags.filter(|_| on(Field::Flags)),
            frag: k.frag.filter(|_| on(Field::Frag)),
        }
    }

    /// Whether some rule constrains field `f` (classification reads no other field).
    pub fn constrains(&self, f: Field) -> bool {
        match f {
            Field::Proto => self.proto.is_some(),
            Field::Src4 => self.src4.is_some(),
            Field::Dst4 => self.dst4.is_some(),
            Field::Src6 => self.src6.is_some(),
            Field::Dst6 => self.dst6.is_some(),
            Field::Sport => self.sport.is_some(),
            Field::Dport => self.dport.is_some(),
            Field::Icmp => self.icmp.is_some(),
            Field::Flags => self.flags.is_some(),
            Field::Frag => self.frag.is_some(),
        }
    }

    /// Bytes the classifier holds (bitmaps, lookup tables, segment lists).
    pub fn memory(&self) -> usize {
        use std::mem::size_of_val;
        let direct = [
            &self.proto,
            &self.icmp,
            &self.flags,
            &self.frag,
            &self.sport,
            &self.dport,
        ];
        let d: usize = direct
            .iter()
            .flat_map(|d| d.iter())
            .map(|d| match &d.map {
                DirectMap::Table(t) => size_of_val(&**t),
                DirectMap::Search { starts, bms } => size_of_val(&**starts) + size_of_val(&**bms),
            })
            .sum();
        let s4: usize = [&self.src4, &self.dst4]
            .iter()
            .flat_map(|s| s.iter())
            .map(|s| {
                size_of_val(&*s.starts)
                    + size_of_val(&*s.bms)
                    + size_of_val(&*s.l1)
                    + size_of_val(&*s.l2)
            })
            .sum();
        let s6: usize = [&self.src6, &self.dst6]
            .iter()
            .flat_map(|s| s.iter())
            .map(|s| size_of_val(&*s.starts) + size_of_val(&*s.bms))
            .sum();
        size_of_val(&*self.pool) + size_of_val(&*self.entry_rule) + d + s4 + s6
    }

    /// Distinct bitmaps stored.
    pub fn bitmaps(&self) -> usize {
        self.pool.len().checked_div(self.words).unwrap_or(0)
    }

    /// Index of the first rule matching `k`, if any.
    #[inline]
    pub fn classify(&self, k: &Key) -> Option<u32> {
        if self.words == 0 {
            return None;
        }
        let mut ids = [0u32; FIELDS];
        let mut n = 0;
        let mut push = |id: u32| {
            // Bitmap 0 is all ones: nothing to AND.
            if id != 0 {
                ids[n] = id;
                n += 1;
            }
        };
        if let Some(d) = &self.proto {
            push(d.get(Some(u32::from(k.proto))));
        }
        if let Some(s) = &self.src4 {
            push(s.lookup4(k.src4));
        }
        if let Some(s) = &self.dst4 {
            push(s.lookup4(k.dst4));
        }
        if let Some(s) = &self.src6 {
            push(s.lookup6(k.src6));
        }
        if let Some(s) = &self.dst6 {
            push(s.lookup6(k.dst6));
        }
        if let Some(d) = &self.sport {
            push(d.get(k.sport.map(u32::from)));
        }
        if let Some(d) = &self.dport {
            push(d.get(k.dport.map(u32::from)));
        }
        if let Some(d) = &self.icmp {
            push(d.get(k.icmp.map(u32::from)));
        }
        if let Some(d) = &self.flags {
            push(d.get(k.flags.map(u32::from)));
        }
        if let Some(d) = &self.frag {
            push(d.get(k.frag.map(u32::from)));
        }
        let w = self.words;
        let mut sl: [&[u64]; FIELDS] = [&[]; FIELDS];
        for (s, &id) in sl.iter_mut().zip(&ids[..n]) {
            let o = id as usize * w;
            *s = &self.pool[o..o + w];
        }
        let sl = &sl[..n];
        if sl.is_empty() {
            return Some(self.entry_rule[0]);
        }
        for c in (0..w).step_by(CHUNK) {
            let mut x = [!0u64; CHUNK];
            for s in sl {
                let b: &[u64; CHUNK] = s[c..c + CHUNK].try_into().unwrap_or(&[0; CHUNK]);
                for j in 0..CHUNK {
                    x[j] &= b[j];
                }
            }
            if x.iter().any(|&v| v != 0) {
                for (j, &v) in x.iter().enumerate() {
                    if v != 0 {
                        let e = (c + j) * 64 + v.trailing_zeros() as usize;
                        return self.entry_rule.get(e).copied();
                    }
                }
            }
        }
        None
    }
}

impl Direct {
    #[inline]
    fn get(&self, v: Option<u32>) -> u32 {
        let Some(v) = v else { return self.absent };
        match &self.map {
            DirectMap::Table(t) => t.get(v as usize).copied().unwrap_or(self.absent),
            // starts[0] is 0, so the segment is the last start <= v.
            DirectMap::Search { starts, bms } => {
                bms[starts.partition_point(|&s| s <= v).max(1) - 1]
            }
        }
    }
}

impl Segments<u32> {
    #[inline]
    fn lookup4(&self, v: Option<u32>) -> u32 {
        let Some(v) = v else { return self.absent };
        let Some(&e) = self.l1.get((v >> 16) as usize) else {
            // No index (few segments): search them all.
            return self.bms[self.starts.partition_point(|&s| s <= v).max(1) - 1];
        };
        if e & DEEPER == 0 {
            return e;
        }
        let i = (e & !DEEPER) as usize * 256 + ((v >> 8) & 0xff) as usize;
        let e = self.l2.get(i).copied().unwrap_or(0);
        if e & DEEPER == 0 {
            return e;
        }
        // Boundaries inside one /24: at most 256 segments to search.
        let lo = (e & !DEEPER) as usize;
        let end = self.starts.len().min(lo + 257);
        let seg = lo + self.starts[(lo + 1).min(end)..end].partition_point(|&s| s <= v);
        self.bms[seg]
    }
}

/// Marks an index entry that points deeper instead of holding a bitmap id.
const DEEPER: u32 = 1 << 31;

/// The two-level IPv4 index: most /16s (and then /24s) hold one segment, so most lookups
/// are one or two loads. Built by walking the starts once (addresses only increase), not
/// by a search per block.
fn v4_index(starts: &[u32], bms: &[u32]) -> (Vec<u32>, Vec<u32>) {
    // The segment holding `a`, moving `at` forward from the segment of an earlier address.
    let seg = |at: usize, a: u32| {
        let mut i = at;
        while starts.get(i + 1).is_some_and(|&s| s <= a) {
            i += 1;
        }
        i
    };
    let mut l1 = Vec::with_capacity(65536);
    let mut l2 = Vec::new();
    let mut lo = 0;
    let mut h = 0u32;
    while h < 65536 {
        let a = h << 16;
        lo = seg(lo, a);
        // The /16s before the one holding the next boundary lie wholly in segment `lo`:
        // filled at once, so the work follows the boundaries, not the 65,536 blocks.
        let stop = starts.get(lo + 1).map_or(65536, |&s| s >> 16);
        if stop > h {
            l1.resize(stop as usize, bms[lo]);
            h = stop;
            continue;
        }
        // This /16 holds a boundary past its first address: two segments at least.
        h += 1;
        l1.push(DEEPER | (l2.len() / 256) as u32);
        let mut lo = lo;
        for m in 0..256u32 {
            let b = a | m << 8;
            lo = seg(lo, b);
            let hi = seg(lo, b | 0xff);
            l2.push(if lo == hi {
                bms[lo]
            } else {
                DEEPER | lo as u32
            });
        }
    }
    (l1, l2)
}

impl Segments<u128> {
    #[inline]
    fn lookup6(&self, v: Option<u128>) -> u32 {
        let Some(v) = v else { return self.absent };
        let seg = self.starts.partition_point(|&s| s <= v).max(1) - 1;
        self.bms[seg]
    }
}

impl Builder {
    /// The id of bitmap `bm` (whose [`bits_hash`] is `h`), stored once. The dedup table
    /// holds hashes and ids and compares against the pool, so no bitmap is kept twice.
    fn intern(&mut self, bm: &[u64], h: u64) -> u32 {
        let w = self.words;
        if w == 0 {
            // No entries: every bitmap is the empty one.
            return 0;
        }
        let pool = &self.pool;
        let same = |&(hh, id): &(u64, u32)| hh == h && pool[id as usize * w..][..w] == *bm;
        if let Some(&(_, id)) = self.dedup.find(h, same) {
            return id;
        }
        let id = (self.pool.len() / w) as u32;
        self.pool.extend_from_slice(bm);
        self.dedup.insert_unique(h, (h, id), |&(h, _)| h);
        id
    }

    /// Segment starts over `0..=max`, their bitmap ids, and the absent bitmap id, for the
    /// entries `cons` that constrain this field (all others hold everywhere).
    ///
    /// One sweep over the starts: each entry's set of values where all its atoms hold is
    /// a few ranges whose ends are among the starts, so its bit is switched on and off by
    /// events at those starts instead of testing every entry at every segment (which made
    /// compilation quadratic in rules). Work: sorting the events, plus one hash and at most
    /// one copy of the bitmap per segment.
    fn segments(
        &mut self,
        n: usize,
        cons: &[(usize, &[Atom])],
        max: u128,
    ) -> (Vec<u128>, Vec<u32>, u32) {
        let mut starts = vec![0u128];
        for (_, atoms) in cons {
            for a in *atoms {
                for &(lo, hi) in &a.ranges {
                    starts.push(lo.min(max));
                    if hi < max {
                        starts.push(hi + 1);
                    }
                }
            }
        }
        starts.sort_unstable();
        starts.dedup();
        let mut base = vec![0u64; self.words];
        let mut constrained = vec![false; n];
        for &(e, _) in cons {
            constrained[e] = true;
        }
        for e in (0..n).filter(|&e| !constrained[e]) {
            base[e / 64] |= 1 << (e % 64);
        }
        // (value, on, entry): at one value an entry's bit goes off before it goes on.
        let mut events: Vec<(u128, bool, u32)> = Vec::with_capacity(2 * cons.len());
        for &(e, atoms) in cons {
            for (lo, hi) in holding(atoms, max) {
                events.push((lo, true, e as u32));
                if hi < max {
                    events.push((hi + 1, false, e as u32));
                }
            }
        }
        events.sort_unstable();
        let mut bm = base.clone();
        // The bitmap's hash follows its bits (one XOR per event), so no segment's bitmap
        // is hashed whole.
        let mut h = bits_hash(&bm);
        let mut ev = events.iter().peekable();
        let mut bms = Vec::with_capacity(starts.len());
        for &s in &starts {
            while let Some(&(_, on, e)) = ev.next_if(|x| x.0 <= s) {
                let (w, bit) = (e as usize / 64, 1u64 << (e % 64));
                if (bm[w] & bit != 0) != on {
                    bm[w] ^= bit;
                    h ^= bit_hash(e as usize);
                }
            }
            bms.push(self.intern(&bm, h));
        }
        let mut bm = base;
        for &(e, atoms) in cons {
            if atoms.iter().all(|a| a.holds(None)) {
                bm[e / 64] |= 1 << (e % 64);
            }
        }
        let absent = self.intern(&bm, bits_hash(&bm));
        (starts, bms, absent)
    }
}

/// A bitmap's hash: the XOR of its set bits' [`bit_hash`] (Zobrist hashing), so flipping
/// one bit updates it in one step.
fn bits_hash(bm: &[u64]) -> u64 {
    let mut h = 0;
    for (i, &w) in bm.iter().enumerate() {
        let mut w = w;
        while w != 0 {
            h ^= bit_hash(i * 64 + w.trailing_zeros() as usize);
            w &= w - 1;
        }
    }
    h
}

/// Bit `e`'s share of a bitmap's hash (SplitMix64's finaliser of `e`).
fn bit_hash(e: usize) -> u64 {
    let mut z = (e as u64)
        .wrapping_add(1)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The values in `0..=max` where every atom holds, as sorted, disjoint, non-adjacent
/// ranges whose ends are the atoms' range ends.
fn holding(atoms: &[Atom], max: u128) -> Vec<(u128, u128)> {
    let mut set = vec![(0, max)];
    for a in atoms {
        let r = if a.neg {
            complement(&a.ranges, max)
        } else {
            a.ranges.clone()
        };
        set = intersect(&set, &r);
    }
    set
}

/// `0..=max` minus `ranges` (sorted, disjoint).
fn complement(ranges: &[(u128, u128)], max: u128) -> Vec<(u128, u128)> {
    let mut out = Vec::with_capacity(ranges.len() + 1);
    let mut next = Some(0u128);
    for &(lo, hi) in ranges {
        let Some(from) = next else { break };
        if lo > from {
            out.push((from, (lo - 1).min(max)));
        }
        next = hi.checked_add(1).filter(|&v| v <= max).map(|v| v.max(from));
    }
    if let Some(from) = next.filter(|&v| v <= max) {
        out.push((from, max));
    }
    out
}

/// The intersection of two sorted lists of disjoint ranges.
fn intersect(a: &[(u128, u128)], b: &[(u128, u128)]) -> Vec<(u128, u128)> {
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() && j < b.len() {
        let lo = a[i].0.max(b[j].0);
        let hi = a[i].1.min(b[j].1);
        if lo <= hi {
            out.push((lo, hi));
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// The reference semantics: a linear scan (tests compare the classifier against it).
pub fn linear(rules: &[Rule], v: &Values) -> Option<u32> {
    rules.iter().position(|r| r.matches(v)).map(|i| i as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holding_sets_intersect_atoms_and_their_complements() {
        let pos = Atom::new(false, vec![(10, 20), (30, 40)]);
        let neg = Atom::new(true, vec![(15, 32)]);
        assert_eq!(
            holding(std::slice::from_ref(&pos), 100),
            vec![(10, 20), (30, 40)]
        );
        assert_eq!(
            holding(std::slice::from_ref(&neg), 100),
            vec![(0, 14), (33, 100)]
        );
        assert_eq!(holding(&[pos, neg], 100), vec![(10, 14), (33, 40)]);
        // Ranges touching either end of the domain, and one past it.
        assert_eq!(complement(&[(0, 5), (95, 200)], 100), vec![(6, 94)]);
        assert_eq!(complement(&[], u128::MAX), vec![(0, u128::MAX)]);
        assert_eq!(complement(&[(0, u128::MAX)], u128::MAX), vec![]);
        assert_eq!(
            holding(&[Atom::new(true, vec![(7, 7)])], u128::MAX),
            vec![(0, 6), (8, u128::MAX)]
        );
    }

    /// Rule sets on either side of [`SEARCH_MAX`] segments (searched, then indexed) on
    /// ports and IPv4 addresses, against the linear scan at every range end and next to
    /// it: both representations give the same first match.
    #[test]
    fn searched_and_indexed_fields_agree_with_a_linear_scan() {
        for n in [1u32, 5, 15, 16, 17, 31, 40, 200] {
            let mut text = String::new();
            for i in 0..n {
                // Ports 100 apart, /24s 3 apart, hosts, and a range crossing /16s.
                text.push_str(&format!("deny tcp dst port {}\n", 1000 + 100 * i));
                text.push_str(&format!(
                    "allow src net 10.{}.{}.0/24\n",
                    i % 7,
                    (3 * i) % 256
                ));
                text.push_str(&format!("deny dst host 192.168.{}.{}\n", i / 200, i % 200));
                text.push_str(&format!(
                    "allow udp src portrange {}-{}\n",
                    7 * i,
                    7 * i + 3
                ));
            }
            text.push_str("deny dst net 172.16.0.0/12\n");
            let rules = crate::nfs::acl::parse_rules(text.lines()).unwrap();
            let c = Classifier::new(&rules);
            let mut ports = vec![0u16, 65535];
            let mut addrs = vec![0u32, u32::MAX, 0xac10_0000, 0xac1f_ffff, 0xac20_0000];
            for i in 0..n {
                for p in [1000 + 100 * i, 7 * i, 7 * i + 3] {
                    ports.extend([p.saturating_sub(1), p, p + 1].map(|p| p as u16));
                }
                let net = u32::from_be_bytes([10, (i % 7) as u8, (3 * i % 256) as u8, 0]);
                let host = u32::from_be_bytes([192, 168, (i / 200) as u8, (i % 200) as u8]);
                for a in [net, net | 0xff, host] {
                    addrs.extend([a.wrapping_sub(1), a, a.wrapping_add(1)]);
                }
            }
            let mut checked = 0;
            // Every address with a few ports, every port with a few addresses.
            let (na, np) = (addrs.len(), ports.len());
            let pairs = (0..na * 4).map(|x| (x / 4, x * 7 % np));
            let pairs = pairs.chain((0..np * 4).map(|x| (x * 5 % na, x / 4)));
            for (j, m) in pairs {
                let (a, p) = (addrs[j], ports[m]);
                {
                    let b = addrs[(j + m) % na];
                    for proto in [6u16, 17] {
                        let k = Key {
                            proto,
                            src4: Some(a),
                            dst4: Some(b),
                            sport: Some(p),
                            dport: Some(ports[(m * 7 + j) % ports.len()]),
                            ..Key::default()
                        };
                        assert_eq!(
                            c.classify(&k),
                            linear(&rules, &k.values()),
                            "{n} rules, {k:?}"
                        );
                        checked += 1;
                    }
                }
            }
            assert!(checked > 100);
        }
    }

    /// Start-up proportional to the rules: a small rule set holds (and so builds) no
    /// 64 Ki-entry port table nor /16 index, a large one still indexes.
    #[test]
    fn small_rule_sets_build_no_large_tables() {
        let ten = [
            "deny src net 10.0.250.0/24",
            "deny dst net 203.0.113.0/24",
            "deny dst host 93.184.216.34",
            "deny tcp dst port 23",
            "deny tcp dst port 445",
            "deny udp dst port 1900",
            "deny ip frag",
            "allow tcp dst port 80",
            "allow tcp dst port 443",
        ];
        let rules = crate::nfs::acl::parse_rules(ten).unwrap();
        let c = Classifier::new(&rules);
        // Protocol and fragmentation tables (513 + 3 entries), segments, bitmaps.
        assert!(c.memory() < 8 * 1024, "{} bytes", c.memory());
        let many: Vec<String> = (0..1000)
            .map(|i| format!("deny src host 10.200.{}.{}", i / 256, i % 256))
            .collect();
        let rules = crate::nfs::acl::parse_rules(many.iter().map(|s| s.as_str())).unwrap();
        let c = Classifier::new(&rules);
        assert!(c.memory() >= 65536 * 4, "{} bytes", c.memory());
    }

    #[test]
    fn equal_bitmaps_are_stored_once() {
        // 300 rules on one host each, alternating with the gaps between them: the gaps all
        // share the "no host rule" bitmap, so bitmaps = hosts + gap + ones + absent at most.
        let mut text = String::new();
        for i in 0..300u32 {
            text.push_str(&format!("deny src host 10.0.{}.{}\n", i / 200, i % 200 + 1));
        }
        let rules = crate::nfs::acl::parse_rules(text.lines()).unwrap();
        let c = Classifier::new(&rules);
        assert!(c.bitmaps() <= 300 + 3, "{} bitmaps", c.bitmaps());
        for i in 0..300u32 {
            let k = Key {
                proto: 6,
                src4: Some(u32::from_be_bytes([
                    10,
                    0,
                    (i / 200) as u8,
                    (i % 200 + 1) as u8,
                ])),
                ..Key::default()
            };
            assert_eq!(c.classify(&k), Some(i), "host {i}");
        }
        let other = Key {
            proto: 6,
            src4: Some(u32::from_be_bytes([10, 0, 0, 250])),
            ..Key::default()
        };
        assert_eq!(c.classify(&other), None);
    }
}
