//! The walk over the graph: every node with packets waiting runs once, in graph order,
//! until each packet has reached a sink or been dropped. Batches move between nodes by
//! swapping vectors; per packet there is no allocation, lock or system call.

use super::chain::{Chain, NodeKind};
use super::counters::NodeCounters;
use super::join::Fork;
use super::profile_check::Snapshot;
use super::ring::Out;
use super::sink::{count_at_sink, counts_only, to_sink_all, SinkState};
use crate::flow::RunClock;
use crate::io::Port;
use crate::nfs::{Context, Nf};
use crate::optimise::fastpath::FastPath;
use crate::packet::{Batch, Fields, LinkKind, Pool, Verdict, MAX_BATCH};

/// One instance of the chain with everything a walk touches: the NFs, their queues,
/// counters, the sinks and the buffer pool.
pub(super) struct Walk {
    pub chain: Chain,
    pub pool: Pool,
    /// Packets waiting at each node.
    pub inbox: Vec<Batch>,
    /// The batch a node runs on (swapped out of its inbox).
    pub spare: Batch,
    /// The packets an NF with one output dropped, freed as one block (empty between nodes).
    pub gone: Batch,
    pub counters: Vec<NodeCounters>,
    /// Per node: the open sink, for sink nodes.
    pub sinks: Vec<Option<SinkState>>,
    /// The NF nodes with files of their own ([`crate::nfs::Nf::has_outputs`]), noted
    /// when they are opened: the only ones [`Walk::output_failed`] asks.
    pub nf_outputs: Vec<usize>,
    /// Packets received and sent per port.
    pub rx: Vec<u64>,
    pub tx: Vec<u64>,
    pub cx: Context,
    /// The chain's seed, which with a record's position gives its ingress port
    /// (`ingest::port_of`).
    pub seed: u64,
    /// Records of this replay loop the clock has passed.
    pub passed: usize,
    pub link: LinkKind,
    /// Checks NFs against their profiles (debug builds, or when asked).
    pub check: Option<Snapshot>,
    pub violation: Option<String>,
    /// Added to timestamps on this replay loop; taken off again when writing, so every
    /// loop's output carries the capture's own times.
    pub shift: u64,
    /// The time every NF's timers read (docs/time.md), stamped at ingest.
    pub clock: RunClock,
    /// Live runs: the next packet's position in the input.
    pub seq: u64,
    /// The input's successor, where ingested packets queue.
    pub first: usize,
    /// Live ports, by port number: packets reaching a sink leave by their egress port.
    pub live: Vec<Box<dyn Port>>,
    /// Live input with stages: the ports, shared by the stages (stage 1 receives, a
    /// sink's stage sends). Held once per batch, never while waiting on a ring; `live`
    /// holds them only while the lock is held.
    pub ports: Option<SharedPorts>,
    /// Sinks also write each packet's input position (sharded runs merge by it).
    pub sink_seqs: bool,
    /// Per node: whether this walk runs it (all, unless the chain has stages).
    pub mine: Vec<bool>,
    /// The ring to the next stage, when there is one: packets for nodes this walk does
    /// not run go down it.
    pub out: Option<Out>,
    /// Pipelined prefetching distance at ingest (0 = off).
    pub prefetch: usize,
    /// Prefetch every cache line of a packet ahead, not only its first (sharded workers,
    /// see `shard::SHARD_PREFETCH`).
    pub prefetch_whole: bool,
    /// A sharded worker's packets view its queue's bytes instead of copying them each
    /// loop (`Walk::ingest_queue`): set when no NF of the chain writes a packet's bytes
    /// (`shard::writes_bytes`); where one does, the view's copy on its first change
    /// (out of line, after the walk has read the view) costs more than the copy at ingest.
    pub queue_views: bool,
    /// Bytes of each packet the chain reads or writes, from its NFs' profiles
    /// ([`lookahead_reach`]): what a lasting source prefetches of the next chunk.
    pub lookahead: usize,
    /// Parallel groups (`join.rs`), and per node the group it starts, if any.
    pub forks: Vec<Fork>,
    pub fork_at: Vec<Option<usize>>,
}

/// How many bytes from a frame's start a chain's NFs read or write (the furthest field
/// of any NF's profile, FastPath's 5-tuple when it is on, as laid out in an untagged
/// Ethernet/IPv4 frame without options), at most 64: the header lines worth loading a
/// chunk ahead. 0 when no NF touches packet bytes (only the ingress port and the egress
/// decision, as `wire`): prefetching lines nobody reads would only cost (session 21:
/// `wire` 14.7 → 28.2 ns a packet on bigflows). A hint only: a VLAN tag or IPv4 options
/// move fields further, which costs a miss, never a wrong byte.
pub(super) fn lookahead_reach(chain: &Chain) -> usize {
    // (field, the end of its bytes in the frame)
    const ENDS: [(Fields, usize); 16] = [
        (Fields::ETH_DST, 6),
        (Fields::ETH_SRC, 12),
        (Fields::ETH_TYPE, 14),
        (Fields::VLAN, 18),
        (Fields::IP_DSCP, 16),
        (Fields::IP_FRAG, 22),
        (Fields::IP_TTL, 23),
        (Fields::IP_PROTO, 24),
        (Fields::IP_SRC, 30),
        (Fields::IP_DST, 34),
        (Fields::ICMP, 36),
        (Fields::L4_SRC, 36),
        (Fields::L4_DST, 38),
        (Fields::TCP_SEQ, 42),
        (Fields::TCP_FLAGS, 48),
        (Fields::PAYLOAD, 64),
    ];
    let mut reach = if chain.fastpath.is_some() { 38 } else { 0 };
    for n in &chain.nodes {
        if let NodeKind::Nf { nf, .. } = &n.kind {
            let p = nf.profile();
            let touched = p.reads | p.writes;
            // A length change moves the whole packet.
            if p.changes_length {
                reach = 64;
            }
            for (f, end) in ENDS {
                if touched.intersects(f) {
                    reach = reach.max(end);
                }
            }
        }
    }
    reach
}

/// The live ports of a run with stages (see [`Walk::ports`]).
pub(super) type SharedPorts = std::sync::Arc<std::sync::Mutex<Vec<Box<dyn Port>>>>;

/// Takes the shared ports into `live` until [`release`] (the lock is held meanwhile).
#[inline]
pub(super) fn hold<'a>(
    m: &'a std::sync::Mutex<Vec<Box<dyn Port>>>,
    live: &mut Vec<Box<dyn Port>>,
) -> std::sync::MutexGuard<'a, Vec<Box<dyn Port>>> {
    let mut g = m.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    std::mem::swap(live, &mut *g);
    g
}

/// Puts the ports [`hold`] took back.
#[inline]
pub(super) fn release(
    g: Option<std::sync::MutexGuard<'_, Vec<Box<dyn Port>>>>,
    live: &mut Vec<Box<dyn Port>>,
) {
    if let Some(mut g) = g {
        std::mem::swap(live, &mut *g);
    }
}

/// The drop reason a node of a later stage gets for packets a full ring dropped (live
/// input only).
pub const RING_FULL: &str = "ring-full";

/// The violation a walk records when the next stage stopped taking packets.
pub(super) const NEXT_STAGE_STOPPED: &str = "the next stage stopped";

impl Walk {
    /// A walk of `chain` over packets of at most `max_packet` bytes; `recording` adds
    /// the buffers FastPath's recordings hold.
    pub fn new(chain: Chain, max_packet: usize, recording: bool) -> Walk {
        let n = chain.nodes.len();
        let cap = Walk::batch_cap(&chain);
        let counters = chain
            .nodes
            .iter()
            .map(|node| NodeCounters::new(node.outputs.len(), node.drop_reasons.len()))
            .collect();
        let ports = chain.ports as usize;
        let mut fork_at = vec![None; n];
        let forks = chain
            .groups
            .iter()
            .enumerate()
            .map(|(k, g)| {
                fork_at[g.a] = Some(k);
                let shadow = if g.shadow_is_a { g.a } else { g.b };
                let profile = match &chain.nodes[shadow].kind {
                    NodeKind::Nf { nf, .. } => nf.profile().clone(),
                    _ => unreachable!("parallel groups are NFs"),
                };
                Fork::new(*g, profile, cap, max_packet)
            })
            .collect();
        // Run to completion holds one chunk in flight (packets never multiply); FastPath
        // keeps a copy of each packet it records.
        Walk {
            forks,
            fork_at,
            pool: Pool::new(super::limits::pool_buffers(recording), max_packet),
            inbox: (0..n).map(|_| Batch::with_capacity(cap)).collect(),
            spare: Batch::with_capacity(cap),
            gone: Batch::with_capacity(cap),
            counters,
            sinks: Vec::new(),
            nf_outputs: Vec::new(),
            rx: vec![0; ports],
            tx: vec![0; ports],
            cx: Context { ports: chain.ports },
            seed: chain.seed,
            passed: 0,
            link: LinkKind::Ethernet,
            check: cfg!(debug_assertions).then(|| Snapshot::new(cap)),
            violation: None,
            shift: 0,
            clock: RunClock::new(),
            seq: 0,
            first: chain.nodes[0].next[0],
            live: Vec::new(),
            ports: None,
            sink_seqs: false,
            mine: vec![true; n],
            out: None,
            prefetch: chain.prefetch,
            prefetch_whole: false,
            queue_views: false,
            lookahead: 0,
            chain,
        }
    }

    /// A node fed by k predecessors may receive k batches before it runs. Batches are
    /// swapped between nodes, so all get the largest capacity any node needs.
    pub fn batch_cap(chain: &Chain) -> usize {
        let mut indeg = vec![0usize; chain.nodes.len()];
        for node in &chain.nodes {
            for &t in &node.next {
                indeg[t] += 1;
            }
        }
        MAX_BATCH * indeg.iter().copied().max().unwrap_or(1).max(1)
    }

    /// Node `i`'s NF, if it is one.
    #[inline]
    pub fn nf_mut(&mut self, i: usize) -> Option<&mut dyn Nf> {
        match self.chain.nodes.get_mut(i).map(|n| &mut n.kind) {
            Some(NodeKind::Nf { nf, .. }) => Some(&mut **nf),
            _ => None,
        }
    }

    /// Runs every node that has packets waiting, in graph order, until all reach a sink
    /// or are dropped. `fast` adds FastPath's recording hooks while it records.
    #[inline]
    pub fn drain(&mut self, fast: Option<&mut FastPath>) {
        let mut fast = fast.filter(|f| f.recording());
        let Walk {
            chain,
            pool,
            inbox,
            spare,
            gone,
            counters,
            sinks,
            tx,
            cx,
            check,
            violation,
            shift,
            live,
            ports,
            mine,
            out,
            forks,
            fork_at,
            ..
        } = self;
        for &n in &chain.order {
            if inbox[n].is_empty() {
                continue;
            }
            if !mine[n] {
                // Another stage runs it: the packets go down the ring, in order.
                let sent = match out.as_mut() {
                    // Live input: what a full ring cannot take is dropped and counted
                    // at the node it was for (an NF's in = out + dropped still holds;
                    // a sink counts it dropped, not out).
                    Some(o) if o.lossy => o.send_lossy(n, &mut inbox[n], pool).map(|d| {
                        if d > 0 {
                            let c = &mut counters[n];
                            if !matches!(chain.nodes[n].kind, NodeKind::Sink { .. }) {
                                c.packets_in += d;
                            }
                            if let Some(r) = c.drops.last_mut() {
                                *r += d;
                            }
                        }
                    }),
                    Some(o) => o.send_node(n, &mut inbox[n], pool),
                    None => Err(super::ring::Gone),
                };
                if sent.is_err() {
                    for p in inbox[n].drain() {
                        pool.free(p);
                    }
                    violation.get_or_insert_with(|| NEXT_STAGE_STOPPED.into());
                }
                continue;
            }
            std::mem::swap(spare, &mut inbox[n]);
            if let (Some(k), None) = (fork_at[n], fast.as_ref()) {
                // A parallel group: both NFs at once; its packets go on past the second.
                if forks[k].run(
                    &mut chain.nodes,
                    counters,
                    inbox,
                    spare,
                    pool,
                    cx,
                    check,
                    violation,
                ) {
                    continue;
                }
            }
            let node = &mut chain.nodes[n];
            let c = &mut counters[n];
            c.packets_in += spare.len() as u64;
            match &mut node.kind {
                NodeKind::Nf { nf, kind } => {
                    if let Some(snap) = check.as_mut() {
                        snap.take(spare);
                    }
                    if let Some(f) = fast.as_deref_mut() {
                        f.before_nf(n, spare);
                    }
                    nf.process(spare, cx);
                    if let Some(f) = fast.as_deref_mut() {
                        f.after_nf(n, spare, node.next.len());
                    }
                    if let Some(snap) = check.as_ref() {
                        let p = nf.profile();
                        let bad = snap.undeclared(spare, p.writes, p.changes_length);
                        if !bad.is_empty() && violation.is_none() {
                            *violation = Some(format!(
                                "NF `{}` ({kind}) wrote {} without declaring it in its profile",
                                node.name,
                                bad.join(", ")
                            ));
                        }
                    }
                    if let [t] = node.next[..] {
                        // The rest kept in order; drops counted after the sort, so the
                        // keep test is one compare (see `Batch::retain_or`), and freed
                        // as one block rather than a call each.
                        spare.retain_or_move(|p| matches!(p.meta().verdict, Verdict::Out(_)), gone);
                        if !gone.is_empty() {
                            for p in gone.iter() {
                                if let Verdict::Drop(r) = p.meta().verdict {
                                    c.drops[r as usize] += 1;
                                }
                            }
                            pool.free_batch(gone);
                        }
                        c.out[0] += spare.len() as u64;
                        if inbox[t].is_empty() {
                            // The common case: the whole batch moves on by a pointer swap.
                            std::mem::swap(spare, &mut inbox[t]);
                        } else {
                            for p in spare.drain() {
                                inbox[t].push(p);
                            }
                        }
                    } else {
                        for mut p in spare.drain() {
                            match p.meta().verdict {
                                Verdict::Out(o) => {
                                    let o = (o as usize).min(node.next.len() - 1);
                                    c.out[o] += 1;
                                    p.forward(0);
                                    inbox[node.next[o]].push(p);
                                }
                                Verdict::Drop(r) => {
                                    c.drops[r as usize] += 1;
                                    pool.free(p);
                                }
                            }
                        }
                    }
                }
                NodeKind::Sink { .. } => {
                    let Some(s) = sinks[n].as_mut() else {
                        continue;
                    };
                    if let Some(f) = fast.as_deref_mut() {
                        f.at_sink(n, spare);
                    }
                    // With stages on live ports, the ports are shared: held for the batch.
                    let held = ports.as_deref().map(|m| hold(m, live));
                    if counts_only(s, live) {
                        count_at_sink(s, c, tx, spare);
                    } else {
                        to_sink_all(s, c, tx, live, *shift, spare);
                    }
                    pool.free_batch(spare);
                    if held.is_some() {
                        for l in live.iter_mut() {
                            l.flush();
                        }
                    }
                    release(held, live);
                }
                NodeKind::Input => {}
            }
        }
    }
}
