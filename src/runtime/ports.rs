//! `[[port]]` tables: checked when the chain is read, probed by `catena check`, opened
//! by `catena run`. Port numbers are the tables' order, so NFs that pair ports (wire:
//! 0↔1) work unchanged.

use std::path::PathBuf;

use super::config::{ChainConfig, ConfigError};
use crate::io::{
    af_packet, af_xdp, AfPacket, AfPacketConfig, AfXdp, AfXdpConfig, PcapHeader, PcapPort, Port,
    Rate, RxMode, Trace,
};
use crate::optimise::aggregate::{self, Aggregating};

pub const KINDS: &str = "af_packet, af_xdp, pcap";

#[derive(Clone, Debug)]
pub enum PortKind {
    AfPacket(AfPacketConfig),
    AfXdp(AfXdpConfig),
    Pcap {
        read: Option<PathBuf>,
        write: Option<PathBuf>,
        rate: Rate,
    },
}

#[derive(Clone, Debug)]
pub struct PortSpec {
    pub name: String,
    pub kind: PortKind,
    /// PA-Flow aggregation on this port: the largest aggregated frame, in bytes.
    pub aggregate: Option<usize>,
    /// PA-Flow: received aggregates' packets go to the NFs as views into the frame.
    pub views: bool,
}

impl PortSpec {
    /// Memory the port's socket maps (rings, UMEM), per worker; pcap ports map their file
    /// or buffer output, counted nowhere else either way and bounded by the file.
    pub fn memory(&self) -> usize {
        match &self.kind {
            PortKind::AfPacket(c) => c.memory(),
            PortKind::AfXdp(c) => c.memory(),
            PortKind::Pcap { .. } => 0,
        }
    }

    pub fn describe(&self) -> String {
        let agg = self.aggregate.map_or(String::new(), |n| {
            let v = if self.views {
                ", NFs work on the received aggregates' packets as views into them"
            } else {
                ""
            };
            format!("; aggregates (PA-Flow) up to {n} B{v}")
        });
        self.describe_kind() + &agg
    }

    fn describe_kind(&self) -> String {
        match &self.kind {
            PortKind::AfPacket(c) => format!(
                "af_packet on {}{}",
                c.iface,
                c.fanout
                    .map_or(String::new(), |g| format!(", fanout group {g}"))
            ),
            PortKind::AfXdp(c) => format!("af_xdp on {} queue {}", c.iface, c.queue),
            PortKind::Pcap { read, write, rate } => {
                let mut v = Vec::new();
                if let Some(r) = read {
                    v.push(format!("replays {} ({rate:?})", r.display()));
                }
                if let Some(w) = write {
                    v.push(format!("writes {}", w.display()));
                }
                format!("pcap: {}", v.join(", "))
            }
        }
    }

    /// The port is live (on an interface) rather than a file.
    pub fn is_live(&self) -> bool {
        matches!(self.kind, PortKind::AfPacket(_) | PortKind::AfXdp(_))
    }
}

/// Makes every live port copy what it receives (`rx = "copy"`): for runs where packets
/// outlive the batch they arrived in (pipeline stages hand them to other threads).
pub fn copy_rx(specs: &mut [PortSpec]) {
    for s in specs {
        // PA-Flow: packets viewing a received aggregate must leave within their batch too.
        s.views = false;
        match &mut s.kind {
            PortKind::AfPacket(c) => c.rx = RxMode::Copy,
            PortKind::AfXdp(c) => c.rx = RxMode::Copy,
            PortKind::Pcap { .. } => {}
        }
    }
}

/// The `[[port]]` tables, checked.
pub fn specs(c: &ChainConfig) -> Result<Vec<PortSpec>, ConfigError> {
    let mut out: Vec<PortSpec> = Vec::new();
    for p in &c.ports {
        let bad = |msg: String| c.invalid(format!("port `{}`: {msg}", p.name));
        if out.iter().any(|q| q.name == p.name) {
            return Err(c.invalid(format!("two ports are named `{}`", p.name)));
        }
        let only = |what: &str, set: bool| {
            if set {
                Err(bad(format!("`{what}` does not apply to kind `{}`", p.kind)))
            } else {
                Ok(())
            }
        };
        let kind = match p.kind.as_str() {
            "af_packet" => {
                only("queue", p.queue.is_some())?;
                only("path", p.path.is_some())?;
                only("write", p.write.is_some())?;
                only("rate", p.rate.is_some())?;
                let iface = p
                    .iface
                    .as_deref()
                    .ok_or_else(|| bad("needs `iface = \"NAME\"`".into()))?;
                if iface.is_empty() || iface.len() > 15 || iface.contains(['/', ' ']) {
                    return Err(bad(format!("`{iface}` is not an interface name")));
                }
                let mut cfg = AfPacketConfig::new(iface);
                cfg.fanout = p.fanout;
                cfg.promisc = p.promisc.unwrap_or(true);
                if let Some(t) = &p.tx {
                    cfg.tx = t.parse().map_err(|e: String| bad(format!("`tx`: {e}")))?;
                }
                if let Some(r) = &p.rx {
                    cfg.rx = r.parse().map_err(|e: String| bad(format!("`rx`: {e}")))?;
                }
                PortKind::AfPacket(cfg)
            }
            "pcap" => {
                only("iface", p.iface.is_some())?;
                only("fanout", p.fanout.is_some())?;
                only("promisc", p.promisc.is_some())?;
                only("queue", p.queue.is_some())?;
                only("tx", p.tx.is_some())?;
                only("rx", p.rx.is_some())?;
                if p.path.is_none() && p.write.is_none() {
                    return Err(bad(
                        "needs `path` (a capture to replay) or `write` (a file to record to)"
                            .into(),
                    ));
                }
                let rate = match &p.rate {
                    None => Rate::Top,
                    Some(r) => r.parse().map_err(|e: String| bad(format!("`rate`: {e}")))?,
                };
                PortKind::Pcap {
                    read: p.path.as_deref().map(|x| c.resolve(x)),
                    write: p.write.as_deref().map(|x| c.resolve(x)),
                    rate,
                }
            }
            "af_xdp" => {
                for (what, set) in [
                    ("path", p.path.is_some()),
                    ("write", p.write.is_some()),
                    ("rate", p.rate.is_some()),
                    ("fanout", p.fanout.is_some()),
                    ("promisc", p.promisc.is_some()),
                    ("tx", p.tx.is_some()),
                ] {
                    only(what, set)?;
                }
                let iface = p
                    .iface
                    .as_deref()
                    .ok_or_else(|| bad("needs `iface = \"NAME\"`".into()))?;
                if iface.is_empty() || iface.len() > 15 || iface.contains(['/', ' ']) {
                    return Err(bad(format!("`{iface}` is not an interface name")));
                }
                // One XDP program per interface: a second port there would replace it.
                if out
                    .iter()
                    .any(|q| matches!(&q.kind, PortKind::AfXdp(x) if x.iface == iface))
                {
                    return Err(bad(format!(
                        "interface `{iface}` already has an af_xdp port (one per interface)"
                    )));
                }
                let mut cfg = AfXdpConfig::new(iface);
                cfg.queue = p.queue.unwrap_or(0);
                if let Some(r) = &p.rx {
                    cfg.rx = r.parse().map_err(|e: String| bad(format!("`rx`: {e}")))?;
                }
                PortKind::AfXdp(cfg)
            }
            k => return Err(bad(format!("unknown kind `{k}` (kinds: {KINDS})"))),
        };
        let aggregate = match (p.aggregate, p.aggregate_size) {
            (Some(true), size) => {
                let n = size.map_or(aggregate::DEFAULT_SIZE, |n| n as usize);
                if !(aggregate::MIN_SIZE..=aggregate::MAX_SIZE).contains(&n) {
                    return Err(bad(format!(
                        "`aggregate_size = {n}` is out of range ({}-{})",
                        aggregate::MIN_SIZE,
                        aggregate::MAX_SIZE
                    )));
                }
                Some(n)
            }
            (_, Some(_)) => return Err(bad("`aggregate_size` needs `aggregate = true`".into())),
            _ => None,
        };
        let mut kind = kind;
        // PA-Flow: the aggregating port keeps received frames across `recv` calls while
        // it unpacks them: views of the ring (or UMEM) would outlive the memory they
        // point into, so its live port copies.
        match (aggregate, &mut kind) {
            (Some(_), PortKind::AfPacket(c)) => c.rx = RxMode::Copy,
            (Some(_), PortKind::AfXdp(c)) => c.rx = RxMode::Copy,
            _ => {}
        }
        let views = p.aggregate_views == Some(true);
        if views && aggregate.is_none() {
            return Err(bad("`aggregate_views` needs `aggregate = true`".into()));
        }
        out.push(PortSpec {
            name: p.name.clone(),
            kind,
            aggregate,
            views,
        });
    }
    if out.len() > usize::from(u16::MAX - 2) {
        return Err(c.invalid("too many ports"));
    }
    Ok(out)
}

/// Checks that live ports can be opened here: the interface exists and we may open
/// AF_PACKET sockets. One line saying what to do otherwise.
pub fn probe(specs: &[PortSpec]) -> Result<(), String> {
    for s in specs {
        if let PortKind::AfPacket(c) = &s.kind {
            af_packet::probe(&c.iface).map_err(|e| format!("port `{}`: {e}", s.name))?;
            mtu_fits(s, &c.iface, "af_packet")?;
        }
        if let PortKind::AfXdp(c) = &s.kind {
            af_xdp::probe(&c.iface).map_err(|e| format!("port `{}`: {e}", s.name))?;
            mtu_fits(s, &c.iface, "af_xdp")?;
        }
    }
    Ok(())
}

/// An aggregated frame must pass the interface: refused at start rather than lost.
fn mtu_fits(s: &PortSpec, iface: &str, kind: &str) -> Result<(), String> {
    let Some(size) = s.aggregate else {
        return Ok(());
    };
    // AF_PACKET's send staging and AF_XDP's largest send both take frames up to 9,234 B
    // (`TX_FRAME` in io/af_packet.rs, `TX_MAX` in io/af_xdp.rs); larger aggregates
    // would all be tx errors.
    const LIVE_TX_FRAME: usize = 9216 + 18;
    if size > LIVE_TX_FRAME {
        return Err(format!(
            "port `{}`: aggregate_size {size} B is more than an {kind} port sends ({LIVE_TX_FRAME} B): set `aggregate_size = {LIVE_TX_FRAME}` or less",
            s.name
        ));
    }
    let path = format!("/sys/class/net/{iface}/mtu");
    let Some(mtu) = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| t.trim().parse::<usize>().ok())
    else {
        return Ok(());
    };
    if size > mtu + 14 {
        return Err(format!(
            "port `{}`: aggregate_size {size} B is more than {}'s MTU {mtu} allows ({} B): raise it (`ip link set {} mtu {}`) or set `aggregate_size = {}`",
            s.name,
            iface,
            mtu + 14,
            iface,
            size - 14,
            (mtu + 14).max(aggregate::MIN_SIZE)
        ));
    }
    Ok(())
}

/// The file header pcap outputs get: the first replayed capture's (so a pcap → pcap run
/// writes its input back byte for byte), else Ethernet with µs times, as `tcpdump -w`.
pub fn output_header(specs: &[PortSpec]) -> anyhow::Result<PcapHeader> {
    for s in specs {
        if let PortKind::Pcap { read: Some(r), .. } = &s.kind {
            return Ok(Trace::open(r)?.header());
        }
    }
    Ok(PcapHeader::new(1, false))
}

/// Opens every port; `rate` overrides the pcap ports' pace.
pub fn open(specs: &[PortSpec], rate: Option<Rate>) -> anyhow::Result<Vec<Box<dyn Port>>> {
    let header = output_header(specs)?;
    if let Some(s) = specs.iter().find(|s| s.aggregate.is_some()) {
        // Aggregated frames are Ethernet frames; in a file of another link type they
        // would be read back as something else.
        anyhow::ensure!(
            header.linktype == 1,
            "port `{}`: `aggregate = true` needs Ethernet frames, but the replayed capture has link type {}",
            s.name,
            header.linktype
        );
    }
    let mut v: Vec<Box<dyn Port>> = Vec::with_capacity(specs.len());
    for s in specs {
        let e = |e: String| anyhow::anyhow!("port `{}`: {e}", s.name);
        let port: Box<dyn Port> = match &s.kind {
            PortKind::AfPacket(c) => {
                mtu_fits(s, &c.iface, "af_packet").map_err(|x| anyhow::anyhow!("{x}"))?;
                Box::new(AfPacket::open(c).map_err(|x| e(x.to_string()))?)
            }
            PortKind::AfXdp(c) => {
                mtu_fits(s, &c.iface, "af_xdp").map_err(|x| anyhow::anyhow!("{x}"))?;
                let x = AfXdp::open(c).map_err(|x| e(x.to_string()))?;
                // PA-Flow: an aggregate larger than one UMEM frame needs scatter-gather.
                if let Some(size) = s.aggregate.filter(|&n| n > af_xdp::ONE_FRAME) {
                    anyhow::ensure!(
                        x.scatter_gather(),
                        "port `{}`: this kernel has no AF_XDP scatter-gather (XDP_USE_SG, 6.6+), so af_xdp sends at most {} B: set `aggregate_size = {}` or less (not {size})",
                        s.name,
                        af_xdp::ONE_FRAME,
                        af_xdp::ONE_FRAME
                    );
                }
                Box::new(x)
            }
            PortKind::Pcap {
                read,
                write,
                rate: r,
            } => {
                let p = PcapPort::open(
                    read.as_deref(),
                    write.as_deref(),
                    rate.unwrap_or(*r),
                    header,
                )
                .map_err(|x| e(x.to_string()))?;
                Box::new(p)
            }
        };
        v.push(match s.aggregate {
            Some(size) => Box::new(Aggregating::new(port, size).views(s.views)),
            None => port,
        });
    }
    Ok(v)
}

/// Opens every port once per worker, for a live run on `workers` threads: AF_PACKET
/// ports join one fanout group (the file's `fanout`, else one of this process's), so
/// the kernel spreads flows over the workers' sockets by hash; AF_XDP port `queue = Q`
/// gives worker `w` its own socket on queue `Q + w`, all behind the one XDP program of
/// the interface. pcap ports would replay or write once per worker: refused.
pub fn open_workers(specs: &[PortSpec], workers: usize) -> anyhow::Result<Vec<Vec<Box<dyn Port>>>> {
    if let Some(s) = specs.iter().find(|s| !s.is_live() || s.aggregate.is_some()) {
        anyhow::bail!(
            "port `{}`: with several workers every port must be af_packet or af_xdp without `aggregate` (set `workers = 1`)",
            s.name
        );
    }
    let group = (std::process::id() & 0x7fff) as u16;
    let mut progs: Vec<Option<std::sync::Arc<af_xdp::XdpProgram>>> = vec![None; specs.len()];
    let mut out = Vec::with_capacity(workers);
    for w in 0..workers {
        let mut v: Vec<Box<dyn Port>> = Vec::with_capacity(specs.len());
        for (i, s) in specs.iter().enumerate() {
            let e = |e: String| anyhow::anyhow!("port `{}`: {e}", s.name);
            v.push(match &s.kind {
                PortKind::AfPacket(c) => {
                    let mut c = c.clone();
                    // A fanout group serves one interface: one group per port.
                    c.fanout = Some(c.fanout.unwrap_or(group.wrapping_add(i as u16)));
                    Box::new(AfPacket::open(&c).map_err(|x| e(x.to_string()))?)
                }
                PortKind::AfXdp(c) => {
                    let mut c = c.clone();
                    c.queue += w as u32;
                    let have = af_xdp::rx_queues(&c.iface).unwrap_or(1);
                    if c.queue >= have {
                        return Err(e(format!(
                            "{workers} workers need queues {}..={} of {}, which has {have}: give it more (`ethtool -L {} combined {workers}`; veth: `numrxqueues {workers} numtxqueues {workers}`) or fewer workers",
                            c.queue - w as u32,
                            c.queue,
                            c.iface,
                            c.iface
                        )));
                    }
                    let p = match &progs[i] {
                        Some(prog) => AfXdp::open_on(&c, prog.clone()),
                        None => AfXdp::open(&c),
                    }
                    .map_err(|x| e(x.to_string()))?;
                    progs[i].get_or_insert_with(|| p.program());
                    Box::new(p)
                }
                PortKind::Pcap { .. } => return Err(e("a pcap port runs on one worker".into())),
            });
        }
        out.push(v);
    }
    Ok(out)
}
