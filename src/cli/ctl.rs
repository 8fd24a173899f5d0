//! `catena ctl`: send a live change to a running `catena run --control SOCKET`.

use std::path::PathBuf;
use std::time::Duration;

use catena::io::text_file::{read_text, read_text_from};
use catena::runtime::control::{self, MAX_LINE};

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
    /// Append the command's remaining arguments from PATH (`-` for standard input), for
    /// text too long for one argument (the kernel caps one at 128 KiB): its lines are joined
    /// with spaces, blank lines and lines starting with `#` skipped. Put it before NF, e.g.
    /// `catena ctl SOCKET --file rules.txt acl rules` with one `RULE;` per line.
    #[arg(long, value_name = "PATH")]
    file: Option<PathBuf>,
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

pub fn run(mut a: Args) -> anyhow::Result<i32> {
    if let Some(path) = &a.file {
        let text = if path.as_os_str() == "-" {
            read_text_from(std::io::stdin(), MAX_LINE as u64)
        } else {
            read_text(path, MAX_LINE as u64)
        }
        .map_err(|e| anyhow::anyhow!("--file {}: {e}", path.display()))?;
        a.command.extend(file_words(&text));
    }
    let (nf, cmd) = match (a.nf.as_str(), a.command.is_empty()) {
        ("reload", true) => ("*", "reload".to_string()),
        (_, true) => anyhow::bail!(
            "give a command: `catena ctl SOCKET NF COMMAND…` or `catena ctl SOCKET reload`"
        ),
        (nf, false) => (nf, a.command.join(" ")),
    };
    check_socket(&a.socket)?;
    let wait = Duration::from_secs_f64(a.timeout);
    let reply = control::send(&a.socket, nf, &cmd, wait)
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.socket.display()))?;
    match reply {
        Ok(r) => {
            outln!("{r}")?;
            Ok(0)
        }
        Err(e) => anyhow::bail!("{}: {e}", a.nf),
    }
}

/// A path that is not a socket gets a reason, not connect()'s "Connection refused".
fn check_socket(path: &std::path::Path) -> anyhow::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let hint = "the path `catena run … --control PATH` was started with";
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            anyhow::bail!("{}: no such socket; give {hint}", path.display())
        }
        Ok(m) if !m.file_type().is_socket() => {
            let what = if m.is_dir() {
                "a directory"
            } else {
                "not a socket"
            };
            anyhow::bail!("{}: {what}; give {hint}", path.display())
        }
        _ => Ok(()),
    }
}

/// The lines of a `--file` that carry text, trimmed: blank and `#` lines are skipped, so a
/// rule file can be commented.
fn file_words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::file_words;

    #[test]
    fn file_lines_become_words_without_comments_or_blanks() {
        let w: Vec<String> = file_words("# rules\ndeny tcp port 23;\n\n  allow ip  \n").collect();
        assert_eq!(w, ["deny tcp port 23;", "allow ip"]);
    }
}
