//! `ids`: the IDS engine ([`crate::nfs::ids`]) as an app on the stack, inspecting TCP
//! flows' reassembled bytes (stream and HTTP rules) and publishing an `IdsAlert` (info =
//! sid, bytes = msg) per alert.
//!
//! Subscriptions, after the Microboxes paper's Figure 7c:
//! - `only = ["HTTP", …]` (dynamic): a flow's data is subscribed to only once a DPI app
//!   before this one labels it with one of these protocols;
//! - without `only`: every flow's data from its start.
//!
//! Either way the IDS decides it has seen enough of a flow — and unsubscribes — once both
//! directions passed `depth` bytes (Suricata's `stream.reassembly.depth`, 1 MiB by default).
//!
//! Packet-only rules (UDP, ICMP, no flow) need no stack and are not run here.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::flow::FlowKey;
use crate::nfs::dpi::AppProto;
use crate::nfs::ids::{Alert, Ids, IdsConfig, IdsFlow, PacketInfo, PktFields, RuleSet, Vars};
use crate::nfs::params::{ParamDoc, ParamError, Params};
use crate::stack::{App, Ctx, Event, Kind, Kinds, Level, TcpState};

use super::dpi_app::proto_id;

struct Flow {
    state: IdsFlow,
    seen: [u64; 2],
}

pub struct IdsApp {
    ids: Ids,
    /// `DpiResult` ids that turn inspection on; empty = inspect every flow.
    only: Vec<u32>,
    depth: u64,
    flows: Vec<Option<Flow>>,
    alerts: Vec<Alert>,
    by_sid: BTreeMap<u32, u64>,
    out: Option<PathBuf>,
    /// The alerts file, created before the first packet ([`App::open_outputs`]).
    out_file: Option<std::fs::File>,
    /// The first failure writing the alerts file.
    out_error: Option<String>,
    rules_loaded: u64,
    rules_skipped: u64,
    data_events: u64,
    inspected: u64,
    alerted: u64,
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
            doc: "inspect a flow only once a DPI app before this one labels it so (dynamic subscription)",
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
    ];

    pub fn from_params(p: &mut Params) -> Result<IdsApp, ParamError> {
        let text = match (p.table_str("rules")?, p.path("rules_file")?) {
            (Some(t), None) => t.to_string(),
            (None, Some(f)) => std::fs::read_to_string(&f)
                .map_err(|e| p.err(format!("rules_file `{}`: {e}", f.display())))?,
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
        let out = p.path("alerts")?;
        let (set, warnings) = RuleSet::parse(&text, &Vars::suricata_defaults());
        for w in &warnings {
            eprintln!("warning: ids: {w}");
        }
        if set.is_empty() {
            return Err(p.err("no rule could be loaded (see the warnings above)"));
        }
        Ok(IdsApp {
            rules_loaded: set.len() as u64,
            rules_skipped: warnings.len() as u64,
            ids: Ids::new(set, IdsConfig::default()),
            only,
            depth: if depth == 0 { u64::MAX } else { depth },
            flows: Vec::new(),
            alerts: Vec::with_capacity(64),
            by_sid: BTreeMap::new(),
            out,
            out_file: None,
            out_error: None,
            data_events: 0,
            inspected: 0,
            alerted: 0,
        })
    }

    fn start(&mut self, f: u32) {
        let i = f as usize;
        if i >= self.flows.len() {
            // Grows to the stack's flow bound at most, once.
            self.flows.resize_with(i + 1, || None);
        }
        self.inspected += 1;
        self.flows[i] = Some(Flow {
            state: self.ids.new_flow(),
            seen: [0; 2],
        });
    }

    /// Counts the alerts the engine just raised and publishes them after `ev`'s cause.
    fn publish(&mut self, ev: &Event, cx: &mut Ctx<'_>) {
        for a in &self.alerts {
            self.alerted += 1;
            *self.by_sid.entry(a.sid).or_insert(0) += 1;
            let msg = self.ids.rules().rules[a.rule as usize].msg.as_bytes();
            cx.publish(ev, Kind::IdsAlert, a.sid, msg);
        }
    }
}

/// The engine's view of one direction of connection `k` (oriented from its client).
fn packet_info(k: &FlowKey, to_server: bool, established: bool) -> PacketInfo {
    let (src, dst, sport, dport) = if to_server {
        (k.src_ip(), k.dst_ip(), k.sport, k.dport)
    } else {
        (k.dst_ip(), k.src_ip(), k.dport, k.sport)
    };
    PacketInfo {
        ip_proto: 6,
        src: src.into(),
        dst: dst.into(),
        sport,
        dport,
        to_server,
        established,
        reassembled: true,
        // Stream bytes, not a packet: IP-only and header rules are packet rules, which
        // this app does not run.
        first_in_dir: false,
        fields: PktFields::default(),
    }
}

impl App for IdsApp {
    fn name(&self) -> &str {
        "ids"
    }

    fn level(&self) -> Level {
        Level::Bytestream
    }

    fn kinds(&self) -> Kinds {
        Kinds::of(&[Kind::FlowStart, Kind::DpiResult, Kind::Data, Kind::FlowEnd])
    }

    fn initial(&self) -> Kinds {
        if self.only.is_empty() {
            Kinds::of(&[Kind::FlowStart, Kind::Data, Kind::FlowEnd])
        } else {
            Kinds::of(&[Kind::DpiResult, Kind::FlowEnd])
        }
    }

    fn on_event(&mut self, ev: &Event, cx: &mut Ctx<'_>) {
        match ev.kind {
            Kind::FlowStart => self.start(ev.flow),
            Kind::DpiResult if self.only.contains(&ev.info) => {
                self.start(ev.flow);
                cx.subscribe(ev.flow, Kind::Data);
            }
            Kind::Data => {
                self.data_events += 1;
                let Some(c) = cx.conn(ev.flow) else { return };
                let k = c.key;
                let established = c.state >= TcpState::Established;
                let Some(Some(fl)) = self.flows.get_mut(ev.flow as usize) else {
                    return;
                };
                let info = packet_info(&k, ev.dir == 0, established);
                let bytes = cx.bytes(ev);
                fl.seen[usize::from(ev.dir)] += bytes.len() as u64;
                self.alerts.clear();
                self.ids
                    .on_stream(&mut fl.state, &info, bytes, &mut self.alerts);
                let done = fl.seen[0] >= self.depth && fl.seen[1] >= self.depth;
                self.publish(ev, cx);
                if done {
                    self.flows[ev.flow as usize] = None;
                    cx.unsubscribe(ev.flow, Kind::Data);
                }
            }
            Kind::FlowEnd => {
                let Some(fl) = self.flows.get_mut(ev.flow as usize).and_then(Option::take) else {
                    return;
                };
                let Some(c) = cx.conn(ev.flow) else { return };
                let (k, established) = (c.key, c.state >= TcpState::Established);
                let mut fl = fl;
                self.alerts.clear();
                // Requests or responses cut short by the end are inspected as they are.
                for to_server in [true, false] {
                    let info = packet_info(&k, to_server, established);
                    self.ids
                        .on_stream_end(&mut fl.state, &info, &mut self.alerts);
                }
                self.publish(ev, cx);
            }
            _ => {}
        }
    }

    fn open_outputs(&mut self) -> Result<(), String> {
        if let Some(path) = &self.out {
            let f = std::fs::File::create(path)
                .map_err(|e| format!("ids: alerts `{}`: {e}", path.display()))?;
            self.out_file = Some(f);
        }
        Ok(())
    }

    fn finish(&mut self) {
        let Some(path) = &self.out else { return };
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

    fn output_error(&self) -> Option<String> {
        self.out_error.clone()
    }

    fn stats(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("ids_rules_loaded", self.rules_loaded),
            ("ids_rules_skipped", self.rules_skipped),
            ("ids_data_events", self.data_events),
            ("ids_flows_inspected", self.inspected),
            ("ids_alerts", self.alerted),
        ]
    }
}
