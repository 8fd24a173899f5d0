//! Runs of consecutive `ip_filter`s are fused before a walk starts (issue 20; the
//! filters' side is `nfs/ip_filter_fused.rs`): the first classifies each packet once for
//! the whole run. A run is a line: each filter's only output goes to the next, which has
//! no other input. Only plain runs are fused (one stage, no parallel groups, no
//! FastPath), where every packet that reaches a filter of the run came through its first.

use super::chain::{Chain, NodeKind};
use crate::nfs::IpFilter;

fn is_filter(chain: &Chain, i: usize) -> bool {
    matches!(&chain.nodes[i].kind, NodeKind::Nf { kind, .. } if kind == "ip_filter")
}

/// The runs of two or more filters, each in walk order.
fn runs(chain: &Chain) -> Vec<Vec<usize>> {
    let mut indeg = vec![0usize; chain.nodes.len()];
    for node in &chain.nodes {
        for &t in &node.next {
            indeg[t] += 1;
        }
    }
    // The filter feeding node i, when i is a filter whose only input is that one's only
    // output.
    let mut fed_by = vec![None; chain.nodes.len()];
    for (i, node) in chain.nodes.iter().enumerate() {
        if let [t] = node.next[..] {
            if is_filter(chain, i) && is_filter(chain, t) && indeg[t] == 1 && t != i {
                fed_by[t] = Some(i);
            }
        }
    }
    let mut out = Vec::new();
    for &start in &chain.order {
        if !is_filter(chain, start) || fed_by[start].is_some() {
            continue;
        }
        let mut run = vec![start];
        let mut at = start;
        while let [t] = chain.nodes[at].next[..] {
            if fed_by[t] != Some(at) {
                break;
            }
            run.push(t);
            at = t;
        }
        if run.len() > 1 {
            out.push(run);
        }
    }
    out
}

/// Fuses every run of the chain; returns the filters fused behind a run's first.
pub(super) fn fuse_filters(chain: &mut Chain) -> usize {
    if chain.stages() > 1 || !chain.groups.is_empty() || chain.fastpath.is_some() {
        return 0;
    }
    let runs = runs(chain);
    if runs.is_empty() {
        return 0;
    }
    let mut slots: Vec<Option<&mut IpFilter>> = chain
        .nodes
        .iter_mut()
        .map(|n| match &mut n.kind {
            NodeKind::Nf { nf, .. } => nf.as_any_mut()?.downcast_mut::<IpFilter>(),
            _ => None,
        })
        .collect();
    let mut fused = 0;
    for run in runs {
        let mut filters: Vec<&mut IpFilter> = run.iter().filter_map(|&i| slots[i].take()).collect();
        let mut from = 0;
        while filters.len() - from > 1 {
            let n = IpFilter::fuse(&mut filters[from..]).max(1);
            fused += n - 1;
            from += n;
        }
    }
    fused
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::ChainConfig;

    fn chain(text: &str) -> Chain {
        let cfg = ChainConfig::parse(text, "t.toml").unwrap();
        Chain::from_config(&cfg).unwrap()
    }

    fn filter(name: &str) -> String {
        format!("[[nf]]\nname = \"{name}\"\nkind = \"ip_filter\"\nrules = [\"allow tcp\"]\n")
    }

    #[test]
    fn lines_of_filters_fuse_and_branches_or_other_nfs_cut_them() {
        let line = format!("{}{}{}", filter("a"), filter("b"), filter("c"));
        assert_eq!(fuse_filters(&mut chain(&line)), 2);
        let cut = format!(
            "{}[[nf]]\nname = \"w\"\nkind = \"wire\"\n{}{}",
            filter("a"),
            filter("b"),
            filter("c")
        );
        assert_eq!(fuse_filters(&mut chain(&cut)), 1);
        let mut staged = chain(&format!("stages = [[\"a\"], [\"b\", \"c\"]]\n{line}"));
        assert_eq!(fuse_filters(&mut staged), 0);
        let fast = format!("fastpath = true\n{line}");
        assert_eq!(fuse_filters(&mut chain(&fast)), 0);
    }
}
