//! The IDS engine through its public API on literal packets and streams: matches across
//! segment boundaries, once-per-transaction HTTP alerts, flow direction, warnings for
//! unsupported rules, and no panic on random rule text or bytes.

use catena::nfs::ids::{Alert, Ids, IdsConfig, Ip, PacketInfo, PktFields, RuleSet, Vars};
use proptest::prelude::*;

fn ids(rules: &str) -> Ids {
    let (set, w) = RuleSet::parse(rules, &Vars::suricata_defaults());
    assert!(w.is_empty(), "{w:?}");
    Ids::new(set, IdsConfig::default())
}

fn pkt(to_server: bool) -> PacketInfo {
    let (c, s) = (Ip::V4(0x0a00_0001), Ip::V4(0x0808_0808));
    PacketInfo {
        ip_proto: 6,
        src: if to_server { c } else { s },
        dst: if to_server { s } else { c },
        sport: if to_server { 40000 } else { 80 },
        dport: if to_server { 80 } else { 40000 },
        to_server,
        established: true,
        reassembled: true,
        first_in_dir: false,
        fields: PktFields {
            tcp_flags: 0x18,
            ttl: 64,
            ..PktFields::default()
        },
        no_payload: false,
    }
}

fn sids(a: &[Alert]) -> Vec<u32> {
    a.iter().map(|a| a.sid).collect()
}

#[test]
fn stream_content_matches_across_segments_once() {
    let mut e = ids(
        r#"alert tcp $HOME_NET any -> $EXTERNAL_NET 80 (msg:"admin"; flow:to_server,established; content:"/admin"; content:"HTTP/1."; distance:0; within:12; sid:1;)
alert tcp any any -> any any (msg:"deep"; content:"GET"; depth:3; sid:2;)
alert tcp any any -> any any (msg:"neg"; content:"GET"; content:!"secret"; sid:3;)"#,
    );
    let req = b"GET /admin HTTP/1.1\r\nHost: x\r\n\r\n";
    for cut in 1..req.len() {
        let mut f = e.new_flow();
        let mut al = Vec::new();
        e.on_stream(&mut f, &pkt(true), &req[..cut], &mut al);
        e.on_stream(&mut f, &pkt(true), &req[cut..], &mut al);
        // Re-sending more bytes must not re-alert on the old ones.
        e.on_stream(&mut f, &pkt(true), b"more bytes", &mut al);
        let mut s = sids(&al);
        s.sort();
        assert_eq!(s, [1, 2, 3], "cut at {cut}");
    }
    // Wrong direction, and the negated content present.
    let mut f = e.new_flow();
    let mut al = Vec::new();
    e.on_stream(&mut f, &pkt(false), b"GET /admin HTTP/1.1 secret", &mut al);
    assert_eq!(sids(&al), [2]);
}

#[test]
fn fast_pattern_in_an_earlier_segment_still_counts() {
    let mut e = ids(
        r#"alert tcp any any -> any any (msg:"split"; content:"longfastpattern"; fast_pattern; content:"end"; distance:0; within:40; sid:7;)"#,
    );
    let mut f = e.new_flow();
    let mut al = Vec::new();
    e.on_stream(&mut f, &pkt(true), b"xx longfastpattern yy", &mut al);
    e.on_stream(&mut f, &pkt(true), b"zz", &mut al);
    assert!(al.is_empty());
    e.on_stream(&mut f, &pkt(true), b" the end", &mut al);
    assert_eq!(sids(&al), [7]);
    // Once the pattern has left the window it no longer matches.
    let mut f = e.new_flow();
    al.clear();
    e.on_stream(&mut f, &pkt(true), b"longfastpattern", &mut al);
    e.on_stream(&mut f, &pkt(true), &[b'.'; 5000], &mut al);
    e.on_stream(&mut f, &pkt(true), b"end", &mut al);
    assert!(al.is_empty());
}

#[test]
fn http_buffers_alert_once_per_transaction() {
    let mut e = ids(
        r#"alert http any any -> any any (msg:"uri"; flow:to_server; http.uri; content:"/login.php"; http.method; content:"POST"; sid:10;)
alert http any any -> any any (msg:"host"; http.host; content:"example.com"; endswith; sid:11;)
alert http any any -> any any (msg:"ua pcre"; content:"curl"; http_user_agent; nocase; pcre:"/^curl\/\d/V"; sid:12;)
alert http any any -> any any (msg:"body"; flow:to_client; file_data; content:"Welcome"; sid:13;)
alert http any any -> any any (msg:"code"; http.stat_code; content:"200"; sid:14;)"#,
    );
    let req = b"POST /login.php HTTP/1.1\r\nHost: www.Example.com\r\nUser-Agent: curl/8.1\r\nContent-Length: 3\r\n\r\na=b";
    let resp =
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nWelc\r\n3\r\nome\r\n0\r\n\r\n";
    let mut f = e.new_flow();
    let mut al = Vec::new();
    for b in req.chunks(5) {
        e.on_stream(&mut f, &pkt(true), b, &mut al);
    }
    for b in resp.chunks(3) {
        e.on_stream(&mut f, &pkt(false), b, &mut al);
    }
    let mut s = sids(&al);
    s.sort();
    assert_eq!(s, [10, 11, 12, 13, 14]);
    // A second transaction on the same flow alerts again.
    al.clear();
    e.on_stream(&mut f, &pkt(true), req, &mut al);
    let mut s = sids(&al);
    s.sort();
    assert_eq!(s, [10, 11, 12]);
}

/// Suricata's behaviour on 1kxun.pcap and the merged trace (tests/ids_suricata_agreement.rs):
/// an `alert http` rule on the raw stream sees the flow's first request; a rule on a
/// buffer both sides have alerts once per direction and transaction; a missing buffer
/// (no Cookie header) matches nothing, not even a negated pcre.
#[test]
fn http_direction_buffers_and_missing_buffers_as_suricata() {
    let mut e = ids(
        r#"alert http any any -> any any (msg:"raw"; flow:established,to_server; content:"Host"; sid:1;)
alert http any any -> any any (msg:"no IE"; pcre:!"/User-Agent: IEXPLORER/H"; sid:2;)
alert http any any -> any any (msg:"no dummy cookie"; pcre:!"/dummy/C"; sid:3;)"#,
    );
    let req = b"GET / HTTP/1.1\r\nHost: x\r\nUser-Agent: curl\r\n\r\n";
    let resp = b"HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nContent-Length: 0\r\n\r\n";
    let mut f = e.new_flow();
    let mut al = Vec::new();
    e.on_stream(&mut f, &pkt(true), req, &mut al);
    let mut s = sids(&al);
    s.sort();
    assert_eq!(s, [1, 2], "first request: no Cookie header, no sid 3");
    al.clear();
    e.on_stream(&mut f, &pkt(false), resp, &mut al);
    let mut s = sids(&al);
    s.sort();
    assert_eq!(
        s,
        [2, 3],
        "the response alerts sid 2 again and has a cookie"
    );
    al.clear();
    e.on_stream(
        &mut f,
        &pkt(true),
        b"GET / HTTP/1.1\r\nHost: x\r\nCookie: dummy=1\r\n\r\n",
        &mut al,
    );
    let mut s = sids(&al);
    s.sort();
    assert_eq!(s, [1, 2]);
}

/// HTTP rules run on flows Suricata's protocol detection takes for HTTP: the client
/// starts with a known method, or the server answers `HTTP/` (smtp.pcap: `EHLO` lines
/// are not HTTP requests).
#[test]
fn http_rules_need_http_protocol_detection() {
    let mut e = ids(
        r#"alert http any any -> any any (msg:"not POST"; pcre:!"/POST/M"; sid:4;)
alert http any any -> any any (msg:"ok"; http.stat_code; content:"200"; sid:5;)"#,
    );
    let run = |e: &mut Ids, req: &[u8], resp: &[u8]| {
        let mut f = e.new_flow();
        let mut al = Vec::new();
        e.on_stream(&mut f, &pkt(true), req, &mut al);
        e.on_stream(&mut f, &pkt(false), resp, &mut al);
        sids(&al)
    };
    assert_eq!(
        run(&mut e, b"EHLO mail.example.com\r\n", b"250 ok\r\n"),
        [0u32; 0]
    );
    assert_eq!(
        run(
            &mut e,
            b"get / HTTP/1.0\r\n\r\n",
            b"HTTP/1.0 200 OK\r\n\r\n"
        ),
        [4, 5]
    );
    // An unknown method: HTTP from the response on.
    assert_eq!(
        run(
            &mut e,
            b"FOO / HTTP/1.0\r\n\r\n",
            b"HTTP/1.0 200 OK\r\n\r\n"
        ),
        [5]
    );
}

/// `http.protocol` is each message's own version: the status line's for a `to_client`
/// rule (1kxun.pcap: HTTP/1.1 requests answered with HTTP/1.0).
#[test]
fn http_protocol_is_the_messages_own() {
    let mut e = ids(
        r#"alert http any any -> any any (flow:to_client; http.protocol; content:"HTTP/1.1"; sid:6;)
alert http any any -> any any (flow:to_server; http.protocol; content:"HTTP/1.1"; sid:7;)"#,
    );
    let mut f = e.new_flow();
    let mut al = Vec::new();
    e.on_stream(
        &mut f,
        &pkt(true),
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        &mut al,
    );
    e.on_stream(
        &mut f,
        &pkt(false),
        b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n",
        &mut al,
    );
    assert_eq!(sids(&al), [7]);
    al.clear();
    e.on_stream(&mut f, &pkt(true), b"GET / HTTP/1.0\r\n\r\n", &mut al);
    e.on_stream(
        &mut f,
        &pkt(false),
        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
        &mut al,
    );
    assert_eq!(sids(&al), [6]);
}

#[test]
fn packet_rules_and_ip_only_rules() {
    let mut e = ids(
        r#"alert udp any any -> any 53 (msg:"dns"; content:"|01 00 00 01|"; offset:2; depth:4; sid:20;)
alert ip any any -> [8.8.8.0/24,!8.8.8.9] any (msg:"ip only"; sid:21;)
alert udp any any <> any 53 (msg:"both ways"; content:"x"; sid:22;)"#,
    );
    let mut p = pkt(true);
    p.ip_proto = 17;
    p.dport = 53;
    p.reassembled = false;
    p.first_in_dir = true;
    let mut al = Vec::new();
    e.on_packet(&p, b"\x12\x34\x01\x00\x00\x01x", &mut al);
    let mut s = sids(&al);
    s.sort();
    assert_eq!(s, [20, 21, 22]);
    al.clear();
    p.first_in_dir = false;
    e.on_packet(&p, b"\x12\x34\x01\x00\x00\x02", &mut al);
    assert_eq!(sids(&al), Vec::<u32>::new());
    let mut r = pkt(false);
    r.ip_proto = 17;
    r.sport = 53;
    r.reassembled = false;
    e.on_packet(&r, b"x", &mut al);
    assert_eq!(sids(&al), [22]);
}

#[test]
fn unsupported_rules_are_skipped_with_a_warning() {
    let text = r#"alert tcp any any -> any any (msg:"a"; content:"x"; threshold: type limit, track by_src, count 1, seconds 60; sid:100;)
alert tcp any any -> any any (msg:"b"; pcre:"/(a)\1/"; sid:101;)
alert tcp any any -> any any (msg:"c"; nocase; sid:102;)
pass tcp any any -> any any (sid:103;)
alert tcp any any -> $NOPE any (sid:104;)
alert tcp any any -> any any (msg:"ok"; content:"x"; sid:105;)
alert tcp any any -> any any (msg:"dup"; content:"y"; sid:105;)
alert tcp any any -> any any (msg:"broken"; content:"x"
"#;
    let (set, w) = RuleSet::parse(text, &Vars::suricata_defaults());
    assert_eq!(set.len(), 1, "{w:?}");
    let got: Vec<(Option<u32>, &str)> = w.iter().map(|w| (w.sid, w.keyword.as_str())).collect();
    assert_eq!(
        got,
        [
            (Some(100), "threshold"),
            (Some(101), "pcre"),
            (Some(102), "nocase"),
            (Some(103), "action"),
            (Some(104), "destination address"),
            (Some(105), "sid"),
            (None, "syntax"),
        ]
    );
    assert_eq!(
        w[0].to_string(),
        "line 1 sid 100: `threshold`: keyword not supported; rule skipped"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_rule_text_never_panics(s in "\\PC{0,200}") {
        let _ = RuleSet::parse(&s, &Vars::suricata_defaults());
        let r = format!("alert tcp any any -> any any ({s}; sid:1;)");
        let _ = RuleSet::parse(&r, &Vars::suricata_defaults());
    }

    #[test]
    fn random_options_never_panic(
        opts in proptest::collection::vec(
            prop_oneof![
                Just("content:\"ab\"".to_string()),
                Just("content:!\"|00 ff|\"".to_string()),
                Just("nocase".to_string()),
                (-70000i64..70000).prop_map(|n| format!("distance:{n}")),
                (-5i64..70000).prop_map(|n| format!("within:{n}")),
                (-5i64..70000).prop_map(|n| format!("offset:{n}")),
                (-5i64..70000).prop_map(|n| format!("depth:{n}")),
                Just("pcre:\"/a.b/R\"".to_string()),
                Just("http.uri".to_string()),
                Just("file_data".to_string()),
                Just("endswith".to_string()),
                Just("flow:to_server".to_string()),
            ],
            0..8,
        ),
        data in proptest::collection::vec(any::<u8>(), 0..300),
        cut in 0usize..300,
    ) {
        let rule = format!("alert tcp any any -> any any ({}; sid:1;)", opts.join("; "));
        let (set, _) = RuleSet::parse(&rule, &Vars::suricata_defaults());
        let mut e = Ids::new(set, IdsConfig::default());
        let mut f = e.new_flow();
        let mut al = Vec::new();
        let cut = cut.min(data.len());
        e.on_packet(&pkt(true), &data, &mut al);
        e.on_stream(&mut f, &pkt(true), &data[..cut], &mut al);
        e.on_stream(&mut f, &pkt(false), &data[cut..], &mut al);
    }

    #[test]
    fn random_http_bytes_never_panic(
        head in prop_oneof![Just(&b"GET / HTTP/1.1\r\n"[..]), Just(&b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n"[..]), Just(&b""[..])],
        data in proptest::collection::vec(any::<u8>(), 0..400),
    ) {
        let mut e = ids(r#"alert http any any -> any any (file_data; content:"a"; http.header; content:"b"; sid:1;)"#);
        let mut f = e.new_flow();
        let mut al = Vec::new();
        let mut all = head.to_vec();
        all.extend_from_slice(&data);
        for (i, piece) in all.chunks(7).enumerate() {
            e.on_stream(&mut f, &pkt(i % 3 != 0), piece, &mut al);
        }
    }
}
