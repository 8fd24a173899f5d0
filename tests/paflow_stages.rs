//! PA-Flow between in-process stages (`aggregate_stages = true`): every ring between
//! stages carries aggregated frames that the next stage unpacks. On every capture in
//! the datasets the output is byte-identical to one stage without aggregation, with 2
//! and 3 stages, with an NF in stage 2 dropping packets that arrived inside aggregates
//! (its drops counted as usual), the per-NF counters and flow records equal; with
//! branches, packets for different next nodes never share a frame and the output is the
//! same; `check` says where aggregation happens and one stage is refused in one line.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use catena::io::Trace;
use catena::nfs::{Context, Nf, Profile};
use catena::packet::{Batch, Fields};
use catena::runtime::{Chain, ChainConfig, NoProgress, RunOptions, Runner, Summary};

fn counts(s: &Summary) -> Vec<String> {
    let mut v = vec![format!(
        "in {} out {} dropped {} bytes {} {} input drops {:?}",
        s.packets_in, s.packets_out, s.packets_dropped, s.bytes_in, s.bytes_out, s.input_drops
    )];
    for n in &s.nfs {
        v.push(format!(
            "{} in {} out {} dropped {} drops {:?} stats {:?}",
            n.name, n.packets_in, n.packets_out, n.packets_dropped, n.drops, n.stats
        ));
    }
    for k in &s.sinks {
        v.push(format!("sink {} {} {}", k.name, k.packets, k.bytes));
    }
    v
}

/// Maglev in stage 1; a filter that drops, NAT and a flow monitor in stage 2.
fn chain(dir: &Path, head: &str, tag: &str) -> String {
    format!(
        r#"
{head}
[input]
ports = 3
[[nf]]
name = "lb"
kind = "maglev"
vip = "192.168.2.110"
backends = [{{ addr = "10.1.0.1" }}, {{ addr = "10.1.0.2" }}, {{ addr = "10.1.0.3" }}]
table_size = 251
capacity = 200000
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
name = "mon"
kind = "flow_monitor"
capacity = 200000
records = "{}"
"#,
        dir.join(format!("flows-{tag}.jsonl")).display(),
    )
}

const ON: &str = "stages = [[\"lb\"], [\"acl\", \"nat\", \"mon\"]]\naggregate_stages = true";
/// Three stages: stage 2 unpacks ring 1 and packs ring 2 again; with views, the last
/// stage's NFs (NAT, the monitor) work on views into ring 2's frames.
const THREE: &str =
    "stages = [[\"lb\"], [\"acl\"], [\"nat\", \"mon\"]]\naggregate_stages = true\naggregate_views = true";
/// Stage 2's NFs on the packets as views into the frames (NAT's writes copy them).
const VIEWS: &str =
    "stages = [[\"lb\"], [\"acl\", \"nat\", \"mon\"]]\naggregate_stages = true\naggregate_views = true";

/// Runs `text` over `trace`: summary, output bytes, flow records.
fn run(text: &str, trace: &Trace, dir: &Path, tag: &str) -> (Summary, Vec<u8>, BTreeSet<String>) {
    let cfg = ChainConfig::parse(text, "t.toml").expect("config");
    let chain = Chain::from_config(&cfg).expect("chain");
    let out = dir.join(format!("out-{tag}.pcap"));
    let opts = RunOptions {
        outputs: vec![("out".into(), out.clone())],
        ..RunOptions::default()
    };
    let s = Runner::new(chain, trace.max_packet_len())
        .run(trace, &opts, &mut NoProgress)
        .expect("run");
    let rec = dir.join(format!("flows-{tag}.jsonl"));
    let r = std::fs::read_to_string(&rec).unwrap_or_default();
    let _ = std::fs::remove_file(&rec);
    (
        s,
        std::fs::read(&out).unwrap(),
        r.lines().map(str::to_string).collect(),
    )
}

#[test]
fn every_capture_gives_the_same_output_with_stage_aggregation() {
    let dir = common::tempdir();
    let (mut compared, mut packed, mut frames, mut dropped) = (0, 0u64, 0u64, 0u64);
    let (mut packed3, mut frames3) = (0u64, 0u64);
    for cap in common::all_captures() {
        let Ok(trace) = Trace::open(&cap) else {
            continue;
        };
        let name = cap.display().to_string();
        let (a, fa, ra) = run(&chain(dir.path(), "", "one"), &trace, dir.path(), "one");
        let (b, fb, rb) = run(&chain(dir.path(), ON, "agg"), &trace, dir.path(), "agg");
        assert_eq!(counts(&a), counts(&b), "{name}");
        assert!(fa == fb, "{name}: outputs differ with stage aggregation");
        assert!(
            ra == rb,
            "{name}: flow records differ with stage aggregation"
        );
        let (c, fc, rc) = run(
            &chain(dir.path(), VIEWS, "views"),
            &trace,
            dir.path(),
            "views",
        );
        assert_eq!(counts(&a), counts(&c), "{name}: views");
        assert!(
            fa == fc,
            "{name}: outputs differ with NFs on views into aggregates"
        );
        assert!(ra == rc, "{name}: flow records differ with views");
        // How many runs are packed depends on timing (room in the supply ring, a free
        // frame buffer); the output never does. Every packet crossed once, either way.
        let aggc = c.aggregate_stages.expect("aggregation counters");
        assert_eq!(
            aggc.aggregated + aggc.plain,
            c.nfs[1].packets_in,
            "{name}: {aggc:?}"
        );
        let agg = b.aggregate_stages.expect("aggregation counters");
        // Everything stage 1 sent to stage 2 (the filter's input) went down the ring.
        assert_eq!(
            agg.aggregated + agg.plain,
            b.nfs[1].packets_in,
            "{name}: {agg:?}"
        );
        // Three stages, views in the last: the same again.
        let (d, fd, rd) = run(
            &chain(dir.path(), THREE, "three"),
            &trace,
            dir.path(),
            "three",
        );
        assert_eq!(counts(&a), counts(&d), "{name}: 3 stages");
        assert!(fa == fd, "{name}: outputs differ with 3 aggregating stages");
        assert!(ra == rd, "{name}: flow records differ with 3 stages");
        let agg3 = d.aggregate_stages.expect("aggregation counters");
        // Both rings: into the filter (stage 2) and into NAT (stage 3).
        assert_eq!(
            agg3.aggregated + agg3.plain,
            d.nfs[1].packets_in + d.nfs[2].packets_in,
            "{name}: {agg3:?}"
        );
        packed += agg.aggregated;
        frames += agg.frames;
        packed3 += agg3.aggregated;
        frames3 += agg3.frames;
        dropped += b.nfs[1].packets_dropped;
        compared += 1;
    }
    eprintln!(
        "{compared} captures: {packed} packets crossed the ring in {frames} aggregates; the filter in stage 2 dropped {dropped}; 3 stages: {packed3} packets in {frames3} aggregates over both rings"
    );
    assert!(
        packed3 > packed,
        "3 stages packed only {packed3} (2: {packed})"
    );
    assert!(compared > 1000, "only {compared} captures compared");
    // A stage ahead of the next waits for supply room rather than sending runs
    // unpacked (without that wait: ~203,000).
    assert!(packed > 250_000, "only {packed} packets aggregated");
    assert!(dropped > 1000, "only {dropped} drops inside stage 2");
}

/// Two outputs, picked by the low bit of the ingress port.
struct Split(Profile);

impl Nf for Split {
    fn profile(&self) -> &Profile {
        &self.0
    }
    fn process(&mut self, b: &mut Batch, _: &Context) {
        for p in b {
            let o = (p.meta().in_port & 1) as u8;
            p.forward(o);
        }
    }
}

#[test]
fn branches_get_their_own_frames_and_the_same_output() {
    let trace = Trace::open(&common::dataset("bench/ndpi-ether-merged.pcap")).unwrap();
    let dir = common::tempdir();
    let run = |staged: bool| {
        let split = Box::new(Split(Profile {
            reads: Fields::IN_PORT,
            writes: Fields::NONE,
            may_drop: false,
            changes_length: false,
            per_flow_state: false,
            outputs: &["even", "odd"],
            drop_reasons: &[],
        }));
        let mon = || -> Box<dyn Nf> { Box::new(catena::nfs::FlowMonitor::new(4096, 0)) };
        let mut c = Chain::linear(
            "b",
            4,
            7,
            vec![
                ("s".into(), split as Box<dyn Nf>),
                ("a".into(), mon()),
                ("b".into(), mon()),
            ],
        );
        // s:even -> a -> out, s:odd -> b -> out.
        c.nodes[1].next = vec![2, 3];
        c.nodes[2].next = vec![4];
        if staged {
            c.set_stages(&[vec!["s".into()], vec!["a".into(), "b".into()]])
                .unwrap();
            c.set_aggregate_stages(true).unwrap();
        }
        let out = dir.path().join(format!("b-{staged}.pcap"));
        let opts = RunOptions {
            outputs: vec![("out".into(), out.clone())],
            ..RunOptions::default()
        };
        let s = Runner::new(c, trace.max_packet_len())
            .run(&trace, &opts, &mut NoProgress)
            .unwrap();
        (s, std::fs::read(&out).unwrap())
    };
    let (one, f1) = run(false);
    let (two, f2) = run(true);
    assert_eq!(counts(&one), counts(&two));
    assert!(
        f1 == f2,
        "outputs differ with stage aggregation and branches"
    );
    let agg = two.aggregate_stages.unwrap();
    // Each node's share of a chunk is packed apart: with both branches busy, a chunk
    // of 32 makes two frames or more, so there are more frames than chunks.
    let chunks = trace.len().div_ceil(32) as u64;
    assert!(agg.frames > chunks, "{agg:?} for {chunks} chunks");
    assert_eq!(agg.aggregated + agg.plain, one.packets_in);
    assert!(two.nfs[1].packets_in > 0 && two.nfs[2].packets_in > 0);
}

#[test]
fn check_shows_stage_aggregation_and_one_stage_is_refused() {
    let dir = common::tempdir();
    let bin = env!("CARGO_BIN_EXE_catena");
    let file = dir.path().join("c.toml");
    std::fs::write(&file, chain(dir.path(), ON, "chk")).unwrap();
    let o = std::process::Command::new(bin)
        .arg("check")
        .arg(&file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        text.contains("aggregation (PA-Flow): stage 1's ring into stage 2 carries")
            && text.contains("by copying each packet out"),
        "{text}"
    );
    std::fs::write(&file, chain(dir.path(), VIEWS, "chk")).unwrap();
    let o = std::process::Command::new(bin)
        .arg("check")
        .arg(&file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("as views into the frames"), "{text}");
    std::fs::write(&file, chain(dir.path(), THREE, "chk")).unwrap();
    let o = std::process::Command::new(bin)
        .arg("check")
        .arg(&file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        text.contains("each of the 2 rings between stages carries")
            && text.contains("by copying each packet out, and by the last stage as views"),
        "{text}"
    );
    std::fs::write(&file, chain(dir.path(), "aggregate_stages = true", "chk")).unwrap();
    let o = std::process::Command::new(bin)
        .arg("check")
        .arg(&file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("`aggregate_stages`: needs two stages or more") && err.contains("has 1"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// `--max-memory` counts PA-Flow's buffers: between stages, the buffers a supply ring
/// may hold (stage 1's pool grows by a forward ring's worth of buffers per ring), and
/// the frame each aggregating `[[port]]` packs into.
#[test]
fn the_memory_bound_counts_the_supply_rings_and_the_ports_frames() {
    let dir = common::tempdir();
    let mem = |head: &str| {
        let cfg = ChainConfig::parse(&chain(dir.path(), head, "mem"), "t.toml").unwrap();
        Chain::from_config(&cfg).unwrap().memory(1514).buffers
    };
    let two = "stages = [[\"lb\"], [\"acl\", \"nat\", \"mon\"]]";
    let ring = catena::runtime::stage::DEFAULT_RING as u64 + 2;
    let supply = mem(ON) - mem(two);
    // One ring: its slots' worth of buffers (2 KiB, with their metadata, at least).
    assert!(
        supply >= ring * 2048,
        "{supply} B counted for the supply ring"
    );
    let three = "stages = [[\"lb\"], [\"acl\"], [\"nat\", \"mon\"]]";
    let supply3 = mem(&format!("{three}\naggregate_stages = true")) - mem(three);
    assert!(
        supply3 >= 2 * supply,
        "two rings, twice the buffers at least: {supply3} B, one ring {supply} B"
    );
    let ports = |agg: &str| {
        format!(
            "[[port]]\nname = \"a\"\nkind = \"pcap\"\npath = \"x.pcap\"\n{agg}\n[[port]]\nname = \"b\"\nkind = \"pcap\"\nwrite = \"y.pcap\"\n{agg}\n[[nf]]\nname = \"wire\"\nkind = \"wire\"\n"
        )
    };
    let mem_ports = |agg: &str| {
        let cfg = ChainConfig::parse(&ports(agg), "t.toml").unwrap();
        Chain::from_config(&cfg).unwrap().memory(1514).buffers
    };
    assert_eq!(
        mem_ports("aggregate = true\naggregate_size = 30000\n") - mem_ports(""),
        2 * 30_000
    );
}
