//! The `ids` app as an operator runs it: EVE JSON records against Suricata's own EVE on
//! the same capture and rules; inline drop rules against a run without them (tshark
//! gives the flows); bad EVE paths and rule files.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use catena::io::Trace;
use serde_json::Value;

const RULES: &str = r#"alert http any any -> any any (msg:"GET request"; http.method; content:"GET"; sid:1;)
alert http any any -> any any (msg:"host has 1kxun"; http.host; content:"1kxun"; sid:2;)
alert tcp any any -> any any (msg:"Cookie in stream"; flow:to_server,established; content:"Cookie|3a|"; sid:4;)
alert udp any any -> any 53 (msg:"DNS query"; content:"|01 00 00 01|"; offset:2; depth:4; sid:5;)
"#;

fn records(p: &Path) -> Vec<Value> {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn of_type<'a>(v: &'a [Value], t: &str) -> Vec<&'a Value> {
    v.iter().filter(|r| r["event_type"] == t).collect()
}

/// Every field path of a record (`.alert.signature_id`, …) with its JSON type.
fn fields(v: &Value, at: &str, out: &mut BTreeSet<String>) {
    if let Value::Object(a) = v {
        for (k, v) in a {
            let p = format!("{at}.{k}");
            fields(v, &p, out);
            let ty = match v {
                Value::Object(_) => "object",
                Value::String(_) => "string",
                Value::Number(_) => "number",
                Value::Bool(_) => "bool",
                _ => "other",
            };
            out.insert(format!("{p}: {ty}"));
        }
    }
}

/// Field paths (and types) of our records of type `t` that no Suricata record of that
/// type has.
fn missing_fields(ours: &[Value], theirs: &[Value], t: &str) -> BTreeSet<String> {
    let (mut a, mut b) = (BTreeSet::new(), BTreeSet::new());
    for r in of_type(ours, t) {
        fields(r, "", &mut a);
    }
    for r in of_type(theirs, t) {
        fields(r, "", &mut b);
    }
    a.difference(&b).cloned().collect()
}

fn chain(dir: &Path, apps: &str) -> std::path::PathBuf {
    let c = dir.join("chain.toml");
    std::fs::write(
        &c,
        format!("[[nf]]\nname = \"mb\"\nkind = \"microbox\"\napps = [{apps}]\n"),
    )
    .unwrap();
    c
}

fn catena(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_catena"))
        .args(args)
        .output()
        .expect("catena")
}

#[test]
fn eve_records_match_suricatas_eve() {
    common::require("suricata");
    let pcap = common::dataset("ndpi/pcap/1kxun.pcap");
    let d = common::tempdir();
    std::fs::write(d.path().join("r.rules"), RULES).unwrap();
    let sdir = d.path().join("suricata");
    std::fs::create_dir_all(&sdir).unwrap();
    let o = Command::new("suricata")
        .arg("-r")
        .arg(&pcap)
        .arg("-S")
        .arg(d.path().join("r.rules"))
        .arg("-l")
        .arg(&sdir)
        .args(["-k", "none", "--set", "stream.midstream=true"])
        .output()
        .expect("suricata");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Relative to the chain file's folder.
    let c = chain(
        d.path(),
        "{ kind = \"dpi\" }, { kind = \"ids\", rules_file = \"r.rules\", eve = \"eve.json\" }",
    );
    let o = catena(&[
        "run".as_ref(),
        c.as_os_str(),
        "-i".as_ref(),
        pcap.as_os_str(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let theirs = records(&sdir.join("eve.json"));
    let ours = records(&d.path().join("eve.json"));

    // Alerts: the same records, field for field. Suricata stamps stream and HTTP alerts
    // with the packet that acknowledged the data (it inspects acknowledged bytes), we with
    // the packet that carried them: timestamps are compared for packet (UDP) alerts only.
    let key = |r: &Value, ts: bool| {
        (
            if ts || r["proto"] == "UDP" {
                r["timestamp"].to_string()
            } else {
                String::new()
            },
            r["src_ip"].to_string(),
            r["src_port"].to_string(),
            r["dest_ip"].to_string(),
            r["dest_port"].to_string(),
            r["proto"].to_string(),
            r["direction"].to_string(),
            r["alert"]["action"].to_string(),
            r["alert"]["gid"].to_string(),
            r["alert"]["signature_id"].to_string(),
            r["alert"]["rev"].to_string(),
            r["alert"]["signature"].to_string(),
        )
    };
    let mut a: Vec<_> = of_type(&theirs, "alert")
        .iter()
        .map(|r| key(r, false))
        .collect();
    let mut b: Vec<_> = of_type(&ours, "alert")
        .iter()
        .map(|r| key(r, false))
        .collect();
    a.sort();
    b.sort();
    assert!(a.len() > 200, "{} suricata alerts", a.len());
    assert_eq!(a, b, "alert records");
    let missing = missing_fields(&ours, &theirs, "alert");
    assert!(
        missing.is_empty(),
        "alert fields Suricata lacks: {missing:?}"
    );
    for r in of_type(&ours, "alert") {
        // Where we name the application protocol, it is Suricata's name for it.
        if r.get("app_proto").is_some() {
            let same = of_type(&theirs, "alert")
                .into_iter()
                .any(|s| key(s, false) == key(r, false) && s["app_proto"] == r["app_proto"]);
            assert!(same, "app_proto of {r}");
        }
    }

    // Flow records of TCP flows: counters per direction, start, label and state.
    let flows = |v: &[Value]| -> BTreeMap<String, Value> {
        of_type(v, "flow")
            .into_iter()
            .filter(|r| r["proto"] == "TCP")
            .map(|r| {
                let k = format!(
                    "{} {} {} {}",
                    r["src_ip"], r["src_port"], r["dest_ip"], r["dest_port"]
                );
                (k, r.clone())
            })
            .collect()
    };
    let (fs, fo) = (flows(&theirs), flows(&ours));
    let missing = missing_fields(&ours, &theirs, "flow");
    assert!(
        missing.is_empty(),
        "flow fields Suricata lacks: {missing:?}"
    );
    let mut equal = 0;
    for (k, r) in &fo {
        let Some(s) = fs.get(k) else { continue };
        let fields = [
            "pkts_toserver",
            "pkts_toclient",
            "bytes_toserver",
            "bytes_toclient",
            "start",
        ];
        if fields.iter().all(|f| s["flow"][f] == r["flow"][f]) && s["app_proto"] == r["app_proto"] {
            equal += 1;
        }
    }
    // The rest: packets after a flow's close (a stray ACK), which Suricata counts in the
    // flow it keeps until its timeout; we end the flow at the close (docs/ids.md).
    assert!(
        fo.len() >= 90 && equal * 100 >= fo.len() * 90,
        "{equal} of {} TCP flow records equal ({} in Suricata's)",
        fo.len(),
        fs.len()
    );
}

/// tshark's 5-tuple per frame (either family), for flow membership.
fn tuples(p: &Path) -> Vec<String> {
    let o = Command::new("tshark")
        .arg("-r")
        .arg(p)
        .args(["-T", "fields", "-E", "separator=,"])
        .args(["-e", "ip.src", "-e", "ipv6.src", "-e", "tcp.srcport"])
        .args(["-e", "ip.dst", "-e", "ipv6.dst", "-e", "tcp.dstport"])
        .output()
        .expect("tshark");
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            let (a, b) = (
                format!("{}{}:{}", f[0], f[1], f[2]),
                format!("{}{}:{}", f[3], f[4], f[5]),
            );
            if a < b {
                format!("{a} {b}")
            } else {
                format!("{b} {a}")
            }
        })
        .collect()
}

#[test]
fn drop_rules_drop_the_rest_of_their_flows_and_nothing_else() {
    common::require("tshark");
    let pcap = common::dataset("ndpi/pcap/1kxun.pcap");
    let trace = Trace::open(&pcap).unwrap();
    let d = common::tempdir();
    let alerts =
        "alert http any any -> any any (msg:\"GET\"; http.method; content:\"GET\"; sid:1;)\n";
    let drops = "drop http any any -> any any (msg:\"host 1kxun\"; http.host; content:\"1kxun\"; sid:7;)\n\
                 reject tcp any any -> any any (msg:\"Cookie\"; flow:to_server,established; content:\"Cookie|3a|\"; sid:8;)\n";
    let run = |name: &str, rules: &str| {
        std::fs::write(d.path().join(format!("{name}.rules")), rules).unwrap();
        let eve = d.path().join(format!("{name}.json"));
        let out = d.path().join(format!("{name}.pcap"));
        let cfg = format!(
            "[[nf]]\nname = \"mb\"\nkind = \"microbox\"\n\
             apps = [{{ kind = \"ids\", rules_file = '{}', eve = '{}' }}]\n",
            d.path().join(format!("{name}.rules")).display(),
            eve.display()
        );
        let s = common::run_chain(&cfg, &trace, Some(&out));
        (s, records(&eve), out)
    };
    let (s0, eve0, out0) = run("plain", alerts);
    let (s1, eve1, out1) = run("inline", &format!("{alerts}{drops}"));
    assert_eq!(s0.nfs[0].packets_dropped, 0, "alert rules never drop");
    // Where each blocked flow's first blocked packet is (capture time, µs).
    let mut blocked: BTreeMap<String, u64> = BTreeMap::new();
    for r in of_type(&eve1, "alert") {
        if r["alert"]["action"] == "blocked" {
            let (a, b) = (
                format!("{}:{}", r["src_ip"].as_str().unwrap(), r["src_port"]),
                format!("{}:{}", r["dest_ip"].as_str().unwrap(), r["dest_port"]),
            );
            let k = if a < b {
                format!("{a} {b}")
            } else {
                format!("{b} {a}")
            };
            let ts = timestamp_us(r["timestamp"].as_str().unwrap());
            let e = blocked.entry(k).or_insert(ts);
            *e = (*e).min(ts);
        } else {
            assert_eq!(r["alert"]["signature_id"], 1, "only sid 1 only alerts");
        }
    }
    assert!(blocked.len() >= 3, "{} flows blocked", blocked.len());
    // Expected: the plain run's output without the blocked flows' packets from the
    // blocking one on.
    let plain = common::packets(&out0);
    let keys = tuples(&out0);
    assert_eq!(keys.len(), plain.len());
    let want: Vec<_> = plain
        .iter()
        .zip(&keys)
        .filter(|((ts, _), k)| blocked.get(*k).is_none_or(|b| ts < b))
        .map(|(p, _)| p.clone())
        .collect();
    let got = common::packets(&out1);
    assert!(got.len() < plain.len());
    assert_eq!(got.len(), want.len(), "packets out");
    assert!(
        got == want,
        "output differs from the plain run minus the dropped flows"
    );
    // Counted per rule; every drop is under some rule.
    let per_rule: u64 = s1.nfs[0]
        .drops
        .iter()
        .filter(|(r, _)| r.starts_with("ids inline sid "))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(per_rule, s1.nfs[0].packets_dropped, "{:?}", s1.nfs[0].drops);
    assert_eq!(s1.nfs[0].packets_dropped as usize, plain.len() - got.len());
    // The alert-only rule's alerts before the drops are the same records.
    assert!(of_type(&eve0, "alert").len() >= of_type(&eve1, "alert").len() - blocked.len());

    // `catena check` says the IDS is inline, or that it is not.
    let c = chain(
        d.path(),
        &format!(
            "{{ kind = \"ids\", rules_file = '{}' }}",
            d.path().join("inline.rules").display()
        ),
    );
    let o = catena(&["check".as_ref(), c.as_os_str()]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("ids inline sid 7"), "{text}");
    let c = chain(
        d.path(),
        &format!(
            "{{ kind = \"ids\", inline = false, rules_file = '{}' }}",
            d.path().join("inline.rules").display()
        ),
    );
    let o = catena(&["check".as_ref(), c.as_os_str()]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("never drops") && !text.contains("inline"),
        "{text}"
    );
}

/// `2016-08-02T02:19:37.734137+0000` → µs since the epoch (UTC).
fn timestamp_us(s: &str) -> u64 {
    let n = |a: usize, b: usize| s[a..b].parse::<u64>().unwrap();
    let (y, m, d) = (n(0, 4), n(5, 7), n(8, 10));
    // Days from civil (H. Hinnant).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y / 400;
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    ((days * 86_400 + n(11, 13) * 3600 + n(14, 16) * 60 + n(17, 19)) * 1_000_000) + n(20, 26)
}

#[test]
fn bad_eve_path_and_rule_files_are_one_line_errors() {
    let d = common::tempdir();
    std::fs::write(d.path().join("r.rules"), RULES).unwrap();
    let pcap = common::dataset("ndpi/pcap/1kxun.pcap");
    let out = d.path().join("out.pcap");
    let c = chain(
        d.path(),
        "{ kind = \"ids\", rules_file = \"r.rules\", eve = \"no/such/dir/eve.json\" }",
    );
    let o = catena(&[
        "run".as_ref(),
        c.as_os_str(),
        "-i".as_ref(),
        pcap.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("eve") && err.contains("no/such/dir"), "{err}");
    assert!(
        !out.exists() || common::packets(&out).is_empty(),
        "no packet was processed"
    );

    // A syntax error names file:line; an unsupported keyword names sid and keyword.
    std::fs::write(
        d.path().join("bad.rules"),
        "alert tcp any any -> any any (msg:\"ok\"; content:\"a\"; sid:1;)\n\
         alert tcp any any -> any any (msg:\"x\"; content:\"b\"; threshold: type limit, track by_src, count 1, seconds 60; sid:2;)\n\
         alert tcp any any -> any any (msg:\"broken\"; sid:3\n",
    )
    .unwrap();
    let c = chain(d.path(), "{ kind = \"ids\", rules_file = \"bad.rules\" }");
    let o = catena(&["check".as_ref(), c.as_os_str()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("sid 2") && err.contains("threshold"), "{err}");
    assert!(err.contains("bad.rules:3"), "{err}");
}
