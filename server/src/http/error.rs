//! API errors: every failure is a JSON `{"detail": "…"}` with a fitting status — never a 500 for
//! bad input — and a JSON body extractor that turns malformed bodies into 422 (413 when too large).

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use simtree_shared::ErrorBody;

use crate::tree::TreeError;
use crate::workbench::WorkbenchError;

#[derive(Debug)]
pub struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) detail: String,
    /// The JSON path inside a document that `detail` names, where the route states it.
    pub(crate) path: Option<String>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, detail: impl Into<String>) -> Self {
        ApiError { status, detail: detail.into(), path: None }
    }
    pub(crate) fn not_found(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, detail)
    }
    pub(crate) fn unprocessable(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, detail)
    }
    pub fn conflict(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, detail)
    }
}

impl From<TreeError> for ApiError {
    fn from(e: TreeError) -> Self {
        let status = match e {
            TreeError::NodeNotFound(_) => StatusCode::NOT_FOUND,
            TreeError::DeleteRoot | TreeError::Running(_) | TreeError::IdsExhausted => StatusCode::CONFLICT,
            TreeError::InvalidOp(_) => StatusCode::UNPROCESSABLE_ENTITY,
            TreeError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
            // Not a passing fault: retrying will not help.
            TreeError::Damaged(_) => StatusCode::INTERNAL_SERVER_ERROR,
            TreeError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
        };
        ApiError::new(status, e.to_string())
    }
}

/// The status of each cause: 404 for what the request names and is not there, 422 for what
/// its values get wrong, 409 for what the state of things forbids, 503 for what the operation
/// needs and does not have now (a retry may succeed), 413 for a document over its limit.
impl From<WorkbenchError> for ApiError {
    fn from(e: WorkbenchError) -> Self {
        use WorkbenchError as E;
        let status = match &e {
            E::Tree(t) => return ApiError::from(t.clone()),
            E::TreeNotFound | E::ExplorationNotFound { .. } | E::Missing(_) => StatusCode::NOT_FOUND,
            E::Request(_)
            | E::OverLimit(_)
            | E::Note(_)
            | E::Dataset(_)
            | E::Sweep(_)
            | E::Explore(_)
            | E::ExploreMoney(_)
            | E::Scenario(_)
            | E::ScenarioName(_)
            | E::Sim(_)
            | E::DoesNotBuild(_)
            | E::UnknownScenario(_)
            | E::SavedScenarioInvalid { .. }
            | E::NamedInBody(_)
            | E::Interview { .. }
            | E::BadExport { .. }
            | E::HookRefused(_)
            | E::GeneratedInvalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
            E::DocumentTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            E::Full(_)
            | E::DatasetExists(_)
            | E::SavedScenarioExists(_)
            | E::ShippedDataset
            | E::ShippedScenario(_)
            | E::DatasetInUse { .. }
            | E::NodeNotRunning(_)
            | E::DeletedWhileRunning(_)
            | E::ReplayFailed { .. }
            | E::CellGone(_)
            | E::ExplorationNotRunning { .. }
            | E::ExplorationNotInterrupted { .. } => StatusCode::CONFLICT,
            E::Store(_)
            | E::NotStored { .. }
            | E::Removed { .. }
            | E::FanOutRemoved { .. }
            | E::NoTreeId(_)
            | E::NotWritable(_)
            | E::DatasetGone(_)
            | E::StoredDatasetUnreadable { .. }
            | E::SavedScenarioUnreadable { .. }
            | E::AbmUnavailable(_)
            | E::Backend(_)
            | E::InterviewUnanswered(_)
            | E::HooksUnchecked(_)
            | E::GenerateFailed(_)
            | E::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
        };
        ApiError::new(status, e.to_string())
    }
}

/// Runs `f` on tokio's blocking pool (work that takes milliseconds or waits on the store) and
/// turns its error into the answer. A task that crashed answers 500, its cause logged: a bug,
/// never the request's fault; one cancelled because the runtime is stopping answers 503.
pub(crate) async fn blocking<T, E>(
    what: &'static str,
    f: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> Result<T, ApiError>
where
    T: Send + 'static,
    E: Into<ApiError> + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result.map_err(Into::into),
        Err(e) if e.is_cancelled() => Err(ApiError::shutting_down()),
        Err(e) => {
            tracing::error!(error = %e, what, "a blocking task crashed");
            Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("{what} failed inside the server (a bug; the server's log has the cause)"),
            ))
        }
    }
}

/// A tree's `llm` that is no offline player.
impl From<crate::llm::UnknownOffline> for ApiError {
    fn from(e: crate::llm::UnknownOffline) -> Self {
        ApiError::unprocessable(e.to_string())
    }
}

impl ApiError {
    /// 503 for `/ready` and for changes while the server stops (see `http::serve`).
    pub(crate) fn shutting_down() -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the server is shutting down: it lets its runs finish and takes no new work; retry on another server",
        )
    }
}

/// `GET /ready` while the store cannot take writes.
impl From<crate::workbench::NotReady> for ApiError {
    fn from(e: crate::workbench::NotReady) -> Self {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(ErrorBody { detail: self.detail, path: self.path })).into_response()
    }
}

/// `Json<T>` with upstream-style errors: 413 for an oversized body, 422 for anything else.
pub(crate) struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(ApiJson(v)),
            Err(rejection) => Err(rejection_error(rejection)),
        }
    }
}

fn rejection_error(r: JsonRejection) -> ApiError {
    if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "request body too large");
    }
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&r);
    while let Some(e) = cause {
        if let Some(slow) = e.downcast_ref::<super::listener::SlowBody>() {
            return ApiError::new(StatusCode::REQUEST_TIMEOUT, slow.to_string());
        }
        cause = e.source();
    }
    ApiError::unprocessable(r.body_text())
}

/// `Path<T>` whose rejection is a 422 JSON detail (e.g. a non-numeric node id).
pub(crate) struct ApiPath<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiPath<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(v)) => Ok(ApiPath(v)),
            Err(rejection) => Err(ApiError::unprocessable(rejection.body_text())),
        }
    }
}

/// `Query<T>` whose rejection is a 422 JSON detail naming the parameter at fault
/// (e.g. `?limit=ten`).
pub(crate) struct ApiQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(v)) => Ok(ApiQuery(v)),
            Err(rejection) => Err(ApiError::unprocessable(rejection.body_text())),
        }
    }
}

/// Unknown routes answer like upstream's framework: 404 `{"detail": "Not Found"}`.
pub(crate) async fn not_found() -> ApiError {
    ApiError::not_found("Not Found")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_malformed_query_is_a_422_naming_its_parameter() {
        #[derive(Debug, serde::Deserialize)]
        struct Q {
            #[serde(default)]
            estimate: bool,
        }
        let read = |uri: &str| {
            let (mut parts, ()) = Request::builder().uri(uri).body(()).unwrap().into_parts();
            async move { ApiQuery::<Q>::from_request_parts(&mut parts, &()).await }
        };
        assert!(read("/x?estimate=true").await.unwrap().0.estimate);
        assert!(!read("/x").await.unwrap().0.estimate);
        let refused = read("/x?estimate=maybe").await.err().unwrap();
        assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(refused.detail.contains("estimate"), "{}", refused.detail);
    }

    #[tokio::test]
    async fn a_blocking_task_answers_its_value_its_error_or_500_when_it_crashes() {
        assert_eq!(blocking("adding", || Ok::<_, ApiError>(2 + 2)).await.unwrap(), 4);
        let refused = blocking("asking", || Err::<(), _>(WorkbenchError::NodeNotRunning(3))).await.unwrap_err();
        assert_eq!((refused.status, refused.detail.as_str()), (StatusCode::CONFLICT, "node 3 is not running"));
        let crashed = blocking("crashing", || -> Result<(), ApiError> { panic!("a bug") }).await.unwrap_err();
        assert_eq!(crashed.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(crashed.detail.starts_with("crashing failed inside the server"), "{crashed:?}");
    }
}
