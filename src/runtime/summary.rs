//! The run's summary from a walk's counters, with the conservation checks: every NF
//! balances (in = out + dropped), and the input's packets all left or were dropped with
//! no buffer still held.

use super::chain::{NodeKind, INPUT_DROPS};
use super::counters::{NfSummary, PortSummary, Summary};
use super::walk::Walk;
use crate::optimise::fastpath::FastStats;

impl Walk {
    /// Closes the sinks and sums up a run of `loops` replays that took `seconds`.
    pub fn summary(
        &mut self,
        input_error: Option<String>,
        loops: u64,
        seconds: f64,
        fastpath: Option<FastStats>,
    ) -> anyhow::Result<Summary> {
        let mut closed = Vec::new();
        for s in self.sinks.iter_mut().flatten() {
            closed.extend(s.close());
        }
        let mut s = self.snapshot(input_error, loops, seconds, fastpath)?;
        s.output_errors.extend(closed);
        Ok(s)
    }

    /// The counters so far, checked for conservation (between batches, when every
    /// buffer is back in the pool); sinks' files stay open.
    pub fn snapshot(
        &self,
        input_error: Option<String>,
        loops: u64,
        seconds: f64,
        fastpath: Option<FastStats>,
    ) -> anyhow::Result<Summary> {
        let nodes = &self.chain.nodes;
        let mut nfs = Vec::new();
        let mut sinks = Vec::new();
        let mut dropped = 0u64;
        let mut out = 0u64;
        let mut bytes_out = 0u64;
        // Output lost after the run started: reported after the summary, exit non-zero.
        let mut output_errors = Vec::new();
        for (i, node) in nodes.iter().enumerate() {
            let c = &self.counters[i];
            dropped += c.packets_dropped();
            let pairs = |names: &[&str], v: &[u64]| -> Vec<(String, u64)> {
                names
                    .iter()
                    .zip(v)
                    .map(|(k, n)| (k.to_string(), *n))
                    .collect()
            };
            match &node.kind {
                NodeKind::Input => {}
                NodeKind::Nf { kind, nf } => {
                    if c.packets_in != c.packets_out() + c.packets_dropped() {
                        anyhow::bail!(
                            "internal error: NF `{}` lost packets: in {}, out {}, dropped {}",
                            node.name,
                            c.packets_in,
                            c.packets_out(),
                            c.packets_dropped()
                        );
                    }
                    if let Some(e) = nf.output_error() {
                        output_errors.push(format!("nf `{}`: {e}", node.name));
                    }
                    nfs.push(NfSummary {
                        name: node.name.clone(),
                        kind: kind.clone(),
                        packets_in: c.packets_in,
                        packets_out: c.packets_out(),
                        packets_dropped: c.packets_dropped(),
                        drops: pairs(&node.drop_reasons, &c.drops),
                        outputs: pairs(&node.outputs, &c.out),
                        stats: nf
                            .stats()
                            .into_iter()
                            .map(|(k, v)| (k.into_owned(), v))
                            .collect(),
                    })
                }
                NodeKind::Sink { .. } => {
                    let Some(s) = self.sinks[i].as_ref() else {
                        continue;
                    };
                    out += c.packets_in;
                    bytes_out += c.bytes_in;
                    sinks.push(s.summary(&node.name, c));
                }
            }
        }
        let input = &self.counters[0];
        if input.packets_in != out + dropped || self.pool.available() != self.pool.size() {
            anyhow::bail!(
                "internal error: conservation violated: in {}, out {out}, dropped {dropped}, buffers held {}",
                input.packets_in,
                self.pool.size() - self.pool.available()
            );
        }
        let secs = seconds.max(1e-9);
        Ok(Summary {
            chain: self.chain.name.clone(),
            input: String::new(),
            loops,
            packets_in: input.packets_in,
            packets_out: out,
            packets_dropped: dropped,
            bytes_in: input.bytes_in,
            bytes_out,
            seconds,
            mpps: input.packets_in as f64 / secs / 1e6,
            seconds_total: seconds,
            mpps_total: input.packets_in as f64 / secs / 1e6,
            data_rate_gbps: input.bytes_in as f64 * 8.0 / secs / 1e9,
            throughput_gbps: bytes_out as f64 * 8.0 / secs / 1e9,
            input_drops: INPUT_DROPS
                .iter()
                .zip(&input.drops)
                .map(|(k, n)| (k.to_string(), *n))
                .collect(),
            nfs,
            ports: (0..self.chain.ports)
                .map(|p| PortSummary {
                    port: p,
                    rx: self.rx[p as usize],
                    tx: self.tx[p as usize],
                    name: self.live.get(p as usize).map(|l| l.describe()),
                    live: self.live.get(p as usize).map(|l| l.counters()),
                })
                .collect(),
            sinks,
            input_error,
            output_errors,
            fastpath,
            workers: Vec::new(),
            fastpath_auto: None,
            aggregate_stages: None,
        })
    }
}
