//! The minimal TCP NF of the chain-length experiment: per-flow stream bytes per direction
//! and state changes, kept in a table indexed by flow id, and the flow's packets (which the
//! stack counts) read when it ends. It subscribes to data, state changes and flow ends
//! only — no per-packet event. With `bytes = false` it needs only the monitor level.

use crate::nfs::params::{ParamDoc, ParamError, Params};
use crate::stack::{App, Ctx, Event, Kind, Kinds, Level};

#[derive(Clone, Copy, Debug, Default)]
struct Flow {
    bytes: [u64; 2],
    changes: u32,
}

pub struct TcpCount {
    bytes: bool,
    flows: Vec<Flow>,
    ended: u64,
    packets: u64,
    stream_bytes: u64,
    changes: u64,
}

impl TcpCount {
    pub const PARAMS: &'static [ParamDoc] = &[ParamDoc {
        name: "bytes",
        ty: "bool",
        default: "true",
        doc: "count reassembled stream bytes (bytestream level) or only packets and states (monitor level)",
    }];

    pub fn new(bytes: bool) -> TcpCount {
        TcpCount {
            bytes,
            flows: Vec::new(),
            ended: 0,
            packets: 0,
            stream_bytes: 0,
            changes: 0,
        }
    }

    pub fn from_params(p: &mut Params) -> Result<TcpCount, ParamError> {
        let bytes = match p.value("bytes") {
            None => true,
            Some(toml::Value::Boolean(b)) => *b,
            Some(_) => return Err(p.err("`bytes` must be true or false")),
        };
        Ok(TcpCount::new(bytes))
    }

    #[inline]
    fn flow(&mut self, f: u32) -> &mut Flow {
        let i = f as usize;
        if i >= self.flows.len() {
            self.grow(i);
        }
        &mut self.flows[i]
    }

    /// Grows to the stack's flow bound at most, once.
    #[cold]
    #[inline(never)]
    fn grow(&mut self, i: usize) {
        self.flows.resize((i + 1).max(1024), Flow::default());
    }
}

impl App for TcpCount {
    fn name(&self) -> &str {
        "tcp_count"
    }

    fn level(&self) -> Level {
        if self.bytes {
            Level::Bytestream
        } else {
            Level::Monitor
        }
    }

    fn kinds(&self) -> Kinds {
        let k = Kinds::of(&[Kind::StateChange, Kind::FlowEnd]);
        if self.bytes {
            k.with(Kind::Data)
        } else {
            k
        }
    }

    // Inlined into the per-app delivery loop (`on_batch`): this is the hot path of the
    // chain-length experiment.
    #[inline(always)]
    fn on_event(&mut self, ev: &Event, cx: &mut Ctx<'_>) {
        let d = ev.dir as usize & 1;
        match ev.kind {
            Kind::Data => {
                let n = ev.byte_len() as u64;
                self.stream_bytes += n;
                self.flow(ev.flow).bytes[d] += n;
            }
            Kind::StateChange => {
                self.changes += 1;
                self.flow(ev.flow).changes += 1;
            }
            Kind::FlowEnd => {
                self.ended += 1;
                let p = cx.conn(ev.flow).map_or(0, |c| c.packets[0] + c.packets[1]);
                self.packets += p;
                // The slot starts clean for the next flow that gets it.
                *self.flow(ev.flow) = Flow::default();
            }
            _ => {}
        }
    }

    fn stats(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("count_packets", self.packets),
            ("count_bytes", self.stream_bytes),
            ("count_state_changes", self.changes),
            ("count_flows_ended", self.ended),
        ]
    }

    fn memory(&self, flows: usize) -> usize {
        crate::flow::footprint::grown_vec_bytes::<Flow>(flows.max(1024))
    }
}
