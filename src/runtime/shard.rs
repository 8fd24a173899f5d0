//! RSS-sharded workers: the input is spread over N run-to-completion workers, each with
//! its own instance of the chain, by a *symmetric* flow hash, as NIC RSS with a symmetric
//! key and AF_PACKET fanout do.
//!
//! - Placement (`rss.rs`): a symmetric hash of the two addresses (both directions of a
//!   connection, and every fragment of a datagram, land on one worker) onto an
//!   indirection table of buckets balanced over a bounded sample of the trace.
//! - The input side hashes every record once, before the workers start (in a replay the
//!   NIC's work), into each worker's list of its own records (4 bytes a record), and each
//!   worker replays its share in input order, reading no other record (`rss::STEP`).
//! - Each worker's sinks write their own file with each packet's input position beside
//!   it; at the end the files are merged by position, so the output is in input order:
//!   each flow's packets in their order, and flows interleaved as they came in.
//! - NFs whose state spans flows refuse ([`StateScope::Global`]); the others are told
//!   their share ([`Nf::shard`]: the NAT takes its slice of the pool).

use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

use super::affinity::{allowed_cores, pin};
use super::chain::{Chain, NodeKind};
use super::counters::{NfSummary, Summary, WorkerSummary};
use super::rss::{self, queue_suits, weigh_file, Placement, Queue, Slice, Weights, MAX_RECORDS};
use super::shard_control::Gate;
use super::sink::seq_path;
use super::worker::{NoProgress, Progress, RunOptions, Runner};
use crate::io::{MappedPcap, PcapHeader, PcapWriter, Source, Trace};
use crate::nfs::StateScope;
use crate::packet::Fields;

/// Most workers a chain may ask for.
pub const MAX_WORKERS: usize = 64;

/// The least prefetch distance of a sharded worker (`prefetch = k`, see `ingest.rs`).
/// A worker's packets are scattered over the trace (the other workers' lie between), so
/// the hardware's stream prefetch misses them: on the merged trace with `ip_filter`, two
/// workers took 1.5× one worker's CPU time per packet without it, the same with it
/// (`/usr/bin/time`, both pinned to one core). The whole packet, not only its first
/// line (`Walk::prefetch_whole`): an NF that writes (the NAT) copies the packet out of
/// the mapped input first, and with only the first line fetched that copy missed on the
/// rest (NAT, merged trace, 20 loops: `perf` task-clock 148 ms with one worker, 229 ms
/// with two, memcpy 6 % → 24 % of the samples).
pub const SHARD_PREFETCH: usize = 16;

/// Why `chain` cannot run as several instances, naming the first NF that prevents it.
pub fn refusal(chain: &Chain) -> Option<String> {
    chain.nodes.iter().find_map(|n| match &n.kind {
        NodeKind::Nf { nf, kind } => match nf.state_scope() {
            StateScope::Global(why) => Some(format!(
                "NF `{}` ({kind}) cannot be sharded: it {why}; use workers = 1",
                n.name
            )),
            _ => None,
        },
        _ => None,
    })
}

/// A chain run by N workers.
pub struct Shards {
    runners: Vec<Runner>,
    /// The control socket's commands, with more than one worker: applied at one cut in
    /// every worker (shard_control.rs).
    control: Option<super::control::ControlPort>,
    /// Whether the workers of `run`/`run_in_place` copy their records into their own
    /// queues; `None`: by the trace's mean packet size (`queued`).
    queue: Option<bool>,
}

impl Shards {
    /// One runner per chain (the same chain built N times). Refuses chains with an NF
    /// whose state spans flows, naming it.
    pub fn new(chains: Vec<Chain>, max_packet: usize) -> anyhow::Result<Shards> {
        let n = chains.len();
        if n == 0 || n > MAX_WORKERS {
            anyhow::bail!("workers must be 1 to {MAX_WORKERS}, not {n}");
        }
        if let Some(why) = chains.first().filter(|_| n > 1).and_then(refusal) {
            anyhow::bail!("{why}");
        }
        let mut runners = Vec::with_capacity(n);
        for (w, mut chain) in chains.into_iter().enumerate() {
            for node in &mut chain.nodes {
                if let NodeKind::Nf { nf, kind } = &mut node.kind {
                    nf.shard(w, n).map_err(|e| {
                        anyhow::anyhow!("NF `{}` ({kind}) cannot be sharded: {e}", node.name)
                    })?;
                }
            }
            let mut r = Runner::new(chain, max_packet);
            r.walk.sink_seqs = n > 1;
            runners.push(r);
        }
        Ok(Shards {
            runners,
            control: None,
            queue: None,
        })
    }

    /// Test hook: the workers copy their records into their own queues (`true`) or read
    /// them where they lie (`false`), whatever the trace's packet size.
    #[doc(hidden)]
    pub fn force_queue(&mut self, on: bool) {
        self.queue = Some(on);
    }

    /// Whether these workers would copy their records of `trace` into their own queues
    /// (see [`queued`]), in a replay whose loops' time shift does not wrap.
    pub fn queues(&self, trace: &Trace) -> bool {
        let (bytes, recs) = trace.raw();
        let n = self.runners.len();
        let placement = Placement::of_trace(trace.link(), bytes, recs, n);
        n > 1 && queued(&self.runners[0], self.queue, &placement, false)
    }

    pub fn workers(&self) -> usize {
        self.runners.len()
    }

    /// Takes commands from a control socket: one worker applies them between batches,
    /// several at one input position each (the cut, see shard_control.rs).
    pub fn attach_control(&mut self, port: super::control::ControlPort) {
        match &mut self.runners[..] {
            [r] => r.attach_control(port),
            _ => self.control = Some(port),
        }
    }

    /// The NFs whose commands are compiled off the workers, by name.
    pub fn preparers(&self) -> std::collections::HashMap<String, crate::nfs::Preparer> {
        self.runners[0].preparers()
    }

    /// Runs the trace over the workers and sums up; with one worker this is a plain run.
    /// Every packet is copied into a pool buffer at ingest.
    pub fn run(
        self,
        trace: &Trace,
        opts: &RunOptions,
        progress: &mut dyn Progress,
    ) -> anyhow::Result<Summary> {
        self.run_on(trace, None, opts, progress)
    }

    /// As [`run`](Self::run), for a trace that lasts the process (a mapped file): the
    /// packets view its bytes in place, copied only when an NF first writes one, as in a
    /// one-worker run of a mapped file. The output is the same.
    pub fn run_in_place(
        self,
        trace: &'static Trace,
        opts: &RunOptions,
        progress: &mut dyn Progress,
    ) -> anyhow::Result<Summary> {
        self.run_on(trace, Some(trace.raw().0), opts, progress)
    }

    /// As [`run_in_place`](Self::run_in_place) for a mapped pcap file, without indexing
    /// it or placing its records before the first packet: the table is balanced on a sample
    /// spread over the file, then every worker walks the whole file with its own
    /// reader of the one map and keeps its own records (worker/stream.rs). The output,
    /// the counters and every packet's port, time and position are one worker's.
    pub fn run_stream(
        self,
        src: &MappedPcap,
        opts: &RunOptions,
        progress: &mut dyn Progress,
    ) -> anyhow::Result<Summary> {
        let mut runners = self.runners;
        let control = self.control;
        let n = runners.len();
        if n == 1 {
            return runners[0].run_source(&mut src.reader(), opts, progress);
        }
        let cores = cores_for(n);
        let started = Instant::now();
        let link = src.link();
        let placement = {
            let (map, fmt) = src.format();
            Placement::of_weights(&weigh_file(link, map, fmt, n), n)
        };
        let finals = sink_paths(runners[0].chain(), opts);
        // The input's length is not known before a worker reaches its end.
        let gate = control.as_ref().map(|_| Gate::new(n, u64::MAX));
        let preparers = runners[0].preparers();
        let placement = &placement;
        // The input side's time (the weighing), then each worker's span: timed as
        // `run_on` times the copying workers and as one worker's run is timed, not the
        // threads' start nor the merge.
        let placing = started.elapsed().as_secs_f64();
        let mut spans: Vec<Option<(Instant, Instant)>> = vec![None; n];
        let mut span_cells = spans.iter_mut();
        let results: Vec<anyhow::Result<(Part, u64)>> = std::thread::scope(|scope| {
            serve_control(scope, gate.as_ref(), control, &preparers);
            let gate = gate.as_ref();
            let handles: Vec<_> = runners
                .into_iter()
                .enumerate()
                .map(|(w, mut r)| {
                    let core = (n <= cores.len()).then(|| cores[w]);
                    let mut reader = src.reader();
                    let wopts = worker_opts(opts, &finals, w);
                    let span_cell = span_cells.next();
                    std::thread::Builder::new()
                        .name(format!("catena-w{w}"))
                        .spawn_scoped(scope, move || -> anyhow::Result<(Part, u64)> {
                            let _gone = gate.map(|g| Gone(g, w));
                            let core = core.filter(|&c| pin(c));
                            let cpu = thread_cpu_seconds();
                            let t0 = Instant::now();
                            let (s, stepped) = r.run_stream_share(
                                &mut reader,
                                (placement, w),
                                &wopts,
                                gate,
                                &mut NoProgress,
                            )?;
                            // Its loop's end: the summary (`finish`) is not timed.
                            let t1 = t0 + std::time::Duration::from_secs_f64(s.seconds);
                            if let Some(c) = span_cell {
                                *c = Some((t0, t1.min(Instant::now())));
                            }
                            let cpu = thread_cpu_seconds().zip(cpu).map(|(b, a)| b - a);
                            Ok(((s, core, cpu), stepped))
                        })
                })
                .collect();
            handles
                .into_iter()
                .enumerate()
                .map(|(w, h)| join_worker(w, h))
                .collect()
        });
        let total = results
            .iter()
            .find_map(|r| r.as_ref().ok().map(|((s, _, _), k)| s.packets_in + k));
        let total = total.unwrap_or(0);
        let mut s = gather(results, &finals, src.header(), started, progress, total)?;
        retime_spans(&mut s, placing, &spans);
        Ok(s)
    }

    fn run_on(
        self,
        trace: &Trace,
        lasting: Option<&'static [u8]>,
        opts: &RunOptions,
        progress: &mut dyn Progress,
    ) -> anyhow::Result<Summary> {
        let queue = self.queue;
        let mut runners = self.runners;
        let control = self.control;
        let n = runners.len();
        if n == 1 {
            return runners[0].run(trace, opts, progress);
        }
        let cores = cores_for(n);
        let started = Instant::now();
        let (bytes, recs) = trace.raw();
        if recs.len() > MAX_RECORDS {
            anyhow::bail!(
                "a sharded replay takes at most {MAX_RECORDS} records, not {}: use workers = 1",
                recs.len()
            );
        }
        // The input side runs in the workers themselves (no serial pass before them):
        // worker K weighs the table's sample in its K-th of the records, and once all
        // have (the first meeting) each sums the weights into the same balanced table
        // and places its K-th of the records into every worker's list (rss.rs); once
        // all have (the second) each gathers its own list from every slice and, for
        // small packets, copies its records into its own queue.
        let link = trace.link();
        let max_packet = runners[0].walk.pool.max_packet();
        let per = recs.len().div_ceil(n).max(1);
        let part = |w: usize| w * per..(w + 1) * per;
        let weights: Vec<OnceLock<Weights>> = (0..n).map(|_| OnceLock::new()).collect();
        let slices: Vec<OnceLock<Slice>> = (0..n).map(|_| OnceLock::new()).collect();
        let meet = Meet::new(n);
        let (weights, slices, meet) = (&weights, &slices, &meet);
        // Nothing before the workers start: the input side is in their spans.
        let placing = started.elapsed().as_secs_f64();
        // Each worker's span (its part of the placement, its copy, its processing), to
        // time the run as one worker's run is timed: not the threads' start, the
        // outputs' closing, the merge.
        let mut spans: Vec<Option<(Instant, Instant)>> = vec![None; n];
        let mut span_cells = spans.iter_mut();
        // Each worker writes its own files; merged below.
        let finals = sink_paths(runners[0].chain(), opts);
        let gate = control
            .as_ref()
            .map(|_| Gate::new(n, recs.len() as u64 * opts.loops));
        let preparers = runners[0].preparers();
        let results: Vec<anyhow::Result<(Part, u64)>> = std::thread::scope(|scope| {
            serve_control(scope, gate.as_ref(), control, &preparers);
            let gate = gate.as_ref();
            // Each runner moves onto its worker's stack: in one Vec, the fields a walk
            // writes per packet (the clock, the counters) could share a cache line with
            // the next worker's.
            let handles: Vec<_> = runners
                .into_iter()
                .enumerate()
                .map(|(w, mut r)| {
                    let core = (n <= cores.len()).then(|| cores[w]);
                    let span_cell = span_cells.next();
                    let wopts = worker_opts(opts, &finals, w);
                    std::thread::Builder::new()
                        .name(format!("catena-w{w}"))
                        .spawn_scoped(scope, move || -> anyhow::Result<(Part, u64)> {
                            // However this thread returns, the gate stops waiting for it.
                            let _gone = gate.map(|g| Gone(g, w));
                            let core = core.filter(|&c| pin(c));
                            let t0 = Instant::now();
                            let cpu = thread_cpu_seconds();
                            // However this thread returns, the others stop waiting for it.
                            let _left = Left(meet);
                            let _ = weights[w].set(Placement::weigh(link, bytes, recs, part(w)));
                            meet.wait(1)?;
                            let all = weights.iter().filter_map(OnceLock::get);
                            let placement = Placement::of_weights(&Weights::sum(all), n);
                            let mine = placement.slice(link, bytes, recs, n, max_packet, part(w));
                            let _ = slices[w].set(mine);
                            meet.wait(2)?;
                            let all = slices.iter().filter_map(OnceLock::get);
                            // Timestamps that wrap when shifted by the loops make the
                            // clock's order uncertain: step over every record.
                            let (_, last) = rss::ts_range(all.clone());
                            let span = shares_span(all.clone());
                            let wraps = (span.checked_mul(opts.loops.saturating_sub(1)))
                                .and_then(|s| last.checked_add(s))
                                .is_none();
                            let size = rss::queue_bytes(all.clone(), w);
                            let (share, tail) = rss::take(all, w, wraps);
                            // Small packets: each worker copies its records into its own
                            // memory first (`rss::Queue`, as a NIC's RSS fills each
                            // queue's ring) and streams them from there: a worker's
                            // packets in the trace lie between the others', so reading
                            // them in place pulls every cache line of the trace into each
                            // worker. Large ones: read in place, prefetched whole, where
                            // the copy costs more than the scattered reads
                            // (`rss::QUEUE_MAX_MEAN`). The same either way for a trace the
                            // packets could view (`lasting`): a queued packet is a copy,
                            // as `--copy` makes.
                            let queued = queued(&r, queue, &placement, wraps);
                            if !queued {
                                r.walk.prefetch = r.walk.prefetch.max(SHARD_PREFETCH);
                                r.walk.prefetch_whole = true;
                            }
                            // Not with stages: a stage's thread is not joined when the
                            // runner is dropped on an error, and could still read a view.
                            r.walk.queue_views = queued && !r.staged() && !writes_bytes(r.chain());
                            let max = r.walk.pool.max_packet();
                            let fits = r.walk.pool.small_max();
                            let queue = queued
                                .then(|| Queue::fill(bytes, recs, &share, max, fits, Some(size)));
                            // Its packets (held by NFs, in its pool, on its stages'
                            // threads) view the queue's bytes: declared after the queue,
                            // the runner is dropped first, however the thread returns.
                            let mut r = r;
                            let t = Instant::now();
                            // Its share: the records it owns, in input order.
                            let stepped = r.run_share(
                                trace,
                                lasting,
                                &wopts,
                                (&share, tail, span, queue.as_ref()),
                                gate.map(|g| (g, w)),
                                &mut NoProgress,
                            )?;
                            let t1 = Instant::now();
                            if let Some(c) = span_cell {
                                *c = Some((t0, t1));
                            }
                            // Its own processing, as one worker's `seconds` (the copy
                            // is in the run's).
                            let secs = (t1 - t).as_secs_f64();
                            let cpu = thread_cpu_seconds().zip(cpu).map(|(b, a)| b - a);
                            Ok((
                                (
                                    r.finish(trace.error().map(|e| e.to_string()), &wopts, secs)?,
                                    core,
                                    cpu,
                                ),
                                stepped,
                            ))
                        })
                })
                .collect();
            handles
                .into_iter()
                .enumerate()
                .map(|(w, h)| join_worker(w, h))
                .collect()
        });
        // A worker that stopped because another failed says less than the one that
        // failed: its error goes last.
        let mut results = results;
        if results
            .iter()
            .any(|r| r.as_ref().is_err_and(|e| !e.is::<Abandoned>()))
        {
            results.sort_by_key(|r| r.as_ref().is_err_and(|e| e.is::<Abandoned>()));
        }
        let mut s = gather(
            results,
            &finals,
            trace.header(),
            started,
            progress,
            recs.len() as u64 * opts.loops,
        )?;
        retime_spans(&mut s, placing, &spans);
        Ok(s)
    }
}

/// Whether the workers of an indexed replay (`run`, `run_in_place`) copy their records
/// into their own queues (`rss::Queue`) before their first packet: when the trace's
/// packets are small on average ([`queue_suits`], unless `force`d), and not where the
/// loops' time shift wraps (every entry is stepped then) nor when the chain asks for
/// prefetching (it applies to packets read where they lie).
fn queued(first: &Runner, force: Option<bool>, placement: &Placement, wraps: bool) -> bool {
    let asked = first.walk.prefetch > 0;
    let small = force.unwrap_or_else(|| queue_suits(placement.mean_caplen()));
    small && !wraps && !asked
}

/// Whether an NF of `chain` may write a packet's bytes (a header field or the payload,
/// by its profile, or its length): then a queued worker copies its records into packets
/// rather than view them (`Walk::queue_views`).
fn writes_bytes(chain: &Chain) -> bool {
    let bytes = Fields((Fields::PAYLOAD.0 << 1) - 1);
    chain.nf_slots().into_iter().flatten().any(|nf| {
        let p = nf.profile();
        p.changes_length || p.writes.intersects(bytes)
    })
}

/// As `Trace::span_ns`, over a trace's slices (`rss::ts_range`).
fn shares_span<'a>(slices: impl Iterator<Item = &'a Slice>) -> u64 {
    let (lo, hi) = rss::ts_range(slices);
    hi - lo + 1
}

/// Where the workers of an indexed replay wait for each other while they place the
/// input (`run_on`): meeting `k` is passed once every worker has arrived at it. A
/// worker that returns before (an error, a panic) is counted by its [`Left`], and the
/// others then stop with [`Abandoned`]. Spins, then yields: a meeting costs what the
/// slowest worker's share of the placement takes; only a peer late by more than
/// [`PATIENCE`] is waited for in sleeps ([`NAP`] up to [`NAP_MAX`]).
struct Meet {
    arrived: AtomicUsize,
    left: AtomicBool,
    n: usize,
}

/// How long a meeting spins and yields before it sleeps (a normal placement's meetings
/// pass in microseconds).
const PATIENCE: std::time::Duration = std::time::Duration::from_millis(1);
/// A late peer's meeting sleeps NAP, then twice as long each time up to NAP_MAX: a
/// few hundred wake-ups a second at most, and the waiting worker leaves at most NAP_MAX
/// after the last one arrives.
const NAP: std::time::Duration = std::time::Duration::from_micros(50);
const NAP_MAX: std::time::Duration = std::time::Duration::from_millis(1);

/// A worker stopped because another one failed before the input was placed.
#[derive(Debug)]
struct Abandoned;

impl std::fmt::Display for Abandoned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("another worker failed before the input was placed")
    }
}

impl std::error::Error for Abandoned {}

impl Meet {
    fn new(n: usize) -> Meet {
        Meet {
            arrived: AtomicUsize::new(0),
            left: AtomicBool::new(false),
            n,
        }
    }

    /// Arrives at meeting `k` (1, 2, … in turn) and waits for every worker.
    fn wait(&self, k: usize) -> anyhow::Result<()> {
        self.arrived.fetch_add(1, Ordering::AcqRel);
        let (mut spins, mut since, mut nap) = (0u32, None, NAP);
        while self.arrived.load(Ordering::Acquire) < k * self.n {
            // One that left after passing this meeting has been counted (read again).
            if self.left.load(Ordering::Acquire)
                && self.arrived.load(Ordering::Acquire) < k * self.n
            {
                return Err(Abandoned.into());
            }
            spins = spins.saturating_add(1);
            if spins < 4096 {
                std::hint::spin_loop();
            } else if since.get_or_insert_with(std::time::Instant::now).elapsed() < PATIENCE {
                std::thread::yield_now();
            } else {
                // A peer late by more than PATIENCE has no core (under SCHED_FIFO,
                // another task's at the same priority): sleep, so this core goes back
                // to the host instead of staying real-time busy for the whole stall.
                std::thread::sleep(nap);
                nap = (nap * 2).min(NAP_MAX);
            }
        }
        Ok(())
    }
}

/// Tells the others a worker has returned (also when it panics): one that has not
/// passed every meeting would be waited for for ever.
struct Left<'a>(&'a Meet);

impl Drop for Left<'_> {
    fn drop(&mut self) {
        self.0.left.store(true, Ordering::Release);
    }
}

/// The cores to pin `n` workers to, with a warning when there are fewer cores than
/// workers (then the workers are not pinned).
fn cores_for(n: usize) -> Vec<usize> {
    let cores = allowed_cores();
    if n > cores.len() {
        eprintln!(
            "warning: {n} workers on {} cores: workers share cores (not pinned)",
            cores.len()
        );
    }
    cores
}

/// The thread that applies live changes through the gate, when the run has a control
/// port. No thread, no live changes: the socket's senders then hear "the run has
/// ended"; the run itself goes on.
fn serve_control<'s, 'e>(
    scope: &'s std::thread::Scope<'s, 'e>,
    gate: Option<&'s Gate>,
    control: Option<super::control::ControlPort>,
    preparers: &'s std::collections::HashMap<String, crate::nfs::Preparer>,
) {
    if let (Some(g), Some(c)) = (gate, control) {
        let _ = std::thread::Builder::new()
            .name("catena-control".into())
            .spawn_scoped(scope, move || g.serve(&c.rx, preparers));
    }
}

/// Worker `w`'s options: the run's loops and schedule, its own part of each sink.
fn worker_opts(opts: &RunOptions, finals: &[(String, PathBuf)], w: usize) -> RunOptions {
    RunOptions {
        loops: opts.loops,
        outputs: finals
            .iter()
            .map(|(k, p)| (k.clone(), part(w, p)))
            .collect(),
        schedule: opts.schedule.clone(),
        stop: opts.stop,
    }
}

/// The workers' results gathered: their sinks' files merged in input order (and
/// removed), their summaries summed, or the first error.
fn gather(
    results: Vec<anyhow::Result<(Part, u64)>>,
    finals: &[(String, PathBuf)],
    header: PcapHeader,
    started: Instant,
    progress: &mut dyn Progress,
    input: u64,
) -> anyhow::Result<Summary> {
    let n = results.len();
    let mut parts = Vec::with_capacity(n);
    let mut stepped = Vec::with_capacity(n);
    let mut first_err = None;
    for r in results {
        match r {
            Ok((p, k)) => {
                parts.push(p);
                stepped.push(k);
            }
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    // A part a worker could not write whole (a full disk) is not merged: the merge
    // would fail on it too, or leave out packets in the middle, and hide the cause. The
    // workers' errors are the run's, named by the sink's own path.
    let failed = |p: &Path| (0..n).any(|w| failed_part(&parts, &part(w, p)));
    let merged = match first_err {
        None => finals
            .iter()
            .filter(|(_, p)| !failed(p))
            .try_for_each(|(_, p)| {
                merge(header, p, &(0..n).map(|w| part(w, p)).collect::<Vec<_>>())
            }),
        Some(e) => Err(e),
    };
    for (_, p) in finals {
        for (w, (s, _, _)) in parts.iter_mut().enumerate() {
            let shown = part(w, p).display().to_string();
            for e in &mut s.output_errors {
                if let Some(rest) = e.strip_prefix(&shown) {
                    *e = format!("{}{rest} (the workers' parts were not merged)", p.display());
                }
            }
        }
    }
    for (_, p) in finals {
        for w in 0..n {
            let _ = std::fs::remove_file(part(w, p));
            let _ = std::fs::remove_file(seq_path(&part(w, p)));
        }
    }
    merged?;
    progress.update(input, input);
    progress.finish();
    let mut s = sum(parts, started.elapsed().as_secs_f64());
    // Every worker meets the same full disk: its cause once.
    let mut seen = std::collections::HashSet::new();
    s.output_errors.retain(|e| seen.insert(e.clone()));
    for (w, k) in s.workers.iter_mut().zip(stepped) {
        w.records_stepped = Some(k);
    }
    for k in &mut s.sinks {
        if let Some((_, p)) = finals.iter().find(|(n, _)| *n == k.name) {
            k.path = Some(p.display().to_string());
        }
    }
    Ok(s)
}

/// Whether a worker's summary says its file `part` (or its `.seq` beside it) could not
/// be written whole.
fn failed_part(parts: &[Part], part: &Path) -> bool {
    let shown = part.display().to_string();
    parts
        .iter()
        .flat_map(|(s, _, _)| &s.output_errors)
        .any(|e| e.starts_with(&shown))
}

/// Worker `w`'s own file for the sink writing `p`, merged into `p` at the end.
fn part(w: usize, p: &Path) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(format!(".w{w}.part"));
    PathBuf::from(s)
}

/// Tells the gate a worker thread has returned (also when it panics).
struct Gone<'a>(&'a Gate, usize);

impl Drop for Gone<'_> {
    fn drop(&mut self) {
        self.0.gone(self.1);
    }
}

/// Every sink that writes a file, with its path (`--output` and friends first).
fn sink_paths(chain: &Chain, opts: &RunOptions) -> Vec<(String, PathBuf)> {
    chain
        .nodes
        .iter()
        .filter_map(|n| match &n.kind {
            NodeKind::Sink { path } => opts
                .outputs
                .iter()
                .find(|(k, _)| *k == n.name)
                .map(|(_, p)| p.clone())
                .or_else(|| path.clone())
                .map(|p| (n.name.clone(), p)),
            _ => None,
        })
        .collect()
}

/// Merges the workers' files for one sink into `out`, in input order.
fn merge(header: PcapHeader, out: &Path, parts: &[PathBuf]) -> anyhow::Result<()> {
    let mut ins = Vec::with_capacity(parts.len());
    for p in parts {
        // Its error names the file already.
        let t = Trace::open(p)?;
        let q = seq_path(p);
        let f = std::fs::File::open(&q).map_err(|e| anyhow::anyhow!("{}: {e}", q.display()))?;
        ins.push((t, BufReader::new(f), 0usize, None::<u64>));
    }
    let next = |r: &mut BufReader<std::fs::File>| -> Option<u64> {
        let mut b = [0u8; 8];
        r.read_exact(&mut b).ok().map(|_| u64::from_le_bytes(b))
    };
    for (_, r, _, head) in &mut ins {
        *head = next(r);
    }
    let mut w = PcapWriter::create(out, header)
        .map_err(|e| anyhow::anyhow!("{}: cannot create output: {e}", out.display()))?;
    // The part whose next packet came first in the input goes next.
    while let Some(k) = (0..ins.len())
        .filter(|&k| ins[k].3.is_some())
        .min_by_key(|&k| ins[k].3)
    {
        let (t, r, i, head) = &mut ins[k];
        let rec = t.record(*i);
        w.write_packet(rec.ts_ns, rec.wire_len, t.packet(*i))
            .map_err(|e| anyhow::anyhow!("{}: writing failed: {e}", out.display()))?;
        *i += 1;
        *head = next(r);
    }
    w.finish()
        .map_err(|e| anyhow::anyhow!("{}: writing failed: {e}", out.display()))?;
    Ok(())
}

/// A worker's summary, the core it was pinned to, and its thread's CPU seconds.
pub type Part = (Summary, Option<usize>, Option<f64>);

/// The CPU time the calling thread has used, in seconds (one system call; per worker
/// run, not per packet).
fn thread_cpu_seconds() -> Option<f64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } == 0;
    ok.then_some(ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9)
}

/// The workers' summaries summed; `seconds` is the whole run's wall time.
pub fn sum(parts: Vec<Part>, seconds: f64) -> Summary {
    let mut it = parts.into_iter().enumerate();
    let (_, (mut s, core, cpu)) = it.next().expect("at least one worker");
    let per = |w: usize, p: &Summary, core: Option<usize>, cpu_seconds| WorkerSummary {
        worker: w,
        core,
        packets_in: p.packets_in,
        packets_out: p.packets_out,
        packets_dropped: p.packets_dropped,
        seconds: p.seconds,
        mpps: p.mpps,
        cpu_seconds,
        records_stepped: None,
    };
    s.workers = vec![per(0, &s, core, cpu)];
    for (w, (p, core, cpu)) in it {
        s.workers.push(per(w, &p, core, cpu));
        s.packets_in += p.packets_in;
        s.packets_out += p.packets_out;
        s.packets_dropped += p.packets_dropped;
        s.bytes_in += p.bytes_in;
        s.bytes_out += p.bytes_out;
        add_pairs(&mut s.input_drops, &p.input_drops);
        for (a, b) in s.nfs.iter_mut().zip(&p.nfs) {
            add_nf(a, b);
        }
        for (a, b) in s.ports.iter_mut().zip(&p.ports) {
            a.rx += b.rx;
            a.tx += b.tx;
        }
        for (a, b) in s.sinks.iter_mut().zip(&p.sinks) {
            a.packets += b.packets;
            a.bytes += b.bytes;
            a.flooded += b.flooded;
        }
        if let (Some(a), Some(b)) = (s.aggregate_stages.as_mut(), p.aggregate_stages) {
            a.frames += b.frames;
            a.aggregated += b.aggregated;
            a.plain += b.plain;
            a.supply_waits += b.supply_waits;
        }
        if let (Some(a), Some(b)) = (s.fastpath.as_mut(), p.fastpath) {
            a.hits += b.hits;
            a.misses += b.misses;
            a.installed += b.installed;
            a.invalidated += b.invalidated;
            a.evicted += b.evicted;
            a.expired += b.expired;
            a.ended += b.ended;
            a.refused += b.refused;
            a.unconsolidatable += b.unconsolidatable;
            a.unrecorded += b.unrecorded;
            a.deferred += b.deferred;
            a.folded += b.folded;
        }
        if s.input_error.is_none() {
            s.input_error = p.input_error;
        }
        s.output_errors.extend(p.output_errors);
    }
    retime(&mut s, seconds);
    s
}

/// Sets a summary's `seconds` and the rates taken over it.
/// Times a sharded run as one worker's: the input side, then from the first worker's
/// start to the last one's end (not the threads' start, the summaries, the merge).
fn retime_spans(s: &mut Summary, placing: f64, spans: &[Option<(Instant, Instant)>]) {
    let first = spans.iter().flatten().map(|s| s.0).min();
    let last = spans.iter().flatten().map(|s| s.1).max();
    if let (Some(a), Some(b)) = (first, last) {
        retime(s, placing + (b - a).as_secs_f64());
    }
}

fn retime(s: &mut Summary, seconds: f64) {
    let secs = seconds.max(1e-9);
    s.seconds = seconds;
    s.mpps = s.packets_in as f64 / secs / 1e6;
    s.data_rate_gbps = s.bytes_in as f64 * 8.0 / secs / 1e9;
    s.throughput_gbps = s.bytes_out as f64 * 8.0 / secs / 1e9;
}

fn add_nf(a: &mut NfSummary, b: &NfSummary) {
    a.packets_in += b.packets_in;
    a.packets_out += b.packets_out;
    a.packets_dropped += b.packets_dropped;
    add_pairs(&mut a.drops, &b.drops);
    add_pairs(&mut a.outputs, &b.outputs);
    add_pairs(&mut a.stats, &b.stats);
}

/// Adds `b`'s counts to `a`'s by name (names only in `b` are appended).
fn add_pairs(a: &mut Vec<(String, u64)>, b: &[(String, u64)]) {
    for (k, v) in b {
        match a.iter_mut().find(|(x, _)| x == k) {
            Some((_, n)) => *n += v,
            None => a.push((k.clone(), *v)),
        }
    }
}

/// Worker `w`'s result once its thread ends, or one line saying why there is none: the
/// thread could not start, or it panicked (with the panic's message).
pub fn join_worker<T>(
    w: usize,
    h: std::io::Result<std::thread::ScopedJoinHandle<'_, anyhow::Result<T>>>,
) -> anyhow::Result<T> {
    match h.map(|h| h.join()) {
        Err(e) => Err(anyhow::anyhow!("worker {w}: cannot start a thread: {e}")),
        Ok(Ok(r)) => r.map_err(|e| anyhow::anyhow!("worker {w}: {e}")),
        Ok(Err(p)) => Err(anyhow::anyhow!(
            "worker {w} died: {}",
            p.downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "panic".into())
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfs::{Context, Nf, Profile};
    use crate::packet::{Batch, Fields, LinkKind};
    use crate::runtime::rss::tests::ipv4;

    /// Live multi-worker runs (cli/run.rs) join through this too: a worker's panic is
    /// reported with its message, its error with its number.
    #[test]
    fn a_worker_s_end_is_reported_with_its_cause() {
        let (panicked, failed, fine) = std::thread::scope(|s| {
            let spawn =
                |f: fn() -> anyhow::Result<u8>| std::thread::Builder::new().spawn_scoped(s, f);
            (
                join_worker(0, spawn(|| panic!("table full"))),
                join_worker(1, spawn(|| Err(anyhow::anyhow!("port gone")))),
                join_worker(2, spawn(|| Ok(7))),
            )
        });
        assert_eq!(
            panicked.unwrap_err().to_string(),
            "worker 0 died: table full"
        );
        assert_eq!(failed.unwrap_err().to_string(), "worker 1: port gone");
        assert_eq!(fine.unwrap(), 7);
    }

    /// Panics on the packet whose first byte is 0xee.
    struct Fragile(Profile);

    impl Nf for Fragile {
        fn profile(&self) -> &Profile {
            &self.0
        }
        fn process(&mut self, b: &mut Batch, _: &Context) {
            for p in b {
                assert!(p.data()[0] != 0xee, "poisoned packet");
            }
        }
    }

    fn fragile() -> Box<dyn Nf> {
        Box::new(Fragile(Profile {
            reads: Fields::NONE,
            writes: Fields::NONE,
            may_drop: false,
            changes_length: false,
            per_flow_state: false,
            outputs: &["out"],
            drop_reasons: &[],
        }))
    }

    /// A worker that returns before a meeting (an error, a panic) must not leave the
    /// others waiting for it for ever; one that returns after passing it changes
    /// nothing for the others at that meeting.
    #[test]
    fn a_worker_gone_before_a_meeting_stops_the_others_there() {
        let m = Meet::new(2);
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(|| {
                let _left = Left(&m);
                m.wait(1).is_ok()
            });
            let b = s.spawn(|| {
                let _left = Left(&m);
                let first = m.wait(1).map_err(|e| e.to_string());
                let second = m.wait(2).map_err(|e| e.is::<Abandoned>());
                (first, second)
            });
            (a.join().unwrap(), b.join().unwrap())
        });
        assert!(a);
        assert_eq!(b, (Ok(()), Err(true)));
    }

    /// A peer 300 ms late (no core for it) is waited for asleep after PATIENCE: the
    /// waiting worker's thread uses a small part of the wait's CPU. It waits at
    /// SCHED_FIFO as under `chrt -f` when allowed: yielding all along, it then used the
    /// whole 300 ms (seen: 300.0 ms of CPU; with the naps 4.6–6.1 ms); under CFS a
    /// yielding thread on a loaded machine may use little either way.
    #[test]
    fn a_meeting_with_a_late_peer_sleeps_after_its_patience() {
        let m = Meet::new(2);
        let late = std::time::Duration::from_millis(300);
        let (cpu, wall) = std::thread::scope(|s| {
            let w = s.spawn(|| {
                let p = libc::sched_param { sched_priority: 1 };
                // SAFETY: this thread's own policy; refused (EPERM) without the right.
                let fifo = unsafe {
                    libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &p)
                };
                if fifo != 0 {
                    eprintln!("not at SCHED_FIFO (error {fifo}): the check is weaker");
                }
                let (c, t) = (thread_cpu_seconds().unwrap(), std::time::Instant::now());
                m.wait(1).unwrap();
                (thread_cpu_seconds().unwrap() - c, t.elapsed())
            });
            std::thread::sleep(late);
            m.wait(1).unwrap();
            w.join().unwrap()
        });
        assert!(wall >= late / 2, "{wall:?}");
        // A waiter that keeps its core uses about the whole wait; asleep, 4.6-6.1 ms
        // quiet and up to 33 ms at load 8 (each wake-up costs more then): a quarter of
        // the wait tells them apart at any load, where a fixed 30 ms failed 1 in 50.
        assert!(
            cpu < wall.as_secs_f64() / 4.0,
            "waited {wall:?} using {cpu} s of CPU"
        );
    }

    #[test]
    fn a_dying_worker_stops_the_run_with_its_name() {
        let good = ipv4([10, 0, 0, 1], [10, 0, 0, 2], 1, 2);
        let mut bad = good.clone();
        bad[0] = 0xee;
        let h = crate::io::PcapHeader::new(1, false);
        let frames: Vec<&[u8]> = vec![&good, &good, &bad, &good];
        let trace = Trace::from_packets(
            LinkKind::Ethernet,
            h,
            frames.into_iter().enumerate().map(|(i, f)| (i as u64, f)),
        );
        // The poisoned frame's worker: placed by its IP pair, as `good`'s.
        let (bytes, recs) = trace.raw();
        let w = Placement::of_trace(LinkKind::Ethernet, bytes, recs, 2)
            .worker_of(LinkKind::Ethernet, trace.packet(2));
        let chains = (0..2)
            .map(|_| Chain::linear("t", 1, 1, vec![("f".into(), fragile())]))
            .collect();
        let e = Shards::new(chains, 100)
            .unwrap()
            .run(&trace, &RunOptions::default(), &mut NoProgress)
            .unwrap_err()
            .to_string();
        assert_eq!(e, format!("worker {w} died: poisoned packet"));
    }

    type Seen = std::sync::Arc<std::sync::Mutex<Vec<(u64, u64, u16)>>>;

    /// Notes each packet's input position, run-clock time and ingress port.
    struct Note(Profile, Seen);

    impl Nf for Note {
        fn profile(&self) -> &Profile {
            &self.0
        }
        fn process(&mut self, b: &mut Batch, _: &Context) {
            let mut seen = self.1.lock().unwrap();
            for p in b {
                let m = p.meta();
                seen.push((m.seq, m.now_ns, m.in_port));
            }
        }
    }

    fn note(seen: &Seen) -> Box<dyn Nf> {
        let profile = fragile().profile().clone();
        Box::new(Note(profile, seen.clone()))
    }

    /// Runs `trace` on `workers` workers (3 ports, 2 loops) and returns what each
    /// packet was given, by input position, and the records each worker stepped over.
    /// `n` IPv4 frames over 23 flows, every 89th oversize (larger than any buffer the
    /// pool has), with time that jumps forward and back; `third` rounds the times that
    /// fall to a third of their place.
    fn jumping_trace(n: u32, third: impl Fn(u64) -> u64) -> Trace {
        let mut frames = Vec::new();
        let mut ts = Vec::new();
        for i in 0..n {
            let b = (i % 23) as u8;
            let mut f = ipv4([10, 0, 0, b], [10, 2, 0, b.wrapping_mul(3)], 1000, 80);
            if i % 89 == 0 {
                f.resize(70_000, 0);
            }
            frames.push(f);
            let base = u64::from(i) * 1_000_000;
            ts.push(match i % 157 {
                0 => base + 900_000_000,
                3 => third(base / 3),
                _ if i % 400 > 390 => base - 50_000_000,
                _ => base,
            });
        }
        let h = crate::io::PcapHeader::new(1, false);
        Trace::from_packets(
            LinkKind::Ethernet,
            h,
            frames.iter().zip(&ts).map(|(f, &t)| (t, &f[..])),
        )
    }

    fn given(trace: &Trace, workers: usize) -> (Vec<(u64, u64, u16)>, Vec<u64>) {
        let seen = Seen::default();
        let chains = (0..workers)
            .map(|_| Chain::linear("t", 3, 7, vec![("n".into(), note(&seen))]))
            .collect();
        let opts = RunOptions {
            loops: 2,
            ..RunOptions::default()
        };
        let s = Shards::new(chains, 100)
            .unwrap()
            .run(trace, &opts, &mut NoProgress)
            .unwrap();
        let stepped = s.workers.iter().filter_map(|w| w.records_stepped).collect();
        let mut v = std::mem::take(&mut *seen.lock().unwrap());
        v.sort_unstable();
        (v, stepped)
    }

    /// A worker passes over the others' records unread where it can (issue 21): every
    /// packet still gets the run-clock time and the ingress port one worker gives it,
    /// on a trace whose time jumps back and whose frames are partly oversize.
    #[test]
    fn workers_give_each_packet_one_worker_s_clock_and_port() {
        let trace = jumping_trace(2000, |t| t);
        let (one, _) = given(&trace, 1);
        assert_eq!(one.len(), 2 * (2000 - 2000usize.div_ceil(89)));
        for n in [2, 3] {
            let (many, stepped) = given(&trace, n);
            assert_eq!(many, one, "{n} workers");
            let stepped: u64 = stepped.iter().sum();
            // Some gaps need stepping over one by one, most do not.
            assert!(stepped > 0, "{n} workers stepped over nothing");
            assert!(stepped < 2 * 2000 / 4, "{n} workers stepped over {stepped}");
        }
    }

    /// Where no gap needs stepping one by one (time never falls, nothing oversize), every
    /// gap is passed over unread (the clock skipped): every
    /// packet still gets the input position, clock time and ingress port one worker
    /// gives it, over 2 loops (the seam between them), 3 ports and 2 to 3 workers, with
    /// timestamps that repeat and jump forward.
    #[test]
    fn unread_gaps_give_each_packet_one_worker_s_clock_and_port() {
        let h = crate::io::PcapHeader::new(1, false);
        let frames: Vec<(u64, Vec<u8>)> = (0..3000u64)
            .map(|i| {
                let b = (i % 23) as u8;
                let f = ipv4([10, 0, 0, b], [10, 2, 0, b.wrapping_mul(3)], 1000, 80);
                let ts = i * 1_000 + (i / 500) * 7_000_000_000 - (i % 3) * 1_000;
                (ts, f)
            })
            .collect();
        let trace = Trace::from_packets(
            LinkKind::Ethernet,
            h,
            frames.iter().map(|(t, f)| (*t, &f[..])),
        );
        let (one, _) = given(&trace, 1);
        assert_eq!(one.len(), 2 * 3000);
        for n in [2, 3] {
            let (many, stepped) = given(&trace, n);
            // Nothing stepped one by one: every gap was passed over unread.
            assert_eq!(stepped.iter().sum::<u64>(), 0, "{n} workers");
            assert_eq!(many, one, "{n} workers");
        }
    }

    /// Notes each packet's input position, run-clock time, ingress port and bytes.
    type SeenBytes = std::sync::Arc<std::sync::Mutex<Vec<(u64, u64, u16, Vec<u8>)>>>;

    struct Bytes(Profile, SeenBytes);

    impl Nf for Bytes {
        fn profile(&self) -> &Profile {
            &self.0
        }
        fn process(&mut self, b: &mut Batch, _: &Context) {
            let mut seen = self.1.lock().unwrap();
            for p in b {
                let m = p.meta();
                seen.push((m.seq, m.now_ns, m.in_port, p.data().to_vec()));
            }
        }
    }

    /// Frames of their own bytes and lengths (58–94 B; 12 of 3,000 B, in the big
    /// buffers; 12 of 20,000 B, oversize past 9,000: 186 B on average), with time that
    /// falls twice every 300 records.
    fn own_bytes_trace() -> Trace {
        let h = crate::io::PcapHeader::new(1, false);
        let frames: Vec<(u64, Vec<u8>)> = (0..2500u32)
            .map(|i| {
                let b = (i % 29) as u8;
                let mut f = ipv4([10, 0, 0, b], [10, 2, 0, b.wrapping_mul(3)], 1000, 80);
                f.extend_from_slice(&i.to_le_bytes());
                f.resize(f.len() + (i % 37) as usize, (i % 251) as u8);
                match i % 211 {
                    5 => f.resize(3000, 7),
                    9 => f.resize(20_000, 8),
                    _ => {}
                }
                let low = matches!(i % 300, 150 | 151);
                let ts = u64::from(i) * 1_000 + if low { 0 } else { 5_000_000 };
                (ts, f)
            })
            .collect();
        Trace::from_packets(
            LinkKind::Ethernet,
            h,
            frames.iter().map(|(t, f)| (*t, &f[..])),
        )
    }

    /// Every packet's input position, clock time, port and bytes with `workers` workers
    /// (`ports` ports, 2 loops), the queues forced on or off (`None`: by the rule), the
    /// packets copied (`run`) or viewing the trace (`run_in_place`, `lasting`).
    fn seen_bytes(
        trace: &'static Trace,
        workers: usize,
        ports: u16,
        queue: Option<bool>,
        lasting: bool,
    ) -> Vec<(u64, u64, u16, Vec<u8>)> {
        let seen = std::sync::Arc::default();
        let chains = (0..workers)
            .map(|_| {
                let nf = Bytes(fragile().profile().clone(), std::sync::Arc::clone(&seen));
                Chain::linear(
                    "t",
                    ports,
                    7,
                    vec![("n".into(), Box::new(nf) as Box<dyn Nf>)],
                )
            })
            .collect();
        let opts = RunOptions {
            loops: 2,
            ..RunOptions::default()
        };
        let mut sh = Shards::new(chains, 9000).unwrap();
        if let Some(q) = queue {
            sh.force_queue(q);
        }
        if lasting {
            sh.run_in_place(trace, &opts, &mut NoProgress).unwrap();
        } else {
            sh.run(trace, &opts, &mut NoProgress).unwrap();
        }
        let mut v = std::mem::take(&mut *seen.lock().unwrap());
        v.sort_unstable();
        v
    }

    /// Workers that copy their records into their own queues first (`rss::Queue`, the
    /// in-memory replay) give every packet one worker's bytes, input position, clock
    /// time and port: frames of their own bytes and lengths, some in the big buffers
    /// (the queue's bytes read one by one after a chunk's passes), some oversize (not in
    /// the queue), time that falls (gaps stepped one by one), 1 to 4 ports, 2 and 3
    /// workers, 2 loops.
    #[test]
    fn queued_workers_give_each_packet_one_worker_s_bytes_clock_and_port() {
        let trace: &'static Trace = Box::leak(Box::new(own_bytes_trace()));
        for ports in [1, 3, 4] {
            let one = seen_bytes(trace, 1, ports, None, false);
            assert_eq!(one.len(), 2 * (2500 - 12), "{ports} ports");
            for n in [2, 3] {
                let many = seen_bytes(trace, n, ports, Some(true), false);
                assert!(many == one, "{n} workers, {ports} ports");
            }
        }
    }

    /// Both ways a worker can read its packets (its own queue, or in place in the trace
    /// with the whole-packet prefetch), on both replays (`run` copies every packet,
    /// `run_in_place` lets packets view the trace: the `--loops` path, which had no
    /// queue before session 21), give every packet one worker's bytes, position, clock
    /// time and port, with 2 and 3 workers and 3 ports; and the rule's own choice too.
    #[test]
    fn queued_and_in_place_workers_give_one_worker_s_bytes_on_both_replays() {
        let trace: &'static Trace = Box::leak(Box::new(own_bytes_trace()));
        let one = seen_bytes(trace, 1, 3, None, false);
        assert_eq!(one, seen_bytes(trace, 1, 3, None, true));
        for n in [2, 3] {
            for lasting in [false, true] {
                for queue in [Some(true), Some(false), None] {
                    let many = seen_bytes(trace, n, 3, queue, lasting);
                    assert!(
                        many == one,
                        "{n} workers, queue {queue:?}, in place {lasting}"
                    );
                }
            }
        }
    }

    /// A queued worker's packets view its queue's bytes only when no NF of the chain
    /// writes them: not with the NAT (addresses, ports) alone or after a filter, nor
    /// with a busy NF declaring a written field; the filter, the wire, the monitor and a
    /// busy NF that only reads write none (`writes_bytes`).
    #[test]
    fn only_chains_that_write_no_bytes_view_their_queue() {
        let nf = |name: &str, rest: &str| format!("[[nf]]\nname = \"{name}\"\n{rest}\n");
        let acl = nf(
            "acl",
            "kind = \"ip_filter\"\ndefault = \"allow\"\nrules = []",
        );
        let nat = nf(
            "nat",
            "kind = \"nat\"\ninside = \"192.168.0.0/16\"\npublic = \"198.51.100.1\"",
        );
        let wire = nf("w", "kind = \"wire\"");
        let mon = nf("mon", "kind = \"flow_monitor\"");
        let busy = |fields: &str| nf("b", &format!("kind = \"busy\"\ncycles = 1\n{fields}"));
        let writes = |text: String| {
            let cfg = crate::runtime::ChainConfig::parse(&text, "t").unwrap();
            writes_bytes(&Chain::from_config(&cfg).unwrap())
        };
        assert!(!writes(acl.clone()));
        assert!(!writes(format!("[input]\nports = 2\n{wire}")));
        assert!(!writes(format!("{acl}{mon}")));
        assert!(writes(nat.clone()));
        assert!(writes(format!("{acl}{nat}{mon}")));
        assert!(!writes(busy("reads = [\"ip.src\", \"l4.dst\"]")));
        assert!(writes(busy("writes = [\"ip.ttl\"]")));
        assert!(writes(busy("writes = [\"eth.dst\"]")));
    }

    /// The workers copy their records into their own queues when the trace's packets
    /// are at most `rss::QUEUE_MAX_MEAN` bytes on average (over the table's sample,
    /// checked against every record's mean), and read them in place above: exactly at
    /// the threshold and one byte past it, on the 4sics profile (76 B: queued) and the
    /// merged capture (346 B: in place); never with one worker or when forced.
    #[test]
    fn the_queue_follows_the_trace_s_mean_packet_size() {
        let sized = |len: usize| {
            let h = crate::io::PcapHeader::new(1, false);
            let frames: Vec<Vec<u8>> = (0..3000u32)
                .map(|i| {
                    let b = (i % 41) as u8;
                    let mut f = ipv4([10, 0, 0, b], [10, 2, 0, b], 1000, 80);
                    f.resize(len, 1);
                    f
                })
                .collect();
            Trace::from_packets(
                LinkKind::Ethernet,
                h,
                frames.iter().enumerate().map(|(i, f)| (i as u64, &f[..])),
            )
        };
        let shards = |n: usize| {
            let chains = (0..n)
                .map(|_| Chain::linear("t", 1, 1, vec![("n".into(), fragile())]))
                .collect();
            Shards::new(chains, 65_536).unwrap()
        };
        let max = crate::runtime::rss::QUEUE_MAX_MEAN as usize;
        assert!(shards(2).queues(&sized(max)));
        assert!(!shards(2).queues(&sized(max + 1)));
        assert!(!shards(1).queues(&sized(64)));
        let mut forced = shards(2);
        forced.force_queue(true);
        assert!(forced.queues(&sized(max + 1)));
        forced.force_queue(false);
        assert!(!forced.queues(&sized(64)));
        // The sample's mean against every record's, on a generated and a real trace.
        let mut o = crate::io::gen::GenOptions::profile(crate::io::gen::Profile::FourSics);
        o.count = 90_989;
        let sics = crate::io::gen::generate(&o).unwrap();
        let p = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../shared/datasets/bench/ndpi-ether-merged.pcap"
        );
        let merged = Trace::open(Path::new(p)).ok();
        for (t, small) in [(Some(&sics), true), (merged.as_ref(), false)] {
            let Some(t) = t else {
                eprintln!("skipped: {p} missing");
                continue;
            };
            let (bytes, recs) = t.raw();
            let all = recs.iter().map(|r| u64::from(r.caplen)).sum::<u64>() / recs.len() as u64;
            let sample = Placement::of_trace(t.link(), bytes, recs, 2).mean_caplen();
            assert!(
                sample.abs_diff(all) * 50 <= all,
                "sample {sample}, all {all}"
            );
            assert_eq!(shards(2).queues(t), small, "mean {all}");
        }
    }

    /// Workers that each walk a mapped file (`run_stream`) give every packet the input
    /// position, clock time and port one worker gives it, with 2 and 3 workers over 2
    /// loops and 3 ports, on a trace whose time jumps back and whose frames are partly
    /// oversize (the gaps a worker passes over unread, and those it must step over one
    /// by one, both occur).
    #[test]
    fn streamed_workers_give_each_packet_one_worker_s_clock_and_port() {
        // Whole microseconds: the file keeps no finer time than that.
        let trace = jumping_trace(3000, |t| t / 1000 * 1000);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.pcap");
        trace.write_pcap(&path).unwrap();
        let m = MappedPcap::open(&path).unwrap();
        let streamed = |workers: usize| {
            let seen = Seen::default();
            let chains = (0..workers)
                .map(|_| Chain::linear("t", 3, 7, vec![("n".into(), note(&seen))]))
                .collect();
            let opts = RunOptions {
                loops: 2,
                ..RunOptions::default()
            };
            Shards::new(chains, 100)
                .unwrap()
                .run_stream(&m, &opts, &mut NoProgress)
                .unwrap();
            let mut v = std::mem::take(&mut *seen.lock().unwrap());
            v.sort_unstable();
            v
        };
        let one = streamed(1);
        assert_eq!(one.len(), 2 * (3000 - 3000usize.div_ceil(89)));
        for n in [2, 3] {
            assert_eq!(streamed(n), one, "{n} workers");
        }
    }

    /// On a real capture workers read few of the others' records (only where its
    /// merged captures' time goes back, 2.6 %): before the shares, each of two workers
    /// stepped over every record of the other (all 90,989 between them).
    #[test]
    fn workers_read_only_their_own_records_of_a_real_capture() {
        let p = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../shared/datasets/bench/ndpi-ether-merged.pcap"
        );
        let Ok(trace) = Trace::open(Path::new(p)) else {
            eprintln!("skipped: {p} missing");
            return;
        };
        let seen = Seen::default();
        let chains = (0..2)
            .map(|_| Chain::linear("t", 1, 1, vec![("n".into(), note(&seen))]))
            .collect();
        let s = Shards::new(chains, 65_536)
            .unwrap()
            .run(&trace, &RunOptions::default(), &mut NoProgress)
            .unwrap();
        let stepped: Vec<_> = s.workers.iter().map(|w| w.records_stepped).collect();
        let total = trace.len() as u64;
        assert_eq!(seen.lock().unwrap().len() as u64, total);
        let stepped: u64 = stepped.iter().map(|s| s.unwrap()).sum();
        assert!(
            stepped * 20 < total,
            "workers stepped over {stepped} of {total} records"
        );
    }
}
