//! Talking to the server from the browser: one typed function per route the UI uses, JSON over
//! `fetch`, and WebSockets that send the `ready` handshake on open.
//!
//! Every request and reply is a `simtree_shared` type, so no component builds a body with `json!`
//! or reads a reply by key: a node's view is a [`NodeView`] (one variant per simulation kind),
//! and a log entry's `data` is read into its payload type with `LogEntry::payload_of`. A sweep file
//! is a file format of its own (the server's `SweepSpec`), sent as the JSON [`crate::sweep`] makes.
//!
//! Failures come back as [`ApiError`]: the server's [`ErrorBody`] for an HTTP error, or `Offline`
//! when the server cannot be reached at all (the shell shows a banner for that instead of a
//! browser exception).

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use simtree_shared::{
    AdvanceRequest, Ask, AskRequest, BranchRequest, ChildReply, ChildrenReply, CreateRequest, DatasetInfo,
    DocumentRequest, ErrorBody, Estimate, FrontierRequest, GenerateDocumentRequest, GeneratedDocument, Graph, LogEntry,
    MultiRequest, NewScenario, NodeCalls, NodeInfo, NodePatch, NodeState, NodeView, NotedSummary, OkReply, Op,
    RolePrompt, RunReply, SavedRef, ScenarioChecked, ScenarioDocument, ScenarioSummary, ScenarioUpdate, SceneTypeInfo,
    SearchReply, SweepStarted, SweepTable, TreeEdit, TreeInfo, TreeMsg, TreePatch, TreeRef, UsageReply,
};
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;
use web_sys::{MessageEvent, Request, RequestInit, Response, WebSocket};

use crate::draft::Validation;

/// Why a request failed, in words for the person using the UI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApiError {
    /// The server did not answer (stopped, network down).
    Offline,
    /// 404: the tree or node does not exist (any more).
    NotFound(ErrorBody),
    /// Any other HTTP error: its status and the server's error body.
    Http(u16, ErrorBody),
    /// The browser refused the request or the answer was not what the UI expects.
    Client(String),
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApiError::Offline => write!(f, "The server is not reachable."),
            ApiError::NotFound(e) => write!(f, "Not found: {}", e.detail),
            ApiError::Http(status, e) => write!(f, "{} ({status})", e.detail),
            ApiError::Client(d) => write!(f, "{d}"),
        }
    }
}

impl From<ApiError> for String {
    fn from(e: ApiError) -> String {
        e.to_string()
    }
}

pub type Result<T> = std::result::Result<T, ApiError>;

/// A JS exception's message only (its `Debug` form is a wasm stack trace nobody should read).
fn js_err(e: JsValue) -> ApiError {
    let text = e
        .as_string()
        .or_else(|| e.dyn_ref::<js_sys::Error>().map(|err| String::from(err.message())))
        .unwrap_or_else(|| "the browser refused the request".into());
    ApiError::Client(text)
}

/// The error of a non-2xx answer: the server's `{detail}`, or its raw text when it sent something
/// else (a proxy's page).
fn http_error(status: u16, text: String) -> ApiError {
    let ours = serde_json::from_str::<ErrorBody>(&text).ok();
    match (status, ours) {
        // A proxy in front of a stopped server answers 502/503/504 with a page of its own; the
        // server's own 503 ("ABM worker unavailable: …") says why in JSON, which is shown.
        (502..=504, None) => ApiError::Offline,
        (404, body) => ApiError::NotFound(body.unwrap_or(ErrorBody { detail: text, path: None })),
        (status, body) => ApiError::Http(status, body.unwrap_or(ErrorBody { detail: text, path: None })),
    }
}

/// What index.html asked for `GET path` before the app ran (`simtreeBoot.preloaded[path]`),
/// taken at most once: the first read of the open tree's graph then needs no second round trip,
/// and its download overlapped the wasm's. The promise gives the body's bytes (an `ArrayBuffer`,
/// read as soon as they arrived) for a 2xx reply, else the reply itself.
fn preloaded(window: &web_sys::Window, path: &str) -> Option<js_sys::Promise> {
    let boot = js_sys::Reflect::get(window, &"simtreeBoot".into()).ok()?;
    let map = js_sys::Reflect::get(&boot, &"preloaded".into()).ok()?.dyn_into::<js_sys::Object>().ok()?;
    let reply = js_sys::Reflect::get(&map, &path.into()).ok()?.dyn_into::<js_sys::Promise>().ok()?;
    let _ = js_sys::Reflect::delete_property(&map, &path.into());
    Some(reply)
}

/// Sends a request with an optional JSON text body; the reply on success (a 2xx status).
async fn request(method: &str, path: &str, body: Option<String>) -> Result<Response> {
    request_as(method, path, body.map(|b| (b, "application/json"))).await
}

/// Sends a request with an optional text body of a content type; the reply on success.
async fn request_as(method: &str, path: &str, body: Option<(String, &str)>) -> Result<Response> {
    let init = RequestInit::new();
    init.set_method(method);
    let content_type = body.as_ref().map(|(_, t)| t.to_string());
    if let Some((b, _)) = body {
        init.set_body(&JsValue::from_str(&b));
    }
    let req = Request::new_with_str_and_init(path, &init).map_err(js_err)?;
    if let Some(t) = content_type {
        req.headers().set("content-type", &t).map_err(js_err)?;
    }
    let window = web_sys::window().ok_or(ApiError::Client("no window".into()))?;
    // fetch rejects (a TypeError) only when no answer came: the server is down.
    let resp: Response =
        JsFuture::from(window.fetch_with_request(&req)).await.map_err(|_| ApiError::Offline)?.unchecked_into();
    checked(resp).await
}

/// `resp` if its status is 2xx, else the error it carries.
async fn checked(resp: Response) -> Result<Response> {
    if resp.ok() { Ok(resp) } else { Err(http_error(resp.status(), body_text(&resp).await?)) }
}

/// The body of `GET path`, taken from what index.html preloaded when it did. Its bytes are then
/// in hand before the app has built its page, so reading them waits for no browser task: the
/// page's first frame already shows what they draw.
async fn get_bytes(path: &str) -> Result<Vec<u8>> {
    let window = web_sys::window().ok_or(ApiError::Client("no window".into()))?;
    let Some(pending) = preloaded(&window, path) else {
        return body_bytes(&request("GET", path, None).await?).await;
    };
    let got = JsFuture::from(pending).await.map_err(|_| ApiError::Offline)?;
    match got.dyn_into::<js_sys::ArrayBuffer>() {
        Ok(bytes) => Ok(js_sys::Uint8Array::new(&bytes).to_vec()),
        Err(other) => {
            let resp = other
                .dyn_into::<Response>()
                .map_err(|_| ApiError::Client("index.html preloaded neither bytes nor a reply".into()))?;
            body_bytes(&checked(resp).await?).await
        }
    }
}

/// The body of a reply as text. (Read as bytes, copied into wasm memory at once: as a JS string
/// it went through a decoder and then a character-by-character copy, 20–40 ms for a 5,000-node
/// graph on a first load, before the JS is optimised.)
async fn body_text(resp: &Response) -> Result<String> {
    String::from_utf8(body_bytes(resp).await?).map_err(|e| ApiError::Client(format!("the reply is not UTF-8: {e}")))
}

/// The body of a reply as bytes, copied into wasm memory at once.
async fn body_bytes(resp: &Response) -> Result<Vec<u8>> {
    let body = JsFuture::from(resp.array_buffer().map_err(js_err)?).await.map_err(|_| ApiError::Offline)?;
    Ok(js_sys::Uint8Array::new(&body).to_vec())
}

/// Sends a request with an optional JSON text body; the reply's text on success.
async fn send(method: &str, path: &str, body: Option<String>) -> Result<String> {
    body_text(&request(method, path, body).await?).await
}

fn parse<T: DeserializeOwned>(text: &str) -> Result<T> {
    serde_json::from_str(text).map_err(|e| ApiError::Client(format!("unexpected response: {e}")))
}

async fn get<T: DeserializeOwned>(path: &str) -> Result<T> {
    parse(&send("GET", path, None).await?)
}

/// Sends `body` as JSON with `method`; the reply parsed.
async fn with_body<B: Serialize, T: DeserializeOwned>(method: &str, path: &str, body: &B) -> Result<T> {
    let text = serde_json::to_string(body).map_err(|e| ApiError::Client(e.to_string()))?;
    parse(&send(method, path, Some(text)).await?)
}

async fn post<B: Serialize, T: DeserializeOwned>(path: &str, body: &B) -> Result<T> {
    with_body("POST", path, body).await
}

async fn delete(path: &str) -> Result<OkReply> {
    parse(&send("DELETE", path, None).await?)
}

/// `text` as one path segment or query value (`%XX` for anything but `A-Z a-z 0-9 - _ . ~`).
fn path_segment(text: &str) -> String {
    String::from(js_sys::encode_uri_component(text))
}

/// The base path of a tree's routes.
fn tree_path(tree: u64) -> String {
    format!("/devui/simtree/{tree}")
}

fn node_path(tree: u64, node: u64) -> String {
    format!("/devui/simtree/{tree}/node/{node}")
}

/// The empty body of `cancel`.
#[derive(Serialize)]
struct Empty {}

// ---- The routes. ----

/// `GET /health`: whether the server answers.
pub async fn health() -> Result<OkReply> {
    get("/health").await
}

/// `GET /api/scenarios`.
pub async fn scenarios() -> Result<Vec<ScenarioSummary>> {
    get("/api/scenarios").await
}

/// `GET /api/scene-types`: each scene type's actions and default prose.
pub async fn scene_types() -> Result<Vec<SceneTypeInfo>> {
    get("/api/scene-types").await
}

/// `GET /api/scenarios/{id}` (the scenario library): a shipped or saved scenario with its
/// document; `id@K` asks for version K of a saved one (`?version=K`).
pub async fn library_scenario(id: &str) -> Result<ScenarioDocument> {
    let path = match id.rsplit_once('@') {
        Some((name, k)) if !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()) => {
            format!("/api/scenarios/{}?version={k}", path_segment(name))
        }
        _ => format!("/api/scenarios/{}", path_segment(id)),
    };
    get(&path).await
}

/// `POST /api/documents/check`: whether a tree could be made of `document` as it is (a 422
/// names the JSON path at fault). Nothing is made.
pub async fn check_document(document: Value) -> Result<ScenarioChecked> {
    let body = DocumentRequest { document };
    post("/api/documents/check", &body).await
}

/// `POST /api/documents/preview`: the first prompt of each role of a social document.
pub async fn preview_document(document: Value) -> Result<Vec<RolePrompt>> {
    let body = DocumentRequest { document };
    post("/api/documents/preview", &body).await
}

/// `POST /api/documents/generate`: a custom scene document written from `prompt` (built on
/// `last` when refining), checked as creating a tree would; a refusal is an `Http` error.
pub async fn generate_document(prompt: String, last: Option<Value>) -> Result<GeneratedDocument> {
    let body = GenerateDocumentRequest { prompt, last_document: last };
    post("/api/documents/generate", &body).await
}

/// `POST /api/scenarios`: saves a document to the library under a new name (409: the name is
/// taken).
pub async fn save_scenario(name: &str, document: &Value) -> Result<SavedRef> {
    let body = NewScenario { name: name.to_string(), document: document.clone() };
    post("/api/scenarios", &body).await
}

/// `DELETE /api/scenarios/{id}`: a saved scenario, every version (trees made from it keep their
/// copy). The reply is empty (204).
pub async fn delete_scenario(id: &str) -> Result<()> {
    send("DELETE", &format!("/api/scenarios/{}", path_segment(id)), None).await.map(drop)
}

/// `PUT /api/scenarios/{id}`: the document as the saved scenario's next version.
pub async fn update_scenario(id: &str, document: &Value) -> Result<SavedRef> {
    let body = ScenarioUpdate { document: document.clone() };
    with_body("PUT", &format!("/api/scenarios/{}", path_segment(id)), &body).await
}

/// `GET /api/datasets`: the shipped market data and the uploaded datasets.
pub async fn datasets() -> Result<Vec<DatasetInfo>> {
    get("/api/datasets").await
}

/// `POST /api/datasets?name=N` with the CSV as it is; the server judges it (a refusal names
/// its line).
pub async fn upload_dataset(name: &str, csv: String) -> Result<DatasetInfo> {
    let path = format!("/api/datasets?name={}", path_segment(name));
    let resp = request_as("POST", &path, Some((csv, "text/csv"))).await?;
    parse(&body_text(&resp).await?)
}

/// `POST /api/abm/generate {prompt, lastModel?}`: the generated document (an abm-quant
/// envelope, `{success: true, model, supportingInfo}`), or the generator's own failure message.
pub async fn abm_generate(prompt: &str, last_model: Option<&Value>) -> Result<std::result::Result<Value, String>> {
    let mut body = serde_json::json!({"prompt": prompt});
    if let Some(m) = last_model {
        body["lastModel"] = m.clone();
    }
    let reply: Value = post("/api/abm/generate", &body).await?;
    Ok(if reply.get("success") == Some(&Value::Bool(true)) {
        Ok(reply)
    } else {
        Err(reply.get("message").and_then(Value::as_str).unwrap_or_default().to_string())
    })
}

/// `POST /api/abm/validate` of a document's text: the validator's findings, each at its JSON
/// path (422 when the text is no abm-quant document at all).
pub async fn abm_validate(text: String) -> Result<Validation> {
    parse(&send("POST", "/api/abm/validate", Some(text)).await?)
}

/// `GET /devui/simtree`: every tree with its metadata.
pub async fn trees() -> Result<Vec<TreeInfo>> {
    get("/devui/simtree").await
}

/// `PATCH /devui/simtree/{tree}`: renames a tree; the reply is its updated metadata.
pub async fn rename_tree(tree: u64, name: &str) -> Result<TreeInfo> {
    let body = TreePatch { name: name.to_string() };
    with_body("PATCH", &tree_path(tree), &body).await
}

/// `POST /devui/simtree`: a new tree (`llm`: an offline player for it, else the server's LLM).
pub async fn create_tree(body: &CreateRequest) -> Result<TreeRef> {
    post("/devui/simtree", body).await
}

/// `POST /devui/simtree/import` of an export file's text, sent as it is (the server checks it).
pub async fn import_tree(export: String) -> Result<TreeRef> {
    parse(&send("POST", "/devui/simtree/import", Some(export)).await?)
}

/// `DELETE /devui/simtree/{tree}`.
pub async fn delete_tree(tree: u64) -> Result<OkReply> {
    delete(&tree_path(tree)).await
}

/// `GET …/export`: the tree's export, as text to save unchanged, read as it arrives:
/// `progress(bytes, nodes)` is called after every piece with the bytes and whole nodes so far.
pub async fn export(tree: u64, mut progress: impl FnMut(usize, u64)) -> Result<String> {
    let resp = request("GET", &format!("{}/export", tree_path(tree)), None).await?;
    let Some(body) = resp.body() else {
        return body_text(&resp).await;
    };
    let reader: web_sys::ReadableStreamDefaultReader = body.get_reader().unchecked_into();
    let mut bytes = Vec::new();
    let mut counter = crate::export::ExportCounter::default();
    loop {
        // A reply cut off half-way (the server failed while writing it) rejects here.
        let piece = JsFuture::from(reader.read())
            .await
            .map_err(|e| ApiError::Client(format!("the download broke off: {}", js_err(e))))?;
        let done = js_sys::Reflect::get(&piece, &"done".into()).ok().and_then(|d| d.as_bool()).unwrap_or(true);
        if done {
            break;
        }
        let value: js_sys::Uint8Array = js_sys::Reflect::get(&piece, &"value".into()).map_err(js_err)?.unchecked_into();
        let start = bytes.len();
        bytes.resize(start + value.length() as usize, 0);
        value.copy_to(&mut bytes[start..]);
        counter.feed(&bytes[start..]);
        progress(bytes.len(), counter.nodes());
    }
    String::from_utf8(bytes).map_err(|e| ApiError::Client(format!("the export is not UTF-8: {e}")))
}

/// `GET …/graph/columns`: the graph in its columnar binary form (`simtree_shared::columns`:
/// read with no text parsing: 2–22 ms at 5,000 nodes on a first load, before the wasm is
/// optimised, where the JSON took up to 176 ms with the page's first effects). The one reply
/// whose arrival the UI bench times: the mark `graph-read` once its bytes are in wasm memory,
/// then `graph` once it is applied.
pub async fn graph(tree: u64) -> Result<Graph> {
    let bytes = get_bytes(&format!("{}/graph/columns", tree_path(tree))).await?;
    crate::mark("graph-read");
    Graph::from_columns(&bytes).map_err(|e| ApiError::Client(format!("unexpected response: {e}")))
}

/// `GET …/summaries`: every node's summary (the ops of its edges) and its annotation, if any.
pub async fn summaries(tree: u64) -> Result<Vec<NotedSummary>> {
    get(&format!("{}/summaries", tree_path(tree))).await
}

pub async fn usage(tree: u64) -> Result<UsageReply> {
    get(&format!("{}/usage", tree_path(tree))).await
}

/// `POST …/advance`: one child of `parent` run `turns` turns.
pub async fn advance(tree: u64, parent: u64, turns: u64) -> Result<RunReply> {
    post(&format!("{}/advance", tree_path(tree)), &AdvanceRequest { parent, turns }).await
}

/// `POST …/advance_chain`: `turns` one-turn children, each under the last.
pub async fn advance_chain(tree: u64, parent: u64, turns: u64) -> Result<RunReply> {
    post(&format!("{}/advance_chain", tree_path(tree)), &AdvanceRequest { parent, turns }).await
}

/// `POST …/advance_multi`: `count` children of `parent`, run in parallel; `same_seed` gives every
/// child the parent's random streams (else each child has its own seed).
pub async fn advance_multi(tree: u64, parent: u64, turns: u64, count: u64, same_seed: bool) -> Result<ChildrenReply> {
    let body = MultiRequest { parent, turns, count: i64::try_from(count).unwrap_or(i64::MAX), same_seed };
    post(&format!("{}/advance_multi", tree_path(tree)), &body).await
}

/// `POST …/{route}?estimate=true` (`advance`, `advance_multi`, `sweep`): what the run `body`
/// describes would cost; nothing runs.
pub async fn estimate(tree: u64, route: &str, body: &Value) -> Result<Estimate> {
    post(&format!("{}/{route}?estimate=true", tree_path(tree)), body).await
}

/// `POST …/advance_frontier`: one child under every leaf (or only the deepest).
pub async fn advance_frontier(tree: u64, turns: u64, only_max_depth: bool) -> Result<ChildrenReply> {
    let body = FrontierRequest { turns, only_max_depth };
    post(&format!("{}/advance_frontier", tree_path(tree)), &body).await
}

/// `POST …/branch`: a child of `parent` with `ops` applied.
pub async fn branch(tree: u64, parent: u64, ops: &[Op]) -> Result<ChildReply> {
    let body = BranchRequest { parent, ops: ops.to_vec() };
    post(&format!("{}/branch", tree_path(tree)), &body).await
}

/// `POST …/node/{n}/cancel`: stops a running node.
pub async fn cancel(tree: u64, node: u64) -> Result<OkReply> {
    post(&format!("{}/cancel", node_path(tree, node)), &Empty {}).await
}

/// `DELETE …/node/{n}`: the node and its subtree.
pub async fn delete_node(tree: u64, node: u64) -> Result<OkReply> {
    delete(&node_path(tree, node)).await
}

pub async fn node_info(tree: u64, node: u64) -> Result<NodeInfo> {
    get(&format!("{}/info", node_path(tree, node))).await
}

/// `GET …/node/{n}/view`: the kind-specific view.
pub async fn node_view(tree: u64, node: u64) -> Result<NodeView> {
    get(&format!("{}/view", node_path(tree, node))).await
}

/// `GET …/node/{n}/logs`: the node's whole log, inherited entries first.
pub async fn node_logs(tree: u64, node: u64) -> Result<Vec<LogEntry>> {
    get(&format!("{}/logs", node_path(tree, node))).await
}

pub async fn node_state(tree: u64, node: u64) -> Result<NodeState> {
    get(&format!("{}/state", node_path(tree, node))).await
}

/// `GET …/sim/{n}/events`: the node's events as the viewer shows them.
pub async fn sim_events(tree: u64, node: u64) -> Result<Vec<LogEntry>> {
    get(&format!("{}/sim/{node}/events", tree_path(tree))).await
}

pub async fn sim_state(tree: u64, node: u64) -> Result<NodeState> {
    get(&format!("{}/sim/{node}/state", tree_path(tree))).await
}

/// `POST …/sweep`: lays a sweep out under its `parent` and starts its runs (answers at once).
pub async fn start_sweep(tree: u64, body: &Value) -> Result<SweepStarted> {
    post(&format!("{}/sweep", tree_path(tree)), body).await
}

/// `GET …/sweep`: every sweep of the tree with its table so far.
pub async fn sweeps(tree: u64) -> Result<Vec<SweepTable>> {
    get(&format!("{}/sweep", tree_path(tree))).await
}

/// `GET …/sweep/{id}`: one sweep's table so far.
pub async fn sweep(tree: u64, id: u64) -> Result<SweepTable> {
    get(&format!("{}/sweep/{id}", tree_path(tree))).await
}

// ---- The lab notebook: annotations, descriptions, search, calls, interviews. ----

/// `GET /devui/simtree/{tree}`: one tree's metadata (its description included).
pub async fn tree_info(tree: u64) -> Result<TreeInfo> {
    get(&tree_path(tree)).await
}

/// `PATCH /devui/simtree/{tree} {"description"}`: the tree's new description (empty clears it).
pub async fn describe_tree(tree: u64, description: &str) -> Result<TreeInfo> {
    let body = TreeEdit { name: None, description: Some(description.to_string()) };
    with_body("PATCH", &tree_path(tree), &body).await
}

/// `PATCH …/node/{n}`: changes the fields `patch` names; the node's info as it now is.
pub async fn annotate(tree: u64, node: u64, patch: &NodePatch) -> Result<NodeInfo> {
    with_body("PATCH", &node_path(tree, node), patch).await
}

/// The query of a search: the words (sent as they are: the server judges them) and a page.
fn search_query(q: &str, offset: u64, limit: u64) -> String {
    format!("?q={}&offset={offset}&limit={limit}", path_segment(q))
}

/// `GET …/search?q=`: a page of the tree's hits, best first.
pub async fn search_tree(tree: u64, q: &str, offset: u64, limit: u64) -> Result<SearchReply> {
    get(&format!("{}/search{}", tree_path(tree), search_query(q, offset, limit))).await
}

/// `GET /api/search?q=`: a page of hits across every tree (each names its tree).
pub async fn search_all(q: &str, offset: u64, limit: u64) -> Result<SearchReply> {
    get(&format!("/api/search{}", search_query(q, offset, limit))).await
}

/// `GET …/node/{n}/calls`: each model call of the node (409 while it runs).
pub async fn node_calls(tree: u64, node: u64, offset: u64) -> Result<NodeCalls> {
    get(&format!("{}/calls?offset={offset}", node_path(tree, node))).await
}

/// `POST …/node/{n}/ask`: an agent's answer at the node (nothing in the timeline changes).
pub async fn ask(tree: u64, node: u64, agent: &str, question: &str) -> Result<Ask> {
    let body = AskRequest { agent: agent.to_string(), question: question.to_string() };
    post(&format!("{}/ask", node_path(tree, node)), &body).await
}

/// `GET …/node/{n}/asks`: the questions asked at the node, oldest first.
pub async fn asks(tree: u64, node: u64) -> Result<Vec<Ask>> {
    get(&format!("{}/asks", node_path(tree, node))).await
}

/// `POST …/explore`: attaches an exploration's candidates under its `parent` and starts its
/// rounds (answers at once).
pub async fn start_explore(tree: u64, body: &Value) -> Result<simtree_shared::ExploreStarted> {
    post(&format!("{}/explore", tree_path(tree)), body).await
}

/// `GET …/explores`: every exploration of the tree with its table so far.
pub async fn explores(tree: u64) -> Result<Vec<simtree_shared::ExploreTable>> {
    get(&format!("{}/explores", tree_path(tree))).await
}

/// `GET …/explore/{id}`: one exploration's table so far.
pub async fn explore(tree: u64, id: u64) -> Result<simtree_shared::ExploreTable> {
    get(&format!("{}/explore/{id}", tree_path(tree))).await
}

/// `POST …/explore/{id}/cancel`: stops a running exploration.
pub async fn cancel_explore(tree: u64, id: u64) -> Result<simtree_shared::ExploreTable> {
    post(&format!("{}/explore/{id}/cancel", tree_path(tree)), &serde_json::json!({})).await
}

/// The tree socket (`…/events`): every message that parses as a [`TreeMsg`] goes to `on_msg`
/// (an unknown extension message is skipped, as upstream clients do).
pub fn watch_tree(
    tree: u64,
    mut on_msg: impl FnMut(TreeMsg) + 'static,
    on_open: impl FnMut() + 'static,
    on_close: impl FnMut() + 'static,
) -> Result<Socket> {
    let on_text = move |text: String| {
        if let Ok(msg) = serde_json::from_str::<TreeMsg>(&text) {
            on_msg(msg);
        }
    };
    connect(&format!("{}/events", tree_path(tree)), on_text, on_open, on_close)
}

/// A node's socket (`…/sim/{n}/events`): its log entries as they are written.
pub fn watch_node(tree: u64, node: u64, mut on_entry: impl FnMut(LogEntry) + 'static) -> Result<Socket> {
    let on_text = move |text: String| {
        if let Ok(entry) = serde_json::from_str::<LogEntry>(&text) {
            on_entry(entry);
        }
    };
    connect(&format!("{}/sim/{node}/events", tree_path(tree)), on_text, || {}, || {})
}

/// Resolves in the next animation frame's callbacks.
async fn next_frame() {
    let promise = js_sys::Promise::new(&mut |resolve, _| {
        if let Some(w) = web_sys::window() {
            let _ = w.request_animation_frame(&resolve);
        }
    });
    let _ = JsFuture::from(promise).await;
}

/// Waits until what the page changed before the call has been painted: the animation frame that
/// draws it (whose callbacks may have been asked for after this one's), the next frame's start,
/// then a task after that frame, so work that follows does not hold back either frame.
pub async fn after_paint() {
    next_frame().await;
    next_frame().await;
    sleep(0).await;
}

/// Waits `ms` milliseconds.
pub async fn sleep(ms: i32) {
    let promise = js_sys::Promise::new(&mut |resolve, _| {
        if let Some(w) = web_sys::window() {
            let _ = w.set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms);
        }
    });
    let _ = JsFuture::from(promise).await;
}

/// An open WebSocket; closed when dropped (without calling its close callback).
pub struct Socket {
    ws: WebSocket,
    _on_open: Closure<dyn FnMut()>,
    _on_message: Closure<dyn FnMut(MessageEvent)>,
    _on_close: Closure<dyn FnMut()>,
}

impl Drop for Socket {
    fn drop(&mut self) {
        self.ws.set_onmessage(None);
        self.ws.set_onopen(None);
        self.ws.set_onclose(None);
        let _ = self.ws.close();
    }
}

/// Opens `ws://<host><path>`, sends `ready` once open (then calls `on_open`), hands every text
/// frame to `on_text`, and calls `on_close` when the connection drops or cannot be made.
fn connect(
    path: &str,
    mut on_text: impl FnMut(String) + 'static,
    mut on_open: impl FnMut() + 'static,
    on_close: impl FnMut() + 'static,
) -> Result<Socket> {
    let location = web_sys::window().ok_or(ApiError::Client("no window".into()))?.location();
    let scheme = if location.protocol().unwrap_or_default() == "https:" { "wss" } else { "ws" };
    let host = location.host().map_err(js_err)?;
    let ws = WebSocket::new(&format!("{scheme}://{host}{path}")).map_err(js_err)?;
    let opened = ws.clone();
    let on_open = Closure::<dyn FnMut()>::new(move || {
        let _ = opened.send_with_str("ready");
        on_open();
    });
    let on_close = Closure::<dyn FnMut()>::new(on_close);
    let on_message = Closure::<dyn FnMut(MessageEvent)>::new(move |e: MessageEvent| {
        if let Some(text) = e.data().as_string() {
            on_text(text);
        }
    });
    ws.set_onopen(Some(on_open.as_ref().unchecked_ref()));
    ws.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    ws.set_onclose(Some(on_close.as_ref().unchecked_ref()));
    Ok(Socket { ws, _on_open: on_open, _on_message: on_message, _on_close: on_close })
}

/// localStorage get/set (ignoring a browser that refuses storage).
pub fn storage_get(key: &str) -> Option<String> {
    web_sys::window()?.local_storage().ok()??.get_item(key).ok()?
}

pub fn storage_set(key: &str, value: &str) {
    if let Some(s) = web_sys::window().and_then(|w| w.local_storage().ok().flatten()) {
        let _ = s.set_item(key, value);
    }
}

/// sessionStorage get/set: what the tab keeps across pages and reloads, and forgets when it
/// closes (ignoring a browser that refuses storage).
pub fn session_get(key: &str) -> Option<String> {
    web_sys::window()?.session_storage().ok()??.get_item(key).ok()?
}

pub fn session_set(key: &str, value: &str) {
    if let Some(s) = web_sys::window().and_then(|w| w.session_storage().ok().flatten()) {
        let _ = s.set_item(key, value);
    }
}

/// Hands `text` to the browser as a file download named `name`.
pub fn download(name: &str, mime: &str, text: &str) -> Result<()> {
    let parts = js_sys::Array::of1(&JsValue::from_str(text));
    let opts = web_sys::BlobPropertyBag::new();
    opts.set_type(mime);
    let blob = web_sys::Blob::new_with_str_sequence_and_options(&parts, &opts).map_err(js_err)?;
    let url = web_sys::Url::create_object_url_with_blob(&blob).map_err(js_err)?;
    let document = web_sys::window().and_then(|w| w.document()).ok_or(ApiError::Client("no document".into()))?;
    let a: web_sys::HtmlAnchorElement = document.create_element("a").map_err(js_err)?.unchecked_into();
    a.set_href(&url);
    a.set_download(name);
    a.click();
    // The download has its own copy once started; free the blob a little later.
    let revoke = Closure::once_into_js(move || {
        let _ = web_sys::Url::revoke_object_url(&url);
    });
    if let Some(w) = web_sys::window() {
        let _ = w.set_timeout_with_callback_and_timeout_and_arguments_0(revoke.unchecked_ref(), 30_000);
    }
    Ok(())
}

/// The text of the first file chosen in a file input.
pub async fn read_chosen_file(input: &web_sys::HtmlInputElement) -> Result<String> {
    let file = input.files().and_then(|f| f.get(0)).ok_or(ApiError::Client("no file chosen".into()))?;
    JsFuture::from(file.text())
        .await
        .map_err(js_err)?
        .as_string()
        .ok_or(ApiError::Client("the file is not text".into()))
}
