//! Reloading the chain file of a running chain (SIGHUP, `catena ctl SOCKET reload`):
//! the new file is read and fully checked (its NFs are built, so every parameter is
//! validated), its shape compared with the running chain's (nodes, kinds, edges, ports,
//! sinks, FastPath), and the changed NF parameters turned into the NFs' own live
//! commands, which the worker applies between batches like any other. A change of shape,
//! or of a parameter no command can change, is refused with one line and the old chain
//! keeps running; so is a bad file.
//!
//! A reload makes the running NFs equal the file: an NF whose parameters were changed
//! live since (`catena ctl`, `POST /nf/NAME`) gets the file's parameters back even when
//! the file did not change, so a live change never silently outlives a reload.

use std::path::{Path, PathBuf};

use super::chain::{Chain, NodeKind};
use super::config::ChainConfig;

/// What the running chain was built from.
pub struct Base {
    path: PathBuf,
    shape: String,
    nfs: Vec<toml::Table>,
    /// NFs whose reloadable parameters were changed by a live command since the file
    /// was last applied.
    live: std::collections::BTreeSet<String>,
}

impl Base {
    pub fn new(path: &Path, cfg: &ChainConfig, chain: &Chain) -> Base {
        Base {
            path: path.to_path_buf(),
            shape: shape(chain),
            nfs: cfg.nfs.clone(),
            live: Default::default(),
        }
    }

    /// Notes that `cmd` was applied to NF `nf` outside a reload: when it changes a
    /// parameter a reload sets, the next reload sets it back to the file's.
    pub fn changed_live(&mut self, nf: &str, cmd: &str) {
        let verb = cmd.split_whitespace().next().unwrap_or("");
        let kind = self
            .nfs
            .iter()
            .find(|t| t.get("name").and_then(|v| v.as_str()) == Some(nf))
            .and_then(|t| t.get("kind").and_then(|v| v.as_str()));
        if kind.is_some_and(|k| param_command(k) == Some(verb)) {
            self.live.insert(nf.to_string());
        }
    }

    /// Reads the file again and returns the commands that bring the running NFs to it
    /// (`(nf, command)`), or why it cannot. On success the base becomes the new file.
    pub fn plan(&mut self) -> Result<Vec<(String, String)>, String> {
        let cfg = ChainConfig::load(&self.path).map_err(|e| e.to_string())?;
        let chain = Chain::from_config(&cfg).map_err(|e| e.to_string())?;
        let new_shape = shape(&chain);
        if new_shape != self.shape {
            let (a, b) = first_difference(&self.shape, &new_shape);
            return Err(format!(
                "the chain's shape changed (`{a}` became `{b}`): restart catena to change nodes, edges, ports or sinks"
            ));
        }
        let mut cmds = Vec::new();
        for (old, new) in self.nfs.iter().zip(&cfg.nfs) {
            let name = new.get("name").and_then(|v| v.as_str()).unwrap_or("");
            let kind = new.get("kind").and_then(|v| v.as_str()).unwrap_or("");
            let keys: std::collections::BTreeSet<&String> = old.keys().chain(new.keys()).collect();
            let changed: Vec<&str> = keys
                .into_iter()
                .filter(|k| old.get(*k) != new.get(*k))
                .map(String::as_str)
                .collect();
            if changed.is_empty() && !self.live.contains(name) {
                continue;
            }
            cmds.push((name.to_string(), command(kind, name, new, &changed)?));
        }
        self.nfs = cfg.nfs;
        self.live.clear();
        Ok(cmds)
    }
}

/// Nodes with kinds and edges, ports and FastPath: what a reload may not change.
fn shape(chain: &Chain) -> String {
    let mut s = Vec::new();
    for n in &chain.nodes {
        let next: Vec<&str> = n
            .next
            .iter()
            .map(|&t| chain.nodes[t].name.as_str())
            .collect();
        let extra = match &n.kind {
            NodeKind::Sink { path } => format!(" -> {path:?}"),
            _ => String::new(),
        };
        s.push(format!(
            "{} {} [{}]{extra}",
            n.name,
            n.kind_name(),
            next.join(",")
        ));
    }
    for p in &chain.port_specs {
        s.push(format!("port {}: {}", p.name, p.describe()));
    }
    s.push(format!("fastpath {}", chain.fastpath.is_some()));
    s.join("\n")
}

fn first_difference<'a>(a: &'a str, b: &'a str) -> (&'a str, &'a str) {
    let (mut x, mut y) = (a.lines(), b.lines());
    loop {
        match (x.next(), y.next()) {
            (Some(p), Some(q)) if p == q => continue,
            (p, q) => return (p.unwrap_or("(nothing)"), q.unwrap_or("(nothing)")),
        }
    }
}

/// The command that sets the reloadable parameters of an NF of `kind`, if it has one.
fn param_command(kind: &str) -> Option<&'static str> {
    match kind {
        "firewall" => Some("allow_ports"),
        "ip_filter" => Some("rules"),
        "nat" => Some("pool"),
        "maglev" => Some("backends"),
        _ => None,
    }
}

/// The NF command that applies `changed` parameters of NF `name` of `kind`.
fn command(kind: &str, name: &str, t: &toml::Table, changed: &[&str]) -> Result<String, String> {
    let fixed = |p: &str| {
        format!("parameter `{p}` of `{name}` ({kind}) cannot change while running: restart catena")
    };
    let refuse = |p: &str| Err(fixed(p));
    let only = |allowed: &[&str]| -> Result<(), String> {
        match changed.iter().find(|c| !allowed.contains(c)) {
            Some(p) => Err(fixed(p)),
            None => Ok(()),
        }
    };
    let strs = |key: &str| -> Vec<String> {
        match t.get(key) {
            Some(toml::Value::Array(a)) => a
                .iter()
                .map(|v| match v {
                    toml::Value::String(s) => s.clone(),
                    v => v.to_string(),
                })
                .collect(),
            Some(toml::Value::String(s)) => vec![s.clone()],
            Some(v) => vec![v.to_string()],
            None => Vec::new(),
        }
    };
    match kind {
        "firewall" => {
            only(&["allow_ports"])?;
            let ports = strs("allow_ports");
            let ports = if t.contains_key("allow_ports") {
                ports
            } else {
                vec!["80".into(), "443".into()]
            };
            Ok(format!("allow_ports {}", ports.join(" ")))
        }
        "ip_filter" => {
            only(&["rules"])?;
            if t.contains_key("rules_file") {
                if changed.is_empty() {
                    return Err(format!(
                        "`{name}` was changed live and its rules come from `rules_file`: restart catena to return to the file"
                    ));
                }
                return refuse("rules");
            }
            Ok(format!("rules {}", strs("rules").join("; ")))
        }
        "nat" => {
            only(&["public", "ports"])?;
            let public = t
                .get("public")
                .and_then(|v| v.as_str())
                .unwrap_or("198.51.100.1");
            let ports = t
                .get("ports")
                .and_then(|v| v.as_str())
                .unwrap_or("1024-65535");
            let addrs: Vec<&str> = public.split([',', ' ']).filter(|s| !s.is_empty()).collect();
            Ok(format!("pool {} {ports}", addrs.join(",")))
        }
        "maglev" => {
            only(&["backends"])?;
            let Some(toml::Value::Array(list)) = t.get("backends") else {
                return refuse("backends");
            };
            let mut words = Vec::new();
            for b in list {
                let Some(b) = b.as_table() else {
                    return refuse("backends");
                };
                if b.contains_key("name") {
                    return Err(format!(
                        "backends of `{name}` with a `name` cannot change while running: restart catena"
                    ));
                }
                let addr = b.get("addr").and_then(|v| v.as_str()).unwrap_or("");
                let mut w = if addr.contains(':') {
                    format!("[{addr}]")
                } else {
                    addr.to_string()
                };
                if let Some(weight) = b.get("weight").and_then(|v| v.as_integer()) {
                    w.push_str(&format!(":{weight}"));
                }
                if let Some(mac) = b.get("mac").and_then(|v| v.as_str()) {
                    w.push_str(&format!("@{mac}"));
                }
                words.push(w);
            }
            Ok(format!("backends {}", words.join(" ")))
        }
        _ => refuse(changed[0]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base(dir: &Path, text: &str) -> Base {
        let p = dir.join("c.toml");
        std::fs::write(&p, text).unwrap();
        let cfg = ChainConfig::load(&p).unwrap();
        let chain = Chain::from_config(&cfg).unwrap();
        Base::new(&p, &cfg, &chain)
    }

    const CHAIN: &str = "[input]\nports = 2\n\n[[nf]]\nname = \"fw\"\nkind = \"firewall\"\nallow_ports = [80]\n\n[[nf]]\nname = \"lb\"\nkind = \"maglev\"\nvip = \"10.0.0.1\"\nbackends = [{ addr = \"10.1.0.1\" }]\n";

    #[test]
    fn changed_parameters_become_commands() {
        let d = tempfile::tempdir().unwrap();
        let mut b = base(d.path(), CHAIN);
        assert_eq!(b.plan(), Ok(vec![]));
        let new = CHAIN
            .replace("[80]", "[80, 8080]")
            .replace("{ addr = \"10.1.0.1\" }", "{ addr = \"10.1.0.1\", weight = 2 }, { addr = \"10.1.0.2\", mac = \"02:00:00:00:00:02\" }");
        std::fs::write(d.path().join("c.toml"), new).unwrap();
        assert_eq!(
            b.plan(),
            Ok(vec![
                ("fw".into(), "allow_ports 80 8080".into()),
                (
                    "lb".into(),
                    "backends 10.1.0.1:2 10.1.0.2@02:00:00:00:00:02".into()
                )
            ])
        );
        // The base moved on: the same file again changes nothing.
        assert_eq!(b.plan(), Ok(vec![]));
    }

    #[test]
    fn a_live_change_is_undone_by_reloading_the_same_file() {
        let d = tempfile::tempdir().unwrap();
        let mut b = base(d.path(), CHAIN);
        // Read-only or unknown commands, and NFs without reloadable parameters, do not count.
        b.changed_live("fw", "flush");
        b.changed_live("nobody", "allow_ports 22");
        assert_eq!(b.plan(), Ok(vec![]));
        b.changed_live("fw", "allow_ports 22");
        b.changed_live("lb", "backends 10.9.9.9");
        assert_eq!(
            b.plan(),
            Ok(vec![
                ("fw".into(), "allow_ports 80".into()),
                ("lb".into(), "backends 10.1.0.1".into())
            ])
        );
        assert_eq!(b.plan(), Ok(vec![]));
    }

    #[test]
    fn shape_and_fixed_parameters_are_refused_in_one_line() {
        let d = tempfile::tempdir().unwrap();
        let mut b = base(d.path(), CHAIN);
        let p = d.path().join("c.toml");
        std::fs::write(&p, CHAIN.replace("name = \"lb\"", "name = \"lb2\"")).unwrap();
        let e = b.plan().unwrap_err();
        assert!(
            e.starts_with(
                "the chain's shape changed (`fw firewall [lb]` became `fw firewall [lb2]`)"
            ),
            "{e}"
        );
        std::fs::write(&p, CHAIN.replace("[80]", "[80]\ndecode = \"full\"")).unwrap();
        assert_eq!(
            b.plan().unwrap_err(),
            "parameter `decode` of `fw` (firewall) cannot change while running: restart catena"
        );
        std::fs::write(&p, "[[nf]\n").unwrap();
        let e = b.plan().unwrap_err();
        assert!(e.contains("c.toml:1:") && !e.contains('\n'), "{e}");
    }
}
