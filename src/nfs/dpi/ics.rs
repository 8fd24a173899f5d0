//! Industrial control: Modbus/TCP, DNP3, IEC 60870-5-104, Siemens S7comm, BACnet/IP.

use super::{at, be16, AppProto, Ctx, Detector, Scratch, Verdict};

pub(crate) const MODBUS: Detector = Detector {
    tcp: true,
    udp: false,
    names: &[AppProto::Modbus],
    f: modbus,
};

pub(crate) const DNP3: Detector = Detector {
    tcp: true,
    udp: true,
    names: &[AppProto::Dnp3],
    f: dnp3,
};

pub(crate) const IEC104: Detector = Detector {
    tcp: true,
    udp: false,
    names: &[AppProto::Iec104],
    f: iec104,
};

pub(crate) const S7COMM: Detector = Detector {
    tcp: true,
    udp: false,
    names: &[AppProto::S7comm],
    f: s7comm,
};

pub(crate) const BACNET: Detector = Detector {
    tcp: false,
    udp: true,
    names: &[AppProto::Bacnet],
    f: bacnet,
};

fn first_no(c: &Ctx) -> Verdict {
    if c.n == 0 {
        Verdict::No
    } else {
        Verdict::Maybe
    }
}

fn modbus(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // MBAP header: transaction, protocol 0, length of the rest, unit, function. The
    // header is so plain that nDPI also wants port 502; so do we.
    if !c.port(502) {
        return Verdict::No;
    }
    if d.len() >= 8 && be16(d, 2) == 0 && be16(d, 4) as usize + 6 == d.len() && at(d, 7) != 0 {
        return Verdict::Match(AppProto::Modbus);
    }
    first_no(c)
}

fn dnp3(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // Link-layer start bytes 0x0564 and a length of at least the header's 5.
    if d.len() >= 10 && at(d, 0) == 0x05 && at(d, 1) == 0x64 && at(d, 2) >= 5 {
        return Verdict::Match(AppProto::Dnp3);
    }
    first_no(c)
}

fn iec104(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // APCI: start byte 0x68, APDU length, four control bytes. U and S frames are exactly
    // 4 long; I frames carry an ASDU (type, qualifier, cause, address: ≥ 6 more bytes).
    let len = at(d, 1) as usize;
    let frame_ok = match at(d, 2) & 3 {
        1 | 3 => len == 4,
        _ => len >= 10,
    };
    if at(d, 0) == 0x68 && frame_ok && len + 2 <= d.len() {
        let next = len + 2;
        // Exactly one APDU, or another one right behind it; on 2404 a cut one will do.
        if next == d.len() || at(d, next) == 0x68 || c.port(2404) {
            return Verdict::Match(AppProto::Iec104);
        }
    }
    first_no(c)
}

fn s7comm(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // TPKT + COTP on ISO-TSAP (102); an S7 PDU (protocol id 0x32) in a COTP data TPDU.
    if !c.port(102) {
        return Verdict::No;
    }
    if at(d, 0) == 3 && at(d, 1) == 0 && be16(d, 2) as usize <= d.len() {
        if at(d, 5) == 0xf0 && at(d, 7) == 0x32 {
            return Verdict::Match(AppProto::S7comm);
        }
        return Verdict::Maybe;
    }
    first_no(c)
}

fn bacnet(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // BVLC: type 0x81, function 0..0x0c, length of the whole datagram.
    if at(d, 0) == 0x81 && at(d, 1) <= 0x0c && be16(d, 2) as usize == d.len() && d.len() >= 4 {
        return Verdict::Match(AppProto::Bacnet);
    }
    first_no(c)
}
