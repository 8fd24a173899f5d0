//! Executes a chain.
