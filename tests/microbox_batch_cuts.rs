//! Time inside the microbox does not depend on how the runtime cuts batches (issue 14,
//! point 2): FastPath cuts a chunk at every hit, so the microbox gets other batches with
//! it on than off, and before the fix it took its clock from each batch's first packet.
//! A connection then ended idle in one mode and at the end of the run in the other.

mod common;

use catena::io::{PcapHeader, Trace};
use catena::packet::LinkKind;
use catena::runtime::{Chain, ChainConfig, NoProgress, RunOptions, Runner, Summary};

const SEC: u64 = 1_000_000_000;

fn tcp(sport: u16, syn: bool) -> Vec<u8> {
    let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .tcp(sport, 80, 1000, 8192);
    let b = if syn { b.syn() } else { b.ack(1) };
    let mut v = Vec::new();
    b.write(&mut v, if syn { b"" } else { b"data" }).unwrap();
    v
}

fn udp() -> Vec<u8> {
    let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4([10, 0, 0, 9], [10, 0, 0, 2], 64)
        .udp(5353, 5353);
    let mut v = Vec::new();
    b.write(&mut v, b"payload!").unwrap();
    v
}

fn run(t: &Trace, fast: bool) -> Summary {
    let text = format!(
        "name = \"cuts\"\nfastpath = {fast}\nfastpath_record = 1\n\
         [[nf]]\nname = \"f\"\nkind = \"ip_filter\"\nrules = [\"deny udp\", \"allow ip\"]\n\
         [[nf]]\nname = \"mb\"\nkind = \"microbox\"\ntimeout = 1\napps = [{{ kind = \"tcp_count\" }}]\n"
    );
    let cfg = ChainConfig::parse(&text, "cuts.toml").expect("config");
    let chain = Chain::from_config(&cfg).expect("chain");
    let mut r = Runner::new(chain, t.max_packet_len());
    r.run(t, &RunOptions::default(), &mut NoProgress)
        .expect("run")
}

fn stat(s: &Summary, name: &str) -> u64 {
    s.nfs[1]
        .stats
        .iter()
        .find(|(k, _)| k == name)
        .map_or_else(|| panic!("no stat {name}"), |(_, v)| *v)
}

/// Chunk 1: connection A's SYN at 100 s, then 31 denied UDP packets (one flow, recorded).
/// Chunk 2: A's data at 100.2 s, 10 UDP packets (FastPath hits), connection C's SYN at
/// 103 s, 20 more UDP hits. Without FastPath the microbox gets [A, C] in one batch; with
/// it, [A] and [C]. By C's time A has been idle 2.8 s > 1 s: it ends idle either way.
#[test]
fn a_connection_ends_idle_with_fastpath_on_and_off() {
    let mut f = vec![(100 * SEC, tcp(1000, true))];
    f.extend((0..31).map(|i| (100 * SEC + SEC / 10 + i, udp())));
    f.push((100 * SEC + SEC / 5, tcp(1000, false)));
    f.extend((0..10).map(|i| (100 * SEC + SEC / 5 + 1 + i, udp())));
    f.push((103 * SEC, tcp(2000, true)));
    f.extend((0..20).map(|i| (103 * SEC + 1 + i, udp())));
    let t = Trace::from_packets(
        LinkKind::Ethernet,
        PcapHeader::new(1, true),
        f.iter().map(|(ts, b)| (*ts, b.as_slice())),
    );
    let off = run(&t, false);
    let on = run(&t, true);
    assert!(
        on.fastpath.expect("fastpath").hits >= 20,
        "the test needs hits"
    );
    for s in [&off, &on] {
        assert_eq!(
            (
                stat(s, "flows"),
                stat(s, "ended_idle"),
                stat(s, "ended_final")
            ),
            (2, 1, 1)
        );
    }
    let j = |s: &Summary| serde_json::to_string(&s.nfs).unwrap();
    assert_eq!(j(&off), j(&on));
}
