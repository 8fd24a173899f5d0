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

/// A public address and port.
pub type Pair = ([u8; 4], u16);

/// The NAT model's per-packet check for runs whose pool changes mid-replay: each flow
/// keeps one public pair, taken from the pool in force when it started, and no two flows
/// of a protocol share one.
pub struct PublicPairs {
    pair: Vec<Option<Pair>>,
    owner: std::collections::HashMap<(u8, Pair), usize>,
}

impl PublicPairs {
    pub fn new(flows: usize) -> PublicPairs {
        PublicPairs {
            pair: vec![None; flows],
            owner: Default::default(),
        }
    }

    /// The public pair flow `f` holds, once it has sent a packet.
    pub fn of(&self, f: usize) -> Option<Pair> {
        self.pair[f]
    }

    /// Checks packet `i` (`got`, an untagged IPv4 Ethernet frame of flow `f` and protocol
    /// `proto`): it equals `rebuild(pair)` for the public source pair it carries, the flow
    /// kept that pair, and a flow's first pair lies in `pools[pool()]`. Returns the pool
    /// index when this was the flow's first packet.
    pub fn check(
        &mut self,
        (i, f, proto): (usize, usize, u8),
        got: &[u8],
        rebuild: impl FnOnce(Pair) -> Vec<u8>,
        pools: &[([u8; 4], std::ops::RangeInclusive<u16>)],
        pool: impl FnOnce() -> usize,
    ) -> Option<usize> {
        let seen = (
            [got[26], got[27], got[28], got[29]],
            u16::from_be_bytes([got[34], got[35]]),
        );
        let want = rebuild(seen);
        assert!(
            got == want,
            "packet {i} (flow {f}): got {got:02x?}, want {want:02x?}"
        );
        if let Some(p) = self.pair[f] {
            assert_eq!(p, seen, "packet {i}: flow {f} changed its public pair");
            return None;
        }
        let k = pool();
        let (a, ports) = &pools[k];
        assert!(
            seen.0 == *a && ports.contains(&seen.1),
            "packet {i}: flow {f} got {seen:?}, not in pool {k} in force"
        );
        let prev = self.owner.insert((proto, seen), f);
        assert_eq!(prev, None, "flows {prev:?} and {f} share {seen:?}");
        self.pair[f] = Some(seen);
        Some(k)
    }
}
