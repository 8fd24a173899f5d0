//! microNF stages: `stages = [["fw", "nat"], ["lb"]]` runs each group of NFs on its own
//! thread, the threads joined by the SPSC rings of `ring.rs`.
//!
//! - Stage 1 is the worker's own thread: it ingests, runs its NFs and sends each packet
//!   bound for a later stage's node down its ring (the pointer, tagged with the node),
//!   then a marker ending the chunk. A stage walks a chunk only once it is whole, over
//!   the same graph order, so every node sees its packets in the order one stage gives
//!   it: the output is byte-identical and the counters equal. Stages must therefore
//!   follow the walk order (checked by [`plan`]); a sink runs in the last stage that
//!   feeds it.
//! - Buffers belong to stage 1's pool. A later stage frees into a holding pool and hands
//!   what it freed back over a return ring after each chunk; stage 1 takes them back
//!   before ingesting. The pool is sized for everything the rings and stages can hold,
//!   so waiting for buffers always ends (back-pressure, nothing lost).
//! - A full forward ring makes its producer wait (replay: nothing is lost); on ports the
//!   kernel feeds it drops what does not fit, counted as `ring-full` at the node the
//!   packets were for ([`Staged::go_live`]). Live ports are shared by the stages.
//! - Control commands for a later stage's NF travel down the rings between chunks, so
//!   each packet is processed wholly before or wholly after a change.
//! - A stage that fails or dies stops the run: its rings are abandoned, its neighbours
//!   stop, and the run ends with one line naming the stage and why.
//! - At the end every stage's NFs, counters and sinks are moved back into stage 1's walk,
//!   so the summary, flow records and end reports are made as in one stage.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use rtrb::{Consumer, Producer, RingBuffer};

use super::chain::{Chain, Node, NodeKind};
use super::control::Reply;
use super::ring::{give_back, take_back, Idle, Msg, Out};
use super::walk::Walk;
use crate::nfs::{Context, Nf, Profile};
use crate::optimise::aggregate::{StageCounters, StagePacker, StageUnpacker};
use crate::packet::{Batch, Packet, Pool, MAX_BATCH};

/// Default ring size, in packets.
pub const DEFAULT_RING: usize = 1024;
/// Largest ring, in packets.
pub const MAX_RING: usize = 1 << 20;
/// Most stages a chain may ask for.
pub const MAX_STAGES: usize = 16;

/// The stage (0-based) of every node for `stages` (NF names per stage), or why the chain
/// cannot run so.
pub fn plan(chain: &Chain, stages: &[Vec<String>]) -> Result<Vec<usize>, String> {
    if stages.is_empty() || stages.len() > MAX_STAGES {
        return Err(format!(
            "`stages` must list 1 to {MAX_STAGES} stages, not {}",
            stages.len()
        ));
    }
    let n = chain.nodes.len();
    let mut of: Vec<Option<usize>> = vec![None; n];
    of[0] = Some(0);
    for (s, names) in stages.iter().enumerate() {
        if names.is_empty() {
            return Err(format!("stage {} is empty: list the NFs it runs", s + 1));
        }
        for name in names {
            let i = chain
                .node(name)
                .filter(|&i| matches!(chain.nodes[i].kind, NodeKind::Nf { .. }))
                .ok_or_else(|| format!("stage {}: no NF named `{name}`", s + 1))?;
            if let Some(t) = of[i] {
                return Err(format!(
                    "`{name}` is in stage {} and stage {}: give each NF one stage",
                    t + 1,
                    s + 1
                ));
            }
            of[i] = Some(s);
        }
    }
    for (i, node) in chain.nodes.iter().enumerate() {
        if matches!(node.kind, NodeKind::Nf { .. }) && chain.order.contains(&i) && of[i].is_none() {
            return Err(format!(
                "NF `{}` is in no stage: add it to one of `stages`",
                node.name
            ));
        }
    }
    // Stages follow the walk order; sinks run in the last stage that feeds them.
    let mut top: Option<(usize, usize)> = None;
    for &i in &chain.order {
        if let NodeKind::Nf { .. } = chain.nodes[i].kind {
            let s = of[i].unwrap_or(0);
            match top {
                Some((ts, tn)) if s < ts => {
                    let walk: Vec<&str> = chain
                        .order
                        .iter()
                        .filter(|&&j| matches!(chain.nodes[j].kind, NodeKind::Nf { .. }))
                        .map(|&j| chain.nodes[j].name.as_str())
                        .collect();
                    return Err(format!(
                        "stages must follow the walk order ({}): `{}` (stage {}) comes after `{}` (stage {})",
                        walk.join(" → "),
                        chain.nodes[i].name,
                        s + 1,
                        chain.nodes[tn].name,
                        ts + 1
                    ));
                }
                Some((ts, _)) if s == ts => {}
                _ => top = Some((s, i)),
            }
        }
    }
    let mut out: Vec<usize> = of.iter().map(|s| s.unwrap_or(0)).collect();
    for &i in &chain.order {
        if let NodeKind::Sink { .. } = chain.nodes[i].kind {
            out[i] = (0..n)
                .filter(|&p| chain.nodes[p].next.contains(&i))
                .map(|p| out[p])
                .max()
                .unwrap_or(0);
        }
    }
    Ok(out)
}

/// Stands in, in a stage's copy of the graph, for an NF another stage runs.
struct Elsewhere(Profile);

impl Nf for Elsewhere {
    fn profile(&self) -> &Profile {
        &self.0
    }
    fn process(&mut self, _: &mut Batch, _: &Context) {}
}

/// Stage `s`'s copy of `chain`: the same graph, with the NFs of stage `s` moved into it
/// (the others stand in as [`Elsewhere`]).
fn shell(chain: &mut Chain, stage_of: &[usize], s: usize) -> Chain {
    let nodes = chain
        .nodes
        .iter_mut()
        .enumerate()
        .map(|(i, node)| Node {
            name: node.name.clone(),
            outputs: node.outputs.clone(),
            next: node.next.clone(),
            drop_reasons: node.drop_reasons.clone(),
            kind: match &mut node.kind {
                NodeKind::Input => NodeKind::Input,
                NodeKind::Sink { path } => NodeKind::Sink { path: path.clone() },
                NodeKind::Nf { kind, nf } => {
                    let stand_in: Box<dyn Nf> = Box::new(Elsewhere(nf.profile().clone()));
                    NodeKind::Nf {
                        kind: kind.clone(),
                        nf: if stage_of[i] == s {
                            std::mem::replace(nf, stand_in)
                        } else {
                            stand_in
                        },
                    }
                }
            },
        })
        .collect();
    Chain {
        name: chain.name.clone(),
        nodes,
        order: chain.order.clone(),
        ports: chain.ports,
        seed: chain.seed,
        default_trace: None,
        fastpath: None,
        fastpath_settings: chain.fastpath_settings,
        port_specs: Vec::new(),
        workers: 1,
        fastpath_auto: false,
        stage_of: chain.stage_of.clone(),
        ring: chain.ring,
        prefetch: chain.prefetch,
        parallel: chain.parallel,
        groups: chain.groups.clone(),
        aggregate_stages: chain.aggregate_stages,
        aggregate_views: chain.aggregate_views,
    }
}

/// PA-Flow (`aggregate_stages`): the buffers the supply rings beside the forward rings
/// may hold (the packets of frames in flight, `optimise/aggregate/stages.rs`), which
/// stage 1's pool needs on top of [`pool_buffers`]; 0 without aggregation.
pub fn supply_buffers(chain: &Chain) -> usize {
    if chain.aggregate_stages {
        (chain.stages() - 1) * supply_ring(chain.ring)
    } else {
        0
    }
}

/// PA-Flow: a supply ring's size, the forward ring's.
fn supply_ring(ring: usize) -> usize {
    ring + 2
}

/// The buffers stage 1's pool needs so that it never runs short while later stages
/// hold packets: its own, what every ring holds, and a chunk in every stage.
pub fn pool_buffers(base: usize, stages: usize, ring: usize) -> usize {
    base + (stages - 1) * (ring + 2) + stages * MAX_BATCH
}

/// A later stage's walk when it ended well, with what its ring onward aggregated
/// (PA-Flow, `aggregate_stages`).
type Ended = Result<(Walk, Option<StageCounters>), Failure>;

/// Why a stage stopped.
struct Failure {
    msg: String,
    /// It stopped because the next stage had (not a cause of its own).
    downstream: bool,
}

/// The later stages of one worker: their walks before the run, their threads during it.
pub(super) struct Staged {
    pub stage_of: Vec<usize>,
    ring: usize,
    waiting: Vec<Walk>,
    threads: Vec<JoinHandle<Ended>>,
    back: Vec<Consumer<Packet>>,
    /// NF names per stage, for messages.
    names: Vec<String>,
    /// PA-Flow: what stage 1's ring aggregated, once the run is joined.
    pub agg: Option<crate::optimise::aggregate::StageCounters>,
    /// Live input: full rings drop (`ring-full`) instead of waiting.
    lossy: bool,
    /// Set by a later stage whose sink or NF output failed to write: a live run, which
    /// has no end of its own, reads it every refresh and stops (the sinks are the stage
    /// threads' until the join).
    pub output_failed: Arc<AtomicBool>,
}

impl Staged {
    /// Splits `chain` (whose `stage_of` has more than one stage): the NFs of later stages
    /// move to their own walks.
    pub fn split(chain: &mut Chain, max_packet: usize) -> Staged {
        let stage_of = chain.stage_of.clone();
        let count = stage_of.iter().copied().max().unwrap_or(0) + 1;
        let total = pool_buffers(super::limits::pool_buffers(false), count, chain.ring)
            + supply_buffers(chain); // PA-Flow
        let names = (0..count)
            .map(|s| {
                chain
                    .nodes
                    .iter()
                    .enumerate()
                    .filter(|(i, n)| stage_of[*i] == s && matches!(n.kind, NodeKind::Nf { .. }))
                    .map(|(_, n)| format!("`{}`", n.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .collect();
        let waiting = (1..count)
            .map(|s| {
                let mut w = Walk::new(shell(chain, &stage_of, s), max_packet, false);
                // Big buffers are made on demand up to as many again: room for both.
                w.pool = Pool::holding(2 * total);
                w.mine = stage_of.iter().map(|&t| t == s).collect();
                w
            })
            .collect();
        Staged {
            stage_of,
            ring: chain.ring,
            waiting,
            threads: Vec::new(),
            back: Vec::new(),
            names,
            agg: None,
            lossy: false,
            output_failed: Arc::default(),
        }
    }

    /// Before [`start`](Self::start) on live ports: the ports (moved out of `first`) are
    /// shared by every stage, and with `lossy` (ports the kernel feeds, which cannot
    /// wait) a full ring drops, counted as `ring-full` at the node the packets were for.
    pub fn go_live(&mut self, first: &mut Walk, lossy: bool) {
        let shared: super::walk::SharedPorts =
            std::sync::Arc::new(std::sync::Mutex::new(std::mem::take(&mut first.live)));
        self.lossy = lossy;
        for (i, &s) in self.stage_of.iter().enumerate() {
            if !lossy || s == 0 || matches!(first.chain.nodes[i].kind, NodeKind::Input) {
                continue;
            }
            first.chain.nodes[i]
                .drop_reasons
                .push(super::walk::RING_FULL);
            first.counters[i].drops.push(0);
            for w in &mut self.waiting {
                w.counters[i].drops.push(0);
            }
        }
        for w in &mut self.waiting {
            w.ports = Some(shared.clone());
        }
        first.ports = Some(shared);
    }

    /// Stage 1's pool size and which nodes it runs.
    pub fn first(&self, w: &mut Walk, max_packet: usize) {
        let total = pool_buffers(
            super::limits::pool_buffers(false),
            self.waiting.len() + 1,
            self.ring,
        ) + supply_buffers(&w.chain); // PA-Flow
        w.pool = Pool::new(total, max_packet);
        w.mine = self.stage_of.iter().map(|&t| t == 0).collect();
    }

    pub fn walks_mut(&mut self) -> impl Iterator<Item = &mut Walk> {
        self.waiting.iter_mut()
    }

    /// Starts the later stages: their sinks (opened by stage 1) and NF outputs move to
    /// them, the rings are made, the threads spawned.
    pub fn start(&mut self, first: &mut Walk) -> anyhow::Result<()> {
        let total = first.pool.size();
        let mut walks = std::mem::take(&mut self.waiting);
        for w in &mut walks {
            w.open_nf_outputs()?;
        }
        // Ring s leads into stage s + 1.
        let mut rxs = Vec::with_capacity(walks.len());
        // PA-Flow: each aggregating ring's supply ring (the packed packets' buffers).
        let mut supplies: Vec<Option<Consumer<Packet>>> = Vec::with_capacity(walks.len());
        for s in 0..walks.len() {
            let (tx, rx) = RingBuffer::new(self.ring + 2);
            let mut out = Some(Out::new(tx));
            out.as_mut().expect("made above").lossy = self.lossy;
            supplies.push(None);
            if first.chain.aggregate_stages && !self.lossy {
                // PA-Flow hook: every ring between stages carries aggregated frames.
                let (stx, srx) = RingBuffer::new(supply_ring(self.ring));
                out.as_mut().expect("made above").agg = Some(StagePacker::new(
                    first.pool.max_packet(),
                    first.spare.capacity(),
                    stx,
                ));
                supplies[s] = Some(srx);
            }
            if s == 0 {
                first.out = out;
            } else {
                walks[s - 1].out = out;
            }
            rxs.push(rx);
        }
        for (k, (mut w, rx)) in walks.into_iter().zip(rxs).enumerate() {
            let s = k + 1;
            w.sinks = (0..first.sinks.len())
                .map(|i| {
                    if self.stage_of[i] == s {
                        first.sinks[i].take()
                    } else {
                        None
                    }
                })
                .collect();
            w.link = first.link;
            w.sink_seqs = first.sink_seqs;
            let (bt, br) = RingBuffer::new(2 * total);
            self.back.push(br);
            // PA-Flow hook: stage s + 1 unpacks what the ring into it carries aggregated;
            // as views only if it is the last (it frees every packet of a chunk).
            let last = s == self.stage_of.iter().copied().max().unwrap_or(0);
            let unpack = supplies[k]
                .take()
                .map(|srx| StageUnpacker::new(srx, 2 * total, first.chain.aggregate_views && last));
            let failed = self.output_failed.clone();
            let t = std::thread::Builder::new()
                .name(format!("catena-stage{}", s + 1))
                .spawn(move || run(w, rx, bt, unpack, &failed))
                .map_err(|e| anyhow::anyhow!("stage {}: cannot start a thread: {e}", s + 1))?;
            self.threads.push(t);
        }
        Ok(())
    }

    /// Takes back the buffers later stages freed; waits until stage 1 has a chunk's
    /// worth. Err when a stage stopped (the run must end).
    pub fn room(&mut self, first: &mut Walk) -> Result<(), ()> {
        for b in &mut self.back {
            take_back(b, &mut first.pool);
        }
        let mut idle = Idle::default();
        while first.pool.available() < MAX_BATCH {
            if self.threads.iter().any(|t| t.is_finished()) {
                return Err(());
            }
            idle.wait();
            for b in &mut self.back {
                take_back(b, &mut first.pool);
            }
        }
        Ok(())
    }

    /// Ends the run: the rings close, the stages finish what they hold, and their NFs,
    /// counters and sinks move back into `first`. Err names the stage that failed.
    pub fn join(&mut self, first: &mut Walk) -> anyhow::Result<()> {
        self.agg = first.out.as_ref().and_then(|o| o.agg.as_ref()).map(|a| a.c);
        first.out = None;
        // PA-Flow: the later rings' counts are added as their stages are joined.
        let mut agg = self.agg;
        let mut ended = Vec::new();
        for t in self.threads.drain(..) {
            ended.push(t.join().unwrap_or_else(|_| {
                Err(Failure {
                    msg: "died".into(),
                    downstream: false,
                })
            }));
        }
        for b in &mut self.back {
            take_back(b, &mut first.pool);
        }
        self.back.clear();
        let mut cause = None;
        let mut any = None;
        for (k, e) in ended.into_iter().enumerate() {
            let s = k + 1;
            match e {
                Ok((mut w, ring)) => {
                    if let (Some(a), Some(r)) = (agg.as_mut(), ring) {
                        a.frames += r.frames;
                        a.aggregated += r.aggregated;
                        a.plain += r.plain;
                        a.supply_waits += r.supply_waits;
                    }
                    for i in 0..first.chain.nodes.len() {
                        // Summed: a node is counted by its own stage, and (live) its
                        // `ring-full` drops by the stage before the full ring.
                        first.counters[i].add(&w.counters[i]);
                        if self.stage_of[i] != s {
                            continue;
                        }
                        std::mem::swap(&mut first.chain.nodes[i].kind, &mut w.chain.nodes[i].kind);
                        if let Some(sink) = w.sinks.get_mut(i).and_then(Option::take) {
                            first.sinks[i] = Some(sink);
                        }
                    }
                    for (a, b) in first.tx.iter_mut().zip(&w.tx) {
                        *a += b;
                    }
                }
                Err(f) => {
                    let line = format!("stage {} ({}) {}", s + 1, self.names[s], f.msg);
                    if f.downstream {
                        any.get_or_insert(line);
                    } else {
                        cause.get_or_insert(line);
                    }
                }
            }
        }
        self.agg = agg;
        match cause.or(any) {
            Some(e) => anyhow::bail!("{e}"),
            None => Ok(()),
        }
    }
}

/// A later stage's thread: walks each chunk as its end marker arrives, until the ring
/// into it closes. A panic is caught so the run can say which stage died and why.
fn run(
    mut w: Walk,
    rx: Consumer<Msg>,
    mut back: Producer<Packet>,
    mut unpack: Option<StageUnpacker>,
    failed: &AtomicBool,
) -> Ended {
    let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
        serve(&mut w, rx, &mut back, unpack.as_mut(), failed)
    }));
    // PA-Flow: what the ring onward aggregated (its spare frames back to the pool).
    let ring = w.out.as_mut().and_then(|o| o.agg.as_mut()).map(|a| {
        a.release(&mut w.pool);
        a.c
    });
    // Closing the ring onward lets the next stage finish (or notice this one stopped).
    w.out = None;
    match r {
        Ok(Ok(())) => {
            give_back(&mut w.pool, &mut back);
            Ok((w, ring))
        }
        Ok(Err(f)) => Err(f),
        Err(p) => Err(Failure {
            msg: format!(
                "died: {}",
                p.downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "panic".into())
            ),
            downstream: false,
        }),
    }
}

fn serve(
    w: &mut Walk,
    mut rx: Consumer<Msg>,
    back: &mut Producer<Packet>,
    mut unpack: Option<&mut StageUnpacker>,
    failed: &AtomicBool,
) -> Result<(), Failure> {
    let gone = || Failure {
        msg: "stopped: the next stage stopped".into(),
        downstream: true,
    };
    let mut idle = Idle::default();
    loop {
        let n = rx.slots();
        if n == 0 {
            if rx.is_abandoned() && rx.slots() == 0 {
                return Ok(());
            }
            idle.wait();
            continue;
        }
        idle = Idle::default();
        let Ok(chunk) = rx.read_chunk(n) else {
            continue;
        };
        for m in chunk {
            match m {
                Msg::Pkt(node, p) => w.inbox[node as usize].push(p),
                // PA-Flow hook (optimise/aggregate/stages.rs): the frame's packets join
                // the node's inbox in order; the frame's buffer is kept to pack the ring
                // onward, else goes back to stage 1.
                Msg::Agg(node, f) => match unpack.as_deref_mut() {
                    Some(u) => {
                        let f = u
                            .unpack(f, &mut w.inbox[node as usize], &mut w.pool)
                            .map_err(|e| Failure {
                                msg: format!("stopped: {e}"),
                                downstream: false,
                            })?;
                        match (f, w.out.as_mut().and_then(|o| o.agg.as_mut())) {
                            (Some(f), Some(a)) => a.keep_frame(f, &mut w.pool),
                            (Some(f), None) => w.pool.free(f),
                            (None, _) => {}
                        }
                    }
                    None => w.pool.free(f),
                },
                Msg::End { shift } => {
                    w.shift = shift;
                    w.drain(None);
                    if let Some(v) = w.violation.take() {
                        return Err(Failure {
                            msg: format!("stopped: {v}"),
                            downstream: v == super::walk::NEXT_STAGE_STOPPED,
                        });
                    }
                    // Once per chunk, until it fails: a few loads per node.
                    if !failed.load(Ordering::Relaxed) && w.output_failed() {
                        failed.store(true, Ordering::Relaxed);
                    }
                    if let Some(o) = w.out.as_mut() {
                        o.end(shift).map_err(|_| gone())?;
                    }
                    if let Some(u) = unpack.as_deref_mut() {
                        // PA-Flow hook: the frames the chunk's packets viewed come back.
                        u.reclaim(&mut w.pool);
                    }
                    if let Some(a) = w.out.as_mut().and_then(|o| o.agg.as_mut()) {
                        // PA-Flow hook: spare frames not packed into go back.
                        a.release(&mut w.pool);
                    }
                    give_back(&mut w.pool, back);
                }
                Msg::Change(mut c) => {
                    let i = w.chain.node(&c.nf).unwrap_or(0);
                    if w.mine.get(i).copied().unwrap_or(false) {
                        let result = match w.nf_mut(i) {
                            Some(nf) => match c.prepared.as_mut() {
                                Some(p) => nf.control_prepared(&c.cmd, p),
                                None => nf.control(&c.cmd),
                            },
                            None => Err(format!("`{}` is not an NF", c.nf)),
                        };
                        match c.reply.take() {
                            Some(reply) => {
                                let replaced = c.prepared.take();
                                let _ = reply.send(Reply { result, replaced });
                            }
                            None => {
                                if let Err(e) = result {
                                    return Err(Failure {
                                        msg: format!("stopped: change `{} {}`: {e}", c.nf, c.cmd),
                                        downstream: false,
                                    });
                                }
                            }
                        }
                    } else if let Some(o) = w.out.as_mut() {
                        o.send(Msg::Change(c)).map_err(|_| gone())?;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::{PcapHeader, Trace};
    use crate::nfs::Wire;
    use crate::packet::{Fields, LinkKind};
    use crate::runtime::{NoProgress, RunOptions, Runner};

    /// Panics on its `at`-th packet.
    struct Boom {
        p: Profile,
        seen: u32,
        at: u32,
    }

    impl Nf for Boom {
        fn profile(&self) -> &Profile {
            &self.p
        }
        fn process(&mut self, b: &mut Batch, _: &Context) {
            self.seen += b.len() as u32;
            if self.seen >= self.at {
                panic!("boom at packet {}", self.at);
            }
        }
    }

    fn profile() -> Profile {
        Profile {
            reads: Fields::NONE,
            writes: Fields::NONE,
            may_drop: false,
            changes_length: false,
            per_flow_state: false,
            outputs: &["out"],
            drop_reasons: &[],
        }
    }

    fn trace(n: u64) -> Trace {
        let mut f = [0u8; 60];
        f[12] = 8;
        f[14] = 0x45;
        f[22] = 64;
        let h = PcapHeader::new(1, false);
        Trace::from_packets(LinkKind::Ethernet, h, (0..n).map(|i| (i, &f[..])))
    }

    fn chain(second: Box<dyn Nf>) -> Chain {
        let mut c = Chain::linear(
            "t",
            2,
            1,
            vec![
                ("w".into(), Box::new(Wire::new()) as Box<dyn Nf>),
                ("boom".into(), second),
                ("w2".into(), Box::new(Wire::new())),
            ],
        );
        c.ring = 32;
        c.set_stages(&[vec!["w".into()], vec!["boom".into()], vec!["w2".into()]])
            .unwrap();
        c
    }

    #[test]
    fn a_dying_stage_stops_the_run_naming_it() {
        let nf = Box::new(Boom {
            p: profile(),
            seen: 0,
            at: 5000,
        });
        let mut r = Runner::new(chain(nf), 60);
        let e = r
            .run(&trace(20_000), &RunOptions::default(), &mut NoProgress)
            .unwrap_err();
        assert_eq!(e.to_string(), "stage 2 (`boom`) died: boom at packet 5000");
    }

    #[test]
    fn stages_balance_and_match_one_stage() {
        let run = |staged: bool| {
            let nf = Box::new(Boom {
                p: profile(),
                seen: 0,
                at: u32::MAX,
            });
            let mut c = chain(nf);
            if !staged {
                c.stage_of.clear();
            }
            let mut r = Runner::new(c, 60);
            let s = r
                .run(&trace(10_000), &RunOptions::default(), &mut NoProgress)
                .unwrap();
            let nfs: Vec<_> = s
                .nfs
                .iter()
                .map(|n| (n.name.clone(), n.packets_in, n.packets_out, n.drops.clone()))
                .collect();
            (
                s.packets_in,
                s.packets_out,
                s.packets_dropped,
                nfs,
                s.ports.len(),
            )
        };
        let one = run(false);
        assert_eq!((one.0, one.1, one.2), (10_000, 10_000, 0));
        assert_eq!(one, run(true));
    }

    #[test]
    fn plans_put_sinks_in_the_stage_that_feeds_them() {
        let c = chain(Box::new(Wire::new()));
        // in, w, boom, w2, out
        assert_eq!(c.stage_of, vec![0, 0, 1, 2, 2]);
        assert_eq!(pool_buffers(128, 3, 32), 128 + 2 * 34 + 3 * 32);
    }
}
