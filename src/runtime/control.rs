//! Live changes while traffic runs. Commands reach the worker through a channel that it
//! polls once per batch (an atomic load when empty: no lock or system call per packet)
//! and are applied between batches, so each packet sees one consistent state.
//!
//! Operators send lines `NF COMMAND…` to a Unix socket (`catena run --control PATH`,
//! `catena ctl PATH NF COMMAND…`); tests and scripts schedule commands at a packet index
//! (`--change "INDEX NF COMMAND…"`) for exactly reproducible runs.
//!
//! Security model: whoever can connect to the socket may reconfigure the chain (rules,
//! pools, backends); there is no other authentication. So the socket is created mode 0600
//! (owner only) whatever the umask, appears at its path only once it accepts (it is made
//! ready in a private directory and then linked there), lives in a directory that not
//! every user may write to, and
//! `--control` never replaces anything but a stale socket its owner left behind. The
//! server's cost is bounded: lines of at most [`MAX_LINE`] bytes, at most
//! [`MAX_CONNECTIONS`] connections at once (one thread each, never more), and a
//! connection that sends no complete line for the idle time is closed.
//!
//! Costly commands (an `ip_filter` rule set of tens of thousands of rules) are parsed and
//! compiled on the connection's thread ([`crate::nfs::Nf::preparer`]), one at a time; the
//! worker only swaps the result in, and hands back what it replaced to be freed there.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::nfs::{Prepared, Preparer};

/// Longest command line the socket accepts (a rule set of ~40,000 short rules fits).
pub const MAX_LINE: usize = 4 << 20;
/// Connections served at once; more are told so and closed.
pub const MAX_CONNECTIONS: usize = 8;
/// Default time a connection may take to send a complete line.
pub const DEFAULT_IDLE: Duration = Duration::from_secs(30);

/// One command for one NF, with where to send the reply.
pub struct Command {
    pub nf: String,
    pub cmd: String,
    /// The command already parsed and compiled off the worker by the NF's preparer.
    pub prepared: Option<Prepared>,
    pub reply: Option<Sender<Reply>>,
}

/// The worker's answer to a [`Command`].
pub struct Reply {
    pub result: Result<String, String>,
    /// What the change replaced (an old classifier), freed by the receiver, not the worker.
    pub replaced: Option<Prepared>,
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

/// How the socket server bounds each connection.
#[derive(Clone, Copy, Debug)]
pub struct ServeOptions {
    /// Time a connection may take to send a complete line before it is closed.
    pub idle: Duration,
}

impl Default for ServeOptions {
    fn default() -> ServeOptions {
        ServeOptions { idle: DEFAULT_IDLE }
    }
}

/// A Unix-socket server that turns lines into commands. It stops when the socket file is
/// removed at drop or the worker hangs up.
pub struct ControlServer {
    path: PathBuf,
    /// The socket file's inode: only that file is removed at drop.
    ino: u64,
    _thread: JoinHandle<()>,
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        let ours = std::fs::symlink_metadata(&self.path)
            .is_ok_and(|m| m.file_type().is_socket() && m.ino() == self.ino);
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// A channel pair: the sender goes to whoever issues commands, the port to the runner.
pub fn channel_pair() -> (Sender<Command>, ControlPort) {
    let (tx, rx) = channel();
    (tx, ControlPort { rx })
}

fn refuse(msg: String) -> std::io::Error {
    std::io::Error::other(msg)
}

/// Checks that a socket may be created at `path`: its directory is not writable by every
/// user, and nothing is there but a stale socket of this user (removed). A live socket,
/// another user's, or any other file is refused.
fn make_room(path: &Path) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let dm =
        std::fs::metadata(dir).map_err(|e| refuse(format!("directory {}: {e}", dir.display())))?;
    if dm.permissions().mode() & 0o002 != 0 {
        return Err(refuse(format!(
            "directory {} is writable by every user: put the socket in a private directory (e.g. $XDG_RUNTIME_DIR)",
            dir.display()
        )));
    }
    let m = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
        Ok(m) => m,
    };
    if !m.file_type().is_socket() {
        return Err(refuse(
            "exists and is not a socket: remove it or choose another path".into(),
        ));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if m.uid() != me {
        return Err(refuse(format!(
            "is a socket of another user (uid {}): choose another path",
            m.uid()
        )));
    }
    match UnixStream::connect(path) {
        Ok(_) => Err(refuse(
            "a running process listens there: stop it or choose another path".into(),
        )),
        Err(e) if e.kind() == ErrorKind::ConnectionRefused => std::fs::remove_file(path),
        Err(e) => Err(refuse(format!(
            "is a socket that cannot be checked ({e}): remove it or choose another path"
        ))),
    }
}

/// A private directory beside the socket's path where the socket is made ready before it
/// appears at the path; it and what it holds are removed when dropped, on every error too.
struct Staging {
    dir: PathBuf,
    sock: PathBuf,
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.sock);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Makes a fresh directory of mode 0700 in `parent`, named so that concurrent runs (and
/// stale leftovers) never share one.
fn staging_in(parent: &Path) -> std::io::Result<Staging> {
    static SEQ: AtomicUsize = AtomicUsize::new(0);
    loop {
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let dir = parent.join(format!(".catena-ctl.{}.{n}", std::process::id()));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Err(e) if e.kind() == ErrorKind::AlreadyExists && n < 1000 => continue,
            Err(e) => return Err(refuse(format!("cannot create {}: {e}", dir.display()))),
            Ok(()) => {}
        }
        let staging = Staging {
            sock: dir.join("s"),
            dir,
        };
        // The umask may have taken the owner's bits too; it cannot have added any.
        std::fs::set_permissions(&staging.dir, std::fs::Permissions::from_mode(0o700))?;
        return Ok(staging);
    }
}

/// Binds a socket that appears at `path` already listening and of mode 0600, and returns
/// it with its inode. It is bound and listens in a private directory (no other user can
/// reach it there), gets its mode, and only then is linked to `path`, which fails rather
/// than replace anything that appeared there since [`make_room`]. No umask is changed:
/// that is process-wide, and other threads' files would get the socket's mode.
fn bind_private(path: &Path) -> std::io::Result<(UnixListener, u64)> {
    let parent = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let staging = staging_in(parent)?;
    let listener = UnixListener::bind(&staging.sock).map_err(|e| {
        if e.kind() == ErrorKind::InvalidInput {
            refuse(format!(
                "path too long for a Unix socket (it is bound first as {}, {} bytes; at most 107): choose a shorter path",
                staging.sock.display(),
                staging.sock.as_os_str().len()
            ))
        } else {
            e
        }
    })?;
    std::fs::set_permissions(&staging.sock, std::fs::Permissions::from_mode(0o600))?;
    let ino = std::fs::symlink_metadata(&staging.sock)?.ino();
    std::fs::hard_link(&staging.sock, path).map_err(|e| {
        if e.kind() == ErrorKind::AlreadyExists {
            refuse("appeared while the socket was being made: choose another path".into())
        } else {
            e
        }
    })?;
    Ok((listener, ino))
}

/// Listens on `path` (see the module's security model). Each connection sends lines
/// `NF COMMAND…` and gets one reply line per command: `ok REPLY` or `error WHY`.
/// `preparers` name the NFs whose commands are compiled before they reach the worker.
pub fn serve(
    path: &Path,
    opts: ServeOptions,
    preparers: HashMap<String, Preparer>,
) -> std::io::Result<(ControlServer, ControlPort)> {
    make_room(path)?;
    let (listener, ino) = bind_private(path)?;
    let (tx, port) = channel_pair();
    let shared = Arc::new(Shared {
        preparers,
        compiling: Mutex::new(()),
        open: AtomicUsize::new(0),
        idle: opts.idle,
    });
    let thread = std::thread::Builder::new()
        .name("control".into())
        .spawn(move || accept_loop(listener, tx, shared))?;
    Ok((
        ControlServer {
            path: path.to_path_buf(),
            ino,
            _thread: thread,
        },
        port,
    ))
}

/// What every connection's thread shares.
struct Shared {
    preparers: HashMap<String, Preparer>,
    /// One compilation at a time: memory stays that of one rule set.
    compiling: Mutex<()>,
    /// Connections being served.
    open: AtomicUsize,
    idle: Duration,
}

/// Decrements the count of open connections when a connection's thread ends.
struct Slot(Arc<Shared>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

fn accept_loop(listener: UnixListener, tx: Sender<Command>, shared: Arc<Shared>) {
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else { continue };
        let n = shared.open.fetch_add(1, Ordering::AcqRel);
        let slot = Slot(shared.clone());
        if n >= MAX_CONNECTIONS {
            // Best effort: the client may not be reading.
            let _ = conn.set_write_timeout(Some(Duration::from_millis(100)));
            let _ = writeln!(
                conn,
                "error busy: {MAX_CONNECTIONS} connections already open, try again"
            );
            continue;
        }
        let tx = tx.clone();
        // When no thread can be made, this one connection is closed; the server lives on.
        let _ = std::thread::Builder::new()
            .name("control-conn".into())
            .spawn(move || handle(conn, tx, slot));
    }
}

/// Reads one line of at most [`MAX_LINE`] bytes into `buf` (without the newline), giving
/// up at `deadline`. Ok(false) at the end of the stream.
fn read_line(
    r: &mut BufReader<UnixStream>,
    buf: &mut Vec<u8>,
    deadline: Instant,
) -> Result<bool, String> {
    buf.clear();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err("no complete line in time: connection closed".into());
        }
        r.get_ref()
            .set_read_timeout(Some(left))
            .map_err(|e| e.to_string())?;
        let chunk = match r.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err("no complete line in time: connection closed".into())
            }
            Err(e) => return Err(e.to_string()),
        };
        if chunk.is_empty() {
            return Ok(!buf.is_empty());
        }
        let (take, done) = match memchr::memchr(b'\n', chunk) {
            Some(i) => (i, true),
            None => (chunk.len(), false),
        };
        if buf.len() + take > MAX_LINE {
            return Err(format!(
                "line longer than {MAX_LINE} bytes: connection closed"
            ));
        }
        buf.extend_from_slice(&chunk[..take]);
        r.consume(take + usize::from(done));
        if done {
            return Ok(true);
        }
    }
}

fn handle(conn: UnixStream, tx: Sender<Command>, slot: Slot) {
    let shared = &slot.0;
    let Ok(mut out) = conn.try_clone() else {
        return;
    };
    // A client that does not read its replies cannot hold the thread either.
    let _ = out.set_write_timeout(Some(shared.idle));
    let mut r = BufReader::new(conn);
    let mut buf = Vec::new();
    loop {
        let line = match read_line(&mut r, &mut buf, Instant::now() + shared.idle) {
            Ok(true) => String::from_utf8_lossy(&buf),
            Ok(false) => return,
            Err(e) => {
                let _ = writeln!(out, "error {e}");
                return;
            }
        };
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let reply = match line.split_once(char::is_whitespace) {
            None => Err(format!("`{line}`: write `NF COMMAND…`")),
            Some((nf, cmd)) => submit(shared, &tx, nf, cmd.trim()),
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

/// Prepares (compiles) the command when its NF has a preparer, sends it to the worker and
/// waits for the reply; what the change replaced is freed here.
fn submit(shared: &Shared, tx: &Sender<Command>, nf: &str, cmd: &str) -> Result<String, String> {
    let prepared = match shared.preparers.get(nf) {
        Some(prepare) => {
            let _one = shared
                .compiling
                .lock()
                .unwrap_or_else(|poison| poison.into_inner());
            Some(prepare(cmd)?)
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
        return Err("the run has ended".to_string());
    }
    match rrx.recv() {
        Ok(Reply { result, replaced }) => {
            drop(replaced);
            result
        }
        Err(_) => Err("the run has ended".to_string()),
    }
}

/// Sends one command to a running `catena run --control PATH` and returns its reply,
/// giving up after `timeout` (connecting, sending and waiting for the reply together).
pub fn send(
    path: &Path,
    nf: &str,
    cmd: &str,
    timeout: Duration,
) -> std::io::Result<Result<String, String>> {
    if nf.contains(['\n', '\r']) || cmd.contains(['\n', '\r']) {
        return Err(std::io::Error::new(
            ErrorKind::InvalidInput,
            "a command is one line: remove the line breaks",
        ));
    }
    let line = format!("{nf} {cmd}\n");
    if line.len() > MAX_LINE {
        return Err(std::io::Error::new(
            ErrorKind::InvalidInput,
            format!("the command is longer than {MAX_LINE} bytes"),
        ));
    }
    // connect() itself blocks while the server's backlog is full, so the exchange runs on
    // a thread and the wait for it is what is bounded.
    let (rtx, rrx) = channel();
    let path = path.to_path_buf();
    std::thread::Builder::new()
        .name("ctl".into())
        .spawn(move || {
            let r = (|| -> std::io::Result<String> {
                let mut s = UnixStream::connect(&path)?;
                s.set_read_timeout(Some(timeout))?;
                s.set_write_timeout(Some(timeout))?;
                s.write_all(line.as_bytes())?;
                read_reply(s)
            })();
            let _ = rtx.send(r);
        })?;
    let no_reply = || {
        std::io::Error::new(
            ErrorKind::TimedOut,
            format!(
                "no reply within {:.1} s (raise --timeout if a big change takes longer)",
                timeout.as_secs_f64()
            ),
        )
    };
    let line = match rrx.recv_timeout(timeout) {
        // The socket's own timeouts can fire a moment before the channel's: same meaning.
        Ok(Err(e)) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            return Err(no_reply())
        }
        Ok(r) => r?,
        Err(_) => return Err(no_reply()),
    };
    let line = line.trim_end();
    Ok(match line.split_once(' ') {
        Some(("ok", r)) => Ok(r.to_string()),
        _ if line == "ok" => Ok(String::new()),
        Some(("error", e)) => Err(e.to_string()),
        _ => Err(format!("unexpected reply `{line}`")),
    })
}

/// Reads the server's one reply line, bounded as a command is ([`MAX_LINE`]): a server
/// that sends bytes without end, a reply cut short, or one that is not text is an error,
/// and control characters in it are escaped (it is printed to a terminal).
fn read_reply(s: UnixStream) -> std::io::Result<String> {
    let mut raw = Vec::new();
    BufReader::new(s)
        .take(MAX_LINE as u64 + 1)
        .read_until(b'\n', &mut raw)?;
    let bad = |msg: String| std::io::Error::new(ErrorKind::InvalidData, msg);
    match raw.pop() {
        Some(b'\n') => {}
        None => {
            return Err(std::io::Error::new(
                ErrorKind::UnexpectedEof,
                "the server closed the connection without a reply",
            ))
        }
        Some(_) if raw.len() >= MAX_LINE => {
            return Err(bad(format!(
                "the reply is longer than {MAX_LINE} bytes: not a catena control socket?"
            )))
        }
        Some(_) => {
            return Err(bad(
                "the reply was cut short (the connection closed before its line end)".into(),
            ))
        }
    }
    let text = String::from_utf8(raw)
        .map_err(|_| bad("the reply is not UTF-8 text: not a catena control socket?".into()))?;
    Ok(escape_controls(text.trim_end()))
}

/// `s` with its control characters but tab escaped (`\u{1b}`), for text a peer sent that
/// is shown on a terminal.
pub(super) fn escape_controls(s: &str) -> String {
    let mut shown = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() && c != '\t' {
            shown.extend(c.escape_default());
        } else {
            shown.push(c);
        }
    }
    shown
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

    fn private_dir() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        d
    }

    /// A client that connects the instant the path appears is accepted: the path appears
    /// only once the socket listens (`until [ -S S ]; do sleep 0.01; done; catena ctl S …`
    /// could get "Connection refused" when std's bind made it appear before its listen).
    #[test]
    fn the_path_appears_only_once_it_accepts() {
        let rounds = 1000;
        let mut refused = 0;
        for _ in 0..rounds {
            let d = private_dir();
            let sock = d.path().join("c.sock");
            let client = std::thread::spawn({
                let sock = sock.clone();
                move || loop {
                    match UnixStream::connect(&sock) {
                        Ok(_) => return true,
                        Err(e) if e.kind() == ErrorKind::NotFound => std::hint::spin_loop(),
                        Err(e) if e.kind() == ErrorKind::ConnectionRefused => return false,
                        Err(e) => panic!("{e}"),
                    }
                }
            });
            let (server, _port) = serve(&sock, ServeOptions::default(), HashMap::new()).unwrap();
            refused += usize::from(!client.join().unwrap());
            drop(server);
            // Nothing of the staging is left beside the socket, and the socket goes at drop.
            assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
        }
        assert_eq!(
            refused, 0,
            "{refused} of {rounds} first connections refused"
        );
    }

    fn umask_now() -> String {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("Umask:")).unwrap();
        line.split_whitespace().nth(1).unwrap().to_string()
    }

    /// Making the socket never changes the process umask: it is process-wide, so a file
    /// another thread creates meanwhile (an output pcap, a log) would get the socket's mode.
    #[test]
    fn making_the_socket_leaves_the_umask_alone() {
        let before = umask_now();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watcher = std::thread::spawn({
            let (stop, before) = (stop.clone(), before.clone());
            move || {
                let mut seen = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let now = umask_now();
                    if now != before {
                        seen.push(now);
                    }
                }
                seen
            }
        });
        for _ in 0..300 {
            let d = private_dir();
            let sock = d.path().join("c.sock");
            drop(serve(&sock, ServeOptions::default(), HashMap::new()).unwrap());
        }
        stop.store(true, Ordering::Relaxed);
        let seen = watcher.join().unwrap();
        assert!(
            seen.is_empty(),
            "umask {before} seen as {:?} {} times",
            seen.first(),
            seen.len()
        );
    }

    /// A file that appears at the path while the socket is made is not replaced, and
    /// nothing of the staging is left behind.
    #[test]
    fn a_file_that_appears_meanwhile_is_kept() {
        let d = private_dir();
        let sock = d.path().join("c.sock");
        std::fs::write(&sock, b"theirs").unwrap();
        let e = bind_private(&sock).err().unwrap();
        assert_eq!(
            e.to_string(),
            "appeared while the socket was being made: choose another path"
        );
        assert_eq!(std::fs::read(&sock).unwrap(), b"theirs");
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    }

    /// Records the thread that prepared the command.
    fn on_which_thread(cmd: &str) -> Result<Prepared, String> {
        if cmd == "bad" {
            return Err("refused while preparing".into());
        }
        Ok(Box::new(std::thread::current().id()))
    }

    /// The worker receives commands already compiled by another thread, and what it
    /// hands back is freed there; a command refused while preparing never reaches it.
    #[test]
    fn commands_reach_the_worker_prepared_off_its_thread() {
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let sock = d.path().join("c.sock");
        let preparers = HashMap::from([(
            "acl".to_string(),
            std::sync::Arc::new(on_which_thread) as Preparer,
        )]);
        let (_server, port) = serve(&sock, ServeOptions::default(), preparers).unwrap();
        let client = std::thread::spawn({
            let sock = sock.clone();
            move || {
                let bad = send(&sock, "acl", "bad", Duration::from_secs(10)).unwrap();
                let good = send(&sock, "acl", "rules x", Duration::from_secs(10)).unwrap();
                (bad, good)
            }
        });
        let c = port.rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!((c.nf.as_str(), c.cmd.as_str()), ("acl", "rules x"));
        let by = *c
            .prepared
            .unwrap()
            .downcast::<std::thread::ThreadId>()
            .unwrap();
        assert_ne!(by, std::thread::current().id());
        c.reply
            .unwrap()
            .send(Reply {
                result: Ok("1 rule(s)".into()),
                replaced: None,
            })
            .unwrap();
        let (bad, good) = client.join().unwrap();
        assert_eq!(bad, Err("refused while preparing".into()));
        assert_eq!(good, Ok("1 rule(s)".into()));
    }
}
