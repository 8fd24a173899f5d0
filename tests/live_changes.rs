//! Changes applied while traffic runs: each packet's fate follows the rules in force when
//! it was processed, and no packet is lost or duplicated.

mod common;

use std::process::Command;

use catena::io::Trace;
use catena::runtime::{control::Scheduled, Chain, ChainConfig, NoProgress, RunOptions, Runner};
use common::*;

fn tcpdump_filter(src: &std::path::Path, out: &std::path::Path, expr: &str) {
    let o = Command::new("tcpdump")
        .arg("-r")
        .arg(src)
        .arg("-w")
        .arg(out)
        .arg(expr)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn split(src: &std::path::Path, out: &std::path::Path, range: &str) {
    // editcap -r keeps the 1-based packet range given.
    let o = Command::new("editcap")
        .arg("-r")
        .arg(src)
        .arg(out)
        .arg(range)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn firewall_rules_changed_mid_replay_match_tcpdump_per_segment() {
    require("tcpdump");
    require("editcap");
    let d = tempdir();
    let src = dataset("bench/ndpi-ether-merged.pcap");
    let trace = Trace::open(&src).unwrap();
    let n = trace.len();
    // Three regimes: web ports, then DNS, then web and SSH. Odd indices so changes fall
    // inside batches, not on their boundaries.
    let (a, b) = (30_001usize, 61_117usize);
    let cfg = ChainConfig::parse("[[nf]]\nname = \"fw\"\nkind = \"firewall\"\n", "t.toml").unwrap();
    let mut r = Runner::new(Chain::from_config(&cfg).unwrap(), trace.max_packet_len());
    let ours = d.path().join("ours.pcap");
    let opts = RunOptions {
        outputs: vec![("out".into(), ours.clone())],
        schedule: vec![
            format!("{a} fw allow_ports 53")
                .parse::<Scheduled>()
                .unwrap(),
            format!("{b} fw allow_ports 80,443,22")
                .parse::<Scheduled>()
                .unwrap(),
        ],
        ..Default::default()
    };
    let s = r.run(&trace, &opts, &mut NoProgress).unwrap();
    assert_eq!(s.packets_in, s.packets_out + s.packets_dropped);

    let filt = |ports: &[u16]| {
        let ps: Vec<String> = ports.iter().map(|p| format!("port {p}")).collect();
        let core = format!("ip and (tcp or udp) and ({})", ps.join(" or "));
        format!("({core}) or (vlan and (({core}) or (vlan and {core})))")
    };
    let mut expected = Vec::new();
    for (k, (range, ports)) in [
        (format!("1-{a}"), vec![80, 443]),
        (format!("{}-{b}", a + 1), vec![53]),
        (format!("{}-{n}", b + 1), vec![80, 443, 22]),
    ]
    .into_iter()
    .enumerate()
    {
        let part = d.path().join(format!("part{k}.pcap"));
        let pass = d.path().join(format!("pass{k}.pcap"));
        split(&src, &part, &range);
        tcpdump_filter(&part, &pass, &filt(&ports));
        expected.extend(packets(&pass));
    }
    let got = packets(&ours);
    assert_eq!(
        got.len(),
        expected.len(),
        "forwarded {} packets, tcpdump per segment {}",
        got.len(),
        expected.len()
    );
    assert!(
        got == expected,
        "forwarded packets differ from the per-segment oracle"
    );
    assert!(got.len() > 10_000);
}

#[test]
fn control_socket_applies_commands_during_a_run() {
    let d = tempdir();
    let sock = d.path().join("ctl.sock");
    let src = dataset("bench/ndpi-ether-merged.pcap");
    let bin = env!("CARGO_BIN_EXE_catena");
    let example = format!("{}/examples/firewall.toml", env!("CARGO_MANIFEST_DIR"));
    // Long enough (tens of millions of packets) that the commands land mid-run.
    let child = Command::new(bin)
        .args(["run", &example, "--json", "--loops", "400", "--control"])
        .arg(&sock)
        .arg("-i")
        .arg(&src)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while !sock.exists() {
        assert!(t0.elapsed().as_secs() < 20, "control socket never appeared");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let ctl = |args: &[&str]| {
        Command::new(bin)
            .arg("ctl")
            .arg(&sock)
            .args(args)
            .output()
            .unwrap()
    };
    let o = ctl(&["fw", "allow_ports", "53"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "1 port(s) allowed"
    );
    let o = ctl(&["fw", "bogus"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown command `bogus`"));
    let o = ctl(&["nope", "flush"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("no NF named `nope`"));
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let n = |k: &str| v[k].as_u64().unwrap();
    assert_eq!(n("packets_in"), 400 * 90_989);
    assert_eq!(n("packets_in"), n("packets_out") + n("packets_dropped"));
    assert!(!sock.exists(), "socket file left behind");
}

/// Runs `chain` over `trace` with the scheduled changes; returns the forwarded packets.
fn run_with_changes(
    chain: &str,
    trace: &Trace,
    changes: &[String],
    out: &std::path::Path,
) -> Vec<(u64, Vec<u8>)> {
    let cfg = ChainConfig::parse(chain, "t.toml").unwrap();
    let mut r = Runner::new(Chain::from_config(&cfg).unwrap(), trace.max_packet_len());
    let opts = RunOptions {
        outputs: vec![("out".into(), out.to_path_buf())],
        schedule: changes.iter().map(|c| c.parse().unwrap()).collect(),
        ..Default::default()
    };
    let s = r.run(trace, &opts, &mut NoProgress).unwrap();
    assert_eq!(s.packets_in, trace.len() as u64);
    assert_eq!(s.packets_in, s.packets_out + s.packets_dropped);
    packets(out)
}

/// tcpdump does not look inside VLAN tags unless told, so the filter is spelled out for
/// untagged frames and for one and two tags (as in tests/ip_filter.rs).
fn with_vlans(e: &str) -> String {
    let untagged = |o: u32| {
        format!("not (ether[{o}:2] = 0x8100 or ether[{o}:2] = 0x88a8 or ether[{o}:2] = 0x9100)")
    };
    format!(
        "({} and {e}) or (vlan and (({} and {e}) or (vlan and {e})))",
        untagged(12),
        untagged(16)
    )
}

#[test]
fn ip_filter_rules_changed_mid_replay_match_tcpdump_per_segment() {
    require("tcpdump");
    require("editcap");
    let d = tempdir();
    let src = dataset("bench/ndpi-ether-merged.pcap");
    let trace = Trace::open(&src).unwrap();
    let n = trace.len();
    // Three rule sets (default deny), each with the BPF of what it passes; changes fall
    // inside batches.
    let (a, b) = (30_001usize, 61_117usize);
    let sets: [(&str, &str); 3] = [
        (
            "deny src net 10.0.0.0/8; allow tcp port 80 or 443; allow udp port domain",
            "not (ip src net 10.0.0.0/8) and (tcp port 80 or tcp port 443 or udp port 53)",
        ),
        (
            "allow icmp; deny ip6; allow udp",
            "icmp or (not ip6 and udp)",
        ),
        (
            "deny port 53; deny icmp; allow all",
            "not port 53 and not icmp",
        ),
    ];
    let list: Vec<String> = sets[0].0.split("; ").map(|r| format!("{r:?}")).collect();
    let chain = format!(
        "[[nf]]\nname = \"acl\"\nkind = \"ip_filter\"\nrules = [{}]\n",
        list.join(", ")
    );
    let ours = d.path().join("ours.pcap");
    let got = run_with_changes(
        &chain,
        &trace,
        &[
            format!("{a} acl rules {}", sets[1].0),
            format!("{b} acl rules {}", sets[2].0),
        ],
        &ours,
    );
    let mut expected = Vec::new();
    let ranges = [
        format!("1-{a}"),
        format!("{}-{b}", a + 1),
        format!("{}-{n}", b + 1),
    ];
    for (k, (range, (_, bpf))) in ranges.iter().zip(sets).enumerate() {
        let part = d.path().join(format!("part{k}.pcap"));
        let pass = d.path().join(format!("pass{k}.pcap"));
        split(&src, &part, range);
        tcpdump_filter(&part, &pass, &with_vlans(bpf));
        let p = packets(&pass);
        assert!(p.len() > 1000, "segment {k} passes only {}", p.len());
        expected.extend(p);
    }
    assert_eq!(
        got.len(),
        expected.len(),
        "forwarded {} packets, tcpdump per segment {}",
        got.len(),
        expected.len()
    );
    assert!(
        got == expected,
        "forwarded packets differ from the per-segment oracle"
    );
}
