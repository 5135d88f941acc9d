//! One run path (issue 40, item 1): a run is described once ([`RunSpec`], with the node it
//! makes in a [`Pending`]), its simulator is made from its parent's in one place
//! ([`RunSpec::start_sim`]), its turns are run by one function ([`execute`]) in this process or
//! on whichever process claims its job, what stores its end is made by one function
//! ([`end_writes`]), and its end is taken into the tree, announced and waited for by one
//! function ([`conclude`]). Which runs go through the queue is decided once, in
//! `Core::spawn`.
//!
//! The sweep's and the exploration's bookkeeping of a replicate (`job::replicate_of`) reads the
//! [`RunResult`] every run ends with, wherever it ran.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use simtree_shared::{NodeStatus, TreeMsg};
use tokio::sync::watch;

use super::{
    CatchUnwind, Core, LiveState, Progress, RunControl, RunResult, RunSink, TreeHandle, WorkbenchError, lock, persist,
};
use crate::abm::worker::CancelToken;
use crate::backend::BackendError;
use crate::engine::Event;
use crate::llm::budget::{Limits, TreeBudget};
use crate::llm::ledger::Ledger;
use crate::llm::price::PriceTable;
use crate::llm::record::LlmRecord;
use crate::sim::{RunCtx, Sim};
use crate::store::{StoreError, StoreResult, Write, encode_state};
use crate::tree::{NodeId, NodeLog, entry_json};

/// What a run is: the node it starts from, its turns, its seeds, and the recorded calls a replay
/// answers from. It is also a run's job payload (the field names are those jobs were queued with
/// before, so a queue left by an earlier version is read as it was).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct RunSpec {
    pub(crate) parent: NodeId,
    pub(crate) turns: u64,
    /// The index whose seed the child takes in a fan-out with its own seeds ([`Sim::replicate`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) replicate: Option<u64>,
    /// The seed a sweep's or an exploration's replicate runs with ([`Sim::reseed`]), applied
    /// after `replicate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reseed: Option<u64>,
    /// The recorded calls a replay answers from, strictly: it makes no provider call wherever
    /// it runs (`None`: calls go to the backend, recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) replay: Option<Vec<LlmRecord>>,
    /// The tree's budget, when it has one: its caps and the prices its money is counted at. The
    /// run charges it in the database's book wherever it runs (jobs of earlier versions have
    /// none: their trees had no budget).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) budget: Option<Box<JobBudget>>,
    /// How many runs of one fan-out start from `parent` with this one (jobs of earlier versions
    /// have none: their runs never share an explicitly cached prefix).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) fan_out: Option<u64>,
}

/// A tree's budget as a job carries it: the tree's caps (none when only an exploration of it
/// has a budget), the prices, and the exploration's own caps when the run is one of its
/// replicates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct JobBudget {
    pub(crate) limits: Limits,
    pub(crate) prices: PriceTable,
    /// The exploration's caps, booked as part `part` of the tree's budget, within the tree's
    /// (jobs of earlier versions have none: an exploration's budget kept its runs on the leader).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) part: Option<PartBudget>,
}

/// An exploration's own caps as a job carries them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct PartBudget {
    pub(crate) part: u64,
    pub(crate) limits: Limits,
}

impl RunSpec {
    /// The simulator the run starts from: its parent's `parent_sim`, forked (keyed by the tree
    /// and the parent) and given the run's seeds.
    pub(super) fn start_sim(&self, tree: u64, parent_sim: &Sim) -> Sim {
        let mut sim = parent_sim.fork_child(tree, self.parent);
        if let Some(i) = self.replicate {
            sim.replicate(i);
        }
        if let Some(seed) = self.reseed {
            sim.reseed(seed);
        }
        if let Some(n) = self.fan_out {
            sim.set_fan_out(n);
        }
        sim
    }
}

/// A run attached to its tree (its node `running`) and not started yet.
pub(super) struct Pending {
    pub(crate) id: NodeId,
    pub(crate) log: Arc<NodeLog>,
    pub(crate) spec: RunSpec,
    /// The budget the run charges instead of the tree's (an exploration's, within the tree's).
    pub(crate) budget: Option<Arc<TreeBudget>>,
}

impl Pending {
    /// A run of `turns` turns from `parent` making node `id`, with no seeds or budget of its
    /// own yet.
    pub(super) fn new(
        id: NodeId,
        parent: NodeId,
        log: Arc<NodeLog>,
        turns: u64,
        replay: Option<Vec<LlmRecord>>,
    ) -> Self {
        Pending {
            id,
            log,
            spec: RunSpec { parent, turns, replicate: None, reseed: None, replay, budget: None, fan_out: None },
            budget: None,
        }
    }

    /// Gives the run `seed` (a sweep's or an exploration's replicate).
    pub(super) fn reseed(&mut self, seed: u64) {
        self.spec.reseed = Some(seed);
    }
}

/// How a run's simulation ended.
pub(super) enum Outcome {
    /// It ran its turns, or stopped on an error (the message).
    Ran(Option<String>),
    /// Stopped from outside (a cancel, the memory budget): the node's status and error.
    Stopped(NodeStatus, Option<String>),
    /// The simulator panicked: the node fails and keeps its parent's state.
    Panicked,
}

impl Outcome {
    pub(super) fn status(&self) -> (NodeStatus, Option<String>) {
        match self {
            Outcome::Ran(None) => (NodeStatus::Done, None),
            Outcome::Ran(Some(e)) => (NodeStatus::Failed, Some(e.clone())),
            Outcome::Stopped(status, error) => (*status, error.clone()),
            Outcome::Panicked => {
                (NodeStatus::Failed, Some("the run stopped on an internal error (its state is the parent's)".into()))
            }
        }
    }
}

/// Runs a run's turns on `sim`, each event to `emit`, until they are done or `stop` resolves
/// (with the status and error the node then ends with). `ctx` is what the run talks to, or why
/// there is nothing to talk to (the run then fails with it). The one executor of runs, in the
/// serving process and on workers alike.
///
/// `stop` is awaited on a task of its own: a custom scene's Python hook blocks the run's thread
/// while its worker answers, so the run cannot hear a stop meanwhile. The stop's task cancels the
/// run's [`CancelToken`] instead, which kills the hook's worker process within
/// [`crate::abm::worker::CANCEL_POLL`]; the run then ends as `stop` says, not as the failed hook.
pub(super) async fn execute<F: FnMut(Event) + Send>(
    sim: &mut Sim,
    turns: u64,
    ctx: &Result<RunCtx, BackendError>,
    sink: &mut RunSink<F>,
    stop: impl Future<Output = (NodeStatus, Option<String>)> + Send + 'static,
) -> Outcome {
    let ctx = match ctx {
        Err(e) => return Outcome::Ran(Some(e.to_string())),
        Ok(ctx) => ctx,
    };
    let cancel = CancelToken::new();
    let stopper = AbortOnDrop(tokio::spawn({
        let cancel = cancel.clone();
        async move {
            let stopped = stop.await;
            cancel.cancel();
            stopped
        }
    }));
    let run = CatchUnwind(Box::pin(sim.run_cancellable(turns, ctx, sink, &cancel)));
    let mut stopper = stopper;
    let ran = tokio::select! {
        Ok((status, error)) = &mut stopper.0 => return Outcome::Stopped(status, error),
        r = run => r,
    };
    // A stop that came while a hook call held the run's thread ended the run (its hook failed
    // as cancelled): the node ends as the stop says.
    if cancel.is_cancelled()
        && let Ok((status, error)) = (&mut stopper.0).await
    {
        return Outcome::Stopped(status, error);
    }
    match ran {
        Ok(result) => Outcome::Ran(result.err().map(String::from)),
        Err(()) => Outcome::Panicked,
    }
}

/// A task aborted when its handle is dropped (a run's stop, once the run is over).
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The sink every run emits into: each event goes to `emit`, the state after each turn to
/// `live`.
pub(super) fn sink<F: FnMut(Event)>(emit: F, live: LiveState) -> RunSink<F> {
    RunSink { emit, live, last: None }
}

/// The rows that store a finished run's simulator `sim` as node `id`'s state, with the memory
/// text it added since `marks` (indexed for search); and the state's unpacked size. The node's
/// record is written beside them by the caller (the serving process from its tree, a worker
/// from the stored record).
pub(super) fn end_writes(
    tree: u64,
    id: NodeId,
    sim: &Sim,
    marks: &[(usize, usize)],
) -> StoreResult<(Vec<Write>, usize)> {
    let (encoded, _) = encode_state(sim, id, None);
    let encoded = encoded?;
    let mut writes = vec![Write::State { tree, node: id, data: encoded.data, chunks: encoded.chunks }];
    let memory = sim.memory_since(marks);
    if !memory.trim().is_empty() {
        writes.push(Write::Text { tree, node: id, kind: "memory".into(), ord: 0, body: memory });
    }
    Ok((writes, encoded.raw_len))
}

/// A run as its tree holds it while it runs: a cancel reaches it through `cancelled`, and
/// `ended` tells those waiting for it (a deletion, a drain) that it has ended.
pub(super) struct Running {
    pub(crate) cancelled: watch::Receiver<bool>,
    ended: watch::Sender<bool>,
    live: LiveState,
}

impl TreeHandle {
    /// Registers the run of node `id` among the tree's runs in flight (see [`conclude`]).
    pub(super) fn register_run(&self, id: NodeId) -> Running {
        let (cancel, cancelled) = watch::channel(false);
        let (ended, ended_rx) = watch::channel(false);
        let live = LiveState::default();
        lock(&self.runs).insert(id, RunControl { cancel, ended: ended_rx, live: live.clone() });
        Running { cancelled, ended, live }
    }
}

/// How long a run's store work waits out a fault that may pass by itself (a database restarting:
/// [`StoreError::may_pass_soon`]) before the fault is taken as its outcome.
const STORE_PATIENCE: Duration = Duration::from_secs(10);

/// An error that may be the store's fault.
pub(super) trait StoreFault: std::fmt::Display {
    fn store_fault(&self) -> Option<&StoreError>;
}

impl StoreFault for StoreError {
    fn store_fault(&self) -> Option<&StoreError> {
        Some(self)
    }
}

impl StoreFault for WorkbenchError {
    fn store_fault(&self) -> Option<&StoreError> {
        match self {
            WorkbenchError::Store(e) | WorkbenchError::NotStored { source: e, .. } | WorkbenchError::NoTreeId(e) => {
                Some(e)
            }
            _ => None,
        }
    }
}

/// `attempt`, again every quarter second while it fails with a store fault that may pass by
/// itself, for [`STORE_PATIENCE`] at most; its last outcome. Only for work that is safe to
/// repeat (a flush, a read before a run starts): no turn is run twice (issue #42: a PostgreSQL
/// restart failed runs in flight instead).
pub(super) async fn patiently<T, E: StoreFault, F: Future<Output = Result<T, E>>>(
    what: &str,
    mut attempt: impl FnMut() -> F,
) -> Result<T, E> {
    let until = Instant::now() + STORE_PATIENCE;
    let mut told = false;
    loop {
        match attempt().await {
            Err(e) if e.store_fault().is_some_and(StoreError::may_pass_soon) && Instant::now() < until => {
                if !told {
                    tracing::warn!(error = %e, "{what}: waiting for the store to come back");
                    told = true;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            outcome => return outcome,
        }
    }
}

/// How a run ended, as [`conclude`] takes it into the tree.
pub(super) struct Ended {
    pub(crate) status: NodeStatus,
    pub(crate) error: Option<String>,
    /// The node is still in the tree, its end taken into it (false: deleted while it ran).
    pub(crate) present: bool,
    /// Its end could not be stored (the cause): it is not acknowledged.
    pub(crate) unstored: Option<String>,
    /// Its end is committed already (a worker committed it with its job's end): what the
    /// serving process wrote beside it is not waited for, and is kept and retried.
    pub(crate) durable: bool,
}

/// The end of every run, in this process or a job: what its end wrote is committed before
/// anyone hears of it (what cannot be stored is not acknowledged: the node leaves the tree, as
/// its rows do once the store takes writes again), the run leaves the tree's runs in flight,
/// `run_finish` is announced and those waiting for its end are told.
pub(super) async fn conclude(
    handle: &Arc<TreeHandle>,
    id: NodeId,
    ended: Ended,
    running: Running,
    started: std::time::Instant,
) -> RunResult {
    let Ended { status, error, present, mut unstored, durable } = ended;
    // (A durable end is not waited for: what is written beside it, the tree's touch, commits
    // with the store's next group and is retried while it cannot.)
    if present
        && unstored.is_none()
        && !durable
        && let Err(e) = patiently("a run's end", || handle.flush_async()).await
    {
        unstored = Some(e.to_string());
    }
    let present = match &unstored {
        Some(cause) if present => {
            tracing::error!(tree = handle.id, node = id, error = %cause, "a run's end could not be stored; its node is removed");
            handle.roll_back(id);
            false
        }
        _ => present,
    };
    lock(&handle.runs).remove(&id);
    tracing::info!(
        tree = handle.id,
        node = id,
        status = ?status,
        error = error.as_deref().unwrap_or(""),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "run ended"
    );
    if present {
        let turns = handle.lock().node(id).ok().map(|n| n.turns);
        handle.send(TreeMsg::RunFinish { node: id, status, error: error.clone(), turns });
    }
    let _ = running.ended.send(true);
    RunResult { node: id, status, error, deleted: !present, unstored }
}

impl Core {
    /// A run in this process, as a task of its own. A panic inside a run fails its node
    /// instead of leaving it `running`; a cancel or the memory budget stops it where it is,
    /// keeping the state reached and the partial log.
    pub(super) fn spawn_here(
        &self,
        handle: &Arc<TreeHandle>,
        p: Pending,
        running: Running,
    ) -> tokio::task::JoinHandle<RunResult> {
        let Pending { id, log, mut spec, budget } = p;
        let replay = spec.replay.take();
        let started = std::time::Instant::now();
        let handle = handle.clone();
        let start = {
            let mut t = handle.lock();
            t.sim(spec.parent).map(|parent| spec.start_sim(handle.id, &parent))
        };
        let mut sim = match start {
            Ok(sim) => sim,
            Err(e) => {
                let error = Some(format!("the run could not start: {e}"));
                let present = {
                    let mut t = handle.lock();
                    let present = t.end_without_sim(id, NodeStatus::Failed, error.clone());
                    if present {
                        handle.persist_row(&t, id);
                    }
                    present
                };
                let ended = Ended { status: NodeStatus::Failed, error, present, unstored: None, durable: false };
                return tokio::spawn(async move { conclude(&handle, id, ended, running, started).await });
            }
        };
        // A provider that no longer resolves (its settings were checked at start-up) fails the run
        // with the reason, rather than running it on something else.
        let budget = budget.or_else(|| handle.budget.clone());
        let (ctx, ledger) = match self.client_with(&handle, replay, &sim, id, budget, Arc::default()) {
            Ok((ctx, ledger)) => (Ok(ctx), ledger),
            Err(e) => (Err(e), Arc::new(Ledger::default())),
        };
        let mut memory = self.memory.subscribe();
        let memory_budget = self.memory.budget();
        // Where the agents' memories end before the run: what it adds is indexed for search.
        let marks = if handle.stored() { sim.memory_marks() } else { Vec::new() };
        let turns = spec.turns;
        tracing::info!(tree = handle.id, node = id, turns, "run started");
        tokio::spawn(async move {
            let mut cancelled = running.cancelled.clone();
            let stop = async move {
                // (A sender gone is no stop: only a sent `true` is.)
                tokio::select! {
                    true = async { cancelled.wait_for(|c| *c).await.is_ok() } => (NodeStatus::Cancelled, None),
                    true = async { memory.wait_for(|over| *over).await.is_ok() } => (
                        NodeStatus::Failed,
                        Some(crate::memory::over_budget_message(
                            crate::memory::resident_bytes().unwrap_or(0),
                            memory_budget,
                        )),
                    ),
                    else => std::future::pending().await,
                }
            };
            let mut batch = persist::LogBatch::new(id);
            let mut progress = Progress::new(id, turns);
            let mut sink = sink(
                |e: Event| {
                    if let Some(msg) = progress.observe(&e) {
                        handle.send(msg);
                    }
                    let entry = entry_json(&e, id);
                    let index = log.push(&entry);
                    if handle.stored() {
                        batch.push(&handle, index, &entry);
                    }
                },
                running.live.clone(),
            );
            let outcome = execute(&mut sim, turns, &ctx, &mut sink, stop).await;
            drop(sink);
            let records = ledger.take();
            let (status, error) = outcome.status();
            let (present, unstored) = {
                let mut t = handle.lock();
                batch.flush(&handle);
                let mut unstored = None;
                let present = if matches!(outcome, Outcome::Panicked) {
                    t.fail_without_sim(id, error.clone().unwrap_or_default())
                } else {
                    let writes = handle.stored().then(|| end_writes(handle.id, id, &sim, &marks));
                    let present = t.finish(id, sim, status, error.clone(), records);
                    match writes {
                        Some(Ok((writes, cost))) if present => {
                            t.set_cost(id, cost);
                            writes.into_iter().for_each(|w| handle.persist(w));
                        }
                        Some(Err(e)) if present => unstored = Some(e.to_string()),
                        _ => {}
                    }
                    present
                };
                if present {
                    handle.persist_row(&t, id);
                    handle.touch(&t);
                }
                (present, unstored)
            };
            let ended = Ended { status, error, present, unstored, durable: false };
            conclude(&handle, id, ended, running, started).await
        })
    }
}
