//! Flow keys: the 5-tuple of IPv4 and IPv6 packets, read from decoded header offsets.

use crate::packet::{L3Kind, Layers};

/// A 5-tuple. IPv4 addresses sit in the first 4 bytes of `src`/`dst` with the rest zero,
/// so one key type (and one table) serves both families.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowKey {
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    /// 4 or 6.
    pub family: u8,
}

impl FlowKey {
    /// The key of a packet whose headers were decoded into `l`; None for non-IP packets.
    /// Protocols without ports (and later fragments) get ports 0; ICMP echo uses the
    /// identifier as both ports so each ping session is its own flow.
    #[inline]
    pub fn from_packet(l: &Layers, d: &[u8]) -> Option<FlowKey> {
        let o = l.l3_off as usize;
        let mut k = FlowKey {
            src: [0; 16],
            dst: [0; 16],
            sport: 0,
            dport: 0,
            proto: l.l4_proto,
            family: 4,
        };
        match l.l3 {
            L3Kind::Ipv4 => {
                k.src[..4].copy_from_slice(d.get(o + 12..o + 16)?);
                k.dst[..4].copy_from_slice(d.get(o + 16..o + 20)?);
            }
            L3Kind::Ipv6 => {
                k.family = 6;
                k.src.copy_from_slice(d.get(o + 8..o + 24)?);
                k.dst.copy_from_slice(d.get(o + 24..o + 40)?);
            }
            _ => return None,
        }
        if l.has_l4() {
            // Slice patterns: one length check instead of one per byte.
            match (l.l4_proto, d.get(l.l4_off as usize..)) {
                (6 | 17 | 132, Some([s0, s1, d0, d1, ..])) => {
                    k.sport = u16::from_be_bytes([*s0, *s1]);
                    k.dport = u16::from_be_bytes([*d0, *d1]);
                }
                // Echo request/reply (ICMP 8/0, ICMPv6 128/129): the identifier.
                (1 | 58, Some([0 | 8 | 128 | 129, _, _, _, i0, i1, _, _, ..])) => {
                    k.sport = u16::from_be_bytes([*i0, *i1]);
                    k.dport = k.sport;
                }
                _ => {}
            }
        }
        Some(k)
    }

    /// The key of the reply direction.
    pub fn reversed(&self) -> FlowKey {
        FlowKey {
            src: self.dst,
            dst: self.src,
            sport: self.dport,
            dport: self.sport,
            ..*self
        }
    }

    /// The same key for both directions (the smaller endpoint first), for tables that
    /// keep one entry per connection.
    pub fn canonical(&self) -> FlowKey {
        let r = self.reversed();
        if (self.src, self.sport) <= (r.src, r.sport) {
            *self
        } else {
            r
        }
    }

    pub fn src_ip(&self) -> std::net::IpAddr {
        ip(self.family, &self.src)
    }

    pub fn dst_ip(&self) -> std::net::IpAddr {
        ip(self.family, &self.dst)
    }
}

fn ip(family: u8, b: &[u8; 16]) -> std::net::IpAddr {
    if family == 4 {
        std::net::IpAddr::from([b[0], b[1], b[2], b[3]])
    } else {
        std::net::IpAddr::from(*b)
    }
}

impl std::fmt::Display for FlowKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}:{} -> {}:{}",
            self.proto,
            self.src_ip(),
            self.sport,
            self.dst_ip(),
            self.dport
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::LinkKind;

    #[test]
    fn tcp_v4_key_and_reverse() {
        let mut b = vec![0u8; 54];
        b[12] = 8;
        b[14] = 0x45;
        b[23] = 6;
        b[26..30].copy_from_slice(&[10, 0, 0, 1]);
        b[30..34].copy_from_slice(&[10, 0, 0, 2]);
        b[34..38].copy_from_slice(&[0x30, 0x39, 0, 80]);
        let l = Layers::parse(LinkKind::Ethernet, &b);
        let k = FlowKey::from_packet(&l, &b).unwrap();
        assert_eq!(k.to_string(), "6 10.0.0.1:12345 -> 10.0.0.2:80");
        assert_eq!(k.reversed().reversed(), k);
        assert_eq!(k.canonical(), k.reversed().canonical());
    }

    #[test]
    fn non_ip_has_no_key() {
        let mut b = vec![0u8; 60];
        b[12..14].copy_from_slice(&[0x08, 0x06]);
        let l = Layers::parse(LinkKind::Ethernet, &b);
        assert!(FlowKey::from_packet(&l, &b).is_none());
    }
}
