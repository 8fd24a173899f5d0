//! Generated HTTP/1.1 traffic for the Microboxes experiments: many TCP connections, each a
//! handshake, one GET, a response of a chosen body size cut at the MSS (the client ACKs
//! every second segment), and a FIN teardown; `concurrency` connections are open at once
//! and their packets interleave. Ethernet/IPv4 with valid checksums; deterministic.
//! Frames are as the sending host captures them: short ones (54-byte ACKs) are not padded
//! to the Ethernet minimum.

use super::{PcapHeader, Trace};
use crate::packet::{checksum, LinkKind};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpGenOptions {
    /// Connections in the trace.
    pub connections: usize,
    /// Response body bytes (the headers come on top).
    pub response_bytes: usize,
    /// Most payload bytes per segment.
    pub mss: usize,
    /// Connections open at once (their packets interleave).
    pub concurrency: usize,
    /// Servers (192.0.2.1…); connection i goes to server i % servers, Host `hostN.example`.
    pub servers: usize,
    pub seed: u64,
}

impl Default for HttpGenOptions {
    fn default() -> Self {
        HttpGenOptions {
            connections: 1000,
            response_bytes: 8192,
            mss: 1460,
            concurrency: 64,
            servers: 4,
            seed: 1,
        }
    }
}

/// One side of a connection as the generator writes it.
#[derive(Clone, Copy)]
struct End {
    ip: [u8; 4],
    port: u16,
    mac: [u8; 6],
    seq: u32,
}

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const PSH: u8 = 0x08;
const FIN: u8 = 0x01;

/// Ethernet + IPv4 + TCP frame from `a` to `b` (seq/ack taken from the ends).
fn frame(out: &mut Vec<u8>, a: &End, b: &End, flags: u8, payload: &[u8], ident: u16) {
    out.extend_from_slice(&b.mac);
    out.extend_from_slice(&a.mac);
    out.extend_from_slice(&[0x08, 0x00]);
    let ip_len = (20 + 20 + payload.len()) as u16;
    let ip = out.len();
    out.extend_from_slice(&[0x45, 0]);
    out.extend_from_slice(&ip_len.to_be_bytes());
    out.extend_from_slice(&ident.to_be_bytes());
    out.extend_from_slice(&[0x40, 0, 64, 6, 0, 0]);
    out.extend_from_slice(&a.ip);
    out.extend_from_slice(&b.ip);
    let c = checksum::checksum(&out[ip..ip + 20]);
    out[ip + 10..ip + 12].copy_from_slice(&c.to_be_bytes());
    let t = out.len();
    out.extend_from_slice(&a.port.to_be_bytes());
    out.extend_from_slice(&b.port.to_be_bytes());
    out.extend_from_slice(&a.seq.to_be_bytes());
    let ack = if flags & ACK != 0 { b.seq } else { 0 };
    out.extend_from_slice(&ack.to_be_bytes());
    out.extend_from_slice(&[0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
    out.extend_from_slice(payload);
    let ps = checksum::pseudo_v4(a.ip, b.ip, 6, (20 + payload.len()) as u16);
    let c = !checksum::add(ps, checksum::sum(&out[t..]));
    out[t + 16..t + 18].copy_from_slice(&c.to_be_bytes());
}

/// A connection's packets, in order.
fn connection(i: usize, o: &HttpGenOptions, rng: &mut u64) -> Vec<Vec<u8>> {
    let mut next = || {
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        *rng
    };
    let srv = i % o.servers.max(1);
    let mut c = End {
        ip: [10, (i >> 16) as u8, (i >> 8) as u8, i as u8],
        port: 1024 + (i % 60_000) as u16,
        mac: [2, 0, 0, 0, 0, 1],
        seq: next() as u32,
    };
    let mut s = End {
        ip: [192, 0, 2, 1 + srv as u8],
        port: 80,
        mac: [2, 0, 0, 0, 0, 2],
        seq: next() as u32,
    };
    let mut pk = Vec::new();
    let mut id = next() as u16;
    let mut emit = |pk: &mut Vec<Vec<u8>>, a: &End, b: &End, f: u8, p: &[u8]| {
        let mut v = Vec::with_capacity(64 + p.len());
        frame(&mut v, a, b, f, p, id);
        id = id.wrapping_add(1);
        pk.push(v);
    };
    emit(&mut pk, &c, &s, SYN, &[]);
    c.seq = c.seq.wrapping_add(1);
    emit(&mut pk, &s, &c, SYN | ACK, &[]);
    s.seq = s.seq.wrapping_add(1);
    emit(&mut pk, &c, &s, ACK, &[]);
    let req = format!(
        "GET /obj/{i}?size={} HTTP/1.1\r\nHost: host{srv}.example\r\nUser-Agent: catena-gen\r\nAccept: */*\r\n\r\n",
        o.response_bytes
    );
    emit(&mut pk, &c, &s, PSH | ACK, req.as_bytes());
    c.seq = c.seq.wrapping_add(req.len() as u32);
    let mut resp = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\n\r\n",
        o.response_bytes
    )
    .into_bytes();
    resp.extend((0..o.response_bytes).map(|k| b'a' + (k % 26) as u8));
    let segs: Vec<&[u8]> = resp.chunks(o.mss.max(1)).collect();
    for (k, seg) in segs.iter().enumerate() {
        let last = k + 1 == segs.len();
        emit(&mut pk, &s, &c, if last { PSH | ACK } else { ACK }, seg);
        s.seq = s.seq.wrapping_add(seg.len() as u32);
        if k % 2 == 1 || last {
            emit(&mut pk, &c, &s, ACK, &[]);
        }
    }
    emit(&mut pk, &s, &c, FIN | ACK, &[]);
    s.seq = s.seq.wrapping_add(1);
    emit(&mut pk, &c, &s, FIN | ACK, &[]);
    c.seq = c.seq.wrapping_add(1);
    emit(&mut pk, &s, &c, ACK, &[]);
    pk
}

/// The trace: connections started in order, `concurrency` at a time, the next packet
/// taken from a randomly chosen open connection, 1 µs apart.
pub fn generate_http(o: &HttpGenOptions) -> Result<Trace, String> {
    if o.connections == 0 || o.connections > 1 << 24 {
        return Err(format!(
            "connections = {} must be in 1..=16777216",
            o.connections
        ));
    }
    if !(1..=8960).contains(&o.mss) {
        return Err(format!("mss = {} must be in 1..=8960", o.mss));
    }
    if o.response_bytes > 1 << 30 || o.concurrency == 0 || o.servers == 0 || o.servers > 250 {
        return Err("response_bytes ≤ 1 GiB, concurrency ≥ 1 and servers 1..=250".into());
    }
    let mut rng = o.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut open: Vec<(std::vec::IntoIter<Vec<u8>>, usize)> = Vec::new();
    let mut started = 0;
    let mut frames: Vec<Vec<u8>> = Vec::new();
    while started < o.connections || !open.is_empty() {
        while open.len() < o.concurrency && started < o.connections {
            open.push((connection(started, o, &mut rng).into_iter(), started));
            started += 1;
        }
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let k = (rng % open.len() as u64) as usize;
        match open[k].0.next() {
            Some(f) => frames.push(f),
            None => {
                open.swap_remove(k);
            }
        }
    }
    Ok(Trace::from_packets(
        LinkKind::Ethernet,
        PcapHeader::new(1, true),
        frames
            .iter()
            .enumerate()
            .map(|(i, f)| (1_600_000_000_000_000_000 + i as u64 * 1000, &f[..])),
    ))
}
