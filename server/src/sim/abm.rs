//! The agent-based kind at a tree node: [`AbmSim`] (an abm-quant model, its seed and the history
//! that led here) and what the seam asks of it — run steps in a Python/Mesa worker, take a
//! branch op as a patch for the next step, show its state and view.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use simtree_shared::abm::{AbmStep, AbmView};
use simtree_shared::{NodeState, Op};

use super::{SimError, op_name};
use crate::abm::AbmError;
use crate::abm::model::AbmModel;
use crate::abm::worker::{Advance, CancelToken, CheckPatch, Patch, Snapshot, Start, Termination, WorkerPool};
use crate::chunks::AppendList;
use crate::engine::event::{Event, EventSink};

/// An agent-based model at one node: the specification (shared), the history of advances that
/// led here from the seed (shared), the pickled model state after the node's run (a cache), and
/// patches waiting for the next run. The tracked series are the node's `abm_step` log entries,
/// so cloning stays cheap at any step count.
///
/// The specification, seed and history determine the state; the snapshot only saves recomputing
/// it. A snapshot is a pickle, and unpickling runs code, so only snapshots this server's worker
/// produced are ever loaded: the field is never serialized nor read from JSON, and a node
/// without one (imported, or [`AbmSim::distrust`]ed) is rebuilt in the worker by re-running its
/// history.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AbmSim {
    model: Arc<AbmModel>,
    seed: u64,
    /// The state after the node's run, as this server's worker pickled it; `None` before the
    /// first run and on imported nodes.
    #[serde(skip)]
    pub snapshot: Option<Snapshot>,
    /// Every advance from the freshly built model to this node's state, in order.
    #[serde(default)]
    pub history: AppendList<Advance>,
    pub steps: u64,
    #[serde(default)]
    terminated: Option<Termination>,
    /// Branch ops, applied in the worker right before the next step.
    #[serde(default)]
    pub pending: Vec<Patch>,
    /// A new seed for the next run (replicates of one parent get distinct seeds).
    #[serde(default)]
    pub(crate) reseed: Option<u64>,
}

/// The most model steps an imported node's history may replay when it is rebuilt.
pub const MAX_REBUILD_STEPS: u64 = 1_000_000;

/// Why an imported agent-based model cannot be rebuilt.
#[derive(Debug, thiserror::Error)]
pub enum AbmImportError {
    /// A recorded patch does not fit the model.
    #[error("history[{index}]: {source}")]
    Patch {
        index: usize,
        #[source]
        source: AbmError,
    },
    /// A patch waiting for the node's next run does not fit the model.
    #[error("pending[{index}]: {source}")]
    Pending {
        index: usize,
        #[source]
        source: AbmError,
    },
    #[error("the history replays {total} steps; at most {MAX_REBUILD_STEPS} can be rebuilt")]
    TooLong { total: u64 },
    /// An export from before histories were recorded: steps without the advances that made them.
    #[error(
        "the model is at step {steps} but its history records only {total} steps (exports of \
         agent-based models from before histories were recorded cannot be rebuilt)"
    )]
    NoHistory { steps: u64, total: u64 },
}

impl AbmSim {
    /// Checks an imported node's history before it is ever replayed: every recorded patch fits
    /// the model, the steps add up to the node's (an export from before histories existed, with
    /// steps but no history, cannot be rebuilt and is refused), and the total is bounded.
    pub(crate) fn check_imported(&self) -> Result<(), AbmImportError> {
        let mut total: u64 = 0;
        for (index, adv) in self.history.iter().enumerate() {
            for p in &adv.patches {
                p.check(&self.model).map_err(|source| AbmImportError::Patch { index, source })?;
            }
            total = total.saturating_add(adv.steps);
        }
        for (index, p) in self.pending.iter().enumerate() {
            p.check(&self.model).map_err(|source| AbmImportError::Pending { index, source })?;
        }
        if total > MAX_REBUILD_STEPS {
            return Err(AbmImportError::TooLong { total });
        }
        if self.steps > total {
            return Err(AbmImportError::NoHistory { steps: self.steps, total });
        }
        Ok(())
    }

    pub fn new(model: AbmModel, seed: u64) -> AbmSim {
        AbmSim {
            model: Arc::new(model),
            seed,
            snapshot: None,
            history: AppendList::new(),
            steps: 0,
            terminated: None,
            pending: Vec::new(),
            reseed: None,
        }
    }

    /// Forgets the snapshot, so the next run rebuilds the state from the specification and the
    /// history. For states that came from outside (imports): their snapshot is never loaded.
    pub(crate) fn distrust(&mut self) {
        self.snapshot = None;
    }

    /// Runs the pending patches, reseed and `steps` steps in a worker. Dropping the future (the
    /// run's task aborted: node deleted or cancelled) kills the worker's process, so the worker
    /// is free for other runs within [`crate::abm::worker::CANCEL_POLL`].
    pub(super) async fn run(
        &mut self,
        steps: u64,
        pool: Option<Arc<WorkerPool>>,
        sink: &mut (dyn EventSink + Send),
    ) -> Result<(), SimError> {
        let pool = pool.ok_or(SimError::NoWorker)?;
        let plan = Advance { patches: self.pending.clone(), reseed: self.reseed, steps };
        let (model, seed, snapshot) = (self.model.clone(), self.seed, self.snapshot.clone());
        let fresh = self.history.is_empty();
        // The worker replays a plain slice; only a rebuild (no snapshot) needs it.
        let history = if snapshot.is_none() { self.history.to_vec() } else { Vec::new() };
        let cancel = CancelToken::new();
        let on_drop = cancel.cancel_on_drop();
        let job_plan = plan.clone();
        let done = tokio::task::spawn_blocking(move || {
            pool.with_worker_cancellable(&cancel, |w| {
                let start = match &snapshot {
                    Some(s) => Start::Snapshot(s),
                    None if fresh => Start::Spec { model: &model, seed },
                    None => Start::Rebuild { model: &model, seed, history: &history },
                };
                w.advance(start, &job_plan)
            })
        })
        .await;
        on_drop.disarm();
        let done = done.map_err(|e| SimError::WorkerTask(e.to_string()))??;
        self.pending.clear();
        self.reseed = None;
        self.history.push(plan);
        let step = |step: u64, values: &indexmap::IndexMap<String, Value>| {
            let values = values.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            Event::of(&AbmStep { step, values })
        };
        if fresh {
            sink.emit(step(0, &done.before));
        }
        for r in &done.report.records {
            sink.emit(step(r.step, &r.values));
        }
        self.snapshot = Some(done.snapshot);
        self.steps = done.report.steps;
        self.terminated = done.report.terminated;
        Ok(())
    }

    /// The seed the model's generators were last set from: a pending reseed, else the last
    /// advance's, else the model's own.
    pub(crate) fn current_seed(&self) -> u64 {
        self.reseed.or_else(|| self.history.iter().filter_map(|a| a.reseed).last()).unwrap_or(self.seed)
    }

    /// Takes an `abm_set_*` op as a patch for the next step, once the model accepts it.
    pub(super) fn apply_op(&mut self, op: &Op) -> Result<Vec<Event>, SimError> {
        let patch = match op.clone() {
            Op::AbmSetGlobal { name, value } => Patch::GlobalVariable { name, value },
            Op::AbmSetEnvironment { name, value } => Patch::EnvironmentAttribute { name, value },
            Op::AbmSetAgent { agent_type, name, value, agent_id } => {
                Patch::AgentAttribute { agent_type, name, value, agent_id }
            }
            other => return Err(SimError::WrongOp("an agent-based model", op_name(&other))),
        };
        patch.check(&self.model).map_err(|e| SimError::BadOp(e.to_string()))?;
        self.pending.push(patch);
        Ok(Vec::new())
    }

    /// A model has no agents with a context: only its step count.
    pub(super) fn state(&self) -> NodeState {
        NodeState { turns: self.steps, agents: Vec::new() }
    }

    pub(super) fn view(&self) -> AbmView {
        AbmView {
            model: serde_json::to_value(&*self.model).unwrap_or(Value::Null),
            seed: self.seed,
            steps: self.steps,
            terminated: self.terminated.clone(),
            pending: self.pending.clone(),
            snapshot_bytes: self.snapshot.as_ref().map(|s| s.len() as u64),
        }
    }
}
