//! Typed events: what the stack publishes about packets and connections, and what apps
//! publish for each other (DPI results, IDS alerts, their own kinds).

/// Event kinds. The discriminant is the bit in a [`Kinds`] mask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Every packet (any protocol); `flow` is set for tracked TCP packets, and `info` is
    /// then the connection's state after the packet ([`super::TcpState`]) + 1 (else 0),
    /// plus 256 when its payload was refused (Suricata's handshake checks: not in the
    /// stream).
    Packet = 0,
    /// A TCP segment of a tracked connection.
    TcpPacket = 1,
    /// A connection starts being tracked (its SYN, or a mid-stream pickup).
    FlowStart = 2,
    /// The connection's state changed; `info` is `old << 8 | new` ([`super::TcpState`]).
    StateChange = 3,
    /// New in-order bytes of one direction; the bytes come with the event. `info`: bytes
    /// the capture missed just before them (a hole the receiver acknowledged, skipped;
    /// only for stacks whose apps all accept gaps), else 0.
    Data = 4,
    /// The connection is over (closed, reset, idle timeout, or the run ended);
    /// `info` is an [`EndReason`].
    FlowEnd = 5,
    /// An app recognised the application protocol; `info` is the protocol id, the bytes
    /// its name.
    DpiResult = 6,
    /// An app raised an alert; `info` is the rule id, the bytes its message.
    IdsAlert = 7,
    /// Any app-defined event; `info` is the app's own code, the bytes its payload.
    Custom = 8,
}

impl Kind {
    pub const ALL: [Kind; 9] = [
        Kind::Packet,
        Kind::TcpPacket,
        Kind::FlowStart,
        Kind::StateChange,
        Kind::Data,
        Kind::FlowEnd,
        Kind::DpiResult,
        Kind::IdsAlert,
        Kind::Custom,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Packet => "packet",
            Kind::TcpPacket => "tcp_packet",
            Kind::FlowStart => "flow_start",
            Kind::StateChange => "state_change",
            Kind::Data => "data",
            Kind::FlowEnd => "flow_end",
            Kind::DpiResult => "dpi_result",
            Kind::IdsAlert => "ids_alert",
            Kind::Custom => "custom",
        }
    }

    /// Published by the stack (as opposed to apps).
    pub fn from_stack(self) -> bool {
        (self as u8) <= Kind::FlowEnd as u8
    }
}

/// A set of event kinds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Kinds(pub u16);

impl Kinds {
    pub const NONE: Kinds = Kinds(0);

    pub const fn of(kinds: &[Kind]) -> Kinds {
        let mut m = 0u16;
        let mut i = 0;
        while i < kinds.len() {
            m |= 1 << kinds[i] as u8;
            i += 1;
        }
        Kinds(m)
    }

    #[inline]
    pub const fn has(self, k: Kind) -> bool {
        self.0 & (1 << k as u8) != 0
    }

    #[inline]
    pub const fn with(self, k: Kind) -> Kinds {
        Kinds(self.0 | 1 << k as u8)
    }

    #[inline]
    pub const fn without(self, k: Kind) -> Kinds {
        Kinds(self.0 & !(1 << k as u8))
    }

    pub const fn union(self, o: Kinds) -> Kinds {
        Kinds(self.0 | o.0)
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// Why a flow ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum EndReason {
    /// FINs both ways, the last one acknowledged.
    Closed = 0,
    Reset = 1,
    /// Idle for longer than the stack's timeout.
    Idle = 2,
    /// The run ended with the flow still open.
    Final = 3,
}

impl EndReason {
    pub fn from_u32(v: u32) -> EndReason {
        match v {
            0 => EndReason::Closed,
            1 => EndReason::Reset,
            2 => EndReason::Idle,
            _ => EndReason::Final,
        }
    }
}

/// A flow's id: its slot in the stack's connection table, stable for the flow's life.
/// Apps index their own per-flow state by it (it is below [`super::StackConfig::flows`]).
pub type FlowId = u32;
/// `flow` of events that belong to no tracked flow.
pub const NO_FLOW: FlowId = u32::MAX;
/// `pkt` of events not tied to a packet of the batch (idle timeouts, end of run).
pub const NO_PKT: u16 = u16::MAX;
/// `from` of events the stack published.
pub const FROM_STACK: u8 = u8::MAX;

/// Where an event's bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bytes {
    None,
    /// `len` bytes at `off` in the packet `pkt` of the batch (zero copy).
    InPacket {
        off: u32,
        len: u32,
    },
    /// `len` bytes at `off` in the event queue's arena (copied: buffered stream bytes,
    /// bytes apps published).
    Arena {
        off: u32,
        len: u32,
    },
}

/// One event. Small and `Copy`; its bytes are read through the dispatch context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    pub kind: Kind,
    /// Direction for flow events: 0 from the connection's client, 1 from its server.
    pub dir: u8,
    /// Who published it: an app's index in its microbox, or [`FROM_STACK`].
    pub from: u8,
    /// Index of the packet in the batch, or [`NO_PKT`].
    pub pkt: u16,
    pub flow: FlowId,
    /// Kind-specific number (see [`Kind`]).
    pub info: u32,
    pub bytes: Bytes,
}

impl Event {
    /// Number of bytes the event carries (without touching them).
    #[inline]
    pub fn byte_len(&self) -> usize {
        match self.bytes {
            Bytes::None => 0,
            Bytes::InPacket { len, .. } | Bytes::Arena { len, .. } => len as usize,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks() {
        let k = Kinds::of(&[Kind::Data, Kind::FlowEnd]);
        assert!(k.has(Kind::Data) && k.has(Kind::FlowEnd) && !k.has(Kind::Packet));
        assert!(!k.without(Kind::Data).has(Kind::Data));
        assert!(Kind::FlowEnd.from_stack() && !Kind::DpiResult.from_stack());
    }
}
