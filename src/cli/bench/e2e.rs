//! `catena bench e2e`: `catena run` as a user runs it, whole process from spawn to exit,
//! beside Click userlevel (FromDump -> the same NF -> Discard, one thread) and tcpdump
//! reading (`-w /dev/null`) and copying (`-w OUT`) the same file, all in the same run.
//!
//! Each cell is the median wall time of the timed rounds after one warm-up round (the
//! trace is in the page cache for every tool): at least `--runs`, more when catena's run
//! is short (see `MIN_TIMED_S`); the commands of a case run interleaved (catena,
//! catena -o, catena --copy, Click, …, then again), so load from elsewhere falls on all
//! of them alike, and the ratios to Click are medians of the rounds' own ratios. Whole process is compared only with whole process;
//! catena's own processing figure (`seconds` of its summary) is a separate column and is
//! never set against a peer's whole process. Peak memory is the child's maximum RSS.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use serde::Serialize;

use catena::io::gen::{GenOptions, Profile};

use super::{median, print_table, traces, write_results, Args};

/// The rules of Click's `filter10.click`; the bench gives these same strings to catena's
/// `ip_filter` and to Click's `IPFilter` (see [`click_filters`]).
const FILTER10: &[&str] = &[
    "deny src net 10.0.250.0/24",
    "deny dst net 203.0.113.0/24",
    "deny dst host 93.184.216.34",
    "deny tcp dst port 23",
    "deny tcp dst port 445",
    "deny udp dst port 1900",
    "deny ip frag",
    "allow tcp dst port 80",
    "allow tcp dst port 443",
];
const F1: &[&str] = &[
    "deny src net 10.0.250.0/24",
    "deny src net 10.0.251.0/24",
    "deny src host 10.0.1.1",
    "deny src host 10.0.2.2",
    "deny dst net 203.0.113.0/24",
    "deny dst net 198.51.100.0/24",
    "deny dst host 93.184.216.34",
    "deny dst host 142.250.0.1",
    "deny ip frag",
];
const F2: &[&str] = &[
    "deny tcp dst port 23",
    "deny tcp dst port 445",
    "deny tcp dst port 135",
    "deny tcp dst port 139",
    "deny udp dst port 1900",
    "deny udp dst port 137",
    "deny udp dst port 138",
    "deny tcp dst port 3389",
    "deny icmp type 5",
];
const F3: &[&str] = &[
    "deny src net 10.0.252.0/24",
    "deny dst net 192.0.2.0/24",
    "deny dst host 151.101.1.1",
    "deny tcp dst port 25",
    "deny tcp dst port 22",
    "deny udp dst port 123",
    "deny ip frag",
    "allow tcp dst port 80",
    "allow tcp dst port 443",
];

/// 990 host rules that match nothing in the traces, then the 10-rule filter.
fn filter1000() -> Vec<String> {
    let mut v: Vec<String> = (0..990)
        .map(|i| {
            format!(
                "deny src host 10.{}.{}.{}",
                200 + i / 65536,
                (i / 256) % 256,
                i % 256
            )
        })
        .collect();
    v.extend(FILTER10.iter().map(|s| s.to_string()));
    v
}

fn filter_nf(name: &str, rules: &[String], default: &str) -> String {
    let rules: Vec<String> = rules.iter().map(|r| format!("{r:?}")).collect();
    format!(
        "[[nf]]\nname = \"{name}\"\nkind = \"ip_filter\"\ndefault = \"{default}\"\nrules = [{}]\n",
        rules.join(", ")
    )
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// The private prefixes the NAT takes as inside, here and in [`click_nat`] (every
/// generated trace's sources lie in 10/8). Before session 13 `inside` was 0.0.0.0/0,
/// which made every packet inside-to-inside: catena's NAT translated nothing and passed
/// everything while Click's rewrote every TCP/UDP packet.
const NAT_INSIDE: [&str; 3] = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"];

/// The NAT's public side, here and in [`click_nat`].
const NAT_PUBLIC: &str = "209.6.198.213";
const NAT_PORTS: &str = "50000-65535";

/// catena's NAT as the bench runs it. Timeouts 0 (never): Click's rewriters time
/// mappings out on the wall clock, and a run lasts about a second, so none expires there
/// either, while catena's run clock follows the trace's capture times.
fn nat_nf() -> String {
    format!(
        "[[nf]]\nname = \"nat\"\nkind = \"nat\"\ninside = \"{}\"\npublic = \"{NAT_PUBLIC}\"\n\
         ports = \"{NAT_PORTS}\"\ntcp_timeout = 0\ntcp_linger = 0\nudp_timeout = 0\nicmp_timeout = 0\n",
        NAT_INSIDE.join(", ")
    )
}

/// (Classifier pattern matching an Ethernet frame carrying `ethertype` under each stack
/// of up to two 802.1Q/802.1ad tags, offset of the network header), untagged first:
/// catena's layers look through tags, so Click is given the same packets.
fn tag_stacks(ethertype: &str) -> Vec<(String, usize)> {
    const TAGS: [&str; 3] = ["8100", "88a8", "9100"];
    let mut stacks: Vec<Vec<&str>> = vec![vec![]];
    stacks.extend(TAGS.iter().map(|t| vec![*t]));
    stacks.extend(
        TAGS.iter()
            .flat_map(|a| TAGS.iter().map(move |b| vec![*a, *b])),
    );
    stacks
        .iter()
        .map(|tags| {
            let mut pat: Vec<String> = tags
                .iter()
                .enumerate()
                .map(|(i, t)| format!("{}/{t}", 12 + 4 * i))
                .collect();
            let et = 12 + 4 * tags.len();
            pat.push(format!("{et}/{ethertype}"));
            (pat.join(" "), et + 2)
        })
        .collect()
}

/// Click doing the work of catena's NAT (`src/nfs/nat`, MazuNAT's semantics, as
/// `conf/mazu-nat.click` builds them): direction from the source address (inside:
/// [`NAT_INSIDE`]); inside-to-inside and non-IPv4 packets pass untouched; outgoing TCP
/// and UDP through an `IPRewriter` pattern, ICMP echo through an `ICMPPingRewriter`,
/// ICMP errors through an `ICMPRewriter` on both; incoming packets pass only as replies
/// of a mapping; other protocols, outgoing, are dropped. Every passing packet is counted
/// by `out`. Ethernet traces only (the bench's). The shared `nat_simple.click` rewrote
/// every TCP/UDP packet and dropped the rest, which no catena setting reproduces (a
/// packet's direction comes from its addresses).
fn click_nat() -> String {
    let net = |dir: &str| {
        let v: Vec<String> = NAT_INSIDE
            .iter()
            .map(|n| format!("{dir} net {n}"))
            .collect();
        format!("({})", v.join(" or "))
    };
    let (src, dst) = (net("src"), net("dst"));
    const ERRORS: &str =
        "icmp type 3 or icmp type 4 or icmp type 5 or icmp type 11 or icmp type 12";
    let v4 = tag_stacks("0800");
    let mut s = String::from("elementclass NF {\n  out :: Counter -> Discard;\n");
    s += &format!("  d :: IPClassifier({src} and {dst}, {src}, -);\n  d[0] -> out;\n");
    // A header `CheckIPHeader` rejects (a total length of 0 or past the captured bytes)
    // is still IPv4 to catena: inside-to-inside it passes, otherwise it is dropped.
    s += &format!("  bad :: IPClassifier({src} and {dst}, -); bad[0] -> out; bad[1] -> Discard;\n");
    let pats: Vec<&str> = v4.iter().map(|(p, _)| p.as_str()).collect();
    s += &format!("  input -> c :: Classifier({}, -);\n", pats.join(", "));
    for (i, (_, l3)) in v4.iter().enumerate() {
        s += &format!(
            "  c[{i}] -> h{i} :: CheckIPHeader({l3}, CHECKSUM false) -> d; \
             h{i}[1] -> MarkIPHeader({l3}) -> bad;\n"
        );
    }
    s += &format!("  c[{}] -> out;\n", v4.len());
    let pattern = format!("pattern {NAT_PUBLIC} {NAT_PORTS} - - 0 1");
    s += &format!("  rw :: IPRewriter({pattern}, drop);\n");
    s += &format!("  prw :: ICMPPingRewriter({pattern}, drop);\n");
    s += "  erw :: ICMPRewriter(rw prw);\n";
    s += &format!("  d[1] -> o :: IPClassifier(tcp or udp, icmp type echo, {ERRORS}, -);\n");
    s += "  o[0] -> [0]rw; o[1] -> [0]prw; o[2] -> erw; o[3] -> Discard;\n";
    s += &format!("  d[2] -> i :: IPClassifier(tcp or udp, icmp type echo-reply, {ERRORS}, -);\n");
    s += "  i[0] -> [1]rw; i[1] -> [1]prw; i[2] -> erw; i[3] -> Discard;\n";
    s += "  rw[0] -> out; rw[1] -> out; prw[0] -> out; prw[1] -> out;\n";
    s += "  erw[0] -> out; erw[1] -> Discard;\n}\n";
    s + "src :: FromDump($F, STOP true, MMAP true) -> cin :: Counter -> nf :: NF;\n"
}

/// (case, catena chain text, Click configuration: a file of ../shared/peers/click/configs
/// or generated text).
fn cases() -> Vec<(&'static str, String, Option<ClickConfig>)> {
    let f1000 = filter1000();
    vec![
        (
            "wire",
            "[input]\nports = 2\n[[nf]]\nname = \"wire\"\nkind = \"wire\"\n".into(),
            Some(ClickConfig::File("wire.click")),
        ),
        (
            "mac_switch",
            "[input]\nports = 4\n[[nf]]\nname = \"sw\"\nkind = \"mac_switch\"\n".into(),
            Some(ClickConfig::File("switch_hash.click")),
        ),
        (
            "filter 10 rules",
            format!(
                "[input]\nports = 2\n{}",
                filter_nf("f", &strs(FILTER10), "deny")
            ),
            Some(ClickConfig::Text(click_filters(&[(
                &strs(FILTER10),
                "deny",
            )]))),
        ),
        (
            "filter 1000 rules",
            format!("[input]\nports = 2\n{}", filter_nf("f", &f1000, "deny")),
            Some(ClickConfig::Text(click_filters(&[(&f1000, "deny")]))),
        ),
        (
            "three filters",
            format!(
                "[input]\nports = 2\n{}{}{}",
                filter_nf("f1", &strs(F1), "allow"),
                filter_nf("f2", &strs(F2), "allow"),
                filter_nf("f3", &strs(F3), "deny")
            ),
            Some(ClickConfig::Text(click_filters(&[
                (&strs(F1), "allow"),
                (&strs(F2), "allow"),
                (&strs(F3), "deny"),
            ]))),
        ),
        (
            "nat",
            format!("[input]\nports = 2\n{}", nat_nf()),
            Some(ClickConfig::Text(click_nat())),
        ),
        (
            "mixed chain",
            format!(
                "[input]\nports = 4\n{}{}[[nf]]\nname = \"sw\"\nkind = \"mac_switch\"\n",
                filter_nf("f", &strs(FILTER10), "deny"),
                nat_nf()
            ),
            None,
        ),
    ]
}

enum ClickConfig {
    File(&'static str),
    Text(String),
}

/// Click's IPFilters with catena's rules, fed the packets catena's `ip_filter` classifies.
///
/// Click's `CheckIPHeader(14)` -> `IPFilter` alone (its shipped configurations) passed
/// fewer packets than catena on real traces (merged: 12,860 against 16,718 for the
/// 10-rule filter), because it drops what catena (and tcpdump) classify: IPv4 packets with
/// a bad header checksum, VLAN-tagged packets (catena looks through
/// 802.1Q/802.1ad tags) and IPv6 (Click's IPFilter is IPv4 only). So here: tags
/// (0x8100/0x88a8/0x9100, up to two) are skipped by a Classifier, IPv4 goes through
/// `CheckIPHeader(OFFSET, CHECKSUM false)` (still dropping what catena drops as malformed)
/// to the filters, and IPv6 goes to a Classifier passing TCP to [`V6_PASS`], which is what
/// every rule set here decides for IPv6 (their address and ICMP rules are IPv4 only; they
/// end `allow tcp dst port 80`, `allow tcp dst port 443`, deny). Differences left: three
/// or more tags, and IPv4 whose total length exceeds the captured bytes (Click drops it).
fn click_filters(filters: &[(&[String], &str)]) -> String {
    let v4 = tag_stacks("0800");
    let v6 = tag_stacks("86dd");
    let mut s = String::from("elementclass NF {\n  ");
    for (i, (rules, default)) in filters.iter().enumerate() {
        s += &format!("f{i} :: IPFilter({}, {default} all) -> ", rules.join(", "));
    }
    s += "out :: Counter -> Discard;\n";
    let pats: Vec<&str> = v4.iter().chain(&v6).map(|(p, _)| p.as_str()).collect();
    s += &format!("  input -> c :: Classifier({}, -);\n", pats.join(", "));
    for (i, (_, l3)) in v4.iter().enumerate() {
        s += &format!("  c[{i}] -> CheckIPHeader({l3}, CHECKSUM false) -> f0;\n");
    }
    for (j, (_, l3)) in v6.iter().enumerate() {
        let ports: Vec<String> = V6_PASS
            .iter()
            .map(|p| format!("{}/06 {}/{p:04x}", l3 + 6, l3 + 42))
            .collect();
        s += &format!(
            "  c[{}] -> v6_{j} :: Classifier({});",
            v4.len() + j,
            ports.join(", ")
        );
        for k in 0..V6_PASS.len() {
            s += &format!(" v6_{j}[{k}] -> out;");
        }
        s += "\n";
    }
    s += &format!("  c[{}] -> Discard;\n}}\n", pats.len());
    s + "src :: FromDump($F, STOP true, MMAP true) -> cin :: Counter -> nf :: NF;\n"
}

/// TCP destination ports every filter case passes for IPv6 (see [`click_filters`]).
const V6_PASS: [u16; 2] = [80, 443];

fn click_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/peers/click")
}

/// Click's binary: $CLICK, or where `build.sh` puts it by default.
fn click_bin() -> Option<PathBuf> {
    let p = std::env::var_os("CLICK")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/click/userlevel/click"));
    p.exists().then_some(p)
}

/// One timed process: wall seconds, CPU seconds, peak RSS (bytes), stdout. From
/// [`interleaved`]: the medians, and every timed round's figures in round order.
struct Proc {
    secs: f64,
    /// User plus system time: the process's own work, which load from other processes
    /// on the machine stretches far less than the wall time.
    cpu: f64,
    rss: u64,
    /// Minor page faults (the median from [`interleaved`]). Mapping the trace costs
    /// about 750 of them for 160 MB when the page cache holds it in large folios and
    /// about 2,900 (some 20 ms of system time, for catena and Click alike) when it holds
    /// 4 KiB pages, which the kernel decides: shown so that a run's state is seen.
    faults: u64,
    stdout: Vec<u8>,
    all_secs: Vec<f64>,
    all_cpu: Vec<f64>,
}

fn time_proc(cmd: &mut Command, out_file: &Path) -> anyhow::Result<Proc> {
    let f = std::fs::File::create(out_file)?;
    let t = Instant::now();
    let child = cmd
        .stdout(f)
        .stderr(Stdio::null())
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| anyhow::anyhow!("{cmd:?}: {e}"))?;
    let mut status = 0;
    // SAFETY: plain struct filled by wait4.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child; its rusage is what we want (peak RSS).
    let r = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut ru) };
    let secs = t.elapsed().as_secs_f64();
    if r < 0 {
        anyhow::bail!("wait4: {}", std::io::Error::last_os_error());
    }
    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    if !ok {
        anyhow::bail!("{cmd:?} failed (status {status})");
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ok(Proc {
        secs,
        cpu: tv(ru.ru_utime) + tv(ru.ru_stime),
        rss: ru.ru_maxrss as u64 * 1024,
        faults: ru.ru_minflt as u64,
        stdout: std::fs::read(out_file)?,
        all_secs: Vec::new(),
        all_cpu: Vec::new(),
    })
}

/// Timed rounds are added, past `--runs`, until the first command's runs (catena's,
/// the shortest process of a group) add up to this many seconds: a process of 0.1-0.2 s
/// swings by ±15 % with the moment on a shared VM, and more pairs steady the median.
const MIN_TIMED_S: f64 = 2.0;
/// At most this many times `--runs` rounds. Only for `--runs` of 3 or more.
const MAX_ROUNDS_X: u64 = 5;

/// The commands of one group run interleaved (A B C A B C …): one untimed warm-up
/// round, then at least `a.runs` timed rounds (more for short processes, see
/// [`MIN_TIMED_S`]), so a burst of load from elsewhere falls on every column alike.
/// Per command: the median seconds, the largest peak RSS, the last round's stdout and
/// every round's times.
fn interleaved(
    a: &Args,
    cmds: &mut [Box<dyn FnMut() -> Command + '_>],
    tmp: &Path,
) -> anyhow::Result<Vec<Proc>> {
    let mut secs = vec![Vec::new(); cmds.len()];
    let mut cpu = vec![Vec::new(); cmds.len()];
    let mut rss = vec![0; cmds.len()];
    let mut faults = vec![Vec::new(); cmds.len()];
    let mut last = vec![Vec::new(); cmds.len()];
    let mut rounds = a.runs;
    let mut round = 0;
    while round <= rounds {
        for (k, make) in cmds.iter_mut().enumerate() {
            let p = time_proc(&mut make(), &tmp.join("stdout"))?;
            if round == 0 && k == 0 && a.runs >= 3 {
                // Decided from the warm-up run, before any timed one; `--runs 1` or 2 is a
                // quick look (the tests) and stays what it says.
                let want = (MIN_TIMED_S / p.secs.max(1e-3)).ceil() as u64;
                rounds = want.clamp(a.runs, a.runs * MAX_ROUNDS_X);
            }
            if round > 0 {
                secs[k].push(p.secs);
                cpu[k].push(p.cpu);
                rss[k] = rss[k].max(p.rss);
                faults[k].push(p.faults as f64);
                last[k] = p.stdout;
            }
        }
        round += 1;
    }
    Ok(secs
        .into_iter()
        .zip(cpu)
        .zip(rss)
        .zip(faults)
        .zip(last)
        .map(|((((s, c), rss), mut f), stdout)| Proc {
            secs: median(&mut s.clone()),
            cpu: median(&mut c.clone()),
            rss,
            faults: median(&mut f) as u64,
            stdout,
            all_secs: s,
            all_cpu: c,
        })
        .collect())
}

/// The median over rounds of `num`'s time over `den`'s in the same round: each ratio is
/// taken between two processes run one after the other, so a slow moment of the machine
/// that stretches both cancels in it (the ratio of the two medians does not pair them).
fn paired_ratio(num: &[f64], den: &[f64]) -> f64 {
    let mut r: Vec<f64> = num.iter().zip(den).map(|(n, d)| n / d.max(1e-9)).collect();
    median(&mut r)
}

#[derive(Serialize)]
struct Row {
    trace: String,
    case: String,
    packets: u64,
    trace_bytes: u64,
    /// catena whole process (spawn to exit), no output file.
    catena_s: f64,
    catena_mpps: f64,
    catena_gbps: f64,
    /// The same with `-o OUT.pcap`.
    catena_o_s: f64,
    /// catena whole process with `--copy` (every packet copied into a pool buffer as it
    /// is read, instead of processed in place from the mapped file), no output.
    catena_copy_s: f64,
    /// catena's own processing time (`seconds` in its summary), no output.
    catena_processing_s: f64,
    catena_peak_rss: u64,
    /// catena's and Click's minor page faults (medians), no output.
    catena_faults: u64,
    click_faults: Option<u64>,
    /// catena whole process, user + system CPU seconds (median), no output.
    catena_cpu_s: f64,
    packets_passed: u64,
    click_s: Option<f64>,
    /// Click whole process, user + system CPU seconds (median).
    click_cpu_s: Option<f64>,
    /// Timed rounds of this case (each runs every command once, interleaved).
    rounds: u64,
    /// Median over rounds of Click's wall time over catena's in the same round.
    click_ratio: Option<f64>,
    /// The same with user + system CPU time.
    click_cpu_ratio: Option<f64>,
    /// Every round's Click wall time over catena's, in round order.
    click_ratio_rounds: Vec<f64>,
    click_passed: Option<u64>,
    click_peak_rss: Option<u64>,
    /// Click's wire with ToDump, against catena's wire with -o.
    click_todump_s: Option<f64>,
    tcpdump_read_s: f64,
    tcpdump_copy_s: f64,
}

/// Writes the named trace to a pcap in `dir` (`merged` replayed `MERGED_LOOPS` times, so
/// that process start-up does not dominate) and returns its path. Done by child
/// processes (`catena gen`, `catena run --loops -o`), so this process never holds a
/// trace: a child's peak RSS would otherwise include the parent's pages it was forked
/// with.
fn trace_file(name: &str, a: &Args, dir: &Path) -> anyhow::Result<(String, PathBuf)> {
    const MERGED_LOOPS: u64 = 22;
    let me = std::env::current_exe()?;
    let p = dir.join(format!("{name}.pcap"));
    let mut c = Command::new(&me);
    let label = if let Ok(profile) = name.parse::<Profile>() {
        let n = ((GenOptions::profile(profile).count as f64 * a.scale) as usize).max(1);
        c.args(["gen", "--profile", name, "-n", &n.to_string(), "-o"])
            .arg(&p);
        name.to_string()
    } else if name == "merged" {
        // The wire passes every packet in order; the writer keeps capture timestamps.
        let chain = dir.join("copy.toml");
        std::fs::write(
            &chain,
            "[input]\nports = 2\n[[nf]]\nname = \"w\"\nkind = \"wire\"\n",
        )?;
        c.arg("run")
            .arg(&chain)
            .arg("-i")
            .arg(traces::merged_path());
        c.args(["--loops", &MERGED_LOOPS.to_string(), "--json", "-o"])
            .arg(&p);
        format!("merged x{MERGED_LOOPS}")
    } else {
        return Ok((name.to_string(), PathBuf::from(name)));
    };
    let st = c.stdout(Stdio::null()).status()?;
    if !st.success() {
        anyhow::bail!("writing the {name} trace failed: {c:?}");
    }
    Ok((label, p))
}

pub fn run(a: &Args) -> anyhow::Result<i32> {
    let me = std::env::current_exe()?;
    let tmp = a.out.join("e2e-tmp");
    std::fs::create_dir_all(&tmp)?;
    let click = click_bin();
    if click.is_none() {
        eprintln!(
            "note: no Click binary (build it: ../shared/peers/click/build.sh, or set CLICK); Click columns left empty"
        );
    }
    let mut rows = Vec::new();
    let mut table = Vec::new();
    let mut differ = Vec::new();
    for name in traces::names(&a.traces) {
        let (label, path) = trace_file(&name, a, &tmp)?;
        let trace_bytes = std::fs::metadata(&path)?.len();
        let out = tmp.join("out.pcap");
        // The file tool's floors, measured in the first case's group (the wire's).
        let mut floors: Option<(f64, f64)> = None;
        for (case, text, click_cfg) in cases() {
            if !a.only.is_empty() && !a.only.iter().any(|o| case.contains(o.as_str())) {
                continue;
            }
            let chain = tmp.join("chain.toml");
            std::fs::write(&chain, &text)?;
            let catena_run = |extra: &'static [&'static str], output: bool| {
                let (me, chain, path, out) = (me.clone(), chain.clone(), path.clone(), out.clone());
                Box::new(move || {
                    let mut c = Command::new(&me);
                    c.arg("run").arg(&chain).arg("-i").arg(&path).arg("--json");
                    c.args(extra);
                    if output {
                        c.arg("-o").arg(&out);
                    }
                    c
                }) as Box<dyn FnMut() -> Command>
            };
            let mut cmds = vec![
                catena_run(&[], false),
                catena_run(&[], true),
                catena_run(&["--copy"], false),
            ];
            let click_file = match (&click, click_cfg) {
                (Some(_), Some(ClickConfig::File(f))) => Some(click_dir().join("configs").join(f)),
                (Some(_), Some(ClickConfig::Text(t))) => {
                    let p = tmp.join("nf.click");
                    std::fs::write(&p, t)?;
                    Some(p)
                }
                _ => None,
            };
            let (bin, path2) = (click.clone(), path.clone());
            if let (Some(bin), Some(file)) = (bin.clone(), click_file.clone()) {
                cmds.push(Box::new(move || {
                    let mut c = Command::new(&bin);
                    // The switch has one counter per port; the others one `out`.
                    if case == "mac_switch" {
                        for o in 0..4 {
                            c.arg("-h").arg(format!("nf/o{o}.count"));
                        }
                    } else {
                        c.arg("-h").arg("nf/out.count");
                    }
                    c.arg(&file);
                    c.arg(format!("F={}", path2.display()));
                    c
                }));
            }
            let todump = click.is_some() && case == "wire";
            if let (true, Some(bin)) = (todump, bin) {
                let (path, out) = (path.clone(), out.clone());
                let dump = click_dir().join("configs/wire_todump.click");
                cmds.push(Box::new(move || {
                    let mut c = Command::new(&bin);
                    c.arg(&dump);
                    c.arg(format!("F={}", path.display()));
                    c.arg(format!("OUTF={}", out.display()));
                    c
                }));
            }
            let measure_floors = floors.is_none();
            if measure_floors {
                let (p1, p2, out) = (path.clone(), path.clone(), out.clone());
                cmds.push(Box::new(move || {
                    let mut c = Command::new("tcpdump");
                    c.args(["-r"]).arg(&p1).args(["-w", "/dev/null"]);
                    c
                }));
                cmds.push(Box::new(move || {
                    let mut c = Command::new("tcpdump");
                    c.args(["-r"]).arg(&p2).arg("-w").arg(&out);
                    c
                }));
            }
            let mut got = interleaved(a, &mut cmds, &tmp)?.into_iter();
            let (plain, with_o, copied) = (
                got.next().unwrap(),
                got.next().unwrap(),
                got.next().unwrap(),
            );
            let clicked = click_file.is_some().then(|| got.next().unwrap());
            let todump = todump.then(|| got.next().unwrap().secs);
            if measure_floors {
                floors = Some((got.next().unwrap().secs, got.next().unwrap().secs));
            }
            let (tcpdump_read, tcpdump_copy) = floors.unwrap_or_default();
            let v: serde_json::Value = serde_json::from_slice(&plain.stdout)?;
            let packets = v["packets_in"].as_u64().unwrap_or(0);
            let passed = v["packets_out"].as_u64().unwrap_or(0);
            let processing = v["seconds"].as_f64().unwrap_or(0.0);
            let (click_s, click_passed, click_rss) = match &clicked {
                // Each `-h H` prints "H:\nN\n" at exit; passed is their sum.
                Some(p) => (
                    Some(p.secs),
                    Some(
                        String::from_utf8_lossy(&p.stdout)
                            .lines()
                            .filter_map(|l| l.trim().parse::<u64>().ok())
                            .sum(),
                    ),
                    Some(p.rss),
                ),
                None => (None, None, None),
            };
            let mpps = |s: f64| packets as f64 / s.max(1e-9) / 1e6;
            let r = Row {
                trace: label.clone(),
                case: case.to_string(),
                packets,
                trace_bytes,
                catena_s: plain.secs,
                catena_mpps: mpps(plain.secs),
                catena_gbps: trace_bytes as f64 * 8.0 / plain.secs.max(1e-9) / 1e9,
                catena_o_s: with_o.secs,
                catena_copy_s: copied.secs,
                catena_processing_s: processing,
                catena_peak_rss: plain.rss.max(with_o.rss),
                catena_faults: plain.faults,
                click_faults: clicked.as_ref().map(|c| c.faults),
                catena_cpu_s: plain.cpu,
                packets_passed: passed,
                click_s,
                click_cpu_s: clicked.as_ref().map(|p| p.cpu),
                rounds: plain.all_secs.len() as u64,
                click_ratio: clicked
                    .as_ref()
                    .map(|c| paired_ratio(&c.all_secs, &plain.all_secs)),
                click_cpu_ratio: clicked
                    .as_ref()
                    .map(|c| paired_ratio(&c.all_cpu, &plain.all_cpu)),
                click_ratio_rounds: clicked.as_ref().map_or(Vec::new(), |c| {
                    c.all_secs
                        .iter()
                        .zip(&plain.all_secs)
                        .map(|(c, p)| c / p.max(1e-9))
                        .collect()
                }),
                click_passed,
                click_peak_rss: click_rss,
                click_todump_s: todump,
                tcpdump_read_s: tcpdump_read,
                tcpdump_copy_s: tcpdump_copy,
            };
            let opt = |v: Option<f64>| v.map_or("–".to_string(), |x| format!("{x:.2}"));
            table.push(vec![
                label.clone(),
                case.to_string(),
                format!("{:.2}", r.catena_mpps),
                format!("{:.2}", r.catena_gbps),
                opt(click_s.map(mpps)),
                opt(r.click_ratio),
                opt(r.click_cpu_ratio),
                // The spread of the per-round ratios: the lowest and highest round.
                match (
                    r.click_ratio_rounds.iter().copied().reduce(f64::min),
                    r.click_ratio_rounds.iter().copied().reduce(f64::max),
                ) {
                    (Some(lo), Some(hi)) => format!("{lo:.2}–{hi:.2}"),
                    _ => "–".into(),
                },
                r.rounds.to_string(),
                format!("{:.2}", mpps(with_o.secs)),
                format!("{:.2}", mpps(copied.secs)),
                opt(todump.map(mpps)),
                format!("{:.2}", mpps(tcpdump_read)),
                format!("{:.2}", plain.secs / tcpdump_read.max(1e-9)),
                format!("{:.2}", mpps(tcpdump_copy)),
                format!("{}", passed),
                click_passed.map_or("–".into(), |n: u64| n.to_string()),
                match click_passed {
                    Some(n) if n == passed => "yes".into(),
                    Some(_) if case == "mac_switch" => "no (by design)".into(),
                    Some(_) => "DIFFERS".into(),
                    None => "–".into(),
                },
                format!("{:.0}", r.catena_peak_rss as f64 / 1e6),
                format!(
                    "{} / {}",
                    r.catena_faults,
                    r.click_faults.map_or("–".into(), |f| f.to_string())
                ),
                format!("{:.0}", trace_bytes as f64 / 1e6),
                format!("{:.2}", mpps(processing)),
            ]);
            // The switches cannot pass the same packets (docs/e2e.md): catena forwards a
            // packet to its ingress port and counts a flood once, Click's EtherSwitch
            // drops the first and sends three copies of the second.
            if let Some(n) = click_passed.filter(|&n| n != passed && case != "mac_switch") {
                differ.push(format!(
                    "{label} / {case}: catena passed {passed}, Click {n}"
                ));
            }
            rows.push(r);
        }
    }
    let header = [
        "trace",
        "case",
        "whole Mpps",
        "whole Gbps",
        "Click whole Mpps",
        "× Click",
        "CPU × Click",
        "× Click range",
        "rounds",
        "-o Mpps",
        "--copy Mpps",
        "Click ToDump Mpps",
        "tcpdump -w /dev/null Mpps",
        "÷ tcpdump read",
        "tcpdump -w OUT Mpps",
        "passed",
        "Click passed",
        "same passed",
        "peak MB",
        "faults / Click",
        "trace MB",
        "processing Mpps",
    ];
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&rows)?)?;
    } else {
        outln!(
            "whole process, spawn to exit, medians of \"rounds\" interleaved runs (at least {}; more for short processes) (Mpps over the trace's packets); \"× Click\" is the median over rounds of Click's wall time over catena's in the same round, \"× Click range\" the lowest and highest round; \"CPU × Click\" the same with user+system time (load from elsewhere stretches it less than wall time); \"processing Mpps\" is catena's own `seconds` and is not comparable with the peers' columns",
            a.runs
        )?;
        print_table(&header, &table)?;
    }
    // Same work means the same packets passed; only the MAC switch differs by design
    // (docs/e2e.md), any other case means the configurations are not equal.
    for d in &differ {
        eprintln!("note: packets passed differ, not the same work: {d}");
    }
    write_results(a, "e2e", &header, &table, &rows)?;
    let _ = std::fs::remove_dir_all(&tmp);
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ratio_is_the_median_of_the_rounds_own_ratios() {
        // Rounds' ratios 3, 2.25 and 2: their median, not the medians' ratio (4 / 2).
        assert_eq!(paired_ratio(&[3.0, 9.0, 4.0], &[1.0, 4.0, 2.0]), 2.25);
        assert_eq!(paired_ratio(&[3.0, 10.0], &[1.0, 4.0]), 2.75);
        assert_eq!(paired_ratio(&[], &[]), 0.0);
    }
}
