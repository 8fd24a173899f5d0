//! The NF library. Each NF is one file; [`registry`] maps config kinds to constructors.

pub mod acl;
mod firewall;
mod ip_filter;
mod ipv4_switch;
mod mac_switch;
mod nf;
mod params;
pub mod registry;
mod wire;

pub use firewall::Firewall;
pub use ip_filter::IpFilter;
pub use ipv4_switch::Ipv4Switch;
pub use mac_switch::MacSwitch;
pub use nf::{Context, Nf, Profile};
pub use params::{ParamDoc, ParamError, Params};
pub use wire::Wire;
