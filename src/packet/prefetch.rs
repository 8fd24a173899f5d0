//! The one spelling of the prefetch hint: every layer above (io's mapped reader, flow's
//! tables, the filters' cache, the runtime's lookahead) calls this, so packet, the lowest
//! layer, holds it.

/// A hint to load the cache line holding `p`. The pointer is only formed, never read
/// through: any address is allowed (past a slice's end, dangling, null).
#[inline(always)]
pub fn prefetch_ptr<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch has no architectural effect and never faults, whatever the address.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
