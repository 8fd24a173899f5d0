//! The checker: resolves names, checks widths, reachability and goto loops, and builds
//! the compiled [`Plan`] with every field at a precomputed offset. Every error points at
//! the offending text.

use std::collections::HashMap;

use super::ast::{self, Expr, MatchKind, ParamType, ParamValue, Pattern, Stmt};
use super::error::{Diag, Span};
use super::plan::{self, ActTmpl, Code, Ex, FieldRef, Op, Plan, Read, State, MAX_DECODERS};
use super::table::{Act, Masked, Table};
use crate::packet::Fields;

/// A parameter's value, from the chain file or the program's default.
#[derive(Clone, Debug)]
pub enum ParamVal {
    Int(u64),
    /// Nanoseconds.
    Seconds(u64),
    Ports(Vec<u16>),
}

/// What the compiler says about a program besides the plan: the partial decode (which
/// fields each decoder reads) and the profile.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Per decoder: its name, layout, fields read by the program, fields extracted but
    /// unused (decoded by nobody: listing them costs nothing at run time).
    pub decoders: Vec<(String, String, Vec<String>, Vec<String>)>,
    pub reads: Fields,
    pub writes: Fields,
    pub may_drop: bool,
    pub per_flow_state: bool,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (d, l, used, unused) in &self.decoders {
            write!(f, "decoder {d} ({l}): decodes {}", list(used))?;
            if !unused.is_empty() {
                write!(f, "; extracted but unused: {}", unused.join(", "))?;
            }
            writeln!(f)?;
        }
        write!(
            f,
            "reads {}; writes {}; may drop: {}; state: {}",
            self.reads,
            self.writes,
            if self.may_drop { "yes" } else { "no" },
            // As the NF's state scope says (what the multi-core planner reads): a
            // program that learns does so from every flow, one that does not keeps
            // nothing that decides a verdict (its counters are statistics).
            if self.per_flow_state {
                "global (learned entries, from every flow: not sharded)"
            } else {
                "none"
            }
        )
    }
}

fn list(v: &[String]) -> String {
    if v.is_empty() {
        "nothing".into()
    } else {
        v.join(", ")
    }
}

/// Named constants for `link`.
/// Most tables, counters and parameters in a program. The plan indexes them with 16 bits
/// (past 65,536 a `goto` or `count` wrapped to the first), and the loop check recurses
/// once per table in a chain of gotos (100,000 overflowed the stack); a real program has
/// a handful.
pub const MAX_TABLES: usize = 1024;
pub const MAX_COUNTERS: usize = 1024;
pub const MAX_PARAMS: usize = 1024;

pub const LINKS: &[(&str, u64)] = &[("ethernet", 0), ("raw", 1), ("sll", 2), ("sll2", 3)];

type R<T> = Result<T, Diag>;

struct LayoutInfo {
    /// (name, bit offset, bits)
    fields: Vec<(String, u32, u32)>,
    bits: u32,
}

struct Checker<'a> {
    prog: &'a ast::Program,
    params: HashMap<&'a str, (ParamType, ParamVal)>,
    sets: Vec<(String, Box<[u64; 1024]>)>,
    layouts: HashMap<&'a str, LayoutInfo>,
    decoders: HashMap<&'a str, usize>,
    tables: HashMap<&'a str, usize>,
    drops: HashMap<&'a str, u8>,
    counters: Vec<(String, u64)>,
    /// Per decoder: field names the program reads.
    used: Vec<Vec<String>>,
    reads: Fields,
    writes: Fields,
    may_drop: bool,
    /// Tables learned into.
    learns: Vec<bool>,
    /// Edges of the goto/next graph: (from node, to node, span of the statement).
    /// Nodes: 0 = start, 1 + d = decoder d, 1 + D + t = table t.
    edges: Vec<(usize, usize, Span)>,
    node: usize,
}

/// Checks `prog` with the parameters' values and builds its plan.
pub fn check(
    prog: &ast::Program,
    values: &HashMap<String, ParamVal>,
) -> R<(Plan, Report, Vec<String>)> {
    let mut c = Checker {
        prog,
        params: HashMap::new(),
        sets: Vec::new(),
        layouts: HashMap::new(),
        decoders: HashMap::new(),
        tables: HashMap::new(),
        drops: HashMap::new(),
        counters: Vec::new(),
        used: vec![Vec::new(); prog.decoders.len()],
        reads: Fields::NONE,
        writes: Fields::NONE,
        may_drop: false,
        learns: vec![false; prog.tables.len()],
        edges: Vec::new(),
        node: 0,
    };
    c.declare(values)?;
    for b in prog
        .start
        .iter()
        .map(|(_, b)| b)
        .chain(
            prog.decoders
                .iter()
                .flat_map(|d| d.short.iter().chain([&d.body])),
        )
        .chain(prog.tables.iter().filter_map(|t| t.miss.as_ref()))
    {
        mark_learns(b, &c.tables, &mut c.learns);
    }
    c.build()
}

fn dup(what: &str, n: &ast::Name) -> Diag {
    Diag::new(n.span, format!("{what} `{}` is declared twice", n.text))
}

fn bits_of(v: u128) -> u32 {
    128 - v.leading_zeros()
}

fn fits(v: u128, bits: u32) -> bool {
    bits >= 128 || v >> bits == 0
}

fn ones(bits: u32) -> u128 {
    if bits >= 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    }
}

impl<'a> Checker<'a> {
    fn declare(&mut self, values: &HashMap<String, ParamVal>) -> R<()> {
        let p = self.prog;
        if let Some(par) = p.params.get(MAX_PARAMS) {
            return Err(Diag::new(
                par.name.span,
                format!("at most {MAX_PARAMS} parameters"),
            ));
        }
        for par in &p.params {
            let v = values
                .get(&par.name.text)
                .cloned()
                .unwrap_or(match &par.default {
                    ParamValue::Num(n) => match par.ty {
                        ParamType::Seconds => {
                            ParamVal::Seconds((*n as u64).saturating_mul(1_000_000_000))
                        }
                        _ => ParamVal::Int(*n as u64),
                    },
                    ParamValue::List(l) => ParamVal::Ports(l.iter().map(|&x| x as u16).collect()),
                });
            if let ParamValue::List(l) = &par.default {
                if let Some(bad) = l.iter().find(|&&x| x > 65535) {
                    return Err(Diag::new(
                        par.name.span,
                        format!(
                            "port {bad} in the default of `{}` is out of range 0..=65535",
                            par.name.text
                        ),
                    ));
                }
            }
            if self
                .params
                .insert(&par.name.text, (par.ty, v.clone()))
                .is_some()
            {
                return Err(dup("parameter", &par.name));
            }
            if let ParamVal::Ports(ports) = v {
                let mut set = Box::new([0u64; 1024]);
                for q in ports {
                    set[q as usize >> 6] |= 1 << (q & 63);
                }
                self.sets.push((par.name.text.clone(), set));
            }
        }
        for (i, d) in p.drops.iter().enumerate() {
            if i > 250 {
                return Err(Diag::new(d.span, "at most 250 drop reasons"));
            }
            if self.drops.insert(&d.text, i as u8).is_some() {
                return Err(dup("drop reason", d));
            }
        }
        for l in &p.layouts {
            let mut info = LayoutInfo {
                fields: Vec::new(),
                bits: 0,
            };
            for f in &l.fields {
                if f.bits > 64 {
                    return Err(Diag::new(
                        f.name.span,
                        format!(
                            "field `{}` is {} bits wide; fields are at most 64 bits",
                            f.name.text, f.bits
                        ),
                    ));
                }
                if info.fields.iter().any(|(n, _, _)| *n == f.name.text) {
                    return Err(dup("field", &f.name));
                }
                info.fields.push((f.name.text.clone(), info.bits, f.bits));
                info.bits += f.bits;
            }
            if info.bits == 0 {
                return Err(Diag::new(
                    l.name.span,
                    format!("layout `{}` has no fields", l.name.text),
                ));
            }
            if info.bits > 8 * 1024 {
                return Err(Diag::new(l.name.span, "a layout is at most 1024 bytes"));
            }
            for (n, want) in l
                .size
                .iter()
                .map(|(n, _)| (n, 0))
                .chain(l.checksum.iter().map(|n| (n, 16)))
            {
                match info.fields.iter().find(|(f, _, _)| *f == n.text) {
                    None => {
                        return Err(Diag::new(
                            n.span,
                            format!("layout `{}` has no field `{}`", l.name.text, n.text),
                        ))
                    }
                    Some((_, _, b)) if want == 16 && *b != 16 => {
                        return Err(Diag::new(
                            n.span,
                            format!("a checksum field is 16 bits, `{}` is {b}", n.text),
                        ))
                    }
                    Some((_, _, b)) if want == 0 && *b > 16 => {
                        return Err(Diag::new(
                            n.span,
                            format!("a size field is at most 16 bits, `{}` is {b}", n.text),
                        ))
                    }
                    _ => {}
                }
            }
            if self.layouts.insert(&l.name.text, info).is_some() {
                return Err(dup("layout", &l.name));
            }
        }
        for (i, d) in p.decoders.iter().enumerate() {
            if i >= MAX_DECODERS {
                return Err(Diag::new(
                    d.name.span,
                    format!("at most {MAX_DECODERS} decoders"),
                ));
            }
            let Some(l) = self.layouts.get(d.layout.text.as_str()) else {
                return Err(Diag::new(
                    d.layout.span,
                    format!("unknown layout `{}`", d.layout.text),
                ));
            };
            for e in &d.extract {
                if !l.fields.iter().any(|(n, _, _)| *n == e.text) {
                    return Err(Diag::new(
                        e.span,
                        format!("layout `{}` has no field `{}`", d.layout.text, e.text),
                    ));
                }
            }
            if self.decoders.insert(&d.name.text, i).is_some() {
                return Err(dup("decoder", &d.name));
            }
        }
        for (i, t) in p.tables.iter().enumerate() {
            if i >= MAX_TABLES {
                return Err(Diag::new(
                    t.name.span,
                    format!("at most {MAX_TABLES} tables"),
                ));
            }
            if self.tables.insert(&t.name.text, i).is_some() {
                return Err(dup("table", &t.name));
            }
        }
        if p.start.is_none() {
            return Err(Diag::new(
                Span::new(0, 0),
                "the program has no `start { … }` block",
            ));
        }
        Ok(())
    }

    fn build(mut self) -> R<(Plan, Report, Vec<String>)> {
        let p = self.prog;
        let (_, start) = p.start.as_ref().expect("checked in declare");
        self.node = 0;
        let start = self.block(start)?;
        let nd = p.decoders.len();
        let mut decoders = Vec::new();
        for (i, d) in p.decoders.iter().enumerate() {
            self.node = 1 + i;
            let l = &self.layouts[d.layout.text.as_str()];
            let size = match &p
                .layouts
                .iter()
                .find(|x| x.name.text == d.layout.text)
                .and_then(|x| x.size.clone())
            {
                Some((f, mul)) => {
                    let (_, off, bits) = l
                        .fields
                        .iter()
                        .find(|(n, _, _)| *n == f.text)
                        .expect("checked");
                    Some((Read::new(*off, *bits), *mul as u16))
                }
                None => None,
            };
            let fixed_len = l.bits.div_ceil(8) as u16;
            let short = match &d.short {
                Some(b) => self.block(b)?,
                None => Vec::new(),
            };
            let body = self.block(&d.body)?;
            decoders.push(plan::Decoder {
                name: d.name.text.clone(),
                fixed_len,
                size,
                peek: d.peek,
                repeat: d.repeat.map_or(1, |(n, _)| n as u8),
                short,
                body,
            });
        }
        let mut keys = Vec::new();
        let mut misses = Vec::new();
        let mut tables = Vec::new();
        for (i, t) in p.tables.iter().enumerate() {
            self.node = 1 + nd + i;
            if t.keys.is_empty() {
                return Err(Diag::new(
                    t.name.span,
                    format!("table `{}` has no `key`", t.name.text),
                ));
            }
            let mut kf = Vec::new();
            let mut total = 0;
            for k in &t.keys {
                let f = self.field(&k.field)?;
                self.reads = self.reads | self.field_bit(&k.field);
                total += f.bits;
                kf.push((f, f.bits));
            }
            if total > 128 {
                return Err(Diag::new(
                    t.name.span,
                    format!("table `{}`'s key is {total} bits; at most 128", t.name.text),
                ));
            }
            let is_exact = t.keys.iter().all(|k| k.kind == MatchKind::Exact);
            let capacity = match &t.capacity {
                None => 65536,
                Some(v) => self.int(v, ParamType::Int)?,
            };
            if capacity == 0 || capacity > 1 << 26 {
                return Err(Diag::new(
                    t.name.span,
                    format!(
                        "table `{}`: capacity {capacity} is out of range 1..=67108864",
                        t.name.text
                    ),
                ));
            }
            let idle = match &t.idle_timeout {
                None => 0,
                Some(v) => self.int(v, ParamType::Seconds)?,
            };
            let hard = match &t.hard_timeout {
                None => 0,
                Some(v) => self.int(v, ParamType::Seconds)?,
            };
            let learns = self.learn_target(i);
            if learns && !is_exact {
                return Err(Diag::new(
                    t.name.span,
                    format!(
                        "table `{}` is learned into, so its key must be exact",
                        t.name.text
                    ),
                ));
            }
            if !learns && (idle != 0 || hard != 0) {
                let s = t
                    .idle_timeout
                    .as_ref()
                    .or(t.hard_timeout.as_ref())
                    .map_or(t.name.span, value_span);
                return Err(Diag::new(
                    s,
                    format!(
                        "table `{}` has timeouts but nothing `learn`s into it",
                        t.name.text
                    ),
                ));
            }
            let mut table = Table::new(
                &t.name.text,
                total,
                is_exact,
                capacity as usize,
                learns,
                idle,
                hard,
            );
            for e in &t.entries {
                let (value, mask, prio) = self.key_pattern(t, &e.pats, e.span)?;
                let act = self.entry_act(&e.action, true)?.1;
                if e.priority.is_some() && is_exact {
                    return Err(Diag::new(
                        e.span,
                        "`priority` is for prefix and ternary tables",
                    ));
                }
                let r = if is_exact {
                    table.add_exact(value, act)
                } else {
                    table.add_masked(Masked {
                        value,
                        mask,
                        priority: e.priority.unwrap_or(prio),
                        act,
                        hits: 0,
                    })
                };
                r.map_err(|m| Diag::new(e.span, m))?;
            }
            let miss = match &t.miss {
                Some(b) => self.block(b)?,
                None => Vec::new(),
            };
            keys.push(kf);
            misses.push(miss);
            tables.push(table);
        }
        self.reachability()?;
        let report = Report {
            decoders: p
                .decoders
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    let used = self.used[i].clone();
                    let unused = d
                        .extract
                        .iter()
                        .map(|n| n.text.clone())
                        .filter(|n| !used.contains(n))
                        .collect();
                    let n = self.layouts[d.layout.text.as_str()].fields.len();
                    (
                        d.name.text.clone(),
                        format!("{}, {n} fields", d.layout.text),
                        used,
                        unused,
                    )
                })
                .collect(),
            reads: self.reads,
            writes: self.writes,
            may_drop: self.may_drop,
            per_flow_state: self.learns.iter().any(|&l| l),
        };
        let drops: Vec<String> = p.drops.iter().map(|d| d.text.replace('_', "-")).collect();
        let plan = Plan::new(
            Code {
                decoders,
                start,
                keys,
                misses,
                sets: self.sets.into_iter().map(|(_, s)| s).collect(),
            },
            State {
                tables,
                counters: self.counters,
            },
            drops.clone(),
        );
        Ok((plan, report, drops))
    }

    fn learn_target(&mut self, t: usize) -> bool {
        self.learns[t]
    }

    /// Every decoder and table must be reachable from `start`; the goto/next graph must
    /// have no loop other than a `repeat` decoder entering itself.
    fn reachability(&self) -> R<()> {
        let p = self.prog;
        let nd = p.decoders.len();
        let n = 1 + nd + p.tables.len();
        let mut adj: Vec<Vec<(usize, Span)>> = vec![Vec::new(); n];
        for &(a, b, s) in &self.edges {
            let self_repeat = a == b && a >= 1 && a <= nd && p.decoders[a - 1].repeat.is_some();
            if !self_repeat {
                adj[a].push((b, s));
            }
        }
        let mut seen = vec![false; n];
        let mut stack = vec![0];
        seen[0] = true;
        while let Some(a) = stack.pop() {
            for &(b, _) in &adj[a] {
                if !seen[b] {
                    seen[b] = true;
                    stack.push(b);
                }
            }
        }
        for (i, d) in p.decoders.iter().enumerate() {
            if !seen[1 + i] {
                return Err(Diag::new(
                    d.name.span,
                    format!(
                        "decoder `{}` is never entered (no reachable `next {}`)",
                        d.name.text, d.name.text
                    ),
                ));
            }
        }
        for (i, t) in p.tables.iter().enumerate() {
            if !seen[1 + nd + i] {
                return Err(Diag::new(
                    t.name.span,
                    format!(
                        "table `{}` is unreachable (no reachable `goto {}`)",
                        t.name.text, t.name.text
                    ),
                ));
            }
        }
        // Loops: depth-first search with colours; the edge closing a loop is reported.
        let mut colour = vec![0u8; n];
        fn dfs(
            a: usize,
            adj: &[Vec<(usize, Span)>],
            colour: &mut [u8],
            names: &dyn Fn(usize) -> String,
        ) -> R<()> {
            colour[a] = 1;
            for &(b, s) in &adj[a] {
                if colour[b] == 1 {
                    return Err(Diag::new(s, format!("this closes a loop back to {}; gotos and decoders must not loop (use `repeat` for a decoder entering itself)", names(b))));
                }
                if colour[b] == 0 {
                    dfs(b, adj, colour, names)?;
                }
            }
            colour[a] = 2;
            Ok(())
        }
        let names = |i: usize| {
            if i == 0 {
                "`start`".to_string()
            } else if i <= nd {
                format!("decoder `{}`", p.decoders[i - 1].name.text)
            } else {
                format!("table `{}`", p.tables[i - 1 - nd].name.text)
            }
        };
        dfs(0, &adj, &mut colour, &names)
    }

    fn int(&self, v: &ast::Value, want: ParamType) -> R<u64> {
        match v {
            ast::Value::Num(n, s) => {
                if *n > u32::MAX as u128 {
                    return Err(Diag::new(*s, "number too large"));
                }
                Ok(if want == ParamType::Seconds {
                    *n as u64 * 1_000_000_000
                } else {
                    *n as u64
                })
            }
            ast::Value::Param(name) => match self.params.get(name.text.as_str()) {
                None => Err(Diag::new(
                    name.span,
                    format!("unknown parameter `{}`", name.text),
                )),
                Some((ty, val)) if *ty == want => Ok(match val {
                    ParamVal::Int(n) | ParamVal::Seconds(n) => *n,
                    ParamVal::Ports(_) => 0,
                }),
                Some((ty, _)) => Err(Diag::new(
                    name.span,
                    format!(
                        "parameter `{}` is {}, here {} is needed",
                        name.text,
                        ty_name(*ty),
                        ty_name(want)
                    ),
                )),
            },
        }
    }

    /// A table entry's patterns as one (value, mask) over the concatenated key, and the
    /// default priority (the number of bits it fixes: longest prefix first).
    fn key_pattern(
        &self,
        t: &ast::Table,
        pats: &[(Pattern, Span)],
        span: Span,
    ) -> R<(u128, u128, u32)> {
        if pats.len() != t.keys.len() {
            return Err(Diag::new(
                span,
                format!(
                    "table `{}` has {} key field(s), this entry gives {}",
                    t.name.text,
                    t.keys.len(),
                    pats.len()
                ),
            ));
        }
        let (mut value, mut mask) = (0u128, 0u128);
        for (k, (pat, ps)) in t.keys.iter().zip(pats) {
            let bits = self.field(&k.field)?.bits;
            let (v, m) = match (pat, k.kind) {
                (Pattern::Exact(v), _) => (*v, ones(bits)),
                (Pattern::Any, MatchKind::Prefix | MatchKind::Ternary) => (0, 0),
                (Pattern::Prefix(v, len), MatchKind::Prefix) => {
                    if *len > bits {
                        return Err(Diag::new(
                            *ps,
                            format!("prefix length {len} is longer than the {bits}-bit field"),
                        ));
                    }
                    let m = ones(bits) & !ones(bits - len);
                    (*v & m, m)
                }
                (Pattern::Mask(v, m), MatchKind::Ternary) => {
                    if !fits(*m, bits) {
                        return Err(Diag::new(
                            *ps,
                            format!("mask {m:#x} is wider than the {bits}-bit field"),
                        ));
                    }
                    (*v & *m, *m)
                }
                (_, kind) => {
                    return Err(Diag::new(
                        *ps,
                        format!("this pattern does not suit a {} key field", kind_name(kind)),
                    ))
                }
            };
            if !fits(v, bits) {
                return Err(Diag::new(
                    *ps,
                    format!(
                        "{v:#x} does not fit in the {bits}-bit key field `{}`",
                        k.field.text()
                    ),
                ));
            }
            value = if bits >= 128 { v } else { value << bits | v };
            mask = if bits >= 128 { m } else { mask << bits | m };
        }
        Ok((value, mask, mask.count_ones()))
    }

    fn entry_act(&mut self, a: &ast::EntryAction, fixed: bool) -> R<(Option<Ex>, Act)> {
        Ok(match a {
            ast::EntryAction::Output(e) => {
                let ex = self.expr(e)?;
                self.writes = self.writes | Fields::EGRESS;
                match (fixed, &ex) {
                    (_, Ex::Const(v)) => {
                        if *v > u16::MAX as u64 {
                            return Err(Diag::new(e.span(), "a port is at most 65535"));
                        }
                        (None, Act::Output(*v as u16))
                    }
                    (true, _) => {
                        return Err(Diag::new(e.span(), "a table entry's port must be a number"))
                    }
                    (false, _) => (Some(ex), Act::Pass),
                }
            }
            ast::EntryAction::Flood => {
                self.writes = self.writes | Fields::EGRESS;
                (None, Act::Flood)
            }
            ast::EntryAction::Drop(r) => (None, Act::Drop(self.drop(r)?)),
            ast::EntryAction::Goto(t) => (None, Act::Goto(self.goto(t)?)),
            ast::EntryAction::Pass => (None, Act::Pass),
        })
    }

    fn drop(&mut self, r: &ast::Name) -> R<u8> {
        self.may_drop = true;
        self.drops.get(r.text.as_str()).copied().ok_or_else(|| {
            Diag::new(
                r.span,
                format!(
                    "unknown drop reason `{}` (declare it with `drops {};`)",
                    r.text, r.text
                ),
            )
        })
    }

    fn goto(&mut self, t: &ast::Name) -> R<u16> {
        let i = *self
            .tables
            .get(t.text.as_str())
            .ok_or_else(|| Diag::new(t.span, format!("unknown table `{}`", t.text)))?;
        self.edges
            .push((self.node, 1 + self.prog.decoders.len() + i, t.span));
        Ok(i as u16)
    }

    fn table_ref(&self, t: &ast::Name) -> R<usize> {
        self.tables
            .get(t.text.as_str())
            .copied()
            .ok_or_else(|| Diag::new(t.span, format!("unknown table `{}`", t.text)))
    }

    fn block(&mut self, b: &[Stmt]) -> R<Vec<Op>> {
        let mut ops = Vec::new();
        for (i, s) in b.iter().enumerate() {
            let op = self.stmt(s)?;
            let terminal = matches!(
                op,
                Op::Output(_) | Op::Flood | Op::Drop(_) | Op::Goto(_) | Op::Next(_) | Op::Pass
            );
            ops.push(op);
            if terminal {
                if let Some(next) = b.get(i + 1) {
                    return Err(Diag::new(
                        stmt_span(next),
                        "unreachable: the statement before ends the packet's walk",
                    ));
                }
            }
        }
        Ok(ops)
    }

    fn stmt(&mut self, s: &Stmt) -> R<Op> {
        Ok(match s {
            Stmt::Set(path, e) => {
                let f = self.field(path)?;
                let v = self.expr(e)?;
                if let Ex::Const(c) = v {
                    if !fits(c as u128, f.bits) {
                        return Err(Diag::new(
                            e.span(),
                            format!(
                                "{c:#x} does not fit in the {}-bit field `{}`",
                                f.bits,
                                path.text()
                            ),
                        ));
                    }
                }
                self.writes = self.writes | self.field_bit(path);
                let csum = self.checksum_of(path)?;
                Op::Set {
                    field: f,
                    value: v,
                    csum,
                }
            }
            Stmt::Learn {
                span,
                table,
                keys,
                action,
            } => {
                let t = self.table_ref(table)?;
                let ks = self.keys(t, keys, *span)?;
                self.learns[t] = true;
                let (tmpl, act) = self.entry_act(action, false)?;
                let act = match tmpl {
                    Some(e) => ActTmpl::Output(e),
                    None => ActTmpl::Fixed(act),
                };
                Op::Learn {
                    table: t as u16,
                    keys: ks,
                    act,
                }
            }
            Stmt::Remove { span, table, keys } => {
                let t = self.table_ref(table)?;
                let ks = self.keys(t, keys, *span)?;
                self.learns[t] = true;
                Op::Remove {
                    table: t as u16,
                    keys: ks,
                }
            }
            Stmt::Count(n) => {
                let i = match self.counters.iter().position(|(c, _)| *c == n.text) {
                    Some(i) => i,
                    None => {
                        if self.prog.tables.iter().any(|t| t.name.text == n.text) {
                            return Err(Diag::new(
                                n.span,
                                format!(
                                    "`{}` names a table; its counters are kept already",
                                    n.text
                                ),
                            ));
                        }
                        if self.counters.len() >= MAX_COUNTERS {
                            return Err(Diag::new(
                                n.span,
                                format!("at most {MAX_COUNTERS} counters"),
                            ));
                        }
                        self.counters.push((n.text.clone(), 0));
                        self.counters.len() - 1
                    }
                };
                Op::Count(i as u16)
            }
            Stmt::If(c, t, e) => Op::If(self.expr(c)?, self.block(t)?, self.block(e)?),
            Stmt::Match(e, arms) => {
                let ex = self.expr(e)?;
                let width = self.width(e);
                let mut out = Vec::new();
                let mut seen_any = false;
                for a in arms {
                    if seen_any {
                        let s = a.pats.first().map_or(e.span(), arm_span);
                        return Err(Diag::new(
                            s,
                            "unreachable arm: `_` above matches everything",
                        ));
                    }
                    let mut values = Vec::new();
                    let mut any = false;
                    for pat in &a.pats {
                        match pat {
                            ast::ArmPat::Num(v, s) => {
                                if width.is_some_and(|w| !fits(*v, w)) {
                                    return Err(Diag::new(*s, format!("{v:#x} does not fit in the {}-bit value matched", width.unwrap_or(0))));
                                }
                                values.push(*v as u64);
                            }
                            ast::ArmPat::Name(n) => match LINKS.iter().find(|(l, _)| *l == n.text) {
                                Some((_, v)) => values.push(*v),
                                None => return Err(Diag::new(n.span, format!("unknown constant `{}` (link names: ethernet, raw, sll, sll2)", n.text))),
                            },
                            ast::ArmPat::Any(_) => any = true,
                        }
                    }
                    seen_any |= any;
                    let body = self.block(&a.body)?;
                    let guard = match body.as_slice() {
                        [Op::Next(d)] if self.prog.decoders[*d as usize].repeat.is_some() => {
                            Some(*d)
                        }
                        _ => None,
                    };
                    out.push(plan::Arm {
                        values,
                        any,
                        guard,
                        body,
                    });
                }
                Op::Match(ex, out)
            }
            Stmt::Output(e) => {
                let ex = self.expr(e)?;
                if let Ex::Const(v) = ex {
                    if v > u16::MAX as u64 {
                        return Err(Diag::new(e.span(), "a port is at most 65535"));
                    }
                }
                self.writes = self.writes | Fields::EGRESS;
                Op::Output(ex)
            }
            Stmt::Flood(_) => {
                self.writes = self.writes | Fields::EGRESS;
                Op::Flood
            }
            Stmt::Drop(r) => Op::Drop(self.drop(r)?),
            Stmt::Goto(t) => Op::Goto(self.goto(t)?),
            Stmt::Next(d) => {
                let i = *self
                    .decoders
                    .get(d.text.as_str())
                    .ok_or_else(|| Diag::new(d.span, format!("unknown decoder `{}`", d.text)))?;
                self.edges.push((self.node, 1 + i, d.span));
                Op::Next(i as u16)
            }
            Stmt::Pass(_) => Op::Pass,
        })
    }

    fn keys(&mut self, t: usize, keys: &[Expr], span: Span) -> R<Vec<(Ex, u32)>> {
        let tk = &self.prog.tables[t].keys;
        if keys.len() != tk.len() {
            return Err(Diag::new(
                span,
                format!(
                    "table `{}` has {} key field(s), {} given",
                    self.prog.tables[t].name.text,
                    tk.len(),
                    keys.len()
                ),
            ));
        }
        let mut out = Vec::new();
        for (e, k) in keys.iter().zip(tk) {
            let want = self.field(&k.field)?.bits;
            if let Some(w) = self.width(e) {
                if w > want {
                    return Err(Diag::new(
                        e.span(),
                        format!(
                            "this is {w} bits wide; key field `{}` is {want}",
                            k.field.text()
                        ),
                    ));
                }
            }
            out.push((self.expr(e)?, want));
        }
        Ok(out)
    }

    /// The bit width an expression can have, when known (literals: the bits they need).
    fn width(&self, e: &Expr) -> Option<u32> {
        match e {
            Expr::Num(v, bits, _) => Some((*bits).max(bits_of(*v))),
            Expr::Path(p) => match (&p.field, p.head.text.as_str()) {
                (Some(_), _) => self.field(p).ok().map(|f| f.bits),
                (None, "in_port" | "ports" | "len") => Some(16),
                (None, "link") => Some(8),
                _ => None,
            },
            Expr::Not(..) | Expr::In(..) => Some(1),
            Expr::Bin(op, a, b, _) => {
                use ast::BinOp::*;
                match op {
                    Or | And | Eq | Ne | Lt | Le | Gt | Ge => Some(1),
                    BitAnd => self.width(a).min(self.width(b)).or(self.width(a)),
                    BitOr | BitXor => self.width(a).max(self.width(b)),
                    _ => None,
                }
            }
        }
    }

    fn expr(&mut self, e: &Expr) -> R<Ex> {
        Ok(self.expr_tree(e)?.simplify())
    }

    fn expr_tree(&mut self, e: &Expr) -> R<Ex> {
        Ok(match e {
            Expr::Num(v, _, s) => {
                if *v > u64::MAX as u128 {
                    return Err(Diag::new(*s, "values in expressions are at most 64 bits"));
                }
                Ex::Const(*v as u64)
            }
            Expr::Path(p) if p.field.is_none() => match p.head.text.as_str() {
                "in_port" => {
                    self.reads = self.reads | Fields::IN_PORT;
                    Ex::InPort
                }
                "ports" => Ex::Ports,
                "link" => Ex::Link,
                "len" => Ex::Len,
                o => {
                    let hint = if self.decoders.contains_key(o) {
                        format!("`{o}` is a decoder: name one of its fields, `{o}.FIELD`")
                    } else if self.params.contains_key(o) {
                        format!("parameter `{o}` is a port list: use it as `EXPR in {o}`")
                    } else {
                        format!("unknown name `{o}` (built-ins: in_port, ports, link, len)")
                    };
                    return Err(Diag::new(p.head.span, hint));
                }
            },
            Expr::Path(p) => {
                let f = self.field(p)?;
                self.reads = self.reads | self.field_bit(p);
                Ex::Field(f)
            }
            Expr::Not(a, _) => Ex::Not(Box::new(self.expr_tree(a)?)),
            Expr::In(a, set) => {
                let i = self
                    .sets
                    .iter()
                    .position(|(n, _)| *n == set.text)
                    .ok_or_else(|| {
                        Diag::new(
                            set.span,
                            format!("`{}` is not a `ports` parameter", set.text),
                        )
                    })?;
                Ex::In(Box::new(self.expr_tree(a)?), i as u16)
            }
            Expr::Bin(op, a, b, _) => {
                // A literal compared with a field must fit it, or the test is constant.
                if matches!(op, ast::BinOp::Eq | ast::BinOp::Ne) {
                    for (x, y) in [(a, b), (b, a)] {
                        if let (Some(w), Expr::Num(v, _, s)) = (self.width(x), &**y) {
                            if matches!(**x, Expr::Path(_)) && !fits(*v, w) {
                                return Err(Diag::new(*s, format!("{v:#x} does not fit in the {w}-bit `{}`: the test is constant", expr_text(x))));
                            }
                        }
                    }
                }
                Ex::Bin(
                    *op,
                    Box::new(self.expr_tree(a)?),
                    Box::new(self.expr_tree(b)?),
                )
            }
        })
    }

    /// `dec.field` resolved to its read; the field must be extracted by the decoder.
    fn field(&self, p: &ast::Path) -> R<FieldRef> {
        let Some(fname) = &p.field else {
            return Err(Diag::new(
                p.head.span,
                format!(
                    "`{}` is not a header field (write `DECODER.FIELD`)",
                    p.head.text
                ),
            ));
        };
        let Some(&di) = self.decoders.get(p.head.text.as_str()) else {
            return Err(Diag::new(
                p.head.span,
                format!("unknown decoder `{}`", p.head.text),
            ));
        };
        let d = &self.prog.decoders[di];
        let l = &self.layouts[d.layout.text.as_str()];
        let Some((_, off, bits)) = l.fields.iter().find(|(n, _, _)| *n == fname.text) else {
            return Err(Diag::new(
                fname.span,
                format!("layout `{}` has no field `{}`", d.layout.text, fname.text),
            ));
        };
        if !d.extract.iter().any(|e| e.text == fname.text) {
            return Err(Diag::new(
                p.span(),
                format!(
                    "decoder `{}` does not extract `{}` (add it to its `extract` list)",
                    d.name.text, fname.text
                ),
            ));
        }
        Ok(FieldRef::new(di as u8, *off, *bits))
    }

    fn checksum_of(&self, p: &ast::Path) -> R<Option<FieldRef>> {
        let di = self.decoders[p.head.text.as_str()];
        let d = &self.prog.decoders[di];
        let layout = self
            .prog
            .layouts
            .iter()
            .find(|l| l.name.text == d.layout.text)
            .expect("resolved");
        let Some(c) = &layout.checksum else {
            return Ok(None);
        };
        let l = &self.layouts[d.layout.text.as_str()];
        let (_, off, bits) = l
            .fields
            .iter()
            .find(|(n, _, _)| *n == c.text)
            .expect("checked");
        Ok(Some(FieldRef::new(di as u8, *off, *bits)))
    }

    /// The profile bit of a header field: by well-known layout and field names; any
    /// other field counts as payload (so the planner stays conservative).
    fn field_bit(&mut self, p: &ast::Path) -> Fields {
        let (Some(f), Some(&di)) = (&p.field, self.decoders.get(p.head.text.as_str())) else {
            return Fields::NONE;
        };
        if !self.used[di].contains(&f.text) {
            self.used[di].push(f.text.clone());
        }
        let layout = self.prog.decoders[di].layout.text.as_str();
        match (layout, f.text.as_str()) {
            ("ethernet", "src") => Fields::ETH_SRC,
            ("ethernet", "dst") => Fields::ETH_DST,
            ("ethernet" | "sll" | "sll2", "type") => Fields::ETH_TYPE,
            ("vlan", "type") => Fields::ETH_TYPE | Fields::VLAN,
            ("vlan", _) => Fields::VLAN,
            ("ipv4" | "ipv6", "src") => Fields::IP_SRC,
            ("ipv4" | "ipv6", "dst") => Fields::IP_DST,
            ("ipv4", "proto") | ("ipv6", "next") => Fields::IP_PROTO,
            ("ipv4", "ttl") | ("ipv6", "hops") => Fields::IP_TTL,
            ("ipv4", "tos" | "dscp") => Fields::IP_DSCP,
            ("ipv4", "frag" | "flags") => Fields::IP_FRAG,
            ("ipv4" | "ipv6" | "ipver", _) => Fields::NONE,
            ("ports" | "tcp" | "udp", "src") => Fields::L4_SRC,
            ("ports" | "tcp" | "udp", "dst") => Fields::L4_DST,
            ("tcp", "flags") => Fields::TCP_FLAGS,
            _ => Fields::PAYLOAD,
        }
    }
}

/// Marks the tables a block learns into or removes from (before tables are built).
fn mark_learns(b: &[Stmt], tables: &HashMap<&str, usize>, out: &mut [bool]) {
    for s in b {
        match s {
            Stmt::Learn { table, .. } | Stmt::Remove { table, .. } => {
                if let Some(&t) = tables.get(table.text.as_str()) {
                    out[t] = true;
                }
            }
            Stmt::If(_, t, e) => {
                mark_learns(t, tables, out);
                mark_learns(e, tables, out);
            }
            Stmt::Match(_, arms) => {
                for a in arms {
                    mark_learns(&a.body, tables, out);
                }
            }
            _ => {}
        }
    }
}

fn ty_name(t: ParamType) -> &'static str {
    match t {
        ParamType::Int => "an int",
        ParamType::Seconds => "seconds",
        ParamType::Ports => "a port list",
    }
}

fn kind_name(k: MatchKind) -> &'static str {
    match k {
        MatchKind::Exact => "exact",
        MatchKind::Prefix => "prefix",
        MatchKind::Ternary => "ternary",
    }
}

fn value_span(v: &ast::Value) -> Span {
    match v {
        ast::Value::Num(_, s) => *s,
        ast::Value::Param(n) => n.span,
    }
}

fn arm_span(p: &ast::ArmPat) -> Span {
    match p {
        ast::ArmPat::Num(_, s) | ast::ArmPat::Any(s) => *s,
        ast::ArmPat::Name(n) => n.span,
    }
}

fn expr_text(e: &Expr) -> String {
    match e {
        Expr::Path(p) => p.text(),
        _ => "value".into(),
    }
}

pub fn stmt_span(s: &Stmt) -> Span {
    match s {
        Stmt::Set(p, e) => p.span().to(e.span()),
        Stmt::Learn { span, .. } | Stmt::Remove { span, .. } => *span,
        Stmt::Count(n) | Stmt::Drop(n) | Stmt::Goto(n) | Stmt::Next(n) => n.span,
        Stmt::If(e, _, _) | Stmt::Match(e, _) | Stmt::Output(e) => e.span(),
        Stmt::Flood(s) | Stmt::Pass(s) => *s,
    }
}
