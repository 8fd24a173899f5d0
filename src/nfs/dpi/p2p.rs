//! Peer-to-peer and LAN discovery: BitTorrent (peer wire, DHT, uTP, UDP tracker),
//! Gnutella, Valve's Source engine queries, Dropbox LAN sync.

use super::{at, be32, find, le32, starts, AppProto, Ctx, Detector, Scratch, Verdict};

pub(crate) const BITTORRENT: Detector = Detector {
    tcp: true,
    udp: true,
    names: &[AppProto::BitTorrent],
    f: bittorrent,
};

pub(crate) const GNUTELLA: Detector = Detector {
    tcp: true,
    udp: true,
    names: &[AppProto::Gnutella],
    f: gnutella,
};

pub(crate) const SOURCE_ENGINE: Detector = Detector {
    tcp: false,
    udp: true,
    names: &[AppProto::SourceEngine],
    f: source_engine,
};

pub(crate) const DROPBOX: Detector = Detector {
    tcp: false,
    udp: true,
    names: &[AppProto::Dropbox],
    f: dropbox,
};

fn first_no(c: &Ctx) -> Verdict {
    if c.n == 0 {
        Verdict::No
    } else {
        Verdict::Maybe
    }
}

fn bittorrent(c: &Ctx, s: &mut Scratch, d: &[u8]) -> Verdict {
    // Peer wire handshake; local service discovery multicast.
    if starts(d, b"\x13BitTorrent protocol") || starts(d, b"BT-SEARCH * HTTP/1.1") {
        return Verdict::Match(AppProto::BitTorrent);
    }
    if c.udp() {
        // DHT (bencoded KRPC: a dict with a transaction id and a type).
        if starts(d, b"d1:")
            && (find(d, b"1:y1:", 512).is_some() || find(d, b"2:id20:", 64).is_some())
        {
            return Verdict::Match(AppProto::BitTorrent);
        }
        // UDP tracker connect: the protocol's magic connection id.
        if d.len() >= 16 && be32(d, 0) == 0x417 && be32(d, 4) == 0x2710_1980 {
            return Verdict::Match(AppProto::BitTorrent);
        }
        // uTP: version 1, a known type, extension 0..2; a SYN then any reply.
        let (ty, ver, ext) = (at(d, 0) >> 4, at(d, 0) & 0xf, at(d, 1));
        if ver == 1 && ty <= 4 && ext <= 2 && d.len() >= 20 {
            if ty == 4 {
                s.flags |= Scratch::UTP_SYN;
                return Verdict::Maybe;
            }
            if s.flags & Scratch::UTP_SYN != 0 && !c.from_client {
                return Verdict::Match(AppProto::BitTorrent);
            }
            return Verdict::Maybe;
        }
    }
    first_no(c)
}

fn gnutella(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    if starts(d, b"GNUTELLA CONNECT/") || starts(d, b"GNUTELLA/0.6") || starts(d, b"GIV ") {
        return Verdict::Match(AppProto::Gnutella);
    }
    // Gnutella UDP: the "GND" header of the UDP connection service.
    if c.udp() && starts(d, b"GND") && d.len() >= 8 {
        return Verdict::Match(AppProto::Gnutella);
    }
    // A descriptor header (GUID, type, TTL, hops, little-endian payload length) whose
    // length is exactly the rest of the datagram.
    if c.udp()
        && d.len() >= 23
        && le32(d, 19) as usize + 23 == d.len()
        && u16::from(at(d, 17)) + u16::from(at(d, 18)) <= 16
    {
        return Verdict::Match(AppProto::Gnutella);
    }
    first_no(c)
}

fn source_engine(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    if starts(d, b"\xff\xff\xff\xffTSource Engine Query") {
        return Verdict::Match(AppProto::SourceEngine);
    }
    first_no(c)
}

fn dropbox(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // LAN sync discovery: JSON broadcasts on 17500.
    if c.port(17500) && find(d, b"\"host_int\"", 256).is_some() {
        return Verdict::Match(AppProto::Dropbox);
    }
    Verdict::No
}
