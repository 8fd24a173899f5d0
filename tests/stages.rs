//! microNF stages on rings (`stages = [[...], [...]]`) and pipelined prefetching
//! (`prefetch = k`): on every capture in the datasets and on generated traces, the output
//! is byte-identical to one stage without prefetching, the per-NF counters are equal and
//! the flow records are the same; changes scheduled mid-replay land between the same
//! packets; stages compose with sharded workers; bad plans are refused in one line.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use catena::io::gen::{generate, GenOptions, Profile};
use catena::io::Trace;
use catena::runtime::{Chain, ChainConfig, NoProgress, RunOptions, Shards, Summary};

/// What must match between runs: packets, and every NF's counters and own stats.
fn counts(s: &Summary) -> Vec<String> {
    let mut v = vec![format!(
        "in {} out {} dropped {} bytes {} {} input drops {:?}",
        s.packets_in, s.packets_out, s.packets_dropped, s.bytes_in, s.bytes_out, s.input_drops
    )];
    for n in &s.nfs {
        v.push(format!(
            "{} in {} out {} dropped {} drops {:?} outputs {:?} stats {:?}",
            n.name, n.packets_in, n.packets_out, n.packets_dropped, n.drops, n.outputs, n.stats
        ));
    }
    for p in &s.ports {
        v.push(format!("port {} rx {} tx {}", p.port, p.rx, p.tx));
    }
    for k in &s.sinks {
        v.push(format!("sink {} {} {}", k.name, k.packets, k.bytes));
    }
    v
}

/// A name per head, so each run writes its own records file.
fn tag(head: &str) -> u64 {
    head.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The mixed chain: filter → NAT → Maglev → monitor.
fn chain(dir: &Path, head: &str) -> String {
    format!(
        r#"
{head}
[input]
ports = 3
[[nf]]
name = "acl"
kind = "ip_filter"
default = "allow"
rules = ["deny udp dst port 53", "deny tcp dst port 23", "deny src net 10.0.0.0/8 and icmp"]
[[nf]]
name = "nat"
kind = "nat"
inside = "192.168.0.0/16, 172.16.0.0/12"
public = "198.51.100.1, 198.51.100.2"
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
        dir.join(format!("flows-{}.jsonl", tag(head))).display(),
    )
}

fn run(text: &str, workers: usize, trace: &Trace, out: &Path, opts: RunOptions) -> Summary {
    let cfg = ChainConfig::parse(text, "t.toml").expect("config");
    let chains = (0..workers)
        .map(|_| Chain::from_config(&cfg))
        .collect::<Result<Vec<_>, _>>()
        .expect("chain");
    let opts = RunOptions {
        outputs: vec![("out".into(), out.to_path_buf())],
        ..opts
    };
    Shards::new(chains, trace.max_packet_len())
        .expect("shards")
        .run(trace, &opts, &mut NoProgress)
        .expect("run")
}

/// The outputs and records a run leaves in `dir` for the chain with header `head`.
fn files(dir: &Path, head: &str, out: &Path) -> (Vec<u8>, BTreeSet<String>) {
    let rec = dir.join(format!("flows-{}.jsonl", tag(head)));
    let r = std::fs::read_to_string(&rec).unwrap_or_default();
    let _ = std::fs::remove_file(&rec);
    (
        std::fs::read(out).unwrap(),
        r.lines().map(str::to_string).collect(),
    )
}

/// The heads compared against one stage without prefetch.
const ONE: &str = "";
const MODES: &[&str] = &[
    "stages = [[\"acl\", \"nat\"], [\"lb\", \"mon\"]]",
    "stages = [[\"acl\"], [\"nat\"], [\"lb\"], [\"mon\"]]\nring = 32",
    "prefetch = 8",
    "stages = [[\"acl\"], [\"nat\", \"lb\", \"mon\"]]\nprefetch = 16",
];

fn compare(trace: &Trace, name: &str, dir: &Path, modes: &[&str]) {
    let out = dir.join("one.pcap");
    let a = run(&chain(dir, ONE), 1, trace, &out, RunOptions::default());
    let fa = files(dir, ONE, &out);
    for m in modes {
        let out = dir.join("many.pcap");
        let b = run(&chain(dir, m), 1, trace, &out, RunOptions::default());
        assert_eq!(counts(&a), counts(&b), "{name}: {m}");
        let fb = files(dir, m, &out);
        assert!(fa.0 == fb.0, "{name}: {m}: outputs differ");
        assert_eq!(fa.1, fb.1, "{name}: {m}: flow records");
    }
}

#[test]
fn every_capture_gives_one_stages_output_with_many() {
    let dir = common::tempdir();
    let mut compared = 0;
    for cap in common::all_captures() {
        let Ok(trace) = Trace::open(&cap) else {
            continue;
        };
        // The many-stage modes alternate so the whole set stays fast.
        compare(
            &trace,
            &cap.display().to_string(),
            dir.path(),
            &MODES[compared % MODES.len()..compared % MODES.len() + 1],
        );
        compared += 1;
    }
    assert!(compared > 1000, "only {compared} captures compared");
}

#[test]
fn generated_traces_and_the_merged_trace_give_the_same_output() {
    let dir = common::tempdir();
    let trace = generate(&GenOptions::profile(Profile::SmallFlows)).unwrap();
    compare(&trace, "smallflows", dir.path(), MODES);
    let trace = Trace::open(&common::dataset("bench/ndpi-ether-merged.pcap")).unwrap();
    compare(&trace, "merged", dir.path(), MODES);
}

#[test]
fn stages_compose_with_workers_and_changes_land_between_the_same_packets() {
    let trace = Trace::open(&common::dataset("bench/ndpi-ether-merged.pcap")).unwrap();
    let dir = common::tempdir();
    let opts = || RunOptions {
        schedule: vec![
            "20000 acl rules deny tcp port 443".parse().unwrap(),
            "50000 lb backends 10.1.0.1 10.1.0.3:2".parse().unwrap(),
            "70000 acl rules deny udp dst port 53".parse().unwrap(),
        ],
        ..Default::default()
    };
    let one = dir.path().join("one.pcap");
    let a = run(&chain(dir.path(), ONE), 1, &trace, &one, opts());
    let fa = files(dir.path(), ONE, &one);
    for (workers, m) in [(1, MODES[1]), (2, MODES[0])] {
        let out = dir.path().join("many.pcap");
        let b = run(&chain(dir.path(), m), workers, &trace, &out, opts());
        if workers == 1 {
            assert_eq!(counts(&a), counts(&b), "{m}");
            let fb = files(dir.path(), m, &out);
            assert!(fa.0 == fb.0, "{m}: outputs differ");
            assert_eq!(fa.1, fb.1, "{m}: flow records");
        } else {
            // Sharded: the counters sum to one worker's (the per-worker NAT pools make
            // public ports differ, which shard.rs checks against its own model; NF
            // stats such as rule counts are summed per worker, so they are left out).
            let strip = |v: Vec<String>| -> Vec<String> {
                v.into_iter()
                    .filter(|l| !l.starts_with("nat "))
                    .map(|l| l.split(" stats ").next().unwrap_or("").to_string())
                    .collect()
            };
            assert_eq!(
                strip(counts(&a)),
                strip(counts(&b)),
                "{workers} workers: {m}"
            );
            assert_eq!(b.workers.len(), 2);
        }
    }
}

#[test]
fn bad_plans_are_refused_in_one_line() {
    let dir = common::tempdir();
    let base = chain(dir.path(), ONE);
    let err = |head: &str| {
        let cfg = ChainConfig::parse(&format!("{head}\n{base}"), "t.toml").unwrap();
        Chain::from_config(&cfg).err().map(|e| e.to_string())
    };
    assert_eq!(
        err("stages = [[\"acl\", \"nat\"], [\"lb\", \"mon\"]]\nring = 16").as_deref(),
        Some("t.toml: `ring` = 16 packets: a ring holds 32 (a batch) to 1048576 packets")
    );
    assert_eq!(
        err("stages = [[\"acl\", \"nat\"], [\"lb\"]]").as_deref(),
        Some("t.toml: `stages`: NF `mon` is in no stage: add it to one of `stages`")
    );
    assert_eq!(
        err("stages = [[\"acl\", \"nat\"], [\"lb\", \"fw\", \"mon\"]]").as_deref(),
        Some("t.toml: `stages`: stage 2: no NF named `fw`")
    );
    assert_eq!(
        err("stages = [[\"acl\", \"nat\"], [\"lb\", \"mon\", \"nat\"]]").as_deref(),
        Some("t.toml: `stages`: `nat` is in stage 1 and stage 2: give each NF one stage")
    );
    assert_eq!(
        err("stages = [[\"acl\", \"lb\"], [\"nat\", \"mon\"]]").as_deref(),
        Some("t.toml: `stages`: stages must follow the walk order (acl → nat → lb → mon): `lb` (stage 1) comes after `nat` (stage 2)")
    );
    assert_eq!(
        err("stages = [[\"acl\", \"nat\"], []]").as_deref(),
        Some("t.toml: `stages`: stage 2 is empty: list the NFs it runs")
    );
    assert_eq!(
        err("stages = [[\"acl\", \"nat\"], [\"lb\", \"mon\"]]\nfastpath = true").as_deref(),
        Some("t.toml: `fastpath = true`: FastPath and stages do not combine yet: use one of them")
    );
    assert_eq!(
        err("prefetch = 33").as_deref(),
        Some("t.toml: `prefetch` = 33: at most 32 (a batch is 32 packets); 0 is off")
    );
    assert_eq!(
        err("parallel = true").as_deref(),
        Some("t.toml: `parallel = true`: no two consecutive NFs can run in parallel (`acl` ∥ `nat`: cannot: `nat` writes ip.src,ip.dst,l4.src,l4.dst,icmp which `acl` reads)")
    );
    // One stage is the plain run.
    assert_eq!(err("stages = [[\"acl\", \"nat\", \"lb\", \"mon\"]]"), None);
}

#[test]
fn check_prints_stages_rings_parallel_candidates_and_prefetch() {
    let dir = common::tempdir();
    let text = chain(
        dir.path(),
        "workers = 2\nstages = [[\"acl\", \"nat\"], [\"lb\", \"mon\"]]\nring = 256\nprefetch = 8",
    );
    let cfg = ChainConfig::parse(&text, "t.toml").unwrap();
    let d = Chain::from_config(&cfg).unwrap().describe();
    for want in [
        "  stages: 2 threads per worker (4 in all), joined by SPSC rings of 256 packets (references; buffers return to stage 1's pool): stage 1 [acl, nat] =ring(256)=> stage 2 [lb, mon, out]\n",
        "    acl ∥ nat: cannot: `nat` writes ip.src,ip.dst,l4.src,l4.dst,icmp which `acl` reads\n",
        "    lb ∥ mon: cannot: `lb` writes ip.dst which `mon` reads or writes\n",
        "  prefetch: 8 packets ahead at ingest (the first cache line of each packet's bytes)\n",
    ] {
        assert!(d.contains(want), "missing {want:?} in\n{d}");
    }
}

#[test]
fn the_memory_bound_counts_what_the_rings_and_stage_pools_hold() {
    let text = |head: &str| {
        format!("{head}\n[[nf]]\nname = \"a\"\nkind = \"wire\"\n[[nf]]\nname = \"b\"\nkind = \"busy\"\n")
    };
    let mem = |head: &str| {
        let cfg = ChainConfig::parse(&text(head), "t.toml").unwrap();
        Chain::from_config(&cfg).unwrap().memory(1514).buffers
    };
    let one = mem("");
    let two = mem("stages = [[\"a\"], [\"b\"]]");
    let huge = mem("stages = [[\"a\"], [\"b\"]]\nring = 1048576");
    // 128 buffers for one stage; 128 + 1026 + 64 with a 1024-packet ring; about a
    // million more with the largest ring (2 KiB each).
    assert!(two > one * 8, "{one} vs {two}");
    assert!(huge > 2 << 30, "{huge}");
}
