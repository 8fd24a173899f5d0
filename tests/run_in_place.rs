//! `catena run` over a pcap file processes packets in place (views of the mapped file,
//! copied on an NF's first write): its output pcap and every NF's counters are
//! byte-identical to the copying path (`--copy`), on real captures, for chains that only
//! read and chains that write every packet, across `--loops`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::tempdir;

fn shared(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/datasets")
        .join(rel)
}

fn example(name: &str) -> String {
    format!("{}/examples/{name}.toml", env!("CARGO_MANIFEST_DIR"))
}

/// The output pcap and the summary without its timings.
fn run(chain: &str, input: &Path, out: &Path, extra: &[&str]) -> (Vec<u8>, serde_json::Value) {
    let o = Command::new(env!("CARGO_BIN_EXE_catena"))
        .args(["run", chain, "-i"])
        .arg(input)
        .arg("-o")
        .arg(out)
        .args(["--json"])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{chain} {}: {}",
        input.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    let mut v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    common::drop_timings(&mut v);
    (std::fs::read(out).unwrap(), v)
}

#[test]
fn in_place_and_copied_runs_write_the_same_bytes() {
    let captures = [
        "bench/ndpi-ether-merged.pcap",
        "retina/tls_ciphers.pcap",
        "ndpi/pcap/4in6tunnel.pcap",
        "retina/quic.pcap",
    ];
    let d = tempdir();
    let mut compared = 0;
    for cap in captures {
        let input = shared(cap);
        if !input.exists() {
            eprintln!("skipping {cap}: ../shared/datasets is not there");
            continue;
        }
        // wire and monitor only read; NAT and Maglev write (NAT nearly every packet).
        for (chain, loops) in [
            ("wire", "2"),
            ("monitor", "1"),
            ("nat", "1"),
            ("maglev", "1"),
            ("firewall", "1"),
        ] {
            let ex = ["--loops", loops];
            let (a, sa) = run(&example(chain), &input, &d.path().join("a.pcap"), &ex);
            let copy = ["--loops", loops, "--copy"];
            let (b, sb) = run(&example(chain), &input, &d.path().join("b.pcap"), &copy);
            assert!(a == b, "{chain} over {cap}: the output pcaps differ");
            assert_eq!(sa, sb, "{chain} over {cap}: the summaries differ");
            assert!(
                sa["packets_in"].as_u64().unwrap() > 0,
                "{chain} over {cap}: nothing read"
            );
            compared += 1;
        }
    }
    if compared == 0 {
        eprintln!("skipped: no capture of ../shared/datasets found");
    }
}

/// A record cut short at the end of the file ends the input there with the same error
/// and the same packets either way.
#[test]
fn a_bad_last_record_ends_both_paths_alike() {
    let src = shared("retina/tls_ciphers.pcap");
    if !src.exists() {
        eprintln!("skipping: ../shared/datasets is not there");
        return;
    }
    let d = tempdir();
    let cut = d.path().join("cut.pcap");
    let bytes = std::fs::read(&src).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() - 7]).unwrap();
    let one = |extra: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_catena"))
            .args(["run", &example("wire"), "-i"])
            .arg(&cut)
            .arg("-o")
            .arg(d.path().join("o.pcap"))
            .args(extra)
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
            std::fs::read(d.path().join("o.pcap")).unwrap(),
        )
    };
    let (ca, ea, oa) = one(&[]);
    let (cb, eb, ob) = one(&["--copy"]);
    assert_eq!((ca, &ea), (cb, &eb));
    assert!(ea.contains("record"), "{ea}");
    assert!(oa == ob && oa.len() > 24, "outputs differ or are empty");
}

/// A pcap of `n` records built for the ingest paths: Ethernet/IPv4/UDP frames of sizes
/// 60 to 1,514 with, at a few places inside a chunk of 32, frames the 2 KiB buffers do
/// not hold (3,000 and 9,000 bytes), and timestamps that step back and jump ahead.
fn ingest_trace(n: usize) -> Vec<u8> {
    let mut b = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    b.extend(65535u32.to_le_bytes());
    b.extend(1u32.to_le_bytes());
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for i in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = match i {
            5 | 40 | 41 | 95 => 3000,
            63 | 200 => 9000,
            _ => 60 + (x % 1455) as usize,
        };
        let sec = match i {
            17 => 50,            // one packet stepping back
            70 => 4_000_000_000, // one far in the future
            _ => 1000 + i as u32 / 8,
        };
        b.extend(sec.to_le_bytes());
        b.extend(((i % 8) as u32 * 1000).to_le_bytes());
        b.extend((len as u32).to_le_bytes());
        b.extend((len as u32 + (i % 3) as u32).to_le_bytes());
        let mut f = vec![0u8; len];
        f[..6].copy_from_slice(&[2, 0, 0, 0, 0, (x >> 8) as u8 % 6]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, (x >> 16) as u8 % 6]);
        f[12] = 0x08;
        f[14] = 0x45;
        f[16..18].copy_from_slice(&((len - 14) as u16).to_be_bytes());
        f[22] = 64;
        f[23] = 17;
        f[26..30].copy_from_slice(&[10, 0, (x >> 24) as u8, (x >> 32) as u8]);
        f[30..34].copy_from_slice(&[192, 0, 2, (x >> 40) as u8]);
        f[34..36].copy_from_slice(&((x >> 48) as u16).to_be_bytes());
        f[36..38].copy_from_slice(&53u16.to_be_bytes());
        b.extend(f);
    }
    b
}

/// `run` ingests a reader's chunk in one go (`Walk::ingest_all`) and falls back to the
/// record-by-record path (`Walk::ingest`) at the first record the small buffers do not
/// hold; `prefetch` always takes the latter. Both give every packet the same bytes,
/// ingress port, clock time and counters: same output and summary, for 2, 4, 5 and 16
/// ports (the draw; the chunk path counts up to 16 ports in a local array), 17 ports (the
/// general path either way), in place and copied, across loops.
#[test]
fn chunk_and_record_ingest_agree() {
    let d = tempdir();
    let input = d.path().join("in.pcap");
    let bytes = ingest_trace(300);
    std::fs::write(&input, &bytes).unwrap();
    let chains = [
        ("wire2", "ports = 2", "kind = \"wire\""),
        ("switch4", "ports = 4", "kind = \"mac_switch\""),
        ("switch5", "ports = 5", "kind = \"mac_switch\""),
        ("switch16", "ports = 16", "kind = \"mac_switch\""),
        ("switch17", "ports = 17", "kind = \"mac_switch\""),
    ];
    for (name, ports, nf) in chains {
        let write = |head: &str, tag: &str| {
            let c = format!("{head}[input]\n{ports}\n[[nf]]\nname = \"n\"\n{nf}\n");
            let p = d.path().join(format!("{name}-{tag}.toml"));
            std::fs::write(&p, c).unwrap();
            p
        };
        let chunk = write("", "chunk");
        let record = write("prefetch = 1\n", "record");
        for extra in [&[][..], &["--copy"], &["--loops", "3"]] {
            let (a, mut sa) = run(
                chunk.to_str().unwrap(),
                &input,
                &d.path().join("a.pcap"),
                extra,
            );
            let (b, mut sb) = run(
                record.to_str().unwrap(),
                &input,
                &d.path().join("b.pcap"),
                extra,
            );
            // The chain's name is its file's.
            sa.as_object_mut().unwrap().remove("chain");
            sb.as_object_mut().unwrap().remove("chain");
            assert!(a == b, "{name} {extra:?}: the output pcaps differ");
            assert_eq!(sa, sb, "{name} {extra:?}: the summaries differ");
            let loops = if extra.len() == 2 { 3 } else { 1 };
            assert_eq!(sa["packets_in"].as_u64(), Some(300 * loops), "{name}");
            let rx: Vec<u64> = sa["ports"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["rx"].as_u64().unwrap())
                .collect();
            assert!(
                rx.iter().all(|&r| r > 0),
                "{name}: every port drawn: {rx:?}"
            );
            if name.starts_with("wire") && loops == 1 {
                // The wire passes every packet as read: the file comes back whole.
                assert!(a == bytes, "{name} {extra:?}: output is not the input");
            }
        }
    }
}
