//! Reading a classic pcap as the worker consumes it: no index, no map, memory bounded by
//! one read buffer whatever the input (a file, a pipe, a device).
//!
//! The file is read with `read(2)` into a 1 MiB buffer (kernel read-ahead told the access
//! is sequential) and records are parsed a chunk at a time, so the first packet enters the
//! chain at once and each byte is touched once per loop. Reading rather than mapping
//! keeps a file truncated under a run from killing it with SIGBUS: the pass simply meets
//! the end early, which a later loop reports as the file having changed.
//!
//! Errors follow [`Trace::open`](super::Trace::open): a bad file header is `Err` from
//! [`PcapStream::open`], a bad record ends the input there (the records before it are
//! yielded) and is kept in [`Source::error`]. Later loops replay exactly the records of
//! the first one.
//!
//! pcapng is read the same way, block by block ([`NgFormat`], shared with the indexed
//! reader). Its output header (ns timestamps, snaplen, link) depends on every interface
//! block a packet uses, so `open` first reads the file once through without keeping
//! anything (the same bounded buffer), then the passes start: two reads of the file, in
//! bounded memory, where the indexed reader held the whole file and its index.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::pcap_read::{
    too_short, NgBlock, NgFormat, PcapFormat, RecordProblem, PCAP_HEADER_LEN, SHB_MIN_LEN, SHB_TYPE,
};
use super::source::{After, Source};
use super::trace::{PcapHeader, Record};
use super::TraceError;
use crate::packet::LinkKind;

/// Bytes read at a time: a few hundred packets, comfortably within L2.
pub const READ_BUFFER: usize = 1 << 20;
/// Records parsed per call while reading a pcapng file through.
const MAX_CHUNK: usize = 4096;
/// The packet buffers' largest class: bigger records are dropped as `oversize`.
const MAX_BUFFERED_PACKET: usize = 65_536;

/// What [`PcapStream::open`] found.
pub enum Opened {
    Pcap(Box<PcapStream>),
    /// A pcapng file, streamed too (its header found by a first read through).
    Pcapng(Box<PcapStream>),
}

/// How records are framed: classic pcap, or pcapng blocks.
enum Framing {
    Pcap(PcapFormat),
    Ng(NgFormat),
}

pub struct PcapStream {
    path: PathBuf,
    file: File,
    /// A regular file can be read again for the next loop; a pipe cannot.
    regular: bool,
    file_len: u64,
    framing: Framing,
    header: PcapHeader,
    link: LinkKind,
    /// Largest caplen a record may have.
    limit: u32,
    /// File offset of the first record (pcap) or block (pcapng): where a pass starts.
    start: u64,
    buf: Vec<u8>,
    /// Parse position and end of valid data in `buf`.
    pos: usize,
    len: usize,
    eof: bool,
    /// File offset of `buf[0]`.
    base: u64,
    chunk: Vec<Record>,
    /// Records yielded in this pass, and in the first pass once it has ended.
    count: u64,
    first_pass: Option<u64>,
    /// The pass is over (end of input, a bad record, or the first pass's count reached).
    done: bool,
    ts_min: u64,
    /// The first record's capture time: what follows a pass (the next one's start).
    first_ts: Option<u64>,
    ts_max: u64,
    error: Option<TraceError>,
    /// Where and why the first pass ended early (pcapng's header needs it).
    problem: Option<(u64, RecordProblem)>,
    /// The input changed between loops: no further pass.
    changed: bool,
    loops_done: u64,
}

impl PcapStream {
    /// Opens `path` and reads its file header.
    pub fn open(path: &Path) -> Result<Opened, TraceError> {
        let open_err = |source| TraceError::Open {
            path: path.to_owned(),
            source,
        };
        let file = File::open(path).map_err(open_err)?;
        let meta = file.metadata().map_err(open_err)?;
        if meta.is_dir() {
            return Err(open_err(io::Error::other("is a directory")));
        }
        let regular = meta.is_file();
        #[cfg(target_os = "linux")]
        if regular {
            use std::os::fd::AsRawFd;
            // Advice only: the kernel reads further ahead; failure changes nothing.
            // SAFETY: a valid open descriptor.
            unsafe {
                libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_SEQUENTIAL);
            }
        }
        let mut file = file;
        // Zeroed pages from the kernel, touched only as reads fill them.
        let mut buf = vec![0; READ_BUFFER];
        let (mut len, mut eof) = (0, false);
        // The header: 24 bytes (28 for pcapng's), or as many as there are. Only those are
        // read here: a caller that only probes the format (and then maps the file) pays
        // for a few bytes, not a whole buffer.
        let head_len = PCAP_HEADER_LEN.max(SHB_MIN_LEN);
        while len < PCAP_HEADER_LEN && !eof {
            read_some(&mut file, &mut buf[..head_len], &mut len, &mut eof).map_err(open_err)?;
        }
        let head = &buf[..len];
        if head.is_empty() {
            return Err(TraceError::Empty {
                path: path.to_owned(),
            });
        }
        let ng =
            head.len() >= 4 && u32::from_le_bytes([head[0], head[1], head[2], head[3]]) == SHB_TYPE;
        if ng && !regular {
            return Err(open_err(io::Error::other(
                "pcapng from a pipe or a device: give a file, or convert it (editcap -F pcap)",
            )));
        }
        let (framing, header, link, limit, pos) = if ng {
            while len < SHB_MIN_LEN && !eof {
                read_some(&mut file, &mut buf[..head_len], &mut len, &mut eof).map_err(open_err)?;
            }
            if len < SHB_MIN_LEN {
                return Err(too_short(
                    path,
                    &buf[..len],
                    "pcapng section header",
                    SHB_MIN_LEN,
                ));
            }
            // Found by the read through below.
            let header = PcapHeader::new(1, false);
            (
                Framing::Ng(NgFormat::new()),
                header,
                LinkKind::Ethernet,
                0,
                0,
            )
        } else {
            let fmt = PcapFormat::parse(path, head)?;
            let (h, l, c) = (fmt.header, fmt.link, fmt.caplen_limit());
            (Framing::Pcap(fmt), h, l, c, PCAP_HEADER_LEN)
        };
        let mut s = Box::new(PcapStream {
            path: path.to_owned(),
            file,
            regular,
            file_len: if regular { meta.len() } else { 0 },
            framing,
            header,
            link,
            limit,
            start: pos as u64,
            buf,
            pos,
            len,
            eof,
            base: 0,
            chunk: Vec::with_capacity(64),
            count: 0,
            first_pass: None,
            done: false,
            ts_min: u64::MAX,
            first_ts: None,
            ts_max: 0,
            error: None,
            problem: None,
            changed: false,
            loops_done: 0,
        });
        if !ng {
            return Ok(Opened::Pcap(s));
        }
        s.read_through()?;
        Ok(Opened::Pcapng(s))
    }

    /// pcapng: reads the file once through, keeping nothing but what the output header
    /// and the link need, then starts over. Err as [`Trace::open`](super::Trace::open)
    /// for a problem before the first packet.
    fn read_through(&mut self) -> Result<(), TraceError> {
        self.limit = u32::MAX;
        while !self.next_chunk(MAX_CHUNK).1.is_empty() {}
        if let Some(e @ TraceError::Open { .. }) = self.error.take() {
            return Err(e);
        }
        let Framing::Ng(ng) = &self.framing else {
            return Ok(());
        };
        let (link, header, _) = ng.finish(&self.path, self.count, self.problem.take())?;
        self.link = link;
        self.header = header;
        self.limit = header.snaplen;
        self.ts_min = u64::MAX;
        self.ts_max = 0;
        self.first_ts = None;
        self.restart().map_err(|source| TraceError::Open {
            path: self.path.clone(),
            source,
        })
    }

    /// Back to the first record for another pass.
    fn restart(&mut self) -> io::Result<()> {
        self.file.seek(SeekFrom::Start(self.start))?;
        self.base = self.start;
        self.pos = 0;
        self.len = 0;
        self.eof = false;
        self.count = 0;
        self.done = false;
        if let Framing::Ng(ng) = &mut self.framing {
            *ng = NgFormat::new();
        }
        Ok(())
    }

    /// Moves the bytes from `keep` on to the front of the buffer (records of the chunk
    /// being built move with them) and reads more. `need` is the size of the record at
    /// `pos`; the buffer grows only when that one record does not fit, so memory stays
    /// bounded by the largest record believed.
    fn refill(&mut self, keep: usize, need: usize) -> io::Result<()> {
        if keep > 0 {
            self.buf.copy_within(keep..self.len, 0);
            self.len -= keep;
            self.pos -= keep;
            self.base += keep as u64;
            for r in &mut self.chunk {
                r.off -= keep as u64;
            }
        }
        if self.pos + need > self.buf.len() {
            self.buf.resize(self.pos + need, 0);
        }
        read_some(&mut self.file, &mut self.buf, &mut self.len, &mut self.eof)
    }

    fn record_error(&mut self, problem: RecordProblem) {
        self.done = true;
        if self.first_pass.is_none() {
            self.problem = Some((self.base + self.pos as u64, problem.clone()));
        }
        match self.first_pass {
            // A later pass ends before the first did: the file changed under us.
            Some(n) if self.count < n => self.changed_error(),
            Some(_) => {}
            None => {
                self.error = Some(TraceError::Record {
                    path: self.path.clone(),
                    record: self.count + 1,
                    offset: self.base + self.pos as u64,
                    problem,
                })
            }
        }
    }

    fn changed_error(&mut self) {
        self.changed = true;
        self.done = true;
        self.error = Some(TraceError::Changed {
            path: self.path.clone(),
            pass: self.loops_done + 1,
            record: self.count + 1,
            expected: self.first_pass.unwrap_or(0),
        });
    }
}

impl Source for PcapStream {
    fn link(&self) -> LinkKind {
        self.link
    }

    fn header(&self) -> PcapHeader {
        self.header
    }

    fn max_packet_len(&self) -> usize {
        (self.limit as usize).min(MAX_BUFFERED_PACKET)
    }

    fn next_chunk(&mut self, max: usize) -> (&[u8], &[Record], After) {
        self.chunk.clear();
        // Where this chunk's first record starts: what a refill must keep.
        let mut start = self.pos;
        while !self.done && self.chunk.len() < max {
            if self.first_pass == Some(self.count) {
                self.done = true;
                break;
            }
            let rest = &self.buf[self.pos..self.len];
            let step = match &mut self.framing {
                Framing::Pcap(f) => f.record(rest).map(NgBlock::Packet),
                Framing::Ng(n) => n.block(rest),
            };
            match step {
                Ok(NgBlock::Skip(len)) => self.pos += len,
                Ok(NgBlock::Packet(r)) => {
                    self.chunk.push(Record {
                        off: (self.pos + r.data_off) as u64,
                        caplen: r.caplen,
                        wire_len: r.wire_len,
                        ts_ns: r.ts_ns,
                    });
                    if self.first_pass.is_none() {
                        self.ts_min = self.ts_min.min(r.ts_ns);
                        self.ts_max = self.ts_max.max(r.ts_ns);
                    }
                    self.pos += r.len;
                    self.count += 1;
                }
                Err(_) if self.pos == self.len && self.eof => {
                    if self.first_pass.is_some_and(|n| self.count < n) {
                        self.changed_error();
                    }
                    self.done = true;
                }
                Err(problem) if self.eof => self.record_error(problem),
                Err(problem) => {
                    // Incomplete: read more, unless the chunk must go first so that the
                    // buffer need not grow past one record. Anything else is bad.
                    let need = match problem {
                        RecordProblem::PastEnd { caplen, .. } => caplen as usize + 24,
                        // A block running past the end of the file is bad now (a stream
                        // of pcapng is a regular file): never grow the buffer for it.
                        RecordProblem::BlockPastEnd { len, .. }
                            if self.base + (self.pos + len as usize) as u64 > self.file_len =>
                        {
                            let have = self.file_len.saturating_sub(self.base + self.pos as u64);
                            self.record_error(RecordProblem::BlockPastEnd { len, have });
                            continue;
                        }
                        RecordProblem::BlockPastEnd { len, .. } => len as usize,
                        RecordProblem::TruncatedHeader { .. } => 24,
                        _ => {
                            self.record_error(problem);
                            continue;
                        }
                    };
                    if !self.chunk.is_empty() && self.pos - start + need > self.buf.len() {
                        break;
                    }
                    if let Err(e) = self.refill(start, need) {
                        self.error = Some(TraceError::Open {
                            path: self.path.clone(),
                            source: e,
                        });
                        self.done = true;
                    }
                    start = 0;
                }
            }
        }
        if self.first_ts.is_none() {
            self.first_ts = self.chunk.first().map(|r| r.ts_ns);
        }
        let next = if self.error.is_some() {
            After::Unknown
        } else if self.done
            || self.first_pass == Some(self.count)
            || (self.eof && self.pos == self.len)
        {
            let span = self.span_ns();
            self.first_ts
                .map_or(After::Unknown, |t| After::PassEnd(t.wrapping_add(span)))
        } else {
            let rest = &self.buf[self.pos..self.len];
            let ts = match &self.framing {
                Framing::Pcap(f) => f.peek_ts(rest),
                Framing::Ng(n) => n.peek_ts(rest),
            };
            ts.map_or(After::Unknown, After::Record)
        };
        (&self.buf[..self.len], &self.chunk, next)
    }

    fn rewind(&mut self) -> bool {
        if self.first_pass.is_none() {
            self.first_pass = Some(self.count);
        }
        self.loops_done += 1;
        if self.changed || !self.regular {
            return false;
        }
        if let Err(e) = self.restart() {
            self.error = Some(TraceError::Open {
                path: self.path.clone(),
                source: e,
            });
            self.changed = true;
            return false;
        }
        true
    }

    fn span_ns(&self) -> u64 {
        if self.ts_min > self.ts_max {
            1
        } else {
            self.ts_max - self.ts_min + 1
        }
    }

    fn records_hint(&self) -> u64 {
        if let Some(n) = self.first_pass {
            return n;
        }
        let read = self.base + self.pos as u64;
        if self.count == 0 || read <= self.start {
            return self.file_len / 512;
        }
        // Records so far, scaled to the whole file.
        (self.count as u128 * self.file_len as u128 / read as u128) as u64
    }

    fn error(&self) -> Option<&TraceError> {
        self.error.as_ref()
    }
}

/// One `read(2)` into `buf[*len..]`; sets `eof` when the input has no more.
fn read_some(file: &mut File, buf: &mut [u8], len: &mut usize, eof: &mut bool) -> io::Result<()> {
    if *len == buf.len() {
        return Ok(());
    }
    loop {
        match file.read(&mut buf[*len..]) {
            Ok(0) => {
                *eof = true;
                return Ok(());
            }
            Ok(n) => {
                *len += n;
                return Ok(());
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::Trace;

    /// A little-endian µs pcap with records of the given sizes, then `tail` raw bytes.
    fn pcap(snaplen: u32, sizes: &[usize], tail: &[u8]) -> Vec<u8> {
        let mut b = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        b.extend(snaplen.to_le_bytes());
        b.extend(1u32.to_le_bytes());
        for (i, &n) in sizes.iter().enumerate() {
            b.extend((i as u32 + 1).to_le_bytes());
            b.extend((i as u32 % 1000).to_le_bytes());
            b.extend((n as u32).to_le_bytes());
            b.extend((n as u32 + 4).to_le_bytes());
            b.extend((0..n).map(|j| (i * 7 + j) as u8));
        }
        b.extend_from_slice(tail);
        b
    }

    fn stream(bytes: &[u8]) -> (tempfile::TempDir, Box<PcapStream>) {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("t.pcap");
        std::fs::write(&p, bytes).unwrap();
        match PcapStream::open(&p).unwrap() {
            Opened::Pcap(s) => (d, s),
            Opened::Pcapng(_) => panic!("pcapng"),
        }
    }

    /// (ts, wire_len, bytes) of each packet.
    type Packets = Vec<(u64, u32, Vec<u8>)>;

    /// One pass, in chunks of at most `max`.
    fn pass(s: &mut PcapStream, max: usize) -> Packets {
        let mut v = Vec::new();
        loop {
            let (bytes, chunk, _) = s.next_chunk(max);
            if chunk.is_empty() {
                return v;
            }
            assert!(chunk.len() <= max);
            for r in chunk {
                let o = r.off as usize;
                v.push((
                    r.ts_ns,
                    r.wire_len,
                    bytes[o..o + r.caplen as usize].to_vec(),
                ));
            }
        }
    }

    fn indexed(bytes: &[u8]) -> (Packets, Option<String>) {
        let t = Trace::from_bytes(Path::new("t"), bytes.to_vec()).unwrap();
        let v = (0..t.len())
            .map(|i| {
                (
                    t.record(i).ts_ns,
                    t.record(i).wire_len,
                    t.packet(i).to_vec(),
                )
            })
            .collect();
        (v, t.error().map(|e| e.to_string()))
    }

    #[test]
    fn yields_what_the_index_holds_across_buffer_refills_and_loops() {
        // Sizes that straddle the 1 MiB buffer many times, and one record (3 MiB) larger
        // than the buffer; then a record cut short at the end of the file.
        let mut sizes: Vec<usize> = (0..3000).map(|i| [60, 1514, 9000, 333][i % 4]).collect();
        sizes.insert(1500, 3 << 20);
        let cut = [1u8, 0, 0, 0, 0, 0, 0, 0, 100, 0, 0, 0, 100, 0, 0, 0, 9, 9];
        let bytes = pcap(4 << 20, &sizes, &cut);
        let (want, err) = indexed(&bytes);
        assert_eq!(want.len(), 3001);
        for max in [1, 32, 1000] {
            let (_d, mut s) = stream(&bytes);
            assert_eq!(pass(&mut s, max), want, "chunks of {max}");
            let path = s.path.display().to_string();
            let got = s.error().map(|e| e.to_string().replace(&path, "t"));
            assert_eq!(got, err, "chunks of {max}");
            // The next loop: the same records again, the error kept, span of the first.
            assert!(s.rewind());
            assert_eq!(pass(&mut s, max), want);
            assert_eq!(s.span_ns(), 3001 * 1_000_000_000 - 1_000_000_000 + 1);
            assert_eq!(s.records_hint(), 3001);
        }
        // The buffer grew for the one big record only.
        let (_d, mut s) = stream(&bytes);
        pass(&mut s, 32);
        assert!(s.buf.len() <= (3 << 20) + 64, "{}", s.buf.len());
    }

    #[test]
    fn a_file_cut_shorter_between_loops_is_reported_not_read_past() {
        let bytes = pcap(65535, &[100; 50], &[]);
        let (d, mut s) = stream(&bytes);
        assert_eq!(pass(&mut s, 32).len(), 50);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(d.path().join("t.pcap"))
            .unwrap();
        f.set_len(24 + 20 * 116 + 50).unwrap();
        assert!(s.rewind());
        assert_eq!(pass(&mut s, 32).len(), 20);
        let e = s.error().unwrap().to_string();
        assert!(
            e.ends_with(
                "t.pcap: the file changed while it was replayed: loop 2 ended at record 21, \
                 the first loop read 50"
            ),
            "{e}"
        );
        assert!(!s.rewind());
    }

    fn shared(rel: &str) -> Option<PathBuf> {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../shared/datasets")
            .join(rel);
        p.exists().then_some(p).or_else(|| {
            eprintln!("skipped {rel}: not found");
            None
        })
    }

    /// A pcapng file streamed: the indexed reader's records, link, header and error,
    /// across chunk sizes and loops, in a buffer that never grew.
    fn same_as_indexed(path: &Path) -> usize {
        let t = Trace::open(path).unwrap();
        let want: Packets = (0..t.len())
            .map(|i| {
                (
                    t.record(i).ts_ns,
                    t.record(i).wire_len,
                    t.packet(i).to_vec(),
                )
            })
            .collect();
        for max in [1, 32, 1000] {
            let mut s = match PcapStream::open(path).unwrap() {
                Opened::Pcapng(s) => s,
                Opened::Pcap(_) => panic!("{}: not taken for pcapng", path.display()),
            };
            assert_eq!(s.link(), t.link());
            assert_eq!(format!("{:?}", s.header()), format!("{:?}", t.header()));
            for lp in 0..2 {
                assert_eq!(
                    pass(&mut s, max),
                    want,
                    "{} chunks of {max}",
                    path.display()
                );
                let e = |e: Option<&TraceError>| e.map(|e| e.to_string());
                assert_eq!(e(s.error()), e(t.error()), "{}", path.display());
                assert!(s.rewind() || lp == 1);
            }
            assert_eq!(s.span_ns(), t.span_ns());
            assert_eq!(s.buf.len(), READ_BUFFER, "the buffer grew");
        }
        want.len()
    }

    #[test]
    fn pcapng_is_streamed_with_the_indexed_readers_records_and_header() {
        let mut seen = 0;
        // (retina/quic_retry.pcapng is a classic pcap despite its name.)
        for rel in ["retina/quic_kyber.pcapng"] {
            if let Some(p) = shared(rel) {
                assert!(same_as_indexed(&p) > 0);
                seen += 1;
            }
        }
        // A large real capture converted (editcap), and the same cut in the middle of a
        // block: the packets before the cut, then the indexed reader's error.
        let d = tempfile::tempdir().unwrap();
        let ng = d.path().join("merged.pcapng");
        if let Some(src) = shared("bench/ndpi-ether-merged.pcap") {
            let ok = std::process::Command::new("editcap")
                .args(["-F", "pcapng"])
                .arg(&src)
                .arg(&ng)
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "editcap -F pcapng failed (is it installed?)");
            let n = same_as_indexed(&ng);
            assert_eq!(n, Trace::open(&src).unwrap().len());
            let bytes = std::fs::read(&ng).unwrap();
            let cut = d.path().join("cut.pcapng");
            std::fs::write(&cut, &bytes[..bytes.len() / 2 + 7]).unwrap();
            let kept = same_as_indexed(&cut);
            assert!(kept > 0 && kept < n, "{kept} of {n}");
            let t = Trace::open(&cut).unwrap();
            assert!(t.error().is_some(), "the cut is reported");
            seen += 1;
        }
        assert!(seen > 0, "no pcapng found or made");
    }

    #[test]
    fn pcapng_header_errors_are_open_errors() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("t.pcapng");
        // A section header cut short, and a packet before any interface.
        std::fs::write(&p, [0x0a, 0x0d, 0x0d, 0x0a, 28, 0, 0, 0, 0x4d, 0x3c]).unwrap();
        let e = PcapStream::open(&p).err().map(|e| e.to_string());
        let want = Trace::open(&p).err().map(|e| e.to_string());
        assert!(want.is_some());
        assert_eq!(e, want);
    }

    #[test]
    fn devices_and_pipes_are_read_in_bounded_memory() {
        // /dev/zero never ends: the header is refused after one buffer.
        let e = match PcapStream::open(Path::new("/dev/zero")) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("accepted /dev/zero"),
        };
        assert!(
            e.starts_with("/dev/zero: not a pcap or pcapng file: bad magic 00000000"),
            "{e}"
        );
    }
}
