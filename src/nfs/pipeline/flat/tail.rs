//! The code after the header walk's IPv4 entry, run as straight code: the drop tests the
//! IPv4 decoder's body begins with, a fixed header entered (and the test its body begins
//! with), then a learning step. Each test has its own place in the machine code, so the
//! branch that dispatches on its kind always goes the same way for one program and is
//! learned; the instruction loop's one shared dispatch, whose target depends on the
//! instruction before, is not entered at all by the common packet (the firewall's was
//! mispredicted about 3.5 times a packet by cachegrind's model).

use super::{test, Cond, Fixed, Flat, Ins, Step};
use crate::nfs::pipeline::plan::{Bytes, Code, Pkt, State};
use crate::nfs::pipeline::table::Act;
use crate::nfs::pipeline::walk::Walk;

/// Drop tests before the header, and after it, at most (more: the loop runs the rest).
pub(super) const BEFORE: usize = 4;
pub(super) const AFTER: usize = 2;

/// A drop test: the packet is dropped with `reason` when the test's outcome is `when`.
#[derive(Clone, Debug)]
pub(super) struct Guard {
    pub(super) cond: Cond,
    pub(super) reason: u8,
    pub(super) when: bool,
}

/// The straight code from the IPv4 decoder's body (see the module's comment).
#[derive(Clone, Debug)]
pub struct Tail {
    /// The walk itself (the code's first instruction), run before the straight code.
    pub walk: Walk,
    pub(super) before: [Option<Guard>; BEFORE],
    pub(super) enter: Option<Fixed>,
    pub(super) after: [Option<Guard>; AFTER],
    pub(super) step: Option<Step>,
    /// Where the instruction loop goes on when the straight code ends without a step.
    resume: u32,
}

impl Tail {
    /// The straight code from the walk's IPv4 entry, when it runs at least one
    /// instruction.
    pub fn lower(f: &Flat, walk: &Walk) -> Option<Tail> {
        let body = walk.body;
        let mut t = Tail {
            walk: walk.clone(),
            before: Default::default(),
            enter: None,
            after: Default::default(),
            step: None,
            resume: body,
        };
        let mut pc = body as usize;
        let mut taken = 0;
        // Jumps followed at most this often (a loop of jumps is not straight code).
        let mut jumps = 8;
        loop {
            let slots: &mut [Option<Guard>] = if t.enter.is_some() {
                &mut t.after
            } else {
                &mut t.before
            };
            let free = slots.iter().filter(|g| g.is_none()).count();
            let guard = |cond: &Cond, reason: u8, when: bool| {
                Some(Guard {
                    cond: cond.clone(),
                    reason,
                    when,
                })
            };
            match f.ins.get(pc) {
                Some(Ins::Jump(to)) if jumps > 0 => {
                    jumps -= 1;
                    pc = *to as usize;
                    continue;
                }
                Some(Ins::DropIf(k, r)) if free >= 1 => {
                    put(slots, guard(k, *r, true));
                    pc += 1;
                }
                Some(Ins::DropUnless(k, r)) if free >= 1 => {
                    put(slots, guard(k, *r, false));
                    pc += 1;
                }
                Some(Ins::DropIf2(d)) if free >= 2 => {
                    put(slots, guard(&d.0, d.1, true));
                    put(slots, guard(&d.2, d.3, true));
                    pc += 2;
                }
                Some(Ins::EnterFixed(e)) if t.enter.is_none() => {
                    t.enter = Some(**e);
                    pc = e.body as usize;
                }
                Some(Ins::EnterTest(x)) if t.enter.is_none() => {
                    let (e, k, r, when) = &**x;
                    t.enter = Some(*e);
                    put(&mut t.after, guard(k, *r, *when));
                    pc = e.body as usize + 1;
                }
                Some(Ins::Step(st)) => {
                    t.step = Some(**st);
                    taken += 1;
                    break;
                }
                _ => break,
            }
            taken += 1;
        }
        t.resume = pc as u32;
        (taken > 0).then_some(t)
    }

    /// Runs the straight code: where the loop goes on, or the end of the packet.
    #[inline(always)]
    pub fn run<D: Bytes>(
        &self,
        f: &Flat,
        c: &Code,
        s: &mut State,
        p: &mut Pkt<D>,
        steps: &mut u32,
    ) -> Result<usize, Option<u8>> {
        // Unrolled, not a loop over the slots: one dispatch site per test.
        drop_if(c, &self.before[0], p)?;
        drop_if(c, &self.before[1], p)?;
        drop_if(c, &self.before[2], p)?;
        drop_if(c, &self.before[3], p)?;
        if let Some(e) = &self.enter {
            // The walk counted at most 2 + 8 steps: far from `MAX_STEPS`.
            *steps += 1;
            let at = p.cur;
            let n = e.len as usize;
            if at + n > p.d.len() {
                return Ok(e.short as usize);
            }
            p.fit(e.dec as usize, at, n);
            p.cur = at + n;
            drop_if(c, &self.after[0], p)?;
            drop_if(c, &self.after[1], p)?;
        }
        let Some(st) = &self.step else {
            return Ok(self.resume as usize);
        };
        *steps += 1;
        let t = st.table as usize;
        let key = (p.field(&st.src) & st.mask) as u128;
        let look = p.field(&st.dst) as u128;
        let got = s.tables[t].learn_lookup(key, Act::Output(p.m.in_port), look, p.m.now_ns);
        f.hit(t, got, p)
    }
}

fn put(slots: &mut [Option<Guard>], g: Option<Guard>) {
    if let Some(s) = slots.iter_mut().find(|s| s.is_none()) {
        *s = g;
    }
}

/// `Err(reason)` when the guard drops the packet.
#[inline(always)]
fn drop_if<D: Bytes>(c: &Code, g: &Option<Guard>, p: &Pkt<D>) -> Result<(), Option<u8>> {
    match g {
        Some(g) if test(c, &g.cond, p) == g.when => Err(Some(g.reason)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use crate::nfs::pipeline::nf::compile;

    /// The example programs' IPv4 packets never reach the instruction loop: the
    /// firewall's tests (protocol and fragment; the port rule on the ports header) and
    /// both learning steps are all straight code.
    #[test]
    fn the_examples_run_straight_after_the_walk() {
        for (app, before, after) in [("firewall", 2, 1), ("ipv4_switch", 0, 0)] {
            let path = format!("{}/examples/pipeline/{app}.stv", env!("CARGO_MANIFEST_DIR"));
            let src = std::fs::read_to_string(path).expect("the example");
            let c = compile(app, &src, &Default::default()).expect("compiles");
            let t = c.plan.flat().tail.as_deref().expect("straight code");
            let used = |g: &[Option<super::Guard>]| g.iter().flatten().count();
            assert_eq!(used(&t.before), before, "{app}");
            assert_eq!(used(&t.after), after, "{app}");
            assert_eq!(t.enter.is_some(), after > 0, "{app}");
            assert!(t.step.is_some(), "{app}");
        }
    }
}
