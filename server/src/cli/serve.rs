//! `simtree serve`'s lifecycle on a database: lead it, or follow the server that does and take
//! over when its lease lapses; and a job worker's workbench.

use super::*;

/// With PostgreSQL, shares the limits of the backend's LLM endpoints with every other process on
/// the database (see [`crate::llm::endpoints`]); call it inside the runtime that runs the calls.
/// Notify the handle to stop (the process then leaves the board). Without real providers, or when
/// the board cannot be set up (said on stderr), each endpoint's limit is this process's alone.
pub async fn share_endpoint_load(
    backend: &Backend,
    database_url: &str,
) -> Option<(Arc<tokio::sync::Notify>, tokio::task::JoinHandle<()>)> {
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

/// What `serve` builds to lead its database: at start-up, and again when a follower takes over
/// from a leader whose lease lapsed ([`lead`], the one place both go through).
pub(super) struct LeaderPlan {
    pub(super) library: ScenarioLibrary,
    pub(super) assets: PathBuf,
    pub(super) sandbox: crate::abm::Sandbox,
    pub(super) llm_config: Option<PathBuf>,
    pub(super) prices: Option<PathBuf>,
    pub(super) limits: Limits,
    pub(super) storage: StorageArgs,
    pub(super) queue: Option<crate::workbench::jobs::JobsConfig>,
    pub(super) static_dir: PathBuf,
    pub(super) access: Arc<crate::http::Access>,
    pub(super) shutdown_grace: std::time::Duration,
}

/// A leading server's app and the tasks it started beside its router.
pub(super) struct Leader {
    app: Arc<AppState>,
    sharing: Option<(Arc<tokio::sync::Notify>, tokio::task::JoinHandle<()>)>,
}

impl Leader {
    /// Stops what [`lead`] started beside the router (the endpoint-load board), then closes the
    /// store: its last writes are committed and the lease released before the process ends,
    /// whatever connections still hold the app.
    async fn stop(self) {
        if let Some((stop, task)) = self.sharing {
            stop.notify_one();
            let _ = task.await;
        }
        if let Some(store) = self.app.wb.store.clone() {
            let closed = tokio::task::spawn_blocking(move || store.close(std::time::Duration::from_secs(30))).await;
            if !matches!(closed, Ok(true)) {
                eprintln!("simtree: the store did not close in time; its lease lapses by itself");
            }
        }
    }
}

/// The leader's app of `plan`, built as a starting server builds it: the workbench on its store
/// (with PostgreSQL, taking the lease `me`: while another process holds it, who does), the job
/// queue, then — in the runtime — the endpoint-load board, the job dispatch and the cache sweep.
pub(super) async fn lead(
    plan: Arc<LeaderPlan>,
    me: Option<crate::store::lease::Lease>,
) -> Result<Result<Leader, crate::store::lease::Holder>, String> {
    let built = {
        let plan = plan.clone();
        tokio::task::spawn_blocking(move || build_leader(&plan, me))
            .await
            .map_err(|e| e.to_string())??
    };
    let app = match built {
        Ok(app) => Arc::new(app),
        Err(holder) => return Ok(Err(holder)),
    };
    let sharing = match &plan.storage.database_url {
        Some(url) => share_endpoint_load(&app.wb.backend, url).await,
        None => None,
    };
    if plan.queue.is_some() {
        tokio::spawn(app.wb.clone().dispatch_jobs());
    }
    // Live simulators of stored trees are a cache: keep it within --cache-mb.
    tokio::spawn(app.wb.clone().sweep_cache());
    Ok(Ok(Leader { app, sharing }))
}

/// The blocking part of [`lead`]: the workbench, its store and its job queue.
pub(super) fn build_leader(
    plan: &LeaderPlan,
    me: Option<crate::store::lease::Lease>,
) -> Result<Result<AppState, crate::store::lease::Holder>, String> {
    let mut wb = crate::workbench::Workbench::new(
        plan.library.clone(),
        backend(plan.llm_config.as_deref())?,
        plan.limits.clone(),
    );
    if let Some(path) = &plan.prices {
        wb.prices = Arc::new(crate::llm::price::PriceTable::load(path).map_err(|e| e.to_string())?);
    }
    wb.abm_sandbox = plan.sandbox;
    wb.use_assets(&plan.assets);
    let store = match (&plan.storage.database_url, me) {
        (Some(url), Some(me)) => match crate::store::Store::lead_postgres(url, Some(me))
            .map_err(|e| format!("cannot open the PostgreSQL database: {e}"))?
        {
            Ok(store) => Some(store),
            Err(holder) => return Ok(Err(holder)),
        },
        _ => plan.storage.open()?,
    };
    // The queue before the trees: it reads the runs the last leader left to jobs, which are
    // adopted; `attach_store` then marks only the other runs in flight interrupted.
    if let Some(config) = &plan.queue {
        wb.enable_jobs(config.clone()).map_err(|e| e.to_string())?;
        eprintln!("simtree: runs go through the job queue");
    }
    if let Some(store) = store {
        eprintln!("simtree: trees are kept in {}", store.location);
        wb.attach_store(store).map_err(|e| e.to_string())?;
    } else {
        eprintln!("simtree: --ephemeral: trees are kept in memory only");
    }
    let mut app = AppState::new(wb);
    app.access = plan.access.clone();
    app.shutdown_grace = plan.shutdown_grace;
    app.static_dir = plan.static_dir.clone();
    Ok(Ok(app))
}

/// The base URL other servers reach this one at: `--advertise`, else the bound address (not
/// when that is unspecified: 0.0.0.0 names no machine to another one).
pub(super) fn advertised(advertise: Option<String>, bound: std::net::SocketAddr) -> Result<String, String> {
    match advertise {
        Some(url) => {
            let url = url.trim_end_matches('/').to_string();
            let parsed = url.parse::<axum::http::Uri>().ok();
            let ok = parsed.as_ref().is_some_and(|u| {
                u.scheme_str() == Some("http")
                    && u.host().is_some_and(|h| !h.is_empty())
                    && u.path().trim_matches('/').is_empty()
                    && u.query().is_none()
            });
            if !ok {
                return Err(format!(
                    "--advertise {url}: expected http://host[:port] (the address other servers reach this one at)"
                ));
            }
            Ok(url)
        }
        None if bound.ip().is_unspecified() => Err(format!(
            "serving on {bound} with a PostgreSQL database: pass --advertise http://<this machine's address>:{} \
             (or set SIMTREE_ADVERTISE) so that the other servers on the database can reach this one when it leads",
            bound.port()
        )),
        None => Ok(format!("http://{bound}")),
    }
}

/// `serve`: binds, then leads the database — or, with PostgreSQL while another server holds its
/// lease, follows that server (forwarding to it; `http/fleet.rs`) and takes over in place when
/// the lease lapses. Runs the own job worker either way.
pub(super) async fn serve_fleet(
    plan: Arc<LeaderPlan>,
    addr: std::net::SocketAddr,
    advertise: Option<String>,
    own_worker: Option<(Arc<crate::workbench::Workbench>, crate::workbench::jobs::JobsConfig)>,
) -> Result<(), String> {
    let listener = crate::http::bind(addr)
        .await
        .map_err(|e| format!("cannot serve on {addr}: {e}"))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    let me = match &plan.storage.database_url {
        Some(_) => {
            let mut me =
                crate::store::lease::Lease::this_process(std::time::Duration::from_secs(plan.storage.lease_secs));
            me.address = Some(advertised(advertise, bound)?);
            Some(me)
        }
        None => None,
    };
    let host = crate::store::lease::Lease::this_process(crate::store::lease::DEFAULT_LEASE).host;
    let (door, leader, following) = match lead(plan.clone(), me.clone()).await? {
        Ok(leader) => {
            if let Some(me) = &me {
                eprintln!(
                    "simtree: this server leads the database (others reach it at {})",
                    me.address.as_deref().unwrap_or("?")
                );
            }
            (
                Arc::new(crate::http::fleet::Door::leader(leader.app.clone(), &host)),
                Some(leader),
                None,
            )
        }
        Err(holder) => {
            eprintln!(
                "simtree: this PostgreSQL database is already served by another simtree ({}): this server follows it \
                 — requests to /api, /devui and /openapi.json are forwarded there — and takes over when its lease \
                 lapses, in {} s at the latest unless renewed",
                holder.describe_at(),
                holder.left_ms().div_ceil(1000)
            );
            let door = Arc::new(crate::http::fleet::Door::new(
                plan.access.clone(),
                plan.static_dir.clone(),
                plan.limits.max_websockets,
                plan.limits.max_connections,
                &host,
            ));
            door.follow(holder);
            door.probe_leader().await;
            let me = me.ok_or("a follower without a lease")?;
            let url = plan.storage.database_url.clone().unwrap_or_default();
            let probe = tokio::task::spawn_blocking(move || crate::store::Store::open_postgres_with(&url, None))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("cannot open the PostgreSQL database: {e}"))?;
            let task = tokio::spawn(follow(plan.clone(), door.clone(), Arc::new(probe), me));
            (door, None, Some(task))
        }
    };
    // Signals are caught from before the listening line on (see `http::stop_requested`). A
    // leader whose lease another server took stops too: it never serves what it holds again.
    let deposed = Arc::new(std::sync::OnceLock::<String>::new());
    let stop = {
        let (door, deposed) = (door.clone(), deposed.clone());
        let signal = crate::http::stop_requested();
        async move {
            tokio::select! {
                () = signal => {}
                lost = lease_lost(&door) => {
                    eprintln!("simtree: {lost}; this server stops (start it again to follow the new leader)");
                    let _ = deposed.set(lost);
                }
            }
        }
    };
    // The own worker goes on through the shutdown's grace period (the runs it holds may finish
    // then) and stops once the server has.
    let (stop_worker, worker_stop) = tokio::sync::oneshot::channel::<()>();
    let worker = own_worker.map(|(wb, config)| {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        tokio::spawn(wb.work(config, cores, "serve", async move {
            let _ = worker_stop.await;
        }))
    });
    crate::http::announce(bound, &plan.access);
    let served = crate::http::serve(listener, door, stop).await;
    let _ = stop_worker.send(());
    if let Some(w) = worker {
        // Its claims are handed back before the process ends.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), w).await;
    }
    let leader = match following {
        Some(task) if task.is_finished() => task.await.ok().flatten(),
        Some(task) => {
            task.abort();
            None
        }
        None => leader,
    };
    if let Some(leader) = leader {
        leader.stop().await;
    }
    served.map_err(|e| format!("cannot serve on {addr}: {e}"))?;
    match deposed.get() {
        Some(lost) => Err(format!("stopped: {lost}")),
        None => Ok(()),
    }
}

/// Resolves once this server leads and its store has lost the lease to another process.
async fn lease_lost(door: &crate::http::fleet::Door) -> String {
    let mut look = tokio::time::interval(std::time::Duration::from_millis(200));
    loop {
        look.tick().await;
        if let Some(lost) = door.leading().and_then(|app| app.wb.store.as_ref()?.lease_lost()) {
            return lost;
        }
    }
}

/// A follower's heartbeat: every beat of the lease it reads the lease row (where the leader is
/// now) and probes the leader; once the lease is free or lapsed it tries to take it and, if it
/// gets it, becomes the leader in place. A forward that failed makes it look at once.
pub(super) async fn follow(
    plan: Arc<LeaderPlan>,
    door: Arc<crate::http::fleet::Door>,
    probe: Arc<crate::store::Store>,
    me: crate::store::lease::Lease,
) -> Option<Leader> {
    let mut beat = tokio::time::interval(me.heartbeat());
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = beat.tick() => {}
            () = door.stale.notified() => {}
        }
        let read = {
            let probe = probe.clone();
            tokio::task::spawn_blocking(move || probe.read(|db| db.lease_holder())).await
        };
        let holder = match read {
            Ok(Ok(h)) => {
                door.database(None);
                h
            }
            Ok(Err(e)) => {
                door.database(Some(e.to_string()));
                continue;
            }
            Err(e) => {
                door.database(Some(e.to_string()));
                continue;
            }
        };
        match holder {
            Some(h) if !h.lapsed() && h.holder != me.holder => {
                door.follow(h);
                door.probe_leader().await;
            }
            _ => match take_over(&plan, &door, &me).await {
                Ok(Ok(leader)) => {
                    door.lead(leader.app.clone());
                    eprintln!(
                        "simtree: took over the database: this server leads it now (others reach it at {})",
                        me.address.as_deref().unwrap_or("?")
                    );
                    return Some(leader);
                }
                Ok(Err(h)) => {
                    door.follow(h);
                    door.probe_leader().await;
                }
                Err(e) => {
                    eprintln!("simtree: could not take over the database: {e}");
                    door.database(Some(e));
                }
            },
        }
    }
}

/// [`lead`] from a follower: while it takes the lease and builds the leader, requests other
/// followers forward here are told to retry (see `Door::taking_over`).
pub(super) async fn take_over(
    plan: &Arc<LeaderPlan>,
    door: &crate::http::fleet::Door,
    me: &crate::store::lease::Lease,
) -> Result<Result<Leader, crate::store::lease::Holder>, String> {
    door.taking_over(true);
    let led = lead(plan.clone(), Some(me.clone())).await;
    if !matches!(led, Ok(Ok(_))) {
        door.taking_over(false);
    }
    led
}

/// The workbench of a process that runs jobs (`worker`, or a server's own worker): the store
/// opened without the server lease (it writes only its jobs' nodes, fenced by their claims).
pub(super) fn worker_bench(
    library: &ScenarioLibrary,
    assets: &std::path::Path,
    sandbox: crate::abm::Sandbox,
    llm_config: Option<&std::path::Path>,
    url: &str,
) -> Result<std::sync::Arc<crate::workbench::Workbench>, String> {
    let mut wb = crate::workbench::Workbench::new(library.clone(), backend(llm_config)?, Limits::default());
    wb.abm_sandbox = sandbox;
    wb.use_assets(assets);
    let store = crate::store::Store::open_postgres_with(url, None)
        .map_err(|e| format!("cannot open the PostgreSQL database: {e}"))?;
    wb.attach_store_for_jobs(store).map_err(|e| e.to_string())?;
    Ok(std::sync::Arc::new(wb))
}

/// The LLM backend of `serve` (see [`crate::backend::Backend::from_settings`]).
pub(super) fn backend(file: Option<&std::path::Path>) -> Result<Backend, String> {
    crate::backend::Backend::from_settings(file, None).map_err(|e| e.to_string())
}
