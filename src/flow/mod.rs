//! Flow keys, hashing, bounded tables with timeouts.

pub mod footprint;
mod index;
mod key;
mod timed_table;
mod wide_key;

pub use index::{prefetch, Index};
pub use key::FlowKey;
pub use timed_table::{Learned, TimedTable};
pub use wide_key::WideKey;

/// Keyed hashing: seeded per process so traffic cannot be crafted to collide (unlike FxHash).
pub type Hasher = foldhash::fast::RandomState;
