//! The NF interface: a profile the planner and FastPath reason about, and batch processing.

use std::borrow::Cow;

use crate::packet::{Batch, Fields};

pub use super::consolidate::{Consolidate, FastPacket, TokenLines};

/// A command parsed and compiled off the worker (see [`Nf::preparer`]).
pub type Prepared = Box<dyn std::any::Any + Send>;

/// Parses and compiles a command without the NF's state; see [`Nf::preparer`]. A closure,
/// so it can carry the NF's fixed configuration (a table size) to another thread.
pub type Preparer = std::sync::Arc<dyn Fn(&str) -> Result<Prepared, String> + Send + Sync>;

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

    /// Whether the NF writes files of its own (records, alerts): only those are asked
    /// for [`output_error`](Nf::output_error) during a run. True whenever that can be
    /// `Some`.
    fn has_outputs(&self) -> bool {
        false
    }

    /// The first write to an output file that failed (the output is incomplete), asked
    /// after [`finish`](Nf::finish): the run then prints its summary and exits non-zero.
    fn output_error(&self) -> Option<String> {
        None
    }

    /// The NF's FastPath side, if it has one: an NF that exposes [`Consolidate`] may be
    /// skipped on a flow's later packets (header-action consolidation); one that does
    /// not (the default) always runs. Most NFs need nothing of this.
    fn consolidate(&self) -> Option<&dyn Consolidate> {
        None
    }

    /// [`consolidate`](Nf::consolidate), mutable (state functions, counts).
    fn consolidate_mut(&mut self) -> Option<&mut dyn Consolidate> {
        None
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

    /// The NF as `Any`, for the runtime to find NFs it may fuse (consecutive
    /// `ip_filter`s: `nfs/ip_filter_fused.rs`); None for the rest. (issue 20, e2e)
    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        None
    }
}

/// An NF's own counters: names are mostly literals; some are made per rule or backend.
pub type Stats = Vec<(Cow<'static, str>, u64)>;

/// Stats whose names are all literals.
pub fn named(v: &[(&'static str, u64)]) -> Stats {
    v.iter().map(|&(k, n)| (Cow::Borrowed(k), n)).collect()
}
