//! AF_XDP port on one queue of a Linux interface. The XDP program (af_xdp_prog.rs)
//! redirects the queue's packets to this socket; the kernel writes them into UMEM frames
//! we lent it through the fill ring and reports them on the RX ring. By default each packet
//! is a read-only view of its UMEM frame (`RxMode::View`: no copy unless an NF writes), and
//! the frames of a batch go back to the fill ring once the batch has left the chain (the
//! port's next `recv` or `flush`); `RxMode::Copy` copies each into a pool buffer and gives
//! the frame straight back. Sending
//! copies frames into UMEM, queues descriptors on the TX ring and wakes the kernel once
//! per flush. No system call while packets are ready on receive.
//!
//! The kernel binds in zero-copy mode where the driver supports it and in copy mode
//! otherwise (veth); which one is reported in the port's description. Frames larger than
//! a UMEM frame span several (`XDP_USE_SG`, kernels ≥ 6.6).

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use super::af_packet::{ifindex, RxMode};
pub use super::af_xdp_prog::XdpProgram;
use super::af_xdp_prog::{XdpMode, MAX_QUEUES};
use super::port::{Port, PortCounters, Recv};
use crate::packet::{Batch, LinkKind, Pool};

/// Settings of one AF_XDP socket.
#[derive(Clone, Debug)]
pub struct AfXdpConfig {
    pub iface: String,
    /// The interface queue this socket serves (veth has one: 0).
    pub queue: u32,
    /// Packets as views of their UMEM frames, or copied out.
    pub rx: RxMode,
}

impl AfXdpConfig {
    /// What one socket pins: the UMEM, and its four rings (8-byte fill and completion
    /// entries, 16-byte descriptors).
    pub fn memory(&self) -> usize {
        (FRAMES * FRAME) as usize + (RX_RING + TX_RING) as usize * (8 + 16)
    }

    pub fn new(iface: &str) -> AfXdpConfig {
        AfXdpConfig {
            iface: iface.to_string(),
            queue: 0,
            rx: RxMode::View,
        }
    }
}

/// UMEM frame size: the smallest the kernel takes, room for a 1514-byte frame after the
/// kernel's 256-byte headroom; larger frames span several (scatter-gather).
const FRAME: u64 = 2048;
/// The largest frame that fits one UMEM frame after the headroom: what a socket without
/// scatter-gather sends and receives (PA-Flow's aggregating ports check it).
pub const ONE_FRAME: usize = FRAME as usize - 256;
/// Receive buffering: fill and RX ring entries, one UMEM frame each (32 MiB). Deep, so
/// that a worker descheduled for a while on a busy machine, or a burst faster than the
/// forwarding, loses nothing: at 1 Mpps this is 16 ms (8,192 frames dropped 12,393 of a
/// 300,000-packet burst at 0.67 Mpps in `catena bench ports`).
const RX_RING: u32 = 16384;
/// Send: TX and completion ring entries, one UMEM frame each (4 MiB).
const TX_RING: u32 = 2048;
const FRAMES: u64 = (RX_RING + TX_RING) as u64;
const _: () = assert!(
    FRAMES * FRAME == 36 << 20,
    "the UMEM size in `explain` and docs"
);
/// Largest frame sent, as AF_PACKET (jumbo); larger ones count as `tx_errors`.
const TX_MAX: usize = 9216 + 18;
/// `XDP_PKT_CONTD`: more fragments of this packet follow.
const CONTD: u32 = 1;

/// One of the four rings shared with the kernel: indices count up forever and are masked.
struct Ring {
    map: *mut u8,
    len: usize,
    prod: *const AtomicU32,
    cons: *const AtomicU32,
    desc: *mut u8,
    /// `XDP_RING_NEED_WAKEUP` when the kernel waits for a system call to go on.
    flags: *const AtomicU32,
    /// Entries (a power of two).
    size: u32,
    /// Our copy of the index we own (producer of fill/TX, consumer of RX/completion).
    local: u32,
}

impl Ring {
    fn map(
        fd: RawFd,
        off: &libc::xdp_ring_offset,
        size: u32,
        entry: usize,
        pgoff: u64,
    ) -> io::Result<Ring> {
        let len = off.desc as usize + size as usize * entry;
        // SAFETY: mapping the ring the kernel made for this socket at its page offset.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                pgoff as libc::off_t,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let m = map as *mut u8;
        // SAFETY: the offsets the kernel gave lie inside the mapping.
        unsafe {
            Ok(Ring {
                map: m,
                len,
                prod: m.add(off.producer as usize) as *const AtomicU32,
                cons: m.add(off.consumer as usize) as *const AtomicU32,
                desc: m.add(off.desc as usize),
                flags: m.add(off.flags as usize) as *const AtomicU32,
                size,
                local: 0,
            })
        }
    }
    fn prod(&self) -> &AtomicU32 {
        // SAFETY: a u32 in the live mapping, shared with the kernel.
        unsafe { &*self.prod }
    }
    fn cons(&self) -> &AtomicU32 {
        // SAFETY: as above.
        unsafe { &*self.cons }
    }
    /// The kernel asks for a wake-up (`sendto` for TX, `recvfrom` for the fill ring);
    /// only meaningful on a socket bound with `XDP_USE_NEED_WAKEUP`.
    fn needs_wakeup(&self) -> bool {
        // SAFETY: a u32 in the live mapping, shared with the kernel.
        unsafe { &*self.flags }.load(Ordering::Acquire) & libc::XDP_RING_NEED_WAKEUP != 0
    }
    fn addr_slot(&self, i: u32) -> *mut u64 {
        // SAFETY: the index is masked into the ring's entries of 8 bytes.
        unsafe { (self.desc as *mut u64).add((i & (self.size - 1)) as usize) }
    }
    fn desc_slot(&self, i: u32) -> *mut libc::xdp_desc {
        // SAFETY: the index is masked into the ring's entries of 16 bytes.
        unsafe { (self.desc as *mut libc::xdp_desc).add((i & (self.size - 1)) as usize) }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping once.
        unsafe { libc::munmap(self.map as *mut libc::c_void, self.len) };
    }
}

pub struct AfXdp {
    // Field order is drop order: the program goes (queue back to the kernel's stack)
    // before the socket closes, once the last socket of the interface holding it does.
    prog: Arc<XdpProgram>,
    rx: Ring,
    tx: Ring,
    fill: Ring,
    comp: Ring,
    fd: OwnedFd,
    umem: *mut u8,
    iface: String,
    queue: u32,
    zero_copy: bool,
    sg: bool,
    /// Bound with `XDP_USE_NEED_WAKEUP`: the kernel says when it needs a system call to
    /// send or to take fill frames (a zero-copy driver whose NAPI is running needs none);
    /// in copy mode TX always needs one and receive never does.
    need_wakeup: bool,
    rx_mode: RxMode,
    /// RX frames that packets of the last batch view, out of the fill ring until
    /// `recycle`. At most one batch's worth (one frame per viewed packet), so the kernel
    /// always has at least `RX_RING - MAX_BATCH` frames to receive into.
    lent: Vec<u64>,
    /// TX frames not lent to the kernel.
    tx_free: Vec<u64>,
    /// Per queued packet: the TX ring index after its last fragment, and its length;
    /// counted as sent when the kernel's consumer index passes it.
    tx_pending: VecDeque<(u32, u32)>,
    tx_published: u32,
    c: PortCounters,
    stats_base: u64,
    /// Unmapped last, after the socket that uses it is closed.
    _umem: Umem,
}

// SAFETY: the mappings are owned by this value alone and used by one thread at a time.
unsafe impl Send for AfXdp {}

fn os_err(what: &str, iface: &str) -> io::Error {
    explain(io::Error::last_os_error(), what, iface)
}

fn explain(e: io::Error, what: &str, iface: &str) -> io::Error {
    let hint = match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => {
            ": AF_XDP needs CAP_NET_ADMIN and CAP_NET_RAW: run as root or `setcap cap_net_admin,cap_net_raw,cap_bpf+ep` on catena"
        }
        Some(libc::EAFNOSUPPORT) => {
            ": this kernel has no AF_XDP (CONFIG_XDP_SOCKETS): use `kind = \"af_packet\"`"
        }
        Some(libc::ENOMEM) | Some(libc::ENOBUFS) => {
            ": cannot lock the 36 MiB UMEM: raise `ulimit -l` or run as root"
        }
        _ => "",
    };
    io::Error::new(e.kind(), format!("{iface}: {what}: {e}{hint}"))
}

fn setopt<T>(fd: RawFd, opt: i32, v: &T) -> io::Result<()> {
    // SAFETY: `v` is a live value of the size passed.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_XDP,
            opt,
            v as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn getopt<T>(fd: RawFd, opt: i32, v: &mut T) -> io::Result<()> {
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: a buffer of the length given.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_XDP,
            opt,
            v as *mut T as *mut libc::c_void,
            &mut len,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Checks, without taking any packet, that `iface` exists and this process may open
/// AF_XDP sockets.
pub fn probe(iface: &str) -> io::Result<()> {
    super::af_packet::probe_family(iface, libc::AF_XDP, "cannot open an AF_XDP socket", os_err)
}

/// Owns the UMEM mapping until the port takes it (freed on an error before that).
struct Umem(*mut u8);

impl Drop for Umem {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: our own anonymous mapping of FRAMES frames.
            unsafe { libc::munmap(self.0 as *mut libc::c_void, (FRAMES * FRAME) as usize) };
        }
    }
}

/// The receive queues `iface` has (`/sys/class/net/IFACE/queues/rx-*`); None if unknown.
pub fn rx_queues(iface: &str) -> Option<u32> {
    let d = std::fs::read_dir(format!("/sys/class/net/{iface}/queues")).ok()?;
    let n = d
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
        .count();
    (n > 0).then_some(n as u32)
}

impl AfXdp {
    /// Opens a socket on `cfg.queue`, attaching the interface's XDP program.
    pub fn open(cfg: &AfXdpConfig) -> io::Result<AfXdp> {
        AfXdp::open_with(cfg, None)
    }

    /// Opens a socket on `cfg.queue` of an interface whose XDP program `prog` another
    /// socket (`AfXdp::program`) attached: one program and XSKMAP serve every queue, one
    /// socket per queue (each its own UMEM and rings).
    pub fn open_on(cfg: &AfXdpConfig, prog: Arc<XdpProgram>) -> io::Result<AfXdp> {
        AfXdp::open_with(cfg, Some(prog))
    }

    /// The interface's XDP program, to open sockets on its other queues.
    pub fn program(&self) -> Arc<XdpProgram> {
        self.prog.clone()
    }

    fn open_with(cfg: &AfXdpConfig, prog: Option<Arc<XdpProgram>>) -> io::Result<AfXdp> {
        let iface = cfg.iface.as_str();
        let index = ifindex(iface)?;
        let e = |what: &str| os_err(what, iface);
        if cfg.queue >= MAX_QUEUES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{iface}: queue {} is beyond the {MAX_QUEUES} supported",
                    cfg.queue
                ),
            ));
        }
        // SAFETY: plain system call; the descriptor is owned at once.
        let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(e("cannot open an AF_XDP socket"));
        }
        // SAFETY: `raw` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let s = fd.as_raw_fd();
        let len = (FRAMES * FRAME) as usize;
        // SAFETY: an anonymous private mapping, owned by `umem` below.
        let m = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if m == libc::MAP_FAILED {
            return Err(e("cannot map the UMEM"));
        }
        let umem = Umem(m as *mut u8);
        let reg = libc::xdp_umem_reg {
            addr: m as u64,
            len: len as u64,
            chunk_size: FRAME as u32,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        setopt(s, libc::XDP_UMEM_REG, &reg).map_err(|_| e("cannot register the UMEM"))?;
        for (opt, size) in [
            (libc::XDP_UMEM_FILL_RING, RX_RING),
            (libc::XDP_UMEM_COMPLETION_RING, TX_RING),
            (libc::XDP_RX_RING, RX_RING),
            (libc::XDP_TX_RING, TX_RING),
        ] {
            setopt(s, opt, &size).map_err(|_| e("cannot size the rings"))?;
        }
        // SAFETY: an all-zero offsets struct is valid; the kernel fills it.
        let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
        getopt(s, libc::XDP_MMAP_OFFSETS, &mut off).map_err(|_| e("cannot read ring offsets"))?;
        let map = |o: &libc::xdp_ring_offset, size: u32, entry: usize, pg: u64| {
            Ring::map(s, o, size, entry, pg).map_err(|_| e("cannot map a ring"))
        };
        let rx = map(&off.rx, RX_RING, 16, libc::XDP_PGOFF_RX_RING as u64)?;
        let tx = map(&off.tx, TX_RING, 16, libc::XDP_PGOFF_TX_RING as u64)?;
        let mut fill = map(&off.fr, RX_RING, 8, libc::XDP_UMEM_PGOFF_FILL_RING)?;
        let comp = map(&off.cr, TX_RING, 8, libc::XDP_UMEM_PGOFF_COMPLETION_RING)?;
        // The first half of the UMEM receives: lend it all to the kernel now.
        for i in 0..RX_RING {
            // SAFETY: a slot of the fill ring, ours until the producer index passes it.
            unsafe { *fill.addr_slot(i) = u64::from(i) * FRAME };
        }
        fill.local = RX_RING;
        fill.prod().store(RX_RING, Ordering::Release);
        let tx_free: Vec<u64> = (u64::from(RX_RING)..FRAMES).map(|i| i * FRAME).collect();
        let bind = |flags: u16| {
            let sa = libc::sockaddr_xdp {
                sxdp_family: libc::AF_XDP as u16,
                sxdp_flags: flags,
                sxdp_ifindex: index as u32,
                sxdp_queue_id: cfg.queue,
                sxdp_shared_umem_fd: 0,
            };
            // SAFETY: binding to a valid sockaddr_xdp of the size given.
            let r = unsafe {
                libc::bind(
                    s,
                    &sa as *const libc::sockaddr_xdp as *const libc::sockaddr,
                    std::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
                )
            };
            if r < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(())
            }
        };
        // No mode flag: the kernel picks zero-copy when the driver has it, else copy.
        // Scatter-gather for jumbo frames and need-wakeup where the kernel knows them
        // (EINVAL: an older kernel; try with less).
        const NW: u16 = libc::XDP_USE_NEED_WAKEUP;
        const SG: u16 = libc::XDP_USE_SG;
        let mut bound = Err(io::Error::from_raw_os_error(libc::EINVAL));
        for flags in [SG | NW, NW, 0] {
            bound = bind(flags).map(|()| flags);
            if !matches!(&bound, Err(x) if x.raw_os_error() == Some(libc::EINVAL)) || flags == 0 {
                break;
            }
        }
        let flags = match bound {
            Ok(f) => f,
            Err(x) if x.raw_os_error() == Some(libc::EINVAL) => {
                return Err(e("cannot bind to the queue"));
            }
            Err(x) => {
                return Err(match x.raw_os_error() {
                    Some(libc::EINVAL) | Some(libc::ENODEV) | Some(libc::EOPNOTSUPP) => {
                        io::Error::new(
                            x.kind(),
                            format!("{iface}: cannot bind to queue {}: {x}: check the interface's queues (`ethtool -l {iface}`)", cfg.queue),
                        )
                    }
                    Some(libc::EBUSY) => io::Error::new(
                        x.kind(),
                        format!(
                            "{iface}: queue {} is taken by another AF_XDP socket: stop the other program or set another `queue`",
                            cfg.queue
                        ),
                    ),
                    _ => explain(x, "cannot bind to the queue", iface),
                })
            }
        };
        let (sg, need_wakeup) = (flags & SG != 0, flags & NW != 0);
        let mut o = libc::xdp_options { flags: 0 };
        let zero_copy = getopt(s, libc::XDP_OPTIONS, &mut o).is_ok()
            && o.flags & libc::XDP_OPTIONS_ZEROCOPY != 0;
        let prog = match prog {
            Some(p) => p,
            None => Arc::new(XdpProgram::attach(index, iface)?),
        };
        prog.insert(cfg.queue, s).map_err(|x| {
            io::Error::new(
                x.kind(),
                format!("{iface}: cannot add the socket to the XSKMAP: {x}"),
            )
        })?;
        let mut port = AfXdp {
            prog,
            rx,
            tx,
            fill,
            comp,
            fd,
            umem: umem.0,
            iface: iface.to_string(),
            queue: cfg.queue,
            zero_copy,
            sg,
            need_wakeup,
            rx_mode: cfg.rx,
            lent: Vec::with_capacity(crate::packet::MAX_BATCH),
            tx_free,
            tx_pending: VecDeque::with_capacity(TX_RING as usize),
            tx_published: 0,
            c: PortCounters::default(),
            stats_base: 0,
            _umem: umem,
        };
        // Drops count from here.
        port.stats_base = port.kernel_drops();
        Ok(port)
    }

    /// How the kernel serves this socket: `native` or `generic` XDP, `zero-copy` or `copy`.
    /// Bound with `XDP_USE_SG`: frames may span several UMEM frames.
    pub fn scatter_gather(&self) -> bool {
        self.sg
    }

    pub fn mode(&self) -> String {
        format!(
            "{} XDP, {}",
            match self.prog.mode {
                XdpMode::Native => "native",
                XdpMode::Generic => "generic",
            },
            if self.zero_copy { "zero-copy" } else { "copy" }
        )
    }

    /// Packets the kernel dropped for this socket: RX ring full, no fill frame, or a
    /// frame too large for the UMEM (cumulative since the socket opened).
    fn kernel_drops(&self) -> u64 {
        // SAFETY: an all-zero statistics struct is valid; the kernel fills it.
        let mut st: libc::xdp_statistics = unsafe { std::mem::zeroed() };
        if getopt(self.fd.as_raw_fd(), libc::XDP_STATISTICS, &mut st).is_ok() {
            st.rx_dropped + st.rx_ring_full
        } else {
            0
        }
    }

    /// Gives the frames the last batch viewed back to the kernel. Called when that batch
    /// has left the chain (sent, written or dropped): the next `recv` or `flush`.
    fn recycle(&mut self) {
        if self.lent.is_empty() {
            return;
        }
        for &a in &self.lent {
            // SAFETY: a fill slot below consumer + RING: every RX frame is either in the
            // fill ring, the RX ring or `lent`, and the ring has a slot for each.
            unsafe { *self.fill.addr_slot(self.fill.local) = a };
            self.fill.local = self.fill.local.wrapping_add(1);
        }
        self.lent.clear();
        self.fill.prod().store(self.fill.local, Ordering::Release);
    }

    /// Takes back the TX frames the kernel has sent and counts their packets as sent.
    fn reclaim(&mut self) {
        let prod = self.comp.prod().load(Ordering::Acquire);
        while self.comp.local != prod {
            // SAFETY: an entry the kernel published (below its producer index).
            let a = unsafe { *self.comp.addr_slot(self.comp.local) };
            self.tx_free.push(a & !(FRAME - 1));
            self.comp.local = self.comp.local.wrapping_add(1);
        }
        self.comp.cons().store(self.comp.local, Ordering::Release);
        let done = self.tx.cons().load(Ordering::Acquire);
        // A packet is sent once the consumer index has passed its last descriptor
        // (wrapping compare).
        while let Some(&(end, len)) = self.tx_pending.front() {
            if done.wrapping_sub(end) > TX_RING {
                break;
            }
            self.c.tx += 1;
            self.c.tx_bytes += u64::from(len);
            self.tx_pending.pop_front();
        }
    }

    /// Publishes queued descriptors and wakes the kernel until it has taken them (copy
    /// mode sends a bounded number per call) or it stays busy.
    fn kick(&mut self) {
        if self.tx.local != self.tx_published {
            self.tx.prod().store(self.tx.local, Ordering::Release);
            self.tx_published = self.tx.local;
        }
        if self.need_wakeup && !self.tx.needs_wakeup() {
            // The driver is sending on its own (zero-copy, NAPI running): no call.
            self.reclaim();
            return;
        }
        for _ in 0..(TX_RING / 16) {
            if self.tx.cons().load(Ordering::Acquire) == self.tx.local {
                break;
            }
            // SAFETY: sendto with no buffer only wakes the kernel's TX path for this socket.
            let r = unsafe {
                libc::sendto(
                    self.fd.as_raw_fd(),
                    std::ptr::null(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null(),
                    0,
                )
            };
            if r < 0 {
                match io::Error::last_os_error().raw_os_error() {
                    Some(libc::EAGAIN) | Some(libc::EBUSY) | Some(libc::ENOBUFS)
                    | Some(libc::EINTR) => {}
                    _ => break,
                }
            }
        }
        self.reclaim();
    }
}

impl Port for AfXdp {
    fn describe(&self) -> String {
        let rx = match self.rx_mode {
            RxMode::View => "rx in place",
            RxMode::Copy => "rx copied",
        };
        format!(
            "af_xdp:{}:{} ({}, {rx})",
            self.iface,
            self.queue,
            self.mode()
        )
    }

    fn recv(&mut self, pool: &mut Pool, out: &mut Batch, max: usize) -> Recv {
        // The previous batch has left the chain: its frames may be written again.
        self.recycle();
        let views = self.rx_mode == RxMode::View;
        let prod = self.rx.prod().load(Ordering::Acquire);
        if prod == self.rx.local {
            if self.need_wakeup && self.fill.needs_wakeup() {
                // A zero-copy driver out of fill frames stopped receiving until woken
                // (copy mode never asks). Only when the ring is empty: one call then.
                // SAFETY: recvfrom with no buffer only wakes the driver for this socket.
                unsafe {
                    libc::recvfrom(
                        self.fd.as_raw_fd(),
                        std::ptr::null_mut(),
                        0,
                        libc::MSG_DONTWAIT,
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                    )
                };
            }
            return Recv::Got(0);
        }
        let room = pool.max_packet();
        let now = {
            let mut t = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: vDSO clock read into a live timespec (no system call).
            unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut t) };
            t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
        };
        let mut got = 0;
        while got < max && self.rx.local != prod {
            // A packet is its descriptors up to one without CONTD; the kernel publishes
            // all of a packet's descriptors at once.
            let first = self.rx.local;
            let (mut n, mut len) = (0u32, 0usize);
            loop {
                // SAFETY: below the producer index: published by the kernel.
                let d = unsafe { *self.rx.desc_slot(first.wrapping_add(n)) };
                n += 1;
                len += d.len as usize;
                if d.options & CONTD == 0 || first.wrapping_add(n) == prod {
                    break;
                }
            }
            let p = if len <= room {
                match pool.alloc_raw_for(len) {
                    Some(p) => Some(p),
                    // No buffer: leave the packet in the ring until the chain frees some.
                    None => break,
                }
            } else {
                None
            };
            let mut p = p;
            let mut copy = true;
            if let (true, 1, Some(b)) = (views, n, p.as_mut()) {
                // SAFETY: below the producer index: published by the kernel.
                let d = unsafe { *self.rx.desc_slot(first) };
                // SAFETY: the kernel wrote `len` bytes at `addr` inside the UMEM, which
                // stays mapped while the port lives; the frame stays out of the fill
                // ring (so unwritten) until `recycle`, which runs only once this batch
                // has left the chain. A packet freed to the pool still pointing here is
                // given new bytes before it is read again.
                let ok = unsafe {
                    b.set_view_unchecked(std::slice::from_raw_parts(
                        self.umem.add(d.addr as usize),
                        d.len as usize,
                    ))
                };
                debug_assert!(ok);
                self.lent.push(d.addr & !(FRAME - 1));
                copy = false;
            }
            for k in (0..n).filter(|_| copy) {
                // SAFETY: as above.
                let d = unsafe { *self.rx.desc_slot(first.wrapping_add(k)) };
                if let Some(b) = p.as_mut() {
                    // SAFETY: the kernel wrote `len` bytes at `addr` inside the UMEM.
                    let bytes = unsafe {
                        std::slice::from_raw_parts(self.umem.add(d.addr as usize), d.len as usize)
                    };
                    let ok = if k == 0 {
                        b.set_bytes(bytes)
                    } else {
                        b.extend(bytes)
                    };
                    debug_assert!(ok);
                }
                // The frame goes back to the kernel at once (the fill ring has a slot
                // for every RX frame).
                // SAFETY: a fill slot below consumer + RING: ours to write.
                unsafe { *self.fill.addr_slot(self.fill.local) = d.addr & !(FRAME - 1) };
                self.fill.local = self.fill.local.wrapping_add(1);
            }
            self.rx.local = first.wrapping_add(n);
            self.c.rx += 1;
            self.c.rx_bytes += len as u64;
            let Some(mut p) = p else {
                self.c.rx_oversize += 1;
                continue;
            };
            let m = p.meta_mut();
            m.ts_ns = now;
            m.wire_len = len as u32;
            m.link = LinkKind::Ethernet;
            out.push(p);
            got += 1;
        }
        self.rx.cons().store(self.rx.local, Ordering::Release);
        self.fill.prod().store(self.fill.local, Ordering::Release);
        Recv::Got(got)
    }

    fn send(&mut self, frame: &[u8], _ts_ns: u64, _wire_len: u32) {
        let parts = frame.len().div_ceil(FRAME as usize).max(1) as u32;
        if frame.len() > TX_MAX || (parts > 1 && !self.sg) {
            self.c.tx_errors += 1;
            return;
        }
        let space = |x: &AfXdp| {
            let used = x.tx.local.wrapping_sub(x.tx.cons().load(Ordering::Acquire));
            x.tx_free.len() as u32 >= parts && TX_RING - used >= parts
        };
        if !space(self) {
            self.kick();
            if !space(self) {
                self.c.tx_errors += 1;
                return;
            }
        }
        for (k, chunk) in frame.chunks(FRAME as usize).enumerate() {
            let a = self.tx_free.pop().unwrap_or_default();
            // SAFETY: a free TX frame of FRAME bytes inside the UMEM; `chunk` fits in it.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    chunk.as_ptr(),
                    self.umem.add(a as usize),
                    chunk.len(),
                );
                *self.tx.desc_slot(self.tx.local) = libc::xdp_desc {
                    addr: a,
                    len: chunk.len() as u32,
                    options: if (k as u32) + 1 < parts { CONTD } else { 0 },
                };
            }
            self.tx.local = self.tx.local.wrapping_add(1);
        }
        self.tx_pending
            .push_back((self.tx.local, frame.len() as u32));
    }

    fn flush(&mut self) {
        self.recycle();
        if self.tx.local != self.tx_published || !self.tx_pending.is_empty() {
            self.kick();
        }
    }

    fn fd(&self) -> Option<RawFd> {
        Some(self.fd.as_raw_fd())
    }

    fn refresh(&mut self) {
        self.c.kernel_drops = self.kernel_drops().saturating_sub(self.stats_base);
        self.reclaim();
    }

    fn counters(&self) -> PortCounters {
        self.c
    }
}
