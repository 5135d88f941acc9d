//! What the HTTP handlers share: the workbench (trees, runs, clients) and what only the HTTP
//! layer needs — the web UI's files and the access policy.

use std::path::PathBuf;
use std::sync::Arc;

pub use crate::backend::{Backend, Providers};
pub use crate::workbench::{Limits, RunResult, TreeHandle, Workbench};

pub struct AppState {
    pub wb: Arc<Workbench>,
    /// The web UI's files (`frontend/dist`, or the copy embedded in the binary).
    pub static_dir: PathBuf,
    /// Origins, hosts and the token (see `http::guard`).
    pub access: Arc<super::Access>,
    /// One permit per open WebSocket (`Limits::max_websockets`).
    pub ws_slots: Arc<tokio::sync::Semaphore>,
}

impl AppState {
    /// HTTP state around `wb` with the default UI folder and an open loopback policy.
    pub fn new(wb: Workbench) -> AppState {
        AppState {
            ws_slots: Arc::new(tokio::sync::Semaphore::new(wb.limits.max_websockets.max(1))),
            wb: Arc::new(wb),
            static_dir: super::default_static_dir(),
            access: Arc::new(super::Access::default()),
        }
    }
}
