//! Ports and traces: pcap/pcapng in and out, the synthetic generator, live AF_PACKET and AF_XDP ports.

pub mod af_packet;
pub mod af_xdp;
mod af_xdp_prog;
pub mod gen;
pub mod gen_http;
mod linktype;
pub mod pcap_map;
pub mod pcap_port;
pub mod pcap_read;
mod pcap_stream;
pub mod pcap_write;
mod port;
mod source;
pub mod text_file;
mod trace;

pub use af_packet::{AfPacket, AfPacketConfig, RxMode, TxMode};
pub use af_xdp::{AfXdp, AfXdpConfig};
pub use linktype::{link_from_pcap, pcap_linktype};
pub use pcap_map::MappedPcap;
pub use pcap_port::{PcapPort, Rate};
pub use pcap_read::TraceError;
pub use pcap_stream::{Opened, PcapStream, READ_BUFFER};
pub use pcap_write::PcapWriter;
pub use port::{Port, PortCounters, Recv};
pub use source::{After, Source, TraceSource};
pub use trace::{PcapHeader, Record, Trace};
