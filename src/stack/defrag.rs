//! IPv4 and IPv6 defragmentation for the inspectors on a stack (an IDS): a request whose
//! TCP segment is split in IP fragments must be seen whole, as Suricata sees it. Bounded: a
//! fixed number of datagrams in reassembly, each holding at most [`MAX_FRAGS`] fragments
//! and [`ARENA`] bytes, buffers made on a slot's first use and kept (nothing allocated
//! per packet once warmed), a timeout on capture time, and every fragment not taken
//! counted. The chain forwards the original fragments; the datagram is only inspected.
//!
//! Overlap policy, IPv4 (the IDS must see the bytes Suricata sees; Suricata 7.0.10's
//! default suricata.yaml maps 0.0.0.0/0 to its `windows` policy, which this agrees with
//! on the crafted captures of tests/hostile_packets.rs): a fragment that starts inside
//! one held loses the bytes they share; one that reaches into the next held fragment
//! wins the start of it; one that covers a held fragment whole replaces it; what the
//! trims leave is resolved by copying the fragments in offset order (a later one
//! overwrites). A fragment that starts lower but ends inside a held one therefore loses
//! the bytes they share.
//!
//! IPv6 has no host-os-policy entry and gets defrag.c's default, `bsd`
//! ([`Slot::insert_bsd`]): a fragment that starts at or below a held one wins the bytes
//! they share. The datagram is the first fragment's headers up to its fragment header
//! (link, IPv6, the unfragmentable extension headers), the fragment header's next header
//! written into the header before it, then the payload. Suricata keys it by addresses and
//! identification and takes a fragment but the last whose length is not whole 8-byte
//! units (an event only there).

use crate::packet::bytes::{be16, be32};
use crate::packet::{L3Kind, Layers};

/// Datagrams in reassembly at once.
pub const SLOTS: usize = 32;
/// Fragments one datagram may hold.
pub const MAX_FRAGS: usize = 64;
/// Bytes of fragment payload one datagram may hold (overlaps count twice).
pub const ARENA: usize = 96 * 1024;
/// Suricata's default `defrag.timeout` (60 s after the last fragment), on capture time.
pub const TIMEOUT_NS: u64 = 60_000_000_000;
/// Room for the link header (tags included) and the largest IPv4 header, or the IPv6
/// header and its unfragmentable extension headers.
const HEAD: usize = 256;
/// A datagram's largest payload: IPv6's (IPv4's is 20 bytes less).
const MAX_PAYLOAD: usize = 65_535;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DefragStats {
    /// Fragments taken into a reassembly.
    pub fragments: u64,
    /// Datagrams completed and inspected.
    pub reassembled: u64,
    /// Reassemblies given up because no fragment came for the timeout.
    pub timeout: u64,
    /// Fragments that overlapped bytes already held (resolved by the family's policy).
    pub overlap: u64,
    /// Fragments not taken: every slot busy with a live reassembly, or the datagram's
    /// fragments or bytes at their bound.
    pub too_many: u64,
    /// Fragments not taken: past 65,535 bytes, a length that is not whole 8-byte units
    /// before the last (IPv4), or headers longer than the room kept for them.
    pub malformed: u64,
}

impl DefragStats {
    /// The counters by name: IPv4's `frag_*`, IPv6's `frag6_*`.
    pub fn named(&self, v6: bool) -> [(&'static str, u64); 6] {
        let n = if v6 {
            [
                "frag6_fragments",
                "frag6_reassembled",
                "frag6_timeout",
                "frag6_overlap",
                "frag6_too_many",
                "frag6_malformed",
            ]
        } else {
            [
                "frag_fragments",
                "frag_reassembled",
                "frag_timeout",
                "frag_overlap",
                "frag_too_many",
                "frag_malformed",
            ]
        };
        let v = [
            self.fragments,
            self.reassembled,
            self.timeout,
            self.overlap,
            self.too_many,
            self.malformed,
        ];
        std::array::from_fn(|i| (n[i], v[i]))
    }
}

/// A datagram's identity: family, addresses (IPv4's in the first 4 bytes),
/// identification, protocol (IPv4; 0 for IPv6).
#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct Key {
    v6: bool,
    src: [u8; 16],
    dst: [u8; 16],
    id: u32,
    proto: u8,
}

/// `b` (layers `l`) is an IPv6 atomic fragment (offset 0, no more fragments): Suricata
/// decodes past its fragment header as if it had none, and [`Defrag::take`] returns it
/// as its own datagram, so an inspector sees it once, as that datagram.
pub fn is_ipv6_atomic(l: &Layers, b: &[u8]) -> bool {
    if l.l3 != L3Kind::Ipv6 || !l.is_fragment() || l.is_later_fragment() {
        return false;
    }
    let o3 = usize::from(l.l3_off);
    ipv6_fragment_header(b, o3, usize::from(l.l3_end))
        .is_some_and(|(fh, _)| be16(b, fh + 2) & 0xfff9 == 0)
}

/// Where an IPv6 fragment's fragment header is, and the offset of the next-header byte
/// that names it (the IPv6 header's or an extension header's); `None` without one inside
/// the datagram's first `end` bytes.
fn ipv6_fragment_header(b: &[u8], o3: usize, end: usize) -> Option<(usize, usize)> {
    let (mut at, mut names) = (o3 + 40, o3 + 6);
    let mut next = *b.get(o3 + 6)?;
    // Hop-by-hop, routing, destination options, AH, mobility, HIP, shim6; bounded walk.
    for _ in 0..16 {
        if at + 8 > end {
            return None;
        }
        let len = usize::from(b[at + 1]);
        let step = match next {
            44 => return Some((at, names)),
            0 | 43 | 60 | 135 | 139 | 140 => (len + 1) * 8,
            51 => (len + 2) * 4,
            _ => return None,
        };
        (names, next, at) = (at, b[at], at + step);
    }
    None
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
    key: Key,
    last_ns: u64,
    seen_last: bool,
    /// Held fragments in offset order (equal offsets: in arrival order).
    frags: Vec<Frag>,
    arena: Vec<u8>,
    /// The first fragment's link and IP headers (IPv6: up to the fragment header), and
    /// how many of its last bytes are IP headers (IPv4's, or IPv6's and its extensions).
    head: Vec<u8>,
    ihl: usize,
}

impl Slot {
    fn empty() -> Slot {
        Slot {
            live: false,
            key: Key::default(),
            last_ns: 0,
            seen_last: false,
            frags: Vec::new(),
            arena: Vec::new(),
            head: Vec::new(),
            ihl: 20,
        }
    }

    fn start(&mut self, key: Key, now: u64) {
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

    /// Inserts an IPv4 fragment `s..s + data.len()` (the policy above); true when it
    /// overlapped a held one.
    fn insert(&mut self, s: usize, data: &[u8], more: bool) -> bool {
        let e = s + data.len();
        let Some(i) = self.reaching(s) else {
            self.push(s, data, more);
            return false;
        };
        let prev = self.frags[i];
        let prev_end = prev.off + prev.len;
        let ltrim = if s >= prev.off { prev_end - s } else { 0 };
        if s < prev.off && e >= prev_end {
            self.frags[i].skip = true;
        }
        self.trim_next_and_push(i, s, data, ltrim, more);
        prev.off < e
    }

    /// Inserts fragment `s..s + data.len()` as Suricata's defrag.c applies its `bsd`
    /// policy (IPv6's: no host-os-policy entry covers it); true when it overlapped a
    /// held one. A fragment inside a held one is dropped; one starting inside a held one
    /// loses the shared bytes; one starting at or below a held one wins them.
    fn insert_bsd(&mut self, s: usize, data: &[u8], more: bool) -> bool {
        let e = s + data.len();
        let Some(i) = self.reaching(s) else {
            self.push(s, data, more);
            return false;
        };
        let prev = self.frags[i];
        let prev_end = prev.off + prev.len;
        let mut ltrim = 0;
        if prev.off <= s {
            if prev_end > e {
                return prev.off < e;
            }
            ltrim = prev_end - s;
        } else if e > prev.off + prev.ltrim {
            self.frags[i].ltrim = prev.ltrim.max(e - prev.off);
        }
        // A held fragment trimmed whole is let go.
        let p = &mut self.frags[i];
        p.skip |= p.ltrim >= p.len;
        self.trim_next_and_push(i, s, data, ltrim, more);
        prev.off < e
    }

    /// Where Suricata's walk (defrag.c) stops for a fragment starting at `s`: the first
    /// held fragment not let go that ends past `s`, looked for from the one before the
    /// first at or past `s` (from the lowest when there is none, or when `s` is 0:
    /// Suricata's key `s - 1` wraps). Both policies act on that fragment alone.
    fn reaching(&self, s: usize) -> Option<usize> {
        let ge = (s > 0)
            .then(|| self.frags.iter().position(|f| f.off >= s))
            .flatten();
        let from = ge.map_or(0, |n| n.saturating_sub(1));
        (from..self.frags.len()).find(|&i| {
            let f = self.frags[i];
            !f.skip && s < f.off + f.len
        })
    }

    /// What both policies do after acting on held fragment `i`: the one after it loses
    /// the bytes the new fragment covers, and the new one is held without its first
    /// `ltrim` bytes (not at all when that is all of it).
    fn trim_next_and_push(&mut self, i: usize, s: usize, data: &[u8], ltrim: usize, more: bool) {
        let e = s + data.len();
        if let Some(next) = self.frags.get_mut(i + 1) {
            if e > next.off {
                next.ltrim = e - next.off;
            }
        }
        if ltrim < data.len() {
            self.push(s + ltrim, &data[ltrim..], more);
        }
    }

    /// Holds `data` at `off` (after the trims), in offset order.
    fn push(&mut self, off: usize, data: &[u8], more: bool) {
        let f = Frag {
            off,
            len: data.len(),
            ltrim: 0,
            skip: false,
            more,
            at: self.arena.len(),
        };
        self.arena.extend_from_slice(data);
        let at = self.frags.partition_point(|g| g.off <= f.off);
        self.frags.insert(at, f);
        self.seen_last |= !more;
    }

    /// Suricata's test: the last fragment seen, the first held, no hole between (the
    /// end so far is the furthest end held: a fragment another covered adds nothing).
    fn complete(&self) -> bool {
        if !self.seen_last || self.frags.first().is_none_or(|f| f.off != 0) || self.head.is_empty()
        {
            return false;
        }
        let mut len = 0;
        for f in self.frags.iter().filter(|f| !f.skip) {
            if f.off > len {
                return false;
            }
            len = len.max(f.off + f.len);
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
    /// IPv4's counts.
    pub stats: DefragStats,
    /// IPv6's counts.
    pub stats6: DefragStats,
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
            stats6: DefragStats::default(),
        }
    }

    /// Bytes held at most (every slot in use).
    pub fn memory(&self) -> usize {
        self.out.len() + self.slots.len() * (ARENA + HEAD + MAX_FRAGS * std::mem::size_of::<Frag>())
    }

    fn stats_of(&mut self, v6: bool) -> &mut DefragStats {
        if v6 {
            &mut self.stats6
        } else {
            &mut self.stats
        }
    }

    /// Takes IP fragment `b` (layers `l`) seen at capture time `now`. When it completes
    /// its datagram, returns the datagram's bytes (the first fragment's link header, its
    /// IP header with the length set, no fragment bits (IPv4: the checksum right; IPv6:
    /// no fragment header), then the payload), valid until the next call.
    pub fn take(&mut self, l: &Layers, b: &[u8], now: u64) -> Option<&[u8]> {
        if !l.is_fragment() {
            return None;
        }
        let o3 = usize::from(l.l3_off);
        let end = usize::from(l.l3_end);
        // Per family: where the headers end and the fragment's data starts, the
        // datagram's key, more-fragments, offset, and (IPv6) the next-header byte to
        // write the fragment header's next header into.
        let (data, key, more, off, names) = match l.l3 {
            L3Kind::Ipv4 => {
                let ihl = usize::from(b[o3] & 0x0f) * 4;
                let frag = be16(b, o3 + 6);
                let mut key = Key {
                    id: u32::from(be16(b, o3 + 4)),
                    proto: b[o3 + 9],
                    ..Key::default()
                };
                key.src[..4].copy_from_slice(&b[o3 + 12..o3 + 16]);
                key.dst[..4].copy_from_slice(&b[o3 + 16..o3 + 20]);
                let (more, off) = (frag & 0x2000 != 0, usize::from(frag & 0x1fff) * 8);
                let len = end.saturating_sub(o3 + ihl);
                // A fragment but the last carries whole units; nothing passes 65,535.
                if (more && (len == 0 || len % 8 != 0)) || off + len > MAX_PAYLOAD - 20 {
                    self.stats.malformed += 1;
                    return None;
                }
                (o3 + ihl, key, more, off, None)
            }
            L3Kind::Ipv6 => {
                let Some((fh, names)) = ipv6_fragment_header(b, o3, end) else {
                    self.stats6.malformed += 1;
                    return None;
                };
                let fo = be16(b, fh + 2);
                let (more, off) = (fo & 1 != 0, usize::from(fo & 0xfff8));
                // An atomic fragment is no fragment to Suricata, which decodes past the
                // fragment header: it is its own datagram, uncounted.
                if !more && off == 0 {
                    return self.atomic(b, o3, fh, names, end);
                }
                let mut key = Key {
                    v6: true,
                    id: be32(b, fh + 4),
                    ..Key::default()
                };
                key.src.copy_from_slice(&b[o3 + 8..o3 + 24]);
                key.dst.copy_from_slice(&b[o3 + 24..o3 + 40]);
                if off + end.saturating_sub(fh + 8) > MAX_PAYLOAD {
                    self.stats6.malformed += 1;
                    return None;
                }
                (fh + 8, key, more, off, Some((fh, names)))
            }
            _ => return None,
        };
        let v6 = key.v6;
        let head_end = names.map_or(data, |(fh, _)| fh);
        if head_end > HEAD {
            self.stats_of(v6).malformed += 1;
            return None;
        }
        let len = end.saturating_sub(data);
        let i = self.slot_for(key, now)?;
        let s = &mut self.slots[i];
        if s.frags.len() >= MAX_FRAGS || s.arena.len() + len > ARENA {
            self.stats_of(v6).too_many += 1;
            return None;
        }
        s.last_ns = now;
        if off == 0 && s.head.is_empty() {
            s.head.extend_from_slice(&b[..head_end]);
            s.ihl = head_end - o3;
            if let Some((fh, names)) = names {
                // The datagram has no fragment header: what named it names what it held.
                s.head[names] = b[fh];
            }
        }
        let overlap = if v6 {
            s.insert_bsd(off, &b[data..data + len], more)
        } else {
            s.insert(off, &b[data..data + len], more)
        };
        let complete = s.complete();
        let st = if v6 {
            &mut self.stats6
        } else {
            &mut self.stats
        };
        st.fragments += 1;
        st.overlap += u64::from(overlap);
        if !complete {
            return None;
        }
        st.reassembled += 1;
        let s = &mut self.slots[i];
        s.live = false;
        let e = s.assemble(&mut self.out);
        let (h, ihl) = (s.head.len(), s.ihl);
        self.out[HEAD - h..HEAD].copy_from_slice(&s.head);
        let ip = HEAD - ihl;
        let o = &mut self.out;
        if v6 {
            // The payload length counts the unfragmentable extension headers too.
            let plen = (ihl - 40 + e) as u16;
            o[ip + 4..ip + 6].copy_from_slice(&plen.to_be_bytes());
        } else {
            let total = (ihl + e) as u16;
            o[ip + 2..ip + 4].copy_from_slice(&total.to_be_bytes());
            // Keep DF; clear MF and the offset.
            o[ip + 6] &= 0x40;
            o[ip + 7] = 0;
            o[ip + 10..ip + 12].copy_from_slice(&[0, 0]);
            let c = crate::packet::checksum::checksum(&o[ip..HEAD]);
            o[ip + 10..ip + 12].copy_from_slice(&c.to_be_bytes());
        }
        Some(&self.out[HEAD - h..HEAD + e])
    }

    /// IPv6 atomic fragment `b` (fragment header at `fh`, named by the byte at `names`,
    /// datagram ending at `end`) without its fragment header.
    fn atomic(
        &mut self,
        b: &[u8],
        o3: usize,
        fh: usize,
        names: usize,
        end: usize,
    ) -> Option<&[u8]> {
        if fh > HEAD {
            self.stats6.malformed += 1;
            return None;
        }
        let data = &b[fh + 8..end];
        let o = &mut self.out;
        o[HEAD - fh..HEAD].copy_from_slice(&b[..fh]);
        o[HEAD..HEAD + data.len()].copy_from_slice(data);
        o[HEAD - fh + names] = b[fh];
        let plen = (fh - o3 - 40 + data.len()) as u16;
        o[HEAD - fh + o3 + 4..HEAD - fh + o3 + 6].copy_from_slice(&plen.to_be_bytes());
        Some(&self.out[HEAD - fh..HEAD + data.len()])
    }

    /// The slot of `key`: the live one, else a free or timed-out one; `None` (counted)
    /// when every slot holds a live reassembly.
    fn slot_for(&mut self, key: Key, now: u64) -> Option<usize> {
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
            self.stats_of(key.v6).too_many += 1;
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
                if s.key.v6 {
                    self.stats6.timeout += 1;
                } else {
                    self.stats.timeout += 1;
                }
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

    /// Ethernet / IPv6 fragment of id 9 (next header 17) at byte `off` carrying `data`;
    /// with `dstopts`, an 8-byte destination-options header before the fragment header.
    fn frag6(off: usize, more: bool, data: &[u8], dstopts: bool) -> Vec<u8> {
        let mut p = vec![
            2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x86, 0xdd, 0x60, 0, 0, 0,
        ];
        let ext = if dstopts { 8 } else { 0 };
        p.extend_from_slice(&((ext + 8 + data.len()) as u16).to_be_bytes());
        p.extend_from_slice(&[if dstopts { 60 } else { 44 }, 64]);
        p.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        p.extend_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        if dstopts {
            p.extend_from_slice(&[44, 0, 1, 4, 0, 0, 0, 0]);
        }
        p.extend_from_slice(&[17, 0]);
        p.extend_from_slice(&(off as u16 | u16::from(more)).to_be_bytes());
        p.extend_from_slice(&9u32.to_be_bytes());
        p.extend_from_slice(data);
        p
    }

    #[test]
    fn ipv6_fragments_make_a_datagram_without_the_fragment_header() {
        let a: Vec<u8> = (0..16).collect();
        let b: Vec<u8> = (100..105).collect();
        let mut d = Defrag::default();
        assert_eq!(take(&mut d, &frag6(16, false, &b, false), 1), None);
        let dg = take(&mut d, &frag6(0, true, &a, false), 2).expect("complete");
        // Next header UDP, payload length 21, the payload right after the IPv6 header.
        assert_eq!((dg[20], be16(&dg, 18), dg.len()), (17, 21, 54 + 21));
        assert_eq!(&dg[54..], [&a[..], &b].concat());
        // With an unfragmentable header, it names UDP and is counted in the length.
        take(&mut d, &frag6(0, true, &a, true), 3);
        let dg = take(&mut d, &frag6(16, false, &b, true), 4).expect("complete");
        assert_eq!((dg[20], dg[54], be16(&dg, 18)), (60, 17, 8 + 21));
        assert_eq!(&dg[62..], [&a[..], &b].concat());
        let l = Layers::parse(LinkKind::Ethernet, &dg);
        assert!(!l.is_fragment() && l.has_l4() && l.l4_proto == 17);
        // Overlaps, Suricata's `bsd`: a later one starting inside a held one loses the
        // bytes they share; one starting below a held one wins them.
        take(&mut d, &frag6(0, true, &[b'A'; 16], false), 5);
        let dg = take(&mut d, &frag6(8, false, &[b'B'; 16], false), 6).unwrap();
        assert_eq!(&dg[54..], [&[b'A'; 16][..], &[b'B'; 8]].concat());
        take(&mut d, &frag6(8, false, &[b'A'; 16], false), 8);
        let dg = take(&mut d, &frag6(0, true, &[b'B'; 16], false), 9).unwrap();
        assert_eq!(&dg[54..], [&[b'B'; 16][..], &[b'A'; 8]].concat());
        // An atomic fragment is its own datagram, uncounted.
        let dg = take(&mut d, &frag6(0, false, &a, false), 7).expect("atomic");
        assert_eq!((dg[20], be16(&dg, 18), &dg[54..]), (17, 16, &a[..]));
        assert_eq!(
            (d.stats6.reassembled, d.stats6.overlap, d.stats6.fragments),
            (4, 2, 8)
        );
        assert_eq!(d.stats, DefragStats::default(), "IPv4's counts untouched");
    }

    #[test]
    fn a_covered_fragment_does_not_hide_a_hole() {
        let mut d = Defrag::default();
        take(&mut d, &frag(8, true, &[0; 8]), 1);
        take(&mut d, &frag(0, true, &[0; 32]), 2);
        // Bytes 32..40 never came: no datagram.
        assert_eq!(take(&mut d, &frag(40, false, &[0; 8]), 3), None);
        assert_eq!(d.stats.reassembled, 0);
    }
}
