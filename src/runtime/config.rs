//! The chain file: TOML naming the input, the NFs with their parameters, the sinks and the
//! edges between them.

use std::path::{Path, PathBuf};

use serde::Deserialize;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: {msg}")]
    Read { path: String, msg: String },
    #[error("{path}:{line}:{col}: {msg}")]
    Syntax {
        path: String,
        line: usize,
        col: usize,
        msg: String,
    },
    #[error("{path}: {msg}")]
    Invalid { path: String, msg: String },
}

/// `fastpath = true | false | "auto"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FastSetting {
    Off,
    On,
    Auto,
}

impl<'de> Deserialize<'de> for FastSetting {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = FastSetting;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("true, false or \"auto\"")
            }
            fn visit_bool<E: serde::de::Error>(self, b: bool) -> Result<FastSetting, E> {
                Ok(if b { FastSetting::On } else { FastSetting::Off })
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<FastSetting, E> {
                match s {
                    "auto" => Ok(FastSetting::Auto),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Str(s), &self)),
                }
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChainConfig {
    /// Shown in summaries; defaults to the file's stem.
    pub name: Option<String>,
    pub description: Option<String>,
    /// `"a -> b"`, `"a:output -> b"`, or a path `"in -> fw -> out"`. Without it the NFs
    /// form a line in file order: `in -> nf1 -> … -> out`.
    pub edges: Option<Vec<String>>,
    /// Header-action consolidation (FastPath): `fastpath = true`, or `"auto"` to let the
    /// run switch it per chain by measured cost.
    pub fastpath: Option<FastSetting>,
    /// Most FastPath entries (default 16384, at most 4,194,304).
    pub fastpath_entries: Option<u32>,
    /// Idle seconds (capture time) after which a FastPath entry ends; 0 = never (default 60).
    pub fastpath_timeout: Option<u32>,
    /// Which packet of a flow FastPath records, 1-255 (default 2: one-packet flows are
    /// never recorded; 1 records the first, as the FastPath report does).
    pub fastpath_record: Option<u32>,
    /// Run-to-completion workers the input is sharded over by a symmetric flow hash
    /// (default 1); `--workers` overrides it.
    pub workers: Option<u32>,
    /// microNF stages: the NFs each thread runs, in walk order, e.g.
    /// `[["fw", "nat"], ["lb"]]`; threads are joined by SPSC rings (see `stage.rs`).
    pub stages: Option<Vec<Vec<String>>>,
    /// Packets each ring between stages holds (default 1024, at least a batch).
    pub ring: Option<u32>,
    /// Parallel NFs: consecutive NFs whose profiles allow it run on two threads
    /// (`parallel.rs`, `join.rs`); default false.
    pub parallel: Option<bool>,
    /// PA-Flow between in-process stages: every ring between stages carries the packets
    /// of each batch packed into aggregated frames, unpacked by the next stage
    /// (docs/paflow.md).
    pub aggregate_stages: Option<bool>,
    /// With `aggregate_stages`: the last stage's NFs work on the packets as views into
    /// the aggregated frames (PA-Flow's "NFs on aggregated frames"), copied only if
    /// changed.
    pub aggregate_views: Option<bool>,
    /// Pipelined prefetching: the first cache line of the first k packets of a batch,
    /// then packet i + k while NFs work on i (0 = off, the default).
    pub prefetch: Option<u32>,
    #[serde(default)]
    pub input: InputConfig,
    #[serde(default, rename = "nf")]
    pub nfs: Vec<toml::Table>,
    #[serde(default, rename = "sink")]
    pub sinks: Vec<SinkConfig>,
    /// Live and file ports, numbered in file order (virtual port 0 is the first table).
    #[serde(default, rename = "port")]
    pub ports: Vec<PortConfig>,
    /// Where the file was read from: relative paths in it are taken from its folder.
    #[serde(skip)]
    pub dir: PathBuf,
    /// Ceiling on what the chain's NFs may allocate (`--max-memory`); None: the default,
    /// half the machine's RAM ([`super::limits::default_max_memory`]).
    #[serde(skip)]
    pub max_memory: Option<u64>,
    #[serde(skip)]
    pub path: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputConfig {
    /// Default trace when `--input` is not given (relative to the chain file).
    pub trace: Option<String>,
    /// Number of virtual ports; each packet's ingress port is drawn among them.
    pub ports: Option<u16>,
    /// Seed for the ingress port draw.
    pub seed: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinkConfig {
    pub name: String,
    /// pcap file to write (relative to the chain file); `--output` sets it for `out`.
    pub path: Option<String>,
}

/// One `[[port]]` table.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortConfig {
    pub name: String,
    /// `af_packet`, `af_xdp`, `pcap`.
    pub kind: String,
    /// af_packet, af_xdp: the interface.
    pub iface: Option<String>,
    /// af_xdp: the interface queue the socket serves (default 0).
    pub queue: Option<u32>,
    /// af_packet: join this fanout group (flows spread by hash among its sockets).
    pub fanout: Option<u16>,
    /// af_packet: how frames leave, `sendmmsg` (default) or `ring` (TPACKET TX ring).
    pub tx: Option<String>,
    /// af_packet, af_xdp: how frames arrive, `view` (default: read in place in the
    /// kernel's ring or UMEM, copied only when an NF writes) or `copy`.
    pub rx: Option<String>,
    /// af_packet: promiscuous mode (default true).
    pub promisc: Option<bool>,
    /// pcap: a capture replayed into the chain on this port (relative to the chain file).
    pub path: Option<String>,
    /// pcap: a file that frames sent out of this port are written to.
    pub write: Option<String>,
    /// pcap: replay pace, `N pps`, `N Mbps`, `N Gbps` or `top` (default; `--rate` overrides).
    pub rate: Option<String>,
    /// PA-Flow: pack the frames of one batch sent out of this port into aggregated
    /// frames, and unpack aggregated frames received on it (docs/paflow.md). Both ends
    /// of a link set it.
    pub aggregate: Option<bool>,
    /// Largest aggregated frame in bytes, without FCS (default 9000, 164-65535); an
    /// af_packet port's interface MTU must allow it.
    pub aggregate_size: Option<u32>,
    /// PA-Flow's NFs on aggregated frames: the packets of a received aggregate reach
    /// the NFs as views into the frame (copied only when an NF changes one), not
    /// copied out. Needs `aggregate = true` (docs/paflow.md).
    pub aggregate_views: Option<bool>,
}

pub const DEFAULT_PORTS: u16 = 5;
pub const DEFAULT_SEED: u64 = 1;

impl ChainConfig {
    pub fn load(path: &Path) -> Result<ChainConfig, ConfigError> {
        let p = path.display().to_string();
        let text = crate::io::text_file::read_text(path, crate::io::text_file::MAX_TEXT_FILE)
            .map_err(|e| ConfigError::Read {
                path: p.clone(),
                msg: e.to_string(),
            })?;
        let mut c = ChainConfig::parse(&text, &p)?;
        c.dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Ok(c)
    }

    pub fn parse(text: &str, path: &str) -> Result<ChainConfig, ConfigError> {
        let mut c: ChainConfig = toml::from_str(text).map_err(|e| {
            let (line, col) = e.span().map(|s| line_col(text, s.start)).unwrap_or((1, 1));
            ConfigError::Syntax {
                path: path.to_string(),
                line,
                col,
                msg: e.message().replace('\n', " ").trim().to_string(),
            }
        })?;
        c.path = path.to_string();
        if c.name.is_none() {
            c.name = Path::new(path)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned());
        }
        Ok(c)
    }

    pub fn invalid(&self, msg: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            path: self.path.clone(),
            msg: msg.into(),
        }
    }

    /// A path from the file, taken relative to the file's folder.
    pub fn resolve(&self, p: &str) -> PathBuf {
        let pb = PathBuf::from(p);
        if pb.is_absolute() {
            pb
        } else {
            self.dir.join(pb)
        }
    }
}

fn line_col(text: &str, at: usize) -> (usize, usize) {
    let before = &text[..at.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, col)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syntax_errors_name_line_and_column() {
        let e = ChainConfig::parse("[input]\nports = \"five\"\n", "x.toml").unwrap_err();
        let s = e.to_string();
        assert!(s.starts_with("x.toml:2:9: "), "{s}");
        assert!(!s.contains('\n'));
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let e = ChainConfig::parse("[input]\nport = 5\n", "x.toml").unwrap_err();
        assert!(e.to_string().contains("unknown field `port`"), "{e}");
    }
}
