//! The DPI → IDS pattern in miniature, as a model for the real DPI and IDS apps:
//!
//! - [`Labeller`] (the "DPI"): reads each flow's first client bytes, publishes a
//!   `DpiResult` (protocol 1 = HTTP, 0 = other) and unsubscribes from the flow's data.
//! - [`HttpWatch`] (the "IDS"): starts with no data subscription; subscribes to a flow's
//!   data only when the labeller says HTTP, looks for a pattern in the client stream
//!   (across segment boundaries), publishes an `IdsAlert` when found, and unsubscribes
//!   once it has decided. With `dynamic = false` it gets (and scans) every flow's data
//!   and alerts only on HTTP flows: the "all events" baseline.

use crate::nfs::params::{ParamDoc, ParamError, Params};
use crate::stack::{App, Ctx, Event, Kind, Kinds, Level};

/// Protocol id the labeller publishes for HTTP.
pub const HTTP: u32 = 1;

pub struct Labeller {
    data_events: u64,
    labelled: [u64; 2],
}

impl Labeller {
    pub const PARAMS: &'static [ParamDoc] = &[];

    pub fn from_params(_: &mut Params) -> Result<Labeller, ParamError> {
        Ok(Labeller {
            data_events: 0,
            labelled: [0; 2],
        })
    }
}

fn is_http_request(b: &[u8]) -> bool {
    [
        &b"GET "[..],
        b"POST ",
        b"HEAD ",
        b"PUT ",
        b"DELETE ",
        b"OPTIONS ",
    ]
    .iter()
    .any(|m| b.starts_with(m))
}

impl App for Labeller {
    fn name(&self) -> &str {
        "labeller"
    }
    fn level(&self) -> Level {
        Level::Bytestream
    }
    fn kinds(&self) -> Kinds {
        Kinds::of(&[Kind::Data])
    }
    fn on_event(&mut self, ev: &Event, cx: &mut Ctx<'_>) {
        self.data_events += 1;
        // The first data decides, whichever side sends it.
        let http = ev.dir == 0 && is_http_request(cx.bytes(ev));
        let (id, name) = if http { (HTTP, "http") } else { (0, "unknown") };
        self.labelled[usize::from(http)] += 1;
        cx.publish(ev, Kind::DpiResult, id, name.as_bytes());
        cx.unsubscribe(ev.flow, Kind::Data);
    }
    fn stats(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("labeller_data_events", self.data_events),
            ("labelled_http", self.labelled[1]),
            ("labelled_other", self.labelled[0]),
        ]
    }
}

/// The last bytes of a flow's client stream, so a pattern split over segments is found.
#[derive(Clone, Copy)]
struct Tail {
    /// The flow was labelled HTTP (the all-data mode gets other flows' data too).
    http: bool,
    len: u8,
    b: [u8; 63],
}

pub struct HttpWatch {
    pattern: Vec<u8>,
    sid: u32,
    /// `dynamic = false` subscribes to all data from the start (the "all events" case).
    dynamic: bool,
    /// Drop the packet that completed the match (an IPS).
    drop: bool,
    tails: Vec<Tail>,
    scratch: Vec<u8>,
    data_events: u64,
    watched: u64,
    alerts: u64,
}

impl HttpWatch {
    pub const PARAMS: &'static [ParamDoc] = &[
        ParamDoc {
            name: "pattern",
            ty: "string (1..=64 bytes)",
            default: "admin",
            doc: "bytes to look for in the client stream of HTTP flows",
        },
        ParamDoc {
            name: "sid",
            ty: "integer",
            default: "1",
            doc: "rule id of the alert",
        },
        ParamDoc {
            name: "dynamic",
            ty: "bool",
            default: "true",
            doc: "subscribe to data only for flows labelled HTTP (false: all data of all flows)",
        },
        ParamDoc {
            name: "drop",
            ty: "bool",
            default: "false",
            doc: "drop the packet whose bytes completed the match",
        },
    ];

    pub fn from_params(p: &mut Params) -> Result<HttpWatch, ParamError> {
        let pattern = p
            .table_str("pattern")?
            .unwrap_or("admin")
            .as_bytes()
            .to_vec();
        if pattern.is_empty() || pattern.len() > 64 {
            return Err(p.err("`pattern` must be 1..=64 bytes"));
        }
        let sid = p.int("sid", 1, 0, u32::MAX as i64)? as u32;
        let dynamic = match p.value("dynamic") {
            None => true,
            Some(toml::Value::Boolean(b)) => *b,
            Some(_) => return Err(p.err("`dynamic` must be true or false")),
        };
        let drop = match p.value("drop") {
            None => false,
            Some(toml::Value::Boolean(b)) => *b,
            Some(_) => return Err(p.err("`drop` must be true or false")),
        };
        Ok(HttpWatch {
            scratch: Vec::with_capacity(64 + 65_536),
            pattern,
            sid,
            dynamic,
            drop,
            tails: Vec::new(),
            data_events: 0,
            watched: 0,
            alerts: 0,
        })
    }

    fn tail(&mut self, f: u32) -> &mut Tail {
        let i = f as usize;
        if i >= self.tails.len() {
            self.tails.resize(
                i + 1,
                Tail {
                    http: false,
                    len: 0,
                    b: [0; 63],
                },
            );
        }
        &mut self.tails[i]
    }
}

impl App for HttpWatch {
    fn name(&self) -> &str {
        "http_watch"
    }
    fn level(&self) -> Level {
        Level::Bytestream
    }
    fn kinds(&self) -> Kinds {
        Kinds::of(&[Kind::FlowStart, Kind::DpiResult, Kind::Data])
    }
    fn may_drop(&self) -> bool {
        self.drop
    }
    fn initial(&self) -> Kinds {
        if self.dynamic {
            Kinds::of(&[Kind::FlowStart, Kind::DpiResult])
        } else {
            self.kinds()
        }
    }
    fn on_event(&mut self, ev: &Event, cx: &mut Ctx<'_>) {
        match ev.kind {
            Kind::FlowStart => {
                let t = self.tail(ev.flow);
                t.len = 0;
                t.http = false;
            }
            Kind::DpiResult if ev.info == HTTP => {
                self.watched += 1;
                self.tail(ev.flow).http = true;
                cx.subscribe(ev.flow, Kind::Data);
            }
            Kind::DpiResult => {}
            Kind::Data => {
                self.data_events += 1;
                let t = *self.tail(ev.flow);
                if ev.dir != 0 {
                    return;
                }
                // Without the dynamic subscription every flow's data is scanned (as an
                // IDS that gets all events does); only HTTP flows may alert.
                let b = cx.bytes(ev);
                self.scratch.clear();
                self.scratch.extend_from_slice(&t.b[..t.len as usize]);
                self.scratch.extend_from_slice(&b[..b.len().min(65_536)]);
                let hit = self
                    .scratch
                    .windows(self.pattern.len())
                    .any(|w| w == self.pattern.as_slice());
                if hit && t.http {
                    self.alerts += 1;
                    if self.drop {
                        cx.drop_packet(ev);
                    }
                    cx.publish(ev, Kind::IdsAlert, self.sid, b"pattern in HTTP request");
                    cx.unsubscribe(ev.flow, Kind::Data);
                    return;
                }
                let keep = (self.pattern.len() - 1).min(self.scratch.len());
                let from = self.scratch.len() - keep;
                let mut nt = Tail {
                    http: t.http,
                    len: keep as u8,
                    b: [0; 63],
                };
                nt.b[..keep].copy_from_slice(&self.scratch[from..]);
                *self.tail(ev.flow) = nt;
            }
            _ => {}
        }
    }
    fn stats(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("watch_data_events", self.data_events),
            ("watch_flows", self.watched),
            ("watch_alerts", self.alerts),
        ]
    }

    fn memory(&self, flows: usize) -> usize {
        crate::flow::footprint::grown_vec_bytes::<Tail>(flows)
    }
}
