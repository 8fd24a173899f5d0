//! One rule: header, flow constraints and the ordered tests per buffer, built from the
//! lexed options. Unsupported keywords are errors naming the keyword, so the rule set
//! skips the rule with a warning instead of misreading it.

use super::content::{decode_pattern, Content, Test};
use super::header::{AddrSet, Header, PortSet, Proto};
use super::lexer::{unquote, unquote_pcre, RawRule};
use super::pcre::Pcre;
use super::pktcheck::PktCheck;
use super::vars::Vars;

/// The buffer a test inspects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Buf {
    /// The packet payload, or the reassembled stream for TCP stream rules.
    Payload,
    HttpUri,
    HttpUriRaw,
    HttpHost,
    HttpHostRaw,
    HttpMethod,
    HttpProtocol,
    HttpHeader,
    HttpHeaderRaw,
    HttpCookie,
    HttpUserAgent,
    HttpContentType,
    HttpConnection,
    HttpRequestLine,
    HttpRequestBody,
    HttpStatCode,
    HttpStatMsg,
    HttpResponseLine,
    /// Decoded (de-chunked, decompressed) message body: `file_data`.
    FileData,
}

/// Which side of an HTTP transaction a buffer belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Request,
    Response,
    /// Both sides have one (headers, bodies): the rule's `flow` option decides.
    Either,
}

impl Buf {
    fn sticky(name: &str) -> Option<Buf> {
        Some(match name {
            "pkt_data" => Buf::Payload,
            "http.uri" => Buf::HttpUri,
            "http.uri.raw" => Buf::HttpUriRaw,
            "http.host" => Buf::HttpHost,
            "http.host.raw" => Buf::HttpHostRaw,
            "http.method" => Buf::HttpMethod,
            "http.protocol" => Buf::HttpProtocol,
            "http.header" => Buf::HttpHeader,
            "http.header.raw" => Buf::HttpHeaderRaw,
            "http.cookie" => Buf::HttpCookie,
            "http.user_agent" => Buf::HttpUserAgent,
            "http.content_type" => Buf::HttpContentType,
            "http.connection" => Buf::HttpConnection,
            "http.request_line" => Buf::HttpRequestLine,
            "http.request_body" | "http.client_body" => Buf::HttpRequestBody,
            "http.stat_code" => Buf::HttpStatCode,
            "http.stat_msg" => Buf::HttpStatMsg,
            "http.response_line" => Buf::HttpResponseLine,
            "file_data" | "file.data" | "http.response_body" => Buf::FileData,
            _ => return None,
        })
    }

    /// Legacy content modifiers (`content:"x"; http_uri;`).
    fn modifier(name: &str) -> Option<Buf> {
        Some(match name {
            "http_uri" => Buf::HttpUri,
            "http_raw_uri" => Buf::HttpUriRaw,
            "http_host" => Buf::HttpHost,
            "http_raw_host" => Buf::HttpHostRaw,
            "http_method" => Buf::HttpMethod,
            "http_header" => Buf::HttpHeader,
            "http_raw_header" => Buf::HttpHeaderRaw,
            "http_cookie" => Buf::HttpCookie,
            "http_user_agent" => Buf::HttpUserAgent,
            "http_client_body" => Buf::HttpRequestBody,
            "http_stat_code" => Buf::HttpStatCode,
            "http_stat_msg" => Buf::HttpStatMsg,
            "http_server_body" => Buf::FileData,
            _ => return None,
        })
    }

    /// A message body: the only buffers that grow after a message's headers.
    pub fn is_body(self) -> bool {
        matches!(self, Buf::FileData | Buf::HttpRequestBody)
    }

    pub fn side(self) -> Side {
        match self {
            Buf::Payload | Buf::HttpHeader | Buf::HttpHeaderRaw | Buf::FileData => Side::Either,
            // Suricata's http.cookie is Cookie in requests and Set-Cookie in responses,
            // http.protocol the request's or the status line's version.
            Buf::HttpContentType | Buf::HttpConnection | Buf::HttpCookie => Side::Either,
            Buf::HttpProtocol => Side::Either,
            Buf::HttpStatCode | Buf::HttpStatMsg | Buf::HttpResponseLine => Side::Response,
            _ => Side::Request,
        }
    }
}

/// `flow:` constraints.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowOpt {
    /// Some(true): to_server/from_client; Some(false): to_client/from_server.
    pub to_server: Option<bool>,
    /// Some(true): established; Some(false): not_established.
    pub established: Option<bool>,
}

/// How the engine runs a rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Once per packet, on its payload (UDP, ICMP, IP, and TCP rules without content).
    Packet,
    /// On the reassembled byte stream of a TCP flow (on packets while not reassembling).
    Stream,
    /// Once per HTTP transaction, on the parser's buffers.
    Http,
}

/// Tests on one buffer, in rule order.
#[derive(Clone, Debug)]
pub struct Group {
    pub buf: Buf,
    pub tests: Vec<Test>,
}

#[derive(Clone, Debug)]
pub struct Rule {
    pub sid: u32,
    /// A `drop` or `reject` rule: inline, its match drops the flow.
    pub drops: bool,
    pub gid: u32,
    pub rev: u32,
    pub msg: String,
    pub action: String,
    pub header: Header,
    pub flow: FlowOpt,
    pub groups: Vec<Group>,
    pub kind: Kind,
    /// For HTTP rules: the transaction side whose progress triggers inspection.
    pub side: Side,
    /// The content the prefilter looks for: (buffer, bytes), None when the rule has no
    /// positive content and must always be tried.
    pub prefilter: Option<(Buf, Vec<u8>)>,
    /// Source line of the rule.
    pub line: usize,
    /// Per-packet header checks (`flags`, `itype`, …); a rule with any is a packet rule.
    pub pkt: Vec<PktCheck>,
    /// Suricata's "IP-only" rules (addresses and protocol, nothing else) are matched on
    /// the first packet of each flow direction only.
    pub ip_only: bool,
    /// A stream rule with content anchored at the start (`offset`, `depth`, `startswith`):
    /// Suricata inspects it on each TCP packet's payload as well as on the stream.
    pub anchored: bool,
}

/// Why a rule was not loaded: the keyword (or header field) and the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skip {
    pub keyword: String,
    pub reason: String,
}

fn skip(keyword: &str, reason: impl Into<String>) -> Skip {
    Skip {
        keyword: keyword.to_string(),
        reason: reason.into(),
    }
}

/// Keywords that carry metadata only.
const IGNORED: &[&str] = &[
    "classtype",
    "reference",
    "metadata",
    "priority",
    "target",
    "rawbytes",
];

/// Builds a rule; on failure returns the sid (if it was read) and why.
pub fn build(raw: &RawRule<'_>, vars: &Vars) -> Result<Rule, (Option<u32>, Skip)> {
    let sid = raw
        .options
        .iter()
        .find(|(k, _)| *k == "sid")
        .and_then(|(_, v)| v.trim().parse::<u32>().ok());
    build_inner(raw, vars, sid).map_err(|e| (sid, e))
}

fn build_inner(raw: &RawRule<'_>, vars: &Vars, sid: Option<u32>) -> Result<Rule, Skip> {
    let h = &raw.header;
    if h.len() != 7 {
        return Err(skip(
            "header",
            format!(
                "expected 7 fields (action proto src sport dir dst dport), got {}",
                h.len()
            ),
        ));
    }
    let action = h[0].to_ascii_lowercase();
    // `pass` silences other rules, which is not modelled. drop/reject alert, and inline
    // (the microbox's ids app) also drop the flow.
    if !matches!(
        action.as_str(),
        "alert" | "drop" | "reject" | "rejectsrc" | "rejectdst" | "rejectboth"
    ) {
        return Err(skip("action", format!("`{}` is not supported", h[0])));
    }
    let proto = Proto::parse(h[1])
        .ok_or_else(|| skip("protocol", format!("`{}` is not supported", h[1])))?;
    // `tcp-pkt`: Suricata inspects each packet's payload only, never the stream.
    let pkt_only = h[1].eq_ignore_ascii_case("tcp-pkt");
    let both = match h[4] {
        "->" => false,
        "<>" => true,
        d => return Err(skip("direction", format!("`{d}` is not -> or <>"))),
    };
    let header = Header {
        proto,
        src: AddrSet::parse(h[2], vars).map_err(|e| skip("source address", e))?,
        sport: PortSet::parse(h[3], vars).map_err(|e| skip("source port", e))?,
        dst: AddrSet::parse(h[5], vars).map_err(|e| skip("destination address", e))?,
        dport: PortSet::parse(h[6], vars).map_err(|e| skip("destination port", e))?,
        both,
    };
    let sid = sid.ok_or_else(|| skip("sid", "missing or not a number"))?;
    let mut r = Rule {
        sid,
        drops: action != "alert",
        gid: 1,
        rev: 0,
        msg: String::new(),
        action,
        header,
        flow: FlowOpt::default(),
        groups: Vec::new(),
        kind: Kind::Packet,
        side: Side::Request,
        prefilter: None,
        line: raw.line,
        ip_only: false,
        anchored: false,
        pkt: Vec::new(),
    };
    // Tests in rule order, each with its buffer; grouped per buffer afterwards.
    let mut tests: Vec<(Buf, Test)> = Vec::new();
    let mut sticky = Buf::Payload;
    for &(k, v) in &raw.options {
        let num = |what: &str| -> Result<i64, Skip> {
            v.trim()
                .parse::<i64>()
                .map_err(|_| skip(k, format!("`{v}` is not {what}")))
        };
        match k {
            "sid" => {}
            "msg" => r.msg = unquote(v).map_err(|e| skip(k, e))?,
            "rev" => r.rev = num("a number")?.clamp(0, u32::MAX as i64) as u32,
            "gid" => r.gid = num("a number")?.clamp(0, u32::MAX as i64) as u32,
            "flow" => r.flow = parse_flow(v)?,
            "content" | "uricontent" => {
                let (neg, body) = match v.trim().strip_prefix('!') {
                    Some(b) => (true, b),
                    None => (false, v),
                };
                let s = unquote(body).map_err(|e| skip(k, e))?;
                let pat = decode_pattern(&s).map_err(|e| skip(k, e))?;
                let buf = if k == "uricontent" {
                    Buf::HttpUri
                } else {
                    sticky
                };
                tests.push((
                    buf,
                    Test::Content(Content {
                        pat,
                        negated: neg,
                        ..Content::default()
                    }),
                ));
            }
            "nocase" => last_content(&mut tests, k)?.nocase = true,
            "fast_pattern" => last_content(&mut tests, k)?.fast_pattern = true,
            // A hint only: marks a content as the fast pattern, else changes nothing.
            "prefilter" => {
                if let Some((_, Test::Content(c))) = tests.last_mut() {
                    c.fast_pattern = true;
                }
            }
            "startswith" => last_content(&mut tests, k)?.startswith = true,
            "endswith" => last_content(&mut tests, k)?.endswith = true,
            "offset" | "depth" | "within" => {
                let n = num("a number")?;
                if !(0..=65535).contains(&n) {
                    return Err(skip(k, format!("{n} is out of range")));
                }
                let c = last_content(&mut tests, k)?;
                match k {
                    "offset" => c.offset = Some(n as u32),
                    "depth" => c.depth = Some(n as u32),
                    _ => c.within = Some(n as u32),
                }
            }
            "distance" => {
                let n = num("a number")?;
                if !(-65535..=65535).contains(&n) {
                    return Err(skip(k, format!("{n} is out of range")));
                }
                last_content(&mut tests, k)?.distance = Some(n as i32);
            }
            "pcre" => {
                let (neg, body) = match v.trim().strip_prefix('!') {
                    Some(b) => (true, b),
                    None => (false, v),
                };
                let s = unquote_pcre(body).map_err(|e| skip(k, e))?;
                let (p, sel) = Pcre::parse(&s, neg).map_err(|e| skip(k, e))?;
                tests.push((sel.unwrap_or(sticky), Test::Pcre(p)));
            }
            "flags" | "itype" | "icode" | "dsize" | "ttl" => {
                r.pkt.push(PktCheck::parse(k, v).map_err(|e| skip(k, e))?)
            }
            _ if IGNORED.contains(&k) => {}
            _ => {
                if let Some(b) = Buf::sticky(k) {
                    sticky = b;
                } else if let Some(b) = Buf::modifier(k) {
                    match tests.last_mut() {
                        Some((buf, Test::Content(_))) => *buf = b,
                        _ => return Err(skip(k, "does not follow a content")),
                    }
                } else {
                    return Err(skip(k, "keyword not supported"));
                }
            }
        }
    }
    for (_, t) in &tests {
        if let Test::Content(c) = t {
            if c.is_relative() && (c.offset.is_some() || c.depth.is_some()) {
                return Err(skip("content", "mixes relative and absolute modifiers"));
            }
        }
    }
    let mut groups: Vec<Group> = Vec::new();
    for (b, t) in tests {
        match groups.iter_mut().find(|g| g.buf == b) {
            Some(g) => g.tests.push(t),
            None => groups.push(Group {
                buf: b,
                tests: vec![t],
            }),
        }
    }
    let http_bufs = groups.iter().any(|g| g.buf != Buf::Payload);
    r.kind = if http_bufs || (proto == Proto::Http && groups.is_empty()) {
        Kind::Http
    } else if matches!(proto, Proto::Tcp | Proto::Http)
        && !groups.is_empty()
        && r.pkt.is_empty()
        && !pkt_only
    {
        Kind::Stream
    } else {
        Kind::Packet
    };
    if r.kind == Kind::Http && !r.pkt.is_empty() {
        return Err(skip("flags", "packet keywords mixed with HTTP buffers"));
    }
    if r.kind == Kind::Http {
        if groups.iter().any(|g| g.buf == Buf::Payload) {
            return Err(skip("pkt_data", "payload tests mixed with HTTP buffers"));
        }
        if !matches!(proto, Proto::Tcp | Proto::Http | Proto::Ip) {
            return Err(skip("protocol", "HTTP buffers on a non-TCP rule"));
        }
        let sides: Vec<Side> = groups.iter().map(|g| g.buf.side()).collect();
        r.side = if sides.contains(&Side::Response) || r.flow.to_server == Some(false) {
            Side::Response
        } else if sides.contains(&Side::Request) || r.flow.to_server == Some(true) {
            Side::Request
        } else {
            Side::Either
        };
    }
    r.ip_only = r.kind == Kind::Packet
        && groups.is_empty()
        && r.pkt.is_empty()
        && r.flow == FlowOpt::default()
        && r.header.sport.is_any()
        && r.header.dport.is_any();
    r.anchored = r.kind == Kind::Stream
        && groups.iter().flat_map(|g| &g.tests).any(|t| {
            matches!(t, super::content::Test::Content(c)
                if !c.negated && (c.offset.is_some() || c.depth.is_some() || c.startswith))
        });
    r.prefilter = choose_prefilter(&groups);
    r.groups = groups;
    Ok(r)
}

/// The fast_pattern content if marked, else the longest positive content.
fn choose_prefilter(groups: &[Group]) -> Option<(Buf, Vec<u8>)> {
    let mut best: Option<(Buf, &Content)> = None;
    for g in groups {
        for t in &g.tests {
            if let Test::Content(c) = t {
                if c.negated {
                    continue;
                }
                let better = match best {
                    None => true,
                    Some((_, b)) => {
                        (c.fast_pattern && !b.fast_pattern)
                            || (c.fast_pattern == b.fast_pattern && c.pat.len() > b.pat.len())
                    }
                };
                if better {
                    best = Some((g.buf, c));
                }
            }
        }
    }
    best.map(|(b, c)| (b, c.pat.clone()))
}

fn parse_flow(v: &str) -> Result<FlowOpt, Skip> {
    let mut f = FlowOpt::default();
    for part in v.split(',') {
        match part.trim() {
            "to_server" | "from_client" => f.to_server = Some(true),
            "to_client" | "from_server" => f.to_server = Some(false),
            "established" => f.established = Some(true),
            "not_established" => f.established = Some(false),
            "stateless" => {}
            other => return Err(skip("flow", format!("`{other}` is not supported"))),
        }
    }
    Ok(f)
}

fn last_content<'a>(tests: &'a mut [(Buf, Test)], k: &str) -> Result<&'a mut Content, Skip> {
    match tests.last_mut() {
        Some((_, Test::Content(c))) => Ok(c),
        _ => Err(skip(k, "does not follow a content")),
    }
}
