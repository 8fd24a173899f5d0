//! Two `catena run` processes joined by a veth pair, each in a namespace this test makes:
//! A replays a real capture and sends it out of the veth, B receives it and records it.
//! With `aggregate = true` on both ends of the veth, B's file must equal, byte for byte
//! and in order, B's file with aggregation off, and the capture itself. Bounded: 4,000
//! packets paced at 50 kpps, a few seconds of waiting at most; processes and namespaces
//! are removed also on failure.

mod netns;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use catena::io::Trace;
use netns::{in_ns, Netns, Proc};
use serde_json::Value;

const PACKETS: usize = 4000;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_catena")
}

/// Spawns `cmd` and waits (≤ 5 s) until its stderr says it is running.
fn spawn_running(mut cmd: Command) -> Proc {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let err = child.stderr.take().unwrap();
    let p = Proc(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let end = Instant::now() + Duration::from_secs(5);
    let mut said = Vec::new();
    while Instant::now() < end {
        if let Ok(l) = rx.recv_timeout(Duration::from_millis(100)) {
            if l.contains("running on") {
                return p;
            }
            said.push(l);
        }
    }
    panic!("not running in 5 s; stderr: {}", said.join(" | "));
}

/// The first PACKETS packets of the merged real capture.
fn capture(dir: &Path) -> PathBuf {
    let src = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/datasets/bench/ndpi-ether-merged.pcap"
    ));
    let t = Trace::open(&src).unwrap();
    let out = dir.join("capture.pcap");
    let mut w = catena::io::PcapWriter::create(&out, t.header()).unwrap();
    for i in 0..PACKETS {
        let r = t.record(i);
        w.write_packet(r.ts_ns, r.wire_len, t.packet(i)).unwrap();
    }
    w.finish().unwrap();
    out
}

fn frames(p: &Path) -> Vec<Vec<u8>> {
    let t = Trace::open(p).unwrap();
    (0..t.len()).map(|i| t.packet(i).to_vec()).collect()
}

/// A sends `cap` to B over a fresh veth pair; returns B's recorded packets and both
/// summaries.
fn a_to_b(dir: &Path, cap: &Path, aggregate: bool) -> (Vec<Vec<u8>>, Value, Value) {
    a_to_b_with(dir, cap, aggregate, "", WIRE, "af_packet")
}

const WIRE: &str = "[[nf]]\nname = \"wire\"\nkind = \"wire\"\n";

/// B's NFs for the views test: a filter that drops (inside aggregates), NAT (writes, so
/// its packets are copied out of the frame first) and a flow monitor (reads only).
const NFS: &str = "[[nf]]\nname = \"wire\"\nkind = \"wire\"\n\n[[nf]]\nname = \"acl\"\nkind = \"ip_filter\"\ndefault = \"allow\"\nrules = [\"deny udp dst port 53\", \"deny tcp dst port 23\", \"deny src net 10.0.0.0/8 and icmp\"]\n\n[[nf]]\nname = \"nat\"\nkind = \"nat\"\ninside = \"192.168.0.0/16, 172.16.0.0/12\"\npublic = \"198.51.100.1, 198.51.100.2\"\n\n[[nf]]\nname = \"mon\"\nkind = \"flow_monitor\"\n";

/// As [`a_to_b`], with B's port settings `b_in` added, B running `nfs`, and both veth
/// ports of `kind` (`af_packet` or `af_xdp`).
fn a_to_b_with(
    dir: &Path,
    cap: &Path,
    aggregate: bool,
    b_in: &str,
    nfs: &str,
    kind: &str,
) -> (Vec<Vec<u8>>, Value, Value) {
    let ns = Netns::new(2);
    let (xa, xb) = ns.veth(0, 1, "p", 9000);
    let tag = format!("{aggregate}{}{kind}", b_in.len());
    let got = dir.join(format!("got-{tag}.pcap"));
    let b_chain = dir.join(format!("b-{tag}.toml"));
    std::fs::write(
        &b_chain,
        format!(
            "[[port]]\nname = \"in\"\nkind = \"{kind}\"\niface = \"{xb}\"\naggregate = {aggregate}\n{b_in}\n[[port]]\nname = \"out\"\nkind = \"pcap\"\nwrite = \"{}\"\n\n{nfs}",
            got.display()
        ),
    )
    .unwrap();
    let a_chain = dir.join(format!("a-{tag}.toml"));
    std::fs::write(
        &a_chain,
        format!(
            "[[port]]\nname = \"replay\"\nkind = \"pcap\"\npath = \"{}\"\nrate = \"50000 pps\"\n\n[[port]]\nname = \"out\"\nkind = \"{kind}\"\niface = \"{xa}\"\naggregate = {aggregate}\n\n[[nf]]\nname = \"wire\"\nkind = \"wire\"\n",
            cap.display()
        ),
    )
    .unwrap();
    let b = spawn_running(in_ns(
        &ns.names[1],
        &[bin(), "run", b_chain.to_str().unwrap(), "--json"],
    ));
    let a = spawn_running(in_ns(
        &ns.names[0],
        &[bin(), "run", a_chain.to_str().unwrap(), "--json"],
    ));
    // A's replay takes 80 ms at 50 kpps; B's file is complete only when B exits, so
    // stop A once its replay is surely done, then B.
    std::thread::sleep(Duration::from_millis(800));
    a.signal(libc::SIGTERM);
    let (a_json, a_code) = a.finish(5);
    b.signal(libc::SIGTERM);
    let (b_json, b_code) = b.finish(5);
    assert_eq!(a_code, Some(0), "A: {a_json}");
    assert_eq!(b_code, Some(0), "B: {b_json}");
    let sa: Value = serde_json::from_str(&a_json).unwrap();
    let sb: Value = serde_json::from_str(&b_json).unwrap();
    (frames(&got), sa, sb)
}

#[test]
fn two_processes_over_a_veth_give_the_same_output_with_aggregation_on_and_off() {
    let test = "paflow_netns";
    if !netns::can_run(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cap = capture(dir.path());
    let want = frames(&cap);
    let (off, _, b_off) = a_to_b(dir.path(), &cap, false);
    let (on, a_on, b_on) = a_to_b(dir.path(), &cap, true);
    assert_eq!(
        off.len(),
        PACKETS,
        "aggregation off: B got {} of {PACKETS}",
        off.len()
    );
    assert_eq!(
        on.len(),
        PACKETS,
        "aggregation on: B got {} of {PACKETS}",
        on.len()
    );
    assert!(
        off == want,
        "aggregation off: B's packets differ from the capture"
    );
    assert!(
        on == off,
        "aggregation on: B's packets differ from aggregation off"
    );
    let tx = &a_on["ports"][1]["live"];
    let rx = &b_on["ports"][0]["live"];
    eprintln!(
        "aggregation on: {} of {PACKETS} packets in {} aggregates; {} frames on the veth (off: {})",
        tx["tx_aggregated"], tx["tx_aggregates"], tx["tx"], b_off["ports"][0]["live"]["rx"]
    );
    assert_eq!(rx["rx_unpacked"], tx["tx_aggregated"]);
    assert_eq!(rx["rx_aggregates"], tx["tx_aggregates"]);
    assert_eq!(rx["rx_bad_aggregate"], 0);
    assert_eq!(rx["kernel_drops"], 0);
    assert_eq!(b_on["packets_in"], PACKETS);
}

/// The same over AF_XDP ports (what `bench paflow` uses to measure latency to the µs):
/// aggregates up to 9,000 B span several UMEM frames (scatter-gather). B's output with
/// aggregation on equals B's with it off and the capture, byte for byte and in order.
#[test]
fn af_xdp_ports_give_the_same_output_with_aggregation_on_and_off() {
    let test = "af_xdp_ports_give_the_same_output_with_aggregation_on_and_off";
    if !netns::can_run(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cap = capture(dir.path());
    let want = frames(&cap);
    let (off, _, _) = a_to_b_with(dir.path(), &cap, false, "", WIRE, "af_xdp");
    let (on, a_on, b_on) = a_to_b_with(dir.path(), &cap, true, "", WIRE, "af_xdp");
    assert_eq!(
        off.len(),
        PACKETS,
        "af_xdp, aggregation off: B got {}",
        off.len()
    );
    assert!(
        off == want,
        "af_xdp, aggregation off: B's packets differ from the capture"
    );
    assert_eq!(
        on.len(),
        PACKETS,
        "af_xdp, aggregation on: B got {}",
        on.len()
    );
    assert!(
        on == off,
        "af_xdp, aggregation on: B's packets differ from off"
    );
    let tx = &a_on["ports"][1]["live"];
    let rx = &b_on["ports"][0]["live"];
    eprintln!(
        "af_xdp, aggregation on: {} of {PACKETS} packets in {} aggregates ({})",
        tx["tx_aggregated"], tx["tx_aggregates"], b_on["ports"][0]["name"]
    );
    // Aggregation really happened, with frames above one UMEM frame among them.
    assert!(tx["tx_aggregates"].as_u64().unwrap() > 0, "{tx}");
    assert!(
        tx["tx_bytes"].as_u64().unwrap() / tx["tx"].as_u64().unwrap().max(1) > 2048,
        "aggregates average at most one UMEM frame: {tx}"
    );
    assert_eq!(rx["rx_unpacked"], tx["tx_aggregated"]);
    assert_eq!(rx["rx_aggregates"], tx["tx_aggregates"]);
    assert_eq!(rx["rx_bad_aggregate"], 0);
    assert_eq!(tx["tx_errors"], 0);
    assert_eq!(b_on["packets_in"], PACKETS);
}

/// Per NF: name, packets in, out, dropped and drops by reason.
fn nf_counts(s: &Value) -> Vec<String> {
    s["nfs"]
        .as_array()
        .expect("nfs")
        .iter()
        .map(|n| {
            format!(
                "{} in {} out {} dropped {} {}",
                n["name"], n["packets_in"], n["packets_out"], n["packets_dropped"], n["drops"]
            )
        })
        .collect()
}

/// PA-Flow's NFs on aggregated frames between processes: B receives A's aggregates on
/// a veth and its NFs (a dropping filter, NAT, a flow monitor) work on the packets as
/// views into the received frames. B's output must equal, byte for byte, the same chain
/// run unaggregated on the capture (a replaying pcap port), with the same per-NF counts
/// and drops; every unpacked packet was a view.
#[test]
fn nfs_on_received_aggregates_as_views_give_the_unaggregated_output() {
    let test = "nfs_on_received_aggregates_as_views_give_the_unaggregated_output";
    if !netns::can_run(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The capture's packets 20 µs apart, as A sends them: NAT's and the flow monitor's
    // timeouts then act alike in the replay (capture times) and live (arrival times).
    let cap = dir.path().join("dense.pcap");
    Trace::from_packets(
        catena::packet::LinkKind::Ethernet,
        catena::io::PcapHeader::new(1, false),
        frames(&capture(dir.path()))
            .iter()
            .enumerate()
            .map(|(i, f)| (1_000_000_000 + i as u64 * 20_000, f.as_slice())),
    )
    .write_pcap(&cap)
    .unwrap();
    // The chain run unaggregated from the same capture, in one process.
    let want_file = dir.path().join("want.pcap");
    let r_chain = dir.path().join("ref.toml");
    std::fs::write(
        &r_chain,
        format!(
            "[[port]]\nname = \"in\"\nkind = \"pcap\"\npath = \"{}\"\n\n[[port]]\nname = \"out\"\nkind = \"pcap\"\nwrite = \"{}\"\n\n{NFS}",
            cap.display(),
            want_file.display()
        ),
    )
    .unwrap();
    let o = Command::new(bin())
        .args(["run", r_chain.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let want_sum: Value = serde_json::from_slice(&o.stdout).unwrap();
    let want = frames(&want_file);

    let (got, a, b) = a_to_b_with(
        dir.path(),
        &cap,
        true,
        "aggregate_views = true\n",
        NFS,
        "af_packet",
    );
    let rx = &b["ports"][0]["live"];
    let tx = &a["ports"][1]["live"];
    eprintln!(
        "views: {} of {PACKETS} packets in {} aggregates, {} unpacked as views; {} of them out; {}",
        tx["tx_aggregated"],
        tx["tx_aggregates"],
        rx["rx_viewed"],
        got.len(),
        nf_counts(&b).join("; ")
    );
    assert_eq!(rx["kernel_drops"], 0);
    assert_eq!(rx["rx_bad_aggregate"], 0);
    assert_eq!(b["packets_in"], PACKETS);
    // Views were really used, for every unpacked packet, and most packets came packed.
    let unpacked = rx["rx_unpacked"].as_u64().unwrap();
    assert!(unpacked > PACKETS as u64 / 2, "{unpacked} unpacked");
    // Packets too large for an ordinary 2 KiB buffer are copied out (views use only
    // those); every other unpacked packet is a view.
    let big = frames(&cap)
        .iter()
        .filter(|f| f.len() + catena::packet::HEADROOM > 2048)
        .count() as u64;
    let viewed = rx["rx_viewed"].as_u64().unwrap();
    assert!(
        viewed <= unpacked && unpacked - viewed <= big,
        "{viewed} of {unpacked} unpacked as views ({big} packets above 1,920 B)"
    );
    assert!(
        b["ports"][0]["name"].to_string().contains("views"),
        "{}",
        b["ports"][0]["name"]
    );
    // Same per-NF counts and drops; some drops happened (inside aggregates).
    assert_eq!(nf_counts(&b), nf_counts(&want_sum));
    let dropped = b["nfs"][1]["packets_dropped"].as_u64().unwrap();
    assert!(
        dropped > 0,
        "the filter dropped nothing: {}",
        nf_counts(&b).join("; ")
    );
    assert_eq!(
        got.len(),
        want.len(),
        "{} out, want {}",
        got.len(),
        want.len()
    );
    assert!(got == want, "B's packets differ from the unaggregated run");
    assert!(got.len() < PACKETS, "nothing dropped");
}

/// One HTTP/1.0 GET on loopback (the calling thread must be in the run's namespace).
fn get(port: u16, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return (0, String::new());
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
        .unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).to_string();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |x| x.1).to_string();
    (code, body)
}

/// `/metrics` carries the aggregation counters of every port, equal to the `--json`
/// summary: a run unpacks a file of aggregates (real packets packed by `Packer`, two
/// of the frames malformed) and sends them out of an aggregating veth port.
#[test]
fn aggregation_counters_are_in_metrics() {
    if !netns::can_run("aggregation_counters_are_in_metrics") {
        return;
    }
    use catena::optimise::aggregate::Packer;
    let dir = tempfile::tempdir().unwrap();
    let cap = capture(dir.path());
    let pkts = frames(&cap);
    // 600 packets in aggregates of 20, then a truncated aggregate (its first packet
    // kept) and one with a bad version (nothing kept), then 10 plain frames.
    let mut input: Vec<Vec<u8>> = Vec::new();
    let mut good = 0u64;
    for group in pkts[..600].chunks(20) {
        let mut p = Packer::new(65535);
        for x in group {
            assert!(p.push(x));
        }
        input.push(p.frame().to_vec());
        good += group.len() as u64;
    }
    let mut p = Packer::new(65535);
    assert!(p.push(&pkts[600]) && p.push(&pkts[601]));
    let mut cut = p.frame().to_vec();
    cut.truncate(cut.len() - 10);
    input.push(cut);
    let mut bad = p.frame().to_vec();
    bad[14] = 7;
    input.push(bad);
    input.extend(pkts[602..612].iter().cloned());
    let file = dir.path().join("in.pcap");
    Trace::from_packets(
        catena::packet::LinkKind::Ethernet,
        catena::io::PcapHeader::new(1, false),
        input
            .iter()
            .enumerate()
            .map(|(i, f)| (i as u64 * 1000, f.as_slice())),
    )
    .write_pcap(&file)
    .unwrap();

    let ns = Netns::new(1);
    let (out_if, _) = ns.veth(0, 0, "m", 9000);
    let chain = dir.path().join("c.toml");
    std::fs::write(
        &chain,
        format!(
            "[[port]]\nname = \"file\"\nkind = \"pcap\"\npath = \"{}\"\naggregate = true\n\n[[port]]\nname = \"veth\"\nkind = \"af_packet\"\niface = \"{out_if}\"\naggregate = true\n\n[[nf]]\nname = \"wire\"\nkind = \"wire\"\n",
            file.display()
        ),
    )
    .unwrap();
    let api_port = 20_000 + (std::process::id() % 1000) as u16;
    let addr = format!("127.0.0.1:{api_port}");
    let run = spawn_running(in_ns(
        &ns.names[0],
        &[
            bin(),
            "run",
            chain.to_str().unwrap(),
            "--json",
            "--api",
            &addr,
        ],
    ));
    // Packets in: the good ones, the truncated frame's first, one per bad frame.
    let packets_in = good + 1 + 2 + 10;
    let metrics = std::thread::scope(|s| {
        s.spawn(|| {
            ns.enter(0);
            let end = Instant::now() + Duration::from_secs(5);
            loop {
                let (c, b) = get(api_port, "/stats");
                if c == 200 {
                    let v: Value = serde_json::from_str(&b).unwrap();
                    let tx = v["ports"][1]["live"]["tx"].as_u64().unwrap_or(0);
                    if v["packets_in"] == packets_in && tx > 0 {
                        break;
                    }
                }
                assert!(Instant::now() < end, "replay did not finish");
                std::thread::sleep(Duration::from_millis(200));
            }
            // The summary is published a few times a second: let the last batch land.
            std::thread::sleep(Duration::from_millis(600));
            get(api_port, "/metrics").1
        })
        .join()
        .unwrap()
    });
    run.signal(libc::SIGTERM);
    let (json, code) = run.finish(5);
    assert_eq!(code, Some(0), "{json}");
    let fin: Value = serde_json::from_str(&json).unwrap();

    let lines = metrics.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("metrics parse");
    let value = |name: &str, port: &str| -> u64 {
        scrape
            .samples
            .iter()
            .find(|s| s.metric == name && s.labels.get("port") == Some(port))
            .map(|s| match s.value {
                prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) => {
                    v as u64
                }
                _ => u64::MAX,
            })
            .unwrap_or_else(|| panic!("no {name} for port {port} in {metrics}"))
    };
    let pairs = [
        ("catena_port_aggregates_packed_total", "tx_aggregates"),
        ("catena_port_packets_aggregated_total", "tx_aggregated"),
        ("catena_port_aggregates_unpacked_total", "rx_aggregates"),
        ("catena_port_packets_unpacked_total", "rx_unpacked"),
        ("catena_port_bad_aggregates_total", "rx_bad_aggregate"),
    ];
    for port in ["0", "1"] {
        let live = &fin["ports"][port.parse::<usize>().unwrap()]["live"];
        for (metric, key) in pairs {
            assert_eq!(
                value(metric, port),
                live[key].as_u64().unwrap(),
                "{metric} port {port} vs --json {key}"
            );
        }
    }
    // Literal expectations from the file: 30 + 2 aggregates in, 2 bad, 601 unpacked.
    assert_eq!(value("catena_port_aggregates_unpacked_total", "0"), 32);
    assert_eq!(value("catena_port_bad_aggregates_total", "0"), 2);
    assert_eq!(value("catena_port_packets_unpacked_total", "0"), good + 1);
    // Everything good left by the veth, most of it inside aggregates.
    let sent = value("catena_port_packets_aggregated_total", "1");
    assert!(sent > good / 2 && sent <= good + 11, "{sent} aggregated");
    assert!(value("catena_port_aggregates_packed_total", "1") > 0);
    let input_bad = scrape
        .samples
        .iter()
        .find(|s| {
            s.metric == "catena_input_dropped_total"
                && s.labels.get("reason") == Some("bad-aggregate")
        })
        .map(|s| match s.value {
            prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) => v,
            _ => f64::NAN,
        });
    assert_eq!(input_bad, Some(2.0), "{metrics}");
}
