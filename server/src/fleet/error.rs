//! Why a server or a worker could not start or stopped: one variant per cause, each printed as
//! the one line the CLI writes before exit status 1.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// The LLM settings (environment, `--llm-config`) are wrong.
    #[error(transparent)]
    Backend(#[from] crate::backend::BackendError),
    /// `--prices` names a price table that cannot be read.
    #[error(transparent)]
    Prices(#[from] crate::llm::price::PriceError),
    #[error("cannot open the PostgreSQL database: {0}")]
    Postgres(#[source] StoreError),
    #[error("cannot open the data folder {}: {source}", .dir.display())]
    Folder {
        dir: PathBuf,
        #[source]
        source: StoreError,
    },
    /// The store opened but the workbench could not read its trees from it.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The job queue could not be set up, or a worker stopped on an error.
    #[error(transparent)]
    Jobs(#[from] crate::workbench::jobs::JobError),
    /// A blocking start-up step (opening the store, building the workbench) crashed.
    #[error("the server's start-up stopped: {0}")]
    StartUp(#[from] tokio::task::JoinError),
    #[error("cannot serve on {addr}: {source}")]
    Serve {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("--advertise {0}: expected http://host[:port] (the address other servers reach this one at)")]
    Advertise(String),
    #[error(
        "serving on {0} with a PostgreSQL database: pass --advertise http://<this machine's address>:{port} \
         (or set SIMTREE_ADVERTISE) so that the other servers on the database can reach this one when it leads",
        port = .0.port()
    )]
    Unreachable(SocketAddr),
    /// Another server holds the database, and this one has no lease to follow it with (it has
    /// no PostgreSQL database to wait on).
    #[error("the database is held by another server and this one cannot follow it")]
    NoLease,
    /// This server led, and another process took its lease: it stopped.
    #[error("stopped: {0}")]
    Deposed(String),
}
