//! Per-flow IDS state: a bounded window over each direction's stream (so contents match
//! across segment boundaries), the two HTTP parser halves, and which rules already
//! alerted in the current transaction.

use super::http::{HttpHalf, HttpLimits};

/// One direction's stream window: the last bytes inspected plus the new piece.
pub(crate) struct Window {
    pub buf: Vec<u8>,
    /// Size reserved on the direction's first stream bytes.
    pub cap: usize,
    /// Stream offset of `buf[0]`.
    pub base: u64,
    /// Per rule: stream offset just past its prefilter pattern's last occurrence (0 if
    /// none), so only new bytes are scanned while rules whose pattern is still in the
    /// window stay candidates.
    pub hit_end: Vec<u64>,
    pub rules: usize,
    /// Chunked inspection (see `Ids::on_stream_packet`): stream rules that matched
    /// bytes not yet inspected as Suricata inspects them, as (stream offset just past
    /// the piece that matched, rule), in stream order; reported once per rule per chunk.
    pub queued: std::collections::VecDeque<(u64, u32)>,
    /// Stream offset up to which the raw stream was inspected (Suricata's raw progress).
    pub done: u64,
    /// Stream bytes of this direction added so far.
    pub seen: u64,
    /// An HTTP message of this direction completed by this stream offset (0: none): the
    /// app layer asks for inspection once it is acknowledged.
    pub trigger: u64,
    /// Stream offset where the bytes after the latest gap start (0: no gap): Suricata's
    /// raw inspection that reaches such a block over a gap leaves its progress at the
    /// block's start, so the next chunk inspects the block again.
    pub gap_at: u64,
    /// Stream offset where the latest gap (the hole before `gap_at`) starts.
    pub gap_from: u64,
    /// Segments past a hole of this direction not delivered yet (the stack holds them
    /// out of order), copied from their packets: Suricata's raw inspection reaches them
    /// before they are acknowledged (see `Ids::on_stream_ooo`). Runs back to back in
    /// `ooo`, their (stream offset, length) in `ooo_runs[..ooo_n]`, in stream order.
    pub ooo: Vec<u8>,
    pub ooo_runs: [(u64, u32); OOO_RUNS],
    pub ooo_n: u8,
    /// Stream offset up to which the other side acknowledged this direction (as far as
    /// the caller told, see [`IdsFlow::set_acked`]): Suricata parses HTTP only up to it.
    pub acked: u64,
    /// Stream offset just past the current HTTP message's head (0: none).
    pub head_end: u64,
    /// A raw inspection up to this stream offset (0: none) that waits for the bytes of
    /// the packet that asked for it (see `Ids::on_stream_packet`).
    pub deferred: u64,
}

impl Window {
    /// Where raw inspection up to `upto` ends when it reaches a block after a hole
    /// (`upto` otherwise): StreamReassembleRawDo clips that block to `last_ack -
    /// progress` bytes, progress being the hole's start, not the block's offset, so that
    /// many bytes after the hole are inspected, acknowledged or not. A block starting at
    /// the last ack leaves the progress at the hole's start, so it is inspected again on
    /// the next chunk.
    pub(crate) fn gap_clip_end(&self, upto: u64) -> u64 {
        if self.gap_from >= self.done && self.gap_at > self.gap_from && upto >= self.gap_at {
            self.gap_at.saturating_add(upto - self.gap_from)
        } else {
            upto
        }
    }

    /// Drops the out-of-order bytes the stream has reached since (delivered in order).
    pub(crate) fn ooo_prune(&mut self) {
        let n = usize::from(self.ooo_n);
        let mut cut = 0usize;
        let mut k = 0;
        while k < n {
            let (o, l) = self.ooo_runs[k];
            let end = o + u64::from(l);
            if end <= self.seen {
                cut += l as usize;
                k += 1;
            } else {
                if o < self.seen {
                    let skip = (self.seen - o) as usize;
                    cut += skip;
                    self.ooo_runs[k] = (self.seen, l - skip as u32);
                }
                break;
            }
        }
        if cut == 0 && k == 0 {
            return;
        }
        self.ooo.copy_within(cut.., 0);
        self.ooo.truncate(self.ooo.len() - cut);
        self.ooo_runs.copy_within(k..n, 0);
        self.ooo_n = (n - k) as u8;
    }
}

/// Stream rule matches held per direction until their chunk is inspected; when full, the
/// direction is inspected at once (memory stays bounded, counts may then differ).
pub(crate) const QUEUED: usize = 256;

/// Out-of-order bytes held per direction for raw inspection past a hole, and their runs
/// (more are not held: those bytes are inspected once the stack delivers them).
pub(crate) const OOO_BYTES: usize = 16 * 1024;
pub(crate) const OOO_RUNS: usize = 8;

pub struct IdsFlow {
    pub(crate) win: [Window; 2],
    pub(crate) http: Option<Box<[HttpHalf; 2]>>,
    /// Rules that alerted in the current request / response (one bit per rule).
    pub(crate) req_fired: Vec<u64>,
    pub(crate) resp_fired: Vec<u64>,
    /// Per direction: rules whose body prefilter pattern occurs in the current message's
    /// body (one bit per rule), and how far each body buffer (file data, request body)
    /// has been scanned, so each body byte is scanned once (see `Ids::inspect_http`).
    pub(crate) body_hits: [Vec<u64>; 2],
    pub(crate) body_seen: [[usize; 2]; 2],
    /// Per direction: file data was the decoded body when last scanned.
    pub(crate) body_decoded: [bool; 2],
    /// Suricata's protocol detection said HTTP: a request began with a known method or
    /// a response with `HTTP/`. Until then HTTP rules do not run.
    pub(crate) http_known: bool,
}

impl IdsFlow {
    /// Bytes a flow made by [`IdsFlow::new`] may hold at most: per direction a window
    /// and a word per rule, and with HTTP rules two parsers at their limits and per
    /// direction two bit sets (rules fired, body prefilter hits).
    pub(crate) fn max_bytes(n_rules: usize, window: usize, http: Option<HttpLimits>) -> usize {
        let words = n_rules.div_ceil(64);
        let per_dir = window
            .saturating_add(n_rules.saturating_mul(8))
            .saturating_add(QUEUED * std::mem::size_of::<(u64, u32)>())
            .saturating_add(OOO_BYTES);
        let http = http.map_or(0, |l| {
            std::mem::size_of::<[HttpHalf; 2]>()
                .saturating_add(2 * HttpHalf::max_heap(l))
                .saturating_add(4 * words * 8)
        });
        std::mem::size_of::<IdsFlow>()
            .saturating_add(2 * per_dir)
            .saturating_add(http)
    }

    pub(crate) fn new(n_rules: usize, window: usize, http: Option<HttpLimits>) -> IdsFlow {
        let w = || Window {
            buf: Vec::new(),
            cap: window,
            base: 0,
            hit_end: Vec::new(),
            rules: n_rules,
            queued: std::collections::VecDeque::new(),
            done: 0,
            seen: 0,
            trigger: 0,
            gap_at: 0,
            gap_from: 0,
            ooo: Vec::new(),
            ooo_runs: [(0, 0); OOO_RUNS],
            ooo_n: 0,
            acked: 0,
            head_end: 0,
            deferred: 0,
        };
        let words = n_rules.div_ceil(64);
        IdsFlow {
            win: [w(), w()],
            http: http.map(|l| Box::new([HttpHalf::new(true, l), HttpHalf::new(false, l)])),
            req_fired: vec![0; if http.is_some() { words } else { 0 }],
            resp_fired: vec![0; if http.is_some() { words } else { 0 }],
            body_hits: [(); 2].map(|_| vec![0; if http.is_some() { words } else { 0 }]),
            body_seen: [[0; 2]; 2],
            body_decoded: [false; 2],
            http_known: false,
        }
    }

    /// Direction `d` began a new message: its fired bits and body scan start afresh.
    pub(crate) fn new_message(&mut self, d: usize) {
        if d == 0 {
            self.req_fired.fill(0);
        } else {
            self.resp_fired.fill(0);
        }
        self.new_body(d);
    }

    /// Direction `d`'s message has a new body in the same transaction (after an interim
    /// response): the body scan starts afresh, the fired bits stay.
    pub(crate) fn new_body(&mut self, d: usize) {
        self.body_hits[d].fill(0);
        self.body_seen[d] = [0; 2];
        self.body_decoded[d] = false;
    }

    /// The other side has acknowledged direction `to_server`'s stream up to offset
    /// `acked` (told before that direction's next bytes, see `Ids::http`).
    pub fn set_acked(&mut self, to_server: bool, acked: u64) {
        let w = &mut self.win[usize::from(!to_server)];
        w.acked = w.acked.max(acked);
    }

    /// Did protocol detection take the flow for HTTP (see `http_known`)?
    pub fn is_http(&self) -> bool {
        self.http_known
    }
}

pub(crate) fn bit(v: &[u64], i: u32) -> bool {
    v.get(i as usize / 64)
        .is_some_and(|w| w >> (i % 64) & 1 == 1)
}

pub(crate) fn set_bit(v: &mut [u64], i: u32) {
    if let Some(w) = v.get_mut(i as usize / 64) {
        *w |= 1 << (i % 64);
    }
}
