//! Recording a flow's first packet on the slow path: a copy of the packet as it entered,
//! then per NF the flow key it saw, its verdict and its token; at the end the net
//! header actions, checked by replaying them on the copy.

use super::actions::{step_sums, Actions, Sums, WINDOW};
use super::key::FpKey;
use super::table::{Entry, Keys, Step, MAX_KEYS, MAX_NODES, MAX_PATH};
use crate::flow::FlowKey;
use crate::packet::{FastMark, Packet, Pool, Verdict, MAX_BATCH, NOT_RECORDED};

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
    /// The packet as it entered the chain (a pool buffer).
    orig: Option<Packet>,
    pub outcome: Outcome,
}

pub struct Recorder {
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
            recs: (0..MAX_BATCH)
                .map(|_| Record {
                    entry: Entry::EMPTY,
                    keys: Keys::EMPTY,
                    stage: [0; WINDOW],
                    stage_len: 0,
                    key_fresh: false,
                    sums: Sums::default(),
                    orig: None,
                    outcome: Outcome::Open,
                })
                .collect(),
            n: 0,
        }
    }

    /// Buffers a recording needs at most at once (taken from the runner's pool).
    pub const BUFFERS: usize = MAX_BATCH;

    pub fn active(&self) -> bool {
        self.n > 0
    }

    /// Starts recording `p` (key `key`) with a copy of its bytes; without a free slot or
    /// buffer the packet simply goes unrecorded.
    pub fn begin(&mut self, p: &mut Packet, key: FpKey, pool: &mut Pool) {
        p.meta_mut().fast_rec = NOT_RECORDED;
        if self.n >= self.recs.len() {
            return;
        }
        let Some(mut copy) = pool.alloc_for(p.len()) else {
            return;
        };
        copy.set_bytes(p.data());
        copy.meta_mut().link = p.meta().link;
        let r = &mut self.recs[self.n];
        // Only what a recording reads before it writes it (the entry is large).
        let e = &mut r.entry;
        e.key = key;
        e.last_ns = p.meta().now_ns;
        e.len = 0;
        r.keys.n = 0;
        e.sink = None;
        e.egress = 0;
        e.actions = Actions::NONE;
        r.orig = Some(copy);
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
        let Some(orig) = r.orig.as_mut() else { return };
        r.entry.sink = Some(node as u16);
        r.entry.egress = p.meta().egress;
        r.outcome = match Actions::between(orig.data(), p.data(), &l, match_eth, r.sums) {
            Ok(a) => {
                // Replayed on the copy, the actions must give exactly the chain's bytes.
                a.apply(orig.data_mut());
                if orig.data() == p.data() {
                    r.entry.actions = a;
                    Outcome::Done
                } else {
                    Outcome::Unfit
                }
            }
            Err(_) => Outcome::Unfit,
        };
    }

    /// Ends the recordings: buffers go back to the pool and each finished one is handed
    /// to `install` with its outcome.
    pub fn finish(&mut self, pool: &mut Pool, mut install: impl FnMut(&Entry, &Keys, Outcome)) {
        for r in &mut self.recs[..self.n] {
            if let Some(o) = r.orig.take() {
                pool.free(o);
            }
            install(&r.entry, &r.keys, r.outcome);
        }
        self.n = 0;
    }
}
