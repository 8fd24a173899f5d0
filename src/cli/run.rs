//! `catena run`: a chain over a trace.

use std::path::PathBuf;
use std::time::Instant;

use catena::io::gen::{generate, GenOptions, Profile};
use catena::io::{MappedPcap, Opened, PcapStream, Rate, Source, Trace, TraceSource};
use catena::runtime::{
    api, control, limits, live_fan, ports, Chain, ChainConfig, Live, NodeKind, RunOptions, Runner,
    Shards,
};

use super::progress::Bar;
use super::signals;

/// Run a chain over a pcap/pcapng trace and print what each NF did. A chain with
/// `[[port]]` tables runs on them instead: live (AF_PACKET or AF_XDP) until SIGINT/SIGTERM,
/// then it drains, flushes and prints the summary; replayed pcap ports end it when done.
#[derive(clap::Args)]
pub struct Args {
    /// Chain file (TOML); see examples/ and `catena nfs`.
    config: PathBuf,
    /// Trace to replay (pcap or pcapng); defaults to the chain's `[input] trace`.
    #[arg(short, long)]
    input: Option<PathBuf>,
    /// Write forwarded packets to this pcap (the `out` sink); without it they are discarded.
    /// With several workers on live ports each writes its own: `out.w0.pcap`, `out.w1.pcap`.
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Replay the trace this many times (read again from the file each time).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    loops: u64,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Listen for live changes on this Unix socket: lines `NF COMMAND…`, applied between
    /// batches (see `catena ctl`); with several workers, at one packet index in all of
    /// them, which the reply names (on live ports: in each worker between its batches).
    /// Whoever can connect may reconfigure the chain: the
    /// socket is made mode 0600, in a directory not writable by every user, and only a
    /// stale socket of yours is ever replaced at that path.
    #[arg(long, value_name = "SOCKET")]
    control: Option<PathBuf>,
    /// Close a control connection that sends no complete line within this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    control_idle: u64,
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
    /// Serve the HTTP API on this loopback address (chains with [[port]] tables): GET
    /// /stats, GET /metrics, POST /nf/NAME with a command as the body. With several
    /// workers, commands reach every worker and the counters are summed.
    #[arg(long, value_name = "ADDR:PORT")]
    api: Option<String>,
    /// Pace of replayed `kind = "pcap"` ports: `10000pps`, `100Mbps`, `1Gbps` or `top`.
    #[arg(long)]
    rate: Option<String>,
    /// Shard the input over N run-to-completion workers by a symmetric flow hash
    /// (overrides the file's `workers`); each flow's packets keep their order. On live
    /// ports each worker has its own sockets: AF_PACKET joins a fanout group, AF_XDP takes
    /// queue `queue + worker` (the interface needs that many queues).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    workers: Option<u32>,
    /// Refuse a chain that would allocate more than this (e.g. 2G, 512M; default: half
    /// the machine's RAM); `catena check` prints what a chain allocates.
    #[arg(long, value_name = "SIZE", value_parser = limits::parse_size)]
    max_memory: Option<u64>,
    /// Copy every packet from the input into a pool buffer as it is read (as a NIC's DMA
    /// would). By default a pcap file is mapped and its packets are processed in place,
    /// copied only when an NF first writes one; the output is the same either way.
    #[arg(long)]
    copy: bool,
    /// With one worker over a mapped pcap, fill the map's page tables from a helper
    /// thread ahead of the worker, when a second core looks idle. Off by default: it
    /// trades CPU for wall time (session 20: 5-10 % more CPU time, wall within ±4 %).
    #[arg(long)]
    fill_ahead: bool,
}

/// `--fastpath MODE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FastMode {
    On,
    Off,
    Auto,
}

/// Where the packets come from: a pcap mapped (processed in place) or read as the run
/// goes, or a trace held in memory (pcapng, the generated fallback, a sharded run).
enum Input {
    Stream(Box<dyn Source>),
    /// A mapped pcap that several workers each walk (`Shards::run_stream`).
    Shared(MappedPcap),
    Held(Trace),
}

/// The chain of the file with the command line's overrides.
fn build(a: &Args, cfg: &ChainConfig) -> anyhow::Result<Chain> {
    let mut chain = Chain::from_config(cfg)?;
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
    Ok(chain)
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    // `seconds_total` counts from here: loading the chain is part of what a user waits for.
    let t0 = Instant::now();
    let mut cfg = ChainConfig::load(&a.config)?;
    cfg.max_memory = a.max_memory;
    let chain = build(&a, &cfg)?;
    let workers = a.workers.map_or(chain.workers, |w| w as usize);
    if !chain.port_specs.is_empty() {
        if workers > 1 {
            return run_ports_workers(a, chain, &cfg, workers);
        }
        return run_ports(a, chain, &cfg);
    }
    let threads = workers * chain.stages();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if chain.stages() > 1 && threads > cores {
        eprintln!(
            "warning: {workers} worker(s) × {} stages = {threads} threads on {cores} cores: idle stage threads yield, but stages share cores",
            chain.stages()
        );
    }
    let helpers = workers * chain.groups.len();
    if helpers > 0 && threads + helpers > cores {
        eprintln!(
            "warning: {threads} worker/stage thread(s) + {helpers} parallel helper(s) on {cores} cores: a helper without a core hands its batches back (as in sequence)"
        );
    }
    if a.api.is_some() {
        anyhow::bail!("--api serves chains with [[port]] tables; this one replays a trace");
    }
    if a.rate.is_some() {
        anyhow::bail!("--rate paces `kind = \"pcap\"` ports; this chain has no [[port]] tables");
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
            // Before: the map's own refusal, "`catena run` streams those", which it does
            // only with one worker.
            if workers > 1 && !regular && path.exists() {
                anyhow::bail!(
                    "{}: {workers} workers need a file (they share it), not a pipe or a device: one worker streams those",
                    path.display()
                );
            }
            match PcapStream::open(path)? {
                // Sharded workers each walk the mapped file, keeping their own records:
                // nothing before the first packet, but every worker parses and hashes
                // every record on every loop; with --loops the index and placement below,
                // paid once, win (merged trace, 5 loops: 1.49× one worker against 1.11×).
                // Live changes (`--control`) take the indexed path too: the streamed
                // path's hand-off (`Gate::end_at`) has no test yet.
                Opened::Pcap(_)
                    if workers > 1 && regular && !a.copy && a.loops == 1 && a.control.is_none() =>
                {
                    Input::Shared(MappedPcap::open(path)?)
                }
                // Sharded workers each walk the whole index (their share of it). One
                // worker copying a file over several loops takes the index too (mapped
                // and indexed once, each loop's packets copied from the map, as the bench's
                // one worker runs), not a stream read and parsed again every loop through
                // read(2): 4sics, 11 loops, about 35 → 60 Mpps.
                Opened::Pcap(_) if workers > 1 || (regular && a.copy && a.loops > 1) => {
                    Input::Held(Trace::open(path)?)
                }
                // In place: packets view the map, copied only when an NF writes.
                Opened::Pcap(_) if regular && !a.copy => {
                    let mut m = MappedPcap::open(path)?;
                    // One worker leaves a core idle: the page tables can be filled there
                    // (`--fill-ahead`). Not when the machine is busy (load average at or
                    // above the cores): there the helper waits for a core, the worker
                    // overtakes it and both fault the same pages (session 17: 7 % more
                    // wall time at load 8). Off by default since session 20: with a core
                    // free the helper's CPU time came on top of the worker's (+5-10 %)
                    // for no steady gain in wall time (docs/e2e.md).
                    if a.fill_ahead && core_to_spare() {
                        m.populate_ahead();
                    }
                    Input::Stream(Box::new(m))
                }
                Opened::Pcap(s) => Input::Stream(s),
                // issue 20 (e2e): pcapng streamed in bounded memory (one worker).
                Opened::Pcapng(_) if workers > 1 => Input::Held(Trace::load(path)?),
                Opened::Pcapng(s) => Input::Stream(s),
            }
        }
        None => Input::Held(
            generate(&GenOptions::profile(Profile::SmallFlows)).map_err(anyhow::Error::msg)?,
        ),
    };
    let max_packet = match &input {
        Input::Stream(s) => s.max_packet_len(),
        Input::Shared(m) => m.max_packet_len(),
        Input::Held(t) => t.max_packet_len(),
    };
    let mut opts = RunOptions {
        loops: a.loops,
        stop: Some(&signals::STOP),
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
        .memory(max_packet)
        .check(limit / workers as u64)
        .map_err(|e| {
            if workers > 1 {
                anyhow::anyhow!(
                    "{}: {e} (per worker, with {workers} workers)",
                    a.config.display()
                )
            } else {
                anyhow::anyhow!("{}: {e}", a.config.display())
            }
        })?;
    let mut bar = Bar::new(!a.json);
    // From here on a SIGINT/SIGTERM ends the replay between batches, with its summary.
    signals::install_replay_handlers();
    let mut s = if let (true, Input::Held(_) | Input::Shared(_)) = (workers > 1, &input) {
        let mut chains = vec![chain];
        for _ in 1..workers {
            chains.push(build(&a, &cfg)?);
        }
        let mut shards = Shards::new(chains, max_packet)
            .map_err(|e| anyhow::anyhow!("{}: {e}", a.config.display()))?;
        // Kept alive for the run; dropping it removes the socket file.
        let _server = match open_control(&a, shards.preparers())? {
            Some((server, port)) => {
                shards.attach_control(port);
                Some(server)
            }
            None => None,
        };
        match input {
            Input::Shared(m) => shards.run_stream(&m, &opts, &mut bar)?,
            Input::Held(trace) => {
                // The trace lasts the process, so the workers' packets can view its
                // bytes in place (copied only when an NF writes), as one worker's do.
                let trace: &'static Trace = Box::leak(Box::new(trace));
                if a.copy {
                    shards.run(trace, &opts, &mut bar)?
                } else {
                    shards.run_in_place(trace, &opts, &mut bar)?
                }
            }
            Input::Stream(_) => unreachable!("matched above"),
        }
    } else {
        let mut held;
        let src: &mut dyn Source = match &mut input {
            Input::Stream(s) => &mut **s,
            Input::Shared(m) => m,
            Input::Held(t) => {
                held = TraceSource::new(t);
                &mut held
            }
        };
        let mut runner = Runner::new(chain, max_packet);
        // Kept alive for the run; dropping it removes the socket file.
        let _server = serve_control(&a, &mut runner)?;
        runner.run_source(src, &opts, &mut bar)?
    };
    s.input = name;
    s.set_total(t0.elapsed().as_secs_f64());
    report_replay(&s, a.json)
}

/// A replay's summary and exit status: as [`report`], and when a SIGINT/SIGTERM ended it
/// early, the summary says so (`--json`: `"interrupted": {"signal", "after_packets"}`),
/// one `error:` line names it and the status is a shell's for that signal (130, 143).
fn report_replay(s: &catena::runtime::Summary, json: bool) -> anyhow::Result<i32> {
    let Some((signal, code)) = signals::received() else {
        return report(s, json);
    };
    let n = s.packets_in;
    let printed = if json {
        let mut v = serde_json::to_value(s)?;
        v["interrupted"] = serde_json::json!({ "signal": signal, "after_packets": n });
        outln!("{v}")
    } else {
        crate::cli::write_out(format_args!(
            "{}interrupted by {signal} after {n} packets\n",
            s.render()
        ))
    };
    let lost = printed.err().map(|e| format!("{e} (the summary is lost)"));
    let mut errors = vec![format!("interrupted by {signal} after {n} packets")];
    errors.extend(s.input_error.iter().cloned());
    errors.extend(s.output_errors.iter().cloned());
    errors.extend(lost);
    eprintln!("error: {}", errors.join("; "));
    Ok(code)
}

/// `--control PATH`: the Unix socket, its commands compiled off the worker and applied
/// between batches; the returned server removes the socket when dropped.
fn serve_control(a: &Args, runner: &mut Runner) -> anyhow::Result<Option<control::ControlServer>> {
    let Some((server, port)) = open_control(a, runner.preparers())? else {
        return Ok(None);
    };
    runner.attach_control(port);
    Ok(Some(server))
}

/// The `--control` socket, if asked for, and the port its commands arrive on.
fn open_control(
    a: &Args,
    preparers: std::collections::HashMap<String, catena::nfs::Preparer>,
) -> anyhow::Result<Option<(control::ControlServer, control::ControlPort)>> {
    let Some(path) = &a.control else {
        return Ok(None);
    };
    let opts = control::ServeOptions {
        idle: std::time::Duration::from_secs(a.control_idle),
    };
    let (server, port) = control::serve(path, opts, preparers)
        .map_err(|e| anyhow::anyhow!("--control {}: {e}", path.display()))?;
    Ok(Some((server, port)))
}

/// A chain with `[[port]]` tables: packets come from and leave by its ports.
fn run_ports(a: Args, chain: Chain, cfg: &ChainConfig) -> anyhow::Result<i32> {
    let file = a.config.display().to_string();
    if a.input.is_some() || a.loops > 1 || !a.change.is_empty() || a.ports.is_some() {
        anyhow::bail!(
            "{file}: the chain takes packets from its [[port]] tables; --input, --loops, --change and --ports do not apply (replay a file with a `kind = \"pcap\"` port)"
        );
    }
    let rate = a
        .rate
        .as_deref()
        .map(str::parse::<Rate>)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--rate {e}"))?;
    let mut specs = chain.port_specs.clone();
    // [xdp hook] Stage threads keep packets past the batch: views of a port's ring would
    // outlive the memory they point into, so such runs copy on receive.
    if chain.stages() > 1 {
        ports::copy_rx(&mut specs);
    }
    let live = specs.iter().any(|s| s.is_live());
    let ports = ports::open(&specs, rate).map_err(|e| anyhow::anyhow!("{file}: {e}"))?;
    let max = ports.iter().map(|p| p.max_frame()).max().unwrap_or(0);
    let mut opts = RunOptions::default();
    if let Some(o) = a.output.clone() {
        opts.outputs.push(("out".into(), o));
    }
    let limit = a.max_memory.unwrap_or_else(limits::default_max_memory);
    chain
        .memory(max.max(64))
        .check(limit)
        .map_err(|e| anyhow::anyhow!("{file}: {e}"))?;
    let mut runner = Runner::new(chain, max.max(64));
    runner.reload_from(&a.config, cfg);
    let _server = serve_control(&a, &mut runner)?;
    let shared = api::Shared::default();
    let _api = match &a.api {
        Some(addr) => {
            let (tx, port) = control::channel_pair();
            runner.attach_control(port);
            Some(serve_api(addr, tx, shared.clone(), runner.preparers())?)
        }
        None => None,
    };
    signals::install_service_handlers();
    if live {
        eprintln!(
            "catena: running on {} port(s); Ctrl-C or SIGTERM stops",
            specs.len()
        );
    }
    let s = runner.run_live(
        ports,
        &opts,
        Live {
            stop: &signals::STOP,
            reload: Some(&signals::RELOAD),
            publish: a.api.is_some().then(|| shared.clone()),
        },
    )?;
    report(&s, a.json)
}

/// `--api ADDR`: loopback only (the API has no authentication).
fn serve_api(
    addr: &str,
    tx: std::sync::mpsc::Sender<control::Command>,
    shared: api::Shared,
    preparers: std::collections::HashMap<String, catena::nfs::Preparer>,
) -> anyhow::Result<api::ApiServer> {
    let sa: std::net::SocketAddr = addr
        .parse()
        .map_err(|_| anyhow::anyhow!("--api `{addr}`: write it as 127.0.0.1:9100"))?;
    if !sa.ip().is_loopback() {
        anyhow::bail!("--api `{addr}`: the API has no authentication; bind it to a loopback address such as 127.0.0.1:9100");
    }
    let srv = api::serve(addr, tx, shared, preparers).map_err(|e| anyhow::anyhow!("--api: {e}"))?;
    eprintln!("catena: API on http://{}", srv.addr);
    Ok(srv)
}

/// A live chain on several workers, each with its own socket per port (AF_PACKET fanout,
/// AF_XDP one queue each: `ports::open_workers`), until SIGINT/SIGTERM; the summaries
/// are summed. `--control` and `--api` reach every worker through one fan thread
/// (`runtime::live_fan`): commands and reloads go to each, counters are summed. Files
/// (`--output`, sinks with a path): one per worker, `NAME.wW.EXT` (as flow_monitor's),
/// since one file written by several workers would need a lock per batch and live input
/// has no packet order across workers to merge by. `--rate` paces pcap ports, which
/// several workers do not take (each would replay the file): refused in one line.
fn run_ports_workers(
    a: Args,
    chain: Chain,
    cfg: &ChainConfig,
    workers: usize,
) -> anyhow::Result<i32> {
    let file = a.config.display().to_string();
    if a.input.is_some() || a.loops > 1 || !a.change.is_empty() || a.ports.is_some() {
        anyhow::bail!(
            "{file}: the chain takes packets from its [[port]] tables; --input, --loops, --change and --ports do not apply"
        );
    }
    if a.rate.is_some() {
        anyhow::bail!(
            "{file}: --rate paces `kind = \"pcap\"` ports, which run on one worker: run with --workers 1"
        );
    }
    // [xdp hook] Each sink's file, written by worker `w` as `NAME.wW.EXT`.
    let mut files: Vec<(String, PathBuf)> = chain
        .nodes
        .iter()
        .filter_map(|n| match &n.kind {
            NodeKind::Sink { path: Some(p) } => Some((n.name.clone(), p.clone())),
            _ => None,
        })
        .collect();
    if let Some(o) = &a.output {
        files.retain(|(n, _)| n != "out");
        files.push(("out".into(), o.clone()));
    }
    let mut specs = chain.port_specs.clone();
    // [xdp hook] As with one worker: stage threads keep packets past the batch.
    if chain.stages() > 1 {
        ports::copy_rx(&mut specs);
    }
    let sets = ports::open_workers(&specs, workers).map_err(|e| anyhow::anyhow!("{file}: {e}"))?;
    let max = sets[0].iter().map(|p| p.max_frame()).max().unwrap_or(0);
    let limit = a.max_memory.unwrap_or_else(limits::default_max_memory);
    chain
        .memory(max.max(64))
        .check(limit / workers as u64)
        .map_err(|e| anyhow::anyhow!("{file}: {e} (per worker, with {workers} workers)"))?;
    let mut chains = vec![chain];
    for _ in 1..workers {
        chains.push(build(&a, cfg)?);
    }
    // [xdp hook] One fan thread joins the workers to `--control` and `--api`.
    let mut runners: Vec<Runner> = chains
        .into_iter()
        .map(|c| {
            let mut r = Runner::new(c, max.max(64));
            r.reload_from(&a.config, cfg);
            r
        })
        .collect();
    let preparers = runners[0].preparers();
    let mut inputs = Vec::new();
    let _server = match open_control(&a, preparers.clone())? {
        Some((server, port)) => {
            inputs.push(port);
            Some(server)
        }
        None => None,
    };
    let merged = api::Shared::default();
    let _api = match &a.api {
        Some(addr) => {
            let (tx, port) = control::channel_pair();
            inputs.push(port);
            Some(serve_api(addr, tx, merged.clone(), preparers.clone())?)
        }
        None => None,
    };
    let parts: Vec<api::Shared> = (0..workers).map(|_| api::Shared::default()).collect();
    let (ports_of, fan) = live_fan::start(
        workers,
        live_fan::FanParts {
            inputs,
            preparers,
            parts: parts.clone(),
            merged: a.api.is_some().then(|| merged.clone()),
            reload: Some(&signals::RELOAD),
        },
    )?;
    for (r, p) in runners.iter_mut().zip(ports_of) {
        r.attach_control(p);
    }
    let publish = a.api.is_some();
    signals::install_service_handlers();
    eprintln!(
        "catena: running on {} port(s) with {workers} workers; Ctrl-C or SIGTERM stops",
        sets[0].len()
    );
    let started = Instant::now();
    let stop = &signals::STOP;
    let files = &files;
    let results: Vec<anyhow::Result<catena::runtime::Summary>> = std::thread::scope(|scope| {
        let handles: Vec<_> = runners
            .into_iter()
            .zip(sets)
            .zip(parts)
            .enumerate()
            .map(|(w, ((mut r, ports), part))| {
                std::thread::Builder::new()
                    .name(format!("catena-w{w}"))
                    .spawn_scoped(scope, move || {
                        // Reloads arrive through the fan, to every worker.
                        let live = Live {
                            stop,
                            reload: None,
                            publish: publish.then_some(part),
                        };
                        let opts = RunOptions {
                            outputs: files
                                .iter()
                                .map(|(n, p)| (n.clone(), live_fan::worker_file(p, w)))
                                .collect(),
                            ..Default::default()
                        };
                        let s = r.run_live(ports, &opts, live);
                        // One worker failing, or ending on an output it could not
                        // write, ends the others (their files whole).
                        if s.as_ref().map_or(true, |s| !s.output_errors.is_empty()) {
                            stop.store(true, std::sync::atomic::Ordering::Relaxed);
                        }
                        s.map(|mut s| {
                            for e in &mut s.output_errors {
                                *e = format!("worker {w}: {e}");
                            }
                            s
                        })
                    })
            })
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(w, h)| catena::runtime::shard::join_worker(w, h))
            .collect()
    });
    drop(fan);
    let parts = results.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
    let mut s = live_fan::sum_workers(parts);
    let secs = started.elapsed().as_secs_f64();
    s.seconds = secs;
    s.mpps = s.packets_in as f64 / secs.max(1e-9) / 1e6;
    // The API's last answer is the final summary, as with one worker.
    merged.lock().unwrap_or_else(|e| e.into_inner()).summary = Some(s.clone());
    report(&s, a.json)
}

/// Prints the summary and gives the exit status: the good packets were processed and
/// written; a bad input record or output that could not be written still fails the run
/// (one line, after the summary).
fn report(s: &catena::runtime::Summary, json: bool) -> anyhow::Result<i32> {
    let printed = if json {
        outln!("{}", serde_json::to_string(s)?)
    } else {
        crate::cli::write_out(format_args!("{}", s.render()))
    };
    let lost = printed.err().map(|e| format!("{e} (the summary is lost)"));
    let mut errors: Vec<&str> = s.input_error.iter().map(String::as_str).collect();
    errors.extend(s.output_errors.iter().map(String::as_str));
    errors.extend(lost.as_deref());
    if !errors.is_empty() {
        eprintln!("error: {}", errors.join("; "));
        return Ok(1);
    }
    Ok(0)
}

/// Whether a second core is likely idle for the run: more than one, and a one-minute
/// load average below their number (read once at start).
fn core_to_spare() -> bool {
    let Ok(n) = std::thread::available_parallelism() else {
        return false;
    };
    let mut load = [0f64; 1];
    // SAFETY: getloadavg writes at most the one element it is given.
    let got = unsafe { libc::getloadavg(load.as_mut_ptr(), 1) };
    n.get() > 1 && got == 1 && load[0] < n.get() as f64
}
