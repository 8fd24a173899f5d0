//! The runtime's lookahead (`Source::set_lookahead`; docs/e2e.md, "The runtime's
//! lookahead"): a source whose packets are views of lasting bytes is asked to prefetch
//! the next chunk's header lines exactly when the chain's NFs read packet bytes, as far
//! into the frame as their profiles reach; `wire` (only the ingress port and the egress
//! decision) and every copied input are not asked. And looking ahead changes no output
//! byte and no counter.

mod common;

use std::path::{Path, PathBuf};

use catena::io::gen::{generate, GenOptions, Profile};
use catena::io::{After, PcapHeader, Record, Source, Trace, TraceError, TraceSource};
use catena::packet::LinkKind;
use catena::runtime::{Chain, ChainConfig, NoProgress, RunOptions, Runner, Summary};

/// A source that records what the runner asks of `set_lookahead`, and may pass on
/// something else (`pass`) to the source beneath.
struct Told {
    src: TraceSource<'static>,
    asked: Vec<usize>,
    pass: Option<usize>,
}

impl Source for Told {
    fn link(&self) -> LinkKind {
        self.src.link()
    }
    fn header(&self) -> PcapHeader {
        self.src.header()
    }
    fn max_packet_len(&self) -> usize {
        self.src.max_packet_len()
    }
    fn next_chunk(&mut self, max: usize) -> (&[u8], &[Record], After) {
        self.src.next_chunk(max)
    }
    fn rewind(&mut self) -> bool {
        self.src.rewind()
    }
    fn span_ns(&self) -> u64 {
        self.src.span_ns()
    }
    fn records_hint(&self) -> u64 {
        self.src.records_hint()
    }
    fn error(&self) -> Option<&TraceError> {
        self.src.error()
    }
    fn lasting(&self) -> Option<&'static [u8]> {
        self.src.lasting()
    }
    fn set_lookahead(&mut self, reach: usize) {
        self.asked.push(reach);
        self.src.set_lookahead(self.pass.unwrap_or(reach));
    }
}

fn example(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(rel)
}

fn trace(n: usize) -> &'static Trace {
    let mut o = GenOptions::profile(Profile::BigFlows);
    o.count = n;
    Box::leak(Box::new(generate(&o).unwrap()))
}

/// Runs the chain file over `src` (`loops` passes, output to `out`); the summary.
fn run(chain: &Path, src: &mut Told, loops: u64, out: Option<&Path>) -> Summary {
    let cfg = ChainConfig::load(chain).unwrap_or_else(|e| panic!("{e}"));
    let chain = Chain::from_config(&cfg).unwrap_or_else(|e| panic!("{e}"));
    let mut r = Runner::new(chain, src.max_packet_len());
    let mut opts = RunOptions {
        loops,
        ..Default::default()
    };
    if let Some(o) = out {
        opts.outputs.push(("out".into(), o.to_path_buf()));
    }
    r.run_source(src, &opts, &mut NoProgress).unwrap()
}

fn told(src: TraceSource<'static>, pass: Option<usize>) -> Told {
    Told {
        src,
        asked: Vec::new(),
        pass,
    }
}

#[test]
fn the_runtime_looks_ahead_exactly_when_the_chain_reads_packet_bytes() {
    let t = trace(2_000);
    // (chain, bytes from the frame's start its NFs read or write: the furthest field of
    // an untagged Ethernet/IPv4 frame, at most 64)
    let cases = [
        ("wire.toml", 0),
        ("pipeline/wire.toml", 0),
        // Both addresses: bytes 0..12.
        ("mac_switch.toml", 12),
        ("pipeline/mac_switch.toml", 12),
        // The IPv4 destination ends at 34.
        ("ipv4_switch.toml", 34),
        ("pipeline/ipv4_switch.toml", 34),
        // The destination port ends at 38.
        ("firewall.toml", 38),
        ("pipeline/firewall.toml", 38),
        // TCP flags end at 48.
        ("ip_filter.toml", 48),
    ];
    for (chain, reach) in cases {
        let mut viewed = told(TraceSource::in_place(t), None);
        run(&example(chain), &mut viewed, 1, None);
        assert_eq!(viewed.asked, [reach], "{chain}, packets viewed in place");
        assert_eq!(viewed.src.lookahead(), reach, "{chain}: the source took it");
        // A copy's first touch is its ingest: the source is never asked to look ahead.
        let mut copied = told(TraceSource::new(t), None);
        run(&example(chain), &mut copied, 1, None);
        assert_eq!(copied.asked, [0], "{chain}, packets copied");
        assert_eq!(copied.src.lookahead(), 0, "{chain}, packets copied");
    }
}

#[test]
fn looking_ahead_changes_no_output() {
    // Records of bigflows' sizes, 3,001 of them (the last chunk of a pass is short, the
    // lookahead past it finds no record), three passes.
    let t = trace(3_001);
    let d = common::tempdir();
    for chain in [
        "mac_switch.toml",
        "pipeline/mac_switch.toml",
        "firewall.toml",
        "nat.toml",
    ] {
        let mut outs = Vec::new();
        // Looking ahead as far as the chain reads, as far as the source allows, not at
        // all; and the copying path.
        for (i, pass) in [None, Some(64), Some(0)].into_iter().enumerate() {
            let out = d.path().join(format!("{i}.pcap"));
            let mut src = told(TraceSource::in_place(t), pass);
            let s = run(&example(chain), &mut src, 3, Some(&out));
            outs.push((i, std::fs::read(&out).unwrap(), counters(&s)));
        }
        let out = d.path().join("copy.pcap");
        let s = run(
            &example(chain),
            &mut told(TraceSource::new(t), None),
            3,
            Some(&out),
        );
        outs.push((3, std::fs::read(&out).unwrap(), counters(&s)));
        let (_, bytes, c) = &outs[0];
        assert!(bytes.len() > 24 && c["packets_in"] == 9_003, "{chain}: {c}");
        for (i, b, k) in &outs[1..] {
            assert!(
                b == bytes,
                "{chain}: output {i} differs from the lookahead's"
            );
            assert_eq!(k, c, "{chain}: counters {i}");
        }
    }
}

/// The summary without its timings.
fn counters(s: &Summary) -> serde_json::Value {
    let mut v = serde_json::to_value(s).unwrap();
    common::drop_timings(&mut v);
    v
}
