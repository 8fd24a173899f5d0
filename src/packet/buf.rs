//! A packet: one pooled buffer with headroom, its metadata, and the bytes in use.
//!
//! The bytes are either the packet's own (in its buffer) or a read-only *view* of memory
//! that outlives the packet (a mapped trace): reading a view costs nothing more than
//! reading owned bytes, and the first change (a write, a push, an extend) copies the view
//! into the packet's own buffer, which every packet keeps anyway for its metadata.

use std::ptr::NonNull;

use super::layers::Layers;
use super::meta::{Meta, Verdict};

/// Bytes kept free in front of the packet so NFs can push headers without copying.
pub const HEADROOM: usize = 128;

/// `Buf::view`: the bytes are the packet's own.
const OWNED: u8 = 0;
/// `Buf::view`: a view of `'static` bytes (`set_view`). The pool need not forget it on
/// free: the bytes outlive every packet, and whoever takes the buffer next gives it new
/// bytes or has the view forgotten then (see `Pool::take_into`).
const STATIC: u8 = 1;
/// `Buf::view`: a view of bytes lent for less than the process (`set_view_unchecked`);
/// forgotten on free, since the lender reuses them.
const LENT: u8 = 2;

/// The pooled allocation. `D` is `[u8; N]` when built and `[u8]` once pooled, so one pool
/// can hold buffers of any size chosen at run time with a single allocation each.
pub(crate) struct Buf<D: ?Sized> {
    pub(crate) meta: Meta,
    /// The packet's first byte: `data[start]` when owned, the view's first byte otherwise.
    /// Kept as a pointer so [`Packet::data`] is the same load either way, without a branch.
    /// Mutable only when owned (derived from the box's raw pointer); a view's is never
    /// written through.
    ptr: *mut u8,
    /// Where the bytes start in `data` (meaningful when owned).
    pub(crate) start: u32,
    pub(crate) len: u32,
    /// Whose bytes `ptr` points at: [`OWNED`], or borrowed (read-only, never written
    /// through `ptr`) for the process ([`STATIC`]) or for less ([`LENT`]).
    view: u8,
    pub(crate) data: D,
}

/// A packet owned by exactly one place at a time (a batch, an NF's queue, the pool).
/// Moving it moves one pointer; the bytes never move.
///
/// Held as the raw pointer `Box::into_raw` gives (freed by `Drop`), so the pointer to
/// its own bytes that the packet keeps stays derived from it, however often the buffer is
/// borrowed mutably in between.
pub struct Packet(NonNull<Buf<[u8]>>);

impl Drop for Packet {
    fn drop(&mut self) {
        // SAFETY: made by `Box::into_raw` in `new_boxed`, dropped once.
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

// SAFETY: `ptr` points either into the packet's own boxed buffer, which moves with the
// packet and is reached only through it, or into memory a view borrows, which is
// read-only and outlives the packet (see `set_view_unchecked`); sharing or sending a
// packet across threads is therefore as safe as sharing or sending its `Box`.
unsafe impl Send for Packet {}
unsafe impl Sync for Packet {}

impl Packet {
    pub(crate) fn new_boxed<const N: usize>() -> Packet {
        let b: Box<Buf<[u8]>> = Box::new(Buf {
            meta: Meta::default(),
            ptr: std::ptr::null_mut(),
            start: HEADROOM as u32,
            len: 0,
            view: OWNED,
            data: [0u8; N],
        });
        let mut p = Packet(NonNull::from(Box::leak(b)));
        p.point_at_own();
        p
    }

    #[inline(always)]
    fn b(&self) -> &Buf<[u8]> {
        // SAFETY: the pointer is a live box that only this packet reaches.
        unsafe { self.0.as_ref() }
    }

    #[inline(always)]
    fn b_mut(&mut self) -> &mut Buf<[u8]> {
        // SAFETY: as in `b`, and `&mut self` makes the access unique.
        unsafe { self.0.as_mut() }
    }

    /// Points `ptr` at `data[start]` (after the owned bytes moved or became owned),
    /// derived from the box's raw pointer rather than from a reference to the buffer.
    #[inline(always)]
    fn point_at_own(&mut self) {
        let start = self.b().start as usize;
        debug_assert!(start <= self.capacity());
        let root = self.0.as_ptr();
        // SAFETY: `root` is the live box; `start <= data.len()` (checked by every method
        // that moves it), so the result stays within the allocation.
        self.b_mut().ptr = unsafe { (&raw mut (*root).data as *mut u8).add(start) };
    }

    /// Copies a view into the own buffer, after the headroom. Kept out of line: it runs
    /// once per viewed packet that an NF changes, never on a read.
    #[cold]
    #[inline(never)]
    fn own(&mut self) {
        let b = self.b_mut();
        let len = b.len as usize;
        // `set_view_unchecked` refused views that would not fit here.
        let dst = &mut b.data[HEADROOM..HEADROOM + len];
        // SAFETY: a view's `ptr` is valid for `len` bytes (the `set_view_unchecked`
        // contract) and cannot overlap `data`, which only the packet reaches.
        dst.copy_from_slice(unsafe { std::slice::from_raw_parts(b.ptr, len) });
        b.start = HEADROOM as u32;
        b.view = OWNED;
        self.point_at_own();
    }

    /// A stand-alone packet outside any pool (tests, tools). Hot paths use [`super::Pool`].
    pub fn from_bytes(bytes: &[u8]) -> Packet {
        let mut p = if bytes.len() + HEADROOM <= 2048 {
            Packet::new_boxed::<2048>()
        } else {
            Packet::new_boxed::<{ 65536 + HEADROOM }>()
        };
        p.set_bytes(bytes);
        p.b_mut().meta.wire_len = bytes.len() as u32;
        p
    }

    /// Total bytes the buffer can hold including headroom.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.b().data.len()
    }

    /// Replace the contents (headroom restored, metadata reset except what the caller sets).
    /// Returns false, leaving the packet unchanged, if the bytes do not fit.
    #[inline]
    pub fn set_bytes(&mut self, bytes: &[u8]) -> bool {
        let b = self.b_mut();
        if HEADROOM + bytes.len() > b.data.len() {
            return false;
        }
        b.data[HEADROOM..HEADROOM + bytes.len()].copy_from_slice(bytes);
        b.start = HEADROOM as u32;
        b.len = bytes.len() as u32;
        b.view = OWNED;
        b.reset_meta();
        self.point_at_own();
        true
    }

    /// Makes the packet a read-only view of `bytes` (metadata reset as by
    /// [`set_bytes`](Self::set_bytes)): nothing is copied until the packet is first
    /// changed. Returns false, leaving the packet unchanged, if the bytes would not fit
    /// the packet's own buffer (the copy a change makes must always succeed).
    ///
    /// `'static` is what makes this safe: a view may travel anywhere a packet goes (stage
    /// threads, NF queues, the pool) for as long as the process runs. A mapped trace is
    /// leaked for the run to give it that lifetime (`io::MappedPcap`).
    #[inline]
    pub fn set_view(&mut self, bytes: &'static [u8]) -> bool {
        // SAFETY: `'static` bytes outlive the packet and, being behind `&`, are never
        // written by anyone while it reads them.
        unsafe { self.view_as(bytes, STATIC) }
    }

    /// [`set_view`](Self::set_view) without its length check, for a caller that chose
    /// the buffer for the bytes (ingest's chunk paths: small-class buffers from
    /// `Pool::take_into` and records of at most `Pool::small_max` bytes): the check was a
    /// load, an add and a branch a packet there.
    ///
    /// # Safety
    /// `HEADROOM + bytes.len() <= self.capacity()`, so the copy a change makes fits.
    #[inline(always)]
    pub unsafe fn set_view_fitting(&mut self, bytes: &'static [u8]) {
        debug_assert!(HEADROOM + bytes.len() <= self.capacity());
        let b = self.b_mut();
        b.ptr = bytes.as_ptr().cast_mut();
        b.len = bytes.len() as u32;
        b.view = STATIC;
        b.reset_meta();
    }

    /// [`set_view`](Self::set_view) for bytes whose lifetime the compiler cannot see.
    ///
    /// # Safety
    /// `bytes` must stay valid and unchanged until the packet stops viewing them: until
    /// it is given other bytes ([`set_bytes`](Self::set_bytes), another view), changed
    /// (which copies them), or dropped — wherever the packet has gone by then, including
    /// other threads and the pool it is freed into.
    #[inline]
    pub unsafe fn set_view_unchecked(&mut self, bytes: &[u8]) -> bool {
        // SAFETY: the caller's contract.
        unsafe { self.view_as(bytes, LENT) }
    }

    /// # Safety
    /// As [`set_view_unchecked`](Self::set_view_unchecked); `'static` bytes for `STATIC`.
    #[inline(always)]
    unsafe fn view_as(&mut self, bytes: &[u8], kind: u8) -> bool {
        let b = self.b_mut();
        if HEADROOM + bytes.len() > b.data.len() {
            return false;
        }
        b.ptr = bytes.as_ptr().cast_mut();
        b.len = bytes.len() as u32;
        b.view = kind;
        b.reset_meta();
        true
    }

    /// The bytes, when they are a view of `'static` memory (a mapped trace), else None:
    /// another packet may view them too, on any thread, whatever happens to this one.
    #[inline]
    pub fn lasting(&self) -> Option<&'static [u8]> {
        let b = self.b();
        // SAFETY: a `STATIC` view was made by `set_view` from `'static` bytes, which
        // nobody writes (they are behind `&`), and `pull_front` only narrowed it since.
        (b.view == STATIC).then(|| unsafe { std::slice::from_raw_parts(b.ptr, b.len as usize) })
    }

    /// Makes the packet `len` bytes long, of which only the first `head.len()` are set
    /// (to `head`): the rest are what the buffer held (stale, never uninitialised).
    /// Metadata reset as by [`set_bytes`](Self::set_bytes). For a reader known to look
    /// no further than `head` but at the length, that never pushes a header (a parallel
    /// branch's shadow, `runtime::join`): the bytes start at the buffer's first byte, no
    /// headroom, so that a short head shares its cache lines with the metadata. False,
    /// leaving the packet unchanged, if `len` (with the headroom other packets keep) does
    /// not fit or is shorter than `head`.
    #[inline]
    pub fn set_head(&mut self, head: &[u8], len: usize) -> bool {
        let b = self.b_mut();
        if head.len() > len || HEADROOM + len > b.data.len() {
            return false;
        }
        b.data[..head.len()].copy_from_slice(head);
        b.start = 0;
        b.len = len as u32;
        b.view = OWNED;
        b.reset_meta();
        self.point_at_own();
        true
    }

    /// Stops viewing borrowed bytes, leaving an empty owned packet; a no-op for a packet
    /// that owns its bytes. The pool calls it on free, so that a freed packet never points
    /// into memory its lender reuses (a live port recycles its frames after the batch).
    #[inline]
    pub fn forget_view(&mut self) {
        if self.b().view != OWNED {
            self.forget();
        }
    }

    /// [`forget_view`](Self::forget_view) for lent views only: a view of `'static` bytes
    /// (a mapped trace) stays as it is. The pool frees with this, saving the stores on
    /// every packet of a trace read in place; it forgets the rest when it hands a buffer
    /// out (except to `Pool::take_into`, whose caller gives every buffer new bytes).
    #[inline(always)]
    pub(crate) fn forget_lent_view(&mut self) {
        if self.b().view == LENT {
            self.forget();
        }
    }

    #[inline(always)]
    fn forget(&mut self) {
        // `point_at_own` with the start known: its reload of `start` after the stores
        // cost a few instructions per packet freed.
        let root = self.0.as_ptr();
        // SAFETY: `root` is the live box; HEADROOM fits every buffer (`set_view` refused
        // bytes that would not fit after it).
        let own = unsafe { (&raw mut (*root).data as *mut u8).add(HEADROOM) };
        let b = self.b_mut();
        b.view = OWNED;
        b.len = 0;
        b.start = HEADROOM as u32;
        b.ptr = own;
    }

    /// The bytes are a view of borrowed memory, not yet copied into the packet's buffer.
    #[inline]
    pub fn is_view(&self) -> bool {
        self.b().view != OWNED
    }

    /// Copies a view into the packet's own buffer (what any change does first); a no-op
    /// for a packet that owns its bytes.
    #[inline]
    pub fn make_owned(&mut self) {
        if self.b().view != OWNED {
            self.own();
        }
    }

    /// Appends bytes at the end; false, leaving the packet unchanged, if they do not fit.
    #[inline]
    pub fn extend(&mut self, bytes: &[u8]) -> bool {
        self.make_owned();
        let b = self.b_mut();
        let end = (b.start + b.len) as usize;
        if end + bytes.len() > b.data.len() {
            return false;
        }
        b.data[end..end + bytes.len()].copy_from_slice(bytes);
        b.len += bytes.len() as u32;
        true
    }

    #[inline]
    pub fn data(&self) -> &[u8] {
        let b = self.b();
        // SAFETY: `ptr` is valid for `len` bytes: owned, it is `data[start..]` with
        // `start + len <= data.len()` (every method that moves them checks); a view, the
        // borrowed bytes, valid for the packet's lifetime by `set_view_unchecked`'s
        // contract. Nothing writes them while `&self` is held.
        unsafe { std::slice::from_raw_parts(b.ptr, b.len as usize) }
    }

    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        self.make_owned();
        let b = self.b_mut();
        // SAFETY: owned now, so `ptr` is `data[start..start + len]`, derived from the
        // box's raw pointer (writable) and reached only through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(b.ptr, b.len as usize) }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.b().len as usize
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.b().len == 0
    }

    #[inline]
    pub fn meta(&self) -> &Meta {
        &self.b().meta
    }

    #[inline]
    pub fn meta_mut(&mut self) -> &mut Meta {
        &mut self.b_mut().meta
    }

    /// Both at once, for NFs that read offsets and write bytes.
    #[inline]
    pub fn split_mut(&mut self) -> (&mut Meta, &mut [u8]) {
        self.make_owned();
        let b = self.b_mut();
        // SAFETY: as in `data_mut`; `meta` is a separate field, so the two do not overlap.
        let d = unsafe { std::slice::from_raw_parts_mut(b.ptr, b.len as usize) };
        (&mut b.meta, d)
    }

    /// The meta to change and the bytes to read only: a borrowed view stays borrowed
    /// (no copy), for NFs that read the packet but never write its bytes.
    #[inline]
    pub fn split_meta(&mut self) -> (&mut Meta, &[u8]) {
        let b = self.b_mut();
        // SAFETY: as in `data`: `ptr` is valid for `len` bytes and nothing writes them
        // while the slice lives (it borrows `self`); `meta` is a separate field.
        let d = unsafe { std::slice::from_raw_parts(b.ptr, b.len as usize) };
        (&mut b.meta, d)
    }

    /// Header offsets, decoding them on first use (Steve's partial decode).
    #[inline]
    pub fn layers(&mut self) -> Layers {
        let l = self.b().meta.layers;
        if !l.is_unparsed() {
            return l;
        }
        // The decoded value itself, not a reload of the store just made.
        let l = Layers::parse(self.b().meta.link, self.data());
        self.b_mut().meta.layers = l;
        l
    }

    /// Grow the packet at the front by `n` bytes (for pushing a header); returns the new
    /// front bytes, or None when the headroom is exhausted. Decoded offsets are reset.
    pub fn push_front(&mut self, n: usize) -> Option<&mut [u8]> {
        self.make_owned();
        let b = self.b_mut();
        if (b.start as usize) < n {
            return None;
        }
        b.start -= n as u32;
        b.len += n as u32;
        b.meta.layers = Layers::UNPARSED;
        let s = b.start as usize;
        self.point_at_own();
        Some(&mut self.b_mut().data[s..s + n])
    }

    /// Remove `n` bytes from the front (for popping a header). A view stays a view (it
    /// only starts later): nothing is written.
    pub fn pull_front(&mut self, n: usize) -> bool {
        let b = self.b_mut();
        if (b.len as usize) < n {
            return false;
        }
        if b.view != OWNED {
            // SAFETY: `n <= len`, so the new start is within the borrowed bytes.
            b.ptr = unsafe { b.ptr.add(n) };
            b.len -= n as u32;
        } else {
            b.start += n as u32;
            b.len -= n as u32;
            self.point_at_own();
        }
        self.b_mut().meta.layers = Layers::UNPARSED;
        true
    }

    /// Mark the packet to leave through output `o` of the current NF.
    #[inline]
    pub fn forward(&mut self, o: u8) {
        self.b_mut().meta.verdict = Verdict::Out(o);
    }

    /// Mark the packet dropped with reason index `r` of the current NF's profile.
    #[inline]
    pub fn drop_with(&mut self, r: u8) {
        self.b_mut().meta.verdict = Verdict::Drop(r);
    }
}

impl Buf<[u8]> {
    /// What new contents reset: decoded offsets, flow hash, verdict and fused filters'
    /// verdicts.
    #[inline]
    fn reset_meta(&mut self) {
        self.meta.layers = Layers::UNPARSED;
        self.meta.flow_hash = 0;
        self.meta.verdict = Verdict::Out(0);
        self.meta.filter_verdicts = 0;
    }
}

impl std::fmt::Debug for Packet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Packet")
            .field("len", &self.len())
            .field("meta", self.meta())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_and_pull_keep_bytes() {
        let mut p = Packet::from_bytes(&[1, 2, 3]);
        p.push_front(2).unwrap().copy_from_slice(&[9, 8]);
        assert_eq!(p.data(), &[9, 8, 1, 2, 3]);
        assert!(p.pull_front(3));
        assert_eq!(p.data(), &[2, 3]);
        assert!(!p.pull_front(3));
    }

    #[test]
    fn extend_appends_within_the_buffer() {
        let mut p = Packet::from_bytes(&[1, 2]);
        assert!(p.extend(&[3, 4]));
        assert_eq!(p.data(), &[1, 2, 3, 4]);
        let room = p.capacity() - HEADROOM - 4;
        assert!(!p.extend(&vec![0; room + 1]));
        assert_eq!(p.len(), 4);
    }

    #[test]
    fn headroom_is_bounded() {
        let mut p = Packet::from_bytes(&[0; 10]);
        assert!(p.push_front(HEADROOM).is_some());
        assert!(p.push_front(1).is_none());
    }

    #[test]
    fn oversize_bytes_are_refused() {
        let mut p = Packet::from_bytes(&[0; 10]);
        assert!(!p.set_bytes(&vec![0; p.capacity()]));
        assert_eq!(p.len(), 10);
    }

    fn leaked(bytes: &[u8]) -> &'static [u8] {
        Box::leak(bytes.to_vec().into_boxed_slice())
    }

    #[test]
    fn a_view_is_read_in_place() {
        let src = leaked(&[1, 2, 3, 4, 5]);
        let mut p = Packet::from_bytes(&[9; 40]);
        p.meta_mut().flow_hash = 7;
        assert!(p.set_view(src));
        assert!(p.is_view());
        assert_eq!(p.data(), &[1, 2, 3, 4, 5]);
        assert_eq!(p.data().as_ptr(), src.as_ptr(), "not copied");
        assert_eq!(p.meta().flow_hash, 0, "metadata reset as by set_bytes");
        assert!(p.pull_front(2));
        assert!(p.is_view(), "pulling writes nothing");
        assert_eq!(p.data(), &[3, 4, 5]);
        assert_eq!(p.data().as_ptr(), src[2..].as_ptr());
    }

    #[test]
    fn the_first_write_copies_and_leaves_the_source_alone() {
        let src = leaked(&[1, 2, 3, 4, 5]);
        let mut p = Packet::from_bytes(&[]);
        p.set_view(src);
        p.data_mut()[0] = 0xee;
        assert!(!p.is_view());
        assert_eq!(p.data(), &[0xee, 2, 3, 4, 5]);
        assert_eq!(src, &[1, 2, 3, 4, 5]);
        // Owned from now on: headroom is back, pushes and pulls work on the copy.
        p.push_front(HEADROOM).unwrap().fill(0xaa);
        assert_eq!(p.len(), HEADROOM + 5);
        assert!(p.pull_front(HEADROOM + 1));
        assert_eq!(p.data(), &[2, 3, 4, 5]);
    }

    #[test]
    fn every_change_copies_a_view_first() {
        type Change = fn(&mut Packet);
        let changes: [(Change, &[u8]); 5] = [
            (|p| p.split_mut().1[1] = 0, &[3, 0, 5]),
            (|p| p.push_front(1).unwrap()[0] = 8, &[8, 3, 4, 5]),
            (|p| assert!(p.extend(&[6])), &[3, 4, 5, 6]),
            (|p| p.make_owned(), &[3, 4, 5]),
            (|p| assert!(p.set_bytes(&[7])), &[7]),
        ];
        for (change, want) in changes {
            let src = leaked(&[1, 2, 3, 4, 5]);
            let mut p = Packet::from_bytes(&[]);
            p.set_view(src);
            p.pull_front(2);
            change(&mut p);
            assert!(!p.is_view());
            assert_eq!(p.data(), want);
            assert_eq!(src, &[1, 2, 3, 4, 5]);
        }
    }

    #[test]
    fn a_head_sets_the_first_bytes_and_the_length() {
        let mut p = Packet::from_bytes(&[]);
        assert!(p.set_head(&[7; 10], 10));
        p.meta_mut().flow_hash = 9;
        assert!(p.set_head(&[1, 2, 3], 10));
        assert_eq!(p.len(), 10);
        assert_eq!(&p.data()[..3], &[1, 2, 3]);
        assert_eq!(&p.data()[3..], &[7; 7], "the rest is what the buffer held");
        assert_eq!(p.meta().flow_hash, 0, "metadata reset as by set_bytes");
        let room = p.capacity() - HEADROOM;
        assert!(!p.set_head(&[1, 2, 3], 2), "a head longer than the packet");
        assert!(!p.set_head(&[], room + 1), "a length past the buffer");
        assert_eq!(p.len(), 10);
        assert!(p.set_head(&[], room));
        // A view becomes owned.
        p.set_view(leaked(&[5, 6]));
        assert!(p.set_head(&[4], 2));
        assert!(!p.is_view());
        assert_eq!(
            p.data(),
            &[4, 2],
            "the rest is the buffer's, not the view's"
        );
    }

    #[test]
    fn only_a_view_of_static_bytes_lasts() {
        let src = leaked(&[1, 2, 3, 4]);
        let mut p = Packet::from_bytes(&[9; 4]);
        assert_eq!(p.lasting(), None, "owned bytes");
        p.set_view(src);
        p.pull_front(1);
        assert_eq!(p.lasting().map(|b| b.as_ptr()), Some(src[1..].as_ptr()));
        let lent = [1u8, 2];
        // SAFETY: `lent` outlives `p`'s view of it (forgotten below).
        assert!(unsafe { p.set_view_unchecked(&lent) });
        assert_eq!(p.lasting(), None, "lent bytes do not last");
        p.forget_view();
        p.set_view(src);
        p.data_mut()[0] = 0;
        assert_eq!(p.lasting(), None, "a written view is owned");
    }

    #[test]
    fn a_view_larger_than_the_buffer_is_refused() {
        let mut p = Packet::from_bytes(&[1, 2]);
        let big = leaked(&vec![0; p.capacity() - HEADROOM + 1]);
        assert!(!p.set_view(big));
        assert!(!p.is_view());
        assert_eq!(p.data(), &[1, 2]);
        let fits = leaked(&vec![3; p.capacity() - HEADROOM]);
        assert!(p.set_view(fits));
        p.data_mut()[0] = 4;
        assert_eq!(p.len(), fits.len());
    }

    #[test]
    fn a_view_decodes_its_layers_and_crosses_threads() {
        // Ethernet, IPv4, UDP: offsets decoded from the borrowed bytes.
        let mut f = vec![0u8; 42];
        f[12] = 0x08;
        f[14] = 0x45;
        f[23] = 17;
        let src = leaked(&f);
        let mut p = Packet::from_bytes(&[]);
        p.set_view(src);
        let l = p.layers();
        assert!(!l.is_unparsed());
        let p = std::thread::spawn(move || {
            assert_eq!(p.data().as_ptr(), src.as_ptr());
            p
        })
        .join()
        .unwrap();
        assert_eq!(p.meta().layers, l);
    }
}
