//! PA-Flow between in-process stages (`aggregate_stages = true`, docs/paflow.md): the
//! packets of one batch that stage 1 sends down its ring to stage 2 are packed into
//! aggregated frames, one ring slot per frame, and stage 2 unpacks them before its NFs
//! run. The frame is the wire format's (`frame.rs`) with version 2: each record's bytes
//! are preceded by the packet's metadata (times, wire length, ports, verdict, position),
//! which a process keeps but a wire does not. A version-2 frame is refused by the wire
//! parser, so one can never be taken for a wire aggregate.
//!
//! Buffers: a frame is a buffer of stage 1's pool and goes back there, like any packet.
//! Unpacking needs one buffer per inner packet; stage 2 draws them from a small stock of
//! its own, and after each chunk (every packet of which it has freed, being the last
//! stage) takes back as many buffers of each size from what it freed, so the buffers
//! stage 1 lent in frames and plain packets return to stage 1, count for count.

use super::frame::{record_room, ETHERTYPE, HEADER, RECORD};
use crate::packet::{Batch, LinkKind, Meta, Packet, Pool, Verdict, MAX_BATCH};

/// The version byte of an in-process aggregate (records carry metadata).
pub const VERSION: u8 = 2;
/// Metadata bytes before each record's packet.
pub const META: usize = 40;
/// Largest in-process aggregate: the wire format's default.
pub const SIZE: usize = super::DEFAULT_SIZE;
/// Buffers of stage 2's own stock: the last stage frees every packet of a chunk before
/// the next, so a chunk's worth, twice for margin.
pub const STOCK: usize = 2 * MAX_BATCH;

/// Bytes stage 2's stock takes for packets of at most `max_packet` bytes (counted by
/// `--max-memory`).
pub fn stock_bytes(max_packet: usize) -> usize {
    Pool::bytes(STOCK, max_packet)
}

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
}

/// Stage 1's side: packs a batch bound for one node into frames.
pub struct StagePacker {
    size: usize,
    /// The run of packets the frame being planned will hold.
    run: Vec<Packet>,
    used: usize,
    ready: Vec<Packed>,
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
    /// `cap` is the most packets a batch for one node holds.
    pub fn new(max: usize, cap: usize) -> StagePacker {
        let cap = cap.max(MAX_BATCH);
        StagePacker {
            size: max.min(SIZE),
            run: Vec::with_capacity(cap),
            used: HEADER,
            ready: Vec::with_capacity(cap),
            c: StageCounters::default(),
        }
    }

    /// Largest frame, in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Packs `b` (emptied) into frames from `pool`, in order: consecutive packets that
    /// fit one frame become a frame (their buffers go back to `pool`); a lone packet, one
    /// too large for a frame, or a run for which the pool has no buffer stays as it is
    /// (never a wait). Returns what to send, in order.
    pub fn pack(&mut self, b: &mut Batch, pool: &mut Pool) -> std::vec::Drain<'_, Packed> {
        self.ready.clear();
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

    /// Ends the planned run: a frame when it has two packets or more and a buffer is
    /// free, else its packets as they are.
    fn close(&mut self, pool: &mut Pool) {
        let n = self.run.len();
        let frame = if n >= 2 {
            pool.alloc_raw_for(self.used)
        } else {
            None
        };
        match frame {
            Some(f) => {
                self.ready.push(Packed::Frame(fill(f, &self.run)));
                self.c.frames += 1;
                self.c.aggregated += n as u64;
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

/// Stage 2's side: unpacks frames into buffers of its own stock, and takes them back
/// after each chunk.
pub struct StageUnpacker {
    stock: Pool,
    /// Capacity of the stock's ordinary buffers, and buffers lent per capacity class
    /// (ordinary, large).
    small: usize,
    lent_small: usize,
    lent_big: usize,
    /// Room to sort the buffers a chunk freed (allocated once).
    sort: Vec<Packet>,
    /// PA-Flow's "NFs on aggregated frames": the packets are views into their frame
    /// (copied only if an NF changes them), and the frames are held here until every
    /// packet of the chunk has been freed.
    views: bool,
    held: Vec<Packet>,
    pub unpacked: u64,
}

impl StageUnpacker {
    /// A stock for packets of up to `max_packet` bytes; `hold` is the most buffers the
    /// stage's own pool may hold (the room to sort them).
    pub fn new(max_packet: usize, hold: usize, views: bool) -> StageUnpacker {
        let stock = Pool::new(STOCK, max_packet);
        let small = Pool::new(1, 0).alloc_raw().map_or(0, |p| p.capacity());
        StageUnpacker {
            stock,
            small,
            lent_small: 0,
            lent_big: 0,
            sort: Vec::with_capacity(hold),
            views,
            held: Vec::with_capacity(hold),
            unpacked: 0,
        }
    }

    /// Appends the packets of frame `f` to `to`, with their metadata, then frees `f` into
    /// `pool`. Err (the stage must stop) if the frame is not one stage 1 made or the
    /// stock ran dry (a stage that keeps packets past its chunk).
    pub fn unpack(&mut self, f: Packet, to: &mut Batch, pool: &mut Pool) -> Result<(), String> {
        let r = self.unpack_into(f.data(), to);
        if self.views && r.is_ok() {
            // Its packets view it: kept, unchanged, until `reclaim`.
            self.held.push(f);
        } else {
            pool.free(f);
        }
        r
    }

    fn unpack_into(&mut self, d: &[u8], to: &mut Batch) -> Result<(), String> {
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
            let mut p = self.stock.alloc_raw_for(len).ok_or_else(|| {
                "no buffer to unpack an in-process aggregate into (a stage kept packets)"
                    .to_string()
            })?;
            if p.capacity() == self.small {
                self.lent_small += 1;
            } else {
                self.lent_big += 1;
            }
            let set = if self.views {
                // SAFETY: `bytes` lie in a frame that `unpack` keeps in `held`, never
                // changed, until `reclaim` has given every packet of the chunk other
                // bytes (the last stage frees them all before it runs); the frame's
                // buffer is a box, so moving the frame moves no byte.
                unsafe { p.set_view_unchecked(bytes) }
            } else {
                p.set_bytes(bytes)
            };
            if !set || !get_meta(&h[RECORD..], p.meta_mut()) {
                self.stock.free(p);
                return Err(bad());
            }
            to.push(p);
            self.unpacked += 1;
            at = from + len + (4 - len % 4) % 4;
        }
        Ok(())
    }

    /// After a chunk: takes back from `pool` (what the stage freed) as many buffers of
    /// each size as were lent; the rest stays in `pool` for stage 1.
    pub fn reclaim(&mut self, pool: &mut Pool) {
        if self.lent_small + self.lent_big == 0 && self.held.is_empty() {
            return;
        }
        while let Some(mut p) = pool.alloc_raw() {
            if p.is_view() {
                // No freed packet leaves still viewing a frame.
                p.set_bytes(&[]);
            }
            if p.capacity() == self.small && self.lent_small > 0 {
                self.lent_small -= 1;
                self.stock.free(p);
            } else if p.capacity() > self.small && self.lent_big > 0 {
                self.lent_big -= 1;
                self.stock.free(p);
            } else {
                self.sort.push(p);
            }
        }
        for p in self.sort.drain(..) {
            pool.free(p);
        }
        if self.lent_small + self.lent_big == 0 {
            // Every packet of the frames was freed and views none: the frames go back.
            for f in self.held.drain(..) {
                pool.free(f);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn a_batch_packs_into_frames_and_comes_back_with_its_metadata() {
        let mut pool = Pool::new(64, 1500);
        let mut b = Batch::new();
        for i in 0..5u8 {
            let p = pkt(&mut pool, i, 60 + usize::from(i), u64::from(i));
            b.push(p);
        }
        let mut packer = StagePacker::new(pool.max_packet(), 32);
        let out: Vec<Packed> = packer.pack(&mut b, &mut pool).collect();
        // One frame of five, its packets' buffers back in the pool.
        assert_eq!(out.len(), 1);
        assert_eq!(pool.available(), 63);
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
                plain: 0
            }
        );
        let mut held = Pool::holding(128);
        let mut u = StageUnpacker::new(1500, 128, false);
        let mut to = Batch::new();
        u.unpack(f, &mut to, &mut held).unwrap();
        assert_eq!(held.available(), 1, "the frame is freed");
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
        // The stage frees them; the stock takes back five, the frame stays for stage 1.
        for p in to.drain() {
            held.free(p);
        }
        u.reclaim(&mut held);
        assert_eq!(held.available(), 1);
        assert_eq!(u.stock.available(), u.stock.size());
    }

    #[test]
    fn a_lone_packet_a_too_large_one_and_no_frame_buffer_go_as_they_are() {
        let mut pool = Pool::new(4, 1500);
        let mut packer = StagePacker::new(pool.max_packet(), 32);
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
        // Pool empty: two small packets cannot get a frame and go as they are.
        let mut b = Batch::new();
        b.push(pkt(&mut pool, 4, 60, 0));
        assert_eq!(pool.available(), 0);
        let (Packed::Plain(p) | Packed::Frame(p)) = out.into_iter().next().unwrap();
        b.push(p);
        let out3: Vec<Packed> = packer.pack(&mut b, &mut pool).collect();
        assert!(matches!(out3[..], [Packed::Plain(_), Packed::Plain(_)]));
        assert_eq!(packer.c.frames, 0);
        assert_eq!(packer.c.plain, 5);
    }

    #[test]
    fn views_read_the_frame_copy_on_change_and_the_frame_waits_for_its_packets() {
        let mut pool = Pool::new(64, 1500);
        let mut b = Batch::new();
        for i in 0..3u8 {
            let p = pkt(&mut pool, i + 1, 100, u64::from(i));
            b.push(p);
        }
        let mut packer = StagePacker::new(pool.max_packet(), 32);
        let Some(Packed::Frame(f)) = packer.pack(&mut b, &mut pool).next() else {
            panic!("not a frame");
        };
        let mut held = Pool::holding(128);
        let mut u = StageUnpacker::new(1500, 128, true);
        let mut to = Batch::new();
        u.unpack(f, &mut to, &mut held).unwrap();
        assert_eq!(
            held.available(),
            0,
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
        // The three buffers back in the stock, none viewing; the frame back for stage 1.
        assert_eq!(held.available(), 1);
        assert!(u.held.is_empty());
        assert_eq!(u.stock.available(), u.stock.size());
    }

    #[test]
    fn a_malformed_frame_is_an_error_not_a_panic() {
        let mut held = Pool::holding(8);
        let mut u = StageUnpacker::new(1500, 8, false);
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
        assert!(to.is_empty());
    }
}
