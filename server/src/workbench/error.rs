//! Why a workbench operation was refused, by cause: what the request names that is not there,
//! what its values get wrong, what the state of things forbids, what the operation needs that
//! is not available. Each variant carries the input at fault and writes the message users read
//! (tests hold it byte for byte); none says how it is answered: `http/error.rs` alone gives each
//! cause its status.

use std::sync::Arc;

use simtree_shared::{ExploreStatus, SavedRef};

use crate::backend::BackendError;
use crate::explore::ExploreError;
use crate::llm::LlmError;
use crate::llm::budget::Unbounded;
use crate::memory::OverBudget;
use crate::scenario::ScenarioError;
use crate::sim::SimError;
use crate::store::StoreError;
use crate::sweep::SweepError;
use crate::trading::dataset::DatasetError;
use crate::tree::notebook::NoteError;
use crate::tree::{NodeId, TreeError};

/// Why a workbench operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum WorkbenchError {
    // What the request names is not there.
    #[error("simtree not found")]
    TreeNotFound,
    /// A node-level refusal (not found, running, the root, an invalid op).
    #[error(transparent)]
    Tree(#[from] TreeError),
    #[error("exploration {id} not found in simtree {tree}")]
    ExplorationNotFound { tree: u64, id: u64 },
    /// A scenario (or a version of one) asked for by name.
    #[error(transparent)]
    Missing(#[from] Missing),

    // What the request's values get wrong.
    #[error(transparent)]
    Request(#[from] RequestError),
    /// A request that would start more runs or turns than one request may.
    #[error(transparent)]
    OverLimit(#[from] RequestLimit),
    /// A note, tag, description or question that does not pass its checks.
    #[error(transparent)]
    Note(#[from] NoteError),
    /// An uploaded dataset (or its name) that does not pass its checks.
    #[error(transparent)]
    Dataset(#[from] DatasetError),
    /// A sweep's specification (its axes, metrics, baseline).
    #[error(transparent)]
    Sweep(#[from] SweepError),
    /// An exploration's specification.
    #[error(transparent)]
    Explore(#[from] ExploreError),
    /// An exploration whose money cannot pay for one call of each candidate.
    #[error(transparent)]
    ExploreMoney(#[from] MoneyShortfall),
    /// A scenario document that does not pass its checks.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// A name to save a scenario under that is no id.
    #[error(transparent)]
    ScenarioName(#[from] crate::workbench::library::ScenarioNameError),
    /// A scenario that is not in the library or does not build, an op the simulator refuses.
    #[error(transparent)]
    Sim(#[from] SimError),
    /// A saved scenario's document that no longer builds (`scenario:` of a save).
    #[error("scenario: {0}")]
    DoesNotBuild(SimError),
    /// A name that is neither a shipped scenario nor a saved one.
    #[error("{0}; no saved scenario either")]
    UnknownScenario(SimError),
    /// A saved scenario whose stored document no longer passes the checks.
    #[error("saved scenario {origin}: {source}")]
    SavedScenarioInvalid { origin: SavedRef, source: ScenarioError },
    /// A saved scenario named in a request's body (not its path) that cannot be had: the body
    /// is what is refused.
    #[error(transparent)]
    NamedInBody(Box<WorkbenchError>),
    /// An interview that cannot be asked of this node (an unknown agent, one with no model).
    #[error("node {node}: {source}")]
    Interview { node: NodeId, source: SimError },
    #[error(
        "the document is {size} bytes of JSON; a scenario may have at most {max} (the limit of an inline document)"
    )]
    DocumentTooLarge { size: usize, max: usize },
    /// An export's sweep or exploration (`field[index]`) that does not read or fit its tree.
    #[error("invalid export: {field}[{index}]: {problem}")]
    BadExport { field: String, index: usize, problem: ExportProblem },

    // What the state of things forbids.
    /// A store of the server, the library or a tree at its maximum.
    #[error(transparent)]
    Full(#[from] Full),
    #[error("a dataset called '{0}' exists; delete it first or choose another name")]
    DatasetExists(String),
    #[error("a saved scenario called '{0}' exists; PUT /api/scenarios/{0} adds a version")]
    SavedScenarioExists(String),
    #[error("the shipped dataset is read-only")]
    ShippedDataset,
    #[error("'{0}' is a shipped scenario: shipped scenarios are read-only (save a copy under another name)")]
    ShippedScenario(String),
    #[error("tree {tree} trades on dataset '{name}'; delete the tree first")]
    DatasetInUse { name: String, tree: u64 },
    #[error("node {0} is not running")]
    NodeNotRunning(NodeId),
    #[error("node {0} was deleted while running")]
    DeletedWhileRunning(NodeId),
    /// A replay whose run failed; `error` is the failed node's stored reason.
    #[error("replay of node {node} failed in new node {new}: {error}")]
    ReplayFailed { node: NodeId, new: NodeId, error: String },
    #[error("cell {0}'s node is gone")]
    CellGone(usize),
    #[error("exploration {id} is not running (it is {status:?})")]
    ExplorationNotRunning { id: u64, status: ExploreStatus },
    #[error("exploration {id} was not interrupted (it is {status:?}); only an interrupted one resumes")]
    ExplorationNotInterrupted { id: u64, status: ExploreStatus },

    // What the operation needs and does not have now.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A change refused because its rows could not be committed (`what`: "change", "deletion").
    #[error("the {what} could not be stored, so nothing changed: {source}")]
    NotStored { what: &'static str, source: StoreError },
    /// A node or branch taken back out of the tree because its rows could not be committed.
    /// `cause` is the store's message as the run (possibly on another process) recorded it.
    #[error("{what} {node} could not be stored, so it was removed: {cause}")]
    Removed { what: &'static str, node: NodeId, cause: String },
    /// A fan-out refused because one child could not be stored: every child it made was taken
    /// back out with it.
    #[error(
        "child {node} of the fan-out could not be stored, so the fan-out's {children} children were removed: {cause}"
    )]
    FanOutRemoved { node: NodeId, children: usize, cause: String },
    #[error("no tree id could be taken from the store: {0}")]
    NoTreeId(StoreError),
    /// The store's last commit failed; `0` is its fault as the store reports it.
    #[error("the store cannot take writes now, so nothing new is started: {0}")]
    NotWritable(String),
    #[error("dataset '{0}' is no longer in the store")]
    DatasetGone(String),
    #[error("dataset '{name}': {source}")]
    StoredDatasetUnreadable { name: String, source: DatasetError },
    #[error("saved scenario {id}@{version} is unreadable: {source}")]
    SavedScenarioUnreadable { id: String, version: u64, source: serde_json::Error },
    #[error("ABM worker unavailable: {0}")]
    AbmUnavailable(Arc<AbmStartError>),
    /// The configured model backend cannot make a run's context (its settings, its keys).
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error("the interview could not be answered: {0}")]
    InterviewUnanswered(LlmError),
    /// A run's task was dropped with the runtime.
    #[error("the server is shutting down")]
    ShuttingDown,
    /// A custom scene's hook source that is not Python defining a hook (its path inside
    /// `scene.config` first).
    #[error("scenario: scene.config.{0}")]
    HookRefused(crate::engine::scenes::custom::check::CustomError),
    /// The sandboxed worker could not parse a custom scene's hooks.
    #[error("{0}")]
    HooksUnchecked(crate::abm::AbmError),
    /// "Describe in words": the model's last document still had problems after its repairs.
    #[error("the generated document is not valid:\n{}", .0.join("\n"))]
    GeneratedInvalid(Vec<String>),
    /// "Describe in words": the model could not be asked (after the provider's retries).
    #[error("the LLM call failed: {0}")]
    GenerateFailed(LlmError),
}

/// Why the ABM worker pool did not start (kept: a later request gets the same answer).
#[derive(Debug, thiserror::Error)]
pub enum AbmStartError {
    #[error(transparent)]
    Venv(crate::abm::venv::VenvError),
    #[error(transparent)]
    Spawn(crate::abm::AbmError),
}

/// A scenario, or a version of one, that is not there.
#[derive(Debug, thiserror::Error)]
pub enum Missing {
    #[error("no saved scenario called '{0}' (see GET /api/scenarios)")]
    SavedScenario(String),
    #[error("no scenario called '{0}', shipped or saved (see GET /api/scenarios)")]
    Scenario(String),
    #[error("'{id}' has no version {version} (versions kept: {})", join(.kept, ", "))]
    Version { id: String, version: u64, kept: Vec<u64> },
    #[error("'{id}' is a shipped scenario: it has only version 1, not {version}")]
    ShippedVersion { id: String, version: u64 },
}

/// A value of the request that is wrong whatever the state of the server; each message names
/// the field.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("name must be 1 to {max} characters, not only spaces")]
    NameLength { max: usize },
    #[error("name must not contain control characters (found U+{:04X})", *.0 as u32)]
    NameControl(char),
    #[error("money_budget: must be a number of dollars above 0")]
    MoneyBudget,
    #[error("parent: name the node the sweep's cells branch from")]
    NoParent,
    #[error("prefix: a sweep in a tree starts at `parent`; advance the tree to the branch point first")]
    SweepPrefix,
    #[error("scenario: this tree runs '{runs}', not '{asked}'")]
    OtherScenario { runs: String, asked: String },
    /// A page of calls or table rows.
    #[error("limit: {limit} is not from 1 to {max}")]
    PageLimit { limit: u64, max: u64 },
    /// A page of search hits.
    #[error("limit must be 1 to {max}, not {limit}")]
    SearchLimit { limit: u64, max: u64 },
    #[error("nothing to change: give a name, a description or both")]
    NothingToChange,
    #[error("q: give the words to search for")]
    EmptyQuery,
    #[error("q must be at most {max} characters, not {chars}")]
    QueryLength { chars: usize, max: usize },
    #[error("q must not contain control characters (found U+{:04X})", *.0 as u32)]
    QueryControl(char),
    #[error("scenario '{0}': a version after '@' is a whole number from 1")]
    VersionSyntax(String),
    #[error("two versions asked for: @{0} and version={1}")]
    TwoVersions(u64, u64),
    /// A parameter that takes one of a few words.
    #[error("{name}: {given:?} is not {}", .options.join(" or "))]
    NotOneOf { name: String, given: String, options: Vec<&'static str> },
    #[error("scenario: episode.dataset: no dataset called '{0}' (see GET /api/datasets)")]
    UnknownDataset(String),
    #[error("prompt: describe the scene in words")]
    EmptyPrompt,
    #[error("prompt: at most {max} characters, not {chars}")]
    PromptLength { chars: usize, max: usize },
    #[error("last_document: a document to build on is a JSON object")]
    LastDocumentNotObject,
    #[error("only a social scenario's agents have prompts to preview (this document is another kind)")]
    NoPrompts,
    #[error("node {0} was not made by an advance; only advances can be replayed")]
    NotAnAdvance(NodeId),
    #[error("the root cannot be replayed")]
    ReplayRoot,
}

/// A request that would do more than one request may (`--max-turns`, `--max-children`).
#[derive(Debug, thiserror::Error)]
pub enum RequestLimit {
    #[error("turns must be at most {max} per request")]
    Turns { max: u64 },
    /// The same, inside an exploration's body.
    #[error("turns: turns must be at most {max} per request")]
    ExploreTurns { max: u64 },
    #[error("at most {max} children per request")]
    Children { max: u64 },
    #[error(
        "replicates: {cells} cells × {replicates} replicates make {runs} runs; a request may start at most {max} \
         (see --max-children)"
    )]
    SweepRuns { cells: usize, replicates: u64, runs: usize, max: u64 },
    /// Runs an estimate is asked for; `what` says which ("exploration of 3 candidates").
    #[error("{what}: {runs} runs; a request may start at most {max} (see --max-children)")]
    Runs { what: String, runs: u64, max: u64 },
    #[error(
        "budget.runs: the exploration may start {cap} runs; a request may start at most {max} \
         (see --max-children): give a smaller budget.runs"
    )]
    ExploreRuns { cap: u64, max: u64 },
}

/// The server, the library, a tree or a node at its maximum, or the memory budget reached.
#[derive(Debug, thiserror::Error)]
pub enum Full {
    #[error("the server holds its maximum of {0} trees; delete one first")]
    Trees(usize),
    #[error("the server keeps at most {0} datasets; delete one first")]
    Datasets(usize),
    #[error("the library holds its maximum of {0} saved scenarios; delete one first")]
    SavedScenarios(usize),
    #[error("'{id}' has its maximum of {max} versions; save the document under another name")]
    Versions { id: String, max: usize },
    #[error("node {node} holds its maximum of {max} asks")]
    Asks { node: NodeId, max: usize },
    #[error("the tree would exceed its maximum of {0} nodes (see --max-nodes-per-tree); delete a subtree first")]
    Nodes(usize),
    #[error(transparent)]
    Memory(#[from] OverBudget),
    #[error(
        "dataset '{name}': parsing it (~{size_mib} MiB) would take the server past its memory budget \
         ({in_use_mib} MiB in use, --max-memory-mb {budget_mib})"
    )]
    DatasetMemory { name: String, size_mib: u64, in_use_mib: u64, budget_mib: u64 },
}

/// Why an exploration's money cannot pay for the first call of each candidate.
#[derive(Debug, thiserror::Error)]
pub enum MoneyShortfall {
    #[error("budget.money: the first call of candidate {candidate} cannot be kept within a money budget ({why})")]
    Unbounded { candidate: usize, why: Unbounded },
    #[error(
        "{whose} (${left:.4}) cannot pay for one provider call of each of the {n} candidates: \
         before a call runs, the most it may cost is held (its prompt at one token per byte, its \
         completion at max_tokens), up to ${most:.4} for one call here and ${need:.4} for the first \
         call of every candidate; give at least ${need:.4}"
    )]
    TooLittle { whose: &'static str, left: f64, n: usize, most: f64, need: f64 },
}

/// What is wrong with one sweep or exploration of an export.
#[derive(Debug, thiserror::Error)]
pub enum ExportProblem {
    #[error("{}: {}", .0.path(), .0.inner())]
    Decode(serde_path_to_error::Error<serde_json::Error>),
    /// The job's own check against the imported tree.
    #[error(transparent)]
    Mismatch(Box<dyn std::error::Error + Send + Sync>),
    #[error("its parent node {0} is not in the export")]
    NoParent(NodeId),
}

fn join(items: &[u64], sep: &str) -> String {
    items.iter().map(u64::to_string).collect::<Vec<_>>().join(sep)
}
