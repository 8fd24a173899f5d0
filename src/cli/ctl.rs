//! `catena ctl`: send a live change to a running `catena run --control SOCKET`.

use std::path::PathBuf;

use catena::runtime::control;

/// Send a command to an NF of a running chain (`catena run --control SOCKET`); the change
/// applies between two batches, and the NF's reply is printed.
#[derive(clap::Args)]
pub struct Args {
    /// The socket given to `catena run --control`.
    socket: PathBuf,
    /// The NF's name in the chain.
    nf: String,
    /// The command and its arguments, e.g. `allow_ports 80 443 8080` or `flush`.
    #[arg(required = true, trailing_var_arg = true)]
    command: Vec<String>,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let reply = control::send(&a.socket, &a.nf, &a.command.join(" "))
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.socket.display()))?;
    match reply {
        Ok(r) => {
            println!("{r}");
            Ok(0)
        }
        Err(e) => anyhow::bail!("{}: {e}", a.nf),
    }
}
