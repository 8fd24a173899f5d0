//! The NF interface: a profile the planner and FastPath reason about, and batch processing.

use std::borrow::Cow;

use crate::flow::FlowKey;
use crate::packet::{Batch, Fields};

/// A command parsed and compiled off the worker (see [`Nf::preparer`]).
pub type Prepared = Box<dyn std::any::Any + Send>;

/// Parses and compiles a command without the NF's state; see [`Nf::preparer`].
pub type Preparer = fn(&str) -> Result<Prepared, String>;

/// What an NF declares about itself. Parallel planning and header-action consolidation
/// read this, and debug builds check that the NF writes only what it declared.
#[derive(Clone, Debug)]
pub struct Profile {
    /// Header fields (and metadata) the NF reads.
    pub reads: Fields,
    /// Header fields (and metadata) the NF may write.
    pub writes: Fields,
    /// Whether the NF may drop packets (its reasons are `drop_reasons`).
    pub may_drop: bool,
    /// Whether the NF adds or removes headers (changes the packet's length).
    pub changes_length: bool,
    /// Whether the NF keeps per-flow state that must see every packet of a flow, so it can
    /// never be skipped (its per-packet state function must run on a consolidated path).
    pub per_flow_state: bool,
    /// Names of the NF's outputs; output 0 is the default.
    pub outputs: &'static [&'static str],
    /// Names of the reasons the NF drops packets for, indexed by `Verdict::Drop`.
    pub drop_reasons: &'static [&'static str],
}

/// What an NF's state depends on, which says whether it may run as one instance per
/// worker when a chain is sharded by flow (`workers = N`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateScope {
    /// Nothing kept between packets.
    None,
    /// State per flow (both directions of a connection): an instance per worker sees
    /// whole flows, so it decides as one instance would.
    PerFlow,
    /// State learned across flows, or one output for the whole run: one instance per
    /// worker would decide differently; the string says why (sharding is refused).
    Global(&'static str),
}

/// Whether FastPath may skip an NF on a flow's later packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FastRole {
    /// Always run (the safe default for NFs that say nothing).
    Refuse,
    /// May be skipped on flows it marks with a token while recording; the string says
    /// what its state function still does per packet (`catena check` prints it), empty
    /// when nothing.
    Consolidate(&'static str),
}

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

/// Per-call context from the runtime.
#[derive(Clone, Copy, Debug, Default)]
pub struct Context {
    /// Number of virtual ports of the chain (ingress ports are drawn among them).
    pub ports: u16,
}

/// A network function. The runtime hands it batches in which every packet's verdict is
/// `Out(0)`; the NF changes verdicts to drop or pick another output, and may change bytes
/// and metadata within its declared profile.
pub trait Nf: Send {
    fn profile(&self) -> &Profile;

    fn process(&mut self, batch: &mut Batch, cx: &Context);

    /// Applies a run-time command (new rules, a changed pool, backends added or removed).
    /// The runtime calls it between batches, so a change is atomic: every packet is
    /// processed wholly under the state before it or wholly under the state after it.
    /// Returns a short reply for the operator, or why the command was refused.
    fn control(&mut self, cmd: &str) -> Result<String, String> {
        let _ = cmd;
        Err("this NF takes no commands".into())
    }

    /// For NFs whose commands are costly to parse or compile (rule sets): a function that
    /// does that part from the command alone, on any thread, so that the worker only
    /// swaps the result in with [`Nf::control_prepared`]. `control(cmd)` must equal
    /// preparing then applying.
    fn preparer(&self) -> Option<Preparer> {
        None
    }

    /// Applies `cmd` as prepared by [`Nf::preparer`]'s function; on success `prepared`
    /// is left holding what the change replaced, to be freed off the worker.
    fn control_prepared(&mut self, cmd: &str, prepared: &mut Prepared) -> Result<String, String> {
        let _ = prepared;
        self.control(cmd)
    }

    /// Called once when the run's input ends, for NFs that report at the end (flow
    /// records still open, buffered output to flush).
    fn finish(&mut self) {}

    /// What the NF's state depends on; see [`StateScope`]. The default follows
    /// `per_flow_state`; NFs that learn across flows say [`StateScope::Global`].
    fn state_scope(&self) -> StateScope {
        if self.profile().per_flow_state {
            StateScope::PerFlow
        } else {
            StateScope::None
        }
    }

    /// This instance runs as worker `worker` of `workers` (sharded by flow): an NF that
    /// hands out shared resources takes only its share of them (the NAT its slice of the
    /// pool), so no two workers hand out the same one. Called once before the run.
    fn shard(&mut self, worker: usize, workers: usize) -> Result<(), String> {
        let _ = (worker, workers);
        Ok(())
    }

    /// Opens the NF's output files (flow records, alerts). The runtime calls it before
    /// the first packet, so a path that cannot be written (a folder, a missing folder)
    /// stops the run before any work instead of losing what it would have written.
    fn open_outputs(&mut self) -> Result<(), String> {
        Ok(())
    }

    /// The first write to an output file that failed (the output is incomplete), asked
    /// after [`finish`](Nf::finish): the run then prints its summary and exits non-zero.
    fn output_error(&self) -> Option<String> {
        None
    }

    /// Whether FastPath may skip this NF on later packets of a flow; see [`FastRole`].
    /// NFs that return `Consolidate` answer [`crate::packet::FastMark::Want`] in
    /// `process` with a token or a refusal, and implement `fast_valid`/`fast_state`.
    fn fast_role(&self) -> FastRole {
        FastRole::Refuse
    }

    /// Read-only check, before any state function of the path runs, that the state the
    /// token names still holds (e.g. the NAT mapping is live): false sends the packet
    /// down the slow path.
    fn fast_valid(&self, token: u64, p: &FastPacket) -> bool {
        let _ = (token, p);
        false
    }

    /// Starts loading the state a token names (a hint, called for a whole chunk of hits
    /// before any of them runs, so their cache misses overlap as the NFs' own batch
    /// prefetches do). Must not change anything.
    fn fast_prefetch(&self, token: u64) {
        let _ = token;
    }

    /// Whether [`fast_valid`](Nf::fast_valid) can say no: an NF whose consolidated
    /// decisions only a control command changes (the runtime then removes every entry
    /// through it) says false, and a hit skips the call.
    fn fast_checks(&self) -> bool {
        true
    }

    /// Whether [`fast_prefetch`](Nf::fast_prefetch) does anything: a chain of NFs that
    /// all say no skips the pass that would call it.
    fn fast_prefetches(&self) -> bool {
        false
    }

    /// The per-packet work of a skipped NF: must leave it in exactly the state `process`
    /// would have (counters, idle timers, sweeps).
    fn fast_state(&mut self, token: u64, p: &FastPacket) {
        let _ = (token, p);
    }

    /// Whether the state function only adds one per packet to counters the token names:
    /// the runtime then counts a consolidated flow's packets in its entry and hands them
    /// over with [`fast_count`](Nf::fast_count) (before the NF takes a command, before
    /// the summary, when the entry goes), and never calls `fast_state`.
    fn fast_counts(&self) -> bool {
        false
    }

    /// `packets` packets of flows marked `token` took the fast path since the last call:
    /// does what as many `fast_state` calls would have done (for NFs that say
    /// [`fast_counts`](Nf::fast_counts)).
    fn fast_count(&mut self, token: u64, packets: u64) {
        let _ = (token, packets);
    }

    /// Bytes the NF's tables and buffers take at their configured bounds (the most it
    /// holds, not what it holds now). `catena check` prints the chain's sum and
    /// `--max-memory` refuses a chain above it. NFs without tables keep the default.
    fn memory(&self) -> usize {
        0
    }

    /// Counters of the NF's own (table sizes, learned entries, floods), for the summary.
    fn stats(&self) -> Stats {
        Vec::new()
    }
}

/// An NF's own counters: names are mostly literals; some are made per rule or backend.
pub type Stats = Vec<(Cow<'static, str>, u64)>;

/// Stats whose names are all literals.
pub fn named(v: &[(&'static str, u64)]) -> Stats {
    v.iter().map(|&(k, n)| (Cow::Borrowed(k), n)).collect()
}
