//! The input side of a walk: trace records copied into pool buffers, as a NIC would, or
//! viewed in place when the input lasts the whole process (copied on an NF's first
//! write); each given an ingress port drawn among the chain's ports.

use super::rss::STEP;
use super::walk::Walk;
use crate::flow::{prefetch, RunClock};
use crate::io::{After, MappedPcap, Record};
use crate::packet::{FastMark, LinkKind, Packet, NOT_RECORDED, NO_PORT};

/// The input's drop reasons (see `chain::INPUT_DROPS`).
pub(super) const OVERSIZE: usize = 0;
pub(super) const POOL_EXHAUSTED: usize = 1;

/// Most bytes of a packet `prefetch_whole` fetches ahead (a full-size Ethernet frame).
const WHOLE_MAX: usize = 1536;

/// Most ports whose per-port counts the chunk paths keep in a local array (a power of
/// two: the index is masked, not bounds-checked). Chains default to 5 ports
/// (`config::DEFAULT_PORTS`); more than this go the general way.
pub(super) const LOCAL_PORTS: usize = 16;

/// Packets drawn per ingress port over a chunk, written back to `Walk::rx` once.
pub(super) type PortCounts = [u64; LOCAL_PORTS];

/// The port count `ports` fits a [`PortCounts`] (at least one port).
#[inline(always)]
pub(super) fn local_ports(ports: usize) -> bool {
    (1..=LOCAL_PORTS).contains(&ports)
}

/// Writes what ingest sets of a packet's metadata beside what `set_view` / `set_bytes`
/// reset, and besides the clock time and the ingress port (`now_ns`, `in_port`, set
/// where they are drawn): one body for [`Walk::ingest`] and [`Walk::ingest_all`], so
/// the two cannot stamp a packet differently.
#[inline(always)]
pub(super) fn stamp(p: &mut Packet, ts: u64, wire_len: u32, link: LinkKind, seq: u64) {
    let m = p.meta_mut();
    m.ts_ns = ts;
    m.wire_len = wire_len;
    m.egress = NO_PORT;
    m.link = link;
    m.fast = FastMark::Off;
    m.fast_rec = NOT_RECORDED;
    m.seq = seq;
}

/// [`Walk::ingest_all`]'s third pass for one packet: its clock time (stamped `ts`, its
/// successor `next`) and its ingress port (from its position, stamped), counted in
/// `per_port`.
#[inline(always)]
fn tick_and_draw(
    p: &mut Packet,
    clk: &mut RunClock,
    seed: u64,
    per_port: &mut PortCounts,
    ports: u64,
    ts: u64,
    next: u64,
) {
    let m = p.meta_mut();
    m.now_ns = clk.tick(ts, Some(next));
    let in_port = port_of(seed, m.seq, ports);
    per_port[in_port as usize & (LOCAL_PORTS - 1)] += 1;
    m.in_port = in_port;
}

/// The ingress port of the record at position `seq` of the input (counted from 0 over
/// every replay loop), among `ports`, for the chain's `seed`: the high half of
/// splitmix64's output `seq + 1` from state `seed` (the mix of `seed + (seq + 1) ·
/// 0x9e3779b97f4a7c15`), mapped onto `0..ports` by Lemire's multiply-shift (no divide).
///
/// A pure function of the position, not a generator stepped record by record: a worker
/// given a share of the input draws its own records' ports without passing over the
/// others' (an xorshift stepped over every record cost a worker of two a serial chain
/// twice as long as one worker's), and every path (ingest, the queue, `bench steve`)
/// gives a record the same port. `ports` at least 1 (0 gives port 0).
#[inline(always)]
pub fn port_of(seed: u64, seq: u64, ports: u64) -> u16 {
    let mut z = seed.wrapping_add(seq.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (((z >> 32) * ports) >> 32) as u16
}

impl Walk {
    /// Copies the records `chunk` lists (indices into `recs`, ascending) into pool
    /// buffers — or, when `lasting` is the same bytes as `bytes` for the rest of the
    /// process, makes the buffers views of them (`Packet::set_view`) — and queues them at the input's successor, each stamped with the run
    /// clock's time. `base` is the position in the input of `recs[0]`; `after` is the
    /// capture time (shifted) of the record after `recs`, for the clock's look-ahead
    /// (docs/time.md).
    ///
    /// The clock advances once per record, whoever processes it: a worker given a share
    /// of the trace steps over the records between its own, so every packet gets the
    /// time it gets when one worker runs everything (the port is its position's,
    /// [`port_of`]). Without [`STEP`] on an entry (see `rss::Placement::shares`) it does
    /// so without reading them: the clock to the last one's time (their medians do not
    /// fall, so the next tick ends where ticking each would). With it, one by one; the
    /// count of those is returned.
    #[inline]
    pub fn ingest(
        &mut self,
        lasting: Option<&'static [u8]>,
        bytes: &[u8],
        recs: &[Record],
        chunk: impl Iterator<Item = u32> + Clone,
        base: u64,
        after: Option<u64>,
    ) -> u64 {
        // Pipelined prefetching (`prefetch = k`): the first cache line of the first k
        // packets before the copies start, then of packet i + k while packet i is copied,
        // so the copy (the first touch of a packet's bytes) finds it loaded.
        // With `prefetch_whole` every line of the packet: a sharded worker's packets lie
        // between the others', out of reach of the hardware's stream prefetch, and an NF
        // that writes copies the whole packet out of the input first.
        let mut lead = chunk.clone();
        let k = self.prefetch;
        let whole = self.prefetch_whole;
        let fetch = |j: Option<u32>| {
            if let Some(r) = j.and_then(|j| recs.get((j & !STEP) as usize)) {
                let off = r.off as usize;
                let end = if whole {
                    off + (r.caplen as usize).min(WHOLE_MAX)
                } else {
                    off + 1
                };
                let mut at = off;
                while at < end {
                    match bytes.get(at) {
                        Some(b) => prefetch(b),
                        None => break,
                    }
                    at += 64;
                }
            }
        };
        if k > 0 {
            for _ in 0..k {
                fetch(lead.next());
            }
        }
        let Walk {
            pool,
            inbox,
            counters,
            rx,
            seed,
            passed,
            cx,
            link,
            shift,
            first,
            clock,
            ..
        } = self;
        let (shift, link, seed) = (*shift, *link, *seed);
        let max = pool.max_packet();
        let c = &mut counters[0];
        let q = &mut inbox[*first];
        let next_of = |j: usize| {
            recs.get(j + 1)
                .map_or(after, |n| Some(n.ts_ns.wrapping_add(shift)))
        };
        let mut stepped = 0u64;
        // The queue's `ingest_queue_each` has this loop's shape, kept apart: its bytes
        // lie back to back in the queue and its clock advances by the queue's medians
        // but at the input's ends, where this one prefetches and views the trace; one
        // body would take three closures (not measured; session 20).
        for e in chunk {
            if k > 0 {
                fetch(lead.next());
            }
            let i = (e & !STEP) as usize;
            if *passed < i {
                if e & STEP != 0 {
                    stepped += (i - *passed) as u64;
                    while *passed < i {
                        let d = &recs[*passed];
                        clock.tick(d.ts_ns.wrapping_add(shift), next_of(*passed));
                        *passed += 1;
                    }
                } else {
                    clock.skip_to(recs[i - 1].ts_ns.wrapping_add(shift));
                }
            }
            *passed = i + 1;
            let r = &recs[i];
            let now = clock.tick(r.ts_ns.wrapping_add(shift), next_of(i));
            c.packets_in += 1;
            c.bytes_in += r.caplen as u64;
            if r.caplen as usize > max {
                c.drops[OVERSIZE] += 1;
                continue;
            }
            let Some(mut p) = pool.alloc_raw_for(r.caplen as usize) else {
                c.drops[POOL_EXHAUSTED] += 1;
                continue;
            };
            let in_port = port_of(seed, base + i as u64, cx.ports as u64);
            rx[in_port as usize] += 1;
            let off = r.off as usize;
            // set_view and set_bytes reset the decoded offsets, flow hash and verdict; the
            // rest is here. Both fit: the buffer was chosen for `caplen`.
            match lasting {
                Some(all) => p.set_view(&all[off..off + r.caplen as usize]),
                None => p.set_bytes(&bytes[off..off + r.caplen as usize]),
            };
            stamp(
                &mut p,
                r.ts_ns.wrapping_add(shift),
                r.wire_len,
                link,
                base + i as u64,
            );
            let m = p.meta_mut();
            m.now_ns = now;
            m.in_port = in_port;
            c.out[0] += 1;
            q.push(p);
        }
        stepped
    }

    /// [`Walk::ingest`] of every record of `recs` (a chunk a reader gave, `passed` at 0):
    /// the same buffers, ports, times and counters, with what does not change per record
    /// done per chunk — the chunk's buffers taken from the pool at once, the clock, the
    /// draw and the counters kept in locals and written back once. Each record's
    /// metadata is still written whole: a buffer comes back from the pool with the last
    /// packet's. A record the small buffers do not hold (or a chunk the pool cannot
    /// supply, prefetching, more than `LOCAL_PORTS` ports) goes the general way from there on.
    #[inline]
    pub fn ingest_all(
        &mut self,
        lasting: Option<&'static [u8]>,
        bytes: &[u8],
        recs: &[Record],
        base: u64,
        after: Option<u64>,
    ) {
        // This entry test (and the counters' tail) is written out in `ingest_mapped` and
        // the queue's `ingest_queue` too, on purpose: folded into one inlined helper
        // (`begin_chunk`, session 20) it cost instructions wherever the reader's loop is
        // inlined beside it (+4.7 a packet in `ingest_mapped`, wire over 200,000 packets
        // of m64: 39.88 M to 40.82 M; +1.4 here, `bench micronf` wire (4sics), one
        // worker), where spills move; only the queue's was neutral.
        let n = recs.len();
        let ports = self.cx.ports as usize;
        let first = self.first;
        let start = self.inbox[first].len();
        if n == 0
            || self.prefetch > 0
            || !local_ports(ports)
            || !self.pool.take_into(n, &mut self.inbox[first])
        {
            self.ingest(lasting, bytes, recs, 0..n as u32, base, after);
            return;
        }
        let Walk {
            pool,
            inbox,
            shift,
            link,
            ..
        } = self;
        let (shift, link) = (*shift, *link);
        // The small class holds every packet up to `max_packet` unless there is a big one.
        let fits = pool.max_packet().min(pool.small_max()) as u64;
        // Three short passes over the chunk rather than one long one: the one loop kept
        // about twenty values live and spilled a third of them to the stack per record.
        // 1. The records the small buffers hold (the rest go the general way) and their bytes.
        // Also the furthest byte they reach, so the views below need no bounds check each.
        let mut done = 0;
        let mut bytes_in = 0u64;
        let mut end = 0u64;
        for r in recs {
            if r.caplen as u64 > fits {
                break;
            }
            bytes_in += r.caplen as u64;
            end = end.max(r.off.saturating_add(r.caplen as u64));
            done += 1;
        }
        let pkts = &mut inbox[first].as_mut_slice()[start..start + done];
        let recs_in = &recs[..done];
        // 2. Bytes and what does not depend on the clock or the draw.
        let mut seq = base;
        match lasting.filter(|all| end <= all.len() as u64) {
            Some(all) => {
                for (p, r) in pkts.iter_mut().zip(recs_in) {
                    let (off, len) = (r.off as usize, r.caplen as usize);
                    // SAFETY: `off + len <= end <= all.len()` (pass 1), so in bounds; `len`
                    // is at most `fits` (pass 1) and `p` a small-class buffer
                    // (`take_into`), which holds `small_max` bytes after the headroom.
                    unsafe { p.set_view_fitting(all.get_unchecked(off..off + len)) };
                    stamp(p, r.ts_ns.wrapping_add(shift), r.wire_len, link, seq);
                    seq += 1;
                }
            }
            None => {
                for (p, r) in pkts.iter_mut().zip(recs_in) {
                    let (off, len) = (r.off as usize, r.caplen as usize);
                    match lasting {
                        Some(all) => p.set_view(&all[off..off + len]),
                        None => p.set_bytes(&bytes[off..off + len]),
                    };
                    stamp(p, r.ts_ns.wrapping_add(shift), r.wire_len, link, seq);
                    seq += 1;
                }
            }
        }
        // 3. The run clock and the port draw, record by record in input order. The
        // last's successor is the record after it: in this chunk (the general way takes
        // it), after the chunk, or none.
        let last_next = match recs.get(done) {
            Some(r) => Some(r.ts_ns.wrapping_add(shift)),
            None => after,
        };
        self.finish_chunk(start, done, bytes_in, |_, _| last_next);
        if done < n {
            // The buffers not used go back to be taken again, in the same order.
            self.pool.give_back(&mut self.inbox[first], start + done);
            self.ingest(lasting, bytes, recs, done as u32..n as u32, base, after);
        }
    }

    /// [`Walk::ingest_all`] of the next (up to `max`) records of a mapped trace, read
    /// straight into the chunk's buffers as views ([`MappedPcap::next_with`]) rather than
    /// through `Record`s: the same buffers, ports, times and counters. `after_of` turns
    /// what follows the records into the clock's look-ahead. The count ingested, or
    /// `None` when nothing was read this way (a first record the small buffers do not
    /// hold, the end of the pass, a pool short of a chunk, prefetching, more than `LOCAL_PORTS`
    /// ports): the caller then reads a chunk of `Record`s.
    ///
    /// Out of line: its reader loop runs short of registers, and inlined into the
    /// worker's loop its spills moved with every change elsewhere there (±3
    /// instructions a packet for code that does not run per packet).
    #[inline(never)]
    pub fn ingest_mapped(
        &mut self,
        src: &mut MappedPcap,
        max: usize,
        base: u64,
        after_of: impl FnOnce(After) -> Option<u64>,
    ) -> Option<usize> {
        // The entry test written out, as in `ingest_all` (which says why).
        let ports = self.cx.ports as usize;
        let first = self.first;
        let start = self.inbox[first].len();
        if max == 0
            || self.prefetch > 0
            || !local_ports(ports)
            || !self.pool.take_into(max, &mut self.inbox[first])
        {
            return None;
        }
        let Walk {
            pool,
            inbox,
            shift,
            link,
            ..
        } = self;
        let (shift, link) = (*shift, *link);
        let fits = pool.max_packet().min(pool.small_max());
        // Bytes and what does not depend on the clock or the draw, as the reader goes.
        let pkts = &mut inbox[first].as_mut_slice()[start..start + max];
        // Records the small buffers do not hold are refused by the reader.
        let (n, bytes_in) = src.next_with(max, fits, |i, bytes, wire_len, ts| {
            // SAFETY: `next_with` passes `i < max`, and `pkts` holds `max` packets.
            let p = unsafe { pkts.get_unchecked_mut(i) };
            // SAFETY: the reader refuses records of more than `fits` bytes, and `p` is a
            // small-class buffer (`take_into`), which holds `small_max` after the headroom.
            unsafe { p.set_view_fitting(bytes) };
            stamp(p, ts.wrapping_add(shift), wire_len, link, base + i as u64);
            true
        });
        // The buffers not used go back to be taken again, in the same order.
        pool.give_back(&mut inbox[first], start + n);
        if n == 0 {
            return None;
        }
        // The reader's first pass takes its span from the times the clock's pass reads.
        let shift = self.shift;
        self.finish_chunk(start, n, bytes_in, |lo, hi| {
            src.widen_span(lo.wrapping_sub(shift), hi.wrapping_sub(shift));
            after_of(src.after())
        });
        Some(n)
    }

    /// The run clock and the port draw over the `n` packets of the input's queue from
    /// `start` on, in input order, and their counters (`bytes_in` their bytes): the tail
    /// [`Walk::ingest_all`] and [`Walk::ingest_mapped`] share. Each packet's successor
    /// time is the next packet's stamp; the last's is what `last_next` returns, given the
    /// least and the greatest stamp of the `n` (None: its own, which is what `tick` does
    /// with None).
    #[inline(always)]
    fn finish_chunk(
        &mut self,
        start: usize,
        n: usize,
        bytes_in: u64,
        last_next: impl FnOnce(u64, u64) -> Option<u64>,
    ) {
        let Walk {
            inbox,
            counters,
            rx,
            seed,
            clock,
            cx,
            first,
            passed,
            ..
        } = self;
        *passed = n;
        if n == 0 {
            return;
        }
        let pkts = &mut inbox[*first].as_mut_slice()[start..start + n];
        let mut clk = *clock;
        let seed = *seed;
        let mut per_port: PortCounts = [0; LOCAL_PORTS];
        let ports = cx.ports as u64;
        let mut ts = pkts[0].meta().ts_ns;
        let (mut lo, mut hi) = (ts, ts);
        for i in 1..n {
            let next = pkts[i].meta().ts_ns;
            lo = lo.min(next);
            hi = hi.max(next);
            tick_and_draw(
                &mut pkts[i - 1],
                &mut clk,
                seed,
                &mut per_port,
                ports,
                ts,
                next,
            );
            ts = next;
        }
        let next = last_next(lo, hi).unwrap_or(ts);
        tick_and_draw(
            &mut pkts[n - 1],
            &mut clk,
            seed,
            &mut per_port,
            ports,
            ts,
            next,
        );
        *clock = clk;
        let c = &mut counters[0];
        c.packets_in += n as u64;
        c.bytes_in += bytes_in;
        c.out[0] += n as u64;
        for (r, k) in rx.iter_mut().zip(&per_port) {
            *r += k;
        }
    }

    /// Ends a replay loop of `recs` (or a streamed chunk): the clock steps over the
    /// records after this worker's last one, and the next starts from the
    /// first record. `after` as for [`Walk::ingest`]; `one_by_one` as [`STEP`] on an
    /// entry (the count stepped so is returned).
    pub fn end_loop(&mut self, recs: &[Record], after: Option<u64>, one_by_one: bool) -> u64 {
        let shift = self.shift;
        let from = self.passed.min(recs.len());
        self.passed = 0;
        if from == recs.len() {
            return 0;
        }
        if !one_by_one {
            // None oversize and the medians do not fall: the last record's tick ends
            // where ticking each would.
            let n = recs.len();
            if n - 1 > from {
                self.clock.skip_to(recs[n - 2].ts_ns.wrapping_add(shift));
            }
            self.clock
                .tick(recs[n - 1].ts_ns.wrapping_add(shift), after);
            return 0;
        }
        for j in from..recs.len() {
            let r = &recs[j];
            let next = recs
                .get(j + 1)
                .map_or(after, |n| Some(n.ts_ns.wrapping_add(shift)));
            self.clock.tick(r.ts_ns.wrapping_add(shift), next);
        }
        (recs.len() - from) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::port_of;

    /// The documented formula, against values computed apart from catena (a few lines
    /// of Python: splitmix64's output `seq + 1` from state `seed`, its high half times
    /// `ports`, shifted right by 32).
    #[test]
    fn ports_follow_the_documented_formula() {
        let five: Vec<u16> = (0..16).map(|i| port_of(1, i, 5)).collect();
        assert_eq!(five, [2, 3, 4, 2, 2, 3, 4, 2, 1, 3, 2, 3, 2, 2, 2, 0]);
        let two: Vec<u16> = (0..16).map(|i| port_of(1, i, 2)).collect();
        assert_eq!(two, [1, 1, 1, 0, 0, 1, 1, 1, 0, 1, 0, 1, 0, 1, 0, 0]);
        let far: Vec<u16> = [0, 1, 2, 1000, 1 << 32, u64::MAX - 1]
            .into_iter()
            .map(|i| port_of(0x0123_4567_89ab_cdef, i, 16))
            .collect();
        assert_eq!(far, [1, 13, 2, 8, 10, 2]);
        assert!((0..64).all(|i| port_of(3, i, 1) == 0));
    }

    /// The mix is splitmix64's: its published first outputs from state 1234567 have
    /// these high halves (6457827717110365317, 3203168211198807973,
    /// 9817491932198370423), read back through `ports` = 2^16 (the top 16 bits).
    #[test]
    fn the_mix_is_splitmix64() {
        let top = |x: u64| (x >> 48) as u16;
        let want = [
            top(6_457_827_717_110_365_317),
            top(3_203_168_211_198_807_973),
            top(9_817_491_932_198_370_423),
        ];
        let got: Vec<u16> = (0..3).map(|i| port_of(1_234_567, i, 1 << 16)).collect();
        assert_eq!(got, want);
    }
}
