//! Live changes while traffic runs. Commands reach the worker through a channel that it
//! polls once per batch (an atomic load when empty: no lock or system call per packet)
//! and are applied between batches, so each packet sees one consistent state.
//!
//! Operators send lines `NF COMMAND…` to a Unix socket (`catena run --control PATH`,
//! `catena ctl PATH NF COMMAND…`); tests and scripts schedule commands at a packet index
//! (`--change "INDEX NF COMMAND…"`) for exactly reproducible runs.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread::JoinHandle;

/// One command for one NF, with where to send the reply.
pub struct Command {
    pub nf: String,
    pub cmd: String,
    pub reply: Option<Sender<Result<String, String>>>,
}

/// A command to apply just before the packet with this index (0-based, counting across
/// replay loops) enters the chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scheduled {
    pub at: u64,
    pub nf: String,
    pub cmd: String,
}

impl std::str::FromStr for Scheduled {
    type Err = String;
    /// `INDEX NF COMMAND…`, e.g. `5000 acl rules allow tcp port 22`.
    fn from_str(s: &str) -> Result<Scheduled, String> {
        let mut it = s.trim().splitn(3, char::is_whitespace);
        let (at, nf, cmd) = (it.next(), it.next(), it.next());
        match (at.map(str::parse::<u64>), nf, cmd) {
            (Some(Ok(at)), Some(nf), Some(cmd)) if !cmd.trim().is_empty() => Ok(Scheduled {
                at,
                nf: nf.to_string(),
                cmd: cmd.trim().to_string(),
            }),
            _ => Err(format!(
                "`{s}`: write a change as `PACKET_INDEX NF COMMAND…`"
            )),
        }
    }
}

/// The worker's end: a receiver it drains between batches.
pub struct ControlPort {
    pub(crate) rx: Receiver<Command>,
}

/// A Unix-socket server that turns lines into commands. It stops when the socket file is
/// removed at drop or the worker hangs up.
pub struct ControlServer {
    path: PathBuf,
    _thread: JoinHandle<()>,
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A channel pair: the sender goes to whoever issues commands, the port to the runner.
pub fn channel_pair() -> (Sender<Command>, ControlPort) {
    let (tx, rx) = channel();
    (tx, ControlPort { rx })
}

/// Listens on `path` (replacing a stale socket file). Each connection sends lines
/// `NF COMMAND…` and gets one reply line per command: `ok REPLY` or `error WHY`.
pub fn serve(path: &Path) -> std::io::Result<(ControlServer, ControlPort)> {
    if path.exists() {
        std::fs::remove_file(path)?;
    }
    let listener = UnixListener::bind(path)?;
    let (tx, port) = channel_pair();
    let thread = std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let tx = tx.clone();
            std::thread::spawn(move || handle(conn, tx));
        }
    });
    Ok((
        ControlServer {
            path: path.to_path_buf(),
            _thread: thread,
        },
        port,
    ))
}

fn handle(conn: UnixStream, tx: Sender<Command>) {
    let Ok(mut out) = conn.try_clone() else {
        return;
    };
    for line in BufReader::new(conn).lines() {
        let Ok(line) = line else { return };
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let reply = match line.split_once(char::is_whitespace) {
            None => Err(format!("`{line}`: write `NF COMMAND…`")),
            Some((nf, cmd)) => {
                let (rtx, rrx) = channel();
                let sent = tx.send(Command {
                    nf: nf.to_string(),
                    cmd: cmd.trim().to_string(),
                    reply: Some(rtx),
                });
                match sent {
                    Err(_) => Err("the run has ended".to_string()),
                    Ok(()) => rrx
                        .recv()
                        .unwrap_or_else(|_| Err("the run has ended".to_string())),
                }
            }
        };
        let text = match reply {
            Ok(r) => format!("ok {}\n", r.replace('\n', " ")),
            Err(e) => format!("error {}\n", e.replace('\n', " ")),
        };
        if out.write_all(text.as_bytes()).is_err() {
            return;
        }
    }
}

/// Sends one command to a running `catena run --control PATH` and returns its reply.
pub fn send(path: &Path, nf: &str, cmd: &str) -> std::io::Result<Result<String, String>> {
    let mut s = UnixStream::connect(path)?;
    writeln!(s, "{nf} {cmd}")?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line)?;
    let line = line.trim_end();
    Ok(match line.split_once(' ') {
        Some(("ok", r)) => Ok(r.to_string()),
        _ if line == "ok" => Ok(String::new()),
        Some(("error", e)) => Err(e.to_string()),
        _ => Err(format!("unexpected reply `{line}`")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheduled_changes_parse() {
        let s: Scheduled = "100 acl rules allow tcp port 22".parse().unwrap();
        assert_eq!(
            s,
            Scheduled {
                at: 100,
                nf: "acl".into(),
                cmd: "rules allow tcp port 22".into()
            }
        );
        assert!("x acl cmd".parse::<Scheduled>().is_err());
        assert!("5 acl".parse::<Scheduled>().is_err());
    }
}
