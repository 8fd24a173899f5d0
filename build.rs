//! Optionally links the `catena` executable without PIE (x86_64 Linux, glibc), when built
//! with CATENA_NO_PIE=1. A position-independent executable makes the loader apply about
//! 6,000 relative relocations before `main` (0.18 M instructions and ~50 page faults on
//! every command, docs/e2e.md, session 13), which shows only on tiny traces. The default
//! stays PIE: a process that parses hostile packets keeps its own code randomised (ASLR).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CATENA_NO_PIE");
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let linux_gnu = var("CARGO_CFG_TARGET_OS") == "linux" && var("CARGO_CFG_TARGET_ENV") == "gnu";
    if linux_gnu && var("CARGO_CFG_TARGET_ARCH") == "x86_64" && var("CATENA_NO_PIE") == "1" {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
}
