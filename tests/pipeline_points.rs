//! Points of the pipeline language the app equivalence does not reach: the VLAN switch's
//! behaviour on literal frames, the derived profile as `catena check` and the planner see
//! it (against the native NFs'), `hard_timeout`, `remove`, and per-entry counters.

use std::path::{Path, PathBuf};
use std::process::Command;

use catena::nfs::registry::build_in;
use catena::nfs::{Context, Nf, StateScope};
use catena::packet::{Batch, Packet, Verdict, FLOOD};

fn examples() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/examples"))
}

fn build(kind: &str, toml_text: &str, dir: &Path) -> Box<dyn Nf> {
    let table: toml::Table = toml::from_str(toml_text).unwrap();
    build_in("t", kind, &table, dir).unwrap_or_else(|e| panic!("{e}"))
}

/// A program written to a fresh folder, built as a `pipeline` NF.
fn program(src: &str) -> (tempfile::TempDir, Box<dyn Nf>) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("p.stv"), src).unwrap();
    let nf = build("pipeline", "program = \"p.stv\"", dir.path());
    (dir, nf)
}

const MAC_A: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
const MAC_B: [u8; 6] = [2, 0, 0, 0, 0, 0xb];
const MAC_C: [u8; 6] = [2, 0, 0, 0, 0, 0xc];
const STP: [u8; 6] = [0x01, 0x80, 0xc2, 0, 0, 0];

/// An Ethernet frame, 60 bytes: dst, src, then `tags` (TPID, VID) before `ty`.
fn frame(dst: [u8; 6], src: [u8; 6], tags: &[(u16, u16)], ty: u16) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&dst);
    b.extend_from_slice(&src);
    for &(tpid, vid) in tags {
        b.extend_from_slice(&tpid.to_be_bytes());
        b.extend_from_slice(&vid.to_be_bytes());
    }
    b.extend_from_slice(&ty.to_be_bytes());
    b.resize(60, 0);
    b
}

/// One packet through `nf` from `port` at `secs` of capture time: (egress, verdict),
/// and the bytes are left as they came.
fn step(nf: &mut dyn Nf, bytes: &[u8], port: u16, secs: u64) -> (u16, Verdict) {
    let mut p = Packet::from_bytes(bytes);
    p.meta_mut().in_port = port;
    p.meta_mut().now_ns = secs * 1_000_000_000;
    p.meta_mut().ts_ns = secs * 1_000_000_000;
    let mut b = Batch::new();
    b.push(p);
    nf.process(&mut b, &Context { ports: 5 });
    let p = b.iter().next().unwrap();
    assert_eq!(p.data(), bytes, "the program changed the bytes");
    (p.meta().egress, p.meta().verdict)
}

fn stat(nf: &dyn Nf, name: &str) -> u64 {
    let s = nf.stats();
    s.iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| *v)
        .unwrap_or_else(|| panic!("no counter `{name}` in {s:?}"))
}

const OUT: Verdict = Verdict::Out(0);

#[test]
fn vlan_switch_learns_per_vlan_and_drops_link_local_frames() {
    let dir = examples().join("pipeline");
    let mut sw = build("pipeline", "program = \"vlan_switch.stv\"", &dir);
    let sw = sw.as_mut();
    let (q, ad) = (0x8100, 0x88a8);
    // Untagged is VLAN 0: A learned on port 1, B unknown.
    assert_eq!(
        step(sw, &frame(MAC_B, MAC_A, &[], 0x0800), 1, 0),
        (FLOOD, OUT)
    );
    // B on VLAN 10 looks for A on VLAN 10: not learned there.
    assert_eq!(
        step(sw, &frame(MAC_A, MAC_B, &[(q, 10)], 0x0800), 2, 1),
        (FLOOD, OUT)
    );
    // B untagged finds A on VLAN 0.
    assert_eq!(step(sw, &frame(MAC_A, MAC_B, &[], 0x0800), 2, 2).0, 1);
    // A on VLAN 10 from port 3 finds B's VLAN 10 entry (port 2).
    assert_eq!(
        step(sw, &frame(MAC_B, MAC_A, &[(q, 10)], 0x0800), 3, 3).0,
        2
    );
    // Now A is port 3 on VLAN 10 and still port 1 on VLAN 0.
    assert_eq!(
        step(sw, &frame(MAC_A, MAC_B, &[(q, 10)], 0x0800), 2, 4).0,
        3
    );
    assert_eq!(step(sw, &frame(MAC_A, MAC_B, &[], 0x0800), 2, 5).0, 1);
    // VLAN 20 knows nobody; an 802.1ad tag with VID 10 is VLAN 10; PCP bits are not VID.
    assert_eq!(
        step(sw, &frame(MAC_A, MAC_C, &[(q, 20)], 0x0800), 4, 6).0,
        FLOOD
    );
    assert_eq!(
        step(sw, &frame(MAC_A, MAC_C, &[(ad, 10)], 0x0800), 4, 7).0,
        3
    );
    assert_eq!(
        step(sw, &frame(MAC_C, MAC_A, &[(q, 0xe00a)], 0x0800), 3, 8).0,
        4
    );
    // Link-local frames are dropped (after their source is learned, as written).
    let link_local = Verdict::Drop(1);
    assert_eq!(
        step(sw, &frame(STP, MAC_C, &[], 0x0026), 4, 9).1,
        link_local
    );
    assert_eq!(
        step(
            sw,
            &frame([1, 0x80, 0xc2, 0, 0, 0x0e], MAC_C, &[], 0x88cc),
            4,
            9
        )
        .1,
        link_local
    );
    assert_eq!(
        step(
            sw,
            &frame([1, 0x80, 0xc2, 0, 0, 0x10], MAC_C, &[], 0x0800),
            4,
            9
        )
        .0,
        FLOOD
    );
    // Cut short: no Ethernet header, or a tag cut in half.
    assert_eq!(step(sw, &[0u8; 13], 1, 10).1, Verdict::Drop(0));
    let cut = frame(MAC_A, MAC_B, &[(q, 10)], 0x0800);
    assert_eq!(step(sw, &cut[..15], 1, 10).1, Verdict::Drop(0));
    assert_eq!(stat(sw, "reserved[0x180c2000000/0xfffffffffff0].hits"), 2);
    assert_eq!(stat(sw, "floods"), 4);
    // (0,A) (10,B) (10,A) (0,B) (20,C) (10,C) (0,C): the tag VIDs 10 and 10 are one key.
    assert_eq!(stat(sw, "fdb.entries"), 7);
}

/// The node line `catena check` prints for the chain's one NF, with the kind column cut.
fn check_line(chain: &Path) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_catena"))
        .arg("check")
        .arg(chain)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let at = lines.iter().position(|l| l.trim() == "nodes:").unwrap();
    let node: Vec<&str> = lines[at + 2].split_whitespace().collect();
    let profile = node[2..].join(" ");
    let fast = lines
        .iter()
        .find(|l| l.trim_start().starts_with(node[0]) && l.contains("consolidat"))
        .map_or(String::new(), |l| {
            l.split_whitespace().skip(1).collect::<Vec<_>>().join(" ")
        });
    (profile, fast)
}

#[test]
fn derived_profiles_are_the_native_ones_as_check_and_the_planner_see_them() {
    for app in ["wire", "mac_switch", "ipv4_switch", "firewall"] {
        let native = build(app, "", &examples());
        let prog = build(
            "pipeline",
            &format!("program = \"{app}.stv\""),
            &examples().join("pipeline"),
        );
        let (n, p) = (native.profile(), prog.profile());
        assert_eq!(n.reads, p.reads, "{app}: reads");
        assert_eq!(n.writes, p.writes, "{app}: writes");
        assert_eq!(n.may_drop, p.may_drop, "{app}: may_drop");
        assert_eq!(n.changes_length, p.changes_length, "{app}: changes_length");
        assert_eq!(n.per_flow_state, p.per_flow_state, "{app}: per-flow state");
        assert_eq!(n.drop_reasons, p.drop_reasons, "{app}: drop reasons");
        // Sharding: an NF learning across flows is global for both, a wire for neither.
        let scope = |s: StateScope| match s {
            StateScope::None => "none",
            StateScope::PerFlow => "per-flow",
            StateScope::Global(_) => "global",
        };
        assert_eq!(
            scope(native.state_scope()),
            scope(prog.state_scope()),
            "{app}: state scope"
        );
        let (np, nf) = check_line(&examples().join(format!("{app}.toml")));
        let (pp, pf) = check_line(&examples().join(format!("pipeline/{app}.toml")));
        assert_eq!(np, pp, "{app}: `catena check` profile");
        assert_eq!(nf, pf, "{app}: `catena check` FastPath line");
    }
    let (vp, vf) = check_line(&examples().join("pipeline/vlan_switch.toml"));
    assert_eq!(
        vp,
        "reads eth.src,eth.dst,eth.type,vlan,in_port; writes egress; \
         drops (not-ethernet, link-local); per-flow state (sees every packet)"
    );
    assert_eq!(vf, "always run: refuses consolidation");
}

const SWITCH_HEAD: &str = "
drops not_ethernet, leave;
layout ethernet { dst: 48; src: 48; type: 16; }
decoder eth: ethernet {
  extract dst, src, type;
  short { drop not_ethernet; }
  if eth.type == 0x88b5 { remove mac(eth.src); drop leave; }
  learn mac(eth.src) -> output in_port;
  goto mac;
}
start { match link { ethernet => next eth; _ => drop not_ethernet; } }
";

fn switch(timeouts: &str) -> (tempfile::TempDir, Box<dyn Nf>) {
    program(&format!(
        "{SWITCH_HEAD}table mac {{ key eth.dst exact; {timeouts} miss {{ flood; }} }}\n"
    ))
}

/// A keeps talking every second from port 1; B asks for A at 10 and 11 s.
fn talk_then_ask(nf: &mut dyn Nf) -> [u16; 2] {
    for s in 0..=9 {
        step(nf, &frame(MAC_B, MAC_A, &[], 0x0800), 1, s);
    }
    [10, 11].map(|s| step(nf, &frame(MAC_A, MAC_B, &[], 0x0800), 2, s).0)
}

#[test]
fn hard_timeout_expires_an_entry_however_often_it_is_relearned() {
    // Idle 10 s: A, relearned every second, is still known at 11 s.
    let (_d, mut idle) = switch("idle_timeout 10;");
    assert_eq!(talk_then_ask(idle.as_mut()), [1, 1]);
    // Hard 10 s: A was first learned at 0 s; at 10 s it holds, at 11 s it is gone.
    let (_d, mut hard) = switch("hard_timeout 10;");
    let hard = hard.as_mut();
    assert_eq!(talk_then_ask(hard), [1, FLOOD]);
    assert_eq!(
        stat(hard, "mac.misses"),
        10 + 1,
        "A's lookups at 0-9 s miss B, 11 s misses A"
    );
    // Learned afresh at 12 s, it lasts 10 s from then.
    step(hard, &frame(MAC_B, MAC_A, &[], 0x0800), 3, 12);
    assert_eq!(step(hard, &frame(MAC_A, MAC_B, &[], 0x0800), 2, 22).0, 3);
    assert_eq!(
        step(hard, &frame(MAC_A, MAC_C, &[], 0x0800), 4, 23).0,
        FLOOD
    );
}

#[test]
fn remove_forgets_a_learned_entry() {
    let (_d, mut nf) = switch("");
    let nf = nf.as_mut();
    assert_eq!(step(nf, &frame(MAC_B, MAC_A, &[], 0x0800), 1, 0).0, FLOOD);
    assert_eq!(step(nf, &frame(MAC_A, MAC_B, &[], 0x0800), 2, 0).0, 1);
    assert_eq!(stat(nf, "mac.entries"), 2);
    // A leaves: its entry goes, the frame is dropped (reason 1, `leave`).
    assert_eq!(
        step(nf, &frame(MAC_B, MAC_A, &[], 0x88b5), 1, 1).1,
        Verdict::Drop(1)
    );
    assert_eq!(stat(nf, "mac.entries"), 1);
    assert_eq!(step(nf, &frame(MAC_A, MAC_B, &[], 0x0800), 2, 2).0, FLOOD);
    // Removing what is not there changes nothing; B is still known.
    assert_eq!(
        step(nf, &frame(MAC_B, MAC_C, &[], 0x88b5), 3, 3).1,
        Verdict::Drop(1)
    );
    assert_eq!(step(nf, &frame(MAC_B, MAC_C, &[], 0x0800), 3, 3).0, 2);
}

#[test]
fn every_fixed_entry_counts_its_own_hits() {
    let (_d, mut nf) = program(
        "
drops v6, link_local;
layout ethernet { dst: 48; src: 48; type: 16; }
table reserved {
  key eth.dst ternary;
  entry 01:80:c2:00:00:00 mask ff:ff:ff:ff:ff:f0 => drop link_local;
  entry 01:00:5e:00:00:00 mask ff:ff:ff:80:00:00 => output 3;
  miss { goto by_type; }
}
table by_type {
  key eth.type exact;
  entry 0x0800 => output 1;
  entry 0x86dd => drop v6;
  miss { count other; pass; }
}
decoder eth: ethernet { extract dst, type; goto reserved; }
start { match link { ethernet => next eth; } }
",
    );
    let nf = nf.as_mut();
    let mcast = [1, 0, 0x5e, 0x7f, 0, 1];
    let sent: &[([u8; 6], u16, usize)] = &[
        (MAC_A, 0x0800, 3),
        (MAC_A, 0x86dd, 2),
        (MAC_A, 0x0806, 1),
        (STP, 0x0026, 2),
        (mcast, 0x0800, 1),
        ([1, 0, 0x5e, 0x80, 0, 1], 0x0800, 1), // outside the mask: by type
    ];
    for &(dst, ty, n) in sent {
        for _ in 0..n {
            step(nf, &frame(dst, MAC_B, &[], ty), 0, 0);
        }
    }
    // An entry added at run time counts too.
    nf.control("add by_type 0x0806 -> output 2").unwrap();
    assert_eq!(step(nf, &frame(MAC_A, MAC_B, &[], 0x0806), 0, 0).0, 2);
    for (name, want) in [
        ("reserved[0x180c2000000/0xfffffffffff0].hits", 2),
        ("reserved[0x1005e000000/0xffffff800000].hits", 1),
        ("reserved.hits", 3),
        ("reserved.misses", 8),
        ("by_type[0x800].hits", 4),
        ("by_type[0x806].hits", 1),
        ("by_type[0x86dd].hits", 2),
        ("by_type.hits", 7),
        ("by_type.misses", 1),
        ("other", 1),
    ] {
        assert_eq!(stat(nf, name), want, "{name}");
    }
}

/// `catena pipeline` says the state the NF's scope says: none for a wire (it learns
/// nothing), global for a switch (it learns from every flow).
#[test]
fn the_compiler_report_states_the_derived_state_scope() {
    for (app, want) in [
        ("wire", "state: none"),
        (
            "mac_switch",
            "state: global (learned entries, from every flow: not sharded)",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_catena"))
            .arg("pipeline")
            .arg(examples().join(format!("pipeline/{app}.stv")))
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let line = text.lines().find(|l| l.contains("state: ")).unwrap();
        assert!(line.ends_with(want), "{app}: {line}");
    }
}

/// A program's tables count what they allocate at their bounds: the MAC program's
/// learned table is the native's table (same slots), its fixed entries a sixteenth.
#[test]
fn a_learning_program_takes_about_the_memory_of_its_native() {
    for app in ["mac_switch", "ipv4_switch", "firewall"] {
        let native = build(app, "", &examples()).memory();
        let prog = build(
            "pipeline",
            &format!("program = \"{app}.stv\""),
            &examples().join("pipeline"),
        )
        .memory();
        assert!(
            prog >= native * 9 / 10 && prog <= native * 5 / 4,
            "{app}: program {prog} bytes, native {native}"
        );
    }
}

/// A table that learns holds capacity/16 fixed entries (at least 16) beside its learned
/// ones: the 17th of a 64-entry table is refused with the reason, learning goes on.
#[test]
fn a_learning_table_has_room_for_a_sixteenth_of_fixed_entries() {
    let (_d, mut nf) = switch("capacity 64;");
    let nf = nf.as_mut();
    for i in 0..16 {
        nf.control(&format!("add mac 02:00:00:00:01:{i:02x} -> output 3"))
            .unwrap();
    }
    let e = nf
        .control("add mac 02:00:00:00:01:ff -> output 3")
        .unwrap_err();
    assert!(
        e.contains("is full (16 fixed entries: a table that learns holds capacity/16"),
        "{e}"
    );
    // Replacing an entry is not adding one.
    nf.control("add mac 02:00:00:00:01:00 -> output 4").unwrap();
    assert_eq!(
        step(nf, &frame([2, 0, 0, 0, 1, 0], MAC_A, &[], 0x0800), 1, 0).0,
        4
    );
    assert_eq!(step(nf, &frame(MAC_A, MAC_B, &[], 0x0800), 2, 0).0, 1);
    assert_eq!(stat(nf, "mac.entries"), 16 + 2);
}

/// A fixed header entered by `next` whose body begins with a drop test runs both as one
/// instruction (`EnterTest`): the test as `if … { drop }` and as a branch to a `drop`,
/// with the `short` block for headers cut short, must decide as written.
#[test]
fn a_fixed_header_beginning_with_a_drop_test_decides_as_written() {
    let (_d, mut nf) = program(
        "
drops malformed, short_ports, odd, denied;
layout ethernet { dst: 48; src: 48; type: 16; }
layout ports { src: 16; dst: 16; }
decoder eth: ethernet {
  extract type;
  short { drop malformed; }
  if eth.type == 0x0801 { next q; }
  next p;
}
decoder p: ports {
  extract src, dst;
  short { drop short_ports; }
  if p.src == 7 { drop odd; }
  if p.dst == 80 || p.dst == 443 { output 2; }
  drop denied;
}
decoder q: ports {
  extract dst;
  short { drop short_ports; }
  if q.dst == 80 || q.dst == 443 { output 3; }
  drop denied;
}
start { match link { ethernet => next eth; } }
",
    );
    let nf = nf.as_mut();
    let reason = |name: &str| {
        let r = nf.profile().drop_reasons.iter().position(|n| *n == name);
        Verdict::Drop(r.unwrap_or_else(|| panic!("no reason {name}")) as u8)
    };
    let (malformed, short, odd, denied) = (
        reason("malformed"),
        reason("short-ports"),
        reason("odd"),
        reason("denied"),
    );
    let pkt = |ty: u16, src: u16, dst: u16| {
        let mut b = frame(MAC_A, MAC_B, &[], ty);
        b[14..16].copy_from_slice(&src.to_be_bytes());
        b[16..18].copy_from_slice(&dst.to_be_bytes());
        b
    };
    let cases: &[(u16, u16, u16, Verdict, u16)] = &[
        (0x0800, 1, 80, OUT, 2),
        (0x0800, 443, 1, denied, 0),
        (0x0800, 1, 443, OUT, 2),
        (0x0800, 7, 80, odd, 0),
        (0x0800, 1, 22, denied, 0),
        (0x0801, 7, 443, OUT, 3),
        (0x0801, 1, 22, denied, 0),
    ];
    for &(ty, src, dst, verdict, egress) in cases {
        let (e, v) = step(nf, &pkt(ty, src, dst), 0, 0);
        assert_eq!(v, verdict, "type {ty:#x} ports {src} -> {dst}");
        if v == OUT {
            assert_eq!(e, egress, "type {ty:#x} ports {src} -> {dst}");
        }
        // Cut short: the ports header (bytes 14..18) or the Ethernet header itself.
        for cut in 0..18 {
            let want = if cut < 14 { malformed } else { short };
            assert_eq!(
                step(nf, &pkt(ty, src, dst)[..cut], 0, 0).1,
                want,
                "cut at {cut}"
            );
        }
    }
}
