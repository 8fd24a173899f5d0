//! Remote access, proxies and tunnels: SSH, RDP, Telnet, VNC, SOCKS, OpenVPN,
//! WireGuard, IKE/IPSec.

use super::{at, be16, be32, starts, AppProto, Ctx, Detector, Scratch, Verdict};

pub(crate) const SSH: Detector = Detector {
    tcp: true,
    udp: false,
    names: &[AppProto::Ssh],
    f: ssh,
};

pub(crate) const RDP: Detector = Detector {
    tcp: true,
    udp: true,
    names: &[AppProto::Rdp],
    f: rdp,
};

pub(crate) const TELNET: Detector = Detector {
    tcp: true,
    udp: false,
    names: &[AppProto::Telnet],
    f: telnet,
};

pub(crate) const VNC: Detector = Detector {
    tcp: true,
    udp: false,
    names: &[AppProto::Vnc],
    f: vnc,
};

pub(crate) const OPENVPN: Detector = Detector {
    tcp: true,
    udp: true,
    names: &[AppProto::OpenVpn],
    f: openvpn,
};

pub(crate) const WIREGUARD: Detector = Detector {
    tcp: false,
    udp: true,
    names: &[AppProto::WireGuard],
    f: wireguard,
};

pub(crate) const SOCKS: Detector = Detector {
    tcp: true,
    udp: false,
    names: &[AppProto::Socks],
    f: socks,
};

pub(crate) const IKE: Detector = Detector {
    tcp: false,
    udp: true,
    names: &[AppProto::Ipsec],
    f: ike,
};

/// Rules the flow out on the first chunk of either direction, else waits.
fn first_no(c: &Ctx) -> Verdict {
    if c.n == 0 {
        Verdict::No
    } else {
        Verdict::Maybe
    }
}

fn ssh(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    if starts(d, b"SSH-") && (starts(&d[4..], b"2.0-") || starts(&d[4..], b"1.")) {
        return Verdict::Match(AppProto::Ssh);
    }
    first_no(c)
}

fn rdp(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    if c.udp() {
        // RDP-UDP (MS-RDPEUDP) SYN: no acknowledged sequence yet (0xffffffff), the SYN
        // flag set; on 3389, as nDPI checks.
        if c.port(3389) && d.len() >= 16 && be32(d, 0) == 0xffff_ffff && be16(d, 6) & 1 != 0 {
            return Verdict::Match(AppProto::Rdp);
        }
        return first_no(c);
    }
    // TPKT + X.224 connection request/confirm with zero references, as nDPI checks;
    // port 102 (ISO-TSAP) carries the same framing for S7comm and is left to it.
    let tpkt = at(d, 0) == 3 && at(d, 1) == 0 && be16(d, 2) as usize == d.len();
    if tpkt
        && !c.port(102)
        && d.len() > 10
        && at(d, 4) as usize == d.len() - 5
        && matches!(at(d, 5), 0xe0 | 0xd0)
        && be16(d, 6) == 0
    {
        return Verdict::Match(AppProto::Rdp);
    }
    first_no(c)
}

fn telnet(c: &Ctx, s: &mut Scratch, d: &[u8]) -> Verdict {
    // IAC followed by WILL/WONT/DO/DONT: option negotiation opens a Telnet session.
    if at(d, 0) == 0xff && matches!(at(d, 1), 0xfb..=0xfe) && d.len() >= 3 {
        s.telnet += 1;
        if s.telnet >= 2 || d.len() >= 6 && at(d, 3) == 0xff {
            return Verdict::Match(AppProto::Telnet);
        }
        return Verdict::Maybe;
    }
    if s.telnet > 0 {
        Verdict::Maybe
    } else {
        first_no(c)
    }
}

fn vnc(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    if starts(d, b"RFB 00") && d.len() >= 12 {
        return Verdict::Match(AppProto::Vnc);
    }
    first_no(c)
}

/// OpenVPN: a hard-reset control packet from the client, answered by the server's
/// hard reset. Both are needed, as a single byte says little.
fn openvpn(c: &Ctx, s: &mut Scratch, d: &[u8]) -> Verdict {
    let op = if c.udp() {
        at(d, 0)
    } else {
        if be16(d, 0) as usize != d.len().saturating_sub(2) {
            return first_no(c);
        }
        at(d, 2)
    };
    let body = if c.udp() {
        d.len()
    } else {
        d.len().saturating_sub(2)
    };
    let (opcode, key) = (op >> 3, op & 7);
    if key != 0 || !(14..=300).contains(&body) {
        return first_no(c);
    }
    let m = if c.udp() { d } else { &d[2..] };
    let sid = be32(m, 1);
    match (c.from_client, opcode) {
        (true, 1 | 7 | 10) if s.flags & Scratch::OPENVPN_RESET == 0 => {
            s.flags |= Scratch::OPENVPN_RESET;
            s.ovpn_sid = sid;
            Verdict::Maybe
        }
        (false, 2 | 8) if s.flags & Scratch::OPENVPN_RESET != 0 => {
            Verdict::Match(AppProto::OpenVpn)
        }
        // Seen one way only (asymmetric routing, NAT): the server's own hard reset, or
        // control/ack packets that carry the session id of the reset before them.
        (false, 2 | 8) if c.n == 0 => {
            s.flags |= Scratch::OPENVPN_RESET;
            s.ovpn_sid = sid;
            Verdict::Maybe
        }
        (_, 4 | 5) if s.flags & Scratch::OPENVPN_RESET != 0 && sid == s.ovpn_sid => {
            Verdict::Match(AppProto::OpenVpn)
        }
        _ if s.flags & Scratch::OPENVPN_RESET != 0 => Verdict::Maybe,
        _ => first_no(c),
    }
}

fn wireguard(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    if d.len() >= 32 && at(d, 1) == 0 && at(d, 2) == 0 && at(d, 3) == 0 {
        let ok = match at(d, 0) {
            1 => d.len() == 148,
            2 => d.len() == 92,
            3 => d.len() == 64,
            // Transport data: only after a handshake we saw, so wait.
            4 => return Verdict::Maybe,
            _ => false,
        };
        if ok {
            return Verdict::Match(AppProto::WireGuard);
        }
    }
    first_no(c)
}

fn ike(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // ISAKMP/IKE on 500, or on 4500 after the four-byte non-ESP marker.
    let m = if c.port(4500) && be32(d, 0) == 0 {
        &d[4.min(d.len())..]
    } else if c.port(500) || c.port(4500) {
        d
    } else {
        return Verdict::No;
    };
    let version = at(m, 17);
    if m.len() >= 28
        && matches!(version, 0x10 | 0x20)
        && matches!(at(m, 18), 1..=5 | 32..=37)
        && be32(m, 24) as usize == m.len()
    {
        return Verdict::Match(AppProto::Ipsec);
    }
    // ESP in UDP on 4500 (non-zero SPI) or a NAT keepalive.
    if c.port(4500) && (d.len() == 1 && at(d, 0) == 0xff || be32(d, 0) != 0 && d.len() >= 16) {
        return Verdict::Match(AppProto::Ipsec);
    }
    first_no(c)
}

fn socks(c: &Ctx, s: &mut Scratch, d: &[u8]) -> Verdict {
    // SOCKS5: greeting (5, n methods, the methods) answered by (5, chosen method).
    if c.from_client
        && c.n == 0
        && at(d, 0) == 5
        && (1..=9).contains(&at(d, 1))
        && d.len() == 2 + at(d, 1) as usize
    {
        s.flags |= Scratch::SOCKS5_HELLO;
        return Verdict::Maybe;
    }
    if !c.from_client
        && s.flags & Scratch::SOCKS5_HELLO != 0
        && d.len() == 2
        && at(d, 0) == 5
        && matches!(at(d, 1), 0..=2 | 0xff)
    {
        return Verdict::Match(AppProto::Socks);
    }
    // SOCKS4/4a: version 4, connect/bind, port, address, user id ending in NUL.
    if c.from_client
        && c.n == 0
        && at(d, 0) == 4
        && matches!(at(d, 1), 1 | 2)
        && d.len() >= 9
        && d.last() == Some(&0)
    {
        return Verdict::Match(AppProto::Socks);
    }
    first_no(c)
}
