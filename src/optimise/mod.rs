//! Chain optimisations that never change the output: FastPath (header-action
//! consolidation) and PA-Flow aggregation between stages. Imports `packet`, `flow`,
//! `io` and `nfs`; the runtime drives them.

pub mod aggregate;
pub mod fastpath;
