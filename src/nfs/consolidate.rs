//! FastPath's side of an NF, an optional capability: an NF that can be skipped on a
//! flow's later packets (header-action consolidation) implements [`Consolidate`] and
//! exposes it with [`Nf::consolidate`](super::Nf::consolidate); every other NF always
//! runs and never reads this. See docs/fastpath.md.
//!
//! While a flow's packet is recorded, the NF answers [`crate::packet::FastMark::Want`] in
//! `process` with a token (what the flow's later packets rely on: a mapping's slot, a
//! rule's counter) or a refusal. A later packet then skips the NF: the runtime checks
//! the token ([`fast_valid`](Consolidate::fast_valid)) and runs the NF's per-packet
//! state function ([`fast_state`](Consolidate::fast_state)) or, when that only counts,
//! counts in its table and hands the counts over ([`fast_count`](Consolidate::fast_count)).

use crate::flow::FlowKey;
use crate::packet::{Verdict, MAX_BATCH};

/// What a state function sees of a packet on the consolidated path: only what no NF
/// rewrites (lengths, time, TCP flags), plus the flow key as this NF saw it on the
/// recorded packet (the NFs before it may have rewritten addresses and ports).
#[derive(Clone, Copy, Debug)]
pub struct FastPacket<'a> {
    pub key: &'a FlowKey,
    /// An IP fragment (first or later): no ports in the key.
    pub fragment: bool,
    /// Capture time (for records that report it).
    pub ts_ns: u64,
    /// Run-clock time: what timers read (docs/time.md).
    pub now_ns: u64,
    pub wire_len: u32,
    /// TCP flags with NS (9 bits) when the packet is TCP with a complete header, else 0.
    pub tcp_flags: u16,
}

/// What the state functions see of one packet of a fused run of hits (as
/// [`FastPacket`] without the key, which differs per NF): gathered once per packet.
#[derive(Clone, Copy, Debug, Default)]
pub struct FastFacts {
    pub ts_ns: u64,
    pub now_ns: u64,
    pub wire_len: u32,
    pub tcp_flags: u16,
    pub fragment: bool,
}

/// Most NFs on a consolidated path; longer paths are not consolidated. Eight steps fill
/// the entry's second and third lines exactly (six would leave a third line part empty).
pub const MAX_PATH: usize = 8;

/// One NF on a consolidated flow's path, 16 bytes, as FastPath's table keeps it. It is
/// defined here, beside [`FastRun`], so that a fused run's [`Visits`] read each visit's
/// token and key straight from the entries' paths (nothing is copied per visit).
#[derive(Clone, Copy, Debug)]
pub struct Step {
    pub token: u64,
    /// What a hit does for this NF: [`Step::CHECK`], [`Step::STATE`], [`Step::COUNT`].
    pub flags: u8,
    /// Node index in the low 13 bits, the index of the flow key this NF saw (in the
    /// entry's keys) in the top 3: a hit finds the key without touching the keys.
    node_key: u16,
    /// Out(counted output) or Drop(reason), as the NF decided.
    pub verdict: Verdict,
    /// Where a chunk of hits finds the NF among the lent ones, set when the path is
    /// recorded, so a hit skips the node-to-slot lookup.
    pub slot: u8,
    /// In an entry's first step: the entry's shape, FastPath's id for which of its steps
    /// call which slot with which flags (0: none calls). Unused in the other steps (it
    /// takes the step's spare byte).
    pub shape: u8,
}

impl Step {
    pub const EMPTY: Step = Step {
        token: 0,
        flags: 0,
        node_key: 0,
        verdict: Verdict::Out(0),
        slot: u8::MAX,
        shape: 0,
    };

    /// A hit asks the NF whether the token still holds (`fast_valid`).
    pub const CHECK: u8 = 1;
    /// A hit runs the NF's state function (`fast_state`).
    pub const STATE: u8 = 2;
    /// The NF's state function only counts: the entry counts its hits and hands them
    /// over in one `fast_count` call.
    pub const COUNT: u8 = 4;
    /// The NF's state functions may be deferred and folded in later
    /// ([`Consolidate::fast_fold`]): hits of the entry's fold period skip the step.
    pub const FOLD: u8 = 8;

    /// `node` < 2^13, `key` < 8.
    pub fn new(node: usize, key: u8, flags: u8) -> Step {
        debug_assert!(node < 1 << 13 && key < 8);
        Step {
            token: 0,
            flags,
            node_key: node as u16 | (key as u16) << 13,
            verdict: Verdict::Out(0),
            slot: u8::MAX,
            shape: 0,
        }
    }

    #[inline]
    pub fn node(&self) -> usize {
        (self.node_key & 0x1fff) as usize
    }

    #[inline]
    pub fn key_index(&self) -> usize {
        (self.node_key >> 13) as usize
    }
}

/// One NF's part in one packet of a fused run: the token its entry holds, the packet
/// (index into [`FastRun::facts`]) and which of the packet's keys this NF saw.
#[derive(Clone, Copy, Debug, Default)]
pub struct Visit {
    pub token: u64,
    pub at: u8,
    pub key: u8,
}

/// One NF's visits in a fused run, in arrival order: packets `at..end` of the chunk,
/// whose entries all have the same shape, so each visits the NF at the same step of its
/// path. A visit is read from its entry's path when the NF asks for it, not gathered.
#[derive(Clone, Copy, Debug)]
pub struct Visits<'a> {
    paths: &'a [&'a [Step; MAX_PATH]; MAX_BATCH],
    step: usize,
    at: usize,
    end: usize,
}

impl<'a> Visits<'a> {
    /// Step `step` of `paths[at..end]` (`at <= end <= MAX_BATCH`, `step < MAX_PATH`).
    #[inline(always)]
    pub fn new(
        paths: &'a [&'a [Step; MAX_PATH]; MAX_BATCH],
        step: usize,
        at: usize,
        end: usize,
    ) -> Visits<'a> {
        debug_assert!(at <= end && end <= MAX_BATCH && step < MAX_PATH);
        Visits {
            paths,
            step,
            at,
            end,
        }
    }

    #[inline(always)]
    pub fn len(&self) -> usize {
        self.end - self.at
    }

    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.end == self.at
    }

    /// Packet `i`'s visit (masked, not bounds-checked: `i` < `MAX_BATCH`).
    #[inline(always)]
    fn visit(&self, i: usize) -> Visit {
        let s = &self.paths[i % MAX_BATCH][self.step % MAX_PATH];
        Visit {
            token: s.token,
            at: i as u8,
            key: s.key_index() as u8,
        }
    }

    /// The `n`-th visit.
    #[inline(always)]
    pub fn get(&self, n: usize) -> Option<Visit> {
        (n < self.len()).then(|| self.visit(self.at + n))
    }

    #[inline(always)]
    pub fn first(&self) -> Option<Visit> {
        self.get(0)
    }

    #[inline(always)]
    pub fn last(&self) -> Option<Visit> {
        (!self.is_empty()).then(|| self.visit(self.end - 1))
    }

    /// The first visit and the rest.
    #[inline(always)]
    pub fn split_first(&self) -> Option<(Visit, Visits<'a>)> {
        let v = self.first()?;
        Some((
            v,
            Visits {
                at: self.at + 1,
                ..*self
            },
        ))
    }

    /// The first `n` visits (all when there are fewer).
    #[inline(always)]
    pub fn take(&self, n: usize) -> Visits<'a> {
        Visits {
            end: self.at + n.min(self.len()),
            ..*self
        }
    }

    #[inline(always)]
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Visit> + 'a {
        let v = *self;
        (v.at..v.end).map(move |i| v.visit(i))
    }
}

/// How many visits ahead of the one it serves a run's state function prefetches the
/// lines of an NF whose visit reads several (the flow monitor's: item, control byte and
/// key, five prefetches a visit): the L1 keeps ~10–12 misses in flight, and a whole
/// chunk's at once (~160 a monitor) stalls the pass that issues them (session 29).
pub const VISITS_AHEAD: usize = 4;

/// A chunk of hits as one NF sees it, in arrival order: the runtime hands each NF its
/// visits in one call ([`Consolidate::fast_vouch`], [`Consolidate::fast_state_run`]), so a
/// hit makes no dynamic call per NF (docs/fastpath.md, "Fused runs").
#[derive(Clone, Copy, Debug)]
pub struct FastRun<'a> {
    pub visits: Visits<'a>,
    /// Per packet of the chunk (a whole batch's room: visits name only the chunk's
    /// packets), so a visit's are found by a masked index, not a bounds check.
    pub facts: &'a [FastFacts; MAX_BATCH],
    /// Per packet of the chunk: the flow keys its NFs saw (a visit's `key` indexes them).
    pub keys: &'a [&'a [FlowKey]; MAX_BATCH],
}

impl<'a> FastRun<'a> {
    /// The run clock at the run's first and last visits (none for an empty run): every
    /// visit's time lies between them, as the run clock never goes back.
    #[inline(always)]
    pub fn span(&self) -> Option<(u64, u64)> {
        let now_of = |v: Option<Visit>| v.map(|v| self.fact(&v));
        match (now_of(self.visits.first()), now_of(self.visits.last())) {
            (Some(a), Some(b)) => Some((a.now_ns, b.now_ns)),
            _ => None,
        }
    }

    /// Starts loading what the `n`-th visit reads by `lines` (nothing past the run's
    /// end): a run's state function calls it `VISITS_AHEAD` visits ahead of the one it
    /// serves, so its misses stay within what the L1 can have in flight.
    #[inline(always)]
    pub fn prefetch(&self, lines: &TokenLines, n: usize) {
        if let Some(v) = self.visits.get(n) {
            let keys = self.keys[v.at as usize % MAX_BATCH];
            lines.prefetch_visit(v.token, keys.as_ptr().wrapping_add(v.key as usize));
        }
    }

    /// What visit `v`'s packet shows every NF.
    #[inline(always)]
    pub fn fact(&self, v: &Visit) -> &'a FastFacts {
        &self.facts[v.at as usize % MAX_BATCH]
    }

    /// Visit `v` as the per-packet calls see it.
    #[inline(always)]
    pub fn packet(&self, v: &Visit) -> FastPacket<'a> {
        let f = self.fact(v);
        FastPacket {
            key: &self.keys[v.at as usize % MAX_BATCH][v.key as usize],
            fragment: f.fragment,
            ts_ns: f.ts_ns,
            now_ns: f.now_ns,
            wire_len: f.wire_len,
            tcp_flags: f.tcp_flags,
        }
    }
}

/// Whether no packet of a run of `visits` packets whose times span `span` can make an
/// NF sweep, when it sweeps at the packet that brings `since` (packets since its last
/// sweep, at `last_sweep_ns`) to `every` and is at least a second from that sweep: too
/// few packets, or both ends of the span (and so every time between them) within a
/// second of it. NAT-free sweepers (Maglev, the flow monitor) then count a run's ticks
/// at once.
#[inline(always)]
pub fn no_sweep_in(
    since: u64,
    every: u64,
    last_sweep_ns: u64,
    visits: usize,
    (first, last): (u64, u64),
) -> bool {
    let second = |t: u64| t.abs_diff(last_sweep_ns) < 1_000_000_000;
    since + (visits as u64) < every || second(first) && second(last)
}

/// An NF FastPath may skip on consolidated flows.
pub trait Consolidate {
    /// What the NF's state function still does per packet (`catena check` prints it).
    fn state_function(&self) -> &'static str;

    /// Read-only check, before any state function of the path runs, that the state the
    /// token names still holds (e.g. the NAT mapping is live): false sends the packet
    /// down the slow path.
    fn fast_valid(&self, token: u64, p: &FastPacket) -> bool;

    /// Whether [`fast_valid`](Consolidate::fast_valid) can say no: an NF whose
    /// consolidated decisions only a control command changes (the runtime then removes
    /// every entry through it) says false, and a hit skips the call.
    fn fast_checks(&self) -> bool {
        true
    }

    /// The per-packet work of a skipped NF: must leave it in exactly the state `process`
    /// would have (counters, idle timers, sweeps).
    fn fast_state(&mut self, token: u64, p: &FastPacket) {
        let _ = (token, p);
    }

    /// Starts loading the state a token names (a hint, called for a whole chunk of hits
    /// before any of them runs, so their cache misses overlap as the NFs' own batch
    /// prefetches do). Must not change anything.
    fn fast_prefetch(&self, token: u64) {
        let _ = token;
    }

    /// Where the state a token names lies, as data (one dynamic call per chunk, not one
    /// per hit): FastPath prefetches those lines itself for a chunk of hits. NFs that
    /// prefetch should say; [`TokenLines::NONE`] leaves it to
    /// [`fast_prefetch`](Consolidate::fast_prefetch).
    fn fast_lines(&self) -> TokenLines {
        TokenLines::NONE
    }

    /// Whether [`fast_prefetch`](Consolidate::fast_prefetch) does anything: a chain of
    /// NFs that all say no skips the pass that would call it.
    fn fast_prefetches(&self) -> bool {
        false
    }

    /// How many leading visits of `run` FastPath may take without asking again: each
    /// one's check ([`fast_valid`](Consolidate::fast_valid)) must pass on the NF's state
    /// as it is now, before any state function of the run, *and* be sure to pass after
    /// the state functions of the visits before it (refreshes, sweep steps). Saying
    /// fewer is always right: the visit after them and the rest of the chunk are then
    /// checked one by one. The default vouches for the first visit only.
    fn fast_vouch(&self, run: &FastRun) -> usize {
        match run.visits.first() {
            Some(v) if self.fast_valid(v.token, &run.packet(&v)) => 1,
            _ => 0,
        }
    }

    /// The state functions of `run`'s visits, in order: exactly as many
    /// [`fast_state`](Consolidate::fast_state) calls (one dynamic call for a chunk).
    fn fast_state_run(&mut self, run: &FastRun) {
        for v in run.visits.iter() {
            self.fast_state(v.token, &run.packet(&v));
        }
    }

    /// Packets so far on which the NF did the per-flow work a hit would skip (a NAT's
    /// translations, Maglev's balanced packets; not the packets it passed untouched),
    /// read by `fastpath = "auto"` only when it would start a trial; None: every packet
    /// that reached the NF.
    fn fast_work(&self) -> Option<u64> {
        None
    }

    /// Whether the state function only adds one per packet to counters the token names:
    /// the runtime then counts a consolidated flow's packets in its entry and hands them
    /// over with [`fast_count`](Consolidate::fast_count) (before the NF takes a command,
    /// before the summary, when the entry goes), and never calls `fast_state`.
    fn fast_counts(&self) -> bool {
        false
    }

    /// `packets` packets of flows marked `token` took the fast path since the last call:
    /// does what as many `fast_state` calls would have done (for NFs that say
    /// [`fast_counts`](Consolidate::fast_counts)).
    fn fast_count(&mut self, token: u64, packets: u64) {
        let _ = (token, packets);
    }

    /// Whether a hit still runs the state function when the NF counts in entries
    /// ([`fast_counts`](Consolidate::fast_counts)): the state function then does the rest
    /// (a NAT's refresh) and leaves the counters to [`fast_count`](Consolidate::fast_count).
    fn fast_states(&self) -> bool {
        !self.fast_counts()
    }

    /// Whether hits may defer this NF's state functions and fold them in later
    /// ([`fast_fold`](Consolidate::fast_fold); docs/fastpath.md, "Fold-back"): every state
    /// update a hit makes commutes with the others and with the slow path's, and no
    /// decision reads it before [`fast_horizon`](Consolidate::fast_horizon).
    fn fast_folds(&self) -> bool {
        false
    }

    /// Whether hits of flows marked `token` may be folded (asked once per recording):
    /// a token whose validity needs a check per packet may not.
    fn fast_foldable(&self, token: u64) -> bool {
        let _ = token;
        false
    }

    /// The run-clock time before which no decision of the NF can tell a deferred hit's
    /// state update from one applied, for a fold period starting at `now` (every
    /// foldable token's state refreshed at or after `now`): `now` or less means no hit
    /// may fold.
    fn fast_horizon(&self, now: u64) -> u64 {
        now
    }

    /// The deferred state functions of hits on `token`, the last at run-clock time
    /// `last_ns`: does what they would have done (counters excepted: those are counted
    /// in entries).
    fn fast_fold(&mut self, token: u64, last_ns: u64) {
        let _ = (token, last_ns);
    }

    /// `visits` hits of a chunk lying before the fold period's horizon skipped this NF's
    /// folding steps: an NF whose state functions also count every packet it sees (the
    /// ticks that pace Maglev's sweeps) adds them here, at the end of the chunk (no
    /// decision reads that count before the horizon).
    fn fast_skipped(&mut self, visits: u64) {
        let _ = visits;
    }

    /// Whether [`fast_skipped`](Consolidate::fast_skipped) does anything: chains whose
    /// folding NFs all say no skip the per-chunk tally of folded visits.
    fn fast_ticks(&self) -> bool {
        false
    }
}

/// Where the state tokens name lies: token `t` names the `stride`-byte item at
/// `base + ((t >> 32) & mask) * stride` when that index is below `len` (a slab indexed
/// by the token's high half, as the NAT's mappings and Maglev's connections are; the
/// flow monitor's hash table with a negative stride, as hashbrown keeps its buckets
/// below its control bytes). Used only to prefetch (never read through), so
/// a stale or wrong address costs nothing but the prefetch.
#[derive(Clone, Copy, Debug)]
pub struct TokenLines {
    pub base: *const u8,
    pub len: usize,
    /// Bytes from one item to the next (wrapping: a negative stride is its two's
    /// complement).
    pub stride: usize,
    pub mask: u64,
    /// The offset of the item's last byte a hit reads, when the item may straddle two
    /// lines (0: one line is prefetched, as for the NAT's and Maglev's items).
    pub last: usize,
    /// A byte per item that a hit reads before the item (a hash table's control bytes),
    /// at `ctrl + index`; null when there is none.
    pub ctrl: *const u8,
    /// The NF's state function reads the flow key the hit hands it
    /// ([`FastPacket::key`]): FastPath prefetches that too.
    pub reads_key: bool,
}

impl TokenLines {
    pub const NONE: TokenLines = TokenLines {
        base: std::ptr::null(),
        len: 0,
        stride: 0,
        mask: 0,
        last: 0,
        ctrl: std::ptr::null(),
        reads_key: false,
    };

    /// The lines of a slab indexed by the tokens' high half under `mask`.
    pub fn of<T>(slab: &[T], mask: u64) -> TokenLines {
        TokenLines {
            base: slab.as_ptr() as *const u8,
            len: slab.len(),
            stride: std::mem::size_of::<T>(),
            mask,
            ..TokenLines::NONE
        }
    }

    #[inline(always)]
    fn index(&self, token: u64) -> usize {
        ((token >> 32) & self.mask) as usize
    }

    /// The address of the item `token` names, if it names one.
    #[inline(always)]
    pub fn at(&self, token: u64) -> Option<*const u8> {
        let i = self.index(token);
        (i < self.len).then(|| self.base.wrapping_add(i.wrapping_mul(self.stride)))
    }

    /// Where `token`'s item would be, unchecked: for a prefetch only (which has no
    /// effect at an address that names nothing), so a fused run's gathering pays no
    /// bounds test per step. Lines that name nothing ([`TokenLines::NONE`]) give null.
    #[inline(always)]
    pub fn prefetch_at(&self, token: u64) -> *const u8 {
        self.base
            .wrapping_add(self.index(token).wrapping_mul(self.stride))
    }

    /// Where `token`'s control byte would be (unchecked, for a prefetch; only when
    /// `ctrl` is not null).
    #[inline(always)]
    pub fn ctrl_at(&self, token: u64) -> *const u8 {
        self.ctrl.wrapping_add(self.index(token))
    }

    /// Starts loading what a visit reads beyond a single line: its item (which may
    /// straddle two lines), its control byte, and the flow key at `key` it is handed
    /// (unchecked addresses: prefetches only).
    #[inline(always)]
    pub fn prefetch_visit(&self, token: u64, key: *const FlowKey) {
        if !self.base.is_null() {
            let at = self.prefetch_at(token);
            crate::packet::prefetch_ptr(at);
            crate::packet::prefetch_ptr(at.wrapping_add(self.last));
        }
        if !self.ctrl.is_null() {
            crate::packet::prefetch_ptr(self.ctrl_at(token));
        }
        if self.reads_key {
            crate::packet::prefetch_ptr(key);
            let end = std::mem::size_of::<FlowKey>() - 1;
            crate::packet::prefetch_ptr(key.cast::<u8>().wrapping_add(end));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::TokenLines;

    /// The item a token names by its high half, as the NAT's tokens (kind above the
    /// slot: masked off) and Maglev's (the whole high half) name a mapping or connection.
    #[test]
    fn token_lines_name_the_slab_item_of_the_token() {
        let slab = vec![[0u8; 40]; 8];
        let nat = TokenLines::of(&slab, 0xff_ffff);
        let token = 1u64 << 56 | 5 << 32 | 77;
        assert_eq!(
            nat.at(token),
            Some(&slab[5] as *const [u8; 40] as *const u8)
        );
        assert_eq!(nat.at(8 << 32), None, "past the slab");
        let maglev = TokenLines::of(&slab, u64::from(u32::MAX));
        assert_eq!(
            maglev.at(7 << 32 | 3),
            Some(&slab[7] as *const [u8; 40] as *const u8)
        );
        assert_eq!(
            maglev.at(1 << 56 | 5 << 32),
            None,
            "no kind byte in Maglev's"
        );
        assert_eq!(TokenLines::NONE.at(0), None);
        // The unchecked form names the same item, and null for lines that name nothing.
        assert_eq!(Some(nat.prefetch_at(token)), nat.at(token));
        assert_eq!(
            Some(maglev.prefetch_at(7 << 32 | 3)),
            maglev.at(7 << 32 | 3)
        );
        assert!(TokenLines::NONE.prefetch_at(5 << 32).is_null());
    }
}
