//! Idle timers an NF shares with FastPath, so a consolidated hit refreshes them without
//! calling into the NF: per slot a deadline, the idle time a packet extends it by and a
//! tag naming what the slot holds; and the capture time until which the NF has no sweep
//! step to take (a hit before it has nothing else to do in the NF).
//!
//! Atomics with relaxed ordering, so the NF (through `&mut self`) and the runtime (through
//! the shared `Arc`) both reach the slots without `unsafe` or locks; one worker thread runs
//! both, so relaxed loads and stores are plain moves.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// One timer slot.
#[derive(Debug, Default)]
pub struct Timer {
    deadline: AtomicU64,
    idle: AtomicU64,
    /// 0 when the slot holds nothing live.
    tag: AtomicU32,
}

impl Timer {
    /// Capture time after which what the slot holds is dead.
    #[inline]
    pub fn deadline(&self) -> u64 {
        self.deadline.load(Relaxed)
    }

    /// Arms the slot: dead after `now + idle` (saturating; `u64::MAX` never expires).
    #[inline]
    pub fn set(&self, now: u64, idle: u64) {
        self.idle.store(idle, Relaxed);
        self.deadline.store(now.saturating_add(idle), Relaxed);
    }

    /// A packet at `now` extends the deadline by the slot's idle time.
    #[inline]
    pub fn refresh(&self, now: u64) {
        self.deadline
            .store(now.saturating_add(self.idle.load(Relaxed)), Relaxed);
    }

    #[inline]
    pub fn tag(&self) -> u32 {
        self.tag.load(Relaxed)
    }

    #[inline]
    pub fn set_tag(&self, tag: u32) {
        self.tag.store(tag, Relaxed);
    }

    /// Still holds `tag` and is alive at `now`.
    #[inline]
    pub fn holds(&self, tag: u32, now: u64) -> bool {
        self.tag() == tag && now <= self.deadline()
    }
}

/// The timers of one NF.
#[derive(Debug)]
pub struct FastTimers {
    quiet_until: AtomicU64,
    slots: Box<[Timer]>,
}

impl FastTimers {
    pub fn new(slots: usize) -> Arc<FastTimers> {
        Arc::new(FastTimers {
            quiet_until: AtomicU64::new(0),
            slots: (0..slots).map(|_| Timer::default()).collect(),
        })
    }

    #[inline]
    pub fn slot(&self, i: u32) -> Option<&Timer> {
        self.slots.get(i as usize)
    }

    /// Before this capture time the NF has no sweep step to take on a packet.
    #[inline]
    pub fn quiet_until(&self) -> u64 {
        self.quiet_until.load(Relaxed)
    }

    #[inline]
    pub fn set_quiet_until(&self, t: u64) {
        self.quiet_until.store(t, Relaxed);
    }
}

/// Tokens that name a timer slot have this bit set; the slot index is in bits 32-55 and
/// the slot's tag in bits 0-31 (bits 56-62 are the NF's own).
pub const TIMER_TOKEN: u64 = 1 << 63;

/// (slot, tag) of a timer token.
#[inline]
pub fn timer_of(token: u64) -> (u32, u32) {
    ((token >> 32) as u32 & 0xff_ffff, token as u32)
}
