//! Several servers on one PostgreSQL database (issue 26): one writer, any number of doors.
//!
//! The server holding the database's lease (`store/lease.rs`) — "the leader" — keeps trees in
//! memory and writes them, as a lone server does. Every other `serve` on the database is a
//! follower: it answers `/health`, `/ready` and the web UI's files itself and forwards everything
//! else under `/api`, `/devui` and `/openapi.json` to the leader's advertised address — method,
//! path, query, headers (Authorization and cookies included) and bodies streamed both ways;
//! WebSocket upgrades are forwarded too and then piped byte for byte, so late join and resync
//! work as the leader serves them. A forwarded request carries `x-simtree-via`; a follower
//! refuses a request that already does (508), so an address that leads back to a follower
//! cannot loop. While the leader does not answer, forwarded requests get 503 naming it, never a
//! hang: connecting is bounded, and requests waiting on a leader that missed two probes in a
//! row, or that another server replaced, are answered 503 at once. When the leader's lease lapses a follower takes the lease
//! and becomes the leader in place ([`Door::lead`]): from then on its own router serves.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use simtree_shared::OkReply;

use super::error::ApiError;
use super::state::AppState;
use crate::store::lease::Holder;

/// The header a follower adds to what it forwards (`host/pid` of the follower).
pub(crate) const VIA: HeaderName = HeaderName::from_static("x-simtree-via");

/// How long a follower waits to connect to the leader (and for its `/health` answer).
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Probes in a row a leader may miss before the forwards waiting for it are answered 503: one
/// slow answer (a busy machine) does not cost the requests in flight their answers.
pub(crate) const GIVE_UP_AFTER: u32 = 2;

/// The leader as the lease row last said, and when it was read.
struct Followed {
    holder: Holder,
    read: Instant,
}

/// What a server is on its database: the leader (its own router) or a door to the leader.
pub(crate) struct Door {
    /// Set once this process leads; never unset (a leader that loses its lease answers 503).
    leading: OnceLock<(Arc<AppState>, Router)>,
    followed: Mutex<Option<Followed>>,
    /// Whether the leader answered the last probe of its `/health`.
    answered: AtomicBool,
    /// Probes in a row the leader did not answer.
    missed: std::sync::atomic::AtomicU32,
    /// Why the database cannot be reached, if it could not be at the last look.
    database: Mutex<Option<String>>,
    /// Bumped when the leader is found gone (another holds the lease, or it missed
    /// [`GIVE_UP_AFTER`] probes in a row): forwards still waiting for it give up.
    down: tokio::sync::watch::Sender<u64>,
    /// Rung when a forward failed: the lease row is read again at once.
    pub(crate) stale: tokio::sync::Notify,
    client: Client<HttpConnector, Body>,
    via: HeaderValue,
    /// Set when the server was asked to stop.
    draining: AtomicBool,
    /// Set while this process takes the lease and builds its leader ([`Door::taking_over`]):
    /// the lease row already names it, so other followers forward here before it serves.
    taking_over: AtomicBool,
    access: Arc<super::Access>,
    static_dir: PathBuf,
    /// One permit per forwarded WebSocket (`--max-websockets`).
    ws_slots: Arc<tokio::sync::Semaphore>,
    max_websockets: usize,
    max_connections: usize,
}

impl Door {
    /// A door that follows no one yet; `static_dir` and `access` serve the web UI as a leader
    /// would, `max_websockets` bounds forwarded sockets, `max_connections` accepted ones.
    pub(crate) fn new(
        access: Arc<super::Access>,
        static_dir: PathBuf,
        max_websockets: usize,
        max_connections: usize,
        host: &str,
    ) -> Door {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
        connector.set_nodelay(true);
        let via = HeaderValue::from_str(&format!("{host}/{}", std::process::id()))
            .unwrap_or_else(|_| HeaderValue::from_static("unknown"));
        Door {
            leading: OnceLock::new(),
            followed: Mutex::new(None),
            answered: AtomicBool::new(false),
            missed: std::sync::atomic::AtomicU32::new(0),
            database: Mutex::new(None),
            down: tokio::sync::watch::channel(0).0,
            stale: tokio::sync::Notify::new(),
            client: Client::builder(TokioExecutor::new()).build(connector),
            via,
            draining: AtomicBool::new(false),
            taking_over: AtomicBool::new(false),
            access,
            static_dir,
            ws_slots: Arc::new(tokio::sync::Semaphore::new(max_websockets.max(1))),
            max_websockets,
            max_connections,
        }
    }

    /// A door that leads from the start (a lone server, or the first on its database).
    pub(crate) fn leader(app: Arc<AppState>, host: &str) -> Door {
        let door = Door::new(
            app.access.clone(),
            app.static_dir.clone(),
            app.wb.limits().max_websockets,
            app.wb.limits().max_connections,
            host,
        );
        door.lead(app);
        door
    }

    /// From now on this process leads: its own router answers every request.
    pub(crate) fn lead(&self, app: Arc<AppState>) {
        let router = super::router(app.clone());
        if self.draining.load(Ordering::Acquire) {
            app.draining.store(true, Ordering::Release);
        }
        let _ = self.leading.set((app, router));
        // Whatever still waits for the old leader will not hear from it.
        self.down.send_modify(|n| *n += 1);
    }

    /// Marks the time between taking the lease and leading (`true`), or its end without
    /// leading (`false`). Requests another follower forwarded here meanwhile get 503 (retry in
    /// a moment), not the 508 of a forwarding loop.
    pub(crate) fn taking_over(&self, now: bool) {
        self.taking_over.store(now, Ordering::Release);
    }

    /// The app, once this process leads.
    pub(crate) fn leading(&self) -> Option<&Arc<AppState>> {
        self.leading.get().map(|(app, _)| app)
    }

    /// Follows `holder` (as the lease row says now).
    pub(crate) fn follow(&self, holder: Holder) {
        let mut f = lock(&self.followed);
        let moved = f.as_ref().is_none_or(|f| f.holder.holder != holder.holder);
        if moved {
            self.answered.store(false, Ordering::Release);
            self.missed.store(0, Ordering::Release);
            // The old leader is gone: forwards waiting for it are answered now.
            self.down.send_modify(|n| *n += 1);
        }
        *f = Some(Followed { holder, read: Instant::now() });
    }

    /// Records whether the database answered the last look at the lease row.
    pub(crate) fn database(&self, fault: Option<String>) {
        *lock(&self.database) = fault;
    }

    /// Asks the leader's `/health` (within [`CONNECT_TIMEOUT`]); forwards waiting on a leader
    /// that missed [`GIVE_UP_AFTER`] probes in a row are answered 503.
    pub(crate) async fn probe_leader(&self) -> bool {
        let Some(address) = self.address() else {
            self.answered.store(false, Ordering::Release);
            return false;
        };
        let answered = match format!("{address}/health").parse::<Uri>() {
            Ok(uri) => {
                let mut req = axum::http::Request::new(Body::empty());
                *req.uri_mut() = uri;
                req.headers_mut().insert(VIA, self.via.clone());
                matches!(
                    tokio::time::timeout(CONNECT_TIMEOUT, self.client.request(req)).await,
                    Ok(Ok(r)) if r.status().is_success()
                )
            }
            Err(_) => false,
        };
        let was = self.answered.swap(answered, Ordering::AcqRel);
        if answered {
            self.missed.store(0, Ordering::Release);
        } else {
            if self.missed.fetch_add(1, Ordering::AcqRel) + 1 >= GIVE_UP_AFTER {
                self.down.send_modify(|n| *n += 1);
            }
            if was {
                tracing::warn!("{}", self.not_answering());
            }
        }
        answered
    }

    /// Marks the server as stopping (`/ready` 503; a leader refuses new work).
    pub(crate) fn stop(&self) {
        self.draining.store(true, Ordering::Release);
        if let Some(app) = self.leading() {
            app.draining.store(true, Ordering::Release);
        }
    }

    /// Connections held at once (`--max-connections`).
    pub(crate) fn max_connections(&self) -> usize {
        self.max_connections
    }

    fn address(&self) -> Option<String> {
        lock(&self.followed)
            .as_ref()
            .and_then(|f| f.holder.address.clone())
            .map(|a| a.trim_end_matches('/').to_string())
    }

    /// "the leading server (host H, pid P) is not answering; …".
    fn not_answering(&self) -> String {
        match &*lock(&self.followed) {
            Some(f) => {
                let left = Duration::from_millis(f.holder.left_ms()).saturating_sub(f.read.elapsed());
                format!(
                    "the leading server (host {}, pid {}) is not answering; another server takes over when its \
                     lease lapses in {} s",
                    f.holder.host,
                    f.holder.pid,
                    left.as_secs()
                )
            }
            None => "no server leads this database yet; one takes over within a lease's length".into(),
        }
    }

    /// The answer to a forward that failed, by its cause: the client's body stopped (408 — the
    /// leader is fine), or the leader could not be reached or dropped the connection before it
    /// answered (503 naming it, and which).
    fn failed_forward(&self, e: &hyper_util::client::legacy::Error) -> Response {
        tracing::debug!(error = %e, "forwarding to the leading server failed");
        let hyper_error = std::error::Error::source(e).and_then(|s| s.downcast_ref::<hyper::Error>());
        let chain = error_chain(e);
        if hyper_error.is_some_and(hyper::Error::is_user) {
            return ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                format!("the request's body stopped arriving before it was passed on to the leading server ({chain})"),
            )
            .into_response();
        }
        self.stale.notify_one();
        if e.is_connect() {
            return self.unavailable();
        }
        // It went away mid-request (killed, crashed): as unavailable as one never reached.
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{} (it closed the connection before it answered: {chain})", self.not_answering()),
        )
        .into_response()
    }

    fn unavailable(&self) -> Response {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, self.not_answering()).into_response()
    }

    /// Every request of the server: the leader's router once it leads, else the door's own.
    pub(crate) fn router(self: &Arc<Self>) -> Router {
        let door = self.clone();
        let follower = self.follower_router();
        Router::new().fallback(move |req: Request| {
            let door = door.clone();
            let follower = follower.clone();
            async move {
                let mut router = match door.leading.get() {
                    Some((app, router)) => {
                        // A leader that may have been replaced answers nothing but `/health`:
                        // what it holds in memory may be stale (see `Store::lease_doubt`).
                        let doubt = app.wb.store().and_then(|s| s.lease_doubt());
                        if let Some(why) = doubt
                            && req.uri().path() != "/health"
                        {
                            return ApiError::new(StatusCode::SERVICE_UNAVAILABLE, why).into_response();
                        }
                        router.clone()
                    }
                    None => follower,
                };
                match tower::Service::call(&mut router, req).await {
                    Ok(res) => res,
                    Err(never) => match never {},
                }
            }
        })
    }

    fn follower_router(self: &Arc<Self>) -> Router {
        let forwarded = any(forward);
        let mut router = Router::new()
            .route("/health", get(super::routes::health))
            .route("/ready", get(ready))
            .route("/openapi.json", forwarded.clone())
            .route("/api", forwarded.clone())
            .route("/api/{*rest}", forwarded.clone())
            .route("/devui", forwarded.clone())
            .route("/devui/{*rest}", forwarded)
            .fallback_service(
                tower::ServiceBuilder::new()
                    .layer(tower_http::compression::CompressionLayer::new())
                    .service(super::ui_service(&self.static_dir, &self.access)),
            )
            .layer(
                tower_http::trace::TraceLayer::new_for_http()
                    .make_span_with(|req: &axum::http::Request<_>| {
                        tracing::info_span!("http", method = %req.method(), path = %req.uri().path(), via = "follower")
                    })
                    .on_request(())
                    .on_response(tower_http::trace::DefaultOnResponse::new().level(tracing::Level::INFO)),
            );
        if let Some(cors) = self.access.cors() {
            router = router.layer(cors);
        }
        router
            .layer(axum::middleware::from_fn_with_state(self.access.clone(), super::guard::guard))
            .with_state(self.clone())
    }
}

/// An error and its causes, "a: b: c".
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// `GET /ready` of a follower: 200 when it reaches its database and the leader answered its
/// last probe; 503 with the reason otherwise.
async fn ready(State(door): State<Arc<Door>>) -> Response {
    if door.draining.load(Ordering::Acquire) {
        return ApiError::shutting_down().into_response();
    }
    if let Some(why) = lock(&door.database).clone() {
        return ApiError::new(StatusCode::SERVICE_UNAVAILABLE, format!("the database cannot be reached: {why}"))
            .into_response();
    }
    if !door.answered.load(Ordering::Acquire) {
        return door.unavailable();
    }
    axum::Json(OkReply { ok: true }).into_response()
}

/// Headers that describe one connection, not the message: never passed on.
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
];

/// Drops the hop-by-hop headers (and those the `Connection` header names); `Upgrade` and
/// `Connection: upgrade` stay on a WebSocket handshake, which is passed on as such.
fn strip_hop_by_hop(headers: &mut HeaderMap, upgrade: bool) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        // A client cannot have the follower drop what the leader checks.
        .filter(|n| ![header::UPGRADE, header::HOST, VIA].contains(n))
        .collect();
    for n in named.iter().chain(&HOP_BY_HOP) {
        headers.remove(n);
    }
    if upgrade {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    } else {
        headers.remove(header::UPGRADE);
    }
}

fn wants_websocket(headers: &HeaderMap) -> bool {
    headers.get(header::UPGRADE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

/// Forwards a request to the leader and its answer back (see the module docs).
async fn forward(State(door): State<Arc<Door>>, mut req: Request) -> Response {
    if req.headers().contains_key(VIA) && door.taking_over.load(Ordering::Acquire) {
        let mut res = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "this server is taking over from the leading server: it leads the database in a moment; retry".to_string(),
        )
        .into_response();
        res.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return res;
    }
    if req.headers().contains_key(VIA) {
        let from =
            req.headers().get(VIA).and_then(|v| v.to_str().ok()).unwrap_or("?").chars().take(200).collect::<String>();
        return ApiError::new(
            StatusCode::LOOP_DETECTED,
            format!(
                "this request was already forwarded (by {from}) and reached a server that would forward it again: \
                 the leading server's --advertise address must reach the leader itself"
            ),
        )
        .into_response();
    }
    let Some(address) = door.address() else {
        door.stale.notify_one();
        if door.answered.load(Ordering::Acquire) || lock(&door.followed).is_none() {
            return door.unavailable();
        }
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the leading server advertises no address (an older simtree, or one that serves no HTTP): \
             this server cannot forward to it; upgrade it or send requests to it directly",
        )
        .into_response();
    };
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let Ok(uri) = format!("{address}{path}").parse::<Uri>() else {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the leading server's address {address} is not a usable URL"),
        )
        .into_response();
    };
    let upgrade = wants_websocket(req.headers());
    let permit = match upgrade {
        true => match door.ws_slots.clone().try_acquire_owned() {
            Ok(p) => Some(p),
            Err(_) => {
                return ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("too many WebSockets open (at most {}; see --max-websockets)", door.max_websockets),
                )
                .into_response();
            }
        },
        false => None,
    };
    let client_side = upgrade.then(|| hyper::upgrade::on(&mut req));
    let (mut parts, body) = req.into_parts();
    strip_hop_by_hop(&mut parts.headers, upgrade);
    parts.headers.insert(VIA, door.via.clone());
    parts.uri = uri;
    parts.version = axum::http::Version::HTTP_11;
    let out = Request::from_parts(parts, if upgrade { Body::empty() } else { body });
    let mut down = door.down.subscribe();
    let sent = tokio::select! {
        sent = door.client.request(out) => sent,
        _ = down.changed() => return door.unavailable(),
    };
    let mut res = match sent {
        Ok(res) => res,
        Err(e) => return door.failed_forward(&e),
    };
    if let (Some(client_side), StatusCode::SWITCHING_PROTOCOLS) = (client_side, res.status()) {
        let leader_side = hyper::upgrade::on(&mut res);
        tokio::spawn(async move {
            let _permit = permit;
            if let (Ok(client), Ok(leader)) = tokio::join!(client_side, leader_side) {
                pipe(TokioIo::new(client), TokioIo::new(leader)).await;
            }
        });
    }
    let (mut parts, body) = res.into_parts();
    let upgraded = parts.status == StatusCode::SWITCHING_PROTOCOLS;
    strip_hop_by_hop(&mut parts.headers, upgraded);
    Response::from_parts(parts, Body::new(body))
}

/// Copies bytes both ways until either side closes, then closes both.
async fn pipe<A, B>(a: A, b: B)
where
    A: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    B: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (mut ar, mut aw) = tokio::io::split(a);
    let (mut br, mut bw) = tokio::io::split(b);
    tokio::select! {
        _ = tokio::io::copy(&mut ar, &mut bw) => {}
        _ = tokio::io::copy(&mut br, &mut aw) => {}
    }
    use tokio::io::AsyncWriteExt;
    let _ = aw.shutdown().await;
    let _ = bw.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_are_dropped_and_an_upgrade_keeps_its_own() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, HeaderValue::from_static("keep-alive, x-secret, Upgrade"));
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(header::TRANSFER_ENCODING, HeaderValue::from_static("chunked"));
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer t"));
        let mut plain = h.clone();
        strip_hop_by_hop(&mut plain, false);
        let names: Vec<&str> = plain.keys().map(HeaderName::as_str).collect();
        assert_eq!(names, ["authorization"]);
        strip_hop_by_hop(&mut h, true);
        assert_eq!(h[header::CONNECTION], "upgrade");
        assert_eq!(h[header::UPGRADE], "websocket");
        assert!(h.get("x-secret").is_none() && h.get("keep-alive").is_none());
        assert!(wants_websocket(&h));
    }
}
