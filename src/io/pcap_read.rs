//! Reading pcap and pcapng files into a [`Trace`](super::Trace).
//!
//! The file is memory-mapped and indexed once: each [`Record`] points at the packet's bytes
//! in the map, so nothing is copied and nothing is allocated per packet besides the record
//! vector.
//!
//! pcap-parser parses the pcap file header, the pcap record headers and the pcapng section
//! and interface blocks. The pcapng block framing and the fixed fields of packet blocks
//! (EPB, SPB, OPB) are decoded here, because pcap-parser's packet-block parsers allocate a
//! `Vec` of options for every packet that carries options, know no OPB, and its
//! `if_tsresol`/`if_tsoffset` helpers mishandle power-of-2 resolutions and big-endian
//! offsets.
//!
//! Error policy: problems in the file header (and, for pcapng, anything before the first
//! packet decides the link type) make [`Trace::open`] return `Err`; a problem at a later
//! record ends the trace there, keeps the records before it, and is reported by
//! [`Trace::error`].
//!
//! pcapng: sections may change byte order and restart interface numbering; blocks other
//! than SHB, IDB, EPB, SPB and OPB are skipped. The trace's link type is that of the first
//! packet's interface; interfaces no packet uses may have any link type, but a packet on an
//! interface of another link kind ends the trace there. The pcap header chosen for a pcapng
//! trace has ns timestamps if any used interface is finer than 1 µs, and the largest
//! interface snaplen (262144 if they all say 0), raised to the largest caplen.
//!
//! Caplen rule: a record whose caplen exceeds `max(snaplen, 262144)` (snaplen of the file
//! or of the pcapng interface; 262144 is libpcap's largest usual snaplen and covers files
//! written with snaplen 0) is absurd, as is anything above 256 MiB.

use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use pcap_parser::parse_pcap_header;
use pcap_parser::pcapng::{
    parse_interfacedescriptionblock_be, parse_interfacedescriptionblock_le,
    parse_sectionheaderblock,
};

use super::linktype::{describe_linktype, link_from_pcap, SUPPORTED_LINKS};
use super::trace::{Backing, PcapHeader, Record, Trace};
use crate::packet::LinkKind;

/// Largest snaplen or caplen believed: more is a corrupt file, not a capture.
pub const MAX_SNAPLEN: u32 = 256 << 20;
/// libpcap's usual maximum snaplen; a caplen up to this is fine whatever the header says.
pub const DEFAULT_SNAPLEN: u32 = 262_144;

pub(crate) const PCAP_HEADER_LEN: usize = 24;
pub(crate) const SHB_MIN_LEN: usize = 28;

pub(crate) const SHB_TYPE: u32 = 0x0A0D_0D0A;
const IDB_TYPE: u32 = 0x0000_0001;
const OPB_TYPE: u32 = 0x0000_0002;
const SPB_TYPE: u32 = 0x0000_0003;
const EPB_TYPE: u32 = 0x0000_0006;
const BOM: u32 = 0x1A2B_3C4D;

/// Why a trace could not be read (completely). Each renders as one line naming the file.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{}: cannot read: {source}", .path.display())]
    Open { path: PathBuf, source: io::Error },
    #[error("{}: empty file (0 bytes), not a pcap or pcapng capture", .path.display())]
    Empty { path: PathBuf },
    #[error("{}: file is {len} bytes, too short for a {format} ({need} bytes)", .path.display())]
    TooShort {
        path: PathBuf,
        len: u64,
        format: &'static str,
        need: usize,
    },
    #[error(
        "{}: not a pcap or pcapng file: bad magic {magic} (expected a1b2c3d4 or a1b23c4d, either byte order, or pcapng 0a0d0d0a)",
        .path.display()
    )]
    BadMagic { path: PathBuf, magic: String },
    #[error("{}: unsupported {format} version {major}.{minor} (expected {expected})", .path.display())]
    Version {
        path: PathBuf,
        format: &'static str,
        major: u16,
        minor: u16,
        expected: &'static str,
    },
    #[error("{}: absurd snaplen {snaplen} in the file header (more than 256 MiB)", .path.display())]
    Snaplen { path: PathBuf, snaplen: u32 },
    #[error("{}: unsupported link type {link}; supported: {SUPPORTED_LINKS}", .path.display())]
    LinkType {
        path: PathBuf,
        /// The raw number.
        linktype: u32,
        /// The number and, where known, its name.
        link: String,
    },
    /// A problem in the pcapng blocks before the first packet.
    #[error("{}: pcapng block at byte offset {offset}: {problem}", .path.display())]
    Block {
        path: PathBuf,
        offset: u64,
        problem: RecordProblem,
    },
    /// A later loop met the end of the input before the first loop did.
    #[error(
        "{}: the file changed while it was replayed: loop {pass} ended at record {record}, the first loop read {expected}",
        .path.display()
    )]
    Changed {
        path: PathBuf,
        pass: u64,
        record: u64,
        expected: u64,
    },
    /// A mapped file got shorter during its first pass (`catena run` in place).
    #[error(
        "{}: the file shrank while it was read, at record {record}: the packets before it were processed",
        .path.display()
    )]
    Shrank { path: PathBuf, record: u64 },
    /// A problem at a record: the records before it were read.
    #[error("{}: record {record} at byte offset {offset}: {problem}", .path.display())]
    Record {
        path: PathBuf,
        /// 1-based number of the record (packet) that could not be read, as tshark counts.
        record: u64,
        offset: u64,
        problem: RecordProblem,
    },
}

/// What was wrong with one record or pcapng block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordProblem {
    TruncatedHeader {
        have: u64,
        need: u64,
    },
    CaplenAbsurd {
        caplen: u32,
        limit: u32,
    },
    PastEnd {
        caplen: u32,
        have: u64,
    },
    BlockLength {
        len: u32,
        min: u32,
    },
    BlockPastEnd {
        len: u32,
        have: u64,
    },
    BlockTrailer {
        len: u32,
        trailer: u32,
    },
    BlockCaplen {
        caplen: u32,
        len: u32,
    },
    Unparsable {
        what: &'static str,
    },
    BadByteOrder {
        bom: u32,
    },
    Version {
        major: u16,
        minor: u16,
    },
    NoSection,
    NoInterface {
        id: u32,
    },
    TsResol {
        id: u32,
        value: u8,
    },
    LinkType {
        id: u32,
        link: String,
    },
    MixedLinks {
        id: u32,
        link: String,
        first: String,
    },
}

impl fmt::Display for RecordProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use RecordProblem::*;
        match self {
            TruncatedHeader { have, need } => write!(
                f,
                "truncated record header: {have} of {need} bytes before the end of the file"
            ),
            CaplenAbsurd { caplen, limit } => write!(
                f,
                "absurd caplen {caplen} (more than {limit} = max(snaplen, 262144), capped at 256 MiB)"
            ),
            PastEnd { caplen, have } => write!(
                f,
                "caplen {caplen} runs past the end of the file (only {have} bytes left)"
            ),
            BlockLength { len, min } => write!(
                f,
                "bad block length {len} (must be a multiple of 4 and at least {min})"
            ),
            BlockPastEnd { len, have } => write!(
                f,
                "block length {len} runs past the end of the file (only {have} bytes left)"
            ),
            BlockTrailer { len, trailer } => write!(
                f,
                "inconsistent block length: trailing length {trailer} differs from leading length {len}"
            ),
            BlockCaplen { caplen, len } => write!(
                f,
                "caplen {caplen} does not fit in its block of length {len}"
            ),
            Unparsable { what } => write!(f, "malformed {what}"),
            BadByteOrder { bom } => write!(f, "bad byte-order magic {bom:08x} in section header"),
            Version { major, minor } => {
                write!(f, "unsupported pcapng version {major}.{minor} (expected 1.x)")
            }
            NoSection => write!(f, "block before any section header block"),
            NoInterface { id } => write!(
                f,
                "packet on interface {id}, which no interface description block defined"
            ),
            TsResol { id, value } => {
                write!(f, "interface {id}: unsupported if_tsresol {value:#04x}")
            }
            LinkType { id, link } => write!(
                f,
                "interface {id}: unsupported link type {link}; supported: {SUPPORTED_LINKS}"
            ),
            MixedLinks { id, link, first } => write!(
                f,
                "interface {id} has link type {link} but earlier packets are {first}; a trace has one link type"
            ),
        }
    }
}

impl TraceError {
    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            TraceError::Open { path, .. }
            | TraceError::Empty { path }
            | TraceError::TooShort { path, .. }
            | TraceError::BadMagic { path, .. }
            | TraceError::Version { path, .. }
            | TraceError::Snaplen { path, .. }
            | TraceError::LinkType { path, .. }
            | TraceError::Block { path, .. }
            | TraceError::Record { path, .. }
            | TraceError::Changed { path, .. }
            | TraceError::Shrank { path, .. } => path,
        }
    }
}

impl Trace {
    /// Opens a pcap or pcapng file (memory-mapped). See the module docs for which errors
    /// are `Err` and which end the trace early with [`Trace::error`] set.
    pub fn open(path: &Path) -> Result<Trace, TraceError> {
        let backing = map_file(path)?;
        let parsed = parse(path, backing.bytes())?;
        Ok(Trace {
            backing,
            records: parsed.records,
            link: parsed.link,
            header: parsed.header,
            error: parsed.error,
        })
    }

    /// Reads a regular file into memory and indexes it: no map, so a file truncated
    /// under the run cannot raise SIGBUS (`catena run` over pcapng).
    pub fn load(path: &Path) -> Result<Trace, TraceError> {
        let mut file = File::open(path).map_err(|source| TraceError::Open {
            path: path.to_owned(),
            source,
        })?;
        let backing = read_whole(path, &mut file)?;
        let parsed = parse(path, backing.bytes())?;
        Ok(Trace {
            backing,
            records: parsed.records,
            link: parsed.link,
            header: parsed.header,
            error: parsed.error,
        })
    }

    /// Indexes a capture already in memory (tests, stdin). `name` is used in messages.
    pub fn from_bytes(name: &Path, bytes: Vec<u8>) -> Result<Trace, TraceError> {
        let backing = Backing::Owned(bytes);
        let parsed = parse(name, backing.bytes())?;
        Ok(Trace {
            backing,
            records: parsed.records,
            link: parsed.link,
            header: parsed.header,
            error: parsed.error,
        })
    }
}

fn map_file(path: &Path) -> Result<Backing, TraceError> {
    let open_err = |source| TraceError::Open {
        path: path.to_owned(),
        source,
    };
    let mut file = File::open(path).map_err(open_err)?;
    let meta = file.metadata().map_err(open_err)?;
    if meta.is_dir() {
        return Err(open_err(io::Error::other("is a directory")));
    }
    if !meta.is_file() {
        // Read whole, a pipe or a device could fill memory (/dev/zero never ends).
        return Err(open_err(io::Error::other(
            "not a regular file (a pipe or a device): `catena run` streams those; here give a file",
        )));
    }
    if meta.len() == 0 {
        return Err(TraceError::Empty {
            path: path.to_owned(),
        });
    }
    // SAFETY: the map is read-only; another process truncating the file while we hold
    // the map is outside what the mapped reader defends against (`catena run` reads
    // with `read(2)` instead, see `PcapStream`).
    match unsafe { memmap2::Mmap::map(&file) } {
        Ok(map) => {
            #[cfg(unix)]
            let _ = map.advise(memmap2::Advice::Sequential);
            Ok(Backing::Mmap(map))
        }
        Err(_) => read_whole(path, &mut file),
    }
}

fn read_whole(path: &Path, file: &mut File) -> Result<Backing, TraceError> {
    let open_err = |source| TraceError::Open {
        path: path.to_owned(),
        source,
    };
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(open_err)?;
    if bytes.is_empty() {
        return Err(TraceError::Empty {
            path: path.to_owned(),
        });
    }
    Ok(Backing::Owned(bytes))
}

struct Parsed {
    records: Vec<Record>,
    link: LinkKind,
    header: PcapHeader,
    error: Option<TraceError>,
}

fn parse(path: &Path, data: &[u8]) -> Result<Parsed, TraceError> {
    if data.is_empty() {
        return Err(TraceError::Empty {
            path: path.to_owned(),
        });
    }
    if data.len() >= 4 && u32::from_le_bytes([data[0], data[1], data[2], data[3]]) == SHB_TYPE {
        return parse_pcapng(path, data);
    }
    parse_pcap(path, data)
}

fn caplen_limit(snaplen: u32) -> u32 {
    snaplen.clamp(DEFAULT_SNAPLEN, MAX_SNAPLEN)
}

pub(crate) fn too_short(path: &Path, data: &[u8], format: &'static str, need: usize) -> TraceError {
    TraceError::TooShort {
        path: path.to_owned(),
        len: data.len() as u64,
        format,
        need,
    }
}

/// What reading a classic pcap's records needs from its file header.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PcapFormat {
    pub(crate) header: PcapHeader,
    pub(crate) link: LinkKind,
    big_endian: bool,
    /// 16, or 24 for Kuznetzov's "modified" pcap (ifindex, protocol, type per record).
    rec_hdr_len: usize,
    frac_ns: u64,
    limit: u32,
}

/// One record read by [`PcapFormat::record`]: where its bytes start (relative to the
/// record) and how many bytes the record takes.
pub(crate) struct RawRecord {
    pub(crate) caplen: u32,
    pub(crate) wire_len: u32,
    pub(crate) ts_ns: u64,
    pub(crate) data_off: usize,
    pub(crate) len: usize,
}

impl PcapFormat {
    /// Reads the 24-byte file header at the start of `data`.
    pub(crate) fn parse(path: &Path, data: &[u8]) -> Result<PcapFormat, TraceError> {
        if data.len() < 4 {
            return Err(too_short(path, data, "pcap header", PCAP_HEADER_LEN));
        }
        let magic = u32::from_le_bytes([data[0], data[1], data[2], data[3]]);
        let known = matches!(
            magic,
            0xa1b2_c3d4 | 0xd4c3_b2a1 | 0xa1b2_3c4d | 0x4d3c_b2a1 | 0xa1b2_cd34
        );
        if !known {
            return Err(TraceError::BadMagic {
                path: path.to_owned(),
                magic: format!(
                    "{:02x}{:02x}{:02x}{:02x}",
                    data[0], data[1], data[2], data[3]
                ),
            });
        }
        if data.len() < PCAP_HEADER_LEN {
            return Err(too_short(path, data, "pcap header", PCAP_HEADER_LEN));
        }
        let hdr = match parse_pcap_header(data) {
            Ok((_, h)) => h,
            // Unreachable with a known magic and 24 bytes, but never panic on input.
            Err(_) => {
                return Err(TraceError::BadMagic {
                    path: path.to_owned(),
                    magic: format!("{magic:08x}"),
                })
            }
        };
        if hdr.version_major != 2 {
            return Err(TraceError::Version {
                path: path.to_owned(),
                format: "pcap",
                major: hdr.version_major,
                minor: hdr.version_minor,
                expected: "2.x",
            });
        }
        // libpcap takes a snaplen that is negative as a C int (0xffffffff from some
        // writers) as no snaplen and uses the link's largest, 262144: tcpdump reads such
        // files, so do we. Positive ones past 256 MiB stay refused.
        let snaplen = if hdr.snaplen > i32::MAX as u32 {
            DEFAULT_SNAPLEN
        } else {
            hdr.snaplen
        };
        if snaplen > MAX_SNAPLEN {
            return Err(TraceError::Snaplen {
                path: path.to_owned(),
                snaplen,
            });
        }
        let linktype = hdr.network.0 as u32;
        let link = link_from_pcap(linktype).ok_or_else(|| TraceError::LinkType {
            path: path.to_owned(),
            linktype,
            link: describe_linktype(linktype),
        })?;
        let nanos = hdr.is_nanosecond_precision();
        Ok(PcapFormat {
            header: PcapHeader {
                version_major: hdr.version_major,
                version_minor: hdr.version_minor,
                thiszone: hdr.thiszone,
                sigfigs: hdr.sigfigs,
                snaplen,
                linktype,
                nanos,
            },
            link,
            big_endian: hdr.is_bigendian(),
            rec_hdr_len: if hdr.is_modified_format() { 24 } else { 16 },
            frac_ns: if nanos { 1 } else { 1000 },
            limit: caplen_limit(snaplen),
        })
    }

    /// Largest caplen a record may have before it is called absurd.
    pub(crate) fn caplen_limit(&self) -> u32 {
        self.limit
    }

    /// Bytes of a record's header: 16, or 24 in the "modified" format.
    pub(crate) fn rec_hdr_len(&self) -> usize {
        self.rec_hdr_len
    }

    /// The record whose header starts with `hdr`, unchecked: its caplen may be absurd or
    /// run past the end ([`record`](Self::record) checks both). For a reader that has
    /// shown the record lies inside the file by other means.
    #[inline(always)]
    pub(crate) fn record_at(&self, hdr: &[u8; 16]) -> RawRecord {
        // The four fields read at once, byte-swapped in one branch: this runs per record.
        let word = |i: usize| u32::from_le_bytes([hdr[i], hdr[i + 1], hdr[i + 2], hdr[i + 3]]);
        let mut f = [word(0), word(4), word(8), word(12)];
        if self.big_endian {
            f = f.map(u32::swap_bytes);
        }
        let [sec, frac, caplen, wire_len] = f;
        let h = self.rec_hdr_len;
        RawRecord {
            caplen,
            wire_len,
            ts_ns: sec as u64 * 1_000_000_000 + frac as u64 * self.frac_ns,
            data_off: h,
            len: h + caplen as usize,
        }
    }

    /// Reads the record at the start of `rest` (which runs to the end of the file, or of
    /// what has been read of it so far).
    #[inline]
    /// The capture time of the record starting `rest`, when its header is there.
    pub(crate) fn peek_ts(&self, rest: &[u8]) -> Option<u64> {
        let hdr = rest.get(..16).filter(|_| rest.len() >= self.rec_hdr_len)?;
        let be = self.big_endian;
        Some(
            read_u32(hdr, 0, be) as u64 * 1_000_000_000
                + read_u32(hdr, 4, be) as u64 * self.frac_ns,
        )
    }

    #[inline]
    pub(crate) fn record(&self, rest: &[u8]) -> Result<RawRecord, RecordProblem> {
        let h = self.rec_hdr_len;
        let Some(hdr) = rest.first_chunk::<16>().filter(|_| rest.len() >= h) else {
            return Err(RecordProblem::TruncatedHeader {
                have: rest.len() as u64,
                need: h as u64,
            });
        };
        let r = self.record_at(hdr);
        let caplen = r.caplen;
        // The caplen is checked before the data, so a huge value is reported as absurd
        // rather than as running past the end.
        if caplen > self.limit {
            return Err(RecordProblem::CaplenAbsurd {
                caplen,
                limit: self.limit,
            });
        }
        if ((rest.len() - h) as u64) < caplen as u64 {
            return Err(RecordProblem::PastEnd {
                caplen,
                have: (rest.len() - h) as u64,
            });
        }
        Ok(r)
    }
}

fn parse_pcap(path: &Path, data: &[u8]) -> Result<Parsed, TraceError> {
    let fmt = PcapFormat::parse(path, data)?;
    // A rough guess (records of a few hundred bytes) that avoids most regrowth.
    let mut records = Vec::with_capacity(data.len() / 512);
    let mut error = None;
    let mut off = PCAP_HEADER_LEN;
    while off < data.len() {
        match fmt.record(&data[off..]) {
            Ok(r) => {
                records.push(Record {
                    off: (off + r.data_off) as u64,
                    caplen: r.caplen,
                    wire_len: r.wire_len,
                    ts_ns: r.ts_ns,
                });
                off += r.len;
            }
            Err(problem) => {
                error = Some(TraceError::Record {
                    path: path.to_owned(),
                    record: records.len() as u64 + 1,
                    offset: off as u64,
                    problem,
                });
                break;
            }
        }
    }
    Ok(Parsed {
        records,
        link: fmt.link,
        header: fmt.header,
        error,
    })
}

#[inline]
fn read_u32(b: &[u8], at: usize, big_endian: bool) -> u32 {
    // Callers have checked the length; a short slice reads as 0 rather than panicking.
    let Some(x) = b.get(at..at + 4) else { return 0 };
    let x = [x[0], x[1], x[2], x[3]];
    if big_endian {
        u32::from_be_bytes(x)
    } else {
        u32::from_le_bytes(x)
    }
}

#[inline]
fn read_u16(b: &[u8], at: usize, big_endian: bool) -> u16 {
    let Some(x) = b.get(at..at + 2) else { return 0 };
    let x = [x[0], x[1]];
    if big_endian {
        u16::from_be_bytes(x)
    } else {
        u16::from_le_bytes(x)
    }
}

/// Timestamp units of one pcapng interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TsRes {
    /// Units of 10^-n s.
    Pow10(u32),
    /// Units of 2^-n s.
    Pow2(u32),
}

impl TsRes {
    fn from_option(v: u8) -> Option<TsRes> {
        let n = (v & 0x7f) as u32;
        if v & 0x80 == 0 {
            (n <= 19).then_some(TsRes::Pow10(n))
        } else {
            (n <= 63).then_some(TsRes::Pow2(n))
        }
    }

    /// Finer than a microsecond: the output pcap then needs nanosecond timestamps.
    fn finer_than_us(self) -> bool {
        match self {
            TsRes::Pow10(n) => n > 6,
            TsRes::Pow2(n) => n >= 20, // 2^20 > 10^6
        }
    }

    fn to_ns(self, ts: u64) -> u128 {
        let ts = ts as u128;
        match self {
            TsRes::Pow10(n) if n <= 9 => ts * 10u128.pow(9 - n),
            TsRes::Pow10(n) => ts / 10u128.pow(n - 9),
            TsRes::Pow2(n) => (ts * 1_000_000_000) >> n,
        }
    }
}

struct Iface {
    linktype: u32,
    link: Option<LinkKind>,
    snaplen: u32,
    res: TsRes,
    offset_ns: i128,
}

/// What reading pcapng blocks one at a time keeps: the section's byte order, its
/// interfaces, the link the first packet decided, and what the output header gets. The
/// indexed reader and the stream ([`super::PcapStream`]) both read through it.
pub(crate) struct NgFormat {
    ifaces: Vec<Iface>,
    in_section: bool,
    big_endian: bool,
    /// Decided by the first packet: (raw linktype, kind).
    link: Option<(u32, LinkKind)>,
    first_idb_link: Option<u32>,
    /// The linktype of a packet's interface that catena cannot read.
    bad_link: Option<u32>,
    nanos: bool,
    snaplen: u32,
    max_caplen: u32,
}

/// One block read by [`NgFormat::block`].
pub(crate) enum NgBlock {
    /// No packet: skip this many bytes.
    Skip(usize),
    Packet(RawRecord),
}

impl NgFormat {
    pub(crate) fn new() -> NgFormat {
        NgFormat {
            ifaces: Vec::new(),
            in_section: false,
            big_endian: false,
            link: None,
            first_idb_link: None,
            bad_link: None,
            nanos: false,
            snaplen: 0,
            max_caplen: 0,
        }
    }

    /// Reads the block at the start of `rest` (which runs to the end of the file, or of
    /// what has been read of it so far: `TruncatedHeader` and `BlockPastEnd` then mean
    /// "read more").
    pub(crate) fn block(&mut self, rest: &[u8]) -> Result<NgBlock, RecordProblem> {
        let (len, pkt) = pcapng_block(
            rest,
            0,
            &mut self.big_endian,
            &mut self.in_section,
            &mut self.ifaces,
            &mut self.first_idb_link,
        )?;
        let Some(pkt) = pkt else {
            return Ok(NgBlock::Skip(len));
        };
        let iface = &self.ifaces[pkt.iface];
        let Some(kind) = iface.link else {
            self.bad_link = Some(iface.linktype);
            return Err(RecordProblem::LinkType {
                id: pkt.iface as u32,
                link: describe_linktype(iface.linktype),
            });
        };
        match self.link {
            None => self.link = Some((iface.linktype, kind)),
            Some((first, k)) if k != kind => {
                return Err(RecordProblem::MixedLinks {
                    id: pkt.iface as u32,
                    link: describe_linktype(iface.linktype),
                    first: describe_linktype(first),
                })
            }
            Some(_) => {}
        }
        let limit = caplen_limit(iface.snaplen);
        if pkt.caplen > limit {
            return Err(RecordProblem::CaplenAbsurd {
                caplen: pkt.caplen,
                limit,
            });
        }
        self.nanos |= iface.res.finer_than_us();
        self.snaplen = self.snaplen.max(iface.snaplen);
        self.max_caplen = self.max_caplen.max(pkt.caplen);
        let ns = iface.res.to_ns(pkt.ts) as i128 + iface.offset_ns;
        Ok(NgBlock::Packet(RawRecord {
            caplen: pkt.caplen,
            wire_len: pkt.wire_len,
            ts_ns: ns.clamp(0, u64::MAX as i128) as u64,
            data_off: pkt.data_off,
            len,
        }))
    }

    /// The capture time of the next packet block in `rest`, skipping blocks that change
    /// nothing (statistics, names), when it is there and needs no new interface.
    pub(crate) fn peek_ts(&self, mut rest: &[u8]) -> Option<u64> {
        let be = self.big_endian;
        loop {
            let h = rest.get(..12)?;
            let raw = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
            let btype = if be { raw.swap_bytes() } else { raw };
            let len = read_u32(h, 4, be) as usize;
            let block = rest
                .get(..len)
                .filter(|_| len >= 12 && len.is_multiple_of(4))?;
            match btype {
                SHB_TYPE | IDB_TYPE => return None,
                EPB_TYPE | OPB_TYPE if len >= 32 => {
                    let id = if btype == EPB_TYPE {
                        read_u32(block, 8, be) as usize
                    } else {
                        read_u16(block, 8, be) as usize
                    };
                    let iface = self.ifaces.get(id)?;
                    let ts =
                        (read_u32(block, 12, be) as u64) << 32 | read_u32(block, 16, be) as u64;
                    let ns = iface.res.to_ns(ts) as i128 + iface.offset_ns;
                    return Some(ns.clamp(0, u64::MAX as i128) as u64);
                }
                SPB_TYPE => {
                    let iface = self.ifaces.first()?;
                    let ns = iface.res.to_ns(0) as i128 + iface.offset_ns;
                    return Some(ns.clamp(0, u64::MAX as i128) as u64);
                }
                EPB_TYPE | OPB_TYPE => return None,
                _ => rest = &rest[len..],
            }
        }
    }

    /// The trace's link and output header once the blocks up to `error` (at `offset`)
    /// have been read, `records` packets of them; Err when the file is unusable (an
    /// error before the first packet, or no packet and an unknown link).
    pub(crate) fn finish(
        &self,
        path: &Path,
        records: u64,
        error: Option<(u64, RecordProblem)>,
    ) -> Result<(LinkKind, PcapHeader, Option<TraceError>), TraceError> {
        if records == 0 {
            if let (Some(linktype), Some((_, RecordProblem::LinkType { .. }))) =
                (self.bad_link, &error)
            {
                return Err(TraceError::LinkType {
                    path: path.to_owned(),
                    linktype,
                    link: describe_linktype(linktype),
                });
            }
        }
        // No packet: the trace still gets a link, from the first interface or Ethernet.
        let (linktype, kind) = match self.link {
            Some(l) => l,
            None => {
                let lt = self.first_idb_link.unwrap_or(1);
                match link_from_pcap(lt) {
                    Some(k) => (lt, k),
                    None if error.is_none() => {
                        return Err(TraceError::LinkType {
                            path: path.to_owned(),
                            linktype: lt,
                            link: describe_linktype(lt),
                        })
                    }
                    None => (lt, LinkKind::Ethernet),
                }
            }
        };
        // Errors before the first packet are file-header errors.
        if records == 0 {
            if let Some((offset, problem)) = error {
                return Err(TraceError::Block {
                    path: path.to_owned(),
                    offset,
                    problem,
                });
            }
        }
        let snaplen = if self.snaplen == 0 {
            DEFAULT_SNAPLEN
        } else {
            self.snaplen
        };
        let header = PcapHeader {
            snaplen: snaplen.max(self.max_caplen),
            ..PcapHeader::new(linktype, self.nanos)
        };
        let error = error.map(|(offset, problem)| TraceError::Record {
            path: path.to_owned(),
            record: records + 1,
            offset,
            problem,
        });
        Ok((kind, header, error))
    }
}

/// Decodes a pcapng file: sections, interfaces and packet blocks.
fn parse_pcapng(path: &Path, data: &[u8]) -> Result<Parsed, TraceError> {
    if data.len() < SHB_MIN_LEN {
        return Err(too_short(path, data, "pcapng section header", SHB_MIN_LEN));
    }
    let mut records: Vec<Record> = Vec::with_capacity(data.len() / 512);
    let mut ng = NgFormat::new();
    let mut off = 0usize;
    let mut error: Option<(u64, RecordProblem)> = None;
    while off < data.len() {
        match ng.block(&data[off..]) {
            Err(problem) => {
                error = Some((off as u64, problem));
                break;
            }
            Ok(NgBlock::Skip(len)) => off += len,
            Ok(NgBlock::Packet(r)) => {
                records.push(Record {
                    off: (off + r.data_off) as u64,
                    caplen: r.caplen,
                    wire_len: r.wire_len,
                    ts_ns: r.ts_ns,
                });
                off += r.len;
            }
        }
    }
    let (link, header, error) = ng.finish(path, records.len() as u64, error)?;
    Ok(Parsed {
        records,
        link,
        header,
        error,
    })
}

struct NgPacket {
    iface: usize,
    data_off: usize,
    caplen: u32,
    wire_len: u32,
    ts: u64,
}

/// Reads the block at `off`: its total length, and the packet if it is one.
fn pcapng_block(
    data: &[u8],
    off: usize,
    big_endian: &mut bool,
    in_section: &mut bool,
    ifaces: &mut Vec<Iface>,
    first_idb_link: &mut Option<u32>,
) -> Result<(usize, Option<NgPacket>), RecordProblem> {
    let rest = &data[off..];
    if rest.len() < 12 {
        return Err(RecordProblem::TruncatedHeader {
            have: rest.len() as u64,
            need: 12,
        });
    }
    let raw_type = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
    if raw_type == SHB_TYPE {
        // A new section: its byte order comes from its byte-order magic.
        let bom = u32::from_le_bytes([rest[8], rest[9], rest[10], rest[11]]);
        *big_endian = match bom {
            BOM => false,
            b if b == BOM.swap_bytes() => true,
            _ => return Err(RecordProblem::BadByteOrder { bom }),
        };
        ifaces.clear();
        *in_section = true;
    } else if !*in_section {
        return Err(RecordProblem::NoSection);
    }
    let be = *big_endian;
    let btype = if be { raw_type.swap_bytes() } else { raw_type };
    let len = read_u32(rest, 4, be);
    let min = match btype {
        SHB_TYPE => SHB_MIN_LEN as u32,
        IDB_TYPE => 20,
        EPB_TYPE | OPB_TYPE => 32,
        SPB_TYPE => 16,
        _ => 12,
    };
    if !len.is_multiple_of(4) || len < min {
        return Err(RecordProblem::BlockLength { len, min });
    }
    if len as usize > rest.len() {
        return Err(RecordProblem::BlockPastEnd {
            len,
            have: rest.len() as u64,
        });
    }
    let block = &rest[..len as usize];
    let trailer = read_u32(block, len as usize - 4, be);
    if trailer != len {
        return Err(RecordProblem::BlockTrailer { len, trailer });
    }
    let body = &block[8..len as usize - 4];
    let pkt = match btype {
        SHB_TYPE => {
            let shb = parse_sectionheaderblock(block)
                .map_err(|_| RecordProblem::Unparsable {
                    what: "section header block",
                })?
                .1;
            if shb.major_version != 1 {
                return Err(RecordProblem::Version {
                    major: shb.major_version,
                    minor: shb.minor_version,
                });
            }
            None
        }
        IDB_TYPE => {
            let parsed = if be {
                parse_interfacedescriptionblock_be(block)
            } else {
                parse_interfacedescriptionblock_le(block)
            };
            let idb = parsed
                .map_err(|_| RecordProblem::Unparsable {
                    what: "interface description block",
                })?
                .1;
            let id = ifaces.len() as u32;
            let linktype = idb.linktype.0 as u32;
            let mut res = TsRes::Pow10(6);
            let mut offset_ns = 0i128;
            for opt in &idb.options {
                let v = opt.value();
                match opt.code.0 {
                    9 if opt.len >= 1 && !v.is_empty() => {
                        res = TsRes::from_option(v[0])
                            .ok_or(RecordProblem::TsResol { id, value: v[0] })?;
                    }
                    14 if opt.len == 8 && v.len() >= 8 => {
                        let b = [v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]];
                        let secs = if be {
                            i64::from_be_bytes(b)
                        } else {
                            i64::from_le_bytes(b)
                        };
                        offset_ns = secs as i128 * 1_000_000_000;
                    }
                    _ => {}
                }
            }
            first_idb_link.get_or_insert(linktype);
            ifaces.push(Iface {
                linktype,
                link: link_from_pcap(linktype),
                snaplen: idb.snaplen,
                res,
                offset_ns,
            });
            None
        }
        EPB_TYPE | OPB_TYPE => {
            // EPB: if_id u32, ts_hi, ts_lo, caplen, origlen; OPB: if_id u16, drops u16, same.
            let (iface, caplen, wire_len) = if btype == EPB_TYPE {
                (
                    read_u32(body, 0, be),
                    read_u32(body, 12, be),
                    read_u32(body, 16, be),
                )
            } else {
                (
                    read_u16(body, 0, be) as u32,
                    read_u32(body, 12, be),
                    read_u32(body, 16, be),
                )
            };
            let ts = (read_u32(body, 4, be) as u64) << 32 | read_u32(body, 8, be) as u64;
            if caplen as u64 > (body.len() - 20) as u64 {
                return Err(RecordProblem::BlockCaplen { caplen, len });
            }
            if iface as usize >= ifaces.len() {
                return Err(RecordProblem::NoInterface { id: iface });
            }
            Some(NgPacket {
                iface: iface as usize,
                data_off: off + 28,
                caplen,
                wire_len,
                ts,
            })
        }
        SPB_TYPE => {
            // SPB: original length, then data padded to 32 bits; interface 0, no timestamp.
            let wire_len = read_u32(body, 0, be);
            let Some(iface) = ifaces.first() else {
                return Err(RecordProblem::NoInterface { id: 0 });
            };
            let room = (body.len() - 4) as u32;
            let mut caplen = wire_len.min(room);
            if iface.snaplen != 0 {
                caplen = caplen.min(iface.snaplen);
            }
            Some(NgPacket {
                iface: 0,
                data_off: off + 12,
                caplen,
                wire_len,
                ts: 0,
            })
        }
        // Name resolution, statistics, secrets, custom and unknown blocks carry no packets.
        _ => None,
    };
    Ok((len as usize, pkt))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(bytes: Vec<u8>) -> Result<Trace, TraceError> {
        Trace::from_bytes(Path::new("t"), bytes)
    }

    /// Builds pcapng files block by block in either byte order.
    struct Ng {
        be: bool,
        out: Vec<u8>,
    }

    impl Ng {
        fn new(be: bool) -> Ng {
            let mut ng = Ng {
                be,
                out: Vec::new(),
            };
            ng.shb();
            ng
        }
        fn u16(&self, v: u16) -> [u8; 2] {
            if self.be {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        }
        fn u32(&self, v: u32) -> [u8; 4] {
            if self.be {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        }
        fn block(&mut self, ty: u32, body: &[u8]) -> &mut Ng {
            let pad = (4 - body.len() % 4) % 4;
            let len = (12 + body.len() + pad) as u32;
            let (t, l) = (self.u32(ty), self.u32(len));
            self.out.extend_from_slice(&t);
            self.out.extend_from_slice(&l);
            self.out.extend_from_slice(body);
            self.out.extend(std::iter::repeat_n(0, pad));
            self.out.extend_from_slice(&l);
            self
        }
        fn shb(&mut self) -> &mut Ng {
            let mut b = self.u32(BOM).to_vec();
            b.extend(self.u16(1));
            b.extend(self.u16(0));
            b.extend([0xff; 8]); // section length unknown
            self.block(SHB_TYPE, &b)
        }
        fn idb(&mut self, linktype: u16, snaplen: u32, opts: &[(u16, &[u8])]) -> &mut Ng {
            let mut b = self.u16(linktype).to_vec();
            b.extend(self.u16(0));
            b.extend(self.u32(snaplen));
            if !opts.is_empty() {
                for (code, v) in opts {
                    b.extend(self.u16(*code));
                    b.extend(self.u16(v.len() as u16));
                    b.extend_from_slice(v);
                    b.extend(std::iter::repeat_n(0, (4 - v.len() % 4) % 4));
                }
                b.extend([0; 4]);
            }
            self.block(IDB_TYPE, &b)
        }
        fn epb(&mut self, ifid: u32, ts: u64, data: &[u8], wire: u32) -> &mut Ng {
            let mut b = self.u32(ifid).to_vec();
            b.extend(self.u32((ts >> 32) as u32));
            b.extend(self.u32(ts as u32));
            b.extend(self.u32(data.len() as u32));
            b.extend(self.u32(wire));
            b.extend_from_slice(data);
            self.block(EPB_TYPE, &b)
        }
        fn opb(&mut self, ifid: u16, ts: u64, data: &[u8]) -> &mut Ng {
            let mut b = self.u16(ifid).to_vec();
            b.extend(self.u16(0));
            b.extend(self.u32((ts >> 32) as u32));
            b.extend(self.u32(ts as u32));
            b.extend(self.u32(data.len() as u32));
            b.extend(self.u32(data.len() as u32));
            b.extend_from_slice(data);
            self.block(OPB_TYPE, &b)
        }
        fn spb(&mut self, wire: u32, data: &[u8]) -> &mut Ng {
            let mut b = self.u32(wire).to_vec();
            b.extend_from_slice(data);
            self.block(SPB_TYPE, &b)
        }
        fn bytes(&self) -> Vec<u8> {
            self.out.clone()
        }
    }

    #[test]
    fn pcap_both_byte_orders_and_resolutions() {
        // Big-endian µs pcap, raw IP, one 4-byte packet at 1.000002 s.
        let mut be = vec![0xa1, 0xb2, 0xc3, 0xd4, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0];
        be.extend([0, 0, 0xff, 0xff, 0, 0, 0, 101]);
        be.extend([
            0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 4, 0, 0, 0, 40, 0x45, 0, 0, 40,
        ]);
        let t = open(be).unwrap();
        assert_eq!(t.link(), LinkKind::RawIp);
        assert_eq!(t.header().linktype, 101);
        assert!(!t.header().nanos);
        assert_eq!(
            t.record(0),
            Record {
                off: 40,
                caplen: 4,
                wire_len: 40,
                ts_ns: 1_000_002_000
            }
        );
        assert_eq!(t.packet(0), &[0x45, 0, 0, 40]);

        // Little-endian ns pcap, Linux SLL2.
        let mut le = vec![0x4d, 0x3c, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        le.extend([0, 0, 4, 0, 0x14, 1, 0, 0]);
        le.extend([1, 0, 0, 0, 7, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0xee]);
        let t = open(le).unwrap();
        assert_eq!(t.link(), LinkKind::LinuxSll2);
        assert!(t.header().nanos);
        assert_eq!(t.record(0).ts_ns, 1_000_000_007);
        assert!(t.error().is_none());
    }

    #[test]
    fn pcapng_little_endian_resolutions_and_block_kinds() {
        let mut ng = Ng::new(false);
        ng.idb(1, 0, &[]) // default µs
            .idb(1, 4, &[(9, &[9])]) // ns, snaplen 4
            .block(0x4, &[0; 4]) // name resolution: skipped
            .block(0x1234_5678, &[1, 2, 3]) // unknown: skipped
            .epb(0, 5_000_001, &[1, 2, 3], 60)
            .epb(1, 1_234_567_891, &[4; 5], 5)
            .opb(0, 7, &[9, 9])
            .spb(8, &[1, 2, 3, 4, 5, 6, 7, 8]);
        let t = open(ng.bytes()).unwrap();
        assert!(t.error().is_none(), "{:?}", t.error());
        assert_eq!(t.len(), 4);
        assert_eq!(t.record(0).ts_ns, 5_000_001_000);
        assert_eq!(t.record(0).wire_len, 60);
        assert_eq!(t.packet(0), &[1, 2, 3]);
        assert_eq!(t.record(1).ts_ns, 1_234_567_891);
        assert_eq!(t.packet(1), &[4; 5]);
        assert_eq!(t.record(2).ts_ns, 7_000);
        assert_eq!(t.packet(2), &[9, 9]);
        // SPB: interface 0's snaplen is 0, so the whole packet; no timestamp.
        assert_eq!(t.packet(3), &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(t.record(3).ts_ns, 0);
        let h = t.header();
        assert!(h.nanos, "interface 1 has ns resolution");
        assert_eq!((h.linktype, h.snaplen, h.version_major), (1, 8, 2));
    }

    #[test]
    fn pcapng_big_endian_pow2_resolution_offset_and_sections() {
        let mut ng = Ng::new(true);
        let off = 1000i64.to_be_bytes();
        ng.idb(113, 0, &[(9, &[0x80 | 20]), (14, &off)]);
        ng.epb(0, (3 << 20) | (1 << 19), &[7; 16], 16);
        ng.spb(3, &[1, 2, 3]);
        // A second, little-endian section: interface ids start again.
        let mut le = Ng::new(false);
        le.idb(113, 65535, &[]).epb(0, 2, &[5], 1);
        ng.out.extend(le.bytes());
        let t = open(ng.bytes()).unwrap();
        assert!(t.error().is_none(), "{:?}", t.error());
        assert_eq!(t.link(), LinkKind::LinuxSll);
        assert_eq!(t.len(), 3);
        assert_eq!(t.record(0).ts_ns, 1_003_500_000_000);
        assert_eq!(t.packet(0), &[7; 16]);
        assert_eq!(t.packet(1), &[1, 2, 3]);
        assert_eq!(t.record(2).ts_ns, 2_000);
        assert_eq!(t.packet(2), &[5]);
        assert!(t.header().nanos, "2^-20 s is finer than 1 µs");
        assert_eq!(t.header().snaplen, 65535);
        assert_eq!(t.header().linktype, 113);
    }

    #[test]
    fn pcapng_link_types() {
        // An unused interface of an unsupported type does not matter.
        let mut ng = Ng::new(false);
        ng.idb(105, 0, &[]).idb(1, 0, &[]).epb(1, 0, &[1], 1);
        let t = open(ng.bytes()).unwrap();
        assert_eq!((t.len(), t.link()), (1, LinkKind::Ethernet));

        // The first packet on an unsupported interface: a file-level error.
        let mut ng = Ng::new(false);
        ng.idb(105, 0, &[]).epb(0, 0, &[1], 1);
        assert_eq!(
            open(ng.bytes()).err().unwrap().to_string(),
            "t: unsupported link type 105 (IEEE 802.11); supported: Ethernet, raw IPv4/IPv6, \
             Linux cooked (SLL, SLL2)"
        );

        // Two supported but different link types: the packets before the change are kept.
        let mut ng = Ng::new(false);
        ng.idb(1, 0, &[]).idb(101, 0, &[]);
        ng.epb(0, 0, &[1], 1).epb(1, 0, &[2], 1);
        let at = ng.out.len() - 36;
        let t = open(ng.bytes()).unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(
            t.error().unwrap().to_string(),
            format!(
                "t: record 2 at byte offset {at}: interface 1 has link type 101 (raw IP) but \
                 earlier packets are 1 (Ethernet); a trace has one link type"
            )
        );

        // Same kind under two numbers (raw IP 101 and 12) is one link.
        let mut ng = Ng::new(false);
        ng.idb(101, 0, &[]).idb(12, 0, &[]);
        ng.epb(0, 0, &[1], 1).epb(1, 0, &[2], 1);
        let t = open(ng.bytes()).unwrap();
        assert_eq!((t.len(), t.header().linktype), (2, 101));

        // No packets: the link of the first interface.
        let mut ng = Ng::new(false);
        ng.idb(276, 0, &[]);
        let t = open(ng.bytes()).unwrap();
        assert_eq!((t.len(), t.link()), (0, LinkKind::LinuxSll2));
    }

    #[test]
    fn pcapng_structural_errors() {
        let mut ng = Ng::new(false);
        ng.idb(1, 0, &[]).epb(3, 0, &[1], 1);
        assert_eq!(
            open(ng.bytes()).err().unwrap().to_string(),
            "t: pcapng block at byte offset 48: packet on interface 3, which no interface \
             description block defined"
        );

        let mut ng = Ng::new(false);
        ng.idb(1, 0, &[(9, &[20])]);
        assert_eq!(
            open(ng.bytes()).err().unwrap().to_string(),
            "t: pcapng block at byte offset 28: interface 0: unsupported if_tsresol 0x14"
        );

        // EPB caplen larger than its block.
        let mut ng = Ng::new(false);
        ng.idb(1, 0, &[]).epb(0, 0, &[1], 1).epb(0, 0, &[1; 4], 4);
        let at = ng.out.len() - 36;
        ng.out[at + 20] = 9; // caplen byte
        let t = open(ng.bytes()).unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(
            t.error().unwrap().to_string(),
            format!(
                "t: record 2 at byte offset {at}: caplen 9 does not fit in its block of length 36"
            )
        );

        // Bad byte-order magic.
        let mut b = Ng::new(false).bytes();
        b[8] = 0;
        assert_eq!(
            open(b).err().unwrap().to_string(),
            "t: pcapng block at byte offset 0: bad byte-order magic 1a2b3c00 in section header"
        );

        // Too short for a section header.
        assert_eq!(
            open(vec![0x0a, 0x0d, 0x0d, 0x0a, 0, 0])
                .err()
                .unwrap()
                .to_string(),
            "t: file is 6 bytes, too short for a pcapng section header (28 bytes)"
        );
    }

    /// libpcap reads a file header whose snaplen is 0xffffffff (negative as a C int) as
    /// snaplen 262144 (tcpdump: "snapshot length 262144"); a record is still bounded by
    /// the caplen rule of that snaplen.
    #[test]
    fn snaplen_0xffffffff_reads_as_libpcap_does() {
        let mut b = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        b.extend([0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0]);
        b.extend([1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 3, 0, 0, 0]);
        b.extend([0xab, 0xcd, 0xef]);
        let t = open(b.clone()).unwrap();
        assert!(t.error().is_none(), "{:?}", t.error());
        assert_eq!(t.len(), 1);
        assert_eq!(t.packet(0), &[0xab, 0xcd, 0xef]);
        assert_eq!(t.header().snaplen, 262_144);
        // A record of caplen 262145 after it is absurd, not a 4 GiB allowance.
        b.extend([
            1, 0, 0, 0, 0, 0, 0, 0, 0x01, 0x00, 0x04, 0x00, 0x01, 0x00, 0x04, 0x00,
        ]);
        b.extend([0; 64]);
        let t = open(b).unwrap();
        assert_eq!(t.len(), 1);
        assert!(
            t.error()
                .unwrap()
                .to_string()
                .contains("absurd caplen 262145"),
            "{}",
            t.error().unwrap()
        );
    }

    #[test]
    fn modified_pcap_records() {
        // Kuznetzov's format: 24-byte record headers.
        let mut b = vec![0x34, 0xcd, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        b.extend([0, 0, 1, 0, 1, 0, 0, 0]);
        b.extend([2, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0]);
        b.extend([0; 8]);
        b.extend([0xab, 0xcd]);
        let t = open(b).unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(t.packet(0), &[0xab, 0xcd]);
        assert_eq!(t.record(0).ts_ns, 2_000_003_000);
    }

    #[test]
    fn ts_resolution_conversion() {
        assert_eq!(TsRes::from_option(6), Some(TsRes::Pow10(6)));
        assert_eq!(TsRes::from_option(0x80 | 63), Some(TsRes::Pow2(63)));
        assert_eq!(TsRes::from_option(20), None);
        assert_eq!(TsRes::Pow10(12).to_ns(1_500), 1);
        assert_eq!(TsRes::Pow10(0).to_ns(2), 2_000_000_000);
        assert_eq!(TsRes::Pow2(1).to_ns(3), 1_500_000_000);
        assert_eq!(
            TsRes::Pow10(0).to_ns(u64::MAX),
            u64::MAX as u128 * 1_000_000_000
        );
        assert!(!TsRes::Pow2(19).finer_than_us());
        assert!(TsRes::Pow2(20).finer_than_us());
    }
}
