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
use std::process::Stdio;
use std::time::{Duration, Instant};

use catena::io::{PcapWriter, Trace};
use netns::{in_ns, Netns, Proc};
use serde_json::Value;

const N: usize = 2000;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_catena")
}

fn capture(dir: &Path) -> PathBuf {
    let src = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/datasets/bench/ndpi-ether-merged.pcap"
    ));
    let t = Trace::open(&src).unwrap();
    let cap = dir.join("cap.pcap");
    let mut w = PcapWriter::create(&cap, t.header()).unwrap();
    for i in 0..N {
        let r = t.record(i);
        w.write_packet(r.ts_ns, r.wire_len, t.packet(i)).unwrap();
    }
    w.finish().unwrap();
    cap
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

fn forwards_on_two_workers(kind: &str, test: &str) {
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
    let mut catena = Proc(
        in_ns(
            &ns.names[1],
            &[
                bin(),
                "run",
                fwd.to_str().unwrap(),
                "--workers",
                "2",
                "--json",
            ],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap(),
    );
    // Ready once its sockets are open (it says so on stderr).
    let mut line = String::new();
    BufReader::new(catena.0.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("with 2 workers"), "{line}");
    // tcpreplay sends through the qdisc layer, which picks a's transmit queue (and so
    // the peer's receive queue) by flow hash. (catena's own AF_PACKET sender bypasses
    // the qdisc: the kernel then picks the queue by the sending CPU, one queue.)
    let s = in_ns(
        &ns.names[0],
        &[
            "tcpreplay",
            "-q",
            "-i",
            &a,
            "--topspeed",
            cap.to_str().unwrap(),
        ],
    )
    .output()
    .unwrap();
    assert!(s.status.success(), "{}", String::from_utf8_lossy(&s.stderr));
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
}

#[test]
fn af_xdp_one_socket_per_queue_on_two_workers() {
    forwards_on_two_workers("af_xdp", "af_xdp_one_socket_per_queue_on_two_workers");
}

#[test]
fn af_packet_fanout_on_two_workers() {
    forwards_on_two_workers("af_packet", "af_packet_fanout_on_two_workers");
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
