//! Tokens of a pipeline program: names, numbers (decimal, hex, dotted IPv4, colon MAC),
//! and punctuation. `#` starts a comment to the end of the line.

use super::error::{Diag, Span};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tok {
    Ident(String),
    /// A number; `bits` is the width its spelling implies (32 for IPv4, 48 for a MAC), 0
    /// when plain.
    Num {
        value: u128,
        bits: u32,
    },
    Sym(&'static str),
    Eof,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    pub tok: Tok,
    pub span: Span,
}

/// Longest first, so `=>` is not read as `=` then `>`.
const SYMS: &[&str] = &[
    "=>", "->", "==", "!=", "<=", ">=", "&&", "||", "<<", ">>", "{", "}", "(", ")", "[", "]", ";",
    ":", ",", ".", "=", "<", ">", "!", "&", "|", "^", "+", "-", "*", "/",
];

pub fn lex(src: &str) -> Result<Vec<Token>, Diag> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if c == b'#' {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        let start = i;
        if let Some(v) = mac_at(b, i) {
            i += 17;
            out.push(Token {
                tok: Tok::Num {
                    value: v as u128,
                    bits: 48,
                },
                span: Span::new(start, i),
            });
            continue;
        }
        if c.is_ascii_alphabetic() || c == b'_' {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(Token {
                tok: Tok::Ident(src[start..i].to_string()),
                span: Span::new(start, i),
            });
            continue;
        }
        if c.is_ascii_digit() {
            let (tok, n) = number(src, i)?;
            i += n;
            out.push(Token {
                tok,
                span: Span::new(start, i),
            });
            continue;
        }
        let Some(s) = SYMS.iter().find(|s| b[i..].starts_with(s.as_bytes())) else {
            let ch = src[i..].chars().next().unwrap_or('?');
            return Err(Diag::new(
                Span::new(i, i + ch.len_utf8()),
                format!("unexpected character `{ch}`"),
            ));
        };
        i += s.len();
        out.push(Token {
            tok: Tok::Sym(s),
            span: Span::new(start, i),
        });
    }
    out.push(Token {
        tok: Tok::Eof,
        span: Span::new(b.len(), b.len()),
    });
    Ok(out)
}

/// `xx:xx:xx:xx:xx:xx` at `i`, not followed by more of a name or number.
fn mac_at(b: &[u8], i: usize) -> Option<u64> {
    let s = b.get(i..i + 17)?;
    let mut v = 0u64;
    for (k, &c) in s.iter().enumerate() {
        if k % 3 == 2 {
            if c != b':' {
                return None;
            }
        } else {
            v = v << 4 | (c as char).to_digit(16)? as u64;
        }
    }
    match b.get(i + 17) {
        Some(c) if c.is_ascii_alphanumeric() || *c == b'_' || *c == b':' => None,
        _ => Some(v),
    }
}

fn number(src: &str, i: usize) -> Result<(Tok, usize), Diag> {
    let b = src.as_bytes();
    let word_end = |mut j: usize| {
        while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_') {
            j += 1;
        }
        j
    };
    let bad = |end: usize, what: &str| {
        Diag::new(
            Span::new(i, end),
            format!("`{}` is not a {what}", &src[i..end]),
        )
    };
    if b[i..].starts_with(b"0x") || b[i..].starts_with(b"0X") {
        let end = word_end(i + 2);
        let digits: String = src[i + 2..end].chars().filter(|&c| c != '_').collect();
        let v = u128::from_str_radix(&digits, 16).map_err(|_| bad(end, "hex number"))?;
        return Ok((Tok::Num { value: v, bits: 0 }, end - i));
    }
    let end = word_end(i);
    // A dotted IPv4 address: four decimal parts.
    if b.get(end) == Some(&b'.') && b.get(end + 1).is_some_and(|c| c.is_ascii_digit()) {
        let mut j = i;
        let mut v = 0u128;
        for part in 0..4 {
            let e = word_end(j);
            let n: u8 = src[j..e]
                .parse()
                .map_err(|_| bad(e, "valid IPv4 address"))?;
            v = v << 8 | n as u128;
            j = e;
            if part < 3 {
                if b.get(j) != Some(&b'.') {
                    return Err(bad(j, "valid IPv4 address"));
                }
                j += 1;
            }
        }
        return Ok((Tok::Num { value: v, bits: 32 }, j - i));
    }
    let digits: String = src[i..end].chars().filter(|&c| c != '_').collect();
    let v: u128 = digits.parse().map_err(|_| bad(end, "number"))?;
    Ok((Tok::Num { value: v, bits: 0 }, end - i))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<Tok> {
        lex(s).unwrap().into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn numbers_of_every_spelling() {
        assert_eq!(
            toks("10.0.0.1 0x8100 02:00:00:00:00:0a 42"),
            vec![
                Tok::Num {
                    value: 0x0a00_0001,
                    bits: 32
                },
                Tok::Num {
                    value: 0x8100,
                    bits: 0
                },
                Tok::Num {
                    value: 0x0200_0000_000a,
                    bits: 48
                },
                Tok::Num { value: 42, bits: 0 },
                Tok::Eof
            ]
        );
    }

    #[test]
    fn symbols_longest_first_and_comments() {
        assert_eq!(
            toks("a => b # c\n->"),
            vec![
                Tok::Ident("a".into()),
                Tok::Sym("=>"),
                Tok::Ident("b".into()),
                Tok::Sym("->"),
                Tok::Eof
            ]
        );
        assert!(lex("a $ b").is_err());
        assert!(lex("1.2.3.999").is_err());
    }
}
