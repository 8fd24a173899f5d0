//! The flow monitor against tshark's conversation tables (`-qz conv,tcp` and `conv,udp`):
//! for every TCP and UDP conversation of real traces, the exported records give the same
//! endpoints, frames and bytes (frame lengths) per direction.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use catena::io::Trace;

/// (proto, endpoint, endpoint) with the smaller endpoint first, so both tools agree on it.
type Key = (u8, (String, u16), (String, u16));

/// Per direction in key order: frames and bytes from the first endpoint, then from the
/// second. Bytes are `(low, high)` bounds: tshark prints `12 kB` for 12,000..=12,999.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counts {
    frames: [u64; 2],
    bytes_lo: [u64; 2],
    bytes_hi: [u64; 2],
    /// Rows (tshark) or records (catena) summed here.
    rows: u32,
    /// A, the side that sent first, is the key's second endpoint (in the last row).
    a_second: bool,
}

fn key(proto: u8, a: (String, u16), b: (String, u16)) -> (Key, bool) {
    let swap = (a.0.parse::<std::net::IpAddr>().ok(), a.1) > (b.0.parse().ok(), b.1);
    if swap {
        ((proto, b, a), true)
    } else {
        ((proto, a, b), false)
    }
}

fn add(m: &mut BTreeMap<Key, Counts>, k: Key, swap: bool, ab: [u64; 3], ba: [u64; 3]) {
    let (f, r) = if swap { (ba, ab) } else { (ab, ba) };
    let c = m.entry(k).or_default();
    c.rows += 1;
    c.a_second = swap;
    for (i, d) in [f, r].iter().enumerate() {
        c.frames[i] += d[0];
        c.bytes_lo[i] += d[1];
        c.bytes_hi[i] += d[2];
    }
}

fn endpoint(s: &str) -> (String, u16) {
    // IPv6 addresses are printed bare, so the port is what follows the last colon.
    let (a, p) = s.rsplit_once(':').expect("addr:port");
    (a.to_string(), p.parse().expect("port"))
}

/// `12 kB` → (12000, 12999); `4845 bytes` → exact.
fn size(n: &str, unit: &str) -> (u64, u64) {
    let n: u64 = n.parse().expect("size");
    let m = match unit {
        "bytes" => return (n, n),
        "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        u => panic!("unknown unit {u}"),
    };
    (n * m, n * m + m - 1)
}

/// tshark's TCP and UDP conversations. Columns: A <-> B, frames/bytes B→A ("<-"),
/// frames/bytes A→B ("->"), totals, relative start, duration. Rows with the same
/// endpoints (tshark splits TCP streams on port reuse) are summed.
fn tshark_conversations(trace: &Path) -> BTreeMap<Key, Counts> {
    let mut m = BTreeMap::new();
    for (proto, tap) in [(6u8, "conv,tcp"), (17, "conv,udp")] {
        let out = Command::new("tshark")
            .arg("-r")
            .arg(trace)
            .args(["-qz", tap])
            .output()
            .expect("tshark");
        assert!(out.status.success(), "tshark failed on {}", trace.display());
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let t: Vec<&str> = line.split_whitespace().collect();
            if t.len() != 14 || t[1] != "<->" {
                continue;
            }
            let (ba_lo, ba_hi) = size(t[4], t[5]);
            let (ab_lo, ab_hi) = size(t[7], t[8]);
            let (k, swap) = key(proto, endpoint(t[0]), endpoint(t[2]));
            let ab = [t[6].parse().unwrap(), ab_lo, ab_hi];
            let ba = [t[3].parse().unwrap(), ba_lo, ba_hi];
            add(&mut m, k, swap, ab, ba);
        }
    }
    m
}

/// Runs the monitor over `trace` with a timeout longer than any capture, so each record
/// is a whole-file conversation like tshark's; returns the TCP/UDP counts and all records.
fn monitor(trace: &Path, records: &Path) -> (BTreeMap<Key, Counts>, Vec<serde_json::Value>) {
    let t = Trace::open(trace).unwrap();
    let chain = format!(
        "[[nf]]\nname = \"mon\"\nkind = \"flow_monitor\"\nrecords = \"{}\"\ntimeout = 1e9\ncapacity = 1000000\n",
        records.display()
    );
    let s = common::run_chain(&chain, &t, None);
    assert_eq!(s.packets_out, t.len() as u64, "the monitor never drops");
    let text = std::fs::read_to_string(records).expect("records written");
    let recs: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    let stat = |k: &str| s.nfs[0].stats.iter().find(|(n, _)| n == k).unwrap().1;
    assert_eq!(stat("exported"), recs.len() as u64);
    assert_eq!(stat("flows"), 0, "all exported at the end");
    assert_eq!(stat("overflow_packets"), 0);
    let mut m = BTreeMap::new();
    for r in &recs {
        let proto = r["proto"].as_u64().unwrap() as u8;
        assert_eq!(r["end"], "final");
        if proto != 6 && proto != 17 {
            continue;
        }
        let ep = |a: &str, p: &str| {
            (
                r[a].as_str().unwrap().to_string(),
                r[p].as_u64().unwrap() as u16,
            )
        };
        let (k, swap) = key(proto, ep("a", "a_port"), ep("b", "b_port"));
        let n = |f: &str| r[f].as_u64().unwrap();
        let ab = [n("packets_ab"), n("bytes_ab"), n("bytes_ab")];
        let ba = [n("packets_ba"), n("bytes_ba"), n("bytes_ba")];
        add(&mut m, k, swap, ab, ba);
    }
    (m, recs)
}

fn compare(name: &str, trace: &Path) {
    let dir = common::tempdir();
    let (ours, recs) = monitor(trace, &dir.path().join("flows.jsonl"));
    let theirs = tshark_conversations(trace);
    assert!(
        theirs.len() >= 10,
        "{name}: only {} conversations",
        theirs.len()
    );
    let mut bad = Vec::new();
    for (k, t) in &theirs {
        match ours.get(k) {
            None => bad.push(format!("{k:?}: missing, tshark {t:?}")),
            Some(o) => {
                let bytes_ok =
                    (0..2).all(|i| (t.bytes_lo[i]..=t.bytes_hi[i]).contains(&o.bytes_lo[i]));
                // One conversation on both sides: A (the first sender) must agree too.
                let a_ok = t.rows > 1 || o.a_second == t.a_second;
                if o.frames != t.frames || !bytes_ok || !a_ok {
                    bad.push(format!("{k:?}: ours {o:?}, tshark {t:?}"));
                }
            }
        }
    }
    for k in ours.keys().filter(|k| !theirs.contains_key(*k)) {
        bad.push(format!("{k:?}: not a tshark conversation"));
    }
    assert!(
        bad.is_empty(),
        "{name}: {} of {} conversations differ:\n{}",
        bad.len(),
        theirs.len(),
        bad[..bad.len().min(20)].join("\n")
    );
    eprintln!(
        "{name}: {} TCP/UDP conversations equal tshark's ({} records in all)",
        theirs.len(),
        recs.len()
    );
}

#[test]
fn records_equal_tshark_conversations_on_real_traces() {
    common::require("tshark");
    // Traces without tunnels or IP fragments, where both tools see the same headers.
    for rel in [
        "ndpi/pcap/1kxun.pcap",
        "ndpi/pcap/wechat.pcap",
        "ndpi/pcap/netflix.pcap",
        "retina/tls_ciphers.pcap",
    ] {
        compare(rel, &common::dataset(rel));
    }
}

/// The merged trace has tunnels (tshark counts the inner conversations too, catena the
/// outer headers only), fragments (tshark reassembles) and encapsulations catena does not
/// decode (PPPoE, MPLS). tshark itself writes the frames that carry exactly one IP header
/// and one TCP or UDP header directly over Ethernet/VLAN, unfragmented; both tools then
/// read that file. Captures merged into it share 5-tuples: both sides sum them alike.
#[test]
fn records_equal_tshark_conversations_on_the_merged_trace_without_tunnels() {
    common::require("tshark");
    let dir = common::tempdir();
    let plain: PathBuf = dir.path().join("plain.pcap");
    let filter =
        "frame.protocols matches \"^eth:ethertype:(vlan:ethertype:)*(ip|ipv6):(tcp|udp)(:|$)\" \
        and not (count(ip) > 1 or count(ipv6) > 1 or (ip and ipv6) or count(tcp) > 1 \
        or count(udp) > 1 or (tcp and udp) or icmp or icmpv6 or ip.flags.mf == 1 \
        or ip.frag_offset > 0 or ipv6.fragment)";
    let st = Command::new("tshark")
        .arg("-r")
        .arg(common::dataset("bench/ndpi-ether-merged.pcap"))
        .args(["-Y", filter, "-F", "pcap", "-w"])
        .arg(&plain)
        .output()
        .expect("tshark");
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let n = Trace::open(&plain).unwrap().len();
    assert!(n > 70_000, "only {n} frames kept");
    compare("merged trace, plain frames", &plain);
}

#[test]
fn csv_records_and_idle_expiry() {
    let dir = common::tempdir();
    let csv = dir.path().join("flows.csv");
    let trace = Trace::open(&common::dataset("ndpi/pcap/1kxun.pcap")).unwrap();
    let chain = format!(
        "[[nf]]\nname = \"mon\"\nkind = \"flow_monitor\"\nrecords = \"{}\"\ntimeout = 5\n",
        csv.display()
    );
    let s = common::run_chain(&chain, &trace, None);
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some(catena::nfs::FlowRecord::CSV_HEADER));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert!(rows.iter().all(|r| r.len() == 13));
    let idle = rows.iter().filter(|r| r[12] == "idle").count();
    assert!(idle > 0 && idle < rows.len(), "{idle} of {}", rows.len());
    // Every IP packet is in exactly one record.
    let pkts: u64 = rows
        .iter()
        .map(|r| r[5].parse::<u64>().unwrap() + r[7].parse::<u64>().unwrap())
        .sum();
    let stat = |k: &str| s.nfs[0].stats.iter().find(|(n, _)| n == k).unwrap().1;
    assert_eq!(pkts + stat("not_ip"), trace.len() as u64);
    for r in &rows {
        assert!(r[9].parse::<u64>().unwrap() <= r[10].parse::<u64>().unwrap());
    }
}

#[test]
fn bounded_table_counts_overflow_and_bad_params_are_errors() {
    let trace = Trace::open(&common::dataset("ndpi/pcap/1kxun.pcap")).unwrap();
    let s = common::run_chain(
        "[[nf]]\nname = \"mon\"\nkind = \"flow_monitor\"\ncapacity = 3\ntimeout = 0\n",
        &trace,
        None,
    );
    let stat = |k: &str| s.nfs[0].stats.iter().find(|(n, _)| n == k).unwrap().1;
    assert_eq!(stat("flows"), 0);
    assert_eq!(stat("exported"), 3);
    assert!(stat("overflow_packets") > 1000);
    assert_eq!(s.packets_out, trace.len() as u64);
    for (extra, msg) in [
        ("capacity = 0", "capacity"),
        ("timeout = \"x\"", "timeout"),
        ("records = 3", "records"),
        ("foo = 1", "unknown parameter"),
    ] {
        let text = format!("[[nf]]\nname = \"mon\"\nkind = \"flow_monitor\"\n{extra}\n");
        let cfg = catena::runtime::ChainConfig::parse(&text, "t.toml").unwrap();
        let e = catena::runtime::Chain::from_config(&cfg)
            .err()
            .expect("rejected")
            .to_string();
        assert!(e.contains(msg), "{extra}: {e}");
    }
}

/// The runner's profile check: the monitor writes nothing, and never drops.
#[test]
fn writes_nothing() {
    use catena::runtime::{Chain, ChainConfig, NoProgress, RunOptions, Runner};
    let trace = Trace::open(&common::dataset("bench/ndpi-ether-merged.pcap")).unwrap();
    let cfg =
        ChainConfig::parse("[[nf]]\nname = \"m\"\nkind = \"flow_monitor\"\n", "t.toml").unwrap();
    let mut r = Runner::new(Chain::from_config(&cfg).unwrap(), trace.max_packet_len());
    r.check_profiles(true);
    let s = r
        .run(&trace, &RunOptions::default(), &mut NoProgress)
        .expect("no writes");
    assert_eq!(s.packets_out, trace.len() as u64);
}

/// A records file that cannot be created stops the run before the first packet; one
/// whose writes fail later (a full disk) is reported in the summary's `output_errors`
/// (and `catena run` exits non-zero after the summary: tests/output_failures.rs).
#[test]
fn unwritable_records_fail_the_run() {
    use catena::runtime::{Chain, ChainConfig, NoProgress, RunOptions, Runner};
    let trace = Trace::open(&common::dataset("ndpi/pcap/1kxun.pcap")).unwrap();
    let chain = |records: &str| {
        let text =
            format!("[[nf]]\nname = \"m\"\nkind = \"flow_monitor\"\nrecords = \"{records}\"\n");
        let cfg = ChainConfig::parse(&text, "t.toml").unwrap();
        Runner::new(Chain::from_config(&cfg).unwrap(), trace.max_packet_len())
    };
    let e = chain("/nonexistent/dir/f.jsonl")
        .run(&trace, &RunOptions::default(), &mut NoProgress)
        .expect_err("refused");
    assert!(
        e.to_string()
            .starts_with("nf `m`: records `/nonexistent/dir/f.jsonl`: "),
        "{e}"
    );
    let s = chain("/dev/full")
        .run(&trace, &RunOptions::default(), &mut NoProgress)
        .unwrap();
    assert_eq!(s.packets_out, trace.len() as u64);
    assert_eq!(s.output_errors.len(), 1, "{:?}", s.output_errors);
    assert!(
        s.output_errors[0].contains("/dev/full"),
        "{:?}",
        s.output_errors
    );
}
