//! Internals that integration tests and benchmarks reach and front ends must not: a tree's
//! handle, to read and evict its nodes directly (measuring the store's rebuilds, say). Nothing
//! in the server calls this module.

use std::sync::Arc;

use crate::workbench::{TreeHandle, Workbench, WorkbenchError};

/// A tree's handle (loaded from the store if it is not in memory).
pub fn tree(wb: &Workbench, id: u64) -> Result<Arc<TreeHandle>, WorkbenchError> {
    wb.trees().tree(id)
}

#[cfg(test)]
pub(crate) use scratch::Scratch;

#[cfg(test)]
mod scratch {
    /// An empty folder of a test's own under the system's temporary folder, removed with what it
    /// holds when dropped (`name` and the process id keep tests and test runs apart).
    pub(crate) struct Scratch(std::path::PathBuf);

    impl Scratch {
        pub(crate) fn new(name: &str) -> Scratch {
            let dir = std::env::temp_dir().join(format!("simtree-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Scratch(dir)
        }
    }

    impl std::ops::Deref for Scratch {
        type Target = std::path::Path;

        fn deref(&self) -> &std::path::Path {
            &self.0
        }
    }

    impl AsRef<std::path::Path> for Scratch {
        fn as_ref(&self) -> &std::path::Path {
            &self.0
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
