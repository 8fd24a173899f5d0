//! Shared by the FastPath equivalence tests (tests/fastpath.rs, tests/fastpath_auto.rs):
//! one run of a chain of lettered NFs over a trace, and what is compared of it.

use std::path::Path;

use catena::io::Trace;
use catena::runtime::control::Scheduled;
use catena::runtime::{Chain, NoProgress, RunOptions, Runner, Summary};

/// What a run produced: its summary, the output pcap and each flow monitor's records.
pub struct Outcome {
    pub summary: Summary,
    pub pcap: Vec<u8>,
    pub records: Vec<Vec<u8>>,
}

/// Runs chain `c` (built from the letters of `chain`; its flow monitors, letter 'O' at
/// position i, write `o{i}-{tag}.jsonl` in `dir`) over `trace` with the control commands
/// of `schedule`, after `hook` has had the runner (test hooks such as forced switches).
pub fn run_chain(
    c: Chain,
    chain: &str,
    trace: &Trace,
    hook: impl FnOnce(&mut Runner),
    schedule: &[Scheduled],
    dir: &Path,
    tag: &str,
) -> Outcome {
    let mut r = Runner::new(c, trace.max_packet_len());
    hook(&mut r);
    let out = dir.join(format!("out-{tag}.pcap"));
    let opts = RunOptions {
        outputs: vec![("out".into(), out.clone())],
        schedule: schedule.to_vec(),
        ..Default::default()
    };
    let summary = r.run(trace, &opts, &mut NoProgress).expect("run");
    let records = chain
        .chars()
        .enumerate()
        .filter(|(_, k)| *k == 'O')
        .map(|(i, _)| std::fs::read(dir.join(format!("o{i}-{tag}.jsonl"))).unwrap_or_default())
        .collect();
    Outcome {
        summary,
        pcap: std::fs::read(&out).expect("output"),
        records,
    }
}
