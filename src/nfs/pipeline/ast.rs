//! The syntax tree the parser builds and the checker resolves. Every node keeps its span
//! so errors point at the text.

use super::error::Span;

#[derive(Clone, Debug)]
pub struct Name {
    pub text: String,
    pub span: Span,
}

#[derive(Clone, Debug, Default)]
pub struct Program {
    pub params: Vec<Param>,
    pub drops: Vec<Name>,
    pub layouts: Vec<Layout>,
    pub decoders: Vec<Decoder>,
    pub tables: Vec<Table>,
    /// The block every packet starts in; required.
    pub start: Option<(Span, Block)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamType {
    Int,
    Seconds,
    Ports,
}

#[derive(Clone, Debug)]
pub struct Param {
    pub name: Name,
    pub ty: ParamType,
    pub default: ParamValue,
}

#[derive(Clone, Debug)]
pub enum ParamValue {
    Num(u128),
    List(Vec<u128>),
}

#[derive(Clone, Debug)]
pub struct Field {
    pub name: Name,
    pub bits: u32,
}

#[derive(Clone, Debug)]
pub struct Layout {
    pub name: Name,
    pub fields: Vec<Field>,
    /// `size = FIELD * N;`: the header's length in bytes, read from the packet.
    pub size: Option<(Name, u32)>,
    /// `checksum FIELD;`: the Internet checksum over the header, kept correct by `set`.
    pub checksum: Option<Name>,
}

#[derive(Clone, Debug)]
pub struct Decoder {
    pub name: Name,
    pub layout: Name,
    /// Reads the header without moving past it (e.g. a version nibble).
    pub peek: bool,
    /// How many times one packet may enter it (a chain of VLAN tags); 1 when absent.
    pub repeat: Option<(u32, Span)>,
    pub extract: Vec<Name>,
    /// Runs when the header does not fit in the packet.
    pub short: Option<Block>,
    pub body: Block,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatchKind {
    Exact,
    Prefix,
    Ternary,
}

#[derive(Clone, Debug)]
pub struct Key {
    pub field: Path,
    pub kind: MatchKind,
}

/// A number, or the name of a parameter giving it.
#[derive(Clone, Debug)]
pub enum Value {
    Num(u128, Span),
    Param(Name),
}

#[derive(Clone, Debug)]
pub struct Table {
    pub name: Name,
    pub keys: Vec<Key>,
    pub capacity: Option<Value>,
    pub idle_timeout: Option<Value>,
    pub hard_timeout: Option<Value>,
    pub entries: Vec<Entry>,
    pub miss: Option<Block>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pattern {
    Exact(u128),
    Prefix(u128, u32),
    Mask(u128, u128),
    Any,
}

#[derive(Clone, Debug)]
pub struct Entry {
    pub span: Span,
    pub pats: Vec<(Pattern, Span)>,
    pub priority: Option<u32>,
    pub action: EntryAction,
}

/// What a table entry does; one action, so it is stored as a small value.
#[derive(Clone, Debug)]
pub enum EntryAction {
    Output(Expr),
    Flood,
    Drop(Name),
    Goto(Name),
    Pass,
}

/// `NAME` or `HEADER.FIELD`.
#[derive(Clone, Debug)]
pub struct Path {
    pub head: Name,
    pub field: Option<Name>,
}

impl Path {
    pub fn span(&self) -> Span {
        match &self.field {
            Some(f) => self.head.span.to(f.span),
            None => self.head.span,
        }
    }

    pub fn text(&self) -> String {
        match &self.field {
            Some(f) => format!("{}.{}", self.head.text, f.text),
            None => self.head.text.clone(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Or,
    And,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    BitOr,
    BitXor,
    BitAnd,
    Shl,
    Shr,
    Add,
    Sub,
    Mul,
}

#[derive(Clone, Debug)]
pub enum Expr {
    Num(u128, u32, Span),
    Path(Path),
    Not(Box<Expr>, Span),
    Bin(BinOp, Box<Expr>, Box<Expr>, Span),
    /// `E in PARAM`: membership in a port-list parameter.
    In(Box<Expr>, Name),
}

impl Expr {
    pub fn span(&self) -> Span {
        match self {
            Expr::Num(_, _, s) | Expr::Not(_, s) | Expr::Bin(_, _, _, s) => *s,
            Expr::Path(p) => p.span(),
            Expr::In(e, n) => e.span().to(n.span),
        }
    }
}

pub type Block = Vec<Stmt>;

#[derive(Clone, Debug)]
pub enum ArmPat {
    Num(u128, Span),
    Name(Name),
    Any(Span),
}

#[derive(Clone, Debug)]
pub struct Arm {
    pub pats: Vec<ArmPat>,
    pub body: Block,
}

#[derive(Clone, Debug)]
pub enum Stmt {
    Set(Path, Expr),
    Learn {
        span: Span,
        table: Name,
        keys: Vec<Expr>,
        action: EntryAction,
    },
    Remove {
        span: Span,
        table: Name,
        keys: Vec<Expr>,
    },
    Count(Name),
    If(Expr, Block, Block),
    Match(Expr, Vec<Arm>),
    Output(Expr),
    Flood(Span),
    Drop(Name),
    Goto(Name),
    Next(Name),
    Pass(Span),
}
