//! What the sweep and exploration routes share: a body checked into a spec (a 422 naming the
//! field at fault), `?estimate=true` answering the cost without making anything, and a job's
//! table read by id (a 404 naming the job when the tree has none).

use std::fmt::Display;

use axum::Json;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;

use super::error::ApiError;
use crate::workbench::WorkbenchError;

/// Reads `body` into a spec with `parse`, then answers its estimate or starts it.
pub(crate) fn start_or_estimate<S, E: Serialize, R: Serialize, P: Display>(
    body: Value,
    estimate_only: bool,
    parse: impl FnOnce(Value) -> Result<S, P>,
    estimate: impl FnOnce(&S) -> Result<E, WorkbenchError>,
    start: impl FnOnce(S) -> Result<R, WorkbenchError>,
) -> Result<Response, ApiError> {
    let spec = read_job(body, parse)?;
    if estimate_only {
        return Ok(Json(estimate(&spec)?).into_response());
    }
    Ok(Json(start(spec)?).into_response())
}

/// Reads `body` into a spec with `parse` (a 422 naming the field at fault).
pub(crate) fn read_job<S, P: Display>(body: Value, parse: impl FnOnce(Value) -> Result<S, P>) -> Result<S, ApiError> {
    parse(body).map_err(|e| ApiError::unprocessable(e.to_string()))
}

/// A job's table, or a 404 saying which job (`what` with its id) the tree lacks.
pub(crate) fn found<T>(table: Option<T>, what: &str, id: u64, tree: u64) -> Result<Json<T>, ApiError> {
    table.map(Json).ok_or_else(|| ApiError::not_found(format!("{what} {id} not found in simtree {tree}")))
}
