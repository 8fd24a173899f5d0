//! Flow monitor: per-connection packet and byte counts, first/last seen and the TCP flags
//! seen, exported as flow records when a flow has been idle for `timeout` (run clock)
//! and at the end of the run. It never drops and never writes packet bytes.
//!
//! A record is one connection, both directions (the table is keyed by
//! [`FlowKey::canonical`]), with A the source of its first packet, as tshark's
//! conversation tables show them. Bytes are frame lengths on the wire (the capture's
//! original length), as tshark counts them. Packets that are not IP are not counted in any
//! flow; later IP fragments carry no ports, so they form a flow of their own with ports 0,
//! and so does a packet whose transport header the snap length cut short. Frames too
//! short for their L2/IP header pass uncounted in flows, counted as `malformed`.
//!
//! Records go to `records` (JSON lines, or CSV when the name ends in `.csv`), a path taken
//! from the chain file's folder (like the input trace), opened on the first record;
//! writes are buffered and only happen when records are exported (at expiry sweeps, on a
//! packet of an expired flow, and at the end), never per packet otherwise.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use std::hash::BuildHasher;

use hashbrown::hash_table::Entry;
use hashbrown::HashTable;

use super::consolidate::{no_sweep_in, FastRun, VISITS_AHEAD};
use super::nf::{named, Stats};
use super::nf::{Consolidate, Context, FastPacket, Nf, Profile, TokenLines};
use super::params::{ParamDoc, ParamError, Params};
use crate::flow::{FlowKey, Hasher, WideKey};
use crate::packet::{Batch, FastMark, Fields, L3Kind};

/// One connection's counters. Direction 0 is from the canonical key's source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowStats {
    /// Capture times of the first and last packet (what records report).
    pub first_ns: u64,
    pub last_ns: u64,
    /// Run-clock time of the last packet: what the idle timeout reads (docs/time.md).
    pub seen_ns: u64,
    pub packets: [u64; 2],
    pub bytes: [u64; 2],
    /// OR of the TCP flags of every packet (FIN 0x01 … CWR 0x80, NS 0x100).
    pub tcp_flags: u16,
    /// The first packet went in direction 1 (from the canonical key's destination).
    pub initiator_is_dst: bool,
    /// Which tracked flow this is (the monitor's insert count; kept when an idle flow
    /// restarts in place): a FastPath token carries it, so a hit knows its bucket still
    /// holds its flow without reading the flow key (in the record's padding).
    pub serial: u32,
}

/// Why a record was exported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// Idle for longer than the timeout.
    Idle,
    /// Still active when the run ended.
    Final,
}

/// An exported record, oriented so that A is the connection's initiator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowRecord {
    pub proto: u8,
    pub a: std::net::IpAddr,
    pub a_port: u16,
    pub b: std::net::IpAddr,
    pub b_port: u16,
    pub packets_ab: u64,
    pub bytes_ab: u64,
    pub packets_ba: u64,
    pub bytes_ba: u64,
    pub first_ns: u64,
    pub last_ns: u64,
    pub tcp_flags: u16,
    pub end: End,
}

impl FlowRecord {
    pub fn new(key: &FlowKey, s: &FlowStats, end: End) -> FlowRecord {
        let (k, f, r) = if s.initiator_is_dst {
            (key.reversed(), 1, 0)
        } else {
            (*key, 0, 1)
        };
        FlowRecord {
            proto: k.proto,
            a: k.src_ip(),
            a_port: k.sport,
            b: k.dst_ip(),
            b_port: k.dport,
            packets_ab: s.packets[f],
            bytes_ab: s.bytes[f],
            packets_ba: s.packets[r],
            bytes_ba: s.bytes[r],
            first_ns: s.first_ns,
            last_ns: s.last_ns,
            tcp_flags: s.tcp_flags,
            end,
        }
    }

    pub const CSV_HEADER: &'static str = "proto,a,a_port,b,b_port,packets_ab,bytes_ab,packets_ba,bytes_ba,first_ns,last_ns,tcp_flags,end";

    fn end_str(&self) -> &'static str {
        match self.end {
            End::Idle => "idle",
            End::Final => "final",
        }
    }

    pub fn write_json(&self, w: &mut impl Write) -> std::io::Result<()> {
        writeln!(
            w,
            "{{\"proto\":{},\"a\":\"{}\",\"a_port\":{},\"b\":\"{}\",\"b_port\":{},\"packets_ab\":{},\"bytes_ab\":{},\"packets_ba\":{},\"bytes_ba\":{},\"first_ns\":{},\"last_ns\":{},\"tcp_flags\":{},\"end\":\"{}\"}}",
            self.proto,
            self.a,
            self.a_port,
            self.b,
            self.b_port,
            self.packets_ab,
            self.bytes_ab,
            self.packets_ba,
            self.bytes_ba,
            self.first_ns,
            self.last_ns,
            self.tcp_flags,
            self.end_str()
        )
    }

    pub fn write_csv(&self, w: &mut impl Write) -> std::io::Result<()> {
        writeln!(
            w,
            "{},{},{},{},{},{},{},{},{},{},{},{},{}",
            self.proto,
            self.a,
            self.a_port,
            self.b,
            self.b_port,
            self.packets_ab,
            self.bytes_ab,
            self.packets_ba,
            self.bytes_ba,
            self.first_ns,
            self.last_ns,
            self.tcp_flags,
            self.end_str()
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Json,
    Csv,
}

/// The records file: opened by the runtime before the first packet
/// ([`Nf::open_outputs`]), so `catena check` never creates it and a path that cannot be
/// written stops the run before any work; opened on first use outside a run.
struct Sink {
    path: PathBuf,
    format: Format,
    w: Option<BufWriter<File>>,
    /// The first error; later records are counted as lost, not retried, and the run
    /// exits non-zero after its summary.
    failed: Option<String>,
}

impl Sink {
    fn open(&mut self) -> std::io::Result<()> {
        if self.w.is_none() {
            let mut w = BufWriter::with_capacity(1 << 20, File::create(&self.path)?);
            if self.format == Format::Csv {
                writeln!(w, "{}", FlowRecord::CSV_HEADER)?;
            }
            self.w = Some(w);
        }
        Ok(())
    }

    fn write(&mut self, r: &FlowRecord) -> bool {
        if self.failed.is_some() {
            return false;
        }
        let res = self
            .open()
            .and_then(|()| match (self.w.as_mut(), self.format) {
                (Some(w), Format::Json) => r.write_json(w),
                (Some(w), Format::Csv) => r.write_csv(w),
                (None, _) => Ok(()),
            });
        self.check(res)
    }

    fn flush(&mut self) -> bool {
        let res = match self.w.as_mut() {
            Some(w) if self.failed.is_none() => w.flush(),
            _ => Ok(()),
        };
        self.check(res)
    }

    fn check(&mut self, res: std::io::Result<()>) -> bool {
        if let Err(e) = res {
            self.failed = Some(format!("records `{}`: {e}", self.path.display()));
            self.w = None;
            return false;
        }
        true
    }
}

pub struct FlowMonitor {
    profile: Profile,
    /// Flows by canonical key. A FastPath token names a flow's bucket, which holds
    /// still (no resize: the table never grows past its capacity) unless the flow left.
    table: HashTable<(WideKey, FlowStats)>,
    hasher: Hasher,
    capacity: usize,
    /// 0: flows never expire (exported at the end only).
    timeout_ns: u64,
    last_sweep_ns: u64,
    /// No entry was last seen before this (a lower bound, exact after a sweep): sweeps
    /// that could not find anything are skipped, as their cost is the table's capacity.
    min_last_ns: u64,
    /// Packets since the last sweep: a sweep scans the whole table, so besides a second of
    /// capture time it waits for enough packets to amortise the scan (traces compress
    /// years into few packets). Records do not depend on it: a packet of a flow idle past
    /// the timeout always starts a new record.
    since_sweep: u64,
    sweep_every: u64,
    sink: Option<Sink>,
    /// Reused by sweeps so exporting does not allocate once warmed up.
    expired: Vec<(WideKey, FlowStats)>,
    exported: u64,
    lost_records: u64,
    /// Packets of new flows that found the table full (not counted in any record).
    overflow_packets: u64,
    not_ip: u64,
    malformed: u64,
    /// Where the table's control bytes start (its buckets lie below them, in reverse),
    /// learnt from a recorded packet's bucket (0: none yet): what FastPath prefetches a
    /// token's bucket by ([`Consolidate::fast_lines`]). The table never moves unless it
    /// grows, which its capacity prevents; a stale value would only prefetch amiss.
    ctrl: usize,
    /// Flows inserted so far (wrapping): the last one's [`FlowStats::serial`].
    serials: u32,
}

const SECOND: u64 = 1_000_000_000;

impl FlowMonitor {
    pub const PARAMS: &'static [ParamDoc] = &[
        ParamDoc {
            name: "records",
            ty: "path",
            default: "none (counters only)",
            doc: "file for flow records: JSON lines, or CSV if it ends in .csv (relative to the chain file's folder)",
        },
        ParamDoc {
            name: "timeout",
            ty: "seconds",
            default: "60",
            doc: "idle time (capture time) after which a flow is exported and forgotten; 0 = only at the end",
        },
        ParamDoc {
            name: "capacity",
            ty: "integer",
            default: "65536",
            doc: "most flows tracked at once (1..=67,108,864); packets of new flows beyond it are counted, not tracked",
        },
    ];

    pub fn new(capacity: usize, timeout_ns: u64) -> FlowMonitor {
        let capacity = capacity.max(1);
        FlowMonitor {
            profile: Profile {
                reads: Fields::ETH_TYPE
                    | Fields::VLAN
                    | Fields::IP_SRC
                    | Fields::IP_DST
                    | Fields::IP_PROTO
                    | Fields::IP_FRAG
                    | Fields::L4_SRC
                    | Fields::L4_DST
                    | Fields::TCP_FLAGS
                    | Fields::ICMP,
                writes: Fields::NONE,
                may_drop: false,
                changes_length: false,
                per_flow_state: true,
                outputs: &["out"],
                drop_reasons: &[],
            },
            table: HashTable::with_capacity(capacity),
            hasher: Hasher::default(),
            capacity,
            timeout_ns,
            last_sweep_ns: 0,
            min_last_ns: u64::MAX,
            since_sweep: 0,
            sweep_every: (capacity as u64 / 4).max(1024),
            sink: None,
            expired: Vec::new(),
            exported: 0,
            lost_records: 0,
            overflow_packets: 0,
            not_ip: 0,
            malformed: 0,
            ctrl: 0,
            serials: 0,
        }
    }

    /// Writes records to `path` (CSV if it ends in `.csv`, else JSON lines).
    pub fn with_records(mut self, path: impl Into<PathBuf>) -> FlowMonitor {
        let path = path.into();
        let csv = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("csv"));
        self.sink = Some(Sink {
            path,
            format: if csv { Format::Csv } else { Format::Json },
            w: None,
            failed: None,
        });
        self
    }

    pub fn from_params(p: &mut Params) -> Result<FlowMonitor, ParamError> {
        let records = p.path("records")?;
        let timeout = p.seconds_ns("timeout", 60 * SECOND)?;
        let cap = p.int("capacity", 65536, 1, 1 << 26)? as usize;
        let mut m = FlowMonitor::new(cap, timeout);
        if let Some(r) = records {
            m = m.with_records(r);
        }
        Ok(m)
    }

    /// The flows being tracked, as records (oriented, not yet exported).
    pub fn active(&self) -> Vec<FlowRecord> {
        let mut v: Vec<FlowRecord> = self
            .table
            .iter()
            .map(|(k, s)| FlowRecord::new(&k.0, s, End::Final))
            .collect();
        v.sort_by_key(|r| (r.first_ns, r.proto, r.a, r.a_port, r.b, r.b_port));
        v
    }

    fn export(&mut self, key: &FlowKey, s: &FlowStats, end: End) {
        self.exported += 1;
        if let Some(sink) = self.sink.as_mut() {
            if !sink.write(&FlowRecord::new(key, s, end)) {
                self.lost_records += 1;
            }
        }
    }

    /// Exports the flows in `self.expired` in a stable order (first seen, then key), so
    /// the file does not depend on the hash table's order.
    fn export_expired(&mut self, end: End) {
        let mut v = std::mem::take(&mut self.expired);
        v.sort_unstable_by_key(|(k, s)| (s.first_ns, *k));
        for (k, s) in &v {
            self.export(&k.0, s, end);
        }
        v.clear();
        self.expired = v;
    }

    /// Exports idle flows; returns whether it ran.
    fn sweep(&mut self, now_ns: u64) -> bool {
        let t = self.timeout_ns;
        if t == 0
            || now_ns.abs_diff(self.last_sweep_ns) < SECOND
            || now_ns.saturating_sub(self.min_last_ns) <= t
        {
            return false;
        }
        self.last_sweep_ns = now_ns;
        self.since_sweep = 0;
        let out = &mut self.expired;
        let mut min_last = u64::MAX;
        self.table.retain(|(k, s)| {
            let keep = now_ns.saturating_sub(s.seen_ns) <= t;
            if keep {
                min_last = min_last.min(s.seen_ns);
            } else {
                out.push((*k, *s));
            }
            keep
        });
        self.min_last_ns = min_last;
        self.export_expired(End::Idle);
        true
    }
}

impl FlowMonitor {
    /// At most one sweep per second of run-clock time; traces may step back in time, so a
    /// jump either way counts. Counted per packet so that both FastPath paths sweep at
    /// the same packet whatever the batches.
    #[inline]
    fn tick(&mut self, now: u64) {
        self.since_sweep += 1;
        if self.since_sweep >= self.sweep_every {
            self.sweep(now);
        }
    }

    /// [`tick`](Self::tick) for the consolidated path, with `sweep`'s own tests inline:
    /// once a sweep is due by count, `tick` calls `sweep` on every packet until one
    /// finds something idle, and most of those calls return at once (same effect, no
    /// call; the plain path keeps `tick`, where the inline test cost more than the call,
    /// docs/fastpath.md session 17).
    #[inline(always)]
    fn tick_fast(&mut self, now: u64) {
        self.since_sweep += 1;
        if self.since_sweep >= self.sweep_every
            && self.timeout_ns != 0
            && now.abs_diff(self.last_sweep_ns) >= SECOND
            && now.saturating_sub(self.min_last_ns) > self.timeout_ns
        {
            self.sweep(now);
        }
    }

    /// One packet of flow `key` (as seen on the wire, either direction); returns the
    /// FastPath token of its flow (its bucket + 1 in the high half, its serial in the
    /// low), or 0 when the table had no room.
    #[inline]
    /// `ts`: capture time (for the record); `now`: run-clock time (for the timers).
    fn account(&mut self, key: &FlowKey, flags: u16, ts: u64, now: u64, len: u64) -> u64 {
        let c = WideKey(key.canonical());
        let dir = (c.0 != *key) as usize;
        let h = self.hasher.hash_one(c);
        let full = self.table.len() >= self.capacity;
        let hasher = &self.hasher;
        match self
            .table
            .entry(h, |(k, _)| *k == c, |(k, _)| hasher.hash_one(k))
        {
            Entry::Occupied(mut e) => {
                let b = e.bucket_index();
                let serial = e.get().1.serial;
                let old = update(
                    &mut e.get_mut().1,
                    self.timeout_ns,
                    dir,
                    flags,
                    ts,
                    now,
                    len,
                );
                if let Some(old) = old {
                    self.restarted(&c, &old, now);
                }
                token(b, serial)
            }
            Entry::Vacant(_) if full => {
                // Make room if idle flows hold it, else count the packet.
                if self.sweep(now) && self.table.len() < self.capacity {
                    self.min_last_ns = self.min_last_ns.min(now);
                    let serial = self.next_serial();
                    let hasher = &self.hasher;
                    let e = self.table.insert_unique(
                        h,
                        (c, fresh(dir, flags, ts, now, len, serial)),
                        |(k, _)| hasher.hash_one(k),
                    );
                    token(e.bucket_index(), serial)
                } else {
                    self.overflow_packets += 1;
                    0
                }
            }
            Entry::Vacant(e) => {
                self.serials = self.serials.wrapping_add(1);
                let serial = self.serials;
                let b = e
                    .insert((c, fresh(dir, flags, ts, now, len, serial)))
                    .bucket_index();
                self.min_last_ns = self.min_last_ns.min(now);
                token(b, serial)
            }
        }
    }

    /// The serial of the flow about to be inserted.
    fn next_serial(&mut self) -> u32 {
        self.serials = self.serials.wrapping_add(1);
        self.serials
    }

    /// A flow idle past the timeout but not swept yet came back: the old connection
    /// ended (`old`) and the packet at `now` started a new record.
    fn restarted(&mut self, c: &WideKey, old: &FlowStats, now: u64) {
        self.min_last_ns = self.min_last_ns.min(now);
        self.export(&c.0, old, End::Idle);
    }
}

/// One more packet of a tracked flow; when the flow was idle past `timeout` (0 = none) it
/// starts a new record and the old one is returned for export.
#[inline]
fn update(
    s: &mut FlowStats,
    timeout: u64,
    dir: usize,
    flags: u16,
    ts: u64,
    now: u64,
    len: u64,
) -> Option<FlowStats> {
    if timeout != 0 && now.saturating_sub(s.seen_ns) > timeout {
        let serial = s.serial;
        return Some(std::mem::replace(
            s,
            fresh(dir, flags, ts, now, len, serial),
        ));
    }
    s.packets[dir] += 1;
    s.bytes[dir] += len;
    s.tcp_flags |= flags;
    // Traces are not always in time order: keep the span.
    s.first_ns = s.first_ns.min(ts);
    s.last_ns = s.last_ns.max(ts);
    s.seen_ns = now;
    None
}

/// The counters of a flow's first packet.
#[inline]
fn fresh(dir: usize, flags: u16, ts: u64, now: u64, len: u64, serial: u32) -> FlowStats {
    FlowStats {
        first_ns: ts,
        last_ns: ts,
        seen_ns: now,
        packets: [(dir == 0) as u64, (dir == 1) as u64],
        bytes: [len * (dir == 0) as u64, len * (dir == 1) as u64],
        tcp_flags: flags,
        initiator_is_dst: dir == 1,
        serial,
    }
}

impl Nf for FlowMonitor {
    /// The flow table, the list a final export drains it into, and the writer's buffer.
    fn memory(&self) -> usize {
        use crate::flow::footprint::{hash_table_bytes, vec_bytes};
        type Flow = (WideKey, FlowStats);
        hash_table_bytes::<Flow>(self.capacity)
            + vec_bytes::<Flow>(self.capacity)
            + if self.sink.is_some() { 1 << 20 } else { 0 }
    }

    fn profile(&self) -> &Profile {
        &self.profile
    }

    /// Each worker writes its own records file, `NAME.wK.EXT` (K = 0…N-1): together they
    /// hold the records one instance would write.
    fn shard(&mut self, worker: usize, workers: usize) -> Result<(), String> {
        if let (Some(s), true) = (self.sink.as_mut(), workers > 1) {
            let stem = s.path.file_stem().map(|x| x.to_string_lossy().into_owned());
            let ext = s.path.extension().map(|x| x.to_string_lossy().into_owned());
            let name = match ext {
                Some(e) => format!("{}.w{worker}.{e}", stem.unwrap_or_default()),
                None => format!("{}.w{worker}", stem.unwrap_or_default()),
            };
            s.path.set_file_name(name);
        }
        Ok(())
    }

    fn process(&mut self, batch: &mut Batch, _cx: &Context) {
        for p in batch {
            let l = p.layers();
            let (m, d) = p.split_meta();
            self.tick(m.now_ns);
            let Some(key) = FlowKey::from_packet(&l, d) else {
                if l.l3 == L3Kind::Malformed {
                    self.malformed += 1;
                } else {
                    self.not_ip += 1;
                }
                continue;
            };
            let flags = if l.l4_proto == 6 && l.has_l4() {
                let o = l.l4_off as usize + 12;
                u16::from_be_bytes([d[o], d[o + 1]]) & 0x1ff
            } else {
                0
            };
            let token = self.account(&key, flags, m.ts_ns, m.now_ns, m.wire_len as u64);
            if m.fast == FastMark::Want {
                m.fast = FastMark::Token(with_dir(token, &key));
                self.learn_ctrl(token);
            }
        }
    }

    fn consolidate(&self) -> Option<&dyn Consolidate> {
        Some(self)
    }

    fn consolidate_mut(&mut self) -> Option<&mut dyn Consolidate> {
        Some(self)
    }

    fn finish(&mut self) {
        self.expired.extend(self.table.drain());
        self.export_expired(End::Final);
        if let Some(s) = self.sink.as_mut() {
            s.flush();
        }
    }

    fn open_outputs(&mut self) -> Result<(), String> {
        match self.sink.as_mut() {
            Some(s) => s
                .open()
                .map_err(|e| format!("records `{}`: {e}", s.path.display())),
            None => Ok(()),
        }
    }

    fn has_outputs(&self) -> bool {
        self.sink.is_some()
    }

    fn output_error(&self) -> Option<String> {
        let e = self.sink.as_ref()?.failed.as_ref()?;
        Some(format!("{e}: the records file is incomplete"))
    }

    fn stats(&self) -> Stats {
        named(&[
            ("flows", self.table.len() as u64),
            ("exported", self.exported),
            ("lost_records", self.lost_records),
            ("overflow_packets", self.overflow_packets),
            ("not_ip", self.not_ip),
            ("malformed", self.malformed),
        ])
    }
}

impl Consolidate for FlowMonitor {
    fn state_function(&self) -> &'static str {
        "flow counters, flags, first/last seen, idle export"
    }

    fn fast_checks(&self) -> bool {
        false
    }

    fn fast_valid(&self, _token: u64, _p: &FastPacket) -> bool {
        true
    }

    fn fast_prefetches(&self) -> bool {
        true
    }

    /// A token's bucket (bucket + 1 in its high half, below the direction bit), its
    /// control byte and the flow key the hit hands over (session 24's cachegrind: ~3.7
    /// of a mixed chain of 8's D1 misses a monitor visit). A hit whose serial matches
    /// does not read the key (session 27); it is still prefetched for those that do not
    /// (a flow exported or drained at a run's end, then back: in `bench fastpath`, the
    /// first two later packets of each flow), which without it read worse by cycles.
    fn fast_lines(&self) -> TokenLines {
        if self.ctrl == 0 {
            return TokenLines {
                reads_key: true,
                mask: u64::MAX,
                ..TokenLines::NONE
            };
        }
        let size = std::mem::size_of::<(WideKey, FlowStats)>();
        let ctrl = std::ptr::without_provenance::<u8>(self.ctrl);
        TokenLines {
            base: ctrl,
            len: self.table.num_buckets() + 1,
            stride: size.wrapping_neg(),
            mask: !(1 << DIR_BIT) >> BUCKET_SHIFT,
            last: size - 1,
            ctrl: ctrl.wrapping_sub(1),
            reads_key: true,
        }
    }

    /// The token names the flow's bucket: when it still holds the flow, the packet is
    /// counted there without hashing; else (the flow was exported or the table had no
    /// room) it is accounted from its key, exactly as `process` would.
    fn fast_state(&mut self, token: u64, p: &FastPacket) {
        self.state_at(token, p);
    }

    /// When no visit's tick can sweep (too few packets since the last sweep, no
    /// timeout, or every visit's time within a second of the last sweep: the run clock
    /// never goes back), the ticks only count; until a visit falls back to `account`
    /// (which may sweep), each only updates its bucket.
    ///
    /// FastPath prefetched the first `VISITS_AHEAD` visits' lines; each visit served
    /// prefetches the one `VISITS_AHEAD` later's (a bounded window, not the whole run's
    /// at once: session 29).
    fn fast_state_run(&mut self, run: &FastRun) {
        let lines = self.fast_lines();
        let mut n = VISITS_AHEAD;
        let mut visits = run.visits;
        if let Some(span) = run.span() {
            let (since, every) = (self.since_sweep, self.sweep_every);
            if self.timeout_ns == 0
                || no_sweep_in(since, every, self.last_sweep_ns, visits.len(), span)
            {
                while let Some((v, rest)) = visits.split_first() {
                    visits = rest;
                    run.prefetch(&lines, n);
                    n += 1;
                    self.since_sweep += 1;
                    let p = run.packet(&v);
                    if !self.update_at(v.token, &p) {
                        // Accounted from its key, which may sweep: the rest tick one by one.
                        self.account(p.key, p.tcp_flags, p.ts_ns, p.now_ns, p.wire_len as u64);
                        break;
                    }
                }
            }
        }
        for v in visits.iter() {
            run.prefetch(&lines, n);
            n += 1;
            self.state_at(v.token, &run.packet(&v));
        }
    }
}

impl FlowMonitor {
    /// Notes where the table's control bytes are from token `token`'s bucket (a
    /// recorded packet's: not on the plain path).
    fn learn_ctrl(&mut self, token: u64) {
        let Some(b) = (token >> BUCKET_SHIFT).checked_sub(1) else {
            return;
        };
        if let Some(x) = self.table.get_bucket(b as usize) {
            // Bucket b lies at ctrl - (b + 1) * size.
            let size = std::mem::size_of::<(WideKey, FlowStats)>();
            self.ctrl = (x as *const (WideKey, FlowStats) as usize) + (b as usize + 1) * size;
        }
    }

    /// A consolidated packet's state function (inlined in a fused run's loop).
    #[inline(always)]
    fn state_at(&mut self, token: u64, p: &FastPacket) {
        let (ts, now, len) = (p.ts_ns, p.now_ns, p.wire_len as u64);
        self.tick_fast(now);
        if !self.update_at(token, p) {
            self.account(p.key, p.tcp_flags, ts, now, len);
        }
    }

    /// [`state_at`](Self::state_at) after its tick, when the token's bucket still holds
    /// the flow (true); false when it does not (the caller accounts the packet).
    #[inline(always)]
    fn update_at(&mut self, token: u64, p: &FastPacket) -> bool {
        let (ts, now, len) = (p.ts_ns, p.now_ns, p.wire_len as u64);
        let dir = (token >> DIR_BIT) as usize;
        if let Some((k, s)) = ((token & !(1 << DIR_BIT)) >> BUCKET_SHIFT)
            .checked_sub(1)
            .and_then(|b| self.table.get_bucket_mut(b as usize))
        {
            // The serial names one flow ever inserted, and the entry pins the key this
            // NF sees and its direction (the token's top bit): the same serial is the
            // same flow, and the flow key (another line, the entry's keys) is not read.
            // A flow inserted again (exported, or drained at a run's end, then back)
            // has a new serial: the keys decide, and a match takes the token's serial,
            // which only this flow ever had, so the next hit is sure by the serial.
            let same = s.serial == token as u32 || {
                let same = same_key(&k.0, p.key, dir == 1);
                if same {
                    s.serial = token as u32;
                }
                same
            };
            if same {
                if let Some(old) = update(s, self.timeout_ns, dir, p.tcp_flags, ts, now, len) {
                    let c = *k;
                    self.restarted(&c, &old, now);
                }
                return true;
            }
        }
        false
    }
}

/// `a` is `b` (or, with `reversed`, `b` reversed), word by word as [`WideKey`]
/// compares, without copying either.
#[inline(always)]
fn same_key(a: &FlowKey, b: &FlowKey, reversed: bool) -> bool {
    let w = u128::from_ne_bytes;
    let (bs, bd, bsp, bdp) = if reversed {
        (&b.dst, &b.src, b.dport, b.sport)
    } else {
        (&b.src, &b.dst, b.sport, b.dport)
    };
    w(a.src) == w(*bs)
        && w(a.dst) == w(*bd)
        && (a.sport, a.dport, a.proto, a.family) == (bsp, bdp, b.proto, b.family)
}

/// The bit of a FastPath token that says the flow's key is the reverse of its
/// canonical form (direction 1); below it, the bucket + 1 (0: the table had no room).
const DIR_BIT: u32 = 63;

/// Where a token's bucket + 1 starts: in the high half, as FastPath's prefetch reads
/// the NAT's and Maglev's tokens ([`TokenLines`]); the flow's serial is the low half.
const BUCKET_SHIFT: u32 = 32;

/// The token of the flow with serial `serial` in bucket `b`.
#[inline]
fn token(b: usize, serial: u32) -> u64 {
    (b as u64 + 1) << BUCKET_SHIFT | u64::from(serial)
}

/// Token `token` of a packet of flow `key` with the key's direction: a hit compares the
/// bucket's key in that direction only. (Recorded packets only: the cost of `canonical`
/// is not on the plain path.)
fn with_dir(token: u64, key: &FlowKey) -> u64 {
    if token == 0 {
        return 0;
    }
    token | ((key.canonical() != *key) as u64) << DIR_BIT
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::Packet;

    fn tcp(src: u8, dst: u8, sport: u16, dport: u16, flags: u8, ts: u64) -> Packet {
        let mut b = vec![0u8; 14 + 20 + 20];
        b[12] = 8;
        b[14] = 0x45;
        b[14 + 9] = 6;
        b[26..30].copy_from_slice(&[10, 0, 0, src]);
        b[30..34].copy_from_slice(&[10, 0, 0, dst]);
        b[34..36].copy_from_slice(&sport.to_be_bytes());
        b[36..38].copy_from_slice(&dport.to_be_bytes());
        b[46] = 0x50;
        b[47] = flags;
        let mut p = Packet::from_bytes(&b);
        p.meta_mut().ts_ns = ts;
        p.meta_mut().now_ns = ts;
        p.meta_mut().wire_len = 100;
        p
    }

    fn run(m: &mut FlowMonitor, pkts: Vec<Packet>) {
        let mut b = Batch::new();
        for p in pkts {
            b.push(p);
        }
        m.process(&mut b, &Context { ports: 1 });
    }

    #[test]
    fn both_directions_one_record_initiator_first() {
        let mut m = FlowMonitor::new(16, 0);
        run(
            &mut m,
            vec![
                tcp(9, 1, 80, 5000, 0x12, 5),
                tcp(1, 9, 5000, 80, 0x10, 6),
                tcp(1, 9, 5000, 80, 0x01, 7),
            ],
        );
        let r = m.active();
        assert_eq!(r.len(), 1);
        let r = &r[0];
        assert_eq!(
            (r.a.to_string(), r.a_port, r.b_port),
            ("10.0.0.9".into(), 80, 5000)
        );
        assert_eq!((r.packets_ab, r.packets_ba, r.bytes_ba), (1, 2, 200));
        assert_eq!((r.first_ns, r.last_ns, r.tcp_flags), (5, 7, 0x13));
    }

    /// Issue 18: a recorded packet's token names its flow's bucket and, in the top bit,
    /// whether its key is the reverse of the canonical form, so a hit compares the
    /// bucket's key in that one direction; hits of both directions count where
    /// `process` would have.
    #[test]
    fn tokens_name_the_bucket_and_the_keys_direction() {
        let mut m = FlowMonitor::new(16, 0);
        let mut batch = Batch::new();
        for mut p in [tcp(9, 1, 80, 5000, 0x12, 5), tcp(1, 9, 5000, 80, 0x10, 6)] {
            p.meta_mut().fast = FastMark::Want;
            batch.push(p);
        }
        m.process(&mut batch, &Context { ports: 1 });
        let mut tokens = [0u64; 2];
        let mut keys = Vec::new();
        for (i, p) in batch.as_mut_slice().iter_mut().enumerate() {
            let l = p.layers();
            keys.push(FlowKey::from_packet(&l, p.data()).expect("key"));
            match p.meta().fast {
                FastMark::Token(t) => tokens[i] = t,
                _ => panic!("no token"),
            }
        }
        // 10.0.0.9:80 -> 10.0.0.1:5000 is the reverse of its canonical form; the reply
        // is not; both name the same bucket.
        assert_eq!((tokens[0] >> DIR_BIT, tokens[1] >> DIR_BIT), (1, 0));
        assert_eq!(tokens[0] & !(1 << DIR_BIT), tokens[1]);
        for (t, key) in tokens.iter().zip(&keys) {
            let fp = FastPacket {
                key,
                fragment: false,
                ts_ns: 7,
                now_ns: 7,
                wire_len: 100,
                tcp_flags: 0x10,
            };
            m.fast_state(*t, &fp);
        }
        assert_eq!(m.table.len(), 1);
        let r = &m.active()[0];
        assert_eq!((r.packets_ab, r.packets_ba, r.last_ns), (2, 2, 7));
    }

    /// Session 26: FastPath prefetches a hit's bucket from the token alone
    /// (`fast_lines`), so the address it computes must be the bucket's, for tokens of
    /// either direction and of flows in many buckets (hashbrown keeps them below its
    /// control bytes, in reverse: a wrong sign or base names other memory).
    #[test]
    fn fast_lines_name_the_tokens_bucket() {
        let mut m = FlowMonitor::new(64, 0);
        assert!(m.fast_lines().base.is_null(), "nothing recorded yet");
        let mut batch = Batch::new();
        for i in 0..20u8 {
            let mut p = tcp(i, 200, 1000 + i as u16, 80, 0x10, 5);
            p.meta_mut().fast = FastMark::Want;
            batch.push(p);
        }
        m.process(&mut batch, &Context { ports: 1 });
        let lines = m.fast_lines();
        let size = std::mem::size_of::<(WideKey, FlowStats)>();
        assert!(lines.reads_key);
        let mut buckets = std::collections::BTreeSet::new();
        for p in batch.as_mut_slice() {
            let FastMark::Token(t) = p.meta().fast else {
                panic!("no token");
            };
            let b = (((t & !(1 << DIR_BIT)) >> BUCKET_SHIFT) - 1) as usize;
            buckets.insert(b);
            let at = m.table.get_bucket(b).expect("the flow's bucket") as *const _ as *const u8;
            assert_eq!(lines.at(t), Some(at), "bucket {b}");
            assert_eq!(lines.prefetch_at(t), at);
            assert_eq!(lines.last, size - 1);
            // The control bytes lie just above bucket 0: bucket b's is b bytes in.
            assert_eq!(lines.ctrl_at(t) as usize, at as usize + (b + 1) * size + b);
        }
        assert!(buckets.len() > 10, "{buckets:?}");
    }

    /// Session 27: a hit finds its flow by the token's serial, not by the flow key. A
    /// token whose bucket now holds another flow (its own flow was exported as idle and
    /// the bucket reused) must count nothing there: the packet is accounted from its key
    /// exactly as `process` accounts it. Fails if a hit trusts the bucket alone.
    #[test]
    fn a_token_whose_bucket_holds_another_flow_counts_nothing_there() {
        let second = 1_000_000_000;
        let key_of = |p: &mut Packet| {
            let l = p.layers();
            FlowKey::from_packet(&l, p.data()).expect("key")
        };
        let bucket = |t: u64| (t & !(1 << DIR_BIT)) >> BUCKET_SHIFT;
        let token_of = |m: &mut FlowMonitor, mut p: Packet| {
            p.meta_mut().fast = FastMark::Want;
            let mut b = Batch::new();
            b.push(p);
            m.process(&mut b, &Context { ports: 1 });
            match b.as_mut_slice()[0].meta().fast {
                FastMark::Token(t) => t,
                _ => panic!("no token"),
            }
        };
        let mut reused = 0;
        for i in 0..64u8 {
            // Room for one flow: the second flow, 10 s later, sweeps the first out
            // (idle past 1 s) and takes its place, in its bucket for some of them.
            let mut m = FlowMonitor::new(1, second);
            let mut plain = FlowMonitor::new(1, second);
            let ta = token_of(&mut m, tcp(1, 9, 5000, 80, 0x10, 0));
            run(&mut plain, vec![tcp(1, 9, 5000, 80, 0x10, 0)]);
            let tb = token_of(&mut m, tcp(2, 9, 6000 + i as u16, 80, 0x10, 10 * second));
            run(
                &mut plain,
                vec![tcp(2, 9, 6000 + i as u16, 80, 0x10, 10 * second)],
            );
            assert_ne!(ta as u32, tb as u32, "each flow its own serial");
            if bucket(ta) != bucket(tb) {
                continue;
            }
            reused += 1;
            // The first flow's packet on the fast path (token ta) and on the plain one.
            let mut pa = tcp(1, 9, 5000, 80, 0x10, 10 * second + 1);
            let key = key_of(&mut pa);
            let fp = FastPacket {
                key: &key,
                fragment: false,
                ts_ns: 10 * second + 1,
                now_ns: 10 * second + 1,
                wire_len: 100,
                tcp_flags: 0x10,
            };
            m.fast_state(ta, &fp);
            run(&mut plain, vec![pa]);
            assert_eq!(m.active(), plain.active());
            assert_eq!(m.active()[0].packets_ab + m.active()[0].packets_ba, 1);
            assert_eq!((m.overflow_packets, m.exported), (1, 1));
        }
        assert!(reused > 0, "no second flow took the first one's bucket");
    }

    #[test]
    fn reads_viewed_packets_in_place() {
        // A monitor only reads: a packet viewing a mapped trace must not be copied.
        let bytes: &'static [u8] = tcp(1, 9, 5000, 80, 0x02, 5).data().to_vec().leak();
        let mut p = tcp(0, 0, 0, 0, 0, 5);
        assert!(p.set_view(bytes));
        p.meta_mut().now_ns = 5;
        let mut b = Batch::new();
        b.push(p);
        let mut m = FlowMonitor::new(16, 0);
        m.process(&mut b, &Context { ports: 1 });
        assert_eq!(m.active().len(), 1);
        assert!(b.as_mut_slice()[0].is_view());
    }

    #[test]
    fn idle_flows_are_exported_and_restart() {
        let mut m = FlowMonitor::new(16, 10 * SECOND);
        m.sweep_every = 1;
        run(&mut m, vec![tcp(1, 2, 1, 2, 2, SECOND)]);
        run(&mut m, vec![tcp(1, 2, 1, 2, 2, 20 * SECOND)]);
        assert_eq!(m.exported, 1);
        assert_eq!(m.active()[0].first_ns, 20 * SECOND);
        // A sweep a second later finds nothing idle; much later it exports the flow.
        run(&mut m, vec![tcp(3, 4, 1, 2, 2, 40 * SECOND)]);
        assert_eq!((m.exported, m.table.len()), (2, 1));
    }

    #[test]
    fn full_table_counts_and_never_drops() {
        let mut m = FlowMonitor::new(1, 0);
        run(&mut m, vec![tcp(1, 2, 1, 2, 2, 1), tcp(3, 4, 1, 2, 2, 1)]);
        assert_eq!((m.overflow_packets, m.table.len()), (1, 1));
        let mut junk = Batch::new();
        junk.push(Packet::from_bytes(&[0xff; 7]));
        let mut lldp = [0u8; 60];
        lldp[12..14].copy_from_slice(&[0x88, 0xcc]);
        junk.push(Packet::from_bytes(&lldp));
        let mut cut = tcp(1, 2, 1, 2, 2, 1).data().to_vec();
        cut.truncate(14 + 19);
        junk.push(Packet::from_bytes(&cut));
        m.process(&mut junk, &Context { ports: 1 });
        assert_eq!((m.malformed, m.not_ip), (2, 1));
        for p in junk.iter() {
            assert_eq!(p.meta().verdict, crate::packet::Verdict::Out(0));
        }
    }
}
