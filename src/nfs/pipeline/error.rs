//! Compile errors: `file:line:column: reason`, then the line with the offending text
//! underlined, so an operator finds the mistake without counting characters.

/// A byte range in the program text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Span {
        Span { start, end }
    }

    pub fn to(self, o: Span) -> Span {
        Span::new(self.start.min(o.start), self.end.max(o.end))
    }
}

/// One error in a program, located.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diag {
    pub span: Span,
    pub msg: String,
}

impl Diag {
    pub fn new(span: Span, msg: impl Into<String>) -> Diag {
        Diag {
            span,
            msg: msg.into(),
        }
    }

    /// 1-based line and column (in characters) of the error's start.
    pub fn line_col(&self, src: &str) -> (usize, usize) {
        let at = self.span.start.min(src.len());
        let before = &src[..floor_char(src, at)];
        let line = before.matches('\n').count() + 1;
        let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        (line, col)
    }

    /// `file:line:col: msg`, the source line, and carets under the span. A long line is
    /// shown as a window around the error and control characters as `?`, so that a
    /// hostile program cannot make the message huge or write to the terminal.
    pub fn render(&self, file: &str, src: &str) -> String {
        let (line, col) = self.line_col(src);
        let text = src.lines().nth(line - 1).unwrap_or("");
        let start = floor_char(src, self.span.start.min(src.len()));
        let line_end = src[start..].find('\n').map_or(src.len(), |i| start + i);
        let end = floor_char(src, self.span.end.clamp(start, line_end));
        let width = src[start..end].chars().count().max(1);
        let (shown, at, width) = window(text, col - 1, width);
        format!(
            "{file}:{line}:{col}: {}\n  {shown}\n  {}{}",
            self.msg,
            " ".repeat(at),
            "^".repeat(width)
        )
    }
}

/// Characters of a source line shown around the error, at most.
const SHOWN: usize = 100;

/// `text` cut to [`SHOWN`] characters around character `col` (… marks a cut end), control
/// characters as `?`; with the error's column and caret width in what is shown.
fn window(text: &str, col: usize, width: usize) -> (String, usize, usize) {
    let len = text.chars().count();
    let first = if len <= SHOWN {
        0
    } else {
        col.saturating_sub(SHOWN / 3).min(len - SHOWN)
    };
    let last = (first + SHOWN).min(len);
    let mut shown: String = if first > 0 {
        "…".into()
    } else {
        String::new()
    };
    let lead = shown.chars().count();
    shown.extend(text.chars().skip(first).take(last - first).map(|c| {
        if c.is_control() {
            '?'
        } else {
            c
        }
    }));
    if last < len {
        shown.push('…');
    }
    let at = lead + col.clamp(first, last) - first;
    (shown, at, width.min(last.saturating_sub(col).max(1)))
}

fn floor_char(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_line_is_shown_as_a_window_around_the_error() {
        // An error at column 5,001 of a 10,000-character line.
        let src = format!("{}@{}\n", "a".repeat(5000), "b".repeat(4999));
        let d = Diag::new(Span::new(5000, 5001), "unexpected `@`");
        let r = d.render("p.stv", &src);
        assert!(r.len() < 400, "{} bytes", r.len());
        let lines: Vec<&str> = r.lines().collect();
        assert_eq!(lines[0], "p.stv:1:5001: unexpected `@`");
        let at = lines[2].find('^').unwrap();
        assert_eq!(lines[1].chars().nth(at), Some('@'));
        assert!(lines[1].starts_with("  …") && lines[1].ends_with('…'));
    }

    #[test]
    fn control_characters_are_shown_as_question_marks() {
        let src = "table t {\u{1b}[2J x }\n";
        let d = Diag::new(Span::new(14, 15), "unexpected `x`");
        let r = d.render("p.stv", src);
        assert!(!r.contains('\u{1b}'), "{r:?}");
        assert_eq!(r.lines().nth(1), Some("  table t {?[2J x }"));
        assert_eq!(r.lines().nth(2), Some(&*format!("  {}^", " ".repeat(14))));
    }

    #[test]
    fn a_short_line_is_shown_whole() {
        let src = "layout eth { dst: 48 }\n";
        let d = Diag::new(Span::new(13, 16), "bad");
        assert_eq!(
            d.render("p.stv", src),
            format!(
                "p.stv:1:14: bad\n  layout eth {{ dst: 48 }}\n  {}^^^",
                " ".repeat(13)
            )
        );
    }
}
