//! The splicer's sequence translation: once a client connection has been handed to a
//! backend connection whose initial sequence numbers differ, every later segment's
//! sequence and acknowledgement numbers are shifted so each side keeps seeing its own
//! numbering. Checksums are patched incrementally (RFC 1624).

use crate::packet::checksum;
use crate::packet::wire::tcp::flags;

/// Shifts added (mod 2^32) per direction (0 = client to server).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Splice {
    pub seq: [u32; 2],
    pub ack: [u32; 2],
    /// Batch and packet from which translation applies (`batch << 16 | pkt`): packets
    /// the stack saw before the binding decision keep their numbers.
    pub(crate) from: u64,
}

impl Splice {
    /// Shifts per direction of the connection they will be applied to.
    pub fn new(seq: [u32; 2], ack: [u32; 2]) -> Splice {
        Splice { seq, ack, from: 0 }
    }

    /// The same translation for a connection whose directions are the other way round.
    pub fn reversed(&self) -> Splice {
        Splice {
            seq: [self.seq[1], self.seq[0]],
            ack: [self.ack[1], self.ack[0]],
            from: self.from,
        }
    }

    /// The translation for a client whose connection was answered with ISN `front_isn`
    /// (the server side the client saw) and continued on a backend connection whose
    /// server ISN is `back_isn`; the client's own numbers are kept toward the backend.
    pub fn server_isns(front_isn: u32, back_isn: u32) -> Splice {
        let d = front_isn.wrapping_sub(back_isn);
        Splice {
            // Client → backend: acks count the backend's bytes.
            seq: [0, d],
            ack: [d.wrapping_neg(), 0],
            from: 0,
        }
    }
}

/// Applies the shift of `dir` to the TCP header at `tcp` (≥ 20 bytes), fixing its
/// checksum. Returns false when the header is too short.
pub fn translate(s: &Splice, dir: usize, tcp: &mut [u8]) -> bool {
    if tcp.len() < 20 {
        return false;
    }
    let seq = u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]);
    let ack = u32::from_be_bytes([tcp[8], tcp[9], tcp[10], tcp[11]]);
    let has_ack = u16::from(tcp[13]) & flags::ACK != 0;
    let nseq = seq.wrapping_add(s.seq[dir]);
    // An ACK number without the ACK flag is meaningless (often zero): leave it.
    let nack = if has_ack {
        ack.wrapping_add(s.ack[dir])
    } else {
        ack
    };
    let mut c = u16::from_be_bytes([tcp[16], tcp[17]]);
    c = checksum::update32(c, seq, nseq);
    c = checksum::update32(c, ack, nack);
    tcp[4..8].copy_from_slice(&nseq.to_be_bytes());
    tcp[8..12].copy_from_slice(&nack.to_be_bytes());
    tcp[16..18].copy_from_slice(&c.to_be_bytes());
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shifts_and_keeps_checksum_valid() {
        // A TCP header with a checksum computed over header only (pseudo header 0).
        let mut h = [0u8; 20];
        h[4..8].copy_from_slice(&1000u32.to_be_bytes());
        h[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
        h[12] = 0x50;
        h[13] = flags::ACK as u8;
        let c = checksum::checksum(&h);
        h[16..18].copy_from_slice(&c.to_be_bytes());
        let s = Splice::server_isns(5000, 100);
        assert!(translate(&s, 0, &mut h));
        assert_eq!(&h[4..8], &1000u32.to_be_bytes());
        assert_eq!(&h[8..12], &(u32::MAX.wrapping_sub(4900)).to_be_bytes());
        assert_eq!(checksum::sum(&h), 0xffff);
        let mut g = h;
        assert!(translate(&s, 1, &mut g));
        assert_eq!(&g[4..8], &5900u32.to_be_bytes());
        assert_eq!(checksum::sum(&g), 0xffff);
    }
}
