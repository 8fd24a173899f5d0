//! DPI: application-protocol detection by payload, one fixed-size state per flow.
//!
//! [`DpiFlow::feed`] takes one UDP datagram's payload, or the next bytes of one TCP
//! direction, and runs the detectors that have not yet ruled the flow out. A detector
//! answers match / tentative match / no / maybe; the first match wins. Ports are used only
//! as a tie-breaker inside detectors (documented at each use) and by [`DpiFlow::guess`],
//! the fallback nDPI also applies ("Match by port") to flows no detector recognised.
//! No allocation, no panics: every read is bounds-checked (proptests in `tests.rs`).

mod apps;
mod db;
mod dns;
mod files;
mod ics;
mod infra;
mod lan;
mod mail;
mod msg;
mod p2p;
mod ports;
mod proto;
mod remote;
mod tls;
pub mod trace;
mod voip;
mod web;

use std::net::IpAddr;

pub use proto::AppProto;

/// Transport of the flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L4 {
    Tcp,
    Udp,
    /// Any other IP protocol, by number.
    Other(u8),
}

/// What [`DpiFlow::feed`] concluded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    Detected(AppProto),
    NeedMore,
    GiveUp,
}

/// A detector's answer for one chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Match(AppProto),
    /// Looks like this protocol, but a later chunk may refine it (SMTP → SMTPS after
    /// STARTTLS): kept as the answer if nothing better comes.
    Tentative(AppProto),
    No,
    Maybe,
}

/// What a detector sees besides the bytes.
pub(crate) struct Ctx {
    pub l4: L4,
    pub from_client: bool,
    /// Index of this chunk among the chunks of its direction (0 = first).
    pub n: u16,
    pub cport: u16,
    pub sport: u16,
}

impl Ctx {
    /// Either endpoint uses port `p` (the first packet may come from the server).
    #[inline]
    pub fn port(&self, p: u16) -> bool {
        self.cport == p || self.sport == p
    }

    #[inline]
    pub fn udp(&self) -> bool {
        self.l4 == L4::Udp
    }
}

/// Small per-flow memory for detectors that need two packets to decide.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Scratch {
    /// RTP: SSRC of the last candidate packet and how many agreed.
    pub rtp_ssrc: u32,
    pub rtp_hits: u8,
    /// Mail/FTP: the server's greeting line code seen (e.g. 220), 0 if none.
    pub banner: u16,
    /// OpenVPN: the session id (first 4 bytes) of the hard reset seen.
    pub ovpn_sid: u32,
    /// TLS records seen while picking a flow up mid-stream.
    pub tls_records: u8,
    /// Candidate messages seen so far, per detector that needs several.
    pub telnet: u8,
    pub stun: u8,
    pub tftp: u8,
    /// One-bit memories: the `Scratch::*` flag constants.
    pub flags: u16,
}

impl Scratch {
    pub const OPENVPN_RESET: u16 = 1;
    pub const UTP_SYN: u16 = 2;
    /// A well-formed TLS record seen from the client / from the server.
    pub const TLS_CLIENT: u16 = 4;
    pub const TLS_SERVER: u16 = 8;
    pub const STUN_SEEN: u16 = 16;
    pub const MQTT_PING: u16 = 32;
    pub const SOCKS5_HELLO: u16 = 64;
    pub const RTMP_C0: u16 = 128;
}

const HOST_MAX: usize = 64;
/// Payload chunks after which an undecided flow gives up (nDPI stops after a similar
/// number of packets).
const MAX_CHUNKS: u16 = 16;

type Detect = fn(&Ctx, &mut Scratch, &[u8]) -> Verdict;

/// One detector: which transports it runs on, the protocols it can name (ruled out
/// together when it says no), and the function.
pub(crate) struct Detector {
    pub tcp: bool,
    pub udp: bool,
    pub names: &'static [AppProto],
    pub f: Detect,
}

/// The detectors in the order they are tried: specific signatures before loose ones.
const DETECTORS: &[Detector] = &[
    tls::TLS,
    tls::DTLS,
    web::HTTP,
    dns::DNS,
    dns::NETBIOS,
    dns::DNSCRYPT,
    tls::QUIC,
    remote::SSH,
    mail::MAIL,
    voip::SIP,
    voip::STUN,
    p2p::BITTORRENT,
    files::SMB,
    remote::RDP,
    ics::S7COMM,
    infra::NTP,
    infra::DHCP,
    infra::DHCPV6,
    msg::MQTT,
    ics::MODBUS,
    ics::DNP3,
    ics::IEC104,
    ics::BACNET,
    infra::SNMP,
    infra::SYSLOG,
    remote::TELNET,
    msg::IRC,
    msg::XMPP,
    web::SSDP,
    infra::KERBEROS,
    infra::LDAP,
    db::MYSQL,
    db::POSTGRES,
    db::REDIS,
    db::MONGODB,
    db::MSSQL,
    db::MEMCACHED,
    infra::TFTP,
    infra::RADIUS,
    infra::SLP,
    remote::OPENVPN,
    remote::WIREGUARD,
    remote::IKE,
    remote::VNC,
    msg::ZABBIX,
    files::NFS,
    infra::BGP,
    web::AJP,
    infra::COAP,
    p2p::SOURCE_ENGINE,
    p2p::DROPBOX,
    lan::BJNP,
    lan::UBNTAC2,
    lan::TPLINK_SHP,
    lan::HSRP,
    lan::NAT_PMP,
    lan::TEREDO,
    lan::RMCP,
    lan::COLLECTD,
    voip::MGCP,
    voip::RTMP,
    remote::SOCKS,
    apps::WHATSAPP,
    apps::DISCORD,
    apps::OICQ,
    apps::SPOTIFY,
    apps::RAKNET,
    apps::TUYA,
    apps::FIX,
    // Loose shapes last: a Gnutella descriptor header and RTP.
    p2p::GNUTELLA,
    voip::RTP,
];

// The per-flow sets are 128-bit masks.
const _: () = assert!(DETECTORS.len() <= 128 && AppProto::ALL.len() <= 128);

/// Per-flow DPI state: fixed size, no heap.
#[derive(Clone, Debug)]
pub struct DpiFlow {
    l4: L4,
    cport: u16,
    sport: u16,
    chunks: [u16; 2],
    /// Detectors (by index in `DETECTORS`) that ruled the flow out.
    done: u128,
    /// Protocols ruled out, so the port fallback never names one of them.
    excluded: u128,
    result: Option<AppProto>,
    tentative: Option<(AppProto, u8)>,
    gave_up: bool,
    scratch: Scratch,
    host: [u8; HOST_MAX],
    host_len: u8,
}

impl DpiFlow {
    /// A flow whose first packet went from `client` to `server`. IP-level protocols
    /// (ICMP, IGMP, ESP, …) are named at once from the protocol number. Only the ports
    /// are kept: no detector needs the addresses today.
    pub fn new(l4: L4, client: (IpAddr, u16), server: (IpAddr, u16)) -> DpiFlow {
        let result = match l4 {
            L4::Other(p) => ip_proto(p),
            _ => None,
        };
        DpiFlow {
            l4,
            cport: client.1,
            sport: server.1,
            chunks: [0; 2],
            done: 0,
            excluded: 0,
            result,
            tentative: None,
            gave_up: matches!(l4, L4::Other(_)) && result.is_none(),
            scratch: Scratch::default(),
            host: [0; HOST_MAX],
            host_len: 0,
        }
    }

    /// One UDP datagram's payload, or the next in-order TCP bytes of one direction.
    pub fn feed(&mut self, from_client: bool, data: &[u8]) -> Progress {
        if let Some(p) = self.result {
            return Progress::Detected(p);
        }
        if self.gave_up {
            return Progress::GiveUp;
        }
        if data.is_empty() {
            return Progress::NeedMore;
        }
        let dir = usize::from(!from_client);
        let ctx = Ctx {
            l4: self.l4,
            from_client,
            n: self.chunks[dir],
            cport: self.cport,
            sport: self.sport,
        };
        self.chunks[dir] = self.chunks[dir].saturating_add(1);
        let tcp = self.l4 == L4::Tcp;
        for (i, d) in DETECTORS.iter().enumerate() {
            if self.done & (1u128 << i) != 0 || !(if tcp { d.tcp } else { d.udp }) {
                continue;
            }
            // While a tentative answer stands, only its own detector may refine it.
            if let Some((t, _)) = self.tentative {
                if !d.names.contains(&t) {
                    continue;
                }
            }
            match (d.f)(&ctx, &mut self.scratch, data) {
                Verdict::Match(p) => return self.decide(p, data),
                Verdict::Tentative(p) => {
                    if self.tentative.is_none() {
                        self.tentative = Some((p, 0));
                        self.capture_meta(p, data);
                    }
                }
                Verdict::No => {
                    self.done |= 1u128 << i;
                    // One chunk is thin evidence against a flow's own port (a capture
                    // cut mid-stream, a fuzzed packet): like nDPI, which keeps its port
                    // guess unless a dissector gave up after several packets, the
                    // fallback stays open until the flow has shown two chunks.
                    if self.chunks[0].saturating_add(self.chunks[1]) >= 2 {
                        for p in d.names {
                            self.excluded |= p.bit();
                        }
                    }
                }
                Verdict::Maybe => {}
            }
        }
        if let Some((t, n)) = self.tentative {
            // A few more chunks for an upgrade (STARTTLS), then settle.
            if n >= 6 {
                self.result = Some(t);
                return Progress::Detected(t);
            }
            self.tentative = Some((t, n + 1));
            return Progress::NeedMore;
        }
        let all_tried = DETECTORS
            .iter()
            .enumerate()
            .all(|(i, d)| self.done & (1u128 << i) != 0 || !(if tcp { d.tcp } else { d.udp }));
        if all_tried || self.chunks[0].saturating_add(self.chunks[1]) >= MAX_CHUNKS {
            self.gave_up = true;
            return Progress::GiveUp;
        }
        Progress::NeedMore
    }

    fn decide(&mut self, p: AppProto, data: &[u8]) -> Progress {
        let p = tls::by_port(p, self.cport, self.sport);
        self.result = Some(p);
        self.capture_meta(p, data);
        Progress::Detected(p)
    }

    fn capture_meta(&mut self, p: AppProto, data: &[u8]) {
        if self.host_len != 0 {
            return;
        }
        let name = match p {
            AppProto::Tls | AppProto::Smtps | AppProto::Imaps | AppProto::Pops | AppProto::Dtls => {
                tls::sni(data)
            }
            AppProto::Http | AppProto::HttpConnect | AppProto::Rtsp => web::host(data),
            _ => None,
        };
        if let Some(n) = name {
            let n = &n[..n.len().min(HOST_MAX)];
            self.host[..n.len()].copy_from_slice(n);
            self.host_len = n.len() as u8;
        }
    }

    /// The protocol found by payload (or IP protocol number); settles a pending
    /// tentative answer once the flow has given up or ended.
    pub fn result(&self) -> Option<AppProto> {
        self.result.or(self.tentative.map(|t| t.0))
    }

    /// The answer when the flow ends undetected: the protocol registered for one of its
    /// ports, unless a detector already ruled that protocol out — nDPI's "Match by port".
    pub fn guess(&self) -> Option<AppProto> {
        if self.result().is_some() {
            return None;
        }
        let p = ports::by_port(self.l4, self.sport).or(ports::by_port(self.l4, self.cport))?;
        (self.excluded & p.bit() == 0).then_some(p)
    }

    /// The final label: [`result`](Self::result), else [`guess`](Self::guess).
    pub fn label(&self) -> Option<AppProto> {
        self.result().or(self.guess())
    }

    /// TLS/DTLS SNI, or the HTTP/RTSP Host header (cut to 64 bytes), when seen.
    pub fn host(&self) -> Option<&str> {
        let b = &self.host[..self.host_len as usize];
        (!b.is_empty())
            .then(|| std::str::from_utf8(b).ok())
            .flatten()
    }
}

/// Protocols named by the IP protocol number alone, as nDPI does.
fn ip_proto(p: u8) -> Option<AppProto> {
    Some(match p {
        1 => AppProto::Icmp,
        2 => AppProto::Igmp,
        50 | 51 => AppProto::Ipsec,
        58 => AppProto::Icmpv6,
        89 => AppProto::Ospf,
        103 => AppProto::Pim,
        112 => AppProto::Vrrp,
        132 => AppProto::Sctp,
        _ => return None,
    })
}

// Byte helpers shared by the detectors; all of them are total (no panics).

#[inline]
pub(crate) fn starts(d: &[u8], p: &[u8]) -> bool {
    d.starts_with(p)
}

/// `p` (lower-case ASCII) at the start of `d`, ignoring ASCII case.
#[inline]
pub(crate) fn starts_ci(d: &[u8], p: &[u8]) -> bool {
    d.len() >= p.len() && d[..p.len()].eq_ignore_ascii_case(p)
}

/// Offset of `needle` within the first `limit` bytes of `d`.
pub(crate) fn find(d: &[u8], needle: &[u8], limit: usize) -> Option<usize> {
    let d = &d[..d.len().min(limit)];
    if needle.is_empty() || d.len() < needle.len() {
        return None;
    }
    d.windows(needle.len()).position(|w| w == needle)
}

#[inline]
pub(crate) fn at(d: &[u8], i: usize) -> u8 {
    d.get(i).copied().unwrap_or(0)
}

pub(crate) use crate::packet::bytes::{be16, be32};

#[inline]
pub(crate) fn le32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([at(b, o), at(b, o + 1), at(b, o + 2), at(b, o + 3)])
}

#[cfg(test)]
mod tests;
