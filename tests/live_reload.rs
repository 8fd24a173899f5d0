//! Reloading a running chain: SIGHUP while a paced replay flows changes the firewall's
//! ports between two batches, so the output is exactly the old rules' verdicts up to
//! some packet and the new rules' after it (nothing lost or duplicated); a change of
//! shape and a broken file are refused in one line while the old chain keeps running;
//! `catena ctl SOCKET reload` answers like SIGHUP. Bounded: 4,000 packets in about 1 s.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use catena::io::{PcapWriter, Trace};

const N: usize = 4000;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_catena")
}

fn chain(cap: &Path, ports: &str, extra: &str) -> String {
    format!(
        "[[port]]\nname = \"a\"\nkind = \"pcap\"\npath = \"{}\"\n\n[[nf]]\nname = \"fw\"\nkind = \"firewall\"\nallow_ports = [{ports}]\n{extra}",
        cap.display()
    )
}

fn frames(p: &Path) -> Vec<Vec<u8>> {
    let t = Trace::open(p).unwrap();
    (0..t.len()).map(|i| t.packet(i).to_vec()).collect()
}

/// The packets a firewall with `ports` forwards from `cap`, in order (run offline).
fn forwarded(dir: &Path, cap: &Path, ports: &str) -> Vec<Vec<u8>> {
    let f = dir.join(format!("off-{}.toml", ports.replace([',', ' '], "_")));
    let o = dir.join(format!("off-{}.pcap", ports.replace([',', ' '], "_")));
    std::fs::write(&f, chain(cap, ports, "")).unwrap();
    let r = Command::new(bin())
        .args(["run", f.to_str().unwrap(), "-o", o.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    frames(&o)
}

#[test]
fn sighup_applies_new_ports_between_batches() {
    let dir = tempfile::tempdir().unwrap();
    let src = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/datasets/bench/ndpi-ether-merged.pcap"
    ));
    let t = Trace::open(&src).unwrap();
    let cap = dir.path().join("cap.pcap");
    let mut w = PcapWriter::create(&cap, t.header()).unwrap();
    for i in 0..N {
        let r = t.record(i);
        w.write_packet(r.ts_ns, r.wire_len, t.packet(i)).unwrap();
    }
    w.finish().unwrap();
    let input = frames(&cap);
    let old = forwarded(dir.path(), &cap, "80, 443");
    let new = forwarded(dir.path(), &cap, "80, 443, 4500");
    assert!(new.len() > old.len() + 50, "the new rule must matter");

    let file = dir.path().join("live.toml");
    std::fs::write(&file, chain(&cap, "80, 443", "")).unwrap();
    let out = dir.path().join("out.pcap");
    let sock = dir.path().join("ctl.sock");
    let mut child = Command::new(bin())
        .args(["run", file.to_str().unwrap(), "--rate", "4000pps", "--json"])
        .args([
            "-o",
            out.to_str().unwrap(),
            "--control",
            sock.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let next_line = || {
        rx.recv_timeout(Duration::from_secs(3))
            .expect("a line on stderr")
    };
    let hup = || {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGHUP) };
    };
    let start = Instant::now();
    // Wait for the socket, then: a shape change and a broken file are refused...
    while !sock.exists() && start.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(100));
    std::fs::write(
        &file,
        chain(&cap, "80, 443", "\n[[nf]]\nname = \"w\"\nkind = \"wire\"\n"),
    )
    .unwrap();
    hup();
    let l = next_line();
    assert!(
        l.starts_with("catena: reload refused: the chain's shape changed"),
        "{l}"
    );
    assert!(l.ends_with("; the old chain keeps running"), "{l}");
    std::fs::write(&file, "[[nf]\n").unwrap();
    let ctl = Command::new(bin())
        .args(["ctl", sock.to_str().unwrap(), "reload"])
        .output()
        .unwrap();
    assert!(!ctl.status.success());
    let e = String::from_utf8_lossy(&ctl.stderr);
    assert!(
        e.contains("live.toml:1:") && e.trim().lines().count() == 1,
        "{e}"
    );
    // ...then the new ports apply.
    std::fs::write(&file, chain(&cap, "80, 443, 4500", "")).unwrap();
    hup();
    let l = next_line();
    assert_eq!(l, "catena: reload: 1 change(s): fw: 3 port(s) allowed");
    assert!(
        start.elapsed() < Duration::from_millis(900),
        "reloaded after the replay ended"
    );
    let end = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < end, "replay did not end");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success());
    let got = frames(&out);

    // Some packet k where the new rules took over: before it the old verdicts, from it
    // the new ones, each packet once.
    let pass = |set: &[Vec<u8>]| -> Vec<bool> {
        let mut j = 0;
        input
            .iter()
            .map(|p| {
                let hit = j < set.len() && set[j] == *p;
                j += hit as usize;
                hit
            })
            .collect()
    };
    let (po, pn) = (pass(&old), pass(&new));
    assert_eq!(po.iter().filter(|&&b| b).count(), old.len());
    assert_eq!(pn.iter().filter(|&&b| b).count(), new.len());
    let found = (1..N).find(|&k| {
        let want: Vec<&Vec<u8>> = (0..N)
            .filter(|&i| if i < k { po[i] } else { pn[i] })
            .map(|i| &input[i])
            .collect();
        want.len() == got.len() && want.iter().zip(&got).all(|(a, b)| *a == b)
    });
    assert!(
        found.is_some(),
        "output ({} packets) is not old rules then new rules",
        got.len()
    );
    let k = found.unwrap();
    assert!(k > 0 && k < N, "switch at packet {k}");
}

/// A live change (`catena ctl SOCKET fw allow_ports …`) does not outlive a reload of the
/// unchanged file: the reload puts the file's parameters back (it used to answer "no NF
/// parameter changed" and keep the live change).
#[test]
fn reload_undoes_a_live_change_of_an_unchanged_file() {
    let dir = tempfile::tempdir().unwrap();
    let src = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/datasets/bench/ndpi-ether-merged.pcap"
    ));
    let file = dir.path().join("live.toml");
    std::fs::write(&file, chain(&src, "80, 443", "")).unwrap();
    let sock = dir.path().join("ctl.sock");
    let mut child = Command::new(bin())
        .args(["run", file.to_str().unwrap(), "--rate", "200pps"])
        .args(["-o", "/dev/null", "--control", sock.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !sock.exists() && start.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let ctl = |args: &[&str]| {
        let r = Command::new(bin())
            .arg("ctl")
            .arg(&sock)
            .args(args)
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&r.stdout).trim().to_string();
        let err = String::from_utf8_lossy(&r.stderr).trim().to_string();
        (r.status.success(), out, err)
    };
    let a = ctl(&["fw", "allow_ports", "22"]);
    let b = ctl(&["reload"]);
    let c = ctl(&["reload"]);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert_eq!(a, (true, "1 port(s) allowed".into(), String::new()));
    assert_eq!(
        b,
        (
            true,
            "1 change(s): fw: 2 port(s) allowed".into(),
            String::new()
        )
    );
    assert_eq!(c, (true, "no NF parameter changed".into(), String::new()));
    assert!(status.success(), "{status}");
}
