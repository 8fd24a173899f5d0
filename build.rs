//! Links the `catena` executable without PIE on x86_64 Linux (glibc): a position-independent
//! executable makes the loader apply about 6,000 relative relocations (236 KiB of
//! `.data.rel.ro` written, about 60 page faults and 0.4 M instructions) before `main`,
//! on every command; `catena run` over a small trace is mostly start-up (docs/e2e.md,
//! session 13). The code is still compiled position-independent (no dependency is rebuilt
//! for it); only the final link changes. Set CATENA_PIE=1 to link a PIE anyway.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CATENA_PIE");
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let linux_gnu = var("CARGO_CFG_TARGET_OS") == "linux" && var("CARGO_CFG_TARGET_ENV") == "gnu";
    if linux_gnu && var("CARGO_CFG_TARGET_ARCH") == "x86_64" && var("CATENA_PIE") != "1" {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
}
