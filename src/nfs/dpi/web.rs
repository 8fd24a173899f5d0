//! HTTP and its relatives that share the request-line shape (RTSP, SSDP), and AJP.

use super::{at, be16, find, starts, starts_ci, AppProto, Ctx, Detector, Scratch, Verdict};

pub(crate) const HTTP: Detector = Detector {
    tcp: true,
    udp: false,
    names: &[AppProto::Http, AppProto::HttpConnect, AppProto::Rtsp],
    f: http,
};

pub(crate) const SSDP: Detector = Detector {
    tcp: false,
    udp: true,
    names: &[AppProto::Ssdp],
    f: ssdp,
};

pub(crate) const AJP: Detector = Detector {
    tcp: true,
    udp: false,
    names: &[AppProto::Ajp],
    f: ajp,
};

const METHODS: &[&[u8]] = &[
    b"GET ",
    b"POST ",
    b"HEAD ",
    b"PUT ",
    b"DELETE ",
    b"OPTIONS ",
    b"CONNECT ",
    b"PATCH ",
    b"TRACE ",
    b"PROPFIND ",
    b"PROPPATCH ",
    b"MKCOL ",
    b"MOVE ",
    b"COPY ",
    b"LOCK ",
    b"UNLOCK ",
    b"REPORT ",
    b"SEARCH ",
    b"DESCRIBE ",
    b"SETUP ",
    b"PLAY ",
    b"PAUSE ",
    b"TEARDOWN ",
    b"ANNOUNCE ",
    b"RECORD ",
    b"GET_PARAMETER ",
    b"SET_PARAMETER ",
];

/// The version token at the end of a request line that starts with a method.
fn request_version(d: &[u8]) -> Option<&[u8]> {
    METHODS.iter().find(|m| starts(d, m))?;
    let line_end = find(d, b"\r\n", 2048)
        .or_else(|| find(d, b"\n", 2048))
        .unwrap_or(d.len().min(2048));
    let line = &d[..line_end];
    let sp = line.iter().rposition(|&b| b == b' ')?;
    Some(&line[sp + 1..])
}

fn http(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    if let Some(v) = request_version(d) {
        if starts(v, b"HTTP/") {
            return Verdict::Match(if starts(d, b"CONNECT ") {
                AppProto::HttpConnect
            } else {
                AppProto::Http
            });
        }
        if starts(v, b"RTSP/") {
            return Verdict::Match(AppProto::Rtsp);
        }
        // A long request line cut by the segment end: take the method alone, as
        // nDPI does, unless it belongs only to RTSP.
        if find(d, b"\n", 2048).is_none() && d.len() >= 1024 {
            return Verdict::Match(AppProto::Http);
        }
    }
    if starts(d, b"HTTP/1.") || starts(d, b"HTTP/2") {
        return Verdict::Match(AppProto::Http);
    }
    if starts(d, b"RTSP/1.0 ") {
        return Verdict::Match(AppProto::Rtsp);
    }
    // A capture that starts mid-connection sees responses before the next request.
    if c.n >= 6 {
        Verdict::No
    } else {
        Verdict::Maybe
    }
}

/// The Host header's value, when the request carries one.
pub(crate) fn host(d: &[u8]) -> Option<&[u8]> {
    header(d, b"host:")
}

fn has_header(d: &[u8], name: &[u8]) -> bool {
    header(d, name).is_some()
}

/// The value of the header `name` (lower case, with the colon) in the first 4 KB.
fn header<'a>(d: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    let lim = d.len().min(4096);
    let mut i = 0;
    while let Some(p) = find(&d[i..lim], b"\n", lim) {
        let line = &d[i + p + 1..lim];
        if starts_ci(line, name) {
            let v = &line[name.len()..];
            let end = v
                .iter()
                .position(|&b| b == b'\r' || b == b'\n')
                .unwrap_or(v.len());
            let v = v[..end].trim_ascii();
            return (!v.is_empty()).then_some(v);
        }
        i += p + 1;
    }
    None
}

fn ssdp(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    if starts(d, b"M-SEARCH * HTTP/1.") || starts(d, b"NOTIFY * HTTP/1.") {
        return Verdict::Match(AppProto::Ssdp);
    }
    // Unicast replies to an M-SEARCH: from port 1900, or carrying the search-target /
    // unique-service-name headers only SSDP replies have.
    if starts(d, b"HTTP/1.1 200 OK")
        && (c.port(1900) || has_header(d, b"usn:") || has_header(d, b"st:"))
    {
        return Verdict::Match(AppProto::Ssdp);
    }
    if c.n == 0 {
        Verdict::No
    } else {
        Verdict::Maybe
    }
}

fn ajp(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    let len = be16(d, 2) as usize;
    if be16(d, 0) == 0x1234 && len + 4 <= d.len() + 1 && matches!(at(d, 4), 2 | 7 | 8 | 10) {
        return Verdict::Match(AppProto::Ajp);
    }
    if starts(d, b"AB") && len + 4 <= d.len() + 1 && matches!(at(d, 4), 3..=6 | 9) {
        return Verdict::Match(AppProto::Ajp);
    }
    if c.n == 0 {
        Verdict::No
    } else {
        Verdict::Maybe
    }
}
