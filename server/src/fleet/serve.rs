//! `simtree serve` on its database: bind, then lead — or, with PostgreSQL while another server
//! holds the lease, follow that server and take over when the lease lapses — with the own job
//! worker beside; stop on a signal, or when a leader's lease is taken.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::error::FleetError;
use super::follow::{follow, lease_lost};
use super::lead::{LeaderPlan, lead};
use crate::http::fleet::Door;
use crate::store::lease::{DEFAULT_LEASE, Lease};
use crate::workbench::Workbench;
use crate::workbench::jobs::JobsConfig;

/// The base URL other servers reach this one at: `advertise` (`--advertise`), else the bound
/// address (not when that is unspecified: 0.0.0.0 names no machine to another one).
pub(crate) fn advertised(advertise: Option<String>, bound: SocketAddr) -> Result<String, FleetError> {
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
                return Err(FleetError::Advertise(url));
            }
            Ok(url)
        }
        None if bound.ip().is_unspecified() => Err(FleetError::Unreachable(bound)),
        None => Ok(format!("http://{bound}")),
    }
}

/// `serve`: binds `addr`, then leads the database — or, with PostgreSQL while another server
/// holds its lease, follows that server (forwarding to it; `http/fleet.rs`) and takes over in
/// place when the lease lapses. Runs `own_worker` either way. Returns once a signal stopped the
/// server, or with [`FleetError::Deposed`] once another process took a leader's lease.
pub async fn serve(
    plan: Arc<LeaderPlan>,
    addr: SocketAddr,
    advertise: Option<String>,
    own_worker: Option<(Arc<Workbench>, JobsConfig)>,
) -> Result<(), FleetError> {
    let fail = |source| FleetError::Serve { addr, source };
    let listener = crate::http::bind(addr).await.map_err(fail)?;
    let bound = listener.local_addr().map_err(fail)?;
    let me = match &plan.storage {
        super::StoreSite::Postgres { lease, .. } => {
            let mut me = Lease::this_process(*lease);
            me.address = Some(advertised(advertise, bound)?);
            Some(me)
        }
        _ => None,
    };
    let host = Lease::this_process(DEFAULT_LEASE).host;
    let (door, leader, following) = match lead(plan.clone(), me.clone()).await? {
        Ok(leader) => {
            if let Some(me) = &me {
                eprintln!(
                    "simtree: this server leads the database (others reach it at {})",
                    me.address.as_deref().unwrap_or("?")
                );
            }
            (Arc::new(Door::leader(leader.app.clone(), &host)), Some(leader), None)
        }
        Err(holder) => {
            eprintln!(
                "simtree: this PostgreSQL database is already served by another simtree ({}): this server follows it \
                 — requests to /api, /devui and /openapi.json are forwarded there — and takes over when its lease \
                 lapses, in {} s at the latest unless renewed",
                holder.describe_at(),
                holder.left_ms().div_ceil(1000)
            );
            let door = Arc::new(Door::new(
                plan.access.clone(),
                plan.static_dir.clone(),
                plan.limits.max_websockets,
                plan.limits.max_connections,
                &host,
            ));
            door.follow(holder);
            door.probe_leader().await;
            let me = me.ok_or(FleetError::NoLease)?;
            let url = plan.storage.database_url().unwrap_or_default().to_string();
            let probe = tokio::task::spawn_blocking(move || crate::store::Store::open_postgres_with(&url, None))
                .await?
                .map_err(FleetError::Postgres)?;
            let task = tokio::spawn(follow(plan.clone(), door.clone(), Arc::new(probe), me));
            (door, None, Some(task))
        }
    };
    // Signals are caught from before the listening line on (see `http::stop_requested`). A
    // leader whose lease another server took stops too: it never serves what it holds again.
    let deposed = Arc::new(OnceLock::<String>::new());
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
    let (stop_worker, worker_stop) = tokio::sync::watch::channel(false);
    let worker = own_worker.map(|(wb, config)| {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        tokio::spawn(async move {
            // A worker that could not start (the database away for a moment) starts again: a
            // server whose own worker is gone would queue runs that nobody takes.
            loop {
                let mut stop = worker_stop.clone();
                let stopped = async move {
                    let _ = stop.wait_for(|s| *s).await;
                };
                match wb.jobs().work(config.clone(), cores, "serve", stopped).await {
                    Ok(()) => break,
                    Err(_) if *worker_stop.borrow() => break,
                    Err(e) => {
                        eprintln!("simtree: this server's own worker could not take jobs ({e}); it tries again in 1 s");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
        })
    });
    crate::http::announce(bound, &plan.access);
    let served = crate::http::serve(listener, door, stop).await;
    let _ = stop_worker.send(true);
    if let Some(w) = worker {
        // Its claims are handed back before the process ends.
        let _ = tokio::time::timeout(Duration::from_secs(5), w).await;
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
    served.map_err(fail)?;
    match deposed.get() {
        Some(lost) => Err(FleetError::Deposed(lost.clone())),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_advertised_address_is_a_plain_http_base_url_and_never_an_unspecified_one() {
        let bound: SocketAddr = "127.0.0.1:8090".parse().unwrap();
        assert_eq!(advertised(None, bound).unwrap(), "http://127.0.0.1:8090");
        let v6: SocketAddr = "[::1]:9000".parse().unwrap();
        assert_eq!(advertised(None, v6).unwrap(), "http://[::1]:9000");
        for any in ["0.0.0.0:8090", "[::]:8090"] {
            let e = advertised(None, any.parse().unwrap()).unwrap_err().to_string();
            assert!(e.contains("--advertise http://") && e.contains(":8090"), "{e}");
        }
        let wild: SocketAddr = "0.0.0.0:8090".parse().unwrap();
        assert_eq!(advertised(Some("http://10.0.0.5:8090/".into()), wild).unwrap(), "http://10.0.0.5:8090");
        for bad in [
            "https://10.0.0.5:8090",
            "10.0.0.5:8090",
            "http://",
            "http://host/path",
            "http://host/?q=1",
            "http://ho st",
            "",
        ] {
            assert!(matches!(advertised(Some(bad.into()), wild), Err(FleetError::Advertise(_))), "{bad:?}");
        }
    }
}
