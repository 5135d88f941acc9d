//! Internals that integration tests and benchmarks reach and front ends must not: a tree's
//! handle, to read and evict its nodes directly (measuring the store's rebuilds, say). Nothing
//! in the server calls this module.

use std::sync::Arc;

use crate::workbench::{TreeHandle, Workbench, WorkbenchError};

/// A tree's handle (loaded from the store if it is not in memory).
pub fn tree(wb: &Workbench, id: u64) -> Result<Arc<TreeHandle>, WorkbenchError> {
    wb.trees().tree(id)
}
