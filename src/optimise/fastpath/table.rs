//! The bounded table of consolidated entries: 8-way set associative, least recently
//! used way evicted when a set is full, idle timeout on capture time. Allocated once,
//! untouched: a set's entries are written on its first insert, so a table costs nothing
//! until it holds entries (`fastpath = "auto"` while off never pays for one).

use std::hash::BuildHasher;
use std::mem::MaybeUninit;

use super::actions::Actions;
use super::key::FpKey;
use crate::flow::FlowKey;
pub(super) use crate::packet::prefetch_ptr as prefetch;

/// Most distinct flow keys along a path (each NF that rewrites addresses or ports makes
/// one more: a chain of 8 NATs sees 8).
pub const MAX_KEYS: usize = 8;
const WAYS: usize = 8;

const NO_KEY: FlowKey = FlowKey {
    src: [0; 16],
    dst: [0; 16],
    sport: 0,
    dport: 0,
    proto: 0,
    family: 0,
};

pub use crate::nfs::{Step, MAX_PATH};

/// A refused flow's packets after the refusal until one is recorded again (the ones
/// between run the chain unrecorded): refusals are mostly lasting (unsolicited traffic a
/// NAT drops, TCP-flag rules), but a full table or an exhausted pool is not.
pub const RETRY_AFTER: u8 = 16;

/// Most nodes a chain may have for its NFs to be consolidated (node indices fit 13 bits).
pub const MAX_NODES: usize = 1 << 13;

#[derive(Clone, Copy)]
pub struct Entry {
    pub key: FpKey,
    pub last_ns: u64,
    pub len: u8,
    /// Non-zero: a remembered refusal (no path). Its flow's packets run the chain without
    /// the cost of recording, counting this down; the one that reaches 0 is recorded.
    pub retry: u8,
    pub egress: u16,
    /// The sink the packet reaches, or None when the last step drops it.
    pub sink: Option<u16>,
    pub actions: Actions,
    pub steps: [Step; MAX_PATH],
}

impl Entry {
    pub const EMPTY: Entry = Entry {
        key: FpKey::EMPTY,
        last_ns: 0,
        len: 0,
        retry: 0,
        egress: 0,
        sink: None,
        actions: Actions::NONE,
        steps: [Step::EMPTY; MAX_PATH],
    };

    /// The entry that remembers a refused (or unconsolidatable) recording of `key`.
    pub fn refusal(key: FpKey, now: u64) -> Entry {
        Entry {
            key,
            last_ns: now,
            retry: RETRY_AFTER,
            ..Entry::EMPTY
        }
    }

    pub fn path(&self) -> &[Step] {
        &self.steps[..self.len as usize]
    }
}

/// What a hit reads of an entry, as the table keeps it: the key and everything else a
/// hit needs before the path in the first line, the path (up to four NFs) in the
/// second, up to eight in the third. The actions and the flow keys the NFs saw are kept apart: a hit reads the
/// actions only when the path rewrites something (and prefetches them then), the keys
/// only for NFs whose state function reads one (the flow monitor).
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
pub struct Hot {
    pub key: FpKey,
    pub last_ns: u64,
    pub egress: u16,
    /// The sink, or [`NO_SINK`] when the last step drops the packet.
    sink: u16,
    /// Packets shorter than this lack a byte the actions touch (or compare).
    pub min_len: u16,
    /// Path length in the low bits, [`REWRITES`], [`MATCH_ETH`], [`CALLS`] and
    /// [`REFUSAL`] above.
    len: u8,
    /// A remembered refusal's countdown ([`Entry::retry`]); a consolidated entry's hits
    /// not yet added to the counters of its path (the per-NF counters and the
    /// [`Step::COUNT`] NFs'), so a hit bumps one byte instead of two counters per NF.
    /// They are added when it reaches 255, when the entry goes
    /// ([`Table::drain_retired`]) and before anything reads or changes the NFs
    /// ([`Table::drain_counts`]).
    count: u8,
    pub steps: [Step; MAX_PATH],
}

const NO_SINK: u16 = u16::MAX;
/// The actions change bytes or checksums.
const REWRITES: u8 = 0x80;
/// The packet's Ethernet addresses must match the recorded ones (in the actions).
const MATCH_ETH: u8 = 0x40;
/// Some NF on the path has a check or a state function to call per packet.
const CALLS: u8 = 0x20;
/// A remembered refusal (no path).
const REFUSAL: u8 = 0x10;
const LEN: u8 = 0x0f;

impl Hot {
    const EMPTY: Hot = Hot::of(&Entry::EMPTY);

    const fn of(e: &Entry) -> Hot {
        let a = &e.actions;
        let mut len = e.len;
        if a.rewrites() {
            len |= REWRITES;
        }
        if a.has_eth() {
            len |= MATCH_ETH;
        }
        if e.retry > 0 {
            len |= REFUSAL;
        }
        let mut i = 0;
        while i < e.len as usize {
            if e.steps[i].flags & (Step::CHECK | Step::STATE) != 0 {
                len |= CALLS;
            }
            i += 1;
        }
        Hot {
            key: e.key,
            last_ns: e.last_ns,
            egress: e.egress,
            sink: match e.sink {
                Some(s) => s,
                None => NO_SINK,
            },
            min_len: a.min_len(),
            len,
            count: e.retry,
            steps: e.steps,
        }
    }

    #[inline]
    pub fn path(&self) -> &[Step] {
        &self.steps[..(self.len & LEN) as usize]
    }

    /// The sink the packet reaches, or None when the last step drops it.
    #[inline]
    pub fn sink(&self) -> Option<usize> {
        (self.sink != NO_SINK).then_some(self.sink as usize)
    }

    #[inline]
    pub fn rewrites(&self) -> bool {
        self.len & REWRITES != 0
    }

    #[inline]
    pub fn matches_eth(&self) -> bool {
        self.len & MATCH_ETH != 0
    }

    /// Some NF on the path has a check or a state function to call per packet.
    #[inline]
    pub fn calls(&self) -> bool {
        self.len & CALLS != 0
    }

    /// A remembered refusal (or a deferred flow): no path, its packets run the chain.
    #[inline]
    pub fn refusal(&self) -> bool {
        self.len & REFUSAL != 0
    }
}

/// The counts of an entry that left the table with hits not yet added, or with hits
/// of the current fold period whose refreshes are still to be folded in (`fold`, at its
/// last hit `last_ns`).
#[derive(Clone, Copy, Debug)]
struct Retired {
    steps: [Step; MAX_PATH],
    len: u8,
    count: u8,
    fold: bool,
    last_ns: u64,
}

impl Retired {
    fn path(&self) -> &[Step] {
        &self.steps[..self.len as usize]
    }
}

/// The distinct flow keys along an entry's path (each NF that rewrites addresses or
/// ports makes one more); [`Step::key_index`] picks one.
#[derive(Clone, Copy, Debug)]
pub struct Keys {
    pub keys: [FlowKey; MAX_KEYS],
    pub n: u8,
}

impl Keys {
    pub const EMPTY: Keys = Keys {
        keys: [NO_KEY; MAX_KEYS],
        n: 0,
    };
}

/// An entry's actions in one aligned line of their own (a rewriting hit reads one line).
#[derive(Clone, Copy, Debug)]
#[repr(align(64))]
struct ActionsLine(Actions);

/// A set's tags, in one aligned half line.
#[derive(Clone, Copy, Debug)]
#[repr(align(32))]
struct Tags([u32; WAYS]);

/// A way of the table that holds an entry or did once (made only from a tag that was
/// set, so what it names was written: see [`Ways`]). It may have been emptied since:
/// [`Table::live`] tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Way(u32);

/// Per-way storage allocated untouched. Entries are written a whole set at a time, on
/// the set's first insert ([`Table::insert`]), before any of its tags is set; a set once
/// written stays so, and reads go through [`Way`]s, which only set tags make. Actions
/// and flow keys are written only for entries that read them ([`Table::actions_of`],
/// [`Table::keys_of`]).
struct Ways<T>(Box<[MaybeUninit<T>]>);

impl<T: Copy> Ways<T> {
    fn new(n: usize) -> Ways<T> {
        Ways(Box::new_uninit_slice(n))
    }

    fn fill_set(&mut self, set: usize, v: T) {
        for x in &mut self.0[set * WAYS..(set + 1) * WAYS] {
            x.write(v);
        }
    }

    fn write(&mut self, w: Way, v: T) {
        self.0[w.0 as usize].write(v);
    }

    /// # Safety
    /// Way `w` was written ([`fill_set`](Self::fill_set) or [`write`](Self::write)), so
    /// it is in bounds: unchecked, since a fused hit reads its entry about nine times.
    #[inline(always)]
    unsafe fn get(&self, w: Way) -> &T {
        debug_assert!((w.0 as usize) < self.0.len());
        // SAFETY: the caller's.
        unsafe { self.0.get_unchecked(w.0 as usize).assume_init_ref() }
    }

    /// # Safety
    /// As [`get`](Self::get).
    #[inline(always)]
    unsafe fn get_mut(&mut self, w: Way) -> &mut T {
        debug_assert!((w.0 as usize) < self.0.len());
        // SAFETY: the caller's.
        unsafe { self.0.get_unchecked_mut(w.0 as usize).assume_init_mut() }
    }

    /// For prefetches, which read nothing.
    #[inline(always)]
    fn slot(&self, w: usize) -> &MaybeUninit<T> {
        &self.0[w]
    }
}

pub struct Table {
    /// Per set and way: 0 when empty, else the key hash's high half with the low bit set
    /// (the set comes from the low bits).
    tags: TagArray,
    entries: Ways<Hot>,
    actions: Ways<ActionsLine>,
    keys: Ways<Keys>,
    /// Bit per set: its ways are written ([`Ways`]).
    written: Vec<u64>,
    sets: usize,
    /// Per-process secrets of the hash.
    seeds: [u64; 7],
    timeout_ns: u64,
    live: usize,
    /// Removed or replaced entries whose counts are still to be added
    /// ([`drain_retired`](Self::drain_retired), after each chunk).
    retired: Vec<Retired>,
    /// The paths' shapes seen so far ([`Table::shape`]): shape `i + 1` is `shapes[i]`.
    shapes: [u64; MAX_SHAPES],
    /// Per shape: its folded twin, the shape without the steps that fold (itself when
    /// none does or the twin has no id).
    twins: [u8; MAX_SHAPES],
    n_shapes: usize,
    /// The current fold period (1..=255; 0: none). An entry whose consolidated hit ran
    /// its folding steps in this period is marked with it ([`Table::mark`]).
    pub period: u8,
}

/// Most distinct shapes a table names; an entry of another one gets [`NO_SHAPE`].
const MAX_SHAPES: usize = 254;
/// The shape of an entry whose calls no shape id names (past [`MAX_SHAPES`], or a slot
/// beyond 15): its hits take no fused run.
pub const NO_SHAPE: u8 = 255;
/// Set in a shape's byte for a step that calls its NF.
pub const SHAPE_CALL: u8 = 0x80;
/// Set in a shape's byte for a step whose state functions may fold ([`Step::FOLD`]).
pub const SHAPE_FOLD: u8 = 0x40;
/// The step whose spare byte (`shape`, used only in step 0) holds an entry's fold mark:
/// in the path's first line, which every hit that calls NFs reads.
const MARK_STEP: usize = 1;

/// A set and the ways in it whose tag matched a hash ([`Table::probe`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    set: u32,
    mask: u32,
}

impl Probe {
    pub const NONE: Probe = Probe { set: 0, mask: 0 };
}

/// What a table operation did, for the counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found {
    /// A consolidated entry.
    Hit(Way),
    /// A remembered refusal (or a deferred flow's countdown): the packet runs the chain.
    Refusal(Way),
    Miss,
    /// The entry was idle past the timeout and is gone.
    Expired,
}

impl Table {
    /// Room for about `capacity` entries (rounded up to a power of two of sets), allocated
    /// by [`ready`](Self::ready): a table that is never used (`fastpath = "auto"` that
    /// never tries consolidation) costs no allocation.
    pub fn new(capacity: usize, timeout_ns: u64) -> Table {
        let sets = capacity.div_ceil(WAYS).max(1).next_power_of_two();
        Table {
            tags: TagArray::zeroed(0),
            entries: Ways::new(0),
            actions: Ways::new(0),
            keys: Ways::new(0),
            written: Vec::new(),
            sets,
            seeds: {
                let h = crate::flow::Hasher::default();
                std::array::from_fn(|i| h.hash_one(0x5eed_u64 + i as u64) | 1)
            },
            timeout_ns,
            live: 0,
            retired: Vec::new(),
            shapes: [0; MAX_SHAPES],
            twins: [0; MAX_SHAPES],
            n_shapes: 0,
            period: 0,
        }
    }

    /// Shape `id`'s calls (0 for id 0): byte `j` is 0 when step `j` calls no NF, else
    /// [`SHAPE_CALL`], the step's check and state flags ([`Step::CHECK`],
    /// [`Step::STATE`]) shifted by 4 and its slot (< 16) in the low four bits.
    #[inline(always)]
    pub fn shape(&self, id: u8) -> u64 {
        match id {
            0 => 0,
            _ => self.shapes[(id as usize - 1) % MAX_SHAPES],
        }
    }

    /// Shape `id`'s folded twin: the same calls less the steps that fold (`id` itself
    /// when none does).
    #[inline(always)]
    pub fn twin(&self, id: u8) -> u8 {
        match id {
            0 | NO_SHAPE => id,
            _ => self.twins[(id as usize - 1) % MAX_SHAPES],
        }
    }

    /// The shape id of a path (0: no step calls its NF; [`NO_SHAPE`]: not named).
    fn shape_of(&mut self, path: &[Step]) -> u8 {
        let mut d = 0u64;
        for (j, s) in path.iter().enumerate() {
            let f = s.flags & (Step::CHECK | Step::STATE);
            if f == 0 {
                continue;
            }
            if s.slot >= 16 {
                return NO_SHAPE;
            }
            let fold = if s.flags & Step::FOLD != 0 {
                SHAPE_FOLD
            } else {
                0
            };
            d |= u64::from(SHAPE_CALL | fold | f << 4 | s.slot) << (8 * j);
        }
        self.shape_id(d)
    }

    /// The id of shape `d`, named now if new, with its folded twin.
    fn shape_id(&mut self, d: u64) -> u8 {
        if d == 0 {
            return 0;
        }
        if let Some(i) = self.shapes[..self.n_shapes].iter().position(|&x| x == d) {
            return i as u8 + 1;
        }
        if self.n_shapes >= MAX_SHAPES {
            return NO_SHAPE;
        }
        self.shapes[self.n_shapes] = d;
        self.n_shapes += 1;
        let id = self.n_shapes as u8;
        // The twin: the bytes of the folding steps cleared (it has no folding step, so
        // this recurses once).
        let folded = (0..MAX_PATH).fold(d, |t, j| {
            if (d >> (8 * j)) as u8 & SHAPE_FOLD != 0 {
                t & !(0xff << (8 * j))
            } else {
                t
            }
        });
        let twin = if folded == d {
            id
        } else {
            match self.shape_id(folded) {
                NO_SHAPE => id,
                t => t,
            }
        };
        self.twins[id as usize - 1] = twin;
        id
    }

    /// Entry `w`'s fold mark: the fold period of its last hit that ran its folding
    /// steps (0: none since the marks were last cleared).
    #[inline(always)]
    pub fn mark(&self, w: Way) -> u8 {
        self.hot(w).steps[MARK_STEP].shape
    }

    /// Entry `w`'s hit ran its folding steps in the current period.
    #[inline(always)]
    pub fn set_mark(&mut self, w: Way) {
        let p = self.period;
        self.hot_mut(w).steps[MARK_STEP].shape = p;
    }

    /// With `walk`, calls `f` with the path and last hit time of every live entry
    /// marked with the current period (their folded hits' refreshes); then starts the
    /// next period. When the period number wraps, every mark is cleared (a mark left
    /// from 255 periods ago must not pass for a current one). Walks the written sets.
    pub fn fold_period(&mut self, walk: bool, mut f: impl FnMut(&[Step], u64)) {
        let p = self.period;
        if p != 0 && walk {
            self.for_each_live(|t, w| {
                let e = t.hot(w);
                if e.steps[MARK_STEP].shape == p && !e.refusal() {
                    f(e.path(), e.last_ns);
                }
            });
        }
        if p == u8::MAX {
            self.for_each_live(|t, w| t.hot_mut(w).steps[MARK_STEP].shape = 0);
            self.period = 1;
        } else {
            self.period = p + 1;
        }
    }

    /// Allocates the table if it is not yet: before any lookup or insert (once per chunk
    /// of FastPath, a compare). Until then the walks over written sets find nothing.
    #[inline(always)]
    pub fn ready(&mut self) {
        if self.written.is_empty() {
            self.allocate();
        }
    }

    #[cold]
    #[inline(never)]
    fn allocate(&mut self) {
        let sets = self.sets;
        self.tags = TagArray::zeroed(sets);
        self.entries = Ways::new(sets * WAYS);
        self.actions = Ways::new(sets * WAYS);
        self.keys = Ways::new(sets * WAYS);
        self.written = vec![0; sets.div_ceil(64)];
        self.retired = Vec::with_capacity(4 * crate::packet::MAX_BATCH);
    }

    pub fn capacity(&self) -> usize {
        self.sets * WAYS
    }

    /// Bytes a table made with `Table::new(capacity, _)` allocates.
    pub fn bytes(capacity: usize) -> usize {
        let sets = capacity.div_ceil(WAYS).max(1).next_power_of_two();
        let per_way = std::mem::size_of::<Hot>()
            + std::mem::size_of::<ActionsLine>()
            + std::mem::size_of::<Keys>();
        sets * std::mem::size_of::<Tags>() + std::mem::align_of::<Tags>() + sets * WAYS * per_way
    }

    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// The key's hash, for [`find`](Self::find) and the prefetches: the six words in
    /// pairs, each word xored with its own per-process secret, each pair through one
    /// folded multiply (the 128-bit product's halves xored: every output bit depends on
    /// every input bit), the three results through a fourth. Half the instructions of
    /// six multiplies and murmur3's finaliser, which it replaced; a keyed hasher fed
    /// word by word cost three times as much.
    #[inline]
    pub fn hash(&self, k: &FpKey) -> u64 {
        let w = k.words();
        let s = &self.seeds;
        let x = folded_multiply(w[0] ^ s[0], w[1] ^ s[1]);
        let y = folded_multiply(w[2] ^ s[2], w[3] ^ s[3]);
        let z = folded_multiply(w[4] ^ s[4], w[5] ^ s[5]);
        folded_multiply(x ^ z, y ^ s[6])
    }

    /// (set, tag) of hash `h`: the set from the low bits, the tag from the high half.
    #[inline]
    fn place(&self, h: u64) -> (usize, u32) {
        (h as usize & (self.sets - 1), (h >> 32) as u32 | 1)
    }

    /// Bit i set: way i of `set` holds `tag` (all ways compared at once).
    #[inline]
    fn matching(&self, set: usize, tag: u32) -> u32 {
        let t = &self.tags[set].0;
        #[cfg(target_arch = "x86_64")]
        // SAFETY: SSE2 is part of x86_64; the loads read the set's 32 aligned bytes.
        unsafe {
            use core::arch::x86_64::*;
            let want = _mm_set1_epi32(tag as i32);
            let lo = _mm_cmpeq_epi32(_mm_load_si128(t.as_ptr() as *const __m128i), want);
            let hi = _mm_cmpeq_epi32(_mm_load_si128(t.as_ptr().add(4) as *const __m128i), want);
            (_mm_movemask_ps(_mm_castsi128_ps(lo)) | _mm_movemask_ps(_mm_castsi128_ps(hi)) << 4)
                as u32
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let mut m = 0u32;
            for (i, &x) in t.iter().enumerate() {
                m |= ((x == tag) as u32) << i;
            }
            m
        }
    }

    /// The way holding `k` (hash `h`), without the side effects of [`find`](Self::find)
    /// (the tags compared now are live ones).
    #[inline]
    pub fn way(&self, k: &FpKey, h: u64) -> Option<Way> {
        let (set, tag) = self.place(h);
        self.way_in(
            Probe {
                set: set as u32,
                mask: self.matching(set, tag),
            },
            k,
        )
    }

    /// The way of probe `p` that held `k` when probed: the tags compared once in
    /// [`probe`](Self::probe) serve the lookup too, as long as nothing was inserted since.
    /// A way emptied since still answers: check [`live`](Self::live) after removals.
    #[inline]
    pub fn way_in(&self, p: Probe, k: &FpKey) -> Option<Way> {
        let base = p.set * WAYS as u32;
        let mut m = p.mask;
        while m != 0 {
            // The mask holds tags that were set: their ways were written.
            let w = Way(base + m.trailing_zeros());
            if self.hot(w).key == *k {
                return Some(w);
            }
            m &= m - 1;
        }
        None
    }

    /// Starts loading the tags a lookup of hash `h` reads, so a chunk's lookups overlap
    /// their cache misses.
    #[inline]
    pub fn prefetch_tags(&self, h: u64) {
        prefetch(&self.tags[self.place(h).0]);
    }

    /// Compares hash `h`'s tag with its set's (after [`prefetch_tags`](Self::prefetch_tags)
    /// had time to work) and starts loading the first line of each entry that matches,
    /// and its second (the path) when `path`: hits that call no NF read only the first.
    #[inline]
    pub fn probe(&self, h: u64, path: bool) -> Probe {
        let (set, tag) = self.place(h);
        let mask = self.matching(set, tag);
        let mut m = mask;
        while m != 0 {
            let e = self.entries.slot(set * WAYS + m.trailing_zeros() as usize);
            prefetch(e);
            if path {
                prefetch(
                    e.as_ptr()
                        .wrapping_byte_add(std::mem::offset_of!(Hot, steps)),
                );
            }
            m &= m - 1;
        }
        Probe {
            set: set as u32,
            mask,
        }
    }

    /// Looks `k` (hash `h`) up at capture time `now`.
    #[inline]
    pub fn find(&mut self, k: &FpKey, h: u64, now: u64) -> Found {
        let w = self.way(k, h);
        self.find_at(w, now)
    }

    /// [`find`](Self::find) with the way already looked up by [`way`](Self::way) or
    /// [`way_in`](Self::way_in).
    #[inline]
    pub fn find_at(&mut self, w: Option<Way>, now: u64) -> Found {
        let Some(w) = w else {
            return Found::Miss;
        };
        let e = self.hot(w);
        if self.timeout_ns != 0 && now.saturating_sub(e.last_ns) > self.timeout_ns {
            self.remove(w);
            return Found::Expired;
        }
        if e.refusal() {
            return Found::Refusal(w);
        }
        Found::Hit(w)
    }

    /// Whether packet `p` (key `k`) would hit entry `w` as it stands, `w` found since the
    /// last removal (so live: the caller's probe of this chunk): not idle past the timeout, consolidated (not a refusal), `p` long enough for its actions and
    /// with the Ethernet addresses they match, and no FIN or RST in `tcp_flags` (the
    /// packet's, [`FpKey::tcp_flags`]: read once by the caller, which keeps them for the
    /// state functions). Changes nothing.
    #[inline]
    pub fn fits(&self, w: Way, tcp_flags: u16, p: &crate::packet::Packet) -> bool {
        let e = self.hot(w);
        debug_assert!(self.live(w));
        let idle =
            self.timeout_ns != 0 && p.meta().now_ns.saturating_sub(e.last_ns) > self.timeout_ns;
        !(idle || e.refusal())
            && p.len() >= e.min_len as usize
            && (!e.matches_eth() || self.actions_of(w).is_some_and(|a| a.eth_matches(p.data())))
            && tcp_flags & 0x05 == 0
    }

    /// Way `w` holds an entry (it may have been emptied since it was looked up).
    #[inline]
    pub fn live(&self, w: Way) -> bool {
        let w = w.0 as usize;
        self.tags[w / WAYS].0[w % WAYS] != 0
    }

    #[inline]
    pub fn entry(&self, w: Way) -> &Hot {
        self.hot(w)
    }

    /// Entry `w`, its actions and the flow keys its NFs saw (references: only what is
    /// read is loaded).
    #[inline]
    pub fn entry_parts(&self, w: Way) -> (&Hot, Option<&Actions>, Option<&Keys>) {
        (self.hot(w), self.actions_of(w), self.keys_of(w))
    }

    #[inline(always)]
    fn hot(&self, w: Way) -> &Hot {
        // SAFETY: a `Way` is made only from a set tag, and a set's entries are written
        // before any of its tags is set (`insert`) and never unwritten.
        unsafe { self.entries.get(w) }
    }

    #[inline(always)]
    fn hot_mut(&mut self, w: Way) -> &mut Hot {
        // SAFETY: as in `hot`.
        unsafe { self.entries.get_mut(w) }
    }

    /// Entry `w`'s actions, when it has any (it rewrites or matches Ethernet addresses).
    #[inline(always)]
    pub fn actions_of(&self, w: Way) -> Option<&Actions> {
        let e = self.hot(w);
        // SAFETY: `insert` writes a way's actions whenever the entry it installs there
        // rewrites or matches (`Hot::of` sets both flags from those actions), and the
        // flags read are the installed entry's.
        (e.rewrites() || e.matches_eth()).then(|| unsafe { &self.actions.get(w).0 })
    }

    /// The flow keys entry `w`'s NFs saw, when some NF on its path has a call to make.
    #[inline(always)]
    pub fn keys_of(&self, w: Way) -> Option<&Keys> {
        // SAFETY: `insert` writes a way's keys whenever the entry it installs there
        // calls an NF, and the flag read is the installed entry's.
        self.hot(w).calls().then(|| unsafe { self.keys.get(w) })
    }

    /// Starts loading the actions of entry `w` (when its path rewrites something): one
    /// aligned line.
    #[inline]
    pub fn prefetch_actions(&self, w: Way) {
        prefetch(self.actions.slot(w.0 as usize));
    }

    /// One more packet through a remembered refusal; true (and the refusal is gone) when
    /// the flow should be recorded again.
    #[inline]
    pub fn count_down(&mut self, w: Way) -> bool {
        let e = self.hot_mut(w);
        e.count -= 1;
        if e.count == 0 {
            self.remove(w);
            return true;
        }
        false
    }

    /// A hit on consolidated entry `w` at `now`; true when its count is full and must be
    /// added now ([`take_count`](Self::take_count)).
    #[inline]
    pub fn hit(&mut self, w: Way, now: u64) -> bool {
        let e = self.hot_mut(w);
        e.last_ns = e.last_ns.max(now);
        e.count += 1;
        e.count == u8::MAX
    }

    /// Entry `w`'s hits not yet added, and its path; the count restarts.
    #[inline]
    pub fn take_count(&mut self, w: Way) -> (u8, &[Step]) {
        let e = self.hot_mut(w);
        let n = std::mem::take(&mut e.count);
        (n, e.path())
    }

    /// Hands the entries that left the table since the last call to `add`: (count of
    /// hits not yet added, path, last hit time when it left with hits of the fold period
    /// it left in, whose refreshes are still to be folded).
    #[inline]
    pub fn drain_retired(&mut self, mut add: impl FnMut(u64, &[Step], Option<u64>)) {
        for r in self.retired.drain(..) {
            add(r.count as u64, r.path(), r.fold.then_some(r.last_ns));
        }
    }

    /// Calls `f` with every way that holds an entry, set by set, skipping sets never
    /// written 64 at a time (a table a short trial of `auto` filled holds few entries
    /// among many empty sets). `f` may remove the way it is given.
    fn for_each_live(&mut self, mut f: impl FnMut(&mut Table, Way)) {
        for i in 0..self.written.len() {
            let mut b = self.written[i];
            while b != 0 {
                let set = i * 64 + b.trailing_zeros() as usize;
                b &= b - 1;
                for j in 0..WAYS {
                    if self.tags[set].0[j] != 0 {
                        f(self, Way((set * WAYS + j) as u32));
                    }
                }
            }
        }
    }

    /// Hands every live entry's and every retired entry's hits not yet added to `add`
    /// (count, path), so the counters are whole: before a summary, before an NF takes a
    /// command. Walks the table's written sets: not per packet.
    pub fn drain_counts(&mut self, mut add: impl FnMut(u64, &[Step], Option<u64>)) {
        self.drain_retired(&mut add);
        self.for_each_live(|t, w| {
            let e = t.hot_mut(w);
            if !e.refusal() && e.count > 0 {
                let n = std::mem::take(&mut e.count);
                add(n as u64, e.path(), None);
            }
        });
    }

    /// Removes every entry whose path goes through `node` (after
    /// [`drain_counts`](Self::drain_counts): their counts are kept in `retired`
    /// otherwise); returns how many.
    pub fn remove_through(&mut self, node: usize) -> u64 {
        let mut n = 0;
        self.for_each_live(|t, w| {
            if t.hot(w).path().iter().any(|s| s.node() == node) {
                t.remove(w);
                n += 1;
            }
        });
        n
    }

    /// Removes every entry (their counts go to `retired`); returns how many.
    pub fn clear(&mut self) -> u64 {
        let n = self.live as u64;
        self.for_each_live(|t, w| t.remove(w));
        n
    }

    /// Empties way `w`; hits it had not added go to `retired`.
    pub fn remove(&mut self, w: Way) {
        let i = w.0 as usize;
        let t = &mut self.tags[i / WAYS].0[i % WAYS];
        if *t != 0 {
            *t = 0;
            self.live -= 1;
            self.retire(w);
        }
    }

    #[inline]
    fn retire(&mut self, w: Way) {
        let e = self.hot(w);
        let fold = self.period != 0 && e.steps[MARK_STEP].shape == self.period;
        if !e.refusal() && (e.count > 0 || fold) {
            self.retired.push(Retired {
                steps: e.steps,
                len: e.path().len() as u8,
                count: e.count,
                fold,
                last_ns: e.last_ns,
            });
        }
    }

    /// Removes the entry for `k`, if any; returns whether there was one.
    pub fn remove_key(&mut self, k: &FpKey) -> bool {
        match self.way(k, self.hash(k)) {
            Some(w) => {
                self.remove(w);
                true
            }
            None => false,
        }
    }

    /// The way of the full set at `base` that an insert of hash `h` at capture time `now`
    /// replaces: one idle past the timeout (its flow is gone), else one of the ways with
    /// no hit since they were installed, drawn from `h` and `now`, else the least
    /// recently used (by the entry's own `last_ns`, so a hit writes nothing outside the
    /// line it already holds). Plain LRU thrashes a set that more flows share than it
    /// has ways: nine flows taking turns over eight ways each evict the flow that comes
    /// next, so none of them ever hits (the bench's 16,384 flows in 65,536 entries leave
    /// a few such sets, their number changing with each process's hash seeds). Sparing
    /// the ways that hit fixes that: seven of the nine hit. Which way with no hit goes
    /// is drawn rather than the newest (session 26's rule), since the newest thrashes
    /// too: two live flows in a set whose other ways hold entries that never hit (flows
    /// that ended, with no timeout) each evicted the other on every packet (session 32's
    /// CI: 0 hits in 2,550 packets, one process in ~10 by its seeds). A draw removes a
    /// dead entry with a chance of 7 in 8 each time. A remembered refusal counts as hit
    /// (it is only cheap to lose for one packet).
    fn victim(&self, base: usize, h: u64, now: u64) -> Way {
        let ways = (0..WAYS).map(|i| Way((base + i) as u32));
        if self.timeout_ns != 0 {
            let idle = ways
                .clone()
                .find(|&w| now.saturating_sub(self.hot(w).last_ns) > self.timeout_ns);
            if let Some(w) = idle {
                return w;
            }
        }
        let cold = |w: &Way| self.hot(*w).count == 0 && !self.hot(*w).refusal();
        let n = ways.clone().filter(cold).count() as u64;
        if n == 0 {
            return ways
                .min_by_key(|&w| self.hot(w).last_ns)
                .unwrap_or(Way(base as u32));
        }
        // splitmix64's finaliser: every bit of the draw depends on every bit of `h` and
        // `now` (a folded multiply with one fixed operand left the top bits unmoved by
        // `now`, and one seed drew the same way every time). Scaled to 0..n.
        let mut z = (h ^ now).wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        let draw = (((z ^ (z >> 31)) >> 32) * n) >> 32;
        ways.filter(cold)
            .nth(draw as usize)
            .unwrap_or(Way(base as u32))
    }

    /// Installs `e` (replacing an entry of the same key); returns whether another entry
    /// was evicted to make room.
    pub fn insert(&mut self, e: &Entry, keys: &Keys) -> bool {
        self.insert_marked(e, keys, 0)
    }

    /// [`insert`](Self::insert) with fold mark `mark` ([`Table::mark`]; 0: none).
    pub fn insert_marked(&mut self, e: &Entry, keys: &Keys, mark: u8) -> bool {
        self.ready();
        let h = self.hash(&e.key);
        let (set, tag) = self.place(h);
        if self.written[set / 64] >> (set % 64) & 1 == 0 {
            // The set's first insert: its entries are written before any tag is set.
            self.entries.fill_set(set, Hot::EMPTY);
            self.written[set / 64] |= 1 << (set % 64);
        }
        let base = set * WAYS;
        let mut evicted = false;
        let w = match self.way(&e.key, h) {
            Some(w) => {
                self.retire(w);
                w
            }
            None => match (0..WAYS).find(|&i| self.tags[set].0[i] == 0) {
                Some(i) => {
                    self.live += 1;
                    Way((base + i) as u32)
                }
                None => {
                    evicted = true;
                    let w = self.victim(base, h, e.last_ns);
                    self.retire(w);
                    w
                }
            },
        };
        // Only what hits will read is written: the path's steps, the actions when they
        // rewrite or match, the flow keys when a state function may read one. A recording
        // costs mostly these cache misses, and a remembered refusal is the first line.
        let mut hot = Hot::of(e);
        hot.steps[0].shape = self.shape_of(hot.path());
        self.tags[set].0[w.0 as usize - base] = tag;
        let n = e.len as usize;
        let d = self.hot_mut(w);
        (d.key, d.last_ns, d.egress, d.sink) = (hot.key, hot.last_ns, hot.egress, hot.sink);
        (d.min_len, d.len, d.count) = (hot.min_len, hot.len, hot.count);
        d.steps[..n].copy_from_slice(&hot.steps[..n]);
        // The way's last entry may have left a mark.
        d.steps[MARK_STEP].shape = mark;
        if hot.rewrites() || hot.matches_eth() {
            self.actions.write(w, ActionsLine(e.actions));
        }
        if hot.calls() {
            self.keys.write(w, *keys);
        }
        evicted
    }
}

/// The sets' tags, from zeroed memory that is never written here: the pages come when a
/// set is first used, so a table that stays empty costs no clearing. On Unix the memory
/// is an anonymous mapping of its own (zero pages, page aligned): `calloc` serves a block
/// of this size from the heap once a freed larger block has raised its mapping threshold,
/// and then clears it (256 KiB at 65,536 entries, about 30,000 instructions in a trial
/// of `fastpath = "auto"`). Elsewhere `alloc_zeroed`, at 16 bytes' alignment and rounded
/// up to the tags' 32 inside.
struct TagArray {
    /// The first set's tags (32-byte aligned, inside the allocation).
    tags: std::ptr::NonNull<Tags>,
    sets: usize,
    /// The allocation (its start and bytes; None when `sets` is 0).
    alloc: Option<(std::ptr::NonNull<u8>, usize)>,
}

// SAFETY: the array owns its memory, as a `Vec<Tags>` would.
unsafe impl Send for TagArray {}
// SAFETY: as above; shared access only reads.
unsafe impl Sync for TagArray {}

impl TagArray {
    fn zeroed(sets: usize) -> TagArray {
        let align = std::mem::align_of::<Tags>();
        let bytes = sets
            .checked_mul(std::mem::size_of::<Tags>())
            .and_then(|b| b.checked_add(align))
            .expect("FastPath table size");
        if sets == 0 {
            return TagArray {
                tags: std::ptr::NonNull::dangling(),
                sets: 0,
                alloc: None,
            };
        }
        let p = Self::zero_pages(bytes);
        let off = p.align_offset(align);
        // SAFETY: `off` < `align`, and the allocation holds `align` spare bytes, so the
        // `sets` tags from `p + off` lie inside it; zero bytes are empty tags.
        let tags = unsafe { std::ptr::NonNull::new_unchecked(p.add(off) as *mut Tags) };
        TagArray {
            tags,
            sets,
            // SAFETY: `zero_pages` never returns null.
            alloc: Some((unsafe { std::ptr::NonNull::new_unchecked(p) }, bytes)),
        }
    }

    /// `bytes` (> 0) zeroed bytes, not null.
    #[cfg(unix)]
    fn zero_pages(bytes: usize) -> *mut u8 {
        // SAFETY: an anonymous private mapping touches no existing memory.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            std::alloc::handle_alloc_error(Self::layout(bytes));
        }
        p as *mut u8
    }

    #[cfg(not(unix))]
    fn zero_pages(bytes: usize) -> *mut u8 {
        let layout = Self::layout(bytes);
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        if p.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        p
    }

    fn layout(bytes: usize) -> std::alloc::Layout {
        std::alloc::Layout::from_size_align(bytes, 16).expect("FastPath table size")
    }
}

impl std::ops::Deref for TagArray {
    type Target = [Tags];
    #[inline(always)]
    fn deref(&self) -> &[Tags] {
        // SAFETY: `sets` zero-initialised, aligned tags owned by `self` (`zeroed`).
        unsafe { std::slice::from_raw_parts(self.tags.as_ptr(), self.sets) }
    }
}

impl std::ops::DerefMut for TagArray {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut [Tags] {
        // SAFETY: as in `deref`, borrowed mutably through `self`.
        unsafe { std::slice::from_raw_parts_mut(self.tags.as_ptr(), self.sets) }
    }
}

impl Drop for TagArray {
    fn drop(&mut self) {
        if let Some((p, bytes)) = self.alloc {
            // SAFETY: mapped (or allocated) in `zero_pages` with these bytes, released once.
            #[cfg(unix)]
            unsafe {
                libc::munmap(p.as_ptr() as *mut libc::c_void, bytes);
            }
            #[cfg(not(unix))]
            unsafe {
                std::alloc::dealloc(p.as_ptr(), Self::layout(bytes));
            }
        }
    }
}

/// The 128-bit product of `a` and `b`, its halves xored.
#[inline(always)]
fn folded_multiply(a: u64, b: u64) -> u64 {
    let p = (a as u128).wrapping_mul(b as u128);
    (p as u64) ^ (p >> 64) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Entries share a shape exactly when their paths call the same slots, at the same
    /// steps, with the same flags; a path no id can name has none (its hits never fuse).
    #[test]
    fn paths_with_the_same_calls_share_a_shape() {
        let mut t = Table::new(64, 0);
        let step = |node, slot, flags| {
            let mut s = Step::new(node, 0, flags);
            s.slot = slot;
            s
        };
        let nat = step(1, 0, Step::CHECK | Step::STATE);
        let filter = step(2, 1, Step::COUNT);
        let monitor = step(3, 2, Step::STATE);
        let a = t.shape_of(&[nat, filter, monitor]);
        assert_eq!(a, 1);
        // Another flow's tokens and verdicts, the same calls: the same shape.
        let mut nat2 = nat;
        nat2.token = 99;
        assert_eq!(t.shape_of(&[nat2, filter, monitor]), a);
        assert_eq!(
            t.shape(a),
            u64::from(SHAPE_CALL | 3 << 4) | u64::from(SHAPE_CALL | 2 << 4 | 2) << 16
        );
        // The monitor one step later, or with other flags: other shapes.
        assert_eq!(t.shape_of(&[nat, filter, filter, monitor]), 2);
        assert_eq!(t.shape_of(&[step(1, 0, Step::STATE), filter, monitor]), 3);
        // No call: 0; a slot a shape cannot name: none.
        assert_eq!(t.shape_of(&[filter, filter]), 0);
        assert_eq!(t.shape(0), 0);
        assert_eq!(t.shape_of(&[step(1, 16, Step::STATE)]), NO_SHAPE);
        // Past the last id: none, and the named ones keep theirs.
        for slot in 0..16u8 {
            for f in 1..4u8 {
                for at in 0..6 {
                    let mut p = [filter; 6];
                    p[at] = step(1, slot, f);
                    t.shape_of(&p);
                }
            }
        }
        assert_eq!(
            t.shape_of(&[step(9, 15, Step::STATE), step(9, 15, Step::STATE)]),
            NO_SHAPE
        );
        assert_eq!(t.shape_of(&[nat, filter, monitor]), a);
    }

    /// The tags come zeroed (empty) and each set's in one aligned half line, whatever
    /// alignment the allocator gave.
    #[test]
    fn tags_are_zero_and_aligned_to_half_a_line() {
        for sets in [0, 1, 3, 8192] {
            let t = TagArray::zeroed(sets);
            assert_eq!(t.len(), sets);
            assert!(t.iter().all(|s| s.0 == [0; WAYS]));
            assert_eq!(t.as_ptr() as usize % 32, 0, "{sets} sets");
        }
        let mut t = TagArray::zeroed(4);
        t[3].0[7] = 9;
        assert_eq!(t[3].0[7], 9);
        let mut t = Table::new(8, 0);
        assert_eq!(t.tags.len(), 0, "allocated when first used");
        t.ready();
        assert_eq!(t.tags.len(), 1);
    }

    /// A hot entry is a header line, then the path (four steps a line); steps stay 16
    /// bytes.
    #[test]
    fn a_hit_reads_two_lines_for_up_to_four_nfs() {
        assert_eq!(std::mem::size_of::<Step>(), 16);
        assert_eq!(std::mem::offset_of!(Hot, steps), 64);
        assert_eq!(std::mem::size_of::<Hot>(), 192);
        assert_eq!(std::mem::size_of::<ActionsLine>(), 64);
        assert!(MAX_PATH < LEN as usize);
        let s = Step::new(MAX_NODES - 1, MAX_KEYS as u8 - 1, Step::COUNT);
        assert_eq!(
            (s.node(), s.key_index(), s.flags),
            (MAX_NODES - 1, MAX_KEYS - 1, Step::COUNT)
        );
    }

    #[test]
    fn hot_entries_keep_what_a_hit_needs() {
        let mut e = Entry::EMPTY;
        e.len = 3;
        e.sink = Some(5);
        e.egress = 2;
        let h = Hot::of(&e);
        assert_eq!(
            (h.path().len(), h.sink(), h.rewrites(), h.matches_eth()),
            (3, Some(5), false, false)
        );
        e.sink = None;
        assert_eq!(Hot::of(&e).sink(), None);
    }

    /// A probe's matching ways serve the lookup until an insert: it finds what `way`
    /// finds, and a way emptied after it is seen by `live`.
    #[test]
    fn a_probe_finds_what_way_finds_and_removals_show_in_live() {
        let mut t = Table::new(64, 0);
        let keys: Vec<FpKey> = (0..48).map(FpKey::numbered).collect();
        for k in &keys {
            let mut e = Entry::EMPTY;
            (e.key, e.len) = (*k, 1);
            t.insert(&e, &Keys::EMPTY);
        }
        let probes: Vec<Probe> = keys.iter().map(|k| t.probe(t.hash(k), false)).collect();
        for (k, p) in keys.iter().zip(&probes) {
            assert_eq!(t.way_in(*p, k), t.way(k, t.hash(k)));
        }
        let found = keys
            .iter()
            .filter(|k| t.way(k, t.hash(k)).is_some())
            .count();
        assert_eq!(found, t.len());
        assert!(found > 0);
        let (k, p) = keys
            .iter()
            .zip(&probes)
            .find(|(k, _)| t.way(k, t.hash(k)).is_some())
            .unwrap();
        let w = t.way_in(*p, k).unwrap();
        assert!(t.live(w));
        t.remove_key(k);
        assert!(!t.live(w));
        assert_eq!(t.way(k, t.hash(k)), None);
        assert_eq!(t.way_in(Probe::NONE, k), None);
    }

    /// Tables (each with its own hash seeds) an eviction test tries.
    const TRIALS: u64 = 64;

    /// Session 26: nine flows taking turns over a set of eight ways. LRU eviction made
    /// every packet a miss (each insert evicts the flow that comes next); an entry with
    /// no hit is evicted instead, so once seven flows have hit they keep their ways and
    /// seven of the nine hit every round (session 33's draw among those with no hit takes a
    /// few rounds to get there where the newest did in one). An entry idle past
    /// the timeout goes first, before any that still hits.
    #[test]
    fn a_set_shared_by_more_flows_than_ways_does_not_thrash() {
        let keys: Vec<FpKey> = (0..WAYS as u64 + 1).map(FpKey::numbered).collect();
        for trial in 0..TRIALS {
            let mut t = Table::new(WAYS, 0);
            t.ready();
            let mut now = trial << 20;
            let mut hits = [0; 16];
            for h in &mut hits {
                for k in &keys {
                    now += 1;
                    match t.find(k, t.hash(k), now) {
                        Found::Hit(w) => {
                            t.hit(w, now);
                            *h += 1;
                        }
                        _ => {
                            let mut e = Entry::EMPTY;
                            (e.key, e.len, e.last_ns) = (*k, 1, now);
                            t.insert(&e, &Keys::EMPTY);
                        }
                    }
                }
            }
            assert_eq!(hits[0], 0);
            // Three flows over two ways with no hit leave the draw a chance of 1 in 2 a
            // miss to let one of them hit: still short of seven at round 12 is 1 in 2^30.
            assert_eq!(hits[12..], [7; 4], "trial {trial}: {hits:?}");
        }
        // With a timeout, an idle entry is the one replaced, even one that hit.
        let mut t = Table::new(WAYS, 100);
        t.ready();
        for (i, k) in keys[..WAYS].iter().enumerate() {
            let mut e = Entry::EMPTY;
            (e.key, e.len, e.last_ns) = (*k, 1, if i == 3 { 1 } else { 150 });
            t.insert(&e, &Keys::EMPTY);
            let w = t.way(k, t.hash(k)).unwrap();
            t.hit(w, e.last_ns);
        }
        let mut e = Entry::EMPTY;
        (e.key, e.len, e.last_ns) = (keys[WAYS], 1, 200);
        assert!(t.insert(&e, &Keys::EMPTY));
        assert_eq!(t.way(&keys[3], t.hash(&keys[3])), None, "the idle one went");
        assert_eq!(t.len(), WAYS);
    }

    /// Session 33: seven entries that never hit (flows that ended, no timeout) and two
    /// live flows taking turns over one set of eight ways. Evicting the newest way with
    /// no hit made each live flow evict the other on every packet: no hit ever. A draw
    /// among the ways with no hit removes a dead one with a chance of 7 in 8 a miss, and
    /// once both live flows have hit they keep their ways.
    #[test]
    fn two_live_flows_among_dead_entries_do_not_evict_each_other() {
        let keys: Vec<FpKey> = (0..WAYS as u64 + 1).map(FpKey::numbered).collect();
        for round in 0..TRIALS {
            let mut t = Table::new(WAYS, 0);
            t.ready();
            let mut now = round << 20;
            for k in &keys[..WAYS - 1] {
                now += 1;
                let mut e = Entry::EMPTY;
                (e.key, e.len, e.last_ns) = (*k, 1, now);
                t.insert(&e, &Keys::EMPTY);
            }
            let mut hits = 0;
            for _ in 0..20 {
                for k in &keys[WAYS - 1..] {
                    now += 1;
                    match t.find(k, t.hash(k), now) {
                        Found::Hit(w) => {
                            t.hit(w, now);
                            hits += 1;
                        }
                        _ => {
                            let mut e = Entry::EMPTY;
                            (e.key, e.len, e.last_ns) = (*k, 1, now);
                            t.insert(&e, &Keys::EMPTY);
                        }
                    }
                }
            }
            // Each miss after the first two draws the other live flow 1 time in 8:
            // fewer than 30 hits of 40 is ten such draws in a row, (1/8)^10 a table.
            assert!(hits >= 30, "round {round}: {hits} hits of 40");
            assert_eq!(t.len(), WAYS);
        }
    }

    /// A table is allocated untouched: a set is written on its first insert, and the
    /// walks over written sets (counts, removal through an NF, clearing) see every entry.
    #[test]
    fn sets_are_written_on_first_use_and_walks_find_every_entry() {
        let mut t = Table::new(1 << 16, 0);
        let written = |t: &Table| t.written.iter().map(|b| b.count_ones()).sum::<u32>();
        assert_eq!(written(&t), 0);
        let keys: Vec<FpKey> = (0..100).map(FpKey::numbered).collect();
        for (i, k) in keys.iter().enumerate() {
            let mut e = Entry::EMPTY;
            (e.key, e.len) = (*k, 1);
            e.steps[0] = Step::new(i % 2 + 1, 0, Step::COUNT);
            assert!(!t.insert(&e, &Keys::EMPTY));
        }
        let sets: std::collections::BTreeSet<usize> =
            keys.iter().map(|k| t.place(t.hash(k)).0).collect();
        assert_eq!(written(&t) as usize, sets.len());
        for k in &keys {
            let w = t.way(k, t.hash(k)).expect("installed");
            t.hit(w, 1);
        }
        let mut counted = 0;
        t.drain_counts(|n, _, _| counted += n);
        assert_eq!(counted, 100);
        assert_eq!(t.remove_through(1), 50);
        assert_eq!(t.len(), 50);
        assert_eq!(t.clear(), 50);
        assert!(t.is_empty());
        assert!(keys.iter().all(|k| t.way(k, t.hash(k)).is_none()));
    }
}
