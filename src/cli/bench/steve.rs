//! The Steve thesis' tables: the four Freeflow apps on each trace, beside the copy and
//! view floors; and the firewall with partial against full decodes.
//!
//! Apps run the way `catena run` runs a mapped trace with one worker: each packet is a
//! copy-on-write view of the trace's bytes (copied only if an NF changes it), so native
//! NFs and programs are measured on the product path, as equals. The `copy-floor` row
//! alone copies every packet into a buffer, as a NIC's DMA would: what copying costs.

use serde::Serialize;

use catena::io::{After, PcapHeader, Record, Source, Trace, TraceError, TraceSource};
use catena::packet::LinkKind;
use catena::runtime::{Chain, ChainConfig, NoProgress, RunOptions, Runner};

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

/// A pass over a trace that lasts the whole process, whose packets the runner views in
/// place as it views a mapped pcap's (`Source::lasting`).
struct Viewed(TraceSource<'static>, &'static [u8]);

impl Source for Viewed {
    fn link(&self) -> LinkKind {
        self.0.link()
    }
    fn header(&self) -> PcapHeader {
        self.0.header()
    }
    fn max_packet_len(&self) -> usize {
        self.0.max_packet_len()
    }
    #[inline]
    fn next_chunk(&mut self, max: usize) -> (&[u8], &[Record], After) {
        self.0.next_chunk(max)
    }
    fn rewind(&mut self) -> bool {
        self.0.rewind()
    }
    fn span_ns(&self) -> u64 {
        self.0.span_ns()
    }
    fn records_hint(&self) -> u64 {
        self.0.records_hint()
    }
    fn error(&self) -> Option<&TraceError> {
        self.0.error()
    }
    fn lasting(&self) -> Option<&'static [u8]> {
        Some(self.1)
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
            let mut src = Viewed(TraceSource::new(trace), trace.raw().0);
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
    }
    let (header, body) = table(&rows, first);
    write_results(a, name, &header, &body, &rows)?;
    chart::bars(
        &a.out.join(format!("{name}.svg")),
        &format!("catena bench {name}: Mpps (median of {})", a.runs),
        &rows,
    )?;
    if a.json {
        println!("{}", serde_json::to_string(&rows)?);
    } else {
        print_table(&header, &body);
    }
    Ok(rows)
}

pub fn apps(a: &Args) -> anyhow::Result<i32> {
    let rows = run_grid(a, APPS, "steve", "app")?;
    if !a.json {
        println!("\nwire vs the floors (same run; apps view packets, the copy floor copies): ");
        for t in traces::names(&a.traces) {
            let get = |app: &str| {
                rows.iter()
                    .find(|r| r.app == app && r.trace == t)
                    .map(|r| r.ns_per_packet)
            };
            if let (Some(w), Some(v), Some(c)) = (get("wire"), get("view-floor"), get(COPY_FLOOR)) {
                println!(
                    "  {t}: wire {w:.1} ns/pkt = {:.2}× the view floor's {v:.1}; copy floor {c:.1}",
                    w / v
                );
            }
        }
        if a.pipeline {
            println!(
                "\nprogram vs native NF (same run, median of {}): time per packet, whole run",
                a.runs
            );
            for t in traces::names(&a.traces) {
                for &(app, native, _) in PROGRAMS {
                    let get = |n: &str| rows.iter().find(|r| r.app == n && r.trace == t);
                    if let (Some(n), Some(p)) = (get(native), get(&program_row(app))) {
                        println!(
                            "  {t} {app}: native {:.2} Mpps {:.1} ns/pkt, program {:.2} Mpps {:.1} ns/pkt = {:.2}×",
                            n.mpps,
                            n.ns_per_packet,
                            p.mpps,
                            p.ns_per_packet,
                            p.ns_per_packet / n.ns_per_packet
                        );
                    }
                }
            }
        }
        println!(
            "\n10x the thesis (its Mpps on 4SICS times ten; cycles a packet it allows at this TSC):"
        );
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
                println!(
                    "  {t} {app} (>= {target:.1} Mpps, <= {budget:.0} cyc/pkt): native {}{prog}",
                    verdict(n)
                );
            }
        }
        println!("results in {}", a.out.display());
    }
    Ok(0)
}

pub fn decode(a: &Args) -> anyhow::Result<i32> {
    let rows = run_grid(a, DECODES, "steve-decode", "decode")?;
    if !a.json {
        println!("\nfull / partial time per packet (same run):");
        for t in traces::names(&a.traces) {
            let get = |d: &str| {
                rows.iter()
                    .find(|r| r.app == d && r.trace == t)
                    .map(|r| r.ns_per_packet)
            };
            if let (Some(p), Some(f)) = (get("partial"), get("full")) {
                println!("  {t}: {:.2}×", f / p);
            }
        }
    }
    Ok(0)
}
