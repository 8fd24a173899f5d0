//! Splits rule text into rules, each into header fields and `key:value;` options,
//! honouring quotes, `\;` escapes, bracketed lists and `\` line continuations.

/// One rule as text pieces, with the line it started on (1-based).
#[derive(Debug)]
pub struct RawRule<'a> {
    pub line: usize,
    pub header: Vec<&'a str>,
    pub options: Vec<(&'a str, &'a str)>,
}

/// Joins continued lines and drops comments and blanks: (first line number, rule text).
pub fn rule_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut cur: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        let (start, mut acc) = match cur.take() {
            Some(c) => c,
            None => {
                if t.is_empty() || t.starts_with('#') {
                    continue;
                }
                (i + 1, String::new())
            }
        };
        match t.strip_suffix('\\') {
            Some(body) => {
                acc.push_str(body);
                cur = Some((start, acc));
            }
            None => {
                acc.push_str(t);
                out.push((start, acc));
            }
        }
    }
    if let Some(c) = cur {
        out.push(c);
    }
    out
}

/// Splits one rule; errors name what is wrong.
pub fn split_rule(line: usize, text: &str) -> Result<RawRule<'_>, String> {
    let open = text.find('(').ok_or("no `(` starting the options")?;
    let close = text.rfind(')').ok_or("no `)` closing the options")?;
    if close < open {
        return Err("`)` before `(`".into());
    }
    if !text[close + 1..].trim().is_empty() {
        return Err("text after the closing `)`".into());
    }
    let header = split_header(&text[..open])?;
    let options = split_options(&text[open + 1..close])?;
    Ok(RawRule {
        line,
        header,
        options,
    })
}

/// Whitespace-separated fields, keeping `[a, b]` lists whole.
fn split_header(s: &str) -> Result<Vec<&str>, String> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, None);
    for (i, c) in s.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            _ => {}
        }
        if c.is_whitespace() && depth == 0 {
            if let Some(st) = start.take() {
                out.push(&s[st..i]);
            }
        } else if start.is_none() {
            start = Some(i);
        }
    }
    if depth != 0 {
        return Err("unbalanced brackets in the header".into());
    }
    if let Some(st) = start {
        out.push(&s[st..]);
    }
    Ok(out)
}

/// `key:value;` pairs; `;` inside quotes or after `\` does not end an option.
fn split_options(s: &str) -> Result<Vec<(&str, &str)>, String> {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let (mut start, mut quoted, mut i) = (0, false, 0);
    while i < b.len() {
        match b[i] {
            b'\\' => i += 1,
            b'"' => quoted = !quoted,
            b';' if !quoted => {
                push_option(&s[start..i], &mut out)?;
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    if quoted {
        return Err("unterminated quoted string".into());
    }
    if !s[start.min(s.len())..].trim().is_empty() {
        return Err(format!(
            "option `{}` is not ended by `;`",
            s[start..].trim()
        ));
    }
    Ok(out)
}

fn push_option<'a>(opt: &'a str, out: &mut Vec<(&'a str, &'a str)>) -> Result<(), String> {
    let opt = opt.trim();
    if opt.is_empty() {
        return Ok(());
    }
    let (k, v) = match opt.split_once(':') {
        Some((k, v)) => (k.trim(), v.trim()),
        None => (opt, ""),
    };
    if k.is_empty() || k.contains(char::is_whitespace) {
        return Err(format!("`{opt}` is not an option"));
    }
    out.push((k, v));
    Ok(())
}

/// The text of a quoted option value with `\"`, `\;`, `\:` and `\\` unescaped (content,
/// msg), or the bare value. Other backslashes are kept.
pub fn unquote(v: &str) -> Result<String, String> {
    unescape(v, "\"\\;:")
}

/// For pcre: only `\"` and `\;` are the rule syntax's; every other escape is the regex's.
pub fn unquote_pcre(v: &str) -> Result<String, String> {
    unescape(v, "\";")
}

fn unescape(v: &str, escapable: &str) -> Result<String, String> {
    let v = v.trim();
    let inner = match v.strip_prefix('"') {
        Some(r) => r
            .strip_suffix('"')
            .ok_or_else(|| format!("`{v}`: missing closing quote"))?,
        None => v,
    };
    let mut out = String::with_capacity(inner.len());
    let mut it = inner.chars().peekable();
    while let Some(c) = it.next() {
        if c == '\\' {
            match it.peek() {
                Some(&n) if escapable.contains(n) => {
                    out.push(n);
                    it.next();
                }
                Some(&n) => {
                    out.push('\\');
                    out.push(n);
                    it.next();
                }
                None => return Err(format!("`{v}`: dangling `\\`")),
            }
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_header_and_options() {
        let t = r#"alert tcp [1.2.3.4, 5.6.7.8] any -> any 80 (msg:"a;b \"q\""; content:"x\;y"; nocase; sid:1;)"#;
        let r = split_rule(3, t).unwrap();
        assert_eq!(
            r.header,
            [
                "alert",
                "tcp",
                "[1.2.3.4, 5.6.7.8]",
                "any",
                "->",
                "any",
                "80"
            ]
        );
        assert_eq!(r.options[0], ("msg", r#""a;b \"q\"""#));
        assert_eq!(r.options[1], ("content", r#""x\;y""#));
        assert_eq!(r.options[2], ("nocase", ""));
        assert_eq!(unquote(r.options[0].1).unwrap(), "a;b \"q\"");
        assert_eq!(unquote(r.options[1].1).unwrap(), "x;y");
        assert_eq!(unquote_pcre(r#""/a\d\\\;\"/""#).unwrap(), r#"/a\d\\;"/"#);
    }

    #[test]
    fn continuation_and_errors() {
        let l = rule_lines("# c\n\nalert tcp any any -> any any \\\n (sid:1;)\n");
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].0, 3);
        assert!(split_rule(1, "alert tcp any any -> any any (sid:1").is_err());
        assert!(split_rule(1, "alert tcp any any -> any any (msg:\"x;)").is_err());
        assert!(split_rule(1, "alert tcp any any -> any any (sid:1)").is_err());
    }
}
