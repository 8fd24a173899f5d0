//! Capture link types we read, and the number written for each.

use crate::packet::LinkKind;

/// The link kind for a pcap/pcapng link-type number, or None if unsupported.
pub fn link_from_pcap(linktype: u32) -> Option<LinkKind> {
    match linktype {
        1 => Some(LinkKind::Ethernet),
        // DLT_RAW has two numbers in the wild (12 on some BSDs, 14 on OpenBSD), plus
        // LINKTYPE_RAW 101 and the version-specific 228/229.
        12 | 14 | 101 | 228 | 229 => Some(LinkKind::RawIp),
        113 => Some(LinkKind::LinuxSll),
        276 => Some(LinkKind::LinuxSll2),
        _ => None,
    }
}

/// The canonical link-type number for a link kind.
pub fn pcap_linktype(link: LinkKind) -> u32 {
    match link {
        LinkKind::Ethernet => 1,
        LinkKind::RawIp => 101,
        LinkKind::LinuxSll => 113,
        LinkKind::LinuxSll2 => 276,
    }
}
