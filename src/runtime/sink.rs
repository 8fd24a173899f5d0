//! Sinks: where packets leave the chain. Each counts what reaches it (and the ports it
//! leaves by) and writes it to its pcap file, if it has one.

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use super::chain::NodeKind;
use super::counters::{NodeCounters, SinkSummary};
use super::walk::Walk;
use crate::io::{PcapHeader, PcapWriter, Port};
use crate::packet::{Packet, FLOOD, NO_PORT};

type Writer = PcapWriter<std::fs::File>;

pub(super) struct SinkState {
    writer: Option<Writer>,
    path: Option<PathBuf>,
    /// The first write error; the writer is closed then, and the run fails at the end.
    write_error: Option<String>,
    flooded: u64,
    /// Timestamps the writer clamped, kept once it is closed.
    clamped: u64,
    /// Sharded runs: each written packet's position in the input, 8 bytes little-endian
    /// (`PATH.seq`), to merge the workers' files back into input order.
    seqs: Option<BufWriter<std::fs::File>>,
}

/// The file beside a sink's output that holds its packets' input positions.
pub(super) fn seq_path(p: &std::path::Path) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(".seq");
    PathBuf::from(s)
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
            let seqs = match (&path, self.sink_seqs) {
                (Some(p), true) => {
                    let q = seq_path(p);
                    Some(BufWriter::new(std::fs::File::create(&q).map_err(|e| {
                        anyhow::anyhow!("{}: cannot create: {e}", q.display())
                    })?))
                }
                _ => None,
            };
            self.sinks.push(Some(SinkState {
                writer,
                path,
                write_error: None,
                flooded: 0,
                clamped: 0,
                seqs,
            }));
        }
        Ok(())
    }
}

impl Walk {
    /// Opens the NFs' own files (flow records, alerts) and notes which NFs have any:
    /// a path that cannot be written is an error naming the NF.
    pub fn open_nf_outputs(&mut self) -> anyhow::Result<()> {
        self.nf_outputs.clear();
        for (i, n) in self.chain.nodes.iter_mut().enumerate() {
            if let NodeKind::Nf { nf, .. } = &mut n.kind {
                nf.open_outputs()
                    .map_err(|e| anyhow::anyhow!("nf `{}`: {e}", n.name))?;
                if nf.has_outputs() {
                    self.nf_outputs.push(i);
                }
            }
        }
        Ok(())
    }

    /// Whether an output already failed to write (a sink's file, or an NF's records or
    /// alerts): a live run then stops, as a replay ends, rather than forward unrecorded
    /// until someone stops it. Called every live refresh (250 ms), and by a later stage
    /// once per chunk (its thread holds its sinks). Asks only the NFs noted with files
    /// of their own: a chain with none makes no call.
    pub fn output_failed(&self) -> bool {
        self.sinks.iter().flatten().any(|s| s.write_error.is_some())
            || self
                .nf_outputs
                .iter()
                .any(|&i| match &self.chain.nodes[i].kind {
                    NodeKind::Nf { nf, .. } => nf.output_error().is_some(),
                    _ => false,
                })
    }
}

impl SinkState {
    /// Flushes and closes the file; the first write error naming the file, if any (the
    /// run reports it after its summary and exits non-zero).
    pub fn close(&mut self) -> Option<String> {
        let shown = self
            .path
            .as_ref()
            .map_or(String::new(), |p| p.display().to_string());
        if let Some(w) = &self.writer {
            self.clamped = w.clamped();
        }
        let finished = self.writer.take().map(|w| w.finish().map(drop));
        let error = match (self.write_error.take(), finished) {
            (Some(e), _) => Some(format!("{shown}: writing failed: {e}")),
            (None, Some(Err(e))) => Some(format!("{shown}: writing failed: {e}")),
            _ => None,
        };
        let seq_error = self.seqs.take().and_then(|mut q| q.flush().err());
        error.or(seq_error.map(|e| format!("{shown}.seq: writing failed: {e}")))
    }

    /// The summary of sink `name` with counters `c` (its file may still be open).
    pub fn summary(&self, name: &str, c: &NodeCounters) -> SinkSummary {
        SinkSummary {
            name: name.to_string(),
            packets: c.packets_in,
            bytes: c.bytes_in,
            flooded: self.flooded,
            clamped_timestamps: self.writer.as_ref().map_or(self.clamped, |w| w.clamped()),
            path: self.path.as_ref().map(|p| p.display().to_string()),
        }
    }
}

/// [`to_sink`] for a whole batch at a sink with no file and no live port: only the
/// counting, without a call per packet.
#[inline]
pub(super) fn count_at_sink(
    s: &mut SinkState,
    c: &mut NodeCounters,
    tx: &mut [u64],
    b: &crate::packet::Batch,
) {
    let mut bytes = 0u64;
    for p in b.iter() {
        bytes += p.len() as u64;
        let m = p.meta();
        match m.egress {
            NO_PORT => {}
            FLOOD => {
                s.flooded += 1;
                for (port, t) in tx.iter_mut().enumerate() {
                    *t += (port != m.in_port as usize) as u64;
                }
            }
            e => {
                if let Some(t) = tx.get_mut(e as usize) {
                    *t += 1;
                }
            }
        }
    }
    c.bytes_in += bytes;
}

/// Whether [`count_at_sink`] does all [`to_sink`] would: no file to write, no live port.
#[inline]
pub(super) fn counts_only(s: &SinkState, live: &[Box<dyn Port>]) -> bool {
    s.writer.is_none() && live.is_empty()
}

/// Counts one packet at a sink (its bytes, the port it leaves by); flooding, writing and
/// live ports go to [`deliver`], out of line. Inlined at every per-packet caller (the
/// walk, FastPath's hits), so the counting exists once and a sink that only counts pays
/// no call a packet.
#[inline(always)]
pub(super) fn to_sink(
    s: &mut SinkState,
    c: &mut NodeCounters,
    tx: &mut [u64],
    live: &mut [Box<dyn Port>],
    shift: u64,
    p: &Packet,
) {
    count_one(c, tx, p);
    if p.meta().egress == FLOOD || !counts_only(s, live) {
        deliver_cold(s, tx, live, shift, p);
    }
}

/// [`to_sink`] for every packet of `b` at a sink that writes or sends (not
/// [`counts_only`]): the tail inlined, since every packet takes it.
#[inline]
pub(super) fn to_sink_all(
    s: &mut SinkState,
    c: &mut NodeCounters,
    tx: &mut [u64],
    live: &mut [Box<dyn Port>],
    shift: u64,
    b: &crate::packet::Batch,
) {
    for p in b.iter() {
        count_one(c, tx, p);
        deliver(s, tx, live, shift, p);
    }
}

/// The counting: the packet's bytes, and the port it leaves by unless it is flooded
/// ([`deliver`] counts those) or leaves by none.
#[inline(always)]
fn count_one(c: &mut NodeCounters, tx: &mut [u64], p: &Packet) {
    let e = p.meta().egress;
    c.bytes_in += p.len() as u64;
    if e < NO_PORT {
        if let Some(t) = tx.get_mut(e as usize) {
            *t += 1;
        }
    }
}

/// [`deliver`] out of line, for callers whose packets rarely need it (a hit to a sink
/// that only counts).
#[cold]
#[inline(never)]
fn deliver_cold(
    s: &mut SinkState,
    tx: &mut [u64],
    live: &mut [Box<dyn Port>],
    shift: u64,
    p: &Packet,
) {
    deliver(s, tx, live, shift, p);
}

/// The rest of [`to_sink`]: a flooded packet counted on every other port, the packet
/// sent to its live ports and written to the sink's file.
#[inline(always)]
fn deliver(s: &mut SinkState, tx: &mut [u64], live: &mut [Box<dyn Port>], shift: u64, p: &Packet) {
    let m = p.meta();
    match m.egress {
        FLOOD => {
            s.flooded += 1;
            for (port, t) in tx.iter_mut().enumerate() {
                *t += (port != m.in_port as usize) as u64;
            }
            for (port, l) in live.iter_mut().enumerate() {
                if port != m.in_port as usize {
                    l.send(p.data(), m.ts_ns.wrapping_sub(shift), m.wire_len);
                }
            }
        }
        NO_PORT => {}
        e => {
            if let Some(l) = live.get_mut(e as usize) {
                l.send(p.data(), m.ts_ns.wrapping_sub(shift), m.wire_len);
            }
        }
    }
    if let Some(w) = s.writer.as_mut() {
        if let Err(e) = w.write_packet(m.ts_ns.wrapping_sub(shift), m.wire_len, p.data()) {
            s.write_error = Some(e.to_string());
            s.writer = None;
        }
        if let Some(q) = s.seqs.as_mut() {
            if let Err(e) = q.write_all(&m.seq.to_le_bytes()) {
                s.write_error = Some(e.to_string());
                s.seqs = None;
            }
        }
    }
}
