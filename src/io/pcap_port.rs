//! A pcap file as a port: it receives by replaying a trace (at full speed or paced to a
//! rate, as `tcpreplay` does) and sends by writing frames to a pcap file. Mixed with live
//! ports it makes a replayer (pcap in, live out) or a recorder (live in, pcap out).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::port::{Port, PortCounters, Recv};
use super::{PcapHeader, PcapWriter, Trace};
use crate::packet::{Batch, Pool};

/// A replay's pace.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Rate {
    /// As fast as the chain takes packets.
    Top,
    PacketsPerSec(f64),
    /// Megabits per second of captured bytes.
    Mbps(f64),
}

impl std::str::FromStr for Rate {
    type Err = String;
    /// `10000pps`, `100Mbps`, `1.5Gbps`, `top`.
    fn from_str(s: &str) -> Result<Rate, String> {
        let t = s.trim();
        let bad = || format!("`{s}`: write a rate as `N pps`, `N Mbps`, `N Gbps` or `top`");
        if t.eq_ignore_ascii_case("top") {
            return Ok(Rate::Top);
        }
        let lower = t.to_ascii_lowercase();
        let (num, unit) = lower
            .find(|c: char| c.is_ascii_alphabetic())
            .map(|i| lower.split_at(i))
            .ok_or_else(bad)?;
        let n: f64 = num.trim().parse().map_err(|_| bad())?;
        if !(n.is_finite() && n > 0.0) {
            return Err(bad());
        }
        match unit.trim() {
            "pps" => Ok(Rate::PacketsPerSec(n)),
            "kpps" => Ok(Rate::PacketsPerSec(n * 1e3)),
            "mpps" => Ok(Rate::PacketsPerSec(n * 1e6)),
            "kbps" => Ok(Rate::Mbps(n / 1e3)),
            "mbps" => Ok(Rate::Mbps(n)),
            "gbps" => Ok(Rate::Mbps(n * 1e3)),
            _ => Err(bad()),
        }
    }
}

type Writer = PcapWriter<File>;

pub struct PcapPort {
    path: PathBuf,
    trace: Option<Trace>,
    pos: usize,
    rate: Rate,
    start: Option<Instant>,
    writer: Option<Writer>,
    out_path: Option<PathBuf>,
    write_error: Option<String>,
    c: PortCounters,
}

impl PcapPort {
    /// Replays `read` (if given) at `rate`; writes what is sent to `write` (if given),
    /// with `read`'s file header or else `header`.
    pub fn open(
        read: Option<&Path>,
        write: Option<&Path>,
        rate: Rate,
        header: PcapHeader,
    ) -> anyhow::Result<PcapPort> {
        let trace = read.map(Trace::open).transpose()?;
        let header = trace.as_ref().map_or(header, |t| t.header());
        let writer = write
            .map(|p| {
                PcapWriter::create(p, header)
                    .map_err(|e| anyhow::anyhow!("{}: cannot create output: {e}", p.display()))
            })
            .transpose()?;
        Ok(PcapPort {
            path: read.or(write).map(Path::to_path_buf).unwrap_or_default(),
            trace,
            pos: 0,
            rate,
            start: None,
            writer,
            out_path: write.map(Path::to_path_buf),
            write_error: None,
            c: PortCounters::default(),
        })
    }

    /// Packets the pace allows by now (all, at top speed).
    fn allowed(&self, now: Instant) -> usize {
        let Some(t) = &self.trace else { return 0 };
        let left = t.len() - self.pos;
        let secs = self
            .start
            .map_or(0.0, |s| now.duration_since(s).as_secs_f64());
        match self.rate {
            Rate::Top => left,
            Rate::PacketsPerSec(pps) => {
                let due = (pps * secs) as usize + 1;
                due.saturating_sub(self.pos).min(left)
            }
            Rate::Mbps(m) => {
                let budget = m * 1e6 / 8.0 * secs;
                let mut n = 0;
                let mut bytes = self.c.rx_bytes as f64;
                while n < left && bytes <= budget {
                    bytes += f64::from(t.record(self.pos + n).caplen);
                    n += 1;
                }
                n
            }
        }
    }
}

impl Port for PcapPort {
    fn describe(&self) -> String {
        format!("pcap:{}", self.path.display())
    }

    fn recv(&mut self, pool: &mut Pool, out: &mut Batch, max: usize) -> Recv {
        let Some(t) = &self.trace else {
            return Recv::Ended;
        };
        if self.pos >= t.len() {
            return Recv::Ended;
        }
        let now = Instant::now();
        self.start.get_or_insert(now);
        let n = self.allowed(now).min(max);
        let Some(t) = &self.trace else {
            return Recv::Ended;
        };
        let room = pool.max_packet();
        let mut got = 0;
        for _ in 0..n {
            let r = t.record(self.pos);
            if r.caplen as usize <= room {
                let bytes = t.packet(self.pos);
                let Some(mut p) = pool.alloc_raw_for(bytes.len().min(room)) else {
                    break;
                };
                p.set_bytes(bytes);
                let m = p.meta_mut();
                m.ts_ns = r.ts_ns;
                m.wire_len = r.wire_len;
                m.link = t.link();
                out.push(p);
                got += 1;
            } else {
                self.c.rx_oversize += 1;
            }
            self.c.rx += 1;
            self.c.rx_bytes += u64::from(r.caplen);
            self.pos += 1;
        }
        Recv::Got(got)
    }

    fn send(&mut self, frame: &[u8], ts_ns: u64, wire_len: u32) {
        // Without a `write` file the port discards what leaves by it, as a null port.
        let Some(w) = self.writer.as_mut() else {
            self.c.tx += 1;
            self.c.tx_bytes += frame.len() as u64;
            return;
        };
        match w.write_packet(ts_ns, wire_len.max(frame.len() as u32), frame) {
            Ok(()) => {
                self.c.tx += 1;
                self.c.tx_bytes += frame.len() as u64;
            }
            Err(e) => {
                self.c.tx_errors += 1;
                self.write_error.get_or_insert(e.to_string());
            }
        }
    }

    fn flush(&mut self) {}

    fn next_in_ns(&self) -> Option<u64> {
        let t = self.trace.as_ref()?;
        if self.pos >= t.len() {
            return None;
        }
        let secs_ahead = match self.rate {
            Rate::Top => 0.0,
            Rate::PacketsPerSec(pps) => self.pos as f64 / pps,
            Rate::Mbps(m) => self.c.rx_bytes as f64 * 8.0 / (m * 1e6),
        };
        let elapsed = self.start.map_or(0.0, |s| s.elapsed().as_secs_f64());
        Some(((secs_ahead - elapsed).max(0.0) * 1e9) as u64)
    }

    fn counters(&self) -> PortCounters {
        self.c
    }

    fn finish(&mut self) -> std::io::Result<()> {
        let name = self
            .out_path
            .as_ref()
            .map_or(String::new(), |p| p.display().to_string());
        if let Some(w) = self.writer.take() {
            w.finish()
                .map_err(|e| std::io::Error::other(format!("{name}: writing failed: {e}")))?;
        }
        if let Some(e) = &self.write_error {
            return Err(std::io::Error::other(format!(
                "{name}: writing failed: {e}"
            )));
        }
        Ok(())
    }

    fn input_error(&self) -> Option<String> {
        self.trace
            .as_ref()
            .and_then(|t| t.error().map(|e| e.to_string()))
    }

    fn header(&self) -> Option<PcapHeader> {
        self.trace.as_ref().map(|t| t.header())
    }

    fn max_frame(&self) -> usize {
        self.trace.as_ref().map_or(0, |t| t.max_packet_len())
    }

    fn receives(&self) -> bool {
        self.trace.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse() {
        assert_eq!("1000pps".parse::<Rate>(), Ok(Rate::PacketsPerSec(1000.0)));
        assert_eq!("2.5 kpps".parse::<Rate>(), Ok(Rate::PacketsPerSec(2500.0)));
        assert_eq!("100Mbps".parse::<Rate>(), Ok(Rate::Mbps(100.0)));
        assert_eq!("1Gbps".parse::<Rate>(), Ok(Rate::Mbps(1000.0)));
        assert_eq!("top".parse::<Rate>(), Ok(Rate::Top));
        for bad in ["", "fast", "-5pps", "10 furlongs", "0pps", "pps"] {
            assert!(bad.parse::<Rate>().is_err(), "{bad}");
        }
    }

    #[test]
    fn paced_replay_takes_its_time() {
        let f = [0u8; 60];
        let h = PcapHeader::new(1, false);
        let t = Trace::from_packets(
            crate::packet::LinkKind::Ethernet,
            h,
            (0..20).map(|i| (i, &f[..])),
        );
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.pcap");
        t.write_pcap(&p).unwrap();
        // 20 packets at 200 pps: about 95 ms; at top speed all at once.
        let mut port = PcapPort::open(Some(&p), None, Rate::PacketsPerSec(200.0), h).unwrap();
        let mut pool = Pool::new(64, 60);
        let mut b = Batch::with_capacity(64);
        let start = Instant::now();
        let mut n = 0;
        while let Recv::Got(k) = port.recv(&mut pool, &mut b, 32) {
            n += k;
            for p in b.drain() {
                pool.free(p);
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(n, 20);
        let ms = start.elapsed().as_millis();
        assert!(ms >= 90, "paced replay took {ms} ms");
        let mut port = PcapPort::open(Some(&p), None, Rate::Top, h).unwrap();
        assert_eq!(port.recv(&mut pool, &mut b, 32), Recv::Got(20));
        assert_eq!(port.recv(&mut pool, &mut b, 32), Recv::Ended);
    }
}
