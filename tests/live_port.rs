//! The AF_PACKET port on a veth pair inside a namespace this test makes: frames sent on
//! one end arrive on the other byte for byte and in order (802.1Q tags restored), the
//! counters agree, fanout keeps each flow on one socket, and missing interfaces give a
//! one-line error. Bounded: a few thousand frames, a few seconds.

mod netns;

use std::time::{Duration, Instant};

use catena::io::{AfPacket, AfPacketConfig, Port, Recv};
use catena::packet::{Batch, Pool};
use netns::Netns;

/// An Ethernet/IPv4/UDP frame of `len` bytes from flow `flow`, numbered `seq`.
fn frame(flow: u16, seq: u32, len: usize, vlan: Option<u16>) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 2]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 1]);
    let mut o = 12;
    if let Some(tci) = vlan {
        f[12..14].copy_from_slice(&[0x81, 0x00]);
        f[14..16].copy_from_slice(&tci.to_be_bytes());
        o = 16;
    }
    f[o..o + 2].copy_from_slice(&[0x08, 0x00]);
    let ip = o + 2;
    f[ip] = 0x45;
    f[ip + 2..ip + 4].copy_from_slice(&((len - ip) as u16).to_be_bytes());
    f[ip + 8] = 64;
    f[ip + 9] = 17;
    f[ip + 12..ip + 16].copy_from_slice(&[10, 0, (flow >> 8) as u8, flow as u8]);
    f[ip + 16..ip + 20].copy_from_slice(&[10, 1, 0, 1]);
    f[ip + 20..ip + 22].copy_from_slice(&(1000 + flow).to_be_bytes());
    f[ip + 22..ip + 24].copy_from_slice(&53u16.to_be_bytes());
    f[ip + 28..ip + 32].copy_from_slice(&seq.to_be_bytes());
    f
}

/// Receives until `want` packets or the deadline, or (want 0) what waits now.
fn collect(port: &mut AfPacket, pool: &mut Pool, want: usize, secs: u64) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let mut b = Batch::with_capacity(32);
    let end = Instant::now() + Duration::from_secs(secs);
    loop {
        match port.recv(pool, &mut b, 32) {
            Recv::Got(0) | Recv::Ended => {
                if got.len() >= want || Instant::now() >= end {
                    return got;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Recv::Got(_) => {
                for p in b.drain() {
                    got.push(p.data().to_vec());
                    pool.free(p);
                }
            }
        }
    }
}

#[test]
fn frames_cross_a_veth_pair_intact_and_in_order() {
    if !netns::can_run("frames_cross_a_veth_pair_intact_and_in_order") {
        return;
    }
    let ns = Netns::new(1);
    let (a, b) = ns.veth(0, 0, "p", 9000);
    std::thread::scope(|s| {
        s.spawn(|| {
            ns.enter(0);
            let mut rx = AfPacket::open(&AfPacketConfig::new(&b)).unwrap();
            let mut tx = AfPacket::open(&AfPacketConfig::new(&a)).unwrap();
            let sizes = [60usize, 64, 128, 600, 1514, 1518, 4000, 9000];
            let sent: Vec<Vec<u8>> = (0..3000u32)
                .map(|i| {
                    let vlan = (i % 7 == 3).then_some(100 + (i % 50) as u16);
                    frame((i % 40) as u16, i, sizes[i as usize % sizes.len()], vlan)
                })
                .collect();
            let mut pool = Pool::new(256, 9216);
            let mut got = Vec::new();
            // Send in batches of 32 (one sendmmsg each), receiving as we go so the ring
            // never overflows.
            for chunk in sent.chunks(32) {
                for f in chunk {
                    tx.send(f, 0, f.len() as u32);
                }
                tx.flush();
                got.extend(collect(&mut rx, &mut pool, 0, 0));
            }
            let rest = sent.len() - got.len();
            got.extend(collect(&mut rx, &mut pool, rest, 5));
            assert_eq!(got.len(), sent.len(), "frames received");
            for (i, (g, s)) in got.iter().zip(&sent).enumerate() {
                assert_eq!(g, s, "frame {i} differs");
            }
            rx.refresh();
            let (t, r) = (tx.counters(), rx.counters());
            assert_eq!((t.tx, t.tx_errors), (3000, 0));
            assert_eq!(t.tx_bytes, sent.iter().map(|f| f.len() as u64).sum::<u64>());
            assert_eq!((r.rx, r.rx_oversize, r.kernel_drops), (3000, 0, 0));
            // Nothing we sent came back to the sender's own socket.
            assert!(collect(&mut tx, &mut pool, 1, 0).is_empty());
            assert_eq!(pool.available(), pool.size());
        });
    });
}

#[test]
fn oversize_frames_are_counted_not_kept() {
    if !netns::can_run("oversize_frames_are_counted_not_kept") {
        return;
    }
    let ns = Netns::new(1);
    let (a, b) = ns.veth(0, 0, "o", 9000);
    std::thread::scope(|s| {
        s.spawn(|| {
            ns.enter(0);
            let mut rx = AfPacket::open(&AfPacketConfig::new(&b)).unwrap();
            let mut tx = AfPacket::open(&AfPacketConfig::new(&a)).unwrap();
            // Buffers of 2 KiB: a 4000-byte frame does not fit.
            let mut pool = Pool::new(64, 1514);
            for (i, len) in [100usize, 4000, 200].into_iter().enumerate() {
                tx.send(&frame(1, i as u32, len, None), 0, len as u32);
            }
            tx.flush();
            let got = collect(&mut rx, &mut pool, 2, 3);
            assert_eq!(got.iter().map(Vec::len).collect::<Vec<_>>(), [100, 200]);
            let c = rx.counters();
            assert_eq!((c.rx, c.rx_oversize), (3, 1));
        });
    });
}

#[test]
fn fanout_keeps_each_flow_on_one_socket() {
    if !netns::can_run("fanout_keeps_each_flow_on_one_socket") {
        return;
    }
    let ns = Netns::new(1);
    let (a, b) = ns.veth(0, 0, "f", 1500);
    std::thread::scope(|s| {
        s.spawn(|| {
            ns.enter(0);
            let mut cfg = AfPacketConfig::new(&b);
            cfg.fanout = Some(7);
            let mut r1 = AfPacket::open(&cfg).unwrap();
            let mut r2 = AfPacket::open(&cfg).unwrap();
            let mut tx = AfPacket::open(&AfPacketConfig::new(&a)).unwrap();
            let (flows, per) = (64u16, 8u32);
            for seq in 0..per {
                for fl in 0..flows {
                    let f = frame(fl, seq, 100, None);
                    tx.send(&f, 0, 100);
                }
                tx.flush();
            }
            let mut pool = Pool::new(1024, 1514);
            let mut g1 = collect(&mut r1, &mut pool, 1, 2);
            let mut g2 = collect(&mut r2, &mut pool, 1, 2);
            let total = usize::from(flows) * per as usize;
            let end = Instant::now() + Duration::from_secs(5);
            while g1.len() + g2.len() < total && Instant::now() < end {
                g1.extend(collect(&mut r1, &mut pool, 0, 0));
                g2.extend(collect(&mut r2, &mut pool, 0, 0));
            }
            assert_eq!(g1.len() + g2.len(), total);
            assert!(!g1.is_empty() && !g2.is_empty(), "both sockets get a share");
            // Source port identifies the flow (UDP header at 34).
            let flow_of = |f: &Vec<u8>| u16::from_be_bytes([f[34], f[35]]);
            let s1: std::collections::BTreeSet<u16> = g1.iter().map(flow_of).collect();
            let s2: std::collections::BTreeSet<u16> = g2.iter().map(flow_of).collect();
            assert!(s1.is_disjoint(&s2), "a flow was split between sockets");
            assert_eq!(s1.len() + s2.len(), usize::from(flows));
        });
    });
}

#[test]
fn missing_interface_is_one_line_saying_what_to_do() {
    let e = match AfPacket::open(&AfPacketConfig::new("nosuchif0")) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("opened a missing interface"),
    };
    assert_eq!(
        e,
        "interface `nosuchif0` not found: create it or fix `iface` (see `ip link`)"
    );
}

fn check(toml: &str) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("c.toml");
    std::fs::write(&f, toml).unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_catena"))
        .args(["check", f.to_str().unwrap()])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr).to_string();
    (o.status.success(), e.replace(f.to_str().unwrap(), "c.toml"))
}

#[test]
fn check_says_what_to_do_about_ports() {
    let port = |kind: &str, extra: &str| {
        format!("[[port]]\nname = \"a\"\nkind = \"{kind}\"\n{extra}\n[[nf]]\nname = \"w\"\nkind = \"wire\"\n")
    };
    let cases = [
        (
            port("af_packet", "iface = \"nosuchif0\""),
            "error: c.toml: port `a`: interface `nosuchif0` not found: create it or fix `iface` (see `ip link`)\n",
        ),
        (
            port("af_xdp", "iface = \"nosuchif0\""),
            "error: c.toml: port `a`: interface `nosuchif0` not found: create it or fix `iface` (see `ip link`)\n",
        ),
        (
            port("af_xdp", "iface = \"lo\"\nfanout = 1"),
            "error: c.toml: port `a`: `fanout` does not apply to kind `af_xdp`\n",
        ),
        (
            port("af_packet", "iface = \"lo\"\ntx = \"fast\""),
            "error: c.toml: port `a`: `tx`: `fast` is not a TX mode (sendmmsg, ring)\n",
        ),
        (
            port("af_xdp", "iface = \"lo\"\ntx = \"ring\""),
            "error: c.toml: port `a`: `tx` does not apply to kind `af_xdp`\n",
        ),
        (
            port("af_xdp", "iface = \"lo\"\nrx = \"sideways\""),
            "error: c.toml: port `a`: `rx`: `sideways` is not an RX mode (view, copy)\n",
        ),
        (
            port("af_packet", "iface = \"lo\"\nrx = \"zero\""),
            "error: c.toml: port `a`: `rx`: `zero` is not an RX mode (view, copy)\n",
        ),
        (
            port("pcap", "path = \"x.pcap\"\nrx = \"copy\""),
            "error: c.toml: port `a`: `rx` does not apply to kind `pcap`\n",
        ),
        (
            format!("{}{}", port("af_xdp", "iface = \"lo\""), port("af_xdp", "iface = \"lo\"").replace("name = \"a\"", "name = \"b\"").split("[[nf]]").next().unwrap()),
            "error: c.toml: port `b`: interface `lo` already has an af_xdp port (one per interface)\n",
        ),
        (
            port("af_packet", "iface = \"lo\"\nqueue = 1"),
            "error: c.toml: port `a`: `queue` does not apply to kind `af_packet`\n",
        ),
        (
            port("af_packet", ""),
            "error: c.toml: port `a`: needs `iface = \"NAME\"`\n",
        ),
        (
            port("tap", ""),
            "error: c.toml: port `a`: unknown kind `tap` (kinds: af_packet, af_xdp, pcap)\n",
        ),
        (
            port("pcap", "rate = \"fast\""),
            "error: c.toml: port `a`: needs `path` (a capture to replay) or `write` (a file to record to)\n",
        ),
        (
            format!("[input]\nports = 2\n{}", port("af_packet", "iface = \"lo\"")),
            "error: c.toml: a chain with [[port]] tables takes its packets from them: drop `[input] ports` and `trace` (replay a file with a `kind = \"pcap\"` port)\n",
        ),
    ];
    for (toml, want) in cases {
        let (ok, e) = check(&toml);
        assert!(!ok);
        assert_eq!(e, want);
    }
    // An existing interface passes (as root; otherwise the permission error is one line).
    let (ok, e) = check(&port("af_packet", "iface = \"lo\""));
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        assert!(ok, "{e}");
    } else {
        assert!(
            e.contains("AF_PACKET needs CAP_NET_RAW") && e.lines().count() == 1,
            "{e}"
        );
    }
}
