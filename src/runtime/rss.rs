//! Where each record of a replayed trace goes with N workers: a symmetric flow hash onto
//! an indirection table of [`BUCKETS`] buckets, each owned by one worker, as a NIC's RSS
//! table (and VPP's handoff) map a hash to a queue through a table rather than `hash % N`.
//!
//! - The hash: IP packets by their two addresses, ordered (both directions of a
//!   connection, and every fragment of a datagram, get one hash); other Ethernet frames by
//!   their two MAC addresses, ordered; ports are left out (later fragments carry none).
//!   FNV-1a, then murmur3's finaliser: FNV alone leaves the high bits nearly constant when
//!   addresses differ only in their last byte (on the 4sics profile one of two workers got
//!   80 % of the packets). Frames with neither go to worker 0.
//! - The table, balanced (RSS++'s idea, done once per replay): each bucket's weight is
//!   its packets and bytes in a bounded sample of the trace (every ⌈R / [`SAMPLE`]⌉-th
//!   record, so at most [`SAMPLE`] records from the whole file), and buckets are given out
//!   heaviest first, each to the worker it leaves least loaded ([`balance`]; ties: lowest
//!   bucket, lowest worker). Buckets the sample never saw go round robin. A bucket is a set of whole address pairs,
//!   so a flow's two directions stay on one worker; the same file and N give the same
//!   placement on every run and machine. Nothing is tuned to a trace: the table is
//!   computed from whatever file is replayed.

use crate::io::Record;
use crate::packet::{L3Kind, Layers, LinkKind};

/// Buckets of the indirection table: enough that one bucket is a small part of the load
/// (a NIC's table has 128–512 entries).
pub const BUCKETS: usize = 512;

/// Most records the weights are taken from.
pub const SAMPLE: usize = 65_536;

/// The bucket of frames without addresses: always worker 0.
const NONE: u16 = u16::MAX;

/// The symmetric flow hash of `data`, or `None` for a frame without addresses.
#[inline]
pub fn flow_hash(link: LinkKind, data: &[u8]) -> Option<u64> {
    let l = Layers::parse(link, data);
    let o = l.l3_off as usize;
    let (a, b): (&[u8], &[u8]) = match l.l3 {
        L3Kind::Ipv4 if data.len() >= o + 20 => (&data[o + 12..o + 16], &data[o + 16..o + 20]),
        L3Kind::Ipv6 if data.len() >= o + 40 => (&data[o + 8..o + 24], &data[o + 24..o + 40]),
        _ if l.has_ethernet() && data.len() >= 12 => (&data[0..6], &data[6..12]),
        _ => return None,
    };
    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &x in lo.iter().chain(hi) {
        h = (h ^ u64::from(x)).wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    Some(h ^ (h >> 33))
}

/// The table bucket of `data` ([`NONE`] without addresses).
#[inline]
fn bucket_of(link: LinkKind, data: &[u8]) -> u16 {
    flow_hash(link, data).map_or(NONE, |h| (h as usize % BUCKETS) as u16)
}

/// Every record's bucket and the table that maps buckets to workers.
pub struct Placement {
    buckets: Vec<u16>,
    owner: [u8; BUCKETS],
}

impl Placement {
    /// Hashes every record of the trace (in `workers` slices on as many threads: on one
    /// thread this serial step alone held two workers well under twice one's rate; a slice
    /// whose thread cannot start is hashed here), then balances the table on the sample.
    pub fn of_trace(link: LinkKind, bytes: &[u8], recs: &[Record], workers: usize) -> Placement {
        let workers = workers.clamp(1, super::shard::MAX_WORKERS);
        let mut buckets = vec![NONE; recs.len()];
        let per = recs.len().div_ceil(workers).max(1);
        let hash = |o: &mut [u16], r: &[Record]| {
            for (x, r) in o.iter_mut().zip(r) {
                *x = bucket_of(
                    link,
                    &bytes[r.off as usize..r.off as usize + r.caplen as usize],
                );
            }
        };
        let mut failed = Vec::new();
        std::thread::scope(|s| {
            let mut slices = buckets.chunks_mut(per).zip(recs.chunks(per)).enumerate();
            let mine = slices.next();
            for (k, (o, r)) in slices {
                let started = std::thread::Builder::new()
                    .name(format!("catena-rss{k}"))
                    .spawn_scoped(s, move || hash(o, r));
                if started.is_err() {
                    failed.push(k);
                }
            }
            if let Some((_, (o, r))) = mine {
                hash(o, r);
            }
        });
        for k in failed {
            let lo = k * per;
            let hi = (lo + per).min(recs.len());
            hash(&mut buckets[lo..hi], &recs[lo..hi]);
        }
        let owner = balance(&buckets, recs, workers);
        Placement { buckets, owner }
    }

    /// The worker of record `i`.
    #[inline]
    pub fn worker(&self, i: usize) -> usize {
        match self.buckets[i] {
            NONE => 0,
            b => usize::from(self.owner[usize::from(b)]),
        }
    }
}

/// The table: each bucket's packets and bytes in the sample; buckets heaviest first
/// (packets and bytes, each as a share of the sample's), each to the worker whose larger
/// share (of packets or of bytes) stays the smallest. Both, because an NF's work per
/// packet has a fixed part and a part that grows with the bytes (copies, checksums,
/// prefetching every line): on the merged trace, packets alone gave 50.0 % of the
/// packets but 55.8 % of the bytes to one worker; both give 50.1 % and 51.1 %.
fn balance(buckets: &[u16], recs: &[Record], workers: usize) -> [u8; BUCKETS] {
    let mut owner = [0u8; BUCKETS];
    if workers <= 1 {
        return owner;
    }
    let step = buckets.len().div_ceil(SAMPLE).max(1);
    // (packets, bytes) per bucket and per worker.
    let mut weight = [(0u64, 0u64); BUCKETS];
    let mut load = vec![(0u64, 0u64); workers];
    for (&b, r) in buckets.iter().zip(recs).step_by(step) {
        let w = match b {
            NONE => &mut load[0],
            b => &mut weight[usize::from(b)],
        };
        w.0 += 1;
        w.1 += u64::from(r.caplen);
    }
    let total = weight
        .iter()
        .chain(&load)
        .fold((0u64, 0u64), |t, w| (t.0 + w.0, t.1 + w.1));
    let (tp, tb) = (u128::from(total.0.max(1)), u128::from(total.1.max(1)));
    // Shares compared over the common denominator tp · tb, in integers: the same table
    // on every machine.
    let share = |(p, b): (u64, u64)| (u128::from(p) * tb, u128::from(b) * tp);
    let mut order: Vec<usize> = (0..BUCKETS).collect();
    order.sort_by_key(|&b| {
        let (p, y) = share(weight[b]);
        (std::cmp::Reverse(p + y), b)
    });
    for b in order {
        let (wp, wb) = weight[b];
        let w = if wp == 0 {
            b % workers
        } else {
            (0..workers)
                .min_by_key(|&w| {
                    let (p, y) = share((load[w].0 + wp, load[w].1 + wb));
                    (p.max(y), w)
                })
                .unwrap_or(0)
        };
        owner[b] = w as u8;
        load[w].0 += wp;
        load[w].1 += wb;
    }
    owner
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::io::{PcapHeader, Trace};

    /// A minimal Ethernet/IPv4/TCP frame (also used by `shard`'s tests).
    pub(crate) fn ipv4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
        let mut f = vec![0u8; 54];
        f[12] = 8;
        f[14] = 0x45;
        f[16..18].copy_from_slice(&40u16.to_be_bytes());
        f[22] = 64;
        f[23] = 6;
        f[26..30].copy_from_slice(&src);
        f[30..34].copy_from_slice(&dst);
        f[34..36].copy_from_slice(&sport.to_be_bytes());
        f[36..38].copy_from_slice(&dport.to_be_bytes());
        f[46] = 0x50;
        f
    }

    fn place(frames: &[Vec<u8>], workers: usize) -> Vec<usize> {
        let t = Trace::from_packets(
            LinkKind::Ethernet,
            PcapHeader::new(1, false),
            frames.iter().enumerate().map(|(i, f)| (i as u64, &f[..])),
        );
        let (bytes, recs) = t.raw();
        let p = Placement::of_trace(LinkKind::Ethernet, bytes, recs, workers);
        (0..frames.len()).map(|i| p.worker(i)).collect()
    }

    #[test]
    fn both_directions_land_on_one_worker() {
        let mut frames = Vec::new();
        for i in 0..200u8 {
            let a = [10, 0, i, 1];
            let b = [192, 168, 1, i.wrapping_mul(7)];
            frames.push(ipv4(a, b, 1000 + u16::from(i), 80));
            frames.push(ipv4(b, a, 80, 1000 + u16::from(i)));
        }
        let w = place(&frames, 4);
        for (i, pair) in w.chunks(2).enumerate() {
            assert_eq!(pair[0], pair[1], "flow {i}");
        }
        // Every worker gets some of 200 host pairs.
        for k in 0..4 {
            assert!(w.contains(&k), "worker {k} got nothing");
        }
    }

    /// Hosts whose addresses differ only in the last byte, with very unequal weights (as
    /// the 4sics profile's ICS hosts): the plain hash put 80 % of such a load on one of
    /// two workers; the balanced table must come within a bucket's weight of half.
    #[test]
    fn the_table_balances_unequal_host_pairs() {
        let mut frames = Vec::new();
        for i in 0..40u8 {
            // Pair i carries 40 − i packets.
            for _ in 0..(40 - i) {
                frames.push(ipv4([10, 0, 0, i], [10, 0, 0, 200], 502, 40000));
            }
        }
        let w = place(&frames, 2);
        let ones = w.iter().filter(|&&k| k == 1).count();
        let n = frames.len();
        // The greedy leaves the workers at most the heaviest bucket apart.
        let mut weight = [0usize; BUCKETS];
        for f in &frames {
            weight[usize::from(bucket_of(LinkKind::Ethernet, f))] += 1;
        }
        let heaviest = weight.iter().max().copied().unwrap_or(0);
        assert!(
            ones.abs_diff(n - ones) <= heaviest,
            "worker 1 got {ones} of {n} packets (heaviest bucket {heaviest})"
        );
        // And it is deterministic.
        assert_eq!(w, place(&frames, 2));
    }

    #[test]
    fn non_ip_and_short_frames_are_placed_without_panic() {
        assert_eq!(flow_hash(LinkKind::Ethernet, &[]), None);
        assert_eq!(flow_hash(LinkKind::RawIp, &[0x45, 0, 0]), None);
        let mut arp = vec![0u8; 42];
        arp[0..6].copy_from_slice(&[1, 2, 3, 4, 5, 6]);
        arp[6..12].copy_from_slice(&[6, 5, 4, 3, 2, 1]);
        arp[12] = 8;
        arp[13] = 6;
        // Symmetric on MAC addresses too.
        let mut back = arp.clone();
        back[0..6].copy_from_slice(&arp[6..12]);
        back[6..12].copy_from_slice(&arp[0..6]);
        assert!(flow_hash(LinkKind::Ethernet, &arp).is_some());
        assert_eq!(
            flow_hash(LinkKind::Ethernet, &arp),
            flow_hash(LinkKind::Ethernet, &back)
        );
        let w = place(&[vec![0u8; 3], arp, back], 4);
        assert_eq!(w[0], 0);
        assert_eq!(w[1], w[2]);
    }
}
