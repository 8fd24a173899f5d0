//! Voice and video: SIP and MGCP signalling, STUN/TURN, RTP and RTCP media, RTMP
//! streaming.

use super::{at, be16, be32, starts, AppProto, Ctx, Detector, Scratch, Verdict};

pub(crate) const SIP: Detector = Detector {
    tcp: true,
    udp: true,
    names: &[AppProto::Sip],
    f: sip,
};

pub(crate) const STUN: Detector = Detector {
    tcp: true,
    udp: true,
    names: &[AppProto::Stun, AppProto::Dtls],
    f: stun,
};

pub(crate) const MGCP: Detector = Detector {
    tcp: false,
    udp: true,
    names: &[AppProto::Mgcp],
    f: mgcp,
};

pub(crate) const RTMP: Detector = Detector {
    tcp: true,
    udp: false,
    names: &[AppProto::Rtmp],
    f: rtmp,
};

pub(crate) const RTP: Detector = Detector {
    tcp: false,
    udp: true,
    names: &[AppProto::Rtp, AppProto::Rtcp],
    f: rtp,
};

const SIP_METHODS: &[&[u8]] = &[
    b"INVITE ",
    b"REGISTER ",
    b"OPTIONS ",
    b"ACK ",
    b"BYE ",
    b"CANCEL ",
    b"NOTIFY ",
    b"SUBSCRIBE ",
    b"MESSAGE ",
    b"INFO ",
    b"PUBLISH ",
    b"REFER ",
    b"PRACK ",
    b"UPDATE ",
];

fn sip(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    if starts(d, b"SIP/2.0 ") {
        return Verdict::Match(AppProto::Sip);
    }
    if let Some(m) = SIP_METHODS.iter().find(|m| starts(d, m)) {
        let uri = &d[m.len()..];
        if starts(uri, b"sip:") || starts(uri, b"sips:") || starts(uri, b"tel:") {
            return Verdict::Match(AppProto::Sip);
        }
    }
    if (c.n == 0 && !c.port(5060)) || c.n > 3 {
        Verdict::No
    } else {
        Verdict::Maybe
    }
}

/// STUN message types of RFC 5389/5766/8656 (requests, indications, responses).
fn stun_type(t: u16) -> bool {
    let method = t & 0x3eef;
    t & 0xc000 == 0 && matches!(method, 0x001..=0x00c | 0x080 | 0x0801..=0x0803)
}

fn stun(c: &Ctx, s: &mut Scratch, d: &[u8]) -> Verdict {
    // WebRTC multiplexes DTLS on the STUN flow; nDPI then names the flow DTLS. So STUN
    // stays tentative for a few packets in case a DTLS handshake follows.
    if s.flags & Scratch::STUN_SEEN != 0 {
        if matches!(at(d, 0), 20..=23) && matches!(be16(d, 1), 0xfeff | 0xfefd) {
            return Verdict::Match(AppProto::Dtls);
        }
        return Verdict::Maybe;
    }
    let len = be16(d, 2) as usize;
    if d.len() >= 20 && len + 20 == d.len() && stun_type(be16(d, 0)) {
        if be32(d, 4) == 0x2112_a442 {
            s.flags |= Scratch::STUN_SEEN;
            return Verdict::Tentative(AppProto::Stun);
        }
        // Classic STUN (RFC 3489): no magic cookie, so want two such messages.
        if len.is_multiple_of(4) {
            s.stun += 1;
            return if s.stun >= 2 {
                s.flags |= Scratch::STUN_SEEN;
                Verdict::Tentative(AppProto::Stun)
            } else {
                Verdict::Maybe
            };
        }
    }
    if (c.n == 0 && s.stun == 0) || c.n > 4 {
        Verdict::No
    } else {
        Verdict::Maybe
    }
}

fn rtp(c: &Ctx, s: &mut Scratch, d: &[u8]) -> Verdict {
    if d.len() < 12 || at(d, 0) >> 6 != 2 {
        return if c.n == 0 && s.rtp_hits == 0 {
            Verdict::No
        } else {
            Verdict::Maybe
        };
    }
    let pt = at(d, 1);
    // RTCP sender/receiver report, SDES, BYE, APP with a length that fits.
    if (200..=204).contains(&pt) && (be16(d, 2) as usize + 1) * 4 <= d.len() {
        return Verdict::Match(AppProto::Rtcp);
    }
    let pt = pt & 0x7f;
    if !(pt <= 34 || (96..=127).contains(&pt)) {
        return Verdict::No;
    }
    // Two packets with the same SSRC make a stream.
    let ssrc = be32(d, 8);
    if s.rtp_hits > 0 && ssrc == s.rtp_ssrc {
        return Verdict::Match(AppProto::Rtp);
    }
    s.rtp_ssrc = ssrc;
    s.rtp_hits = 1;
    Verdict::Maybe
}

fn mgcp(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // A command verb, then "MGCP 1.0" on the same line; or a numeric response on
    // MGCP's ports.
    const VERBS: &[&[u8]] = &[
        b"EPCF ", b"CRCX ", b"MDCX ", b"DLCX ", b"RQNT ", b"NTFY ", b"AUEP ", b"AUCX ", b"RSIP ",
    ];
    let line = &d[..d.iter().position(|&b| b == b'\n').unwrap_or(d.len())];
    if VERBS.iter().any(|v| starts(d, v)) && super::find(line, b" MGCP ", 256).is_some() {
        return Verdict::Match(AppProto::Mgcp);
    }
    let code = d.len() > 4 && d[..3].iter().all(u8::is_ascii_digit) && at(d, 3) == b' ';
    if code && (c.port(2427) || c.port(2727)) {
        return Verdict::Match(AppProto::Mgcp);
    }
    if c.n == 0 {
        Verdict::No
    } else {
        Verdict::Maybe
    }
}

fn rtmp(c: &Ctx, s: &mut Scratch, d: &[u8]) -> Verdict {
    // Handshake: the client's C0 (version 3) with its 1536-byte C1, answered by the
    // server's S0 (version 3).
    if c.from_client && c.n == 0 && at(d, 0) == 3 && d.len() >= 1000 {
        s.flags |= Scratch::RTMP_C0;
        return Verdict::Maybe;
    }
    if !c.from_client && c.n == 0 && at(d, 0) == 3 && s.flags & Scratch::RTMP_C0 != 0 {
        return Verdict::Match(AppProto::Rtmp);
    }
    if c.n == 0 {
        Verdict::No
    } else {
        Verdict::Maybe
    }
}
