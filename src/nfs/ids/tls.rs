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
}

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
}
