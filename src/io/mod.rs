//! Ports and traces: pcap/pcapng in and out, the synthetic generator.

pub mod gen;
pub mod gen_http;
mod linktype;
pub mod pcap_read;
mod pcap_stream;
pub mod pcap_write;
mod source;
mod trace;

pub use linktype::{link_from_pcap, pcap_linktype};
pub use pcap_read::TraceError;
pub use pcap_stream::{Opened, PcapStream, READ_BUFFER};
pub use pcap_write::PcapWriter;
pub use source::{Source, TraceSource};
pub use trace::{PcapHeader, Record, Trace};
