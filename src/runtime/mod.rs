//! Executes a chain: the config, the graph built from it, and the run-to-completion worker
//! (`worker`) that ingests chunks (`ingest`), walks them over the graph (`walk`, with
//! FastPath lent the walk through `fastpath_host`) to the sinks (`sink`), and sums up
//! (`summary`). With `[[port]]` tables (`ports`) the worker runs live (`worker/live.rs`),
//! serves the HTTP API (`api`) and reloads its file (`reload`). Pairs of NFs planned by
//! `parallel` run on two threads through `join`.

mod affinity;
pub mod api;
mod api_http;
mod chain;
mod config;
pub mod control;
mod counters;
mod fastpath_host;
mod fuse_filters; // issue 20 (e2e): consecutive ip_filters classified once
mod ingest;
mod join;
pub mod limits;
pub mod live_fan;
pub mod parallel;
pub mod ports;
mod profile_check;
pub mod region;
pub mod reload;
pub mod ring;
pub mod rss;
pub mod shard;
mod shard_control;
mod sink;
pub mod stage;
mod summary;
mod walk;
mod worker;

pub use affinity::{allowed_cores, pin};
pub use chain::{Chain, Node, NodeKind, INPUT};
pub use config::{ChainConfig, ConfigError, DEFAULT_SEED};
pub use counters::{NfSummary, NodeCounters, PortSummary, SinkSummary, Summary, WorkerSummary};
pub use ingest::port_of;
pub use shard::Shards;
pub use worker::{Live, NoProgress, Progress, RunOptions, Runner};
