//! `fastpath = "auto"`: switching consolidation on and off mid-trace never changes output.
//! Switching is forced on a schedule (a test hook) so the runs are deterministic: every
//! few chunks, irregularly, and while control commands change NFs; the output pcap, the
//! per-NF counters and stats, and the flow records equal those of a run without FastPath.
//! Switching off hands the entries' counts to the NFs and flushes the table, so entries
//! recorded before cannot outlive NF state that moved on while off.

mod common;
mod fastpath_common;

use std::path::Path;

use catena::io::gen::{generate, GenOptions, Profile as GenProfile};
use catena::io::Trace;
use catena::optimise::fastpath::FastConfig;
use catena::runtime::control::Scheduled;
use catena::runtime::{Chain, ChainConfig, NoProgress, RunOptions, Runner, Summary};
use fastpath_common::{run_chain, Outcome};

/// `catena run --loops 8 -i TRACE CHAIN ARGS`: its standard output, the run asserted to
/// succeed. Eight loops of the merged trace (~22,500 chunks) reach auto's first trial
/// (chunk 16,384).
fn run_looped(trace: &Path, chain: &Path, args: &[&str]) -> String {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_catena"))
        .args(["run", "--loops", "8", "-i"])
        .arg(trace)
        .arg(chain)
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// F filter (per-rule counters), G filter refusing TCP flows on flags, N NAT (timeouts
/// short enough to expire mappings mid-trace), M Maglev, O flow monitor (records).
fn nf_toml(kind: char, i: usize, vip: &str, dir: &Path, tag: &str) -> String {
    match kind {
        'F' => format!(
            "[[nf]]\nname = \"f{i}\"\nkind = \"ip_filter\"\nrules = [\"deny udp dst port 53\", \"allow tcp port 80 or 443\", \"deny icmp\", \"allow ip\", \"allow ip6\"]\n"
        ),
        'G' => format!(
            "[[nf]]\nname = \"g{i}\"\nkind = \"ip_filter\"\nrules = [\"deny tcp flags syn,!ack and dst port 22\", \"allow tcp flags ack\", \"deny udp port 123\", \"allow all\"]\n"
        ),
        'N' => format!(
            "[[nf]]\nname = \"n{i}\"\nkind = \"nat\"\ninside = \"10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16\"\npublic = \"198.51.100.{}\"\ncapacity = 8192\nudp_timeout = 5\ntcp_linger = 1\n",
            i + 1
        ),
        'M' => format!(
            "[[nf]]\nname = \"m{i}\"\nkind = \"maglev\"\nvip = \"{vip}\"\ntable_size = 251\ncapacity = 4096\ntimeout = 5\nbackends = [{{ addr = \"10.200.0.1\" }}, {{ addr = \"10.200.0.2\" }}, {{ addr = \"10.200.0.3\", weight = 2 }}]\n"
        ),
        'O' => format!(
            "[[nf]]\nname = \"o{i}\"\nkind = \"flow_monitor\"\ntimeout = 5\ncapacity = 4096\nrecords = \"{}\"\n",
            dir.join(format!("o{i}-{tag}.jsonl")).display()
        ),
        _ => unreachable!(),
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Mode<'a> {
    Off,
    On,
    /// Auto with these forced switches (chunk numbers).
    Forced(&'a [u64]),
    /// Auto deciding by measured cost.
    Measured,
}

fn run(
    chain: &str,
    vip: &str,
    trace: &Trace,
    mode: Mode,
    fast: FastConfig,
    schedule: &[Scheduled],
    dir: &Path,
) -> Outcome {
    let tag = match mode {
        Mode::Off => "off",
        Mode::On => "on",
        Mode::Forced(_) => "forced",
        Mode::Measured => "auto",
    };
    let mut text = "name = \"auto\"\n[input]\nports = 3\n".to_string();
    for (i, k) in chain.chars().enumerate() {
        text += &nf_toml(k, i, vip, dir, tag);
    }
    let cfg = ChainConfig::parse(&text, "auto.toml").expect("config");
    let mut c = Chain::from_config(&cfg).expect("chain");
    if mode != Mode::Off {
        c.enable_fastpath(fast).expect("fastpath");
        c.fastpath_auto = matches!(mode, Mode::Forced(_) | Mode::Measured);
    }
    let hook = |r: &mut Runner| {
        if let Mode::Forced(at) = mode {
            r.force_auto_switches(at.to_vec());
        }
    };
    run_chain(c, chain, trace, hook, schedule, dir, tag)
}

fn visible(x: &Summary) -> String {
    serde_json::to_string(&(
        &x.nfs,
        &x.ports,
        x.packets_in,
        x.packets_out,
        x.packets_dropped,
        x.bytes_out,
        &x.input_drops,
    ))
    .unwrap()
}

/// Runs `chain` off, on, and auto with each forced schedule; asserts equal output and
/// returns the forced runs' summaries.
fn equal_across_switches(
    chain: &str,
    vip: &str,
    trace: &Trace,
    fast: FastConfig,
    schedules: &[&[u64]],
    changes: &[Scheduled],
) -> Vec<Summary> {
    let dir = common::tempdir();
    let d = dir.path();
    let off = run(chain, vip, trace, Mode::Off, fast, changes, d);
    let on = run(chain, vip, trace, Mode::On, fast, changes, d);
    assert!(off.pcap == on.pcap, "{chain}: on differs from off");
    let mut v = Vec::new();
    for at in schedules {
        let a = run(chain, vip, trace, Mode::Forced(at), fast, changes, d);
        let ctx = format!("chain {chain}, switches at {at:?}");
        assert!(off.pcap == a.pcap, "{ctx}: output pcaps differ");
        assert_eq!(
            visible(&off.summary),
            visible(&a.summary),
            "{ctx}: summaries differ"
        );
        assert_eq!(off.records, a.records, "{ctx}: flow records differ");
        let s = a.summary.fastpath_auto.expect("auto stats");
        assert_eq!(s.switches, at.len() as u64, "{ctx}");
        assert_eq!(s.on, at.len() % 2 == 0, "{ctx}");
        v.push(a.summary);
    }
    let m = run(chain, vip, trace, Mode::Measured, fast, changes, d);
    assert!(off.pcap == m.pcap, "{chain}: measured auto differs");
    assert_eq!(
        visible(&off.summary),
        visible(&m.summary),
        "{chain}: measured auto"
    );
    assert_eq!(off.records, m.records, "{chain}: measured auto records");
    v
}

fn every(k: u64, chunks: u64) -> Vec<u64> {
    (1..chunks / k).map(|i| i * k).collect()
}

fn merged() -> Trace {
    Trace::open(&common::dataset("bench/ndpi-ether-merged.pcap")).unwrap()
}

const VIP: &str = "192.168.1.1";

fn small(record_at: u8) -> FastConfig {
    FastConfig {
        entries: 512,
        timeout_ns: 30_000_000_000,
        record_at,
    }
}

#[test]
fn switching_mid_trace_never_changes_output_on_the_merged_trace() {
    let t = merged();
    let chunks = t.len() as u64 / 32;
    let often = every(3, chunks);
    let rare = every(401, chunks);
    let irregular: Vec<u64> = vec![1, 2, 50, 51, 52, 700, 1500, 1501, 2000];
    let odd: Vec<u64> = vec![10, 900, 1800];
    std::thread::scope(|sc| {
        for chain in ["FNMO", "GNMO", "OMNF"] {
            let (t, often, rare, irregular, odd) = (&t, &often, &rare, &irregular, &odd);
            sc.spawn(move || {
                let s = equal_across_switches(
                    chain,
                    VIP,
                    t,
                    small(1),
                    &[often, rare, irregular, odd],
                    &[],
                );
                // Consolidation really ran between switches (hits), so counts held in
                // entries had to be handed over at each switch off.
                for x in &s {
                    assert!(x.fastpath.unwrap().hits > 0, "{chain}: no hits");
                }
            });
        }
    });
}

#[test]
fn switching_with_changes_and_deferred_recording_stays_equal() {
    let t = merged();
    let n = t.len() as u64;
    let changes = vec![
        Scheduled {
            at: n / 4,
            nf: "f0".into(),
            cmd: "rules deny tcp port 443; allow udp; deny icmp; allow ip".into(),
        },
        Scheduled {
            at: n / 2,
            nf: "n1".into(),
            cmd: "pool 198.51.100.100 2000-2999".into(),
        },
        Scheduled {
            at: 3 * n / 4,
            nf: "m2".into(),
            cmd: "backends 10.200.0.1 10.200.0.4:2".into(),
        },
    ];
    let chunks = n / 32;
    equal_across_switches(
        "FNMO",
        VIP,
        &t,
        small(2),
        &[&every(5, chunks), &[100, 1200, 1201, 2500]],
        &changes,
    );
}

#[test]
fn switching_on_small_generated_flows_stays_equal() {
    let t = generate(&GenOptions {
        count: 12_000,
        flows: 300,
        ipv6_share: 0.2,
        seed: 11,
        ..GenOptions::profile(GenProfile::SmallFlows)
    })
    .expect("generate");
    let chunks = t.len() as u64 / 32;
    for chain in ["NN", "FNMONM"] {
        equal_across_switches(
            chain,
            "10.0.0.1",
            &t,
            small(1),
            &[&every(2, chunks), &[7, 8, 9, 200]],
            &[],
        );
    }
}

const FILTER_NAT: &str = "[[nf]]\nname = \"acl\"\nkind = \"ip_filter\"\nrules = [\"allow ip\"]\n[[nf]]\nname = \"nat\"\nkind = \"nat\"\ninside = \"10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16\"\npublic = \"198.51.100.1\"\n";
/// Two flow monitors: each does per-flow work on every packet that reaches it.
const MON2: &str = "[[nf]]\nname = \"mon1\"\nkind = \"flow_monitor\"\n[[nf]]\nname = \"mon2\"\nkind = \"flow_monitor\"\n";
/// A Maglev whose VIP no packet of the merged trace goes to (it passes them all).
const MAGLEV_AWAY: &str = "[[nf]]\nname = \"lb\"\nkind = \"maglev\"\nvip = \"192.168.2.110\"\nbackends = [{ addr = \"10.200.0.1\" }, { addr = \"10.200.0.2\" }]\n[[nf]]\nname = \"mon\"\nkind = \"flow_monitor\"\n";
const NAT2: &str = "[[nf]]\nname = \"nat2\"\nkind = \"nat\"\ninside = \"10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 198.51.100.0/24\"\npublic = \"198.51.100.2\"\n";

/// A chain with fewer than two NFs with per-flow state that a hit could skip (filter +
/// NAT; a filter only counts): auto stays off from the first chunk without a trial or a
/// timed chunk, the run is a plain one, and `check`, the summary and `--json` say so;
/// counters equal off's.
#[test]
fn cli_auto_stays_off_without_a_trial_where_the_chain_cannot_win() {
    let dir = common::tempdir();
    let chain = dir.path().join("c.toml");
    std::fs::write(&chain, format!("fastpath = \"auto\"\n{FILTER_NAT}")).unwrap();
    let bin = env!("CARGO_BIN_EXE_catena");
    let out = std::process::Command::new(bin)
        .arg("check")
        .arg(&chain)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("fastpath: auto: off without a trial: fewer than 2 NFs with per-flow state"),
        "{text}"
    );
    let trace = common::dataset("bench/ndpi-ether-merged.pcap");
    let run = |args: &[&str]| run_looped(&trace, &chain, args);
    let auto: serde_json::Value = serde_json::from_str(&run(&["--json"])).unwrap();
    let a = &auto["fastpath_auto"];
    assert!(
        a["static_off"]
            .as_str()
            .is_some_and(|s| s.contains("without a trial")),
        "{auto}"
    );
    assert_eq!(a["on"], false, "{auto}");
    assert_eq!(a["switches"], 0, "{auto}");
    assert_eq!(a["samples"], 0, "{auto}");
    // A plain run: no FastPath state at all.
    assert!(auto["fastpath"].is_null(), "{auto}");
    let off: serde_json::Value =
        serde_json::from_str(&run(&["--json", "--fastpath", "off"])).unwrap();
    assert_eq!(auto["nfs"], off["nfs"]);
    let human = run(&[]);
    assert!(
        human.contains("fastpath  auto: off without a trial"),
        "{human}"
    );
    // Two NATs: auto tries.
    std::fs::write(&chain, format!("fastpath = \"auto\"\n{FILTER_NAT}{NAT2}")).unwrap();
    let two: serde_json::Value = serde_json::from_str(&run(&["--json"])).unwrap();
    assert!(two["fastpath_auto"]["static_off"].is_null(), "{two}");
    assert!(
        two["fastpath_auto"]["samples"].as_u64().unwrap() > 0,
        "{two}"
    );
}

/// The real mixed chain of 4 (filter, NAT, Maglev, monitor) on the merged trace: the NAT
/// translates about a third of the packets and the Maglev none (no packet is for its
/// VIP), so a hit would skip about one NF's per-flow work a packet, under the chain rule's
/// two: auto measures off but makes no trial, says so, and counts as off does.
#[test]
fn cli_auto_makes_no_trial_where_the_traffic_gives_a_hit_too_little() {
    let dir = common::tempdir();
    let chain = dir.path().join("c.toml");
    std::fs::write(
        &chain,
        format!("fastpath = \"auto\"\n{FILTER_NAT}{MAGLEV_AWAY}"),
    )
    .unwrap();
    let trace = common::dataset("bench/ndpi-ether-merged.pcap");
    let run = |args: &[&str]| run_looped(&trace, &chain, args);
    let auto: serde_json::Value = serde_json::from_str(&run(&["--json"])).unwrap();
    let a = &auto["fastpath_auto"];
    assert!(a["static_off"].is_null(), "{auto}");
    assert_eq!(a["on"], false, "{auto}");
    assert_eq!(a["switches"], 0, "{auto}");
    assert_eq!(a["cycles_on"], 0, "{auto}");
    assert!(a["cycles_off"].as_u64().unwrap() > 0, "{auto}");
    assert!(a["skipped"].as_u64().unwrap() >= 1, "{auto}");
    let w = a["work_permille"].as_u64().unwrap();
    assert!((500..2000).contains(&w), "{auto}");
    assert_eq!(auto["fastpath"]["hits"], 0, "{auto}");
    assert_eq!(auto["fastpath"]["misses"], 0, "{auto}");
    let off: serde_json::Value =
        serde_json::from_str(&run(&["--json", "--fastpath", "off"])).unwrap();
    assert_eq!(auto["nfs"], off["nfs"]);
    let human = run(&[]);
    assert!(
        human.contains("trials not made: the traffic gave a hit"),
        "{human}"
    );
}

/// `fastpath = "auto"` and `--fastpath auto`: check says so, the run reports the decision
/// and both measured costs (the trace is long enough for a trial of the other mode), and
/// the NFs' counters equal those of `--fastpath off`; a bad word is a one-line error.
#[test]
fn cli_auto_reports_decision_and_costs() {
    let dir = common::tempdir();
    let chain = dir.path().join("c.toml");
    // Two NATs: enough per-flow state for auto to try (filter + NAT alone is decided off
    // from the chain: `cli_auto_stays_off_without_a_trial_where_the_chain_cannot_win`);
    // on the merged trace they translate about a third of the packets each, so two
    // monitors first give a hit enough work a packet for a trial
    // (`cli_auto_makes_no_trial_where_the_traffic_gives_a_hit_too_little`).
    let body = format!("{MON2}{FILTER_NAT}{NAT2}");
    let body = body.as_str();
    std::fs::write(&chain, format!("fastpath = \"auto\"\n{body}")).unwrap();
    let bin = env!("CARGO_BIN_EXE_catena");
    let out = std::process::Command::new(bin)
        .arg("check")
        .arg(&chain)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("fastpath: auto"), "{text}");
    let trace = common::dataset("bench/ndpi-ether-merged.pcap");
    let run = |args: &[&str]| {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        serde_json::from_str::<serde_json::Value>(&run_looped(&trace, &chain, &a)).unwrap()
    };
    let auto = run(&[]);
    let a = &auto["fastpath_auto"];
    assert!(a["cycles_on"].as_u64().unwrap() > 0, "{auto}");
    assert!(a["cycles_off"].as_u64().unwrap() > 0, "{auto}");
    assert!(a["switches"].as_u64().unwrap() >= 1, "{auto}");
    assert!(a["on"].is_boolean(), "{auto}");
    let off = run(&["--fastpath", "off"]);
    assert!(off["fastpath"].is_null() && off["fastpath_auto"].is_null());
    assert_eq!(auto["nfs"], off["nfs"]);
    // `--fastpath auto` on a file without `fastpath`, and `--fastpath` alone still on.
    std::fs::write(&chain, body).unwrap();
    let cli = run(&["--fastpath", "auto"]);
    assert!(
        cli["fastpath_auto"]["samples"].as_u64().unwrap() > 0,
        "{cli}"
    );
    assert_eq!(cli["nfs"], off["nfs"]);
    let on = run(&["--fastpath"]);
    assert!(on["fastpath"]["hits"].as_u64().unwrap() > 0 && on["fastpath_auto"].is_null());
    let human = std::process::Command::new(bin)
        .args(["run", "-i"])
        .arg(&trace)
        .arg(&chain)
        .args(["--fastpath", "auto"])
        .output()
        .unwrap();
    let h = String::from_utf8_lossy(&human.stdout);
    assert!(h.contains("fastpath  auto: "), "{h}");
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "fastpath = \"sometimes\"\n").unwrap();
    let o = std::process::Command::new(bin)
        .arg("check")
        .arg(&bad)
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success()
            && e.contains("bad.toml:1:")
            && e.contains("\"auto\"")
            && e.lines().count() == 1,
        "{e}"
    );
}

fn tcp(sport: u16, flags: u8) -> Vec<u8> {
    let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4([10, 0, 0, 1], [192, 0, 2, 7], 64)
        .tcp(sport, 80, 1000, 8192);
    let b = match flags {
        0x02 => b.syn(),
        0x11 => b.fin().ack(1),
        _ => b.ack(1),
    };
    let mut v = Vec::new();
    b.write(&mut v, b"payload!").unwrap();
    v
}

/// Each frame alone in its chunk (31 ARP frames after it), so a forced switch before
/// chunk i falls just before frame i.
fn one_per_chunk(frames: &[(u64, Vec<u8>)]) -> Trace {
    let mut arp = vec![0xffu8; 6];
    arp.extend_from_slice(&[2, 0, 0, 0, 0, 9, 0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
    arp.resize(60, 0);
    let mut all: Vec<(u64, &[u8])> = Vec::new();
    for (ts, f) in frames {
        all.push((*ts, f));
        all.extend(std::iter::repeat_n((*ts, arp.as_slice()), 31));
    }
    Trace::from_packets(
        catena::packet::LinkKind::Ethernet,
        catena::io::PcapHeader::new(1, false),
        all,
    )
}

/// A flow consolidated while on ends (FIN) while off; its 5-tuple comes back after
/// switching on. The entry recorded before must be gone: the NFs ended that flow while
/// FastPath was not looking, so a hit would run their state functions on a dead flow.
/// (Chains with 2 NFs with per-flow state: with one, auto leaves FastPath off from the
/// chain and there is nothing to switch.)
#[test]
fn a_flow_that_ends_while_off_is_not_hit_after_switching_on() {
    const SEC: u64 = 1_000_000_000;
    let frames: Vec<(u64, Vec<u8>)> = [0x02, 0x10, 0x10, 0x11, 0x02, 0x10, 0x10]
        .iter()
        .enumerate()
        .map(|(i, &f)| (i as u64 * SEC, tcp(4000, f)))
        .collect();
    let t = one_per_chunk(&frames);
    for chain in ["OO", "NO", "FNO"] {
        let s = equal_across_switches(chain, VIP, &t, small(1), &[&[3, 4]], &[]);
        assert!(s[0].fastpath.unwrap().hits >= 2, "{chain}");
    }
}

/// 16,384 one-packet UDP flows: every packet of a trial of on is recorded.
fn one_packet_flows() -> Trace {
    generate(&GenOptions {
        count: 16_384,
        flows: 16_384,
        ipv6_share: 0.0,
        seed: 23,
        ..GenOptions::profile(GenProfile::SmallFlows)
    })
    .expect("generate")
}

/// Two monitors, a filter and a NAT: a chain auto tries (it can win).
fn monitors_filter_nat() -> ChainConfig {
    let text = format!("name = \"auto\"\n[input]\nports = 1\n{MON2}{FILTER_NAT}");
    ChainConfig::parse(&text, "auto.toml").expect("config")
}

/// A runner of `cfg` with `fastpath = "auto"`, recording at a flow's first packet.
fn auto_runner(cfg: &ChainConfig, t: &Trace) -> Runner {
    let mut c = Chain::from_config(cfg).expect("chain");
    c.enable_fastpath(FastConfig {
        record_at: 1,
        ..FastConfig::default()
    })
    .expect("fastpath");
    c.fastpath_auto = true;
    Runner::new(c, t.max_packet_len())
}

/// Progress reports come where the worker already compares its packet count, as auto's
/// looks do, but only auto's own looks may plan: session 22's first build had every
/// report call `Auto::plan`, which took the quiet chunks between trials as over and
/// turned the bench chains' 2 switches into 6, and no test caught it. A trace of
/// 16,384 one-packet flows, looped past auto's first trial (chunk 16,384): every trial of on meets an empty table and records
/// every packet, so it loses by far (one trial, 2 switches, whatever the load); the
/// decisions with a report every few chunks, every few hundred and at the default are
/// the same as with none.
#[test]
fn progress_reports_leave_autos_decisions_alone() {
    let t = one_packet_flows();
    let cfg = monitors_filter_nat();
    let decisions = |every: u64| {
        let mut r = auto_runner(&cfg, &t);
        r.report_every(every);
        let opts = RunOptions {
            loops: 36,
            ..Default::default()
        };
        let s = r.run(&t, &opts, &mut NoProgress).expect("run");
        let a = s.fastpath_auto.expect("auto stats");
        (a.switches, a.on, a.samples, a.skipped)
    };
    let quiet = decisions(u64::MAX);
    assert_eq!(quiet.0, 2, "one trial of on, lost: {quiet:?}");
    for every in [65_536, 7_777, 100] {
        assert_eq!(decisions(every), quiet, "a report every {every} packets");
    }
}

/// The bench runs a runner twice (first packets, then later ones): the second run must
/// plan from where the first stopped. A first run of 512 chunks took auto's 16,376 quiet
/// chunks before its measurement at once, and the second run met a trial ~8 chunks in
/// (session 25: every measured chain of `bench fastpath` made one in its later packets,
/// its table's page faults reading as auto 4-12 % over off). Two runs of 1 and 4 loops
/// (2,560 chunks, under the first trial at 16,384) decide as one run of 5: no switch, no
/// timed chunk.
#[test]
fn a_second_run_on_the_same_runner_goes_on_where_the_first_stopped() {
    let t = one_packet_flows();
    let cfg = monitors_filter_nat();
    let runner = || auto_runner(&cfg, &t);
    let decided = |s: Summary| {
        let a = s.fastpath_auto.expect("auto stats");
        (a.switches, a.on, a.samples, a.skipped)
    };
    let loops = |n: u64| RunOptions {
        loops: n,
        ..Default::default()
    };
    let one = decided(runner().run(&t, &loops(5), &mut NoProgress).expect("run"));
    assert_eq!(one, (0, false, 0, 0), "one run of 5 loops");
    let mut r = runner();
    r.run(&t, &loops(1), &mut NoProgress).expect("run");
    let two = decided(r.run(&t, &loops(4), &mut NoProgress).expect("run"));
    assert_eq!(two, one, "runs of 1 and 4 loops on one runner");
}
