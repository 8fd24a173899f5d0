//! Zero-copy typed views over header bytes, one file per protocol (smoltcp's `wire` is the
//! model). Each view wraps any `T: AsRef<[u8]>` (`&[u8]`, `&mut [u8]`, `Vec<u8>`, …):
//!
//! - `new_unchecked(buf)` only wraps; getters then index at fixed offsets and panic if the
//!   buffer is shorter than the fixed header (like slice indexing), nothing more.
//! - `new_checked(buf)` validates lengths (and version / header-length fields) so that every
//!   getter and `payload()` is in bounds afterwards; it never panics on any input.
//! - setters exist when `T: AsMut<[u8]>`; a setter named `*_update` also patches the
//!   header's checksum incrementally (RFC 1624) instead of requiring a full recompute.
//!
//! Field offsets live in a `field` module at the top of each file.

pub mod arp;
pub mod ethernet;
pub mod icmp;
pub mod icmpv6;
pub mod ipv4;
pub mod ipv6;
pub mod tcp;
pub mod udp;

pub use arp::Arp;
pub use ethernet::{Ethernet, L2Info, Vlan, VlanTag};
pub use icmp::Icmp;
pub use icmpv6::Icmpv6;
pub use ipv4::Ipv4;
pub use ipv6::{ExtWalk, FragInfo, Ipv6};
pub use tcp::Tcp;
pub use udp::Udp;

/// Why a buffer is not a valid header of the requested kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The buffer is shorter than the header (or than a length field says).
    #[error("truncated header")]
    Truncated,
    /// The IP version nibble is wrong for this view.
    #[error("bad IP version")]
    BadVersion,
    /// A header-length field is below the minimum.
    #[error("bad header length")]
    BadHeaderLen,
    /// A total/payload length field is inconsistent with the header length.
    #[error("bad length field")]
    BadLength,
    /// A hardware/protocol type this view does not decode (e.g. non Ethernet/IPv4 ARP).
    #[error("unsupported format")]
    Unsupported,
    /// More stacked VLAN tags or IPv6 extension headers than we are willing to walk.
    #[error("too many stacked headers")]
    TooManyHeaders,
}

/// Ethertypes.
pub mod ethertype {
    pub const IPV4: u16 = 0x0800;
    pub const ARP: u16 = 0x0806;
    /// 802.1Q customer tag.
    pub const VLAN: u16 = 0x8100;
    pub const IPV6: u16 = 0x86dd;
    /// 802.1ad service tag.
    pub const QINQ: u16 = 0x88a8;
    /// Pre-standard QinQ tag still seen in the wild.
    pub const QINQ_OLD: u16 = 0x9100;

    /// Is `et` one of the VLAN tag protocol identifiers we skip?
    #[inline]
    pub fn is_vlan(et: u16) -> bool {
        matches!(et, VLAN | QINQ | QINQ_OLD)
    }
}

/// IP protocol numbers / IPv6 next-header values.
pub mod ip_proto {
    pub const HOPOPT: u8 = 0;
    pub const ICMP: u8 = 1;
    pub const IPIP: u8 = 4;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    pub const IPV6: u8 = 41;
    pub const IPV6_ROUTE: u8 = 43;
    pub const IPV6_FRAG: u8 = 44;
    pub const GRE: u8 = 47;
    pub const ESP: u8 = 50;
    pub const AH: u8 = 51;
    pub const ICMPV6: u8 = 58;
    pub const IPV6_NONXT: u8 = 59;
    pub const IPV6_OPTS: u8 = 60;
    pub const SCTP: u8 = 132;
    pub const MOBILITY: u8 = 135;
    pub const HIP: u8 = 139;
    pub const SHIM6: u8 = 140;
}

// Big-endian accessors shared by the views. They index (so panic only when a view made
// with `new_unchecked` is too short, as documented above).
#[inline]
pub(crate) fn get16(b: &[u8], o: usize) -> u16 {
    u16::from_be_bytes([b[o], b[o + 1]])
}

#[inline]
pub(crate) fn get32(b: &[u8], o: usize) -> u32 {
    u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

#[inline]
pub(crate) fn set16(b: &mut [u8], o: usize, v: u16) {
    b[o..o + 2].copy_from_slice(&v.to_be_bytes());
}

#[inline]
pub(crate) fn set32(b: &mut [u8], o: usize, v: u32) {
    b[o..o + 4].copy_from_slice(&v.to_be_bytes());
}

#[inline]
pub(crate) fn arr<const N: usize>(b: &[u8], o: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[o..o + N]);
    a
}
