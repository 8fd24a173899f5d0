//! catena between two namespaces: host A ⇄ veth ⇄ catena ⇄ veth ⇄ host B, each in a
//! namespace this test makes. A real capture is replayed from A with `tcpreplay`,
//! captured on B with `tcpdump -w`, and B's packets must equal, byte for byte and in
//! order, what the same NFs write when the capture runs as a pcap replay (pcap ports);
//! the NFs' counters must match too. Bounded: 4,000 packets at 20 kpps, a few seconds
//! of waiting at most; processes and namespaces are removed also on failure.

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

/// Spawns `cmd` and waits (≤ 5 s) until its stderr shows `ready`; stderr is drained
/// after that so the child never blocks on it.
fn spawn_until(mut cmd: Command, ready: &str) -> Proc {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let err = child.stderr.take().unwrap();
    let p = Proc(child);
    let (tx, rx) = std::sync::mpsc::channel();
    let ready = ready.to_string();
    std::thread::spawn(move || {
        let mut seen = false;
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if !seen && line.contains(&ready) {
                seen = true;
                let _ = tx.send(Ok(()));
            } else if !seen {
                let _ = tx.send(Err(line));
            }
        }
    });
    let end = Instant::now() + Duration::from_secs(5);
    let mut said = Vec::new();
    while Instant::now() < end {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(Ok(())) => return p,
            Ok(Err(l)) => said.push(l),
            Err(_) => {}
        }
    }
    panic!("not ready in 5 s; stderr: {}", said.join(" | "));
}

fn count(p: &Path) -> usize {
    Trace::open(p).map_or(0, |t| t.len())
}

fn frames(p: &Path) -> Vec<Vec<u8>> {
    let t = Trace::open(p).unwrap();
    (0..t.len()).map(|i| t.packet(i).to_vec()).collect()
}

/// The first PACKETS packets of the merged real capture, as a pcap.
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

fn nf_counters(s: &Value) -> Vec<Value> {
    s["nfs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            // The merged capture jumps years between its parts, so in the replay every
            // mapping has expired by the end; live, none has. What was created, translated
            // and dropped must agree.
            let stats: Vec<&Value> = n["stats"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|p| p[0] != "mappings" && p[0] != "expired")
                .collect();
            serde_json::json!([
                n["name"],
                n["packets_in"],
                n["packets_out"],
                n["drops"],
                stats
            ])
        })
        .collect()
}

/// Runs `nfs` (TOML `[[nf]]` tables) live between A and B and as a pcap replay; checks
/// that B got exactly the replay's output and the NFs counted the same. Idle timeouts
/// run on packet times (capture times in the replay, arrival times live), so the cases
/// with timeouts set them beyond the capture's span.
fn live_equals_replay(test: &str, nfs: &str, replies: bool) {
    live_equals_replay_on("af_packet", test, nfs, replies);
}

/// As [`live_equals_replay`], with catena's two ports of `kind` (af_packet, af_xdp),
/// optionally followed by more port settings (`kind = "af_packet"\ntx = "ring"`).
fn live_equals_replay_on(kind: &str, test: &str, nfs: &str, replies: bool) {
    live_equals_replay_stalled(kind, test, nfs, replies, None);
}

/// As [`live_equals_replay_on`]; with `stall`, catena is stopped (SIGSTOP) that long
/// while A sends, as a loaded machine takes it off its CPU, and its ring must hold
/// what arrives meanwhile.
fn live_equals_replay_stalled(
    kind: &str,
    test: &str,
    nfs: &str,
    replies: bool,
    stall: Option<Duration>,
) {
    let (kind, settings) = kind.split_once('\n').unwrap_or((kind, ""));
    let kind_lines = format!("\"{kind}\"\n{settings}");
    let kind_lines = kind_lines.trim_end();
    if !netns::can_run(test) {
        return;
    }
    for tool in ["tcpreplay", "tcpdump"] {
        if Command::new(tool).arg("--version").output().is_err() {
            eprintln!("skipped {test}: needs {tool}");
            return;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let cap = capture(dir.path());
    // The same NFs as a pcap replay: port a replays, port b records.
    let expected = dir.path().join("expected.pcap");
    let replay = dir.path().join("replay.toml");
    std::fs::write(
        &replay,
        format!(
            "[[port]]\nname = \"a\"\nkind = \"pcap\"\npath = \"{}\"\n\n[[port]]\nname = \"b\"\nkind = \"pcap\"\nwrite = \"{}\"\n\n{nfs}",
            cap.display(),
            expected.display()
        ),
    )
    .unwrap();
    let o = Command::new(bin())
        .args(["run", replay.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let want: Value = serde_json::from_slice(&o.stdout).unwrap();

    let ns = Netns::new(3);
    let (a0, c0) = ns.veth(0, 1, "x", 9000);
    let (c1, b0) = ns.veth(1, 2, "y", 9000);
    let chain = dir.path().join("live.toml");
    std::fs::write(
        &chain,
        format!(
            "[[port]]\nname = \"a\"\nkind = {kind_lines}\niface = \"{c0}\"\n\n[[port]]\nname = \"b\"\nkind = {kind_lines}\niface = \"{c1}\"\n\n{nfs}"
        ),
    )
    .unwrap();
    let catena = spawn_until(
        in_ns(
            &ns.names[1],
            &[bin(), "run", chain.to_str().unwrap(), "--json"],
        ),
        "running on",
    );
    let got = dir.path().join("got.pcap");
    let tcpdump = spawn_until(
        in_ns(
            &ns.names[2],
            &[
                "tcpdump",
                "-i",
                &b0,
                "-w",
                got.to_str().unwrap(),
                "-U",
                "-n",
                "-Z",
                "root",
                "-s",
                "0",
            ],
        ),
        "listening on",
    );
    let replay = in_ns(
        &ns.names[0],
        &["tcpreplay", "-i", &a0, "--pps=20000", cap.to_str().unwrap()],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    if let Some(t) = stall {
        // Past the first packets, well before the last (4,000 at 20 kpps: 200 ms).
        std::thread::sleep(Duration::from_millis(20));
        catena.signal(libc::SIGSTOP);
        std::thread::sleep(t);
        catena.signal(libc::SIGCONT);
    }
    let o = replay.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        o.status.success(),
        "tcpreplay: {said} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        said.contains(&format!("Successful packets:        {PACKETS}")),
        "{said}"
    );
    let n = want["sinks"][0]["packets"].as_u64().unwrap() as usize;
    let start = Instant::now();
    let end = start + Duration::from_secs(5);
    while count(&got) < count(&expected) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
    let waited = start.elapsed();
    // A little longer, to see any packet too many.
    std::thread::sleep(Duration::from_millis(200));
    tcpdump.signal(libc::SIGINT);
    drop(tcpdump.finish(5));
    let (sent_back, to_public) = if replies {
        replies_from_b(&ns, dir.path(), &a0, &b0, &got, &cap)
    } else {
        (0, 0)
    };
    let xdp_on = |iface: &str| {
        let o = in_ns(&ns.names[1], &["ip", "link", "show", "dev", iface])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).contains("prog/xdp")
    };
    if kind == "af_xdp" {
        assert!(
            xdp_on(&c0) && xdp_on(&c1),
            "XDP program attached while running"
        );
    }
    catena.signal(libc::SIGTERM);
    let (out, code) = catena.finish(5);
    assert_eq!(code, Some(0), "catena exit; stdout {out}");
    let live: Value = serde_json::from_str(&out).unwrap();
    if kind == "af_xdp" {
        assert!(!xdp_on(&c0) && !xdp_on(&c1), "XDP program removed at exit");
        // veth has no zero-copy: the kernel copies, and the port says so; catena reads
        // the UMEM frames in place unless told to copy them.
        let rx = if settings.contains("rx = \"copy\"") {
            "rx copied"
        } else {
            "rx in place"
        };
        for p in 0..2 {
            let name = live["ports"][p]["name"].as_str().unwrap();
            assert!(
                name.starts_with("af_xdp:")
                    && name.ends_with(&format!(" (native XDP, copy, {rx})")),
                "{name}"
            );
        }
    }

    // Session 33's CI (two engineers building beside it, load ~8 on 2 cores) read 3,967
    // of 4,000 here once: catena off its CPU longer than its RX ring's blocks last at
    // this rate (then 64 blocks of 1 ms), the kernel dropping the rest. Kernel drops
    // name that case.
    assert_eq!(
        live["packets_in"],
        PACKETS + sent_back,
        "catena took every packet A and B sent; the kernel dropped {} in port a's full ring and {} in port b's (catena off its CPU too long); B captured {} of the replay's {} (waited {} ms); summary {}",
        live["ports"][0]["live"]["kernel_drops"],
        live["ports"][1]["live"]["kernel_drops"],
        count(&got),
        count(&expected),
        waited.as_millis(),
        out
    );
    assert_eq!(live["ports"][0]["live"]["kernel_drops"], 0);
    assert_eq!(live["ports"][1]["live"]["tx_errors"], 0);
    if replies {
        let stat = |k: &str| {
            live["nfs"][1]["stats"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p[0] == k)
                .map(|p| p[1].as_u64().unwrap())
        };
        // Replies to inside-to-inside packets pass untouched; the rest are translated.
        assert_eq!(stat("translated_in"), Some(to_public as u64));
        assert!(to_public > 100);
    } else {
        assert_eq!(
            nf_counters(&live),
            nf_counters(&want),
            "NF counters live vs replay"
        );
    }
    assert!(n > 0);
    let (g, e) = (frames(&got), frames(&expected));
    assert_eq!(
        g.len(),
        e.len(),
        "packets B received vs the replay's output"
    );
    for (i, (a, b)) in g.iter().zip(&e).enumerate() {
        assert_eq!(a, b, "packet {i} differs");
    }
}

#[test]
fn wire_live_equals_replay() {
    live_equals_replay(
        "wire_live_equals_replay",
        "[[nf]]\nname = \"wire\"\nkind = \"wire\"\n",
        false,
    );
}

/// catena off its CPU for 150 ms while A sends at 20 kpps (3,000 packets arrive): the
/// RX ring holds them. Its blocks close after 1 ms however full, so at this rate the
/// ring lasts as many milliseconds as it has blocks (64 until session 33: 3,967 of 4,000
/// in that session's CI).
#[test]
fn wire_stalled_live_equals_replay() {
    live_equals_replay_stalled(
        "af_packet",
        "wire_stalled_live_equals_replay",
        "[[nf]]\nname = \"wire\"\nkind = \"wire\"\n",
        false,
        Some(Duration::from_millis(150)),
    );
}

#[test]
fn firewall_live_equals_replay() {
    live_equals_replay(
        "firewall_live_equals_replay",
        "[[nf]]\nname = \"fw\"\nkind = \"firewall\"\nallow_ports = [80, 443]\n",
        false,
    );
}

#[test]
fn wire_tx_ring_live_equals_replay() {
    live_equals_replay_on(
        "af_packet\ntx = \"ring\"",
        "wire_tx_ring_live_equals_replay",
        "[[nf]]\nname = \"wire\"\nkind = \"wire\"\n",
        false,
    );
}

#[test]
fn wire_af_xdp_live_equals_replay() {
    live_equals_replay_on(
        "af_xdp",
        "wire_af_xdp_live_equals_replay",
        "[[nf]]\nname = \"wire\"\nkind = \"wire\"\n",
        false,
    );
}

#[test]
fn firewall_af_xdp_live_equals_replay() {
    live_equals_replay_on(
        "af_xdp",
        "firewall_af_xdp_live_equals_replay",
        "[[nf]]\nname = \"fw\"\nkind = \"firewall\"\nallow_ports = [80, 443]\n",
        false,
    );
}

const NAT: &str = "[[nf]]\nname = \"wire\"\nkind = \"wire\"\n\n[[nf]]\nname = \"nat\"\nkind = \"nat\"\ninside = \"10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16\"\npublic = \"198.51.100.1, 198.51.100.2\"\ntcp_timeout = 86400\ntcp_linger = 86400\nudp_timeout = 86400\nicmp_timeout = 86400\n";

/// The copying receive path (`rx = "copy"`) gives the same bytes as the default views.
#[test]
fn firewall_af_xdp_rx_copy_live_equals_replay() {
    live_equals_replay_on(
        "af_xdp\nrx = \"copy\"",
        "firewall_af_xdp_rx_copy_live_equals_replay",
        "[[nf]]\nname = \"fw\"\nkind = \"firewall\"\nallow_ports = [80, 443]\n",
        false,
    );
}

#[test]
fn firewall_rx_copy_live_equals_replay() {
    live_equals_replay_on(
        "af_packet\nrx = \"copy\"",
        "firewall_rx_copy_live_equals_replay",
        "[[nf]]\nname = \"fw\"\nkind = \"firewall\"\nallow_ports = [80, 443]\n",
        false,
    );
}

#[test]
fn nat_live_equals_replay() {
    live_equals_replay("nat_live_equals_replay", NAT, false);
}

#[test]
fn maglev_live_equals_replay() {
    live_equals_replay("maglev_live_equals_replay", MAGLEV, false);
}

const MAGLEV: &str = "[[nf]]\nname = \"wire\"\nkind = \"wire\"\n\n[[nf]]\nname = \"lb\"\nkind = \"maglev\"\nvip = \"10.0.0.1\"\nbackends = [{ addr = \"10.9.0.1\" }, { addr = \"10.9.0.2\", weight = 2 }, { addr = \"10.9.0.3\" }]\ntimeout = 0\n";

#[test]
fn nat_replies_from_b_are_translated_back() {
    live_equals_replay("nat_replies_from_b_are_translated_back", NAT, true);
}

#[test]
fn nat_af_xdp_replies_from_b_are_translated_back() {
    live_equals_replay_on(
        "af_xdp",
        "nat_af_xdp_replies_from_b_are_translated_back",
        NAT,
        true,
    );
}

#[test]
fn maglev_af_xdp_live_equals_replay() {
    live_equals_replay_on("af_xdp", "maglev_af_xdp_live_equals_replay", MAGLEV, false);
}

/// B answers every TCP/UDP packet it got (addresses, ports and MACs swapped, so the
/// checksums stay valid); A must receive, in order, exactly its own packets with those
/// fields swapped: the NAT translated each reply back to the original bytes. Returns
/// how many replies B sent, and how many of them went to the NAT's public addresses.
fn replies_from_b(
    ns: &Netns,
    dir: &Path,
    a0: &str,
    b0: &str,
    got: &Path,
    cap: &Path,
) -> (usize, usize) {
    let t = Trace::open(got).unwrap();
    let out = dir.join("replies.pcap");
    let mut w = catena::io::PcapWriter::create(&out, t.header()).unwrap();
    let (mut n, mut public) = (0, 0);
    for i in 0..t.len() {
        if let Some(r) = swapped(t.packet(i)) {
            public += (r[30..33] == [198, 51, 100]) as usize;
            w.write_packet(t.record(i).ts_ns, r.len() as u32, &r)
                .unwrap();
            n += 1;
        }
    }
    w.finish().unwrap();
    assert!(n > 100, "B has {n} packets to answer");
    let at_a = dir.join("at_a.pcap");
    let tcpdump = spawn_until(
        in_ns(
            &ns.names[0],
            &[
                "tcpdump",
                "-i",
                a0,
                "-Q",
                "in",
                "-w",
                at_a.to_str().unwrap(),
                "-U",
                "-n",
                "-Z",
                "root",
                "-s",
                "0",
            ],
        ),
        "listening on",
    );
    let o = in_ns(
        &ns.names[2],
        &["tcpreplay", "-i", b0, "--pps=20000", out.to_str().unwrap()],
    )
    .output()
    .unwrap();
    assert!(o.status.success(), "tcpreplay from B failed");
    let end = Instant::now() + Duration::from_secs(5);
    while count(&at_a) < n && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(200));
    tcpdump.signal(libc::SIGINT);
    drop(tcpdump.finish(5));
    let back = frames(&at_a);
    assert_eq!(back.len(), n, "replies that reached A");
    // Each, swapped again, is one of A's original packets, in capture order.
    let original = frames(cap);
    let mut j = 0;
    for (i, f) in back.iter().enumerate() {
        let o = swapped(f).unwrap();
        while j < original.len() && original[j] != o {
            j += 1;
        }
        assert!(
            j < original.len(),
            "reply {i} at A is not one of A's packets swapped"
        );
        j += 1;
    }
    (n, public)
}

/// An untagged IPv4 TCP/UDP frame (not a fragment) with MACs, addresses and ports
/// swapped.
fn swapped(f: &[u8]) -> Option<Vec<u8>> {
    if f.len() < 38 || f[12..14] != [0x08, 0x00] || f[14] >> 4 != 4 {
        return None;
    }
    let ihl = usize::from(f[14] & 15) * 4;
    let frag = u16::from_be_bytes([f[20], f[21]]) & 0x3fff;
    let l4 = 14 + ihl;
    if !matches!(f[23], 6 | 17) || frag != 0 || f.len() < l4 + 4 {
        return None;
    }
    let mut r = f.to_vec();
    r[..6].copy_from_slice(&f[6..12]);
    r[6..12].copy_from_slice(&f[..6]);
    r[26..30].copy_from_slice(&f[30..34]);
    r[30..34].copy_from_slice(&f[26..30]);
    r[l4..l4 + 2].copy_from_slice(&f[l4 + 2..l4 + 4]);
    r[l4 + 2..l4 + 4].copy_from_slice(&f[l4..l4 + 2]);
    Some(r)
}
