//! Where a server keeps its trees: in memory, in a data folder's embedded database, or in a
//! PostgreSQL database shared by several servers (one leader at a time, `store/lease.rs`).

use std::path::PathBuf;
use std::time::Duration;

use super::error::FleetError;
use crate::store::Store;

#[derive(Clone, Debug)]
pub enum StoreSite {
    /// Nothing kept: the trees die with the process (`--ephemeral`).
    Memory,
    /// The embedded database in this folder.
    Folder(PathBuf),
    /// A PostgreSQL database, and the length of the server lease on it.
    Postgres { url: String, lease: Duration },
}

impl StoreSite {
    /// Opens the store (`None` for [`StoreSite::Memory`]), taking no lease: [`super::lead`] takes
    /// it for a leader.
    pub(crate) fn open(&self) -> Result<Option<Store>, FleetError> {
        match self {
            StoreSite::Memory => Ok(None),
            StoreSite::Folder(dir) => {
                Store::open_sqlite(dir).map(Some).map_err(|source| FleetError::Folder { dir: dir.clone(), source })
            }
            StoreSite::Postgres { url, lease } => {
                Store::open_postgres_with(url, Some(*lease)).map(Some).map_err(FleetError::Postgres)
            }
        }
    }

    /// The PostgreSQL database, if the trees are kept in one.
    pub(crate) fn database_url(&self) -> Option<&str> {
        match self {
            StoreSite::Postgres { url, .. } => Some(url),
            _ => None,
        }
    }
}
