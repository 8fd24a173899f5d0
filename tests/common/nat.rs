//! One packet through a NAT, for the NAT tests that check literal bytes.

use catena::nfs::{Context, Nat, Nf};
use catena::packet::{Batch, Packet, Verdict};

/// Runs one packet at capture time `ts`; the bytes out or the drop reason.
pub fn step(n: &mut Nat, bytes: &[u8], ts: u64) -> Result<Vec<u8>, u8> {
    let mut p = Packet::from_bytes(bytes);
    p.meta_mut().ts_ns = ts;
    p.meta_mut().now_ns = ts;
    let mut b = Batch::new();
    b.push(p);
    n.process(&mut b, &Context { ports: 2 });
    let p = b.iter().next().unwrap();
    match p.meta().verdict {
        Verdict::Out(_) => Ok(p.data().to_vec()),
        Verdict::Drop(r) => Err(r),
    }
}
