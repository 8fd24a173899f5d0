//! A port with PA-Flow aggregation on both directions (`aggregate = true` on a
//! `[[port]]`). Out: the frames the chain sends in one batch are packed into as few
//! aggregated frames as fit, as they come, and what is packed leaves at the batch's
//! flush; nothing waits for a later batch and a lone packet leaves as it is. In: an
//! aggregated frame is unpacked into the original packets, in order, before the chain
//! sees them. The port wraps one port, so packets for different next hops (ports) never
//! share a frame.
//!
//! With `views` (PA-Flow's NFs on aggregated frames), the unpacked packets are views
//! into the received frame rather than copies: an NF reads them in place and a change
//! copies the packet first (`Packet`'s copy-on-write). The frame is then kept until the
//! batch is over (`after_batch`): every buffer lent as a view is found back in the pool
//! by its identity (freeing forgot its view, `Pool::free`) before the frame is freed.
//! A lent buffer not found
//! (something kept a packet past its batch) leaves the frames allocated for good and
//! turns views off: never a frame reused under a packet that reads it.

use std::collections::VecDeque;
use std::os::fd::RawFd;

use super::frame::{self, Packer, Records};
use crate::io::{PcapHeader, Port, PortCounters, Recv};
use crate::packet::{Batch, LinkKind, Meta, Packet, Pool, HEADROOM, MAX_BATCH};

/// An aggregated frame being unpacked: where its next record is and how many remain.
struct Unpacking {
    frame: Packet,
    at: usize,
    left: u16,
    /// Some of its packets are views into it.
    viewed: bool,
    /// Some were lent since the last `after_batch` (earlier ones were found back then).
    lent_now: bool,
}

/// How deep into the pool `after_batch` looks for lent buffers before it looks through
/// all of it: the buffers a batch freed lie on top (the pool is a stack), under at most
/// the frames other ports gave back first.
const LOOK: usize = 4 * MAX_BATCH;

/// The identity of a packet's buffer (its metadata's address, which never moves).
#[inline]
fn id(p: &Packet) -> usize {
    p.meta() as *const Meta as usize
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
    /// Unpack as views into the frame (see the module note).
    views: bool,
    /// Capacity of the pool's ordinary buffers (views use only those); 0 until known.
    small: usize,
    /// Frames fully unpacked whose packets may still view them, until `after_batch`.
    held: Vec<Packet>,
    /// Buffers lent as views since the last `after_batch`, by identity.
    lent: Vec<usize>,
    /// Room to look through the pool in `after_batch` (grown once if ever needed).
    scratch: Vec<Packet>,
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
            views: false,
            small: 0,
            held: Vec::new(),
            lent: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// Hands received aggregates' packets to the chain as views into the frames.
    pub fn views(mut self, on: bool) -> Aggregating {
        self.views = on;
        if on {
            // At most a batch of packets is unpacked between two `after_batch` calls,
            // from at most a batch of frames and the one in hand.
            self.held = Vec::with_capacity(MAX_BATCH + 1);
            self.lent = Vec::with_capacity(MAX_BATCH);
            self.scratch = Vec::with_capacity(LOOK);
        }
        self
    }

    /// Packets of this port's received aggregates are handed on as views.
    pub fn uses_views(&self) -> bool {
        self.views
    }

    /// A frame fully unpacked: back to the pool, or held while its packets view it.
    fn done_with(&mut self, u: Unpacking, pool: &mut Pool) {
        if !u.viewed || (self.views && !u.lent_now) {
            // No packet views it, or every one that did was found back in the pool by
            // an `after_batch` since (a frame may end on a batch's last packet).
            pool.free(u.frame);
        } else if self.views {
            self.held.push(u.frame);
        } else {
            // Views were given up while this frame was viewed: it stays allocated.
            std::mem::forget(u.frame);
        }
    }

    /// Pops up to `depth` buffers from `pool`, crossing the ones lent this batch off
    /// `lent`, and pushes them all back in their order. A buffer back in the pool views
    /// nothing (`Pool::free` forgets views), so finding it is all it takes.
    fn look(&mut self, pool: &mut Pool, depth: usize) {
        while self.scratch.len() < depth && !self.lent.is_empty() {
            let Some(p) = pool.alloc_raw() else {
                break;
            };
            // The batch freed its packets in order, so the pool gives them back last
            // first: the match is nearly always `lent`'s last entry.
            let me = id(&p);
            match self.lent.last() {
                Some(&x) if x == me => {
                    self.lent.pop();
                }
                _ => {
                    if let Some(k) = self.lent.iter().rposition(|&x| x == me) {
                        self.lent.swap_remove(k);
                    }
                }
            }
            self.scratch.push(p);
        }
        while let Some(p) = self.scratch.pop() {
            pool.free(p);
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
                    // Views take ordinary buffers only: those are what `after_batch`
                    // looks through (the pool keeps larger ones apart).
                    let view = self.views && pkt.len() + HEADROOM <= self.small;
                    let alloc = if view {
                        pool.alloc_raw()
                    } else {
                        pool.alloc_raw_for(pkt.len())
                    };
                    let Some(mut p) = alloc else {
                        recs = Records::resume(u.frame.data(), at, left);
                        break;
                    };
                    let set = if view {
                        // SAFETY: `pkt` lies in `u.frame`, which this port neither
                        // changes nor frees until `after_batch` has found this buffer
                        // back in the pool, where it views nothing (else the frame is never
                        // freed); the frame's buffer is a box, so moving the frame moves
                        // none of its bytes.
                        unsafe { p.set_view_unchecked(pkt) }
                    } else {
                        p.set_bytes(pkt)
                    };
                    if !set {
                        pool.free(p);
                        self.c.rx_oversize += 1;
                        continue;
                    }
                    if view {
                        self.lent.push(id(&p));
                        u.viewed = true;
                        u.lent_now = true;
                        self.c.rx_viewed += 1;
                    }
                    *p.meta_mut() = Meta::default();
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
            self.done_with(u, pool);
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
            "{} (aggregate {} B{})",
            self.inner.describe(),
            self.packer.size(),
            if self.views { ", views" } else { "" }
        )
    }

    fn recv(&mut self, pool: &mut Pool, out: &mut Batch, max: usize) -> Recv {
        if self.views && self.small == 0 {
            // The ordinary buffers' size, from one of them (taken and put back).
            match pool.alloc_raw() {
                Some(p) => {
                    self.small = p.capacity();
                    pool.free(p);
                }
                None => return Recv::Got(0),
            }
        }
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
                        viewed: false,
                        lent_now: false,
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

    fn after_batch(&mut self, pool: &mut Pool) {
        if !self.lent.is_empty() {
            self.look(pool, LOOK);
        }
        if !self.lent.is_empty() {
            // Not on top: look through the whole pool (one allocation, never expected).
            self.scratch.reserve(pool.available());
            self.look(pool, usize::MAX);
        }
        if !self.lent.is_empty() {
            // Some packet outlived its batch and may still read a frame: keep every
            // frame it could view allocated for good, and copy from now on.
            eprintln!(
                "catena: {}: a packet of a received aggregate outlived its batch; aggregates are unpacked by copying from now on",
                self.describe()
            );
            self.views = false;
            self.lent.clear();
            for f in self.held.drain(..) {
                std::mem::forget(f);
            }
            return;
        }
        for f in self.held.drain(..) {
            pool.free(f);
        }
        if let Some(u) = self.cur.as_mut() {
            u.lent_now = false;
        }
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
            rx_viewed: self.c.rx_viewed,
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
