//! Header fields named in NF profiles: what an NF reads and writes.

/// A set of header fields, one bit each.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Fields(pub u32);

impl Fields {
    pub const NONE: Fields = Fields(0);
    pub const ETH_SRC: Fields = Fields(1 << 0);
    pub const ETH_DST: Fields = Fields(1 << 1);
    pub const ETH_TYPE: Fields = Fields(1 << 2);
    pub const VLAN: Fields = Fields(1 << 3);
    pub const IP_SRC: Fields = Fields(1 << 4);
    pub const IP_DST: Fields = Fields(1 << 5);
    pub const IP_PROTO: Fields = Fields(1 << 6);
    pub const IP_TTL: Fields = Fields(1 << 7);
    pub const IP_DSCP: Fields = Fields(1 << 8);
    pub const IP_FRAG: Fields = Fields(1 << 9);
    pub const L4_SRC: Fields = Fields(1 << 10);
    pub const L4_DST: Fields = Fields(1 << 11);
    pub const TCP_FLAGS: Fields = Fields(1 << 12);
    pub const TCP_SEQ: Fields = Fields(1 << 13);
    pub const ICMP: Fields = Fields(1 << 14);
    pub const PAYLOAD: Fields = Fields(1 << 15);
    /// Metadata: the ingress port.
    pub const IN_PORT: Fields = Fields(1 << 16);
    /// Metadata: the egress port decision.
    pub const EGRESS: Fields = Fields(1 << 17);

    const NAMES: [(&'static str, Fields); 18] = [
        ("eth.src", Self::ETH_SRC),
        ("eth.dst", Self::ETH_DST),
        ("eth.type", Self::ETH_TYPE),
        ("vlan", Self::VLAN),
        ("ip.src", Self::IP_SRC),
        ("ip.dst", Self::IP_DST),
        ("ip.proto", Self::IP_PROTO),
        ("ip.ttl", Self::IP_TTL),
        ("ip.dscp", Self::IP_DSCP),
        ("ip.frag", Self::IP_FRAG),
        ("l4.src", Self::L4_SRC),
        ("l4.dst", Self::L4_DST),
        ("tcp.flags", Self::TCP_FLAGS),
        ("tcp.seq", Self::TCP_SEQ),
        ("icmp", Self::ICMP),
        ("payload", Self::PAYLOAD),
        ("in_port", Self::IN_PORT),
        ("egress", Self::EGRESS),
    ];

    pub const fn union(self, o: Fields) -> Fields {
        Fields(self.0 | o.0)
    }

    pub const fn contains(self, o: Fields) -> bool {
        self.0 & o.0 == o.0
    }

    pub const fn intersects(self, o: Fields) -> bool {
        self.0 & o.0 != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Field names, in a fixed order, for `catena check` and `catena nfs`.
    pub fn names(self) -> Vec<&'static str> {
        Self::NAMES
            .iter()
            .filter(|(_, f)| self.intersects(*f))
            .map(|(n, _)| *n)
            .collect()
    }
}

impl std::ops::BitOr for Fields {
    type Output = Fields;
    fn bitor(self, o: Fields) -> Fields {
        self.union(o)
    }
}

impl std::fmt::Display for Fields {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_empty() {
            return f.write_str("-");
        }
        f.write_str(&self.names().join(","))
    }
}
