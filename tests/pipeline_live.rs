//! Table entries added and removed while traffic runs (`ctl NF add TABLE KEY -> ACTION`,
//! `del TABLE KEY`): each segment of the replay is filtered exactly as tcpdump filters it
//! under the entries in force, so changes land between batches, whole.

mod common;

use std::process::Command;

use catena::io::Trace;
use catena::runtime::{control::Scheduled, Chain, ChainConfig, NoProgress, RunOptions, Runner};
use common::*;

/// Untagged IPv4 is checked against a prefix table of blocked sources; the rest passes.
const ACL: &str = "drops denied;
layout ethernet { dst: 48; src: 48; type: 16; }
layout ipv4 { version: 4; ihl: 4; tos: 8; len: 16; id: 16; flags: 3; frag: 13;
  ttl: 8; proto: 8; csum: 16; src: 32; dst: 32; size = ihl * 4; }
table block {
  key ip.src prefix;
  capacity 16;
  miss { pass; }
}
decoder eth: ethernet {
  extract type;
  if eth.type == 0x0800 { next ip; }
  pass;
}
decoder ip: ipv4 {
  extract version, src;
  if ip.version == 4 { goto block; }
  pass;
}
start { match link { ethernet => next eth; _ => pass; } }
";

fn editcap(src: &std::path::Path, out: &std::path::Path, range: &str) {
    let o = Command::new("editcap")
        .arg("-r")
        .arg(src)
        .arg(out)
        .arg(range)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn entries_added_and_removed_mid_replay_match_tcpdump_per_segment() {
    require("tcpdump");
    require("editcap");
    let d = tempdir();
    let prog = d.path().join("acl.stv");
    std::fs::write(&prog, ACL).unwrap();
    let src = dataset("bench/ndpi-ether-merged.pcap");
    let trace = Trace::open(&src).unwrap();
    let n = trace.len();
    let (a, b) = (30_001usize, 61_117usize);
    let chain = format!(
        "[[nf]]\nname = \"acl\"\nkind = \"pipeline\"\nprogram = \"{}\"\n",
        prog.display()
    );
    let cfg = ChainConfig::parse(&chain, "t.toml").unwrap();
    let mut r = Runner::new(Chain::from_config(&cfg).unwrap(), trace.max_packet_len());
    let ours = d.path().join("ours.pcap");
    let sched = |s: String| s.parse::<Scheduled>().unwrap();
    let opts = RunOptions {
        outputs: vec![("out".into(), ours.clone())],
        schedule: vec![
            sched(format!("{a} acl add block 192.168.0.0/16 -> drop denied")),
            sched(format!("{b} acl del block 192.168.0.0/16")),
            sched(format!("{b} acl add block 10.0.0.0/8 -> drop denied")),
        ],
        ..Default::default()
    };
    let s = r.run(&trace, &opts, &mut NoProgress).unwrap();
    assert_eq!(s.packets_in, s.packets_out + s.packets_dropped);
    let mut expected = Vec::new();
    for (k, (range, filter)) in [
        (format!("1-{a}"), "greater 0"),
        (
            format!("{}-{b}", a + 1),
            "not (ip and src net 192.168.0.0/16)",
        ),
        (format!("{}-{n}", b + 1), "not (ip and src net 10.0.0.0/8)"),
    ]
    .into_iter()
    .enumerate()
    {
        let part = d.path().join(format!("part{k}.pcap"));
        let pass = d.path().join(format!("pass{k}.pcap"));
        editcap(&src, &part, &range);
        let o = Command::new("tcpdump")
            .arg("-r")
            .arg(&part)
            .arg("-w")
            .arg(&pass)
            .arg(filter)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        expected.extend(packets(&pass));
    }
    let got = packets(&ours);
    assert!(
        got.len() < n && s.packets_dropped > 1000,
        "the entries dropped nothing"
    );
    assert_eq!(got.len(), expected.len());
    assert!(
        got == expected,
        "forwarded packets differ from tcpdump's per segment"
    );
}

#[test]
fn control_commands_answer_and_refuse_clearly() {
    let d = tempdir();
    let prog = d.path().join("acl.stv");
    std::fs::write(&prog, ACL).unwrap();
    let table: toml::Table = toml::from_str(&format!("program = \"{}\"", prog.display())).unwrap();
    let mut nf = catena::nfs::registry::build("acl", "pipeline", &table).unwrap();
    let ok = |nf: &mut Box<dyn catena::nfs::Nf>, c: &str| {
        nf.control(c).unwrap_or_else(|e| panic!("{c}: {e}"))
    };
    assert_eq!(
        ok(&mut nf, "add block 10.0.0.0/8 -> drop denied"),
        "table `block`: 1 entries"
    );
    assert_eq!(
        ok(&mut nf, "add block 10.1.0.0/16 -> pass"),
        "table `block`: 2 entries"
    );
    assert_eq!(
        ok(&mut nf, "del block 10.0.0.0/8"),
        "table `block`: removed 1 entry"
    );
    for (cmd, says) in [
        ("add nope 1 -> pass", "unknown table `nope` (tables: block)"),
        (
            "add block 10.0.0.0/33 -> pass",
            "prefix longer than the 32-bit field",
        ),
        (
            "add block 10.0.0.0/8 -> drop why",
            "unknown drop reason `why`",
        ),
        (
            "add block 10.0.0.0/8 -> goto block",
            "`goto` entries are given in the program",
        ),
        ("add block 10.0.0.0/8 ->", "column 14: expected an action"),
        ("del block 10.9.0.0/16", "has no entry"),
        ("add block 1, 2 -> pass", "the key has 1 field(s), 2 given"),
        ("frobnicate", "unknown command"),
    ] {
        let e = nf.control(cmd).unwrap_err();
        assert!(e.contains(says), "`{cmd}`: `{e}` does not say `{says}`");
    }
    for i in 0..15 {
        let r = nf.control(&format!("add block 172.16.{i}.0/24 -> pass"));
        assert_eq!(r.is_ok(), i < 15, "{r:?}");
    }
    assert!(nf
        .control("add block 172.17.0.0/24 -> pass")
        .unwrap_err()
        .contains("is full (16 entries)"));
}

/// `set` keeps the header checksum correct: a TTL decrement gives the same bytes as the
/// native IPv4 view's RFC 1624 update, on headers with and without options.
#[test]
fn set_keeps_the_ipv4_checksum_as_the_native_update_does() {
    use catena::nfs::pipeline::compile;
    use catena::nfs::{Context, Nf};
    use catena::packet::wire::Ipv4;
    use catena::packet::{checksum, Batch, Packet};
    let src = "drops bad;
layout ethernet { dst: 48; src: 48; type: 16; }
layout ipv4 { version: 4; ihl: 4; tos: 8; len: 16; id: 16; flags: 3; frag: 13;
  ttl: 8; proto: 8; csum: 16; src: 32; dst: 32; size = ihl * 4; checksum csum; }
decoder eth: ethernet { extract type; if eth.type == 0x0800 { next ip; } pass; }
decoder ip: ipv4 {
  extract ttl;
  short { drop bad; }
  if ip.ttl <= 1 { drop bad; }
  set ip.ttl = ip.ttl - 1;
  pass;
}
start { next eth; }
";
    let mut nf = catena::nfs::Pipeline::new(compile("ttl.stv", src, &Default::default()).unwrap());
    for (ihl, ttl) in [(5u8, 64u8), (6, 2), (15, 255), (5, 1)] {
        let mut b = vec![0u8; 14 + ihl as usize * 4 + 8];
        b[12..14].copy_from_slice(&[8, 0]);
        b[14] = 0x40 | ihl;
        b[14 + 8] = ttl;
        b[14 + 9] = 17;
        b[14 + 12..14 + 20].copy_from_slice(&[192, 168, 7, 1, 10, 9, 8, 7]);
        let h = 14 + ihl as usize * 4;
        let sum = checksum::checksum(&b[14..h]);
        b[24..26].copy_from_slice(&sum.to_be_bytes());
        let mut want = b.clone();
        Ipv4::new_unchecked(&mut want[14..]).set_ttl_update(ttl.wrapping_sub(1));
        let mut batch = Batch::new();
        batch.push(Packet::from_bytes(&b));
        nf.process(&mut batch, &Context { ports: 2 });
        let p = batch.iter().next().unwrap();
        if ttl <= 1 {
            assert!(matches!(p.meta().verdict, catena::packet::Verdict::Drop(0)));
            continue;
        }
        assert_eq!(p.data(), &want[..], "ihl {ihl} ttl {ttl}");
        assert_eq!(
            checksum::checksum(&p.data()[14..h]),
            0,
            "header checksum invalid"
        );
    }
}
