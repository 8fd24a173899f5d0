//! The DPI engine against nDPI: every capture of ../shared/datasets/ndpi/pcap labelled
//! flow by flow and compared with ndpiReader's labels in ndpi/EXPECTED_FLOWS.tsv.
//!
//! Matching: a row of EXPECTED_FLOWS is matched to our flow with the same L4 protocol
//! and the same pair of endpoints (ip:port, either order; ports 0 for protocols without
//! ports) in the same capture. When nDPI lists several flows with one 5-tuple (it splits
//! on idle time or VLAN), the first is matched and the rest count as unmatched.
//!
//! Agreement: nDPI labels "MASTER.APP" (e.g. TLS.Google) or "MASTER". A row is in scope
//! when MASTER or APP is a protocol we name; it agrees when our label (payload
//! detection, else the port fallback) equals MASTER or APP.
//!
//! Run with `--nocapture` to print the per-protocol table (docs/dpi.md holds a copy).

mod common;

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use catena::io::Trace;
use catena::nfs::dpi::trace::{label_trace, FlowLabel};
use catena::nfs::AppProto;

struct Row {
    pcap: String,
    proto: u8,
    a: (IpAddr, u16),
    b: (IpAddr, u16),
    label: String,
}

fn endpoint(s: &str) -> Option<(IpAddr, u16)> {
    let (ip, port) = s.rsplit_once(':')?;
    let ip = ip.trim_start_matches('[').trim_end_matches(']');
    Some((ip.parse().ok()?, port.parse().ok()?))
}

fn l4_number(s: &str) -> Option<u8> {
    Some(match s {
        "TCP" => 6,
        "UDP" => 17,
        "ICMP" => 1,
        "ICMPV6" => 58,
        "IGMP" => 2,
        "ESP" => 50,
        "AH" => 51,
        "OSPF" => 89,
        "VRRP" => 112,
        "PIM" => 103,
        "SCTP" => 132,
        "PGM" => 113,
        n => n.parse().ok()?,
    })
}

fn expected() -> Vec<Row> {
    let text = std::fs::read_to_string(common::dataset("ndpi/EXPECTED_FLOWS.tsv")).unwrap();
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            if f.len() < 9 {
                return None;
            }
            Some(Row {
                pcap: f[0].to_string(),
                proto: l4_number(f[2])?,
                a: endpoint(f[3])?,
                b: endpoint(f[5])?,
                label: f[7].to_string(),
            })
        })
        .collect()
}

type Key = (u8, (IpAddr, u16), (IpAddr, u16));

fn key(proto: u8, a: (IpAddr, u16), b: (IpAddr, u16)) -> Key {
    let (a, b) = if proto == 6 || proto == 17 {
        (a, b)
    } else {
        ((a.0, 0), (b.0, 0))
    };
    if a <= b {
        (proto, a, b)
    } else {
        (proto, b, a)
    }
}

fn flow_key(f: &FlowLabel) -> Key {
    let k = &f.key;
    key(k.proto, (k.src_ip(), k.sport), (k.dst_ip(), k.dport))
}

/// The protocol a row is scored under: MASTER if we name it, else APP.
fn scope(label: &str) -> Option<AppProto> {
    let (master, app) = label.split_once('.').unwrap_or((label, ""));
    AppProto::from_name(master).or_else(|| AppProto::from_name(app))
}

fn agrees(label: &str, ours: Option<AppProto>) -> bool {
    let (master, app) = label.split_once('.').unwrap_or((label, ""));
    ours.is_some_and(|p| p.name() == master || p.name() == app)
}

#[derive(Default)]
struct Score {
    flows: usize,
    agreed: usize,
    by_port: usize,
}

#[test]
fn agrees_with_ndpi_on_supported_protocols() {
    let rows = expected();
    let mut by_pcap: BTreeMap<&str, Vec<&Row>> = BTreeMap::new();
    for r in &rows {
        by_pcap.entry(&r.pcap).or_default().push(r);
    }
    let mut scores: BTreeMap<&'static str, Score> = BTreeMap::new();
    let (mut unmatched, mut unmatched_in_scope, mut unreadable) = (0, 0, Vec::new());
    let mut confusions: HashMap<(String, String), usize> = HashMap::new();
    let mut ours_on_unknown: BTreeMap<&'static str, usize> = BTreeMap::new();
    // DPI_MISSES=QUIC lists the rows of that nDPI master protocol we disagree on;
    // DPI_MISSES=Unknown:QUIC the flows nDPI left unknown that we call QUIC.
    let show = std::env::var("DPI_MISSES").unwrap_or_default();
    for (pcap, rows) in &by_pcap {
        let path = common::dataset("ndpi/pcap").join(pcap);
        let trace = match Trace::open(&path) {
            Ok(t) => t,
            Err(e) => {
                unreadable.push(format!("{pcap}: {e}"));
                unmatched += rows.len();
                continue;
            }
        };
        let flows = label_trace(&trace);
        let mut index: HashMap<Key, Vec<usize>> = HashMap::new();
        for (i, f) in flows.iter().enumerate() {
            index.entry(flow_key(f)).or_default().push(i);
        }
        for r in rows {
            let ours = index
                .get_mut(&key(r.proto, r.a, r.b))
                .and_then(|v| (!v.is_empty()).then(|| v.remove(0)))
                .map(|i| &flows[i]);
            let sc = scope(&r.label);
            let Some(f) = ours else {
                unmatched += 1;
                unmatched_in_scope += usize::from(sc.is_some());
                if sc.is_some() {
                    println!(
                        "unmatched: {pcap} {} {:?} {:?} nDPI {}",
                        r.proto, r.a, r.b, r.label
                    );
                }
                continue;
            };
            if r.label == "Unknown" {
                if let Some(p) = f.label() {
                    *ours_on_unknown.entry(p.name()).or_default() += 1;
                    if show == format!("Unknown:{}", p.name()) {
                        println!(
                            "extra: {pcap} {} {:?} {:?} ({} pkts)",
                            r.proto, r.a, r.b, f.packets
                        );
                    }
                }
            }
            let Some(sc) = sc else { continue };
            let s = scores.entry(sc.name()).or_default();
            s.flows += 1;
            if agrees(&r.label, f.label()) {
                s.agreed += 1;
                s.by_port += usize::from(f.detected.is_none());
            } else {
                let ours = f.label().map_or("-".to_string(), |p| p.name().to_string());
                if r.label.split('.').next() == Some(show.as_str()) {
                    println!(
                        "miss: {pcap} {} {:?} {:?} nDPI {} ours {ours} ({} pkts)",
                        r.proto, r.a, r.b, r.label, f.packets
                    );
                }
                *confusions
                    .entry((r.label.split('.').next().unwrap().to_string(), ours))
                    .or_default() += 1;
            }
        }
    }
    let total: usize = scores.values().map(|s| s.flows).sum();
    let agreed: usize = scores.values().map(|s| s.agreed).sum();
    let pct = |a: usize, n: usize| 100.0 * a as f64 / n.max(1) as f64;
    println!("| protocol | flows | agreed | % | of which by port |");
    println!("|---|---:|---:|---:|---:|");
    let mut order: Vec<_> = scores.iter().collect();
    order.sort_by_key(|(n, s)| (std::cmp::Reverse(s.flows), *n));
    for (name, s) in order {
        println!(
            "| {name} | {} | {} | {:.1} | {} |",
            s.flows,
            s.agreed,
            pct(s.agreed, s.flows),
            s.by_port
        );
    }
    let by_port: usize = scores.values().map(|s| s.by_port).sum();
    println!(
        "| **all supported** | **{total}** | **{agreed}** | **{:.1}** | {by_port} |",
        pct(agreed, total)
    );
    println!(
        "\nagreement by payload alone (no port fallback): {:.1}%",
        pct(agreed - by_port, total)
    );
    println!(
        "\nrows: {}; unmatched rows: {unmatched} ({unmatched_in_scope} in scope); unreadable captures: {}",
        rows.len(),
        unreadable.len()
    );
    for u in &unreadable {
        println!("  unreadable: {u}");
    }
    let mut conf: Vec<_> = confusions.into_iter().collect();
    conf.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    println!("\ndisagreements (nDPI master → ours), most common first:");
    for ((e, o), n) in conf.iter().take(25) {
        println!("  {n:4}  {e} → {o}");
    }
    println!("\nour labels on flows nDPI left Unknown: {ours_on_unknown:?}");
    // Enough of the corpus must be compared for the figure to mean something.
    assert!(total > 5000, "only {total} in-scope flows matched");
    assert!(
        pct(agreed, total) >= 90.0,
        "agreement {:.1}% < 90%",
        pct(agreed, total)
    );
    // The port fallback must not be what carries the figure.
    assert!(
        pct(agreed - by_port, total) >= 85.0,
        "payload-only agreement {:.1}% < 85%",
        pct(agreed - by_port, total)
    );
}
