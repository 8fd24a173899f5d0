//! `microbox`: an NF that owns a consolidated TCP stack and a list of apps on it
//! (Microboxes, SIGCOMM'18). From the runtime's view it is one ordinary NF.
//!
//! - `mode = "consolidated"` (default): one stack, every app fed from its events.
//! - `mode = "per-nf"`: the baseline — every app gets a stack of its own, and the packet
//!   goes through stack 1 + app 1, then stack 2 + app 2, … (a chain of mOS instances).
//!
//! The stack level is the highest any app needs, or `level` if set higher.
//! See docs/microboxes.md.

mod dpi_app;
mod ids_app;
mod l4_lb;
mod l7_lb;
mod rewrite;
mod tcp_count;
mod toy;

pub use dpi_app::DpiApp;
pub use ids_app::IdsApp;
pub use l4_lb::L4Lb;
pub use l7_lb::L7Lb;
pub use tcp_count::TcpCount;
pub use toy::{HttpWatch, Labeller};

use super::nf::{Context, Nf, Profile, StateScope};
use super::params::{ParamDoc, ParamError, Params};
use crate::packet::{Batch, Fields, Verdict};
use crate::stack::{self, App, Kinds, Level, Queue, Stack, StackConfig, MAX_APPS};

/// App kinds by config name.
pub struct AppKind {
    pub name: &'static str,
    pub summary: &'static str,
    pub params: &'static [ParamDoc],
    pub build: fn(&mut Params) -> Result<Box<dyn App>, ParamError>,
}

pub const APPS: &[AppKind] = &[
    AppKind {
        name: "tcp_count",
        summary: "minimal TCP NF: per-flow packets, bytes and state changes",
        params: TcpCount::PARAMS,
        build: |p| Ok(Box::new(TcpCount::from_params(p)?)),
    },
    AppKind {
        name: "l4_lb",
        summary: "L4 load balancer: backend by 5-tuple hash, pinned per connection, destination rewritten",
        params: L4Lb::PARAMS,
        build: |p| Ok(Box::new(L4Lb::from_params(p)?)),
    },
    AppKind {
        name: "l7_lb",
        summary: "L7 load balancer on the splicer: backend by HTTP Host or URI prefix of the first request",
        params: L7Lb::PARAMS,
        build: |p| Ok(Box::new(L7Lb::from_params(p)?)),
    },
    AppKind {
        name: "dpi",
        summary: "DPI: labels each TCP flow's application protocol from its bytes and publishes the result",
        params: DpiApp::PARAMS,
        build: |p| Ok(Box::new(DpiApp::from_params(p)?)),
    },
    AppKind {
        name: "ids",
        summary: "IDS: Suricata/Snort stream and HTTP rules over the reassembled bytes; alerts as events",
        params: IdsApp::PARAMS,
        build: |p| Ok(Box::new(IdsApp::from_params(p)?)),
    },
    AppKind {
        name: "labeller",
        summary: "example: publishes a DPI result (HTTP or other) on a flow's first client data",
        params: Labeller::PARAMS,
        build: |p| Ok(Box::new(Labeller::from_params(p)?)),
    },
    AppKind {
        name: "http_watch",
        summary: "example: subscribes to data only for flows labelled HTTP, alerts on a pattern, then unsubscribes",
        params: HttpWatch::PARAMS,
        build: |p| Ok(Box::new(HttpWatch::from_params(p)?)),
    },
];

/// One stack with the apps it feeds.
struct Unit {
    stack: Stack,
    q: Queue,
    apps: Vec<Box<dyn App>>,
    /// Each app's first drop reason in the NF's profile.
    reasons: Vec<u8>,
}

pub struct Microbox {
    units: Vec<Unit>,
    profile: Profile,
    batch_no: u64,
}

impl Microbox {
    pub const PARAMS: &'static [ParamDoc] = &[
        ParamDoc {
            name: "apps",
            ty: "list of { kind, ... }",
            default: "required",
            doc: "the apps on the stack, in order (tcp_count, l4_lb, l7_lb, dpi, ids, labeller, http_watch), each with its own parameters",
        },
        ParamDoc {
            name: "mode",
            ty: "\"consolidated\" | \"per-nf\"",
            default: "consolidated",
            doc: "one stack for all apps, or one stack per app (the baseline)",
        },
        ParamDoc {
            name: "level",
            ty: "\"l3\" | \"monitor\" | \"bytestream\" | \"splicer\"",
            default: "what the apps need",
            doc: "stack level; may only raise what the apps need",
        },
        ParamDoc {
            name: "flows",
            ty: "integer",
            default: "65536",
            doc: "most connections tracked at once (1..=16,777,216; new ones over it are counted, not tracked)",
        },
        ParamDoc {
            name: "timeout",
            ty: "seconds",
            default: "120",
            doc: "idle time (run clock: docs/time.md) after which a connection ends; 0 = never",
        },
        ParamDoc {
            name: "midstream",
            ty: "bool",
            default: "true",
            doc: "track connections whose SYN was not seen, from their first segment with data",
        },
        ParamDoc {
            name: "ring_bytes",
            ty: "integer",
            default: "65536",
            doc: "out-of-order buffer per direction (power of two, 64..=16,777,216); beyond it the direction gives up",
        },
        ParamDoc {
            name: "rings",
            ty: "integer",
            default: "1024",
            doc: "most out-of-order buffers lent out at once, over all flows (0..=1,048,576; memory = rings x ring_bytes, within --max-memory)",
        },
    ];

    pub fn from_params(p: &mut Params) -> Result<Microbox, ParamError> {
        let Some(list) = p.value("apps") else {
            return Err(p.err("`apps` is required, e.g. apps = [{ kind = \"tcp_count\" }]"));
        };
        let Some(list) = list.as_array() else {
            return Err(p.err("`apps` must be a list of tables, e.g. [{ kind = \"tcp_count\" }]"));
        };
        let mut apps = Vec::new();
        for (i, v) in list.iter().enumerate() {
            let Some(t) = v.as_table() else {
                return Err(p.err(format!("`apps` item {} is not a table", i + 1)));
            };
            apps.push(build_app(p, i, t)?);
        }
        if apps.is_empty() || apps.len() > MAX_APPS {
            return Err(p.err(format!("`apps` needs 1..={MAX_APPS} apps")));
        }
        let per_nf = match p.table_str("mode")? {
            None | Some("consolidated") => false,
            Some("per-nf") => true,
            Some(m) => {
                return Err(p.err(format!(
                    "`mode` = \"{m}\": use \"consolidated\" or \"per-nf\""
                )))
            }
        };
        let need = apps.iter().map(|a| a.level()).max().unwrap_or(Level::L3);
        let level = match p.table_str("level")? {
            None => None,
            Some(s) => match Level::parse(s) {
                Some(l) if l >= need => Some(l),
                Some(_) => {
                    return Err(p.err(format!(
                        "`level` = \"{s}\" is below what the apps need (\"{}\")",
                        need.name()
                    )))
                }
                None => {
                    return Err(p.err(format!(
                        "`level` = \"{s}\": use l3, monitor, bytestream or splicer"
                    )))
                }
            },
        };
        let d = StackConfig::default();
        let mut cfg = StackConfig {
            level: need,
            flows: p.int("flows", d.flows as i64, 1, 1 << 24)? as usize,
            timeout_ns: p.seconds_ns("timeout", d.timeout_ns)?,
            midstream: match p.value("midstream") {
                None => true,
                Some(toml::Value::Boolean(b)) => *b,
                Some(_) => return Err(p.err("`midstream` must be true or false")),
            },
            ring_bytes: p.int("ring_bytes", d.ring_bytes as i64, 64, 1 << 24)? as usize,
            rings: p.int("rings", d.rings as i64, 0, 1 << 20)? as usize,
        };
        if let Some(l) = level {
            cfg.level = l;
        }
        Ok(Microbox::new(cfg, apps, per_nf))
    }

    /// `per_nf`: one stack per app, each at the level its app needs.
    pub fn new(cfg: StackConfig, apps: Vec<Box<dyn App>>, per_nf: bool) -> Microbox {
        let mut writes = Fields::NONE;
        let mut may_drop = false;
        let mut reasons = Vec::new();
        let mut bases = Vec::new();
        for a in &apps {
            writes = writes | a.writes();
            may_drop |= a.may_drop();
            bases.push(reasons.len().min(255) as u8);
            for r in a.drop_reasons() {
                // Verdicts carry the reason in a byte: an app's reasons past it are not
                // listed (the app counts those drops under its first reason).
                if reasons.len() < 255 {
                    reasons.push(&*Box::leak(r.into_boxed_str()));
                }
            }
        }
        let profile = Profile {
            reads: Fields::IP_SRC
                | Fields::IP_DST
                | Fields::IP_PROTO
                | Fields::L4_SRC
                | Fields::L4_DST
                | Fields::TCP_FLAGS
                | Fields::TCP_SEQ
                | Fields::PAYLOAD,
            writes,
            may_drop,
            changes_length: false,
            per_flow_state: true,
            outputs: &["out"],
            drop_reasons: Box::leak(reasons.into_boxed_slice()),
        };
        let groups: Vec<Vec<Box<dyn App>>> = if per_nf {
            apps.into_iter().map(|a| vec![a]).collect()
        } else {
            vec![apps]
        };
        let mut bases = bases.into_iter();
        let units = groups
            .into_iter()
            .map(|apps| {
                let mut c = cfg.clone();
                if per_nf {
                    c.level = apps[0].level();
                }
                let mut stack = Stack::new(c);
                let mut want = Kinds::NONE;
                for (k, a) in apps.iter().enumerate() {
                    stack.initial[k] = a.initial();
                    want = want.union(a.kinds());
                }
                stack.skip_holes = want.has(stack::Kind::Data)
                    && apps
                        .iter()
                        .all(|a| a.accepts_gaps() || !a.kinds().has(stack::Kind::Data));
                stack.tunnels = stack.skip_holes;
                if apps.iter().any(|a| a.defrag()) {
                    stack.enable_defrag();
                }
                Unit {
                    q: Queue::new(stack.ring_bytes(), want)
                        .with_streams_per_packet(apps.iter().any(|a| a.streams_per_packet())),
                    stack,
                    reasons: bases.by_ref().take(apps.len()).collect(),
                    apps,
                }
            })
            .collect();
        Microbox {
            units,
            profile,
            batch_no: 0,
        }
    }

    /// Packet `i` is a fragment that completed an IPv4 datagram: the events queued so far
    /// are delivered (the fragment's own among them, its bytes as they are), then the
    /// datagram takes the fragment's place in the batch while the stack tracks it and the
    /// apps see its events, and the fragment is put back: the chain forwards what came
    /// in. An app's drop of the datagram drops the fragment that completed it.
    #[cold]
    fn datagram(u: &mut Unit, batch: &mut Batch, i: usize, bn: u64) {
        let p = &mut batch.as_mut_slice()[i];
        let l = p.layers();
        if !l.is_fragment() || matches!(p.meta().verdict, Verdict::Drop(_)) {
            return;
        }
        let Some(mut dg) = u.stack.datagram(&l, p) else {
            return;
        };
        stack::dispatch(&mut u.apps, &mut u.stack, &mut u.q, batch, bn, &u.reasons);
        u.q.clear();
        let keep = u.q.pkt_flow.get(i).copied();
        std::mem::swap(&mut batch.as_mut_slice()[i], &mut dg);
        u.stack
            .packet(i as u16, &mut batch.as_mut_slice()[i], &mut u.q);
        stack::dispatch(&mut u.apps, &mut u.stack, &mut u.q, batch, bn, &u.reasons);
        u.q.clear();
        std::mem::swap(&mut batch.as_mut_slice()[i], &mut dg);
        if let (Some(k), Some(f)) = (keep, u.q.pkt_flow.get_mut(i)) {
            *f = k;
        }
        if let Verdict::Drop(r) = dg.meta().verdict {
            batch.as_mut_slice()[i].meta_mut().verdict = Verdict::Drop(r);
        }
        u.stack.give_back(dg);
    }

    /// The apps, for tests and tools that read their results.
    pub fn apps(&self) -> impl Iterator<Item = &dyn App> {
        self.units.iter().flat_map(|u| u.apps.iter().map(|a| &**a))
    }

    /// The stacks (one, or one per app in the per-nf mode).
    pub fn stacks(&self) -> impl Iterator<Item = &Stack> {
        self.units.iter().map(|u| &u.stack)
    }
}

fn build_app(p: &Params, i: usize, t: &toml::Table) -> Result<Box<dyn App>, ParamError> {
    let kind = match t.get("kind") {
        Some(toml::Value::String(s)) => s.as_str(),
        Some(_) => return Err(p.err(format!("`apps` item {}: `kind` must be a string", i + 1))),
        None => return Err(p.err(format!("`apps` item {}: `kind` is required", i + 1))),
    };
    let Some(k) = APPS.iter().find(|k| k.name == kind) else {
        let names: Vec<&str> = APPS.iter().map(|k| k.name).collect();
        return Err(p.err(format!(
            "`apps` item {}: unknown app kind `{kind}` (known: {})",
            i + 1,
            names.join(", ")
        )));
    };
    let mut rest = t.clone();
    rest.remove("kind");
    let label = format!("{}.apps[{}] ({kind})", p.err("").nf, i + 1);
    let mut ap = Params::new(&label, &rest).in_dir(p.dir());
    let app = (k.build)(&mut ap)?;
    ap.finish(k.params)?;
    Ok(app)
}

impl Nf for Microbox {
    fn profile(&self) -> &Profile {
        &self.profile
    }

    /// The stack and its apps keep state per connection, but the IDS app counts alerts
    /// across flows into one file.
    fn state_scope(&self) -> StateScope {
        if self.apps().any(|a| a.name() == "ids") {
            StateScope::Global("runs an ids app that counts alerts across flows into one file")
        } else {
            StateScope::PerFlow
        }
    }

    fn process(&mut self, batch: &mut Batch, _cx: &Context) {
        let n = batch.len();
        let bn = self.batch_no;
        self.batch_no += 1;
        for u in &mut self.units {
            u.q.start_batch(n);
            for i in 0..n {
                if !u.q.has_room() {
                    stack::dispatch(&mut u.apps, &mut u.stack, &mut u.q, batch, bn, &u.reasons);
                    u.q.clear();
                }
                let p = &mut batch.as_mut_slice()[i];
                // Idle connections end by each packet's run-clock time (a compare when
                // no sweep is due), so where the runtime cuts batches changes nothing.
                u.stack.sweep(p.meta().now_ns, &mut u.q);
                // In the per-nf mode a packet an earlier unit dropped goes no further.
                if matches!(p.meta().verdict, Verdict::Drop(_)) {
                    continue;
                }
                u.stack.packet(i as u16, p, &mut u.q);
                if u.stack.defrag.is_some() {
                    Self::datagram(u, batch, i, bn);
                }
            }
            stack::dispatch(&mut u.apps, &mut u.stack, &mut u.q, batch, bn, &u.reasons);
            stack::translate_batch(&mut u.stack, &u.q, batch, bn);
            u.q.clear();
            u.stack.end_batch();
        }
    }

    fn finish(&mut self) {
        let mut empty = Batch::new();
        let bn = self.batch_no;
        for u in &mut self.units {
            u.q.start_batch(0);
            u.stack.finish(&mut u.q);
            stack::dispatch(
                &mut u.apps,
                &mut u.stack,
                &mut u.q,
                &mut empty,
                bn,
                &u.reasons,
            );
            u.q.clear();
            u.stack.end_batch();
            for a in &mut u.apps {
                a.finish();
            }
        }
    }

    /// Each stack's tables and rings, and its apps' state for as many flows.
    fn memory(&self) -> usize {
        self.units
            .iter()
            .map(|u| {
                let flows = u.stack.config().flows;
                u.apps
                    .iter()
                    .fold(u.stack.memory(), |m, a| m.saturating_add(a.memory(flows)))
            })
            .fold(0, usize::saturating_add)
    }

    fn open_outputs(&mut self) -> Result<(), String> {
        for u in &mut self.units {
            for a in &mut u.apps {
                a.open_outputs()?;
            }
        }
        Ok(())
    }

    fn has_outputs(&self) -> bool {
        self.units
            .iter()
            .flat_map(|u| u.apps.iter())
            .any(|a| a.has_outputs())
    }

    fn output_error(&self) -> Option<String> {
        self.units
            .iter()
            .flat_map(|u| u.apps.iter())
            .find_map(|a| a.output_error())
    }

    fn stats(&self) -> crate::nfs::Stats {
        let mut out: Vec<(&'static str, u64)> = Vec::new();
        let mut add = |k: &'static str, v: u64| match out.iter_mut().find(|(n, _)| *n == k) {
            Some(e) => e.1 += v,
            None => out.push((k, v)),
        };
        for u in &self.units {
            let s = &u.stack.stats;
            add("stacks", 1);
            add("flows", s.flows);
            add("midstream", s.midstream);
            add("table_full", s.table_full);
            add("untracked", s.untracked);
            add("tcp_malformed", s.malformed);
            add("ended_closed", s.ended_closed);
            add("ended_reset", s.ended_reset);
            add("ended_idle", s.ended_idle);
            add("ended_final", s.ended_final);
            add("stream_gave_up", s.gave_up);
            add("stream_bytes", s.bytes);
            add("duplicate_bytes", s.duplicate_bytes);
            add("stream_gaps", s.gaps);
            add("stream_gap_bytes", s.gap_bytes);
            add("stream_out_of_window", s.out_of_window);
            if let Some(d) = &u.stack.defrag {
                for (k, v) in d.stats.named(false).into_iter().chain(d.stats6.named(true)) {
                    add(k, v);
                }
            }
            add("events_refused", u.q.refused);
            for a in &u.apps {
                for (k, v) in a.stats() {
                    add(k, v);
                }
            }
        }
        crate::nfs::named(&out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::Packet;

    fn tcp(sport: u16, dport: u16, flags: u8, seq: u32, ack: u32) -> Packet {
        let mut b = vec![0u8; 14 + 20 + 20 + 4];
        b[12] = 8;
        b[14] = 0x45;
        let ip_len = (b.len() - 14) as u16;
        b[16..18].copy_from_slice(&ip_len.to_be_bytes());
        b[14 + 8] = 64;
        b[14 + 9] = 6;
        let (a, z) = if sport < dport { (1, 2) } else { (2, 1) };
        b[26..30].copy_from_slice(&[10, 0, 0, a]);
        b[30..34].copy_from_slice(&[10, 0, 0, z]);
        b[34..36].copy_from_slice(&sport.to_be_bytes());
        b[36..38].copy_from_slice(&dport.to_be_bytes());
        b[38..42].copy_from_slice(&seq.to_be_bytes());
        b[42..46].copy_from_slice(&ack.to_be_bytes());
        b[46] = 0x50;
        b[47] = flags;
        b[54..].copy_from_slice(b"data");
        Packet::from_bytes(&b)
    }

    fn microbox(apps: &str) -> Microbox {
        let t: toml::Table = format!("apps = {apps}").parse().unwrap();
        Microbox::from_params(&mut Params::new("mb", &t)).unwrap()
    }

    /// What the stack recorded per packet for `stream_after_packet` after one batch of a
    /// handshake and data.
    fn recorded(m: &mut Microbox) -> usize {
        let mut b = Batch::new();
        for p in [
            tcp(1000, 80, 0x02, 10, 0),
            tcp(80, 1000, 0x12, 50, 11),
            tcp(1000, 80, 0x18, 11, 51),
        ] {
            b.push(p);
        }
        m.process(&mut b, &Context { ports: 1 });
        m.units[0].q.pkt_streams.len()
    }

    /// Only an app that reads each packet's streams (the ids) has the stack record them:
    /// a store a packet the other apps do not need (before, every microbox stored them).
    #[test]
    fn streams_per_packet_only_when_an_app_reads_them() {
        let mut m = microbox(r#"[{ kind = "tcp_count" }, { kind = "dpi" }]"#);
        assert_eq!(recorded(&mut m), 0);
        let mut m = microbox(
            r#"[{ kind = "dpi" }, { kind = "ids", rules = 'alert tcp any any -> any any (msg:"x"; content:"data"; sid:1;)' }]"#,
        );
        assert_eq!(recorded(&mut m), 3);
    }

    /// The ids publishes each alert as an `IdsAlert` event for the apps after it. With
    /// none that takes them, they were queued anyway, and a batch with more alerts than
    /// the queue holds counted the rest as `events_refused` (9,011 on the merged trace),
    /// though no alert was lost (each is logged and counted before it is published).
    #[test]
    fn alerts_nobody_takes_are_not_queued_or_refused() {
        let rules: String = (1..=40)
            .map(|i| {
                format!("alert tcp any any -> any any (msg:\"r{i}\"; content:\"data\"; sid:{i};)\n")
            })
            .collect();
        let t: toml::Table = format!("apps = [{{ kind = \"ids\", rules = '''{rules}''' }}]")
            .parse()
            .unwrap();
        let mut m = Microbox::from_params(&mut Params::new("mb", &t)).unwrap();
        let mut b = Batch::new();
        for i in 0..32 {
            b.push(tcp(2000 + i, 80, 0x18, 11, 51));
        }
        m.process(&mut b, &Context { ports: 1 });
        m.finish();
        let stat = |k: &str| {
            m.apps()
                .flat_map(|a| a.stats())
                .find(|(n, _)| *n == k)
                .map_or(0, |(_, v)| v)
        };
        // More alerts than the queue's 1,024 events, so before they overflowed it.
        assert!(stat("ids_alerts") >= 1024, "{}", stat("ids_alerts"));
        assert_eq!(m.units[0].q.refused, 0);
    }
}
