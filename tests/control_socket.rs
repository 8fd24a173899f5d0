//! The control socket as an operator must be able to trust it: it replaces nothing but a
//! stale socket of its own, is the owner's only, bounds what a client may make it hold,
//! and `catena ctl` never waits forever. Each test runs the built binary on a temp dir.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

const BIN: &str = env!("CARGO_BIN_EXE_catena");

fn example(name: &str) -> String {
    format!("{}/examples/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// `catena run` of the firewall example, long enough to outlast the test, listening on
/// `sock` (extra arguments after).
fn spawn_run(sock: &Path, extra: &[&str], umask: Option<u32>) -> Child {
    let mut c = Command::new(BIN);
    c.args([
        "run",
        &example("firewall.toml"),
        "--json",
        "--loops",
        "1000000",
    ])
    .arg("--control")
    .arg(sock)
    .args(extra)
    .arg("-i")
    .arg(dataset("bench/ndpi-ether-merged.pcap"))
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    if let Some(m) = umask {
        // SAFETY: umask is async-signal-safe and has no preconditions.
        unsafe {
            c.pre_exec(move || {
                libc::umask(m as libc::mode_t);
                Ok(())
            });
        }
    }
    c.spawn().unwrap()
}

/// Waits until `sock` accepts connections (or the child ends, or 20 s pass).
fn wait_listening(child: &mut Child, sock: &Path) {
    let t0 = Instant::now();
    loop {
        if UnixStream::connect(sock).is_ok() {
            return;
        }
        if let Ok(Some(st)) = child.try_wait() {
            let mut e = String::new();
            child.stderr.take().unwrap().read_to_string(&mut e).unwrap();
            panic!("run ended ({st}) before listening: {e}");
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "socket never appeared"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stop(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// A run that must refuse its socket path: exits non-zero at once with one line.
fn refused(sock: &Path) -> String {
    let o: Output = Command::new(BIN)
        .args(["run", &example("firewall.toml"), "--control"])
        .arg(sock)
        .arg("-i")
        .arg(dataset("bench/ndpi-ether-merged.pcap"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(!o.status.success(), "run accepted {}", sock.display());
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(o.stdout.is_empty(), "no packet was processed");
    err
}

fn ctl(sock: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("ctl")
        .arg(sock)
        .args(args)
        .output()
        .unwrap()
}

fn private_dir() -> tempfile::TempDir {
    let d = tempdir();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    d
}

#[test]
fn control_replaces_nothing_but_a_stale_socket_of_ours() {
    let d = private_dir();
    // A regular file survives, byte for byte.
    let precious = d.path().join("precious.txt");
    std::fs::write(&precious, b"keep me\n").unwrap();
    let e = refused(&precious);
    assert!(e.contains("is not a socket"), "{e}");
    assert_eq!(std::fs::read(&precious).unwrap(), b"keep me\n");
    // So do a directory and a symlink to the file.
    let dir = d.path().join("dir");
    std::fs::create_dir(&dir).unwrap();
    refused(&dir);
    assert!(dir.is_dir());
    let link = d.path().join("link");
    std::os::unix::fs::symlink(&precious, &link).unwrap();
    refused(&link);
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read(&precious).unwrap(), b"keep me\n");
    // A socket someone listens on is left to them.
    let live = d.path().join("live.sock");
    let listener = UnixListener::bind(&live).unwrap();
    let e = refused(&live);
    assert!(e.contains("listens there"), "{e}");
    assert!(
        UnixStream::connect(&live).is_ok(),
        "the live socket still works"
    );
    drop(listener);
    // Now stale (the file stays after its listener closed): replaced, and removed at exit.
    assert!(live.exists());
    let mut child = spawn_run(&live, &[], None);
    wait_listening(&mut child, &live);
    let o = ctl(&live, &["fw", "flush"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    stop(child);
}

#[test]
fn socket_is_owner_only_whatever_the_umask() {
    let d = private_dir();
    let sock = d.path().join("ctl.sock");
    let mut child = spawn_run(&sock, &[], Some(0o000));
    wait_listening(&mut child, &sock);
    let mode = std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777;
    stop(child);
    assert_eq!(mode, 0o600, "socket mode {mode:o} under umask 000");
}

#[test]
fn a_directory_every_user_may_write_is_refused() {
    for mode in [0o777, 0o1777] {
        let d = tempdir();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(mode)).unwrap();
        let sock = d.path().join("ctl.sock");
        let e = refused(&sock);
        assert!(e.contains("writable by every user"), "{mode:o}: {e}");
        assert!(!sock.exists());
    }
}

/// Anonymous resident memory only: the replayed trace is mapped, and how much of the file
/// is resident depends on how far the replay got, not on the control server.
fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let l = s.lines().find(|l| l.starts_with("RssAnon:")).unwrap();
    l.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Reads one reply line, failing (not hanging) when none comes within 10 s.
fn reply(s: &UnixStream) -> String {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    line
}

#[test]
fn a_line_without_end_is_cut_off_and_its_memory_returned() {
    let d = private_dir();
    let sock = d.path().join("ctl.sock");
    let mut child = spawn_run(&sock, &[], None);
    wait_listening(&mut child, &sock);
    let before = rss_kib(child.id());
    for _ in 0..3 {
        // 64 MiB without a newline: the server stops reading at its limit.
        let mut s = UnixStream::connect(&sock).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
        let chunk = vec![b'x'; 1 << 20];
        for _ in 0..64 {
            if s.write_all(&chunk).is_err() {
                break;
            }
        }
        let r = reply(&s);
        assert!(r.starts_with("error line longer than"), "{r:?}");
    }
    // Still serving.
    let o = ctl(&sock, &["fw", "flush"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let grown = rss_kib(child.id()).saturating_sub(before);
    stop(child);
    assert!(grown < 24 << 10, "the run grew by {grown} KiB");
}

#[test]
fn connections_at_once_are_bounded() {
    let d = private_dir();
    let sock = d.path().join("ctl.sock");
    let mut child = spawn_run(&sock, &[], None);
    wait_listening(&mut child, &sock);
    // The probe's connection is counted until its thread sees it closed.
    std::thread::sleep(Duration::from_secs(1));
    // Eight idle connections hold every slot; the ninth is told so and closed.
    let held: Vec<UnixStream> = (0..8)
        .map(|_| UnixStream::connect(&sock).unwrap())
        .collect();
    let extra = UnixStream::connect(&sock).unwrap();
    let r = reply(&extra);
    assert!(r.starts_with("error busy"), "{r:?}");
    let o = ctl(&sock, &["fw", "flush"]);
    assert!(!o.status.success());
    // Closing them frees the slots.
    drop(held);
    let t0 = Instant::now();
    loop {
        let o = ctl(&sock, &["fw", "flush"]);
        if o.status.success() {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "slots never freed");
        std::thread::sleep(Duration::from_millis(100));
    }
    stop(child);
}

#[test]
fn a_connection_without_a_complete_line_is_closed_after_the_idle_time() {
    let d = private_dir();
    let sock = d.path().join("ctl.sock");
    let mut child = spawn_run(&sock, &["--control-idle", "1"], None);
    wait_listening(&mut child, &sock);
    let mut s = UnixStream::connect(&sock).unwrap();
    // Half a line, then nothing.
    s.write_all(b"fw fl").unwrap();
    let t0 = Instant::now();
    let r = reply(&s);
    assert!(r.starts_with("error no complete line in time"), "{r:?}");
    assert!(t0.elapsed() >= Duration::from_millis(900));
    let mut rest = String::new();
    BufReader::new(&s).read_line(&mut rest).unwrap();
    assert_eq!(rest, "", "then the connection is closed");
    stop(child);
}

#[test]
fn ctl_gives_up_on_a_server_that_never_answers() {
    let d = private_dir();
    let sock = d.path().join("mute.sock");
    let listener = UnixListener::bind(&sock).unwrap();
    // Accepts and reads, never answers.
    let keep = std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in listener.incoming().take(2) {
            held.push(c.unwrap());
        }
        std::thread::sleep(Duration::from_secs(20));
    });
    let t0 = Instant::now();
    let o = ctl(&sock, &["--timeout", "0.5", "fw", "flush"]);
    let took = t0.elapsed();
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("no reply within 0.5 s"), "{e}");
    // Far below the 20 s the server holds the connection; loose enough for a loaded CI host.
    assert!(took < Duration::from_secs(10), "took {took:?}");
    // The default is a few seconds, not forever.
    let t0 = Instant::now();
    let o = ctl(&sock, &["fw", "flush"]);
    assert!(!o.status.success());
    assert!(t0.elapsed() < Duration::from_secs(15));
    drop(keep);
}

#[test]
fn commands_are_one_line_and_validated_as_the_config_is() {
    let d = private_dir();
    let sock: PathBuf = d.path().join("ctl.sock");
    let mut child = spawn_run(&sock, &[], None);
    wait_listening(&mut child, &sock);
    let o = ctl(&sock, &["fw", "allow_ports 53\nfw flush"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("one line"));
    let o = ctl(&sock, &["fw", "allow_ports", "70000"]);
    assert!(!o.status.success());
    stop(child);
}

#[test]
fn filter_and_balancer_commands_take_the_config_s_parser_and_limits() {
    let d = private_dir();
    let sock = d.path().join("acl.sock");
    let mut c = Command::new(BIN);
    let mut child = c
        .args([
            "run",
            &example("ip_filter.toml"),
            "--json",
            "--loops",
            "1000000",
        ])
        .arg("--control")
        .arg(&sock)
        .arg("-i")
        .arg(dataset("bench/ndpi-ether-merged.pcap"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_listening(&mut child, &sock);
    let o = ctl(&sock, &["acl", "rulesallow", "ip"]);
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("unknown command `rulesallow`"), "{e}");
    // A big rule set goes in whole (compiled off the worker) and is answered.
    let rules: Vec<String> = (0..40_000u32)
        .map(|i| {
            format!(
                "deny src host 10.{}.{}.{}",
                i >> 16,
                (i >> 8) & 255,
                i & 255
            )
        })
        .collect();
    let cmd = format!("rules {}; allow ip", rules.join("; "));
    let r = catena::runtime::control::send(&sock, "acl", &cmd, Duration::from_secs(60)).unwrap();
    assert_eq!(r, Ok("40001 rule(s)".to_string()));
    // The same set is too long for one argument (128 KiB): `catena ctl --file` sends it,
    // one rule per line, comments and blank lines skipped.
    let file = d.path().join("rules.txt");
    let text: String = rules.iter().map(|r| format!("{r};\n")).collect();
    std::fs::write(
        &file,
        format!("# 40k hosts\n\n{text}deny tcp port 23;\nallow ip;\n"),
    )
    .unwrap();
    assert!(text.len() > 128 << 10, "the set must not fit one argument");
    let o = ctl(
        &sock,
        &[
            "--timeout",
            "60",
            "--file",
            file.to_str().unwrap(),
            "acl",
            "rules",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "40002 rule(s)");
    let o = ctl(&sock, &["--file", "/nonexistent/rules.txt", "acl", "rules"]);
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(e.trim().lines().count(), 1, "one line: {e}");
    assert!(e.contains("--file /nonexistent/rules.txt"), "{e}");
    stop(child);
}

/// Serves one connection at `sock`: reads the command, sends `reply` and closes; or with
/// `flood`, sends bytes with no line end (up to 64 MiB) and holds the connection until the
/// client closes it.
fn fake_server(sock: &Path, reply: &'static [u8], flood: bool) -> std::thread::JoinHandle<()> {
    let listener = UnixListener::bind(sock).unwrap();
    std::thread::spawn(move || {
        let (mut c, _) = listener.accept().unwrap();
        let mut cmd = [0u8; 4096];
        let _ = c.read(&mut cmd);
        let _ = c.write_all(reply);
        if !flood {
            return;
        }
        let chunk = vec![b'y'; 1 << 20];
        for _ in 0..64 {
            if c.write_all(&chunk).is_err() {
                return;
            }
        }
        let _ = c.set_read_timeout(Some(Duration::from_secs(20)));
        let _ = c.read(&mut cmd);
    })
}

/// `catena ctl` against a server that is not catena's: the reply is read only up to a
/// command's bound (4 MiB), a reply cut short is not taken as whole, one that is not text is
/// refused, and control characters are printed escaped. Main before session 24 read without
/// bound (1.8 GB in 5 s from a server sending bytes with no line end), printed `partial`
/// with exit 0 for `ok partial` cut short, and terminal escapes raw.
#[test]
fn ctl_takes_one_bounded_whole_line_from_a_server_that_answers_garbage() {
    let d = private_dir();
    let cases: [(&'static [u8], Result<&str, &str>); 3] = [
        (
            b"ok partial",
            Err("the reply was cut short (the connection closed before its line end)"),
        ),
        (b"ok \x1b[2J\x07done\r\n", Ok("\\u{1b}[2J\\u{7}done\n")),
        (
            b"\xff\xfe garbage\n",
            Err("the reply is not UTF-8 text: not a catena control socket?"),
        ),
    ];
    for (i, (reply, want)) in cases.into_iter().enumerate() {
        let sock = d.path().join(format!("fake{i}.sock"));
        let server = fake_server(&sock, reply, false);
        let o = ctl(&sock, &["fw", "flush"]);
        server.join().unwrap();
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
        );
        match want {
            Ok(w) => assert_eq!((o.status.code(), out.as_ref()), (Some(0), w), "{err}"),
            Err(w) => {
                assert_eq!(o.status.code(), Some(1), "{out}");
                assert_eq!(err, format!("error: {}: {w}\n", sock.display()));
            }
        }
    }
    // Bytes without end: refused at the bound, with the memory of the bound.
    let sock = d.path().join("flood.sock");
    let server = fake_server(&sock, b"ok ", true);
    let (out, err) = (d.path().join("out"), d.path().join("err"));
    // Waited for by wait4, which gives its peak memory.
    #[allow(clippy::zombie_processes)]
    let child = Command::new(BIN)
        .args(["ctl", sock.to_str().unwrap(), "fw", "flush"])
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let (mut status, mut usage) = (0, unsafe { std::mem::zeroed::<libc::rusage>() });
    // SAFETY: waiting for our own child, with valid pointers; std's Child is not waited on.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32);
    server.join().unwrap();
    let peak_mib = usage.ru_maxrss / 1024;
    assert!(peak_mib < 32, "ctl's peak memory {peak_mib} MiB");
    assert_eq!(libc::WEXITSTATUS(status), 1);
    assert_eq!(
        std::fs::read_to_string(&err).unwrap(),
        format!(
            "error: {}: the reply is longer than 4194304 bytes: not a catena control socket?\n",
            sock.display()
        )
    );
}

/// A path that is not a socket is named as such. Before, connect()'s errno was all the
/// user saw ("Connection refused" for a regular file).
#[test]
fn ctl_says_what_is_wrong_with_a_path_that_is_not_a_socket() {
    let d = private_dir();
    let file = d.path().join("plain.txt");
    std::fs::write(&file, "not a socket\n").unwrap();
    for (path, want) in [
        (file.clone(), "not a socket"),
        (d.path().to_path_buf(), "a directory"),
        (d.path().join("missing.sock"), "no such socket"),
    ] {
        let o = ctl(&path, &["fw", "flush"]);
        assert_eq!(o.status.code(), Some(1), "{path:?}");
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(e.lines().count(), 1, "one line: {e}");
        assert!(e.contains(want), "{path:?}: {e}");
        assert!(e.contains("--control PATH"), "{e}");
    }
}
