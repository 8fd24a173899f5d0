//! The run-to-completion worker: one batch at a time from the input through every node in
//! graph order to the sinks. Per packet it does no allocation, locking or system call:
//! buffers come from a pool sized once, batches move between nodes by swapping vectors,
//! and output goes through a large buffered writer.

use std::io::BufWriter;
use std::path::PathBuf;
use std::time::Instant;

use super::chain::{Chain, NodeKind, INPUT_DROPS};
use super::control::{Command, ControlPort, Reply, Scheduled};
use super::counters::{NfSummary, NodeCounters, PortSummary, SinkSummary, Summary};
use super::profile_check::Snapshot;
use crate::io::{PcapWriter, Trace};
use crate::nfs::{Context, FastPacket, Nf, Prepared, Preparer};
use crate::optimise::fastpath::{FastPath, Found, FpKey, Probe, Recorder, Step};
use crate::packet::{
    Batch, FastMark, Layers, LinkKind, Packet, Pool, Verdict, FLOOD, MAX_BATCH, NOT_RECORDED,
    NO_PORT,
};

const OVERSIZE: usize = 0;

/// How the worker reports progress on long runs.
pub trait Progress {
    /// Called about every few thousand packets with the count so far.
    fn update(&mut self, done: u64, total: u64);
    fn finish(&mut self) {}
}

pub struct RunOptions {
    /// Replays of the trace (timestamps shift by the trace's span each loop).
    pub loops: u64,
    /// Overrides the sink paths by sink name (`--output` sets `out`).
    pub outputs: Vec<(String, PathBuf)>,
    /// Commands applied just before given packets enter the chain.
    pub schedule: Vec<Scheduled>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            loops: 1,
            outputs: Vec::new(),
            schedule: Vec::new(),
        }
    }
}

type Writer = PcapWriter<BufWriter<std::fs::File>>;

struct SinkState {
    writer: Option<Writer>,
    path: Option<PathBuf>,
    write_error: Option<String>,
    flooded: u64,
}

pub struct Runner {
    chain: Chain,
    pool: Pool,
    inbox: Vec<Batch>,
    spare: Batch,
    counters: Vec<NodeCounters>,
    sinks: Vec<Option<SinkState>>,
    rx: Vec<u64>,
    tx: Vec<u64>,
    cx: Context,
    rng: u64,
    link: LinkKind,
    check: Option<Snapshot>,
    violation: Option<String>,
    control: Option<ControlPort>,
    /// Added to timestamps on this replay loop; taken off again when writing, so every
    /// loop's output carries the capture's own times.
    shift: u64,
    /// FastPath state when the chain has it on.
    fast: Option<Box<FastPath>>,
    /// Where FastPath holds a chunk while it sorts it into hits and misses.
    fast_in: Batch,
}

impl Runner {
    /// Prepares a run of `chain` over packets of at most `max_packet` bytes.
    pub fn new(chain: Chain, max_packet: usize) -> Runner {
        let n = chain.nodes.len();
        let mut indeg = vec![0usize; n];
        for node in &chain.nodes {
            for &t in &node.next {
                indeg[t] += 1;
            }
        }
        // A node fed by k predecessors may receive k batches before it runs.
        // A node fed by k predecessors may receive k batches before it runs. Batches are
        // swapped between nodes, so all get the largest capacity any node needs.
        let cap = MAX_BATCH * indeg.iter().copied().max().unwrap_or(1).max(1);
        let inbox = (0..n).map(|_| Batch::with_capacity(cap)).collect();
        let counters = chain
            .nodes
            .iter()
            .map(|node| NodeCounters::new(node.outputs.len(), node.drop_reasons.len()))
            .collect();
        let ports = chain.ports as usize;
        let fast = chain.fastpath.map(|cfg| {
            let nfs: Vec<Option<&dyn Nf>> = chain
                .nodes
                .iter()
                .map(|node| match &node.kind {
                    NodeKind::Nf { nf, .. } => Some(&**nf),
                    _ => None,
                })
                .collect();
            Box::new(FastPath::new(cfg, &nfs))
        });
        // Run to completion holds at most one batch per edge in flight; FastPath keeps a
        // copy of each packet it records.
        let copies = if fast.is_some() { Recorder::BUFFERS } else { 0 };
        let pool = Pool::new(MAX_BATCH * (n + 2) * 2 + copies, max_packet);
        Runner {
            fast,
            fast_in: Batch::with_capacity(cap),
            rng: chain.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1,
            cx: Context { ports: chain.ports },
            chain,
            pool,
            inbox,
            spare: Batch::with_capacity(cap),
            link: LinkKind::Ethernet,
            check: cfg!(debug_assertions).then(|| Snapshot::new(cap)),
            violation: None,
            control: None,
            shift: 0,
            counters,
            sinks: Vec::new(),
            rx: vec![0; ports],
            tx: vec![0; ports],
        }
    }

    /// Checks after every NF call that the NF wrote only what its profile declares
    /// (on by default in debug builds). A violation ends the run with an error naming it.
    pub fn check_profiles(&mut self, on: bool) {
        let cap = self.spare.capacity();
        self.check = on.then(|| Snapshot::new(cap));
    }

    pub fn chain(&self) -> &Chain {
        &self.chain
    }

    /// Opens the sinks' output files. Errors name the file.
    fn open_sinks(&mut self, trace: &Trace, opts: &RunOptions) -> anyhow::Result<()> {
        self.sinks = Vec::with_capacity(self.chain.nodes.len());
        for node in &self.chain.nodes {
            let NodeKind::Sink { path } = &node.kind else {
                self.sinks.push(None);
                continue;
            };
            let path = opts
                .outputs
                .iter()
                .find(|(n, _)| *n == node.name)
                .map(|(_, p)| p.clone())
                .or_else(|| path.clone());
            let writer =
                match &path {
                    Some(p) => Some(PcapWriter::create(p, trace.header()).map_err(|e| {
                        anyhow::anyhow!("{}: cannot create output: {e}", p.display())
                    })?),
                    None => None,
                };
            self.sinks.push(Some(SinkState {
                writer,
                path,
                write_error: None,
                flooded: 0,
            }));
        }
        Ok(())
    }

    /// Runs the whole trace (`opts.loops` times) through the chain.
    pub fn run(
        &mut self,
        trace: &Trace,
        opts: &RunOptions,
        progress: &mut dyn Progress,
    ) -> anyhow::Result<Summary> {
        self.open_sinks(trace, opts)?;
        self.link = trace.link();
        let (bytes, recs) = trace.raw();
        let total = recs.len() as u64 * opts.loops;
        let span = trace.span_ns();
        let start = Instant::now();
        let mut done = 0u64;
        let mut next_report = 0u64;
        let mut schedule = opts.schedule.clone();
        schedule.sort_by_key(|c| c.at);
        // Compiled before the first packet, so applying one at its packet is a swap.
        let mut prepared = Vec::with_capacity(schedule.len());
        for c in &schedule {
            prepared.push(self.prepare(&c.nf, &c.cmd).map_err(|e| {
                anyhow::anyhow!("change at packet {}: `{} {}`: {e}", c.at, c.nf, c.cmd)
            })?);
        }
        let mut next_change = 0;
        for lp in 0..opts.loops {
            self.shift = span.wrapping_mul(lp);
            let mut pos = 0;
            while pos < recs.len() {
                // A batch ends where a scheduled change applies, so the change falls
                // exactly between the packets it names.
                while let Some(c) = schedule.get(next_change).filter(|c| c.at <= done) {
                    let p = prepared[next_change].as_mut();
                    self.apply_prepared(&c.nf, &c.cmd, p).map_err(|e| {
                        anyhow::anyhow!("change at packet {}: `{} {}`: {e}", c.at, c.nf, c.cmd)
                    })?;
                    next_change += 1;
                }
                let mut end = (pos + MAX_BATCH).min(recs.len());
                if let Some(c) = schedule.get(next_change) {
                    end = end.min(pos + (c.at - done).max(1) as usize);
                }
                self.poll_control();
                self.ingest(bytes, &recs[pos..end]);
                if self.fast.is_some() {
                    self.fast_chunk();
                } else {
                    self.drain(None);
                }
                if let Some(v) = self.violation.take() {
                    anyhow::bail!("{v}");
                }
                done += (end - pos) as u64;
                pos = end;
                if done >= next_report {
                    progress.update(done, total);
                    next_report = done + 65_536;
                }
            }
        }
        if let Some(c) = schedule.get(next_change) {
            anyhow::bail!(
                "change at packet {} is past the end of the input ({done} packets)",
                c.at
            );
        }
        let seconds = start.elapsed().as_secs_f64();
        self.settle_counts();
        // NFs that report at the end (flow records) do it now, before the summary.
        for n in &mut self.chain.nodes {
            if let NodeKind::Nf { nf, .. } = &mut n.kind {
                nf.finish();
            }
        }
        progress.finish();
        self.summary(trace, opts, seconds)
    }

    /// Takes commands from a control socket to be applied between batches.
    pub fn attach_control(&mut self, port: ControlPort) {
        self.control = Some(port);
    }

    /// Applies `cmd` to the NF named `nf` now (between batches).
    pub fn apply(&mut self, nf: &str, cmd: &str) -> Result<String, String> {
        self.apply_prepared(nf, cmd, None)
    }

    /// The NFs whose commands are compiled before they reach the worker, by name.
    pub fn preparers(&self) -> std::collections::HashMap<String, Preparer> {
        let mut m = std::collections::HashMap::new();
        for n in &self.chain.nodes {
            if let NodeKind::Nf { nf, .. } = &n.kind {
                if let Some(p) = nf.preparer() {
                    m.insert(n.name.clone(), p);
                }
            }
        }
        m
    }

    /// `cmd` for NF `nf` compiled now, when that NF compiles its commands (else None).
    fn prepare(&self, nf: &str, cmd: &str) -> Result<Option<Prepared>, String> {
        let node = self.chain.node(nf).map(|i| &self.chain.nodes[i].kind);
        match node {
            Some(NodeKind::Nf { nf, .. }) => nf.preparer().map(|p| p(cmd)).transpose(),
            _ => Ok(None),
        }
    }

    /// Applies `cmd` (with its compiled form, if any) to the NF named `nf` now; on
    /// success `prepared` holds what the change replaced.
    pub fn apply_prepared(
        &mut self,
        nf: &str,
        cmd: &str,
        prepared: Option<&mut Prepared>,
    ) -> Result<String, String> {
        let names = |c: &Chain| {
            c.nodes
                .iter()
                .filter(|n| matches!(n.kind, NodeKind::Nf { .. }))
                .map(|n| n.name.clone())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let Some(i) = self.chain.node(nf) else {
            return Err(format!("no NF named `{nf}` (NFs: {})", names(&self.chain)));
        };
        if !matches!(self.chain.nodes[i].kind, NodeKind::Nf { .. }) {
            return Err(format!("`{nf}` is not an NF (NFs: {})", names(&self.chain)));
        }
        // The NF's counters are whole before it answers or changes.
        self.settle_counts();
        let r = match (&mut self.chain.nodes[i].kind, prepared) {
            (NodeKind::Nf { nf, .. }, Some(p)) => nf.control_prepared(cmd, p),
            (NodeKind::Nf { nf, .. }, None) => nf.control(cmd),
            _ => return Err(format!("`{nf}` is not an NF")),
        };
        // Every entry recorded through this NF is stale now: gone before the next packet.
        if let (Ok(_), Some(f)) = (&r, self.fast.as_deref_mut()) {
            f.stats.invalidated += f.table.remove_through(i);
        }
        r
    }

    /// Adds the hits FastPath entries hold (and retired entries held) to the per-NF
    /// counters and to the NFs that count in entries.
    fn settle_counts(&mut self) {
        if let Some(f) = self.fast.as_deref_mut() {
            let (chain, counters) = (&mut self.chain, &mut self.counters);
            f.table
                .drain_counts(|n, path| add_counts(chain, counters, path, n));
        }
    }
}

/// `n` packets took a consolidated path: each NF on it counts them as the slow path
/// would have, per verdict, and so do NFs whose state function only counts.
fn add_counts(chain: &mut Chain, counters: &mut [NodeCounters], path: &[Step], n: u64) {
    for s in path {
        let i = s.node();
        if let Some(c) = counters.get_mut(i) {
            c.packets_in += n;
            match s.verdict {
                Verdict::Out(o) => c.out[o as usize] += n,
                Verdict::Drop(r) => c.drops[r as usize] += n,
            }
        }
        if s.flags & Step::COUNT != 0 {
            if let Some(NodeKind::Nf { nf, .. }) = chain.nodes.get_mut(i).map(|n| &mut n.kind) {
                nf.fast_count(s.token, n);
            }
        }
    }
}

impl Runner {
    /// Drains pending control commands; when none are pending this is one atomic load.
    #[inline]
    fn poll_control(&mut self) {
        let Some(port) = &self.control else { return };
        let pending: Vec<Command> = port.rx.try_iter().collect();
        for mut c in pending {
            let result = self.apply_prepared(&c.nf, &c.cmd, c.prepared.as_mut());
            if let Some(reply) = c.reply {
                // What the change replaced is freed by the sender's thread.
                let replaced = c.prepared.take();
                let _ = reply.send(Reply { result, replaced });
            }
        }
    }

    /// Copies one chunk of records into pool buffers, as a NIC would, and queues them at
    /// the input's successor.
    #[inline]
    fn ingest(&mut self, bytes: &[u8], chunk: &[crate::io::Record]) {
        let shift = self.shift;
        let first = self.chain.nodes[0].next[0];
        let max = self.pool.max_packet();
        let c = &mut self.counters[0];
        for r in chunk {
            c.packets_in += 1;
            c.bytes_in += r.caplen as u64;
            if r.caplen as usize > max {
                c.drops[OVERSIZE] += 1;
                continue;
            }
            let Some(mut p) = self.pool.alloc_raw() else {
                c.drops[1] += 1;
                continue;
            };
            // Lemire's multiply-shift maps the xorshift draw onto 0..ports without a divide.
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            let in_port = (((self.rng >> 32) * self.cx.ports as u64) >> 32) as u16;
            self.rx[in_port as usize] += 1;
            let off = r.off as usize;
            // set_bytes resets the decoded offsets, flow hash and verdict; the rest is here.
            p.set_bytes(&bytes[off..off + r.caplen as usize]);
            let m = p.meta_mut();
            m.ts_ns = r.ts_ns.wrapping_add(shift);
            m.wire_len = r.wire_len;
            m.in_port = in_port;
            m.egress = NO_PORT;
            m.link = self.link;
            m.fast = FastMark::Off;
            m.fast_rec = NOT_RECORDED;
            c.out[0] += 1;
            self.inbox[first].push(p);
        }
    }
}

impl Runner {
    /// Runs every node that has packets waiting, in graph order, until all reach a sink
    /// or are dropped.
    #[inline]
    fn drain(&mut self, fast: Option<&mut FastPath>) {
        // Recording hooks run only while FastPath records a first packet.
        let mut fast = fast.filter(|f| f.rec.active());
        let Runner {
            chain,
            pool,
            inbox,
            spare,
            counters,
            sinks,
            tx,
            cx,
            check,
            violation,
            shift,
            ..
        } = self;
        for &n in &chain.order {
            if inbox[n].is_empty() {
                continue;
            }
            std::mem::swap(spare, &mut inbox[n]);
            let node = &mut chain.nodes[n];
            let c = &mut counters[n];
            c.packets_in += spare.len() as u64;
            match &mut node.kind {
                NodeKind::Nf { nf, kind } => {
                    if let Some(snap) = check.as_mut() {
                        snap.take(spare);
                    }
                    if let Some(f) = fast.as_deref_mut() {
                        let (g, ok, w) = (f.flags[n], f.consolidable[n], f.writes[n]);
                        for p in spare.iter_mut() {
                            f.rec.before(n, g, ok, w, p);
                        }
                    }
                    nf.process(spare, cx);
                    if let Some(f) = fast.as_deref_mut() {
                        let last = node.next.len().saturating_sub(1);
                        for p in spare.iter_mut() {
                            let v = match p.meta().verdict {
                                Verdict::Out(o) => Verdict::Out((o as usize).min(last) as u8),
                                d => d,
                            };
                            f.rec.after(p, v, f.writes[n]);
                        }
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
                        let mut dropped = 0;
                        for p in spare.iter() {
                            if let Verdict::Drop(r) = p.meta().verdict {
                                c.drops[r as usize] += 1;
                                dropped += 1;
                            }
                        }
                        c.out[0] += (spare.len() - dropped) as u64;
                        if dropped == 0 && inbox[t].is_empty() {
                            // The common case: the whole batch moves on by a pointer swap.
                            std::mem::swap(spare, &mut inbox[t]);
                        } else {
                            for p in spare.drain() {
                                match p.meta().verdict {
                                    Verdict::Out(_) => inbox[t].push(p),
                                    Verdict::Drop(_) => pool.free(p),
                                }
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
                        for p in spare.iter_mut() {
                            f.rec.at_sink(n, p, &f.writes_eth);
                        }
                    }
                    for p in spare.drain() {
                        to_sink(s, c, tx, *shift, &p);
                        pool.free(p);
                    }
                }
                NodeKind::Input => {}
            }
        }
    }

    /// FastPath over the chunk just ingested: packets are looked up in arrival order;
    /// hits go along their entry at once, misses gather and run the chain (recorded)
    /// before the next hit, so every NF sees events in the order it would without
    /// FastPath.
    fn fast_chunk(&mut self) {
        let Some(mut f) = self.fast.take() else {
            self.drain(None);
            return;
        };
        let first = self.chain.nodes[0].next[0];
        std::mem::swap(&mut self.fast_in, &mut self.inbox[first]);
        let mut input = std::mem::replace(&mut self.fast_in, Batch::with_capacity(0));
        // Keys and hashes first with each set's tags prefetched, then the matching
        // entries prefetched, so the chunk's lookups overlap their cache misses.
        let mut keys = [FpKey::EMPTY; MAX_BATCH];
        let mut hashes = [0u64; MAX_BATCH];
        // Bit i: packet i is IP (has a key).
        let mut keyed = 0u64;
        for (i, p) in input.iter_mut().enumerate() {
            if let Some(k) = FpKey::of(p) {
                let h = f.table.hash(&k);
                f.table.prefetch_tags(h);
                keys[i] = k;
                hashes[i] = h;
                keyed |= 1 << i;
            }
        }
        // Then each set's tags compared once, the matching entries prefetched (their
        // first line, or two when hits may call NFs).
        let mut probes = [Probe::NONE; MAX_BATCH];
        let mut m = keyed;
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            probes[i] = f.table.probe(hashes[i], f.calls);
            m &= m - 1;
        }
        // Then, in chains that rewrite or have NF state to load, the entries' actions and
        // the NF state their tokens name (NAT mappings, tracked connections).
        let mut ways = [None; MAX_BATCH];
        let ways_found = f.prefetch || f.rewrites;
        if ways_found {
            let mut m = keyed;
            while m != 0 {
                let i = m.trailing_zeros() as usize;
                m &= m - 1;
                ways[i] = f.table.way_in(probes[i], &keys[i]);
                let Some(w) = ways[i] else {
                    continue;
                };
                let e = f.table.entry(w);
                if e.rewrites() {
                    f.table.prefetch_actions(w);
                }
                if f.prefetch {
                    for s in e.path() {
                        if let Some(NodeKind::Nf { nf, .. }) =
                            self.chain.nodes.get(s.node()).map(|n| &n.kind)
                        {
                            nf.fast_prefetch(s.token);
                        }
                    }
                }
            }
        }
        // The probes hold until the first flush or deferral inserts entries.
        let mut probes_hold = true;
        for (i, p) in input.drain().enumerate() {
            let now = p.meta().ts_ns;
            if keyed & 1 << i == 0 {
                f.stats.misses += 1;
                self.inbox[first].push(p);
                continue;
            }
            let (key, h) = (&keys[i], hashes[i]);
            if key.ends_flow(p.data()) {
                if f.table.remove_key(key) {
                    f.stats.ended += 1;
                }
                f.stats.misses += 1;
                self.inbox[first].push(p);
                continue;
            }
            let way = if !probes_hold {
                f.table.way(key, h)
            } else if ways_found {
                ways[i].filter(|&w| f.table.live(w))
            } else {
                f.table.way_in(probes[i], key).filter(|&w| f.table.live(w))
            };
            let mut found = f.table.find_at(way, now);
            if matches!(found, Found::Hit(_)) && !self.inbox[first].is_empty() {
                // Earlier misses go first; they may change what the entry relies on.
                self.flush(&mut f);
                probes_hold = false;
                found = f.table.find(key, h, now);
            }
            let p = match found {
                Found::Hit(w) => match self.fast_hit(&mut f, w, key, p) {
                    None => continue,
                    Some(p) => p,
                },
                Found::Refusal(w) => {
                    // A remembered refusal: the chain, in order with the other misses,
                    // unrecorded but for every RETRY_AFTER-th packet.
                    if !f.table.count_down(w) {
                        f.stats.misses += 1;
                        f.stats.unrecorded += 1;
                        self.inbox[first].push(p);
                        continue;
                    }
                    p
                }
                Found::Expired | Found::Miss => {
                    if found == Found::Expired {
                        f.stats.expired += 1;
                    }
                    if f.record_at > 1 {
                        // Unrecorded now; the entry that counts the flow's packets is
                        // installed at once, so the probes are stale.
                        f.defer(*key, now);
                        probes_hold = false;
                        f.stats.misses += 1;
                        self.inbox[first].push(p);
                        continue;
                    }
                    p
                }
            };
            let mut p = p;
            f.stats.misses += 1;
            f.rec.begin(&mut p, *key, &mut self.pool);
            self.inbox[first].push(p);
        }
        self.fast_in = input;
        self.flush(&mut f);
        // Entries that went this chunk hand over their counts.
        let (chain, counters) = (&mut self.chain, &mut self.counters);
        f.table
            .drain_retired(|n, path| add_counts(chain, counters, path, n));
        self.fast = Some(f);
    }

    /// Runs the gathered misses through the chain and files their recordings.
    fn flush(&mut self, f: &mut FastPath) {
        let first = self.chain.nodes[0].next[0];
        if self.inbox[first].is_empty() {
            return;
        }
        self.drain(Some(f));
        let FastPath {
            rec, table, stats, ..
        } = f;
        rec.finish(&mut self.pool, |e, k, o| {
            FastPath::settle(table, stats, e, k, o)
        });
    }

    /// Sends `p` along entry `w`: validity checks of every NF on the path first, then
    /// their state functions and counters, then the consolidated rewrite. Gives the
    /// packet back when a check fails (the entry is dropped; the slow path takes it).
    #[inline(always)]
    fn fast_hit(
        &mut self,
        f: &mut FastPath,
        w: usize,
        key: &FpKey,
        mut p: Packet,
    ) -> Option<Packet> {
        let Runner {
            chain,
            pool,
            counters,
            sinks,
            tx,
            shift,
            ..
        } = self;
        let (e, actions, keys) = f.table.entry_parts(w);
        if p.len() < e.min_len as usize || e.matches_eth() && !actions.eth_matches(p.data()) {
            return Some(p);
        }
        let now = p.meta().ts_ns;
        if e.calls() {
            let m = p.meta();
            let mut fp = FastPacket {
                key: &keys.keys[0],
                fragment: key.layer_flags() & Layers::FRAGMENT != 0,
                ts_ns: m.ts_ns,
                wire_len: m.wire_len,
                tcp_flags: key.tcp_flags(p.data()),
            };
            let path = e.path();
            // Every check before any state function, so a failed one leaves no trace.
            for s in path.iter().filter(|s| s.flags & Step::CHECK != 0) {
                let ok = match chain.nodes.get(s.node()).map(|n| &n.kind) {
                    Some(NodeKind::Nf { nf, .. }) => {
                        // A reference only: the key is read by the NFs that need it.
                        fp.key = &keys.keys[s.key_index()];
                        nf.fast_valid(s.token, &fp)
                    }
                    _ => false,
                };
                if !ok {
                    f.table.remove(w);
                    f.stats.invalidated += 1;
                    return Some(p);
                }
            }
            for s in path.iter().filter(|s| s.flags & Step::STATE != 0) {
                if let Some(NodeKind::Nf { nf, .. }) =
                    chain.nodes.get_mut(s.node()).map(|n| &mut n.kind)
                {
                    fp.key = &keys.keys[s.key_index()];
                    nf.fast_state(s.token, &fp);
                }
            }
        }
        if let Some(k) = e.sink() {
            if e.rewrites() {
                actions.apply(p.data_mut());
            }
            p.meta_mut().egress = e.egress;
            if let Some(c) = counters.get_mut(k) {
                c.packets_in += 1;
                if let Some(Some(s)) = sinks.get_mut(k) {
                    to_sink(s, c, tx, *shift, &p);
                }
            }
        }
        pool.free(p);
        if f.table.hit(w, now) {
            let (n, path) = f.table.take_count(w);
            add_counts(chain, counters, path, n as u64);
        }
        f.stats.hits += 1;
        None
    }

    fn summary(
        &mut self,
        trace: &Trace,
        opts: &RunOptions,
        seconds: f64,
    ) -> anyhow::Result<Summary> {
        let nodes = &self.chain.nodes;
        let mut nfs = Vec::new();
        let mut sinks = Vec::new();
        let mut dropped = 0u64;
        let mut out = 0u64;
        let mut bytes_out = 0u64;
        for (i, node) in nodes.iter().enumerate() {
            let c = &self.counters[i];
            dropped += c.packets_dropped();
            let pairs = |names: &[&str], v: &[u64]| -> Vec<(String, u64)> {
                names
                    .iter()
                    .zip(v)
                    .map(|(k, n)| (k.to_string(), *n))
                    .collect()
            };
            match &node.kind {
                NodeKind::Input => {}
                NodeKind::Nf { kind, nf } => {
                    if c.packets_in != c.packets_out() + c.packets_dropped() {
                        anyhow::bail!(
                            "internal error: NF `{}` lost packets: in {}, out {}, dropped {}",
                            node.name,
                            c.packets_in,
                            c.packets_out(),
                            c.packets_dropped()
                        );
                    }
                    nfs.push(NfSummary {
                        name: node.name.clone(),
                        kind: kind.clone(),
                        packets_in: c.packets_in,
                        packets_out: c.packets_out(),
                        packets_dropped: c.packets_dropped(),
                        drops: pairs(&node.drop_reasons, &c.drops),
                        outputs: pairs(&node.outputs, &c.out),
                        stats: nf
                            .stats()
                            .into_iter()
                            .map(|(k, v)| (k.into_owned(), v))
                            .collect(),
                    })
                }
                NodeKind::Sink { .. } => {
                    let Some(s) = self.sinks[i].take() else {
                        continue;
                    };
                    out += c.packets_in;
                    bytes_out += c.bytes_in;
                    if let Some(w) = s.writer {
                        w.finish().map_err(|e| {
                            anyhow::anyhow!(
                                "{}: writing failed: {e}",
                                s.path
                                    .as_ref()
                                    .map_or(String::new(), |p| p.display().to_string())
                            )
                        })?;
                    }
                    if let Some(e) = s.write_error {
                        anyhow::bail!(
                            "{}: writing failed: {e}",
                            s.path
                                .as_ref()
                                .map_or(String::new(), |p| p.display().to_string())
                        );
                    }
                    sinks.push(SinkSummary {
                        name: node.name.clone(),
                        packets: c.packets_in,
                        bytes: c.bytes_in,
                        flooded: s.flooded,
                        path: s.path.map(|p| p.display().to_string()),
                    });
                }
            }
        }
        let input = &self.counters[0];
        if input.packets_in != out + dropped || self.pool.available() != self.pool.size() {
            anyhow::bail!(
                "internal error: conservation violated: in {}, out {out}, dropped {dropped}, buffers held {}",
                input.packets_in,
                self.pool.size() - self.pool.available()
            );
        }
        let secs = seconds.max(1e-9);
        Ok(Summary {
            chain: self.chain.name.clone(),
            input: String::new(),
            loops: opts.loops,
            packets_in: input.packets_in,
            packets_out: out,
            packets_dropped: dropped,
            bytes_in: input.bytes_in,
            bytes_out,
            seconds,
            mpps: input.packets_in as f64 / secs / 1e6,
            data_rate_gbps: input.bytes_in as f64 * 8.0 / secs / 1e9,
            throughput_gbps: bytes_out as f64 * 8.0 / secs / 1e9,
            input_drops: INPUT_DROPS
                .iter()
                .zip(&input.drops)
                .map(|(k, n)| (k.to_string(), *n))
                .collect(),
            nfs,
            ports: (0..self.chain.ports)
                .map(|p| PortSummary {
                    port: p,
                    rx: self.rx[p as usize],
                    tx: self.tx[p as usize],
                })
                .collect(),
            sinks,
            input_error: trace.error().map(|e| e.to_string()),
            fastpath: self.fast.as_ref().map(|f| f.stats),
        })
    }
}

/// Counts and writes one packet at a sink.
#[inline]
fn to_sink(s: &mut SinkState, c: &mut NodeCounters, tx: &mut [u64], shift: u64, p: &Packet) {
    let m = p.meta();
    c.bytes_in += p.len() as u64;
    match m.egress {
        FLOOD => {
            s.flooded += 1;
            for (port, t) in tx.iter_mut().enumerate() {
                *t += (port != m.in_port as usize) as u64;
            }
        }
        NO_PORT => {}
        e => {
            if let Some(t) = tx.get_mut(e as usize) {
                *t += 1;
            }
        }
    }
    if let Some(w) = s.writer.as_mut() {
        if let Err(e) = w.write_packet(m.ts_ns.wrapping_sub(shift), m.wire_len, p.data()) {
            s.write_error = Some(e.to_string());
            s.writer = None;
        }
    }
}

/// No progress output (tests, benchmarks).
pub struct NoProgress;

impl Progress for NoProgress {
    fn update(&mut self, _: u64, _: u64) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfs::{Nf, Profile};
    use crate::packet::Fields;

    /// Decrements the TTL but declares only the egress port.
    struct Rogue(Profile);

    impl Nf for Rogue {
        fn profile(&self) -> &Profile {
            &self.0
        }
        fn process(&mut self, b: &mut Batch, _: &Context) {
            for p in b {
                let o = p.layers().l3_off as usize;
                p.data_mut()[o + 8] -= 1;
            }
        }
    }

    fn rogue(writes: Fields) -> Box<dyn Nf> {
        Box::new(Rogue(Profile {
            reads: Fields::NONE,
            writes,
            may_drop: false,
            changes_length: false,
            per_flow_state: false,
            outputs: &["out"],
            drop_reasons: &[],
        }))
    }

    fn trace() -> Trace {
        let mut f = [0u8; 60];
        f[12] = 8;
        f[14] = 0x45;
        f[22] = 64;
        let h = crate::io::PcapHeader::new(1, false);
        Trace::from_packets(LinkKind::Ethernet, h, (0..40).map(|i| (i, &f[..])))
    }

    #[test]
    fn undeclared_write_is_caught() {
        let chain = Chain::linear("t", 1, 1, vec![("bad".into(), rogue(Fields::EGRESS))]);
        let mut r = Runner::new(chain, 60);
        r.check_profiles(true);
        let e = r
            .run(&trace(), &RunOptions::default(), &mut NoProgress)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "NF `bad` (custom) wrote ip.ttl without declaring it in its profile"
        );
    }

    #[test]
    fn declared_write_passes_and_counts_balance() {
        let chain = Chain::linear("t", 1, 1, vec![("ok".into(), rogue(Fields::IP_TTL))]);
        let mut r = Runner::new(chain, 60);
        r.check_profiles(true);
        let s = r
            .run(&trace(), &RunOptions::default(), &mut NoProgress)
            .unwrap();
        assert_eq!(
            (s.packets_in, s.packets_out, s.packets_dropped),
            (40, 40, 0)
        );
    }
}
