//! The XDP program an AF_XDP port needs: every packet arriving on a queue is redirected to
//! the socket registered for that queue in an XSKMAP, or passed to the kernel's stack when
//! none is. Six BPF instructions, assembled here and loaded with the `bpf()` system call, so
//! catena needs no clang, libbpf or libxdp (see docs/live.md). The program is attached by a
//! BPF link: closing the link's descriptor detaches it, so it goes when the port is dropped
//! and also when the process dies of anything, leaving the interface as it was.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

// From linux/bpf.h and linux/if_link.h (the libc crate does not carry them).
const BPF_MAP_CREATE: i32 = 0;
const BPF_MAP_UPDATE_ELEM: i32 = 2;
const BPF_PROG_LOAD: i32 = 5;
const BPF_LINK_CREATE: i32 = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const BPF_F_XDP_HAS_FRAGS: u32 = 1 << 5;
const BPF_PSEUDO_MAP_FD: u8 = 1;
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
const XDP_PASS: i32 = 2;
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
/// Offset of `rx_queue_index` in `struct xdp_md`.
const XDP_MD_RX_QUEUE: i16 = 16;

/// Queues an XSKMAP holds (the program looks up the packet's queue number).
pub const MAX_QUEUES: u32 = 64;

/// One BPF instruction: opcode, destination and source registers, offset, immediate.
const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> u64 {
    code as u64
        | ((dst as u64) << 8)
        | ((src as u64) << 12)
        | ((off as u16 as u64) << 16)
        | ((imm as u32 as u64) << 32)
}

/// `return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);`
fn program(map_fd: RawFd) -> [u64; 6] {
    [
        // r2 = ctx->rx_queue_index (BPF_LDX | BPF_W | BPF_MEM)
        insn(0x61, 2, 1, XDP_MD_RX_QUEUE, 0),
        // r1 = the map (BPF_LD | BPF_DW | BPF_IMM, two slots; the kernel swaps the fd
        // for the map's address)
        insn(0x18, 1, BPF_PSEUDO_MAP_FD, 0, map_fd),
        0,
        // r3 = XDP_PASS: what happens when the queue has no socket (BPF_ALU64 | MOV | K)
        insn(0xb7, 3, 0, 0, XDP_PASS),
        // r0 = bpf_redirect_map(r1, r2, r3) (BPF_JMP | BPF_CALL)
        insn(0x85, 0, 0, 0, BPF_FUNC_REDIRECT_MAP),
        // return r0 (BPF_JMP | BPF_EXIT)
        insn(0x95, 0, 0, 0, 0),
    ]
}

/// A `union bpf_attr`, filled field by field at the offsets linux/bpf.h gives; the rest
/// stays zero, as the kernel requires.
#[repr(C, align(8))]
struct Attr([u8; 128]);

impl Attr {
    fn new() -> Attr {
        Attr([0; 128])
    }
    fn u32(mut self, at: usize, v: u32) -> Attr {
        self.0[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64(mut self, at: usize, v: u64) -> Attr {
        self.0[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
}

fn bpf(cmd: i32, attr: &mut Attr) -> io::Result<i64> {
    // SAFETY: `attr` is a live, zero-padded bpf_attr of the size passed; pointers inside it
    // point at buffers the caller keeps alive for the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr.0.as_mut_ptr(),
            std::mem::size_of::<Attr>() as u32,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn owned(fd: i64) -> OwnedFd {
    // SAFETY: a descriptor the bpf() call just returned, owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd as RawFd) }
}

/// Where the program runs: in the driver (native XDP) or after the kernel made an skb
/// (generic XDP, which every interface has).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XdpMode {
    Native,
    Generic,
}

/// The loaded program, its map and its attachment; dropping it detaches the program.
pub struct XdpProgram {
    map: OwnedFd,
    _prog: OwnedFd,
    _link: OwnedFd,
    pub mode: XdpMode,
}

fn explain(e: io::Error, iface: &str, what: &str) -> io::Error {
    let hint = match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => {
            ": AF_XDP needs CAP_NET_ADMIN and CAP_BPF: run as root or `setcap cap_net_admin,cap_net_raw,cap_bpf+ep` on catena"
        }
        Some(libc::EBUSY) | Some(libc::EEXIST) => {
            ": another XDP program is attached to the interface (one af_xdp port per interface; remove a stale one with `ip link set dev IFACE xdp off`)"
        }
        Some(libc::ENOSYS) => ": this kernel has no BPF: use `kind = \"af_packet\"`",
        _ => "",
    };
    io::Error::new(e.kind(), format!("{iface}: {what}: {e}{hint}"))
}

impl XdpProgram {
    /// Loads the program and attaches it to `ifindex`, natively when the driver can and
    /// generically otherwise. Sockets are added with [`insert`](Self::insert) before
    /// packets reach them; until then the queue's packets go to the kernel as before.
    pub fn attach(ifindex: i32, iface: &str) -> io::Result<XdpProgram> {
        let mut a = Attr::new()
            .u32(0, BPF_MAP_TYPE_XSKMAP)
            .u32(4, 4)
            .u32(8, 4)
            .u32(12, MAX_QUEUES);
        let map = owned(
            bpf(BPF_MAP_CREATE, &mut a)
                .map_err(|e| explain(e, iface, "cannot create an XSKMAP"))?,
        );
        let insns = program(map.as_raw_fd());
        let license = c"Dual MIT/GPL";
        let mut log = vec![0u8; 4096];
        let load = |flags: u32, log: &mut [u8]| {
            let mut a = Attr::new()
                .u32(0, BPF_PROG_TYPE_XDP)
                .u32(4, insns.len() as u32)
                .u64(8, insns.as_ptr() as u64)
                .u64(16, license.as_ptr() as u64)
                .u32(24, 1)
                .u32(28, log.len() as u32)
                .u64(32, log.as_mut_ptr() as u64)
                .u32(44, flags)
                .u32(68, BPF_XDP);
            a.0[48..55].copy_from_slice(b"catena\0");
            bpf(BPF_PROG_LOAD, &mut a)
        };
        // Frags let the program see frames larger than a page (jumbo MTUs); kernels
        // before 5.18 do not know the flag.
        let prog = match load(BPF_F_XDP_HAS_FRAGS, &mut log) {
            Ok(fd) => owned(fd),
            Err(_) => owned(load(0, &mut log).map_err(|e| {
                let l = String::from_utf8_lossy(&log);
                let l = l
                    .trim_end_matches('\0')
                    .lines()
                    .last()
                    .unwrap_or("")
                    .to_string();
                let e = explain(e, iface, "cannot load the XDP program");
                io::Error::new(e.kind(), format!("{e} {l}").trim_end().to_string())
            })?),
        };
        let link = |flags: u32| {
            let mut a = Attr::new()
                .u32(0, prog.as_raw_fd() as u32)
                .u32(4, ifindex as u32)
                .u32(8, BPF_XDP)
                .u32(12, flags);
            bpf(BPF_LINK_CREATE, &mut a)
        };
        let (link, mode) = match link(XDP_FLAGS_DRV_MODE) {
            Ok(fd) => (owned(fd), XdpMode::Native),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EBUSY) | Some(libc::EPERM)) => {
                return Err(explain(e, iface, "cannot attach the XDP program"))
            }
            Err(_) => match link(XDP_FLAGS_SKB_MODE) {
                Ok(fd) => (owned(fd), XdpMode::Generic),
                Err(e) => {
                    let e = explain(e, iface, "XDP unsupported");
                    return Err(io::Error::new(
                        e.kind(),
                        format!("{e}: use `kind = \"af_packet\"` on this interface"),
                    ));
                }
            },
        };
        Ok(XdpProgram {
            map,
            _prog: prog,
            _link: link,
            mode,
        })
    }

    /// Sends queue `queue`'s packets to socket `fd`.
    pub fn insert(&self, queue: u32, fd: RawFd) -> io::Result<()> {
        let key = queue;
        let value = fd as u32;
        let mut a = Attr::new()
            .u32(0, self.map.as_raw_fd() as u32)
            .u64(8, &key as *const u32 as u64)
            .u64(16, &value as *const u32 as u64);
        bpf(BPF_MAP_UPDATE_ELEM, &mut a).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instructions_encode_as_the_kernel_reads_them() {
        // struct bpf_insn on little-endian: code, dst in the low nibble and src in the
        // high nibble of byte 1, 16-bit offset, 32-bit immediate.
        let p = program(7);
        assert_eq!(p[0].to_le_bytes(), [0x61, 0x12, 0x10, 0, 0, 0, 0, 0]);
        assert_eq!(p[1].to_le_bytes(), [0x18, 0x11, 0, 0, 7, 0, 0, 0]);
        assert_eq!(p[2], 0);
        assert_eq!(p[3].to_le_bytes(), [0xb7, 0x03, 0, 0, 2, 0, 0, 0]);
        assert_eq!(p[4].to_le_bytes(), [0x85, 0, 0, 0, 51, 0, 0, 0]);
        assert_eq!(p[5].to_le_bytes(), [0x95, 0, 0, 0, 0, 0, 0, 0]);
    }
}
