//! IDS engine for a subset of Snort/Suricata rules: rule text → [`RuleSet`] (with
//! warnings for skipped rules), per-flow [`IdsFlow`], and [`Ids`] with `on_packet` for
//! packet rules and `on_stream` for stream and HTTP rules. See docs/ids.md.

mod content;
mod decode;
mod engine;
mod eve;
mod flow;
mod header;
mod http;
mod lexer;
mod pcre;
mod pktcheck;
pub mod replay;
mod rule;
mod ruleset;
mod tls;
mod vars;

pub use decode::{decode, suricata_makes_flow, Decoded};
pub use engine::{Alert, Ids, IdsConfig, PacketInfo};
pub use eve::{Eve, EveFlow, EveTuple};
pub use flow::IdsFlow;
pub use header::Ip;
pub use http::{HttpLimits, INFLATER_BYTES};
pub use pktcheck::PktFields;
pub use rule::{Kind, Rule};
pub use ruleset::{RuleSet, Warning};
pub use tls::TlsRecords;
pub use vars::Vars;
