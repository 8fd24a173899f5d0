//! Signals of a long-running `catena run`: SIGINT/SIGTERM ask it to stop (finish the
//! batch in hand, flush, print the summary), SIGHUP to reload the chain file. The handlers
//! only set flags, which the worker reads between batches.

use std::sync::atomic::{AtomicBool, Ordering};

pub static STOP: AtomicBool = AtomicBool::new(false);
pub static RELOAD: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

extern "C" fn on_hup(_: libc::c_int) {
    RELOAD.store(true, Ordering::Relaxed);
}

fn install(sig: libc::c_int, f: extern "C" fn(libc::c_int)) {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe. No
    // SA_RESTART: a signal ends the worker's idle `poll` at once.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = f as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(sig, &sa, std::ptr::null_mut());
    }
}

/// Installs the handlers (once, before the run starts).
pub fn install_service_handlers() {
    install(libc::SIGINT, on_stop);
    install(libc::SIGTERM, on_stop);
    install(libc::SIGHUP, on_hup);
}
