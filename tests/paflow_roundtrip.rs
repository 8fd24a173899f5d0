//! PA-Flow equivalence on every capture in ../shared/datasets: packets sent through an
//! aggregating pcap port (batches of 1 to 32, flushed per batch as the runtime does)
//! and read back through an aggregating pcap port come out byte-identical and in order.
//! The aggregated file is checked against tshark (frames of EtherType 0x88b5), and a
//! `catena run` pair does the same through chain files.

mod common;

use std::path::Path;
use std::process::Command;

use catena::io::{PcapPort, Port, Rate, Recv, Trace};
use catena::optimise::aggregate::{Aggregating, Packer};
use catena::packet::{Batch, LinkKind, Pool, MAX_BATCH};
use serde_json::Value;

/// Sends every packet of `t` out of an aggregating port writing `agg`; the batch sizes
/// cycle through 1..=32 so lone packets and full batches both occur.
fn aggregate(t: &Trace, agg: &Path, size: usize) -> catena::io::PortCounters {
    let inner = PcapPort::open(None, Some(agg), Rate::Top, t.header()).unwrap();
    let mut port = Aggregating::new(Box::new(inner), size);
    let mut i = 0;
    let mut batch = 1;
    while i < t.len() {
        for k in i..(i + batch).min(t.len()) {
            let r = t.record(k);
            port.send(t.packet(k), r.ts_ns, r.wire_len);
        }
        port.flush();
        i += batch;
        batch = batch % MAX_BATCH + 1;
    }
    port.finish().unwrap();
    port.counters()
}

/// Reads `agg` back through an aggregating port: the packets, unpacked.
fn disaggregate(agg: &Path, size: usize) -> (Vec<Vec<u8>>, catena::io::PortCounters) {
    let h = Trace::open(agg).unwrap().header();
    let inner = PcapPort::open(Some(agg), None, Rate::Top, h).unwrap();
    let mut port = Aggregating::new(Box::new(inner), size);
    let mut pool = Pool::new(256, 65535);
    let mut out = Vec::new();
    let mut b = Batch::new();
    loop {
        let r = port.recv(&mut pool, &mut b, MAX_BATCH);
        assert!(b.len() <= MAX_BATCH, "recv exceeded its max");
        for p in b.drain() {
            out.push(p.data().to_vec());
            pool.free(p);
        }
        if r == Recv::Ended {
            break;
        }
    }
    (out, port.counters())
}

#[test]
fn every_ethernet_capture_comes_back_byte_identical_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let agg = dir.path().join("agg.pcap");
    let (mut checked, mut skipped, mut packed) = (0, 0, 0u64);
    for cap in common::all_captures() {
        let Ok(t) = Trace::open(&cap) else {
            skipped += 1;
            continue;
        };
        if t.link() != LinkKind::Ethernet || t.is_empty() {
            // Aggregated frames are Ethernet frames: the runtime refuses the others.
            skipped += 1;
            continue;
        }
        let sent = aggregate(&t, &agg, 9000);
        let (got, rc) = disaggregate(&agg, 9000);
        let want: Vec<&[u8]> = (0..t.len()).map(|i| t.packet(i)).collect();
        assert_eq!(got.len(), want.len(), "{}: packet count", cap.display());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.as_slice(), *w, "{}: packet {i} differs", cap.display());
        }
        assert_eq!(rc.rx_bad_aggregate, 0);
        assert_eq!(rc.rx_aggregates, sent.tx_aggregates, "{}", cap.display());
        assert_eq!(rc.rx_unpacked, sent.tx_aggregated, "{}", cap.display());
        packed += sent.tx_aggregated;
        checked += 1;
    }
    eprintln!("{checked} captures round-tripped, {skipped} skipped (not Ethernet or unreadable), {packed} packets went inside aggregates");
    assert!(checked > 100, "only {checked} captures checked");
    assert!(packed > 100_000, "only {packed} packets aggregated");
}

#[test]
fn aggregated_file_agrees_with_tshark() {
    common::require("tshark");
    let t = Trace::open(&common::dataset("bench/ndpi-ether-merged.pcap")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let agg = dir.path().join("agg.pcap");
    let sent = aggregate(&t, &agg, 9000);
    let o = Command::new("tshark")
        .args([
            "-r",
            agg.to_str().unwrap(),
            "-T",
            "fields",
            "-e",
            "eth.type",
            "-e",
            "frame.len",
        ])
        .output()
        .unwrap();
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    let mut aggs = 0u64;
    let mut frames = 0u64;
    for l in text.lines() {
        frames += 1;
        let mut f = l.split('\t');
        if f.next() == Some("0x88b5") {
            aggs += 1;
            let len: usize = f.next().unwrap().parse().unwrap();
            assert!(len <= 9000, "aggregate of {len} B");
        }
    }
    assert_eq!(aggs, sent.tx_aggregates);
    assert_eq!(frames, sent.tx, "frames written");
    // Fewer frames than packets: what aggregation is for.
    assert!(
        frames < t.len() as u64 / 2,
        "{frames} frames for {} packets",
        t.len()
    );
}

fn run(chain: &str, dir: &Path) -> (Value, bool, String) {
    let p = dir.join("chain.toml");
    std::fs::write(&p, chain).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_catena"))
        .args(["run", p.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    let v = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    (
        v,
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

fn ports(read: &Path, read_agg: bool, write: &Path, write_agg: bool) -> String {
    format!(
        "[[port]]\nname = \"a\"\nkind = \"pcap\"\npath = \"{}\"\naggregate = {read_agg}\n\n[[port]]\nname = \"b\"\nkind = \"pcap\"\nwrite = \"{}\"\naggregate = {write_agg}\n\n[[nf]]\nname = \"wire\"\nkind = \"wire\"\n",
        read.display(),
        write.display()
    )
}

#[test]
fn catena_run_pair_gives_the_capture_back() {
    let cap = common::dataset("bench/ndpi-ether-merged.pcap");
    let dir = tempfile::tempdir().unwrap();
    let (agg, back) = (dir.path().join("agg.pcap"), dir.path().join("back.pcap"));
    let (s1, ok, err) = run(&ports(&cap, false, &agg, true), dir.path());
    assert!(ok, "{err}");
    let (s2, ok, err) = run(&ports(&agg, true, &back, false), dir.path());
    assert!(ok, "{err}");
    let (t, b) = (Trace::open(&cap).unwrap(), Trace::open(&back).unwrap());
    assert_eq!(b.len(), t.len());
    for i in 0..t.len() {
        assert_eq!(b.packet(i), t.packet(i), "packet {i}");
    }
    let tx = &s1["ports"][1]["live"];
    let rx = &s2["ports"][0]["live"];
    assert!(tx["tx_aggregated"].as_u64().unwrap() > 80_000, "{tx}");
    assert_eq!(rx["rx_unpacked"], tx["tx_aggregated"]);
    assert_eq!(s2["packets_in"].as_u64().unwrap() as usize, t.len());
    // The same through `catena run` with the NFs on views into the aggregates (the live
    // runtime's `after_batch` path, no root needed): the capture back, views used.
    let views = ports(&agg, true, &back, false).replacen(
        "aggregate = true\n",
        "aggregate = true\naggregate_views = true\n",
        1,
    );
    let (s3, ok, err) = run(&views, dir.path());
    assert!(ok, "{err}");
    assert!(!err.contains("outlived"), "{err}");
    let b = Trace::open(&back).unwrap();
    assert_eq!(b.len(), t.len());
    for i in 0..t.len() {
        assert_eq!(b.packet(i), t.packet(i), "views: packet {i}");
    }
    let rv = &s3["ports"][0]["live"];
    assert_eq!(rv["rx_unpacked"], tx["tx_aggregated"]);
    let big = (0..t.len())
        .filter(|&i| t.packet(i).len() + catena::packet::HEADROOM > 2048)
        .count() as u64;
    let viewed = rv["rx_viewed"].as_u64().unwrap();
    assert!(
        viewed + big >= rv["rx_unpacked"].as_u64().unwrap() && viewed > 80_000,
        "{rv}"
    );
    // Views need aggregation on the port: one line.
    let c = ports(&cap, false, &back, false).replacen(
        "aggregate = false\n",
        "aggregate = false\naggregate_views = true\n",
        1,
    );
    let (_, ok, err) = run(&c, dir.path());
    assert!(!ok);
    assert!(
        err.contains("`aggregate_views` needs `aggregate = true`"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn malformed_aggregates_are_counted_and_nothing_else_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let pkt = |n: u8, len: usize| {
        let mut v = vec![n; len];
        v[12] = 0x08;
        v[13] = 0x00;
        v
    };
    let agg = |pkts: &[Vec<u8>]| {
        let mut p = Packer::new(9000);
        for x in pkts {
            assert!(p.push(x));
        }
        p.frame().to_vec()
    };
    let mut frames: Vec<Vec<u8>> = Vec::new();
    let mut want: Vec<Vec<u8>> = Vec::new();
    // A plain frame, a good aggregate, then one cut inside its third packet (two kept),
    // one whose count says 4 for 2 records (two kept), a bad version (none kept), a
    // header cut short, and a plain frame after them all.
    frames.push(pkt(1, 60));
    want.push(pkt(1, 60));
    let good = [pkt(2, 70), pkt(3, 80)];
    frames.push(agg(&good));
    want.extend(good.iter().cloned());
    let three = [pkt(4, 64), pkt(5, 65), pkt(6, 200)];
    let mut cut = agg(&three);
    cut.truncate(cut.len() - 50);
    frames.push(cut);
    want.extend(three[..2].iter().cloned());
    let two = [pkt(7, 90), pkt(8, 91)];
    let mut over = agg(&two);
    over[17] = 4;
    frames.push(over);
    want.extend(two.iter().cloned());
    let mut ver = agg(&two);
    ver[14] = 9;
    frames.push(ver);
    frames.push(agg(&two)[..16].to_vec());
    frames.push(pkt(9, 61));
    want.push(pkt(9, 61));
    let input = dir.path().join("in.pcap");
    Trace::from_packets(
        LinkKind::Ethernet,
        catena::io::PcapHeader::new(1, false),
        frames
            .iter()
            .enumerate()
            .map(|(i, f)| (i as u64 * 1000, f.as_slice())),
    )
    .write_pcap(&input)
    .unwrap();
    let out = dir.path().join("out.pcap");
    let (s, ok, err) = run(&ports(&input, true, &out, false), dir.path());
    assert!(ok, "{err}");
    let got = Trace::open(&out).unwrap();
    let got: Vec<&[u8]> = (0..got.len()).map(|i| got.packet(i)).collect();
    assert_eq!(got, want.iter().map(|v| v.as_slice()).collect::<Vec<_>>());
    assert_eq!(s["ports"][0]["live"]["rx_bad_aggregate"], 4, "{s}");
    // Conservation: every good packet plus one per bad frame went in; the bad ones are
    // the input's `bad-aggregate` drops.
    assert_eq!(s["packets_in"], want.len() + 4);
    assert_eq!(s["packets_dropped"], 4);
    let text = serde_json::to_string(&s).unwrap();
    assert!(text.contains("bad-aggregate"), "{text}");
}

#[test]
fn aggregate_needs_ethernet_and_a_sane_size() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o.pcap");
    let cap = common::dataset("bench/ndpi-ether-merged.pcap");
    let mut c = ports(&cap, false, &out, true);
    c = c.replace("aggregate = true", "aggregate = true\naggregate_size = 100");
    let (_, ok, err) = run(&c, dir.path());
    assert!(!ok);
    assert!(
        err.contains("aggregate_size = 100") && err.contains("out of range"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    // An af_packet port cannot send aggregates above 9,234 B: refused before any packet
    // (checked after the AF_PACKET permission probe, so only as root).
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let c = ports(&cap, false, &out, true)
            .replace(
                "kind = \"pcap\"\nwrite",
                "kind = \"af_packet\"\niface = \"lo\"\n#",
            )
            .replace(
                "aggregate = true",
                "aggregate = true\naggregate_size = 20000",
            );
        let (_, ok, err) = run(&c, dir.path());
        assert!(!ok);
        assert!(
            err.contains("aggregate_size 20000 B is more than an af_packet port sends"),
            "{err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
}

fn packets(p: &Path) -> Vec<Vec<u8>> {
    let t = Trace::open(p).unwrap();
    (0..t.len()).map(|i| t.packet(i).to_vec()).collect()
}

const ACL: &str = "[[nf]]\nname = \"acl\"\nkind = \"ip_filter\"\ndefault = \"deny\"\nrules = [\"deny src net 10.0.0.0/8\", \"allow tcp dst port 80 or 443\", \"allow udp port 53\", \"allow icmp\"]\n\n";

#[test]
fn drops_inside_aggregates_give_the_same_output_and_counts() {
    let cap = common::dataset("bench/ndpi-ether-merged.pcap");
    let dir = tempfile::tempdir().unwrap();
    let (agg, on, off) = (
        dir.path().join("agg.pcap"),
        dir.path().join("on.pcap"),
        dir.path().join("off.pcap"),
    );
    let (_, ok, err) = run(&ports(&cap, false, &agg, true), dir.path());
    assert!(ok, "{err}");
    // The filter sees the unpacked packets of aggregates and drops some of them.
    let with_acl = |c: String| {
        c.replace(
            "[[nf]]\nname = \"wire\"",
            &format!("{ACL}[[nf]]\nname = \"wire\""),
        )
    };
    let (s_on, ok, err) = run(&with_acl(ports(&agg, true, &on, false)), dir.path());
    assert!(ok, "{err}");
    let (s_off, ok, err) = run(&with_acl(ports(&cap, false, &off, false)), dir.path());
    assert!(ok, "{err}");
    let acl = |s: &Value| s["nfs"][0].clone();
    assert_eq!(acl(&s_on)["name"], "acl");
    assert!(acl(&s_on)["packets_dropped"].as_u64().unwrap() > 1000);
    assert_eq!(acl(&s_on)["packets_in"], acl(&s_off)["packets_in"]);
    assert_eq!(acl(&s_on)["drops"], acl(&s_off)["drops"]);
    assert!(
        packets(&on) == packets(&off),
        "filtered output differs with aggregation"
    );
}

#[test]
fn packets_for_different_ports_never_share_an_aggregate() {
    // Ports 0→1 and 2→3 (wire pairs them): two captures replayed at once, interleaved
    // in the same batches, each written aggregated to its own file.
    let dir = tempfile::tempdir().unwrap();
    let c1 = common::dataset("bench/ndpi-ether-merged.pcap");
    let c2 = common::dataset("retina/tls_ciphers.pcap");
    let (o1, o2) = (dir.path().join("o1.pcap"), dir.path().join("o2.pcap"));
    let chain = format!(
        "{}\n[[port]]\nname = \"c\"\nkind = \"pcap\"\npath = \"{}\"\n\n[[port]]\nname = \"d\"\nkind = \"pcap\"\nwrite = \"{}\"\naggregate = true\n",
        ports(&c1, false, &o1, true).replace("[[nf]]\nname = \"wire\"\nkind = \"wire\"\n", ""),
        c2.display(),
        o2.display()
    ) + "\n[[nf]]\nname = \"wire\"\nkind = \"wire\"\n";
    let (s, ok, err) = run(&chain, dir.path());
    assert!(ok, "{err}");
    assert!(
        s["ports"][3]["live"]["tx_aggregated"].as_u64().unwrap() > 100,
        "{s}"
    );
    for (out, cap) in [(&o1, &c1), (&o2, &c2)] {
        let back = dir.path().join("back.pcap");
        let (_, ok, err) = run(&ports(out, true, &back, false), dir.path());
        assert!(ok, "{err}");
        assert!(
            packets(&back) == packets(cap),
            "{} mixed with the other port's packets",
            out.display()
        );
    }
}

/// Reads `agg` back through an aggregating port with views (`aggregate_views`), as the
/// live runtime does: each batch's packets are used (every 5th changed, which copies
/// it), freed, then `after_batch`. `keep` packets from the first batch are kept past
/// it; `after_batch` runs only after a batch that took packets, as in the runtime.
/// Returns the packets' bytes, how many were views, the port, and the pool.
fn disaggregate_views(agg: &Path, keep: usize) -> (Vec<Vec<u8>>, u64, Aggregating, Pool) {
    let h = Trace::open(agg).unwrap().header();
    let inner = PcapPort::open(Some(agg), None, Rate::Top, h).unwrap();
    let mut port = Aggregating::new(Box::new(inner), 9000).views(true);
    let mut pool = Pool::new(256, 65535);
    let mut out = Vec::new();
    let mut kept = Vec::new();
    let mut b = Batch::new();
    let mut views = 0;
    loop {
        let r = port.recv(&mut pool, &mut b, MAX_BATCH);
        for mut p in b.drain() {
            views += u64::from(p.is_view());
            if out.len() % 5 == 0 {
                let d = p.data_mut();
                d[0] ^= 0xff;
                d[0] ^= 0xff;
            }
            out.push(p.data().to_vec());
            if kept.len() < keep {
                kept.push(p);
            } else {
                pool.free(p);
            }
        }
        if matches!(r, Recv::Got(n) if n > 0) {
            port.after_batch(&mut pool);
        }
        if r == Recv::Ended {
            break;
        }
    }
    // A kept packet still reads its own bytes, however many frames came after it.
    for (i, p) in kept.iter().enumerate() {
        assert_eq!(p.data(), out[i].as_slice(), "kept packet {i} changed");
    }
    for p in kept {
        pool.free(p);
    }
    (out, views, port, pool)
}

#[test]
fn views_into_received_aggregates_come_back_byte_identical_and_frames_return() {
    let t = Trace::open(&common::dataset("bench/ndpi-ether-merged.pcap")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let agg = dir.path().join("agg.pcap");
    let sent = aggregate(&t, &agg, 9000);
    let want: Vec<&[u8]> = (0..t.len()).map(|i| t.packet(i)).collect();

    let (got, views, port, pool) = disaggregate_views(&agg, 0);
    assert_eq!(got.len(), want.len());
    assert!(
        got.iter().zip(&want).all(|(g, w)| g == w),
        "views: bytes differ"
    );
    let c = port.counters();
    assert_eq!(c.rx_unpacked, sent.tx_aggregated);
    assert_eq!(c.rx_viewed, views);
    let big = want.iter().filter(|w| w.len() + 128 > 2048).count() as u64;
    assert!(c.rx_viewed + big >= c.rx_unpacked, "{c:?}");
    assert!(port.uses_views());
    // Every frame and every lent buffer is back in the pool.
    assert_eq!(pool.available(), pool.size());

    // A packet kept past its batch: the frames it may view are never reused (its bytes
    // stay right, checked inside), views stop, and the output is still the same.
    let (got, views2, port, _) = disaggregate_views(&agg, 3);
    assert!(
        got.iter().zip(&want).all(|(g, w)| g == w),
        "kept: bytes differ"
    );
    assert_eq!(got.len(), want.len());
    assert!(
        !port.uses_views(),
        "views go on after a packet outlived its batch"
    );
    assert!(views2 > 0 && views2 < views, "{views2} views of {views}");
}

/// Aggregates of exactly one batch (32 packets): the last frame's end is found on the
/// call after its last packet, one that takes no packet and so is followed by no
/// `after_batch`. That frame must still go back to the pool, and `catena run` must end
/// with every buffer back (it stopped with "conservation violated ... buffers held 1").
#[test]
fn a_frame_ending_on_a_batch_boundary_goes_back_to_the_pool() {
    let dir = tempfile::tempdir().unwrap();
    let pkt = |i: usize| {
        let mut v = vec![i as u8; 64];
        v[12] = 0x08;
        v[13] = 0x00;
        v
    };
    let pkts: Vec<Vec<u8>> = (0..4 * MAX_BATCH).map(pkt).collect();
    let frames: Vec<Vec<u8>> = pkts
        .chunks(MAX_BATCH)
        .map(|c| {
            let mut p = Packer::new(9000);
            for x in c {
                assert!(p.push(x));
            }
            p.frame().to_vec()
        })
        .collect();
    let agg = dir.path().join("agg.pcap");
    Trace::from_packets(
        LinkKind::Ethernet,
        catena::io::PcapHeader::new(1, false),
        frames
            .iter()
            .enumerate()
            .map(|(i, f)| (i as u64 * 1000, f.as_slice())),
    )
    .write_pcap(&agg)
    .unwrap();
    let (got, views, _, pool) = disaggregate_views(&agg, 0);
    assert_eq!(got, pkts);
    assert_eq!(views, pkts.len() as u64);
    assert_eq!(pool.available(), pool.size(), "a frame was kept");

    let back = dir.path().join("back.pcap");
    let c = ports(&agg, true, &back, false).replacen(
        "aggregate = true\n",
        "aggregate = true\naggregate_views = true\n",
        1,
    );
    let (s, ok, err) = run(&c, dir.path());
    assert!(ok, "{err}");
    assert_eq!(s["ports"][0]["live"]["rx_viewed"], pkts.len());
    assert_eq!(packets(&back), pkts);
}
