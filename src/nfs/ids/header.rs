//! The rule header: protocol, address and port groups (CIDR, lists, negation, variables,
//! ranges) and direction, flattened at parse time into positive and negative sets.

use std::net::IpAddr;

use super::vars::Vars;

/// An address as the engine sees it; IPv4 and IPv6 never match each other's ranges.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ip {
    V4(u32),
    V6(u128),
}

impl From<IpAddr> for Ip {
    fn from(a: IpAddr) -> Ip {
        match a {
            IpAddr::V4(v) => Ip::V4(u32::from(v)),
            IpAddr::V6(v) => Ip::V6(u128::from(v)),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Net {
    Any,
    V4(u32, u8),
    V6(u128, u8),
}

impl Net {
    fn contains(self, ip: Ip) -> bool {
        match (self, ip) {
            (Net::Any, _) => true,
            (Net::V4(n, p), Ip::V4(a)) => p == 0 || (a ^ n) >> (32 - p as u32) == 0,
            (Net::V6(n, p), Ip::V6(a)) => p == 0 || (a ^ n) >> (128 - p as u32) == 0,
            _ => false,
        }
    }
}

/// A flattened address group: matches when some positive entry (or none given) holds the
/// address and no negative entry does.
#[derive(Clone, Debug, Default)]
pub struct AddrSet {
    pos: Vec<Net>,
    neg: Vec<Net>,
}

impl AddrSet {
    pub fn parse(s: &str, vars: &Vars) -> Result<AddrSet, String> {
        let mut set = AddrSet::default();
        flatten(
            s,
            vars,
            false,
            0,
            &mut |neg, item| {
                let net = parse_net(item)?;
                if neg {
                    set.neg.push(net)
                } else {
                    set.pos.push(net)
                }
                Ok(())
            },
            &|v, n| v.addr(n),
        )?;
        Ok(set)
    }

    pub fn matches(&self, ip: Ip) -> bool {
        (self.pos.is_empty() || self.pos.iter().any(|n| n.contains(ip)))
            && !self.neg.iter().any(|n| n.contains(ip))
    }

    pub fn is_any(&self) -> bool {
        self.neg.is_empty() && (self.pos.is_empty() || self.pos.contains(&Net::Any))
    }
}

/// A flattened port group of inclusive ranges.
#[derive(Clone, Debug, Default)]
pub struct PortSet {
    pos: Vec<(u16, u16)>,
    neg: Vec<(u16, u16)>,
}

impl PortSet {
    pub fn parse(s: &str, vars: &Vars) -> Result<PortSet, String> {
        let mut set = PortSet::default();
        flatten(
            s,
            vars,
            false,
            0,
            &mut |neg, item| {
                let r = parse_port_range(item)?;
                if neg {
                    set.neg.push(r)
                } else {
                    set.pos.push(r)
                }
                Ok(())
            },
            &|v, n| v.port(n),
        )?;
        Ok(set)
    }

    pub fn is_any(&self) -> bool {
        self.neg.is_empty() && (self.pos.is_empty() || self.pos.contains(&(0, u16::MAX)))
    }

    pub fn matches(&self, p: u16) -> bool {
        (self.pos.is_empty() || self.pos.iter().any(|&(lo, hi)| lo <= p && p <= hi))
            && !self.neg.iter().any(|&(lo, hi)| lo <= p && p <= hi)
    }
}

type Lookup = dyn for<'a> Fn(&'a Vars, &str) -> Option<&'a str>;

/// Walks `[a,!b,[c,d]]`, `!$VAR`, … calling `f(negated, item)` for each leaf.
fn flatten(
    s: &str,
    vars: &Vars,
    neg: bool,
    depth: u32,
    f: &mut dyn FnMut(bool, &str) -> Result<(), String>,
    lookup: &Lookup,
) -> Result<(), String> {
    if depth > 16 {
        return Err(format!("`{s}`: variables or lists nested too deeply"));
    }
    let s = s.trim();
    if s.is_empty() {
        return Err("empty address or port".into());
    }
    if let Some(rest) = s.strip_prefix('!') {
        return flatten(rest, vars, !neg, depth + 1, f, lookup);
    }
    if let Some(name) = s.strip_prefix('$') {
        let v = lookup(vars, name).ok_or_else(|| format!("unknown variable ${name}"))?;
        return flatten(v, vars, neg, depth + 1, f, lookup);
    }
    if let Some(inner) = s.strip_prefix('[') {
        let inner = inner
            .strip_suffix(']')
            .ok_or_else(|| format!("`{s}`: unbalanced brackets"))?;
        for part in split_top(inner)? {
            flatten(part, vars, neg, depth + 1, f, lookup)?;
        }
        return Ok(());
    }
    f(neg, s)
}

/// Splits a list body on the commas outside nested brackets.
fn split_top(s: &str) -> Result<Vec<&str>, String> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if depth < 0 {
            return Err(format!("`{s}`: unbalanced brackets"));
        }
    }
    if depth != 0 {
        return Err(format!("`{s}`: unbalanced brackets"));
    }
    out.push(&s[start..]);
    Ok(out)
}

fn parse_net(s: &str) -> Result<Net, String> {
    if s.eq_ignore_ascii_case("any") {
        return Ok(Net::Any);
    }
    let (addr, len) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let ip: IpAddr = addr
        .parse()
        .map_err(|_| format!("`{s}` is not an address"))?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let p = match len {
        None => max,
        Some(l) => match l.parse::<u8>() {
            Ok(p) if p <= max => p,
            // A dotted netmask, e.g. 10.0.0.0/255.0.0.0.
            _ => match l.parse::<std::net::Ipv4Addr>() {
                Ok(m) if ip.is_ipv4() => u32::from(m).leading_ones() as u8,
                _ => return Err(format!("`{s}`: bad prefix length")),
            },
        },
    };
    Ok(match Ip::from(ip) {
        Ip::V4(a) => Net::V4(
            if p == 0 {
                0
            } else {
                a & (u32::MAX << (32 - p as u32))
            },
            p,
        ),
        Ip::V6(a) => Net::V6(
            if p == 0 {
                0
            } else {
                a & (u128::MAX << (128 - p as u32))
            },
            p,
        ),
    })
}

fn parse_port_range(s: &str) -> Result<(u16, u16), String> {
    if s.eq_ignore_ascii_case("any") {
        return Ok((0, u16::MAX));
    }
    let num = |t: &str, dflt: u16| -> Result<u16, String> {
        let t = t.trim();
        if t.is_empty() {
            return Ok(dflt);
        }
        t.parse().map_err(|_| format!("`{s}` is not a port"))
    };
    match s.split_once(':') {
        Some((lo, hi)) => {
            let (lo, hi) = (num(lo, 0)?, num(hi, u16::MAX)?);
            if lo > hi {
                return Err(format!("`{s}`: empty port range"));
            }
            Ok((lo, hi))
        }
        None => {
            let p = num(s, 0)?;
            if s.trim().is_empty() {
                return Err("empty port".into());
            }
            Ok((p, p))
        }
    }
}

/// Transport protocols the engine can match, from the header's protocol field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    /// Any IP packet.
    Ip,
    Tcp,
    Udp,
    Icmp,
    /// TCP flows that the HTTP parser recognised.
    Http,
}

impl Proto {
    pub fn parse(s: &str) -> Option<Proto> {
        Some(match s.to_ascii_lowercase().as_str() {
            "ip" | "ipv4" | "ipv6" => Proto::Ip,
            "tcp" | "tcp-pkt" | "tcp-stream" => Proto::Tcp,
            "udp" => Proto::Udp,
            "icmp" | "icmpv4" | "icmpv6" => Proto::Icmp,
            "http" | "http1" => Proto::Http,
            _ => return None,
        })
    }

    /// Does a packet with this IP protocol number fall under the rule's protocol?
    pub fn covers(self, ip_proto: u8) -> bool {
        match self {
            Proto::Ip => true,
            Proto::Tcp | Proto::Http => ip_proto == 6,
            Proto::Udp => ip_proto == 17,
            Proto::Icmp => ip_proto == 1 || ip_proto == 58,
        }
    }
}

/// The addresses and ports of one rule header.
#[derive(Clone, Debug)]
pub struct Header {
    pub proto: Proto,
    pub src: AddrSet,
    pub sport: PortSet,
    pub dst: AddrSet,
    pub dport: PortSet,
    /// `<>`: either orientation matches.
    pub both: bool,
}

impl Header {
    /// Does a packet from `src:sport` to `dst:dport` match (protocol checked by the caller)?
    pub fn matches(&self, src: Ip, sport: u16, dst: Ip, dport: u16) -> bool {
        let fwd = self.src.matches(src)
            && self.dst.matches(dst)
            && self.sport.matches(sport)
            && self.dport.matches(dport);
        fwd || (self.both
            && self.src.matches(dst)
            && self.dst.matches(src)
            && self.sport.matches(dport)
            && self.dport.matches(sport))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(s: &str) -> Ip {
        Ip::from(s.parse::<IpAddr>().unwrap())
    }

    #[test]
    fn address_groups_with_negation_and_variables() {
        let vars = Vars::suricata_defaults();
        let home = AddrSet::parse("$HOME_NET", &vars).unwrap();
        assert!(home.matches(v4("10.1.2.3")) && !home.matches(v4("8.8.8.8")));
        let ext = AddrSet::parse("$EXTERNAL_NET", &vars).unwrap();
        assert!(!ext.matches(v4("10.1.2.3")) && ext.matches(v4("8.8.8.8")));
        let l = AddrSet::parse("[1.2.3.0/24,!1.2.3.4]", &vars).unwrap();
        assert!(l.matches(v4("1.2.3.5")) && !l.matches(v4("1.2.3.4")));
        assert!(!l.matches(v4("1.2.4.1")));
        let six = AddrSet::parse("2001:db8::/32", &vars).unwrap();
        assert!(six.matches(Ip::from("2001:db8::1".parse::<IpAddr>().unwrap())));
        assert!(!six.matches(v4("1.2.3.4")));
        assert!(AddrSet::parse("$NOPE", &vars).is_err());
        assert!(AddrSet::parse("[1.2.3.4", &vars).is_err());
        assert!(AddrSet::parse("1.2.3.4/33", &vars).is_err());
    }

    #[test]
    fn port_groups() {
        let vars = Vars::suricata_defaults();
        let p = PortSet::parse("[80,1024:2048,!1500]", &vars).unwrap();
        assert!(p.matches(80) && p.matches(1024) && p.matches(2048));
        assert!(!p.matches(1500) && !p.matches(81));
        assert!(PortSet::parse(":100", &vars).unwrap().matches(0));
        assert!(PortSet::parse("!$HTTP_PORTS", &vars).unwrap().matches(81));
        assert!(!PortSet::parse("!$HTTP_PORTS", &vars).unwrap().matches(80));
        assert!(PortSet::parse("70000", &vars).is_err());
        assert!(PortSet::parse("10:5", &vars).is_err());
    }
}
