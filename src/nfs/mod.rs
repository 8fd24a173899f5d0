//! The NF library. Each NF is one file; [`registry`] maps config kinds to constructors.

pub mod acl;
mod busy;
mod consolidate;
pub mod dpi;
mod firewall;
mod flow_monitor;
pub mod ids;
mod ip_filter;
mod ipv4_switch;
mod mac_switch;
mod maglev;
mod malformed;
pub mod microbox;
mod nat;
mod nf;
mod params;
pub mod pipeline;
pub mod prefix;
pub mod registry;
mod wire;

pub use busy::Busy;
pub use consolidate::{FastFacts, FastRun, Step, Visit, Visits, MAX_PATH, VISITS_AHEAD};
pub use dpi::{AppProto, DpiFlow};
pub use firewall::Firewall;
pub use flow_monitor::{End, FlowMonitor, FlowRecord, FlowStats};
pub use ip_filter::IpFilter;
pub use ipv4_switch::Ipv4Switch;
pub use mac_switch::MacSwitch;
pub use maglev::{Backend, Maglev};
pub use microbox::Microbox;
pub use nat::{Nat, NatConfig};
pub use nf::{named, Stats};
pub use nf::{
    Consolidate, Context, FastPacket, Nf, Prepared, Preparer, Profile, StateScope, TokenLines,
};
pub use params::{ParamDoc, ParamError, Params};
pub use pipeline::Pipeline;
pub use wire::Wire;
