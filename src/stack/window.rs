//! The receive window each side of a connection advertised, seen from the middle: a
//! segment that starts past the right edge its receiver announced (last ACK + window) is
//! one the receiver discards, so the stack does not feed it to reassembly either.
//!
//! Why: without it, one forged segment a gigabyte ahead made its direction give up
//! (over the out-of-order bound) and blinded DPI and IDS to the rest of the flow, where
//! Suricata ignores such a segment as out of window (`STREAM_EST_PACKET_OUT_OF_WINDOW`).
//!
//! Window scaling (RFC 7323) counts only when both SYNs carried the option; when a SYN
//! was not seen (a pickup) the shift is taken as 14, the largest, as Suricata does, so a
//! real segment is never refused for a scale the capture did not show.

use super::seq;

/// Largest window shift (RFC 7323 §2.3).
const MAX_SHIFT: u8 = 14;
/// No window scale option seen on that side's SYN.
const NONE: u8 = 0xff;

#[derive(Clone, Copy)]
pub struct Window {
    /// Right edge of the stream of each direction: what its receiver accepts up to.
    edge: [u32; 2],
    /// Bit `d`: the edge of direction `d` is known. Bit `2 + d`: direction `d`'s SYN seen.
    bits: u8,
    /// Window scale option of each direction's SYN, or `NONE`.
    scale: [u8; 2],
    /// The shift each direction's windows take, settled when a SYN is seen (so an ACK
    /// pays one shift and one compare).
    shift: [u8; 2],
}

impl Default for Window {
    fn default() -> Self {
        Window {
            edge: [0; 2],
            bits: 0,
            scale: [NONE; 2],
            shift: [MAX_SHIFT; 2],
        }
    }
}

impl Window {
    /// A SYN (or SYN-ACK) sent by `dir`, with its TCP options.
    pub fn syn(&mut self, dir: usize, options: &[u8]) {
        self.bits |= 4 << dir;
        self.scale[dir] = scale_option(options).unwrap_or(NONE);
        self.shift = match self.scale {
            [a, b] if a != NONE && b != NONE => [a.min(MAX_SHIFT), b.min(MAX_SHIFT)],
            _ if self.bits & 12 == 12 => [0, 0],
            _ => [MAX_SHIFT; 2],
        };
    }

    /// A segment from `dir` with the ACK flag: it announces how far the stream of the
    /// other direction may go. The edge only moves forward.
    #[inline(always)]
    pub fn ack(&mut self, dir: usize, syn: bool, ack: u32, window: u16) {
        let shift = if syn { 0 } else { self.shift[dir & 1] };
        let edge = ack.wrapping_add(u32::from(window) << shift);
        let other = (dir ^ 1) & 1;
        if self.bits & (1 << other) == 0 || seq::lt(self.edge[other], edge) {
            self.edge[other] = edge;
            self.bits |= 1 << other;
        }
    }

    /// A segment of direction `dir` whose first byte is `seq` starts past its receiver's
    /// window. A segment starting exactly at the edge (a zero-window probe) is not.
    #[inline(always)]
    pub fn beyond(&self, dir: usize, seq: u32) -> bool {
        self.bits & (1 << dir) != 0 && seq::lt(self.edge[dir], seq)
    }
}

/// The shift of a window scale option (kind 3, length 3) among `options`.
fn scale_option(options: &[u8]) -> Option<u8> {
    let mut i = 0;
    while i < options.len() {
        match options[i] {
            0 => return None,
            1 => i += 1,
            kind => {
                let len = usize::from(*options.get(i + 1)?);
                if len < 2 || i + len > options.len() {
                    return None;
                }
                if kind == 3 && len == 3 {
                    return Some(options[i + 2]);
                }
                i += len;
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_edge_is_the_last_ack_plus_the_scaled_window() {
        let mut w = Window::default();
        assert!(!w.beyond(0, 1 << 30), "no edge known: nothing is refused");
        w.syn(0, &[2, 4, 5, 0xb4, 1, 3, 3, 7]);
        w.syn(1, &[3, 3, 2, 0]);
        // The SYN-ACK's window is never scaled.
        w.ack(1, true, 1001, 1000);
        assert!(!w.beyond(0, 2001) && w.beyond(0, 2002));
        // Later ones are, by the receiver's own shift (2).
        w.ack(1, false, 1001, 1000);
        assert!(!w.beyond(0, 5001) && w.beyond(0, 5002));
        // It never moves back.
        w.ack(1, false, 1001, 0);
        assert!(!w.beyond(0, 5001));
        // Across the sequence wrap.
        let mut v = Window::default();
        v.ack(1, true, u32::MAX - 9, 1000);
        assert!(!v.beyond(0, u32::MAX) && !v.beyond(0, 990) && v.beyond(0, 991));
    }

    #[test]
    fn a_scale_only_one_side_offered_is_not_used_and_a_pickup_assumes_the_largest() {
        let mut w = Window::default();
        w.syn(0, &[3, 3, 7]);
        w.syn(1, &[]);
        w.ack(0, false, 0, 10);
        assert!(w.beyond(1, 11));
        let mut p = Window::default();
        p.ack(0, false, 0, 1);
        assert!(!p.beyond(1, 1 << 14) && p.beyond(1, (1 << 14) + 1));
    }

    #[test]
    fn options_that_lie_about_their_length_end_the_walk() {
        assert_eq!(scale_option(&[3, 3, 9]), Some(9));
        assert_eq!(scale_option(&[1, 1, 3, 3, 4]), Some(4));
        assert_eq!(scale_option(&[2, 0, 3, 3, 4]), None);
        assert_eq!(scale_option(&[2, 40, 3, 3, 4]), None);
        assert_eq!(scale_option(&[3, 3]), None);
        assert_eq!(scale_option(&[0, 3, 3, 4]), None);
        assert_eq!(scale_option(&[]), None);
    }
}
