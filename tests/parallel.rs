//! Parallel NFs (`parallel = true`): on every capture in the datasets and on generated
//! traces, the output is byte-identical to the same chain in sequence, the per-NF
//! counters (and NFs' own stats) are equal and the flow records are the same, with drops
//! in either branch of a group and with the writing NF on either side; parallel composes
//! with stages and workers; bad asks are refused in one line; `check` prints the groups.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use catena::io::gen::{generate, GenOptions, Profile};
use catena::io::Trace;
use catena::runtime::{Chain, ChainConfig, NoProgress, RunOptions, Shards, Summary};

fn counts(s: &Summary) -> Vec<String> {
    let mut v = vec![format!(
        "in {} out {} dropped {} bytes {} {}",
        s.packets_in, s.packets_out, s.packets_dropped, s.bytes_in, s.bytes_out
    )];
    for n in &s.nfs {
        v.push(format!(
            "{} in {} out {} dropped {} drops {:?} outputs {:?} stats {:?}",
            n.name, n.packets_in, n.packets_out, n.packets_dropped, n.drops, n.outputs, n.stats
        ));
    }
    v
}

const ACL: &str = r#"
[[nf]]
name = "acl"
kind = "ip_filter"
default = "allow"
rules = ["deny udp dst port 53", "deny tcp dst port 443", "deny src net 10.0.0.0/8 and icmp"]
"#;
const NAT: &str = r#"
[[nf]]
name = "nat"
kind = "nat"
inside = "192.168.0.0/16, 172.16.0.0/12, 10.0.0.0/8"
public = "198.51.100.1, 198.51.100.2"
"#;

fn busy(name: &str, field: &str) -> String {
    format!("[[nf]]\nname = \"{name}\"\nkind = \"busy\"\ncycles = 0\nreads = [\"{field}\"]\n")
}

fn mon(records: &Path) -> String {
    format!(
        "[[nf]]\nname = \"mon\"\nkind = \"flow_monitor\"\ncapacity = 100000\nrecords = \"{}\"\n",
        records.display()
    )
}

/// Chain 1: b0 ∥ acl (the second branch drops), b1 ∥ nat (the first branch reads, the
/// second writes in place), b2 ∥ mon (per-flow state and records on the helper).
fn chain1(dir: &Path, head: &str) -> String {
    format!(
        "{head}\n{}{ACL}{}{NAT}{}{}",
        busy("b0", "eth.src"),
        busy("b1", "ip.ttl"),
        busy("b2", "eth.dst"),
        mon(&dir.join(format!("rec1-{}.jsonl", head.len())))
    )
}

/// Chain 2: acl ∥ b1 (the first branch drops, the second is stateless), then nat and
/// mon in sequence (nat writes what mon reads).
fn chain2(dir: &Path, head: &str) -> String {
    format!(
        "{head}\n{ACL}{}{NAT}{}",
        busy("b1", "l4.dst"),
        mon(&dir.join(format!("rec2-{}.jsonl", head.len())))
    )
}

fn run(text: &str, workers: usize, trace: &Trace, out: &Path) -> Summary {
    let cfg = ChainConfig::parse(text, "t.toml").expect("config");
    let chains = (0..workers)
        .map(|_| Chain::from_config(&cfg))
        .collect::<Result<Vec<_>, _>>()
        .expect("chain");
    let opts = RunOptions {
        outputs: vec![("out".into(), out.to_path_buf())],
        ..Default::default()
    };
    Shards::new(chains, trace.max_packet_len())
        .expect("shards")
        .run(trace, &opts, &mut NoProgress)
        .expect("run")
}

fn records(dir: &Path) -> BTreeSet<String> {
    let mut set = BTreeSet::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "jsonl") {
            let text = std::fs::read_to_string(&p).unwrap();
            set.extend(text.lines().map(str::to_string));
            std::fs::remove_file(&p).unwrap();
        }
    }
    set
}

/// Runs `make` in sequence and with `head`, comparing everything.
fn compare(trace: &Trace, name: &str, dir: &Path, make: fn(&Path, &str) -> String, head: &str) {
    let seq = dir.join("seq.pcap");
    let a = run(&make(dir, ""), 1, trace, &seq);
    let ra = records(dir);
    let par = dir.join("par.pcap");
    let b = run(&make(dir, head), 1, trace, &par);
    let rb = records(dir);
    assert_eq!(counts(&a), counts(&b), "{name}: {head}");
    assert!(
        std::fs::read(&seq).unwrap() == std::fs::read(&par).unwrap(),
        "{name}: {head}: outputs differ"
    );
    assert_eq!(ra, rb, "{name}: {head}: flow records");
}

#[test]
fn every_capture_gives_the_sequential_output_in_parallel() {
    let dir = common::tempdir();
    let mut compared = 0;
    let mut dropped = [0u64; 2];
    for cap in common::all_captures() {
        let Ok(trace) = Trace::open(&cap) else {
            continue;
        };
        let name = cap.display().to_string();
        if compared % 2 == 0 {
            compare(&trace, &name, dir.path(), chain1, "parallel = true");
        } else {
            compare(&trace, &name, dir.path(), chain2, "parallel = true");
        }
        compared += 1;
        if compared % 50 == 0 {
            // Both chains' drops are really exercised somewhere.
            let s = run(
                &chain2(dir.path(), "parallel = true"),
                1,
                &trace,
                &dir.path().join("x.pcap"),
            );
            dropped[0] += s.nfs[0].packets_dropped;
            let s = run(
                &chain1(dir.path(), "parallel = true"),
                1,
                &trace,
                &dir.path().join("x.pcap"),
            );
            dropped[1] += s.nfs[1].packets_dropped;
            records(dir.path());
        }
    }
    assert!(compared > 1000, "only {compared} captures compared");
    assert!(dropped[0] > 0 && dropped[1] > 0, "{dropped:?}");
}

#[test]
fn generated_and_merged_traces_with_stages_and_workers() {
    let dir = common::tempdir();
    let small = generate(&GenOptions::profile(Profile::SmallFlows)).unwrap();
    let merged = Trace::open(&common::dataset("bench/ndpi-ether-merged.pcap")).unwrap();
    for (name, t) in [("smallflows", &small), ("merged", &merged)] {
        compare(t, name, dir.path(), chain1, "parallel = true");
        compare(t, name, dir.path(), chain2, "parallel = true");
        compare(
            t,
            name,
            dir.path(),
            chain1,
            "parallel = true\nstages = [[\"b0\", \"acl\", \"b1\"], [\"nat\", \"b2\", \"mon\"]]\nring = 64",
        );
    }
    // Two workers, in parallel or not: the same sums (NAT stats per worker differ).
    let strip = |v: Vec<String>| -> Vec<String> {
        v.into_iter()
            .filter(|l| !l.starts_with("nat "))
            .map(|l| l.split(" stats ").next().unwrap_or("").to_string())
            .collect()
    };
    let a = run(
        &chain2(dir.path(), "workers = 2"),
        2,
        &merged,
        &dir.path().join("a.pcap"),
    );
    let b = run(
        &chain2(dir.path(), "workers = 2\nparallel = true"),
        2,
        &merged,
        &dir.path().join("b.pcap"),
    );
    assert_eq!(strip(counts(&a)), strip(counts(&b)));
    assert!(
        std::fs::read(dir.path().join("a.pcap")).unwrap()
            == std::fs::read(dir.path().join("b.pcap")).unwrap()
    );
}

#[test]
fn check_prints_the_groups_and_the_conflicts_by_name() {
    let dir = common::tempdir();
    let describe = |text: String| {
        let cfg = ChainConfig::parse(&text, "t.toml").unwrap();
        Chain::from_config(&cfg).unwrap().describe()
    };
    let d = describe(chain1(dir.path(), "parallel = true"));
    assert!(
        d.contains("  parallel groups (`parallel = true`): b0 ∥ acl (`acl` over shadow copies, `b0` in place on a second thread); b1 ∥ nat (`b1` over shadow copies, `nat` in place on a second thread); b2 ∥ mon (`mon` over shadow copies, `b2` in place on a second thread)\n"),
        "{d}"
    );
    assert!(
        d.contains("    acl ∥ b1: could, but an NF of the pair is already in a group\n"),
        "{d}"
    );
    let d = describe(chain2(dir.path(), ""));
    for want in [
        "  parallel groups: off (`parallel = true` would run acl ∥ b1 (`b1` over shadow copies, `acl` in place on a second thread))\n",
        "    b1 ∥ nat: cannot: `nat` writes l4.dst which `b1` reads\n",
        "    nat ∥ mon: cannot: `nat` writes ip.src,ip.dst,l4.src,l4.dst,icmp which `mon` reads or writes\n",
    ] {
        assert!(d.contains(want), "missing {want:?} in\n{d}");
    }
    // A stateful NF after one that drops, and two writers.
    let d = describe(format!(
        "{ACL}{}{NAT}[[nf]]\nname = \"b9\"\nkind = \"busy\"\nwrites = [\"eth.src\"]\n",
        mon(&dir.path().join("r.jsonl"))
    ));
    for want in [
        "    acl ∥ mon: cannot: `acl` may drop and `mon` keeps state or counters (it would also see the dropped packets)\n",
        "    nat ∥ b9: cannot: both write (`nat`: ip.src,ip.dst,l4.src,l4.dst,icmp,payload; `b9`: eth.src), and one branch must write nothing\n",
    ] {
        assert!(d.contains(want), "missing {want:?} in\n{d}");
    }
}

#[test]
fn bad_asks_are_refused_in_one_line() {
    let err = |text: &str| {
        let cfg = ChainConfig::parse(text, "t.toml").unwrap();
        Chain::from_config(&cfg).err().map(|e| e.to_string())
    };
    assert_eq!(
        err("parallel = true\n[[nf]]\nname = \"w\"\nkind = \"wire\"\n").as_deref(),
        Some("t.toml: `parallel = true`: no two consecutive NFs can run in parallel (the chain has fewer than two NFs)")
    );
    assert_eq!(
        err(&format!("parallel = true\n{NAT}[[nf]]\nname = \"b\"\nkind = \"busy\"\nreads = [\"ip.src\"]\n")).as_deref(),
        Some("t.toml: `parallel = true`: no two consecutive NFs can run in parallel (`nat` ∥ `b`: cannot: `nat` writes ip.src which `b` reads or writes)")
    );
    assert_eq!(
        err(&format!("parallel = true\nfastpath = true\n{ACL}{}", busy("b", "ip.ttl"))).as_deref(),
        Some("t.toml: `parallel = true`: FastPath and parallel NFs do not combine yet: use one of them")
    );
    let e = ChainConfig::parse("parallel = 1\n", "t.toml")
        .err()
        .unwrap();
    assert!(e.to_string().contains("expected a boolean"), "{e}");
    assert_eq!(err(&format!("parallel = false\n{ACL}")), None);
}
