//! The events of one packet batch and the bytes some of them carry, pre-sized so that
//! filling them allocates nothing; when either runs low mid-batch, the microbox delivers
//! what is queued and starts over (events stay in order either way).

use super::event::{Bytes, Event, FlowId, Kinds, NO_FLOW};

pub struct Queue {
    pub(crate) events: Vec<Event>,
    pub(crate) arena: Vec<u8>,
    /// The flow and direction of each packet of the batch (for the splice pass).
    pub(crate) pkt_flow: Vec<(FlowId, u8)>,
    /// Each tracked packet's connection streams just after the stack took it: (next
    /// sequence number, bytes delivered) per direction. Apps handle events after the
    /// whole batch, when the streams may be further on; this keeps what they judge by a
    /// packet independent of where the batch ends.
    pub(crate) pkt_streams: Vec<[(u32, u64); 2]>,
    /// Some app reads `pkt_streams`; else the stack does not fill it.
    pub(crate) streams_per_packet: bool,
    /// Kinds some app may want: the stack makes no others.
    pub(crate) want: Kinds,
    /// Room the stack keeps free for one packet's events and bytes.
    reserve_events: usize,
    reserve_bytes: usize,
    /// Published events refused because the queue was full.
    pub(crate) refused: u64,
}

impl Queue {
    /// `ring_bytes` is the stack's reassembly ring size: one segment can release that
    /// many buffered bytes at once.
    pub fn new(ring_bytes: usize, want: Kinds) -> Queue {
        let reserve_bytes = ring_bytes + 65_536;
        Queue {
            events: Vec::with_capacity(1024),
            arena: Vec::with_capacity(4 * reserve_bytes),
            pkt_flow: Vec::with_capacity(4 * crate::packet::MAX_BATCH),
            pkt_streams: Vec::with_capacity(4 * crate::packet::MAX_BATCH),
            streams_per_packet: false,
            want,
            reserve_events: 512,
            reserve_bytes,
            refused: 0,
        }
    }

    /// Records each tracked packet's streams for [`super::Ctx::stream_after_packet`].
    pub fn with_streams_per_packet(mut self, on: bool) -> Queue {
        self.streams_per_packet = on;
        self
    }

    /// Enough room for the stack to queue one more packet's events; the rest of the
    /// reserve is left for what apps publish while handling them.
    pub fn has_room(&self) -> bool {
        self.events.len() + self.reserve_events <= self.events.capacity()
            && self.arena.len() + 2 * self.reserve_bytes <= self.arena.capacity()
    }

    /// Events that fit before the stack's reserve.
    pub fn room(&self) -> usize {
        (self.events.capacity() - self.reserve_events).saturating_sub(self.events.len())
    }

    pub fn clear(&mut self) {
        self.events.clear();
        self.arena.clear();
    }

    pub(crate) fn start_batch(&mut self, n: usize) {
        self.clear();
        self.pkt_flow.clear();
        self.pkt_flow.resize(n, (NO_FLOW, 0));
        self.pkt_streams.clear();
        if self.streams_per_packet {
            self.pkt_streams.resize(n, [(0, 0); 2]);
        }
    }

    #[inline]
    pub(crate) fn push(&mut self, e: Event) {
        if self.want.has(e.kind) {
            self.events.push(e);
        }
    }

    /// Copies `b` into the arena (the caller checked the room).
    pub(crate) fn stash(&mut self, b: &[u8]) -> Bytes {
        let off = self.arena.len() as u32;
        self.arena.extend_from_slice(b);
        Bytes::Arena {
            off,
            len: b.len() as u32,
        }
    }

    /// Inserts an app's event at `at`; false when the queue is full.
    pub(crate) fn insert(&mut self, at: usize, e: Event, bytes: &[u8]) -> bool {
        if self.events.len() >= self.events.capacity()
            || self.arena.len() + bytes.len() > self.arena.capacity()
        {
            self.refused += 1;
            return false;
        }
        let e = Event {
            bytes: if bytes.is_empty() {
                Bytes::None
            } else {
                self.stash(bytes)
            },
            ..e
        };
        self.events.insert(at, e);
        true
    }

    pub fn len(&self) -> usize {
        self.events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }
}
