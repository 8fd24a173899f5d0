//! Wrong chain files give one clear line naming the problem.

use catena::runtime::{Chain, ChainConfig};

fn err(text: &str) -> String {
    let msg = match ChainConfig::parse(text, "t.toml") {
        Err(e) => e.to_string(),
        Ok(c) => match Chain::from_config(&c) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("accepted:\n{text}"),
        },
    };
    assert!(!msg.contains('\n'), "not one line: {msg}");
    msg
}

#[test]
fn unknown_nf_kind() {
    let e = err("[[nf]]\nname = \"x\"\nkind = \"router9000\"\n");
    // Prefix only: more kinds are appended to the list as NFs land.
    assert!(
        e.starts_with(
            "t.toml: nf `x`: unknown kind `router9000` (known: wire, mac_switch, ipv4_switch, firewall"
        ),
        "{e}"
    );
}

#[test]
fn missing_kind_and_name() {
    assert_eq!(
        err("[[nf]]\nname = \"x\"\n"),
        "t.toml: nf `x` needs a `kind`"
    );
    assert_eq!(
        err("[[nf]]\nkind = \"wire\"\n"),
        "t.toml: each [[nf]] needs a `name`"
    );
}

#[test]
fn bad_and_unknown_parameters() {
    let e = err("[[nf]]\nname = \"fw\"\nkind = \"firewall\"\nallow_ports = [80, 70000]\n");
    assert_eq!(
        e,
        "t.toml: nf `fw`: `allow_ports`: port 70000 is out of range 0..=65535"
    );
    let e = err("[[nf]]\nname = \"fw\"\nkind = \"firewall\"\nallow_port = [80]\n");
    assert!(
        e.starts_with("t.toml: nf `fw`: unknown parameter `allow_port` (known: allow_ports,"),
        "{e}"
    );
    let e = err("[[nf]]\nname = \"s\"\nkind = \"mac_switch\"\ntimeout = \"soon\"\n");
    assert_eq!(
        e,
        "t.toml: nf `s`: `timeout` must be a number of seconds, not string"
    );
}

#[test]
fn edge_to_nowhere() {
    let e = err("edges = [\"in -> fw -> nowhere\"]\n[[nf]]\nname = \"fw\"\nkind = \"wire\"\n");
    assert_eq!(
        e,
        "t.toml: edge `in -> fw -> nowhere`: no node named `nowhere` (nodes: fw, in, out)"
    );
}

#[test]
fn unconnected_output() {
    let e = err("edges = [\"in -> fw\"]\n[[nf]]\nname = \"fw\"\nkind = \"wire\"\n");
    assert_eq!(
        e,
        "t.toml: output `out` of `fw` goes nowhere: add an edge `fw -> NODE`"
    );
}

#[test]
fn cycle_is_named() {
    let e = err(concat!(
        "edges = [\"in -> a\", \"a -> b\", \"b -> a\"]\n",
        "[[nf]]\nname = \"a\"\nkind = \"wire\"\n[[nf]]\nname = \"b\"\nkind = \"wire\"\n"
    ));
    assert_eq!(e, "t.toml: the edges form a cycle: a -> b -> a");
}

#[test]
fn unreachable_nf_duplicate_names_and_syntax() {
    let e = err("edges = [\"in -> out\"]\n[[nf]]\nname = \"a\"\nkind = \"wire\"\n");
    assert!(
        e.contains("output `out` of `a` goes nowhere") || e.contains("`a` is not reachable"),
        "{e}"
    );
    let e = err("[[nf]]\nname = \"a\"\nkind = \"wire\"\n[[nf]]\nname = \"a\"\nkind = \"wire\"\n");
    assert_eq!(e, "t.toml: two nodes are named `a`");
    let e = err("[input]\nports = 0\n");
    assert_eq!(e, "t.toml: [input] ports must be at least 1");
    let e = err("edges = [\"in -> \"]\n");
    assert!(e.contains("write it as `from -> to`"), "{e}");
    let e = err("[input\n");
    assert!(e.starts_with("t.toml:1:"), "{e}");
}

#[test]
fn default_edges_form_a_line_and_check_prints_it() {
    let c = ChainConfig::parse(
        "[[nf]]\nname = \"a\"\nkind = \"wire\"\n[[nf]]\nname = \"b\"\nkind = \"firewall\"\n",
        "t.toml",
    )
    .unwrap();
    let chain = Chain::from_config(&c).unwrap();
    let d = chain.describe();
    assert!(d.contains("  in -> a\n  a -> b\n  b -> out\n"), "{d}");
    assert!(
        d.contains("plan: one worker, run to completion, batches of 32: in → a → b → out"),
        "{d}"
    );
}
