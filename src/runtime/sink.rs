//! Sinks: where packets leave the chain. Each counts what reaches it (and the ports it
//! leaves by) and writes it to its pcap file, if it has one.

use std::io::BufWriter;
use std::path::PathBuf;

use super::chain::NodeKind;
use super::counters::{NodeCounters, SinkSummary};
use super::walk::Walk;
use crate::io::{PcapHeader, PcapWriter};
use crate::packet::{Packet, FLOOD, NO_PORT};

type Writer = PcapWriter<BufWriter<std::fs::File>>;

pub(super) struct SinkState {
    writer: Option<Writer>,
    path: Option<PathBuf>,
    /// The first write error; the writer is closed then, and the run fails at the end.
    write_error: Option<String>,
    flooded: u64,
}

impl Walk {
    /// Opens the sinks' output files; `outputs` overrides paths by sink name. Errors name
    /// the file.
    pub fn open_sinks(
        &mut self,
        header: PcapHeader,
        outputs: &[(String, PathBuf)],
    ) -> anyhow::Result<()> {
        self.sinks = Vec::with_capacity(self.chain.nodes.len());
        for node in &self.chain.nodes {
            let NodeKind::Sink { path } = &node.kind else {
                self.sinks.push(None);
                continue;
            };
            let path = outputs
                .iter()
                .find(|(n, _)| *n == node.name)
                .map(|(_, p)| p.clone())
                .or_else(|| path.clone());
            let writer =
                match &path {
                    Some(p) => Some(PcapWriter::create(p, header).map_err(|e| {
                        anyhow::anyhow!("{}: cannot create output: {e}", p.display())
                    })?),
                    None => None,
                };
            self.sinks.push(Some(SinkState {
                writer,
                path,
                write_error: None,
                flooded: 0,
            }));
        }
        Ok(())
    }
}

impl SinkState {
    /// Flushes and closes the file: the summary of sink `name` with counters `c`, and
    /// the first write error naming the file (the run reports it after its summary and
    /// exits non-zero).
    pub fn close(self, name: &str, c: &NodeCounters) -> (SinkSummary, Option<String>) {
        let shown = self
            .path
            .as_ref()
            .map_or(String::new(), |p| p.display().to_string());
        let finished = self.writer.map(|w| w.finish().map(drop));
        let error = match (self.write_error, finished) {
            (Some(e), _) => Some(format!("{shown}: writing failed: {e}")),
            (None, Some(Err(e))) => Some(format!("{shown}: writing failed: {e}")),
            _ => None,
        };
        let s = SinkSummary {
            name: name.to_string(),
            packets: c.packets_in,
            bytes: c.bytes_in,
            flooded: self.flooded,
            path: self.path.map(|p| p.display().to_string()),
        };
        (s, error)
    }
}

/// Counts and writes one packet at a sink.
#[inline]
pub(super) fn to_sink(
    s: &mut SinkState,
    c: &mut NodeCounters,
    tx: &mut [u64],
    shift: u64,
    p: &Packet,
) {
    let m = p.meta();
    c.bytes_in += p.len() as u64;
    match m.egress {
        FLOOD => {
            s.flooded += 1;
            for (port, t) in tx.iter_mut().enumerate() {
                *t += (port != m.in_port as usize) as u64;
            }
        }
        NO_PORT => {}
        e => {
            if let Some(t) = tx.get_mut(e as usize) {
                *t += 1;
            }
        }
    }
    if let Some(w) = s.writer.as_mut() {
        if let Err(e) = w.write_packet(m.ts_ns.wrapping_sub(shift), m.wire_len, p.data()) {
            s.write_error = Some(e.to_string());
            s.writer = None;
        }
    }
}
