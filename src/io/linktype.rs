//! Capture link types we read, and the number written for each.

use crate::packet::LinkKind;

/// The link kinds catena decodes, for error messages.
pub const SUPPORTED_LINKS: &str = "Ethernet, raw IPv4/IPv6, Linux cooked (SLL, SLL2)";

/// The link kind for a pcap/pcapng link-type number, or None if unsupported.
pub fn link_from_pcap(linktype: u32) -> Option<LinkKind> {
    // The top bits of a pcap header's link-type field may carry FCS information
    // (LT_FCS_DATAMASK); only the low bits name the link type.
    match linktype & 0x03FF_FFFF {
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

/// A human name for common link-type numbers (tcpdump's wording), so an "unsupported"
/// message says what the capture is rather than only a number.
pub fn linktype_name(linktype: u32) -> Option<&'static str> {
    Some(match linktype & 0x03FF_FFFF {
        0 => "BSD loopback, DLT_NULL",
        1 => "Ethernet",
        6 => "IEEE 802.5 Token Ring",
        8 => "SLIP",
        9 => "PPP",
        10 => "FDDI",
        12 | 14 | 101 => "raw IP",
        50 => "PPP in HDLC-like framing",
        51 => "PPPoE",
        104 => "Cisco HDLC",
        105 => "IEEE 802.11",
        107 => "Frame Relay",
        108 => "OpenBSD loopback",
        113 => "Linux cooked (SLL)",
        119 => "Prism 802.11",
        127 => "IEEE 802.11 radiotap",
        143 => "DOCSIS",
        147..=162 => "user-defined",
        163 => "AVS 802.11",
        187 => "Bluetooth HCI H4",
        189 => "Linux USB",
        192 => "PPI",
        195 => "IEEE 802.15.4",
        201 => "Bluetooth HCI H4 with pseudo-header",
        215 => "IEEE 802.15.4 without FCS",
        220 => "Linux USB (mmapped)",
        228 => "raw IPv4",
        229 => "raw IPv6",
        239 => "Linux netfilter NFLOG",
        249 => "USBPcap",
        252 => "Wireshark upper PDU",
        263 => "Bluetooth Low Energy link layer",
        276 => "Linux cooked v2 (SLL2)",
        _ => return None,
    })
}

/// "105 (IEEE 802.11)" or just "300" when the number has no known name.
pub fn describe_linktype(linktype: u32) -> String {
    match linktype_name(linktype) {
        Some(name) => format!("{linktype} ({name})"),
        None => linktype.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn supported_numbers_round_trip() {
        for kind in [
            LinkKind::Ethernet,
            LinkKind::RawIp,
            LinkKind::LinuxSll,
            LinkKind::LinuxSll2,
        ] {
            assert_eq!(link_from_pcap(pcap_linktype(kind)), Some(kind));
        }
        for raw in [12, 14, 101, 228, 229] {
            assert_eq!(link_from_pcap(raw), Some(LinkKind::RawIp));
        }
        assert_eq!(link_from_pcap(105), None);
        assert_eq!(link_from_pcap(0), None);
    }

    #[test]
    fn names() {
        assert_eq!(describe_linktype(105), "105 (IEEE 802.11)");
        assert_eq!(describe_linktype(60000), "60000");
    }
}
