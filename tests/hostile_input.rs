//! Hostile input (session 23): inputs found by attack to break "bad input never panics,
//! never hangs", each with the one-line error it must give, and a seeded, bounded
//! mutation loop over captures through several chains.

mod common;

use std::fs::File;
use std::path::Path;
use std::process::Output;

use catena::io::Trace;
use catena::runtime::{Chain, ChainConfig, NoProgress, RunOptions, Runner};
use common::catena;
use proptest::prelude::*;

/// The bounds on text files read (`io::text_file::MAX_TEXT_FILE`) and on one control
/// command (`runtime::control::MAX_LINE`), as literals: the tests must not move with them.
const MAX_TEXT_FILE: u64 = 256 << 20;
const MAX_LINE: u64 = 4 << 20;

/// Standard error, cut at 4,000 bytes: an unbounded message (what these inputs gave
/// before) fails the comparison without printing hundreds of MiB.
fn stderr(o: &Output) -> String {
    let e = String::from_utf8_lossy(&o.stderr[..o.stderr.len().min(4000)]).into_owned();
    if o.stderr.len() > 4000 {
        e + "…"
    } else {
        e
    }
}

/// A sparse file of `len` zero bytes: what `/dev/zero` gives, but with an end, so a reader
/// without a bound finishes (wrongly) instead of filling the memory.
fn zeros(path: &Path, len: u64) {
    File::create(path).unwrap().set_len(len).unwrap();
}

#[test]
fn a_chain_file_past_the_bound_is_one_line_not_read_whole() {
    let d = common::tempdir();
    let chain = d.path().join("huge.toml");
    zeros(&chain, MAX_TEXT_FILE + 1);
    let c = chain.to_str().unwrap();
    for sub in ["check", "run"] {
        let o = catena(&[sub, c]);
        assert_eq!(o.status.code(), Some(1), "{sub}: {}", stderr(&o));
        assert_eq!(
            stderr(&o),
            format!("error: {c}: longer than 256 MiB, the most read of a text file\n"),
            "{sub}"
        );
    }
}

#[test]
fn rule_files_past_the_bound_are_one_line() {
    let d = common::tempdir();
    let rules = d.path().join("huge.rules");
    zeros(&rules, MAX_TEXT_FILE + 1);
    let r = rules.display();
    for (nf, body) in [
        ("acl", format!("kind = \"ip_filter\"\nrules_file = '{r}'\n")),
        (
            "mb",
            format!("kind = \"microbox\"\napps = [{{ kind = \"ids\", rules_file = '{r}' }}]\n"),
        ),
    ] {
        let chain = d.path().join(format!("{nf}.toml"));
        std::fs::write(&chain, format!("[[nf]]\nname = \"{nf}\"\n{body}")).unwrap();
        let o = catena(&["check", chain.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(1), "{nf}: {}", stderr(&o));
        let e = stderr(&o);
        assert_eq!(e.lines().count(), 1, "{nf}: {e}");
        assert!(
            e.ends_with(&format!(
                "rules_file `{r}`: longer than 256 MiB, the most read of a text file\n"
            )),
            "{nf}: {e}"
        );
    }
}

#[test]
fn an_error_quoting_a_huge_rule_is_cut_short() {
    let d = common::tempdir();
    let rules = d.path().join("long.rules");
    std::fs::write(&rules, format!("deny tcp\n{}\n", "x".repeat(100_000))).unwrap();
    let chain = d.path().join("acl.toml");
    std::fs::write(
        &chain,
        format!(
            "[[nf]]\nname = \"acl\"\nkind = \"ip_filter\"\nrules_file = '{}'\n",
            rules.display()
        ),
    )
    .unwrap();
    let o = catena(&["check", chain.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    let head = format!(
        "error: {}: nf `acl`: rule 2 (line 2 of {}): a rule starts with `allow` or `deny`, not `",
        chain.display(),
        rules.display()
    );
    assert!(e.starts_with(&head), "{e}");
    // The message is the quote's context, 100,000 x and a backquote; 1,000 bytes are kept.
    let more = head.len() - "error: ".len() + 100_000 + 1 - 1000;
    assert!(e.ends_with(&format!("x… ({more} bytes more)\n")), "{e}");
    assert_eq!(e.lines().count(), 1);
}

#[test]
fn gen_refuses_a_rate_whose_timestamps_would_wrap() {
    let d = common::tempdir();
    let out = d.path().join("g.pcap");
    let o = catena(&[
        "gen",
        "-n",
        "5",
        "--rate",
        "1e-300",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(
        stderr(&o),
        "error: gen: rate_pps 1e-300 is too low for 5 packets: the capture would run past \
         the pcap format's last second (2106-02-07)\n"
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(!out.exists());
    // A low rate that fits is kept: 5 packets a day apart on average.
    let o = catena(&[
        "gen",
        "-n",
        "5",
        "--rate",
        "0.00001",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn a_pipeline_program_past_the_bound_is_one_line() {
    let d = common::tempdir();
    let prog = d.path().join("huge.stv");
    zeros(&prog, MAX_TEXT_FILE + 1);
    let o = catena(&["pipeline", prog.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(
        stderr(&o),
        format!(
            "cannot read program {}: longer than 256 MiB, the most read of a text file\n",
            prog.display()
        )
    );
}

#[test]
fn a_chain_naming_a_pipeline_program_past_the_bound_is_one_line() {
    let d = common::tempdir();
    let prog = d.path().join("huge.stv");
    zeros(&prog, MAX_TEXT_FILE + 1);
    let chain = d.path().join("p.toml");
    std::fs::write(
        &chain,
        "[[nf]]\nname = \"p\"\nkind = \"pipeline\"\nprogram = \"huge.stv\"\n",
    )
    .unwrap();
    let o = catena(&["check", chain.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.ends_with("longer than 256 MiB, the most read of a text file\n"),
        "{e}"
    );
}

#[test]
fn a_ctl_file_longer_than_a_command_line_is_refused_before_connecting() {
    let d = common::tempdir();
    let f = d.path().join("rules.txt");
    zeros(&f, MAX_LINE + 1);
    let sock = d.path().join("no.sock");
    let o = catena(&[
        "ctl",
        sock.to_str().unwrap(),
        "--file",
        f.to_str().unwrap(),
        "acl",
        "rules",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(
        stderr(&o),
        format!(
            "error: --file {}: longer than 4 MiB, the most read of a text file\n",
            f.display()
        )
    );
}

#[test]
fn dpi_of_a_capture_cut_short_labels_the_flows_before_and_fails() {
    let d = common::tempdir();
    let cut = d.path().join("cut.pcap");
    let b = std::fs::read(common::dataset("ndpi/pcap/rsh.pcap")).unwrap();
    assert_eq!(b.len(), 2129);
    std::fs::write(&cut, &b[..b.len() - 10]).unwrap();
    let o = catena(&["dpi", cut.to_str().unwrap()]);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "6 127.0.0.1:1023 -> 127.0.0.1:514  12 pkts  Syslog (port)\n\
         6 127.0.0.1:1021 -> 127.0.0.1:514  11 pkts  Syslog (port)\n\
         \x20                   protocol    flows    packets\n\
         \x20                     Syslog        2         23\n"
    );
    assert_eq!(
        stderr(&o),
        format!(
            "error: {}: record 24 at byte offset 2047: caplen 66 runs past the end of the file \
             (only 56 bytes left) (the flows up to there are labelled)\n",
            cut.display()
        )
    );
    assert_eq!(o.status.code(), Some(1));
}

// The mutation loop: real captures, mutated the ways parsers get wrong (length fields at
// 0 / max / off by one, truncation, IHL < 5, TCP data offset past the end, nested VLANs,
// odd fragment offsets, flipped bits), read and run through chains that parse deep. A
// file error must be a `TraceError` (never a panic); whatever was read must run with
// every packet counted (in = out + dropped).

const CHAINS: [&str; 4] = [
    "[[nf]]\nname = \"w\"\nkind = \"wire\"\n",
    "[[nf]]\nname = \"acl\"\nkind = \"ip_filter\"\nrules = [\"deny tcp dst port 23\", \"deny ip6 and udp\", \"allow ip[6:2] & 0x1fff != 0\"]\n",
    "[[nf]]\nname = \"mb\"\nkind = \"microbox\"\napps = [{ kind = \"dpi\" }, { kind = \"ids\", rules = \"alert tcp any any -> any any (content:\\\"GET\\\"; sid:1;)\\nalert udp any any -> any 53 (content:\\\"|00 01|\\\"; sid:2;)\" }]\n",
    "workers = 2\n[[nf]]\nname = \"mon\"\nkind = \"flow_monitor\"\n",
];

const SEEDS: [&str; 4] = [
    "ndpi/pcap/dns_fragmented.pcap",
    "ndpi/pcap/rsh.pcap",
    "ndpi/pcap/tls_1.2_unidirectional_server_no_cert.pcapng",
    "ndpi/pcap/modbus.pcap",
];

#[derive(Debug, Clone)]
enum Mutation {
    /// Sets the 4 bytes at `at` (modulo the length) to a boundary value.
    Field {
        at: usize,
        value: u32,
    },
    /// Sets one byte of an IP/TCP header (modulo the length) — IHL, data offset, fragments.
    Byte {
        at: usize,
        value: u8,
    },
    Flip {
        at: usize,
        bit: u8,
    },
    Cut {
        at: usize,
    },
    /// Inserts `n` VLAN tags after the MACs of the packet starting at `at`.
    Vlans {
        at: usize,
        n: u8,
    },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let value = prop_oneof![
        Just(0u32),
        Just(1),
        Just(14),
        Just(0xFFFF),
        Just(0x1_0000),
        Just(0x1_0001),
        Just(u32::MAX),
        Just(0x7FFF_FFFF),
        any::<u32>()
    ];
    prop_oneof![
        (any::<usize>(), value).prop_map(|(at, value)| Mutation::Field { at, value }),
        (
            any::<usize>(),
            prop_oneof![
                Just(0x40u8),
                Just(0x41),
                Just(0x44),
                Just(0x4F),
                Just(0x00),
                Just(0xF0),
                Just(0x20),
                Just(0x3F),
                any::<u8>()
            ]
        )
            .prop_map(|(at, value)| Mutation::Byte { at, value }),
        (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Mutation::Flip { at, bit }),
        any::<usize>().prop_map(|at| Mutation::Cut { at }),
        (any::<usize>(), 1u8..40).prop_map(|(at, n)| Mutation::Vlans { at, n }),
    ]
}

fn apply(b: &mut Vec<u8>, m: &Mutation) {
    if b.is_empty() {
        return;
    }
    match *m {
        Mutation::Field { at, value } => {
            let at = at % b.len();
            let end = (at + 4).min(b.len());
            b[at..end].copy_from_slice(&value.to_le_bytes()[..end - at]);
        }
        Mutation::Byte { at, value } => {
            let at = at % b.len();
            b[at] = value;
        }
        Mutation::Flip { at, bit } => {
            let at = at % b.len();
            b[at] ^= 1 << bit;
        }
        Mutation::Cut { at } => b.truncate(at % b.len()),
        Mutation::Vlans { at, n } => {
            let at = at % b.len();
            let tags: Vec<u8> = (0..n).flat_map(|i| [0x81, 0x00, 0, i]).collect();
            b.splice(at..at, tags);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn mutated_captures_are_read_and_run_without_panic(
        seed in 0..SEEDS.len(),
        chain in 0..CHAINS.len(),
        ms in proptest::collection::vec(mutation(), 1..6),
    ) {
        let mut b = std::fs::read(common::dataset(SEEDS[seed])).unwrap();
        for m in &ms {
            apply(&mut b, m);
        }
        let Ok(trace) = Trace::from_bytes(Path::new("m.pcap"), b) else {
            return Ok(());
        };
        let cfg = ChainConfig::parse(CHAINS[chain], "m.toml").unwrap();
        let mut r = Runner::new(Chain::from_config(&cfg).unwrap(), trace.max_packet_len());
        let s = r.run(&trace, &RunOptions::default(), &mut NoProgress).unwrap();
        prop_assert_eq!(s.packets_in, trace.len() as u64);
        prop_assert_eq!(s.packets_in, s.packets_out + s.packets_dropped);
    }
}
