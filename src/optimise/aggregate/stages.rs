//! PA-Flow between in-process stages (`aggregate_stages = true`, docs/paflow.md): the
//! packets of one batch that a stage sends down its ring to the next stage are packed
//! into aggregated frames, one ring slot per frame, and the next stage unpacks them
//! before its NFs run; every ring between stages does so, for any number of stages. The
//! frame is the wire format's (`frame.rs`) with version 2: each record's bytes are
//! preceded by the packet's metadata (times, wire length, ports, verdict, position),
//! which a process keeps but a wire does not. A version-2 frame is refused by the wire
//! parser, so one can never be taken for a wire aggregate.
//!
//! Buffers: a frame is a buffer of the packing stage and, once unpacked, goes back to
//! stage 1 like any freed packet. The buffers of the packets a frame holds are not
//! freed by the packer: they go, in order, down a *supply* ring beside the forward ring,
//! and the next stage unpacks record k into the k-th buffer it takes from it (which held
//! that very packet, so it is large enough). So a frame of n packets travels with its n
//! buffers, the unpacked packets go on (or are freed) like any others, and no stage
//! needs a stock of its own or has to be the last. A run is packed only when the supply
//! ring has room for all of its buffers (else it goes as it is): every frame finds its
//! buffers waiting.

use rtrb::{Consumer, Producer};

use super::frame::{record_room, ETHERTYPE, HEADER, RECORD};
use crate::packet::{Batch, LinkKind, Meta, Packet, Pool, Verdict, HEADROOM, MAX_BATCH};

/// The version byte of an in-process aggregate (records carry metadata).
pub const VERSION: u8 = 2;
/// Metadata bytes before each record's packet.
pub const META: usize = 40;
/// Largest in-process aggregate: the wire format's default.
pub const SIZE: usize = super::DEFAULT_SIZE;

/// What goes down the ring, in order: a packet as it is, or a frame of several.
pub enum Packed {
    Plain(Packet),
    Frame(Packet),
}

/// Counts of one ring's aggregation (`aggregate_stages` in `--json`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct StageCounters {
    /// Aggregated frames sent and the packets inside them.
    pub frames: u64,
    pub aggregated: u64,
    /// Packets sent as they are (alone in their batch, or no frame buffer free).
    pub plain: u64,
    /// Times a stage waited for room in a supply ring (the next stage was behind).
    pub supply_waits: u64,
}

/// A stage's sending side: packs a batch bound for one node into frames.
pub struct StagePacker {
    size: usize,
    /// The run of packets the frame being planned will hold.
    run: Vec<Packet>,
    used: usize,
    ready: Vec<Packed>,
    /// Where the packed packets' buffers go, in order, for the next stage to unpack into.
    supply: Producer<Packet>,
    /// Frames this stage unpacked, kept to be the next frames it packs (a stage that
    /// is not stage 1 has no buffers of its own); given back after each chunk.
    spare: Vec<Packet>,
    pub c: StageCounters,
}

fn put_meta(m: &Meta, out: &mut [u8; META]) {
    out[0..8].copy_from_slice(&m.ts_ns.to_le_bytes());
    out[8..16].copy_from_slice(&m.now_ns.to_le_bytes());
    out[16..24].copy_from_slice(&m.seq.to_le_bytes());
    out[24..28].copy_from_slice(&m.wire_len.to_le_bytes());
    out[28..32].copy_from_slice(&m.flow_hash.to_le_bytes());
    out[32..34].copy_from_slice(&m.in_port.to_le_bytes());
    out[34..36].copy_from_slice(&m.egress.to_le_bytes());
    out[36] = m.link as u8;
    let (k, v) = match m.verdict {
        Verdict::Out(o) => (0, o),
        Verdict::Drop(r) => (1, r),
    };
    out[37] = k;
    out[38] = v;
    out[39] = 0;
}

fn get_meta(b: &[u8], m: &mut Meta) -> bool {
    let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
    let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
    let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
    let link = match b[36] {
        0 => LinkKind::Ethernet,
        1 => LinkKind::RawIp,
        2 => LinkKind::LinuxSll,
        3 => LinkKind::LinuxSll2,
        _ => return false,
    };
    let verdict = match b[37] {
        0 => Verdict::Out(b[38]),
        1 => Verdict::Drop(b[38]),
        _ => return false,
    };
    *m = Meta {
        ts_ns: u64_at(0),
        now_ns: u64_at(8),
        seq: u64_at(16),
        wire_len: u32_at(24),
        flow_hash: u32_at(28),
        in_port: u16_at(32),
        egress: u16_at(34),
        link,
        verdict,
        ..Meta::default()
    };
    true
}

/// Room one packet of `len` bytes takes in an in-process aggregate.
#[inline]
fn room(len: usize) -> usize {
    record_room(len) + META
}

impl StagePacker {
    /// Frames of at most `max` bytes (stage 1's largest buffer; at most [`SIZE`]);
    /// `cap` is the most packets a batch for one node holds; the packed packets'
    /// buffers go down `supply`.
    pub fn new(max: usize, cap: usize, supply: Producer<Packet>) -> StagePacker {
        let cap = cap.max(MAX_BATCH);
        StagePacker {
            size: max.min(SIZE),
            run: Vec::with_capacity(cap),
            used: HEADER,
            ready: Vec::with_capacity(cap),
            supply,
            spare: Vec::with_capacity(MAX_BATCH),
            c: StageCounters::default(),
        }
    }

    /// Largest frame, in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Packs `b` (emptied) into frames, in order: consecutive packets that fit one
    /// frame become a frame (their buffers go down the supply ring); a lone packet, one
    /// too large for a frame, or a run for which there is no frame buffer or no room in
    /// the supply ring stays as it is (never a wait). Frame buffers come from the spare
    /// frames, else from `pool`. Returns what to send, in order.
    pub fn pack(&mut self, b: &mut Batch, pool: &mut Pool) -> std::vec::Drain<'_, Packed> {
        self.ready.clear();
        self.supply_room(b.len());
        for p in b.drain() {
            let r = room(p.len());
            if !self.run.is_empty() && self.used + r > self.size {
                self.close(pool);
            }
            if HEADER + r > self.size {
                self.c.plain += 1;
                self.ready.push(Packed::Plain(p));
                continue;
            }
            self.used += r;
            self.run.push(p);
        }
        self.close(pool);
        self.ready.drain(..)
    }

    /// Back-pressure, as a full forward ring applies it: waits until the supply ring has
    /// room for the buffers of `n` packets, when it can ever hold them. Every buffer in
    /// it belongs to a frame already sent (earlier calls), which the next stage unpacks,
    /// so the wait ends; it ends too if the next stage stopped. A stage running ahead of
    /// the next would otherwise send its packets unpacked once the ring filled.
    fn supply_room(&mut self, n: usize) {
        if n < 2 || n > self.supply.buffer().capacity() {
            return;
        }
        if self.supply.slots() < n {
            self.c.supply_waits += 1;
        }
        let mut spins = 0u32;
        while self.supply.slots() < n && !self.supply.is_abandoned() {
            if spins < 64 {
                spins += 1;
                std::hint::spin_loop();
            } else {
                // Stages may outnumber cores: give the core to the next stage.
                std::thread::yield_now();
            }
        }
    }

    /// Keeps frame `f` (unpacked by this stage) to pack into; `pool` takes it when the
    /// stash is full.
    pub fn keep_frame(&mut self, f: Packet, pool: &mut Pool) {
        if self.spare.len() < self.spare.capacity() {
            self.spare.push(f);
        } else {
            pool.free(f);
        }
    }

    /// After a chunk: the unused spare frames go to `pool` (back to stage 1).
    pub fn release(&mut self, pool: &mut Pool) {
        for f in self.spare.drain(..) {
            pool.free(f);
        }
    }

    /// A buffer that holds `len` bytes: a spare frame, else one from `pool` (a stage's
    /// pool of freed buffers may offer a smaller one first: then none).
    fn frame_buffer(&mut self, len: usize, pool: &mut Pool) -> Option<Packet> {
        let fits = |f: &Packet| f.capacity() >= len + HEADROOM;
        if let Some(k) = self.spare.iter().rposition(fits) {
            return Some(self.spare.swap_remove(k));
        }
        let f = pool.alloc_raw_for(len)?;
        if fits(&f) {
            Some(f)
        } else {
            pool.free(f);
            None
        }
    }

    /// Ends the planned run: a frame when it has two packets or more, a buffer is free
    /// and the supply ring has room for its packets' buffers; else its packets as they
    /// are.
    fn close(&mut self, pool: &mut Pool) {
        let n = self.run.len();
        let frame = if n >= 2 && self.supply.slots() >= n {
            self.frame_buffer(self.used, pool)
        } else {
            None
        };
        match frame {
            Some(f) => {
                self.ready.push(Packed::Frame(fill(f, &self.run)));
                self.c.frames += 1;
                self.c.aggregated += n as u64;
                if let Ok(chunk) = self.supply.write_chunk_uninit(n) {
                    chunk.fill_from_iter(self.run.drain(..).map(|mut p| {
                        p.forget_view();
                        p
                    }));
                }
                // (Room was checked above: the run is always empty here.)
                for p in self.run.drain(..) {
                    pool.free(p);
                }
            }
            None => {
                self.c.plain += n as u64;
                self.ready.extend(self.run.drain(..).map(Packed::Plain));
            }
        }
        self.used = HEADER;
    }
}

/// Writes `pkts` into frame buffer `f` (sized for them by the caller).
fn fill(mut f: Packet, pkts: &[Packet]) -> Packet {
    let mut h = [0u8; HEADER];
    let first = pkts[0].data();
    let k = first.len().min(12);
    h[..k].copy_from_slice(&first[..k]);
    h[12..14].copy_from_slice(&ETHERTYPE.to_be_bytes());
    h[14] = VERSION;
    h[16..18].copy_from_slice(&(pkts.len() as u16).to_be_bytes());
    f.set_bytes(&h);
    let mut meta = [0u8; META];
    for p in pkts {
        let d = p.data();
        let mut rec = [0u8; RECORD];
        rec[..2].copy_from_slice(&(d.len() as u16).to_be_bytes());
        put_meta(p.meta(), &mut meta);
        f.extend(&rec);
        f.extend(&meta);
        f.extend(d);
        f.extend(&[0u8; 3][..(4 - d.len() % 4) % 4]);
    }
    f
}

/// A stage's receiving side: unpacks frames into the buffers that came with them.
pub struct StageUnpacker {
    supply: Consumer<Packet>,
    /// PA-Flow's "NFs on aggregated frames" (only where this stage is the last): the
    /// packets are views into their frame (copied only if an NF changes them), and the
    /// frames are held here until every packet of the chunk has been freed.
    views: bool,
    held: Vec<Packet>,
    pub unpacked: u64,
}

impl StageUnpacker {
    /// Unpacks into the buffers from `supply`; with `views` (the last stage only: it
    /// frees every packet of a chunk), `hold` is the most frames a chunk may hold.
    pub fn new(supply: Consumer<Packet>, hold: usize, views: bool) -> StageUnpacker {
        StageUnpacker {
            supply,
            views,
            held: Vec::with_capacity(if views { hold } else { 0 }),
            unpacked: 0,
        }
    }

    /// Appends the packets of frame `f` to `to`, with their metadata; returns the frame
    /// when nothing views it (for the caller to reuse or free), else holds it until
    /// [`reclaim`](Self::reclaim). Err (the stage must stop) if the frame is not one a
    /// stage made or its buffers are missing; what was taken then goes to `pool`.
    pub fn unpack(
        &mut self,
        f: Packet,
        to: &mut Batch,
        pool: &mut Pool,
    ) -> Result<Option<Packet>, String> {
        let r = self.unpack_into(f.data(), to, pool);
        match r {
            Ok(()) if self.views => {
                // Its packets view it: kept, unchanged, until `reclaim`.
                self.held.push(f);
                Ok(None)
            }
            Ok(()) => Ok(Some(f)),
            Err(e) => {
                pool.free(f);
                Err(e)
            }
        }
    }

    fn unpack_into(&mut self, d: &[u8], to: &mut Batch, pool: &mut Pool) -> Result<(), String> {
        let bad = || "an in-process aggregate is malformed".to_string();
        if d.len() < HEADER || d[14] != VERSION {
            return Err(bad());
        }
        let count = u16::from_be_bytes([d[16], d[17]]);
        let mut at = HEADER;
        for _ in 0..count {
            let h = d.get(at..at + RECORD + META).ok_or_else(bad)?;
            let len = usize::from(u16::from_be_bytes([h[0], h[1]]));
            let from = at + RECORD + META;
            let bytes = d.get(from..from + len).ok_or_else(bad)?;
            let mut p = self.supply.pop().map_err(|_| {
                "an in-process aggregate came without its buffers (supply ring empty)".to_string()
            })?;
            let set = if self.views {
                // SAFETY: `bytes` lie in a frame that `unpack` keeps in `held`, never
                // changed, until `reclaim`, which runs once the stage (the last) has
                // freed every packet of the chunk (the pool un-views each on free); the
                // frame's buffer is a box, so moving the frame moves no byte.
                unsafe { p.set_view_unchecked(bytes) }
            } else {
                p.set_bytes(bytes)
            };
            if !set || !get_meta(&h[RECORD..], p.meta_mut()) {
                pool.free(p);
                return Err(bad());
            }
            to.push(p);
            self.unpacked += 1;
            at = from + len + (4 - len % 4) % 4;
        }
        Ok(())
    }

    /// After a chunk, every packet of which the stage has freed: the frames its packets
    /// viewed go to `pool` (back to stage 1).
    pub fn reclaim(&mut self, pool: &mut Pool) {
        for f in self.held.drain(..) {
            pool.free(f);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtrb::RingBuffer;

    fn pkt(pool: &mut Pool, fill: u8, len: usize, ts: u64) -> Packet {
        let mut p = pool.alloc().unwrap();
        assert!(p.set_bytes(&vec![fill; len]));
        let m = p.meta_mut();
        m.ts_ns = ts;
        m.wire_len = len as u32 + 100;
        m.in_port = 3;
        m.seq = ts * 2;
        m.link = LinkKind::RawIp;
        p
    }

    fn pair(max: usize, room: usize, views: bool) -> (StagePacker, StageUnpacker) {
        let (tx, rx) = RingBuffer::new(room);
        (
            StagePacker::new(max, 32, tx),
            StageUnpacker::new(rx, 64, views),
        )
    }

    #[test]
    fn a_batch_packs_into_frames_and_comes_back_with_its_metadata() {
        let mut pool = Pool::new(64, 1500);
        let mut b = Batch::new();
        for i in 0..5u8 {
            let p = pkt(&mut pool, i, 60 + usize::from(i), u64::from(i));
            b.push(p);
        }
        let (mut packer, mut u) = pair(pool.max_packet(), 64, false);
        let out: Vec<Packed> = packer.pack(&mut b, &mut pool).collect();
        // One frame of five; their buffers went down the supply ring, not to the pool.
        assert_eq!(out.len(), 1);
        assert_eq!(pool.available(), 64 - 5 - 1);
        assert_eq!(u.supply.slots(), 5);
        let Some(Packed::Frame(f)) = out.into_iter().next() else {
            panic!("not a frame");
        };
        // 18, then per packet 4 + 40 + its bytes padded (60, 61, 62, 63, 64 → 60, 64 ×4).
        assert_eq!(f.len(), 18 + 5 * 44 + 60 + 4 * 64);
        assert_eq!(&f.data()[12..18], &[0x88, 0xb5, 2, 0, 0, 5]);
        assert_eq!(
            packer.c,
            StageCounters {
                frames: 1,
                aggregated: 5,
                plain: 0,
                supply_waits: 0
            }
        );
        let mut held = Pool::holding(128);
        let mut to = Batch::new();
        let f = u.unpack(f, &mut to, &mut held).unwrap();
        assert!(f.is_some(), "the frame is handed back");
        assert_eq!(u.supply.slots(), 0, "every buffer taken");
        let got: Vec<(Vec<u8>, u64, u32, u16, u64, LinkKind)> = to
            .iter()
            .map(|p| {
                let m = p.meta();
                (
                    p.data().to_vec(),
                    m.ts_ns,
                    m.wire_len,
                    m.in_port,
                    m.seq,
                    m.link,
                )
            })
            .collect();
        for (i, g) in got.iter().enumerate() {
            let n = 60 + i;
            let want = (
                vec![i as u8; n],
                i as u64,
                n as u32 + 100,
                3,
                2 * i as u64,
                LinkKind::RawIp,
            );
            assert_eq!(*g, want, "packet {i}");
        }
        // Every buffer comes back to stage 1's pool, count for count.
        for p in to.drain() {
            pool.free(p);
        }
        pool.free(f.unwrap());
        assert_eq!(pool.available(), 64);
    }

    #[test]
    fn a_lone_packet_a_too_large_one_no_frame_buffer_or_no_supply_room_go_as_they_are() {
        let mut pool = Pool::new(6, 1500);
        let (mut packer, _u) = pair(pool.max_packet(), 2, false);
        let mut b = Batch::new();
        b.push(pkt(&mut pool, 1, 60, 0));
        let out: Vec<Packed> = packer.pack(&mut b, &mut pool).collect();
        assert!(matches!(out[..], [Packed::Plain(_)]));
        // 1,500 bytes plus a record and metadata do not fit a 1,920-byte frame twice.
        let mut b = Batch::new();
        b.push(pkt(&mut pool, 2, 1500, 0));
        b.push(pkt(&mut pool, 3, 1500, 0));
        let out2: Vec<Packed> = packer.pack(&mut b, &mut pool).collect();
        assert!(matches!(out2[..], [Packed::Plain(_), Packed::Plain(_)]));
        // Three small packets: the supply ring has room for two only.
        let mut b = Batch::new();
        for i in 0..3 {
            b.push(pkt(&mut pool, 4 + i, 60, 0));
        }
        let out3: Vec<Packed> = packer.pack(&mut b, &mut pool).collect();
        assert_eq!(out3.len(), 3);
        assert!(out3.iter().all(|m| matches!(m, Packed::Plain(_))));
        // Pool empty: two small packets cannot get a frame and go as they are.
        assert_eq!(pool.available(), 0);
        let mut b = Batch::new();
        for m in out.into_iter().chain(out3.into_iter().take(1)) {
            let (Packed::Plain(p) | Packed::Frame(p)) = m;
            b.push(p);
        }
        let out4: Vec<Packed> = packer.pack(&mut b, &mut pool).collect();
        assert!(matches!(out4[..], [Packed::Plain(_), Packed::Plain(_)]));
        assert_eq!(packer.c.frames, 0);
        assert_eq!(packer.c.plain, 8);
    }

    #[test]
    fn a_stage_packs_into_the_frames_it_unpacked_and_a_small_buffer_is_no_frame() {
        // Buffers up to 9,000 B: a frame of twenty 100-byte packets (2,898 B) takes a
        // large one.
        let mut pool = Pool::new(64, 9000);
        let (mut p1, mut u2) = pair(pool.max_packet(), 64, false);
        let mut b = Batch::new();
        for i in 0..20u8 {
            b.push(pkt(&mut pool, i, 100, u64::from(i)));
        }
        let out: Vec<Packed> = p1.pack(&mut b, &mut pool).collect();
        let [Packed::Frame(f)] = <[Packed; 1]>::try_from(out).ok().expect("one frame") else {
            panic!("not a frame");
        };
        assert_eq!(f.len(), 18 + 20 * 144);
        // Stage 2 holds only what it frees: here one small buffer, too small for the
        // next frame.
        let mut own = Pool::holding(128);
        own.free(pool.alloc().unwrap());
        let mut to = Batch::new();
        let f = u2.unpack(f, &mut to, &mut own).unwrap().unwrap();
        let (tx, rx) = RingBuffer::new(64);
        let mut p2 = StagePacker::new(pool.max_packet(), 32, tx);
        p2.keep_frame(f, &mut own);
        let out: Vec<Packed> = p2.pack(&mut to, &mut own).collect();
        let [Packed::Frame(g)] = <[Packed; 1]>::try_from(out).ok().expect("one frame") else {
            panic!("not a frame");
        };
        assert_eq!(own.available(), 1, "the small buffer was not used");
        let mut u3 = StageUnpacker::new(rx, 8, false);
        let mut back = Batch::new();
        let g = u3.unpack(g, &mut back, &mut own).unwrap().unwrap();
        assert_eq!(back.len(), 20);
        for (i, p) in back.iter().enumerate() {
            assert_eq!(p.data(), &[i as u8; 100][..]);
            assert_eq!(p.meta().ts_ns, i as u64);
        }
        // A spare frame of one small buffer is not taken for a large frame, and the
        // holding pool's small buffer neither: the packets go as they are.
        p2.keep_frame(own.alloc_raw().unwrap(), &mut own);
        own.free(pool.alloc().unwrap());
        let out: Vec<Packed> = p2.pack(&mut back, &mut own).collect();
        assert_eq!(out.len(), 20);
        assert!(out.iter().all(|m| matches!(m, Packed::Plain(_))));
        p2.release(&mut own);
        assert_eq!(own.available(), 2);
        pool.free(g);
    }

    #[test]
    fn views_read_the_frame_copy_on_change_and_the_frame_waits_for_its_packets() {
        let mut pool = Pool::new(64, 1500);
        let mut b = Batch::new();
        for i in 0..3u8 {
            let p = pkt(&mut pool, i + 1, 100, u64::from(i));
            b.push(p);
        }
        let (mut packer, mut u) = pair(pool.max_packet(), 64, true);
        let Some(Packed::Frame(f)) = packer.pack(&mut b, &mut pool).next() else {
            panic!("not a frame");
        };
        let mut held = Pool::holding(128);
        let mut to = Batch::new();
        assert!(u.unpack(f, &mut to, &mut held).unwrap().is_none());
        assert_eq!(
            u.held.len(),
            1,
            "the frame is kept while its packets view it"
        );
        assert!(to.iter().all(|p| p.is_view()));
        let mut pkts: Vec<Packet> = to.drain().collect();
        // An NF's change copies that packet only; the others still read the frame.
        pkts[1].data_mut()[0] = 0xee;
        assert!(!pkts[1].is_view() && pkts[0].is_view());
        assert_eq!(pkts[1].data()[..2], [0xee, 2]);
        assert_eq!(pkts[2].data(), &[3u8; 100][..]);
        for p in pkts {
            held.free(p);
        }
        u.reclaim(&mut held);
        // The three buffers and the frame back, none viewing.
        assert_eq!(held.available(), 4);
        assert!(u.held.is_empty());
        while let Some(p) = held.alloc_raw() {
            assert!(!p.is_view());
            pool.free(p);
        }
        assert_eq!(pool.available(), 64);
    }

    #[test]
    fn a_malformed_frame_or_one_without_its_buffers_is_an_error_not_a_panic() {
        let mut held = Pool::holding(8);
        let (_tx, rx) = RingBuffer::new(8);
        let mut u = StageUnpacker::new(rx, 8, false);
        let mut to = Batch::new();
        for bytes in [&[0u8; 4][..], &[0u8; 18][..]] {
            let e = u.unpack(Packet::from_bytes(bytes), &mut to, &mut held);
            assert!(e.is_err());
        }
        let mut f = vec![0u8; 18];
        f[14] = VERSION;
        f[17] = 3; // three records announced, none present
        assert!(u
            .unpack(Packet::from_bytes(&f), &mut to, &mut held)
            .is_err());
        // A well-formed frame whose buffers never came.
        let mut pool = Pool::new(8, 1500);
        let (mut packer, _) = pair(pool.max_packet(), 8, false);
        let mut b = Batch::new();
        b.push(pkt(&mut pool, 1, 60, 0));
        b.push(pkt(&mut pool, 2, 60, 0));
        let Some(Packed::Frame(f)) = packer.pack(&mut b, &mut pool).next() else {
            panic!("not a frame");
        };
        let e = u.unpack(f, &mut to, &mut held).unwrap_err();
        assert!(e.contains("without its buffers"), "{e}");
        assert!(to.is_empty());
    }
}
