//! `bench e2e` compares catena's filters with Click's only when both pass the same
//! packets (issue 20). On the real merged trace Click's `CheckIPHeader(14)` → `IPFilter`
//! used to drop IPv4 with bad checksums, VLAN-tagged packets and IPv6 that catena (like
//! tcpdump) classifies: 12,860 passed against 16,718. The NAT case ran catena with every
//! address inside (nothing translated, all 90,989 passed) against Click rewriting every
//! TCP/UDP packet and dropping the rest; both now do MazuNAT's work (55,561 passed).
//! Needs a Click binary ($CLICK or
//! /tmp/click/userlevel/click, built by ../shared/peers/click/build.sh); skipped without.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::*;

/// The rows of `bench e2e --runs 1 --only ONLY` over the merged trace, after checking
/// the bench flagged no difference; None (skipped) without a Click binary.
fn bench_rows(only: &str) -> Option<Vec<serde_json::Value>> {
    let click = std::env::var_os("CLICK")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/click/userlevel/click"));
    if !click.exists() {
        eprintln!(
            "skipped: no Click binary at {} (build it with ../shared/peers/click/build.sh or set CLICK)",
            click.display()
        );
        return None;
    }
    require("tcpdump");
    let trace = dataset("bench/ndpi-ether-merged.pcap");
    let out = tempdir();
    let o = Command::new(env!("CARGO_BIN_EXE_catena"))
        .env("CLICK", &click)
        .args(["bench", "e2e", "--runs", "1", "--json", "--only", only])
        .arg("--traces")
        .arg(&trace)
        .arg("--out")
        .arg(out.path())
        .output()
        .expect("run catena bench e2e");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "bench e2e failed: {stderr}");
    assert!(
        !stderr.contains("packets passed differ"),
        "bench flagged a difference: {stderr}"
    );
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON rows");
    Some(rows.as_array().expect("an array of rows").clone())
}

#[test]
fn click_and_catena_pass_the_same_packets_through_every_filter_case() {
    let Some(rows) = bench_rows("filter") else {
        return;
    };
    let cases: Vec<&str> = rows.iter().filter_map(|r| r["case"].as_str()).collect();
    assert_eq!(
        cases,
        ["filter 10 rules", "filter 1000 rules", "three filters"]
    );
    for r in &rows {
        let catena = r["packets_passed"].as_u64().unwrap();
        assert!(catena > 0, "{r}");
        assert_eq!(r["click_passed"].as_u64(), Some(catena), "{}", r["case"]);
    }
}

#[test]
fn click_and_catena_nat_translate_and_pass_the_same_packets() {
    let Some(rows) = bench_rows("nat") else {
        return;
    };
    let cases: Vec<&str> = rows.iter().filter_map(|r| r["case"].as_str()).collect();
    assert_eq!(cases, ["nat"]);
    let catena = rows[0]["packets_passed"].as_u64().unwrap();
    // Replies to inside addresses have no mapping (the capture was taken inside) and
    // are dropped on both sides: a NAT passing every packet translated nothing.
    assert!(catena > 0 && catena < 90_989, "{}", rows[0]);
    assert_eq!(rows[0]["click_passed"].as_u64(), Some(catena));
}
