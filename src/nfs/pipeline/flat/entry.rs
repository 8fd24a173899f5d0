//! A link entry's learning step (an L2 switch's `learn T(eth.src) -> output in_port;
//! goto T;` at its header's start) run on the packet's bytes, before the packet's run
//! state is made: the header starts at byte 0, so its fields are at fixed offsets and
//! need no decoder offsets. A packet whose lookup ends it (an output, a flood, a drop)
//! costs no more; one that goes on (a miss block, a `goto`) or whose fields are near its
//! end is handed to the instruction loop, which sees the same state as if it had run
//! the step itself.

use super::Flat;
use crate::flow::{LearnTable, Learned};
use crate::nfs::pipeline::plan::{Bytes, Pkt, State};
use crate::nfs::pipeline::table::{Act, Counts, StepKey};
use crate::packet::{Meta, Packet, FLOOD, MAX_BATCH};

/// What the entry's step did with a packet.
pub enum Early {
    /// The packet ended: its drop reason, if dropped.
    End(Option<u8>),
    /// The step ran; the loop goes on at this instruction with the entry's header
    /// entered (two steps counted).
    Loop(usize),
    /// Not run: the packet runs whole (no entry for its link, or cut short, or a field
    /// near its end).
    Whole,
}

/// A chunk's step keys, read once by [`Flat::entry_keys`]: per packet, the learned key
/// (masked) and the key looked up, for the packets whose bit is set.
pub struct Keys {
    pub(super) k: [(u64, u64); MAX_BATCH],
    /// Their hashes, on the typed path (see [`Flat::entry_chunk`]).
    pub(super) h: [(u64, u64); MAX_BATCH],
    ok: u32,
    /// On the IPv4 chunk (see `ipv4.rs`): the packets that reach the step, whose keys
    /// `k` holds in the same order, and the others with their outcome.
    pub(super) at: [u8; MAX_BATCH],
    pub(super) other: [(u8, u16); MAX_BATCH],
}

impl Default for Keys {
    fn default() -> Self {
        Keys {
            k: [(0, 0); MAX_BATCH],
            h: [(0, 0); MAX_BATCH],
            ok: 0,
            at: [0; MAX_BATCH],
            other: [(0, 0); MAX_BATCH],
        }
    }
}

impl Flat {
    /// A chunk's first pass: each packet's step keys, read where its entry's header
    /// starts (none: no entry for its link, cut short, or a field near its end), and their
    /// slots prefetched when the table is large (see [`Flat::prefetch`]).
    #[inline(always)]
    pub fn entry_keys(&self, s: &State, chunk: &[Packet], keys: &mut Keys) {
        let fetch = self
            .entry
            .iter()
            .flatten()
            .any(|e| s.tables[e.step.table as usize].worth_prefetching());
        keys.ok = 0;
        for (i, (pk, k)) in chunk.iter().zip(keys.k.iter_mut()).enumerate() {
            if let Some((st, key, look)) = self.step_keys(pk) {
                *k = (key, look);
                keys.ok |= 1 << (i % MAX_BATCH);
                if fetch {
                    s.tables[st.table as usize].prefetch(key as u128, look as u128);
                }
            }
        }
    }

    /// A packet's entry step and its two keys (the learned one masked), read at their
    /// fixed offsets from byte 0; `None`: no entry for its link, cut short, or a field
    /// near its end.
    #[inline(always)]
    pub(super) fn step_keys(&self, pk: &Packet) -> Option<(&super::Step, u64, u64)> {
        let e = self.entry[pk.meta().link as usize % 4].as_ref()?;
        let d = pk.data();
        if e.len as usize > d.len() {
            return None;
        }
        let st = &e.step;
        Some((st, st.src.peek(d, 0)? & st.mask, st.dst.peek(d, 0)?))
    }

    /// The entry's step for packet `i` of the chunk whose keys are `keys`, on its meta.
    #[inline(always)]
    pub fn entry_step(&self, s: &mut State, m: &mut Meta, keys: &Keys, i: usize) -> Early {
        if keys.ok & (1 << (i % MAX_BATCH)) == 0 {
            return Early::Whole;
        }
        let Some(e) = &self.entry[m.link as usize % 4] else {
            return Early::Whole;
        };
        let (k, look) = keys.k[i % MAX_BATCH];
        let t = e.step.table as usize;
        let act = Act::Output(m.in_port);
        match s.tables[t].learn_lookup(k as u128, act, look as u128, m.now_ns) {
            Some(Act::Output(port)) => m.egress = port,
            Some(Act::Flood) => m.egress = FLOOD,
            Some(Act::Drop(r)) => return Early::End(Some(r)),
            Some(Act::Pass) => {}
            Some(Act::Goto(to)) => return Early::Loop(self.apply[to as usize] as usize),
            None => match &self.miss_end[t] {
                Some(end) => return Early::End(end.end(&mut s.counters, m, None)),
                None => return Early::Loop(self.miss[t] as usize),
            },
        }
        Early::End(None)
    }

    /// Enters the header of a packet [`Flat::entry_step`] sent to the loop, as the
    /// step's `match link` arm did.
    #[inline(always)]
    pub fn entered<D: Bytes>(&self, p: &mut Pkt<D>) {
        if let Some(e) = &self.entry[p.m.link as usize % 4] {
            p.fit(e.dec as usize, 0, e.len as usize);
            p.cur = e.len as usize;
        }
    }
}

impl Flat {
    /// A chunk through the entry's step: packets it ends are done here; `rest` runs each
    /// other one (`Early::Loop` or `Early::Whole`) and sets its verdict. When every entry
    /// steps one quick table, the step is typed by the table's key width, chosen once
    /// per chunk (no dispatch on the width per packet, keys hashed once).
    #[inline(always)]
    pub fn entry_chunk(
        &self,
        s: &mut State,
        chunk: &mut [Packet],
        keys: &mut Keys,
        rest: impl FnMut(&mut State, &mut Packet, Early),
    ) {
        let bits = self
            .entry_table
            .and_then(|t| s.tables[t as usize].quick_bits());
        match bits {
            Some(32) => self.typed_chunk::<u32>(s, chunk, keys, rest),
            Some(64) => self.typed_chunk::<u64>(s, chunk, keys, rest),
            Some(128) => self.typed_chunk::<u128>(s, chunk, keys, rest),
            _ => {
                self.entry_keys(s, chunk, keys);
                self.untyped_from(s, chunk, keys, 0, rest);
            }
        }
    }

    /// Packets `from..` of the chunk, the step dispatching per packet.
    #[inline(always)]
    fn untyped_from(
        &self,
        s: &mut State,
        chunk: &mut [Packet],
        keys: &Keys,
        from: usize,
        mut rest: impl FnMut(&mut State, &mut Packet, Early),
    ) {
        for (i, pk) in chunk.iter_mut().enumerate().skip(from) {
            match self.entry_step(s, pk.split_meta().0, keys, i) {
                Early::End(Some(r)) => pk.drop_with(r),
                Early::End(None) => {}
                e => rest(s, pk, e),
            }
        }
    }

    #[inline(always)]
    fn typed_chunk<K: StepKey>(
        &self,
        s: &mut State,
        chunk: &mut [Packet],
        keys: &mut Keys,
        mut rest: impl FnMut(&mut State, &mut Packet, Early),
    ) {
        let t = self.entry_table.unwrap_or(0) as usize;
        let fetch = s.tables[t].worth_prefetching();
        let Some((tab, _)) = K::typed(&mut s.tables[t]) else {
            self.entry_keys(s, chunk, keys);
            return self.untyped_from(s, chunk, keys, 0, rest);
        };
        self.typed_keys(tab, fetch, chunk, keys);
        let mut i = 0;
        while i < chunk.len() {
            let State { tables, counters } = &mut *s;
            // The table stays quick while packets run (only `ctl` adds fixed entries);
            // if not, the rest of the chunk dispatches per packet.
            let Some((tab, c)) = K::typed(&mut tables[t]) else {
                return self.untyped_from(s, chunk, keys, i, rest);
            };
            let (j, e) = self.typed_run(tab, c, counters, t, chunk, keys, i);
            let Some(pk) = chunk.get_mut(j) else {
                return;
            };
            rest(s, pk, e);
            i = j + 1;
        }
    }

    /// [`Flat::entry_keys`] with the keys' hashes, for one typed table.
    #[inline(always)]
    fn typed_keys<K: StepKey>(
        &self,
        tab: &LearnTable<K, Act>,
        fetch: bool,
        chunk: &[Packet],
        keys: &mut Keys,
    ) {
        keys.ok = 0;
        let kh = keys.k.iter_mut().zip(keys.h.iter_mut());
        for (i, (pk, (k, h))) in chunk.iter().zip(kh).enumerate() {
            if let Some((_, key, look)) = self.step_keys(pk) {
                *k = (key, look);
                *h = (tab.hash(&K::of(key)), tab.hash(&K::of(look)));
                keys.ok |= 1 << (i % MAX_BATCH);
                if fetch {
                    tab.prefetch(h.0);
                    tab.prefetch(h.1);
                }
            }
        }
    }

    /// The typed step for packets `from..` until one that does not end in it: its index
    /// and what it needs (the chunk's length: all ended).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn typed_run<K: StepKey>(
        &self,
        tab: &mut LearnTable<K, Act>,
        c: Counts,
        counters: &mut [(String, u64)],
        t: usize,
        chunk: &mut [Packet],
        keys: &Keys,
        from: usize,
    ) -> (usize, Early) {
        let mut tally = Tally::default();
        let mut out = (chunk.len(), Early::End(None));
        for (i, pk) in chunk.iter_mut().enumerate().skip(from) {
            if keys.ok & (1 << (i % MAX_BATCH)) == 0 {
                out = (i, Early::Whole);
                break;
            }
            if let Err(to) = self.typed_step(tab, counters, t, pk, keys, i % MAX_BATCH, &mut tally)
            {
                out = (i, Early::Loop(to));
                break;
            }
        }
        tally.add_to(c);
        out
    }

    /// One packet's typed step, its keys and hashes in slot `slot` of `keys`: learn the
    /// source, look up the destination and act on what is found (an output, a flood, a
    /// drop, a fixed miss ending), counting in `tally`. `Err` with the instruction where
    /// the loop takes the packet over: a `goto` entry, a miss block that goes on.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(super) fn typed_step<K: StepKey>(
        &self,
        tab: &mut LearnTable<K, Act>,
        counters: &mut [(String, u64)],
        t: usize,
        pk: &mut Packet,
        keys: &Keys,
        slot: usize,
        tally: &mut Tally,
    ) -> Result<(), usize> {
        let m = pk.split_meta().0;
        let (k, look) = keys.k[slot];
        let (hk, hl) = keys.h[slot];
        let act = Act::Output(m.in_port);
        tally.full += (tab.learn_with_hash(K::of(k), hk, act, m.now_ns) == Learned::Full) as u64;
        let r = match tab.get_with_hash(&K::of(look), hl, m.now_ns) {
            // What this step learns, so nearly every hit: tested first, one predicted
            // branch instead of the match's jump through a table.
            Some(Act::Output(port)) => {
                tally.hits += 1;
                m.egress = port;
                None
            }
            Some(a) => {
                tally.hits += 1;
                match a {
                    Act::Output(port) => {
                        m.egress = port;
                        None
                    }
                    Act::Flood => {
                        m.egress = FLOOD;
                        None
                    }
                    Act::Drop(r) => Some(r),
                    Act::Pass => None,
                    Act::Goto(to) => return Err(self.apply[to as usize] as usize),
                }
            }
            None => {
                tally.misses += 1;
                match &self.miss_end[t] {
                    Some(end) => end.end(counters, m, None),
                    None => return Err(self.miss[t] as usize),
                }
            }
        };
        if let Some(r) = r {
            pk.drop_with(r);
        }
        Ok(())
    }
}

/// A typed run's table counts, kept in registers and added to the table's once a run.
#[derive(Default)]
pub(super) struct Tally {
    hits: u64,
    misses: u64,
    full: u64,
}

impl Tally {
    #[inline(always)]
    pub(super) fn add_to(&self, c: Counts) {
        *c.hits += self.hits;
        *c.misses += self.misses;
        *c.full += self.full;
    }
}

#[cfg(test)]
mod tests {
    use crate::nfs::pipeline::nf::compile;
    use crate::packet::{Batch, LinkKind, Packet, Verdict};

    fn frame(dst: u8, src: u8) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[5] = dst;
        f[11] = src;
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f
    }

    /// The typed step hands a packet whose miss goes on (`count; goto`) and a frame cut
    /// short to the loop in the middle of a chunk, and goes on typed after them: each
    /// packet's verdict and the counters are the program's.
    #[test]
    fn typed_step_hands_misses_and_short_frames_to_the_loop_mid_chunk() {
        let src = "drops not_ethernet, unknown;
            layout ethernet { dst: 48; src: 48; type: 16; }
            table mac { key eth.dst exact; capacity 64; miss { count seen; goto kind; } }
            table kind { key eth.type exact; capacity 4; miss { count other; drop unknown; } }
            decoder eth: ethernet {
              extract dst, src, type;
              short { drop not_ethernet; }
              learn mac(eth.src) -> output in_port;
              goto mac;
            }
            start { match link { ethernet => next eth; _ => drop not_ethernet; } }";
        let mut c = compile("t.stv", src, &Default::default()).expect("compiles");
        assert_eq!(c.plan.state.tables[0].quick_bits(), Some(64), "typed path");
        // (bytes, in_port): A on 1 to B (miss), B on 2 to A (hit), a cut frame, A to B
        // (hit), C on 3 to D (miss).
        let ins = [
            (frame(0xb, 0xa), 1),
            (frame(0xa, 0xb), 2),
            (vec![0u8; 10], 1),
            (frame(0xb, 0xa), 1),
            (frame(0xd, 0xc), 3),
        ];
        let mut batch = Batch::new();
        for (bytes, port) in &ins {
            let mut p = Packet::from_bytes(bytes);
            let m = p.meta_mut();
            m.link = LinkKind::Ethernet;
            m.in_port = *port;
            m.egress = 99;
            batch.push(p);
        }
        c.plan.run_batch(&mut batch, 4);
        let got: Vec<String> = batch
            .iter()
            .map(|p| match p.meta().verdict {
                Verdict::Drop(r) => format!("drop {r}"),
                _ => format!("egress {}", p.meta().egress),
            })
            .collect();
        assert_eq!(got, ["drop 1", "egress 1", "drop 0", "egress 2", "drop 1"]);
        let t = &c.plan.state.tables[0];
        assert_eq!((t.hits, t.misses, t.full), (2, 2, 0));
        let counts: Vec<u64> = c.plan.state.counters.iter().map(|x| x.1).collect();
        assert_eq!(counts, [2, 2]);
    }
}
