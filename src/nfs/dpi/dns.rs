//! DNS and the protocols built on its message format: mDNS, LLMNR, NetBIOS name
//! service (plus NetBIOS datagrams and sessions), and DNSCrypt's certificate queries.

use super::{at, be16, find, starts, AppProto, Ctx, Detector, Scratch, Verdict};

pub(crate) const DNS: Detector = Detector {
    tcp: true,
    udp: true,
    names: &[AppProto::Dns, AppProto::Mdns, AppProto::Llmnr],
    f: dns,
};

pub(crate) const NETBIOS: Detector = Detector {
    tcp: true,
    udp: true,
    names: &[AppProto::NetBios],
    f: netbios,
};

pub(crate) const DNSCRYPT: Detector = Detector {
    tcp: true,
    udp: true,
    names: &[AppProto::DnsCrypt],
    f: dnscrypt,
};

/// A plausible DNS header and first question/answer name at the start of `d`.
fn message(d: &[u8]) -> bool {
    if d.len() < 12 {
        return false;
    }
    let flags = be16(d, 2);
    let (qd, an, ns, ar) = (be16(d, 4), be16(d, 6), be16(d, 8), be16(d, 10));
    let opcode = (flags >> 11) & 0xf;
    let response = flags & 0x8000 != 0;
    if opcode > 6 || qd > 64 || an > 256 || ns > 256 || ar > 256 {
        return false;
    }
    if !response && (qd == 0 && opcode == 0) {
        return false;
    }
    if qd == 0 && an == 0 && ns == 0 && ar == 0 {
        // An empty response (e.g. a refusal) is still DNS; an empty query is not.
        return response;
    }
    // The first name's labels must stay inside the message (or be a pointer).
    let mut p = 12;
    for _ in 0..64 {
        let l = at(d, p) as usize;
        if p >= d.len() {
            return false;
        }
        if l == 0 {
            return true;
        }
        if l & 0xc0 == 0xc0 {
            return true;
        }
        if l & 0xc0 != 0 {
            return false;
        }
        p += 1 + l;
    }
    false
}

fn dns(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // nDPI only parses DNS on its registered ports; so do we (the port is the
    // tie-breaker that keeps random binary data from passing as DNS).
    let proto = if c.port(5353) {
        AppProto::Mdns
    } else if c.port(5355) {
        AppProto::Llmnr
    } else if c.port(53) {
        AppProto::Dns
    } else {
        return Verdict::No;
    };
    let msg = if c.udp() {
        d
    } else {
        // DNS over TCP: a two-byte length first.
        d.get(2..).unwrap_or(&[])
    };
    if message(msg) {
        return Verdict::Match(proto);
    }
    // On its own port one odd message does not rule DNS out.
    if c.n >= 3 {
        Verdict::No
    } else {
        Verdict::Maybe
    }
}

fn netbios(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    if c.udp() {
        // Name service: DNS format, names of 32 encoded bytes.
        if c.port(137) && message(d) && (at(d, 12) == 32 || be16(d, 4) == 0) {
            return Verdict::Match(AppProto::NetBios);
        }
        // Datagram service: message type 0x10..0x16, source port 138 inside.
        if c.port(138) && matches!(at(d, 0), 0x10..=0x16) && be16(d, 8) == 138 {
            return Verdict::Match(AppProto::NetBios);
        }
    } else if c.port(139) {
        // Session service: request/positive/negative response/keep-alive with a length
        // that fits the segment.
        if matches!(at(d, 0), 0x81..=0x85) && at(d, 1) & 0xfe == 0 {
            return Verdict::Match(AppProto::NetBios);
        }
    }
    if c.n == 0 {
        Verdict::No
    } else {
        Verdict::Maybe
    }
}

fn dnscrypt(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // Version 1 client magic, or the certificate query "2.dnscrypt-cert.…" both
    // versions send to a resolver.
    if (d.len() >= 64 && starts(d, b"r6fnvWj8"))
        || (d.len() > 24 && find(&d[12..], b"\x012\x0ddnscrypt", 12) == Some(0))
    {
        return Verdict::Match(AppProto::DnsCrypt);
    }
    // Encrypted queries look random: the resolver's reply (its magic) decides.
    if c.from_client && c.n == 0 && d.len() >= 64 {
        return Verdict::Maybe;
    }
    if c.n >= 1 || !c.from_client {
        Verdict::No
    } else {
        Verdict::Maybe
    }
}
