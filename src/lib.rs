//! catena: a software data plane for network-function service chains.
//!
//! Layers, lower never imports upper:
//! `packet` → `io` → `flow` → `nfs` → `runtime` → (the `catena` binary's `cli`).
//! `stack` (TCP) and `optimise` (FastPath, aggregation, parallel plans) slot in between
//! `flow`/`nfs` and `runtime` when they arrive.

pub mod flow;
pub mod io;
pub mod nfs;
pub mod optimise;
pub mod packet;
pub mod runtime;
pub mod stack;
