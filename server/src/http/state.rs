//! The server's shared state: the registry of trees and the operations that run simulations.
//!
//! A tree lives behind a mutex that is only held for structural changes (attach, finish, delete,
//! reads); simulations run outside it as tokio tasks, so many clients can work on one tree and a
//! fan-out uses every core. Lifecycle messages (`attached`, `run_start`, `run_finish`, `deleted`)
//! go to the tree's broadcast channel in causal order per node; log entries go to each node's
//! own log and its live channel.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use dashmap::DashMap;
use simtree_shared::{NodeStatus, Op, TreeMsg, TreeRef};
use tokio::sync::broadcast;
use tokio::task::AbortHandle;

use super::error::ApiError;
use crate::abm::worker::{WorkerConfig, WorkerPool};
use crate::engine::Event;
use crate::llm::ledger::{
    Ledger, LlmRecord, MeteredClient, ProviderToolModel, ReplayClient, ReplayToolModel, RoutingClient,
};
use crate::llm::resilience::TokenBudget;
use crate::llm::{ChatProvider, LlmClient, LlmConfig, LlmSettings, MockClient, ProviderPool};
use crate::scenario::ScenarioLibrary;
use crate::sim::{AbmSim, RunCtx, Sim};
use crate::trading::agents::MockToolModel;
use crate::trading::data::MarketData;
use crate::trading::episode::TradingEpisode;
use crate::tree::{NodeId, NodeLog, SimTree, TreeExport, entry_json};

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
        }
    }
}

pub struct AppState {
    pub trees: DashMap<u64, Arc<TreeHandle>>,
    next_tree: AtomicU64,
    pub scenarios: ScenarioLibrary,
    pub backend: Backend,
    pub limits: Limits,
    /// The web UI's files (`frontend/dist`).
    pub static_dir: std::path::PathBuf,
    /// Daily market data for trading episodes (loaded once; `None` when the data is missing).
    pub market: Option<Arc<MarketData>>,
    /// The Python/Mesa workers, started with the first agent-based tree.
    abm_pool: std::sync::OnceLock<Result<Arc<WorkerPool>, String>>,
    /// The checkout (for the worker script and its venv).
    pub root: std::path::PathBuf,
    /// Where ABM model code runs: bubblewrap (default) or unsandboxed (`serve --unsafe-abm`).
    pub abm_sandbox: crate::abm::Sandbox,
}

/// Where runs get their answers: the offline mock, or real providers (metered and recorded).
#[derive(Clone)]
pub enum Backend {
    Mock,
    Provider(Arc<Providers>),
}

/// Real providers: the server's default configuration with the settings file's per-scenario and
/// per-agent overrides; everything aimed at one endpoint shares one pool gate.
pub struct Providers {
    pub base: LlmConfig,
    pub settings: LlmSettings,
    pub pool: ProviderPool,
}

impl Providers {
    /// Checks that the default and every override in the settings resolve to a usable provider.
    pub fn new(base: LlmConfig, settings: LlmSettings) -> Result<Providers, String> {
        let p = Providers {
            base,
            settings,
            pool: ProviderPool::new(),
        };
        p.resolve(None, None)?;
        for (scenario, sec) in &p.settings.scenarios {
            p.resolve(Some(scenario), None)?;
            for agent in sec.agents.keys() {
                p.resolve(Some(scenario), Some(agent))?;
            }
        }
        Ok(p)
    }

    pub fn resolve(&self, scenario: Option<&str>, agent: Option<&str>) -> Result<Arc<dyn ChatProvider>, String> {
        let env = |name: &str| std::env::var(name).ok();
        let config = self
            .settings
            .resolve(&self.base, scenario, agent, &env)
            .map_err(|e| e.to_string())?;
        self.pool.get(&config).map_err(|e| e.to_string())
    }
}

pub struct TreeHandle {
    pub id: u64,
    tree: Mutex<SimTree>,
    pub events: broadcast::Sender<TreeMsg>,
    tasks: Mutex<HashMap<NodeId, AbortHandle>>,
    /// The tree's optional token budget; every run of the tree charges it.
    pub budget: Option<Arc<TokenBudget>>,
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
}

impl AppState {
    pub fn new(scenarios: ScenarioLibrary, backend: Backend, limits: Limits) -> Self {
        AppState {
            trees: DashMap::new(),
            next_tree: AtomicU64::new(0),
            scenarios,
            backend,
            limits,
            static_dir: super::default_static_dir(),
            market: MarketData::load_default().ok().map(Arc::new),
            abm_pool: std::sync::OnceLock::new(),
            root: crate::scenario::assets_dir().join(".."),
            abm_sandbox: Default::default(),
        }
    }

    /// The ABM worker pool, started (venv created if needed) on first use.
    pub fn abm_pool(&self) -> Result<Arc<WorkerPool>, ApiError> {
        self.abm_pool
            .get_or_init(|| {
                crate::abm::venv::ensure_venv(&self.root)?;
                let config = WorkerConfig::for_root(&self.root).with_sandbox(self.abm_sandbox);
                WorkerPool::spawn(&config, 2).map(Arc::new).map_err(|e| e.to_string())
            })
            .clone()
            .map_err(|e| {
                ApiError::new(
                    axum::http::StatusCode::SERVICE_UNAVAILABLE,
                    format!("ABM worker unavailable: {e}"),
                )
            })
    }

    pub fn tree(&self, id: u64) -> Result<Arc<TreeHandle>, ApiError> {
        self.trees
            .get(&id)
            .map(|t| t.clone())
            .ok_or_else(ApiError::tree_not_found)
    }

    fn register(&self, tree: SimTree, token_budget: Option<u64>) -> Result<TreeRef, ApiError> {
        if self.trees.len() >= self.limits.max_trees {
            return Err(ApiError::conflict(format!(
                "the server holds its maximum of {} trees; delete one first",
                self.limits.max_trees
            )));
        }
        let id = self.next_tree.fetch_add(1, Ordering::SeqCst);
        let handle = TreeHandle {
            id,
            tree: Mutex::new(tree),
            events: broadcast::channel(self.limits.ws_queue.max(1)).0,
            tasks: Mutex::new(HashMap::new()),
            budget: token_budget
                .or(self.limits.token_budget)
                .map(|b| Arc::new(TokenBudget::new(b))),
        };
        self.trees.insert(id, Arc::new(handle));
        Ok(TreeRef { id, root: 0 })
    }

    pub fn create_tree(
        &self,
        scenario: &str,
        seed: Option<u64>,
        token_budget: Option<u64>,
    ) -> Result<TreeRef, ApiError> {
        if let Some(a) = self.scenarios.abm(scenario) {
            self.abm_pool()?;
            let sim = AbmSim::new(a.model.clone(), seed.unwrap_or(0));
            return self.register(SimTree::new(scenario, Sim::Abm(sim)), token_budget);
        }
        if let Some(t) = self.scenarios.trading(scenario) {
            let market = self
                .market
                .clone()
                .ok_or_else(|| ApiError::unprocessable("no market data is installed (assets/data/market)"))?;
            let episode =
                TradingEpisode::new(market, t.episode.clone()).map_err(|e| ApiError::unprocessable(e.to_string()))?;
            return self.register(SimTree::new(scenario, Sim::Trading(episode)), token_budget);
        }
        let s = self.scenarios.get(scenario).map_err(|_| {
            ApiError::unprocessable(format!(
                "unknown scenario '{scenario}' (available: {})",
                self.scenarios.ids().join(", ")
            ))
        })?;
        let sim = s.build(seed).map_err(|e| ApiError::unprocessable(e.to_string()))?;
        self.register(SimTree::new(scenario, Sim::Social(sim)), token_budget)
    }

    pub fn import_tree(&self, export: TreeExport) -> Result<TreeRef, ApiError> {
        let tree = SimTree::import(export, self.market.as_ref())?;
        self.register(tree, None)
    }

    fn check_turns(&self, turns: u64) -> Result<(), ApiError> {
        let max = self.limits.max_turns_per_request;
        if turns > max {
            return Err(ApiError::unprocessable(format!(
                "turns must be at most {max} per request"
            )));
        }
        Ok(())
    }

    fn check_count(&self, count: u64) -> Result<(), ApiError> {
        let max = self.limits.max_children_per_request;
        if count > max {
            return Err(ApiError::unprocessable(format!("at most {max} children per request")));
        }
        Ok(())
    }

    /// Attaches a running child of `parent` and announces it (`attached`, `run_start`).
    /// `replay` holds the recorded calls to answer from instead of the backend.
    fn start(
        &self,
        handle: &TreeHandle,
        parent: NodeId,
        turns: u64,
        replay: Option<Vec<LlmRecord>>,
    ) -> Result<Pending, ApiError> {
        let mut tree = handle.lock();
        let (id, sim, log) = tree.start_advance(parent, turns)?;
        let attached = tree.node(id)?.attached();
        handle.send(TreeMsg::Attached(attached));
        handle.send(TreeMsg::RunStart { node: id });
        Ok(Pending {
            id,
            sim,
            log,
            turns,
            replay,
        })
    }

    /// What one run talks to, and the ledger its real calls are recorded in. With real providers
    /// the tree's scenario and each agent may have their own (settings-file overrides).
    fn client_for(&self, handle: &TreeHandle, replay: Option<Vec<LlmRecord>>, sim: &Sim) -> (RunCtx, Arc<Ledger>) {
        let ledger = Arc::new(Ledger::default());
        let abm = self.abm_pool.get().and_then(|r| r.as_ref().ok()).cloned();
        let ctx = match (replay, &self.backend) {
            (Some(records), _) => RunCtx {
                llm: Arc::new(ReplayClient::new(&records)),
                tools: Arc::new(ReplayToolModel::new(&records)),
                abm,
            },
            (None, Backend::Mock) => RunCtx {
                llm: Arc::new(MockClient),
                tools: Arc::new(MockToolModel),
                abm,
            },
            (None, Backend::Provider(ps)) => {
                let scenario = handle.lock().scenario.clone();
                // Overrides were checked at start-up; the default stands in should one fail now.
                let Ok(default) = ps.resolve(Some(&scenario), None) else {
                    return (
                        RunCtx {
                            llm: Arc::new(MockClient),
                            tools: Arc::new(MockToolModel),
                            abm,
                        },
                        ledger,
                    );
                };
                let metered = |provider: Arc<dyn ChatProvider>| -> Arc<dyn LlmClient> {
                    Arc::new(MeteredClient {
                        provider,
                        ledger: ledger.clone(),
                        budget: handle.budget.clone(),
                    })
                };
                let agents = match sim {
                    Sim::Social(s) => s.world.names(),
                    _ => Vec::new(),
                };
                let by_agent: Vec<(String, Arc<dyn LlmClient>)> = agents
                    .into_iter()
                    .filter_map(|name| {
                        let p = ps.resolve(Some(&scenario), Some(&name)).ok()?;
                        (!Arc::ptr_eq(&p, &default)).then(|| (name, metered(p)))
                    })
                    .collect();
                let llm = if by_agent.is_empty() {
                    metered(default.clone())
                } else {
                    Arc::new(RoutingClient {
                        default: metered(default.clone()),
                        by_agent,
                    })
                };
                let tools = Arc::new(ProviderToolModel {
                    provider: default,
                    ledger: ledger.clone(),
                    budget: handle.budget.clone(),
                });
                RunCtx { llm, tools, abm }
            }
        };
        (ctx, ledger)
    }

    /// Spawns the run of a started child; it proceeds on the runtime's worker threads.
    fn spawn(&self, handle: &TreeHandle, p: Pending) -> Running {
        let Pending {
            id,
            mut sim,
            log,
            turns,
            replay,
        } = p;
        let (ctx, ledger) = self.client_for(handle, replay, &sim);
        let task = tokio::spawn(async move {
            let mut sink = move |e: Event| log.push(&entry_json(&e, id));
            let result = sim.run(turns, &ctx, &mut sink).await;
            (sim, result.err(), ledger.take())
        });
        lock(&handle.tasks).insert(id, task.abort_handle());
        Running { id, task }
    }

    /// Waits for a run, stores its simulator and records, announces `run_finish`. A run that
    /// failed (an LLM error after retries) still gives its node, marked failed with the reason.
    async fn collect(&self, handle: &TreeHandle, r: Running) -> Result<RunResult, ApiError> {
        let Running { id, task } = r;
        let outcome = task.await;
        lock(&handle.tasks).remove(&id);
        match outcome {
            Ok((sim, error, records)) => {
                let status = if error.is_some() {
                    NodeStatus::Failed
                } else {
                    NodeStatus::Done
                };
                handle.lock().finish(id, sim, error.clone(), records);
                handle.send(TreeMsg::RunFinish {
                    node: id,
                    status,
                    error: error.clone(),
                });
                Ok(RunResult { node: id, error })
            }
            Err(e) if e.is_cancelled() => Err(ApiError::conflict(format!("node {id} was deleted while running"))),
            Err(_) => {
                handle
                    .lock()
                    .fail_without_sim(id, "the run stopped unexpectedly".into());
                handle.send(TreeMsg::RunFinish {
                    node: id,
                    status: NodeStatus::Failed,
                    error: Some("the run stopped unexpectedly".into()),
                });
                Err(ApiError::new(
                    axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                    format!("run of node {id} failed"),
                ))
            }
        }
    }

    pub async fn advance(&self, tree: u64, parent: NodeId, turns: u64) -> Result<RunResult, ApiError> {
        self.check_turns(turns)?;
        let handle = self.tree(tree)?;
        let pending = self.start(&handle, parent, turns, None)?;
        let running = self.spawn(&handle, pending);
        self.collect(&handle, running).await
    }

    /// Re-runs the advance that made `node` as a new sibling (or as a child of `parent`), answering
    /// every LLM call from `node`'s recording: zero provider calls, and the same log when nothing
    /// changed. A mock run is simply re-run (the mock is deterministic). A request the recording
    /// does not hold fails the run (strict replay) and the reply is a 409 naming it.
    pub async fn replay(&self, tree: u64, node: NodeId, parent: Option<NodeId>) -> Result<RunResult, ApiError> {
        let handle = self.tree(tree)?;
        let (parent, turns, records) = {
            let t = handle.lock();
            let n = t.node(node)?;
            let [Op::Advance { turns }] = n.ops.as_slice() else {
                return Err(ApiError::unprocessable(format!(
                    "node {node} was not made by an advance; only advances can be replayed"
                )));
            };
            let parent = parent
                .or(n.parent)
                .ok_or_else(|| ApiError::unprocessable("the root cannot be replayed"))?;
            // A run without recorded calls (the mock, rule-based traders, ABM) is re-run as it
            // is: it made no provider calls to begin with.
            let replay = match &self.backend {
                Backend::Mock if n.records.is_empty() => None,
                _ => Some(n.records.clone()),
            };
            (parent, *turns, replay)
        };
        let pending = self.start(&handle, parent, turns, records)?;
        let running = self.spawn(&handle, pending);
        let result = self.collect(&handle, running).await?;
        match &result.error {
            Some(e) => Err(ApiError::conflict(format!(
                "replay of node {node} failed in new node {}: {e}",
                result.node
            ))),
            None => Ok(result),
        }
    }

    /// Starts one child per parent (all attached and announced first), runs them concurrently.
    /// With `replicates`, each child of an agent-based model gets its own seed (parallel
    /// replicates); other kinds are deterministic and unaffected.
    async fn fan_out(
        &self,
        handle: &Arc<TreeHandle>,
        parents: &[NodeId],
        turns: u64,
        replicates: bool,
    ) -> Result<Vec<NodeId>, ApiError> {
        let mut started = Vec::with_capacity(parents.len());
        let mut first_error = None;
        for &p in parents {
            match self.start(handle, p, turns, None) {
                Ok(mut pending) => {
                    if replicates {
                        pending.sim.replicate(pending.id);
                    }
                    started.push(pending)
                }
                Err(e) => {
                    // Children already attached still run, so none is left half-made.
                    first_error = Some(e);
                    break;
                }
            }
        }
        let running: Vec<Running> = started.into_iter().map(|p| self.spawn(handle, p)).collect();
        let mut ids = Vec::with_capacity(running.len());
        for r in running {
            match self.collect(handle, r).await {
                Ok(done) => ids.push(done.node),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(ids),
        }
    }

    pub async fn advance_multi(
        &self,
        tree: u64,
        parent: NodeId,
        turns: u64,
        count: i64,
    ) -> Result<Vec<NodeId>, ApiError> {
        self.check_turns(turns)?;
        let count = count.max(0) as u64;
        self.check_count(count)?;
        let handle = self.tree(tree)?;
        handle.lock().node(parent)?;
        self.fan_out(&handle, &vec![parent; count as usize], turns, true).await
    }

    pub async fn advance_frontier(&self, tree: u64, turns: u64, only_max_depth: bool) -> Result<Vec<NodeId>, ApiError> {
        self.check_turns(turns)?;
        let handle = self.tree(tree)?;
        let parents = handle.lock().frontier(only_max_depth);
        self.check_count(parents.len() as u64)?;
        self.fan_out(&handle, &parents, turns, false).await
    }

    pub async fn advance_chain(&self, tree: u64, parent: NodeId, turns: u64) -> Result<RunResult, ApiError> {
        let steps = turns.max(1);
        self.check_turns(steps)?;
        let handle = self.tree(tree)?;
        let mut current = parent;
        for _ in 0..steps {
            let pending = self.start(&handle, current, 1, None)?;
            let running = self.spawn(&handle, pending);
            let done = self.collect(&handle, running).await?;
            current = done.node;
            if done.error.is_some() {
                // A failed step ends the chain: its successors would fail the same way.
                return Ok(done);
            }
        }
        Ok(RunResult {
            node: current,
            error: None,
        })
    }

    pub fn branch(&self, tree: u64, parent: NodeId, ops: Vec<Op>) -> Result<NodeId, ApiError> {
        let handle = self.tree(tree)?;
        let mut t = handle.lock();
        let id = t.branch(parent, ops)?;
        handle.send(TreeMsg::Attached(t.node(id)?.attached()));
        Ok(id)
    }

    /// Deletes a subtree; runs inside it are cancelled.
    pub fn delete(&self, tree: u64, node: NodeId) -> Result<(), ApiError> {
        let handle = self.tree(tree)?;
        let removed = {
            let mut t = handle.lock();
            let removed = t.delete_subtree(node)?;
            handle.send(TreeMsg::Deleted { node });
            removed
        };
        let tasks = lock(&handle.tasks);
        for id in removed {
            if let Some(task) = tasks.get(&id) {
                task.abort();
            }
        }
        Ok(())
    }

    /// Removes a whole tree; its running simulations are cancelled.
    pub fn delete_tree(&self, tree: u64) -> Result<(), ApiError> {
        let (_, handle) = self.trees.remove(&tree).ok_or_else(ApiError::tree_not_found)?;
        for task in lock(&handle.tasks).values() {
            task.abort();
        }
        Ok(())
    }

    /// Subscribes to a node's live entries.
    pub fn node_log(&self, tree: u64, node: NodeId) -> Result<Arc<NodeLog>, ApiError> {
        let handle = self.tree(tree)?;
        let t = handle.lock();
        Ok(t.node(node)?.log.clone())
    }
}

/// A finished run: its node and, when the run failed, why.
#[derive(Debug)]
pub struct RunResult {
    pub node: NodeId,
    pub error: Option<String>,
}

struct Running {
    id: NodeId,
    task: tokio::task::JoinHandle<(Sim, Option<String>, Vec<LlmRecord>)>,
}

struct Pending {
    id: NodeId,
    sim: Sim,
    log: Arc<NodeLog>,
    turns: u64,
    replay: Option<Vec<LlmRecord>>,
}
