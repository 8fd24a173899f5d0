//! Consolidated header actions: the net field writes of a whole path, plus one checksum
//! delta per checksum, found by comparing a packet before and after the chain.
//!
//! Checksums: each NF patches per RFC 1624 eqn. 3, `HC' = ~(~HC + Σ(~m + m'))`. The
//! end-around-carry fold is exact (`fold(a + fold(b)) = fold(a + b)`), so a sequence of
//! patches equals one patch by the sum of their word deltas; and intermediate values
//! cancel mod 0xffff (`~B + B = 0xffff`), so the net `Σ(~orig + final)` over the changed
//! words has the same residue. Both sums are non-zero (every term `~m + m'` is), which
//! decides the -0/+0 representation alike. A UDP checksum of 0 (none) stays 0 and a
//! computed 0 is sent as 0xffff, at every step as here. `tests` holds the proptest.

use crate::packet::bytes::{be16, put16};
use crate::packet::checksum::fold32;
use crate::packet::{L3Kind, Layers};

/// Rewrites must fall in the first bytes (headers); anything later is not consolidated.
pub const WINDOW: usize = 128;
/// Most separate runs of rewritten bytes.
pub const MAX_WRITES: usize = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Actions {
    writes: [(u8, u8); MAX_WRITES],
    nwrites: u8,
    /// Final values at the rewritten offsets.
    bytes: [u8; WINDOW],
    /// (checksum offset, delta) of the IPv4 header checksum.
    ip: Option<(u16, u16)>,
    /// (checksum offset, delta, is UDP) of the transport checksum.
    l4: Option<(u16, u16, bool)>,
    /// Packets shorter than this do not have every byte the actions touch.
    pub min_len: u16,
    /// The Ethernet addresses the recorded packet arrived with, when some NF on the path
    /// may rewrite one: later packets must match them (they are in no checksum or key).
    pub eth: Option<[u8; 12]>,
}

/// Why a packet's rewrite cannot be consolidated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unfit {
    Length,
    OutsideHeaders,
    TooManyWrites,
    Mismatch,
}

impl Actions {
    pub const NONE: Actions = Actions {
        writes: [(0, 0); MAX_WRITES],
        nwrites: 0,
        bytes: [0; WINDOW],
        ip: None,
        l4: None,
        min_len: 0,
        eth: None,
    };

    /// The actions that turn `orig` into `fin` (both with layout `l`). The caller
    /// checks them by applying them to a copy of `orig` (see [`Unfit::Mismatch`]).
    pub fn between(orig: &[u8], fin: &[u8], l: &Layers, match_eth: bool) -> Result<Actions, Unfit> {
        if orig.len() != fin.len() {
            return Err(Unfit::Length);
        }
        let n = orig.len();
        let o3 = l.l3_off as usize;
        let o4 = l.l4_off as usize;
        let ip_cs = (l.l3 == L3Kind::Ipv4).then_some(o3 + 10);
        let l4 = l.has_l4() && !l.is_later_fragment();
        let l4_cs = match l.l4_proto {
            6 if l4 => Some(o4 + 16),
            17 if l4 => Some(o4 + 6),
            1 | 58 if l4 => Some(o4 + 2),
            _ => None,
        };
        let is_cs = |i: usize| {
            ip_cs.is_some_and(|c| i == c || i == c + 1)
                || l4_cs.is_some_and(|c| i == c || i == c + 1)
        };
        let mut a = Actions::NONE;
        let mut i = 0;
        while i < n {
            if orig[i] == fin[i] || is_cs(i) {
                i += 1;
                continue;
            }
            let start = i;
            while i < n && orig[i] != fin[i] && !is_cs(i) {
                i += 1;
            }
            if i > WINDOW {
                return Err(Unfit::OutsideHeaders);
            }
            if a.nwrites as usize == MAX_WRITES {
                return Err(Unfit::TooManyWrites);
            }
            a.writes[a.nwrites as usize] = (start as u8, (i - start) as u8);
            a.nwrites += 1;
            a.bytes[start..i].copy_from_slice(&fin[start..i]);
            a.min_len = a.min_len.max(i as u16);
        }
        let changed =
            |lo: usize, hi: usize| (lo..hi.min(n)).any(|i| orig[i] != fin[i] && !is_cs(i));
        // Σ(~old + new) over the 16-bit words (aligned from `base`) of [lo, hi) that changed.
        let words = |base: usize, lo: usize, hi: usize| -> u32 {
            let mut s = 0u32;
            let mut w = lo - (lo - base) % 2;
            while w < hi.min(n) {
                if changed(w, w + 2) {
                    let g = |b: &[u8]| {
                        u32::from(u16::from_be_bytes([
                            b[w],
                            b.get(w + 1).copied().unwrap_or(0),
                        ]))
                    };
                    s += (!g(orig) & 0xffff) + g(fin);
                }
                w += 2;
            }
            s
        };
        if let Some(c) = ip_cs {
            let ihl = usize::from(orig[o3] & 0x0f) * 4;
            if c + 2 <= n && changed(o3, o3 + ihl) {
                a.ip = Some((c as u16, fold(words(o3, o3, o3 + ihl))));
                a.min_len = a.min_len.max(c as u16 + 2);
            }
        }
        if let Some(c) = l4_cs {
            let mut s = words(o4, o4, n);
            if l.l4_proto != 1 {
                // The pseudo header's addresses.
                s += match l.l3 {
                    L3Kind::Ipv4 => words(o3, o3 + 12, o3 + 20),
                    _ => words(o3, o3 + 8, o3 + 40),
                };
            }
            if s != 0 && c + 2 <= n {
                a.l4 = Some((c as u16, fold(s), l.l4_proto == 17));
                a.min_len = a.min_len.max(c as u16 + 2);
            }
        }
        if match_eth && l.has_ethernet() && n >= 12 {
            let mut e = [0u8; 12];
            e.copy_from_slice(&orig[..12]);
            a.eth = Some(e);
            a.min_len = a.min_len.max(12);
        }
        Ok(a)
    }

    /// Whether a packet's bytes qualify for these actions (long enough, same Ethernet
    /// addresses where they matter).
    #[inline]
    pub fn fits(&self, d: &[u8]) -> bool {
        d.len() >= self.min_len as usize && self.eth.is_none_or(|e| d[..12] == e)
    }

    /// Applies the writes and patches the checksums once.
    #[inline]
    pub fn apply(&self, d: &mut [u8]) {
        for &(o, n) in &self.writes[..self.nwrites as usize] {
            let (o, n) = (o as usize, n as usize);
            d[o..o + n].copy_from_slice(&self.bytes[o..o + n]);
        }
        if let Some((at, delta)) = self.ip {
            let at = at as usize;
            put16(d, at, patch(be16(d, at), delta));
        }
        if let Some((at, delta, udp)) = self.l4 {
            let at = at as usize;
            let c = be16(d, at);
            if !udp {
                put16(d, at, patch(c, delta));
            } else if c != 0 {
                let n = patch(c, delta);
                put16(d, at, if n == 0 { 0xffff } else { n });
            }
        }
    }
}

#[inline]
fn fold(s: u32) -> u16 {
    fold32(s)
}

/// RFC 1624 eqn. 3 with the word deltas summed in advance.
#[inline]
pub fn patch(c: u16, delta: u16) -> u16 {
    !fold32(u32::from(!c) + u32::from(delta))
}
