//! Packets whose headers lie (lengths, offsets, quotes) and the state an attacker's traffic
//! builds up: each case crafted byte by byte, run through the NF that reads it, and every
//! output byte or checksum that matters checked against a value computed here from scratch.

mod common;

use catena::nfs::{Context, Nat, NatConfig, Nf};
use catena::packet::{Batch, Packet, Verdict};
use etherparse::PacketBuilder;

const S: u64 = 1_000_000_000;
const IN: [u8; 4] = [10, 0, 0, 5];
const OUT: [u8; 4] = [93, 184, 216, 34];
const PUB: [u8; 4] = [198, 51, 100, 1];
const MALFORMED: u8 = 5;

/// RFC 1071 sum of `b`, as it would be checked: 0 when the checksum inside is right.
fn fold(b: &[u8]) -> u16 {
    let mut s: u32 = b
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

fn nat() -> Nat {
    Nat::new(&NatConfig {
        public: vec![PUB.into()],
        ports: (1024, 65535),
        ..NatConfig::default()
    })
    .unwrap()
}

fn step(n: &mut Nat, bytes: &[u8], ts: u64) -> Result<Vec<u8>, u8> {
    let mut p = Packet::from_bytes(bytes);
    p.meta_mut().ts_ns = ts;
    p.meta_mut().now_ns = ts;
    let mut b = Batch::new();
    b.push(p);
    n.process(&mut b, &Context { ports: 2 });
    let p = b.iter().next().unwrap();
    match p.meta().verdict {
        Verdict::Out(_) => Ok(p.data().to_vec()),
        Verdict::Drop(r) => Err(r),
    }
}

/// An ICMP port unreachable from OUT to PUB quoting `quoted`, with its IP total length
/// set to `total` (the bytes past it stay in the frame, as Ethernet padding does) and
/// both checksums right over the datagram that length says.
fn unreachable(quoted: &[u8], total: usize) -> Vec<u8> {
    let mut v = Vec::new();
    PacketBuilder::ethernet2([1; 6], [2; 6])
        .ipv4(OUT, PUB, 64)
        .icmpv4(etherparse::Icmpv4Type::DestinationUnreachable(
            etherparse::icmpv4::DestUnreachableHeader::Port,
        ))
        .write(&mut v, quoted)
        .unwrap();
    v[16..18].copy_from_slice(&(total as u16).to_be_bytes());
    v[24..26].copy_from_slice(&[0, 0]);
    let c = fold(&v[14..34]);
    v[24..26].copy_from_slice(&c.to_be_bytes());
    v[36..38].copy_from_slice(&[0, 0]);
    let c = fold(&v[34..14 + total]);
    v[36..38].copy_from_slice(&c.to_be_bytes());
    v
}

/// An ICMP error whose IP total length ends before the quote (the quote is padding past
/// the datagram) must not be translated: rewriting the padding and folding that change
/// into the ICMP checksum, which covers only the datagram, wrote a wrong checksum.
#[test]
fn nat_never_translates_an_icmp_quote_past_the_ip_total_length() {
    let mut n = nat();
    let mut v = Vec::new();
    PacketBuilder::ethernet2([1; 6], [2; 6])
        .ipv4(IN, OUT, 64)
        .udp(5555, 9999)
        .write(&mut v, b"hello udp!")
        .unwrap();
    let o = step(&mut n, &v, 0).unwrap();
    let quoted = &o[14..];
    // The whole error, then one whose length stops inside the ICMP header, one that
    // stops after it, and one that stops inside the quoted ports.
    let full = 20 + 8 + quoted.len();
    let back = step(&mut n, &unreachable(quoted, full), S).expect("translated");
    assert_eq!(fold(&back[14..34]), 0, "ip checksum");
    assert_eq!(fold(&back[34..14 + full]), 0, "icmp checksum");
    assert_eq!(&back[14 + 28..], &v[14..], "the quote is the datagram as sent");
    for total in [27, 28, 20 + 8 + 20, 20 + 8 + 20 + 2] {
        let e = unreachable(quoted, total);
        match step(&mut n, &e, 2 * S) {
            Err(r) => assert_eq!(r, MALFORMED, "total length {total}"),
            Ok(b) => panic!(
                "total length {total}: forwarded, ip sum {:#x}, icmp sum {:#x} (0 = right)",
                fold(&b[14..34]),
                fold(&b[34..14 + total])
            ),
        }
    }
}
