//! The run-to-completion worker: the trace in chunks of a batch, each ingested and walked
//! through the chain (or sorted by FastPath into hits and misses first), with control
//! commands applied between chunks. The walk itself is in `walk.rs`, the input side in
//! `ingest.rs`, the sinks in `sink.rs`, the summary in `summary.rs`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use super::chain::{Chain, NodeKind};
use super::control::{Command, ControlPort, Reply, Scheduled};
use super::counters::Summary;
use super::profile_check::Snapshot;
use super::ring::Msg;
use super::rss::STEP;
use super::stage::Staged;
use super::walk::{Walk, NEXT_STAGE_STOPPED};
use crate::io::{After, PcapHeader, Source, Trace, TraceSource};

mod live;
mod queue;
mod stream;
use super::fastpath_host::AutoRun;
use crate::nfs::{Prepared, Preparer};
use crate::optimise::fastpath::{self, Auto, FastPath};
use crate::packet::MAX_BATCH;
pub use live::Live;

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
    /// Set (by a SIGINT/SIGTERM handler) to end a replay early: read between batches,
    /// the run then ends as at the end of its input, every packet taken in processed
    /// and written, and its summary made.
    pub stop: Option<&'static AtomicBool>,
}

impl RunOptions {
    /// Whether the run was asked to stop: one atomic load, between batches.
    #[inline]
    pub(super) fn stopped(&self) -> bool {
        self.stop.is_some_and(|s| s.load(Ordering::Relaxed))
    }
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            loops: 1,
            outputs: Vec::new(),
            schedule: Vec::new(),
            stop: None,
        }
    }
}

pub struct Runner {
    pub(super) walk: Walk,
    /// FastPath state when the chain has it on.
    fast: Option<Box<FastPath>>,
    /// Where live changes come from (the Unix socket, the HTTP API).
    control: Vec<ControlPort>,
    /// The chain file as loaded, when the run may reload it (`* reload`, SIGHUP).
    reload: Option<Box<super::reload::Base>>,
    /// `fastpath = "auto"`: when consolidation is on, chunk by chunk.
    auto: Option<AutoRun>,
    /// Packets between progress reports (a test hook changes it).
    report_every: u64,
    /// microNF stages after the first (which is this walk), when the chain has them.
    stages: Option<Box<Staged>>,
}

impl Runner {
    /// Whether the chain runs on stage threads besides this one (`stages = …`).
    pub(super) fn staged(&self) -> bool {
        self.stages.is_some()
    }

    /// Prepares a run of `chain` over packets of at most `max_packet` bytes.
    pub fn new(chain: Chain, max_packet: usize) -> Runner {
        let cap = Walk::batch_cap(&chain);
        // Of the whole chain, before stages take their NFs.
        let lookahead = super::walk::lookahead_reach(&chain);
        let nfs = chain.nf_slots();
        // issue 18 (fastpath): auto that stays off from the chain makes a plain run (no
        // FastPath state, the plain pool, filters fused).
        let off_from_chain = (chain.fastpath.is_some() && chain.fastpath_auto)
            .then(|| fastpath::auto_static_off(&nfs))
            .flatten();
        let plain = off_from_chain.is_some();
        let wanted = chain.fastpath.filter(|_| !plain);
        // issue 18 (fastpath): auto builds FastPath at its first trial (AutoRun::unpark).
        let fast = wanted
            .filter(|_| !chain.fastpath_auto)
            .map(|cfg| Box::new(FastPath::new(cfg, &nfs, cap)));
        drop(nfs);
        let auto = match off_from_chain {
            Some(why) => Some(AutoRun::new(Auto::off_from_chain(why), None)),
            None => wanted
                .filter(|_| chain.fastpath_auto)
                .map(|cfg| AutoRun::new(Auto::new(), Some((cfg, cap)))),
        };
        let mut chain = chain;
        let stages = (chain.stages() > 1 && wanted.is_none())
            .then(|| Box::new(Staged::split(&mut chain, max_packet)));
        // issue 20 (e2e): consecutive ip_filters classified once (plain runs only).
        let kept = chain.fastpath.take_if(|_| plain); // issue 18 (fastpath)
        super::fuse_filters::fuse_filters(&mut chain);
        chain.fastpath = chain.fastpath.or(kept); // issue 18 (fastpath)
                                                  // issue 18 (fastpath): FastPath's recordings make their own buffers when they start.
        let mut walk = Walk::new(chain, max_packet, false);
        walk.lookahead = lookahead;
        if let Some(s) = &stages {
            s.first(&mut walk, max_packet);
        }
        Runner {
            walk,
            fast,
            control: Vec::new(),
            reload: None,
            auto,
            report_every: 65_536,
            stages,
        }
    }

    /// Checks after every NF call that the NF wrote only what its profile declares
    /// (on by default in debug builds). A violation ends the run with an error naming it.
    pub fn check_profiles(&mut self, on: bool) {
        let cap = self.walk.spare.capacity();
        self.walk.check = on.then(|| Snapshot::new(cap));
        if let Some(s) = self.stages.as_mut() {
            for w in s.walks_mut() {
                w.check = on.then(|| Snapshot::new(cap));
            }
        }
    }

    /// Test hook: with `fastpath = "auto"`, switch consolidation exactly before these
    /// chunks (0-based; a chunk is up to a batch of packets, cut at scheduled changes)
    /// instead of by measured cost, so tests can check that switching never changes output.
    #[doc(hidden)]
    pub fn force_auto_switches(&mut self, at: Vec<u64>) {
        // issue 18 (fastpath): not on a chain auto leaves off from the chain (a plain run).
        if let Some(a) = self.auto.as_mut() {
            if a.auto.stats.static_off.is_none() {
                a.auto = Auto::forced(at);
            }
        }
    }

    /// Test hook: a progress report every `packets` packets (65,536 by default), so
    /// tests can check that reports change nothing (auto's decisions included).
    #[doc(hidden)]
    pub fn report_every(&mut self, packets: u64) {
        self.report_every = packets.max(1);
    }

    pub fn chain(&self) -> &Chain {
        &self.walk.chain
    }

    /// Runs the whole trace (`opts.loops` times) through the chain.
    pub fn run(
        &mut self,
        trace: &Trace,
        opts: &RunOptions,
        progress: &mut dyn Progress,
    ) -> anyhow::Result<Summary> {
        self.run_source(&mut TraceSource::new(trace), opts, progress)
    }

    /// Opens the sinks and the NFs' own files (flow records, alerts): a path that cannot
    /// be written is an error before the first packet.
    fn open_outputs(&mut self, header: PcapHeader, opts: &RunOptions) -> anyhow::Result<()> {
        self.walk.open_sinks(header, &opts.outputs)?;
        self.walk.open_nf_outputs()?;
        if let Some(s) = self.stages.as_mut() {
            s.start(&mut self.walk)?;
        }
        Ok(())
    }

    /// Stages: the buffers later stages freed come back; waits for a chunk's worth.
    #[inline]
    fn stage_room(&mut self) -> anyhow::Result<()> {
        let Some(s) = self.stages.as_mut() else {
            return Ok(());
        };
        if s.room(&mut self.walk).is_err() {
            return self.stage_failed(None);
        }
        Ok(())
    }

    /// Stages: the chunk is whole; later stages may walk it.
    #[inline]
    fn end_chunk(&mut self) -> anyhow::Result<()> {
        let Some(o) = self.walk.out.as_mut() else {
            return Ok(());
        };
        let shift = self.walk.shift;
        if o.end(shift).is_err() {
            return self.stage_failed(None);
        }
        if self.walk.violation.as_deref() == Some(NEXT_STAGE_STOPPED) {
            self.walk.violation = None;
            return self.stage_failed(None);
        }
        Ok(())
    }

    /// A stage stopped: the others end and the run stops with the first cause.
    fn stage_failed(&mut self, otherwise: Option<String>) -> anyhow::Result<()> {
        if let Some(s) = self.stages.as_mut() {
            s.join(&mut self.walk)?;
        }
        anyhow::bail!(otherwise.unwrap_or_else(|| "a stage stopped".into()))
    }

    /// Runs a source (`opts.loops` passes) through the chain, chunk by chunk as it reads.
    pub fn run_source(
        &mut self,
        src: &mut dyn Source,
        opts: &RunOptions,
        progress: &mut dyn Progress,
    ) -> anyhow::Result<Summary> {
        self.open_outputs(src.header(), opts)?;
        self.walk.link = src.link();
        let start = Instant::now();
        let mut done = 0u64;
        let (mut next_report, mut next_look) = (0u64, 0u64);
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
        let mut started = false;
        // A mapped input lasts the whole process: packets view it instead of copying.
        let lasting = src.lasting();
        // Viewed packets are first touched by the NFs: a source that can, loads the next
        // chunk's header lines while this one is worked on, when the chain reads them. A
        // copy's first touch is its ingest (`prefetch = k` serves that).
        src.set_lookahead(lasting.map_or(0, |_| self.walk.lookahead));
        let mut stopped = false;
        'replay: for lp in 0..opts.loops {
            // Each loop after the first shifts time by the first loop's span.
            if lp > 0 && !src.rewind() {
                break;
            }
            self.walk.shift = src.span_ns().wrapping_mul(lp);
            loop {
                if opts.stopped() {
                    stopped = true;
                    break 'replay;
                }
                // A batch ends where a scheduled change applies, so the change falls
                // exactly between the packets it names.
                while let Some(c) = schedule.get(next_change).filter(|c| c.at <= done) {
                    let p = prepared[next_change].as_mut();
                    self.apply_prepared(&c.nf, &c.cmd, p).map_err(|e| {
                        anyhow::anyhow!("change at packet {}: `{} {}`: {e}", c.at, c.nf, c.cmd)
                    })?;
                    next_change += 1;
                }
                let mut want = MAX_BATCH;
                if let Some(c) = schedule.get(next_change) {
                    want = want.min((c.at - done).max(1) as usize);
                }
                // The run clock looks one packet ahead, across loops too.
                let shift = self.walk.shift;
                let after_of = |next: After| match next {
                    After::Record(t) => Some(t.wrapping_add(shift)),
                    After::PassEnd(t) if lp + 1 < opts.loops => Some(t.wrapping_add(shift)),
                    _ => None,
                };
                // A mapped trace is read straight into the packets when nothing runs
                // between reading and ingesting (no stages, no control port; the clock
                // started): a chunk is all this worker's, its indices start over.
                let direct = match src.mapped() {
                    Some(m) if started && self.stages.is_none() && self.control.is_empty() => {
                        self.walk.passed = 0;
                        self.walk.ingest_mapped(m, want, done, after_of)
                    }
                    _ => None,
                };
                let mut read = None;
                let n = match direct {
                    Some(n) => n as u64,
                    None => {
                        let r = src.next_chunk(want);
                        if r.1.is_empty() {
                            break;
                        }
                        let n = r.1.len() as u64;
                        read = Some(r);
                        n
                    }
                };
                self.poll_control();
                if let Some((bytes, chunk, next)) = read {
                    if !started {
                        started = true;
                        self.walk.clock.start(chunk.iter().take(3).map(|r| r.ts_ns));
                    }
                    // A chunk is all this worker's: its indices start over each time.
                    self.walk.passed = 0;
                    self.stage_room()?;
                    self.walk
                        .ingest_all(lasting, bytes, chunk, done, after_of(next));
                }
                // issue 18 (fastpath): auto is looked at only here (parked FastPath while off).
                if done >= next_look {
                    if done >= next_report {
                        progress.update(done, src.records_hint().saturating_mul(opts.loops));
                        next_report = done + self.report_every;
                    }
                    let a = self
                        .auto
                        .as_mut()
                        .map(|a| a.look(&mut self.fast, &mut self.walk, done, n));
                    next_look = a.map_or(next_report, |a| a.min(next_report));
                }
                match self.fast.as_deref_mut() {
                    Some(f) => f.chunk(&mut self.walk),
                    None => self.walk.drain(None),
                }
                self.end_chunk()?;
                if let Some(v) = self.walk.violation.take() {
                    anyhow::bail!("{v}");
                }
                done += n;
            }
        }
        if let Some(a) = self.auto.as_mut() {
            a.end(&mut self.fast, done);
        }
        if let Some(c) = schedule.get(next_change).filter(|_| !stopped) {
            anyhow::bail!(
                "change at packet {} is past the end of the input ({done} packets)",
                c.at
            );
        }
        progress.finish();
        let seconds = start.elapsed().as_secs_f64();
        self.finish(src.error().map(|e| e.to_string()), opts, seconds)
    }

    /// Runs the records of `trace` that `share` lists (indices in the trace, ascending)
    /// `opts.loops` times: one worker of a sharded run. Scheduled changes apply by
    /// position in the whole input, so a worker given a share of it changes state
    /// between the same packets as one worker given all of it; the run clock steps over
    /// the other workers' records alike (the port is the position's, `ingest::port_of`). Commands from the control
    /// socket come through `gate` (this worker's number beside it) with the input
    /// position they apply at (runtime/shard_control.rs). `lasting`: `trace`'s bytes,
    /// when they last the process (packets then view them, see `Walk::ingest`).
    /// `share`'s entries and `tail` as `rss::Shares::take` gives them, with the trace's
    /// span (`Trace::span_ns`, found by the placement pass); returns how many of the
    /// others' records this worker stepped over one by one. `queue`: the share's records
    /// copied into this worker's own memory (`rss::Queue`, entry for entry), read
    /// instead of the trace's bytes (not with `lasting`).
    pub(super) fn run_share(
        &mut self,
        trace: &Trace,
        lasting: Option<&'static [u8]>,
        opts: &RunOptions,
        (share, tail, span, queue): (&[u32], bool, u64, Option<&super::rss::Queue>),
        gate: Option<(&super::shard_control::Gate, usize)>,
        progress: &mut dyn Progress,
    ) -> anyhow::Result<u64> {
        self.open_outputs(trace.header(), opts)?;
        self.walk.link = trace.link();
        // issue 18 (fastpath): auto is not looked at here: FastPath on throughout.
        if let (Some(a), None) = (self.auto.as_mut(), self.fast.as_ref()) {
            a.unpark(&mut self.fast, &self.walk);
        }
        let (bytes, recs) = trace.raw();
        let len = share.len();
        let input = recs.len() as u64 * opts.loops;
        let total = len as u64 * opts.loops;
        let mut done = 0u64;
        let mut next_report = 0u64;
        let mut schedule = opts.schedule.clone();
        schedule.sort_by_key(|c| c.at);
        let mut next_change = 0;
        let mut stepped = 0u64;
        let at = |k: usize| (share[k] & !STEP) as u64;
        // A live change handed over by the gate, applied at its input position.
        let mut live = None;
        self.walk.clock.start(recs.iter().take(3).map(|r| r.ts_ns));
        let mut stopped = false;
        'replay: for lp in 0..opts.loops {
            self.walk.shift = span.wrapping_mul(lp);
            let base = recs.len() as u64 * lp;
            // What follows this loop's last record: the next loop's first, if any.
            let after = recs
                .first()
                .filter(|_| lp + 1 < opts.loops)
                .map(|r| r.ts_ns.wrapping_add(span.wrapping_mul(lp + 1)));
            let mut pos = 0;
            // Where the next entry's bytes begin in the queue.
            let mut off = 0;
            while pos < len {
                if opts.stopped() {
                    stopped = true;
                    break 'replay;
                }
                let seq = base + at(pos);
                // A batch ends where a scheduled change applies, so the change falls
                // exactly between the packets it names.
                while let Some(c) = schedule.get(next_change).filter(|c| c.at <= seq) {
                    self.apply(&c.nf, &c.cmd).map_err(|e| {
                        anyhow::anyhow!("change at packet {}: `{} {}`: {e}", c.at, c.nf, c.cmd)
                    })?;
                    next_change += 1;
                }
                if let Some((g, w)) = gate {
                    live = g.check(w, seq).or(live);
                    if live.as_ref().is_some_and(|o| o.at <= seq) {
                        self.apply_order(live.take(), g, w);
                    }
                }
                let mut end = (pos + MAX_BATCH).min(len);
                let cut = schedule.get(next_change).map(|c| c.at);
                if let Some(cut) = cut.into_iter().chain(live.as_ref().map(|o| o.at)).min() {
                    while end > pos + 1 && base + at(end - 1) >= cut {
                        end -= 1;
                    }
                }
                self.poll_control();
                self.stage_room()?;
                stepped += match queue {
                    Some(q) => {
                        let ks = pos..end;
                        self.walk
                            .ingest_queue(q, share, ks, &mut off, recs, base, after)
                    }
                    None => {
                        let idx = share[pos..end].iter().copied();
                        self.walk.ingest(lasting, bytes, recs, idx, base, after)
                    }
                };
                match self.fast.as_deref_mut() {
                    Some(f) => f.chunk(&mut self.walk),
                    None => self.walk.drain(None),
                }
                self.end_chunk()?;
                if let Some(v) = self.walk.violation.take() {
                    anyhow::bail!("{v}");
                }
                done += (end - pos) as u64;
                pos = end;
                if done >= next_report {
                    progress.update(done, total);
                    next_report = done + self.report_every;
                }
            }
            stepped += self.walk.end_loop(recs, after, tail);
        }
        // Changes after this share's last packet but within the input still apply (a
        // sharded worker's state then matches one worker's at the end).
        while let Some(c) = (schedule.get(next_change))
            .filter(|c| c.at < input)
            .filter(|_| !stopped)
        {
            self.apply(&c.nf, &c.cmd).map_err(|e| {
                anyhow::anyhow!("change at packet {}: `{} {}`: {e}", c.at, c.nf, c.cmd)
            })?;
            next_change += 1;
        }
        if let Some(c) = schedule.get(next_change).filter(|_| !stopped) {
            anyhow::bail!(
                "change at packet {} is past the end of the input ({input} packets)",
                c.at
            );
        }
        if let Some((g, w)) = gate {
            self.apply_order(live.take(), g, w);
            g.end(w, |mut o| {
                let r = self.apply_prepared(&o.nf, &o.cmd, o.prepared.as_mut());
                (r, o.prepared)
            });
        }
        progress.finish();
        Ok(stepped)
    }

    /// Applies a live change handed over by the gate and reports it there.
    fn apply_order(
        &mut self,
        order: Option<super::shard_control::Order>,
        g: &super::shard_control::Gate,
        w: usize,
    ) {
        if let Some(mut o) = order {
            let r = self.apply_prepared(&o.nf, &o.cmd, o.prepared.as_mut());
            g.report(w, r, o.prepared);
        }
    }

    /// Ends a run: counts settled, NFs' end reports, the summary.
    pub(super) fn finish(
        &mut self,
        input_error: Option<String>,
        opts: &RunOptions,
        seconds: f64,
    ) -> anyhow::Result<Summary> {
        if let Some(s) = self.stages.as_mut() {
            s.join(&mut self.walk)?;
        }
        self.settle_counts();
        // NFs that report at the end (flow records) do it now, before the summary.
        for n in &mut self.walk.chain.nodes {
            if let NodeKind::Nf { nf, .. } = &mut n.kind {
                nf.finish();
            }
        }
        let stats = (self.fast.as_ref().map(|f| f.stats))
            .or_else(|| self.auto.as_ref().and_then(|a| a.unbuilt_stats()));
        let mut s = self.walk.summary(input_error, opts.loops, seconds, stats)?;
        s.fastpath_auto = self.auto.as_ref().map(|a| a.auto.stats);
        s.aggregate_stages = self.stages.as_ref().and_then(|st| st.agg);
        Ok(s)
    }

    /// Takes commands from a control socket to be applied between batches (several
    /// sources may be attached).
    pub fn attach_control(&mut self, port: ControlPort) {
        self.control.push(port);
    }

    /// Applies `cmd` to the NF named `nf` now (between batches).
    pub fn apply(&mut self, nf: &str, cmd: &str) -> Result<String, String> {
        self.apply_prepared(nf, cmd, None)
    }

    /// The NFs whose commands are compiled before they reach the worker, by name.
    pub fn preparers(&self) -> std::collections::HashMap<String, Preparer> {
        let mut m = std::collections::HashMap::new();
        for n in &self.walk.chain.nodes {
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
        let chain = &self.walk.chain;
        match chain.node(nf).map(|i| &chain.nodes[i].kind) {
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
        if nf == live::CHAIN {
            return self.chain_command(cmd);
        }
        let r = self.apply_nf(nf, cmd, prepared);
        if let (Ok(_), Some(base)) = (&r, self.reload.as_deref_mut()) {
            base.changed_live(nf, cmd);
        }
        r
    }

    fn apply_nf(
        &mut self,
        nf: &str,
        cmd: &str,
        prepared: Option<&mut Prepared>,
    ) -> Result<String, String> {
        let chain = &self.walk.chain;
        let names = || {
            chain
                .nodes
                .iter()
                .filter(|n| matches!(n.kind, NodeKind::Nf { .. }))
                .map(|n| n.name.clone())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let Some(i) = chain.node(nf) else {
            return Err(format!("no NF named `{nf}` (NFs: {})", names()));
        };
        if !matches!(chain.nodes[i].kind, NodeKind::Nf { .. }) {
            return Err(format!("`{nf}` is not an NF (NFs: {})", names()));
        }
        if !self.walk.mine[i] {
            // A later stage runs it: the change goes down the rings between chunks.
            let c = Command {
                nf: nf.to_string(),
                cmd: cmd.to_string(),
                prepared: None,
                reply: None,
            };
            return self.forward(c).map(|_| "sent to its stage".into());
        }
        // The NF's counters are whole before it answers or changes.
        self.settle_counts();
        let r = match (self.walk.nf_mut(i), prepared) {
            (Some(nf), Some(p)) => nf.control_prepared(cmd, p),
            (Some(nf), None) => nf.control(cmd),
            (None, _) => return Err(format!("`{nf}` is not an NF")),
        };
        if let (Ok(_), Some(f)) = (&r, self.fast.as_deref_mut()) {
            f.invalidate_through(i);
        }
        r
    }

    /// Adds the hits FastPath entries hold (and retired entries held) to the per-NF
    /// counters and to the NFs that count in entries.
    fn settle_counts(&mut self) {
        if let Some(f) = self.fast.as_deref_mut() {
            f.settle_counts(&mut self.walk);
        }
    }

    /// Drains pending control commands; when none are pending this is one atomic load.
    #[inline]
    fn poll_control(&mut self) {
        if self.control.is_empty() {
            return;
        }
        let pending: Vec<Command> = self.control.iter().flat_map(|p| p.rx.try_iter()).collect();
        for mut c in pending {
            let elsewhere = self
                .walk
                .chain
                .node(&c.nf)
                .is_some_and(|i| !self.walk.mine[i]);
            if elsewhere {
                // Its stage applies it and replies.
                if let Err(e) = self.forward(c) {
                    self.walk.violation.get_or_insert(e);
                }
                continue;
            }
            let result = self.apply_prepared(&c.nf, &c.cmd, c.prepared.as_mut());
            if let Some(reply) = c.reply {
                // What the change replaced is freed by the sender's thread.
                let replaced = c.prepared.take();
                let _ = reply.send(Reply { result, replaced });
            }
        }
    }
}

impl Runner {
    /// Sends a command to the stage that runs its NF, between chunks.
    fn forward(&mut self, c: Command) -> Result<(), String> {
        match self.walk.out.as_mut() {
            Some(o) => o
                .send(Msg::Change(Box::new(c)))
                .map_err(|_| NEXT_STAGE_STOPPED.to_string()),
            None => Err("no stage runs it".into()),
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
    use crate::nfs::{Context, Nf, Profile};
    use crate::packet::{Batch, Fields, LinkKind};

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

    /// Only the NFs with files of their own are asked whether an output failed: a flow
    /// monitor with records and an IDS with alerts, not the same NFs without them.
    #[test]
    fn the_walk_notes_the_nfs_that_have_files() {
        let dir = tempfile::tempdir().unwrap();
        let (records, alerts) = (dir.path().join("r.csv"), dir.path().join("a.txt"));
        let ids = |extra: String| {
            format!("apps = [{{ kind = \"ids\", rules = 'alert tcp any any -> any any (msg:\"x\"; sid:1;)'{extra} }}]\n")
        };
        let text = format!(
            "[[nf]]\nname = \"w\"\nkind = \"wire\"\n\
             [[nf]]\nname = \"mon\"\nkind = \"flow_monitor\"\nrecords = {:?}\n\
             [[nf]]\nname = \"quiet\"\nkind = \"flow_monitor\"\n\
             [[nf]]\nname = \"ids\"\nkind = \"microbox\"\n{}\
             [[nf]]\nname = \"ids2\"\nkind = \"microbox\"\n{}",
            records.display().to_string(),
            ids(format!(", alerts = {:?}", alerts.display().to_string())),
            ids(String::new()),
        );
        let cfg = crate::runtime::ChainConfig::parse(&text, "t.toml").unwrap();
        let mut w = Walk::new(Chain::from_config(&cfg).unwrap(), 1514, false);
        w.open_nf_outputs().unwrap();
        let names: Vec<&str> = w
            .nf_outputs
            .iter()
            .map(|&i| w.chain.nodes[i].name.as_str())
            .collect();
        assert_eq!(names, ["mon", "ids"]);
        assert!(!w.output_failed());
    }
}
