//! Signals of a long-running `catena run`: SIGINT/SIGTERM ask it to stop (finish the
//! batch in hand, flush, print the summary), SIGHUP to reload the chain file. The handlers
//! only set flags, which the worker reads between batches.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

pub static STOP: AtomicBool = AtomicBool::new(false);
pub static RELOAD: AtomicBool = AtomicBool::new(false);
/// The first stop signal received (0: none).
static SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_stop(sig: libc::c_int) {
    let _ = SIGNAL.compare_exchange(0, sig, Ordering::Relaxed, Ordering::Relaxed);
    STOP.store(true, Ordering::Relaxed);
}

/// The stop signal received, if any: its name and the exit status a shell gives a
/// process it ended (128 + its number: 130 for SIGINT, 143 for SIGTERM).
pub fn received() -> Option<(&'static str, i32)> {
    match SIGNAL.load(Ordering::Relaxed) {
        0 => None,
        libc::SIGINT => Some(("SIGINT", 128 + libc::SIGINT)),
        libc::SIGTERM => Some(("SIGTERM", 128 + libc::SIGTERM)),
        s => Some(("a signal", 128 + s)),
    }
}

extern "C" fn on_hup(_: libc::c_int) {
    RELOAD.store(true, Ordering::Relaxed);
}

fn install(sig: libc::c_int, f: extern "C" fn(libc::c_int), flags: libc::c_int) {
    // SAFETY: the handler only stores to atomics, which is async-signal-safe.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = f as usize;
        sa.sa_flags = flags;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(sig, &sa, std::ptr::null_mut());
    }
}

/// Installs the handlers (once, before the run starts).
/// No SA_RESTART: a signal ends the worker's idle `poll` at once.
pub fn install_service_handlers() {
    install(libc::SIGINT, on_stop, 0);
    install(libc::SIGTERM, on_stop, 0);
    install(libc::SIGHUP, on_hup, 0);
}

/// For a trace replay (once, before it starts): the first SIGINT/SIGTERM stops it
/// between batches; a second of the same kills at once (SA_RESETHAND: the default
/// action is back), for a replay stuck where batches do not end. SA_RESTART: reading
/// a pipe or writing a file goes on rather than failing with EINTR.
pub fn install_replay_handlers() {
    let flags = libc::SA_RESETHAND | libc::SA_RESTART;
    install(libc::SIGINT, on_stop, flags);
    install(libc::SIGTERM, on_stop, flags);
}
