//! Writing pcap files that tcpdump and tshark read.

pub struct PcapWriter;
