//! The accept loop: HTTP/1.1 (with upgrades for WebSockets) over hyper, with the bounds that
//! `axum::serve` does not offer.
//!
//! * A **header-read timeout**: a connection must send a complete request head within
//!   [`HEADER_TIMEOUT`] of opening (and of going idle between keep-alive requests), or it is closed.
//! * A **connection cap**: at most `max_connections` at once. When the cap is reached, room is made
//!   by closing the oldest connection that has not sent a request [`FIRST_REQUEST_GRACE`] after
//!   opening (so a flood of half-open sockets cannot lock out a real client), else the oldest
//!   request body still arriving from the address with the most of them, if that is more than its
//!   share (so a client that keeps reopening slow bodies cannot hold every slot).
//! * **Per-address shares**, a quarter of the cap each: one address may have at most that many
//!   request bodies arriving before its own may be closed for others, and a remote address may
//!   hold at most that many connections (beyond it, a new one takes the place of one of its own,
//!   as above). An address is the peer's IP, 127.0.0.1 included for bodies. For connections, a
//!   loopback peer's every connection counts as a client of its own: the browser, the command line
//!   and every local process share 127.0.0.1, and a local flood must not lock the browser out
//!   by filling a share they would have in common; a body from the browser arrives whole at once
//!   on loopback, so sharing the count of bodies arriving costs it nothing.
//! * **`/health` and `/ready` are always served**: a connection that finds no room is not refused
//!   but served from a reserve of [`RESERVE`] more connections, one request each, that answer
//!   `/health` and `/ready` as usual and every other request with 503 (the body unread).
//! * A **body deadline**: a request body that stalls for [`BODY_IDLE`], or that the client sends
//!   slower than [`MIN_BODY_RATE`] once [`BODY_GRACE`] of waiting for it has passed, ends in a
//!   [`SlowBody`] error (a 408 from the JSON extractor), so a slow sender cannot hold a request
//!   and its connection open at a byte a minute. Only time spent waiting for the client counts:
//!   a handler that reads slowly (an import writing to the store) is not the client's fault.
//! * Accept errors (out of file descriptors) pause the loop briefly instead of spinning.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use futures_util::future::Either;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::Service;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Notify;

/// How long a client may take to send a request head.
pub(crate) const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest wait for the next piece of a request body.
pub(crate) const BODY_IDLE: Duration = Duration::from_secs(10);

/// Waiting for a body this long is free; beyond it the client must keep [`MIN_BODY_RATE`].
pub(crate) const BODY_GRACE: Duration = Duration::from_secs(10);

/// Bytes a second a request body must average (over the wait beyond [`BODY_GRACE`]).
pub(crate) const MIN_BODY_RATE: f64 = 1024.0;

/// A new connection has this long to send its first request before it may be closed to make
/// room (so that connections opened in a flood do not close a real client's before its request
/// is read).
pub(crate) const FIRST_REQUEST_GRACE: Duration = Duration::from_secs(1);

/// Connections beyond the cap that may still ask `/health` and `/ready`.
pub(crate) const RESERVE: usize = 64;

/// A request body that stalled or came too slowly (see the module docs).
#[derive(Debug)]
pub(crate) struct SlowBody(pub &'static str);

impl std::fmt::Display for SlowBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "request body {}", self.0)
    }
}

impl std::error::Error for SlowBody {}

/// A request body under the deadline of the module docs; it tells its connection's [`Held`] while
/// it arrives.
struct Deadline<B> {
    inner: Pin<Box<B>>,
    held: Arc<Held>,
    /// Set while waiting for the client: when the current wait ends at the latest.
    stall: Option<Pin<Box<tokio::time::Sleep>>>,
    waiting_since: Option<tokio::time::Instant>,
    waited: Duration,
    received: u64,
}

impl<B> Deadline<B> {
    fn new(inner: B, held: Arc<Held>) -> Self {
        Deadline { inner: Box::pin(inner), held, stall: None, waiting_since: None, waited: Duration::ZERO, received: 0 }
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
                if !matches!(frame, Some(Ok(_))) {
                    this.held.body_ended();
                }
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
                this.held.body_arriving();
                let since = *this.waiting_since.get_or_insert(now);
                let stall = this.stall.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(since + BODY_IDLE)));
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

impl<B> Drop for Deadline<B> {
    fn drop(&mut self) {
        self.held.body_ended();
    }
}

/// One connection as its [`Table`] sees it; shared with the connection's task and its bodies.
struct Held {
    /// Set by its first request: it is no longer silent.
    requested: AtomicBool,
    /// When the request body now arriving first made the server wait (see [`since`]; 0: no
    /// body is arriving).
    body_since: AtomicU64,
    /// Fired to close the connection (it was chosen to make room).
    close: Notify,
    /// When it was opened (see [`since`]).
    opened: u64,
    epoch: tokio::time::Instant,
}

/// Milliseconds since `epoch` (a table's start), from 1 (0 means "none").
fn since(epoch: tokio::time::Instant) -> u64 {
    epoch.elapsed().as_millis() as u64 + 1
}

impl Held {
    fn body_arriving(&self) {
        let now = since(self.epoch);
        let _ = self.body_since.compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
    }

    fn body_ended(&self) {
        self.body_since.store(0, Ordering::Relaxed);
    }
}

/// A connection in its [`Table`].
struct Entry {
    /// The peer's IP (canonical: an IPv4 peer on an IPv6 socket is its IPv4 address).
    ip: IpAddr,
    held: Arc<Held>,
}

impl Entry {
    /// The address its connection counts under: none on loopback (see the module docs).
    fn counted(&self) -> Option<IpAddr> {
        (!self.ip.is_loopback()).then_some(self.ip)
    }
}

/// The connections held, oldest first (see the module docs).
struct Table {
    cap: usize,
    /// Most connections, and most bodies arriving, one address may hold.
    share: usize,
    epoch: tokio::time::Instant,
    next: u64,
    conns: BTreeMap<u64, Entry>,
    per_address: HashMap<IpAddr, usize>,
}

impl Table {
    fn new(cap: usize, share: usize) -> Table {
        Table {
            cap: cap.max(1),
            share: share.max(1),
            epoch: tokio::time::Instant::now(),
            next: 0,
            conns: BTreeMap::new(),
            per_address: HashMap::new(),
        }
    }

    /// Takes in a connection from `ip`, closing another to make room when it must; `None` when
    /// no room can be made.
    fn admit(&mut self, ip: IpAddr) -> Option<(u64, Arc<Held>)> {
        let ip = ip.to_canonical();
        let counted = (!ip.is_loopback()).then_some(ip);
        let crowded = counted.is_some_and(|a| self.per_address.get(&a).is_some_and(|&n| n >= self.share));
        if crowded {
            // An address over its share makes room among its own connections only.
            let victim = self.victim(counted)?;
            self.evict(victim);
        } else if self.conns.len() >= self.cap {
            let victim = self.victim(None)?;
            self.evict(victim);
        }
        Some(self.insert(ip))
    }

    /// Like [`Self::admit`], but when no room can be made the oldest connection is closed.
    fn admit_always(&mut self, ip: IpAddr) -> (u64, Arc<Held>) {
        if let Some(admitted) = self.admit(ip) {
            return admitted;
        }
        if let Some(&oldest) = self.conns.keys().next() {
            self.evict(oldest);
        }
        self.insert(ip.to_canonical())
    }

    /// The connection to close for a new one, among those of `only` (an address over its share)
    /// or all: the oldest still silent after [`FIRST_REQUEST_GRACE`], else the oldest body
    /// arriving from the address with the most of them, if more than its share (any number
    /// when `only` is given).
    fn victim(&self, only: Option<IpAddr>) -> Option<u64> {
        let now = since(self.epoch);
        let mine = self.conns.iter().filter(|(_, e)| only.is_none_or(|a| e.counted() == Some(a)));
        // The oldest silent one: if it is still within its grace, so are the others.
        if let Some((&id, e)) = mine.clone().find(|(_, e)| !e.held.requested.load(Ordering::Relaxed))
            && e.held.opened + FIRST_REQUEST_GRACE.as_millis() as u64 <= now
        {
            return Some(id);
        }
        // Bodies arriving, by address: how many, and the oldest.
        let mut arriving: HashMap<IpAddr, (usize, u64, u64)> = HashMap::new();
        for (&id, e) in mine {
            let since = e.held.body_since.load(Ordering::Relaxed);
            if since != 0 {
                let a = arriving.entry(e.ip).or_insert((0, since, id));
                a.0 += 1;
                if since < a.1 {
                    (a.1, a.2) = (since, id);
                }
            }
        }
        let share = if only.is_some() { 0 } else { self.share };
        arriving
            .into_values()
            .filter(|&(n, _, _)| n > share)
            .max_by_key(|&(n, since, _)| (n, std::cmp::Reverse(since)))
            .map(|(_, _, id)| id)
    }

    fn insert(&mut self, ip: IpAddr) -> (u64, Arc<Held>) {
        let id = self.next;
        self.next += 1;
        let held = Arc::new(Held {
            requested: AtomicBool::new(false),
            body_since: AtomicU64::new(0),
            close: Notify::new(),
            opened: since(self.epoch),
            epoch: self.epoch,
        });
        let entry = Entry { ip, held: held.clone() };
        if let Some(a) = entry.counted() {
            *self.per_address.entry(a).or_default() += 1;
        }
        self.conns.insert(id, entry);
        (id, held)
    }

    /// Closes connection `id` (its task lets go of it when told).
    fn evict(&mut self, id: u64) {
        if let Some(held) = self.remove(id) {
            held.close.notify_one();
        }
    }

    fn remove(&mut self, id: u64) -> Option<Arc<Held>> {
        let entry = self.conns.remove(&id)?;
        if let Some(a) = entry.counted()
            && let Some(n) = self.per_address.get_mut(&a)
        {
            *n -= 1;
            if *n == 0 {
                self.per_address.remove(&a);
            }
        }
        Some(entry.held)
    }
}

fn lock(t: &Mutex<Table>) -> std::sync::MutexGuard<'_, Table> {
    t.lock().unwrap_or_else(|p| p.into_inner())
}

/// Serves `router` on `listener` until `shutdown` resolves.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    max_connections: usize,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let held = Arc::new(Mutex::new(Table::new(max_connections, max_connections / 4)));
    let reserve = Arc::new(Mutex::new(Table::new(RESERVE, RESERVE)));
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(_) => {
                    // EMFILE and friends: give running connections a moment to finish.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            () = &mut shutdown => return Ok(()),
        };
        let _ = stream.set_nodelay(true);
        let admitted = lock(&held).admit(peer.ip());
        let (table, (id, conn), probes_only) = match admitted {
            Some(admitted) => (held.clone(), admitted, false),
            None => {
                let admitted = lock(&reserve).admit_always(peer.ip());
                (reserve.clone(), admitted, true)
            }
        };
        tokio::spawn(connection(stream, router.clone(), table, id, conn, probes_only));
    }
}

/// Serves one connection until it ends or its table closes it. `probes_only`: a connection of
/// the reserve (one request; only `/health` and `/ready` are served).
async fn connection(
    stream: tokio::net::TcpStream,
    router: Router,
    table: Arc<Mutex<Table>>,
    id: u64,
    held: Arc<Held>,
    probes_only: bool,
) {
    let inner = TowerToHyperService::new(router);
    let service = {
        let held = held.clone();
        hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            // The first request makes the connection busy: it is no longer silent.
            held.requested.store(true, Ordering::Relaxed);
            if probes_only && !matches!(req.uri().path(), "/health" | "/ready") {
                return Either::Left(std::future::ready(Ok(full())));
            }
            let held = held.clone();
            Either::Right(inner.call(req.map(|body| axum::body::Body::new(Deadline::new(body, held)))))
        })
    };
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .keep_alive(!probes_only)
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades();
    tokio::select! {
        _ = conn => {}
        () = held.close.notified() => {}
    }
    lock(&table).remove(id);
}

/// The answer of the reserve to anything but `/health` and `/ready`.
fn full() -> axum::response::Response {
    // (The body `http::error` gives every answer, written here: the listener sits below it.)
    let detail = "the server holds as many connections as it may (--max-connections); retry shortly";
    (StatusCode::SERVICE_UNAVAILABLE, axum::Json(simtree_shared::ErrorBody { detail: detail.into(), path: None }))
        .into_response()
}

/// Raises this process's open-file limit to its hard limit (the flood of sockets a public page
/// can open should meet the connection cap, not the descriptor limit). Returns the new limit.
pub(crate) fn raise_fd_limit() -> u64 {
    // SAFETY: getrlimit/setrlimit only read and write the struct passed to them.
    unsafe {
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit { rlim_cur: lim.rlim_max, rlim_max: lim.rlim_max };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                return raised.rlim_cur;
            }
        }
        lim.rlim_cur
    }
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;

    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// Moves the table's clock `d` on.
    fn later(t: &mut Table, d: Duration) {
        t.epoch = t.epoch.checked_sub(d).unwrap();
    }

    fn busy_with_body(held: &Held, since: u64) {
        held.requested.store(true, Ordering::Relaxed);
        held.body_since.store(since, Ordering::Relaxed);
    }

    #[test]
    fn loopback_connections_count_alone_and_a_remote_address_keeps_to_its_share() {
        let mut t = Table::new(8, 2);
        for _ in 0..3 {
            assert!(t.admit(ip("127.0.0.1")).is_some(), "loopback has no connection share");
        }
        assert!(t.admit(ip("::ffff:10.0.0.1")).is_some());
        assert!(t.admit(ip("10.0.0.1")).is_some());
        assert_eq!(t.per_address[&ip("10.0.0.1")], 2, "an IPv4 peer on an IPv6 socket is one address");
        assert!(t.admit(ip("10.0.0.1")).is_none(), "its own two are still within their grace");
        later(&mut t, FIRST_REQUEST_GRACE);
        let held = t.conns.len();
        assert!(t.admit(ip("10.0.0.1")).is_some(), "its oldest silent one made room");
        assert_eq!((t.conns.len(), t.per_address[&ip("10.0.0.1")]), (held, 2));
        assert!(t.admit(ip("10.0.0.2")).is_some(), "another address has its own share");
    }

    #[test]
    fn when_full_the_address_with_most_bodies_arriving_gives_up_its_oldest() {
        let mut t = Table::new(6, 2);
        let flood: Vec<_> = (0..4).map(|_| t.admit(ip("127.0.0.1")).unwrap()).collect();
        let other: Vec<_> = (0..2).map(|_| t.admit(ip("127.0.0.2")).unwrap()).collect();
        for (i, (_, held)) in flood.iter().chain(&other).enumerate() {
            // The other address's bodies are older: age alone does not choose.
            busy_with_body(held, if i < 4 { 100 + i as u64 } else { 1 });
        }
        assert!(t.admit(ip("127.0.0.3")).is_some());
        assert!(!t.conns.contains_key(&flood[0].0), "the flood's oldest body was closed");
        assert!(flood[0].1.close.notified().now_or_never().is_some(), "and told to close");
        assert!(t.admit(ip("127.0.0.3")).is_some());
        assert!(!t.conns.contains_key(&flood[1].0));
        // Every address within its share, the newcomers silent in their grace: no room.
        assert!(t.admit(ip("127.0.0.4")).is_none());
        assert!(other.iter().all(|(id, _)| t.conns.contains_key(id)));
    }

    #[test]
    fn the_reserve_always_takes_a_connection_in() {
        let mut r = Table::new(2, 2);
        let first = r.admit_always(ip("127.0.0.1")).0;
        for _ in 0..4 {
            r.admit_always(ip("127.0.0.1"));
        }
        assert_eq!(r.conns.len(), 2);
        assert!(!r.conns.contains_key(&first));
    }
}
