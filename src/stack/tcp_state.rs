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

/// What Suricata 7 makes of a segment of a connection whose handshake is not complete
/// (stream-tcp.c, `StreamTcpPacketStateSynSent` / `…SynRecv`, `async-oneside` off).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handshake {
    /// The segment is refused: no state change, its bytes are not in the stream.
    Ignore,
    /// The usual machine ([`next`]) applies.
    Normal,
    /// The segment completes the handshake (its bytes are the stream's).
    Establish,
}

/// Suricata's handshake checks for a segment from `dir` in state `s`; `next` is each
/// direction's next expected sequence number (the client's is the SYN-ACK's ack, the
/// server's its ISN + 1: no bytes are taken before the handshake completes), and
/// `synack_first` says the connection was picked up from its SYN-ACK.
pub fn suricata_handshake(
    s: TcpState,
    dir: usize,
    tcp_flags: u16,
    seq: u32,
    ack: u32,
    next: [u32; 2],
    synack_first: bool,
) -> Handshake {
    use super::seq::{le, lt};
    let (syn, has_ack) = (tcp_flags & flags::SYN != 0, tcp_flags & flags::ACK != 0);
    if s >= TcpState::Established || tcp_flags & flags::RST != 0 {
        return Handshake::Normal;
    }
    if s == TcpState::SynSent {
        // Only the SYN-ACK that acknowledges the SYN moves on; the client's own ACKs and
        // data (no SYN-ACK seen) are never reassembled.
        return if dir == 1 && syn && has_ack && ack == next[0] {
            Handshake::Normal
        } else {
            Handshake::Ignore
        };
    }
    if syn || !has_ack {
        return Handshake::Ignore;
    }
    if tcp_flags & flags::FIN != 0 {
        // `StreamTcpHandleFin`: an ACK of bytes the other side has not sent is invalid.
        return if le(ack, next[1 - dir]) {
            Handshake::Normal
        } else {
            Handshake::Ignore
        };
    }
    let (c, srv) = (next[0], next[1]);
    let ok = if dir == 0 {
        // The handshake's ACK, or data after a lost one (seq at or past the client's
        // next byte, ack the server's).
        ack == srv && le(c, seq)
    } else {
        // Suricata compares the server's seq with the client's next seq here ("SYN/ACK
        // followed by more TOCLIENT suggesting packet loss"); copied as it is.
        (lt(c, seq) && lt(c, ack)) || (!synack_first && ack == c && seq == srv)
    };
    if ok {
        Handshake::Establish
    } else {
        Handshake::Ignore
    }
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

    /// Suricata's checks (values of the merged trace's NAT flow, 192.168.1.103:1044).
    #[test]
    fn suricata_handshake_checks() {
        use Handshake::*;
        let h = suricata_handshake;
        // SYN_SENT: only the SYN-ACK that acknowledges the SYN.
        assert_eq!(
            h(TcpState::SynSent, 1, SYN | ACK, 9, 101, [101, 0], false),
            Normal
        );
        assert_eq!(
            h(TcpState::SynSent, 1, SYN | ACK, 9, 105, [101, 0], false),
            Ignore
        );
        assert_eq!(
            h(TcpState::SynSent, 0, ACK, 101, 10, [101, 0], false),
            Ignore
        );
        assert_eq!(
            h(TcpState::SynSent, 1, RST | ACK, 9, 101, [101, 0], false),
            Normal
        );
        // SYN_RECV: the handshake's ACK, or data after a lost one.
        let next = [858_612_760, 4_015_379_905];
        let r = TcpState::SynReceived;
        assert_eq!(h(r, 0, ACK, next[0], next[1], next, true), Establish);
        assert_eq!(h(r, 0, ACK, next[0] + 364, next[1], next, true), Establish);
        // Client ACKs past server bytes never taken; server data after a SYN-ACK pickup
        // whose seq is "before" the client's: refused.
        assert_eq!(h(r, 0, ACK, 858_613_124, 4_015_383_382, next, true), Ignore);
        assert_eq!(h(r, 1, ACK, next[1], 858_613_124, next, true), Ignore);
        // After a SYN (not a pickup), the server's data that fits a lost handshake ACK.
        assert_eq!(h(r, 1, ACK, next[1], next[0], next, false), Establish);
        assert_eq!(h(r, 1, ACK | FIN, next[1], 858_613_812, next, true), Ignore);
        assert_eq!(h(r, 0, ACK | FIN, next[0], next[1], next, true), Normal);
        assert_eq!(h(TcpState::Established, 0, ACK, 1, 1, next, true), Normal);
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
