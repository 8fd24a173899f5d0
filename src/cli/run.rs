//! `catena run`: a chain over a trace.

use std::path::PathBuf;
use std::time::Instant;

use catena::io::gen::{generate, GenOptions, Profile};
use catena::io::{Opened, PcapStream, Source, Trace, TraceSource};
use catena::runtime::{control, limits, Chain, ChainConfig, RunOptions, Runner};

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
    /// Replay the trace this many times (read again from the file each time).
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
    /// Header-action consolidation (overrides the file's `fastpath`): `--fastpath` or
    /// `--fastpath on` on, `--fastpath off` off, `--fastpath auto` switched on and off
    /// by the run from measured cost (decision and costs in the summary).
    #[arg(long, conflicts_with = "no_fastpath", num_args = 0..=1, default_missing_value = "on", value_name = "MODE")]
    fastpath: Option<FastMode>,
    /// Header-action consolidation off (overrides the file's `fastpath`).
    #[arg(long)]
    no_fastpath: bool,
    /// Override the chain's number of virtual ingress ports.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    ports: Option<u16>,
    /// Refuse a chain that would allocate more than this (e.g. 2G, 512M; default: half
    /// the machine's RAM); `catena check` prints what a chain allocates.
    #[arg(long, value_name = "SIZE", value_parser = limits::parse_size)]
    max_memory: Option<u64>,
}

/// `--fastpath MODE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FastMode {
    On,
    Off,
    Auto,
}

/// Where the packets come from: a pcap read as the run goes, or a trace held in memory
/// (pcapng, the generated fallback).
enum Input {
    Stream(Box<PcapStream>),
    Held(Trace),
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    // `seconds_total` counts from here: loading the chain is part of what a user waits for.
    let t0 = Instant::now();
    let mut cfg = ChainConfig::load(&a.config)?;
    cfg.max_memory = a.max_memory;
    let mut chain = Chain::from_config(&cfg)?;
    if let Some(p) = a.ports {
        chain.ports = p;
    }
    match a.fastpath {
        Some(m @ (FastMode::On | FastMode::Auto)) => {
            let settings = chain.fastpath_settings;
            chain
                .enable_fastpath(chain.fastpath.unwrap_or(settings))
                .map_err(|e| anyhow::anyhow!("--fastpath: {}: {e}", a.config.display()))?;
            chain.fastpath_auto = m == FastMode::Auto;
        }
        Some(FastMode::Off) => chain.fastpath = None,
        None => {}
    }
    if a.no_fastpath {
        chain.fastpath = None;
    }
    let (input, name) = match (&a.input, &chain.default_trace) {
        (Some(i), _) => (Some(i.clone()), i.display().to_string()),
        (None, Some(t)) if t.exists() => (Some(t.clone()), t.display().to_string()),
        // A fresh clone has no ../shared: replay a generated trace rather than fail.
        (None, Some(t)) => {
            eprintln!(
                "note: {} not found; replaying a generated trace instead (catena gen --profile smallflows)",
                t.display()
            );
            (None, "generated smallflows".to_string())
        }
        (None, None) => anyhow::bail!(
            "{}: no trace: pass --input FILE or set `[input] trace`",
            a.config.display()
        ),
    };
    let mut input = match &input {
        Some(path) => {
            // Checked before opening: opening a pipe waits for its writer.
            let regular = std::fs::metadata(path).is_ok_and(|m| m.is_file());
            if a.loops > 1 && !regular && path.exists() {
                anyhow::bail!(
                    "{}: --loops needs a file that can be read again, not a pipe or a device",
                    path.display()
                );
            }
            match PcapStream::open(path)? {
                Opened::Pcap(s) => Input::Stream(s),
                Opened::Pcapng => Input::Held(Trace::load(path)?),
            }
        }
        None => Input::Held(
            generate(&GenOptions::profile(Profile::SmallFlows)).map_err(anyhow::Error::msg)?,
        ),
    };
    let mut held;
    let src: &mut dyn Source = match &mut input {
        Input::Stream(s) => &mut **s,
        Input::Held(t) => {
            held = TraceSource::new(t);
            &mut held
        }
    };
    let mut opts = RunOptions {
        loops: a.loops,
        ..Default::default()
    };
    if let Some(o) = a.output {
        opts.outputs.push(("out".into(), o));
    }
    for c in &a.change {
        opts.schedule.push(
            c.parse()
                .map_err(|e: String| anyhow::anyhow!("--change {e}"))?,
        );
    }
    let limit = a.max_memory.unwrap_or_else(limits::default_max_memory);
    chain
        .memory(src.max_packet_len())
        .check(limit)
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.config.display()))?;
    let mut runner = Runner::new(chain, src.max_packet_len());
    // Kept alive for the run; dropping it removes the socket file.
    let _server = match &a.control {
        Some(path) => {
            let (server, port) = control::serve(path)
                .map_err(|e| anyhow::anyhow!("{}: cannot listen: {e}", path.display()))?;
            runner.attach_control(port);
            Some(server)
        }
        None => None,
    };
    let mut bar = Bar::new(!a.json);
    let mut s = runner.run_source(src, &opts, &mut bar)?;
    s.input = name;
    s.set_total(t0.elapsed().as_secs_f64());
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
