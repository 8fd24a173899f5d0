//! Recursive-descent parser: tokens to [`ast::Program`]. The grammar is in docs/pipeline.md;
//! each function below parses one of its rules.

use super::ast::*;
use super::error::{Diag, Span};
use super::lexer::{lex, Tok, Token};

pub fn parse(src: &str) -> Result<Program, Diag> {
    let toks = lex(src)?;
    Parser {
        toks,
        at: 0,
        depth: 0,
        nodes: 0,
    }
    .program()
}

/// Parses one table entry's key and action as `catena ctl … add` gives it:
/// `PATTERN[, PATTERN…] [priority N] -> ACTION`.
pub fn parse_entry(src: &str) -> Result<Entry, Diag> {
    let toks = lex(src)?;
    let mut p = Parser {
        toks,
        at: 0,
        depth: 0,
        nodes: 0,
    };
    let e = p.entry_body("->")?;
    p.expect_eof()?;
    Ok(e)
}

/// Parses a key alone, for `catena ctl … del`.
pub fn parse_key(src: &str) -> Result<Vec<(Pattern, Span)>, Diag> {
    let toks = lex(src)?;
    let mut p = Parser {
        toks,
        at: 0,
        depth: 0,
        nodes: 0,
    };
    let k = p.patterns()?;
    p.expect_eof()?;
    Ok(k)
}

struct Parser {
    toks: Vec<Token>,
    at: usize,
    /// Nesting of blocks and parentheses: bounded so no input overflows the stack.
    depth: u32,
    /// Operators in the expression being parsed: bounded so evaluating it cannot
    /// recurse without limit.
    nodes: u32,
}

const MAX_NODES: u32 = 256;

const MAX_DEPTH: u32 = 64;

type R<T> = Result<T, Diag>;

fn describe(t: &Tok) -> String {
    match t {
        Tok::Ident(s) => format!("`{s}`"),
        Tok::Num { .. } => "a number".into(),
        Tok::Sym(s) => format!("`{s}`"),
        Tok::Eof => "the end of the program".into(),
    }
}

impl Parser {
    fn peek(&self) -> &Token {
        &self.toks[self.at.min(self.toks.len() - 1)]
    }

    fn bump(&mut self) -> Token {
        let t = self.peek().clone();
        if self.at < self.toks.len() - 1 {
            self.at += 1;
        }
        t
    }

    fn is_sym(&self, s: &str) -> bool {
        matches!(self.peek().tok, Tok::Sym(x) if x == s)
    }

    fn is_word(&self, w: &str) -> bool {
        matches!(&self.peek().tok, Tok::Ident(x) if x == w)
    }

    fn eat_sym(&mut self, s: &str) -> bool {
        let yes = self.is_sym(s);
        if yes {
            self.bump();
        }
        yes
    }

    fn eat_word(&mut self, w: &str) -> bool {
        let yes = self.is_word(w);
        if yes {
            self.bump();
        }
        yes
    }

    fn unexpected(&self, wanted: &str) -> Diag {
        let t = self.peek();
        Diag::new(
            t.span,
            format!("expected {wanted}, found {}", describe(&t.tok)),
        )
    }

    fn expect_sym(&mut self, s: &str) -> R<Span> {
        if self.is_sym(s) {
            Ok(self.bump().span)
        } else {
            Err(self.unexpected(&format!("`{s}`")))
        }
    }

    fn expect_eof(&mut self) -> R<()> {
        match self.peek().tok {
            Tok::Eof => Ok(()),
            _ => Err(self.unexpected("the end")),
        }
    }

    fn name(&mut self, what: &str) -> R<Name> {
        match &self.peek().tok {
            Tok::Ident(s) => {
                let text = s.clone();
                let span = self.bump().span;
                Ok(Name { text, span })
            }
            _ => Err(self.unexpected(what)),
        }
    }

    fn num(&mut self, what: &str) -> R<(u128, u32, Span)> {
        match self.peek().tok {
            Tok::Num { value, bits } => {
                let span = self.bump().span;
                Ok((value, bits, span))
            }
            _ => Err(self.unexpected(what)),
        }
    }

    fn small(&mut self, what: &str, max: u128) -> R<(u32, Span)> {
        let (v, _, s) = self.num(what)?;
        if v > max {
            return Err(Diag::new(s, format!("{what} must be at most {max}")));
        }
        Ok((v as u32, s))
    }

    fn program(mut self) -> R<Program> {
        let mut p = Program::default();
        loop {
            let t = self.peek().clone();
            match &t.tok {
                Tok::Eof => return Ok(p),
                Tok::Ident(w) => match w.as_str() {
                    "param" => p.params.push(self.param()?),
                    "drops" => {
                        self.bump();
                        loop {
                            p.drops.push(self.name("a drop reason")?);
                            if !self.eat_sym(",") {
                                break;
                            }
                        }
                        self.expect_sym(";")?;
                    }
                    "layout" => p.layouts.push(self.layout()?),
                    "decoder" => p.decoders.push(self.decoder()?),
                    "table" => p.tables.push(self.table()?),
                    "start" => {
                        self.bump();
                        if p.start.is_some() {
                            return Err(Diag::new(t.span, "a program has one `start` block"));
                        }
                        p.start = Some((t.span, self.block()?));
                    }
                    _ => {
                        return Err(self.unexpected(
                            "`param`, `drops`, `layout`, `decoder`, `table` or `start`",
                        ))
                    }
                },
                _ => {
                    return Err(self
                        .unexpected("`param`, `drops`, `layout`, `decoder`, `table` or `start`"))
                }
            }
        }
    }

    /// `param NAME : (int|seconds|ports) = VALUE ;`
    fn param(&mut self) -> R<Param> {
        self.bump();
        let name = self.name("a parameter name")?;
        self.expect_sym(":")?;
        let tn = self.name("a parameter type (int, seconds, ports)")?;
        let ty = match tn.text.as_str() {
            "int" => ParamType::Int,
            "seconds" => ParamType::Seconds,
            "ports" => ParamType::Ports,
            o => {
                return Err(Diag::new(
                    tn.span,
                    format!("unknown parameter type `{o}` (int, seconds, ports)"),
                ))
            }
        };
        self.expect_sym("=")?;
        let default = if ty == ParamType::Ports {
            self.expect_sym("[")?;
            let mut v = Vec::new();
            while !self.is_sym("]") {
                v.push(self.num("a port")?.0);
                if !self.eat_sym(",") {
                    break;
                }
            }
            self.expect_sym("]")?;
            ParamValue::List(v)
        } else {
            ParamValue::Num(self.num("a number")?.0)
        };
        self.expect_sym(";")?;
        Ok(Param { name, ty, default })
    }

    /// `layout NAME { (FIELD : BITS ;)* [size = FIELD * N ;] [checksum FIELD ;] }`
    fn layout(&mut self) -> R<Layout> {
        self.bump();
        let name = self.name("a layout name")?;
        self.expect_sym("{")?;
        let mut l = Layout {
            name,
            fields: Vec::new(),
            size: None,
            checksum: None,
        };
        while !self.eat_sym("}") {
            if self.is_word("size") && self.toks[self.at + 1].tok == Tok::Sym("=") {
                self.bump();
                self.bump();
                let f = self.name("a field name")?;
                self.expect_sym("*")?;
                let (n, _) = self.small("a size multiplier", 64)?;
                l.size = Some((f, n));
            } else if self.is_word("checksum")
                && matches!(self.toks[self.at + 1].tok, Tok::Ident(_))
            {
                self.bump();
                l.checksum = Some(self.name("a field name")?);
            } else {
                let f = self.name("a field name or `}`")?;
                self.expect_sym(":")?;
                let (bits, s) = self.small("a width in bits", 1 << 16)?;
                if bits == 0 {
                    return Err(Diag::new(s, "a field is at least 1 bit wide"));
                }
                l.fields.push(Field { name: f, bits });
            }
            self.expect_sym(";")?;
        }
        Ok(l)
    }

    /// `decoder NAME : LAYOUT [peek] [repeat N] { [extract F, …;] [short BLOCK] STMT* }`
    fn decoder(&mut self) -> R<Decoder> {
        self.bump();
        let name = self.name("a decoder name")?;
        self.expect_sym(":")?;
        let layout = self.name("a layout name")?;
        let peek = self.eat_word("peek");
        let repeat = if self.eat_word("repeat") {
            let (n, s) = self.small("a repeat count", 64)?;
            if n == 0 {
                return Err(Diag::new(s, "a repeat count is at least 1"));
            }
            Some((n, s))
        } else {
            None
        };
        self.expect_sym("{")?;
        let mut extract = Vec::new();
        if self.eat_word("extract") {
            loop {
                extract.push(self.name("a field name")?);
                if !self.eat_sym(",") {
                    break;
                }
            }
            self.expect_sym(";")?;
        }
        let short = if self.eat_word("short") {
            Some(self.block()?)
        } else {
            None
        };
        let body = self.stmts()?;
        Ok(Decoder {
            name,
            layout,
            peek,
            repeat,
            extract,
            short,
            body,
        })
    }

    /// `table NAME { key PATH KIND (, PATH KIND)* ; [capacity V;] [idle_timeout V;]
    ///  [hard_timeout V;] (entry ENTRY ;)* [miss BLOCK] }`
    fn table(&mut self) -> R<Table> {
        self.bump();
        let name = self.name("a table name")?;
        self.expect_sym("{")?;
        let mut t = Table {
            name,
            keys: Vec::new(),
            capacity: None,
            idle_timeout: None,
            hard_timeout: None,
            entries: Vec::new(),
            miss: None,
        };
        while !self.eat_sym("}") {
            let w = self.name(
                "`key`, `capacity`, `idle_timeout`, `hard_timeout`, `entry`, `miss` or `}`",
            )?;
            match w.text.as_str() {
                "key" => {
                    loop {
                        let field = self.path()?;
                        let k = self.name("a match kind (exact, prefix, ternary)")?;
                        let kind = match k.text.as_str() {
                            "exact" => MatchKind::Exact,
                            "prefix" => MatchKind::Prefix,
                            "ternary" => MatchKind::Ternary,
                            o => {
                                return Err(Diag::new(
                                    k.span,
                                    format!("unknown match kind `{o}` (exact, prefix, ternary)"),
                                ))
                            }
                        };
                        t.keys.push(Key { field, kind });
                        if !self.eat_sym(",") {
                            break;
                        }
                    }
                    self.expect_sym(";")?;
                }
                "capacity" => {
                    t.capacity = Some(self.value()?);
                    self.expect_sym(";")?;
                }
                "idle_timeout" => {
                    t.idle_timeout = Some(self.value()?);
                    self.expect_sym(";")?;
                }
                "hard_timeout" => {
                    t.hard_timeout = Some(self.value()?);
                    self.expect_sym(";")?;
                }
                "entry" => {
                    let e = self.entry_body("=>")?;
                    t.entries.push(e);
                    self.expect_sym(";")?;
                }
                "miss" => t.miss = Some(self.block()?),
                o => {
                    return Err(Diag::new(
                        w.span,
                        format!("unknown table clause `{o}` (key, capacity, idle_timeout, hard_timeout, entry, miss)"),
                    ))
                }
            }
        }
        Ok(t)
    }

    fn value(&mut self) -> R<Value> {
        match self.peek().tok {
            Tok::Num { value, .. } => Ok(Value::Num(value, self.bump().span)),
            _ => Ok(Value::Param(self.name("a number or a parameter name")?)),
        }
    }

    fn patterns(&mut self) -> R<Vec<(Pattern, Span)>> {
        let mut v = Vec::new();
        loop {
            if self.is_word("_") {
                v.push((Pattern::Any, self.bump().span));
            } else {
                let (n, _, s) = self.num("a key value or `_`")?;
                if self.eat_sym("/") {
                    let (len, ls) = self.small("a prefix length", 128)?;
                    v.push((Pattern::Prefix(n, len), s.to(ls)));
                } else if self.eat_word("mask") {
                    let (m, _, ms) = self.num("a mask")?;
                    v.push((Pattern::Mask(n, m), s.to(ms)));
                } else {
                    v.push((Pattern::Exact(n), s));
                }
            }
            if !self.eat_sym(",") {
                return Ok(v);
            }
        }
    }

    /// `PATTERN (, PATTERN)* [priority N] ARROW ACTION`
    fn entry_body(&mut self, arrow: &str) -> R<Entry> {
        let start = self.peek().span;
        let pats = self.patterns()?;
        let priority = if self.eat_word("priority") {
            Some(self.small("a priority", u32::MAX as u128)?.0)
        } else {
            None
        };
        self.expect_sym(arrow)?;
        let action = self.entry_action()?;
        let end = self.toks[self.at.saturating_sub(1)].span;
        Ok(Entry {
            span: start.to(end),
            pats,
            priority,
            action,
        })
    }

    /// `output EXPR | flood | drop REASON | goto TABLE | pass`
    fn entry_action(&mut self) -> R<EntryAction> {
        let w = self.name("an action (output, flood, drop, goto, pass)")?;
        Ok(match w.text.as_str() {
            "output" => EntryAction::Output(self.expr()?),
            "flood" => EntryAction::Flood,
            "drop" => EntryAction::Drop(self.name("a drop reason")?),
            "goto" => EntryAction::Goto(self.name("a table name")?),
            "pass" => EntryAction::Pass,
            o => {
                return Err(Diag::new(
                    w.span,
                    format!("`{o}` is not an entry action (output, flood, drop, goto, pass)"),
                ))
            }
        })
    }

    fn block(&mut self) -> R<Block> {
        let open = self.expect_sym("{")?;
        self.deeper(open)?;
        let b = self.stmts();
        self.depth -= 1;
        b
    }

    fn deeper(&mut self, at: Span) -> R<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            self.depth -= 1;
            return Err(Diag::new(at, format!("nested more than {MAX_DEPTH} deep")));
        }
        Ok(())
    }

    /// Statements up to and including the closing `}`.
    fn stmts(&mut self) -> R<Block> {
        let mut v = Vec::new();
        while !self.eat_sym("}") {
            v.push(self.stmt()?);
        }
        Ok(v)
    }

    fn stmt(&mut self) -> R<Stmt> {
        let at = self.peek().span;
        self.deeper(at)?;
        let s = self.stmt_inner();
        self.depth -= 1;
        s
    }

    fn stmt_inner(&mut self) -> R<Stmt> {
        let w = self.name("a statement")?;
        let s = match w.text.as_str() {
            "if" => {
                let c = self.expr()?;
                let then = self.block()?;
                let els = if self.eat_word("else") {
                    if self.is_word("if") {
                        vec![self.stmt()?]
                    } else {
                        self.block()?
                    }
                } else {
                    Vec::new()
                };
                return Ok(Stmt::If(c, then, els));
            }
            "match" => {
                let e = self.expr()?;
                self.expect_sym("{")?;
                let mut arms = Vec::new();
                while !self.eat_sym("}") {
                    let mut pats = Vec::new();
                    loop {
                        let t = self.peek().clone();
                        pats.push(match t.tok {
                            Tok::Num { value, .. } => {
                                self.bump();
                                ArmPat::Num(value, t.span)
                            }
                            Tok::Ident(ref s) if s == "_" => {
                                self.bump();
                                ArmPat::Any(t.span)
                            }
                            Tok::Ident(_) => ArmPat::Name(self.name("a pattern")?),
                            _ => return Err(self.unexpected("a number, a name or `_`")),
                        });
                        if !self.eat_sym(",") {
                            break;
                        }
                    }
                    self.expect_sym("=>")?;
                    let body = if self.is_sym("{") {
                        self.block()?
                    } else {
                        vec![self.stmt()?]
                    };
                    arms.push(Arm { pats, body });
                }
                return Ok(Stmt::Match(e, arms));
            }
            "set" => {
                let p = self.path()?;
                self.expect_sym("=")?;
                Stmt::Set(p, self.expr()?)
            }
            "learn" | "remove" => {
                let table = self.name("a table name")?;
                self.expect_sym("(")?;
                let mut keys = Vec::new();
                loop {
                    keys.push(self.expr()?);
                    if !self.eat_sym(",") {
                        break;
                    }
                }
                let close = self.expect_sym(")")?;
                if w.text == "learn" {
                    self.expect_sym("->")?;
                    let action = self.entry_action()?;
                    Stmt::Learn {
                        span: w.span.to(close),
                        table,
                        keys,
                        action,
                    }
                } else {
                    Stmt::Remove {
                        span: w.span.to(close),
                        table,
                        keys,
                    }
                }
            }
            "count" => Stmt::Count(self.name("a counter name")?),
            "output" => Stmt::Output(self.expr()?),
            "flood" => Stmt::Flood(w.span),
            "drop" => Stmt::Drop(self.name("a drop reason")?),
            "goto" => Stmt::Goto(self.name("a table name")?),
            "next" => Stmt::Next(self.name("a decoder name")?),
            "pass" => Stmt::Pass(w.span),
            o => {
                return Err(Diag::new(
                    w.span,
                    format!("unknown statement `{o}` (if, match, set, learn, remove, count, output, flood, drop, goto, next, pass)"),
                ))
            }
        };
        self.expect_sym(";")?;
        Ok(s)
    }

    fn path(&mut self) -> R<Path> {
        let head = self.name("a name")?;
        let field = if self.eat_sym(".") {
            Some(self.name("a field name")?)
        } else {
            None
        };
        Ok(Path { head, field })
    }

    fn expr(&mut self) -> R<Expr> {
        self.nodes = 0;
        self.binary(0)
    }

    fn binary(&mut self, level: usize) -> R<Expr> {
        // Loosest first; `in` sits with the comparisons.
        const LEVELS: &[&[(&str, BinOp)]] = &[
            &[("||", BinOp::Or)],
            &[("&&", BinOp::And)],
            &[
                ("==", BinOp::Eq),
                ("!=", BinOp::Ne),
                ("<=", BinOp::Le),
                (">=", BinOp::Ge),
                ("<", BinOp::Lt),
                (">", BinOp::Gt),
            ],
            &[("|", BinOp::BitOr)],
            &[("^", BinOp::BitXor)],
            &[("&", BinOp::BitAnd)],
            &[("<<", BinOp::Shl), (">>", BinOp::Shr)],
            &[("+", BinOp::Add), ("-", BinOp::Sub)],
            &[("*", BinOp::Mul)],
        ];
        if level == LEVELS.len() {
            return self.unary();
        }
        let mut l = self.binary(level + 1)?;
        loop {
            if level == 2 && self.eat_word("in") {
                let set = self.name("a ports parameter")?;
                self.nodes += 1;
                if self.nodes > MAX_NODES {
                    return Err(Diag::new(
                        set.span,
                        format!("expression longer than {MAX_NODES} operators"),
                    ));
                }
                l = Expr::In(Box::new(l), set);
                continue;
            }
            let Some(&(_, op)) = LEVELS[level].iter().find(|(s, _)| self.is_sym(s)) else {
                return Ok(l);
            };
            let at = self.bump().span;
            self.nodes += 1;
            if self.nodes > MAX_NODES {
                return Err(Diag::new(
                    at,
                    format!("expression longer than {MAX_NODES} operators"),
                ));
            }
            let r = self.binary(level + 1)?;
            let span = l.span().to(r.span());
            l = Expr::Bin(op, Box::new(l), Box::new(r), span);
        }
    }

    fn unary(&mut self) -> R<Expr> {
        let t = self.peek().clone();
        match t.tok {
            Tok::Sym("!") => {
                self.bump();
                self.deeper(t.span)?;
                let e = self.unary();
                self.depth -= 1;
                let e = e?;
                let span = t.span.to(e.span());
                Ok(Expr::Not(Box::new(e), span))
            }
            Tok::Sym("(") => {
                self.bump();
                self.deeper(t.span)?;
                let e = self.binary(0);
                self.depth -= 1;
                let e = e?;
                self.expect_sym(")")?;
                Ok(e)
            }
            Tok::Num { value, bits } => {
                self.bump();
                Ok(Expr::Num(value, bits, t.span))
            }
            Tok::Ident(_) => Ok(Expr::Path(self.path()?)),
            _ => Err(self.unexpected("an expression")),
        }
    }
}
