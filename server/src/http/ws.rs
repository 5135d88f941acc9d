//! The two WebSockets of the DevUI protocol (spec §3.1).
//!
//! Both subscribe first, then wait for one client text frame (the `ready` handshake), then
//! forward. The tree socket sends the root's `attached` and, as an extension, a `snapshot` of the
//! graph with running ids so late joiners are in sync. A tree watcher that falls behind its
//! bounded queue (`--ws-queue`) gets `resync` and a fresh snapshot instead of unbounded
//! buffering. Live text of running nodes (`delta`) comes on a channel of its own, from the
//! time the socket connects; a tree watcher that misses some of it gets no resync. A node watcher loses nothing: its queue only wakes it, and it reads the entries it
//! has not sent from the node's log, which holds them anyway.

use std::sync::Arc;

use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, WebSocketUpgrade, close_code};
use axum::extract::{FromRequestParts, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use simtree_shared::TreeMsg;
use tokio::sync::broadcast::error::RecvError;

use super::error::{ApiError, ApiPath};
use super::state::AppState;
use crate::tree::NodeId;

async fn close_policy(mut socket: WebSocket, reason: &str) {
    let frame = CloseFrame {
        code: close_code::POLICY,
        reason: Utf8Bytes::from(reason.to_string()),
    };
    let _ = socket.send(Message::Close(Some(frame))).await;
}

/// Upgrades with the client-frame bounds, holding one of the server's WebSocket permits for the
/// socket's life; with none left the upgrade is refused with 503 (the socket no longer counts
/// as a connection once upgraded, so it is bounded here).
fn upgrade<F, Fut>(app: &AppState, ws: WebSocketUpgrade, serve: F) -> Response
where
    F: FnOnce(WebSocket) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let Ok(permit) = app.ws_slots.clone().try_acquire_owned() else {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "too many WebSockets open (at most {}; see --max-websockets)",
                app.wb.limits.max_websockets
            ),
        )
        .into_response();
    };
    bounded(ws).on_upgrade(move |socket| async move {
        let _permit = permit;
        serve(socket).await
    })
}

/// Pings a socket's client every third of the idle limit and tells when it has been silent
/// (no frame at all, pongs included) for the whole limit.
struct Liveness {
    tick: tokio::time::Interval,
    heard: tokio::time::Instant,
    idle: std::time::Duration,
}

impl Liveness {
    fn new(idle: std::time::Duration) -> Liveness {
        let every = idle / 3;
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Liveness {
            tick,
            heard: tokio::time::Instant::now(),
            idle,
        }
    }

    fn heard(&mut self) {
        self.heard = tokio::time::Instant::now();
    }

    /// Waits for the next ping; false once the client has been silent too long.
    async fn due(&mut self) -> bool {
        self.tick.tick().await;
        self.heard.elapsed() < self.idle
    }
}

/// What a watch loop does with a frame from its client: false when the socket is done.
fn heard_from(live: &mut Liveness, incoming: Option<Result<Message, axum::Error>>) -> bool {
    match incoming {
        Some(Ok(Message::Close(_))) | Some(Err(_)) | None => false,
        Some(Ok(_)) => {
            live.heard();
            true
        }
    }
}

/// Pings the client, or closes a socket whose client went silent: false when it is done.
async fn keep_alive(socket: &mut WebSocket, alive: bool) -> bool {
    if !alive {
        let frame = CloseFrame {
            code: close_code::AWAY,
            reason: Utf8Bytes::from_static("no answer to pings"),
        };
        let _ = socket.send(Message::Close(Some(frame))).await;
        return false;
    }
    socket.send(Message::Ping(Default::default())).await.is_ok()
}

/// The largest frame or message a client may send (clients only ever send `ready`).
pub const MAX_CLIENT_MESSAGE: usize = 64 * 1024;

/// How long a client has to send `ready` before the socket is closed.
pub const READY_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// Applies the client-frame bounds to an upgrade.
fn bounded(ws: WebSocketUpgrade) -> WebSocketUpgrade {
    ws.max_message_size(MAX_CLIENT_MESSAGE)
        .max_frame_size(MAX_CLIENT_MESSAGE)
}

/// Waits for the client's first text frame; false if the socket closed first or the client
/// stayed silent past [`READY_DEADLINE`] (a socket that never says `ready` is not held forever).
async fn handshake(socket: &mut WebSocket) -> bool {
    let ready = async {
        while let Some(msg) = socket.recv().await {
            match msg {
                Ok(Message::Text(_)) => return true,
                Ok(Message::Close(_)) | Err(_) => return false,
                Ok(_) => continue,
            }
        }
        false
    };
    tokio::time::timeout(READY_DEADLINE, ready).await.unwrap_or(false)
}

async fn send_json<T: serde::Serialize>(socket: &mut WebSocket, value: &T) -> bool {
    match serde_json::to_string(value) {
        Ok(text) => socket.send(Message::Text(text.into())).await.is_ok(),
        Err(_) => true,
    }
}

pub async fn tree_events(
    ws: WebSocketUpgrade,
    State(app): State<Arc<AppState>>,
    ApiPath(tree): ApiPath<u64>,
) -> Response {
    let state = app.clone();
    upgrade(&state, ws, move |socket| tree_socket(socket, app, tree))
}

async fn tree_socket(mut socket: WebSocket, app: Arc<AppState>, tree: u64) {
    let Ok(handle) = app.wb.tree(tree) else {
        return close_policy(socket, "simtree not found").await;
    };
    let mut rx = handle.events.subscribe();
    // Live text comes from now on (no earlier pieces); subscribing is what makes runs stream.
    let mut deltas = handle.deltas.subscribe();
    if !handshake(&mut socket).await {
        return close_policy(socket, "no ready message").await;
    }
    let (root, graph) = {
        let t = handle.lock();
        (t.node(0).map(|n| n.attached()), t.graph())
    };
    if let Ok(root) = root
        && !send_json(&mut socket, &TreeMsg::Attached(root)).await
    {
        return;
    }
    if !send_json(&mut socket, &TreeMsg::Snapshot(graph)).await {
        return;
    }
    let mut live = Liveness::new(app.wb.limits.ws_idle);
    loop {
        tokio::select! {
            // Live text first: a reply's last pieces were sent before its run's `run_finish`.
            biased;
            delta = deltas.recv() => match delta {
                Ok(m) => if !send_json(&mut socket, &m).await { return },
                // Pieces a slow watcher missed are gone: the gap shows in `at`; the log has it all.
                Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return,
            },
            msg = rx.recv() => match msg {
                Ok(m) => if !send_json(&mut socket, &m).await { return },
                Err(RecvError::Lagged(missed)) => {
                    let graph = handle.lock().graph();
                    if !send_json(&mut socket, &TreeMsg::Resync { missed }).await
                        || !send_json(&mut socket, &TreeMsg::Snapshot(graph)).await
                    {
                        return;
                    }
                }
                Err(RecvError::Closed) => return,
            },
            incoming = socket.recv() => if !heard_from(&mut live, incoming) { return },
            alive = live.due() => if !keep_alive(&mut socket, alive).await { return },
        }
    }
}

/// `…/sim/{node}/events` is both upstream's REST log route and the node WebSocket: a WebSocket
/// upgrade request gets the socket, a plain GET the log.
pub async fn node_events_or_logs(
    State(app): State<Arc<AppState>>,
    ApiPath((tree, node)): ApiPath<(u64, NodeId)>,
    req: Request,
) -> Response {
    let wants_ws = req
        .headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if !wants_ws {
        return super::routes::sim_events(State(app), ApiPath((tree, node))).await;
    }
    let (mut parts, _body) = req.into_parts();
    match WebSocketUpgrade::from_request_parts(&mut parts, &()).await {
        Ok(ws) => {
            let state = app.clone();
            upgrade(&state, ws, move |socket| node_socket(socket, app, tree, node))
        }
        Err(rejection) => rejection.into_response(),
    }
}

async fn node_socket(mut socket: WebSocket, app: Arc<AppState>, tree: u64, node: NodeId) {
    let log = match app.wb.node_log(tree, node) {
        Ok(log) => log,
        Err(e) => return close_policy(socket, &e.to_string()).await,
    };
    // The channel only wakes this socket; entries are read from the node's log by index, so a
    // watcher that falls behind `--ws-queue` entries still gets every one of them, in order.
    let (mut rx, mut next) = log.watch(app.wb.limits.ws_queue);
    if !handshake(&mut socket).await {
        return close_policy(socket, "no ready message").await;
    }
    let mut live = Liveness::new(app.wb.limits.ws_idle);
    loop {
        tokio::select! {
            entry = rx.recv() => match entry {
                Ok(_) | Err(RecvError::Lagged(_)) => {
                    for text in log.entries_from(next) {
                        if socket.send(Message::Text(text.into())).await.is_err() {
                            return;
                        }
                        next += 1;
                    }
                }
                Err(RecvError::Closed) => return,
            },
            incoming = socket.recv() => if !heard_from(&mut live, incoming) { return },
            alive = live.due() => if !keep_alive(&mut socket, alive).await { return },
        }
    }
}
