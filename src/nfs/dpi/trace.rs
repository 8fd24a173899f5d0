//! Labelling a whole capture offline: packets grouped into flows by 5-tuple (the first
//! packet's sender is the client, as in nDPI), each TCP direction fed in sequence order,
//! every flow labelled. Used by the nDPI oracle test, `catena dpi-report` and
//! `catena bench dpi`; the live NF will take its bytes from the TCP stack instead.

use hashbrown::HashMap;

use super::{AppProto, DpiFlow, Progress, L4};
use crate::flow::{FlowKey, Hasher};
use crate::io::Trace;
use crate::packet::bytes::be16;
use crate::packet::{L3Kind, Layers};

/// One flow of a capture and its label.
#[derive(Clone, Debug)]
pub struct FlowLabel {
    /// Oriented client → server. Ports are 0 for protocols other than TCP and UDP.
    pub key: FlowKey,
    pub packets: u32,
    /// Found by payload (or IP protocol number).
    pub detected: Option<AppProto>,
    /// The port fallback, when nothing was detected.
    pub guessed: Option<AppProto>,
    pub host: Option<String>,
}

impl FlowLabel {
    pub fn label(&self) -> Option<AppProto> {
        self.detected.or(self.guessed)
    }
}

struct Entry {
    key: FlowKey,
    packets: u32,
    dpi: DpiFlow,
    /// Next expected TCP sequence number per direction (client, server).
    next: [Option<u32>; 2],
    done: bool,
}

/// Flow grouping and TCP ordering for [`label_trace`], reusable across captures.
#[derive(Default)]
pub struct Labeller {
    index: HashMap<FlowKey, usize, Hasher>,
    flows: Vec<Entry>,
}

impl Labeller {
    pub fn new() -> Labeller {
        Labeller::default()
    }

    /// Feeds one captured packet.
    pub fn packet(&mut self, link: crate::packet::LinkKind, b: &[u8]) {
        let l = Layers::parse(link, b);
        let Some(mut key) = FlowKey::from_packet(&l, b) else {
            return;
        };
        let l4 = match key.proto {
            6 if l.has_l4() => L4::Tcp,
            17 if l.has_l4() => L4::Udp,
            6 | 17 => return,
            p => {
                // nDPI keys other protocols by addresses only.
                key.sport = 0;
                key.dport = 0;
                L4::Other(p)
            }
        };
        let canon = key.canonical();
        let i = match self.index.get(&canon) {
            Some(&i) => i,
            None => {
                let i = self.flows.len();
                let ip = |a: &[u8; 16]| {
                    if key.family == 4 {
                        std::net::IpAddr::from([a[0], a[1], a[2], a[3]])
                    } else {
                        std::net::IpAddr::from(*a)
                    }
                };
                let dpi = DpiFlow::new(l4, (ip(&key.src), key.sport), (ip(&key.dst), key.dport));
                self.flows.push(Entry {
                    key,
                    packets: 0,
                    done: dpi.result().is_some(),
                    dpi,
                    next: [None; 2],
                });
                self.index.insert(canon, i);
                i
            }
        };
        let e = &mut self.flows[i];
        e.packets += 1;
        if e.done || l.is_later_fragment() {
            return;
        }
        let from_client = e.key.src == key.src && e.key.sport == key.sport;
        let end = ip_end(&l, b);
        let t = l.l4_off as usize;
        let data = match l4 {
            L4::Udp => b.get(t + 8..end).unwrap_or(&[]),
            L4::Tcp => {
                let hl = ((b[t + 12] >> 4) as usize) * 4;
                let data = b.get(t + hl..end).unwrap_or(&[]);
                let seq = u32::from_be_bytes([b[t + 4], b[t + 5], b[t + 6], b[t + 7]]);
                let syn = b[t + 13] & 0x02 != 0;
                match in_order(&mut e.next[usize::from(!from_client)], seq, syn, data) {
                    Some(d) => d,
                    None => return,
                }
            }
            L4::Other(_) => return,
        };
        if data.is_empty() {
            return;
        }
        if !matches!(e.dpi.feed(from_client, data), Progress::NeedMore) {
            e.done = true;
        }
    }

    /// The labels of every flow, in order of first packet; resets for the next capture.
    pub fn finish(&mut self) -> Vec<FlowLabel> {
        self.index.clear();
        self.flows
            .drain(..)
            .map(|e| FlowLabel {
                key: e.key,
                packets: e.packets,
                detected: e.dpi.result(),
                guessed: e.dpi.guess(),
                host: e.dpi.host().map(str::to_owned),
            })
            .collect()
    }
}

/// Labels every flow of `trace`.
pub fn label_trace(trace: &Trace) -> Vec<FlowLabel> {
    let mut l = Labeller::new();
    for i in 0..trace.len() {
        l.packet(trace.link(), trace.packet(i));
    }
    l.finish()
}

/// End of the IP datagram within the captured bytes (Ethernet padding excluded).
fn ip_end(l: &Layers, b: &[u8]) -> usize {
    let o = l.l3_off as usize;
    let end = match l.l3 {
        L3Kind::Ipv4 => o + be16(b, o + 2) as usize,
        L3Kind::Ipv6 if be16(b, o + 4) != 0 => o + 40 + be16(b, o + 4) as usize,
        _ => b.len(),
    };
    end.min(b.len())
}

/// The part of a segment not seen before in its direction: retransmitted bytes are cut;
/// after a gap (loss, or capture started mid-stream) the new bytes are taken as they come.
fn in_order<'a>(next: &mut Option<u32>, seq: u32, syn: bool, data: &'a [u8]) -> Option<&'a [u8]> {
    let seq = if syn { seq.wrapping_add(1) } else { seq };
    let n = data.len() as u32;
    let Some(exp) = *next else {
        *next = Some(seq.wrapping_add(n));
        return Some(data);
    };
    let behind = exp.wrapping_sub(seq);
    if behind == 0 || behind > u32::MAX / 2 {
        // In order, or ahead of what we expected (a gap).
        *next = Some(seq.wrapping_add(n));
        return Some(data);
    }
    if behind >= n {
        return None; // all old
    }
    *next = Some(seq.wrapping_add(n));
    Some(&data[behind as usize..])
}
