//! L7 load balancer on the splicer: a connection to the VIP is answered by the splicer
//! (the VIP's SYN-ACK in the trace carries the splicer's ISN), its first request is read
//! from the client stream, and a backend is chosen by the request's Host header or URI
//! prefix. From the packet completing that request on, the connection is handed to the
//! backend:
//!
//! - client packets get the backend as destination and their acknowledgement numbers
//!   moved into the backend's numbering;
//! - packets from the backend to the client (a second leg: backend address, same ports)
//!   get the VIP as source and their sequence numbers moved into the splicer's numbering.
//!
//! The backend leg is the splicer's connection to the backend, opened with the client's
//! own ISN (so client sequence numbers pass unchanged); the backend's ISN on it is `isn`
//! of the backend's config, since a trace replay cannot open connections (a live splicer
//! learns it from the backend's SYN-ACK). Checksums are patched incrementally.
//! Limits: request bytes in segments before the one that completes the first request
//! pass to the VIP unchanged; a request not complete within 4 KiB goes to the default.

use std::net::IpAddr;

use hashbrown::HashMap;

use super::l4_lb::vip;
use super::rewrite::{set_addr, Side};
use crate::flow::Hasher;
use crate::nfs::params::{ParamDoc, ParamError, Params};
use crate::packet::Fields;
use crate::stack::{App, Ctx, Event, Kind, Kinds, Level, Splice};

const MAX_REQUEST: usize = 4096;

#[derive(Clone, Debug)]
struct BackendCfg {
    name: String,
    addr: IpAddr,
    isn: u32,
}

#[derive(Clone, Debug)]
enum Match {
    Host(String),
    Prefix(String),
}

#[derive(Clone, Default)]
struct Flow {
    /// 1 = client connection to the VIP, 2 = a backend leg.
    role: u8,
    /// Backend index + 1 once bound.
    backend: u16,
    front_isn: Option<u32>,
    req: Vec<u8>,
}

pub struct L7Lb {
    vip: IpAddr,
    backends: Vec<BackendCfg>,
    rules: Vec<(Match, u16)>,
    default: u16,
    flows: Vec<Flow>,
    /// (client address, client port, backend index) → the client's flow, for legs.
    legs: HashMap<(IpAddr, u16, u16), u32, Hasher>,
    bound: Vec<u64>,
    rewritten: u64,
}

impl L7Lb {
    pub const PARAMS: &'static [ParamDoc] = &[
        ParamDoc {
            name: "vip",
            ty: "IP address",
            default: "required",
            doc: "connections to this address are spliced",
        },
        ParamDoc {
            name: "backends",
            ty: "list of { name, addr, isn? }",
            default: "required",
            doc: "backends; isn = the backend's initial sequence number on the splicer's leg (default 0)",
        },
        ParamDoc {
            name: "rules",
            ty: "list of { host | prefix, backend }",
            default: "[]",
            doc: "first match wins: Host header equal to `host` (case-insensitive, port ignored), or URI starting with `prefix`",
        },
        ParamDoc {
            name: "default",
            ty: "backend name",
            default: "the first backend",
            doc: "backend when no rule matches",
        },
    ];

    pub fn from_params(p: &mut Params) -> Result<L7Lb, ParamError> {
        let v = vip(p)?;
        let mut backends = Vec::new();
        let list = p
            .value("backends")
            .and_then(|b| b.as_array())
            .ok_or_else(|| p.err("`backends` is required: a list of { name, addr, isn? }"))?;
        for (i, b) in list.iter().enumerate() {
            let t = b
                .as_table()
                .ok_or_else(|| p.err(format!("`backends` item {} is not a table", i + 1)))?;
            let get = |k: &str| t.get(k).and_then(|x| x.as_str());
            let name = get("name").ok_or_else(|| {
                p.err(format!(
                    "`backends` item {}: `name` (string) is required",
                    i + 1
                ))
            })?;
            let addr: IpAddr = get("addr").and_then(|a| a.parse().ok()).ok_or_else(|| {
                p.err(format!(
                    "`backends` item {}: `addr` must be an IP address",
                    i + 1
                ))
            })?;
            if addr.is_ipv4() != v.is_ipv4() {
                return Err(p.err(format!(
                    "`backends` item {}: {addr} is not of the VIP's family",
                    i + 1
                )));
            }
            let isn = match t.get("isn") {
                None => 0,
                Some(toml::Value::Integer(n)) if (0..=u32::MAX as i64).contains(n) => *n as u32,
                Some(_) => {
                    return Err(p.err(format!(
                        "`backends` item {}: `isn` must be 0..=4294967295",
                        i + 1
                    )))
                }
            };
            if let Some(k) = t
                .keys()
                .find(|k| !["name", "addr", "isn"].contains(&k.as_str()))
            {
                return Err(p.err(format!("`backends` item {}: unknown key `{k}`", i + 1)));
            }
            backends.push(BackendCfg {
                name: name.to_string(),
                addr,
                isn,
            });
        }
        if backends.is_empty() || backends.len() > 1000 {
            return Err(p.err("`backends` needs 1..=1000 backends"));
        }
        let find = |p: &Params, n: &str| -> Result<u16, ParamError> {
            backends
                .iter()
                .position(|b| b.name == n)
                .map(|i| i as u16)
                .ok_or_else(|| p.err(format!("no backend named `{n}`")))
        };
        let mut rules = Vec::new();
        if let Some(list) = p.value("rules") {
            let list = list
                .as_array()
                .ok_or_else(|| p.err("`rules` must be a list of tables"))?;
            for (i, r) in list.iter().enumerate() {
                let t = r
                    .as_table()
                    .ok_or_else(|| p.err(format!("`rules` item {} is not a table", i + 1)))?;
                let be = t.get("backend").and_then(|x| x.as_str()).ok_or_else(|| {
                    p.err(format!("`rules` item {}: `backend` is required", i + 1))
                })?;
                let m = match (
                    t.get("host").and_then(|x| x.as_str()),
                    t.get("prefix").and_then(|x| x.as_str()),
                ) {
                    (Some(h), None) => Match::Host(h.to_ascii_lowercase()),
                    (None, Some(pf)) => Match::Prefix(pf.to_string()),
                    _ => {
                        return Err(p.err(format!(
                            "`rules` item {}: give exactly one of `host` or `prefix`",
                            i + 1
                        )))
                    }
                };
                if let Some(k) = t
                    .keys()
                    .find(|k| !["host", "prefix", "backend"].contains(&k.as_str()))
                {
                    return Err(p.err(format!("`rules` item {}: unknown key `{k}`", i + 1)));
                }
                rules.push((m, find(p, be)?));
            }
        }
        let default = match p.table_str("default")? {
            None => 0,
            Some(n) => find(p, n)?,
        };
        Ok(L7Lb {
            vip: v,
            bound: vec![0; backends.len()],
            backends,
            rules,
            default,
            flows: Vec::new(),
            legs: HashMap::with_capacity_and_hasher(4096, Hasher::default()),
            rewritten: 0,
        })
    }

    /// Connections handed to each backend.
    pub fn bound(&self) -> &[u64] {
        &self.bound
    }

    fn flow(&mut self, f: u32) -> &mut Flow {
        let i = f as usize;
        if i >= self.flows.len() {
            self.flows.resize(i + 1, Flow::default());
        }
        &mut self.flows[i]
    }

    /// The backend for a complete request head.
    fn choose(&self, head: &[u8]) -> u16 {
        let (uri, host) = parse_head(head);
        for (m, b) in &self.rules {
            let hit = match m {
                Match::Host(h) => host.is_some_and(|x| x.eq_ignore_ascii_case(h.as_bytes())),
                Match::Prefix(pf) => uri.is_some_and(|u| u.starts_with(pf.as_bytes())),
            };
            if hit {
                return *b;
            }
        }
        self.default
    }

    fn bind(&mut self, ev: &Event, cx: &mut Ctx<'_>, b: u16) {
        let Some(c) = cx.conn(ev.flow) else { return };
        let key = c.key;
        let front = self.flow(ev.flow);
        front.backend = b + 1;
        let f_isn = front.front_isn.unwrap_or(0);
        let be = &self.backends[b as usize];
        let s = Splice::server_isns(f_isn, be.isn);
        cx.splice(ev, ev.flow, s);
        self.legs.insert((key.src_ip(), key.sport, b), ev.flow);
        self.bound[b as usize] += 1;
        let addr = be.addr;
        if let Some(p) = cx.packet(ev) {
            self.rewritten += u64::from(set_addr(p, Side::Dst, addr));
        }
    }
}

/// The request URI and the Host header's name (port dropped) of an HTTP request head.
fn parse_head(h: &[u8]) -> (Option<&[u8]>, Option<&[u8]>) {
    let mut lines = h
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let uri = lines.next().and_then(|l| l.split(|&b| b == b' ').nth(1));
    let mut host = None;
    for l in lines {
        if l.len() > 5 && l[..5].eq_ignore_ascii_case(b"host:") {
            let v = l[5..].trim_ascii();
            let v = v.split(|&b| b == b':').next().unwrap_or(v);
            host = Some(v);
            break;
        }
    }
    (uri, host)
}

impl App for L7Lb {
    fn name(&self) -> &str {
        "l7_lb"
    }
    fn level(&self) -> Level {
        Level::Splicer
    }
    fn kinds(&self) -> Kinds {
        Kinds::of(&[Kind::FlowStart, Kind::TcpPacket, Kind::Data, Kind::FlowEnd])
    }
    fn writes(&self) -> Fields {
        Fields::IP_SRC | Fields::IP_DST | Fields::TCP_SEQ
    }
    fn on_event(&mut self, ev: &Event, cx: &mut Ctx<'_>) {
        match ev.kind {
            Kind::FlowStart => {
                let Some(c) = cx.conn(ev.flow) else { return };
                let key = c.key;
                let mut fl = std::mem::take(self.flow(ev.flow));
                fl.req.clear();
                fl.role = 0;
                fl.backend = 0;
                fl.front_isn = None;
                if key.dst_ip() == self.vip {
                    fl.role = 1;
                } else {
                    // A backend leg: one side is a backend, the other a bound client.
                    for (side_b, side_c) in [
                        (key.src_ip(), (key.dst_ip(), key.dport)),
                        (key.dst_ip(), (key.src_ip(), key.sport)),
                    ] {
                        let Some(b) = self.backends.iter().position(|x| x.addr == side_b) else {
                            continue;
                        };
                        if let Some(&front) = self.legs.get(&(side_c.0, side_c.1, b as u16)) {
                            fl.role = 2;
                            fl.backend = b as u16 + 1;
                            let fi = self
                                .flows
                                .get(front as usize)
                                .and_then(|x| x.front_isn)
                                .unwrap_or(0);
                            let s = Splice::server_isns(fi, self.backends[b].isn);
                            // Dir 1 of the client flow is "from the server"; here the
                            // backend may be either side of the leg's key.
                            let s = if key.src_ip() == side_b {
                                s.reversed()
                            } else {
                                s
                            };
                            cx.splice(ev, ev.flow, s);
                            break;
                        }
                    }
                }
                // Only a client connection's first request is read; a leg or a
                // connection not to the VIP needs no data (and the latter no events).
                match fl.role {
                    0 => cx.set_subscriptions(ev.flow, Kinds::NONE),
                    2 => cx.unsubscribe(ev.flow, Kind::Data),
                    _ => {}
                }
                *self.flow(ev.flow) = fl;
            }
            Kind::TcpPacket => {
                let (role, backend, has_isn) = {
                    let f = self.flow(ev.flow);
                    (f.role, f.backend, f.front_isn.is_some())
                };
                if role == 1 && ev.dir == 1 && !has_isn && ev.info as u16 & 0x12 == 0x12 {
                    // The splicer's SYN-ACK: its ISN is the numbering the client sees.
                    let Some(p) = cx.packet(ev) else { return };
                    let l = p.layers();
                    let o = l.l4_off as usize + 4;
                    if let Some(b) = p.data().get(o..o + 4) {
                        self.flow(ev.flow).front_isn =
                            Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
                    }
                    return;
                }
                if backend == 0 {
                    return;
                }
                let (side, to) = match (role, ev.dir) {
                    (1, 0) => (Side::Dst, self.backends[backend as usize - 1].addr),
                    (2, _) => {
                        let Some(p) = cx.packet(ev) else { return };
                        if super::rewrite::addr(p, Side::Src)
                            != Some(self.backends[backend as usize - 1].addr)
                        {
                            return;
                        }
                        (Side::Src, self.vip)
                    }
                    _ => return,
                };
                if let Some(p) = cx.packet(ev) {
                    self.rewritten += u64::from(set_addr(p, side, to));
                }
            }
            Kind::Data if ev.dir == 0 => {
                let f = self.flow(ev.flow);
                if f.role != 1 || f.backend != 0 {
                    cx.unsubscribe(ev.flow, Kind::Data);
                    return;
                }
                let mut req = std::mem::take(&mut f.req);
                let b = cx.bytes(ev);
                let room = MAX_REQUEST - req.len().min(MAX_REQUEST);
                req.extend_from_slice(&b[..b.len().min(room)]);
                let done = req.windows(4).any(|w| w == b"\r\n\r\n");
                if done || req.len() >= MAX_REQUEST {
                    let be = if done {
                        self.choose(&req)
                    } else {
                        self.default
                    };
                    self.bind(ev, cx, be);
                    cx.unsubscribe(ev.flow, Kind::Data);
                }
                self.flow(ev.flow).req = req;
            }
            Kind::FlowEnd => {
                let f = self.flow(ev.flow);
                if f.role == 1 && f.backend != 0 {
                    let b = f.backend - 1;
                    if let Some(c) = cx.conn(ev.flow) {
                        self.legs.remove(&(c.key.src_ip(), c.key.sport, b));
                    }
                }
            }
            _ => {}
        }
    }
    fn stats(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("l7_lb_bound", self.bound.iter().sum()),
            ("l7_lb_rewritten", self.rewritten),
        ]
    }

    /// Per flow its record and the first request's bytes (grown up to twice the cap);
    /// the legs table, one entry per client flow at most.
    fn memory(&self, flows: usize) -> usize {
        use crate::flow::footprint::{grown_vec_bytes, hash_table_bytes};
        grown_vec_bytes::<Flow>(flows)
            .saturating_add(flows.saturating_mul(2 * MAX_REQUEST))
            .saturating_add(hash_table_bytes::<((IpAddr, u16, u16), u32)>(
                flows.max(4096).saturating_mul(2),
            ))
    }
}
