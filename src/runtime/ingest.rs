//! The input side of a walk: trace records copied into pool buffers, as a NIC would,
//! each given an ingress port drawn among the chain's ports.

use super::walk::Walk;
use crate::io::Record;
use crate::packet::{FastMark, NOT_RECORDED, NO_PORT};

/// The input's drop reasons (see `chain::INPUT_DROPS`).
const OVERSIZE: usize = 0;
const POOL_EXHAUSTED: usize = 1;

/// One step of the ingress-port draw (xorshift64).
#[inline(always)]
fn step(rng: &mut u64) {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
}

impl Walk {
    /// Copies the records `chunk` lists (indices into `recs`, ascending) into pool
    /// buffers and queues them at the input's successor. `base` is the position in the
    /// input of `recs[0]` on this replay loop.
    ///
    /// The port draw advances once per record that fits, whoever processes it: a worker
    /// given a share of the trace steps over the records between its own, so every
    /// packet gets the port it gets when one worker runs everything.
    #[inline]
    pub fn ingest(
        &mut self,
        bytes: &[u8],
        recs: &[Record],
        chunk: impl Iterator<Item = usize>,
        base: u64,
    ) {
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
            ..
        } = self;
        let (shift, link) = (*shift, *link);
        let max = pool.max_packet();
        let c = &mut counters[0];
        let q = &mut inbox[*first];
        for i in chunk {
            while *drawn < i {
                if recs[*drawn].caplen as usize <= max {
                    step(rng);
                }
                *drawn += 1;
            }
            *drawn = i + 1;
            let r = &recs[i];
            c.packets_in += 1;
            c.bytes_in += r.caplen as u64;
            if r.caplen as usize > max {
                c.drops[OVERSIZE] += 1;
                continue;
            }
            let Some(mut p) = pool.alloc_raw() else {
                c.drops[POOL_EXHAUSTED] += 1;
                continue;
            };
            // Lemire's multiply-shift maps the xorshift draw onto 0..ports without a divide.
            step(rng);
            let in_port = (((*rng >> 32) * cx.ports as u64) >> 32) as u16;
            rx[in_port as usize] += 1;
            let off = r.off as usize;
            // set_bytes resets the decoded offsets, flow hash and verdict; the rest is here.
            p.set_bytes(&bytes[off..off + r.caplen as usize]);
            let m = p.meta_mut();
            m.ts_ns = r.ts_ns.wrapping_add(shift);
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
    }

    /// Ends a replay loop of `recs`: the draw steps over the records after this
    /// worker's last one, and the next loop starts from the first record.
    pub fn end_loop(&mut self, recs: &[Record]) {
        let max = self.pool.max_packet();
        for r in &recs[self.drawn.min(recs.len())..] {
            if r.caplen as usize <= max {
                step(&mut self.rng);
            }
        }
        self.drawn = 0;
    }
}
