//! The mapped reader's fast stretch (`MappedPcap::next_with` with a small `fits`, where a
//! chunk's records are shown inside the map once and their headers read unchecked)
//! gives the records the indexed reader (`Trace`) gives, refuses every record longer
//! than `fits` without handing it over, reports the chunk's bytes, and ends the input at
//! a bad record in the middle of a long file with the records before it taken and the
//! indexed reader's error.

use catena::io::{MappedPcap, Source, Trace};

/// A µs pcap of `n` records of lengths 60 to 1559, little- or big-endian.
fn pcap(n: usize, big_endian: bool) -> Vec<u8> {
    let w = |b: &mut Vec<u8>, v: u32| {
        b.extend(if big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        })
    };
    let mut b = Vec::new();
    w(&mut b, 0xa1b2_c3d4);
    b.extend(if big_endian {
        [0, 2, 0, 4]
    } else {
        [2, 0, 4, 0]
    });
    w(&mut b, 0);
    w(&mut b, 0);
    w(&mut b, 65535);
    w(&mut b, 1);
    for i in 0..n {
        let len = 60 + i * 37 % 1500;
        w(&mut b, i as u32 / 3);
        w(&mut b, i as u32 * 11 % 1_000_000);
        w(&mut b, len as u32);
        w(&mut b, len as u32 + 4);
        b.extend((0..len).map(|j| (i * 7 + j) as u8));
    }
    b
}

fn file(name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("catena-stretch-{}-{name}", std::process::id()));
    std::fs::write(&p, bytes).unwrap();
    p
}

/// Every record of one pass as (bytes, wire_len, ts): `next_with(32, fits)` first, and
/// a record it refuses taken alone by `next_chunk(1)`, as the one-worker run does.
fn read(m: &mut MappedPcap, fits: usize) -> Vec<(Vec<u8>, u32, u64)> {
    let all = m.lasting().unwrap();
    let mut v = Vec::new();
    loop {
        let mut got = Vec::new();
        let (n, bytes) = m.next_with(32, fits, |i, b, wire, ts| {
            assert_eq!(i, got.len());
            assert!(
                b.len() <= fits,
                "a record of {} bytes given, fits {fits}",
                b.len()
            );
            got.push((b.to_vec(), wire, ts));
            true
        });
        assert_eq!(n, got.len());
        let sum: usize = got.iter().map(|g| g.0.len()).sum();
        assert_eq!(bytes, sum as u64, "the chunk's bytes");
        if let (Some(lo), Some(hi)) = (got.iter().map(|g| g.2).min(), got.iter().map(|g| g.2).max())
        {
            m.widen_span(lo, hi);
        }
        v.extend(got);
        if n > 0 {
            continue;
        }
        let (_, recs, _) = m.next_chunk(1);
        let Some(r) = recs.first() else {
            return v;
        };
        assert!(r.caplen as usize > fits, "refused a record that fits");
        let o = r.off as usize;
        v.push((all[o..o + r.caplen as usize].to_vec(), r.wire_len, r.ts_ns));
    }
}

fn want(t: &Trace) -> Vec<(Vec<u8>, u32, u64)> {
    (0..t.len())
        .map(|i| {
            let r = &t.records()[i];
            (t.packet(i).to_vec(), r.wire_len, r.ts_ns)
        })
        .collect()
}

#[test]
fn the_checked_once_stretch_gives_the_indexed_readers_records_both_byte_orders() {
    for be in [false, true] {
        // 3,000 records (~2.4 MB): the stretch of 32 records of at most 1,000 bytes is
        // ~32 KB, so all but the last chunks are read the fast way; a third of the
        // records are longer than 1,000 and go the general way.
        let p = file(if be { "be" } else { "le" }, &pcap(3000, be));
        let t = Trace::open(&p).unwrap();
        let mut m = MappedPcap::open(&p).unwrap();
        let got = read(&mut m, 1000);
        assert_eq!(got.len(), 3000, "big-endian {be}");
        assert!(got == want(&t), "records differ, big-endian {be}");
        assert!(m.error().is_none());
        std::fs::remove_file(p).unwrap();
    }
}

#[test]
fn a_bad_record_inside_the_stretch_ends_the_input_there_with_the_good_ones_taken() {
    let mut bytes = pcap(3000, false);
    // Record 2,000's caplen made absurd: the stretch's single test passes (the map is
    // long), so the record is met inside it.
    let mut at = 24;
    for i in 0..2000 {
        at += 16 + 60 + i * 37 % 1500;
    }
    bytes[at + 8..at + 12].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
    let p = file("bad", &bytes);
    let t = Trace::open(&p).unwrap();
    assert_eq!(t.len(), 2000);
    let mut m = MappedPcap::open(&p).unwrap();
    let got = read(&mut m, 1000);
    assert_eq!(got.len(), 2000);
    assert!(got == want(&t), "records before the bad one differ");
    let e = m.error().map(|e| e.to_string());
    assert!(
        e.as_deref().is_some_and(|e| e.contains("absurd caplen")),
        "{e:?}"
    );
    assert_eq!(e, t.error().map(|e| e.to_string()));
    std::fs::remove_file(p).unwrap();
}
