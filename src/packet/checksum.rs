//! Checksums (RFC 1071) and incremental updates (RFC 1624).
