//! The input side of a walk: trace records copied into pool buffers, as a NIC would, or
//! viewed in place when the input lasts the whole process (copied on an NF's first
//! write); each given an ingress port drawn among the chain's ports.

use super::rss::STEP;
use super::walk::Walk;
use crate::flow::prefetch;
use crate::io::Record;
use crate::packet::{FastMark, NOT_RECORDED, NO_PORT};

/// The input's drop reasons (see `chain::INPUT_DROPS`).
const OVERSIZE: usize = 0;
const POOL_EXHAUSTED: usize = 1;

/// Most bytes of a packet `prefetch_whole` fetches ahead (a full-size Ethernet frame).
const WHOLE_MAX: usize = 1536;

/// One step of the ingress-port draw (xorshift64).
#[inline(always)]
fn step(rng: &mut u64) {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
}

impl Walk {
    /// Copies the records `chunk` lists (indices into `recs`, ascending) into pool
    /// buffers — or, when `lasting` is the same bytes as `bytes` for the rest of the
    /// process, makes the buffers views of them (`Packet::set_view`) — and queues them at the input's successor, each stamped with the run
    /// clock's time. `base` is the position in the input of `recs[0]`; `after` is the
    /// capture time (shifted) of the record after `recs`, for the clock's look-ahead
    /// (docs/time.md).
    ///
    /// The port draw and the clock advance once per record, whoever processes it: a
    /// worker given a share of the trace steps over the records between its own, so
    /// every packet gets the port and the time it gets when one worker runs everything.
    /// Without [`STEP`] on an entry (see `rss::Placement::shares`) it does so without
    /// reading them: the draw by their count, the clock to the last one's time (their
    /// medians do not fall, so the next tick ends where ticking each would). With it,
    /// one by one; the count of those is returned.
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
            rng,
            drawn,
            cx,
            link,
            shift,
            first,
            clock,
            ..
        } = self;
        let (shift, link) = (*shift, *link);
        let max = pool.max_packet();
        let c = &mut counters[0];
        let q = &mut inbox[*first];
        let next_of = |j: usize| {
            recs.get(j + 1)
                .map_or(after, |n| Some(n.ts_ns.wrapping_add(shift)))
        };
        // With one port the draw decides nothing: it need not step over others' records.
        let draws = cx.ports > 1;
        let mut stepped = 0u64;
        for e in chunk {
            if k > 0 {
                fetch(lead.next());
            }
            let i = (e & !STEP) as usize;
            if *drawn < i {
                if e & STEP != 0 {
                    stepped += (i - *drawn) as u64;
                    while *drawn < i {
                        let d = &recs[*drawn];
                        if d.caplen as usize <= max {
                            step(rng);
                        }
                        clock.tick(d.ts_ns.wrapping_add(shift), next_of(*drawn));
                        *drawn += 1;
                    }
                } else {
                    if draws {
                        for _ in *drawn..i {
                            step(rng);
                        }
                    }
                    clock.skip_to(recs[i - 1].ts_ns.wrapping_add(shift));
                }
            }
            *drawn = i + 1;
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
            // Lemire's multiply-shift maps the xorshift draw onto 0..ports without a divide.
            step(rng);
            let in_port = (((*rng >> 32) * cx.ports as u64) >> 32) as u16;
            rx[in_port as usize] += 1;
            let off = r.off as usize;
            // set_view and set_bytes reset the decoded offsets, flow hash and verdict; the
            // rest is here. Both fit: the buffer was chosen for `caplen`.
            match lasting {
                Some(all) => p.set_view(&all[off..off + r.caplen as usize]),
                None => p.set_bytes(&bytes[off..off + r.caplen as usize]),
            };
            let m = p.meta_mut();
            m.ts_ns = r.ts_ns.wrapping_add(shift);
            m.now_ns = now;
            m.wire_len = r.wire_len;
            m.in_port = in_port;
            m.egress = NO_PORT;
            m.link = link;
            m.fast = FastMark::Off;
            m.fast_rec = NOT_RECORDED;
            m.seq = base + i as u64;
            c.out[0] += 1;
            q.push(p);
        }
        stepped
    }

    /// [`Walk::ingest`] of every record of `recs` (a chunk a reader gave, `drawn` at 0):
    /// the same buffers, ports, times and counters, with what does not change per record
    /// done per chunk — the chunk's buffers taken from the pool at once, the clock, the
    /// draw and the counters kept in locals and written back once. Each record's
    /// metadata is still written whole: a buffer comes back from the pool with the last
    /// packet's. A record the small buffers do not hold (or a chunk the pool cannot
    /// supply, prefetching, more than 4 ports) goes the general way from there on.
    #[inline]
    pub fn ingest_all(
        &mut self,
        lasting: Option<&'static [u8]>,
        bytes: &[u8],
        recs: &[Record],
        base: u64,
        after: Option<u64>,
    ) {
        let n = recs.len();
        let ports = self.cx.ports as usize;
        let first = self.first;
        let start = self.inbox[first].len();
        if n == 0
            || self.prefetch > 0
            || !(1..=4).contains(&ports)
            || !self.pool.take_into(n, &mut self.inbox[first])
        {
            self.ingest(lasting, bytes, recs, 0..n as u32, base, after);
            return;
        }
        let Walk {
            pool,
            inbox,
            counters,
            rx,
            rng,
            clock,
            shift,
            link,
            ..
        } = self;
        let (shift, link) = (*shift, *link);
        // The small class holds every packet up to `max_packet` unless there is a big one.
        let fits = pool.max_packet().min(pool.small_max()) as u64;
        let mut clk = *clock;
        let mut draw = *rng;
        let mut per_port = [0u64; 4];
        let mut bytes_in = 0u64;
        let pkts = &mut inbox[first].as_mut_slice()[start..];
        // Each record's successor's time is loaded once and carried to the next step.
        let mut ts = recs[0].ts_ns.wrapping_add(shift);
        let mut done = 0;
        for (p, r) in pkts.iter_mut().zip(recs) {
            let len = r.caplen as usize;
            if r.caplen as u64 > fits {
                break;
            }
            let nt = recs.get(done + 1).map(|x| x.ts_ns.wrapping_add(shift));
            bytes_in += r.caplen as u64;
            let now = clk.tick(ts, nt.or(after));
            step(&mut draw);
            // As in `ingest`: Lemire's multiply-shift, below `ports` (at most 4).
            let in_port = (((draw >> 32) * ports as u64) >> 32) as u16;
            per_port[(in_port & 3) as usize] += 1;
            let off = r.off as usize;
            match lasting {
                Some(all) => p.set_view(&all[off..off + len]),
                None => p.set_bytes(&bytes[off..off + len]),
            };
            let m = p.meta_mut();
            m.ts_ns = ts;
            m.now_ns = now;
            m.wire_len = r.wire_len;
            m.in_port = in_port;
            m.egress = NO_PORT;
            m.link = link;
            m.fast = FastMark::Off;
            m.fast_rec = NOT_RECORDED;
            m.seq = base + done as u64;
            ts = nt.unwrap_or(0);
            done += 1;
        }
        *clock = clk;
        *rng = draw;
        let c = &mut counters[0];
        c.packets_in += done as u64;
        c.bytes_in += bytes_in;
        c.out[0] += done as u64;
        for (r, k) in rx.iter_mut().zip(per_port) {
            *r += k;
        }
        self.drawn = done;
        if done < n {
            // The buffers not used go back to be taken again, in the same order.
            pool.give_back(&mut inbox[first], start + done);
            self.ingest(lasting, bytes, recs, done as u32..n as u32, base, after);
        }
    }

    /// Ends a replay loop of `recs` (or a streamed chunk): the draw and the clock step
    /// over the records after this worker's last one, and the next starts from the
    /// first record. `after` as for [`Walk::ingest`]; `one_by_one` as [`STEP`] on an
    /// entry (the count stepped so is returned).
    pub fn end_loop(&mut self, recs: &[Record], after: Option<u64>, one_by_one: bool) -> u64 {
        let max = self.pool.max_packet();
        let shift = self.shift;
        let from = self.drawn.min(recs.len());
        self.drawn = 0;
        if from == recs.len() {
            return 0;
        }
        if !one_by_one {
            // None oversize and the medians do not fall: the last record's tick ends
            // where ticking each would.
            if self.cx.ports > 1 {
                for _ in from..recs.len() {
                    step(&mut self.rng);
                }
            }
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
            if r.caplen as usize <= max {
                step(&mut self.rng);
            }
            let next = recs
                .get(j + 1)
                .map_or(after, |n| Some(n.ts_ns.wrapping_add(shift)));
            self.clock.tick(r.ts_ns.wrapping_add(shift), next);
        }
        (recs.len() - from) as u64
    }
}
