//! Messaging and monitoring agents: MQTT, IRC, XMPP (Jabber), Zabbix.

use super::{at, find, starts, AppProto, Ctx, Detector, Scratch, Verdict};

pub(crate) const MQTT: Detector = Detector {
    tcp: true,
    udp: false,
    names: &[AppProto::Mqtt],
    f: mqtt,
};

pub(crate) const IRC: Detector = Detector {
    tcp: true,
    udp: false,
    names: &[AppProto::Irc],
    f: irc,
};

pub(crate) const XMPP: Detector = Detector {
    tcp: true,
    udp: false,
    names: &[AppProto::Xmpp],
    f: xmpp,
};

pub(crate) const ZABBIX: Detector = Detector {
    tcp: true,
    udp: false,
    names: &[AppProto::Zabbix],
    f: zabbix,
};

fn first_no(c: &Ctx) -> Verdict {
    if c.n == 0 {
        Verdict::No
    } else {
        Verdict::Maybe
    }
}

fn mqtt(c: &Ctx, s: &mut Scratch, d: &[u8]) -> Verdict {
    // CONNECT: type 1, remaining length (varint), then the protocol name.
    if at(d, 0) == 0x10 {
        let mut p = 1;
        while p < 5 && at(d, p) & 0x80 != 0 {
            p += 1;
        }
        let name = &d[(p + 1).min(d.len())..];
        if starts(name, b"\x00\x04MQTT") || starts(name, b"\x00\x06MQIsdp") {
            return Verdict::Match(AppProto::Mqtt);
        }
    }
    // Picked up mid-session: a PINGREQ answered by a PINGRESP.
    if d == [0xc0, 0] {
        s.flags |= Scratch::MQTT_PING;
        return Verdict::Maybe;
    }
    if d == [0xd0, 0] && s.flags & Scratch::MQTT_PING != 0 {
        return Verdict::Match(AppProto::Mqtt);
    }
    if c.n >= 4 {
        Verdict::No
    } else {
        Verdict::Maybe
    }
}

fn irc(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    if c.from_client && (starts(d, b"NICK ") || starts(d, b"CAP LS")) {
        return Verdict::Match(AppProto::Irc);
    }
    if !c.from_client
        && starts(d, b":")
        && (find(d, b" NOTICE ", 128).is_some() || find(d, b" 001 ", 128).is_some())
    {
        return Verdict::Match(AppProto::Irc);
    }
    first_no(c)
}

fn xmpp(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // The stream header, possibly after an XML declaration sent in its own segment.
    let xml = starts(d, b"<?xml");
    if (xml || starts(d, b"<stream:stream")) && find(d, b"<stream:stream", 256).is_some() {
        return Verdict::Match(AppProto::Xmpp);
    }
    if xml {
        return Verdict::Maybe;
    }
    first_no(c)
}

fn zabbix(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    if starts(d, b"ZBXD") && matches!(at(d, 4), 1 | 3 | 5) {
        return Verdict::Match(AppProto::Zabbix);
    }
    first_no(c)
}
