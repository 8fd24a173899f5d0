//! IP prefixes as config and rules write them (`10.0.0.0/8`, `2001:db8::/32`, a bare
//! address for one host): the one parser every NF uses, so a form one rejects no other
//! accepts (e.g. `10.1.2.3/8`, whose address has bits past its length, is refused rather
//! than silently masked).

use std::net::IpAddr;

/// A parsed prefix: its first address, length, and the last address it covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefix {
    pub addr: IpAddr,
    pub len: u8,
}

impl Prefix {
    /// `addr` or `addr/len`. The address must have no bits set past the length.
    pub fn parse(s: &str) -> Result<Prefix, String> {
        let (a, len) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = a
            .parse()
            .map_err(|_| format!("`{a}` is not an IPv4 or IPv6 address"))?;
        let bits = Self::bits_of(&addr);
        let len = match len {
            None => bits,
            Some(l) => match l.parse::<u8>() {
                Ok(n) if n <= bits => n,
                _ => return Err(format!("bad prefix `{s}`: length must be 0..={bits}")),
            },
        };
        let p = Prefix { addr, len };
        if p.value() & p.host_mask() != 0 {
            return Err(format!("bad prefix `{s}`: bits set past the /{len}"));
        }
        Ok(p)
    }

    fn bits_of(a: &IpAddr) -> u8 {
        if a.is_ipv4() {
            32
        } else {
            128
        }
    }

    /// The address as a number in its family's domain (IPv4 in the low 32 bits).
    pub fn value(&self) -> u128 {
        match self.addr {
            IpAddr::V4(x) => u32::from(x) as u128,
            IpAddr::V6(x) => u128::from(x),
        }
    }

    /// The bits past the length, all ones.
    pub fn host_mask(&self) -> u128 {
        let host = u32::from(Self::bits_of(&self.addr) - self.len);
        if host >= 128 {
            u128::MAX
        } else {
            (1u128 << host) - 1
        }
    }

    /// First and last address covered, in the family's domain.
    pub fn range(&self) -> (u128, u128) {
        let v = self.value();
        (v, v | self.host_mask())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_and_their_errors() {
        let p = Prefix::parse("10.0.0.0/8").unwrap();
        assert_eq!(p.range(), (0x0a00_0000, 0x0aff_ffff));
        assert_eq!(Prefix::parse("1.2.3.4").unwrap().len, 32);
        assert_eq!(Prefix::parse("::/0").unwrap().range(), (0, u128::MAX));
        assert_eq!(
            Prefix::parse("10.1.2.3/8").unwrap_err(),
            "bad prefix `10.1.2.3/8`: bits set past the /8"
        );
        assert_eq!(
            Prefix::parse("10.0.0.0/33").unwrap_err(),
            "bad prefix `10.0.0.0/33`: length must be 0..=32"
        );
        assert_eq!(
            Prefix::parse("ten/8").unwrap_err(),
            "`ten` is not an IPv4 or IPv6 address"
        );
    }
}
