//! One tracked TCP connection: its state, both directions' streams, every app's
//! subscriptions for it, and the splice (sequence translation) once bound.

use super::event::Kinds;
use super::reasm::Stream;
use super::splice::Splice;
use super::tcp_state::{Fins, TcpState};
use super::window::Window;
use crate::flow::FlowKey;

/// Most apps one stack serves (the subscription masks are kept per flow for each).
pub const MAX_APPS: usize = 16;

pub struct Conn {
    /// Oriented from the client (the SYN's sender, or the first packet's on pickup).
    pub key: FlowKey,
    pub state: TcpState,
    pub(crate) fins: Fins,
    pub(crate) streams: [Stream; 2],
    /// What each app receives for this flow.
    pub(crate) subs: [Kinds; MAX_APPS],
    pub(crate) last_ns: u64,
    /// Picked up mid-stream (no SYN seen).
    pub midstream: bool,
    /// Picked up from its SYN-ACK (the client's SYN not seen).
    pub(crate) synack_first: bool,
    /// FlowEnd was published.
    pub(crate) ended: bool,
    pub packets: [u64; 2],
    /// Payload bytes per direction that were already held (retransmissions, overlaps).
    pub duplicate_bytes: [u64; 2],
    pub(crate) splice: Option<Splice>,
    /// Each side's advertised receive window (segments past it are not reassembled).
    pub(crate) window: Window,
    /// Bytes were still waiting behind a hole when the flow ended (data the capture
    /// lost), per direction.
    pub(crate) hole_at_end: [bool; 2],
    /// The stack's count of flows before this one: flows that end together (an idle
    /// sweep, the end of the run) end in the order they began, not the table's.
    pub(crate) serial: u64,
}

impl Conn {
    pub(crate) fn new(key: FlowKey, state: TcpState, now: u64, subs: &[Kinds; MAX_APPS]) -> Conn {
        Conn {
            key,
            state,
            fins: Fins::default(),
            streams: [Stream::default(), Stream::default()],
            subs: *subs,
            last_ns: now,
            midstream: false,
            synack_first: false,
            ended: false,
            packets: [0; 2],
            duplicate_bytes: [0; 2],
            splice: None,
            window: Window::default(),
            hole_at_end: [false; 2],
            serial: 0,
        }
    }

    /// Bytes delivered so far in direction `dir` (0 = client to server).
    pub fn delivered(&self, dir: usize) -> u64 {
        self.streams[dir].delivered()
    }

    /// Sequence number of the next byte expected in `dir` (after the bytes delivered).
    pub fn next_seq(&self, dir: usize) -> u32 {
        self.streams[dir].next_seq()
    }

    /// The stream of `dir` gave up (over its buffer bound): its bytes are incomplete.
    pub fn gave_up(&self, dir: usize) -> bool {
        self.streams[dir].gave_up()
    }

    /// Bytes of `dir` are still waiting behind a hole (or were, when the flow ended).
    pub fn has_hole(&self, dir: usize) -> bool {
        self.streams[dir].has_hole() || self.hole_at_end[dir]
    }

    /// The bytestream of `dir` is known to miss bytes: it gave up, or ended with a hole.
    pub fn incomplete(&self, dir: usize) -> bool {
        self.gave_up(dir) || self.has_hole(dir)
    }
}
