//! Packet buffers, pools, batches, lazily decoded header offsets and zero-copy header views.

mod batch;
mod buf;
pub mod bytes;
pub mod checksum;
mod fields;
mod layers;
mod meta;
mod pool;
mod prefetch;
pub mod wire;

pub use batch::{Batch, MAX_BATCH};
pub use buf::{Packet, HEADROOM};
pub use fields::Fields;
pub use layers::{L3Kind, Layers};
pub use meta::{FastMark, LinkKind, Meta, Verdict, FLOOD, NOT_RECORDED, NO_PORT};
pub use pool::Pool;
pub use prefetch::prefetch_ptr;
