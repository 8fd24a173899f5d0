//! A program that only reads the packet leaves a borrowed packet (a view of a mapped
//! trace, `Packet::set_view`) uncopied; a program that `set`s a field copies it and writes
//! the copy, never the borrowed bytes. Same verdicts and bytes either way.

use std::collections::HashMap;

use catena::nfs::pipeline::Pipeline;
use catena::nfs::{Context, Nf};
use catena::packet::{Batch, LinkKind, Packet, Verdict};

fn compile(src: &str) -> Pipeline {
    let c = catena::nfs::pipeline::compile("t.stv", src, &HashMap::new())
        .unwrap_or_else(|e| panic!("{e}"));
    Pipeline::new(c)
}

/// Ethernet + IPv4 (TTL 64) + TCP ports `sport` -> 80, 60 bytes, leaked as a view needs.
fn frame(sport: u16, proto: u8) -> &'static [u8] {
    let mut b = vec![0u8; 60];
    b[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    b[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    b[12..14].copy_from_slice(&[8, 0]);
    b[14] = 0x45;
    b[16..18].copy_from_slice(&46u16.to_be_bytes());
    b[22] = 64;
    b[23] = proto;
    b[26..34].copy_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
    b[34..36].copy_from_slice(&sport.to_be_bytes());
    b[36..38].copy_from_slice(&80u16.to_be_bytes());
    Box::leak(b.into_boxed_slice())
}

fn views(frames: &[&'static [u8]]) -> Batch {
    let mut batch = Batch::new();
    for (i, f) in frames.iter().enumerate() {
        let mut p = Packet::from_bytes(&[0u8; 60]);
        assert!(p.set_view(f));
        let m = p.meta_mut();
        m.link = LinkKind::Ethernet;
        m.in_port = i as u16 % 2;
        batch.push(p);
    }
    batch
}

#[test]
fn a_read_only_program_leaves_views_uncopied() {
    let src = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/pipeline/firewall.stv"
    ))
    .expect("firewall example");
    let mut nf = compile(&src);
    // TCP to port 80 passes (flooded: nothing learned yet), ICMP is dropped.
    let frames = [frame(1234, 6), frame(1234, 1), frame(5555, 6)];
    let mut batch = views(&frames);
    nf.process(&mut batch, &Context { ports: 2 });
    let got: Vec<_> = batch
        .iter()
        .map(|p| (p.is_view(), matches!(p.meta().verdict, Verdict::Drop(_))))
        .collect();
    assert_eq!(got, [(true, false), (true, true), (true, false)]);
    for (p, f) in batch.iter().zip(frames) {
        assert_eq!(p.data(), f);
    }
}

#[test]
fn a_program_that_sets_a_field_copies_and_leaves_the_view_alone() {
    let src = "drops bad;
layout ethernet { dst: 48; src: 48; type: 16; }
layout ipv4 { version: 4; ihl: 4; tos: 8; len: 16; id: 16; flags: 3; frag: 13;
  ttl: 8; proto: 8; csum: 16; src: 32; dst: 32; size = ihl * 4; }
decoder eth: ethernet { extract type; if eth.type == 0x0800 { next ip; } pass; }
decoder ip: ipv4 { extract ttl; short { drop bad; } set ip.ttl = ip.ttl - 1; pass; }
start { next eth; }
";
    let mut nf = compile(src);
    let frames = [frame(1234, 6)];
    let mut batch = views(&frames);
    nf.process(&mut batch, &Context { ports: 2 });
    let p = batch.iter().next().expect("one packet");
    assert!(!p.is_view(), "a written packet owns its bytes");
    assert_eq!(p.data()[22], 63, "the copy has the new TTL");
    assert_eq!(frames[0][22], 64, "the borrowed bytes are unchanged");
    assert_eq!(p.data()[..22], frames[0][..22]);
    assert_eq!(p.data()[23..], frames[0][23..]);
}
