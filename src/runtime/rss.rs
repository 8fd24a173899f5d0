//! Where each record of a replayed trace goes with N workers: a symmetric flow hash onto
//! an indirection table of [`BUCKETS`] buckets, each owned by one worker, as a NIC's RSS
//! table (and VPP's handoff) map a hash to a queue through a table rather than `hash % N`.
//!
//! - The hash: IP packets by their two addresses, ordered (both directions of a
//!   connection, and every fragment of a datagram, get one hash); other Ethernet frames by
//!   their two MAC addresses, ordered; ports are left out (later fragments carry none).
//!   An IPv4 pair by one multiply (Fibonacci hashing), others FNV-1a then murmur3's
//!   finaliser; the bucket is the hash's high bits (FNV alone
//!   leaves the high bits nearly constant when addresses differ only in their last byte:
//!   on the 4sics profile one of two workers got 80 % of the packets). Frames with
//!   neither go to worker 0.
//! - The table, balanced (RSS++'s idea, done once per replay): each bucket's weight is
//!   its packets and bytes in a bounded sample of the trace (every ⌈R / [`SAMPLE`]⌉-th
//!   record, so at most [`SAMPLE`] records from the whole file), and buckets are given out
//!   heaviest first, each to the worker it leaves least loaded ([`balance`]; ties: lowest
//!   bucket, lowest worker). Buckets the sample never saw go round robin. A bucket is a set of whole address pairs,
//!   so a flow's two directions stay on one worker; the same file and N give the same
//!   placement on every run and machine. Nothing is tuned to a trace: the table is
//!   computed from whatever file is replayed.
//! - The shares: every record hashed once, in N slices ([`Placement::slice`], placed by
//!   the N workers themselves in `Shards::run_on`, each after weighing its part of the
//!   table's sample, [`Placement::weigh`]), into each worker's list of its own records
//!   (4 bytes a record in all; [`take`] gathers a worker's from every slice), so a
//!   worker never reads the others' records, except where the run clock or an oversize
//!   record needs it ([`STEP`]). [`Placement::shares`] does the same on N threads.

use crate::io::pcap_read::{PcapFormat, PCAP_HEADER_LEN};
use std::ops::Range;

use super::region::Region;
use crate::io::Record;
use crate::packet::{L3Kind, Layers, LinkKind};

/// Buckets of the indirection table: enough that one bucket is a small part of the load
/// (a NIC's table has 128–512 entries).
pub const BUCKETS: usize = 512;

/// Most records the weights are taken from.
pub const SAMPLE: usize = 65_536;

/// The bucket of frames without addresses: always worker 0.
const NONE: u16 = u16::MAX;

/// The symmetric flow hash of `data`, or `None` for a frame without addresses.
#[inline]
pub fn flow_hash(link: LinkKind, data: &[u8]) -> Option<u64> {
    // Untagged Ethernet / IPv4 without options or fragmentation (`Layers::parse`'s own
    // fast case, so the same addresses): read in place, without the layer walk, which
    // was most of the placement pass (callgrind: ~150 instructions a record of 4sics).
    if link == LinkKind::Ethernet
        && data.len() >= 34
        && data[12] == 0x08
        && data[13] == 0
        && data[14] == 0x45
        && u16::from_be_bytes([data[20], data[21]]) & 0x3fff == 0
    {
        let a = u32::from_be_bytes([data[26], data[27], data[28], data[29]]);
        let b = u32::from_be_bytes([data[30], data[31], data[32], data[33]]);
        return Some(pair4(a, b));
    }
    flow_hash_walk(link, data)
}

/// The hash of an IPv4 address pair, ordered: the pair as one 64-bit word times the
/// golden ratio (Fibonacci hashing: its high bits, which pick the bucket, depend on
/// every bit of the pair). One multiply: FNV over the 8 bytes and murmur3's finaliser
/// cost ~40 instructions more a record, and a streamed sharded run hashes every record
/// in every worker.
#[inline(always)]
fn pair4(a: u32, b: u32) -> u64 {
    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
    (u64::from(lo) << 32 | u64::from(hi)).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0100_0000_01b3;

/// murmur3's finaliser: spreads FNV's low-bit changes over the high bits.
#[inline]
fn finish(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// [`flow_hash`] for every other frame, through the layer walk.
#[inline(never)]
fn flow_hash_walk(link: LinkKind, data: &[u8]) -> Option<u64> {
    let l = Layers::parse(link, data);
    let o = l.l3_off as usize;
    let (a, b): (&[u8], &[u8]) = match l.l3 {
        // Every IPv4 pair as the fast case hashes it (fragments, tags, options).
        L3Kind::Ipv4 if data.len() >= o + 20 => {
            let w = |k: usize| u32::from_be_bytes([data[k], data[k + 1], data[k + 2], data[k + 3]]);
            return Some(pair4(w(o + 12), w(o + 16)));
        }
        L3Kind::Ipv6 if data.len() >= o + 40 => (&data[o + 8..o + 24], &data[o + 24..o + 40]),
        _ if l.has_ethernet() && data.len() >= 12 => (&data[0..6], &data[6..12]),
        _ => return None,
    };
    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
    let mut h = FNV_OFFSET;
    for &x in lo.iter().chain(hi) {
        h = (h ^ u64::from(x)).wrapping_mul(FNV_PRIME);
    }
    Some(finish(h))
}

/// The table bucket of `data` ([`NONE`] without addresses).
#[inline]
fn bucket_of(link: LinkKind, data: &[u8]) -> u16 {
    // The high bits: those a multiplicative hash mixes best.
    flow_hash(link, data).map_or(NONE, |h| (h >> (64 - BUCKETS.trailing_zeros())) as u16)
}

/// The weights of a mapped pcap's table (`Shards::run_stream`), without an index, in
/// `parts` parts of the file weighed on as many threads (a part whose thread cannot start
/// is weighed here): a file of at most [`WHOLE`] bytes weighed on one record in
/// ⌈R / [`SAMPLE`]⌉ (R estimated from the first records' mean size), a larger
/// one on [`SPREAD`] evenly spaced stretches of [`RUN`] records. A part starts at its
/// byte offset's first position (within 64 KiB) where [`CHAIN`] records in a row read
/// as plausible headers (the first part at the first record) and ends where the next
/// part starts. Only weights: a wrong guess of a record start weighs the table a little
/// differently, it never places a record differently in different workers (they share
/// one table), and the same file gives the same table.
///
/// Why every record of a small file: the merged real trace's heavy flows come in bursts,
/// and a table weighed on stretches of it is off by their weight (simulated, 2 workers:
/// the busier got 50.5–56 % of its packets over samples of 16,384–65,536 records in
/// stretches of 1–64, against 50.06 % weighed on every second record).
pub(crate) fn weigh_file(
    link: LinkKind,
    map: &'static [u8],
    fmt: PcapFormat,
    threads: usize,
) -> Weights {
    let threads = threads.clamp(1, super::shard::MAX_WORKERS);
    let (parts, run) = if map.len() <= WHOLE {
        (threads, usize::MAX)
    } else {
        (SPREAD, RUN)
    };
    let body = map.len().saturating_sub(PCAP_HEADER_LEN);
    // A small file's records hashed one in `every` (each still read, to find the next):
    // about [`SAMPLE`] of them, as `of_trace` takes, by the first records' mean size.
    let every = if run == usize::MAX {
        let mut pos = PCAP_HEADER_LEN;
        let mut n = 0usize;
        while n < 64 {
            let Ok(r) = fmt.record(map.get(pos..).unwrap_or(&[])) else {
                break;
            };
            pos += r.len;
            n += 1;
        }
        let mean = (pos - PCAP_HEADER_LEN) / n.max(1);
        (body / mean.max(1)).div_ceil(SAMPLE).max(1)
    } else {
        1
    };
    let from = |k: usize| PCAP_HEADER_LEN + (body as u128 * k as u128 / parts as u128) as usize;
    let weigh = |t: usize| -> Weights {
        let mut w = Weights::default();
        for k in parts * t / threads..parts * (t + 1) / threads {
            let (lo, hi) = (from(k), from(k + 1));
            let start = if k == 0 {
                Some(lo)
            } else {
                (lo..(lo + 65_536).min(map.len())).find(|&p| plausible(map, fmt, p))
            };
            let Some(mut pos) = start else { continue };
            let (mut n, mut next) = (0, 0);
            while n < run && pos < hi {
                let Ok(r) = fmt.record(map.get(pos..).unwrap_or(&[])) else {
                    break;
                };
                if n == next {
                    next += every;
                    w.add(
                        bucket_of(link, &map[pos + r.data_off..pos + r.len]),
                        r.caplen,
                    );
                }
                pos += r.len;
                n += 1;
            }
        }
        w
    };
    let mut out: Vec<Option<Weights>> = (0..threads).map(|_| None).collect();
    std::thread::scope(|s| {
        let mut cells = out.iter_mut().enumerate();
        let mine = cells.next();
        for (t, cell) in cells {
            let weigh = &weigh;
            let _ = std::thread::Builder::new()
                .name(format!("catena-rss{t}"))
                .spawn_scoped(s, move || *cell = Some(weigh(t)));
        }
        if let Some((_, cell)) = mine {
            *cell = Some(weigh(0));
        }
    });
    let mut sum = Weights::default();
    for (t, w) in out.into_iter().enumerate() {
        sum.merge(&w.unwrap_or_else(|| weigh(t)));
    }
    sum
}

/// Files up to this size are weighed on every record ([`weigh_file`]).
pub const WHOLE: usize = 64 << 20;
/// Stretches a larger file is weighed on: each a page fault away from the last.
pub const SPREAD: usize = 1024;
/// Records a stretch.
pub const RUN: usize = 16;

/// Each bucket's packets and bytes in a sample, and those of frames without addresses.
#[derive(Clone)]
pub struct Weights {
    bucket: [(u64, u64); BUCKETS],
    none: (u64, u64),
}

impl Default for Weights {
    fn default() -> Weights {
        Weights {
            bucket: [(0, 0); BUCKETS],
            none: (0, 0),
        }
    }
}

impl Weights {
    #[inline]
    fn add(&mut self, b: u16, caplen: u32) {
        let w = match b {
            NONE => &mut self.none,
            b => &mut self.bucket[usize::from(b) % BUCKETS],
        };
        w.0 += 1;
        w.1 += u64::from(caplen);
    }

    /// Packets and bytes over every bucket and the frames without addresses.
    fn totals(&self) -> (u64, u64) {
        self.bucket
            .iter()
            .fold(self.none, |t, w| (t.0 + w.0, t.1 + w.1))
    }

    /// The weights of parts summed.
    pub fn sum<'a>(parts: impl IntoIterator<Item = &'a Weights>) -> Weights {
        let mut w = Weights::default();
        for p in parts {
            w.merge(p);
        }
        w
    }

    fn merge(&mut self, o: &Weights) {
        for (a, b) in self.bucket.iter_mut().zip(&o.bucket) {
            a.0 += b.0;
            a.1 += b.1;
        }
        self.none.0 += o.none.0;
        self.none.1 += o.none.1;
    }
}

/// Records in a row that must read as plausible headers for a guessed record start.
const CHAIN: usize = 8;

/// Whether [`CHAIN`] records from `pos` read as plausible: in bounds, captured no more
/// than sent (and not nothing), sent no more than 256 KiB, and stamped within an hour of
/// each other.
fn plausible(map: &[u8], fmt: PcapFormat, mut pos: usize) -> bool {
    let mut last = None;
    for _ in 0..CHAIN {
        let Ok(r) = fmt.record(map.get(pos..).unwrap_or(&[])) else {
            return false;
        };
        // Zero-length records: runs of zeros inside a packet read as such.
        if r.caplen == 0 || r.caplen > r.wire_len || r.wire_len > 262_144 {
            return false;
        }
        if last.is_some_and(|t: u64| t.abs_diff(r.ts_ns) > 3_600_000_000_000) {
            return false;
        }
        last = Some(r.ts_ns);
        pos += r.len;
    }
    true
}

/// The bit of a share entry (`Shares`) saying that the records between the worker's
/// previous one and this one must be stepped over one by one (`Walk::ingest`).
pub const STEP: u32 = 1 << 31;

/// Most records a sharded replay takes: a share entry's other bits.
pub const MAX_RECORDS: usize = STEP as usize;

/// The largest mean packet (bytes captured, over the table's sample) for which the
/// in-memory replay's workers copy their records into their own queues ([`Queue`]);
/// above it they read their packets where they lie in the trace, prefetched whole
/// (`shard.rs`). The queue's copy costs in proportion to the bytes, its gain (each
/// worker streams only its own packets) in proportion to the records: measured ahead
/// on the 4sics profile (76 B) and behind on the merged trace (346 B), docs/history/micronf.md
/// "Session 21"; the crossover between them is not measured. Three cache lines.
pub const QUEUE_MAX_MEAN: u64 = 192;

/// Whether workers should copy their records into their own queues, given the mean
/// packet size of the trace ([`Placement::mean_caplen`]; see [`QUEUE_MAX_MEAN`]).
pub fn queue_suits(mean_caplen: u64) -> bool {
    mean_caplen <= QUEUE_MAX_MEAN
}

/// The table that maps buckets to workers.
pub struct Placement {
    owner: [u8; BUCKETS],
    /// The mean bytes captured a packet in the sample the table was balanced on.
    mean: u64,
}

impl Placement {
    /// The table, balanced on a bounded sample of the trace (only the sample is hashed).
    pub fn of_trace(link: LinkKind, bytes: &[u8], recs: &[Record], workers: usize) -> Placement {
        Placement::of_weights(&Placement::weigh(link, bytes, recs, 0..recs.len()), workers)
    }

    /// The weights of the table's sample (every ⌈R / [`SAMPLE`]⌉-th record, as
    /// [`of_trace`](Self::of_trace) takes it) that lie in `part`: the parts' weights
    /// summed ([`Weights::sum`]) are the whole sample's, in any order.
    pub fn weigh(link: LinkKind, bytes: &[u8], recs: &[Record], part: Range<usize>) -> Weights {
        let step = recs.len().div_ceil(SAMPLE).max(1);
        let first = part.start.div_ceil(step) * step;
        let end = part.end.min(recs.len());
        let mut w = Weights::default();
        for j in (first..end).step_by(step) {
            ahead(bytes, recs, j + AHEAD * step);
            let r = &recs[j];
            w.add(bucket_of(link, record(bytes, r)), r.caplen);
        }
        w
    }

    /// The table, balanced on weights taken elsewhere ([`weigh_file`]).
    pub fn of_weights(w: &Weights, workers: usize) -> Placement {
        let workers = workers.clamp(1, super::shard::MAX_WORKERS);
        let (p, b) = w.totals();
        Placement {
            owner: balance(w, workers),
            mean: b / p.max(1),
        }
    }

    /// The mean bytes captured a packet over the sample the table was balanced on.
    pub fn mean_caplen(&self) -> u64 {
        self.mean
    }

    /// The worker of a frame.
    #[inline]
    pub fn worker_of(&self, link: LinkKind, data: &[u8]) -> usize {
        self.owner_of(bucket_of(link, data))
    }

    #[inline]
    fn owner_of(&self, bucket: u16) -> usize {
        match bucket {
            NONE => 0,
            b => usize::from(self.owner[usize::from(b)]),
        }
    }

    /// Every record placed once: each worker's records in input order, 4 bytes a record
    /// over all workers, hashed in `workers` slices on as many threads (on one thread this
    /// serial step alone held two workers well under twice one's rate; a slice whose
    /// thread cannot start is done here). A worker then touches only its own records.
    ///
    /// Between two records of a worker lie the others', over which the run clock must
    /// still step (`Walk::ingest`): the clock's median of neighbours, which never goes
    /// back. When none of the records between is oversize (a rule of the port draw that
    /// stepped a generator per record but an oversize one; the draw is now the position's,
    /// `ingest::port_of`, and the rule only makes a few more gaps tick one by one) and
    /// their medians do not fall, the clock ends where the next
    /// record's own tick puts it, without reading them; otherwise the entry carries
    /// [`STEP`] and the worker steps over them one by one, as before. The same pass
    /// finds the trace's first and last timestamps (`Shares::span_ns`).
    pub fn shares(
        &self,
        link: LinkKind,
        bytes: &[u8],
        recs: &[Record],
        workers: usize,
        max_packet: usize,
    ) -> Shares {
        let workers = workers.clamp(1, super::shard::MAX_WORKERS);
        let per = recs.len().div_ceil(workers).max(1);
        let slices = recs.len().div_ceil(per);
        let place = |lo: usize| self.slice(link, bytes, recs, workers, max_packet, lo..lo + per);
        let mut out: Vec<Option<Slice>> = (0..slices).map(|_| None).collect();
        std::thread::scope(|s| {
            let mut cells = out.iter_mut().enumerate();
            let mine = cells.next();
            for (k, cell) in cells {
                let place = &place;
                // A slice whose thread cannot start stays `None` and is placed below.
                let _ = std::thread::Builder::new()
                    .name(format!("catena-rss{k}"))
                    .spawn_scoped(s, move || *cell = Some(place(k * per)));
            }
            if let Some((_, cell)) = mine {
                *cell = Some(place(0));
            }
        });
        let slices = out
            .into_iter()
            .enumerate()
            .map(|(k, c)| c.unwrap_or_else(|| place(k * per)))
            .collect();
        Shares { workers, slices }
    }
}

impl Placement {
    /// The records `part` of the trace placed (one slice of [`shares`](Self::shares)):
    /// each worker's records in it, in order, with [`STEP`] after a gap to step over
    /// one by one. `part` may run past the trace's end (or lie wholly past it: an empty
    /// slice).
    pub fn slice(
        &self,
        link: LinkKind,
        bytes: &[u8],
        recs: &[Record],
        workers: usize,
        max_packet: usize,
        part: Range<usize>,
    ) -> Slice {
        let (lo, hi) = (part.start.min(recs.len()), part.end.min(recs.len()));
        let mut lists: Vec<Vec<u32>> = (0..workers)
            .map(|_| Vec::with_capacity((hi - lo) / workers + (hi - lo) / 8 + 16))
            .collect();
        // The last hard record and each worker's last own one (-1: none yet).
        let mut last_hard = -1isize;
        let mut last_own = vec![-1isize; workers];
        let mut queued = vec![0usize; workers];
        let mut medians = Medians::at(recs, lo);
        let (mut ts_min, mut ts_max) = (u64::MAX, 0);
        for (j, r) in recs[lo..hi].iter().enumerate() {
            let j = lo + j;
            ahead(bytes, recs, j + AHEAD);
            let w = self.owner_of(bucket_of(link, record(bytes, r)));
            let step = if last_hard > last_own[w] { STEP } else { 0 };
            lists[w].push(j as u32 | step);
            last_own[w] = j as isize;
            if r.caplen as usize <= max_packet {
                queued[w] += r.caplen as usize;
            }
            // Both asked: `falls` walks the medians forward on every record.
            let falls = medians.falls(recs, j);
            if falls || r.caplen as usize > max_packet {
                last_hard = j as isize;
            }
            ts_min = ts_min.min(r.ts_ns);
            ts_max = ts_max.max(r.ts_ns);
        }
        let tails = last_own.iter().map(|&o| last_hard > o).collect();
        Slice {
            lists,
            tails,
            queued,
            ts: (ts_min, ts_max),
        }
    }
}

/// One record of a worker's [`Queue`]: what its ingest needs of it, without the
/// trace's index or the bytes around it (the other workers' packets).
#[derive(Clone, Copy, Debug, Default)]
pub struct QueueRecord {
    pub ts_ns: u64,
    /// The run clock's median of this record's capture time and its neighbours' in the
    /// input (`RunClock::median`); 0 for the input's first and last record, whose
    /// neighbours depend on the replay loop.
    pub median: u64,
    pub caplen: u32,
    pub wire_len: u32,
    /// How many records from this one on (this one included) are plain, in a row: in
    /// the worker's small buffers, no gap before them to step over one by one, not the
    /// input's first or last record (0: this one is not). The ingest's passes take
    /// that many at once without testing each record (`Walk::ingest_queue`).
    pub plain: u32,
}

/// A worker's own records copied out of the trace into its own memory, as a NIC's RSS
/// writes each queue's packets into that queue's ring: the bytes back to back (an
/// oversize record's left out: it is dropped at ingest unread) and each record's facts
/// beside them, so a worker's loop streams only its own bytes. Built once per run on
/// the worker's thread (`Queue::fill`); the share's indices still say where each record
/// lies in the input (its position, which draws its port; the clock's gaps).
///
/// The worker's packets view these bytes (`Walk::ingest_queue`), so a queue must outlive
/// every packet of its worker's run: `Shards::run_on` drops it after the worker's runner.
#[derive(Default)]
pub struct Queue {
    pub bytes: Region<u8>,
    pub recs: Region<QueueRecord>,
}

impl Queue {
    /// The records `share` lists (entries as [`Shares::take`] gives them), their bytes
    /// copied when they fit `max_packet`; `fits`: the most bytes the worker's small
    /// buffers hold (a longer record is not [`QueueRecord::plain`]); `size`: their bytes
    /// of at most `max_packet` when the placement counted them ([`queue_bytes`]), which
    /// spares a pass over the share's records (counted here otherwise, and again if
    /// the count given is short).
    pub fn fill(
        bytes: &[u8],
        recs: &[Record],
        share: &[u32],
        max_packet: usize,
        fits: usize,
        size: Option<usize>,
    ) -> Queue {
        let at = |e: u32| recs.get((e & !STEP) as usize);
        let size = size.unwrap_or_else(|| {
            share
                .iter()
                .filter_map(|&e| at(e))
                .map(|r| r.caplen as usize)
                .filter(|&c| c <= max_packet)
                .sum()
        });
        // In huge pages where they are large: filled once a run, their page faults were
        // most of the input side (`region.rs`).
        let mut q = Queue {
            bytes: Region::with_capacity(size),
            recs: Region::with_capacity(share.len()),
        };
        for &e in share {
            let i = (e & !STEP) as usize;
            let Some(r) = recs.get(i) else { break };
            let median = match (i.checked_sub(1).map(|j| &recs[j]), recs.get(i + 1)) {
                (Some(p), Some(nx)) => crate::flow::RunClock::median(p.ts_ns, r.ts_ns, nx.ts_ns),
                _ => 0,
            };
            if r.caplen as usize <= max_packet {
                // Sized for exactly these bytes; a short count given is counted again.
                if !q.bytes.extend_from_slice(record(bytes, r)) {
                    return Queue::fill(bytes, recs, share, max_packet, fits, None);
                }
            }
            let plain = r.caplen as usize <= fits.min(max_packet)
                && e & STEP == 0
                && i != 0
                && i + 1 < recs.len();
            let pushed = q.recs.push(QueueRecord {
                ts_ns: r.ts_ns,
                median,
                caplen: r.caplen,
                wire_len: r.wire_len,
                plain: u32::from(plain),
            });
            debug_assert!(pushed, "sized for every entry");
        }
        // Each plain record's run, counted from the end.
        let mut run = 0u32;
        for r in q.recs.iter_mut().rev() {
            run = if r.plain == 0 {
                0
            } else {
                run.saturating_add(1)
            };
            r.plain = run;
        }
        q
    }
}

/// One slice's placement: each worker's records in it, and whether a record after the
/// worker's last one (or any, when it has none) in the slice is hard (see `shares`).
pub struct Slice {
    lists: Vec<Vec<u32>>,
    tails: Vec<bool>,
    /// Each worker's bytes in it that its queue holds (records of at most the slice's
    /// `max_packet`): the queue sized without another pass (`queue_bytes`).
    queued: Vec<usize>,
    /// Its records' first and last timestamps.
    ts: (u64, u64),
}

/// Every record of a trace given to its worker, once (`Placement::shares`).
pub struct Shares {
    workers: usize,
    slices: Vec<Slice>,
}

impl Shares {
    /// Every worker's records in input order (the index, with [`STEP`] on those after a
    /// gap to step over one by one), and whether the records after its last one must be
    /// stepped over one by one; each slice's list freed once gathered, so the shares end
    /// at 4 bytes a record. `one_by_one`: [`STEP`] on every entry (timestamps that wrap
    /// when shifted by the loops, whose order the medians cannot tell).
    pub fn into_lists(mut self, one_by_one: bool) -> Vec<(Vec<u32>, bool)> {
        (0..self.workers)
            .map(|w| {
                let r = self.take(w, one_by_one);
                for s in &mut self.slices {
                    s.lists[w] = Vec::new();
                }
                r
            })
            .collect()
    }

    /// Worker `w`'s list, as [`Shares::into_lists`] gives it.
    pub fn take(&self, w: usize, one_by_one: bool) -> (Vec<u32>, bool) {
        if w >= self.workers {
            return (Vec::new(), false);
        }
        take(self.slices.iter(), w, one_by_one)
    }

    /// The trace's first and last timestamps (0, 0 when it is empty).
    pub fn ts_range(&self) -> (u64, u64) {
        ts_range(self.slices.iter())
    }

    /// As `Trace::span_ns`, without another pass over the records.
    pub fn span_ns(&self) -> u64 {
        let (lo, hi) = self.ts_range();
        hi - lo + 1
    }
}

/// Worker `w`'s list from the slices of a trace in order (as [`Shares::take`]); `w`
/// must be one of the slices' workers.
pub fn take<'a>(
    slices: impl Iterator<Item = &'a Slice> + Clone,
    w: usize,
    one_by_one: bool,
) -> (Vec<u32>, bool) {
    let mut out = Vec::with_capacity(slices.clone().map(|s| s.lists[w].len()).sum());
    let mut carry = false;
    for s in slices {
        let l = &s.lists[w];
        if let Some(&first) = l.first() {
            out.push(first | if carry { STEP } else { 0 });
            out.extend_from_slice(&l[1..]);
            carry = s.tails[w];
        } else {
            carry |= s.tails[w];
        }
    }
    if one_by_one {
        out.iter_mut().for_each(|e| *e |= STEP);
    }
    (out, carry || one_by_one)
}

/// The bytes worker `w`'s [`Queue`] holds, over the slices of a trace placed with the
/// same `max_packet` as the queue is filled with ([`Queue::fill`]'s `size`).
pub fn queue_bytes<'a>(slices: impl Iterator<Item = &'a Slice>, w: usize) -> usize {
    slices.map(|s| s.queued.get(w).copied().unwrap_or(0)).sum()
}

/// The first and last timestamps over the slices of a trace (0, 0 when it is empty).
pub fn ts_range<'a>(slices: impl Iterator<Item = &'a Slice>) -> (u64, u64) {
    let (lo, hi) = slices.fold((u64::MAX, 0), |(a, b), s| (a.min(s.ts.0), b.max(s.ts.1)));
    if lo > hi {
        (0, 0)
    } else {
        (lo, hi)
    }
}

/// Records the placement fetches ahead of the one it hashes ([`ahead`]).
const AHEAD: usize = 16;

/// Fetches the bytes the hash reads of record `j` (its addresses, within its first 34
/// bytes), if there is one: large packets lie several lines apart, a stride the
/// hardware's prefetch does not follow, and each record's header was a miss (the
/// merged trace's placement took ~50 ns a record, session 26).
#[inline(always)]
fn ahead(bytes: &[u8], recs: &[Record], j: usize) {
    if let Some(r) = recs.get(j) {
        let at = bytes.as_ptr().wrapping_add(r.off as usize);
        crate::packet::prefetch_ptr(at);
        crate::packet::prefetch_ptr(at.wrapping_add(33));
    }
}

#[inline]
fn record<'a>(bytes: &'a [u8], r: &Record) -> &'a [u8] {
    &bytes[r.off as usize..r.off as usize + r.caplen as usize]
}

/// The run clock's medians along a trace (`flow::RunClock::tick`), walked forward: whether
/// the median at record `j` may exceed the one at `j + 1` (so a worker cannot pass over
/// `j` without ticking it: `RunClock::skip_to`). Exact inside the trace; at its ends,
/// where the median depends on the loop (the first record's predecessor, the last one's
/// successor), against the bound that keeps the answer safe: the first record's median
/// is at most its own time, the last one's at least its own.
struct Medians {
    /// The median at the record `falls` is asked about next.
    here: u64,
}

impl Medians {
    fn at(recs: &[Record], j: usize) -> Medians {
        Medians {
            here: Self::bound(recs, j),
        }
    }

    /// The median at `j`, or its bound at the ends (see the type's notes).
    #[inline]
    fn bound(recs: &[Record], j: usize) -> u64 {
        let n = recs.len();
        match j {
            _ if j + 1 >= n => recs.get(j).map_or(0, |r| r.ts_ns),
            0 => recs[0].ts_ns,
            _ => median3(recs[j - 1].ts_ns, recs[j].ts_ns, recs[j + 1].ts_ns),
        }
    }

    /// Asked for `j`, `j + 1`, ... in turn.
    #[inline]
    fn falls(&mut self, recs: &[Record], j: usize) -> bool {
        if j + 1 >= recs.len() {
            return false;
        }
        let next = Self::bound(recs, j + 1);
        let falls = self.here > next;
        self.here = next;
        falls
    }
}

#[inline]
fn median3(a: u64, b: u64, c: u64) -> u64 {
    a.max(b).min(a.min(b).max(c))
}

/// The table: each bucket's packets and bytes in the sample; buckets heaviest first
/// (packets and bytes, each as a share of the sample's), each to the worker whose larger
/// share (of packets or of bytes) stays the smallest. Both, because an NF's work per
/// packet has a fixed part and a part that grows with the bytes (copies, checksums,
/// prefetching every line): on the merged trace, packets alone gave 50.0 % of the
/// packets but 55.8 % of the bytes to one worker; both give 50.1 % and 51.1 %.
fn balance(w: &Weights, workers: usize) -> [u8; BUCKETS] {
    let mut owner = [0u8; BUCKETS];
    if workers <= 1 {
        return owner;
    }
    // (packets, bytes) per bucket and per worker.
    let weight = w.bucket;
    let mut load = vec![(0u64, 0u64); workers];
    load[0] = w.none;
    let total = weight
        .iter()
        .chain(&load)
        .fold((0u64, 0u64), |t, w| (t.0 + w.0, t.1 + w.1));
    let (tp, tb) = (u128::from(total.0.max(1)), u128::from(total.1.max(1)));
    // Shares compared over the common denominator tp · tb, in integers: the same table
    // on every machine.
    let share = |(p, b): (u64, u64)| (u128::from(p) * tb, u128::from(b) * tp);
    let mut order: Vec<usize> = (0..BUCKETS).collect();
    order.sort_by_key(|&b| {
        let (p, y) = share(weight[b]);
        (std::cmp::Reverse(p + y), b)
    });
    for b in order {
        let (wp, wb) = weight[b];
        let w = if wp == 0 {
            b % workers
        } else {
            (0..workers)
                .min_by_key(|&w| {
                    let (p, y) = share((load[w].0 + wp, load[w].1 + wb));
                    (p.max(y), w)
                })
                .unwrap_or(0)
        };
        owner[b] = w as u8;
        load[w].0 += wp;
        load[w].1 += wb;
    }
    owner
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::io::{PcapHeader, Trace};

    /// A minimal Ethernet/IPv4/TCP frame (also used by `shard`'s tests).
    pub(crate) fn ipv4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
        let mut f = vec![0u8; 54];
        f[12] = 8;
        f[14] = 0x45;
        f[16..18].copy_from_slice(&40u16.to_be_bytes());
        f[22] = 64;
        f[23] = 6;
        f[26..30].copy_from_slice(&src);
        f[30..34].copy_from_slice(&dst);
        f[34..36].copy_from_slice(&sport.to_be_bytes());
        f[36..38].copy_from_slice(&dport.to_be_bytes());
        f[46] = 0x50;
        f
    }

    fn place(frames: &[Vec<u8>], workers: usize) -> Vec<usize> {
        let t = Trace::from_packets(
            LinkKind::Ethernet,
            PcapHeader::new(1, false),
            frames.iter().enumerate().map(|(i, f)| (i as u64, &f[..])),
        );
        let (bytes, recs) = t.raw();
        let p = Placement::of_trace(LinkKind::Ethernet, bytes, recs, workers);
        let (link, w) = (LinkKind::Ethernet, workers);
        let byw: Vec<usize> = frames.iter().map(|f| p.worker_of(link, f)).collect();
        // The shares give each record to that worker, once.
        let mut got = vec![usize::MAX; frames.len()];
        let s = p.shares(link, bytes, recs, w, usize::MAX);
        assert_eq!(s.span_ns(), t.span_ns());
        for k in 0..w {
            for e in s.take(k, false).0 {
                let i = (e & !STEP) as usize;
                assert_eq!(got[i], usize::MAX, "record {i} in two shares");
                got[i] = k;
            }
        }
        assert_eq!(got, byw);
        byw
    }

    #[test]
    fn both_directions_land_on_one_worker() {
        let mut frames = Vec::new();
        for i in 0..200u8 {
            let a = [10, 0, i, 1];
            let b = [192, 168, 1, i.wrapping_mul(7)];
            frames.push(ipv4(a, b, 1000 + u16::from(i), 80));
            frames.push(ipv4(b, a, 80, 1000 + u16::from(i)));
        }
        let w = place(&frames, 4);
        for (i, pair) in w.chunks(2).enumerate() {
            assert_eq!(pair[0], pair[1], "flow {i}");
        }
        // Every worker gets some of 200 host pairs.
        for k in 0..4 {
            assert!(w.contains(&k), "worker {k} got nothing");
        }
    }

    /// Hosts whose addresses differ only in the last byte, with very unequal weights (as
    /// the 4sics profile's ICS hosts): the plain hash put 80 % of such a load on one of
    /// two workers; the balanced table must come within a bucket's weight of half.
    #[test]
    fn the_table_balances_unequal_host_pairs() {
        let mut frames = Vec::new();
        for i in 0..40u8 {
            // Pair i carries 40 − i packets.
            for _ in 0..(40 - i) {
                frames.push(ipv4([10, 0, 0, i], [10, 0, 0, 200], 502, 40000));
            }
        }
        let w = place(&frames, 2);
        let ones = w.iter().filter(|&&k| k == 1).count();
        let n = frames.len();
        // The greedy leaves the workers at most the heaviest bucket apart.
        let mut weight = [0usize; BUCKETS];
        for f in &frames {
            weight[usize::from(bucket_of(LinkKind::Ethernet, f))] += 1;
        }
        let heaviest = weight.iter().max().copied().unwrap_or(0);
        assert!(
            ones.abs_diff(n - ones) <= heaviest,
            "worker 1 got {ones} of {n} packets (heaviest bucket {heaviest})"
        );
        // And it is deterministic.
        assert_eq!(w, place(&frames, 2));
    }

    #[test]
    fn non_ip_and_short_frames_are_placed_without_panic() {
        assert_eq!(flow_hash(LinkKind::Ethernet, &[]), None);
        assert_eq!(flow_hash(LinkKind::RawIp, &[0x45, 0, 0]), None);
        let mut arp = vec![0u8; 42];
        arp[0..6].copy_from_slice(&[1, 2, 3, 4, 5, 6]);
        arp[6..12].copy_from_slice(&[6, 5, 4, 3, 2, 1]);
        arp[12] = 8;
        arp[13] = 6;
        // Symmetric on MAC addresses too.
        let mut back = arp.clone();
        back[0..6].copy_from_slice(&arp[6..12]);
        back[6..12].copy_from_slice(&arp[0..6]);
        assert!(flow_hash(LinkKind::Ethernet, &arp).is_some());
        assert_eq!(
            flow_hash(LinkKind::Ethernet, &arp),
            flow_hash(LinkKind::Ethernet, &back)
        );
        let w = place(&[vec![0u8; 3], arp, back], 4);
        assert_eq!(w[0], 0);
        assert_eq!(w[1], w[2]);
    }

    /// The run clock's medians straight from their definition (`flow::RunClock`), with
    /// the bounds at the ends: an independent model of `Medians`.
    fn model_falls(ts: &[u64], j: usize) -> bool {
        let n = ts.len();
        if j + 1 >= n {
            return false;
        }
        let med = |k: usize| {
            let mut v = [ts[k - 1], ts[k], ts[k + 1]];
            v.sort_unstable();
            v[1]
        };
        let here = if j == 0 { ts[0] } else { med(j) };
        let next = if j + 1 == n - 1 {
            ts[n - 1]
        } else {
            med(j + 1)
        };
        here > next
    }

    /// Checks every worker's share against the placement function record by record, and
    /// each [`STEP`] (and the tail's) against the model: set exactly when a record between
    /// the worker's previous one and this one is oversize or its median falls.
    fn check_shares(t: &Trace, workers: usize, max_packet: usize) -> (usize, usize) {
        let (bytes, recs) = t.raw();
        let link = t.link();
        let p = Placement::of_trace(link, bytes, recs, workers);
        let s = p.shares(link, bytes, recs, workers, max_packet);
        assert_eq!(s.span_ns(), t.span_ns());
        // As the workers place it themselves (`Shards::run_on`): the table from the
        // parts' weights, one slice a worker, each list gathered from every slice.
        let per = recs.len().div_ceil(workers).max(1);
        let parts = (0..workers).map(|w| w * per..(w + 1) * per);
        let weights: Vec<Weights> = (parts.clone())
            .map(|r| Placement::weigh(link, bytes, recs, r))
            .collect();
        let apart = Placement::of_weights(&Weights::sum(&weights), workers);
        assert_eq!(apart.owner, p.owner, "{workers} workers: the table");
        assert_eq!(apart.mean, p.mean);
        let slices: Vec<Slice> = parts
            .map(|r| apart.slice(link, bytes, recs, workers, max_packet, r))
            .collect();
        assert_eq!(ts_range(slices.iter()), s.ts_range());
        for w in 0..workers {
            for one_by_one in [false, true] {
                assert_eq!(
                    take(slices.iter(), w, one_by_one),
                    s.take(w, one_by_one),
                    "worker {w} of {workers}"
                );
            }
        }
        let ts: Vec<u64> = recs.iter().map(|r| r.ts_ns).collect();
        let hard = |j: usize| recs[j].caplen as usize > max_packet || model_falls(&ts, j);
        let mut owner = vec![usize::MAX; recs.len()];
        let (mut steps, mut plain) = (0, 0);
        for w in 0..workers {
            let (share, tail) = s.take(w, false);
            let mut from = 0;
            for &e in &share {
                let i = (e & !STEP) as usize;
                assert_eq!(owner[i], usize::MAX, "record {i} given twice");
                owner[i] = w;
                assert_eq!(p.worker_of(link, t.packet(i)), w, "record {i}");
                assert!(i >= from, "worker {w}: record {i} out of order");
                let want = (from..i).any(hard);
                assert_eq!(
                    e & STEP != 0,
                    want,
                    "worker {w} of {workers}, record {i} after {from}"
                );
                if i > from {
                    if want {
                        steps += 1;
                    } else {
                        plain += 1;
                    }
                }
                from = i + 1;
            }
            assert_eq!(tail, (from..recs.len()).any(hard), "worker {w}'s tail");
            let (all, t) = s.take(w, true);
            assert!(t && all.iter().all(|e| e & STEP != 0));
        }
        assert!(
            owner.iter().all(|&w| w < workers),
            "a record given to nobody"
        );
        let each: Vec<_> = (0..workers).map(|w| s.take(w, false)).collect();
        assert_eq!(s.into_lists(false), each);
        (steps, plain)
    }

    fn merged() -> Option<Trace> {
        let p = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../shared/datasets/bench/ndpi-ether-merged.pcap"
        );
        match Trace::open(std::path::Path::new(p)) {
            Ok(t) => Some(t),
            Err(e) => {
                eprintln!("skipped: {p}: {e}");
                None
            }
        }
    }

    /// On the merged real capture (90,989 records) with 2 and 3 workers: each record in
    /// exactly its worker's share, in order; the gaps a worker may pass over unread are
    /// the model's.
    #[test]
    fn shares_follow_the_placement_on_a_real_capture() {
        let Some(t) = merged() else { return };
        for w in [2, 3] {
            let (steps, plain) = check_shares(&t, w, 65_536);
            // Captures merged in time order: nearly every gap is passed over unread.
            assert!(
                plain > 10 * steps.max(1),
                "{w} workers: {steps} steps, {plain} plain"
            );
        }
        // Every record oversize: every gap is stepped over one by one.
        let (steps, plain) = check_shares(&t, 2, 10);
        assert!(steps > 0 && plain == 0, "{steps} steps, {plain} plain");
    }

    /// Time that jumps back and single outliers, oversize frames, slices cut anywhere.
    #[test]
    fn shares_mark_the_gaps_the_clock_or_the_size_needs() {
        let mut frames = Vec::new();
        let mut ts = Vec::new();
        for i in 0..3000u32 {
            let b = (i % 37) as u8;
            let mut f = ipv4([10, 0, 0, b], [10, 1, 0, b ^ 5], 1000, 80);
            if i % 97 == 0 {
                f.resize(300, 0);
            }
            frames.push(f);
            let base = u64::from(i) * 1000;
            ts.push(match i % 211 {
                0 => base + 10_000_000,               // an outlier ahead
                5 => base / 2,                        // one behind
                _ if i % 500 > 490 => base - 400_000, // a stretch that went back
                _ => base,
            });
        }
        let t = Trace::from_packets(
            LinkKind::Ethernet,
            PcapHeader::new(1, false),
            frames.iter().zip(&ts).map(|(f, &t)| (t, &f[..])),
        );
        for w in 1..=5 {
            let (steps, plain) = check_shares(&t, w, 200);
            if w > 1 {
                assert!(steps > 0 && plain > 0, "{w}: {steps} steps, {plain} plain");
            }
        }
    }
}
