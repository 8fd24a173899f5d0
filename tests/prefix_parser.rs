//! One prefix parser for every NF (issue 14, point 19): a prefix whose address has bits
//! past its length is refused by `nat` exactly as `ip_filter` refuses it.

mod common;

use std::process::Command;

use common::tempdir;

/// `catena check` on a chain file: (success, stderr).
fn check(text: &str) -> (bool, String) {
    let dir = tempdir();
    let f = dir.path().join("chain.toml");
    std::fs::write(&f, text).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_catena"))
        .arg("check")
        .arg(&f)
        .output()
        .expect("run catena");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The reason after the NF's name and the parameter: what the prefix parser said.
fn reason(err: &str) -> &str {
    let i = err
        .find("bad prefix")
        .unwrap_or_else(|| panic!("no prefix error: {err}"));
    err[i..].trim_end()
}

#[test]
fn nat_and_ip_filter_reject_a_prefix_with_host_bits_alike() {
    let (ok, nat) = check("[[nf]]\nname = \"nat\"\nkind = \"nat\"\ninside = \"10.1.2.3/8\"\n");
    assert!(!ok, "nat accepted inside = \"10.1.2.3/8\"");
    let (ok, acl) = check(
        "[[nf]]\nname = \"acl\"\nkind = \"ip_filter\"\nrules = [\"allow src net 10.1.2.3/8\"]\n",
    );
    assert!(!ok, "ip_filter accepted net 10.1.2.3/8");
    assert_eq!(
        reason(&nat),
        "bad prefix `10.1.2.3/8`: bits set past the /8"
    );
    assert_eq!(reason(&nat), reason(&acl));
    for e in [&nat, &acl] {
        assert_eq!(e.trim_end().lines().count(), 1, "{e}");
        assert!(e.starts_with("error: "), "{e}");
    }
    // Lengths out of range: the same words from both.
    let (_, nat) = check("[[nf]]\nname = \"nat\"\nkind = \"nat\"\ninside = \"10.0.0.0/33\"\n");
    let (_, acl) = check(
        "[[nf]]\nname = \"acl\"\nkind = \"ip_filter\"\nrules = [\"allow net 10.0.0.0/33\"]\n",
    );
    assert_eq!(reason(&nat), reason(&acl));
    // The well-formed prefix is accepted by both.
    assert!(check("[[nf]]\nname = \"nat\"\nkind = \"nat\"\ninside = \"10.0.0.0/8\"\n").0);
}
