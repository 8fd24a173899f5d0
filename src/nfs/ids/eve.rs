//! EVE JSON output, in Suricata's field names: one `alert` record per alert and one
//! `flow` record per finished flow, one JSON object per line. Records go through a
//! buffered writer (no system call per alert) and are formatted without allocating.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use super::header::Ip;
use super::rule::Rule;

/// Where and between whom a record's packet or flow went.
#[derive(Clone, Copy, Debug)]
pub struct EveTuple<'a> {
    pub ts_ns: u64,
    pub flow_id: u64,
    pub src: Ip,
    pub sport: u16,
    pub dst: Ip,
    pub dport: u16,
    pub proto: u8,
    /// The packet went from the flow's client to its server.
    pub to_server: bool,
    /// The application protocol in Suricata's spelling (`http`, `tls`, …); "" = none.
    pub app_proto: &'a str,
}

/// A flow record's counters (oriented from the client).
#[derive(Clone, Copy, Debug, Default)]
pub struct EveFlow {
    pub pkts: [u64; 2],
    pub bytes: [u64; 2],
    pub start_ns: u64,
    pub end_ns: u64,
    /// Suricata's `flow.state`: `new`, `established` or `closed`.
    pub state: &'static str,
    /// Suricata's `flow.reason`: `timeout` or `shutdown`.
    pub reason: &'static str,
    pub alerted: bool,
}

pub struct Eve {
    w: BufWriter<File>,
    path: PathBuf,
    error: Option<io::Error>,
    pub records: u64,
    /// The last record's head (`timestamp` to `app_proto`) and what it was made from:
    /// most alerts follow another of the same packet (85 % on the merged trace), whose
    /// head is the same bytes, so it is formatted once.
    head_key: Option<HeadKey>,
    head_app: String,
    head_buf: Vec<u8>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
struct HeadKey {
    ts_ns: u64,
    flow_id: u64,
    src: Ip,
    sport: u16,
    dst: Ip,
    dport: u16,
    proto: u8,
    kind: &'static str,
}

impl Eve {
    /// Opens (truncates) `path`; the error is the caller's one-line message.
    pub fn create(path: &Path) -> io::Result<Eve> {
        Ok(Eve {
            w: BufWriter::with_capacity(1 << 16, File::create(path)?),
            path: path.to_path_buf(),
            error: None,
            records: 0,
            head_key: None,
            head_app: String::new(),
            head_buf: Vec::with_capacity(256),
        })
    }

    pub fn alert(&mut self, t: &EveTuple, r: &Rule, blocked: bool) {
        let res = (|| {
            self.head(t, "alert")?;
            let w = &mut self.w;
            w.write_all(if t.to_server {
                b",\"direction\":\"to_server\""
            } else {
                b",\"direction\":\"to_client\""
            })?;
            w.write_all(if blocked {
                b",\"alert\":{\"action\":\"blocked\",\"gid\":"
            } else {
                b",\"alert\":{\"action\":\"allowed\",\"gid\":"
            })?;
            num(w, u64::from(r.gid))?;
            w.write_all(b",\"signature_id\":")?;
            num(w, u64::from(r.sid))?;
            w.write_all(b",\"rev\":")?;
            num(w, u64::from(r.rev))?;
            w.write_all(b",\"signature\":")?;
            serde_json::to_writer(&mut self.w, r.msg.as_str()).map_err(io::Error::other)?;
            self.w.write_all(b"}}\n")
        })();
        self.done(res);
    }

    pub fn flow(&mut self, t: &EveTuple, f: &EveFlow) {
        let res = (|| {
            self.head(t, "flow")?;
            self.w.write_all(b",\"flow\":{")?;
            write!(
                self.w,
                "\"pkts_toserver\":{},\"pkts_toclient\":{},\"bytes_toserver\":{},\"bytes_toclient\":{},\"start\":",
                f.pkts[0], f.pkts[1], f.bytes[0], f.bytes[1]
            )?;
            timestamp(&mut self.w, f.start_ns)?;
            self.w.write_all(b",\"end\":")?;
            timestamp(&mut self.w, f.end_ns)?;
            writeln!(
                self.w,
                ",\"age\":{},\"state\":\"{}\",\"reason\":\"{}\",\"alerted\":{}}}}}",
                f.end_ns.saturating_sub(f.start_ns) / 1_000_000_000,
                f.state,
                f.reason,
                f.alerted
            )
        })();
        self.done(res);
    }

    fn head(&mut self, t: &EveTuple, kind: &'static str) -> io::Result<()> {
        let key = HeadKey {
            ts_ns: t.ts_ns,
            flow_id: t.flow_id,
            src: t.src,
            sport: t.sport,
            dst: t.dst,
            dport: t.dport,
            proto: t.proto,
            kind,
        };
        if self.head_key != Some(key) || self.head_app != t.app_proto {
            self.head_buf.clear();
            write_head(&mut self.head_buf, t, kind)?;
            self.head_key = Some(key);
            self.head_app.clear();
            self.head_app.push_str(t.app_proto);
        }
        self.w.write_all(&self.head_buf)
    }
    fn done(&mut self, res: io::Result<()>) {
        match res {
            Ok(()) => self.records += 1,
            Err(e) => {
                if self.error.is_none() {
                    self.error = Some(e);
                }
            }
        }
    }

    /// Flushes; the first write error, if any, as a one-line message.
    pub fn finish(&mut self) -> Result<(), String> {
        let flushed = self.w.flush();
        match self.error.take().map_or(flushed, Err) {
            Ok(()) => Ok(()),
            Err(e) => Err(format!("eve: cannot write {}: {e}", self.path.display())),
        }
    }
}

/// A record's head, `{"timestamp":…` to its `app_proto`. Written piece by piece, not
/// with `write!`: the formatting machinery cost ~7 k instructions an alert (10 % of a
/// run on 1kxun.pcap, 5.7 k alerts).
fn write_head(w: &mut impl Write, t: &EveTuple, kind: &str) -> io::Result<()> {
    w.write_all(b"{\"timestamp\":")?;
    timestamp(w, t.ts_ns)?;
    w.write_all(b",\"flow_id\":")?;
    num(w, t.flow_id)?;
    w.write_all(b",\"event_type\":\"")?;
    w.write_all(kind.as_bytes())?;
    w.write_all(b"\",\"src_ip\":\"")?;
    ip(w, t.src)?;
    w.write_all(b"\",\"src_port\":")?;
    num(w, u64::from(t.sport))?;
    w.write_all(b",\"dest_ip\":\"")?;
    ip(w, t.dst)?;
    w.write_all(b"\",\"dest_port\":")?;
    num(w, u64::from(t.dport))?;
    w.write_all(b",\"proto\":\"")?;
    proto(w, t.proto)?;
    w.write_all(b"\"")?;
    if !t.app_proto.is_empty() {
        w.write_all(b",\"app_proto\":\"")?;
        w.write_all(t.app_proto.as_bytes())?;
        w.write_all(b"\"")?;
    }
    Ok(())
}

/// Suricata's names for IP protocols (its `proto` field); others as the number.
fn proto(w: &mut impl Write, p: u8) -> io::Result<()> {
    match p {
        1 => w.write_all(b"ICMP"),
        6 => w.write_all(b"TCP"),
        17 => w.write_all(b"UDP"),
        58 => w.write_all(b"IPv6-ICMP"),
        132 => w.write_all(b"SCTP"),
        47 => w.write_all(b"GRE"),
        n => num(w, u64::from(n)),
    }
}

/// The decimal digits of `n`.
fn num(w: &mut impl Write, mut n: u64) -> io::Result<()> {
    let mut b = [0u8; 20];
    let mut i = b.len();
    loop {
        i -= 1;
        b[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    w.write_all(&b[i..])
}

/// `n` in exactly `out.len()` digits, zero-padded (`n` must fit).
fn fixed(out: &mut [u8], mut n: u64) {
    for d in out.iter_mut().rev() {
        *d = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

fn ip(w: &mut impl Write, a: Ip) -> io::Result<()> {
    match a {
        Ip::V4(v) => {
            for (i, o) in Ipv4Addr::from(v).octets().iter().enumerate() {
                if i > 0 {
                    w.write_all(b".")?;
                }
                num(w, u64::from(*o))?;
            }
            Ok(())
        }
        // Suricata writes every group, four digits each.
        Ip::V6(v) => {
            for (i, g) in Ipv6Addr::from(v).segments().iter().enumerate() {
                if i > 0 {
                    w.write_all(b":")?;
                }
                write!(w, "{g:04x}")?;
            }
            Ok(())
        }
    }
}

/// `"2010-09-10T08:29:37.123456+0000"`: Suricata's format, in UTC.
pub fn timestamp(w: &mut impl Write, ts_ns: u64) -> io::Result<()> {
    let secs = ts_ns / 1_000_000_000;
    let micros = ts_ns % 1_000_000_000 / 1000;
    let (y, m, d) = civil(secs / 86_400);
    let s = secs % 86_400;
    let mut b = *b"\"0000-00-00T00:00:00.000000+0000\"";
    fixed(&mut b[1..5], y);
    fixed(&mut b[6..8], m);
    fixed(&mut b[9..11], d);
    fixed(&mut b[12..14], s / 3600);
    fixed(&mut b[15..17], s / 60 % 60);
    fixed(&mut b[18..20], s % 60);
    fixed(&mut b[21..27], micros);
    w.write_all(&b)
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian (H. Hinnant's method).
fn civil(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proto_names_as_suricata_writes_them() {
        // Suricata 7's eve.json `proto` values (e.g. 1kxun.pcap: "TCP", "UDP";
        // ICMPv6 is "IPv6-ICMP").
        let n = |p| {
            let mut v = Vec::new();
            proto(&mut v, p).unwrap();
            String::from_utf8(v).unwrap()
        };
        assert_eq!(
            [n(1), n(6), n(17), n(58), n(132), n(47), n(103)],
            ["ICMP", "TCP", "UDP", "IPv6-ICMP", "SCTP", "GRE", "103"]
        );
    }

    #[test]
    fn numbers_and_addresses_as_display_writes_them() {
        for n in [0, 7, 10, 65_535, 1_234_567_890_123, u64::MAX] {
            let mut v = Vec::new();
            num(&mut v, n).unwrap();
            assert_eq!(v, n.to_string().as_bytes());
        }
        for a in [
            [0, 0, 0, 0],
            [10, 0, 2, 15],
            [255, 255, 255, 255],
            [192, 168, 100, 9],
        ] {
            let mut v = Vec::new();
            ip(&mut v, Ip::V4(u32::from(Ipv4Addr::from(a)))).unwrap();
            assert_eq!(v, Ipv4Addr::from(a).to_string().as_bytes());
        }
    }

    #[test]
    fn timestamps_in_suricatas_format() {
        let mut v = Vec::new();
        // 2010-09-10 08:29:37.123456 UTC (date -u -d @1284107377)
        timestamp(&mut v, 1_284_107_377_123_456_789).unwrap();
        assert_eq!(v, b"\"2010-09-10T08:29:37.123456+0000\"");
        v.clear();
        timestamp(&mut v, 951_782_400 * 1_000_000_000).unwrap(); // 2000-02-29
        assert_eq!(v, b"\"2000-02-29T00:00:00.000000+0000\"");
    }
}
