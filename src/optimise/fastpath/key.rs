//! The consolidated table's key: ingress port, directional 5-tuple and everything about
//! the header layout that an NF's decision or a rewrite's offsets depend on. Packed into
//! six words straight from the packet, so a lookup hashes and compares six integers.

use crate::packet::{L3Kind, Layers, Packet};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FpKey {
    /// Source and destination address (IPv4 in the first 4 bytes of each 16).
    addrs: [u64; 4],
    /// Ports (ICMP echo: the identifier twice, as `FlowKey`), protocol, family, layout
    /// flags (fragment, later fragment, complete L4 header, Ethernet), link type.
    ports: u64,
    /// Ingress port, ICMP type and code, L3 and L4 offsets.
    place: u64,
}

impl FpKey {
    pub const EMPTY: FpKey = FpKey {
        addrs: [0; 4],
        ports: 0,
        place: 0,
    };

    /// The key of a packet, or None when it is not IP (never consolidated).
    #[inline]
    pub fn of(p: &mut Packet) -> Option<FpKey> {
        let l = p.layers();
        let m = p.meta();
        let d = p.data();
        let o = l.l3_off as usize;
        let w = |i: usize| u64::from_be_bytes(d[i..i + 8].try_into().unwrap_or([0; 8]));
        let (addrs, family) = match l.l3 {
            L3Kind::Ipv4 if d.len() >= o + 20 => {
                let a =
                    |i: usize| u64::from(u32::from_be_bytes([d[i], d[i + 1], d[i + 2], d[i + 3]]));
                ([a(o + 12), 0, a(o + 16), 0], 4u64)
            }
            L3Kind::Ipv6 if d.len() >= o + 40 => ([w(o + 8), w(o + 16), w(o + 24), w(o + 32)], 6),
            _ => return None,
        };
        let t = l.l4_off as usize;
        let (mut sport, mut dport, mut variant) = (0u64, 0u64, 0u64);
        if l.has_l4() {
            let r = |i: usize| u64::from(u16::from_be_bytes([d[t + i], d[t + i + 1]]));
            match l.l4_proto {
                6 | 17 | 132 => (sport, dport) = (r(0), r(2)),
                1 | 58 if d.len() >= t + 2 => {
                    variant = r(0);
                    if d.len() >= t + 8 && matches!(d[t], 0 | 8 | 128 | 129) {
                        (sport, dport) = (r(4), r(4));
                    }
                }
                _ => {}
            }
        }
        let l4_off = if l.has_l4() { l.l4_off as u64 } else { 0 };
        Some(FpKey {
            addrs,
            ports: sport
                | dport << 16
                | (l.l4_proto as u64) << 32
                | family << 40
                | (l.flags as u64) << 48
                | (m.link as u64) << 56,
            place: m.in_port as u64 | variant << 16 | (l.l3_off as u64) << 32 | l4_off << 48,
        })
    }
}

/// TCP packets with FIN or RST end their flow's entry and take the slow path.
#[inline]
pub fn ends_flow(l: &Layers, d: &[u8]) -> bool {
    l.l4_proto == 6 && l.has_l4() && d.get(l.l4_off as usize + 13).is_some_and(|f| f & 0x05 != 0)
}

/// TCP flags with NS, as the flow monitor counts them (0 when not TCP).
#[inline]
pub fn tcp_flags(l: &Layers, d: &[u8]) -> u16 {
    let o = l.l4_off as usize + 12;
    if l.l4_proto == 6 && l.has_l4() && d.len() >= o + 2 {
        u16::from_be_bytes([d[o], d[o + 1]]) & 0x1ff
    } else {
        0
    }
}

impl std::hash::Hash for FpKey {
    /// Word by word: a derived hash feeds the address array as a byte slice, which
    /// costs several times as much.
    #[inline]
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        for w in self.addrs {
            h.write_u64(w);
        }
        h.write_u64(self.ports);
        h.write_u64(self.place);
    }
}
