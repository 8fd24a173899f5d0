//! Nanoseconds per primitive operation of a match-action pipeline, as the Steve thesis
//! tabulated them: table match with goto, flow insert and remove, field decode, read and
//! write, action-set write, output. Each op runs over a working set shaped like real
//! traffic (4,096 distinct keys, real packet bytes) so caches behave as in a run.

use std::hint::black_box;
use std::time::Instant;

use serde::Serialize;

use catena::flow::{FlowKey, TimedTable};
use catena::packet::wire::Ipv4;
use catena::packet::{checksum, Batch, Layers, LinkKind, Packet};

use super::{median, print_table, tsc, write_results, Args};

use std::collections::HashMap;

use catena::nfs::pipeline::{compile, Pipeline};
use catena::nfs::{Context, Nf};

#[derive(Serialize)]
struct Row {
    op: &'static str,
    ns: f64,
    cycles: f64,
    iterations: u64,
}

const KEYS: usize = 4096;
/// Packets in flight: per-packet field work happens on a batch that is in L1, as in a run.
const HOT: usize = catena::packet::MAX_BATCH;

/// Frame `i` of the working set: a TCP/IPv4 frame (ports 1234 → 80), header checksum
/// valid, with source 10.0.0.0 + i and destination 10.1.0.0 + i, so that `KEYS` frames
/// carry `KEYS` distinct sources and destinations and no source is any frame's
/// destination (learning by source never makes a lookup by destination hit).
fn frame(i: u32) -> Packet {
    let mut b = vec![0u8; 64];
    b[0..6].copy_from_slice(&[2, 0, 0, 0, (i >> 8) as u8, i as u8]);
    b[6..12].copy_from_slice(&[2, 0, 0, 1, (i >> 8) as u8, i as u8]);
    b[12..14].copy_from_slice(&[8, 0]);
    b[14..34].copy_from_slice(&[
        0x45, 0, 0, 50, 0, 1, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 1, 0, 0,
    ]);
    b[26..30].copy_from_slice(&(0x0a00_0000 | i).to_be_bytes());
    b[30..34].copy_from_slice(&(0x0a01_0000 | i).to_be_bytes());
    b[34..38].copy_from_slice(&[0x04, 0xd2, 0, 80]);
    b[46] = 0x50;
    let mut p = Packet::from_bytes(&b);
    let sum = checksum::checksum(&p.data()[14..34]);
    p.data_mut()[24..26].copy_from_slice(&sum.to_be_bytes());
    p
}

/// Times `iters` calls of `f(i)`; returns (ns, cycles) per call.
fn time(iters: u64, mut f: impl FnMut(usize)) -> (f64, f64) {
    let (t0, c0) = (Instant::now(), tsc::now());
    for i in 0..iters as usize {
        f(i);
    }
    let (c1, t1) = (tsc::now(), t0.elapsed());
    (
        t1.as_nanos() as f64 / iters as f64,
        (c1 - c0) as f64 / iters as f64,
    )
}

#[derive(Clone, Copy)]
enum Action {
    SetField {
        #[allow(dead_code)]
        field: u8,
        #[allow(dead_code)]
        value: u64,
    },
    Output(#[allow(dead_code)] u16),
}

pub fn run(a: &Args) -> anyhow::Result<i32> {
    let iters: u64 = ((4_000_000.0 * a.scale) as u64).max(10_000);
    let mut pkts: Vec<Packet> = (0..KEYS as u32).map(frame).collect();
    let mut names: Vec<&'static str> = Vec::new();
    let mut samples: Vec<Vec<(f64, f64)>> = Vec::new();
    for run in 0..a.runs {
        let mut results: Vec<(&'static str, (f64, f64))> = Vec::new();

        results.push((
            "loop overhead",
            time(iters, |i| {
                black_box(i & (KEYS - 1));
            }),
        ));

        // Stage-1 exact match on destination MAC, then goto the stage the entry names.
        let mut t1: TimedTable<u64, u32> = TimedTable::new(KEYS, 0);
        for (k, p) in pkts.iter().enumerate() {
            let d = p.data();
            let key = u64::from_be_bytes([0, 0, d[0], d[1], d[2], d[3], d[4], d[5]]);
            t1.learn(key, (k % 4) as u32, 0);
        }
        let stages: [fn(u64) -> u64; 4] = [
            |x| x + 1,
            |x| x ^ 3,
            |x| x.rotate_left(5),
            |x| x.wrapping_mul(3),
        ];
        results.push((
            "table match + goto",
            time(iters, |i| {
                let d = pkts[i & (KEYS - 1)].data();
                let key = u64::from_be_bytes([0, 0, d[0], d[1], d[2], d[3], d[4], d[5]]);
                let next = t1.get(&key, 0).unwrap_or(0) as usize;
                black_box(stages[next & 3](key));
            }),
        ));

        // Flow insert then remove of 65,536 fresh 5-tuples: a flow table of a busy link,
        // sized up front so inserts never grow it.
        let n = 1 << 16;
        let mut ft: TimedTable<FlowKey, u32> = TimedTable::new(n, 0);
        let key = |i: usize| {
            let mut src = [0u8; 16];
            let mut dst = [0u8; 16];
            src[..4].copy_from_slice(&(0x0a00_0000 | i as u32).to_be_bytes());
            dst[..4].copy_from_slice(&(0x0a01_0000 ^ (i as u32).rotate_left(7)).to_be_bytes());
            FlowKey {
                src,
                dst,
                sport: i as u16,
                dport: 80,
                proto: 6,
                family: 4,
            }
        };
        results.push((
            "flow insert",
            time(n as u64, |i| {
                black_box(ft.learn(key(i), i as u32, 0));
            }),
        ));
        results.push((
            "flow remove",
            time(n as u64, |i| {
                black_box(ft.remove(&key(i)));
            }),
        ));

        // Decode: the header walk alone (offsets for L2, L3, L4).
        results.push((
            "field decode",
            time(iters, |i| {
                black_box(Layers::parse(
                    LinkKind::Ethernet,
                    pkts[i & (HOT - 1)].data(),
                ));
            }),
        ));
        for p in pkts.iter_mut() {
            p.layers();
        }
        results.push((
            "field read",
            time(iters, |i| {
                let p = &pkts[i & (HOT - 1)];
                let o = p.meta().layers.l3_off as usize + 12;
                let d = p.data();
                black_box(u32::from_be_bytes([d[o], d[o + 1], d[o + 2], d[o + 3]]));
            }),
        ));
        // Write: decrement TTL with the RFC 1624 checksum update, as a router does.
        results.push((
            "field write",
            time(iters, |i| {
                let p = &mut pkts[i & (HOT - 1)];
                let o = p.meta().layers.l3_off as usize;
                let d = p.data_mut();
                let mut ip = Ipv4::new_unchecked(&mut d[o..]);
                let ttl = ip.ttl();
                ip.set_ttl_update(ttl.wrapping_sub(1));
            }),
        ));
        // Action set: the pipeline accumulates set-field actions, applied at the end.
        let mut set = [Action::Output(0); 8];
        let mut len = 0usize;
        results.push((
            "action-set write",
            time(iters, |i| {
                set[len & 7] = Action::SetField {
                    field: (i & 15) as u8,
                    value: i as u64,
                };
                len += 1;
                if len == 8 {
                    black_box(&set);
                    len = 0;
                }
            }),
        ));
        let _ = matches!(set[0], Action::SetField { .. });
        // Output: choose the egress port and hand the packet to the port's batch.
        let mut out = Batch::with_capacity(catena::packet::MAX_BATCH);
        let mut spare: Vec<Packet> = pkts.drain(..catena::packet::MAX_BATCH).collect();
        results.push((
            "output",
            time(iters, |i| {
                let mut p = spare.pop().expect("refilled below");
                p.meta_mut().egress = (i & 3) as u16;
                out.push(p);
                if out.is_full() {
                    spare.extend(out.drain());
                }
            }),
        ));
        spare.extend(out.drain());
        pkts.extend(spare);

        if a.pipeline {
            results.extend(pipeline_ops(iters)?);
        }

        if run == 0 {
            names = results.iter().map(|r| r.0).collect();
            samples = vec![Vec::new(); names.len()];
        }
        for (k, (_, v)) in results.into_iter().enumerate() {
            samples[k].push(v);
        }
    }
    let rows: Vec<Row> = names
        .iter()
        .zip(samples)
        .map(|(op, s)| {
            let mut ns: Vec<f64> = s.iter().map(|x| x.0).collect();
            let mut cy: Vec<f64> = s.iter().map(|x| x.1).collect();
            Row {
                op,
                ns: median(&mut ns),
                cycles: median(&mut cy),
                iterations: iters,
            }
        })
        .collect();
    let header = ["op", "ns/op", "cycles/op"];
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.op.to_string(),
                format!("{:.2}", r.ns),
                format!("{:.1}", r.cycles),
            ]
        })
        .collect();
    write_results(a, "steve-ops", &header, &body, &rows)?;
    if a.json {
        outln!("{}", serde_json::to_string(&rows)?)?;
    } else {
        print_table(&header, &body)?;
        outln!(
            "(median of {} runs of {} iterations; working set {KEYS} packets/keys)",
            a.runs,
            iters
        )?;
    }
    Ok(0)
}

/// Layouts and decoders the pipeline op programs share: Ethernet then IPv4.
const PIPE_HEAD: &str = "drops bad;
layout ethernet { dst: 48; src: 48; type: 16; }
layout ipv4 { version: 4; ihl: 4; tos: 8; len: 16; id: 16; flags: 3; frag: 13;
  ttl: 8; proto: 8; csum: 16; src: 32; dst: 32; size = ihl * 4; checksum csum; }
";

/// ns and cycles per packet of a program run as an NF over batches of `MAX_BATCH` packets
/// from a working set of `keys` frames (`HOT` for per-packet field work, `KEYS` where
/// tables need distinct keys), after `setup` control commands.
fn program_ns(body: &str, setup: &[String], keys: usize, iters: u64) -> anyhow::Result<(f64, f64)> {
    let src = format!("{PIPE_HEAD}{body}");
    let c = compile("op.stv", &src, &HashMap::new()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut nf = Pipeline::new(c);
    for cmd in setup {
        nf.control(cmd).map_err(|e| anyhow::anyhow!("{cmd}: {e}"))?;
    }
    let per = catena::packet::MAX_BATCH;
    let mut groups: Vec<Vec<Packet>> = (0..keys / per)
        .map(|g| (0..per).map(|k| frame((g * per + k) as u32)).collect())
        .collect();
    let cx = Context { ports: 5 };
    let mut b = Batch::with_capacity(per);
    let mut round = |i: usize| {
        let g = &mut groups[i % (keys / per)];
        for p in g.drain(..) {
            b.push(p);
        }
        nf.process(&mut b, &cx);
        g.extend(b.drain());
    };
    let rounds = (iters / per as u64).max(1);
    for i in 0..keys / per {
        round(i);
    }
    let (ns, cy) = time(rounds, &mut round);
    Ok((ns / per as f64, cy / per as f64))
}

/// Decoders the op programs use, `BODY` standing for the last one's action.
const ETH: &str = "decoder eth: ethernet { extract dst, src, type; short { drop bad; } BODY }\n";
const IP: &str = "decoder eth: ethernet { extract dst, src, type; short { drop bad; } next ip; }
decoder ip: ipv4 { extract version, ttl, src, dst; short { drop bad; } BODY }\n";

/// An op program: `tables`, then the decoders `dec` with `body` as the last one's action.
fn prog(dec: &str, body: &str, tables: &str) -> String {
    format!(
        "{tables}{}start {{ next eth; }}\n",
        dec.replace("BODY", body)
    )
}

/// The learning ops' table, and three bodies that differ only by the learning op: after
/// the warm-up round `REFRESH` finds every source live and refreshes it, `INSERT_REMOVE`
/// inserts a key the table lacks and removes it again; the branch in `LOOKUP` is never
/// taken (the version is 4), so it pays the same decode and lookup and no learning.
const HOSTS: &str = "table hosts { key ip.dst exact; capacity 65536; miss { pass; } }\n";
const LOOKUP: &str = "if ip.version == 9 { learn hosts(ip.src) -> output in_port; } goto hosts;";
const REFRESH: &str = "learn hosts(ip.src) -> output in_port; goto hosts;";
const INSERT_REMOVE: &str =
    "learn hosts(ip.src) -> output in_port; remove hosts(ip.src); goto hosts;";

/// The Steve ops measured on compiled pipeline programs: each row is the difference
/// between two programs that differ only by that op (same packets, same loop).
fn pipeline_ops(iters: u64) -> anyhow::Result<Vec<(&'static str, (f64, f64))>> {
    let (eth, ip) = (ETH, IP);
    let none: &[String] = &[];
    let empty = program_ns("start { pass; }", none, HOT, iters)?;
    let eth_only = program_ns(&prog(eth, "pass;", ""), none, HOT, iters)?;
    let eth_keys = program_ns(&prog(eth, "pass;", ""), none, KEYS, iters)?;
    let decoded = program_ns(&prog(ip, "pass;", ""), none, HOT, iters)?;
    let read = program_ns(
        &prog(ip, "if ip.src == 1 { drop bad; } pass;", ""),
        none,
        HOT,
        iters,
    )?;
    let write = program_ns(
        &prog(ip, "set ip.ttl = ip.ttl - 1; pass;", ""),
        none,
        HOT,
        iters,
    )?;
    let output = program_ns("start { output 1; }", none, HOT, iters)?;
    // Exact match on the destination MAC over KEYS entries, each a goto to a second stage.
    let mut entries = String::new();
    for i in 0..KEYS as u32 {
        entries.push_str(&format!(
            "  entry 0x0200{:08x} => goto stage2;\n",
            i & 0xffff
        ));
    }
    let tables = format!(
        "table mac {{ key eth.dst exact; capacity {KEYS};\n{entries} miss {{ pass; }} }}\n\
         table stage2 {{ key eth.type exact; miss {{ pass; }} }}\n"
    );
    let matched = program_ns(&prog(eth, "goto mac;", &tables), none, KEYS, iters)?;
    // Learning over the working set's KEYS distinct sources; lookups by destination,
    // which is never a learned source, so all three programs miss the same way.
    let (lookup, refresh, insert_remove) = (
        program_ns(&prog(ip, LOOKUP, HOSTS), none, KEYS, iters)?,
        program_ns(&prog(ip, REFRESH, HOSTS), none, KEYS, iters)?,
        program_ns(&prog(ip, INSERT_REMOVE, HOSTS), none, KEYS, iters)?,
    );
    // Signed: a difference within the runs' noise can read slightly below zero.
    let d = |a: (f64, f64), b: (f64, f64)| (a.0 - b.0, a.1 - b.1);
    Ok(vec![
        ("pipeline: NF loop (start { pass; })", empty),
        ("pipeline: decode ethernet", d(eth_only, empty)),
        (
            "pipeline: decode + ipv4 (size, bounds)",
            d(decoded, eth_only),
        ),
        ("pipeline: field read + compare", d(read, decoded)),
        ("pipeline: field write + checksum", d(write, decoded)),
        ("pipeline: table match + goto", d(matched, eth_keys)),
        (
            "pipeline: learn (refresh one of 4,096 live entries)",
            d(refresh, lookup),
        ),
        (
            "pipeline: learn + remove (insert a new key, remove it)",
            d(insert_remove, lookup),
        ),
        ("pipeline: output", d(output, empty)),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `body` (over `HOSTS`) on the working set twice, as the bench's warm-up round
    /// and one timed round do, and returns the program's counters.
    fn learning_counters(body: &str) -> HashMap<String, u64> {
        let src = format!("{PIPE_HEAD}{}", prog(IP, body, HOSTS));
        let c = compile("op.stv", &src, &HashMap::new()).unwrap();
        let mut nf = Pipeline::new(c);
        let cx = Context { ports: 5 };
        for _ in 0..2 {
            for g in 0..KEYS / catena::packet::MAX_BATCH {
                let mut b = Batch::with_capacity(catena::packet::MAX_BATCH);
                for k in 0..catena::packet::MAX_BATCH {
                    b.push(frame((g * catena::packet::MAX_BATCH + k) as u32));
                }
                nf.process(&mut b, &cx);
            }
        }
        nf.stats()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect()
    }

    #[test]
    fn the_working_set_has_distinct_sources_none_a_destination() {
        let ip = |i: u32, at: usize| {
            let d = frame(i).data()[at..at + 4].to_vec();
            u32::from_be_bytes([d[0], d[1], d[2], d[3]])
        };
        let srcs: std::collections::HashSet<u32> = (0..KEYS as u32).map(|i| ip(i, 26)).collect();
        let dsts: std::collections::HashSet<u32> = (0..KEYS as u32).map(|i| ip(i, 30)).collect();
        assert_eq!(srcs.len(), KEYS);
        assert_eq!(dsts.len(), KEYS);
        assert!(srcs.is_disjoint(&dsts));
    }

    #[test]
    fn the_learning_rows_measure_what_they_name() {
        // Refresh: every source learned once, then refreshed; every lookup misses.
        let r = learning_counters(REFRESH);
        assert_eq!(r["hosts.entries"], KEYS as u64);
        assert_eq!(r["hosts.misses"], 2 * KEYS as u64);
        assert_eq!(r.get("hosts.hits").copied().unwrap_or(0), 0);
        // Insert + remove: the table ends empty and never fills; lookups miss the same way.
        let ir = learning_counters(INSERT_REMOVE);
        assert_eq!(ir["hosts.entries"], 0);
        assert_eq!(ir["hosts.misses"], 2 * KEYS as u64);
        // The baseline learns nothing and looks up as often.
        let l = learning_counters(LOOKUP);
        assert_eq!(l["hosts.entries"], 0);
        assert_eq!(l["hosts.misses"], 2 * KEYS as u64);
    }
}
