//! REST handlers of the DevUI API (spec §3.1) plus additive extensions (export/import,
//! scenarios, lca). Bodies and responses match upstream so its clients work unchanged.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::Value;
use simtree_shared::abm::Validation;
use simtree_shared::{
    AdvanceRequest, ChildReply, ChildrenReply, CreateRequest, FrontierRequest, LcaReply, MultiRequest, NodeInfo,
    NodeStatus, NodeView, OkReply, Op, ReplayRequest, RunReply, ScenarioSource, TreeEdit, TreeInfo, TreeRef,
    UsageReply,
};

use super::error::{ApiError, ApiJson, ApiPath, ApiQuery, blocking};
use super::state::{AppState, Backend, RunResult};
use crate::abm::generate::{GenerateOptions, GenerateRequest, MockAbmLlm, ProviderStructured, generate};
use crate::abm::model::AbmDocument;
use crate::abm::schema::{Provider, wrapped};
use crate::abm::validate::validate_document;
use crate::tree::NodeId;

type AppResult<T> = Result<T, ApiError>;

type St = State<Arc<AppState>>;

pub(crate) async fn health() -> Json<OkReply> {
    Json(OkReply { ok: true })
}

/// `GET /ready`: 503 naming the cause while the store cannot take writes (a full disk, a lost
/// database connection, a lost server lease) or once the server is stopping; 200 again once it
/// can, without a restart.
pub(crate) async fn ready(State(app): St) -> AppResult<Json<OkReply>> {
    if app.draining.load(std::sync::atomic::Ordering::Acquire) {
        return Err(super::error::ApiError::shutting_down());
    }
    app.wb.upkeep().ready()?;
    Ok(Json(OkReply { ok: true }))
}

pub(crate) async fn create_tree(State(app): St, ApiJson(body): ApiJson<CreateRequest>) -> AppResult<Json<TreeRef>> {
    // Upstream's DevUI calls the Chinese chat `simple_chat_chinese`.
    let scenario = match body.scenario {
        ScenarioSource::Name(n) if n == "simple_chat_chinese" => ScenarioSource::Name("simple_chat_zh".into()),
        other => other,
    };
    let offline = match body.llm.as_deref() {
        None => None,
        Some(name) => Some(name.parse()?),
    };
    let setup = crate::workbench::TreeSetup {
        offline,
        state_last: body.prompt_layout == Some(simtree_shared::PromptLayout::StateLast),
    };
    let budget = crate::llm::budget::Limits { tokens: body.token_budget, calls: None, money: body.money_budget };
    // Checking a document builds its simulator once (a large model takes milliseconds): off the
    // async workers.
    let tree = blocking("building the scenario", move || {
        app.wb.trees().create_tree_from(&scenario, body.name.as_deref(), body.seed, budget, setup)
    })
    .await?;
    Ok(Json(tree))
}

/// `GET /devui/simtree/{tree}`: the tree's list entry plus the document it was made from.
pub(crate) async fn get_tree(State(app): St, ApiPath(tree): ApiPath<u64>) -> AppResult<Json<TreeInfo>> {
    Ok(Json(app.wb.trees().tree_info(tree)?))
}

/// Every tree with its metadata (upstream's `{id, root}` fields first).
pub(crate) async fn list_trees(State(app): St) -> Json<Vec<TreeInfo>> {
    Json(app.wb.trees().list())
}

/// `PATCH /devui/simtree/{tree}`: renames a tree, describes it, or both.
pub(crate) async fn patch_tree(
    State(app): St,
    ApiPath(tree): ApiPath<u64>,
    ApiJson(body): ApiJson<TreeEdit>,
) -> AppResult<Json<TreeInfo>> {
    Ok(Json(app.wb.notebook().edit_tree(tree, &body)?))
}

pub(crate) async fn summaries(State(app): St, ApiPath(tree): ApiPath<u64>) -> AppResult<Response> {
    Ok(Json(app.wb.trees().summaries(tree)?).into_response())
}

pub(crate) async fn graph(
    State(app): St,
    ApiPath(tree): ApiPath<u64>,
    ApiQuery(q): ApiQuery<GraphQuery>,
) -> AppResult<Response> {
    let keep = q
        .edges
        .as_deref()
        .map(simtree_shared::edges::EdgeFilter::parse)
        .transpose()
        .map_err(|e| ApiError::unprocessable(format!("edges: {e}")))?;
    Ok(Json(app.wb.trees().noted_graph(tree, keep)?).into_response())
}

/// `?edges=advance,branch` on `GET …/graph`: only the nodes reached through those edge types
/// (see `simtree_shared::edges`).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct GraphQuery {
    #[serde(default)]
    edges: Option<String>,
}

/// `GET …/graph/columns`: the graph in the columnar binary form of `simtree_shared::columns`
/// (what the web UI reads for a first render: no JSON to parse). Bounded like the JSON graph: by
/// the tree's size.
pub(crate) async fn graph_columns(State(app): St, ApiPath(tree): ApiPath<u64>) -> AppResult<Response> {
    let g = app.wb.trees().graph(tree)?;
    Ok(([(header::CONTENT_TYPE, simtree_shared::columns::MEDIA_TYPE)], g.to_columns()).into_response())
}

/// `?estimate=true` on a run route: answer what the run would cost instead of running it.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct EstimateQuery {
    #[serde(default)]
    estimate: bool,
}

/// The flag `?estimate=true` of a run route (a malformed one, `?estimate=yes`, is a 422 naming it).
pub(crate) struct Estimate(pub(crate) bool);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Estimate {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, ApiError> {
        let ApiQuery(q) = ApiQuery::<EstimateQuery>::from_request_parts(parts, state).await?;
        Ok(Estimate(q.estimate))
    }
}

pub(crate) async fn advance(
    State(app): St,
    ApiPath(tree): ApiPath<u64>,
    Estimate(estimate): Estimate,
    ApiJson(b): ApiJson<AdvanceRequest>,
) -> AppResult<Response> {
    if estimate {
        return Ok(Json(app.wb.usage().estimate(tree, b.parent, b.turns, 1, 1, "advance")?).into_response());
    }
    let done = app.wb.runs().advance(tree, b.parent, b.turns).await?;
    Ok(Json(run_json(done)).into_response())
}

pub(crate) async fn advance_frontier(
    State(app): St,
    ApiPath(tree): ApiPath<u64>,
    ApiJson(b): ApiJson<FrontierRequest>,
) -> AppResult<Json<ChildrenReply>> {
    let children = app.wb.runs().advance_frontier(tree, b.turns, b.only_max_depth).await?;
    Ok(Json(ChildrenReply { children, note: None }))
}

pub(crate) async fn advance_multi(
    State(app): St,
    ApiPath(tree): ApiPath<u64>,
    Estimate(estimate): Estimate,
    ApiJson(b): ApiJson<MultiRequest>,
) -> AppResult<Response> {
    if estimate {
        let runs = b.count.max(0) as u64;
        return Ok(Json(app.wb.usage().estimate(tree, b.parent, b.turns, runs, runs, "advance_multi")?).into_response());
    }
    let children = app.wb.runs().advance_multi(tree, b.parent, b.turns, b.count, b.same_seed).await?;
    let note = app.wb.runs().identical_runs(tree, &children)?.then(|| {
        let why = if b.same_seed {
            "same_seed was asked for"
        } else {
            "this backend is deterministic for this scenario (the mock answers by its counters)"
        };
        format!("the {} children produced the same log: {why}", children.len())
    });
    Ok(Json(ChildrenReply { children, note }).into_response())
}

pub(crate) async fn advance_chain(
    State(app): St,
    ApiPath(tree): ApiPath<u64>,
    ApiJson(b): ApiJson<AdvanceRequest>,
) -> AppResult<Json<RunReply>> {
    let done = app.wb.runs().advance_chain(tree, b.parent, b.turns).await?;
    Ok(Json(run_json(done)))
}

/// `{child}` plus, when the run did not complete, `error` with the reason (an LLM error after
/// retries, or a cancel).
fn run_json(done: RunResult) -> RunReply {
    let error = match (done.error, done.status) {
        (Some(e), _) => Some(e),
        (None, NodeStatus::Cancelled) => Some("the run was cancelled".to_string()),
        (None, _) => None,
    };
    RunReply { child: done.node, error }
}

/// Extension: re-run a node's advance from its LLM recording (zero provider calls).
pub(crate) async fn replay(
    State(app): St,
    ApiPath(tree): ApiPath<u64>,
    ApiJson(b): ApiJson<ReplayRequest>,
) -> AppResult<Json<RunReply>> {
    let done = app.wb.runs().replay(tree, b.node, b.parent).await?;
    Ok(Json(run_json(done)))
}

/// Extension: a node's status, failure reason and LLM usage.
pub(crate) async fn node_info(
    State(app): St,
    ApiPath((tree, node)): ApiPath<(u64, NodeId)>,
) -> AppResult<Json<NodeInfo>> {
    Ok(Json(app.wb.usage().node_info(tree, node)?))
}

/// Extension: LLM usage summed over the tree, and its budget.
pub(crate) async fn usage(State(app): St, ApiPath(tree): ApiPath<u64>) -> AppResult<Json<UsageReply>> {
    Ok(Json(app.wb.usage().tree_usage(tree)?))
}

/// `shared::BranchRequest` as the server reads it: the ops one by one, so that an error names the
/// op at fault (`ops[1]: …`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BranchBody {
    parent: NodeId,
    ops: Vec<Value>,
}

pub(crate) async fn branch(
    State(app): St,
    ApiPath(tree): ApiPath<u64>,
    ApiJson(b): ApiJson<BranchBody>,
) -> AppResult<Json<ChildReply>> {
    let ops = parse_ops(b.ops)?;
    let child = app.wb.runs().branch(tree, b.parent, ops)?;
    Ok(Json(ChildReply { child }))
}

/// Parses ops one by one so the error names the op (`ops[1]: Unknown op: fly`) and, inside a
/// known op, the field at fault (`ops[0].agent: …`).
fn parse_ops(raw: Vec<Value>) -> AppResult<Vec<Op>> {
    raw.into_iter()
        .enumerate()
        .map(|(i, v)| {
            let name = v.get("op").and_then(Value::as_str).unwrap_or("");
            if !Op::NAMES.contains(&name) {
                return Err(ApiError::unprocessable(format!("ops[{i}]: Unknown op: {name}")));
            }
            serde_path_to_error::deserialize::<_, Op>(&v).map_err(|e| {
                let at = match e.path().to_string() {
                    p if p == "." => String::new(),
                    p => format!(".{p}"),
                };
                ApiError::unprocessable(format!("ops[{i}]{at}: {}", e.inner()))
            })
        })
        .collect()
}

/// Extension: stops a running node (the UI's Stop). Its partial log and state are kept and its
/// status becomes `cancelled`; 409 when it is not running.
pub(crate) async fn cancel_node(
    State(app): St,
    ApiPath((tree, node)): ApiPath<(u64, NodeId)>,
) -> AppResult<Json<OkReply>> {
    app.wb.runs().cancel(tree, node).await?;
    Ok(Json(OkReply { ok: true }))
}

pub(crate) async fn delete_node(
    State(app): St,
    ApiPath((tree, node)): ApiPath<(u64, NodeId)>,
) -> AppResult<Json<OkReply>> {
    app.wb.runs().delete(tree, node)?;
    Ok(Json(OkReply { ok: true }))
}

/// The node's full log, assembled from pre-serialised entries without re-encoding them.
pub(crate) async fn logs(State(app): St, ApiPath((tree, node)): ApiPath<(u64, NodeId)>) -> AppResult<Response> {
    let body = app.wb.trees().log_json(tree, node)?;
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

pub(crate) async fn state(State(app): St, ApiPath((tree, node)): ApiPath<(u64, NodeId)>) -> AppResult<Response> {
    let s = app.wb.trees().state_so_far(tree, node)?;
    Ok(Json(s).into_response())
}

/// Upstream's client keeps the body of `…/sim/{node}/events` and `…/sim/{node}/state` whatever
/// the status (its Studio asks for the selected node of the tree it switches to, which that tree
/// may not have). For a node the tree lacks these aliases answer 404 with an empty value of the
/// route's shape, so that view goes blank instead of breaking, and the reason in the
/// `x-simtree-error` header. Every other failure, and the node-scoped routes, answer as usual.
fn empty_if_no_node(r: AppResult<Response>, empty: &'static str) -> Response {
    match r {
        Err(e) if e.status == StatusCode::NOT_FOUND => {
            let reason = HeaderValue::from_str(&e.detail).unwrap_or(HeaderValue::from_static("node not found"));
            let headers = [
                (header::CONTENT_TYPE, HeaderValue::from_static("application/json")),
                (HeaderName::from_static("x-simtree-error"), reason),
            ];
            (StatusCode::NOT_FOUND, headers, empty).into_response()
        }
        other => other.into_response(),
    }
}

/// `GET …/sim/{node}/events` (the log; see [`empty_if_no_node`]).
pub(crate) async fn sim_events(State(app): St, ApiPath((tree, node)): ApiPath<(u64, NodeId)>) -> Response {
    if let Err(e) = app.wb.trees().check_exists(tree) {
        return ApiError::from(e).into_response();
    }
    empty_if_no_node(logs(State(app), ApiPath((tree, node))).await, "[]")
}

/// `GET …/sim/{node}/state` (see [`empty_if_no_node`]).
pub(crate) async fn sim_state(State(app): St, ApiPath((tree, node)): ApiPath<(u64, NodeId)>) -> Response {
    if let Err(e) = app.wb.trees().check_exists(tree) {
        return ApiError::from(e).into_response();
    }
    empty_if_no_node(state(State(app), ApiPath((tree, node))).await, r#"{"turns":0,"agents":[]}"#)
}

pub(crate) async fn lca(
    State(app): St,
    ApiPath((tree, a, b)): ApiPath<(u64, NodeId, NodeId)>,
) -> AppResult<Json<LcaReply>> {
    Ok(Json(LcaReply { lca: app.wb.trees().lca(tree, a, b)? }))
}

pub(crate) async fn delete_tree(State(app): St, ApiPath(tree): ApiPath<u64>) -> AppResult<Json<OkReply>> {
    app.wb.trees().delete_tree(tree)?;
    Ok(Json(OkReply { ok: true }))
}

/// Extension: the kind-specific view of a node — scene state (social), portfolio, equity
/// curve, trades and metrics (trading), or the model and its progress (agent-based).
pub(crate) async fn node_view(
    State(app): St,
    ApiPath((tree, node)): ApiPath<(u64, NodeId)>,
) -> AppResult<Json<NodeView>> {
    Ok(Json(app.wb.trees().view(tree, node)?))
}

/// sd-ai's contract: `POST /api/abm/generate {prompt, lastModel?}` → `{success, model,
/// supportingInfo}` or `{success: false, message}`. The model is validated before it is
/// returned. Offline (mock dialect) a valid model comes back.
pub(crate) async fn abm_generate(State(app): St, ApiJson(req): ApiJson<GenerateRequest>) -> Json<Value> {
    let options = GenerateOptions::default();
    let response = match app.wb.backend() {
        Backend::Mock => generate(&MockAbmLlm, &req, &options).await,
        Backend::Provider(ps) => match ps.resolve(None, None) {
            Ok(provider) => generate(&ProviderStructured { provider }, &req, &options).await,
            Err(e) => crate::abm::model::AbmResponse::Failure { message: e.to_string() },
        },
    };
    Json(serde_json::to_value(response).unwrap_or(Value::Null))
}

#[derive(Deserialize, schemars::JsonSchema)]
pub(crate) struct SchemaQuery {
    provider: String,
}

/// The LLM response schema of seed 001 in one provider's wrapping (`openai`, `gemini`, `claude`).
/// A missing or malformed query is a JSON 422 like every other bad input, not axum's 400 text.
pub(crate) async fn abm_schema(ApiQuery(q): ApiQuery<SchemaQuery>) -> AppResult<Json<Value>> {
    let provider: Provider = q.provider.parse().map_err(ApiError::unprocessable)?;
    Ok(Json(wrapped(provider)))
}

/// Validates an abm-quant document (envelope or bare model): errors and warnings with JSON paths.
pub(crate) async fn abm_validate(body: axum::body::Bytes) -> AppResult<Json<Validation>> {
    let body = std::str::from_utf8(&body)
        .map_err(|e| ApiError::unprocessable(format!("the document is not UTF-8 text: {e}")))?;
    let doc = AbmDocument::parse(body).map_err(|e| ApiError::unprocessable(e.to_string()))?;
    let report = validate_document(&doc);
    Ok(Json(Validation { ok: report.is_ok(), issues: report.issues }))
}
