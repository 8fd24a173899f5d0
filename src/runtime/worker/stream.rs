//! One worker of a sharded replay of a mapped file that walks the whole file itself
//! (`Shards::run_stream`): every worker parses every record in its own pass, keeps the
//! ones the placement gives it and steps the run clock over the others one by one (the
//! port is the record's position's, `ingest::port_of`). No index of the file and no placement pass before the first packet (on
//! the 4sics profile those two made two workers' whole run slower than one worker's),
//! and each worker reads the file front to back, as one worker does, where the hardware
//! and the reader's own prefetch keep up (a share scattered over an index did not).
//! The price is a parse and a hash of every record on every worker.

use super::{Progress, RunOptions, Runner};
use crate::io::{After, Source};
use crate::packet::MAX_BATCH;
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
        let mut stopped = false;
        'replay: for lp in 0..opts.loops {
            if lp > 0 && !src.rewind() {
                break;
            }
            self.walk.shift = src.span_ns().wrapping_mul(lp);
            loop {
                if opts.stopped() {
                    stopped = true;
                    break 'replay;
                }
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
                // unread (the clock skipped to its last
                // record) when that gives what ticking each would: time does not go
                // back from the record before the gap to the one after this record,
                // and no record in it is oversize (a rule of the old stepped port draw,
                // kept: it only makes a few more gaps tick one by one). Otherwise, and
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
                self.walk.passed = 0;
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
        if let Some(c) = schedule.get(next_change).filter(|_| !stopped) {
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
