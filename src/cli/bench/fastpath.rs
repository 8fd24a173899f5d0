//! `catena bench fastpath`: CPU cycles per packet (TSC) for a flow's first packet and for
//! its later packets, for chains of 1 to 3 identical NFs (IP filter, NAT, Maglev) with
//! header-action consolidation off and on; and a mixed chain (filter → NAT → Maglev →
//! monitor) on the merged real trace, Mpps off and on.
//!
//! First packets: a trace of F distinct UDP flows, one packet each (every packet misses
//! and is recorded: these chains record a flow's first packet, `fastpath_record = 1`, as
//! the report does; the mixed chain keeps the default, the second). Later packets: the
//! same flows four more times on the same runner (every packet hits). Cycles are the whole worker loop per packet: copying the record
//! into a pool buffer, the lookup (or recording), the NFs or their state functions and
//! the consolidated rewrite, and handing the packet to a sink that discards it. The same
//! runs time an empty chain (the floor) so the table can also show what the chain alone
//! costs, the quantity the FastPath report's figure plots.

use std::path::Path;

use serde::Serialize;

use catena::io::{PcapHeader, PcapWriter, Trace};
use catena::optimise::fastpath::FastConfig;
use catena::packet::{checksum, L3Kind, Layers, LinkKind};
use catena::runtime::{Chain, ChainConfig, NoProgress, RunOptions, Runner};

use super::nfs::{random_rules, toml_list};
use super::{median, print_table, traces, tsc, write_results, Args};

/// Distinct flows in the first-packet trace.
const FLOWS: usize = 16_384;
/// Later packets per flow.
const AGAIN: usize = 4;

#[derive(Serialize)]
struct Row {
    nf: String,
    chain_len: usize,
    fastpath: bool,
    cycles_first: f64,
    cycles_subsequent: f64,
    /// The empty chain's cycles per later packet in the same runs: subtracted, it leaves
    /// what the NFs (off) or the consolidated path (on) cost.
    cycles_floor: f64,
}

#[derive(Serialize)]
struct Mixed {
    trace: String,
    packets: u64,
    mpps_off: f64,
    mpps_on: f64,
    hits: u64,
    misses: u64,
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

/// A chain of `n` NFs of `kind`, one ingress port (the port is part of FastPath's key).
fn chain_text(kind: &str, n: usize, rules: &str) -> String {
    let mut s = String::from("[input]\nports = 1\n");
    for k in 0..n {
        s += &format!("[[nf]]\nname = \"x{k}\"\nkind = \"{kind}\"\n");
        s += &match kind {
            "ip_filter" => format!("rules = {rules}\ndefault = \"allow\"\n"),
            // Each NAT takes the previous one's public address as inside.
            "nat" => format!(
                "inside = \"10.0.0.0/8, 198.51.100.0/24\"\npublic = \"198.51.100.{}\"\ncapacity = 65536\n",
                k + 1
            ),
            // Each Maglev balances onto the next one's VIP; the last onto 10 backends.
            _ => {
                let backends: Vec<String> = if k + 1 == n {
                    (1..=10)
                        .map(|i| format!("{{ addr = \"10.200.0.{i}\" }}"))
                        .collect()
                } else {
                    vec![format!("{{ addr = \"203.0.113.{}\" }}", 11 + k)]
                };
                format!(
                    "vip = \"203.0.113.{}\"\nbackends = [{}]\ncapacity = 65536\n",
                    10 + k,
                    backends.join(", ")
                )
            }
        };
    }
    s
}

fn fast_cfg() -> FastConfig {
    FastConfig {
        entries: 4 * FLOWS,
        timeout_ns: 60_000_000_000,
        // The report's figure: the first packet is the recorded one.
        record_at: 1,
    }
}

/// Cycles per packet (first, subsequent) of one run on a fresh runner.
fn cycles_once(
    cfg: &ChainConfig,
    fast: bool,
    first: &Trace,
    again: &Trace,
) -> anyhow::Result<(f64, f64)> {
    let mut chain = Chain::from_config(cfg)?;
    if fast {
        chain
            .enable_fastpath(fast_cfg())
            .map_err(anyhow::Error::msg)?;
    }
    let mut r = Runner::new(chain, 64);
    let opts = RunOptions::default();
    let t0 = tsc::now();
    r.run(first, &opts, &mut NoProgress)?;
    let t1 = tsc::now();
    let sum = r.run(again, &opts, &mut NoProgress)?;
    let t2 = tsc::now();
    if fast {
        let fp = sum.fastpath.unwrap_or_default();
        if fp.hits < (again.len() as u64) * 9 / 10 {
            anyhow::bail!(
                "fastpath bench: only {} of {} later packets hit",
                fp.hits,
                again.len()
            );
        }
    }
    Ok((
        (t1 - t0) as f64 / first.len() as f64,
        (t2 - t1) as f64 / again.len() as f64,
    ))
}

/// Medians of (first, subsequent) cycles for the empty chain (the floor: ingest and
/// sink), the chain off and the chain on. The three run in turn within each run, so a
/// noisy moment of the machine touches all three alike.
fn cycles(a: &Args, text: &str, first: &Trace, again: &Trace) -> anyhow::Result<[(f64, f64); 3]> {
    let empty = ChainConfig::parse(EMPTY, "empty")?;
    let cfg = ChainConfig::parse(text, "fastpath")?;
    let mut v: [(Vec<f64>, Vec<f64>); 3] = Default::default();
    // One untimed round first, as the other benches do.
    for i in 0..=a.runs {
        for (k, (c, fast)) in [(&empty, false), (&cfg, false), (&cfg, true)]
            .into_iter()
            .enumerate()
        {
            let (f, s) = cycles_once(c, fast, first, again)?;
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

/// One ingress port: FastPath keys on it, and the emulator draws each packet's port anew,
/// which would split every flow over all ports (a NIC delivers a flow on one port).
/// The table is sized for the trace (16,566 five-tuples, each direction its own entry).
fn mixed_text(vip: &str, rules: &str) -> String {
    format!(
        "fastpath_entries = 65536\n[input]\nports = 1\n[[nf]]\nname = \"acl\"\nkind = \"ip_filter\"\nrules = {rules}\ndefault = \"allow\"\n\
[[nf]]\nname = \"nat\"\nkind = \"nat\"\n\
[[nf]]\nname = \"lb\"\nkind = \"maglev\"\nvip = \"{vip}\"\nbackends = [{{ addr = \"10.200.0.1\" }}, {{ addr = \"10.200.0.2\" }}, {{ addr = \"10.200.0.3\" }}]\n\
[[nf]]\nname = \"mon\"\nkind = \"flow_monitor\"\n"
    )
}

fn mixed(a: &Args, rules: &str) -> anyhow::Result<Mixed> {
    let trace = traces::load("merged", 1.0)?;
    let text = mixed_text(&top_destination(&trace), rules);
    // For the callgrind cross-check (docs/fastpath.md).
    let p = a.out.join("fastpath-mixed.toml");
    std::fs::write(&p, &text).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
    let cfg = ChainConfig::parse(&text, "mixed")?;
    let opts = RunOptions {
        loops: 4,
        ..Default::default()
    };
    let mut mpps = [Vec::new(), Vec::new()];
    let (mut hits, mut misses, mut packets) = (0, 0, 0);
    for i in 0..=a.runs {
        for fast in [false, true] {
            let mut chain = Chain::from_config(&cfg)?;
            if fast {
                chain
                    .enable_fastpath(chain.fastpath_settings)
                    .map_err(anyhow::Error::msg)?;
            }
            let mut r = Runner::new(chain, trace.max_packet_len());
            let s = r.run(&trace, &opts, &mut NoProgress)?;
            if i > 0 {
                mpps[fast as usize].push(s.mpps);
            }
            if let Some(f) = s.fastpath {
                (hits, misses) = (f.hits, f.misses);
            }
            packets = s.packets_in;
        }
    }
    Ok(Mixed {
        trace: "merged".into(),
        packets,
        mpps_off: median(&mut mpps[0]),
        mpps_on: median(&mut mpps[1]),
        hits,
        misses,
    })
}

/// Traces and a chain file under --out for the callgrind cross-check (docs/fastpath.md).
fn write_callgrind_inputs(out: &Path, rules: &str) -> anyhow::Result<()> {
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
    write("fastpath-first.pcap", &flow_frames(FLOWS, 1))?;
    write("fastpath-again.pcap", &flow_frames(FLOWS, 1 + AGAIN))?;
    for kind in ["ip_filter", "nat", "maglev"] {
        for n in 1..=3 {
            let p = out.join(format!("fastpath-{kind}-{n}.toml"));
            let text = format!(
                "fastpath_entries = {}\nfastpath_record = 1\n{}",
                4 * FLOWS,
                chain_text(kind, n, rules)
            );
            std::fs::write(&p, text).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
        }
    }
    Ok(())
}

fn svg(path: &Path, rows: &[Row]) -> anyhow::Result<()> {
    let max = rows.iter().map(|r| r.cycles_subsequent).fold(1.0, f64::max);
    let (bw, h, top, left) = (16.0, 260.0, 40.0, 50.0);
    let mut s = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' font-family='sans-serif' font-size='11'>\n<text x='{left}' y='20' font-size='14'>cycles per later packet: fastpath off (grey) / on (blue)</text>\n",
        left + rows.len() as f64 * (bw + 4.0) + 40.0,
        h + top + 70.0
    );
    for (i, r) in rows.iter().enumerate() {
        let x = left + i as f64 * (bw + 4.0) + (i / 2) as f64 * 6.0;
        let bh = r.cycles_subsequent / max * h;
        let color = if r.fastpath { "#1f77b4" } else { "#999" };
        s += &format!(
            "<rect x='{x:.1}' y='{:.1}' width='{bw}' height='{bh:.1}' fill='{color}'><title>{} x{} fastpath {}: {:.0} cycles</title></rect>\n",
            top + h - bh,
            r.nf,
            r.chain_len,
            if r.fastpath { "on" } else { "off" },
            r.cycles_subsequent
        );
        if r.fastpath {
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

pub fn run(a: &Args) -> anyhow::Result<i32> {
    let rules = toml_list(&random_rules(100, 7));
    let first = trace_of(&flow_frames(FLOWS, 1), 0);
    let again = trace_of(&flow_frames(FLOWS, AGAIN), FLOWS as u64 * 1000);
    let mut rows = Vec::new();
    for nf in ["ip_filter", "nat", "maglev"] {
        for len in 1..=3 {
            let text = chain_text(nf, len, &rules);
            let [floor, off, on] = cycles(a, &text, &first, &again)?;
            for (fast, (cf, cs)) in [(false, off), (true, on)] {
                rows.push(Row {
                    nf: nf.into(),
                    chain_len: len,
                    fastpath: fast,
                    cycles_first: cf,
                    cycles_subsequent: cs,
                    cycles_floor: floor.1,
                });
            }
        }
    }
    let m = mixed(a, &rules)?;
    write_callgrind_inputs(&a.out, &rules)?;
    let header = [
        "nf",
        "chain",
        "first off",
        "first on",
        "later off",
        "later on",
        "reduction %",
        "on / one NF off",
        "floor",
        "chain off",
        "chain on",
        "chain reduction %",
        "chain on / one NF",
    ];
    let body: Vec<Vec<String>> = rows
        .chunks(2)
        .map(|p| {
            let (off, on) = (&p[0], &p[1]);
            let one = rows
                .iter()
                .find(|r| r.nf == off.nf && r.chain_len == 1 && !r.fastpath)
                .map_or(1.0, |r| r.cycles_subsequent);
            let one_chain = rows
                .iter()
                .find(|r| r.nf == off.nf && r.chain_len == 1 && !r.fastpath)
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
                format!("{:.0}", off.cycles_subsequent),
                format!("{:.0}", on.cycles_subsequent),
                format!(
                    "{:.1}",
                    100.0 * (1.0 - on.cycles_subsequent / off.cycles_subsequent.max(1e-9))
                ),
                format!("{:.2}", on.cycles_subsequent / one.max(1e-9)),
                format!("{:.0}", off.cycles_floor),
                format!("{c_off:.0}"),
                format!("{c_on:.0}"),
                format!("{:.1}", 100.0 * (1.0 - c_on / c_off.max(1e-9))),
                format!("{:.2}", c_on / one_chain.max(1e-9)),
            ]
        })
        .collect();
    write_results(a, "fastpath", &header, &body, &rows)?;
    let p = a.out.join("fastpath-mixed.json");
    std::fs::write(&p, serde_json::to_string_pretty(&m)?)
        .map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
    svg(&a.out.join("fastpath.svg"), &rows)?;
    if a.json {
        println!("{}", serde_json::to_string(&rows)?);
    } else {
        print_table(&header, &body);
        println!(
            "(TSC cycles per packet, median of {} runs; {FLOWS} flows: first = one packet each, later = {AGAIN} more each;\n floor = the same runs through an empty chain; chain = later minus floor, what the NFs or the consolidated path cost)",
            a.runs
        );
        println!(
            "mixed chain filter -> NAT -> Maglev -> monitor on {} ({} packets): {:.2} Mpps off, {:.2} Mpps on ({} hits, {} misses)",
            m.trace, m.packets, m.mpps_off, m.mpps_on, m.hits, m.misses
        );
    }
    Ok(0)
}
