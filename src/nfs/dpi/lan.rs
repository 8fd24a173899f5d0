//! LAN discovery and management datagrams: Canon BJNP, Ubiquiti discovery (UBNTAC2),
//! TP-Link smart-home (TPLINK_SHP), Cisco HSRP, NAT-PMP, Teredo, RMCP (IPMI), collectd.
//! Most are a few fixed bytes on a fixed port, so the port is part of the signature.

use super::{at, be16, starts, AppProto, Ctx, Detector, Scratch, Verdict};

macro_rules! detector {
    ($name:ident, $tcp:expr, $proto:ident, $f:ident) => {
        pub(crate) const $name: Detector = Detector {
            tcp: $tcp,
            udp: true,
            names: &[AppProto::$proto],
            f: $f,
        };
    };
}

detector!(BJNP, true, Bjnp, bjnp);
detector!(UBNTAC2, false, Ubntac2, ubntac2);
detector!(TPLINK_SHP, true, TplinkShp, tplink_shp);
detector!(HSRP, false, Hsrp, hsrp);
detector!(NAT_PMP, false, NatPmp, nat_pmp);
detector!(TEREDO, false, Teredo, teredo);
detector!(RMCP, false, Rmcp, rmcp);
detector!(COLLECTD, false, Collectd, collectd);

fn verdict(ok: bool, p: AppProto) -> Verdict {
    if ok {
        Verdict::Match(p)
    } else {
        Verdict::No
    }
}

fn bjnp(_: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // Canon printer discovery/scanning: a 4-byte magic, then type and code.
    let magic = [&b"BJNP"[..], b"BJNB", b"MFNP", b"BNJB"];
    verdict(
        d.len() >= 16 && magic.iter().any(|m| starts(d, m)),
        AppProto::Bjnp,
    )
}

fn ubntac2(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // Version 1/2, command, then a length covering the rest.
    verdict(
        c.port(10001) && matches!(at(d, 0), 1 | 2) && be16(d, 2) as usize + 4 == d.len(),
        AppProto::Ubntac2,
    )
}

fn tplink_shp(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // JSON "autokey"-XORed with 171: the first two bytes decode to `{"`. TCP adds a
    // 4-byte length.
    let m = if c.udp() {
        d
    } else {
        d.get(4..).unwrap_or(&[])
    };
    verdict(
        c.port(9999) && at(m, 0) ^ 171 == b'{' && at(m, 1) ^ at(m, 0) == b'"',
        AppProto::TplinkShp,
    )
}

fn hsrp(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // v0/v1 on 1985: version 0, op hello/coup/resign, 20 bytes. v2 (1985, or 2029 for
    // IPv6): TLVs whose first length fits.
    let v1 = c.port(1985) && at(d, 0) == 0 && at(d, 1) <= 2 && d.len() == 20;
    let v2 = (c.port(1985) || c.port(2029))
        && matches!(at(d, 0), 1..=4)
        && d.len() >= 6
        && at(d, 1) as usize + 2 <= d.len();
    verdict(v1 || v2, AppProto::Hsrp)
}

fn nat_pmp(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // Version 0; requests 0..2 (2 or 12 bytes), responses 128..130.
    let ok = (c.port(5351) || c.port(5350))
        && at(d, 0) == 0
        && match at(d, 1) {
            0 => d.len() == 2,
            1 | 2 => d.len() == 12,
            128..=130 => d.len() >= 8,
            _ => false,
        };
    verdict(ok, AppProto::NatPmp)
}

fn teredo(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // IPv6 in UDP on 3544, optionally behind an authentication (type 1) or origin
    // indication (type 0) header.
    let ipv6 = at(d, 0) >> 4 == 6 && d.len() >= 40;
    let hdr = matches!(be16(d, 0), 0 | 1) && d.len() >= 8;
    verdict(c.port(3544) && (ipv6 || hdr), AppProto::Teredo)
}

fn rmcp(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // Version 6, reserved 0, sequence, class ASF/IPMI/OEM.
    verdict(
        c.port(623)
            && at(d, 0) == 6
            && at(d, 1) == 0
            && matches!(at(d, 3) & 0x7f, 6..=8)
            && d.len() >= 4,
        AppProto::Rmcp,
    )
}

fn collectd(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // A sequence of parts (type, length ≥ 4) that exactly fills the datagram.
    let mut p = 0;
    let mut parts = 0;
    while p + 4 <= d.len() && parts < 256 {
        let (ty, len) = (be16(d, p), be16(d, p + 2) as usize);
        if ty > 0x0210 || len < 4 {
            break;
        }
        p += len;
        parts += 1;
    }
    verdict(
        c.port(25826) && parts > 0 && p == d.len(),
        AppProto::Collectd,
    )
}
