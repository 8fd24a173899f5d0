//! Command-line interface: parses arguments, runs a subcommand, turns errors into one line.

mod bench;
mod check;
mod ctl;
mod dpi;
mod gen;
mod nfs;
mod pipeline;
mod progress;
mod run;

use clap::{Parser, Subcommand};

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
            eprintln!("error: {}", msg.replace('\n', " "));
            1
        }
    }
}
