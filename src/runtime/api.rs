//! The HTTP control API of a running chain (`catena run --api 127.0.0.1:9100`):
//! `GET /stats` (the `--json` summary, refreshed a few times a second), `GET /metrics`
//! (Prometheus/OpenMetrics text) and `POST /nf/NAME` with a command in the body (the
//! Unix socket's commands and replies). A blocking server on its own threads is all
//! this needs (no async runtime to carry): `api_http`, httparse under bounds of our own,
//! since tiny_http 0.12 read a header line of any length whole (session 24).
//!
//! The worker never waits for the API: it publishes a snapshot with `try_lock` between
//! batches (skipping a turn if a reader holds it), and commands reach it through the
//! same channel as the Unix socket's, applied between batches. Requests are bounded (a
//! 16 KiB head of at most 64 headers, a 4 KiB body, 10 s to arrive, at most 32
//! connections and `MAX_IN_FLIGHT` requests at once, 5 s for a command's reply) and
//! garbage gets a 4xx.

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::api_http::{self, Request, Response};
use super::control::{Command, Reply};
use super::counters::Summary;
use crate::nfs::Preparer;

/// Largest request body (a command line).
pub const MAX_BODY: usize = 4096;
const MAX_IN_FLIGHT: usize = 8;
const REPLY_WAIT: Duration = Duration::from_secs(5);

/// Upper bounds (seconds) of the batch-latency histogram's buckets; the last is +Inf.
pub const BATCH_BOUNDS: [f64; 12] = [
    1e-6,
    2e-6,
    5e-6,
    10e-6,
    20e-6,
    50e-6,
    100e-6,
    200e-6,
    500e-6,
    1e-3,
    10e-3,
    f64::INFINITY,
];

/// Time from taking a batch off the ports to its frames sent, per batch.
#[derive(Clone, Debug, Default)]
pub struct BatchHist {
    /// Batches per bucket of [`BATCH_BOUNDS`] (not cumulative).
    pub counts: [u64; 12],
    pub sum_secs: f64,
    pub count: u64,
}

impl BatchHist {
    #[inline]
    pub fn record(&mut self, secs: f64) {
        let i = BATCH_BOUNDS.iter().position(|&b| secs <= b).unwrap_or(11);
        self.counts[i] += 1;
        self.sum_secs += secs;
        self.count += 1;
    }
}

impl EncodeMetric for BatchHist {
    fn encode(&self, mut e: MetricEncoder) -> Result<(), std::fmt::Error> {
        let buckets: Vec<(f64, u64)> = BATCH_BOUNDS.iter().copied().zip(self.counts).collect();
        e.encode_histogram::<NoLabelSet>(self.sum_secs, self.count, &buckets, None)
    }
    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// What the worker last published.
#[derive(Default)]
pub struct Published {
    pub summary: Option<Summary>,
    pub batches: BatchHist,
}

pub type Shared = Arc<Mutex<Published>>;

/// The running server; dropping it stops it.
pub struct ApiServer {
    pub addr: SocketAddr,
    _server: api_http::Server,
}

/// NFs whose commands are compiled off the worker (by name), and the lock that makes
/// compilations one at a time.
type Preparers = Arc<(std::collections::HashMap<String, Preparer>, Mutex<()>)>;

/// Listens on `addr`; commands go to the worker through `tx`, compiled first on the
/// request's thread when their NF has a preparer (as the Unix socket does).
pub fn serve(
    addr: &str,
    tx: Sender<Command>,
    shared: Shared,
    preparers: std::collections::HashMap<String, Preparer>,
) -> std::io::Result<ApiServer> {
    let preparers: Preparers = Arc::new((preparers, Mutex::new(())));
    let listener = TcpListener::bind(addr)
        .map_err(|e| std::io::Error::other(format!("cannot listen on {addr}: {e}")))?;
    let addr = listener.local_addr()?;
    let busy = AtomicUsize::new(0);
    // The sender is shared by the connections' threads (Sender is Sync since Rust 1.72).
    let handler: api_http::Handler = Arc::new(move |req: &Request| {
        if busy.fetch_add(1, Ordering::AcqRel) >= MAX_IN_FLIGHT {
            busy.fetch_sub(1, Ordering::AcqRel);
            return text(503, "busy: too many requests at once\n");
        }
        let r = handle(req, &tx, &shared, &preparers);
        busy.fetch_sub(1, Ordering::AcqRel);
        r
    });
    Ok(ApiServer {
        addr,
        _server: api_http::serve(listener, MAX_BODY, handler)?,
    })
}

fn text(code: u16, body: &str) -> Response {
    Response::text(code, body)
}

fn handle(req: &Request, tx: &Sender<Command>, shared: &Shared, preparers: &Preparers) -> Response {
    match (req.method.as_str(), req.path()) {
        ("GET", "/stats") => match snapshot(shared, |p| {
            p.summary
                .as_ref()
                .map(|s| serde_json::to_string(s).unwrap_or_default())
        }) {
            Some(json) => Response {
                status: 200,
                content_type: "application/json",
                body: json + "\n",
            },
            None => text(503, "no statistics yet: the chain has not started\n"),
        },
        ("GET", "/metrics") => match snapshot(shared, metrics) {
            Some(m) => Response {
                status: 200,
                content_type: "application/openmetrics-text; version=1.0.0; charset=utf-8",
                body: m,
            },
            None => text(503, "no metrics yet: the chain has not started\n"),
        },
        ("POST", p) if p.starts_with("/nf/") => command(&req.body, &p[4..], tx, preparers),
        (_, "/stats" | "/metrics") => text(405, "use GET\n"),
        (_, p) if p.starts_with("/nf/") => text(405, "use POST with the command as the body\n"),
        _ => text(404, "not found: GET /stats, GET /metrics, POST /nf/NAME\n"),
    }
}

/// Reads what the worker published, under the lock only as long as `f` takes.
fn snapshot<T>(shared: &Shared, f: impl FnOnce(&Published) -> Option<T>) -> Option<T> {
    let g = shared.lock().unwrap_or_else(|e| e.into_inner());
    f(&g)
}

/// A reply on one line with its control characters escaped: NF errors quote the command,
/// which may carry anything a client sent (an escape sequence for whoever reads the answer
/// on a terminal).
fn one_line(s: &str) -> String {
    super::control::escape_controls(&s.replace('\n', " "))
}

/// A command line as the body (at most `MAX_BODY` bytes: api_http refuses longer).
fn command(body: &[u8], nf: &str, tx: &Sender<Command>, preparers: &Preparers) -> Response {
    if nf.is_empty()
        || !nf
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return text(400, "error bad NF name in the path: POST /nf/NAME\n");
    }
    let Ok(cmd) = std::str::from_utf8(body) else {
        return text(400, "error the command is not UTF-8 text\n");
    };
    let cmd = cmd.trim();
    if cmd.is_empty() || cmd.contains('\n') {
        return text(
            400,
            "error send one command line as the body, e.g. `allow_ports 80 443`\n",
        );
    }
    let prepared = match preparers.0.get(nf) {
        Some(prepare) => {
            let _one = preparers.1.lock().unwrap_or_else(|e| e.into_inner());
            match prepare(cmd) {
                Ok(p) => Some(p),
                Err(e) => return text(400, &format!("error {}\n", one_line(&e))),
            }
        }
        None => None,
    };
    let (rtx, rrx) = channel();
    let sent = tx.send(Command {
        nf: nf.to_string(),
        cmd: cmd.to_string(),
        prepared,
        reply: Some(rtx),
    });
    if sent.is_err() {
        return text(503, "error the run has ended\n");
    }
    match rrx.recv_timeout(REPLY_WAIT) {
        Ok(Reply {
            result: Ok(r),
            replaced,
        }) => {
            drop(replaced);
            text(200, &format!("ok {}\n", one_line(&r)))
        }
        Ok(Reply { result: Err(e), .. }) => text(400, &format!("error {}\n", one_line(&e))),
        Err(_) => text(503, "error no reply from the worker in 5 s\n"),
    }
}

type Labels = Vec<(String, String)>;

fn family() -> Family<Labels, Counter> {
    Family::default()
}

fn add(f: &Family<Labels, Counter>, labels: &[(&str, &str)], v: u64) {
    let l: Labels = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    f.get_or_create(&l).inc_by(v);
}

/// The published counters in the Prometheus text exposition.
fn metrics(p: &Published) -> Option<String> {
    let s = p.summary.as_ref()?;
    let mut r = Registry::with_prefix("catena");
    let (nf_in, nf_out, nf_drop) = (family(), family(), family());
    for n in &s.nfs {
        add(&nf_in, &[("nf", &n.name), ("kind", &n.kind)], n.packets_in);
        add(
            &nf_out,
            &[("nf", &n.name), ("kind", &n.kind)],
            n.packets_out,
        );
        for (reason, v) in &n.drops {
            add(&nf_drop, &[("nf", &n.name), ("reason", reason)], *v);
        }
    }
    r.register("nf_packets_in", "Packets into each NF", nf_in);
    r.register("nf_packets_out", "Packets out of each NF", nf_out);
    r.register("nf_dropped", "Packets each NF dropped, by reason", nf_drop);
    let input = family();
    add(&input, &[], s.packets_in);
    r.register("packets_in", "Packets taken from the ports", input);
    let input_drops = family();
    for (reason, v) in &s.input_drops {
        add(&input_drops, &[("reason", reason)], *v);
    }
    r.register(
        "input_dropped",
        "Packets dropped before the first NF",
        input_drops,
    );
    let (rx, tx, kd, te) = (family(), family(), family(), family());
    // PA-Flow (docs/paflow.md): aggregated frames packed and unpacked, the packets in
    // them, and the frames refused as bad, per `[[port]]` (zero where `aggregate` is off).
    let (ag_tx, ag_txp, ag_rx, ag_rxp, ag_bad) = (family(), family(), family(), family(), family());
    for port in &s.ports {
        let num = port.port.to_string();
        let name = port.name.clone().unwrap_or_default();
        let l = [("port", num.as_str()), ("name", name.as_str())];
        add(&rx, &l, port.rx);
        add(&tx, &l, port.tx);
        if let Some(c) = &port.live {
            add(&kd, &l, c.kernel_drops);
            add(&te, &l, c.tx_errors);
            add(&ag_tx, &l, c.tx_aggregates);
            add(&ag_txp, &l, c.tx_aggregated);
            add(&ag_rx, &l, c.rx_aggregates);
            add(&ag_rxp, &l, c.rx_unpacked);
            add(&ag_bad, &l, c.rx_bad_aggregate);
        }
    }
    r.register("port_rx_packets", "Packets received per port", rx);
    r.register("port_tx_packets", "Packets sent per port", tx);
    r.register(
        "port_kernel_drops",
        "Packets the kernel dropped before catena read them",
        kd,
    );
    r.register("port_tx_errors", "Frames a port could not send", te);
    r.register(
        "port_aggregates_packed",
        "PA-Flow aggregated frames a port sent",
        ag_tx,
    );
    r.register(
        "port_packets_aggregated",
        "Packets a port sent inside aggregated frames",
        ag_txp,
    );
    r.register(
        "port_aggregates_unpacked",
        "PA-Flow aggregated frames a port received and unpacked",
        ag_rx,
    );
    r.register(
        "port_packets_unpacked",
        "Packets a port took out of aggregated frames",
        ag_rxp,
    );
    r.register(
        "port_bad_aggregates",
        "Aggregated frames a port found truncated or inconsistent (bad-aggregate)",
        ag_bad,
    );
    if let Some(f) = &s.fastpath {
        let fp = family();
        if let Ok(serde_json::Value::Object(m)) = serde_json::to_value(f) {
            for (k, v) in m {
                if let Some(v) = v.as_u64() {
                    add(&fp, &[("counter", &k)], v);
                }
            }
        }
        r.register(
            "fastpath",
            "FastPath counters (hits, misses, installed, …)",
            fp,
        );
    }
    r.register(
        "batch_seconds",
        "Time from taking a batch off the ports to its frames sent",
        p.batches.clone(),
    );
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &r).ok()?;
    Some(out)
}
