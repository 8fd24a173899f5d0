//! The traces benchmarks run on: the generated thesis-shaped profiles and real captures.

use std::path::PathBuf;

use catena::io::gen::{generate, GenOptions, Profile};
use catena::io::Trace;

pub const DEFAULT: &[&str] = &["smallflows", "bigflows", "4sics", "merged"];

/// The merged nDPI trace, found beside the repository as in CI.
pub fn merged_path() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.join("../shared/datasets/bench/ndpi-ether-merged.pcap")
}

/// Loads a named trace: a generator profile (scaled), `merged`, or a pcap path.
pub fn load(name: &str, scale: f64) -> anyhow::Result<Trace> {
    if let Ok(p) = name.parse::<Profile>() {
        let mut o = GenOptions::profile(p);
        o.count = ((o.count as f64 * scale) as usize).max(1);
        return generate(&o).map_err(|e| anyhow::anyhow!("generating {name}: {e}"));
    }
    let path = if name == "merged" {
        merged_path()
    } else {
        PathBuf::from(name)
    };
    let t = Trace::open(&path)?;
    if let Some(e) = t.error() {
        anyhow::bail!("{e}");
    }
    Ok(t)
}

pub fn names(requested: &[String]) -> Vec<String> {
    if requested.is_empty() {
        DEFAULT.iter().map(|s| s.to_string()).collect()
    } else {
        requested.to_vec()
    }
}
