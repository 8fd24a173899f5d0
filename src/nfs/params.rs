//! Reading an NF's parameters from its config table, strictly: wrong types, bad values
//! and unknown keys are errors naming the NF and the key.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// One documented parameter, listed by `catena nfs`.
#[derive(Clone, Copy, Debug)]
pub struct ParamDoc {
    pub name: &'static str,
    pub ty: &'static str,
    pub default: &'static str,
    pub doc: &'static str,
}

#[derive(Debug, thiserror::Error)]
#[error("nf `{nf}`: {msg}")]
pub struct ParamError {
    pub nf: String,
    pub msg: String,
}

pub struct Params<'a> {
    nf: &'a str,
    table: &'a toml::Table,
    used: BTreeSet<&'a str>,
    /// Folder that relative file parameters are taken from (the chain file's).
    dir: &'a Path,
}

impl<'a> Params<'a> {
    /// `table` holds the NF's keys other than `name` and `kind`.
    pub fn new(nf: &'a str, table: &'a toml::Table) -> Params<'a> {
        Params {
            nf,
            table,
            used: BTreeSet::new(),
            dir: Path::new(""),
        }
    }

    /// Takes relative file parameters from `dir` (the chain file's folder), as the
    /// input trace is.
    pub fn in_dir(mut self, dir: &'a Path) -> Params<'a> {
        self.dir = dir;
        self
    }

    /// The folder relative file parameters are taken from (for nested parameter tables).
    pub fn dir(&self) -> &'a Path {
        self.dir
    }

    /// A file path, if present, taken relative to the chain file's folder.
    pub fn path(&mut self, key: &'a str) -> Result<Option<PathBuf>, ParamError> {
        match self.table_str(key)? {
            None => Ok(None),
            Some("") => Err(self.err(format!("`{key}` must name a file"))),
            Some(s) => Ok(Some(self.dir.join(s))),
        }
    }

    /// The keys the chain file gives, for NFs whose parameters are declared at run time
    /// (a pipeline program's `param`s).
    pub fn keys(&self) -> impl Iterator<Item = &'a str> {
        self.table.keys().map(|k| k.as_str())
    }

    pub fn err(&self, msg: impl Into<String>) -> ParamError {
        ParamError {
            nf: self.nf.to_string(),
            msg: msg.into(),
        }
    }

    fn raw(&mut self, key: &'a str) -> Option<&'a toml::Value> {
        self.used.insert(key);
        self.table.get(key)
    }

    /// The raw value, if present, for structured parameters (lists of tables).
    pub fn value(&mut self, key: &'a str) -> Option<&'a toml::Value> {
        self.raw(key)
    }

    /// An integer in `lo..=hi`, or `default` when absent.
    pub fn int(&mut self, key: &'a str, default: i64, lo: i64, hi: i64) -> Result<i64, ParamError> {
        match self.raw(key) {
            None => Ok(default),
            Some(toml::Value::Integer(v)) if (lo..=hi).contains(v) => Ok(*v),
            Some(toml::Value::Integer(v)) => {
                Err(self.err(format!("`{key}` = {v} is out of range {lo}..={hi}")))
            }
            Some(v) => Err(self.err(format!("`{key}` must be an integer, not {}", v.type_str()))),
        }
    }

    /// A duration in seconds (integer or float, ≥ 0) as nanoseconds; 0 means "never".
    pub fn seconds_ns(&mut self, key: &'a str, default_ns: u64) -> Result<u64, ParamError> {
        let s = match self.raw(key) {
            None => return Ok(default_ns),
            Some(toml::Value::Integer(v)) => *v as f64,
            Some(toml::Value::Float(v)) => *v,
            Some(v) => {
                return Err(self.err(format!(
                    "`{key}` must be a number of seconds, not {}",
                    v.type_str()
                )))
            }
        };
        if !(0.0..=1e9).contains(&s) {
            return Err(self.err(format!(
                "`{key}` = {s} seconds is out of range 0..=1000000000"
            )));
        }
        Ok((s * 1e9) as u64)
    }

    /// A string, if present.
    pub fn table_str(&mut self, key: &'a str) -> Result<Option<&'a str>, ParamError> {
        match self.raw(key) {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(Some(s.as_str())),
            Some(v) => Err(self.err(format!("`{key}` must be a string, not {}", v.type_str()))),
        }
    }

    /// A list of TCP/UDP ports.
    pub fn ports(&mut self, key: &'a str, default: &[u16]) -> Result<Vec<u16>, ParamError> {
        let Some(v) = self.raw(key) else {
            return Ok(default.to_vec());
        };
        let arr = v
            .as_array()
            .ok_or_else(|| self.err(format!("`{key}` must be a list of ports, e.g. [80, 443]")))?;
        arr.iter()
            .map(|p| match p.as_integer() {
                Some(n) if (0..=65535).contains(&n) => Ok(n as u16),
                Some(n) => Err(self.err(format!("`{key}`: port {n} is out of range 0..=65535"))),
                None => Err(self.err(format!("`{key}`: {p} is not a port number"))),
            })
            .collect()
    }

    /// A list of strings, if present (e.g. ACL rules).
    pub fn str_list(&mut self, key: &'a str) -> Result<Option<Vec<&'a str>>, ParamError> {
        let Some(v) = self.raw(key) else {
            return Ok(None);
        };
        let arr = v
            .as_array()
            .ok_or_else(|| self.err(format!("`{key}` must be a list of strings")))?;
        arr.iter()
            .enumerate()
            .map(|(i, s)| {
                s.as_str()
                    .ok_or_else(|| self.err(format!("`{key}`: item {} is not a string", i + 1)))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    /// Call last: any key not read by the NF is an error (a typo must not pass silently).
    pub fn finish(self, docs: &[ParamDoc]) -> Result<(), ParamError> {
        for k in self.table.keys() {
            if !self.used.contains(k.as_str()) {
                let known: Vec<&str> = docs.iter().map(|d| d.name).collect();
                let known = if known.is_empty() {
                    "it takes no parameters".to_string()
                } else {
                    format!("known: {}", known.join(", "))
                };
                return Err(self.err(format!("unknown parameter `{k}` ({known})")));
            }
        }
        Ok(())
    }
}
