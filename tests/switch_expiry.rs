//! `mac_switch` and `ipv4_switch` with a timeout give the room of expired entries back:
//! new stations are learned once old ones have expired, and churn never leaves the table
//! full of the dead (issue 14, point 3).

mod common;

use catena::io::{PcapHeader, Trace};
use catena::packet::LinkKind;
use catena::runtime::Summary;

const SEC: u64 = 1_000_000_000;

/// Ethernet/IPv4/UDP from station `src` to station `dst` (MAC 02:..:n, IPv4 10.x.y.z).
fn frame(src: u32, dst: u32) -> Vec<u8> {
    let mac = |n: u32| {
        let b = n.to_be_bytes();
        [2, 0, b[0], b[1], b[2], b[3]]
    };
    let ip = |n: u32| (0x0a00_0000 | n).to_be_bytes();
    let mut f = vec![0u8; 60];
    f[0..6].copy_from_slice(&mac(dst));
    f[6..12].copy_from_slice(&mac(src));
    f[12] = 0x08;
    f[14] = 0x45;
    f[17] = 46;
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&ip(src));
    f[30..34].copy_from_slice(&ip(dst));
    f[34..38].copy_from_slice(&[0x30, 0x39, 0, 53]);
    f[39] = 26;
    f
}

fn run(kind: &str, params: &str, frames: &[(u64, Vec<u8>)]) -> Summary {
    let t = Trace::from_packets(
        LinkKind::Ethernet,
        PcapHeader::new(1, false),
        frames.iter().map(|(ts, f)| (*ts, f.as_slice())),
    );
    let text = format!(
        "name = \"sw\"\n[input]\nports = 4\n[[nf]]\nname = \"sw\"\nkind = \"{kind}\"\n{params}\n"
    );
    common::run_chain(&text, &t, None)
}

fn stat(s: &Summary, name: &str) -> u64 {
    s.nfs[0]
        .stats
        .iter()
        .find(|(k, _)| k == name)
        .map_or_else(|| panic!("no stat {name}"), |(_, v)| *v)
}

/// Capacity 2, timeout 1 s: two stations at t = 0 (each sending twice), two new ones at
/// t = 100 s. The first two expired long ago, so the new ones are learned. Before the
/// fix: `table_full` 2 (and 4 with the replies).
#[test]
fn new_stations_take_the_place_of_expired_ones() {
    for kind in ["mac_switch", "ipv4_switch"] {
        let mut f = vec![
            (0, frame(1, 2)),
            (0, frame(2, 1)),
            (100 * SEC, frame(3, 4)),
            (100 * SEC, frame(4, 3)),
            (100 * SEC + 1, frame(3, 4)),
        ];
        f.push((100 * SEC + 2, frame(4, 3)));
        let s = run(kind, "capacity = 2\ntimeout = 1", &f);
        assert_eq!(stat(&s, "table_full"), 0, "{kind}");
        assert_eq!(stat(&s, "entries"), 2, "{kind}");
        // Floods: the first frame (2 unknown), the first at 100 s (4 unknown); the rest
        // find their destination learned.
        assert_eq!(stat(&s, "floods"), 2, "{kind}");
    }
}

/// Live entries still fill the table: a third station while two are live is refused.
#[test]
fn live_entries_are_not_taken() {
    for kind in ["mac_switch", "ipv4_switch"] {
        let f = vec![
            (0, frame(1, 2)),
            (0, frame(2, 1)),
            (SEC / 2, frame(3, 1)),
            (SEC / 2, frame(1, 3)),
        ];
        let s = run(kind, "capacity = 2\ntimeout = 1", &f);
        assert_eq!(stat(&s, "table_full"), 1, "{kind}");
        assert_eq!(stat(&s, "entries"), 2, "{kind}");
    }
}

/// Churn: 20,000 stations, one new every 50 ms, each sending two frames to the station
/// before it; about 20 are live at any time, capacity 64. Every station is learned and
/// every second frame finds its destination. Before the fix all but the first 64
/// stations hit `table_full` and their traffic flooded.
#[test]
fn churn_never_fills_the_table_with_the_dead() {
    for kind in ["mac_switch", "ipv4_switch"] {
        let mut f = Vec::new();
        for n in 1..=20_000u32 {
            let t = u64::from(n) * SEC / 20;
            f.push((t, frame(n, n - 1)));
            f.push((t + 1, frame(n - 1, n)));
        }
        let s = run(kind, "capacity = 64\ntimeout = 1", &f);
        assert_eq!(stat(&s, "table_full"), 0, "{kind}");
        assert!(stat(&s, "entries") <= 64, "{kind}");
        // Only station 0 (never a source before station 1 replies) is flooded to.
        assert_eq!(stat(&s, "floods"), 1, "{kind}");
    }
}
