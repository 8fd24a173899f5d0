//! Flow keys, hashing, bounded tables with timeouts.

mod clock;
pub mod footprint;
mod index;
mod key;
mod learn_table;
mod timed_table;
mod tsc;
mod wide_key;

pub use clock::RunClock;
pub use index::{prefetch, Index};
pub use key::FlowKey;
pub use learn_table::{Align32, Align64, LearnTable};
pub use timed_table::{Learned, TimedTable};
pub use tsc::tsc;
pub use wide_key::WideKey;

/// Keyed hashing: seeded per process so traffic cannot be crafted to collide (unlike FxHash).
pub type Hasher = foldhash::fast::RandomState;
