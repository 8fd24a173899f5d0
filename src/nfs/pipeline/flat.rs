//! The plan lowered to one flat list of instructions run by a program-counter loop: no
//! recursion per block, no `Flow` passed back up, `&&`/`||` as branches, `field OP
//! constant` tests and `match` arms as one instruction each. Per packet, an instruction
//! costs one jump-table dispatch; decoders and tables are entered in place.

use super::ast::BinOp;
use super::plan::{
    binop, link_code, ActTmpl, Bytes, Code, Ex, FieldRef, Leaf, Op, Pkt, Read, State,
};
use super::table::Act;
use super::walk::Walk;
use crate::packet::FLOOD;
use tail::Tail;

mod dense;
mod entry;
mod ipv4;
mod miss;
mod tail;

pub use entry::{Early, Keys};
use ipv4::Ipv4Chunk;
use miss::MissEnd;

/// Decoder entries and table applications per packet at most: decoder repeats and
/// acyclic gotos bound the walk, this is a second guard.
const MAX_STEPS: u32 = 1024;

/// No guard on a `match` arm.
const NO_GUARD: u16 = u16::MAX;

/// A test that decides a branch.
#[derive(Clone, Debug)]
pub enum Cond {
    /// `field == constant`, `field != constant`: no operator to dispatch on.
    FieldEq(FieldRef, u64),
    FieldNe(FieldRef, u64),
    /// `field != a && field != b` (`ip.proto != 6 && ip.proto != 17`): one read.
    FieldNe2(FieldRef, u64, u64),
    /// `field == a || field == b`.
    FieldEq2(FieldRef, u64, u64),
    /// `field OP constant`, the common shape (`ip.proto != 6`).
    FieldConst(BinOp, FieldRef, u64),
    /// `leaf OP leaf`.
    Flat(BinOp, Leaf, Leaf),
    /// `(leaf OP leaf) OP leaf`, e.g. `(in_port ^ 1) < ports`.
    Flat2(BinOp, BinOp, Leaf, Leaf, Leaf),
    /// `field in SET`, `leaf in SET`.
    FieldIn(FieldRef, u16),
    /// `a in SET || b in SET` (a firewall's source or destination port).
    EitherIn(FieldRef, FieldRef, u16),
    /// `FieldIn` and `EitherIn` over fields of at most 16 bits, the set held in the test:
    /// no index into the program's sets, no test of the value's range.
    FieldIn16(FieldRef, Set),
    EitherIn16(FieldRef, FieldRef, Set),
    In(Leaf, u16),
    /// Anything else: non-zero is true.
    Ex(Box<Ex>),
}

/// A port set, one bit per port.
#[derive(Clone, Debug)]
pub struct Set(Box<[u64; 1024]>);

impl Set {
    /// Whether `v`, read from a field of at most 16 bits, is in the set.
    #[inline(always)]
    fn has(&self, v: u64) -> bool {
        let v = v as u16;
        self.0[usize::from(v >> 6)] & (1 << (v & 63)) != 0
    }
}

/// One `match` value (or `_`) in arm order, with the arm's guard and body.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    value: u64,
    any: bool,
    /// A `repeat` decoder the arm enters: the arm does not match once it used its repeats.
    guard: u16,
    pc: u32,
    /// The arm's body is exactly `next D`: D, entered in place (else `NO_ENTER`).
    enter: u16,
}

const NO_ENTER: u16 = u16::MAX;

/// A value: a leaf read in place, or an expression tree.
#[derive(Clone, Debug)]
pub enum Val {
    Field(FieldRef),
    /// `link`, what the start block matches on.
    Link,
    Leaf(Leaf),
    Flat(BinOp, Leaf, Leaf),
    Ex(Box<Ex>),
}

#[derive(Clone, Debug)]
pub enum Ins {
    /// The program's header walk done by `Layers` (see `walk.rs`): to the IPv4 decoder's
    /// body when it applies, else on to the program's own walk.
    Walk(Box<Walk>),
    Jump(u32),
    /// Falls through when the test holds, else jumps.
    IfNot(Cond, u32),
    /// Jumps when the test holds.
    If(Cond, u32),
    /// `if TEST { drop R; }` in one instruction.
    DropIf(Cond, u8),
    /// Drops unless the test holds (a branch to a `drop`, threaded).
    DropUnless(Cond, u8),
    /// A `DropIf` and the `DropIf` after it (which stays, for jumps to it): one dispatch.
    DropIf2(Box<(Cond, u8, Cond, u8)>),
    /// First case matching the value; none: go to `end`.
    Switch(Val, Box<[Case]>, u32),
    /// A `match link`: the case for each link kind (none: go to `end`).
    SwitchLink(Box<[Option<Case>; 4]>, u32),
    /// Enter decoder `d` (its body or its `short` block).
    Enter(u16),
    /// Enter a decoder of fixed length that moves the offset and counts no entries:
    /// what `Enter` does for it, without looking the decoder up.
    EnterFixed(Box<Fixed>),
    /// An `EnterFixed` whose body begins with `DropIf` (`true`) or `DropUnless`
    /// (`false`): both in one dispatch (the firewall's port rule on its ports header).
    /// The test stays at the body's start for other ways in.
    EnterTest(Box<(Fixed, Cond, u8, bool)>),
    /// Apply table `t` (a hit runs its action, a miss its `miss` block).
    Apply(u16),
    /// `learn T(leaf) -> output leaf` (or a fixed action), the common learn.
    Learn(Box<Learn>),
    /// A learn and the `goto` after it.
    LearnApply(Box<Learn>, u16),
    /// A learning switch's step, `learn T(h.a) -> output in_port; goto T;` with T keyed
    /// by one field: both fields read in place, no template to interpret.
    Step(Box<Step>),
    Op(Box<Op>),
    Count(u16),
    Output(Val),
    Flood,
    Drop(u8),
    Done,
}

#[derive(Clone, Copy, Debug)]
pub struct Fixed {
    dec: u16,
    len: u16,
    body: u32,
    short: u32,
}

#[derive(Clone, Copy, Debug)]
pub struct Step {
    table: u16,
    /// The learned key (masked to the table key's width) and the key looked up.
    src: FieldRef,
    mask: u64,
    dst: FieldRef,
}

#[derive(Clone, Debug)]
pub struct Learn {
    table: u16,
    key: Leaf,
    mask: u64,
    /// The learned entry outputs to this value; `None`: the entry's action is `act`.
    out: Option<Leaf>,
    act: Act,
}

/// Where each decoder's and table's code starts.
#[derive(Clone, Copy, Debug)]
struct Dec {
    fixed_len: u16,
    size: Option<(Read, u16)>,
    peek: bool,
    /// Whether a guarded `match` arm asks how often it was entered.
    track: bool,
    /// Fixed length, moves the offset, not tracked: entered without the general case.
    plain: bool,
    body: u32,
    short: u32,
}

pub struct Flat {
    ins: Vec<Ins>,
    start: u32,
    decs: Vec<Dec>,
    /// Per table: its miss block, and where an `Apply` of it stands (for `goto` entries).
    miss: Vec<u32>,
    apply: Vec<u32>,
    /// Per table: its single key field, when it has one (the common case).
    key1: Vec<Option<FieldRef>>,
    /// Decoders some `match` arm guards, one bit each.
    guarded: u32,
    /// Some instruction writes the packet's bytes (`set`).
    writes: bool,
    /// Per link kind: the start's `match link` entering a fixed header whose body begins
    /// with a learning switch's step, run without dispatching either (an L2 switch).
    entry: [Option<Entry>; 4],
    /// With the walk: the first learning step on the IPv4 header, whose slots a batch
    /// prefetches (see [`Flat::prefetch`]).
    ip_step: Option<Step>,
    /// With the walk: the straight code run after its IPv4 entry (see `tail.rs`).
    tail: Option<Box<Tail>>,
    /// That straight code run a chunk at a time on the bytes, when it can be (see
    /// `ipv4.rs`).
    ipv4: Option<Box<Ipv4Chunk>>,
    /// Per table: its miss block as a fixed ending, when it is one (see `miss.rs`).
    miss_end: Vec<Option<MissEnd>>,
    /// The table every [`Entry`]'s step applies, when they share one (see `entry.rs`).
    entry_table: Option<u16>,
}

/// `match link { K => next D; }`, D of fixed length, D's body beginning with a [`Step`].
#[derive(Clone, Copy, Debug)]
struct Entry {
    dec: u16,
    len: u16,
    short: u32,
    step: Step,
}

impl Flat {
    /// `walk`: run a recognised header walk as `Layers` (see `walk.rs`).
    pub fn lower(code: &Code, walk: bool) -> Flat {
        let mut f = Flat {
            ins: Vec::new(),
            start: 0,
            decs: Vec::new(),
            miss: Vec::new(),
            apply: Vec::new(),
            key1: code
                .keys
                .iter()
                .map(|k| match k.as_slice() {
                    [(f, _)] => Some(*f),
                    _ => None,
                })
                .collect(),
            guarded: 0,
            writes: false,
            entry: [None; 4],
            ip_step: None,
            tail: None,
            ipv4: None,
            miss_end: Vec::new(),
            entry_table: None,
        };
        f.start = f.pc();
        let walk = Walk::recognise(code)
            .filter(|_| walk)
            .map(|w| f.emit(Ins::Walk(Box::new(w))));
        f.region(&code.start);
        for d in &code.decoders {
            let body = f.region(&d.body);
            let short = f.region(&d.short);
            f.decs.push(Dec {
                fixed_len: d.fixed_len,
                size: d.size,
                peek: d.peek,
                track: false,
                plain: false,
                body,
                short,
            });
        }
        for (t, m) in code.misses.iter().enumerate() {
            let at = f.ins.len() as u32;
            f.ins.push(Ins::Apply(t as u16));
            f.apply.push(at);
            let miss = f.region(m);
            f.miss.push(miss);
        }
        for (i, d) in f.decs.iter_mut().enumerate() {
            d.track = f.guarded & (1 << i) != 0;
            d.plain = d.size.is_none() && !d.peek && !d.track;
        }
        for i in 0..f.ins.len() {
            let Ins::Enter(d) = f.ins[i] else { continue };
            let dec = f.decs[d as usize];
            if dec.size.is_none() && !dec.peek && !dec.track {
                f.ins[i] = Ins::EnterFixed(Box::new(Fixed {
                    dec: d,
                    len: dec.fixed_len,
                    body: dec.body,
                    short: dec.short,
                }));
            }
        }
        f.thread_drops();
        f.sets_in_place(code);
        f.fuse_enter_tests();
        f.writes = f
            .ins
            .iter()
            .any(|i| matches!(i, Ins::Op(op) if matches!(**op, Op::Set { .. })));
        if let Some(at) = walk {
            let (decs, guarded) = (&f.decs, f.guarded);
            let Some(Ins::Walk(w)) = f.ins.get(at) else {
                unreachable!("the walk is where it was emitted")
            };
            let ip = w.ip();
            let mut body = decs[ip].body;
            // `Layers` found IPv4 only with version 4: the body's own version check holds.
            if let Some(Ins::DropIf(Cond::FieldNe(v, 4) | Cond::FieldConst(BinOp::Ne, v, 4), _)) =
                f.ins.get(body as usize)
            {
                if v.hdr as usize == ip && v.is_first_nibble() {
                    body += 1;
                }
            }
            // IPv6 likewise (`Layers` checked version 6); ARP's body runs whole.
            let mut others = w.others;
            for (o, version) in others.iter_mut().flatten().zip([Some(6), None]) {
                o.body = decs[o.dec as usize].body;
                if let (
                    Some(Ins::DropIf(Cond::FieldNe(v, x) | Cond::FieldConst(BinOp::Ne, v, x), _)),
                    Some(version),
                ) = (f.ins.get(o.body as usize), version)
                {
                    if *x == version && v.hdr as u16 == o.dec && v.is_first_nibble() {
                        o.body += 1;
                    }
                }
            }
            f.ip_step = f.ins.iter().find_map(|i| match i {
                Ins::Step(st) if st.src.hdr as usize == ip && st.dst.hdr as usize == ip => {
                    Some(**st)
                }
                _ => None,
            });
            if let Some(Ins::Walk(w)) = f.ins.get_mut(at) {
                w.body = body;
                w.others = others;
                w.set_track(guarded);
            }
        }
        f.pair_drops();
        f.miss_end = (0..f.miss.len()).map(|t| f.miss_end(t)).collect();
        f.entry = f.entries();
        let mut tables = f.entry.iter().flatten().map(|e| e.step.table);
        f.entry_table = tables
            .next()
            .filter(|&t| tables.all(|u| u == t) && (t as usize) < f.miss.len());
        f.tail = f.walk().and_then(|w| Tail::lower(&f, w)).map(Box::new);
        f.ipv4 = match (&f.tail, f.writes) {
            (Some(t), false) => Ipv4Chunk::lower(t, t.walk.ip()).map(Box::new),
            _ => None,
        };
        f
    }

    /// A batch's first pass (the VPP / DPDK way): for every packet, read the keys its
    /// learning step will learn and look up (the entry's fixed header at the start, or
    /// the IPv4 header the walk finds) and prefetch their table slots, so the packets'
    /// cache misses overlap instead of coming one after the other. Only loads: a guess
    /// that turns out wrong (the packet takes another path) costs a wasted prefetch,
    /// never a different result.
    #[inline(always)]
    pub fn prefetch(&self, s: &State, chunk: &mut [crate::packet::Packet]) {
        if let Some(st) = self.ip_step {
            let t = &s.tables[st.table as usize];
            // A small table's slots stay cached: the pass would only hash twice.
            if !t.worth_prefetching() {
                return;
            }
            for pk in chunk.iter_mut() {
                let l = pk.layers();
                if l.l3 != crate::packet::L3Kind::Ipv4 {
                    continue;
                }
                let (d, o) = (pk.data(), l.l3_off as usize);
                if let (Some(k), Some(look)) = (st.src.peek(d, o), st.dst.peek(d, o)) {
                    t.prefetch((k & st.mask) as u128, look as u128);
                }
            }
        } else if self
            .entry
            .iter()
            .flatten()
            .any(|e| s.tables[e.step.table as usize].worth_prefetching())
        {
            for pk in chunk.iter() {
                if let Some((st, k, look)) = self.step_keys(pk) {
                    s.tables[st.table as usize].prefetch(k as u128, look as u128);
                }
            }
        }
    }

    /// The [`Entry`] per link kind, when the code starts with a `match link` (no walk).
    fn entries(&self) -> [Option<Entry>; 4] {
        let mut out = [None; 4];
        let Some(Ins::SwitchLink(cases, _)) = self.ins.get(self.start as usize) else {
            return out;
        };
        for (o, k) in out.iter_mut().zip(cases.iter()) {
            let Some(k) = k.filter(|k| k.enter != NO_ENTER) else {
                continue;
            };
            let d = self.decs[k.enter as usize];
            if let (true, Some(Ins::Step(st))) = (d.plain, self.ins.get(d.body as usize)) {
                *o = Some(Entry {
                    dec: k.enter,
                    len: d.fixed_len,
                    short: d.short,
                    step: **st,
                });
            }
        }
        out
    }

    /// Set tests over fields of at most 16 bits hold their set (see [`Cond::FieldIn16`]).
    fn sets_in_place(&mut self, code: &Code) {
        let narrow = |f: &FieldRef| f.bits <= 16;
        let set = |s: u16| Set(code.sets[s as usize].clone());
        let sized = |k: &mut Cond| match k {
            Cond::FieldIn(f, s) if narrow(f) => *k = Cond::FieldIn16(*f, set(*s)),
            Cond::EitherIn(f, g, s) if narrow(f) && narrow(g) => {
                *k = Cond::EitherIn16(*f, *g, set(*s))
            }
            _ => {}
        };
        for i in self.ins.iter_mut() {
            match i {
                Ins::IfNot(k, _) | Ins::If(k, _) | Ins::DropIf(k, _) | Ins::DropUnless(k, _) => {
                    sized(k)
                }
                Ins::DropIf2(d) => {
                    sized(&mut d.0);
                    sized(&mut d.2);
                }
                Ins::EnterTest(x) => sized(&mut x.1),
                _ => {}
            }
        }
    }

    /// An `EnterFixed` whose body begins with a drop test runs the test too (see
    /// [`Ins::EnterTest`]).
    fn fuse_enter_tests(&mut self) {
        for i in 0..self.ins.len() {
            let Ins::EnterFixed(e) = &self.ins[i] else {
                continue;
            };
            let e = **e;
            let (k, r, when) = match self.ins.get(e.body as usize) {
                Some(Ins::DropIf(k, r)) => (k.clone(), *r, true),
                Some(Ins::DropUnless(k, r)) => (k.clone(), *r, false),
                _ => continue,
            };
            self.ins[i] = Ins::EnterTest(Box::new((e, k, r, when)));
        }
    }

    /// `DropIf; DropIf` runs as one instruction that goes on past both (the second
    /// stays where it is, so jumps to it still work).
    fn pair_drops(&mut self) {
        for i in 0..self.ins.len().saturating_sub(1) {
            if let (Ins::DropIf(a, r), Ins::DropIf(b, q)) = (&self.ins[i], &self.ins[i + 1]) {
                self.ins[i] = Ins::DropIf2(Box::new((a.clone(), *r, b.clone(), *q)));
            }
        }
    }

    /// A branch to a `drop` drops in place (one dispatch less): `if a || b { … } drop R;`.
    fn thread_drops(&mut self) {
        for i in 0..self.ins.len() {
            let to = match &self.ins[i] {
                Ins::If(_, t) | Ins::IfNot(_, t) => *t as usize,
                _ => continue,
            };
            let Some(&Ins::Drop(r)) = self.ins.get(to) else {
                continue;
            };
            self.ins[i] = match &self.ins[i] {
                Ins::If(c, _) => Ins::DropIf(c.clone(), r),
                Ins::IfNot(c, _) => Ins::DropUnless(c.clone(), r),
                _ => unreachable!("matched above"),
            };
        }
    }

    /// Whether packets must be writable: a read-only program leaves a borrowed packet
    /// (a mapped trace's bytes) uncopied.
    pub fn writes(&self) -> bool {
        self.writes
    }

    /// Whether some link kind starts with an [`Entry`].
    pub fn has_entry(&self) -> bool {
        self.entry.iter().any(Option::is_some)
    }

    /// The recognised header walk, if the code runs one.
    pub fn walk(&self) -> Option<&Walk> {
        match self.ins.get(self.start as usize) {
            Some(Ins::Walk(w)) => Some(w),
            _ => None,
        }
    }

    /// A block that ends the packet when it runs to its end.
    fn region(&mut self, ops: &[Op]) -> u32 {
        let at = self.pc();
        self.block(ops);
        self.ins.push(Ins::Done);
        at
    }

    fn pc(&self) -> u32 {
        self.ins.len() as u32
    }

    fn emit(&mut self, i: Ins) -> usize {
        self.ins.push(i);
        self.ins.len() - 1
    }

    /// Points the jump at `at` to `to`.
    fn patch(&mut self, at: usize, to: u32) {
        match &mut self.ins[at] {
            Ins::Jump(t) | Ins::IfNot(_, t) | Ins::If(_, t) | Ins::Switch(_, _, t) => *t = to,
            _ => unreachable!("only jumps are patched"),
        }
    }

    fn block(&mut self, ops: &[Op]) {
        let mut ops = ops.iter().peekable();
        while let Some(op) = ops.next() {
            match op {
                Op::If(c, t, e) if e.is_empty() && matches!(t.as_slice(), [Op::Drop(_)]) => {
                    let [Op::Drop(r)] = t.as_slice() else {
                        unreachable!()
                    };
                    // `if a && b { drop }`: a decides by a branch, b in the drop.
                    let (skip, last) = match c {
                        _ if one_of_two(c).is_some() => (Vec::new(), c),
                        Ex::Bin(BinOp::And, a, b) if simple(b) => (self.jump_unless(a), &**b),
                        _ => (Vec::new(), c),
                    };
                    if simple(last) {
                        self.emit(Ins::DropIf(cond(last), *r));
                    } else {
                        let j = self.jump_unless(last);
                        self.emit(Ins::Drop(*r));
                        let end = self.pc();
                        j.into_iter().for_each(|j| self.patch(j, end));
                    }
                    let end = self.pc();
                    skip.into_iter().for_each(|j| self.patch(j, end));
                }
                Op::If(c, t, e) => {
                    let to_else = self.jump_unless(c);
                    self.block(t);
                    if e.is_empty() {
                        let end = self.pc();
                        to_else.into_iter().for_each(|j| self.patch(j, end));
                    } else {
                        let skip = self.emit(Ins::Jump(0));
                        let els = self.pc();
                        to_else.into_iter().for_each(|j| self.patch(j, els));
                        self.block(e);
                        let end = self.pc();
                        self.patch(skip, end);
                    }
                }
                Op::Match(e, arms) => {
                    let sw = self.emit(Ins::Switch(val(e), Box::new([]), 0));
                    let mut cases = Vec::new();
                    let mut ends = Vec::new();
                    for a in arms {
                        let pc = self.pc();
                        let guard = a.guard.unwrap_or(NO_GUARD);
                        let enter = match a.body.as_slice() {
                            [Op::Next(d)] => *d,
                            _ => NO_ENTER,
                        };
                        if let Some(g) = a.guard {
                            self.guarded |= 1 << g;
                        }
                        if a.any {
                            cases.push(Case {
                                value: 0,
                                any: true,
                                guard,
                                pc,
                                enter,
                            });
                        } else {
                            cases.extend(a.values.iter().map(|&value| Case {
                                value,
                                any: false,
                                guard,
                                pc,
                                enter,
                            }));
                        }
                        self.block(&a.body);
                        ends.push(self.emit(Ins::Jump(0)));
                    }
                    let end = self.pc();
                    ends.into_iter().for_each(|j| self.patch(j, end));
                    // `match link`: four values, no guards: the case by the link kind's index.
                    let by_link =
                        matches!(val(e), Val::Link) && cases.iter().all(|k| k.guard == NO_GUARD);
                    if by_link {
                        let mut table = [None; 4];
                        for (l, t) in table.iter_mut().enumerate() {
                            *t = cases.iter().find(|k| k.any || k.value == l as u64).copied();
                        }
                        self.ins[sw] = Ins::SwitchLink(Box::new(table), end);
                    } else if let Ins::Switch(_, c, e) = &mut self.ins[sw] {
                        *c = cases.into_boxed_slice();
                        *e = end;
                    }
                }
                Op::Count(c) => {
                    self.emit(Ins::Count(*c));
                }
                Op::Output(e) => {
                    self.emit(Ins::Output(val(e)));
                }
                Op::Flood => {
                    self.emit(Ins::Flood);
                }
                Op::Drop(r) => {
                    self.emit(Ins::Drop(*r));
                }
                Op::Goto(t) => {
                    self.emit(Ins::Apply(*t));
                }
                Op::Next(d) => {
                    self.emit(Ins::Enter(*d));
                }
                Op::Pass => {
                    self.emit(Ins::Done);
                }
                Op::Learn { table, keys, act } if learn1(keys, act).is_some() => {
                    let (key, mask, out, act) = learn1(keys, act).expect("checked");
                    let l = Box::new(Learn {
                        table: *table,
                        key,
                        mask,
                        out,
                        act,
                    });
                    // `learn …; goto T;` (the switches): one instruction.
                    if let Some(Op::Goto(t)) = ops.peek() {
                        let step = match (&l.key, &l.out, self.key1[*t as usize]) {
                            (Leaf::Field(src), Some(Leaf::InPort), Some(dst)) if l.table == *t => {
                                Some(Step {
                                    table: *t,
                                    src: *src,
                                    mask: l.mask,
                                    dst,
                                })
                            }
                            _ => None,
                        };
                        match step {
                            Some(st) => self.emit(Ins::Step(Box::new(st))),
                            None => self.emit(Ins::LearnApply(l, *t)),
                        };
                        ops.next();
                    } else {
                        self.emit(Ins::Learn(l));
                    }
                }
                Op::Set { .. } | Op::Learn { .. } | Op::Remove { .. } => {
                    self.emit(Ins::Op(Box::new(op.clone())));
                }
            }
        }
    }

    /// Branches taken when `e` is false (to be patched to the else part); falls through
    /// when it is true. `&&` and `||` become branches, as they short-circuit.
    fn jump_unless(&mut self, e: &Ex) -> Vec<usize> {
        if let Some(c) = either_in(e).or_else(|| one_of_two(e)) {
            return vec![self.emit(Ins::IfNot(c, 0))];
        }
        match e {
            Ex::Bin(BinOp::And, a, b) => {
                let mut j = self.jump_unless(a);
                j.extend(self.jump_unless(b));
                j
            }
            Ex::Bin(BinOp::Or, a, b) => {
                // a true: straight to the then part; else b decides.
                let to_then = self.jump_if(a);
                let j = self.jump_unless(b);
                let then = self.pc();
                to_then.into_iter().for_each(|t| self.patch(t, then));
                j
            }
            Ex::Not(a) => self.jump_if(a),
            _ => vec![self.emit(Ins::IfNot(cond(e), 0))],
        }
    }

    /// Branches taken when `e` is true; falls through when it is false.
    fn jump_if(&mut self, e: &Ex) -> Vec<usize> {
        if let Some(c) = either_in(e).or_else(|| one_of_two(e)) {
            return vec![self.emit(Ins::If(c, 0))];
        }
        match e {
            Ex::Bin(BinOp::Or, a, b) => {
                let mut j = self.jump_if(a);
                j.extend(self.jump_if(b));
                j
            }
            Ex::Bin(BinOp::And, a, b) => {
                let skip = self.jump_unless(a);
                let j = self.jump_if(b);
                let after = self.pc();
                skip.into_iter().for_each(|s| self.patch(s, after));
                j
            }
            Ex::Not(a) => self.jump_unless(a),
            _ => vec![self.emit(Ins::If(cond(e), 0))],
        }
    }

    /// Runs one packet to its end; the drop reason, if dropped.
    #[inline(always)]
    /// `ENTRY`: the code has an [`Entry`] (see [`Flat::has_entry`]); programs without
    /// one run a copy of the loop that does not look for it.
    pub fn run<D: Bytes, const ENTRY: bool>(
        &self,
        c: &Code,
        s: &mut State,
        p: &mut Pkt<D>,
    ) -> Option<u8> {
        let mut pc = self.start as usize;
        let mut steps = 0u32;
        let entry = if ENTRY {
            self.entry[p.m.link as usize % 4].as_ref()
        } else {
            None
        };
        if let Some(e) = entry {
            // What `SwitchLink`, entering `e.dec`, then its body's `Step` do.
            let n = e.len as usize;
            if n > p.d.len() {
                pc = e.short as usize;
                steps = 1;
            } else {
                p.fit(e.dec as usize, 0, n);
                p.cur = n;
                steps = 2;
                let t = e.step.table as usize;
                let key = (p.field(&e.step.src) & e.step.mask) as u128;
                let look = p.field(&e.step.dst) as u128;
                let act = Act::Output(p.m.in_port);
                let got = s.tables[t].learn_lookup(key, act, look, p.m.now_ns);
                match self.hit(t, got, p) {
                    Ok(to) => pc = to,
                    Err(end) => return end,
                }
            }
        } else if let Some(t) = &self.tail {
            // What `Walk` at `start` does, then the straight code when it found IPv4.
            match t.walk.run(p, &mut steps) {
                None => pc += 1,
                Some(to) if to != t.walk.body as usize => pc = to,
                Some(_) => match t.run(self, c, s, p, &mut steps) {
                    Ok(to) => pc = to,
                    Err(end) => return end,
                },
            }
        }
        self.run_from(c, s, p, pc, steps)
    }

    /// The instruction loop from `pc`, `steps` decoder entries and table applications
    /// already counted.
    #[inline(always)]
    pub fn run_from<D: Bytes>(
        &self,
        c: &Code,
        s: &mut State,
        p: &mut Pkt<D>,
        mut pc: usize,
        mut steps: u32,
    ) -> Option<u8> {
        loop {
            let Some(i) = self.ins.get(pc) else {
                return p.drop;
            };
            pc += 1;
            match i {
                Ins::Walk(w) => {
                    if let Some(to) = w.run(p, &mut steps) {
                        pc = to;
                    }
                }
                Ins::Jump(t) => pc = *t as usize,
                Ins::IfNot(k, t) => {
                    if !test(c, k, p) {
                        pc = *t as usize;
                    }
                }
                Ins::If(k, t) => {
                    if test(c, k, p) {
                        pc = *t as usize;
                    }
                }
                Ins::DropIf(k, r) => {
                    if test(c, k, p) {
                        return Some(*r);
                    }
                }
                Ins::DropUnless(k, r) => {
                    if !test(c, k, p) {
                        return Some(*r);
                    }
                }
                Ins::DropIf2(d) => {
                    if test(c, &d.0, p) {
                        return Some(d.1);
                    }
                    if test(c, &d.2, p) {
                        return Some(d.3);
                    }
                    pc += 1;
                }
                Ins::Switch(v, cases, end) => {
                    let v = value(c, v, p);
                    pc = *end as usize;
                    for k in cases.iter() {
                        if (k.any || k.value == v)
                            && (k.guard == NO_GUARD || p.may_enter(k.guard, c))
                        {
                            pc = k.pc as usize;
                            if k.enter != NO_ENTER {
                                // The arm's `next D`, without dispatching it.
                                if steps == MAX_STEPS {
                                    return p.drop;
                                }
                                steps += 1;
                                pc = self.enter(k.enter as usize, p);
                            }
                            break;
                        }
                    }
                }
                Ins::SwitchLink(cases, end) => match cases[p.m.link as usize % 4] {
                    None => pc = *end as usize,
                    Some(k) if k.enter == NO_ENTER => pc = k.pc as usize,
                    Some(k) => {
                        if steps == MAX_STEPS {
                            return p.drop;
                        }
                        steps += 1;
                        pc = self.enter(k.enter as usize, p);
                    }
                },
                Ins::Enter(d) => {
                    if steps == MAX_STEPS {
                        return p.drop;
                    }
                    steps += 1;
                    pc = self.enter(*d as usize, p);
                }
                Ins::EnterFixed(e) => {
                    if steps == MAX_STEPS {
                        return p.drop;
                    }
                    steps += 1;
                    let at = p.cur;
                    let n = e.len as usize;
                    if at + n <= p.d.len() {
                        p.fit(e.dec as usize, at, n);
                        p.cur = at + n;
                        pc = e.body as usize;
                    } else {
                        pc = e.short as usize;
                    }
                }
                Ins::EnterTest(x) => {
                    let (e, k, r, when) = &**x;
                    if steps == MAX_STEPS {
                        return p.drop;
                    }
                    steps += 1;
                    let at = p.cur;
                    let n = e.len as usize;
                    if at + n <= p.d.len() {
                        p.fit(e.dec as usize, at, n);
                        p.cur = at + n;
                        if test(c, k, p) == *when {
                            return Some(*r);
                        }
                        pc = e.body as usize + 1;
                    } else {
                        pc = e.short as usize;
                    }
                }
                Ins::Apply(t) => {
                    if steps == MAX_STEPS {
                        return p.drop;
                    }
                    steps += 1;
                    match self.apply(*t as usize, c, s, p) {
                        Ok(to) => pc = to,
                        Err(end) => return end,
                    }
                }
                Ins::Learn(l) => learn(l, c, s, p),
                Ins::LearnApply(l, t) => {
                    if steps == MAX_STEPS {
                        learn(l, c, s, p);
                        return p.drop;
                    }
                    steps += 1;
                    let t = *t as usize;
                    let got = if l.table as usize == t {
                        // The switches' step: learn the source, look the destination up.
                        let (key, act) = learned(l, c, p);
                        let look = self.key(t, c, p);
                        s.tables[t].learn_lookup(key, act, look, p.m.now_ns)
                    } else {
                        learn(l, c, s, p);
                        let look = self.key(t, c, p);
                        s.tables[t].lookup(look, p.m.now_ns)
                    };
                    match self.hit(t, got, p) {
                        Ok(to) => pc = to,
                        Err(end) => return end,
                    }
                }
                Ins::Step(st) => {
                    let t = st.table as usize;
                    let key = (p.field(&st.src) & st.mask) as u128;
                    let act = Act::Output(p.m.in_port);
                    if steps == MAX_STEPS {
                        s.tables[t].learn(key, act, p.m.now_ns);
                        return p.drop;
                    }
                    steps += 1;
                    let look = p.field(&st.dst) as u128;
                    let got = s.tables[t].learn_lookup(key, act, look, p.m.now_ns);
                    match self.hit(t, got, p) {
                        Ok(to) => pc = to,
                        Err(end) => return end,
                    }
                }
                Ins::Op(op) => c.op(op, s, p),
                Ins::Count(n) => s.counters[*n as usize].1 += 1,
                Ins::Output(v) => {
                    p.m.egress = value(c, v, p) as u16;
                    return p.drop;
                }
                Ins::Flood => {
                    p.m.egress = FLOOD;
                    return p.drop;
                }
                Ins::Drop(r) => return Some(*r),
                Ins::Done => return p.drop,
            }
        }
    }

    /// Applies table `t`: where to go on (a `goto` entry, the miss block), or the end of
    /// the packet (its drop reason, if dropped).
    #[inline(always)]
    fn apply<D: Bytes>(
        &self,
        t: usize,
        c: &Code,
        s: &mut State,
        p: &mut Pkt<D>,
    ) -> Result<usize, Option<u8>> {
        let key = self.key(t, c, p);
        let got = s.tables[t].lookup(key, p.m.now_ns);
        self.hit(t, got, p)
    }

    /// Table `t`'s key for this packet.
    #[inline(always)]
    fn key<D: Bytes>(&self, t: usize, c: &Code, p: &Pkt<D>) -> u128 {
        match &self.key1[t] {
            Some(f) => p.field(f) as u128,
            None => c.table_key(t, p),
        }
    }

    /// What a lookup of table `t` found: where to go on, or the end of the packet.
    #[inline(always)]
    fn hit<D: Bytes>(
        &self,
        t: usize,
        got: Option<Act>,
        p: &mut Pkt<D>,
    ) -> Result<usize, Option<u8>> {
        match got {
            Some(Act::Output(port)) => {
                p.m.egress = port;
                Err(p.drop)
            }
            Some(Act::Flood) => {
                p.m.egress = FLOOD;
                Err(p.drop)
            }
            Some(Act::Drop(r)) => Err(Some(r)),
            Some(Act::Goto(t)) => Ok(self.apply[t as usize] as usize),
            Some(Act::Pass) => Err(p.drop),
            None => Ok(self.miss[t] as usize),
        }
    }

    /// Enters decoder `di` at the current offset; where its code starts.
    #[inline(always)]
    fn enter<D: Bytes>(&self, di: usize, p: &mut Pkt<D>) -> usize {
        let dec = &self.decs[di];
        let at = p.cur;
        let len = p.d.len();
        if dec.plain {
            let n = dec.fixed_len as usize;
            if at + n > len {
                return dec.short as usize;
            }
            p.fit(di, at, n);
            p.cur = at + n;
            return dec.body as usize;
        }
        let fits = at + dec.fixed_len as usize <= len;
        let size = match (fits, dec.size) {
            (false, _) => None,
            (true, None) => Some(dec.fixed_len as usize),
            (true, Some((r, mul))) => {
                let n = r.get(&p.d, at) as usize * mul as usize;
                (n >= dec.fixed_len as usize && at + n <= len).then_some(n)
            }
        };
        if dec.track {
            p.visit(di);
        }
        match size {
            None => dec.short as usize,
            Some(n) => {
                p.fit(di, at, n);
                if !dec.peek {
                    p.cur = at + n;
                }
                dec.body as usize
            }
        }
    }
}

#[inline(always)]
fn learn<D: Bytes>(l: &Learn, c: &Code, s: &mut State, p: &Pkt<D>) {
    let (key, act) = learned(l, c, p);
    s.tables[l.table as usize].learn(key, act, p.m.now_ns);
}

/// The key and action a learn inserts.
#[inline(always)]
fn learned<D: Bytes>(l: &Learn, c: &Code, p: &Pkt<D>) -> (u128, Act) {
    let key = match &l.key {
        Leaf::Field(f) => p.field(f),
        k => c.leaf(k, p),
    } & l.mask;
    let act = match &l.out {
        Some(Leaf::InPort) => Act::Output(p.m.in_port),
        Some(o) => Act::Output(c.leaf(o, p) as u16),
        None => l.act,
    };
    (key as u128, act)
}

fn val(e: &Ex) -> Val {
    match (e, e.leaf()) {
        (_, Some(Leaf::Field(f))) => Val::Field(f),
        (_, Some(Leaf::Link)) => Val::Link,
        (_, Some(l)) => Val::Leaf(l),
        (Ex::Flat(op, a, b), _) => Val::Flat(*op, *a, *b),
        _ => Val::Ex(Box::new(e.clone())),
    }
}

/// A learn of one leaf key whose action is fixed or outputs to a leaf: (key, mask of
/// the key's width, output, fixed action).
fn learn1(keys: &[(Ex, u32)], act: &ActTmpl) -> Option<(Leaf, u64, Option<Leaf>, Act)> {
    let [(k, bits)] = keys else {
        return None;
    };
    let mask = if *bits >= 64 {
        u64::MAX
    } else {
        (1 << bits) - 1
    };
    let (out, act) = match act {
        ActTmpl::Output(e) => (Some(e.leaf()?), Act::Pass),
        ActTmpl::Fixed(a) => (None, *a),
    };
    Some((k.leaf()?, mask, out, act))
}

/// `field in SET || field in SET` over one set, as one test.
fn either_in(e: &Ex) -> Option<Cond> {
    match e {
        Ex::Bin(BinOp::Or, a, b) => match (&**a, &**b) {
            (Ex::InLeaf(Leaf::Field(f), s), Ex::InLeaf(Leaf::Field(g), t)) if s == t => {
                Some(Cond::EitherIn(*f, *g, *s))
            }
            _ => None,
        },
        _ => None,
    }
}

/// `f != a && f != b` or `f == a || f == b` over one field, as one test.
fn one_of_two(e: &Ex) -> Option<Cond> {
    let Ex::Bin(op @ (BinOp::And | BinOp::Or), a, b) = e else {
        return None;
    };
    let want = if *op == BinOp::And {
        BinOp::Ne
    } else {
        BinOp::Eq
    };
    match (&**a, &**b) {
        (
            Ex::Flat(o1, Leaf::Field(f), Leaf::Const(x)),
            Ex::Flat(o2, Leaf::Field(g), Leaf::Const(y)),
        ) if *o1 == want && *o2 == want && f == g => Some(if want == BinOp::Ne {
            Cond::FieldNe2(*f, *x, *y)
        } else {
            Cond::FieldEq2(*f, *x, *y)
        }),
        _ => None,
    }
}

/// A test that is not itself `&&`, `||` or `!` (those lower to branches), or one of
/// them that is a single test.
fn simple(e: &Ex) -> bool {
    !matches!(e, Ex::Bin(BinOp::And | BinOp::Or, _, _) | Ex::Not(_)) || one_of_two(e).is_some()
}

fn cond(e: &Ex) -> Cond {
    if let Some(c) = one_of_two(e) {
        return c;
    }
    match e {
        Ex::Flat(BinOp::Eq, Leaf::Field(f), Leaf::Const(k)) => Cond::FieldEq(*f, *k),
        Ex::Flat(BinOp::Ne, Leaf::Field(f), Leaf::Const(k)) => Cond::FieldNe(*f, *k),
        Ex::Flat(op, Leaf::Field(f), Leaf::Const(k)) => Cond::FieldConst(*op, *f, *k),
        Ex::Flat(op, a, b) => Cond::Flat(*op, *a, *b),
        Ex::Flat2(o1, o2, a, b, c) => Cond::Flat2(*o1, *o2, *a, *b, *c),
        Ex::InLeaf(Leaf::Field(f), s) => Cond::FieldIn(*f, *s),
        Ex::InLeaf(l, s) => Cond::In(*l, *s),
        e => Cond::Ex(Box::new(e.clone())),
    }
}

#[inline(always)]
fn test<D: Bytes>(c: &Code, k: &Cond, p: &Pkt<D>) -> bool {
    match k {
        Cond::FieldEq(f, v) => p.field(f) == *v,
        Cond::FieldNe(f, v) => p.field(f) != *v,
        Cond::FieldNe2(f, a, b) => {
            let v = p.field(f);
            v != *a && v != *b
        }
        Cond::FieldEq2(f, a, b) => {
            let v = p.field(f);
            v == *a || v == *b
        }
        Cond::FieldConst(op, f, v) => binop(*op, p.field(f), *v) != 0,
        Cond::Flat(op, a, b) => binop(*op, c.leaf(a, p), c.leaf(b, p)) != 0,
        Cond::Flat2(o1, o2, a, b, x) => {
            binop(*o2, binop(*o1, c.leaf(a, p), c.leaf(b, p)), c.leaf(x, p)) != 0
        }
        Cond::FieldIn(f, s) => c.member(p.field(f), *s) != 0,
        // Both looked up, no branch between: which port matches is a coin toss on mixed traffic.
        Cond::EitherIn(f, g, s) => (c.member(p.field(f), *s) | c.member(p.field(g), *s)) != 0,
        Cond::In(l, s) => c.member(c.leaf(l, p), *s) != 0,
        Cond::FieldIn16(f, s) => s.has(p.field(f)),
        Cond::EitherIn16(f, g, s) => s.has(p.field(f)) | s.has(p.field(g)),
        Cond::Ex(e) => c.eval(e, p) != 0,
    }
}

#[inline(always)]
fn value<D: Bytes>(c: &Code, v: &Val, p: &Pkt<D>) -> u64 {
    match v {
        Val::Field(f) => p.field(f),
        Val::Link => link_code(p.m.link),
        Val::Leaf(l) => c.leaf(l, p),
        Val::Flat(op, a, b) => binop(*op, c.leaf(a, p), c.leaf(b, p)),
        Val::Ex(e) => c.eval(e, p),
    }
}
