//! The input side of a walk: trace records copied into pool buffers, as a NIC would,
//! each given an ingress port drawn among the chain's ports.

use super::walk::Walk;
use crate::io::Record;
use crate::packet::{FastMark, NOT_RECORDED, NO_PORT};

/// The input's drop reasons (see `chain::INPUT_DROPS`).
const OVERSIZE: usize = 0;
const POOL_EXHAUSTED: usize = 1;

impl Walk {
    /// Copies one chunk of records into pool buffers and queues them at the input's
    /// successor.
    #[inline]
    pub fn ingest(&mut self, bytes: &[u8], chunk: &[Record]) {
        let Walk {
            pool,
            inbox,
            counters,
            rx,
            rng,
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
        for r in chunk {
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
            *rng ^= *rng << 13;
            *rng ^= *rng >> 7;
            *rng ^= *rng << 17;
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
            c.out[0] += 1;
            q.push(p);
        }
    }
}
