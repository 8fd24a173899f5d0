//! `catena run`: a chain over a trace.

use std::path::PathBuf;

use anyhow::Context as _;
use catena::io::Trace;
use catena::runtime::{control, limits, Chain, ChainConfig, RunOptions, Shards};

use super::progress::Bar;

/// Run a chain over a pcap/pcapng trace and print what each NF did.
#[derive(clap::Args)]
pub struct Args {
    /// Chain file (TOML); see examples/ and `catena nfs`.
    config: PathBuf,
    /// Trace to replay (pcap or pcapng); defaults to the chain's `[input] trace`.
    #[arg(short, long)]
    input: Option<PathBuf>,
    /// Write forwarded packets to this pcap (the `out` sink); without it they are discarded.
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Replay the trace this many times from memory.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    loops: u64,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Listen for live changes on this Unix socket: lines `NF COMMAND…`, applied between
    /// batches (see `catena ctl`).
    #[arg(long, value_name = "SOCKET")]
    control: Option<PathBuf>,
    /// Apply a change just before packet INDEX (0-based, across loops) enters the chain:
    /// `--change "5000 fw allow_ports 53"`. Repeatable; exactly reproducible.
    #[arg(long, value_name = "INDEX NF COMMAND")]
    change: Vec<String>,
    /// Header-action consolidation on (overrides the file's `fastpath`).
    #[arg(long, conflicts_with = "no_fastpath")]
    fastpath: bool,
    /// Header-action consolidation off (overrides the file's `fastpath`).
    #[arg(long)]
    no_fastpath: bool,
    /// Override the chain's number of virtual ingress ports.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    ports: Option<u16>,
    /// Shard the input over N run-to-completion workers by a symmetric flow hash
    /// (overrides the file's `workers`); each flow's packets keep their order.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    workers: Option<u32>,
    /// Refuse a chain that would allocate more than this (e.g. 2G, 512M; default: half
    /// the machine's RAM); `catena check` prints what a chain allocates.
    #[arg(long, value_name = "SIZE", value_parser = limits::parse_size)]
    max_memory: Option<u64>,
}

/// The chain of the file with the command line's overrides.
fn build(a: &Args, cfg: &ChainConfig) -> anyhow::Result<Chain> {
    let mut chain = Chain::from_config(cfg)?;
    if let Some(p) = a.ports {
        chain.ports = p;
    }
    if a.fastpath {
        let settings = chain.fastpath_settings;
        chain
            .enable_fastpath(chain.fastpath.unwrap_or(settings))
            .map_err(|e| anyhow::anyhow!("--fastpath: {}: {e}", a.config.display()))?;
    }
    if a.no_fastpath {
        chain.fastpath = None;
    }
    Ok(chain)
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let cfg = ChainConfig::load(&a.config)?;
    let chain = build(&a, &cfg)?;
    let workers = a.workers.map_or(chain.workers, |w| w as usize);
    if workers > 1 && a.control.is_some() {
        anyhow::bail!(
            "--control with {workers} workers is not built yet: use --change, or one worker"
        );
    }
    let input = a
        .input
        .clone()
        .or_else(|| chain.default_trace.clone())
        .with_context(|| {
            format!(
                "{}: no trace: pass --input FILE or set `[input] trace`",
                a.config.display()
            )
        })?;
    let trace = Trace::open(&input)?;
    let mut opts = RunOptions {
        loops: a.loops,
        ..Default::default()
    };
    if let Some(o) = a.output.clone() {
        opts.outputs.push(("out".into(), o));
    }
    for c in &a.change {
        opts.schedule.push(
            c.parse()
                .map_err(|e: String| anyhow::anyhow!("--change {e}"))?,
        );
    }
    // Every worker allocates a whole chain: the limit is for all of them.
    let limit = a.max_memory.unwrap_or_else(limits::default_max_memory);
    chain
        .memory(trace.max_packet_len())
        .check(limit / workers as u64)
        .map_err(|e| {
            anyhow::anyhow!(
                "{}: {e} (per worker, with {workers} workers)",
                a.config.display()
            )
        })?;
    let mut chains = vec![chain];
    for _ in 1..workers {
        chains.push(build(&a, &cfg)?);
    }
    let mut shards = Shards::new(chains, trace.max_packet_len())
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.config.display()))?;
    // Kept alive for the run; dropping it removes the socket file.
    let _server = match &a.control {
        Some(path) => {
            let (server, port) = control::serve(path)
                .map_err(|e| anyhow::anyhow!("{}: cannot listen: {e}", path.display()))?;
            shards.attach_control(port);
            Some(server)
        }
        None => None,
    };
    let mut bar = Bar::new(!a.json);
    let mut s = shards.run(&trace, &opts, &mut bar)?;
    s.input = input.display().to_string();
    if a.json {
        println!("{}", serde_json::to_string(&s)?);
    } else {
        print!("{}", s.render());
    }
    // The good packets were processed and written; the bad record still fails the run,
    // and so does output that could not be written (one line, after the summary).
    let mut errors: Vec<&str> = s.input_error.iter().map(String::as_str).collect();
    errors.extend(s.output_errors.iter().map(String::as_str));
    if !errors.is_empty() {
        eprintln!("error: {}", errors.join("; "));
        return Ok(1);
    }
    Ok(0)
}
