//! Parallel NFs (the NFP rules): which consecutive NFs may run on the same batch on two
//! threads, and why the others may not. The fork and join themselves are `join.rs`.
//!
//! Two consecutive NFs `a → b` form a group when
//! - neither adds or removes headers, and no field written by one is read or written by
//!   the other (so the order between them does not matter);
//! - one of them writes nothing at all (bytes or metadata): that one runs on the walk's
//!   thread over *shadow* buffers (see `join.rs` for why the bytes are copied), the other
//!   on the packets themselves on a second thread, so nothing has to be merged back but
//!   the verdicts;
//! - `a` leads only to `b` and `b` is fed only by `a` (one edge between them);
//! - when `a` may drop, `b` keeps no state and reports no counters of its own: in
//!   parallel `b` also sees the packets `a` drops, which must not change what it says;
//! - both run in the same stage.
//!
//! Groups are pairs (this machine has two cores), taken greedily in walk order.

use super::chain::{Chain, NodeKind};
use crate::nfs::{Nf, Profile, StateScope};
use crate::packet::Fields;

/// A pair of NFs that run in parallel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Group {
    /// The first NF of the pair in walk order.
    pub a: usize,
    /// The second.
    pub b: usize,
    /// Which of the two runs over shadow buffers (on the walk's thread; the other runs
    /// in place on a second thread): the one that writes nothing (`b` when both write
    /// nothing).
    pub shadow_is_a: bool,
}

/// Why NFs `a` and `b` cannot run side by side on the same packets by their profiles
/// alone (the NFP field rules), or None when they do not conflict.
pub fn conflict(an: &str, a: &Profile, bn: &str, b: &Profile) -> Option<String> {
    if a.changes_length || b.changes_length {
        let n = if a.changes_length { an } else { bn };
        return Some(format!("cannot: `{n}` adds or removes headers"));
    }
    if a.writes.intersects(b.reads | b.writes) {
        return Some(format!(
            "cannot: `{an}` writes {} which `{bn}` reads or writes",
            Fields(a.writes.0 & (b.reads | b.writes).0)
        ));
    }
    if b.writes.intersects(a.reads) {
        return Some(format!(
            "cannot: `{bn}` writes {} which `{an}` reads",
            Fields(b.writes.0 & a.reads.0)
        ));
    }
    None
}

/// Whether consecutive NFs `a → b` of `chain` may run in parallel, and how; else the
/// reason, starting with "cannot:".
pub fn pair(chain: &Chain, a: usize, b: usize) -> Result<Group, String> {
    let (na, nb) = (&chain.nodes[a], &chain.nodes[b]);
    let (NodeKind::Nf { nf: x, .. }, NodeKind::Nf { nf: y, .. }) = (&na.kind, &nb.kind) else {
        return Err("cannot: not two NFs".into());
    };
    let (pa, pb) = (x.profile(), y.profile());
    if let Some(why) = conflict(&na.name, pa, &nb.name, pb) {
        return Err(why);
    }
    if na.next.iter().any(|&t| t != b) {
        return Err(format!(
            "cannot: `{}` leads to other nodes than `{}`",
            na.name, nb.name
        ));
    }
    let feeds = chain
        .nodes
        .iter()
        .enumerate()
        .filter(|(i, n)| *i != a && n.next.contains(&b))
        .count();
    if feeds > 0 {
        return Err(format!("cannot: `{}` is fed by other nodes too", nb.name));
    }
    if !pa.writes.is_empty() && !pb.writes.is_empty() {
        return Err(format!(
            "cannot: both write (`{}`: {}; `{}`: {}), and one branch must write nothing",
            na.name, pa.writes, nb.name, pb.writes
        ));
    }
    if pa.may_drop && !silent(&**y) {
        return Err(format!(
            "cannot: `{}` may drop and `{}` keeps state or counters (it would also see the dropped packets)",
            na.name, nb.name
        ));
    }
    if chain.stage_of.get(a) != chain.stage_of.get(b) {
        return Err("cannot: they run in different stages".into());
    }
    Ok(Group {
        a,
        b,
        shadow_is_a: pa.writes.is_empty() && !pb.writes.is_empty(),
    })
}

/// An NF whose state and own counters do not depend on the packets it sees.
fn silent(nf: &dyn Nf) -> bool {
    nf.state_scope() == StateScope::None && !nf.profile().per_flow_state && nf.stats().is_empty()
}

/// Consecutive NF pairs in walk order (`a` directly before `b`).
pub fn pairs(chain: &Chain) -> Vec<(usize, usize)> {
    let nfs: Vec<usize> = chain
        .order
        .iter()
        .copied()
        .filter(|&i| matches!(chain.nodes[i].kind, NodeKind::Nf { .. }))
        .collect();
    nfs.windows(2).map(|w| (w[0], w[1])).collect()
}

/// The groups, greedily in walk order (an NF is in at most one).
pub fn plan(chain: &Chain) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    for (a, b) in pairs(chain) {
        if groups.last().is_some_and(|g| g.b == a) {
            continue;
        }
        if let Ok(g) = pair(chain, a, b) {
            groups.push(g);
        }
    }
    groups
}

/// `catena check`'s lines about parallel NFs.
pub fn describe(chain: &Chain) -> String {
    let mut s = String::new();
    let groups = if chain.parallel {
        chain.groups.clone()
    } else {
        plan(chain)
    };
    let name = |i: usize| chain.nodes[i].name.as_str();
    let list: Vec<String> = groups
        .iter()
        .map(|g| {
            let (shadow, real) = if g.shadow_is_a {
                (g.a, g.b)
            } else {
                (g.b, g.a)
            };
            format!(
                "{} ∥ {} (`{}` over shadow copies, `{}` in place on a second thread)",
                name(g.a),
                name(g.b),
                name(shadow),
                name(real)
            )
        })
        .collect();
    if chain.parallel {
        s.push_str(&format!(
            "  parallel groups (`parallel = true`): {}\n",
            if list.is_empty() {
                "none".to_string()
            } else {
                list.join("; ")
            }
        ));
    } else {
        s.push_str(&format!(
            "  parallel groups: off (`parallel = true` would run {})\n",
            if list.is_empty() {
                "none".to_string()
            } else {
                list.join("; ")
            }
        ));
    }
    for (a, b) in pairs(chain) {
        if groups.iter().any(|g| g.a == a && g.b == b) {
            continue;
        }
        let why = match pair(chain, a, b) {
            Err(why) => why,
            Ok(_) => "could, but an NF of the pair is already in a group".into(),
        };
        s.push_str(&format!("    {} ∥ {}: {why}\n", name(a), name(b)));
    }
    s
}
