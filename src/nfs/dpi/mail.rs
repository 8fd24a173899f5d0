//! The line-based mail and file-transfer protocols: SMTP, POP3, IMAP, FTP control —
//! recognised from the server's greeting or the client's first command. SMTP, POP3 and
//! IMAP stay tentative for a few more chunks so a STARTTLS upgrade is named as nDPI
//! names it (SMTPS, POPS, IMAPS).

use super::{at, starts, starts_ci, AppProto, Ctx, Detector, Scratch, Verdict};

pub(crate) const MAIL: Detector = Detector {
    tcp: true,
    udp: false,
    names: &[
        AppProto::Smtp,
        AppProto::Smtps,
        AppProto::Pop3,
        AppProto::Pops,
        AppProto::Imap,
        AppProto::Imaps,
        AppProto::Ftp,
    ],
    f: mail,
};

// What `Scratch::banner` remembers.
const SEEN_220: u16 = 220;
const SMTP: u16 = 25;
const POP3: u16 = 110;
const IMAP: u16 = 143;

fn contains_ci(d: &[u8], needle: &[u8]) -> bool {
    let d = &d[..d.len().min(256)];
    d.windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle))
}

fn tentative(s: &mut Scratch, code: u16) -> Verdict {
    s.banner = code;
    Verdict::Tentative(match code {
        SMTP => AppProto::Smtp,
        POP3 => AppProto::Pop3,
        _ => AppProto::Imap,
    })
}

/// An IMAP command: an alphanumeric tag, a space, then a known verb.
fn imap_command(d: &[u8]) -> Option<&[u8]> {
    let tag = d.iter().take(16).position(|&b| b == b' ')?;
    if tag == 0
        || !d[..tag]
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'.')
    {
        return None;
    }
    let rest = &d[tag + 1..];
    const VERBS: &[&[u8]] = &[
        b"capability",
        b"login",
        b"starttls",
        b"authenticate",
        b"id ",
        b"select",
        b"list",
        b"noop",
    ];
    VERBS.iter().any(|v| starts_ci(rest, v)).then_some(rest)
}

fn mail(c: &Ctx, s: &mut Scratch, d: &[u8]) -> Verdict {
    // Upgrades of a tentative answer.
    let tls_record = at(d, 0) == 0x16 && at(d, 1) == 3;
    match s.banner {
        SMTP if c.from_client && (starts_ci(d, b"starttls") || tls_record) => {
            return Verdict::Match(AppProto::Smtps)
        }
        POP3 if c.from_client && (starts_ci(d, b"stls") || tls_record) => {
            return Verdict::Match(AppProto::Pops)
        }
        IMAP if c.from_client && tls_record => return Verdict::Match(AppProto::Imaps),
        IMAP if c.from_client => {
            if imap_command(d).is_some_and(|r| starts_ci(r, b"starttls")) {
                return Verdict::Match(AppProto::Imaps);
            }
            return Verdict::Maybe;
        }
        SMTP | POP3 => return Verdict::Maybe,
        _ => {}
    }
    if !c.from_client {
        if c.n > 0 {
            return if s.banner == SEEN_220 {
                Verdict::Maybe
            } else {
                Verdict::No
            };
        }
        if (starts(d, b"220 ") || starts(d, b"220-")) && d.len() >= 6 {
            if contains_ci(d, b"smtp") || contains_ci(d, b"mail") {
                return tentative(s, SMTP);
            }
            if contains_ci(d, b"ftp") || c.port(21) {
                return Verdict::Match(AppProto::Ftp);
            }
            if c.port(25) || c.port(587) {
                return tentative(s, SMTP);
            }
            s.banner = SEEN_220;
            return Verdict::Maybe;
        }
        if starts(d, b"+OK") {
            return tentative(s, POP3);
        }
        if starts(d, b"* OK") || starts(d, b"* PREAUTH") {
            return tentative(s, IMAP);
        }
        return if c.port(21) || c.port(25) || c.port(110) || c.port(143) {
            Verdict::Maybe
        } else {
            Verdict::No
        };
    }
    // Client commands.
    if starts_ci(d, b"ehlo ") || starts_ci(d, b"helo ") {
        return tentative(s, SMTP);
    }
    let ftp_or_pop = starts_ci(d, b"user ") || starts_ci(d, b"pass ");
    if ftp_or_pop && (s.banner == SEEN_220 || c.port(21)) {
        return Verdict::Match(AppProto::Ftp);
    }
    if ftp_or_pop && c.port(110) || starts_ci(d, b"capa\r") || starts_ci(d, b"stls\r") {
        return tentative(s, POP3);
    }
    const FTP_ONLY: &[&[u8]] = &[b"syst\r", b"feat\r", b"pwd\r", b"type ", b"pasv\r", b"epsv"];
    if FTP_ONLY.iter().any(|v| starts_ci(d, v)) {
        return Verdict::Match(AppProto::Ftp);
    }
    if imap_command(d).is_some() {
        return tentative(s, IMAP);
    }
    if (c.n == 0 && s.banner != SEEN_220) || c.n > 2 {
        Verdict::No
    } else {
        Verdict::Maybe
    }
}
