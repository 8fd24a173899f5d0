//! FastPath over one chunk of packets: sorted into hits and misses in arrival order; hits
//! go along their entry at once, misses gather and run the chain (recorded) before the
//! next hit, so every NF sees events in the order it would without FastPath.
//!
//! The runtime owns the chain, the buffers and the counters; it lends them through
//! [`Host`], so this layer never names the runtime's types.

use super::table::{Found, Probe, Step, Way, MAX_PATH, NO_SHAPE, SHAPE_CALL, SHAPE_FOLD};
use super::{FastPath, FpKey};
use crate::flow::FlowKey;
use crate::nfs::{
    Consolidate, FastFacts, FastPacket, FastRun, Nf, TokenLines, Visits, VISITS_AHEAD,
};
use crate::packet::{Batch, Layers, Packet, Pool, Verdict, MAX_BATCH};

/// Most consolidated NFs a chain may have for a chunk of hits to borrow them all at once
/// ([`Host::lend`]); a chain with more looks each up per hit.
pub const LENT: usize = 16;

/// The chain's consolidated NFs for a chunk of hits, by slot ([`FastPath::slots`]):
/// looked up once per chunk, since finding an NF's [`Consolidate`] side is a dynamic
/// call that the hits would otherwise make twice per NF.
pub type Lent<'a> = [Option<&'a mut dyn Consolidate>; LENT];

/// What a hit needs of the runtime besides the NFs: where it goes and what it counts.
pub trait HitOut {
    /// As [`Host::to_sink`].
    fn to_sink(&mut self, node: usize, p: &Packet);
    /// Returns a buffer to the pool.
    fn free(&mut self, p: Packet);
    /// Returns every buffer of `b` to the pool, leaving it empty (one block move: a
    /// fused run frees its chunk at once, not one call per hit).
    fn free_batch(&mut self, b: &mut Batch);
    /// As [`Host::count`].
    fn count(&mut self, node: usize, verdict: Verdict, n: u64);
}

/// What FastPath needs from the runtime that runs the chain.
pub trait Host {
    /// The sinks, counters and pool, apart from the NFs ([`Host::lend`]).
    type Out<'a>: HitOut
    where
        Self: 'a;
    /// Node `node`'s NF (None for the input and sinks).
    fn nf(&mut self, node: usize) -> Option<&mut dyn Nf>;
    /// Packets waiting to run the chain from its first NF: the chunk just ingested before
    /// [`FastPath::chunk`] takes it, then the misses it gathers.
    fn misses(&mut self) -> &mut Batch;
    /// Runs the waiting misses through the chain with `f`'s recording hooks.
    fn run_chain(&mut self, f: &mut FastPath);
    fn pool(&mut self) -> &mut Pool;
    /// A hit reaches sink `node` (rewritten, egress set): count and write it; the caller
    /// frees the buffer.
    fn to_sink(&mut self, node: usize, p: &Packet);
    /// `n` packets left node `node` with `verdict`.
    fn count(&mut self, node: usize, verdict: Verdict, n: u64);
    /// Packets that reached node `node` so far.
    fn packets_in(&self, node: usize) -> u64;
    /// Runs `f` with node i's [`Consolidate`] side at `nfs[slots[i]]` (nodes whose slot
    /// is [`LENT`] or more, and nodes without one, lend nothing) and the rest of the host.
    fn lend<R>(
        &mut self,
        slots: &[u8],
        f: impl FnOnce(&mut Lent<'_>, &mut Self::Out<'_>) -> R,
    ) -> R;
}

/// What a hit reaches: the NFs on its path and the host's sinks and counters.
trait HitCx: HitOut {
    /// The NF of step `s` of a path.
    fn nf(&mut self, s: &Step) -> Option<&mut dyn Consolidate>;

    /// Where the lent NFs' tokens name their state, by slot (None when the NFs are not
    /// lent: then each is asked per hit).
    fn lines(&mut self) -> Option<[TokenLines; LENT]> {
        None
    }
}

/// Each NF looked up when a hit needs it.
struct Direct<'h, H: Host>(&'h mut H);

impl<H: Host> HitOut for Direct<'_, H> {
    #[inline(always)]
    fn to_sink(&mut self, node: usize, p: &Packet) {
        self.0.to_sink(node, p);
    }

    #[inline(always)]
    fn free(&mut self, p: Packet) {
        self.0.pool().free(p);
    }

    #[inline(always)]
    fn free_batch(&mut self, b: &mut Batch) {
        self.0.pool().free_batch(b);
    }

    #[inline(always)]
    fn count(&mut self, node: usize, verdict: Verdict, n: u64) {
        self.0.count(node, verdict, n);
    }
}

impl<H: Host> HitCx for Direct<'_, H> {
    #[inline(always)]
    fn nf(&mut self, s: &Step) -> Option<&mut dyn Consolidate> {
        self.0.nf(s.node()).and_then(|nf| nf.consolidate_mut())
    }
}

/// The NFs lent for a chunk ([`Host::lend`]).
struct Lending<'l, 'a, O: HitOut> {
    nfs: &'l mut Lent<'a>,
    out: &'l mut O,
}

impl<O: HitOut> HitOut for Lending<'_, '_, O> {
    #[inline(always)]
    fn to_sink(&mut self, node: usize, p: &Packet) {
        self.out.to_sink(node, p);
    }

    #[inline(always)]
    fn free(&mut self, p: Packet) {
        self.out.free(p);
    }

    #[inline(always)]
    fn free_batch(&mut self, b: &mut Batch) {
        self.out.free_batch(b);
    }

    #[inline(always)]
    fn count(&mut self, node: usize, verdict: Verdict, n: u64) {
        self.out.count(node, verdict, n);
    }
}

impl<O: HitOut> HitCx for Lending<'_, '_, O> {
    #[inline(always)]
    fn nf(&mut self, s: &Step) -> Option<&mut dyn Consolidate> {
        // The slot recorded in the step (the lent NFs are the chain's, by its slots).
        match self.nfs.get_mut(s.slot as usize) {
            Some(Some(c)) => Some(&mut **c),
            _ => None,
        }
    }

    fn lines(&mut self) -> Option<[TokenLines; LENT]> {
        // NFs that prefetch nothing get empty lines with a full mask (skipped); NFs that
        // prefetch without saying where get [`TokenLines::NONE`] (asked per hit).
        const SKIP: TokenLines = TokenLines {
            mask: u64::MAX,
            ..TokenLines::NONE
        };
        Some(std::array::from_fn(|i| match &self.nfs[i] {
            Some(c) if c.fast_prefetches() => c.fast_lines(),
            _ => SKIP,
        }))
    }
}

/// `n` packets took a consolidated path: each NF on it counts them as the slow path
/// would have, per verdict, and so do NFs whose state function only counts.
pub fn count_path<H: Host>(h: &mut H, path: &[Step], n: u64) {
    count_along(&mut Direct(h), path, n);
}

/// The hits of a path's entry up to `last` (run clock) skipped the steps that fold:
/// each such NF folds their state functions in ([`Consolidate::fast_fold`]).
pub fn fold_path<H: Host>(h: &mut H, path: &[Step], last: u64) {
    for s in path.iter().filter(|s| s.flags & Step::FOLD != 0) {
        if let Some(c) = h.nf(s.node()).and_then(|nf| nf.consolidate_mut()) {
            c.fast_fold(s.token, last);
        }
    }
}

#[inline]
fn count_along<C: HitCx>(cx: &mut C, path: &[Step], n: u64) {
    for s in path {
        cx.count(s.node(), s.verdict, n);
        if s.flags & Step::COUNT != 0 {
            if let Some(c) = cx.nf(s) {
                c.fast_count(s.token, n);
            }
        }
    }
}

impl FastPath {
    /// Runs the chunk waiting in `h.misses()`: hits along their entries, misses through
    /// the chain in order with them.
    pub fn chunk<H: Host>(&mut self, h: &mut H) {
        self.table.ready();
        std::mem::swap(&mut self.chunk_in, h.misses());
        let mut input = std::mem::replace(&mut self.chunk_in, Batch::with_capacity(0));
        // Fold-back (docs/fastpath.md): a chunk that reaches the fold period's horizon
        // ends it first; hits fold only in a chunk that lies wholly before it.
        let mut fold = false;
        if self.folds {
            if let (Some(a), Some(b)) = (input.iter().next(), input.iter().next_back()) {
                let (first, last) = (a.meta().now_ns, b.meta().now_ns);
                if last >= self.horizon {
                    self.new_period(h, first, last);
                }
                fold = last < self.horizon;
            }
        }
        // Keys and hashes first with each set's tags prefetched, then the matching
        // entries prefetched, so the chunk's lookups overlap their cache misses.
        let mut keys = [FpKey::EMPTY; MAX_BATCH];
        let mut hashes = [0u64; MAX_BATCH];
        // Bit i: packet i is IP (has a key).
        let mut keyed = 0u64;
        for (i, p) in input.iter_mut().enumerate() {
            if let Some(k) = FpKey::of(p) {
                let h = self.table.hash(&k);
                self.table.prefetch_tags(h);
                keys[i] = k;
                hashes[i] = h;
                keyed |= 1 << i;
            }
        }
        // Then each set's tags compared once, the matching entries prefetched (their
        // first line, or two when hits may call NFs).
        let mut probes = [Probe::NONE; MAX_BATCH];
        let mut m = keyed;
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            probes[i] = self.table.probe(hashes[i], self.calls);
            m &= m - 1;
        }
        // Then, in chains that rewrite or have NF state to load, the entries' actions and
        // the NF state their tokens name (NAT mappings, tracked connections).
        let mut ways = [None; MAX_BATCH];
        let ways_found = self.prefetch || self.rewrites;
        // Chains whose hits take fused runs prefetch the NF state in the run's own pass
        // over the paths (one walk of each path, not two); the rest prefetch it here.
        let nf_lines = self.prefetch && !self.fuses();
        if ways_found {
            if nf_lines && self.lendable {
                // The NFs that prefetch, looked up once for the chunk.
                let slots = std::mem::take(&mut self.slots);
                h.lend(&slots, |nfs, out| {
                    let mut cx = Lending { nfs, out };
                    self.find_ways(&mut cx, nf_lines, keyed, &keys, &probes, &mut ways);
                });
                self.slots = slots;
            } else {
                let cx = &mut Direct(&mut *h);
                self.find_ways(cx, nf_lines, keyed, &keys, &probes, &mut ways);
            }
        }
        // The common case, fused: the packets of the chunk are IP and find a live,
        // unexpired consolidated entry they fit (long enough, Ethernet addresses as
        // recorded, no FIN/RST). Hits then go along their entries in one pass, without
        // the general loop's per-packet lookup, flush, refusal and deferral handling.
        // Hits change no entry but a failed check's, so what was found holds.
        let mut fused: [Option<Way>; MAX_BATCH] = [None; MAX_BATCH];
        // Chains whose hits call NFs take the fused run: each NF checks and runs its
        // state functions for the whole chunk in one call, not two calls per hit. What
        // its state functions see of each packet is gathered as the chunk is checked,
        // with the TCP flags read once for the FIN/RST test and them.
        let fuses = self.fuses();
        let mut facts = [FastFacts::default(); MAX_BATCH];
        let n = input.len();
        // The leading packets that fit (no removal since the probes: the ways found are
        // live). A fused run takes them even when a later packet misses: one miss (an
        // evicted flow) would otherwise send the chunk's 31 hits down the general loop,
        // two dynamic calls per NF and hit.
        let mut fit = 0;
        for (i, p) in input.iter().enumerate() {
            if keyed & 1 << i == 0 {
                break;
            }
            let w = if ways_found {
                ways[i]
            } else {
                self.table.way_in(probes[i], &keys[i])
            };
            let flags = keys[i].tcp_flags(p.data());
            if fuses {
                let m = p.meta();
                facts[i] = FastFacts {
                    ts_ns: m.ts_ns,
                    now_ns: m.now_ns,
                    wire_len: m.wire_len,
                    tcp_flags: flags,
                    fragment: keys[i].layer_flags() & Layers::FRAGMENT != 0,
                };
            }
            match w.filter(|&w| self.table.fits(w, flags, p)) {
                Some(w) => fused[i] = Some(w),
                None => break,
            }
            fit = i + 1;
        }
        let fits = fit == n && n > 0;
        // Packets the NFs did not vouch for, and those past the fitting ones, go on in
        // the general loop, one by one (a chunk the fused run took whole is empty now).
        let taken = if fuses && fit > 0 {
            // Hits that may fold take a copy of the run with the per-hit fold test; the
            // rest (and chains without a folding NF) pay nothing for it.
            if fold {
                self.fused_run::<H, true>(h, &mut input, &fused, &facts, fit)
            } else {
                self.fused_run::<H, false>(h, &mut input, &fused, &facts, fit)
            }
        } else {
            0
        };
        let mut rest = input.drain().enumerate();
        for (_, p) in rest.by_ref().take(taken) {
            h.pool().free(p);
        }
        if fits && !fuses {
            let failed = if self.calls && self.lendable {
                // The NFs the hits call, looked up once for the chunk.
                let slots = std::mem::take(&mut self.slots);
                let failed = h.lend(&slots, |nfs, out| {
                    let mut cx = Lending { nfs, out };
                    rest.by_ref().find_map(|(i, p)| match fused[i] {
                        Some(w) => self.hit_along(&mut cx, w, &keys[i], p).map(|p| (i, p)),
                        None => Some((i, p)),
                    })
                });
                self.slots = slots;
                failed
            } else {
                let mut cx = Direct(&mut *h);
                rest.by_ref().find_map(|(i, p)| match fused[i] {
                    Some(w) => self.hit_along(&mut cx, w, &keys[i], p).map(|p| (i, p)),
                    None => Some((i, p)),
                })
            };
            if let Some((i, mut p)) = failed {
                // A check failed (the entry is gone): this packet is recorded on the
                // slow path, as in the general loop, which takes the rest.
                self.stats.misses += 1;
                self.rec.begin(&mut p, keys[i]);
                h.misses().push(p);
            }
        }
        // The probes hold until the first flush or deferral inserts entries.
        let mut probes_hold = true;
        for (i, p) in rest {
            let now = p.meta().now_ns;
            if keyed & 1 << i == 0 {
                self.stats.misses += 1;
                h.misses().push(p);
                continue;
            }
            let (key, hash) = (&keys[i], hashes[i]);
            if key.ends_flow(p.data()) {
                if self.table.remove_key(key) {
                    self.stats.ended += 1;
                }
                self.stats.misses += 1;
                h.misses().push(p);
                continue;
            }
            let way = if !probes_hold {
                self.table.way(key, hash)
            } else if ways_found {
                ways[i].filter(|&w| self.table.live(w))
            } else {
                self.table
                    .way_in(probes[i], key)
                    .filter(|&w| self.table.live(w))
            };
            let mut found = self.table.find_at(way, now);
            if matches!(found, Found::Hit(_)) && !h.misses().is_empty() {
                // Earlier misses go first; they may change what the entry relies on.
                self.flush(h);
                probes_hold = false;
                found = self.table.find(key, hash, now);
            }
            let p = match found {
                Found::Hit(w) => match self.hit(&mut Direct(&mut *h), w, key, p) {
                    None => continue,
                    Some(p) => p,
                },
                Found::Refusal(w) => {
                    // A remembered refusal: the chain, in order with the other misses,
                    // unrecorded but for every RETRY_AFTER-th packet.
                    if !self.table.count_down(w) {
                        self.stats.misses += 1;
                        self.stats.unrecorded += 1;
                        h.misses().push(p);
                        continue;
                    }
                    p
                }
                Found::Expired | Found::Miss => {
                    if found == Found::Expired {
                        self.stats.expired += 1;
                    }
                    if self.record_at > 1 {
                        // Unrecorded now; the entry that counts the flow's packets is
                        // installed at once, so the probes are stale.
                        self.defer(*key, now);
                        probes_hold = false;
                        self.stats.misses += 1;
                        h.misses().push(p);
                        continue;
                    }
                    p
                }
            };
            let mut p = p;
            self.stats.misses += 1;
            self.rec.begin(&mut p, *key);
            h.misses().push(p);
        }
        self.chunk_in = input;
        self.flush(h);
        // Entries that went this chunk hand over their counts (and folds).
        self.drain_retired(h);
    }

    /// A chunk that hits whole, in one pass per NF and one over the packets: every NF
    /// with a check vouches for a prefix of its visits ([`Consolidate::fast_vouch`]),
    /// the chunk's packets up to the first one some NF did not vouch for are taken, each
    /// NF runs its state functions for its visits among them in one call
    /// ([`Consolidate::fast_state_run`]; NFs share no state, so NF after NF equals packet
    /// after packet), then those packets are rewritten, sent and counted, in place.
    /// Returns how many leading packets of `input` it took: all of them are freed when
    /// that is the whole chunk (`input` is then empty), else the caller frees them; the
    /// rest is left for the general loop, which checks them one by one. With `FOLD` (the
    /// chunk lies before the fold period's horizon), a hit whose entry is marked with
    /// the period takes its shape's folded twin (no NAT steps); the others mark it.
    fn fused_run<H: Host, const FOLD: bool>(
        &mut self,
        h: &mut H,
        input: &mut Batch,
        fused: &[Option<Way>; MAX_BATCH],
        facts: &[FastFacts; MAX_BATCH],
        n: usize,
    ) -> usize {
        let slots = std::mem::take(&mut self.slots);
        let FastPath {
            table, slot_flags, ..
        } = self;
        let (prefetch, ticks) = (self.prefetch, self.ticks);
        // Bit i: packet i's hit skips its folding steps (folded), or ran them and marks
        // its entry with the period (marks).
        let (mut folded, mut marks) = (0u64, 0u64);
        let taken = h.lend(&slots, |nfs, out| {
            let mut k = n;
            {
                // Where the lent NFs' tokens name their state (one call per NF for the
                // chunk), prefetched before the NFs' checks read them. Slots whose NFs
                // prefetch nothing (filters, monitors) are skipped (`named`).
                let mut lines = [TokenLines::NONE; LENT];
                let mut named = 0u32;
                if prefetch {
                    for (i, c) in nfs.iter().enumerate() {
                        if let Some(c) = c.as_deref().filter(|c| c.fast_prefetches()) {
                            lines[i] = c.fast_lines();
                            named |= 1 << i;
                        }
                    }
                }
                // Each packet's path, keys and shape: the NFs read their visits from the
                // paths (`Visits`), so nothing is gathered per visit.
                static NO_PATH: [Step; MAX_PATH] = [Step::EMPTY; MAX_PATH];
                let mut paths: [&[Step; MAX_PATH]; MAX_BATCH] = [&NO_PATH; MAX_BATCH];
                let mut kref: [&[FlowKey]; MAX_BATCH] = [&[]; MAX_BATCH];
                let mut shapes = [0u8; MAX_BATCH];
                // The folded packets' own shapes (their twins are in `shapes`).
                let mut own = [0u8; MAX_BATCH];
                for (i, w) in fused.iter().take(n).enumerate() {
                    let Some(w) = *w else {
                        k = i;
                        break;
                    };
                    let (e, _, ks) = table.entry_parts(w);
                    // An entry that calls NFs has its keys (`keys_of`) and its shape.
                    let Some(ks) = ks else {
                        continue;
                    };
                    let shape = e.steps[0].shape;
                    if shape == NO_SHAPE {
                        k = i;
                        break;
                    }
                    kref[i] = &ks.keys;
                    paths[i] = &e.steps;
                    shapes[i] = shape;
                    if FOLD {
                        // An entry with folding steps folds when its hit in this period
                        // ran them (its mappings were refreshed since the period began)
                        // and the packet cannot change their state (no SYN).
                        let twin = table.twin(shape);
                        if twin != shape {
                            if table.mark(w) == table.period && facts[i].tcp_flags & 0x02 == 0 {
                                own[i] = shape;
                                shapes[i] = twin;
                                folded |= 1 << i;
                            } else {
                                marks |= 1 << i;
                            }
                        }
                    }
                }
                let (paths, keys) = (&paths, &kref);
                // Runs of packets whose entries share a shape, one after the other: in
                // each, every NF vouches for its visits, then runs their state functions
                // (NFs share no state, so NF after NF equals packet after packet; and a
                // run after a run is a chunk after a chunk).
                let mut a = 0;
                while a < k {
                    let id = shapes[a];
                    let b = (a + 1..k).find(|&i| shapes[i] != id).unwrap_or(k);
                    let shape = table.shape(id);
                    // The steps that call their NF: (step, slot, flags).
                    let calls = || {
                        (0..MAX_PATH).filter_map(move |j| {
                            let c = (shape >> (8 * j)) as u8;
                            (c & SHAPE_CALL != 0).then_some((j, (c & 0xf) as usize, c >> 4 & 3))
                        })
                    };
                    for (j, sl, _) in calls() {
                        if named & 1 << sl == 0 {
                            continue;
                        }
                        // Unchecked: a prefetch of an address that names nothing (a
                        // stale token past the slab) is harmless.
                        let l = &lines[sl];
                        if l.ctrl.is_null() && !l.reads_key {
                            for p in &paths[a..b] {
                                super::table::prefetch(l.prefetch_at(p[j].token));
                            }
                            continue;
                        }
                        // An item that may straddle two lines, the control byte a hit
                        // reads first, the flow key it hands over (the monitor): only
                        // the run's first visits here; its state function prefetches
                        // each later one `VISITS_AHEAD` visits before it serves it.
                        let ahead = b.min(a + VISITS_AHEAD);
                        for (p, ks) in paths[a..ahead].iter().zip(&keys[a..ahead]) {
                            let s = &p[j];
                            l.prefetch_visit(s.token, ks.as_ptr().wrapping_add(s.key_index()));
                        }
                    }
                    let mut end = b;
                    for (j, sl, _) in calls() {
                        if slot_flags[sl] & Step::CHECK == 0 {
                            continue;
                        }
                        let run = FastRun {
                            visits: Visits::new(paths, j, a, b),
                            facts,
                            keys,
                        };
                        let ok = nfs[sl].as_deref().map_or(0, |c| c.fast_vouch(&run));
                        end = end.min(a + ok);
                    }
                    if end > a {
                        for (j, sl, _) in calls() {
                            if slot_flags[sl] & Step::STATE == 0 {
                                continue;
                            }
                            if let Some(c) = nfs[sl].as_deref_mut() {
                                c.fast_state_run(&FastRun {
                                    visits: Visits::new(paths, j, a, end),
                                    facts,
                                    keys,
                                });
                            }
                        }
                    }
                    if end < b {
                        k = end;
                        break;
                    }
                    a = b;
                }
                if FOLD && folded != 0 && ticks != 0 {
                    // The folded hits taken, per NF whose steps they skipped (runs of
                    // one shape at a time): their ticks (`fast_skipped`), for the NFs
                    // that take them.
                    let taken = if k >= 64 { u64::MAX } else { (1u64 << k) - 1 };
                    let mut skipped = [0u64; LENT];
                    let mut bits = folded & taken;
                    while bits != 0 {
                        let i = bits.trailing_zeros() as usize;
                        let id = own[i % MAX_BATCH];
                        let mut run = 0u64;
                        while bits != 0 && own[bits.trailing_zeros() as usize % MAX_BATCH] == id {
                            bits &= bits - 1;
                            run += 1;
                        }
                        let shape = table.shape(id);
                        for j in 0..MAX_PATH {
                            let c = (shape >> (8 * j)) as u8;
                            if c & (SHAPE_CALL | SHAPE_FOLD) == SHAPE_CALL | SHAPE_FOLD {
                                skipped[(c & 0xf) as usize % LENT] += run;
                            }
                        }
                    }
                    let mut m = ticks;
                    while m != 0 {
                        let sl = m.trailing_zeros() as usize;
                        m &= m - 1;
                        if skipped[sl % LENT] > 0 {
                            if let Some(c) = nfs[sl % LENT].as_deref_mut() {
                                c.fast_skipped(skipped[sl % LENT]);
                            }
                        }
                    }
                }
            }
            let k = k.min(input.len());
            for (i, (p, w)) in input.as_mut_slice()[..k].iter_mut().zip(fused).enumerate() {
                // (Every packet of a fused chunk has its way.)
                let Some(w) = *w else {
                    continue;
                };
                if FOLD && marks & 1 << i != 0 {
                    table.set_mark(w);
                }
                let now = p.meta().now_ns;
                let e = table.entry(w);
                if let Some(sink) = e.sink() {
                    if e.rewrites() {
                        if let Some(a) = table.actions_of(w) {
                            a.apply(p.data_mut());
                        }
                    }
                    p.meta_mut().egress = e.egress;
                    out.to_sink(sink, p);
                }
                if table.hit(w, now) {
                    let (c, path) = table.take_count(w);
                    count_along(&mut Lending { nfs, out }, path, c as u64);
                }
            }
            if k == input.len() {
                // The whole chunk: its buffers go back in one move.
                out.free_batch(input);
            }
            k
        });
        self.slots = slots;
        self.stats.hits += taken as u64;
        if FOLD && folded != 0 {
            let taken_bits = if taken >= 64 {
                u64::MAX
            } else {
                (1u64 << taken) - 1
            };
            let f = (folded & taken_bits).count_ones() as u64;
            self.stats.folded += f;
            self.pending |= f > 0;
        }
        taken
    }

    /// Whether a chunk whose packets all fit their entries takes a fused run.
    #[inline(always)]
    fn fuses(&self) -> bool {
        self.calls && self.lendable
    }

    /// The ways the probes found for the keyed packets, with each found entry's actions
    /// prefetched when it rewrites and, with `nf_lines`, the NF state its tokens name
    /// (NAT mappings, tracked connections).
    #[inline(always)]
    fn find_ways<C: HitCx>(
        &self,
        cx: &mut C,
        nf_lines: bool,
        keyed: u64,
        keys: &[FpKey; MAX_BATCH],
        probes: &[Probe; MAX_BATCH],
        ways: &mut [Option<Way>; MAX_BATCH],
    ) {
        // The NFs' state lines as data, looked up once for the chunk: a hit's prefetches
        // are then address arithmetic, not a dynamic call per NF.
        let lines = if nf_lines { cx.lines() } else { None };
        // Bit i: slot i's lines can name something (the others, such as filters and
        // monitors, prefetch nothing: their steps are skipped without the arithmetic).
        let named = lines.as_ref().map_or(0u32, |ls| {
            ls.iter().enumerate().fold(0, |m, (i, l)| {
                if l.len == 0 && l.mask != 0 {
                    m
                } else {
                    m | 1 << i
                }
            })
        });
        let mut m = keyed;
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            m &= m - 1;
            ways[i] = self.table.way_in(probes[i], &keys[i]);
            let Some(w) = ways[i] else {
                continue;
            };
            let e = self.table.entry(w);
            if e.rewrites() {
                self.table.prefetch_actions(w);
            }
            if !nf_lines {
                continue;
            }
            match &lines {
                Some(lines) => {
                    for s in e.path() {
                        let sl = s.slot as usize % LENT;
                        if named & 1 << sl == 0 {
                            continue;
                        }
                        let l = &lines[sl];
                        match l.at(s.token) {
                            Some(a) => super::table::prefetch(a),
                            None if l.len == 0 && l.mask == 0 => {
                                if let Some(c) = cx.nf(s) {
                                    c.fast_prefetch(s.token);
                                }
                            }
                            None => {}
                        }
                    }
                }
                None => {
                    for s in e.path() {
                        if let Some(c) = cx.nf(s) {
                            c.fast_prefetch(s.token);
                        }
                    }
                }
            }
        }
    }

    /// Runs the gathered misses through the chain and files their recordings.
    fn flush<H: Host>(&mut self, h: &mut H) {
        if h.misses().is_empty() {
            return;
        }
        h.run_chain(self);
        // A recording ran its NFs, so it refreshed their state as a hit that runs its
        // folding steps does, at or after the period's start and before its horizon
        // (this chunk lies inside the period when one is open): its entry is marked with
        // the period at once, so the flow's first hit may fold too.
        let mark = if self.horizon != 0 {
            self.table.period
        } else {
            0
        };
        let FastPath {
            rec, table, stats, ..
        } = self;
        rec.finish(|e, k, o| {
            if !e.path().iter().any(|s| s.flags & Step::FOLD != 0) {
                return FastPath::settle(table, stats, e, k, o, 0);
            }
            // A step folds only when its token allows it (a NAT's unanswered inbound
            // flow needs its check on every packet): asked once per recording.
            let mut e = *e;
            let n = e.len as usize;
            for s in &mut e.steps[..n] {
                let foldable = s.flags & Step::FOLD != 0
                    && h.nf(s.node())
                        .and_then(|nf| nf.consolidate())
                        .is_some_and(|c| c.fast_foldable(s.token));
                if !foldable {
                    s.flags &= !Step::FOLD;
                }
            }
            FastPath::settle(table, stats, &e, k, o, mark)
        });
    }

    /// Sends `p` along entry `w`: validity checks of every NF on the path first, then
    /// their state functions and counters, then the consolidated rewrite. Gives the
    /// packet back when a check fails (the entry is dropped; the slow path takes it).
    #[inline(always)]
    fn hit<C: HitCx>(&mut self, cx: &mut C, w: Way, key: &FpKey, p: Packet) -> Option<Packet> {
        let (e, actions, _) = self.table.entry_parts(w);
        if p.len() < e.min_len as usize
            || e.matches_eth() && !actions.is_some_and(|a| a.eth_matches(p.data()))
        {
            return Some(p);
        }
        self.hit_along(cx, w, key, p)
    }

    /// [`hit`](Self::hit) for a packet known to fit its entry ([`super::Table::fits`]).
    #[inline(always)]
    fn hit_along<C: HitCx>(
        &mut self,
        h: &mut C,
        w: Way,
        key: &FpKey,
        mut p: Packet,
    ) -> Option<Packet> {
        let (e, actions, keys) = self.table.entry_parts(w);
        let now = p.meta().now_ns;
        // An entry that calls NFs has its keys (`keys_of`).
        if let Some(keys) = keys {
            let m = p.meta();
            let mut fp = FastPacket {
                key: &keys.keys[0],
                fragment: key.layer_flags() & Layers::FRAGMENT != 0,
                ts_ns: m.ts_ns,
                now_ns: now,
                wire_len: m.wire_len,
                tcp_flags: key.tcp_flags(p.data()),
            };
            let path = e.path();
            // Every check before any state function, so a failed one leaves no trace.
            for s in path.iter().filter(|s| s.flags & Step::CHECK != 0) {
                let ok = match h.nf(s) {
                    Some(nf) => {
                        // A reference only: the key is read by the NFs that need it.
                        fp.key = &keys.keys[s.key_index()];
                        nf.fast_valid(s.token, &fp)
                    }
                    None => false,
                };
                if !ok {
                    self.table.remove(w);
                    self.stats.invalidated += 1;
                    return Some(p);
                }
            }
            for s in path.iter().filter(|s| s.flags & Step::STATE != 0) {
                if let Some(nf) = h.nf(s) {
                    fp.key = &keys.keys[s.key_index()];
                    nf.fast_state(s.token, &fp);
                }
            }
        }
        if let Some(k) = e.sink() {
            if let Some(a) = actions.filter(|_| e.rewrites()) {
                a.apply(p.data_mut());
            }
            p.meta_mut().egress = e.egress;
            h.to_sink(k, &p);
        }
        h.free(p);
        if self.table.hit(w, now) {
            let (n, path) = self.table.take_count(w);
            count_along(h, path, n as u64);
        }
        self.stats.hits += 1;
        None
    }

    /// Hands the hits entries hold (and retired entries held) to the counters, so they
    /// are whole (before a summary or a control command).
    pub fn settle_counts<H: Host>(&mut self, h: &mut H) {
        // Folded refreshes first, so the NFs' state is whole too.
        self.fold_all(h);
        self.table.drain_counts(|n, path, fold| {
            if n > 0 {
                count_path(h, path, n);
            }
            if let Some(last) = fold {
                fold_path(h, path, last);
            }
        });
    }

    /// NF `node` changed (a control command): every entry recorded through it is stale,
    /// gone before the next packet.
    pub fn invalidate_through(&mut self, node: usize) {
        self.stats.invalidated += self.table.remove_through(node);
    }

    /// Recording hook before node `n`'s NF processes `b` (only while recording).
    #[inline]
    pub fn before_nf(&mut self, n: usize, b: &mut Batch) {
        let (g, ok, w) = (self.flags[n], self.consolidable[n], self.writes[n]);
        let slot = self.slots.get(n).copied().unwrap_or(u8::MAX);
        for p in b.iter_mut() {
            self.rec.before(n, g, slot, ok, w, p);
        }
    }

    /// Recording hook after node `n`'s NF (with `outputs` outputs) processed `b`.
    #[inline]
    pub fn after_nf(&mut self, n: usize, b: &mut Batch, outputs: usize) {
        let last = outputs.saturating_sub(1);
        for p in b.iter_mut() {
            let v = match p.meta().verdict {
                Verdict::Out(o) => Verdict::Out((o as usize).min(last) as u8),
                d => d,
            };
            self.rec.after(p, v, self.writes[n]);
        }
    }

    /// Recording hook as `b` reaches sink `n`.
    #[inline]
    pub fn at_sink(&mut self, n: usize, b: &mut Batch) {
        for p in b.iter_mut() {
            self.rec.at_sink(n, p, &self.writes_eth);
        }
    }

    /// A recording is under way (the chain's walk calls the hooks only then).
    #[inline]
    pub fn recording(&self) -> bool {
        self.rec.active()
    }
}
