//! The IPv4 chunk's drop tests and step keys (`ipv4.rs`) held dense for its first pass:
//! one array per shape of test (one field in one or two values, either of two fields in
//! them, a field or either of two in a port set), each walked without dispatch on a
//! test's kind and with no empty slots, every field read at its fixed offset with no
//! bounds check of its own. The furthest byte any of them reads past the IPv4 header's
//! start, and past the header after it, is fixed at load and checked once a packet
//! against the frame's length; a packet that ends before it (a short frame, ports near
//! its end) is decided test by test as before (`Ipv4Chunk::decide`'s checked path).
//! The pass is instantiated per count of each shape (at most [`ONES`] and [`EITHERS`]),
//! chosen once a chunk, so each test is unrolled in place with no loop around it.

use super::Set;
use crate::nfs::pipeline::plan::FieldRef;

/// A field's 8-byte word at a fixed offset from the IPv4 header (`at` 0) or the header
/// after it (`at` 1), big-endian, shifted right and masked.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Word {
    at: u8,
    off: u16,
    sh: u8,
    mask: u64,
}

/// Fields further than this from their header's start are left to the checked path (it
/// bounds the load's reach check; no header the chunk reads comes near it).
const FAR: usize = 1 << 12;

impl Word {
    /// `None` for a field the one-load read cannot take (wider than its word).
    pub(super) fn of(f: &FieldRef, next: bool) -> Option<Word> {
        let (off, sh, mask) = f.word()?;
        (usize::from(off) < FAR).then_some(Word {
            at: u8::from(next),
            off,
            sh,
            mask,
        })
    }

    /// The bytes past the header's start this read needs.
    fn reach(&self) -> usize {
        usize::from(self.off) + 8
    }

    /// # Safety
    /// the header's start (`o3` or `o4`) + `reach()` is at most `d.len()` ([`Dense::fits`]).
    #[inline(always)]
    unsafe fn read(&self, d: &[u8], o3: usize, o4: usize) -> u64 {
        self.field(unsafe { self.word(d, o3, o4) })
    }

    /// The whole big-endian word this field lies in.
    ///
    /// # Safety
    /// as for [`Word::read`].
    #[inline(always)]
    unsafe fn word(&self, d: &[u8], o3: usize, o4: usize) -> u64 {
        // A select, not an index into a pair on the stack (a store and a reload on every
        // read's path).
        let o = if self.at != 0 { o4 } else { o3 } + usize::from(self.off);
        debug_assert!(o + 8 <= d.len());
        // SAFETY: the caller checked the 8 bytes from `o` lie inside `d`.
        let w = unsafe { d.as_ptr().add(o).cast::<[u8; 8]>().read_unaligned() };
        u64::from_be_bytes(w)
    }

    /// This field out of its word.
    #[inline(always)]
    fn field(&self, w: u64) -> u64 {
        (w >> self.sh) & self.mask
    }
}

/// `a` and `b` read from one word when both lie in the 8 bytes from the earlier's
/// offset (the later one's offset moved back, its shift less by as many bits): a
/// firewall's two ports, a switch's two addresses. `None`: two words.
fn one_word(a: Word, b: Word) -> Option<(Word, Word)> {
    if a.at != b.at {
        return None;
    }
    let back = |hi: Word, lo: Word| {
        let bits = u32::from(hi.off - lo.off) * 8;
        (bits <= u32::from(hi.sh)).then(|| Word {
            off: lo.off,
            sh: hi.sh - bits as u8,
            ..hi
        })
    };
    if a.off <= b.off {
        Some((a, back(b, a)?))
    } else {
        Some((back(a, b)?, b))
    }
}

/// Consecutive one-field tests whose fields lie in one word read it once (the
/// firewall's fragment field at 6 and protocol at 9: one load, not two; session 31):
/// each test that can take the word before it is marked `reuse`, its field moved onto
/// that word as [`one_word`] moves it. A test that reuses keeps its word where it is,
/// so a field before it (which would move it back) starts a word of its own.
fn share_words(one: &mut [One]) {
    for i in 1..one.len() {
        let (a, b) = (one[i - 1].f, one[i].f);
        let Some((a2, b2)) = one_word(a, b) else {
            continue;
        };
        if one[i - 1].reuse && a2.off != a.off {
            continue;
        }
        one[i - 1].f = a2;
        one[i].f = b2;
        one[i].reuse = true;
    }
}

/// Most one-field and two-field tests the unrolled pass takes (more: the checked path).
pub(super) const ONES: usize = 4;
pub(super) const EITHERS: usize = 2;

/// One field in one or two values (`[v, v]` for one).
#[derive(Clone, Copy, Debug, Default)]
struct One {
    f: Word,
    /// `f` lies in the word the test before read (see [`share_words`]): not read again.
    reuse: bool,
    v: [u64; 2],
    /// The membership that keeps, as 0 or 1: the test drops when the membership differs
    /// from it (one `xor`, not a compare and a set).
    keep: u32,
    bit: u32,
}

/// Either of two fields in one or two values.
#[derive(Clone, Copy, Debug, Default)]
struct Either {
    f: Word,
    g: Word,
    /// `f` and `g` are read from one word (see [`one_word`]).
    shared: bool,
    v: [u64; 2],
    keep: u32,
    bit: u32,
}

/// A field (or either of two: `g` is `f` for one) in a port set.
#[derive(Clone, Debug)]
struct InSet {
    f: Word,
    g: Word,
    set: Set,
    keep: u32,
    bit: u32,
}

/// A test as the chunk lowers it (see `ipv4.rs`'s `ByteGuard`): fields, values, the
/// membership that drops, the outcome mask's bit.
pub(super) enum Test {
    Two(Word, Option<Word>, [u64; 2], bool, u32),
    Set(Word, Option<Word>, Set, bool, u32),
}

/// The chunk's tests and step keys, dense (see the module's comment).
#[derive(Clone, Debug)]
pub(super) struct Dense {
    /// The first `ones` used, the first `eithers`.
    one: [One; ONES],
    either: [Either; EITHERS],
    pub(super) ones: usize,
    pub(super) eithers: usize,
    sets: Box<[InSet]>,
    /// The step's learned and looked-up keys, on the IPv4 header.
    keys: [Word; 2],
    /// Both keys read from one word (see [`one_word`]).
    keys_shared: bool,
    /// The bytes read past the IPv4 header's start and past the next header's.
    reach: [usize; 2],
}

impl Dense {
    /// `enter`: the length of the header entered after the IPv4 header (a packet that
    /// fits the reach is never cut short there).
    /// `None`: more tests of a shape than the unrolled pass takes.
    pub(super) fn new(tests: Vec<Test>, keys: [Word; 2], enter: Option<u16>) -> Option<Dense> {
        let mut reach = [0usize; 2];
        let mut see = |w: &Word| {
            let r = &mut reach[usize::from(w.at & 1)];
            *r = (*r).max(w.reach());
        };
        keys.iter().for_each(&mut see);
        let (mut one, mut either, mut sets) = (Vec::new(), Vec::new(), Vec::new());
        for t in tests {
            match t {
                Test::Two(f, None, v, when, bit) => {
                    see(&f);
                    one.push(One {
                        f,
                        reuse: false,
                        v,
                        keep: u32::from(!when),
                        bit,
                    });
                }
                Test::Two(f, Some(g), v, when, bit) => {
                    see(&f);
                    see(&g);
                    let (f, g, shared) =
                        one_word(f, g).map_or((f, g, false), |(f, g)| (f, g, true));
                    either.push(Either {
                        f,
                        g,
                        shared,
                        v,
                        keep: u32::from(!when),
                        bit,
                    });
                }
                Test::Set(f, g, set, when, bit) => {
                    see(&f);
                    let g = g.unwrap_or(f);
                    see(&g);
                    sets.push(InSet {
                        f,
                        g,
                        set,
                        keep: u32::from(!when),
                        bit,
                    });
                }
            }
        }
        if let Some(n) = enter {
            reach[1] = reach[1].max(usize::from(n));
        }
        let (ones, eithers) = (one.len(), either.len());
        if ones > ONES || eithers > EITHERS {
            return None;
        }
        // After the reach is taken from where each field lies: no packet changes path.
        share_words(&mut one);
        let (keys, keys_shared) =
            one_word(keys[0], keys[1]).map_or((keys, false), |(k, l)| ([k, l], true));
        one.resize(ONES, One::default());
        either.resize(EITHERS, Either::default());
        Some(Dense {
            one: one.try_into().ok()?,
            either: either.try_into().ok()?,
            ones,
            eithers,
            sets: sets.into(),
            keys,
            keys_shared,
            reach,
        })
    }

    /// Whether every read of the dense pass lies inside a frame of `len` bytes whose IPv4
    /// header starts at `o3` and the next header at `o4`.
    #[inline(always)]
    pub(super) fn fits(&self, len: usize, o3: usize, o4: usize) -> bool {
        (o3 + self.reach[0] <= len) & (o4 + self.reach[1] <= len)
    }

    /// The outcome mask's drop bits (`always` set) and the step's two keys, for a packet
    /// that [`Dense::fits`]: each test sets its bit when it drops. `A`, `E`: `ones` and
    /// `eithers`.
    ///
    /// # Safety
    /// `self.fits(d.len(), o3, o4)`.
    #[inline(always)]
    pub(super) unsafe fn decide<const A: usize, const E: usize>(
        &self,
        d: &[u8],
        o3: usize,
        o4: usize,
        always: u32,
    ) -> (u32, u64, u64) {
        debug_assert!((A, E) == (self.ones, self.eithers));
        let mut m = always;
        // SAFETY (every read below): each word's reach is in `self.reach`, which the
        // caller checked against `d.len()`.
        let mut x = 0;
        for t in &self.one[..A] {
            // The same way for every packet: a predicted branch.
            if !t.reuse {
                x = unsafe { t.f.word(d, o3, o4) };
            }
            let v = t.f.field(x);
            let inside = u32::from((v == t.v[0]) | (v == t.v[1]));
            m |= (inside ^ t.keep) << t.bit;
        }
        for t in &self.either[..E] {
            // The same way for every packet: a predicted branch.
            let (v, w) = if t.shared {
                let x = unsafe { t.f.word(d, o3, o4) };
                (t.f.field(x), t.g.field(x))
            } else {
                unsafe { (t.f.read(d, o3, o4), t.g.read(d, o3, o4)) }
            };
            let inside = (v == t.v[0]) | (v == t.v[1]) | (w == t.v[0]) | (w == t.v[1]);
            m |= (u32::from(inside) ^ t.keep) << t.bit;
        }
        for t in &*self.sets {
            let (v, w) = unsafe { (t.f.read(d, o3, o4), t.g.read(d, o3, o4)) };
            let inside = t.set.has(v) | t.set.has(w);
            m |= (u32::from(inside) ^ t.keep) << t.bit;
        }
        let [a, b] = &self.keys;
        let (k, look) = if self.keys_shared {
            let x = unsafe { a.word(d, o3, o4) };
            (a.field(x), b.field(x))
        } else {
            unsafe { (a.read(d, o3, o4), b.read(d, o3, o4)) }
        };
        (m, k, look)
    }
}

#[cfg(test)]
mod tests {
    use super::{one_word, share_words, One, Word};
    use crate::nfs::pipeline::nf::compile;

    fn w(at: u8, off: u16, sh: u8, bits: u32) -> Word {
        Word {
            at,
            off,
            sh,
            mask: (1 << bits) - 1,
        }
    }

    fn parts(x: Option<(Word, Word)>) -> Option<[(u8, u16, u8); 2]> {
        x.map(|(a, b)| [(a.at, a.off, a.sh), (b.at, b.off, b.sh)])
    }

    /// Two fields share a word when the later one lies in the 8 bytes from the earlier's
    /// offset: the later one's offset moves back, its shift less by as many bits; in
    /// either order; not across headers, not past the 8 bytes.
    #[test]
    fn one_word_takes_two_fields_in_eight_bytes() {
        // Ports: 16 bits at 0 and at 2.
        assert_eq!(
            parts(one_word(w(1, 0, 48, 16), w(1, 2, 48, 16))),
            Some([(1, 0, 48), (1, 0, 32)])
        );
        // Addresses at 12 and 16, the later one first.
        assert_eq!(
            parts(one_word(w(0, 16, 32, 32), w(0, 12, 32, 32))),
            Some([(0, 12, 0), (0, 12, 32)])
        );
        // The later field's last byte is the word's last: still one word.
        assert_eq!(
            parts(one_word(w(0, 0, 56, 8), w(0, 7, 56, 8))),
            Some([(0, 0, 56), (0, 0, 0)])
        );
        // One byte further: two words.
        assert_eq!(parts(one_word(w(0, 0, 56, 8), w(0, 8, 56, 8))), None);
        assert_eq!(parts(one_word(w(0, 0, 48, 16), w(0, 10, 48, 16))), None);
        // Not the same header.
        assert_eq!(parts(one_word(w(0, 0, 48, 16), w(1, 2, 48, 16))), None);
    }

    fn ones(fields: &[Word]) -> Vec<One> {
        fields
            .iter()
            .map(|&f| One {
                f,
                ..One::default()
            })
            .collect()
    }

    fn shared(one: &[One]) -> Vec<(u8, u16, u8, bool)> {
        one.iter()
            .map(|t| (t.f.at, t.f.off, t.f.sh, t.reuse))
            .collect()
    }

    /// One-field tests in a row read a word once when the later lies in the earlier's 8
    /// bytes: the firewall's protocol (8 bits at 9) then fragment field (13 bits at 6)
    /// become one word at 6; a field before a test that already reuses a word starts its
    /// own (moving that test back would break the word it shares); fields apart or in
    /// another header keep their own.
    #[test]
    fn one_field_tests_share_a_word_in_a_row() {
        let mut fw = ones(&[w(0, 9, 56, 8), w(0, 6, 48, 13)]);
        share_words(&mut fw);
        assert_eq!(shared(&fw), [(0, 6, 32, false), (0, 6, 48, true)]);
        let mut three = ones(&[
            w(0, 4, 56, 8),
            w(0, 6, 56, 8),
            w(0, 2, 56, 8),
            w(0, 20, 48, 16),
        ]);
        share_words(&mut three);
        assert_eq!(
            shared(&three),
            [
                (0, 4, 56, false),
                (0, 4, 40, true),
                (0, 2, 56, false),
                (0, 20, 48, false)
            ]
        );
        let mut apart = ones(&[w(0, 9, 56, 8), w(1, 9, 56, 8)]);
        share_words(&mut apart);
        assert_eq!(shared(&apart), [(0, 9, 56, false), (1, 9, 56, false)]);
        // The compiled firewall: its two one-field tests share.
        let path = format!(
            "{}/examples/pipeline/firewall.stv",
            env!("CARGO_MANIFEST_DIR")
        );
        let src = std::fs::read_to_string(path).expect("the example");
        let c = compile("firewall.stv", &src, &Default::default()).expect("compiles");
        let d = c.plan.flat().ipv4.as_deref().expect("chunk").dense.clone();
        let d = d.expect("dense");
        assert_eq!(
            shared(&d.one[..d.ones]),
            [(0, 6, 32, false), (0, 6, 48, true)]
        );
    }

    /// The firewall's reach: its IPv4 header's destination address (the looked-up key)
    /// read as the 8 bytes from 16, and its ports' destination as the 8 from 2: a frame
    /// must hold 24 bytes from the IPv4 header and 10 from the ports for the dense pass.
    #[test]
    fn the_reach_is_the_furthest_byte_read() {
        let path = format!(
            "{}/examples/pipeline/firewall.stv",
            env!("CARGO_MANIFEST_DIR")
        );
        let src = std::fs::read_to_string(path).expect("the example");
        let c = compile("firewall.stv", &src, &Default::default()).expect("compiles");
        let x = c
            .plan
            .flat()
            .ipv4
            .as_deref()
            .expect("the chunk on the bytes");
        let d = x.dense.as_ref().expect("dense");
        assert_eq!(d.reach, [24, 10]);
        assert_eq!((d.ones, d.eithers, d.sets.len()), (2, 1, 0));
        assert!(d.fits(14 + 24, 14, 34 - 10) && d.fits(44, 14, 34));
        assert!(!d.fits(14 + 23, 14, 20) && !d.fits(43, 14, 34));
    }
}
