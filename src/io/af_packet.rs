//! AF_PACKET port on a Linux interface. Receive: a TPACKET_V3 ring mapped into our memory;
//! the kernel fills blocks of packets and we copy each into a pool buffer (as a NIC would
//! DMA it) and hand the block back, with no system call while blocks are ready. Send:
//! frames are copied into a staging area and leave in one `sendmmsg` per batch, or, with
//! `tx = "ring"`, into a TPACKET_V2 TX ring that one `send` hands to the kernel; both with
//! `PACKET_QDISC_BYPASS` (the qdisc only adds a lock and a queue for a forwarder).
//! docs/live.md has the measurement that picked `sendmmsg` as the default.
//! Promiscuous membership ends with the socket; `PACKET_FANOUT_HASH` lets several
//! sockets (workers) share an interface by flow.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

use super::port::{Port, PortCounters, Recv};
use crate::packet::{Batch, LinkKind, Pool};

/// Settings of one AF_PACKET socket.
#[derive(Clone, Debug)]
pub struct AfPacketConfig {
    pub iface: String,
    /// Join this fanout group (same id on several sockets: the kernel spreads flows
    /// among them by a symmetric hash).
    pub fanout: Option<u16>,
    pub promisc: bool,
    pub qdisc_bypass: bool,
    /// RX ring: blocks of `block_size` bytes (a power-of-two multiple of the page size).
    pub block_size: u32,
    pub block_nr: u32,
    /// Milliseconds after which the kernel hands over a block that is not full: the
    /// longest a packet waits in the ring at low rates.
    pub block_timeout_ms: u32,
    /// How frames leave.
    pub tx: TxMode,
    /// How frames arrive: read in place in the ring (views) or copied out.
    pub rx: RxMode,
}

/// How a live port hands received frames to the chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxMode {
    /// Each packet is a read-only view of the ring memory the kernel wrote it to (copied
    /// into the packet's buffer only if an NF changes it). The memory goes back to the
    /// kernel once the batch has left the chain: at the port's next `recv` or `flush`.
    /// Only for run-to-completion use: nothing may keep a packet past the batch
    /// (pipeline stages and PA-Flow aggregation take `Copy`).
    View,
    /// Each packet is copied into its pool buffer and the ring memory returned at once.
    Copy,
}

impl std::str::FromStr for RxMode {
    type Err = String;
    fn from_str(s: &str) -> Result<RxMode, String> {
        match s {
            "view" => Ok(RxMode::View),
            "copy" => Ok(RxMode::Copy),
            _ => Err(format!("`{s}` is not an RX mode (view, copy)")),
        }
    }
}

/// How an AF_PACKET port sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxMode {
    /// Frames staged in our memory, one `sendmmsg` per batch.
    Sendmmsg,
    /// A TPACKET_V2 TX ring shared with the kernel, one `send` per batch.
    Ring,
}

impl std::str::FromStr for TxMode {
    type Err = String;
    fn from_str(s: &str) -> Result<TxMode, String> {
        match s {
            "sendmmsg" => Ok(TxMode::Sendmmsg),
            "ring" => Ok(TxMode::Ring),
            _ => Err(format!("`{s}` is not a TX mode (sendmmsg, ring)")),
        }
    }
}

impl AfPacketConfig {
    /// What one socket maps: the RX ring's blocks, and the TX ring when sending through it.
    pub fn memory(&self) -> usize {
        let tx = match self.tx {
            TxMode::Ring => RING_FRAME * RING_FRAMES,
            TxMode::Sendmmsg => 0,
        };
        self.block_size as usize * self.block_nr as usize + tx
    }

    pub fn new(iface: &str) -> AfPacketConfig {
        AfPacketConfig {
            iface: iface.to_string(),
            fanout: None,
            promisc: true,
            qdisc_bypass: true,
            // A block closes when full or after the timeout, so below 64 KiB a
            // millisecond (≈ 500 Mbit/s) the ring lasts `block_nr` ms while the worker is
            // off its CPU: 256 blocks of 64 KiB (a jumbo frame fits) hold 256 ms; 64 of
            // 256 KiB, the same memory, held 64 ms (3,967 of 4,000 in session 33's CI).
            block_size: 1 << 16,
            block_nr: 256,
            block_timeout_ms: 1,
            tx: TxMode::Sendmmsg,
            rx: RxMode::View,
        }
    }
}

/// Frames staged for one `sendmmsg`; more are sent at once when it fills.
const TX_SLOTS: usize = 64;
/// Largest frame sent (jumbo); larger ones count as `tx_errors`.
const TX_FRAME: usize = 9216 + 18;

pub struct AfPacket {
    fd: OwnedFd,
    iface: String,
    ring: *mut u8,
    ring_len: usize,
    block_size: usize,
    block_nr: usize,
    /// Block being read, packets left in it and the offset of the next one.
    block: usize,
    left: u32,
    next: usize,
    rx_mode: RxMode,
    /// Blocks before `block` read to the end but not yet given back, because packets of
    /// the batch view them (`RxMode::View`): at most the blocks one batch spans, given
    /// back by `recycle` at the next `recv` or `flush`.
    held: usize,
    tx_buf: Vec<u8>,
    tx_len: Vec<u32>,
    tx_n: usize,
    iov: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
    ring_tx: Option<TxRing>,
    c: PortCounters,
}

// SAFETY: the ring mapping is owned by this value alone and used by one thread at a time;
// the raw pointers in `iov`/`msgs` point into `tx_buf`, which moves with it.
unsafe impl Send for AfPacket {}

fn os_err(what: &str, iface: &str) -> io::Error {
    let e = io::Error::last_os_error();
    let hint = match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => {
            ": AF_PACKET needs CAP_NET_RAW: run as root or `setcap cap_net_raw,cap_net_admin+ep` on catena"
        }
        Some(libc::ENETDOWN) => ": bring the interface up (`ip link set IFACE up`)",
        _ => "",
    };
    io::Error::new(e.kind(), format!("{iface}: {what}: {e}{hint}"))
}

fn setopt<T>(fd: RawFd, level: i32, opt: i32, v: &T) -> io::Result<()> {
    // SAFETY: `v` is a live value of the size passed.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
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

/// The interface's index, or a one-line error saying what to do.
pub fn ifindex(iface: &str) -> io::Result<i32> {
    let name = CString::new(iface)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "bad interface name"))?;
    // SAFETY: a valid C string.
    let i = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if i == 0 {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("interface `{iface}` not found: create it or fix `iface` (see `ip link`)"),
        ));
    }
    Ok(i as i32)
}

/// Checks, without taking any packet, that `iface` exists and that this process may
/// open AF_PACKET sockets.
pub fn probe(iface: &str) -> io::Result<()> {
    probe_family(
        iface,
        libc::AF_PACKET,
        "cannot open an AF_PACKET socket",
        os_err,
    )
}

/// `iface` exists and a raw socket of `family` opens (and is closed at once); a failure
/// is explained by `err` (each port kind names the capabilities it needs).
pub(super) fn probe_family(
    iface: &str,
    family: libc::c_int,
    what: &str,
    err: fn(&str, &str) -> io::Error,
) -> io::Result<()> {
    ifindex(iface)?;
    // SAFETY: opening and closing a socket.
    let raw = unsafe { libc::socket(family, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(err(what, iface));
    }
    // SAFETY: a fresh descriptor, closed once.
    drop(unsafe { OwnedFd::from_raw_fd(raw) });
    Ok(())
}

impl AfPacket {
    pub fn open(cfg: &AfPacketConfig) -> io::Result<AfPacket> {
        let iface = cfg.iface.as_str();
        let index = ifindex(iface)?;
        // Protocol 0 at first: nothing is queued before the ring exists and the socket is
        // bound to the interface.
        // SAFETY: plain system calls; the descriptor is owned at once.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(os_err("cannot open an AF_PACKET socket", iface));
        }
        // SAFETY: `raw` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let s = fd.as_raw_fd();
        let e = |what: &str| os_err(what, iface);
        setopt(
            s,
            libc::SOL_PACKET,
            libc::PACKET_VERSION,
            &(libc::tpacket_versions::TPACKET_V3 as i32),
        )
        .map_err(|_| e("TPACKET_V3 not supported"))?;
        let frame = 2048u32;
        let req = libc::tpacket_req3 {
            tp_block_size: cfg.block_size,
            tp_block_nr: cfg.block_nr,
            tp_frame_size: frame,
            tp_frame_nr: cfg.block_size / frame * cfg.block_nr,
            tp_retire_blk_tov: cfg.block_timeout_ms,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        setopt(s, libc::SOL_PACKET, libc::PACKET_RX_RING, &req)
            .map_err(|_| e("cannot set up the RX ring"))?;
        let ring_len = cfg.block_size as usize * cfg.block_nr as usize;
        // SAFETY: mapping the ring the kernel just made for this socket.
        let ring = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                ring_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_LOCKED,
                s,
                0,
            )
        };
        // MAP_LOCKED may exceed RLIMIT_MEMLOCK for unprivileged users: map without it.
        let ring = if ring == libc::MAP_FAILED {
            // SAFETY: as above.
            unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    ring_len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    s,
                    0,
                )
            }
        } else {
            ring
        };
        if ring == libc::MAP_FAILED {
            return Err(e("cannot map the RX ring"));
        }
        let mut port = AfPacket {
            fd,
            iface: iface.to_string(),
            ring: ring as *mut u8,
            ring_len,
            block_size: cfg.block_size as usize,
            block_nr: cfg.block_nr as usize,
            block: 0,
            left: 0,
            next: 0,
            rx_mode: cfg.rx,
            held: 0,
            tx_buf: vec![0; TX_SLOTS * TX_FRAME],
            tx_len: vec![0; TX_SLOTS],
            tx_n: 0,
            // SAFETY: all-zero iovec and mmsghdr are valid (null pointers, zero lengths).
            iov: vec![unsafe { std::mem::zeroed() }; TX_SLOTS],
            msgs: vec![unsafe { std::mem::zeroed() }; TX_SLOTS],
            ring_tx: None,
            c: PortCounters::default(),
        };
        // What we send must not come back to us as received.
        setopt(s, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &1i32)
            .map_err(|_| e("cannot ignore outgoing packets"))?;
        if cfg.qdisc_bypass {
            setopt(s, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, &1i32)
                .map_err(|_| e("cannot bypass the qdisc"))?;
        }
        // SAFETY: an all-zero sockaddr_ll is valid; the fields we need are set below.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        sll.sll_ifindex = index;
        // SAFETY: binding to a valid sockaddr_ll of the size given.
        let r = unsafe {
            libc::bind(
                s,
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(e("cannot bind"));
        }
        if cfg.promisc {
            let mreq = libc::packet_mreq {
                mr_ifindex: index,
                mr_type: libc::PACKET_MR_PROMISC as u16,
                mr_alen: 0,
                mr_address: [0; 8],
            };
            setopt(s, libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, &mreq)
                .map_err(|_| e("cannot enter promiscuous mode"))?;
        }
        if let Some(group) = cfg.fanout {
            let arg: u32 = u32::from(group) | (libc::PACKET_FANOUT_HASH << 16);
            setopt(s, libc::SOL_PACKET, libc::PACKET_FANOUT, &arg)
                .map_err(|_| e("cannot join the fanout group"))?;
        }
        if cfg.tx == TxMode::Ring {
            port.ring_tx = Some(
                TxRing::open(index, cfg.qdisc_bypass)
                    .map_err(|_| e("cannot set up the TX ring"))?,
            );
        }
        // Statistics count from here.
        port.kernel_stats();
        port.c.kernel_drops = 0;
        port.prepare_tx();
        Ok(port)
    }

    fn prepare_tx(&mut self) {
        let base = self.tx_buf.as_mut_ptr();
        for i in 0..TX_SLOTS {
            // SAFETY: slot i lies inside tx_buf.
            self.iov[i].iov_base = unsafe { base.add(i * TX_FRAME) } as *mut libc::c_void;
            self.msgs[i].msg_hdr.msg_iov = &mut self.iov[i];
            self.msgs[i].msg_hdr.msg_iovlen = 1;
        }
    }

    fn block_status(&self, b: usize) -> &AtomicU32 {
        // SAFETY: block b lies in the mapping; its first word after the 8-byte header is
        // `block_status`, which the kernel and we hand back and forth (u32 aligned).
        unsafe { &*(self.ring.add(b * self.block_size + 8) as *const AtomicU32) }
    }

    fn block_hdr(&self, b: usize) -> libc::tpacket_hdr_v1 {
        // SAFETY: read after the status says the block is ours; the header lies at offset 8.
        unsafe {
            std::ptr::read_volatile(
                self.ring.add(b * self.block_size + 8) as *const libc::tpacket_hdr_v1
            )
        }
    }

    /// Adds the kernel's drop count since the last call (reading resets it).
    fn kernel_stats(&mut self) {
        // SAFETY: an all-zero tpacket_stats_v3 is valid; the kernel fills it.
        let mut st: libc::tpacket_stats_v3 = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::tpacket_stats_v3>() as libc::socklen_t;
        // SAFETY: a buffer of the length given.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                &mut st as *mut _ as *mut libc::c_void,
                &mut len,
            )
        };
        if r == 0 {
            self.c.kernel_drops += u64::from(st.tp_drops);
        }
    }

    /// Hands the current block back to the kernel and moves to the next.
    #[inline]
    /// Done with the block being read: back to the kernel now, or once the batch has
    /// left the chain when packets view it.
    fn release(&mut self) {
        if self.rx_mode == RxMode::View {
            self.held += 1;
        } else {
            self.block_status(self.block)
                .store(libc::TP_STATUS_KERNEL, Ordering::Release);
        }
        self.block = (self.block + 1) % self.block_nr;
        self.left = 0;
    }

    /// Gives back, in ring order, the blocks the last batch viewed (it has left the
    /// chain). The block being read stays ours until it is read to the end.
    fn recycle(&mut self) {
        while self.held > 0 {
            let b = (self.block + self.block_nr - self.held) % self.block_nr;
            self.block_status(b)
                .store(libc::TP_STATUS_KERNEL, Ordering::Release);
            self.held -= 1;
        }
    }
}

impl Drop for AfPacket {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping once.
        unsafe { libc::munmap(self.ring as *mut libc::c_void, self.ring_len) };
    }
}

impl Port for AfPacket {
    fn describe(&self) -> String {
        format!("af_packet:{}", self.iface)
    }

    fn recv(&mut self, pool: &mut Pool, out: &mut Batch, max: usize) -> Recv {
        // The previous batch has left the chain: its blocks may be written again.
        self.recycle();
        let views = self.rx_mode == RxMode::View;
        let mut got = 0;
        let room = pool.max_packet();
        while got < max {
            if self.left == 0 {
                // Blocks held for this batch's views are still marked ours: never read
                // all the way round to them.
                if self.held + 1 >= self.block_nr {
                    break;
                }
                let st = self.block_status(self.block).load(Ordering::Acquire);
                if st & libc::TP_STATUS_USER == 0 {
                    break;
                }
                let h = self.block_hdr(self.block);
                if h.num_pkts == 0 {
                    self.release();
                    continue;
                }
                self.left = h.num_pkts;
                self.next = self.block * self.block_size + h.offset_to_first_pkt as usize;
            }
            // SAFETY: `next` is a packet header in a block the kernel handed to us.
            let h = unsafe {
                std::ptr::read_unaligned(self.ring.add(self.next) as *const libc::tpacket3_hdr)
            };
            let data_at = self.next + h.tp_mac as usize;
            let snap = (h.tp_snaplen as usize).min(self.ring_len.saturating_sub(data_at));
            let vlan_extra = if h.tp_status & libc::TP_STATUS_VLAN_VALID != 0 {
                4
            } else {
                0
            };
            // A buffer of the size class the frame needs (the pool keeps small buffers
            // up front and makes large ones on first need); too large for any is counted
            // as oversize below.
            let want = (snap + vlan_extra).min(room);
            let Some(mut p) = pool.alloc_raw_for(want) else {
                // No buffer: leave the packet in the ring until the chain frees some.
                break;
            };
            // SAFETY: the kernel wrote `tp_snaplen` bytes at `tp_mac` within the block.
            let frame = unsafe { std::slice::from_raw_parts(self.ring.add(data_at), snap) };
            self.c.rx += 1;
            self.c.rx_bytes += snap as u64;
            // The kernel takes 802.1Q tags off into the header; put them back, as libpcap
            // does, so NFs and output files see the frame as it was on the wire.
            let vlan = h.tp_status & libc::TP_STATUS_VLAN_VALID != 0 && snap >= 12;
            let extra = if vlan { 4 } else { 0 };
            let fits = snap + extra <= room && {
                if vlan {
                    let tpid = if h.tp_status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
                        h.hv1.tp_vlan_tpid
                    } else {
                        0x8100
                    };
                    let tci = h.hv1.tp_vlan_tci as u16;
                    let mut tag = [0u8; 16];
                    tag[..12].copy_from_slice(&frame[..12]);
                    tag[12..14].copy_from_slice(&tpid.to_be_bytes());
                    tag[14..16].copy_from_slice(&tci.to_be_bytes());
                    p.set_bytes(&tag) && p.extend(&frame[12..])
                } else if views {
                    // SAFETY: the frame lies in a block that stays ours (not handed back
                    // to the kernel, so unwritten) until `recycle`, which runs only once
                    // this batch has left the chain; the ring stays mapped while the port
                    // lives. A packet freed to the pool still pointing here is given new
                    // bytes before it is read again.
                    unsafe { p.set_view_unchecked(frame) }
                } else {
                    p.set_bytes(frame)
                }
            };
            self.left -= 1;
            if self.left == 0 {
                self.release();
            } else {
                self.next += h.tp_next_offset as usize;
            }
            if !fits {
                self.c.rx_oversize += 1;
                pool.free(p);
                continue;
            }
            let m = p.meta_mut();
            m.ts_ns = u64::from(h.tp_sec) * 1_000_000_000 + u64::from(h.tp_nsec);
            m.wire_len = h.tp_len + extra as u32;
            m.link = LinkKind::Ethernet;
            out.push(p);
            got += 1;
        }
        Recv::Got(got)
    }

    fn send(&mut self, frame: &[u8], _ts_ns: u64, _wire_len: u32) {
        if let Some(r) = self.ring_tx.as_mut() {
            r.send(frame, &mut self.c);
            return;
        }
        if frame.len() > TX_FRAME {
            self.c.tx_errors += 1;
            return;
        }
        if self.tx_n == TX_SLOTS {
            self.flush();
        }
        let i = self.tx_n;
        self.tx_buf[i * TX_FRAME..i * TX_FRAME + frame.len()].copy_from_slice(frame);
        self.tx_len[i] = frame.len() as u32;
        self.tx_n += 1;
    }

    fn flush(&mut self) {
        self.recycle();
        if let Some(r) = self.ring_tx.as_mut() {
            r.flush(&mut self.c);
            return;
        }
        let n = self.tx_n;
        if n == 0 {
            return;
        }
        for i in 0..n {
            self.iov[i].iov_len = self.tx_len[i] as usize;
        }
        let mut done = 0;
        while done < n {
            // SAFETY: msgs[done..n] point at iovecs over tx_buf, all live.
            let r = unsafe {
                libc::sendmmsg(
                    self.fd.as_raw_fd(),
                    self.msgs.as_mut_ptr().add(done),
                    (n - done) as u32,
                    0,
                )
            };
            if r < 0 {
                if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                // The first unsent frame is refused (too big, device down): count it and
                // go on with the rest.
                self.c.tx_errors += 1;
                done += 1;
                continue;
            }
            for i in done..done + r as usize {
                self.c.tx += 1;
                self.c.tx_bytes += u64::from(self.tx_len[i]);
            }
            done += r as usize;
        }
        self.tx_n = 0;
    }

    fn fd(&self) -> Option<RawFd> {
        Some(self.fd.as_raw_fd())
    }

    fn refresh(&mut self) {
        self.kernel_stats();
    }

    fn counters(&self) -> PortCounters {
        self.c
    }
}

/// TX ring frame: header, then the frame at `TX_DATA` (jumbo fits).
const RING_FRAME: usize = 16384;
const RING_FRAMES: usize = 256;
/// Where the kernel reads a frame's bytes without `PACKET_TX_HAS_OFF`:
/// `TPACKET2_HDRLEN - sizeof(sockaddr_ll)`.
const TX_DATA: usize = libc::TPACKET2_HDRLEN - std::mem::size_of::<libc::sockaddr_ll>();

/// A TPACKET_V2 TX ring on its own socket (a socket has one TPACKET version, and the RX
/// ring is V3): frames are written into slots the kernel shares, marked for sending, and
/// one `send` hands all marked slots over.
struct TxRing {
    fd: OwnedFd,
    ring: *mut u8,
    head: usize,
    queued: u32,
    queued_bytes: u64,
}

impl TxRing {
    fn open(index: i32, qdisc_bypass: bool) -> io::Result<TxRing> {
        // SAFETY: plain system call; the descriptor is owned at once.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let s = fd.as_raw_fd();
        setopt(
            s,
            libc::SOL_PACKET,
            libc::PACKET_VERSION,
            &(libc::tpacket_versions::TPACKET_V2 as i32),
        )?;
        // A frame the device refuses is skipped (marked WRONG_FORMAT), not retried forever.
        setopt(s, libc::SOL_PACKET, libc::PACKET_LOSS, &1i32)?;
        if qdisc_bypass {
            setopt(s, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, &1i32)?;
        }
        let req = libc::tpacket_req {
            tp_block_size: (RING_FRAME * 4) as u32,
            tp_block_nr: (RING_FRAMES / 4) as u32,
            tp_frame_size: RING_FRAME as u32,
            tp_frame_nr: RING_FRAMES as u32,
        };
        setopt(s, libc::SOL_PACKET, libc::PACKET_TX_RING, &req)?;
        // SAFETY: mapping the ring the kernel just made for this socket.
        let ring = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                RING_FRAME * RING_FRAMES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                s,
                0,
            )
        };
        if ring == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let r = TxRing {
            fd,
            ring: ring as *mut u8,
            head: 0,
            queued: 0,
            queued_bytes: 0,
        };
        // SAFETY: an all-zero sockaddr_ll is valid; protocol 0: this socket never receives.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_ifindex = index;
        // SAFETY: binding to a valid sockaddr_ll of the size given.
        let b = unsafe {
            libc::bind(
                s,
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if b < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(r)
    }

    fn status(&self, i: usize) -> &AtomicU32 {
        // SAFETY: `tp_status` is the first u32 of frame i, shared with the kernel.
        unsafe { &*(self.ring.add(i * RING_FRAME) as *const AtomicU32) }
    }

    fn send(&mut self, frame: &[u8], c: &mut PortCounters) {
        if frame.len() > RING_FRAME - TX_DATA {
            c.tx_errors += 1;
            return;
        }
        let mut st = self.status(self.head).load(Ordering::Acquire);
        if st != libc::TP_STATUS_AVAILABLE && st != libc::TP_STATUS_WRONG_FORMAT {
            // Ring full: hand over what is queued; the slot frees when its frame is sent.
            self.flush(c);
            st = self.status(self.head).load(Ordering::Acquire);
            if st != libc::TP_STATUS_AVAILABLE && st != libc::TP_STATUS_WRONG_FORMAT {
                c.tx_errors += 1;
                return;
            }
        }
        if st == libc::TP_STATUS_WRONG_FORMAT {
            // The device refused this slot's earlier frame (counted as sent then).
            c.tx_errors += 1;
            c.tx = c.tx.saturating_sub(1);
        }
        let base = self.head * RING_FRAME;
        // SAFETY: the slot is ours (AVAILABLE); the frame fits after the header.
        unsafe {
            std::ptr::copy_nonoverlapping(
                frame.as_ptr(),
                self.ring.add(base + TX_DATA),
                frame.len(),
            );
            let h = self.ring.add(base) as *mut libc::tpacket2_hdr;
            (*h).tp_len = frame.len() as u32;
            (*h).tp_snaplen = frame.len() as u32;
        }
        self.status(self.head)
            .store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
        self.head = (self.head + 1) % RING_FRAMES;
        self.queued += 1;
        self.queued_bytes += frame.len() as u64;
    }

    fn flush(&mut self, c: &mut PortCounters) {
        if self.queued == 0 {
            return;
        }
        loop {
            // SAFETY: no buffer: the kernel sends the ring's marked frames.
            let r =
                unsafe { libc::send(self.fd.as_raw_fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT) };
            if r >= 0 {
                c.tx += u64::from(self.queued);
                c.tx_bytes += self.queued_bytes;
                break;
            }
            match io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) => continue,
                // Sent what the device took now; the rest goes with the next send.
                Some(libc::EAGAIN) | Some(libc::ENOBUFS) => return,
                _ => {
                    c.tx_errors += u64::from(self.queued);
                    break;
                }
            }
        }
        self.queued = 0;
        self.queued_bytes = 0;
    }
}

impl Drop for TxRing {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping once.
        unsafe { libc::munmap(self.ring as *mut libc::c_void, RING_FRAME * RING_FRAMES) };
    }
}
