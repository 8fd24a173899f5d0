//! tcpdump's forms of the primitives `ip_filter` evaluates (issue 14, point 17): `proto
//! udp`, `ip proto tcp`, `ip6 proto icmp6`, escaped names (`\udp`), and fragment tests
//! (`ip frag`, `ip[6:2] & 0x1fff != 0`); and the `malformed` policy of `ip_filter` and
//! `firewall` (point 18): with `malformed = "pass"` decisions equal tcpdump's exactly on
//! captures holding IPv4 frames with a bad version or header length.
//! Every decision is checked against tcpdump on real captures, with FastPath off and on.

mod common;

use std::path::Path;
use std::process::Command;

use catena::io::Trace;
use catena::nfs::acl::Rule;
use common::*;

/// Captures with IPv4 fragments (first and later), VLANs, IPv6 and ICMP.
const FRAGMENTED: &[&str] = &[
    "ndpi/pcap/ip_fragmented_garbage.pcap",
    "ndpi/pcap/dns_fragmented.pcap",
    "ndpi/pcap/dnscrypt-v1-and-resolver-pings.pcap",
    "ndpi/pcap/badpackets.pcap",
    "bench/ndpi-ether-merged.pcap",
];

/// Captures holding IPv4-ethertype frames with a bad version or IHL < 5 (found with
/// `tcpdump 'ether proto 0x800 and (ip[0] & 0xf < 5 or ip[0] >> 4 != 4)'`).
const MALFORMED: &[&str] = &[
    "ndpi/pcap/fuzz-2006-06-26-2594.pcap",
    "ndpi/pcap/fuzz-2006-09-29-28586.pcap",
    "ndpi/pcap/fuzz-2020-02-16-11740.pcap",
];

/// tcpdump reads VLAN-tagged frames only when told: the expression spelled out for
/// untagged frames and for one and two tags, as catena looks through tags.
fn with_vlans(e: &str) -> String {
    let untagged = |o: u32| {
        format!("not (ether[{o}:2] = 0x8100 or ether[{o}:2] = 0x88a8 or ether[{o}:2] = 0x9100)")
    };
    format!(
        "({} and ({e})) or (vlan and (({} and ({e})) or (vlan and ({e}))))",
        untagged(12),
        untagged(16)
    )
}

fn tcpdump(src: &Path, expr: &str, out: &Path) -> Vec<(u64, Vec<u8>)> {
    let o = Command::new("tcpdump")
        .arg("-r")
        .arg(src)
        .arg("-w")
        .arg(out)
        .arg(with_vlans(expr))
        .output()
        .expect("run tcpdump");
    assert!(
        o.status.success(),
        "tcpdump {expr}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    packets(out)
}

/// Runs `nf` (a `[[nf]]` table) over `rel` with FastPath off and on: both outputs must
/// equal tcpdump's for `expr`. Returns (packets passed, NF's summary of the off run).
fn equal_to_tcpdump(nf: &str, rel: &str, expr: &str) -> (usize, catena::runtime::Summary) {
    let dir = tempdir();
    let src = dataset(rel);
    let trace = Trace::open(&src).unwrap();
    let want = tcpdump(&src, expr, &dir.path().join("theirs.pcap"));
    let mut first = None;
    for fast in [false, true] {
        let ours = dir.path().join("ours.pcap");
        let text = format!("fastpath = {fast}\n{nf}");
        let s = run_chain(&text, &trace, Some(&ours));
        assert_eq!(s.packets_in, s.packets_out + s.packets_dropped);
        let got = packets(&ours);
        if got != want {
            let at = got
                .iter()
                .zip(&want)
                .position(|(a, b)| a != b)
                .unwrap_or(got.len().min(want.len()));
            panic!(
                "{nf} on {rel} (fastpath {fast}): catena passed {}, tcpdump `{expr}` {}; first difference at forwarded packet {at}",
                got.len(),
                want.len()
            );
        }
        first.get_or_insert(s);
    }
    (want.len(), first.unwrap())
}

fn filter(rule: &str, extra: &str) -> String {
    format!("[[nf]]\nname = \"acl\"\nkind = \"ip_filter\"\nrules = [{rule:?}]\n{extra}")
}

#[test]
fn tcpdump_forms_parse() {
    for r in [
        "allow proto udp",
        "allow proto \\udp",
        "allow ip proto tcp",
        "allow ip proto \\tcp or \\udp",
        "allow ip6 proto icmp6",
        "allow \\udp",
        "allow ip frag",
        "allow ip unfrag",
        "allow ip[6:2] & 0x1fff != 0",
        "deny ip[6:2] & 0x3fff = 0",
        "allow udp and not ip frag",
    ] {
        assert!(Rule::parse(r).is_ok(), "{r}: {:?}", Rule::parse(r));
    }
    assert_eq!(
        Rule::parse("allow ip[6:2] & 0x2000 != 0").unwrap_err(),
        "`ip[6:2]` takes `& 0x1fff` or `& 0x3fff`, then `!= 0` or `= 0` (fragment tests)"
    );
    assert_eq!(
        Rule::parse("allow proto foo").unwrap_err(),
        "`foo` is not a protocol number"
    );
}

#[test]
fn protocol_and_fragment_primitives_decide_as_tcpdump() {
    require("tcpdump");
    // (catena rules, default, tcpdump expression of what passes)
    let cases: &[(&[&str], &str, &str)] = &[
        (&["allow proto udp"], "deny", "proto \\udp"),
        (&["allow proto \\udp"], "deny", "proto \\udp"),
        (&["allow ip proto tcp"], "deny", "ip proto \\tcp"),
        (
            &["allow ip proto tcp or udp"],
            "deny",
            "ip proto \\tcp or \\udp",
        ),
        (&["allow ip6 proto icmp6"], "deny", "ip6 proto 58"),
        (&["allow \\udp"], "deny", "udp"),
        (&["allow ip frag"], "deny", "ip[6:2] & 0x3fff != 0"),
        (&["allow ip unfrag"], "deny", "ip and ip[6:2] & 0x3fff = 0"),
        (
            &["allow ip[6:2] & 0x1fff != 0"],
            "deny",
            "ip[6:2] & 0x1fff != 0",
        ),
        (
            &["allow ip[6:2] & 0x1fff = 0"],
            "deny",
            "ip[6:2] & 0x1fff = 0",
        ),
        (&["deny ip frag"], "allow", "not (ip[6:2] & 0x3fff != 0)"),
        (
            &["deny udp and ip frag", "allow udp port 53", "allow ip6"],
            "deny",
            "not (udp and ip[6:2] & 0x3fff != 0) and (udp port 53 or ip6)",
        ),
    ];
    let mut passed = 0;
    for (rules, default, expr) in cases {
        let list: Vec<String> = rules.iter().map(|r| format!("{r:?}")).collect();
        let nf = format!(
            "[[nf]]\nname = \"acl\"\nkind = \"ip_filter\"\ndefault = \"{default}\"\nrules = [{}]\n",
            list.join(", ")
        );
        for rel in FRAGMENTED {
            passed += equal_to_tcpdump(&nf, rel, expr).0;
        }
    }
    assert!(passed > 50_000, "only {passed} packets passed in all");
}

#[test]
fn malformed_pass_equals_tcpdump_and_drop_is_the_default() {
    require("tcpdump");
    let cases: &[(&str, &str)] = &[
        ("allow ip", "ip"),
        ("allow tcp port 80", "tcp port 80"),
        ("allow not port 80", "not port 80"),
        ("allow udp or icmp", "udp or icmp"),
        ("allow src net 192.168.0.0/16", "ip src net 192.168.0.0/16"),
        ("allow ip frag", "ip[6:2] & 0x3fff != 0"),
    ];
    let mut malformed_passed = 0u64;
    for (rule, expr) in cases {
        for rel in MALFORMED {
            let (_, s) = equal_to_tcpdump(&filter(rule, "malformed = \"pass\"\n"), rel, expr);
            assert_eq!(drops(&s, "malformed"), 0, "{rule} on {rel}");
            // The default drops them whatever the rules.
            let src = dataset(rel);
            let d = run_chain(&filter(rule, ""), &Trace::open(&src).unwrap(), None);
            malformed_passed += drops(&d, "malformed");
        }
    }
    assert!(malformed_passed > 0, "the captures hold no malformed frame");
    // The firewall: tcpdump's `ip and (tcp or udp) and (port 80 or port 443)`.
    let fw = "[[nf]]\nname = \"fw\"\nkind = \"firewall\"\nmalformed = \"pass\"\n";
    for rel in MALFORMED.iter().chain(&FRAGMENTED[..1]) {
        let (_, s) = equal_to_tcpdump(fw, rel, "ip and (tcp or udp) and (port 80 or port 443)");
        assert_eq!(drops(&s, "malformed"), 0, "firewall on {rel}");
    }
}

fn drops(s: &catena::runtime::Summary, reason: &str) -> u64 {
    s.nfs[0]
        .drops
        .iter()
        .find(|(r, _)| r == reason)
        .map_or(0, |(_, n)| *n)
}
