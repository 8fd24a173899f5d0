//! The compiled plan: fields as precomputed (header, byte offset, shift, mask) reads,
//! names resolved to indices, blocks of ops run by [`Plan::run`] with no allocation and
//! no strings per packet. The checker builds it; the NF owns it.

use super::ast::BinOp;
use super::flat::{Early, Flat, Keys};
use super::table::{Act, Table};
use crate::packet::checksum;
use crate::packet::{Batch, LinkKind, Meta, MAX_BATCH};

/// Most decoders a program may declare (per-packet header offsets live on the stack).
pub const MAX_DECODERS: usize = 32;

/// The offset of a header that did not fit this packet (see [`Pkt::field`]): far past
/// any packet (a buffer holds at most 64 KiB and its headroom).
const UNSET: u32 = 1 << 30;

/// How one field is read, relative to its header's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    U8(u16),
    U16(u16),
    U32(u16),
    /// A MAC address or any other 6-byte aligned field.
    U48(u16),
    /// Any other width or alignment: `nbytes` bytes from `off` big-endian, shifted right,
    /// masked.
    Bits {
        off: u16,
        nbytes: u8,
        shift: u8,
        mask: u64,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldRef {
    pub hdr: u8,
    pub read: Read,
    pub bits: u32,
    /// The fast read: the 8 bytes from `off` big-endian, shifted right by `sh`, masked;
    /// `sh` is `NO_WORD` when the field does not fit in 8 bytes from its first byte.
    off: u16,
    sh: u8,
    mask: u64,
}

const NO_WORD: u8 = u8::MAX;

impl FieldRef {
    /// The field of a header at `base`, by the one-load path only (`None` near the
    /// packet's end or for a wide field): for a batch's prefetch pass, which may guess.
    #[inline(always)]
    pub fn peek(&self, d: &[u8], base: usize) -> Option<u64> {
        if self.sh == NO_WORD {
            return None;
        }
        let o = base + self.off as usize;
        let w = d.get(o..o + 8)?;
        Some((u64::from_be_bytes(w.try_into().ok()?) >> self.sh) & self.mask)
    }
}

impl FieldRef {
    /// The one-load read's byte offset, shift and mask (see [`FieldRef::peek`]); `None`
    /// for a field wider than its word.
    pub fn word(&self) -> Option<(u16, u8, u64)> {
        (self.sh != NO_WORD).then_some((self.off, self.sh, self.mask))
    }
}

impl FieldRef {
    /// Field of decoder `hdr`, `bits` wide at `bit_off` bits from its header's start.
    pub fn new(hdr: u8, bit_off: u32, bits: u32) -> FieldRef {
        let rem = bit_off % 8;
        FieldRef {
            hdr,
            read: Read::new(bit_off, bits),
            bits,
            off: (bit_off / 8) as u16,
            sh: if rem + bits <= 64 {
                (64 - rem - bits) as u8
            } else {
                NO_WORD
            },
            mask: if bits >= 64 {
                u64::MAX
            } else {
                (1 << bits) - 1
            },
        }
    }
}

impl FieldRef {
    /// The header's first 4 bits (IPv4's `version`).
    pub fn is_first_nibble(&self) -> bool {
        matches!(
            self.read,
            Read::Bits {
                off: 0,
                nbytes: 1,
                shift: 4,
                mask: 0xf
            }
        )
    }
}

impl Read {
    pub fn new(bit_off: u32, bits: u32) -> Read {
        let (off, rem) = ((bit_off / 8) as u16, bit_off % 8);
        match (rem, bits) {
            (0, 8) => Read::U8(off),
            (0, 16) => Read::U16(off),
            (0, 32) => Read::U32(off),
            (0, 48) => Read::U48(off),
            _ => {
                let nbytes = (rem + bits).div_ceil(8);
                Read::Bits {
                    off,
                    nbytes: nbytes as u8,
                    shift: (nbytes * 8 - rem - bits) as u8,
                    mask: if bits >= 64 {
                        u64::MAX
                    } else {
                        (1 << bits) - 1
                    },
                }
            }
        }
    }

    /// Bytes past the header start this read touches.
    pub fn end(self) -> usize {
        match self {
            Read::U8(o) => o as usize + 1,
            Read::U16(o) => o as usize + 2,
            Read::U32(o) => o as usize + 4,
            Read::U48(o) => o as usize + 6,
            Read::Bits { off, nbytes, .. } => off as usize + nbytes as usize,
        }
    }

    #[inline(always)]
    pub(super) fn get(self, d: &[u8], base: usize) -> u64 {
        #[inline(always)]
        fn be<const N: usize>(d: &[u8], o: usize) -> u64 {
            match d.get(o..o + N) {
                Some(s) => {
                    let mut k = [0u8; 8];
                    k[8 - N..].copy_from_slice(s);
                    u64::from_be_bytes(k)
                }
                None => 0,
            }
        }
        match self {
            Read::U8(o) => d.get(base + o as usize).map_or(0, |&b| b as u64),
            Read::U16(o) => be::<2>(d, base + o as usize),
            Read::U32(o) => be::<4>(d, base + o as usize),
            Read::U48(o) => be::<6>(d, base + o as usize),
            Read::Bits {
                off,
                nbytes,
                shift,
                mask,
            } => {
                let o = base + off as usize;
                // One 8-byte load when the packet has the bytes, shifted into place.
                if nbytes <= 8 {
                    if let Some(w) = d.get(o..o + 8) {
                        let w = u64::from_be_bytes(w.try_into().expect("8 bytes"));
                        return (w >> ((8 - nbytes as u32) * 8 + shift as u32)) & mask;
                    }
                }
                let Some(s) = d.get(o..o + nbytes as usize) else {
                    return 0;
                };
                let mut v: u128 = 0;
                for &b in s {
                    v = v << 8 | b as u128;
                }
                (v >> shift) as u64 & mask
            }
        }
    }

    /// Writes `v`'s low bits into the field; bytes past the packet's end are not written.
    #[inline(always)]
    fn put(self, d: &mut [u8], base: usize, v: u64) {
        // Whole bytes are stored directly: a TTL or checksum write is one store, not a
        // read-modify-write loop over the bytes (~100 instructions a `set` with its
        // checksum, by callgrind on `bench steve-ops --pipeline`).
        #[inline(always)]
        fn be<const N: usize>(d: &mut [u8], o: usize, v: u64) {
            if let Some(s) = d.get_mut(o..o + N) {
                s.copy_from_slice(&v.to_be_bytes()[8 - N..]);
            }
        }
        let (off, nbytes, shift, mask) = match self {
            Read::U8(o) => {
                if let Some(b) = d.get_mut(base + o as usize) {
                    *b = v as u8;
                }
                return;
            }
            Read::U16(o) => return be::<2>(d, base + o as usize, v),
            Read::U32(o) => return be::<4>(d, base + o as usize, v),
            Read::U48(o) => return be::<6>(d, base + o as usize, v),
            Read::Bits {
                off,
                nbytes,
                shift,
                mask,
            } => (off, nbytes, shift, mask),
        };
        let o = base + off as usize;
        let Some(s) = d.get_mut(o..o + nbytes as usize) else {
            return;
        };
        let mut cur: u128 = 0;
        for &b in s.iter() {
            cur = cur << 8 | b as u128;
        }
        let m = (mask as u128) << shift;
        cur = (cur & !m) | (((v & mask) as u128) << shift & m);
        for (i, b) in s.iter_mut().enumerate() {
            *b = (cur >> (8 * (nbytes as usize - 1 - i))) as u8;
        }
    }
}

/// An operand read without recursion: most expressions are a comparison of two of these.
#[derive(Clone, Copy, Debug)]
pub enum Leaf {
    Const(u64),
    Field(FieldRef),
    InPort,
    Ports,
    Link,
    Len,
}

/// A compiled expression. Boxes are built once at compile time; evaluation only reads.
/// [`Ex::simplify`] turns the common shapes into the flat variants at the top.
#[derive(Clone, Debug)]
pub enum Ex {
    Leaf(Leaf),
    /// `leaf OP leaf`: one match, no recursion.
    Flat(BinOp, Leaf, Leaf),
    /// `(leaf OP leaf) OP leaf`, e.g. `(in_port ^ 1) < ports`.
    Flat2(BinOp, BinOp, Leaf, Leaf, Leaf),
    /// `leaf in SET`.
    InLeaf(Leaf, u16),
    Const(u64),
    Field(FieldRef),
    InPort,
    Ports,
    Link,
    Len,
    Not(Box<Ex>),
    Bin(BinOp, Box<Ex>, Box<Ex>),
    /// Membership in a port set (a 65536-bit map).
    In(Box<Ex>, u16),
}

impl Ex {
    pub(super) fn leaf(&self) -> Option<Leaf> {
        Some(match self {
            Ex::Leaf(l) => *l,
            Ex::Const(v) => Leaf::Const(*v),
            Ex::Field(f) => Leaf::Field(*f),
            Ex::InPort => Leaf::InPort,
            Ex::Ports => Leaf::Ports,
            Ex::Link => Leaf::Link,
            Ex::Len => Leaf::Len,
            _ => return None,
        })
    }

    /// Rewrites the tree bottom-up into flat variants where the shape allows.
    pub fn simplify(self) -> Ex {
        match self {
            Ex::Not(a) => Ex::Not(Box::new(a.simplify())),
            Ex::In(a, s) => {
                let a = a.simplify();
                match a.leaf() {
                    Some(l) => Ex::InLeaf(l, s),
                    None => Ex::In(Box::new(a), s),
                }
            }
            Ex::Bin(op, a, b) => {
                let (a, b) = (a.simplify(), b.simplify());
                let short_circuit = matches!(op, BinOp::And | BinOp::Or);
                match (&a, a.leaf(), b.leaf()) {
                    (_, Some(x), Some(y)) if !short_circuit => Ex::Flat(op, x, y),
                    (Ex::Flat(op1, x, y), _, Some(z))
                        if !short_circuit && !matches!(op1, BinOp::And | BinOp::Or) =>
                    {
                        Ex::Flat2(*op1, op, *x, *y, z)
                    }
                    _ => Ex::Bin(op, Box::new(a), Box::new(b)),
                }
            }
            // Single operands stay as they are (constants stay visible to the checker).
            e => e,
        }
    }
}

/// An entry action whose output port is computed when a packet learns it.
#[derive(Clone, Debug)]
pub enum ActTmpl {
    Output(Ex),
    Fixed(Act),
}

#[derive(Clone, Debug)]
pub struct Arm {
    pub values: Vec<u64>,
    pub any: bool,
    /// The arm's body is exactly `next D` with D limited by `repeat`: the arm does not
    /// match once D was entered that many times.
    pub guard: Option<u16>,
    pub body: Vec<Op>,
}

#[derive(Clone, Debug)]
pub enum Op {
    Set {
        field: FieldRef,
        value: Ex,
        /// The header's checksum field, recomputed after the write.
        csum: Option<FieldRef>,
    },
    Learn {
        table: u16,
        keys: Vec<(Ex, u32)>,
        act: ActTmpl,
    },
    Remove {
        table: u16,
        keys: Vec<(Ex, u32)>,
    },
    Count(u16),
    If(Ex, Vec<Op>, Vec<Op>),
    Match(Ex, Vec<Arm>),
    Output(Ex),
    Flood,
    Drop(u8),
    Goto(u16),
    Next(u16),
    Pass,
}

#[derive(Clone, Debug)]
pub struct Decoder {
    pub name: String,
    pub fixed_len: u16,
    /// `size = FIELD * mul`: the header's length read from the packet.
    pub size: Option<(Read, u16)>,
    pub peek: bool,
    pub repeat: u8,
    pub short: Vec<Op>,
    pub body: Vec<Op>,
}

/// Header offsets and lengths by decoder, valid for decoders whose bit is set in
/// [`Pkt::valid`] (lengths, visits: kept across packets, so a packet costs no clearing
/// of them). An offset is [`UNSET`] for a header that did not fit this packet.
pub struct Scratch {
    off: [u32; MAX_DECODERS],
    len: [u16; MAX_DECODERS],
    visits: [u8; MAX_DECODERS],
}

impl Default for Scratch {
    fn default() -> Self {
        Scratch {
            off: [UNSET; MAX_DECODERS],
            len: [0; MAX_DECODERS],
            visits: [0; MAX_DECODERS],
        }
    }
}

/// The state of one packet while it runs.
pub(super) struct Pkt<'a, D: Bytes> {
    pub m: &'a mut Meta,
    /// The packet's bytes: writable only for programs that `set` a field, so a packet
    /// read from a mapped trace is not copied for programs that only read it.
    pub d: D,
    pub ports: u16,
    pub sc: &'a mut Scratch,
    /// Decoders entered, one bit each (their `visits` are this packet's).
    pub entered: u32,
    /// Decoders whose header fit (their `off` and `len` hold).
    pub valid: u32,
    pub cur: usize,
    pub drop: Option<u8>,
}

impl<'a, D: Bytes> Pkt<'a, D> {
    #[inline(always)]
    fn new(m: &'a mut Meta, d: D, ports: u16, sc: &'a mut Scratch) -> Self {
        Pkt {
            m,
            d,
            ports,
            sc,
            entered: 0,
            valid: 0,
            cur: 0,
            drop: None,
        }
    }

    #[inline(always)]
    pub fn field(&self, f: &FieldRef) -> u64 {
        // A header that did not fit has offset `UNSET`: the 8 bytes from it are past any
        // packet, so its fields take the out-of-line path, which reads them as 0. No test
        // of the header's valid bit here.
        // `hdr` < MAX_DECODERS (the checker's bound): the mask only spares a bounds check.
        let base = self.sc.off[f.hdr as usize % MAX_DECODERS] as usize;
        // One 8-byte load, whatever the width, unless the packet ends within it.
        let o = base + f.off as usize;
        if f.sh != NO_WORD {
            if let Some(w) = self.d.get(o..o + 8) {
                let w = u64::from_be_bytes(w.try_into().expect("8 bytes"));
                return (w >> f.sh) & f.mask;
            }
        }
        self.field_near_end(f, base)
    }

    /// A field within 8 bytes of the packet's end, or wider than one load reaches.
    #[cold]
    #[inline(never)]
    fn field_near_end(&self, f: &FieldRef, base: usize) -> u64 {
        if self.valid & (1 << f.hdr) == 0 {
            return 0;
        }
        f.read.get(&self.d, base)
    }

    /// Counts one entry into decoder `di` (its first this packet resets the count).
    #[inline(always)]
    pub fn visit(&mut self, di: usize) {
        if self.entered & (1 << di) == 0 {
            self.entered |= 1 << di;
            self.sc.visits[di] = 0;
        }
        self.sc.visits[di] = self.sc.visits[di].saturating_add(1);
    }

    /// Decoder `di` was entered `n` times this packet (the header walk, done at once).
    #[inline(always)]
    pub fn entered_times(&mut self, di: usize, n: u8) {
        self.entered |= 1 << di;
        self.sc.visits[di % MAX_DECODERS] = n;
    }

    /// Forgets the header offsets this packet set (only those: a packet entering one
    /// decoder costs one store here, not a clear of every decoder's).
    #[inline(always)]
    pub fn forget(&mut self) {
        let mut set = self.valid;
        while set != 0 {
            self.sc.off[set.trailing_zeros() as usize % MAX_DECODERS] = UNSET;
            set &= set - 1;
        }
    }

    /// Decoder `di`'s header fit: `n` bytes at `at`.
    #[inline(always)]
    pub fn fit(&mut self, di: usize, at: usize, n: usize) {
        self.valid |= 1 << di;
        // `di` < MAX_DECODERS (the checker's bound): the mask only spares bounds checks.
        self.sc.off[di % MAX_DECODERS] = at as u32;
        self.sc.len[di % MAX_DECODERS] = n as u16;
    }

    /// Whether decoder `d` has repeats left (a guarded `match` arm enters it).
    #[inline(always)]
    pub fn may_enter(&self, d: u16, c: &Code) -> bool {
        self.entered & (1 << d) == 0 || self.sc.visits[d as usize] < c.decoders[d as usize].repeat
    }
}

/// A packet's bytes as a program sees them: always readable, writable when the program
/// writes (`set`).
pub(super) trait Bytes: std::ops::Deref<Target = [u8]> {
    fn writable(&mut self) -> Option<&mut [u8]>;
}

impl Bytes for &mut [u8] {
    #[inline(always)]
    fn writable(&mut self) -> Option<&mut [u8]> {
        Some(self)
    }
}

impl Bytes for &[u8] {
    #[inline(always)]
    fn writable(&mut self) -> Option<&mut [u8]> {
        None
    }
}

/// What never changes while packets run: the program's ops.
pub struct Code {
    pub decoders: Vec<Decoder>,
    pub start: Vec<Op>,
    /// Per table: its key fields (with widths) and its miss block.
    pub keys: Vec<Vec<(FieldRef, u32)>>,
    pub misses: Vec<Vec<Op>>,
    /// Port sets of `ports` parameters, one bit per port.
    pub sets: Vec<Box<[u64; 1024]>>,
}

/// What packets change: tables and counters.
pub struct State {
    pub tables: Vec<Table>,
    pub counters: Vec<(String, u64)>,
}

pub struct Plan {
    pub code: Code,
    /// The code lowered to flat instructions: what runs per packet.
    flat: Flat,
    pub state: State,
    pub scratch: Scratch,
    /// Drop reason names, in the profile's order.
    pub drops: Vec<String>,
    /// The program's verdict is decided by the ingress port alone (see [`Code::by_port`]):
    /// each port's, once run, is kept here for the batches after it.
    by_port: Option<PortMemo>,
    /// The entry's step keys of the chunk running (see [`Flat::entry_keys`]): kept here,
    /// not made per batch (zeroing 512 bytes a call cost every program ~1 instruction a
    /// packet).
    keys: Keys,
}

/// Ingress ports below this have their verdict kept (a wire's ports, a switch's).
const MEMO_PORTS: usize = 64;

/// Verdicts by ingress port for a program decided by the port alone, valid while the
/// port count is `ports` (the one other input such a program reads).
struct PortMemo {
    ports: u16,
    /// 0: not run yet; else an [`Outcome`] encoded by [`Outcome::code`].
    verdict: [u32; MEMO_PORTS],
}

/// What a program decided for a packet, as it affects the packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// Ended without `output` or `drop`: the egress stays as it was.
    Keep,
    Out(u16),
    Drop(u8),
}

impl Outcome {
    fn code(self) -> u32 {
        match self {
            Outcome::Keep => 1 << 16,
            Outcome::Out(e) => 2 << 16 | e as u32,
            Outcome::Drop(r) => 3 << 16 | r as u32,
        }
    }

    #[inline(always)]
    fn of(code: u32) -> Option<Outcome> {
        match code >> 16 {
            1 => Some(Outcome::Keep),
            2 => Some(Outcome::Out(code as u16)),
            3 => Some(Outcome::Drop(code as u8)),
            _ => None,
        }
    }
}

impl Plan {
    pub fn new(code: Code, state: State, drops: Vec<String>) -> Plan {
        Plan {
            flat: Flat::lower(&code, true),
            by_port: code.by_port().then_some(PortMemo {
                ports: 0,
                verdict: [0; MEMO_PORTS],
            }),
            code,
            state,
            scratch: Scratch::default(),
            drops,
            keys: Keys::default(),
        }
    }

    /// Whether the program is decided by the ingress port alone (its verdicts are kept
    /// per port rather than run for every packet).
    pub fn by_port(&self) -> bool {
        self.by_port.is_some()
    }

    /// Runs a program decided by the port alone for a copy of `m` with no bytes: what
    /// it does to any packet from that port. Run twice from two different egress ports
    /// to tell `output` (same egress both times) from no `output` (egress kept).
    #[cold]
    fn decide(&mut self, m: &Meta, ports: u16) -> Outcome {
        let mut egress = [0u16; 2];
        let mut drop = None;
        for (e, start) in egress.iter_mut().zip([0, 1]) {
            let mut m = m.clone();
            m.egress = start;
            let d: &[u8] = &[];
            drop = self.flat.run::<_, false>(
                &self.code,
                &mut self.state,
                &mut Pkt::new(&mut m, d, ports, &mut self.scratch),
            );
            *e = m.egress;
        }
        match (drop, egress) {
            (Some(r), _) => Outcome::Drop(r),
            (None, [0, 1]) => Outcome::Keep,
            (None, [e, _]) => Outcome::Out(e),
        }
    }

    /// [`Plan::run_batch`] for a program decided by the port alone: one table load per
    /// packet once its port has run.
    fn run_by_port(&mut self, batch: &mut Batch, ports: u16) {
        if let Some(memo) = self.by_port.as_mut().filter(|m| m.ports != ports) {
            memo.ports = ports;
            memo.verdict = [0; MEMO_PORTS];
        }
        for pk in batch {
            let port = pk.meta().in_port as usize;
            let known = match &self.by_port {
                Some(memo) if port < MEMO_PORTS => Outcome::of(memo.verdict[port]),
                _ => None,
            };
            let o = match known {
                Some(o) => o,
                None => {
                    // Ports past the memo are decided afresh each time (the same way).
                    let o = self.decide(pk.meta(), ports);
                    if let Some(memo) = self.by_port.as_mut().filter(|_| port < MEMO_PORTS) {
                        memo.verdict[port] = o.code();
                    }
                    o
                }
            };
            match o {
                Outcome::Keep => {}
                Outcome::Out(e) => pk.meta_mut().egress = e,
                Outcome::Drop(r) => pk.drop_with(r),
            }
        }
    }

    #[cfg(test)]
    pub(super) fn flat(&self) -> &Flat {
        &self.flat
    }

    /// Whether the program's header walk runs as `Layers` (on by default; off runs the
    /// program's own decoders for every packet, for comparisons).
    pub fn set_walk(&mut self, on: bool) {
        self.flat = Flat::lower(&self.code, on);
    }

    /// The header walk recognised, described (`None`: the program's decoders run as
    /// written for every packet).
    pub fn walk(&self) -> Option<String> {
        self.flat.walk().map(|w| w.describe(&self.code))
    }

    /// Runs a batch: one call per batch, so what the loop keeps in registers is loaded
    /// once per 32 packets rather than once per packet.
    #[inline]
    pub fn run_batch(&mut self, batch: &mut Batch, ports: u16) {
        if self.by_port.is_some() {
            return self.run_by_port(batch, ports);
        }
        let (flat, code, state) = (&self.flat, &self.code, &mut self.state);
        let sc = &mut self.scratch;
        // In chunks of a batch: a first pass over every packet (its slots prefetched),
        // then the packets run one by one.
        let keys = &mut self.keys;
        for chunk in batch.as_mut_slice().chunks_mut(MAX_BATCH) {
            match (flat.writes(), flat.has_entry(), flat.has_ipv4_chunk()) {
                (true, _, _) => {
                    flat.prefetch(state, chunk);
                    for pk in chunk {
                        let (m, d) = pk.split_mut();
                        let p = &mut Pkt::new(m, d, ports, sc);
                        if let Some(r) = run_one::<_, false>(flat, code, state, p) {
                            pk.drop_with(r);
                        }
                    }
                }
                (false, true, _) => {
                    // The entry's step first, its keys read in the prefetch pass: most
                    // packets end there.
                    flat.entry_chunk(state, chunk, keys, |state, pk, e| {
                        let (m, d) = pk.split_meta();
                        let p = &mut Pkt::new(m, d, ports, sc);
                        let r = match e {
                            Early::Loop(pc) => {
                                flat.entered(p);
                                let r = flat.run_from(code, state, p, pc, 2);
                                p.forget();
                                r
                            }
                            _ => run_one::<_, true>(flat, code, state, p),
                        };
                        if let Some(r) = r {
                            pk.drop_with(r);
                        }
                    });
                }
                (false, false, ipv4) => {
                    // The IPv4 tail decided on the bytes first: most packets end there.
                    if ipv4
                        && flat.ipv4_chunk(state, chunk, keys, |state, pk, e| {
                            let (m, d) = pk.split_meta();
                            let p = &mut Pkt::new(m, d, ports, sc);
                            let r = match e {
                                Early::Loop(pc) => {
                                    let steps = flat.ipv4_entered(p);
                                    let r = flat.run_from(code, state, p, pc, steps);
                                    p.forget();
                                    r
                                }
                                _ => run_one::<_, false>(flat, code, state, p),
                            };
                            if let Some(r) = r {
                                pk.drop_with(r);
                            }
                        })
                    {
                        continue;
                    }
                    flat.prefetch(state, chunk);
                    for pk in chunk {
                        let (m, d) = pk.split_meta();
                        let p = &mut Pkt::new(m, d, ports, sc);
                        if let Some(r) = run_one::<_, false>(flat, code, state, p) {
                            pk.drop_with(r);
                        }
                    }
                }
            }
        }
    }
}

/// Runs one packet, then forgets the header offsets it set.
#[inline(always)]
fn run_one<D: Bytes, const ENTRY: bool>(
    flat: &Flat,
    code: &Code,
    state: &mut State,
    p: &mut Pkt<D>,
) -> Option<u8> {
    let r = flat.run::<D, ENTRY>(code, state, p);
    p.forget();
    r
}

impl Code {
    /// Whether the program's verdict depends on nothing but the ingress port and the
    /// port count: no decoders, tables, counters or writes, and its tests and outputs
    /// read only `in_port`, `ports` and constants (a wire). Then every packet from one
    /// port meets the same end.
    pub fn by_port(&self) -> bool {
        fn ops(o: &[Op]) -> bool {
            o.iter().all(|op| match op {
                Op::If(c, t, e) => ex(c) && ops(t) && ops(e),
                Op::Match(e, arms) => {
                    ex(e) && arms.iter().all(|a| a.guard.is_none() && ops(&a.body))
                }
                Op::Output(e) => ex(e),
                Op::Flood | Op::Drop(_) | Op::Pass => true,
                Op::Set { .. }
                | Op::Learn { .. }
                | Op::Remove { .. }
                | Op::Count(_)
                | Op::Goto(_)
                | Op::Next(_) => false,
            })
        }
        fn leaf(l: &Leaf) -> bool {
            matches!(l, Leaf::Const(_) | Leaf::InPort | Leaf::Ports)
        }
        fn ex(e: &Ex) -> bool {
            match e {
                Ex::Leaf(l) | Ex::InLeaf(l, _) => leaf(l),
                Ex::Flat(_, a, b) => leaf(a) && leaf(b),
                Ex::Flat2(_, _, a, b, c) => leaf(a) && leaf(b) && leaf(c),
                Ex::Const(_) | Ex::InPort | Ex::Ports => true,
                Ex::Not(a) | Ex::In(a, _) => ex(a),
                Ex::Bin(_, a, b) => ex(a) && ex(b),
                Ex::Field(_) | Ex::Link | Ex::Len => false,
            }
        }
        self.decoders.is_empty() && ops(&self.start)
    }

    /// Decoders (one bit each) with a field used outside their own body and `short`
    /// block: only those need their offset kept when a walk enters them on the way.
    pub fn used_elsewhere(&self) -> u32 {
        let mut m = 0u32;
        let mut all = |f: &FieldRef| m |= 1 << (f.hdr as u32 % 32);
        ops_fields(&self.start, &mut all);
        self.misses.iter().for_each(|o| ops_fields(o, &mut all));
        self.keys.iter().flatten().for_each(|(f, _)| all(f));
        for (i, d) in self.decoders.iter().enumerate() {
            let mut other = |f: &FieldRef| {
                if f.hdr as usize != i {
                    m |= 1 << (f.hdr as u32 % 32);
                }
            };
            ops_fields(&d.body, &mut other);
            ops_fields(&d.short, &mut other);
        }
        m
    }

    /// The statements that are not control flow: set, learn, remove.
    #[inline(never)]
    pub(super) fn op<D: Bytes>(&self, op: &Op, s: &mut State, p: &mut Pkt<D>) {
        match op {
            Op::Set { field, value, csum } => {
                let v = self.eval(value, p);
                set(*field, v, *csum, p);
            }
            Op::Learn { table, keys, act } => self.learn(*table, keys, act, s, p),
            Op::Remove { table, keys } => {
                let key = self.key(keys, p);
                s.tables[*table as usize].remove_learned(key);
            }
            _ => unreachable!("control flow is lowered to flat instructions"),
        }
    }

    /// Table `ti`'s key: its fields concatenated.
    #[inline(never)]
    pub(super) fn table_key<D: Bytes>(&self, ti: usize, p: &Pkt<D>) -> u128 {
        let mut key: u128 = 0;
        for (f, bits) in &self.keys[ti] {
            key = key << bits | p.field(f) as u128;
        }
        key
    }

    fn learn<D: Bytes>(
        &self,
        table: u16,
        keys: &[(Ex, u32)],
        act: &ActTmpl,
        s: &mut State,
        p: &Pkt<D>,
    ) {
        let key = self.key(keys, p);
        let a = match act {
            ActTmpl::Output(e) => Act::Output(self.eval(e, p) as u16),
            ActTmpl::Fixed(a) => *a,
        };
        s.tables[table as usize].learn(key, a, p.m.now_ns);
    }

    fn key<D: Bytes>(&self, keys: &[(Ex, u32)], p: &Pkt<D>) -> u128 {
        let mut k: u128 = 0;
        for (e, bits) in keys {
            let mask = if *bits >= 64 {
                u64::MAX
            } else {
                (1 << bits) - 1
            };
            k = k << bits | (self.eval(e, p) & mask) as u128;
        }
        k
    }

    #[inline(always)]
    pub(super) fn leaf<D: Bytes>(&self, l: &Leaf, p: &Pkt<D>) -> u64 {
        match l {
            Leaf::Const(v) => *v,
            Leaf::Field(f) => p.field(f),
            Leaf::InPort => p.m.in_port as u64,
            Leaf::Ports => p.ports as u64,
            Leaf::Link => link_code(p.m.link),
            Leaf::Len => p.d.len() as u64,
        }
    }

    #[inline(always)]
    pub(super) fn member(&self, v: u64, set: u16) -> u64 {
        (v < 65536 && self.sets[set as usize][v as usize >> 6] & (1 << (v & 63)) != 0) as u64
    }

    /// Flat shapes evaluated in place; only deeper trees recurse.
    #[inline(always)]
    fn eval_flat<D: Bytes>(&self, e: &Ex, p: &Pkt<D>) -> u64 {
        match e {
            Ex::Flat(op, a, b) => binop(*op, self.leaf(a, p), self.leaf(b, p)),
            Ex::InLeaf(l, set) => self.member(self.leaf(l, p), *set),
            Ex::Const(v) => *v,
            _ => self.eval(e, p),
        }
    }

    pub(super) fn eval<D: Bytes>(&self, e: &Ex, p: &Pkt<D>) -> u64 {
        match e {
            Ex::Leaf(l) => self.leaf(l, p),
            Ex::Flat(op, a, b) => binop(*op, self.leaf(a, p), self.leaf(b, p)),
            Ex::Flat2(op1, op2, a, b, c) => binop(
                *op2,
                binop(*op1, self.leaf(a, p), self.leaf(b, p)),
                self.leaf(c, p),
            ),
            Ex::InLeaf(l, set) => self.member(self.leaf(l, p), *set),
            Ex::Const(v) => *v,
            Ex::Field(f) => p.field(f),
            Ex::InPort => p.m.in_port as u64,
            Ex::Ports => p.ports as u64,
            Ex::Link => link_code(p.m.link),
            Ex::Len => p.d.len() as u64,
            Ex::Not(a) => (self.eval(a, p) == 0) as u64,
            Ex::In(a, set) => self.member(self.eval(a, p), *set),
            Ex::Bin(BinOp::And, a, b) => {
                (self.eval_flat(a, p) != 0 && self.eval_flat(b, p) != 0) as u64
            }
            Ex::Bin(BinOp::Or, a, b) => {
                (self.eval_flat(a, p) != 0 || self.eval_flat(b, p) != 0) as u64
            }
            Ex::Bin(op, a, b) => binop(*op, self.eval(a, p), self.eval(b, p)),
        }
    }
}

#[inline(always)]
pub(super) fn binop(op: BinOp, x: u64, y: u64) -> u64 {
    match op {
        BinOp::Eq => (x == y) as u64,
        BinOp::Ne => (x != y) as u64,
        BinOp::Lt => (x < y) as u64,
        BinOp::Le => (x <= y) as u64,
        BinOp::Gt => (x > y) as u64,
        BinOp::Ge => (x >= y) as u64,
        BinOp::BitOr => x | y,
        BinOp::BitXor => x ^ y,
        BinOp::BitAnd => x & y,
        BinOp::Shl => x.checked_shl(y as u32).unwrap_or(0),
        BinOp::Shr => x.checked_shr(y as u32).unwrap_or(0),
        BinOp::Add => x.wrapping_add(y),
        BinOp::Sub => x.wrapping_sub(y),
        BinOp::Mul => x.wrapping_mul(y),
        BinOp::And => (x != 0 && y != 0) as u64,
        BinOp::Or => (x != 0 || y != 0) as u64,
    }
}

#[inline(never)]
pub(super) fn set<D: Bytes>(f: FieldRef, v: u64, csum: Option<FieldRef>, p: &mut Pkt<D>) {
    if p.valid & (1 << f.hdr) == 0 {
        return;
    }
    // Read-only bytes only for programs with no `set` (see `Flat::writes`).
    let Some(d) = p.d.writable() else {
        return;
    };
    let base = p.sc.off[f.hdr as usize];
    f.read.put(d, base as usize, v);
    if let Some(c) = csum {
        let (b, n) = (base as usize, p.sc.len[f.hdr as usize] as usize);
        c.read.put(d, b, 0);
        let sum = d.get(b..b + n).map_or(0, checksum::checksum);
        c.read.put(d, b, sum as u64);
    }
    // Offsets other NFs cached and the flow hash may no longer hold.
    p.m.layers = crate::packet::Layers::UNPARSED;
    p.m.flow_hash = 0;
}

/// `link` values, as programs name them (`ethernet`, `raw`, `sll`, `sll2`).
pub fn link_code(l: LinkKind) -> u64 {
    l as u8 as u64
}

/// Every field the statements read or write, to `f`.
fn ops_fields(ops: &[Op], f: &mut dyn FnMut(&FieldRef)) {
    for op in ops {
        match op {
            Op::Set { field, value, csum } => {
                f(field);
                csum.iter().for_each(&mut *f);
                ex_fields(value, f);
            }
            Op::Learn { keys, act, .. } => {
                keys.iter().for_each(|(e, _)| ex_fields(e, f));
                if let ActTmpl::Output(e) = act {
                    ex_fields(e, f);
                }
            }
            Op::Remove { keys, .. } => keys.iter().for_each(|(e, _)| ex_fields(e, f)),
            Op::If(c, t, e) => {
                ex_fields(c, f);
                ops_fields(t, f);
                ops_fields(e, f);
            }
            Op::Match(e, arms) => {
                ex_fields(e, f);
                arms.iter().for_each(|a| ops_fields(&a.body, f));
            }
            Op::Output(e) => ex_fields(e, f),
            Op::Count(_) | Op::Flood | Op::Drop(_) | Op::Goto(_) | Op::Next(_) | Op::Pass => {}
        }
    }
}

fn ex_fields(e: &Ex, f: &mut dyn FnMut(&FieldRef)) {
    let leaf = |l: &Leaf, f: &mut dyn FnMut(&FieldRef)| {
        if let Leaf::Field(x) = l {
            f(x);
        }
    };
    match e {
        Ex::Leaf(l) | Ex::InLeaf(l, _) => leaf(l, f),
        Ex::Flat(_, a, b) => {
            leaf(a, f);
            leaf(b, f);
        }
        Ex::Flat2(_, _, a, b, c) => {
            leaf(a, f);
            leaf(b, f);
            leaf(c, f);
        }
        Ex::Field(x) => f(x),
        Ex::Not(a) | Ex::In(a, _) => ex_fields(a, f),
        Ex::Bin(_, a, b) => {
            ex_fields(a, f);
            ex_fields(b, f);
        }
        Ex::Const(_) | Ex::InPort | Ex::Ports | Ex::Link | Ex::Len => {}
    }
}

#[cfg(test)]
mod tests {
    use super::Read;

    /// Bit `i` of `d`, counting from the first byte's most significant bit.
    fn bit(d: &[u8], i: usize) -> u8 {
        d[i / 8] >> (7 - i % 8) & 1
    }

    #[test]
    fn put_writes_exactly_the_field_bits_for_every_shape() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for bit_off in 0..20u32 {
            for bits in 1..=64u32 {
                let r = Read::new(bit_off, bits);
                let mut d: Vec<u8> = (0..16).map(|_| next() as u8).collect();
                let before = d.clone();
                let v = next();
                r.put(&mut d, 2, v);
                let mask = if bits == 64 {
                    u64::MAX
                } else {
                    (1 << bits) - 1
                };
                assert_eq!(r.get(&d, 2), v & mask, "offset {bit_off}, {bits} bits");
                for i in 0..d.len() * 8 {
                    let field = 16 + bit_off as usize..16 + (bit_off + bits) as usize;
                    let want = if field.contains(&i) {
                        (v >> (bits as usize - 1 - (i - field.start))) as u8 & 1
                    } else {
                        bit(&before, i)
                    };
                    assert_eq!(bit(&d, i), want, "bit {i}, offset {bit_off}, {bits} bits");
                }
                // A field past the packet's end writes nothing.
                let mut short = before[..2 + (bit_off / 8) as usize].to_vec();
                let kept = short.clone();
                r.put(&mut short, 2, v);
                assert_eq!(short, kept);
            }
        }
    }
}
