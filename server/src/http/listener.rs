//! The accept loop: HTTP/1.1 (with upgrades for WebSockets) over hyper, with the bounds that
//! `axum::serve` does not offer.
//!
//! * A **header-read timeout**: a connection must send a complete request head within
//!   [`HEADER_TIMEOUT`] of opening (and of going idle between keep-alive requests), or it is closed.
//! * A **connection cap**: at most `max_connections` at once. When the cap is reached, the oldest
//!   connection that has not yet sent a request is closed to make room — so a flood of half-open
//!   sockets cannot lock out `/health` or a real client — and only when every connection is busy
//!   is a new one refused.
//! * Accept errors (out of file descriptors) pause the loop briefly instead of spinning.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::Service;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, oneshot};

/// How long a client may take to send a request head.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections that have not yet sent a request, oldest first, with a way to close each.
#[derive(Default)]
struct Waiting {
    next: u64,
    conns: BTreeMap<u64, oneshot::Sender<()>>,
}

fn lock(w: &Mutex<Waiting>) -> std::sync::MutexGuard<'_, Waiting> {
    w.lock().unwrap_or_else(|p| p.into_inner())
}

/// Serves `router` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    max_connections: usize,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(max_connections.max(1)));
    let waiting = Arc::new(Mutex::new(Waiting::default()));
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => {
                    // EMFILE and friends: give running connections a moment to finish.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            () = &mut shutdown => return Ok(()),
        };
        let permit = match slots.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                // Full: close the oldest connection that is still silent, then wait briefly for
                // its slot. If every connection is busy with a request, refuse the new one.
                let evicted = {
                    let mut w = lock(&waiting);
                    w.conns.pop_first().map(|(_, close)| close.send(()))
                };
                if evicted.is_none() {
                    continue;
                }
                match tokio::time::timeout(Duration::from_millis(200), slots.clone().acquire_owned()).await {
                    Ok(Ok(p)) => p,
                    _ => continue,
                }
            }
        };
        let _ = stream.set_nodelay(true);
        let (close_tx, close_rx) = oneshot::channel();
        let id = {
            let mut w = lock(&waiting);
            let id = w.next;
            w.next += 1;
            w.conns.insert(id, close_tx);
            id
        };
        let inner = TowerToHyperService::new(router.clone());
        let waiting = waiting.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let started = waiting.clone();
            // The first request makes the connection busy: it is no longer evicted.
            let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                lock(&started).conns.remove(&id);
                inner.call(req)
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            // The sender is dropped (not fired) when the connection becomes busy: only an
            // eviction closes it.
            let evicted = async {
                if close_rx.await.is_err() {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                _ = conn => {}
                () = evicted => {}
            }
            lock(&waiting).conns.remove(&id);
        });
    }
}

/// Raises this process's open-file limit to its hard limit (the flood of sockets a public page
/// can open should meet the connection cap, not the descriptor limit). Returns the new limit.
pub fn raise_fd_limit() -> u64 {
    // SAFETY: getrlimit/setrlimit only read and write the struct passed to them.
    unsafe {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                return raised.rlim_cur;
            }
        }
        lim.rlim_cur
    }
}
