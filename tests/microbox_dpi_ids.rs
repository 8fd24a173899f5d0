//! DPI → IDS on one consolidated stack (Microboxes' Figure 7c pattern): the IDS's alerts
//! per rule equal Suricata's on real HTTP captures, whether it subscribes to every flow's
//! data or only to the flows the DPI app labelled HTTP — and the dynamic subscription
//! delivers fewer data events.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use catena::io::Trace;
use catena::runtime::Summary;

const RULES: &str = r#"alert http any any -> any any (msg:"GET request"; http.method; content:"GET"; sid:1;)
alert http any any -> any any (msg:"host has 1kxun"; http.host; content:"1kxun"; sid:2;)
alert http any any -> any any (msg:"uri has .php"; http.uri; content:".php"; sid:3;)
alert tcp any any -> any any (msg:"Cookie in stream"; flow:to_server,established; content:"Cookie|3a|"; sid:4;)
"#;

fn stat(s: &Summary, name: &str) -> u64 {
    s.nfs[0]
        .stats
        .iter()
        .find(|(k, _)| k == name)
        .unwrap_or_else(|| panic!("no stat {name}: {:?}", s.nfs[0].stats))
        .1
}

fn suricata_alerts(pcap: &Path, dir: &Path) -> BTreeMap<u32, u64> {
    let rules = dir.join("suricata.rules");
    std::fs::write(&rules, RULES).unwrap();
    let out = Command::new("suricata")
        .arg("-r")
        .arg(pcap)
        .arg("-S")
        .arg(&rules)
        .arg("-l")
        .arg(dir)
        // The stack picks connections up mid-stream by default; so must Suricata.
        .args(["-k", "none", "--set", "stream.midstream=true"])
        .output()
        .expect("suricata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let eve = std::fs::read_to_string(dir.join("eve.json")).unwrap();
    let mut m = BTreeMap::new();
    for line in eve.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if v["event_type"] == "alert" {
            let sid = v["alert"]["signature_id"].as_u64().unwrap() as u32;
            *m.entry(sid).or_insert(0) += 1;
        }
    }
    m
}

fn ours(trace: &Trace, dir: &Path, only: &str) -> (BTreeMap<u32, u64>, Summary) {
    let alerts = dir.join(format!("alerts{}.txt", only.len()));
    let rules = RULES.replace('\\', "\\\\").replace('"', "\\\"");
    let cfg = format!(
        "[input]\nports = 2\n[[nf]]\nname = \"mb\"\nkind = \"microbox\"\n\
         apps = [{{ kind = \"dpi\" }}, {{ kind = \"ids\", rules = \"{}\", {only} alerts = \"{}\" }}]\n",
        rules.replace('\n', "\\n"),
        alerts.display()
    );
    let s = common::run_chain(&cfg, trace, None);
    let text = std::fs::read_to_string(&alerts).unwrap();
    let m = text
        .lines()
        .map(|l| {
            let (a, b) = l.split_once(' ').unwrap();
            (a.parse().unwrap(), b.parse().unwrap())
        })
        .collect();
    (m, s)
}

#[test]
fn dpi_then_ids_equals_suricata_with_all_and_dynamic_subscriptions() {
    common::require("suricata");
    for name in ["1kxun.pcap", "netflix.pcap"] {
        let pcap = common::dataset(&format!("ndpi/pcap/{name}"));
        let trace = Trace::open(&pcap).unwrap();
        let dir = common::tempdir();
        let want = suricata_alerts(&pcap, dir.path());
        assert!(
            !want.is_empty(),
            "{name}: suricata found nothing to compare"
        );
        let (all, s_all) = ours(&trace, dir.path(), "");
        let (dynamic, s_dyn) = ours(&trace, dir.path(), "only = [\"HTTP\"],");
        assert_eq!(all, want, "{name}: all-data subscription vs suricata");
        assert_eq!(dynamic, want, "{name}: dynamic subscription vs suricata");
        // The dynamic IDS only gets the data of flows labelled HTTP.
        assert!(
            stat(&s_dyn, "ids_data_events") < stat(&s_all, "ids_data_events"),
            "{name}: dynamic {} vs all {} data events",
            stat(&s_dyn, "ids_data_events"),
            stat(&s_all, "ids_data_events")
        );
        assert!(stat(&s_dyn, "dpi_detected") > 0);
    }
}

/// The IDS app's `rules_file` and `alerts` are taken from the chain file's folder, and
/// its alerts equal the inline-rules run's.
#[test]
fn ids_files_are_relative_to_the_chain_file() {
    let d = common::tempdir();
    let folder = d.path().join("chains");
    let elsewhere = d.path().join("cwd");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::write(folder.join("r.rules"), RULES).unwrap();
    let chain = folder.join("chain.toml");
    std::fs::write(
        &chain,
        "[[nf]]\nname = \"mb\"\nkind = \"microbox\"\n\
         apps = [{ kind = \"dpi\" }, { kind = \"ids\", rules_file = \"r.rules\", alerts = \"a.txt\" }]\n",
    )
    .unwrap();
    let pcap = common::dataset("ndpi/pcap/1kxun.pcap");
    let o = Command::new(env!("CARGO_BIN_EXE_catena"))
        .current_dir(&elsewhere)
        .arg("run")
        .arg(&chain)
        .arg("-i")
        .arg(&pcap)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got = std::fs::read_to_string(folder.join("a.txt")).unwrap();
    let trace = Trace::open(&pcap).unwrap();
    let (want, _) = ours(&trace, d.path(), "");
    let want: String = want.iter().map(|(s, n)| format!("{s} {n}\n")).collect();
    assert_eq!(got, want);
    assert!(!elsewhere.join("a.txt").exists());
}
