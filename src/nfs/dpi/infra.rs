//! Network infrastructure services: NTP, DHCP, DHCPv6, SNMP, Syslog, Kerberos, LDAP,
//! TFTP, RADIUS, SLP, BGP, CoAP.

use super::{at, be16, be32, starts_ci, AppProto, Ctx, Detector, Scratch, Verdict};

macro_rules! detector {
    ($name:ident, $tcp:expr, $udp:expr, $proto:ident, $f:ident) => {
        pub(crate) const $name: Detector = Detector {
            tcp: $tcp,
            udp: $udp,
            names: &[AppProto::$proto],
            f: $f,
        };
    };
}

detector!(NTP, false, true, Ntp, ntp);
detector!(DHCP, false, true, Dhcp, dhcp);
detector!(DHCPV6, false, true, Dhcpv6, dhcpv6);
detector!(SNMP, false, true, Snmp, snmp);
detector!(SYSLOG, true, true, Syslog, syslog);
detector!(KERBEROS, true, true, Kerberos, kerberos);
detector!(LDAP, true, true, Ldap, ldap);
detector!(TFTP, false, true, Tftp, tftp);
detector!(RADIUS, false, true, Radius, radius);
detector!(SLP, true, true, Slp, slp);
detector!(BGP, true, false, Bgp, bgp);
detector!(COAP, false, true, Coap, coap);

fn first_no(c: &Ctx) -> Verdict {
    if c.n == 0 {
        Verdict::No
    } else {
        Verdict::Maybe
    }
}

fn ntp(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // The first byte (leap, version 1..4, mode) is all NTP has; nDPI also wants 123.
    if !c.port(123) {
        return Verdict::No;
    }
    let (version, mode) = ((at(d, 0) >> 3) & 7, at(d, 0) & 7);
    let ok = (1..=4).contains(&version)
        && ((mode != 0 && mode < 6 && d.len() >= 48) || (matches!(mode, 6 | 7) && d.len() >= 8));
    if ok {
        Verdict::Match(AppProto::Ntp)
    } else {
        first_no(c)
    }
}

fn dhcp(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // BOOTP op 1/2 and the DHCP magic cookie after the fixed 236 bytes.
    if matches!(at(d, 0), 1 | 2) && d.len() >= 240 && be32(d, 236) == 0x6382_5363 {
        return Verdict::Match(AppProto::Dhcp);
    }
    first_no(c)
}

fn dhcpv6(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // Client/server ports 546/547 and a message type of RFC 8415.
    if (c.port(546) || c.port(547)) && matches!(at(d, 0), 1..=13) && d.len() >= 4 {
        return Verdict::Match(AppProto::Dhcpv6);
    }
    Verdict::No
}

/// A BER SEQUENCE header at the start of `d`: the offset of its contents.
fn ber_seq(d: &[u8]) -> Option<usize> {
    if at(d, 0) != 0x30 {
        return None;
    }
    let l = at(d, 1);
    match l {
        0..=0x7f => Some(2),
        0x81 => Some(3),
        0x82 => Some(4),
        0x83 => Some(5),
        _ => None,
    }
}

fn snmp(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // SEQUENCE { INTEGER version (0, 1 or 3), … }; v1/v2c go on with the community string.
    if let Some(p) = ber_seq(d) {
        let v = at(d, p + 2);
        if at(d, p) == 2 && at(d, p + 1) == 1 && matches!(v, 0 | 1 | 3) {
            let next = at(d, p + 3);
            if (v < 3 && next == 4) || (v == 3 && next == 0x30) {
                return Verdict::Match(AppProto::Snmp);
            }
        }
    }
    first_no(c)
}

fn syslog(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // "<PRI>" with PRI ≤ 191, then text.
    if at(d, 0) == b'<' {
        let mut p = 1;
        let mut pri = 0u32;
        while p < 5 && at(d, p).is_ascii_digit() {
            pri = pri * 10 + u32::from(at(d, p) - b'0');
            p += 1;
        }
        if p > 1 && p < 5 && at(d, p) == b'>' && pri <= 191 && d.len() > p + 2 {
            let next = at(d, p + 1);
            if next.is_ascii_alphanumeric() || next == b' ' {
                return Verdict::Match(AppProto::Syslog);
            }
        }
    }
    first_no(c)
}

fn kerberos(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // KDC messages: [APPLICATION 10..13] AS/TGS request/reply, [30] error. The tags are
    // one byte, so the port (88) breaks the tie.
    if !c.port(88) {
        return Verdict::No;
    }
    let m = if c.udp() {
        d
    } else {
        d.get(4..).unwrap_or(&[])
    };
    if matches!(at(m, 0), 0x6a..=0x6d | 0x7e) && matches!(at(m, 1), 0x81..=0x84 | 0x10..=0x7f) {
        return Verdict::Match(AppProto::Kerberos);
    }
    // A request can span segments (the first one may be a middle piece): wait for the
    // reply before ruling Kerberos out on its own port.
    if c.n >= 2 {
        Verdict::No
    } else {
        Verdict::Maybe
    }
}

fn ldap(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // LDAPMessage: SEQUENCE { INTEGER messageID, [APPLICATION n] protocolOp }.
    if let Some(p) = ber_seq(d) {
        let idlen = at(d, p + 1) as usize;
        let op = at(d, p + 2 + idlen);
        if at(d, p) == 2 && (1..=4).contains(&idlen) && matches!(op, 0x60..=0x79 | 0x42 | 0x4a) {
            return Verdict::Match(AppProto::Ldap);
        }
    }
    first_no(c)
}

fn tftp(c: &Ctx, s: &mut Scratch, d: &[u8]) -> Verdict {
    match be16(d, 0) {
        // Read/write request: filename NUL mode NUL.
        1 | 2 if d.len() > 4 => {
            let name_end = d[2..].iter().position(|&b| b == 0).map(|p| p + 3);
            if let Some(m) = name_end {
                let mode = &d[m.min(d.len())..];
                if starts_ci(mode, b"octet\0")
                    || starts_ci(mode, b"netascii\0")
                    || starts_ci(mode, b"mail\0")
                {
                    return Verdict::Match(AppProto::Tftp);
                }
            }
            first_no(c)
        }
        // Data and acks of a transfer whose request went to port 69 on another flow:
        // want a few in a row.
        3 if d.len() <= 516 + 4 => hit(s),
        4 if d.len() == 4 => hit(s),
        _ => first_no(c),
    }
}

fn hit(s: &mut Scratch) -> Verdict {
    s.tftp += 1;
    if s.tftp >= 3 {
        Verdict::Match(AppProto::Tftp)
    } else {
        Verdict::Maybe
    }
}

fn radius(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    let port = [1812, 1813, 1645, 1646, 3799].iter().any(|&p| c.port(p));
    if port
        && matches!(at(d, 0), 1..=5 | 11..=13 | 40..=45)
        && be16(d, 2) as usize == d.len()
        && d.len() >= 20
    {
        return Verdict::Match(AppProto::Radius);
    }
    first_no(c)
}

fn slp(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    let func = at(d, 1);
    let ok = match at(d, 0) {
        // v2: 24-bit length, then flags, next-extension offset, xid, language tag.
        2 => {
            let len = (u32::from(at(d, 2)) << 16 | u32::from(be16(d, 3))) as usize;
            d.len() >= 14 && len == d.len()
        }
        // v1: 16-bit length, flags, dialect, language code.
        1 => d.len() >= 12 && be16(d, 2) as usize == d.len(),
        _ => false,
    };
    if ok && (1..=11).contains(&func) {
        return Verdict::Match(AppProto::Slp);
    }
    first_no(c)
}

fn bgp(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    if d.len() >= 19 && d[..16].iter().all(|&b| b == 0xff) && matches!(at(d, 18), 1..=5) {
        return Verdict::Match(AppProto::Bgp);
    }
    first_no(c)
}

fn coap(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // Version 1, token length ≤ 8, a request/response code class; on 5683/5684.
    let (ver, tkl, class) = (at(d, 0) >> 6, at(d, 0) & 0xf, at(d, 1) >> 5);
    if (c.port(5683) || c.port(5684)) && ver == 1 && tkl <= 8 && matches!(class, 0 | 2 | 4 | 5) {
        return Verdict::Match(AppProto::Coap);
    }
    Verdict::No
}
