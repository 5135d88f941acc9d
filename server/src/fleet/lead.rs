//! Leading the database: the workbench on its store with the lease taken, the job queue, and
//! beside the router the endpoint-load board, the job dispatch and the cache sweep. A server
//! leads at start-up or, as a follower, when it takes over; both go through [`lead`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::error::FleetError;
use super::site::StoreSite;
use super::worker::{backend, share_endpoint_load};
use crate::http::{Access, AppState, Limits};
use crate::scenario::ScenarioLibrary;
use crate::store::lease::{Holder, Lease};
use crate::workbench::Workbench;
use crate::workbench::jobs::JobsConfig;

/// What `serve` builds to lead its database: at start-up, and again when a follower takes over
/// from a leader whose lease lapsed.
pub struct LeaderPlan {
    pub(crate) library: ScenarioLibrary,
    pub(crate) assets: PathBuf,
    pub(crate) sandbox: crate::abm::Sandbox,
    pub(crate) llm_config: Option<PathBuf>,
    pub(crate) prices: Option<PathBuf>,
    pub(crate) limits: Limits,
    pub(crate) storage: StoreSite,
    /// The job queue runs go through (PostgreSQL only), if they do.
    pub(crate) queue: Option<JobsConfig>,
    pub(crate) static_dir: PathBuf,
    pub(crate) access: Arc<Access>,
    pub(crate) shutdown_grace: Duration,
}

/// A leading server's app and the tasks it started beside its router.
pub struct Leader {
    pub(super) app: Arc<AppState>,
    sharing: Option<(Arc<tokio::sync::Notify>, tokio::task::JoinHandle<()>)>,
}

impl Leader {
    /// Stops what [`lead`] started beside the router (the endpoint-load board), then closes the
    /// store: its last writes are committed and the lease released before the process ends,
    /// whatever connections still hold the app.
    pub(crate) async fn stop(self) {
        if let Some((stop, task)) = self.sharing {
            stop.notify_one();
            let _ = task.await;
        }
        if let Some(store) = self.app.wb.store().cloned() {
            let closed = tokio::task::spawn_blocking(move || store.close(Duration::from_secs(30))).await;
            if !matches!(closed, Ok(true)) {
                eprintln!("simtree: the store did not close in time; its lease lapses by itself");
            }
        }
    }
}

/// The leader's app of `plan`, built as a starting server builds it: the workbench on its store
/// (with PostgreSQL, taking the lease `me`: while another process holds it, who does), the job
/// queue, then — in the runtime — the endpoint-load board, the job dispatch and the cache sweep.
pub async fn lead(plan: Arc<LeaderPlan>, me: Option<Lease>) -> Result<Result<Leader, Holder>, FleetError> {
    let built = {
        let plan = plan.clone();
        tokio::task::spawn_blocking(move || build_leader(&plan, me)).await??
    };
    let app = match built {
        Ok(app) => Arc::new(app),
        Err(holder) => return Ok(Err(holder)),
    };
    let sharing = match plan.storage.database_url() {
        Some(url) => share_endpoint_load(app.wb.backend(), url).await,
        None => None,
    };
    if plan.queue.is_some() {
        tokio::spawn(app.wb.jobs().dispatch());
    }
    // Live simulators of stored trees are a cache: keep it within --cache-mb.
    tokio::spawn(app.wb.upkeep().sweep_cache());
    Ok(Ok(Leader { app, sharing }))
}

/// The blocking part of [`lead`]: the workbench, its store and its job queue.
pub(crate) fn build_leader(plan: &LeaderPlan, me: Option<Lease>) -> Result<Result<AppState, Holder>, FleetError> {
    let mut wb = Workbench::new(plan.library.clone(), backend(plan.llm_config.as_deref())?, plan.limits.clone());
    if let Some(path) = &plan.prices {
        wb.setup().use_prices(crate::llm::price::PriceTable::load(path)?);
    }
    wb.setup().use_sandbox(plan.sandbox).use_assets(&plan.assets);
    let store = match (plan.storage.database_url(), me) {
        (Some(url), Some(me)) => {
            match crate::store::Store::lead_postgres(url, Some(me)).map_err(FleetError::Postgres)? {
                Ok(store) => Some(store),
                Err(holder) => return Ok(Err(holder)),
            }
        }
        _ => plan.storage.open()?,
    };
    // The queue before the trees: it reads the runs the last leader left to jobs, which are
    // adopted; `attach_store` then marks only the other runs in flight interrupted.
    if let Some(config) = &plan.queue {
        wb.setup().enable_jobs(config.clone())?;
        eprintln!("simtree: runs go through the job queue");
    }
    if let Some(store) = store {
        eprintln!("simtree: trees are kept in {}", store.location);
        wb.setup().attach_store(store)?;
    } else {
        eprintln!("simtree: --ephemeral: trees are kept in memory only");
    }
    let mut app = AppState::new(wb);
    app.access = plan.access.clone();
    app.shutdown_grace = plan.shutdown_grace;
    app.static_dir = plan.static_dir.clone();
    Ok(Ok(app))
}
