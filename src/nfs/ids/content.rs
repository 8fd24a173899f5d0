//! Content and pcre tests on one buffer: windows from offset/depth/distance/within,
//! negation, and backtracking over earlier matches, as Suricata's content inspection does.

use memchr::memmem;

use super::pcre::Pcre;

/// A `content` and its modifiers.
#[derive(Clone, Debug, Default)]
pub struct Content {
    pub pat: Vec<u8>,
    pub nocase: bool,
    pub negated: bool,
    pub offset: Option<u32>,
    pub depth: Option<u32>,
    pub distance: Option<i32>,
    pub within: Option<u32>,
    pub startswith: bool,
    pub endswith: bool,
    pub fast_pattern: bool,
}

impl Content {
    pub fn is_relative(&self) -> bool {
        self.distance.is_some() || self.within.is_some()
    }
}

/// One test of a rule on one buffer.
#[derive(Clone, Debug)]
pub enum Test {
    Content(Content),
    Pcre(Pcre),
}

/// Bounds the backtracking work of one rule on one buffer; past it the rule does not match.
pub const STEP_BUDGET: u32 = 4096;

/// Where the buffer sits: `base` is the offset of `buf[0]` from where `offset`/`depth`
/// count (0 for packets and HTTP buffers; for the stream, from the start of the chunk
/// Suricata 7 inspects, its raw progress: it passes no stream offset to the content
/// inspection); a match must end after `fresh` (bytes before it were inspected already).
#[derive(Clone, Copy)]
pub struct Span {
    pub base: i64,
    pub fresh: Option<usize>,
}

/// Do all `tests` match `buf` in order?
pub fn matches(tests: &[Test], buf: &[u8], span: Span) -> bool {
    let mut budget = STEP_BUDGET;
    step(tests, buf, span, 0, 0, &mut budget)
}

fn step(
    tests: &[Test],
    buf: &[u8],
    span: Span,
    prev_end: usize,
    max_end: usize,
    budget: &mut u32,
) -> bool {
    let Some((t, rest)) = tests.split_first() else {
        return match span.fresh {
            Some(f) => max_end > f,
            None => true,
        };
    };
    if *budget == 0 {
        return false;
    }
    *budget -= 1;
    match t {
        Test::Content(c) => {
            let Some((lo, hi)) = window(c, buf.len(), span.base, prev_end) else {
                return c.negated && step(rest, buf, span, prev_end, max_end, budget);
            };
            if c.negated {
                let found = if c.endswith {
                    ends_with(c, buf, lo, hi)
                } else {
                    find(&buf[lo..hi], &c.pat, c.nocase).is_some()
                };
                return !found && step(rest, buf, span, prev_end, max_end, budget);
            }
            if c.endswith {
                return ends_with(c, buf, lo, hi)
                    && step(rest, buf, span, hi, max_end.max(hi), budget);
            }
            let once = independent(rest, span);
            let mut from = lo;
            while let Some(p) = find(&buf[from..hi], &c.pat, c.nocase) {
                let end = from + p + c.pat.len();
                if step(rest, buf, span, end, max_end.max(end), budget) {
                    return true;
                }
                if *budget == 0 || once {
                    return false;
                }
                *budget -= 1;
                from += p + 1;
            }
            false
        }
        Test::Pcre(r) => {
            let start = if r.relative {
                prev_end.min(buf.len())
            } else {
                0
            };
            if r.negated {
                return r.matches_at(buf, start).is_none()
                    && step(rest, buf, span, prev_end, max_end, budget);
            }
            let once = independent(rest, span);
            let mut from = start;
            while let Some((s, e)) = r.matches_at(buf, from) {
                if r.anchored && s != start {
                    return false;
                }
                if step(rest, buf, span, e, max_end.max(e), budget) {
                    return true;
                }
                if *budget == 0 || once || r.anchored || e >= buf.len() {
                    return false;
                }
                *budget -= 1;
                from = s + 1;
            }
            false
        }
    }
}

/// Does the outcome of `rest` not depend on where the test before it matched? True when
/// its first test that is not a negated absolute one is absolute, and no `fresh` bound
/// makes the furthest match end count. Then a later match of the test before cannot
/// change the result, and backtracking over it (one regex call per position of a long
/// header for `pcre:"/(.*)\r\n/R"; content:"xyz";`) is only cost.
fn independent(rest: &[Test], span: Span) -> bool {
    if span.fresh.is_some() {
        return false;
    }
    for t in rest {
        match t {
            Test::Content(c) if c.is_relative() => return false,
            Test::Content(c) if c.negated => continue,
            Test::Pcre(r) if r.relative => return false,
            Test::Pcre(r) if r.negated => continue,
            _ => return true,
        }
    }
    true
}

/// The byte range of `buf` a content may occupy, or None when it cannot fit.
fn window(c: &Content, len: usize, base: i64, prev_end: usize) -> Option<(usize, usize)> {
    let (lo, hi) = if c.is_relative() {
        let lo = prev_end as i64 + c.distance.unwrap_or(0) as i64;
        let hi = match c.within {
            Some(w) => lo + w as i64,
            None => len as i64,
        };
        (lo.max(0), hi.min(len as i64))
    } else {
        let off = c.offset.unwrap_or(0) as i64 - base;
        let hi = match (c.depth, c.startswith) {
            (_, true) => off + c.pat.len() as i64,
            (Some(d), _) => off + d as i64,
            (None, _) => len as i64,
        };
        (off.max(0), hi.min(len as i64))
    };
    if hi - lo < c.pat.len() as i64 {
        return None;
    }
    Some((lo as usize, hi as usize))
}

fn ends_with(c: &Content, buf: &[u8], lo: usize, hi: usize) -> bool {
    hi == buf.len() && hi - lo >= c.pat.len() && eq(&buf[hi - c.pat.len()..hi], &c.pat, c.nocase)
}

fn eq(a: &[u8], b: &[u8], nocase: bool) -> bool {
    if nocase {
        a.eq_ignore_ascii_case(b)
    } else {
        a == b
    }
}

/// First position of `pat` in `hay`; `nocase` folds ASCII letters.
pub fn find(hay: &[u8], pat: &[u8], nocase: bool) -> Option<usize> {
    if pat.is_empty() {
        return Some(0);
    }
    if hay.len() < pat.len() {
        return None;
    }
    if !nocase {
        return memmem::find(hay, pat);
    }
    let (a, b) = (pat[0].to_ascii_lowercase(), pat[0].to_ascii_uppercase());
    let last = hay.len() - pat.len();
    let mut from = 0;
    while from <= last {
        let p = from + memchr::memchr2(a, b, &hay[from..=last])?;
        if hay[p..p + pat.len()].eq_ignore_ascii_case(pat) {
            return Some(p);
        }
        from = p + 1;
    }
    None
}

/// Decodes a content string: `|41 42|` hex runs between plain text.
pub fn decode_pattern(s: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(s.len());
    let mut hex = false;
    let mut nib: Option<u8> = None;
    for &b in s.as_bytes() {
        if b == b'|' {
            if nib.is_some() {
                return Err(format!("`{s}`: odd number of hex digits"));
            }
            hex = !hex;
        } else if hex {
            if b == b' ' {
                continue;
            }
            let d = (b as char)
                .to_digit(16)
                .ok_or_else(|| format!("`{s}`: `{}` is not a hex digit", b as char))?
                as u8;
            match nib.take() {
                Some(h) => out.push(h << 4 | d),
                None => nib = Some(d),
            }
        } else {
            out.push(b);
        }
    }
    if hex {
        return Err(format!("`{s}`: unterminated `|` hex run"));
    }
    if out.is_empty() {
        return Err("empty content".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(p: &str) -> Content {
        Content {
            pat: p.as_bytes().to_vec(),
            ..Content::default()
        }
    }

    const PKT: Span = Span {
        base: 0,
        fresh: None,
    };

    #[test]
    fn hex_patterns() {
        assert_eq!(decode_pattern("a|41 42|b").unwrap(), b"aABb");
        assert!(decode_pattern("|4|").is_err());
        assert!(decode_pattern("|41").is_err());
        assert!(decode_pattern("|zz|").is_err());
    }

    #[test]
    fn offset_depth_distance_within() {
        let buf = b"GET /index.html HTTP/1.1";
        let mut a = c("GET");
        a.depth = Some(3);
        let mut b = c("HTTP");
        b.distance = Some(0);
        assert!(matches(
            &[Test::Content(a.clone()), Test::Content(b.clone())],
            buf,
            PKT
        ));
        b.within = Some(5);
        assert!(!matches(
            &[Test::Content(a.clone()), Test::Content(b.clone())],
            buf,
            PKT
        ));
        let mut o = c("index");
        o.offset = Some(6);
        assert!(!matches(&[Test::Content(o.clone())], buf, PKT));
        o.offset = Some(5);
        o.depth = Some(5);
        assert!(matches(&[Test::Content(o)], buf, PKT));
        let mut n = c("post");
        n.nocase = true;
        n.negated = true;
        assert!(matches(&[Test::Content(n.clone())], buf, PKT));
        n.pat = b"get".to_vec();
        assert!(!matches(&[Test::Content(n)], buf, PKT));
    }

    #[test]
    fn backtracks_to_a_later_first_match() {
        // The first "a" is followed by "x" too far away; the second "a" works.
        let buf = b"a......ax";
        let mut x = c("x");
        x.distance = Some(0);
        x.within = Some(1);
        assert!(matches(
            &[Test::Content(c("a")), Test::Content(x)],
            buf,
            PKT
        ));
    }

    #[test]
    fn no_backtracking_when_the_rest_does_not_depend_on_it() {
        // `content:"User-Agent: "; pcre:"/(.*)\r\n/R"; content:"xyz";` on a long header
        // without "xyz": the outcome is the same for every position of the pcre match,
        // so one try, not one regex call per byte of the header until the budget runs out.
        let (re, _) = Pcre::parse("/(?P<flow_ua>.*)\r\n/R", false).unwrap();
        let mut buf = b"User-Agent: x\r\n".to_vec();
        for _ in 0..500 {
            buf.extend_from_slice(b"X-Filler: abcdefgh\r\n");
        }
        let ua = || Test::Content(c("User-Agent: "));
        let tests = [ua(), Test::Pcre(re.clone()), Test::Content(c("xyz"))];
        let mut budget = STEP_BUDGET;
        assert!(!step(&tests, &buf, PKT, 0, 0, &mut budget));
        assert!(STEP_BUDGET - budget <= 4, "{} steps", STEP_BUDGET - budget);
        // Still matches when it does, and still backtracks for a relative test.
        buf.extend_from_slice(b"xyz\r\n");
        assert!(matches(&tests, &buf, PKT));
        let mut rel = c("xyz");
        rel.distance = Some(0);
        let short = b"User-Agent: x\r\nHost: h\r\nxyz\r\n";
        assert!(matches(
            &[ua(), Test::Pcre(re), Test::Content(rel)],
            short,
            PKT
        ));
    }

    #[test]
    fn fresh_bytes_and_stream_offsets() {
        let buf = b"oldnew";
        let s = Span {
            base: 100,
            fresh: Some(3),
        };
        assert!(!matches(&[Test::Content(c("old"))], buf, s));
        assert!(matches(&[Test::Content(c("dne"))], buf, s));
        let mut d = c("new");
        d.depth = Some(50);
        assert!(
            !matches(&[Test::Content(d.clone())], buf, s),
            "depth counts from the chunk's start"
        );
        // The chunk starts at the buffer's fourth byte: `new` is within depth 3 of it.
        d.depth = Some(3);
        let s = Span {
            base: -3,
            fresh: Some(3),
        };
        assert!(matches(&[Test::Content(d)], buf, s));
    }
}
