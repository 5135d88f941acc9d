//! The processes that run jobs — `simtree worker`, or a server's own worker — and what every
//! process on a PostgreSQL database shares: the LLM backend of its settings and the limits of
//! the LLM endpoints (`llm/endpoints.rs`).

use std::path::Path;
use std::sync::Arc;

use super::error::FleetError;
use crate::backend::Backend;
use crate::scenario::ScenarioLibrary;
use crate::workbench::jobs::JobsConfig;
use crate::workbench::{Limits, Workbench};

/// The LLM backend of the settings file `file` layered over the environment (see
/// [`Backend::from_settings`]).
pub fn backend(file: Option<&Path>) -> Result<Backend, FleetError> {
    Ok(Backend::from_settings(file, None)?)
}

/// The handle that stops sharing: notify it, then await the task (the process leaves the board).
type Sharing = (Arc<tokio::sync::Notify>, tokio::task::JoinHandle<()>);

/// With PostgreSQL, shares the limits of the backend's LLM endpoints with every other process on
/// the database (see [`crate::llm::endpoints`]); call it inside the runtime that runs the calls.
/// Without real providers, or when the board cannot be set up (said on stderr), each endpoint's
/// limit is this process's alone.
pub(crate) async fn share_endpoint_load(backend: &Backend, database_url: &str) -> Option<Sharing> {
    let Backend::Provider(providers) = backend else {
        return None;
    };
    let holder = crate::store::lease::Lease::this_process(crate::store::lease::DEFAULT_LEASE).holder;
    match crate::store::load::PgBoard::connect(database_url, holder).await {
        Ok(board) => providers.pool.share_load(Arc::new(board)),
        Err(e) => {
            eprintln!("simtree: LLM endpoint limits are not shared with other processes: {e}");
            None
        }
    }
}

/// The workbench of a process that runs jobs: the store opened without the server lease (it
/// writes only its jobs' nodes, fenced by their claims).
pub(crate) fn worker_bench(
    library: &ScenarioLibrary,
    assets: &Path,
    sandbox: crate::abm::Sandbox,
    llm_config: Option<&Path>,
    url: &str,
) -> Result<Arc<Workbench>, FleetError> {
    let mut wb = Workbench::new(library.clone(), backend(llm_config)?, Limits::default());
    wb.setup().use_sandbox(sandbox).use_assets(assets);
    let store = crate::store::Store::open_postgres_with(url, None).map_err(FleetError::Postgres)?;
    wb.setup().attach_store_for_jobs(store)?;
    Ok(Arc::new(wb))
}

/// `simtree worker`: takes runs from the queue of `config`, `concurrency` at a time, sharing the
/// endpoint limits with the other processes on the database, until SIGTERM or ctrl-c (its
/// unfinished runs then go back to the queue).
pub(crate) async fn run_worker(wb: Arc<Workbench>, config: JobsConfig, concurrency: usize) -> Result<(), FleetError> {
    let sharing = share_endpoint_load(wb.backend(), &config.url).await;
    let worked = wb.jobs().work(config, concurrency, "worker", crate::http::stop_requested()).await;
    if let Some((stop, task)) = sharing {
        stop.notify_one();
        let _ = task.await;
    }
    Ok(worked?)
}
