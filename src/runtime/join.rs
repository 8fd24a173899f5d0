//! The fork and join of a parallel group (`parallel.rs` decides the groups): NFs `a` and
//! `b` run on the same batch at the same time, one on the walk's thread over the packets
//! themselves, the other on a helper thread over *shadow* packets; the join merges their
//! verdicts so that every packet leaves as it would have after `a` then `b`.
//!
//! Why shadows (a copy of each packet's bytes and metadata) and no unsafe code: a packet
//! is a `Box` and NFs take `&mut Batch`, so two threads working on the same packets would
//! hold two `&mut` to one buffer at once, which is undefined behaviour in Rust even when
//! the bytes they touch are disjoint (and both write the verdict in the metadata). The
//! shadow side is the NF that writes nothing (the plan requires one), so only its
//! verdicts come back; the copy is a `memcpy` of the packet per packet, small beside the
//! NF work that makes parallelism worth it. All of this file is safe Rust: the NF and the
//! shadow batch travel to the helper and back by value through two one-job slots (a
//! mutex each, taken once per batch and never contended for long; an atomic flag beside
//! each so that pollers do not touch the lock). When the walk's thread has finished its
//! side and the helper has not yet picked the job up (it has no core), the walk's thread
//! takes the job back and runs it itself.
//!
//! Counting, as in sequence: `a` counts every packet; `b` counts only the packets `a`
//! passed (the plan allows `a` to drop only when `b` keeps no state and no counters, so
//! what `b` did with the others leaves no trace). Drop wins: a packet either branch drops
//! is dropped.
//!
//! The helper spins when idle (up to [`SPIN_TICKS`], longer than the gap between two
//! batches), then parks. A batch that finds it parked runs in sequence (no copies) and
//! wakes it for the next one: a wake-up takes the scheduler tens of µs on a busy
//! machine, several times a batch's work, so waiting for one made parallel slower than
//! sequence (p50 1.74× at 500 cycles). A system call only when it was parked: per
//! batch, never per packet.
//! If a shadow cannot be had (the shadow pool is empty), the batch runs in sequence.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::thread::{JoinHandle, Thread};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::chain::{Node, NodeKind};
use super::counters::NodeCounters;
use super::parallel::Group;
use super::profile_check::Snapshot;
use crate::nfs::{Context, Nf, Profile};
use crate::packet::{Batch, Pool, Verdict};

/// What travels to the helper and back: the shadow branch's NF, its batch, and who to wake.
struct Job {
    nf: Box<dyn Nf>,
    batch: Batch,
    cx: Context,
    waker: Option<Thread>,
    /// The NF panicked: the payload, re-raised on the walk's thread.
    panic: Option<Box<dyn Any + Send>>,
}

/// Holds an NF's place in the graph while the NF itself is on the helper.
struct Away(Profile);

impl Nf for Away {
    fn profile(&self) -> &Profile {
        &self.0
    }
    fn process(&mut self, _: &mut Batch, _: &Context) {
        unreachable!("an NF away on the parallel helper was asked to run")
    }
}

/// The hand-off between the walk's thread and the helper: one slot each way, each with
/// a flag so that pollers look at an atomic, not at the lock.
#[derive(Default)]
struct Slots {
    posted: Mutex<Option<Job>>,
    has_post: AtomicBool,
    done: Mutex<Option<Job>>,
    has_done: AtomicBool,
    stop: AtomicBool,
    /// The helper is parked, or about to be (a hint: a posted job still wakes it).
    parked: AtomicBool,
}

struct Helper {
    slots: Arc<Slots>,
    thread: Option<JoinHandle<()>>,
}

/// One parallel group of a walk.
pub(super) struct Fork {
    pub group: Group,
    /// Shadow buffers: a batch's worth (bounded like the walk's own batches).
    pool: Pool,
    /// The job while it is home: its NF slot holds the [`Away`] stand-in.
    job: Option<Job>,
    helper: Option<Helper>,
    /// Verdicts of the shadow side, by packet index (kept while the shadows are freed).
    verdicts: Vec<Verdict>,
    /// Profile check of the shadow side (debug builds).
    snap: Option<Snapshot>,
}

impl Fork {
    pub fn new(group: Group, shadow_profile: Profile, cap: usize, max_packet: usize) -> Fork {
        Fork {
            group,
            pool: Pool::new(cap, max_packet),
            job: Some(Job {
                nf: Box::new(Away(shadow_profile)),
                batch: Batch::with_capacity(cap),
                cx: Context::default(),
                waker: None,
                panic: None,
            }),
            helper: None,
            verdicts: Vec::with_capacity(cap),
            snap: None,
        }
    }

    fn helper(&mut self) -> &mut Helper {
        self.helper.get_or_insert_with(|| {
            let slots = Arc::new(Slots::default());
            let theirs = slots.clone();
            let thread = std::thread::Builder::new()
                .name("catena-parallel".into())
                .spawn(move || serve(&theirs))
                .ok();
            Helper { slots, thread }
        })
    }

    /// Runs the group on `batch` (the packets waiting at `a`): both NFs at once, then the
    /// join. Packets that leave go to the inboxes of `b`'s successors; dropped ones are
    /// freed into `pool`. `check` is the walk's profile check of the in-place side.
    /// False, with nothing done, when the walk must run the batch in sequence instead.
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        &mut self,
        nodes: &mut [Node],
        counters: &mut [NodeCounters],
        inbox: &mut [Batch],
        batch: &mut Batch,
        pool: &mut Pool,
        cx: &Context,
        check: &mut Option<Snapshot>,
        violation: &mut Option<String>,
    ) -> bool {
        let Group { a, b, shadow_is_a } = self.group;
        let (shadow_n, real_n) = if shadow_is_a { (a, b) } else { (b, a) };
        if let Some(h) = self.helper.as_ref() {
            if h.slots.parked.load(Ordering::Acquire) {
                // A parked helper takes a scheduler wake-up to start (tens of µs, far
                // more than a batch's work when the machine is busy): this batch runs in
                // sequence, and the helper is woken to be spinning for the next one.
                if let Some(t) = &h.thread {
                    t.thread().unpark();
                }
                return false;
            }
        }
        let n = batch.len();
        let mut job = self
            .job
            .take()
            .expect("the parallel job is home between batches");
        // The shadows: each packet's bytes and metadata (layers decoded or not, as the
        // packet is), so the shadow side sees exactly what it would in sequence.
        for p in batch.iter() {
            match self.pool.alloc_for(p.len()) {
                Some(mut s) => {
                    s.set_bytes(p.data());
                    *s.meta_mut() = p.meta().clone();
                    job.batch.push(s);
                }
                None => break,
            }
        }
        let helper_up = self.helper().thread.is_some();
        if job.batch.len() < n || !helper_up {
            // No shadow for every packet (or no helper thread): the walk runs them in
            // sequence.
            for s in job.batch.drain() {
                self.pool.free(s);
            }
            self.job = Some(job);
            return false;
        }
        counters[a].packets_in += n as u64;
        if check.is_some() {
            self.snap
                .get_or_insert_with(|| Snapshot::new(n))
                .take(&job.batch);
        }
        // Fork: the shadow side's NF leaves its node for the helper.
        if let NodeKind::Nf { nf, .. } = &mut nodes[shadow_n].kind {
            std::mem::swap(nf, &mut job.nf);
        }
        job.cx = *cx;
        job.waker = Some(std::thread::current());
        let helper = self.helper.as_mut().expect("started above");
        let slots = &*helper.slots;
        *lock(&slots.posted) = Some(job);
        slots.has_post.store(true, Ordering::Release);
        if let Some(t) = &helper.thread {
            t.thread().unpark();
        }
        // The in-place side runs here meanwhile.
        if let Some(snap) = check.as_mut() {
            snap.take(batch);
        }
        if let NodeKind::Nf { nf, .. } = &mut nodes[real_n].kind {
            nf.process(batch, cx);
        }
        if let (Some(snap), NodeKind::Nf { nf, .. }) = (check.as_ref(), &nodes[real_n].kind) {
            note(snap, batch, nf.profile(), &nodes[real_n].name, violation);
        }
        // Join. If the helper has not started the job yet (no free core), this thread
        // takes it back and runs it itself: never slower than in sequence by more than
        // the copies, and parallel whenever the helper gets a core.
        let stolen = if slots.has_post.load(Ordering::Acquire) {
            lock(&slots.posted).take()
        } else {
            None
        };
        let mut job = match stolen {
            Some(mut j) => {
                slots.has_post.store(false, Ordering::Release);
                j.nf.process(&mut j.batch, &j.cx);
                j
            }
            None => {
                let mut idle = 0u32;
                loop {
                    if slots.has_done.swap(false, Ordering::Acquire) {
                        if let Some(j) = lock(&slots.done).take() {
                            break j;
                        }
                    }
                    if helper.thread.as_ref().is_none_or(|t| t.is_finished()) {
                        panic!("the parallel helper thread ended");
                    }
                    if idle < 256 {
                        idle += 1;
                        std::hint::spin_loop();
                    } else {
                        std::thread::park();
                    }
                }
            }
        };
        if let NodeKind::Nf { nf, .. } = &mut nodes[shadow_n].kind {
            std::mem::swap(nf, &mut job.nf);
        }
        if let Some(p) = job.panic.take() {
            for s in job.batch.drain() {
                self.pool.free(s);
            }
            self.job = Some(job);
            std::panic::resume_unwind(p);
        }
        if let (Some(snap), NodeKind::Nf { nf, .. }) = (self.snap.as_ref(), &nodes[shadow_n].kind) {
            note(
                snap,
                &job.batch,
                nf.profile(),
                &nodes[shadow_n].name,
                violation,
            );
        }
        self.verdicts.clear();
        for s in job.batch.drain() {
            self.verdicts.push(s.meta().verdict);
            self.pool.free(s);
        }
        self.job = Some(job);
        for (i, mut p) in batch.drain().enumerate() {
            let (va, vb) = if shadow_is_a {
                (self.verdicts[i], p.meta().verdict)
            } else {
                (p.meta().verdict, self.verdicts[i])
            };
            match va {
                Verdict::Drop(r) => {
                    counters[a].drops[r as usize] += 1;
                    pool.free(p);
                    continue;
                }
                Verdict::Out(_) => counters[a].out[0] += 1,
            }
            counters[b].packets_in += 1;
            match vb {
                Verdict::Drop(r) => {
                    counters[b].drops[r as usize] += 1;
                    pool.free(p);
                }
                Verdict::Out(o) => {
                    let nb = &nodes[b];
                    let o = (o as usize).min(nb.next.len() - 1);
                    counters[b].out[o] += 1;
                    p.forward(0);
                    inbox[nb.next[o]].push(p);
                }
            }
        }
        true
    }
}

/// Records the first profile violation of `nf` on `batch`.
fn note(snap: &Snapshot, batch: &Batch, p: &Profile, name: &str, violation: &mut Option<String>) {
    let bad = snap.undeclared(batch, p.writes, p.changes_length);
    if !bad.is_empty() && violation.is_none() {
        *violation = Some(format!(
            "NF `{name}` wrote {} without declaring it in its profile",
            bad.join(", ")
        ));
    }
}

impl Drop for Fork {
    fn drop(&mut self) {
        if let Some(mut h) = self.helper.take() {
            h.slots.stop.store(true, Ordering::Release);
            if let Some(t) = h.thread.take() {
                t.thread().unpark();
                let _ = t.join();
            }
        }
    }
}

/// The slot's lock; a poisoned one (a panic while held, which the code never risks) is
/// still usable: the slot only ever holds a whole job or nothing.
fn lock(m: &Mutex<Option<Job>>) -> std::sync::MutexGuard<'_, Option<Job>> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// How long an idle helper spins before it parks, in TSC ticks: longer than the gap
/// between two batches of the walk, so a helper with a core of its own is always awake
/// when a job comes.
const SPIN_TICKS: u64 = 50_000;

/// The helper thread: runs each posted job's NF on its shadow batch and hands it back.
fn serve(slots: &Slots) {
    let mut idle_since: Option<u64> = None;
    loop {
        if slots.stop.load(Ordering::Acquire) {
            return;
        }
        let job = if slots.has_post.load(Ordering::Acquire) {
            lock(&slots.posted).take()
        } else {
            None
        };
        let Some(mut job) = job else {
            let since = *idle_since.get_or_insert_with(crate::flow::tsc);
            if crate::flow::tsc().wrapping_sub(since) < SPIN_TICKS {
                std::hint::spin_loop();
            } else {
                slots.parked.store(true, Ordering::Release);
                if !slots.has_post.load(Ordering::Acquire) && !slots.stop.load(Ordering::Acquire) {
                    std::thread::park();
                }
                slots.parked.store(false, Ordering::Release);
                idle_since = None;
            }
            continue;
        };
        idle_since = None;
        slots.has_post.store(false, Ordering::Release);
        let Job { nf, batch, cx, .. } = &mut job;
        if let Err(p) = std::panic::catch_unwind(AssertUnwindSafe(|| nf.process(batch, cx))) {
            job.panic = Some(p);
        }
        let waker = job.waker.take();
        *lock(&slots.done) = Some(job);
        slots.has_done.store(true, Ordering::Release);
        if let Some(w) = waker {
            w.unpark();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::thread::ThreadId;

    use crate::io::{PcapHeader, Trace};
    use crate::nfs::{Context, Nf, Profile};
    use crate::packet::{Batch, Fields, LinkKind};
    use crate::runtime::{Chain, NoProgress, RunOptions, Runner};

    /// Notes the thread each batch runs on; panics at packet `at`; sleeps `nap` per
    /// batch (so the helper gets a core while the first side works).
    struct Seen {
        p: Profile,
        on: Arc<Mutex<Vec<ThreadId>>>,
        seen: usize,
        at: usize,
        nap: u64,
    }

    impl Nf for Seen {
        fn profile(&self) -> &Profile {
            &self.p
        }
        fn process(&mut self, b: &mut Batch, _: &Context) {
            self.on.lock().unwrap().push(std::thread::current().id());
            std::thread::sleep(std::time::Duration::from_micros(self.nap));
            self.seen += b.len();
            assert!(self.seen < self.at, "seen {} packets", self.at);
        }
    }

    fn seen(at: usize, nap: u64) -> (Box<dyn Nf>, Arc<Mutex<Vec<ThreadId>>>) {
        let on = Arc::new(Mutex::new(Vec::new()));
        let p = Profile {
            reads: Fields::IP_TTL,
            writes: Fields::NONE,
            may_drop: false,
            changes_length: false,
            per_flow_state: false,
            outputs: &["out"],
            drop_reasons: &[],
        };
        let nf = Seen {
            p,
            on: on.clone(),
            seen: 0,
            at,
            nap,
        };
        (Box::new(nf), on)
    }

    fn trace(n: u64) -> Trace {
        let mut f = [0u8; 60];
        f[12] = 8;
        f[14] = 0x45;
        f[22] = 64;
        let h = PcapHeader::new(1, false);
        Trace::from_packets(LinkKind::Ethernet, h, (0..n).map(|i| (i, &f[..])))
    }

    fn chain(at: usize) -> (Chain, [Arc<Mutex<Vec<ThreadId>>>; 2]) {
        let (a, on_a) = seen(usize::MAX, 500);
        let (b, on_b) = seen(at, 0);
        let mut c = Chain::linear("t", 1, 1, vec![("a".into(), a), ("b".into(), b)]);
        c.set_parallel(true).unwrap();
        (c, [on_a, on_b])
    }

    #[test]
    fn the_second_branch_runs_on_another_thread() {
        let (c, [on_a, on_b]) = chain(usize::MAX);
        let mut r = Runner::new(c, 60);
        let s = r
            .run(&trace(1000), &RunOptions::default(), &mut NoProgress)
            .unwrap();
        assert_eq!((s.packets_in, s.packets_out), (1000, 1000));
        let (a, b) = (on_a.lock().unwrap(), on_b.lock().unwrap());
        let me = std::thread::current().id();
        assert!(a.len() >= 1000 / 32 && a.iter().all(|&t| t == me), "{a:?}");
        // The helper takes a batch whenever it gets a core before the first side ends
        // (else this thread runs it): with the first side napping, it does.
        assert!(b.len() == a.len() && b.iter().any(|&t| t != me), "{b:?}");
    }

    #[test]
    fn a_panic_on_the_helper_is_raised_on_the_walks_thread() {
        let (c, _) = chain(500);
        let mut r = Runner::new(c, 60);
        let Err(e) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            r.run(&trace(1000), &RunOptions::default(), &mut NoProgress)
        })) else {
            panic!("the panic did not reach the caller");
        };
        let msg = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()));
        assert_eq!(msg.as_deref(), Some("seen 500 packets"));
    }
}
