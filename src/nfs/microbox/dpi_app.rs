//! `dpi`: the DPI engine ([`crate::nfs::dpi`]) as an app on the stack. It reads each TCP
//! flow's in-order bytes in both directions until the engine decides (or gives up, or the
//! flow ends), publishes one `DpiResult` (protocol id = the engine's `AppProto` index +
//! 1, 0 = unknown; bytes = the protocol's name) and unsubscribes from the flow's data.
//!
//! The stack tracks TCP only, so UDP flows are not labelled here (`catena dpi FILE` does
//! label them, from datagrams).

use crate::nfs::dpi::{AppProto, DpiFlow, Progress, L4};
use crate::nfs::params::{ParamDoc, ParamError, Params};
use crate::stack::{App, Ctx, Event, Kind, Kinds, Level};

/// `DpiResult` info for "no protocol recognised".
pub const UNKNOWN: u32 = 0;

/// The `DpiResult` info published for `p`.
pub fn proto_id(p: AppProto) -> u32 {
    p as u32 + 1
}

pub struct DpiApp {
    /// Per flow id; `None` once the flow has its result.
    flows: Vec<Option<DpiFlow>>,
    data_events: u64,
    detected: u64,
    unknown: u64,
}

impl DpiApp {
    pub const PARAMS: &'static [ParamDoc] = &[];

    pub fn from_params(_: &mut Params) -> Result<DpiApp, ParamError> {
        Ok(DpiApp {
            flows: Vec::new(),
            data_events: 0,
            detected: 0,
            unknown: 0,
        })
    }

    fn slot(&mut self, f: u32) -> &mut Option<DpiFlow> {
        let i = f as usize;
        if i >= self.flows.len() {
            // Grows to the stack's flow bound at most, once.
            self.flows.resize_with(i + 1, || None);
        }
        &mut self.flows[i]
    }

    fn decide(&mut self, ev: &Event, cx: &mut Ctx<'_>, p: Option<AppProto>) {
        *self.slot(ev.flow) = None;
        let (id, name) = match p {
            Some(p) => {
                self.detected += 1;
                (proto_id(p), p.name())
            }
            None => {
                self.unknown += 1;
                (UNKNOWN, "unknown")
            }
        };
        cx.publish(ev, Kind::DpiResult, id, name.as_bytes());
        cx.unsubscribe(ev.flow, Kind::Data);
        cx.unsubscribe(ev.flow, Kind::FlowEnd);
    }
}

impl App for DpiApp {
    fn name(&self) -> &str {
        "dpi"
    }

    fn level(&self) -> Level {
        Level::Bytestream
    }

    fn kinds(&self) -> Kinds {
        Kinds::of(&[Kind::FlowStart, Kind::Data, Kind::FlowEnd])
    }

    fn on_event(&mut self, ev: &Event, cx: &mut Ctx<'_>) {
        match ev.kind {
            Kind::FlowStart => {
                let Some(c) = cx.conn(ev.flow) else { return };
                let k = c.key;
                let f = DpiFlow::new(L4::Tcp, (k.src_ip(), k.sport), (k.dst_ip(), k.dport));
                *self.slot(ev.flow) = Some(f);
            }
            Kind::Data => {
                self.data_events += 1;
                let from_client = ev.dir == 0;
                let Some(Some(f)) = self.flows.get_mut(ev.flow as usize) else {
                    return;
                };
                match f.feed(from_client, cx.bytes(ev)) {
                    Progress::Detected(p) => self.decide(ev, cx, Some(p)),
                    Progress::GiveUp => {
                        let g = f.label();
                        self.decide(ev, cx, g)
                    }
                    Progress::NeedMore => {}
                }
            }
            Kind::FlowEnd => {
                // Undecided at the end: the engine's best answer (a tentative match or
                // nDPI-style guess by port), as ndpiReader reports it.
                let Some(Some(f)) = self.flows.get(ev.flow as usize) else {
                    return;
                };
                let g = f.label();
                self.decide(ev, cx, g);
            }
            _ => {}
        }
    }

    fn stats(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("dpi_data_events", self.data_events),
            ("dpi_detected", self.detected),
            ("dpi_unknown", self.unknown),
        ]
    }

    /// A detector's state per flow (no heap of its own).
    fn memory(&self, flows: usize) -> usize {
        crate::flow::footprint::grown_vec_bytes::<Option<DpiFlow>>(flows)
    }
}
