//! Test and benchmark support, kept apart from the engine: replays a capture through
//! minimal flow tracking and in-order TCP reassembly into [`Ids`]. It stands in for the
//! consolidated TCP stack (which will feed `on_stream` from its data events instead) and
//! keeps only what the suricata-verify harness and `catena bench ids` need: handshake
//! and established state, mid-stream pickup as an option, retransmission trimming and a
//! bounded out-of-order queue. It allocates per flow and per out-of-order segment.

use std::collections::HashMap;

use crate::io::Trace;
use crate::packet::Layers;

use super::decode::decode;
use super::engine::{Alert, Ids, PacketInfo};
use super::flow::IdsFlow;
use super::header::Ip;

/// Suricata's `stream.midstream` and the out-of-order bound.
#[derive(Clone, Copy, Debug)]
pub struct ReplayOptions {
    /// Reassemble flows whose handshake was not seen (they count as established).
    pub midstream: bool,
    /// Out-of-order segments held per direction; more are dropped and counted.
    pub max_ooo: usize,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            midstream: false,
            max_ooo: 64,
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
pub struct ReplayStats {
    pub packets: u64,
    pub ip_packets: u64,
    pub flows: u64,
    pub stream_bytes: u64,
    pub ooo_dropped: u64,
}

#[derive(Default)]
struct Dir {
    next: Option<u32>,
    ooo: Vec<(u32, Vec<u8>)>,
}

struct Flow {
    client: (Ip, u16),
    syn: bool,
    synack: bool,
    established: bool,
    seen: [bool; 2],
    dirs: [Dir; 2],
    ids: IdsFlow,
}

type Key = (Ip, u16, Ip, u16, u8);

fn ip_key(ip: Ip) -> (u8, u128) {
    match ip {
        Ip::V4(a) => (4, a as u128),
        Ip::V6(a) => (6, a),
    }
}

fn canonical(src: Ip, sp: u16, dst: Ip, dp: u16, proto: u8) -> Key {
    if (ip_key(src), sp) <= (ip_key(dst), dp) {
        (src, sp, dst, dp, proto)
    } else {
        (dst, dp, src, sp, proto)
    }
}

/// Replays every packet of `trace`, appending alerts.
pub fn replay(
    trace: &Trace,
    ids: &mut Ids,
    opts: &ReplayOptions,
    alerts: &mut Vec<Alert>,
) -> ReplayStats {
    let mut flows: HashMap<Key, Flow> = HashMap::new();
    let mut st = ReplayStats::default();
    let link = trace.link();
    for i in 0..trace.len() {
        st.packets += 1;
        let b = trace.packet(i);
        let l = Layers::parse(link, b);
        let Some(dec) = decode(&l, b) else { continue };
        st.ip_packets += 1;
        let (src, dst, sport, dport, proto, tcp) =
            (dec.src, dec.dst, dec.sport, dec.dport, dec.proto, dec.tcp);
        let payload = &b[dec.payload.clone()];
        let key = canonical(src, sport, dst, dport, proto);
        let flow = flows.entry(key).or_insert_with(|| {
            st.flows += 1;
            // The side that sends a bare SYN, or else the first sender, is the client.
            let synack = tcp.is_some_and(|(_, f)| f & 0x12 == 0x12);
            Flow {
                client: if synack { (dst, dport) } else { (src, sport) },
                syn: false,
                synack: false,
                established: false,
                seen: [false; 2],
                dirs: [Dir::default(), Dir::default()],
                ids: ids.new_flow(),
            }
        });
        let to_server = (src, sport) == flow.client;
        let d = usize::from(!to_server);
        let first_in_dir = !flow.seen[d];
        flow.seen[d] = true;
        let mut deliver: Option<u32> = None;
        if let Some((seq, flags)) = tcp {
            let (syn, ack, rst) = (flags & 2 != 0, flags & 0x10 != 0, flags & 4 != 0);
            if syn && !ack && to_server {
                flow.syn = true;
                flow.dirs[0].next = Some(seq.wrapping_add(1));
                if !payload.is_empty() {
                    // TCP Fast Open: data on the SYN starts the client's stream.
                    deliver = Some(seq.wrapping_add(1));
                }
            } else if syn && ack && !to_server && flow.syn {
                flow.synack = true;
                flow.dirs[1].next = Some(seq.wrapping_add(1));
            } else if ack && to_server && flow.synack && !flow.established {
                flow.established = true;
            }
            if !payload.is_empty() && !syn && !rst {
                if flow.established {
                    deliver = Some(seq);
                } else if opts.midstream && !flow.syn {
                    flow.established = true;
                    deliver = Some(seq);
                }
            }
            if deliver.is_some() && flow.dirs[d].next.is_none() {
                flow.dirs[d].next = Some(seq);
            }
        }
        let established = match tcp {
            Some(_) => flow.established,
            None => flow.seen[0] && flow.seen[1],
        };
        let info = PacketInfo {
            ip_proto: proto,
            src,
            dst,
            sport,
            dport,
            to_server,
            established,
            reassembled: deliver.is_some(),
            first_in_dir,
            fields: dec.fields,
            no_payload: false,
        };
        ids.on_packet(&info, payload, alerts);
        if let Some(seq) = deliver {
            st.stream_bytes += reassemble(
                ids,
                flow,
                d,
                &info,
                seq,
                payload,
                opts,
                &mut st.ooo_dropped,
                alerts,
            );
        }
        if tcp.is_some_and(|(_, f)| f & 0x05 != 0) && flow.dirs[d].next.is_some() {
            ids.on_stream_end(&mut flow.ids, &info, alerts);
        }
    }
    st
}

/// Hands the in-order part of a segment (and any queued segments it unblocks) to the engine.
#[allow(clippy::too_many_arguments)]
fn reassemble(
    ids: &mut Ids,
    flow: &mut Flow,
    d: usize,
    info: &PacketInfo,
    seq: u32,
    payload: &[u8],
    opts: &ReplayOptions,
    dropped: &mut u64,
    alerts: &mut Vec<Alert>,
) -> u64 {
    let Some(next) = flow.dirs[d].next else {
        return 0;
    };
    let ahead = seq.wrapping_sub(next) as i32;
    if ahead > 0 {
        let q = &mut flow.dirs[d].ooo;
        if q.len() < opts.max_ooo {
            q.push((seq, payload.to_vec()));
        } else {
            *dropped += 1;
        }
        return 0;
    }
    let skip = (-ahead) as usize;
    if skip >= payload.len() {
        return 0;
    }
    let mut total = 0u64;
    let new = &payload[skip..];
    ids.on_stream(&mut flow.ids, info, new, alerts);
    total += new.len() as u64;
    let mut next = next.wrapping_add(new.len() as u32);
    // Drain queued segments that now fit.
    loop {
        let q = &mut flow.dirs[d].ooo;
        let Some(pos) = q.iter().position(|(s, p)| {
            (s.wrapping_sub(next) as i32) <= 0
                && s.wrapping_add(p.len() as u32).wrapping_sub(next) as i32 > 0
        }) else {
            q.retain(|(s, _)| (s.wrapping_sub(next) as i32) > 0);
            break;
        };
        let (s, p) = q.swap_remove(pos);
        let tail = &p[next.wrapping_sub(s) as usize..];
        ids.on_stream(&mut flow.ids, info, tail, alerts);
        total += tail.len() as u64;
        next = next.wrapping_add(tail.len() as u32);
    }
    flow.dirs[d].next = Some(next);
    total
}
