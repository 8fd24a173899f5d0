//! pcap/pcapng reading and pcap writing, checked against the real captures in
//! `../shared/datasets` with capinfos' packet counts (INDEX.tsv) and tcpdump as oracles.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use catena::io::{PcapHeader, PcapWriter, Trace, TraceError};
use catena::packet::LinkKind;

const DATASETS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/datasets");

fn datasets() -> PathBuf {
    let p = PathBuf::from(DATASETS);
    assert!(
        p.is_dir(),
        "{} missing: clone the repo next to shared/",
        p.display()
    );
    p
}

fn ds(rel: &str) -> PathBuf {
    datasets().join(rel)
}

/// Every capture under the datasets folder, relative path first, sorted.
fn captures() -> Vec<(String, PathBuf)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("pcap" | "pcapng" | "cap")
            ) {
                out.push(p);
            }
        }
    }
    let root = datasets();
    let mut files = Vec::new();
    walk(&root, &mut files);
    let mut v: Vec<_> = files
        .into_iter()
        .map(|p| {
            let rel = p
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            (rel, p)
        })
        .collect();
    v.sort();
    v
}

struct IndexRow {
    format: String,
    link: String,
    packets: usize,
}

/// INDEX.tsv: capinfos' format, link type and packet count per file.
fn index() -> HashMap<String, IndexRow> {
    let text = fs::read_to_string(ds("INDEX.tsv")).unwrap();
    text.lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (
                f[0].to_string(),
                IndexRow {
                    format: f[1].to_string(),
                    link: f[2].to_string(),
                    packets: f[3].parse().unwrap(),
                },
            )
        })
        .collect()
}

fn require_tool(name: &str) {
    let ok = Command::new(name)
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        ok,
        "`{name}` is needed as the oracle for this test: install it (apt-get install tcpdump tshark)"
    );
}

/// tcpdump's view of a capture: ns timestamps, hex of every byte. Equal output means the
/// same packets, lengths and times as far as libpcap can tell.
fn tcpdump(path: &Path) -> String {
    let out = Command::new("tcpdump")
        .args(["-r"])
        .arg(path)
        .args(["-nn", "-tt", "-xx", "--time-stamp-precision=nano"])
        .output()
        .expect("run tcpdump");
    assert!(
        out.status.success(),
        "tcpdump -r {} failed: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Packet lines in tcpdump output (hex lines start with a tab).
fn tcpdump_count(text: &str) -> usize {
    text.lines().filter(|l| !l.starts_with('\t')).count()
}

fn write_all(trace: &Trace, header: PcapHeader, out: &Path) {
    let mut w = PcapWriter::create(out, header).unwrap();
    w.write_trace(trace).unwrap();
    assert_eq!(w.packets(), trace.len() as u64);
    w.finish().unwrap();
}

#[test]
fn every_dataset_capture_opens_and_matches_capinfos_counts() {
    let index = index();
    let files = captures();
    assert!(files.len() > 1000, "only {} captures found", files.len());
    let (mut accepted, mut packets, mut mismatches) = (0, 0usize, Vec::new());
    let (mut unsupported, mut partial, mut failed) = (Vec::new(), Vec::new(), Vec::new());
    for (rel, path) in &files {
        let row = index
            .get(rel)
            .unwrap_or_else(|| panic!("{rel} not in INDEX.tsv"));
        match Trace::open(path) {
            Ok(t) => {
                // Every record must lie inside the file.
                let (bytes, recs) = t.raw();
                assert!(recs
                    .iter()
                    .all(|r| r.off as usize + r.caplen as usize <= bytes.len()));
                if let Some(e) = t.error() {
                    partial.push(format!(
                        "{rel}: {} of {} packets: {e}",
                        t.len(),
                        row.packets
                    ));
                } else {
                    accepted += 1;
                    packets += t.len();
                    if t.len() != row.packets {
                        mismatches.push(format!("{rel}: {} vs capinfos {}", t.len(), row.packets));
                    }
                }
            }
            Err(e @ TraceError::LinkType { .. }) => {
                unsupported.push(format!("{rel} ({}): {e}", row.link))
            }
            Err(e) => failed.push(format!("{rel}: {e}")),
        }
    }
    println!(
        "{} captures: {accepted} read whole ({packets} packets, all counts equal to capinfos: {}), \
         {} unsupported link type, {} partial, {} failed",
        files.len(),
        mismatches.is_empty(),
        unsupported.len(),
        partial.len(),
        failed.len()
    );
    for l in unsupported.iter().chain(&partial).chain(&failed) {
        println!("  {l}");
    }
    assert!(mismatches.is_empty(), "count mismatches: {mismatches:#?}");
    // Explained: capinfos reads them all; the rejects are exactly the link types catena
    // does not decode (BSD loopback, PPP, Cisco HDLC, PPI).
    for u in &unsupported {
        assert!(
            ["(null)", "(ppp)", "(chdlc)", "(ppi)"]
                .iter()
                .any(|l| u.contains(l)),
            "rejected a supported link type: {u}"
        );
    }
    assert_eq!(unsupported.len(), 12, "{unsupported:#?}");
    assert!(partial.is_empty(), "{partial:#?}");
    assert!(failed.is_empty(), "{failed:#?}");
}

/// Little-endian pcaps: read then written with the same header gives the same bytes.
#[test]
fn pcap_round_trip_is_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let index = index();
    let mut files: Vec<String> = [
        "bench/ndpi-ether-merged.pcap",
        "ndpi/pcap/1kxun.pcap",
        "ndpi/pcap/443-curl.pcap",
        "ndpi/pcap/KakaoTalk_chat.pcap",            // Linux SLL
        "ndpi/pcap/bjnp.pcap",                      // raw IP
        "ndpi/pcap/rsh-syslog-false-positive.pcap", // caplen < wire length
    ]
    .map(String::from)
    .to_vec();
    // Plus a sample of suricata-verify's.
    files.extend(
        captures()
            .into_iter()
            .filter(|(r, _)| r.starts_with("suricata-verify/"))
            .step_by(40)
            .map(|(r, _)| r),
    );
    let mut n = 0;
    for rel in &files {
        let input = ds(rel);
        let bytes = fs::read(&input).unwrap();
        if bytes[..4] != [0xd4, 0xc3, 0xb2, 0xa1] {
            continue; // big-endian or pcapng: not expected byte-identical
        }
        assert_eq!(index[rel.as_str()].format, "pcap");
        let t = Trace::open(&input).unwrap();
        assert!(t.error().is_none(), "{rel}: {:?}", t.error());
        assert!(!t.header().nanos);
        let out = dir.path().join("out.pcap");
        write_all(&t, t.header(), &out);
        assert!(
            fs::read(&out).unwrap() == bytes,
            "{rel}: round trip differs"
        );
        n += 1;
    }
    assert!(n >= 10, "only {n} files round-tripped");
}

/// Nanosecond pcaps: the two in the datasets have link types catena does not decode, so a
/// real one is made with editcap (Wireshark's converter) and must round-trip too.
#[test]
fn ns_pcap_round_trip_is_byte_identical() {
    require_tool("editcap");
    let dir = tempfile::tempdir().unwrap();
    for rel in ["ndpi/pcap/1kxun.pcap", "ndpi/pcap/KakaoTalk_chat.pcap"] {
        let ns = dir.path().join("ns.pcap");
        let st = Command::new("editcap")
            .args(["-F", "nsecpcap"])
            .arg(ds(rel))
            .arg(&ns)
            .status()
            .unwrap();
        assert!(st.success());
        let bytes = fs::read(&ns).unwrap();
        assert_eq!(bytes[..4], [0x4d, 0x3c, 0xb2, 0xa1]);
        let t = Trace::open(&ns).unwrap();
        assert!(t.header().nanos);
        assert_eq!(t.len(), Trace::open(&ds(rel)).unwrap().len());
        let out = dir.path().join("out.pcap");
        write_all(&t, t.header(), &out);
        assert!(
            fs::read(&out).unwrap() == bytes,
            "{rel} as ns: round trip differs"
        );
    }
}

/// Big-endian pcaps and every pcapng we accept, written as pcap: tcpdump prints exactly
/// the same packets (times in ns, all bytes) for the output as for the original.
#[test]
fn converted_captures_look_the_same_to_tcpdump() {
    require_tool("tcpdump");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.pcap");
    let (mut ng, mut be) = (0, 0);
    for (rel, path) in captures() {
        let magic = fs::read(&path).unwrap()[..4].to_vec();
        let is_ng = magic == [0x0a, 0x0d, 0x0d, 0x0a];
        let is_be = magic == [0xa1, 0xb2, 0xc3, 0xd4] || magic == [0xa1, 0xb2, 0x3c, 0x4d];
        if !is_ng && !is_be {
            continue;
        }
        let Ok(t) = Trace::open(&path) else { continue };
        assert!(t.error().is_none(), "{rel}: {:?}", t.error());
        write_all(&t, t.header(), &out);
        let want = tcpdump(&path);
        let got = tcpdump(&out);
        assert_eq!(tcpdump_count(&got), t.len(), "{rel}");
        assert_eq!(tcpdump_count(&want), t.len(), "{rel}");
        if got != want {
            let (i, (a, b)) = want
                .lines()
                .zip(got.lines())
                .enumerate()
                .find(|(_, (a, b))| a != b)
                .unwrap_or((0, ("", "")));
            panic!("{rel}: tcpdump output differs at line {i}:\n  original: {a}\n  ours:     {b}");
        }
        if is_ng {
            ng += 1;
        } else {
            be += 1;
        }
    }
    println!("tcpdump agrees on {ng} pcapng and {be} big-endian pcap files converted to pcap");
    assert!(ng > 100 && be >= 6, "ng {ng} be {be}");
}

// ---- bad input: exact one-line messages ----

fn open_bytes(dir: &Path, name: &str, bytes: &[u8]) -> (PathBuf, Result<Trace, TraceError>) {
    let p = dir.join(name);
    fs::write(&p, bytes).unwrap();
    let r = Trace::open(&p);
    (p, r)
}

fn err_msg(r: Result<Trace, TraceError>) -> String {
    match r {
        Ok(t) => panic!("expected an error, got a trace of {} packets", t.len()),
        Err(e) => {
            let s = e.to_string();
            assert!(!s.contains('\n'), "not one line: {s}");
            s
        }
    }
}

fn le_header(snaplen: u32, linktype: u32) -> Vec<u8> {
    let mut h = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    h.extend_from_slice(&snaplen.to_le_bytes());
    h.extend_from_slice(&linktype.to_le_bytes());
    h
}

#[test]
fn bad_file_headers_are_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let p = d.join("missing.pcap");
    let m = err_msg(Trace::open(&p));
    assert!(
        m.starts_with(&format!("{}: cannot read: ", p.display())),
        "{m}"
    );

    let (p, r) = open_bytes(d, "empty.pcap", b"");
    assert_eq!(
        err_msg(r),
        format!(
            "{}: empty file (0 bytes), not a pcap or pcapng capture",
            p.display()
        )
    );

    let (p, r) = open_bytes(d, "ten.pcap", &le_header(65535, 1)[..10]);
    assert_eq!(
        err_msg(r),
        format!(
            "{}: file is 10 bytes, too short for a pcap header (24 bytes)",
            p.display()
        )
    );

    let mut bad = le_header(65535, 1);
    bad[..4].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    let (p, r) = open_bytes(d, "magic.pcap", &bad);
    assert_eq!(
        err_msg(r),
        format!(
            "{}: not a pcap or pcapng file: bad magic deadbeef (expected a1b2c3d4 or a1b23c4d, \
             either byte order, or pcapng 0a0d0d0a)",
            p.display()
        )
    );

    let (p, r) = open_bytes(d, "snap.pcap", &le_header(0x2000_0000, 1));
    assert_eq!(
        err_msg(r),
        format!(
            "{}: absurd snaplen 536870912 in the file header (more than 256 MiB)",
            p.display()
        )
    );
    // snaplen 0 is what some writers emit: fine.
    let (_, r) = open_bytes(d, "snap0.pcap", &le_header(0, 1));
    assert_eq!(r.unwrap().len(), 0);

    let (p, r) = open_bytes(d, "wifi.pcap", &le_header(65535, 105));
    assert_eq!(
        err_msg(r),
        format!(
            "{}: unsupported link type 105 (IEEE 802.11); supported: Ethernet, raw IPv4/IPv6, \
             Linux cooked (SLL, SLL2)",
            p.display()
        )
    );

    let mut v1 = le_header(65535, 1);
    v1[4] = 1;
    let (p, r) = open_bytes(d, "v1.pcap", &v1);
    assert_eq!(
        err_msg(r),
        format!(
            "{}: unsupported pcap version 1.4 (expected 2.x)",
            p.display()
        )
    );
}

/// A real file cut or damaged after its first packets keeps those packets.
#[test]
fn bad_records_keep_the_good_ones() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let src = ds("ndpi/pcap/443-curl.pcap");
    let good = Trace::open(&src).unwrap();
    let bytes = fs::read(&src).unwrap();
    let n = good.len();
    let last = good.record(n - 1);
    let last_hdr = last.off as usize - 16;

    // Cut in the middle of the last packet's data.
    let cut = last.off as usize + 3;
    let (p, r) = open_bytes(d, "cut.pcap", &bytes[..cut]);
    let t = r.unwrap();
    assert_eq!(t.len(), n - 1);
    for i in 0..n - 1 {
        assert_eq!(t.packet(i), good.packet(i));
        assert_eq!(t.record(i), good.record(i));
    }
    assert_eq!(
        t.error().unwrap().to_string(),
        format!(
            "{}: record {n} at byte offset {last_hdr}: caplen {} runs past the end of the file \
             (only 3 bytes left)",
            p.display(),
            last.caplen
        )
    );

    // Cut inside the last record header.
    let (p, r) = open_bytes(d, "cuthdr.pcap", &bytes[..last_hdr + 10]);
    let t = r.unwrap();
    assert_eq!(t.len(), n - 1);
    assert_eq!(t.packet(n - 2), good.packet(n - 2));
    assert_eq!(
        t.error().unwrap().to_string(),
        format!(
            "{}: record {n} at byte offset {last_hdr}: truncated record header: 10 of 16 bytes \
             before the end of the file",
            p.display()
        )
    );

    // Caplen of the last record larger than the file (but not absurd).
    let mut big = bytes.clone();
    big[last_hdr + 8..last_hdr + 12].copy_from_slice(&60_000u32.to_le_bytes());
    let (p, r) = open_bytes(d, "big.pcap", &big);
    let t = r.unwrap();
    assert_eq!(t.len(), n - 1);
    assert_eq!(
        t.error().unwrap().to_string(),
        format!(
            "{}: record {n} at byte offset {last_hdr}: caplen 60000 runs past the end of the \
             file (only {} bytes left)",
            p.display(),
            last.caplen
        )
    );

    // Absurd caplen: more than max(snaplen, 262144).
    let mut absurd = bytes.clone();
    absurd[last_hdr + 8..last_hdr + 12].copy_from_slice(&0x0100_0000u32.to_le_bytes());
    let (p, r) = open_bytes(d, "absurd.pcap", &absurd);
    let t = r.unwrap();
    assert_eq!(t.len(), n - 1);
    assert_eq!(
        t.error().unwrap().to_string(),
        format!(
            "{}: record {n} at byte offset {last_hdr}: absurd caplen 16777216 (more than 262144 \
             = max(snaplen, 262144), capped at 256 MiB)",
            p.display()
        )
    );
}

#[test]
fn pcapng_bad_block_length() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let src = ds("ndpi/pcap/http2.pcapng");
    let bytes = fs::read(&src).unwrap();
    let good = Trace::open(&src).unwrap();
    let n = good.len();
    // The last block is the last packet's EPB (or a statistics block after it): find
    // the block that holds the last packet by its data offset.
    let epb = good.record(n - 1).off as usize - 28;
    assert_eq!(bytes[epb..epb + 4], [6, 0, 0, 0]);

    // Leading length not a multiple of 4.
    let mut b = bytes.clone();
    let len = u32::from_le_bytes(b[epb + 4..epb + 8].try_into().unwrap());
    b[epb + 4..epb + 8].copy_from_slice(&(len + 1).to_le_bytes());
    let (p, r) = open_bytes(d, "len.pcapng", &b);
    let t = r.unwrap();
    assert_eq!(t.len(), n - 1);
    assert_eq!(t.packet(n - 2), good.packet(n - 2));
    assert_eq!(
        t.error().unwrap().to_string(),
        format!(
            "{}: record {n} at byte offset {epb}: bad block length {} (must be a multiple of 4 \
             and at least 32)",
            p.display(),
            len + 1
        )
    );

    // Trailing length differs.
    let mut b = bytes.clone();
    let trail = epb + len as usize - 4;
    b[trail..trail + 4].copy_from_slice(&(len + 4).to_le_bytes());
    let (p, r) = open_bytes(d, "trail.pcapng", &b);
    assert_eq!(
        r.unwrap().error().unwrap().to_string(),
        format!(
            "{}: record {n} at byte offset {epb}: inconsistent block length: trailing length {} \
             differs from leading length {len}",
            p.display(),
            len + 4
        )
    );

    // Length past the end of the file.
    let (p, r) = open_bytes(d, "short.pcapng", &bytes[..epb + 40]);
    assert_eq!(
        r.unwrap().error().unwrap().to_string(),
        format!(
            "{}: record {n} at byte offset {epb}: block length {len} runs past the end of the \
             file (only 40 bytes left)",
            p.display()
        )
    );

    // A bad section header is a file-header error.
    let mut b = bytes.clone();
    b[4..8].copy_from_slice(&13u32.to_le_bytes());
    let (p, r) = open_bytes(d, "shb.pcapng", &b);
    assert_eq!(
        err_msg(r),
        format!(
            "{}: pcapng block at byte offset 0: bad block length 13 (must be a multiple of 4 and \
             at least 28)",
            p.display()
        )
    );
}

// ---- never panic ----

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn check_no_panic(bytes: Vec<u8>) {
    // Whatever comes back, every record must be readable.
    if let Ok(t) = Trace::from_bytes(Path::new("fuzz"), bytes) {
        for i in 0..t.len() {
            let _ = t.packet(i);
        }
        let _ = (t.max_packet_len(), t.total_bytes(), t.span_ns());
        if let Some(e) = t.error() {
            assert!(!e.to_string().contains('\n'));
        }
    }
}

#[test]
fn random_and_mutated_input_never_panics() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..2000 {
        let len = rng.below(300);
        check_no_panic((0..len).map(|_| rng.next() as u8).collect());
    }
    // Random bytes behind each valid magic.
    let magics: [&[u8]; 5] = [
        &[0xd4, 0xc3, 0xb2, 0xa1],
        &[0xa1, 0xb2, 0xc3, 0xd4],
        &[0x4d, 0x3c, 0xb2, 0xa1],
        &[0x0a, 0x0d, 0x0d, 0x0a],
        &[0x34, 0xcd, 0xb2, 0xa1],
    ];
    for _ in 0..4000 {
        let mut v = magics[rng.below(magics.len())].to_vec();
        let len = rng.below(400);
        v.extend((0..len).map(|_| rng.next() as u8));
        check_no_panic(v);
    }
    // Truncations and byte flips of real files, both formats, both byte orders.
    for rel in [
        "ndpi/pcap/443-curl.pcap",
        "ndpi/pcap/http2.pcapng",
        "ndpi/pcap/quic-v2.pcapng",
        "ndpi/pcap/KakaoTalk_chat.pcap",
    ] {
        let bytes = fs::read(ds(rel)).unwrap();
        for cut in 0..bytes.len().min(600) {
            check_no_panic(bytes[..cut].to_vec());
        }
        for _ in 0..1500 {
            let mut v = bytes.clone();
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(v.len().min(2000));
                v[at] = rng.next() as u8;
            }
            let cut = v.len() - rng.below(v.len().min(100));
            v.truncate(cut);
            check_no_panic(v);
        }
    }
    // A few through the file path as well.
    let dir = tempfile::tempdir().unwrap();
    let bytes = fs::read(ds("ndpi/pcap/http2.pcapng")).unwrap();
    for i in 0..50 {
        let mut v = bytes.clone();
        let at = rng.below(v.len());
        v[at] ^= 0xff;
        v.truncate(rng.below(v.len()) + 1);
        let p = dir.path().join(format!("m{i}.pcapng"));
        fs::write(&p, &v).unwrap();
        let _ = Trace::open(&p);
    }
}

#[test]
fn generated_trace_writes_and_reads_back() {
    let pkts: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 60 + i as usize]).collect();
    let t = Trace::from_packets(
        LinkKind::Ethernet,
        PcapHeader::new(1, true),
        pkts.iter()
            .enumerate()
            .map(|(i, p)| (1_000_000_000 + i as u64 * 7, &p[..])),
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("gen.pcap");
    write_all(&t, t.header(), &out);
    let r = Trace::open(&out).unwrap();
    assert_eq!(r.len(), 5);
    assert_eq!(r.header(), t.header());
    for i in 0..5 {
        assert_eq!(r.packet(i), t.packet(i));
        assert_eq!(r.record(i).ts_ns, t.record(i).ts_ns);
    }
}

/// Not a test of speed (benchmarks are benchmarks): prints the open time of the bench file.
/// `cargo test --release --test pcap_io open_time -- --ignored --nocapture`
#[test]
#[ignore]
fn open_time() {
    let p = ds("bench/ndpi-ether-merged.pcap");
    let mut best = std::time::Duration::MAX;
    for _ in 0..10 {
        let t0 = std::time::Instant::now();
        let t = Trace::open(&p).unwrap();
        best = best.min(t0.elapsed());
        assert_eq!(t.len(), 90_989);
    }
    println!("open {}: best of 10 {:?}", p.display(), best);
}

/// tshark's view: frame length, captured length, time to the ns.
fn tshark_fields(path: &Path) -> String {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(path)
        .args(["-T", "fields", "-e", "frame.len", "-e", "frame.cap_len"])
        .args(["-e", "frame.time_epoch", "-e", "frame.protocols"])
        .output()
        .expect("run tshark");
    assert!(
        out.status.success(),
        "tshark -r {} failed: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Our output is readable by tshark and it sees the same frames as in the original.
#[test]
fn converted_captures_look_the_same_to_tshark() {
    require_tool("tshark");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.pcap");
    for rel in [
        "ndpi/pcap/http2.pcapng",   // pcapng, Linux SLL
        "ndpi/pcap/hls.pcapng",     // pcapng, raw IP
        "retina/quic_retry.pcapng", // pcapng, Ethernet
        // Not quic-v2.pcapng: its decryption-secrets block has no place in a pcap, so tshark
        // decodes less of our copy (the frames themselves are equal, see the tcpdump test).
        "ndpi/pcap/tls_heur__vmess-tcp.pcapng",
        "ndpi/pcap/KakaoTalk_chat.pcap", // pcap
    ] {
        let path = ds(rel);
        if !path.exists() {
            panic!("{rel} missing from the datasets");
        }
        let t = Trace::open(&path).unwrap();
        t.write_pcap(&out).unwrap();
        let want = tshark_fields(&path);
        let got = tshark_fields(&out);
        assert_eq!(got.lines().count(), t.len(), "{rel}");
        assert_eq!(got, want, "{rel}");
    }
}
