//! Waiting on a spawned `catena` with a bound, and reading which signals it catches, so
//! tests that stop a run never hang and never aim a signal before its handler is in.

use std::process::{Child, Output};
use std::time::{Duration, Instant};

/// Waits for `child` to exit; kills it and fails after `limit` (`what` names the wait).
pub fn exit_within(mut child: Child, limit: Duration, what: &str) -> Output {
    let t = Instant::now();
    while child.try_wait().expect("try_wait").is_none() {
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still running {} s {what}", limit.as_secs());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().expect("wait_with_output")
}

/// [`exit_within`], then fails unless `child` exited with success (its stderr shown).
pub fn success_within(child: Child, limit: Duration, what: &str) -> Output {
    let o = exit_within(child, limit, what);
    assert!(
        o.status.success(),
        "failed {what}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// [`exit_within`], then fails if `child` exited with success or panicked; its stderr,
/// for the test to check the error it gave.
pub fn failure_within(child: Child, limit: Duration, what: &str) -> String {
    let o = exit_within(child, limit, what);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success(), "succeeded {what}: {err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

/// Whether process `pid` has a handler for `sig` (the `SigCgt` mask of
/// /proc/PID/status); false once it has exited.
pub fn catches(pid: u32, sig: i32) -> bool {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    s.lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .is_some_and(|m| m & (1 << (sig - 1)) != 0)
}

/// Waits until `pid` catches `sig` (or `want` false: no longer does), at most `limit`.
pub fn until_catches(pid: u32, sig: i32, want: bool, limit: Duration, what: &str) {
    let t = Instant::now();
    while catches(pid, sig) != want {
        assert!(
            t.elapsed() < limit,
            "{what}: not after {} s",
            limit.as_secs()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}
