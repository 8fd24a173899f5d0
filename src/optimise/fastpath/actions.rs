//! Consolidated header actions: the net field writes of a whole path, plus one checksum
//! delta per checksum, found by comparing a packet before and after the chain.
//!
//! Checksums: each NF patches per RFC 1624 eqn. 3, `HC' = ~(~HC + Σ(~m + m'))`. The
//! end-around-carry fold is exact (`fold(a + fold(b)) = fold(a + b)`), so a sequence of
//! patches equals one patch by the sum of all their word terms, which the recorder adds
//! up NF by NF ([`step_sums`]). Not the net change: when a later NF undoes a rewrite the
//! terms still sum to a non-zero multiple of 0xffff, which turns a 0xffff checksum into
//! 0x0000. A UDP checksum of 0 (none) stays 0 and a computed 0 is sent as 0xffff, at
//! every step as here. The one blind spot is an NF that patches a checksum for a field
//! it rewrites with the same value (no byte changes); none of ours does. `tests` holds
//! the proptest.

use crate::packet::checksum::{fold32, fold64};
use crate::packet::{L3Kind, Layers};

/// Rewrites must fall in the first bytes (headers); anything later is not consolidated.
pub const WINDOW: usize = 128;
/// Most separate runs of rewritten bytes.
pub const MAX_WRITES: usize = 6;
/// Most rewritten bytes in all: an IPv6 address and a MAC (Maglev), or both IPv4
/// addresses, both ports and a MAC (NAT then Maglev) fit. Kept small so the actions are
/// one cache line (a hit that rewrites reads them; a wider form straddled two lines).
pub const MAX_BYTES: usize = 24;

/// Most 8-byte masked writes a rewrite compiles to: NAT out or in, Maglev and NAT then
/// Maglev with a MAC take one to three; a rewrite that needs more is not consolidated.
pub const MAX_WORDS: usize = 4;

/// The rewrite as a hit applies it: up to [`MAX_WORDS`] read-modify-writes of 8 bytes
/// each (the bytes a window's mask names take its value), then one RFC 1624 patch per
/// checksum. Compiled once at install, so a hit does no per-run length dispatch and no
/// per-byte copies (the runs form cost ~90 instructions a hit at 3 NATs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Actions {
    /// Each window's new bytes in memory order (little-endian word), outside its mask 0.
    vals: [u64; MAX_WORDS],
    /// The Ethernet addresses the recorded packet arrived with (when [`ETH`] is set): a
    /// path that may rewrite one matches later packets against them (they are in no
    /// checksum or key).
    eth: [u8; 12],
    /// Window k covers bytes `offs[k]..offs[k] + 8`, which end within `min_len`.
    offs: [u8; MAX_WORDS],
    /// Bit j of `masks[k]`: byte `offs[k] + j` is written ([`WORD_MASKS`] expands it).
    masks: [u8; MAX_WORDS],
    nwords: u8,
    /// [`IP`], [`L4`], [`UDP`], [`ETH`].
    flags: u8,
    /// Offset and summed delta of the IPv4 header checksum (with [`IP`]).
    ip_at: u16,
    ip_delta: u16,
    /// Offset and summed delta of the transport checksum (with [`L4`]; UDP with [`UDP`]).
    l4_at: u16,
    l4_delta: u16,
    /// Packets shorter than this do not have every byte the actions touch (private:
    /// [`Actions::apply`]'s unchecked accesses rely on it).
    min_len: u16,
}

const IP: u8 = 1;
const L4: u8 = 2;
const UDP: u8 = 4;
const ETH: u8 = 8;

/// A window's byte mask as a word mask: bit j of the index sets byte j.
static WORD_MASKS: [u64; 256] = {
    let mut t = [0u64; 256];
    let mut i = 0;
    while i < 256 {
        let mut j = 0;
        while j < 8 {
            if i >> j & 1 != 0 {
                t[i] |= 0xff << (8 * j);
            }
            j += 1;
        }
        i += 1;
    }
    t
};

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
        vals: [0; MAX_WORDS],
        eth: [0; 12],
        offs: [0; MAX_WORDS],
        masks: [0; MAX_WORDS],
        nwords: 0,
        flags: 0,
        ip_at: 0,
        ip_delta: 0,
        l4_at: 0,
        l4_delta: 0,
        min_len: 0,
    };

    /// The actions that turn `orig` into `fin` (both with layout `l`), with `sums` the
    /// checksum word sums of every NF's step (see [`step_sums`]). The caller checks them
    /// by applying them to a copy of `orig` (see [`Unfit::Mismatch`]).
    pub fn between(
        orig: &[u8],
        fin: &[u8],
        l: &Layers,
        match_eth: bool,
        sums: Sums,
    ) -> Result<Actions, Unfit> {
        if orig.len() != fin.len() {
            return Err(Unfit::Length);
        }
        // Past the window only equality matters: one memcmp, not a byte loop over the
        // payload.
        if orig.len() > WINDOW && orig[WINDOW..] != fin[WINDOW..] {
            return Err(Unfit::OutsideHeaders);
        }
        let n = orig.len().min(WINDOW);
        let cs = Checksums::of(l);
        let mut a = Actions::NONE;
        // The rewritten bytes as runs first (their limits are the documented ones), then
        // compiled to windows once the length every packet must have is known.
        let mut runs = [(0u8, 0u8); MAX_WRITES];
        let mut nruns = 0;
        let mut used = 0;
        // Paths that write nothing (filters, monitors) compare the window once; the
        // others skip its unchanged stretches eight bytes at a time.
        let mut i = if orig[..n] == fin[..n] { n } else { 0 };
        while i < n {
            if i + 8 <= n && orig[i..i + 8] == fin[i..i + 8] {
                i += 8;
                continue;
            }
            if orig[i] == fin[i] || cs.covers(i) {
                i += 1;
                continue;
            }
            let start = i;
            while i < n && orig[i] != fin[i] && !cs.covers(i) {
                i += 1;
            }
            if i > WINDOW {
                return Err(Unfit::OutsideHeaders);
            }
            let len = i - start;
            if nruns == MAX_WRITES || used + len > MAX_BYTES {
                return Err(Unfit::TooManyWrites);
            }
            runs[nruns] = (start as u8, len as u8);
            nruns += 1;
            used += len;
            a.min_len = a.min_len.max(i as u16);
        }
        if let (Some(c), true) = (cs.ip, sums.ip != 0) {
            (a.ip_at, a.ip_delta) = (c as u16, fold64(sums.ip));
            a.flags |= IP;
            a.min_len = a.min_len.max(c as u16 + 2);
        }
        if let (Some(c), true) = (cs.l4, sums.l4 != 0) {
            (a.l4_at, a.l4_delta) = (c as u16, fold64(sums.l4));
            a.flags |= if l.l4_proto == 17 { L4 | UDP } else { L4 };
            a.min_len = a.min_len.max(c as u16 + 2);
        }
        if nruns > 0 {
            // A window is 8 bytes within the packet.
            a.min_len = a.min_len.max(8);
        }
        if a.min_len as usize > orig.len() {
            return Err(Unfit::Length);
        }
        // Windows in order: each starts at the first byte not yet written (moved back
        // so it ends within `min_len`) and takes every run byte that falls in it.
        let last = a.min_len as usize - 8;
        let bytes = runs[..nruns]
            .iter()
            .flat_map(|&(o, len)| o as usize..o as usize + len as usize);
        for b in bytes {
            let k = a.nwords as usize;
            let open = k > 0 && b < a.offs[k - 1] as usize + 8;
            if !open {
                if k == MAX_WORDS {
                    return Err(Unfit::TooManyWrites);
                }
                a.offs[k] = b.min(last) as u8;
                a.nwords += 1;
            }
            let k = a.nwords as usize - 1;
            let j = b - a.offs[k] as usize;
            a.vals[k] |= u64::from(fin[b]) << (8 * j);
            a.masks[k] |= 1 << j;
        }
        if match_eth && l.has_ethernet() && n >= 12 {
            a.eth.copy_from_slice(&orig[..12]);
            a.flags |= ETH;
            a.min_len = a.min_len.max(12);
        }
        Ok(a)
    }

    /// Packets shorter than this do not have every byte the actions touch.
    pub const fn min_len(&self) -> u16 {
        self.min_len
    }

    /// Whether applying changes anything (paths of filters and monitors do not).
    pub const fn rewrites(&self) -> bool {
        self.nwords != 0 || self.flags & (IP | L4) != 0
    }

    /// Whether later packets must arrive with the recorded Ethernet addresses.
    pub const fn has_eth(&self) -> bool {
        self.flags & ETH != 0
    }

    /// Whether the packet's Ethernet addresses are the recorded ones, when that matters
    /// (the length is checked by the caller, against `min_len`).
    #[inline]
    pub fn eth_matches(&self, d: &[u8]) -> bool {
        self.flags & ETH == 0 || d.get(..12) == Some(&self.eth[..])
    }

    /// Applies the writes and patches the checksums once. `d` is at least `min_len`
    /// long (the hit checked it; the recorder replays on a copy of the same length).
    #[inline]
    pub fn apply(&self, d: &mut [u8]) {
        // Every window and checksum ends within `min_len` (`between` makes it so, and
        // nothing else writes these fields), so one length test covers every access;
        // the hit's `Table::fits` has made it true, so it never returns here.
        if d.len() < self.min_len as usize {
            debug_assert!(
                false,
                "apply on {} bytes, min_len {}",
                d.len(),
                self.min_len
            );
            return;
        }
        debug_assert!(self.in_bounds());
        let k = (self.nwords as usize).min(MAX_WORDS);
        for ((&o, &m), &v) in self.offs[..k].iter().zip(&self.masks).zip(&self.vals) {
            // SAFETY: window `o..o + 8` ends within `min_len` <= `d.len()` (above).
            let w = unsafe { &mut *d.as_mut_ptr().add(o as usize).cast::<[u8; 8]>() };
            let x = u64::from_le_bytes(*w) & !WORD_MASKS[m as usize] | v;
            *w = x.to_le_bytes();
        }
        if self.flags & IP != 0 {
            // SAFETY: `ip_at + 2 <= min_len <= d.len()` when `IP` is set (above).
            let c = unsafe { checksum_at(d, self.ip_at) };
            *c = patch(u16::from_be_bytes(*c), self.ip_delta).to_be_bytes();
        }
        if self.flags & L4 != 0 {
            // SAFETY: `l4_at + 2 <= min_len <= d.len()` when `L4` is set (above).
            let c = unsafe { checksum_at(d, self.l4_at) };
            let old = u16::from_be_bytes(*c);
            if self.flags & UDP == 0 {
                *c = patch(old, self.l4_delta).to_be_bytes();
            } else if old != 0 {
                let n = patch(old, self.l4_delta);
                *c = (if n == 0 { 0xffff } else { n }).to_be_bytes();
            }
        }
    }

    /// What [`apply`](Self::apply)'s unchecked accesses rely on: every window and
    /// checksum it touches ends within `min_len`.
    fn in_bounds(&self) -> bool {
        let len = self.min_len as usize;
        let k = (self.nwords as usize).min(MAX_WORDS);
        self.offs[..k].iter().all(|&o| o as usize + 8 <= len)
            && (self.flags & IP == 0 || self.ip_at as usize + 2 <= len)
            && (self.flags & L4 == 0 || self.l4_at as usize + 2 <= len)
    }
}

/// The two bytes at `at` as a checksum, unchecked.
///
/// # Safety
/// `at + 2 <= d.len()`.
#[inline(always)]
unsafe fn checksum_at(d: &mut [u8], at: u16) -> &mut [u8; 2] {
    debug_assert!(at as usize + 2 <= d.len());
    // SAFETY: the caller's bound; `[u8; 2]` has alignment 1.
    unsafe { &mut *d.as_mut_ptr().add(at as usize).cast::<[u8; 2]>() }
}

/// Where a layout's checksums sit.
struct Checksums {
    ip: Option<usize>,
    l4: Option<usize>,
}

impl Checksums {
    fn of(l: &Layers) -> Checksums {
        let has_l4 = l.has_l4() && !l.is_later_fragment();
        let o4 = l.l4_off as usize;
        Checksums {
            ip: (l.l3 == L3Kind::Ipv4).then_some(l.l3_off as usize + 10),
            l4: match l.l4_proto {
                6 if has_l4 => Some(o4 + 16),
                17 if has_l4 => Some(o4 + 6),
                1 | 58 if has_l4 => Some(o4 + 2),
                _ => None,
            },
        }
    }

    fn covers(&self, i: usize) -> bool {
        self.ip.is_some_and(|c| i == c || i == c + 1)
            || self.l4.is_some_and(|c| i == c || i == c + 1)
    }
}

/// Per checksum, `Σ(~old + new)` over the 16-bit words an NF changed, summed over the
/// NFs of a path (0: nothing it covers changed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sums {
    pub ip: u64,
    pub l4: u64,
}

impl Sums {
    pub fn add(&mut self, o: Sums) {
        self.ip += o.ip;
        self.l4 += o.l4;
    }
}

/// The checksum word sums of one NF's rewrite, `before` → `after` (same length; only the
/// first bytes, up to the shorter, are compared). Summing per step, not over the net
/// change, keeps a rewrite that a later NF undoes: the NFs' checksum patches leave a
/// 0xffff checksum as 0x0000 then.
pub fn step_sums(before: &[u8], after: &[u8], l: &Layers) -> Sums {
    let n = before.len().min(after.len());
    let mut s = Sums::default();
    if before[..n] == after[..n] {
        return s;
    }
    let cs = Checksums::of(l);
    let o3 = l.l3_off as usize;
    let o4 = l.l4_off as usize;
    let ip_end = if cs.ip.is_some() && n > o3 {
        o3 + usize::from(before[o3] & 0x0f) * 4
    } else {
        0
    };
    // The pseudo header's addresses (ICMPv4 has none).
    let pseudo = match (cs.l4.is_some() && l.l4_proto != 1, l.l3) {
        (true, L3Kind::Ipv4) => o3 + 12..o3 + 20,
        (true, _) => o3 + 8..o3 + 40,
        _ => 0..0,
    };
    let word = |w: usize| -> u64 {
        let g = |b: &[u8]| {
            u64::from(u16::from_be_bytes([
                b[w],
                if w + 1 < n { b[w + 1] } else { 0 },
            ]))
        };
        (!g(before) & 0xffff) + g(after)
    };
    // Each changed 16-bit word once per checksum, aligned from the checksum's start.
    let (mut last_ip, mut last_l4) = (usize::MAX, usize::MAX);
    let mut next = 0;
    while next < n {
        let i = next;
        // Unchanged stretches are skipped eight bytes at a time.
        if i + 8 <= n && before[i..i + 8] == after[i..i + 8] {
            next += 8;
            continue;
        }
        next += 1;
        if before[i] == after[i] || cs.covers(i) {
            continue;
        }
        if (o3..ip_end).contains(&i) {
            let w = i - (i - o3) % 2;
            if w != last_ip {
                s.ip += word(w);
                last_ip = w;
            }
        }
        let l4w = if cs.l4.is_some() && i >= o4 {
            Some(i - (i - o4) % 2)
        } else if pseudo.contains(&i) {
            Some(i - (i - o3) % 2)
        } else {
            None
        };
        if let Some(w) = l4w.filter(|&w| w != last_l4) {
            s.l4 += word(w);
            last_l4 = w;
        }
    }
    s
}

/// RFC 1624 eqn. 3 with the word deltas summed in advance.
#[inline]
pub fn patch(c: u16, delta: u16) -> u16 {
    !fold32(u32::from(!c) + u32::from(delta))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::bytes::{be16, put16};
    use crate::packet::checksum::{update16, update32, update_bytes};
    use crate::packet::LinkKind;
    use proptest::prelude::*;

    #[test]
    fn actions_fit_one_cache_line() {
        assert!(std::mem::size_of::<Actions>() <= 64);
    }

    /// One NF's rewrite of one field, patched the way the NFs patch: `Bytes` as Maglev
    /// (`update_bytes`), `Words` as `update32`/`update16`, `Presummed` as the NAT (one
    /// delta per checksum, RFC 1624 eqn. 3).
    #[derive(Clone, Copy, Debug)]
    enum Style {
        Bytes,
        Words,
        Presummed,
    }

    #[derive(Clone, Copy, Debug)]
    struct Op {
        /// 0 src addr, 1 dst addr, 2 src port, 3 dst port.
        field: u8,
        /// Non-zero: a rewrite to all zeros is the one case where the forms differ.
        value: u32,
        /// Put the field back to its original value instead.
        restore: bool,
        style: Style,
    }

    fn op() -> impl Strategy<Value = Op> {
        (
            0u8..4,
            1u32..,
            prop::bool::weighted(0.2),
            prop_oneof![
                Just(Style::Bytes),
                Just(Style::Words),
                Just(Style::Presummed)
            ],
        )
            .prop_map(|(field, value, restore, style)| Op {
                field,
                value,
                restore,
                style,
            })
    }

    fn csum() -> impl Strategy<Value = u16> {
        prop_oneof![
            Just(0u16),
            Just(0xffff),
            Just(0xfffe),
            Just(1),
            any::<u16>()
        ]
    }

    const L3: usize = 14;
    const L4: usize = 34;

    fn presummed(old: &[u16], new: &[u16]) -> u16 {
        let s: u32 = old.iter().map(|&o| u32::from(!o)).sum::<u32>()
            + new.iter().map(|&n| u32::from(n)).sum::<u32>();
        fold32(s)
    }

    fn l4_patch(d: &mut [u8], at: usize, udp: bool, f: impl Fn(u16) -> u16) {
        let c = be16(d, at);
        if !udp {
            put16(d, at, f(c));
        } else if c != 0 {
            let n = f(c);
            put16(d, at, if n == 0 { 0xffff } else { n });
        }
    }

    /// Applies one NF rewrite with its own checksum updates.
    fn step(d: &mut [u8], orig: &[u8], udp: bool, o: Op) {
        let l4c = if udp { L4 + 6 } else { L4 + 16 };
        if o.field < 2 {
            let at = L3 + 12 + 4 * o.field as usize;
            let old = u32::from_be_bytes([d[at], d[at + 1], d[at + 2], d[at + 3]]);
            let new = if o.restore {
                u32::from_be_bytes([orig[at], orig[at + 1], orig[at + 2], orig[at + 3]])
            } else {
                o.value
            };
            if new == old {
                // An NF that patches a checksum for a field it leaves as it was is the
                // one case consolidation cannot see (documented): such NFs skip it.
                return;
            }
            d[at..at + 4].copy_from_slice(&new.to_be_bytes());
            let (ob, nb) = (old.to_be_bytes(), new.to_be_bytes());
            let words = |v: u32| [(v >> 16) as u16, v as u16];
            let f = |c: u16| match o.style {
                Style::Bytes => update_bytes(c, &ob, &nb),
                Style::Words => update32(c, old, new),
                Style::Presummed => patch(c, presummed(&words(old), &words(new))),
            };
            put16(d, L3 + 10, f(be16(d, L3 + 10)));
            l4_patch(d, l4c, udp, f);
        } else {
            let at = L4 + 2 * (o.field as usize - 2);
            let old = be16(d, at);
            let new = if o.restore {
                be16(orig, at)
            } else {
                o.value as u16 | 1
            };
            if new == old {
                return;
            }
            put16(d, at, new);
            l4_patch(d, l4c, udp, |c| match o.style {
                Style::Presummed => patch(c, presummed(&[old], &[new])),
                _ => update16(c, old, new),
            });
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]
        /// Applying the consolidated actions once gives exactly the bytes of the NFs'
        /// sequence of RFC 1624 updates, 0x0000/0xffff checksums and UDP's 0 included.
        #[test]
        fn one_patch_equals_the_sequence(
            body in prop::collection::vec(any::<u8>(), 70),
            ip_c in csum(),
            l4_c in csum(),
            udp in any::<bool>(),
            ops in prop::collection::vec(op(), 1..5),
        ) {
            let mut orig = body.clone();
            orig[12] = 0x08;
            orig[13] = 0;
            orig[L3] = 0x45;
            orig[L3 + 6] = 0;
            orig[L3 + 7] = 0;
            orig[L3 + 9] = if udp { 17 } else { 6 };
            let total = (orig.len() - L3) as u16;
            put16(&mut orig, L3 + 2, total);
            put16(&mut orig, L3 + 10, ip_c);
            put16(&mut orig, if udp { L4 + 6 } else { L4 + 16 }, l4_c);
            if !udp {
                orig[L4 + 12] = 0x50;
            }
            let l = Layers::parse(LinkKind::Ethernet, &orig);
            prop_assert!(l.has_l4());
            let mut fin = orig.clone();
            let mut sums = Sums::default();
            for o in &ops {
                let before = fin.clone();
                step(&mut fin, &orig, udp, *o);
                sums.add(step_sums(&before, &fin, &l));
            }
            let a = Actions::between(&orig, &fin, &l, false, sums).unwrap();
            let mut once = orig.clone();
            a.apply(&mut once);
            prop_assert_eq!(once, fin);
        }
    }

    fn udp_frame(len: usize) -> Vec<u8> {
        let mut orig = vec![0u8; len];
        orig[12] = 0x08;
        orig[L3] = 0x45;
        orig[L3 + 9] = 17;
        put16(&mut orig, L3 + 2, (len - L3) as u16);
        put16(&mut orig, L4 + 4, (len - L4) as u16);
        orig
    }

    /// A rewrite ending at the packet's last byte: its window is moved back so it ends
    /// there too (no read or write past the packet), and gives the chain's bytes.
    #[test]
    fn a_window_at_the_end_of_the_packet_stays_inside_it() {
        let orig = udp_frame(44);
        let l = Layers::parse(LinkKind::Ethernet, &orig);
        let mut fin = orig.clone();
        fin[L4 + 2] = 0x12; // destination port
        fin[42] = 0xab;
        fin[43] = 0xcd;
        let a = Actions::between(&orig, &fin, &l, false, Sums::default()).unwrap();
        assert_eq!(a.min_len, 44);
        assert_eq!((a.nwords, a.offs[0]), (1, 36));
        let mut once = orig.clone();
        a.apply(&mut once);
        assert_eq!(once, fin);
    }

    /// Runs too far apart for four windows are not consolidated (the chain runs).
    #[test]
    fn a_rewrite_needing_more_than_four_windows_is_refused() {
        let orig = udp_frame(120);
        let l = Layers::parse(LinkKind::Ethernet, &orig);
        let mut fin = orig.clone();
        for at in [1, 50, 70, 90, 110] {
            fin[at] = 0xee;
        }
        assert_eq!(
            Actions::between(&orig, &fin, &l, false, Sums::default()),
            Err(Unfit::TooManyWrites)
        );
        fin[110] = orig[110];
        let a = Actions::between(&orig, &fin, &l, false, Sums::default()).unwrap();
        let mut once = orig.clone();
        a.apply(&mut once);
        assert_eq!(once, fin);
    }

    #[test]
    fn writes_past_the_headers_are_refused() {
        let mut orig = vec![0u8; 200];
        orig[12] = 0x08;
        orig[L3] = 0x45;
        orig[L3 + 9] = 17;
        let l = Layers::parse(LinkKind::Ethernet, &orig);
        let mut fin = orig.clone();
        fin[150] = 1;
        assert_eq!(
            Actions::between(&orig, &fin, &l, false, Sums::default()),
            Err(Unfit::OutsideHeaders)
        );
        assert_eq!(
            Actions::between(&orig, &fin[..199], &l, false, Sums::default()),
            Err(Unfit::Length)
        );
    }
}
