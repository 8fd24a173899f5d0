//! PA-Flow's aggregated frame (docs/paflow.md): an Ethernet frame of EtherType 0x88B5
//! whose payload lists inner packets. Layout, offsets from the frame's start:
//!
//! ```text
//! 0  dst MAC, src MAC (the first inner packet's)   12  EtherType 0x88B5
//! 14 version (1)   15 reserved (0)   16 count (u16 BE, ≥ 1)
//! 18 records: len (u16 BE, ≥ 1), reserved (u16, 0), then `len` bytes, zero-padded to 4
//! ```
//!
//! Records start at 18 + 4k, so every inner packet starts 2 bytes past a 4-byte boundary,
//! like a frame in a buffer, and its IPv4 header (at +14) is 4-byte aligned. The parser
//! never trusts a length: a record that does not fit ends the frame as bad.

/// A local experimental EtherType (IEEE 802 "local experimental 2").
pub const ETHERTYPE: u16 = 0x88B5;
pub const VERSION: u8 = 1;
/// Ethernet header plus the aggregate header: where the first record starts.
pub const HEADER: usize = 18;
/// Each record's header (length and a reserved word).
pub const RECORD: usize = 4;
/// The default and the largest aggregated frame, in bytes (without FCS).
pub const DEFAULT_SIZE: usize = 9000;
pub const MAX_SIZE: usize = 65535;
/// The smallest frame size that still holds two minimal Ethernet frames.
pub const MIN_SIZE: usize = HEADER + 2 * (RECORD + 60);

#[inline]
fn pad4(n: usize) -> usize {
    (n + 3) & !3
}

/// True when `frame` carries EtherType 0x88B5 (an aggregate, or a frame a sender must
/// wrap so that the receiver does not mistake it for one).
#[inline]
pub fn is_aggregate(frame: &[u8]) -> bool {
    frame.len() >= 14 && u16::from_be_bytes([frame[12], frame[13]]) == ETHERTYPE
}

/// Room one packet of `len` bytes takes in an aggregate.
#[inline]
pub fn record_room(len: usize) -> usize {
    RECORD + pad4(len)
}

/// Builds one aggregated frame in a buffer allocated once (`size` bytes).
pub struct Packer {
    buf: Vec<u8>,
    size: usize,
    count: u16,
}

impl Packer {
    pub fn new(size: usize) -> Packer {
        let size = size.clamp(MIN_SIZE, MAX_SIZE);
        Packer {
            buf: Vec::with_capacity(size),
            size,
            count: 0,
        }
    }

    pub fn size(&self) -> usize {
        self.size
    }

    pub fn count(&self) -> usize {
        usize::from(self.count)
    }

    /// A packet of `len` bytes fits in an aggregate of this size with nothing else.
    pub fn can_hold(&self, len: usize) -> bool {
        len > 0 && HEADER + record_room(len) <= self.size
    }

    /// Appends `pkt` as a record; false (nothing changed) when it does not fit.
    pub fn push(&mut self, pkt: &[u8]) -> bool {
        if pkt.is_empty() || self.count == u16::MAX {
            return false;
        }
        if self.count == 0 {
            self.buf.clear();
            let mut h = [0u8; HEADER];
            // The first packet's addresses: a switch between stages forwards the
            // aggregate where it would have forwarded the packet.
            let n = pkt.len().min(12);
            h[..n].copy_from_slice(&pkt[..n]);
            h[12..14].copy_from_slice(&ETHERTYPE.to_be_bytes());
            h[14] = VERSION;
            self.buf.extend_from_slice(&h);
        }
        let end = self.buf.len() + RECORD + pkt.len();
        if end > self.size {
            return false;
        }
        self.buf
            .extend_from_slice(&(pkt.len() as u16).to_be_bytes());
        self.buf.extend_from_slice(&[0, 0]);
        self.buf.extend_from_slice(pkt);
        // Pad to 4 unless that would pass the size (the last record may end unpadded).
        let padded = (HEADER + pad4(self.buf.len() - HEADER)).min(self.size);
        self.buf.resize(padded, 0);
        self.count += 1;
        self.buf[16..18].copy_from_slice(&self.count.to_be_bytes());
        true
    }

    /// The frame built so far (`count() >= 1`).
    pub fn frame(&self) -> &[u8] {
        &self.buf
    }

    /// The only packet, as it was pushed (for a lone packet sent unaggregated).
    pub fn only(&self) -> &[u8] {
        let len = u16::from_be_bytes([self.buf[HEADER], self.buf[HEADER + 1]]) as usize;
        &self.buf[HEADER + RECORD..HEADER + RECORD + len]
    }

    pub fn clear(&mut self) {
        self.count = 0;
        self.buf.clear();
    }
}

/// Why an aggregated frame was refused (the packets before the fault are kept).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bad {
    /// Shorter than the 18-byte header.
    Short,
    /// Version other than 1 or a reserved byte set.
    Version,
    /// Zero inner packets announced.
    Empty,
    /// A record's header or bytes run past the frame's end.
    Truncated,
    /// A record of length 0 or with its reserved word set.
    Record,
}

/// The inner packets of an aggregated frame, in order; a fault ends it with one `Err`.
pub struct Records<'a> {
    frame: &'a [u8],
    at: usize,
    left: u16,
    failed: bool,
}

/// Reads an aggregated frame (`is_aggregate(frame)` should hold).
pub fn records(frame: &[u8]) -> Records<'_> {
    Records {
        frame,
        at: HEADER,
        left: 0,
        failed: false,
    }
    .start()
}

impl<'a> Records<'a> {
    fn start(mut self) -> Self {
        self.left = if self.frame.len() >= HEADER {
            u16::from_be_bytes([self.frame[16], self.frame[17]])
        } else {
            0
        };
        self
    }

    fn fail(&mut self, why: Bad) -> Option<Result<&'a [u8], Bad>> {
        self.failed = true;
        Some(Err(why))
    }

    /// Where the next record starts (to resume after a pause).
    pub fn offset(&self) -> usize {
        self.at
    }

    /// Resumes reading `frame` at a record offset from [`offset`](Self::offset), with
    /// `left` records still to come.
    pub fn resume(frame: &'a [u8], at: usize, left: u16) -> Records<'a> {
        Records {
            frame,
            at,
            left,
            failed: false,
        }
    }

    pub fn left(&self) -> u16 {
        self.left
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<&'a [u8], Bad>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let f = self.frame;
        if self.at == HEADER {
            if f.len() < HEADER {
                return self.fail(Bad::Short);
            }
            if f[14] != VERSION || f[15] != 0 {
                return self.fail(Bad::Version);
            }
            if self.left == 0 {
                return self.fail(Bad::Empty);
            }
        }
        if self.left == 0 {
            return None;
        }
        let Some(h) = f.get(self.at..self.at + RECORD) else {
            return self.fail(Bad::Truncated);
        };
        let len = u16::from_be_bytes([h[0], h[1]]) as usize;
        if len == 0 || h[2] != 0 || h[3] != 0 {
            return self.fail(Bad::Record);
        }
        let from = self.at + RECORD;
        let Some(pkt) = f.get(from..from + len) else {
            return self.fail(Bad::Truncated);
        };
        self.at = HEADER + pad4(from + len - HEADER);
        self.left -= 1;
        Some(Ok(pkt))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: [u8; 14] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0x08, 0x00];

    fn all(f: &[u8]) -> (Vec<Vec<u8>>, Option<Bad>) {
        let mut ok = Vec::new();
        let mut bad = None;
        for r in records(f) {
            match r {
                Ok(p) => ok.push(p.to_vec()),
                Err(b) => bad = Some(b),
            }
        }
        (ok, bad)
    }

    #[test]
    fn two_packets_have_the_documented_bytes() {
        let mut p = Packer::new(9000);
        assert!(p.push(&A));
        assert!(p.push(&[0xaa, 0xbb, 0xcc]));
        #[rustfmt::skip]
        let want: &[u8] = &[
            1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0x88, 0xb5, // Ethernet: A's addresses
            1, 0, 0, 2,                                       // version, reserved, count
            0, 14, 0, 0,                                      // record 1: 14 bytes
            1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0x08, 0x00,
            0, 0,                                             // pad to 4
            0, 3, 0, 0, 0xaa, 0xbb, 0xcc, 0,                  // record 2: 3 bytes, pad
        ];
        assert_eq!(p.frame(), want);
        assert!(is_aggregate(p.frame()));
        assert_eq!(
            all(p.frame()),
            (vec![A.to_vec(), vec![0xaa, 0xbb, 0xcc]], None)
        );
        // Inner packets start 2 past a 4-byte boundary (IPv4 headers aligned).
        assert_eq!((HEADER + RECORD) % 4, 2);
    }

    #[test]
    fn a_full_frame_refuses_the_next_packet() {
        let mut p = Packer::new(MIN_SIZE);
        let pkt = [7u8; 60];
        assert!(p.push(&pkt));
        assert!(p.push(&pkt));
        assert!(!p.push(&pkt));
        assert_eq!(p.count(), 2);
        assert!(p.frame().len() <= MIN_SIZE);
        assert!(!p.can_hold(MIN_SIZE));
    }

    #[test]
    fn truncated_frame_keeps_the_packets_before_the_fault() {
        let mut p = Packer::new(9000);
        for n in [60usize, 61, 62] {
            assert!(p.push(&vec![n as u8; n]));
        }
        let f = p.frame().to_vec();
        // Cut inside the third record's bytes.
        let cut = f.len() - 10;
        let (ok, bad) = all(&f[..cut]);
        assert_eq!(ok, vec![vec![60u8; 60], vec![61u8; 61]]);
        assert_eq!(bad, Some(Bad::Truncated));
        // Cut inside the second record's header.
        let (ok, bad) = all(&f[..HEADER + RECORD + 60 + 2]);
        assert_eq!((ok.len(), bad), (1, Some(Bad::Truncated)));
    }

    #[test]
    fn inconsistent_headers_are_refused() {
        // Count says 3, two records present.
        #[rustfmt::skip]
        let f: &[u8] = &[
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x88, 0xb5, 1, 0, 0, 3,
            0, 2, 0, 0, 9, 9, 0, 0,
            0, 1, 0, 0, 8, 0, 0, 0,
        ];
        assert_eq!(all(f), (vec![vec![9, 9], vec![8]], Some(Bad::Truncated)));
        // Length larger than the frame.
        let mut g = f.to_vec();
        g[18..20].copy_from_slice(&[0xff, 0xff]);
        assert_eq!(all(&g), (vec![], Some(Bad::Truncated)));
        // Zero length, reserved set, bad version, zero count, short.
        let mut z = f.to_vec();
        z[18..20].copy_from_slice(&[0, 0]);
        assert_eq!(all(&z).1, Some(Bad::Record));
        let mut r = f.to_vec();
        r[21] = 1;
        assert_eq!(all(&r).1, Some(Bad::Record));
        let mut v = f.to_vec();
        v[14] = 2;
        assert_eq!(all(&v), (vec![], Some(Bad::Version)));
        let mut e = f.to_vec();
        e[16..18].copy_from_slice(&[0, 0]);
        assert_eq!(all(&e), (vec![], Some(Bad::Empty)));
        assert_eq!(all(&f[..17]), (vec![], Some(Bad::Short)));
    }

    #[test]
    fn trailing_bytes_after_the_last_record_are_ignored() {
        // Ethernet pads short frames to 60 bytes.
        let mut p = Packer::new(9000);
        assert!(p.push(&[1]));
        assert!(p.push(&[2]));
        let mut f = p.frame().to_vec();
        f.resize(60, 0);
        assert_eq!(all(&f), (vec![vec![1], vec![2]], None));
    }

    #[test]
    fn resume_continues_where_a_pause_left() {
        let mut p = Packer::new(9000);
        for n in 1..=5u8 {
            assert!(p.push(&[n; 20]));
        }
        let f = p.frame();
        let mut r = records(f);
        assert_eq!(r.next(), Some(Ok(&[1u8; 20][..])));
        assert_eq!(r.next(), Some(Ok(&[2u8; 20][..])));
        let (at, left) = (r.offset(), r.left());
        let rest: Vec<_> = Records::resume(f, at, left)
            .map(|x| x.unwrap()[0])
            .collect();
        assert_eq!(rest, vec![3, 4, 5]);
    }

    proptest::proptest! {
        #[test]
        fn random_bytes_never_panic(mut f in proptest::collection::vec(proptest::num::u8::ANY, 0..2048)) {
            if f.len() >= 14 {
                f[12] = 0x88;
                f[13] = 0xb5;
            }
            let mut total = 0;
            for p in records(&f).flatten() {
                total += RECORD + p.len();
                proptest::prop_assert!(!p.is_empty());
            }
            proptest::prop_assert!(total <= f.len());
        }

        #[test]
        fn packed_packets_come_back(pkts in proptest::collection::vec(
            proptest::collection::vec(proptest::num::u8::ANY, 1..300), 1..40)) {
            let mut p = Packer::new(4096);
            let mut packed = Vec::new();
            for x in &pkts {
                if !p.push(x) {
                    break;
                }
                packed.push(x.clone());
            }
            let (ok, bad) = all(p.frame());
            proptest::prop_assert_eq!(ok, packed);
            proptest::prop_assert_eq!(bad, None);
        }
    }
}
