//! Several live workers behind one `--control` socket and one `--api` server. A command
//! goes to every worker, each applying it between its own batches, and the reply says
//! what they did; SIGHUP reaches every worker as `* reload`. Live input has no packet
//! order across workers to cut at (sharded file runs cut at one input position:
//! shard_control.rs): each worker's packets are under the old rules up to its next batch
//! boundary and under the new ones after it, as with one worker. The workers' published
//! counters are summed a few times a second for `/stats` and `/metrics`.
//!
//! One thread does both; it holds no lock a worker waits for (workers publish with
//! `try_lock`), so no worker ever waits for it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::api::{BatchHist, Shared};
use super::control::{channel_pair, Command, ControlPort, Reply};
use super::counters::Summary;
use crate::nfs::Preparer;

/// How often the summed counters are refreshed (the workers publish every 250 ms).
const MERGE: Duration = Duration::from_millis(250);
/// Longest wait for one worker's reply (as the API's own wait).
const REPLY_WAIT: Duration = Duration::from_secs(5);

/// The running fan; dropping it stops its thread.
pub struct Fan {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Fan {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What the fan joins: where commands come from, the workers, their counters.
pub struct FanParts {
    /// The `--control` socket's and the API's ends (commands to fan out).
    pub inputs: Vec<ControlPort>,
    /// NFs whose commands are compiled once per worker, off the workers.
    pub preparers: HashMap<String, Preparer>,
    /// Per worker, where it publishes its counters (`Live::publish`).
    pub parts: Vec<Shared>,
    /// Where the sum goes (the API's), if there is an API.
    pub merged: Option<Shared>,
    /// SIGHUP's flag: reload every worker.
    pub reload: Option<&'static AtomicBool>,
}

/// One control port per worker (to attach to each runner) and the fan feeding them.
pub fn start(workers: usize, f: FanParts) -> std::io::Result<(Vec<ControlPort>, Fan)> {
    let (txs, ports): (Vec<Sender<Command>>, Vec<ControlPort>) =
        (0..workers).map(|_| channel_pair()).unzip();
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let thread = std::thread::Builder::new()
        .name("catena-fan".into())
        .spawn(move || run(f, txs, &st))?;
    Ok((
        ports,
        Fan {
            stop,
            thread: Some(thread),
        },
    ))
}

fn run(f: FanParts, workers: Vec<Sender<Command>>, stop: &AtomicBool) {
    let mut next_merge = Instant::now() + MERGE;
    while !stop.load(Ordering::Relaxed) {
        let mut idle = true;
        for input in &f.inputs {
            match input.rx.try_recv() {
                Ok(c) => {
                    idle = false;
                    let reply = fan_out(&workers, &f.preparers, &c.nf, &c.cmd, c.prepared);
                    if let Some(r) = c.reply {
                        let _ = r.send(reply);
                    }
                }
                Err(_) => continue,
            }
        }
        if f.reload.is_some_and(|r| r.swap(false, Ordering::Relaxed)) {
            // `*` names the whole chain (worker/live.rs `CHAIN`).
            match fan_out(&workers, &f.preparers, "*", "reload", None).result {
                Ok(r) => eprintln!("catena: reload: {r}"),
                Err(e) => eprintln!("catena: reload refused: {e}"),
            }
        }
        if Instant::now() >= next_merge {
            next_merge = Instant::now() + MERGE;
            if let Some(m) = &f.merged {
                merge(&f.parts, m);
            }
        }
        if idle {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Sends `nf cmd` to every worker (compiled for each off the workers) and waits for
/// their replies: one line, naming the workers whose answers differ.
fn fan_out(
    workers: &[Sender<Command>],
    preparers: &HashMap<String, Preparer>,
    nf: &str,
    cmd: &str,
    first: Option<crate::nfs::Prepared>,
) -> Reply {
    let fail = |e: String| Reply {
        result: Err(e),
        replaced: None,
    };
    // Compile every copy before any worker applies one: a bad command changes nothing.
    let mut first = first;
    let mut prepared = Vec::with_capacity(workers.len());
    for _ in workers {
        match first.take() {
            Some(p) => prepared.push(Some(p)),
            None => match preparers.get(nf).map(|p| p(cmd)).transpose() {
                Ok(p) => prepared.push(p),
                Err(e) => return fail(e),
            },
        }
    }
    let mut waits = Vec::with_capacity(workers.len());
    for (w, p) in workers.iter().zip(prepared) {
        let (tx, rx) = channel();
        let sent = w.send(Command {
            nf: nf.to_string(),
            cmd: cmd.to_string(),
            prepared: p,
            reply: Some(tx),
        });
        waits.push(sent.ok().map(|_| rx));
    }
    let results: Vec<Result<String, String>> = waits
        .into_iter()
        .map(|rx| match rx.map(|r| r.recv_timeout(REPLY_WAIT)) {
            // What the change replaced is freed here, not on the worker.
            Some(Ok(r)) => r.result,
            Some(Err(RecvTimeoutError::Timeout)) => Err("no reply within 5 s".into()),
            _ => Err("the worker has ended".into()),
        })
        .collect();
    Reply {
        result: combine(&results),
        replaced: None,
    }
}

/// All alike: that answer (with the worker count); else each worker's, in order.
fn combine(results: &[Result<String, String>]) -> Result<String, String> {
    let n = results.len();
    if results.iter().all(|r| r == &results[0]) {
        return match &results[0] {
            Ok(s) => Ok(format!("{s} (on {n} workers)")),
            Err(e) => Err(format!("{e} (on {n} workers)")),
        };
    }
    let each = results
        .iter()
        .enumerate()
        .map(|(w, r)| match r {
            Ok(s) => format!("worker {w}: {s}"),
            Err(e) => format!("worker {w}: error: {e}"),
        })
        .collect::<Vec<_>>()
        .join("; ");
    if results.iter().any(Result::is_err) {
        Err(each)
    } else {
        Ok(each)
    }
}

/// The workers' latest counters summed into `merged` (skipped until every worker has
/// published once).
fn merge(parts: &[Shared], merged: &Shared) {
    let mut sums = Vec::with_capacity(parts.len());
    let mut batches = BatchHist::default();
    for p in parts {
        let g = p.lock().unwrap_or_else(|e| e.into_inner());
        let Some(s) = g.summary.clone() else { return };
        for (a, b) in batches.counts.iter_mut().zip(g.batches.counts) {
            *a += b;
        }
        batches.sum_secs += g.batches.sum_secs;
        batches.count += g.batches.count;
        sums.push(s);
    }
    let s = sum_workers(sums);
    let mut g = merged.lock().unwrap_or_else(|e| e.into_inner());
    g.summary = Some(s);
    g.batches = batches;
}

/// Worker `w`'s file for a sink that writes `path`: `NAME.wW.EXT`, as flow_monitor's
/// per-worker files (one file per worker: no lock per batch, and live input has no order
/// across workers to merge by).
pub fn worker_file(path: &std::path::Path, w: usize) -> std::path::PathBuf {
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let name = match path.extension() {
        Some(e) => format!("{stem}.w{w}.{}", e.to_string_lossy()),
        None => format!("{stem}.w{w}"),
    };
    path.with_file_name(name)
}

/// The live workers' summaries summed, their ports' live counters too; the run's time
/// is the longest worker's. A sink's files (one per worker) are listed together.
pub fn sum_workers(parts: Vec<Summary>) -> Summary {
    let seconds = parts.iter().map(|s| s.seconds).fold(0.0, f64::max);
    let paths: Vec<Option<String>> = (0..parts.first().map_or(0, |s| s.sinks.len()))
        .map(|i| {
            let all: Vec<String> = parts
                .iter()
                .filter_map(|s| s.sinks.get(i).and_then(|k| k.path.clone()))
                .collect();
            (!all.is_empty()).then(|| all.join(", "))
        })
        .collect();
    let lives: Vec<Vec<Option<crate::io::PortCounters>>> = parts
        .iter()
        .map(|s| s.ports.iter().map(|p| p.live).collect())
        .collect();
    let mut s = super::shard::sum(
        parts.into_iter().map(|s| (s, None, None)).collect(),
        seconds,
    );
    for (i, p) in s.ports.iter_mut().enumerate() {
        let mut all = lives.iter().filter_map(|l| l.get(i).copied().flatten());
        if let Some(mut c) = all.next() {
            for d in all {
                c.rx += d.rx;
                c.rx_bytes += d.rx_bytes;
                c.rx_oversize += d.rx_oversize;
                c.kernel_drops += d.kernel_drops;
                c.tx += d.tx;
                c.tx_bytes += d.tx_bytes;
                c.tx_errors += d.tx_errors;
                c.tx_aggregates += d.tx_aggregates;
                c.tx_aggregated += d.tx_aggregated;
                c.rx_aggregates += d.rx_aggregates;
                c.rx_unpacked += d.rx_unpacked;
                c.rx_bad_aggregate += d.rx_bad_aggregate;
            }
            p.live = Some(c);
        }
    }
    for (k, p) in s.sinks.iter_mut().zip(paths) {
        k.path = p;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_worker_writes_its_own_file() {
        use std::path::{Path, PathBuf};
        assert_eq!(
            worker_file(Path::new("/tmp/x/out.pcap"), 1),
            PathBuf::from("/tmp/x/out.w1.pcap")
        );
        assert_eq!(worker_file(Path::new("out"), 0), PathBuf::from("out.w0"));
        assert_eq!(
            worker_file(Path::new("d/a.b.pcapng"), 12),
            PathBuf::from("d/a.b.w12.pcapng")
        );
    }

    #[test]
    fn alike_replies_are_one_line_different_ones_name_the_worker() {
        let ok = |s: &str| Ok::<String, String>(s.into());
        assert_eq!(
            combine(&[ok("3 rules"), ok("3 rules")]),
            Ok("3 rules (on 2 workers)".into())
        );
        assert_eq!(
            combine(&[ok("3 rules"), Err("no reply within 5 s".into())]),
            Err("worker 0: 3 rules; worker 1: error: no reply within 5 s".into())
        );
        assert_eq!(
            combine(&[Err("bad rule".into()), Err("bad rule".into())]),
            Err("bad rule (on 2 workers)".into())
        );
    }

    #[test]
    fn a_command_reaches_every_worker_and_a_bad_one_none() {
        let (txs, ports): (Vec<_>, Vec<_>) = (0..3).map(|_| channel_pair()).unzip();
        let workers: Vec<_> = ports
            .into_iter()
            .enumerate()
            .map(|(w, p)| {
                std::thread::spawn(move || {
                    let c = p.rx.recv().unwrap();
                    let r = format!("{} {} done", c.nf, c.cmd);
                    let r = if w == 2 { format!("{r} here") } else { r };
                    c.reply.unwrap().send(Reply {
                        result: Ok(r),
                        replaced: None,
                    })
                })
            })
            .collect();
        let r = fan_out(&txs, &HashMap::new(), "fw", "flush", None);
        assert_eq!(
            r.result,
            Ok(
                "worker 0: fw flush done; worker 1: fw flush done; worker 2: fw flush done here"
                    .into()
            )
        );
        for w in workers {
            w.join().unwrap().unwrap();
        }
        let mut prep = HashMap::new();
        let refuse: Preparer = Arc::new(|c: &str| Err(format!("`{c}`: bad rule")));
        prep.insert("acl".to_string(), refuse);
        let (txs, ports): (Vec<_>, Vec<_>) = (0..2).map(|_| channel_pair()).unzip();
        let r = fan_out(&txs, &prep, "acl", "rules x", None);
        assert_eq!(r.result, Err("`rules x`: bad rule".into()));
        for p in ports {
            assert!(p.rx.try_recv().is_err(), "nothing sent after a bad command");
        }
    }
}
