//! Reading a classic pcap file in place: mapped once, walked record by record as the
//! worker consumes it (no index, no separate pass), its packets handed out as read-only
//! views of the map (`Packet::set_view`) so that nothing is copied unless an NF writes.
//!
//! The map is leaked for the rest of the process: a view may be anywhere a packet goes
//! (stage threads, NF queues, pools) until the process exits, and `'static` is the
//! lifetime that says so to the compiler. `catena run` maps one file per process.
//!
//! A file truncated under a map turns the next touch of a page past its new end into
//! SIGBUS. [`MappedPcap`] installs a SIGBUS handler that maps zero pages over the rest of
//! its map and notes the fault: the pass ends at the next record (a later loop reports
//! the change as [`TraceError::Changed`], the first as [`TraceError::Shrank`]) and the run
//! exits with an error instead of being killed. A packet whose bytes were cut off while it
//! was in flight reads zeros from there on; the error says the input changed.
//!
//! Errors follow [`PcapStream`](super::PcapStream): a bad file header is `Err` from
//! [`MappedPcap::open`], a bad record ends the input there, later loops replay exactly the
//! records of the first one.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::OnceLock;

use super::pcap_read::{PcapFormat, RawRecord, RecordProblem, PCAP_HEADER_LEN};
use super::source::{After, Source};
use super::trace::{PcapHeader, Record};
use super::TraceError;
use crate::packet::{prefetch_ptr, LinkKind};

/// The packet buffers' largest class: bigger records are dropped as `oversize`.
const MAX_BUFFERED_PACKET: usize = 65_536;
/// How far ahead of the parse position the map is prefetched. Parsing is a dependent
/// chain (each record's length says where the next starts), so without it every record
/// header of a cold map waits a full memory latency; `read(2)` streams instead.
const AHEAD: usize = 4096;
/// The map's pages further than this behind the parse position are given back
/// (`MADV_DONTNEED`, a syscall per this many bytes), so the run's resident memory stays
/// about this window, not the file: a packet still viewing them re-faults them from the
/// page cache, unchanged.
const KEEP: usize = 32 << 20;
/// The map's page tables are filled this many bytes at a time ahead of the parse position
/// (`MADV_POPULATE_READ`, one syscall per step) instead of by a page fault every 64 KiB
/// (the kernel's fault-around): 2,400 faults on a 160 MB trace were about a tenth of
/// `run`'s CPU time.
const POPULATE: usize = 2 << 20;
/// With a helper thread ([`MappedPcap::populate_ahead`]), how far ahead of the parse
/// position it keeps the page tables filled; the worker wakes it once the position is
/// within [`POPULATE`] of that end, about once every 6 MiB.
const AHEAD_WINDOW: usize = 8 << 20;

/// The helper that fills the page tables ahead of the worker (see
/// [`MappedPcap::populate_ahead`]): the worker's position, published when it wakes it.
struct Ahead {
    pos: std::sync::Arc<AtomicUsize>,
    thread: std::thread::JoinHandle<()>,
}

/// Position that tells the helper to end.
const STOP: usize = usize::MAX;

pub struct MappedPcap {
    path: PathBuf,
    map: &'static [u8],
    fmt: PcapFormat,
    pos: usize,
    /// Prefetched up to here.
    fetched: usize,
    /// Pages before this were given back to the page cache.
    released: usize,
    /// Page tables filled up to here (see [`POPULATE`]); `usize::MAX` once the kernel
    /// refused (older than 5.14, or the file shrank): faults fill them from then on.
    populated: usize,
    /// The helper thread filling page tables, if one was started.
    ahead: Option<Ahead>,
    chunk: Vec<Record>,
    count: u64,
    first_pass: Option<u64>,
    done: bool,
    ts_min: u64,
    ts_max: u64,
    first_ts: Option<u64>,
    error: Option<TraceError>,
    changed: bool,
    loops_done: u64,
}

impl MappedPcap {
    /// Maps the regular file `path` (a pcap, not pcapng) and reads its header.
    pub fn open(path: &Path) -> Result<MappedPcap, TraceError> {
        let open_err = |source| TraceError::Open {
            path: path.to_owned(),
            source,
        };
        let file = File::open(path).map_err(open_err)?;
        let meta = file.metadata().map_err(open_err)?;
        if !meta.is_file() {
            return Err(open_err(io::Error::other(
                "not a regular file: only a file can be mapped",
            )));
        }
        if meta.len() == 0 {
            return Err(TraceError::Empty {
                path: path.to_owned(),
            });
        }
        // SAFETY: read-only map of a regular file. Another process may truncate the file
        // under it: `guard` turns the SIGBUS that would follow into zero pages and a flag
        // checked after every record (module docs).
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(open_err)?;
        #[cfg(unix)]
        let _ = map.advise(memmap2::Advice::Sequential);
        let map: &'static [u8] = Box::leak(Box::new(map));
        guard(map).map_err(open_err)?;
        let fmt = PcapFormat::parse(path, map)?;
        Ok(Self::at_start(path, map, fmt))
    }

    /// Another reader of the same map, from its first record (issue 21: each sharded
    /// worker walks the file; one map, so one SIGBUS guard and one set of page tables).
    pub fn reader(&self) -> MappedPcap {
        Self::at_start(&self.path, self.map, self.fmt)
    }

    /// A reader of `map` before its first record.
    fn at_start(path: &Path, map: &'static [u8], fmt: PcapFormat) -> MappedPcap {
        MappedPcap {
            path: path.to_owned(),
            map,
            fmt,
            pos: PCAP_HEADER_LEN,
            fetched: PCAP_HEADER_LEN,
            released: 0,
            populated: 0,
            ahead: None,
            chunk: Vec::with_capacity(64),
            count: 0,
            first_pass: None,
            done: false,
            ts_min: u64::MAX,
            ts_max: 0,
            first_ts: None,
            error: None,
            changed: false,
            loops_done: 0,
        }
    }

    /// The map and its record format (issue 21: the sharded run samples the file).
    pub(crate) fn format(&self) -> (&'static [u8], PcapFormat) {
        (self.map, self.fmt)
    }

    /// Drops the map's pages from `released` up to `to` (rounded down to a page) from
    /// this process: the file's bytes stay in the page cache and the addresses valid.
    fn release(&mut self, to: usize) {
        let page = PAGE.load(Relaxed);
        let to = to / page * page;
        if to <= self.released {
            return;
        }
        // SAFETY: a page-aligned range inside our own read-only file map; MADV_DONTNEED
        // on it only unmaps pages, which the next access maps again from the file.
        unsafe {
            libc::madvise(
                self.map.as_ptr().add(self.released) as *mut libc::c_void,
                to - self.released,
                libc::MADV_DONTNEED,
            );
        }
        self.released = to;
    }

    /// Moves the filling of page tables (`MADV_POPULATE_READ`, the system time of a
    /// run over a big file: 20–30 ms of a 160 ms run when the page cache holds the file
    /// in 4 KiB pages) to a thread of its own, [`AHEAD_WINDOW`] ahead of this reader,
    /// for a run whose second core would sit idle (one worker). The same work, off the
    /// worker's core; nothing else changes (the helper only maps pages of the file).
    pub fn populate_ahead(&mut self) {
        if self.ahead.is_some() || self.populated == usize::MAX {
            return;
        }
        let pos = std::sync::Arc::new(AtomicUsize::new(self.pos));
        let (map, shared) = (self.map, pos.clone());
        let spawned = std::thread::Builder::new()
            .name("populate".into())
            .spawn(move || populate_loop(map, &shared));
        if let Ok(thread) = spawned {
            self.ahead = Some(Ahead { pos, thread });
            self.populated = 0;
        }
    }

    /// Fills the page tables of the next [`POPULATE`] bytes once the parse position is
    /// within one step of the filled end. Only a hint: an error stops it for good.
    fn populate(&mut self) {
        if self.pos + POPULATE <= self.populated || self.populated >= self.map.len() {
            return;
        }
        if let Some(a) = &self.ahead {
            // The helper covers [pos, pos + AHEAD_WINDOW): one wake-up per ~6 MiB.
            a.pos.store(self.pos, Relaxed);
            a.thread.thread().unpark();
            self.populated = self.pos + AHEAD_WINDOW;
            return;
        }
        let page = PAGE.load(Relaxed);
        let from = self.populated.max(self.pos) / page * page;
        let to = (from + POPULATE).min(self.map.len());
        // SAFETY: a page-aligned start inside our own read-only file map, a length that
        // stays inside it; MADV_POPULATE_READ only faults pages in, as reading them would.
        let r = unsafe {
            libc::madvise(
                self.map.as_ptr().add(from) as *mut libc::c_void,
                to - from,
                libc::MADV_POPULATE_READ,
            )
        };
        self.populated = if r == 0 { to } else { usize::MAX };
    }

    fn record_error(&mut self, problem: RecordProblem) {
        self.done = true;
        match self.first_pass {
            Some(n) if self.count < n => self.changed_error(),
            Some(_) => {}
            None => {
                self.error = Some(TraceError::Record {
                    path: self.path.clone(),
                    record: self.count + 1,
                    offset: self.pos as u64,
                    problem,
                })
            }
        }
    }

    fn changed_error(&mut self) {
        self.changed = true;
        self.done = true;
        self.error = Some(match self.first_pass {
            Some(expected) => TraceError::Changed {
                path: self.path.clone(),
                pass: self.loops_done + 1,
                record: self.count + 1,
                expected,
            },
            None => TraceError::Shrank {
                path: self.path.clone(),
                record: self.count + 1,
            },
        });
    }
}

impl MappedPcap {
    /// [`Source::next_chunk`] without the `Record`s: each record of the next (up to
    /// `max`) is given to `put` as its index in the chunk, its bytes (a view of the map),
    /// wire length and capture time, and the count taken is returned. `put` returning
    /// `false` refuses a record: the chunk ends before it, and the next call starts with
    /// it. The one-worker run fills its packets so (`Walk::ingest_mapped`): a `Record`
    /// stored here and loaded back there cost about a tenth of a packet's instructions.
    ///
    /// The caller then reports the least and the greatest time it was given
    /// ([`widen_span`](Self::widen_span)) before asking what follows
    /// ([`after`](Self::after)): the first pass's span, which later passes are shifted
    /// by, is made of them. The caller's pass over its packets finds them in registers;
    /// kept here they cost ~8 instructions a record in a loop short of registers.
    ///
    /// Records of more than `fits` bytes are refused without asking `put`; `put` is
    /// given `i < max`. Returns the count and the sum of their lengths.
    #[inline]
    pub fn next_with(
        &mut self,
        max: usize,
        fits: usize,
        mut put: impl FnMut(usize, &'static [u8], u32, u64) -> bool,
    ) -> (usize, u64) {
        let map = self.map;
        let from = self.pos;
        let n = self.fill(max, fits, |i, off, r| {
            // SAFETY: the record's `caplen` bytes lie inside the map: `fill`'s stretch
            // showed it for the whole chunk, or `fmt.record` checked it for this record.
            let bytes = unsafe { map.get_unchecked(off..off + r.caplen as usize) };
            put(i, bytes, r.wire_len, r.ts_ns)
        });
        // The first time read back from the chunk's first record once, rather than
        // kept per record (an `Option` carried through the loop cost ~6 a record).
        if self.first_ts.is_none() && n > 0 {
            self.first_ts = map.get(from..).and_then(|rest| self.fmt.peek_ts(rest));
        }
        // The records lie back to back: their bytes are what the position moved by less
        // their headers (a sum kept per record cost a load and a store each).
        let moved = (self.pos - from) as u64;
        (n, moved - (n * self.fmt.rec_hdr_len()) as u64)
    }

    /// Takes the times `lo..=hi` of records [`next_with`](Self::next_with) gave into the
    /// first pass's span; a no-op once the first pass is over (`rewind`).
    #[inline]
    pub fn widen_span(&mut self, lo: u64, hi: u64) {
        if self.first_pass.is_none() {
            self.ts_min = self.ts_min.min(lo);
            self.ts_max = self.ts_max.max(hi);
        }
    }

    /// Walks up to `max` next records of this pass, giving each to `put` (its index in
    /// the chunk, where its bytes start in the map, its header) until `put` refuses one
    /// or one holds more than `fits` bytes (refused without asking `put`); the count
    /// taken. Ends the pass at the map's end or a bad record as the module docs say.
    #[inline(always)]
    fn fill(
        &mut self,
        max: usize,
        fits: usize,
        mut put: impl FnMut(usize, usize, &RawRecord) -> bool,
    ) -> usize {
        if self.pos >= self.released + 2 * KEEP {
            self.release(self.pos - KEEP);
        }
        self.populate();
        // The walk keeps its state in locals (stores to `self` in the loop made the
        // compiler reload its fields) and prefetches through a raw pointer: this loop
        // runs once per record.
        let map = self.map;
        let fmt = self.fmt;
        let stop = self.first_pass.unwrap_or(u64::MAX);
        let (mut pos, mut fetched, mut count) = (self.pos, self.fetched, self.count);
        let mut ended = None;
        let mut n = 0;
        if !self.done {
            // Records left in this pass bound the chunk as `max` does: the pass ends
            // (below) when the count reaches them with room to spare.
            let room = (max as u64).min(stop.saturating_sub(count)) as usize;
            let mut refused = false;
            // The stretch checked once: when `room` records of at most `cap` bytes each
            // fit in what is left of the map, every record this chunk takes lies inside
            // it, so the loop below reads headers without checking each against the
            // end. A record it cannot take so (longer than `cap`, or a SIGBUS seen) is
            // left to the checked loop after it, which reads it again.
            let h = fmt.rec_hdr_len();
            let cap = fits.min(fmt.caplen_limit() as usize);
            let stretch = room.checked_mul(h + cap);
            if stretch.is_some_and(|s| s <= map.len().saturating_sub(pos)) {
                let start = pos;
                while n < room {
                    // No `min` with the map's end here: a prefetch past it is harmless.
                    prefetch_to(map, &mut fetched, pos + AHEAD);
                    debug_assert!(pos + h + cap <= start + room * (h + cap));
                    // SAFETY: each record taken so far held at most `cap` bytes, so record
                    // `n` starts at most `n * (h + cap)` past `start`, and its header ends
                    // before `start + room * (h + cap) <= map.len()` (`n < room`). 16 <= h.
                    let hdr = unsafe { &*map.as_ptr().add(pos).cast::<[u8; 16]>() };
                    let r = fmt.record_at(hdr);
                    // The header just read may be a zero page the SIGBUS guard put there.
                    if r.caplen as usize > cap || FAULTED.load(Relaxed) {
                        break;
                    }
                    if !put(n, pos + h, &r) {
                        refused = true;
                        break;
                    }
                    n += 1;
                    pos += r.len;
                }
            }
            while n < room && !refused {
                prefetch_to(map, &mut fetched, (pos + AHEAD).min(map.len()));
                if pos == map.len() {
                    ended = Some(None);
                    break;
                }
                match fmt.record(&map[pos..]) {
                    // The header just read may be a zero page the SIGBUS guard put there.
                    _ if FAULTED.load(Relaxed) => {
                        ended = Some(Some(None));
                        break;
                    }
                    Ok(r) => {
                        if r.caplen as usize > fits || !put(n, pos + r.data_off, &r) {
                            refused = true;
                            break;
                        }
                        n += 1;
                        pos += r.len;
                    }
                    Err(problem) => {
                        ended = Some(Some(Some(problem)));
                        break;
                    }
                }
            }
            count += n as u64;
            if ended.is_none() && !refused && count == stop && n < max {
                self.done = true;
            }
        }
        (self.pos, self.fetched, self.count) = (pos, fetched, count);
        match ended {
            // The end of the map.
            Some(None) => {
                if self.first_pass.is_some_and(|n| self.count < n) {
                    self.changed_error();
                }
                self.done = true;
            }
            Some(Some(None)) => self.changed_error(),
            Some(Some(Some(problem))) => self.record_error(problem),
            None => {}
        }
        n
    }

    /// What follows the records read so far (see [`After`]).
    pub fn after(&self) -> After {
        if self.error.is_some() {
            After::Unknown
        } else if self.done || self.first_pass == Some(self.count) || self.pos == self.map.len() {
            let span = self.span_ns();
            self.first_ts
                .map_or(After::Unknown, |t| After::PassEnd(t.wrapping_add(span)))
        } else {
            self.fmt
                .peek_ts(&self.map[self.pos..])
                .map_or(After::Unknown, After::Record)
        }
    }
}

impl Source for MappedPcap {
    fn link(&self) -> LinkKind {
        self.fmt.link
    }

    fn header(&self) -> PcapHeader {
        self.fmt.header
    }

    fn max_packet_len(&self) -> usize {
        (self.fmt.caplen_limit() as usize).min(MAX_BUFFERED_PACKET)
    }

    fn lasting(&self) -> Option<&'static [u8]> {
        Some(self.map)
    }

    fn mapped(&mut self) -> Option<&mut MappedPcap> {
        Some(self)
    }

    fn next_chunk(&mut self, max: usize) -> (&[u8], &[Record], After) {
        let mut chunk = std::mem::take(&mut self.chunk);
        chunk.clear();
        if chunk.capacity() < max {
            chunk.reserve(max);
        }
        let out = chunk.spare_capacity_mut();
        // Records go straight into the chunk's spare room (a `push` per record made the
        // compiler check the capacity and store the length each time).
        let n = self.fill(max, usize::MAX, |i, off, r| {
            // SAFETY: `fill` passes `i < max`, and `out` holds at least `max` slots.
            unsafe { out.get_unchecked_mut(i) }.write(Record {
                off: off as u64,
                caplen: r.caplen,
                wire_len: r.wire_len,
                ts_ns: r.ts_ns,
            });
            true
        });
        // SAFETY: the first `n` slots were written just above (`chunk` was empty).
        unsafe { chunk.set_len(n) };
        // The first pass's time span, once per chunk rather than in the record loop
        // (fewer values live across it).
        if self.first_pass.is_none() {
            for r in &chunk {
                self.ts_min = self.ts_min.min(r.ts_ns);
                self.ts_max = self.ts_max.max(r.ts_ns);
            }
        }
        if self.first_ts.is_none() {
            self.first_ts = chunk.first().map(|r| r.ts_ns);
        }
        self.chunk = chunk;
        let next = self.after();
        (self.map, &self.chunk, next)
    }

    fn rewind(&mut self) -> bool {
        if self.first_pass.is_none() {
            self.first_pass = Some(self.count);
        }
        self.loops_done += 1;
        if self.changed {
            return false;
        }
        // The last window stays mapped (a small trace is never released at all).
        self.release(self.pos.saturating_sub(KEEP));
        self.released = 0;
        if self.populated != usize::MAX {
            self.populated = 0;
        }
        self.pos = PCAP_HEADER_LEN;
        self.fetched = PCAP_HEADER_LEN;
        self.count = 0;
        self.done = false;
        true
    }

    fn span_ns(&self) -> u64 {
        if self.ts_min > self.ts_max {
            1
        } else {
            self.ts_max - self.ts_min + 1
        }
    }

    fn records_hint(&self) -> u64 {
        if let Some(n) = self.first_pass {
            return n;
        }
        if self.count == 0 || self.pos <= PCAP_HEADER_LEN {
            return self.map.len() as u64 / 512;
        }
        (self.count as u128 * self.map.len() as u128 / self.pos as u128) as u64
    }

    fn error(&self) -> Option<&TraceError> {
        self.error.as_ref()
    }
}

impl Drop for MappedPcap {
    fn drop(&mut self) {
        if let Some(a) = self.ahead.take() {
            a.pos.store(STOP, Relaxed);
            a.thread.thread().unpark();
            let _ = a.thread.join();
        }
    }
}

/// The helper of [`MappedPcap::populate_ahead`]: fills `map`'s page tables from the
/// published position to [`AHEAD_WINDOW`] past it, [`POPULATE`] bytes a call, then
/// sleeps until woken. A position behind the last one is a new loop over the file. An
/// error (a kernel before 5.14, a file that shrank) ends it: faults fill the rest.
fn populate_loop(map: &'static [u8], pos: &AtomicUsize) {
    let page = PAGE.load(Relaxed);
    let (mut filled, mut last) = (0usize, 0usize);
    loop {
        let p = pos.load(Relaxed);
        if p == STOP {
            return;
        }
        if p < last {
            filled = 0;
        }
        last = p;
        let target = p.saturating_add(AHEAD_WINDOW).min(map.len());
        let mut from = filled.max(p) / page * page;
        while from < target {
            if pos.load(Relaxed) == STOP {
                return;
            }
            let to = (from + POPULATE).min(map.len());
            // SAFETY: a page-aligned start inside the leaked read-only file map, a length
            // that stays inside it; MADV_POPULATE_READ only faults pages in.
            let r = unsafe {
                libc::madvise(
                    map.as_ptr().add(from) as *mut libc::c_void,
                    to - from,
                    libc::MADV_POPULATE_READ,
                )
            };
            if r != 0 {
                return;
            }
            from = to;
            filled = to;
        }
        std::thread::park();
    }
}

/// Prefetches the map's lines from `fetched` up to `ahead`, moving `fetched` on. Four
/// lines a step: the same lines, a quarter of the loop's branches.
#[inline(always)]
fn prefetch_to(map: &[u8], fetched: &mut usize, ahead: usize) {
    while *fetched < ahead {
        let at = map.as_ptr().wrapping_add(*fetched);
        prefetch_ptr(at);
        prefetch_ptr(at.wrapping_add(64));
        prefetch_ptr(at.wrapping_add(128));
        prefetch_ptr(at.wrapping_add(192));
        *fetched += 256;
    }
}

/// The guarded map (one per process: the last one opened) and whether it faulted.
static GUARD_START: AtomicUsize = AtomicUsize::new(0);
static GUARD_END: AtomicUsize = AtomicUsize::new(0);
static FAULTED: AtomicBool = AtomicBool::new(false);
/// Read in the handler, where `sysconf` is not to be called.
static PAGE: AtomicUsize = AtomicUsize::new(4096);
/// What handled SIGBUS before (Rust's stack-overflow handler): faults outside the map
/// go back to it.
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// Makes a truncation of the file under `map` end the pass instead of the process.
fn guard(map: &'static [u8]) -> io::Result<()> {
    let page = page_size();
    PAGE.store(page, Relaxed);
    let start = map.as_ptr() as usize;
    let end = start + map.len().div_ceil(page) * page;
    GUARD_START.store(0, Relaxed);
    GUARD_END.store(end, Relaxed);
    GUARD_START.store(start, Relaxed);
    FAULTED.store(false, Relaxed);
    if PREVIOUS.get().is_some() {
        return Ok(());
    }
    // SAFETY: a zeroed sigaction is a valid starting point; the handler only uses
    // async-signal-safe operations (atomics, mmap, sigaction).
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = on_sigbus as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        libc::sigemptyset(&mut act.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGBUS, &act, &mut old) != 0 {
            return Err(io::Error::last_os_error());
        }
        let _ = PREVIOUS.set(old);
    }
    Ok(())
}

extern "C" fn on_sigbus(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo with SA_SIGINFO.
    let addr = unsafe { (*info).si_addr() } as usize;
    let (start, end) = (GUARD_START.load(Relaxed), GUARD_END.load(Relaxed));
    if start != 0 && (start..end).contains(&addr) {
        let page = addr & !(PAGE.load(Relaxed) - 1);
        // SAFETY: replaces pages of our own (leaked, read-only) map, past the file's new
        // end, with zero pages; the faulting read is retried on them.
        let r = unsafe {
            libc::mmap(
                page as *mut libc::c_void,
                end - page,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if r != libc::MAP_FAILED {
            FAULTED.store(true, Relaxed);
            return;
        }
    }
    // Not ours: restore the previous handling; the retried access faults into it.
    if let Some(old) = PREVIOUS.get() {
        // SAFETY: `old` is what sigaction returned when the guard was installed.
        unsafe { libc::sigaction(libc::SIGBUS, old, std::ptr::null_mut()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::Trace;

    /// A µs pcap of `n` records of growing length; the last cut short by `cut` bytes.
    fn pcap(n: usize, cut: usize) -> Vec<u8> {
        let mut b = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        b.extend(65535u32.to_le_bytes());
        b.extend(1u32.to_le_bytes());
        for i in 0..n {
            let len = 60 + i * 37 % 1500;
            b.extend((i as u32 / 3).to_le_bytes());
            b.extend((i as u32 * 11).to_le_bytes());
            b.extend((len as u32).to_le_bytes());
            b.extend((len as u32 + 4).to_le_bytes());
            b.extend((0..len).map(|j| (i + j) as u8));
        }
        b.truncate(b.len() - cut);
        b
    }

    fn file(name: &str, bytes: &[u8]) -> PathBuf {
        let p = std::env::temp_dir().join(format!("catena-map-{}-{name}", std::process::id()));
        std::fs::write(&p, bytes).unwrap();
        p
    }

    /// Every record the map yields, over `loops` passes, as (bytes, wire_len, ts).
    fn walk(m: &mut MappedPcap, loops: usize) -> Vec<(&'static [u8], u32, u64)> {
        let all = m.lasting().unwrap();
        let mut v = Vec::new();
        for lp in 0..loops {
            if lp > 0 {
                assert!(m.rewind());
            }
            loop {
                let (_, recs, _) = m.next_chunk(7);
                if recs.is_empty() {
                    break;
                }
                for r in recs {
                    let o = r.off as usize;
                    v.push((&all[o..o + r.caplen as usize], r.wire_len, r.ts_ns));
                }
            }
        }
        v
    }

    /// The SIGBUS guard is per process: the tests that map take turns.
    static ONE_MAP: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn yields_the_records_of_the_indexed_reader_in_place_across_loops() {
        let _one = ONE_MAP.lock().unwrap_or_else(|e| e.into_inner());
        let p = file("good", &pcap(300, 0));
        let t = Trace::open(&p).unwrap();
        let mut m = MappedPcap::open(&p).unwrap();
        let got = walk(&mut m, 2);
        assert_eq!(got.len(), 2 * t.len());
        for (i, (b, wire, ts)) in got.iter().enumerate() {
            let r = &t.records()[i % t.len()];
            assert_eq!(*b, t.packet(i % t.len()), "record {i}");
            assert_eq!((*wire, *ts), (r.wire_len, r.ts_ns));
        }
        assert_eq!(m.span_ns(), t.span_ns());
        assert!(m.error().is_none());
        std::fs::remove_file(p).unwrap();
    }

    /// The helper thread only maps pages: a file longer than its window, walked three
    /// times (the helper starts over at each loop), yields what the plain reader does,
    /// and dropping the reader ends the helper (the join in `Drop` returns).
    #[test]
    fn filling_page_tables_ahead_on_a_helper_changes_no_record() {
        let _one = ONE_MAP.lock().unwrap_or_else(|e| e.into_inner());
        let bytes = pcap(14_000, 0);
        assert!(bytes.len() > AHEAD_WINDOW + POPULATE);
        let p = file("ahead", &bytes);
        let want = walk(&mut MappedPcap::open(&p).unwrap(), 3);
        let mut m = MappedPcap::open(&p).unwrap();
        m.populate_ahead();
        assert!(m.ahead.is_some());
        let got = walk(&mut m, 3);
        assert_eq!(got.len(), 3 * 14_000);
        assert!(got == want, "records differ with the helper");
        assert!(m.error().is_none());
        drop(m);
        std::fs::remove_file(p).unwrap();
    }

    /// `next_with` (the one-worker run's reader), its caller reporting each chunk's
    /// times, gives the records `next_chunk` gives, what follows each chunk (at the
    /// pass's end the first time plus the span) and the span, over two passes, with
    /// chunks ended early by a refused record.
    #[test]
    fn reading_into_packets_gives_the_records_and_times_of_next_chunk() {
        let _one = ONE_MAP.lock().unwrap_or_else(|e| e.into_inner());
        let p = file("with", &pcap(300, 0));
        let mut a = MappedPcap::open(&p).unwrap();
        let mut b = MappedPcap::open(&p).unwrap();
        let all = b.lasting().unwrap();
        let mut ends = 0;
        for lp in 0..2 {
            if lp > 0 {
                assert!(a.rewind() && b.rewind());
            }
            let mut chunk = 0;
            loop {
                // Chunks of 7, every third cut to 4 by refusing its fifth record.
                let mut got = Vec::new();
                let (n, _) = a.next_with(7, usize::MAX, |i, bytes, wire, ts| {
                    if chunk % 3 == 2 && i == 4 {
                        return false;
                    }
                    got.push((bytes, wire, ts));
                    true
                });
                chunk += 1;
                assert_eq!(n, got.len());
                let times = got.iter().map(|g| g.2);
                if let (Some(lo), Some(hi)) = (times.clone().min(), times.max()) {
                    a.widen_span(lo, hi);
                }
                let next = a.after();
                if n == 0 {
                    assert!(b.next_chunk(7).1.is_empty());
                    break;
                }
                let (_, recs, want) = b.next_chunk(n);
                let recs: Vec<_> = recs
                    .iter()
                    .map(|r| {
                        let o = r.off as usize;
                        (&all[o..o + r.caplen as usize], r.wire_len, r.ts_ns)
                    })
                    .collect();
                assert_eq!(got, recs, "pass {lp}, chunk {chunk}");
                assert_eq!(next, want, "pass {lp}, chunk {chunk}");
                ends += usize::from(matches!(next, After::PassEnd(_)));
            }
        }
        assert_eq!(ends, 2);
        assert_eq!(a.span_ns(), b.span_ns());
        assert!(a.error().is_none());
        std::fs::remove_file(p).unwrap();
    }

    #[test]
    fn a_record_cut_short_ends_the_input_with_the_indexed_readers_error() {
        let _one = ONE_MAP.lock().unwrap_or_else(|e| e.into_inner());
        let p = file("cut", &pcap(50, 9));
        let t = Trace::open(&p).unwrap();
        let mut m = MappedPcap::open(&p).unwrap();
        assert_eq!(walk(&mut m, 1).len(), 49);
        assert_eq!(
            m.error().map(|e| e.to_string()),
            t.error().map(|e| e.to_string())
        );
        std::fs::remove_file(p).unwrap();
    }

    #[test]
    fn a_file_truncated_under_the_map_ends_the_pass_instead_of_the_process() {
        let _one = ONE_MAP.lock().unwrap_or_else(|e| e.into_inner());
        let bytes = pcap(2000, 0);
        let p = file("shrink", &bytes);
        let mut m = MappedPcap::open(&p).unwrap();
        // Cut after the second page: the records past it are on pages that now fault.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(3 * 4096 + 10)
            .unwrap();
        let got = walk(&mut m, 1);
        assert!(!got.is_empty() && got.len() < 2000, "{} records", got.len());
        let e = m.error().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("the file shrank while it was read"), "{e}");
        // The records yielded before the fault are the file's own bytes.
        let first = &bytes[24 + 16..24 + 16 + got[0].0.len()];
        assert_eq!(got[0].0, first);
        assert!(!m.rewind(), "no further pass over a changed file");
        std::fs::remove_file(p).unwrap();
    }
}
