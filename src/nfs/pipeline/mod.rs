//! The pipeline language: Steve-style match-action programs (layouts, decoders, tables,
//! actions) compiled into an NF. Syntax and semantics: docs/pipeline.md.
//!
//! lexer → parser (syntax tree) → check (names, widths, reachability, loops) → plan (fields
//! at precomputed offsets) → flat (the plan as one instruction list, run per batch without
//! allocation or recursion) → [`Pipeline`], the NF.

mod ast;
mod check;
mod error;
mod flat;
mod lexer;
mod nf;
mod parser;
mod plan;
mod table;
mod walk;

pub use check::{ParamVal, Report};
pub use error::{Diag, Span};
pub use nf::{compile, Compiled, Pipeline};

/// Parses `src` only (for tests that feed the parser arbitrary text).
pub fn parse_only(src: &str) -> Result<(), Diag> {
    parser::parse(src).map(|_| ())
}
