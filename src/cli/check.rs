//! `catena check`: validate a chain file and print its graph and plan.

use std::path::PathBuf;

use catena::runtime::{ports, Chain, ChainConfig};

/// Validate a chain file and print its graph, NF profiles and execution plan.
#[derive(clap::Args)]
pub struct Args {
    /// Chain file (TOML).
    config: PathBuf,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let cfg = ChainConfig::load(&a.config)?;
    let chain = Chain::from_config(&cfg)?;
    print!("{}", chain.describe());
    // Live ports: the interface must exist and we must be allowed to open it.
    ports::probe(&chain.port_specs).map_err(|e| anyhow::anyhow!("{}: {e}", a.config.display()))?;
    if let Some(t) = &chain.default_trace {
        println!("default trace: {}", t.display());
    }
    Ok(0)
}
