//! The straight code after the walk's IPv4 entry (see `tail.rs`) run a chunk at a time on
//! the packets' bytes, before any packet's run state is made: the IPv4 header starts at
//! `Layers`' offset (as the walk takes it) and a fixed header after it at the IPv4
//! header's length, so every drop test and both step keys are read at offsets known per
//! packet, not through the decoders' scratch offsets. A first pass decides each packet
//! (a drop reason, the step, or the loop) without a branch on a test's outcome (the
//! firewall's port rule is a coin toss on mixed traffic) and lists the packets by what
//! they need; the step then runs typed by its table's key width (as the L2 entry's,
//! `entry.rs`) over the listed packets in order, hashing once and counting in
//! registers. A packet the pass cannot decide (not IPv4 as the walk takes it, a header
//! cut short, a field near its end) runs whole in the loop at its place in the order;
//! one whose step goes on (a `goto`, a miss block that is not a fixed ending) goes on in
//! the loop. Chosen at load by the code's shape: a tail that ends in a learning step on
//! the IPv4 header, with drop tests on one field or a port set of the IPv4 header or the
//! fixed header after it.

use super::dense::{Dense, Test, Word};
use super::entry::Tally;
use super::tail::{Guard, Tail, AFTER, BEFORE};
use super::{Cond, Early, Flat, Keys, Set, Step};
use crate::flow::LearnTable;
use crate::nfs::pipeline::plan::{Bytes, FieldRef, Pkt, State};
use crate::nfs::pipeline::table::{Act, Counts, StepKey};
use crate::nfs::pipeline::walk::Walk;
use crate::packet::{Packet, MAX_BATCH};

/// A packet that reaches the step (no drop test dropped it).
const PASS: u16 = u16::MAX;
/// A packet the pass cannot decide: it runs whole in the loop.
const WHOLE: u16 = u16::MAX - 1;

/// A drop test as a membership: the field (or either of two fields) in one value, in
/// two, or in a port bitmap, on the IPv4 header (`next`: the fixed header after it).
/// Every shape of test the tail holds for this path is one (`f != a && f != b`: not in
/// `{a, b}`), so a packet's tests run with no indirect dispatch on their kind (each
/// test's site always takes the same arm) and no branch on their outcome.
#[derive(Clone, Debug)]
struct ByteGuard {
    f: FieldRef,
    /// The second field of `a in S || b in S`.
    g: Option<FieldRef>,
    of: Members,
    next: bool,
    /// The packet is dropped when the field's membership is this.
    when: bool,
}

#[derive(Clone, Debug)]
enum Members {
    /// One or two values (`[v, v]` for one).
    Two([u64; 2]),
    Set(Set),
}

impl Members {
    #[inline(always)]
    fn has(&self, v: u64) -> bool {
        match self {
            Members::Two([a, b]) => (v == *a) | (v == *b),
            Members::Set(s) => s.has(v),
        }
    }
}

/// Bits of a packet's outcome mask (see [`Ipv4Chunk::decide`]): the tests before the
/// fixed header, the header cut short, the tests after it, a step key near the end,
/// and the bit always set.
const FITS: usize = BEFORE;
const AFTER0: usize = FITS + 1;
const KEYS: usize = AFTER0 + AFTER;
const ALWAYS: usize = KEYS + 1;

/// The tail's drop tests and step, read on the bytes (see the module's comment).
#[derive(Clone, Debug)]
pub struct Ipv4Chunk {
    before: [Option<ByteGuard>; BEFORE],
    /// The fixed header's length, when the tail enters one.
    enter: Option<u16>,
    after: [Option<ByteGuard>; AFTER],
    step: Step,
    /// Per bit of the outcome mask, what its first set bit means: a drop reason,
    /// [`WHOLE`], or [`PASS`] (the bit always set).
    codes: [u16; ALWAYS + 1],
    /// The same tests and keys for the packets long enough for all of them (`None`: a
    /// field too wide for one load; every packet takes the checked path).
    pub(super) dense: Option<Dense>,
}

/// A set's values when it has at most two.
fn few(s: &Set) -> Option<[u64; 2]> {
    let mut v = Vec::new();
    for (w, bits) in s.0.iter().enumerate() {
        for b in 0..64 {
            if bits & (1 << b) != 0 {
                v.push((w * 64 + b) as u64);
            }
        }
    }
    match v.as_slice() {
        [a] => Some([*a, *a]),
        [a, b] => Some([*a, *b]),
        _ => None,
    }
}

impl ByteGuard {
    /// This test, dense, as bit `bit` of the outcome mask.
    fn dense(&self, bit: usize) -> Option<Test> {
        let f = Word::of(&self.f, self.next)?;
        let g = match &self.g {
            Some(g) => Some(Word::of(g, self.next)?),
            None => None,
        };
        let bit = bit as u32;
        Some(match &self.of {
            Members::Two(v) => Test::Two(f, g, *v, self.when, bit),
            Members::Set(s) => Test::Set(f, g, s.clone(), self.when, bit),
        })
    }

    /// Tail guard `g` as a membership, when its test is one the bytes can decide;
    /// `hdr`: the header its fields must read.
    fn of(g: &Guard, hdr: usize, next: bool) -> Option<ByteGuard> {
        let set = |s: &Set| few(s).map_or_else(|| Members::Set(s.clone()), Members::Two);
        let (f, second, of, inside) = match &g.cond {
            Cond::FieldEq(f, v) => (*f, None, Members::Two([*v; 2]), true),
            Cond::FieldNe(f, v) => (*f, None, Members::Two([*v; 2]), false),
            Cond::FieldEq2(f, a, b) => (*f, None, Members::Two([*a, *b]), true),
            Cond::FieldNe2(f, a, b) => (*f, None, Members::Two([*a, *b]), false),
            Cond::FieldIn16(f, s) => (*f, None, set(s), true),
            Cond::EitherIn16(f, g, s) => (*f, Some(*g), set(s), true),
            _ => return None,
        };
        if f.hdr as usize != hdr || second.is_some_and(|g| g.hdr as usize != hdr) {
            return None;
        }
        Some(ByteGuard {
            f,
            g: second,
            of,
            next,
            // The test holds when the membership is `inside`; it drops when it is `when`.
            when: inside == g.when,
        })
    }

    /// Whether the packet is dropped by this test, and whether its fields could be read
    /// (not near the packet's end).
    #[inline(always)]
    fn drops(&self, d: &[u8], o3: usize, o4: usize) -> (bool, bool) {
        let base = if self.next { o4 } else { o3 };
        let (v, ok) = self.f.peek(d, base).map_or((0, false), |v| (v, true));
        let mut inside = self.of.has(v);
        let mut ok2 = true;
        if let Some(g) = &self.g {
            let (w, ok) = g.peek(d, base).map_or((0, false), |v| (v, true));
            inside |= self.of.has(w);
            ok2 = ok;
        }
        (inside == self.when, ok & ok2)
    }
}

/// Test `g` as bit `bit` of a packet's outcome mask: set when it drops or cannot be read
/// (then `whole` too).
#[inline(always)]
fn test(g: &Option<ByteGuard>, bit: usize, d: &[u8], o3: usize, o4: usize, m: &mut (u32, u32)) {
    if let Some(g) = g {
        let (drops, ok) = g.drops(d, o3, o4);
        m.0 |= u32::from(drops | !ok) << bit;
        m.1 |= u32::from(!ok) << bit;
    }
}

impl Ipv4Chunk {
    /// The tail read on the bytes, when every test and the step can be (see the module's
    /// comment); `ip`: the walk's IPv4 decoder.
    pub fn lower(t: &Tail, ip: usize) -> Option<Ipv4Chunk> {
        let step = t.step?;
        if step.src.hdr as usize != ip || step.dst.hdr as usize != ip {
            return None;
        }
        let mut x = Ipv4Chunk {
            before: Default::default(),
            enter: t.enter.map(|e| e.len),
            after: Default::default(),
            step,
            codes: [WHOLE; ALWAYS + 1],
            dense: None,
        };
        x.codes[ALWAYS] = PASS;
        for (i, (b, g)) in x.before.iter_mut().zip(&t.before).enumerate() {
            if let Some(g) = g {
                *b = Some(ByteGuard::of(g, ip, false)?);
                x.codes[i] = u16::from(g.reason);
            }
        }
        for (i, (a, g)) in x.after.iter_mut().zip(&t.after).enumerate() {
            if let Some(g) = g {
                // A test after the fixed header reads it, or the IPv4 header.
                let next = t.enter.map(|e| e.dec as usize);
                let h = match &g.cond {
                    Cond::FieldEq(f, _)
                    | Cond::FieldNe(f, _)
                    | Cond::FieldEq2(f, _, _)
                    | Cond::FieldNe2(f, _, _)
                    | Cond::FieldIn16(f, _)
                    | Cond::EitherIn16(f, _, _) => f.hdr as usize,
                    _ => return None,
                };
                let on_next = Some(h) == next;
                *a = Some(ByteGuard::of(g, if on_next { h } else { ip }, on_next)?);
                x.codes[AFTER0 + i] = u16::from(g.reason);
            }
        }
        x.dense = x.dense();
        Some(x)
    }

    /// The tests and keys dense, each test at its bit of the outcome mask.
    fn dense(&self) -> Option<Dense> {
        let mut tests = Vec::new();
        for (i, g) in self.before.iter().enumerate() {
            if let Some(g) = g {
                tests.push(g.dense(i)?);
            }
        }
        // Tests after the fixed header run only when there is one (as `decide`'s).
        if self.enter.is_some() {
            for (i, g) in self.after.iter().enumerate() {
                if let Some(g) = g {
                    tests.push(g.dense(AFTER0 + i)?);
                }
            }
        }
        let keys = [
            Word::of(&self.step.src, false)?,
            Word::of(&self.step.dst, false)?,
        ];
        Dense::new(tests, keys, self.enter)
    }

    /// A packet's outcome (a drop reason, [`PASS`] or [`WHOLE`]) and its step's keys
    /// (the learned one masked), as the walk and the tail would find them: each test
    /// sets a bit of a mask when it drops (or cannot be read), and the first bit set
    /// gives the outcome, with no branch on any test's.
    /// `A`, `E`: the dense tests' counts (see `dense.rs`).
    #[inline(always)]
    fn decide<const A: usize, const E: usize>(
        &self,
        walk: &Walk,
        pk: &mut Packet,
    ) -> (u16, u64, u64) {
        let l = pk.layers();
        let link = pk.meta().link;
        let d = pk.data();
        let Some(o3) = walk.ipv4_at(link, &l) else {
            return (WHOLE, 0, 0);
        };
        let Some(&b) = d.get(o3) else {
            return (WHOLE, 0, 0);
        };
        let o4 = o3 + usize::from(b & 0x0f) * 4;
        if let Some(dn) = self.dense.as_ref().filter(|dn| dn.fits(d.len(), o3, o4)) {
            // SAFETY: `fits` holds.
            let (m, k, look) = unsafe { dn.decide::<A, E>(d, o3, o4, 1 << ALWAYS) };
            let first = m.trailing_zeros() as usize;
            return (self.codes[first.min(ALWAYS)], k & self.step.mask, look);
        }
        self.decide_checked(d, o3, o4)
    }

    /// [`Ipv4Chunk::decide`] for a packet the dense pass cannot read whole: each field
    /// read checked, one not read makes the packet run whole when its test decides.
    #[inline(never)]
    fn decide_checked(&self, d: &[u8], o3: usize, o4: usize) -> (u16, u64, u64) {
        let st = &self.step;
        // (drops or unread, unread), one bit per test; unrolled: one site per test.
        let mut m = (1u32 << ALWAYS, 0u32);
        test(&self.before[0], 0, d, o3, o4, &mut m);
        test(&self.before[1], 1, d, o3, o4, &mut m);
        test(&self.before[2], 2, d, o3, o4, &mut m);
        test(&self.before[3], 3, d, o3, o4, &mut m);
        if let Some(n) = self.enter {
            // Cut short: the loop runs the header's `short` block.
            m.0 |= u32::from(o4 + usize::from(n) > d.len()) << FITS;
            test(&self.after[0], AFTER0, d, o3, o4, &mut m);
            test(&self.after[1], AFTER0 + 1, d, o3, o4, &mut m);
        }
        let (k, look) = match (st.src.peek(d, o3), st.dst.peek(d, o3)) {
            (Some(k), Some(look)) => (k & st.mask, look),
            _ => {
                m.0 |= 1 << KEYS;
                (0, 0)
            }
        };
        let first = m.0.trailing_zeros() as usize;
        let r = if m.1 & (1 << first) != 0 {
            WHOLE
        } else {
            self.codes[first.min(ALWAYS)]
        };
        (r, k, look)
    }
}

impl Ipv4Chunk {
    /// The chunk's first pass, its dense tests unrolled by their counts: the packets
    /// that reach the step and the others (see [`Ipv4Chunk::pass`]).
    #[inline(always)]
    fn first_pass(&self, walk: &Walk, chunk: &mut [Packet], keys: &mut Keys) -> (usize, usize) {
        let n = self.dense.as_ref().map_or((0, 0), |d| (d.ones, d.eithers));
        macro_rules! by_counts {
            ($(($a:literal, $e:literal)),*) => {
                match n {
                    $(($a, $e) => self.pass::<$a, $e>(walk, chunk, keys),)*
                    // `Dense::new` takes no more.
                    _ => unreachable!("dense tests {n:?}"),
                }
            };
        }
        by_counts!(
            (0, 0),
            (1, 0),
            (2, 0),
            (3, 0),
            (4, 0),
            (0, 1),
            (1, 1),
            (2, 1),
            (3, 1),
            (4, 1),
            (0, 2),
            (1, 2),
            (2, 2),
            (3, 2),
            (4, 2)
        )
    }

    /// Each packet decided, its index appended to one list or the other without a branch
    /// on which.
    #[inline(never)]
    fn pass<const A: usize, const E: usize>(
        &self,
        walk: &Walk,
        chunk: &mut [Packet],
        keys: &mut Keys,
    ) -> (usize, usize) {
        let (mut ns, mut no) = (0, 0);
        for (i, pk) in chunk.iter_mut().enumerate() {
            let (r, k, look) = self.decide::<A, E>(walk, pk);
            keys.at[ns % MAX_BATCH] = i as u8;
            keys.k[ns % MAX_BATCH] = (k, look);
            ns += usize::from(r == PASS);
            keys.other[no % MAX_BATCH] = (i as u8, r);
            no += usize::from(r != PASS);
        }
        (ns, no)
    }
}

impl Flat {
    /// Whether chunks run as [`Ipv4Chunk`] (the code's shape, fixed at load).
    pub fn has_ipv4_chunk(&self) -> bool {
        self.ipv4.is_some()
    }

    /// A chunk through the tail on the bytes: packets it ends are done here; `rest` runs
    /// each other one (`Early::Loop`: see [`Flat::ipv4_entered`]; `Early::Whole`) at its
    /// place in the order. `false`: the step's table is not quick, nothing ran (the
    /// caller runs the chunk as before).
    #[inline(always)]
    pub fn ipv4_chunk(
        &self,
        s: &mut State,
        chunk: &mut [Packet],
        keys: &mut Keys,
        rest: impl FnMut(&mut State, &mut Packet, Early),
    ) -> bool {
        let (Some(x), Some(t)) = (self.ipv4.as_deref(), self.tail.as_deref()) else {
            return false;
        };
        match s.tables[x.step.table as usize].quick_bits() {
            Some(32) => self.ipv4_typed::<u32>(x, &t.walk, s, chunk, keys, rest),
            Some(64) => self.ipv4_typed::<u64>(x, &t.walk, s, chunk, keys, rest),
            Some(128) => self.ipv4_typed::<u128>(x, &t.walk, s, chunk, keys, rest),
            _ => return false,
        }
        true
    }

    /// Enters the headers of a packet whose step [`Flat::ipv4_chunk`] ran and that goes
    /// on in the loop, as the walk and the tail did; the steps counted.
    #[inline(always)]
    pub fn ipv4_entered<D: Bytes>(&self, p: &mut Pkt<D>) -> u32 {
        let mut steps = 0;
        if let Some(t) = self.tail.as_deref() {
            // The chunk's pass found IPv4 where the walk ends: it does so again.
            let _ = t.walk.run(p, &mut steps);
            if let Some(e) = &t.enter {
                steps += 1;
                let at = p.cur;
                p.fit(e.dec as usize, at, e.len as usize);
                p.cur = at + e.len as usize;
            }
        }
        steps + 1
    }

    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn ipv4_typed<K: StepKey>(
        &self,
        x: &Ipv4Chunk,
        walk: &Walk,
        s: &mut State,
        chunk: &mut [Packet],
        keys: &mut Keys,
        mut rest: impl FnMut(&mut State, &mut Packet, Early),
    ) {
        let (ns, no) = x.first_pass(walk, chunk, keys);
        let t = x.step.table as usize;
        let fetch = s.tables[t].worth_prefetching();
        if let Some((tab, _)) = K::typed(&mut s.tables[t]) {
            for (k, h) in keys.k[..ns].iter().zip(keys.h.iter_mut()) {
                *h = (tab.hash(&K::of(k.0)), tab.hash(&K::of(k.1)));
                if fetch {
                    tab.prefetch(h.0);
                    tab.prefetch(h.1);
                }
            }
        }
        // Drops touch no table: in any order.
        for &(i, r) in &keys.other[..no] {
            if r < 256 {
                chunk[usize::from(i)].drop_with(r as u8);
            }
        }
        let keys = &*keys;
        let mut j = 0;
        for &(w, r) in &keys.other[..no] {
            if r == WHOLE {
                let w = usize::from(w);
                j = self.ipv4_steps::<K>(x, s, chunk, keys, j, ns, w, &mut rest);
                rest(s, &mut chunk[w], Early::Whole);
            }
        }
        self.ipv4_steps::<K>(x, s, chunk, keys, j, ns, MAX_BATCH, &mut rest);
    }

    /// The listed packets from the `j`th of `ns` on, up to packet `until`: where the list
    /// stopped.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn ipv4_steps<K: StepKey>(
        &self,
        x: &Ipv4Chunk,
        s: &mut State,
        chunk: &mut [Packet],
        keys: &Keys,
        mut j: usize,
        ns: usize,
        until: usize,
        rest: &mut impl FnMut(&mut State, &mut Packet, Early),
    ) -> usize {
        let t = x.step.table as usize;
        while j < ns && usize::from(keys.at[j % MAX_BATCH]) < until {
            let State { tables, counters } = &mut *s;
            // The table stays quick while packets run (only `ctl` adds fixed entries); if
            // not, the listed packets run whole (nothing of theirs has run yet).
            let Some((tab, c)) = K::typed(&mut tables[t]) else {
                let i = usize::from(keys.at[j % MAX_BATCH]);
                rest(s, &mut chunk[i], Early::Whole);
                j += 1;
                continue;
            };
            let (to, goes_on) = self.ipv4_run(tab, c, counters, t, chunk, keys, j, ns, until);
            j = to;
            if let Some(e) = goes_on {
                let i = usize::from(keys.at[j % MAX_BATCH]);
                rest(s, &mut chunk[i], e);
                j += 1;
            }
        }
        j
    }

    /// The typed step for the listed packets from the `j`th on, up to packet `until` or
    /// one that goes on in the loop (returned with where it goes).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn ipv4_run<K: StepKey>(
        &self,
        tab: &mut LearnTable<K, Act>,
        c: Counts,
        counters: &mut [(String, u64)],
        t: usize,
        chunk: &mut [Packet],
        keys: &Keys,
        mut j: usize,
        ns: usize,
        until: usize,
    ) -> (usize, Option<Early>) {
        let mut tally = Tally::default();
        let mut out = None;
        while j < ns {
            let i = usize::from(keys.at[j % MAX_BATCH]);
            if i >= until {
                break;
            }
            let Some(pk) = chunk.get_mut(i) else { break };
            if let Err(to) = self.typed_step(tab, counters, t, pk, keys, j % MAX_BATCH, &mut tally)
            {
                out = Some(Early::Loop(to));
                break;
            }
            j += 1;
        }
        tally.add_to(c);
        (j, out)
    }
}

#[cfg(test)]
mod tests {
    use crate::nfs::pipeline::nf::{compile, Compiled};
    use crate::packet::{Batch, LinkKind, Packet, Verdict, FLOOD};

    fn example(app: &str) -> String {
        let path = format!("{}/examples/pipeline/{app}.stv", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(path).expect("the example")
    }

    /// Ethernet, IPv4 (`frag`: the flags and offset word), then `l4` (the IP total length
    /// is the frame's).
    fn ip(proto: u8, frag: u16, src: u8, dst: u8, l4: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 14];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let len = (20 + l4.len()) as u16;
        f.extend([0x45, 0, (len >> 8) as u8, len as u8, 0, 1]);
        f.extend(frag.to_be_bytes());
        f.extend([64, proto, 0, 0, 10, 0, 0, src, 10, 0, 0, dst]);
        f.extend(l4);
        f
    }

    /// A TCP header (20 bytes) from `sp` to `dp`.
    fn tcp(sp: u16, dp: u16) -> Vec<u8> {
        let mut h = vec![0u8; 20];
        h[0..2].copy_from_slice(&sp.to_be_bytes());
        h[2..4].copy_from_slice(&dp.to_be_bytes());
        h[12] = 0x50;
        h
    }

    /// One chunk of (bytes, in_port) through the program: each packet's verdict.
    fn run(c: &mut Compiled, ins: &[(Vec<u8>, u16)]) -> Vec<String> {
        let mut batch = Batch::new();
        for (bytes, port) in ins {
            let mut p = Packet::from_bytes(bytes);
            let m = p.meta_mut();
            m.link = LinkKind::Ethernet;
            m.in_port = *port;
            m.egress = 99;
            batch.push(p);
        }
        c.plan.run_batch(&mut batch, 5);
        batch
            .iter()
            .map(|p| match (p.meta().verdict, p.meta().egress) {
                (Verdict::Drop(r), _) => format!("drop {}", c.plan.drops[r as usize]),
                (_, FLOOD) => "flood".to_string(),
                (_, e) => format!("egress {e}"),
            })
            .collect()
    }

    /// The firewall program runs its chunks on the bytes: in one chunk, a miss (flooded),
    /// hits, a port in and out of the set (source or destination), a frame that is not
    /// IPv4, a later fragment, ICMP, ports cut short, an IPv4 header cut short, and a
    /// UDP header whose ports end within 8 bytes of the frame's end (run whole in the
    /// loop, in its place: what it learns is found by the packet after it).
    #[test]
    fn the_firewall_decides_a_chunk_on_the_bytes() {
        let mut c =
            compile("firewall.stv", &example("firewall"), &Default::default()).expect("compiles");
        assert!(c.plan.flat().ipv4.is_some(), "the chunk on the bytes");
        let mut arp = vec![0u8; 42];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        let mut short_udp = vec![0u8; 6];
        short_udp[0..2].copy_from_slice(&80u16.to_be_bytes());
        short_udp[2..4].copy_from_slice(&7u16.to_be_bytes());
        let ins = [
            (ip(6, 0, 1, 2, &tcp(1234, 80)), 1),
            (ip(6, 0, 2, 1, &tcp(80, 1234)), 2),
            (ip(17, 0, 3, 1, &tcp(53, 53)), 3),
            (arp, 1),
            (ip(6, 0x0001, 1, 2, &tcp(1234, 80)), 1),
            (ip(1, 0, 1, 2, &[8, 0, 0, 0, 0, 0, 0, 0]), 1),
            (ip(6, 0, 1, 2, &[0, 80]), 1),
            (ip(6, 0, 1, 2, &[])[..24].to_vec(), 1),
            (ip(6, 0, 1, 9, &tcp(443, 5555)), 1),
            (ip(6, 0, 9, 1, &tcp(5555, 443)), 3),
            (ip(6, 0, 4, 9, &tcp(80, 999)), 2),
            (ip(17, 0, 5, 1, &short_udp), 4),
            (ip(6, 0, 1, 5, &tcp(80, 1)), 1),
        ];
        let got = run(&mut c, &ins);
        assert_eq!(
            got,
            [
                "flood",
                "egress 1",
                "drop port-denied",
                "drop not-ipv4",
                "drop fragment",
                "drop not-tcp-udp",
                "drop truncated",
                "drop malformed",
                "flood",
                "egress 1",
                "egress 3",
                "egress 1",
                "egress 4",
            ]
        );
        let t = &c.plan.state.tables[0];
        assert_eq!((t.hits, t.misses, t.learned_len()), (5, 2, 5));
        let counts: Vec<u64> = c.plan.state.counters.iter().map(|x| x.1).collect();
        assert_eq!(counts, [2]);
    }

    /// The dense pass (every read inside the frame, checked once) and the checked path
    /// (a field's word past the frame's end) in one chunk, with the same verdicts as the
    /// loop: a UDP frame whose destination port's word ends at the frame's end (dense)
    /// and one a byte shorter (checked path, run whole in its place: it finds the
    /// address the packet before it learned), ports after IPv4 options (read at the
    /// header's length, not at 20), in and out of the set, ICMP that is also a later
    /// fragment (the first test's reason), a later TCP fragment, a first fragment (more
    /// fragments, offset 0: it carries its ports and passes), ARP.
    #[test]
    fn the_dense_pass_and_the_checked_path_agree_at_the_reach() {
        let mut c =
            compile("firewall.stv", &example("firewall"), &Default::default()).expect("compiles");
        assert!(c.plan.flat().ipv4.is_some(), "the chunk on the bytes");
        let udp = |sp: u16, dp: u16, payload: usize| {
            let mut h = vec![0u8; 8 + payload];
            h[0..2].copy_from_slice(&sp.to_be_bytes());
            h[2..4].copy_from_slice(&dp.to_be_bytes());
            h[4..6].copy_from_slice(&((8 + payload) as u16).to_be_bytes());
            h
        };
        // IPv4 with one word of options (IHL 6), then `l4`.
        let with_options = |src: u8, dst: u8, l4: &[u8]| {
            let mut f = ip(6, 0, src, dst, l4);
            f[14] = 0x46;
            let len = (24 + l4.len()) as u16;
            f[16..18].copy_from_slice(&len.to_be_bytes());
            f.splice(34..34, [1, 1, 1, 0]);
            f
        };
        let mut arp = vec![0u8; 42];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        let ins = [
            (ip(17, 0, 1, 2, &udp(5353, 443, 2)), 1),
            (ip(17, 0, 2, 1, &udp(443, 5353, 1)), 2),
            (with_options(3, 2, &tcp(1234, 80)), 3),
            (with_options(3, 2, &tcp(1234, 22)), 3),
            (ip(1, 0x2001, 1, 2, &[8, 0, 0, 0, 0, 0, 0, 0]), 1),
            (ip(6, 0x0001, 1, 2, &tcp(80, 80)), 1),
            (ip(6, 0x2000, 1, 2, &tcp(80, 9)), 1),
            (arp, 1),
        ];
        let got = run(&mut c, &ins);
        assert_eq!(
            got,
            [
                "flood",
                "egress 1",
                "egress 2",
                "drop port-denied",
                "drop not-tcp-udp",
                "drop fragment",
                "egress 2",
                "drop not-ipv4",
            ]
        );
        let t = &c.plan.state.tables[0];
        assert_eq!((t.hits, t.misses, t.learned_len()), (3, 1, 3));
        let counts: Vec<u64> = c.plan.state.counters.iter().map(|x| x.1).collect();
        assert_eq!(counts, [1]);
    }

    /// The port rule's two fields read from one word (the example's ports, 2 bytes apart)
    /// and from two (a layout with the destination 10 bytes after the source): each
    /// port is read where it lies, in and out of the set, and the bytes where the other
    /// layout has its port do not count.
    #[test]
    fn either_port_is_read_where_it_lies_in_one_word_or_two() {
        // (source port, destination port at 2, destination port at 10)
        let l4 = |sp: u16, d2: u16, d10: u16| {
            let mut h = vec![0u8; 20];
            h[0..2].copy_from_slice(&sp.to_be_bytes());
            h[2..4].copy_from_slice(&d2.to_be_bytes());
            h[10..12].copy_from_slice(&d10.to_be_bytes());
            h
        };
        let ins = [
            (ip(6, 0, 1, 2, &l4(80, 5, 5)), 1),
            (ip(6, 0, 2, 1, &l4(5, 443, 5)), 2),
            (ip(17, 0, 3, 1, &l4(5, 5, 443)), 3),
            (ip(6, 0, 4, 1, &l4(5, 5, 5)), 4),
            (ip(6, 0, 1, 4, &l4(443, 80, 80)), 1),
        ];
        let two = example("firewall").replace(
            "layout ports { src: 16; dst: 16; }",
            "layout ports { src: 16; gap: 64; dst: 16; }",
        );
        for (src, want) in [
            (
                example("firewall"),
                [
                    "flood",
                    "egress 1",
                    "drop port-denied",
                    "drop port-denied",
                    "flood",
                ],
            ),
            (
                two,
                [
                    "flood",
                    "drop port-denied",
                    "egress 1",
                    "drop port-denied",
                    "flood",
                ],
            ),
        ] {
            let mut c = compile("firewall.stv", &src, &Default::default()).expect("compiles");
            assert!(c.plan.flat().ipv4.is_some(), "the chunk on the bytes");
            assert_eq!(run(&mut c, &ins), want);
        }
    }

    /// A miss block that is not a fixed ending (three counters) goes on in the loop with
    /// the headers entered: the IPv4 switch's flood, counted three times.
    #[test]
    fn a_miss_that_goes_on_runs_in_the_loop_mid_chunk() {
        let src = example("ipv4_switch").replace(
            "miss { count floods; flood; }",
            "miss { count floods; count again; count thrice; flood; }",
        );
        let mut c = compile("ipv4_switch.stv", &src, &Default::default()).expect("compiles");
        assert!(c.plan.flat().ipv4.is_some(), "the chunk on the bytes");
        let ins = [
            (ip(6, 0, 1, 2, &tcp(1, 2)), 1),
            (ip(6, 0, 2, 1, &tcp(2, 1)), 2),
            (ip(17, 0, 3, 2, &tcp(3, 2)), 3),
            (ip(6, 0, 4, 5, &tcp(4, 5)), 4),
            (ip(6, 0, 5, 4, &tcp(5, 4)), 0),
        ];
        let got = run(&mut c, &ins);
        assert_eq!(got, ["flood", "egress 1", "egress 2", "flood", "egress 4"]);
        let t = &c.plan.state.tables[0];
        assert_eq!((t.hits, t.misses), (3, 2));
        let counts: Vec<u64> = c.plan.state.counters.iter().map(|x| x.1).collect();
        assert_eq!(counts, [2, 2, 2]);
    }

    /// Programs of another shape keep the general path: the MAC switch (no walk) and a
    /// firewall whose port rule reads a field of the link header.
    #[test]
    fn other_shapes_keep_the_loop() {
        let c = compile(
            "mac_switch.stv",
            &example("mac_switch"),
            &Default::default(),
        )
        .expect("compiles");
        assert!(c.plan.flat().ipv4.is_none());
        let src = example("firewall").replace(
            "if ip.frag != 0 { drop fragment; }",
            "if ip.frag != 0 { drop fragment; }\n  if eth.type == 1 { drop fragment; }",
        );
        let c = compile("firewall.stv", &src, &Default::default()).expect("compiles");
        assert!(c.plan.flat().tail.is_some() && c.plan.flat().ipv4.is_none());
    }
}
