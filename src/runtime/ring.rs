//! The rings between pipeline stages (`stage.rs`): `rtrb` single-producer single-consumer
//! ring buffers. A forward ring carries packet *references* (the buffer's pointer: the
//! bytes never move), each tagged with the node it goes to, written and read a batch at
//! a time (one atomic index update per batch), plus a marker at the end of every chunk.
//! A return ring carries freed buffers back to the pool of the stage that made them.

use rtrb::{Consumer, Producer};

use super::control::Command;
use crate::optimise::aggregate::{Packed, StagePacker};
use crate::packet::{Batch, Packet, Pool};

/// What a forward ring carries.
pub enum Msg {
    /// A packet for node `.0` (an index into the chain's nodes).
    Pkt(u32, Packet),
    /// The chunk is whole: walk it (`shift` is the replay loop's, for the sinks).
    End { shift: u64 },
    /// A control command for an NF of a later stage, applied between the same chunks
    /// as in one stage.
    Change(Box<Command>),
    /// PA-Flow (`aggregate_stages`): an aggregated frame of packets for node `.0`,
    /// unpacked by the next stage (`optimise/aggregate/stages.rs`).
    Agg(u32, Packet),
}

/// Waiting on a ring with nothing to do: spin a little (a hop costs tens of cycles), then
/// give the core away (`sched_yield`), since stages may outnumber cores. Only idle
/// threads call it, so there is no system call per packet.
#[derive(Default)]
pub struct Idle(u32);

impl Idle {
    #[inline]
    pub fn wait(&mut self) {
        if self.0 < 64 {
            self.0 += 1;
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// The producing end of a forward ring.
pub struct Out {
    pub tx: Producer<Msg>,
    /// Times the ring was full when a batch was sent (back-pressure applied).
    pub full: u64,
    /// PA-Flow (`aggregate_stages`): packs each batch into frames before it goes.
    pub agg: Option<StagePacker>,
    /// Live input: a full ring drops (`ring-full`) instead of waiting, since the ports
    /// cannot be paused ([`send_lossy`](Self::send_lossy)).
    pub lossy: bool,
    /// Lossy: packets went down since the last end marker (an empty chunk sends none).
    pending: bool,
}

/// Waits until `tx` has `n` free slots, counting a wait in `full`; `Gone` if the
/// consumer stopped.
#[inline]
fn wait_room(tx: &mut Producer<Msg>, full: &mut u64, n: usize) -> Result<(), Gone> {
    if tx.slots() >= n {
        return Ok(());
    }
    *full += 1;
    let mut idle = Idle::default();
    while tx.slots() < n {
        if tx.is_abandoned() {
            return Err(Gone);
        }
        idle.wait();
    }
    Ok(())
}

/// The consumer of a ring stopped (its stage ended with an error or died).
#[derive(Debug)]
pub struct Gone;

impl Out {
    pub fn new(tx: Producer<Msg>) -> Out {
        Out {
            tx,
            full: 0,
            agg: None,
            lossy: false,
            pending: false,
        }
    }

    /// Waits until `n` slots are free; `Gone` if the consumer stopped.
    #[inline]
    fn room(&mut self, n: usize) -> Result<(), Gone> {
        wait_room(&mut self.tx, &mut self.full, n)
    }

    /// Sends every packet of `b` (all for node `node`) in order, emptying it; waits for
    /// room when the ring is full (back-pressure: nothing is lost).
    #[inline]
    pub fn send_batch(&mut self, node: usize, b: &mut Batch) -> Result<(), Gone> {
        let mut left = b.len();
        let mut it = b.drain();
        while left > 0 {
            // The whole rest at once first: rtrb checks its cached copy of the consumer's
            // position and loads the shared one only when that says full, so a batch
            // costs one index store, not two loads of the line the consumer writes.
            let n = match self.tx.write_chunk_uninit(left) {
                Ok(chunk) => chunk.fill_from_iter(it.by_ref().map(|p| Msg::Pkt(node as u32, p))),
                Err(_) => {
                    self.room(1)?;
                    let n = left.min(self.tx.slots());
                    let Ok(chunk) = self.tx.write_chunk_uninit(n) else {
                        continue;
                    };
                    chunk.fill_from_iter(it.by_ref().take(n).map(|p| Msg::Pkt(node as u32, p)))
                }
            };
            left -= n;
        }
        Ok(())
    }

    /// Sends the packets of `b` for node `node` (emptying it): as they are, or packed
    /// into aggregated frames (buffers from and back to `pool`) when this ring
    /// aggregates. Waits for room like [`send_batch`](Self::send_batch).
    #[inline]
    pub fn send_node(&mut self, node: usize, b: &mut Batch, pool: &mut Pool) -> Result<(), Gone> {
        let Out { tx, full, agg, .. } = self;
        let Some(agg) = agg.as_mut() else {
            return self.send_batch(node, b);
        };
        // PA-Flow hook (optimise/aggregate/stages.rs).
        let node = node as u32;
        let mut it = agg.pack(b, pool).map(|m| match m {
            Packed::Plain(p) => Msg::Pkt(node, p),
            Packed::Frame(f) => Msg::Agg(node, f),
        });
        let mut left = it.len();
        while left > 0 {
            wait_room(tx, full, 1)?;
            let n = left.min(tx.slots());
            let Ok(chunk) = tx.write_chunk_uninit(n) else {
                continue;
            };
            left -= chunk.fill_from_iter(it.by_ref().take(n));
        }
        Ok(())
    }

    /// Live input: sends what fits of `b` for node `node` (keeping a slot for the chunk's
    /// end marker, so that never waits) and frees the rest into `pool`, emptying `b`.
    /// Returns how many were dropped (counted as `ring-full` by the caller).
    #[inline]
    pub fn send_lossy(&mut self, node: usize, b: &mut Batch, pool: &mut Pool) -> Result<u64, Gone> {
        if self.tx.is_abandoned() {
            for p in b.drain() {
                pool.free(p);
            }
            return Err(Gone);
        }
        let n = b.len().min(self.tx.slots().saturating_sub(1));
        let mut it = b.drain();
        if n > 0 {
            if let Ok(chunk) = self.tx.write_chunk_uninit(n) {
                chunk.fill_from_iter(it.by_ref().take(n).map(|p| Msg::Pkt(node as u32, p)));
                self.pending = true;
            }
        }
        let mut dropped = 0;
        for p in it {
            pool.free(p);
            dropped += 1;
        }
        self.full += (dropped > 0) as u64;
        Ok(dropped)
    }

    /// Ends a chunk: the marker that lets the next stage walk it. Lossy rings skip it
    /// when every packet of the chunk was dropped (nothing to walk; the slot stays free).
    pub fn end(&mut self, shift: u64) -> Result<(), Gone> {
        if self.lossy && !std::mem::take(&mut self.pending) {
            return Ok(());
        }
        self.send(Msg::End { shift })
    }

    /// Sends one marker or command, waiting for room.
    pub fn send(&mut self, m: Msg) -> Result<(), Gone> {
        self.room(1)?;
        self.tx.push(m).map_err(|_| Gone)
    }
}

/// Hands every buffer `pool` (a holding pool, [`Pool::holding`]) holds to the return ring
/// (which has room for every buffer of the run, so this never waits).
#[inline]
pub fn give_back(pool: &mut crate::packet::Pool, back: &mut Producer<Packet>) {
    let n = pool.available();
    if n == 0 {
        return;
    }
    // As in `send_batch`: the cached room first, the shared index only when it is short.
    let chunk = match back.write_chunk_uninit(n) {
        Ok(c) => c,
        Err(_) => match back.write_chunk_uninit(n.min(back.slots())) {
            Ok(c) => c,
            Err(_) => return,
        },
    };
    // In the order freed, without looking at the buffers (`Pool::drain_held`): taking
    // them out with `alloc_raw` read each one's line again, and reversed their order.
    let k = chunk.len();
    chunk.fill_from_iter(pool.drain_held(k));
}

/// Takes every buffer waiting on a return ring into `pool`.
#[inline]
pub fn take_back(back: &mut Consumer<Packet>, pool: &mut crate::packet::Pool) {
    let n = back.slots();
    if n == 0 {
        return;
    }
    if let Ok(chunk) = back.read_chunk(n) {
        for p in chunk {
            pool.free(p);
        }
    }
}

/// Cycles (TSC ticks) per packet through one hop in steady state: a producer thread sends
/// `packets` packet references a batch at a time down a ring of `ring` packets (as a
/// stage does), a consumer thread reads them and hands the buffers back over a return
/// ring. Measured at the producer from its first send to the last buffer's return.
/// For `catena bench micronf`.
pub fn hop_cycles(packets: u64, ring: usize) -> f64 {
    use crate::packet::MAX_BATCH;
    let bufs = ring + 4 * MAX_BATCH;
    let mut pool = crate::packet::Pool::new(bufs, 64);
    let (tx, mut rx) = rtrb::RingBuffer::<Msg>::new(ring + 2);
    let (mut btx, mut brx) = rtrb::RingBuffer::<Packet>::new(2 * bufs);
    // Two ends on two cores, as stages with a core each (the figure is a hop between
    // cores, not the scheduler's time-sharing of one).
    let split = super::affinity::split_two();
    let theirs = split.as_ref().map(|s| s.other.clone());
    let consumer = std::thread::spawn(move || {
        if let Some(c) = theirs {
            super::affinity::set_cores(&c);
        }
        let mut idle = Idle::default();
        let mut held = crate::packet::Pool::holding(2 * bufs);
        loop {
            let n = rx.slots();
            if n == 0 {
                if rx.is_abandoned() && rx.slots() == 0 {
                    give_back(&mut held, &mut btx);
                    return;
                }
                idle.wait();
                continue;
            }
            idle = Idle::default();
            if let Ok(c) = rx.read_chunk(n) {
                for m in c {
                    if let Msg::Pkt(_, p) | Msg::Agg(_, p) = m {
                        held.free(p);
                    }
                }
            }
            give_back(&mut held, &mut btx);
        }
    });
    let split = split.filter(|s| super::affinity::pin(s.here));
    let mut out = Out::new(tx);
    let mut b = Batch::with_capacity(MAX_BATCH);
    let mut sent = 0u64;
    let t0 = crate::flow::tsc();
    while sent < packets {
        take_back(&mut brx, &mut pool);
        while b.len() < MAX_BATCH {
            match pool.alloc_raw() {
                Some(p) => b.push(p),
                None => break,
            }
        }
        if b.is_empty() {
            std::hint::spin_loop();
            continue;
        }
        sent += b.len() as u64;
        if out.send_batch(1, &mut b).is_err() {
            break;
        }
    }
    drop(out);
    let _ = consumer.join();
    take_back(&mut brx, &mut pool);
    let t = crate::flow::tsc().wrapping_sub(t0);
    if let Some(s) = split {
        super::affinity::set_cores(&s.mask);
    }
    t as f64 / sent.max(1) as f64
}

/// The machine's cross-core round trip, in TSC ticks: one cache line's value passed to a
/// thread on another core and back (each end pinned, as `hop_cycles`'s), the mean over
/// up to `trips` round trips or ~20 ms, whichever ends first (a partner without a core
/// would otherwise stretch it to seconds), after the partner runs and 1,000 untimed
/// trips. None when fewer than 1,000 timed trips fit (the partner had no core). The
/// floor under every line a hop or a fork moves; on this host it reads ~260 in a fast
/// state and ~1,150–1,400 in a slow one, minutes each, for every binary (session 24).
/// For `catena bench micronf`.
pub fn round_trip_cycles(trips: u64) -> Option<f64> {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    #[repr(align(128))]
    #[derive(Default)]
    struct Line(AtomicU64);
    #[derive(Default)]
    struct Pair {
        ping: Line,
        pong: Line,
        stop: AtomicBool,
        ready: AtomicBool,
    }
    let pair = std::sync::Arc::new(Pair::default());
    let theirs = pair.clone();
    let split = super::affinity::split_two();
    let cores = split.as_ref().map(|s| s.other.clone());
    let partner = std::thread::spawn(move || {
        if let Some(c) = cores {
            super::affinity::set_cores(&c);
        }
        theirs.ready.store(true, Ordering::Release);
        let mut seen = 0;
        while !theirs.stop.load(Ordering::Acquire) {
            let v = theirs.ping.0.load(Ordering::Acquire);
            if v != seen {
                seen = v;
                theirs.pong.0.store(v, Ordering::Release);
            }
        }
    });
    let split = split.filter(|s| super::affinity::pin(s.here));
    let budget = 50_000_000; // ~20 ms of TSC ticks
    let start = crate::flow::tsc();
    while !pair.ready.load(Ordering::Acquire) && crate::flow::tsc().wrapping_sub(start) < budget {
        std::thread::yield_now();
    }
    const WARM: u64 = 1_000;
    let mut t0 = crate::flow::tsc();
    let mut done = 0;
    'trips: for i in 1..=trips + WARM {
        if i == WARM + 1 {
            t0 = crate::flow::tsc();
        }
        pair.ping.0.store(i, Ordering::Release);
        while pair.pong.0.load(Ordering::Acquire) != i {
            if crate::flow::tsc().wrapping_sub(t0) > budget {
                break 'trips;
            }
        }
        done = i.saturating_sub(WARM);
    }
    let t = crate::flow::tsc().wrapping_sub(t0);
    pair.stop.store(true, Ordering::Release);
    let _ = partner.join();
    if let Some(s) = split {
        super::affinity::set_cores(&s.mask);
    }
    (done >= WARM).then(|| t as f64 / done as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A later stage's buffers go back in the order it freed them, untouched, and the pool
    /// that made them forgets a lent view as it takes each back.
    #[test]
    fn freed_buffers_return_in_order_and_their_lent_views_are_forgotten_at_home() {
        let mut home = Pool::new(4, 1500);
        let frame = vec![7u8; 60];
        let mut sent: Vec<Packet> = (0..4).map(|_| home.alloc().unwrap()).collect();
        for p in &mut sent {
            // SAFETY: every packet stops viewing `frame` when `home` takes it back, below,
            // before `frame` goes out of scope (asserted).
            assert!(unsafe { p.set_view_unchecked(&frame) });
        }
        let order: Vec<*const u8> = sent
            .iter()
            .map(|p| p.meta() as *const _ as *const u8)
            .collect();
        // The later stage frees two one way and two as a batch.
        let mut held = Pool::holding(8);
        let mut it = sent.into_iter();
        held.free(it.next().unwrap());
        held.free(it.next().unwrap());
        let mut b = Batch::with_capacity(2);
        it.for_each(|p| b.push(p));
        held.free_batch(&mut b);
        let (mut tx, mut rx) = rtrb::RingBuffer::<Packet>::new(8);
        give_back(&mut held, &mut tx);
        assert_eq!(held.available(), 0);
        let back: Vec<*const u8> = (0..4)
            .map(|_| {
                let q = rx.pop().unwrap();
                let a = q.meta() as *const _ as *const u8;
                home.free(q);
                a
            })
            .collect();
        assert_eq!(back, order, "handed back in the order freed");
        // `take_into` forgets no view itself: the ones it gives were forgotten at home.
        let mut b = Batch::with_capacity(4);
        assert!(home.take_into(4, &mut b));
        for p in b.iter() {
            assert!(!p.is_view());
            assert!(!std::ptr::eq(p.data().as_ptr(), frame.as_ptr()));
        }
        home.free_batch(&mut b);
    }
}
