//! TLS record boundaries of one flow, just enough to know when it starts carrying
//! application data: from then on Suricata 7 (default `encryption-handling`) inspects
//! none of the flow's payloads (its TLS parser sets "no payload inspection" on the flow).

/// Per flow, both directions; `Copy` and fixed size (no allocation per flow).
#[derive(Clone, Copy, Debug, Default)]
pub struct TlsRecords {
    /// 0 = not decided, 1 = TLS, 2 = not TLS.
    verdict: u8,
    /// Record header bytes gathered so far, per direction.
    head: [[u8; 5]; 2],
    head_len: [u8; 2],
    /// Body bytes of the current record still to skip, per direction.
    left: [u32; 2],
    /// A handshake record came from the server (direction 1).
    server_hs: bool,
    /// An HTTP `CONNECT` opened the flow: `ASKED`, then `ANSWERED` once the answer's
    /// status is 2xx; at its header's end the protocol is detected again (see `tunnel`).
    tunnel: u8,
    /// Bytes of the answer's status line checked so far (its first 10, `HTTP/1.x 2`).
    status: u8,
    /// Bytes of the answer's header end (`\r\n\r\n`) matched so far.
    header_end: u8,
}

const ASKED: u8 = 1;
const ANSWERED: u8 = 2;

/// TLS content type of application data records.
const APPLICATION_DATA: u8 = 23;
const HANDSHAKE: u8 = 22;

impl TlsRecords {
    /// The flow is followed as TLS and direction `d`'s last record is complete: Suricata's
    /// TLS parser asks for raw stream inspection at each record's end.
    pub fn record_done(&self, d: usize) -> bool {
        self.verdict == 1 && self.left[d] == 0 && self.head_len[d] == 0
    }

    /// The stream lost bytes (a gap): Suricata's TLS parser does not take gaps, so its
    /// app layer stops for the flow; so does the following of records here.
    pub fn gap(&mut self) {
        self.verdict = 2;
        self.tunnel = 0;
    }

    /// New in-order bytes of direction `d` (0 = to server). `Some(n)` when the first `n`
    /// of them complete the header of an application-data record of a flow detected as
    /// TLS: a handshake record (`16 03 0x`) opened the first bytes the flow carried, as
    /// Suricata's protocol detection needs.
    pub fn feed(&mut self, d: usize, all: &[u8]) -> Option<usize> {
        let mut bytes = all;
        if self.verdict == 0 && !bytes.is_empty() {
            let tls = bytes.len() >= 3 && bytes[0] == 0x16 && bytes[1] == 0x03 && bytes[2] <= 0x04;
            self.verdict = if tls { 1 } else { 2 };
            if d == 0 && bytes.starts_with(b"CONNECT ") {
                self.tunnel = ASKED;
            }
        }
        if self.tunnel != 0 {
            return self.tunnel(d, all);
        }
        if self.verdict != 1 {
            return None;
        }
        let mut app = None;
        while !bytes.is_empty() {
            if self.left[d] > 0 {
                let n = (self.left[d] as usize).min(bytes.len());
                self.left[d] -= n as u32;
                bytes = &bytes[n..];
                continue;
            }
            let h = usize::from(self.head_len[d]);
            let n = (5 - h).min(bytes.len());
            self.head[d][h..h + n].copy_from_slice(&bytes[..n]);
            self.head_len[d] += n as u8;
            bytes = &bytes[n..];
            if self.head_len[d] == 5 {
                let hd = self.head[d];
                self.head_len[d] = 0;
                if hd[1] != 0x03 {
                    // Not a TLS record (lost sync): stop following the flow.
                    self.verdict = 2;
                    return app;
                }
                self.server_hs |= d == 1 && hd[0] == HANDSHAKE;
                // A client's application data before the server's hello is TLS 1.3
                // early data: it does not end the handshake (app-layer-ssl.c).
                if hd[0] == APPLICATION_DATA && app.is_none() && (d == 1 || self.server_hs) {
                    app = Some(all.len() - bytes.len());
                }
                self.left[d] = u32::from(u16::from_be_bytes([hd[3], hd[4]]));
            }
        }
        app
    }

    /// An HTTP `CONNECT` flow's answer (direction 1): a 2xx status makes the bytes after
    /// its header a tunnel whose protocol Suricata detects again (app-layer-htp.c asks
    /// for a protocol change when the first transaction is a `CONNECT` answered 2xx), so
    /// TLS inside is followed as TLS; any other status ends the watch.
    fn tunnel(&mut self, d: usize, all: &[u8]) -> Option<usize> {
        if d != 1 {
            return None;
        }
        if self.tunnel == ASKED {
            // `HTTP/1.x 2`, as the segments bring it: the status's first digit is the
            // line's tenth byte.
            const LINE: &[u8; 10] = b"HTTP/1.x 2";
            for &b in all.iter().take(10 - usize::from(self.status)) {
                let at = usize::from(self.status);
                if b != LINE[at] && at != 7 {
                    self.tunnel = 0;
                    return None;
                }
                self.status += 1;
            }
            if self.status < 10 {
                return None;
            }
            self.tunnel = ANSWERED;
        }
        const END: &[u8; 4] = b"\r\n\r\n";
        for (i, &b) in all.iter().enumerate() {
            self.header_end = if b == END[usize::from(self.header_end)] {
                self.header_end + 1
            } else {
                u8::from(b == b'\r')
            };
            if self.header_end == 4 {
                *self = TlsRecords::default();
                return self.feed(d, &all[i + 1..]).map(|n| n + i + 1);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(t: u8, len: usize) -> Vec<u8> {
        let mut v = vec![t, 3, 3, (len >> 8) as u8, len as u8];
        v.resize(5 + len, 0xaa);
        v
    }

    #[test]
    fn application_data_found_across_any_segmentation() {
        let mut s = rec(22, 300);
        s.extend(rec(20, 1));
        s.extend(rec(22, 40));
        let before = s.len();
        s.extend(rec(23, 100));
        let end = before + 5;
        for cut in 3..s.len() {
            let mut t = TlsRecords::default();
            assert_eq!(t.feed(1, &rec(22, 50)), None);
            let a = t.feed(0, &s[..cut]);
            let b = t.feed(0, &s[cut..]);
            if cut >= end {
                assert_eq!((a, b), (Some(end), None), "cut {cut}");
            } else {
                assert_eq!((a, b), (None, Some(end - cut)), "cut {cut}");
            }
        }
        // The client's application data before the server's hello (TLS 1.3 early data)
        // does not count; the next record after the hello does.
        let mut t = TlsRecords::default();
        assert_eq!(t.feed(0, &s), None);
        assert_eq!(t.feed(1, &rec(22, 50)), None);
        assert_eq!(t.feed(0, &rec(23, 10)), Some(5));
        // Handshake only: never.
        let mut t = TlsRecords::default();
        assert_eq!(t.feed(0, &s[..before]), None);
        // Not TLS: never, whatever follows.
        let mut t = TlsRecords::default();
        assert_eq!(t.feed(0, b"GET / HTTP/1.1\r\n"), None);
        assert_eq!(t.feed(1, &rec(23, 10)), None);
    }

    /// The HTTP `CONNECT` of the merged trace's flow 192.168.1.103:1714 → :8080, cut
    /// anywhere: after its 2xx answer the tunnel is followed as TLS; a refusal, or a
    /// 2xx to another method, keeps the flow HTTP.
    #[test]
    fn a_connect_tunnel_answered_2xx_is_followed_as_tls() {
        let ask = b"CONNECT apache.org:443 HTTP/1.1\r\nHost: apache.org:443\r\n\r\n";
        let yes = b"HTTP/1.0 200 Connection Established\r\nProxy-agent: x\r\n\r\n";
        let mut server = rec(22, 60);
        server.extend(rec(23, 40));
        let app = yes.len() + 60 + 5 + 5;
        let mut answer = yes.to_vec();
        answer.extend(&server);
        // Not cut 1 or 2 bytes into the records: detection decides on the first bytes it
        // is given, which must hold `16 03 0x` (as for a flow's own first bytes).
        for cut in (1..answer.len()).filter(|c| !(yes.len() + 1..yes.len() + 3).contains(c)) {
            let mut t = TlsRecords::default();
            assert_eq!(t.feed(0, ask), None);
            // The client hello comes after the answer; here the server's records ride
            // the answer's segments, cut anywhere.
            let a = t.feed(1, &answer[..cut]);
            let b = t.feed(1, &answer[cut..]);
            if cut < yes.len() {
                // Detection again starts at the server's bytes: a handshake, TLS.
                assert_eq!((a, b), (None, Some(app - cut)), "cut {cut}");
            } else if cut >= app {
                assert_eq!((a, b), (Some(app), None), "cut {cut}");
            } else {
                assert_eq!((a, b), (None, Some(app - cut)), "cut {cut}");
            }
        }
        // The usual order: answer, client hello, server hello, application data.
        let mut t = TlsRecords::default();
        assert_eq!(t.feed(0, ask), None);
        assert_eq!(t.feed(1, yes), None);
        assert_eq!(t.feed(0, &rec(22, 200)), None);
        assert_eq!(t.feed(1, &server), Some(60 + 5 + 5));
        for (first, answer) in [
            (
                &ask[..],
                &b"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n"[..],
            ),
            (
                &b"GET / HTTP/1.1\r\n\r\n"[..],
                &b"HTTP/1.1 200 OK\r\n\r\n"[..],
            ),
        ] {
            let mut t = TlsRecords::default();
            assert_eq!(t.feed(0, first), None);
            assert_eq!(t.feed(1, answer), None);
            assert_eq!(t.feed(0, &rec(22, 200)), None);
            assert_eq!(t.feed(1, &server), None);
        }
    }
}
