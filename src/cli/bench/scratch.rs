//! A bench's scratch directory: private (mode 0700), named `catena-<what>-<pid>-<n>`
//! under the temp dir, and removed with everything in it when dropped, so on every exit
//! path (error, early return, panic unwinding) and not only at the end of the run.
//! Created with `mkdir`, never reused: benches run as root, and a predictable name that
//! already exists (a file, or a symlink someone planted) is skipped, never written through.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new(what: &str) -> anyhow::Result<Scratch> {
        let base = std::env::temp_dir();
        let pid = std::process::id();
        let mut last = None;
        for n in 0..100 {
            let p = base.join(format!("catena-{what}-{pid}-{n}"));
            match std::fs::DirBuilder::new().mode(0o700).create(&p) {
                Ok(()) => return Ok(Scratch(p)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => anyhow::bail!("cannot make a scratch directory {}: {e}", p.display()),
            }
        }
        anyhow::bail!(
            "cannot make a scratch directory catena-{what}-{pid}-N in {}: {}",
            base.display(),
            last.map_or_else(String::new, |e| e.to_string())
        )
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directory_is_private_distinct_and_gone_after_drop() {
        use std::os::unix::fs::PermissionsExt;
        let a = Scratch::new("scratch-test").unwrap();
        let b = Scratch::new("scratch-test").unwrap();
        assert_ne!(a.path(), b.path());
        let mode = std::fs::metadata(a.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        std::fs::create_dir(a.path().join("sub")).unwrap();
        std::fs::write(a.path().join("sub/f"), b"x").unwrap();
        let (pa, pb) = (a.path().to_path_buf(), b.path().to_path_buf());
        drop(a);
        assert!(!pa.exists());
        assert!(pb.exists());
        drop(b);
        assert!(!pb.exists());
    }

    #[test]
    fn a_name_that_exists_is_skipped_not_reused() {
        let pid = std::process::id();
        // A planted file at the first name: the guard takes the next one and leaves it.
        let planted = std::env::temp_dir().join(format!("catena-scratch-plant-{pid}-0"));
        std::fs::write(&planted, b"not yours").unwrap();
        let s = Scratch::new("scratch-plant").unwrap();
        assert_ne!(s.path(), planted);
        drop(s);
        assert_eq!(std::fs::read(&planted).unwrap(), b"not yours");
        std::fs::remove_file(&planted).unwrap();
    }
}
