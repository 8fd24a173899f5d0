//! The consolidated table's key: ingress port, directional 5-tuple and everything about
//! the header layout that an NF's decision or a rewrite's offsets depend on.

use std::hash::{Hash, Hasher};

use crate::flow::FlowKey;
use crate::packet::{Layers, LinkKind, Packet};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FpKey {
    pub flow: FlowKey,
    pub in_port: u16,
    /// ICMP/ICMPv6 type and code (errors and echo behave differently), else 0.
    pub variant: u16,
    pub l3_off: u16,
    pub l4_off: u16,
    /// [`Layers`] flags: fragment, later fragment, complete L4 header, Ethernet.
    pub lflags: u8,
    pub link: u8,
}

impl FpKey {
    pub const EMPTY: FpKey = FpKey {
        flow: FlowKey {
            src: [0; 16],
            dst: [0; 16],
            sport: 0,
            dport: 0,
            proto: 0,
            family: 0,
        },
        in_port: 0,
        variant: 0,
        l3_off: 0,
        l4_off: 0,
        lflags: 0,
        link: 0,
    };

    /// The key of a packet, or None when it is not IP (never consolidated).
    #[inline]
    pub fn of(p: &mut Packet) -> Option<FpKey> {
        let l = p.layers();
        let m = p.meta();
        let d = p.data();
        let flow = FlowKey::from_packet(&l, d)?;
        let t = l.l4_off as usize;
        let variant = if l.has_l4() && matches!(l.l4_proto, 1 | 58) && d.len() >= t + 2 {
            u16::from_be_bytes([d[t], d[t + 1]])
        } else {
            0
        };
        Some(FpKey {
            flow,
            in_port: m.in_port,
            variant,
            l3_off: l.l3_off,
            l4_off: if l.has_l4() { l.l4_off } else { 0 },
            lflags: l.flags,
            link: m.link as u8,
        })
    }

    /// Whether `l` and `link` describe the layout this key was made from.
    pub fn link_kind(&self) -> LinkKind {
        match self.link {
            1 => LinkKind::RawIp,
            2 => LinkKind::LinuxSll,
            3 => LinkKind::LinuxSll2,
            _ => LinkKind::Ethernet,
        }
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

impl Hash for FpKey {
    #[inline]
    fn hash<H: Hasher>(&self, h: &mut H) {
        let k = &self.flow;
        h.write_u128(u128::from_ne_bytes(k.src));
        h.write_u128(u128::from_ne_bytes(k.dst));
        h.write_u64(
            k.sport as u64
                | (k.dport as u64) << 16
                | (k.proto as u64) << 32
                | (k.family as u64) << 40
                | (self.lflags as u64) << 48
                | (self.link as u64) << 56,
        );
        h.write_u64(
            self.in_port as u64
                | (self.variant as u64) << 16
                | (self.l3_off as u64) << 32
                | (self.l4_off as u64) << 48,
        );
    }
}
