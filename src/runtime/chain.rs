//! The chain as a graph of nodes: the input, NFs and sinks, checked to be a DAG in which
//! every NF output leads somewhere and every NF is reachable from the input.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::config::{ChainConfig, ConfigError, FastSetting, DEFAULT_PORTS, DEFAULT_SEED};
use super::limits;
use super::ports::{self, PortSpec};
use crate::nfs::{registry, Nf, StateScope};
use crate::optimise::fastpath::{self, FastConfig};

/// Name of the input node in edges.
pub const INPUT: &str = "in";
/// Name of the default sink, bound to `--output`.
pub const DEFAULT_SINK: &str = "out";

pub enum NodeKind {
    Input,
    Nf { kind: String, nf: Box<dyn Nf> },
    Sink { path: Option<PathBuf> },
}

pub struct Node {
    pub name: String,
    pub kind: NodeKind,
    /// Output names (NFs name theirs in the profile; the input has one, sinks none).
    pub outputs: Vec<&'static str>,
    /// Successor node for each output.
    pub next: Vec<usize>,
    pub drop_reasons: Vec<&'static str>,
}

impl Node {
    pub fn kind_name(&self) -> &str {
        match &self.kind {
            NodeKind::Input => "input",
            NodeKind::Nf { kind, .. } => kind,
            NodeKind::Sink { .. } => "sink",
        }
    }
}

pub struct Chain {
    pub name: String,
    pub nodes: Vec<Node>,
    /// NFs and sinks in an order where every node comes after all its predecessors.
    pub order: Vec<usize>,
    pub ports: u16,
    pub seed: u64,
    /// The trace named in the file, if any (resolved against the file's folder).
    pub default_trace: Option<PathBuf>,
    /// Header-action consolidation, when on (see [`Chain::enable_fastpath`]).
    pub fastpath: Option<FastConfig>,
    /// The file's FastPath settings, used if `--fastpath` turns it on.
    pub fastpath_settings: FastConfig,
    /// `[[port]]` tables: when present, the chain reads from and sends to them.
    pub port_specs: Vec<PortSpec>,
    /// Workers the input is sharded over (see `shard.rs`).
    pub workers: usize,
    /// `fastpath = "auto"`: the run switches consolidation on and off by measured cost
    /// (only with `fastpath` on).
    pub fastpath_auto: bool,
    /// microNF stages: the stage (0-based) of every node; empty when the chain runs as
    /// one stage (see `stage.rs`).
    pub stage_of: Vec<usize>,
    /// Packets each ring between stages holds.
    pub ring: usize,
    /// Pipelined prefetching distance (0 = off).
    pub prefetch: usize,
    /// `parallel = true`: the pairs of NFs in `groups` run on two threads (`join.rs`).
    pub parallel: bool,
    pub groups: Vec<super::parallel::Group>,
    /// PA-Flow between in-process stages: stage 1's ring carries aggregated frames
    /// (`optimise/aggregate/stages.rs`).
    pub aggregate_stages: bool,
    /// With `aggregate_stages`: stage 2's NFs get the packets as views into the frames
    /// (copied only when an NF changes one) rather than copied out.
    pub aggregate_views: bool,
}

pub const INPUT_DROPS: &[&str] = &["oversize", "pool-exhausted", "bad-aggregate"];

/// Largest prefetch distance: a batch.
pub const MAX_PREFETCH: usize = crate::packet::MAX_BATCH;

impl Chain {
    /// Each node's NF, or None for a port or sink: the shape FastPath's planning takes.
    pub fn nf_slots(&self) -> Vec<Option<&dyn crate::nfs::Nf>> {
        self.nodes
            .iter()
            .map(|n| match &n.kind {
                NodeKind::Nf { nf, .. } => Some(&**nf),
                _ => None,
            })
            .collect()
    }

    pub fn from_config(c: &ChainConfig) -> Result<Chain, ConfigError> {
        let port_specs = ports::specs(c)?;
        if !port_specs.is_empty() && (c.input.ports.is_some() || c.input.trace.is_some()) {
            return Err(c.invalid(
                "a chain with [[port]] tables takes its packets from them: drop `[input] ports` and `trace` (replay a file with a `kind = \"pcap\"` port)",
            ));
        }
        let mut nodes = vec![Node {
            name: INPUT.into(),
            kind: NodeKind::Input,
            outputs: vec!["out"],
            next: vec![],
            drop_reasons: INPUT_DROPS.to_vec(),
        }];
        let mut by_name: BTreeMap<String, usize> = BTreeMap::new();
        by_name.insert(INPUT.into(), 0);
        if c.nfs.len() > limits::MAX_NFS {
            return Err(c.invalid(format!(
                "{} NFs is more than the {} a chain may have",
                c.nfs.len(),
                limits::MAX_NFS
            )));
        }
        if c.sinks.len() > limits::MAX_SINKS {
            return Err(c.invalid(format!(
                "{} sinks is more than the {} a chain may have",
                c.sinks.len(),
                limits::MAX_SINKS
            )));
        }
        // NFs reserve their tables when built: the sum is checked as they are, so a
        // chain over the limit is refused before it has allocated much more than it.
        let max_memory = c.max_memory.unwrap_or_else(limits::default_max_memory);
        let mut nf_memory = 0u64;
        for t in &c.nfs {
            let name = str_key(c, t, "name", "each [[nf]] needs a `name`")?;
            let kind = str_key(c, t, "kind", &format!("nf `{name}` needs a `kind`"))?;
            check_name(c, &name, &by_name)?;
            let mut params = t.clone();
            params.remove("name");
            params.remove("kind");
            let nf = registry::build_in(&name, &kind, &params, &c.dir)
                .map_err(|e| c.invalid(e.to_string()))?;
            nf_memory = nf_memory.saturating_add(nf.memory() as u64);
            if nf_memory > max_memory {
                return Err(c.invalid(format!(
                    "nf `{name}`: the NFs so far need {}, above the limit of {}: lower their sizes or raise --max-memory",
                    limits::human(nf_memory),
                    limits::human(max_memory)
                )));
            }
            let prof = nf.profile();
            by_name.insert(name.clone(), nodes.len());
            nodes.push(Node {
                name,
                outputs: prof.outputs.to_vec(),
                drop_reasons: prof.drop_reasons.to_vec(),
                next: vec![],
                kind: NodeKind::Nf { kind, nf },
            });
        }
        let mut sinks: Vec<(String, Option<PathBuf>)> = c
            .sinks
            .iter()
            .map(|s| (s.name.clone(), s.path.as_deref().map(|p| c.resolve(p))))
            .collect();
        if !sinks.iter().any(|(n, _)| n == DEFAULT_SINK) {
            sinks.insert(0, (DEFAULT_SINK.into(), None));
        }
        for (name, path) in sinks {
            check_name(c, &name, &by_name)?;
            by_name.insert(name.clone(), nodes.len());
            nodes.push(Node {
                name,
                kind: NodeKind::Sink { path },
                outputs: vec![],
                next: vec![],
                drop_reasons: vec![],
            });
        }

        let edges = match &c.edges {
            Some(e) => parse_edges(c, e, &nodes, &by_name)?,
            None => {
                // A line in file order.
                let mut line = vec![0];
                line.extend(1..=c.nfs.len());
                line.push(by_name[DEFAULT_SINK]);
                line.windows(2).map(|w| (w[0], 0, w[1])).collect()
            }
        };
        let mut next: Vec<Vec<Option<usize>>> =
            nodes.iter().map(|n| vec![None; n.outputs.len()]).collect();
        for (from, out, to) in edges {
            if let Some(prev) = next[from][out] {
                return Err(c.invalid(format!(
                    "output `{}` of `{}` has two edges (to `{}` and `{}`); use an NF with more outputs to split traffic",
                    nodes[from].outputs[out], nodes[from].name, nodes[prev].name, nodes[to].name
                )));
            }
            next[from][out] = Some(to);
        }
        for (i, n) in nodes.iter_mut().enumerate() {
            let mut v = Vec::new();
            for (o, t) in next[i].iter().enumerate() {
                match t {
                    Some(t) => v.push(*t),
                    None => {
                        return Err(c.invalid(format!(
                            "output `{}` of `{}` goes nowhere: add an edge `{}{} -> NODE`",
                            n.outputs[o],
                            n.name,
                            n.name,
                            if n.outputs.len() > 1 {
                                format!(":{}", n.outputs[o])
                            } else {
                                String::new()
                            }
                        )))
                    }
                }
            }
            n.next = v;
        }
        let order = topo_order(c, &nodes)?;
        let mut chain = Chain {
            name: c.name.clone().unwrap_or_else(|| "chain".into()),
            ports: if port_specs.is_empty() {
                c.input.ports.unwrap_or(DEFAULT_PORTS)
            } else {
                port_specs.len() as u16
            },
            port_specs,
            seed: c.input.seed.unwrap_or(DEFAULT_SEED),
            default_trace: c.input.trace.as_deref().map(|t| c.resolve(t)),
            nodes,
            order,
            fastpath: None,
            fastpath_settings: FastConfig::default(),
            workers: 1,
            fastpath_auto: false,
            stage_of: Vec::new(),
            ring: super::stage::DEFAULT_RING,
            prefetch: 0,
            parallel: false,
            groups: Vec::new(),
            aggregate_stages: false,
            aggregate_views: false,
        };
        if let Some(k) = c.prefetch {
            if k as usize > MAX_PREFETCH {
                return Err(c.invalid(format!(
                    "`prefetch` = {k}: at most {MAX_PREFETCH} (a batch is {} packets); 0 is off",
                    crate::packet::MAX_BATCH
                )));
            }
            chain.prefetch = k as usize;
        }
        if let Some(r) = c.ring {
            let r = r as usize;
            if !(crate::packet::MAX_BATCH..=super::stage::MAX_RING).contains(&r) {
                return Err(c.invalid(format!(
                    "`ring` = {r} packets: a ring holds {} (a batch) to {} packets",
                    crate::packet::MAX_BATCH,
                    super::stage::MAX_RING
                )));
            }
            chain.ring = r;
        }
        if let Some(st) = &c.stages {
            chain
                .set_stages(st)
                .map_err(|e| c.invalid(format!("`stages`: {e}")))?;
        }
        if c.aggregate_stages == Some(true) {
            if !chain.port_specs.is_empty() {
                return Err(c.invalid(
                    "`aggregate_stages` with [[port]] tables is not built: a full ring on live input drops packets, which an aggregated frame cannot; remove one of them",
                ));
            }
            chain
                .set_aggregate_stages(true)
                .map_err(|e| c.invalid(format!("`aggregate_stages`: {e}")))?;
        }
        if c.aggregate_views == Some(true) {
            if !chain.aggregate_stages {
                return Err(c.invalid(
                    "`aggregate_views` needs `aggregate_stages = true` (views into the frames stage 1's ring carries)",
                ));
            }
            chain.aggregate_views = true;
        }
        if let Some(w) = c.workers {
            if w == 0 || w as usize > super::shard::MAX_WORKERS {
                return Err(c.invalid(format!(
                    "`workers` must be 1 to {}, not {w}",
                    super::shard::MAX_WORKERS
                )));
            }
            chain.workers = w as usize;
            if w > 1 {
                if let Some(why) = super::shard::refusal(&chain) {
                    return Err(c.invalid(format!("`workers = {w}`: {why}")));
                }
            }
        }
        let mut fp = FastConfig::default();
        if let Some(n) = c.fastpath_entries {
            if n == 0 || n > limits::MAX_FASTPATH_ENTRIES {
                return Err(c.invalid(format!(
                    "`fastpath_entries` = {n} is out of range 1..={}",
                    limits::MAX_FASTPATH_ENTRIES
                )));
            }
            fp.entries = n as usize;
        }
        if let Some(t) = c.fastpath_timeout {
            fp.timeout_ns = u64::from(t) * 1_000_000_000;
        }
        if let Some(n) = c.fastpath_record {
            fp.record_at = u8::try_from(n)
                .ok()
                .filter(|&n| n >= 1)
                .ok_or_else(|| c.invalid(format!("`fastpath_record` must be 1 to 255, not {n}")))?;
        }
        let (on, auto) = match c.fastpath {
            None | Some(FastSetting::Off) => (false, false),
            Some(FastSetting::On) => (true, false),
            Some(FastSetting::Auto) => (true, true),
        };
        chain.fastpath_settings = fp;
        if on {
            let what = if auto { "\"auto\"" } else { "true" };
            chain
                .enable_fastpath(fp)
                .map_err(|e| c.invalid(format!("`fastpath = {what}`: {e}")))?;
            chain.fastpath_auto = auto;
        }
        if c.parallel == Some(true) {
            chain
                .set_parallel(true)
                .map_err(|e| c.invalid(format!("`parallel = true`: {e}")))?;
        }
        Ok(chain).and_then(|ch| {
            if ch.ports == 0 {
                Err(c.invalid("[input] ports must be at least 1"))
            } else {
                Ok(ch)
            }
        })
    }

    /// A line `in -> nfs… -> out` built from NFs made in code (embedding, tests).
    pub fn linear(name: &str, ports: u16, seed: u64, nfs: Vec<(String, Box<dyn Nf>)>) -> Chain {
        let mut nodes = vec![Node {
            name: INPUT.into(),
            kind: NodeKind::Input,
            outputs: vec!["out"],
            next: vec![1],
            drop_reasons: INPUT_DROPS.to_vec(),
        }];
        let count = nfs.len();
        for (i, (n, nf)) in nfs.into_iter().enumerate() {
            let p = nf.profile();
            nodes.push(Node {
                name: n,
                outputs: p.outputs.to_vec(),
                drop_reasons: p.drop_reasons.to_vec(),
                // Every output of an NF in a line leads to the next node.
                next: vec![i + 2; p.outputs.len()],
                kind: NodeKind::Nf {
                    kind: "custom".into(),
                    nf,
                },
            });
        }
        nodes.push(Node {
            name: DEFAULT_SINK.into(),
            kind: NodeKind::Sink { path: None },
            outputs: vec![],
            next: vec![],
            drop_reasons: vec![],
        });
        Chain {
            name: name.into(),
            order: (1..=count + 1).collect(),
            nodes,
            ports: ports.max(1),
            seed,
            default_trace: None,
            fastpath: None,
            fastpath_settings: FastConfig::default(),
            port_specs: Vec::new(),
            workers: 1,
            fastpath_auto: false,
            stage_of: Vec::new(),
            ring: super::stage::DEFAULT_RING,
            prefetch: 0,
            parallel: false,
            groups: Vec::new(),
            aggregate_stages: false,
            aggregate_views: false,
        }
    }

    /// Runs the chain as the given stages (NF names per thread; see `stage.rs`). One
    /// stage is the plain run.
    pub fn set_stages(&mut self, stages: &[Vec<String>]) -> Result<(), String> {
        let of = super::stage::plan(self, stages)?;
        if stages.len() > 1 && self.fastpath.is_some() {
            return Err("FastPath and stages do not combine yet: use one of them".into());
        }
        self.stage_of = if stages.len() > 1 { of } else { Vec::new() };
        if self.parallel {
            // A pair split over two stages no longer runs in parallel.
            self.set_parallel(true)?;
        }
        Ok(())
    }

    /// Runs the pairs of NFs whose profiles allow it on two threads (`parallel.rs`), or
    /// every NF in sequence. Err says why no pair can.
    pub fn set_parallel(&mut self, on: bool) -> Result<(), String> {
        self.parallel = false;
        self.groups.clear();
        if !on {
            return Ok(());
        }
        if self.fastpath.is_some() {
            return Err("FastPath and parallel NFs do not combine yet: use one of them".into());
        }
        let groups = super::parallel::plan(self);
        if groups.is_empty() {
            let why = super::parallel::pairs(self)
                .first()
                .map(|&(a, b)| match super::parallel::pair(self, a, b) {
                    Err(why) => {
                        format!("`{}` ∥ `{}`: {why}", self.nodes[a].name, self.nodes[b].name)
                    }
                    Ok(_) => String::new(),
                })
                .unwrap_or_else(|| "the chain has fewer than two NFs".into());
            return Err(format!(
                "no two consecutive NFs can run in parallel ({why})"
            ));
        }
        self.parallel = true;
        self.groups = groups;
        Ok(())
    }

    /// PA-Flow between in-process stages (`optimise/aggregate/stages.rs`): every ring
    /// between stages carries aggregated frames (each with its packets' buffers on a
    /// supply ring beside it). Needs two stages or more.
    pub fn set_aggregate_stages(&mut self, on: bool) -> Result<(), String> {
        if on && self.stages() < 2 {
            return Err(format!(
                "needs two stages or more (it packs the rings between them), this chain has {}: list the groups in `stages`",
                self.stages()
            ));
        }
        self.aggregate_stages = on;
        Ok(())
    }

    /// Threads each worker runs (1 without stages).
    pub fn stages(&self) -> usize {
        self.stage_of.iter().copied().max().unwrap_or(0) + 1
    }

    /// Switches FastPath on. A node fed by two others would receive packets in an
    /// order that depends on which branch ran first, which consolidation cannot keep, so
    /// such chains are refused.
    pub fn enable_fastpath(&mut self, cfg: FastConfig) -> Result<(), String> {
        if self.stages() > 1 {
            return Err("FastPath and stages do not combine yet: use one of them".into());
        }
        if self.parallel {
            return Err("FastPath and parallel NFs do not combine yet: use one of them".into());
        }
        for (i, n) in self.nodes.iter().enumerate() {
            let mut preds: Vec<usize> = (0..self.nodes.len())
                .filter(|&j| self.nodes[j].next.contains(&i))
                .collect();
            preds.dedup();
            if preds.len() > 1 && self.order.contains(&i) {
                return Err(format!(
                    "FastPath needs a chain without merges, but `{}` is fed by `{}` and `{}`",
                    n.name, self.nodes[preds[0]].name, self.nodes[preds[1]].name
                ));
            }
        }
        self.fastpath = Some(cfg);
        Ok(())
    }

    /// Index of the node called `name`.
    pub fn node(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// The graph and plan as `catena check` prints them.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "chain `{}`: {} NF(s), {} virtual port(s), ingress port drawn with seed {}\n",
            self.name,
            self.nodes
                .iter()
                .filter(|n| matches!(n.kind, NodeKind::Nf { .. }))
                .count(),
            self.ports,
            self.seed
        );
        for (i, p) in self.port_specs.iter().enumerate() {
            s.push_str(&format!("port {i} `{}`: {}\n", p.name, p.describe()));
        }
        s.push_str("nodes:\n");
        for n in &self.nodes {
            match &n.kind {
                NodeKind::Input => s.push_str(&format!("  {:<12} input\n", n.name)),
                NodeKind::Sink { path } => s.push_str(&format!(
                    "  {:<12} sink -> {}\n",
                    n.name,
                    path.as_ref()
                        .map_or("(--output, or discard)".into(), |p| p.display().to_string())
                )),
                NodeKind::Nf { kind, nf } => {
                    let p = nf.profile();
                    s.push_str(&format!(
                        "  {:<12} {:<12} reads {}; writes {}; {}{}{}\n",
                        n.name,
                        kind,
                        p.reads,
                        p.writes,
                        if p.may_drop {
                            format!("drops ({})", p.drop_reasons.join(", "))
                        } else {
                            "never drops".into()
                        },
                        if p.per_flow_state {
                            "; per-flow state (sees every packet)"
                        } else {
                            ""
                        },
                        if p.changes_length {
                            "; adds/removes headers"
                        } else {
                            ""
                        },
                    ))
                }
            }
        }
        s.push_str("edges:\n");
        for n in &self.nodes {
            for (o, t) in n.next.iter().enumerate() {
                let out = if n.outputs.len() > 1 {
                    format!(":{}", n.outputs[o])
                } else {
                    String::new()
                };
                s.push_str(&format!("  {}{} -> {}\n", n.name, out, self.nodes[*t].name));
            }
        }
        let fp = self.fastpath.unwrap_or(self.fastpath_settings);
        // issue 18 (fastpath): auto may tell from the chain alone that it stays off.
        let static_off = crate::optimise::fastpath::auto_static_off(&self.nf_slots());
        s.push_str(&format!(
            "fastpath: {}\n  {} entries, idle timeout {}, records packet {} of each flow (the ones before run every NF unrecorded)\n",
            if let (Some(why), true) = (static_off, self.fastpath.is_some() && self.fastpath_auto) {
                format!("auto: {why}")
            } else if self.fastpath.is_some() && self.fastpath_auto {
                "auto (starts off; the run times chunks with the TSC, tries consolidation from chunk 1,025 and again sixteen times later after each losing trial, and keeps it only if it costs at most 15/16 of off; the decision and both costs are in the run's summary)".into()
            } else if self.fastpath.is_some() {
                "on (a flow's recorded packet runs every NF; later packets take one lookup, the state functions below and one consolidated rewrite; a flow whose path holds an always-run NF runs whole)".into()
            } else {
                "off (`fastpath = true` or `catena run --fastpath` turns it on; `fastpath = \"auto\"` or `--fastpath auto` lets the run decide)".into()
            },
            fp.entries,
            match fp.timeout_ns / 1_000_000_000 {
                0 => "none".to_string(),
                t => format!("{t} s"),
            },
            fp.record_at,
        ));
        for n in &self.nodes {
            if let NodeKind::Nf { nf, .. } = &n.kind {
                s.push_str(&match fastpath::role(&**nf) {
                    Ok("") => format!("  {:<12} consolidated; no state function\n", n.name),
                    Ok(st) => format!("  {:<12} consolidated; state function: {st}\n", n.name),
                    Err(why) => format!("  {:<12} always run: {why}\n", n.name),
                });
            }
        }
        let order: Vec<&str> = std::iter::once(INPUT)
            .chain(self.order.iter().map(|&i| self.nodes[i].name.as_str()))
            .collect();
        s.push_str("state scope (what sharding by flow needs):\n");
        for n in &self.nodes {
            if let NodeKind::Nf { nf, .. } = &n.kind {
                s.push_str(&match nf.state_scope() {
                    StateScope::None => format!("  {:<12} none\n", n.name),
                    StateScope::PerFlow => format!("  {:<12} per flow: shards\n", n.name),
                    StateScope::Global(why) => {
                        format!("  {:<12} global: {why}; cannot be sharded\n", n.name)
                    }
                });
            }
        }
        let walk = format!(
            "run to completion, batches of {}: {}",
            crate::packet::MAX_BATCH,
            order.join(" → ")
        );
        if self.workers == 1 {
            s.push_str(&format!("plan: one worker, {walk}\n"));
        } else {
            s.push_str(&format!(
                "plan: {} workers sharded by a symmetric hash of the IP (else MAC) addresses, each {walk}; outputs merged back into input order\n",
                self.workers
            ));
        }
        let stages = self.stages();
        if stages == 1 {
            s.push_str("  stages: one (every NF on the worker's thread; `stages = [[...], [...]]` pipelines them over threads)\n");
        } else {
            let list: Vec<String> = (0..stages)
                .map(|k| {
                    let names: Vec<&str> = self
                        .order
                        .iter()
                        .filter(|&&i| self.stage_of[i] == k)
                        .map(|&i| self.nodes[i].name.as_str())
                        .collect();
                    format!("stage {} [{}]", k + 1, names.join(", "))
                })
                .collect();
            s.push_str(&format!(
                "  stages: {stages} threads per worker ({} in all), joined by SPSC rings of {} packets (references; buffers return to stage 1's pool): {}\n",
                stages * self.workers,
                self.ring,
                list.join(&format!(" =ring({})=> ", self.ring))
            ));
            if self.aggregate_stages {
                // PA-Flow (optimise/aggregate/stages.rs): every ring between stages.
                let rings = if stages == 2 {
                    "stage 1's ring into stage 2 carries".to_string()
                } else {
                    format!("each of the {} rings between stages carries", stages - 1)
                };
                let views = match (self.aggregate_views, stages) {
                    (false, _) => "by copying each packet out",
                    (true, 2) => "as views into the frames (NFs on aggregated frames: copied only when an NF changes a packet)",
                    (true, _) => "by copying each packet out, and by the last stage as views into the frames (NFs on aggregated frames: copied only when an NF changes a packet)",
                };
                s.push_str(&format!(
                    "  aggregation (PA-Flow): {rings} each batch's packets for a node packed in aggregated frames of up to {} B (at most stage 1's buffer), unpacked by the next stage {views}; a lone packet goes as it is\n",
                    crate::optimise::aggregate::stages::SIZE,
                ));
            }
        }
        s.push_str(&super::parallel::describe(self));
        s.push_str(&match self.prefetch {
            0 => "  prefetch: off (`prefetch = k` prefetches packet i + k's first cache line while ingesting packet i)\n".to_string(),
            k => format!("  prefetch: {k} packets ahead at ingest (the first cache line of each packet's bytes)\n"),
        });
        s
    }
}

fn str_key(
    c: &ChainConfig,
    t: &toml::Table,
    key: &str,
    missing: &str,
) -> Result<String, ConfigError> {
    match t.get(key) {
        Some(toml::Value::String(s)) => Ok(s.clone()),
        Some(v) => Err(c.invalid(format!("`{key}` must be a string, not {}", v.type_str()))),
        None => Err(c.invalid(missing)),
    }
}

fn check_name(
    c: &ChainConfig,
    name: &str,
    seen: &BTreeMap<String, usize>,
) -> Result<(), ConfigError> {
    if name.is_empty()
        || !name
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '-')
    {
        return Err(c.invalid(format!(
            "bad node name `{name}`: use letters, digits, `_` and `-`"
        )));
    }
    if seen.contains_key(name) {
        return Err(c.invalid(format!("two nodes are named `{name}`")));
    }
    Ok(())
}

fn parse_edges(
    c: &ChainConfig,
    edges: &[String],
    nodes: &[Node],
    by_name: &BTreeMap<String, usize>,
) -> Result<Vec<(usize, usize, usize)>, ConfigError> {
    let names = || by_name.keys().cloned().collect::<Vec<_>>().join(", ");
    let mut out = Vec::new();
    for e in edges {
        let hops: Vec<&str> = e.split("->").map(str::trim).collect();
        if hops.len() < 2 || hops.iter().any(|h| h.is_empty()) {
            return Err(c.invalid(format!(
                "edge `{e}`: write it as `from -> to` or `from:output -> to`"
            )));
        }
        for w in hops.windows(2) {
            let (from, port) = match w[0].split_once(':') {
                Some((f, p)) => (f.trim(), Some(p.trim())),
                None => (w[0], None),
            };
            let to = w[1];
            let &fi = by_name.get(from).ok_or_else(|| {
                c.invalid(format!(
                    "edge `{e}`: no node named `{from}` (nodes: {})",
                    names()
                ))
            })?;
            let &ti = by_name.get(to).ok_or_else(|| {
                c.invalid(format!(
                    "edge `{e}`: no node named `{to}` (nodes: {})",
                    names()
                ))
            })?;
            if to.contains(':') {
                return Err(c.invalid(format!(
                    "edge `{e}`: an output name goes on the left of `->`"
                )));
            }
            let fnode = &nodes[fi];
            if fnode.outputs.is_empty() {
                return Err(c.invalid(format!("edge `{e}`: `{from}` is a sink; nothing leaves it")));
            }
            if ti == 0 {
                return Err(c.invalid(format!(
                    "edge `{e}`: nothing can go into the input `{INPUT}`"
                )));
            }
            let o = match port {
                None if fnode.outputs.len() == 1 => 0,
                None => {
                    return Err(c.invalid(format!(
                        "edge `{e}`: `{from}` has outputs {}; name one as `{from}:OUTPUT`",
                        fnode.outputs.join(", ")
                    )))
                }
                Some(p) => fnode.outputs.iter().position(|o| *o == p).ok_or_else(|| {
                    c.invalid(format!(
                        "edge `{e}`: `{from}` has no output `{p}` (outputs: {})",
                        fnode.outputs.join(", ")
                    ))
                })?,
            };
            out.push((fi, o, ti));
        }
    }
    Ok(out)
}

/// Kahn's algorithm from the input; a leftover node is on a cycle or unreachable.
fn topo_order(c: &ChainConfig, nodes: &[Node]) -> Result<Vec<usize>, ConfigError> {
    let n = nodes.len();
    let mut reach = vec![false; n];
    let mut stack = vec![0];
    while let Some(i) = stack.pop() {
        if !std::mem::replace(&mut reach[i], true) {
            stack.extend(nodes[i].next.iter().copied());
        }
    }
    if let Some(i) = (0..n).find(|&i| !reach[i] && !matches!(nodes[i].kind, NodeKind::Sink { .. }))
    {
        return Err(c.invalid(format!(
            "`{}` is not reachable from `{INPUT}`",
            nodes[i].name
        )));
    }
    let mut indeg = vec![0usize; n];
    for (i, node) in nodes.iter().enumerate() {
        if reach[i] {
            for &t in &node.next {
                indeg[t] += 1;
            }
        }
    }
    let mut ready = vec![0];
    let mut order = Vec::new();
    while let Some(i) = ready.pop() {
        if i != 0 {
            order.push(i);
        }
        for &t in &nodes[i].next {
            indeg[t] -= 1;
            if indeg[t] == 0 {
                ready.push(t);
            }
        }
    }
    if let Some(start) = (0..n).find(|&i| reach[i] && indeg[i] > 0) {
        // Every blocked node has a blocked predecessor: walking back must repeat a node,
        // and the nodes between the repeats are the cycle.
        let mut path = vec![start];
        let mut cur = start;
        for _ in 0..=n {
            let Some(pred) =
                (0..n).find(|&p| reach[p] && indeg[p] > 0 && nodes[p].next.contains(&cur))
            else {
                break;
            };
            cur = pred;
            if let Some(p) = path.iter().position(|&x| x == cur) {
                let mut idx: Vec<usize> = path[p..].to_vec();
                idx.reverse();
                // Start at the node defined first so the message is stable.
                let first = idx
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, &i)| i)
                    .map_or(0, |(k, _)| k);
                idx.rotate_left(first);
                idx.push(idx[0]);
                let cyc: Vec<&str> = idx.iter().map(|&i| nodes[i].name.as_str()).collect();
                return Err(c.invalid(format!("the edges form a cycle: {}", cyc.join(" -> "))));
            }
            path.push(cur);
        }
        return Err(c.invalid(format!(
            "the edges form a cycle through `{}`",
            nodes[start].name
        )));
    }
    // Unreachable sinks are harmless but take no part in the run.
    Ok(order.into_iter().filter(|&i| reach[i]).collect())
}
