//! Ports: where packets enter and leave a running chain. A port receives a batch into pool
//! buffers and queues frames for sending, which leave in one system call per batch.

use std::os::fd::RawFd;

use serde::Serialize;

use super::PcapHeader;
use crate::packet::{Batch, Pool};

/// What a port counted. Kernel drops are read from the kernel (`PACKET_STATISTICS`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PortCounters {
    /// Packets taken from the port (including `rx_oversize`).
    pub rx: u64,
    pub rx_bytes: u64,
    /// Packets larger than the pool's buffers, dropped on arrival.
    pub rx_oversize: u64,
    /// Packets the kernel dropped before catena could read them (ring full).
    pub kernel_drops: u64,
    /// Frames sent.
    pub tx: u64,
    pub tx_bytes: u64,
    /// Frames that could not be sent (the device refused them, or too large).
    pub tx_errors: u64,
    /// PA-Flow (`aggregate = true`): aggregated frames sent and the packets in them.
    pub tx_aggregates: u64,
    pub tx_aggregated: u64,
    /// Aggregated frames received, the packets unpacked from them, and the frames found
    /// truncated or inconsistent (`bad-aggregate`: the packets before the fault are kept).
    pub rx_aggregates: u64,
    pub rx_unpacked: u64,
    pub rx_bad_aggregate: u64,
    /// Of `rx_unpacked`, the packets handed to the chain as views into their frame
    /// (`aggregate_views = true`), not copied out.
    pub rx_viewed: u64,
}

/// What [`Port::recv`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recv {
    /// This many packets were appended (0: nothing waiting now).
    Got(usize),
    /// The port has nothing more to give, ever (a replayed file at its end).
    Ended,
}

pub trait Port: Send {
    /// `kind:iface` or `pcap:path`, for messages.
    fn describe(&self) -> String;
    /// Appends up to `max` received packets to `out`, in pool buffers with `ts_ns`,
    /// `wire_len` and `link` set. Never blocks. Live ports may hand packets that view
    /// their ring (`RxMode::View`): those bytes are valid until this port's next `recv`
    /// or `flush`, by which time the batch must have left the chain (sent, written or
    /// dropped); a caller that keeps packets longer opens the port with `RxMode::Copy`.
    fn recv(&mut self, pool: &mut Pool, out: &mut Batch, max: usize) -> Recv;
    /// Queues one frame for sending (copied: the caller keeps its buffer).
    fn send(&mut self, frame: &[u8], ts_ns: u64, wire_len: u32);
    /// Sends what was queued: one system call for live ports.
    fn flush(&mut self);
    /// Called once per batch after every port's `flush`, when every packet the batch
    /// took has been sent or freed into `pool`. PA-Flow hook (docs/paflow.md): a port
    /// whose packets viewed its received frames takes the frames back here.
    fn after_batch(&mut self, pool: &mut Pool) {
        let _ = pool;
    }
    /// A descriptor that becomes readable when packets wait, for `poll`; None for ports
    /// that are never waited on this way.
    fn fd(&self) -> Option<RawFd> {
        None
    }
    /// Nanoseconds until this port will have a packet, when it knows (a paced replay).
    fn next_in_ns(&self) -> Option<u64> {
        None
    }
    /// Refreshes kernel counters (a system call: call it now and then, not per batch).
    fn refresh(&mut self) {}
    fn counters(&self) -> PortCounters;
    /// Ends the port: flushes what is queued and closes files. Errors name the file.
    fn finish(&mut self) -> std::io::Result<()> {
        self.flush();
        Ok(())
    }
    /// An input error that ended a replayed file early (the packets before it were taken).
    fn input_error(&self) -> Option<String> {
        None
    }
    /// The file header of a replayed capture (outputs then look like the input).
    fn header(&self) -> Option<PcapHeader> {
        None
    }
    /// Largest frame this port may hand over (sizes the pool's buffers).
    fn max_frame(&self) -> usize {
        9216
    }
    /// The port receives packets (a write-only pcap port does not).
    fn receives(&self) -> bool {
        true
    }
}
