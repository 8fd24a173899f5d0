//! Command-line interface: parses arguments, runs a subcommand, turns errors into one line.

/// `println!` whose failure (a full disk, a closed descriptor) is the command's error:
/// `println!` itself panics on it. Defined before the modules so that they see it.
macro_rules! outln {
    ($($t:tt)*) => {
        $crate::cli::write_out(format_args!("{}\n", format_args!($($t)*)))
    };
}

mod bench;
mod check;
mod ctl;
mod dpi;
mod gen;
mod nfs;
mod pipeline;
mod progress;
mod run;
mod signals;

use clap::{Parser, Subcommand};

/// Writes to standard output and flushes, so that an error is seen here, not lost at exit.
pub(crate) fn write_out(a: std::fmt::Arguments) -> anyhow::Result<()> {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    o.write_fmt(a)
        .and_then(|()| o.flush())
        .map_err(|e| anyhow::anyhow!("standard output: {e}"))
}

#[derive(Parser)]
#[command(
    name = "catena",
    version,
    about = "A software data plane for network-function service chains",
    long_about = "catena forwards packets from pcap traces (or generated traffic) through a chain of \
network functions read from a TOML file, and reports what each NF did.\n\n\
Start with `catena run examples/firewall.toml`, `catena check FILE` to see a chain's graph, \
and `catena nfs` for the NF kinds and their parameters."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    Run(run::Args),
    Check(check::Args),
    Gen(gen::Args),
    Nfs(nfs::Args),
    Ctl(ctl::Args),
    Bench(bench::Args),
    Dpi(dpi::Args),
    Pipeline(pipeline::Args),
}

pub fn main() -> i32 {
    // `catena check x | head` should end quietly like other Unix tools, not panic in
    // println! on the closed pipe.
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Run(a) => run::run(a),
        Cmd::Check(a) => check::run(a),
        Cmd::Gen(a) => gen::run(a),
        Cmd::Nfs(a) => nfs::run(a),
        Cmd::Ctl(a) => ctl::run(a),
        Cmd::Bench(a) => bench::run(a),
        Cmd::Dpi(a) => dpi::run(a),
        Cmd::Pipeline(a) => pipeline::run(a),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            // One line: the chain of causes joined, no backtrace.
            // Causes already spelled out by the message above them are not repeated.
            let mut msg = String::new();
            for c in e.chain() {
                let c = c.to_string();
                if !msg.contains(&c) {
                    if !msg.is_empty() {
                        msg.push_str(": ");
                    }
                    msg.push_str(&c);
                }
            }
            eprintln!("error: {}", one_line(&msg));
            1
        }
    }
}

/// The most of an error message printed: messages quote the input they refuse (a rule,
/// a name), and a hostile input can make that quote megabytes long.
const MAX_ERROR: usize = 1000;

/// `msg` as one short line: line breaks become spaces, other control characters their
/// escape (a quoted `\r` or ESC must not redraw the terminal), and past [`MAX_ERROR`]
/// bytes the rest is cut (its length said).
fn one_line(msg: &str) -> String {
    let mut out = String::new();
    for (i, c) in msg.char_indices() {
        if out.len() >= MAX_ERROR {
            out.push_str(&format!("… ({} bytes more)", msg.len() - i));
            break;
        }
        match c {
            '\n' => out.push(' '),
            c if c.is_control() => out.extend(c.escape_default()),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{one_line, MAX_ERROR};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn any_message_prints_as_one_bounded_line(msg in ".{0,1500}") {
            let l = one_line(&msg);
            prop_assert!(!l.chars().any(char::is_control), "{l:?}");
            // At most the kept bytes, one last character or escape, and the note of the cut.
            prop_assert!(l.len() <= MAX_ERROR + 10 + "… (1000000 bytes more)".len());
            if msg.len() <= MAX_ERROR && !msg.chars().any(char::is_control) {
                prop_assert_eq!(l, msg);
            }
        }
    }

    #[test]
    fn an_error_is_one_short_line() {
        assert_eq!(one_line("a\nb\rc\u{1b}[31m\td"), "a b\\rc\\u{1b}[31m\\td");
        let long = format!("rule 1: not `{}`", "é".repeat(1000));
        let l = one_line(&long);
        assert!(l.starts_with("rule 1: not `éé"), "{l}");
        // 13 bytes of prefix, then 2-byte characters up to the first at or past 1000 bytes.
        assert!(l.ends_with("é… (1013 bytes more)"), "{l}");
        assert_eq!(l.len(), 1001 + "… (1013 bytes more)".len());
    }
}
