//! Runs without a server: one advance of a fresh tree, whose export `POST /devui/simtree/import`
//! accepts, and a client that counts calls for a progress display. Used by `simtree run`; the
//! backend and a run's clients come from [`crate::backend`], as for the server.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::engine::event::{Event, EventSink};
use crate::engine::memory::Message;
use crate::llm::ledger::Ledger;
use crate::llm::record::LlmRecord;
use crate::llm::{BoxFuture, LlmClient, LlmError, LlmState};
use crate::sim::{RunCtx, Sim};
use crate::tree::{NodeId, NodeStatus, SimTree, TreeError, TreeExport, entry_json};

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
    pub fn export(&mut self) -> Result<TreeExport, TreeError> {
        self.tree.export()
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
    Ok(Finished {
        tree,
        node,
        status,
        error,
        records,
    })
}
