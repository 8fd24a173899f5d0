//! The four Freeflow apps as pipeline programs (examples/pipeline/*.stv) against the native
//! NFs: same verdict, egress port and bytes for every packet, and the same counters, on
//! every capture in the datasets and on generated traces that exercise learning, idle
//! expiry and full tables. The firewall program also against tcpdump's filter.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use catena::io::Trace;
use catena::nfs::registry::build_in;
use catena::nfs::{Context, Nf};
use catena::packet::{Batch, LinkKind, Packet, Verdict, MAX_BATCH};
use common::*;

fn examples() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/pipeline"))
}

fn nf(kind: &str, toml_text: &str) -> Box<dyn Nf> {
    let table: toml::Table = toml::from_str(toml_text).unwrap();
    build_in("t", kind, &table, &examples()).unwrap_or_else(|e| panic!("{e}"))
}

/// The native NF and its program with the same parameters.
fn pair(app: &str, params: &str) -> (Box<dyn Nf>, Box<dyn Nf>) {
    (
        nf(app, params),
        nf("pipeline", &format!("program = \"{app}.stv\"\n{params}")),
    )
}

/// One packet as both NFs see it.
struct Input<'a> {
    link: LinkKind,
    ts_ns: u64,
    in_port: u16,
    bytes: &'a [u8],
}

/// Runs both NFs over the same packets in batches and compares every packet's outcome.
/// Returns how many packets were compared.
fn compare<'a>(
    what: &str,
    a: &mut dyn Nf,
    b: &mut dyn Nf,
    ports: u16,
    packets: impl Iterator<Item = Input<'a>>,
) -> usize {
    let cx = Context { ports };
    let mut n = 0;
    let mut ins: Vec<Input> = Vec::with_capacity(MAX_BATCH);
    let mut packets = packets.peekable();
    while packets.peek().is_some() {
        ins.clear();
        ins.extend(packets.by_ref().take(MAX_BATCH));
        let mk = || {
            let mut batch = Batch::new();
            for i in &ins {
                let mut p = Packet::from_bytes(i.bytes);
                let m = p.meta_mut();
                m.link = i.link;
                m.ts_ns = i.ts_ns;
                m.in_port = i.in_port;
                batch.push(p);
            }
            batch
        };
        let (mut x, mut y) = (mk(), mk());
        a.process(&mut x, &cx);
        b.process(&mut y, &cx);
        for (k, (p, q)) in x.iter().zip(y.iter()).enumerate() {
            let (pm, qm) = (p.meta(), q.meta());
            let reason = |nf: &dyn Nf, v: Verdict| match v {
                Verdict::Drop(r) => nf.profile().drop_reasons[r as usize].to_string(),
                Verdict::Out(o) => format!("out {o}"),
            };
            let (va, vb) = (reason(a, pm.verdict), reason(b, qm.verdict));
            assert_eq!(va, vb, "{what}: packet {} verdicts differ", n + k);
            if matches!(pm.verdict, Verdict::Out(_)) {
                assert_eq!(
                    pm.egress,
                    qm.egress,
                    "{what}: packet {} egress differs",
                    n + k
                );
            }
            assert!(
                p.data() == q.data(),
                "{what}: packet {} bytes differ",
                n + k
            );
        }
        n += ins.len();
    }
    n
}

/// The native counters, by the name the program's counter has.
fn same_stats(what: &str, a: &dyn Nf, b: &dyn Nf, table: &str) {
    let sb = b.stats();
    for (k, v) in a.stats() {
        let name = match &*k {
            "entries" => format!("{table}.entries"),
            "table_full" => format!("{table}.full"),
            o => o.to_string(),
        };
        let got = sb.iter().find(|(n, _)| *n == name).map_or(0, |(_, v)| *v);
        assert_eq!(v, got, "{what}: native {k} = {v}, program {name} = {got}");
    }
}

/// Deterministic ingress ports, spread like the runner's seeded draw.
fn port_of(i: usize, ports: u16) -> u16 {
    let mut x = (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 29;
    (x % ports as u64) as u16
}

const APPS: &[(&str, &str, u16, &str)] = &[
    ("wire", "", 2, "-"),
    ("mac_switch", "", 5, "mac"),
    ("ipv4_switch", "", 5, "hosts"),
    ("firewall", "allow_ports = [80, 443, 53]", 5, "hosts"),
];

#[test]
fn every_capture_gives_the_native_output_and_counters() {
    let caps = all_captures();
    let traces: Vec<(String, Trace)> = caps
        .iter()
        .filter_map(|p| Some((p.display().to_string(), Trace::open(p).ok()?)))
        .collect();
    assert!(traces.len() > 1300, "only {} captures opened", traces.len());
    for &(app, params, ports, table) in APPS {
        // One NF pair across all captures, so learned state carries from file to file
        // as a long run's would.
        let (mut a, mut b) = pair(app, params);
        let mut total = 0;
        for (name, t) in &traces {
            let inputs = (0..t.len()).map(|i| Input {
                link: t.link(),
                ts_ns: t.record(i).ts_ns,
                in_port: port_of(total + i, ports),
                bytes: t.packet(i),
            });
            total += compare(&format!("{app} on {name}"), &mut *a, &mut *b, ports, inputs);
        }
        same_stats(app, &*a, &*b, table);
        assert!(total > 300_000, "{app}: only {total} packets");
    }
}

/// A small xorshift generator, so generated traces are the same on every run.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Frames among 40 hosts with VLAN tags, ARP, IPv6, fragments, TCP/UDP/ICMP on a handful
/// of ports, cut short at random; capture time moves 0–3 s per packet so idle timeouts
/// of a few seconds expire entries all along.
fn generated(seed: u64, n: usize) -> Vec<(u64, u16, Vec<u8>)> {
    let mut r = Rng(seed);
    let mut ts = 1_000_000_000_000u64;
    let mut out = Vec::new();
    for i in 0..n {
        ts += r.below(3_000_000_000);
        let (s, d) = (r.below(40) as u8, r.below(40) as u8);
        let mut b = vec![2, 0, 0, 0, 0, d, 2, 0, 0, 0, 0, s];
        for _ in 0..[0, 0, 0, 1, 2, 9][r.below(6) as usize] {
            b.extend_from_slice(&[0x81, 0x00, 0x00, r.below(4) as u8]);
        }
        match r.below(10) {
            0 => {
                b.extend_from_slice(&[0x08, 0x06]);
                b.extend_from_slice(&[0u8; 28]);
            }
            1 => {
                b.extend_from_slice(&[0x86, 0xdd, 0x60]);
                b.extend_from_slice(&[0u8; 50]);
            }
            _ => {
                b.extend_from_slice(&[0x08, 0x00]);
                let ihl = if r.below(8) == 0 { 6 } else { 5 };
                let proto = [6u8, 17, 1, 6, 17][r.below(5) as usize];
                let frag: u16 = match r.below(12) {
                    0 => 0x2000,
                    1 => 0x0010,
                    _ => 0,
                };
                let mut ip = vec![0x40 | ihl, 0, 0, 40, 0, 1];
                ip.extend_from_slice(&frag.to_be_bytes());
                ip.extend_from_slice(&[64, proto, 0, 0, 10, 0, 0, s, 10, 0, 0, d]);
                ip.resize(ihl as usize * 4, 0);
                let pl = [80u16, 443, 53, 22, 8080];
                let sp = pl[r.below(5) as usize];
                let dp = pl[r.below(5) as usize];
                ip.extend_from_slice(&sp.to_be_bytes());
                ip.extend_from_slice(&dp.to_be_bytes());
                ip.extend_from_slice(&[0u8; 16]);
                b.extend_from_slice(&ip);
            }
        }
        if r.below(10) == 0 {
            let cut = r.below(b.len() as u64 + 1) as usize;
            b.truncate(cut);
        }
        out.push((ts, port_of(i, 5), b));
    }
    out
}

#[test]
fn generated_traces_with_timeouts_and_full_tables_match() {
    for &(app, params, ports, table) in APPS {
        for (seed, extra) in [
            (7, "timeout = 5\ncapacity = 16"),
            (11, "timeout = 2.5\ncapacity = 1"),
            (13, "capacity = 8"),
        ] {
            if app == "wire" && seed != 7 {
                continue;
            }
            let params = if app == "wire" {
                String::new()
            } else {
                format!("{params}\n{extra}")
            };
            let (mut a, mut b) = pair(app, &params);
            let pkts = generated(seed, 20_000);
            for (link, what) in [(LinkKind::Ethernet, "ethernet"), (LinkKind::RawIp, "raw")] {
                let inputs = pkts.iter().map(|(ts, port, bytes)| Input {
                    link,
                    ts_ns: *ts,
                    in_port: *port,
                    // As raw IP, start at the IP header (or wherever the frame was cut).
                    bytes: if link == LinkKind::RawIp {
                        &bytes[bytes.len().min(14)..]
                    } else {
                        bytes
                    },
                });
                compare(
                    &format!("{app} ({params}) {what} seed {seed}"),
                    &mut *a,
                    &mut *b,
                    ports,
                    inputs,
                );
            }
            same_stats(app, &*a, &*b, table);
            if app != "wire" {
                let full = a
                    .stats()
                    .iter()
                    .find(|(k, _)| k == "table_full")
                    .map_or(0, |x| x.1);
                assert!(
                    full > 0 || seed == 7,
                    "{app} seed {seed}: the table never filled"
                );
            }
        }
    }
}

/// tcpdump's filter for the firewall's policy (as tests/apps_oracle.rs spells it).
fn bpf(ports: &[u16], ethernet: bool) -> String {
    let ps: Vec<String> = ports.iter().map(|p| format!("port {p}")).collect();
    let core = format!("ip and (tcp or udp) and ({})", ps.join(" or "));
    if ethernet {
        format!("({core}) or (vlan and (({core}) or (vlan and {core})))")
    } else {
        core
    }
}

#[test]
fn firewall_program_passes_what_tcpdump_selects() {
    require("tcpdump");
    let dir = tempdir();
    let program = examples().join("firewall.stv");
    let mut compared = 0;
    for ports in [&[80u16, 443][..], &[53], &[22, 8080, 5228, 1900]] {
        let list: Vec<String> = ports.iter().map(|p| p.to_string()).collect();
        let chain = format!(
            "[[nf]]\nname = \"fw\"\nkind = \"pipeline\"\nprogram = \"{}\"\nallow_ports = [{}]\n",
            program.display(),
            list.join(", ")
        );
        for rel in [
            "bench/ndpi-ether-merged.pcap",
            "ndpi/pcap/KakaoTalk_chat.pcap",
            "ndpi/pcap/ocs.pcap",
            "retina/tls_ciphers.pcap",
            "suricata-verify/tests/detect-vlan-id/input.pcap",
            "suricata-verify/tests/arp/detect-arp-03-vlan/input.pcap",
        ] {
            let src = dataset(rel);
            let (ours, theirs) = (dir.path().join("o.pcap"), dir.path().join("t.pcap"));
            let trace = Trace::open(&src).unwrap();
            let s = run_chain(&chain, &trace, Some(&ours));
            let st = Command::new("tcpdump")
                .arg("-r")
                .arg(&src)
                .arg("-w")
                .arg(&theirs)
                .arg(bpf(ports, trace.link() == LinkKind::Ethernet))
                .output()
                .unwrap();
            assert!(
                st.status.success(),
                "tcpdump: {}",
                String::from_utf8_lossy(&st.stderr)
            );
            let (a, b) = (packets(&ours), packets(&theirs));
            assert_eq!(
                a.len(),
                b.len(),
                "{rel} {ports:?}: program passed {}, tcpdump {}",
                a.len(),
                b.len()
            );
            assert!(
                a == b,
                "{rel} {ports:?}: passed packets differ from tcpdump's"
            );
            assert_eq!(s.packets_in, s.packets_out + s.packets_dropped);
            compared += a.len();
        }
    }
    assert!(compared > 1000, "only {compared} packets compared");
}

/// Each example chain builds (its program compiles) and reads the same input, ports and
/// seed as the native example it mirrors.
#[test]
fn example_chains_mirror_the_native_ones() {
    use catena::runtime::{Chain, ChainConfig};
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    for f in [
        "wire",
        "mac_switch",
        "ipv4_switch",
        "firewall",
        "vlan_switch",
    ] {
        let cfg = ChainConfig::load(&examples().join(format!("{f}.toml")))
            .unwrap_or_else(|e| panic!("{f}: {e}"));
        Chain::from_config(&cfg).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert_eq!(
            cfg.nfs[0].get("kind").and_then(|k| k.as_str()),
            Some("pipeline")
        );
        if f == "vlan_switch" {
            continue;
        }
        let native = ChainConfig::load(&root.join(format!("{f}.toml"))).unwrap();
        let (a, b) = (&native.input, &cfg.input);
        assert_eq!(
            native
                .resolve(a.trace.as_deref().unwrap())
                .canonicalize()
                .unwrap(),
            cfg.resolve(b.trace.as_deref().unwrap())
                .canonicalize()
                .unwrap(),
            "{f}: trace"
        );
        assert_eq!((a.ports, a.seed), (b.ports, b.seed), "{f}: ports and seed");
    }
}
