//! The HTTP API under hostile input (session 24): a request head past its bounds gets
//! `431` with the run's memory unchanged, framing that could be read two ways is refused
//! in one answer, a client that stops half-way is timed out, and a good request is
//! answered after each. The run replays a real capture from a pcap port at 1 packet/s (so
//! it lasts, with no root or namespace needed) and is killed at the end.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `catena run --api 127.0.0.1:0` on a chain that lasts; killed when dropped.
struct Run {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Run {
    fn start() -> Run {
        let dir = common::tempdir();
        let chain = dir.path().join("api.toml");
        std::fs::write(
            &chain,
            format!(
                "[[port]]\nname = \"in\"\nkind = \"pcap\"\npath = \"{}\"\nrate = \"1pps\"\n\n\
                 [[port]]\nname = \"out\"\nkind = \"pcap\"\nwrite = \"{}\"\n\n\
                 [[nf]]\nname = \"fw\"\nkind = \"firewall\"\nallow_ports = [80, 443]\n",
                common::dataset("ndpi/pcap/1kxun.pcap").display(),
                dir.path().join("out.pcap").display()
            ),
        )
        .unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_catena"))
            .args(["run", chain.to_str().unwrap(), "--api", "127.0.0.1:0"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let port = lines
            .by_ref()
            .map_while(Result::ok)
            .find_map(|l| {
                l.strip_prefix("catena: API on http://127.0.0.1:")
                    .map(|p| p.trim().parse().unwrap())
            })
            .expect("catena did not announce its API");
        std::thread::spawn(move || for _ in lines {});
        let run = Run {
            child,
            port,
            _dir: dir,
        };
        // The statistics are published once the first batch is through.
        let end = Instant::now() + Duration::from_secs(10);
        while statuses(&run.exchange(GOOD)) != [200] {
            assert!(Instant::now() < end, "no statistics in 10 s");
            std::thread::sleep(Duration::from_millis(100));
        }
        run
    }

    /// The run's peak resident memory so far, in KiB.
    fn peak_kib(&self) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        s.lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s
    }

    /// Sends `req`, then `chunk` `n` times, then `tail` (from a thread, as a client that
    /// does not wait for the answer would), and returns all that came back.
    fn streamed(&self, req: &[u8], chunk: &[u8], n: usize, tail: &[u8]) -> Vec<u8> {
        let s = self.connect();
        let mut w = s.try_clone().unwrap();
        let (req, chunk, tail) = (req.to_vec(), chunk.to_vec(), tail.to_vec());
        let writer = std::thread::spawn(move || {
            // The server may close before all is sent: that is its right here.
            let _ = (|| -> std::io::Result<()> {
                w.write_all(&req)?;
                for _ in 0..n {
                    w.write_all(&chunk)?;
                }
                w.write_all(&tail)?;
                w.shutdown(Shutdown::Write)
            })();
        });
        let out = read_all(s);
        writer.join().unwrap();
        out
    }

    fn exchange(&self, req: &[u8]) -> Vec<u8> {
        self.streamed(req, b"", 0, b"")
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the server sent until it closed (or an error or 20 s stopped the reading).
fn read_all(mut s: TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    out
}

/// The status codes of the responses in `r`, in order.
fn statuses(r: &[u8]) -> Vec<u16> {
    let re = regex::bytes::Regex::new(r"HTTP/1\.[01] (\d{3}) ").unwrap();
    re.captures_iter(r)
        .map(|c| std::str::from_utf8(&c[1]).unwrap().parse().unwrap())
        .collect()
}

fn body(r: &[u8]) -> String {
    let t = String::from_utf8_lossy(r);
    t.rsplit_once("\r\n\r\n").map_or("", |x| x.1).to_string()
}

const GOOD: &[u8] = b"GET /stats HTTP/1.1\r\nConnection: close\r\n\r\n";

/// tiny_http (main before session 24) read a header line whole: one 200 MiB line took
/// a run from 12 MB to 423 MB, and was then answered 200.
#[test]
fn a_head_past_16_kib_or_64_headers_gets_431_with_memory_unchanged() {
    let run = Run::start();
    let before = run.peak_kib();
    let long_line = run.streamed(
        b"GET /stats HTTP/1.1\r\nX-Long: ",
        &[b'y'; 64 << 10],
        256,
        b"\r\n\r\n",
    );
    let many: String = (0..100_000).map(|i| format!("X-{i}: y\r\n")).collect();
    let many = run.streamed(b"GET /stats HTTP/1.1\r\n", many.as_bytes(), 1, b"\r\n");
    let long_target =
        run.exchange(format!("GET /stats?{} HTTP/1.1\r\n\r\n", "a".repeat(20_000)).as_bytes());
    let grown = run.peak_kib().saturating_sub(before);
    assert!(
        grown < 4096,
        "peak memory grew by {grown} KiB over a 16 MiB header line and 100,000 headers"
    );
    assert_eq!(
        statuses(&long_line),
        [431],
        "{}",
        String::from_utf8_lossy(&long_line)
    );
    assert_eq!(
        body(&long_line),
        "error request line and headers longer than 16384 bytes\n"
    );
    assert_eq!(statuses(&many), [431]);
    assert_eq!(body(&many), "error more than 64 headers\n");
    assert_eq!(statuses(&long_target), [431]);
    // 64 headers of a head within 16 KiB are read.
    let sixty_four: String = (0..62)
        .map(|i| format!("X-{i}: {}\r\n", "v".repeat(200)))
        .collect();
    let ok = run.exchange(
        format!("GET /stats HTTP/1.1\r\n{sixty_four}Connection: close\r\n\r\n").as_bytes(),
    );
    assert_eq!(statuses(&ok), [200]);
    assert_eq!(statuses(&run.exchange(GOOD)), [200]);
}

/// Each request, the statuses it must get (in one connection), and why.
const FRAMING: &[(&[u8], &[u16], &str)] = &[
    (
        b"POST /nf/fw HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nflush!",
        &[400],
        "two different Content-Lengths",
    ),
    (
        b"POST /nf/fw HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nflush\r\n0\r\n\r\n",
        &[400],
        "Content-Length and chunked",
    ),
    (
        b"POST /nf/fw HTTP/1.1\r\nContent-Length: -1\r\n\r\nflush",
        &[400],
        "a negative length",
    ),
    (
        b"POST /nf/fw HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\nflush",
        &[501],
        "a coding not taken",
    ),
    (
        b"POST /nf/fw HTTP/1.1\r\nContent-Length: 10\r\n\r\nflu",
        &[400],
        "a body cut short",
    ),
    (
        b"POST /nf/fw HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 50000\r\n\r\n",
        &[413],
        "a body too long is refused before it is invited",
    ),
    (
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        &[505],
        "the HTTP/2 preface",
    ),
    (
        b"GET /stats HTTP/1.1\r\nX: a\r\n b\r\n\r\n",
        &[400],
        "a folded header line",
    ),
    (
        b"POST /nf/fw HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 18\r\n\r\nallow_ports 80 443",
        &[100, 200],
        "100-continue",
    ),
    (
        b"POST /nf/fw HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nallow\r\nd\r\n_ports 80 443\r\n0\r\n\r\n",
        &[200],
        "a chunked body",
    ),
    (
        b"GET /stats HTTP/1.1\r\n\r\nGET /nope HTTP/1.1\r\n\r\nPOST /nf/fw HTTP/1.1\r\nContent-Length: 18\r\n\r\nallow_ports 80 443",
        &[200, 404, 200],
        "three pipelined requests",
    ),
    (
        b"GET /metrics HTTP/1.0\r\n\r\nGET /stats HTTP/1.0\r\n\r\n",
        &[200],
        "HTTP/1.0: one request per connection",
    ),
    (b"HEAD /stats HTTP/1.1\r\n\r\n", &[405], "HEAD"),
];

#[test]
fn framing_that_could_be_read_two_ways_is_refused_in_one_answer() {
    let run = Run::start();
    let mut bad = Vec::new();
    for (req, want, why) in FRAMING {
        let got = run.exchange(req);
        if statuses(&got) != *want {
            bad.push(format!(
                "{why}: {:?} want {want:?}: {:?}",
                statuses(&got),
                String::from_utf8_lossy(&got)
            ));
        }
    }
    // More body than 4,096 bytes in small chunks: one 413, the rest not read as requests.
    let chunks = run.streamed(
        b"POST /nf/fw HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"1\r\na\r\n",
        10_000,
        b"0\r\n\r\n",
    );
    if statuses(&chunks) != [413] {
        bad.push(format!("chunked past 4096: {:?}", statuses(&chunks)));
    }
    // A chunk size that wraps the sum of the sizes: 1 + 2^64 - 1 bytes.
    let wraps = run.streamed(
        b"POST /nf/fw HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\nffffffffffffffff\r\n",
        &[b'y'; 64 << 10],
        64,
        b"",
    );
    if statuses(&wraps) != [413] {
        bad.push(format!("a chunk size that wraps: {:?}", statuses(&wraps)));
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    assert_eq!(statuses(&run.exchange(GOOD)), [200]);
}

/// tiny_http never answered a request that stopped half-way, and gave each connection a
/// thread: a client could hold threads without end.
#[test]
fn a_client_that_stops_half_way_is_answered_408_and_closed() {
    let run = Run::start();
    let start = Instant::now();
    let slow: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut s = run.connect();
            s.write_all(b"GET /stats HTTP/1.1\r\nX: a").unwrap();
            s
        })
        .collect();
    // Others are served meanwhile.
    assert_eq!(statuses(&run.exchange(GOOD)), [200]);
    for s in slow {
        let r = read_all(s);
        assert_eq!(statuses(&r), [408], "{}", String::from_utf8_lossy(&r));
    }
    let took = start.elapsed();
    assert!(took < Duration::from_secs(15), "{took:?}");
    assert_eq!(statuses(&run.exchange(GOOD)), [200]);
}

/// An NF's error quotes the command it was sent: control characters in it come back
/// escaped, so an answer read on a terminal cannot carry an escape sequence. Before, only
/// line ends were replaced and `\x1b[2J` came back raw.
#[test]
fn a_command_error_quotes_control_characters_escaped() {
    let run = Run::start();
    let cmd = b"allow_ports 8\x1b[2J\x07";
    let mut req = format!(
        "POST /nf/fw HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        cmd.len()
    )
    .into_bytes();
    req.extend_from_slice(cmd);
    let r = run.exchange(&req);
    assert_eq!(statuses(&r), [400], "{}", String::from_utf8_lossy(&r));
    let b = body(&r);
    assert!(b.starts_with("error "), "{b:?}");
    assert!(
        !b.trim_end_matches('\n').chars().any(|c| c.is_control()),
        "raw control characters in {b:?}"
    );
    assert!(
        b.contains("\\u{1b}[2J"),
        "the quoted command, escaped: {b:?}"
    );
}

/// The run's thread count.
fn threads(run: &Run) -> usize {
    let s = std::fs::read_to_string(format!("/proc/{}/status", run.child.id())).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

/// Slowloris: before session 25, 32 connections that sent nothing (or half a head) held
/// every slot for 10 s, and a good request meanwhile got `503 busy`; by reconnecting, an
/// attacker kept the API unavailable. Now a new connection takes the slot of the one that
/// has waited longest on its client: the good request is answered at once, the evicted
/// half heads get `408`, the silent ones are closed, and the threads stay bounded.
#[test]
fn connections_that_hold_every_slot_give_way_to_a_new_one() {
    let run = Run::start();
    let base = threads(&run);
    let start = Instant::now();
    // Twice the slots: even ones silent, odd ones half a head.
    let held: Vec<TcpStream> = (0..64)
        .map(|i| {
            let mut s = run.connect();
            if i % 2 == 1 {
                s.write_all(b"GET /stats HTTP/1.1\r\nX: a").unwrap();
            }
            s
        })
        .collect();
    for _ in 0..3 {
        let r = run.exchange(GOOD);
        assert_eq!(statuses(&r), [200], "{}", String::from_utf8_lossy(&r));
    }
    assert!(threads(&run) <= base + 32, "{} threads", threads(&run));
    // The oldest were evicted (one per newer connection), long before their 10 s.
    for (i, s) in held.into_iter().enumerate().take(32) {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let r = read_all(s);
        let want: &[u16] = if i % 2 == 1 { &[408] } else { &[] };
        assert_eq!(
            statuses(&r),
            want,
            "connection {i}: {}",
            String::from_utf8_lossy(&r)
        );
    }
    let took = start.elapsed();
    assert!(took < Duration::from_secs(8), "{took:?}");
}
