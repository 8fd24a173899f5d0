//! `catena bench fastpath`: CPU cycles per packet (TSC) for a flow's first packet and for
//! its later packets, for chains of 1, 2, 3, 6 and 8 NFs — identical ones (IP filter, NAT,
//! Maglev) and the mixed chain (filter, NAT, Maglev, monitor, repeated) — with
//! header-action consolidation off, on and `auto`; and the mixed chain of 4 and of 8 on
//! the merged real trace, Mpps off, on and auto.
//!
//! First packets: a trace of F distinct UDP flows, one packet each (every packet misses
//! and is recorded: these chains record a flow's first packet, `fastpath_record = 1`, as
//! the report does; the real-trace chains keep the default, the second). Later packets:
//! the same flows four more times in the same run, the chain not finished in between (every
//! packet hits; a run's end drains the monitors, which a long-running chain never does, so
//! the later packets are timed in the steady state). Cycles are the
//! whole worker loop per packet: copying the record into a pool buffer, the lookup (or
//! recording), the NFs or their state functions and the consolidated rewrite, and handing
//! the packet to a sink that discards it. The same runs time an empty chain (the floor)
//! so the table can also show what the chain alone costs, the quantity the FastPath
//! report's figure plots.

use std::path::Path;

use serde::Serialize;

use catena::io::{PcapHeader, PcapWriter, Trace};
use catena::optimise::fastpath::FastConfig;
use catena::packet::{checksum, L3Kind, Layers, LinkKind, MAX_BATCH};
use catena::runtime::{Chain, ChainConfig, NoProgress, Progress, RunOptions, Runner, Summary};

use super::nfs::{random_rules, toml_list};
use super::{median, print_table, traces, tsc, write_results, Args};

/// Distinct flows in the first-packet trace (times `--scale`).
const FLOWS: usize = 16_384;
/// Later packets per flow.
const AGAIN: usize = 4;
/// Chain lengths of the bench.
const LENS: [usize; 5] = [1, 2, 3, 6, 8];
/// What the chains are made of; `mixed` repeats filter, NAT, Maglev, monitor.
const KINDS: [&str; 4] = ["ip_filter", "nat", "maglev", "mixed"];
/// The mixed chain's period.
const MIXED: [&str; 4] = ["ip_filter", "nat", "maglev", "flow_monitor"];

/// FastPath off, on, or deciding by measured cost (`fastpath = "auto"`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Off,
    On,
    Auto,
}

impl Mode {
    const ALL: [Mode; 3] = [Mode::Off, Mode::On, Mode::Auto];

    fn name(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::On => "on",
            Mode::Auto => "auto",
        }
    }

    /// Sets the chain up for this mode with FastPath settings `cfg`.
    fn apply(self, chain: &mut Chain, cfg: FastConfig) -> anyhow::Result<()> {
        if self != Mode::Off {
            chain.enable_fastpath(cfg).map_err(anyhow::Error::msg)?;
            chain.fastpath_auto = self == Mode::Auto;
        }
        Ok(())
    }
}

#[derive(Serialize)]
struct Row {
    nf: String,
    chain_len: usize,
    /// `off`, `on` or `auto`.
    fastpath: &'static str,
    cycles_first: f64,
    cycles_subsequent: f64,
    /// The empty chain's cycles per later packet in the same runs: subtracted, it leaves
    /// what the NFs (off) or the consolidated path (on) cost.
    cycles_floor: f64,
}

#[derive(Serialize)]
struct Mixed {
    trace: String,
    chain_len: usize,
    packets: u64,
    mpps_off: f64,
    mpps_on: f64,
    mpps_auto: f64,
    hits: u64,
    misses: u64,
    /// Whether auto had consolidation on at the end of its last run, and its switches.
    auto_on: bool,
    auto_switches: u64,
    /// Auto stayed off without a trial: the chain tells that consolidation loses.
    auto_static_off: bool,
}

/// Whether `fastpath = "auto"` stays off on chain `cfg` without a trial
/// (`catena::optimise::fastpath::auto_static_off`).
fn static_off(cfg: &ChainConfig) -> anyhow::Result<bool> {
    let chain = Chain::from_config(cfg)?;
    Ok(catena::optimise::fastpath::auto_static_off(&chain.nf_slots()).is_some())
}

/// `passes` packets per flow, flows round-robin, UDP 10.x → 203.0.113.10:53, 64 bytes.
fn flow_frames(flows: usize, passes: usize) -> Vec<[u8; 64]> {
    let mut frame = [0u8; 64];
    frame[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    frame[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    frame[12..14].copy_from_slice(&[8, 0]);
    frame[14..24].copy_from_slice(&[0x45, 0, 0, 50, 0, 0, 0, 0, 64, 17]);
    frame[30..34].copy_from_slice(&[203, 0, 113, 10]);
    frame[36..38].copy_from_slice(&53u16.to_be_bytes());
    frame[38..40].copy_from_slice(&30u16.to_be_bytes());
    (0..flows * passes)
        .map(|i| {
            let f = (i % flows) as u32;
            let mut p = frame;
            let host = 0x0a00_0000 | (f / 512);
            p[26..30].copy_from_slice(&host.to_be_bytes());
            p[34..36].copy_from_slice(&(1024 + (f % 512) as u16).to_be_bytes());
            let c = checksum::checksum(&p[14..34]);
            p[24..26].copy_from_slice(&c.to_be_bytes());
            p
        })
        .collect()
}

/// Timestamps 1 µs apart from `t0` ns.
fn trace_of(frames: &[[u8; 64]], t0: u64) -> Trace {
    Trace::from_packets(
        LinkKind::Ethernet,
        PcapHeader::new(1, false),
        frames
            .iter()
            .enumerate()
            .map(|(i, p)| (t0 + i as u64 * 1000, &p[..])),
    )
}

/// The NFs of a chain of `n` of `kind` (`mixed`: the mixed chain's period repeated).
fn kinds_of(kind: &str, n: usize) -> Vec<&str> {
    if kind == "mixed" {
        MIXED.iter().copied().cycle().take(n).collect()
    } else {
        vec![kind; n]
    }
}

/// A chain of `nfs`, one ingress port (the port is part of FastPath's key). NATs and
/// Maglevs chain onto each other through whatever stands between them: each NAT takes
/// the previous one's public address as inside; each Maglev balances onto the next one's
/// VIP, the last onto 10 backends.
fn chain_text(nfs: &[&str], rules: &str) -> String {
    let mut s = String::from("[input]\nports = 1\n");
    let maglevs = nfs.iter().filter(|&&k| k == "maglev").count();
    let (mut nat, mut lb) = (0, 0);
    for (i, kind) in nfs.iter().enumerate() {
        s += &format!("[[nf]]\nname = \"x{i}\"\nkind = \"{kind}\"\n");
        s += &match *kind {
            "ip_filter" => format!("rules = {rules}\ndefault = \"allow\"\n"),
            "nat" => {
                nat += 1;
                format!(
                    "inside = \"10.0.0.0/8, 198.51.100.0/24\"\npublic = \"198.51.100.{nat}\"\ncapacity = 65536\n"
                )
            }
            "maglev" => {
                lb += 1;
                let backends: Vec<String> = if lb == maglevs {
                    (1..=10)
                        .map(|i| format!("{{ addr = \"10.200.0.{i}\" }}"))
                        .collect()
                } else {
                    vec![format!("{{ addr = \"203.0.113.{}\" }}", 10 + lb)]
                };
                format!(
                    "vip = \"203.0.113.{}\"\nbackends = [{}]\ncapacity = 65536\n",
                    9 + lb,
                    backends.join(", ")
                )
            }
            _ => String::new(),
        };
    }
    s
}

fn fast_cfg(flows: usize) -> FastConfig {
    FastConfig {
        entries: 4 * flows,
        timeout_ns: 60_000_000_000,
        // The report's figure: the first packet is the recorded one.
        record_at: 1,
    }
}

/// The TSC where a run's later packets begin and where its last packet is done: a
/// progress report at packet `boundary` (reports come between chunks, before the chunk
/// they count up to), and the end of the packets (before the run's own end: NF reports
/// such as the monitors' exports of every flow are no packet's work).
struct Marks {
    boundary: u64,
    /// The packets done when the boundary was read (the boundary itself, or the run's
    /// chunks did not fall on it).
    at: Option<u64>,
    t1: u64,
    t2: u64,
}

impl Progress for Marks {
    fn update(&mut self, done: u64, _total: u64) {
        if self.at.is_none() && done >= self.boundary {
            self.t1 = tsc::now();
            self.at = Some(done);
        }
    }

    fn finish(&mut self) {
        self.t2 = tsc::now();
    }
}

/// One run of `trace` (each flow's first packet, then its later ones: `flows` packets,
/// then the rest) on a fresh runner, with the TSC at its start, at the first later packet
/// and after the last one. One run, not one for each phase: a run's end finishes the
/// chain (the monitors export and drain their tables), which a long-running chain never
/// does between a flow's packets, so the later packets are timed in the steady state the
/// first ones leave.
fn timed_run(
    cfg: &ChainConfig,
    mode: Mode,
    flows: usize,
    trace: &Trace,
) -> anyhow::Result<(Summary, [u64; 3])> {
    let mut chain = Chain::from_config(cfg)?;
    mode.apply(&mut chain, fast_cfg(flows))?;
    let mut r = Runner::new(chain, 64);
    r.report_every(flows as u64);
    let mut m = Marks {
        boundary: flows as u64,
        at: None,
        t1: 0,
        t2: 0,
    };
    let t0 = tsc::now();
    let sum = r.run(trace, &RunOptions::default(), &mut m)?;
    if m.at != Some(flows as u64) {
        anyhow::bail!(
            "fastpath bench: the later packets' start (packet {flows}) fell inside a chunk (read at {:?})",
            m.at
        );
    }
    let later = (trace.len() - flows) as u64;
    if mode == Mode::On {
        let fp = sum.fastpath.unwrap_or_default();
        if fp.hits < later * 9 / 10 {
            anyhow::bail!(
                "fastpath bench: only {} of {} later packets hit through `{}` ({:?})",
                fp.hits,
                later,
                r.chain()
                    .nodes
                    .iter()
                    .map(|n| n.name.as_str())
                    .collect::<Vec<_>>()
                    .join(" "),
                fp
            );
        }
    }
    Ok((sum, [t0, m.t1, m.t2]))
}

/// Cycles per packet (first, subsequent) of one run on a fresh runner.
fn cycles_once(
    cfg: &ChainConfig,
    mode: Mode,
    flows: usize,
    trace: &Trace,
) -> anyhow::Result<(f64, f64)> {
    let (_, [t0, t1, t2]) = timed_run(cfg, mode, flows, trace)?;
    Ok((
        (t1 - t0) as f64 / flows as f64,
        (t2 - t1) as f64 / (trace.len() - flows) as f64,
    ))
}

/// The orders in which a round runs off, on and auto (indices into `cycles`' runs):
/// all six, so that over six rounds each mode runs right after each other mode (and
/// right after the floor) equally often. A run right after `on` reads 10-20 % slower
/// than the same code after `off` (session 25: `off` after `on` 59-64 cycles a later
/// packet at ip_filter 1, after the floor or `off` 47-56); session 24's rotation (the
/// three cyclic shifts of off, on, auto) kept auto right after on in two rounds of three
/// (every round but those where auto ran first), which read as auto 5-12 % slower than
/// off on chains where auto is a plain run, the same code as off.
const ORDERS: [[usize; 3]; 6] = [
    [1, 2, 3],
    [2, 3, 1],
    [3, 1, 2],
    [1, 3, 2],
    [3, 2, 1],
    [2, 1, 3],
];

/// Rounds for `--runs n`: a multiple of the six orders, so they weigh alike.
fn rounds(runs: u64) -> u64 {
    runs.div_ceil(ORDERS.len() as u64) * ORDERS.len() as u64
}

/// Medians of (first, subsequent) cycles for the empty chain (the floor: ingest and
/// sink), then the chain off, on and auto. All run in turn within each round, so a noisy
/// moment of the machine touches them alike: the floor first, then off, on and auto in
/// each of the six orders in turn ([`ORDERS`]).
fn cycles(a: &Args, text: &str, flows: usize, trace: &Trace) -> anyhow::Result<[(f64, f64); 4]> {
    let empty = ChainConfig::parse(EMPTY, "empty")?;
    let cfg = ChainConfig::parse(text, "fastpath")?;
    let mut v: [(Vec<f64>, Vec<f64>); 4] = Default::default();
    let runs = [
        (&empty, Mode::Off),
        (&cfg, Mode::Off),
        (&cfg, Mode::On),
        (&cfg, Mode::Auto),
    ];
    // One untimed round first, as the other benches do.
    for i in 0..=rounds(a.runs) {
        let order = ORDERS[(i as usize + ORDERS.len() - 1) % ORDERS.len()];
        for k in std::iter::once(0).chain(order) {
            let (c, mode) = runs[k];
            let (f, s) = cycles_once(c, mode, flows, trace)?;
            if i > 0 {
                v[k].0.push(f);
                v[k].1.push(s);
            }
        }
    }
    Ok(v.map(|(mut f, mut s)| (median(&mut f), median(&mut s))))
}

/// No NFs: what every packet costs before and after the chain (copy into a pool
/// buffer, the worker loop, a discarding sink).
const EMPTY: &str = "[input]\nports = 1\n";

/// The most common IPv4 destination, for the mixed chain's VIP.
fn top_destination(t: &Trace) -> String {
    let mut n = std::collections::HashMap::<[u8; 4], usize>::new();
    for i in 0..t.len() {
        let d = t.packet(i);
        let l = Layers::parse(t.link(), d);
        if l.l3 == L3Kind::Ipv4 {
            let o = l.l3_off as usize + 16;
            *n.entry([d[o], d[o + 1], d[o + 2], d[o + 3]]).or_default() += 1;
        }
    }
    let b = n
        .into_iter()
        .max_by_key(|(a, c)| (*c, *a))
        .map_or([203, 0, 113, 10], |(a, _)| a);
    format!("{}.{}.{}.{}", b[0], b[1], b[2], b[3])
}

/// The mixed chain of `n` NFs for the real trace: one ingress port (FastPath keys on it,
/// and the emulator draws each packet's port anew, which would split every flow over all
/// ports; a NIC delivers a flow on one port), a table sized for the trace (16,566
/// five-tuples, each direction its own entry). The first Maglev balances the trace's top
/// destination onto 10.200.0.1-3, a second one 10.200.0.1 onto 10.201.0.1-3; a second
/// NAT takes the first's public address as inside.
fn mixed_text(n: usize, vip: &str, rules: &str) -> String {
    let mut s = String::from("fastpath_entries = 65536\n[input]\nports = 1\n");
    for (i, kind) in kinds_of("mixed", n).into_iter().enumerate() {
        let round = i / MIXED.len();
        let name = match kind {
            "ip_filter" => "acl",
            "nat" => "nat",
            "maglev" => "lb",
            _ => "mon",
        };
        let name = if round == 0 {
            name.to_string()
        } else {
            format!("{name}{}", round + 1)
        };
        s += &format!("[[nf]]\nname = \"{name}\"\nkind = \"{kind}\"\n");
        s += &match (kind, round) {
            ("ip_filter", _) => format!("rules = {rules}\ndefault = \"allow\"\n"),
            ("nat", 0) => String::new(),
            ("nat", r) => format!(
                "inside = \"10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 198.51.100.0/24\"\npublic = \"198.51.100.{}\"\n",
                r + 1
            ),
            ("maglev", 0) => format!(
                "vip = \"{vip}\"\nbackends = [{{ addr = \"10.200.0.1\" }}, {{ addr = \"10.200.0.2\" }}, {{ addr = \"10.200.0.3\" }}]\n"
            ),
            ("maglev", r) => format!(
                "vip = \"10.{}.0.1\"\nbackends = [{{ addr = \"10.{}.0.1\" }}, {{ addr = \"10.{}.0.2\" }}, {{ addr = \"10.{}.0.3\" }}]\n",
                199 + r,
                200 + r,
                200 + r,
                200 + r
            ),
            _ => String::new(),
        };
    }
    s
}

fn mixed(a: &Args, rules: &str, n: usize) -> anyhow::Result<Mixed> {
    let trace = traces::load("merged", 1.0)?;
    let text = mixed_text(n, &top_destination(&trace), rules);
    // For the callgrind cross-check (docs/fastpath.md).
    let p = a.out.join(format!("fastpath-merged-{n}.toml"));
    std::fs::write(&p, &text).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
    let cfg = ChainConfig::parse(&text, "mixed")?;
    let opts = RunOptions {
        loops: 4,
        ..Default::default()
    };
    let mut mpps = [Vec::new(), Vec::new(), Vec::new()];
    let mut m = Mixed {
        trace: "merged".into(),
        chain_len: n,
        packets: 0,
        mpps_off: 0.0,
        mpps_on: 0.0,
        mpps_auto: 0.0,
        hits: 0,
        misses: 0,
        auto_on: false,
        auto_switches: 0,
        auto_static_off: static_off(&cfg)?,
    };
    // The six orders in turn, as for the chains above ([`ORDERS`]).
    for i in 0..=rounds(a.runs) {
        for k in ORDERS[(i as usize + ORDERS.len() - 1) % ORDERS.len()] {
            let (k, mode) = (k - 1, Mode::ALL[k - 1]);
            let mut chain = Chain::from_config(&cfg)?;
            let settings = chain.fastpath_settings;
            mode.apply(&mut chain, settings)?;
            let mut r = Runner::new(chain, trace.max_packet_len());
            let s = r.run(&trace, &opts, &mut NoProgress)?;
            if i > 0 {
                mpps[k].push(s.mpps);
            }
            if let (Mode::On, Some(f)) = (mode, s.fastpath) {
                (m.hits, m.misses) = (f.hits, f.misses);
            }
            if let Some(au) = s.fastpath_auto {
                (m.auto_on, m.auto_switches) = (au.on, au.switches);
            }
            m.packets = s.packets_in;
        }
    }
    let [off, on, auto] = mpps;
    (m.mpps_off, m.mpps_on, m.mpps_auto) = (
        median(&mut { off }),
        median(&mut { on }),
        median(&mut { auto }),
    );
    Ok(m)
}

/// Traces and chain files under --out for the callgrind cross-check (docs/fastpath.md).
fn write_callgrind_inputs(out: &Path, rules: &str, flows: usize) -> anyhow::Result<()> {
    let write = |name: &str, frames: &[[u8; 64]]| -> anyhow::Result<()> {
        let p = out.join(name);
        let mut w = PcapWriter::create(&p, PcapHeader::new(1, false))
            .map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
        for (i, f) in frames.iter().enumerate() {
            w.write_packet(i as u64 * 1000, 64, f)?;
        }
        w.finish()?;
        Ok(())
    };
    write("fastpath-first.pcap", &flow_frames(flows, 1))?;
    write("fastpath-again.pcap", &flow_frames(flows, 1 + AGAIN))?;
    for kind in KINDS {
        for n in LENS {
            let p = out.join(format!("fastpath-{kind}-{n}.toml"));
            let text = format!(
                "fastpath_entries = {}\nfastpath_record = 1\n{}",
                4 * flows,
                chain_text(&kinds_of(kind, n), rules)
            );
            std::fs::write(&p, text).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
        }
    }
    Ok(())
}

fn svg(path: &Path, rows: &[Row]) -> anyhow::Result<()> {
    let max = rows.iter().map(|r| r.cycles_subsequent).fold(1.0, f64::max);
    let (bw, h, top, left) = (12.0, 260.0, 40.0, 50.0);
    let mut s = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' font-family='sans-serif' font-size='11'>\n<text x='{left}' y='20' font-size='14'>cycles per later packet: fastpath off (grey) / on (blue) / auto (orange)</text>\n",
        left + rows.len() as f64 * (bw + 2.0) + rows.len() as f64 / 3.0 * 6.0 + 40.0,
        h + top + 70.0
    );
    for (i, r) in rows.iter().enumerate() {
        let x = left + i as f64 * (bw + 2.0) + (i / 3) as f64 * 6.0;
        let bh = r.cycles_subsequent / max * h;
        let color = match r.fastpath {
            "on" => "#1f77b4",
            "auto" => "#ff7f0e",
            _ => "#999",
        };
        s += &format!(
            "<rect x='{x:.1}' y='{:.1}' width='{bw}' height='{bh:.1}' fill='{color}'><title>{} x{} fastpath {}: {:.0} cycles</title></rect>\n",
            top + h - bh,
            r.nf,
            r.chain_len,
            r.fastpath,
            r.cycles_subsequent
        );
        if r.fastpath == "on" {
            s += &format!(
                "<text x='{:.1}' y='{:.1}' transform='rotate(60 {:.1} {:.1})'>{} x{}</text>\n",
                x - 10.0,
                top + h + 12.0,
                x - 10.0,
                top + h + 12.0,
                r.nf,
                r.chain_len
            );
        }
    }
    s += "</svg>\n";
    std::fs::write(path, s).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// `1 - x / y` in percent; "-" when `y` is not above zero (a floor-subtracted cost that
/// noise took to zero or below means nothing).
fn less(x: f64, y: f64) -> String {
    if y <= 0.0 {
        return "-".into();
    }
    format!("{:.1}", 100.0 * (1.0 - x / y))
}

/// The 1-minute load average (`/proc/loadavg`), to label TSC figures taken on a shared
/// machine; None where it cannot be read.
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

pub fn run(a: &Args) -> anyhow::Result<i32> {
    let load_start = load_average();
    let rules = toml_list(&random_rules(100, 7));
    // Whole chunks, so the later packets start at a chunk (where the run reports).
    let flows = ((FLOWS as f64 * a.scale).round() as usize)
        .clamp(64, 4 * FLOWS)
        .next_multiple_of(MAX_BATCH);
    let trace = trace_of(&flow_frames(flows, 1 + AGAIN), 0);
    write_callgrind_inputs(&a.out, &rules, flows)?;
    let mut rows = Vec::new();
    // Per chain: whether auto stays off without a trial (the table's last column).
    let mut statics: Vec<(&str, usize, bool)> = Vec::new();
    for nf in KINDS {
        for len in LENS {
            // `--only nat`, `--only "mixed 8"`: those chains (and no merged trace).
            let case = format!("{nf} {len}");
            if !a.only.is_empty() && !a.only.iter().any(|o| case.contains(o.as_str())) {
                continue;
            }
            let text = chain_text(&kinds_of(nf, len), &rules);
            statics.push((nf, len, static_off(&ChainConfig::parse(&text, nf)?)?));
            let [floor, off, on, auto] = cycles(a, &text, flows, &trace)?;
            for (mode, (cf, cs)) in Mode::ALL.into_iter().zip([off, on, auto]) {
                rows.push(Row {
                    nf: nf.into(),
                    chain_len: len,
                    fastpath: mode.name(),
                    cycles_first: cf,
                    cycles_subsequent: cs,
                    cycles_floor: floor.1,
                });
            }
        }
    }
    let mixed: Vec<Mixed> = [4, 8]
        .into_iter()
        .filter(|n| {
            a.only.is_empty()
                || a.only
                    .iter()
                    .any(|o| format!("merged {n}").contains(o.as_str()))
        })
        .map(|n| mixed(a, &rules, n))
        .collect::<anyhow::Result<_>>()?;
    let header = [
        "nf",
        "chain",
        "first off",
        "first on",
        "first auto",
        "later off",
        "later on",
        "later auto",
        "reduction %",
        "auto vs off %",
        "on / one NF off",
        "floor",
        "chain off",
        "chain on",
        "chain reduction %",
        "chain on / one NF",
        "auto",
    ];
    let body: Vec<Vec<String>> = rows
        .chunks(3)
        .map(|p| {
            let (off, on, auto) = (&p[0], &p[1], &p[2]);
            let one = rows
                .iter()
                .find(|r| r.nf == off.nf && r.chain_len == 1 && r.fastpath == "off")
                .map_or(1.0, |r| r.cycles_subsequent);
            let one_chain = rows
                .iter()
                .find(|r| r.nf == off.nf && r.chain_len == 1 && r.fastpath == "off")
                .map_or(1.0, |r| r.cycles_subsequent - r.cycles_floor);
            let (c_off, c_on) = (
                off.cycles_subsequent - off.cycles_floor,
                on.cycles_subsequent - on.cycles_floor,
            );
            vec![
                off.nf.clone(),
                off.chain_len.to_string(),
                format!("{:.0}", off.cycles_first),
                format!("{:.0}", on.cycles_first),
                format!("{:.0}", auto.cycles_first),
                format!("{:.0}", off.cycles_subsequent),
                format!("{:.0}", on.cycles_subsequent),
                format!("{:.0}", auto.cycles_subsequent),
                less(on.cycles_subsequent, off.cycles_subsequent),
                // Negative: auto is slower than off (first and later packets together).
                less(
                    auto.cycles_first + AGAIN as f64 * auto.cycles_subsequent,
                    off.cycles_first + AGAIN as f64 * off.cycles_subsequent,
                ),
                format!("{:.2}", on.cycles_subsequent / one.max(1e-9)),
                format!("{:.0}", off.cycles_floor),
                format!("{c_off:.0}"),
                format!("{c_on:.0}"),
                less(c_on, c_off),
                if one_chain > 0.0 {
                    format!("{:.2}", c_on / one_chain)
                } else {
                    "-".into()
                },
                statics
                    .iter()
                    .find(|(n, l, _)| *n == off.nf && *l == off.chain_len)
                    .map_or("?", |&(_, _, s)| if s { "off (chain)" } else { "measured" })
                    .into(),
            ]
        })
        .collect();
    write_results(a, "fastpath", &header, &body, &rows)?;
    let p = a.out.join("fastpath-mixed.json");
    std::fs::write(&p, serde_json::to_string_pretty(&mixed)?)
        .map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
    svg(&a.out.join("fastpath.svg"), &rows)?;
    if a.json {
        outln!("{}", serde_json::to_string(&rows)?)?;
    } else {
        print_table(&header, &body)?;
        outln!(
            "(TSC cycles per packet, median of {} runs (--runs rounded up to a multiple of the 6 orders of off, on, auto); {flows} flows: first = one packet each, later = {AGAIN} more each;\n floor = the same runs through an empty chain; chain = later minus floor, what the NFs or the consolidated path cost;\n mixed = filter, NAT, Maglev, monitor repeated; auto vs off = first and later packets together;\n auto = off (chain): auto stays off without a trial, the chain tells that consolidation loses; \"-\": floor-subtracted cost at or below zero)",
            rounds(a.runs)
        )?;
        let show = |l: Option<f64>| l.map_or("?".into(), |l| format!("{l:.1}"));
        outln!(
            "load average (1 min, /proc/loadavg): {} at the start, {} at the end: TSC figures under load move by tens of %",
            show(load_start),
            show(load_average())
        )?;
        for m in &mixed {
            outln!(
                "mixed chain of {} on {} ({} packets): {:.2} Mpps off, {:.2} on, {:.2} auto ({} hits, {} misses on; auto {})",
                m.chain_len,
                m.trace,
                m.packets,
                m.mpps_off,
                m.mpps_on,
                m.mpps_auto,
                m.hits,
                m.misses,
                if m.auto_static_off {
                    "off from the chain, no trial".to_string()
                } else {
                    format!(
                        "ended {} after {} switches",
                        if m.auto_on { "on" } else { "off" },
                        m.auto_switches
                    )
                }
            )?;
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The later packets run in the chain the first ones left: each monitor takes each
    /// flow in once and exports it once, at the run's end, off and on alike (a run for
    /// each phase drained the monitors between them: every flow exported twice, taken in
    /// again by its first later packet).
    #[test]
    fn the_later_packets_find_their_flows_in_the_monitors() {
        let flows = 256;
        let trace = trace_of(&flow_frames(flows, 1 + AGAIN), 0);
        let cfg = ChainConfig::parse(&chain_text(&kinds_of("mixed", 8), "[]"), "mixed").unwrap();
        for mode in [Mode::Off, Mode::On] {
            let (sum, [t0, t1, t2]) = timed_run(&cfg, mode, flows, &trace).unwrap();
            let mons: Vec<_> = sum
                .nfs
                .iter()
                .filter(|n| n.kind == "flow_monitor")
                .collect();
            assert_eq!(mons.len(), 2);
            for m in mons {
                let exported = m.stats.iter().find(|(k, _)| k == "exported").map(|s| s.1);
                assert_eq!(exported, Some(flows as u64), "{} {}", m.name, mode.name());
                assert_eq!(m.packets_in, trace.len() as u64);
            }
            assert!(t0 <= t1 && t1 <= t2);
        }
    }

    /// A run whose chunks do not fall on the later packets' start is refused, not timed
    /// with first and later packets mixed.
    #[test]
    fn a_boundary_inside_a_chunk_is_an_error() {
        let flows = MAX_BATCH + 1;
        let trace = trace_of(&flow_frames(flows, 2), 0);
        let cfg = ChainConfig::parse(&chain_text(&kinds_of("nat", 1), "[]"), "nat").unwrap();
        let e = timed_run(&cfg, Mode::Off, flows, &trace).unwrap_err();
        assert!(e.to_string().contains("fell inside a chunk"), "{e}");
    }
}
