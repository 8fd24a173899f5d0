//! Internet checksum (RFC 1071), pseudo-header sums, and incremental updates (RFC 1624).
//!
//! Conventions: a *sum* is the folded 16-bit one's-complement sum of big-endian words (not
//! complemented); a *checksum* is its complement, the value stored in a header. A run of
//! data checksums to "valid" when its sum (pseudo header included) is `0xffff`.
//!
//! Multi-part sums: combine the parts with [`add`]; every part except the last must have
//! even length (an odd part is padded with a zero byte, as RFC 1071 says for the end).

/// One's-complement sum of `data` as big-endian 16-bit words, folded to 16 bits.
///
/// Adds 32-bit words into a 64-bit accumulator (no carry handling in the loop, so the
/// compiler can unroll/vectorise it) in native byte order; the one's-complement sum is
/// byte-order independent (RFC 1071 §2(B)), so one byte swap at the end fixes it up.
#[inline]
pub fn sum(data: &[u8]) -> u16 {
    let mut acc: u64 = 0;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_ne_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        // Split into two u32 halves so the u64 accumulator cannot overflow.
        acc += (w & 0xffff_ffff) + (w >> 32);
    }
    let mut rest = chunks.remainder();
    if rest.len() >= 4 {
        acc += u32::from_ne_bytes([rest[0], rest[1], rest[2], rest[3]]) as u64;
        rest = &rest[4..];
    }
    if rest.len() >= 2 {
        acc += u16::from_ne_bytes([rest[0], rest[1]]) as u64;
        rest = &rest[2..];
    }
    if let Some(&b) = rest.first() {
        // A trailing odd byte is the high byte of a big-endian word padded with zero.
        acc += u16::from_ne_bytes([b, 0]) as u64;
    }
    u16::from_be(fold64(acc))
}

/// Folds a wide accumulator of 16-bit words into 16 bits with end-around carry.
#[inline]
pub fn fold64(mut acc: u64) -> u16 {
    acc = (acc & 0xffff_ffff) + (acc >> 32);
    acc = (acc & 0xffff_ffff) + (acc >> 32);
    fold32(acc as u32)
}

/// Folds a 32-bit accumulator of 16-bit words into 16 bits with end-around carry.
#[inline]
pub fn fold32(mut acc: u32) -> u16 {
    acc = (acc & 0xffff) + (acc >> 16);
    acc = (acc & 0xffff) + (acc >> 16);
    acc as u16
}

/// One's-complement addition of two sums.
#[inline]
pub fn add(a: u16, b: u16) -> u16 {
    fold32(a as u32 + b as u32)
}

/// The checksum to store for `data`: complement of its sum.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    !sum(data)
}

/// Sum of the IPv4 pseudo header (RFC 793/768): addresses, zero+protocol, L4 length.
#[inline]
pub fn pseudo_v4(src: [u8; 4], dst: [u8; 4], proto: u8, len: u16) -> u16 {
    let acc = u32::from(u16::from_be_bytes([src[0], src[1]]))
        + u32::from(u16::from_be_bytes([src[2], src[3]]))
        + u32::from(u16::from_be_bytes([dst[0], dst[1]]))
        + u32::from(u16::from_be_bytes([dst[2], dst[3]]))
        + u32::from(proto)
        + u32::from(len);
    fold32(acc)
}

/// Sum of the IPv6 pseudo header (RFC 8200 §8.1): addresses, 32-bit upper-layer length,
/// next header.
#[inline]
pub fn pseudo_v6(src: &[u8; 16], dst: &[u8; 16], next_header: u8, len: u32) -> u16 {
    let acc = u64::from(sum(src))
        + u64::from(sum(dst))
        + u64::from(len >> 16)
        + u64::from(len & 0xffff)
        + u64::from(next_header);
    fold64(acc)
}

/// RFC 1624 eqn. 3: the new checksum after one 16-bit word of the data changes from `old`
/// to `new`. `HC' = ~(~HC + ~m + m')`; unlike eqn. 2 it never produces the -0/+0 mix-up
/// for a non-zero header.
#[inline]
pub fn update16(csum: u16, old: u16, new: u16) -> u16 {
    !fold32(u32::from(!csum) + u32::from(!old) + u32::from(new))
}

/// As [`update16`], for an aligned 32-bit field (e.g. an IPv4 address or a TCP sequence).
#[inline]
pub fn update32(csum: u16, old: u32, new: u32) -> u16 {
    let acc = u64::from(!csum)
        + u64::from(!(old >> 16) & 0xffff)
        + u64::from(!old & 0xffff)
        + u64::from(new >> 16)
        + u64::from(new & 0xffff);
    !fold64(acc)
}

/// As [`update16`], for a byte range replaced by another of the same length (MAC or IPv6
/// address, a port pair, …). The range must start at an even offset of the checksummed
/// data (all header fields that checksums cover do); if the lengths differ or the length is
/// odd the shorter/odd tail is zero-padded, which is only right at the end of the data.
#[inline]
pub fn update_bytes(csum: u16, old: &[u8], new: &[u8]) -> u16 {
    // ~sum(old) is the one's-complement negative of the old words.
    !add(add(!csum, !sum(old)), sum(new))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: bytes 00 01 f2 03 f4 f5 f6 f7 sum to 0xddf2.
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(sum(&d), 0xddf2);
        assert_eq!(checksum(&d), !0xddf2);
        // Every split point and alignment gives the same answer.
        for n in 0..=d.len() {
            assert_eq!(sum(&d[..n]), fold32(d[..n].chunks(2).map(word).sum()));
        }
    }

    fn word(c: &[u8]) -> u32 {
        u32::from(c[0]) << 8 | u32::from(*c.get(1).unwrap_or(&0))
    }

    // A real IPv4 header (Wikipedia's example) whose checksum is 0xb861.
    const IPV4: [u8; 20] = [
        0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0xc7,
    ];

    #[test]
    fn ipv4_header_known_checksum() {
        assert_eq!(sum(&IPV4), 0xffff);
        let mut h = IPV4;
        h[10] = 0;
        h[11] = 0;
        assert_eq!(checksum(&h), 0xb861);
    }

    #[test]
    fn odd_lengths_pad_with_zero() {
        assert_eq!(sum(&[0xab]), 0xab00);
        assert_eq!(sum(&[0x01, 0x02, 0x03]), 0x0402);
        assert_eq!(sum(&[]), 0);
    }

    #[test]
    fn incremental_ttl_and_address() {
        // TTL 0x40 -> 0x3f: the word (ttl, proto) changes.
        let mut h = IPV4;
        let c = update16(0xb861, 0x4011, 0x3f11);
        h[8] = 0x3f;
        h[10] = 0;
        h[11] = 0;
        assert_eq!(c, checksum(&h));
        // Source 192.168.0.1 -> 10.1.2.3 via update32 and update_bytes.
        let c2 = update32(c, 0xc0a8_0001, 0x0a01_0203);
        assert_eq!(c2, update_bytes(c, &[192, 168, 0, 1], &[10, 1, 2, 3]));
        h[12..16].copy_from_slice(&[10, 1, 2, 3]);
        assert_eq!(c2, checksum(&h));
    }

    #[test]
    fn pseudo_headers() {
        let v4 = pseudo_v4([192, 168, 0, 1], [192, 168, 0, 199], 17, 0x5f);
        let mut b = vec![192, 168, 0, 1, 192, 168, 0, 199, 0, 17, 0, 0x5f];
        assert_eq!(v4, sum(&b));
        let s = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let d = [
            0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef,
        ];
        b.clear();
        b.extend_from_slice(&s);
        b.extend_from_slice(&d);
        b.extend_from_slice(&[0, 1, 0, 8, 0, 0, 0, 58]);
        assert_eq!(pseudo_v6(&s, &d, 58, 0x10008), sum(&b));
    }

    // +0 and -0 are the same one's-complement number; an all-zero payload makes a full
    // recompute give 0xffff where the incremental form may legitimately give 0x0000.
    fn same(a: u16, b: u16) -> bool {
        a == b || (a | b == 0xffff && (a == 0 || b == 0))
    }

    proptest::proptest! {
        #[test]
        fn incremental_equals_recompute(
            mut data in proptest::collection::vec(proptest::num::u8::ANY, 12..200),
            at in 0usize..100, new in proptest::collection::vec(proptest::num::u8::ANY, 16),
            n in 1usize..9,
        ) {
            // Bytes 0..2 hold the checksum; a field of 2n bytes at an even offset changes.
            data[0] = 0;
            data[1] = 0;
            let csum = checksum(&data);
            let len = 2 * n;
            proptest::prop_assume!(len + 2 <= data.len());
            let at = 2 + 2 * (at % ((data.len() - 2 - len) / 2 + 1));
            proptest::prop_assume!(at + len <= data.len());
            let old = data[at..at + len].to_vec();
            data[at..at + len].copy_from_slice(&new[..len]);
            let full = checksum(&data);
            proptest::prop_assert!(same(update_bytes(csum, &old, &new[..len]), full));
            if len == 2 {
                let (o, w) = (u16::from_be_bytes([old[0], old[1]]), u16::from_be_bytes([new[0], new[1]]));
                proptest::prop_assert!(same(update16(csum, o, w), full));
            }
            if len == 4 {
                let o = u32::from_be_bytes([old[0], old[1], old[2], old[3]]);
                let w = u32::from_be_bytes([new[0], new[1], new[2], new[3]]);
                proptest::prop_assert!(same(update32(csum, o, w), full));
            }
        }

        #[test]
        fn sum_matches_naive(data in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            proptest::prop_assert_eq!(sum(&data), fold32(data.chunks(2).map(word).sum()));
        }
    }
}
