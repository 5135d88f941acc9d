//! The notebook's routes: annotate a node (`PATCH …/node/{n}`), and search a tree's text
//! (`GET …/search`) or every tree's (`GET /api/search`). The rules are the workbench's
//! (`workbench/notebook.rs`); a bad query string is a JSON 422 like every other bad input.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use simtree_shared::{Ask, AskRequest, NodeCalls, NodeInfo, NodePatch, SearchReply};

use super::error::{ApiError, ApiJson, ApiPath, ApiQuery, blocking};
use super::routes::node_info;
use super::state::AppState;
use crate::tree::NodeId;

type St = State<Arc<AppState>>;

/// `PATCH …/node/{n}`: the node's info with its annotation as stored.
pub(crate) async fn annotate_node(
    State(app): St,
    ApiPath((tree, node)): ApiPath<(u64, NodeId)>,
    ApiJson(patch): ApiJson<NodePatch>,
) -> Result<Json<NodeInfo>, ApiError> {
    let wb = app.wb.clone();
    blocking("storing the annotation", move || wb.notebook().annotate(tree, node, &patch)).await?;
    node_info(State(app), ApiPath((tree, node))).await
}

/// The query of the search routes.
/// (Documented by hand in `openapi.rs`: `search_params`.)
#[derive(Deserialize)]
pub(crate) struct SearchParams {
    /// The words to find, matched as a phrase (1 to 256 characters, no control characters).
    q: Option<String>,
    /// Hits to skip (the `next` of the previous page).
    offset: Option<u64>,
    /// Hits per page, 1 to 200 (default 20).
    limit: Option<u64>,
}

/// `GET …/{tree}/search?q=&offset=&limit=`.
pub(crate) async fn search_tree(
    State(app): St,
    ApiPath(tree): ApiPath<u64>,
    ApiQuery(p): ApiQuery<SearchParams>,
) -> Result<Json<SearchReply>, ApiError> {
    let wb = app.wb.clone();
    let reply =
        blocking("the search", move || wb.notebook().search(Some(tree), p.q.as_deref(), p.offset, p.limit)).await?;
    Ok(Json(reply))
}

/// `GET /api/search?q=&offset=&limit=`: every tree's hits (each names its tree).
pub(crate) async fn search_all(
    State(app): St,
    ApiQuery(p): ApiQuery<SearchParams>,
) -> Result<Json<SearchReply>, ApiError> {
    let wb = app.wb.clone();
    let reply = blocking("the search", move || wb.notebook().search(None, p.q.as_deref(), p.offset, p.limit)).await?;
    Ok(Json(reply))
}

/// `GET …/node/{n}/calls`: each model call of the node's run (its advance run again from the
/// node's recording, privately; nothing is stored or paid).
pub(crate) async fn node_calls(
    State(app): St,
    ApiPath((tree, node)): ApiPath<(u64, NodeId)>,
    ApiQuery(p): ApiQuery<PageParams>,
) -> Result<Json<NodeCalls>, ApiError> {
    Ok(Json(app.wb.notebook().calls(tree, node, p.offset, p.limit).await?))
}

/// `?offset=&limit=` of a paged list.
#[derive(Deserialize)]
pub(crate) struct PageParams {
    offset: Option<u64>,
    limit: Option<u64>,
}

/// `POST …/node/{n}/ask`: one agent's answer from its context at the node; the timeline is
/// unchanged, the ask is kept in the node's history.
pub(crate) async fn ask(
    State(app): St,
    ApiPath((tree, node)): ApiPath<(u64, NodeId)>,
    ApiJson(req): ApiJson<AskRequest>,
) -> Result<Json<Ask>, ApiError> {
    Ok(Json(app.wb.notebook().ask(tree, node, &req).await?))
}

/// `GET …/node/{n}/asks`: the questions asked at the node, oldest first.
pub(crate) async fn asks(
    State(app): St,
    ApiPath((tree, node)): ApiPath<(u64, NodeId)>,
) -> Result<Json<Vec<Ask>>, ApiError> {
    Ok(Json(app.wb.notebook().asks(tree, node)?))
}
