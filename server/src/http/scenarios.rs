//! `/api/scenarios`: the scenario library — shipped scenarios (read-only) and the ones users save,
//! every version kept (see `workbench::library` for the rules).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use simtree_shared::refusal_path;
use simtree_shared::{
    DocumentRequest, GenerateDocumentRequest, GeneratedDocument, NewScenario, RolePrompt, SavedRef, ScenarioChecked,
    ScenarioDocument, ScenarioSummary, ScenarioUpdate, SceneTypeInfo,
};

use super::error::{ApiError, ApiJson, ApiPath, ApiQuery, blocking};
use super::state::AppState;

type St = State<Arc<AppState>>;

/// `GET /api/scenarios`: the shipped scenarios, then the saved ones (`origin: "saved"`, with
/// their latest `version`).
pub(crate) async fn list(State(app): St) -> Json<Vec<ScenarioSummary>> {
    Json(app.wb.scenarios().scenario_list())
}

/// `GET /api/scene-types`: each scene type a social document may name, the actions its agents
/// may hold and its default prose (what `scene.prose` replaces).
pub(crate) async fn scene_types() -> Json<Vec<SceneTypeInfo>> {
    Json(crate::engine::scenes::scene_types())
}

/// The query of `GET /api/scenarios/{id}`.
#[derive(Deserialize, schemars::JsonSchema)]
pub(crate) struct VersionQuery {
    /// A saved scenario's version (default: the latest); `{id}@{version}` says the same.
    version: Option<u64>,
}

/// `GET /api/scenarios/{id}`: a scenario's document (shipped, or saved: the latest, or
/// `?version=N`; `{id}@N` says the same), with the versions kept.
pub(crate) async fn get(
    State(app): St,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<VersionQuery>,
) -> Result<Json<ScenarioDocument>, ApiError> {
    let doc = blocking("reading the scenario", move || app.wb.scenarios().scenario_document(&id, q.version)).await?;
    Ok(Json(doc))
}

/// `POST /api/scenarios {name, document}` → 201 `{id, version}`: checked like an inline document;
/// nothing is kept on a refusal.
pub(crate) async fn save(
    State(app): St,
    ApiJson(body): ApiJson<NewScenario>,
) -> Result<(StatusCode, Json<SavedRef>), ApiError> {
    let saved =
        blocking("checking the scenario", move || app.wb.scenarios().save_scenario(&body.name, &body.document)).await?;
    Ok((StatusCode::CREATED, Json(saved)))
}

/// `PUT /api/scenarios/{id} {document}` → `{id, version}`: the next version.
pub(crate) async fn put(
    State(app): St,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<ScenarioUpdate>,
) -> Result<Json<SavedRef>, ApiError> {
    let saved =
        blocking("checking the scenario", move || app.wb.scenarios().update_scenario(&id, &body.document)).await?;
    Ok(Json(saved))
}

/// `DELETE /api/scenarios/{id}` → 204: every version; trees made from it keep their copy.
pub(crate) async fn delete(State(app): St, ApiPath(id): ApiPath<String>) -> Result<StatusCode, ApiError> {
    blocking("deleting the scenario", move || app.wb.scenarios().delete_scenario(&id)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A refused document's error with the JSON path its detail names.
fn at_path(e: crate::workbench::WorkbenchError) -> ApiError {
    let mut e = ApiError::from(e);
    e.path = refusal_path(&e.detail);
    e
}

/// `POST /api/documents/check {document}`: 200 when a tree could be made of the document as it
/// is; else the 422 creating one would answer, with `path`. Nothing is made or kept.
pub(crate) async fn check(
    State(app): St,
    ApiJson(body): ApiJson<DocumentRequest>,
) -> Result<Json<ScenarioChecked>, ApiError> {
    let checked =
        blocking("checking the scenario", move || app.wb.scenarios().check_document(&body.document).map_err(at_path))
            .await?;
    Ok(Json(checked))
}

/// `POST /api/documents/generate {prompt, last_document?}`: "Describe in words" — a custom scene
/// document written by the server's model (the offline mock without one) that passes the
/// document check. 422 for an empty or overlong prompt, or when the model's last answer still
/// had problems (each listed); 503 when the model could not be asked. Nothing is made or kept.
pub(crate) async fn generate(
    State(app): St,
    ApiJson(body): ApiJson<GenerateDocumentRequest>,
) -> Result<Json<GeneratedDocument>, ApiError> {
    Ok(Json(app.wb.scenarios().generate_document(body).await?))
}

/// `POST /api/documents/preview {document}`: each role's first prompt (a social document).
pub(crate) async fn preview(
    State(app): St,
    ApiJson(body): ApiJson<DocumentRequest>,
) -> Result<Json<Vec<RolePrompt>>, ApiError> {
    let prompts =
        blocking("building the scenario", move || app.wb.scenarios().preview_document(&body.document).map_err(at_path))
            .await?;
    Ok(Json(prompts))
}
