//! FastPath: header-action consolidation. A flow's first packet runs through every NF
//! while the runtime records what each did; later packets of the flow take one table
//! lookup, the NFs' state functions, and the consolidated rewrite with each checksum
//! patched once. See docs/fastpath.md for the design and its equivalence argument.
//!
//! - [`key`]: what identifies a flow here (ingress port, 5-tuple, header layout).
//! - [`actions`]: the net rewrite and its checksum deltas.
//! - [`table`]: the bounded entry table.
//! - [`record`]: recording the first packet on the slow path.
//! - [`chunk`]: a chunk sorted into hits and misses, and the interface to the runtime.

pub mod actions;
pub mod auto;
pub mod chunk;
pub mod key;
pub mod record;
pub mod table;

use serde::Serialize;

pub use actions::Actions;
pub use auto::{Auto, AutoStats, Plan};
pub use chunk::{count_path, fold_path, HitOut, Host, Lent, LENT};
pub use key::FpKey;
pub use record::{Outcome, Recorder};
pub use table::{Entry, Found, Hot, Keys, Probe, Step, Table, Way, MAX_KEYS, MAX_NODES, MAX_PATH};

use crate::nfs::Nf;
use crate::packet::{Batch, Fields};

/// FastPath settings of a chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastConfig {
    /// Most consolidated entries.
    pub entries: usize,
    /// Idle time (run clock: docs/time.md) after which an entry is dropped; 0 = never.
    pub timeout_ns: u64,
    /// Which packet of a flow is recorded (1 = the first, as the FastPath report does).
    /// The ones before run the chain unrecorded behind a small entry that counts them,
    /// so with 2 a flow of one packet never pays for a recording.
    pub record_at: u8,
}

impl Default for FastConfig {
    fn default() -> Self {
        FastConfig {
            entries: 16384,
            timeout_ns: 60_000_000_000,
            record_at: 2,
        }
    }
}

/// FastPath counters for the run summary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FastStats {
    /// Packets that took a consolidated entry.
    pub hits: u64,
    /// Packets that ran the chain (first packets, FIN/RST, not IP, failed checks).
    pub misses: u64,
    pub installed: u64,
    /// Entries dropped because an NF changed (control command) or its state check failed.
    pub invalidated: u64,
    /// Entries pushed out of a full set.
    pub evicted: u64,
    /// Entries idle past the timeout.
    pub expired: u64,
    /// Entries ended by a TCP FIN or RST.
    pub ended: u64,
    /// Recordings an NF refused (its result varies per packet for that flow).
    pub refused: u64,
    /// Recordings whose net rewrite could not be consolidated.
    pub unconsolidatable: u64,
    /// Packets run through the chain unrecorded behind a remembered refusal (or, with
    /// `record_at` above 2, between a flow's first packet and its recorded one).
    pub unrecorded: u64,
    /// Flows whose first packet ran the chain unrecorded (recording waits for the
    /// flow's `record_at`-th packet).
    pub deferred: u64,
    /// Hits that skipped the NFs whose state functions fold (NATs), their refreshes
    /// folded in later (docs/fastpath.md, "Fold-back").
    pub folded: u64,
}

/// Header fields a consolidated rewrite can carry: the key pins the addresses, ports and
/// ICMP identifier; Ethernet addresses are matched per entry.
pub const REWRITABLE: Fields = Fields(
    Fields::ETH_SRC.0
        | Fields::ETH_DST.0
        | Fields::IP_SRC.0
        | Fields::IP_DST.0
        | Fields::L4_SRC.0
        | Fields::L4_DST.0
        | Fields::ICMP.0
        | Fields::PAYLOAD.0,
);

/// Whether FastPath can skip `nf` on consolidated flows, and if so its state function.
pub fn role(nf: &dyn Nf) -> Result<&'static str, String> {
    let p = nf.profile();
    match nf.consolidate() {
        None => Err("refuses consolidation".into()),
        _ if p.changes_length => Err("adds or removes headers".into()),
        _ if !REWRITABLE.contains(p.writes) => Err(format!(
            "writes {} (not consolidated)",
            Fields(p.writes.0 & !REWRITABLE.0)
        )),
        Some(c) => Ok(c.state_function()),
    }
}

/// Whether `fastpath = "auto"` can tell from the chain alone that consolidation loses,
/// and why: a hit's own work (key, lookup, rewrite, counts) pays only when it skips
/// enough per-packet work. Measured by instructions with every later packet a hit (the
/// best case for FastPath, docs/fastpath.md): one NF of any kind costs 23-37 % more on
/// than off, filter + NAT 13 % more, 3 filters 25 % more, while 2 Maglevs and 3 NATs
/// win. Filters only count on a hit and run fused off (one classification for a run of
/// them), so they do not count here: below 2 skippable NFs with per-flow state (NAT,
/// Maglev, monitor) auto stays off without a trial, and the run is a plain one.
pub fn auto_static_off(nfs: &[Option<&dyn Nf>]) -> Option<&'static str> {
    let stateful = nfs
        .iter()
        .flatten()
        .filter(|n| role(**n).is_ok() && step_flags(**n) & (Step::CHECK | Step::STATE) != 0)
        .count();
    (stateful < AUTO_MIN_STATEFUL).then_some(
        "off without a trial: fewer than 2 NFs with per-flow state for a hit to skip (a hit costs more than it saves)",
    )
}

/// The traffic's side of [`auto_static_off`], for `auto` before a trial: packets into
/// the chain so far, and the per-flow work a hit would skip on them, summed over the
/// NFs that rule counts ([`Consolidate::fast_work`], or every packet that reached the
/// NF), over the host's first `nodes` nodes. Read only when a trial is due (a walk over
/// the chain's nodes); needs no FastPath, so a trial called off builds none.
pub fn traffic_work(h: &mut impl Host, nodes: usize) -> (u64, u64) {
    let (mut packets, mut work) = (0, 0);
    for node in 0..nodes {
        let inn = h.packets_in(node);
        let Some(nf) = h.nf(node) else { continue };
        packets = packets.max(inn);
        if step_flags(nf) & (Step::CHECK | Step::STATE) != 0 {
            work += nf.consolidate().and_then(|c| c.fast_work()).unwrap_or(inn);
        }
    }
    (packets, work)
}

/// Fewest skippable NFs with per-flow state for `auto` to try consolidation.
pub const AUTO_MIN_STATEFUL: usize = 2;

/// What a hit does for `nf`: ask whether its token holds (unless only a control command
/// can change its decision, which removes the entries through it at once), run its
/// state function, count its packets in the entry (when the NF counts in entries), and
/// whether its state functions may be folded (docs/fastpath.md, "Fold-back").
fn step_flags(nf: &dyn Nf) -> u8 {
    let Some(c) = nf.consolidate() else {
        return 0;
    };
    let bit = |on: bool, b: u8| if on { b } else { 0 };
    bit(c.fast_checks(), Step::CHECK)
        | bit(c.fast_counts(), Step::COUNT)
        | bit(c.fast_states(), Step::STATE)
        | bit(c.fast_folds(), Step::FOLD)
}

/// Per-chain FastPath state kept by the runtime.
pub struct FastPath {
    pub table: Table,
    pub rec: Recorder,
    pub stats: FastStats,
    /// Per node: what a hit does for the NF ([`Step::CHECK`], [`Step::STATE`],
    /// [`Step::COUNT`]).
    pub flags: Vec<u8>,
    /// Per node: the NF can be skipped.
    pub consolidable: Vec<bool>,
    /// Per node: the NF may rewrite an Ethernet address.
    pub writes_eth: Vec<bool>,
    /// Per node: the NF may change any byte.
    pub writes: Vec<bool>,
    /// Some NF of the chain prefetches the state its tokens name.
    pub prefetch: bool,
    /// Some NF of the chain may change bytes (so entries may carry actions).
    pub rewrites: bool,
    /// Some NF of the chain has a check or a state function a hit calls (so hits may
    /// read their entry's path).
    pub calls: bool,
    /// As [`FastConfig::record_at`].
    pub record_at: u8,
    /// Per node: where [`Host::lend`] puts its NF for a chunk of hits (in node order
    /// among the NFs that can be skipped; [`chunk::LENT`] and above: not lent).
    pub slots: Vec<u8>,
    /// Every NF that can be skipped has a slot below [`chunk::LENT`].
    pub lendable: bool,
    /// Where a chunk is held while it is sorted into hits and misses (swapped with the
    /// runtime's queue of misses, so it has the same capacity).
    chunk_in: Batch,
    /// Per lent slot: what a hit does for its NF ([`Step::CHECK`], [`Step::STATE`]).
    pub(crate) slot_flags: [u8; LENT],
    /// Hits may fold (docs/fastpath.md, "Fold-back"): some NF folds ([`Step::FOLD`])
    /// and hits take fused runs.
    pub folds: bool,
    /// The current fold period's horizon: run-clock time before which a hit of an
    /// entry marked in the period may skip its folding steps (0: none may; the next
    /// chunk starts a period).
    pub horizon: u64,
    /// Some hit folded in the current period (so its end walks the marked entries).
    pending: bool,
    /// Bit i: lent slot i's NF takes the visits folded hits skipped
    /// ([`Consolidate::fast_ticks`]); with none, a chunk tallies nothing.
    pub(crate) ticks: u32,
}

impl FastPath {
    /// `nfs[i]` is node i's NF (None for the input and sinks); `batch_cap` is the
    /// capacity of the runtime's batches.
    pub fn new(cfg: FastConfig, nfs: &[Option<&dyn Nf>], batch_cap: usize) -> FastPath {
        let writes: Vec<bool> = nfs
            .iter()
            .map(|n| n.is_some_and(|n| n.profile().writes != Fields::NONE))
            .collect();
        let flags: Vec<u8> = nfs.iter().map(|n| n.map_or(0, step_flags)).collect();
        let mut lent = 0usize;
        let slots: Vec<u8> = nfs
            .iter()
            .map(|n| match n.and_then(|n| n.consolidate()) {
                Some(_) => {
                    lent += 1;
                    (lent - 1).min(u8::MAX as usize) as u8
                }
                None => u8::MAX,
            })
            .collect();
        let mut slot_flags = [0u8; LENT];
        let mut ticks = 0u32;
        for ((&s, &f), n) in slots.iter().zip(&flags).zip(nfs) {
            if let Some(x) = slot_flags.get_mut(s as usize) {
                *x = f;
                let c = n.and_then(|n| n.consolidate());
                if f & Step::FOLD != 0 && c.is_some_and(|c| c.fast_ticks()) {
                    ticks |= 1 << s;
                }
            }
        }
        FastPath {
            folds: lent <= LENT
                && flags.iter().any(|f| f & (Step::CHECK | Step::STATE) != 0)
                && flags.iter().any(|f| f & Step::FOLD != 0),
            horizon: 0,
            pending: false,
            ticks,
            slot_flags,
            slots,
            lendable: lent <= LENT,
            record_at: cfg.record_at.max(1),
            calls: flags.iter().any(|f| f & (Step::CHECK | Step::STATE) != 0),
            rewrites: writes.iter().any(|&w| w),
            table: Table::new(cfg.entries, cfg.timeout_ns),
            rec: Recorder::new(),
            chunk_in: Batch::with_capacity(batch_cap),
            stats: FastStats::default(),
            flags,
            consolidable: nfs
                .iter()
                .map(|n| n.is_some_and(|n| role(n).is_ok()))
                .collect(),
            prefetch: nfs
                .iter()
                .flatten()
                .any(|n| n.consolidate().is_some_and(|c| c.fast_prefetches())),
            writes,
            writes_eth: nfs
                .iter()
                .map(|n| {
                    n.is_some_and(|n| {
                        n.profile()
                            .writes
                            .intersects(Fields::ETH_SRC | Fields::ETH_DST)
                    })
                })
                .collect(),
        }
    }

    /// Consolidation goes off (`fastpath = "auto"`): the entries' counts go to the NFs
    /// and every entry goes, since the NFs' state moves on without them while off (so
    /// switching on again starts as a fresh table would).
    pub fn switch_off<H: Host>(&mut self, h: &mut H) {
        self.fold_all(h);
        self.table.clear();
        self.drain_retired(h);
    }

    /// Ends the fold period: the retired entries' counts and folds handed over, then
    /// every marked entry's folded refreshes (when some hit folded), and the next period
    /// waits for the next chunk (`horizon` 0). Before anything reads or changes the NFs
    /// (a command, the summary, switching off) and when a chunk reaches the horizon.
    pub fn fold_all<H: Host>(&mut self, h: &mut H) {
        self.drain_retired(h);
        if !self.folds {
            return;
        }
        let walk = std::mem::take(&mut self.pending);
        self.table
            .fold_period(walk, |path, last| fold_path(h, path, last));
        self.horizon = 0;
    }

    /// Starts a fold period at run-clock time `p0` (the first packet of the chunk about
    /// to run) for a chunk whose last packet comes at `last`: its horizon is the
    /// earliest any folding NF gives ([`Consolidate::fast_horizon`]), and none when the
    /// chunk reaches it (the folds would have to come inside the chunk).
    #[cold]
    #[inline(never)]
    pub(crate) fn new_period<H: Host>(&mut self, h: &mut H, p0: u64, last: u64) {
        self.fold_all(h);
        let mut hz = u64::MAX;
        for (node, f) in self.flags.iter().enumerate() {
            if f & Step::FOLD == 0 {
                continue;
            }
            if let Some(c) = h.nf(node).and_then(|n| n.consolidate()) {
                hz = hz.min(c.fast_horizon(p0));
            }
        }
        self.horizon = if last < hz { hz } else { 0 };
    }

    /// Hands over the counts of the entries that left the table, and folds the
    /// refreshes of those that left with folded hits pending.
    pub(crate) fn drain_retired<H: Host>(&mut self, h: &mut H) {
        self.table.drain_retired(|n, path, fold| {
            if n > 0 {
                count_path(h, path, n);
            }
            if let Some(last) = fold {
                fold_path(h, path, last);
            }
        });
    }

    /// A flow's first packet while recording waits for a later one: an entry without a
    /// path that counts the packets down to the one to record (as a refusal does).
    pub fn defer(&mut self, key: FpKey, now: u64) {
        let mut e = Entry::refusal(key, now);
        e.retry = self.record_at - 1;
        self.stats.deferred += 1;
        if self.table.insert(&e, &Keys::EMPTY) {
            self.stats.evicted += 1;
        }
    }

    /// Files a finished recording: installs it (with fold mark `mark`,
    /// [`Table::mark`]) or counts why not.
    pub fn settle(
        table: &mut Table,
        stats: &mut FastStats,
        e: &Entry,
        k: &Keys,
        o: Outcome,
        mark: u8,
    ) {
        match o {
            Outcome::Done => {
                stats.installed += 1;
                if table.insert_marked(e, k, mark) {
                    stats.evicted += 1;
                }
            }
            Outcome::Refused | Outcome::Unfit => {
                *if o == Outcome::Refused {
                    &mut stats.refused
                } else {
                    &mut stats.unconsolidatable
                } += 1;
                // Remembered, so the flow's next packets skip the recording's cost.
                if table.insert(&Entry::refusal(e.key, e.last_ns), &Keys::EMPTY) {
                    stats.evicted += 1;
                }
            }
            Outcome::Open => {}
        }
    }
}
