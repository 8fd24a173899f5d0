//! Writing pcap files that tcpdump and tshark read. (stub until the io branch lands)

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use super::PcapHeader;

pub struct PcapWriter<W: Write> {
    w: W,
    nanos: bool,
}

impl PcapWriter<BufWriter<File>> {
    pub fn create(path: &Path, header: PcapHeader) -> io::Result<Self> {
        PcapWriter::new(BufWriter::with_capacity(1 << 20, File::create(path)?), header)
    }
}

impl<W: Write> PcapWriter<W> {
    pub fn new(mut w: W, h: PcapHeader) -> io::Result<Self> {
        let magic: u32 = if h.nanos { 0xa1b2_3c4d } else { 0xa1b2_c3d4 };
        w.write_all(&magic.to_le_bytes())?;
        w.write_all(&h.version_major.to_le_bytes())?;
        w.write_all(&h.version_minor.to_le_bytes())?;
        w.write_all(&h.thiszone.to_le_bytes())?;
        w.write_all(&h.sigfigs.to_le_bytes())?;
        w.write_all(&h.snaplen.to_le_bytes())?;
        w.write_all(&h.linktype.to_le_bytes())?;
        Ok(PcapWriter { w, nanos: h.nanos })
    }

    pub fn write_packet(&mut self, ts_ns: u64, wire_len: u32, data: &[u8]) -> io::Result<()> {
        let sec = (ts_ns / 1_000_000_000) as u32;
        let frac = if self.nanos { ts_ns % 1_000_000_000 } else { ts_ns % 1_000_000_000 / 1000 } as u32;
        self.w.write_all(&sec.to_le_bytes())?;
        self.w.write_all(&frac.to_le_bytes())?;
        self.w.write_all(&(data.len() as u32).to_le_bytes())?;
        self.w.write_all(&wire_len.to_le_bytes())?;
        self.w.write_all(data)
    }

    pub fn finish(mut self) -> io::Result<W> {
        self.w.flush()?;
        Ok(self.w)
    }
}
