//! The connection state a middlebox can follow from both directions' segments.
//!
//! It is a simplification of RFC 9293's two endpoint machines into one per connection:
//! the middlebox sees both sides, so "SYN seen", "SYN-ACK seen", "first FIN seen",
//! "both FINs seen", and "closed" (the last FIN acknowledged, or a RST) are enough to know
//! when a connection starts carrying data and when it is over.

use crate::packet::wire::tcp::flags;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum TcpState {
    /// The client's SYN was seen.
    SynSent = 0,
    /// The server's SYN-ACK was seen.
    SynReceived = 1,
    /// The handshake completed (or the connection was picked up mid-stream).
    Established = 2,
    /// One side sent FIN.
    FinWait = 3,
    /// Both sides sent FIN; waiting for the last ACK.
    Closing = 4,
    /// The last FIN was acknowledged, or a RST was seen.
    Closed = 5,
}

impl TcpState {
    pub fn name(self) -> &'static str {
        match self {
            TcpState::SynSent => "syn_sent",
            TcpState::SynReceived => "syn_received",
            TcpState::Established => "established",
            TcpState::FinWait => "fin_wait",
            TcpState::Closing => "closing",
            TcpState::Closed => "closed",
        }
    }

    pub fn from_u8(v: u8) -> TcpState {
        match v {
            0 => TcpState::SynSent,
            1 => TcpState::SynReceived,
            2 => TcpState::Established,
            3 => TcpState::FinWait,
            4 => TcpState::Closing,
            _ => TcpState::Closed,
        }
    }
}

/// Per-direction facts the machine needs besides the flags.
#[derive(Clone, Copy, Debug, Default)]
pub struct Fins {
    /// Sequence number just after each direction's FIN, once seen.
    pub fin_end: [Option<u32>; 2],
    /// Each direction's FIN has been acknowledged by the other side.
    pub acked: [bool; 2],
}

/// The next state after a segment from direction `dir` (0 = client) with `tcp_flags`,
/// sequence `seq`, ack `ack` and `len` bytes of payload.
pub fn next(
    s: TcpState,
    fins: &mut Fins,
    dir: usize,
    tcp_flags: u16,
    seq: u32,
    ack: u32,
    len: u32,
) -> TcpState {
    if tcp_flags & flags::RST != 0 {
        return TcpState::Closed;
    }
    let syn = tcp_flags & flags::SYN != 0;
    let has_ack = tcp_flags & flags::ACK != 0;
    let mut n = match s {
        TcpState::SynSent if dir == 1 && syn && has_ack => TcpState::SynReceived,
        TcpState::SynReceived if dir == 0 && has_ack && !syn => TcpState::Established,
        // Data from the server before the handshake's last ACK was seen (it was lost to
        // the capture): the connection is up anyway.
        TcpState::SynReceived if dir == 1 && !syn && len > 0 => TcpState::Established,
        s => s,
    };
    if tcp_flags & flags::FIN != 0 && fins.fin_end[dir].is_none() {
        let end = seq
            .wrapping_add(len)
            .wrapping_add(u32::from(syn))
            .wrapping_add(1);
        fins.fin_end[dir] = Some(end);
        n = match n {
            TcpState::Closing | TcpState::Closed => n,
            _ if fins.fin_end[1 - dir].is_some() => TcpState::Closing,
            _ => TcpState::FinWait,
        };
    }
    // Both FINs acknowledged close the connection.
    if has_ack {
        if let Some(end) = fins.fin_end[1 - dir] {
            if super::seq::le(end, ack) {
                fins.acked[1 - dir] = true;
            }
        }
    }
    if n == TcpState::Closing && fins.acked == [true, true] {
        n = TcpState::Closed;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use flags::{ACK, FIN, RST, SYN};

    #[test]
    fn handshake_data_and_close() {
        let mut f = Fins::default();
        let mut s = TcpState::SynSent;
        s = next(s, &mut f, 1, SYN | ACK, 500, 101, 0);
        assert_eq!(s, TcpState::SynReceived);
        s = next(s, &mut f, 0, ACK, 101, 501, 0);
        assert_eq!(s, TcpState::Established);
        s = next(s, &mut f, 0, ACK | FIN, 101, 501, 10);
        assert_eq!((s, f.fin_end[0]), (TcpState::FinWait, Some(112)));
        s = next(s, &mut f, 1, ACK | FIN, 501, 112, 0);
        assert_eq!(s, TcpState::Closing);
        s = next(s, &mut f, 0, ACK, 112, 501, 0);
        assert_eq!(s, TcpState::Closing, "ack below the server's FIN end");
        s = next(s, &mut f, 0, ACK, 112, 502, 0);
        assert_eq!(s, TcpState::Closed);
    }

    #[test]
    fn reset_closes() {
        let mut f = Fins::default();
        assert_eq!(
            next(TcpState::Established, &mut f, 1, RST | ACK, 1, 1, 0),
            TcpState::Closed
        );
    }
}
