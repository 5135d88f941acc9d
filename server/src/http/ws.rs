//! The two WebSockets of the DevUI protocol (spec §3.1).
//!
//! Both subscribe first, then wait for one client text frame (the `ready` handshake), then
//! forward. The tree socket sends the root's `attached` and, as an extension, a `snapshot` of the
//! graph with running ids so late joiners are in sync. A tree watcher that falls behind its
//! bounded queue (`--ws-queue`) gets `resync` and a fresh snapshot instead of unbounded
//! buffering. Live text of running nodes (`delta`) comes on a channel of its own, from the
//! time the socket connects; a tree watcher that misses some of it gets no resync. A node
//! watcher loses nothing: its queue only wakes it, and it reads the entries it has not sent from
//! the node's log, which holds them anyway (from entry `?from=N` on, when it asks).
//!
//! Both run on a [`Conn`], which keeps a socket alive as long as its client reads (pongs are read
//! while a send waits, and no more than [`WINDOW`] is sent past the last ping answered) and closes
//! a silent one saying how to resume.

use std::collections::HashSet;
use std::sync::Arc;

use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, WebSocketUpgrade, close_code};
use axum::extract::{FromRequestParts, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use simtree_shared::TreeMsg;
use tokio::sync::broadcast::error::RecvError;

use super::error::{ApiError, ApiPath};
use super::state::AppState;
use crate::tree::NodeId;

async fn close_policy(mut socket: WebSocket, reason: &str) {
    let frame = CloseFrame { code: close_code::POLICY, reason: Utf8Bytes::from(reason.to_string()) };
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
            format!("too many WebSockets open (at most {}; see --max-websockets)", app.wb.limits().max_websockets),
        )
        .into_response();
    };
    bounded(ws).on_upgrade(move |socket| async move {
        let _permit = permit;
        serve(socket).await
    })
}

/// Bytes the server sends ahead of what its client has shown it read (by answering a ping sent
/// after them). A ping never waits behind more than this, so a reader's answer is late only when
/// the reader is: one that reads at least this much per `--ws-idle-secs` is never taken for silent.
pub(crate) const WINDOW: u64 = 256 << 10;

/// How long closing a socket waits for its close frame to go out and for the client's answer.
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Pings kept for matching answers; older ones are forgotten (a client that answers none is
/// closed for silence anyway).
const MAX_PINGS: usize = 64;

/// Why a socket ends.
enum End {
    /// The client closed it, or the connection failed.
    Gone,
    /// The client sent nothing, pongs included, for the idle window.
    Silent,
}

/// What the client has shown: when it last sent a frame, and how far it has read.
struct Heard {
    at: tokio::time::Instant,
    /// Pings not answered yet: their number and the bytes sent before each.
    pings: std::collections::VecDeque<(u64, u64)>,
    /// Bytes the client has read, as of the last ping it answered.
    read: u64,
}

impl Heard {
    /// Takes in a frame from the client; `Err` when it ends the socket.
    fn frame(&mut self, incoming: Option<Result<Message, axum::Error>>) -> Result<(), End> {
        let pong = match incoming {
            Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return Err(End::Gone),
            Some(Ok(Message::Pong(data))) => Some(<[u8; 8]>::try_from(&data[..]).ok().map(u64::from_be_bytes)),
            Some(Ok(_)) => None,
        };
        self.at = tokio::time::Instant::now();
        match pong {
            // A pong answers its ping and every earlier one (a client may answer only the last).
            Some(Some(n)) => {
                while let Some(&(seq, sent)) = self.pings.front()
                    && seq <= n
                {
                    self.read = sent;
                    self.pings.pop_front();
                }
            }
            // One without our number answers the oldest ping.
            Some(None) => {
                if let Some((_, sent)) = self.pings.pop_front() {
                    self.read = sent;
                }
            }
            None => {}
        }
        Ok(())
    }
}

/// A WebSocket as the server drives it. What the client sends (pongs, closes) is read at all
/// times, also while a send waits for the client to take it. The server pings every third of
/// the idle window and after every half [`WINDOW`] sent, and sends no more than [`WINDOW`] ahead
/// of the last ping answered. So a client is closed for silence only when it has sent nothing for
/// the idle window although a ping with less than [`WINDOW`] before it was sent to it: it stopped
/// reading, or reads less than that much per window; never because the server was busy or had
/// queued more than the client could read in time.
struct Conn {
    sink: SplitSink<WebSocket, Message>,
    stream: SplitStream<WebSocket>,
    idle: std::time::Duration,
    heard: Heard,
    /// When the next ping is due at the latest.
    ping_at: tokio::time::Instant,
    /// Bytes of messages sent, and where the last ping went.
    sent: u64,
    pinged: u64,
    seq: u64,
}

impl Conn {
    fn new(socket: WebSocket, idle: std::time::Duration) -> Conn {
        let (sink, stream) = socket.split();
        let now = tokio::time::Instant::now();
        Conn {
            sink,
            stream,
            idle,
            heard: Heard { at: now, pings: Default::default(), read: 0 },
            ping_at: now + idle / 3,
            sent: 0,
            pinged: 0,
            seq: 0,
        }
    }

    /// One step of waiting for `source`: its output, or `None` once a frame came from the client
    /// or a ping went out.
    async fn step<T>(&mut self, source: std::pin::Pin<&mut impl Future<Output = T>>) -> Result<Option<T>, End> {
        tokio::select! {
            biased;
            incoming = self.stream.next() => self.heard.frame(incoming).map(|()| None),
            v = source => Ok(Some(v)),
            _ = tokio::time::sleep_until(self.ping_at) => self.ping().await.map(|()| None),
            _ = tokio::time::sleep_until(self.heard.at + self.idle) => Err(End::Silent),
        }
    }

    /// Waits for `source`, keeping the socket alive meanwhile; `Err` when the socket ends first.
    async fn wait<T>(&mut self, source: impl Future<Output = T>) -> Result<T, End> {
        let mut source = std::pin::pin!(source);
        loop {
            if let Some(v) = self.step(source.as_mut()).await? {
                return Ok(v);
            }
        }
    }

    /// Sends `text` once the client has read enough of what came before (see [`WINDOW`]).
    async fn send(&mut self, text: String) -> Result<(), End> {
        let len = text.len() as u64;
        if self.sent - self.pinged >= WINDOW / 2 {
            self.ping().await?;
        }
        while self.heard.read < self.sent && self.sent - self.heard.read + len > WINDOW {
            if self.pinged < self.sent {
                // Its answer shows the client has read everything sent so far.
                self.ping().await?;
            }
            self.step(std::pin::pin!(std::future::pending::<()>())).await?;
        }
        self.write(Message::Text(text.into())).await?;
        self.sent += len;
        Ok(())
    }

    async fn ping(&mut self) -> Result<(), End> {
        self.seq += 1;
        if self.heard.pings.len() == MAX_PINGS {
            self.heard.pings.pop_front();
        }
        self.heard.pings.push_back((self.seq, self.sent));
        self.pinged = self.sent;
        self.ping_at = tokio::time::Instant::now() + self.idle / 3;
        self.write(Message::Ping(self.seq.to_be_bytes().to_vec().into())).await
    }

    /// Writes one frame, reading the client's frames while the write waits for it.
    async fn write(&mut self, msg: Message) -> Result<(), End> {
        let mut send = std::pin::pin!(self.sink.send(msg));
        loop {
            tokio::select! {
                biased;
                done = &mut send => return done.map_err(|_| End::Gone),
                incoming = self.stream.next() => self.heard.frame(incoming)?,
                _ = tokio::time::sleep_until(self.heard.at + self.idle) => return Err(End::Silent),
            }
        }
    }

    async fn send_json<T: serde::Serialize>(&mut self, value: &T) -> Result<(), End> {
        match serde_json::to_string(value) {
            Ok(text) => self.send(text).await,
            Err(_) => Ok(()),
        }
    }

    /// Ends the socket. A silent client is told so (1001, with `resume` saying how to carry on):
    /// the close frame goes after everything sent, and what the client sends meanwhile is read
    /// until its own close, so that nothing unread makes the connection reset and lose the end.
    async fn end(mut self, end: End, resume: &str) {
        let closing = async {
            if let End::Silent = end {
                let frame = CloseFrame {
                    code: close_code::AWAY,
                    reason: Utf8Bytes::from(format!("silent for {} s; {resume}", self.idle.as_secs())),
                };
                let (sent, _) = tokio::join!(self.sink.send(Message::Close(Some(frame))), async {
                    while let Some(Ok(m)) = self.stream.next().await {
                        if matches!(m, Message::Close(_)) {
                            break;
                        }
                    }
                });
                if sent.is_err() {
                    return;
                }
            }
            let _ = self.sink.close().await;
        };
        let _ = tokio::time::timeout(CLOSE_WAIT, closing).await;
    }
}

/// The largest frame or message a client may send (clients only ever send `ready`).
pub(crate) const MAX_CLIENT_MESSAGE: usize = 64 * 1024;

/// How long a client has to send `ready` before the socket is closed.
pub(crate) const READY_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// Applies the client-frame bounds to an upgrade.
fn bounded(ws: WebSocketUpgrade) -> WebSocketUpgrade {
    ws.max_message_size(MAX_CLIENT_MESSAGE).max_frame_size(MAX_CLIENT_MESSAGE)
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

pub(crate) async fn tree_events(
    ws: WebSocketUpgrade,
    State(app): State<Arc<AppState>>,
    ApiPath(tree): ApiPath<u64>,
) -> Response {
    let state = app.clone();
    upgrade(&state, ws, move |socket| tree_socket(socket, app, tree))
}

async fn tree_socket(mut socket: WebSocket, app: Arc<AppState>, tree: u64) {
    let Ok(mut watch) = app.wb.trees().watch(tree) else {
        return close_policy(socket, "simtree not found").await;
    };
    if !handshake(&mut socket).await {
        return close_policy(socket, "no ready message").await;
    }
    let (root, graph) = watch.snapshot();
    let mut conn = Conn::new(socket, app.wb.limits().ws_idle);
    let Err(end) = tree_messages(&mut conn, &mut watch, root, graph).await;
    conn.end(end, "reconnect for a new snapshot").await;
}

/// What a tree watcher gets, until its socket ends.
async fn tree_messages(
    conn: &mut Conn,
    watch: &mut crate::workbench::TreeWatch,
    root: Option<TreeMsg>,
    graph: simtree_shared::Graph,
) -> Result<std::convert::Infallible, End> {
    if let Some(root) = root {
        conn.send_json(&root).await?;
    }
    // The runs this watcher saw start. Live text comes on a channel of its own, so a run's first
    // pieces can overtake its `run_start`: they wait here for it (a watcher never reads text
    // of a run it was not told of), bounded as the channel is.
    let mut started: HashSet<u64> = graph.running.iter().copied().collect();
    let mut held: Vec<TreeMsg> = Vec::new();
    conn.send_json(&TreeMsg::Snapshot(graph)).await?;
    loop {
        let next = conn
            .wait(async {
                tokio::select! {
                    // Live text first: a reply's last pieces were sent before its run's `run_finish`.
                    biased;
                    delta = watch.deltas.recv() => (true, delta),
                    msg = watch.events.recv() => (false, msg),
                }
            })
            .await?;
        match next {
            (true, Ok(m)) => match &m {
                TreeMsg::Delta { node, .. } if !started.contains(node) => {
                    if held.len() < crate::workbench::DELTA_QUEUE {
                        held.push(m);
                    }
                }
                _ => conn.send_json(&m).await?,
            },
            (false, Ok(m)) => {
                conn.send_json(&m).await?;
                match m {
                    TreeMsg::RunStart { node } => {
                        started.insert(node);
                        let (now, later): (Vec<_>, Vec<_>) = std::mem::take(&mut held)
                            .into_iter()
                            .partition(|d| matches!(d, TreeMsg::Delta { node: n, .. } if *n == node));
                        held = later;
                        for d in now {
                            conn.send_json(&d).await?;
                        }
                    }
                    TreeMsg::RunFinish { node, .. } | TreeMsg::Deleted { node } => {
                        started.remove(&node);
                        held.retain(|d| !matches!(d, TreeMsg::Delta { node: n, .. } if *n == node));
                    }
                    _ => {}
                }
            }
            // Pieces a slow watcher missed are gone: the gap shows in `at`; the log has it all.
            (true, Err(RecvError::Lagged(_))) => {}
            (false, Err(RecvError::Lagged(missed))) => {
                let graph = watch.graph();
                started = graph.running.iter().copied().collect();
                conn.send_json(&TreeMsg::Resync { missed }).await?;
                conn.send_json(&TreeMsg::Snapshot(graph)).await?;
            }
            (_, Err(RecvError::Closed)) => return Err(End::Gone),
        }
    }
}

/// `…/sim/{node}/events` is both upstream's REST log route and the node WebSocket: a WebSocket
/// upgrade request gets the socket, a plain GET the log.
pub(crate) async fn node_events_or_logs(
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
    let from = match Query::<NodeSocketQuery>::try_from_uri(req.uri()) {
        Ok(Query(q)) => q.from,
        Err(e) => return ApiError::unprocessable(e.body_text()).into_response(),
    };
    let (mut parts, _body) = req.into_parts();
    match WebSocketUpgrade::from_request_parts(&mut parts, &()).await {
        Ok(ws) => {
            let state = app.clone();
            upgrade(&state, ws, move |socket| node_socket(socket, app, tree, node, from))
        }
        Err(rejection) => rejection.into_response(),
    }
}

/// `?from=N` on a node socket: start at the node's entry N (a reconnecting client gives the
/// index its last socket was closed with) instead of at the next entry.
#[derive(serde::Deserialize)]
struct NodeSocketQuery {
    from: Option<usize>,
}

async fn node_socket(mut socket: WebSocket, app: Arc<AppState>, tree: u64, node: NodeId, from: Option<usize>) {
    let log = match app.wb.trees().node_log(tree, node) {
        Ok(log) => log,
        Err(e) => return close_policy(socket, &e.to_string()).await,
    };
    // The channel only wakes this socket; entries are read from the node's log by index, so a
    // watcher that falls behind `--ws-queue` entries still gets every one of them, in order.
    let (mut rx, now) = log.watch(app.wb.limits().ws_queue);
    let mut next = from.unwrap_or(now);
    if !handshake(&mut socket).await {
        return close_policy(socket, "no ready message").await;
    }
    let mut conn = Conn::new(socket, app.wb.limits().ws_idle);
    let Err(end) = node_entries(&mut conn, &log, &mut next, &mut rx).await;
    conn.end(end, &format!("resume with ?from={next}")).await;
}

/// Sends the node's entries from `next` on as they come, counting them in `next`, until the
/// socket ends.
async fn node_entries(
    conn: &mut Conn,
    log: &crate::tree::NodeLog,
    next: &mut usize,
    rx: &mut tokio::sync::broadcast::Receiver<Arc<str>>,
) -> Result<std::convert::Infallible, End> {
    loop {
        for text in log.entries_from(*next) {
            conn.send(text).await?;
            *next += 1;
        }
        if let Err(RecvError::Closed) = conn.wait(rx.recv()).await? {
            return Err(End::Gone);
        }
    }
}
