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

/// A hint to load the cache line holding `p` for writing (`PREFETCHW`): the line comes
/// exclusive, so stores to a line another core holds wait for one transfer, issued
/// early, instead of an invalidation each when they commit, one after another. Any
/// address, as for [`prefetch_ptr`].
#[inline(always)]
pub fn prefetch_write_ptr<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHW has no architectural effect and never faults, whatever the
    // address (processors without it execute it as a no-op); it reads no register but
    // its operand and touches no flags or stack.
    unsafe {
        core::arch::asm!(
            "prefetchw byte ptr [{0}]",
            in(reg) p,
            options(nostack, preserves_flags, readonly)
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
