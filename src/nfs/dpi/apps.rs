//! Applications with their own wire protocols: WhatsApp's chat transport, Discord voice,
//! QQ (OICQ), Spotify's LAN discovery, RakNet (game networking: set-up magic, connected
//! frame sets and acks), Tuya smart-home (TuyaLP), FIX (finance).

use super::{at, be16, be32, find, starts, AppProto, Ctx, Detector, Scratch, Verdict};

pub(crate) const WHATSAPP: Detector = Detector {
    tcp: true,
    udp: false,
    names: &[AppProto::WhatsApp],
    f: whatsapp,
};

pub(crate) const DISCORD: Detector = Detector {
    tcp: false,
    udp: true,
    names: &[AppProto::Discord],
    f: discord,
};

pub(crate) const OICQ: Detector = Detector {
    tcp: false,
    udp: true,
    names: &[AppProto::Oicq],
    f: oicq,
};

pub(crate) const SPOTIFY: Detector = Detector {
    tcp: false,
    udp: true,
    names: &[AppProto::Spotify],
    f: spotify,
};

pub(crate) const RAKNET: Detector = Detector {
    tcp: false,
    udp: true,
    names: &[AppProto::RakNet],
    f: raknet,
};

pub(crate) const TUYA: Detector = Detector {
    tcp: true,
    udp: true,
    names: &[AppProto::TuyaLp],
    f: tuya,
};

pub(crate) const FIX: Detector = Detector {
    tcp: true,
    udp: false,
    names: &[AppProto::Fix],
    f: fix,
};

fn first_no(c: &Ctx) -> Verdict {
    if c.n == 0 {
        Verdict::No
    } else {
        Verdict::Maybe
    }
}

fn whatsapp(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // The client's stream prologue: "ED" + version 0.1 (Noise), or "WA" + a version.
    if c.from_client
        && (starts(d, b"ED\x00\x01")
            || (starts(d, b"WA") && d.len() >= 4 && d[2] <= 6 && d[3] <= 6))
    {
        return Verdict::Match(AppProto::WhatsApp);
    }
    first_no(c)
}

fn discord(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // Voice: 8-byte keep-alives with the 0x1337cafe magic, or the 74-byte IP discovery
    // request/response (type 1/2, length 70).
    let ping = d.len() == 8 && be32(d, 0) == 0x1337_cafe;
    let discovery = d.len() == 74 && matches!(be16(d, 0), 1 | 2) && be16(d, 2) == 70;
    if ping || discovery {
        return Verdict::Match(AppProto::Discord);
    }
    first_no(c)
}

fn oicq(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // QQ's UDP messages: STX (0x02), version, command, sequence, …, ETX (0x03); on its
    // server ports 8000/4000, as nDPI wants.
    if (c.port(8000) || c.port(4000)) && d.len() >= 11 && at(d, 0) == 2 && d.last() == Some(&3) {
        return Verdict::Match(AppProto::Oicq);
    }
    first_no(c)
}

fn spotify(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    if starts(d, b"SpotUdp0") {
        return Verdict::Match(AppProto::Spotify);
    }
    first_no(c)
}

fn raknet(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // Offline (connection set-up and ping) messages carry a 16-byte magic near the start.
    const MAGIC: &[u8] = b"\x00\xff\xff\x00\xfe\xfe\xfe\xfe\xfd\xfd\xfd\xfd\x12\x34\x56\x78";
    if find(d, MAGIC, 40).is_some() || connected(d) {
        return Verdict::Match(AppProto::RakNet);
    }
    first_no(c)
}

/// A RakNet datagram of an open connection: an ACK/NAK whose records fill it exactly,
/// or a frame set whose frames (each header sized by its reliability) fill it exactly.
fn connected(d: &[u8]) -> bool {
    let mut p;
    match at(d, 0) {
        0xc0 | 0xa0 => {
            let n = be16(d, 1);
            p = 3;
            for _ in 0..n {
                p += if at(d, p) == 1 { 4 } else { 7 };
            }
            n > 0 && p == d.len()
        }
        0x80..=0x8d => {
            p = 4;
            let mut frames = 0;
            while p < d.len() && frames < 64 {
                let flags = at(d, p);
                let rel = flags >> 5;
                let bytes = (be16(d, p + 1) as usize).div_ceil(8);
                p += 3;
                if matches!(rel, 2 | 3 | 4 | 6 | 7) {
                    p += 3; // reliable message index
                }
                if matches!(rel, 1 | 4) {
                    p += 3; // sequence index
                }
                if matches!(rel, 1 | 3 | 4 | 7) {
                    p += 4; // order index and channel
                }
                if flags & 0x10 != 0 {
                    p += 10; // split count, id, index
                }
                if bytes == 0 {
                    return false;
                }
                p += bytes;
                frames += 1;
            }
            frames > 0 && p == d.len()
        }
        _ => false,
    }
}

fn tuya(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // Frames open with 0x000055aa and close with 0x0000aa55.
    if d.len() >= 24 && be32(d, 0) == 0x0000_55aa && be32(d, d.len() - 4) == 0x0000_aa55 {
        return Verdict::Match(AppProto::TuyaLp);
    }
    first_no(c)
}

fn fix(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // BeginString first: "8=FIX.4.x" / "8=FIXT.1.1", or the "8=O" form nDPI also takes.
    if starts(d, b"8=FIX") || starts(d, b"8=O\x019=") {
        return Verdict::Match(AppProto::Fix);
    }
    first_no(c)
}
