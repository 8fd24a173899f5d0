//! One tracked TCP connection: its state, both directions' streams, every app's
//! subscriptions for it, and the splice (sequence translation) once bound.

use super::event::Kinds;
use super::reasm::Stream;
use super::splice::Splice;
use super::tcp_state::{Fins, TcpState};
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
    /// FlowEnd was published; the entry stays only to absorb stray segments until the
    /// timeout or a new SYN.
    pub(crate) ended: bool,
    pub packets: [u64; 2],
    pub(crate) splice: Option<Splice>,
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
            ended: false,
            packets: [0; 2],
            splice: None,
        }
    }

    /// Bytes delivered so far in direction `dir` (0 = client to server).
    pub fn delivered(&self, dir: usize) -> u64 {
        self.streams[dir].delivered()
    }

    /// The stream of `dir` gave up (over its buffer bound): its bytes are incomplete.
    pub fn gave_up(&self, dir: usize) -> bool {
        self.streams[dir].gave_up()
    }

    /// Bytes of `dir` are still waiting behind a hole.
    pub fn has_hole(&self, dir: usize) -> bool {
        self.streams[dir].has_hole()
    }
}
