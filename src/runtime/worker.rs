//! The run-to-completion worker: the trace in chunks of a batch, each ingested and walked
//! through the chain (or sorted by FastPath into hits and misses first), with control
//! commands applied between chunks. The walk itself is in `walk.rs`, the input side in
//! `ingest.rs`, the sinks in `sink.rs`, the summary in `summary.rs`.

use std::path::PathBuf;
use std::time::Instant;

use super::chain::{Chain, NodeKind};
use super::control::{Command, ControlPort, Scheduled};
use super::counters::Summary;
use super::profile_check::Snapshot;
use super::walk::Walk;
use crate::io::Trace;
use crate::nfs::Nf;
use crate::optimise::fastpath::FastPath;
use crate::packet::MAX_BATCH;

/// How the worker reports progress on long runs.
pub trait Progress {
    /// Called about every few thousand packets with the count so far.
    fn update(&mut self, done: u64, total: u64);
    fn finish(&mut self) {}
}

pub struct RunOptions {
    /// Replays of the trace (timestamps shift by the trace's span each loop).
    pub loops: u64,
    /// Overrides the sink paths by sink name (`--output` sets `out`).
    pub outputs: Vec<(String, PathBuf)>,
    /// Commands applied just before given packets enter the chain.
    pub schedule: Vec<Scheduled>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            loops: 1,
            outputs: Vec::new(),
            schedule: Vec::new(),
        }
    }
}

pub struct Runner {
    pub(super) walk: Walk,
    /// FastPath state when the chain has it on.
    fast: Option<Box<FastPath>>,
    control: Option<ControlPort>,
}

impl Runner {
    /// Prepares a run of `chain` over packets of at most `max_packet` bytes.
    pub fn new(chain: Chain, max_packet: usize) -> Runner {
        let cap = Walk::batch_cap(&chain);
        let fast = chain.fastpath.map(|cfg| {
            let nfs: Vec<Option<&dyn Nf>> = chain
                .nodes
                .iter()
                .map(|node| match &node.kind {
                    NodeKind::Nf { nf, .. } => Some(&**nf),
                    _ => None,
                })
                .collect();
            Box::new(FastPath::new(cfg, &nfs, cap))
        });
        Runner {
            walk: Walk::new(chain, max_packet, fast.is_some()),
            fast,
            control: None,
        }
    }

    /// Checks after every NF call that the NF wrote only what its profile declares
    /// (on by default in debug builds). A violation ends the run with an error naming it.
    pub fn check_profiles(&mut self, on: bool) {
        let cap = self.walk.spare.capacity();
        self.walk.check = on.then(|| Snapshot::new(cap));
    }

    pub fn chain(&self) -> &Chain {
        &self.walk.chain
    }

    /// Runs the whole trace (`opts.loops` times) through the chain.
    pub fn run(
        &mut self,
        trace: &Trace,
        opts: &RunOptions,
        progress: &mut dyn Progress,
    ) -> anyhow::Result<Summary> {
        let started = Instant::now();
        self.run_share(trace, opts, None, progress)?;
        self.finish(trace, opts, started.elapsed().as_secs_f64())
    }

    /// Runs the records of `trace` that `share` lists (indices in the trace, ascending;
    /// all when None) `opts.loops` times. Scheduled changes apply by position in the
    /// whole input, so a worker given a share of it changes state between the same
    /// packets as one worker given all of it.
    pub(super) fn run_share(
        &mut self,
        trace: &Trace,
        opts: &RunOptions,
        share: Option<&[u32]>,
        progress: &mut dyn Progress,
    ) -> anyhow::Result<()> {
        self.walk.open_sinks(trace, &opts.outputs)?;
        // NFs' own files (flow records, alerts) too: a path that cannot be written is an
        // error before the first packet.
        for n in &mut self.walk.chain.nodes {
            if let NodeKind::Nf { nf, .. } = &mut n.kind {
                nf.open_outputs()
                    .map_err(|e| anyhow::anyhow!("nf `{}`: {e}", n.name))?;
            }
        }
        self.walk.link = trace.link();
        let (bytes, recs) = trace.raw();
        let len = share.map_or(recs.len(), <[u32]>::len);
        // Position in the trace of the share's i-th record.
        let at = |i: usize| share.map_or(i, |s| s[i] as usize);
        let input = recs.len() as u64 * opts.loops;
        let total = len as u64 * opts.loops;
        let span = trace.span_ns();
        let mut done = 0u64;
        let mut next_report = 0u64;
        let mut schedule = opts.schedule.clone();
        schedule.sort_by_key(|c| c.at);
        let mut next_change = 0;
        for lp in 0..opts.loops {
            self.walk.shift = span.wrapping_mul(lp);
            let base = recs.len() as u64 * lp;
            let mut pos = 0;
            while pos < len {
                let seq = base + at(pos) as u64;
                // A batch ends where a scheduled change applies, so the change falls
                // exactly between the packets it names.
                while let Some(c) = schedule.get(next_change).filter(|c| c.at <= seq) {
                    self.apply(&c.nf, &c.cmd).map_err(|e| {
                        anyhow::anyhow!("change at packet {}: `{} {}`: {e}", c.at, c.nf, c.cmd)
                    })?;
                    next_change += 1;
                }
                let mut end = (pos + MAX_BATCH).min(len);
                if let Some(c) = schedule.get(next_change) {
                    while end > pos + 1 && base + at(end - 1) as u64 >= c.at {
                        end -= 1;
                    }
                }
                self.poll_control();
                match share {
                    None => self.walk.ingest(bytes, recs, pos..end, base),
                    Some(s) => {
                        self.walk
                            .ingest(bytes, recs, s[pos..end].iter().map(|&i| i as usize), base)
                    }
                }
                match self.fast.as_deref_mut() {
                    Some(f) => f.chunk(&mut self.walk),
                    None => self.walk.drain(None),
                }
                if let Some(v) = self.walk.violation.take() {
                    anyhow::bail!("{v}");
                }
                done += (end - pos) as u64;
                pos = end;
                if done >= next_report {
                    progress.update(done, total);
                    next_report = done + 65_536;
                }
            }
            self.walk.end_loop(recs);
        }
        // Changes after this share's last packet but within the input still apply (a
        // sharded worker's state then matches one worker's at the end).
        while let Some(c) = schedule.get(next_change).filter(|c| c.at < input) {
            self.apply(&c.nf, &c.cmd).map_err(|e| {
                anyhow::anyhow!("change at packet {}: `{} {}`: {e}", c.at, c.nf, c.cmd)
            })?;
            next_change += 1;
        }
        if let Some(c) = schedule.get(next_change) {
            anyhow::bail!(
                "change at packet {} is past the end of the input ({input} packets)",
                c.at
            );
        }
        progress.finish();
        Ok(())
    }

    /// Ends a run: counts settled, NFs' end reports, the summary.
    pub(super) fn finish(
        &mut self,
        trace: &Trace,
        opts: &RunOptions,
        seconds: f64,
    ) -> anyhow::Result<Summary> {
        self.settle_counts();
        // NFs that report at the end (flow records) do it now, before the summary.
        for n in &mut self.walk.chain.nodes {
            if let NodeKind::Nf { nf, .. } = &mut n.kind {
                nf.finish();
            }
        }
        let stats = self.fast.as_ref().map(|f| f.stats);
        self.walk.summary(trace, opts.loops, seconds, stats)
    }

    /// Takes commands from a control socket to be applied between batches.
    pub fn attach_control(&mut self, port: ControlPort) {
        self.control = Some(port);
    }

    /// Applies `cmd` to the NF named `nf` now (between batches).
    pub fn apply(&mut self, nf: &str, cmd: &str) -> Result<String, String> {
        let chain = &self.walk.chain;
        let names = || {
            chain
                .nodes
                .iter()
                .filter(|n| matches!(n.kind, NodeKind::Nf { .. }))
                .map(|n| n.name.clone())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let Some(i) = chain.node(nf) else {
            return Err(format!("no NF named `{nf}` (NFs: {})", names()));
        };
        if !matches!(chain.nodes[i].kind, NodeKind::Nf { .. }) {
            return Err(format!("`{nf}` is not an NF (NFs: {})", names()));
        }
        // The NF's counters are whole before it answers or changes.
        self.settle_counts();
        let r = match self.walk.nf_mut(i) {
            Some(nf) => nf.control(cmd),
            None => return Err(format!("`{nf}` is not an NF")),
        };
        if let (Ok(_), Some(f)) = (&r, self.fast.as_deref_mut()) {
            f.invalidate_through(i);
        }
        r
    }

    /// Adds the hits FastPath entries hold (and retired entries held) to the per-NF
    /// counters and to the NFs that count in entries.
    fn settle_counts(&mut self) {
        if let Some(f) = self.fast.as_deref_mut() {
            f.settle_counts(&mut self.walk);
        }
    }

    /// Drains pending control commands; when none are pending this is one atomic load.
    #[inline]
    fn poll_control(&mut self) {
        let Some(port) = &self.control else { return };
        let pending: Vec<Command> = port.rx.try_iter().collect();
        for c in pending {
            let r = self.apply(&c.nf, &c.cmd);
            if let Some(reply) = c.reply {
                let _ = reply.send(r);
            }
        }
    }
}

/// No progress output (tests, benchmarks).
pub struct NoProgress;

impl Progress for NoProgress {
    fn update(&mut self, _: u64, _: u64) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfs::{Context, Nf, Profile};
    use crate::packet::{Batch, Fields, LinkKind};

    /// Decrements the TTL but declares only the egress port.
    struct Rogue(Profile);

    impl Nf for Rogue {
        fn profile(&self) -> &Profile {
            &self.0
        }
        fn process(&mut self, b: &mut Batch, _: &Context) {
            for p in b {
                let o = p.layers().l3_off as usize;
                p.data_mut()[o + 8] -= 1;
            }
        }
    }

    fn rogue(writes: Fields) -> Box<dyn Nf> {
        Box::new(Rogue(Profile {
            reads: Fields::NONE,
            writes,
            may_drop: false,
            changes_length: false,
            per_flow_state: false,
            outputs: &["out"],
            drop_reasons: &[],
        }))
    }

    fn trace() -> Trace {
        let mut f = [0u8; 60];
        f[12] = 8;
        f[14] = 0x45;
        f[22] = 64;
        let h = crate::io::PcapHeader::new(1, false);
        Trace::from_packets(LinkKind::Ethernet, h, (0..40).map(|i| (i, &f[..])))
    }

    #[test]
    fn undeclared_write_is_caught() {
        let chain = Chain::linear("t", 1, 1, vec![("bad".into(), rogue(Fields::EGRESS))]);
        let mut r = Runner::new(chain, 60);
        r.check_profiles(true);
        let e = r
            .run(&trace(), &RunOptions::default(), &mut NoProgress)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "NF `bad` (custom) wrote ip.ttl without declaring it in its profile"
        );
    }

    #[test]
    fn declared_write_passes_and_counts_balance() {
        let chain = Chain::linear("t", 1, 1, vec![("ok".into(), rogue(Fields::IP_TTL))]);
        let mut r = Runner::new(chain, 60);
        r.check_profiles(true);
        let s = r
            .run(&trace(), &RunOptions::default(), &mut NoProgress)
            .unwrap();
        assert_eq!(
            (s.packets_in, s.packets_out, s.packets_dropped),
            (40, 40, 0)
        );
    }
}
