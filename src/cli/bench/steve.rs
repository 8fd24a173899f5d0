//! The Steve thesis' tables: the four Freeflow apps on each trace, beside the copy and
//! view floors; and the firewall with partial against full decodes.
//!
//! Apps run the way `catena run` runs a mapped trace with one worker: each packet is a
//! copy-on-write view of the trace's bytes (copied only if an NF changes it), so native
//! NFs and programs are measured on the product path, as equals. The `copy-floor` row
//! alone copies every packet into a buffer, as a NIC's DMA would: what copying costs.

use serde::Serialize;

use std::time::Instant;

use catena::flow::{LearnTable, Learned};
use catena::io::{After, PcapHeader, Record, Source, Trace, TraceError, TraceSource};
use catena::packet::{LinkKind, MAX_BATCH};
use catena::runtime::{port_of, Chain, ChainConfig, NoProgress, RunOptions, Runner, DEFAULT_SEED};

use super::{chart, median, print_table, traces, tsc, write_results, Args};

/// The row that copies every packet (the others view them).
const COPY_FLOOR: &str = "copy-floor";

/// (app, chain file text). The floors have no NF: `view-floor` only makes each packet a
/// view of the trace and releases it, which bounds what any app can reach on the product
/// path; `copy-floor` copies each packet into its buffer instead.
const APPS: &[(&str, &str)] = &[
    (COPY_FLOOR, "[input]\nports = 5\n"),
    ("view-floor", "[input]\nports = 5\n"),
    (
        "wire",
        "[input]\nports = 2\n[[nf]]\nname = \"wire\"\nkind = \"wire\"\n",
    ),
    (
        "mac_switch",
        "[input]\nports = 5\n[[nf]]\nname = \"sw\"\nkind = \"mac_switch\"\n",
    ),
    (
        "ipv4_switch",
        "[input]\nports = 5\n[[nf]]\nname = \"sw\"\nkind = \"ipv4_switch\"\n",
    ),
    (
        "firewall",
        "[input]\nports = 5\n[[nf]]\nname = \"fw\"\nkind = \"firewall\"\n",
    ),
];

/// Bench-only rows, no NF and no runtime: the least a learning switch must do. `learn-keys`
/// runs the MAC switch's table alone (its capacity, no timeout, its batch's hash-and-
/// prefetch pass) over the trace's (source, destination, ingress port) triples taken out
/// beforehand into one array; `learn-in-place` reads the two addresses from each packet's
/// bytes where the trace holds them, so it also pays for touching every packet. Neither
/// stamps, queues, forwards or counts a packet: the runtime's share is `wire`'s.
/// `learn-ahead` is `learn-in-place` with the next batch's header lines prefetched while
/// this batch is worked on: what the packet bytes cost when their loads are started early.
const IDEAL_KEYS: &str = "learn-keys";
const IDEAL_IN_PLACE: &str = "learn-in-place";
const IDEAL_AHEAD: &str = "learn-ahead";
/// `--only prefetch` adds each asked app again with the runtime's ingest prefetch on.
const PREFETCH_TAG: &str = "prefetch";
/// `--only lookahead` adds each asked app again with the next chunk's lines of bytes 0
/// and 37 prefetched whatever the chain reads (see `Viewed`).
const LOOKAHEAD_TAG: &str = "lookahead";
/// The MAC switch's default capacity (`mac_switch.rs`).
const IDEAL_CAPACITY: usize = 65_536;

/// The thesis' Mpps per app (measured on 4SICS); the target is ten times these.
const THESIS_MPPS: &[(&str, f64)] = &[
    ("wire", 3.75),
    ("mac_switch", 2.14),
    ("ipv4_switch", 1.76),
    ("firewall", 2.06),
];

/// The same apps as pipeline-language programs (`--pipeline`), with their native twin.
const PROGRAMS: &[(&str, &str, u16)] = &[
    ("wire", "wire", 2),
    ("mac_switch", "mac_switch", 5),
    ("ipv4_switch", "ipv4_switch", 5),
    ("firewall", "firewall", 5),
];

/// The program's name in the table: the native app's, marked.
fn program_row(app: &str) -> String {
    format!("{app} (pipeline)")
}

/// The chain running `examples/pipeline/{app}.stv` (found from the working directory,
/// else from the source tree the binary was built in).
fn program_chain(app: &str, ports: u16) -> String {
    let rel = std::path::PathBuf::from(format!("examples/pipeline/{app}.stv"));
    let path = if rel.exists() {
        rel
    } else {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
    };
    format!(
        "[input]\nports = {ports}\n[[nf]]\nname = \"p\"\nkind = \"pipeline\"\nprogram = {:?}\n",
        path.display().to_string()
    )
}

const DECODES: &[(&str, &str)] = &[
    (
        "partial",
        "[input]\nports = 5\n[[nf]]\nname = \"fw\"\nkind = \"firewall\"\ndecode = \"partial\"\n",
    ),
    (
        "full",
        "[input]\nports = 5\n[[nf]]\nname = \"fw\"\nkind = \"firewall\"\ndecode = \"full\"\n",
    ),
];

#[derive(Serialize, Clone)]
pub struct Row {
    pub app: String,
    pub trace: String,
    /// Packets per run (the trace times the replays).
    pub packets: u64,
    pub loops: u64,
    pub mpps: f64,
    pub data_rate_gbps: f64,
    pub throughput_gbps: f64,
    pub ns_per_packet: f64,
    pub cycles_per_packet: f64,
    /// Forwarded share of the input (the rest dropped by the app).
    pub forwarded: f64,
    pub runs: u64,
}

/// Packets per timed run at least: small traces are replayed from memory (as tcpreplay
/// loops a pcap) so a run lasts long enough to time and tables reach steady state.
const MIN_PACKETS: u64 = 3_000_000;

/// The runtime's pass over a trace that lasts the process (`TraceSource::in_place`): its
/// packets viewed in place, as a mapped pcap's, and the next chunk's header lines loaded
/// while a chunk is worked on when the chain reads them (`Source::set_lookahead`, set by
/// the runner from the chain's profile). With `force` (`--only lookahead` rows) the lines
/// of bytes 0 and 37 are loaded whatever the chain reads, as session 21's bench-only
/// source did: on `wire` the cost the runtime's choice avoids, on the MAC switch (which
/// reads bytes 0..12) the cost of the second line.
struct Viewed {
    src: TraceSource<'static>,
    force: bool,
}

impl Source for Viewed {
    fn link(&self) -> LinkKind {
        self.src.link()
    }
    fn header(&self) -> PcapHeader {
        self.src.header()
    }
    fn max_packet_len(&self) -> usize {
        self.src.max_packet_len()
    }
    #[inline]
    fn next_chunk(&mut self, max: usize) -> (&[u8], &[Record], After) {
        self.src.next_chunk(max)
    }
    fn rewind(&mut self) -> bool {
        self.src.rewind()
    }
    fn span_ns(&self) -> u64 {
        self.src.span_ns()
    }
    fn records_hint(&self) -> u64 {
        self.src.records_hint()
    }
    fn error(&self) -> Option<&TraceError> {
        self.src.error()
    }
    fn lasting(&self) -> Option<&'static [u8]> {
        self.src.lasting()
    }
    fn set_lookahead(&mut self, reach: usize) {
        self.src
            .set_lookahead(if self.force { reach.max(38) } else { reach });
    }
}

/// Runs `chain_text` over `trace` `runs` times and keeps the median run by Mpps: packets
/// viewed in place, except for the copy floor's.
fn measure(
    app: &str,
    chain_text: &str,
    trace_name: &str,
    trace: &'static Trace,
    runs: u64,
    hz: f64,
) -> anyhow::Result<Row> {
    let cfg = ChainConfig::parse(chain_text, app)?;
    let mut samples = Vec::new();
    let mut last = None;
    let opts = RunOptions {
        loops: MIN_PACKETS.div_ceil(trace.len().max(1) as u64),
        ..Default::default()
    };
    // One untimed run first: page faults, caches and clock ramp-up stay out of the figures.
    for i in 0..=runs {
        let chain = Chain::from_config(&cfg)?;
        let mut r = Runner::new(chain, trace.max_packet_len());
        let s = if app == COPY_FLOOR {
            r.run(trace, &opts, &mut NoProgress)?
        } else {
            let mut src = Viewed {
                src: TraceSource::in_place(trace),
                force: app.ends_with(LOOKAHEAD_TAG),
            };
            r.run_source(&mut src, &opts, &mut NoProgress)?
        };
        if i == 0 {
            continue;
        }
        samples.push(s.seconds);
        last = Some(s);
    }
    let s = last.expect("runs >= 1");
    let secs = median(&mut samples).max(1e-9);
    let pk = s.packets_in as f64;
    Ok(Row {
        app: app.into(),
        trace: trace_name.into(),
        packets: s.packets_in,
        loops: opts.loops,
        mpps: pk / secs / 1e6,
        data_rate_gbps: s.bytes_in as f64 * 8.0 / secs / 1e9,
        throughput_gbps: s.bytes_out as f64 * 8.0 / secs / 1e9,
        ns_per_packet: secs * 1e9 / pk.max(1.0),
        cycles_per_packet: secs * hz / pk.max(1.0),
        forwarded: s.packets_out as f64 / pk.max(1.0),
        runs,
    })
}

/// The learning table's work for one batch: every key hashed and its slot prefetched, then
/// learn source → port and look up destination, packet by packet (as `MacSwitch::process`).
/// Returns the floods (misses), which the caller keeps so the work is not optimised away.
#[inline(always)]
fn learn_batch(t: &mut LearnTable<u64, u16>, keys: &[(u64, u64, u16)], full: &mut u64) -> u64 {
    let mut hs = [(0u64, 0u64); MAX_BATCH];
    for (&(s, d, _), h) in keys.iter().zip(hs.iter_mut()) {
        *h = (t.hash(&s), t.hash(&d));
        t.prefetch(h.0);
        t.prefetch(h.1);
    }
    let mut floods = 0;
    for (&(s, d, port), &(hs, hd)) in keys.iter().zip(hs.iter()) {
        if t.learn_with_hash(s, hs, port, 0) == Learned::Full {
            *full += 1;
        }
        floods += u64::from(t.get_with_hash(&d, hd, 0).is_none());
    }
    floods
}

/// The address at `o` of an Ethernet frame as the MAC switch keys it (low 48 bits).
#[inline(always)]
fn mac_at(b: &[u8], o: usize) -> u64 {
    let mut k = [0u8; 8];
    k[2..].copy_from_slice(&b[o..o + 6]);
    u64::from_be_bytes(k)
}

/// The ideal rows' inputs: each Ethernet frame's offset in the trace and its ingress port,
/// and the same frames' (source, destination, port) keys.
type IdealInputs = (Vec<(usize, u16)>, Vec<(u64, u64, u16)>);

fn ideal_inputs(trace: &Trace) -> IdealInputs {
    let (bytes, recs) = trace.raw();
    // Ingress ports as the runtime draws them on the first replay loop (its default
    // seed, 5 ports): the port of a record is its position's.
    let port = |i: usize| port_of(DEFAULT_SEED, i as u64, 5);
    // Frames too short for two addresses are left out of both rows (the switch drops them).
    let frames: Vec<(usize, u16)> = recs
        .iter()
        .enumerate()
        .filter(|(_, r)| r.caplen >= 14)
        .map(|(i, r)| (r.off as usize, port(i)))
        .collect();
    let keys = frames
        .iter()
        .map(|&(o, p)| (mac_at(bytes, o + 6), mac_at(bytes, o), p))
        .collect();
    (frames, keys)
}

/// One of the ideal rows: the trace replayed as often as the apps' rows replay it, a
/// fresh table a run, median of `runs` after one untimed run.
fn measure_ideal(app: &str, trace_name: &str, trace: &Trace, runs: u64, hz: f64) -> Row {
    let loops = MIN_PACKETS.div_ceil(trace.len().max(1) as u64);
    let (bytes, _) = trace.raw();
    let (frames, keys) = ideal_inputs(trace);
    let mut samples = Vec::new();
    let mut floods = 0u64;
    let mut full = 0u64;
    for i in 0..=runs {
        let mut t = LearnTable::<u64, u16>::new(IDEAL_CAPACITY, 0);
        let mut batch = [(0u64, 0u64, 0u16); MAX_BATCH];
        let t0 = Instant::now();
        for _ in 0..loops {
            if app == IDEAL_KEYS {
                for chunk in keys.chunks(MAX_BATCH) {
                    floods += learn_batch(&mut t, chunk, &mut full);
                }
            } else {
                for (c, chunk) in frames.chunks(MAX_BATCH).enumerate() {
                    if app == IDEAL_AHEAD {
                        let next = frames.iter().skip((c + 1) * MAX_BATCH).take(MAX_BATCH);
                        for &(o, _) in next {
                            catena::flow::prefetch(&bytes[o]);
                        }
                    }
                    for (&(o, p), k) in chunk.iter().zip(batch.iter_mut()) {
                        *k = (mac_at(bytes, o + 6), mac_at(bytes, o), p);
                    }
                    floods += learn_batch(&mut t, &batch[..chunk.len()], &mut full);
                }
            }
        }
        let secs = t0.elapsed().as_secs_f64();
        if i > 0 {
            samples.push(secs);
        }
    }
    std::hint::black_box((floods, full));
    let secs = median(&mut samples).max(1e-9);
    let pk = (frames.len() as u64 * loops) as f64;
    Row {
        app: app.into(),
        trace: trace_name.into(),
        packets: pk as u64,
        loops,
        mpps: pk / secs / 1e6,
        data_rate_gbps: 0.0,
        throughput_gbps: 0.0,
        ns_per_packet: secs * 1e9 / pk.max(1.0),
        cycles_per_packet: secs * hz / pk.max(1.0),
        forwarded: 0.0,
        runs,
    }
}

fn table<'a>(rows: &[Row], first: &'a str) -> (Vec<&'a str>, Vec<Vec<String>>) {
    let header = vec![
        first,
        "trace",
        "packets",
        "Mpps",
        "data Gbps",
        "thru Gbps",
        "ns/pkt",
        "cycles/pkt",
        "fwd %",
    ];
    let body = rows
        .iter()
        .map(|r| {
            vec![
                r.app.clone(),
                r.trace.clone(),
                r.packets.to_string(),
                format!("{:.2}", r.mpps),
                format!("{:.2}", r.data_rate_gbps),
                format!("{:.2}", r.throughput_gbps),
                format!("{:.1}", r.ns_per_packet),
                format!("{:.1}", r.cycles_per_packet),
                format!("{:.1}", r.forwarded * 100.0),
            ]
        })
        .collect();
    (header, body)
}

fn run_grid(a: &Args, apps: &[(&str, &str)], name: &str, first: &str) -> anyhow::Result<Vec<Row>> {
    let hz = tsc::hz();
    let mut rows = Vec::new();
    let mut apps: Vec<(String, String)> = apps
        .iter()
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect();
    if a.pipeline && name == "steve" {
        // Each program right after its native twin: same trace, same run, same machine state.
        for &(app, native, ports) in PROGRAMS {
            let at = apps
                .iter()
                .position(|(n, _)| n == native)
                .map_or(apps.len(), |i| i + 1);
            apps.insert(at, (program_row(app), program_chain(app, ports)));
        }
    }
    for t in traces::names(&a.traces) {
        // Views need bytes that outlive every packet: the trace stays for the process
        // (as `catena run` keeps its mapped input), one per trace benchmarked.
        let trace: &'static Trace = Box::leak(Box::new(traces::load(&t, a.scale)?));
        for (app, text) in &apps {
            // `--only`: one case under callgrind (an app's name matches its program too).
            if !a.only.is_empty() && !a.only.iter().any(|o| app.contains(o.as_str())) {
                continue;
            }
            rows.push(measure(app, text, &t, trace, a.runs, hz)?);
        }
        if name == "steve" {
            // Bench-only variants of the asked apps, only when asked by name: the
            // runtime's ingest prefetch (`prefetch = 32`, off in the rows above), and a
            // source that prefetches a batch ahead.
            for tag in [PREFETCH_TAG, LOOKAHEAD_TAG] {
                if !a.only.iter().any(|o| o == tag) {
                    continue;
                }
                for (app, text) in &apps {
                    let asked = a.only.iter().any(|o| {
                        o != PREFETCH_TAG && o != LOOKAHEAD_TAG && app.contains(o.as_str())
                    });
                    if app.contains("floor") || !asked {
                        continue;
                    }
                    let row = format!("{app} {tag}");
                    let text = if tag == PREFETCH_TAG {
                        format!("prefetch = {MAX_BATCH}\n{text}")
                    } else {
                        text.clone()
                    };
                    rows.push(measure(&row, &text, &t, trace, a.runs, hz)?);
                }
            }
            // Only when asked by name: the ideal is a question about the machine, not an app.
            for ideal in [IDEAL_KEYS, IDEAL_IN_PLACE, IDEAL_AHEAD] {
                if a.only.iter().any(|o| ideal.contains(o.as_str())) {
                    rows.push(measure_ideal(ideal, &t, trace, a.runs, hz));
                }
            }
        }
    }
    let (header, body) = table(&rows, first);
    write_results(a, name, &header, &body, &rows)?;
    chart::bars(
        &a.out.join(format!("{name}.svg")),
        &format!("catena bench {name}: Mpps (median of {})", a.runs),
        &rows,
    )?;
    if a.json {
        outln!("{}", serde_json::to_string(&rows)?)?;
    } else {
        print_table(&header, &body)?;
    }
    Ok(rows)
}

pub fn apps(a: &Args) -> anyhow::Result<i32> {
    let rows = run_grid(a, APPS, "steve", "app")?;
    if !a.json {
        outln!("\nwire vs the floors (same run; apps view packets, the copy floor copies): ")?;
        for t in traces::names(&a.traces) {
            let get = |app: &str| {
                rows.iter()
                    .find(|r| r.app == app && r.trace == t)
                    .map(|r| r.ns_per_packet)
            };
            if let (Some(w), Some(v), Some(c)) = (get("wire"), get("view-floor"), get(COPY_FLOOR)) {
                outln!(
                    "  {t}: wire {w:.1} ns/pkt = {:.2}× the view floor's {v:.1}; copy floor {c:.1}",
                    w / v
                )?;
            }
        }
        for t in traces::names(&a.traces) {
            let get = |app: &str| {
                rows.iter()
                    .find(|r| r.app == app && r.trace == t)
                    .map(|r| r.ns_per_packet)
            };
            if let (Some(w), Some(k)) = (get("wire"), get(IDEAL_KEYS)) {
                let budget = 1e3 / (10.0 * THESIS_MPPS[1].1);
                let place = get(IDEAL_IN_PLACE)
                    .map_or(String::new(), |p| format!("; {IDEAL_IN_PLACE} {p:.1}"));
                outln!(
                    "  {t}: ideal MAC switch = wire {w:.1} + {IDEAL_KEYS} {k:.1} = {:.1} ns/pkt against 10x the thesis' {budget:.1}{place}",
                    w + k
                )?;
            }
        }
        if a.pipeline {
            outln!(
                "\nprogram vs native NF (same run, median of {}): time per packet, whole run",
                a.runs
            )?;
            for t in traces::names(&a.traces) {
                for &(app, native, _) in PROGRAMS {
                    let get = |n: &str| rows.iter().find(|r| r.app == n && r.trace == t);
                    if let (Some(n), Some(p)) = (get(native), get(&program_row(app))) {
                        outln!(
                            "  {t} {app}: native {:.2} Mpps {:.1} ns/pkt, program {:.2} Mpps {:.1} ns/pkt = {:.2}×",
                            n.mpps,
                            n.ns_per_packet,
                            p.mpps,
                            p.ns_per_packet,
                            p.ns_per_packet / n.ns_per_packet
                        )?;
                    }
                }
            }
        }
        outln!(
            "\n10x the thesis (its Mpps on 4SICS times ten; cycles a packet it allows at this TSC):"
        )?;
        for t in traces::names(&a.traces) {
            for &(app, thesis) in THESIS_MPPS {
                let get = |n: &str| rows.iter().find(|r| r.app == n && r.trace == t);
                let Some(n) = get(app) else { continue };
                let target = thesis * 10.0;
                let verdict = |r: &Row| {
                    format!(
                        "{:.1} Mpps {:.0} cyc/pkt {}",
                        r.mpps,
                        r.cycles_per_packet,
                        if r.mpps >= target { "met" } else { "MISSED" }
                    )
                };
                let budget = n.cycles_per_packet * n.mpps / target;
                let prog = get(&program_row(app))
                    .map_or(String::new(), |p| format!(", program {}", verdict(p)));
                outln!(
                    "  {t} {app} (>= {target:.1} Mpps, <= {budget:.0} cyc/pkt): native {}{prog}",
                    verdict(n)
                )?;
            }
        }
        outln!("results in {}", a.out.display())?;
    }
    Ok(0)
}

pub fn decode(a: &Args) -> anyhow::Result<i32> {
    let rows = run_grid(a, DECODES, "steve-decode", "decode")?;
    if !a.json {
        outln!("\nfull / partial time per packet (same run):")?;
        for t in traces::names(&a.traces) {
            let get = |d: &str| {
                rows.iter()
                    .find(|r| r.app == d && r.trace == t)
                    .map(|r| r.ns_per_packet)
            };
            if let (Some(p), Some(f)) = (get("partial"), get("full")) {
                outln!("  {t}: {:.2}×", f / p)?;
            }
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use catena::io::gen::{generate, GenOptions, Profile};

    /// The ideal rows do the MAC switch's table work and no less: over a bigflows-shaped
    /// trace their pass floods exactly the frames the native switch floods.
    #[test]
    fn the_ideal_pass_floods_as_the_mac_switch() {
        let mut o = GenOptions::profile(Profile::BigFlows);
        // At 20,000 packets no destination has sent yet (every frame floods): too few.
        o.count = 200_000;
        let trace = generate(&o).unwrap();
        let (_, text) = APPS.iter().find(|(n, _)| *n == "mac_switch").unwrap();
        let cfg = ChainConfig::parse(text, "t").unwrap();
        let mut r = Runner::new(Chain::from_config(&cfg).unwrap(), trace.max_packet_len());
        let s = r
            .run(&trace, &RunOptions::default(), &mut NoProgress)
            .unwrap();
        let native = s.nfs[0]
            .stats
            .iter()
            .find(|(k, _)| k == "floods")
            .map(|(_, v)| *v)
            .unwrap();
        let (_, keys) = ideal_inputs(&trace);
        let mut t = LearnTable::new(IDEAL_CAPACITY, 0);
        let mut full = 0;
        let floods: u64 = keys
            .chunks(MAX_BATCH)
            .map(|c| learn_batch(&mut t, c, &mut full))
            .sum();
        assert!(native > 0 && native < keys.len() as u64 / 10, "{native}");
        assert_eq!(floods, native);
        assert_eq!(full, 0);
    }
}
