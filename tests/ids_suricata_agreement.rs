//! Agreement with Suricata 7 on real traffic, Suricata as the oracle: alert counts per
//! rule of the product path (`catena run` with a microbox `ids` app) against
//! `suricata -r … -k none` on 9 captures, with examples/ids/bench.rules and
//! examples/ids/et-style.rules. Suricata runs with the options that make it comparable:
//! `stream.midstream=true` (the stack picks connections up mid-stream) and
//! `packet-alert-max=255` (Suricata otherwise keeps 15 alerts per packet, we keep all)
//! and `stream.reassembly.randomize-chunk-size=no` (raw stream chunks of 2,560 bytes, not
//! ±10 % at random per run).
//! The microbox's idle timeout is Suricata's established-TCP one (600 s).
//!
//! The figures asserted are the ones measured when the test was written (floors); the
//! remaining differences are listed by rule and cause in docs/ids.md.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use common::{catena_ids_counts, suricata_alert_counts};

#[test]
fn alert_counts_per_rule_agree_with_suricata() {
    common::require("suricata");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // (capture, rule file, rules that fire with equal counts / rules that fire, largest
    // difference of the alert totals in % of Suricata's): 9 captures, among them the
    // merged trace, TLS (google_ssl), DNS, QUIC and non-HTTP TCP (ssh, smtp, ftp).
    let cases = [
        ("bench/ndpi-ether-merged.pcap", "bench.rules", 60, 74, 2.0),
        (
            "bench/ndpi-ether-merged.pcap",
            "et-style.rules",
            85,
            85,
            0.2,
        ),
        ("ndpi/pcap/1kxun.pcap", "bench.rules", 59, 59, 2.0),
        ("ndpi/pcap/netflix.pcap", "bench.rules", 51, 51, 0.2),
        ("ndpi/pcap/google_ssl.pcap", "bench.rules", 7, 7, 0.0),
        ("ndpi/pcap/dns.pcap", "bench.rules", 4, 4, 0.0),
        ("ndpi/pcap/quic.pcap", "bench.rules", 3, 3, 0.0),
        ("ndpi/pcap/ssh.pcap", "bench.rules", 11, 11, 0.0),
        ("ndpi/pcap/smtp.pcap", "bench.rules", 11, 11, 0.0),
        ("ndpi/pcap/ftp.pcap", "bench.rules", 7, 7, 0.0),
        ("ndpi/pcap/1kxun.pcap", "et-style.rules", 27, 27, 0.3),
        ("ndpi/pcap/netflix.pcap", "et-style.rules", 13, 13, 0.0),
        ("ndpi/pcap/google_ssl.pcap", "et-style.rules", 2, 2, 0.0),
        ("ndpi/pcap/ssh.pcap", "et-style.rules", 5, 5, 0.0),
        ("ndpi/pcap/smtp.pcap", "et-style.rules", 3, 3, 0.0),
        ("ndpi/pcap/ftp.pcap", "et-style.rules", 3, 3, 0.0),
    ];
    let (mut eq_all, mut fire_all, mut ours_all, mut theirs_all) = (0, 0, 0u64, 0u64);
    // Sum over the cases of |ours - Suricata's| per rule.
    let mut apart_all = 0u64;
    // Every case is run and printed before any floor is asserted.
    let mut below = Vec::new();
    for (pcap, rules, want_eq, want_fire, max_apart) in cases {
        let pcap = common::dataset(pcap);
        let rules = root.join("examples/ids").join(rules);
        let d = common::tempdir();
        let a = catena_ids_counts(&pcap, &rules, d.path());
        let b = suricata_alert_counts(&pcap, &rules, d.path());
        let sids: BTreeSet<u32> = a.keys().chain(b.keys()).copied().collect();
        let eq = sids.iter().filter(|s| a.get(s) == b.get(s)).count();
        let n = |m: &BTreeMap<u32, u64>, s: &u32| m.get(s).copied().unwrap_or(0);
        apart_all += sids
            .iter()
            .map(|s| n(&a, s).abs_diff(n(&b, s)))
            .sum::<u64>();
        let (ta, tb): (u64, u64) = (a.values().sum(), b.values().sum());
        println!(
            "{} {}: {eq} of {} firing rules equal; alerts {ta} vs Suricata's {tb}",
            pcap.file_name().unwrap().to_string_lossy(),
            rules.file_name().unwrap().to_string_lossy(),
            sids.len()
        );
        for s in &sids {
            if a.get(s) != b.get(s) {
                println!("  sid {s}: {:?} vs {:?}", a.get(s), b.get(s));
            }
        }
        if eq < want_eq || sids.len() > want_fire + 2 {
            below.push(format!(
                "{}: {eq} of {} rules equal, floor {want_eq} of {want_fire}",
                pcap.display(),
                sids.len()
            ));
        }
        let apart = 100.0 * ta.abs_diff(tb) as f64 / tb.max(1) as f64;
        if apart > max_apart {
            below.push(format!(
                "{} {}: totals {ta} vs {tb} are {apart:.2}% apart, at most {max_apart}%",
                pcap.display(),
                rules.display()
            ));
        }
        eq_all += eq;
        fire_all += sids.len();
        ours_all += ta;
        theirs_all += tb;
    }
    let diff = ours_all.abs_diff(theirs_all) as f64 / theirs_all as f64;
    println!(
        "all: {eq_all} of {fire_all} equal ({:.0}%); alerts {ours_all} vs {theirs_all} ({:.1}% apart); \
         per-rule differences sum to {apart_all}",
        100.0 * eq_all as f64 / fire_all as f64,
        100.0 * diff
    );
    assert!(below.is_empty(), "below the floors: {}", below.join("; "));
    // Issue 17's target: per-rule counts equal for at least 95 % of the firing rules.
    assert!(
        eq_all * 100 >= 95 * fire_all,
        "{eq_all} of {fire_all} firing rules equal, under 95 %"
    );
    // 1,109 when stream rules alerted once per segment; 859 with Suricata's chunks; 807
    // with acknowledged holes skipped as Suricata does; 637 with ICMP errors joining
    // their quoted flow either way; 557 with Suricata's handshake checks, HTTP known from
    // a request's first bytes and a pickup's first packet not established; 343 with
    // tunnels decoded, ICMP flows keyed by type and a pickup on a response reversed; 292
    // with PPPoE and FabricPath decoded, stream anchors counted from the chunk, libhtp's
    // URI paths and empty gzip bodies; 278 with a response stream that opens with a gap
    // resynchronised as libhtp does; 242 with chunked trailers re-running the header
    // prefilter, 100 Continue kept in its transaction, libhtp's refused gaps and HTTP
    // known only at a direction's first byte (Suricata's own totals move by ~10 between
    // runs); 267 with segments held past an acknowledged hole inspected and no payload
    // inspection after TLS application data: 20 TLS flows of the merged trace lost a
    // `d2`/`d3` alert Suricata does not give (each now equal to Suricata's), which had
    // hidden as many missing elsewhere in the per-rule sums (docs/history/ids.md, session 19);
    // 264 with an ACK judged by the stream as of its packet (not the batch's end) and
    // believed up to a window past the bytes delivered (session 20); 236 with a mid-stream
    // pickup starting the other side's stream at its ACK (session 30); 200 with a side
    // whose bytes past an acknowledged hole overflow the ring skipped, not given up (31);
    // 202 with an HTTP `CONNECT` tunnel followed into TLS (32): its flow's 2 `d2` alerts
    // too many on each of 1000641/643/645 gone, which had hidden as many missing elsewhere.
    assert!(apart_all <= 215, "per-rule differences sum to {apart_all}");
    assert!(diff < 0.02, "totals {:.1}% apart", 100.0 * diff);
}

/// `catena bench ids` runs Suricata with examples/ids/suricata-alerts-only.yaml: it must
/// load every rule (it skipped the $HOME_NET ones without the packaged `vars`) and give
/// the alerts of the command above (packaged suricata.yaml), so both sides of the bench
/// do the same work.
#[test]
fn bench_suricata_config_loads_every_rule_and_alerts_as_the_packaged_one() {
    common::require("suricata");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let pcap = common::dataset("ndpi/pcap/1kxun.pcap");
    let rules = root.join("examples/ids/bench.rules");
    let d = common::tempdir();
    let packaged = suricata_alert_counts(&pcap, &rules, d.path());
    let bench = d.path().join("bench");
    std::fs::create_dir(&bench).unwrap();
    let o = Command::new("suricata")
        .arg("-c")
        .arg(root.join("examples/ids/suricata-alerts-only.yaml"))
        .arg("-r")
        .arg(&pcap)
        .arg("-S")
        .arg(&rules)
        .arg("-l")
        .arg(&bench)
        .args(["-k", "none", "--set", "stream.midstream=true"])
        .args(["--set", "packet-alert-max=255"])
        .args(["--set", "stream.reassembly.randomize-chunk-size=no"])
        .output()
        .expect("suricata");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    let skipped: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("error parsing signature"))
        .collect();
    assert!(skipped.is_empty(), "rules Suricata skipped: {skipped:?}");
    let mut ours = BTreeMap::new();
    for l in std::fs::read_to_string(bench.join("eve.json"))
        .unwrap()
        .lines()
    {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        if v["event_type"] == "alert" {
            *ours
                .entry(v["alert"]["signature_id"].as_u64().unwrap() as u32)
                .or_insert(0u64) += 1;
        }
    }
    // Suricata differs from itself by a few alerts between runs here (5,719 to 5,723).
    let (a, b): (u64, u64) = (ours.values().sum(), packaged.values().sum());
    assert!(a.abs_diff(b) <= 8, "bench config {a} alerts, packaged {b}");
    let differ = ours
        .keys()
        .chain(packaged.keys())
        .filter(|s| {
            let n = |m: &BTreeMap<u32, u64>| m.get(s).copied().unwrap_or(0);
            n(&ours).abs_diff(n(&packaged)) > 4
        })
        .count();
    assert_eq!(differ, 0, "{ours:?} vs {packaged:?}");
}
