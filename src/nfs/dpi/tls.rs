//! TLS (and its mail-port names), DTLS and QUIC: handshake records and long headers.

use super::{at, be16, be32, AppProto, Ctx, Detector, Scratch, Verdict};

pub(crate) const TLS: Detector = Detector {
    tcp: true,
    udp: false,
    names: &[AppProto::Tls],
    f: tls,
};

pub(crate) const DTLS: Detector = Detector {
    tcp: false,
    udp: true,
    names: &[AppProto::Dtls],
    f: dtls,
};

pub(crate) const QUIC: Detector = Detector {
    tcp: false,
    udp: true,
    names: &[AppProto::Quic],
    f: quic,
};

/// A record header of type handshake..application data with an SSL3/TLS version.
fn record(d: &[u8]) -> bool {
    matches!(at(d, 0), 0x14..=0x17) && at(d, 1) == 3 && at(d, 2) <= 4 && d.len() >= 5
}

fn tls(c: &Ctx, s: &mut Scratch, d: &[u8]) -> Verdict {
    if record(d) {
        // ClientHello / ServerHello / Certificate open a handshake.
        if at(d, 0) == 0x16 && matches!(at(d, 5), 1 | 2 | 11) {
            return Verdict::Match(AppProto::Tls);
        }
        // Picked up mid-stream: well-formed records (sane length) both ways, or two in
        // all (a capture that saw one direction only), as nDPI accepts application data.
        if be16(d, 3) <= 16384 + 2048 && be16(d, 3) > 0 {
            s.flags |= if c.from_client {
                Scratch::TLS_CLIENT
            } else {
                Scratch::TLS_SERVER
            };
            s.tls_records = s.tls_records.saturating_add(1);
            let both = Scratch::TLS_CLIENT | Scratch::TLS_SERVER;
            if s.flags & both == both || s.tls_records >= 2 {
                return Verdict::Match(AppProto::Tls);
            }
        }
        return Verdict::Maybe;
    }
    // SSLv2-framed ClientHello (old clients).
    if at(d, 0) & 0x80 != 0 && at(d, 2) == 1 && at(d, 3) == 3 && at(d, 4) <= 3 {
        return Verdict::Match(AppProto::Tls);
    }
    // Like nDPI, keep probing a few chunks (the handshake may follow other bytes, and
    // the port fallback stays open meanwhile).
    if c.n >= 3 {
        Verdict::No
    } else {
        Verdict::Maybe
    }
}

/// TLS on the implicit-TLS mail ports takes the mail protocol's name, as nDPI names it.
pub(crate) fn by_port(p: AppProto, cport: u16, sport: u16) -> AppProto {
    if p != AppProto::Tls {
        return p;
    }
    let on = |x: u16| cport == x || sport == x;
    if on(465) {
        AppProto::Smtps
    } else if on(993) {
        AppProto::Imaps
    } else if on(995) {
        AppProto::Pops
    } else {
        p
    }
}

/// The server name of a TLS ClientHello (or DTLS ClientHello) starting at `d`.
pub(crate) fn sni(d: &[u8]) -> Option<&[u8]> {
    // Record header: 5 bytes for TLS, 13 for DTLS (which adds 12 handshake bytes more).
    let (mut p, dtls) = if at(d, 0) == 0x16 && at(d, 1) == 0xfe {
        (13 + 12, true)
    } else if at(d, 0) == 0x16 && at(d, 1) == 3 {
        (5 + 4, false)
    } else {
        return None;
    };
    if at(d, if dtls { 13 } else { 5 }) != 1 {
        return None;
    }
    p += 2 + 32; // version, random
    p += 1 + at(d, p) as usize; // session id
    if dtls {
        p += 1 + at(d, p) as usize; // cookie
    }
    p += 2 + be16(d, p) as usize; // cipher suites
    p += 1 + at(d, p) as usize; // compression
    let end = (p + 2 + be16(d, p) as usize).min(d.len());
    p += 2;
    while p + 4 <= end {
        let (ty, len) = (be16(d, p), be16(d, p + 2) as usize);
        if ty == 0 {
            // server_name list: list length, type 0 (host_name), name length, name.
            let n = be16(d, p + 7) as usize;
            return d
                .get(p + 9..p + 9 + n)
                .filter(|s| s.is_ascii() && !s.is_empty());
        }
        p += 4 + len;
    }
    None
}

fn dtls(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    let version = be16(d, 1);
    if matches!(at(d, 0), 0x14..=0x17)
        && matches!(version, 0xfeff | 0xfefd | 0xfefc | 0x0100)
        && d.len() >= 13
        && be16(d, 11) as usize + 13 <= d.len()
    {
        return Verdict::Match(AppProto::Dtls);
    }
    if c.n == 0 {
        Verdict::No
    } else {
        Verdict::Maybe
    }
}

/// IETF QUIC v1/v2 and drafts, Google QUIC (Q0xx, T0xx) and mvfst long headers.
fn quic_version(v: u32) -> bool {
    matches!(v, 1 | 0x6b33_43cf | 0x709a_50c4)
        || v >> 8 == 0x00ff_0000
        || v & 0xffff_0000 == 0x5130_0000 // "Q0.."
        || v & 0xffff_0000 == 0x5430_0000 // "T0.."
        || v & 0xffff_fff0 == 0xface_b000
}

/// A reserved version that forces version negotiation (RFC 9000 §15): only believed in
/// a client Initial, which is padded to at least 1200 bytes.
fn quic_greased(v: u32, d: &[u8]) -> bool {
    v & 0x0f0f_0f0f == 0x0a0a_0a0a && d.len() >= 1200 && at(d, 0) & 0x40 != 0
}

fn quic(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    let b0 = at(d, 0);
    if b0 & 0x80 != 0 && d.len() >= 7 && (quic_version(be32(d, 1)) || quic_greased(be32(d, 1), d)) {
        return Verdict::Match(AppProto::Quic);
    }
    // Version negotiation (version 0) listing a version we know.
    if b0 & 0x80 != 0 && be32(d, 1) == 0 {
        let dcid = at(d, 5) as usize;
        let p = 6 + dcid;
        let p = p + 1 + at(d, p) as usize;
        if d.len() >= p + 4 && quic_version(be32(d, p)) {
            return Verdict::Match(AppProto::Quic);
        }
    }
    // Google QUIC's public header: flags with the version bit, 8-byte connection id,
    // then the version "Q0xx".
    if b0 & 0x80 == 0 && b0 & 0x09 == 0x09 && at(d, 9) == b'Q' && at(d, 10) == b'0' {
        return Verdict::Match(AppProto::Quic);
    }
    // Short-header packets (and Google QUIC without the version bit) carry nothing to
    // recognise: on 443 they are left to the port fallback, as nDPI does.
    if c.port(443) && b0 & 0x80 == 0 {
        return Verdict::Maybe;
    }
    if c.n == 0 && c.from_client {
        Verdict::No
    } else {
        Verdict::Maybe
    }
}
