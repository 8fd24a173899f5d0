//! `catena bench nfs`: ns/packet and Mpps of each NF of the NF library on the generated
//! profiles and the real merged trace; the filter at 10 to 10,000 rules; NAT at 1k, 100k
//! and 1M concurrent flows; Maglev at 10 and 1,000 backends.

use serde::Serialize;

use catena::io::{PcapHeader, Trace};
use catena::packet::{checksum, LinkKind};

use super::{print_table, traces, write_results, Args};

#[derive(Serialize)]
struct Row {
    nf: String,
    case: String,
    trace: String,
    packets: u64,
    mpps: f64,
    ns_per_packet: f64,
    forwarded: f64,
}

/// A tiny deterministic generator for rule sets and flows.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Rules shaped like ClassBench ACLs: prefixes of mixed lengths, a protocol, a service
/// port or range; ordered, with a final catch-all left to the default action.
pub(super) fn random_rules(n: usize, seed: u64) -> Vec<String> {
    let mut r = Rng(seed | 1);
    let services = [
        22u16, 25, 53, 80, 110, 123, 143, 443, 445, 993, 3306, 3389, 5060, 8080,
    ];
    (0..n)
        .map(|_| {
            let act = if r.below(3) == 0 { "deny" } else { "allow" };
            let proto = ["tcp", "udp", "tcp", "tcp"][r.below(4) as usize];
            let len = [8u64, 16, 16, 24, 24, 24, 32][r.below(7) as usize];
            let a = r.next() as u32 & (u32::MAX << (32 - len));
            let net = format!(
                "{}.{}.{}.{}/{len}",
                a >> 24,
                (a >> 16) & 255,
                (a >> 8) & 255,
                a & 255
            );
            let dir = if r.below(2) == 0 { "src" } else { "dst" };
            let port = if r.below(4) == 0 {
                let lo = 1024 + r.below(30000) as u16;
                format!("dst portrange {lo}-{}", lo + r.below(1000) as u16)
            } else {
                format!(
                    "dst port {}",
                    services[r.below(services.len() as u64) as usize]
                )
            };
            format!("{act} {proto} {dir} net {net} and {port}")
        })
        .collect()
}

pub(super) fn toml_list(v: &[String]) -> String {
    let items: Vec<String> = v.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", items.join(", "))
}

/// `flows` UDP flows from inside hosts (10/8) to one outside server, visited round-robin,
/// so a NAT or load balancer holds `flows` live entries at once.
fn flow_trace(flows: usize, packets: usize, dst: [u8; 4]) -> Trace {
    let mut frame = [0u8; 64];
    frame[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    frame[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    frame[12..14].copy_from_slice(&[8, 0]);
    frame[14..24].copy_from_slice(&[0x45, 0, 0, 50, 0, 0, 0, 0, 64, 17]);
    frame[30..34].copy_from_slice(&dst);
    frame[36..38].copy_from_slice(&53u16.to_be_bytes());
    frame[38..40].copy_from_slice(&30u16.to_be_bytes());
    let mut bytes = Vec::with_capacity(packets);
    for i in 0..packets {
        let f = (i % flows) as u32;
        let mut p = frame;
        // 64 hosts per /24 keep source ports spread; ports 1024.. vary per host.
        let host = 0x0a00_0000 | (f / 512);
        p[26..30].copy_from_slice(&host.to_be_bytes());
        p[34..36].copy_from_slice(&(1024 + (f % 512) as u16).to_be_bytes());
        let c = checksum::checksum(&p[14..34]);
        p[24..26].copy_from_slice(&c.to_be_bytes());
        bytes.push(p);
    }
    Trace::from_packets(
        LinkKind::Ethernet,
        PcapHeader::new(1, false),
        bytes
            .iter()
            .enumerate()
            .map(|(i, p)| (i as u64 * 1000, &p[..])),
    )
}

fn measure(
    a: &Args,
    nf: &str,
    case: &str,
    trace_name: &str,
    trace: &Trace,
    chain: &str,
) -> anyhow::Result<Row> {
    let (s, t) = super::median_run(a, chain, nf, trace, 2_000_000)?;
    let n = s.packets_in as f64;
    Ok(Row {
        nf: nf.into(),
        case: case.into(),
        trace: trace_name.into(),
        packets: s.packets_in,
        mpps: n / t / 1e6,
        ns_per_packet: t * 1e9 / n.max(1.0),
        forwarded: s.packets_out as f64 / n.max(1.0),
    })
}

/// Whether `--only` selects the row `nf case` (no `--only`: every row).
fn wanted(a: &Args, nf: &str, case: &str) -> bool {
    let row = format!("{nf} {case}");
    a.only.is_empty() || a.only.iter().any(|o| row.contains(o.as_str()))
}

fn nf_chain(kind: &str, body: &str) -> String {
    format!("[input]\nports = 2\n[[nf]]\nname = \"x\"\nkind = \"{kind}\"\n{body}\n")
}

const NAT: &str = "inside = \"10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16\"\npublic = \"198.51.100.1, 198.51.100.2, 198.51.100.3, 198.51.100.4, 198.51.100.5, 198.51.100.6, 198.51.100.7, 198.51.100.8, 198.51.100.9, 198.51.100.10, 198.51.100.11, 198.51.100.12, 198.51.100.13, 198.51.100.14, 198.51.100.15, 198.51.100.16, 198.51.100.17, 198.51.100.18, 198.51.100.19, 198.51.100.20\"\nports = \"1024-65535\"";

/// Connection-table capacity for a case with `flows` concurrent flows: as an operator
/// would size it, the next power of two at or above 1.25x the flows (at least 64Ki). An
/// index sized for 1M flows when 100k are live spreads them over 8x the cache lines.
fn capacity(flows: usize) -> usize {
    (flows + flows / 4).next_power_of_two().max(65_536)
}

/// The NAT configuration with a table for `flows` flows.
fn nat(flows: usize) -> String {
    format!("{NAT}\ncapacity = {}", capacity(flows))
}

fn maglev(backends: usize, table: u64, vip: &str, flows: usize) -> String {
    let b: Vec<String> = (0..backends)
        .map(|i| {
            format!(
                "{{ addr = \"10.200.{}.{}\", weight = 1 }}",
                i / 250,
                i % 250 + 1
            )
        })
        .collect();
    format!(
        "vip = \"{vip}\"\nbackends = [{}]\ntable_size = {table}\ncapacity = {}",
        b.join(", "),
        capacity(flows)
    )
}

pub fn run(a: &Args) -> anyhow::Result<i32> {
    let mut rows = Vec::new();
    let rules100 = toml_list(&random_rules(100, 7));
    let per_trace: Vec<(&str, String)> = vec![
        (
            "ip_filter",
            nf_chain(
                "ip_filter",
                &format!("rules = {rules100}\ndefault = \"allow\""),
            ),
        ),
        // The traces' flows fit in 256Ki entries.
        ("nat", nf_chain("nat", &nat(200_000))),
        (
            "maglev",
            nf_chain("maglev", &maglev(10, 65537, "10.0.0.1", 200_000)),
        ),
        (
            "flow_monitor",
            nf_chain("flow_monitor", "records = \"/dev/null\""),
        ),
    ];
    let case = |nf: &str| {
        if nf == "ip_filter" {
            "100 rules"
        } else {
            "default"
        }
    };
    for t in traces::names(&a.traces) {
        if !per_trace.iter().any(|(nf, _)| wanted(a, nf, case(nf))) {
            continue;
        }
        let trace = traces::load(&t, a.scale)?;
        for (nf, chain) in &per_trace {
            if wanted(a, nf, case(nf)) {
                rows.push(measure(a, nf, case(nf), &t, &trace, chain)?);
            }
        }
    }
    let rule_counts: Vec<usize> = [10usize, 100, 1000, 10_000]
        .into_iter()
        .filter(|n| wanted(a, "ip_filter", &format!("{n} rules")))
        .collect();
    if !rule_counts.is_empty() {
        let merged = traces::load("merged", 1.0)?;
        for n in rule_counts {
            let chain = nf_chain(
                "ip_filter",
                &format!(
                    "rules = {}\ndefault = \"allow\"",
                    toml_list(&random_rules(n, n as u64))
                ),
            );
            rows.push(measure(
                a,
                "ip_filter",
                &format!("{n} rules"),
                "merged",
                &merged,
                &chain,
            )?);
        }
    }
    for flows in [1_000usize, 100_000, 1_000_000] {
        if !wanted(a, "nat", &format!("{flows} flows")) {
            continue;
        }
        let trace = flow_trace(flows, (2 * flows).max(2_000_000), [198, 18, 0, 1]);
        rows.push(measure(
            a,
            "nat",
            &format!("{flows} flows"),
            "udp-flows",
            &trace,
            &nf_chain("nat", &nat(flows)),
        )?);
    }
    let trace = flow_trace(100_000, 2_000_000, [203, 0, 113, 10]);
    for (n, m) in [(10usize, 65537u64), (1000, 100_003)] {
        if !wanted(a, "maglev", &format!("{n} backends, 100k flows")) {
            continue;
        }
        let chain = nf_chain("maglev", &maglev(n, m, "203.0.113.10", 100_000));
        rows.push(measure(
            a,
            "maglev",
            &format!("{n} backends, 100k flows"),
            "udp-flows",
            &trace,
            &chain,
        )?);
    }
    let header = ["nf", "case", "trace", "packets", "Mpps", "ns/pkt", "fwd %"];
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.nf.clone(),
                r.case.clone(),
                r.trace.clone(),
                r.packets.to_string(),
                format!("{:.2}", r.mpps),
                format!("{:.1}", r.ns_per_packet),
                format!("{:.1}", r.forwarded * 100.0),
            ]
        })
        .collect();
    write_results(a, "nfs", &header, &body, &rows)?;
    if a.json {
        outln!("{}", serde_json::to_string(&rows)?)?;
    } else {
        print_table(&header, &body)?;
        outln!(
            "(median of {} runs; each run at least 2M packets, the runtime's copy included)",
            a.runs
        )?;
    }
    Ok(0)
}
