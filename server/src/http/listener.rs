//! The accept loop: HTTP/1.1 (with upgrades for WebSockets) over hyper, with the bounds that
//! `axum::serve` does not offer.
//!
//! * A **header-read timeout**: a connection must send a complete request head within
//!   [`HEADER_TIMEOUT`] of opening (and of going idle between keep-alive requests), or it is closed.
//! * A **connection cap**: at most `max_connections` at once. When the cap is reached, the oldest
//!   connection that has not yet sent a request is closed to make room — so a flood of half-open
//!   sockets cannot lock out `/health` or a real client — and only when every connection is busy
//!   is a new one refused.
//! * A **body deadline**: a request body that stalls for [`BODY_IDLE`], or that the client sends
//!   slower than [`MIN_BODY_RATE`] once [`BODY_GRACE`] of waiting for it has passed, ends in a
//!   [`SlowBody`] error (a 408 from the JSON extractor), so a slow sender cannot hold a request
//!   and its connection open at a byte a minute. Only time spent waiting for the client counts:
//!   a handler that reads slowly (an import writing to the store) is not the client's fault.
//! * Accept errors (out of file descriptors) pause the loop briefly instead of spinning.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
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

/// Longest wait for the next piece of a request body.
pub const BODY_IDLE: Duration = Duration::from_secs(10);

/// Waiting for a body this long is free; beyond it the client must keep [`MIN_BODY_RATE`].
pub const BODY_GRACE: Duration = Duration::from_secs(10);

/// Bytes a second a request body must average (over the wait beyond [`BODY_GRACE`]).
pub const MIN_BODY_RATE: f64 = 1024.0;

/// A request body that stalled or came too slowly (see the module docs).
#[derive(Debug)]
pub struct SlowBody(pub &'static str);

impl std::fmt::Display for SlowBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "request body {}", self.0)
    }
}

impl std::error::Error for SlowBody {}

/// A request body under the deadline of the module docs.
struct Deadline<B> {
    inner: Pin<Box<B>>,
    /// Set while waiting for the client: when the current wait ends at the latest.
    stall: Option<Pin<Box<tokio::time::Sleep>>>,
    waiting_since: Option<tokio::time::Instant>,
    waited: Duration,
    received: u64,
}

impl<B> Deadline<B> {
    fn new(inner: B) -> Self {
        Deadline {
            inner: Box::pin(inner),
            stall: None,
            waiting_since: None,
            waited: Duration::ZERO,
            received: 0,
        }
    }

    fn too_slow(&self) -> bool {
        let over = self.waited.saturating_sub(BODY_GRACE).as_secs_f64();
        (self.received as f64) < MIN_BODY_RATE * over
    }
}

impl<B> hyper::body::Body for Deadline<B>
where
    B: hyper::body::Body<Data = axum::body::Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = axum::body::Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        match this.inner.as_mut().poll_frame(cx) {
            Poll::Ready(frame) => {
                if let Some(since) = this.waiting_since.take() {
                    this.waited += since.elapsed();
                }
                this.stall = None;
                if let Some(Ok(f)) = &frame
                    && let Some(data) = f.data_ref()
                {
                    this.received += data.len() as u64;
                    if this.too_slow() {
                        return Poll::Ready(Some(Err(Box::new(SlowBody("arrives too slowly")))));
                    }
                }
                Poll::Ready(frame.map(|r| r.map_err(Into::into)))
            }
            Poll::Pending => {
                let now = tokio::time::Instant::now();
                let since = *this.waiting_since.get_or_insert(now);
                let stall = this
                    .stall
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(since + BODY_IDLE)));
                if stall.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Some(Err(Box::new(SlowBody("stalled")))));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

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
                inner.call(req.map(|body| axum::body::Body::new(Deadline::new(body))))
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
