//! `pcre:"/re/flags"` translated to the `regex` crate (bytes, no Unicode).
//!
//! Flags: `i s m x` become the inline flags of the same name, `G` (ungreedy) becomes `U`,
//! `A` anchors the match at the search start, `E` is the regex crate's `$` already, `R`
//! searches from the end of the previous match, and `B`/`O` are accepted and ignored.
//! Buffer flags select an HTTP buffer: `U` uri, `I` raw uri, `H` header, `D` raw header,
//! `M` method, `C` cookie, `P` request body, `Q` file data, `S` status code, `Y` status
//! message, `V` user agent, `W` host, `Z` raw host. Differences that remain: `$` without
//! `m` does not match before a final newline, and constructs the regex crate lacks
//! (backreferences, lookaround, possessive quantifiers, `\Z`) make the rule skipped.

use regex::bytes::{Regex, RegexBuilder};

use super::rule::Buf;

#[derive(Clone, Debug)]
pub struct Pcre {
    re: Regex,
    pub negated: bool,
    pub relative: bool,
    pub anchored: bool,
}

impl Pcre {
    /// `(s, e)` of the leftmost match starting at or after `from`.
    pub fn matches_at(&self, buf: &[u8], from: usize) -> Option<(usize, usize)> {
        if from > buf.len() {
            return None;
        }
        self.re.find_at(buf, from).map(|m| (m.start(), m.end()))
    }

    /// Parses the option value (already unquoted, negation stripped) and the buffer it names.
    pub fn parse(v: &str, negated: bool) -> Result<(Pcre, Option<Buf>), String> {
        let body = v
            .strip_prefix('/')
            .ok_or_else(|| format!("`{v}` does not start with `/`"))?;
        let end = body
            .rfind('/')
            .ok_or_else(|| format!("`{v}` has no closing `/`"))?;
        let (pat, flags) = (&body[..end], &body[end + 1..]);
        let mut b = RegexBuilder::new(pat);
        b.unicode(false).size_limit(1 << 20).dfa_size_limit(1 << 20);
        let (mut relative, mut anchored, mut buf) = (false, false, None);
        for f in flags.chars() {
            match f {
                'i' => drop(b.case_insensitive(true)),
                's' => drop(b.dot_matches_new_line(true)),
                'm' => drop(b.multi_line(true)),
                'x' => drop(b.ignore_whitespace(true)),
                'G' => drop(b.swap_greed(true)),
                'A' => anchored = true,
                'R' => relative = true,
                'E' | 'B' | 'O' => {}
                _ => {
                    let sel = match f {
                        'U' => Buf::HttpUri,
                        'I' => Buf::HttpUriRaw,
                        'H' => Buf::HttpHeader,
                        'D' => Buf::HttpHeaderRaw,
                        'M' => Buf::HttpMethod,
                        'C' => Buf::HttpCookie,
                        'P' => Buf::HttpRequestBody,
                        'Q' => Buf::FileData,
                        'S' => Buf::HttpStatCode,
                        'Y' => Buf::HttpStatMsg,
                        'V' => Buf::HttpUserAgent,
                        'W' => Buf::HttpHost,
                        'Z' => Buf::HttpHostRaw,
                        _ => return Err(format!("flag `{f}` is not supported")),
                    };
                    buf = Some(sel);
                }
            }
        }
        let re = b.build().map_err(|e| {
            let msg = e.to_string();
            let last = msg.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("");
            format!("unsupported construct: {}", last.trim())
        })?;
        Ok((
            Pcre {
                re,
                negated,
                relative,
                anchored,
            },
            buf,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_translate() {
        let (p, b) = Pcre::parse("/^get\\s+\\/x/iU", false).unwrap();
        assert_eq!(b, Some(Buf::HttpUri));
        assert_eq!(p.matches_at(b"GET  /x", 0), Some((0, 7)));
        let (p, _) = Pcre::parse("/a.b/s", false).unwrap();
        assert!(p.matches_at(b"a\nb", 0).is_some());
        let (p, _) = Pcre::parse("/a.b/", false).unwrap();
        assert!(p.matches_at(b"a\nb", 0).is_none());
        let (p, _) = Pcre::parse("/\\xff\\x00/", false).unwrap();
        assert_eq!(p.matches_at(b"a\xff\x00", 0), Some((1, 3)));
    }

    #[test]
    fn unsupported_is_an_error() {
        assert!(Pcre::parse("/(a)\\1/", false)
            .unwrap_err()
            .contains("unsupported"));
        assert!(Pcre::parse("/a(?=b)/", false).is_err());
        assert!(Pcre::parse("/a/K", false).unwrap_err().contains("`K`"));
        assert!(Pcre::parse("a/", false).is_err());
    }
}
