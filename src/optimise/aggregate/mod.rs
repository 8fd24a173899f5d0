//! PA-Flow packet aggregation (docs/paflow.md): between chain stages that sit behind a
//! per-frame cost (a veth, a process boundary), the packets of one batch bound for the
//! same port leave packed in aggregated frames, and the port at the other end unpacks
//! them. Never waits to fill a frame; switching it on never changes the packets.

pub mod frame;
mod port;
pub mod stages;

pub use frame::{Bad, Packer, Records, DEFAULT_SIZE, ETHERTYPE, MAX_SIZE, MIN_SIZE};
pub use port::Aggregating;
pub use stages::{Packed, StageCounters, StagePacker, StageUnpacker};
