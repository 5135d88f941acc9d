//! Runs without a server: a scenario's fresh simulator ([`fresh_sim`]), one advance of a fresh
//! tree, whose export `POST /devui/simtree/import` accepts, and a client that counts calls for a
//! progress display. Used by `simtree run`; the backend and a run's clients come from
//! [`crate::backend`], as for the server.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::abm::worker::{WorkerConfig, WorkerPool};
use crate::engine::event::{Event, EventSink};
use crate::engine::memory::Message;
use crate::llm::ledger::Ledger;
use crate::llm::record::LlmRecord;
use crate::llm::{BoxFuture, LlmClient, LlmError, LlmState};
use crate::sim::{RunCtx, ScenarioEntry, Sim, SimError};
use crate::trading::data::MarketData;
use crate::tree::{NodeId, NodeStatus, SimTree, TreeError, TreeExport, entry_json};
use simtree_shared::SimKind;

/// Counts the calls going through a client and the words going in and out (a stand-in for
/// tokens that needs no provider's usage report), for a progress display.
pub(crate) struct Counted {
    inner: Arc<dyn LlmClient>,
    pub(crate) calls: AtomicU64,
    pub(crate) words: AtomicU64,
}

impl Counted {
    pub(crate) fn new(inner: Arc<dyn LlmClient>) -> Counted {
        Counted { inner, calls: AtomicU64::new(0), words: AtomicU64::new(0) }
    }
}

impl LlmClient for Counted {
    fn chat<'a>(&'a self, messages: &'a [Message], state: &'a mut LlmState) -> BoxFuture<'a, Result<String, LlmError>> {
        Box::pin(async move {
            let out = self.inner.chat(messages, state).await;
            let sent: usize = messages.iter().map(|m| m.content.split_whitespace().count()).sum();
            let got = out.as_ref().map_or(0, |t| t.split_whitespace().count());
            self.calls.fetch_add(1, Ordering::Relaxed);
            self.words.fetch_add((sent + got) as u64, Ordering::Relaxed);
            out
        })
    }
}

/// Why a headless run's simulator could not be set up.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SetupError {
    #[error(transparent)]
    Sim(#[from] SimError),
    /// The shipped market data of a trading episode could not be read.
    #[error(transparent)]
    Market(#[from] crate::trading::TradingError),
    /// The Python environment of an agent-based model's worker could not be made.
    #[error(transparent)]
    Venv(#[from] crate::abm::venv::VenvError),
    /// An agent-based model's (or a custom scene's hooks') worker did not start.
    #[error(transparent)]
    Worker(#[from] crate::abm::AbmError),
    /// A custom scene's hook source is not Python defining a hook (its path inside
    /// `scene.config` first).
    #[error("scene.config.{0}")]
    HookRefused(crate::engine::scenes::custom::check::CustomError),
}

impl From<crate::sim::hooks::HookSourceError> for SetupError {
    fn from(e: crate::sim::hooks::HookSourceError) -> Self {
        match e {
            crate::sim::hooks::HookSourceError::Refused(c) => SetupError::HookRefused(c),
            crate::sim::hooks::HookSourceError::Worker(w) => SetupError::Worker(w),
        }
    }
}

/// A fresh simulator of `entry` (a library scenario or a user's document), its default turn
/// count, and for an agent-based model or a custom scene with hooks a worker of its own
/// (`assets/..` holds the worker's venv; the hook source is checked on it). A trading episode runs on `market` when given, else on the shipped data.
pub(crate) fn fresh_sim(
    entry: ScenarioEntry<'_>,
    seed: Option<u64>,
    assets: &std::path::Path,
    sandbox: crate::abm::Sandbox,
    market: Option<Arc<MarketData>>,
) -> Result<(Sim, u64, Option<Arc<WorkerPool>>), SetupError> {
    let market = match (entry.kind(), market) {
        (SimKind::Trading, Some(m)) => Some(m),
        (SimKind::Trading, None) => Some(Arc::new(MarketData::load_default()?)),
        _ => None,
    };
    let sim = entry.instantiate(seed, market.as_ref())?;
    // An agent-based model runs on its worker; a custom scene's hooks run on one too.
    let pool = if entry.kind() == SimKind::Abm || sim.hook_source().is_some() {
        let root = assets.join("..");
        crate::abm::venv::ensure_venv(&root)?;
        let config = WorkerConfig::for_root(&root).with_sandbox(sandbox);
        Some(Arc::new(WorkerPool::spawn(&config, 1)?))
    } else {
        None
    };
    if let (Some(source), Some(pool)) = (sim.hook_source(), &pool) {
        crate::sim::hooks::check_source(pool, source)?;
    }
    Ok((sim, entry.default_turns(), pool))
}

/// One finished headless run: the tree (root plus the run's node) and what the run recorded.
pub(crate) struct Finished {
    pub(crate) tree: SimTree,
    pub(crate) node: NodeId,
    pub(crate) error: Option<String>,
    pub(crate) records: Vec<LlmRecord>,
}

impl Finished {
    pub(crate) fn export(&mut self) -> Result<TreeExport, TreeError> {
        self.tree.export()
    }

    /// The run's final simulator.
    pub(crate) fn sim(&mut self) -> Option<Arc<Sim>> {
        self.tree.sim(self.node).ok()
    }
}

/// Runs `turns` turns of `tree`'s root as its first child, streaming every event (root's initial
/// ones first) into `sink` and the node's log. A failed run still finishes its node (status
/// failed, with the partial log), as the server's runs do.
pub(crate) async fn advance(
    mut tree: SimTree,
    turns: u64,
    ctx: &RunCtx,
    ledger: &Ledger,
    sink: &mut (dyn EventSink + Send),
) -> Result<Finished, TreeError> {
    let (node, mut sim, log) = tree.start_advance(tree.root(), turns)?;
    let result = {
        let mut both = |e: Event| {
            log.push(&entry_json(&e, node));
            sink.emit(e);
        };
        sim.run(turns, ctx, &mut both).await
    };
    let records = ledger.take();
    let (status, error) = match result {
        Ok(()) => (NodeStatus::Done, None),
        Err(e) => (NodeStatus::Failed, Some(e.to_string())),
    };
    tree.finish(node, sim, status, error.clone(), records.clone());
    Ok(Finished { tree, node, error, records })
}
