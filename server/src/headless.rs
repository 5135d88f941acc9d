//! Runs without a server: the LLM backend from the environment and a settings file (as `serve`
//! builds it, with an optional dialect override), the per-run client with its call ledger, and
//! one advance of a fresh tree, whose export `POST /devui/simtree/import` accepts. Used by
//! `simtree run` and by sweeps.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::abm::worker::WorkerPool;
use crate::engine::event::{Event, EventSink};
use crate::engine::memory::Message;
use crate::llm::ledger::{Ledger, LlmRecord};
use crate::llm::{BoxFuture, Dialect, LlmClient, LlmConfig, LlmError, LlmSettings, LlmState, MockClient};
use crate::sim::{RunCtx, Sim};
use crate::trading::agents::MockToolModel;
use crate::tree::{NodeId, NodeStatus, SimTree, TreeExport, entry_json};
use crate::workbench::{Backend, Providers};

/// The LLM backend from the `LLM_*` environment (default: the offline mock) and an optional
/// settings file with per-scenario and per-agent overrides; `dialect` replaces the environment's.
pub fn backend(file: Option<&Path>, dialect: Option<Dialect>) -> Result<Backend, String> {
    let mut base = LlmConfig::from_env().map_err(|e| format!("LLM settings: {e}"))?;
    if let Some(d) = dialect.filter(|d| *d != base.dialect) {
        // The other dialect's default model means nothing to this one.
        if base.model == base.dialect.default_model() {
            base.model = d.default_model().to_string();
        }
        base.dialect = d;
    }
    let settings = match file {
        Some(path) => LlmSettings::from_path(path).map_err(|e| format!("{}: {e}", path.display()))?,
        None => LlmSettings::default(),
    };
    let env = |name: &str| std::env::var(name).ok();
    let default = settings
        .resolve(&base, None, None, &env)
        .map_err(|e| format!("LLM settings: {e}"))?;
    if default.dialect == Dialect::Mock && settings.scenarios.is_empty() {
        return Ok(Backend::Mock);
    }
    eprintln!("simtree: LLM backend {}", default.label());
    Providers::new(base, settings)
        .map(|p| Backend::Provider(Arc::new(p)))
        .map_err(|e| format!("LLM settings: {e}"))
}

/// What one run of `scenario` talks to, and the ledger its provider calls are recorded in: the
/// mock, or the scenario's provider (metered) with per-agent overrides routed by name.
pub fn run_ctx(
    backend: &Backend,
    scenario: &str,
    sim: &Sim,
    abm: Option<Arc<WorkerPool>>,
) -> Result<(RunCtx, Arc<Ledger>), String> {
    let ledger = Arc::new(Ledger::default());
    let Backend::Provider(ps) = backend else {
        let ctx = RunCtx {
            llm: Arc::new(MockClient),
            tools: Arc::new(MockToolModel),
            abm,
        };
        return Ok((ctx, ledger));
    };
    let ctx = ps.run_ctx(scenario, sim, &ledger, None, abm)?;
    Ok((ctx, ledger))
}

/// Counts the calls going through a client and the words going in and out (a stand-in for
/// tokens that needs no provider's usage report), for a progress display.
pub struct Counted {
    pub inner: Arc<dyn LlmClient>,
    pub calls: AtomicU64,
    pub words: AtomicU64,
}

impl Counted {
    pub fn new(inner: Arc<dyn LlmClient>) -> Counted {
        Counted {
            inner,
            calls: AtomicU64::new(0),
            words: AtomicU64::new(0),
        }
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

/// One finished headless run: the tree (root plus the run's node) and what the run recorded.
pub struct Finished {
    pub tree: SimTree,
    pub node: NodeId,
    pub status: NodeStatus,
    pub error: Option<String>,
    pub records: Vec<LlmRecord>,
}

impl Finished {
    pub fn export(&mut self) -> Result<TreeExport, String> {
        self.tree.export().map_err(|e| e.to_string())
    }

    /// The run's final simulator.
    pub fn sim(&mut self) -> Option<Arc<Sim>> {
        self.tree.sim(self.node).ok()
    }
}

/// Runs `turns` turns of `tree`'s root as its first child, streaming every event (root's initial
/// ones first) into `sink` and the node's log. A failed run still finishes its node (status
/// failed, with the partial log), as the server's runs do.
pub async fn advance(
    mut tree: SimTree,
    turns: u64,
    ctx: &RunCtx,
    ledger: &Ledger,
    sink: &mut (dyn EventSink + Send),
) -> Result<Finished, String> {
    let (node, mut sim, log) = tree.start_advance(tree.root(), turns).map_err(|e| e.to_string())?;
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
    Ok(Finished {
        tree,
        node,
        status,
        error,
        records,
    })
}
