//! Live changes with sharded workers: a command from the control socket takes effect at
//! one position of the input (the *cut*) in every worker, exactly as `--change "CUT NF
//! COMMAND"` would. Every packet before the cut is processed under the old state in
//! whichever worker holds it, every packet from the cut on under the new one; nothing is
//! held back or replayed, so nothing is lost or duplicated.
//!
//! The hand-off, run by the dispatcher thread for one command at a time:
//! 1. it raises `pause`; each worker sees it at its next batch boundary (one atomic load
//!    per batch, no lock per packet), parks and says where it is (the input position of
//!    its next packet); a worker whose input has ended counts as parked at the end;
//! 2. the cut is the furthest of those positions, so no worker has passed it; each worker
//!    gets its own copy of the command (compiled off the workers) and resumes;
//! 3. each applies it at the cut: at once if it is there, else after processing up to it
//!    (its batches are cut there, as for scheduled changes), and reports; the reply to the
//!    operator is sent when every worker has applied the change.
//!
//! The same cut works for stages (docs/many-cores.md): a stage applies the change to its own NFs
//! when the first packet at or past the cut reaches it, since each stage sees its
//! packets in input order.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use super::control::{Command, Reply};
use crate::nfs::{Prepared, Preparer};

/// A change handed to one worker: apply `cmd` to `nf` before the packet at input
/// position `at`.
pub(super) struct Order {
    pub at: u64,
    pub nf: String,
    pub cmd: String,
    pub prepared: Option<Prepared>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Where {
    Running,
    /// Parked at a batch boundary; the input position of its next packet.
    Parked(u64),
    /// Its input has ended: it only applies orders until every worker is there.
    Ended,
    /// Returned (done, failed or died): it takes no more orders.
    Gone,
}

/// A worker's answer to an order: the NF's reply and what the change replaced.
type Done = (Result<String, String>, Option<Prepared>);

struct State {
    at: Vec<Where>,
    orders: Vec<Option<Order>>,
    results: Vec<Option<Done>>,
}

/// What the dispatcher and the workers of one sharded run share.
pub(super) struct Gate {
    pause: AtomicBool,
    state: Mutex<State>,
    cv: Condvar,
    /// Packets in the whole input (every loop): the cut of a worker whose input ended
    /// (set by the first worker to end when the input is streamed, unknown before).
    input: AtomicU64,
}

impl Gate {
    pub fn new(workers: usize, input: u64) -> Gate {
        Gate {
            pause: AtomicBool::new(false),
            state: Mutex::new(State {
                at: vec![Where::Running; workers],
                orders: (0..workers).map(|_| None).collect(),
                results: (0..workers).map(|_| None).collect(),
            }),
            cv: Condvar::new(),
            input: AtomicU64::new(input),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A worker that panicked holding the lock leaves consistent state (it only ever
        // writes one slot), so the poison is ignored.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait<'a>(&self, g: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.cv.wait(g).unwrap_or_else(|p| p.into_inner())
    }

    /// Worker `w` at a batch boundary, its next packet at input position `next`: parks
    /// while a cut is being chosen and returns the order it is given. One atomic load
    /// when no command is pending.
    #[inline]
    pub fn check(&self, w: usize, next: u64) -> Option<Order> {
        if !self.pause.load(Ordering::Acquire) {
            return None;
        }
        self.park(w, next)
    }

    #[cold]
    fn park(&self, w: usize, next: u64) -> Option<Order> {
        let mut g = self.lock();
        g.at[w] = Where::Parked(next);
        self.cv.notify_all();
        while matches!(g.at[w], Where::Parked(_)) {
            g = self.wait(g);
        }
        g.orders[w].take()
    }

    /// Worker `w` has applied its order.
    pub fn report(&self, w: usize, result: Result<String, String>, replaced: Option<Prepared>) {
        let mut g = self.lock();
        g.results[w] = Some((result, replaced));
        self.cv.notify_all();
    }

    /// Worker `w`'s input has ended: it applies the orders it is given (`apply`) until
    /// every worker's input has ended, so that every worker's state takes every change.
    pub fn end(&self, w: usize, mut apply: impl FnMut(Order) -> Done) {
        let mut g = self.lock();
        g.at[w] = Where::Ended;
        self.cv.notify_all();
        loop {
            if let Some(o) = g.orders[w].take() {
                drop(g);
                let (r, replaced) = apply(o);
                self.report(w, r, replaced);
                g = self.lock();
                continue;
            }
            if g.at.iter().all(|a| matches!(a, Where::Ended | Where::Gone)) {
                // Leaving: no order may be handed to this worker any more.
                g.at[w] = Where::Gone;
                self.cv.notify_all();
                return;
            }
            g = self.wait(g);
        }
    }

    /// [`Gate::end`] for a worker that walked the whole input, `input` packets (a
    /// streamed file, whose length nobody knew before): that is where it parked.
    pub fn end_at(&self, w: usize, input: u64, apply: impl FnMut(Order) -> Done) {
        // Stored before `end` takes the lock that publishes `Ended`.
        self.input.store(input, Ordering::Relaxed);
        self.end(w, apply)
    }

    /// Worker `w` has returned, whatever the reason: never waited for again.
    pub fn gone(&self, w: usize) {
        let mut g = self.lock();
        g.at[w] = Where::Gone;
        g.orders[w] = None;
        self.cv.notify_all();
    }

    /// True when no worker takes orders any more.
    fn over(g: &State) -> bool {
        g.at.iter().all(|a| *a == Where::Gone)
    }

    /// Applies one command in every worker at one cut; the reply names the cut.
    fn dispatch(
        &self,
        c: &mut Command,
        preparers: &std::collections::HashMap<String, Preparer>,
    ) -> Reply {
        let ended = || Reply {
            result: Err("the run has ended".to_string()),
            replaced: None,
        };
        self.pause.store(true, Ordering::Release);
        let mut g = self.lock();
        while g.at.contains(&Where::Running) {
            g = self.wait(g);
        }
        self.pause.store(false, Ordering::Release);
        let cut =
            g.at.iter()
                .filter_map(|a| match a {
                    Where::Parked(p) => Some(*p),
                    Where::Ended => Some(self.input.load(Ordering::Relaxed)),
                    _ => None,
                })
                .max();
        // No cut only when every worker has returned.
        let Some(cut) = cut else {
            return ended();
        };
        let takers: Vec<usize> = (0..g.at.len())
            .filter(|&w| g.at[w] != Where::Gone)
            .collect();
        let mut first = c.prepared.take();
        for &w in &takers {
            let prepared = match first.take() {
                Some(p) => Some(p),
                None => match preparers.get(&c.nf).map(|p| p(&c.cmd)).transpose() {
                    Ok(p) => p,
                    Err(e) => {
                        // Release the workers unchanged: the command never applied.
                        for a in g.at.iter_mut() {
                            if matches!(a, Where::Parked(_)) {
                                *a = Where::Running;
                            }
                        }
                        for o in g.orders.iter_mut() {
                            *o = None;
                        }
                        self.cv.notify_all();
                        return Reply {
                            result: Err(e),
                            replaced: None,
                        };
                    }
                },
            };
            g.orders[w] = Some(Order {
                at: cut,
                nf: c.nf.clone(),
                cmd: c.cmd.clone(),
                prepared,
            });
            g.results[w] = None;
        }
        for a in g.at.iter_mut() {
            if matches!(a, Where::Parked(_)) {
                *a = Where::Running;
            }
        }
        self.cv.notify_all();
        // Every taker reports, or is gone.
        while takers
            .iter()
            .any(|&w| g.results[w].is_none() && g.at[w] != Where::Gone)
        {
            g = self.wait(g);
        }
        let mut result = None;
        let mut replaced = None;
        for &w in &takers {
            if let Some((r, p)) = g.results[w].take() {
                replaced = replaced.or(p);
                match (&result, r) {
                    (None, r) | (Some(Ok(_)), r @ Err(_)) => result = Some(r),
                    _ => {}
                }
            }
        }
        drop(g);
        match result {
            Some(Ok(s)) => Reply {
                result: Ok(format!(
                    "{s} (from packet {cut} in {} workers)",
                    takers.len()
                )),
                replaced,
            },
            Some(Err(e)) => Reply {
                result: Err(e),
                replaced,
            },
            None => ended(),
        }
    }

    /// The dispatcher: takes the socket's commands one at a time until every worker has
    /// returned. Replies are sent when every worker has applied the change.
    pub fn serve(
        &self,
        rx: &Receiver<Command>,
        preparers: &std::collections::HashMap<String, Preparer>,
    ) {
        loop {
            match rx.recv_timeout(Duration::from_millis(20)) {
                Ok(mut c) => {
                    let reply = self.dispatch(&mut c, preparers);
                    if let Some(r) = c.reply.take() {
                        let _ = r.send(reply);
                    }
                }
                Err(RecvTimeoutError::Timeout) if !Self::over(&self.lock()) => {}
                Err(_) => return,
            }
        }
    }
}
