//! Writing pcap files that tcpdump and tshark read.
//!
//! Always little-endian classic pcap; the header's fields are written as given so that a
//! trace read from a little-endian pcap and written back is byte-identical.

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

use super::trace::{PcapHeader, Trace};

/// Output buffer of [`PcapWriter`]: large, so small packets cost few syscalls.
pub const WRITE_BUFFER: usize = 1 << 20;

/// Bytes of a pcap record header.
const RECORD_HEADER: usize = 16;

/// Writes a little-endian pcap (µs or ns magic per `header.nanos`).
///
/// It keeps its own buffer rather than sit on a `BufWriter`: a record is the 16-byte
/// header stored straight into the buffer plus one memcpy of the packet, with one
/// capacity check per record and one `write(2)` per [`WRITE_BUFFER`] bytes (issue 20
/// point 3: output at the cost of a memcpy).
pub struct PcapWriter<W: Write> {
    /// `None` only once [`finish`](Self::finish) has taken it.
    w: Option<W>,
    buf: Vec<u8>,
    nanos: bool,
    /// The last record's whole second, as ns and as written: consecutive packets mostly
    /// share it, which spares a division per record.
    sec_ns: u64,
    sec: u32,
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

impl PcapWriter<File> {
    /// Creates (truncates) `path` and writes the file header.
    pub fn create(path: &Path, header: PcapHeader) -> io::Result<PcapWriter<File>> {
        PcapWriter::new(File::create(path)?, header)
    }
}

impl<W: Write> PcapWriter<W> {
    /// Writes the file header into the buffer; `w` gets the bytes a buffer at a time.
    pub fn new(w: W, header: PcapHeader) -> io::Result<PcapWriter<W>> {
        let mut buf = Vec::with_capacity(WRITE_BUFFER);
        buf.extend_from_slice(&header_bytes(&header));
        Ok(PcapWriter {
            w: Some(w),
            buf,
            nanos: header.nanos,
            sec_ns: 0,
            sec: 0,
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
    #[inline(always)]
    pub fn write_packet(&mut self, ts_ns: u64, wire_len: u32, data: &[u8]) -> io::Result<()> {
        let Ok(caplen) = u32::try_from(data.len()) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "packet over 4 GiB",
            ));
        };
        let (secs, sub_ns) = match ts_ns.wrapping_sub(self.sec_ns) {
            d if d < 1_000_000_000 => (self.sec, d as u32),
            _ => self.split(ts_ns),
        };
        // µs files truncate, so a µs file read (µs * 1000) and written back is identical.
        let frac = if self.nanos { sub_ns } else { sub_ns / 1000 };
        let h = u128::from(secs)
            | u128::from(frac) << 32
            | u128::from(caplen) << 64
            | u128::from(wire_len) << 96;
        if self.buf.capacity() - self.buf.len() < RECORD_HEADER + data.len() {
            self.flush_buf()?;
        }
        self.buf.extend_from_slice(&h.to_le_bytes());
        if data.len() > self.buf.capacity() - self.buf.len() {
            // Larger than the whole buffer (a packet over 1 MiB): written through.
            self.flush_buf()?;
            self.inner().write_all(data)?;
        } else {
            self.buf.extend_from_slice(data);
        }
        self.packets += 1;
        Ok(())
    }

    /// `ts_ns` as (second, ns within it), remembered for the next record; past the
    /// format's last second, clamped (counted, not remembered, so each is counted).
    #[cold]
    #[inline(never)]
    fn split(&mut self, ts_ns: u64) -> (u32, u32) {
        match u32::try_from(ts_ns / 1_000_000_000) {
            Ok(s) => {
                self.sec = s;
                self.sec_ns = u64::from(s) * 1_000_000_000;
                (s, (ts_ns - self.sec_ns) as u32)
            }
            Err(_) => {
                self.clamped += 1;
                (u32::MAX, 999_999_999)
            }
        }
    }

    /// Hands the buffered bytes to `w` (once per [`WRITE_BUFFER`] bytes: off the fast path).
    #[cold]
    #[inline(never)]
    fn flush_buf(&mut self) -> io::Result<()> {
        let Some(w) = self.w.as_mut() else {
            return Ok(());
        };
        let r = w.write_all(&self.buf);
        self.buf.clear();
        r
    }

    fn inner(&mut self) -> &mut W {
        self.w.as_mut().expect("PcapWriter used after finish")
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

    /// Writes out the buffer, flushes and returns the inner writer. Call it: dropping the
    /// writer loses what is still buffered.
    pub fn finish(mut self) -> io::Result<W> {
        self.flush_buf()?;
        self.inner().flush()?;
        Ok(self.w.take().expect("PcapWriter finished twice"))
    }
}

/// Dropped without [`finish`](PcapWriter::finish) (an early return on another error):
/// what is buffered is still written, as a `BufWriter` would, errors ignored.
impl<W: Write> Drop for PcapWriter<W> {
    fn drop(&mut self) {
        let _ = self.flush_buf();
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

    /// Records across many buffer refills, one larger than the whole buffer, and a drop
    /// without `finish`: the bytes are the header then each record header and packet, in
    /// order, nothing lost.
    #[test]
    fn records_across_refills_and_through_writes_are_exact() {
        let sizes: Vec<usize> = (0..5000)
            .map(|i| (i * 7919) % 1600)
            .chain([WRITE_BUFFER + 3, 60, WRITE_BUFFER - 16, 1])
            .collect();
        let mut want = header_bytes(&PcapHeader::new(1, true)).to_vec();
        let mut out = Vec::new();
        {
            let mut w = PcapWriter::new(&mut out, PcapHeader::new(1, true)).unwrap();
            for (i, &n) in sizes.iter().enumerate() {
                let data: Vec<u8> = (0..n).map(|k| (k + i) as u8).collect();
                let ts = 1_000_000_000 * i as u64 + 7;
                w.write_packet(ts, n as u32 + 4, &data).unwrap();
                want.extend_from_slice(&(i as u32).to_le_bytes());
                want.extend_from_slice(&7u32.to_le_bytes());
                want.extend_from_slice(&(n as u32).to_le_bytes());
                want.extend_from_slice(&(n as u32 + 4).to_le_bytes());
                want.extend_from_slice(&data);
            }
            assert_eq!(w.packets(), sizes.len() as u64);
            // Dropped here, not finished: the buffered tail is written all the same.
        }
        assert_eq!(out.len(), want.len());
        assert!(out == want, "bytes differ");
    }
}
