//! Flow keys, hashing, bounded flow tables with timeouts.
