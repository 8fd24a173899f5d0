//! The stack: per-flow TCP tracking and reassembly over a bounded connection table, turning
//! each packet into events (see [`super::event::Kind`] for the order they come in).
//!
//! Per packet it does one table probe and, at the bytestream level, one reassembly step;
//! connections live in a slab reserved up front (slots are recycled; the table never grows
//! past `flows`), and out-of-order bytes go to rings from a bounded [`RingPool`].

use std::collections::BinaryHeap;

use hashbrown::HashMap;

use super::conn::{Conn, MAX_APPS};
use super::defrag::Defrag;
use super::event::{Bytes, EndReason, Event, FlowId, Kind, Kinds, FROM_STACK, NO_FLOW, NO_PKT};
use super::queue::Queue;
use super::reasm::{Chunk, RingPool, Stream};
use super::tcp_state::{self, Handshake, TcpState};
use crate::flow::{FlowKey, Hasher, WideKey};
use crate::packet::wire::tcp::flags;
use crate::packet::{L3Kind, Layers, Packet};

/// How much of TCP a chain's stack does: the most any of its apps asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Packets only: no flow table.
    L3,
    /// Connection tracking and state, no bytes.
    Monitor,
    /// Tracking plus in-order bytestreams per direction.
    Bytestream,
    /// Bytestreams plus sequence translation of connections handed to a backend.
    Splicer,
}

impl Level {
    pub fn parse(s: &str) -> Option<Level> {
        Some(match s {
            "l3" => Level::L3,
            "monitor" => Level::Monitor,
            "bytestream" => Level::Bytestream,
            "splicer" => Level::Splicer,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Level::L3 => "l3",
            Level::Monitor => "monitor",
            Level::Bytestream => "bytestream",
            Level::Splicer => "splicer",
        }
    }
}

#[derive(Clone, Debug)]
pub struct StackConfig {
    pub level: Level,
    /// Most connections tracked at once.
    pub flows: usize,
    /// Idle time after which a connection ends (capture time); 0 = never.
    pub timeout_ns: u64,
    /// Track connections whose SYN was not seen, from their first packet.
    pub midstream: bool,
    /// Out-of-order buffer per direction (rounded up to a power of two).
    pub ring_bytes: usize,
    /// Most out-of-order buffers lent out at once (over all flows).
    pub rings: usize,
}

impl Default for StackConfig {
    fn default() -> Self {
        StackConfig {
            level: Level::Bytestream,
            flows: 65_536,
            timeout_ns: 120_000_000_000,
            midstream: true,
            ring_bytes: 65_536,
            rings: 1024,
        }
    }
}

/// Counters of the stack, for the summary.
#[derive(Clone, Copy, Debug, Default)]
pub struct StackStats {
    pub flows: u64,
    pub midstream: u64,
    /// New connections refused because the table was full.
    pub table_full: u64,
    /// Segments of connections not tracked (no SYN seen, pickup off).
    pub untracked: u64,
    /// TCP packets too short for their headers.
    pub malformed: u64,
    pub ended_closed: u64,
    pub ended_reset: u64,
    pub ended_idle: u64,
    pub ended_final: u64,
    /// Directions that gave up reassembly (over the buffer bound or no ring free).
    pub gave_up: u64,
    pub bytes: u64,
    pub duplicate_bytes: u64,
    /// Acknowledged holes skipped (data the capture missed), and their bytes.
    pub gaps: u64,
    pub gap_bytes: u64,
    /// Segments with data that started past their receiver's advertised window: not
    /// reassembled (a forged segment far ahead would have made the direction give up).
    pub out_of_window: u64,
}

pub struct Stack {
    cfg: StackConfig,
    table: HashMap<WideKey, FlowId, Hasher>,
    conns: Vec<Conn>,
    free: Vec<FlowId>,
    /// Slots whose flow ended in this batch: reused only from the next one, so events
    /// still queued never point at a newer flow.
    retired: Vec<FlowId>,
    /// Scratch for one sweep (bounded, reserved up front).
    expired: Vec<FlowId>,
    /// Scratch for one sweep: the serials of the idle flows that began first.
    oldest: Vec<u64>,
    rings: RingPool,
    /// Every app's subscriptions for new flows and for events without a flow.
    pub(crate) initial: [Kinds; MAX_APPS],
    /// Apps that changed a subscription for some flow: only theirs are read per flow
    /// (the others' are `initial` for every flow, so delivery skips the flow lookup).
    pub(crate) per_flow: [bool; MAX_APPS],
    next_sweep_ns: u64,
    /// Flows begun so far ([`Conn`]'s `serial`).
    serial: u64,
    /// Skip holes the receiver acknowledged (data the capture missed) and go on
    /// delivering after them, the hole's length in the data event's `info`: set when
    /// every app that takes bytes accepts that ([`super::App::accepts_gaps`]).
    pub(crate) skip_holes: bool,
    /// Track a tunnel's inner TCP connection (6in4, GRE, Teredo, VXLAN) as Suricata does:
    /// set with `skip_holes` (an IDS-only stack); other apps keep the outer headers.
    pub(crate) tunnels: bool,
    /// IPv4 defragmentation for the apps (an IDS): fragments are not tracked, the
    /// datagram they complete is ([`Stack::datagram`]). `None`: off.
    pub defrag: Option<Box<Defrag>>,
    /// The packet a completed datagram is built in, lent out by [`Stack::datagram`].
    scratch: Option<Packet>,
    pub stats: StackStats,
}

impl Stack {
    pub fn new(cfg: StackConfig) -> Stack {
        let flows = if cfg.level == Level::L3 { 0 } else { cfg.flows };
        Stack {
            table: HashMap::with_capacity_and_hasher(flows, Hasher::default()),
            conns: Vec::with_capacity(flows),
            free: Vec::with_capacity(flows),
            retired: Vec::with_capacity(flows),
            expired: Vec::with_capacity(256),
            oldest: Vec::with_capacity(256),
            rings: RingPool::new(cfg.rings, cfg.ring_bytes),
            initial: [Kinds::NONE; MAX_APPS],
            per_flow: [false; MAX_APPS],
            next_sweep_ns: 0,
            serial: 0,
            skip_holes: false,
            tunnels: false,
            defrag: None,
            scratch: None,
            stats: StackStats::default(),
            cfg,
        }
    }

    /// Bytes of the connection table and slots at the flow bound, and of every
    /// out-of-order ring the stack may lend.
    pub fn memory(&self) -> usize {
        use crate::flow::footprint::{hash_table_bytes, vec_bytes};
        let flows = self.conns.capacity();
        hash_table_bytes::<(WideKey, FlowId)>(flows)
            + vec_bytes::<Conn>(flows)
            + 2 * vec_bytes::<FlowId>(flows)
            + self.rings.memory()
            + self.defrag.as_ref().map_or(0, |d| d.memory() + 65_536)
    }

    /// Turns IPv4 defragmentation on (an app inspects datagrams whole).
    pub fn enable_defrag(&mut self) {
        self.defrag = Some(Box::default());
        // A buffer for the largest datagram, made once.
        self.scratch = Some(Packet::from_bytes(&[0; 4096]));
    }

    /// Takes fragment `p` (layers `l`) into reassembly; when it completes a datagram,
    /// the datagram as a packet with `p`'s metadata, to be tracked in its place and
    /// given back with [`Stack::give_back`].
    pub fn datagram(&mut self, l: &Layers, p: &Packet) -> Option<Packet> {
        let now = p.meta().now_ns;
        let bytes = self.defrag.as_mut()?.take(l, p.data(), now)?;
        let mut s = self.scratch.take()?;
        if !s.set_bytes(bytes) {
            self.scratch = Some(s);
            return None;
        }
        let len = s.len() as u32;
        let m = s.meta_mut();
        *m = p.meta().clone();
        m.layers = Layers::UNPARSED;
        m.flow_hash = 0;
        m.wire_len = len;
        Some(s)
    }

    /// The datagram packet [`Stack::datagram`] lent.
    pub fn give_back(&mut self, p: Packet) {
        self.scratch = Some(p);
    }

    pub fn config(&self) -> &StackConfig {
        &self.cfg
    }

    pub fn ring_bytes(&self) -> usize {
        self.rings.ring_bytes()
    }

    /// The connection in slot `f` (also after it ended, until the slot is reused).
    pub fn conn(&self, f: FlowId) -> Option<&Conn> {
        self.conns.get(f as usize)
    }

    pub(crate) fn conn_mut(&mut self, f: FlowId) -> Option<&mut Conn> {
        self.conns.get_mut(f as usize)
    }

    /// Connections tracked now.
    pub fn live(&self) -> usize {
        self.table.len()
    }

    /// Whether app `app` receives `ev`.
    #[inline]
    pub(crate) fn wants(&self, app: usize, ev: &Event) -> bool {
        if ev.from as usize == app {
            return false;
        }
        if !self.per_flow[app] {
            return self.initial[app].has(ev.kind);
        }
        match self.conns.get(ev.flow as usize) {
            Some(c) if ev.flow != NO_FLOW => c.subs[app].has(ev.kind),
            _ => self.initial[app].has(ev.kind),
        }
    }

    /// Frees the slots of flows that ended in the batch just delivered.
    pub fn end_batch(&mut self) {
        self.free.append(&mut self.retired);
    }

    /// Ends idle connections (at most once per quarter timeout of run-clock time), as
    /// many as the queue has room for: those that began first, so which ones end now
    /// does not follow the table's order (its hash keys differ in every process); the
    /// rest wait for the next call. Called before every packet with that packet's
    /// clock time (a compare when none is due).
    pub fn sweep(&mut self, now: u64, q: &mut Queue) {
        if self.cfg.timeout_ns == 0 || self.cfg.level == Level::L3 || now < self.next_sweep_ns {
            return;
        }
        let t = self.cfg.timeout_ns;
        let conns = &self.conns;
        let idle = |f: FlowId| now.saturating_sub(conns[f as usize].last_ns) > t;
        let room = q.room().min(self.expired.capacity());
        // The serial of the last flow to end in this sweep: the room-th smallest among
        // the idle ones, kept in a bounded max-heap (its buffer reserved up front).
        let mut first = BinaryHeap::from(std::mem::take(&mut self.oldest));
        let mut more = false;
        for &f in self.table.values() {
            if !idle(f) {
                continue;
            }
            let serial = conns[f as usize].serial;
            if first.len() < room {
                first.push(serial);
            } else {
                more = true;
                if first.peek().is_some_and(|&last| serial < last) {
                    first.pop();
                    first.push(serial);
                }
            }
        }
        let last = first.peek().copied();
        let mut buf = first.into_vec();
        buf.clear();
        self.oldest = buf;
        if !more {
            self.next_sweep_ns = now + t / 4;
        }
        let Some(last) = last else { return };
        let expired = &mut self.expired;
        self.table.retain(|_, f| {
            if !idle(*f) || conns[*f as usize].serial > last {
                return true;
            }
            expired.push(*f);
            false
        });
        let mut gone = std::mem::take(&mut self.expired);
        // In the order the flows began (the table's order varies with its hash keys).
        gone.sort_unstable_by_key(|&f| self.conns[f as usize].serial);
        for f in gone.drain(..) {
            self.end(f, EndReason::Idle, NO_PKT, q);
            self.retired.push(f);
        }
        self.expired = gone;
    }

    /// Ends every open connection (the run is over).
    pub fn finish(&mut self, q: &mut Queue) {
        let mut open: Vec<FlowId> = self.table.drain().map(|(_, f)| f).collect();
        // In the order the flows began, so two runs write the same records in the same
        // order (the table's order varies with its hash keys).
        open.sort_unstable_by_key(|&f| self.conns[f as usize].serial);
        for f in open {
            self.end(f, EndReason::Final, NO_PKT, q);
            self.retired.push(f);
        }
    }

    fn end(&mut self, f: FlowId, why: EndReason, pkt: u16, q: &mut Queue) {
        let c = &mut self.conns[f as usize];
        if c.ended {
            return;
        }
        c.ended = true;
        // Only while the arena has room for both rings (else, as without gaps, those
        // bytes are not delivered): the queue never grows.
        let room = q.arena.len() + 2 * self.rings.ring_bytes() <= q.arena.capacity();
        if self.skip_holes && room && q.want.has(Kind::Data) && c.subs_any(Kind::Data) {
            // Bytes still behind holes are handed out after them (Suricata inspects
            // everything it holds at a flow's end, gaps or not).
            for (d, st) in c.streams.iter_mut().enumerate() {
                let far = st.next_seq().wrapping_add(1 << 30);
                loop {
                    let start = q.arena.len();
                    let arena = &mut q.arena;
                    let Some((hole, len)) = st.skip_acked_hole(&mut self.rings, far, |ch| {
                        if let Chunk::Buffered(b) = ch {
                            arena.extend_from_slice(b);
                        }
                    }) else {
                        break;
                    };
                    self.stats.gaps += 1;
                    self.stats.gap_bytes += hole;
                    self.stats.bytes += len;
                    q.push(Event {
                        kind: Kind::Data,
                        dir: d as u8,
                        from: FROM_STACK,
                        pkt,
                        flow: f,
                        info: hole.min(u64::from(u32::MAX)) as u32,
                        bytes: Bytes::Arena {
                            off: start as u32,
                            len: (q.arena.len() - start) as u32,
                        },
                    });
                }
            }
        }
        for (d, s) in c.streams.iter_mut().enumerate() {
            c.hole_at_end[d] = s.has_hole();
            s.release(&mut self.rings);
        }
        match why {
            EndReason::Closed => self.stats.ended_closed += 1,
            EndReason::Reset => self.stats.ended_reset += 1,
            EndReason::Idle => self.stats.ended_idle += 1,
            EndReason::Final => self.stats.ended_final += 1,
        }
        q.push(Event {
            kind: Kind::FlowEnd,
            dir: 0,
            from: FROM_STACK,
            pkt,
            flow: f,
            info: why as u32,
            bytes: Bytes::None,
        });
    }

    /// Tracks packet `idx` of the batch and queues its events.
    pub fn packet(&mut self, idx: u16, p: &mut Packet, q: &mut Queue) {
        let mut ev = Event {
            kind: Kind::Packet,
            dir: 0,
            from: FROM_STACK,
            pkt: idx,
            flow: NO_FLOW,
            info: 0,
            bytes: Bytes::None,
        };
        if self.cfg.level == Level::L3 {
            q.push(ev);
            return;
        }
        let l = tracked_layers(p, self.tunnels);
        // With defragmentation on, no fragment is tracked: the datagram is.
        if l.l4_proto != 6
            || !matches!(l.l3, L3Kind::Ipv4 | L3Kind::Ipv6)
            || l.is_later_fragment()
            || (l.is_fragment() && self.defrag.is_some())
        {
            q.push(ev);
            return;
        }
        let now = p.meta().now_ns;
        let d = p.data();
        // The segment ends where the datagram does (Ethernet padding is not payload). A
        // total length of 0 is refused, as Suricata refuses it (the IDS's oracle).
        let t = l.l4_off as usize;
        let seg_end = usize::from(l.l3_end);
        let no_total = l.l3 == L3Kind::Ipv4 && d[usize::from(l.l3_off) + 2..][..2] == [0, 0];
        if !l.has_l4() || seg_end < t + 20 || no_total {
            self.stats.malformed += 1;
            q.push(ev);
            return;
        }
        let h = &d[t..seg_end];
        let hl = usize::from(h[12] >> 4) * 4;
        if hl < 20 || hl > h.len() {
            self.stats.malformed += 1;
            q.push(ev);
            return;
        }
        let Some(key) = FlowKey::from_packet(&l, d) else {
            q.push(ev);
            return;
        };
        let fl = u16::from_be_bytes([h[12], h[13]]) & 0x1ff;
        let seq = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
        let ack = u32::from_be_bytes([h[8], h[9], h[10], h[11]]);
        let (pay_off, pay_len) = (t + hl, h.len() - hl);
        let syn = fl & flags::SYN != 0;
        let pure_syn = syn && fl & flags::ACK == 0;

        let wk = WideKey(key.canonical());
        let mut f = self.table.get(&wk).copied();
        // An idle entry, or a closed one that sees a new SYN, makes way for a new flow.
        if let Some(old) = f {
            let c = &self.conns[old as usize];
            let idle =
                self.cfg.timeout_ns != 0 && now.saturating_sub(c.last_ns) > self.cfg.timeout_ns;
            if idle || (pure_syn && (c.ended || c.state >= TcpState::FinWait)) {
                self.table.remove(&wk);
                self.end(
                    old,
                    if idle {
                        EndReason::Idle
                    } else {
                        EndReason::Closed
                    },
                    NO_PKT,
                    q,
                );
                self.retired.push(old);
                f = None;
            }
        }
        let f = match f {
            Some(f) => f,
            None => {
                // A pickup starts on a segment with data (or a SYN-ACK): a bare ACK, FIN
                // or RST of a connection we do not know is most often the tail of one that
                // just closed.
                if !pure_syn && (!self.cfg.midstream || (pay_len == 0 && !syn)) {
                    self.stats.untracked += 1;
                    q.push(ev);
                    return;
                }
                if self.table.len() >= self.cfg.flows {
                    self.stats.table_full += 1;
                    q.push(ev);
                    return;
                }
                // A SYN-ACK first: the client is its destination.
                let (ck, state) = if pure_syn {
                    (key, TcpState::SynSent)
                } else if syn {
                    (key.reversed(), TcpState::SynReceived)
                } else {
                    (key, TcpState::Established)
                };
                let mut c = Conn::new(ck, state, now, &self.initial);
                c.serial = self.serial;
                self.serial += 1;
                let slot = match self.free.pop() {
                    Some(s) => {
                        self.conns[s as usize] = c;
                        s
                    }
                    None => {
                        self.conns.push(c);
                        (self.conns.len() - 1) as FlowId
                    }
                };
                let c = &mut self.conns[slot as usize];
                c.midstream = !syn;
                c.synack_first = syn && !pure_syn;
                if c.synack_first && self.skip_holes {
                    // Suricata takes the client's next byte from the SYN-ACK's ack.
                    c.streams[0].start(ack);
                } else if c.midstream && self.skip_holes && fl & (flags::ACK | flags::FIN) != 0 {
                    // Suricata's pickup (on an ACK or a FIN) starts the other direction at
                    // this packet's ack, so bytes the capture lost before that side's
                    // first segment are a hole at its start (stream-tcp.c, midstream).
                    c.streams[1].start(ack);
                }
                self.stats.flows += 1;
                self.stats.midstream += u64::from(!syn);
                self.table.insert(wk, slot);
                q.push(Event {
                    kind: Kind::FlowStart,
                    flow: slot,
                    dir: u8::from(key != ck),
                    ..ev
                });
                slot
            }
        };
        let c = &mut self.conns[f as usize];
        c.last_ns = now;
        if c.ended {
            // A stray segment after the end (a retransmitted FIN, a late ACK).
            q.push(ev);
            return;
        }
        let dir = usize::from(key != c.key);
        c.packets[dir] += 1;
        if syn {
            c.window.syn(dir, &h[20..hl]);
        }
        if fl & flags::ACK != 0 {
            c.window
                .ack(dir, syn, ack, u16::from_be_bytes([h[14], h[15]]));
        }
        q.pkt_flow[idx as usize] = (f, dir as u8);
        if let Some(v) = q.pkt_streams.get_mut(idx as usize) {
            *v = [0, 1].map(|d| (c.streams[d].next_seq(), c.streams[d].delivered()));
        }
        let old = c.state;
        // With Suricata's semantics (`skip_holes`), a segment its handshake checks refuse
        // moves nothing and carries no bytes (a SYN never answered, a pickup whose ACKs
        // do not fit).
        let hs = if self.skip_holes && old < TcpState::Established {
            let next = [c.streams[0].next_seq(), c.streams[1].next_seq()];
            let next = [
                if c.streams[0].is_started() {
                    next[0]
                } else {
                    ack
                },
                if c.streams[1].is_started() {
                    next[1]
                } else {
                    seq
                },
            ];
            tcp_state::suricata_handshake(old, dir, fl, seq, ack, next, c.synack_first)
        } else {
            Handshake::Normal
        };
        c.state = match hs {
            Handshake::Ignore => old,
            Handshake::Normal => {
                tcp_state::next(old, &mut c.fins, dir, fl, seq, ack, pay_len as u32)
            }
            Handshake::Establish => TcpState::Established,
        };
        // Whether the segment's bytes go to the stream: Suricata keeps none before the
        // handshake completes.
        let take = match hs {
            // A SYN's own data (TCP Fast Open) is the stream's: Suricata takes it, and the
            // SYN-ACK then acknowledges past it.
            Handshake::Ignore => pure_syn,
            Handshake::Establish => true,
            Handshake::Normal => {
                !self.skip_holes || old >= TcpState::Established || c.state >= TcpState::Established
            }
        };
        ev.flow = f;
        ev.dir = dir as u8;
        // The state after this packet + 1 (0: no tracked TCP packet), and whether its
        // payload was refused (not in the stream).
        q.push(Event {
            info: (c.state as u32 + 1) | u32::from(!take && pay_len > 0) << 8,
            ..ev
        });
        q.push(Event {
            kind: Kind::TcpPacket,
            info: u32::from(fl),
            ..ev
        });
        if c.state != old {
            q.push(Event {
                kind: Kind::StateChange,
                info: (old as u32) << 8 | c.state as u32,
                ..ev
            });
        }
        if self.cfg.level >= Level::Bytestream {
            let want = q.want.has(Kind::Data) && c.subs_any(Kind::Data);
            if self.skip_holes
                && hs != Handshake::Ignore
                && fl & flags::ACK != 0
                && c.streams[1 - dir].has_hole()
            {
                // The other direction's bytes behind a hole this packet acknowledges
                // (Suricata's reassembly gap): delivered first, as Suricata updates the
                // acknowledged direction before taking this packet's segment.
                let st = &mut c.streams[1 - dir];
                let d = 1 - dir as u8;
                skip_holes_to(st, ack, &mut self.rings, &mut self.stats, q, want, d, ev);
            }
            let st = &mut c.streams[dir];
            if !st.is_started() && (hs != Handshake::Ignore || syn) {
                // The ISN's successor; on a pickup, the first segment seen.
                st.start(seq.wrapping_add(u32::from(syn)));
            }
            let data_seq = seq.wrapping_add(u32::from(syn));
            let beyond = pay_len > 0 && take && c.window.beyond(dir, data_seq);
            self.stats.out_of_window += u64::from(beyond);
            if pay_len > 0 && take && !beyond {
                let ring = self.rings.ring_bytes();
                let mut lead = 0;
                if self.skip_holes && st.hole_overflows(data_seq, pay_len, ring) {
                    // A side whose bytes behind a hole would overflow the ring (a pickup's
                    // other side whose first bytes were lost, or a side whose receiver
                    // acknowledged bytes the capture never showed, then far more came):
                    // the holes before this segment are skipped now rather than the side
                    // given up. Suricata's buffer is not bounded by a ring: on the next
                    // ACK past its progress it declares the gap and goes on to the data.
                    let d = dir as u8;
                    skip_holes_to(
                        st,
                        data_seq,
                        &mut self.rings,
                        &mut self.stats,
                        q,
                        want,
                        d,
                        ev,
                    );
                    lead = st.skip_hole_to(data_seq);
                }
                if lead > 0 {
                    self.stats.gaps += 1;
                    self.stats.gap_bytes += lead;
                }
                let payload = &d[pay_off..pay_off + pay_len];
                let mut first: Option<(usize, usize)> = None;
                let mut copied = false;
                let arena = &mut q.arena;
                let start = arena.len();
                let o = st.segment(&mut self.rings, data_seq, payload, |ch| {
                    if !want {
                        return;
                    }
                    match ch {
                        Chunk::Segment { off, len } if first.is_none() && !copied => {
                            first = Some((off, len))
                        }
                        Chunk::Segment { off, len } => {
                            if let Some((o0, l0)) = first.take() {
                                arena.extend_from_slice(&payload[o0..o0 + l0]);
                            }
                            copied = true;
                            arena.extend_from_slice(&payload[off..off + len]);
                        }
                        Chunk::Buffered(b) => {
                            if let Some((o0, l0)) = first.take() {
                                arena.extend_from_slice(&payload[o0..o0 + l0]);
                            }
                            copied = true;
                            arena.extend_from_slice(b);
                        }
                    }
                });
                self.stats.bytes += o.delivered as u64;
                self.stats.duplicate_bytes += o.duplicate as u64;
                c.duplicate_bytes[dir] += o.duplicate as u64;
                if o.gave_up {
                    self.stats.gave_up += 1;
                }
                let bytes = if copied {
                    Some(Bytes::Arena {
                        off: start as u32,
                        len: (q.arena.len() - start) as u32,
                    })
                } else {
                    first.map(|(off, len)| Bytes::InPacket {
                        off: (pay_off + off) as u32,
                        len: len as u32,
                    })
                };
                if let Some(bytes) = bytes {
                    q.push(Event {
                        kind: Kind::Data,
                        info: lead.min(u64::from(u32::MAX)) as u32,
                        bytes,
                        ..ev
                    });
                }
            }
        }
        if let Some(v) = q.pkt_streams.get_mut(idx as usize) {
            *v = [0, 1].map(|d| (c.streams[d].next_seq(), c.streams[d].delivered()));
        }
        if c.state == TcpState::Closed {
            let why = if fl & flags::RST != 0 {
                EndReason::Reset
            } else {
                EndReason::Closed
            };
            self.end(f, why, idx, q);
            // The slot is free from the next batch on; stray segments after the close are
            // not picked up (they carry no data).
            self.table.remove(&wk);
            self.retired.push(f);
        }
    }
}

/// Skips the holes of `st` that `ack` acknowledges (data the capture missed), handing
/// each run held after one to the apps as a data event of direction `dir` whose `info`
/// is the hole's length (Suricata's reassembly gap).
#[allow(clippy::too_many_arguments)]
fn skip_holes_to(
    st: &mut Stream,
    ack: u32,
    rings: &mut RingPool,
    stats: &mut StackStats,
    q: &mut Queue,
    want: bool,
    dir: u8,
    ev: Event,
) {
    loop {
        let start = q.arena.len();
        let arena = &mut q.arena;
        let Some((hole, _)) = st.skip_acked_hole(rings, ack, |ch| {
            if let (true, Chunk::Buffered(b)) = (want, ch) {
                arena.extend_from_slice(b);
            }
        }) else {
            break;
        };
        stats.gaps += 1;
        stats.gap_bytes += hole;
        let len = q.arena.len() - start;
        stats.bytes += len as u64;
        if want {
            q.push(Event {
                kind: Kind::Data,
                dir,
                info: hole.min(u64::from(u32::MAX)) as u32,
                bytes: Bytes::Arena {
                    off: start as u32,
                    len: len as u32,
                },
                ..ev
            });
        }
    }
}

/// The headers the stack tracks a packet by: its own, or with `tunnels` the inner packet
/// of a tunnel whose outer header is not TCP (no tunnel we decode rides on TCP).
#[inline]
pub fn tracked_layers(p: &mut Packet, tunnels: bool) -> Layers {
    let l = p.layers();
    if !tunnels || l.l4_proto == 6 {
        return l;
    }
    l.tunnel_inner(p.data()).unwrap_or(l)
}

impl Conn {
    /// Some app receives `k` for this flow (else the stack need not produce it).
    #[inline]
    fn subs_any(&self, k: Kind) -> bool {
        self.subs.iter().any(|s| s.has(k))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A SYN of flow `n` (10.0.0.1:n → 10.0.0.2:80) at capture time `ns`.
    fn syn(n: u16, ns: u64) -> Packet {
        let mut b = vec![0u8; 14 + 20 + 20];
        b[12] = 8;
        b[14] = 0x45;
        b[16..18].copy_from_slice(&40u16.to_be_bytes());
        b[22] = 64;
        b[23] = 6;
        b[26..30].copy_from_slice(&[10, 0, 0, 1]);
        b[30..34].copy_from_slice(&[10, 0, 0, 2]);
        b[34..36].copy_from_slice(&n.to_be_bytes());
        b[36..38].copy_from_slice(&80u16.to_be_bytes());
        b[46] = 0x50;
        b[47] = flags::SYN as u8;
        let mut p = Packet::from_bytes(&b);
        p.meta_mut().now_ns = ns;
        p
    }

    /// The serials of the flows one sweep at `now` ends, in the order it ends them.
    fn swept(s: &mut Stack, q: &mut Queue, now: u64) -> Vec<u64> {
        q.clear();
        s.sweep(now, q);
        let ended = q.events.iter().filter(|e| e.kind == Kind::FlowEnd);
        let serials = ended.map(|e| s.conns[e.flow as usize].serial).collect();
        s.end_batch();
        serials
    }

    /// A sweep that finds more idle flows than the queue has room for ends those that
    /// began first: which ones end must not follow the table's order, which its hash
    /// keys make different in every process (two runs over the merged trace wrote their
    /// EVE records in different orders). Before, the first sweep ended 256 of the 600
    /// in table order.
    #[test]
    fn a_short_sweep_ends_the_flows_that_began_first() {
        let cfg = StackConfig {
            timeout_ns: 1_000,
            ..StackConfig::default()
        };
        let mut s = Stack::new(cfg);
        let mut q = Queue::new(s.ring_bytes(), Kinds::of(&Kind::ALL));
        for n in 0..600u16 {
            q.start_batch(1);
            s.packet(0, &mut syn(1_000 + n, u64::from(n)), &mut q);
        }
        assert_eq!(s.live(), 600);
        let room = q.room().min(256) as u64;
        assert!(
            room < 300,
            "the test needs more idle flows than one sweep ends"
        );
        let now = 1_000_000;
        let first = swept(&mut s, &mut q, now);
        assert_eq!(first, (0..room).collect::<Vec<_>>());
        let second = swept(&mut s, &mut q, now + 1);
        assert_eq!(second, (room..2 * room).collect::<Vec<_>>());
        let third = swept(&mut s, &mut q, now + 2);
        assert_eq!(third, (2 * room..600).collect::<Vec<_>>());
        assert_eq!(s.live(), 0);
        // All done: the next sweep is a quarter timeout later.
        assert!(swept(&mut s, &mut q, now + 3).is_empty());
    }
}
