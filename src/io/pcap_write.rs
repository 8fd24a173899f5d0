//! Writing pcap files that tcpdump and tshark read.
//!
//! Always little-endian classic pcap; the header's fields are written as given so that a
//! trace read from a little-endian pcap and written back is byte-identical.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use super::trace::{PcapHeader, Trace};

/// Output buffer of [`PcapWriter::create`]: large, so small packets cost few syscalls.
pub const WRITE_BUFFER: usize = 1 << 20;

/// Writes a little-endian pcap (µs or ns magic per `header.nanos`).
pub struct PcapWriter<W: Write> {
    w: W,
    nanos: bool,
    packets: u64,
    clamped: u64,
}

/// The 24-byte little-endian file header for `h`.
pub fn header_bytes(h: &PcapHeader) -> [u8; 24] {
    let magic: u32 = if h.nanos { 0xa1b2_3c4d } else { 0xa1b2_c3d4 };
    let mut b = [0u8; 24];
    b[0..4].copy_from_slice(&magic.to_le_bytes());
    b[4..6].copy_from_slice(&h.version_major.to_le_bytes());
    b[6..8].copy_from_slice(&h.version_minor.to_le_bytes());
    b[8..12].copy_from_slice(&h.thiszone.to_le_bytes());
    b[12..16].copy_from_slice(&h.sigfigs.to_le_bytes());
    b[16..20].copy_from_slice(&h.snaplen.to_le_bytes());
    b[20..24].copy_from_slice(&h.linktype.to_le_bytes());
    b
}

impl PcapWriter<BufWriter<File>> {
    /// Creates (truncates) `path` and writes the file header.
    pub fn create(path: &Path, header: PcapHeader) -> io::Result<PcapWriter<BufWriter<File>>> {
        let file = File::create(path)?;
        PcapWriter::new(BufWriter::with_capacity(WRITE_BUFFER, file), header)
    }
}

impl<W: Write> PcapWriter<W> {
    /// Writes the file header to `w`. `w` should be buffered: each packet is two writes.
    pub fn new(mut w: W, header: PcapHeader) -> io::Result<PcapWriter<W>> {
        w.write_all(&header_bytes(&header))?;
        Ok(PcapWriter {
            w,
            nanos: header.nanos,
            packets: 0,
            clamped: 0,
        })
    }

    /// Appends one record. The captured length is `data.len()`; `wire_len` is written as
    /// given (it may be larger for truncated captures). A timestamp past what the format
    /// holds (second 2^32-1, early 2106: the readers accept pcaps with a fraction over
    /// one second, pcapng with a coarse `if_tsresol` or a large `if_tsoffset`) is written
    /// as the last instant the format holds and counted in [`clamped`](Self::clamped),
    /// so every packet the reader accepted is written. Packets over 4 GiB are refused.
    pub fn write_packet(&mut self, ts_ns: u64, wire_len: u32, data: &[u8]) -> io::Result<()> {
        let caplen = u32::try_from(data.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "packet over 4 GiB"))?;
        let (secs, sub_ns) = match u32::try_from(ts_ns / 1_000_000_000) {
            Ok(s) => (s, (ts_ns % 1_000_000_000) as u32),
            Err(_) => {
                self.clamped += 1;
                (u32::MAX, 999_999_999)
            }
        };
        // µs files truncate, so a µs file read (µs * 1000) and written back is identical.
        let frac = if self.nanos { sub_ns } else { sub_ns / 1000 };
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&secs.to_le_bytes());
        h[4..8].copy_from_slice(&frac.to_le_bytes());
        h[8..12].copy_from_slice(&caplen.to_le_bytes());
        h[12..16].copy_from_slice(&wire_len.to_le_bytes());
        self.w.write_all(&h)?;
        self.w.write_all(data)?;
        self.packets += 1;
        Ok(())
    }

    /// Appends every record of `trace`, timestamps and wire lengths as read.
    pub fn write_trace(&mut self, trace: &Trace) -> io::Result<()> {
        let (bytes, records) = trace.raw();
        for r in records {
            let data = &bytes[r.off as usize..r.off as usize + r.caplen as usize];
            self.write_packet(r.ts_ns, r.wire_len, data)?;
        }
        Ok(())
    }

    /// Records written so far.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Records whose timestamp was past the format's last instant and was written as it.
    pub fn clamped(&self) -> u64 {
        self.clamped
    }

    /// Flushes and returns the inner writer. Call it: dropping a `BufWriter` hides errors.
    pub fn finish(mut self) -> io::Result<W> {
        self.w.flush()?;
        Ok(self.w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::LinkKind;

    #[test]
    fn header_layout() {
        let h = PcapHeader::new(1, false);
        assert_eq!(
            header_bytes(&h),
            [0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 1, 0, 0, 0]
        );
        assert_eq!(
            &header_bytes(&PcapHeader::new(101, true))[..4],
            &[0x4d, 0x3c, 0xb2, 0xa1]
        );
    }

    #[test]
    fn record_layout_and_read_back() {
        let mut w = PcapWriter::new(Vec::new(), PcapHeader::new(1, false)).unwrap();
        w.write_packet(1_500_000_123_456_789, 60, &[0xaa; 14])
            .unwrap();
        assert_eq!(w.packets(), 1);
        let out = w.finish().unwrap();
        assert_eq!(out.len(), 24 + 16 + 14);
        assert_eq!(&out[24..28], &1_500_000u32.to_le_bytes());
        assert_eq!(&out[28..32], &123_456u32.to_le_bytes()); // µs, truncated
        assert_eq!(&out[32..36], &14u32.to_le_bytes());
        assert_eq!(&out[36..40], &60u32.to_le_bytes());
        let t = Trace::from_bytes(Path::new("mem"), out).unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(t.link(), LinkKind::Ethernet);
        assert_eq!(t.record(0).ts_ns, 1_500_000_123_456_000);
        assert_eq!(t.record(0).wire_len, 60);
        assert_eq!(t.packet(0), &[0xaa; 14]);
    }

    #[test]
    fn clamps_timestamps_past_2106_and_counts_them() {
        for nanos in [false, true] {
            let mut w = PcapWriter::new(Vec::new(), PcapHeader::new(1, nanos)).unwrap();
            w.write_packet(u64::MAX, 1, &[0]).unwrap();
            w.write_packet(u64::from(u32::MAX) * 1_000_000_000 + 5, 1, &[0])
                .unwrap();
            assert_eq!((w.packets(), w.clamped()), (2, 1));
            let out = w.finish().unwrap();
            let frac: u32 = if nanos { 999_999_999 } else { 999_999 };
            assert_eq!(&out[24..28], &u32::MAX.to_le_bytes());
            assert_eq!(&out[28..32], &frac.to_le_bytes());
            // The second record starts after 16 bytes of header and 1 of data.
            assert_eq!(&out[41..45], &u32::MAX.to_le_bytes());
            assert_eq!(&out[45..49], &(if nanos { 5u32 } else { 0 }).to_le_bytes());
        }
    }
}
