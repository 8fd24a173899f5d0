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
    let m = v.as_object_mut().unwrap();
    for k in [
        "seconds",
        "seconds_total",
        "mpps",
        "mpps_total",
        "throughput_gbps",
        "data_rate_gbps",
        "sinks",
    ] {
        m.remove(k);
    }
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
