//! Executes a chain: the config, the graph built from it, and the run-to-completion worker.

pub mod api;
mod chain;
mod config;
pub mod control;
mod counters;
pub mod ports;
mod profile_check;
pub mod reload;
mod worker;

pub use chain::{Chain, Node, NodeKind, INPUT};
pub use config::{ChainConfig, ConfigError};
pub use counters::{NfSummary, NodeCounters, PortSummary, SinkSummary, Summary};
pub use worker::{Live, NoProgress, Progress, RunOptions, Runner};
