//! RSS-sharded workers (`workers = N`): on every capture in the datasets, N workers give
//! the same output bytes in the same order as one worker, the per-NF counters sum to the
//! same totals, and the flow records are the same set. The NAT, whose public ports
//! depend on which worker allocates them, is checked against an independent model:
//! every translation unique, consistent per flow, with valid checksums.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use catena::io::Trace;
use catena::runtime::{Chain, ChainConfig, NoProgress, RunOptions, Shards, Summary};

/// Runs `text` with `workers` workers; outputs to `out`.
fn run(text: &str, workers: usize, trace: &Trace, out: &Path) -> anyhow::Result<Summary> {
    let cfg = ChainConfig::parse(text, "t.toml")?;
    let chains = (0..workers)
        .map(|_| Chain::from_config(&cfg))
        .collect::<Result<Vec<_>, _>>()?;
    let opts = RunOptions {
        outputs: vec![("out".into(), out.to_path_buf())],
        ..Default::default()
    };
    Shards::new(chains, trace.max_packet_len())?.run(trace, &opts, &mut NoProgress)
}

/// What must match between runs: packets, and every NF's counters.
fn counts(s: &Summary) -> Vec<String> {
    let mut v = vec![format!(
        "in {} out {} dropped {} bytes {} {}",
        s.packets_in, s.packets_out, s.packets_dropped, s.bytes_in, s.bytes_out
    )];
    for n in &s.nfs {
        v.push(format!(
            "{} in {} out {} dropped {} drops {:?} outputs {:?}",
            n.name, n.packets_in, n.packets_out, n.packets_dropped, n.drops, n.outputs
        ));
    }
    for p in &s.ports {
        v.push(format!("port {} rx {} tx {}", p.port, p.rx, p.tx));
    }
    v
}

/// The flow records in `paths`, without why each was exported: a flow idle past the
/// timeout when its worker's input ends goes out as `final` there but may have gone out
/// as `idle` from one worker that saw later packets (the counts are the same).
fn lines(paths: &[std::path::PathBuf]) -> BTreeSet<String> {
    paths
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .flat_map(|t| {
            t.lines()
                .map(|l| {
                    l.replace(",\"end\":\"final\"", "")
                        .replace(",\"end\":\"idle\"", "")
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

fn chain(dir: &Path, fastpath: bool) -> String {
    format!(
        r#"
fastpath = {fastpath}
[input]
ports = 3
[[nf]]
name = "acl"
kind = "ip_filter"
default = "allow"
rules = ["deny udp dst port 53", "deny tcp dst port 23", "deny src net 10.0.0.0/8 and icmp"]
[[nf]]
name = "lb"
kind = "maglev"
vip = "192.168.2.110"
backends = [{{ addr = "10.1.0.1" }}, {{ addr = "10.1.0.2" }}, {{ addr = "10.1.0.3" }}]
table_size = 251
capacity = 200000
[[nf]]
name = "mon"
kind = "flow_monitor"
capacity = 200000
records = "{}"
"#,
        dir.join("flows.jsonl").display()
    )
}

#[test]
fn every_capture_gives_one_workers_output_with_two() {
    let dir = common::tempdir();
    let (one, two) = (dir.path().join("one.pcap"), dir.path().join("two.pcap"));
    let flows = dir.path().join("flows.jsonl");
    let parts = [
        dir.path().join("flows.w0.jsonl"),
        dir.path().join("flows.w1.jsonl"),
    ];
    let mut compared = 0;
    for cap in common::all_captures() {
        let Ok(trace) = Trace::open(&cap) else {
            continue;
        };
        for p in [&flows, &parts[0], &parts[1]] {
            let _ = std::fs::remove_file(p);
        }
        // One worker without FastPath against two with it: both switches at once.
        let a = run(&chain(dir.path(), false), 1, &trace, &one);
        let b = run(&chain(dir.path(), true), 2, &trace, &two);
        let (a, b) = match (a, b) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(x), Err(y)) => {
                assert_eq!(x.to_string(), y.to_string(), "{}", cap.display());
                continue;
            }
            (x, y) => panic!("{}: {:?} vs {:?}", cap.display(), x.err(), y.err()),
        };
        let name = cap.display();
        assert_eq!(counts(&a), counts(&b), "{name}");
        assert_eq!(b.workers.len(), 2, "{name}");
        assert_eq!(
            b.workers.iter().map(|w| w.packets_in).sum::<u64>(),
            a.packets_in,
            "{name}"
        );
        assert!(
            std::fs::read(&one).unwrap() == std::fs::read(&two).unwrap(),
            "{name}: outputs differ"
        );
        assert_eq!(
            lines(std::slice::from_ref(&flows)),
            lines(&parts),
            "{name}: flow records"
        );
        compared += 1;
    }
    assert!(compared > 1000, "only {compared} captures compared");
}

/// Workers viewing a mapped trace in place (`catena run` on a file, packets copied only
/// when an NF writes) give the copying workers' output, byte for byte, and their counts.
#[test]
fn workers_in_place_give_the_copying_workers_output() {
    let dir = common::tempdir();
    let (copy, view) = (dir.path().join("copy.pcap"), dir.path().join("view.pcap"));
    let mut caps: Vec<_> = common::all_captures().into_iter().step_by(7).collect();
    caps.push(common::dataset("bench/ndpi-ether-merged.pcap"));
    let mut compared = 0;
    for cap in caps {
        let Ok(trace) = Trace::open(&cap) else {
            continue;
        };
        let a = run(&chain(dir.path(), false), 2, &trace, &copy);
        // Lasts the test process, as `catena run` makes it last its own.
        let trace: &'static Trace = Box::leak(Box::new(trace));
        let cfg = ChainConfig::parse(&chain(dir.path(), false), "t.toml").unwrap();
        let chains = (0..2).map(|_| Chain::from_config(&cfg).unwrap()).collect();
        let opts = RunOptions {
            outputs: vec![("out".into(), view.clone())],
            ..Default::default()
        };
        let b = Shards::new(chains, trace.max_packet_len())
            .and_then(|s| s.run_in_place(trace, &opts, &mut NoProgress));
        let name = cap.display();
        match (a, b) {
            (Ok(a), Ok(b)) => {
                assert_eq!(counts(&a), counts(&b), "{name}");
                assert!(
                    std::fs::read(&copy).unwrap() == std::fs::read(&view).unwrap(),
                    "{name}: outputs differ"
                );
                compared += 1;
            }
            (Err(x), Err(y)) => assert_eq!(x.to_string(), y.to_string(), "{name}"),
            (x, y) => panic!("{name}: {:?} vs {:?}", x.err(), y.err()),
        }
    }
    assert!(compared > 100, "only {compared} captures compared");
}

#[test]
fn scheduled_changes_apply_between_the_same_packets_in_every_worker() {
    let trace = Trace::open(&common::dataset("bench/ndpi-ether-merged.pcap")).unwrap();
    let dir = common::tempdir();
    let text = chain(dir.path(), true);
    let cfg = ChainConfig::parse(&text, "t.toml").unwrap();
    let opts = |out: &Path| RunOptions {
        outputs: vec![("out".into(), out.to_path_buf())],
        schedule: vec![
            "20000 acl rules deny tcp port 443".parse().unwrap(),
            "50000 lb backends 10.1.0.1 10.1.0.3:2".parse().unwrap(),
            "70000 acl rules deny udp dst port 53".parse().unwrap(),
        ],
        ..Default::default()
    };
    let mut sums = Vec::new();
    for (w, out) in [
        (1, dir.path().join("a.pcap")),
        (2, dir.path().join("b.pcap")),
    ] {
        let chains = (0..w).map(|_| Chain::from_config(&cfg).unwrap()).collect();
        let s = Shards::new(chains, trace.max_packet_len())
            .unwrap()
            .run(&trace, &opts(&out), &mut NoProgress)
            .unwrap();
        sums.push((counts(&s), std::fs::read(&out).unwrap()));
    }
    assert_eq!(sums[0].0, sums[1].0);
    assert!(sums[0].1 == sums[1].1, "outputs differ");
}

/// The NAT model: a translated flow is the original packet with only the source address
/// and port and checksums changed. Across workers no two inside flows may share a public
/// (address, port, protocol) (the pool is large enough here that no pair is reused), and
/// checksums right on the way in are right on the way out (computed from scratch by
/// etherparse).
/// An inside flow: source address, port, protocol, destination (address and port).
type Inside = ([u8; 4], u16, u8, Vec<u8>);
/// Who holds a public pair: source address, port, destination.
type Owner = ([u8; 4], u16, Vec<u8>);

#[test]
fn nat_translations_are_unique_across_workers() {
    let trace = Trace::open(&common::dataset("bench/ndpi-ether-merged.pcap")).unwrap();
    let dir = common::tempdir();
    let out = dir.path().join("nat.pcap");
    let text = r#"
[[nf]]
name = "nat"
kind = "nat"
inside = "192.168.0.0/16, 172.16.0.0/12, 10.0.0.0/8"
public = "198.51.100.1, 198.51.100.2"
tcp_timeout = 100000000
udp_timeout = 100000000
icmp_timeout = 100000000
"#;
    let s = run(text, 2, &trace, &out).unwrap();
    let nat = &s.nfs[0];
    let created = nat.stats.iter().find(|(k, _)| k == "created").unwrap().1;
    assert!(created > 1000, "{created} mappings");
    let outp = Trace::open(&out).unwrap();
    // Align outputs with inputs: the NAT drops little here, and what it passes keeps
    // everything but the source tuple and checksums.
    let key = |b: &[u8]| -> Option<(Vec<u8>, [u8; 4], u16, u8)> {
        let e = etherparse::SlicedPacket::from_ethernet(b).ok()?;
        let Some(etherparse::NetSlice::Ipv4(ip)) = &e.net else {
            return None;
        };
        let h = ip.header();
        let (sport, dport, proto, payload) = match &e.transport {
            Some(etherparse::TransportSlice::Tcp(t)) => {
                (t.source_port(), t.destination_port(), 6, t.payload())
            }
            Some(etherparse::TransportSlice::Udp(u)) => {
                (u.source_port(), u.destination_port(), 17, u.payload())
            }
            _ => return None,
        };
        // What the NAT must not change: destination, id, length, payload.
        let mut same = h.destination().to_vec();
        same.extend(dport.to_be_bytes());
        same.extend(h.identification().to_be_bytes());
        same.extend(h.total_len().to_be_bytes());
        same.extend(payload);
        Some((same, h.source(), sport, proto))
    };
    let mut public_of: BTreeMap<Inside, ([u8; 4], u16)> = BTreeMap::new();
    let mut owner: BTreeMap<([u8; 4], u16, u8), Owner> = BTreeMap::new();
    let mut i = 0;
    let mut checked = 0;
    for j in 0..outp.len() {
        let ob = outp.packet(j);
        let Some((same, psrc, pport, proto)) = key(ob) else {
            continue;
        };
        // The input this output came from: the next one with the same fixed fields.
        let (isrc, iport, idst, good) = loop {
            assert!(i < trace.len(), "output {j} has no input");
            let ib = trace.packet(i);
            i += 1;
            if let Some((s2, src, port, p2)) = key(ib) {
                if s2 == same && p2 == proto {
                    break (src, port, s2[..4].to_vec(), sums_ok(ib));
                }
            }
        };
        // Checksums right on the way in stay right (captures with offloading carry
        // wrong ones, which an incremental update rightly keeps wrong).
        assert!(!good.0 || sums_ok(ob).0, "output {j}: ip checksum");
        assert!(!good.1 || sums_ok(ob).1, "output {j}: tcp/udp checksum");
        if psrc == isrc && pport == iport {
            // Not translated (inside to inside, or outside in): passed as it came.
            continue;
        }
        assert!(
            psrc == [198, 51, 100, 1] || psrc == [198, 51, 100, 2],
            "output {j}: source {psrc:?} is not public"
        );
        let inside = (isrc, iport, proto, idst.clone());
        let public = (psrc, pport);
        // A flow may get a new pair when its mapping ended (the merged trace jumps in
        // time); what must never happen is one pair for two flows, checked below.
        public_of.insert(inside, public);
        let o = owner
            .entry((psrc, pport, proto))
            .or_insert((isrc, iport, idst.clone()));
        assert_eq!(
            *o,
            (isrc, iport, idst),
            "public {psrc:?}:{pport}/{proto} given to two inside flows"
        );
        checked += 1;
    }
    assert!(
        checked > 10_000,
        "only {checked} translated packets checked"
    );
    assert!(
        public_of.len() > 1000,
        "only {} inside flows translated",
        public_of.len()
    );
}

/// Whether the IPv4 header checksum, and the TCP/UDP checksum when the whole segment is
/// held, are right (computed from scratch by etherparse); a missing segment counts as right.
fn sums_ok(b: &[u8]) -> (bool, bool) {
    let Ok(e) = etherparse::SlicedPacket::from_ethernet(b) else {
        return (false, false);
    };
    let Some(etherparse::NetSlice::Ipv4(ip)) = &e.net else {
        return (false, false);
    };
    let h = ip.header().to_header();
    let whole = ip.payload().len_source == etherparse::LenSource::Ipv4HeaderTotalLen
        && b.len() >= 14 + h.total_len as usize
        && !ip.is_payload_fragmented();
    let l4 = match &e.transport {
        Some(etherparse::TransportSlice::Tcp(t)) if whole => {
            let th = t.to_header();
            th.calc_checksum_ipv4(&h, t.payload()).ok() == Some(th.checksum)
        }
        Some(etherparse::TransportSlice::Udp(u)) if whole && u.checksum() != 0 => {
            let uh = u.to_header();
            uh.calc_checksum_ipv4(&h, u.payload()).ok() == Some(uh.checksum)
        }
        _ => true,
    };
    (h.calc_header_checksum() == h.header_checksum, l4)
}

#[test]
fn a_global_state_nf_is_refused_by_name() {
    let text = "[[nf]]\nname = \"sw\"\nkind = \"mac_switch\"\n";
    let cfg = ChainConfig::parse(&format!("workers = 2\n{text}"), "t.toml").unwrap();
    let e = Chain::from_config(&cfg).err().unwrap().to_string();
    assert_eq!(
        e,
        "t.toml: `workers = 2`: NF `sw` (mac_switch) cannot be sharded: it learns MAC -> port from every flow; use workers = 1"
    );
    let cfg = ChainConfig::parse(text, "t.toml").unwrap();
    let chains = (0..2).map(|_| Chain::from_config(&cfg).unwrap()).collect();
    let e = Shards::new(chains, 1514).err().unwrap().to_string();
    assert!(
        e.starts_with("NF `sw` (mac_switch) cannot be sharded"),
        "{e}"
    );
}

#[test]
fn check_prints_the_sharded_plan_and_refuses_unbuilt_modes() {
    let cfg = ChainConfig::parse(
        "workers = 2\n[[nf]]\nname = \"acl\"\nkind = \"ip_filter\"\n[[nf]]\nname = \"nat\"\nkind = \"nat\"\ninside = \"10.0.0.0/8\"\npublic = \"198.51.100.1\"\n",
        "t.toml",
    )
    .unwrap();
    let d = Chain::from_config(&cfg).unwrap().describe();
    assert!(
        d.contains("  acl          none\n  nat          per flow: shards\n"),
        "{d}"
    );
    assert!(
        d.contains("plan: 2 workers sharded by a symmetric hash of the IP (else MAC) addresses, each run to completion, batches of 32: in → acl → nat → out; outputs merged back into input order"),
        "{d}"
    );
    let cfg = ChainConfig::parse(
        "parallel = true\n[[nf]]\nname = \"acl\"\nkind = \"wire\"\n",
        "t.toml",
    )
    .unwrap();
    let e = Chain::from_config(&cfg).err().unwrap().to_string();
    assert!(e.contains("fewer than two NFs"), "{e}");
}

/// A mapped file replayed by workers that each walk all of it (`Shards::run_stream`,
/// what `catena run --workers N` does with a pcap file) gives one worker's output
/// bytes, counters (per port too: the draw) and flow records, over two loops; on the
/// merged trace also with scheduled changes.
#[test]
fn streamed_workers_give_one_workers_output() {
    use catena::io::{MappedPcap, Source};
    let dir = common::tempdir();
    let flows = dir.path().join("flows.jsonl");
    let parts = [
        dir.path().join("flows.w0.jsonl"),
        dir.path().join("flows.w1.jsonl"),
    ];
    let merged = common::dataset("bench/ndpi-ether-merged.pcap");
    let mut caps: Vec<_> = common::all_captures().into_iter().step_by(5).collect();
    caps.push(merged.clone());
    let text = chain(dir.path(), true);
    let cfg = ChainConfig::parse(&text, "t.toml").unwrap();
    let mut compared = 0;
    for cap in caps {
        let Ok(m) = MappedPcap::open(&cap) else {
            continue;
        };
        let name = cap.display();
        let mut got = Vec::new();
        for w in [1, 2] {
            for p in [&flows, &parts[0], &parts[1]] {
                let _ = std::fs::remove_file(p);
            }
            let out = dir.path().join(format!("w{w}.pcap"));
            let mut opts = RunOptions {
                loops: 2,
                outputs: vec![("out".into(), out.clone())],
                ..Default::default()
            };
            if cap == merged {
                opts.schedule = vec![
                    "20000 acl rules deny tcp port 443".parse().unwrap(),
                    "130000 lb backends 10.1.0.1 10.1.0.3:2".parse().unwrap(),
                ];
            }
            let chains = (0..w).map(|_| Chain::from_config(&cfg).unwrap()).collect();
            let s = Shards::new(chains, m.max_packet_len())
                .and_then(|s| s.run_stream(&m, &opts, &mut NoProgress));
            let recs = if w == 1 {
                lines(std::slice::from_ref(&flows))
            } else {
                lines(&parts)
            };
            got.push(s.map(|s| (counts(&s), std::fs::read(&out).unwrap_or_default(), recs)));
        }
        match (&got[0], &got[1]) {
            (Ok(a), Ok(b)) => {
                assert_eq!(a.0, b.0, "{name}");
                assert!(a.1 == b.1, "{name}: outputs differ");
                assert_eq!(a.2, b.2, "{name}: flow records");
                compared += 1;
            }
            (Err(x), Err(y)) => assert_eq!(x.to_string(), y.to_string(), "{name}"),
            (x, y) => panic!("{name}: {:?} vs {:?}", x.as_ref().err(), y.as_ref().err()),
        }
    }
    assert!(compared > 100, "only {compared} captures compared");
}

/// The documented port draw, written here apart from catena's: the record at input
/// position `seq` (counted over every replay loop) arrives on the high half of
/// splitmix64's output `seq + 1` from state `seed`, times `ports`, shifted right by 32.
fn reference_port(seed: u64, seq: u64, ports: u64) -> usize {
    let mut z = seed.wrapping_add(seq.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (((z >> 32) * ports) >> 32) as usize
}

/// Every sharded path draws a record's ingress port from its position alone, as one
/// worker does: per-port counts of 1 to 3 workers copying (small packets through the
/// workers' queues, the merged trace's in place), viewing in place and streaming, over
/// 2 loops, against the reference above.
#[test]
fn every_path_draws_a_records_port_from_its_position() {
    use catena::io::gen::{generate, GenOptions, Profile};
    use catena::io::{MappedPcap, Source};
    let (seed, ports) = (7u64, 3u64);
    let text = format!(
        "[input]\nports = {ports}\nseed = {seed}\n[[nf]]\nname = \"acl\"\nkind = \"ip_filter\"\ndefault = \"allow\"\nrules = []\n"
    );
    let cfg = ChainConfig::parse(&text, "t.toml").unwrap();
    let chains = |n: usize| (0..n).map(|_| Chain::from_config(&cfg).unwrap()).collect();
    let opts = RunOptions {
        loops: 2,
        ..Default::default()
    };
    let rx = |s: Summary| s.ports.iter().map(|p| p.rx).collect::<Vec<_>>();
    let want = |records: usize| {
        let mut c = vec![0u64; ports as usize];
        for i in 0..2 * records as u64 {
            c[reference_port(seed, i, ports)] += 1;
        }
        c
    };
    let small = generate(&GenOptions {
        count: 20_000,
        ..GenOptions::profile(Profile::FourSics)
    })
    .unwrap();
    let merged_path = common::dataset("bench/ndpi-ether-merged.pcap");
    let merged = Trace::open(&merged_path).unwrap();
    for (name, trace) in [("4sics", &small), ("merged", &merged)] {
        let w = want(trace.len());
        for n in 1..=3 {
            let s = Shards::new(chains(n), trace.max_packet_len())
                .and_then(|s| s.run(trace, &opts, &mut NoProgress))
                .unwrap();
            assert_eq!(rx(s), w, "{name}, {n} worker(s) copying");
        }
    }
    let lasting: &'static Trace = Box::leak(Box::new(Trace::open(&merged_path).unwrap()));
    let s = Shards::new(chains(2), lasting.max_packet_len())
        .and_then(|s| s.run_in_place(lasting, &opts, &mut NoProgress))
        .unwrap();
    assert_eq!(rx(s), want(merged.len()), "merged, 2 workers in place");
    let m = MappedPcap::open(&merged_path).unwrap();
    let s = Shards::new(chains(2), m.max_packet_len())
        .and_then(|s| s.run_stream(&m, &opts, &mut NoProgress))
        .unwrap();
    assert_eq!(rx(s), want(merged.len()), "merged, 2 workers streaming");
}

/// Issue 21's limits from the command line: more workers than the cores the run may use
/// is a warning (the workers then share cores, unpinned) and the run goes on; a count
/// out of 1..=64 is refused in one line, exit status non-zero.
#[test]
fn more_workers_than_cores_warn_and_counts_out_of_range_are_refused() {
    if std::process::Command::new("taskset")
        .arg("-V")
        .output()
        .is_err()
    {
        eprintln!("skipped: no taskset");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let chain = d.path().join("c.toml");
    std::fs::write(&chain, "[[nf]]\nname = \"w\"\nkind = \"wire\"\n").unwrap();
    let pcap = common::dataset("bench/ndpi-ether-merged.pcap");
    let (chain, pcap) = (chain.to_str().unwrap(), pcap.to_str().unwrap());
    // One core allowed, two workers.
    let o = std::process::Command::new("taskset")
        .args(["-c", "0", env!("CARGO_BIN_EXE_catena"), "run", chain])
        .args(["-i", pcap, "--workers", "2", "--json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("warning: 2 workers on 1 cores: workers share cores (not pinned)"),
        "{err}"
    );
    for n in [0, 65] {
        // The flag (clap's own message) and the chain file's key (one line).
        let o = common::catena(&["run", chain, "-i", pcap, "--workers", &n.to_string()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "--workers {n}: {err}");
        assert!(
            err.contains(&format!("{n} is not in 1..=64")),
            "--workers {n}: {err}"
        );
        let file = d.path().join(format!("w{n}.toml"));
        let text = format!("workers = {n}\n[[nf]]\nname = \"w\"\nkind = \"wire\"\n");
        std::fs::write(&file, text).unwrap();
        let o = common::catena(&["run", file.to_str().unwrap(), "-i", pcap]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "workers = {n}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "workers = {n}: {err}");
        assert!(
            err.contains(&format!("`workers` must be 1 to 64, not {n}")),
            "workers = {n}: {err}"
        );
    }
}
