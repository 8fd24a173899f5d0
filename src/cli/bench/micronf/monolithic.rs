//! The microNF slides' first table, "monolithic VNFs vs micro-NFs": the chain edge
//! firewall → flow monitor → application firewall
//!
//! - as three **monolithic VNFs**: each receives every packet into its own buffer (the
//!   copy a vNIC makes), decodes and checks its headers itself, classifies, and transmits
//!   it to the next (a copy into a tx area);
//! - as **catena's chain**: one receive, one decode shared by the three NFs (the decoded
//!   offsets travel in the packet's metadata), one transmit.
//!
//! Cycles (TSC) per input packet for each element — receive, header check (catena's
//! decode, `Layers::parse`), classification (the three NFs' `process`), transmit — and
//! overall. Both sides run the same NF code on the same packets in the same order; the
//! packets transmitted at the end (count and a digest of their positions and bytes) are
//! checked equal, else the bench fails.

use std::net::{IpAddr, Ipv4Addr};

use catena::flow::tsc;
use catena::io::Trace;
use catena::nfs::dpi::{AppProto, DpiFlow, Progress, L4};
use catena::nfs::{registry, Context, Nf, Profile};
use catena::packet::{Batch, Fields, LinkKind, Pool, Verdict, MAX_BATCH};

/// The elements, in the order of [`Cost::per`].
pub const ELEMENTS: [&str; 4] = ["receive", "header check", "classification", "transmit"];

/// What one mode cost.
pub struct Cost {
    /// TSC ticks per input packet, per element.
    pub per: [f64; 4],
    pub packets: u64,
    /// Packets transmitted at the end of the chain.
    pub out: u64,
    /// FNV-1a over each transmitted packet's input position and bytes.
    pub digest: u64,
}

impl Cost {
    pub fn overall(&self) -> f64 {
        self.per.iter().sum()
    }
}

/// The application firewall: an HTTP classifier. Each TCP packet with payload is
/// classified by the DPI engine on that payload; HTTP requests to `blocked` are dropped.
struct AppFirewall {
    p: Profile,
    blocked: &'static str,
}

impl AppFirewall {
    fn new() -> AppFirewall {
        AppFirewall {
            p: Profile {
                reads: Fields::NONE,
                writes: Fields::NONE,
                may_drop: true,
                changes_length: false,
                per_flow_state: false,
                outputs: &["out"],
                drop_reasons: &["blocked-host"],
            },
            blocked: "blocked.example",
        }
    }
}

impl Nf for AppFirewall {
    fn profile(&self) -> &Profile {
        &self.p
    }
    fn process(&mut self, b: &mut Batch, _: &Context) {
        const ANY: IpAddr = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
        for p in b.iter_mut() {
            let l = p.layers();
            if l.l4_proto != 6 || !l.has_l4() {
                continue;
            }
            let d = p.data();
            let o = l.l4_off as usize;
            let Some(&off) = d.get(o + 12) else {
                continue;
            };
            let payload = d.get(o + (off >> 4) as usize * 4..).unwrap_or(&[]);
            if payload.is_empty() {
                continue;
            }
            let port = |i: usize| u16::from_be_bytes([d[o + i], d[o + i + 1]]);
            let mut f = DpiFlow::new(L4::Tcp, (ANY, port(0)), (ANY, port(2)));
            if f.feed(true, payload) == Progress::Detected(AppProto::Http)
                && f.host() == Some(self.blocked)
            {
                p.meta_mut().verdict = Verdict::Drop(0);
            }
        }
    }
}

/// The three NFs, fresh.
fn nfs() -> anyhow::Result<Vec<Box<dyn Nf>>> {
    let build = |name: &str, kind: &str, params: &str| -> anyhow::Result<Box<dyn Nf>> {
        let t: toml::Table = params.parse()?;
        registry::build(name, kind, &t).map_err(|e| anyhow::anyhow!("{e}"))
    };
    Ok(vec![
        build(
            "edge_fw",
            "ip_filter",
            "default = \"allow\"\nrules = [\"deny udp dst port 53\", \"deny tcp dst port 23\", \"deny src net 10.0.0.0/8 and icmp\"]",
        )?,
        build("mon", "flow_monitor", "capacity = 200000")?,
        Box::new(AppFirewall::new()),
    ])
}

/// Frames handed from one element to the next: bytes in one area, reused (no
/// allocation once it has grown to a batch).
#[derive(Default)]
struct Tx {
    bytes: Vec<u8>,
    /// Per frame: offset, length, capture time, wire length, input position.
    frames: Vec<(usize, usize, u64, u32, u64)>,
}

impl Tx {
    fn clear(&mut self) {
        self.bytes.clear();
        self.frames.clear();
    }

    /// Transmits the packets of `b` that passed (copied out), freeing every buffer.
    fn send(&mut self, b: &mut Batch, pool: &mut Pool) {
        for p in b.drain() {
            if let Verdict::Out(_) = p.meta().verdict {
                let m = p.meta();
                self.frames
                    .push((self.bytes.len(), p.len(), m.ts_ns, m.wire_len, m.seq));
                self.bytes.extend_from_slice(p.data());
            }
            pool.free(p);
        }
    }
}

/// Receives frames into pool buffers (a copy each), as a NIC or vNIC does: the
/// metadata starts over, so the headers are not decoded yet.
#[inline]
fn receive<'a>(
    frames: impl Iterator<Item = (&'a [u8], u64, u32, u64)>,
    link: LinkKind,
    pool: &mut Pool,
    b: &mut Batch,
) {
    for (bytes, ts, wire, seq) in frames {
        let Some(mut p) = pool.alloc_raw_for(bytes.len()) else {
            break;
        };
        p.set_bytes(bytes);
        let m = p.meta_mut();
        m.ts_ns = ts;
        m.now_ns = ts;
        m.wire_len = wire;
        m.link = link;
        m.seq = seq;
        b.push(p);
    }
}

/// The header check: the decode (offsets and kinds of every layer), kept in the
/// packet's metadata for whoever reads it next.
#[inline]
fn check_headers(b: &mut Batch) {
    for p in b.iter_mut() {
        std::hint::black_box(p.layers());
    }
}

/// Runs one NF on `b`; what it dropped leaves the batch.
#[inline]
fn classify(nf: &mut dyn Nf, b: &mut Batch, pool: &mut Pool, cx: &Context) {
    nf.process(b, cx);
    b.retain_or(
        |p| matches!(p.meta().verdict, Verdict::Out(_)),
        |p| pool.free(p),
    );
}

fn fnv(h: &mut u64, bytes: &[u8]) {
    for &x in bytes {
        *h = (*h ^ u64::from(x)).wrapping_mul(0x0100_0000_01b3);
    }
}

/// `trace` replayed `loops` times through the chain, as monolithic VNFs or as catena's
/// chain.
pub fn measure(trace: &Trace, loops: u64, monolithic: bool) -> anyhow::Result<Cost> {
    let mut nfs = nfs()?;
    let (bytes, recs) = trace.raw();
    let link = trace.link();
    let mut pool = Pool::new(2 * MAX_BATCH, trace.max_packet_len().max(64));
    let cx = Context { ports: 2 };
    let mut b = Batch::with_capacity(MAX_BATCH);
    let (mut tx, mut rx) = (Tx::default(), Tx::default());
    let mut ticks = [0u64; 4];
    let mut digest = 0xcbf2_9ce4_8422_2325u64;
    let (mut packets, mut out) = (0u64, 0u64);
    let mut clock = |k: usize, t: &mut u64| {
        let now = tsc();
        ticks[k] += now.wrapping_sub(*t);
        *t = now;
    };
    for lp in 0..loops {
        let shift = trace.span_ns().wrapping_mul(lp);
        let base = recs.len() as u64 * lp;
        for (c, chunk) in recs.chunks(MAX_BATCH).enumerate() {
            let first = base + (c * MAX_BATCH) as u64;
            let from_trace = chunk.iter().enumerate().map(|(i, r)| {
                let at = r.off as usize;
                (
                    &bytes[at..at + r.caplen as usize],
                    r.ts_ns.wrapping_add(shift),
                    r.wire_len,
                    first + i as u64,
                )
            });
            packets += chunk.len() as u64;
            let mut t = tsc();
            if monolithic {
                // Each VNF: its own receive, header check, classification, transmit.
                for (k, nf) in nfs.iter_mut().enumerate() {
                    if k == 0 {
                        receive(from_trace.clone(), link, &mut pool, &mut b);
                    } else {
                        std::mem::swap(&mut tx, &mut rx);
                        tx.clear();
                        let frames = rx
                            .frames
                            .iter()
                            .map(|&(o, n, ts, w, s)| (&rx.bytes[o..o + n], ts, w, s));
                        receive(frames, link, &mut pool, &mut b);
                    }
                    clock(0, &mut t);
                    check_headers(&mut b);
                    clock(1, &mut t);
                    classify(&mut **nf, &mut b, &mut pool, &cx);
                    clock(2, &mut t);
                    if k == 0 {
                        tx.clear();
                    }
                    tx.send(&mut b, &mut pool);
                    clock(3, &mut t);
                }
            } else {
                receive(from_trace, link, &mut pool, &mut b);
                clock(0, &mut t);
                check_headers(&mut b);
                clock(1, &mut t);
                for nf in nfs.iter_mut() {
                    classify(&mut **nf, &mut b, &mut pool, &cx);
                }
                clock(2, &mut t);
                tx.clear();
                tx.send(&mut b, &mut pool);
                clock(3, &mut t);
            }
            for &(o, n, _, _, s) in &tx.frames {
                fnv(&mut digest, &s.to_le_bytes());
                fnv(&mut digest, &tx.bytes[o..o + n]);
            }
            out += tx.frames.len() as u64;
        }
    }
    let per = ticks.map(|t| t as f64 / packets.max(1) as f64);
    Ok(Cost {
        per,
        packets,
        out,
        digest,
    })
}
