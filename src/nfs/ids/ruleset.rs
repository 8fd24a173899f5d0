//! A parsed rule file: the rules that loaded, warnings for those that did not, and the
//! Aho-Corasick prefilters that pick candidate rules per buffer.

use std::collections::HashSet;
use std::fmt;

use aho_corasick::automaton::Automaton;
use aho_corasick::dfa::DFA;
use aho_corasick::{Anchored, MatchKind};

/// Shortest pattern worth a place in a prefilter automaton.
const MIN_PREFILTER: usize = 3;

use super::lexer::{rule_lines, split_rule};
use super::rule::{build, Buf, Kind, Rule, Side};
use super::vars::Vars;

/// A rule that was skipped: where, which sid (if readable), which keyword and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    pub line: usize,
    pub sid: Option<u32>,
    pub keyword: String,
    pub reason: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}", self.line)?;
        if let Some(s) = self.sid {
            write!(f, " sid {s}")?;
        }
        write!(f, ": `{}`: {}; rule skipped", self.keyword, self.reason)
    }
}

/// Candidate rules for one buffer: those whose prefilter pattern occurs, plus those
/// without one.
pub(crate) struct Prefilter {
    pub buf: Buf,
    ac: Option<DFA>,
    pat_rule: Vec<u32>,
    max_len: usize,
    pub always: Vec<u32>,
    /// For an automaton over two rule sets ([`Prefilter::union`]): per pattern, whether
    /// its rule is of the second set.
    second: Vec<bool>,
}

impl Prefilter {
    fn build(buf: Buf, rules: &[Rule], ids: &[u32]) -> Prefilter {
        let mut pats: Vec<&[u8]> = Vec::new();
        let mut pat_rule = Vec::new();
        let mut always = Vec::new();
        for &i in ids {
            match &rules[i as usize].prefilter {
                // One- and two-byte patterns hit nearly everywhere: cheaper to try the rule.
                Some((b, p)) if *b == buf && p.len() >= MIN_PREFILTER => {
                    pats.push(p);
                    pat_rule.push(i);
                }
                _ => always.push(i),
            }
        }
        // Case-insensitive so one automaton serves nocase and exact contents; the full
        // match afterwards checks case.
        // A DFA walked by `scan`, without the crate's prefilter: on payloads it kept
        // falling back to the start state and re-running the prefilter (~20 instructions
        // a byte for the overlapping iterator).
        let ac = (!pats.is_empty()).then(|| {
            DFA::builder()
                .ascii_case_insensitive(true)
                .match_kind(MatchKind::Standard)
                .prefilter(false)
                .build(&pats)
                .expect("prefilter automaton of a bounded rule set")
        });
        let max_len = pats.iter().map(|p| p.len()).max().unwrap_or(0);
        Prefilter {
            buf,
            ac,
            pat_rule,
            max_len,
            always,
            second: Vec::new(),
        }
    }

    /// One automaton for the patterns of rule sets `a` and `b`, so a packet that both
    /// sets inspect is scanned once; [`Prefilter::hits_split`] says which set each hit is
    /// of (the `always` rules stay with the sets' own prefilters).
    fn union(buf: Buf, rules: &[Rule], a: &[u32], b: &[u32]) -> Prefilter {
        let ids: Vec<u32> = a.iter().chain(b).copied().collect();
        let mut p = Prefilter::build(buf, rules, &ids);
        p.second = p.pat_rule.iter().map(|i| b.contains(i)).collect();
        p.always.clear();
        p
    }

    /// Calls `f(rule, second)` for each occurrence of a rule's pattern in `hay`.
    pub fn hits_split(&self, hay: &[u8], mut f: impl FnMut(u32, bool)) {
        self.scan(hay, |k, _| f(self.pat_rule[k], self.second[k]));
    }

    /// Calls `f(pattern, end)` for each occurrence of a pattern in `hay`, in the order
    /// of an overlapping search (by end, then as the automaton lists them).
    #[inline]
    fn scan(&self, hay: &[u8], mut f: impl FnMut(usize, usize)) {
        let Some(ac) = &self.ac else { return };
        let Ok(mut sid) = ac.start_state(Anchored::No) else {
            return;
        };
        for (at, &b) in hay.iter().enumerate() {
            sid = ac.next_state(Anchored::No, sid, b);
            // Without a prefilter the only special states are dead (never reached by
            // an unanchored standard search) and match states.
            if ac.is_special(sid) && ac.is_match(sid) {
                for k in 0..ac.match_len(sid) {
                    f(ac.match_pattern(sid, k).as_usize(), at + 1);
                }
            }
        }
    }

    /// Calls `f(rule, end)` for each occurrence of a rule's pattern in `hay`.
    pub fn hits_at(&self, hay: &[u8], mut f: impl FnMut(u32, usize)) {
        self.scan(hay, |k, end| f(self.pat_rule[k], end));
    }

    /// The rules that have a pattern in this automaton.
    pub fn pattern_rules(&self) -> &[u32] {
        &self.pat_rule
    }

    /// Longest pattern: a scan of new bytes starts this many bytes minus one earlier.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Calls `f` with each rule whose pattern occurs in `hay` (possibly more than once).
    pub fn hits(&self, hay: &[u8], mut f: impl FnMut(u32)) {
        self.scan(hay, |k, _| f(self.pat_rule[k]));
    }
}

/// Rules by how they run, with their prefilters.
pub struct RuleSet {
    pub(crate) rules: Vec<Rule>,
    pub(crate) packet: Prefilter,
    pub(crate) stream: Prefilter,
    /// The anchored stream rules alone (`offset`/`depth`/`startswith`): the ones also
    /// tried on the packets of reassembled flows.
    pub(crate) stream_anchored: Prefilter,
    /// `packet` with `stream`, and with `stream_anchored`: one scan of a TCP payload for
    /// both sets (two scans were a third of a run on 1kxun.pcap).
    pub(crate) packet_stream: Prefilter,
    pub(crate) packet_anchored: Prefilter,
    /// Prefilters of HTTP rules triggered on the request side (incl. `Either` rules).
    pub(crate) http_req: Vec<Prefilter>,
    pub(crate) http_resp: Vec<Prefilter>,
    /// Per side (request, response): rules with a body group whose prefilter is not on
    /// a body buffer, so body bytes alone cannot pick them (tried on every body event).
    pub(crate) body_always: [Vec<u32>; 2],
}

impl RuleSet {
    /// Parses rule text. Rules that cannot be loaded are reported, never misread.
    pub fn parse(text: &str, vars: &Vars) -> (RuleSet, Vec<Warning>) {
        let mut rules = Vec::new();
        let mut warnings = Vec::new();
        let mut sids = HashSet::new();
        for (line, t) in rule_lines(text) {
            let raw = match split_rule(line, &t) {
                Ok(r) => r,
                Err(reason) => {
                    warnings.push(Warning {
                        line,
                        sid: None,
                        keyword: "syntax".into(),
                        reason,
                    });
                    continue;
                }
            };
            match build(&raw, vars) {
                Ok(r) => {
                    if !sids.insert((r.gid, r.sid)) {
                        warnings.push(Warning {
                            line,
                            sid: Some(r.sid),
                            keyword: "sid".into(),
                            reason: "duplicate sid".into(),
                        });
                    } else {
                        rules.push(r);
                    }
                }
                Err((sid, s)) => warnings.push(Warning {
                    line,
                    sid,
                    keyword: s.keyword,
                    reason: s.reason,
                }),
            }
        }
        (RuleSet::from_rules(rules), warnings)
    }

    fn from_rules(rules: Vec<Rule>) -> RuleSet {
        let of = |k: Kind| -> Vec<u32> {
            (0..rules.len() as u32)
                .filter(|&i| rules[i as usize].kind == k)
                .collect()
        };
        let packet = Prefilter::build(Buf::Payload, &rules, &of(Kind::Packet));
        let stream = Prefilter::build(Buf::Payload, &rules, &of(Kind::Stream));
        let anchored: Vec<u32> = of(Kind::Stream)
            .into_iter()
            .filter(|&i| rules[i as usize].anchored)
            .collect();
        let stream_anchored = Prefilter::build(Buf::Payload, &rules, &anchored);
        let packet_stream =
            Prefilter::union(Buf::Payload, &rules, &of(Kind::Packet), &of(Kind::Stream));
        let packet_anchored = Prefilter::union(Buf::Payload, &rules, &of(Kind::Packet), &anchored);
        let http = of(Kind::Http);
        let side_filters = |want: Side| -> Vec<Prefilter> {
            let ids: Vec<u32> = http
                .iter()
                .copied()
                .filter(|&i| {
                    let s = rules[i as usize].side;
                    s == want || s == Side::Either
                })
                .collect();
            let mut bufs: Vec<Buf> = ids
                .iter()
                .filter_map(|&i| rules[i as usize].prefilter.as_ref().map(|p| p.0))
                .collect();
            bufs.sort();
            bufs.dedup();
            let mut out: Vec<Prefilter> = bufs
                .iter()
                .map(|&b| {
                    let with: Vec<u32> = ids
                        .iter()
                        .copied()
                        .filter(
                            |&i| matches!(&rules[i as usize].prefilter, Some((pb, _)) if *pb == b),
                        )
                        .collect();
                    Prefilter::build(b, &rules, &with)
                })
                .collect();
            let none: Vec<u32> = ids
                .iter()
                .copied()
                .filter(|&i| rules[i as usize].prefilter.is_none())
                .collect();
            if !none.is_empty() {
                out.push(Prefilter::build(Buf::Payload, &rules, &none));
            }
            out
        };
        let http_req = side_filters(Side::Request);
        let http_resp = side_filters(Side::Response);
        let body_always = [Side::Request, Side::Response].map(|want| {
            http.iter()
                .copied()
                .filter(|&i| {
                    let r = &rules[i as usize];
                    (r.side == want || r.side == Side::Either)
                        && r.groups.iter().any(|g| g.buf.is_body())
                        && !matches!(&r.prefilter, Some((b, p)) if b.is_body() && p.len() >= MIN_PREFILTER)
                })
                .collect()
        });
        RuleSet {
            rules,
            packet,
            stream,
            stream_anchored,
            packet_stream,
            packet_anchored,
            http_req,
            http_resp,
            body_always,
        }
    }

    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    pub(crate) fn has_http(&self) -> bool {
        self.rules
            .iter()
            .any(|r| r.kind == Kind::Http || r.header.proto == super::header::Proto::Http)
    }

    pub(crate) fn has_stream(&self) -> bool {
        self.rules.iter().any(|r| r.kind == Kind::Stream)
    }
}
