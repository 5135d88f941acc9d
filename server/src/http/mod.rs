//! The HTTP server: every route in one place (`router`), shared state in `state`, errors in
//! `error`, WebSockets in `ws`. Upstream DevUI paths are served as specified; extensions live
//! beside them and never change what an upstream client sees.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{delete, get, post};
use tower_http::cors::CorsLayer;
use tower_http::services::{ServeDir, ServeFile};

pub mod error;
pub mod routes;
pub mod state;
pub mod ws;

pub use state::{AppState, Backend, Limits, Providers};

/// The web UI's build folder: `$SIMTREE_STATIC`, else the checkout's `frontend/dist`.
pub fn default_static_dir() -> PathBuf {
    std::env::var_os("SIMTREE_STATIC")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../frontend/dist")))
}

pub fn router(app: Arc<AppState>) -> Router {
    use routes::*;
    let limit = app.limits.max_body_bytes;
    let devui = Router::new()
        .route("/simtree", post(create_tree).get(list_trees))
        .route("/simtree/import", post(import))
        .route("/simtree/{tree}", delete(delete_tree))
        .route("/simtree/{tree}/summaries", get(summaries))
        .route("/simtree/{tree}/graph", get(graph))
        .route("/simtree/{tree}/export", get(export))
        .route("/simtree/{tree}/advance", post(advance))
        .route("/simtree/{tree}/advance_frontier", post(advance_frontier))
        .route("/simtree/{tree}/advance_multi", post(advance_multi))
        .route("/simtree/{tree}/advance_chain", post(advance_chain))
        .route("/simtree/{tree}/branch", post(branch))
        .route("/simtree/{tree}/lca/{a}/{b}", get(lca))
        .route("/simtree/{tree}/replay", post(replay))
        .route("/simtree/{tree}/usage", get(usage))
        .route("/simtree/{tree}/node/{node}/info", get(node_info))
        .route("/simtree/{tree}/node/{node}/view", get(node_view))
        .route("/simtree/{tree}/node/{node}", delete(delete_node))
        .route("/simtree/{tree}/node/{node}/logs", get(logs))
        .route("/simtree/{tree}/sim/{node}/events", get(ws::node_events_or_logs))
        .route("/simtree/{tree}/node/{node}/state", get(state))
        .route("/simtree/{tree}/sim/{node}/state", get(state))
        .route("/simtree/{tree}/events", get(ws::tree_events))
        .fallback(error::not_found);
    let api = Router::new()
        .route("/scenarios", get(scenarios))
        .route("/abm/generate", post(abm_generate))
        .route("/abm/schema", get(abm_schema))
        .route("/abm/validate", post(abm_validate))
        .fallback(error::not_found);
    // Everything else is the web UI; unknown paths get index.html so deep links survive reloads.
    let dir = app.static_dir.clone();
    let ui = ServeDir::new(&dir).fallback(ServeFile::new(dir.join("index.html")));
    Router::new()
        .route("/health", get(health))
        .nest("/api", api)
        .nest("/devui", devui)
        .fallback_service(ui)
        .layer(DefaultBodyLimit::max(limit))
        .layer(CorsLayer::permissive())
        .with_state(app)
}

/// Binds `addr` and serves until ctrl-c. Prints the bound address (useful with port 0).
pub async fn serve(app: Arc<AppState>, addr: SocketAddr) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("simtree listening on http://{}", listener.local_addr()?);
    axum::serve(listener, router(app))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
}
