//! The memory `catena check` prints for a chain bounds what a microbox's apps hold per
//! flow too (issue 14, point 9): the DPI's and the IDS's flow state (stream windows,
//! HTTP buffers, inflaters) grows with traffic, so the heap a run grows by is measured
//! here with a counting allocator and must stay within the chain's figure; and the IDS
//! holds at most `inspect_flows` flows' buffers, counting the flows it had to skip.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;

use catena::io::Trace;
use catena::runtime::{Chain, ChainConfig, NoProgress, RunOptions, Runner};
use common::*;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
/// One measurement at a time: the counters are the whole process's.
static ONE: Mutex<()> = Mutex::new(());

fn grew(n: usize) {
    let now = LIVE.fetch_add(n, Relaxed) + n;
    PEAK.fetch_max(now, Relaxed);
}

// SAFETY: every call is forwarded to the system allocator unchanged; only sizes are counted.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        grew(l.size());
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        grew(l.size());
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        if new >= l.size() {
            grew(new - l.size());
        } else {
            LIVE.fetch_sub(l.size() - new, Relaxed);
        }
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// A DPI and an IDS inspecting every flow of a capture full of HTTP, on a stack small
/// enough that the apps' flow state, not the stack's tables, is most of the memory.
fn chain(inspect_flows: Option<u32>) -> String {
    let rules = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/ids/bench.rules");
    let cap = inspect_flows.map_or(String::new(), |n| format!(", inspect_flows = {n}"));
    format!(
        r#"
[[nf]]
name = "mb"
kind = "microbox"
flows = 512
rings = 8
ring_bytes = 4096
timeout = 0
apps = [{{ kind = "dpi" }}, {{ kind = "ids", rules_file = "{rules}"{cap} }}]
"#
    )
}

/// (bytes the run's heap grew by at its peak, the chain's memory figure, the IDS's stats).
fn measure(text: &str) -> (usize, u64, Vec<(String, u64)>) {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let trace = Trace::open(&dataset("ndpi/pcap/1kxun.pcap")).expect("trace");
    let cfg = ChainConfig::parse(text, "test.toml").expect("config");
    let chain = Chain::from_config(&cfg).expect("chain");
    let figure = chain.memory(trace.max_packet_len()).total();
    let mut r = Runner::new(chain, trace.max_packet_len());
    let base = LIVE.load(Relaxed);
    PEAK.store(base, Relaxed);
    let s = r
        .run(&trace, &RunOptions::default(), &mut NoProgress)
        .expect("run");
    let peak = PEAK.load(Relaxed) - base;
    let stats = s.nfs[0].stats.clone();
    (peak, figure, stats)
}

fn stat(stats: &[(String, u64)], k: &str) -> u64 {
    stats
        .iter()
        .find(|(n, _)| n == k)
        .unwrap_or_else(|| panic!("no `{k}` in {stats:?}"))
        .1
}

#[test]
fn the_run_stays_within_the_figure_check_prints_with_app_flow_state() {
    let (peak, figure, stats) = measure(&chain(None));
    eprintln!("grew {peak} B at peak; figure {figure} B; {stats:?}");
    assert!(
        stat(&stats, "ids_flows_inspected") > 50,
        "the capture must make the IDS hold many flows"
    );
    assert!(
        peak as u64 <= figure,
        "the run grew by {peak} B, more than the {figure} B `check` says the chain allocates"
    );
}

#[test]
fn the_ids_holds_at_most_inspect_flows_and_counts_the_rest() {
    let (_, small, stats) = measure(&chain(Some(4)));
    let (_, large, _) = measure(&chain(Some(512)));
    eprintln!("figure {small} B at 4 flows, {large} B at 512; {stats:?}");
    assert!(stat(&stats, "ids_inspect_full") > 0, "{stats:?}");
    // Each inspected flow may hold two stream windows and two HTTP parsers' buffers.
    assert!(large - small >= 508 * 64 * 1024, "{small} vs {large}");
}

#[test]
fn an_inflater_holds_no_more_than_the_ids_counts_for_it() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let base = LIVE.load(Relaxed);
    let z = flate2::Decompress::new(false);
    let held = LIVE.load(Relaxed) - base;
    drop(z);
    assert!(held > 16 * 1024, "{held} B: not the inflater's state");
    assert!(held <= catena::nfs::ids::INFLATER_BYTES, "{held} B");
}
