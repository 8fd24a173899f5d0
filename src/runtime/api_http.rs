//! The HTTP/1.x server under the API (`api`), bounded whatever a client sends: a request
//! head (request line + headers) of at most [`MAX_HEAD`] bytes and [`MAX_HEADERS`]
//! headers (else `431` and the connection closed), a body of at most `max_body` bytes
//! (else `413`), at most [`MAX_CONNECTIONS`] connections at once (one thread each; more
//! get `503`), and [`REQUEST_TIME`] for a request to arrive whole (else `408`), so a slow
//! or silent client cannot hold a thread. Each connection reads into one buffer of
//! `MAX_HEAD` bytes: memory is that buffer and the body, never what a client streams.
//!
//! When all the slots are taken, a new connection takes the one of the connection that has
//! waited longest on its client (silent, sending a head or body, or not taking its
//! answer), as nginx reuses idle connections when it runs out: silent clients that
//! reconnect cannot keep the API from others, since a real client sends its request as
//! soon as it connects and is then in the handler, which is never evicted.
//!
//! httparse (hyper's parser) parses the head and chunk sizes; this file only frames
//! requests: `Content-Length` or `Transfer-Encoding: chunked` (both at once, differing
//! lengths or another coding are refused, as request smuggling rides on them),
//! `Expect: 100-continue`, keep-alive and pipelining for HTTP/1.1, one request per
//! connection for HTTP/1.0. tiny_http (before session 24) read a header line whole.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Largest request head (request line and headers, with their line ends).
pub const MAX_HEAD: usize = 16 << 10;
/// Most headers in one request.
pub const MAX_HEADERS: usize = 64;
/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 32;
/// Time for one request, head and body, to arrive (and for a kept-alive connection to
/// send its next one).
pub const REQUEST_TIME: Duration = Duration::from_secs(10);
/// Time a response may take to be taken by the client.
const WRITE_TIME: Duration = Duration::from_secs(5);
/// Time an evicted connection's thread has to leave its slot to the new one (it is
/// woken at once; this only bounds a thread that is slow to be scheduled).
const EVICT_WAIT: Duration = Duration::from_millis(500);
/// Time an evicted connection's `408` may take to be sent.
const EVICTED_WRITE_TIME: Duration = Duration::from_millis(100);
/// After refusing a request whose bytes are still coming, the connection reads and
/// discards them for at most this long (or [`LINGER_BYTES`]) before closing: a close
/// with unread input resets the connection, which can lose the refusal on its way.
const LINGER_TIME: Duration = Duration::from_secs(1);
const LINGER_BYTES: usize = 4 << 20;

/// One request, read whole.
pub struct Request {
    pub method: String,
    /// The request target as sent (path and query, not decoded).
    pub target: String,
    pub body: Vec<u8>,
}

impl Request {
    /// The target without its query.
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }
}

/// One response: a status, a content type and a body (left out for `HEAD`).
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
}

impl Response {
    pub fn text(status: u16, body: impl Into<String>) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=UTF-8",
            body: body.into(),
        }
    }
}

pub type Handler = Arc<dyn Fn(&Request) -> Response + Send + Sync>;

/// The running server; dropping it stops accepting (connections being served end by
/// their own time bounds).
pub struct Server {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Serves `listener`: each request read within the bounds goes to `handler`.
pub fn serve(listener: TcpListener, max_body: usize, handler: Handler) -> std::io::Result<Server> {
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let thread = std::thread::Builder::new()
        .name("api".into())
        .spawn(move || accept_loop(listener, max_body, handler, st))?;
    Ok(Server {
        stop,
        thread: Some(thread),
    })
}

/// Whether the listener has a connection waiting, within `ms` milliseconds.
fn readable(l: &TcpListener, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd: l.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the call's duration.
    unsafe { libc::poll(&mut p, 1, ms) > 0 }
}

fn accept_loop(l: TcpListener, max_body: usize, handler: Handler, stop: Arc<AtomicBool>) {
    let slots = Arc::new(Slots::default());
    let mut next_id = 0u64;
    while !stop.load(Ordering::Relaxed) {
        // Polled so that a drop is seen within 200 ms.
        if !readable(&l, 200) {
            continue;
        }
        let Ok((mut s, _)) = l.accept() else {
            // Out of file descriptors, say: the connection stays queued, and polling again
            // at once would spin.
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        next_id += 1;
        let id = next_id;
        let evicted = Arc::new(AtomicBool::new(false));
        if !slots.admit(id, &s, &evicted) {
            // Best effort: the client may not be reading.
            let _ = s.set_write_timeout(Some(Duration::from_millis(100)));
            let busy = Response::text(503, "busy: too many connections at once\n");
            let _ = s.write_all(&encode(&busy, Version::Http11, true, false));
            continue;
        }
        let (h, sl, st) = (handler.clone(), slots.clone(), stop.clone());
        // A thread that cannot be made closes this connection; the server carries on.
        let spawned = std::thread::Builder::new()
            .name("api-conn".into())
            .spawn(move || {
                let _leave = Leave(&sl, id);
                Conn::new(s, max_body, &sl, id, evicted).serve(&*h, &st);
            });
        if spawned.is_err() {
            slots.leave(id);
        }
    }
}

/// What a connection's thread is doing, for the choice of whom to evict.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for a request (or its rest) since then.
    Reading(Instant),
    /// Waiting for the client to take an answer since then.
    Writing(Instant),
    /// In the handler: never evicted (`MAX_IN_FLIGHT` bounds these below the slots).
    Handling,
}

struct Slot {
    id: u64,
    /// A handle on the connection's socket, to wake its thread by a shutdown.
    stream: TcpStream,
    phase: Phase,
    evicted: Arc<AtomicBool>,
}

/// The connections being served: at most [`MAX_CONNECTIONS`].
#[derive(Default)]
struct Slots {
    list: Mutex<Vec<Slot>>,
    left: Condvar,
}

impl Slots {
    /// Takes a slot for connection `id`, evicting the connection waiting longest on its
    /// client when all are taken; false when none can be had.
    fn admit(&self, id: u64, s: &TcpStream, evicted: &Arc<AtomicBool>) -> bool {
        let Ok(stream) = s.try_clone() else {
            return false;
        };
        let mut list = self.list.lock().unwrap_or_else(|e| e.into_inner());
        if list.len() >= MAX_CONNECTIONS {
            let since = |p: Phase| match p {
                Phase::Reading(t) | Phase::Writing(t) => Some(t),
                Phase::Handling => None,
            };
            let oldest = list
                .iter()
                .filter(|c| !c.evicted.load(Ordering::Relaxed))
                .filter_map(|c| since(c.phase).map(|t| (t, c)))
                .min_by_key(|(t, _)| *t)
                .map(|(_, c)| c);
            if let Some(c) = oldest {
                c.evicted.store(true, Ordering::Release);
                // A reader is woken by the end of its input and answers 408 if a
                // request had begun; a writer blocked on a client that does not read
                // can only be stopped by closing both ways.
                let how = match c.phase {
                    Phase::Writing(_) => std::net::Shutdown::Both,
                    _ => std::net::Shutdown::Read,
                };
                let _ = c.stream.shutdown(how);
            }
            let end = Instant::now() + EVICT_WAIT;
            while list.len() >= MAX_CONNECTIONS {
                let t = end.saturating_duration_since(Instant::now());
                if t.is_zero() {
                    return false;
                }
                list = self
                    .left
                    .wait_timeout(list, t)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        }
        list.push(Slot {
            id,
            stream,
            phase: Phase::Reading(Instant::now()),
            evicted: evicted.clone(),
        });
        true
    }

    fn set(&self, id: u64, phase: Phase) {
        let mut list = self.list.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = list.iter_mut().find(|c| c.id == id) {
            c.phase = phase;
        }
    }

    fn leave(&self, id: u64) {
        let mut list = self.list.lock().unwrap_or_else(|e| e.into_inner());
        list.retain(|c| c.id != id);
        self.left.notify_all();
    }
}

/// Frees a connection's slot when its thread ends, however it ends.
struct Leave<'a>(&'a Slots, u64);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0.leave(self.1);
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Version {
    Http10,
    Http11,
}

/// Why a connection stops: a refusal answered with `status`, or nothing to answer.
enum Stop {
    Refuse(u16, &'static str),
    /// The client closed, or was silent past the time, between requests.
    Quiet,
}

/// How a request's body is framed.
enum Framing {
    Length(u64),
    Chunked,
}

/// What the head says about the request, beyond method and target.
struct Head {
    method: String,
    target: String,
    version: Version,
    framing: Framing,
    keep_alive: bool,
    expect_continue: bool,
}

struct Conn<'a> {
    s: TcpStream,
    slots: &'a Slots,
    id: u64,
    /// Set when a newer connection took this one's slot.
    evicted: Arc<AtomicBool>,
    /// Bytes read and not yet used are `buf[start..end]`.
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    max_body: usize,
}

/// Reading more failed: the buffer is full, the stream ended, or the time ran out.
enum Fill {
    Full,
    Eof,
    Late,
    Broken,
    /// The connection was evicted for a newer one.
    Evicted,
}

/// Why an evicted connection with a request begun is answered `408`.
const EVICTED: &str =
    "the request did not arrive in time: its connection went to a newer one (32 at once)";

impl<'a> Conn<'a> {
    fn new(
        s: TcpStream,
        max_body: usize,
        slots: &'a Slots,
        id: u64,
        evicted: Arc<AtomicBool>,
    ) -> Conn<'a> {
        Conn {
            s,
            slots,
            id,
            evicted,
            buf: vec![0; MAX_HEAD].into_boxed_slice(),
            start: 0,
            end: 0,
            max_body,
        }
    }

    fn serve(mut self, handler: &dyn Fn(&Request) -> Response, stop: &AtomicBool) {
        let _ = self.s.set_write_timeout(Some(WRITE_TIME));
        while !stop.load(Ordering::Relaxed) {
            let deadline = Instant::now() + REQUEST_TIME;
            let head = match self.read_head(deadline) {
                Ok(h) => h,
                Err(Stop::Quiet) => return,
                Err(Stop::Refuse(code, why)) => return self.refuse(code, why, Version::Http11),
            };
            let body = match self.read_body(&head, deadline) {
                Ok(b) => b,
                Err(Stop::Quiet) => return,
                Err(Stop::Refuse(code, why)) => return self.refuse(code, why, head.version),
            };
            self.slots.set(self.id, Phase::Handling);
            let req = Request {
                method: head.method,
                target: head.target,
                body,
            };
            let resp = handler(&req);
            let close = !head.keep_alive;
            let bytes = encode(&resp, head.version, close, req.method == "HEAD");
            if self.send(&bytes).is_err() || close {
                return;
            }
            self.slots.set(self.id, Phase::Reading(Instant::now()));
        }
    }

    /// Writes an answer, as a connection that waits on its client (and may be evicted).
    fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.slots.set(self.id, Phase::Writing(Instant::now()));
        if self.evicted.load(Ordering::Acquire) {
            self.s.set_write_timeout(Some(EVICTED_WRITE_TIME))?;
        }
        self.s.write_all(bytes)
    }

    /// Answers `code` and closes, reading what the client still sends for a moment.
    fn refuse(mut self, code: u16, why: &str, v: Version) {
        let r = Response::text(code, format!("error {why}\n"));
        if self.send(&encode(&r, v, true, false)).is_err() {
            return;
        }
        let _ = self.s.shutdown(std::net::Shutdown::Write);
        let end = Instant::now() + LINGER_TIME;
        let mut left = LINGER_BYTES;
        while left > 0 {
            let t = end.saturating_duration_since(Instant::now());
            if t.is_zero() || self.s.set_read_timeout(Some(t)).is_err() {
                return;
            }
            match self.s.read(&mut self.buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    }

    /// Reads more bytes after `buf[start..end]`, moving those to the front if need be.
    fn fill(&mut self, deadline: Instant) -> Result<(), Fill> {
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        }
        if self.end == self.buf.len() {
            if self.start == 0 {
                return Err(Fill::Full);
            }
            self.buf.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
        }
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || self.s.set_read_timeout(Some(left)).is_err() {
                return Err(Fill::Late);
            }
            let got = self.s.read(&mut self.buf[self.end..]);
            if matches!(got, Ok(0) | Err(_)) && self.evicted.load(Ordering::Acquire) {
                return Err(Fill::Evicted);
            }
            match got {
                Ok(0) => return Err(Fill::Eof),
                Ok(n) => {
                    self.end += n;
                    return Ok(());
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Err(Fill::Late)
                }
                Err(_) => return Err(Fill::Broken),
            }
        }
    }

    fn read_head(&mut self, deadline: Instant) -> Result<Head, Stop> {
        loop {
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut req = httparse::Request::new(&mut headers);
            match req.parse(&self.buf[self.start..self.end]) {
                Ok(httparse::Status::Complete(n)) => {
                    let head = head_of(&req)?;
                    self.start += n;
                    return Ok(head);
                }
                Ok(httparse::Status::Partial) => {}
                Err(httparse::Error::TooManyHeaders) => {
                    return Err(Stop::Refuse(431, "more than 64 headers"))
                }
                Err(httparse::Error::Version) => {
                    return Err(Stop::Refuse(
                        505,
                        "this server speaks HTTP/1.0 and HTTP/1.1",
                    ))
                }
                Err(_) => return Err(Stop::Refuse(400, "not an HTTP/1.x request")),
            }
            // Empty lines between requests are allowed (RFC 9112 2.2): some clients end a
            // body with an extra CRLF.
            let nothing = self.buf[self.start..self.end]
                .iter()
                .all(|b| matches!(b, b'\r' | b'\n'));
            match self.fill(deadline) {
                Ok(()) => {}
                Err(Fill::Full) => {
                    return Err(Stop::Refuse(
                        431,
                        "request line and headers longer than 16384 bytes",
                    ))
                }
                Err(Fill::Late) if !nothing => {
                    return Err(Stop::Refuse(408, "the request did not arrive in 10 s"))
                }
                Err(Fill::Evicted) if !nothing => return Err(Stop::Refuse(408, EVICTED)),
                Err(Fill::Eof) if !nothing => {
                    return Err(Stop::Refuse(
                        400,
                        "the request ended before its headers did",
                    ))
                }
                Err(_) => return Err(Stop::Quiet),
            }
        }
    }

    fn read_body(&mut self, head: &Head, deadline: Instant) -> Result<Vec<u8>, Stop> {
        let too_long = Stop::Refuse(413, "the command is longer than 4096 bytes");
        if let Framing::Length(n) = head.framing {
            if n > self.max_body as u64 {
                return Err(too_long);
            }
        }
        let has_body = !matches!(head.framing, Framing::Length(0));
        if head.expect_continue && has_body && head.version == Version::Http11 {
            let _ = self.s.write_all(b"HTTP/1.1 100 Continue\r\n\r\n");
        }
        let mut body = Vec::new();
        match head.framing {
            Framing::Length(n) => self.take(n as usize, &mut body, deadline)?,
            Framing::Chunked => loop {
                let (used, size) = loop {
                    match httparse::parse_chunk_size(&self.buf[self.start..self.end]) {
                        Ok(httparse::Status::Complete(c)) => break c,
                        Ok(httparse::Status::Partial) => self.more(deadline)?,
                        Err(_) => return Err(Stop::Refuse(400, "bad chunk size line")),
                    }
                };
                self.start += used;
                if size == 0 {
                    self.trailers(deadline)?;
                    break;
                }
                // Not `body.len() + size`: a size near 2^64 would wrap the sum.
                if size > (self.max_body - body.len()) as u64 {
                    return Err(too_long);
                }
                self.take(size as usize, &mut body, deadline)?;
                let mut crlf = Vec::new();
                self.take(2, &mut crlf, deadline)?;
                if crlf != b"\r\n" {
                    return Err(Stop::Refuse(400, "a chunk's data is not followed by CRLF"));
                }
            },
        }
        Ok(body)
    }

    /// Moves the next `n` bytes of the stream into `out`.
    fn take(&mut self, mut n: usize, out: &mut Vec<u8>, deadline: Instant) -> Result<(), Stop> {
        while n > 0 {
            if self.start == self.end {
                self.more(deadline)?;
            }
            let k = n.min(self.end - self.start);
            out.extend_from_slice(&self.buf[self.start..self.start + k]);
            self.start += k;
            n -= k;
        }
        Ok(())
    }

    /// Skips a chunked body's trailer section (bounded as a head is).
    fn trailers(&mut self, deadline: Instant) -> Result<(), Stop> {
        loop {
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            match httparse::parse_headers(&self.buf[self.start..self.end], &mut headers) {
                Ok(httparse::Status::Complete((n, _))) => {
                    self.start += n;
                    return Ok(());
                }
                Ok(httparse::Status::Partial) => self.more(deadline)?,
                Err(_) => return Err(Stop::Refuse(400, "bad trailer after the last chunk")),
            }
        }
    }

    /// Reads more of a request begun: every failure is the request's.
    fn more(&mut self, deadline: Instant) -> Result<(), Stop> {
        self.fill(deadline).map_err(|f| match f {
            Fill::Full => Stop::Refuse(400, "a chunk size line or trailer longer than 16384 bytes"),
            Fill::Late => Stop::Refuse(408, "the request did not arrive in 10 s"),
            Fill::Eof => Stop::Refuse(400, "the request ended before its body did"),
            Fill::Evicted => Stop::Refuse(408, EVICTED),
            Fill::Broken => Stop::Quiet,
        })
    }
}

/// Checks the framing headers of a parsed head.
fn head_of(req: &httparse::Request) -> Result<Head, Stop> {
    let version = if req.version == Some(0) {
        Version::Http10
    } else {
        Version::Http11
    };
    let (mut length, mut chunked, mut close, mut keep, mut expect) =
        (None::<u64>, false, false, false, false);
    for h in req.headers.iter() {
        let value = std::str::from_utf8(h.value).unwrap_or("\u{0}").trim();
        let name = h.name;
        if name.eq_ignore_ascii_case("content-length") {
            let n = value
                .parse::<u64>()
                .ok()
                .filter(|_| value.bytes().all(|b| b.is_ascii_digit()))
                .ok_or(Stop::Refuse(400, "Content-Length is not a number"))?;
            if length.is_some_and(|l| l != n) {
                return Err(Stop::Refuse(400, "two different Content-Length headers"));
            }
            length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            if !value.eq_ignore_ascii_case("chunked") || chunked {
                return Err(Stop::Refuse(
                    501,
                    "the only transfer coding taken is one `chunked`",
                ));
            }
            chunked = true;
        } else if name.eq_ignore_ascii_case("connection") {
            for t in value.split(',').map(str::trim) {
                close |= t.eq_ignore_ascii_case("close");
                keep |= t.eq_ignore_ascii_case("keep-alive");
            }
        } else if name.eq_ignore_ascii_case("expect") {
            if !value.eq_ignore_ascii_case("100-continue") {
                return Err(Stop::Refuse(
                    417,
                    "the only expectation met is 100-continue",
                ));
            }
            expect = true;
        }
    }
    let framing = match (length, chunked) {
        (Some(_), true) => {
            return Err(Stop::Refuse(
                400,
                "both Content-Length and Transfer-Encoding",
            ))
        }
        (_, true) if version == Version::Http10 => {
            return Err(Stop::Refuse(
                400,
                "Transfer-Encoding in an HTTP/1.0 request",
            ))
        }
        (_, true) => Framing::Chunked,
        (n, false) => Framing::Length(n.unwrap_or(0)),
    };
    Ok(Head {
        method: req.method.unwrap_or("").to_string(),
        target: req.path.unwrap_or("").to_string(),
        version,
        framing,
        keep_alive: match version {
            Version::Http11 => !close,
            Version::Http10 => keep && !close,
        },
        expect_continue: expect,
    })
}

fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Payload Too Large",
        417 => "Expectation Failed",
        431 => "Request Header Fields Too Large",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "",
    }
}

/// The response's bytes: status line, headers, and the body unless `head_only`.
fn encode(r: &Response, v: Version, close: bool, head_only: bool) -> Vec<u8> {
    let version = match v {
        Version::Http10 => "HTTP/1.0",
        Version::Http11 => "HTTP/1.1",
    };
    let connection = match (close, v) {
        (true, _) => "Connection: close\r\n",
        (false, Version::Http10) => "Connection: keep-alive\r\n",
        (false, Version::Http11) => "",
    };
    let mut out = format!(
        "{version} {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{connection}\r\n",
        r.status,
        reason(r.status),
        r.content_type,
        r.body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(r.body.as_bytes());
    }
    out
}
