//! The sweep routes: `POST …/sweep` lays a sweep file's grid out under a node and starts its
//! replicates (answering at once), `GET …/sweep/{id}` reads its table and `GET …/sweep` every
//! sweep's. The work is the workbench's (`workbench::sweep`); this file only speaks JSON.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::response::Response;
use serde_json::Value;

use super::error::{ApiError, ApiJson, ApiPath};
use super::job::{found, start_or_estimate};
use super::routes::Estimate;
use super::state::AppState;
use crate::sweep::{SweepPlan, SweepSpec};
use simtree_shared::SweepTable;

type St = State<Arc<AppState>>;

/// The body is a sweep file plus `parent`; a field at fault is named in the 422. With
/// `?estimate=true` the reply is what the sweep would cost, and nothing is made.
pub(crate) async fn start_sweep(
    State(app): St,
    ApiPath(tree): ApiPath<u64>,
    Estimate(estimate): Estimate,
    ApiJson(body): ApiJson<Value>,
) -> Result<Response, ApiError> {
    start_or_estimate(
        body,
        estimate,
        SweepSpec::from_value,
        |spec| app.wb.studies().estimate_sweep(tree, spec),
        |spec| app.wb.studies().start_sweep(tree, spec),
    )
}

pub(crate) async fn sweep_table(
    State(app): St,
    ApiPath((tree, id)): ApiPath<(u64, u64)>,
) -> Result<Json<SweepTable>, ApiError> {
    found(app.wb.studies().sweep_table(tree, id)?, "sweep", id, tree)
}

pub(crate) async fn sweep_tables(
    State(app): St,
    ApiPath(tree): ApiPath<u64>,
) -> Result<Json<Vec<SweepTable>>, ApiError> {
    Ok(Json(app.wb.studies().sweep_tables(tree)?))
}
