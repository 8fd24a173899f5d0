//! Per-node counters kept during a run, and the summary built from them at the end.

use serde::Serialize;

use crate::io::PortCounters;
use crate::optimise::aggregate::StageCounters;
use crate::optimise::fastpath::{AutoStats, FastStats};

/// Counters of one node. Invariant checked after every run: in = out + dropped.
#[derive(Clone, Debug, Default)]
pub struct NodeCounters {
    pub packets_in: u64,
    pub bytes_in: u64,
    /// Packets per output.
    pub out: Vec<u64>,
    /// Packets per drop reason.
    pub drops: Vec<u64>,
}

impl NodeCounters {
    pub fn new(outputs: usize, reasons: usize) -> NodeCounters {
        NodeCounters {
            out: vec![0; outputs],
            drops: vec![0; reasons],
            ..Default::default()
        }
    }

    pub fn packets_out(&self) -> u64 {
        self.out.iter().sum()
    }

    pub fn packets_dropped(&self) -> u64 {
        self.drops.iter().sum()
    }

    /// Adds `o`'s counts (same outputs and reasons) to these.
    pub fn add(&mut self, o: &NodeCounters) {
        self.packets_in += o.packets_in;
        self.bytes_in += o.bytes_in;
        for (a, b) in self.out.iter_mut().zip(&o.out) {
            *a += b;
        }
        for (a, b) in self.drops.iter_mut().zip(&o.drops) {
            *a += b;
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct NfSummary {
    pub name: String,
    pub kind: String,
    pub packets_in: u64,
    pub packets_out: u64,
    pub packets_dropped: u64,
    /// Drop count per reason (only reasons that occurred).
    pub drops: Vec<(String, u64)>,
    /// Packets per output, when the NF has more than one.
    pub outputs: Vec<(String, u64)>,
    /// The NF's own counters.
    pub stats: Vec<(String, u64)>,
}

#[derive(Clone, Debug, Serialize)]
pub struct PortSummary {
    pub port: u16,
    /// Packets that entered on this virtual port.
    pub rx: u64,
    /// Packets sent out of this port (a flooded packet counts on every port it leaves by).
    pub tx: u64,
    /// A `[[port]]`'s description: `af_packet:IFACE`, `pcap:PATH`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// That port's own counters (kernel drops and tx errors among them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub live: Option<PortCounters>,
}

#[derive(Clone, Debug, Serialize)]
pub struct SinkSummary {
    pub name: String,
    pub packets: u64,
    pub bytes: u64,
    pub flooded: u64,
    /// Packets written with a timestamp clamped to the format's last instant (2106).
    pub clamped_timestamps: u64,
    pub path: Option<String>,
}

/// What a run did. Field names are the `--json` keys.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub chain: String,
    pub input: String,
    pub loops: u64,
    pub packets_in: u64,
    /// Packets that reached a sink; a flooded packet counts once.
    pub packets_out: u64,
    pub packets_dropped: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// The chain's processing: from the first packet read to the last one through the
    /// chain (reading the input as it goes); not opening, setting up, flushing output.
    pub seconds: f64,
    /// Packets in per `seconds`.
    pub mpps: f64,
    /// The whole run as a user waits for it: loading the chain, opening the input,
    /// processing, writing and closing the outputs (set by `catena run`; equal to
    /// `seconds` when a library caller runs a chain).
    pub seconds_total: f64,
    /// Packets in per `seconds_total`.
    pub mpps_total: f64,
    /// Offered load: input bytes per second, in Gbit/s.
    pub data_rate_gbps: f64,
    /// Forwarded bytes per second, in Gbit/s.
    pub throughput_gbps: f64,
    /// Drops before the first NF (oversize packets, pool exhaustion).
    pub input_drops: Vec<(String, u64)>,
    pub nfs: Vec<NfSummary>,
    pub ports: Vec<PortSummary>,
    pub sinks: Vec<SinkSummary>,
    /// An input error that ended reading early (the packets before it were processed).
    pub input_error: Option<String>,
    /// Output files whose writing failed during the run (pcap sinks, flow records,
    /// alerts): the run exits non-zero after its summary.
    pub output_errors: Vec<String>,
    /// FastPath counters, when it was on.
    pub fastpath: Option<FastStats>,
    /// Per worker, when the chain ran sharded (`workers` > 1); the fields above are the
    /// sums over them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub workers: Vec<WorkerSummary>,
    /// `fastpath = "auto"`: the decision and the measured costs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fastpath_auto: Option<AutoStats>,
    /// PA-Flow between in-process stages (`aggregate_stages = true`): stage 1's ring.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aggregate_stages: Option<StageCounters>,
}

/// What one of several sharded workers did.
#[derive(Clone, Debug, Serialize)]
pub struct WorkerSummary {
    pub worker: usize,
    /// The core it was pinned to, if it was.
    pub core: Option<usize>,
    pub packets_in: u64,
    pub packets_out: u64,
    pub packets_dropped: u64,
    /// Its own processing time (from its first packet to its last).
    pub seconds: f64,
    pub mpps: f64,
    /// The CPU time its thread used over the same span (`CLOCK_THREAD_CPUTIME_ID`):
    /// unlike `seconds`, not inflated by waiting for a core on a loaded machine.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_seconds: Option<f64>,
    /// Replays: the other workers' records it stepped over one by one (where the run
    /// clock goes back or a record is oversize, see runtime/rss.rs); the rest it never
    /// reads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub records_stepped: Option<u64>,
}

impl Summary {
    /// Sets the whole run's time (`seconds_total`) and its rate.
    pub fn set_total(&mut self, seconds: f64) {
        self.seconds_total = seconds;
        self.mpps_total = self.packets_in as f64 / seconds.max(1e-9) / 1e6;
    }

    /// The human-readable report `catena run` prints.
    pub fn render(&self) -> String {
        let mut s = String::new();
        s.push_str(&format!(
            "chain {} on {}{}\n",
            self.chain,
            self.input,
            if self.loops > 1 {
                format!(" ×{}", self.loops)
            } else {
                String::new()
            }
        ));
        s.push_str(&format!(
            "  packets in {}  out {}  dropped {}   bytes in {}  out {}\n",
            self.packets_in, self.packets_out, self.packets_dropped, self.bytes_in, self.bytes_out
        ));
        s.push_str(&format!(
            "  whole run  {:.3} s   {:.2} Mpps   (start to exit: load, read, process, write)\n  processing {:.3} s   {:.2} Mpps   data rate {:.2} Gbps   throughput {:.2} Gbps\n",
            self.seconds_total,
            self.mpps_total,
            self.seconds,
            self.mpps,
            self.data_rate_gbps,
            self.throughput_gbps
        ));
        if self.input_drops.iter().any(|(_, n)| *n > 0) {
            s.push_str(&format!(
                "  input drops: {}\n",
                fmt_pairs(&self.input_drops)
            ));
        }
        s.push_str(&format!(
            "  {:<14} {:<12} {:>12} {:>12} {:>12}  drops by reason\n",
            "nf", "kind", "in", "out", "dropped"
        ));
        for n in &self.nfs {
            s.push_str(&format!(
                "  {:<14} {:<12} {:>12} {:>12} {:>12}  {}\n",
                n.name,
                n.kind,
                n.packets_in,
                n.packets_out,
                n.packets_dropped,
                fmt_pairs(&n.drops)
            ));
            if n.outputs.len() > 1 {
                s.push_str(&format!(
                    "  {:<14} outputs: {}\n",
                    "",
                    fmt_pairs(&n.outputs)
                ));
            }
            if !n.stats.is_empty() {
                s.push_str(&format!("  {:<14} {}\n", "", fmt_pairs(&n.stats)));
            }
        }
        let ports: Vec<String> = self
            .ports
            .iter()
            .map(|p| format!("{}: rx {} tx {}", p.port, p.rx, p.tx))
            .collect();
        s.push_str(&format!("  ports  {}\n", ports.join("   ")));
        for p in &self.ports {
            if let (Some(name), Some(c)) = (&p.name, &p.live) {
                s.push_str(&format!(
                    "  port {} {:<20} rx {}  tx {}  kernel drops {}  tx errors {}  oversize {}\n",
                    p.port, name, c.rx, c.tx, c.kernel_drops, c.tx_errors, c.rx_oversize
                ));
                if c.tx_aggregates + c.rx_aggregates > 0 {
                    s.push_str(&format!(
                        "  port {} aggregates (PA-Flow): sent {} holding {} packets, received {} holding {}, bad {}\n",
                        p.port, c.tx_aggregates, c.tx_aggregated, c.rx_aggregates, c.rx_unpacked, c.rx_bad_aggregate
                    ));
                }
            }
        }
        if let Some(a) = &self.aggregate_stages {
            s.push_str(&format!(
                "  rings between stages aggregate (PA-Flow): {} frames holding {} packets, {} packets sent as they are, {} waits for the next stage\n",
                a.frames, a.aggregated, a.plain, a.supply_waits
            ));
        }
        // `fastpath = "auto"` that stays off from the chain: a plain run.
        if let Some(why) = self.fastpath_auto.and_then(|a| a.static_off) {
            s.push_str(&format!("  fastpath  auto: {why}\n"));
        }
        if let Some(f) = &self.fastpath {
            s.push_str(&format!(
                "  fastpath  hits {}  misses {}  installed {}  invalidated {}  evicted {}  expired {}  ended {}  refused {}  unconsolidatable {}  unrecorded {}  deferred {}  folded {}\n",
                f.hits, f.misses, f.installed, f.invalidated, f.evicted, f.expired, f.ended, f.refused, f.unconsolidatable, f.unrecorded, f.deferred, f.folded
            ));
            if let Some(a) = &self.fastpath_auto {
                let cost = |c: u64| {
                    if c == 0 {
                        "not measured".to_string()
                    } else {
                        format!("{c} cycles/packet")
                    }
                };
                s.push_str(&format!(
                    "  fastpath  auto: {} at the end ({} switches); measured on {}, off {} ({} chunks timed)\n",
                    if a.on { "on" } else { "off" },
                    a.switches,
                    cost(a.cycles_on),
                    cost(a.cycles_off),
                    a.samples
                ));
                // issue 18 (fastpath): trials the traffic made pointless.
                if a.skipped > 0 {
                    s.push_str(&format!(
                        "  fastpath  auto: {} trials not made: the traffic gave a hit {}.{:03} NFs' per-flow work a packet to skip, under {}\n",
                        a.skipped,
                        a.work_permille / 1000,
                        a.work_permille % 1000,
                        crate::optimise::fastpath::AUTO_MIN_STATEFUL
                    ));
                }
            }
            // Entries pushed out before their flows end are re-recorded, at several times
            // the chain's cost each: worth saying how to stop it.
            if f.evicted * 4 > f.installed + f.deferred && f.evicted >= 100 {
                s.push_str(
                    "  fastpath  note: many entries were evicted while their flows were live; a larger `fastpath_entries` avoids re-recording them\n",
                );
            }
        }
        for w in &self.workers {
            s.push_str(&format!(
                "  worker {:<3} core {:<4} in {:>10}  out {:>10}  dropped {:>10}   {:.3} s  {:.2} Mpps\n",
                w.worker,
                w.core.map_or("-".to_string(), |c| c.to_string()),
                w.packets_in,
                w.packets_out,
                w.packets_dropped,
                w.seconds,
                w.mpps
            ));
        }
        for k in &self.sinks {
            s.push_str(&format!(
                "  sink {:<8} {} packets ({} flooded{}){}\n",
                k.name,
                k.packets,
                k.flooded,
                if k.clamped_timestamps > 0 {
                    format!(
                        ", {} timestamps past 2106 written as 2106-02-07 06:28:15",
                        k.clamped_timestamps
                    )
                } else {
                    String::new()
                },
                k.path
                    .as_ref()
                    .map_or(String::new(), |p| format!(" -> {p}"))
            ));
        }
        s
    }
}

fn fmt_pairs(v: &[(String, u64)]) -> String {
    let parts: Vec<String> = v
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}
