//! IPv4 defragmentation for the inspectors on a stack (an IDS): a request whose TCP
//! segment is split in IP fragments must be seen whole, as Suricata sees it. Bounded: a
//! fixed number of datagrams in reassembly, each holding at most [`MAX_FRAGS`] fragments
//! and [`ARENA`] bytes, buffers made on a slot's first use and kept (nothing allocated
//! per packet once warmed), a timeout on capture time, and every fragment not taken
//! counted. The chain forwards the original fragments; the datagram is only inspected.
//!
//! Overlap policy: BSD, Suricata 7's default, as its defrag.c applies it (the IDS must
//! see the bytes Suricata sees): a fragment that starts inside one held loses the bytes
//! they share; one that reaches into the next held fragment wins the start of it; one
//! that covers a held fragment whole replaces it; what the trims leave is resolved by
//! copying the fragments in offset order (a later one overwrites). A fragment that starts
//! lower but ends inside a held one therefore loses the bytes they share.

use crate::packet::bytes::be16;
use crate::packet::{L3Kind, Layers};

/// Datagrams in reassembly at once.
pub const SLOTS: usize = 32;
/// Fragments one datagram may hold.
pub const MAX_FRAGS: usize = 64;
/// Bytes of fragment payload one datagram may hold (overlaps count twice).
pub const ARENA: usize = 96 * 1024;
/// Suricata's default `defrag.timeout` (60 s after the last fragment), on capture time.
pub const TIMEOUT_NS: u64 = 60_000_000_000;
/// Room for the link header (tags included) and the largest IPv4 header.
const HEAD: usize = 128;
/// An IPv4 datagram's largest payload.
const MAX_PAYLOAD: usize = 65_535 - 20;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DefragStats {
    /// Fragments taken into a reassembly.
    pub fragments: u64,
    /// Datagrams completed and inspected.
    pub reassembled: u64,
    /// Reassemblies given up because no fragment came for the timeout.
    pub timeout: u64,
    /// Fragments that overlapped bytes already held (resolved by the BSD policy).
    pub overlap: u64,
    /// Fragments not taken: every slot busy with a live reassembly, or the datagram's
    /// fragments or bytes at their bound.
    pub too_many: u64,
    /// Fragments not taken: past 65,535 bytes, a length that is not whole 8-byte units
    /// before the last, or headers longer than the room kept for them.
    pub malformed: u64,
}

#[derive(Clone, Copy, Default)]
struct Frag {
    off: usize,
    len: usize,
    /// Bytes at the start later fragments won.
    ltrim: usize,
    skip: bool,
    more: bool,
    /// Where its bytes are in the slot's arena.
    at: usize,
}

struct Slot {
    live: bool,
    /// Source, destination, identification, protocol.
    key: (u32, u32, u16, u8),
    last_ns: u64,
    seen_last: bool,
    /// Held fragments in offset order (equal offsets: in arrival order).
    frags: Vec<Frag>,
    arena: Vec<u8>,
    /// The first fragment's link and IP headers, and the IP header's length.
    head: Vec<u8>,
    ihl: usize,
}

impl Slot {
    fn empty() -> Slot {
        Slot {
            live: false,
            key: (0, 0, 0, 0),
            last_ns: 0,
            seen_last: false,
            frags: Vec::new(),
            arena: Vec::new(),
            head: Vec::new(),
            ihl: 20,
        }
    }

    fn start(&mut self, key: (u32, u32, u16, u8), now: u64) {
        // A slot's first use makes its buffers; they live as long as the stack.
        self.frags.reserve_exact(MAX_FRAGS);
        self.arena.reserve_exact(ARENA);
        self.head.reserve_exact(HEAD);
        self.frags.clear();
        self.arena.clear();
        self.head.clear();
        self.live = true;
        self.key = key;
        self.last_ns = now;
        self.seen_last = false;
    }

    /// Inserts fragment `s..s + data.len()` as Suricata's BSD policy does; true when it
    /// overlapped a held one.
    fn insert(&mut self, s: usize, data: &[u8], more: bool) -> bool {
        let e = s + data.len();
        let mut ltrim = 0;
        let mut overlap = false;
        // Where Suricata's walk starts: the fragment before the first at or past `s`
        // (the lowest when there is none, or when `s` is 0).
        let ge = self.frags.iter().position(|f| f.off >= s);
        let start = match ge {
            Some(n) if s > 0 => n.saturating_sub(1),
            _ => 0,
        };
        for i in start..self.frags.len() {
            let prev = self.frags[i];
            if prev.skip {
                continue;
            }
            let prev_end = prev.off + prev.len;
            overlap |= s < prev_end && prev.off < e;
            if s < prev_end {
                if s >= prev.off {
                    ltrim = prev_end - s;
                }
                if let Some(next) = self.frags.get_mut(i + 1) {
                    if e > next.off {
                        next.ltrim = e - next.off;
                    }
                }
                if s < prev.off && e >= prev_end {
                    self.frags[i].skip = true;
                }
                break;
            }
        }
        if ltrim >= data.len() {
            return overlap;
        }
        let f = Frag {
            off: s + ltrim,
            len: data.len() - ltrim,
            ltrim: 0,
            skip: false,
            more,
            at: self.arena.len(),
        };
        self.arena.extend_from_slice(&data[ltrim..]);
        let at = self.frags.partition_point(|g| g.off <= f.off);
        self.frags.insert(at, f);
        self.seen_last |= !more;
        overlap
    }

    /// Suricata's test: the last fragment seen, the first held, no hole between.
    fn complete(&self) -> bool {
        if !self.seen_last || self.frags.first().is_none_or(|f| f.off != 0) || self.head.is_empty()
        {
            return false;
        }
        let mut len = 0;
        for f in &self.frags {
            if f.off > len {
                return false;
            }
            len += f.len;
        }
        true
    }

    /// Copies the payload into `out` from `HEAD` in offset order; its length.
    fn assemble(&self, out: &mut [u8]) -> usize {
        let mut end = 0;
        for f in &self.frags {
            if f.skip || f.ltrim >= f.len {
                continue;
            }
            // The first fragment is copied whole, as Suricata copies its packet.
            let t = if f.off == 0 { 0 } else { f.ltrim };
            let (from, to) = (f.off + t, f.off + f.len);
            out[HEAD + from..HEAD + to].copy_from_slice(&self.arena[f.at + t..f.at + f.len]);
            end = end.max(to);
            if !f.more {
                break;
            }
        }
        end
    }
}

pub struct Defrag {
    slots: Vec<Slot>,
    timeout_ns: u64,
    /// The datagram last completed: headers end at `HEAD`, payload after.
    out: Vec<u8>,
    pub stats: DefragStats,
}

impl Default for Defrag {
    fn default() -> Self {
        Defrag::new(SLOTS, TIMEOUT_NS)
    }
}

impl Defrag {
    pub fn new(slots: usize, timeout_ns: u64) -> Defrag {
        Defrag {
            slots: (0..slots).map(|_| Slot::empty()).collect(),
            timeout_ns,
            out: vec![0; HEAD + MAX_PAYLOAD],
            stats: DefragStats::default(),
        }
    }

    /// Bytes held at most (every slot in use).
    pub fn memory(&self) -> usize {
        self.out.len() + self.slots.len() * (ARENA + HEAD + MAX_FRAGS * std::mem::size_of::<Frag>())
    }

    /// Takes IPv4 fragment `b` (layers `l`) seen at capture time `now`. When it completes
    /// its datagram, returns the datagram's bytes (the first fragment's link header, its
    /// IP header with the total length set, no fragment bits and the checksum right,
    /// then the payload), valid until the next call.
    pub fn take(&mut self, l: &Layers, b: &[u8], now: u64) -> Option<&[u8]> {
        if l.l3 != L3Kind::Ipv4 || !l.is_fragment() {
            return None;
        }
        let o3 = usize::from(l.l3_off);
        let ihl = usize::from(b[o3] & 0x0f) * 4;
        let (end, data) = (usize::from(l.l3_end), o3 + ihl);
        let frag = be16(b, o3 + 6);
        let (more, off) = (frag & 0x2000 != 0, usize::from(frag & 0x1fff) * 8);
        let len = end.saturating_sub(data);
        // A fragment but the last carries whole units; nothing passes 65,535 bytes.
        if (more && (len == 0 || len % 8 != 0)) || off + len > MAX_PAYLOAD || data > HEAD {
            self.stats.malformed += 1;
            return None;
        }
        let key = (
            u32::from_be_bytes([b[o3 + 12], b[o3 + 13], b[o3 + 14], b[o3 + 15]]),
            u32::from_be_bytes([b[o3 + 16], b[o3 + 17], b[o3 + 18], b[o3 + 19]]),
            be16(b, o3 + 4),
            b[o3 + 9],
        );
        let i = self.slot_for(key, now)?;
        let s = &mut self.slots[i];
        if s.frags.len() >= MAX_FRAGS || s.arena.len() + len > ARENA {
            self.stats.too_many += 1;
            return None;
        }
        s.last_ns = now;
        self.stats.fragments += 1;
        if off == 0 && s.head.is_empty() {
            s.head.extend_from_slice(&b[..data]);
            s.ihl = ihl;
        }
        self.stats.overlap += u64::from(s.insert(off, &b[data..end], more));
        if !s.complete() {
            return None;
        }
        s.live = false;
        self.stats.reassembled += 1;
        let e = s.assemble(&mut self.out);
        let (h, ihl) = (s.head.len(), s.ihl);
        self.out[HEAD - h..HEAD].copy_from_slice(&s.head);
        let ip = HEAD - ihl;
        let total = (ihl + e) as u16;
        let o = &mut self.out;
        o[ip + 2..ip + 4].copy_from_slice(&total.to_be_bytes());
        // Keep DF; clear MF and the offset.
        o[ip + 6] &= 0x40;
        o[ip + 7] = 0;
        o[ip + 10..ip + 12].copy_from_slice(&[0, 0]);
        let c = crate::packet::checksum::checksum(&o[ip..HEAD]);
        o[ip + 10..ip + 12].copy_from_slice(&c.to_be_bytes());
        Some(&self.out[HEAD - h..HEAD + e])
    }

    /// The slot of `key`: the live one, else a free or timed-out one; `None` (counted)
    /// when every slot holds a live reassembly.
    fn slot_for(&mut self, key: (u32, u32, u16, u8), now: u64) -> Option<usize> {
        self.expire(now);
        let mut free = None;
        for (i, s) in self.slots.iter().enumerate() {
            if s.live && s.key == key {
                return Some(i);
            }
            if !s.live && free.is_none() {
                free = Some(i);
            }
        }
        let Some(i) = free else {
            self.stats.too_many += 1;
            return None;
        };
        self.slots[i].start(key, now);
        Some(i)
    }

    /// Gives up every reassembly with no fragment for the timeout by `now`, counting
    /// each.
    pub fn expire(&mut self, now: u64) {
        for s in &mut self.slots {
            if s.live && now.saturating_sub(s.last_ns) > self.timeout_ns {
                s.live = false;
                self.stats.timeout += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::LinkKind;

    /// Ethernet / IPv4 fragment of id 7 (protocol 17) at byte `off` carrying `data`.
    fn frag(off: usize, more: bool, data: &[u8]) -> Vec<u8> {
        let mut p = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
        p.extend_from_slice(&[0x45, 0]);
        p.extend_from_slice(&(20 + data.len() as u16).to_be_bytes());
        let f = u16::from(more) << 13 | (off / 8) as u16;
        p.extend_from_slice(&[0, 7]);
        p.extend_from_slice(&f.to_be_bytes());
        p.extend_from_slice(&[64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
        p.extend_from_slice(data);
        p
    }

    fn take(d: &mut Defrag, p: &[u8], now: u64) -> Option<Vec<u8>> {
        let l = Layers::parse(LinkKind::Ethernet, p);
        d.take(&l, p, now).map(<[u8]>::to_vec)
    }

    /// The datagram's payload, checking its header: no fragment bits, the total length
    /// and the header checksum right.
    fn payload(dg: &[u8]) -> Vec<u8> {
        let l = Layers::parse(LinkKind::Ethernet, dg);
        assert!(!l.is_fragment());
        assert_eq!(usize::from(be16(dg, 16)), dg.len() - 14);
        assert_eq!(crate::packet::checksum::sum(&dg[14..34]), 0xffff);
        dg[34..].to_vec()
    }

    #[test]
    fn in_order_and_out_of_order_fragments_make_the_datagram() {
        let a: Vec<u8> = (0..24).collect();
        let b: Vec<u8> = (100..110).collect();
        let whole: Vec<u8> = a.iter().chain(&b).copied().collect();
        let mut d = Defrag::default();
        assert_eq!(take(&mut d, &frag(0, true, &a), 1), None);
        let dg = take(&mut d, &frag(24, false, &b), 2).expect("complete");
        assert_eq!(payload(&dg), whole);
        // Reversed: the last first, then the first (whose headers the datagram keeps).
        assert_eq!(take(&mut d, &frag(24, false, &b), 3), None);
        let dg = take(&mut d, &frag(0, true, &a), 4).expect("complete");
        assert_eq!(payload(&dg), whole);
        assert_eq!((d.stats.reassembled, d.stats.fragments), (2, 4));
    }

    #[test]
    fn overlaps_follow_suricatas_bsd_policy() {
        let mut d = Defrag::default();
        // A later fragment starting inside a held one loses the bytes they share.
        take(&mut d, &frag(0, true, &[b'A'; 24]), 1);
        let dg = take(&mut d, &frag(16, false, &[b'B'; 16]), 2).unwrap();
        assert_eq!(payload(&dg), [&[b'A'; 24][..], &[b'B'; 8]].concat());
        // One that starts lower but ends inside a held one loses them too (the copy in
        // offset order puts the held one's bytes last).
        take(&mut d, &frag(8, true, &[b'A'; 16]), 3);
        take(&mut d, &frag(24, false, &[b'C'; 8]), 4);
        let dg = take(&mut d, &frag(0, true, &[b'B'; 16]), 5).unwrap();
        assert_eq!(
            payload(&dg),
            [&[b'B'; 8][..], &[b'A'; 16], &[b'C'; 8]].concat()
        );
        // One that covers a held one whole replaces it; one that reaches into the next
        // wins that one's start.
        take(&mut d, &frag(8, true, &[b'A'; 8]), 6);
        take(&mut d, &frag(24, false, &[b'C'; 8]), 7);
        take(&mut d, &frag(0, true, &[b'B'; 32]), 8);
        let dg = d.stats.reassembled;
        assert_eq!(dg, 3, "the B fragment completes the datagram");
        // The same offset twice: the first one stays.
        take(&mut d, &frag(0, true, &[b'A'; 8]), 9);
        take(&mut d, &frag(0, true, &[b'B'; 8]), 10);
        let dg = take(&mut d, &frag(8, false, b"z"), 11).unwrap();
        assert_eq!(payload(&dg), [&[b'A'; 8][..], b"z"].concat());
        assert_eq!(d.stats.overlap, 4);
    }

    #[test]
    fn bounded_slots_timeout_and_lies_are_counted() {
        let mut d = Defrag::new(2, 10);
        let other = |id: u8| {
            let mut p = frag(0, true, &[0; 8]);
            p[19] = id;
            p
        };
        take(&mut d, &other(1), 0);
        take(&mut d, &other(2), 0);
        assert_eq!(take(&mut d, &other(3), 5), None);
        assert_eq!(d.stats.too_many, 1);
        // Past the timeout the old ones are given up and the slot is reused.
        assert_eq!(take(&mut d, &other(3), 20), None);
        assert_eq!((d.stats.timeout, d.stats.too_many), (2, 1));
        // A missing fragment never completes; expiry counts it.
        d.expire(u64::MAX);
        assert_eq!(d.stats.timeout, 3);
        // Not a multiple of 8 before the end, past 65,535 bytes.
        assert_eq!(take(&mut d, &frag(0, true, &[0; 7]), 30), None);
        assert_eq!(take(&mut d, &frag(65_528, false, &[0; 16]), 30), None);
        assert_eq!(d.stats.malformed, 2);
        // A datagram's fragments are bounded.
        let mut d = Defrag::default();
        for i in 0..MAX_FRAGS + 1 {
            take(&mut d, &frag(8 + 8 * i, true, &[0; 8]), 1);
        }
        assert_eq!((d.stats.fragments, d.stats.too_many), (MAX_FRAGS as u64, 1));
    }
}
