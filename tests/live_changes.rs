//! Changes applied while traffic runs: each packet's fate follows the rules in force when
//! it was processed, and no packet is lost or duplicated.

mod common;

use std::process::Command;

use catena::io::Trace;
use catena::runtime::{
    control::Scheduled, Chain, ChainConfig, NoProgress, RunOptions, Runner, Shards,
};
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

/// `--control` with two workers: each change applies from one packet index in both
/// workers (the reply names it), so the run's output is byte-identical to one worker's
/// with the same changes scheduled at those indices (`--change`), whose fate per packet
/// the tcpdump oracle above checks.
#[test]
fn control_socket_changes_with_two_workers_apply_at_one_packet_in_both() {
    let d = tempdir();
    let sock = d.path().join("ctl.sock");
    let src = dataset("bench/ndpi-ether-merged.pcap");
    let bin = env!("CARGO_BIN_EXE_catena");
    let chain = d.path().join("acl.toml");
    std::fs::write(
        &chain,
        "[[nf]]\nname = \"acl\"\nkind = \"ip_filter\"\nrules = [\"allow udp port 53\"]\n",
    )
    .unwrap();
    const LOOPS: u64 = 60;
    let total = LOOPS * 90_989;
    let live = d.path().join("live.pcap");
    let child = Command::new(bin)
        .arg("run")
        .arg(&chain)
        .args(["--json", "--workers", "2", "--loops", &LOOPS.to_string()])
        .arg("--control")
        .arg(&sock)
        .arg("-i")
        .arg(&src)
        .arg("-o")
        .arg(&live)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while !sock.exists() {
        assert!(t0.elapsed().as_secs() < 20, "control socket never appeared");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let mut cuts = Vec::new();
    // Back to back, so that both land mid-run on a fast machine too.
    std::thread::sleep(std::time::Duration::from_millis(50));
    for rules in ["allow icmp; allow udp port 53", "allow tcp port 443"] {
        let o = Command::new(bin)
            .arg("ctl")
            .arg(&sock)
            .args(["acl", "rules", rules])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        // `2 rule(s) (from packet 123456 in 2 workers)`
        let at: u64 = text
            .split("from packet ")
            .nth(1)
            .and_then(|t| t.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no cut in the reply `{text}`"));
        assert!(text.trim_end().ends_with("in 2 workers)"), "{text}");
        cuts.push((at, rules));
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["packets_in"].as_u64(), Some(total));
    // The second may fall at the end of the input on a fast machine: it still applies
    // there, in both workers.
    assert!(
        0 < cuts[0].0 && cuts[0].0 <= cuts[1].0 && cuts[0].0 < total,
        "changes landed at {cuts:?} of {total} packets: not mid-run"
    );
    let one = d.path().join("one.pcap");
    let mut c = Command::new(bin);
    c.arg("run")
        .arg(&chain)
        .args(["--json", "--loops", &LOOPS.to_string(), "-i"])
        .arg(&src)
        .arg("-o")
        .arg(&one);
    for (at, rules) in &cuts {
        c.arg("--change").arg(format!("{at} acl rules {rules}"));
    }
    let o = c.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (a, b) = (std::fs::read(&live).unwrap(), std::fs::read(&one).unwrap());
    assert_eq!(
        a.len(),
        b.len(),
        "two workers with --control vs one with --change"
    );
    assert!(a == b, "outputs differ");
    assert!(!sock.exists(), "socket file left behind");
}

/// Runs `chain` over `trace` with the scheduled changes on `workers` RSS-sharded workers
/// (each applies every change at its packet index); returns the forwarded packets.
fn run_with_changes(
    chain: &str,
    trace: &Trace,
    changes: &[String],
    out: &std::path::Path,
    workers: usize,
) -> Vec<(u64, Vec<u8>)> {
    let cfg = ChainConfig::parse(chain, "t.toml").unwrap();
    let chains = (0..workers)
        .map(|_| Chain::from_config(&cfg).unwrap())
        .collect();
    let opts = RunOptions {
        outputs: vec![("out".into(), out.to_path_buf())],
        schedule: changes.iter().map(|c| c.parse().unwrap()).collect(),
        ..Default::default()
    };
    let s = Shards::new(chains, trace.max_packet_len())
        .unwrap()
        .run(trace, &opts, &mut NoProgress)
        .unwrap();
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
    let changes = [
        format!("{a} acl rules {}", sets[1].0),
        format!("{b} acl rules {}", sets[2].0),
    ];
    let got = run_with_changes(&chain, &trace, &changes, &ours, 1);
    // Two workers: every packet under the rule set in force at its index, in both.
    let two = run_with_changes(&chain, &trace, &changes, &d.path().join("two.pcap"), 2);
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
    assert_eq!(two.len(), expected.len(), "two workers");
    assert!(
        two == expected,
        "two workers: forwarded packets differ from the per-segment oracle"
    );
}

/// A UDP packet, or a TCP one with only ACK set, built from scratch (so its checksums are
/// etherparse's own, not patched).
fn l4(proto: u8, src: ([u8; 4], u16), dst: ([u8; 4], u16), payload: &[u8]) -> Vec<u8> {
    let b = etherparse::PacketBuilder::ethernet2([1; 6], [2; 6]).ipv4(src.0, dst.0, 64);
    let mut v = Vec::new();
    if proto == 6 {
        b.tcp(src.1, dst.1, 1000, 512)
            .ack(77)
            .write(&mut v, payload)
            .unwrap();
    } else {
        b.udp(src.1, dst.1).write(&mut v, payload).unwrap();
    }
    v
}

/// xorshift: the traces below are random but fixed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

fn trace_of(pkts: &[Vec<u8>]) -> Trace {
    Trace::from_packets(
        catena::packet::LinkKind::Ethernet,
        catena::io::PcapHeader::new(1, false),
        pkts.iter()
            .enumerate()
            .map(|(i, p)| (i as u64 * 1_000_000, &p[..])),
    )
}

/// Traffic in phases, flows started in a phase keep sending in later ones: each event is
/// (flow, outbound?). Returns the events and where each phase starts.
fn phased_events(new_flows: &[usize], events_per_phase: usize) -> (Vec<(usize, bool)>, Vec<usize>) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut ev, mut starts, mut started) = (Vec::new(), Vec::new(), 0usize);
    for &n in new_flows {
        starts.push(ev.len());
        let (first, end) = (started, started + n);
        while started < end || ev.len() - starts[starts.len() - 1] < events_per_phase {
            if started < end && (started == first || rng.below(3) == 0) {
                ev.push((started, true));
                started += 1;
            } else {
                ev.push((rng.below(started), rng.below(2) == 0));
            }
        }
    }
    (ev, starts)
}

/// The NAT pool changes twice while flows run. Documented behaviour, checked here by a
/// model written independently of the NAT: live mappings keep their public (address,
/// port) whether or not it is in the new pool, and their replies still come back; new
/// flows take pairs from the pool in force, in pool order (addresses, then ports), per
/// protocol, skipping pairs a live mapping still holds.
#[test]
fn nat_pool_changed_mid_replay_follows_the_model() {
    // Pool 2 overlaps pool 1's last ports on 198.51.100.1, which live flows hold.
    let pools: [(&[[u8; 4]], u16, u16); 3] = [
        (&[[198, 51, 100, 1]], 2000, 2029),
        (&[[198, 51, 100, 1], [198, 51, 100, 2]], 2020, 2039),
        (&[[203, 0, 113, 9]], 3000, 3100),
    ];
    let (events, starts) = phased_events(&[50, 40, 40], 400);
    // Flows alternate UDP and TCP; inside hosts 10/8, servers outside.
    let proto = |f: usize| if f.is_multiple_of(2) { 17u8 } else { 6 };
    let inside = |f: usize| {
        (
            [10, 0, (f / 200) as u8, (f % 200 + 1) as u8],
            40_000 + f as u16,
        )
    };
    let server = |f: usize| {
        (
            [198, 18, 0, (f % 5 + 1) as u8],
            if f.is_multiple_of(2) { 53 } else { 80 },
        )
    };
    // The model: each protocol's free pairs, rebuilt at every pool change.
    let mut public: Vec<Option<([u8; 4], u16)>> = vec![None; 130];
    let mut free: [std::collections::VecDeque<([u8; 4], u16)>; 2] = Default::default();
    let (mut input, mut expected) = (Vec::new(), Vec::new());
    for (i, &(f, out)) in events.iter().enumerate() {
        if let Some(k) = starts.iter().position(|&s| s == i) {
            let (addrs, lo, hi) = pools[k];
            for (q, p) in free.iter_mut().zip([6u8, 17]) {
                let held = |pair: &([u8; 4], u16)| {
                    (0..public.len()).any(|g| proto(g) == p && public[g] == Some(*pair))
                };
                *q = addrs
                    .iter()
                    .flat_map(|&a| (lo..=hi).map(move |port| (a, port)))
                    .filter(|pair| !held(pair))
                    .collect();
            }
        }
        let p = proto(f);
        let pl = format!("event {i}");
        let pl = pl.as_bytes();
        if public[f].is_none() {
            public[f] = free[(p == 17) as usize].pop_front();
        }
        let pubp = public[f].expect("the pools are large enough");
        if out {
            input.push(l4(p, inside(f), server(f), pl));
            expected.push(l4(p, pubp, server(f), pl));
        } else {
            input.push(l4(p, server(f), pubp, pl));
            expected.push(l4(p, server(f), inside(f), pl));
        }
    }
    let spec = |k: usize| {
        let (addrs, lo, hi) = pools[k];
        let a: Vec<String> = addrs
            .iter()
            .map(|a| std::net::Ipv4Addr::from(*a).to_string())
            .collect();
        (a.join(","), format!("{lo}-{hi}"))
    };
    let (a0, r0) = spec(0);
    let chain =
        format!("[[nf]]\nname = \"nat\"\nkind = \"nat\"\npublic = \"{a0}\"\nports = \"{r0}\"\n");
    let changes: Vec<String> = (1..3)
        .map(|k| {
            let (a, r) = spec(k);
            format!("{} nat pool {a} {r}", starts[k])
        })
        .collect();
    let d = tempdir();
    let got = run_with_changes(
        &chain,
        &trace_of(&input),
        &changes,
        &d.path().join("o.pcap"),
        1,
    );
    assert_eq!(got.len(), expected.len(), "no packet may be dropped");
    for (i, ((_, g), e)) in got.iter().zip(&expected).enumerate() {
        assert!(
            g == e,
            "packet {i} (flow {:?}): got {g:02x?}, want {e:02x?}",
            events[i]
        );
    }
    // The phases really mixed: old flows sent after each change, and pool 2 skipped the
    // pairs still held from pool 1.
    for k in 1..3 {
        assert!(events[starts[k]..].iter().any(|&(f, _)| f < 50));
    }
    assert!(public[50..90]
        .iter()
        .all(|p| p.unwrap().1 >= 2025 || p.unwrap().0[3] == 2));
}

/// The NAT pool changes mid-replay with two workers. Each worker takes public pairs from
/// its own part of the pool in force (so which pair a flow gets depends on the worker,
/// not predicted here); what is checked per packet: the packet is the original with only
/// the source translated (checksums rebuilt from scratch by etherparse must match), each
/// flow keeps one pair, that pair lies in the pool in force at the flow's first packet,
/// and no two flows of a protocol share one. Nothing is dropped.
#[test]
fn nat_pool_changed_mid_replay_with_two_workers() {
    let (events, starts) = phased_events(&[200, 200], 1000);
    let proto = |f: usize| if f.is_multiple_of(2) { 17u8 } else { 6 };
    let inside = |f: usize| {
        (
            [10, 1, (f / 200) as u8, (f % 200 + 1) as u8],
            30_000 + f as u16,
        )
    };
    let server = |f: usize| ([198, 18, 0, (f % 7 + 1) as u8], 443);
    let pools: [([u8; 4], std::ops::RangeInclusive<u16>); 2] = [
        ([198, 51, 100, 1], 2000..=2999),
        ([203, 0, 113, 9], 3000..=3999),
    ];
    let payload = |i: usize| format!("event {i}").into_bytes();
    let input: Vec<Vec<u8>> = events
        .iter()
        .enumerate()
        .map(|(i, &(f, _))| l4(proto(f), inside(f), server(f), &payload(i)))
        .collect();
    let chain = "[[nf]]\nname = \"nat\"\nkind = \"nat\"\npublic = \"198.51.100.1\"\nports = \"2000-2999\"\n";
    let changes = [format!("{} nat pool 203.0.113.9 3000-3999", starts[1])];
    let d = tempdir();
    let got = run_with_changes(
        chain,
        &trace_of(&input),
        &changes,
        &d.path().join("o.pcap"),
        2,
    );
    assert_eq!(got.len(), input.len(), "no packet may be dropped");
    let mut pairs = common::nat::PublicPairs::new(400);
    let mut in_new_pool = 0;
    for (i, ((_, g), &(f, _))) in got.iter().zip(&events).enumerate() {
        let first = pairs.check(
            (i, f, proto(f)),
            g,
            |seen| l4(proto(f), seen, server(f), &payload(i)),
            &pools,
            || usize::from(i >= starts[1]),
        );
        in_new_pool += first.unwrap_or(0);
    }
    // The phases mixed: old flows kept sending after the change, new ones started.
    assert!(events[starts[1]..].iter().any(|&(f, _)| f < 200));
    assert_eq!(in_new_pool, 200);
}

/// FNV-1a from a basis and splitmix64's finaliser: the backend-name hashes the Maglev doc
/// specifies (h1 and h2 of the paper).
fn fnv1a(basis: u64, b: &[u8]) -> u64 {
    b.iter().fold(basis, |h, &x| {
        (h ^ u64::from(x)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn splitmix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The paper's Pseudocode 1, written from the paper: backend i's permutation is
/// `(offset + j * skip) mod M`; in turn (names in order, `weight` turns each per round)
/// each takes its next preferred slot still empty, until the table is full.
fn maglev_reference(backends: &[(String, u32)], m: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..backends.len()).filter(|&i| backends[i].1 > 0).collect();
    order.sort_by(|&a, &b| backends[a].0.cmp(&backends[b].0));
    let perm: Vec<(u64, u64)> = backends
        .iter()
        .map(|(name, _)| {
            let offset = splitmix(fnv1a(0xcbf2_9ce4_8422_2325, name.as_bytes())) % m;
            let skip = splitmix(fnv1a(0x6c62_272e_07bb_0142, name.as_bytes())) % (m - 1) + 1;
            (offset, skip)
        })
        .collect();
    let mut next = vec![0u64; backends.len()];
    let mut entry = vec![usize::MAX; m as usize];
    let mut filled = 0;
    loop {
        for &i in &order {
            for _ in 0..backends[i].1 {
                let (offset, skip) = perm[i];
                let mut c = ((offset + next[i] * skip) % m) as usize;
                while entry[c] != usize::MAX {
                    next[i] += 1;
                    c = ((offset + next[i] * skip) % m) as usize;
                }
                entry[c] = i;
                next[i] += 1;
                filled += 1;
                if filled == m {
                    return entry;
                }
            }
        }
    }
}

/// Maglev's backends change while flows run: tracked flows keep their backend while it
/// stays in the set (whatever its new weight), flows of removed backends and new flows
/// follow the new lookup table, computed here by the reference fill above; with 1 and 2
/// workers, and 2 workers × 2 stages.
#[test]
fn maglev_backends_changed_mid_replay_follow_the_reference_table() {
    use std::hash::BuildHasher;
    const M: u64 = 65537;
    const SEED: u64 = 7;
    const VIP: [u8; 4] = [203, 0, 113, 10];
    let sets: [Vec<(String, u32)>; 2] = [
        (1..=5)
            .map(|i| (format!("10.1.0.{i}"), if i == 2 { 2 } else { 1 }))
            .collect(),
        [(1, 1), (2, 1), (4, 3), (6, 1), (7, 1)]
            .iter()
            .map(|&(i, w)| (format!("10.1.0.{i}"), w))
            .collect(),
    ];
    let tables = [maglev_reference(&sets[0], M), maglev_reference(&sets[1], M)];
    let hasher = foldhash::fast::FixedState::with_seed(SEED);
    let (events, starts) = phased_events(&[300, 300], 1500);
    let client = |f: usize| {
        (
            [10, 99, (f / 250) as u8, (f % 250) as u8],
            20_000 + f as u16,
        )
    };
    let proto = |f: usize| if f.is_multiple_of(3) { 17u8 } else { 6 };
    let pick = |f: usize, k: usize| -> String {
        let (a, port) = client(f);
        let mut key = catena::flow::FlowKey {
            src: [0; 16],
            dst: [0; 16],
            sport: port,
            dport: 80,
            proto: proto(f),
            family: 4,
        };
        key.src[..4].copy_from_slice(&a);
        key.dst[..4].copy_from_slice(&VIP);
        let h = hasher.hash_one(catena::flow::WideKey(key));
        let slot = ((u128::from(h) * u128::from(M)) >> 64) as usize;
        sets[k][tables[k][slot]].0.clone()
    };
    let mut tracked: Vec<Option<String>> = vec![None; 600];
    let (mut input, mut expected) = (Vec::new(), Vec::new());
    let (mut kept, mut rehashed, mut moved_new) = (0, 0, 0);
    for (i, &(f, _)) in events.iter().enumerate() {
        let k = (i >= starts[1]) as usize;
        let b = match &tracked[f] {
            Some(b) if sets[k].iter().any(|(n, _)| n == b) => {
                kept += (k == 1) as usize;
                b.clone()
            }
            Some(_) => {
                rehashed += 1;
                pick(f, k)
            }
            None => {
                moved_new += (k == 1 && pick(f, 0) != pick(f, 1)) as usize;
                pick(f, k)
            }
        };
        tracked[f] = Some(b.clone());
        let pl = format!("event {i}");
        let addr: std::net::Ipv4Addr = b.parse().unwrap();
        input.push(l4(proto(f), client(f), (VIP, 80), pl.as_bytes()));
        expected.push(l4(proto(f), client(f), (addr.octets(), 80), pl.as_bytes()));
    }
    let list = |k: usize| -> Vec<String> {
        sets[k]
            .iter()
            .map(|(a, w)| format!("{{ addr = \"{a}\", weight = {w} }}"))
            .collect()
    };
    let chain = format!(
        "[[nf]]\nname = \"lb\"\nkind = \"maglev\"\nvip = \"203.0.113.10\"\nseed = {SEED}\n\
         table_size = {M}\nbackends = [{}]\n",
        list(0).join(", ")
    );
    let cmd: Vec<String> = sets[1].iter().map(|(a, w)| format!("{a}:{w}")).collect();
    let changes = [format!("{} lb backends {}", starts[1], cmd.join(" "))];
    let d = tempdir();
    let trace = trace_of(&input);
    // Also 2 workers × 2 stages: a pass-all filter on the first stage, the Maglev on the
    // second, so the change reaches a stage other than the one the input enters.
    let staged = format!(
        "stages = [[\"pass\"], [\"lb\"]]\n[[nf]]\nname = \"pass\"\nkind = \"ip_filter\"\n\
         default = \"allow\"\nrules = []\n{chain}"
    );
    for (workers, chain, how) in [
        (1, &chain, "one stage"),
        (2, &chain, "one stage"),
        (2, &staged, "2 stages"),
    ] {
        let got = run_with_changes(chain, &trace, &changes, &d.path().join("o.pcap"), workers);
        assert_eq!(got.len(), expected.len(), "no packet may be dropped");
        for (i, ((_, g), e)) in got.iter().zip(&expected).enumerate() {
            assert!(
                g == e,
                "{workers} workers, {how}, packet {i} (flow {}): got {g:02x?}, want {e:02x?}",
                events[i].0
            );
        }
    }
    // The change mattered: old flows kept their backend, others were rehashed, and new
    // flows went where the old table would not have sent them.
    assert!(
        kept > 100 && rehashed > 20 && moved_new > 20,
        "{kept} {rehashed} {moved_new}"
    );
}
