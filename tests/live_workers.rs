//! Several workers on live ports (`--workers 2`): each worker has its own socket per
//! port — AF_XDP one queue each behind the interface's one XDP program, AF_PACKET one
//! fanout group — so the kernel spreads the flows over them. Sender A ⇄ catena (wire) in
//! C ⇄ receiver B, veths with two queues; A replays 2,000 packets of a real capture with
//! tcpreplay. Checked: B's kernel counted every packet sent,
//! catena's summary conserves them, and both workers forwarded some. Bounded: ~2,000
//! packets, a few seconds; the namespaces go also on failure.

mod netns;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use catena::io::Trace;
use netns::{in_ns, Netns, Proc};
use serde_json::Value;

const N: usize = 2000;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_catena")
}

/// `catena run FWD --workers 2 --json`, for a test to add its options.
fn two_workers(fwd: &Path) -> Vec<&str> {
    let fwd = fwd.to_str().unwrap();
    vec![bin(), "run", fwd, "--workers", "2", "--json"]
}

fn capture(dir: &Path) -> PathBuf {
    netns::merged_capture(dir, N)
}

fn counter(ns: &str, iface: &str, what: &str) -> u64 {
    let o = in_ns(
        ns,
        &["cat", &format!("/sys/class/net/{iface}/statistics/{what}")],
    )
    .output()
    .unwrap();
    String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
}

/// With `record`, catena also writes what it forwards (`-o out.pcap`): one file per
/// worker, `out.w0.pcap` and `out.w1.pcap`.
fn forwards_on_two_workers(kind: &str, test: &str, record: bool) {
    if !netns::can_run(test) {
        return;
    }
    let ns = Netns::new(3);
    let (a, c_in) = ns.veth_queues(0, 1, "i", 9000, 2);
    let (c_out, b) = ns.veth_queues(1, 2, "o", 9000, 2);
    let dir = tempfile::tempdir().unwrap();
    let cap = capture(dir.path());
    let fwd = dir.path().join("fwd.toml");
    std::fs::write(
        &fwd,
        format!("[[port]]\nname = \"in\"\nkind = \"{kind}\"\niface = \"{c_in}\"\n\n[[port]]\nname = \"out\"\nkind = \"{kind}\"\niface = \"{c_out}\"\n\n[[nf]]\nname = \"wire\"\nkind = \"wire\"\n"),
    )
    .unwrap();
    let before = counter(&ns.names[2], &b, "rx_packets");
    let out_file = dir.path().join("out.pcap");
    let mut args = two_workers(&fwd);
    if record {
        args.extend(["-o", out_file.to_str().unwrap()]);
    }
    let mut catena = Proc::piped_in(&ns.names[1], &args);
    // Ready once its sockets are open (it says so on stderr).
    let mut line = String::new();
    BufReader::new(catena.0.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("with 2 workers"), "{line}");
    // tcpreplay sends through the qdisc layer, which picks a's transmit queue (and so
    // the peer's receive queue) by flow hash. (catena's own AF_PACKET sender bypasses
    // the qdisc: the kernel then picks the queue by the sending CPU, one queue.)
    netns::replay(&ns.names[0], &a, &cap);
    let end = Instant::now() + Duration::from_secs(5);
    while counter(&ns.names[2], &b, "rx_packets") < before + N as u64 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    // Nothing more arrives late.
    std::thread::sleep(Duration::from_millis(100));
    let got = counter(&ns.names[2], &b, "rx_packets") - before;
    catena.signal(libc::SIGTERM);
    let (out, code) = catena.finish(10);
    assert_eq!(code, Some(0), "{out}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(got, N as u64, "B received {got} of {N}: {v}");
    assert_eq!(v["packets_in"], N as u64, "{v}");
    assert_eq!(v["packets_out"], N as u64, "{v}");
    let w = v["workers"].as_array().expect("per-worker counters");
    assert_eq!(w.len(), 2, "{v}");
    for x in w {
        // Both workers' sockets received a share of the flows.
        assert!(x["packets_in"].as_u64().unwrap() > 0, "{v}");
    }
    let ports = v["ports"].as_array().unwrap();
    assert_eq!(ports[0]["live"]["rx"], N as u64, "{v}");
    assert_eq!(ports[1]["live"]["tx"], N as u64, "{v}");
    if !record {
        assert!(!out_file.exists());
        return;
    }
    // Each worker wrote its share; together they are the capture's packets, byte for
    // byte (wire changes nothing), each file in its worker's order.
    let files: Vec<PathBuf> = (0..2)
        .map(|w| dir.path().join(format!("out.w{w}.pcap")))
        .collect();
    let mut written: Vec<Vec<u8>> = Vec::new();
    for f in &files {
        let t = Trace::open(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        assert!(!t.is_empty(), "{} is empty", f.display());
        written.extend((0..t.len()).map(|i| t.packet(i).to_vec()));
    }
    let t = Trace::open(&cap).unwrap();
    let mut sent: Vec<Vec<u8>> = (0..t.len()).map(|i| t.packet(i).to_vec()).collect();
    assert_eq!(written.len(), N, "{v}");
    written.sort();
    sent.sort();
    assert!(
        written == sent,
        "the workers' files hold other packets than A sent"
    );
    assert!(!out_file.exists(), "no shared file");
    let sink = v["sinks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == "out")
        .expect("sink out");
    assert_eq!(sink["packets"], N as u64, "{v}");
    assert_eq!(
        sink["path"],
        format!("{}, {}", files[0].display(), files[1].display()),
        "{v}"
    );
}

#[test]
fn af_xdp_one_socket_per_queue_on_two_workers() {
    forwards_on_two_workers(
        "af_xdp",
        "af_xdp_one_socket_per_queue_on_two_workers",
        false,
    );
}

#[test]
fn af_packet_fanout_on_two_workers() {
    forwards_on_two_workers("af_packet", "af_packet_fanout_on_two_workers", false);
}

#[test]
fn two_live_workers_write_one_file_each() {
    forwards_on_two_workers("af_xdp", "two_live_workers_write_one_file_each", true);
}

#[test]
fn several_live_workers_refuse_rate_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let fwd = dir.path().join("fwd.toml");
    std::fs::write(
        &fwd,
        "[[port]]\nname = \"in\"\nkind = \"af_packet\"\niface = \"nonexistent0\"\n\n[[port]]\nname = \"out\"\nkind = \"af_packet\"\niface = \"nonexistent1\"\n\n[[nf]]\nname = \"wire\"\nkind = \"wire\"\n",
    )
    .unwrap();
    let o = std::process::Command::new(bin())
        .args(["run", fwd.to_str().unwrap(), "--workers", "2"])
        .args(["--rate", "1000pps"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("--rate paces `kind = \"pcap\"` ports, which run on one worker"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// More workers than the interface has queues: one line saying what to do.
#[test]
fn af_xdp_refuses_more_workers_than_queues() {
    let test = "af_xdp_refuses_more_workers_than_queues";
    if !netns::can_run(test) {
        return;
    }
    let ns = Netns::new(2);
    let (a, _b) = ns.veth(0, 1, "q", 1500);
    let dir = tempfile::tempdir().unwrap();
    let fwd = dir.path().join("fwd.toml");
    std::fs::write(
        &fwd,
        format!("[[port]]\nname = \"in\"\nkind = \"af_xdp\"\niface = \"{a}\"\n\n[[nf]]\nname = \"wire\"\nkind = \"wire\"\n"),
    )
    .unwrap();
    let o = in_ns(
        &ns.names[0],
        &[bin(), "run", fwd.to_str().unwrap(), "--workers", "2"],
    )
    .output()
    .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    assert!(
        e.contains(&format!("2 workers need queues 0..=1 of {a}, which has 1")),
        "{e}"
    );
}

/// `GET path` on the API at 127.0.0.1:`port` inside namespace `ns` (its loopback).
fn api_get(ns: &str, port: u16, path: &str) -> String {
    let o = in_ns(
        ns,
        &[
            "curl",
            "-s",
            "--max-time",
            "2",
            &format!("http://127.0.0.1:{port}{path}"),
        ],
    )
    .output()
    .unwrap();
    String::from_utf8_lossy(&o.stdout).to_string()
}

/// Packets the firewall passes when `allow` is its rule, by the same chain replaying the
/// capture from a file: the oracle for the live rounds.
fn passed_by_replay(dir: &Path, cap: &Path, allow: &str) -> u64 {
    let t = dir.join("replay.toml");
    std::fs::write(
        &t,
        format!("[[port]]\nname = \"a\"\nkind = \"pcap\"\npath = \"{}\"\n\n[[port]]\nname = \"b\"\nkind = \"pcap\"\nwrite = \"{}\"\n\n[[nf]]\nname = \"fw\"\nkind = \"firewall\"\nallow_ports = [{allow}]\n", cap.display(), dir.join("replayed.pcap").display()),
    )
    .unwrap();
    let o = std::process::Command::new(bin())
        .args(["run", t.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    v["nfs"][0]["packets_out"].as_u64().unwrap()
}

/// Two AF_XDP workers behind one `--control` socket and one `--api`: a rule change by
/// `catena ctl` and a reload by SIGHUP reach both workers (every packet of the next
/// replay meets the new rule, whichever worker has its flow: B gets exactly what a file
/// replay under that rule passes), `/stats` sums the workers and `/metrics` parses.
#[test]
fn control_api_and_reload_reach_every_worker() {
    let test = "control_api_and_reload_reach_every_worker";
    if !netns::can_run(test) {
        return;
    }
    for tool in ["tcpreplay", "curl"] {
        if std::process::Command::new(tool)
            .arg("--version")
            .output()
            .is_err()
        {
            eprintln!("skipped {test}: needs {tool}");
            return;
        }
    }
    let ns = Netns::new(3);
    let (a, c_in) = ns.veth_queues(0, 1, "i", 9000, 2);
    let (c_out, _b) = ns.veth_queues(1, 2, "o", 9000, 2);
    let dir = tempfile::tempdir().unwrap();
    let cap = capture(dir.path());
    let web = passed_by_replay(dir.path(), &cap, "80, 443");
    let dns = passed_by_replay(dir.path(), &cap, "443");
    assert!(web > 0 && dns > 0 && web != dns, "{web} {dns}");
    let fwd = dir.path().join("fwd.toml");
    let chain = |allow: &str| {
        format!("[[port]]\nname = \"in\"\nkind = \"af_xdp\"\niface = \"{c_in}\"\n\n[[port]]\nname = \"out\"\nkind = \"af_xdp\"\niface = \"{c_out}\"\n\n[[nf]]\nname = \"fw\"\nkind = \"firewall\"\nallow_ports = [{allow}]\n")
    };
    std::fs::write(&fwd, chain("80, 443")).unwrap();
    let sock = dir.path().join("ctl.sock");
    let api = 20_000 + (std::process::id() % 1000) as u16;
    let api_at = format!("127.0.0.1:{api}");
    let mut args = two_workers(&fwd);
    args.extend(["--control", sock.to_str().unwrap(), "--api", &api_at]);
    let mut catena = Proc::piped_in(&ns.names[1], &args);
    let (tx, said) = std::sync::mpsc::channel::<String>();
    let err = catena.0.stderr.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let wait_for = |what: &str| {
        let end = Instant::now() + Duration::from_secs(5);
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match said.recv_timeout(left) {
                Ok(l) if l.contains(what) => return l,
                Ok(_) => {}
                Err(_) => panic!("catena never said `{what}`"),
            }
        }
    };
    wait_for("with 2 workers");
    let stats = || {
        serde_json::from_str::<Value>(&api_get(&ns.names[1], api, "/stats")).unwrap_or(Value::Null)
    };
    let passed = |v: &Value| v["nfs"][0]["packets_out"].as_u64().unwrap_or(0);
    // One round: A replays the capture; the firewall (both workers summed) must pass
    // exactly `want` more packets. (It is a learning bridge: what it passes leaves by
    // either port, so B's own counter is not the measure.)
    let round = |want: u64, rounds: u64| {
        let before = passed(&stats());
        let s = in_ns(
            &ns.names[0],
            &[
                "tcpreplay",
                "-q",
                "-i",
                &a,
                "--pps=20000",
                cap.to_str().unwrap(),
            ],
        )
        .output()
        .unwrap();
        assert!(s.status.success(), "{}", String::from_utf8_lossy(&s.stderr));
        // Every packet counted by catena, summed over both workers.
        let end = Instant::now() + Duration::from_secs(5);
        loop {
            let v = stats();
            if v["packets_in"] == rounds * N as u64 {
                break;
            }
            assert!(Instant::now() < end, "round {rounds}: {v}");
            std::thread::sleep(Duration::from_millis(100));
        }
        // The workers publish every 250 ms and the sum follows within 250 ms.
        std::thread::sleep(Duration::from_millis(700));
        let v = stats();
        assert_eq!(passed(&v) - before, want, "round {rounds}: {v}");
    };
    round(web, 1);
    let o = std::process::Command::new(bin())
        .args(["ctl", sock.to_str().unwrap(), "fw", "allow_ports", "443"])
        .output()
        .unwrap();
    let reply = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{reply} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(reply.trim(), "1 port(s) allowed (on 2 workers)");
    round(dns, 2);
    std::fs::write(&fwd, chain("80, 443")).unwrap();
    catena.signal(libc::SIGHUP);
    let l = wait_for("reload");
    assert!(
        l.contains("(on 2 workers)") && !l.contains("refused"),
        "{l}"
    );
    round(web, 3);

    let stats: Value = serde_json::from_str(&api_get(&ns.names[1], api, "/stats")).unwrap();
    let w = stats["workers"].as_array().expect("per-worker counters");
    assert_eq!(w.len(), 2, "{stats}");
    assert!(
        w.iter().all(|x| x["packets_in"].as_u64().unwrap() > 0),
        "{stats}"
    );
    assert_eq!(stats["nfs"][0]["packets_out"], 2 * web + dns, "{stats}");
    let metrics = api_get(&ns.names[1], api, "/metrics");
    let lines = metrics.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("metrics parse");
    let rx = scrape
        .samples
        .iter()
        .find(|s| s.metric == "catena_port_rx_packets_total" && s.labels.get("port") == Some("0"))
        .map(|s| match s.value {
            prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) => v,
            _ => f64::NAN,
        });
    assert_eq!(rx, Some(3.0 * N as f64), "{metrics}");

    catena.signal(libc::SIGTERM);
    let (out, code) = catena.finish(10);
    assert_eq!(code, Some(0), "{out}");
    let fin: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(fin["packets_in"], 3 * N as u64, "{fin}");
    assert_eq!(fin["nfs"][0]["packets_out"], 2 * web + dns, "{fin}");
    let tx = |p: usize| fin["ports"][p]["live"]["tx"].as_u64().unwrap();
    assert_eq!(tx(0) + tx(1), 2 * web + dns, "{fin}");
}
