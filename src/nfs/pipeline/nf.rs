//! The `pipeline` NF: runs a compiled program over batches; table entries change through
//! `control` (`add TABLE KEY -> ACTION`, `del TABLE KEY`), between batches.

use std::collections::HashMap;
use std::path::Path;

use super::ast::{ParamType, Pattern};
use super::check::{check, ParamVal, Report};
use super::error::Diag;
use super::parser::{parse, parse_entry, parse_key};
use super::plan::Plan;
use super::table::{Act, Masked};
use crate::io::text_file::{read_text, MAX_TEXT_FILE};
use crate::nfs::nf::{Context, Nf, Profile, StateScope, Stats};
use crate::nfs::params::{ParamDoc, ParamError, Params};
use crate::packet::Batch;

/// A program compiled: the plan, what the compiler reports, and the profile.
pub struct Compiled {
    pub plan: Plan,
    pub report: Report,
    pub profile: Profile,
}

/// Compiles `src` (named `file` in errors) with the given parameter values; parameters
/// not given take the program's defaults. Errors are rendered with the line underlined.
pub fn compile(
    file: &str,
    src: &str,
    values: &HashMap<String, ParamVal>,
) -> Result<Compiled, String> {
    let render = |d: Diag| d.render(file, src);
    let prog = parse(src).map_err(render)?;
    let (plan, report, drops) = check(&prog, values).map_err(render)?;
    // The profile wants 'static names: one small leak per NF built (once per run).
    let drops: Vec<&'static str> = drops
        .into_iter()
        .map(|d| &*Box::leak(d.into_boxed_str()))
        .collect();
    let profile = Profile {
        reads: report.reads,
        writes: report.writes,
        may_drop: report.may_drop,
        changes_length: false,
        per_flow_state: report.per_flow_state,
        outputs: &["out"],
        drop_reasons: Box::leak(drops.into_boxed_slice()),
    };
    Ok(Compiled {
        plan,
        report,
        profile,
    })
}

pub struct Pipeline {
    profile: Profile,
    plan: Plan,
    report: Report,
    /// Tables by name, for `control`.
    names: HashMap<String, usize>,
}

impl Pipeline {
    pub const PARAMS: &'static [ParamDoc] = &[ParamDoc {
        name: "program",
        ty: "path",
        default: "(required)",
        doc: "the .stv program (relative to the chain file); its `param`s are further keys here",
    }];

    pub fn new(c: Compiled) -> Pipeline {
        let names = c
            .plan
            .state
            .tables
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Pipeline {
            profile: c.profile,
            plan: c.plan,
            report: c.report,
            names,
        }
    }

    /// Reads and compiles a program file with parameter values.
    pub fn from_file(path: &Path, values: &HashMap<String, ParamVal>) -> Result<Pipeline, String> {
        let src = read_text(path, MAX_TEXT_FILE)
            .map_err(|e| format!("cannot read program {}: {e}", path.display()))?;
        Ok(Pipeline::new(compile(
            &path.display().to_string(),
            &src,
            values,
        )?))
    }

    pub fn from_params(p: &mut Params) -> Result<Pipeline, ParamError> {
        let path = p
            .path("program")?
            .ok_or_else(|| p.err("`program` is required: the .stv file to run"))?;
        let src = read_text(&path, MAX_TEXT_FILE)
            .map_err(|e| p.err(format!("cannot read program {}: {e}", path.display())))?;
        let file = path.display().to_string();
        let prog = parse(&src).map_err(|d| p.err(d.render(&file, &src)))?;
        // The program declares further parameters; take the ones the chain file gives.
        let keys: Vec<&str> = p.keys().collect();
        let mut values = HashMap::new();
        for par in &prog.params {
            let Some(&k) = keys.iter().find(|k| **k == par.name.text) else {
                continue;
            };
            let v = match par.ty {
                ParamType::Int => ParamVal::Int(p.int(k, 0, 0, i64::MAX)? as u64),
                ParamType::Seconds => ParamVal::Seconds(p.seconds_ns(k, 0)?),
                ParamType::Ports => ParamVal::Ports(p.ports(k, &[])?),
            };
            values.insert(par.name.text.clone(), v);
        }
        let c = compile(&file, &src, &values).map_err(|m| p.err(m))?;
        Ok(Pipeline::new(c))
    }

    /// Whether a recognised header walk runs as catena's `Layers` decode (default on);
    /// off runs the program's own decoders for every packet. Output is the same.
    pub fn with_walk(mut self, on: bool) -> Pipeline {
        self.plan.set_walk(on);
        self
    }

    /// The header walk run as `Layers`, described, when the program spells one out.
    pub fn walk(&self) -> Option<String> {
        self.plan.walk()
    }

    /// What the compiler found: fields each decoder reads (the partial decode), profile.
    pub fn report(&self) -> &Report {
        &self.report
    }

    fn add(&mut self, rest: &str) -> Result<String, String> {
        let (tname, entry) = split_table(rest)?;
        let ti = self.table(tname)?;
        let e = parse_entry(entry).map_err(|d| ctl_err(entry, d))?;
        let (value, mask, prio) = self.key(ti, &e.pats, entry)?;
        let act = match e.action {
            super::ast::EntryAction::Output(super::ast::Expr::Num(v, _, _)) if v <= 65535 => {
                Act::Output(v as u16)
            }
            super::ast::EntryAction::Output(_) => return Err("`output` takes a port number".into()),
            super::ast::EntryAction::Flood => Act::Flood,
            super::ast::EntryAction::Pass => Act::Pass,
            super::ast::EntryAction::Drop(r) => Act::Drop(
                self.plan
                    .drops
                    .iter()
                    .position(|d| *d == r.text.replace('_', "-"))
                    .ok_or_else(|| format!("unknown drop reason `{}`", r.text))?
                    as u8,
            ),
            // A goto added at run time could close a loop the checker never saw.
            super::ast::EntryAction::Goto(_) => {
                return Err("`goto` entries are given in the program, not added at run time".into())
            }
        };
        let t = &mut self.plan.state.tables[ti];
        if t.is_exact() {
            if e.priority.is_some() {
                return Err("`priority` is for prefix and ternary tables".into());
            }
            t.add_exact(value, act)?;
        } else {
            t.add_masked(Masked {
                value,
                mask,
                priority: e.priority.unwrap_or(prio),
                act,
                hits: 0,
            })?;
        }
        Ok(format!("table `{tname}`: {} entries", t.fixed_len()))
    }

    fn del(&mut self, rest: &str) -> Result<String, String> {
        let (tname, key) = split_table(rest)?;
        let ti = self.table(tname)?;
        let pats = parse_key(key).map_err(|d| ctl_err(key, d))?;
        let (value, mask, _) = self.key(ti, &pats, key)?;
        match self.plan.state.tables[ti].del(value, mask) {
            0 => Err(format!("table `{tname}` has no entry {key}")),
            n => Ok(format!(
                "table `{tname}`: removed {n} entr{}",
                if n == 1 { "y" } else { "ies" }
            )),
        }
    }

    fn table(&self, name: &str) -> Result<usize, String> {
        self.names.get(name).copied().ok_or_else(|| {
            let mut known: Vec<&str> = self.names.keys().map(|s| s.as_str()).collect();
            known.sort();
            format!("unknown table `{name}` (tables: {})", known.join(", "))
        })
    }

    /// A key typed at `ctl` as (value, mask, bits fixed), checked against the table's key.
    fn key(
        &self,
        ti: usize,
        pats: &[(Pattern, super::error::Span)],
        text: &str,
    ) -> Result<(u128, u128, u32), String> {
        let widths = &self.plan.code.keys[ti];
        let exact = self.plan.state.tables[ti].is_exact();
        if pats.len() != widths.len() {
            return Err(format!(
                "the key has {} field(s), {} given",
                widths.len(),
                pats.len()
            ));
        }
        let (mut value, mut mask) = (0u128, 0u128);
        for ((pat, _), (_, bits)) in pats.iter().zip(widths) {
            let bits = *bits;
            let all = if bits >= 128 {
                u128::MAX
            } else {
                (1u128 << bits) - 1
            };
            let (v, m) = match pat {
                Pattern::Exact(v) => (*v, all),
                _ if exact => {
                    return Err(format!(
                        "`{text}`: this table matches exactly; give plain values"
                    ))
                }
                Pattern::Any => (0, 0),
                Pattern::Prefix(v, len) if *len <= bits => {
                    let m = all & !(all >> len);
                    (v & m, m)
                }
                Pattern::Prefix(..) => {
                    return Err(format!("`{text}`: prefix longer than the {bits}-bit field"))
                }
                Pattern::Mask(v, m) => (v & m, *m),
            };
            if v & !all != 0 || m & !all != 0 {
                return Err(format!(
                    "`{text}`: a value does not fit its {bits}-bit field"
                ));
            }
            value = value << bits | v;
            mask = mask << bits | m;
        }
        Ok((value, mask, mask.count_ones()))
    }
}

fn split_table(rest: &str) -> Result<(&str, &str), String> {
    let rest = rest.trim();
    rest.split_once(char::is_whitespace)
        .map(|(t, k)| (t, k.trim()))
        .ok_or_else(|| "give a table and a key: TABLE KEY[ -> ACTION]".to_string())
}

fn ctl_err(text: &str, d: Diag) -> String {
    let (_, col) = d.line_col(text);
    format!("column {col}: {}", d.msg)
}

impl Nf for Pipeline {
    fn profile(&self) -> &Profile {
        &self.profile
    }

    /// A program that `learn`s (the switches) learns from every flow: not sharded. One
    /// that learns nothing keeps nothing between packets that decides a verdict (a wire,
    /// a fixed ACL), as the native NFs it mirrors.
    fn state_scope(&self) -> StateScope {
        if self.profile.per_flow_state {
            StateScope::Global("runs a pipeline program whose tables learn from every flow")
        } else {
            StateScope::None
        }
    }

    fn memory(&self) -> usize {
        self.plan.state.tables.iter().map(|t| t.memory()).sum()
    }

    #[inline]
    fn process(&mut self, batch: &mut Batch, cx: &Context) {
        self.plan.run_batch(batch, cx.ports);
    }

    /// `add TABLE KEY -> ACTION`, `del TABLE KEY`, `flush [TABLE]` (learned entries).
    fn control(&mut self, cmd: &str) -> Result<String, String> {
        let cmd = cmd.trim();
        let (verb, rest) = cmd.split_once(char::is_whitespace).unwrap_or((cmd, ""));
        match verb {
            "add" => self.add(rest),
            "del" => self.del(rest),
            "flush" => {
                let rest = rest.trim();
                let mut n = 0;
                for (i, t) in self.plan.state.tables.iter_mut().enumerate() {
                    if rest.is_empty() || self.names.get(rest) == Some(&i) {
                        n += t.flush();
                    }
                }
                if !rest.is_empty() && !self.names.contains_key(rest) {
                    return Err(self.table(rest).unwrap_err());
                }
                Ok(format!("forgot {n} learned entr{}", if n == 1 { "y" } else { "ies" }))
            }
            _ => Err(format!(
                "unknown command `{cmd}` (commands: add TABLE KEY -> ACTION, del TABLE KEY, flush [TABLE])"
            )),
        }
    }

    /// Per table: hits, misses, entries (fixed + learned), full (learns refused); per
    /// fixed entry: hits; then the program's `count` counters.
    fn stats(&self) -> Stats {
        let mut s: Stats = Vec::new();
        for t in &self.plan.state.tables {
            let n = &t.name;
            s.push((format!("{n}.hits").into(), t.hits));
            s.push((format!("{n}.misses").into(), t.misses));
            s.push((
                format!("{n}.entries").into(),
                (t.fixed_len() + t.learned_len()) as u64,
            ));
            s.push((format!("{n}.full").into(), t.full));
            s.extend(t.entry_hits().into_iter().map(|(k, v)| (k.into(), v)));
        }
        s.extend(
            self.plan
                .state
                .counters
                .iter()
                .map(|(k, v)| (k.clone().into(), *v)),
        );
        s
    }
}
