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
//! Lookups: protocol, ICMP type, TCP flags and ports index a direct table (value ->
//! bitmap id); IPv4 addresses a two-level index (per /16, then per /24 where a /16 holds
//! boundaries) ending in a bitmap id or, inside a /24 with boundaries, a short binary
//! search; IPv6 addresses a binary search over the segment starts. Fields no rule
//! constrains are skipped. Identical bitmaps are stored once. Memory is
//! O(segments x entries / 8) bytes per field: 1,000 rules with distinct prefixes take
//! well under 1 MiB.

use std::collections::HashMap;

use super::rule::{Atom, Field, Rule, ALL_FIELDS, FIELDS};

/// Words ANDed at a time: 256 entries, a few vector instructions per field.
const CHUNK: usize = 4;

/// The packet's values per field (None: absent). Built per packet on the stack.
pub type Values = [Option<u128>; FIELDS];

/// Direct table over a small domain (protocol, ICMP type, flags, ports).
struct Direct {
    table: Vec<u32>,
    absent: u32,
}

/// Segment starts (sorted, first is 0) and their bitmap ids.
struct Segments<T> {
    starts: Vec<T>,
    bms: Vec<u32>,
    absent: u32,
    /// IPv4 only: per /16, a bitmap id, or (with [`DEEPER`]) a block of `l2`.
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
    dedup: HashMap<Vec<u64>, u32>,
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
            dedup: HashMap::new(),
        };
        let mut ones = vec![0u64; words];
        for (i, w) in ones.iter_mut().enumerate() {
            let bits = n.saturating_sub(i * 64).min(64);
            *w = if bits == 64 { !0 } else { (1u64 << bits) - 1 };
        }
        b.intern(ones);
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
                    let mut table = vec![0u32; max as usize + 1];
                    for (k, &s) in starts.iter().enumerate() {
                        let end = starts.get(k + 1).map_or(max as usize + 1, |&e| e as usize);
                        table[s as usize..end].fill(bms[k]);
                    }
                    let d = Some(Direct { table, absent });
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
                    let (l1, l2) = v4_index(&starts, &bms);
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
            .map(|d| size_of_val(&*d.table))
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
        match v {
            Some(v) => self.table.get(v as usize).copied().unwrap_or(self.absent),
            None => self.absent,
        }
    }
}

impl Segments<u32> {
    #[inline]
    fn lookup4(&self, v: Option<u32>) -> u32 {
        let Some(v) = v else { return self.absent };
        let e = self.l1[(v >> 16) as usize];
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
/// are one or two loads.
fn v4_index(starts: &[u32], bms: &[u32]) -> (Vec<u32>, Vec<u32>) {
    let seg = |a: u32| starts.partition_point(|&s| s <= a).max(1) - 1;
    let mut l1 = Vec::with_capacity(65536);
    let mut l2 = Vec::new();
    for h in 0..65536u32 {
        let a = h << 16;
        let (lo, hi) = (seg(a), seg(a | 0xffff));
        if lo == hi {
            l1.push(bms[lo]);
            continue;
        }
        l1.push(DEEPER | (l2.len() / 256) as u32);
        for m in 0..256u32 {
            let b = a | m << 8;
            let (lo, hi) = (seg(b), seg(b | 0xff));
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
    fn intern(&mut self, bm: Vec<u64>) -> u32 {
        if let Some(&id) = self.dedup.get(&bm) {
            return id;
        }
        let id = (self.pool.len() / self.words.max(1)) as u32;
        self.pool.extend_from_slice(&bm);
        self.dedup.insert(bm, id);
        id
    }

    /// Segment starts over `0..=max`, their bitmap ids, and the absent bitmap id, for the
    /// entries `cons` that constrain this field (all others hold everywhere).
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
        let constrained: std::collections::HashSet<usize> = cons.iter().map(|c| c.0).collect();
        for e in (0..n).filter(|e| !constrained.contains(e)) {
            base[e / 64] |= 1 << (e % 64);
        }
        let mut bms = Vec::with_capacity(starts.len());
        for &s in &starts {
            let mut bm = base.clone();
            for &(e, atoms) in cons {
                if atoms.iter().all(|a| a.holds(Some(s))) {
                    bm[e / 64] |= 1 << (e % 64);
                }
            }
            bms.push(self.intern(bm));
        }
        let mut bm = base;
        for &(e, atoms) in cons {
            if atoms.iter().all(|a| a.holds(None)) {
                bm[e / 64] |= 1 << (e % 64);
            }
        }
        let absent = self.intern(bm);
        (starts, bms, absent)
    }
}

/// The reference semantics: a linear scan (tests compare the classifier against it).
pub fn linear(rules: &[Rule], v: &Values) -> Option<u32> {
    rules.iter().position(|r| r.matches(v)).map(|i| i as u32)
}
