//! `/api/datasets`: market datasets users upload as CSV, listed next to the shipped data, and
//! deleted when no tree trades on them (see `workbench::datasets` for the rules).

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use simtree_shared::{DatasetInfo, OkReply};

use super::error::{ApiError, ApiPath, blocking};
use super::state::AppState;

type St = State<Arc<AppState>>;

/// `POST /api/datasets?name=N` with a `text/csv` body: checked whole; nothing is kept on a refusal.
pub(crate) async fn upload(
    State(app): St,
    Query(q): Query<std::collections::HashMap<String, String>>,
    body: Bytes,
) -> Result<(StatusCode, Json<DatasetInfo>), ApiError> {
    let name =
        q.get("name").cloned().ok_or_else(|| ApiError::unprocessable("name the dataset: POST /api/datasets?name=N"))?;
    let text = std::str::from_utf8(&body)
        .map_err(|e| ApiError::unprocessable(format!("the dataset is not UTF-8 text: {e}")))?
        .to_string();
    let info = blocking("reading the dataset", move || app.wb.datasets().import_dataset(&name, &text)).await?;
    Ok((StatusCode::CREATED, Json(info)))
}

/// `GET /api/datasets`.
pub(crate) async fn list(State(app): St) -> Json<Vec<DatasetInfo>> {
    Json(app.wb.datasets().dataset_list())
}

/// `DELETE /api/datasets/{name}`.
pub(crate) async fn delete(State(app): St, ApiPath(name): ApiPath<String>) -> Result<Json<OkReply>, ApiError> {
    if !app.wb.datasets().has_dataset(&name) {
        return Err(ApiError::new(StatusCode::NOT_FOUND, format!("no dataset called '{name}'")));
    }
    blocking("deleting the dataset", move || app.wb.datasets().delete_dataset(&name)).await?;
    Ok(Json(OkReply { ok: true }))
}
