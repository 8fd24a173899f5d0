//! Detector tests over literal payloads, and random bytes that must never panic.

use std::net::IpAddr;

use super::*;

const C: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));
const S: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2));

fn flow(l4: L4, sport: u16) -> DpiFlow {
    DpiFlow::new(l4, (C, 40000), (S, sport))
}

/// Feeds (from_client, bytes) in order and returns the final label.
fn run(l4: L4, sport: u16, chunks: &[(bool, &[u8])]) -> Option<AppProto> {
    let mut f = flow(l4, sport);
    for (c, d) in chunks {
        if let Progress::Detected(p) = f.feed(*c, d) {
            return Some(p);
        }
    }
    f.label()
}

#[test]
fn http_request_and_host() {
    let mut f = flow(L4::Tcp, 8000);
    let req = b"GET /index.html HTTP/1.1\r\nUser-Agent: x\r\nHost: example.org\r\n\r\n";
    assert_eq!(f.feed(true, req), Progress::Detected(AppProto::Http));
    assert_eq!(f.host(), Some("example.org"));
    assert_eq!(
        run(
            L4::Tcp,
            554,
            &[(true, b"OPTIONS rtsp://h/a RTSP/1.0\r\nCSeq: 1\r\n\r\n")]
        ),
        Some(AppProto::Rtsp)
    );
}

/// A ClientHello for "a.example" cut down to what the parser walks.
fn client_hello() -> Vec<u8> {
    let name = b"a.example";
    let mut sni = vec![0, 0];
    let list_len = (name.len() + 3) as u16;
    sni.extend_from_slice(&(list_len + 2).to_be_bytes());
    sni.extend_from_slice(&list_len.to_be_bytes());
    sni.push(0);
    sni.extend_from_slice(&(name.len() as u16).to_be_bytes());
    sni.extend_from_slice(name);
    let mut hello = vec![3, 3];
    hello.extend_from_slice(&[0; 32]);
    hello.push(0); // session id
    hello.extend_from_slice(&[0, 2, 0x13, 0x01]);
    hello.extend_from_slice(&[1, 0]);
    hello.extend_from_slice(&(sni.len() as u16).to_be_bytes());
    hello.extend_from_slice(&sni);
    let mut hs = vec![1, 0];
    hs.extend_from_slice(&(hello.len() as u16).to_be_bytes());
    hs.extend_from_slice(&hello);
    let mut rec = vec![0x16, 3, 1];
    rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
    rec.extend_from_slice(&hs);
    rec
}

#[test]
fn tls_sni_and_mail_port_names() {
    let ch = client_hello();
    let mut f = flow(L4::Tcp, 8443);
    assert_eq!(f.feed(true, &ch), Progress::Detected(AppProto::Tls));
    assert_eq!(f.host(), Some("a.example"));
    assert_eq!(run(L4::Tcp, 993, &[(true, &ch)]), Some(AppProto::Imaps));
}

#[test]
fn mail_starttls_upgrades() {
    let smtp: &[(bool, &[u8])] = &[
        (false, b"220 mx.example ESMTP ready\r\n"),
        (true, b"EHLO me\r\n"),
        (false, b"250-mx.example\r\n250 STARTTLS\r\n"),
        (true, b"STARTTLS\r\n"),
    ];
    assert_eq!(run(L4::Tcp, 25, smtp), Some(AppProto::Smtps));
    assert_eq!(run(L4::Tcp, 25, &smtp[..3]), Some(AppProto::Smtp));
    assert_eq!(
        run(
            L4::Tcp,
            2121,
            &[(false, b"220 ready\r\n"), (true, b"USER anonymous\r\n")]
        ),
        Some(AppProto::Ftp)
    );
    assert_eq!(
        run(
            L4::Tcp,
            143,
            &[(false, b"* OK IMAP4rev1\r\n"), (true, b"a1 LOGIN u p\r\n")]
        ),
        Some(AppProto::Imap)
    );
}

#[test]
fn dns_query_by_port_and_structure() {
    // Query for example.com A.
    let q =
        b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01";
    assert_eq!(run(L4::Udp, 53, &[(true, q)]), Some(AppProto::Dns));
    assert_eq!(run(L4::Udp, 5353, &[(true, q)]), Some(AppProto::Mdns));
    // Same bytes on an unrelated port: not DNS, and no port guess either.
    assert_eq!(run(L4::Udp, 40001, &[(true, q)]), None);
}

#[test]
fn binary_udp_protocols() {
    let mut ntp = [0u8; 48];
    ntp[0] = 0x23; // v4, client
    assert_eq!(run(L4::Udp, 123, &[(true, &ntp)]), Some(AppProto::Ntp));
    let mut wg = [0u8; 148];
    wg[0] = 1;
    assert_eq!(
        run(L4::Udp, 9999, &[(true, &wg)]),
        Some(AppProto::WireGuard)
    );
    let stun = b"\x00\x01\x00\x00\x21\x12\xa4\x42abcdefghijkl";
    assert_eq!(run(L4::Udp, 19302, &[(true, stun)]), Some(AppProto::Stun));
    let mut rtp = [0u8; 172];
    rtp[0] = 0x80;
    rtp[8..12].copy_from_slice(&[1, 2, 3, 4]);
    let mut rtp2 = rtp;
    rtp2[3] = 1;
    assert_eq!(
        run(L4::Udp, 30000, &[(true, &rtp), (true, &rtp2)]),
        Some(AppProto::Rtp)
    );
}

#[test]
fn tcp_binary_protocols() {
    assert_eq!(
        run(
            L4::Tcp,
            6000,
            &[(true, b"\x13BitTorrent protocol\0\0\0\0\0\0\0\0")]
        ),
        Some(AppProto::BitTorrent)
    );
    assert_eq!(
        run(L4::Tcp, 22, &[(false, b"SSH-2.0-OpenSSH_8.9\r\n")]),
        Some(AppProto::Ssh)
    );
    let smb2 = b"\x00\x00\x00\x44\xfeSMB\x40\x00";
    assert_eq!(run(L4::Tcp, 445, &[(true, smb2)]), Some(AppProto::Smb));
    let mqtt = b"\x10\x12\x00\x04MQTT\x04\x02\x00\x3c\x00\x06abcdef";
    assert_eq!(run(L4::Tcp, 1883, &[(true, mqtt)]), Some(AppProto::Mqtt));
    let modbus = b"\x00\x01\x00\x00\x00\x06\x01\x03\x00\x00\x00\x0a";
    assert_eq!(run(L4::Tcp, 502, &[(true, modbus)]), Some(AppProto::Modbus));
    // Modbus wants its port: the same bytes elsewhere are nothing.
    assert_eq!(run(L4::Tcp, 40001, &[(true, modbus)]), None);
    // IEC 104 STARTDT act (a U frame), on any port; an I-frame length that cannot hold
    // an ASDU is not IEC 104.
    let startdt = b"\x68\x04\x07\x00\x00\x00";
    assert_eq!(
        run(L4::Tcp, 40001, &[(true, startdt)]),
        Some(AppProto::Iec104)
    );
    assert_eq!(
        run(L4::Tcp, 40001, &[(true, b"\x68\x04\x00\x00\x00\x00")]),
        None
    );
    let dnp3 = b"\x05\x64\x05\xc9\x01\x00\x00\x04\xe9\x21";
    assert_eq!(run(L4::Tcp, 20000, &[(true, dnp3)]), Some(AppProto::Dnp3));
}

#[test]
fn application_protocols() {
    assert_eq!(
        run(L4::Tcp, 5222, &[(true, b"ED\x00\x01")]),
        Some(AppProto::WhatsApp)
    );
    let mut tuya = vec![0, 0, 0x55, 0xaa];
    tuya.extend_from_slice(&[7; 24]);
    tuya.extend_from_slice(&[0, 0, 0xaa, 0x55]);
    assert_eq!(run(L4::Udp, 6667, &[(true, &tuya)]), Some(AppProto::TuyaLp));
    tuya[31] = 0x56; // wrong trailer
    assert_eq!(run(L4::Udp, 6667, &[(true, &tuya)]), None);
    // A RakNet ACK for one datagram: count 1, single record, 3-byte sequence number.
    assert_eq!(
        run(L4::Udp, 19132, &[(true, b"\xc0\x00\x01\x01\x05\x00\x00")]),
        Some(AppProto::RakNet)
    );
}

#[test]
fn port_fallback_only_when_not_ruled_out() {
    // No payload at all: nDPI-style guess by port.
    let f = flow(L4::Tcp, 443);
    assert_eq!((f.result(), f.guess()), (None, Some(AppProto::Tls)));
    // One odd chunk is not enough to drop the port's protocol (nDPI keeps probing) ...
    let mut f = flow(L4::Tcp, 443);
    f.feed(true, b"hello there, definitely not TLS");
    assert_eq!(f.guess(), Some(AppProto::Tls));
    // ... but once the TLS detector has ruled the flow out, no guess.
    for _ in 0..4 {
        f.feed(true, b"more bytes that are not TLS records");
    }
    assert_eq!((f.result(), f.guess()), (None, None));
    assert_eq!(flow(L4::Other(1), 0).result(), Some(AppProto::Icmp));
}

#[test]
fn fixed_size_state() {
    // The per-flow state is a plain value: no heap, small enough to sit in a table.
    assert!(std::mem::size_of::<DpiFlow>() <= 160);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
    #[test]
    fn random_bytes_never_panic(
        tcp in proptest::bool::ANY,
        port in proptest::sample::select(vec![21u16, 25, 53, 80, 88, 102, 110, 123, 137, 138, 139, 143, 389, 443, 445, 500, 502, 1900, 2404, 4500, 5060, 5353, 17500, 40000]),
        chunks in proptest::collection::vec(
            (proptest::bool::ANY, proptest::collection::vec(proptest::num::u8::ANY, 0..300)), 1..12),
    ) {
        let mut f = flow(if tcp { L4::Tcp } else { L4::Udp }, port);
        for (c, d) in &chunks {
            f.feed(*c, d);
        }
        let _ = (f.label(), f.host());
    }

    /// Random bytes behind real protocol prefixes reach the deeper parsing paths.
    #[test]
    fn prefixed_random_bytes_never_panic(
        tcp in proptest::bool::ANY,
        prefix in proptest::sample::select(vec![
            &b"\x16\x03\x01\x02\x00\x01"[..], b"\x16\xfe\xfd", b"GET / HTTP/1.1\r\n", b"\x30\x82",
            b"\x00\x00\x00\x10\xffSMB", b"\x10\x20\x00\x04MQTT", b"<1", b"\x02\x01", b"\xc3\x00\x00\x00\x01",
            b"220 ", b"* OK", b"+OK", b"\x03\x00\x00", b"\x00\x01\x00\x00", b"d1:", b"\x81\x0a",
        ]),
        tail in proptest::collection::vec(proptest::num::u8::ANY, 0..400),
        port in proptest::sample::select(vec![25u16, 53, 88, 102, 123, 143, 443, 502, 993, 5353, 40000]),
    ) {
        let mut d = prefix.to_vec();
        d.extend_from_slice(&tail);
        let mut f = flow(if tcp { L4::Tcp } else { L4::Udp }, port);
        f.feed(true, &d);
        f.feed(false, &d);
        let _ = (f.label(), f.host());
        let _ = tls::sni(&d);
        let _ = web::host(&d);
    }
}
