//! `catena check`: validate a chain file and print its graph and plan.

use std::path::PathBuf;

use catena::runtime::limits;
use catena::runtime::{ports, Chain, ChainConfig};

/// Validate a chain file and print its graph, NF profiles, execution plan and the memory
/// it will allocate (refused above --max-memory).
#[derive(clap::Args)]
pub struct Args {
    /// Chain file (TOML).
    config: PathBuf,
    /// Refuse a chain that would allocate more than this (e.g. 2G, 512M; default: half
    /// the machine's RAM). Every size parameter also has its own maximum (`catena nfs`).
    #[arg(long, value_name = "SIZE", value_parser = limits::parse_size)]
    max_memory: Option<u64>,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let mut cfg = ChainConfig::load(&a.config)?;
    cfg.max_memory = a.max_memory;
    let chain = Chain::from_config(&cfg)?;
    let limit = a.max_memory.unwrap_or_else(limits::default_max_memory);
    // Packets up to 64 KiB: the largest buffer class a trace can need.
    let mem = chain.memory(u16::MAX as usize);
    mem.check(limit)
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.config.display()))?;
    crate::cli::write_out(format_args!("{}", chain.describe()))?;
    // Live ports: the interface must exist and we must be allowed to open it.
    ports::probe(&chain.port_specs).map_err(|e| anyhow::anyhow!("{}: {e}", a.config.display()))?;
    if let Some(t) = &chain.default_trace {
        outln!("default trace: {}", t.display())?;
    }
    outln!("{}", mem.describe(limit))?;
    Ok(0)
}
