//! Apps: the NFs that sit on a stack. An app says which stack level and which event kinds
//! it needs, then gets events in batches through [`App::on_event`] with a [`Ctx`] to read
//! the event's bytes, act on its packet, change its own subscriptions for the flow, and
//! publish events for the apps after it.
//!
//! Delivery ([`dispatch`]): apps run in chain order; each sees the whole batch of events in
//! the order they happened, so within a flow every app sees events in order. An event an
//! app publishes is inserted just before the event it was handling, so the apps after it
//! see the result before the event it was drawn from (a DPI label, then the data that
//! gave it: an IDS that subscribes on the label still gets that data); an app never sees
//! its own events.

use super::conn::{Conn, MAX_APPS};
use super::event::{Bytes, Event, FlowId, Kind, Kinds, FROM_STACK, NO_FLOW, NO_PKT};
use super::queue::Queue;
use super::splice::Splice;
use super::tracker::{Level, Stack};
use crate::packet::{Batch, Fields, Packet, Verdict};

pub trait App: Send {
    fn name(&self) -> &str;

    /// The stack level the app needs.
    fn level(&self) -> Level;

    /// Every kind the app may ever receive: the stack makes no event nobody can want.
    fn kinds(&self) -> Kinds;

    /// What a new flow (and any event without a flow) delivers to the app at first.
    fn initial(&self) -> Kinds {
        self.kinds()
    }

    /// Header fields the app may rewrite, and whether it may drop (for the NF profile).
    fn writes(&self) -> Fields {
        Fields::NONE
    }

    fn may_drop(&self) -> bool {
        false
    }

    /// The app reads [`Ctx::stream_after_packet`]: only then does the stack record each
    /// tracked packet's streams (a store a packet that no other app needs).
    fn streams_per_packet(&self) -> bool {
        false
    }

    /// The app inspects IP datagrams whole, as an IDS does: the stack reassembles IPv4
    /// fragments ([`super::defrag`]) and tracks the datagram instead of its fragments.
    fn defrag(&self) -> bool {
        false
    }

    /// The app takes data events after a gap (bytes the capture missed, the hole's length
    /// in the event's `info`). Only when every app of a stack that takes data does, the
    /// stack skips acknowledged holes; otherwise a direction waits for its holes to fill.
    fn accepts_gaps(&self) -> bool {
        false
    }

    /// The app's drop reasons (the first is the app's own); [`Ctx::drop_packet_as`] picks
    /// one by index, so an app can count drops per cause (an IDS, per rule).
    fn drop_reasons(&self) -> Vec<String> {
        vec![self.name().to_string()]
    }

    fn on_event(&mut self, ev: &Event, cx: &mut Ctx<'_>);

    /// Takes the batch's events: [`deliver`] hands the ones the app subscribed to to
    /// [`App::on_event`]. Being a default method, it is compiled for each app type, so
    /// the per-event call is direct (and inlined) — one virtual call per batch.
    fn on_batch(&mut self, cx: &mut Ctx<'_>) {
        deliver(self, cx)
    }

    /// The run's input ended (after the stack's last FlowEnd events).
    fn finish(&mut self) {}

    /// Opens the app's output files before the first packet (see
    /// [`crate::nfs::Nf::open_outputs`]).
    fn open_outputs(&mut self) -> Result<(), String> {
        Ok(())
    }

    /// Whether the app writes files of its own ([`crate::nfs::Nf::has_outputs`]).
    fn has_outputs(&self) -> bool {
        false
    }

    /// The first failed write to an output file, asked after [`App::finish`].
    fn output_error(&self) -> Option<String> {
        None
    }

    fn stats(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }

    /// Bytes the app may hold at most on a stack tracking `flows` connections: its
    /// per-flow state at that bound (counted by `catena check` against `--max-memory`).
    fn memory(&self, flows: usize) -> usize {
        let _ = flows;
        0
    }
}

/// What an app can do while handling one event.
pub struct Ctx<'a> {
    app: usize,
    /// The drop reason of this app in the NF's profile.
    reason: u8,
    batch: &'a mut [Packet],
    stack: &'a mut Stack,
    q: &'a mut Queue,
    /// Where the next published event goes (just before the current one, after the ones
    /// this handler already published).
    insert_at: usize,
    batch_no: u64,
    /// Number of events published by this handler (so the dispatcher skips past them).
    inserted: usize,
    /// Some app before this one may drop packets.
    check_drops: bool,
}

impl Ctx<'_> {
    /// The event's bytes (data, a published name or message); empty when it has none.
    pub fn bytes(&self, ev: &Event) -> &[u8] {
        match ev.bytes {
            Bytes::None => &[],
            Bytes::InPacket { off, len } => self
                .batch
                .get(ev.pkt as usize)
                .and_then(|p| p.data().get(off as usize..(off + len) as usize))
                .unwrap_or(&[]),
            Bytes::Arena { off, len } => &self.q.arena[off as usize..(off + len) as usize],
        }
    }

    /// The packet the event is about, to read or rewrite.
    pub fn packet(&mut self, ev: &Event) -> Option<&mut Packet> {
        if ev.pkt == NO_PKT {
            return None;
        }
        self.batch.get_mut(ev.pkt as usize)
    }

    /// Drops the event's packet; the microbox counts it under this app's name.
    pub fn drop_packet(&mut self, ev: &Event) {
        self.drop_packet_as(ev, 0);
    }

    /// Drops the event's packet, counted under the app's drop reason `k`
    /// ([`App::drop_reasons`]).
    pub fn drop_packet_as(&mut self, ev: &Event, k: u8) {
        let reason = self.reason.saturating_add(k);
        if let Some(p) = self.packet(ev) {
            p.meta_mut().verdict = Verdict::Drop(reason);
        }
    }

    /// Stream `dir` of the connection of the event's packet as the stack left it just
    /// after taking that packet: (next sequence number, bytes delivered). [`Ctx::conn`]
    /// shows the connection after the whole batch. `None` unless some app of the stack
    /// asked for it ([`App::streams_per_packet`]).
    pub fn stream_after_packet(&self, ev: &Event, dir: usize) -> Option<(u32, u64)> {
        let i = usize::from(ev.pkt);
        match self.q.pkt_flow.get(i) {
            Some(&(f, _)) if f == ev.flow && f != NO_FLOW => {
                self.q.pkt_streams.get(i).and_then(|s| s.get(dir)).copied()
            }
            _ => None,
        }
    }

    /// The flow the event belongs to.
    pub fn conn(&self, f: FlowId) -> Option<&Conn> {
        self.stack.conn(f)
    }

    /// What this app receives for flow `f` from now on.
    pub fn subscriptions(&self, f: FlowId) -> Kinds {
        self.stack.conn(f).map_or(Kinds::NONE, |c| c.subs[self.app])
    }

    pub fn set_subscriptions(&mut self, f: FlowId, k: Kinds) {
        let app = self.app;
        self.stack.per_flow[app] = true;
        if let Some(c) = self.stack.conn_mut(f) {
            c.subs[app] = k;
        }
    }

    pub fn subscribe(&mut self, f: FlowId, k: Kind) {
        let s = self.subscriptions(f).with(k);
        self.set_subscriptions(f, s);
    }

    pub fn unsubscribe(&mut self, f: FlowId, k: Kind) {
        let s = self.subscriptions(f).without(k);
        self.set_subscriptions(f, s);
    }

    /// Publishes an event about the same flow, direction and packet as `cause`, for the
    /// apps after this one, who get it just before `cause`. False when the queue was full
    /// (counted).
    pub fn publish(&mut self, cause: &Event, kind: Kind, info: u32, bytes: &[u8]) -> bool {
        debug_assert!(!kind.from_stack(), "apps publish app kinds only");
        if !self.q.want.has(kind) {
            // No app of the stack takes this kind (an ids's alerts with no app after it):
            // nothing to queue, and nothing refused when the batch's queue is full.
            return true;
        }
        let e = Event {
            kind,
            info,
            from: self.app as u8,
            bytes: Bytes::None,
            ..*cause
        };
        let ok = self.q.insert(self.insert_at, e, bytes);
        if ok {
            self.insert_at += 1;
            self.inserted += 1;
        }
        ok
    }

    /// Hands flow `f` over with sequence translation `s`, from `cause`'s packet on
    /// (splicer level only; false otherwise).
    pub fn splice(&mut self, cause: &Event, f: FlowId, mut s: Splice) -> bool {
        if self.stack.config().level < Level::Splicer {
            return false;
        }
        s.from = if cause.pkt == NO_PKT {
            (self.batch_no + 1) << 16
        } else {
            self.batch_no << 16 | u64::from(cause.pkt)
        };
        match self.stack.conn_mut(f) {
            Some(c) => {
                c.splice = Some(s);
                true
            }
            None => false,
        }
    }
}

/// Delivers the queued events to the apps in order (see the module doc). `reasons[k]` is
/// the NF's first drop reason for app `k`.
pub fn dispatch(
    apps: &mut [Box<dyn App>],
    stack: &mut Stack,
    q: &mut Queue,
    batch: &mut Batch,
    batch_no: u64,
    reasons: &[u8],
) {
    debug_assert!(apps.len() <= MAX_APPS);
    let pkts = batch.as_mut_slice();
    // Whether some app before this one may have dropped a packet.
    let mut drops_before = false;
    for (k, app) in apps.iter_mut().enumerate() {
        let mut cx = Ctx {
            app: k,
            reason: reasons.get(k).copied().unwrap_or(0),
            batch: pkts,
            stack,
            q,
            insert_at: 0,
            batch_no,
            inserted: 0,
            check_drops: drops_before,
        };
        app.on_batch(&mut cx);
        drops_before |= app.may_drop();
    }
}

/// Hands app `cx.app` every queued event it subscribed to, in order.
#[inline]
pub fn deliver<A: App + ?Sized>(app: &mut A, cx: &mut Ctx<'_>) {
    let mut i = 0;
    while i < cx.q.events.len() {
        let ev = cx.q.events[i];
        let at = i;
        i += 1;
        if !cx.stack.wants(cx.app, &ev) {
            continue;
        }
        // A packet an earlier app dropped does not reach the apps after it; stream and
        // state events still do (the shared stack has seen the bytes).
        if cx.check_drops
            && matches!(ev.kind, Kind::Packet | Kind::TcpPacket)
            && ev.from == FROM_STACK
            && cx
                .batch
                .get(ev.pkt as usize)
                .is_some_and(|p| matches!(p.meta().verdict, Verdict::Drop(_)))
        {
            continue;
        }
        cx.insert_at = at;
        cx.inserted = 0;
        app.on_event(&ev, cx);
        // What the app published went before the event: skip past both.
        i += cx.inserted;
    }
}

/// Applies the splices to the batch's packets (after every app has run).
pub fn translate_batch(stack: &mut Stack, q: &Queue, batch: &mut Batch, batch_no: u64) {
    if stack.config().level < Level::Splicer {
        return;
    }
    for (i, p) in batch.iter_mut().enumerate() {
        let Some(&(f, dir)) = q.pkt_flow.get(i) else {
            break;
        };
        let Some(s) = stack.conn(f).and_then(|c| c.splice) else {
            continue;
        };
        if (batch_no << 16 | i as u64) < s.from {
            continue;
        }
        let l = p.layers();
        if let Some(tcp) = p.data_mut().get_mut(l.l4_off as usize..) {
            super::splice::translate(&s, dir as usize, tcp);
        }
    }
}
