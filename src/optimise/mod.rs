//! Chain optimisations that never change the output: FastPath (header-action
//! consolidation). Imports `packet`, `flow` and `nfs`; the runtime drives it.

pub mod fastpath;
