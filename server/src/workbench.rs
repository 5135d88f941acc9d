//! The workbench: the application service below every front end (HTTP, CLI, benchmarks). It
//! owns the registry of trees, the lifecycle of runs (start, cancel, finish), the clients a run
//! talks to and the server-wide limits, and speaks in its own error type — the HTTP layer maps
//! [`WorkbenchError`] to statuses, nothing here knows about HTTP.
//!
//! [`Workbench`] is the composition of services ([`Trees`], [`Runs`], [`Studies`], [`Notebook`],
//! …): each is a view of one shared [`Core`] with a small public surface, so a front end calls
//! one service method per request and never locks a tree itself. The core holds the state and
//! the run machinery (start, spawn, wait) that every service shares.
//!
//! A tree lives behind a mutex that is only held for structural changes (attach, finish, delete,
//! reads); simulations run outside it as tokio tasks, so many clients can work on one tree and a
//! fan-out uses every core. Lifecycle messages (`attached`, `run_start`, `run_finish`, `deleted`)
//! go to the tree's broadcast channel in causal order per node; log entries go to each node's
//! own log and its live channel.

/// Declares a service of the workbench: a view of the shared [`Core`] with a public surface of
/// its own. Its methods read the core's state and run machinery through `Deref`.
macro_rules! service {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy)]
        pub struct $name<'a>(pub(super) &'a std::sync::Arc<$crate::workbench::Core>);

        impl std::ops::Deref for $name<'_> {
            type Target = std::sync::Arc<$crate::workbench::Core>;

            fn deref(&self) -> &Self::Target {
                self.0
            }
        }
    };
}

mod ask;
mod calls;
mod check;
mod datasets;
pub mod drain;
mod error;
mod estimate;
mod explore;
mod export;
mod first_call;
mod generate;
mod job;
pub mod jobs;
pub mod library;
mod live_text;
mod notebook;
mod persist;
pub mod provenance;
mod run;
use run::Pending;
mod sweep;
pub mod table;
mod trees;
mod usage;

pub use check::Scenarios;
pub use datasets::Datasets;
pub(crate) use datasets::{SHIPPED_DATASET, dataset_of};
pub use error::{
    AbmStartError, ExportProblem, Full, Missing, MoneyShortfall, RequestError, RequestLimit, WorkbenchError,
};
pub use export::Export;
pub use jobs::Jobs;
pub(crate) use live_text::DELTA_QUEUE;
pub use notebook::Notebook;
pub(crate) use persist::MAX_NAME_CHARS;
pub use persist::Upkeep;
pub use persist::{Meta, NotReady};
pub use sweep::Studies;
pub use sweep::SweepData;
pub use table::Transfer;
pub use usage::Usage;

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard};

use dashmap::DashMap;
use simtree_shared::{
    EdgeType, NodeStatus, Op, SavedRef, ScenarioDocument, ScenarioSource, ScenarioSummary, SimKind, TreeMsg, TreeRef,
};
use tokio::sync::broadcast;
use tokio::sync::watch;

use crate::abm::worker::{WorkerConfig, WorkerPool};
use crate::backend::{Backend, BackendError, RunRequest};
use crate::engine::Event;
use crate::llm::Offline;
use crate::llm::budget::{Limits as BudgetLimits, TreeBudget};
use crate::llm::chat::Watch;
use crate::llm::ledger::Ledger;
use crate::llm::price::PriceTable;
use crate::llm::record::LlmRecord;
use crate::scenario::{ScenarioLibrary, UserScenario};
use crate::sim::{RunCtx, ScenarioEntry, Sim};
use crate::store::jobs::BudgetKey;
use crate::trading::data::MarketData;
use crate::tree::{NodeId, NodeLog, SimTree, TreeError};

/// Configurable limits; defaults are documented in the README.
#[derive(Clone, Debug)]
pub struct Limits {
    pub max_body_bytes: usize,
    pub max_turns_per_request: u64,
    pub max_children_per_request: u64,
    pub max_trees: usize,
    /// Messages a watcher may fall behind before it gets a `resync`.
    pub ws_queue: usize,
    /// Default token budget of every new tree (none = unlimited).
    pub token_budget: Option<u64>,
    /// Provider calls every tree may make (none = unlimited).
    pub call_budget: Option<u64>,
    /// Dollars every tree may spend on priced models (none = unlimited); see `llm::budget`.
    pub money_budget: Option<f64>,
    /// Nodes one tree may hold (attach, branch and import refuse beyond it).
    pub max_nodes_per_tree: usize,
    /// Resident memory of the whole server above which new runs are refused and running ones
    /// stopped (0: no budget).
    pub max_memory_bytes: u64,
    /// Connections held at once (see `http::listener`).
    pub max_connections: usize,
    /// Memory for live simulators and logs of stored trees (0: no limit); see `workbench::persist`.
    pub cache_bytes: usize,
    /// Largest import (it streams into the store; not bound by `max_body_bytes`).
    pub max_import_bytes: u64,
    /// WebSockets open at once (an upgrade beyond it gets 503). They leave the connection count
    /// once upgraded, so they have a cap of their own.
    pub max_websockets: usize,
    /// A WebSocket whose client sends nothing (not even the answer to a ping, sent every third
    /// of this) for this long is closed: a peer that vanished does not hold a socket forever.
    pub ws_idle: std::time::Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 2 * 1024 * 1024,
            max_turns_per_request: 1000,
            max_children_per_request: 256,
            max_trees: 1000,
            ws_queue: 1024,
            token_budget: None,
            call_budget: None,
            money_budget: None,
            max_nodes_per_tree: 100_000,
            max_memory_bytes: 4 << 30,
            max_connections: 4096,
            cache_bytes: 512 << 20,
            max_import_bytes: 1 << 30,
            max_websockets: 1024,
            ws_idle: std::time::Duration::from_secs(60),
        }
    }
}

/// The application service below every front end (HTTP, CLI, benchmarks): the composition of
/// the services, each a view of one shared [`Core`].
pub struct Workbench {
    core: Arc<Core>,
}

impl Workbench {
    pub fn new(scenarios: ScenarioLibrary, backend: Backend, limits: Limits) -> Self {
        Workbench { core: Arc::new(Core::new(scenarios, backend, limits)) }
    }

    /// Sets the workbench up (assets, store, job queue, prices, sandbox) before it is shared: a
    /// front end builds it, then hands it out.
    pub fn setup(&mut self) -> Setup<'_> {
        Setup(Arc::get_mut(&mut self.core).expect("a workbench is set up before it is shared"))
    }

    /// The server-wide limits.
    pub(crate) fn limits(&self) -> &Limits {
        &self.core.limits
    }

    /// Where trees are kept (`None`: `--ephemeral`, memory only).
    pub fn store(&self) -> Option<&Arc<crate::store::Store>> {
        self.core.store.as_ref()
    }

    /// What runs talk to: the mock or the configured providers.
    pub(crate) fn backend(&self) -> &Backend {
        &self.core.backend
    }

    /// The tree set.
    pub fn trees(&self) -> Trees<'_> {
        Trees(&self.core)
    }

    /// Runs, branches, cancels and deletions in a tree.
    pub fn runs(&self) -> Runs<'_> {
        Runs(&self.core)
    }

    /// The scenario library: shipped and saved documents, checks, previews and generation.
    pub(crate) fn scenarios(&self) -> Scenarios<'_> {
        Scenarios(&self.core)
    }

    /// Uploaded market datasets.
    pub fn datasets(&self) -> Datasets<'_> {
        Datasets(&self.core)
    }

    /// Sweeps and explorations.
    pub(crate) fn studies(&self) -> Studies<'_> {
        Studies(&self.core)
    }

    /// Annotations, descriptions, search, a node's calls and interviews.
    pub fn notebook(&self) -> Notebook<'_> {
        Notebook(&self.core)
    }

    /// Estimates, usage and provenance.
    pub(crate) fn usage(&self) -> Usage<'_> {
        Usage(&self.core)
    }

    /// Exports, imports and long-format tables.
    pub fn transfer(&self) -> Transfer<'_> {
        Transfer(&self.core)
    }

    /// Readiness, the cache of live simulators, the runs in flight at shutdown.
    pub fn upkeep(&self) -> Upkeep<'_> {
        Upkeep(&self.core)
    }

    /// The run queue's loops.
    pub(crate) fn jobs(&self) -> Jobs<'_> {
        Jobs(&self.core)
    }
}

service!(
    /// The tree set: trees made, listed, read (graph, summaries, logs, states, views) and deleted.
    Trees
);

service!(
    /// Runs in a tree: advances (one, a fan-out, the frontier, a chain), replays, branches,
    /// cancels and deletions of subtrees.
    Runs
);

/// What a front end may set on a workbench before it is shared ([`Workbench::setup`]); nothing
/// else of its core is written from outside.
pub struct Setup<'a>(&'a mut Core);

impl Setup<'_> {
    /// Market data and the ABM worker's root from `assets` (`serve --assets`).
    pub(crate) fn use_assets(&mut self, assets: &std::path::Path) -> &mut Self {
        self.0.use_assets(assets);
        self
    }

    /// What models cost (`serve --prices`).
    pub(crate) fn use_prices(&mut self, prices: PriceTable) -> &mut Self {
        self.0.prices = Arc::new(prices);
        self
    }

    /// Where ABM model code and hooks run.
    pub(crate) fn use_sandbox(&mut self, sandbox: crate::abm::Sandbox) -> &mut Self {
        self.0.abm_sandbox = sandbox;
        self
    }

    /// Keeps trees in `store`: reads the stored trees back and adopts what a last run left.
    pub fn attach_store(&mut self, store: crate::store::Store) -> Result<(), crate::store::StoreError> {
        self.0.attach_store(store)
    }

    /// A worker's store: it runs jobs and writes nothing but their nodes.
    pub(crate) fn attach_store_for_jobs(&mut self, store: crate::store::Store) -> Result<(), crate::store::StoreError> {
        self.0.attach_store_for_jobs(store)
    }

    /// Runs go through the job queue (`serve --jobs`).
    pub(crate) fn enable_jobs(&mut self, config: jobs::JobsConfig) -> Result<(), jobs::JobError> {
        self.0.enable_jobs(config)
    }
}

/// What every service of the workbench shares: the tree set, the store, the limits, the clients
/// runs talk to, the libraries and the run machinery (start, spawn, wait). The services are views
/// of it ([`Workbench::runs`], …); it is set up before it is shared ([`Workbench::setup`]).
pub struct Core {
    /// Every tree, open or stored (see `workbench::trees`).
    trees: trees::Trees,
    loading: Mutex<()>,
    /// What rebuilds brought into memory since the cache was last trimmed.
    pressure: Arc<crate::store::Pressure>,
    /// Where trees are kept (`None`: `--ephemeral`, memory only).
    store: Option<Arc<crate::store::Store>>,
    next_tree: AtomicU64,
    scenarios: ScenarioLibrary,
    backend: Backend,
    limits: Limits,
    /// Daily market data for trading episodes (loaded once; `None` when the data is missing).
    market: Option<Arc<MarketData>>,
    /// The Python/Mesa workers, started with the first agent-based tree.
    abm_pool: std::sync::OnceLock<Result<Arc<WorkerPool>, Arc<AbmStartError>>>,
    /// How many Python/Mesa workers the pool starts with (a process taking jobs: its
    /// `--abm-workers`).
    abm_pool_size: std::sync::atomic::AtomicUsize,
    /// The checkout (for the worker script and its venv).
    root: std::path::PathBuf,
    /// True while the server's resident memory is above its budget.
    memory: crate::memory::Watch,
    /// Where ABM model code runs: bubblewrap (default) or unsandboxed (`serve --unsafe-abm`).
    abm_sandbox: crate::abm::Sandbox,
    /// Market datasets users uploaded, by name (see `workbench::datasets`).
    datasets: DashMap<String, Arc<datasets::UserDataset>>,
    /// Scenarios users saved (see `workbench::library`).
    library: library::Library,
    /// What models cost (the defaults, or `serve --prices`): usage, estimates, money budgets.
    prices: Arc<PriceTable>,
    /// The run queue, once `serve --jobs` enabled it (see `workbench::jobs`).
    jobs: std::sync::OnceLock<Arc<jobs::Hub>>,
    /// A `simtree worker`'s copy of the trees: it runs jobs and writes nothing but their nodes
    /// (never a tree's sweeps or explorations, which the leader owns).
    runs_jobs_only: bool,
}

pub struct TreeHandle {
    id: u64,
    tree: Mutex<SimTree>,
    events: broadcast::Sender<TreeMsg>,
    /// The live text of running nodes (`delta` messages; see `workbench::live_text`): a channel
    /// of its own, so that a watcher that misses some is not sent a resync.
    deltas: broadcast::Sender<TreeMsg>,
    /// The runs in flight: how to stop each and how to learn it has ended.
    runs: Mutex<HashMap<NodeId, RunControl>>,
    /// The tree's optional budget (tokens, calls, money); every run of the tree charges it.
    budget: Option<Arc<TreeBudget>>,
    /// The tree's sweeps, by id (see `workbench::sweep`).
    sweeps: sweep::Sweeps,
    /// The tree's explorations, by id (see `workbench::explore`).
    explores: explore::Explores,
    /// The tree's own money cap (`money_budget` of its creation; stored with it).
    money_budget: Option<f64>,
    kind: SimKind,
    meta: Mutex<Meta>,
    store: Option<Arc<crate::store::Store>>,
}

/// The id a scenario brought as a document gets (it has no file to be named after).
pub(crate) const DOCUMENT_ID: &str = "document";

/// A tree's name as given: trimmed, 1 to [`MAX_NAME_CHARS`] characters, no control characters.
pub(crate) fn check_name(name: &str) -> Result<String, WorkbenchError> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > MAX_NAME_CHARS {
        return Err(RequestError::NameLength { max: MAX_NAME_CHARS }.into());
    }
    if let Some(c) = name.chars().find(|c| c.is_control()) {
        return Err(RequestError::NameControl(c).into());
    }
    Ok(name.to_string())
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl TreeHandle {
    pub fn lock(&self) -> MutexGuard<'_, SimTree> {
        lock(&self.tree)
    }

    fn send(&self, msg: TreeMsg) {
        let _ = self.events.send(msg);
    }

    /// Asks the runs of `nodes` to stop; returns a receiver per run that turns true once it has.
    fn cancel(&self, nodes: impl IntoIterator<Item = NodeId>) -> Vec<watch::Receiver<bool>> {
        let runs = lock(&self.runs);
        nodes
            .into_iter()
            .filter_map(|id| runs.get(&id))
            .map(|r| {
                let _ = r.cancel.send(true);
                r.ended.clone()
            })
            .collect()
    }
}

/// A run in flight, as the tree sees it.
struct RunControl {
    cancel: watch::Sender<bool>,
    ended: watch::Receiver<bool>,
    /// The agents' state after the run's last turn (none before its first).
    live: LiveState,
}

/// The state of a running node so far, kept by its run's sink.
type LiveState = Arc<Mutex<Option<simtree_shared::NodeState>>>;

/// The sink of a run: each event goes to `emit`; the state after each turn is kept in `live`
/// (at most ten times a second, and always after the last turn so far a reader asked for).
struct RunSink<F> {
    emit: F,
    live: LiveState,
    last: Option<std::time::Instant>,
}

impl<F: FnMut(Event)> crate::engine::event::EventSink for RunSink<F> {
    fn emit(&mut self, event: Event) {
        (self.emit)(event)
    }

    fn wants_state(&self) -> bool {
        self.last.is_none_or(|t| t.elapsed() >= Progress::EVERY)
    }

    fn state(&mut self, state: simtree_shared::NodeState) {
        self.last = Some(std::time::Instant::now());
        *lock(&self.live) = Some(state);
    }
}

impl Core {
    fn new(scenarios: ScenarioLibrary, backend: Backend, limits: Limits) -> Self {
        Core {
            library: library::Library::in_memory(limits.max_body_bytes),
            trees: Default::default(),
            loading: Mutex::new(()),
            pressure: Arc::new(crate::store::Pressure::new(limits.cache_bytes)),
            store: None,
            next_tree: AtomicU64::new(0),
            scenarios,
            backend,
            market: MarketData::load_default().ok().map(Arc::new),
            abm_pool: std::sync::OnceLock::new(),
            abm_pool_size: std::sync::atomic::AtomicUsize::new(2),
            // `use_assets` sets the folder the front end chose; this is the default's.
            root: crate::embedded::assets_dir().map_or_else(|_| ".".into(), |d| d.join("..")),
            memory: crate::memory::Watch::new(limits.max_memory_bytes),
            limits,
            abm_sandbox: Default::default(),
            datasets: DashMap::new(),
            prices: Arc::new(PriceTable::default()),
            jobs: std::sync::OnceLock::new(),
            runs_jobs_only: false,
        }
    }

    /// Takes market data and the ABM worker's root (its venv and script) from `assets` (`serve
    /// --assets`), instead of the default assets folder.
    pub(crate) fn use_assets(&mut self, assets: &std::path::Path) {
        self.market = MarketData::load_dir(&assets.join("data").join("market")).ok().map(Arc::new);
        self.root = assets.join("..");
    }

    /// The ABM worker pool, started (venv created if needed: `cargo xtask run` and `simtree abm
    /// setup` do it ahead) with the first agent-based tree. The request that starts it waits
    /// without holding a runtime thread (`block_in_place`).
    pub(crate) fn abm_pool(&self) -> Result<Arc<WorkerPool>, WorkbenchError> {
        if let Some(ready) = self.abm_pool.get() {
            return ready.clone().map_err(WorkbenchError::AbmUnavailable);
        }
        crate::store::blocking(|| self.start_abm_pool())
    }

    fn start_abm_pool(&self) -> Result<Arc<WorkerPool>, WorkbenchError> {
        self.abm_pool
            .get_or_init(|| {
                crate::abm::venv::ensure_venv(&self.root).map_err(|e| Arc::new(AbmStartError::Venv(e)))?;
                let config = WorkerConfig::for_root(&self.root).with_sandbox(self.abm_sandbox);
                let size = self.abm_pool_size.load(std::sync::atomic::Ordering::SeqCst);
                WorkerPool::spawn(&config, size).map(Arc::new).map_err(|e| Arc::new(AbmStartError::Spawn(e)))
            })
            .clone()
            .map_err(WorkbenchError::AbmUnavailable)
    }

    /// A tree by id; a stored tree not in memory is loaded (its structure; states and logs stay
    /// in the store until used).
    pub(crate) fn tree(&self, id: u64) -> Result<Arc<TreeHandle>, WorkbenchError> {
        match self.trees.get(id) {
            Some(trees::Found::Open(t)) => Ok(t),
            Some(trees::Found::Stored(_)) => self.load(id)?.ok_or(WorkbenchError::TreeNotFound),
            None => Err(WorkbenchError::TreeNotFound),
        }
    }

    /// A tree's handle; `own` holds the tree's own token and money caps (`token_budget`,
    /// `money_budget` of its creation): its tokens replace the server's default, its money is
    /// held within the server's `--money-budget` (the smaller of the two applies).
    fn handle(&self, id: u64, tree: SimTree, kind: SimKind, meta: Meta, own: BudgetLimits) -> TreeHandle {
        let mut tree = tree;
        if let Some(store) = &self.store
            && !tree.is_stored()
        {
            let mut source = self.source_for(store, id);
            if let Some(name) = tree.document.as_deref().and_then(dataset_of) {
                source.market = self.market_for(Some(name)).ok().flatten();
            }
            tree.set_source(source);
        }
        TreeHandle {
            id,
            tree: Mutex::new(tree),
            events: broadcast::channel(self.limits.ws_queue.max(1)).0,
            deltas: broadcast::channel(live_text::DELTA_QUEUE).0,
            runs: Mutex::new(HashMap::new()),
            budget: {
                let limits = BudgetLimits {
                    tokens: own.tokens.or(self.limits.token_budget),
                    calls: self.limits.call_budget,
                    money: match (own.money, self.limits.money_budget) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    },
                };
                (!limits.is_empty()).then(|| Arc::new(self.booked_budget(BudgetKey::tree(id), limits)))
            },
            sweeps: Default::default(),
            explores: Default::default(),
            money_budget: own.money,
            kind,
            meta: Mutex::new(meta),
            store: self.store.clone(),
        }
    }

    /// Lists a new tree (named `name`, or after its scenario) and writes it whole.
    fn register(
        &self,
        mut tree: SimTree,
        name: Option<String>,
        budget: BudgetLimits,
    ) -> Result<TreeRef, WorkbenchError> {
        if let Some(m) = budget.money
            && !(m.is_finite() && m > 0.0)
        {
            return Err(RequestError::MoneyBudget.into());
        }
        if self.tree_count() >= self.limits.max_trees {
            return Err(Full::Trees(self.limits.max_trees).into());
        }
        self.writable()?;
        let id = self.new_tree_id()?;
        let kind = tree.sim(0)?.sim_kind();
        let now = crate::store::now_ms();
        let name = name.unwrap_or_else(|| tree.scenario.clone());
        let meta = Meta { name, description: None, created: now, last_activity: now };
        let handle = Arc::new(self.handle(id, tree, kind, meta, budget));
        self.persist_tree(&handle)?;
        self.trees.insert_open(handle);
        Ok(TreeRef { id, root: 0 })
    }
}

/// How a new tree's simulator is set up beyond its scenario and seed (`POST /devui/simtree`).
#[derive(Clone, Copy, Debug, Default)]
pub struct TreeSetup {
    /// The offline player the tree runs with whatever the server's default (`llm`).
    pub(crate) offline: Option<Offline>,
    /// Social scenes: every agent's emotion and plan go in the last message of its prompts
    /// instead of its system prompt (`prompt_layout: state_last`; see `engine::prompt`).
    pub(crate) state_last: bool,
}

impl Trees<'_> {
    pub fn create_tree(
        &self,
        scenario: &str,
        seed: Option<u64>,
        budget: BudgetLimits,
        offline: Option<Offline>,
    ) -> Result<TreeRef, WorkbenchError> {
        let entry = ScenarioEntry::find(&self.scenarios, scenario)?;
        let setup = TreeSetup { offline, ..TreeSetup::default() };
        self.create_from_entry(entry, scenario, None, None, None, seed, budget, setup)
    }

    /// A tree of a library scenario (by name) or of a document the user brought. A document is
    /// checked like a shipped file and kept with the tree; a refusal creates nothing.
    pub fn create_tree_from(
        &self,
        source: &ScenarioSource,
        name: Option<&str>,
        seed: Option<u64>,
        budget: BudgetLimits,
        setup: TreeSetup,
    ) -> Result<TreeRef, WorkbenchError> {
        let name = name.map(check_name).transpose()?;
        match source {
            ScenarioSource::Name(scenario) => {
                let entry = match ScenarioEntry::find(&self.scenarios, scenario) {
                    Ok(entry) => entry,
                    Err(e) => {
                        // Not shipped: a saved scenario (`id` or `id@version`)?
                        let (id, version) = library::parse_ref(scenario)?;
                        if !self.library.contains(id) {
                            return Err(WorkbenchError::UnknownScenario(e));
                        }
                        let saved = self
                            .library
                            .get(id, version)
                            .map_err(|e| WorkbenchError::NamedInBody(Box::new(e)))?
                            .ok_or_else(|| {
                                WorkbenchError::NamedInBody(Box::new(Missing::SavedScenario(id.to_string()).into()))
                            })?;
                        let origin = SavedRef { id: id.to_string(), version: saved.version };
                        let user = UserScenario::from_document(id, &saved.document).map_err(|source| {
                            WorkbenchError::SavedScenarioInvalid { origin: origin.clone(), source }
                        })?;
                        let doc = Arc::new(saved.document);
                        return self.create_from_entry(
                            (&user).into(),
                            id,
                            name,
                            Some(doc),
                            Some(origin),
                            seed,
                            budget,
                            setup,
                        );
                    }
                };
                self.create_from_entry(entry, scenario, name, None, None, seed, budget, setup)
            }
            ScenarioSource::Document(doc) => {
                let user = UserScenario::from_document(DOCUMENT_ID, doc)?;
                let label = match user.title().trim() {
                    "" => DOCUMENT_ID.to_string(),
                    t => t.chars().filter(|c| !c.is_control()).take(MAX_NAME_CHARS).collect(),
                };
                let doc = Arc::new(doc.clone());
                self.create_from_entry((&user).into(), &label, name, Some(doc), None, seed, budget, setup)
            }
        }
    }
}

impl Core {
    #[allow(clippy::too_many_arguments)]
    fn create_from_entry(
        &self,
        entry: ScenarioEntry<'_>,
        scenario: &str,
        name: Option<String>,
        document: Option<Arc<serde_json::Value>>,
        origin: Option<SavedRef>,
        seed: Option<u64>,
        budget: BudgetLimits,
        setup: TreeSetup,
    ) -> Result<TreeRef, WorkbenchError> {
        // (Refused now, not at its first run, when this process would run its models and
        // cannot.)
        if entry.kind() == SimKind::Abm && !self.abm_elsewhere() {
            self.abm_pool()?;
        }
        let market = self.market_for(document.as_deref().and_then(dataset_of))?;
        let mut sim = entry.instantiate(seed, market.as_ref())?;
        self.check_hooks(&sim)?;
        if let Sim::Social(s) = &mut sim {
            s.set_offline(setup.offline);
            if setup.state_last {
                s.set_state_last();
            }
        }
        let mut tree = SimTree::new(scenario, sim);
        tree.document = document;
        tree.scenario_version = origin.map(|o| o.version);
        self.register(tree, name, budget)
    }
}

impl Scenarios<'_> {
    /// `GET /api/scenarios`: the shipped scenarios, then the saved ones by id.
    pub(crate) fn scenario_list(&self) -> Vec<ScenarioSummary> {
        ScenarioEntry::all(&self.scenarios).map(|e| e.summary()).chain(self.library.list()).collect()
    }

    /// `GET /api/scenarios/{id}` (`id@version`, or `version`): a shipped or saved document.
    pub(crate) fn scenario_document(&self, id: &str, version: Option<u64>) -> Result<ScenarioDocument, WorkbenchError> {
        let (id, at) = library::parse_ref(id)?;
        let version = match (at, version) {
            (Some(a), Some(b)) if a != b => {
                return Err(RequestError::TwoVersions(a, b).into());
            }
            (a, b) => a.or(b),
        };
        if let Ok(entry) = ScenarioEntry::find(&self.scenarios, id) {
            if let Some(v) = version.filter(|v| *v != 1) {
                return Err(Missing::ShippedVersion { id: id.to_string(), version: v }.into());
            }
            return Ok(library::shipped_document(entry));
        }
        self.library.get(id, version)?.ok_or_else(|| Missing::Scenario(id.to_string()).into())
    }
}

impl Core {
    /// What saving a document checks beyond its own validator: a trading episode is built on
    /// its market (its dataset, tickers and dates), as creating a tree from it would.
    fn check_saved(&self, user: &UserScenario) -> Result<(), WorkbenchError> {
        if let UserScenario::Trading(t) = user {
            let market = self.market_for(t.episode.dataset.as_deref())?;
            ScenarioEntry::from(user).instantiate(None, market.as_ref()).map_err(WorkbenchError::DoesNotBuild)?;
        }
        Ok(())
    }
}

impl Scenarios<'_> {
    /// Whether a scenario is saved under `id`.
    pub(crate) fn is_saved(&self, id: &str) -> bool {
        self.library.contains(id)
    }

    /// `POST /api/scenarios`.
    pub(crate) fn save_scenario(&self, name: &str, document: &serde_json::Value) -> Result<SavedRef, WorkbenchError> {
        self.writable()?;
        self.library.save(&self.scenarios, name, document, &|u| self.check_saved(u))
    }

    /// `PUT /api/scenarios/{id}`.
    pub(crate) fn update_scenario(&self, id: &str, document: &serde_json::Value) -> Result<SavedRef, WorkbenchError> {
        self.writable()?;
        self.library.update(&self.scenarios, id, document, &|u| self.check_saved(u))
    }

    /// `DELETE /api/scenarios/{id}`.
    pub(crate) fn delete_scenario(&self, id: &str) -> Result<(), WorkbenchError> {
        self.writable()?;
        self.library.delete(&self.scenarios, id)
    }
}

impl Core {
    fn check_turns(&self, turns: u64) -> Result<(), WorkbenchError> {
        let max = self.limits.max_turns_per_request;
        if turns > max {
            return Err(RequestLimit::Turns { max }.into());
        }
        Ok(())
    }

    fn check_count(&self, count: u64) -> Result<(), WorkbenchError> {
        let max = self.limits.max_children_per_request;
        if count > max {
            return Err(RequestLimit::Children { max }.into());
        }
        Ok(())
    }

    /// Refuses new work when the tree is full or the server is at its memory budget.
    fn check_capacity(&self, tree: &SimTree, adding: usize) -> Result<(), WorkbenchError> {
        let max = self.limits.max_nodes_per_tree;
        if tree.len().saturating_add(adding) > max {
            return Err(Full::Nodes(max).into());
        }
        self.memory.check().map_err(Full::from)?;
        // What cannot be stored now is refused up front (the store recovers by itself).
        self.writable()
    }

    /// Attaches a running child of `parent` and announces it (`attached`, `run_start`).
    /// `replay` holds the recorded calls to answer from instead of the backend.
    fn start(
        &self,
        handle: &TreeHandle,
        parent: NodeId,
        turns: u64,
        replay: Option<Vec<LlmRecord>>,
    ) -> Result<Pending, WorkbenchError> {
        let mut tree = handle.lock();
        self.check_capacity(&tree, 1)?;
        Self::attach_run(handle, &mut tree, parent, turns, replay, EdgeType::Advance)
    }

    /// Stores a just-attached run's record and announces it (`attached`, `run_start`).
    fn announce_run(handle: &TreeHandle, tree: &mut SimTree, id: NodeId) -> Result<(), WorkbenchError> {
        handle.persist_row(tree, id);
        handle.touch(tree);
        let attached = tree.node(id)?.attached();
        handle.send(TreeMsg::Attached(attached));
        handle.send(TreeMsg::RunStart { node: id });
        Ok(())
    }

    /// [`Self::start`] under a lock the caller holds and with capacity it has checked (a sweep
    /// attaches all its runs under one lock); `edge` is `advance`, or `sweep` or `explore` for
    /// a replicate. The parent's state is not read here: the run reads it when it starts, in
    /// this process or on the worker that takes its job (that read grew with the depth of a
    /// chain when it was made here for every run).
    fn attach_run(
        handle: &TreeHandle,
        tree: &mut SimTree,
        parent: NodeId,
        turns: u64,
        replay: Option<Vec<LlmRecord>>,
        edge: EdgeType,
    ) -> Result<Pending, WorkbenchError> {
        let (id, log) = tree.attach_advance(parent, turns)?;
        if matches!(edge, EdgeType::Sweep | EdgeType::Explore) {
            tree.mark_edge(id, edge)?;
        }
        Self::announce_run(handle, tree, id)?;
        Ok(Pending::new(id, parent, log, turns, replay))
    }

    /// What one run talks to, recording its real calls in `ledger` and charging `budget` alone
    /// (a job charges the budget its payload names, never one of its own process; see
    /// [`crate::backend::run_ctx`]). With real providers the tree's scenario and each agent may
    /// have their own (settings-file overrides, checked at start-up).
    fn client_with(
        &self,
        handle: &TreeHandle,
        replay: Option<Vec<LlmRecord>>,
        sim: &Sim,
        node: NodeId,
        budget: Option<Arc<TreeBudget>>,
        ledger: Arc<Ledger>,
    ) -> Result<(RunCtx, Arc<Ledger>), BackendError> {
        // A tree of hooks read back from the store or an import, or a model whose tree was made
        // while other processes ran models, starts the workers here.
        let abm = match sim.hook_source().is_some() || matches!(sim, Sim::Abm(_)) {
            true => self.abm_pool().ok(),
            false => None,
        };
        let (scenario, log) = {
            let mut t = handle.lock();
            (t.scenario.clone(), t.log(node).ok())
        };
        let mut stream = live_text::NodeStream::new(node, handle.deltas.clone());
        if let Some(log) = log {
            stream = stream.paced_by(log);
        }
        let req = RunRequest { scenario: &scenario, sim, replay, budget, abm, watch: Watch::new(Arc::new(stream)) };
        crate::backend::run_ctx_with(&self.backend, req, ledger)
    }

    /// Runs an attached child. The server owns the run, not the request: whether or not anyone
    /// awaits the returned handle, the run ends as `done`, `failed` or `cancelled`, its end is
    /// stored and `run_finish` is announced (`run::conclude`). The one place that decides whether
    /// a run goes through the queue (see `workbench::jobs`) or runs in this process.
    fn spawn(&self, handle: &Arc<TreeHandle>, p: Pending) -> tokio::task::JoinHandle<RunResult> {
        let running = handle.register_run(p.id);
        match self.jobs.get() {
            Some(hub) if self.goes_to_queue(handle, p.budget.as_deref()) => {
                jobs::spawn_job(hub.clone(), handle, p, running)
            }
            _ => self.spawn_here(handle, p, running),
        }
    }

    /// Waits for a run's result. The run goes on (and is recorded) if this wait is dropped.
    async fn wait(run: tokio::task::JoinHandle<RunResult>) -> Result<RunResult, WorkbenchError> {
        let result = run.await.map_err(|_| WorkbenchError::ShuttingDown)?;
        if let Some(cause) = &result.unstored {
            return Err(WorkbenchError::Removed { what: "node", node: result.node, cause: cause.clone() });
        }
        if result.deleted {
            return Err(WorkbenchError::DeletedWhileRunning(result.node));
        }
        Ok(result)
    }
}

impl Runs<'_> {
    pub async fn advance(&self, tree: u64, parent: NodeId, turns: u64) -> Result<RunResult, WorkbenchError> {
        self.check_turns(turns)?;
        let handle = self.tree(tree)?;
        let pending = self.start(&handle, parent, turns, None)?;
        Core::wait(self.spawn(&handle, pending)).await
    }

    /// Re-runs the advance that made `node` as a new sibling (or as a child of `parent`), answering
    /// every LLM call from `node`'s recording: zero provider calls, and the same log when nothing
    /// changed. A mock run is simply re-run (the mock is deterministic). A request the recording
    /// does not hold fails the run (strict replay) and the reply is a 409 naming it. The recorded
    /// turn count obeys the same limit as an advance (an imported tree may claim anything).
    pub(crate) async fn replay(
        &self,
        tree: u64,
        node: NodeId,
        parent: Option<NodeId>,
    ) -> Result<RunResult, WorkbenchError> {
        let handle = self.tree(tree)?;
        let (parent, turns, records, seed) = {
            let mut t = handle.lock();
            let n = t.node(node)?;
            let [Op::Advance { turns }] = n.ops.as_slice() else {
                return Err(RequestError::NotAnAdvance(node).into());
            };
            let parent = parent.or(n.parent).ok_or(RequestError::ReplayRoot)?;
            let (turns, records) = (*turns, n.records.clone());
            // A run without recorded calls on the mock, or on an offline player (`scripted`) on
            // any backend, is re-run as it is: it made no provider calls to begin with.
            let from = t.sim(parent)?;
            let replay = self.backend.replay_of(&from, records);
            // The node's own seed when it ran with one its parent does not hold (a fan-out child,
            // a sweep's or an exploration's replicate): a re-run draws the same random streams.
            let seed = t.sim(node).ok().and_then(|s| s.seed()).filter(|&s| Some(s) != from.seed());
            (parent, turns, replay, seed)
        };
        self.check_turns(turns)?;
        let mut pending = self.start(&handle, parent, turns, records)?;
        if let Some(seed) = seed {
            pending.reseed(seed);
        }
        let result = Core::wait(self.spawn(&handle, pending)).await?;
        match &result.error {
            Some(e) if result.status == NodeStatus::Failed => {
                Err(WorkbenchError::ReplayFailed { node, new: result.node, error: e.clone() })
            }
            _ => Ok(result),
        }
    }

    /// Starts one child per parent (all attached and announced first), runs them concurrently.
    /// With `replicates`, each child of an agent-based model gets its own seed (parallel
    /// replicates); other kinds are deterministic and unaffected.
    /// Starts one child per parent and waits for all of them. All or nothing: every parent is
    /// checked (present, not running) and every child attached under one lock before any runs,
    /// so a refused request makes no child. With `seeds`, the `i`-th child's random streams are
    /// set from a seed derived from its parent's and `i` (see [`Sim::replicate`]).
    async fn fan_out(
        &self,
        handle: &Arc<TreeHandle>,
        parents: &[NodeId],
        turns: u64,
        seeds: bool,
    ) -> Result<Vec<NodeId>, WorkbenchError> {
        let pending = {
            let mut tree = handle.lock();
            self.check_capacity(&tree, parents.len())?;
            for &p in parents {
                tree.sim(p)?;
            }
            let mut pending = Vec::with_capacity(parents.len());
            for (i, &p) in parents.iter().enumerate() {
                match Core::attach_run(handle, &mut tree, p, turns, None, EdgeType::Advance) {
                    Ok(mut run) => {
                        if seeds {
                            run.spec.replicate = Some(i as u64);
                        }
                        if parents.len() > 1 {
                            run.spec.fan_out = Some(parents.len() as u64);
                        }
                        pending.push(run);
                    }
                    Err(e) => {
                        // Not expected after the checks above; children already attached still
                        // run, so none is left half-made.
                        drop(tree);
                        for run in pending {
                            drop(self.spawn(handle, run));
                        }
                        return Err(e);
                    }
                }
            }
            pending
        };
        let running: Vec<_> = pending.into_iter().map(|run| self.spawn(handle, run)).collect();
        let mut ids = Vec::with_capacity(running.len());
        let mut first_error = None;
        let mut failed = 0;
        for r in running {
            match Core::wait(r).await {
                Ok(done) => ids.push(done.node),
                Err(e) => {
                    failed += 1;
                    first_error.get_or_insert(e);
                }
            }
        }
        // What providers kept for the fan-out's runs (explicit caches) goes with it.
        let from: std::collections::BTreeSet<NodeId> = parents.iter().copied().collect();
        for p in from {
            self.backend.end_fan_out(crate::sim::affinity_of(handle.id, p)).await;
        }
        match first_error {
            Some(WorkbenchError::Removed { node, cause, .. }) => {
                // All or nothing here too: a child that could not be stored refuses the request,
                // so its siblings stored already leave the tree (and the store) with it.
                let children = ids.len() + failed;
                for id in ids {
                    handle.roll_back(id);
                }
                Err(WorkbenchError::FanOutRemoved { node, children, cause })
            }
            Some(e) => Err(e),
            None => Ok(ids),
        }
    }

    /// Whether the runs of `nodes` produced the same log (each node's own entries, its id aside):
    /// a fan-out whose children are copies, which its reply says.
    pub(crate) fn identical_runs(&self, tree: u64, nodes: &[NodeId]) -> Result<bool, WorkbenchError> {
        let handle = self.tree(tree)?;
        let mut t = handle.lock();
        let mut first: Option<Vec<Event>> = None;
        for &n in nodes {
            // Each entry read back as its event (kind and data): the node it names aside.
            let Ok(own) =
                t.log(n)?.entries().iter().map(|e| serde_json::from_str::<Event>(e)).collect::<Result<Vec<Event>, _>>()
            else {
                return Ok(false);
            };
            match &first {
                None => first = Some(own),
                Some(f) if *f != own => return Ok(false),
                Some(_) => {}
            }
        }
        Ok(nodes.len() > 1)
    }

    pub async fn advance_multi(
        &self,
        tree: u64,
        parent: NodeId,
        turns: u64,
        count: i64,
        same_seed: bool,
    ) -> Result<Vec<NodeId>, WorkbenchError> {
        self.check_turns(turns)?;
        let count = count.max(0) as u64;
        self.check_count(count)?;
        let handle = self.tree(tree)?;
        handle.lock().node(parent)?;
        self.fan_out(&handle, &vec![parent; count as usize], turns, !same_seed).await
    }

    pub(crate) async fn advance_frontier(
        &self,
        tree: u64,
        turns: u64,
        only_max_depth: bool,
    ) -> Result<Vec<NodeId>, WorkbenchError> {
        self.check_turns(turns)?;
        let handle = self.tree(tree)?;
        let parents = handle.lock().frontier(only_max_depth);
        self.check_count(parents.len() as u64)?;
        self.fan_out(&handle, &parents, turns, false).await
    }

    /// `turns` one-turn steps, each from the last. The whole chain runs in a task of its own,
    /// so a client that hangs up does not leave it half-way.
    pub async fn advance_chain(&self, tree: u64, parent: NodeId, turns: u64) -> Result<RunResult, WorkbenchError> {
        let steps = turns.max(1);
        self.check_turns(steps)?;
        let handle = self.tree(tree)?;
        let first = self.start(&handle, parent, 1, None)?;
        let app = Arc::clone(self.0);
        let chain = tokio::spawn(async move {
            let mut done = Core::wait(app.spawn(&handle, first)).await?;
            for _ in 1..steps {
                if done.status != NodeStatus::Done {
                    // A failed or cancelled step ends the chain: its successors would fail too.
                    break;
                }
                let pending = app.start(&handle, done.node, 1, None)?;
                done = Core::wait(app.spawn(&handle, pending)).await?;
            }
            Ok(done)
        });
        chain.await.map_err(|_| WorkbenchError::ShuttingDown)?
    }

    pub fn branch(&self, tree: u64, parent: NodeId, ops: Vec<Op>) -> Result<NodeId, WorkbenchError> {
        let handle = self.tree(tree)?;
        let mut t = handle.lock();
        self.check_capacity(&t, 1)?;
        let id = t.branch(parent, ops)?;
        let stored = handle.persist_node(&mut t, id);
        handle.touch(&t);
        handle.send(TreeMsg::Attached(t.node(id)?.attached()));
        drop(t);
        // Acknowledged only once stored; otherwise the branch leaves the tree again.
        if let Err(e) = stored.and_then(|()| handle.flush()) {
            handle.roll_back(id);
            return Err(WorkbenchError::Removed { what: "branch", node: id, cause: e.to_string() });
        }
        Ok(id)
    }

    /// Stops a running node: its partial log and the state it reached are kept, its status
    /// becomes `cancelled`. Answers once the run has ended (within a turn of the request, or at
    /// once for a run waiting on a provider or a worker).
    pub(crate) async fn cancel(&self, tree: u64, node: NodeId) -> Result<(), WorkbenchError> {
        let handle = self.tree(tree)?;
        if !handle.lock().node(node)?.status.is_running() {
            return Err(WorkbenchError::NodeNotRunning(node));
        }
        for mut ended in handle.cancel([node]) {
            let _ = ended.wait_for(|e| *e).await;
        }
        Ok(())
    }

    /// Deletes a subtree; runs inside it are cancelled. The deletion is stored first and made
    /// in memory only then: one the store refuses (503) leaves the subtree where it was.
    pub fn delete(&self, tree: u64, node: NodeId) -> Result<(), WorkbenchError> {
        let handle = self.tree(tree)?;
        let removed = {
            let mut t = handle.lock();
            if t.node(node)?.parent.is_none() {
                return Err(TreeError::DeleteRoot.into());
            }
            let nodes = t.subtree(node);
            let left = t.len().saturating_sub(nodes.len());
            let now = crate::store::now_ms();
            let touch = handle.touch_write(&t, left, now);
            handle.store_first(vec![crate::store::Write::DeleteNodes { tree, nodes }, touch])?;
            lock(&handle.meta).last_activity = now;
            let removed = t.delete_subtree(node)?;
            handle.sweeps.prune(&handle, &t);
            handle.explores.prune(&handle, &t);
            handle.send(TreeMsg::Deleted { node });
            removed
        };
        handle.cancel(removed);
        Ok(())
    }
}

impl Trees<'_> {
    /// Removes a whole tree; its running simulations are cancelled. Stored first, like
    /// [`Self::delete`]: a refused deletion leaves the tree as it was.
    pub fn delete_tree(&self, tree: u64) -> Result<(), WorkbenchError> {
        if let Some(store) = &self.store {
            if !self.trees.contains(tree) {
                return Err(WorkbenchError::TreeNotFound);
            }
            store
                .commit_or_nothing(vec![crate::store::Write::DeleteTree { tree }])
                .map_err(|source| WorkbenchError::NotStored { what: "deletion", source })?;
        }
        match self.trees.remove(tree) {
            Some(trees::Found::Open(handle)) => {
                // Explorations first, so that none starts a round in the deleted tree.
                handle.explores.stop_all();
                let running: Vec<NodeId> = lock(&handle.runs).keys().copied().collect();
                handle.cancel(running);
            }
            Some(trees::Found::Stored(_)) => {}
            None if self.store.is_none() => return Err(WorkbenchError::TreeNotFound),
            None => {}
        }
        Ok(())
    }

    /// `GET …/state`: a finished node's state, or a running node's state so far — after its
    /// last turn, or its parent's (where it started) before its first.
    pub(crate) fn state_so_far(&self, tree: u64, node: NodeId) -> Result<simtree_shared::NodeState, WorkbenchError> {
        let handle = self.tree(tree)?;
        let mut t = handle.lock();
        match t.state(node) {
            Err(TreeError::Running(_)) => {}
            other => return Ok(other?),
        }
        let live = lock(&handle.runs).get(&node).and_then(|r| lock(&r.live).clone());
        if let Some(state) = live {
            return Ok(state);
        }
        match t.node(node)?.parent {
            Some(parent) => Ok(t.state(parent)?),
            None => Err(TreeError::Running(node).into()),
        }
    }

    /// `GET …/summaries`: every node's summary with its annotation.
    pub(crate) fn summaries(&self, tree: u64) -> Result<Vec<simtree_shared::NotedSummary>, WorkbenchError> {
        Ok(self.tree(tree)?.lock().noted_summaries())
    }

    /// `GET …/graph`: the graph with its marks; with `keep`, only the nodes reached through the
    /// edge types it keeps (and their marks).
    pub(crate) fn noted_graph(
        &self,
        tree: u64,
        keep: Option<simtree_shared::edges::EdgeFilter>,
    ) -> Result<simtree_shared::NotedGraph, WorkbenchError> {
        let mut g = self.tree(tree)?.lock().noted_graph();
        if let Some(keep) = keep {
            g.graph = g.graph.filter_edges(|t| keep.keeps(t));
            let kept: std::collections::BTreeSet<u64> = g.graph.nodes.iter().map(|n| n.id).collect();
            g.marks.retain(|m| kept.contains(&m.node));
        }
        Ok(g)
    }

    /// The bare graph (`GET …/graph/columns` writes it as columns).
    pub(crate) fn graph(&self, tree: u64) -> Result<simtree_shared::Graph, WorkbenchError> {
        Ok(self.tree(tree)?.lock().graph())
    }

    /// A node's full log as one JSON array, assembled from the stored entries as they are.
    pub(crate) fn log_json(&self, tree: u64, node: NodeId) -> Result<String, WorkbenchError> {
        let handle = self.tree(tree)?;
        let mut body = String::from("[");
        handle.lock().for_each_log_entry(node, |e| {
            if body.len() > 1 {
                body.push(',');
            }
            body.push_str(e);
        })?;
        body.push(']');
        Ok(body)
    }

    /// The lowest common ancestor of `a` and `b`.
    pub(crate) fn lca(&self, tree: u64, a: NodeId, b: NodeId) -> Result<NodeId, WorkbenchError> {
        Ok(self.tree(tree)?.lock().lca(a, b)?)
    }

    /// A node's kind-specific view.
    pub(crate) fn view(&self, tree: u64, node: NodeId) -> Result<simtree_shared::NodeView, WorkbenchError> {
        Ok(self.tree(tree)?.lock().sim(node)?.view())
    }

    /// Fails as a lookup of the tree would (it is loaded if stored): for routes that answer
    /// about a tree's nodes without reading them here.
    pub fn check_exists(&self, tree: u64) -> Result<(), WorkbenchError> {
        self.tree(tree).map(drop)
    }

    /// Subscribes to a tree's messages and live text; the snapshot to start from is taken after
    /// (see [`TreeWatch::snapshot`]), so nothing between the two is missed.
    pub(crate) fn watch(&self, tree: u64) -> Result<TreeWatch, WorkbenchError> {
        let handle = self.tree(tree)?;
        Ok(TreeWatch {
            events: handle.events.subscribe(),
            // Live text comes from now on (no earlier pieces); subscribing is what makes runs stream.
            deltas: handle.deltas.subscribe(),
            handle,
        })
    }

    /// Subscribes to a node's live entries.
    pub(crate) fn node_log(&self, tree: u64, node: NodeId) -> Result<Arc<NodeLog>, WorkbenchError> {
        let handle = self.tree(tree)?;
        let mut t = handle.lock();
        Ok(t.log(node)?)
    }
}

/// A watcher's subscription to one tree ([`Trees::watch`]).
pub(crate) struct TreeWatch {
    /// Lifecycle messages, in causal order per node.
    pub(crate) events: broadcast::Receiver<TreeMsg>,
    /// Live text of running nodes.
    pub(crate) deltas: broadcast::Receiver<TreeMsg>,
    handle: Arc<TreeHandle>,
}

impl TreeWatch {
    /// The root as an `attached` message (none if it cannot be read) and the graph now.
    pub(crate) fn snapshot(&self) -> (Option<TreeMsg>, simtree_shared::Graph) {
        let t = self.handle.lock();
        (t.node(0).ok().map(|n| TreeMsg::Attached(n.attached())), t.graph())
    }

    /// The graph now (after a watcher fell behind).
    pub(crate) fn graph(&self) -> simtree_shared::Graph {
        self.handle.lock().graph()
    }
}

/// A run's progress as `run_progress` messages: turns done of the total, at most ten a second
/// (and always the last).
struct Progress {
    node: NodeId,
    total: u64,
    done: u64,
    last: Option<std::time::Instant>,
}

impl Progress {
    const EVERY: std::time::Duration = std::time::Duration::from_millis(100);

    fn new(node: NodeId, total: u64) -> Progress {
        Progress { node, total, done: 0, last: None }
    }

    fn observe(&mut self, e: &Event) -> Option<TreeMsg> {
        if !crate::sim::counts_as_turn(e) {
            return None;
        }
        // An agent-based model's first run reports step 0 too; it is not a turn done.
        if e.kind == crate::engine::event::EventType::AbmStep && e.data["step"] == 0 {
            return None;
        }
        self.done = (self.done + 1).min(self.total);
        let due = self.last.is_none_or(|t| t.elapsed() >= Self::EVERY);
        if !due && self.done < self.total {
            return None;
        }
        self.last = Some(std::time::Instant::now());
        Some(TreeMsg::RunProgress { node: self.node, done: self.done, total: self.total })
    }
}

/// A finished run: its node, how it ended and, when it failed, why.
#[derive(Debug)]
pub struct RunResult {
    pub node: NodeId,
    pub(crate) status: NodeStatus,
    pub(crate) error: Option<String>,
    /// The node was deleted while it ran (nothing was stored).
    deleted: bool,
    /// Its end could not be stored (the cause): the node was removed, nothing acknowledged.
    unstored: Option<String>,
}

/// Polls a future, turning a panic into `Err(())` so that one broken simulator state cannot
/// take a node (or a runtime worker) down with it.
struct CatchUnwind<F>(std::pin::Pin<Box<F>>);

impl<F: std::future::Future> std::future::Future for CatchUnwind<F> {
    type Output = Result<F::Output, ()>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        let inner = self.0.as_mut();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(std::task::Poll::Ready(v)) => std::task::Poll::Ready(Ok(v)),
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Err(_) => std::task::Poll::Ready(Err(())),
        }
    }
}
