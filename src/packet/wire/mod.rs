//! Zero-copy typed views over header bytes, one file per protocol.
