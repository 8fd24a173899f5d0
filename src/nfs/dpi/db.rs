//! Databases and caches: MySQL, PostgreSQL, Redis (RESP), MongoDB, MS SQL (TDS),
//! Memcached.

use super::{at, be16, be32, le32, starts, AppProto, Ctx, Detector, Scratch, Verdict};

pub(crate) const MYSQL: Detector = Detector {
    tcp: true,
    udp: false,
    names: &[AppProto::MySql],
    f: mysql,
};

pub(crate) const POSTGRES: Detector = Detector {
    tcp: true,
    udp: false,
    names: &[AppProto::PostgreSql],
    f: postgres,
};

pub(crate) const REDIS: Detector = Detector {
    tcp: true,
    udp: false,
    names: &[AppProto::Redis],
    f: redis,
};

pub(crate) const MONGODB: Detector = Detector {
    tcp: true,
    udp: false,
    names: &[AppProto::MongoDb],
    f: mongodb,
};

pub(crate) const MSSQL: Detector = Detector {
    tcp: true,
    udp: false,
    names: &[AppProto::MsSql],
    f: mssql,
};

pub(crate) const MEMCACHED: Detector = Detector {
    tcp: true,
    udp: true,
    names: &[AppProto::Memcached],
    f: memcached,
};

fn first_no(c: &Ctx) -> Verdict {
    if c.n == 0 {
        Verdict::No
    } else {
        Verdict::Maybe
    }
}

fn mysql(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // Server greeting: 3-byte length, sequence 0, protocol 10, "5.7.x\0"-style version.
    let len = u32::from_le_bytes([at(d, 0), at(d, 1), at(d, 2), 0]) as usize;
    if !c.from_client
        && len + 4 == d.len()
        && at(d, 3) == 0
        && at(d, 4) == 10
        && at(d, 5).is_ascii_digit()
        && at(d, 6) == b'.'
    {
        return Verdict::Match(AppProto::MySql);
    }
    first_no(c)
}

fn postgres(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    let len = be32(d, 0) as usize;
    if c.from_client && len == d.len() && len >= 8 {
        // Startup message (protocol 3.0), SSLRequest, GSSENCRequest.
        if matches!(be32(d, 4), 0x0003_0000 | 0x04d2_162f | 0x04d2_1630) {
            return Verdict::Match(AppProto::PostgreSql);
        }
    }
    first_no(c)
}

fn redis(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // A command: an array of bulk strings, "*2\r\n$3\r\nGET\r\n…"; or a reply on 6379.
    if starts(d, b"*") && at(d, 1).is_ascii_digit() {
        let nl = d.iter().take(8).position(|&b| b == b'\n');
        if let Some(nl) = nl {
            if at(d, nl.saturating_sub(1)) == b'\r' && at(d, nl + 1) == b'$' {
                return Verdict::Match(AppProto::Redis);
            }
        }
    }
    if c.port(6379) && (starts(d, b"+PONG\r\n") || starts(d, b"+OK\r\n")) {
        return Verdict::Match(AppProto::Redis);
    }
    first_no(c)
}

fn mongodb(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // Message header: length, request id, response-to, op code (little endian).
    let len = le32(d, 0) as usize;
    let op = le32(d, 12);
    if d.len() >= 16
        && (16..=48 << 20).contains(&len)
        && len >= d.len()
        && matches!(op, 1 | 2001..=2007 | 2010..=2013)
    {
        // A response must point at a request; a request may not.
        let resp = le32(d, 8);
        if (c.from_client && (op != 1 || resp == 0)) || (!c.from_client && resp != 0) {
            return Verdict::Match(AppProto::MongoDb);
        }
    }
    first_no(c)
}

fn mssql(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // TDS packet header: type, status, length, SPID, packet id, window (0).
    let ty = at(d, 0);
    if d.len() >= 8
        && be16(d, 2) as usize == d.len()
        && at(d, 1) <= 0x1f
        && at(d, 7) == 0
        && (matches!(ty, 0x10 | 0x12) || (c.port(1433) && matches!(ty, 1..=4 | 6 | 7 | 14..=18)))
    {
        return Verdict::Match(AppProto::MsSql);
    }
    first_no(c)
}

fn memcached(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // UDP adds an 8-byte frame header.
    let m = if c.udp() {
        d.get(8..).unwrap_or(&[])
    } else {
        d
    };
    const CMDS: &[&[u8]] = &[
        b"get ",
        b"gets ",
        b"set ",
        b"add ",
        b"replace ",
        b"append ",
        b"prepend ",
        b"cas ",
        b"delete ",
        b"incr ",
        b"decr ",
        b"touch ",
        b"stats",
        b"version\r\n",
        b"VALUE ",
        b"STORED\r\n",
        b"END\r\n",
    ];
    // Text commands are plain words, so the port breaks the tie.
    if c.port(11211) && CMDS.iter().any(|p| starts(m, p)) {
        return Verdict::Match(AppProto::Memcached);
    }
    first_no(c)
}
