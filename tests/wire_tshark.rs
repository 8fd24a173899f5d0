//! Oracle test: every header field our views read from real traces must equal what
//! `tshark -T fields` reads from the same packets. The pcaps are read with `pcap-parser`
//! directly (not our own reader) so this test depends only on the views.
//!
//! Only the layers our walk decodes are compared (Ethernet, the outer VLAN tag, the outer
//! IPv4/IPv6/ARP header, and the transport header right after it); tshark's first
//! occurrence of a deeper field may come from a tunnel or an ICMP-quoted packet, so those
//! are not compared. IP fragments are compared at L3 only.

use catena::packet::wire::{
    ethertype, ip_proto, Arp, Ethernet, Icmp, Icmpv6, Ipv4, Ipv6, Tcp, Udp,
};
use std::collections::HashMap;
use std::process::Command;

const DATASETS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/datasets/");

/// Ethernet traces chosen for coverage: IPv4+IPv6, TCP/UDP, ICMP, ICMPv6, ARP, 802.1Q.
const TRACES: &[&str] = &[
    "ndpi/pcap/android.pcap", // v4/v6, TCP, UDP, ICMPv6 (MLD hop-by-hop), ARP
    "ndpi/pcap/iphone.pcap",  // v4/v6, ICMP, ICMPv6, ARP
    "ndpi/pcap/googledns_android10.pcap", // ICMP echo
    "ndpi/pcap/anyconnect-vpn.pcap", // DTLS/UDP, ICMPv6, mDNS
    "ndpi/pcap/bot.pcap",     // every frame 802.1Q tagged
    "ndpi/pcap/syslog.pcap",  // mix of tagged and untagged
    "ndpi/pcap/smtp-starttls.pcap", // tagged TCP
];

const FIELDS: &[&str] = &[
    "frame.number",
    "eth.src",
    "eth.dst",
    "vlan.id",
    "ip.src",
    "ip.dst",
    "ip.proto",
    "ip.ttl",
    "ip.len",
    "ip.hdr_len",
    "ip.flags",
    "ip.checksum.status",
    "ipv6.src",
    "ipv6.dst",
    "ipv6.nxt",
    "ipv6.hlim",
    "ipv6.plen",
    "tcp.srcport",
    "tcp.dstport",
    "tcp.flags",
    "tcp.seq_raw",
    "tcp.hdr_len",
    "tcp.checksum.status",
    "udp.srcport",
    "udp.dstport",
    "udp.length",
    "udp.checksum.status",
    "icmp.type",
    "icmp.code",
    "icmp.checksum.status",
    "icmpv6.type",
    "icmpv6.code",
    "icmpv6.checksum.status",
    "arp.opcode",
    "arp.src.proto_ipv4",
    "arp.dst.proto_ipv4",
];

fn tshark(path: &str) -> Vec<HashMap<&'static str, String>> {
    let mut cmd = Command::new("tshark");
    cmd.args([
        "-r",
        path,
        "-n",
        "-T",
        "fields",
        "-E",
        "separator=/t",
        "-E",
        "occurrence=f",
    ]);
    for o in [
        "ip.check_checksum:TRUE",
        "tcp.check_checksum:TRUE",
        "udp.check_checksum:TRUE",
        // Reassembly would move transport fields to the last fragment's frame.
        "ip.defragment:FALSE",
        "ipv6.defragment:FALSE",
    ] {
        cmd.args(["-o", o]);
    }
    for f in FIELDS {
        cmd.args(["-e", f]);
    }
    let out = match cmd.output() {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            panic!("tshark is not installed: install it (apt-get install tshark) to run this oracle test")
        }
        Err(e) => panic!("running tshark: {e}"),
    };
    assert!(
        out.status.success(),
        "tshark failed on {path}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("tshark output is UTF-8")
        .lines()
        .map(|l| {
            FIELDS
                .iter()
                .copied()
                .zip(l.split('\t').map(str::to_owned))
                .collect()
        })
        .collect()
}

/// What our views read, formatted as tshark prints it.
fn ours(p: &[u8]) -> HashMap<&'static str, String> {
    let mut m = HashMap::new();
    let mac = |a: [u8; 6]| {
        a.iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":")
    };
    let Ok(eth) = Ethernet::new_checked(p) else {
        return m;
    };
    m.insert("eth.src", mac(eth.src()));
    m.insert("eth.dst", mac(eth.dst()));
    let Ok(l2) = eth.l2_info() else { return m };
    if let Some(t) = l2.tags().first() {
        m.insert("vlan.id", t.vid().to_string());
    }
    let l3 = &p[l2.l3_offset..];
    let status = |ok: bool| if ok { "1" } else { "0" }.to_string();
    // (transport bytes, protocol, v4 addrs, v6 addrs)
    let (l4, proto, v4, v6) = match l2.ethertype {
        ethertype::IPV4 => {
            let Ok(ip) = Ipv4::new_checked(l3) else {
                return m;
            };
            m.insert("ip.src", ip.src_addr().to_string());
            m.insert("ip.dst", ip.dst_addr().to_string());
            m.insert("ip.proto", ip.protocol().to_string());
            m.insert("ip.ttl", ip.ttl().to_string());
            m.insert("ip.len", ip.total_len().to_string());
            m.insert("ip.hdr_len", ip.header_len().to_string());
            m.insert("ip.flags", format!("0x{:02x}", ip.flags()));
            m.insert("ip.checksum.status", status(ip.verify_checksum()));
            if ip.is_fragment() {
                return m;
            }
            let end = usize::from(ip.total_len()).min(l3.len());
            (
                &l3[ip.header_len()..end],
                ip.protocol(),
                Some((ip.src(), ip.dst())),
                None,
            )
        }
        ethertype::IPV6 => {
            let Ok(ip) = Ipv6::new_checked(l3) else {
                return m;
            };
            m.insert("ipv6.src", ip.src_addr().to_string());
            m.insert("ipv6.dst", ip.dst_addr().to_string());
            m.insert("ipv6.nxt", ip.next_header().to_string());
            m.insert("ipv6.hlim", ip.hop_limit().to_string());
            m.insert("ipv6.plen", ip.payload_len().to_string());
            let Ok(w) = ip.walk_ext() else { return m };
            if w.frag.is_some() {
                return m;
            }
            let end = (40 + usize::from(ip.payload_len())).min(l3.len());
            (
                &l3[w.offset.min(end)..end],
                w.next_header,
                None,
                Some((ip.src(), ip.dst())),
            )
        }
        ethertype::ARP => {
            if let Ok(a) = Arp::new_checked(l3) {
                m.insert("arp.opcode", a.op().to_string());
                m.insert(
                    "arp.src.proto_ipv4",
                    std::net::Ipv4Addr::from(a.spa()).to_string(),
                );
                m.insert(
                    "arp.dst.proto_ipv4",
                    std::net::Ipv4Addr::from(a.tpa()).to_string(),
                );
            }
            return m;
        }
        _ => return m,
    };
    match proto {
        ip_proto::TCP => {
            let Ok(t) = Tcp::new_checked(l4) else {
                return m;
            };
            m.insert("tcp.srcport", t.src_port().to_string());
            m.insert("tcp.dstport", t.dst_port().to_string());
            m.insert("tcp.flags", format!("0x{:04x}", t.flags()));
            m.insert("tcp.seq_raw", t.seq().to_string());
            m.insert("tcp.hdr_len", t.header_len().to_string());
            let ok = match (v4, v6) {
                (Some((s, d)), _) => t.verify_checksum_v4(s, d),
                (_, Some((s, d))) => t.verify_checksum_v6(&s, &d),
                _ => unreachable!(),
            };
            m.insert("tcp.checksum.status", status(ok));
        }
        ip_proto::UDP => {
            let Ok(u) = Udp::new_checked(l4) else {
                return m;
            };
            m.insert("udp.srcport", u.src_port().to_string());
            m.insert("udp.dstport", u.dst_port().to_string());
            m.insert("udp.length", u.len().to_string());
            let ok = match (v4, v6) {
                (Some((s, d)), _) => u.verify_checksum_v4(s, d),
                (_, Some((s, d))) => u.verify_checksum_v6(&s, &d),
                _ => unreachable!(),
            };
            m.insert("udp.checksum.status", status(ok));
        }
        ip_proto::ICMP if v4.is_some() => {
            let Ok(i) = Icmp::new_checked(l4) else {
                return m;
            };
            m.insert("icmp.type", i.msg_type().to_string());
            m.insert("icmp.code", i.code().to_string());
            m.insert("icmp.checksum.status", status(i.verify_checksum()));
        }
        ip_proto::ICMPV6 => {
            let (Ok(i), Some((s, d))) = (Icmpv6::new_checked(l4), v6) else {
                return m;
            };
            m.insert("icmpv6.type", i.msg_type().to_string());
            m.insert("icmpv6.code", i.code().to_string());
            m.insert("icmpv6.checksum.status", status(i.verify_checksum(&s, &d)));
        }
        _ => {}
    }
    m
}

/// Which fields to compare for a packet: those of the layers we decoded, plus the ones
/// tshark shows for layers right at our decode depth (so a view that wrongly rejects a
/// header is caught, not skipped).
fn layer(field: &str) -> &str {
    field.split('.').next().unwrap_or("")
}

#[test]
fn views_match_tshark_on_real_traces() {
    let (mut packets, mut fields, mut checks) = (0usize, 0usize, 0usize);
    let mut mismatches = Vec::new();
    for trace in TRACES {
        let path = format!("{DATASETS}{trace}");
        let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(
            &data[..4],
            &[0xd4, 0xc3, 0xb2, 0xa1],
            "{trace}: expected a little-endian µs pcap"
        );
        let (_, cap) =
            pcap_parser::pcap::parse_pcap(&data).unwrap_or_else(|e| panic!("{trace}: {e:?}"));
        assert_eq!(
            cap.header.network,
            pcap_parser::Linktype::ETHERNET,
            "{trace}"
        );
        let rows = tshark(&path);
        assert_eq!(
            rows.len(),
            cap.blocks.len(),
            "{trace}: tshark and pcap-parser disagree on the frame count"
        );
        let (mut tf, mut tp) = (0, 0);
        for (i, (row, block)) in rows.iter().zip(&cap.blocks).enumerate() {
            assert_eq!(row["frame.number"], (i + 1).to_string());
            assert_eq!(
                block.caplen, block.origlen,
                "{trace}: truncated captures are not expected here"
            );
            let mine = ours(block.data);
            let decoded: Vec<&str> = mine.keys().map(|k| layer(k)).collect();
            for &f in &FIELDS[1..] {
                let theirs = row.get(f).map(String::as_str).unwrap_or("");
                let status = f.ends_with(".checksum.status");
                // tshark 0 = bad, 1 = good; 2 = unverified, 3 = not present (UDP 0).
                if status && theirs != "0" && theirs != "1" {
                    continue;
                }
                match mine.get(f) {
                    Some(v) => {
                        let ok = match f {
                            "tcp.flags" => u16::from_str_radix(theirs.trim_start_matches("0x"), 16)
                                .is_ok_and(|t| format!("0x{:04x}", t & 0x1ff) == *v),
                            _ => theirs == v,
                        };
                        if !ok {
                            mismatches.push(format!(
                                "{trace} frame {}: {f}: tshark {theirs:?} ours {v:?}",
                                i + 1
                            ));
                        }
                        fields += 1;
                        checks += usize::from(status);
                    }
                    // We did not decode this layer; fine if tshark's value comes from a
                    // deeper (tunnelled/quoted) header, a fault if we stopped early at a
                    // layer our views should have read.
                    None if !theirs.is_empty() && decoded.contains(&layer(f)) && !status => {
                        mismatches.push(format!(
                            "{trace} frame {}: {f}: tshark {theirs:?}, ours missing",
                            i + 1
                        ));
                    }
                    None => {}
                }
            }
            tp += 1;
            tf += mine.len();
        }
        eprintln!("{trace}: {tp} packets, {tf} fields");
        packets += tp;
    }
    eprintln!("total: {packets} packets, {fields} fields compared ({checks} checksum verdicts)");
    assert!(
        mismatches.is_empty(),
        "{} mismatches, first ones:\n{}",
        mismatches.len(),
        mismatches
            .iter()
            .take(30)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        packets >= 2000 && fields >= 20_000 && checks >= 1500,
        "too little compared: {packets} packets, {fields} fields"
    );
}
