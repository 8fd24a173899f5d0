//! What a chain may ask for: the maxima of the chain file's own sizes, the memory a chain
//! will allocate (its NFs' tables at their bounds plus the runtime's buffers), and the
//! ceiling `--max-memory` puts on it (half the machine's RAM by default), checked by
//! `catena check` and `catena run` before anything big is allocated.
//!
//! Each NF parameter that sizes something has its own maximum, in its `catena nfs` line
//! and in docs/limits.md.

use super::chain::{Chain, NodeKind};
use crate::optimise::fastpath::{Recorder, Table};
use crate::packet::{Packet, Pool, MAX_BATCH};

/// Most NFs in one chain (FastPath names nodes in 14 bits; far beyond any real chain).
pub const MAX_NFS: usize = 4096;
/// Most sinks in one chain.
pub const MAX_SINKS: usize = 256;
/// Most FastPath entries (`fastpath_entries`): about 1.7 GB of table.
pub const MAX_FASTPATH_ENTRIES: u32 = 1 << 22;
/// `--max-memory` when the machine's RAM cannot be read.
const FALLBACK_MAX_MEMORY: u64 = 4 << 30;

/// Packet buffers a run holds: one chunk in flight (packets move between nodes, never
/// multiply), the copies FastPath keeps while recording, and room to spare.
pub fn pool_buffers(fastpath: bool) -> usize {
    MAX_BATCH * 4 + if fastpath { Recorder::BUFFERS } else { 0 }
}

/// The machine's RAM in bytes.
pub fn physical_memory() -> Option<u64> {
    // SAFETY: sysconf has no preconditions.
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    (pages > 0 && size > 0).then(|| pages as u64 * size as u64)
}

/// The default ceiling: half the machine's RAM.
pub fn default_max_memory() -> u64 {
    physical_memory().map_or(FALLBACK_MAX_MEMORY, |m| m / 2)
}

/// `4G`, `512M`, `64K`, `1.5G` or plain bytes (binary units).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m: u64 = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => return Err(format!("`{s}`: use a size like 512M, 4G or bytes")),
            };
            (&t[..i], m)
        }
        _ => (t, 1),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("`{s}`: use a size like 512M, 4G or bytes"))?;
    if !(v.is_finite() && v > 0.0) {
        return Err(format!("`{s}`: the size must be positive"));
    }
    Ok((v * mult as f64).min(u64::MAX as f64) as u64)
}

/// Bytes as `12.3 MiB`.
pub fn human(b: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", units[u])
    }
}

/// What a chain will allocate, by part.
#[derive(Clone, Debug)]
pub struct Memory {
    /// Each NF's tables at their bounds, by name.
    pub nfs: Vec<(String, u64)>,
    /// Packet buffers and the batches that carry them.
    pub buffers: u64,
    /// The FastPath table, when FastPath is on.
    pub fastpath: u64,
    /// Live ports' rings and UMEM.
    pub ports: u64,
}

impl Memory {
    pub fn total(&self) -> u64 {
        self.nfs
            .iter()
            .map(|n| n.1)
            .sum::<u64>()
            .saturating_add(self.buffers)
            .saturating_add(self.fastpath)
            .saturating_add(self.ports)
    }

    /// One line for `catena check`: the total, then the parts (the largest NFs first).
    pub fn describe(&self, limit: u64) -> String {
        let mut nfs = self.nfs.clone();
        nfs.sort_by_key(|n| std::cmp::Reverse(n.1));
        let mut parts: Vec<String> = nfs
            .iter()
            .take(8)
            .map(|(n, b)| format!("{n} {}", human(*b)))
            .collect();
        if nfs.len() > 8 {
            parts.push(format!("{} more NFs", nfs.len() - 8));
        }
        parts.push(format!("packet buffers {}", human(self.buffers)));
        if self.fastpath > 0 {
            parts.push(format!("FastPath table {}", human(self.fastpath)));
        }
        if self.ports > 0 {
            parts.push(format!("port rings {}", human(self.ports)));
        }
        format!(
            "memory: {} at most ({}); limit {} (--max-memory)",
            human(self.total()),
            parts.join(", "),
            human(limit)
        )
    }

    /// Refuses a total above `limit`, naming the largest part.
    pub fn check(&self, limit: u64) -> Result<(), String> {
        let total = self.total();
        if total <= limit {
            return Ok(());
        }
        let (what, b) = self
            .nfs
            .iter()
            .map(|(n, b)| (format!("nf `{n}`"), *b))
            .chain([
                ("packet buffers".to_string(), self.buffers),
                ("the FastPath table".to_string(), self.fastpath),
                ("the live ports' rings".to_string(), self.ports),
            ])
            .max_by_key(|p| p.1)
            .unwrap_or_default();
        Err(format!(
            "the chain would allocate {}, above the limit of {} (the largest part: {what}, {}): lower its sizes or raise --max-memory",
            human(total),
            human(limit),
            human(b)
        ))
    }
}

impl Chain {
    /// What this chain allocates for packets of at most `max_packet` bytes.
    pub fn memory(&self, max_packet: usize) -> Memory {
        let nfs = self
            .nodes
            .iter()
            .filter_map(|n| match &n.kind {
                NodeKind::Nf { nf, .. } => Some((n.name.clone(), nf.memory() as u64)),
                _ => None,
            })
            .collect();
        let fast = self.fastpath.is_some();
        // One batch per node, the spare, FastPath's and the profile check's, each with
        // room for a batch from every predecessor of the busiest node.
        let mut indeg = vec![0usize; self.nodes.len()];
        for t in self.nodes.iter().flat_map(|n| &n.next) {
            indeg[*t] += 1;
        }
        let cap = MAX_BATCH * indeg.into_iter().max().unwrap_or(1).max(1);
        let stages = self.stages();
        let batches = stages * (self.nodes.len() + 3) * cap * std::mem::size_of::<Packet>();
        // Stages: stage 1's pool covers what the rings hold; the rings hold references.
        let (count, rings) = if stages > 1 {
            let n = super::stage::pool_buffers(pool_buffers(false), stages, self.ring)
                + super::stage::supply_buffers(self); // PA-Flow
            let slots = (stages - 1) * ((self.ring + 2) * 24 + 2 * 2 * n * 16);
            (n, slots)
        } else {
            (pool_buffers(fast), 0)
        };
        // Parallel groups: a batch of shadow buffers each, in every stage's walk.
        let shadows = stages * self.groups.len() * Pool::bytes(cap, max_packet);
        // PA-Flow: the frame each aggregating port packs (between stages, frames and the
        // packets' buffers on the supply rings are stage 1's pool buffers, counted above).
        let paflow = self
            .port_specs
            .iter()
            .filter_map(|p| p.aggregate)
            .sum::<usize>();
        Memory {
            nfs,
            buffers: (Pool::bytes(count, max_packet) + batches + rings + shadows + paflow) as u64,
            fastpath: self.fastpath.map_or(0, |f| Table::bytes(f.entries) as u64),
            ports: self.port_specs.iter().map(|p| p.memory() as u64).sum(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_print() {
        assert_eq!(parse_size("4G"), Ok(4 << 30));
        assert_eq!(parse_size("512m"), Ok(512 << 20));
        assert_eq!(parse_size("1.5K"), Ok(1536));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert!(parse_size("0").is_err());
        assert!(parse_size("4X").is_err());
        assert!(parse_size("lots").is_err());
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(10), "10 B");
        assert!(default_max_memory() >= 1 << 20);
    }
}
