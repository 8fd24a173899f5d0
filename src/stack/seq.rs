//! TCP sequence-number arithmetic modulo 2^32 (RFC 9293 §3.4): comparisons hold across
//! the wrap as long as the two numbers are less than 2^31 apart.

/// `b - a` as a signed distance: positive when `b` is after `a`.
#[inline]
pub fn diff(a: u32, b: u32) -> i64 {
    i64::from(b.wrapping_sub(a) as i32)
}

/// `a` comes strictly before `b`.
#[inline]
pub fn lt(a: u32, b: u32) -> bool {
    diff(a, b) > 0
}

/// `a` comes before or is `b`.
#[inline]
pub fn le(a: u32, b: u32) -> bool {
    diff(a, b) >= 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_across_the_wrap() {
        assert!(lt(u32::MAX - 5, 3));
        assert!(!lt(3, u32::MAX - 5));
        assert_eq!(diff(u32::MAX - 1, 2), 4);
        assert_eq!(diff(2, u32::MAX - 1), -4);
        assert!(le(7, 7) && !lt(7, 7));
    }
}
