//! Reading the text files a run is given (chain files, rule files, `ctl --file`) up to a
//! bound: a device or pipe that never ends (`/dev/zero`, `/dev/urandom`) or a huge file
//! is refused with one line at the bound instead of filling the memory and hanging.

use std::io::{Error, ErrorKind, Read};
use std::path::Path;

/// The longest chain or rule file read: far above any real one (a whole Emerging Threats
/// rule set is about 40 MB), low enough that reading up to it costs a fraction of a second.
pub const MAX_TEXT_FILE: u64 = 256 << 20;

/// The file at `path` as text, refused past `max` bytes.
pub fn read_text(path: &Path, max: u64) -> std::io::Result<String> {
    let f = std::fs::File::open(path)?;
    // Sized once from the file's length (as `fs::read_to_string` does), up to the bound.
    let len = f.metadata().map_or(0, |m| m.len().min(max));
    read_into(String::with_capacity(len as usize + 1), f, max)
}

/// What `r` gives until its end, as text, refused past `max` bytes (one byte more is read
/// to tell "exactly `max`" from "longer").
pub fn read_text_from(r: impl Read, max: u64) -> std::io::Result<String> {
    read_into(String::new(), r, max)
}

fn read_into(mut text: String, r: impl Read, max: u64) -> std::io::Result<String> {
    r.take(max.saturating_add(1)).read_to_string(&mut text)?;
    if text.len() as u64 > max {
        return Err(Error::new(
            ErrorKind::InvalidData,
            format!("longer than {}, the most read of a text file", size(max)),
        ));
    }
    Ok(text)
}

fn size(b: u64) -> String {
    match b {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b => format!("{b} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn read_whole_iff_within_the_bound_and_text(
            bytes in proptest::collection::vec(any::<u8>(), 0..64),
            max in 0u64..80,
        ) {
            match read_text_from(&bytes[..], max) {
                Ok(t) => {
                    prop_assert!(bytes.len() as u64 <= max);
                    prop_assert_eq!(t.as_bytes(), &bytes[..]);
                }
                Err(_) => prop_assert!(
                    bytes.len() as u64 > max || std::str::from_utf8(&bytes).is_err()
                ),
            }
        }
    }

    #[test]
    fn an_endless_reader_is_refused_at_the_bound() {
        let e = read_text_from(std::io::repeat(b'a'), 1 << 20).unwrap_err();
        assert_eq!(
            e.to_string(),
            "longer than 1 MiB, the most read of a text file"
        );
    }

    #[test]
    fn text_of_exactly_the_bound_is_read_whole() {
        assert_eq!(read_text_from(&b"abc"[..], 3).unwrap(), "abc");
        let e = read_text_from(&b"abcd"[..], 3).unwrap_err();
        assert_eq!(
            e.to_string(),
            "longer than 3 bytes, the most read of a text file"
        );
    }

    #[test]
    fn bytes_that_are_not_utf8_stay_an_error() {
        let e = read_text_from(&[0xff, 0xfe][..], 10).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidData);
    }
}
