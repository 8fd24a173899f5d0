//! `catena pipeline`: compile a pipeline-language program and print what the compiler
//! found (the partial decode: fields each decoder reads; tables; the derived profile).

use std::collections::HashMap;
use std::path::PathBuf;

use catena::io::text_file::{read_text, MAX_TEXT_FILE};
use catena::nfs::pipeline::{compile, Pipeline};

/// Compile a pipeline program (.stv) and report its partial decode and profile
/// (language: docs/pipeline.md). Exits 1 with `file:line:column: reason` on an error.
#[derive(clap::Args)]
pub struct Args {
    /// The program.
    program: PathBuf,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    // Read here with the bound (not `Pipeline::from_file`): `/dev/zero` is one line.
    let compiled = read_text(&a.program, MAX_TEXT_FILE)
        .map_err(|e| format!("cannot read program {}: {e}", a.program.display()))
        .and_then(|src| compile(&a.program.display().to_string(), &src, &HashMap::new()));
    match compiled.map(Pipeline::new) {
        Ok(p) => {
            outln!("{}: compiles", a.program.display())?;
            outln!("{}", p.report())?;
            match p.walk() {
                Some(w) => outln!("header walk run as catena's Layers decode: {w}")?,
                None => outln!("header walk: the program's decoders, as written")?,
            }
            Ok(0)
        }
        Err(e) => {
            eprintln!("{e}");
            Ok(1)
        }
    }
}
