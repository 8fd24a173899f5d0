//! Per-packet metadata carried beside the bytes.

use super::layers::Layers;

/// The link layer the packet's bytes start with (from the capture's link type).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum LinkKind {
    #[default]
    Ethernet = 0,
    /// Raw IP, version taken from the first nibble.
    RawIp = 1,
    /// Linux cooked capture v1 (16-byte header).
    LinuxSll = 2,
    /// Linux cooked capture v2 (20-byte header).
    LinuxSll2 = 3,
}

/// Egress port value meaning "every port but the ingress one".
pub const FLOOD: u16 = u16::MAX;
/// Egress port value meaning "not decided by any NF".
pub const NO_PORT: u16 = u16::MAX - 1;

/// [`Meta::fast_rec`] of a packet FastPath does not record.
pub const NOT_RECORDED: u8 = u8::MAX;

/// What the NF that last processed the packet decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Leave through this output of the NF (0 is the default output).
    Out(u8),
    /// Dropped, with the index of the reason in the NF's profile.
    Drop(u8),
}

/// FastPath recording: what the NF that just ran says about consolidating this packet's
/// flow. The runtime sets [`FastMark::Want`] before an NF only on recorded packets, so
/// NFs do that work only then.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FastMark {
    /// Not recording.
    #[default]
    Off,
    /// Recording: the NF is asked to answer with `Token` or `Refuse`.
    Want,
    /// Later packets of the flow may skip this NF, running its state function with this
    /// token instead.
    Token(u64),
    /// This NF must see every packet of the flow (its result varies per packet).
    Refuse,
}

#[derive(Clone, Debug)]
pub struct Meta {
    /// Capture timestamp in nanoseconds since the epoch (shifted per replay loop).
    pub ts_ns: u64,
    /// The run clock's time for this packet (`crate::flow::RunClock`, docs/time.md):
    /// what every timer reads. Never earlier than an earlier packet's; `ts_ns` stays
    /// the capture's own time for output files and records.
    pub now_ns: u64,
    /// Length on the wire as the capture recorded it (may exceed the bytes held).
    pub wire_len: u32,
    /// Cached flow hash; 0 means not computed yet.
    pub flow_hash: u32,
    /// Virtual ingress port.
    pub in_port: u16,
    /// Virtual egress port chosen by a switching NF, or [`FLOOD`] / [`NO_PORT`].
    pub egress: u16,
    pub link: LinkKind,
    pub verdict: Verdict,
    /// Header offsets, decoded on first use.
    pub layers: Layers,
    /// FastPath recording slot (see [`FastMark`]).
    pub fast: FastMark,
    /// Which recording this packet belongs to while FastPath records it (runtime only).
    pub fast_rec: u8,
    /// Position in the input (0-based, across replay loops), set at ingest: sharded
    /// workers' outputs are merged back into input order by it.
    pub seq: u64,
    /// Verdicts the first `ip_filter` of a fused run decided for the filters after it
    /// (`nfs/ip_filter_fused.rs`): the run's id in the high half, 0 when none. New
    /// contents reset it.
    pub filter_verdicts: u64,
}

impl Default for Meta {
    fn default() -> Self {
        Meta {
            ts_ns: 0,
            now_ns: 0,
            wire_len: 0,
            flow_hash: 0,
            in_port: 0,
            egress: NO_PORT,
            link: LinkKind::Ethernet,
            verdict: Verdict::Out(0),
            layers: Layers::UNPARSED,
            fast: FastMark::Off,
            fast_rec: NOT_RECORDED,
            seq: 0,
            filter_verdicts: 0,
        }
    }
}
