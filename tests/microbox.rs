//! The microbox NF: apps on a consolidated stack, the per-NF baseline, the HTTP
//! generator, the L4/L7 load balancers, dynamic subscriptions, and config errors.

mod common;

use std::collections::HashMap;
use std::process::Command;

use catena::io::gen_http::{generate_http, HttpGenOptions};
use catena::io::{PcapHeader, Trace};
use catena::packet::{checksum, LinkKind};
use catena::runtime::Summary;

fn stat(s: &Summary, name: &str) -> u64 {
    s.nfs[0]
        .stats
        .iter()
        .find(|(k, _)| k == name)
        .unwrap_or_else(|| panic!("no stat {name}: {:?}", s.nfs[0].stats))
        .1
}

/// As `common::run_chain`, with the runner checking that the microbox writes only the
/// fields its profile declares (the load balancers' addresses, the splicer's numbers).
fn run_checked(text: &str, trace: &Trace, output: &std::path::Path) -> Summary {
    use catena::runtime::{Chain, ChainConfig, NoProgress, RunOptions, Runner};
    let cfg = ChainConfig::parse(text, "test.toml").expect("config");
    let mut r = Runner::new(
        Chain::from_config(&cfg).expect("chain"),
        trace.max_packet_len(),
    );
    r.check_profiles(true);
    let mut opts = RunOptions::default();
    opts.outputs.push(("out".into(), output.to_path_buf()));
    r.run(trace, &opts, &mut NoProgress)
        .expect("run within the declared profile")
}

fn microbox(body: &str) -> String {
    format!("[input]\nports = 2\n[[nf]]\nname = \"mb\"\nkind = \"microbox\"\n{body}\n")
}

/// tshark fields; checksum statuses read 1 = good, 2 = bad with validation on.
fn tshark_fields(path: &std::path::Path, filter: &str, fields: &[&str]) -> Vec<Vec<String>> {
    let mut c = Command::new("tshark");
    c.arg("-r").arg(path);
    c.args([
        "-o",
        "ip.check_checksum:TRUE",
        "-o",
        "tcp.check_checksum:TRUE",
    ]);
    c.args(["-o", "tcp.relative_sequence_numbers:FALSE"]);
    if !filter.is_empty() {
        c.args(["-Y", filter]);
    }
    c.args(["-T", "fields", "-E", "occurrence=f"]);
    for f in fields {
        c.args(["-e", f]);
    }
    let out = c.output().expect("tshark");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split('\t').map(str::to_string).collect())
        .collect()
}

/// The generator's traffic per tshark (checksums, segment counts) and tcpflow (streams).
#[test]
fn http_generator_per_tshark_and_tcpflow() {
    common::require("tshark");
    common::require("tcpflow");
    let o = HttpGenOptions {
        connections: 30,
        response_bytes: 8192,
        concurrency: 8,
        ..Default::default()
    };
    let t = generate_http(&o).unwrap();
    let dir = common::tempdir();
    let p = dir.path().join("http.pcap");
    t.write_pcap(&p).unwrap();
    let rows = tshark_fields(
        &p,
        "",
        &[
            "ip.checksum.status",
            "tcp.checksum.status",
            "tcp.flags.syn",
            "tcp.flags.fin",
            "tcp.len",
        ],
    );
    assert_eq!(rows.len(), t.len());
    assert!(rows.iter().all(|r| r[0] == "1" && r[1] == "1"), "checksums");
    let count = |i: usize| rows.iter().filter(|r| r[i] == "1").count();
    assert_eq!((count(2), count(3)), (60, 60), "SYN and FIN per side");
    let header =
        "HTTP/1.1 200 OK\r\nContent-Length: 8192\r\nContent-Type: application/octet-stream\r\n\r\n";
    let max_len = rows
        .iter()
        .map(|r| r[4].parse::<usize>().unwrap())
        .max()
        .unwrap();
    assert_eq!(max_len, 1460, "segmented at the MSS");
    let out = dir.path().join("flows");
    assert!(Command::new("tcpflow")
        .arg("-r")
        .arg(&p)
        .arg("-o")
        .arg(&out)
        .status()
        .unwrap()
        .success());
    let mut responses = 0;
    let mut requests = 0;
    for e in std::fs::read_dir(&out).unwrap().flatten() {
        let name = e.file_name().into_string().unwrap();
        if name.ends_with(".xml") {
            continue;
        }
        let b = std::fs::read(e.path()).unwrap();
        if name.starts_with("192.000.002") {
            assert_eq!(b.len(), header.len() + 8192, "{name}");
            assert!(b.starts_with(header.as_bytes()));
            responses += 1;
        } else {
            assert!(
                b.starts_with(b"GET /obj/") && b.ends_with(b"\r\n\r\n"),
                "{name}"
            );
            requests += 1;
        }
    }
    assert_eq!((requests, responses), (30, 30));
}

/// The consolidated stack and the per-NF baseline see the same streams; each tcp_count
/// counts every stream byte tcpflow finds, and the per-NF mode runs one stack per app.
#[test]
fn consolidated_and_per_nf_agree_with_tcpflow_bytes() {
    common::require("tcpflow");
    let t = generate_http(&HttpGenOptions {
        connections: 200,
        response_bytes: 3000,
        mss: 536,
        ..Default::default()
    })
    .unwrap();
    let dir = common::tempdir();
    let p = dir.path().join("http.pcap");
    t.write_pcap(&p).unwrap();
    let flows = dir.path().join("flows");
    assert!(Command::new("tcpflow")
        .arg("-r")
        .arg(&p)
        .arg("-o")
        .arg(&flows)
        .status()
        .unwrap()
        .success());
    let total: u64 = std::fs::read_dir(&flows)
        .unwrap()
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().ends_with(".xml"))
        .map(|e| e.metadata().unwrap().len())
        .sum();
    let apps = "apps = [{ kind = \"tcp_count\" }, { kind = \"tcp_count\" }, { kind = \"tcp_count\", bytes = false }]";
    let mut seen = Vec::new();
    for mode in ["consolidated", "per-nf"] {
        let out = dir.path().join(format!("{mode}.pcap"));
        let s = common::run_chain(
            &microbox(&format!("mode = \"{mode}\"\n{apps}")),
            &t,
            Some(&out),
        );
        assert_eq!(s.packets_out, t.len() as u64);
        assert_eq!(stat(&s, "count_bytes"), 2 * total, "{mode}");
        assert_eq!(stat(&s, "count_packets"), 3 * t.len() as u64, "{mode}");
        assert_eq!(stat(&s, "stacks"), if mode == "per-nf" { 3 } else { 1 });
        assert_eq!(stat(&s, "flows"), stat(&s, "stacks") * 200);
        assert_eq!(
            stat(&s, "ended_closed"),
            stat(&s, "stacks") * 200,
            "FIN teardown seen"
        );
        // Handshake, FIN, FIN-ACK pair, last ACK: 5 state changes per connection.
        assert_eq!(stat(&s, "count_state_changes"), 3 * 5 * 200);
        seen.push(std::fs::read(&out).unwrap());
    }
    assert_eq!(seen[0], seen[1], "same output either way");
}

/// The DPI → IDS pattern: the labeller publishes a label on each flow's first data; the
/// watcher subscribes to data only for flows labelled HTTP and drops the subscription once
/// it alerts. A third of the connections are made non-HTTP by rewriting their method.
#[test]
fn dynamic_subscriptions_follow_published_labels() {
    common::require("tshark");
    let n = 90;
    let t = generate_http(&HttpGenOptions {
        connections: n,
        response_bytes: 4000,
        ..Default::default()
    })
    .unwrap();
    let mut frames: Vec<(u64, Vec<u8>)> = (0..t.len())
        .map(|i| (t.record(i).ts_ns, t.packet(i).to_vec()))
        .collect();
    let mut other = 0;
    for (_, f) in &mut frames {
        if f.len() > 58 && f[54..].starts_with(b"GET /obj/") {
            let conn: usize = f[63..]
                .split(|&b| b == b'?')
                .next()
                .map(|d| std::str::from_utf8(d).unwrap().parse().unwrap())
                .unwrap();
            if conn.is_multiple_of(3) {
                f[54..58].copy_from_slice(b"SSH-");
                // Keep the checksum valid: the words changed are "GE"/"T " → "SS"/"H-".
                let c = u16::from_be_bytes([f[50], f[51]]);
                let c = checksum::update_bytes(c, b"GET ", b"SSH-");
                f[50..52].copy_from_slice(&c.to_be_bytes());
                other += 1;
            }
        }
    }
    assert_eq!(other, n / 3);
    let t = Trace::from_packets(
        LinkKind::Ethernet,
        PcapHeader::new(1, true),
        frames.iter().map(|(ts, f)| (*ts, &f[..])),
    );
    let dir = common::tempdir();
    let p = dir.path().join("mixed.pcap");
    t.write_pcap(&p).unwrap();
    // Oracle for "all data events": segments with payload, per tshark.
    let data_segments = tshark_fields(&p, "tcp.len > 0", &["tcp.checksum.status"]);
    assert!(data_segments.iter().all(|r| r[0] == "1"));
    for dynamic in [true, false] {
        let s = common::run_chain(
            &microbox(&format!(
                "apps = [{{ kind = \"labeller\" }}, {{ kind = \"http_watch\", pattern = \"catena-gen\", dynamic = {dynamic} }}]"
            )),
            &t,
            None,
        );
        assert_eq!(stat(&s, "labelled_http"), (n - n / 3) as u64);
        assert_eq!(stat(&s, "labelled_other"), (n / 3) as u64);
        assert_eq!(
            stat(&s, "labeller_data_events"),
            n as u64,
            "one data event per flow, then unsubscribed"
        );
        // The label reaches the watcher before the flow's first data (which carries the
        // pattern), so every HTTP flow alerts on it.
        assert_eq!(stat(&s, "watch_alerts"), (n - n / 3) as u64);
        let events = stat(&s, "watch_data_events");
        if dynamic {
            assert_eq!(
                events,
                (n - n / 3) as u64,
                "HTTP flows only, one event each"
            );
        } else {
            // Every data segment of the other flows; HTTP flows until their alert (on the
            // first data) unsubscribed them.
            let per_flow = data_segments.len() / n;
            assert_eq!(data_segments.len() % n, 0, "all flows alike");
            assert_eq!(events, ((n / 3) * per_flow + (n - n / 3)) as u64);
        }
    }
}

/// Builds Ethernet/IPv4/TCP frames with valid checksums.
fn tcp4(
    (src, sp): ([u8; 4], u16),
    (dst, dp): ([u8; 4], u16),
    seq: u32,
    ack: u32,
    flags: u8,
    payload: &[u8],
) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0];
    let len = (40 + payload.len()) as u16;
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&len.to_be_bytes());
    f.extend_from_slice(&[0, 1, 0x40, 0, 64, 6, 0, 0]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&dst);
    let c = checksum::checksum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&sp.to_be_bytes());
    f.extend_from_slice(&dp.to_be_bytes());
    f.extend_from_slice(&seq.to_be_bytes());
    f.extend_from_slice(&ack.to_be_bytes());
    f.extend_from_slice(&[0x50, flags, 0x10, 0, 0, 0, 0, 0]);
    f.extend_from_slice(payload);
    let ps = checksum::pseudo_v4(src, dst, 6, (20 + payload.len()) as u16);
    let c = !checksum::add(ps, checksum::sum(&f[34..]));
    f[50..52].copy_from_slice(&c.to_be_bytes());
    f
}

fn trace_of(frames: &[Vec<u8>]) -> Trace {
    Trace::from_packets(
        LinkKind::Ethernet,
        PcapHeader::new(1, true),
        frames
            .iter()
            .enumerate()
            .map(|(i, f)| (1_000_000_000 + i as u64 * 1000, &f[..])),
    )
}

/// L7 load balancer: backend by Host / URI prefix, then every rewritten field and checksum
/// of the spliced conversation per tshark. The backend's ISN is near 2^32 so the
/// translation wraps.
#[test]
fn l7_lb_splices_with_translated_numbers_per_tshark() {
    common::require("tshark");
    const SYN: u8 = 0x02;
    const ACK: u8 = 0x10;
    const PA: u8 = 0x18;
    const FA: u8 = 0x11;
    let (cl, vip) = ([10, 0, 0, 1], [10, 9, 9, 9]);
    let (img, api) = ([10, 1, 0, 1], [10, 1, 0, 2]);
    let (c_isn, f_isn, b_isn) = (1000u32, 5000u32, 4_294_967_000u32);
    let req_img = b"GET /logo.png HTTP/1.1\r\nHost: IMG.example:80\r\n\r\n";
    let req_api = b"POST /api/v1 HTTP/1.1\r\nHost: www.example\r\nContent-Length: 0\r\n\r\n";
    let resp = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi";
    let mut frames = Vec::new();
    // Connection 1 (port 40000): Host img.example → backend "img" (10.1.0.1).
    // Connection 2 (port 40001): URI /api → backend "api" (10.1.0.2).
    for (port, req, be) in [(40000u16, &req_img[..], img), (40001, &req_api[..], api)] {
        let c1 = c_isn + 1;
        let f1 = f_isn + 1;
        let rl = req.len() as u32;
        frames.push(tcp4((cl, port), (vip, 80), c_isn, 0, SYN, b""));
        frames.push(tcp4((vip, 80), (cl, port), f_isn, c1, SYN | ACK, b""));
        frames.push(tcp4((cl, port), (vip, 80), c1, f1, ACK, b""));
        frames.push(tcp4((cl, port), (vip, 80), c1, f1, PA, req));
        // The backend leg: the backend answers in its own numbering.
        let b1 = b_isn.wrapping_add(1);
        frames.push(tcp4((be, 80), (cl, port), b1, c1 + rl, PA, resp));
        // The client acks in the numbering it saw (the splicer's).
        let rs = resp.len() as u32;
        frames.push(tcp4((cl, port), (vip, 80), c1 + rl, f1 + rs, FA, b""));
        frames.push(tcp4(
            (be, 80),
            (cl, port),
            b1.wrapping_add(rs),
            c1 + rl + 1,
            FA,
            b"",
        ));
        frames.push(tcp4(
            (cl, port),
            (vip, 80),
            c1 + rl + 1,
            f1 + rs + 1,
            ACK,
            b"",
        ));
    }
    let t = trace_of(&frames);
    let dir = common::tempdir();
    let out = dir.path().join("out.pcap");
    let s = run_checked(
        &microbox(&format!(
            r#"apps = [{{ kind = "l7_lb", vip = "10.9.9.9", default = "web", backends = [
  {{ name = "web", addr = "10.1.0.3" }},
  {{ name = "img", addr = "10.1.0.1", isn = {b_isn} }},
  {{ name = "api", addr = "10.1.0.2", isn = {b_isn} }}],
  rules = [{{ host = "img.example", backend = "img" }}, {{ prefix = "/api", backend = "api" }}] }}]"#
        )),
        &t,
        &out,
    );
    assert_eq!(s.packets_out, 16);
    assert_eq!(stat(&s, "l7_lb_bound"), 2);
    let rows = tshark_fields(
        &out,
        "",
        &[
            "ip.src",
            "ip.dst",
            "tcp.srcport",
            "tcp.dstport",
            "tcp.seq",
            "tcp.ack",
            "ip.checksum.status",
            "tcp.checksum.status",
        ],
    );
    // d = front ISN - backend ISN: client acks move by -d, backend seqs by +d.
    let d = f_isn.wrapping_sub(b_isn);
    let mut want = Vec::new();
    for (port, req, be) in [
        (40000u16, &req_img[..], "10.1.0.1"),
        (40001, &req_api[..], "10.1.0.2"),
    ] {
        let (c1, f1, rl, rs) = (c_isn + 1, f_isn + 1, req.len() as u32, resp.len() as u32);
        let b1 = b_isn.wrapping_add(1);
        let p = port.to_string();
        let row = |s: &str, d_: &str, sp: &str, dp: &str, seq: u32, ack: u32| {
            vec![s, d_, sp, dp, &seq.to_string(), &ack.to_string(), "1", "1"]
                .into_iter()
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        // Before the request completes: untouched.
        want.push(row("10.0.0.1", "10.9.9.9", &p, "80", c_isn, 0));
        want.push(row("10.9.9.9", "10.0.0.1", "80", &p, f_isn, c1));
        want.push(row("10.0.0.1", "10.9.9.9", &p, "80", c1, f1));
        // The request: to the backend, ack in the backend's numbering.
        want.push(row("10.0.0.1", be, &p, "80", c1, f1.wrapping_sub(d)));
        // The response: from the VIP, seq in the splicer's numbering.
        want.push(row(
            "10.9.9.9",
            "10.0.0.1",
            "80",
            &p,
            b1.wrapping_add(d),
            c1 + rl,
        ));
        want.push(row(
            "10.0.0.1",
            be,
            &p,
            "80",
            c1 + rl,
            (f1 + rs).wrapping_sub(d),
        ));
        want.push(row(
            "10.9.9.9",
            "10.0.0.1",
            "80",
            &p,
            b1.wrapping_add(rs).wrapping_add(d),
            c1 + rl + 1,
        ));
        want.push(row(
            "10.0.0.1",
            be,
            &p,
            "80",
            c1 + rl + 1,
            (f1 + rs + 1).wrapping_sub(d),
        ));
    }
    assert_eq!(rows, want);
    // Spot-check the arithmetic: the translated response seq is the splicer's f_isn + 1.
    assert_eq!(b_isn.wrapping_add(1).wrapping_add(d), f_isn + 1);
}

/// L4 load balancer: every client packet to the VIP goes to one backend per connection
/// (pinned), both backends get connections, checksums stay valid per tshark.
#[test]
fn l4_lb_pins_connections_per_tshark() {
    common::require("tshark");
    let t = generate_http(&HttpGenOptions {
        connections: 100,
        response_bytes: 2000,
        servers: 1,
        ..Default::default()
    })
    .unwrap();
    let dir = common::tempdir();
    let out = dir.path().join("out.pcap");
    let s = run_checked(
        &microbox(
            r#"apps = [{ kind = "l4_lb", vip = "192.0.2.1", backends = ["10.2.0.1", "10.2.0.2"] }]"#,
        ),
        &t,
        &out,
    );
    assert_eq!(s.packets_out, t.len() as u64);
    let rows = tshark_fields(
        &out,
        "",
        &[
            "ip.src",
            "ip.dst",
            "tcp.srcport",
            "ip.checksum.status",
            "tcp.checksum.status",
        ],
    );
    let mut per_conn: HashMap<String, String> = HashMap::new();
    let mut client_pkts = 0;
    for r in &rows {
        assert_eq!((r[3].as_str(), r[4].as_str()), ("1", "1"), "{r:?}");
        if r[0].starts_with("10.0.") {
            client_pkts += 1;
            assert!(r[1] == "10.2.0.1" || r[1] == "10.2.0.2", "{r:?}");
            let prev = per_conn
                .entry(format!("{}:{}", r[0], r[2]))
                .or_insert_with(|| r[1].clone());
            assert_eq!(prev, &r[1], "pinned");
        } else {
            assert_eq!(r[0], "192.0.2.1", "replies from the VIP pass as they are");
        }
    }
    assert_eq!(per_conn.len(), 100);
    let to_first = per_conn.values().filter(|b| *b == "10.2.0.1").count();
    assert!((20..=80).contains(&to_first), "{to_first}");
    assert_eq!(stat(&s, "l4_lb_rewritten"), client_pkts);
}

/// Pickup off: connections without a SYN are not tracked; idle timeout ends flows.
#[test]
fn midstream_and_idle_timeout() {
    let (a, b) = ([10, 0, 0, 1], [10, 0, 0, 2]);
    let frames = vec![
        tcp4((a, 1000), (b, 80), 5, 7, 0x18, b"no syn"),
        tcp4((a, 1001), (b, 80), 100, 0, 0x02, b""),
    ];
    let mut t = trace_of(&frames);
    let s = common::run_chain(
        &microbox("midstream = false\napps = [{ kind = \"tcp_count\" }]"),
        &t,
        None,
    );
    assert_eq!((stat(&s, "flows"), stat(&s, "untracked")), (1, 1));
    // Same flow twice, 10 s apart, timeout 1 s: the first ends idle, the second is a pickup.
    let frames = [
        tcp4((a, 1000), (b, 80), 5, 7, 0x18, b"one"),
        tcp4((a, 1000), (b, 80), 8, 7, 0x18, b"two"),
    ];
    t = Trace::from_packets(
        LinkKind::Ethernet,
        PcapHeader::new(1, true),
        [
            (1_000_000_000u64, &frames[0][..]),
            (11_000_000_000, &frames[1][..]),
        ],
    );
    let s = common::run_chain(
        &microbox("timeout = 1\napps = [{ kind = \"tcp_count\" }]"),
        &t,
        None,
    );
    assert_eq!(
        (
            stat(&s, "flows"),
            stat(&s, "ended_idle"),
            stat(&s, "ended_final")
        ),
        (2, 1, 1)
    );
    assert_eq!(stat(&s, "count_bytes"), 6);
}

/// Bad configs are one-line errors naming the NF and the problem.
#[test]
fn config_errors_are_one_line() {
    for (body, msg) in [
        ("", "`apps` is required"),
        ("apps = [{ kind = \"nope\" }]", "unknown app kind `nope`"),
        ("apps = [{ kind = \"tcp_count\", bytes = 3 }]", "`bytes` must be true or false"),
        ("apps = [{ kind = \"tcp_count\", typo = 1 }]", "unknown parameter `typo`"),
        ("level = \"monitor\"\napps = [{ kind = \"tcp_count\" }]", "below what the apps need"),
        ("mode = \"x\"\napps = [{ kind = \"tcp_count\" }]", "`mode`"),
        ("apps = [{ kind = \"l4_lb\", vip = \"1.2.3.4\", backends = [\"::1\"] }]", "family"),
        ("apps = [{ kind = \"l7_lb\", vip = \"1.2.3.4\", backends = [{ name = \"a\", addr = \"1.1.1.1\" }], default = \"b\" }]", "no backend named `b`"),
    ] {
        let cfg = catena::runtime::ChainConfig::parse(&microbox(body), "t.toml").unwrap();
        let e = catena::runtime::Chain::from_config(&cfg).err().expect(body).to_string();
        assert!(e.contains(msg) && !e.contains('\n'), "{body}: {e}");
        assert!(e.contains("mb"), "{e}");
    }
}

/// Ethernet/IPv6/TCP frame with a valid checksum.
fn tcp6(
    (src, sp): ([u8; 16], u16),
    (dst, dp): ([u8; 16], u16),
    seq: u32,
    ack: u32,
    flags: u8,
    payload: &[u8],
) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x86, 0xdd];
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&((20 + payload.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[6, 64]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&sp.to_be_bytes());
    f.extend_from_slice(&dp.to_be_bytes());
    f.extend_from_slice(&seq.to_be_bytes());
    f.extend_from_slice(&ack.to_be_bytes());
    f.extend_from_slice(&[0x50, flags, 0x10, 0, 0, 0, 0, 0]);
    f.extend_from_slice(payload);
    let ps = checksum::pseudo_v6(&src, &dst, 6, (20 + payload.len()) as u32);
    let c = !checksum::add(ps, checksum::sum(&f[54..]));
    f[70..72].copy_from_slice(&c.to_be_bytes());
    f
}

/// IPv6: a connection whose client sequence numbers wrap past 2^32, with a reordered
/// segment and a retransmission, through the L4 balancer and a counter: stream bytes
/// counted once, the close seen, destination rewritten with a valid checksum per tshark.
#[test]
fn ipv6_connection_across_the_sequence_wrap() {
    common::require("tshark");
    let c: [u8; 16] = "2001:db8::1"
        .parse::<std::net::Ipv6Addr>()
        .unwrap()
        .octets();
    let v: [u8; 16] = "2001:db8::80"
        .parse::<std::net::Ipv6Addr>()
        .unwrap()
        .octets();
    let (cl, vip) = ((c, 5000u16), (v, 80u16));
    let isn = u32::MAX - 5;
    let s_isn = 77u32;
    let c1 = isn.wrapping_add(1);
    let frames = [
        tcp6(cl, vip, isn, 0, 0x02, b""),
        tcp6(vip, cl, s_isn, c1, 0x12, b""),
        tcp6(cl, vip, c1, s_isn + 1, 0x10, b""),
        // 10 bytes from c1 (crossing 2^32 after 4), sent as 6..10 first, then 0..6,
        // then 0..6 again.
        tcp6(cl, vip, c1.wrapping_add(6), s_isn + 1, 0x18, b"GHIJ"),
        tcp6(cl, vip, c1, s_isn + 1, 0x18, b"ABCDEF"),
        tcp6(cl, vip, c1, s_isn + 1, 0x18, b"ABCDEF"),
        tcp6(vip, cl, s_isn + 1, c1.wrapping_add(10), 0x19, b"ok"),
        tcp6(cl, vip, c1.wrapping_add(10), s_isn + 4, 0x11, b""),
        tcp6(vip, cl, s_isn + 4, c1.wrapping_add(11), 0x10, b""),
    ];
    let t = trace_of(&frames);
    let dir = common::tempdir();
    let out = dir.path().join("out.pcap");
    let s = run_checked(
        &microbox(
            r#"apps = [{ kind = "tcp_count" }, { kind = "l4_lb", vip = "2001:db8::80", backends = ["2001:db8:1::1"] }]"#,
        ),
        &t,
        &out,
    );
    assert_eq!(stat(&s, "count_bytes"), 12);
    assert_eq!(stat(&s, "duplicate_bytes"), 6);
    assert_eq!((stat(&s, "flows"), stat(&s, "ended_closed")), (1, 1));
    let rows = tshark_fields(&out, "", &["ipv6.dst", "tcp.checksum.status"]);
    for (i, r) in rows.iter().enumerate() {
        let to_backend = [0, 2, 3, 4, 5, 7].contains(&i);
        let want = if to_backend {
            "2001:db8:1::1"
        } else {
            "2001:db8::1"
        };
        assert_eq!((r[0].as_str(), r[1].as_str()), (want, "1"), "frame {i}");
    }
}

/// Every capture we have, through a microbox with every app kind: no panic, conservation
/// (nothing is dropped by these apps), and the stack's bounds hold (tiny table and rings,
/// so overflow paths run too).
#[test]
fn every_capture_runs_through_all_apps() {
    let chain = microbox(
        r#"flows = 64
rings = 4
ring_bytes = 4096
timeout = 30
apps = [
  { kind = "labeller" },
  { kind = "http_watch", pattern = "GET" },
  { kind = "tcp_count" },
  { kind = "l4_lb", vip = "192.168.1.1", backends = ["10.0.0.1", "10.0.0.2"] },
  { kind = "l7_lb", vip = "10.0.0.254", backends = [{ name = "a", addr = "10.0.0.3" }] },
]"#,
    );
    let mut totals = (0u64, 0u64, 0u64);
    for p in common::all_captures() {
        let Ok(t) = Trace::open(&p) else { continue };
        let s = common::run_chain(&chain, &t, None);
        assert_eq!(s.nfs[0].packets_in, t.len() as u64, "{}", p.display());
        assert_eq!(s.nfs[0].packets_out, t.len() as u64, "{}", p.display());
        totals.0 += stat(&s, "flows");
        totals.1 += stat(&s, "table_full");
        totals.2 += stat(&s, "stream_gave_up");
    }
    assert!(totals.0 > 5000, "{totals:?}");
    assert!(
        totals.1 > 0 && totals.2 > 0,
        "bounds were exercised: {totals:?}"
    );
}

/// An app's drop verdict: the watcher in IPS mode drops the packet that completed each
/// match; the runner counts it under the app's name, and the counter after it in the
/// chain still sees the stream (state and data events) but not that packet.
#[test]
fn app_drops_are_counted_under_its_name() {
    let n = 40;
    let t = generate_http(&HttpGenOptions {
        connections: n,
        response_bytes: 100,
        ..Default::default()
    })
    .unwrap();
    let s = common::run_chain(
        &microbox(
            r#"apps = [{ kind = "labeller" }, { kind = "http_watch", pattern = "catena-gen", drop = true }, { kind = "l4_lb", vip = "192.0.2.1", backends = ["10.2.0.1"] }]"#,
        ),
        &t,
        None,
    );
    assert_eq!(stat(&s, "watch_alerts"), n as u64);
    assert_eq!(s.nfs[0].packets_dropped, n as u64);
    for (reason, count) in &s.nfs[0].drops {
        let want = if reason == "http_watch" { n as u64 } else { 0 };
        assert_eq!(*count, want, "{reason}");
    }
    assert_eq!(s.packets_out + s.packets_dropped, t.len() as u64);
    // Connections to 192.0.2.1 are a quarter; their request packets were dropped before
    // the balancer saw them.
    let to_vip = (0..t.len())
        .filter(|&i| {
            let p = t.packet(i);
            p[30..34] == [192, 0, 2, 1]
        })
        .count() as u64;
    assert_eq!(stat(&s, "l4_lb_rewritten"), to_vip - (n as u64 / 4));
}

/// Port reuse and resets: a second connection on the same 4-tuple after a close is a new
/// flow; a RST ends a flow as reset.
#[test]
fn port_reuse_and_reset() {
    let (a, b) = (([10, 0, 0, 1], 1234u16), ([10, 0, 0, 2], 80u16));
    let mut frames = Vec::new();
    for isn in [100u32, 9000] {
        frames.push(tcp4(a, b, isn, 0, 0x02, b""));
        frames.push(tcp4(b, a, 7, isn + 1, 0x12, b""));
        frames.push(tcp4(a, b, isn + 1, 8, 0x18, b"hi"));
        frames.push(tcp4(a, b, isn + 3, 8, 0x11, b""));
        frames.push(tcp4(b, a, 8, isn + 4, 0x11, b""));
        frames.push(tcp4(a, b, isn + 4, 9, 0x10, b""));
    }
    frames.push(tcp4(a, b, 50_000, 0, 0x02, b""));
    frames.push(tcp4(b, a, 0, 50_001, 0x14, b""));
    let s = common::run_chain(
        &microbox("apps = [{ kind = \"tcp_count\" }]"),
        &trace_of(&frames),
        None,
    );
    assert_eq!(
        (
            stat(&s, "flows"),
            stat(&s, "ended_closed"),
            stat(&s, "ended_reset")
        ),
        (3, 2, 1)
    );
    assert_eq!(stat(&s, "count_bytes"), 4);
    // SYN-ACK, ACK with data, FIN, FIN, last ACK per connection; the reset one: RST.
    assert_eq!(stat(&s, "count_state_changes"), 2 * 5 + 1);
}
