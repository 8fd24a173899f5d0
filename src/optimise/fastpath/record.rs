//! Recording a flow's first packet on the slow path: a copy of the packet as it entered,
//! then per NF the flow key it saw, its verdict and its token; at the end the net
//! header actions, checked by replaying them on the copy.

use super::actions::{step_sums, Actions, Sums, WINDOW};
use super::key::FpKey;
use super::table::{Entry, Keys, Step, MAX_KEYS, MAX_NODES, MAX_PATH};
use crate::flow::FlowKey;
use crate::packet::{FastMark, Packet, Verdict, MAX_BATCH, NOT_RECORDED};

/// How a recording ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Still going through the chain.
    Open,
    /// Ready to install.
    Done,
    /// An NF on the path refused (or never answered) for this flow.
    Refused,
    /// The net rewrite cannot be expressed as consolidated actions.
    Unfit,
}

pub struct Record {
    pub entry: Entry,
    pub keys: Keys,
    /// The first bytes as the current NF got them, and the checksum terms so far.
    stage: [u8; WINDOW],
    stage_len: usize,
    /// No NF that may write ran since the last flow key was taken: it still holds.
    key_fresh: bool,
    sums: Sums,
    /// The packet as it entered the chain (`has_orig`: this recording has one). The
    /// slot's own bytes, grown to the longest packet it recorded: never zeroed, never a
    /// pool buffer.
    orig: Vec<u8>,
    has_orig: bool,
    pub outcome: Outcome,
}

pub struct Recorder {
    /// Made one slot at a time as recordings first need them (`fastpath = "auto"` may
    /// never record; a trial of it often records a few at once).
    recs: Vec<Record>,
    n: usize,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}

impl Recorder {
    pub fn new() -> Recorder {
        Recorder {
            recs: Vec::new(),
            n: 0,
        }
    }

    /// Recordings at once at most (each holds a copy of its packet, at most the run's
    /// largest packet: memory bounded by this times the largest packet).
    pub const BUFFERS: usize = MAX_BATCH;

    /// One more slot, when the recordings at once first reach this many.
    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        self.recs.push(Record {
            entry: Entry::EMPTY,
            keys: Keys::EMPTY,
            stage: [0; WINDOW],
            stage_len: 0,
            key_fresh: false,
            sums: Sums::default(),
            // Room for a common packet at once: a slot grows again only for a longer one.
            orig: Vec::with_capacity(2048),
            has_orig: false,
            outcome: Outcome::Open,
        });
    }

    pub fn active(&self) -> bool {
        self.n > 0
    }

    /// Starts recording `p` (key `key`) with a copy of its bytes; without a free slot the
    /// packet simply goes unrecorded.
    pub fn begin(&mut self, p: &mut Packet, key: FpKey) {
        p.meta_mut().fast_rec = NOT_RECORDED;
        if self.n >= Self::BUFFERS {
            return;
        }
        if self.n == self.recs.len() {
            self.grow();
        }
        let r = &mut self.recs[self.n];
        r.orig.clear();
        r.orig.extend_from_slice(p.data());
        r.has_orig = true;
        // Only what a recording reads before it writes it (the entry is large).
        let e = &mut r.entry;
        e.key = key;
        e.last_ns = p.meta().now_ns;
        e.len = 0;
        r.keys.n = 0;
        e.sink = None;
        e.egress = 0;
        e.actions = Actions::NONE;
        r.key_fresh = false;
        r.outcome = Outcome::Open;
        r.sums = Sums::default();
        p.meta_mut().fast_rec = self.n as u8;
        self.n += 1;
    }

    #[inline]
    fn rec(&mut self, p: &Packet) -> Option<&mut Record> {
        let i = p.meta().fast_rec;
        if i == NOT_RECORDED {
            return None;
        }
        self.recs
            .get_mut(i as usize)
            .filter(|r| r.outcome == Outcome::Open)
    }

    /// Before NF `node` (what a hit does for it: `flags`; lent at `slot`) runs on `p`:
    /// `consolidable` says
    /// whether the NF can be skipped at all, `writes` whether it may change any byte (else
    /// its checksum terms are not summed and the flow key after it is the one before).
    pub fn before(
        &mut self,
        node: usize,
        flags: u8,
        slot: u8,
        consolidable: bool,
        writes: bool,
        p: &mut Packet,
    ) {
        if p.meta().fast_rec == NOT_RECORDED {
            return;
        }
        let l = p.layers();
        let fresh = self.rec(p).is_some_and(|r| r.key_fresh && r.keys.n > 0);
        let key = if fresh {
            None
        } else {
            FlowKey::from_packet(&l, p.data())
        };
        let Some(r) = self.rec(p) else { return };
        let (e, keys) = (&mut r.entry, &mut r.keys);
        if !(consolidable && (e.len as usize) < MAX_PATH && node < MAX_NODES) {
            r.outcome = Outcome::Refused;
            return;
        }
        let k = if fresh {
            keys.n - 1
        } else {
            let Some(key) = key else {
                r.outcome = Outcome::Refused;
                return;
            };
            match keys.n.checked_sub(1) {
                Some(last) if keys.keys[last as usize] == key => last,
                _ if (keys.n as usize) < MAX_KEYS => {
                    keys.keys[keys.n as usize] = key;
                    keys.n += 1;
                    keys.n - 1
                }
                _ => {
                    r.outcome = Outcome::Unfit;
                    return;
                }
            }
        };
        let mut step = Step::new(node, k, flags);
        step.slot = slot;
        e.steps[e.len as usize] = step;
        e.len += 1;
        r.key_fresh = !writes;
        if writes {
            let d = p.data();
            r.stage_len = d.len().min(WINDOW);
            r.stage[..r.stage_len].copy_from_slice(&d[..r.stage_len]);
        }
        p.meta_mut().fast = FastMark::Want;
    }

    /// After the NF ran: `verdict` is what the runtime counted (output index or drop).
    pub fn after(&mut self, p: &mut Packet, verdict: Verdict, writes: bool) {
        let mark = std::mem::take(&mut p.meta_mut().fast);
        let l = p.layers();
        let Some(r) = self.rec(p) else { return };
        if writes {
            let d = p.data();
            r.sums.add(step_sums(
                &r.stage[..r.stage_len],
                &d[..r.stage_len.min(d.len())],
                &l,
            ));
        }
        let e = &mut r.entry;
        let Some(s) = e.len.checked_sub(1).map(|i| &mut e.steps[i as usize]) else {
            return;
        };
        match mark {
            FastMark::Token(t) => {
                s.token = t;
                s.verdict = verdict;
                if let Verdict::Drop(_) = verdict {
                    e.sink = None;
                    r.outcome = Outcome::Done;
                }
            }
            _ => r.outcome = Outcome::Refused,
        }
    }

    /// The packet reached sink `node`: the net actions are what changed since it entered.
    /// `writes_eth[n]`: node n may rewrite an Ethernet address.
    pub fn at_sink(&mut self, node: usize, p: &mut Packet, writes_eth: &[bool]) {
        let l = p.layers();
        let Some(r) = self.rec(p) else { return };
        let match_eth = r
            .entry
            .path()
            .iter()
            .any(|s| writes_eth.get(s.node()).copied().unwrap_or(true));
        if !r.has_orig {
            return;
        }
        let orig = &mut r.orig;
        r.entry.sink = Some(node as u16);
        r.entry.egress = p.meta().egress;
        r.outcome = match Actions::between(orig, p.data(), &l, match_eth, r.sums) {
            Ok(a) => {
                // Replayed on the copy, the actions must give exactly the chain's bytes.
                a.apply(orig);
                if orig[..] == *p.data() {
                    r.entry.actions = a;
                    Outcome::Done
                } else {
                    Outcome::Unfit
                }
            }
            Err(_) => Outcome::Unfit,
        };
    }

    /// Ends the recordings: each finished one is handed to `install` with its outcome.
    pub fn finish(&mut self, mut install: impl FnMut(&Entry, &Keys, Outcome)) {
        for r in &mut self.recs[..self.n] {
            r.has_orig = false;
            install(&r.entry, &r.keys, r.outcome);
        }
        self.n = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::Pool;

    /// A recorder holds nothing until it records (`fastpath = "auto"` that stays off
    /// never pays for it), then one slot per recording at once, each with its own copy
    /// of the packet as it entered; slots are reused, and at most [`Recorder::BUFFERS`]
    /// recordings run at once (the rest go unrecorded).
    #[test]
    fn slots_are_made_as_recordings_need_them() {
        let mut r = Recorder::new();
        assert_eq!(r.recs.len(), 0);
        let mut pool = Pool::new(Recorder::BUFFERS + 1, 1514);
        let frame: Vec<u8> = (0..60u8).collect();
        let mut packets: Vec<Packet> = (0..Recorder::BUFFERS + 1)
            .map(|_| {
                let mut p = pool.alloc().unwrap();
                assert!(p.set_bytes(&frame));
                p
            })
            .collect();
        for (i, p) in packets.iter_mut().take(3).enumerate() {
            r.begin(p, FpKey::numbered(i as u64));
            assert_eq!(p.meta().fast_rec, i as u8);
        }
        assert_eq!(r.recs.len(), 3);
        assert_eq!(r.recs[2].orig, frame);
        let mut done = 0;
        r.finish(|_, _, _| done += 1);
        assert_eq!((done, r.recs.len(), r.active()), (3, 3, false));
        for (i, p) in packets.iter_mut().enumerate() {
            r.begin(p, FpKey::numbered(i as u64));
        }
        assert_eq!(r.recs.len(), Recorder::BUFFERS);
        assert_eq!(packets[Recorder::BUFFERS].meta().fast_rec, NOT_RECORDED);
        r.finish(|_, _, _| {});
        for p in packets {
            pool.free(p);
        }
    }
}
