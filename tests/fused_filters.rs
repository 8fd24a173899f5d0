//! Consecutive `ip_filter`s are fused (`nfs/ip_filter_fused.rs`): `catena run` of three
//! filters in a line writes the same bytes and the same counters for every filter as the
//! same filters kept apart by a `wire` NF between them (which the runtime never fuses),
//! on real captures. The per-packet equivalence (same filter, same drop reason, same
//! per-rule hits, rule changes mid-run) is tested in the module itself.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::tempdir;

fn shared(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/datasets")
        .join(rel)
}

fn filter(name: &str, default: &str, malformed: &str, rules: &[&str]) -> String {
    let rules: Vec<String> = rules.iter().map(|r| format!("{r:?}")).collect();
    format!(
        "[[nf]]\nname = \"{name}\"\nkind = \"ip_filter\"\ndefault = \"{default}\"\nmalformed = \"{malformed}\"\nrules = [{}]\n",
        rules.join(", ")
    )
}

/// The three filters, with `between` (an NF table, or nothing) after the first two.
fn chain(between: &str) -> String {
    format!(
        "[input]\nports = 2\n{}{between}{}{between}{}",
        filter(
            "f1",
            "allow",
            "pass",
            &[
                "deny src net 10.0.0.0/8",
                "deny ip frag",
                "deny src net 2001:db8::/32"
            ]
        ),
        filter(
            "f2",
            "allow",
            "drop",
            &[
                "deny udp dst port 53",
                "deny icmp type 8",
                "allow tcp flags syn"
            ]
        ),
        filter(
            "f3",
            "deny",
            "pass",
            &[
                "allow tcp dst port 80",
                "allow tcp dst port 443",
                "allow udp"
            ]
        ),
    )
}

/// The output bytes and each filter's counters in the summary.
fn run(chain: &Path, input: &Path, out: &Path) -> (Vec<u8>, Vec<serde_json::Value>) {
    let o = Command::new(env!("CARGO_BIN_EXE_catena"))
        .args(["run"])
        .arg(chain)
        .arg("-i")
        .arg(input)
        .arg("-o")
        .arg(out)
        .args(["--json", "--loops", "2"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let filters = v["nfs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["kind"] == "ip_filter")
        .cloned()
        .collect();
    (std::fs::read(out).unwrap(), filters)
}

#[test]
fn fused_filters_write_and_count_what_separate_filters_do() {
    let tmp = tempdir();
    let dir = tmp.path();
    let fused = dir.join("fused.toml");
    let apart = dir.join("apart.toml");
    std::fs::write(&fused, chain("")).unwrap();
    std::fs::write(
        &apart,
        chain("[[nf]]\nname = \"w\"\nkind = \"wire\"\n")
            .replacen("name = \"w\"", "name = \"w1\"", 1)
            .replacen("name = \"w\"", "name = \"w2\"", 1),
    )
    .unwrap();
    let mut seen = 0;
    let mut dropped = [0u64; 3];
    for name in [
        "bench/ndpi-ether-merged.pcap",
        "ndpi/pcap/KakaoTalk_talk.pcap",
    ] {
        let input = shared(name);
        if !input.exists() {
            eprintln!("skipped {name}: not found");
            continue;
        }
        seen += 1;
        let a = run(&fused, &input, &dir.join("a.pcap"));
        let b = run(&apart, &input, &dir.join("b.pcap"));
        assert_eq!(a.1, b.1, "{name}: the filters' counters");
        assert!(a.0 == b.0, "{name}: the output pcaps differ");
        for (d, f) in dropped.iter_mut().zip(&a.1) {
            *d += f["packets_dropped"].as_u64().unwrap();
        }
    }
    assert!(seen > 0, "no capture found under ../shared/datasets");
    // Not vacuous: every filter drops some packets.
    assert!(dropped.iter().all(|&d| d > 0), "{dropped:?}");
}
