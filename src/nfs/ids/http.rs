//! A small HTTP/1.x parser for one direction of a flow, fed in-order stream bytes in
//! pieces of any size: start line and headers (bounded), then the body by
//! Content-Length, chunked coding or connection close, decompressed (gzip, deflate, up
//! to a layer limit) into a bounded buffer. It is lenient the way libhtp is: LF-only line
//! ends, blank lines before the start line, junk around chunk sizes.
//!
//! Buffers are allocated when the flow's parser is made and never grow; the inflaters
//! are made on a flow's first compressed body. Each Content-Encoding layer keeps its
//! decoder and its place in its input between segments, so a segment costs the bytes it
//! brings, not the body so far (`decoded_in` counts the bytes fed to decoders).

use flate2::{Decompress, FlushDecompress, Status};

use super::rule::Buf;

/// Limits of one direction's parser.
#[derive(Clone, Copy, Debug)]
pub struct HttpLimits {
    /// Bytes of start line + headers kept (the rest is skipped).
    pub header: usize,
    /// Body bytes kept for inspection, before and after decompression.
    pub body: usize,
    /// Content-Encoding layers undone.
    pub decompress_layers: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            header: 8 * 1024,
            body: 32 * 1024,
            decompress_layers: 3,
        }
    }
}

/// What a call to [`HttpHalf::feed`] stopped at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// All input used; nothing new to inspect.
    Nothing,
    /// A start line and headers are complete (a new message began).
    Headers,
    /// Body bytes were added.
    Body,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Start,
    Headers,
    Body,
    /// The bytes are not HTTP: ignore the rest of this direction.
    NotHttp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Chunk {
    Size,
    Data(u64),
    DataEnd,
    Trailer,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BodyMode {
    None,
    Length(u64),
    Chunked(Chunk),
    Close,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Enc {
    Gzip,
    Deflate,
}

type Range = (usize, usize);

/// The parser for one direction; `request` says which start line to expect.
pub struct HttpHalf {
    request: bool,
    limits: HttpLimits,
    state: State,
    hdr: Vec<u8>,
    line_len: usize,
    lines: usize,
    prev_cr: bool,
    chunk_line: [u8; 64],
    chunk_len: usize,
    mode: BodyMode,
    encs: [Enc; 4],
    n_enc: usize,
    // Spans into `hdr`.
    line: Range,
    first: Range,
    second: Range,
    third: Range,
    headers: Range,
    /// The message's own cookie header's value (Cookie in requests, Set-Cookie in
    /// responses), kept out of `header_norm` as Suricata keeps it out of `http.header`.
    cookie_norm: Vec<u8>,
    user_agent: Range,
    content_type: Range,
    connection: Range,
    host_raw: Range,
    uri_norm: Vec<u8>,
    host_norm: Vec<u8>,
    header_norm: Vec<u8>,
    logical: Vec<u8>,
    raw_body: Vec<u8>,
    body: Vec<u8>,
    inflate: Option<Box<Inflate>>,
    /// A response that began without a status line: its body's lines are watched for
    /// one (libhtp's RES_LINE takes each line that does not look like one as body).
    junk: bool,
    /// `junk`: the next byte starts a line.
    bol: bool,
    /// `junk`: the `HTTP` bytes matched so far at this line's start (not yet body).
    probe: [u8; 4],
    probe_len: usize,
    /// This message's head came after junk body lines (kept as the body's start).
    resynced: bool,
    /// Bytes (blank lines, NULs) came before this direction's first start line.
    lead: bool,
    /// Set by the caller before a response to a HEAD request: no body follows.
    pub no_body: bool,
    /// The last response head was an interim `100 Continue` (no chunked coding, no
    /// Content-Length above 0): libhtp (htp_connp_RES_BODY_DETERMINE) reads the next
    /// response line into the same transaction.
    interim: bool,
    /// This response's head follows an interim `100 Continue` of the same transaction.
    pub continues: bool,
    /// A chunked body's trailer section just ended, where libhtp runs its trailer hook
    /// (Suricata then inspects the header buffer again); the caller clears it.
    pub trailer_done: bool,
    /// Messages whose headers were parsed.
    pub messages: u64,
    /// Bytes fed to the Content-Encoding decoders (each layer's input), over the life of
    /// this direction: the work decompression did.
    pub decoded_in: u64,
}

/// One Content-Encoding layer being undone, streamed: its decoder and how far into its
/// input (the raw body, or the layer below's output) it has read.
struct Layer {
    z: Decompress,
    mode: LayerMode,
    pos: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LayerMode {
    /// The format is not known yet (too few bytes, or a gzip header cut short).
    Sniff,
    Inflate,
    /// Undecodable from its first byte: passed through unchanged, as libhtp does.
    Pass,
    /// Stream end, a decoding error after some output, or the output is full.
    Done,
}

/// The decoders of one direction and the outputs of all layers but the last (which
/// writes the body). Made on the direction's first compressed body, reused after.
struct Inflate {
    layers: Vec<Layer>,
    mids: Vec<Vec<u8>>,
}

/// Heap of one inflater (miniz_oxide's state: the 32 KiB window and its Huffman
/// tables), rounded up; tests/app_memory.rs measures it.
pub const INFLATER_BYTES: usize = 48 * 1024;

impl HttpHalf {
    /// Heap one direction's parser may hold at most with `l`: the header buffer and its
    /// three normalised copies (which may outgrow it once: `a:b\n` becomes `a: b\r\n`)
    /// and the cookie value, the raw and decoded bodies and the outputs between layers
    /// (at most 4 layers: 5 body buffers), and one inflater per layer undone.
    pub fn max_heap(l: HttpLimits) -> usize {
        let layers = l.decompress_layers.min(4);
        l.header
            .saturating_mul(8)
            .saturating_add(2 * 256)
            .saturating_add(l.body.saturating_mul(5))
            .saturating_add(INFLATER_BYTES.saturating_mul(layers))
    }

    pub fn new(request: bool, limits: HttpLimits) -> HttpHalf {
        HttpHalf {
            request,
            limits,
            state: State::Start,
            hdr: Vec::new(),
            line_len: 0,
            lines: 0,
            prev_cr: false,
            chunk_line: [0; 64],
            chunk_len: 0,
            mode: BodyMode::None,
            encs: [Enc::Gzip; 4],
            n_enc: 0,
            line: (0, 0),
            first: (0, 0),
            second: (0, 0),
            third: (0, 0),
            headers: (0, 0),
            cookie_norm: Vec::new(),
            user_agent: (0, 0),
            content_type: (0, 0),
            connection: (0, 0),
            host_raw: (0, 0),
            uri_norm: Vec::new(),
            host_norm: Vec::new(),
            header_norm: Vec::new(),
            logical: Vec::new(),
            raw_body: Vec::new(),
            body: Vec::new(),
            inflate: None,
            junk: false,
            bol: false,
            probe: [0; 4],
            probe_len: 0,
            resynced: false,
            no_body: false,
            messages: 0,
            decoded_in: 0,
            interim: false,
            continues: false,
            lead: false,
            trailer_done: false,
        }
    }

    /// The first message's head began at this direction's first byte: Suricata's
    /// protocol detection looks for a method or `HTTP/` only there.
    pub fn head_at_start(&self) -> bool {
        self.messages == 1 && !self.lead
    }

    pub fn gave_up(&self) -> bool {
        self.state == State::NotHttp
    }

    /// No message is open: the last one's headers and body are complete (or none began).
    pub fn complete(&self) -> bool {
        self.state == State::Start
            || (self.state == State::Body
                && matches!(self.mode, BodyMode::None | BodyMode::Length(0)))
    }

    /// The request method of the last request (empty for responses).
    pub fn method(&self) -> &[u8] {
        if self.request {
            self.get(self.first)
        } else {
            &[]
        }
    }

    /// The direction closed: headers cut short by the close are taken as complete
    /// (libhtp does the same). Returns true when that completed a message's headers.
    pub fn close(&mut self) -> bool {
        if self.state == State::Headers && !self.hdr.is_empty() {
            self.finish_headers();
            self.state = State::Start;
            return true;
        }
        false
    }

    /// `n` bytes of the stream are missing (a gap the receiver acknowledged). Inside a
    /// body whose end is known (Content-Length, or until close) they count as body bytes
    /// not seen, as libhtp takes a gap there; anywhere else the message's framing is
    /// lost and this direction is no longer parsed.
    pub fn gap(&mut self, n: u64) {
        match (self.state, self.mode) {
            (State::Body, BodyMode::Length(m)) if n <= m => {
                self.mode = BodyMode::Length(m - n);
                if m == n {
                    self.state = State::Start;
                }
            }
            (State::Body, BodyMode::Close) => {}
            // libhtp takes the body's remaining bytes from the gap, ends the response
            // and refuses the rest of the gap (below).
            (State::Body, BodyMode::Length(_)) if !self.request => {
                self.mode = BodyMode::Length(0);
                self.state = State::Start;
            }
            // Elsewhere libhtp refuses a response's gap and leaves its state as it was
            // (htp_connp_res_data: "Gaps are not allowed during this state"): between
            // responses the next bytes are parsed as a new response, inside a chunk they
            // go on counting as that chunk's bytes. Requests keep stopping (ignoring the
            // gap there added a request Suricata does not see).
            (State::Start | State::Body, _) if !self.request => {}
            _ => self.state = State::NotHttp,
        }
    }

    /// Consumes a prefix of `data`, stopping after an event; call again with the rest.
    pub fn feed(&mut self, data: &[u8]) -> (usize, Event) {
        match self.state {
            State::NotHttp => (data.len(), Event::Nothing),
            State::Start => {
                // Blank lines and NULs before a start line are skipped.
                let skip = data
                    .iter()
                    .position(|&b| !is_space(b) && b != 0)
                    .unwrap_or(data.len());
                self.lead |= skip > 0 && self.messages == 0;
                if skip == data.len() {
                    return (skip, Event::Nothing);
                }
                self.begin_message();
                let (n, ev) = self.feed_headers(&data[skip..]);
                (skip + n, ev)
            }
            State::Headers => self.feed_headers(data),
            State::Body if self.junk => self.feed_junk(data),
            State::Body => self.feed_body(data),
        }
    }

    fn begin_message(&mut self) {
        // Buffers are sized on a direction's first message, so flows that never carry
        // HTTP cost nothing; they never grow afterwards.
        if self.hdr.capacity() == 0 {
            let h = self.limits.header;
            for v in [
                &mut self.hdr,
                &mut self.uri_norm,
                &mut self.header_norm,
                &mut self.logical,
                &mut self.cookie_norm,
            ] {
                v.reserve_exact(h);
            }
            self.host_norm.reserve_exact(256);
        }
        self.state = State::Headers;
        self.hdr.clear();
        self.raw_body.clear();
        self.body.clear();
        self.junk = false;
        self.resynced = false;
        self.line_len = 0;
        self.lines = 0;
        self.prev_cr = false;
        self.n_enc = 0;
        self.reset_decoders();
    }

    fn feed_headers(&mut self, data: &[u8]) -> (usize, Event) {
        if !self.request && self.lines == 0 && self.hdr.is_empty() && !data.is_empty() {
            let n = data.len().min(5);
            if !data[..n].eq_ignore_ascii_case(&b"HTTP/"[..n]) {
                // No status line: body until close, or until a line that looks like
                // one (see `feed_junk`).
                self.messages += 1;
                self.parse_head(false);
                self.state = State::Body;
                self.junk = true;
                self.bol = false;
                self.probe_len = 0;
                let (n, _) = self.feed_junk(data);
                return (n, Event::Headers);
            }
        }
        let mut i = 0;
        while i < data.len() {
            let rest = &data[i..];
            let Some(p) = memchr::memchr(b'\n', rest) else {
                self.keep(rest);
                self.line_len += rest.len();
                self.prev_cr = rest.last() == Some(&b'\r');
                return (data.len(), Event::Nothing);
            };
            let seg = &rest[..=p];
            let line_start = self.hdr.len() - self.line_len.min(self.hdr.len());
            self.keep(seg);
            i += p + 1;
            // A line of only whitespace ends the headers, as in libhtp.
            let blank = trim_slice(&self.hdr[line_start..]).is_empty();
            self.line_len = 0;
            self.prev_cr = false;
            self.lines += 1;
            if self.lines == 1 {
                if !self.start_line_ok() {
                    if self.request {
                        self.state = State::NotHttp;
                        return (data.len(), Event::Nothing);
                    }
                    // A response whose first line is not a status line: all body.
                    let (hdr, raw) = (std::mem::take(&mut self.hdr), &mut self.raw_body);
                    raw.clear();
                    self.hdr = hdr;
                    self.parse_head(false);
                    self.state = State::Body;
                    self.messages += 1;
                    let kept = std::mem::take(&mut self.hdr);
                    self.append_body(&kept);
                    self.hdr = kept;
                    self.hdr.clear();
                    self.junk = true;
                    self.bol = true;
                    self.probe_len = 0;
                    return (i, Event::Headers);
                }
                if self.request && self.split_words(self.hdr.len()).2 == (0, 0) {
                    // HTTP/0.9 request: the line alone.
                    self.finish_headers();
                    return (i, Event::Headers);
                }
            } else if blank {
                self.finish_headers();
                return (i, Event::Headers);
            }
        }
        (data.len(), Event::Nothing)
    }

    /// Body of a response that has no status line yet, line by line as libhtp's
    /// RES_LINE reads it (htp_treat_response_line_as_body): a line whose first bytes
    /// after blanks and NULs are `HTTP` (any case) is the status line of this same
    /// transaction, the lines before it are its body. A server stream that opens with a
    /// gap and the end of a body resynchronises so on the next response.
    fn feed_junk(&mut self, data: &[u8]) -> (usize, Event) {
        let mut i = 0;
        let mut added = false;
        while i < data.len() {
            if !self.bol {
                let rest = &data[i..];
                let end = memchr::memchr(b'\n', rest).map_or(rest.len(), |p| p + 1);
                added |= self.append_body(&rest[..end]);
                self.bol = rest[end - 1] == b'\n';
                i += end;
                continue;
            }
            let b = data[i];
            if self.probe_len == 0 && b != b'\n' && (is_space(b) || b == 0) {
                added |= self.append_body(&data[i..=i]);
                i += 1;
                continue;
            }
            if b.eq_ignore_ascii_case(&b"HTTP"[self.probe_len]) {
                self.probe[self.probe_len] = b;
                self.probe_len += 1;
                i += 1;
                if self.probe_len == 4 {
                    // Headers of the same message: the body so far stays its start.
                    self.junk = false;
                    self.resynced = true;
                    self.probe_len = 0;
                    self.state = State::Headers;
                    self.hdr.clear();
                    let probe = self.probe;
                    self.keep(&probe);
                    self.line_len = 4;
                    self.lines = 0;
                    self.prev_cr = false;
                    break;
                }
                continue;
            }
            // Not a status line: the bytes held for the probe are body after all.
            let (probe, n) = (self.probe, self.probe_len);
            added |= self.append_body(&probe[..n]);
            self.probe_len = 0;
            self.bol = false;
        }
        (i, if added { Event::Body } else { Event::Nothing })
    }

    fn keep(&mut self, b: &[u8]) {
        let room = self.limits.header - self.hdr.len();
        self.hdr.extend_from_slice(&b[..b.len().min(room)]);
    }

    fn start_line_ok(&self) -> bool {
        let h = &self.hdr;
        if self.request {
            let n = h.iter().take_while(|b| b.is_ascii_alphabetic()).count();
            n > 0 && matches!(h.get(n), Some(b' ' | b'\t'))
        } else {
            h.len() >= 5 && h[..5].eq_ignore_ascii_case(b"HTTP/")
        }
    }

    fn finish_headers(&mut self) {
        self.messages += 1;
        self.parse_head(true);
        if self.resynced && self.n_enc > 0 {
            // libhtp decodes only what follows the headers; our decoders read the raw
            // body from its start, so the junk before them is dropped (a simplification).
            self.raw_body.clear();
            self.body.clear();
        }
        self.state = match self.mode {
            BodyMode::None => State::Start,
            _ => State::Body,
        };
        self.no_body = false;
    }

    fn get(&self, r: Range) -> &[u8] {
        self.hdr.get(r.0..r.1).unwrap_or(&[])
    }

    /// The three words of the start line ending at `end`.
    fn split_words(&self, end: usize) -> (Range, Range, Range) {
        let h = &self.hdr[..end];
        let mut e = h.len();
        while e > 0 && matches!(h[e - 1], b'\r' | b'\n') {
            e -= 1;
        }
        let ws = |b: u8| b == b' ' || b == b'\t';
        let mut words = [(0usize, 0usize); 3];
        let mut i = 0;
        for (w, slot) in words.iter_mut().enumerate() {
            while i < e && ws(h[i]) {
                i += 1;
            }
            if i >= e {
                break;
            }
            let s = i;
            if w == 2 {
                i = e;
            } else {
                while i < e && !ws(h[i]) {
                    i += 1;
                }
            }
            *slot = (s, i);
        }
        // A request line's URI may hold spaces: the protocol is the last word.
        (words[0], words[1], words[2])
    }

    /// Reads the start line and headers in `hdr` and decides how the body is framed.
    /// Folded lines (starting with a space or tab) continue the previous header.
    fn parse_head(&mut self, has_start: bool) {
        let h_len = self.hdr.len();
        let line_end = if has_start {
            line_after(&self.hdr, 0)
        } else {
            0
        };
        let (a, b, c) = if has_start {
            self.split_words(line_end)
        } else {
            ((0, 0), (0, 0), (0, 0))
        };
        self.line = (0, trim_end(&self.hdr, 0, line_end));
        self.first = a;
        self.second = b;
        self.third = c;
        self.headers = (line_end, h_len);
        self.cookie_norm.clear();
        self.user_agent = (0, 0);
        self.content_type = (0, 0);
        self.connection = (0, 0);
        self.host_raw = (0, 0);
        self.header_norm.clear();
        self.n_enc = 0;
        let (mut clen, mut chunked) = (None::<u64>, false);
        let mut pos = line_end;
        while pos < h_len {
            // One logical line: this line plus its folded continuations.
            self.logical.clear();
            let mut first = true;
            while pos < h_len {
                let end = line_after(&self.hdr, pos);
                let line = &self.hdr[pos..trim_end(&self.hdr, pos, end)];
                // A continuation that holds a colon is taken as a header of its own.
                let folded = matches!(line.first(), Some(b' ' | b'\t'));
                if !first && !folded {
                    break;
                }
                if !first && trim_slice(line).is_empty() {
                    break;
                }
                let line = if first {
                    line
                } else {
                    self.logical.push(b' ');
                    let n = line
                        .iter()
                        .take_while(|&&b| b == b' ' || b == b'\t')
                        .count();
                    &line[n..]
                };
                let room = self.logical.capacity() - self.logical.len();
                self.logical
                    .extend_from_slice(&line[..line.len().min(room)]);
                first = false;
                pos = end;
            }
            if trim_slice(&self.logical).is_empty() {
                break;
            }
            let Some(colon) = memchr::memchr(b':', &self.logical) else {
                continue;
            };
            let own_cookie = eq_nocase_nozero(
                trim_slice(&self.logical[..colon]),
                if self.request {
                    b"cookie"
                } else {
                    b"set-cookie"
                },
            );
            if own_cookie {
                let v = trim_slice(&self.logical[colon + 1..]);
                let n = v.len().min(self.cookie_norm.capacity());
                self.cookie_norm.clear();
                self.cookie_norm.extend_from_slice(&v[..n]);
                continue;
            }
            let Some(value) = self.push_norm_header(colon) else {
                continue;
            };
            let name = trim_slice(&self.logical[..colon]);
            let is = |want: &[u8]| eq_nocase_nozero(name, want);
            let v = &self.header_norm[value.0..value.1];
            if is(b"content-length") {
                // The first Content-Length counts, as in libhtp.
                clen = clen.or(parse_u64(v));
            } else if is(b"transfer-encoding") {
                chunked |= contains_nocase_nozero(v, b"chunked");
            } else if is(b"content-encoding") {
                self.add_encodings(value);
            } else if is(b"user-agent") {
                self.user_agent = value;
            } else if is(b"content-type") {
                self.content_type = value;
            } else if is(b"connection") {
                self.connection = value;
            } else if is(b"host") {
                self.host_raw = value;
            }
        }
        if self.request {
            self.normalise_request();
        }
        // Chunked coding wins over Content-Length; a body that turns out not to be
        // chunked falls back to plain (see `feed_chunked`).
        let framed = chunked || clen.is_some();
        let code = parse_u64(self.get(self.second)).unwrap_or(200);
        self.continues = self.interim;
        self.interim =
            !self.request && has_start && code == 100 && !chunked && clen.is_none_or(|n| n == 0);
        let no_body = !self.request
            && (self.no_body
                || (!framed && ((100..200).contains(&code) || code == 204 || code == 304)));
        self.mode = if !has_start {
            BodyMode::Close
        } else if no_body {
            BodyMode::None
        } else if chunked {
            BodyMode::Chunked(Chunk::Size)
        } else if let Some(n) = clen {
            if n == 0 {
                BodyMode::None
            } else {
                BodyMode::Length(n)
            }
        } else if self.request {
            BodyMode::None
        } else {
            BodyMode::Close
        };
    }

    /// Appends `name: value\r\n` of the logical line to the header buffer; returns the
    /// value's range there (None when the buffer is full).
    fn push_norm_header(&mut self, colon: usize) -> Option<Range> {
        let HttpHalf {
            logical,
            header_norm,
            ..
        } = self;
        let name = trim_slice(&logical[..colon]);
        let value = trim_slice(&logical[colon + 1..]);
        if header_norm.len() + name.len() + value.len() + 4 > header_norm.capacity() {
            return None;
        }
        header_norm.extend_from_slice(name);
        header_norm.extend_from_slice(b": ");
        let s = header_norm.len();
        header_norm.extend_from_slice(value);
        let e = header_norm.len();
        header_norm.extend_from_slice(b"\r\n");
        Some((s, e))
    }

    fn add_encodings(&mut self, value: Range) {
        let v = &self.header_norm[value.0..value.1];
        for tok in v.split(|&b| b == b',' || is_space(b)) {
            let e = if contains_nocase_nozero(tok, b"gzip") {
                Enc::Gzip
            } else if contains_nocase_nozero(tok, b"deflate") {
                Enc::Deflate
            } else {
                continue;
            };
            if self.n_enc < self.encs.len() {
                self.encs[self.n_enc] = e;
                self.n_enc += 1;
            }
        }
    }

    /// Percent-decodes the URI; lower-cases the host and drops its port.
    fn normalise_request(&mut self) {
        let HttpHalf {
            hdr,
            header_norm,
            uri_norm,
            host_norm,
            second,
            host_raw,
            ..
        } = self;
        uri_norm.clear();
        let uri = &hdr[second.0..second.1];
        // The path (up to `?` or `#`) as libhtp normalises it for Suricata's IDS
        // personality; the rest is only percent-decoded.
        let mut i = if uri.first() == Some(&b'/') {
            normalise_path(uri, uri_norm)
        } else {
            0
        };
        while i < uri.len() && uri_norm.len() < uri_norm.capacity() {
            let b = uri[i];
            if b == b'%' && i + 2 < uri.len() {
                if let (Some(h), Some(l)) = (hex(uri[i + 1]), hex(uri[i + 2])) {
                    uri_norm.push(h << 4 | l);
                    i += 3;
                    continue;
                }
            }
            uri_norm.push(b);
            i += 1;
        }
        host_norm.clear();
        let host = &header_norm[host_raw.0..host_raw.1];
        let host = match host.iter().rposition(|&b| b == b':') {
            Some(p) if !host.starts_with(b"[") || host[..p].ends_with(b"]") => &host[..p],
            _ => host,
        };
        for &b in host.iter().take(host_norm.capacity()) {
            host_norm.push(b.to_ascii_lowercase());
        }
    }

    fn feed_body(&mut self, data: &[u8]) -> (usize, Event) {
        let mut i = 0;
        let mut added = false;
        while i < data.len() && self.state == State::Body {
            match self.mode {
                BodyMode::None => self.state = State::Start,
                BodyMode::Close => {
                    added |= self.append_body(&data[i..]);
                    i = data.len();
                }
                BodyMode::Length(n) => {
                    let take = (n.min((data.len() - i) as u64)) as usize;
                    added |= self.append_body(&data[i..i + take]);
                    i += take;
                    let left = n - take as u64;
                    self.mode = BodyMode::Length(left);
                    if left == 0 {
                        self.state = State::Start;
                    }
                }
                BodyMode::Chunked(c) => {
                    let (used, more) = self.feed_chunked(c, &data[i..]);
                    i += used;
                    added |= more;
                }
            }
        }
        if added || (self.state == State::Start && i == 0) {
            (i, Event::Body)
        } else {
            (i, Event::Nothing)
        }
    }

    /// One step of the chunked decoder; returns bytes used and whether body was added.
    fn feed_chunked(&mut self, c: Chunk, data: &[u8]) -> (usize, bool) {
        match c {
            Chunk::Size | Chunk::Trailer | Chunk::DataEnd => {
                if c == Chunk::Size && self.not_a_chunk_size(data) {
                    // Like libhtp, a body that does not start with a chunk size is read
                    // as plain body until close, from the bytes held so far.
                    let held = self.chunk_len;
                    let line = self.chunk_line;
                    self.chunk_len = 0;
                    self.mode = BodyMode::Close;
                    let grew = self.append_body(&line[..held]);
                    return (0, grew);
                }
                let Some(p) = memchr::memchr(b'\n', data) else {
                    self.take_line(data);
                    return (data.len(), false);
                };
                self.take_line(&data[..p]);
                let line = trim_slice(&self.chunk_line[..self.chunk_len]);
                let blank = line.is_empty();
                let size = chunk_size(line);
                self.chunk_len = 0;
                self.mode = match (c, blank, size) {
                    // libhtp's RES_BODY_CHUNKED_DATA_END skips to the line's end,
                    // whatever it holds.
                    (Chunk::DataEnd, _, _) => BodyMode::Chunked(Chunk::Size),
                    (Chunk::Trailer, true, _) => {
                        self.trailer_done = true;
                        self.state = State::Start;
                        BodyMode::None
                    }
                    (Chunk::Trailer, false, _) => BodyMode::Chunked(Chunk::Trailer),
                    (_, true, _) => BodyMode::Chunked(Chunk::Size),
                    (_, false, Some(0)) => BodyMode::Chunked(Chunk::Trailer),
                    (_, false, Some(n)) => BodyMode::Chunked(Chunk::Data(n)),
                    // Not a chunk size: like libhtp, read the rest as plain body.
                    (_, false, None) => {
                        self.mode = BodyMode::Close;
                        return (0, false);
                    }
                };
                (p + 1, false)
            }
            Chunk::Data(n) => {
                let take = (n.min(data.len() as u64)) as usize;
                let grew = self.append_body(&data[..take]);
                let left = n - take as u64;
                self.mode = BodyMode::Chunked(if left == 0 {
                    Chunk::DataEnd
                } else {
                    Chunk::Data(left)
                });
                (take, grew)
            }
        }
    }

    /// The held size-line bytes plus `data` start (after blanks) with a non-hex byte.
    fn not_a_chunk_size(&self, data: &[u8]) -> bool {
        let held = &self.chunk_line[..self.chunk_len];
        let first = held.iter().chain(data.iter()).find(|&&b| !is_space(b));
        first.is_some_and(|b| !b.is_ascii_hexdigit())
    }

    fn take_line(&mut self, b: &[u8]) {
        let room = self.chunk_line.len() - self.chunk_len;
        let n = b.len().min(room);
        self.chunk_line[self.chunk_len..self.chunk_len + n].copy_from_slice(&b[..n]);
        self.chunk_len += n;
    }

    /// Keeps body bytes up to the limit; false when nothing was added (so a full body is
    /// not inspected again).
    fn append_body(&mut self, b: &[u8]) -> bool {
        if self.raw_body.capacity() == 0 {
            self.raw_body.reserve_exact(self.limits.body);
        }
        let room = self.limits.body.saturating_sub(self.raw_body.len());
        if room == 0 || b.is_empty() {
            return false;
        }
        self.raw_body.extend_from_slice(&b[..b.len().min(room)]);
        if self.n_enc > 0 {
            self.decode();
        }
        true
    }

    /// Undoes the Content-Encoding layers, last applied first, into `body`: each layer
    /// reads only what arrived since its last call.
    fn decode(&mut self) {
        let layers = self.n_enc.min(self.limits.decompress_layers);
        if layers == 0 {
            return;
        }
        let HttpHalf {
            raw_body,
            body,
            inflate,
            decoded_in,
            ..
        } = self;
        let cap = raw_body.capacity();
        if body.capacity() == 0 {
            body.reserve_exact(cap);
        }
        let inf = inflate.get_or_insert_with(|| {
            Box::new(Inflate {
                layers: Vec::with_capacity(layers),
                mids: Vec::with_capacity(layers - 1),
            })
        });
        // A layer deeper than any this direction used before: made once.
        while inf.layers.len() < layers {
            inf.layers.push(Layer {
                z: Decompress::new(false),
                mode: LayerMode::Sniff,
                pos: 0,
            });
        }
        while inf.mids.len() < layers - 1 {
            inf.mids.push(Vec::with_capacity(cap));
        }
        for l in 0..layers {
            let (below, rest) = inf.mids.split_at_mut(l.min(layers - 1));
            let input: &[u8] = if l == 0 { raw_body } else { &below[l - 1] };
            let out = if l == layers - 1 {
                &mut *body
            } else {
                &mut rest[0]
            };
            *decoded_in += inflate_step(&mut inf.layers[l], input, out);
        }
    }

    /// A new message: its layers start from nothing (no allocation).
    fn reset_decoders(&mut self) {
        if let Some(inf) = &mut self.inflate {
            for l in &mut inf.layers {
                l.mode = LayerMode::Sniff;
                l.pos = 0;
            }
            for m in &mut inf.mids {
                m.clear();
            }
        }
    }

    /// File data is the decoded body (not the raw one while nothing is decoded yet). A
    /// compressed stream that ended having decoded nothing (gzip of an empty body) is
    /// empty file data, as libhtp gives it, not its raw bytes.
    pub fn file_data_decoded(&self) -> bool {
        self.n_enc > 0
            && (!self.body.is_empty()
                || self
                    .inflate
                    .as_ref()
                    .is_some_and(|i| i.layers.iter().any(|l| l.mode == LayerMode::Done)))
    }

    /// The bytes of an HTTP buffer this direction holds (empty when not present).
    pub fn buf(&self, b: Buf) -> &[u8] {
        match b {
            Buf::Payload => &[],
            Buf::HttpUri => &self.uri_norm,
            Buf::HttpUriRaw => self.get(self.second),
            Buf::HttpHost => &self.host_norm,
            Buf::HttpHostRaw => norm(&self.header_norm, self.host_raw),
            Buf::HttpMethod => self.method(),
            Buf::HttpProtocol => self.get(if self.request { self.third } else { self.first }),
            Buf::HttpHeader => &self.header_norm,
            Buf::HttpHeaderRaw => self.get(self.headers),
            Buf::HttpCookie => &self.cookie_norm,
            Buf::HttpUserAgent => norm(&self.header_norm, self.user_agent),
            Buf::HttpContentType => norm(&self.header_norm, self.content_type),
            Buf::HttpConnection => norm(&self.header_norm, self.connection),
            Buf::HttpRequestLine | Buf::HttpResponseLine => self.get(self.line),
            Buf::HttpStatCode => self.get(self.second),
            Buf::HttpStatMsg => self.get(self.third),
            Buf::HttpRequestBody => &self.raw_body,
            Buf::FileData => {
                if self.file_data_decoded() {
                    &self.body
                } else {
                    &self.raw_body
                }
            }
        }
    }
}

/// Advances one layer over the input that arrived since its last call, appending to `out`
/// (up to its capacity); returns the input bytes it read. A gzip header is skipped by
/// hand; a deflate body may be zlib-wrapped or raw. Input undecodable from its first byte
/// passes through unchanged, as libhtp does.
fn inflate_step(layer: &mut Layer, input: &[u8], out: &mut Vec<u8>) -> u64 {
    if layer.mode == LayerMode::Sniff {
        // Like libhtp, the format is taken from the bytes (gzip magic, zlib header, else
        // raw deflate), whatever the header named.
        let zlib = input.len() >= 2
            && input[0] & 0x0f == 8
            && (u16::from(input[0]) << 8 | u16::from(input[1])) % 31 == 0;
        let (start, zlib) = match gzip_header_len(input) {
            Some(Some(n)) => (n, false),
            Some(None) => return 0, // header not complete yet
            None => (0, zlib),
        };
        layer.z.reset(zlib);
        layer.pos = start;
        layer.mode = LayerMode::Inflate;
    }
    let mut read = 0;
    if layer.mode == LayerMode::Inflate {
        loop {
            let z = &mut layer.z;
            let (before_in, before_out) = (z.total_in(), out.len());
            let r = z.decompress_vec(
                &input[layer.pos.min(input.len())..],
                out,
                FlushDecompress::None,
            );
            let used = (z.total_in() - before_in) as usize;
            layer.pos += used;
            read += used;
            match r {
                Ok(Status::StreamEnd) => layer.mode = LayerMode::Done,
                Ok(_) if out.len() == out.capacity() => layer.mode = LayerMode::Done,
                Ok(_) if layer.pos >= input.len() => {}
                Ok(_) if out.len() == before_out && z.total_in() == before_in => {}
                Ok(_) => continue,
                // Output so far stands; nothing after the error is decoded.
                Err(_) if !out.is_empty() => layer.mode = LayerMode::Done,
                Err(_) => {
                    layer.mode = LayerMode::Pass;
                    layer.pos = 0;
                }
            }
            break;
        }
    }
    if layer.mode == LayerMode::Pass {
        let n = (input.len() - layer.pos).min(out.capacity() - out.len());
        out.extend_from_slice(&input[layer.pos..layer.pos + n]);
        read += n;
        layer.pos += n;
    }
    read as u64
}

/// Length of a gzip member header: Some(Some(n)), Some(None) when more bytes are needed,
/// None when this is not gzip.
fn gzip_header_len(b: &[u8]) -> Option<Option<usize>> {
    if b.len() < 10 {
        return if b.len() >= 2 && (b[0] != 0x1f || b[1] != 0x8b) {
            None
        } else {
            Some(None)
        };
    }
    if b[0] != 0x1f || b[1] != 0x8b || b[2] != 8 {
        return None;
    }
    let flags = b[3];
    let mut p = 10;
    if flags & 4 != 0 {
        if b.len() < p + 2 {
            return Some(None);
        }
        p += 2 + (b[p] as usize | (b[p + 1] as usize) << 8);
    }
    for bit in [8u8, 16] {
        if flags & bit != 0 {
            match b.get(p..).and_then(|r| memchr::memchr(0, r)) {
                Some(z) => p += z + 1,
                None => return Some(None),
            }
        }
    }
    if flags & 2 != 0 {
        p += 2;
    }
    if p > b.len() {
        return Some(None);
    }
    Some(Some(p))
}

/// Writes the normalised path of `uri` (which starts with `/`) to `out` (within its
/// capacity) and returns where the path ends, as libhtp does it with Suricata 7's
/// default IDS personality (htp_decode_path_inplace, htp_utf8_decode_path_inplace,
/// htp_normalize_uri_path_inplace): percent-decoding (`%2f` too), `\` as `/`, repeated
/// separators compressed, overlong UTF-8 forms of ASCII (`%c0%af`) converted, then
/// dot segments removed (RFC 3986 5.2.4), so `/a/..%c0%af../b` is `/b`. Other UTF-8
/// and `%u` escapes are left as they are (libhtp's best-fit map is not copied).
fn normalise_path(uri: &[u8], out: &mut Vec<u8>) -> usize {
    let end = uri
        .iter()
        .position(|&b| b == b'?' || b == b'#')
        .unwrap_or(uri.len());
    let mut i = 0;
    while i < end && out.len() < out.capacity() {
        let mut b = uri[i];
        i += 1;
        if b == b'%' && i + 1 < end {
            if let (Some(h), Some(l)) = (hex(uri[i]), hex(uri[i + 1])) {
                b = h << 4 | l;
                i += 2;
            }
        }
        if b == b'\\' {
            b = b'/';
        }
        if b == b'/' && out.last() == Some(&b'/') {
            continue;
        }
        out.push(b);
    }
    // Two-byte overlong forms (0xc0/0xc1 and a continuation byte) are ASCII.
    let (mut r, mut w) = (0, 0);
    while r < out.len() {
        let b = out[r];
        if matches!(b, 0xc0 | 0xc1) && out.get(r + 1).is_some_and(|c| c & 0xc0 == 0x80) {
            out[w] = (b & 1) << 6 | (out[r + 1] & 0x3f);
            r += 2;
        } else {
            out[w] = b;
            r += 1;
        }
        w += 1;
    }
    out.truncate(w);
    remove_dot_segments(out);
    end
}

/// RFC 3986 5.2.4 in place (the output never outruns the input).
fn remove_dot_segments(p: &mut Vec<u8>) {
    let n = p.len();
    let (mut r, mut w) = (0, 0);
    // Drops the last segment written (and its `/`).
    fn pop(p: &[u8], w: usize) -> usize {
        p[..w].iter().rposition(|&b| b == b'/').unwrap_or(0)
    }
    while r < n {
        let rest = &p[r..n];
        if rest.starts_with(b"../") {
            r += 3;
        } else if rest.starts_with(b"./") || rest.starts_with(b"/./") {
            r += 2;
        } else if rest == b"/." {
            r += 1;
            p[r] = b'/';
        } else if rest.starts_with(b"/../") {
            r += 3;
            w = pop(p, w);
        } else if rest == b"/.." {
            r += 2;
            p[r] = b'/';
            w = pop(p, w);
        } else if rest == b"." || rest == b".." {
            r = n;
        } else {
            // The first segment, with its leading `/`, moves to the output.
            let mut k = r + 1;
            while k < n && p[k] != b'/' {
                k += 1;
            }
            p.copy_within(r..k, w);
            w += k - r;
            r = k;
        }
    }
    p.truncate(w);
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// A chunk-size line: hex digits, then optional `;extensions` or junk after a space.
fn chunk_size(line: &[u8]) -> Option<u64> {
    let n = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if n == 0 || n > 15 {
        return None;
    }
    let mut v = 0u64;
    for &b in &line[..n] {
        v = v << 4 | u64::from(hex(b)?);
    }
    Some(v)
}

fn parse_u64(b: &[u8]) -> Option<u64> {
    let b = trim_slice(b);
    if b.is_empty() || b.len() > 18 || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(b.iter().fold(0u64, |a, &d| a * 10 + u64::from(d - b'0')))
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n' | 0x0b | 0x0c)
}

fn trim_slice(b: &[u8]) -> &[u8] {
    let s = b.iter().position(|&c| !is_space(c)).unwrap_or(b.len());
    let e = b.iter().rposition(|&c| !is_space(c)).map_or(s, |p| p + 1);
    &b[s..e.max(s)]
}

/// Where the line starting at `pos` ends, past its terminator (CRLF, LF or a lone CR).
fn line_after(h: &[u8], pos: usize) -> usize {
    match memchr::memchr2(b'\r', b'\n', &h[pos..]) {
        None => h.len(),
        Some(p) => {
            let e = pos + p;
            if h[e] == b'\r' && h.get(e + 1) == Some(&b'\n') {
                e + 2
            } else {
                e + 1
            }
        }
    }
}

fn trim_end(h: &[u8], s: usize, mut e: usize) -> usize {
    while e > s && matches!(h[e - 1], b'\r' | b'\n') {
        e -= 1;
    }
    e
}

fn norm(h: &[u8], r: Range) -> &[u8] {
    h.get(r.0..r.1).unwrap_or(&[])
}

/// Header names and values compare as libhtp does: ASCII case and NUL bytes ignored.
fn eq_nocase_nozero(a: &[u8], want: &[u8]) -> bool {
    let mut it = a.iter().filter(|&&b| b != 0);
    want.iter()
        .all(|w| it.next().is_some_and(|b| b.eq_ignore_ascii_case(w)))
        && it.next().is_none()
}

fn contains_nocase_nozero(h: &[u8], n: &[u8]) -> bool {
    if !h.contains(&0) {
        return super::content::find(h, n, true).is_some();
    }
    (0..h.len()).any(|s| {
        let mut it = h[s..].iter().filter(|&&b| b != 0);
        h[s] != 0
            && n.iter()
                .all(|w| it.next().is_some_and(|b| b.eq_ignore_ascii_case(w)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn uri_path_normalised_as_libhtp() {
        // URIs of the merged trace's Nikto scan; Suricata 7 alerts `http.uri;
        // content:"../"` on the last three only.
        let norm = |u: &[u8]| {
            let mut out = Vec::with_capacity(256);
            let end = normalise_path(u, &mut out);
            (out, end)
        };
        for (raw, want) in [
            (&b"/../../../../etc/shadow"[..], &b"/etc/shadow"[..]),
            (
                b"/certsrv/..%c0%af../winnt/system32/cmd.exe",
                b"/winnt/system32/cmd.exe",
            ),
            (b"/a/./b/../c/.", b"/a/c/"),
            (b"/a//b\\..", b"/a/"),
            (b"/scripts/..%c1%1c../winnt", b"/scripts/..\xc1\x1c../winnt"),
            (b"/msadc/..%255c../x", b"/msadc/..%5c../x"),
        ] {
            assert_eq!(norm(raw).0, want, "{}", String::from_utf8_lossy(raw));
        }
        // The path ends at `?`: the query keeps its dot segments.
        assert_eq!(norm(b"/ans.pl?p=../x"), (b"/ans.pl".to_vec(), 7));
    }

    /// Feeds `data` in pieces of `step` bytes, returning the events seen.
    fn feed_all(h: &mut HttpHalf, data: &[u8], step: usize) -> Vec<Event> {
        let mut evs = Vec::new();
        for piece in data.chunks(step) {
            let mut rest = piece;
            while !rest.is_empty() {
                let (n, ev) = h.feed(rest);
                if ev != Event::Nothing {
                    evs.push(ev);
                }
                if n == 0 && ev == Event::Nothing {
                    break;
                }
                rest = &rest[n..];
            }
        }
        evs
    }

    const REQ: &[u8] = b"\r\nGET /a%20b/c.php?x=1 HTTP/1.1\r\nHost: WWW.Example.COM:8080\r\nUser-Agent: Mozilla/5.0\r\n  (folded)\r\nCookie: k=v\r\n\r\n";

    #[test]
    fn request_buffers_at_every_split() {
        for step in 1..REQ.len() {
            let mut h = HttpHalf::new(true, HttpLimits::default());
            let evs = feed_all(&mut h, REQ, step);
            assert_eq!(evs, [Event::Headers], "step {step}");
            assert_eq!(h.buf(Buf::HttpMethod), b"GET");
            assert_eq!(h.buf(Buf::HttpUriRaw), b"/a%20b/c.php?x=1");
            assert_eq!(h.buf(Buf::HttpUri), b"/a b/c.php?x=1");
            assert_eq!(h.buf(Buf::HttpHost), b"www.example.com");
            assert_eq!(h.buf(Buf::HttpUserAgent), b"Mozilla/5.0 (folded)");
            assert_eq!(h.buf(Buf::HttpCookie), b"k=v");
            assert_eq!(h.buf(Buf::HttpProtocol), b"HTTP/1.1");
            assert_eq!(
                h.buf(Buf::HttpHeader),
                &b"Host: WWW.Example.COM:8080\r\nUser-Agent: Mozilla/5.0 (folded)\r\n"[..]
            );
        }
    }

    #[test]
    fn response_after_a_gap_and_body_lines_resynchronises_as_libhtp() {
        // The end of a body whose head the gap took, then two responses: the lines
        // before the first `HTTP` line are the body of the transaction it heads.
        let junk: &[u8] = b"\x89\x01body\n  htTx\r\nmore\r\n0\r\n\r\n";
        let mut resp = junk.to_vec();
        resp.extend_from_slice(
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc\
              HTTP/1.1 404 No\r\nContent-Length: 1\r\n\r\nz",
        );
        for step in 1..resp.len() {
            let mut h = HttpHalf::new(false, HttpLimits::default());
            h.gap(4320);
            let mut heads = Vec::new();
            for piece in resp.chunks(step) {
                let mut rest = piece;
                while !rest.is_empty() {
                    let (n, ev) = h.feed(rest);
                    assert!(n > 0 || ev != Event::Nothing, "step {step}");
                    if ev == Event::Headers {
                        heads.push(h.buf(Buf::HttpStatCode).to_vec());
                    }
                    if h.buf(Buf::HttpStatCode) == b"200" && h.complete() {
                        let mut want = junk.to_vec();
                        want.extend_from_slice(b"abc");
                        assert_eq!(h.buf(Buf::FileData), want, "step {step}");
                    }
                    rest = &rest[n..];
                }
            }
            let want: [&[u8]; 3] = [b"", b"200", b"404"];
            assert_eq!(heads, want, "step {step}");
            assert_eq!(h.buf(Buf::FileData), b"z");
        }
    }

    #[test]
    fn chunked_body_at_every_split() {
        let resp = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\n\r\nHTTP/1.1 404 Nope\r\nContent-Length: 3\r\n\r\nabc";
        for step in 1..resp.len() {
            let mut h = HttpHalf::new(false, HttpLimits::default());
            let mut bodies = Vec::new();
            for piece in resp.chunks(step) {
                let mut rest = piece;
                while !rest.is_empty() {
                    let (n, ev) = h.feed(rest);
                    if ev == Event::Headers {
                        bodies.push(Vec::new());
                    }
                    if ev == Event::Body {
                        if let Some(b) = bodies.last_mut() {
                            *b = h.buf(Buf::FileData).to_vec();
                        }
                    }
                    rest = &rest[n..];
                }
            }
            assert_eq!(
                bodies,
                [b"hello, world".to_vec(), b"abc".to_vec()],
                "step {step}"
            );
            assert_eq!(h.buf(Buf::HttpStatCode), b"404");
            assert_eq!(h.buf(Buf::HttpStatMsg), b"Nope");
        }
    }

    #[test]
    fn gzip_and_deflate_bodies_are_decoded() {
        let plain = b"<html>EICAR-STANDARD-ANTIVIRUS-TEST-FILE</html>";
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(plain).unwrap();
        let gz = gz.finish().unwrap();
        let mut zl = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        zl.write_all(&gz).unwrap();
        let both = zl.finish().unwrap();
        for (enc, body) in [("gzip", gz.clone()), ("gzip, deflate", both)] {
            let mut msg = format!(
                "HTTP/1.1 200 OK\r\nContent-Encoding: {enc}\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )
            .into_bytes();
            msg.extend_from_slice(&body);
            for step in [1, 7, msg.len()] {
                let mut h = HttpHalf::new(false, HttpLimits::default());
                feed_all(&mut h, &msg, step);
                assert_eq!(h.buf(Buf::FileData), plain, "{enc} step {step}");
            }
        }
    }

    /// Text that compresses to about half its size (a small xorshift picks words).
    fn text(n: usize) -> Vec<u8> {
        let words: [&[u8]; 8] = [
            b"alpha ", b"beta ", b"gamma ", b"<div> ", b"q=7 ", b"\r\n", b"zz ", b"%ff ",
        ];
        let (mut x, mut v) = (0x9e37_79b9_u32, Vec::with_capacity(n + 8));
        while v.len() < n {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            v.extend_from_slice(words[(x % 8) as usize]);
            v.push(b'a' + (x >> 8) as u8 % 26);
        }
        v.truncate(n);
        v
    }

    fn gzip(b: &[u8]) -> Vec<u8> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(b).unwrap();
        gz.finish().unwrap()
    }

    fn response(enc: &str, body: &[u8]) -> Vec<u8> {
        let mut msg = format!(
            "HTTP/1.1 200 OK\r\nContent-Encoding: {enc}\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        msg.extend_from_slice(body);
        msg
    }

    /// Streamed decoding gives the bytes one-shot decoding gives, at every segment size,
    /// for one and two layers, a gzip header cut anywhere, and undecodable bodies (passed
    /// through); a second message on the flow starts its decoders afresh.
    #[test]
    fn streamed_decoding_equals_the_whole_body() {
        let plain = text(6000);
        let gz = gzip(&plain);
        let mut zl = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        zl.write_all(&gz).unwrap();
        let both = zl.finish().unwrap();
        let junk = b"this is not deflate at all, \xff\xfe said the server".to_vec();
        let cases: [(&str, &[u8], &[u8]); 3] = [
            ("gzip", &gz, &plain),
            ("gzip, deflate", &both, &plain),
            ("gzip", &junk, &junk),
        ];
        for (enc, body, want) in cases {
            let mut msg = response(enc, body);
            msg.extend_from_slice(&response("gzip", &gzip(b"second")));
            for step in [1, 2, 3, 9, 10, 11, 64, 1000, msg.len()] {
                let mut h = HttpHalf::new(false, HttpLimits::default());
                let mut first = None;
                for piece in msg.chunks(step) {
                    let mut rest = piece;
                    while !rest.is_empty() {
                        let (n, _) = h.feed(rest);
                        rest = &rest[n..];
                        if h.messages == 1 {
                            // Decoded bytes only grow: what is there is a prefix.
                            assert!(want.starts_with(&h.body), "{enc} step {step}");
                            if h.state == State::Start {
                                first = Some(h.buf(Buf::FileData).to_vec());
                            }
                        }
                    }
                }
                assert_eq!(first.as_deref(), Some(want), "{enc} step {step}");
                assert_eq!(h.buf(Buf::FileData), b"second", "{enc} step {step}");
            }
        }
    }

    /// Per-segment decompression work does not grow with the body: the bytes fed to the
    /// decoder for each 512-byte segment stay at most the segment, for a small and a six
    /// times larger body, and the whole body is read once (re-decoding from the start
    /// read the body so far on every segment: ~ n²/2 bytes).
    #[test]
    fn segment_decoding_work_does_not_grow_with_the_body() {
        let mut worst = Vec::new();
        for n in [4_000, 24_000] {
            let gz = gzip(&text(n));
            assert!(gz.len() < 32 * 1024, "{}", gz.len());
            let msg = response("gzip", &gz);
            let mut h = HttpHalf::new(false, HttpLimits::default());
            let mut max = 0;
            for seg in msg.chunks(512) {
                let before = h.decoded_in;
                feed_all(&mut h, seg, seg.len());
                max = max.max(h.decoded_in - before);
            }
            assert_eq!(h.buf(Buf::FileData), text(n));
            assert!(
                h.decoded_in <= gz.len() as u64,
                "{} > {}",
                h.decoded_in,
                gz.len()
            );
            assert!(
                h.decoded_in + 64 >= gz.len() as u64,
                "{} of {}",
                h.decoded_in,
                gz.len()
            );
            worst.push(max);
        }
        assert!(worst.iter().all(|&w| w <= 512), "{worst:?}");
    }

    /// The merged trace's 404 from 52.94.232.134: `Content-Encoding: gzip`, 20 bytes that
    /// decode to nothing. Its file data is empty (Suricata's `file_data; content:"|1F
    /// 8B|"; startswith` does not alert), not the raw gzip bytes.
    #[test]
    fn gzip_of_nothing_is_empty_file_data() {
        let gz = [
            0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        for step in [1, 3, 64] {
            let mut h = HttpHalf::new(false, HttpLimits::default());
            feed_all(&mut h, &response("gzip", &gz), step);
            assert_eq!(h.buf(Buf::FileData), b"", "step {step}");
            assert_eq!(h.buf(Buf::HttpRequestBody), &gz[..]);
        }
    }

    /// `decompress_layers = 0` leaves compressed bodies as they are (it panicked).
    #[test]
    fn no_decompress_layers_keeps_the_raw_body() {
        let gz = gzip(b"hello");
        let limits = HttpLimits {
            decompress_layers: 0,
            ..HttpLimits::default()
        };
        let mut h = HttpHalf::new(false, limits);
        feed_all(&mut h, &response("gzip", &gz), 3);
        assert_eq!(h.buf(Buf::FileData), &gz[..]);
        assert_eq!(h.decoded_in, 0);
    }

    #[test]
    fn non_http_is_ignored_and_limits_hold() {
        let mut h = HttpHalf::new(true, HttpLimits::default());
        assert_eq!(
            feed_all(&mut h, b"\x16\x03\x01\x00\x10hello\r\n\r\n", 3),
            []
        );
        assert!(h.gave_up() && h.messages == 0);
        let limits = HttpLimits {
            header: 64,
            body: 8,
            decompress_layers: 1,
        };
        let mut h = HttpHalf::new(false, limits);
        let long = format!(
            "HTTP/1.1 200 OK\r\nX: {}\r\nContent-Length: 20\r\n\r\n0123456789abcdefghij",
            "y".repeat(200)
        );
        feed_all(&mut h, long.as_bytes(), 5);
        assert_eq!(h.buf(Buf::FileData), b"01234567");
        assert!(h.hdr.len() <= 64);
    }
}
