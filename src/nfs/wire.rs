//! Freeflow's wire: ports are paired (0↔1, 2↔3, …); a packet leaves on its ingress port's
//! peer. With an odd number of ports the last one has no peer and its packets are dropped.

use super::nf::{Context, Nf, Profile};
use super::params::{ParamDoc, ParamError, Params};
use crate::packet::{Batch, Fields};

pub struct Wire {
    profile: Profile,
}

const NO_PEER: u8 = 0;

impl Wire {
    pub const PARAMS: &'static [ParamDoc] = &[];

    pub fn new() -> Wire {
        Wire {
            profile: Profile {
                reads: Fields::IN_PORT,
                writes: Fields::EGRESS,
                may_drop: true,
                changes_length: false,
                per_flow_state: false,
                outputs: &["out"],
                drop_reasons: &["no-peer-port"],
            },
        }
    }

    pub fn from_params(_: &mut Params) -> Result<Wire, ParamError> {
        Ok(Wire::new())
    }
}

impl Default for Wire {
    fn default() -> Self {
        Wire::new()
    }
}

impl Nf for Wire {
    fn profile(&self) -> &Profile {
        &self.profile
    }

    #[inline]
    fn process(&mut self, batch: &mut Batch, cx: &Context) {
        for p in batch {
            let m = p.meta_mut();
            let peer = m.in_port ^ 1;
            if peer < cx.ports {
                m.egress = peer;
            } else {
                p.drop_with(NO_PEER);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{Packet, Verdict};

    #[test]
    fn pairs_ports_and_drops_the_odd_one_out() {
        let mut w = Wire::new();
        let mut b = Batch::new();
        for port in 0..3 {
            let mut p = Packet::from_bytes(&[0; 60]);
            p.meta_mut().in_port = port;
            b.push(p);
        }
        w.process(&mut b, &Context { ports: 3 });
        let got: Vec<_> = b
            .iter()
            .map(|p| (p.meta().egress, p.meta().verdict))
            .collect();
        assert_eq!(got[0], (1, Verdict::Out(0)));
        assert_eq!(got[1], (0, Verdict::Out(0)));
        assert_eq!(got[2].1, Verdict::Drop(NO_PEER));
    }
}
