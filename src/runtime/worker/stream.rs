//! One worker of a sharded replay of a mapped file that walks the whole file itself
//! (`Shards::run_stream`): every worker parses every record in its own pass, keeps the
//! ones the placement gives it and steps the port draw and the run clock over the others
//! one by one. No index of the file and no placement pass before the first packet (on
//! the 4sics profile those two made two workers' whole run slower than one worker's),
//! and each worker reads the file front to back, as one worker does, where the hardware
//! and the reader's own prefetch keep up (a share scattered over an index did not).
//! The price is a parse and a hash of every record on every worker.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Acquire, Ordering::Release};
use std::sync::{Mutex, RwLock};

use super::{Progress, RunOptions, Runner};
use crate::io::{After, MappedPcap, Record, Source};
use crate::packet::{LinkKind, MAX_BATCH};
use crate::runtime::counters::Summary;
use crate::runtime::rss::{Placement, STEP};
use crate::runtime::shard_control::Gate;

/// Records read at a time: each worker keeps about 1/N of them, in batches of at most
/// [`MAX_BATCH`].
const CHUNK: usize = 8 * MAX_BATCH;

impl Runner {
    /// Replays `src` `opts.loops` times as worker `w` of a sharded run under `place`:
    /// the packets it owns get the port, the clock time and the input position one
    /// worker gives them. Scheduled changes and the gate's live ones apply by position in
    /// the whole input, as in [`Runner::run_share`]. Returns the summary and how many of
    /// the others' records it stepped over.
    pub(in crate::runtime) fn run_stream_share(
        &mut self,
        src: &mut dyn Source,
        (place, w): (&Placement, usize),
        opts: &RunOptions,
        gate: Option<&Gate>,
        progress: &mut dyn Progress,
    ) -> anyhow::Result<(Summary, u64)> {
        self.open_outputs(src.header(), opts)?;
        let link = src.link();
        self.walk.link = link;
        let start = std::time::Instant::now();
        let lasting = src.lasting();
        let mut schedule = opts.schedule.clone();
        schedule.sort_by_key(|c| c.at);
        let mut next_change = 0;
        let mut live = None;
        let mut done = 0u64;
        let mut next_report = 0u64;
        let mut stepped = 0u64;
        let mut started = false;
        let mut mine = [0u32; CHUNK];
        let max = self.walk.pool.max_packet();
        for lp in 0..opts.loops {
            if lp > 0 && !src.rewind() {
                break;
            }
            self.walk.shift = src.span_ns().wrapping_mul(lp);
            loop {
                while let Some(c) = schedule.get(next_change).filter(|c| c.at <= done) {
                    self.apply(&c.nf, &c.cmd).map_err(|e| {
                        anyhow::anyhow!("change at packet {}: `{} {}`: {e}", c.at, c.nf, c.cmd)
                    })?;
                    next_change += 1;
                }
                if let Some(g) = gate {
                    live = g.check(w, done).or(live);
                    if live.as_ref().is_some_and(|o| o.at <= done) {
                        self.apply_order(live.take(), g, w);
                    }
                }
                // A chunk ends where a change applies, so it falls between the packets
                // it names, in every worker.
                let mut want = CHUNK;
                let cut = schedule.get(next_change).map(|c| c.at);
                if let Some(cut) = cut.into_iter().chain(live.as_ref().map(|o| o.at)).min() {
                    want = want.min((cut - done).max(1) as usize);
                }
                let (bytes, chunk, next) = src.next_chunk(want);
                if chunk.is_empty() {
                    break;
                }
                let n = chunk.len();
                if !started {
                    started = true;
                    self.walk.clock.start(chunk.iter().take(3).map(|r| r.ts_ns));
                }
                let after = match next {
                    After::Record(t) => Some(t.wrapping_add(self.walk.shift)),
                    After::PassEnd(t) if lp + 1 < opts.loops => {
                        Some(t.wrapping_add(self.walk.shift))
                    }
                    _ => None,
                };
                // This worker's records of the chunk. The gap before one is passed over
                // unread (the draw stepped by its length, the clock skipped to its last
                // record) when that gives what ticking each would: time does not go
                // back from the record before the gap to the one after this record,
                // and no record in it is oversize (those take no draw). Otherwise, and
                // for a gap at the chunk's start or a record at its end (whose
                // neighbours lie in other chunks), one by one ([`STEP`]).
                let shift = self.walk.shift;
                let (mut k, mut prev) = (0, usize::MAX);
                // The last record that went back in time, the last oversize one, and
                // the time of the one before.
                let (mut back, mut big, mut last) = (0, usize::MAX, 0u64);
                for (i, r) in chunk.iter().enumerate() {
                    let t = r.ts_ns.wrapping_add(shift);
                    if i > 0 && t < last {
                        back = i;
                        // The gap before the record just kept needed this one's time.
                        if prev == i - 1 && k > 0 {
                            mine[k - 1] |= STEP;
                        }
                    }
                    last = t;
                    let off = r.off as usize;
                    let data = bytes.get(off..off + r.caplen as usize).unwrap_or(&[]);
                    if place.worker_of(link, data) == w {
                        let easy = prev != usize::MAX
                            && (big == usize::MAX || big <= prev)
                            && back <= prev;
                        let gap = i > prev.wrapping_add(1);
                        mine[k] = i as u32 | if gap && !easy { STEP } else { 0 };
                        k += 1;
                        prev = i;
                    }
                    if r.caplen as usize > max {
                        big = i;
                    }
                }
                // The last record's successor lies in the next chunk.
                if prev == n - 1 && k > 0 {
                    mine[k - 1] |= STEP;
                }
                stepped += (n - k) as u64;
                self.poll_control();
                self.walk.drawn = 0;
                for batch in mine[..k].chunks(MAX_BATCH) {
                    self.stage_room()?;
                    self.walk
                        .ingest(lasting, bytes, chunk, batch.iter().copied(), done, after);
                    match self.fast.as_deref_mut() {
                        Some(f) => f.chunk(&mut self.walk),
                        None => self.walk.drain(None),
                    }
                    self.end_chunk()?;
                    if let Some(v) = self.walk.violation.take() {
                        anyhow::bail!("{v}");
                    }
                }
                // The chunk's records after this worker's last one.
                self.walk.end_loop(chunk, after, true);
                done += n as u64;
                if done >= next_report {
                    progress.update(done, src.records_hint().saturating_mul(opts.loops));
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
        if let Some(g) = gate {
            self.apply_order(live.take(), g, w);
            g.end_at(w, done, |mut o| {
                let r = self.apply_prepared(&o.nf, &o.cmd, o.prepared.as_mut());
                (r, o.prepared)
            });
        }
        progress.finish();
        let seconds = start.elapsed().as_secs_f64();
        let s = self.finish(src.error().map(|e| e.to_string()), opts, seconds)?;
        Ok((s, stepped))
    }
}

/// Records in a chunk of a split walk ([`Split`]): large enough that the hand-off (a
/// lock, two atomics) is a few instructions a record, small enough that a worker's
/// chunks in flight stay in cache (24 bytes a record and 4 a list entry).
pub(in crate::runtime) const SPLIT_RECORDS: usize = 2048;
/// Chunks in flight per worker: a worker that is ahead scans at most this many chunks
/// past the one it consumes.
const SLOTS_PER_WORKER: usize = 4;

/// A mapped file walked by N workers together (issue 21), each record parsed and placed
/// once: chunk `c` of [`Split::records`] records is read (by the one shared reader, in
/// chunk order) and placed by worker `c mod N`, which writes its records' descriptors
/// (offsets into the map, not their bytes) and, per destination worker, the list of
/// that worker's records in it (with [`STEP`] where the gap before one must be stepped
/// one by one) into slot `c mod S`; every worker then replays its lists of every chunk
/// in chunk order. The reader is passed on as soon as the chunk is read, so one worker
/// reads while the other places and replays.
pub(in crate::runtime) struct Split {
    n: usize,
    records: usize,
    reader: Mutex<MappedPcap>,
    /// The next chunk to read from `reader`.
    turn: AtomicU64,
    /// The number of chunks, once the reader's end was reached (`u64::MAX` before).
    end: AtomicU64,
    /// Set when a worker stops early: the others stop waiting for it.
    quit: AtomicBool,
    slots: Vec<Slot>,
}

struct Slot {
    chunk: RwLock<Chunk>,
    /// The chunk it holds, plus one, once written.
    ready: AtomicU64,
    /// Workers done with it, over every chunk it held.
    used: AtomicU64,
}

#[derive(Default)]
struct Chunk {
    recs: Vec<Record>,
    /// Per destination worker, its records' indices in `recs` (with [`STEP`]).
    lists: Vec<Vec<u32>>,
    after: Option<u64>,
}

/// Sets [`Split::quit`] unless the worker ended normally.
struct Quit<'a>(&'a Split, bool);

impl Drop for Quit<'_> {
    fn drop(&mut self) {
        if !self.1 {
            self.0.quit.store(true, Release);
        }
    }
}

impl Split {
    pub(in crate::runtime) fn new(reader: MappedPcap, n: usize, records: usize) -> Split {
        // The run clock starts on the first three records (`Clock::start`): chunk 0
        // holds them.
        let records = records.max(3);
        let slots = (0..n * SLOTS_PER_WORKER)
            .map(|_| Slot {
                chunk: RwLock::new(Chunk {
                    recs: Vec::with_capacity(records),
                    lists: (0..n).map(|_| Vec::with_capacity(records)).collect(),
                    after: None,
                }),
                ready: AtomicU64::new(0),
                used: AtomicU64::new(0),
            })
            .collect();
        Split {
            n,
            records,
            reader: Mutex::new(reader),
            turn: AtomicU64::new(0),
            end: AtomicU64::new(u64::MAX),
            quit: AtomicBool::new(false),
            slots,
        }
    }

    fn slot(&self, c: u64) -> &Slot {
        &self.slots[(c % self.slots.len() as u64) as usize]
    }

    /// Whether chunk `c` can be read now: the reader has read every chunk before it and
    /// every worker is done with the chunk its slot held before.
    fn can_scan(&self, c: u64) -> bool {
        let s = self.slots.len() as u64;
        self.turn.load(Acquire) == c && self.slot(c).used.load(Acquire) >= self.n as u64 * (c / s)
    }

    /// Reads chunk `c` (its turn, its slot free: [`Split::can_scan`]) and places its
    /// records, as `run_stream_share` does for one worker.
    fn scan(&self, c: u64, place: &Placement, link: LinkKind, max: usize, map: &[u8]) {
        let slot = self.slot(c);
        let mut ch = slot.chunk.write().unwrap_or_else(|e| e.into_inner());
        let ch = &mut *ch;
        {
            let mut rd = self.reader.lock().unwrap_or_else(|e| e.into_inner());
            let (_, recs, next) = rd.next_chunk(self.records);
            ch.recs.clear();
            ch.recs.extend_from_slice(recs);
            // One loop: the pass's end has no successor.
            ch.after = match next {
                After::Record(t) => Some(t),
                _ => None,
            };
        }
        if ch.recs.is_empty() {
            self.end.store(c, Release);
        }
        self.turn.store(c + 1, Release);
        let lists = &mut ch.lists;
        for l in lists.iter_mut() {
            l.clear();
        }
        // The rule of `run_stream_share`, for every destination at once: the gap before
        // a record is passed over unread when time does not go back from the record
        // before the gap to the one after this record and nothing in it is oversize.
        let mut prev = [usize::MAX; crate::runtime::shard::MAX_WORKERS];
        let (mut back, mut big, mut last, mut dlast) = (0, usize::MAX, 0u64, 0usize);
        for (i, r) in ch.recs.iter().enumerate() {
            let t = r.ts_ns;
            if i > 0 && t < last {
                back = i;
                // The gap before record i - 1 (its worker's last) needed this one's time.
                if let Some(e) = lists[dlast].last_mut() {
                    *e |= STEP;
                }
            }
            last = t;
            let off = r.off as usize;
            let data = map.get(off..off + r.caplen as usize).unwrap_or(&[]);
            let d = place.worker_of(link, data);
            let p = prev[d];
            let easy = p != usize::MAX && (big == usize::MAX || big <= p) && back <= p;
            let gap = i > p.wrapping_add(1);
            lists[d].push(i as u32 | if gap && !easy { STEP } else { 0 });
            prev[d] = i;
            dlast = d;
            if r.caplen as usize > max {
                big = i;
            }
        }
        // The last record's successor lies in the next chunk.
        if let Some(e) = lists[dlast].last_mut().filter(|_| !ch.recs.is_empty()) {
            *e |= STEP;
        }
        slot.ready.store(c + 1, Release);
    }
}

impl Runner {
    /// Replays a [`Split`] walk (one loop, no scheduled or live changes) as worker `w`:
    /// reads and places its chunks, replays its lists of every chunk in order. Every
    /// packet gets the port, clock time and position one worker gives it. Returns the
    /// summary and how many of the others' records it passed over.
    pub(in crate::runtime) fn run_split_share(
        &mut self,
        split: &Split,
        (place, w): (&Placement, usize),
        opts: &RunOptions,
    ) -> anyhow::Result<(Summary, u64)> {
        let mut quit = Quit(split, false);
        let (header, link, map) = {
            let rd = split.reader.lock().unwrap_or_else(|e| e.into_inner());
            (rd.header(), rd.link(), rd.format().0)
        };
        self.open_outputs(header, opts)?;
        self.walk.link = link;
        self.walk.shift = 0;
        let start = std::time::Instant::now();
        let max = self.walk.pool.max_packet();
        let window = split.slots.len() as u64;
        let (n, w64) = (split.n as u64, w as u64);
        let (mut next_scan, mut next) = (w64, 0u64);
        let (mut done, mut stepped, mut started) = (0u64, 0u64, false);
        loop {
            if split.quit.load(Acquire) {
                anyhow::bail!("stopped: another worker failed");
            }
            let end = split.end.load(Acquire);
            if next >= end {
                break;
            }
            // Reading and placing first: the other workers wait on it.
            if next_scan < end && next_scan < next + window && split.can_scan(next_scan) {
                split.scan(next_scan, place, link, max, map);
                next_scan += n;
                continue;
            }
            let slot = split.slot(next);
            if slot.ready.load(Acquire) != next + 1 {
                // Behind the reader or the placing worker: give the core away (two
                // cores, two workers: never spin against the thread being waited for).
                std::thread::yield_now();
                continue;
            }
            {
                let ch = slot.chunk.read().unwrap_or_else(|e| e.into_inner());
                let recs = &ch.recs[..];
                let mine = &ch.lists[w][..];
                if !started {
                    started = true;
                    self.walk.clock.start(recs.iter().take(3).map(|r| r.ts_ns));
                }
                self.poll_control();
                self.walk.drawn = 0;
                for batch in mine.chunks(MAX_BATCH) {
                    self.stage_room()?;
                    self.walk
                        .ingest(Some(map), map, recs, batch.iter().copied(), done, ch.after);
                    match self.fast.as_deref_mut() {
                        Some(f) => f.chunk(&mut self.walk),
                        None => self.walk.drain(None),
                    }
                    self.end_chunk()?;
                    if let Some(v) = self.walk.violation.take() {
                        anyhow::bail!("{v}");
                    }
                }
                // The chunk's records after this worker's last one.
                self.walk.end_loop(recs, ch.after, true);
                done += recs.len() as u64;
                stepped += (recs.len() - mine.len()) as u64;
            }
            slot.used.fetch_add(1, Release);
            next += 1;
        }
        quit.1 = true;
        let error = {
            let rd = split.reader.lock().unwrap_or_else(|e| e.into_inner());
            rd.error().map(|e| e.to_string())
        };
        let seconds = start.elapsed().as_secs_f64();
        let s = self.finish(error, opts, seconds)?;
        Ok((s, stepped))
    }
}
