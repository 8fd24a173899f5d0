//! `ids`: the IDS engine ([`crate::nfs::ids`]) as an app on the stack. It runs every rule
//! kind on one path:
//! - packet rules (IP, ICMP, UDP, header-only TCP, IP-only) on the stack's packet events,
//!   as do stream rules on TCP packets whose bytes the stack does not reassemble;
//! - stream and HTTP rules on tracked TCP flows' reassembled bytes (data events).
//!
//! Alerts are published as `IdsAlert` events (info = sid, bytes = msg), counted per rule
//! (`alerts`), and written as EVE JSON (`eve`) with flow records that carry the DPI label.
//! Inline (`inline = true`, the default), a `drop`/`reject` rule's match drops the packet
//! and every later packet of its flow, counted per rule.
//!
//! Subscriptions, after the Microboxes paper's Figure 7c:
//! - `only = ["HTTP", …]` (dynamic): a flow's data is subscribed to only once a DPI app
//!   before this one labels it with one of these protocols;
//! - without `only`: every flow's data from its start.
//!
//! Either way the IDS decides it has seen enough of a flow's bytes — and unsubscribes from
//! its data — once both directions passed `depth` bytes (Suricata's
//! `stream.reassembly.depth`, 1 MiB by default).

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::flow::{FlowKey, TimedTable, WideKey};
use crate::nfs::dpi::AppProto;
use crate::nfs::ids::{
    decode, suricata_makes_flow, Alert, Decoded, Eve, EveFlow, EveTuple, Ids, IdsConfig, IdsFlow,
    Ip, PacketInfo, PktFields, RuleSet, TlsRecords, Vars,
};
use crate::nfs::params::{ParamDoc, ParamError, Params};
use crate::packet::wire::tcp::flags;
use crate::packet::Layers;
use crate::stack::tracker::tracked_layers;
use crate::stack::{App, Ctx, EndReason, Event, Kind, Kinds, Level, TcpState, NO_FLOW, NO_PKT};

use super::dpi_app::proto_id;

/// Flows inspected at once by default: about a GiB at the default HTTP limits, in the
/// range of Suricata's stream and HTTP memcaps.
const DEFAULT_INSPECT_FLOWS: usize = 2048;

/// Drop rules counted under a reason of their own (the rest under the app's first).
const MAX_DROP_REASONS: usize = 128;

/// What the app keeps of a tracked TCP connection (indexed by the stack's flow id).
#[derive(Clone, Copy, Default)]
struct Conn {
    /// The stack's state as of the last packet event delivered ([`TcpState`] as u8).
    state: u8,
    seen: [bool; 2],
    /// Some packet of the direction carried payload.
    payload: [bool; 2],
    pkts: [u64; 2],
    bytes: [u64; 2],
    start_ns: u64,
    last_ns: u64,
    id: u64,
    /// `DpiResult` info (0 = none yet).
    app: u32,
    alerted: bool,
    /// 1 + index of the drop rule that dropped the flow; 0 = not dropped.
    dropped_by: u32,
    /// TLS records, to see application data start (see `encrypted`).
    tls: TlsRecords,
    /// 1 + direction of the first TLS application-data record, until the other side
    /// acknowledges its header (sequence number `tls_ack`) and so makes the flow
    /// `encrypted`; 0 = none yet.
    tls_app: u8,
    tls_ack: u32,
    /// Suricata parses a direction's bytes when the other side acknowledges them; once
    /// its TLS parser has seen application data, no payload of the flow is inspected.
    encrypted: bool,
    /// Per direction: how far (offset in its stream) the other side acknowledged it.
    acked: [u64; 2],
    /// Suricata reversed the flow (app-layer.c: a mid-stream pickup whose first bytes
    /// match the other side's detection pattern, the server's `HTTP/`): the stack's
    /// direction 0 is then the one to the client.
    swapped: bool,
}

/// A flow the stack does not track (UDP, ICMP, other IP, untracked TCP), by canonical key.
#[derive(Clone, Copy)]
struct Loose {
    /// The canonical key's source is the flow's client.
    client_is_src: bool,
    seen: [bool; 2],
    id: u64,
    dropped_by: u32,
    last_ns: u64,
    /// A tracked TCP flow remembered after its close (Suricata's `tcp.closed` timeout).
    closed: bool,
}

/// Suricata's default flow timeouts (`flow-timeouts`): a flow seen one way only ends
/// after 30 s idle (TCP 60 s), one seen both ways after 300 s; a closed TCP flow after
/// 60 s (`CLOSED_TIMEOUT_NS`).
const CLOSED_TIMEOUT_NS: u64 = 60_000_000_000;

/// How far past the bytes delivered an ACK is believed: the largest window a receiver
/// advertises without window scaling (the stack does not track the scale). Any bound
/// from 2,920 to 65,535 bytes gives the same agreement figures; 1 MiB gives 40 more
/// `d3` alerts on the merged trace than Suricata (docs/history/ids.md, session 20).
const ACK_WINDOW: u64 = 65_535;

fn loose_timeout_ns(established: bool, tcp: bool) -> u64 {
    const S: u64 = 1_000_000_000;
    match (established, tcp) {
        (true, _) => 300 * S,
        (false, true) => 60 * S,
        (false, false) => 30 * S,
    }
}

/// Whose flow a packet is, as Suricata sees it.
#[derive(Clone, Copy, PartialEq)]
enum Owner {
    /// A TCP flow the stack tracks.
    Stack,
    /// An untracked flow followed by 5-tuple.
    Loose,
    /// No flow (see [`suricata_makes_flow`]).
    NoFlow,
    /// An ICMP error joining the quoted packet's untracked flow ([`IdsApp::join_quoted`]).
    Quoted((bool, bool, bool, u32, u64)),
}

/// Suricata keys an ICMP flow by its addresses and the message's type with its
/// counterpart (flow-hash.c `CmpAddrsAndICMPTypes`), not by the echo identifier: pings
/// with new identifiers between two hosts are one flow there.
fn icmp_flow_key(key: &mut FlowKey, icmp_type: u8) {
    let other = icmp_counterpart(key.proto, icmp_type);
    (key.sport, key.dport) = (u16::from(icmp_type), u16::from(other));
}

/// ICMPv4GetCounterpart / ICMPv6GetCounterpart: the answer's type of a request and the
/// reverse; 0 for a message without one.
fn icmp_counterpart(proto: u8, t: u8) -> u8 {
    let pairs: &[(u8, u8)] = if proto == 1 {
        &[(8, 0), (13, 14), (15, 16), (10, 9), (17, 18)]
    } else {
        &[
            (128, 129),
            (135, 136),
            (133, 134),
            (130, 131),
            (139, 140),
            (144, 145),
            (146, 147),
            (148, 149),
            (151, 152),
            (157, 158),
        ]
    };
    pairs
        .iter()
        .find_map(|&(a, b)| {
            if t == a {
                Some(b)
            } else if t == b {
                Some(a)
            } else {
                None
            }
        })
        .unwrap_or(0)
}

/// The 5-tuple of the IPv4 TCP or UDP packet an ICMPv4 error quotes (`b`: the bytes
/// after the ICMP header); None when cut short or of another protocol.
fn quoted_key(b: &[u8]) -> Option<FlowKey> {
    let ihl = usize::from(b.first()? & 0x0f) * 4;
    if b[0] >> 4 != 4 || ihl < 20 || !matches!(b.get(9)?, 6 | 17) {
        return None;
    }
    let ports = b.get(ihl..ihl + 4)?;
    let mut k = FlowKey {
        src: [0; 16],
        dst: [0; 16],
        sport: u16::from_be_bytes([ports[0], ports[1]]),
        dport: u16::from_be_bytes([ports[2], ports[3]]),
        proto: b[9],
        family: 4,
    };
    k.src[..4].copy_from_slice(&b[12..16]);
    k.dst[..4].copy_from_slice(&b[16..20]);
    Some(k)
}

/// A FIN or RST of a tracked flow whose end of direction is inspected after its bytes.
#[derive(Clone, Copy)]
struct PendingEnd {
    flow: u32,
    dir: u8,
}

pub struct IdsApp {
    ids: Ids,
    /// `DpiResult` ids that turn inspection on; empty = inspect every flow.
    only: Vec<u32>,
    depth: u64,
    inline: bool,
    /// Per stack flow id: the engine's stream state, while inspected.
    flows: Vec<Option<IdsFlow>>,
    /// Flows holding an [`IdsFlow`] now, and the most that may (`inspect_flows`).
    live: usize,
    inspect_flows: usize,
    seen_bytes: Vec<[u64; 2]>,
    conns: Vec<Conn>,
    loose: TimedTable<WideKey, Loose>,
    next_sweep_ns: u64,
    timeout_ns: u64,
    next_id: u64,
    pending: Option<PendingEnd>,
    alerts: Vec<Alert>,
    by_sid: BTreeMap<u32, u64>,
    /// Per rule index: its drop reason (0 = the app's own).
    drop_reason: Vec<u8>,
    drop_names: Vec<String>,
    dropped: Vec<u64>,
    out: Option<PathBuf>,
    /// The alerts file, created before the first packet ([`App::open_outputs`]).
    out_file: Option<std::fs::File>,
    /// The first failure writing the alerts or EVE file.
    out_error: Option<String>,
    eve_path: Option<PathBuf>,
    eve: Option<Eve>,
    eve_flows: bool,
    rules_loaded: u64,
    rules_skipped: u64,
    packets: u64,
    data_events: u64,
    inspected: u64,
    alerted: u64,
    loose_full: u64,
    /// Flows not inspected because `inspect_flows` were inspected already.
    inspect_full: u64,
}

impl IdsApp {
    pub const PARAMS: &'static [ParamDoc] = &[
        ParamDoc {
            name: "rules",
            ty: "string",
            default: "required (or rules_file)",
            doc: "Suricata/Snort rules, one per line (variables: Suricata's defaults)",
        },
        ParamDoc {
            name: "rules_file",
            ty: "path",
            default: "-",
            doc: "a rules file instead of `rules` (relative to the chain file's folder)",
        },
        ParamDoc {
            name: "only",
            ty: "list of DPI protocol names",
            default: "all flows",
            doc: "inspect a flow's bytes only once a DPI app before this one labels it so (dynamic subscription)",
        },
        ParamDoc {
            name: "depth",
            ty: "bytes",
            default: "1048576",
            doc: "per-direction bytes inspected before the flow is dropped from inspection; 0 = all",
        },
        ParamDoc {
            name: "alerts",
            ty: "path",
            default: "-",
            doc: "write `sid count` lines (alerts per rule) here at the end (relative to the chain file's folder)",
        },
        ParamDoc {
            name: "eve",
            ty: "path",
            default: "-",
            doc: "write EVE JSON here: alert records and flow records (relative to the chain file's folder)",
        },
        ParamDoc {
            name: "eve_flows",
            ty: "bool",
            default: "true",
            doc: "write flow records to `eve` too (false: alert records only)",
        },
        ParamDoc {
            name: "inline",
            ty: "bool",
            default: "true",
            doc: "drop/reject rules drop the matching packet and the rest of its flow; false = they only alert",
        },
        ParamDoc {
            name: "http_body_limit",
            ty: "bytes",
            default: "32768",
            doc: "HTTP body bytes inspected per message (libhtp's response-body-limit)",
        },
        ParamDoc {
            name: "decompress_layers",
            ty: "integer",
            default: "3",
            doc: "Content-Encoding layers undone (libhtp's response-body-decompress-layer-limit)",
        },
        ParamDoc {
            name: "inspect_flows",
            ty: "integer",
            default: "2048",
            doc: "most flows inspected at once, each holding up to two stream windows and two HTTP parsers' buffers (1..=1,048,576; later flows are counted as ids_inspect_full, not inspected)",
        },
        ParamDoc {
            name: "stream_chunk",
            ty: "bytes",
            default: "2560",
            doc: "stream rules inspect a direction's acknowledged bytes in chunks of at least this many, one alert per rule per chunk (Suricata's stream.reassembly.to{server,client}-chunk-size); 0 = every segment as it arrives",
        },
        ParamDoc {
            name: "flows",
            ty: "integer",
            default: "65536",
            doc: "most untracked flows (UDP, ICMP, …) followed at once for direction and IP-only rules",
        },
    ];

    pub fn from_params(p: &mut Params) -> Result<IdsApp, ParamError> {
        // Warnings name the rule's place: `FILE:LINE`, or `rules:LINE` for inline rules.
        let (text, origin) = match (p.table_str("rules")?, p.path("rules_file")?) {
            (Some(t), None) => (t.to_string(), "rules".to_string()),
            (None, Some(f)) => (
                crate::io::text_file::read_text(&f, crate::io::text_file::MAX_TEXT_FILE)
                    .map_err(|e| p.err(format!("rules_file `{}`: {e}", f.display())))?,
                f.display().to_string(),
            ),
            (Some(_), Some(_)) => return Err(p.err("give `rules` or `rules_file`, not both")),
            (None, None) => return Err(p.err("the ids app needs `rules` or `rules_file`")),
        };
        let mut only = Vec::new();
        for name in p.str_list("only")?.unwrap_or_default() {
            let Some(a) = AppProto::from_name(name) else {
                return Err(p.err(format!("`only`: unknown DPI protocol `{name}`")));
            };
            only.push(proto_id(a));
        }
        let depth = p.int("depth", 1 << 20, 0, i64::MAX)? as u64;
        let flows = p.int("flows", 65_536, 1, 1 << 24)? as usize;
        let inspect_flows =
            p.int("inspect_flows", DEFAULT_INSPECT_FLOWS as i64, 1, 1 << 20)? as usize;
        let inline = match p.value("inline") {
            None => true,
            Some(toml::Value::Boolean(b)) => *b,
            Some(_) => return Err(p.err("`inline` must be true or false")),
        };
        let out = p.path("alerts")?;
        let eve_flows = match p.value("eve_flows") {
            None => true,
            Some(toml::Value::Boolean(b)) => *b,
            Some(_) => return Err(p.err("`eve_flows` must be true or false")),
        };
        let eve_path = p.path("eve")?;
        let mut cfg = IdsConfig::default();
        cfg.http.body = p.int("http_body_limit", cfg.http.body as i64, 0, 1 << 30)? as usize;
        cfg.http.decompress_layers = p.int(
            "decompress_layers",
            cfg.http.decompress_layers as i64,
            0,
            16,
        )? as usize;
        cfg.stream_chunk = p.int("stream_chunk", 2560, 0, 1 << 30)? as u64;
        let (set, warnings) = RuleSet::parse(&text, &Vars::suricata_defaults());
        for w in &warnings {
            let sid = w.sid.map_or(String::new(), |s| format!(" sid {s}"));
            eprintln!(
                "warning: ids: {origin}:{}{sid}: `{}`: {}; rule skipped",
                w.line, w.keyword, w.reason
            );
        }
        if set.is_empty() {
            return Err(p.err("no rule could be loaded (see the warnings above)"));
        }
        let mut app = IdsApp::new(set, cfg);
        app.rules_skipped = warnings.len() as u64;
        app.only = only;
        app.depth = if depth == 0 { u64::MAX } else { depth };
        app.inline = inline;
        app.loose = TimedTable::new(flows, app.timeout_ns);
        app.inspect_flows = inspect_flows;
        app.out = out;
        app.eve_path = eve_path;
        app.eve_flows = eve_flows;
        Ok(app)
    }

    /// An app inspecting every flow with `set`, inline, with no output files.
    pub fn new(set: RuleSet, cfg: IdsConfig) -> IdsApp {
        let mut drop_reason = vec![0u8; set.len()];
        let mut drop_names = Vec::new();
        for (i, r) in set.rules.iter().enumerate() {
            if r.drops && drop_names.len() < MAX_DROP_REASONS {
                drop_names.push(format!("ids inline sid {}", r.sid));
                drop_reason[i] = drop_names.len() as u8;
            }
        }
        let timeout_ns = loose_timeout_ns(true, true);
        IdsApp {
            rules_loaded: set.len() as u64,
            rules_skipped: 0,
            ids: Ids::new(set, cfg),
            only: Vec::new(),
            depth: 1 << 20,
            inline: true,
            flows: Vec::new(),
            live: 0,
            inspect_flows: DEFAULT_INSPECT_FLOWS,
            seen_bytes: Vec::new(),
            conns: Vec::new(),
            loose: TimedTable::new(65_536, timeout_ns),
            next_sweep_ns: 0,
            timeout_ns,
            next_id: 1,
            pending: None,
            alerts: Vec::with_capacity(64),
            by_sid: BTreeMap::new(),
            dropped: vec![0; drop_names.len() + 1],
            drop_reason,
            drop_names,
            out: None,
            out_file: None,
            out_error: None,
            eve_path: None,
            eve: None,
            eve_flows: true,
            packets: 0,
            data_events: 0,
            inspected: 0,
            alerted: 0,
            loose_full: 0,
            inspect_full: 0,
        }
    }

    /// Inline drop rules are loaded (the app may drop packets).
    pub fn is_inline(&self) -> bool {
        self.inline && self.ids.rules().rules.iter().any(|r| r.drops)
    }

    /// Alerts per sid so far.
    pub fn alerts_by_sid(&self) -> &BTreeMap<u32, u64> {
        &self.by_sid
    }

    fn conn(&mut self, f: u32) -> &mut Conn {
        let i = f as usize;
        if i >= self.conns.len() {
            // Grows to the stack's flow bound at most, once.
            self.conns.resize(i + 1, Conn::default());
            self.flows.resize_with(i + 1, || None);
            self.seen_bytes.resize(i + 1, [0; 2]);
        }
        &mut self.conns[i]
    }

    fn start(&mut self, ev: &Event, cx: &mut Ctx<'_>) {
        let id = self.next_id;
        self.next_id += 1;
        // The flow's state on its first packet: SYN, SYN-ACK, or a pickup.
        let state = cx
            .packet(ev)
            .and_then(|p| {
                let l = tracked_layers(p, true);
                p.data().get(l.l4_off as usize + 13).copied()
            })
            .map_or(TcpState::Established, |fl| {
                let fl = u16::from(fl);
                match (fl & flags::SYN != 0, fl & flags::ACK != 0) {
                    (true, false) => TcpState::SynSent,
                    (true, true) => TcpState::SynReceived,
                    _ => TcpState::Established,
                }
            });
        let new_flow = if self.only.is_empty() {
            self.open_flow()
        } else {
            None
        };
        // A segment after a close or reset that the stack picks up as a new flow is,
        // for Suricata, still the closed flow (only a SYN starts a new one there).
        let mut conn = Conn {
            state: state as u8,
            id,
            ..Conn::default()
        };
        if state != TcpState::SynSent {
            let now = cx.packet(ev).map_or(0, |p| p.meta().now_ns);
            if let Some(k) = cx.conn(ev.flow).map(|c| c.key) {
                if let Some(f) = self.loose_live(&k, now) {
                    let dir0_to_server = (k == k.canonical()) == f.client_is_src;
                    let d = usize::from(!dir0_to_server);
                    conn.seen = [f.seen[d], f.seen[1 - d]];
                    (conn.id, conn.dropped_by) = (f.id, f.dropped_by);
                    self.next_id -= 1;
                }
            }
        }
        *self.conn(ev.flow) = conn;
        let i = ev.flow as usize;
        self.close_flow(i);
        self.flows[i] = new_flow;
        self.seen_bytes[i] = [0; 2];
    }

    /// State for a flow to inspect, unless `inspect_flows` are inspected already.
    fn open_flow(&mut self) -> Option<IdsFlow> {
        if self.live >= self.inspect_flows {
            self.inspect_full += 1;
            return None;
        }
        self.live += 1;
        self.inspected += 1;
        Some(self.ids.new_flow())
    }

    /// Ends the inspection of the flow in slot `i`, returning its state.
    fn close_flow(&mut self, i: usize) -> Option<IdsFlow> {
        let fl = self.flows.get_mut(i)?.take();
        self.live -= usize::from(fl.is_some());
        fl
    }

    /// Direction, first-packet-of-direction, "established" and the drop mark of a packet
    /// of a flow the stack does not track (the first sender is the client, unless it
    /// sent a SYN-ACK).
    fn loose_flow(
        &mut self,
        key: &FlowKey,
        synack: bool,
        now: u64,
    ) -> (bool, bool, bool, u32, u64) {
        let ck = key.canonical();
        // Suricata gives a flow of another protocol than TCP, UDP, SCTP, ICMP and ICMPv6
        // (6in4's) one direction: every packet goes to the server (FlowGetPacketDirection).
        // ESP's two directions are two flows there (their SPIs differ), to the server each:
        // alike for IP-only rules to one flow here seen both ways.
        let one_way = !matches!(key.proto, 1 | 6 | 17 | 50 | 58 | 132);
        let from_src = *key == ck;
        let wk = WideKey(ck);
        if let Some(f) = self.loose_live(key, now) {
            f.last_ns = now;
            let to_server = one_way || from_src == f.client_is_src;
            let d = usize::from(!to_server);
            let first = !f.seen[d];
            f.seen[d] = true;
            return (to_server, first, f.seen[0] && f.seen[1], f.dropped_by, f.id);
        }
        if now >= self.next_sweep_ns && self.loose.len() >= self.loose.capacity() {
            self.loose.sweep(now, |_, _| {});
            self.next_sweep_ns = now + self.timeout_ns / 4;
        }
        let to_server = !synack;
        let id = self.next_id;
        self.next_id += 1;
        let mut seen = [false; 2];
        seen[usize::from(!to_server)] = true;
        let f = Loose {
            client_is_src: from_src == to_server,
            seen,
            id,
            dropped_by: 0,
            last_ns: now,
            closed: false,
        };
        if self.loose.learn(wk, f, now) == crate::flow::Learned::Full {
            self.loose_full += 1;
        }
        (to_server, true, false, 0, id)
    }

    /// The untracked (or closed and remembered) flow of `key`, unless timed out by `now`.
    fn loose_live(&mut self, key: &FlowKey, now: u64) -> Option<&mut Loose> {
        let tcp = key.proto == 6;
        // Suricata compares whole seconds: a flow lives while now's second is at most
        // its last packet's second plus the timeout (30.5 s apart can be one flow).
        const S: u64 = 1_000_000_000;
        let live = |f: &Loose| {
            let t = if f.closed {
                CLOSED_TIMEOUT_NS
            } else {
                loose_timeout_ns(f.seen[0] && f.seen[1], tcp)
            };
            now / S <= f.last_ns / S + t / S
        };
        self.loose
            .get_mut(&WideKey(key.canonical()), now)
            .filter(|f| live(f))
    }

    fn remember_closed(&mut self, k: &FlowKey, c: &Conn) {
        let ck = k.canonical();
        let f = Loose {
            client_is_src: *k == ck,
            // A direction with no packet counts as seen after its flow-end pseudo packet.
            seen: [c.seen[0] || c.payload[1], c.seen[1] || c.payload[0]],
            id: c.id,
            dropped_by: c.dropped_by,
            last_ns: c.last_ns,
            closed: true,
        };
        if self.loose.learn(WideKey(ck), f, c.last_ns) == crate::flow::Learned::Full {
            self.loose_full += 1;
        }
    }

    fn mark_loose_dropped(&mut self, key: &FlowKey, rule: u32, now: u64) {
        if let Some(f) = self.loose.get_mut(&WideKey(key.canonical()), now) {
            f.dropped_by = rule + 1;
        }
    }

    /// One packet: packet rules (and stream rules when its bytes are not reassembled).
    fn on_packet(&mut self, ev: &Event, cx: &mut Ctx<'_>) {
        self.flush_end(cx);
        let Some(p) = cx.packet(ev) else { return };
        let l = p.layers();
        // A tunnel is two packets for Suricata: the outer one (its own flow, or none)
        // and the inner one, whose TCP connection the stack tracks (`tracked_layers`).
        let inner = if l.l4_proto == 6 {
            None
        } else {
            l.tunnel_inner(p.data())
        };
        let tracked = ev.flow != NO_FLOW;
        if self.inspect(ev, cx, &l, tracked && inner.is_none()) {
            return;
        }
        if let Some(i) = inner {
            self.inspect(ev, cx, &i, tracked);
        }
    }

    /// The packet passes of one packet seen through the layers `l`; true when dropped.
    fn inspect(&mut self, ev: &Event, cx: &mut Ctx<'_>, l: &Layers, tracked: bool) -> bool {
        let l = *l;
        let Some(p) = cx.packet(ev) else { return false };
        if crate::stack::defrag::is_ipv6_atomic(&l, p.data()) {
            // Inspected as the datagram the stack makes of it (`App::defrag`).
            return false;
        }
        let Some(mut d) = decode(&l, p.data()) else {
            return false;
        };
        let Some(mut key) = FlowKey::from_packet(&l, p.data()) else {
            return false;
        };
        if !tracked && matches!(d.proto, 1 | 58) && l.has_l4() {
            icmp_flow_key(&mut key, d.fields.icmp_type);
        }
        self.packets += 1;
        // Suricata gives some packets no flow (other protocols, fragments, ICMP errors):
        // each is its own first packet. A fragment's datagram (IPv4 or IPv6) comes after
        // it, reassembled by the stack (`App::defrag`), as a packet of its own with its
        // flow.
        let flowless = !tracked && !suricata_makes_flow(&l, &d);
        let now = p.meta().now_ns;
        let quoted = if flowless && d.proto == 1 && d.fields.icmp_type == 3 {
            let b = p.data().get(d.payload.clone()).unwrap_or(&[]);
            quoted_key(b).and_then(|k| self.join_quoted(&k, &key, now))
        } else {
            None
        };
        let mut ip_proto = d.proto;
        if l.is_fragment() {
            // Suricata decodes no transport header in a fragment.
            (d.sport, d.dport, d.tcp) = (0, 0, None);
            d.payload = d.payload.end..d.payload.end;
            ip_proto = 0;
        }
        let owner = match (tracked, flowless, quoted) {
            (true, _, _) => Owner::Stack,
            (false, true, Some(q)) => Owner::Quoted(q),
            (false, true, None) => Owner::NoFlow,
            (false, false, _) => Owner::Loose,
        };
        self.packet_pass(ev, cx, &d, ip_proto, &key, owner)
    }

    /// The untracked flow an ICMP destination-unreachable message joins, as Suricata's
    /// flow lookup does: the flow of the quoted packet, whichever way that packet went.
    /// The message's direction is the one of its sender. (to server, first of its direction, both ways seen, drop mark, flow id).
    fn join_quoted(
        &mut self,
        quoted: &FlowKey,
        pkt: &FlowKey,
        now: u64,
    ) -> Option<(bool, bool, bool, u32, u64)> {
        let c = quoted.canonical();
        let f = self.loose_live(quoted, now)?;
        // Either way of the flow (flow-hash.c FlowCompareICMPv4); the direction is the
        // sender's (flow.c FlowGetPacketDirection: from the client's address = to server).
        let client = if f.client_is_src { c.src } else { c.dst };
        let to_server = pkt.src == client;
        let d = usize::from(!to_server);
        let first = !f.seen[d];
        f.seen[d] = true;
        f.last_ns = now;
        Some((to_server, first, f.seen[0] && f.seen[1], f.dropped_by, f.id))
    }

    /// One inspection of a packet (as a packet without a flow when `flowless`); true when
    /// the IDS dropped it.
    fn packet_pass(
        &mut self,
        ev: &Event,
        cx: &mut Ctx<'_>,
        d: &Decoded,
        ip_proto: u8,
        key: &FlowKey,
        owner: Owner,
    ) -> bool {
        let tracked = owner == Owner::Stack;
        let Some(p) = cx.packet(ev) else { return false };
        let ts = p.meta().ts_ns;
        // Timers read the run clock; records carry the capture time.
        let now = p.meta().now_ns;
        let len = p.data().len() as u64;
        let pay_len = d.payload.len();
        let tcp_flags = u16::from(d.tcp.map_or(0, |t| t.1));
        let (syn, ack) = (tcp_flags & flags::SYN != 0, tcp_flags & flags::ACK != 0);
        let mut no_payload = false;
        // This packet's ACK let Suricata's TLS parser see application data: its own
        // direction's acknowledged bytes are inspected at once (NEW_RAW_DISABLED).
        let mut raw_flush = false;
        let (to_server, first_in_dir, established, dropped_by, flow_id, app) =
            if let Owner::Quoted(q) = owner {
                (q.0, q.1, q.2, q.3, q.4, 0)
            } else if owner == Owner::NoFlow {
                (true, true, false, 0, 0, 0)
            } else if tracked {
                let dir = usize::from(ev.dir);
                // Where this packet's ACK puts the other direction's stream: the stack's
                // sequence number of that stream's first byte is next_seq - delivered,
                // both as of this packet (not the batch's end: alerts must not depend on
                // where batches are cut).
                let other = cx
                    .stream_after_packet(ev, 1 - dir)
                    .map(|(next, delivered)| {
                        let base = next.wrapping_sub(delivered as u32);
                        (d.tcp_ack.wrapping_sub(base), delivered)
                    });
                let c = self.conn(ev.flow);
                if let Some((rel, delivered)) = other.filter(|_| ack && c.seen[1 - dir]) {
                    // An ACK of bytes not captured yet (they come later, or never) is
                    // believed up to a window past the bytes delivered (+1 for a FIN), as
                    // Suricata takes one up to the receiver's window edge (next_win);
                    // beyond it, not.
                    if u64::from(rel) <= delivered + 1 + ACK_WINDOW {
                        c.acked[1 - dir] = c.acked[1 - dir].max(u64::from(rel));
                    }
                }
                let first = !c.seen[dir];
                // The flow's first packet is never an established one for Suricata (its
                // flow update runs before the stream engine makes the session), also
                // on a mid-stream pickup.
                let flow_first = !c.seen[0] && !c.seen[1];
                c.seen[dir] = true;
                c.pkts[dir] += 1;
                c.bytes[dir] += len;
                c.payload[dir] |= pay_len > 0;
                if c.start_ns == 0 {
                    c.start_ns = ts;
                }
                c.last_ns = ts;
                // The state this packet leaves (the stack's state change follows the packet).
                let st = TcpState::from_u8(c.state);
                // The stack's state after this packet rides on the packet event (its
                // handshake checks are Suricata's when the stack skips holes).
                let est = (st >= TcpState::Established && !flow_first)
                    || (st == TcpState::SynReceived
                        && if ev.info != 0 {
                            (ev.info & 0xff) > TcpState::Established as u32
                        } else {
                            (dir == 0 && ack && !syn) || (dir == 1 && !syn && pay_len > 0)
                        });
                if est && st < TcpState::Established {
                    c.state = TcpState::Established as u8;
                }
                let r = (
                    (dir == 0) != c.swapped,
                    first,
                    est,
                    c.dropped_by,
                    c.id,
                    c.app,
                );
                no_payload = c.encrypted;
                if c.tls_app != 0
                    && usize::from(c.tls_app - 1) != dir
                    && ack
                    && d.tcp_ack.wrapping_sub(c.tls_ack) as i32 >= 0
                {
                    // This packet acknowledges the application data: later ones are
                    // not inspected (app-layer-parser.c: FLOW_NOPAYLOAD_INSPECTION, taken
                    // by the next packets), this one flushes its direction's raw stream.
                    raw_flush = !c.encrypted;
                    c.encrypted = true;
                }
                if tcp_flags & (flags::FIN | flags::RST) != 0 {
                    self.pending = Some(PendingEnd {
                        flow: ev.flow,
                        dir: ev.dir,
                    });
                }
                r
            } else {
                let synack = syn && ack;
                let (ts_, first, est, dropped, id) = self.loose_flow(key, synack, now);
                // An untracked TCP flow has no handshake seen.
                (ts_, first, est && d.proto != 6, dropped, id, 0)
            };
        if dropped_by != 0 {
            self.drop(ev, cx, dropped_by - 1);
            return true;
        }
        let info = PacketInfo {
            ip_proto,
            src: d.src,
            dst: d.dst,
            sport: d.sport,
            dport: d.dport,
            to_server,
            established,
            // A segment the stack refused is not in the stream: stream rules match its
            // payload (Suricata: no PKT_STREAM_ADD).
            reassembled: tracked && pay_len > 0 && ev.info & 0x100 == 0,
            first_in_dir,
            fields: d.fields,
            no_payload,
        };
        self.alerts.clear();
        if tracked {
            // Suricata inspects the raw stream of this packet's direction on it, but not
            // on a packet without payload inspection (detect-engine-prefilter.c).
            let i = ev.flow as usize;
            let dir = usize::from(ev.dir);
            let acked = self.conns[i].acked[dir];
            if let Some(Some(fl)) = self.flows.get_mut(i) {
                // Stream offset just past this packet's bytes (0: none in the stream).
                let mut own_end = 0;
                if pay_len > 0 && ev.info & 0x100 == 0 && !no_payload {
                    // A segment past a hole is held by the stack until the hole is
                    // skipped; its copy here lets raw inspection reach it first.
                    let base = cx
                        .conn(ev.flow)
                        .map(|k| k.next_seq(dir).wrapping_sub(k.delivered(dir) as u32));
                    if let (Some(base), Some((seq, _)), Some(pk)) = (base, d.tcp, cx.packet(ev)) {
                        let rel = seq.wrapping_sub(base) as i32;
                        if rel >= 0 {
                            own_end = rel as u64 + pay_len as u64;
                        }
                        if rel > 0 {
                            let pay = pk.data().get(d.payload.clone()).unwrap_or(&[]);
                            self.ids.on_stream_ooo(fl, to_server, rel as u64, pay);
                        }
                    }
                }
                if no_payload {
                    fl.set_acked(to_server, acked);
                } else {
                    self.ids.on_stream_packet(
                        fl,
                        &info,
                        acked,
                        raw_flush,
                        own_end,
                        &mut self.alerts,
                    );
                }
            }
        }
        if let Some(p) = cx.packet(ev) {
            let payload = p.data().get(d.payload.clone()).unwrap_or(&[]);
            self.ids.on_packet(&info, payload, &mut self.alerts);
        }
        if self.alerts.is_empty() {
            return false;
        }
        let t = EveTuple {
            ts_ns: ts,
            flow_id,
            src: d.src,
            sport: d.sport,
            dst: d.dst,
            dport: d.dport,
            proto: d.proto,
            to_server,
            app_proto: "",
        };
        if let Some(rule) = self.publish(ev, cx, &t, app) {
            if tracked {
                self.conn(ev.flow).dropped_by = rule + 1;
            } else {
                self.mark_loose_dropped(key, rule, now);
            }
            self.drop(ev, cx, rule);
            return true;
        } else if tracked {
            self.conn(ev.flow).alerted = true;
        }
        false
    }

    fn drop(&mut self, ev: &Event, cx: &mut Ctx<'_>, rule: u32) {
        let r = self.drop_reason.get(rule as usize).copied().unwrap_or(0);
        self.dropped[usize::from(r)] += 1;
        cx.drop_packet_as(ev, r);
    }

    /// Counts, publishes and logs the alerts the engine just raised; the first inline drop
    /// rule among them, if any.
    fn publish(&mut self, ev: &Event, cx: &mut Ctx<'_>, t: &EveTuple, app: u32) -> Option<u32> {
        let mut drop = None;
        let mut name = [0u8; 24];
        let app_proto = app_name(app, &mut name);
        let t = EveTuple { app_proto, ..*t };
        for a in &self.alerts {
            self.alerted += 1;
            *self.by_sid.entry(a.sid).or_insert(0) += 1;
            let r = &self.ids.rules().rules[a.rule as usize];
            let blocked = self.inline && r.drops;
            if blocked && drop.is_none() {
                drop = Some(a.rule);
            }
            if let Some(e) = self.eve.as_mut() {
                e.alert(&t, r, blocked);
            }
            cx.publish(ev, Kind::IdsAlert, a.sid, r.msg.as_bytes());
        }
        drop
    }

    /// Whether the stack's direction `dir` of tracked flow `f` goes to the server.
    fn to_server(&self, f: u32, dir: u8) -> bool {
        (dir == 0) != self.conns.get(f as usize).is_some_and(|c| c.swapped)
    }

    /// The tuple of the packet that carried `dir`'s bytes of tracked flow `f`.
    fn tuple(cx: &Ctx<'_>, f: u32, dir: u8, c: &Conn, ts: u64) -> Option<EveTuple<'static>> {
        let k = cx.conn(f)?.key;
        let (src, dst, sport, dport) = if dir == 0 {
            (k.src_ip(), k.dst_ip(), k.sport, k.dport)
        } else {
            (k.dst_ip(), k.src_ip(), k.dport, k.sport)
        };
        Some(EveTuple {
            ts_ns: ts,
            flow_id: c.id,
            src: src.into(),
            sport,
            dst: dst.into(),
            dport,
            proto: 6,
            to_server: (dir == 0) != c.swapped,
            app_proto: "",
        })
    }

    /// Stream alerts of tracked flow `ev.flow`: published, logged, and inline drops.
    fn stream_alerts(&mut self, ev: &Event, cx: &mut Ctx<'_>, dir: u8) {
        if self.alerts.is_empty() {
            return;
        }
        let c = *self.conn(ev.flow);
        let ts = if ev.pkt == NO_PKT {
            c.last_ns
        } else {
            cx.packet(ev).map_or(c.last_ns, |p| p.meta().ts_ns)
        };
        let Some(t) = Self::tuple(cx, ev.flow, dir, &c, ts) else {
            return;
        };
        let drop = self.publish(ev, cx, &t, c.app);
        let c = self.conn(ev.flow);
        c.alerted = true;
        if let Some(rule) = drop {
            if c.dropped_by == 0 {
                c.dropped_by = rule + 1;
            }
            if ev.pkt != NO_PKT {
                self.drop(ev, cx, rule);
            }
        }
    }

    fn on_data(&mut self, ev: &Event, cx: &mut Ctx<'_>) {
        self.data_events += 1;
        let i = ev.flow as usize;
        if self.conns.get(i).is_some_and(|c| c.dropped_by != 0) {
            return;
        }
        let Some(c) = cx.conn(ev.flow) else { return };
        let k = c.key;
        let established = c.state >= TcpState::Established;
        let bytes = cx.bytes(ev);
        if ev.dir == 0
            && c.midstream
            && !c.synack_first
            && self.seen_bytes.get(i) == Some(&[0, 0])
            && bytes
                .get(..5)
                .is_some_and(|v| v.eq_ignore_ascii_case(b"HTTP/"))
        {
            // The flow's first bytes are a response: Suricata's protocol detection
            // finds HTTP with the server's pattern and reverses the flow.
            self.conns[i].swapped = true;
        }
        let to_server = self.to_server(ev.flow, ev.dir);
        let Some(Some(fl)) = self.flows.get_mut(i) else {
            return;
        };
        let info = stream_info(&k, ev.dir == 0, to_server, established);
        let seen = &mut self.seen_bytes[i];
        if ev.info != 0 {
            // Bytes the capture missed before these (the stack skipped an acknowledged
            // hole): offsets go past them; the TLS parser stops, as Suricata's does.
            let gap = u64::from(ev.info);
            seen[usize::from(ev.dir)] += gap;
            self.conns[i].tls.gap();
            self.ids.on_stream_gap(fl, to_server, gap);
        }
        seen[usize::from(ev.dir)] += bytes.len() as u64;
        let done = seen[0] >= self.depth && seen[1] >= self.depth;
        self.alerts.clear();
        let conn = &mut self.conns[i];
        if !conn.encrypted {
            if let Some(n) = conn.tls.feed(usize::from(ev.dir), bytes) {
                if conn.tls_app == 0 {
                    // Events are read after the batch: the stack's stream may be ahead
                    // of this event, so the place is counted from the stream's start.
                    let dir = usize::from(ev.dir);
                    let base = c.next_seq(dir).wrapping_sub(c.delivered(dir) as u32);
                    let at = seen[dir] - (bytes.len() - n) as u64;
                    conn.tls_app = 1 + ev.dir;
                    conn.tls_ack = base.wrapping_add(at as u32);
                }
            }
            // Where the other side's ACKs stand before these bytes (Suricata parses
            // HTTP in acknowledged steps, see `Ids::http_trailer`).
            fl.set_acked(to_server, conn.acked[usize::from(ev.dir)]);
            self.ids.on_stream(fl, &info, bytes, &mut self.alerts);
            if conn.tls.record_done(usize::from(ev.dir)) {
                self.ids.on_stream_trigger(fl, to_server);
            }
        }
        // A FIN or RST on this packet ends its direction after its bytes.
        if let Some(pe) = self.pending {
            if pe.flow == ev.flow && pe.dir == ev.dir {
                self.pending = None;
                self.ids.on_stream_end(fl, &info, &mut self.alerts);
            }
        }
        self.stream_alerts(ev, cx, ev.dir);
        if done {
            if let Some(mut fl) = self.close_flow(i) {
                self.flush_streams(ev, cx, &mut fl);
            }
            cx.unsubscribe(ev.flow, Kind::Data);
        }
    }

    /// A FIN or RST whose packet brought no bytes: its direction ends now.
    fn flush_end(&mut self, cx: &mut Ctx<'_>) {
        let Some(pe) = self.pending.take() else {
            return;
        };
        let Some(c) = cx.conn(pe.flow) else { return };
        let (k, established) = (c.key, c.state >= TcpState::Established);
        let to_server = self.to_server(pe.flow, pe.dir);
        let Some(Some(fl)) = self.flows.get_mut(pe.flow as usize) else {
            return;
        };
        self.alerts.clear();
        let info = stream_info(&k, pe.dir == 0, to_server, established);
        self.ids.on_stream_end(fl, &info, &mut self.alerts);
        let ev = Event {
            kind: Kind::Data,
            dir: pe.dir,
            from: crate::stack::FROM_STACK,
            pkt: NO_PKT,
            flow: pe.flow,
            info: 0,
            bytes: crate::stack::Bytes::None,
        };
        self.stream_alerts(&ev, cx, pe.dir);
    }

    fn on_end(&mut self, ev: &Event, cx: &mut Ctx<'_>) {
        self.flush_end(cx);
        let i = ev.flow as usize;
        if i >= self.conns.len() {
            return;
        }
        let Some(c) = cx.conn(ev.flow) else { return };
        let (k, established, state) = (c.key, c.state >= TcpState::Established, c.state);
        if let Some(mut fl) = self.close_flow(i) {
            self.flush_streams(ev, cx, &mut fl);
            self.alerts.clear();
            // Requests or responses cut short by the end are inspected as they are.
            let swapped = self.conns[i].swapped;
            for to_server in [true, false] {
                let info = stream_info(&k, to_server != swapped, to_server, established);
                self.ids.on_stream_end(&mut fl, &info, &mut self.alerts);
            }
            if !self.alerts.is_empty() {
                let c = self.conns[i];
                if let Some(t) = Self::tuple(cx, ev.flow, 0, &c, c.last_ns) {
                    self.publish(ev, cx, &t, c.app);
                    self.conns[i].alerted = true;
                }
            }
        }
        if matches!(
            EndReason::from_u32(ev.info),
            EndReason::Idle | EndReason::Final
        ) {
            self.pseudo_packets(ev, cx);
        }
        let c = self.conns[i];
        if matches!(
            EndReason::from_u32(ev.info),
            EndReason::Closed | EndReason::Reset
        ) {
            // Segments after the close (a late ACK, a RST) still belong to this flow for
            // Suricata, which keeps closed flows a while: not a new flow's first packets.
            self.remember_closed(&k, &c);
        }
        let eve = self.eve.as_mut().filter(|_| self.eve_flows);
        if let (Some(e), Some(t)) = (eve, Self::tuple(cx, ev.flow, 0, &c, c.last_ns)) {
            let mut name = [0u8; 24];
            let app_proto = app_name(c.app, &mut name);
            let f = EveFlow {
                pkts: c.pkts,
                bytes: c.bytes,
                start_ns: c.start_ns,
                end_ns: c.last_ns,
                state: match state {
                    TcpState::SynSent | TcpState::SynReceived => "new",
                    TcpState::Closed => "closed",
                    _ => "established",
                },
                reason: if EndReason::from_u32(ev.info) == EndReason::Final {
                    "shutdown"
                } else {
                    "timeout"
                },
                alerted: c.alerted,
            };
            e.flow(&EveTuple { app_proto, ..t }, &f);
        }
    }
}

impl IdsApp {
    /// The flow's inspection ends: each direction's stream bytes not inspected yet are
    /// (Suricata's flow-end pseudo packets), their alerts stamped with that direction.
    fn flush_streams(&mut self, ev: &Event, cx: &mut Ctx<'_>, fl: &mut IdsFlow) {
        let i = ev.flow as usize;
        let Some(&c) = self.conns.get(i) else { return };
        // A TLS flow past its application data: the flow-end pseudo packets carry no
        // payload inspection either (flow-timeout.c), what the streams hold is dropped.
        if c.encrypted {
            return;
        }
        for dir in 0..2u8 {
            self.alerts.clear();
            self.ids
                .on_stream_flush(fl, (dir == 0) != c.swapped, &mut self.alerts);
            if !self.alerts.is_empty() {
                if let Some(t) = Self::tuple(cx, ev.flow, dir, &c, c.last_ns) {
                    if let Some(rule) = self.publish(ev, cx, &t, c.app) {
                        let c = &mut self.conns[i];
                        if c.dropped_by == 0 {
                            c.dropped_by = rule + 1;
                        }
                    }
                    self.conns[i].alerted = true;
                }
            }
        }
        self.alerts.clear();
    }

    /// When a flow times out, and for every flow still open at the end of the input,
    /// Suricata flushes each direction's unacknowledged bytes with a pseudo packet from
    /// the other side; when that side never sent a packet, IP-only rules match it (so a
    /// one-packet TCP flow alerts them both ways). Done alike here: a direction that
    /// carried payload while the other sent nothing. Closed and reset flows get none.
    fn pseudo_packets(&mut self, ev: &Event, cx: &mut Ctx<'_>) {
        let i = ev.flow as usize;
        let c = self.conns[i];
        // Suricata keeps no bytes of a flow whose SYN got no SYN-ACK: nothing to flush.
        if c.dropped_by != 0 || c.state < TcpState::Established as u8 {
            return;
        }
        self.alerts.clear();
        let Some(k) = cx.conn(ev.flow).map(|c| c.key) else {
            return;
        };
        for d in 0..2 {
            if c.payload[d] && !c.seen[1 - d] {
                let est = c.state >= TcpState::Established as u8;
                let mut info = stream_info(&k, d == 1, (d == 1) != c.swapped, est);
                info.first_in_dir = true;
                self.ids.on_pseudo_packet(&info, &mut self.alerts);
                if !self.alerts.is_empty() {
                    if let Some(t) = Self::tuple(cx, ev.flow, (1 - d) as u8, &c, c.last_ns) {
                        self.publish(ev, cx, &t, c.app);
                        self.conns[i].alerted = true;
                    }
                    self.alerts.clear();
                }
            }
        }
    }
}

/// The DPI label `app` in Suricata's spelling (lower case), in `buf`; "" when none.
fn app_name(app: u32, buf: &mut [u8; 24]) -> &str {
    let Some(p) = app
        .checked_sub(1)
        .and_then(|i| AppProto::ALL.get(i as usize))
    else {
        return "";
    };
    let n = p.name().as_bytes();
    let n = &n[..n.len().min(buf.len())];
    for (b, c) in buf.iter_mut().zip(n) {
        *b = c.to_ascii_lowercase();
    }
    std::str::from_utf8(&buf[..n.len()]).unwrap_or("")
}

/// The engine's view of one direction of connection `k` (oriented from its client).
/// A stream event's packet fields: `from_src`, the bytes go the stack key's way.
fn stream_info(k: &FlowKey, from_src: bool, to_server: bool, established: bool) -> PacketInfo {
    let (src, dst, sport, dport) = if from_src {
        (k.src_ip(), k.dst_ip(), k.sport, k.dport)
    } else {
        (k.dst_ip(), k.src_ip(), k.dport, k.sport)
    };
    PacketInfo {
        ip_proto: 6,
        src: Ip::from(src),
        dst: Ip::from(dst),
        sport,
        dport,
        to_server,
        established,
        reassembled: true,
        // Stream bytes, not a packet: packet rules ran on the packet event.
        first_in_dir: false,
        fields: PktFields::default(),
        no_payload: false,
    }
}

impl App for IdsApp {
    fn name(&self) -> &str {
        "ids"
    }

    fn level(&self) -> Level {
        Level::Bytestream
    }

    fn defrag(&self) -> bool {
        true
    }

    /// Suricata inspects the stream after a gap the receiver acknowledged.
    fn accepts_gaps(&self) -> bool {
        true
    }

    fn may_drop(&self) -> bool {
        self.is_inline()
    }

    fn drop_reasons(&self) -> Vec<String> {
        let mut v = vec!["ids inline".to_string()];
        v.extend(self.drop_names.iter().cloned());
        v
    }

    /// ACKs are judged by the streams as of their packet (docs/history/ids.md, "Session 20").
    fn streams_per_packet(&self) -> bool {
        true
    }

    fn kinds(&self) -> Kinds {
        Kinds::of(&[
            Kind::Packet,
            Kind::FlowStart,
            Kind::StateChange,
            Kind::DpiResult,
            Kind::Data,
            Kind::FlowEnd,
        ])
    }

    fn initial(&self) -> Kinds {
        let k = Kinds::of(&[
            Kind::Packet,
            Kind::FlowStart,
            Kind::StateChange,
            Kind::DpiResult,
            Kind::FlowEnd,
        ]);
        if self.only.is_empty() {
            k.with(Kind::Data)
        } else {
            k
        }
    }

    fn on_batch(&mut self, cx: &mut Ctx<'_>) {
        crate::stack::app::deliver(self, cx);
        self.flush_end(cx);
    }

    fn on_event(&mut self, ev: &Event, cx: &mut Ctx<'_>) {
        match ev.kind {
            Kind::Packet => self.on_packet(ev, cx),
            Kind::FlowStart => self.start(ev, cx),
            Kind::StateChange => {
                let new = (ev.info & 0xff) as u8;
                let c = self.conn(ev.flow);
                c.state = c.state.max(new);
            }
            Kind::DpiResult => {
                self.conn(ev.flow).app = ev.info;
                if self.only.contains(&ev.info) && self.flows[ev.flow as usize].is_none() {
                    if let Some(fl) = self.open_flow() {
                        self.flows[ev.flow as usize] = Some(fl);
                        cx.subscribe(ev.flow, Kind::Data);
                    }
                }
            }
            Kind::Data => self.on_data(ev, cx),
            Kind::FlowEnd => self.on_end(ev, cx),
            _ => {}
        }
    }

    fn open_outputs(&mut self) -> Result<(), String> {
        if let Some(path) = &self.out {
            let f = std::fs::File::create(path)
                .map_err(|e| format!("ids: alerts `{}`: {e}", path.display()))?;
            self.out_file = Some(f);
        }
        if let Some(path) = &self.eve_path {
            self.eve =
                Some(Eve::create(path).map_err(|e| format!("ids: eve `{}`: {e}", path.display()))?);
        }
        Ok(())
    }

    fn finish(&mut self) {
        if let Some(path) = &self.out {
            let text: String = self
                .by_sid
                .iter()
                .map(|(s, n)| format!("{s} {n}\n"))
                .collect();
            // Opened before the run; created here only when the app runs outside one.
            let res = match self.out_file.take() {
                Some(mut f) => {
                    use std::io::Write;
                    f.write_all(text.as_bytes())
                }
                None => std::fs::write(path, text),
            };
            if let Err(e) = res {
                self.out_error = Some(format!("ids: alerts `{}`: {e}", path.display()));
            }
        }
        if let Some(e) = self.eve.as_mut() {
            if let Err(msg) = e.finish() {
                self.out_error.get_or_insert(format!("ids: {msg}"));
            }
        }
    }

    fn has_outputs(&self) -> bool {
        self.out.is_some() || self.eve_path.is_some()
    }

    fn output_error(&self) -> Option<String> {
        self.out_error.clone()
    }

    fn stats(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("ids_rules_loaded", self.rules_loaded),
            ("ids_rules_skipped", self.rules_skipped),
            ("ids_packets", self.packets),
            ("ids_data_events", self.data_events),
            ("ids_flows_inspected", self.inspected),
            ("ids_alerts", self.alerted),
            ("ids_dropped", self.dropped.iter().sum()),
            ("ids_untracked_full", self.loose_full),
            ("ids_inspect_full", self.inspect_full),
        ]
    }

    /// Per tracked flow its record, and at most `inspect_flows` flows' inspection state;
    /// the untracked flows' table.
    fn memory(&self, flows: usize) -> usize {
        use crate::flow::footprint::{grown_vec_bytes, hash_table_bytes};
        let per_slot = std::mem::size_of::<Conn>()
            + std::mem::size_of::<Option<IdsFlow>>()
            + std::mem::size_of::<[u64; 2]>();
        grown_vec_bytes::<u8>(flows.saturating_mul(per_slot))
            .saturating_add(
                self.inspect_flows
                    .min(flows)
                    .saturating_mul(self.ids.flow_memory()),
            )
            .saturating_add(hash_table_bytes::<(WideKey, Loose, u64)>(
                self.loose.capacity(),
            ))
    }
}
