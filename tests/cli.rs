//! The `catena` binary: JSON summary, bad input and bad config give one line and a
//! non-zero exit, good packets before a bad record are still written.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::*;

fn example(name: &str) -> String {
    format!("{}/examples/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// A failed run: non-zero exit, exactly one line on stderr starting `error:`, no panic.
fn one_line_error(o: &Output) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        !o.status.success(),
        "expected failure, got success; stderr: {err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err}");
    assert!(err.starts_with("error: "), "{err}");
    err
}

#[test]
fn run_json_has_the_documented_keys_and_balances() {
    let o = catena(&["run", &example("firewall.toml"), "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    for k in [
        "packets_in",
        "packets_out",
        "packets_dropped",
        "bytes_in",
        "bytes_out",
        "seconds",
        "mpps",
        "data_rate_gbps",
        "throughput_gbps",
        "nfs",
    ] {
        assert!(v.get(k).is_some(), "missing key {k}");
    }
    let n = |k: &str| v[k].as_u64().unwrap();
    // capinfos counts 90,989 packets in the merged trace (shared/datasets/INDEX.tsv).
    assert_eq!(n("packets_in"), 90_989);
    assert_eq!(n("packets_in"), n("packets_out") + n("packets_dropped"));
    let nf = &v["nfs"][0];
    assert_eq!(nf["name"], "fw");
    assert_eq!(nf["kind"], "firewall");
    assert_eq!(nf["packets_in"].as_u64().unwrap(), n("packets_in"));
    assert_eq!(nf["packets_out"].as_u64().unwrap(), n("packets_out"));
    assert_eq!(
        nf["packets_dropped"].as_u64().unwrap(),
        n("packets_dropped")
    );
}

#[test]
fn flooded_packets_count_once() {
    let o = catena(&["run", &example("mac_switch.toml"), "--json"]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["packets_out"], v["packets_in"]);
    let flooded = v["sinks"][0]["flooded"].as_u64().unwrap();
    let tx: u64 = v["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["tx"].as_u64().unwrap())
        .sum();
    // A flood leaves by 4 of the 5 ports; a unicast by one.
    assert_eq!(
        tx,
        v["packets_out"].as_u64().unwrap() - flooded + 4 * flooded
    );
    assert!(flooded > 0);
}

#[test]
fn loops_replay_from_memory() {
    let src = dataset("ndpi/pcap/1kxun.pcap");
    let o = catena(&[
        "run",
        &example("wire.toml"),
        "-i",
        src.to_str().unwrap(),
        "--loops",
        "3",
        "--json",
    ]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["packets_in"].as_u64().unwrap(), 3 * 1723);
}

fn write(p: &Path, b: &[u8]) -> String {
    std::fs::write(p, b).unwrap();
    p.to_str().unwrap().to_string()
}

fn pcap_header(linktype: u32, snaplen: u32) -> Vec<u8> {
    let mut h = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0];
    h.extend_from_slice(&[0; 8]);
    h.extend_from_slice(&snaplen.to_le_bytes());
    h.extend_from_slice(&linktype.to_le_bytes());
    h
}

#[test]
fn bad_files_give_one_line_errors() {
    let d = tempdir();
    let cfg = example("wire.toml");
    let cases: Vec<(String, &str)> = vec![
        (
            d.path().join("missing.pcap").to_str().unwrap().to_string(),
            "missing.pcap",
        ),
        (write(&d.path().join("empty.pcap"), b""), "empty"),
        (
            write(&d.path().join("magic.pcap"), b"GIF89a not a capture at all"),
            "magic",
        ),
        (
            write(&d.path().join("lt.pcap"), &pcap_header(105, 65535)),
            "link type 105",
        ),
        // 1 GiB: over the 256 MiB bound (0x80000000 and up read as libpcap's 262144).
        (
            write(&d.path().join("snap.pcap"), &pcap_header(1, 1 << 30)),
            "snaplen",
        ),
    ];
    for (path, needle) in cases {
        let o = catena(&["run", &cfg, "-i", &path]);
        let e = one_line_error(&o);
        assert!(
            e.to_lowercase().contains(&needle.to_lowercase()),
            "{needle}: {e}"
        );
    }
}

#[test]
fn truncated_file_keeps_the_good_packets() {
    let d = tempdir();
    let src = std::fs::read(dataset("ndpi/pcap/1kxun.pcap")).unwrap();
    // Cut in the middle of a record: everything before it must still come out.
    let cut = write(&d.path().join("cut.pcap"), &src[..src.len() / 2]);
    let out = d.path().join("out.pcap");
    let o = catena(&[
        "run",
        &example("wire.toml"),
        "-i",
        &cut,
        "-o",
        out.to_str().unwrap(),
    ]);
    let e = one_line_error(&o);
    assert!(e.contains("cut.pcap"), "{e}");
    let good = packets(&out);
    assert!(good.len() > 500, "only {} packets written", good.len());
    let orig = packets(&dataset("ndpi/pcap/1kxun.pcap"));
    assert_eq!(good[..], orig[..good.len()]);
    // The written file is a prefix of the input, byte for byte.
    let w = std::fs::read(&out).unwrap();
    assert_eq!(w[..], src[..w.len()]);
}

#[test]
fn bad_configs_give_one_line_errors() {
    let d = tempdir();
    let trace = dataset("ndpi/pcap/1kxun.pcap");
    for (text, needle) in [
        (
            "[[nf]]\nname = \"x\"\nkind = \"nope\"\n",
            "unknown kind `nope`",
        ),
        ("edges = [\"in -> x\"]\n", "no node named `x`"),
        ("[input]\nports = -1\n", "t.toml:2:9"),
    ] {
        let cfg = write(&d.path().join("t.toml"), text.as_bytes());
        let o = catena(&["run", &cfg, "-i", trace.to_str().unwrap()]);
        let e = one_line_error(&o);
        assert!(e.contains(needle), "{needle}: {e}");
        let o = catena(&["check", &cfg]);
        one_line_error(&o);
    }
    one_line_error(&catena(&["run", "/nonexistent/chain.toml"]));
}

#[test]
fn check_and_nfs_describe() {
    let o = catena(&["check", &example("firewall.toml")]);
    assert!(o.status.success());
    let s = String::from_utf8_lossy(&o.stdout);
    assert!(
        s.contains("in -> fw") && s.contains("fw -> out") && s.contains("port-denied"),
        "{s}"
    );
    let o = catena(&["nfs"]);
    let s = String::from_utf8_lossy(&o.stdout);
    for k in [
        "wire",
        "mac_switch",
        "ipv4_switch",
        "firewall",
        "allow_ports",
        "timeout",
    ] {
        assert!(s.contains(k), "{k} missing from `catena nfs`");
    }
}

#[test]
fn gen_writes_deterministic_pcaps_that_tcpdump_reads() {
    require("tcpdump");
    let d = tempdir();
    let p = |n: &str| d.path().join(n).to_str().unwrap().to_string();
    for (name, seed) in [("a.pcap", "7"), ("b.pcap", "7"), ("c.pcap", "8")] {
        let o = catena(&[
            "gen",
            "-p",
            "bigflows",
            "-n",
            "5000",
            "--seed",
            seed,
            "-o",
            &p(name),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let read = |n: &str| std::fs::read(p(n)).unwrap();
    assert_eq!(read("a.pcap"), read("b.pcap"));
    assert_ne!(read("a.pcap"), read("c.pcap"));
    let o = Command::new("tcpdump")
        .args(["-r", &p("a.pcap"), "-nn"])
        .output()
        .unwrap();
    assert!(o.status.success());
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 5000);
    one_line_error(&catena(&["gen", "-p", "hugeflows", "-o", &p("x.pcap")]));
    one_line_error(&catena(&["gen", "--size", "20", "-o", &p("x.pcap")]));
}

#[test]
fn looped_output_keeps_capture_timestamps() {
    let d = tempdir();
    let src = dataset("ndpi/pcap/1kxun.pcap");
    let out = d.path().join("o.pcap");
    let o = catena(&[
        "run",
        &example("wire.toml"),
        "-i",
        src.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--loops",
        "2",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (a, b) = (packets(&src), packets(&out));
    assert_eq!(b.len(), 2 * a.len());
    assert_eq!(b[..a.len()], a[..]);
    assert_eq!(b[a.len()..], a[..]);
}

#[test]
fn file_parameters_are_relative_to_the_chain_file_not_the_working_directory() {
    require("tcpdump");
    let d = tempdir();
    let folder = d.path().join("chains");
    let elsewhere = d.path().join("cwd");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::write(folder.join("acl.txt"), "# DNS only\nallow udp port 53\n").unwrap();
    let chain = folder.join("chain.toml");
    std::fs::write(
        &chain,
        "[[nf]]\nname = \"acl\"\nkind = \"ip_filter\"\nrules_file = \"acl.txt\"\n\
         [[nf]]\nname = \"mon\"\nkind = \"flow_monitor\"\nrecords = \"flows.jsonl\"\n",
    )
    .unwrap();
    let src = dataset("bench/ndpi-ether-merged.pcap");
    let passed = d.path().join("passed.pcap");
    let o = Command::new(env!("CARGO_BIN_EXE_catena"))
        .current_dir(&elsewhere)
        .arg("run")
        .arg(&chain)
        .arg("--json")
        .arg("-i")
        .arg(&src)
        .arg("-o")
        .arg(&passed)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The rules came from chains/acl.txt: what passed is what tcpdump passes.
    let want = d.path().join("want.pcap");
    let t = Command::new("tcpdump")
        .arg("-r")
        .arg(&src)
        .arg("-w")
        .arg(&want)
        .arg("udp port 53 or (vlan and udp port 53)")
        .output()
        .unwrap();
    assert!(t.status.success(), "{}", String::from_utf8_lossy(&t.stderr));
    let got = packets(&passed);
    assert!(!got.is_empty());
    assert!(
        got == packets(&want),
        "forwarded packets differ from tcpdump's"
    );
    // The records went beside the chain file, none into the working directory.
    let records = std::fs::read_to_string(folder.join("flows.jsonl")).unwrap();
    assert!(records.lines().count() > 10, "{records}");
    assert!(std::fs::read_dir(&elsewhere).unwrap().next().is_none());
}
