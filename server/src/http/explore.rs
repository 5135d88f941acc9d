//! The exploration routes: `POST …/explore` checks an exploration, lays its candidates out under
//! a node and starts its rounds (answering at once); `GET …/explore/{id}` reads its table,
//! `GET …/explores` every exploration's, `POST …/explore/{id}/cancel` stops one and
//! `POST …/explore/{id}/resume` carries an interrupted one on. The work is the workbench's
//! (`workbench::explore`); this file only speaks JSON.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::error::{ApiError, ApiJson, ApiPath};
use super::job::{found, read_job};
use super::routes::Estimate;
use super::state::AppState;
use crate::explore::ExploreSpec;
use simtree_shared::ExploreTable;

type St = State<Arc<AppState>>;

/// A field at fault is named in the 422. With `?estimate=true` the reply is what the
/// exploration may cost at most (all the runs its budget or schedule allows), and nothing is made.
/// Both work out what each candidate's first provider call would hold under a money cap, which
/// runs each candidate privately up to that call.
pub(crate) async fn start_explore(
    State(app): St,
    ApiPath(tree): ApiPath<u64>,
    Estimate(estimate): Estimate,
    ApiJson(body): ApiJson<Value>,
) -> Result<Response, ApiError> {
    let spec = read_job(body, ExploreSpec::from_value)?;
    if estimate {
        return Ok(Json(app.wb.studies().estimate_explore(tree, &spec).await?).into_response());
    }
    Ok(Json(app.wb.studies().start_explore(tree, spec).await?).into_response())
}

pub(crate) async fn explore_table(
    State(app): St,
    ApiPath((tree, id)): ApiPath<(u64, u64)>,
) -> Result<Json<ExploreTable>, ApiError> {
    found(app.wb.studies().explore_table(tree, id)?, "exploration", id, tree)
}

pub(crate) async fn explore_tables(
    State(app): St,
    ApiPath(tree): ApiPath<u64>,
) -> Result<Json<Vec<ExploreTable>>, ApiError> {
    Ok(Json(app.wb.studies().explore_tables(tree)?))
}

/// Stops a running exploration and answers its table (409 when it is not running).
pub(crate) async fn cancel_explore(
    State(app): St,
    ApiPath((tree, id)): ApiPath<(u64, u64)>,
) -> Result<Json<ExploreTable>, ApiError> {
    Ok(Json(app.wb.studies().cancel_explore(tree, id).await?))
}

/// Carries an interrupted exploration on and answers its table reading `running` (409 when it
/// was not interrupted).
pub(crate) async fn resume_explore(
    State(app): St,
    ApiPath((tree, id)): ApiPath<(u64, u64)>,
) -> Result<Json<ExploreTable>, ApiError> {
    Ok(Json(app.wb.studies().resume_explore(tree, id)?))
}
