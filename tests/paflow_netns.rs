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
    let ns = Netns::new(2);
    let (xa, xb) = ns.veth(0, 1, "p", 9000);
    let got = dir.join(format!("got-{aggregate}.pcap"));
    let b_chain = dir.join(format!("b-{aggregate}.toml"));
    std::fs::write(
        &b_chain,
        format!(
            "[[port]]\nname = \"in\"\nkind = \"af_packet\"\niface = \"{xb}\"\naggregate = {aggregate}\n\n[[port]]\nname = \"out\"\nkind = \"pcap\"\nwrite = \"{}\"\n\n[[nf]]\nname = \"wire\"\nkind = \"wire\"\n",
            got.display()
        ),
    )
    .unwrap();
    let a_chain = dir.join(format!("a-{aggregate}.toml"));
    std::fs::write(
        &a_chain,
        format!(
            "[[port]]\nname = \"replay\"\nkind = \"pcap\"\npath = \"{}\"\nrate = \"50000 pps\"\n\n[[port]]\nname = \"out\"\nkind = \"af_packet\"\niface = \"{xa}\"\naggregate = {aggregate}\n\n[[nf]]\nname = \"wire\"\nkind = \"wire\"\n",
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
