//! The `malformed` parameter of the filters (`ip_filter`, `firewall`): what to do with a
//! frame whose ethertype says IP but whose IP header is inconsistent (IPv4 with a version
//! other than 4, a header length below 5 words or past the frame's end; IPv6 with a
//! version other than 6).
//!
//! `drop` (the default) counts them as `malformed` whatever the rules: a filter should not
//! forward what no host will parse. `pass` hands them to the rules read as BPF reads them
//! (tcpdump never checks the version or the header length: addresses and protocol come
//! from fixed offsets, ports from `4 × IHL` however small), so decisions equal tcpdump's.
//! Frames too short for the fixed IP header (20 / 40 bytes) stay `malformed` either way:
//! BPF's verdict on them depends on which bytes each rule happens to read.

use super::params::{ParamDoc, ParamError, Params};
use crate::packet::{L3Kind, Layers, LinkKind};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Malformed {
    #[default]
    Drop,
    Pass,
}

/// Where BPF finds the network header of a frame [`Layers`] calls malformed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BpfView {
    /// IPv4 header at this offset (the whole fixed header is there).
    V4(usize),
    /// IPv6 header at this offset (the whole fixed header is there).
    V6(usize),
    /// Not IP to BPF (raw IP whose version is neither 4 nor 6).
    NotIp,
}

impl Malformed {
    pub const DOC: ParamDoc = ParamDoc {
        name: "malformed",
        ty: "\"drop\" | \"pass\"",
        default: "\"drop\"",
        doc: "frames with an IP ethertype but a bad version or header length: drop them (`malformed`), or pass them to the rules read as tcpdump reads them",
    };

    pub fn from_params(p: &mut Params) -> Result<Malformed, ParamError> {
        match p.table_str("malformed")? {
            None | Some("drop") => Ok(Malformed::Drop),
            Some("pass") => Ok(Malformed::Pass),
            Some(o) => Err(p.err(format!("`malformed` = \"{o}\": use \"drop\" or \"pass\""))),
        }
    }
}

/// How BPF reads a frame that `l` (its parsed layers) calls malformed; None when the
/// frame is too short for the fixed IP header (or for its link header).
#[inline(never)]
pub fn bpf_view(link: LinkKind, l: &Layers, d: &[u8]) -> Option<BpfView> {
    if l.l3 != L3Kind::Malformed {
        return None;
    }
    let o = l.l3_off as usize;
    let et = if link == LinkKind::RawIp {
        // DLT_RAW: BPF tells IPv4 from IPv6 by the version nibble.
        match d.first()? >> 4 {
            4 => 0x0800,
            6 => 0x86dd,
            _ => return Some(BpfView::NotIp),
        }
    } else {
        l.ethertype
    };
    match et {
        0x0800 if d.len() >= o + 20 => Some(BpfView::V4(o)),
        0x86dd if d.len() >= o + 40 => Some(BpfView::V6(o)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eth_v4(first: u8) -> Vec<u8> {
        let mut f = vec![0u8; 54];
        f[12] = 8;
        f[14] = first;
        f
    }

    #[test]
    fn bad_version_or_ihl_is_read_where_bpf_reads_it() {
        for first in [0x44, 0x55, 0x65, 0x40] {
            let f = eth_v4(first);
            let l = Layers::parse(LinkKind::Ethernet, &f);
            assert_eq!(l.l3, L3Kind::Malformed, "{first:#x}");
            assert_eq!(
                bpf_view(LinkKind::Ethernet, &l, &f),
                Some(BpfView::V4(14)),
                "{first:#x}"
            );
        }
        // Too short for 20 bytes of IP: no view.
        let f = &eth_v4(0x45)[..30];
        let l = Layers::parse(LinkKind::Ethernet, f);
        assert_eq!(bpf_view(LinkKind::Ethernet, &l, f), None);
        // Raw IP with version 5 is not IP to BPF.
        let raw = [0x55u8; 40];
        let l = Layers::parse(LinkKind::RawIp, &raw);
        assert_eq!(bpf_view(LinkKind::RawIp, &l, &raw), Some(BpfView::NotIp));
        // A well-formed frame has no view: the layers are used.
        let f = eth_v4(0x45);
        let l = Layers::parse(LinkKind::Ethernet, &f);
        assert_eq!(bpf_view(LinkKind::Ethernet, &l, &f), None);
    }
}
