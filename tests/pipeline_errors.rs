//! Broken pipeline programs: each gives `file:line:column: reason` at the right place,
//! with the offending text underlined, and never a panic. `@@` in a program marks where
//! the error must point (it is removed before compiling); the compiler finds the place
//! on its own. A property test feeds the parser random token streams.

use std::collections::HashMap;

use catena::nfs::pipeline::{compile, parse_only};
use proptest::prelude::*;

/// A valid program the broken ones are variations of.
const BASE: &str = "drops bad;
layout eth { dst: 48; src: 48; type: 16; }
table mac {
  key e.dst exact;
  miss { flood; }
}
decoder e: eth {
  extract dst, src, type;
  short { drop bad; }
  learn mac(e.src) -> output in_port;
  goto mac;
}
start { next e; }
";

/// (program, what the message must say)
const BROKEN: &[(&str, &str)] = &[
    ("start { @@$ }", "unexpected character `$`"),
    ("start { if in_port == @@1.2.3.999 { pass; } }", "is not a valid IPv4 address"),
    ("drops a\n@@layout x { a: 8; }\nstart { pass; }", "expected `;`"),
    ("@@foo bar;", "expected `param`"),
    ("param x: @@float = 1;\nstart { pass; }", "unknown parameter type `float`"),
    ("layout l { a: @@0; }\nstart { pass; }", "at least 1 bit"),
    ("layout l { @@a: 65; }\nstart { pass; }", "at most 64 bits"),
    ("layout l { a: 8; @@a: 8; }\nstart { pass; }", "field `a` is declared twice"),
    ("layout l { a: 8; }\nlayout @@l { b: 8; }\nstart { pass; }", "layout `l` is declared twice"),
    ("decoder d: @@nope { }\nstart { next d; }", "unknown layout `nope`"),
    ("layout l { a: 8; }\ndecoder d: l { extract @@b; }\nstart { next d; }", "has no field `b`"),
    ("layout l { a: 8; b: 8; }\ndecoder d: l { extract a; if @@d.b == 1 { pass; } }\nstart { next d; }", "does not extract `b`"),
    ("start { next @@d; }", "unknown decoder `d`"),
    ("start { goto @@t; }", "unknown table `t`"),
    ("start { drop @@why; }", "unknown drop reason `why`"),
    ("layout l { a: 8; }\ndecoder d: l { extract a; pass; }\ntable @@t { key d.a exact; }\nstart { next d; }", "table `t` is unreachable"),
    ("layout l { a: 8; }\ndecoder @@d: l { extract a; pass; }\nstart { pass; }", "decoder `d` is never entered"),
    ("layout l { a: 8; }\ndecoder d: l { extract a; goto t; }\ntable t { key d.a exact; miss { goto u; } }\ntable u { key d.a exact; miss { goto @@t; } }\nstart { next d; }", "closes a loop back to table `t`"),
    ("layout l { a: 8; }\ndecoder d: l { extract a; next e; }\ndecoder e: l { extract a; next @@d; }\nstart { next d; }", "closes a loop back to decoder `d`"),
    ("drops x;\nstart { drop x; @@pass; }", "unreachable: the statement before"),
    ("layout l { a: 8; }\ndecoder d: l { extract a; if d.a == @@256 { pass; } }\nstart { next d; }", "does not fit in the 8-bit `d.a`"),
    ("layout l { a: 4; }\ndecoder d: l { extract a; set d.a = @@16; }\nstart { next d; }", "does not fit in the 4-bit field"),
    ("layout l { a: 8; }\ndecoder d: l { extract a; learn t(d.a) -> output in_port; goto t; }\ntable @@t { key d.a prefix; }\nstart { next d; }", "learned into, so its key must be exact"),
    ("layout l { a: 8; }\ndecoder d: l { extract a; @@learn t(d.a, d.a) -> flood; goto t; }\ntable t { key d.a exact; }\nstart { next d; }", "has 1 key field(s), 2 given"),
    ("layout l { a: 8; b: 16; }\ndecoder d: l { extract a, b; learn t(@@d.b) -> flood; goto t; }\ntable t { key d.a exact; }\nstart { next d; }", "this is 16 bits wide"),
    ("layout l { a: 8; b: 8; }\ndecoder d: l { extract a, b; goto t; }\ntable t { key d.a exact, d.b exact;\n  entry @@1 => flood; }\nstart { next d; }", "has 2 key field(s), this entry gives 1"),
    ("layout l { a: 8; }\ndecoder d: l { extract a; goto t; }\ntable t { key d.a prefix; entry @@1/9 => flood; }\nstart { next d; }", "prefix length 9 is longer"),
    ("layout l { a: 8; }\ndecoder d: l { extract a; goto t; }\ntable t { key d.a exact; entry @@1/4 => flood; }\nstart { next d; }", "does not suit a exact key"),
    ("layout l { a: 8; }\ndecoder d: l { extract a; goto t; }\ntable t { key d.a exact; entry 1 => output @@in_port; }\nstart { next d; }", "port must be a number"),
    ("layout l { a: 8; }\ndecoder d: l { extract a; goto t; }\ntable t { key d.a @@fuzzy; }\nstart { next d; }", "unknown match kind `fuzzy`"),
    ("start { @@jump; }", "unknown statement `jump`"),
    ("@@layout l { a: 8; }", "no `start"),
    ("param p: int = 3;\nstart { if in_port in @@p { pass; } }", "is not a `ports` parameter"),
    ("start { if @@nothing == 1 { pass; } }", "unknown name `nothing`"),
    ("layout l { a: 8; }\ndecoder d: l { extract a; goto t; }\ntable t { key d.a exact; idle_timeout @@5; }\nstart { next d; }", "nothing `learn`s into it"),
    ("start { pass; }\n@@start { pass; }", "one `start` block"),
    ("start { match link { @@token => pass; } }", "unknown constant `token`"),
    ("start { match in_port { _ => pass; @@1 => pass; } }", "unreachable arm"),
    ("layout l { a: 8; size = @@b * 4; }\nstart { pass; }", "has no field `b`"),
    ("layout l { a: 8; checksum @@a; }\nstart { pass; }", "a checksum field is 16 bits"),
    ("start { if in_port == 1 { pass; }\n@@", "expected a statement, found the end"),
    ("param t: seconds = 1;\nlayout l { a: 8; }\ndecoder d: l { extract a; goto x; }\ntable x { key d.a exact; capacity @@t; }\nstart { next d; }", "parameter `t` is seconds, here an int is needed"),
    ("layout l { a: 8; }\ndecoder d: l { extract a; goto t; }\ntable t { key d.a exact; entry @@1 priority 3 => flood; }\nstart { next d; }", "`priority` is for prefix and ternary"),
    ("drops x;\nlayout l { a: 8; }\ndecoder d: l { extract a; if d.a == 1 { drop x; } drop x; }\nstart { next d; next @@d; }", "unreachable: the statement before"),
];

fn err(src: &str) -> String {
    match compile("t.stv", src, &HashMap::new()) {
        Ok(_) => panic!("compiled but should not"),
        Err(e) => e,
    }
}

fn position(src: &str) -> (String, usize, usize) {
    let at = src.find("@@").expect("marker");
    let before = &src[..at];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().unwrap().chars().count() + 1;
    (src.replacen("@@", "", 1), line, col)
}

#[test]
fn base_program_compiles() {
    compile("t.stv", BASE, &HashMap::new()).unwrap();
}

#[test]
fn every_broken_program_points_at_its_mistake() {
    assert!(BROKEN.len() >= 30);
    for (text, reason) in BROKEN {
        let (src, line, col) = position(text);
        let err = match compile("t.stv", &src, &HashMap::new()) {
            Ok(_) => panic!("compiled but should not:\n{src}"),
            Err(e) => e,
        };
        let head = err.lines().next().unwrap();
        assert!(
            head.starts_with(&format!("t.stv:{line}:{col}: ")),
            "expected t.stv:{line}:{col}, got `{head}` for\n{src}"
        );
        assert!(head.contains(reason), "`{head}` does not say `{reason}`");
        // The second line is the source line, the third underlines from the column.
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 3, "{err}");
        assert_eq!(
            lines[1].trim_start(),
            src.lines().nth(line - 1).unwrap_or("").trim_start()
        );
        let caret = lines[2].find('^').expect("underline");
        assert_eq!(caret - 2, col - 1, "underline misplaced:\n{err}");
    }
}

#[test]
fn deep_nesting_and_long_expressions_are_errors_not_overflows() {
    let deep = format!(
        "start {{ if {}1{} {{ pass; }} }}",
        "(".repeat(5000),
        ")".repeat(5000)
    );
    assert!(err(&deep).contains("nested more than"));
    let long = format!("start {{ if 1{} {{ pass; }} }}", " + 1".repeat(5000));
    assert!(err(&long).contains("longer than"));
    let chain = format!("start {{ {} pass; }}", "if 1 { pass; } else ".repeat(5000));
    assert!(compile("t.stv", &chain, &HashMap::new()).is_err());
}

/// Session 25: past 65,536 tables a `goto` wrapped to table 0 and past 65,536 names a
/// `count` counted into the first (indices of 16 bits), silently; a chain of 100,000
/// tables, each missing to the next, overflowed the stack in the loop check (an abort,
/// exit 134). Now at most 1,024 tables, counters and parameters, each refused at the
/// first past the bound; 1,024 chained tables compile.
#[test]
fn programs_past_the_table_counter_and_parameter_bounds_are_errors() {
    let counters: String = (0..70_000).map(|i| format!("count c{i}; ")).collect();
    let e = err(&format!("start {{ {counters}pass; }}"));
    assert!(
        e.starts_with("t.stv:1:") && e.contains("at most 1024 counters"),
        "{e}"
    );
    let params: String = (0..70_000)
        .map(|i| format!("param p{i}: int = 1;\n"))
        .collect();
    let e = err(&format!("{params}start {{ pass; }}"));
    assert!(
        e.starts_with("t.stv:1025:") && e.contains("at most 1024 parameters"),
        "{e}"
    );
    let tables = |n: usize| {
        let mut s = String::from("layout l { a: 8; }\ndecoder d: l { extract a; goto t0; }\n");
        for i in 0..n {
            let miss = if i + 1 < n {
                format!("goto t{};", i + 1)
            } else {
                "pass;".into()
            };
            s += &format!("table t{i} {{ key d.a exact; miss {{ {miss} }} }}\n");
        }
        s + "start { next d; }\n"
    };
    compile("t.stv", &tables(1024), &HashMap::new()).unwrap();
    let e = err(&tables(100_000));
    assert!(
        e.starts_with("t.stv:1027:") && e.contains("at most 1024 tables"),
        "{e}"
    );
}

const WORDS: &[&str] = &[
    "layout",
    "decoder",
    "table",
    "start",
    "drops",
    "param",
    "key",
    "exact",
    "prefix",
    "ternary",
    "entry",
    "miss",
    "extract",
    "short",
    "peek",
    "repeat",
    "if",
    "else",
    "match",
    "set",
    "learn",
    "remove",
    "count",
    "output",
    "flood",
    "drop",
    "goto",
    "next",
    "pass",
    "in",
    "size",
    "checksum",
    "capacity",
    "idle_timeout",
    "hard_timeout",
    "priority",
    "mask",
    "int",
    "seconds",
    "ports",
    "link",
    "in_port",
    "ethernet",
    "_",
    "a",
    "b",
    "e",
    "mac",
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    ";",
    ":",
    ",",
    ".",
    "=",
    "=>",
    "->",
    "==",
    "!=",
    "<",
    "<=",
    "&&",
    "||",
    "!",
    "&",
    "|",
    "^",
    "+",
    "-",
    "*",
    "/",
    "0",
    "1",
    "48",
    "0x8100",
    "10.0.0.1",
    "02:00:00:00:00:01",
    "65536",
    "340282366920938463463374607431768211456",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Random token streams: the parser answers Ok or a located error, never panics.
    #[test]
    fn random_tokens_never_panic(toks in proptest::collection::vec(0..WORDS.len(), 0..80)) {
        let src: Vec<&str> = toks.iter().map(|&i| WORDS[i]).collect();
        let src = src.join(" ");
        if let Err(d) = parse_only(&src) {
            prop_assert!(d.span.start <= src.len());
            let _ = d.render("r.stv", &src);
        }
        let _ = compile("r.stv", &src, &HashMap::new());
    }

    /// Token streams that start as the valid program and are cut or spliced anywhere.
    #[test]
    fn mangled_valid_programs_never_panic(cut in 0..BASE.len(), ins in 0..WORDS.len()) {
        let cut = (0..=cut).rev().find(|&i| BASE.is_char_boundary(i)).unwrap_or(0);
        let src = format!("{} {} {}", &BASE[..cut], WORDS[ins], &BASE[cut..]);
        let _ = compile("m.stv", &src, &HashMap::new());
        let _ = compile("m.stv", &BASE[..cut], &HashMap::new());
    }
}
