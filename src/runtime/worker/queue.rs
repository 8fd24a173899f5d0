//! A sharded worker's ingest from its own queue (`rss::Queue`): its records' bytes back
//! to back in its own memory, read in order, with each record's clock median carried
//! beside it, so the loop touches neither the other workers' packets nor the trace's
//! index (but for the gaps `rss::STEP` marks and the input's first and last record).
//! Where the chain writes no packet's bytes its packets view the queue's (`put`): the
//! queue is then the only copy, made once a run, not once a loop.

use std::ops::Range;

use super::super::ingest::{
    local_ports, port_of, stamp, PortCounts, LOCAL_PORTS, OVERSIZE, POOL_EXHAUSTED,
};
use super::super::rss::{Queue, QueueRecord, STEP};
use super::super::walk::Walk;
use crate::io::Record;
use crate::packet::{LinkKind, Packet};

/// Gives `p` a record's bytes from a queue: a view of them (`view`) or a copy.
#[inline(always)]
fn put(p: &mut Packet, bytes: &[u8], view: bool) {
    if view {
        // SAFETY: the queue outlives every packet of its worker's run (`rss::Queue`);
        // the buffer was taken for the record (small for a plain one, `alloc_raw_for`
        // otherwise), so the view fits it and is never refused.
        let fits = unsafe { p.set_view_unchecked(bytes) };
        debug_assert!(fits);
    } else {
        p.set_bytes(bytes);
    }
}

/// Pass 2 of [`Walk::ingest_queue`]: each packet's bytes (viewed or copied, `VIEW`)
/// and stamps; `all` holds exactly the records' bytes, back to back. One loop per
/// choice, so the copying one is the loop it was before views (with the choice tested
/// in it, ~7 more instructions a packet on the NAT, cachegrind).
#[inline(always)]
fn bytes_and_stamps<const VIEW: bool>(
    pkts: &mut [Packet],
    facts: &[QueueRecord],
    entries: &[u32],
    all: &[u8],
    (base, shift, link): (u64, u64, LinkKind),
) {
    let mut at = 0;
    for ((p, r), &e) in pkts.iter_mut().zip(facts).zip(entries) {
        let l = r.caplen as usize;
        // SAFETY: the lengths of these records sum to `all.len()` (the caller's pass 1).
        put(p, unsafe { all.get_unchecked(at..at + l) }, VIEW);
        at += l;
        let seq = base + (e & !STEP) as u64;
        stamp(p, r.ts_ns.wrapping_add(shift), r.wire_len, link, seq);
    }
}

impl Walk {
    /// [`Walk::ingest`] of the share's entries `ks` (`share[k]` the record's index in
    /// `recs`, with [`STEP`]), their bytes and facts taken from `q` (entry `k` is
    /// `q.recs[k]`; `off`: where entry `ks.start`'s bytes begin in `q.bytes`, moved past
    /// the chunk's). The same buffers, ports, times, positions and counters as
    /// `ingest`; returns the others' records stepped over one by one.
    ///
    /// In `ingest_all`'s three passes (the chunk's buffers taken at once, the clock and
    /// the draw in locals) while the records are plain (`QueueRecord::plain`: in the
    /// small buffers, no gap to step one by one, not the input's first or last record;
    /// the queue counts their runs, so no record is tested here). From the first that
    /// is not, one by one (`ingest_queue_each`).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn ingest_queue(
        &mut self,
        q: &Queue,
        share: &[u32],
        ks: Range<usize>,
        off: &mut usize,
        recs: &[Record],
        base: u64,
        after: Option<u64>,
    ) -> u64 {
        // The entry test written out, as in `Walk::ingest_all` (which says why).
        let len = ks.len();
        let ports = self.cx.ports as usize;
        let first = self.first;
        let start = self.inbox[first].len();
        if len == 0 || !local_ports(ports) || !self.pool.take_into(len, &mut self.inbox[first]) {
            return self.ingest_queue_each(q, share, ks, off, recs, base, after);
        }
        let Walk {
            pool,
            inbox,
            counters,
            rx,
            seed,
            passed,
            clock,
            shift,
            link,
            queue_views,
            ..
        } = self;
        let (shift, link, seed, views) = (*shift, *link, *seed, *queue_views);
        let entries = &share[ks.clone()];
        let facts = &q.recs[ks.clone()];
        // 1. The plain records (their run, counted when the queue was filled for this
        // worker's pool: `Queue::fill`) and their bytes.
        let done = facts.first().map_or(0, |r| (r.plain as usize).min(len));
        let bytes_in: usize = facts[..done].iter().map(|r| r.caplen as usize).sum();
        let Some(all) = q.bytes.get(*off..*off + bytes_in) else {
            pool.give_back(&mut inbox[first], start);
            return self.ingest_queue_each(q, share, ks, off, recs, base, after);
        };
        let pkts = &mut inbox[first].as_mut_slice()[start..start + done];
        // 2. Bytes and what does not depend on the clock or the draw.
        let stamped = (base, shift, link);
        if views {
            bytes_and_stamps::<true>(pkts, facts, entries, all, stamped);
        } else {
            bytes_and_stamps::<false>(pkts, facts, entries, all, stamped);
        }
        // 3. The run clock (the queue's medians) and the port draw, from each record's
        // position (stamped): nothing of the others' records between.
        let mut clk = *clock;
        let mut per_port: PortCounts = [0; LOCAL_PORTS];
        let ports = ports as u64;
        for (p, r) in pkts.iter_mut().zip(facts) {
            let m = p.meta_mut();
            m.now_ns = clk.advance(r.median.wrapping_add(shift), m.ts_ns);
            let in_port = port_of(seed, m.seq, ports);
            per_port[in_port as usize & (LOCAL_PORTS - 1)] += 1;
            m.in_port = in_port;
        }
        let d = entries
            .get(done.wrapping_sub(1))
            .map_or(*passed, |&e| (e & !STEP) as usize + 1);
        *clock = clk;
        *passed = d;
        *off += bytes_in;
        let c = &mut counters[0];
        c.packets_in += done as u64;
        c.bytes_in += bytes_in as u64;
        c.out[0] += done as u64;
        for (r, k) in rx.iter_mut().zip(&per_port) {
            *r += k;
        }
        if done < len {
            // The buffers not used go back to be taken again, in the same order.
            pool.give_back(&mut inbox[first], start + done);
            let rest = ks.start + done..ks.end;
            return self.ingest_queue_each(q, share, rest, off, recs, base, after);
        }
        0
    }

    /// [`Walk::ingest_queue`] one record at a time, as [`Walk::ingest`] does: for the
    /// records its passes do not take.
    #[allow(clippy::too_many_arguments)]
    fn ingest_queue_each(
        &mut self,
        q: &Queue,
        share: &[u32],
        ks: Range<usize>,
        off: &mut usize,
        recs: &[Record],
        base: u64,
        after: Option<u64>,
    ) -> u64 {
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
            queue_views,
            ..
        } = self;
        let (shift, link, seed, views) = (*shift, *link, *seed, *queue_views);
        let max = pool.max_packet();
        let c = &mut counters[0];
        let inq = &mut inbox[*first];
        let n = recs.len();
        let next_of = |j: usize| {
            recs.get(j + 1)
                .map_or(after, |r| Some(r.ts_ns.wrapping_add(shift)))
        };
        let mut stepped = 0u64;
        let mut at = *off;
        for (&e, r) in share[ks.clone()].iter().zip(&q.recs[ks]) {
            let i = (e & !STEP) as usize;
            if *passed < i && e & STEP != 0 {
                // As `ingest`: the records between ticked one by one.
                stepped += (i - *passed) as u64;
                while *passed < i {
                    let d = &recs[*passed];
                    clock.tick(d.ts_ns.wrapping_add(shift), next_of(*passed));
                    *passed += 1;
                }
            }
            *passed = i + 1;
            let ts = r.ts_ns.wrapping_add(shift);
            // Inside the input the median is the queue's; at its ends it depends on the
            // loop (the previous loop's last record, the next loop's first).
            let now = if i == 0 || i + 1 >= n {
                if let Some(p) = i.checked_sub(1).and_then(|j| recs.get(j)) {
                    clock.skip_to(p.ts_ns.wrapping_add(shift));
                }
                clock.tick(ts, next_of(i))
            } else {
                clock.advance(r.median.wrapping_add(shift), ts)
            };
            c.packets_in += 1;
            c.bytes_in += r.caplen as u64;
            let len = r.caplen as usize;
            if len > max {
                // Not in the queue's bytes (`Queue::fill`).
                c.drops[OVERSIZE] += 1;
                continue;
            }
            let Some(bytes) = q.bytes.get(at..at + len) else {
                c.drops[OVERSIZE] += 1;
                continue;
            };
            at += len;
            let Some(mut p) = pool.alloc_raw_for(len) else {
                c.drops[POOL_EXHAUSTED] += 1;
                continue;
            };
            let in_port = port_of(seed, base + i as u64, cx.ports as u64);
            rx[in_port as usize] += 1;
            put(&mut p, bytes, views);
            stamp(&mut p, ts, r.wire_len, link, base + i as u64);
            let m = p.meta_mut();
            m.now_ns = now;
            m.in_port = in_port;
            c.out[0] += 1;
            inq.push(p);
        }
        *off = at;
        stepped
    }
}
