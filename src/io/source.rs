//! Where a run's packets come from: a pass over a trace, chunk by chunk, repeated for
//! `--loops`. An indexed [`Trace`] in memory and a [`PcapStream`](super::PcapStream) read
//! from a file as the worker goes are both sources.

use super::pcap_map::MappedPcap;
use super::trace::{PcapHeader, Record, Trace};
use super::TraceError;
use crate::packet::{prefetch_ptr, LinkKind};

/// What follows a chunk, as far as a source knows without reading further.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum After {
    /// The next record of this pass, stamped so (unshifted).
    Record(u64),
    /// The pass ended: a next pass would start with a record stamped so (the first
    /// record's time plus one span, unshifted otherwise).
    PassEnd(u64),
    /// Not known: the next record's header lies past a stream's read buffer, or the
    /// pass was empty or ended on an error.
    Unknown,
}

/// Records handed to the worker a chunk at a time.
pub trait Source {
    fn link(&self) -> LinkKind;
    /// The header an output pcap gets.
    fn header(&self) -> PcapHeader;
    /// The largest packet this source can yield (sizes the packet buffers).
    fn max_packet_len(&self) -> usize;
    /// Up to `max` next records of this pass and the bytes their offsets point into,
    /// valid until the next call. Empty at the end of the pass (or at an error). The
    /// third value is what follows the chunk, for the run clock's look-ahead
    /// (docs/time.md).
    fn next_chunk(&mut self, max: usize) -> (&[u8], &[Record], After);
    /// Starts another pass over the same records. `false` when there cannot be one: the
    /// input changed under us (then [`Source::error`] says so) or cannot be read again.
    fn rewind(&mut self) -> bool;
    /// Timestamp span of one pass plus 1 ns (the shift between loops); exact once the
    /// first pass has ended.
    fn span_ns(&self) -> u64;
    /// Records per pass: exact for an indexed trace, estimated while a stream's first
    /// pass runs (for the progress bar only).
    fn records_hint(&self) -> u64;
    /// The error that ended reading early: the records before it were good.
    fn error(&self) -> Option<&TraceError>;
    /// The bytes [`Source::next_chunk`] returns, when they last for the rest of the
    /// process (a leaked map): packets may then view them instead of copying them.
    fn lasting(&self) -> Option<&'static [u8]> {
        None
    }
    /// This source as a mapped pcap, whose records a one-worker run reads straight into
    /// its packets ([`MappedPcap::next_with`]).
    fn mapped(&mut self) -> Option<&mut MappedPcap> {
        None
    }
    /// Look ahead: from now on, each [`Source::next_chunk`] also starts loading the
    /// first `reach` bytes (at most 64: the header lines) of the records after the chunk,
    /// so their loads overlap the work on this one; 0 stops it. The runner asks it of a
    /// [`lasting`](Source::lasting) source when the chain reads packet bytes (a view's
    /// first touch is then the NF's). Sources that load ahead anyway ignore it (the
    /// default): a mapped pcap prefetches every line ahead of its reader.
    fn set_lookahead(&mut self, reach: usize) {
        let _ = reach;
    }
}

/// A pass over an indexed trace.
pub struct TraceSource<'a> {
    trace: &'a Trace,
    pos: usize,
    span: u64,
    /// The trace's bytes, when the trace lasts the process ([`TraceSource::in_place`]).
    lasting: Option<&'static [u8]>,
    /// Bytes of each next record to prefetch (0: none); see [`Source::set_lookahead`].
    reach: usize,
}

impl<'a> TraceSource<'a> {
    /// A pass whose packets the runner copies out of the trace.
    pub fn new(trace: &'a Trace) -> TraceSource<'a> {
        TraceSource {
            trace,
            pos: 0,
            span: trace.span_ns(),
            lasting: None,
            reach: 0,
        }
    }

    /// The bytes of each next record this source prefetches (0: it does not look ahead).
    pub fn lookahead(&self) -> usize {
        self.reach
    }
}

impl TraceSource<'static> {
    /// A pass over a trace that lasts the process: the runner's packets view its bytes
    /// in place (copied on an NF's first write), as they view a mapped pcap's.
    pub fn in_place(trace: &'static Trace) -> TraceSource<'static> {
        TraceSource {
            lasting: Some(trace.raw().0),
            ..TraceSource::new(trace)
        }
    }
}

impl Source for TraceSource<'_> {
    fn link(&self) -> LinkKind {
        self.trace.link()
    }
    fn header(&self) -> PcapHeader {
        self.trace.header()
    }
    fn max_packet_len(&self) -> usize {
        self.trace.max_packet_len()
    }
    #[inline]
    fn next_chunk(&mut self, max: usize) -> (&[u8], &[Record], After) {
        let (bytes, recs) = self.trace.raw();
        let end = (self.pos + max).min(recs.len());
        let chunk = &recs[self.pos..end];
        self.pos = end;
        if self.reach > 0 {
            // The next chunk's header lines: the record's first byte's and its last
            // asked-for byte's (the same line, or the next when the header crosses one).
            // Only formed, never read: no bounds check needed.
            let last = self.reach - 1;
            for r in &recs[end..(end + max).min(recs.len())] {
                let at = bytes.as_ptr().wrapping_add(r.off as usize);
                prefetch_ptr(at);
                prefetch_ptr(at.wrapping_add(last));
            }
        }
        let after = match (recs.get(end), recs.first()) {
            (Some(r), _) => After::Record(r.ts_ns),
            (None, Some(r)) => After::PassEnd(r.ts_ns.wrapping_add(self.span)),
            (None, None) => After::Unknown,
        };
        (bytes, chunk, after)
    }
    fn rewind(&mut self) -> bool {
        self.pos = 0;
        true
    }
    fn span_ns(&self) -> u64 {
        self.span
    }
    fn records_hint(&self) -> u64 {
        self.trace.len() as u64
    }
    fn error(&self) -> Option<&TraceError> {
        self.trace.error()
    }
    fn lasting(&self) -> Option<&'static [u8]> {
        self.lasting
    }
    fn set_lookahead(&mut self, reach: usize) {
        self.reach = reach.min(64);
    }
}
