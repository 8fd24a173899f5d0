//! `catena bench micronf`: the many-cores experiments (microNF; RSS-sharded workers).
//!
//! - scaling: wire, ip_filter, NAT and the mixed chain (filter → NAT → Maglev → monitor)
//!   at 1 and 2 workers on the merged real trace and the 4sics profile: processing Mpps
//!   (input side and queue copies included, the output merge not: the one-worker side
//!   is timed the same way), the ratio, and the busiest worker's share of the packets;
//! - stages: 1–6 busy NFs (500 cycles each) as one stage vs one stage per NF:
//!   throughput and per-packet latency (TSC at the first NF to TSC at the last,
//!   p50/p99 with hdrhistogram);
//! - parallel: 2 busy NFs of 0–700 cycles in sequence vs as a parallel group: latency
//!   p50/p99 (the microNF slides' figure; ratio = p50 over the sequential p50), with
//!   the machine's cross-core round trip taken just before (the host's state they saw);
//! - hop: cycles per packet through one ring hop (send, receive, buffer back);
//! - prefetch: k = 0, 4, 8, 16 on the merged trace with the mixed chain;
//! - monolithic: edge firewall → flow monitor → application firewall as three
//!   monolithic VNFs (each receives, decodes, classifies, transmits) vs as catena's chain
//!   (one receive, one shared decode): cycles per packet per element (`monolithic.rs`).
//!
//! Timings on a shared machine are noisy: medians of `--runs` runs (at most 3 here;
//! for scaling, `--runs` rounds that interleave one worker, two workers and two
//! independent copies of one worker, and ratios taken within each round).

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::Serialize;

use catena::flow::tsc;
use catena::io::Trace;
use catena::nfs::{Busy, Context, Nf, Profile, Stats};
use catena::packet::{Batch, Fields};
use catena::runtime::{Chain, ChainConfig, NoProgress, RunOptions, Runner, Shards, Summary};

use super::{median, print_table, traces, write_results, Args};

mod monolithic;

#[derive(Serialize)]
struct Row {
    group: &'static str,
    case: String,
    workers: usize,
    stages: usize,
    prefetch: usize,
    packets: u64,
    mpps: f64,
    /// Mpps over the group's baseline (1 worker / one stage / prefetch off); for the
    /// parallel group, p50 latency over the sequential p50.
    ratio: f64,
    /// Latency first NF → last NF, TSC ticks (stages and parallel groups).
    p50_cycles: Option<u64>,
    p99_cycles: Option<u64>,
    /// Ticks per packet through one ring hop (hop group only).
    hop_cycles: Option<f64>,
    /// The machine's cross-core round trip (one line, two pinned threads), TSC ticks,
    /// taken just before the parallel group's rows: which state of the host they saw
    /// (~260 fast, ~1,150–1,400 slow here, session 24); none when the partner thread
    /// had no core.
    round_trip_cycles: Option<f64>,
    /// TSC ticks per input packet (monolithic group: per element, and overall).
    cycles_per_packet: Option<f64>,
    /// The busiest worker's share of the packets (scaling group): `1 / max_share` bounds
    /// the ratio two workers can reach.
    max_share: Option<f64>,
    /// Scaling group: the packets over the slowest worker's own span (its first packet
    /// to its last), i.e. without the input side's placement before the workers start
    /// and the gathering after; `mpps` counts both. Equal to `mpps` with one worker.
    workers_mpps: Option<f64>,
    /// Scaling group: each round's Mpps (the rounds interleave one and two workers).
    rounds: Option<Vec<f64>>,
    /// Scaling group, 2 workers: each round's 2 workers ÷ 1 (`ratio` is their median).
    ratio_rounds: Option<Vec<f64>>,
    /// Scaling group, 2 workers: the median Mpps of two independent copies of the
    /// one-worker run at once, one a core (the machine's ceiling for two workers).
    ceiling_mpps: Option<f64>,
    /// The median over the rounds of the copies' Mpps ÷ one worker's.
    ceiling_ratio: Option<f64>,
    /// The median over the rounds of two workers' Mpps ÷ the copies'.
    of_ceiling: Option<f64>,
    /// Scaling group, 2 workers: the input side per record of the trace, ns (median
    /// over the rounds): the run's seconds less the slowest worker's own processing
    /// (the placement before it and its queue copy, however they are spread over
    /// threads), over the trace's records (placed once a run, whatever the loops).
    input_ns: Option<f64>,
}

const MIXED: &str = r#"
[input]
ports = 2
[[nf]]
name = "acl"
kind = "ip_filter"
default = "allow"
rules = ["deny udp dst port 53", "deny tcp dst port 23", "deny src net 10.0.0.0/8 and icmp"]
[[nf]]
name = "nat"
kind = "nat"
inside = "192.168.0.0/16, 172.16.0.0/12"
public = "198.51.100.1, 198.51.100.2, 198.51.100.3, 198.51.100.4"
[[nf]]
name = "lb"
kind = "maglev"
vip = "192.168.2.110"
backends = [{ addr = "10.1.0.1" }, { addr = "10.1.0.2" }, { addr = "10.1.0.3" }]
[[nf]]
name = "mon"
kind = "flow_monitor"
"#;

fn scaling_chains() -> Vec<(&'static str, String)> {
    vec![
        ("wire", "[input]\nports = 2\n[[nf]]\nname = \"w\"\nkind = \"wire\"\n".into()),
        (
            "ip_filter",
            "[[nf]]\nname = \"acl\"\nkind = \"ip_filter\"\ndefault = \"allow\"\nrules = [\"deny udp dst port 53\", \"deny tcp dst port 23\", \"deny src net 10.0.0.0/8 and icmp\"]\n".into(),
        ),
        (
            "nat",
            "[[nf]]\nname = \"nat\"\nkind = \"nat\"\ninside = \"192.168.0.0/16, 172.16.0.0/12\"\npublic = \"198.51.100.1, 198.51.100.2, 198.51.100.3, 198.51.100.4\"\n".into(),
        ),
        ("mixed", MIXED.into()),
    ]
}

/// One scaling case over `--runs` rounds (after one untimed warm-up round): each round
/// runs one worker, two workers and two independent copies of the one-worker run, back
/// to back, the order reversed every other round so that neither side always goes first.
/// Ratios are taken within a round, then their median.
struct Scaling {
    packets: [u64; 2],
    /// Per round: Mpps with one worker, with two, and of the two copies together.
    mpps: [Vec<f64>; 3],
    /// Per round: Mpps of two workers over their slowest worker's own span.
    own: Vec<f64>,
    /// Per round: two workers' input side, ns a record of the trace (`Row::input_ns`).
    input_ns: Vec<f64>,
    /// The busiest worker's share of the packets (the last round's).
    share: f64,
}

impl Scaling {
    fn median(v: &[f64]) -> f64 {
        median(&mut v.to_vec())
    }
    /// The median over the rounds of `f(one, two, copies)`.
    fn per_round(&self, f: impl Fn(f64, f64, f64) -> f64) -> Vec<f64> {
        (0..self.mpps[0].len())
            .map(|i| f(self.mpps[0][i], self.mpps[1][i], self.mpps[2][i]))
            .collect()
    }
}

fn scaling(a: &Args, text: &str, trace: &Trace, loops: u64) -> anyhow::Result<Scaling> {
    let cfg = ChainConfig::parse(text, "micronf")?;
    let opts = RunOptions {
        loops,
        ..Default::default()
    };
    let sharded = |workers: usize| -> anyhow::Result<Summary> {
        let chains = (0..workers)
            .map(|_| Chain::from_config(&cfg))
            .collect::<Result<Vec<_>, _>>()?;
        Shards::new(chains, trace.max_packet_len())?.run(trace, &opts, &mut NoProgress)
    };
    let mut out = Scaling {
        packets: [0; 2],
        mpps: Default::default(),
        own: Vec::new(),
        input_ns: Vec::new(),
        share: 1.0,
    };
    for round in 0..=a.runs {
        let order: [usize; 3] = if round % 2 == 0 { [0, 1, 2] } else { [2, 1, 0] };
        let mut got = [0.0; 3];
        let mut own = 0.0;
        let mut input_ns = 0.0;
        for which in order {
            match which {
                0 => {
                    let s = sharded(1)?;
                    out.packets[0] = s.packets_in;
                    got[0] = s.mpps;
                }
                1 => {
                    let s = sharded(2)?;
                    out.packets[1] = s.packets_in;
                    got[1] = s.mpps;
                    out.share = s
                        .workers
                        .iter()
                        .map(|w| w.packets_in as f64 / s.packets_in.max(1) as f64)
                        .fold(0.0, f64::max)
                        .max(if s.workers.is_empty() { 1.0 } else { 0.0 });
                    let span = s.workers.iter().map(|w| w.seconds).fold(0.0, f64::max);
                    input_ns = (s.seconds - span).max(0.0) * 1e9 / trace.len().max(1) as f64;
                    own = if s.workers.is_empty() {
                        s.mpps
                    } else {
                        s.packets_in as f64 / span.max(1e-9) / 1e6
                    };
                }
                _ => got[2] = copies(&cfg, trace, &opts)?,
            }
        }
        if round > 0 {
            for (v, g) in out.mpps.iter_mut().zip(got) {
                v.push(g);
            }
            out.own.push(own);
            out.input_ns.push(input_ns);
        }
    }
    Ok(out)
}

/// Median Mpps of `text` on `trace` with one worker over `--runs` runs (at most 3, after
/// a warm-up), and the packets.
fn one_worker(a: &Args, text: &str, trace: &Trace, loops: u64) -> anyhow::Result<(f64, u64)> {
    let cfg = ChainConfig::parse(text, "micronf")?;
    let opts = RunOptions {
        loops,
        ..Default::default()
    };
    let mut v = Vec::new();
    let mut packets = 0;
    for i in 0..=a.runs.min(3) {
        let s = Shards::new(vec![Chain::from_config(&cfg)?], trace.max_packet_len())?.run(
            trace,
            &opts,
            &mut NoProgress,
        )?;
        packets = s.packets_in;
        if i > 0 {
            v.push(s.mpps);
        }
    }
    Ok((median(&mut v), packets))
}

/// The machine's ceiling for two workers: the one-worker run as two independent copies
/// at once, each on its own thread pinned to its own core with its own copy of the
/// trace's records (nothing shared but the machine: L3, the memory path). Mpps of both
/// together: their packets over the longer of their two spans (each timed as one
/// worker's run is), as two workers are timed to the last one's end.
fn copies(cfg: &ChainConfig, trace: &Trace, opts: &RunOptions) -> anyhow::Result<f64> {
    let cores = catena::runtime::allowed_cores();
    let go = std::sync::Barrier::new(2);
    let runs: Vec<anyhow::Result<Summary>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..2)
            .map(|c| {
                let core = cores.get(c).copied();
                let go = &go;
                scope.spawn(move || -> anyhow::Result<Summary> {
                    if let Some(core) = core {
                        catena::runtime::pin(core);
                    }
                    // Its own records, written by this thread (so in its cache first).
                    let (bytes, recs) = trace.raw();
                    let own = Trace::from_packets(
                        trace.link(),
                        trace.header(),
                        recs.iter().map(|r| {
                            let at = r.off as usize;
                            (r.ts_ns, &bytes[at..at + r.caplen as usize])
                        }),
                    );
                    let chain = Chain::from_config(cfg);
                    go.wait();
                    // As the one-worker run is made (`Shards` of one).
                    Shards::new(vec![chain?], own.max_packet_len())?.run(
                        &own,
                        opts,
                        &mut NoProgress,
                    )
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a copy's thread panicked")))
            })
            .collect()
    });
    let mut packets = 0;
    let mut secs: f64 = 0.0;
    for s in runs {
        let s = s?;
        packets += s.packets_in;
        secs = secs.max(s.seconds);
    }
    Ok(packets as f64 / secs.max(1e-9) / 1e6)
}

/// Shared between the first and the last NF: when each packet (by input position) was
/// stamped. Relaxed atomics: no lock, no allocation per packet.
type Stamps = Arc<Vec<AtomicU64>>;
const STAMPS: usize = 1 << 16;

fn quiet() -> Profile {
    Profile {
        reads: Fields::NONE,
        writes: Fields::NONE,
        may_drop: false,
        changes_length: false,
        per_flow_state: false,
        outputs: &["out"],
        drop_reasons: &[],
    }
}

/// Stamps each packet's TSC as it reaches the chain.
struct Stamp(Profile, Stamps);

impl Nf for Stamp {
    fn profile(&self) -> &Profile {
        &self.0
    }
    fn process(&mut self, b: &mut Batch, _: &Context) {
        let t = tsc();
        for p in b.iter() {
            self.1[p.meta().seq as usize % STAMPS].store(t, Ordering::Relaxed);
        }
    }
}

/// Records each packet's TSC latency since its stamp.
struct Mark(Profile, Stamps, hdrhistogram::Histogram<u64>);

impl Nf for Mark {
    fn profile(&self) -> &Profile {
        &self.0
    }
    fn process(&mut self, b: &mut Batch, _: &Context) {
        let t = tsc();
        for p in b.iter() {
            let s = self.1[p.meta().seq as usize % STAMPS].load(Ordering::Relaxed);
            self.2.saturating_record(t.saturating_sub(s));
        }
    }
    fn stats(&self) -> Stats {
        vec![
            (Cow::Borrowed("p50"), self.2.value_at_quantile(0.5)),
            (Cow::Borrowed("p99"), self.2.value_at_quantile(0.99)),
        ]
    }
}

/// Median Mpps over `--runs` runs (after one warm-up) of the chain `build` makes from
/// fresh stamps and histogram, the packets, and the last run's p50/p99 latency (the
/// mark's stats).
fn timed_latency(
    a: &Args,
    trace: &Trace,
    loops: u64,
    build: impl Fn(Stamps, hdrhistogram::Histogram<u64>) -> anyhow::Result<Chain>,
) -> anyhow::Result<(f64, u64, u64, u64)> {
    let mut v = Vec::new();
    let mut last: Option<Summary> = None;
    for i in 0..=a.runs.min(3) {
        let stamps: Stamps = Arc::new((0..STAMPS).map(|_| AtomicU64::new(0)).collect());
        let h = hdrhistogram::Histogram::new_with_bounds(1, 1 << 40, 3)?;
        let chain = build(stamps, h)?;
        let opts = RunOptions {
            loops,
            ..Default::default()
        };
        let s = Runner::new(chain, trace.max_packet_len()).run(trace, &opts, &mut NoProgress)?;
        if i > 0 {
            v.push(s.mpps);
            last = Some(s);
        }
    }
    let s = last.expect("runs >= 1");
    let stat = |k: &str| {
        s.nfs
            .last()
            .and_then(|m| m.stats.iter().find(|(n, _)| n == k))
            .map_or(0, |(_, v)| *v)
    };
    Ok((median(&mut v), s.packets_in, stat("p50"), stat("p99")))
}

/// `n` busy NFs between a stamp and a mark, as one stage or one stage per busy NF.
fn staged(
    a: &Args,
    n: usize,
    per_nf: bool,
    trace: &Trace,
    loops: u64,
) -> anyhow::Result<(f64, u64, u64, u64)> {
    timed_latency(a, trace, loops, |stamps, h| {
        let mut nfs: Vec<(String, Box<dyn Nf>)> =
            vec![("stamp".into(), Box::new(Stamp(quiet(), stamps.clone())))];
        for k in 0..n {
            nfs.push((
                format!("busy{k}"),
                Box::new(Busy::new(500, &[Fields::IP_TTL], &[])),
            ));
        }
        nfs.push(("mark".into(), Box::new(Mark(quiet(), stamps, h))));
        let mut chain = Chain::linear("micronf", 2, 1, nfs);
        if per_nf {
            let mut st: Vec<Vec<String>> = vec![vec!["stamp".into(), "busy0".into()]];
            for k in 1..n {
                st.push(vec![format!("busy{k}")]);
            }
            st.last_mut().expect("a stage").push("mark".into());
            chain.set_stages(&st).map_err(anyhow::Error::msg)?;
        }
        Ok(chain)
    })
}

/// Two busy NFs of `cycles` each between a stamp and a mark, in sequence or as a
/// parallel group (the microNF slides' figure): Mpps and latency p50/p99.
fn pair(
    a: &Args,
    cycles: u64,
    parallel: bool,
    trace: &Trace,
    loops: u64,
) -> anyhow::Result<(f64, u64, u64, u64)> {
    timed_latency(a, trace, loops, |stamps, h| {
        let nfs: Vec<(String, Box<dyn Nf>)> = vec![
            ("stamp".into(), Box::new(Stamp(quiet(), stamps.clone()))),
            (
                "busy0".into(),
                Box::new(Busy::new(cycles, &[Fields::IP_TTL], &[])),
            ),
            (
                "busy1".into(),
                Box::new(Busy::new(cycles, &[Fields::L4_DST], &[])),
            ),
            ("mark".into(), Box::new(Mark(quiet(), stamps, h))),
        ];
        let mut chain = Chain::linear("micronf", 2, 1, nfs);
        if parallel {
            // Exactly busy0 ∥ busy1 (nodes 2 and 3), as the planner allows it; the
            // stamp and the mark stay outside the group.
            let g = catena::runtime::parallel::pair(&chain, 2, 3).map_err(anyhow::Error::msg)?;
            chain.groups = vec![g];
            chain.parallel = true;
        }
        Ok(chain)
    })
}

/// `--only`: the rows whose "group case" contains one of the words (all without it).
fn want(a: &Args, group: &str, case: &str) -> bool {
    let text = format!("{group} {case}");
    a.only.is_empty() || a.only.iter().any(|o| text.contains(o.as_str()))
}

pub fn run(a: &Args) -> anyhow::Result<i32> {
    let merged = traces::load("merged", a.scale)?;
    let mut rows: Vec<Row> = Vec::new();
    let row = |group, case: String, workers, stages, prefetch, packets, mpps, ratio| Row {
        group,
        case,
        workers,
        stages,
        prefetch,
        packets,
        mpps,
        ratio,
        p50_cycles: None,
        p99_cycles: None,
        hop_cycles: None,
        round_trip_cycles: None,
        cycles_per_packet: None,
        max_share: None,
        workers_mpps: None,
        rounds: None,
        ratio_rounds: None,
        ceiling_mpps: None,
        ceiling_ratio: None,
        of_ceiling: None,
        input_ns: None,
    };
    // About a million packets per run at scale 1.
    let loops = ((1_000_000.0 * a.scale) / merged.len().max(1) as f64)
        .ceil()
        .max(1.0) as u64;
    // The 4sics profile (generated ICS traffic, 76 B packets): few, unequal flows, which
    // tests the placement. As many records as the merged trace (4 % of the profile,
    // ~91,000), replayed as many times, so the input side's one pass over the records
    // weighs the same in both.
    let sics = if scaling_chains()
        .iter()
        .any(|(n, _)| want(a, "scaling", &format!("{n} (4sics)")))
    {
        Some(traces::load("4sics", 0.04)?)
    } else {
        None
    };
    let sics_loops = sics.as_ref().map_or(1, |t| {
        ((1_000_000.0 * a.scale) / t.len().max(1) as f64)
            .ceil()
            .max(1.0) as u64
    });
    for (tname, trace, tloops) in [
        ("", Some(&merged), loops),
        (" (4sics)", sics.as_ref(), sics_loops),
    ] {
        let Some(trace) = trace else { continue };
        for (name, text) in scaling_chains() {
            let case = format!("{name}{tname}");
            if !want(a, "scaling", &case) {
                continue;
            }
            let sc = scaling(a, &text, trace, tloops)?;
            let one = Scaling::median(&sc.mpps[0]);
            let mut r = row("scaling", case.clone(), 1, 1, 0, sc.packets[0], one, 1.0);
            r.workers_mpps = Some(one);
            r.rounds = Some(sc.mpps[0].clone());
            rows.push(r);
            let ratios = sc.per_round(|o, t, _| t / o.max(1e-9));
            let ceiling = sc.per_round(|o, _, c| c / o.max(1e-9));
            let mut r = row(
                "scaling",
                case,
                2,
                1,
                0,
                sc.packets[1],
                Scaling::median(&sc.mpps[1]),
                Scaling::median(&ratios),
            );
            r.max_share = Some(sc.share);
            r.workers_mpps = Some(Scaling::median(&sc.own));
            r.rounds = Some(sc.mpps[1].clone());
            r.ratio_rounds = Some(ratios);
            r.ceiling_mpps = Some(Scaling::median(&sc.mpps[2]));
            r.ceiling_ratio = Some(Scaling::median(&ceiling));
            r.of_ceiling = Some(Scaling::median(&sc.per_round(|_, t, c| t / c.max(1e-9))));
            r.input_ns = Some(Scaling::median(&sc.input_ns));
            rows.push(r);
        }
    }
    let small = traces::load("smallflows", 1.0)?;
    let small_loops = ((200_000.0 * a.scale) / small.len().max(1) as f64)
        .ceil()
        .max(1.0) as u64;
    for n in (1..=6).filter(|n| want(a, "stages", &format!("{n} busy"))) {
        let mut base = 0.0;
        for per_nf in [false, true] {
            let (m, packets, p50, p99) = staged(a, n, per_nf, &small, small_loops)?;
            if !per_nf {
                base = m;
            }
            let mut r = row(
                "stages",
                format!(
                    "{n} busy × 500 cycles, {}",
                    if per_nf {
                        "one stage per NF"
                    } else {
                        "one stage"
                    }
                ),
                1,
                if per_nf { n } else { 1 },
                0,
                packets,
                m,
                m / base.max(1e-9),
            );
            r.p50_cycles = Some(p50);
            r.p99_cycles = Some(p99);
            rows.push(r);
        }
    }
    let pairs: Vec<u64> = (0..=700)
        .step_by(100)
        .filter(|c| want(a, "parallel", &format!("2 busy × {c} cycles")))
        .collect();
    let rt = if pairs.is_empty() {
        None
    } else {
        catena::runtime::ring::round_trip_cycles(100_000)
    };
    for cycles in pairs {
        let mut base = 0.0;
        for parallel in [false, true] {
            let (m, packets, p50, p99) = pair(a, cycles, parallel, &small, small_loops)?;
            if !parallel {
                base = p50 as f64;
            }
            let mut r = row(
                "parallel",
                format!(
                    "2 busy × {cycles} cycles, {}",
                    if parallel { "parallel" } else { "sequential" }
                ),
                1,
                1,
                0,
                packets,
                m,
                // Latency: p50 over the sequential p50 (the target is ≤ 0.6 at 500).
                p50 as f64 / base.max(1.0),
            );
            r.p50_cycles = Some(p50);
            r.p99_cycles = Some(p99);
            r.round_trip_cycles = rt;
            rows.push(r);
        }
    }
    let mut hops = Vec::new();
    for _ in 0..a.runs.min(3) * u64::from(want(a, "hop", "")) {
        hops.push(catena::runtime::ring::hop_cycles(
            (2_000_000.0 * a.scale) as u64 + 1000,
            1024,
        ));
    }
    let mut r = row(
        "hop",
        "one ring hop, 1024 packets, batches of 32".into(),
        1,
        2,
        0,
        0,
        0.0,
        1.0,
    );
    r.hop_cycles = Some(median(&mut hops));
    if !hops.is_empty() {
        rows.push(r);
    }
    let ks: Vec<usize> = [0usize, 4, 8, 16]
        .into_iter()
        .filter(|k| want(a, "prefetch", &format!("mixed, prefetch {k}")))
        .collect();
    // The ratio's baseline is prefetch off: measured even when only other rows are asked
    // for (`--only "prefetch 4"`), else the ratio divided by nothing.
    let mut off = 0.0;
    if !ks.is_empty() && ks[0] != 0 {
        off = one_worker(a, &format!("prefetch = 0\n{MIXED}"), &merged, loops)?.0;
    }
    for k in ks {
        let text = format!("prefetch = {k}\n{MIXED}");
        let (m, packets) = one_worker(a, &text, &merged, loops)?;
        if k == 0 {
            off = m;
        }
        rows.push(row(
            "prefetch",
            format!("mixed, prefetch {k}"),
            1,
            1,
            k,
            packets,
            m,
            m / off.max(1e-9),
        ));
    }
    if want(a, "monolithic", "") {
        // Interleaved runs; per element and mode the median of the runs.
        let mut per: [[Vec<f64>; 5]; 2] = Default::default();
        let mut last = [(0u64, 0u64, 0u64); 2];
        for _ in 0..a.runs.clamp(1, 3) {
            for (m, mono) in [true, false].into_iter().enumerate() {
                let c = monolithic::measure(&merged, loops, mono)?;
                for (k, v) in c.per.iter().enumerate() {
                    per[m][k].push(*v);
                }
                per[m][4].push(c.overall());
                last[m] = (c.packets, c.out, c.digest);
            }
        }
        if last[0] != last[1] {
            anyhow::bail!(
                "monolithic: the VNFs and the chain transmitted different packets ({} vs {}): not the same work",
                last[0].1,
                last[1].1
            );
        }
        let mono: Vec<f64> = per[0].iter_mut().map(|v| median(v)).collect();
        let micro: Vec<f64> = per[1].iter_mut().map(|v| median(v)).collect();
        let names = monolithic::ELEMENTS.iter().chain(&["overall"]);
        for (m, label) in ["3 monolithic VNFs", "catena chain (micro-NFs)"]
            .into_iter()
            .enumerate()
        {
            for (k, e) in names.clone().enumerate() {
                let v = if m == 0 { mono[k] } else { micro[k] };
                let mut r = row(
                    "monolithic",
                    format!("{label}: {e}"),
                    1,
                    1,
                    0,
                    last[m].0,
                    0.0,
                    v / mono[k].max(1e-9),
                );
                r.cycles_per_packet = Some(v);
                rows.push(r);
            }
        }
    }
    let header = [
        "group",
        "case",
        "workers",
        "stages",
        "prefetch",
        "packets",
        "Mpps",
        "ratio",
        "p50 cyc",
        "p99 cyc",
        "hop cyc/pkt",
        "rt cyc",
        "cyc/pkt",
        "max share",
        "workers Mpps",
        "ceiling ratio",
        "of ceiling",
        "input ns",
    ];
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let o = |v: Option<u64>| v.map_or("-".into(), |v| v.to_string());
            vec![
                r.group.to_string(),
                r.case.clone(),
                r.workers.to_string(),
                r.stages.to_string(),
                r.prefetch.to_string(),
                r.packets.to_string(),
                format!("{:.3}", r.mpps),
                format!("{:.2}", r.ratio),
                o(r.p50_cycles),
                o(r.p99_cycles),
                r.hop_cycles.map_or("-".into(), |v| format!("{v:.1}")),
                r.round_trip_cycles
                    .map_or("-".into(), |v| format!("{v:.0}")),
                r.cycles_per_packet
                    .map_or("-".into(), |v| format!("{v:.1}")),
                r.max_share
                    .map_or("-".into(), |v| format!("{:.1} %", v * 100.0)),
                r.workers_mpps.map_or("-".into(), |v| format!("{v:.3}")),
                r.ceiling_ratio.map_or("-".into(), |v| format!("{v:.2}")),
                r.of_ceiling.map_or("-".into(), |v| format!("{v:.2}")),
                r.input_ns.map_or("-".into(), |v| format!("{v:.1}")),
            ]
        })
        .collect();
    // Cases such as "2 busy × 500 cycles, parallel" hold commas: quoted in the CSV
    // (RFC 4180), else a row has more cells than the header.
    let quoted: Vec<Vec<String>> = table
        .iter()
        .map(|r| r.iter().map(|c| csv_cell(c)).collect())
        .collect();
    write_results(a, "micronf", &header, &quoted, &rows)?;
    svg(&a.out.join("micronf.svg"), &rows)?;
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&rows)?)?;
    } else {
        print_table(&header, &table)?;
        outln!(
            "(shared 2-core machine: timings are noisy; CSV/JSON/SVG in {})",
            a.out.display()
        )?;
    }
    Ok(0)
}

/// A CSV cell: as is, or in double quotes (inner ones doubled) when it holds a comma,
/// a quote or a line break.
fn csv_cell(c: &str) -> String {
    if c.contains([',', '"', '\n']) {
        format!("\"{}\"", c.replace('"', "\"\""))
    } else {
        c.to_string()
    }
}

/// One bar per row with a throughput (Mpps), grouped as the table is.
fn svg(path: &std::path::Path, rows: &[Row]) -> anyhow::Result<()> {
    let bars: Vec<&Row> = rows.iter().filter(|r| r.mpps > 0.0).collect();
    let max = bars.iter().map(|r| r.mpps).fold(0.1, f64::max);
    let (bh, left, width) = (16.0, 330.0, 760.0);
    let mut s = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{}' font-family='sans-serif' font-size='11'>\n<text x='10' y='18' font-size='14'>catena bench micronf: Mpps</text>\n",
        40.0 + bh * 1.25 * bars.len() as f64
    );
    for (i, r) in bars.iter().enumerate() {
        let y = 30.0 + i as f64 * bh * 1.25;
        let w = (width - left - 80.0) * r.mpps / max;
        s += &format!(
            "<text x='{}' y='{}' text-anchor='end'>{} {} (w{} s{})</text><rect x='{left}' y='{y}' width='{w:.1}' height='{bh}' fill='#1f77b4'/><text x='{:.1}' y='{}'>{:.3}</text>\n",
            left - 6.0,
            y + 12.0,
            r.group,
            r.case,
            r.workers,
            r.stages,
            left + w + 4.0,
            y + 12.0,
            r.mpps
        );
    }
    s += "</svg>\n";
    std::fs::write(path, s).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}
