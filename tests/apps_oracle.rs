//! The Freeflow apps on real traces, against tcpdump's BPF and against their input.

mod common;

use std::process::Command;

use catena::io::Trace;
use common::*;

/// Traces of several link types, with VLANs, IPv6, fragments and non-IP among them.
const TRACES: &[&str] = &[
    "bench/ndpi-ether-merged.pcap",
    "ndpi/pcap/KakaoTalk_chat.pcap",
    "ndpi/pcap/ocs.pcap",
    "ndpi/pcap/1kxun.pcap",
    "ndpi/pcap/http2.pcapng",
    "retina/tls_ciphers.pcap",
    "suricata-verify/tests/detect-vlan-id/input.pcap",
    "suricata-verify/tests/arp/detect-arp-03-vlan/input.pcap",
];

/// tcpdump's filter for the firewall's policy; `vlan` shifts offsets for what follows, so
/// the tagged cases are spelled out for up to two tags.
fn bpf(ports: &[u16], ethernet: bool) -> String {
    let ps: Vec<String> = ports.iter().map(|p| format!("port {p}")).collect();
    let core = format!("ip and (tcp or udp) and ({})", ps.join(" or "));
    if ethernet {
        format!("({core}) or (vlan and (({core}) or (vlan and {core})))")
    } else {
        core
    }
}

fn firewall_vs_tcpdump(ports: &[u16]) {
    require("tcpdump");
    let dir = tempdir();
    let list: Vec<String> = ports.iter().map(|p| p.to_string()).collect();
    let chain = format!(
        "[[nf]]\nname = \"fw\"\nkind = \"firewall\"\nallow_ports = [{}]\n",
        list.join(", ")
    );
    let mut compared = 0;
    for rel in TRACES {
        let src = dataset(rel);
        let ours = dir.path().join("ours.pcap");
        let theirs = dir.path().join("theirs.pcap");
        let trace = Trace::open(&src).unwrap();
        let s = run_chain(&chain, &trace, Some(&ours));
        let st = Command::new("tcpdump")
            .arg("-r")
            .arg(&src)
            .arg("-w")
            .arg(&theirs)
            .arg(bpf(
                ports,
                trace.link() == catena::packet::LinkKind::Ethernet,
            ))
            .output()
            .unwrap();
        assert!(
            st.status.success(),
            "tcpdump: {}",
            String::from_utf8_lossy(&st.stderr)
        );
        let (a, b) = (packets(&ours), packets(&theirs));
        assert_eq!(
            a.len(),
            b.len(),
            "{rel}: catena passed {} packets, tcpdump {}",
            a.len(),
            b.len()
        );
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert!(x == y, "{rel}: forwarded packet {i} differs from tcpdump's");
        }
        assert_eq!(s.packets_out as usize, a.len());
        assert_eq!(s.packets_in, s.packets_out + s.packets_dropped);
        compared += a.len();
    }
    assert!(compared > 1000, "only {compared} packets compared");
}

#[test]
fn firewall_default_policy_equals_tcpdump() {
    firewall_vs_tcpdump(&[80, 443]);
}

#[test]
fn firewall_other_port_lists_equal_tcpdump() {
    firewall_vs_tcpdump(&[53]);
    firewall_vs_tcpdump(&[22, 8080, 5228, 1900]);
}

#[test]
fn wire_output_is_byte_identical_to_input() {
    let dir = tempdir();
    for rel in [
        "bench/ndpi-ether-merged.pcap",
        "ndpi/pcap/KakaoTalk_chat.pcap",
        "ndpi/pcap/ocs.pcap",
    ] {
        let src = dataset(rel);
        let out = dir.path().join("wire.pcap");
        let trace = Trace::open(&src).unwrap();
        let s = run_chain(
            "[input]\nports = 2\n[[nf]]\nname = \"w\"\nkind = \"wire\"\n",
            &trace,
            Some(&out),
        );
        assert_eq!(s.packets_out, trace.len() as u64);
        let (a, b) = (std::fs::read(&src).unwrap(), std::fs::read(&out).unwrap());
        assert!(
            a == b,
            "{rel}: wire output differs from input ({} vs {} bytes)",
            b.len(),
            a.len()
        );
        // Each port sends exactly what the other received.
        assert_eq!(s.ports[0].tx, s.ports[1].rx);
        assert_eq!(s.ports[1].tx, s.ports[0].rx);
    }
}

#[test]
fn catena_pcap_reads_back_in_tcpdump() {
    require("tcpdump");
    let dir = tempdir();
    let src = dataset("ndpi/pcap/1kxun.pcap");
    let out = dir.path().join("o.pcap");
    let trace = Trace::open(&src).unwrap();
    let s = run_chain(
        "[[nf]]\nname = \"s\"\nkind = \"mac_switch\"\n",
        &trace,
        Some(&out),
    );
    assert_eq!(
        s.packets_out,
        trace.len() as u64,
        "a MAC switch forwards every Ethernet frame"
    );
    let dump = |p: &std::path::Path| {
        let o = Command::new("tcpdump")
            .arg("-r")
            .arg(p)
            .args(["-nn", "-tt", "-xx"])
            .output()
            .unwrap();
        assert!(o.status.success());
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let (a, b) = (dump(&src), dump(&out));
    assert_eq!(
        a.lines().filter(|l| !l.starts_with('\t')).count(),
        trace.len()
    );
    assert!(a == b, "tcpdump reads different packets back");
}

#[test]
fn every_capture_runs_through_a_chain_without_panic() {
    let chain =
        "[[nf]]\nname = \"a\"\nkind = \"mac_switch\"\n[[nf]]\nname = \"b\"\nkind = \"firewall\"\n";
    let (mut ok, mut rejected, mut packets) = (0, 0, 0u64);
    for p in all_captures() {
        match Trace::open(&p) {
            Ok(t) => {
                let s = run_chain(chain, &t, None);
                assert_eq!(
                    s.packets_in,
                    s.packets_out + s.packets_dropped,
                    "{}",
                    p.display()
                );
                packets += s.packets_in;
                ok += 1;
            }
            Err(e) => {
                let m = e.to_string();
                assert!(!m.contains('\n') && !m.is_empty());
                rejected += 1;
            }
        }
    }
    assert!(ok > 1300, "only {ok} captures ran ({rejected} rejected)");
    assert!(packets > 200_000, "only {packets} packets");
}
