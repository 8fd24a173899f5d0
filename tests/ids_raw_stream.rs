//! How Suricata 7 inspects TCP payloads outside app-layer buffers, Suricata as the oracle
//! (`-k none`, `stream.midstream=true`, `packet-alert-max=255`, as in
//! tests/ids_suricata_agreement.rs), on real captures:
//!
//! - `tcp-pkt` rules see each packet's payload (retransmissions included), never the
//!   reassembled stream;
//! - once a TLS flow carries application data, Suricata (default `encryption-handling`)
//!   inspects none of its payloads any more, packet or stream.

mod common;

use common::{catena_ids_counts, suricata_alert_counts};
use std::collections::BTreeMap;

/// Both sides' per-rule counts on `pcap` with `rules`.
fn both(pcap: &str, rules: &str) -> (BTreeMap<u32, u64>, BTreeMap<u32, u64>) {
    let d = common::tempdir();
    let r = d.path().join("t.rules");
    std::fs::write(&r, rules).unwrap();
    let pcap = common::dataset(pcap);
    let a = catena_ids_counts(&pcap, &r, d.path());
    let b = suricata_alert_counts(&pcap, &r, d.path());
    (a, b)
}

/// 1kxun.pcap: packet-only rules counted 70 and 45 (as the stream rule) where Suricata
/// counts 76 and 49 (it also inspects retransmitted and overlapping segments' packets).
#[test]
fn tcp_pkt_rules_inspect_every_packet_payload() {
    common::require("suricata");
    let (a, b) = both(
        "ndpi/pcap/1kxun.pcap",
        "alert tcp-pkt any any -> any any (msg:\"pkt d2\"; content:\"d2\"; sid:1;)\n\
         alert tcp-pkt any any -> any any (msg:\"pkt d3\"; content:\"d3\"; sid:2;)\n",
    );
    assert!(b.values().sum::<u64>() > 50, "{b:?}");
    assert_eq!(a, b);
}

/// netflix.pcap: a packet rule on the TLS application-data record header matched every
/// encrypted packet that starts a record (far more than Suricata's 40): Suricata stops
/// inspecting payloads once the other side acknowledges the flow's first application
/// data record (its TLS parser runs on acknowledged bytes).
#[test]
fn tls_flows_are_not_inspected_once_application_data_is_acknowledged() {
    common::require("suricata");
    let (a, b) = both(
        "ndpi/pcap/netflix.pcap",
        "alert tcp-pkt any any -> any any (msg:\"TLS 1.2 app data\"; content:\"|17 03 03|\"; sid:1;)\n",
    );
    assert!(b.values().sum::<u64>() >= 30, "{b:?}");
    assert_eq!(a, b);
}
