//! Deterministic synthetic traces: the engine behind `catena gen`.
//!
//! The papers' traces (smallFlows, bigFlows, 4SICS) cannot be shipped, so we make traces
//! shaped like them: same packet count, mean frame size, TCP share and share of web
//! packets, with valid Ethernet/IPv4/IPv6/TCP/UDP/ICMP headers and checksums, flows that
//! open (SYN, SYN-ACK, ACK), carry data both ways and close (FIN), many flows interleaved,
//! elephants and mice.
//!
//! How a trace is made:
//! 1. Each flow gets a packet budget from a Pareto law (heavy tail: few elephants, many
//!    mice); budgets sum to `count` exactly.
//! 2. Flows are given a protocol class (web TCP, other TCP, UDP, ICMP) largest first, each
//!    to a class that still lacks packets, so the packet shares land on target.
//! 3. Each flow gets a start and a duration on a virtual timeline; its packets are spread
//!    over it and all packets of all flows are sorted by virtual time (interleaving).
//! 4. Packets are written in that order straight into one buffer; the k-th packet of a
//!    flow plays the k-th role of the flow's script (handshake, data, close).
//!
//! Frame sizes come from the [`SizeModel`]. Packets that can carry data take the drawn size
//! exactly (pure ACKs are the small sizes); SYN, SYN-ACK and the last ACK keep their natural
//! size (60–74 B) except under `Fixed`, where they are padded or trimmed to the fixed size.
//! Under `Average` a feedback loop steers later draws so the trace mean stays on target
//! whatever the natural-size packets add. IPv6 frames are never shorter than their headers
//! (74 B for TCP, 62 B for UDP/ICMPv6), which can lift the mean of IPv6-heavy traces.
//!
//! Under `Average`, handshake packets keep natural sizes, so a jumbo mean is reachable only
//! with few flows per packet (a trace of SYNs cannot average 9000 B).
//!
//! Everything comes from one xoshiro256** generator seeded by splitmix64, written here so
//! the bytes never change with a dependency's version: same options, same bytes.
//!
//! What the profiles give (seed 1, `tests/gen.rs` `full_profiles_report`), against the
//! targets: smallflows 14,261 pkts, mean 645.1 B (646), TCP 96.0 %, web 83.0 %, 1,209
//! flows; bigflows 791,615 pkts, 449.0 B (449), TCP 80.0 %, web 52.0 %, 40,686 flows;
//! 4sics 2,274,747 pkts, 76.0 B (76), TCP 95.0 %, 400 flows, >80 % of packets on
//! Modbus/S7/DNP3/EtherNet-IP ports. Release build: 4sics in ~0.4–0.6 s, bigflows ~0.4–0.7 s.

use std::collections::HashSet;
use std::str::FromStr;

use super::{PcapHeader, Record, Trace};
use crate::packet::{checksum, LinkKind};

/// Smallest frame we write: the Ethernet minimum without FCS.
pub const MIN_FRAME: usize = 60;
/// Largest frame we write: a jumbo frame.
pub const MAX_FRAME: usize = 9000;
/// Most hosts: every one gets its own 10.x.y.z address (250 per /24, no .0 or .255).
pub const MAX_HOSTS: usize = 1 << 20;

/// Shapes of the papers' traces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    /// tcpreplay's smallFlows.pcap: 14,261 packets, mean 646 B, mostly web.
    SmallFlows,
    /// tcpreplay's bigFlows.pcap: 791,615 packets, mean 449 B, an enterprise uplink.
    BigFlows,
    /// 4SICS GeekLounge ICS capture: 2,274,747 packets, mean 76 B, Modbus/S7/DNP3.
    FourSics,
}

impl Profile {
    pub fn name(self) -> &'static str {
        match self {
            Profile::SmallFlows => "smallflows",
            Profile::BigFlows => "bigflows",
            Profile::FourSics => "4sics",
        }
    }
}

impl FromStr for Profile {
    type Err = String;
    fn from_str(s: &str) -> Result<Profile, String> {
        match s.to_ascii_lowercase().as_str() {
            "smallflows" => Ok(Profile::SmallFlows),
            "bigflows" => Ok(Profile::BigFlows),
            "4sics" => Ok(Profile::FourSics),
            _ => Err(format!(
                "unknown profile `{s}` (expected smallflows, bigflows or 4sics)"
            )),
        }
    }
}

impl std::fmt::Display for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Frame sizes (bytes as captured, no FCS).
#[derive(Clone, Debug, PartialEq)]
pub enum SizeModel {
    /// Every frame this size.
    Fixed(usize),
    /// Sizes drawn with these weights.
    Mix(Vec<(usize, f64)>),
    /// A bimodal mix (ACK-sized 60/66 B, some mid sizes, near-MTU data; jumbo frames for
    /// means above ~1450 B) whose mean is this.
    Average(usize),
}

/// Server ports of non-web flows, weighted. Port 0 in `udp` means a random high port.
#[derive(Clone, Debug, PartialEq)]
pub struct PortMix {
    pub tcp: Vec<(u16, f64)>,
    pub udp: Vec<(u16, f64)>,
}

impl PortMix {
    /// Office/Internet services.
    pub fn enterprise() -> PortMix {
        PortMix {
            tcp: vec![
                (22, 2.0),
                (25, 1.0),
                (993, 1.0),
                (445, 1.0),
                (3389, 1.0),
                (8080, 2.0),
                (5222, 1.0),
                (1935, 1.0),
            ],
            udp: vec![
                (53, 6.0),
                (123, 1.0),
                (137, 1.0),
                (1900, 1.0),
                (5353, 1.0),
                (0, 2.0),
            ],
        }
    }

    /// An industrial control network: Modbus/TCP, S7comm, DNP3; BACnet, SNMP, DNS.
    pub fn ics() -> PortMix {
        PortMix {
            tcp: vec![(502, 6.0), (102, 3.0), (20000, 1.5), (44818, 0.5)],
            udp: vec![(47808, 3.0), (161, 2.0), (53, 2.0), (123, 1.0), (2222, 1.0)],
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct GenOptions {
    /// Packets in the trace (exact).
    pub count: usize,
    pub sizes: SizeModel,
    /// Flows (capped at `count`: a flow has at least one packet).
    pub flows: usize,
    /// Hosts (at least 2); about one in eight is a server.
    pub hosts: usize,
    /// Share of packets that are TCP.
    pub tcp_share: f64,
    /// Share of packets that are UDP; the rest is ICMP echo.
    pub udp_share: f64,
    /// Share of packets on ports 80/443 (TCP first, UDP 443 as QUIC beyond `tcp_share`).
    pub web_share: f64,
    /// Share of packets over IPv6 (whole flows).
    pub ipv6_share: f64,
    pub seed: u64,
    /// Mean packet rate: timestamps are spaced by exponential gaps of mean 1/rate.
    pub rate_pps: f64,
    /// Server ports of non-web flows (not in the brief's list: profiles set it, struct
    /// update syntax `..GenOptions::profile(p)` keeps it).
    pub ports: PortMix,
}

impl Default for GenOptions {
    fn default() -> GenOptions {
        GenOptions::profile(Profile::SmallFlows)
    }
}

impl GenOptions {
    /// Defaults shaped like the paper's trace. Flow counts follow tcpreplay's descriptions
    /// (smallFlows 1,209 flows, bigFlows 40,686); host counts, the ICMP rest, the 4SICS web
    /// share and the rates (chosen so smallFlows/bigFlows span about 5 minutes) are our
    /// picks, not measurements.
    pub fn profile(p: Profile) -> GenOptions {
        match p {
            Profile::SmallFlows => GenOptions {
                count: 14_261,
                sizes: SizeModel::Average(646),
                flows: 1_209,
                hosts: 150,
                tcp_share: 0.96,
                udp_share: 0.035,
                web_share: 0.83,
                ipv6_share: 0.0,
                seed: 1,
                rate_pps: 48.0,
                ports: PortMix::enterprise(),
            },
            Profile::BigFlows => GenOptions {
                count: 791_615,
                sizes: SizeModel::Average(449),
                flows: 40_686,
                hosts: 3_000,
                tcp_share: 0.80,
                udp_share: 0.19,
                web_share: 0.52,
                ipv6_share: 0.0,
                seed: 1,
                rate_pps: 2_640.0,
                ports: PortMix::enterprise(),
            },
            Profile::FourSics => GenOptions {
                count: 2_274_747,
                sizes: SizeModel::Average(76),
                flows: 400,
                hosts: 60,
                tcp_share: 0.95,
                udp_share: 0.045,
                web_share: 0.01,
                ipv6_share: 0.0,
                seed: 1,
                rate_pps: 500.0,
                ports: PortMix::ics(),
            },
        }
    }

    /// Checks the options; the message names the bad field.
    pub fn validate(&self) -> Result<(), String> {
        if self.count == 0 {
            return Err("count must be at least 1".into());
        }
        if self.flows == 0 {
            return Err("flows must be at least 1".into());
        }
        if self.hosts < 2 {
            return Err(format!(
                "hosts must be at least 2 (a client and a server), got {}",
                self.hosts
            ));
        }
        if self.hosts > MAX_HOSTS {
            return Err(format!(
                "hosts must be at most {MAX_HOSTS}, got {}",
                self.hosts
            ));
        }
        let size_ok = |s: usize, what: &str| {
            if (MIN_FRAME..=MAX_FRAME).contains(&s) {
                Ok(())
            } else {
                Err(format!(
                    "{what} {s} B is outside {MIN_FRAME}..={MAX_FRAME} B (frame bytes without FCS)"
                ))
            }
        };
        match &self.sizes {
            SizeModel::Fixed(s) => size_ok(*s, "fixed size")?,
            SizeModel::Average(s) => size_ok(*s, "average size")?,
            SizeModel::Mix(m) => {
                if m.is_empty() {
                    return Err("size mix is empty".into());
                }
                for &(s, w) in m {
                    size_ok(s, "size in mix")?;
                    if !w.is_finite() || w < 0.0 {
                        return Err(format!("size mix weight {w} for {s} B must be >= 0"));
                    }
                }
                if m.iter().map(|x| x.1).sum::<f64>() <= 0.0 {
                    return Err("size mix weights sum to 0".into());
                }
            }
        }
        for (name, v) in [
            ("tcp_share", self.tcp_share),
            ("udp_share", self.udp_share),
            ("web_share", self.web_share),
            ("ipv6_share", self.ipv6_share),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(format!("{name} must be within 0..=1, got {v}"));
            }
        }
        if self.tcp_share + self.udp_share > 1.0 + 1e-9 {
            return Err(format!(
                "tcp_share + udp_share must not exceed 1, got {} + {}",
                self.tcp_share, self.udp_share
            ));
        }
        if self.web_share > self.tcp_share + self.udp_share + 1e-9 {
            return Err(format!(
                "web_share {} exceeds tcp_share + udp_share {} (web packets are TCP or UDP)",
                self.web_share,
                self.tcp_share + self.udp_share
            ));
        }
        if !(self.rate_pps.is_finite() && self.rate_pps > 0.0) {
            return Err(format!("rate_pps must be > 0, got {}", self.rate_pps));
        }
        for (name, mix) in [("tcp", &self.ports.tcp), ("udp", &self.ports.udp)] {
            for &(p, w) in mix {
                if !w.is_finite() || w < 0.0 {
                    return Err(format!("{name} port weight {w} for port {p} must be >= 0"));
                }
                if p == 80 || p == 443 {
                    return Err(format!(
                        "{name} port mix must not hold port {p}: web traffic is set by web_share"
                    ));
                }
                if name == "tcp" && p == 0 {
                    return Err("tcp port mix must not hold port 0".into());
                }
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// PRNG

/// splitmix64: seeds xoshiro and makes per-packet payload streams.
#[inline]
fn splitmix64(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// xoshiro256** (Blackman & Vigna).
#[derive(Clone)]
pub(crate) struct Rng([u64; 4]);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        let mut x = seed;
        Rng([
            splitmix64(&mut x),
            splitmix64(&mut x),
            splitmix64(&mut x),
            splitmix64(&mut x),
        ])
    }

    #[inline]
    pub(crate) fn next_u64(&mut self) -> u64 {
        let s = &mut self.0;
        let r = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        r
    }

    /// Uniform in [0, 1).
    #[inline]
    fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in (0, 1]: safe for ln and negative powers.
    #[inline]
    fn f64_open(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in 0..n (n > 0), by multiply-shift (bias < 2^-32 for our n).
    #[inline]
    fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    #[inline]
    fn chance(&mut self, p: f64) -> bool {
        self.f64() < p
    }
}

/// Picks an index by weight (weights not all zero).
fn pick_weighted(rng: &mut Rng, w: &[f64]) -> usize {
    let total: f64 = w.iter().sum();
    let mut x = rng.f64() * total;
    for (i, &wi) in w.iter().enumerate() {
        if x < wi {
            return i;
        }
        x -= wi;
    }
    // Rounding left x just above the last weight: take the last non-zero one.
    w.iter().rposition(|&v| v > 0.0).unwrap_or(0)
}

// ---------------------------------------------------------------------------------------
// Sizes

const H: f64 = 50.0; // feedback horizon in packets: error decays by 1/H per packet
const MU_S: f64 = 63.0; // 60 and 66 B, half each
const MU_MID: f64 = 333.0; // uniform 67..=599
const MU_L1: f64 = 0.7 * 1514.0 + 0.3 * (1300.0 + 1513.0) / 2.0; // 1514 or 1300..=1513
const MU_L2: f64 = 9000.0;

/// Component probabilities for a mean `m`: (share of 66 within small, p_small, p_mid,
/// p_l1, p_l2). The mid share shrinks for small means so ICS-like traces stay bimodal.
fn mix_for(m: f64) -> (f64, [f64; 4]) {
    let m = m.clamp(MIN_FRAME as f64, MAX_FRAME as f64);
    if m <= MU_S {
        // Only ACK-sized frames: 60/66 in the ratio giving m.
        return ((m - 60.0) / 6.0, [1.0, 0.0, 0.0, 0.0]);
    }
    let p_mid = (0.4 * (m - MU_S) / (MU_MID - MU_S)).min(0.12);
    let p_l1 = (m - MU_S * (1.0 - p_mid) - MU_MID * p_mid) / (MU_L1 - MU_S);
    let p_s = 1.0 - p_mid - p_l1;
    if p_s >= 0.02 {
        return (0.5, [p_s, p_mid, p_l1, 0.0]);
    }
    // Above ~1450 B: ACKs, MTU frames and jumbo frames.
    let a = (MU_L1 - m) / (MU_L1 - MU_S);
    if a >= 0.02 {
        return (0.5, [a, 0.0, 1.0 - a, 0.0]);
    }
    let a = 0.02 * (MAX_FRAME as f64 - m) / (MAX_FRAME as f64 - MU_L1);
    let c = ((m - a * MU_S - (1.0 - a) * MU_L1) / (MU_L2 - MU_L1)).clamp(0.0, 1.0 - a);
    (0.5, [a, 0.0, 1.0 - a - c, c])
}

enum Sizer {
    Fixed(usize),
    Mix { sizes: Vec<usize>, cdf: Vec<f64> },
    Average { mean: f64 },
}

impl Sizer {
    fn new(m: &SizeModel) -> Sizer {
        match m {
            SizeModel::Fixed(s) => Sizer::Fixed(*s),
            SizeModel::Average(s) => Sizer::Average { mean: *s as f64 },
            SizeModel::Mix(v) => {
                let total: f64 = v.iter().map(|x| x.1).sum();
                let mut acc = 0.0;
                let mut sizes = Vec::new();
                let mut cdf = Vec::new();
                for &(s, w) in v {
                    if w > 0.0 {
                        acc += w / total;
                        sizes.push(s);
                        cdf.push(acc);
                    }
                }
                Sizer::Mix { sizes, cdf }
            }
        }
    }

    /// A size for a packet that may carry data; `sum`/`done` are the bytes and packets
    /// written so far (for the feedback of `Average`).
    #[inline]
    fn draw(&self, rng: &mut Rng, sum: u64, done: u64) -> usize {
        match self {
            Sizer::Fixed(s) => *s,
            Sizer::Mix { sizes, cdf } => {
                let u = rng.f64();
                let i = cdf.partition_point(|&c| c <= u).min(sizes.len() - 1);
                sizes[i]
            }
            Sizer::Average { mean } => {
                let err = sum as f64 - done as f64 * mean;
                let (q66, p) = mix_for(mean - err / H);
                let u = rng.f64();
                if u < p[0] {
                    if rng.chance(q66) {
                        66
                    } else {
                        60
                    }
                } else if u < p[0] + p[1] {
                    67 + rng.below(533) as usize
                } else if u < p[0] + p[1] + p[2] {
                    if rng.chance(0.7) {
                        1514
                    } else {
                        1300 + rng.below(214) as usize
                    }
                } else {
                    MAX_FRAME
                }
            }
        }
    }

    /// The size of a packet that carries no data (SYN, SYN-ACK, last ACK): its natural
    /// size, or the fixed size when every frame must have it; trimmed (fewer options) when
    /// the target mean is below it, which could not be reached otherwise.
    #[inline]
    fn control(&self, natural: usize) -> usize {
        match self {
            Sizer::Fixed(s) => *s,
            Sizer::Average { mean } => natural.min(*mean as usize),
            Sizer::Mix { .. } => natural,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Hosts and flows

struct Host {
    mac: [u8; 6],
    v4: [u8; 4],
    v6: [u8; 16],
    ttl: u8,
    /// Offset of this host's TCP timestamp clock.
    ts_off: u32,
}

impl Host {
    fn new(i: usize) -> Host {
        let idx = i as u32;
        let b = idx.to_be_bytes();
        // Locally administered unicast (02:...), unique per index.
        let mac = [0x02, 0xca, b[0], b[1], b[2], b[3]];
        // 10.a.b.c with c in 1..=250 so no address ends in .0 or .255.
        let a = idx / 250;
        let v4 = [10, (a >> 8) as u8, a as u8, (idx % 250 + 1) as u8];
        // Unique local fd00:ca7e::/32.
        let mut v6 = [0u8; 16];
        v6[..4].copy_from_slice(&[0xfd, 0x00, 0xca, 0x7e]);
        v6[12..].copy_from_slice(&(idx + 1).to_be_bytes());
        let mut h = i as u64;
        let r = splitmix64(&mut h);
        Host {
            mac,
            v4,
            v6,
            ttl: if r & 1 == 0 { 64 } else { 128 },
            ts_off: (r >> 32) as u32,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Class {
    TcpWeb,
    TcpOther,
    UdpWeb,
    UdpOther,
    Icmp,
}

const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;
const PROTO_ICMP: u8 = 1;
const PROTO_ICMP6: u8 = 58;

struct Flow {
    budget: u32,
    sent: u32,
    proto: u8,
    v6: bool,
    /// TCP timestamps option negotiated (Linux-like) or not (Windows/ICS-like).
    ts_opt: bool,
    /// Request/response in turn (ICS polling) rather than bulk data.
    alternate: bool,
    /// Which side sends the first FIN (0 client, 1 server).
    closer: u8,
    /// Hosts: [client, server].
    host: [u32; 2],
    /// Ports: [client, server]; for ICMP port[0] is the echo identifier.
    port: [u16; 2],
    isn: [u32; 2],
    /// Next sequence number per side.
    seq: [u32; 2],
    /// Last acknowledgment number each side sent.
    acked: [u32; 2],
    ident: [u16; 2],
    last_tsval: [u32; 2],
    flow_label: u32,
    /// Last ICMP echo request, so the reply can echo it: frame size and payload seed.
    echo_len: u16,
    echo_seed: u64,
    /// Modbus transaction id.
    txid: u16,
}

// ---------------------------------------------------------------------------------------
// Generation

/// Start of the capture: 2015-10-20 (the 4SICS week), a fixed epoch for determinism.
const EPOCH_NS: u64 = 1_445_299_200 * 1_000_000_000;
/// The longest capture from `EPOCH_NS` whose seconds fit pcap's 32 bits.
const MAX_SPAN_NS: u64 = u32::MAX as u64 * 1_000_000_000 - EPOCH_NS;

/// Generates the trace the options describe; an `Err` explains bad options.
pub fn generate(o: &GenOptions) -> Result<Trace, String> {
    o.validate()?;
    let mut rng = Rng::new(o.seed);
    let n = o.count;
    let nf = o.flows.min(n);

    let budgets = budgets(&mut rng, n, nf);
    let classes = classes(&mut rng, o, &budgets);
    let v6 = ipv6_flows(&mut rng, o, &budgets);
    let hosts: Vec<Host> = (0..o.hosts).map(Host::new).collect();
    let mut flows = make_flows(&mut rng, o, &budgets, &classes, &v6);
    let order = schedule(&mut rng, n, &budgets);

    // Expected bytes per packet, so the buffer is allocated once (the mean, not the
    // largest size: a mix with rare jumbo frames must not reserve 9000 B a packet).
    let est = match &o.sizes {
        SizeModel::Fixed(s) | SizeModel::Average(s) => *s,
        SizeModel::Mix(m) => {
            let w: f64 = m.iter().map(|x| x.1).sum();
            (m.iter().map(|x| x.0 as f64 * x.1).sum::<f64>() / w) as usize + 16
        }
    };
    let mut w = Writer {
        rng,
        out: Vec::with_capacity(n.saturating_mul(est + est / 50 + 16)),
        records: Vec::with_capacity(n),
        hosts,
        sizer: Sizer::new(&o.sizes),
        sum: 0,
    };
    let mask = (1u64 << flow_bits(nf)) - 1;
    let gap_ns = 1e9 / o.rate_pps;
    // Strictly increasing timestamps while the rate leaves room at µs resolution.
    let min_step = if gap_ns >= 2000.0 { 1000 } else { 0 };
    let mut t_rel = 0.0f64;
    let mut last = 0u64;
    for key in order {
        let f = &mut flows[(key & mask) as usize];
        // Exponential gaps: Poisson arrivals; µs resolution like classic pcap.
        t_rel += -w.rng.f64_open().ln() * gap_ns;
        // A rate so low that the capture outlasts pcap's 32-bit seconds would wrap the
        // timestamps (`EPOCH_NS + ts`): refused, not written wrong.
        if t_rel >= MAX_SPAN_NS as f64 {
            return Err(format!(
                "rate_pps {:e} is too low for {n} packets: the capture would run past the \
                 pcap format's last second (2106-02-07)",
                o.rate_pps
            ));
        }
        let ts = ((t_rel as u64) / 1000 * 1000).max(last + min_step);
        last = ts;
        w.packet(f, EPOCH_NS + ts);
    }
    let Writer { out, records, .. } = w;
    Ok(Trace::from_parts(
        LinkKind::Ethernet,
        PcapHeader::new(1, false),
        out,
        records,
    ))
}

/// Heavy-tailed budgets (Pareto, alpha 1.2), each at least 1, summing to `n`.
fn budgets(rng: &mut Rng, n: usize, nf: usize) -> Vec<u32> {
    let w: Vec<f64> = (0..nf)
        .map(|_| rng.f64_open().powf(-1.0 / 1.2).min(1e6))
        .collect();
    let total: f64 = w.iter().sum();
    let extra = (n - nf) as f64;
    let mut b: Vec<u32> = w
        .iter()
        .map(|x| 1 + (x / total * extra).min(u32::MAX as f64 / 2.0) as u32)
        .collect();
    let mut sum: i64 = b.iter().map(|&x| x as i64).sum();
    // Floors leave fewer than nf packets over; float rounding could overshoot by a hair.
    while sum < n as i64 {
        b[rng.below(nf as u64) as usize] += 1;
        sum += 1;
    }
    while sum > n as i64 {
        let i = (0..nf).max_by_key(|&i| b[i]).unwrap_or(0);
        b[i] -= 1;
        sum -= 1;
    }
    b
}

/// Protocol classes, largest flow first, each to a class still short of its packet target,
/// so the packet shares come out on target despite the elephants.
fn classes(rng: &mut Rng, o: &GenOptions, b: &[u32]) -> Vec<Class> {
    let n = o.count as f64;
    let tcp_web = o.web_share.min(o.tcp_share);
    let udp_web = o.web_share - tcp_web;
    let all = [
        Class::TcpWeb,
        Class::TcpOther,
        Class::UdpWeb,
        Class::UdpOther,
        Class::Icmp,
    ];
    let mut deficit = [
        tcp_web * n,
        (o.tcp_share - tcp_web) * n,
        udp_web * n,
        (o.udp_share - udp_web) * n,
        (1.0 - o.tcp_share - o.udp_share).max(0.0) * n,
    ];
    let mut idx: Vec<usize> = (0..b.len()).collect();
    idx.sort_unstable_by(|&x, &y| b[y].cmp(&b[x]).then(x.cmp(&y)));
    let mut out = vec![Class::TcpWeb; b.len()];
    for i in idx {
        let need = b[i] as f64;
        let fits = deficit.map(|d| if d >= need { d } else { 0.0 });
        let c = if fits.iter().any(|&x| x > 0.0) {
            pick_weighted(rng, &fits)
        } else {
            // Nothing fits whole: give it to the class that lacks the most.
            (0..5)
                .max_by(|&x, &y| deficit[x].total_cmp(&deficit[y]))
                .unwrap_or(0)
        };
        deficit[c] -= need;
        out[i] = all[c];
    }
    out
}

/// Whole flows over IPv6, in random order, while they fit the packet target.
fn ipv6_flows(rng: &mut Rng, o: &GenOptions, b: &[u32]) -> Vec<bool> {
    let mut v6 = vec![false; b.len()];
    if o.ipv6_share <= 0.0 {
        return v6;
    }
    let target = o.ipv6_share * o.count as f64;
    let mut idx: Vec<usize> = (0..b.len()).collect();
    for i in (1..idx.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        idx.swap(i, j);
    }
    let mut got = 0.0;
    for i in idx {
        let x = b[i] as f64;
        if got + x <= target + x / 2.0 {
            v6[i] = true;
            got += x;
        }
    }
    v6
}

fn make_flows(
    rng: &mut Rng,
    o: &GenOptions,
    b: &[u32],
    classes: &[Class],
    v6: &[bool],
) -> Vec<Flow> {
    // About one host in eight serves; popular servers and busy clients (squared uniforms).
    let servers = (o.hosts / 8).max(1) as u64;
    let clients = o.hosts as u64 - servers;
    let tcp_w: Vec<f64> = o.ports.tcp.iter().map(|x| x.1).collect();
    let udp_w: Vec<f64> = o.ports.udp.iter().map(|x| x.1).collect();
    let tcp_any = tcp_w.iter().any(|&w| w > 0.0);
    let udp_any = udp_w.iter().any(|&w| w > 0.0);
    let mut seen: HashSet<(u32, u32, u16, u16, u8)> = HashSet::with_capacity(b.len());
    let mut flows = Vec::with_capacity(b.len());
    for i in 0..b.len() {
        let class = classes[i];
        let proto = match class {
            Class::TcpWeb | Class::TcpOther => PROTO_TCP,
            Class::UdpWeb | Class::UdpOther => PROTO_UDP,
            Class::Icmp => PROTO_ICMP,
        };
        let u = rng.f64();
        let server = (servers as f64 * u * u) as u32;
        let u = rng.f64();
        let client = servers as u32 + (clients as f64 * u * u) as u32;
        let sport = match class {
            Class::TcpWeb => {
                if rng.chance(0.5) {
                    443
                } else {
                    80
                }
            }
            Class::UdpWeb => 443,
            Class::TcpOther if tcp_any => o.ports.tcp[pick_weighted(rng, &tcp_w)].0,
            Class::UdpOther if udp_any => o.ports.udp[pick_weighted(rng, &udp_w)].0,
            Class::TcpOther => 8080,
            Class::UdpOther => 0,
            Class::Icmp => 0,
        };
        let sport = if sport == 0 && proto == PROTO_UDP {
            1024 + rng.below(64_512) as u16
        } else {
            sport
        };
        // A fresh 5-tuple per flow, so no two flows merge in a flow table.
        let mut cport = 0;
        for _ in 0..64 {
            cport = if proto == PROTO_ICMP {
                rng.next_u64() as u16
            } else {
                1024 + rng.below(64_512) as u16
            };
            if seen.insert((client, server, cport, sport, proto)) {
                break;
            }
        }
        let isn = [rng.next_u64() as u32, rng.next_u64() as u32];
        let r = rng.next_u64();
        let ics = matches!(sport, 502 | 102 | 20000 | 44818);
        flows.push(Flow {
            budget: b[i],
            sent: 0,
            proto,
            v6: v6[i],
            ts_opt: !ics && r & 1 == 0,
            alternate: ics,
            closer: if (r >> 1) % 10 < 6 { 0 } else { 1 },
            host: [client, server],
            port: [cport, sport],
            isn,
            seq: isn,
            // The peer's ISN: differs from anything acknowledged after the handshake.
            acked: [isn[1], isn[0]],
            ident: [(r >> 16) as u16, (r >> 32) as u16],
            last_tsval: [0, 0],
            flow_label: (r >> 44) as u32 & 0xf_ffff,
            echo_len: 0,
            echo_seed: 0,
            txid: (r >> 8) as u16,
        });
    }
    flows
}

fn flow_bits(nf: usize) -> u32 {
    (usize::BITS - (nf.max(2) - 1).leading_zeros()).max(1)
}

/// Packet order: each flow spreads its packets over a window of the virtual timeline; the
/// sort of (time, flow) keys interleaves all flows.
fn schedule(rng: &mut Rng, n: usize, b: &[u32]) -> Vec<u64> {
    let nf = b.len();
    let fbits = flow_bits(nf);
    let scale = ((1u64 << (64 - fbits)) - 1) as f64 / n as f64;
    // Concurrency: about nf/25 flows live at once, more when flows are long (ICS polling
    // keeps every connection open); windows are budget × concurrency, capped by the trace.
    let mean_b = n as f64 / nf as f64;
    let conc = (nf as f64 / 25.0 + mean_b / 10.0).max(4.0).min(nf as f64);
    let nn = n as f64;
    let mut keys = Vec::with_capacity(n);
    for (f, &bf) in b.iter().enumerate() {
        let bf_ = bf as f64;
        let d = (bf_ * conc).min(nn);
        let start = rng.f64() * (nn - d);
        let step = d / bf_;
        for k in 0..bf {
            let vt = start + (k as f64 + 0.1 + 0.8 * rng.f64()) * step;
            let t = ((vt * scale) as u64).min((1u64 << (64 - fbits)) - 1);
            keys.push((t << fbits) | f as u64);
        }
    }
    keys.sort_unstable();
    keys
}

const ETH: usize = 14;
const FL_FIN: u8 = 0x01;
const FL_SYN: u8 = 0x02;
const FL_PSH: u8 = 0x08;
const FL_ACK: u8 = 0x10;

/// TCP options a packet carries.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Opts {
    None,
    /// NOP NOP TS (12 B).
    Ts,
    /// SYN, Linux-like: MSS SACK-perm TS NOP WS (20 B).
    SynTs,
    /// SYN, Windows-like: MSS NOP WS NOP NOP SACK-perm (12 B).
    SynPlain,
    /// MSS only (4 B), when a fixed size leaves no room for more.
    Mss,
}

impl Opts {
    fn len(self) -> usize {
        match self {
            Opts::None => 0,
            Opts::Ts | Opts::SynPlain => 12,
            Opts::SynTs => 20,
            Opts::Mss => 4,
        }
    }
}

struct Writer {
    rng: Rng,
    out: Vec<u8>,
    records: Vec<Record>,
    hosts: Vec<Host>,
    sizer: Sizer,
    sum: u64,
}

/// What to write for one TCP packet.
struct Seg {
    dir: usize,
    flags: u8,
    opts: Opts,
    payload: usize,
    /// The frame size (≥ headers + payload; the rest is Ethernet padding).
    frame: usize,
}

impl Writer {
    #[inline]
    fn draw(&mut self) -> usize {
        let done = self.records.len() as u64;
        self.sizer.draw(&mut self.rng, self.sum, done)
    }

    fn packet(&mut self, f: &mut Flow, ts_ns: u64) {
        let k = f.sent;
        f.sent += 1;
        match f.proto {
            PROTO_TCP => self.tcp(f, k, ts_ns),
            PROTO_UDP => {
                let dir = (k & 1) as usize;
                let l3 = if f.v6 { 40 } else { 20 };
                let dns = matches!(f.port[1], 53 | 5353);
                // DNS needs 17 payload bytes (header and a question): only IPv6 lacks them.
                let min = ETH + l3 + 8 + if dns { 17 } else { 0 };
                let frame = self.draw().max(min);
                let payload = frame - ETH - l3 - 8;
                let seed = self.rng.next_u64();
                let (sp, dp) = (f.port[dir], f.port[1 - dir]);
                let id = f.txid.wrapping_add((k / 2) as u16);
                self.emit(f, dir, ts_ns, frame, 8, payload, seed, |b, p| {
                    b[0..2].copy_from_slice(&sp.to_be_bytes());
                    b[2..4].copy_from_slice(&dp.to_be_bytes());
                    b[4..6].copy_from_slice(&((8 + payload) as u16).to_be_bytes());
                    if dns {
                        dns_message(p, id, dir == 1);
                    }
                });
            }
            _ => {
                // Echo request from the client, the reply echoes its size and bytes.
                let dir = (k & 1) as usize;
                let l3 = if f.v6 { 40 } else { 20 };
                let (frame, seed) = if dir == 0 || f.echo_len == 0 {
                    let frame = self.draw().max(ETH + l3 + 8);
                    let seed = self.rng.next_u64();
                    f.echo_len = frame as u16;
                    f.echo_seed = seed;
                    (frame, seed)
                } else {
                    (f.echo_len as usize, f.echo_seed)
                };
                let payload = frame - ETH - l3 - 8;
                let ty = match (f.v6, dir) {
                    (false, 0) => 8,
                    (false, _) => 0,
                    (true, 0) => 128,
                    (true, _) => 129,
                };
                let seq = (k / 2 + 1) as u16;
                let id = f.port[0];
                self.emit(f, dir, ts_ns, frame, 8, payload, seed, |b, _| {
                    b[0] = ty;
                    b[4..6].copy_from_slice(&id.to_be_bytes());
                    b[6..8].copy_from_slice(&seq.to_be_bytes());
                });
            }
        }
    }

    /// The k-th packet of a TCP flow: SYN, SYN-ACK, ACK, data both ways, then FIN from the
    /// closer, FIN from the other side and the closer's last ACK (as many as the budget
    /// leaves room for).
    fn tcp(&mut self, f: &mut Flow, k: u32, ts_ns: u64) {
        let b = f.budget;
        let l3 = if f.v6 { 40 } else { 20 };
        let hdr = ETH + l3 + 20;
        let nclose = if b > 3 { (b - 3).min(3) } else { 0 };
        let seg = if k < 2 {
            let natural = hdr + if f.ts_opt { 20 } else { 12 };
            let frame = self.sizer.control(natural).max(hdr);
            let room = frame - hdr;
            let opts = if f.ts_opt && room >= 20 {
                Opts::SynTs
            } else if room >= 12 {
                Opts::SynPlain
            } else if room >= 4 {
                Opts::Mss
            } else {
                Opts::None
            };
            let flags = if k == 0 { FL_SYN } else { FL_SYN | FL_ACK };
            Seg {
                dir: k as usize,
                flags,
                opts,
                payload: 0,
                frame,
            }
        } else if k >= b - nclose {
            let j = k - (b - nclose);
            let closer = f.closer as usize;
            if j < 2 {
                let dir = if j == 0 { closer } else { 1 - closer };
                let mut s = self.data_seg(f, dir, hdr, true);
                s.flags |= FL_FIN;
                s
            } else {
                // After both FINs nothing more may be sent: a pure ACK of natural size.
                let opts = if f.ts_opt { Opts::Ts } else { Opts::None };
                let natural = (hdr + opts.len()).max(MIN_FRAME);
                let frame = self.sizer.control(natural).max(hdr);
                let opts = if frame >= hdr + opts.len() {
                    opts
                } else {
                    Opts::None
                };
                Seg {
                    dir: closer,
                    flags: FL_ACK,
                    opts,
                    payload: 0,
                    frame,
                }
            }
        } else {
            let dir = if k == 2 {
                0
            } else if f.alternate {
                ((k - 3) & 1) as usize
            } else {
                usize::MAX // chosen by size below
            };
            self.data_seg(f, dir, hdr, false)
        };
        self.write_tcp(f, seg, ts_ns);
    }

    /// A packet that may carry data: its size decides pure ACK or data; bulk data flows
    /// mostly from the server, ACKs mostly from the client. A pure ACK is only sent by a
    /// side with something new to acknowledge (no duplicate ACKs); if neither side has,
    /// the packet carries a few bytes of data instead.
    fn data_seg(&mut self, f: &Flow, dir: usize, hdr: usize, fin: bool) -> Seg {
        let mut frame = self.draw().max(hdr);
        let mut opts = if f.ts_opt { Opts::Ts } else { Opts::None };
        if frame < hdr + opts.len() {
            opts = Opts::None;
        }
        let room = frame - hdr - opts.len();
        // Small frames are pure ACKs padded to the Ethernet minimum, not a few data bytes.
        let mut payload = if frame > MIN_FRAME { room } else { 0 };
        let news = |d: usize| f.seq[1 - d] != f.acked[d];
        let dir = if dir != usize::MAX {
            dir
        } else if payload > 0 {
            usize::from(self.rng.chance(0.7))
        } else {
            let d = usize::from(self.rng.chance(0.3));
            if news(d) {
                d
            } else {
                1 - d
            }
        };
        if payload == 0 && !fin && !news(dir) {
            payload = room.max(6);
            frame = hdr + opts.len() + payload;
        }
        let flags = if payload > 0 { FL_PSH | FL_ACK } else { FL_ACK };
        Seg {
            dir,
            flags,
            opts,
            payload,
            frame,
        }
    }

    fn write_tcp(&mut self, f: &mut Flow, s: Seg, ts_ns: u64) {
        let d = s.dir;
        let seq = f.seq[d];
        let syn = s.flags & FL_SYN != 0;
        let ack = if s.flags & FL_ACK != 0 {
            f.acked[d] = f.seq[1 - d];
            f.seq[1 - d]
        } else {
            0
        };
        f.seq[d] = seq
            .wrapping_add(s.payload as u32)
            .wrapping_add(u32::from(syn || s.flags & FL_FIN != 0));
        let tsval =
            ((ts_ns / 1_000_000) as u32).wrapping_add(self.hosts[f.host[d] as usize].ts_off);
        let tsecr = f.last_tsval[1 - d];
        f.last_tsval[d] = tsval;
        let olen = s.opts.len();
        let first_data = s.payload > 0 && seq == f.isn[d].wrapping_add(1);
        let seed = self.rng.next_u64();
        let txid = f.txid;
        if f.port[1] == 502 && s.payload >= 8 {
            f.txid = f.txid.wrapping_add(1);
        }
        let (sport, dport) = (f.port[d], f.port[1 - d]);
        let win: u16 = if d == 0 { 0x01f6 } else { 0x00f5 };
        self.emit(f, d, ts_ns, s.frame, 20 + olen, s.payload, seed, |b, payload| {
            b[0..2].copy_from_slice(&sport.to_be_bytes());
            b[2..4].copy_from_slice(&dport.to_be_bytes());
            b[4..8].copy_from_slice(&seq.to_be_bytes());
            b[8..12].copy_from_slice(&ack.to_be_bytes());
            b[12] = (((20 + olen) / 4) as u8) << 4;
            b[13] = s.flags;
            let w = if syn { 64_240 } else { win };
            b[14..16].copy_from_slice(&w.to_be_bytes());
            let o = &mut b[20..20 + olen];
            let ts = |o: &mut [u8]| {
                o[0] = 8;
                o[1] = 10;
                o[2..6].copy_from_slice(&tsval.to_be_bytes());
                o[6..10].copy_from_slice(&tsecr.to_be_bytes());
            };
            match s.opts {
                Opts::None => {}
                Opts::Ts => {
                    o[0] = 1;
                    o[1] = 1;
                    ts(&mut o[2..12]);
                }
                Opts::SynTs => {
                    o[0..4].copy_from_slice(&[2, 4, 0x05, 0xb4]);
                    o[4..6].copy_from_slice(&[4, 2]);
                    ts(&mut o[6..16]);
                    o[16..20].copy_from_slice(&[1, 3, 3, 7]);
                }
                Opts::SynPlain => {
                    o.copy_from_slice(&[2, 4, 0x05, 0xb4, 1, 3, 3, 8, 1, 1, 4, 2]);
                }
                Opts::Mss => o.copy_from_slice(&[2, 4, 0x05, 0xb4]),
            }
            // Recognisable application bytes at the start of a payload.
            let p = &mut payload[..];
            if first_data && (sport == 80 || dport == 80) {
                let text: &[u8] = if d == 0 {
                    b"GET /index.html HTTP/1.1\r\nHost: www.example.com\r\nUser-Agent: catena-gen\r\nAccept: */*\r\n\r\n"
                } else {
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nServer: catena-gen\r\n\r\n<html><body>"
                };
                let m = text.len().min(p.len());
                p[..m].copy_from_slice(&text[..m]);
            } else if (sport == 502 || dport == 502) && p.len() >= 8 {
                // Modbus/TCP MBAP header: transaction, protocol 0, length, unit, function 3.
                p[0..2].copy_from_slice(&txid.to_be_bytes());
                p[2..4].copy_from_slice(&[0, 0]);
                let len = (p.len() - 6) as u16;
                p[4..6].copy_from_slice(&len.to_be_bytes());
                p[6] = 1;
                p[7] = 3;
            }
        });
    }

    /// Writes one frame: Ethernet, IP, the L4 header by `l4` (which gets the zeroed L4
    /// header and the payload, already filled with pseudo-random bytes), the IP and L4
    /// checksums; bytes past the IP packet up to `frame` are Ethernet padding (zeros).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn emit(
        &mut self,
        f: &mut Flow,
        dir: usize,
        ts_ns: u64,
        frame: usize,
        l4_len: usize,
        payload: usize,
        seed: u64,
        l4: impl FnOnce(&mut [u8], &mut [u8]),
    ) {
        let src = &self.hosts[f.host[dir] as usize];
        let dst = &self.hosts[f.host[1 - dir] as usize];
        let start = self.out.len();
        self.out.resize(start + frame, 0);
        let b = &mut self.out[start..];
        b[0..6].copy_from_slice(&dst.mac);
        b[6..12].copy_from_slice(&src.mac);
        let l3 = if f.v6 { 40 } else { 20 };
        let ethertype: u16 = if f.v6 { 0x86dd } else { 0x0800 };
        b[12..14].copy_from_slice(&ethertype.to_be_bytes());
        let proto = match (f.proto, f.v6) {
            (PROTO_ICMP, true) => PROTO_ICMP6,
            (p, _) => p,
        };
        let (ip, rest) = b[ETH..].split_at_mut(l3);
        let seg_len = l4_len + payload;
        {
            let (hdr, pl) = rest[..seg_len].split_at_mut(l4_len);
            fill(pl, seed);
            l4(hdr, pl);
        }
        let mut acc: u64;
        if f.v6 {
            let vtf = (6u32 << 28) | f.flow_label;
            ip[0..4].copy_from_slice(&vtf.to_be_bytes());
            ip[4..6].copy_from_slice(&(seg_len as u16).to_be_bytes());
            ip[6] = proto;
            ip[7] = src.ttl;
            ip[8..24].copy_from_slice(&src.v6);
            ip[24..40].copy_from_slice(&dst.v6);
            acc = checksum::sum(&ip[8..40]) as u64;
        } else {
            ip[0] = 0x45;
            ip[2..4].copy_from_slice(&((20 + seg_len) as u16).to_be_bytes());
            ip[4..6].copy_from_slice(&f.ident[dir].to_be_bytes());
            f.ident[dir] = f.ident[dir].wrapping_add(1);
            if proto == PROTO_TCP {
                ip[6] = 0x40; // DF, as stacks set it on TCP
            }
            ip[8] = src.ttl;
            ip[9] = proto;
            ip[12..16].copy_from_slice(&src.v4);
            ip[16..20].copy_from_slice(&dst.v4);
            let c = checksum::checksum(ip);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
            acc = checksum::sum(&ip[12..20]) as u64;
        }
        if proto == PROTO_ICMP {
            acc = 0; // ICMPv4 has no pseudo-header
        } else {
            // Pseudo-header: addresses (summed above), protocol, L4 length.
            acc += proto as u64 + seg_len as u64;
        }
        let seg = &mut rest[..seg_len];
        let ck_at = match proto {
            PROTO_TCP => 16,
            _ => {
                if proto == PROTO_UDP {
                    6
                } else {
                    2
                }
            }
        };
        let mut c = !checksum::fold64(acc + checksum::sum(seg) as u64);
        if proto == PROTO_UDP && c == 0 {
            c = 0xffff; // 0 means "no checksum" in UDP
        }
        seg[ck_at..ck_at + 2].copy_from_slice(&c.to_be_bytes());
        self.sum += frame as u64;
        self.records.push(Record {
            off: start as u64,
            caplen: frame as u32,
            wire_len: frame as u32,
            ts_ns,
        });
    }
}

/// Turns a (pseudo-random) payload of any size >= 17 into a well-formed DNS message, so
/// DNS dissectors and DPI see DNS: one question whose name takes the room, and past 271
/// bytes an EDNS OPT record whose experimental option carries the rest.
fn dns_message(p: &mut [u8], id: u16, response: bool) {
    let n = p.len();
    if n < 17 {
        return;
    }
    let room = n - 16; // name + OPT record
    let (name, opt) = if room <= 255 {
        // A name cannot take exactly 2 bytes: root name and one trailing zero byte.
        (if room == 2 { 1 } else { room }, 0)
    } else if room - 255 < 15 {
        (room - 15, 15) // the OPT record's fixed part needs 15 bytes
    } else {
        (255, room - 255)
    };
    let flags: u16 = if response { 0x8180 } else { 0x0100 };
    p[0..2].copy_from_slice(&id.to_be_bytes());
    p[2..4].copy_from_slice(&flags.to_be_bytes());
    p[4..12].copy_from_slice(&[0, 1, 0, 0, 0, 0, 0, u8::from(opt > 0)]);
    // Labels of lowercase letters; a leftover single byte would be a bad label, so the
    // last label borrows it.
    let q = &mut p[12..12 + name];
    let mut i = 0;
    let mut left = name - 1; // before the root byte
    while left >= 2 {
        let mut len = (left - 1).min(63);
        if left - 1 - len == 1 {
            len -= 1;
        }
        q[i] = len as u8;
        for c in &mut q[i + 1..i + 1 + len] {
            *c = b'a' + *c % 26;
        }
        i += 1 + len;
        left -= 1 + len;
    }
    q[i] = 0; // root
    let t = 12 + name;
    p[t..t + 4].copy_from_slice(&[0, 1, 0, 1]); // A, IN
    if room == 2 {
        p[n - 1] = 0;
    }
    if opt > 0 {
        let o = &mut p[t + 4..];
        // OPT: root name, type 41, UDP size 4096, ext-rcode/version/flags 0, rdata.
        o[0..11].copy_from_slice(&[0, 0, 41, 0x10, 0, 0, 0, 0, 0, 0, 0]);
        o[9..11].copy_from_slice(&((opt - 11) as u16).to_be_bytes());
        o[11..13].copy_from_slice(&65001u16.to_be_bytes()); // local/experimental code
        o[13..15].copy_from_slice(&((opt - 15) as u16).to_be_bytes());
    }
}

/// Fills a payload with pseudo-random bytes from its own stream (so an echo reply can
/// repeat its request's bytes).
#[inline]
fn fill(p: &mut [u8], seed: u64) {
    let mut s = seed;
    let mut chunks = p.chunks_exact_mut(8);
    for c in &mut chunks {
        c.copy_from_slice(&splitmix64(&mut s).to_le_bytes());
    }
    let r = chunks.into_remainder();
    let n = r.len();
    r.copy_from_slice(&splitmix64(&mut s).to_le_bytes()[..n]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xoshiro_reference_stream() {
        // splitmix64 from 0 gives the published first output; the stream must never change
        // (traces are compared byte for byte across versions).
        let mut x = 0u64;
        assert_eq!(splitmix64(&mut x), 0xE220_A839_7B1D_CDAF);
        let mut r = Rng::new(42);
        let a: Vec<u64> = (0..3).map(|_| r.next_u64()).collect();
        let mut r2 = Rng::new(42);
        assert_eq!(a, (0..3).map(|_| r2.next_u64()).collect::<Vec<_>>());
        assert_ne!(a[0], Rng::new(43).next_u64());
        // xoshiro256** reference: state [1, 2, 3, 4] gives 11520, 0, 1509978240.
        let mut r = Rng([1, 2, 3, 4]);
        assert_eq!(
            [r.next_u64(), r.next_u64(), r.next_u64()],
            [11520, 0, 1_509_978_240]
        );
    }

    #[test]
    fn size_mix_hits_every_mean() {
        for m in (60..=9000).step_by(7) {
            let (q66, p) = mix_for(m as f64);
            assert!(
                p.iter().all(|&x| (-1e-12..=1.0 + 1e-12).contains(&x)),
                "{m}: {p:?}"
            );
            assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-9, "{m}");
            let mu_s = 60.0 + 6.0 * q66;
            let mean = p[0] * mu_s + p[1] * MU_MID + p[2] * MU_L1 + p[3] * MU_L2;
            assert!((mean - m as f64).abs() < 1e-6, "{m}: {mean}");
        }
    }

    #[test]
    fn budgets_sum_exactly_and_are_heavy_tailed() {
        let mut r = Rng::new(7);
        let b = budgets(&mut r, 791_615, 40_686);
        assert_eq!(b.iter().map(|&x| x as u64).sum::<u64>(), 791_615);
        assert!(b.iter().all(|&x| x >= 1));
        let max = *b.iter().max().unwrap() as f64;
        assert!(max > 50.0 * 791_615.0 / 40_686.0, "no elephant: {max}");
        let mut r = Rng::new(7);
        assert_eq!(budgets(&mut r, 5, 5), vec![1; 5]);
    }

    #[test]
    fn hosts_are_distinct_and_private() {
        let hs: Vec<Host> = (0..70_000).map(Host::new).collect();
        let v4: HashSet<[u8; 4]> = hs.iter().map(|h| h.v4).collect();
        let mac: HashSet<[u8; 6]> = hs.iter().map(|h| h.mac).collect();
        assert_eq!(v4.len(), hs.len());
        assert_eq!(mac.len(), hs.len());
        assert!(hs
            .iter()
            .all(|h| h.v4[0] == 10 && h.v4[3] != 0 && h.v4[3] != 255));
        assert!(hs.iter().all(|h| h.mac[0] & 0x03 == 0x02)); // local, unicast
    }

    #[test]
    fn dns_messages_fill_any_payload() {
        for n in 17..3000 {
            let mut p = vec![0xabu8; n];
            dns_message(&mut p, 7, n % 2 == 0);
            assert_eq!(&p[4..6], &[0, 1], "{n}: one question");
            // Walk the name: labels of letters, then the root.
            let mut i = 12;
            while p[i] != 0 {
                let len = p[i] as usize;
                assert!(len <= 63 && p[i + 1..i + 1 + len].iter().all(u8::is_ascii_lowercase));
                i += 1 + len;
            }
            assert!(i - 12 < 255, "{n}: name too long");
            i += 5; // root, type, class
            if p[11] == 1 {
                assert_eq!(&p[i..i + 3], &[0, 0, 41], "{n}: OPT");
                let rdlen = u16::from_be_bytes([p[i + 9], p[i + 10]]) as usize;
                let olen = u16::from_be_bytes([p[i + 13], p[i + 14]]) as usize;
                assert_eq!(rdlen, olen + 4);
                i += 11 + rdlen;
            } else if n == 18 {
                i += 1; // root name and one trailing byte
            }
            assert_eq!(i, n, "{n}: message length");
        }
    }

    #[test]
    fn schedule_keeps_every_packet_once() {
        let mut r = Rng::new(3);
        let b = budgets(&mut r, 10_000, 300);
        let keys = schedule(&mut r, 10_000, &b);
        assert_eq!(keys.len(), 10_000);
        let mask = (1u64 << flow_bits(300)) - 1;
        let mut per = vec![0u32; 300];
        for k in &keys {
            per[(k & mask) as usize] += 1;
        }
        assert_eq!(per, b);
    }
}
