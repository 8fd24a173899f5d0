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

    /// `file:line:col: msg`, the source line, and carets under the span.
    pub fn render(&self, file: &str, src: &str) -> String {
        let (line, col) = self.line_col(src);
        let text = src.lines().nth(line - 1).unwrap_or("");
        let start = floor_char(src, self.span.start.min(src.len()));
        let line_end = src[start..].find('\n').map_or(src.len(), |i| start + i);
        let end = floor_char(src, self.span.end.clamp(start, line_end));
        let width = src[start..end].chars().count().max(1);
        format!(
            "{file}:{line}:{col}: {}\n  {text}\n  {}{}",
            self.msg,
            " ".repeat(col - 1),
            "^".repeat(width)
        )
    }
}

fn floor_char(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}
