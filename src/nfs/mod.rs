//! The NF library: the NF interface and one file per NF.
