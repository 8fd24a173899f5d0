//! Address rewriting for the load balancers: an IPv4 or IPv6 source or destination
//! address replaced in place, with the IPv4 header checksum and the TCP checksum (whose
//! pseudo header covers the addresses) patched incrementally (RFC 1624).

use std::net::IpAddr;

use crate::packet::checksum::update_bytes;
use crate::packet::{L3Kind, Packet};

/// Which address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Src,
    Dst,
}

/// Sets the packet's source or destination address to `to` (same family as the packet);
/// false when the packet is not TCP over that family or is cut short.
pub fn set_addr(p: &mut Packet, side: Side, to: IpAddr) -> bool {
    let l = p.layers();
    let (l3, l4) = (l.l3_off as usize, l.l4_off as usize);
    if l.l4_proto != 6 || !l.has_l4() {
        return false;
    }
    let d = p.data_mut();
    let tc = l4 + 16;
    if d.len() < tc + 2 {
        return false;
    }
    match (l.l3, to) {
        (L3Kind::Ipv4, IpAddr::V4(a)) => {
            let at = l3 + if side == Side::Src { 12 } else { 16 };
            let new = a.octets();
            let old: [u8; 4] = d[at..at + 4].try_into().expect("4 bytes");
            let ic = u16::from_be_bytes([d[l3 + 10], d[l3 + 11]]);
            let ic = update_bytes(ic, &old, &new);
            d[l3 + 10..l3 + 12].copy_from_slice(&ic.to_be_bytes());
            patch_tcp(d, tc, &old, &new);
            d[at..at + 4].copy_from_slice(&new);
            true
        }
        (L3Kind::Ipv6, IpAddr::V6(a)) => {
            let at = l3 + if side == Side::Src { 8 } else { 24 };
            let new = a.octets();
            let old: [u8; 16] = d[at..at + 16].try_into().expect("16 bytes");
            patch_tcp(d, tc, &old, &new);
            d[at..at + 16].copy_from_slice(&new);
            true
        }
        _ => false,
    }
}

fn patch_tcp(d: &mut [u8], tc: usize, old: &[u8], new: &[u8]) {
    let c = u16::from_be_bytes([d[tc], d[tc + 1]]);
    let c = update_bytes(c, old, new);
    d[tc..tc + 2].copy_from_slice(&c.to_be_bytes());
}

/// The packet's address on `side`, if it is IPv4 or IPv6.
pub fn addr(p: &mut Packet, side: Side) -> Option<IpAddr> {
    let l = p.layers();
    let o = l.l3_off as usize;
    let d = p.data();
    match l.l3 {
        L3Kind::Ipv4 => {
            let at = o + if side == Side::Src { 12 } else { 16 };
            let b: [u8; 4] = d.get(at..at + 4)?.try_into().ok()?;
            Some(IpAddr::from(b))
        }
        L3Kind::Ipv6 => {
            let at = o + if side == Side::Src { 8 } else { 24 };
            let b: [u8; 16] = d.get(at..at + 16)?.try_into().ok()?;
            Some(IpAddr::from(b))
        }
        _ => None,
    }
}
