//! Live input: the worker pulls batches from ports (AF_PACKET, paced pcap replays) rather
//! than from a trace, and what reaches a sink leaves by its egress port (the sink's
//! `to_sink` queues it; one flush per port per batch sends it). It runs until `stop` is
//! set (SIGINT/SIGTERM) or every receiving port has ended (a replayed file), then
//! flushes, closes the ports and returns the summary.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::{RunOptions, Runner};
use crate::io::{PcapHeader, Port, Recv};
use crate::packet::{FastMark, MAX_BATCH, NOT_RECORDED, NO_PORT};
use crate::runtime::api::{BatchHist, Shared};
use crate::runtime::counters::Summary;
use crate::runtime::reload::Base;
use crate::runtime::walk::{hold, release};

/// The input's drop reason for packets larger than the buffers (`chain::INPUT_DROPS`).
const OVERSIZE: usize = 0;
/// PA-Flow aggregated frames found truncated or inconsistent (`chain::INPUT_DROPS`).
const BAD_AGGREGATE: usize = 2;

/// Longest wait for packets before the stop flag and control commands are looked at again.
const IDLE_WAIT: Duration = Duration::from_millis(50);
/// How often kernel counters (drops) are read.
const REFRESH: Duration = Duration::from_millis(250);

/// What a live run watches besides its ports.
pub struct Live<'a> {
    /// Set by a signal handler: finish the batch in hand and end.
    pub stop: &'a AtomicBool,
    /// Set by SIGHUP: reload the chain file between batches (see [`Runner::reload_from`]).
    pub reload: Option<&'a AtomicBool>,
    /// Where the counters so far are published about every `REFRESH`, between batches
    /// (the HTTP API's live `/stats` and `/metrics`); None to skip.
    pub publish: Option<Shared>,
}

/// TSC cycles summed per step over the batches that had packets.
#[derive(Default)]
struct StepCycles {
    packets: u64,
    batches: u64,
    /// Ingest (ports' `recv`), chain (NFs, sinks queueing frames), flush (ports' sends).
    cycles: [u64; 3],
}

impl StepCycles {
    fn add(&mut self, packets: usize, c: [u64; 3]) {
        self.packets += packets as u64;
        self.batches += 1;
        for (a, b) in self.cycles.iter_mut().zip(c) {
            *a += b;
        }
    }

    /// `catena: step cycles: packets P batches B ingest I chain C flush F`.
    fn line(&self) -> String {
        let [i, c, f] = self.cycles;
        format!(
            "catena: step cycles: packets {} batches {} ingest {i} chain {c} flush {f}",
            self.packets, self.batches
        )
    }
}

/// The name commands for the whole chain go to: `* reload` (not a valid node name).
pub const CHAIN: &str = "*";

impl Runner {
    /// Lets the run reload `path` (the file `cfg` was read from) on `* reload` or SIGHUP.
    pub fn reload_from(&mut self, path: &std::path::Path, cfg: &crate::runtime::ChainConfig) {
        self.reload = Some(Box::new(Base::new(path, cfg, &self.walk.chain)));
    }

    /// A command for the whole chain: `reload` re-reads the file and applies changed NF
    /// parameters as the NFs' live commands; anything else is refused.
    pub(super) fn chain_command(&mut self, cmd: &str) -> Result<String, String> {
        if cmd.trim() != "reload" {
            return Err(format!("unknown chain command `{cmd}` (commands: reload)"));
        }
        let Some(mut base) = self.reload.take() else {
            return Err("this run cannot reload: it was not started from a chain file".into());
        };
        // The base is out while its commands apply, so they do not count as live changes.
        let r = self.apply_plan(base.plan());
        self.reload = Some(base);
        r
    }

    fn apply_plan(
        &mut self,
        plan: Result<Vec<(String, String)>, String>,
    ) -> Result<String, String> {
        let cmds = plan.map_err(|e| format!("{e}; the old chain keeps running"))?;
        if cmds.is_empty() {
            return Ok("no NF parameter changed".into());
        }
        let mut done = Vec::new();
        for (nf, c) in &cmds {
            let r = self
                .apply(nf, c)
                .map_err(|e| format!("`{nf} {c}`: {e} (changes before it were applied)"))?;
            done.push(format!("{nf}: {r}"));
        }
        Ok(format!("{} change(s): {}", cmds.len(), done.join("; ")))
    }

    /// Runs the chain on live ports (port `i` is virtual port `i`) until stopped or every
    /// receiving port has ended. `opts.outputs` still sets sink files; loops and
    /// schedules do not apply to live input.
    pub fn run_live(
        &mut self,
        ports: Vec<Box<dyn Port>>,
        opts: &RunOptions,
        live: Live<'_>,
    ) -> anyhow::Result<Summary> {
        anyhow::ensure!(
            ports.len() == self.walk.chain.ports as usize,
            "internal error: {} ports for a chain of {}",
            ports.len(),
            self.walk.chain.ports
        );
        // Sinks' files look like the first replayed capture, else like `tcpdump -w`'s.
        let header = ports
            .iter()
            .find_map(|p| p.header())
            .unwrap_or(PcapHeader::new(1, false));
        self.walk.open_sinks(header, &opts.outputs)?;
        self.walk.open_nf_outputs()?;
        self.walk.live = ports;
        // Stages: the ports are shared (stage 1 receives, the sinks' stages send), and
        // when the kernel feeds them (they cannot wait) a full ring drops `ring-full`.
        let shared = match self.stages.as_mut() {
            Some(s) => {
                let kernel = self
                    .walk
                    .live
                    .iter()
                    .any(|p| p.receives() && p.fd().is_some());
                s.go_live(&mut self.walk, kernel);
                s.start(&mut self.walk)?;
                self.walk.ports.clone()
            }
            None => None,
        };
        let start = Instant::now();
        let mut next_refresh = start + REFRESH;
        let mut rr = 0usize;
        let mut fds: Vec<libc::pollfd> = Vec::with_capacity(self.walk.live.len());
        let mut batches = BatchHist::default();
        // [xdp hook] Where a batch's time goes (TSC cycles: taking it off the ports, the
        // chain, sending), three counter reads per batch; `bench ports` asks for the sums
        // with CATENA_STEP_TSC=1 and reads them from stderr at exit.
        let mut steps = StepCycles::default();
        loop {
            if live.stop.load(Ordering::Relaxed) {
                break;
            }
            self.poll_control();
            if live
                .reload
                .is_some_and(|r| r.swap(false, Ordering::Relaxed))
            {
                match self.chain_command("reload") {
                    Ok(r) => eprintln!("catena: reload: {r}"),
                    Err(e) => eprintln!("catena: reload refused: {e}"),
                }
            }
            let t0 = Instant::now();
            self.stage_room()?;
            // With stages the ports are held only while receiving (the walk holds them
            // at its sinks), never while a ring is waited on.
            let held = shared.as_deref().map(|m| hold(m, &mut self.walk.live));
            let c0 = crate::flow::tsc();
            let (got, ended) = self.ingest_ports(rr);
            rr = rr.wrapping_add(1);
            let timeout = (got == 0 && !ended).then(|| self.poll_set(&mut fds));
            let now = Instant::now();
            let refresh = now >= next_refresh;
            if refresh {
                next_refresh = now + REFRESH;
                for p in &mut self.walk.live {
                    p.refresh();
                }
            }
            release(held, &mut self.walk.live);
            if got > 0 {
                let c1 = crate::flow::tsc();
                match self.fast.as_deref_mut() {
                    Some(f) => f.chunk(&mut self.walk),
                    None => self.walk.drain(None),
                }
                let c2 = crate::flow::tsc();
                for p in &mut self.walk.live {
                    p.flush();
                }
                // PA-Flow hook: frames whose packets the batch viewed go back now.
                for p in &mut self.walk.live {
                    p.after_batch(&mut self.walk.pool);
                }
                let c3 = crate::flow::tsc();
                steps.add(got, [c1 - c0, c2 - c1, c3 - c2]);
                self.end_chunk()?;
                batches.record(t0.elapsed().as_secs_f64());
                if let Some(v) = self.walk.violation.take() {
                    anyhow::bail!("{v}");
                }
            } else if ended {
                break;
            } else if let Some(ms) = timeout.filter(|&ms| ms > 0) {
                // SAFETY: `fds` holds `fds.len()` initialised pollfd entries. EINTR (a
                // signal) just ends the wait early.
                unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
            }
            if refresh && shared.is_none() {
                // With stages the later stages' counters are theirs until the end: the
                // API's live figures then come at the end only.
                if let Some(shared) = &live.publish {
                    self.publish(shared, &batches, start);
                }
            }
            // An output that failed ends the run, its batch done (the summary and the
            // error follow). With stages, later stages' sinks are their threads': they
            // say so through the flag.
            if refresh
                && (self.walk.output_failed()
                    || (self.stages.as_ref())
                        .is_some_and(|s| s.output_failed.load(Ordering::Relaxed)))
            {
                break;
            }
        }
        if let Some(s) = self.stages.as_mut() {
            s.join(&mut self.walk)?;
        }
        if let Some(m) = &shared {
            let mut g = m.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            self.walk.live = std::mem::take(&mut *g);
        }
        self.walk.ports = None;
        for p in &mut self.walk.live {
            p.flush();
            p.refresh();
        }
        let seconds = start.elapsed().as_secs_f64();
        if std::env::var_os("CATENA_STEP_TSC").is_some() {
            eprintln!("{}", steps.line());
        }
        self.settle_counts();
        for n in &mut self.walk.chain.nodes {
            if let super::NodeKind::Nf { nf, .. } = &mut n.kind {
                nf.finish();
            }
        }
        let mut errors = Vec::new();
        let mut input_error = None;
        for p in &mut self.walk.live {
            if let Err(e) = p.finish() {
                errors.push(e.to_string());
            }
            input_error = input_error.or_else(|| p.input_error());
        }
        let stats = self.fast.as_ref().map(|f| f.stats);
        let mut s = self.walk.summary(input_error, opts.loops, seconds, stats)?;
        s.input = self.inputs();
        if let Some(shared) = &live.publish {
            let mut g = shared.lock().unwrap_or_else(|e| e.into_inner());
            g.summary = Some(s.clone());
            g.batches = batches;
        }
        if let Some(e) = errors.into_iter().next() {
            anyhow::bail!("{e}");
        }
        Ok(s)
    }

    fn inputs(&self) -> String {
        self.walk
            .live
            .iter()
            .map(|p| p.describe())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Publishes the counters so far unless a reader holds the lock (then next time):
    /// the worker never waits for the API.
    fn publish(&mut self, shared: &Shared, batches: &BatchHist, start: Instant) {
        self.settle_counts();
        let stats = self.fast.as_ref().map(|f| f.stats);
        let secs = start.elapsed().as_secs_f64();
        let Ok(mut s) = self.walk.snapshot(None, 1, secs, stats) else {
            return;
        };
        s.input = self.inputs();
        if let Ok(mut g) = shared.try_lock() {
            g.summary = Some(s);
            g.batches = batches.clone();
        }
    }

    /// One batch at most from the ports, taken in turn from a rotating first port so
    /// none starves. Returns the packets taken and whether every receiving port ended.
    fn ingest_ports(&mut self, rr: usize) -> (usize, bool) {
        let w = &mut self.walk;
        let first = w.first;
        let n = w.live.len();
        let mut got = 0;
        let mut ended = true;
        for k in 0..n {
            let i = (rr + k) % n;
            let port = &mut w.live[i];
            if !port.receives() {
                continue;
            }
            let room = MAX_BATCH - got;
            if room == 0 {
                ended = false;
                break;
            }
            let before = w.inbox[first].len();
            let c0 = port.counters();
            let r = port.recv(&mut w.pool, &mut w.inbox[first], room);
            let c1 = port.counters();
            let oversize = c1.rx_oversize - c0.rx_oversize;
            // The rest of a bad aggregate counts as one packet in, dropped.
            let bad = c1.rx_bad_aggregate - c0.rx_bad_aggregate;
            let k = match r {
                Recv::Ended => 0,
                Recv::Got(k) => {
                    ended = false;
                    k
                }
            };
            let c = &mut w.counters[0];
            c.packets_in += (k as u64) + oversize + bad;
            c.drops[OVERSIZE] += oversize;
            c.drops[BAD_AGGREGATE] += bad;
            c.out[0] += k as u64;
            w.rx[i] += k as u64;
            for p in &mut w.inbox[first].as_mut_slice()[before..] {
                c.bytes_in += p.len() as u64;
                let m = p.meta_mut();
                // Live time has no look-ahead: arrival times, never going back.
                m.now_ns = w.clock.tick(m.ts_ns, None);
                m.seq = w.seq;
                w.seq += 1;
                m.in_port = i as u16;
                m.egress = NO_PORT;
                m.fast = FastMark::Off;
                m.fast_rec = NOT_RECORDED;
            }
            got += k;
        }
        (got, ended)
    }

    /// What to wait on for a live port to have packets, a paced replay's next packet, or
    /// `IDLE_WAIT`, whichever is first: the ports' fds into `fds`, and the timeout in ms
    /// (0: do not wait). One `poll` per idle round, none while busy.
    fn poll_set(&mut self, fds: &mut Vec<libc::pollfd>) -> i32 {
        fds.clear();
        let mut timeout = IDLE_WAIT.as_nanos() as u64;
        for p in &self.walk.live {
            if let Some(fd) = p.fd() {
                fds.push(libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
            if let Some(ns) = p.next_in_ns() {
                timeout = timeout.min(ns);
            }
        }
        timeout.div_ceil(1_000_000) as i32
    }
}
