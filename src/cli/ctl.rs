//! `catena ctl`: send a live change to a running `catena run --control SOCKET`.

use std::path::PathBuf;
use std::time::Duration;

use catena::runtime::control;

/// Send a command to an NF of a running chain (`catena run --control SOCKET`); the change
/// applies between two batches, and the NF's reply is printed. Whoever can open the
/// socket may reconfigure the chain: it is the owner's only (mode 0600).
#[derive(clap::Args)]
pub struct Args {
    /// The socket given to `catena run --control`.
    socket: PathBuf,
    /// The NF's name in the chain, or `reload` (re-read the chain file and apply changed
    /// NF parameters; a chain with [[port]] tables).
    nf: String,
    /// The command and its arguments, e.g. `allow_ports 80 443 8080` or `flush`.
    #[arg(trailing_var_arg = true)]
    command: Vec<String>,
    /// Seconds to wait for the reply (connecting, sending, the change being applied)
    /// before giving up with an error; raise it for very big rule sets.
    #[arg(long, default_value_t = 5.0, value_name = "SECONDS", value_parser = timeout)]
    timeout: f64,
}

fn timeout(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(t) if t > 0.0 && t <= 86_400.0 => Ok(t),
        _ => Err(format!("`{s}`: give seconds in (0, 86400]")),
    }
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let (nf, cmd) = match (a.nf.as_str(), a.command.is_empty()) {
        ("reload", true) => ("*", "reload".to_string()),
        (_, true) => anyhow::bail!(
            "give a command: `catena ctl SOCKET NF COMMAND…` or `catena ctl SOCKET reload`"
        ),
        (nf, false) => (nf, a.command.join(" ")),
    };
    let wait = Duration::from_secs_f64(a.timeout);
    let reply = control::send(&a.socket, nf, &cmd, wait)
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.socket.display()))?;
    match reply {
        Ok(r) => {
            println!("{r}");
            Ok(0)
        }
        Err(e) => anyhow::bail!("{}: {e}", a.nf),
    }
}
