//! File sharing: SMB (v1 and v2/3, over NetBIOS session framing) and NFS (ONC RPC).

use super::{at, be32, AppProto, Ctx, Detector, Scratch, Verdict};

pub(crate) const SMB: Detector = Detector {
    tcp: true,
    udp: false,
    names: &[AppProto::Smb1, AppProto::Smb],
    f: smb,
};

pub(crate) const NFS: Detector = Detector {
    tcp: true,
    udp: true,
    names: &[AppProto::Nfs],
    f: nfs,
};

fn smb(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // NetBIOS session message (type 0, 17-bit length), then the SMB magic.
    if at(d, 0) == 0 && at(d, 1) & 0xfe == 0 && d.len() >= 8 {
        match (at(d, 4), &d[5..8]) {
            (0xff, b"SMB") => return Verdict::Match(AppProto::Smb1),
            (0xfe | 0xfd, b"SMB") => return Verdict::Match(AppProto::Smb),
            _ => {}
        }
    }
    if c.n == 0 {
        Verdict::No
    } else {
        Verdict::Maybe
    }
}

fn nfs(c: &Ctx, _: &mut Scratch, d: &[u8]) -> Verdict {
    // ONC RPC call: xid, type 0 (call), RPC version 2, program 100003 (NFS).
    // Over TCP a record mark (last-fragment bit + length) comes first.
    let m = if c.udp() {
        d
    } else if be32(d, 0) & 0x8000_0000 != 0 {
        &d[4.min(d.len())..]
    } else {
        return first_no(c);
    };
    // Program: NFS, or the portmapper and mount daemon an NFS mount starts with (nDPI
    // names all three NFS).
    let prog = be32(m, 12);
    if be32(m, 4) == 0
        && be32(m, 8) == 2
        && matches!(prog, 100_000 | 100_003 | 100_005)
        && m.len() >= 24
    {
        return Verdict::Match(AppProto::Nfs);
    }
    first_no(c)
}

fn first_no(c: &Ctx) -> Verdict {
    if c.n == 0 {
        Verdict::No
    } else {
        Verdict::Maybe
    }
}
