//! The HTTP API of a running chain: `/metrics` parses as Prometheus text and agrees with
//! the counters, `/stats` equals the final `--json` summary once traffic has stopped,
//! `POST /nf/NAME` answers as the Unix socket does, and garbage gets a 4xx without
//! harming the run. The chain replays a real capture from a pcap port and sends to an
//! AF_PACKET port on a veth in a namespace this test makes (so the run lasts until
//! SIGTERM). Bounded: 4,000 packets, a few seconds.

mod netns;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use netns::{in_ns, Netns};
use serde_json::Value;

/// One HTTP/1.0 exchange on loopback inside the namespace's process: status and body.
fn http(port: u16, req: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(req).unwrap();
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

fn get(port: u16, path: &str) -> (u16, String) {
    http(port, format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
}

fn post(port: u16, path: &str, body: &[u8]) -> (u16, String) {
    let mut r = format!(
        "POST {path} HTTP/1.0\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    http(port, &r)
}

/// Fields that depend on the clock, not the counters.
fn without_time(mut v: Value) -> Value {
    for k in [
        "seconds",
        "mpps",
        "seconds_total",
        "mpps_total",
        "data_rate_gbps",
        "throughput_gbps",
    ] {
        v.as_object_mut().unwrap().remove(k);
    }
    v
}

#[test]
fn stats_metrics_and_commands_over_http() {
    if !netns::can_run("stats_metrics_and_commands_over_http") {
        return;
    }
    let ns = Netns::new(1);
    let (out_if, _) = ns.veth(0, 0, "h", 9000);
    let dir = tempfile::tempdir().unwrap();
    let cap = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/datasets/ndpi/pcap/http_connect.pcap"
    ));
    let chain = dir.path().join("c.toml");
    std::fs::write(
        &chain,
        format!(
            "[[port]]\nname = \"file\"\nkind = \"pcap\"\npath = \"{}\"\n\n[[port]]\nname = \"veth\"\nkind = \"af_packet\"\niface = \"{out_if}\"\n\n[[nf]]\nname = \"fw\"\nkind = \"firewall\"\nallow_ports = [80, 443, 8080, 3128]\n",
            cap.display()
        ),
    )
    .unwrap();
    let sock = dir.path().join("ctl.sock");
    let api_port = 19_000 + (std::process::id() % 1000) as u16;
    let addr = format!("127.0.0.1:{api_port}");
    let mut child = in_ns(
        &ns.names[0],
        &[
            env!("CARGO_BIN_EXE_catena"),
            "run",
            chain.to_str().unwrap(),
            "--json",
            "--api",
            &addr,
            "--control",
            sock.to_str().unwrap(),
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let err = child.stderr.take().unwrap();
    let mut child = Kill(child);
    let mut lines = BufReader::new(err).lines();
    // The API listens in the namespace: its loopback is the namespace's, so the test
    // talks to it from a thread that entered the namespace.
    let ready = lines.find(|l| l.as_ref().is_ok_and(|l| l.contains("running on")));
    assert!(ready.is_some(), "catena did not start");
    std::thread::spawn(move || for _ in lines {});
    let (stats, metrics, replies) = std::thread::scope(|s| {
        s.spawn(|| {
            ns.enter(0);
            // Wait for the replay to end and the counters to settle.
            let end = Instant::now() + Duration::from_secs(5);
            let mut last = Value::Null;
            loop {
                let (c, b) = get(api_port, "/stats");
                if c == 200 {
                    let v: Value = serde_json::from_str(&b).unwrap();
                    if v["packets_in"] == 100 && without_time(v.clone()) == last {
                        break;
                    }
                    last = without_time(v);
                }
                assert!(Instant::now() < end, "replay did not finish: {last}");
                std::thread::sleep(Duration::from_millis(300));
            }
            let mut replies = vec![
                post(api_port, "/nf/fw", b"allow_ports 80 443 8080 3128"),
                post(api_port, "/nf/nope", b"flush"),
                post(api_port, "/nf/fw", b"frobnicate"),
                post(api_port, "/nf/fw", &[0xff, 0xfe]),
                post(api_port, "/nf/fw", &[b'a'; 5000]),
                post(api_port, "/nf/b%20ad", b"flush"),
                get(api_port, "/nf/fw"),
                get(api_port, "/nope"),
                http(api_port, b"\x16\x03\x01garbage\r\n\r\n"),
            ];
            let unix = Command::new(env!("CARGO_BIN_EXE_catena"))
                .args([
                    "ctl",
                    sock.to_str().unwrap(),
                    "fw",
                    "allow_ports",
                    "80",
                    "443",
                    "8080",
                    "3128",
                ])
                .output()
                .unwrap();
            replies.push((0, String::from_utf8_lossy(&unix.stdout).to_string()));
            let stats = get(api_port, "/stats").1;
            let metrics = get(api_port, "/metrics").1;
            (stats, metrics, replies)
        })
        .join()
        .unwrap()
    });
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.0.id() as i32, libc::SIGTERM) };
    let end = Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(st) = child.0.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < end, "catena did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success());
    let mut out = String::new();
    child
        .0
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let fin: Value = serde_json::from_str(&out).unwrap();
    let live: Value = serde_json::from_str(&stats).unwrap();
    assert_eq!(
        without_time(live),
        without_time(fin.clone()),
        "/stats vs --json"
    );

    let codes: Vec<u16> = replies.iter().map(|r| r.0).collect();
    assert_eq!(
        codes,
        [200, 400, 400, 400, 413, 400, 405, 404, 400, 0],
        "{replies:?}"
    );
    assert_eq!(replies[0].1, "ok 4 port(s) allowed\n");
    assert!(
        replies[1].1.starts_with("error no NF named `nope`"),
        "{}",
        replies[1].1
    );
    // The Unix socket's reply to the same command is the same text.
    assert_eq!(replies[9].1, "4 port(s) allowed\n");

    // /metrics parses as Prometheus text and carries the same counters.
    let lines = metrics.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("metrics parse");
    let value = |name: &str, label: (&str, &str)| -> f64 {
        scrape
            .samples
            .iter()
            .find(|s| s.metric == name && s.labels.get(label.0) == Some(label.1))
            .map(|s| match s.value {
                prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) => v,
                _ => f64::NAN,
            })
            .unwrap_or_else(|| panic!("no {name} {label:?} in {metrics}"))
    };
    let nf = &fin["nfs"][0];
    assert_eq!(
        value("catena_nf_packets_in_total", ("nf", "fw")),
        nf["packets_in"].as_f64().unwrap()
    );
    assert_eq!(
        value("catena_nf_packets_out_total", ("nf", "fw")),
        nf["packets_out"].as_f64().unwrap()
    );
    for pair in nf["drops"].as_array().unwrap() {
        let (reason, n) = (pair[0].as_str().unwrap(), pair[1].as_f64().unwrap());
        let got = scrape
            .samples
            .iter()
            .find(|s| {
                s.metric == "catena_nf_dropped_total" && s.labels.get("reason") == Some(reason)
            })
            .map(|s| match s.value {
                prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) => v,
                _ => f64::NAN,
            });
        assert_eq!(got, Some(n), "drops {reason}");
    }
    assert_eq!(value("catena_port_rx_packets_total", ("port", "0")), 100.0);
    assert_eq!(
        value("catena_port_tx_packets_total", ("port", "1")),
        fin["ports"][1]["tx"].as_f64().unwrap()
    );
    assert_eq!(value("catena_port_kernel_drops_total", ("port", "1")), 0.0);
    assert!(scrape.samples.iter().any(
        |s| s.metric == "catena_batch_seconds" || s.metric.starts_with("catena_batch_seconds")
    ));
}
