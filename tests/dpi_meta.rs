//! Oracle test for the DPI metadata: the TLS SNI and HTTP Host our engine keeps per flow
//! must be what `tshark` reads from the same flow's ClientHello / request
//! (`tls.handshake.extensions_server_name`, `http.host`).

mod common;

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::process::Command;

use catena::io::Trace;
use catena::nfs::dpi::trace::label_trace;
use catena::nfs::AppProto;

/// Captures with many TLS and HTTP flows, IPv4 and IPv6.
const CAPTURES: &[&str] = &[
    "ndpi/pcap/1kxun.pcap",
    "ndpi/pcap/instagram.pcap",
    "ndpi/pcap/anyconnect-vpn.pcap",
    "ndpi/pcap/http_ipv6.pcap",
    "ndpi/pcap/tls_verylong_certificate.pcap",
    "ndpi/pcap/google_ssl.pcap",
];

type Key = ((IpAddr, u16), (IpAddr, u16));

fn key(a: (IpAddr, u16), b: (IpAddr, u16)) -> Key {
    if a <= b {
        (a, b)
    } else {
        (b, a)
    }
}

/// Every SNI / Host tshark sees, per connection.
fn tshark_names(path: &std::path::Path) -> HashMap<Key, HashSet<String>> {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(path)
        .args([
            "-Y",
            "tls.handshake.type == 1 || http.request",
            "-T",
            "fields",
        ])
        .args(["-E", "occurrence=f"])
        .args(["-e", "ip.src", "-e", "ipv6.src", "-e", "tcp.srcport"])
        .args(["-e", "ip.dst", "-e", "ipv6.dst", "-e", "tcp.dstport"])
        .args([
            "-e",
            "tls.handshake.extensions_server_name",
            "-e",
            "http.host",
        ])
        .output()
        .expect("tshark");
    assert!(out.status.success(), "tshark failed on {}", path.display());
    let mut m: HashMap<Key, HashSet<String>> = HashMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() < 8 {
            continue;
        }
        let ip = |v4: &str, v6: &str| -> Option<IpAddr> {
            if v4.is_empty() { v6 } else { v4 }.parse().ok()
        };
        let (Some(s), Some(d)) = (ip(f[0], f[1]), ip(f[3], f[4])) else {
            continue;
        };
        let (Ok(sp), Ok(dp)) = (f[2].parse(), f[5].parse()) else {
            continue;
        };
        let name = if f[6].is_empty() { f[7] } else { f[6] };
        if !name.is_empty() {
            m.entry(key((s, sp), (d, dp)))
                .or_default()
                .insert(name.to_string());
        }
    }
    m
}

#[test]
fn sni_and_host_equal_tshark() {
    common::require("tshark");
    let (mut compared, mut tls, mut http) = (0, 0, 0);
    for c in CAPTURES {
        let path = common::dataset(c);
        let names = tshark_names(&path);
        let flows = label_trace(&Trace::open(&path).unwrap());
        for f in &flows {
            if f.key.proto != 6 {
                continue;
            }
            let k = key((f.key.src_ip(), f.key.sport), (f.key.dst_ip(), f.key.dport));
            let theirs = names.get(&k);
            match (f.host.as_deref(), theirs) {
                (Some(h), Some(set)) => {
                    // tshark cuts nothing; we keep at most 64 bytes.
                    assert!(
                        set.iter()
                            .any(|n| n == h || (h.len() == 64 && n.starts_with(h))),
                        "{c}: {}: ours {h:?}, tshark {set:?}",
                        f.key
                    );
                    compared += 1;
                    match f.detected {
                        Some(AppProto::Http) => http += 1,
                        _ => tls += 1,
                    }
                }
                (Some(h), None) => panic!("{c}: {}: ours {h:?}, tshark saw no name", f.key),
                // Detected by its ClientHello, yet no name: only if tshark has none either.
                (None, Some(set)) if f.detected == Some(AppProto::Tls) => {
                    panic!("{c}: {}: no SNI kept, tshark {set:?}", f.key)
                }
                _ => {}
            }
        }
    }
    println!("compared {compared} names ({tls} TLS SNI, {http} HTTP Host)");
    assert!(
        tls >= 20 && http >= 20,
        "too few names compared: {tls} TLS, {http} HTTP"
    );
}

/// Every capture under ../shared/datasets (nDPI, suricata-verify, retina, the merged
/// trace): real bytes of every kind through every detector, none may panic, and every
/// flow that carried payload ends labelled or undecided, never both.
#[test]
fn labels_every_capture_without_panic() {
    let (mut files, mut flows, mut labelled) = (0, 0, 0);
    for p in common::all_captures() {
        let Ok(t) = Trace::open(&p) else { continue };
        files += 1;
        for f in label_trace(&t) {
            flows += 1;
            assert!(
                f.detected.is_none() || f.guessed.is_none(),
                "{}: {}",
                p.display(),
                f.key
            );
            labelled += usize::from(f.label().is_some());
        }
    }
    println!("{files} captures, {flows} flows, {labelled} labelled");
    assert!(files > 1000 && flows > 10_000);
}

/// `catena dpi --json` prints one object per flow; its SNI is tshark's. A file that is
/// not a capture is a one-line error and exit status 1.
#[test]
fn cli_labels_a_capture() {
    common::require("tshark");
    let path = common::dataset("ndpi/pcap/tls_verylong_certificate.pcap");
    let sni = tshark_names(&path)
        .into_values()
        .flatten()
        .next()
        .expect("tshark sees an SNI");
    let out = Command::new(env!("CARGO_BIN_EXE_catena"))
        .args(["dpi", "--json"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<serde_json::Value> = text
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        rows.iter()
            .any(|r| r["proto"] == "TLS" && r["by"] == "dpi" && r["host"] == sni.as_str()),
        "{text}"
    );
    let bad = Command::new(env!("CARGO_BIN_EXE_catena"))
        .args(["dpi", "Cargo.toml"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    let err = String::from_utf8(bad.stderr).unwrap();
    assert!(
        err.starts_with("error: ") && err.trim_end().lines().count() == 1,
        "{err}"
    );
}

/// `catena bench dpi` runs end to end (speed itself is not tested): one row for our
/// engine and two for ndpiReader, on the same packets, written under --out.
#[test]
fn bench_dpi_runs() {
    common::require("ndpiReader");
    let dir = common::tempdir();
    let trace = common::dataset("ndpi/pcap/1kxun.pcap");
    let out = Command::new(env!("CARGO_BIN_EXE_catena"))
        .args(["bench", "dpi", "--runs", "1", "--json", "--traces"])
        .arg(&trace)
        .arg("--out")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let tools: Vec<&str> = rows.iter().map(|r| r["tool"].as_str().unwrap()).collect();
    assert_eq!(
        tools,
        [
            "catena dpi (processing)",
            "ndpiReader (processing)",
            "catena dpi (wall)",
            "ndpiReader (wall)"
        ]
    );
    let packets = Trace::open(&trace).unwrap().len() as u64;
    assert!(rows.iter().all(|r| r["packets"] == packets));
    assert!(dir.path().join("dpi.json").exists() && dir.path().join("dpi.csv").exists());
}
