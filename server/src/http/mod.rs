//! The HTTP server: every route in one place (`router`), shared state in `state`, errors in
//! `error`, WebSockets in `ws`. Upstream DevUI paths are served as specified; extensions live
//! beside them and never change what an upstream client sees.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, header};
use axum::routing::{delete, get, post};
use tower::ServiceBuilder;
use tower_http::compression::CompressionLayer;
use tower_http::services::{ServeDir, ServeFile};
use tower_http::set_header::SetResponseHeaderLayer;

pub mod datasets;
pub mod error;
pub mod explore;
pub mod fleet;
pub mod guard;
pub mod job;
pub mod listener;
pub mod notebook;
pub mod openapi;
pub mod routes;
pub mod scenarios;
pub mod state;
pub mod sweep;
pub mod table;
pub mod transfer;
pub mod ws;

pub use guard::Access;

pub use crate::workbench::Workbench;
pub(crate) use state::DEFAULT_SHUTDOWN_GRACE;
pub use state::{AppState, Backend, Limits, Providers};

/// The web UI's build folder: `$SIMTREE_STATIC`, else the checkout's `frontend/dist` when it
/// is there, else the UI embedded in the binary.
pub(crate) fn default_static_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("SIMTREE_STATIC") {
        return dir.into();
    }
    let checkout = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../frontend/dist"));
    if checkout.join("index.html").is_file() {
        return checkout;
    }
    crate::embedded::ui().unwrap_or(checkout)
}

pub(crate) fn router(app: Arc<AppState>) -> Router {
    use routes::*;
    let limit = app.wb.limits().max_body_bytes;
    let devui = Router::new()
        .route("/simtree", post(create_tree).get(list_trees))
        .route("/simtree/import", post(transfer::import))
        .route("/simtree/{tree}", get(get_tree).delete(delete_tree).patch(patch_tree))
        .route("/simtree/{tree}/summaries", get(summaries))
        .route("/simtree/{tree}/graph", get(graph))
        .route("/simtree/{tree}/graph/columns", get(graph_columns))
        .route("/simtree/{tree}/export", get(transfer::export))
        .route("/simtree/{tree}/advance", post(advance))
        .route("/simtree/{tree}/advance_frontier", post(advance_frontier))
        .route("/simtree/{tree}/advance_multi", post(advance_multi))
        .route("/simtree/{tree}/advance_chain", post(advance_chain))
        .route("/simtree/{tree}/branch", post(branch))
        .route("/simtree/{tree}/lca/{a}/{b}", get(lca))
        .route("/simtree/{tree}/replay", post(replay))
        .route("/simtree/{tree}/usage", get(usage))
        .route("/simtree/{tree}/sweep", post(sweep::start_sweep).get(sweep::sweep_tables))
        .route("/simtree/{tree}/sweep/{id}", get(sweep::sweep_table))
        .route("/simtree/{tree}/sweep/{id}/table", get(table::sweep_table))
        .route("/simtree/{tree}/explore", post(explore::start_explore))
        .route("/simtree/{tree}/explores", get(explore::explore_tables))
        .route("/simtree/{tree}/explore/{id}", get(explore::explore_table))
        .route("/simtree/{tree}/explore/{id}/cancel", post(explore::cancel_explore))
        .route("/simtree/{tree}/explore/{id}/resume", post(explore::resume_explore))
        .route("/simtree/{tree}/node/{node}/info", get(node_info))
        .route("/simtree/{tree}/node/{node}/view", get(node_view))
        .route("/simtree/{tree}/node/{node}/table", get(table::log_table))
        .route("/simtree/{tree}/node/{node}/calls", get(notebook::node_calls))
        .route("/simtree/{tree}/node/{node}/ask", post(notebook::ask))
        .route("/simtree/{tree}/node/{node}/asks", get(notebook::asks))
        .route("/simtree/{tree}/node/{node}", delete(delete_node).patch(notebook::annotate_node))
        .route("/simtree/{tree}/search", get(notebook::search_tree))
        .route("/simtree/{tree}/node/{node}/cancel", post(cancel_node))
        .route("/simtree/{tree}/node/{node}/logs", get(logs))
        .route("/simtree/{tree}/sim/{node}/events", get(ws::node_events_or_logs))
        .route("/simtree/{tree}/node/{node}/state", get(state))
        .route("/simtree/{tree}/sim/{node}/state", get(routes::sim_state))
        .route("/simtree/{tree}/events", get(ws::tree_events))
        .fallback(error::not_found);
    let api = Router::new()
        .route("/scenarios", get(scenarios::list).post(scenarios::save))
        .route("/scenarios/{id}", get(scenarios::get).put(scenarios::put).delete(scenarios::delete))
        .route("/scene-types", get(scenarios::scene_types))
        // Not under /scenarios/: a saved scenario may be called `check` or `preview`.
        .route("/documents/check", post(scenarios::check))
        .route("/documents/preview", post(scenarios::preview))
        .route("/documents/generate", post(scenarios::generate))
        .route("/abm/generate", post(abm_generate))
        .route("/abm/schema", get(abm_schema))
        .route("/abm/validate", post(abm_validate))
        .route("/datasets", post(datasets::upload).get(datasets::list))
        .route("/datasets/{name}", delete(datasets::delete))
        .route("/search", get(notebook::search_all))
        .fallback(error::not_found);
    // Everything else is the web UI; unknown paths get index.html so deep links survive reloads.
    let ui = ui_service(&app.static_dir, &app.access);
    let access = app.access.clone();
    let mut router = Router::new()
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/openapi.json", get(openapi::openapi))
        .nest("/api", api)
        .nest("/devui", devui)
        .fallback_service(ui)
        .layer(DefaultBodyLimit::max(limit))
        .layer(CompressionLayer::new())
        // Request lines (method, path, status, latency); query strings may hold the token, so
        // only the path is logged.
        .layer(
            tower_http::trace::TraceLayer::new_for_http()
                .make_span_with(|req: &axum::http::Request<_>| {
                    tracing::info_span!("http", method = %req.method(), path = %req.uri().path())
                })
                .on_request(())
                .on_response(tower_http::trace::DefaultOnResponse::new().level(tracing::Level::INFO)),
        );
    // No wildcard CORS: only origins listed with --allow-origin get CORS headers at all.
    if let Some(cors) = access.cors() {
        router = router.layer(cors);
    }
    router
        .layer(axum::middleware::from_fn_with_state(app.clone(), refuse_when_stopping))
        .layer(axum::middleware::from_fn_with_state(access, guard::guard))
        .with_state(app)
}

/// The web UI's files in `dir`. Its file names carry no content hash, so browsers revalidate
/// (Last-Modified) instead of caching blindly. `cargo xtask dist` writes each file brotli- and
/// gzip-compressed beside it (`.br`, `.gz`), sent as they are to a browser that accepts them:
/// compressing the 2.4 MB release wasm per request took 100–350 ms of a first load. Anything
/// else is compressed on the fly (the router's layer). Every answer carries `access`'s framing
/// policy ([`Access::frame_headers`]).
pub(crate) fn ui_service(
    dir: &std::path::Path,
    access: &Access,
) -> impl tower::Service<
    axum::extract::Request,
    Response = axum::response::Response,
    Error = std::convert::Infallible,
    Future = impl Send + 'static,
> + Clone
+ Send
+ Sync
+ 'static {
    let frame_headers = access.frame_headers();
    ServiceBuilder::new()
        .layer(SetResponseHeaderLayer::if_not_present(header::CACHE_CONTROL, HeaderValue::from_static("no-cache")))
        .layer(axum::middleware::map_response(move |mut res: axum::response::Response| {
            let headers = frame_headers.clone();
            async move {
                res.headers_mut().extend(headers);
                res
            }
        }))
        // Only for our own UI: another client's build (`--static-dir`) has no such files.
        .layer(axum::middleware::from_fn_with_state(dir.join("simtree_frontend_bg.wasm").exists(), preload_links))
        .service(
            ServeDir::new(dir).precompressed_br().precompressed_gzip().fallback(ServeFile::new(dir.join("index.html"))),
        )
}

/// While the server stops, requests that change something (any method but GET, HEAD and
/// OPTIONS) are refused with 503, so no new run starts; reads and live sockets go on, so
/// watchers see the running runs end.
async fn refuse_when_stopping(
    axum::extract::State(app): axum::extract::State<Arc<AppState>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let reads =
        matches!(*req.method(), axum::http::Method::GET | axum::http::Method::HEAD | axum::http::Method::OPTIONS);
    if !reads && app.draining.load(std::sync::atomic::Ordering::Acquire) {
        return axum::response::IntoResponse::into_response(error::ApiError::shutting_down());
    }
    next.run(req).await
}

/// Binds `addr` for [`serve`].
pub(crate) async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}

/// The first line printed: the address to open (with the token when there is one; tests read
/// it, so keep its shape).
pub(crate) fn announce(bound: SocketAddr, access: &Access) {
    match &access.token {
        Some(token) => println!("simtree listening on http://{bound}/?token={token}"),
        None => println!("simtree listening on http://{bound}"),
    }
}

/// Serves `door` on `listener` until `stop` (a [`stop_requested`] made before the server said
/// it listens); a leader then lets its runs finish.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    door: Arc<fleet::Door>,
    stop: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let fds = listener::raise_fd_limit();
    // Leave descriptors for the store, the workers and the provider clients.
    let cap = door.max_connections().min(fds.saturating_sub(256).max(64) as usize);
    let stopping = {
        let door = door.clone();
        async move {
            stop.await;
            door.stop();
        }
    };
    listener::serve(listener, door.router(), cap, stopping).await?;
    let Some(app) = door.leading() else {
        return Ok(());
    };
    // A server whose lease another took can store nothing its runs do: they end now.
    let deposed = app.wb.store().and_then(|s| s.lease_lost()).is_some();
    let grace = if deposed { std::time::Duration::ZERO } else { app.shutdown_grace };
    let runs = app.wb.upkeep().runs_in_flight();
    if runs > 0 {
        eprintln!(
            "simtree: stopping: letting {runs} run(s) finish (up to {} s, --shutdown-grace-secs)",
            grace.as_secs()
        );
    }
    let drained = app.wb.upkeep().drain(grace).await;
    if drained.cancelled > 0 {
        eprintln!("simtree: stopping: cancelled {} run(s) still going after the grace period", drained.cancelled);
    }
    Ok(())
}

/// Ctrl-C (SIGINT), or SIGTERM — what `docker stop`, Kubernetes and systemd send. Either way
/// the server stops listening (`/ready` and changes answer 503 on open connections), lets the
/// runs in flight finish for up to its grace period, cancels the rest (stored as cancelled), and
/// the store closes cleanly (with PostgreSQL it releases the server lease, so a follower or a
/// replacement takes over at once).
///
/// The signals are caught from the call on, not from the first poll: a process that says it
/// is ready must not die of a signal that comes before its serving loop first looks (the default
/// action would end it without releasing the lease).
pub(crate) fn stop_requested() -> impl std::future::Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let caught = (signal(SignalKind::terminate()), signal(SignalKind::interrupt()));
        async move {
            match caught {
                (Ok(mut term), Ok(mut int)) => {
                    tokio::select! {
                        _ = int.recv() => {}
                        _ = term.recv() => {}
                    }
                }
                _ => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Adds to a web UI page's answer a `Link` header that has the browser fetch, as the answer
/// arrives, what index.html's script asks for ~25–150 ms later (the script's `fetch()` then gets
/// the preloaded response: same URL, CORS mode, same-origin credentials): the wasm, and on a
/// tree's page (`/simtree/{id}`, `/studio/{id}`) the tree's graph.
async fn preload_links(
    axum::extract::State(ours): axum::extract::State<bool>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    if !ours {
        return next.run(req).await;
    }
    // (A cheap clone: the path is written only for pages, not for every file the UI loads.)
    let uri = req.uri().clone();
    let mut res = next.run(req).await;
    let html = res.headers().get(header::CONTENT_TYPE).is_some_and(|t| t.as_bytes().starts_with(b"text/html"));
    if html && let Ok(value) = HeaderValue::from_str(&preload_for(uri.path())) {
        res.headers_mut().entry(header::LINK).or_insert(value);
    }
    res
}

/// The `Link` header value of the page at `path` (see [`preload_links`]).
fn preload_for(path: &str) -> String {
    let mut links = String::from("</simtree_frontend_bg.wasm>; rel=preload; as=fetch; crossorigin");
    let tree = ["/simtree/", "/studio/"]
        .iter()
        .find_map(|page| path.strip_prefix(page))
        .map(|rest| rest.trim_end_matches('/'))
        .filter(|id| !id.is_empty() && id.len() <= 20 && id.bytes().all(|b| b.is_ascii_digit()));
    if let Some(id) = tree {
        links.push_str(&format!(", </devui/simtree/{id}/graph/columns>; rel=preload; as=fetch; crossorigin"));
    }
    links
}

#[cfg(test)]
mod tests {
    use super::preload_for;

    #[test]
    fn a_tree_page_preloads_its_graph_and_nothing_else_is_guessed() {
        let wasm = "</simtree_frontend_bg.wasm>; rel=preload; as=fetch; crossorigin";
        let graph =
            |id: &str| format!("{wasm}, </devui/simtree/{id}/graph/columns>; rel=preload; as=fetch; crossorigin");
        assert_eq!(preload_for("/simtree/12"), graph("12"));
        assert_eq!(preload_for("/studio/7/"), graph("7"));
        for path in [
            "/",
            "/simtree",
            "/simtree/",
            "/simtree/x1",
            "/simtree/1/2",
            "/sim/3",
            "/simtree/1%0d%0aX: y",
            "/simtree/123456789012345678901",
        ] {
            assert_eq!(preload_for(path), wasm, "{path}");
        }
    }
}
