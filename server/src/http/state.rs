//! What the HTTP handlers share: the workbench (trees, runs, clients) and what only the HTTP
//! layer needs — the web UI's files and the access policy.

use std::path::PathBuf;
use std::sync::Arc;

pub use crate::backend::{Backend, Providers};
pub use crate::workbench::{Limits, RunResult, TreeHandle, Workbench};

pub struct AppState {
    pub(crate) wb: Arc<Workbench>,
    /// The web UI's files (`frontend/dist`, or the copy embedded in the binary).
    pub(crate) static_dir: PathBuf,
    /// Origins, hosts and the token (see `http::guard`).
    pub(crate) access: Arc<super::Access>,
    /// One permit per open WebSocket (`Limits::max_websockets`).
    pub(crate) ws_slots: Arc<tokio::sync::Semaphore>,
    /// Set when the server was asked to stop (SIGTERM, Ctrl-C): `/ready` answers 503 and
    /// requests that change something are refused while the runs in flight finish.
    pub(crate) draining: std::sync::atomic::AtomicBool,
    /// How long runs in flight may take to finish once the server was asked to stop, before
    /// they are cancelled (`serve --shutdown-grace-secs`).
    pub(crate) shutdown_grace: std::time::Duration,
}

/// The default of `serve --shutdown-grace-secs`.
pub(crate) const DEFAULT_SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(20);

impl AppState {
    /// HTTP state around `wb` with the default UI folder and an open loopback policy.
    pub(crate) fn new(wb: Workbench) -> AppState {
        AppState {
            ws_slots: Arc::new(tokio::sync::Semaphore::new(wb.limits().max_websockets.max(1))),
            wb: Arc::new(wb),
            static_dir: super::default_static_dir(),
            access: Arc::new(super::Access::default()),
            draining: Default::default(),
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
        }
    }
}
