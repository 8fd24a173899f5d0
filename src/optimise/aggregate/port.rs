//! A port with PA-Flow aggregation on both directions (`aggregate = true` on a
//! `[[port]]`). Out: the frames the chain sends in one batch are packed into as few
//! aggregated frames as fit, as they come, and what is packed leaves at the batch's
//! flush; nothing waits for a later batch and a lone packet leaves as it is. In: an
//! aggregated frame is unpacked into the original packets, in order, before the chain
//! sees them. The port wraps one port, so packets for different next hops (ports) never
//! share a frame.

use std::collections::VecDeque;
use std::os::fd::RawFd;

use super::frame::{self, Packer, Records};
use crate::io::{PcapHeader, Port, PortCounters, Recv};
use crate::packet::{Batch, LinkKind, Pool, MAX_BATCH};

/// An aggregated frame being unpacked: where its next record is and how many remain.
struct Unpacking {
    frame: crate::packet::Packet,
    at: usize,
    left: u16,
}

pub struct Aggregating {
    inner: Box<dyn Port>,
    packer: Packer,
    /// Time and wire length of the first packet in `packer` (a lone packet keeps them).
    first_ts: u64,
    first_wire: u32,
    /// Frames received from `inner` and not yet handed on (at most one batch).
    raw: Batch,
    queue: VecDeque<crate::packet::Packet>,
    cur: Option<Unpacking>,
    c: PortCounters,
}

impl Aggregating {
    /// Wraps `inner`; aggregated frames are at most `size` bytes (without FCS).
    pub fn new(inner: Box<dyn Port>, size: usize) -> Aggregating {
        Aggregating {
            inner,
            packer: Packer::new(size),
            first_ts: 0,
            first_wire: 0,
            raw: Batch::new(),
            queue: VecDeque::with_capacity(MAX_BATCH),
            cur: None,
            c: PortCounters::default(),
        }
    }

    /// Sends what the packer holds: a lone packet as it is, else one aggregate.
    fn emit(&mut self) {
        match self.packer.count() {
            0 => return,
            1 if !frame::is_aggregate(self.packer.only()) => {
                self.inner
                    .send(self.packer.only(), self.first_ts, self.first_wire);
            }
            n => {
                let f = self.packer.frame();
                self.inner.send(f, self.first_ts, f.len() as u32);
                self.c.tx_aggregates += 1;
                self.c.tx_aggregated += n as u64;
            }
        }
        self.packer.clear();
    }

    /// Unpacks the frame in hand into `out` until it ends, `out` has `max` packets or
    /// the pool is empty. Returns the packets appended.
    fn unpack(&mut self, pool: &mut Pool, out: &mut Batch, max: usize) -> usize {
        let Some(u) = self.cur.as_mut() else {
            return 0;
        };
        let ts = u.frame.meta().ts_ns;
        let mut got = 0;
        let mut recs = Records::resume(u.frame.data(), u.at, u.left);
        let mut done = false;
        while got < max {
            // Peek without consuming: a packet that finds no buffer is retried later.
            let (at, left) = (recs.offset(), recs.left());
            match recs.next() {
                None => {
                    done = true;
                    break;
                }
                Some(Err(_)) => {
                    self.c.rx_bad_aggregate += 1;
                    done = true;
                    break;
                }
                Some(Ok(pkt)) if pkt.len() > pool.max_packet() => {
                    // Cannot happen while the frame itself fit a buffer; never stall on it.
                    self.c.rx_oversize += 1;
                }
                Some(Ok(pkt)) => {
                    let Some(mut p) = pool.alloc_raw_for(pkt.len()) else {
                        recs = Records::resume(u.frame.data(), at, left);
                        break;
                    };
                    if !p.set_bytes(pkt) {
                        pool.free(p);
                        self.c.rx_oversize += 1;
                        continue;
                    }
                    *p.meta_mut() = crate::packet::Meta::default();
                    let m = p.meta_mut();
                    m.ts_ns = ts;
                    m.wire_len = pkt.len() as u32;
                    m.link = LinkKind::Ethernet;
                    out.push(p);
                    got += 1;
                    self.c.rx_unpacked += 1;
                }
            }
        }
        let (at, left) = (recs.offset(), recs.left());
        if done {
            let u = self.cur.take().expect("frame in hand");
            pool.free(u.frame);
        } else {
            u.at = at;
            u.left = left;
        }
        got
    }
}

impl Port for Aggregating {
    fn describe(&self) -> String {
        format!(
            "{} (aggregate {} B)",
            self.inner.describe(),
            self.packer.size()
        )
    }

    fn recv(&mut self, pool: &mut Pool, out: &mut Batch, max: usize) -> Recv {
        let mut got = 0;
        let mut ended = false;
        while got < max {
            if self.cur.is_some() {
                got += self.unpack(pool, out, max - got);
                if self.cur.is_some() {
                    // Out of room or of buffers: go on next time.
                    break;
                }
                continue;
            }
            if let Some(p) = self.queue.pop_front() {
                if frame::is_aggregate(p.data()) {
                    self.c.rx_aggregates += 1;
                    // A header fault (short, version, no records) is found on the
                    // first read, by `unpack`.
                    let left = match p.data().get(16..18) {
                        Some(c) => u16::from_be_bytes([c[0], c[1]]),
                        None => 0,
                    };
                    self.cur = Some(Unpacking {
                        frame: p,
                        at: frame::HEADER,
                        left,
                    });
                } else {
                    out.push(p);
                    got += 1;
                }
                continue;
            }
            if ended {
                break;
            }
            match self.inner.recv(pool, &mut self.raw, MAX_BATCH) {
                Recv::Ended => ended = true,
                Recv::Got(0) => break,
                Recv::Got(_) => self.queue.extend(self.raw.drain()),
            }
        }
        if got == 0 && ended && self.cur.is_none() && self.queue.is_empty() {
            Recv::Ended
        } else {
            Recv::Got(got)
        }
    }

    fn send(&mut self, f: &[u8], ts_ns: u64, wire_len: u32) {
        if self.packer.push(f) {
            if self.packer.count() == 1 {
                self.first_ts = ts_ns;
                self.first_wire = wire_len;
            }
            return;
        }
        self.emit();
        if self.packer.push(f) {
            self.first_ts = ts_ns;
            self.first_wire = wire_len;
        } else if frame::is_aggregate(f) {
            // Too large to wrap and would be mistaken for an aggregate: refused.
            self.c.tx_errors += 1;
        } else {
            // Too large for any aggregate: it leaves as it is.
            self.inner.send(f, ts_ns, wire_len);
        }
    }

    fn flush(&mut self) {
        self.emit();
        self.inner.flush();
    }

    fn fd(&self) -> Option<RawFd> {
        self.inner.fd()
    }

    fn next_in_ns(&self) -> Option<u64> {
        if self.cur.is_some() || !self.queue.is_empty() {
            return Some(0);
        }
        self.inner.next_in_ns()
    }

    fn refresh(&mut self) {
        self.inner.refresh();
    }

    fn counters(&self) -> PortCounters {
        let i = self.inner.counters();
        PortCounters {
            rx_oversize: i.rx_oversize + self.c.rx_oversize,
            tx_errors: i.tx_errors + self.c.tx_errors,
            tx_aggregates: self.c.tx_aggregates,
            tx_aggregated: self.c.tx_aggregated,
            rx_aggregates: self.c.rx_aggregates,
            rx_unpacked: self.c.rx_unpacked,
            rx_bad_aggregate: self.c.rx_bad_aggregate,
            ..i
        }
    }

    fn finish(&mut self) -> std::io::Result<()> {
        self.emit();
        self.inner.finish()
    }

    fn input_error(&self) -> Option<String> {
        self.inner.input_error()
    }

    fn header(&self) -> Option<PcapHeader> {
        self.inner.header()
    }

    fn max_frame(&self) -> usize {
        self.inner.max_frame().max(self.packer.size())
    }

    fn receives(&self) -> bool {
        self.inner.receives()
    }
}
