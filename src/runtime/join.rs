//! The fork and join of a parallel group (`parallel.rs` decides the groups): NFs `a` and
//! `b` run on the same batch at the same time, one on a helper thread over the packets
//! themselves, the other on the walk's thread over *shadow* packets; the join merges
//! their verdicts so that every packet leaves as it would have after `a` then `b`.
//!
//! Why shadows (a copy of each packet's bytes and metadata) and no unsafe code: a packet
//! is a `Box` and NFs take `&mut Batch`, so two threads working on the same packets would
//! hold two `&mut` to one buffer at once, which is undefined behaviour in Rust even when
//! the bytes they touch are disjoint (and both write the verdict in the metadata). The
//! shadow side is the NF that writes nothing (the plan requires one), so only its
//! verdicts matter. A shadow holds the packet's metadata and only the bytes its NF's
//! profile reads: the headers through the transport header (all of the packet when it
//! reads the payload or ICMP), with the packet's length; a packet viewing a mapped trace
//! gives a view of the same bytes instead (nothing copied).
//!
//! Where each side runs (session 25): the walk's thread makes the shadows and runs the
//! shadow NF on them; the packets themselves go to the helper (by value, with the
//! in-place NF) and come back once that NF has run. So the copy reads lines the walk's
//! core holds and writes shadows that never leave it, and per batch only the job (the
//! batch's vector and the NF, a few lines) crosses each way. Before, the helper made the
//! shadows from the lent packets and ran the shadow NF: the packets' lines crossed for the
//! copy before either NF could start (~2,400 ticks a batch of 32 in the host's fast state,
//! ~7,000 in its slow one), and the walk's writes to them afterwards (the in-place NF
//! decoding the layers, the join's verdict reset) each waited for the helper's core to give
//! up its copy of the line. All of this file is safe Rust: the job travels to the helper
//! and back by value through one-job slots (a mutex each, taken once per batch and never
//! contended for long; an atomic flag beside each so that pollers do not touch the lock).
//! A job the helper has not picked up by the time the walk's side is done (the helper
//! has no core) is taken back and run on the walk's thread.
//!
//! Counting, as in sequence: `a` counts every packet; `b` counts only the packets `a`
//! passed (the plan allows `a` to drop only when `b` keeps no state and no counters, so
//! what `b` did with the others leaves no trace). Drop wins: a packet either branch drops
//! is dropped.
//!
//! The helper spins when idle (up to [`SPIN_TICKS`], far longer than the gap between two
//! batches), then parks. A batch that finds it parked runs in sequence (no copies) and
//! wakes it for the next one: a wake-up takes the scheduler tens of µs on a busy
//! machine, several times a batch's work, so waiting for one made parallel slower than
//! sequence (p50 1.74× at 500 cycles). A helper that parks after that check, before the
//! job is posted, is woken by the post (`parked` and `has_post` are a SeqCst
//! store-then-load handshake); the job then goes to whichever side takes it first, the
//! helper or the walk's join. The walk's thread, once its side is done, spins
//! for the helper's result and never parks (it used to park after 256 spins, and the
//! helper's wake-up of it cost ~15,000 TSC ticks per batch: parallel p50 18,831 against
//! 3,173 in sequence at 0 cycles per NF); it yields the core only after
//! [`WAIT_SPIN_TICKS`], when the helper must have lost its core. The helper runs on
//! another core than the walk's (both pinned while the group lives, when the mask has
//! two cores), and the flags each side writes sit on cache lines of their own.
//! A system call only when the helper was parked: per batch, never per packet.
//! If a shadow cannot be had (the shadow pool is empty), the batch runs in sequence.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::thread::JoinHandle;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::affinity;
use super::chain::{Node, NodeKind};
use super::counters::NodeCounters;
use super::parallel::Group;
use super::profile_check::Snapshot;
use crate::nfs::{Context, Nf, Profile};
use crate::packet::{Batch, Fields, Layers, Pool, Verdict};

/// What travels to the helper and back: the in-place branch's NF and the walk's packets.
struct Job {
    nf: Box<dyn Nf>,
    /// The walk's packets while the NF runs on them (an empty batch between batches).
    batch: Batch,
    cx: Context,
    /// The NF panicked: the payload, re-raised on the walk's thread.
    panic: Option<Box<dyn Any + Send>>,
}

impl Job {
    /// Runs the NF on the packets, catching a panic for the walk's thread to raise.
    fn run(&mut self) {
        let Job {
            nf,
            batch,
            cx,
            panic,
            ..
        } = self;
        if let Err(p) = std::panic::catch_unwind(AssertUnwindSafe(|| nf.process(batch, cx))) {
            *panic = Some(p);
        }
    }
}

/// The shadow side, which never leaves the walk's thread: the shadows, their buffers
/// and their verdicts.
struct Shadows {
    batch: Batch,
    pool: Pool,
    /// What the shadow NF's profile reads (how much of each packet its shadow holds).
    reads: Fields,
    /// The shadow side's profile check (debug builds): a snapshot when set.
    snap: Option<Snapshot>,
    /// The shadows' verdicts, by packet (the shadows are freed before the join).
    verdicts: Vec<Verdict>,
}

impl Shadows {
    /// A shadow of each packet of `real`: its metadata and the bytes the NF's profile
    /// reads (see [`head_len`]), or a view of the same bytes when the packet views a
    /// mapped trace. False, with no shadow left, when the pool cannot give one for every
    /// packet. Each packet's layers are decoded here, into the packet as its first NF
    /// would: the in-place NF on the helper then only reads its metadata line, which
    /// stays in this core's cache for the join (decoding there, it wrote 31 of a batch's
    /// 32 lines, each a crossing back for the join and for the next ingest).
    fn make(&mut self, real: &mut Batch) -> bool {
        let Shadows {
            batch, pool, reads, ..
        } = self;
        for p in real.iter_mut() {
            let Some(mut s) = pool.alloc_raw_for(p.len()) else {
                for s in batch.drain() {
                    pool.free(s);
                }
                return false;
            };
            let layers = p.layers();
            match p.lasting() {
                Some(v) => {
                    s.set_view(v);
                }
                None => {
                    let d = p.data();
                    s.set_head(&d[..head_len(&layers, *reads, d)], d.len());
                }
            }
            // With the offsets decoded from the whole packet, as the NF would decode them.
            *s.meta_mut() = p.meta().clone();
            batch.push(s);
        }
        true
    }

    /// Notes the shadows' verdicts and frees the shadows.
    fn finish(&mut self) {
        self.verdicts.clear();
        self.verdicts
            .extend(self.batch.iter().map(|s| s.meta().verdict));
        for s in self.batch.drain() {
            self.pool.free(s);
        }
    }
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
/// a flag so that pollers look at an atomic, not at the lock. Each way on cache lines of
/// its own, so the side polling one way does not steal the line the other side writes.
#[derive(Default)]
struct Slots {
    to: Lines<ToHelper>,
    back: Lines<FromHelper>,
}

/// Walk → helper.
#[derive(Default)]
struct ToHelper {
    posted: Mutex<Option<Job>>,
    has_post: AtomicBool,
    stop: AtomicBool,
}

/// Helper → walk.
#[derive(Default)]
struct FromHelper {
    done: Mutex<Option<Job>>,
    has_done: AtomicBool,
    /// The helper is parked, or about to be (a post that sees it wakes the helper).
    parked: AtomicBool,
}

/// Aligned to two cache lines (the adjacent-line prefetcher pairs them).
#[derive(Default)]
#[repr(align(128))]
struct Lines<T>(T);

struct Helper {
    slots: Arc<Slots>,
    thread: Option<JoinHandle<()>>,
    /// The walk's thread's affinity before the group pinned it, restored at the end.
    walk_mask: Option<Vec<usize>>,
}

impl Helper {
    /// Posts `job` for the helper thread, and wakes it if it parked after the walk's
    /// check in [`Fork::run`] (the walk lost its core in between): left parked it never
    /// saw the job, and slept until a later batch found it parked. A system call only
    /// then, once per batch at most.
    fn post(&self, job: Job) {
        let (to, back) = (&self.slots.to.0, &self.slots.back.0);
        *lock(&to.posted) = Some(job);
        // Store `has_post`, then load `parked`; the helper stores `parked`, then loads
        // `has_post` (`serve`). SeqCst on all four: one total order, so at least one side
        // sees the other's store: the helper does not park, or this wakes it (with
        // Release/Acquire both loads may read the old values, x86 included).
        to.has_post.store(true, Ordering::SeqCst);
        if back.parked.load(Ordering::SeqCst) {
            if let Some(t) = &self.thread {
                t.thread().unpark();
            }
        }
    }
}

/// One parallel group of a walk.
pub(super) struct Fork {
    pub group: Group,
    /// The job while it is home: its NF slot holds the [`Away`] stand-in.
    job: Option<Job>,
    /// Whether the stand-in carries the in-place NF's profile yet (set at the first
    /// batch, the one time the stand-in is made).
    away_set: bool,
    shadows: Shadows,
    helper: Option<Helper>,
}

impl Fork {
    pub fn new(group: Group, shadow_profile: Profile, cap: usize, max_packet: usize) -> Fork {
        let reads = shadow_profile.reads;
        Fork {
            group,
            job: Some(Job {
                nf: Box::new(Away(shadow_profile)),
                batch: Batch::with_capacity(cap),
                cx: Context::default(),
                panic: None,
            }),
            away_set: false,
            shadows: Shadows {
                batch: Batch::with_capacity(cap),
                pool: Pool::new(cap, max_packet),
                reads,
                snap: None,
                verdicts: Vec::with_capacity(cap),
            },
            helper: None,
        }
    }

    fn helper(&mut self) -> &mut Helper {
        self.helper.get_or_insert_with(|| {
            let slots = Arc::new(Slots::default());
            let theirs = slots.clone();
            // The walk keeps its core, the helper gets another: two threads that wait on
            // each other every batch must never share one.
            let split = affinity::split_two();
            let helper_cores = split.as_ref().map(|s| s.other.clone());
            let thread = std::thread::Builder::new()
                .name("catena-parallel".into())
                .spawn(move || {
                    if let Some(c) = helper_cores {
                        affinity::set_cores(&c);
                    }
                    serve(&theirs)
                })
                .ok();
            let walk_mask = split.filter(|s| affinity::pin(s.here)).map(|s| s.mask);
            Helper {
                slots,
                thread,
                walk_mask,
            }
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
            if h.slots.back.0.parked.load(Ordering::Acquire) {
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
        if self.helper().thread.is_none() {
            return false;
        }
        // The shadows first, here, where the packets' lines are.
        if !self.shadows.make(batch) {
            return false;
        }
        let mut job = self
            .job
            .take()
            .expect("the parallel job is home between batches");
        if let Some(snap) = check.as_mut() {
            snap.take(batch);
        }
        if let NodeKind::Nf { nf, .. } = &mut nodes[real_n].kind {
            if !self.away_set {
                job.nf = Box::new(Away(nf.profile().clone()));
                self.away_set = true;
            }
            std::mem::swap(nf, &mut job.nf);
        }
        // Fork: the in-place NF and the packets leave for the helper (an empty batch
        // stands in for them here).
        job.cx = *cx;
        std::mem::swap(batch, &mut job.batch);
        let helper = self.helper.as_ref().expect("started above");
        let to = &helper.slots.to.0;
        helper.post(job);
        // The shadow side runs here meanwhile.
        counters[a].packets_in += n as u64;
        let sh = &mut self.shadows;
        match (check.is_some(), &mut sh.snap) {
            (true, s @ None) => *s = Some(Snapshot::new(n)),
            (false, s) => *s = None,
            _ => {}
        }
        if let Some(s) = sh.snap.as_mut() {
            s.take(&sh.batch);
        }
        if let NodeKind::Nf { nf, .. } = &mut nodes[shadow_n].kind {
            nf.process(&mut sh.batch, cx);
            if let Some(s) = sh.snap.as_ref() {
                note(s, &sh.batch, nf.profile(), &nodes[shadow_n].name, violation);
            }
        }
        sh.finish();
        // Join: a job the helper never picked up (it had no core) runs here.
        let stolen = if to.has_post.load(Ordering::Acquire) {
            lock(&to.posted).take()
        } else {
            None
        };
        let mut job = match stolen {
            Some(mut j) => {
                to.has_post.store(false, Ordering::Release);
                j.run();
                j
            }
            None => wait_done(helper),
        };
        if let NodeKind::Nf { nf, .. } = &mut nodes[real_n].kind {
            std::mem::swap(nf, &mut job.nf);
        }
        std::mem::swap(batch, &mut job.batch);
        if let Some(p) = job.panic.take() {
            self.job = Some(job);
            std::panic::resume_unwind(p);
        }
        if let (Some(snap), NodeKind::Nf { nf, .. }) = (check.as_ref(), &nodes[real_n].kind) {
            note(snap, batch, nf.profile(), &nodes[real_n].name, violation);
        }
        // The verdicts' lines, all at once: the helper's NF may have written them.
        for p in batch.iter() {
            crate::flow::prefetch(p.meta());
        }
        let verdicts = &self.shadows.verdicts;
        for (i, mut p) in batch.drain().enumerate() {
            let (va, vb) = if shadow_is_a {
                (verdicts[i], p.meta().verdict)
            } else {
                (p.meta().verdict, verdicts[i])
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
                    // Stored only when it changes: the line may still be the helper's.
                    if p.meta().verdict != Verdict::Out(0) {
                        p.forward(0);
                    }
                    inbox[nb.next[o]].push(p);
                }
            }
        }
        self.job = Some(job);
        true
    }
}

/// The helper's finished job: spun for (a load of its flag; the line stays shared until
/// the helper writes it), never parked on.
fn wait_done(helper: &Helper) -> Job {
    let back = &helper.slots.back.0;
    let since = crate::flow::tsc();
    loop {
        if back.has_done.load(Ordering::Acquire) {
            back.has_done.store(false, Ordering::Relaxed);
            if let Some(j) = lock(&back.done).take() {
                return j;
            }
        }
        wait_a_little(helper, crate::flow::tsc().wrapping_sub(since));
    }
}

/// One turn of the walk's wait for the helper, `waited` ticks into it: a spin, or after
/// [`WAIT_SPIN_TICKS`] (the helper lost its core, or shares ours) a yield of the core.
fn wait_a_little(helper: &Helper, waited: u64) {
    if waited < WAIT_SPIN_TICKS {
        std::hint::spin_loop();
        return;
    }
    if helper.thread.as_ref().is_none_or(|t| t.is_finished()) {
        panic!("the parallel helper thread ended");
    }
    std::thread::yield_now();
}

/// How many leading bytes of a packet (`d`, layers `l`) an NF that reads `reads` can
/// look at: through the end of the transport header (TCP's with its options). All of
/// them when it reads the payload or ICMP (an error quotes a packet), or when the
/// packet has no whole TCP or UDP header (a later fragment, another protocol).
fn head_len(l: &Layers, reads: Fields, d: &[u8]) -> usize {
    if reads.intersects(Fields::PAYLOAD | Fields::ICMP) || !l.has_l4() {
        return d.len();
    }
    let o = l.l4_off as usize;
    let end = match l.l4_proto {
        6 => d
            .get(o + 12)
            .map_or(d.len(), |b| o + (usize::from(b >> 4) * 4).max(20)),
        17 => o + 8,
        _ => d.len(),
    };
    end.min(d.len())
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
            h.slots.to.0.stop.store(true, Ordering::Release);
            if let Some(t) = h.thread.take() {
                t.thread().unpark();
                let _ = t.join();
            }
            if let Some(m) = h.walk_mask.take() {
                affinity::set_cores(&m);
            }
        }
    }
}

/// The slot's lock; a poisoned one (a panic while held, which the code never risks) is
/// still usable: the slot only ever holds a whole job or nothing.
fn lock(m: &Mutex<Option<Job>>) -> std::sync::MutexGuard<'_, Option<Job>> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// How long an idle helper spins before it parks, in TSC ticks (~1 ms): far longer than
/// the gap between two batches of the walk (the helper was parking between batches at
/// 50,000), so while batches flow a helper with a core of its own is always awake.
const SPIN_TICKS: u64 = 2_000_000;

/// A gap between two turns of the helper's idle loop longer than this (TSC ticks) means
/// the scheduler took its core meanwhile.
const PREEMPTED_TICKS: u64 = 100_000;

/// How long the walk's thread spins for the helper's result before it starts yielding
/// its core, in TSC ticks: longer than any batch's work on a core of its own.
const WAIT_SPIN_TICKS: u64 = 1_000_000;

/// The helper thread: runs each posted job's NF on the walk's packets and hands them
/// back.
fn serve(slots: &Slots) {
    let (to, back) = (&slots.to.0, &slots.back.0);
    let mut idle_since: Option<u64> = None;
    let mut last = crate::flow::tsc();
    loop {
        // Idle time counts only while this thread runs: after the scheduler took the
        // core away (a gap between two turns of this loop), the spell starts again, so a
        // helper that was preempted does not park the moment it is back while batches
        // still flow (it did: 4,235 of 6,690 batches found it parked, under load).
        let now = crate::flow::tsc();
        if now.wrapping_sub(last) > PREEMPTED_TICKS {
            idle_since = None;
        }
        last = now;
        if to.stop.load(Ordering::Acquire) {
            return;
        }
        let job = if to.has_post.load(Ordering::Acquire) {
            lock(&to.posted).take()
        } else {
            None
        };
        let Some(mut job) = job else {
            let since = *idle_since.get_or_insert(now);
            if now.wrapping_sub(since) < SPIN_TICKS {
                std::hint::spin_loop();
            } else {
                // SeqCst: the handshake with `Helper::post` (a job posted after this
                // store is either seen below or wakes the park).
                back.parked.store(true, Ordering::SeqCst);
                if !to.has_post.load(Ordering::SeqCst) && !to.stop.load(Ordering::Acquire) {
                    std::thread::park();
                }
                back.parked.store(false, Ordering::Release);
                idle_since = None;
                last = crate::flow::tsc();
            }
            continue;
        };
        idle_since = None;
        to.has_post.store(false, Ordering::Release);
        job.run();
        *lock(&back.done) = Some(job);
        back.has_done.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::thread::ThreadId;

    use crate::io::{PcapHeader, Trace};
    use crate::nfs::{Context, Nf, Profile};
    use crate::packet::{Batch, Fields, Layers, LinkKind};
    use crate::runtime::{Chain, NoProgress, RunOptions, Runner};

    /// The thread and the core each batch ran on.
    type Ran = Arc<Mutex<Vec<(ThreadId, Option<usize>)>>>;

    /// Notes the thread each batch runs on; panics at packet `at`; sleeps `nap` per
    /// batch (so the helper gets a core while the first side works).
    struct Seen {
        p: Profile,
        on: Ran,
        seen: usize,
        at: usize,
        nap: u64,
        /// The other side's record: the nap ends early once it has this batch.
        other: Option<Ran>,
    }

    impl Nf for Seen {
        fn profile(&self) -> &Profile {
            &self.p
        }
        fn process(&mut self, b: &mut Batch, _: &Context) {
            self.on.lock().unwrap().push((
                std::thread::current().id(),
                crate::runtime::affinity::current_core(),
            ));
            // Nap until the other side has taken this batch, up to `nap` µs: a fixed
            // 500 µs nap let a helper thread starved of a core (load 10 on two cores)
            // miss every batch, and the test failed though the code was right.
            let mine = self.on.lock().unwrap().len();
            let until = std::time::Instant::now() + std::time::Duration::from_micros(self.nap);
            while std::time::Instant::now() < until
                && self
                    .other
                    .as_ref()
                    .is_none_or(|o| o.lock().unwrap().len() < mine)
            {
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
            self.seen += b.len();
            assert!(self.seen < self.at, "seen {} packets", self.at);
        }
    }

    fn seen(at: usize, nap: u64, other: Option<Ran>) -> (Box<dyn Nf>, Ran) {
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
            other,
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

    /// `a ∥ b`, both writing nothing: `b` is the shadow side (on the walk's thread,
    /// napping until the helper has taken each batch), `a` the in-place side, which
    /// panics at packet `at`.
    fn chain(at: usize) -> (Chain, [Ran; 2]) {
        let (a, on_a) = seen(at, 0, None);
        let (b, on_b) = seen(usize::MAX, 200_000, Some(on_a.clone()));
        let mut c = Chain::linear("t", 1, 1, vec![("a".into(), a), ("b".into(), b)]);
        c.set_parallel(true).unwrap();
        (c, [on_a, on_b])
    }

    /// Ethernet + IPv4 (no options) + `l4` (protocol `proto`) + 100 bytes of payload.
    fn frame(proto: u8, l4: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 34];
        f[12] = 8;
        f[14] = 0x45;
        f[23] = proto;
        f.extend_from_slice(l4);
        f.extend_from_slice(&[0xaa; 100]);
        f
    }

    #[test]
    fn a_shadow_holds_the_headers_through_the_transport_header() {
        use super::head_len;
        let head = |f: &[u8], reads: Fields| {
            let l = Layers::parse(LinkKind::Ethernet, f);
            head_len(&l, reads, f)
        };
        let ports = Fields::L4_DST;
        // TCP: its data offset, options included (8 words: 32 bytes).
        let mut tcp = [0u8; 32];
        tcp[12] = 8 << 4;
        assert_eq!(head(&frame(6, &tcp), ports), 34 + 32);
        tcp[12] = 5 << 4;
        assert_eq!(head(&frame(6, &tcp), ports), 34 + 20);
        // A data offset under 5 words still counts the fixed 20 bytes.
        tcp[12] = 0;
        assert_eq!(head(&frame(6, &tcp), ports), 34 + 20);
        assert_eq!(head(&frame(17, &[0; 8]), Fields::IP_TTL), 34 + 8);
        // The payload, ICMP, or no whole transport header: all of it.
        let udp = frame(17, &[0; 8]);
        assert_eq!(head(&udp, ports | Fields::PAYLOAD), udp.len());
        let icmp = frame(1, &[0; 8]);
        assert_eq!(head(&icmp, Fields::ICMP), icmp.len());
        assert_eq!(head(&icmp, ports), icmp.len());
        let short = &udp[..38];
        assert_eq!(head(short, ports), 38);
        let mut later = udp.clone();
        later[20] = 0x00;
        later[21] = 0x10; // fragment offset 16 × 8: a later fragment
        assert_eq!(head(&later, ports), later.len());
    }

    /// Runs the trace through `r` until the helper has run a batch of `a` (each run
    /// starts the records afresh), for up to 30 s: a helper starved of a core, or parked
    /// when a run starts (that batch runs in sequence), may miss the batches of one run,
    /// never those of every run. Every run must pass all its packets, the shadow side
    /// `b` on this thread, each batch on both sides.
    fn run_until_the_helper_runs(r: &mut Runner, on_a: &Ran, on_b: &Ran) {
        let me = std::thread::current().id();
        let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            // Both at once: the shadow side's nap compares their lengths.
            let (mut a, mut b) = (on_a.lock().unwrap(), on_b.lock().unwrap());
            a.clear();
            b.clear();
            drop((a, b));
            let s = r
                .run(&trace(1000), &RunOptions::default(), &mut NoProgress)
                .unwrap();
            assert_eq!((s.packets_in, s.packets_out), (1000, 1000));
            let (a, b) = (on_a.lock().unwrap(), on_b.lock().unwrap());
            assert!(b.len() >= 1000 / 32 && b.iter().all(|t| t.0 == me), "{b:?}");
            assert_eq!(a.len(), b.len(), "{a:?}");
            if a.iter().any(|t| t.0 != me) {
                return;
            }
            assert!(
                std::time::Instant::now() < until,
                "the helper never ran a batch: {a:?}"
            );
        }
    }

    #[test]
    fn the_second_branch_runs_on_another_thread() {
        let (c, [on_a, on_b]) = chain(usize::MAX);
        let mut r = Runner::new(c, 60);
        // The helper takes a batch whenever it gets a core before the shadow side ends
        // (else this thread runs it): with the shadow side napping, it does.
        run_until_the_helper_runs(&mut r, &on_a, &on_b);
    }

    /// The race `Helper::post` closes: the helper parks after the walk saw it awake,
    /// then the job is posted. Nothing else wakes it here (no later batch, no join taking
    /// the job back): only the post's wake-up lets it run the job.
    #[test]
    fn a_post_wakes_a_helper_that_parked_after_the_check() {
        use super::{lock, serve, Helper, Job, Slots};
        use std::sync::atomic::Ordering;
        use std::time::{Duration, Instant};
        let slots = Arc::new(Slots::default());
        let theirs = slots.clone();
        let h = Helper {
            slots,
            thread: Some(std::thread::spawn(move || serve(&theirs))),
            walk_mask: None,
        };
        let (to, back) = (&h.slots.to.0, &h.slots.back.0);
        let until = Instant::now() + Duration::from_secs(30);
        while !back.parked.load(Ordering::SeqCst) {
            assert!(Instant::now() < until, "the helper never parked");
            std::thread::sleep(Duration::from_millis(1));
        }
        // `parked` is set just before the helper's last look for a post: give it time
        // to be inside `park` (else the post is seen without a wake-up, and the test
        // passes without one).
        std::thread::sleep(Duration::from_millis(50));
        let (nf, on) = seen(usize::MAX, 0, None);
        h.post(Job {
            nf,
            batch: Batch::with_capacity(1),
            cx: Context::default(),
            panic: None,
        });
        let until = Instant::now() + Duration::from_secs(30);
        while !back.has_done.load(Ordering::Acquire) {
            assert!(
                Instant::now() < until,
                "the helper never ran the job posted while it was parked"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let job = lock(&back.done).take().expect("the job is back");
        assert!(job.panic.is_none());
        let ran = on.lock().unwrap();
        let helper = h.thread.as_ref().unwrap().thread().id();
        assert!(ran.len() == 1 && ran[0].0 == helper, "{ran:?}");
        to.stop.store(true, Ordering::Release);
        let t = h.thread.unwrap();
        t.thread().unpark();
        t.join().unwrap();
    }

    #[test]
    fn the_helper_runs_on_another_core_and_the_walk_gets_its_mask_back() {
        use crate::runtime::affinity::allowed_cores;
        let mask = allowed_cores();
        if mask.len() < 2 {
            println!("skipped: {} core(s) in this thread's mask", mask.len());
            return;
        }
        let (c, [on_a, on_b]) = chain(usize::MAX);
        let mut r = Runner::new(c, 60);
        run_until_the_helper_runs(&mut r, &on_a, &on_b);
        drop(r);
        // While the group lived the walk kept one core and the helper had the others:
        // two threads that wait on each other every batch never shared a core.
        let me = std::thread::current().id();
        let (a, b) = (on_a.lock().unwrap(), on_b.lock().unwrap());
        let walk: Vec<usize> = b.iter().filter_map(|t| t.1).collect();
        assert!(
            !walk.is_empty() && walk.iter().all(|&c| c == walk[0]),
            "{b:?}"
        );
        let helper: Vec<usize> = a.iter().filter(|t| t.0 != me).filter_map(|t| t.1).collect();
        assert!(!helper.is_empty(), "{a:?}");
        assert!(helper.iter().all(|&c| c != walk[0]), "{a:?} {b:?}");
        assert_eq!(allowed_cores(), mask, "the walk's thread got its mask back");
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
