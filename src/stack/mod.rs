//! The consolidated TCP stack (Microboxes): connection tracking and reassembly done once
//! per chain, typed events, and per-flow subscriptions for the apps that sit on it.
//!
//! - [`tracker`]: the [`Stack`] — flow table, state machine, reassembly → events.
//! - [`reasm`]: one direction's bytestream (bounded out-of-order rings, first-wins).
//! - [`tcp_state`]: the connection state machine seen from the middle.
//! - [`event`], [`queue`]: the events of a batch and the bytes they carry.
//! - [`app`]: the app interface, the dispatch context, and batch delivery.
//! - [`splice`]: sequence translation for connections handed to a backend.
//! - [`defrag`]: bounded IPv4 defragmentation, for apps that inspect datagrams whole.
//! - [`window`]: each side's advertised receive window; segments past it are not fed.
//!
//! See docs/microboxes.md for the model and its limits.

pub mod app;
pub mod conn;
pub mod defrag;
pub mod event;
pub mod queue;
pub mod reasm;
pub mod seq;
pub mod splice;
pub mod tcp_state;
pub mod tracker;
pub mod window;

pub use app::{dispatch, translate_batch, App, Ctx};
pub use conn::{Conn, MAX_APPS};
pub use event::{Bytes, EndReason, Event, FlowId, Kind, Kinds, FROM_STACK, NO_FLOW, NO_PKT};
pub use queue::Queue;
pub use splice::Splice;
pub use tcp_state::TcpState;
pub use tracker::{Level, Stack, StackConfig, StackStats};
