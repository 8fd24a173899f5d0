//! L4 load balancer on the monitor level: a connection to the VIP gets a backend from a
//! hash of its 5-tuple when it starts and keeps it (pinned) until it ends. Client packets
//! get the backend as destination; packets coming back from the backend get the VIP as
//! source (replies already from the VIP, as in a capture taken in front of it, pass as
//! they are). Checksums are patched incrementally.

use std::hash::BuildHasher;
use std::net::IpAddr;

use super::rewrite::{addr, set_addr, Side};
use crate::nfs::params::{ParamDoc, ParamError, Params};
use crate::packet::Fields;
use crate::stack::{App, Ctx, Event, Kind, Kinds, Level};

pub struct L4Lb {
    vip: IpAddr,
    backends: Vec<IpAddr>,
    /// Backend index + 1 per flow id; 0 = not balanced.
    pinned: Vec<u16>,
    per_backend: Vec<u64>,
    rewritten: u64,
}

/// Parses a list of addresses of the VIP's family.
pub(super) fn addr_list(
    p: &mut Params,
    key: &'static str,
    vip: IpAddr,
) -> Result<Vec<IpAddr>, ParamError> {
    let Some(v) = p.str_list(key)? else {
        return Err(p.err(format!(
            "`{key}` is required, e.g. {key} = [\"10.1.0.1\", \"10.1.0.2\"]"
        )));
    };
    let mut out = Vec::new();
    for s in v {
        let a: IpAddr = s
            .parse()
            .map_err(|_| p.err(format!("`{key}`: \"{s}\" is not an IP address")))?;
        if a.is_ipv4() != vip.is_ipv4() {
            return Err(p.err(format!("`{key}`: {a} is not of the VIP's family")));
        }
        out.push(a);
    }
    if out.is_empty() || out.len() > u16::MAX as usize - 1 {
        return Err(p.err(format!("`{key}` needs 1..65534 addresses")));
    }
    Ok(out)
}

pub(super) fn vip(p: &mut Params) -> Result<IpAddr, ParamError> {
    match p.table_str("vip")? {
        None => Err(p.err("`vip` is required, e.g. vip = \"203.0.113.10\"")),
        Some(s) => s
            .parse()
            .map_err(|_| p.err(format!("`vip` = \"{s}\" is not an IP address"))),
    }
}

impl L4Lb {
    pub const PARAMS: &'static [ParamDoc] = &[
        ParamDoc {
            name: "vip",
            ty: "IP address",
            default: "required",
            doc: "connections to this address are balanced",
        },
        ParamDoc {
            name: "backends",
            ty: "list of IP addresses",
            default: "required",
            doc: "backend addresses (the VIP's family)",
        },
    ];

    pub fn new(vip: IpAddr, backends: Vec<IpAddr>) -> L4Lb {
        L4Lb {
            per_backend: vec![0; backends.len()],
            vip,
            backends,
            pinned: Vec::new(),
            rewritten: 0,
        }
    }

    pub fn from_params(p: &mut Params) -> Result<L4Lb, ParamError> {
        let v = vip(p)?;
        let b = addr_list(p, "backends", v)?;
        Ok(L4Lb::new(v, b))
    }

    /// Connections given to each backend so far.
    pub fn per_backend(&self) -> &[u64] {
        &self.per_backend
    }

    fn slot(&mut self, f: u32) -> &mut u16 {
        let i = f as usize;
        if i >= self.pinned.len() {
            self.pinned.resize(i + 1, 0);
        }
        &mut self.pinned[i]
    }
}

/// A hash of the connection's 5-tuple that is the same on every run (fixed seed), so a
/// replay balances the same way.
pub(super) fn tuple_hash(k: &crate::flow::FlowKey) -> u64 {
    foldhash::fast::FixedState::with_seed(0x6c62_6c62).hash_one(crate::flow::WideKey(*k))
}

impl App for L4Lb {
    fn name(&self) -> &str {
        "l4_lb"
    }
    fn level(&self) -> Level {
        Level::Monitor
    }
    fn kinds(&self) -> Kinds {
        Kinds::of(&[Kind::FlowStart, Kind::TcpPacket])
    }
    fn writes(&self) -> Fields {
        Fields::IP_SRC | Fields::IP_DST
    }
    fn on_event(&mut self, ev: &Event, cx: &mut Ctx<'_>) {
        match ev.kind {
            Kind::FlowStart => {
                let Some(c) = cx.conn(ev.flow) else { return };
                let b = if c.key.dst_ip() == self.vip {
                    let i = (tuple_hash(&c.key) % self.backends.len() as u64) as usize;
                    self.per_backend[i] += 1;
                    i as u16 + 1
                } else {
                    0
                };
                *self.slot(ev.flow) = b;
            }
            Kind::TcpPacket => {
                let b = *self.slot(ev.flow);
                if b == 0 {
                    return;
                }
                let be = self.backends[b as usize - 1];
                let vip = self.vip;
                let Some(p) = cx.packet(ev) else { return };
                let done = if ev.dir == 0 {
                    set_addr(p, Side::Dst, be)
                } else if addr(p, Side::Src) == Some(be) {
                    set_addr(p, Side::Src, vip)
                } else {
                    false
                };
                self.rewritten += u64::from(done);
            }
            _ => {}
        }
    }
    fn stats(&self) -> Vec<(&'static str, u64)> {
        vec![("l4_lb_rewritten", self.rewritten)]
    }

    fn memory(&self, flows: usize) -> usize {
        crate::flow::footprint::grown_vec_bytes::<u16>(flows)
    }
}
