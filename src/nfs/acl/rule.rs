//! ACL rules: the tcpdump-like text syntax, parsed into conjunctions of field constraints.
//!
//! A rule is `ACTION MATCH`, e.g. `allow tcp dst port 80 or 443`. MATCH is a conjunction
//! (`and` or plain juxtaposition) of primitives, each optionally preceded by `not`/`!`.
//! `or` only joins values of one field (`port 80 or 443`, `port 80 or port 443`,
//! `tcp or udp`, `host A or net B`); `not` negates one primitive, and a negated list must
//! be parenthesised (`not (port 80 or 443)`) because tcpdump would read it differently.
//!
//! Every primitive becomes an [`Atom`] (a set of values, possibly negated) on one
//! [`Field`]. Primitives that test either direction (`host`, `net`, `port`, `portrange`
//! without `src`/`dst`) are a disjunction over two fields, so a rule holding them is
//! expanded into up to [`MAX_VARIANTS`] conjunctions ("variants") of the same priority.

use std::net::IpAddr;

/// The header fields rules constrain. Values are `u128` in each field's own domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Field {
    /// Family and protocol: IPv4 protocol `p` is `p`, IPv6 next header `p` is `256 + p`,
    /// anything not IP is [`NOT_IP`]. So `ip`, `ip6`, `tcp`, `icmp` are all sets here.
    Proto = 0,
    Src4 = 1,
    Dst4 = 2,
    Src6 = 3,
    Dst6 = 4,
    Sport = 5,
    Dport = 6,
    /// ICMP type `t` is `t`, ICMPv6 type `t` is `256 + t`.
    Icmp = 7,
    /// The TCP flags byte.
    Flags = 8,
    /// IPv4 fragmentation: [`FRAG_NONE`], [`FRAG_FIRST`] or [`FRAG_LATER`]; absent when
    /// not IPv4 (as tcpdump's `ip[6:2]` fails on anything but IPv4).
    Frag = 9,
}

pub const FIELDS: usize = 10;
/// Not a fragment: `ip[6:2] & 0x3fff = 0`.
pub const FRAG_NONE: u128 = 0;
/// A first fragment (more-fragments set, offset 0): it still has the transport header.
pub const FRAG_FIRST: u128 = 1;
/// A later fragment (offset not 0): `ip[6:2] & 0x1fff != 0`.
pub const FRAG_LATER: u128 = 2;
pub const NOT_IP: u128 = 512;
pub const ALL_FIELDS: [Field; FIELDS] = [
    Field::Proto,
    Field::Src4,
    Field::Dst4,
    Field::Src6,
    Field::Dst6,
    Field::Sport,
    Field::Dport,
    Field::Icmp,
    Field::Flags,
    Field::Frag,
];

/// A set of values (sorted, merged inclusive ranges), possibly negated. A positive atom
/// needs the field to be present (a port test fails on ICMP); a negated one is the exact
/// complement, so it holds when the field is absent — as `not port 80` does in BPF.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Atom {
    pub neg: bool,
    pub ranges: Vec<(u128, u128)>,
}

impl Atom {
    pub fn new(neg: bool, mut ranges: Vec<(u128, u128)>) -> Atom {
        ranges.sort_unstable();
        let mut out: Vec<(u128, u128)> = Vec::with_capacity(ranges.len());
        for (lo, hi) in ranges {
            match out.last_mut() {
                Some(l) if lo <= l.1.saturating_add(1) => l.1 = l.1.max(hi),
                _ => out.push((lo, hi)),
            }
        }
        Atom { neg, ranges: out }
    }

    #[inline]
    pub fn contains(&self, v: u128) -> bool {
        let i = self.ranges.partition_point(|r| r.0 <= v);
        i > 0 && self.ranges[i - 1].1 >= v
    }

    #[inline]
    pub fn holds(&self, v: Option<u128>) -> bool {
        match v {
            None => self.neg,
            Some(v) => self.contains(v) != self.neg,
        }
    }
}

/// One conjunction: the atoms on each field (all must hold; none means any value).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Conj {
    pub atoms: [Vec<Atom>; FIELDS],
}

impl Conj {
    pub fn matches(&self, v: &[Option<u128>; FIELDS]) -> bool {
        self.atoms
            .iter()
            .zip(v)
            .all(|(atoms, &val)| atoms.iter().all(|a| a.holds(val)))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Allow,
    Deny,
}

/// A parsed rule: it matches when any of its variants does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub action: Action,
    pub variants: Vec<Conj>,
    /// The rule's text (without comment), for messages.
    pub text: String,
}

impl Rule {
    pub fn matches(&self, v: &[Option<u128>; FIELDS]) -> bool {
        self.variants.iter().any(|c| c.matches(v))
    }

    /// Parses one rule; `Ok(None)` for a blank or comment-only line.
    pub fn parse(line: &str) -> Result<Option<Rule>, String> {
        let text = line.split('#').next().unwrap_or("").trim();
        if text.is_empty() {
            return Ok(None);
        }
        let toks = tokenize(text);
        let mut p = Parser {
            toks,
            i: 0,
            variants: vec![Conj::default()],
            listed: false,
        };
        let action = match p.next().unwrap_or("") {
            "allow" | "accept" | "pass" | "permit" => Action::Allow,
            "deny" | "drop" | "block" | "reject" => Action::Deny,
            w => return Err(format!("a rule starts with `allow` or `deny`, not `{w}`")),
        };
        if p.peek().is_none() {
            return Err("missing match after the action (write `all` to match everything)".into());
        }
        while p.peek().is_some() {
            if matches!(p.peek(), Some("and" | "&&")) {
                p.i += 1;
            }
            p.term()?;
        }
        Ok(Some(Rule {
            action,
            variants: p.variants,
            text: text.to_string(),
        }))
    }
}

/// The most conjunctions one rule may expand into (two either-direction tests give 4).
pub const MAX_VARIANTS: usize = 16;

/// Words and parentheses. tcpdump escapes protocol names that are also keywords
/// (`proto \udp`); the escape is taken off, since here a name means the same either way.
fn tokenize(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    for w in s.split_whitespace() {
        let w = match w.strip_prefix('\\') {
            Some(name) if PROTO_NAMES.iter().any(|(n, _)| name.starts_with(n)) => name,
            _ => w,
        };
        let mut cur = String::new();
        for c in w.chars() {
            if c == '(' || c == ')' {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                out.push(c.to_string());
            } else {
                cur.push(c);
            }
        }
        if !cur.is_empty() {
            out.push(cur);
        }
    }
    out
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Dir {
    Src,
    Dst,
    Either,
}

/// What one primitive (with its `or` list) adds to the rule.
enum Prim {
    None,
    One(Field, Vec<(u128, u128)>),
    /// Either direction: source field, destination field.
    Either(Field, Field, Vec<(u128, u128)>),
}

struct Parser {
    toks: Vec<String>,
    i: usize,
    variants: Vec<Conj>,
    /// The current primitive joined values with `or`.
    listed: bool,
}

const KEYWORDS: &[&str] = &[
    "and",
    "&&",
    "or",
    "||",
    "not",
    "!",
    "(",
    ")",
    "all",
    "any",
    "ip",
    "ip6",
    "tcp",
    "udp",
    "sctp",
    "icmp",
    "icmp6",
    "proto",
    "host",
    "net",
    "port",
    "portrange",
    "src",
    "dst",
    "type",
    "flags",
    "frag",
    "unfrag",
];

/// Protocol names (`proto NAME`, `ip proto NAME`), some of them keywords too.
const PROTO_NAMES: &[(&str, u128)] = &[
    ("icmp6", 58),
    ("icmp", 1),
    ("igmp", 2),
    ("tcp", 6),
    ("udp", 17),
    ("gre", 47),
    ("esp", 50),
    ("ah", 51),
    ("sctp", 132),
];

impl Parser {
    fn peek(&self) -> Option<&str> {
        self.toks.get(self.i).map(|s| s.as_str())
    }

    fn peek_at(&self, k: usize) -> Option<&str> {
        self.toks.get(self.i + k).map(|s| s.as_str())
    }

    fn next(&mut self) -> Option<&str> {
        let t = self.toks.get(self.i).map(|s| s.as_str());
        if t.is_some() {
            self.i += 1;
        }
        t
    }

    /// A protocol number or name, keywords like `udp` included (`proto udp`).
    fn proto_value(&mut self) -> Result<u128, String> {
        match self.next() {
            Some(t) if !KEYWORDS.contains(&t) || PROTO_NAMES.iter().any(|(n, _)| *n == t) => {
                proto_number(t)
            }
            Some(t) => Err(format!("expected a protocol, found `{t}`")),
            None => Err("expected a protocol at the end of the rule".into()),
        }
    }

    /// After a protocol: `or` and another protocol (number or name, not one that starts a
    /// primitive of its own like `udp port 53`), or `or proto …`.
    fn more_protos(&mut self) -> bool {
        if !matches!(self.peek(), Some("or" | "||")) {
            return false;
        }
        let named = matches!(self.peek_at(1), Some(t) if PROTO_NAMES.iter().any(|(n, _)| *n == t))
            && !matches!(
                self.peek_at(2),
                Some("port" | "portrange" | "src" | "dst" | "type" | "flags")
            );
        if named {
            self.i += 1;
            self.listed = true;
            return true;
        }
        self.more(&["proto"])
    }

    fn value(&mut self, what: &str) -> Result<String, String> {
        match self.next() {
            Some(t) if !KEYWORDS.contains(&t) => Ok(t.to_string()),
            Some(t) => Err(format!("expected {what}, found `{t}`")),
            None => Err(format!("expected {what} at the end of the rule")),
        }
    }

    /// After a value: `or` followed by another value (or by `again`, the same keyword
    /// sequence) continues the list.
    fn more(&mut self, again: &[&str]) -> bool {
        if !matches!(self.peek(), Some("or" | "||")) {
            return false;
        }
        match self.peek_at(1) {
            Some(t) if !KEYWORDS.contains(&t) => {
                self.i += 1;
                self.listed = true;
                true
            }
            Some(_)
                if !again.is_empty()
                    && (0..again.len()).all(|k| self.peek_at(1 + k) == Some(again[k])) =>
            {
                self.i += 1 + again.len();
                self.listed = true;
                true
            }
            _ => false,
        }
    }

    fn term(&mut self) -> Result<(), String> {
        let neg = matches!(self.peek(), Some("not" | "!"));
        if neg {
            self.i += 1;
        }
        let paren = self.peek() == Some("(");
        if paren {
            self.i += 1;
        }
        self.listed = false;
        let prims = self.prim(neg)?;
        if paren && self.next() != Some(")") {
            return Err("expected `)`".into());
        }
        if neg && self.listed && !paren {
            return Err("`not` negates one value: write `not (… or …)` for a list".into());
        }
        for prim in prims {
            self.add(prim, neg)?;
        }
        if matches!(self.peek(), Some("or" | "||")) {
            let w = self.peek_at(1).unwrap_or("");
            return Err(format!(
                "`or` may only join values of one field (e.g. `port 80 or 443`), not `{w}`"
            ));
        }
        Ok(())
    }

    fn add(&mut self, prim: Prim, neg: bool) -> Result<(), String> {
        match prim {
            Prim::None => {}
            Prim::One(f, r) => {
                let a = Atom::new(neg, r);
                for c in &mut self.variants {
                    c.atoms[f as usize].push(a.clone());
                }
            }
            Prim::Either(fs, fd, r) => {
                let a = Atom::new(neg, r);
                if neg {
                    // not (src in S or dst in S) = src not in S and dst not in S.
                    for c in &mut self.variants {
                        c.atoms[fs as usize].push(a.clone());
                        c.atoms[fd as usize].push(a.clone());
                    }
                } else {
                    if self.variants.len() * 2 > MAX_VARIANTS {
                        return Err(format!(
                            "too many either-direction tests in one rule (at most {MAX_VARIANTS} combinations); use `src`/`dst`"
                        ));
                    }
                    let mut out = Vec::with_capacity(self.variants.len() * 2);
                    for c in self.variants.drain(..) {
                        let mut s = c.clone();
                        s.atoms[fs as usize].push(a.clone());
                        let mut d = c;
                        d.atoms[fd as usize].push(a.clone());
                        out.push(s);
                        out.push(d);
                    }
                    self.variants = out;
                }
            }
        }
        Ok(())
    }

    fn prim(&mut self, neg: bool) -> Result<Vec<Prim>, String> {
        let Some(w) = self.next().map(str::to_string) else {
            return Err("expected a primitive at the end of the rule".into());
        };
        let w = w.as_str();
        Ok(match w {
            "all" | "any" => {
                if neg {
                    return Err("`not all` never matches".into());
                }
                vec![Prim::None]
            }
            "ip" | "ip6" if self.peek() == Some("proto") => {
                self.i += 1;
                let v6 = w == "ip6";
                let mut r = Vec::new();
                loop {
                    let p = self.proto_value()?;
                    r.push(if v6 { 256 + p } else { p });
                    if !self.more_protos() {
                        break;
                    }
                }
                vec![Prim::One(
                    Field::Proto,
                    r.into_iter().map(|p| (p, p)).collect(),
                )]
            }
            // Click's IPFilter primitives; tcpdump's forms are the `ip[6:2]` tests below.
            "ip" if self.peek() == Some("frag") => {
                self.i += 1;
                vec![Prim::One(Field::Frag, vec![(FRAG_FIRST, FRAG_LATER)])]
            }
            "ip" if self.peek() == Some("unfrag") => {
                self.i += 1;
                vec![Prim::One(Field::Frag, vec![(FRAG_NONE, FRAG_NONE)])]
            }
            "ip[6:2]" => vec![Prim::One(Field::Frag, self.frag_test()?)],
            "ip" => vec![Prim::One(Field::Proto, vec![(0, 255)])],
            "ip6" => vec![Prim::One(Field::Proto, vec![(256, 511)])],
            "icmp" | "icmp6" if self.peek() == Some("type") => {
                self.i += 1;
                let v6 = w == "icmp6";
                let mut r = Vec::new();
                loop {
                    let t = icmp_type(&self.value("an ICMP type")?, v6)?;
                    r.push((t, t));
                    if !self.more(&[w, "type"]) && !self.more(&["type"]) {
                        break;
                    }
                }
                vec![Prim::One(Field::Icmp, r)]
            }
            "tcp" if self.peek() == Some("flags") => {
                self.i += 1;
                let spec = self.value("TCP flags, e.g. `syn,!ack`")?;
                vec![Prim::One(Field::Flags, tcp_flags(&spec)?)]
            }
            "tcp" | "udp" | "sctp" | "icmp" | "icmp6" | "proto" => {
                let mut r = Vec::new();
                let mut kw = w.to_string();
                loop {
                    match kw.as_str() {
                        "proto" => {
                            let p = self.proto_value()?;
                            r.extend([p, 256 + p]);
                        }
                        "icmp" => r.push(1),
                        "icmp6" => r.push(256 + 58),
                        k => {
                            let p = proto_number(k)?;
                            r.extend([p, 256 + p]);
                        }
                    }
                    // `tcp port 80`: the qualifier form adds a port test.
                    if matches!(self.peek(), Some("port" | "portrange" | "src" | "dst"))
                        && matches!(kw.as_str(), "tcp" | "udp" | "sctp")
                    {
                        if neg {
                            return Err(format!(
                                "`not {kw} port …` negates two tests; write `not {kw}` or `not port …`"
                            ));
                        }
                        if r.len() > 2 {
                            return Err(format!(
                                "`or` cannot join `{kw} port …` to a protocol list"
                            ));
                        }
                        let p = self.prim(false)?;
                        let mut v = vec![Prim::One(
                            Field::Proto,
                            r.into_iter().map(|p| (p, p)).collect(),
                        )];
                        v.extend(p);
                        return Ok(v);
                    }
                    if !matches!(self.peek(), Some("or" | "||")) {
                        break;
                    }
                    match self.peek_at(1) {
                        Some(k @ ("tcp" | "udp" | "sctp" | "icmp" | "icmp6" | "proto"))
                            if !matches!(
                                self.peek_at(2),
                                Some("port" | "portrange" | "src" | "dst" | "type" | "flags")
                            ) =>
                        {
                            kw = k.to_string();
                            self.i += 2;
                            self.listed = true;
                        }
                        Some(t) if kw == "proto" && !KEYWORDS.contains(&t) => {
                            self.i += 1;
                            self.listed = true;
                        }
                        _ => break,
                    }
                }
                vec![Prim::One(
                    Field::Proto,
                    r.into_iter().map(|p| (p, p)).collect(),
                )]
            }
            "src" | "dst" => {
                let mut dir = if w == "src" { Dir::Src } else { Dir::Dst };
                if self.peek() == Some("or") && matches!(self.peek_at(1), Some("src" | "dst")) {
                    self.i += 2;
                    dir = Dir::Either;
                }
                vec![self.dir_prim(dir, w)?]
            }
            "host" | "net" | "port" | "portrange" => {
                self.i -= 1;
                vec![self.dir_prim(Dir::Either, "")?]
            }
            _ => {
                if w.parse::<u128>().is_ok() || w.parse::<IpAddr>().is_ok() {
                    return Err(format!(
                        "value `{w}` needs a keyword before it (`port`, `host`, …)"
                    ));
                }
                return Err(format!("unknown keyword `{w}`"));
            }
        })
    }

    /// tcpdump's fragment tests on the flags-and-offset word, after `ip[6:2]`:
    /// `& 0x1fff != 0` (a later fragment), `& 0x3fff != 0` (any fragment), or `= 0` for
    /// their complements among IPv4 packets.
    fn frag_test(&mut self) -> Result<Vec<(u128, u128)>, String> {
        const FORM: &str =
            "`ip[6:2]` takes `& 0x1fff` or `& 0x3fff`, then `!= 0` or `= 0` (fragment tests)";
        if self.next() != Some("&") {
            return Err(FORM.into());
        }
        let later = match self.next() {
            Some("0x1fff" | "8191") => true,
            Some("0x3fff" | "16383") => false,
            _ => return Err(FORM.into()),
        };
        let nonzero = match self.next() {
            Some("!=" | ">") => true,
            Some("=" | "==") => false,
            _ => return Err(FORM.into()),
        };
        if self.next() != Some("0") {
            return Err(FORM.into());
        }
        Ok(match (later, nonzero) {
            (true, true) => vec![(FRAG_LATER, FRAG_LATER)],
            (true, false) => vec![(FRAG_NONE, FRAG_FIRST)],
            (false, true) => vec![(FRAG_FIRST, FRAG_LATER)],
            (false, false) => vec![(FRAG_NONE, FRAG_NONE)],
        })
    }

    fn dir_prim(&mut self, dir: Dir, dirw: &str) -> Result<Prim, String> {
        let kw = match self.next() {
            Some(k @ ("host" | "net" | "port" | "portrange")) => k.to_string(),
            Some(k) => {
                return Err(format!(
                    "expected `host`, `net`, `port` or `portrange` after `{dirw}`, found `{k}`"
                ))
            }
            None => {
                return Err(format!(
                    "expected `host`, `net`, `port` or `portrange` after `{dirw}`"
                ))
            }
        };
        let again: Vec<&str> = match dir {
            Dir::Either if dirw.is_empty() => vec![],
            _ => vec![dirw],
        };
        let mut ranges = Vec::new();
        let mut fam = 0u8;
        let mut kw = kw;
        loop {
            match kw.as_str() {
                "host" | "net" => {
                    let v = self.value(if kw == "host" {
                        "an address"
                    } else {
                        "a prefix"
                    })?;
                    let (f, lo, hi) = prefix(&v, kw == "host")?;
                    if fam != 0 && fam != f {
                        return Err("one list mixes IPv4 and IPv6 addresses; use two rules".into());
                    }
                    fam = f;
                    ranges.push((lo, hi));
                }
                "port" => {
                    let p = port(&self.value("a port")?)?;
                    ranges.push((p, p));
                    fam = 1;
                }
                _ => {
                    let v = self.value("a port range `A-B`")?;
                    let (a, b) = v
                        .split_once('-')
                        .ok_or_else(|| format!("port range `{v}` must be `A-B`"))?;
                    let (a, b) = (port(a)?, port(b)?);
                    if a > b {
                        return Err(format!("port range `{v}` is empty ({a} > {b})"));
                    }
                    ranges.push((a, b));
                    fam = 1;
                }
            }
            // Another value, or the same keyword again (`port 80 or port 443`).
            if self.more(&[]) {
                continue;
            }
            let mut seq = again.clone();
            for k in ["host", "net", "port", "portrange"] {
                let is_addr = matches!(kw.as_str(), "host" | "net");
                if is_addr != matches!(k, "host" | "net") {
                    continue;
                }
                seq.push(k);
                if self.more(&seq) {
                    kw = k.to_string();
                    break;
                }
                seq.pop();
            }
            if seq.len() > again.len() {
                continue;
            }
            break;
        }
        let (s, d) = match (kw.as_str(), fam) {
            ("host" | "net", 4) => (Field::Src4, Field::Dst4),
            ("host" | "net", _) => (Field::Src6, Field::Dst6),
            _ => (Field::Sport, Field::Dport),
        };
        Ok(match dir {
            Dir::Src => Prim::One(s, ranges),
            Dir::Dst => Prim::One(d, ranges),
            Dir::Either => Prim::Either(s, d, ranges),
        })
    }
}

fn number(s: &str, max: u128, what: &str) -> Result<u128, String> {
    let v = if let Some(h) = s.strip_prefix("0x") {
        u128::from_str_radix(h, 16)
    } else {
        s.parse::<u128>()
    };
    match v {
        Ok(v) if v <= max => Ok(v),
        Ok(_) => Err(format!("{what} {s} is out of range 0..={max}")),
        Err(_) => Err(format!("`{s}` is not a {what}")),
    }
}

fn port(s: &str) -> Result<u128, String> {
    const NAMES: &[(&str, u128)] = &[
        ("ftp-data", 20),
        ("ftp", 21),
        ("ssh", 22),
        ("telnet", 23),
        ("smtp", 25),
        ("domain", 53),
        ("dns", 53),
        ("bootps", 67),
        ("bootpc", 68),
        ("http", 80),
        ("pop3", 110),
        ("ntp", 123),
        ("imap", 143),
        ("snmp", 161),
        ("bgp", 179),
        ("ldap", 389),
        ("https", 443),
        ("syslog", 514),
        ("submission", 587),
        ("imaps", 993),
        ("pop3s", 995),
    ];
    if let Some((_, p)) = NAMES.iter().find(|(n, _)| *n == s) {
        return Ok(*p);
    }
    number(s, 65535, "port")
}

fn proto_number(s: &str) -> Result<u128, String> {
    if let Some((_, p)) = PROTO_NAMES.iter().find(|(n, _)| *n == s) {
        return Ok(*p);
    }
    number(s, 255, "protocol number")
}

fn icmp_type(s: &str, v6: bool) -> Result<u128, String> {
    const V4: &[(&str, u128)] = &[
        ("echo-reply", 0),
        ("unreachable", 3),
        ("dest-unreachable", 3),
        ("source-quench", 4),
        ("redirect", 5),
        ("echo-request", 8),
        ("router-advertisement", 9),
        ("router-solicitation", 10),
        ("time-exceeded", 11),
        ("parameter-problem", 12),
        ("timestamp", 13),
        ("timestamp-reply", 14),
    ];
    const V6: &[(&str, u128)] = &[
        ("unreachable", 1),
        ("dest-unreachable", 1),
        ("packet-too-big", 2),
        ("time-exceeded", 3),
        ("parameter-problem", 4),
        ("echo-request", 128),
        ("echo-reply", 129),
        ("router-solicitation", 133),
        ("router-advertisement", 134),
        ("neighbor-solicitation", 135),
        ("neighbor-advertisement", 136),
        ("redirect", 137),
    ];
    let names = if v6 { V6 } else { V4 };
    let t = match names.iter().find(|(n, _)| *n == s) {
        Some((_, t)) => *t,
        None if s.starts_with(|c: char| c.is_ascii_digit()) => number(s, 255, "ICMP type")?,
        None => {
            return Err(format!(
                "unknown ICMP{} type `{s}`",
                if v6 { "v6" } else { "" }
            ))
        }
    };
    Ok(if v6 { 256 + t } else { t })
}

/// `syn,!ack`: every named flag set, every `!`-flag clear, others free. As a set of
/// flag bytes (small: 256 values) so it is one atom like any other.
fn tcp_flags(spec: &str) -> Result<Vec<(u128, u128)>, String> {
    const NAMES: &[(&str, u8)] = &[
        ("fin", 0x01),
        ("syn", 0x02),
        ("rst", 0x04),
        ("psh", 0x08),
        ("push", 0x08),
        ("ack", 0x10),
        ("urg", 0x20),
        ("ece", 0x40),
        ("cwr", 0x80),
    ];
    let (mut mask, mut val) = (0u8, 0u8);
    for f in spec.split(',').filter(|f| !f.is_empty()) {
        let (clear, name) = match f.strip_prefix('!') {
            Some(n) => (true, n),
            None => (false, f),
        };
        let Some((_, b)) = NAMES.iter().find(|(n, _)| *n == name) else {
            return Err(format!(
                "unknown TCP flag `{name}` (fin, syn, rst, psh, ack, urg, ece, cwr)"
            ));
        };
        mask |= b;
        if !clear {
            val |= b;
        }
    }
    if mask == 0 {
        return Err(format!("no TCP flags in `{spec}`"));
    }
    Ok((0u16..256)
        .filter(|&b| (b as u8) & mask == val)
        .map(|b| (b as u128, b as u128))
        .collect())
}

/// An address or `addr/len` as (family, first, last) in the family's field domain, by
/// the parser every NF shares ([`crate::nfs::prefix`]).
fn prefix(s: &str, host: bool) -> Result<(u8, u128, u128), String> {
    if host && s.contains('/') {
        return Err(format!("`host {s}`: use `net` for a prefix"));
    }
    let p = crate::nfs::prefix::Prefix::parse(s)?;
    let (lo, hi) = p.range();
    Ok((if p.addr.is_ipv4() { 4 } else { 6 }, lo, hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Rule {
        Rule::parse(s).unwrap().unwrap()
    }

    fn e(s: &str) -> String {
        Rule::parse(s).unwrap_err()
    }

    #[test]
    fn lists_and_directions() {
        let r = p("allow tcp dst port 80 or 443 # web");
        assert_eq!(r.action, Action::Allow);
        assert_eq!(r.variants.len(), 1);
        assert_eq!(
            r.variants[0].atoms[Field::Dport as usize][0].ranges,
            vec![(80, 80), (443, 443)]
        );
        assert_eq!(p("allow port 80 or port 443").variants.len(), 2);
        assert_eq!(p("allow host 10.0.0.1 and port 53").variants.len(), 4);
        assert_eq!(p("deny not host 10.0.0.1").variants.len(), 1);
        assert_eq!(p("allow src or dst port 22").variants.len(), 2);
        let r = p("allow tcp or udp");
        assert_eq!(r.variants[0].atoms[0][0].ranges.len(), 4);
        assert!(Rule::parse("  # only a comment").unwrap().is_none());
        p("allow not (port 80 or 443)");
        p("allow icmp type echo-request or echo-reply");
        p("allow tcp flags syn,!ack");
        p("deny ip6 and net 2001:db8::/32");
        p("allow udp portrange 1000-2000 or 3000-3001");
    }

    #[test]
    fn errors_say_why() {
        assert_eq!(e("allow prot 6"), "unknown keyword `prot`");
        assert_eq!(
            e("deny src net 10.0.0.0/33"),
            "bad prefix `10.0.0.0/33`: length must be 0..=32"
        );
        assert_eq!(
            e("deny net 10.0.0.1/8"),
            "bad prefix `10.0.0.1/8`: bits set past the /8"
        );
        assert_eq!(
            e("allow port 70000"),
            "port 70000 is out of range 0..=65535"
        );
        assert_eq!(
            e("permitt all"),
            "a rule starts with `allow` or `deny`, not `permitt`"
        );
        assert_eq!(
            e("allow not port 80 or 443"),
            "`not` negates one value: write `not (… or …)` for a list"
        );
        assert_eq!(
            e("allow port 80 or host 1.2.3.4"),
            "`or` may only join values of one field (e.g. `port 80 or 443`), not `host`"
        );
        assert_eq!(
            e("allow tcp flags syn,foo"),
            "unknown TCP flag `foo` (fin, syn, rst, psh, ack, urg, ece, cwr)"
        );
        assert_eq!(
            e("allow portrange 9-3"),
            "port range `9-3` is empty (9 > 3)"
        );
        assert_eq!(
            e("allow"),
            "missing match after the action (write `all` to match everything)"
        );
    }
}
