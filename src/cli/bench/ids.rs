//! `catena bench ids`: the IDS against Suricata, doing the same work with the same output.
//! Ours: the product path — a chain with one `microbox` NF whose `ids` app writes EVE alert
//! records — timed from the first packet to the flushed output (the chain, rules
//! included, is built before the clock starts); and the whole `catena run` process.
//! Peer: `suricata -c examples/ids/suricata-alerts-only.yaml` (EVE alert records only)
//! with `-k none`, `stream.midstream=true`, `packet-alert-max=255`,
//! `stream.reassembly.randomize-chunk-size=no` (the chunks our stream inspection uses), in `--runmode single`
//! and `autofp`. The headline compares each program's own processing window (catena's,
//! and Suricata's `time elapsed`, both with rule loading outside), minus its window on
//! one packet in the same round, medians over at least [`MIN_ROUNDS`] interleaved rounds
//! (docs/history/ids.md, "Session 21": rule loading, where Suricata's one-packet runs varied, is
//! outside both windows). Beside it: the minimum, the whole process minus the same
//! command on a one-packet capture on both sides, whole ÷ whole, CPU, the alert counts;
//! `--json` has every round's figures.
//!
//! A trace named `PATH*K` is PATH replayed K times into one capture, each copy its own
//! flows (see [`copies`]): a short capture's work then stands above the start-up noise
//! of the subtraction, and its alerts must scale K-fold on both sides.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde::Serialize;

use catena::io::Trace;
use catena::nfs::ids::{RuleSet, Vars};
use catena::packet::LinkKind;
use catena::runtime::{Chain, ChainConfig, NoProgress, RunOptions, Runner};

use super::scratch::Scratch;
use super::{median, print_table, traces, write_results, Args};

#[derive(Serialize)]
struct Row {
    trace: String,
    packets: u64,
    rules: usize,
    /// Interleaved rounds (at least [`MIN_ROUNDS`]).
    runs: u64,
    /// Catena's timed window: first packet to flushed EVE file (in this process).
    catena_s: f64,
    /// The whole `catena run` process (rule loading included), and on one packet.
    catena_process_s: f64,
    catena_one_s: f64,
    /// Whole minus one-packet (medians): timed as Suricata's processing is.
    catena_sub_s: f64,
    catena_alerts: u64,
    /// Suricata single-threaded: whole process, on one packet, and the difference.
    single_process_s: f64,
    single_one_s: f64,
    single_s: f64,
    single_alerts: u64,
    autofp_process_s: f64,
    autofp_one_s: f64,
    autofp_s: f64,
    autofp_alerts: u64,
    /// The same in CPU seconds (user + system, every thread): catena's window, and whole
    /// minus one-packet for catena and Suricata single.
    catena_cpu_window_s: f64,
    catena_cpu_s: f64,
    single_cpu_s: f64,
    /// Suricata single ÷ catena, CPU whole − one-packet on both sides.
    ratio_single_cpu: f64,
    /// Quartiles of the per-run (whole − one-packet) differences, to show the noise.
    catena_sub_q: (f64, f64),
    single_q: (f64, f64),
    /// Suricata single (whole − one) ÷ catena (whole − one), both sides as separate
    /// processes.
    ratio_single: f64,
    /// Suricata single (whole − one) ÷ catena's timed window.
    ratio_window: f64,
    ratio_autofp: f64,
    /// Whole process ÷ whole process (single).
    ratio_process: f64,
    /// Processing windows, each measured inside its own process with rule loading
    /// outside: catena's (as `catena_s`) and Suricata's own `time elapsed` (thread
    /// start-up to the end-of-input flush done). Per round, the window on the trace
    /// minus the window on one packet of the same round; the median over rounds, the
    /// quartiles and the minimum.
    catena_win_s: f64,
    catena_win_q: (f64, f64),
    catena_win_min_s: f64,
    single_win_s: f64,
    single_win_q: (f64, f64),
    single_win_min_s: f64,
    autofp_win_s: f64,
    /// The headline: Suricata single ÷ catena, window − one-packet window (medians).
    ratio_single_win: f64,
    /// The same from each side's fastest round.
    ratio_single_win_min: f64,
    ratio_autofp_win: f64,
    /// Every round's raw figures, seconds.
    per_run: PerRun,
}

/// One entry per round, in the order run.
#[derive(Serialize, Default)]
struct PerRun {
    catena_window: Vec<f64>,
    catena_window_one: Vec<f64>,
    catena_cpu_window: Vec<f64>,
    catena_whole: Vec<f64>,
    catena_one: Vec<f64>,
    catena_cpu_whole: Vec<f64>,
    catena_cpu_one: Vec<f64>,
    single_window: Vec<f64>,
    single_window_one: Vec<f64>,
    single_whole: Vec<f64>,
    single_one: Vec<f64>,
    single_cpu_whole: Vec<f64>,
    single_cpu_one: Vec<f64>,
    autofp_window: Vec<f64>,
    autofp_window_one: Vec<f64>,
    autofp_whole: Vec<f64>,
    autofp_one: Vec<f64>,
}

/// Rounds below this leave a median that one disturbed run can move (docs/history/ids.md,
/// "Session 21").
const MIN_ROUNDS: u64 = 9;

/// CPU time (user + system) of `who` (`RUSAGE_SELF`, or `RUSAGE_CHILDREN`: the children
/// waited for so far), seconds. Unlike the wall clock it does not grow with what other
/// processes on a loaded machine run meanwhile.
fn cpu_s(who: libc::c_int) -> f64 {
    // SAFETY: an all-zero rusage is valid; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(who, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// The `q`-quantile (0..=1) of `v` (nearest rank).
fn quantile(v: &[f64], q: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return 0.0;
    }
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// Shifts the addresses of one packet by `c` (see [`copies`]); checksums follow.
fn shift_packet(p: &mut [u8], link: LinkKind, c: u8) {
    let (mut off, mut et) = match link {
        LinkKind::Ethernet => (14, p.get(12..14).map(|b| u16::from_be_bytes([b[0], b[1]]))),
        LinkKind::LinuxSll => (16, p.get(14..16).map(|b| u16::from_be_bytes([b[0], b[1]]))),
        LinkKind::LinuxSll2 => (20, p.get(0..2).map(|b| u16::from_be_bytes([b[0], b[1]]))),
        LinkKind::RawIp => (
            0,
            match p.first().map(|b| b >> 4) {
                Some(4) => Some(0x0800),
                Some(6) => Some(0x86dd),
                _ => None,
            },
        ),
    };
    while matches!(et, Some(0x8100 | 0x88a8)) {
        et = p
            .get(off + 2..off + 4)
            .map(|b| u16::from_be_bytes([b[0], b[1]]));
        off += 4;
    }
    let Some(ip) = p.get_mut(off..) else { return };
    match et {
        Some(0x0800) => shift_v4(ip, c, true),
        Some(0x86dd) => shift_v6(ip, c),
        _ => {}
    }
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Adds `c` to the third byte of both IPv4 addresses (a /16 stays a /16, so `$HOME_NET`
/// still holds), with the IP and TCP/UDP checksums updated (RFC 1624); an ICMP error's
/// quoted header is shifted too, so it still names its copy's flow.
fn shift_v4(ip: &mut [u8], c: u8, outer: bool) {
    use catena::packet::checksum::update16;
    if ip.len() < 20 || ip[0] >> 4 != 4 {
        return;
    }
    let ihl = usize::from(ip[0] & 0xf) * 4;
    if ihl < 20 || ip.len() < ihl {
        return;
    }
    let mut sum = be16(ip, 10);
    let mut changes = [(0u16, 0u16); 2];
    for (k, a) in [12usize, 16].into_iter().enumerate() {
        let old = be16(ip, a + 2);
        ip[a + 2] = ip[a + 2].wrapping_add(c);
        let new = be16(ip, a + 2);
        sum = update16(sum, old, new);
        changes[k] = (old, new);
    }
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    if be16(ip, 6) & 0x1fff != 0 {
        return;
    }
    let proto = ip[9];
    let l4 = &mut ip[ihl..];
    let at = match proto {
        6 => 16,
        17 => 6,
        1 if outer && l4.len() > 8 && matches!(l4[0], 3 | 4 | 5 | 11 | 12) => {
            // The quoted header: shifted, and the ICMP checksum (no pseudo-header) follows.
            let old = l4[8..].to_vec();
            shift_v4(&mut l4[8..], c, false);
            let s = catena::packet::checksum::update_bytes(be16(l4, 2), &old, &l4[8..]);
            l4[2..4].copy_from_slice(&s.to_be_bytes());
            return;
        }
        _ => return,
    };
    if l4.len() < at + 2 {
        return;
    }
    let mut s = be16(l4, at);
    if proto == 17 && s == 0 {
        return; // no UDP checksum
    }
    for (o, n) in changes {
        s = update16(s, o, n);
    }
    if proto == 17 && s == 0 {
        s = 0xffff;
    }
    l4[at..at + 2].copy_from_slice(&s.to_be_bytes());
}

/// Adds `c` to the sixth byte of both IPv6 addresses (prefixes up to /40 hold), with the
/// TCP/UDP/ICMPv6 checksum updated when it follows the fixed header.
fn shift_v6(ip: &mut [u8], c: u8) {
    use catena::packet::checksum::update16;
    if ip.len() < 40 {
        return;
    }
    let mut changes = [(0u16, 0u16); 2];
    for (k, a) in [8usize, 24].into_iter().enumerate() {
        let old = be16(ip, a + 4);
        ip[a + 5] = ip[a + 5].wrapping_add(c);
        changes[k] = (old, be16(ip, a + 4));
    }
    let at = match ip[6] {
        6 => 16,
        17 => 6,
        58 => 2,
        _ => return,
    };
    let l4 = &mut ip[40..];
    if l4.len() < at + 2 {
        return;
    }
    let mut s = be16(l4, at);
    for (o, n) in changes {
        s = update16(s, o, n);
    }
    l4[at..at + 2].copy_from_slice(&s.to_be_bytes());
}

/// `t` replayed `k` times into one capture. Copy `c` (0-based) has `c` added to one byte of
/// every address (the third of an IPv4 one) so that its flows are new, and its times `c`
/// microseconds later; the copies are interleaved by time (a stable sort, so each copy
/// keeps its packets' order on a capture whose times never go back), so every copy keeps
/// its own timing and timeouts. The alerts of a copy are the original's, so both sides'
/// counts must be `k` times the original's.
pub fn copies(t: &Trace, k: usize) -> Trace {
    let mut all: Vec<(u64, Vec<u8>)> = Vec::with_capacity(t.len() * k);
    for c in 0..k {
        for i in 0..t.len() {
            let mut p = t.packet(i).to_vec();
            shift_packet(&mut p, t.link(), c as u8);
            all.push((t.record(i).ts_ns + c as u64 * 1_000, p));
        }
    }
    all.sort_by_key(|(ts, _)| *ts);
    Trace::from_packets(
        t.link(),
        t.header(),
        all.iter().map(|(ts, p)| (*ts, p.as_slice())),
    )
}

/// The checked-in rule file: the in-scope suricata-verify rules plus a few common ones.
fn default_rules() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/ids/bench.rules")
}

fn yaml() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/ids/suricata-alerts-only.yaml")
}

fn chain_text(rules: &Path, eve: &Path) -> String {
    format!(
        "[[nf]]\nname = \"ids\"\nkind = \"microbox\"\ntimeout = 600\n\
         apps = [{{ kind = \"ids\", rules_file = '{}', eve = '{}', eve_flows = false }}]\n",
        rules.display(),
        eve.display()
    )
}

fn lines(p: &Path) -> u64 {
    std::fs::read_to_string(p).map_or(0, |s| s.lines().count() as u64)
}

pub fn run(a: &Args) -> anyhow::Result<i32> {
    let rules_path = a.rules.clone().unwrap_or_else(default_rules);
    let text = std::fs::read_to_string(&rules_path)
        .map_err(|e| anyhow::anyhow!("{}: {e}", rules_path.display()))?;
    let (set, warnings) = RuleSet::parse(&text, &Vars::suricata_defaults());
    for w in warnings.iter().take(5) {
        eprintln!("{}: {w}", rules_path.display());
    }
    let n_rules = set.len();
    drop(set);
    // By default the two traces of the target; 1kxun (1,723 packets) also replayed 20
    // times, the figure that resolves it (docs/history/ids.md, "Session 20").
    let names = if a.traces.is_empty() {
        let kx = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../shared/datasets/ndpi/pcap/1kxun.pcap");
        let kx = kx.display();
        vec!["merged".to_string(), format!("{kx}*20"), kx.to_string()]
    } else {
        a.traces.clone()
    };
    // Removed on every way out, an error included.
    let scratch = Scratch::new("bench-ids")?;
    let tmp = scratch.path();
    let rules_abs = std::fs::canonicalize(&rules_path)?;
    let eve = tmp.join("catena-eve.json");
    let chain_file = tmp.join("chain.toml");
    std::fs::write(&chain_file, chain_text(&rules_abs, &eve))?;
    let cfg = ChainConfig::parse(&chain_text(&rules_abs, &eve), "bench-ids")?;
    let mut rows = Vec::new();
    for name in &names {
        // `PATH*K`: PATH replayed K times (see `copies`).
        let (base, k) = match name.rsplit_once('*') {
            Some((b, k)) => (
                b,
                k.parse::<usize>()
                    .ok()
                    .filter(|k| (1..=255).contains(k))
                    .ok_or_else(|| anyhow::anyhow!("{name}: copies must be 1..=255"))?,
            ),
            None => (name.as_str(), 1),
        };
        let mut trace = traces::load(base, a.scale)?;
        let pcap = if k > 1 {
            trace = copies(&trace, k);
            let p = tmp.join(format!("copies-{k}.pcap"));
            trace.write_pcap(&p)?;
            p
        } else {
            match base {
                "merged" => traces::merged_path(),
                n if Path::new(n).exists() => PathBuf::from(n),
                _ => {
                    let p = tmp.join(format!("{base}.pcap"));
                    trace.write_pcap(&p)?;
                    p
                }
            }
        };
        let packets = trace.len() as u64;
        let one = tmp.join("one.pcap");
        let one_trace = Trace::from_packets(
            trace.link(),
            trace.header(),
            std::iter::once((0u64, trace.packet(0))),
        );
        one_trace.write_pcap(&one)?;
        // Per round, interleaved: catena's window on the trace and on one packet, whole
        // `catena run` processes on both, then Suricata single and autofp on both (each
        // process reporting its own window).
        let rounds = a.runs.max(MIN_ROUNDS);
        let mut pr = PerRun::default();
        let mut alerts = [0u64; 3];
        for _ in 0..rounds {
            for (j, t) in [&trace, &one_trace].into_iter().enumerate() {
                let mut r = Runner::new(Chain::from_config(&cfg)?, t.max_packet_len());
                let c0 = cpu_s(libc::RUSAGE_SELF);
                let s = r.run(t, &RunOptions::default(), &mut NoProgress)?;
                if j == 0 {
                    pr.catena_cpu_window.push(cpu_s(libc::RUSAGE_SELF) - c0);
                    pr.catena_window.push(s.seconds);
                } else {
                    pr.catena_window_one.push(s.seconds);
                }
            }
            for (j, input) in [&pcap, &one].into_iter().enumerate() {
                let (w, c0) = (Instant::now(), cpu_s(libc::RUSAGE_CHILDREN));
                let o = Command::new(std::env::current_exe()?)
                    .arg("run")
                    .arg(&chain_file)
                    .arg("-i")
                    .arg(input)
                    .output()?;
                if !o.status.success() {
                    anyhow::bail!("catena run: {}", String::from_utf8_lossy(&o.stderr).trim());
                }
                let t = w.elapsed().as_secs_f64();
                let cpu = cpu_s(libc::RUSAGE_CHILDREN) - c0;
                if j == 0 {
                    pr.catena_whole.push(t);
                    pr.catena_cpu_whole.push(cpu);
                    alerts[0] = lines(&eve);
                } else {
                    pr.catena_one.push(t);
                    pr.catena_cpu_one.push(cpu);
                }
            }
            for (m, mode) in ["single", "autofp"].iter().enumerate() {
                let c0 = cpu_s(libc::RUSAGE_CHILDREN);
                let w = suricata(&pcap, &rules_path, tmp, mode)?;
                let c1 = cpu_s(libc::RUSAGE_CHILDREN);
                let o = suricata(&one, &rules_path, tmp, mode)?;
                if m == 0 {
                    pr.single_cpu_whole.push(c1 - c0);
                    pr.single_cpu_one.push(cpu_s(libc::RUSAGE_CHILDREN) - c1);
                    pr.single_whole.push(w.wall);
                    pr.single_one.push(o.wall);
                    pr.single_window.push(w.window);
                    pr.single_window_one.push(o.window);
                } else {
                    pr.autofp_whole.push(w.wall);
                    pr.autofp_one.push(o.wall);
                    pr.autofp_window.push(w.window);
                    pr.autofp_window_one.push(o.window);
                }
                alerts[1 + m] = w.alerts;
            }
        }
        let diffs =
            |w: &[f64], o: &[f64]| -> Vec<f64> { w.iter().zip(o).map(|(w, s)| w - s).collect() };
        let q = |v: &[f64]| (quantile(v, 0.25), quantile(v, 0.75));
        let min = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
        let med = |v: &[f64]| median(&mut v.to_vec());
        let sub = |w: f64, o: f64| (w - o).max(1e-6);
        let catena_sub_q = q(&diffs(&pr.catena_whole, &pr.catena_one));
        let single_q = q(&diffs(&pr.single_whole, &pr.single_one));
        let c = med(&pr.catena_window);
        let (cp, sp, ap) = (
            med(&pr.catena_whole),
            med(&pr.single_whole),
            med(&pr.autofp_whole),
        );
        let (c1, s1, a1) = (
            med(&pr.catena_one),
            med(&pr.single_one),
            med(&pr.autofp_one),
        );
        let (cs, ss, aus) = (sub(cp, c1), sub(sp, s1), sub(ap, a1));
        let ccpu = sub(med(&pr.catena_cpu_whole), med(&pr.catena_cpu_one));
        let scpu = sub(med(&pr.single_cpu_whole), med(&pr.single_cpu_one));
        // The headline: each side's own window, its one-packet window of the same round
        // taken off (start-up inside the window: Suricata's threads, catena's nothing much).
        let cw = diffs(&pr.catena_window, &pr.catena_window_one);
        let sw = diffs(&pr.single_window, &pr.single_window_one);
        let aw = diffs(&pr.autofp_window, &pr.autofp_window_one);
        let (cwm, swm, awm) = (med(&cw).max(1e-6), med(&sw), med(&aw));
        rows.push(Row {
            trace: name.clone(),
            packets,
            rules: n_rules,
            runs: rounds,
            catena_s: c,
            catena_process_s: cp,
            catena_one_s: c1,
            catena_sub_s: cs,
            catena_alerts: alerts[0],
            single_process_s: sp,
            single_one_s: s1,
            single_s: ss,
            single_alerts: alerts[1],
            autofp_process_s: ap,
            autofp_one_s: a1,
            autofp_s: aus,
            autofp_alerts: alerts[2],
            catena_cpu_window_s: med(&pr.catena_cpu_window),
            catena_cpu_s: ccpu,
            single_cpu_s: scpu,
            ratio_single_cpu: scpu / ccpu,
            catena_sub_q,
            single_q,
            ratio_single: ss / cs,
            ratio_window: ss / c.max(1e-9),
            ratio_autofp: aus / cs,
            ratio_process: sp / cp.max(1e-9),
            catena_win_s: cwm,
            catena_win_q: q(&cw),
            catena_win_min_s: min(&cw),
            single_win_s: swm,
            single_win_q: q(&sw),
            single_win_min_s: min(&sw),
            autofp_win_s: awm,
            ratio_single_win: swm / cwm,
            ratio_single_win_min: min(&sw) / min(&cw).max(1e-6),
            ratio_autofp_win: awm / cwm,
            per_run: pr,
        });
    }
    drop(scratch);
    let header = [
        "trace",
        "packets",
        "rounds",
        "catena win-one s",
        "(q1-q3)",
        "min",
        "catena alerts",
        "single win-one s",
        "(q1-q3)",
        "min",
        "single alerts",
        "autofp win-one s",
        "autofp alerts",
        "x single",
        "x single min",
        "x autofp",
        "catena whole-one s",
        "single whole-one s",
        "x single whole-one",
        "x proc",
        "catena cpu window s",
        "single cpu whole-one s",
        "x single cpu",
    ];
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.trace.clone(),
                r.packets.to_string(),
                r.runs.to_string(),
                format!("{:.3}", r.catena_win_s),
                format!("{:.3}-{:.3}", r.catena_win_q.0, r.catena_win_q.1),
                format!("{:.3}", r.catena_win_min_s),
                r.catena_alerts.to_string(),
                format!("{:.3}", r.single_win_s),
                format!("{:.3}-{:.3}", r.single_win_q.0, r.single_win_q.1),
                format!("{:.3}", r.single_win_min_s),
                r.single_alerts.to_string(),
                format!("{:.3}", r.autofp_win_s),
                r.autofp_alerts.to_string(),
                format!("{:.2}", r.ratio_single_win),
                format!("{:.2}", r.ratio_single_win_min),
                format!("{:.2}", r.ratio_autofp_win),
                format!("{:.3}", r.catena_sub_s),
                format!("{:.3}", r.single_s),
                format!("{:.2}", r.ratio_single),
                format!("{:.2}", r.ratio_process),
                format!("{:.3}", r.catena_cpu_window_s),
                format!("{:.3}", r.single_cpu_s),
                format!("{:.2}", r.ratio_single_cpu),
            ]
        })
        .collect();
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&rows)?)?;
    } else {
        print_table(&header, &table)?;
    }
    write_results(a, "ids", &header, &table, &rows)?;
    Ok(0)
}

/// One Suricata run: wall seconds of the process, its own processing window, alert
/// records in its EVE file.
struct SuriRun {
    wall: f64,
    window: f64,
    alerts: u64,
}

/// Suricata's own window from its `-v` log: `time elapsed` is taken from just before its
/// packet threads are created to after the end-of-input flow flush and the packet
/// threads' stop (rule loading before it, teardown after it), millisecond resolution.
fn suricata_window(stdout: &str) -> Option<f64> {
    let l = stdout.lines().find(|l| l.contains("time elapsed "))?;
    let v = l.rsplit("time elapsed ").next()?.trim().strip_suffix('s')?;
    v.parse().ok()
}

/// Runs Suricata once.
fn suricata(pcap: &Path, rules: &Path, tmp: &Path, mode: &str) -> anyhow::Result<SuriRun> {
    let log = tmp.join("suricata");
    let _ = std::fs::remove_dir_all(&log);
    std::fs::create_dir_all(&log)?;
    let t = Instant::now();
    let out = Command::new("suricata")
        .arg("-c")
        .arg(yaml())
        .arg("-r")
        .arg(pcap)
        .arg("-S")
        .arg(rules)
        .args(["-k", "none", "--runmode", mode])
        .args([
            "--set",
            "stream.midstream=true",
            "--set",
            "packet-alert-max=255",
            "--set",
            "stream.reassembly.randomize-chunk-size=no",
        ])
        // `-v` for the `time elapsed` line (info level).
        .arg("-v")
        .arg("-l")
        .arg(&log)
        .output()
        .map_err(|e| anyhow::anyhow!("running suricata: {e} (apt-get install suricata)"))?;
    let wall = t.elapsed().as_secs_f64();
    if !out.status.success() {
        anyhow::bail!(
            "suricata failed: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        );
    }
    let window = suricata_window(&String::from_utf8_lossy(&out.stdout))
        .ok_or_else(|| anyhow::anyhow!("suricata printed no `time elapsed` line"))?;
    Ok(SuriRun {
        wall,
        window,
        alerts: lines(&log.join("eve.json")),
    })
}

#[cfg(test)]
mod tests {
    use super::suricata_window;

    #[test]
    fn reads_suricata_time_elapsed() {
        let log = "Notice: threads: Threads created -> W: 1 FM: 1 FR: 1   Engine started.\n\
                   Info: suricata: time elapsed 0.057s\n\
                   Notice: pcap: read 1 file, 1 packets, 1506 bytes\n";
        assert_eq!(suricata_window(log), Some(0.057));
        assert_eq!(suricata_window("Info: suricata: time elapsed s\n"), None);
        assert_eq!(suricata_window("no such line"), None);
    }
}
