//! The header walk a program spells out, recognised and run as catena's own layer decode.
//!
//! Most programs begin the way `Layers::parse` walks: `match link`, a link header
//! (Ethernet, Linux cooked v1/v2, or a peek at raw IP's version), VLAN tags, then IPv4
//! chosen by the ethertype. When the program's decoders are exactly that walk, a packet
//! that `Layers` finds to be IPv4 would reach the IPv4 decoder's body with the same header
//! offsets, so the walk is done by `Layers` (cached in the packet's meta, as native NFs
//! read it) and the program starts in that body. Any other packet (not IPv4, cut short,
//! more tags than the program allows) runs the program's own decoders as written, so the
//! output is the same either way; only the common packet skips the interpretation.
//!
//! IPv6 and ARP are walked the same way when the program routes their ethertype (raw
//! IP's version 6) from the same link headers and tags to one decoder each: a packet
//! `Layers` finds to be IPv6 (40 bytes, version 6) or ARP (28 bytes) starts in that
//! decoder's body.

use super::plan::{link_code, Arm, Bytes, Code, Leaf, Op, Pkt, Read};
use crate::packet::{L3Kind, Layers, LinkKind};

/// The ethertypes `Layers` skips as VLAN tags.
const TAGS: [u64; 3] = [0x8100, 0x88a8, 0x9100];
/// Most tags `Layers` skips.
const MAX_TAGS: u8 = 8;

/// How one link kind reaches the IPv4 decoder.
#[derive(Clone, Copy, Debug)]
struct Link {
    /// The link header's decoder and its length (raw IP: a peek, length from its layout).
    dec: u16,
    len: u16,
    peek: bool,
    /// Most VLAN tags the program skips on this link before IPv4 (0: tagged packets run
    /// the program's own walk).
    tags: u8,
}

/// IPv6 or ARP: the decoder the program enters for it after the link header and tags.
#[derive(Clone, Copy, Debug)]
pub struct Other {
    pub dec: u16,
    len: u16,
    /// Link kinds (one bit each) that route it, as `Layers` does.
    links: u8,
    /// The tag decoder routes it too (else tagged packets run the program's walk).
    tagged: bool,
    /// Where the decoder's body starts in the flat code (set once it is laid out).
    pub body: u32,
}

/// What `Layers` guarantees: (ethertype, raw IP version, bytes at the L3 offset).
const V6: (u64, Option<u64>, u16) = (0x86dd, Some(6), 40);
const ARP: (u64, Option<u64>, u16) = (0x0806, None, 28);

/// The recognised walk: per link kind, how it reaches decoder `ip`.
#[derive(Clone, Debug)]
pub struct Walk {
    links: [Option<Link>; 4],
    tag: u16,
    ip: u16,
    /// Where the IPv4 decoder's body starts in the flat code (set once it is laid out).
    pub body: u32,
    /// IPv6 and ARP, when the program routes them as `Layers` does.
    pub others: [Option<Other>; 2],
    /// Decoders whose entries a guarded `match` arm counts (one bit each).
    track: u32,
    /// Link and tag decoders whose fields are used past their own body (one bit each):
    /// the others' offsets are never read once the walk is past them, so not kept.
    keep: u32,
}

impl Walk {
    /// The walk, when `code`'s start block and decoders are exactly `Layers::parse`'s
    /// route to IPv4 for at least one link kind.
    pub fn recognise(code: &Code) -> Option<Walk> {
        let [Op::Match(e, arms)] = code.start.as_slice() else {
            return None;
        };
        if !matches!(e.leaf(), Some(Leaf::Link)) {
            return None;
        }
        let mut w = Walk {
            links: [None; 4],
            tag: u16::MAX,
            ip: u16::MAX,
            body: 0,
            others: [None; 2],
            track: 0,
            keep: code.used_elsewhere(),
        };
        // (link, header length, where its ethertype is; None: raw IP's version nibble)
        let kinds = [
            (LinkKind::Ethernet, 14, Some(12)),
            (LinkKind::LinuxSll, 16, Some(14)),
            (LinkKind::LinuxSll2, 20, Some(0)),
            (LinkKind::RawIp, 0, None),
        ];
        for (kind, len, ty) in kinds {
            let Some(d) = next_of(arms, link_code(kind)) else {
                continue;
            };
            let link = match ty {
                Some(ty) => w.l2(code, d, len, ty),
                None => w.raw(code, d),
            };
            w.links[kind as usize] = link;
        }
        if w.links.iter().all(Option::is_none) {
            return None;
        }
        let ip = code.decoders.get(w.ip as usize)?;
        // `size = ihl * 4` over the IPv4 header's second nibble: `Layers`' length checks.
        let ihl = matches!(
            ip.size,
            Some((
                Read::Bits {
                    off: 0,
                    nbytes: 1,
                    shift: 0,
                    mask: 0xf
                },
                4
            ))
        );
        if !ihl || ip.fixed_len != 20 || ip.peek {
            return None;
        }
        w.others = [w.other(code, V6), w.other(code, ARP)];
        Some(w)
    }

    /// IPv6 or ARP (`what`): the decoder every walked link routing the ethertype enters
    /// (a fixed header no longer than `Layers` checks, moving the offset), and which
    /// links and whether the tags route it there.
    fn other(&self, code: &Code, what: (u64, Option<u64>, u16)) -> Option<Other> {
        let (ty, version, min) = what;
        let mut o = Other {
            dec: u16::MAX,
            len: 0,
            links: 0,
            tagged: false,
            body: 0,
        };
        let mut known = vec![self.ip, self.tag];
        known.extend(self.links.iter().flatten().map(|l| l.dec));
        let take = |o: &mut Other, d: Option<u16>| -> bool {
            match d {
                Some(d) if !known.contains(&d) && (o.dec == u16::MAX || o.dec == d) => {
                    o.dec = d;
                    true
                }
                _ => false,
            }
        };
        for (k, l) in self.links.iter().enumerate() {
            let Some(l) = l else { continue };
            let arms = match code.decoders[l.dec as usize].body.as_slice() {
                [Op::Match(_, arms)] => arms,
                _ => continue,
            };
            let d = match (l.peek, version) {
                (false, _) => next_of(arms, ty),
                (true, Some(v)) => next_of(arms, v),
                (true, None) => None,
            };
            if take(&mut o, d) {
                o.links |= 1 << k;
            }
        }
        if self.tag != u16::MAX {
            if let [Op::Match(_, arms)] = code.decoders[self.tag as usize].body.as_slice() {
                o.tagged = o.dec != u16::MAX && next_of(arms, ty) == Some(o.dec);
            }
        }
        let dec = code.decoders.get(o.dec as usize)?;
        if dec.peek || dec.size.is_some() || dec.fixed_len > min || o.links == 0 {
            return None;
        }
        o.len = dec.fixed_len;
        Some(o)
    }

    /// A link header decoder `d` of `len` bytes whose body is only `match d.TYPE`, the
    /// ethertype at byte `ty`, entering the tag decoder and the IPv4 decoder.
    fn l2(&mut self, code: &Code, d: u16, len: u16, ty: u16) -> Option<Link> {
        let arms = self.ethertype_match(code, d, len, ty)?;
        let ip = next_of(arms, 0x0800)?;
        if !self.same_ip(ip, d) {
            return None;
        }
        Some(Link {
            dec: d,
            len,
            peek: false,
            tags: self.tags(code, arms, d).unwrap_or(0),
        })
    }

    /// How many tags `Layers` may skip for a link decoder whose ethertype arms are
    /// `arms`: every tag ethertype enters one tag decoder, whose own arms enter it again
    /// (guarded by its `repeat`) and the IPv4 decoder.
    fn tags(&mut self, code: &Code, arms: &[Arm], from: u16) -> Option<u8> {
        let t = guarded_next(arms, TAGS[0])?;
        if TAGS.iter().any(|&v| guarded_next(arms, v) != Some(t)) || t == from || t == self.ip {
            return None;
        }
        if self.tag != u16::MAX && self.tag != t {
            return None;
        }
        let tarms = self.ethertype_match(code, t, 4, 2)?;
        if TAGS.iter().any(|&v| guarded_next(tarms, v) != Some(t))
            || next_of(tarms, 0x0800) != Some(self.ip)
        {
            return None;
        }
        self.tag = t;
        Some(code.decoders[t as usize].repeat.min(MAX_TAGS))
    }

    /// Raw IP: a `peek` decoder whose body is only `match d.VERSION` (the first nibble),
    /// 4 entering the IPv4 decoder.
    fn raw(&mut self, code: &Code, d: u16) -> Option<Link> {
        let dec = code.decoders.get(d as usize)?;
        if !dec.peek || dec.size.is_some() || dec.fixed_len > 20 {
            return None;
        }
        let [Op::Match(e, arms)] = dec.body.as_slice() else {
            return None;
        };
        let version = matches!(e.leaf(), Some(Leaf::Field(f)) if f.hdr as u16 == d && matches!(
            f.read,
            Read::Bits { off: 0, nbytes: 1, shift: 4, mask: 0xf }
        ));
        let ip = next_of(arms, 4)?;
        if !version || !self.same_ip(ip, d) {
            return None;
        }
        Some(Link {
            dec: d,
            len: dec.fixed_len,
            peek: true,
            tags: 0,
        })
    }

    /// Decoder `d` is `len` bytes, not `peek` nor sized, and its body is only a `match`
    /// on the 16-bit field at byte `ty`: its arms.
    fn ethertype_match<'c>(&self, code: &'c Code, d: u16, len: u16, ty: u16) -> Option<&'c [Arm]> {
        let dec = code.decoders.get(d as usize)?;
        if dec.peek || dec.size.is_some() || dec.fixed_len != len {
            return None;
        }
        let [Op::Match(e, arms)] = dec.body.as_slice() else {
            return None;
        };
        match e.leaf() {
            Some(Leaf::Field(f))
                if f.hdr as u16 == d && matches!(f.read, Read::U16(o) if o == ty) =>
            {
                Some(arms)
            }
            _ => None,
        }
    }

    /// Every link reaches the same IPv4 decoder, not itself.
    fn same_ip(&mut self, ip: u16, from: u16) -> bool {
        if ip == from || (self.ip != u16::MAX && self.ip != ip) || ip == self.tag {
            return false;
        }
        self.ip = ip;
        true
    }

    /// The IPv4 decoder the walk ends in.
    pub fn ip(&self) -> usize {
        self.ip as usize
    }

    /// E.g. `ethernet, sll, sll2 (up to 8 VLAN tags), raw -> ip`.
    pub fn describe(&self, code: &Code) -> String {
        let names = [
            (LinkKind::Ethernet, "ethernet"),
            (LinkKind::LinuxSll, "sll"),
            (LinkKind::LinuxSll2, "sll2"),
            (LinkKind::RawIp, "raw"),
        ];
        let links: Vec<String> = names
            .iter()
            .filter_map(|(k, n)| {
                let l = self.links[*k as usize]?;
                Some(match l.tags {
                    0 => n.to_string(),
                    t => format!("{n} (up to {t} VLAN tags)"),
                })
            })
            .collect();
        let mut to = code.decoders[self.ip as usize].name.clone();
        for o in self.others.iter().flatten() {
            to = format!("{to}, {}", code.decoders[o.dec as usize].name);
        }
        format!("{} -> {to}", links.join(", "))
    }

    /// Notes which decoders count their entries (see `Flat`).
    pub fn set_track(&mut self, track: u32) {
        self.track = track;
    }

    /// The walk for one packet: when `Layers` finds IPv4 reached the way the program
    /// would, marks the headers entered as the program's decoders would and returns
    /// where the IPv4 decoder's body starts; else the program runs its own walk.
    #[inline(always)]
    pub fn run<D: Bytes>(&self, p: &mut Pkt<D>, steps: &mut u32) -> Option<usize> {
        // The decoded value itself, not a reload of the store just made (see
        // `Packet::layers`).
        let mut l = p.m.layers;
        if l.is_unparsed() {
            l = Layers::parse(p.m.link, &p.d);
            p.m.layers = l;
        }
        let k = self.links[p.m.link as usize % 4]?;
        if l.vlans > k.tags {
            return None;
        }
        if l.l3 != L3Kind::Ipv4 {
            return self.run_other(p, steps, l, k);
        }
        let off = l.l3_off as usize;
        let n = (*p.d.get(off)? & 0x0f) as usize * 4;
        self.pass(p, k, l.vlans, off);
        p.fit(self.ip as usize, off, n);
        self.count(p, self.ip, 1);
        p.cur = off + n;
        debug_assert!(k.peek || off == k.len as usize + 4 * l.vlans as usize);
        *steps += 2 + l.vlans as u32;
        Some(self.body as usize)
    }

    /// Where [`Walk::run`] would start the IPv4 header of a packet on `link` that
    /// `Layers` read as `l`, without running it (`None`: the walk does not end there).
    #[inline(always)]
    pub fn ipv4_at(&self, link: LinkKind, l: &Layers) -> Option<usize> {
        let k = self.links[link as usize % 4]?;
        (l.vlans <= k.tags && l.l3 == L3Kind::Ipv4).then_some(l.l3_off as usize)
    }

    /// IPv6 or ARP, when the program routes it from this link (and its tags) as
    /// `Layers` did; else `None` (the program's own walk).
    #[inline(never)]
    fn run_other<D: Bytes>(
        &self,
        p: &mut Pkt<D>,
        steps: &mut u32,
        l: Layers,
        k: Link,
    ) -> Option<usize> {
        let o = match l.l3 {
            L3Kind::Ipv6 => self.others[0]?,
            L3Kind::Arp => self.others[1]?,
            _ => return None,
        };
        if o.links & (1 << (p.m.link as usize % 4)) == 0 || (l.vlans > 0 && !o.tagged) {
            return None;
        }
        let off = l.l3_off as usize;
        self.pass(p, k, l.vlans, off);
        p.fit(o.dec as usize, off, o.len as usize);
        self.count(p, o.dec, 1);
        p.cur = off + o.len as usize;
        debug_assert!(p.cur <= p.d.len());
        *steps += 2 + l.vlans as u32;
        Some(o.body as usize)
    }

    /// Marks the link header and the `vlans` tags before `off` as the program's walk
    /// would have entered them.
    #[inline(always)]
    fn pass<D: Bytes>(&self, p: &mut Pkt<D>, k: Link, vlans: u8, off: usize) {
        if self.keep & (1 << k.dec) != 0 {
            p.fit(k.dec as usize, 0, k.len as usize);
        }
        self.count(p, k.dec, 1);
        if vlans > 0 {
            if self.keep & (1 << self.tag) != 0 {
                p.fit(self.tag as usize, off - 4, 4);
            }
            self.count(p, self.tag, vlans);
        }
    }

    /// Decoder `d` was entered `n` times this packet (for guarded arms that ask).
    #[inline(always)]
    fn count<D: Bytes>(&self, p: &mut Pkt<D>, d: u16, n: u8) {
        if self.track & (1 << d) != 0 {
            p.entered_times(d as usize, n);
        }
    }
}

/// The decoder the first arm matching `v` enters, when its body is exactly `next D`.
fn next_of(arms: &[Arm], v: u64) -> Option<u16> {
    let a = arms.iter().find(|a| a.any || a.values.contains(&v))?;
    match a.body.as_slice() {
        [Op::Next(d)] => Some(*d),
        _ => None,
    }
}

/// As [`next_of`], for an arm guarded by the decoder it enters (a `repeat` decoder).
fn guarded_next(arms: &[Arm], v: u64) -> Option<u16> {
    let a = arms.iter().find(|a| a.any || a.values.contains(&v))?;
    match a.body.as_slice() {
        [Op::Next(d)] if a.guard == Some(*d) => Some(*d),
        _ => None,
    }
}
