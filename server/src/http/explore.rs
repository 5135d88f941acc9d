//! The exploration routes: `POST …/explore` checks an exploration, lays its candidates out under
//! a node and starts its rounds (answering at once); `GET …/explore/{id}` reads its table,
//! `GET …/explores` every exploration's, `POST …/explore/{id}/cancel` stops one. The work is the
//! workbench's (`workbench::explore`); this file only speaks JSON.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::error::{ApiError, ApiJson, ApiPath};
use super::routes::EstimateQuery;
use super::state::AppState;
use crate::explore::ExploreSpec;
use simtree_shared::ExploreTable;

type St = State<Arc<AppState>>;

/// A field at fault is named in the 422. With `?estimate=true` the reply is what the
/// exploration may cost at most (all the runs its budget or schedule allows), and nothing is made.
pub async fn start_explore(
    State(app): St,
    ApiPath(tree): ApiPath<u64>,
    q: Result<Query<EstimateQuery>, axum::extract::rejection::QueryRejection>,
    ApiJson(body): ApiJson<Value>,
) -> Result<Response, ApiError> {
    let spec = ExploreSpec::from_value(body).map_err(|e| ApiError::unprocessable(e.to_string()))?;
    if EstimateQuery::read(q)? {
        return Ok(Json(app.wb.estimate_explore(tree, &spec)?).into_response());
    }
    Ok(Json(app.wb.start_explore(tree, spec)?).into_response())
}

pub async fn explore_table(
    State(app): St,
    ApiPath((tree, id)): ApiPath<(u64, u64)>,
) -> Result<Json<ExploreTable>, ApiError> {
    app.wb
        .explore_table(tree, id)?
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("exploration {id} not found in simtree {tree}")))
}

pub async fn explore_tables(State(app): St, ApiPath(tree): ApiPath<u64>) -> Result<Json<Vec<ExploreTable>>, ApiError> {
    Ok(Json(app.wb.explore_tables(tree)?))
}

/// Stops a running exploration and answers its table (409 when it is not running).
pub async fn cancel_explore(
    State(app): St,
    ApiPath((tree, id)): ApiPath<(u64, u64)>,
) -> Result<Json<ExploreTable>, ApiError> {
    Ok(Json(app.wb.cancel_explore(tree, id).await?))
}
