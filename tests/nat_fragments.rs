//! The NAT and IPv4 fragments (issue 14, point 16), on nDPI's
//! `ip_fragmented_garbage.pcap` (10.0.0.2 -> 10.128.0.2: 4 first fragments, 1,248 later
//! ones), with FastPath off and on.
//!
//! - Inside-to-inside (inside = 10.0.0.0/8): every packet passes untouched, later
//!   fragments included; before the fix the 1,248 later ones were dropped (`fragment`)
//!   while their first fragments passed.
//! - Outbound (inside = 10.0.0.0/9, so 10.128.0.2 is outside): later fragments are
//!   dropped as `fragment`, as MazuNAT's IPRewriter kills non-first fragments
//!   (documented in src/nfs/nat/mod.rs). This capture's first fragments carry only 16
//!   bytes of their TCP header (IP total length 36): the checksum lies in the next
//!   fragment, so they are dropped `malformed` (until session 27 they were translated
//!   and the checksum was patched in the Ethernet padding past the datagram).

mod common;

use catena::io::Trace;
use catena::runtime::{Chain, ChainConfig, NoProgress, RunOptions, Runner, Summary};

fn run(inside: &str, fast: bool, out: &std::path::Path) -> Summary {
    let t = Trace::open(&common::dataset("ndpi/pcap/ip_fragmented_garbage.pcap")).unwrap();
    let text = format!(
        "name = \"nat\"\nfastpath = {fast}\n[[nf]]\nname = \"nat\"\nkind = \"nat\"\ninside = \"{inside}\"\npublic = \"198.51.100.1\"\n"
    );
    let cfg = ChainConfig::parse(&text, "nat.toml").unwrap();
    let chain = Chain::from_config(&cfg).unwrap();
    let mut r = Runner::new(chain, t.max_packet_len());
    let opts = RunOptions {
        outputs: vec![("out".into(), out.to_path_buf())],
        ..Default::default()
    };
    r.run(&t, &opts, &mut NoProgress).unwrap()
}

fn drops(s: &Summary, reason: &str) -> u64 {
    s.nfs[0]
        .drops
        .iter()
        .find(|(k, _)| k == reason)
        .map_or(0, |(_, n)| *n)
}

#[test]
fn inside_to_inside_fragments_pass_untouched() {
    let input = common::packets(&common::dataset("ndpi/pcap/ip_fragmented_garbage.pcap"));
    assert_eq!(input.len(), 1252);
    let dir = common::tempdir();
    for fast in [false, true] {
        let out = dir.path().join(format!("out-{fast}.pcap"));
        let s = run("10.0.0.0/8", fast, &out);
        assert_eq!(
            (s.packets_out, drops(&s, "fragment")),
            (1252, 0),
            "fastpath {fast}"
        );
        assert_eq!(
            common::packets(&out),
            input,
            "fastpath {fast}: bytes changed"
        );
    }
}

#[test]
fn outbound_later_fragments_are_dropped_as_mazunat_does() {
    let dir = common::tempdir();
    let mut outs = Vec::new();
    for fast in [false, true] {
        let out = dir.path().join(format!("out-{fast}.pcap"));
        let s = run("10.0.0.0/9", fast, &out);
        assert_eq!(
            (s.packets_out, drops(&s, "fragment"), drops(&s, "malformed")),
            (0, 1248, 4),
            "fastpath {fast}"
        );
        outs.push(std::fs::read(&out).unwrap());
    }
    assert!(outs[0] == outs[1], "output differs with FastPath");
}
