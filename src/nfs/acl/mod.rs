//! The IP filter's rule language ([`rule`]) and first-match classifier ([`classify`]).

pub mod cache;
pub mod classify;
pub mod rule;

pub use super::ip_filter::{bpf_key, packed, packed_key, packet_key, Packed};
pub use cache::{KeyMask, VerdictCache};
pub use classify::{Classifier, Key};
pub use rule::{Action, Rule};

/// Most rules one filter holds (the classifier's bitmaps grow with rules × boundaries).
pub const MAX_RULES: usize = 100_000;

/// Parses rule lines; blank and comment lines are skipped. Errors carry the rule number
/// (counting rules only) and the 1-based line, with the reason.
pub fn parse_rules<'a>(
    lines: impl IntoIterator<Item = &'a str>,
) -> Result<Vec<Rule>, (usize, usize, String)> {
    let mut out = Vec::new();
    for (i, l) in lines.into_iter().enumerate() {
        if out.len() == MAX_RULES && !Rule::parse(l).is_ok_and(|r| r.is_none()) {
            return Err((
                out.len() + 1,
                i + 1,
                format!("more than {MAX_RULES} rules in one filter"),
            ));
        }
        match Rule::parse(l) {
            Ok(Some(r)) => out.push(r),
            Ok(None) => {}
            Err(e) => return Err((out.len() + 1, i + 1, e)),
        }
    }
    Ok(out)
}
