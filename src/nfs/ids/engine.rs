//! The IDS engine: packet rules per packet, stream rules over each direction's window,
//! HTTP rules once per transaction on the parser's buffers. After setup (rule set, and
//! per flow its windows and parser buffers) inspecting allocates nothing, except the
//! caller's alert vector growing past its capacity.

use super::content::{matches, Span};
use super::flow::{bit, set_bit, IdsFlow, Window, OOO_BYTES, OOO_RUNS, QUEUED};
use super::header::{Ip, Proto};
use super::http::{Event, HttpLimits};
use super::pktcheck::PktFields;
use super::rule::{Buf, Kind, Rule, Side};
use super::ruleset::{Prefilter, RuleSet};

/// Engine limits.
#[derive(Clone, Copy, Debug)]
pub struct IdsConfig {
    pub http: HttpLimits,
    /// Stream bytes kept from earlier segments so a content spanning a segment boundary
    /// still matches: the longest match a stream rule can need.
    pub stream_tail: usize,
    /// New stream bytes inspected at once (a long segment is inspected in pieces).
    pub stream_piece: usize,
    /// 0: stream rules report a match on the bytes that bring it. Otherwise Suricata's
    /// IDS-mode raw stream inspection: a direction's stream is inspected in chunks, on
    /// its packets, once at least this many acknowledged bytes wait (its
    /// `stream.reassembly.to{server,client}-chunk-size`), once an HTTP message is
    /// complete and acknowledged, and at the flow's end; one alert per rule per chunk
    /// ([`Ids::on_stream_packet`], [`Ids::on_stream_flush`]).
    pub stream_chunk: u64,
}

impl Default for IdsConfig {
    fn default() -> Self {
        IdsConfig {
            http: HttpLimits::default(),
            stream_tail: 2048,
            stream_piece: 4096,
            stream_chunk: 0,
        }
    }
}

/// What the engine needs of a packet or of the segment that carried stream bytes.
#[derive(Clone, Copy, Debug)]
pub struct PacketInfo {
    pub ip_proto: u8,
    pub src: Ip,
    pub dst: Ip,
    pub sport: u16,
    pub dport: u16,
    /// From the flow's client (initiator) to its server.
    pub to_server: bool,
    /// TCP: handshake seen; other protocols: packets seen both ways.
    pub established: bool,
    /// This TCP packet's payload goes to `on_stream` (so stream rules skip it here).
    pub reassembled: bool,
    /// The first packet of its flow in this direction (IP-only rules match only these).
    pub first_in_dir: bool,
    /// Header fields for `flags`, `itype`, `icode`, `ttl`.
    pub fields: PktFields,
    /// The flow's payloads are no longer inspected (Suricata's "no payload inspection",
    /// e.g. a TLS flow carrying application data): rules with payload tests skip it.
    pub no_payload: bool,
}

/// One alert.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Alert {
    pub gid: u32,
    pub sid: u32,
    pub rev: u32,
    /// Index of the rule in [`RuleSet::rules`].
    pub rule: u32,
}

pub struct Ids {
    set: RuleSet,
    cfg: IdsConfig,
    /// Per-rule generation stamps: candidate dedupe without clearing a set per call.
    seen: Vec<u32>,
    fired: Vec<u32>,
    gen: u32,
    cands: Vec<u32>,
    /// Stream-rule hits of a one-scan packet, appended after the packet rules'.
    later: Vec<u32>,
    reports: Reports,
}

/// Chunked stream inspection's "already reported in this chunk" stamps per rule.
struct Reports {
    stamp: Vec<u32>,
    gen: u32,
}

impl Reports {
    /// Alerts for the matches `w` queued at stream offsets up to `upto`, once per rule;
    /// those past `keep` stay queued (the next chunk inspects their bytes again).
    fn report(
        &mut self,
        rules: &[Rule],
        w: &mut Window,
        upto: u64,
        keep: u64,
        alerts: &mut Vec<Alert>,
    ) {
        self.gen = self.gen.wrapping_add(1);
        if self.gen == 0 {
            self.stamp.fill(0);
            self.gen = 1;
        }
        let mut k = 0;
        while let Some(&(end, i)) = w.queued.get(k) {
            if end > upto {
                break;
            }
            if end > keep {
                k += 1;
            } else {
                w.queued.pop_front();
            }
            if let Some(s) = self.stamp.get_mut(i as usize) {
                if *s != self.gen {
                    *s = self.gen;
                    push(alerts, &rules[i as usize], i);
                }
            }
        }
    }
}

impl Ids {
    pub fn new(set: RuleSet, cfg: IdsConfig) -> Ids {
        let n = set.len();
        Ids {
            set,
            cfg,
            seen: vec![0; n],
            fired: vec![0; n],
            gen: 0,
            cands: Vec::with_capacity(n),
            later: Vec::with_capacity(n),
            reports: Reports {
                stamp: vec![0; n],
                gen: 0,
            },
        }
    }

    pub fn rules(&self) -> &RuleSet {
        &self.set
    }

    /// State for a new flow: windows if stream rules exist, HTTP parsers if HTTP rules do.
    pub fn new_flow(&self) -> IdsFlow {
        let win = if self.set.has_stream() {
            self.cfg.stream_tail + self.cfg.stream_piece
        } else {
            0
        };
        IdsFlow::new(
            self.set.len(),
            win,
            self.http_parsers().then_some(self.cfg.http),
        )
    }

    /// Bytes one flow's state may hold at most (see [`IdsFlow::max_bytes`]).
    pub fn flow_memory(&self) -> usize {
        let win = if self.set.has_stream() {
            self.cfg.stream_tail + self.cfg.stream_piece
        } else {
            0
        };
        IdsFlow::max_bytes(
            self.set.len(),
            win,
            self.http_parsers().then_some(self.cfg.http),
        )
    }

    /// Flows get HTTP parsers for HTTP rules, and for chunked stream inspection, which
    /// HTTP message ends trigger (Suricata's HTTP parser runs whatever the rules).
    fn http_parsers(&self) -> bool {
        self.set.has_http() || (self.set.has_stream() && self.cfg.stream_chunk != 0)
    }

    fn next_gen(&mut self) -> u32 {
        self.gen = self.gen.wrapping_add(1);
        if self.gen == 0 {
            self.seen.fill(0);
            self.fired.fill(0);
            self.gen = 1;
        }
        self.gen
    }

    /// Packet rules on one packet (and stream rules when its bytes are not reassembled).
    pub fn on_packet(&mut self, p: &PacketInfo, payload: &[u8], alerts: &mut Vec<Alert>) {
        let g = self.next_gen();
        let span = Span {
            base: 0,
            fresh: None,
        };
        // Stream rules run on TCP packets whose bytes are not reassembled; anchored ones
        // on reassembled packets too, as Suricata does (docs/ids.md).
        let stream_too = p.ip_proto == 6 && !payload.is_empty();
        if !stream_too {
            collect(
                &self.set.packet,
                payload,
                g,
                &mut self.seen,
                &mut self.cands,
            );
        } else {
            // Reassembled packets: only anchored stream rules run here, so only their
            // patterns are scanned for. One scan for both sets; candidates in the order
            // two scans gave (packet rules, then stream rules), so alerts keep their order.
            let (both, stream) = if p.reassembled {
                (&self.set.packet_anchored, &self.set.stream_anchored)
            } else {
                (&self.set.packet_stream, &self.set.stream)
            };
            let (seen, cands, later) = (&mut self.seen, &mut self.cands, &mut self.later);
            let mut add = |i: u32, out: &mut Vec<u32>| {
                if seen[i as usize] != g {
                    seen[i as usize] = g;
                    out.push(i);
                }
            };
            for &i in &self.set.packet.always {
                add(i, cands);
            }
            both.hits_split(payload, |i, second| {
                add(i, if second { &mut *later } else { &mut *cands })
            });
            for &i in &stream.always {
                add(i, cands);
            }
            cands.append(later);
        }
        for k in 0..self.cands.len() {
            let i = self.cands[k];
            let r = &self.set.rules[i as usize];
            if r.header.proto == Proto::Http || (r.ip_only && !p.first_in_dir) {
                continue; // HTTP needs the flow's verdict: stream path only
            }
            if (r.kind == Kind::Stream && p.reassembled && !r.anchored)
                || (p.no_payload && !r.groups.is_empty())
            {
                continue;
            }
            if header_ok(r, p)
                && r.pkt
                    .iter()
                    .all(|c| c.test(p.ip_proto, &p.fields, payload.len()))
                && groups_match(r, payload, span)
            {
                push(alerts, r, i);
            }
        }
        self.cands.clear();
    }

    /// Suricata's flow-end pseudo packet in `p`'s direction (sent to flush the other
    /// direction's unacknowledged bytes): IP-only rules match it when it is the first
    /// packet of its direction. Other rules do not run on it.
    pub fn on_pseudo_packet(&mut self, p: &PacketInfo, alerts: &mut Vec<Alert>) {
        if !p.first_in_dir {
            return;
        }
        for &i in &self.set.packet.always {
            let r = &self.set.rules[i as usize];
            if r.ip_only && r.header.proto != Proto::Http && header_ok(r, p) {
                push(alerts, r, i);
            }
        }
    }

    /// New in-order bytes of one direction of a TCP flow (`p` is the segment carrying them).
    pub fn on_stream(
        &mut self,
        flow: &mut IdsFlow,
        p: &PacketInfo,
        data: &[u8],
        alerts: &mut Vec<Alert>,
    ) {
        if data.is_empty() {
            return;
        }
        let fire_gen = self.next_gen();
        flow.win[usize::from(!p.to_server)].seen += data.len() as u64;
        // Suricata knows a flow is HTTP from the first request bytes (protocol detection
        // runs before raw stream inspection), so `alert http` stream rules see that
        // segment too: until the parser has recognised HTTP, it runs first.
        let http_first = flow.http.is_some() && !flow.is_http();
        if http_first {
            self.http(flow, p, data, alerts);
        }
        if self.set.has_stream() {
            self.stream_rules(flow, p, data, fire_gen, alerts);
        }
        if flow.http.is_some() && !http_first {
            self.http(flow, p, data, alerts);
        }
        self.run_deferred(flow, usize::from(!p.to_server), alerts);
    }

    /// `n` bytes of direction `to_server`'s stream are missing before the next
    /// [`Ids::on_stream`] bytes (a hole the receiver acknowledged that the capture lost):
    /// stream offsets move past it, no content matches across it (the window starts
    /// afresh), and the HTTP parser of that direction skips it or stops (see
    /// [`super::http::HttpHalf::gap`]). Raw inspection goes on after it, as Suricata's.
    pub fn on_stream_gap(&mut self, flow: &mut IdsFlow, to_server: bool, n: u64) {
        if n == 0 {
            return;
        }
        let d = usize::from(!to_server);
        let w = &mut flow.win[d];
        w.gap_from = w.seen;
        w.seen += n;
        w.buf.clear();
        w.base = w.seen;
        w.gap_at = w.seen;
        if let Some(h) = flow.http.as_mut() {
            h[d].gap(n);
        }
    }

    /// Raw stream inspection on a packet `p` of a tracked flow, as Suricata 7 does it in
    /// IDS mode (stream-tcp-reassemble.c): the packet's direction's bytes that the other
    /// side acknowledged (up to stream offset `acked`) and that were not inspected yet
    /// are inspected as one chunk when there are at least `stream_chunk` of them, or when
    /// they complete an HTTP message (the parser's trigger); each stream rule that
    /// matched in the chunk alerts once. `now`: inspect whatever is acknowledged (the
    /// packet whose ACK let Suricata's TLS parser see application data: its raw stream
    /// takes no new segments and what it holds is inspected at once; later packets of the
    /// flow inspect no payload and do not come here). No-op when `stream_chunk` is 0.
    /// `own_end`: the stream offset just past this packet's payload (0: none taken); its
    /// bytes reach [`Ids::on_stream`] after this call.
    pub fn on_stream_packet(
        &mut self,
        flow: &mut IdsFlow,
        p: &PacketInfo,
        acked: u64,
        now: bool,
        own_end: u64,
        alerts: &mut Vec<Alert>,
    ) {
        flow.set_acked(p.to_server, acked);
        if self.cfg.stream_chunk == 0 {
            return;
        }
        for d in 0..2 {
            self.run_deferred(flow, d, alerts);
        }
        let d = usize::from(!p.to_server);
        let w = &mut flow.win[d];
        if w.ooo_n != 0 {
            w.ooo_prune();
        }
        let upto = acked.min(w.seen);
        // Segments held past a hole: Suricata's chunk check counts from the raw progress
        // to the last ACK, and its walk goes on to them while the progress (after the
        // in-order bytes) is short of the ACK.
        let held = w.ooo_n != 0;
        if upto <= w.done && !(held && acked > w.done) {
            return;
        }
        let lim = if held { acked } else { upto };
        let trig = w.trigger != 0 && upto >= w.trigger;
        if now || lim.saturating_sub(w.done) >= self.cfg.stream_chunk || trig {
            // Suricata adds the packet's segment before inspecting: a block after a hole,
            // clipped past the last ACK (see `inspect_to`), takes in the packet's own
            // bytes, so that inspection waits for them.
            if !held && own_end > w.seen && w.gap_clip_end(upto) > w.seen {
                w.deferred = upto;
                return;
            }
            self.inspect_to(flow, d, upto, alerts);
            if held && acked > flow.win[d].done {
                self.inspect_ooo(flow, p, d, acked, alerts);
            }
        }
    }

    /// A segment of direction `p.to_server` at stream offset `off` arrived past the bytes
    /// delivered so far (the stack holds it behind a hole): kept for raw inspection
    /// before it is delivered (see [`Ids::on_stream_packet`]). Only a segment that
    /// extends the last run held or starts a new one after it is kept.
    pub fn on_stream_ooo(&mut self, flow: &mut IdsFlow, to_server: bool, off: u64, data: &[u8]) {
        if self.cfg.stream_chunk == 0 || !self.set.has_stream() || data.is_empty() {
            return;
        }
        let w = &mut flow.win[usize::from(!to_server)];
        w.ooo_prune();
        let (mut off, mut data) = (off, data);
        let n = usize::from(w.ooo_n);
        let last_end = (n > 0).then(|| w.ooo_runs[n - 1].0 + u64::from(w.ooo_runs[n - 1].1));
        if let Some(end) = last_end {
            if off + data.len() as u64 <= end || off < w.ooo_runs[n - 1].0 {
                return; // retransmitted, or before the last run (not kept)
            }
            if off < end {
                data = &data[(end - off) as usize..];
                off = end;
            }
        }
        if off <= w.seen || w.ooo.len() + data.len() > OOO_BYTES {
            return;
        }
        if last_end == Some(off) {
            w.ooo_runs[n - 1].1 += data.len() as u32;
        } else if n < OOO_RUNS {
            w.ooo_runs[n] = (off, data.len() as u32);
            w.ooo_n += 1;
        } else {
            return;
        }
        if w.ooo.capacity() == 0 {
            w.ooo.reserve_exact(OOO_BYTES);
        }
        w.ooo.extend_from_slice(data);
    }

    /// Suricata's raw inspection walks on past the in-order bytes to the blocks it holds
    /// after a hole (stream-tcp-reassemble.c `StreamReassembleRawDo`): each is a buffer of
    /// its own, clipped to `last_ack - progress` bytes (the progress stays before the
    /// hole), so bytes not acknowledged yet are inspected, and again on the next chunk.
    /// A rule alerts once per packet: the stamps of the report just made are shared.
    fn inspect_ooo(
        &mut self,
        flow: &mut IdsFlow,
        p: &PacketInfo,
        d: usize,
        acked: u64,
        alerts: &mut Vec<Alert>,
    ) {
        let is_http = flow.is_http();
        let w = &flow.win[d];
        let clip = acked.saturating_sub(w.done);
        let mut at = 0usize;
        for &(_, len) in &w.ooo_runs[..usize::from(w.ooo_n)] {
            let len = len as usize;
            let run = &w.ooo[at..at + len];
            at += len;
            let hay = &run[..(clip.min(len as u64)) as usize];
            if hay.is_empty() {
                break;
            }
            let g = self.next_gen();
            collect(&self.set.stream, hay, g, &mut self.seen, &mut self.cands);
            let span = Span {
                base: 0,
                fresh: None,
            };
            for k in 0..self.cands.len() {
                let i = self.cands[k];
                let r = &self.set.rules[i as usize];
                let stamp = &mut self.reports.stamp[i as usize];
                if *stamp == self.reports.gen || (r.header.proto == Proto::Http && !is_http) {
                    continue;
                }
                if header_ok(r, p) && groups_match(r, hay, span) {
                    *stamp = self.reports.gen;
                    push(alerts, r, i);
                }
            }
            self.cands.clear();
        }
    }

    /// The inspection [`Ids::on_stream_packet`] left for its packet's bytes, if any.
    fn run_deferred(&mut self, flow: &mut IdsFlow, d: usize, alerts: &mut Vec<Alert>) {
        let upto = std::mem::take(&mut flow.win[d].deferred);
        if upto != 0 {
            self.inspect_to(flow, d, upto, alerts);
        }
    }

    /// The flow ends (Suricata's flow-end pseudo packets): the bytes of direction
    /// `to_server` not inspected yet, acknowledged or not, are inspected as one chunk.
    pub fn on_stream_flush(
        &mut self,
        flow: &mut IdsFlow,
        to_server: bool,
        alerts: &mut Vec<Alert>,
    ) {
        if self.cfg.stream_chunk != 0 {
            flow.win[usize::from(!to_server)].deferred = 0;
            self.inspect_to(flow, usize::from(!to_server), u64::MAX, alerts);
        }
    }

    /// The app layer asks for inspection of direction `to_server`'s bytes so far once
    /// they are acknowledged (Suricata's `AppLayerParserTriggerRawStreamReassembly`).
    pub fn on_stream_trigger(&mut self, flow: &mut IdsFlow, to_server: bool) {
        let w = &mut flow.win[usize::from(!to_server)];
        w.trigger = w.seen;
    }

    fn inspect_to(&mut self, flow: &mut IdsFlow, d: usize, upto: u64, alerts: &mut Vec<Alert>) {
        let w = &mut flow.win[d];
        let mut end = upto.min(w.seen);
        // A chunk that reaches bytes after a gap leaves Suricata's raw progress at their
        // start (stream-tcp-reassemble.c, StreamReassembleRawDo): their matches stay
        // queued for the next chunk.
        let mut rewind = (w.gap_at > w.done && w.gap_at < end).then_some(w.gap_at);
        let clip = w.gap_clip_end(upto);
        if upto != u64::MAX && clip != upto {
            end = w.seen.min(clip);
            rewind = Some(if w.gap_at < upto {
                w.gap_at
            } else {
                w.gap_from
            });
        }
        self.reports
            .report(&self.set.rules, w, end, rewind.unwrap_or(u64::MAX), alerts);
        w.done = rewind.unwrap_or(w.done.max(end));
        if w.trigger != 0 && end >= w.trigger {
            w.trigger = 0;
        }
    }

    /// The direction of `p` ended (FIN or RST): HTTP headers cut short are inspected.
    pub fn on_stream_end(&mut self, flow: &mut IdsFlow, p: &PacketInfo, alerts: &mut Vec<Alert>) {
        let d = usize::from(!p.to_server);
        let Some(h) = flow.http.as_mut() else { return };
        if h[d].close() && flow.http_known {
            flow.new_message(d);
            self.inspect_http(flow, p, d, false, alerts);
        }
    }

    fn stream_rules(
        &mut self,
        flow: &mut IdsFlow,
        p: &PacketInfo,
        data: &[u8],
        fire_gen: u32,
        alerts: &mut Vec<Alert>,
    ) {
        let is_http = flow.is_http();
        let d = usize::from(!p.to_server);
        let (tail, piece) = (self.cfg.stream_tail, self.cfg.stream_piece.max(1));
        for chunk in data.chunks(piece) {
            let w = &mut flow.win[d];
            if w.buf.capacity() == 0 {
                w.buf.reserve_exact(w.cap);
                w.hit_end = vec![0; w.rules];
                if self.cfg.stream_chunk != 0 {
                    w.queued.reserve_exact(QUEUED);
                }
            }
            if w.buf.len() > tail {
                let cut = w.buf.len() - tail;
                w.buf.copy_within(cut.., 0);
                w.buf.truncate(tail);
                w.base += cut as u64;
            }
            let fresh = w.buf.len();
            let piece_start = w.base + fresh as u64;
            w.buf.extend_from_slice(chunk);
            let piece_end = piece_start + chunk.len() as u64;
            // Chunked: offset/depth count from the chunk these bytes will be inspected
            // in, which starts at the raw progress (Suricata 7.0 inspects each chunk as a
            // buffer of its own); per segment, from the stream's start.
            let from_chunk = if self.cfg.stream_chunk != 0 {
                w.done
            } else {
                0
            };
            let span = Span {
                base: w.base as i64 - from_chunk as i64,
                fresh: Some(fresh),
            };
            let g = self.next_gen();
            let pf = &self.set.stream;
            let from = fresh.saturating_sub(pf.max_len().saturating_sub(1));
            let at = w.base + from as u64;
            let hit_end = &mut w.hit_end;
            pf.hits_at(&w.buf[from..], |i, end| {
                hit_end[i as usize] = at + end as u64
            });
            let live = pf
                .pattern_rules()
                .iter()
                .filter(|&&i| w.hit_end[i as usize] > w.base);
            for &i in pf.always.iter().chain(live) {
                if self.seen[i as usize] != g {
                    self.seen[i as usize] = g;
                    self.cands.push(i);
                }
            }
            let chunked = self.cfg.stream_chunk != 0;
            if chunked && w.queued.len() + self.cands.len() > QUEUED {
                // No room to queue this piece's matches: what is queued is inspected now
                // as one chunk (bounded memory over exact chunking).
                self.reports
                    .report(&self.set.rules, w, u64::MAX, u64::MAX, alerts);
                w.done = w.done.max(piece_start);
            }
            for k in 0..self.cands.len() {
                let i = self.cands[k];
                let r = &self.set.rules[i as usize];
                if self.fired[i as usize] == fire_gen || (r.header.proto == Proto::Http && !is_http)
                {
                    continue;
                }
                if header_ok(r, p) && groups_match(r, &w.buf, span) {
                    self.fired[i as usize] = fire_gen;
                    if chunked {
                        w.queued.push_back((piece_end, i));
                    } else {
                        push(alerts, r, i);
                    }
                }
            }
            self.cands.clear();
        }
    }

    fn http(
        &mut self,
        flow: &mut IdsFlow,
        p: &PacketInfo,
        mut data: &[u8],
        alerts: &mut Vec<Alert>,
    ) {
        let d = usize::from(!p.to_server);
        // A flow picked up mid-stream may start with the server's `HTTP/` in the
        // direction taken for the client's: Suricata's detection (which then reverses the
        // flow) still says HTTP.
        if !flow.http_known
            && flow.win[d].seen == data.len() as u64
            && data
                .get(..5)
                .is_some_and(|v| v.eq_ignore_ascii_case(b"HTTP/"))
        {
            flow.http_known = true;
        }
        // Suricata's protocol detection knows HTTP from a request's first bytes (a method
        // of its list and a space at stream offset 0), before the headers are complete:
        // `alert http` stream rules then see the bytes of that first segment.
        if !flow.http_known && d == 0 && flow.win[0].seen == data.len() as u64 {
            flow.http_known = data
                .iter()
                .position(|&b| b == b' ')
                .is_some_and(|n| known_method(&data[..n]));
        }
        let open_before = flow.http.as_ref().is_some_and(|h| !h[d].complete());
        let mut starts = 0;
        while !data.is_empty() {
            let Some(h) = flow.http.as_mut() else { return };
            if h[d].gave_up() {
                break;
            }
            let (used, ev) = h[d].feed(data);
            data = &data[used..];
            match ev {
                Event::Nothing => {
                    if used == 0 {
                        break;
                    }
                    self.trailer_check(flow, p, d, alerts);
                    continue;
                }
                Event::Headers => {
                    if d == 0 {
                        let head = h[0].method().eq_ignore_ascii_case(b"HEAD");
                        h[1].no_body = head;
                    }
                    // A response after an interim `100 Continue` is the same transaction
                    // for libhtp: what alerted on the 100 (its response line) does not
                    // alert again.
                    let same_tx = h[d].continues;
                    // Only at the direction's first byte (a SOCKS handshake before
                    // the request hides HTTP from Suricata).
                    if !flow.http_known && h[d].head_at_start() {
                        flow.http_known = if d == 0 {
                            known_method(h[0].method())
                        } else {
                            h[1].buf(Buf::HttpProtocol)
                                .get(..5)
                                .is_some_and(|v| v.eq_ignore_ascii_case(b"HTTP/"))
                        };
                    }
                    if same_tx {
                        flow.new_body(d);
                    } else {
                        flow.new_message(d);
                    }
                    flow.win[d].head_end = flow.win[d].seen - data.len() as u64;
                    starts += 1;
                }
                Event::Body => {}
            }
            if flow.http_known && self.set.has_http() {
                self.inspect_http(flow, p, d, ev == Event::Body, alerts);
            }
            self.trailer_check(flow, p, d, alerts);
        }
        // A message completed in these bytes: Suricata's HTTP parser asks for raw stream
        // inspection once they are acknowledged (its parser runs on acknowledged bytes).
        let Some(h) = flow.http.as_ref() else { return };
        if flow.http_known && (open_before || starts > 0) && (h[d].complete() || starts > 1) {
            flow.win[d].trigger = flow.win[d].seen;
        }
    }

    /// Runs [`Ids::http_trailer`] when side `d`'s parser just ended a trailer section.
    fn trailer_check(
        &mut self,
        flow: &mut IdsFlow,
        p: &PacketInfo,
        d: usize,
        alerts: &mut Vec<Alert>,
    ) {
        let Some(h) = flow.http.as_mut() else { return };
        if std::mem::take(&mut h[d].trailer_done)
            && flow.http_known
            && flow.win[d].acked >= flow.win[d].head_end
        {
            self.http_trailer(flow, p, d, alerts);
        }
    }

    /// Side `d`'s chunked message ended its trailer section after its head was
    /// acknowledged, so Suricata inspected the head in an earlier pass: its prefilter of
    /// the header buffer runs again for the trailer (detect-http-header.c,
    /// PrefilterMpmHttpTrailer; libhtp runs the trailer hook even for an empty trailer),
    /// and a rule whose fast pattern is in `http.header` that matched then was not kept
    /// as done (detect.c: "mpm won't trigger for it anymore"), so it alerts again.
    fn http_trailer(&mut self, flow: &IdsFlow, p: &PacketInfo, d: usize, alerts: &mut Vec<Alert>) {
        let Some(h) = flow.http.as_deref() else {
            return;
        };
        let fired = if d == 0 {
            &flow.req_fired
        } else {
            &flow.resp_fired
        };
        let filters = if d == 0 {
            &self.set.http_req
        } else {
            &self.set.http_resp
        };
        for f in filters.iter().filter(|f| f.buf == Buf::HttpHeader) {
            for &i in f.pattern_rules().iter().chain(&f.always) {
                let r = &self.set.rules[i as usize];
                if matches!(&r.prefilter, Some((Buf::HttpHeader, _)))
                    && bit(fired, i)
                    && header_ok(r, p)
                    && http_groups_match(r, h, d)
                {
                    push(alerts, r, i);
                }
            }
        }
    }

    /// HTTP rules of side `d`'s message. `body_only`: only its body grew since the last
    /// call, so only rules with a body group can change their verdict (the others were
    /// tried on these same headers already); body prefilters and those rules only.
    fn inspect_http(
        &mut self,
        flow: &mut IdsFlow,
        p: &PacketInfo,
        d: usize,
        body_only: bool,
        alerts: &mut Vec<Alert>,
    ) {
        let g = self.next_gen();
        let filters = if d == 0 {
            &self.set.http_req
        } else {
            &self.set.http_resp
        };
        let IdsFlow {
            http,
            req_fired,
            resp_fired,
            body_hits,
            body_seen,
            body_decoded,
            ..
        } = flow;
        let Some(h) = http.as_deref() else { return };
        for f in filters {
            let hay = pick(h, d, f.buf);
            if !body_only {
                collect(f, hay, g, &mut self.seen, &mut self.cands);
                continue;
            }
            if !f.buf.is_body() {
                continue;
            }
            // Only the bytes added since the last body event are scanned (from the
            // longest pattern's length back); earlier hits are kept in `body_hits`.
            let k = usize::from(f.buf != Buf::FileData);
            let dec = h[d].file_data_decoded();
            if hay.len() < body_seen[d][k] || (k == 0 && dec != body_decoded[d]) {
                body_seen[d][k] = 0;
            }
            if k == 0 {
                body_decoded[d] = dec;
            }
            let from = body_seen[d][k].saturating_sub(f.max_len().saturating_sub(1));
            let hits = &mut body_hits[d];
            f.hits(&hay[from..], |i| set_bit(hits, i));
            body_seen[d][k] = hay.len();
            for &i in &f.always {
                if self.seen[i as usize] != g {
                    self.seen[i as usize] = g;
                    self.cands.push(i);
                }
            }
        }
        if body_only {
            let hits = &body_hits[d];
            let on = hits.iter().enumerate().flat_map(|(w, &bits)| {
                (0..64)
                    .filter(move |b| bits >> b & 1 != 0)
                    .map(move |b| (w * 64 + b) as u32)
            });
            for i in self.set.body_always[d].iter().copied().chain(on) {
                if self.seen[i as usize] != g {
                    self.seen[i as usize] = g;
                    self.cands.push(i);
                }
            }
        }
        for k in 0..self.cands.len() {
            let i = self.cands[k];
            let r = &self.set.rules[i as usize];
            if r.side == Side::Either {
                if let Some(ts) = r.flow.to_server {
                    if ts != (d == 0) {
                        continue;
                    }
                }
            }
            // Once per transaction and direction: a rule on buffers both sides have
            // (headers, bodies, cookies) alerts on the request and on the response, as
            // Suricata's per-direction inspection engines do.
            if bit(if d == 0 { req_fired } else { resp_fired }, i) || !header_ok(r, p) {
                continue;
            }
            if http_groups_match(r, h, d) {
                set_bit(if d == 0 { req_fired } else { resp_fired }, i);
                push(alerts, r, i);
            }
        }
        self.cands.clear();
    }
}

/// The request methods Suricata's HTTP protocol detection looks for at the start of a
/// flow's client bytes (any case); a flow whose client starts otherwise (SMTP's `EHLO`,
/// FTP's `USER`) is HTTP only if its server answers `HTTP/`.
fn known_method(m: &[u8]) -> bool {
    const METHODS: &[&[u8]] = &[
        b"GET",
        b"PUT",
        b"POST",
        b"HEAD",
        b"TRACE",
        b"OPTIONS",
        b"CONNECT",
        b"DELETE",
        b"PATCH",
        b"PROPFIND",
        b"PROPPATCH",
        b"MKCOL",
        b"COPY",
        b"MOVE",
        b"LOCK",
        b"UNLOCK",
        b"CHECKOUT",
        b"UNCHECKOUT",
        b"CHECKIN",
        b"UPDATE",
        b"LABEL",
        b"REPORT",
        b"MKWORKSPACE",
        b"MKACTIVITY",
        b"MERGE",
        b"INVALID",
        b"VERSION-CONTROL",
        b"BASELINE-CONTROL",
    ];
    METHODS.iter().any(|k| k.eq_ignore_ascii_case(m))
}

/// The bytes of `b` for an inspection triggered on side `d` (0 request, 1 response).
fn pick(h: &[super::http::HttpHalf; 2], d: usize, b: Buf) -> &[u8] {
    match b.side() {
        Side::Request => h[0].buf(b),
        Side::Response => h[1].buf(b),
        Side::Either => h[d].buf(b),
    }
}

fn collect(f: &Prefilter, hay: &[u8], g: u32, seen: &mut [u32], out: &mut Vec<u32>) {
    for &i in &f.always {
        if seen[i as usize] != g {
            seen[i as usize] = g;
            out.push(i);
        }
    }
    f.hits(hay, |i| {
        if seen[i as usize] != g {
            seen[i as usize] = g;
            out.push(i);
        }
    });
}

fn header_ok(r: &Rule, p: &PacketInfo) -> bool {
    if !r.header.proto.covers(p.ip_proto) {
        return false;
    }
    if let Some(ts) = r.flow.to_server {
        if ts != p.to_server {
            return false;
        }
    }
    if let Some(e) = r.flow.established {
        if e != p.established {
            return false;
        }
    }
    r.header.matches(p.src, p.sport, p.dst, p.dport)
}

/// Whether every group of HTTP rule `r` matches its buffer of the message on side `d`. A
/// buffer the message lacks (no Cookie header, no body) matches nothing, not even a
/// negated test: Suricata's engine gives up on a missing buffer.
#[inline]
fn http_groups_match(r: &Rule, h: &[super::http::HttpHalf; 2], d: usize) -> bool {
    let span = Span {
        base: 0,
        fresh: None,
    };
    for gr in &r.groups {
        let hay = pick(h, d, gr.buf);
        if hay.is_empty() || !matches(&gr.tests, hay, span) {
            return false;
        }
    }
    true
}

fn groups_match(r: &Rule, payload: &[u8], span: Span) -> bool {
    debug_assert!(r.kind != Kind::Http);
    r.groups.iter().all(|g| matches(&g.tests, payload, span))
}

fn push(alerts: &mut Vec<Alert>, r: &Rule, i: u32) {
    alerts.push(Alert {
        gid: r.gid,
        sid: r.sid,
        rev: r.rev,
        rule: i,
    });
}
