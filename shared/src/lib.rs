//! Wire types shared by the simtree server, its web UI and its black-box tests.
//!
//! Everything here is plain data with serde derives: no I/O, so the crate builds for the native
//! target and for `wasm32-unknown-unknown` alike. The JSON shapes follow the SocialSim4 DevUI
//! protocol (routes under `/devui/simtree…`) so upstream clients keep working.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub mod abm;
pub mod columns;
pub mod csv;
pub mod custom;
pub mod edges;
mod event;
mod explore;
mod library;
mod notebook;
pub mod scene;
mod social;
pub mod sweep;
pub mod time;
pub mod trading;
mod verbatim;
mod view;

pub use event::*;
pub use explore::{
    CandidateRow, ExploreBest, ExploreBudget, ExploreGoal, ExploreStarted, ExploreStatus, ExploreTable, Objective,
};
pub use library::{
    DocumentRequest, GenerateDocumentRequest, GeneratedDocument, NewScenario, RolePrompt, SavedRef, ScenarioChecked,
    ScenarioDocument, ScenarioOrigin, ScenarioUpdate, refusal_path,
};
pub use notebook::*;
pub use scene::{ActionInfo, ActionKind, ActionProse, PhaseAbout, SceneAbout, SceneKind, SceneProse, SceneTypeInfo};
pub use social::*;
pub use sweep::{
    CellResult, CellRow, Effect, FailedRun, IntervalKind, MetricSummary, SweepStarted, SweepTable, table_csv,
};
pub use verbatim::Verbatim;
pub use view::*;

/// One entry of a node's event log: `{type, data, node}`.
///
/// `node` is the id of the tree node whose simulator produced the entry, so a client can tell
/// inherited entries (produced by an ancestor) from the node's own.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LogEntry {
    #[serde(rename = "type")]
    pub kind: String,
    pub data: Value,
    pub node: u64,
}

/// How a child node was made from its parent (the edge's colour in the UI).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum EdgeType {
    Root,
    Advance,
    AgentCtx,
    AgentPlan,
    AgentProps,
    SceneState,
    PublicEvent,
    Multi,
    /// A sweep's cell (its ops applied to the sweep's parent) or one of its replicates (an
    /// advance with the replicate's seed). An extension: upstream clients draw it as unknown.
    Sweep,
    /// An exploration's candidate (its ops applied to the exploration's parent) or one of its
    /// replicates. An extension like `sweep`.
    Explore,
}

/// One counterfactual operation on a node's clone (the body of `branch` and the `ops` of edges).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Op {
    /// Run `turns` turns (only as the op of an advance edge; not accepted by `branch`).
    Advance { turns: u64 },
    /// Append a line to an agent's memory (merge rule applies; no event).
    AgentCtxAppend { name: String, role: String, content: String },
    /// Replace an agent's plan state wholesale (the parts left out are empty).
    AgentPlanReplace {
        name: String,
        #[serde(deserialize_with = "plan_state")]
        plan_state: Verbatim<PlanState>,
    },
    /// Shallow-assign keys into an agent's properties.
    AgentPropsPatch { name: String, updates: serde_json::Map<String, Value> },
    /// Shallow-assign keys into the scene state (keys must exist; types are checked).
    SceneStatePatch { updates: serde_json::Map<String, Value> },
    /// Broadcast a public event to every agent.
    PublicBroadcast { text: String },
    /// A custom scene: set a variable to a value of its type (`agent` names whose, for a
    /// per-agent variable).
    SceneVarSet {
        name: String,
        value: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent: Option<String>,
    },
    /// A custom scene: an agent takes another of the document's roles.
    AgentRoleSet { name: String, role: String },
    /// A social scene: each part of the prose given replaces that part of what the node's
    /// prompts carry (the document's prose or the scene type's default); the parts left out
    /// stay as they are.
    SceneProseSet { prose: scene::SceneProse },
    /// Trading: set cash and/or share counts (0 removes a position).
    PortfolioPatch {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cash: Option<f64>,
        #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
        positions: IndexMap<String, i64>,
    },
    /// Trading: add an information item (`{kind: earnings|news|other, content}`) to the next Case.
    CaseDataInject { item: trading::CaseDataItem },
    /// Trading: replace the agent (`{kind: buy_and_hold|momentum|mean_reversion|llm, …}`; the
    /// parameters left out take their defaults).
    AgentSwap { agent: Verbatim<trading::AgentSpec> },
    /// Trading: replace the LLM agent's system prompt.
    AgentPromptReplace { system_prompt: String },
    /// Agent-based model: set a global variable before the next step.
    AbmSetGlobal { name: String, value: Value },
    /// Agent-based model: set an environment attribute before the next step.
    AbmSetEnvironment { name: String, value: Value },
    /// Agent-based model: set an attribute of every agent of a type (or of one, by id).
    AbmSetAgent {
        agent_type: String,
        name: String,
        value: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent_id: Option<u64>,
    },
}

/// Reads `agent_plan_replace`'s plan; the error names the field (`plan_state: invalid type: …`).
fn plan_state<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Verbatim<PlanState>, D::Error> {
    Verbatim::try_from(Value::deserialize(d)?).map_err(|e| serde::de::Error::custom(format!("plan_state: {e}")))
}

impl Op {
    /// The wire names of the ops (the `op` tag), in the enum's order.
    pub const NAMES: [&'static str; 16] = [
        "advance",
        "agent_ctx_append",
        "agent_plan_replace",
        "agent_props_patch",
        "scene_state_patch",
        "public_broadcast",
        "portfolio_patch",
        "case_data_inject",
        "agent_swap",
        "agent_prompt_replace",
        "abm_set_global",
        "abm_set_environment",
        "abm_set_agent",
        "scene_var_set",
        "agent_role_set",
        "scene_prose_set",
    ];

    /// The op's wire name (its `op` tag).
    pub fn name(&self) -> &'static str {
        let i = match self {
            Op::Advance { .. } => 0,
            Op::AgentCtxAppend { .. } => 1,
            Op::AgentPlanReplace { .. } => 2,
            Op::AgentPropsPatch { .. } => 3,
            Op::SceneStatePatch { .. } => 4,
            Op::PublicBroadcast { .. } => 5,
            Op::PortfolioPatch { .. } => 6,
            Op::CaseDataInject { .. } => 7,
            Op::AgentSwap { .. } => 8,
            Op::AgentPromptReplace { .. } => 9,
            Op::AbmSetGlobal { .. } => 10,
            Op::AbmSetEnvironment { .. } => 11,
            Op::AbmSetAgent { .. } => 12,
            Op::SceneVarSet { .. } => 13,
            Op::AgentRoleSet { .. } => 14,
            Op::SceneProseSet { .. } => 15,
        };
        Op::NAMES[i]
    }

    /// The edge type a single op of this kind gives.
    pub fn edge_type(&self) -> EdgeType {
        match self {
            Op::Advance { .. } => EdgeType::Advance,
            Op::AgentCtxAppend { .. } => EdgeType::AgentCtx,
            Op::AgentPlanReplace { .. } => EdgeType::AgentPlan,
            Op::AgentPropsPatch { .. } => EdgeType::AgentProps,
            Op::SceneStatePatch { .. } | Op::SceneVarSet { .. } | Op::SceneProseSet { .. } => EdgeType::SceneState,
            Op::AgentRoleSet { .. } => EdgeType::AgentProps,
            Op::PublicBroadcast { .. } | Op::CaseDataInject { .. } => EdgeType::PublicEvent,
            Op::PortfolioPatch { .. } | Op::AbmSetGlobal { .. } | Op::AbmSetEnvironment { .. } => EdgeType::SceneState,
            Op::AgentSwap { .. } | Op::AbmSetAgent { .. } => EdgeType::AgentProps,
            Op::AgentPromptReplace { .. } => EdgeType::AgentPlan,
        }
    }

    /// Edge type of a list of ops: one op gives its own type, zero or several give `multi`.
    pub fn edge_type_of(ops: &[Op]) -> EdgeType {
        match ops {
            [one] => one.edge_type(),
            _ => EdgeType::Multi,
        }
    }
}

/// `{id, root}` — a tree in the registry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TreeRef {
    pub id: u64,
    pub root: u64,
}

/// The reply to `POST /devui/simtree/import`: the new tree, and how the provenance its export
/// stated compares with what this server states for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ImportReply {
    pub id: u64,
    pub root: u64,
    pub provenance: ProvenanceCheck,
}

/// An export's statement of provenance beside this server's for the tree it became. The
/// statement is only compared: nothing of the tree is built from it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ProvenanceCheck {
    /// True when the export stated a provenance and every field but `line` is the same here.
    pub same: bool,
    /// What this server states for the imported tree.
    pub here: Provenance,
    /// What the export stated, when it stated a readable one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub export: Option<Provenance>,
    /// Each field whose value differs (`null` where one side has none), in the statement's order.
    pub differences: Vec<ProvenanceDifference>,
    /// Why there is nothing to compare: the export states no provenance (it was written before
    /// exports carried one) or not a readable one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// One field of a [`ProvenanceCheck`] that differs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ProvenanceDifference {
    pub field: String,
    pub export: Value,
    pub here: Value,
}

// ---- Request bodies ----

fn one() -> u64 {
    1
}

fn yes() -> bool {
    true
}

/// What a tree is made from: a scenario of the library by name (upstream's form), or a document
/// the user brings — a social scenario, a trading scenario, or an agent-based model (an sd-ai
/// envelope, `{model, …}` or a bare model), checked like the shipped files.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(untagged)]
pub enum ScenarioSource {
    Name(String),
    Document(Value),
}

impl From<String> for ScenarioSource {
    fn from(name: String) -> Self {
        ScenarioSource::Name(name)
    }
}

/// `POST /devui/simtree`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateRequest {
    pub scenario: ScenarioSource,
    /// The tree's name (default: the scenario's id or the document's title); 1 to 200
    /// characters, no control characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Tokens this tree may spend on a real provider (default: the server's `--token-budget`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_budget: Option<u64>,
    /// US dollars this tree may spend on priced models, never exceeded (within the server's
    /// `--money-budget` when it has one: the smaller applies). An extension.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub money_budget: Option<f64>,
    /// An offline player for this tree whatever the server's default: `mock` or `scripted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm: Option<String>,
    /// How social agents' prompts are laid out: `upstream` (the default, SocialSim4's) or
    /// `state_last` (the emotion and plan in the last message instead of the system prompt, so
    /// that a plan change keeps the provider's cached prefix). An extension.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_layout: Option<PromptLayout>,
}

/// The layout of social agents' prompts (see [`CreateRequest::prompt_layout`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum PromptLayout {
    /// SocialSim4's: the emotion and plan in the system prompt.
    Upstream,
    /// The emotion and plan in the last message, after the memory.
    StateLast,
}

/// `POST …/advance` and `…/advance_chain`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct AdvanceRequest {
    pub parent: u64,
    #[serde(default = "one")]
    pub turns: u64,
}

/// `POST …/advance_frontier`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct FrontierRequest {
    #[serde(default = "one")]
    pub turns: u64,
    #[serde(default = "yes")]
    pub only_max_depth: bool,
}

/// `POST …/advance_multi`. A negative count makes no children (upstream's behaviour).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct MultiRequest {
    pub parent: u64,
    #[serde(default = "one")]
    pub turns: u64,
    pub count: i64,
    /// Every child starts from the parent's random streams as they are (copies on a
    /// deterministic backend). By default the `i`-th child's streams are set from a seed
    /// derived from the parent's seed and `i`: reproducible, shown in each child's info.
    #[serde(default, skip_serializing_if = "is_false")]
    pub same_seed: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// `POST …/branch`. The server reads `ops` one by one, so an error names the op that is wrong.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct BranchRequest {
    pub parent: u64,
    pub ops: Vec<Op>,
}

/// `POST …/replay`: re-run `node`'s advance (as its sibling, or under `parent`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ReplayRequest {
    pub node: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<u64>,
}

/// One entry of `GET /devui/simtree`: upstream's `{id, root}` and the tree's metadata. Times are
/// Unix milliseconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TreeInfo {
    pub id: u64,
    pub root: u64,
    /// Editable with `PATCH /devui/simtree/{tree}`; defaults to the scenario's id.
    pub name: String,
    pub scenario: String,
    pub kind: SimKind,
    pub created: u64,
    /// Nodes in the tree, the root included.
    pub nodes: u64,
    /// When a node was last attached, finished or deleted.
    pub last_activity: u64,
    /// The document the tree was made from, when it was not a library scenario (only in
    /// `GET /devui/simtree/{tree}`; the list leaves it out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub document: Option<Value>,
    /// The version of the saved scenario (`scenario` is its id) the tree was made from, when it
    /// was made from the library (only in `GET /devui/simtree/{tree}`, like `document`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scenario_version: Option<u64>,
    /// What the tree is about (`PATCH /devui/simtree/{tree} {"description"}`), when written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Where the tree's numbers come from (only in `GET /devui/simtree/{tree}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Provenance>,
    /// A social tree's scene as its root's prompts show it (only in `GET /devui/simtree/{tree}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scene: Option<SceneAbout>,
    /// How a social tree's agents' prompts are laid out, as its root's agents hold it (only in
    /// `GET /devui/simtree/{tree}`; the layout asked for at creation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_layout: Option<PromptLayout>,
}

/// Where a tree's (or a node's) numbers come from, stated once for the tree page's header, node
/// info, exports and clients: the scenario and its version with a hash of its document, the
/// dataset and its hash, the seed, the player, the price table and the simtree that served it.
/// Hashes are SHA-256 of the compact JSON (keys sorted) or of the dataset's CSV text, in hex.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Provenance {
    /// The scenario's id (a shipped one, a saved one, or the tree's own document's).
    pub scenario: String,
    /// The saved scenario's version the tree was made from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
    /// SHA-256 of the scenario document the tree was made from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub document_sha256: Option<String>,
    /// The market dataset a trading tree trades on (`shipped` for the shipped data).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<String>,
    /// SHA-256 of an uploaded dataset's CSV text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset_sha256: Option<String>,
    /// The seed the node's (for a tree, the root's) random streams were set from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// What answers the agents: `mock`, `scripted`, or `dialect:model`.
    pub player: String,
    /// SHA-256 of the price table money is counted with.
    pub prices_sha256: String,
    /// The simtree that served this: its version and commit.
    pub simtree: String,
    /// All of the above on one line, to paste into notes.
    pub line: String,
}

/// One entry of `GET /api/datasets`: a market dataset trading scenarios can name as
/// `episode.dataset`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DatasetInfo {
    pub name: String,
    pub tickers: Vec<String>,
    /// First and last trading day (`YYYY-MM-DD`).
    pub first: String,
    pub last: String,
    /// Data rows (one bar of one ticker each).
    pub rows: u64,
    /// The shipped data: listed, not deletable.
    pub read_only: bool,
    /// SHA-256 of the uploaded CSV text (absent for the shipped data).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// The body of `PATCH /devui/simtree/{tree}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct TreePatch {
    /// 1 to 200 characters, not only spaces.
    pub name: String,
}

/// Where a node's run stands. `done` is a finished run (or a branch, which runs nothing);
/// `failed` ended with an error (the reason is in `…/node/{n}/info`); `cancelled` was stopped by
/// a client (its partial log is kept); `interrupted` was running when the server stopped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum NodeStatus {
    #[default]
    #[serde(alias = "ready")]
    Done,
    Running,
    Failed,
    Cancelled,
    Interrupted,
}

impl NodeStatus {
    /// True while a run still owns the node.
    pub fn is_running(self) -> bool {
        self == NodeStatus::Running
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GraphNode {
    pub id: u64,
    pub depth: u32,
    /// Extension: the node's run status (upstream clients ignore it).
    #[serde(default)]
    pub status: NodeStatus,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GraphEdge {
    pub from: u64,
    pub to: u64,
    #[serde(rename = "type")]
    pub kind: EdgeType,
}

/// `GET …/graph`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Graph {
    pub root: u64,
    pub frontier: Vec<u64>,
    pub running: Vec<u64>,
    pub nodes: Vec<GraphNode>,
    pub edges: Vec<GraphEdge>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SummaryEdge {
    pub to: u64,
    #[serde(rename = "type")]
    pub kind: EdgeType,
    pub ops: Vec<Op>,
}

/// One entry of `GET …/summaries`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Summary {
    pub id: u64,
    pub turns: u64,
    pub parent: Option<u64>,
    pub edges: Vec<SummaryEdge>,
}

/// The `data` of a tree-socket `attached` message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Attached {
    pub node: u64,
    pub parent: Option<u64>,
    pub depth: u32,
    pub edge_type: EdgeType,
    pub ops: Vec<Op>,
}

/// Messages on the tree WebSocket (`{"type": …, "data": …}`). `snapshot` and `resync` are
/// additive extensions that upstream clients ignore.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "type", content = "data", rename_all = "snake_case")]
pub enum TreeMsg {
    Attached(Attached),
    RunStart {
        node: u64,
    },
    /// A run ended. `status` and `error` are extensions (upstream clients read only `node`).
    RunFinish {
        node: u64,
        #[serde(default)]
        status: NodeStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// The turns (decisions, steps) the node has run, counted from the root as in
        /// `…/summaries`: with its parent's, what the run did of what it asked. An extension.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        turns: Option<u64>,
    },
    Deleted {
        node: u64,
    },
    /// How far a running node has got: `done` of `total` turns (steps for agent-based models,
    /// decision points for trading). At most ten a second per node; an extension.
    RunProgress {
        node: u64,
        done: u64,
        total: u64,
    },
    /// A sweep's replicate ended: `done` measured and `failed` without a result, of `total`;
    /// the table is at `GET …/sweep/{sweep}`. An extension.
    SweepProgress {
        sweep: u64,
        done: u64,
        failed: u64,
        total: u64,
    },
    /// An exploration moved on (a replicate ended, a round began, it stopped): `runs_used` of
    /// its budget, `alive` candidates still in the race; the table is at
    /// `GET …/explore/{explore}`. An extension.
    ExploreProgress {
        explore: u64,
        status: ExploreStatus,
        round: u32,
        runs_used: u64,
        alive: usize,
    },
    /// Sent right after the handshake and after a resync: the whole graph with running ids.
    Snapshot(Graph),
    /// The watcher fell behind and missed messages; a `snapshot` follows.
    Resync {
        missed: u64,
    },
    /// Text of a model's reply while it streams, in a running node: `text` continues the reply
    /// of the run's call number `call` (counted from 0 in the order the run makes them; a
    /// retried attempt is a new number, its text starting over) at byte `at` of it. Sent only to
    /// watchers connected at the time (a late joiner gets no earlier pieces) and at most a few
    /// per second per node; a watcher that falls behind may miss some, which a gap in `at`
    /// shows. The reply itself reaches the log as always when the turn ends. An extension.
    Delta {
        node: u64,
        call: u64,
        at: u64,
        text: String,
        /// The agent whose turn makes the call, when the run says (an extension of the
        /// extension: older servers leave it out).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent: Option<String>,
    },
    /// A node's annotation changed (`PATCH …/node/{n}`, from any client): all of it as it now
    /// is, once stored (`title` and `note` absent, `tags` empty and `starred` false when
    /// cleared), so every window showing the tree redraws it. An extension.
    Marks {
        node: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        title: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
        #[serde(default)]
        tags: Vec<String>,
        #[serde(default)]
        starred: bool,
    },
    /// The tree's name or description changed (`PATCH /devui/simtree/{tree}`): both as they
    /// now are, once stored (`description` absent when cleared). An extension.
    TreeEdited {
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
    },
}

/// `{turns, agents: [...]}` of `GET …/state`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NodeState {
    pub turns: u64,
    pub agents: Vec<AgentState>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AgentState {
    pub name: String,
    pub role: Option<String>,
    pub plan_state: Value,
    pub short_memory: Vec<MemoryLine>,
    #[serde(default)]
    pub emotion: String,
    /// The agent's properties (profile fields, role, what `agent_props_patch` sets), so a form
    /// can show their values at this node. Empty for agents without any.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub properties: serde_json::Map<String, Value>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MemoryLine {
    pub role: String,
    pub content: String,
}

/// `{child}` of `advance`, `advance_chain` and `replay`, plus `error` (extension) when the run
/// did not complete: the failure reason, or `"the run was cancelled"`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RunReply {
    pub child: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `{child}` of `branch`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ChildReply {
    pub child: u64,
}

/// `{children}` of `advance_multi` and `advance_frontier`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ChildrenReply {
    pub children: Vec<u64>,
    /// Set when the fan-out's children all produced the same log (a deterministic backend, or
    /// `same_seed`): a researcher looking for variance is told so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// `{"ok": true}` of deletes, cancel and `/health`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct OkReply {
    pub ok: bool,
}

/// `{lca}` of `GET …/lca/{a}/{b}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LcaReply {
    pub lca: u64,
}

/// Every error: `{"detail": "…"}` with a 4xx status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ErrorBody {
    pub detail: String,
    /// The JSON path inside the document that `detail` names (`POST /api/documents/check` and `/preview` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// LLM usage of a node or a tree.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Usage {
    pub calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Sum of the calls' latencies.
    pub latency_ms: u64,
    /// Of the prompt tokens, those providers said they served from their prompt cache.
    #[serde(default)]
    pub cached_tokens: u64,
    /// What the calls cost in US dollars by the server's price table; absent when there are no
    /// calls or any was made on a model without a price (the offline players, a local model).
    /// Cached prompt tokens are priced at the model's cached price, tokens written to a cache at
    /// its cache-write price, and coalesced calls cost nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub money: Option<f64>,
    /// Of the prompt tokens, those providers said they wrote to their prompt cache.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
    /// What prompt caching and coalesced calls saved in US dollars: the calls at the full prompt
    /// price, less `money` (negative when cache writes cost more than cache reads saved).
    /// Absent when `money` is, or when nothing was saved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saved: Option<f64>,
    /// Calls answered by an identical call of another run in flight at the same time (counted
    /// in `calls`, paid once).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub coalesced_calls: u64,
    /// The share of prompt tokens that repeat a prefix an earlier call of the same agent sent
    /// (its prompt at the fork or on its last turn), from 0 to 1: what a provider's prompt
    /// cache could serve. Estimated from the prefixes' share of the prompts' bytes; absent when
    /// no call repeated one (and for calls recorded before it was measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cacheable_share: Option<f64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// `GET …/node/{n}/info`: a node's status, failure reason and LLM usage.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NodeInfo {
    pub id: u64,
    pub status: NodeStatus,
    pub error: Option<String>,
    pub usage: Usage,
    pub recorded_calls: u64,
    /// The seed the node's random streams were last set from (absent for trading episodes, which
    /// hold none, and while the node runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// What a user wrote on the node (`PATCH …/node/{n}`), when anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotation: Option<Annotation>,
    /// Where the node's numbers come from (its own seed and player).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Provenance>,
}

/// A tree's token budget: what it may spend and what it has.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Budget {
    pub limit: u64,
    pub spent: u64,
}

/// `GET …/usage`: the tree's summed usage and its budget, if any.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct UsageReply {
    pub usage: Usage,
    /// The token budget.
    pub budget: Option<Budget>,
    /// The call budget: calls started of those allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_budget: Option<Budget>,
    /// The money budget, US dollars.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub money_budget: Option<MoneyBudget>,
}

/// A budget in US dollars: its limit and what the tree's calls have cost so far.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MoneyBudget {
    pub limit: f64,
    pub spent: f64,
}

/// `?estimate=true` on a run route: what the run would cost, without running anything.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Estimate {
    /// Provider calls expected (0 for runs answered offline or without an LLM).
    pub calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// US dollars by the price table; `null` when the model has no price (offline, local).
    pub money: Option<f64>,
    /// Runs and turns counted, and how calls and tokens per call were estimated.
    pub basis: String,
    /// What the person about to start the run should know first: its money budget cannot pay
    /// for one call of each candidate (the start would be refused), or it is below the estimate
    /// (the run stops when the money is spent). Absent when there is nothing to say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

/// The kind of simulation a scenario makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum SimKind {
    Social,
    Trading,
    Abm,
}

impl SimKind {
    /// The wire name (`social`, `trading`, `abm`).
    pub fn as_str(self) -> &'static str {
        match self {
            SimKind::Social => "social",
            SimKind::Trading => "trading",
            SimKind::Abm => "abm",
        }
    }
}

/// One entry of `GET /api/scenarios`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ScenarioSummary {
    pub id: String,
    pub title: String,
    pub description: String,
    pub kind: SimKind,
    /// The scene type (social scenarios only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scene: Option<String>,
    pub default_turns: u64,
    /// `shipped` (read-only) or `saved` (editable, versioned).
    #[serde(default)]
    pub origin: ScenarioOrigin,
    /// A saved scenario's latest version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
}

#[cfg(test)]
mod op_tests {
    use super::*;

    /// Ops as the web UI, the documentation and the tests send them, one of each kind and the
    /// payloads with defaults left out, in their senders' key order.
    const SHIPPED: &[&str] = &[
        r#"{"op":"advance","turns":3}"#,
        r#"{"op":"agent_ctx_append","name":"Alice","role":"user","content":"Remember the picnic."}"#,
        r#"{"op":"agent_plan_replace","name":"Bob","plan_state":{"goals":[{"id":"g1","desc":"Make a friend","priority":"high","status":"current"}],"milestones":[],"strategy":"listen first","notes":""}}"#,
        r#"{"op":"agent_plan_replace","name":"Bob","plan_state":{"strategy":"listen first"}}"#,
        r#"{"op":"agent_plan_replace","name":"Bob","plan_state":{"goals":[{"desc":"win the vote"},{"id":"g2","desc":"rest"}],"strategy":"listen"}}"#,
        r#"{"op":"agent_props_patch","name":"Host","updates":{"mood":"curious","x":1.5}}"#,
        r#"{"op":"scene_state_patch","updates":{"time":1200}}"#,
        r#"{"op":"public_broadcast","text":"Breaking news"}"#,
        r#"{"op":"portfolio_patch","cash":250000.0}"#,
        r#"{"op":"portfolio_patch","cash":500000.0,"positions":{"MSFT":0,"AAPL":10}}"#,
        r#"{"op":"portfolio_patch","positions":{"A":3}}"#,
        r#"{"op":"case_data_inject","item":{"kind":"news","content":"A surprise product recall."}}"#,
        r#"{"op":"agent_swap","agent":{"kind":"momentum"}}"#,
        r#"{"op":"agent_swap","agent":{"kind":"momentum","lookback":5}}"#,
        r#"{"op":"agent_swap","agent":{"kind":"mean_reversion","lookback":20,"band":1.5}}"#,
        r#"{"op":"agent_swap","agent":{"kind":"llm","history":2,"system_prompt":"Be careful."}}"#,
        r#"{"op":"agent_swap","agent":{"kind":"buy_and_hold"}}"#,
        r#"{"op":"agent_prompt_replace","system_prompt":"Hold."}"#,
        r#"{"op":"abm_set_global","name":"infectionRate","value":0.3}"#,
        r#"{"op":"abm_set_environment","name":"season","value":"winter"}"#,
        r#"{"op":"abm_set_agent","agent_type":"person","name":"infected","value":true,"agent_id":7}"#,
        r#"{"op":"scene_var_set","name":"pot","value":12}"#,
        r#"{"op":"scene_var_set","name":"coins","value":3,"agent":"Ana"}"#,
        r#"{"op":"agent_role_set","name":"Ben","role":"foreperson"}"#,
        r#"{"op":"scene_prose_set","prose":{"description":"A jury room.","actions":{"vote":{"usage":"<Action name=\"vote\"/>"}}}}"#,
    ];

    #[test]
    fn every_shipped_op_reads_as_its_type_and_writes_back_byte_for_byte() {
        let mut names = std::collections::BTreeSet::new();
        for text in SHIPPED {
            let op: Op = serde_json::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(&serde_json::to_string(&op).unwrap(), text);
            let tag: Value = serde_json::from_str(text).unwrap();
            assert_eq!(tag["op"], op.name(), "{text}");
            names.insert(op.name());
        }
        assert_eq!(names.len(), Op::NAMES.len(), "every op kind is shipped");
    }

    #[test]
    fn payloads_are_read_as_their_types() {
        let op: Op = serde_json::from_str(SHIPPED[12]).unwrap();
        let Op::AgentSwap { agent } = op else { panic!() };
        assert_eq!(*agent, trading::AgentSpec::Momentum { lookback: 10 });
        let op: Op = serde_json::from_str(SHIPPED[9]).unwrap();
        let Op::PortfolioPatch { positions, .. } = op else { panic!() };
        assert_eq!(positions.get("AAPL"), Some(&10));
    }

    /// A payload that is not its type is refused when the op is read; the message is the one a
    /// branch answered before the payloads were typed.
    #[test]
    fn wrong_payloads_are_refused_with_their_messages() {
        let cases = [
            (
                r#"{"op":"agent_plan_replace","name":"Bob","plan_state":{"goals":3}}"#,
                "plan_state: invalid type: integer `3`, expected a sequence",
            ),
            (
                r#"{"op":"agent_swap","agent":{"kind":"nope"}}"#,
                "unknown variant `nope`, expected one of `buy_and_hold`, `momentum`, `mean_reversion`, `llm`",
            ),
            (r#"{"op":"portfolio_patch","cassh":1}"#, "unknown field `cassh`, expected `cash` or `positions`"),
            (
                r#"{"op":"case_data_inject","item":{"kind":"rumour","content":"x"}}"#,
                "unknown variant `rumour`, expected one of `earnings`, `news`, `other`",
            ),
        ];
        for (text, want) in cases {
            let v: Value = serde_json::from_str(text).unwrap();
            let e = serde_json::from_value::<Op>(v).unwrap_err().to_string();
            assert_eq!(e, want, "{text}");
        }
    }
}
