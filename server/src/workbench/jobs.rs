//! Runs as jobs (issue 26, item 3, phase 1): with PostgreSQL and `serve --jobs`, a run is a row
//! of the queue (`store/jobs.rs`) that any `simtree worker` (or the server's own worker) takes.
//!
//! The serving process keeps what it always did: the tree in memory, attaching the running
//! child and announcing it (`attached`, `run_start`), and its end (`run_finish`). It queues the
//! job in the write batch that follows the node's record (never before it) and waits:
//!
//! - a worker rebuilds the parent's state from the store, runs the turns with its own run
//!   context, writes the node's log rows as runs do (and `NOTIFY simtree_log <tree>:<node>`),
//!   and ends the job in one transaction with the node's record, state, remaining log and
//!   memory text — fenced by its claim, so a worker that lost it stores nothing;
//! - the server relays log rows it is told of to the node's log (so its watchers see entries
//!   as from an in-process run, with `run_progress`), and on the job's end
//!   (`done:<t>:<n>:<status>`, or its once-a-second poll) takes the node's stored record into
//!   its tree (the state stays in the store until used), or fails the node with the job's
//!   error when it was given up.
//!
//! A server starting on a database whose last server died mid-run adopts that server's jobs
//! ([`Core::enable_jobs`], before the store is attached): their nodes stay `running`, and
//! the dispatcher waits for them as for runs it queued itself; only runs that were not jobs come
//! back `interrupted`. What lived only in the dead process's memory (the request waiting for a
//! fan-out's children, a client's toast) is gone; each child still ends on its own.
//!
//! Runs of agent-based models are jobs of their own kind ([`queue::ABM`]): a process takes them
//! only into its own Mesa pool (`--abm-workers` of them at once, advertised in `workers`), and a
//! server's own worker takes them only while no `simtree worker` offers any. A worker rebuilds
//! the parent's model in its pool from the stored specification, seed and history of advances
//! (snapshots, pickles, never leave the process that made them), which gives the state the
//! parent's own run reached: Mesa's generators are seeded, so the replay is deterministic. While
//! no process on the database offers ABM slots, ABM runs stay in the serving process.
//!
//! A replay is a job like any run: the recorded calls it answers from travel in its payload
//! ([`RunSpec::replay`]), so it makes no provider call wherever it runs.
//!
//! A budgeted tree's runs are jobs too: the tree's budget is booked in the database
//! ([`QueueBook`], `store/jobs.rs`), its caps and prices travel in the job's payload
//! ([`RunSpec::budget`]), and every call, on the leader or a worker, holds its most possible cost
//! there before it starts, so workers racing for one tree never spend past its caps together.
//! An exploration's own token and money caps are booked the same way, as a part of its tree's
//! book ([`BudgetKey::explore`]), and travel with its replicates' jobs ([`JobBudget::part`]).
//!
//! Runs stay in-process (exactly as without `--jobs`) only when there is no store.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dashmap::DashMap;
use simtree_shared::{NodeStatus, SimKind, TreeMsg};
use tokio::sync::{mpsc, oneshot, watch};

use super::persist::LogBatch;
use super::run::{
    Ended, JobBudget, Outcome, PartBudget, Pending, RunSpec, Running, StoreFault, conclude, end_writes, execute,
    patiently,
};
use super::{Core, LiveState, Progress, RunResult, TreeHandle, WorkbenchError, lock};
use crate::engine::Event;
use crate::llm::BoxFuture;
use crate::llm::budget::{Book, Limits, Refusal, Totals, TreeBudget};
use crate::llm::ledger::{Ledger, RecordSink};
use crate::llm::price::PriceTable;
use crate::llm::record::LlmRecord;
use crate::store::jobs::{self as queue, AbmTakers, BudgetKey, HoldAsk, Job, JobRow, Listener, Queue, Status};
use crate::store::lease::Lease;
use crate::store::{Store, StoreError, Write, now_ms};
use crate::tree::{NodeId, NodeLog, entry_json};

service!(
    /// Runs as queue jobs: the serving process's dispatch loop and a worker's loop.
    Jobs
);

impl Jobs<'_> {
    /// The serving process's dispatch loop ([`Core::dispatch_jobs`]), a task of its own.
    pub(crate) fn dispatch(&self) -> impl std::future::Future<Output = ()> + Send + 'static + use<> {
        Arc::clone(self.0).dispatch_jobs()
    }

    /// Takes jobs and runs them until `stop` resolves ([`Core::work`]).
    pub(crate) fn work<S: std::future::Future<Output = ()> + Send + 'static>(
        &self,
        config: JobsConfig,
        concurrency: usize,
        role: &'static str,
        stop: S,
    ) -> impl std::future::Future<Output = Result<(), JobError>> + Send + 'static + use<S> {
        Arc::clone(self.0).work(config, concurrency, role, stop)
    }
}

/// How the queue is used: the database, how long a claim lasts without a heartbeat, how many
/// times a job is tried, and how many agent-based-model runs this process takes at once (its
/// Mesa pool's workers; 0: none). Its clones share one [`Nearby`]: a server and its own worker
/// are given clones of one config.
#[derive(Debug, Clone)]
pub struct JobsConfig {
    pub(crate) url: String,
    pub(crate) lapse: Duration,
    pub(crate) max_attempts: u64,
    pub(crate) abm_workers: usize,
    pub(crate) nearby: Arc<Nearby>,
}

/// What a serving process and its own worker (one process: `serve` with its worker) tell each
/// other in memory, beside what the database tells every process (the `NOTIFY`s stay, for the
/// other processes and as the fallback): that a job was queued, which wakes the own worker at
/// once, and a job's end once its fenced commit is through, which the waiting run takes
/// instead of reading the node and its log back. The database stays the truth: an end is
/// handed over only after it is committed, and a process that dies loses only what the
/// database then tells the next one, as before.
#[derive(Debug, Default)]
pub(crate) struct Nearby {
    /// A job was queued (committed) by the serving process.
    queued: tokio::sync::Notify,
    /// The serving process's hub, while this process leads with jobs on.
    hub: Mutex<std::sync::Weak<Hub>>,
}

impl Nearby {
    fn hub(&self) -> Option<Arc<Hub>> {
        lock(&self.hub).upgrade()
    }
}

/// The own worker's mark on a job whose end it commits ([`Hub::expect`]): the serving process
/// does not act on the job's `done` notification, and takes the end from [`Self::hand_over`].
/// Dropped without handing over (its commit refused, its task stopped), the mark goes; an end
/// whose notification it kept from the dispatcher is found by the dispatcher's once-a-second
/// look at the queue's ended jobs.
struct Expected {
    hub: Arc<Hub>,
    key: (u64, NodeId),
    handed: bool,
}

impl Expected {
    /// Hands the committed end to the run waiting for it (none: the dispatcher took the end
    /// from the queue already).
    fn hand_over(mut self, end: NearEnd) {
        let (tree, node) = self.key;
        // (The mark stays, for the notification; it is marked handed before it is taken.)
        self.handed = true;
        if let Some((_, w)) = self.hub.waiting.remove(&self.key) {
            tracing::info!(tree, node, "job's end handed over in memory");
            let end = JobEnd { row: JobRow::done(tree, node), progress: w.progress, near: Some(end) };
            let _ = w.done.send(end);
        }
    }
}

impl Drop for Expected {
    fn drop(&mut self) {
        if !self.handed {
            self.hub.nearby_ends.remove(&self.key);
        }
    }
}

/// A done job's end as its worker committed it, handed over in memory ([`Nearby`]).
struct NearEnd {
    row: crate::store::NodeRow,
    /// The node's whole log.
    log: Vec<String>,
}

/// A job's end as the run waiting for it gets it: the job's row, its relayed progress, and the
/// end itself when the own worker handed it over.
struct JobEnd {
    row: JobRow,
    progress: Progress,
    near: Option<NearEnd>,
}

/// How often a waiting process looks at the queue when no notification woke it.
const POLL: Duration = Duration::from_secs(1);

/// The serving process's side: its queue connection and the runs it waits for.
pub(crate) struct Hub {
    config: JobsConfig,
    queue: Arc<Mutex<Queue>>,
    waiting: DashMap<(u64, NodeId), Waiting>,
    /// Runs the last server left to jobs, by tree, with their turns: kept running (not
    /// interrupted) and waited for once the dispatcher starts ([`Core::dispatch_jobs`]).
    adopted: Mutex<HashMap<u64, Vec<(NodeId, u64)>>>,
    /// The agent-based-model runs the processes on the database take at once (read once a
    /// second): while none, ABM runs stay in this process; while other processes take some,
    /// this one needs no Mesa of its own ([`Core::abm_elsewhere`]).
    abm_takers: Mutex<AbmTakers>,
    /// Jobs whose end the own worker is committing or has handed over in memory, with since
    /// when: their `done` notification is left to it ([`Expected`]; a mark left behind goes
    /// after a few seconds, and the once-a-second look at the queue's ended jobs finds any end
    /// the worker did not hand over).
    nearby_ends: DashMap<(u64, NodeId), std::time::Instant>,
}

impl Hub {
    /// The runs still to adopt, as `(tree, node)`.
    pub(super) fn adopting(&self) -> Vec<(u64, NodeId)> {
        lock(&self.adopted).iter().flat_map(|(tree, nodes)| nodes.iter().map(|(node, _)| (*tree, *node))).collect()
    }

    /// The runs this server waits for as jobs, as `(tree, node)`.
    pub(super) fn job_runs(&self) -> HashSet<(u64, NodeId)> {
        self.waiting.iter().map(|w| *w.key()).collect()
    }

    /// Whether another process on the database would take over the queued runs: one that
    /// takes jobs (a worker, another server's own worker), alive. Unknown (the database away)
    /// counts as none.
    pub(super) async fn others_take_jobs(&self) -> bool {
        on_queue(&self.queue, |q| q.others_taking_jobs()).await.is_ok_and(|n| n > 0)
    }

    /// Marks the job of `node` as one whose end this process's own worker is about to commit
    /// and hand over ([`Expected::hand_over`]).
    fn expect(self: &Arc<Self>, tree: u64, node: NodeId) -> Expected {
        self.nearby_ends.insert((tree, node), std::time::Instant::now());
        Expected { hub: self.clone(), key: (tree, node), handed: false }
    }

    /// The nodes of `tree` still to adopt (shown running when the tree is loaded).
    pub(super) fn adopting_in(&self, tree: u64) -> Vec<NodeId> {
        lock(&self.adopted).get(&tree).map(|nodes| nodes.iter().map(|(node, _)| *node).collect()).unwrap_or_default()
    }
}

/// A budget's book in the database ([`Queue::budget_hold`]): a budgeted tree's, or an
/// exploration's own caps within its tree ([`BudgetKey`]), on a process's queue connection: the
/// leader's for the runs it makes itself (`job` none), a worker's for the job it runs.
pub(super) struct QueueBook {
    queue: Arc<Mutex<Queue>>,
    key: BudgetKey,
    job: Option<NodeId>,
    /// What the book read last, shown while the database cannot be read.
    last: Mutex<Totals>,
}

/// Hold ids, unique in this process (a hold is keyed by its process and its id).
static HOLDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl QueueBook {
    pub(super) fn new(queue: Arc<Mutex<Queue>>, key: BudgetKey, job: Option<NodeId>) -> Arc<QueueBook> {
        Arc::new(QueueBook { queue, key, job, last: Mutex::new(Totals::default()) })
    }

    /// Ends hold `id`, waiting out a database restarting (what a call cost is booked once).
    async fn end(&self, id: u64, tokens: u64, money: f64, undo: bool) {
        let key = self.key;
        let ended = patiently("a budget's booking", || {
            on_queue(&self.queue, move |q| q.budget_settle(key, id, tokens, money, undo))
        })
        .await;
        if let Err(e) = ended {
            tracing::warn!(tree = key.tree, part = key.part, hold = id, error = %e, "a call's cost could not be booked; its hold lapses with its claim");
        }
    }
}

impl std::fmt::Debug for QueueBook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueBook").field("key", &self.key).field("job", &self.job).finish()
    }
}

impl Book for QueueBook {
    fn hold(&self, limits: Limits, money: f64, call: bool) -> BoxFuture<'_, Result<u64, Refusal>> {
        Box::pin(async move {
            let (key, job) = (self.key, self.job);
            let id = HOLDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let ask = HoldAsk { id, money, call };
            let held =
                patiently("a budget's hold", || on_queue(&self.queue, move |q| q.budget_hold(key, job, limits, ask)))
                    .await;
            match held {
                Ok(Ok(())) => Ok(id),
                Ok(Err(refusal)) => Err(refusal),
                Err(e) => Err(Refusal::Unreadable(e.to_string())),
            }
        })
    }

    fn settle(&self, id: u64, _held: f64, tokens: u64, money: f64) -> BoxFuture<'_, ()> {
        Box::pin(self.end(id, tokens, money, false))
    }

    fn undo(&self, id: u64, _held: f64, call: bool) -> BoxFuture<'_, ()> {
        Box::pin(self.end(id, 0, 0.0, call))
    }

    fn totals(&self) -> Totals {
        match self.aside(|q, key| q.budget_totals(key)) {
            Ok(t) => {
                *lock(&self.last) = t;
                t
            }
            Err(e) => {
                tracing::warn!(tree = self.key.tree, part = self.key.part, error = %e, "a budget's spending cannot be read now; the last read is shown");
                *lock(&self.last)
            }
        }
    }

    fn carry(&self, tokens: u64, money: f64) {
        if let Err(e) = self.aside(|q, key| q.budget_open(key, tokens, money)) {
            tracing::warn!(tree = self.key.tree, part = self.key.part, error = %e, "what a budget spent before it was booked here cannot be booked now");
        }
    }

    fn part(&self) -> Option<u64> {
        Some(self.key.part)
    }
}

impl QueueBook {
    /// `f` on the queue connection, on a thread of its own: the queue's client blocks on a
    /// runtime of its own, which a caller inside an async task (a request's handler) must not
    /// do on its thread.
    fn aside<R: Send>(
        &self,
        f: impl FnOnce(&mut Queue, BudgetKey) -> Result<R, StoreError> + Send,
    ) -> Result<R, StoreError> {
        std::thread::scope(|s| {
            s.spawn(|| f(&mut lock(&self.queue), self.key))
                .join()
                .unwrap_or_else(|_| Err(StoreError::Io("the budget's reading thread panicked".into())))
        })
    }
}

impl Hub {
    /// A budget of `limits` booked in the database as `key` (runs of the tree on any process
    /// charge it together): a tree's own, or an exploration's.
    pub(super) fn budget(&self, key: BudgetKey, limits: Limits, prices: Arc<PriceTable>) -> TreeBudget {
        TreeBudget::shared(limits, prices, QueueBook::new(self.queue.clone(), key, None))
    }
}

/// A run the server waits for: where its end goes, and its log and progress for relaying.
struct Waiting {
    done: oneshot::Sender<JobEnd>,
    handle: Arc<TreeHandle>,
    log: Arc<NodeLog>,
    progress: Progress,
}

/// Runs `f` on the queue connection off the runtime's threads.
async fn on_queue<R: Send + 'static>(
    queue: &Arc<Mutex<Queue>>,
    f: impl FnOnce(&mut Queue) -> Result<R, StoreError> + Send + 'static,
) -> Result<R, StoreError> {
    let queue = queue.clone();
    tokio::task::spawn_blocking(move || f(&mut lock(&queue)))
        .await
        .map_err(|e| StoreError::Io(format!("the queue's task ended: {e}")))?
}

/// Runs blocking store work off the runtime's threads.
async fn off_runtime<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> Option<R> {
    tokio::task::spawn_blocking(f).await.ok()
}

/// Why the queue could not be used, or a job could not be run (its node then fails with it).
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error("cannot open the job queue: {0}")]
    Open(StoreError),
    #[error("cannot read the jobs the last server left: {0}")]
    Adopt(StoreError),
    #[error("jobs are already enabled")]
    AlreadyEnabled,
    /// The worker's runtime is ending: the job is left for another.
    #[error("the worker is stopping")]
    Stopping,
    #[error("cannot start the job queue's listener: {0}")]
    Listener(std::io::Error),
    #[error("the job's payload is not a run: {0}")]
    Payload(serde_json::Error),
    #[error("this server keeps no store")]
    NoStore,
    #[error("node {node} of tree {tree} is not stored (deleted?)")]
    NotStored { tree: u64, node: NodeId },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Tree(#[from] crate::tree::TreeError),
    #[error(transparent)]
    Workbench(#[from] WorkbenchError),
}

impl StoreFault for JobError {
    fn store_fault(&self) -> Option<&StoreError> {
        match self {
            JobError::Store(e) => Some(e),
            JobError::Workbench(e) => e.store_fault(),
            _ => None,
        }
    }
}

impl Core {
    /// Sends runs through the queue from now on (`serve --jobs`), adopting the runs the last
    /// server left to jobs: those whose node is stored `running` stay running (other processes
    /// still run them, or re-claim them once their claim lapses) and are waited for as if this
    /// server had queued them — their logs relayed, their ends taken, a cancel reaching them.
    /// Every other job left is forgotten (its node ended, or is gone).
    ///
    /// Call it before [`Core::attach_store`], which marks the other runs in flight
    /// `interrupted`: called after it, every run was interrupted already and none is adopted.
    pub(crate) fn enable_jobs(&self, config: JobsConfig) -> Result<(), JobError> {
        let mut q = Queue::connect(&config.url, Lease::this_process(config.lapse), None).map_err(JobError::Open)?;
        if self.store.is_some() {
            tracing::warn!("jobs enabled after the store was attached: no run of the last server is adopted");
        }
        let left = q.adoptable().map_err(JobError::Adopt)?;
        let abm_takers = q.abm_takers().unwrap_or_default();
        let mut adopted: HashMap<u64, Vec<(NodeId, u64)>> = HashMap::new();
        for (tree, node, payload) in &left {
            let turns = serde_json::from_str::<RunSpec>(payload).map_or(0, |r| r.turns);
            adopted.entry(*tree).or_default().push((*node, turns));
        }
        if !left.is_empty() {
            tracing::info!(
                runs = left.len(),
                trees = adopted.len(),
                "runs the last server queued as jobs are adopted (they stay running)"
            );
        }
        let hub = Hub {
            config,
            queue: Arc::new(Mutex::new(q)),
            waiting: DashMap::new(),
            adopted: Mutex::new(adopted),
            abm_takers: Mutex::new(abm_takers),
            nearby_ends: DashMap::new(),
        };
        let hub = Arc::new(hub);
        *lock(&hub.config.nearby.hub) = Arc::downgrade(&hub);
        self.jobs.set(hub).map_err(|_| JobError::AlreadyEnabled)
    }

    /// A budget of `limits` booked as `key` (a tree's own, or an exploration's): with jobs on,
    /// in the database, so that runs of the tree on any process charge it together; in this
    /// process's memory otherwise.
    pub(super) fn booked_budget(&self, key: BudgetKey, limits: Limits) -> TreeBudget {
        match self.jobs.get() {
            Some(hub) if self.store.is_some() => hub.budget(key, limits, self.prices.clone()),
            _ => TreeBudget::new(limits, self.prices.clone()),
        }
    }

    /// Whether a run of `handle`'s tree goes through the queue: jobs are on, the tree is
    /// stored, and the run needs nothing only this process has (a budget charged in its memory:
    /// with jobs on, a tree's and an exploration's are booked in the database) — an
    /// agent-based model's only while some process on the database offers ABM slots. A replay
    /// is a job: its recorded calls travel in its payload. `budget`: the run's own (an
    /// exploration's), charged instead of the tree's. Asked by [`Core::spawn`] alone.
    pub(super) fn goes_to_queue(&self, handle: &TreeHandle, budget: Option<&TreeBudget>) -> bool {
        let Some(hub) = self.jobs.get() else { return false };
        let in_memory = |b: Option<&TreeBudget>| b.is_some_and(|b| !b.is_shared());
        let in_process = in_memory(budget) || in_memory(handle.budget.as_deref());
        let abm_stays = handle.kind == SimKind::Abm && lock(&hub.abm_takers).all == 0;
        !in_process && !abm_stays && handle.stored()
    }

    /// Whether agent-based models run on other processes: jobs are on, with a store, and another
    /// process on the database offers ABM slots. Then a model's runs are jobs for them, and
    /// creating, loading or importing a model's tree needs no Mesa pool here: nothing of a
    /// model runs in this process. (A custom scene's hook source is still checked here, in
    /// this process's sandbox: `check.rs`.)
    pub(super) fn abm_elsewhere(&self) -> bool {
        self.store.is_some() && self.jobs.get().is_some_and(|hub| lock(&hub.abm_takers).others > 0)
    }

    /// Takes over the runs the last server left to jobs ([`Self::enable_jobs`]): each tree
    /// holding one is loaded (its adopted nodes running), and each run is waited for as one
    /// this server queued, announced to the tree's watchers with `run_start`.
    async fn adopt(self: &Arc<Self>, hub: &Arc<Hub>) {
        let trees: Vec<(u64, Vec<(NodeId, u64)>)> = lock(&hub.adopted).iter().map(|(t, n)| (*t, n.clone())).collect();
        for (tree, nodes) in trees {
            let this = self.clone();
            let read = off_runtime(move || {
                let handle = this.tree(tree)?;
                let mut found = Vec::new();
                {
                    let mut t = handle.lock();
                    for (node, turns) in nodes {
                        // (Loaded before enable_jobs' list was read: the node may show interrupted.)
                        if !t.resume_running(node) {
                            continue;
                        }
                        match t.log(node) {
                            Ok(log) => found.push((node, turns, log)),
                            Err(e) => tracing::warn!(tree, node, error = %e, "an adopted run's log cannot be read; it is relayed from its next entries"),
                        }
                    }
                }
                Ok::<_, WorkbenchError>((handle, found))
            })
            .await;
            lock(&hub.adopted).remove(&tree);
            let (handle, found) = match read {
                Some(Ok(read)) => read,
                Some(Err(e)) => {
                    tracing::warn!(tree, error = %e, "a tree with adopted runs cannot be read; their jobs end unseen");
                    continue;
                }
                None => return,
            };
            for (node, turns, log) in found {
                // The turns its log shows done already count.
                let mut progress = Progress::new(node, turns);
                log.for_each(|entry| {
                    if let Ok(e) = serde_json::from_str::<Event>(entry) {
                        let _ = progress.observe(&e);
                    }
                });
                tracing::info!(tree, node, turns, entries = log.len(), "run adopted from the last server");
                drop(wait_for_job(hub.clone(), &handle, node, log, progress, None, handle.register_run(node)));
                handle.send(TreeMsg::RunStart { node });
            }
        }
    }

    /// Carries on every sweep and exploration the last server left running (see
    /// [`Core::continue_sweeps`], [`Core::continue_explores`]): its tree is loaded
    /// and each is carried on.
    async fn carry_on_jobs(self: &Arc<Self>) {
        let Some(store) = self.store.clone() else { return };
        let trees = match off_runtime(move || store.read(|db| db.trees_with_jobs_left())).await {
            Some(Ok(trees)) => trees,
            Some(Err(e)) => {
                tracing::warn!(error = %e, "the sweeps and explorations the last server ran cannot be listed; they are not carried on");
                return;
            }
            None => return,
        };
        for tree in trees {
            let this = self.clone();
            let carried = off_runtime(move || {
                this.tree(tree).map(|handle| {
                    this.continue_sweeps(&handle);
                    this.continue_explores(&handle);
                })
            });
            match carried.await {
                Some(Ok(())) => {}
                Some(Err(e)) => {
                    tracing::warn!(tree, error = %e, "a tree with a running sweep or exploration cannot be read; it is not carried on")
                }
                None => return,
            }
        }
    }

    /// The serving process's loop (`serve --jobs`): wakes on notifications (or once a second),
    /// relays the log rows workers wrote to the running nodes' logs, and hands each ended job
    /// to the run waiting for it.
    pub(crate) async fn dispatch_jobs(self: Arc<Self>) {
        let Some(hub) = self.jobs.get().cloned() else {
            return;
        };
        // Before the first look at ended jobs: an adopted run's end has someone waiting for it.
        self.adopt(&hub).await;
        // Then the sweeps and explorations the last server drove wait for their adopted
        // replicates and run again those cut short.
        self.carry_on_jobs().await;
        let (tx, mut rx) = mpsc::unbounded_channel::<Vec<String>>();
        let url = hub.config.url.clone();
        std::thread::Builder::new().name("simtree-jobs-listen".into()).spawn(move || listen(&url, &tx)).ok();
        let mut tick = tokio::time::interval(POLL);
        loop {
            let mut logs = HashSet::new();
            let mut done = HashSet::new();
            let mut check_ended = false;
            let mut ticked = false;
            // A job queued is the workers' news, not the dispatcher's. A job done says so in
            // its payload: its row need not be read. Only the others (a job failed, given up,
            // cancelled) send it to the queue's ended jobs.
            let mut take = |payloads: Vec<String>, check_ended: &mut bool| {
                for p in payloads {
                    if let Some(key) = p.strip_prefix("log:").and_then(pair) {
                        logs.insert(key);
                    } else if let Some(key) =
                        p.strip_prefix("done:").and_then(|p| p.strip_suffix(":done")).and_then(pair)
                    {
                        done.insert(key);
                    } else {
                        *check_ended |= p != queue::QUEUED;
                    }
                }
            };
            tokio::select! {
                got = rx.recv() => match got {
                    None => tokio::time::sleep(POLL).await,
                    Some(payloads) => take(payloads, &mut check_ended),
                },
                _ = tick.tick() => (check_ended, ticked) = (true, true),
            }
            while let Ok(more) = rx.try_recv() {
                take(more, &mut check_ended);
            }
            for (tree, node) in logs {
                self.relay(&hub, tree, node).await;
            }
            for (tree, node) in done {
                // The own worker hands it over (or did).
                if hub.nearby_ends.remove(&(tree, node)).is_some() {
                    continue;
                }
                match hub.waiting.remove(&(tree, node)) {
                    Some((_, w)) => {
                        let end = JobEnd { row: JobRow::done(tree, node), progress: w.progress, near: None };
                        let _ = w.done.send(end);
                    }
                    // Nobody waits: the queue's ended jobs forget it.
                    None => check_ended = true,
                }
            }
            if ticked {
                // (What the processes offer changes rarely: read once a second, off a run's path.)
                if let Ok(n) = on_queue(&hub.queue, |q| q.abm_takers()).await {
                    *lock(&hub.abm_takers) = n;
                }
                hub.nearby_ends.retain(|_, at| at.elapsed() < Duration::from_secs(10));
            }
            if check_ended {
                match on_queue(&hub.queue, |q| q.ended()).await {
                    Ok(rows) => {
                        for row in rows {
                            let key = (row.tree, row.node);
                            match hub.waiting.remove(&key) {
                                Some((_, w)) => {
                                    let end = JobEnd { row, progress: w.progress, near: None };
                                    let _ = w.done.send(end);
                                }
                                // Nobody waits: a job of a node deleted meanwhile.
                                None => {
                                    let _ = on_queue(&hub.queue, move |q| q.forget(key.0, key.1)).await;
                                }
                            }
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "the job queue cannot be read now"),
                }
            }
        }
    }

    /// Takes the log rows of a running job's node that its log does not have yet.
    async fn relay(&self, hub: &Hub, tree: u64, node: NodeId) {
        let Some(store) = self.store.clone() else { return };
        let Some(have) = hub.waiting.get(&(tree, node)).map(|w| w.log.len()) else {
            return;
        };
        let from = have as u64;
        let rows = off_runtime(move || store.read(move |db| db.log_from(tree, node, from))).await;
        let Some(Ok(rows)) = rows else { return };
        let Some(mut w) = hub.waiting.get_mut(&(tree, node)) else {
            return;
        };
        let w = &mut *w;
        push_new(&EndLog::Stored(rows), have, &w.log, |entry| {
            if let Ok(e) = serde_json::from_str::<Event>(entry)
                && let Some(msg) = w.progress.observe(&e)
            {
                w.handle.send(msg);
            }
        });
    }

    /// Makes this workbench one that runs jobs for others (`simtree worker`): it reads trees
    /// from `store` as they are when a job names them, and writes nothing but its jobs' nodes.
    pub(crate) fn attach_store_for_jobs(&mut self, store: Store) -> Result<(), StoreError> {
        let store = Arc::new(store);
        self.library = super::library::Library::open(store.clone(), self.limits.max_body_bytes)?;
        self.store = Some(store);
        self.runs_jobs_only = true;
        self.load_datasets()
    }

    /// Takes jobs and runs them, `concurrency` at a time, until `stop` resolves; then hands its
    /// claims back (queued again, the attempt not counted). `role` names the process in the
    /// `workers` table (`worker`, or `serve` for a server's own worker).
    pub(crate) async fn work(
        self: Arc<Self>,
        config: JobsConfig,
        concurrency: usize,
        role: &'static str,
        stop: impl std::future::Future<Output = ()>,
    ) -> Result<(), JobError> {
        // A process without Python offers no ABM slots (a run it took would only fail).
        let abm = match config.abm_workers {
            0 => 0,
            _ if !crate::abm::venv::python_available() => {
                tracing::warn!("no python3 here: this process takes no agent-based-model runs");
                0
            }
            n => n,
        };
        self.abm_pool_size.store(abm.max(1), std::sync::atomic::Ordering::SeqCst);
        let me = Lease::this_process(config.lapse);
        let url = config.url.clone();
        let role = role.to_string();
        // (A server's own worker leaves agent-based models to the workers when there are any.)
        let abm_second = role != "worker";
        let q = off_runtime(move || {
            let mut q = Queue::connect(&url, me, Some(&role))?;
            q.offer_abm(abm as u64)?;
            Ok(q)
        })
        .await
        .ok_or(JobError::Stopping)?
        .map_err(JobError::Open)?;
        tracing::info!(holder = %q.me.holder, concurrency, abm, "taking jobs");
        let queue = Arc::new(Mutex::new(q));
        let (tx, mut wake) = mpsc::unbounded_channel::<Vec<String>>();
        let url = config.url.clone();
        std::thread::Builder::new()
            .name("simtree-jobs-listen".into())
            .spawn(move || listen(&url, &tx))
            .map_err(JobError::Listener)?;
        let (ended_tx, mut ended) = mpsc::unbounded_channel::<(u64, NodeId)>();
        let mut running: HashMap<(u64, NodeId), Claimed> = HashMap::new();
        let mut heartbeat = tokio::time::interval((config.lapse / 6).max(Duration::from_millis(200)));
        let notifier = self.log_notifier();
        // The trees jobs read stay a cache within --cache-mb, as a server's do.
        let sweeper = tokio::spawn(self.clone().sweep_cache());
        let concurrency = concurrency.max(1);
        let nearby = config.nearby.clone();
        tokio::pin!(stop);
        let mut claim_now = true;
        loop {
            let running_abm = running.values().filter(|c| c.abm).count();
            let slots = queue::Slots {
                runs: concurrency.saturating_sub(running.len() - running_abm) as u64,
                abm: abm.saturating_sub(running_abm) as u64,
                abm_second,
            };
            if claim_now && (slots.runs > 0 || slots.abm > 0) {
                match on_queue(&queue, move |q| q.claim_slots(slots)).await {
                    Ok(jobs) => {
                        for job in jobs {
                            let key = (job.tree, job.node);
                            if running.contains_key(&key) {
                                // Its own claim, taken again after its heartbeat came late (a
                                // busy machine): the run under way goes on, and its claim is
                                // still this worker's.
                                tracing::info!(
                                    tree = key.0,
                                    node = key.1,
                                    "a job this worker runs was claimed again after a late heartbeat; its run goes on"
                                );
                                continue;
                            }
                            let abm = job.kind == queue::ABM;
                            let this = self.clone();
                            let (queue, ended_tx, notifier) = (queue.clone(), ended_tx.clone(), notifier.clone());
                            let nearby = nearby.clone();
                            let (lost_tx, lost) = watch::channel(false);
                            let task = tokio::spawn(async move {
                                this.run_job(&queue, job, &notifier, &nearby, lost).await;
                                let _ = ended_tx.send(key);
                            });
                            running.insert(key, Claimed { abort: task.abort_handle(), lost: lost_tx, abm });
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "cannot claim jobs now"),
                }
            }
            claim_now = false;
            tokio::select! {
                _ = &mut stop => break,
                () = nearby.queued.notified() => claim_now = true,
                got = wake.recv() => {
                    // Claim on a queued job, and after each quiet second (the poll).
                    claim_now = got.as_ref().is_none_or(|p| p.is_empty() || p.iter().any(|p| !p.starts_with("log:") && !p.starts_with("done:")));
                    if got.is_none() {
                        tokio::time::sleep(POLL).await;
                    }
                }
                Some(key) = ended.recv() => {
                    running.remove(&key);
                    claim_now = true;
                }
                _ = heartbeat.tick() => {
                    match on_queue(&queue, |q| q.heartbeat()).await {
                        Ok(held) => {
                            let held: HashSet<_> = held.into_iter().collect();
                            // Each run decides for itself (see `run_job`): one whose end is being
                            // committed is not held any more once that commit is through, and is
                            // not to be stopped.
                            for (key, claimed) in &running {
                                if !held.contains(key) {
                                    claimed.lost.send_replace(true);
                                }
                            }
                        }
                        Err(e) => tracing::warn!(error = %e, "cannot renew the claims now"),
                    }
                }
            }
        }
        sweeper.abort();
        for claimed in running.values() {
            claimed.abort.abort();
        }
        let handed = on_queue(&queue, |q| q.release()).await;
        let _ = on_queue(&queue, |q| q.unregister()).await;
        match handed {
            Ok(n) => tracing::info!(jobs = n, "stopped: claims handed back"),
            Err(e) => tracing::warn!(error = %e, "stopped; the claims lapse by themselves"),
        }
        Ok(())
    }

    /// Where a worker's log batches are announced: `NOTIFY simtree_log` once they are committed
    /// (the store runs it after the writes queued before it), coalesced per node.
    fn log_notifier(&self) -> mpsc::UnboundedSender<(u64, NodeId)> {
        let (tx, mut rx) = mpsc::unbounded_channel::<(u64, NodeId)>();
        if let Some(store) = self.store.clone() {
            tokio::spawn(async move {
                while let Some(first) = rx.recv().await {
                    let mut keys = HashSet::from([first]);
                    while let Ok(k) = rx.try_recv() {
                        keys.insert(k);
                    }
                    let store = store.clone();
                    off_runtime(move || {
                        for (tree, node) in keys {
                            let payload = format!("{tree}:{node}");
                            let _ = store.read(move |db| db.notify(queue::LOG_CHANNEL, &payload));
                        }
                    })
                    .await;
                }
            });
        }
        tx
    }

    /// One claimed job, run to its end and stored, fenced by the claim. `lost` turns true when
    /// a heartbeat found the claim gone (cancelled, or taken over after a lapse): the run stops
    /// then if it is still computing. Once it is storing its end, the fence decides instead —
    /// a heartbeat that runs just after that end's commit also finds the claim gone (the job is
    /// done), and stopping the task there lost its "job done" and its copy of the node.
    async fn run_job(
        self: &Arc<Self>,
        queue: &Arc<Mutex<Queue>>,
        job: Job,
        notifier: &mpsc::UnboundedSender<(u64, NodeId)>,
        nearby: &Nearby,
        mut lost: watch::Receiver<bool>,
    ) {
        let (tree, node) = (job.tree, job.node);
        tracing::info!(tree, node, attempt = job.attempts, "job claimed");
        // The serving process in this one waits for the job: its end is handed over in memory.
        let leader = nearby.hub();
        let computed = tokio::select! {
            end = self.compute(&job, queue, notifier, leader.is_some(), lost.clone()) => Some(end),
            Ok(_) = lost.wait_for(|l| *l) => None,
        };
        let Some(computed) = computed else {
            tracing::warn!(
                tree,
                node,
                "this worker lost its job (cancelled, or taken over after a lapse); its run stops"
            );
            return;
        };
        let end = match computed {
            Ok(end) => end,
            // What the run could not even start with (a tree or parent that cannot be read):
            // its node fails with the reason.
            Err(cause) => End {
                status: NodeStatus::Failed,
                error: Some(cause.to_string()),
                writes: Vec::new(),
                anew: false,
                keep: None,
                log: Vec::new(),
            },
        };
        // Log rows queued on the store before are committed first: the server reads the whole
        // log once it hears the job ended.
        if let Some(store) = &self.store {
            let _ = store.flush_async().await;
        }
        let End { status, error, writes, anew, keep, log } = end;
        let job_status = if status == NodeStatus::Done { Status::Done } else { Status::Failed };
        let end = Arc::new((writes, error));
        // The serving process leaves the end's notification to this worker, which hands the
        // end over once it is committed (a done run's only: the others are read).
        let mut near = leader.as_ref().filter(|_| keep.is_some()).map(|hub| hub.expect(tree, node));
        loop {
            let e = end.clone();
            let finished = on_queue(queue, move |q| q.end(tree, node, job_status, e.1.as_deref(), anew, &e.0)).await;
            let Err(e) = finished else {
                tracing::info!(tree, node, status = ?status, "job done");
                // Only what is stored enters this worker's copy (a refused end never does), and
                // the serving process's tree.
                if let Some((row, sim)) = keep {
                    if let Some(near) = near.take() {
                        near.hand_over(NearEnd { row: row.clone(), log });
                    }
                    if let Some(h) = self.trees.open(tree) {
                        h.lock().insert_finished(row, sim);
                    }
                }
                return;
            };
            tracing::warn!(tree, node, error = %e, "job result not stored");
            // A database that is away (restarting, cut off) is waited for while the claim is
            // still this worker's: its heartbeats keep the claim, so a result given up here
            // would leave the job claimed by nobody running it. A claim lost or a job gone
            // refuses for good.
            tokio::time::sleep(POLL).await;
            // (A database still away answers neither: try again.)
            if let Ok(false) = on_queue(queue, move |q| q.holds(tree, node)).await {
                return;
            }
        }
    }

    /// The run of a job: the parent's state from the store, the turns, and the writes that
    /// store the node's end.
    async fn compute(
        self: &Arc<Self>,
        job: &Job,
        queue: &Arc<Mutex<Queue>>,
        notifier: &mpsc::UnboundedSender<(u64, NodeId)>,
        keep_log: bool,
        mut lost: watch::Receiver<bool>,
    ) -> Result<End, JobError> {
        let (tree, id) = (job.tree, job.node);
        let run: RunSpec = serde_json::from_str(&job.payload).map_err(JobError::Payload)?;
        if self.store.is_none() {
            return Err(JobError::NoStore);
        }
        // (Reads before the run starts wait out a database restarting, as its end's write does.)
        let read = patiently("a job's tree", || {
            let this = self.clone();
            async move {
                off_runtime(move || this.fresh_tree(tree, run.parent))
                    .await
                    .ok_or(JobError::Stopping)?
                    .map_err(JobError::from)
            }
        });
        let handle = read.await?;
        // (The claim read the attached node with the job.)
        let attached = job.attached.clone().ok_or(JobError::NotStored { tree, node: id })?;
        let mut sim = {
            let parent = handle.lock().sim(run.parent)?;
            run.start_sim(tree, &parent)
        };
        // What an earlier attempt recorded is answered from its recording (not paid again);
        // each new call is recorded as it returns, before its answer is used.
        // (A first attempt has none: no read.)
        let recorded = match job.attempts {
            0 | 1 => Vec::new(),
            _ => patiently("a job's recorded calls", || on_queue(queue, move |q| q.recorded_calls(tree, id))).await?,
        };
        let earlier =
            recorded.iter().filter_map(|body| serde_json::from_str::<LlmRecord>(body).ok()).collect::<Vec<_>>();
        if !earlier.is_empty() {
            tracing::info!(tree, node = id, calls = earlier.len(), "replaying the calls an earlier attempt recorded");
        }
        let recorder = queue.clone();
        let sink: RecordSink = Arc::new(move |record: LlmRecord| {
            let queue = recorder.clone();
            Box::pin(async move {
                let body = serde_json::to_string(&record).unwrap_or_default();
                if let Err(e) = on_queue(&queue, move |q| q.record_call(tree, id, &body)).await {
                    tracing::warn!(tree, node = id, error = %e, "a call could not be recorded (a re-run would pay it again)");
                }
            })
        });
        let ledger = Arc::new(Ledger::resuming(earlier, Some(sink)));
        // A replay answers from the records its payload carries, never from a provider.
        // The tree's budget is charged in the database's book, at the serving process's prices.
        let budget = run.budget.clone().and_then(|b| {
            let b = *b;
            let prices = Arc::new(b.prices);
            let book = |part| QueueBook::new(queue.clone(), BudgetKey { tree, part }, Some(id));
            let tree_budget =
                (!b.limits.is_empty()).then(|| Arc::new(TreeBudget::shared(b.limits, prices.clone(), book(0))));
            match b.part {
                // An exploration's replicate: its caps, within the tree's.
                Some(p) => Some(Arc::new(TreeBudget::shared(p.limits, prices, book(p.part)).inside(tree_budget))),
                None => tree_budget,
            }
        });
        let (ctx, ledger) = match self.client_with(&handle, run.replay.clone(), &sim, id, budget, ledger.clone()) {
            Ok((ctx, ledger)) => (Ok(ctx), ledger),
            Err(e) => (Err(e), ledger),
        };
        let marks = sim.memory_marks();
        let mut batch = LogBatch::new(id);
        // A job run again stores its whole log at its end (see `Queue::end`).
        let anew = job.attempts > 1;
        let mut all: Vec<String> = Vec::new();
        let mut index = 0usize;
        let mut sink = super::run::sink(
            |e: Event| {
                let entry = entry_json(&e, id);
                batch.push(&handle, index, &entry);
                if anew || keep_log {
                    all.push(entry);
                }
                index += 1;
                if batch.is_empty() {
                    let _ = notifier.send((tree, id));
                }
            },
            LiveState::default(),
        );
        // A lost claim stops the run from `run_job`; here it stops a hook call in progress, which
        // holds the run's thread (whatever this end then says, the claim's fence refuses it).
        let stop = async move {
            if lost.wait_for(|l| *l).await.is_err() {
                std::future::pending::<()>().await;
            }
            (NodeStatus::Cancelled, None)
        };
        let outcome = execute(&mut sim, run.turns, &ctx, &mut sink, stop).await;
        drop(sink);
        let rest = batch.take(tree);
        let mut writes: Vec<Write> = match anew {
            true => Write::whole_log(tree, id, &all).into_iter().collect(),
            false => rest.into_iter().collect(),
        };
        let (status, error) = outcome.status();
        let ran = !matches!(outcome, Outcome::Panicked);
        if ran {
            writes.extend(end_writes(tree, id, &sim, &marks)?.0);
        }
        let mut row = attached;
        row.status = status;
        row.error = error.clone();
        row.finished = Some(now_ms());
        row.turns = if ran { sim.turns() } else { row.turns };
        row.records = ledger.take();
        let keep = (status == NodeStatus::Done && ran).then(|| (row.clone(), Arc::new(sim)));
        writes.push(Write::Node { tree, row });
        Ok(End { status, error, writes, anew, keep, log: all })
    }

    /// Tree `tree` as the store has it now, with `parent` finished (a worker's copy of a tree
    /// is read again when it lacks the parent or holds it unfinished).
    fn fresh_tree(&self, tree: u64, parent: NodeId) -> Result<Arc<TreeHandle>, WorkbenchError> {
        if let Some(h) = self.trees.open(tree)
            && h.lock().node(parent).is_ok_and(|n| !n.status.is_running())
        {
            return Ok(h);
        }
        let store = self.store.clone().ok_or(WorkbenchError::TreeNotFound)?;
        let row = store
            .read(move |db| Ok(db.trees()?.into_iter().find(|r| r.id == tree)))?
            .ok_or(WorkbenchError::TreeNotFound)?;
        // Replaced in one step: a request in between finds the old copy or the stored row.
        self.trees.insert_stored(row);
        self.tree(tree)
    }
}

/// A run through the queue ([`Core::spawn`]): the run is its job, queued in the write batch
/// after its node's record, and run by whichever process claims it.
pub(super) fn spawn_job(
    hub: Arc<Hub>,
    handle: &Arc<TreeHandle>,
    p: Pending,
    running: Running,
) -> tokio::task::JoinHandle<RunResult> {
    let Pending { id, log, mut spec, budget } = p;
    // (An exploration's budget is within its tree's, at the same prices.)
    let part = budget.as_ref().and_then(|b| Some(PartBudget { part: b.part()?, limits: b.limits() }));
    spec.budget = budget.as_ref().or(handle.budget.as_ref()).map(|b| {
        Box::new(JobBudget {
            limits: handle.budget.as_ref().map(|t| t.limits()).unwrap_or_default(),
            prices: PriceTable::clone(b.prices()),
            part,
        })
    });
    let payload = serde_json::to_string(&spec).unwrap_or_default();
    tracing::info!(tree = handle.id, node = id, turns = spec.turns, "run queued as a job");
    let kind = match handle.kind {
        SimKind::Abm => queue::ABM,
        _ => "run",
    };
    let job =
        Write::Job { tree: handle.id, node: id, kind: kind.into(), payload, max_attempts: hub.config.max_attempts };
    wait_for_job(hub, handle, id, log, Progress::new(id, spec.turns), Some(job), running)
}

/// Waits for the job of running node `id`, as [`Core::spawn`] waits for a run in this
/// process: registered for the dispatcher (its log relayed, its end handed over) and as a run of
/// the tree (a cancel reaches it), its end taken into the tree and announced (`run_finish`).
/// `job` queues it (a new run; stored before it is waited for); `None`: it is queued already
/// (a run adopted from the last server).
fn wait_for_job(
    hub: Arc<Hub>,
    handle: &Arc<TreeHandle>,
    id: NodeId,
    log: Arc<NodeLog>,
    progress: Progress,
    job: Option<Write>,
    running: Running,
) -> tokio::task::JoinHandle<RunResult> {
    let tree = handle.id;
    let turns = progress.total;
    let (done_tx, mut done) = oneshot::channel();
    hub.waiting.insert((tree, id), Waiting { done: done_tx, handle: handle.clone(), log: log.clone(), progress });
    if let Some(job) = job {
        handle.persist(job);
    }
    let handle = handle.clone();
    tokio::spawn(async move {
        let started = std::time::Instant::now();
        let mut cancelled = running.cancelled.clone();
        // The job is stored before anyone is told the run started for good.
        let queued = patiently("a job's queueing", || handle.flush_async());
        let ended_as = match queued.await {
            Err(e) => Err(e.to_string()),
            Ok(()) => {
                // (This process's own worker hears it before the database's notification.)
                hub.config.nearby.queued.notify_one();
                let ended = tokio::select! {
                    row = &mut done => Some(row.ok()),
                    // (A sender gone is no cancel: only a sent `true` is.)
                    Ok(_) = cancelled.wait_for(|c| *c) => None,
                };
                match ended {
                    Some(row) => Ok(row),
                    None => match on_queue(&hub.queue, move |q| q.cancel(tree, id)).await {
                        // It ended meanwhile: its end is on its way.
                        Ok(false) => Ok(done.await.ok()),
                        _ => Ok(None),
                    },
                }
            }
        };
        let left = hub.waiting.remove(&(tree, id)).map(|(_, w)| w.progress);
        let queued = ended_as.is_ok();
        let ended = match ended_as {
            // Not even its job could be stored: the node is not acknowledged.
            Err(cause) => Ended {
                status: NodeStatus::Failed,
                error: Some(cause.clone()),
                present: true,
                unstored: Some(cause),
                durable: false,
            },
            Ok(ended) => {
                let (row, progress, near) = match ended {
                    Some(end) => (Some(end.row), end.progress, end.near),
                    None => (None, left.unwrap_or_else(|| Progress::new(id, turns)), None),
                };
                take_end(&hub.queue, &handle, id, (row, near), &log, progress).await
            }
        };
        let result = conclude(&handle, id, ended, running, started).await;
        if queued {
            // (Off the reply's path: the node shows its end already.)
            tokio::spawn(async move { on_queue(&hub.queue, move |q| q.forget(tree, id)).await });
        }
        result
    })
}

/// A job a worker runs: how to stop its task (the worker stops), and how to tell it that its
/// claim was lost.
struct Claimed {
    abort: tokio::task::AbortHandle,
    lost: watch::Sender<bool>,
    /// It runs an agent-based model (it holds one of the ABM slots, not a run slot).
    abm: bool,
}

/// A job's run, ended: how, and what stores it.
struct End {
    status: NodeStatus,
    error: Option<String>,
    writes: Vec<Write>,
    /// A job run again: the log rows of earlier attempts are replaced (`writes` hold it whole).
    anew: bool,
    /// The finished node and its simulator, for this worker's copy of the tree once the end is
    /// stored: the next step of a chain then starts from it instead of reading the tree again.
    keep: Option<(crate::store::NodeRow, Arc<crate::sim::Sim>)>,
    /// The node's whole log, kept when the serving process in this one waits for it (or the
    /// job was run again); else empty.
    log: Vec<String>,
}

/// Takes a job's end into the serving process's tree: the node's stored record (the state stays
/// in the store until used) — as the own worker handed it over, or read — or a failure when the
/// job was given up or cancelled. [`conclude`] stores and announces it.
async fn take_end(
    queue: &Arc<Mutex<Queue>>,
    handle: &Arc<TreeHandle>,
    id: NodeId,
    (row, near): (Option<JobRow>, Option<NearEnd>),
    log: &Arc<NodeLog>,
    mut progress: Progress,
) -> Ended {
    let tree = handle.id;
    let read = match (&row, near) {
        (Some(_), Some(near)) => Some(Ok((Some(near.row), EndLog::Kept(near.log)))),
        (Some(r), None) if matches!(r.status, Status::Done | Status::Failed) && handle.stored() => {
            // (A database restarting is waited out: the worker stored the end already. Read on
            // the queue's connection: the store's thread would commit what it has queued first.)
            let read = || on_queue(queue, move |q| q.node_end(tree, id));
            let read = patiently("a job's end", read).await;
            Some(read.map(|(node, rows)| (node, EndLog::Stored(rows))))
        }
        _ => None,
    };
    // `durable`: the node's end is in the store already (the worker committed it with the
    // job's end), so the tree's touch written beside it is not waited for (it is kept and
    // retried); otherwise the end is written here and, unstored, is not acknowledged.
    let (status, error, present, durable) = {
        let mut t = handle.lock();
        match read {
            // (A record still `running`: the worker could not even start the run, and wrote
            // only the job's error.)
            Some(Ok((Some(stored), logs))) if !stored.status.is_running() => {
                // (Entries not relayed yet: a short run may end before its first batch is.)
                push_new(&logs, log.len(), log, |entry| {
                    if let Ok(e) = serde_json::from_str::<Event>(entry)
                        && let Some(msg) = progress.observe(&e)
                    {
                        handle.send(msg);
                    }
                });
                let present = t.finish_stored(&stored);
                (stored.status, stored.error, present, true)
            }
            other => {
                // Given up (dead), cancelled, or its record could not be read: the node fails
                // (or is cancelled) with its parent's state, as a run that stopped early.
                let (status, error) = match (&row, other) {
                    (Some(r), _) if r.cancelled() => (NodeStatus::Cancelled, None),
                    (None, _) => (NodeStatus::Cancelled, None),
                    (Some(r), Some(Err(e))) => (
                        NodeStatus::Failed,
                        Some(format!("its job ended ({}) but its node could not be read: {e}", r.status.as_str())),
                    ),
                    (Some(r), _) => {
                        (NodeStatus::Failed, Some(r.error.clone().unwrap_or_else(|| "the job was given up".into())))
                    }
                };
                let present = t.end_without_sim(id, status, error.clone());
                if present {
                    // Its state is its parent's, stored as its own (a cancelled node's is read
                    // back from the store like any other).
                    let stored =
                        t.sim(id).map_err(WorkbenchError::from).and_then(|sim| handle.persist_state(&mut t, id, &sim));
                    if let Err(e) = stored {
                        tracing::warn!(tree, node = id, error = %e, "the state of a stopped job's node was not stored");
                    }
                    handle.persist_row(&t, id);
                }
                (status, error, present, false)
            }
        }
    };
    if present {
        handle.touch(&handle.lock());
    }
    Ended { status, error, present, unstored: None, durable }
}

/// A node's log entries as a job's end gives them: stored rows read back, or the whole log
/// kept by the own worker that ran it.
enum EndLog {
    Stored(Vec<crate::store::LogRow>),
    Kept(Vec<String>),
}

impl EndLog {
    /// Each entry with its index, in order (of stored rows, up to the first damaged one).
    fn each(&self, mut f: impl FnMut(usize, &str)) {
        match self {
            EndLog::Stored(rows) => {
                for r in rows {
                    let Ok(entries) = r.verified() else { return };
                    entries.enumerate().for_each(|(k, entry)| f(r.index as usize + k, entry));
                }
            }
            EndLog::Kept(entries) => entries.iter().enumerate().for_each(|(k, entry)| f(k, entry)),
        }
    }
}

/// Pushes to `log` the entries of `from` from index `have` on, calling `each` with each.
fn push_new(from: &EndLog, have: usize, log: &NodeLog, mut each: impl FnMut(&str)) {
    from.each(|at, entry| {
        if at == log.len() && at >= have {
            log.push(entry);
            each(entry);
        }
    });
}

/// `<tree>:<node>`.
fn pair(s: &str) -> Option<(u64, NodeId)> {
    let (t, n) = s.split_once(':')?;
    Some((t.parse().ok()?, n.parse().ok()?))
}

/// Forwards the queue's notifications to `tx` (an empty list after each quiet second), on a
/// thread of its own, until `tx`'s receiver is gone.
fn listen(url: &str, tx: &mpsc::UnboundedSender<Vec<String>>) {
    let mut listener = loop {
        match Listener::connect(url) {
            Ok(l) => break l,
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for jobs yet");
                if tx.send(Vec::new()).is_err() {
                    return;
                }
                std::thread::sleep(POLL);
            }
        }
    };
    while tx.send(listener.wait(POLL)).is_ok() {}
}
