//! A chunk decided before it is switched, the way the native firewall runs (session 22):
//! each packet runs its pure prefix (the header walk, tests, drops: nothing that reads or
//! changes a table or a counter) to where it drops, ends, or reaches its first stateful
//! instruction. A set-membership rule whose failure drops and whose success goes straight
//! to that instruction (a firewall's port rule) is decided as data, with no branch on its
//! outcome: on mixed traffic it is a coin toss a predictor cannot learn. Then only the
//! packets that reached a stateful instruction are prefetched and run on from it, in
//! their order, each with its own header offsets kept from the first phase.
//!
//! The prefixes read nothing that the suffixes change (packet bytes are not written:
//! programs that `set` do not split), so running every prefix first gives each packet
//! the verdict, and each table the order of updates, of running packets one by one.

use super::super::plan::{Bytes, Code, Pkt, Scratch, State, UNSET};
use super::{test, value, Cond, Flat, Ins, MAX_STEPS, NO_ENTER, NO_GUARD};
use crate::packet::{Packet, FLOOD, MAX_BATCH};

/// [`Flat::run_pure`]'s result: a drop reason (below 256), [`KEPT`], or [`STOPPED`] with
/// the instruction to resume at.
const KEPT: u32 = 1 << 8;
const STOPPED: u32 = 1 << 31;

/// What a stopped packet's second phase starts from (its header offsets stay in its own
/// [`Scratch`]).
#[derive(Clone, Copy, Default)]
struct Held {
    entered: u32,
    valid: u32,
    cur: u32,
    steps: u32,
    pc: u32,
}

impl Flat {
    /// Whether chunks run in two phases: some set-membership rule decides, as data,
    /// between a drop and the program's first stateful instruction.
    pub(super) fn find_split(&self) -> bool {
        let member = |k: &Cond| matches!(k, Cond::FieldIn(..) | Cond::EitherIn(..) | Cond::In(..));
        self.ins.iter().enumerate().any(|(pc, i)| match i {
            Ins::DropIf(k, _) | Ins::DropUnless(k, _) => member(k) && self.stops(pc + 1),
            Ins::EnterTest(x) => member(&x.1) && self.stops(x.0.body as usize + 1),
            _ => false,
        })
    }

    /// Whether the first phase stops at instruction `pc`: it reads or changes state.
    fn stops(&self, pc: usize) -> bool {
        matches!(
            self.ins.get(pc),
            Some(
                Ins::Apply(_)
                    | Ins::Learn(_)
                    | Ins::LearnApply(..)
                    | Ins::Step(_)
                    | Ins::Op(_)
                    | Ins::Count(_)
            )
        )
    }

    /// A drop, or a stop at `next`, by the test's outcome `drop`, without a branch on it.
    #[inline(always)]
    fn decide(drop: bool, r: u8, next: usize) -> u32 {
        std::hint::select_unpredictable(drop, r as u32, STOPPED | next as u32)
    }

    /// `test`, with `||` over two sets evaluated as `|` (no branch on the first).
    #[inline(always)]
    fn test_flat<D: Bytes>(c: &Code, k: &Cond, p: &Pkt<D>) -> bool {
        match k {
            Cond::EitherIn(f, g, s) => (c.member(p.field(f), *s) | c.member(p.field(g), *s)) != 0,
            k => test(c, k, p),
        }
    }

    /// The first phase for one packet: its pure prefix, from the start. A drop reason,
    /// [`KEPT`] (ended without a drop), or [`STOPPED`] | the instruction to resume at.
    #[inline(always)]
    fn run_pure<D: Bytes>(&self, c: &Code, p: &mut Pkt<D>, steps: &mut u32) -> u32 {
        let mut pc = self.start as usize;
        loop {
            let Some(i) = self.ins.get(pc) else {
                return KEPT;
            };
            pc += 1;
            match i {
                Ins::Walk(w) => {
                    if let Some(to) = w.run(p, steps) {
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
                    if self.stops(pc) {
                        return Self::decide(Self::test_flat(c, k, p), *r, pc);
                    }
                    if test(c, k, p) {
                        return *r as u32;
                    }
                }
                Ins::DropUnless(k, r) => {
                    if self.stops(pc) {
                        return Self::decide(!Self::test_flat(c, k, p), *r, pc);
                    }
                    if !test(c, k, p) {
                        return *r as u32;
                    }
                }
                Ins::DropIf2(d) => {
                    if test(c, &d.0, p) {
                        return d.1 as u32;
                    }
                    if test(c, &d.2, p) {
                        return d.3 as u32;
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
                                if *steps == MAX_STEPS {
                                    return KEPT;
                                }
                                *steps += 1;
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
                        if *steps == MAX_STEPS {
                            return KEPT;
                        }
                        *steps += 1;
                        pc = self.enter(k.enter as usize, p);
                    }
                },
                Ins::Enter(d) => {
                    if *steps == MAX_STEPS {
                        return KEPT;
                    }
                    *steps += 1;
                    pc = self.enter(*d as usize, p);
                }
                Ins::EnterFixed(e) => {
                    if *steps == MAX_STEPS {
                        return KEPT;
                    }
                    *steps += 1;
                    let (at, n) = (p.cur, e.len as usize);
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
                    if *steps == MAX_STEPS {
                        return KEPT;
                    }
                    *steps += 1;
                    let (at, n) = (p.cur, e.len as usize);
                    if at + n <= p.d.len() {
                        p.fit(e.dec as usize, at, n);
                        p.cur = at + n;
                        let next = e.body as usize + 1;
                        if self.stops(next) {
                            return Self::decide(Self::test_flat(c, k, p) == *when, *r, next);
                        }
                        if test(c, k, p) == *when {
                            return *r as u32;
                        }
                        pc = next;
                    } else {
                        pc = e.short as usize;
                    }
                }
                Ins::Output(v) => {
                    p.m.egress = value(c, v, p) as u16;
                    return KEPT;
                }
                Ins::Flood => {
                    p.m.egress = FLOOD;
                    return KEPT;
                }
                Ins::Drop(r) => return *r as u32,
                Ins::Done => return KEPT,
                Ins::Apply(_)
                | Ins::Learn(_)
                | Ins::LearnApply(..)
                | Ins::Step(_)
                | Ins::Op(_)
                | Ins::Count(_) => return STOPPED | (pc - 1) as u32,
            }
        }
    }

    /// A chunk in two phases (see the module's note); packets are read-only here.
    /// `scs`: one scratch per packet of the chunk, offsets `UNSET` on entry and on return.
    #[inline(always)]
    pub(in super::super) fn run_split(
        &self,
        c: &Code,
        s: &mut State,
        scs: &mut [Scratch; MAX_BATCH],
        chunk: &mut [Packet],
        ports: u16,
    ) {
        let mut held = [Held::default(); MAX_BATCH];
        let mut go = [0u8; MAX_BATCH];
        let mut ng = 0;
        let mut end = [(0u8, 0u16); MAX_BATCH];
        let mut ne = 0;
        for ((i, pk), (sc, h)) in chunk
            .iter_mut()
            .enumerate()
            .zip(scs.iter_mut().zip(held.iter_mut()))
        {
            let (m, d) = pk.split_meta();
            let p = &mut Pkt::new(m, d, ports, sc);
            let mut steps = 0;
            let o = self.run_pure(c, p, &mut steps);
            *h = Held {
                entered: p.entered,
                valid: p.valid,
                cur: p.cur as u32,
                steps,
                pc: o & !STOPPED,
            };
            // Both lists written, the right count advanced: no branch on the outcome.
            let stopped = o & STOPPED != 0;
            go[ng] = i as u8;
            ng += usize::from(stopped);
            end[ne] = (i as u8, o as u16);
            ne += usize::from(!stopped);
        }
        let go = &go[..ng];
        self.prefetch_some(s, chunk, go);
        for &i in go {
            let i = usize::from(i);
            let (pk, h) = (&mut chunk[i], &mut held[i]);
            let (m, d) = pk.split_meta();
            let p = &mut Pkt::new(m, d, ports, &mut scs[i]);
            p.entered = h.entered;
            p.valid = h.valid;
            p.cur = h.cur as usize;
            let r = self.resume(c, s, p, h.pc as usize, h.steps);
            h.valid = p.valid;
            if let Some(r) = r {
                pk.drop_with(r);
            }
        }
        for &(i, o) in &end[..ne] {
            if u32::from(o) != KEPT {
                chunk[usize::from(i)].drop_with(o as u8);
            }
        }
        for (sc, h) in scs.iter_mut().zip(&held[..chunk.len()]) {
            let mut set = h.valid;
            while set != 0 {
                sc.off[set.trailing_zeros() as usize % sc.off.len()] = UNSET;
                set &= set - 1;
            }
        }
    }
}
