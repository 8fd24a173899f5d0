//! Per-packet header keywords: `flags`, `itype`, `icode`, `dsize`, `ttl`. A rule with any
//! of them inspects single packets (never the stream), as in Suricata.

/// A number test: `N`, `!N`, `<N`, `>N`, `<=N`, `>=N`, `A<>B` (exclusive), `A-B` (inclusive).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Num {
    Eq(u32),
    Ne(u32),
    Lt(u32),
    Gt(u32),
    Le(u32),
    Ge(u32),
    Between(u32, u32),
    Within(u32, u32),
}

impl Num {
    pub fn parse(v: &str) -> Result<Num, String> {
        let v = v.trim();
        let n = |s: &str| -> Result<u32, String> {
            s.trim()
                .parse()
                .map_err(|_| format!("`{v}` is not a number test"))
        };
        Ok(if let Some((a, b)) = v.split_once("<>") {
            let (a, b) = (n(a)?, n(b)?);
            if a >= b {
                return Err(format!("`{v}`: empty range"));
            }
            Num::Between(a, b)
        } else if let Some(r) = v.strip_prefix("<=") {
            Num::Le(n(r)?)
        } else if let Some(r) = v.strip_prefix(">=") {
            Num::Ge(n(r)?)
        } else if let Some(r) = v.strip_prefix('<') {
            Num::Lt(n(r)?)
        } else if let Some(r) = v.strip_prefix('>') {
            Num::Gt(n(r)?)
        } else if let Some(r) = v.strip_prefix('!') {
            Num::Ne(n(r)?)
        } else if let Some((a, b)) = v.split_once('-') {
            Num::Within(n(a)?, n(b)?)
        } else {
            Num::Eq(n(v)?)
        })
    }

    pub fn test(self, x: u32) -> bool {
        match self {
            Num::Eq(a) => x == a,
            Num::Ne(a) => x != a,
            Num::Lt(a) => x < a,
            Num::Gt(a) => x > a,
            Num::Le(a) => x <= a,
            Num::Ge(a) => x >= a,
            Num::Between(a, b) => a < x && x < b,
            Num::Within(a, b) => a <= x && x <= b,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlagMode {
    Exact,
    All,
    Any,
    None,
}

/// One per-packet check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PktCheck {
    Flags {
        want: u8,
        ignore: u8,
        mode: FlagMode,
    },
    IType(Num),
    ICode(Num),
    Dsize(Num),
    Ttl(Num),
}

/// The header fields the checks read.
#[derive(Clone, Copy, Debug, Default)]
pub struct PktFields {
    pub tcp_flags: u8,
    pub icmp_type: u8,
    pub icmp_code: u8,
    pub ttl: u8,
}

fn flag_bits(s: &str, v: &str) -> Result<u8, String> {
    let mut b = 0u8;
    for c in s.chars() {
        b |= match c.to_ascii_uppercase() {
            'F' => 0x01,
            'S' => 0x02,
            'R' => 0x04,
            'P' => 0x08,
            'A' => 0x10,
            'U' => 0x20,
            'E' | '2' => 0x40,
            'C' | '1' => 0x80,
            '0' => 0,
            _ => return Err(format!("`{v}`: `{c}` is not a TCP flag")),
        };
    }
    Ok(b)
}

impl PktCheck {
    pub fn parse(keyword: &str, v: &str) -> Result<PktCheck, String> {
        Ok(match keyword {
            "flags" => {
                let (f, mask) = match v.split_once(',') {
                    Some((f, m)) => (f.trim(), flag_bits(m.trim(), v)?),
                    None => (v.trim(), 0),
                };
                let (mode, f) = match f.chars().next() {
                    Some('+') => (FlagMode::All, &f[1..]),
                    Some('*') => (FlagMode::Any, &f[1..]),
                    Some('!') => (FlagMode::None, &f[1..]),
                    _ => (FlagMode::Exact, f),
                };
                // A modifier may also trail the flags (`SA+`).
                let (mode, f) = match f.chars().last() {
                    Some('+') => (FlagMode::All, &f[..f.len() - 1]),
                    Some('*') => (FlagMode::Any, &f[..f.len() - 1]),
                    _ => (mode, f),
                };
                if f.is_empty() {
                    return Err(format!("`{v}`: no flags"));
                }
                PktCheck::Flags {
                    want: flag_bits(f, v)?,
                    ignore: mask,
                    mode,
                }
            }
            "itype" => PktCheck::IType(Num::parse(v)?),
            "icode" => PktCheck::ICode(Num::parse(v)?),
            "dsize" => PktCheck::Dsize(Num::parse(v)?),
            "ttl" => PktCheck::Ttl(Num::parse(v)?),
            _ => return Err("not a packet keyword".into()),
        })
    }

    /// `ip_proto` guards the protocol-specific checks: flags need TCP, itype/icode ICMP.
    pub fn test(self, ip_proto: u8, f: &PktFields, dsize: usize) -> bool {
        match self {
            PktCheck::Flags { want, ignore, mode } => {
                if ip_proto != 6 {
                    return false;
                }
                let have = f.tcp_flags & !ignore;
                match mode {
                    FlagMode::Exact => have == want,
                    FlagMode::All => have & want == want,
                    FlagMode::Any => have & want != 0,
                    FlagMode::None => have & want == 0,
                }
            }
            PktCheck::IType(n) => matches!(ip_proto, 1 | 58) && n.test(f.icmp_type.into()),
            PktCheck::ICode(n) => matches!(ip_proto, 1 | 58) && n.test(f.icmp_code.into()),
            PktCheck::Dsize(n) => n.test(dsize.min(u32::MAX as usize) as u32),
            PktCheck::Ttl(n) => n.test(f.ttl.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_modes() {
        let f = |v: &str, have: u8| {
            PktCheck::parse("flags", v).unwrap().test(
                6,
                &PktFields {
                    tcp_flags: have,
                    ..PktFields::default()
                },
                0,
            )
        };
        assert!(f("S", 0x02) && !f("S", 0x12));
        assert!(f("S+", 0x12) && f("+S", 0x12) && !f("+S", 0x10));
        assert!(f("*SA", 0x10) && !f("*SA", 0x01));
        assert!(f("!R", 0x10) && !f("!R", 0x14));
        assert!(f("S,CE", 0xc2));
        assert!(f("0", 0));
        assert!(PktCheck::parse("flags", "Q").is_err());
    }

    #[test]
    fn numbers() {
        assert!(Num::parse("3<>8").unwrap().test(4) && !Num::parse("3<>8").unwrap().test(8));
        assert!(Num::parse(">=5").unwrap().test(5) && Num::parse("!5").unwrap().test(4));
        assert!(Num::parse("8<>3").is_err() && Num::parse("x").is_err());
    }
}
