//! `GET /openapi.json`: the OpenAPI 3.0 document of every REST route, generated from the same
//! types the handlers use — the wire types of `simtree-shared`, requests and replies — so it
//! cannot drift from them. Clients can be generated from it, and `cargo xtask test` runs
//! schemathesis against the real binary with it.
//!
//! The route table below mirrors `http::router`; tests check both ways (every documented path is
//! routed, every routed REST path is documented) and hold the whole document to a snapshot
//! (`server/tests/snapshots/openapi.json`), so a wire change shows in review.
//! The WebSockets and the web UI's files are not REST and are not listed. A node's view is
//! typed per kind ([`NodeView`]); an export and the ABM documents are documented as free-form
//! objects. A log entry is `{type, data, node}` whose `data` has the schema of its `type`: the
//! log route lists them under the extension `x-event-payloads` (an imported log may hold entries
//! of other shapes, so the route's reply itself stays a list of objects).

use axum::Json;
use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, SchemaGenerator};
use serde_json::{Map, Value, json};
use simtree_shared::abm::AbmStep;
use simtree_shared::trading::DecisionEvent;
use simtree_shared::{
    ActionEnd, ActionStart, AdvanceRequest, AgentErrorEvent, AgentProcessEnd, AgentProcessStart, Ask, AskRequest,
    BranchRequest, Broadcast, ChildReply, ChildrenReply, Counterfactual, CreateRequest, CtxDelta, DatasetInfo,
    DocumentRequest, EmotionUpdate, ErrorBody, EventPayload, FrontierRequest, GenerateDocumentRequest,
    GeneratedDocument, ImportReply, LandlordDeal, LcaReply, MultiRequest, NewScenario, NodeCalls, NodeInfo, NodePatch,
    NodeState, NodeView, NotedGraph, NotedSummary, OkReply, PlanUpdate, ReplayRequest, RolePrompt, RunReply, SavedRef,
    ScenarioChecked, ScenarioDocument, ScenarioSummary, ScenarioUpdate, SceneTypeInfo, SearchReply, TreeEdit, TreeInfo,
    TreeRef, UsageReply,
};

/// One documented operation.
struct Operation {
    method: &'static str,
    path: &'static str,
    summary: &'static str,
    body: Option<Value>,
    ok: Value,
    /// The 200 reply's media type.
    media: &'static str,
    /// Statuses besides 200 (each answers `ErrorBody`).
    errors: &'static [u16],
}

fn schema<T: JsonSchema>(g: &mut SchemaGenerator) -> Value {
    g.subschema_for::<T>().to_value()
}

fn any_object() -> Value {
    json!({"type": "object", "additionalProperties": true})
}

fn operations(g: &mut SchemaGenerator) -> Vec<Operation> {
    const NOT_FOUND: &[u16] = &[404, 422];
    const BODY: &[u16] = &[404, 409, 413, 422];
    let op = |method, path, summary, body, ok, errors| Operation {
        method,
        path,
        summary,
        body,
        ok,
        media: "application/json",
        errors,
    };
    vec![
        op("get", "/health", "Liveness (never needs the token)", None, schema::<OkReply>(g), &[]),
        op(
            "get",
            "/ready",
            "Readiness: 503 naming the cause while the store cannot take writes or the server is stopping",
            None,
            schema::<OkReply>(g),
            &[503],
        ),
        op(
            "post",
            "/api/abm/generate",
            "Generate an agent-based model (sd-ai contract)",
            Some(schema::<simtree_shared::abm::GenerateRequest>(g)),
            json!({"oneOf": [
                schema::<simtree_shared::abm::Generated>(g),
                schema::<simtree_shared::abm::GenerateFailed>(g),
            ]}),
            &[413, 422],
        ),
        op(
            "post",
            "/api/abm/validate",
            "Validate an abm-quant document",
            Some(any_object()),
            schema::<simtree_shared::abm::Validation>(g),
            &[413, 422],
        ),
        op(
            "post",
            "/devui/simtree",
            "Create a tree",
            Some(schema::<CreateRequest>(g)),
            schema::<TreeRef>(g),
            &[409, 413, 422, 503],
        ),
        op("get", "/devui/simtree", "List trees with their metadata", None, schema::<Vec<TreeInfo>>(g), &[]),
        op(
            "post",
            "/devui/simtree/import",
            "Import an export as a new tree (streamed; limit --max-import-bytes); the reply compares the \
             provenance the export states with this server's",
            Some(any_object()),
            schema::<ImportReply>(g),
            &[409, 413, 422, 503],
        ),
        op(
            "get",
            "/devui/simtree/{tree}",
            "A tree's metadata and the document it was made from",
            None,
            schema::<TreeInfo>(g),
            NOT_FOUND,
        ),
        op("delete", "/devui/simtree/{tree}", "Delete a tree", None, schema::<OkReply>(g), NOT_FOUND),
        op(
            "patch",
            "/devui/simtree/{tree}",
            "Rename a tree, describe it, or both; the tree socket's watchers get tree_edited {name, description?}",
            Some(schema::<TreeEdit>(g)),
            schema::<TreeInfo>(g),
            &[404, 413, 422, 503],
        ),
        op(
            "get",
            "/devui/simtree/{tree}/summaries",
            "Node summaries, with each annotated node's annotation",
            None,
            schema::<Vec<NotedSummary>>(g),
            NOT_FOUND,
        ),
        op(
            "get",
            "/devui/simtree/{tree}/graph",
            "The graph, with the annotated nodes' marks (optionally only some edge types)",
            None,
            schema::<NotedGraph>(g),
            &[404, 422],
        ),
        Operation {
            method: "get",
            path: "/devui/simtree/{tree}/graph/columns",
            summary: "The graph in a columnar binary form (the web UI's; laid out in simtree_shared::columns)",
            body: None,
            ok: json!({"type": "string", "format": "binary"}),
            media: simtree_shared::columns::MEDIA_TYPE,
            errors: NOT_FOUND,
        },
        op("get", "/devui/simtree/{tree}/export", "Export the tree", None, any_object(), &[404, 409, 422]),
        op(
            "post",
            "/devui/simtree/{tree}/advance",
            "Advance a node",
            Some(schema::<AdvanceRequest>(g)),
            schema::<RunReply>(g),
            BODY,
        ),
        op(
            "post",
            "/devui/simtree/{tree}/advance_frontier",
            "Advance the frontier",
            Some(schema::<FrontierRequest>(g)),
            schema::<ChildrenReply>(g),
            BODY,
        ),
        op(
            "post",
            "/devui/simtree/{tree}/advance_multi",
            "Advance several children of a node",
            Some(schema::<MultiRequest>(g)),
            schema::<ChildrenReply>(g),
            BODY,
        ),
        op(
            "post",
            "/devui/simtree/{tree}/advance_chain",
            "Advance one turn at a time",
            Some(schema::<AdvanceRequest>(g)),
            schema::<RunReply>(g),
            BODY,
        ),
        op(
            "post",
            "/devui/simtree/{tree}/branch",
            "Branch with counterfactual ops",
            Some(schema::<BranchRequest>(g)),
            schema::<ChildReply>(g),
            BODY,
        ),
        op(
            "get",
            "/devui/simtree/{tree}/lca/{a}/{b}",
            "Lowest common ancestor",
            None,
            schema::<LcaReply>(g),
            NOT_FOUND,
        ),
        op(
            "post",
            "/devui/simtree/{tree}/replay",
            "Re-run an advance from its LLM recording",
            Some(schema::<ReplayRequest>(g)),
            schema::<RunReply>(g),
            BODY,
        ),
        op(
            "post",
            "/devui/simtree/{tree}/sweep",
            "Start a sweep: cells as branches of `parent`, paired replicates as their children",
            Some(schema::<simtree_shared::sweep::SweepSpec>(g)),
            schema::<simtree_shared::SweepStarted>(g),
            BODY,
        ),
        op(
            "get",
            "/devui/simtree/{tree}/sweep",
            "Every sweep's table so far",
            None,
            schema::<Vec<simtree_shared::SweepTable>>(g),
            NOT_FOUND,
        ),
        op(
            "get",
            "/devui/simtree/{tree}/sweep/{id}",
            "A sweep's table so far",
            None,
            schema::<simtree_shared::SweepTable>(g),
            NOT_FOUND,
        ),
        op(
            "post",
            "/devui/simtree/{tree}/explore",
            "Start an exploration: search a space of interventions for the best by successive halving within a budget",
            Some(any_object()),
            schema::<simtree_shared::ExploreStarted>(g),
            BODY,
        ),
        op(
            "get",
            "/devui/simtree/{tree}/explores",
            "Every exploration's table so far",
            None,
            schema::<Vec<simtree_shared::ExploreTable>>(g),
            NOT_FOUND,
        ),
        op(
            "get",
            "/devui/simtree/{tree}/explore/{id}",
            "An exploration's candidates, best so far and budget used",
            None,
            schema::<simtree_shared::ExploreTable>(g),
            NOT_FOUND,
        ),
        op(
            "post",
            "/devui/simtree/{tree}/explore/{id}/cancel",
            "Stop a running exploration (its running replicates are cancelled)",
            None,
            schema::<simtree_shared::ExploreTable>(g),
            &[404, 409, 422],
        ),
        op(
            "post",
            "/devui/simtree/{tree}/explore/{id}/resume",
            "Carry an interrupted exploration on: its cut-short replicates run again (counted once), then the halving goes on within the original budget",
            None,
            schema::<simtree_shared::ExploreTable>(g),
            &[404, 409, 422],
        ),
        op("get", "/devui/simtree/{tree}/usage", "LLM usage and budget", None, schema::<UsageReply>(g), NOT_FOUND),
        op(
            "get",
            "/devui/simtree/{tree}/node/{node}/info",
            "A node's status and usage",
            None,
            schema::<NodeInfo>(g),
            NOT_FOUND,
        ),
        op(
            "get",
            "/devui/simtree/{tree}/node/{node}/view",
            "A node's kind-specific view",
            None,
            schema::<NodeView>(g),
            &[404, 409, 422],
        ),
        op(
            "patch",
            "/devui/simtree/{tree}/node/{node}",
            "Annotate a node (title, note, tags, star); stored before the reply, then sent to the tree socket's watchers as marks {node, title?, note?, tags, starred}",
            Some(schema::<NodePatch>(g)),
            schema::<NodeInfo>(g),
            &[404, 413, 422, 503],
        ),
        op(
            "get",
            "/devui/simtree/{tree}/node/{node}/calls",
            "Each model call of a node: prompt, reply, parsed action, tokens, latency, provider",
            None,
            schema::<NodeCalls>(g),
            &[404, 409, 422, 503],
        ),
        op(
            "post",
            "/devui/simtree/{tree}/node/{node}/ask",
            "Ask an agent a question with its context at the node (the timeline is unchanged)",
            Some(schema::<AskRequest>(g)),
            schema::<Ask>(g),
            &[404, 409, 413, 422, 503],
        ),
        op(
            "get",
            "/devui/simtree/{tree}/node/{node}/asks",
            "The questions asked at a node, oldest first",
            None,
            schema::<Vec<Ask>>(g),
            NOT_FOUND,
        ),
        op(
            "get",
            SEARCH_TREE,
            "Search a tree's text: where it entered, then the descendants that carry it",
            None,
            schema::<SearchReply>(g),
            &[404, 422, 503],
        ),
        op("get", SEARCH_ALL, "Search every tree's text", None, schema::<SearchReply>(g), &[422, 503]),
        op(
            "delete",
            "/devui/simtree/{tree}/node/{node}",
            "Delete a subtree",
            None,
            schema::<OkReply>(g),
            &[404, 409, 422],
        ),
        op(
            "post",
            "/devui/simtree/{tree}/node/{node}/cancel",
            "Stop a running node",
            None,
            schema::<OkReply>(g),
            &[404, 409, 422],
        ),
        op(
            "get",
            LOGS,
            "A node's full log (each entry's data: see x-event-payloads)",
            None,
            json!({"type": "array", "items": any_object()}),
            NOT_FOUND,
        ),
        op("get", "/openapi.json", "This document", None, any_object(), &[]),
        op(
            "post",
            "/api/documents/check",
            "Check a scenario document as creating a tree of it would (nothing is made); a refusal is a 422 with the JSON path it names",
            Some(schema::<DocumentRequest>(g)),
            schema::<ScenarioChecked>(g),
            &[413, 422],
        ),
        op(
            "post",
            "/api/documents/preview",
            "The first prompt each role of a social document would send (nothing is made, no model is called)",
            Some(schema::<DocumentRequest>(g)),
            schema::<Vec<RolePrompt>>(g),
            &[413, 422],
        ),
        op(
            "post",
            "/api/documents/generate",
            "Describe in words: a custom scene document written by the server's model (the offline mock without one) that passes the document check; 422 lists what still failed it, 503 when the model could not be asked",
            Some(schema::<GenerateDocumentRequest>(g)),
            schema::<GeneratedDocument>(g),
            &[413, 422, 503],
        ),
        op(
            "get",
            "/api/scene-types",
            "Each scene type of a social scenario: the actions its agents may hold and its default prose",
            None,
            schema::<Vec<SceneTypeInfo>>(g),
            &[],
        ),
        op(
            "get",
            ABM_SCHEMA,
            "The LLM response schema of an abm-quant model in one provider's wrapping",
            None,
            any_object(),
            &[422],
        ),
        op(
            "get",
            "/devui/simtree/{tree}/sim/{node}/events",
            "A node's full log (upstream path; a WebSocket upgrade here streams its new entries). A node the tree lacks: 404 with body [] and the reason in x-simtree-error",
            None,
            json!({"type": "array", "items": any_object()}),
            NOT_FOUND,
        ),
        op(
            "get",
            "/devui/simtree/{tree}/node/{node}/state",
            "Agents and their context (of a running node: so far, after its last turn)",
            None,
            schema::<NodeState>(g),
            &[404, 409, 422],
        ),
        op(
            "get",
            "/devui/simtree/{tree}/sim/{node}/state",
            "Agents and their context (upstream path; of a running node: so far). A node the tree lacks: 404 with body {\"turns\":0,\"agents\":[]} and the reason in x-simtree-error",
            None,
            schema::<NodeState>(g),
            &[404, 409, 422],
        ),
    ]
}

/// The ABM response schema, wrapped for the provider named in the query.
const ABM_SCHEMA: &str = "/api/abm/schema";

/// The search routes, whose query is [`SearchParams`].
const SEARCH_TREE: &str = "/devui/simtree/{tree}/search";
const SEARCH_ALL: &str = "/api/search";

/// The log route, whose entries' payloads are listed under `x-event-payloads`.
const LOGS: &str = "/devui/simtree/{tree}/node/{node}/logs";

/// Each event type's `data` schema, by the type's wire name.
fn event_payloads(g: &mut SchemaGenerator) -> Value {
    fn entry<P: EventPayload + JsonSchema>(g: &mut SchemaGenerator, m: &mut Map<String, Value>) {
        m.insert(P::KIND.as_str().to_string(), schema::<P>(g));
    }
    let mut m = Map::new();
    entry::<Broadcast>(g, &mut m);
    entry::<AgentProcessStart>(g, &mut m);
    entry::<AgentProcessEnd>(g, &mut m);
    entry::<ActionStart>(g, &mut m);
    entry::<ActionEnd>(g, &mut m);
    entry::<CtxDelta>(g, &mut m);
    entry::<PlanUpdate>(g, &mut m);
    entry::<EmotionUpdate>(g, &mut m);
    entry::<LandlordDeal>(g, &mut m);
    entry::<DecisionEvent>(g, &mut m);
    entry::<AbmStep>(g, &mut m);
    entry::<AgentErrorEvent>(g, &mut m);
    entry::<Counterfactual>(g, &mut m);
    Value::Object(m)
}

/// The query parameters of the search routes (see `http::notebook::SearchParams`).
fn search_params() -> Vec<Value> {
    vec![
        json!({"name": "q", "in": "query", "required": true,
               "schema": {"type": "string", "minLength": 1, "maxLength": 256}}),
        json!({"name": "offset", "in": "query", "required": false,
               "schema": {"type": "integer", "format": "int64", "minimum": 0}}),
        json!({"name": "limit", "in": "query", "required": false,
               "schema": {"type": "integer", "format": "int64", "minimum": 1, "maximum": 200}}),
    ]
}

/// The path parameters of a templated path (all are non-negative integer ids).
fn path_params(path: &str) -> Vec<Value> {
    path.split('/')
        .filter_map(|seg| seg.strip_prefix('{')?.strip_suffix('}'))
        .map(|name| {
            // Example 0: the first tree and its root exist on any server that has a tree.
            json!({"name": name, "in": "path", "required": true, "example": 0,
                   "schema": {"type": "integer", "format": "int64", "minimum": 0}})
        })
        .collect()
}

/// The error replies (`ErrorBody`, schema `error`) of statuses `codes`.
fn error_responses(error: &Value, codes: &[u16]) -> Map<String, Value> {
    codes
        .iter()
        .map(|c| {
            let r = json!({"description": "Error", "content": {"application/json": {"schema": error}}});
            (c.to_string(), r)
        })
        .collect()
}

/// `rest` with a JSON reply of `schema` under status `code`.
fn ok(code: &str, schema: Value, mut rest: Map<String, Value>) -> Value {
    rest.insert(code.into(), json!({"description": "OK", "content": {"application/json": {"schema": schema}}}));
    Value::Object(rest)
}

/// `/api/datasets`: the one resource with a CSV body, a query parameter, a 201 and a string path
/// parameter, written out here rather than bending [`Operation`] to fit.
fn datasets_paths(g: &mut SchemaGenerator, error: &Value, paths: &mut Map<String, Value>) {
    let err = |codes: &[u16]| error_responses(error, codes);
    let name = json!({"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"});
    paths.insert(
        "/api/datasets".into(),
        json!({
            "get": {
                "summary": "Market datasets: the shipped one (read-only) and the uploads",
                "operationId": "get__api_datasets",
                "parameters": [],
                "responses": ok("200", schema::<Vec<DatasetInfo>>(g), Map::new()),
            },
            "post": {
                "summary": "Upload a market dataset (CSV: date,ticker,open,high,low,close,volume[,adj_close])",
                "operationId": "post__api_datasets",
                "parameters": [{"name": "name", "in": "query", "required": true, "schema": name}],
                "requestBody": {"required": true, "content": {"text/csv": {"schema": {"type": "string"}}}},
                "responses": ok("201", schema::<DatasetInfo>(g), err(&[409, 413, 422, 503])),
            },
        }),
    );
    paths.insert(
        "/api/datasets/{name}".into(),
        json!({
            "delete": {
                "summary": "Delete an uploaded dataset no tree trades on",
                "operationId": "delete__api_datasets__name_",
                "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}],
                "responses": ok("200", schema::<OkReply>(g), err(&[404, 409, 422, 503])),
            },
        }),
    );
}

/// `/api/scenarios`: the scenario library (a 201, string ids that may carry `@version`, a
/// version query), written out like the datasets.
fn scenarios_paths(g: &mut SchemaGenerator, error: &Value, paths: &mut Map<String, Value>) {
    let err = |codes: &[u16]| error_responses(error, codes);
    let body = |schema: Value| json!({"required": true, "content": {"application/json": {"schema": schema}}});
    let id = json!({"name": "id", "in": "path", "required": true,
                    "description": "A scenario's id; `id@N` names version N of a saved one",
                    "schema": {"type": "string"}});
    paths.insert(
        "/api/scenarios".into(),
        json!({
            "get": {
                "summary": "Scenarios of all three kinds: the shipped ones (read-only), then the saved ones",
                "operationId": "get__api_scenarios",
                "parameters": [],
                "responses": ok("200", schema::<Vec<ScenarioSummary>>(g), Map::new()),
            },
            "post": {
                "summary": "Save a scenario document (any kind POST /devui/simtree takes) as version 1 of a new saved scenario",
                "operationId": "post__api_scenarios",
                "parameters": [],
                "requestBody": body(schema::<NewScenario>(g)),
                "responses": ok("201", schema::<SavedRef>(g), err(&[409, 413, 422, 503])),
            },
        }),
    );
    paths.insert(
        "/api/scenarios/{id}".into(),
        json!({
            "get": {
                "summary": "A scenario's document: shipped, or saved (the latest version, id@N or ?version=N)",
                "operationId": "get__api_scenarios__id_",
                "parameters": [id, {"name": "version", "in": "query", "required": false,
                                    "schema": {"type": "integer", "format": "uint64", "minimum": 1}}],
                "responses": ok("200", schema::<ScenarioDocument>(g), err(&[404, 422, 503])),
            },
            "put": {
                "summary": "Save the next version of a saved scenario (shipped ones are read-only: 409)",
                "operationId": "put__api_scenarios__id_",
                "parameters": [id],
                "requestBody": body(schema::<ScenarioUpdate>(g)),
                "responses": ok("200", schema::<SavedRef>(g), err(&[404, 409, 413, 422, 503])),
            },
            "delete": {
                "summary": "Delete a saved scenario, every version (trees made from it keep their copy)",
                "operationId": "delete__api_scenarios__id_",
                "parameters": [id],
                "responses": Value::Object({
                    let mut r = err(&[404, 409, 422, 503]);
                    r.insert("204".into(), json!({"description": "Deleted"}));
                    r
                }),
            },
        }),
    );
}

/// The long-format tables (`http::table`): CSV or NDJSON by `format`, paged by `offset` and
/// `limit`, with the row count and the next page's offset in headers.
fn table_paths(error: &Value, paths: &mut Map<String, Value>) {
    let err = |codes: &[u16]| error_responses(error, codes);
    let query = |name: &str, schema: Value, description: &str| json!({"name": name, "in": "query", "required": false, "description": description, "schema": schema});
    let common = || {
        vec![
            query(
                "format",
                json!({"type": "string", "enum": ["csv", "ndjson"]}),
                "csv (default): a header line, then a line per row; ndjson: a JSON object per row",
            ),
            query("offset", json!({"type": "integer", "format": "int64", "minimum": 0}), "rows to skip"),
            query(
                "limit",
                json!({"type": "integer", "format": "int64", "minimum": 1,
                                  "maximum": crate::workbench::table::MAX_TABLE_ROWS}),
                "rows in the page (default and most: the maximum)",
            ),
        ]
    };
    let ok = |text: &str| {
        let mut r = err(&[404, 422]);
        let body = json!({"type": "string"});
        r.insert(
            "200".into(),
            json!({
                "description": text,
                "headers": {
                    "X-Total-Count": {"description": "rows in the whole table", "schema": {"type": "integer"}},
                    "X-Next-Offset": {"description": "where the next page starts (only when one follows)",
                                      "schema": {"type": "integer"}},
                },
                "content": {"text/csv": {"schema": body}, "application/x-ndjson": {"schema": body}},
            }),
        );
        Value::Object(r)
    };
    let path = "/devui/simtree/{tree}/sweep/{id}/table";
    let mut params = path_params(path);
    params.extend(common());
    params.push(query(
        "series",
        json!({"type": "boolean"}),
        "true (default): each run's own steps follow its metric rows",
    ));
    paths.insert(
        path.into(),
        json!({"get": {
            "summary": "A sweep's runs in long format, one row per run, step and variable (BehaviorSpace style)",
            "operationId": "get__devui_simtree__tree__sweep__id__table",
            "parameters": params,
            "responses": ok("columns run, cell, one per axis, replicate, seed, node, step, variable, value"),
        }}),
    );
    let path = "/devui/simtree/{tree}/node/{node}/table";
    let mut params = path_params(path);
    params.extend(common());
    params.push(query(
        "scope",
        json!({"type": "string", "enum": ["subtree", "path"]}),
        "subtree (default): every entry on a root path through the node, once; path: its root path",
    ));
    paths.insert(
        path.into(),
        json!({"get": {
            "summary": "The log around a node in long format, one row per entry",
            "operationId": "get__devui_simtree__tree__node__node__table",
            "parameters": params,
            "responses": ok("columns node, seq, step, time, agent, kind, text, data"),
        }}),
    );
}

/// The run routes that answer `?estimate=true` with an `Estimate` instead of running.
const ESTIMATED: [&str; 4] = [
    "/devui/simtree/{tree}/advance",
    "/devui/simtree/{tree}/advance_multi",
    "/devui/simtree/{tree}/sweep",
    "/devui/simtree/{tree}/explore",
];

/// Adds the `estimate` query parameter to the run routes, and the estimate as their other reply.
fn estimate_params(g: &mut SchemaGenerator, paths: &mut Map<String, Value>) {
    let estimate = schema::<simtree_shared::Estimate>(g);
    for path in ESTIMATED {
        let op = &mut paths[path]["post"];
        if let Some(params) = op["parameters"].as_array_mut() {
            params.push(json!({
                "name": "estimate", "in": "query", "required": false,
                "description": "true: answer what the run would cost (an Estimate) without running anything",
                "schema": {"type": "boolean"},
            }));
        }
        let ok = &mut op["responses"]["200"]["content"]["application/json"]["schema"];
        *ok = json!({"oneOf": [ok.take(), estimate.clone()]});
    }
}

/// Builds the whole document.
pub(crate) fn document() -> Value {
    let mut g = SchemaSettings::openapi3().into_generator();
    let error = schema::<ErrorBody>(&mut g);
    let mut paths = Map::new();
    for o in operations(&mut g) {
        let mut responses = Map::new();
        responses.insert("200".into(), json!({"description": "OK", "content": {o.media: {"schema": o.ok}}}));
        for code in o.errors {
            responses.insert(
                code.to_string(),
                json!({"description": "Error", "content": {"application/json": {"schema": error}}}),
            );
        }
        let mut operation = json!({
            "summary": o.summary,
            "operationId": format!("{}_{}", o.method, o.path.replace(['/', '{', '}'], "_")),
            "parameters": path_params(o.path),
            "responses": responses,
        });
        if let Some(body) = o.body {
            operation["requestBody"] = json!({"required": true, "content": {"application/json": {"schema": body}}});
        }
        let entry = paths.entry(o.path.to_string()).or_insert_with(|| json!({}));
        entry[o.method] = operation;
    }
    paths[LOGS]["get"]["x-event-payloads"] = event_payloads(&mut g);
    paths[ABM_SCHEMA]["get"]["parameters"] = json!([{
        "name": "provider", "in": "query", "required": true,
        "schema": {"type": "string", "enum": ["openai", "gemini", "claude"]},
    }]);
    let search = search_params();
    paths[SEARCH_TREE]["get"]["parameters"]
        .as_array_mut()
        .expect("path parameters are a list")
        .extend(search.iter().cloned());
    paths[SEARCH_ALL]["get"]["parameters"] = Value::Array(search);
    paths["/devui/simtree/{tree}/node/{node}/calls"]["get"]["parameters"]
        .as_array_mut()
        .expect("path parameters are a list")
        .extend([
            json!({"name": "offset", "in": "query", "required": false,
                   "schema": {"type": "integer", "format": "int64", "minimum": 0}}),
            json!({"name": "limit", "in": "query", "required": false,
                   "schema": {"type": "integer", "format": "int64", "minimum": 1, "maximum": 200}}),
        ]);
    // Upstream's paths answer a node the tree lacks with an empty value of the 200's shape.
    for path in ["/devui/simtree/{tree}/sim/{node}/state", "/devui/simtree/{tree}/sim/{node}/events"] {
        let op = &mut paths[path]["get"]["responses"];
        let ok = op["200"]["content"]["application/json"]["schema"].clone();
        op["404"] = json!({"description": "A node the tree lacks: an empty value (the reason in x-simtree-error), \
                                           or an error body when the tree itself is missing",
                           "content": {"application/json": {"schema": {"anyOf": [ok, error.clone()]}}}});
    }
    datasets_paths(&mut g, &error, &mut paths);
    scenarios_paths(&mut g, &error, &mut paths);
    table_paths(&error, &mut paths);
    estimate_params(&mut g, &mut paths);
    if let Some(params) = paths["/devui/simtree/{tree}/graph"]["get"]["parameters"].as_array_mut() {
        params.push(json!({
            "name": "edges", "in": "query", "required": false,
            "description": "comma-separated edge types (advance, agent_ctx, …, sweep, explore) or the group 'branch': \
                            only the root and the nodes reached through those edges (a node left out takes its subtree)",
            "schema": {"type": "string"},
        }));
    }
    let schemas: Map<String, Value> = g.take_definitions(true).into_iter().collect();
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "simtree",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Branching timelines for multi-agent simulations. Errors are {\"detail\"} with a 4xx status; \
                            with --token every route but /health needs `Authorization: Bearer <token>`. \
                            On PostgreSQL a following server forwards /api, /devui and /openapi.json to the leading \
                            one with an `x-simtree-via` header: a follower answers a request that already carries \
                            it with 508, and any forwarded request with 503 while the leader does not answer.",
        },
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

/// `GET /openapi.json`.
pub(crate) async fn openapi() -> Json<Value> {
    Json(document())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_operation_has_responses_and_resolvable_refs() {
        let doc = document();
        let text = doc.to_string();
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        for name in [
            "RunReply",
            "NotedGraph",
            "Op",
            "NodeInfo",
            "ErrorBody",
            "CreateRequest",
            "NodeView",
            "TradingView",
            "AbmView",
            "ActionEnd",
            "ActionResult",
            "PlanUpdate",
        ] {
            assert!(schemas.contains_key(name), "{name} missing");
        }
        // Every event type the engine writes has its payload documented.
        let payloads = doc["paths"][LOGS]["get"]["x-event-payloads"].as_object().unwrap();
        assert_eq!(payloads.len(), 13);
        assert_eq!(payloads["action_end"]["$ref"], "#/components/schemas/ActionEnd");
        // Every $ref points into components/schemas and names a schema that exists.
        for part in text.split("\"$ref\":\"").skip(1) {
            let target = part.split('"').next().unwrap();
            let name = target.strip_prefix("#/components/schemas/").unwrap_or_else(|| panic!("{target}"));
            assert!(schemas.contains_key(name), "{name}");
        }
        assert_eq!(doc["paths"].as_object().unwrap().len(), 51);
    }

    /// The other direction: every REST route declared in `http::router` (read from its source,
    /// the one place routes are declared) is documented, with the same methods. Sockets and the
    /// web UI are not REST; they are named here.
    #[test]
    fn every_routed_path_is_documented() {
        const NOT_REST: &[&str] = &["/devui/simtree/{tree}/events"];
        let source = include_str!("mod.rs");
        let doc = document();
        let paths = doc["paths"].as_object().unwrap();
        let mut routed = Vec::new();
        for (prefix, block) in [("/devui", "let devui = Router::new()"), ("/api", "let api = Router::new()")] {
            let start = source.find(block).unwrap();
            let end = start + source[start..].find(".fallback(").unwrap();
            routed.extend(routes_in(&source[start..end], prefix));
        }
        let top = source.find("let mut router = Router::new()").unwrap();
        let top_end = top + source[top..].find(".nest(").unwrap();
        routed.extend(routes_in(&source[top..top_end], ""));
        assert!(routed.len() > 30, "routes were read from http/mod.rs: {routed:?}");
        for (path, methods) in routed {
            if NOT_REST.contains(&path.as_str()) {
                continue;
            }
            let documented = paths.get(&path).unwrap_or_else(|| panic!("{path} is routed but not documented"));
            for m in methods {
                // A node's events route answers GET with its logs (the socket is an upgrade).
                assert!(documented.get(m).is_some(), "{m} {path} is routed but not documented");
            }
        }
    }

    /// `(path, [methods])` of each `.route("path", get(..).post(..))` in a router's source.
    fn routes_in(source: &str, prefix: &str) -> Vec<(String, Vec<&'static str>)> {
        let mut out = Vec::new();
        for part in source.split(".route(").skip(1) {
            let path = part.split('"').nth(1).unwrap();
            let handlers = &part[part.find(',').unwrap()..];
            let handlers = &handlers[..handlers.find("\n        .").unwrap_or(handlers.len())];
            let methods = ["get", "post", "delete", "patch", "put"]
                .into_iter()
                .filter(|m| handlers.contains(&format!("{m}(")))
                .collect();
            out.push((format!("{prefix}{path}"), methods));
        }
        out
    }

    /// The whole document against its snapshot, so every change of the wire — a route, a field, a
    /// type — shows in the diff of the change that makes it. `UPDATE_SNAPSHOTS=1` rewrites it.
    #[test]
    fn the_document_matches_its_snapshot() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/openapi.json");
        let text = serde_json::to_string_pretty(&document()).unwrap() + "\n";
        if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &text).unwrap();
            return;
        }
        let old = std::fs::read_to_string(&path).unwrap_or_default();
        if old != text {
            let first = old
                .lines()
                .zip(text.lines())
                .position(|(a, b)| a != b)
                .unwrap_or(old.lines().count().min(text.lines().count()));
            let show = |t: &str| t.lines().skip(first.saturating_sub(3)).take(8).collect::<Vec<_>>().join("\n");
            panic!(
                "the OpenAPI document changed (first difference at line {}); if the change is meant, \
                 run `UPDATE_SNAPSHOTS=1 cargo test -p simtree-server --lib openapi` and commit \
                 server/tests/snapshots/openapi.json\n--- snapshot\n{}\n--- now\n{}",
                first + 1,
                show(&old),
                show(&text)
            );
        }
    }

    /// Each documented operation reaches a handler: it may answer 404 for tree 0, but never
    /// the router's "Not Found" for an unknown route.
    #[tokio::test]
    async fn every_documented_path_is_routed() {
        use tower::Service;
        let lib = crate::scenario::ScenarioLibrary::load_assets(&crate::embedded::assets_dir().unwrap()).unwrap();
        let wb = crate::workbench::Workbench::new(lib, super::super::Backend::Mock, Default::default());
        let mut router = super::super::router(std::sync::Arc::new(super::super::AppState::new(wb)));
        let doc = document();
        for (path, ops) in doc["paths"].as_object().unwrap() {
            for method in ops.as_object().unwrap().keys() {
                let uri = path.replace("{tree}", "0").replace("{node}", "0").replace("{a}", "0").replace("{b}", "0");
                let req = axum::http::Request::builder()
                    .method(method.to_uppercase().as_str())
                    .uri(&uri)
                    .header("content-type", "application/json")
                    .body(axum::body::Body::from("{}"))
                    .unwrap();
                let resp = router.call(req).await.unwrap();
                let body = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
                assert!(
                    !String::from_utf8_lossy(&body).contains("\"Not Found\""),
                    "{method} {path} is documented but not routed"
                );
            }
        }
    }
}
