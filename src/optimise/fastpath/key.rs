//! The consolidated table's key: ingress port, directional 5-tuple and everything about
//! the header layout that an NF's decision or a rewrite's offsets depend on. Packed into
//! six words straight from the packet, so a lookup hashes and compares six integers.

use crate::packet::{L3Kind, Layers, LinkKind, Packet};

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
        Self::plain(p).or_else(|| Self::parsed(p))
    }

    /// Untagged Ethernet / IPv4 without options or fragmentation / complete TCP or UDP
    /// header, straight from the bytes: the same key [`parsed`](Self::parsed) gives (a
    /// test checks it on every packet of the datasets), without a header walk.
    #[inline(always)]
    pub fn plain(p: &Packet) -> Option<FpKey> {
        let m = p.meta();
        let d = p.data();
        if m.link != LinkKind::Ethernet || d.len() < 42 {
            return None;
        }
        let proto = d[23];
        let need = match proto {
            17 => 42,
            6 => 54,
            _ => return None,
        };
        if u16::from_be_bytes([d[12], d[13]]) != 0x0800
            || d[14] != 0x45
            || u16::from_be_bytes([d[20], d[21]]) & 0x3fff != 0
            || d.len() < need
            // The transport header must lie inside the datagram, as `Layers` judges it
            // (not in the padding past a short total length; 0 is the captured length).
            || (1..need - 14).contains(&usize::from(u16::from_be_bytes([d[16], d[17]])))
        {
            return None;
        }
        let a = |i: usize| u64::from(u32::from_be_bytes([d[i], d[i + 1], d[i + 2], d[i + 3]]));
        // Both ports in one load, source in the low half as `parsed` packs them.
        let ports = u32::from_be_bytes([d[34], d[35], d[36], d[37]]);
        let ports = u64::from(ports.rotate_left(16));
        const FLAGS: u64 = (Layers::ETHERNET | Layers::L4_COMPLETE) as u64;
        Some(FpKey {
            addrs: [a(26), 0, a(30), 0],
            ports: ports | (proto as u64) << 32 | 4 << 40 | FLAGS << 48,
            place: m.in_port as u64 | 14 << 32 | 34 << 48,
        })
    }

    /// The key from the decoded layers (any link type, tags, options, IPv6, ICMP).
    #[inline(never)]
    pub fn parsed(p: &mut Packet) -> Option<FpKey> {
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
        if Self::cut_short(&l, d) {
            return None;
        }
        let (mut sport, mut dport, mut variant) = (0u64, 0u64, 0u64);
        if l.has_l4() {
            let r = |i: usize| u64::from(u16::from_be_bytes([d[t + i], d[t + i + 1]]));
            match l.l4_proto {
                6 | 17 | 132 => (sport, dport) = (r(0), r(2)),
                1 | 58 if d.len() >= t + 2 => {
                    variant = r(0);
                    if usize::from(l.l3_end) >= t + 8 && matches!(d[t], 0 | 8 | 128 | 129) {
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

    /// A transport header the capture cut short (header-only snaplens: 38-byte frames,
    /// tagged TCP at 54 bytes): the NFs still read whatever ports, flags or ICMP fields
    /// are there, but the key could not hold the same fields, so one verdict would be
    /// applied to packets the NFs tell apart. Such packets are never consolidated (they
    /// take the whole chain); later fragments, which carry no transport header at all,
    /// are keyed as the NFs see them (no ports).
    #[inline]
    fn cut_short(l: &Layers, d: &[u8]) -> bool {
        if l.is_later_fragment() {
            return false;
        }
        let t = l.l4_off as usize;
        match l.l4_proto {
            6 | 17 | 132 => !l.has_l4(),
            // The key holds an echo's identifier, which needs 8 bytes.
            1 | 58 => {
                !l.has_l4() || matches!(d[t], 0 | 8 | 128 | 129) && usize::from(l.l3_end) < t + 8
            }
            _ => false,
        }
    }

    /// A distinct key per `n`, for the table's tests.
    #[cfg(test)]
    pub fn numbered(n: u64) -> FpKey {
        FpKey {
            addrs: [n, 0, !n, 0],
            ports: 6 << 32,
            place: 0,
        }
    }

    /// The six words, for hashing.
    #[inline]
    pub fn words(&self) -> [u64; 6] {
        let [a, b, c, d] = self.addrs;
        [a, b, c, d, self.ports, self.place]
    }

    /// IP protocol (or IPv6 final next header).
    #[inline]
    pub fn proto(&self) -> u8 {
        (self.ports >> 32) as u8
    }

    /// The layout flags of [`Layers`] (fragment, later fragment, complete L4, Ethernet).
    #[inline]
    pub fn layer_flags(&self) -> u8 {
        (self.ports >> 48) as u8
    }

    /// Offset of the transport header, 0 when it is not complete.
    #[inline]
    pub fn l4_off(&self) -> usize {
        (self.place >> 48) as usize
    }

    /// TCP flags with NS (0 when not TCP with a complete header): from the bytes at the
    /// offset the key pins, so a hit needs no header walk.
    #[inline]
    pub fn tcp_flags(&self, d: &[u8]) -> u16 {
        let o = self.l4_off() + 12;
        if self.proto() == 6 && self.layer_flags() & Layers::L4_COMPLETE != 0 && d.len() >= o + 2 {
            u16::from_be_bytes([d[o], d[o + 1]]) & 0x1ff
        } else {
            0
        }
    }

    /// TCP with FIN or RST: such packets end their flow's entry and take the slow path.
    #[inline]
    pub fn ends_flow(&self, d: &[u8]) -> bool {
        self.tcp_flags(d) & 0x05 != 0
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
