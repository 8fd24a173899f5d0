//! `catena run`'s input side as a user meets it: the README's first command on a fresh
//! clone (no ../shared), inputs that are not regular files, and a capture cut short
//! while `--loops` replays it.

mod common;

use std::io::Write as _;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};

use std::process::{Command, Stdio};
use std::time::Duration;

use common::tempdir;

fn catena() -> Command {
    Command::new(env!("CARGO_BIN_EXE_catena"))
}

/// A little-endian µs Ethernet pcap of `n` IPv4/UDP frames of `len` bytes.
fn pcap(n: usize, len: usize) -> Vec<u8> {
    let mut b = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    b.extend(65535u32.to_le_bytes());
    b.extend(1u32.to_le_bytes());
    for i in 0..n {
        b.extend((i as u32).to_le_bytes());
        b.extend(0u32.to_le_bytes());
        b.extend((len as u32).to_le_bytes());
        b.extend((len as u32).to_le_bytes());
        let mut f = vec![0u8; len];
        f[12] = 0x08; // IPv4
        f[14] = 0x45;
        f[23] = 17;
        f[29] = i as u8;
        b.extend(f);
    }
    b
}

#[test]
fn the_readme_first_command_runs_on_a_clone_without_shared() {
    let readme = include_str!("../README.md");
    let cmd = readme
        .lines()
        .find_map(|l| l.strip_prefix("cargo run --release -- "))
        .expect("README starts with a `cargo run --release -- ...` command");
    let args: Vec<&str> = cmd.split('#').next().unwrap().split_whitespace().collect();
    // A copy of what the command reads, in a folder with no `shared` beside it.
    let d = tempdir();
    let repo = d.path().join("catena");
    let examples = repo.join("examples");
    std::fs::create_dir_all(&examples).unwrap();
    for e in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/examples")).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), examples.join(e.file_name())).unwrap();
        }
    }
    assert!(!d.path().join("shared").exists());
    let o = catena().args(&args).current_dir(&repo).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("note: ") && err.contains("not found") && err.contains("smallflows"),
        "{err}"
    );
    // The generated smallflows profile: 14,261 packets, every one accounted for.
    assert!(out.contains("packets in 14261 "), "{out}");
}

/// Runs `catena run wire.toml -i INPUT` with at most 1 GiB of address space.
fn run_limited(input: &str, extra: &[&str]) -> std::process::Output {
    let mut c = catena();
    c.args([
        "run",
        concat!(env!("CARGO_MANIFEST_DIR"), "/examples/wire.toml"),
        "-i",
        input,
        "--json",
    ])
    .args(extra);
    // SAFETY: setrlimit is async-signal-safe.
    unsafe {
        c.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 1 << 30,
                rlim_max: 1 << 30,
            };
            libc::setrlimit(libc::RLIMIT_AS, &lim);
            Ok(())
        });
    }
    c.output().unwrap()
}

fn one_line_error(o: &std::process::Output) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.starts_with("error: "), "{err}");
    err
}

#[test]
fn endless_devices_are_refused_in_bounded_memory() {
    // Read whole, /dev/zero exhausts the 1 GiB limit and aborts; streamed, its header
    // is refused at once.
    let e = one_line_error(&run_limited("/dev/zero", &[]));
    assert!(
        e.contains("/dev/zero: not a pcap or pcapng file: bad magic 00000000"),
        "{e}"
    );
    let e = one_line_error(&run_limited("/dev/urandom", &[]));
    assert!(e.contains("/dev/urandom: "), "{e}");
}

#[test]
fn a_fifo_is_streamed_and_cannot_be_looped() {
    let d = tempdir();
    let fifo = d.path().join("in.pcap");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let bytes = pcap(5000, 1000);
    let feed = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            // Written in pieces, as a capture tool would.
            let mut f = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
            for piece in bytes.chunks(4096 + 17) {
                if f.write_all(piece).is_err() {
                    return;
                }
            }
        })
    };
    let o = run_limited(fifo.to_str().unwrap(), &[]);
    feed.join().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["packets_in"], 5000);
    assert_eq!(v["packets_out"], 5000);

    // A pipe cannot be read twice: refused before it is opened (nothing feeds it now).
    let e = one_line_error(&run_limited(fifo.to_str().unwrap(), &["--loops", "2"]));
    assert!(
        e.contains("--loops needs a file that can be read again"),
        "{e}"
    );
}

#[test]
fn a_capture_truncated_while_looping_ends_with_an_error_and_the_summary() {
    let d = tempdir();
    let path = d.path().join("t.pcap");
    std::fs::write(&path, pcap(2000, 1000)).unwrap();
    let child = catena()
        .args([
            "run",
            concat!(env!("CARGO_MANIFEST_DIR"), "/examples/wire.toml"),
            "-i",
            path.to_str().unwrap(),
            "--loops",
            "100000000",
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Well past the first loop (2,000 packets take microseconds).
    std::thread::sleep(Duration::from_millis(1000));
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(24 + 700 * 1016 + 5)
        .unwrap();
    let o = common::wait::exit_within(child, Duration::from_secs(30), "after the truncation");
    assert_eq!(
        o.status.signal(),
        None,
        "killed by a signal: {:?}",
        o.status
    );
    let e = one_line_error(&o);
    assert!(
        e.contains("t.pcap: the file changed while it was replayed"),
        "{e}"
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("the summary");
    let n = |k: &str| v[k].as_u64().unwrap();
    assert!(n("packets_in") >= 2000, "{v}");
    assert_eq!(n("packets_in"), n("packets_out") + n("packets_dropped"));
    // Whole loops of 2,000, then at least the 700 whole records left (more when the loop
    // under way had read further before the cut).
    assert!(n("packets_in") % 2000 >= 700, "{v}");
}
