//! What sweeps and explorations share: a *job laid out in a tree* — cells (candidates) that are
//! branches of one parent, each with replicates that are advance children — kept in memory by
//! id, stored as one row per job (through the commit journal), checked against the tree after a
//! deletion (pruned) and when read back or imported (restored).
//!
//! A job kind says how its data is checked and which rows it writes ([`JobData`]); its record
//! says where the data lives and what to do when the job goes with its parent ([`Job`]);
//! [`Jobs`] is the per-tree collection that adds, finds, prunes, restores and writes rows for
//! either.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use simtree_shared::NodeStatus;

use super::{Core, ExportProblem, Pending, RunResult, TreeHandle, lock};
use crate::store::Write;
use crate::sweep::{Metric, events_from_entries};
use crate::tree::{NodeId, SimTree, TreeError};

/// The metrics a job measures its replicates with, by name.
pub(super) type Metrics = Vec<(String, Metric)>;

/// A job's stored data.
pub(super) trait JobData: Clone + PartialEq + Serialize + DeserializeOwned + Send + 'static {
    /// What the job is called in logs ("sweep", "exploration").
    const KIND: &'static str;

    fn id(&self) -> u64;

    /// The node its cells branch from.
    fn parent(&self) -> NodeId;

    /// Checks the data against its tree: its metrics parse, its layout is within bounds, every
    /// node it names that is still there is where the layout says; replicates (and cells)
    /// whose node is gone are marked so. `Ok(None)` when the job's parent is gone (the job went
    /// with it).
    fn check(&mut self, tree: &SimTree) -> Result<Option<Metrics>, Self::Mismatch>;

    /// Why a row does not fit its tree (shown in the warning or the import's refusal).
    type Mismatch: std::error::Error + Send + Sync + 'static;

    /// Each cell's node, its replicates' nodes and their results.
    fn replicates(&mut self) -> Vec<(NodeId, &[NodeId], &mut Vec<Replicate>)>;

    /// The job's store row.
    fn row(tree: u64, id: u64, body: String) -> Write;

    /// Deletes the job's store row.
    fn delete_row(tree: u64, id: u64) -> Write;
}

/// A job in memory.
pub(super) trait Job: Send + Sync + 'static {
    type Data: JobData;

    fn data(&self) -> &Mutex<Self::Data>;

    /// The job's parent was deleted and the job goes with it (stop what still runs).
    fn dropped(&self) {}

    /// Queues the job's row (layout and results) for the store.
    fn write_row(&self, handle: &TreeHandle) {
        if handle.stored() {
            let data = lock(self.data());
            let body = serde_json::to_string(&*data).unwrap_or_default();
            handle.persist(Self::Data::row(handle.id, data.id(), body));
        }
    }
}

/// A tree's jobs of one kind by id (ids count up from 0 and are never reused).
pub(super) struct Jobs<J>(Mutex<BTreeMap<u64, Arc<J>>>);

impl<J> Default for Jobs<J> {
    fn default() -> Self {
        Jobs(Mutex::new(BTreeMap::new()))
    }
}

impl<J: Job> Jobs<J> {
    /// Registers a new job under the next id.
    pub(super) fn add(&self, make: impl FnOnce(u64) -> J) -> Arc<J> {
        let mut all = lock(&self.0);
        let id = all.last_key_value().map_or(0, |(&id, _)| id + 1);
        let record = Arc::new(make(id));
        all.insert(id, record.clone());
        record
    }

    /// Puts `record` in place of the job `id` (one resumed with a fresh record).
    pub(super) fn replace(&self, id: u64, record: Arc<J>) {
        lock(&self.0).insert(id, record);
    }

    pub(super) fn get(&self, id: u64) -> Option<Arc<J>> {
        lock(&self.0).get(&id).cloned()
    }

    /// Every job, oldest first.
    pub(super) fn all(&self) -> Vec<Arc<J>> {
        lock(&self.0).values().cloned().collect()
    }

    /// Every job as stored (for an export).
    pub(super) fn data(&self) -> Vec<J::Data> {
        self.all().iter().map(|r| lock(r.data()).clone()).collect()
    }

    /// Queues `record`'s row, unless the job was dropped meanwhile (its parent deleted while
    /// replicates were still ending).
    pub(super) fn persist(&self, record: &Arc<J>, handle: &TreeHandle) {
        let id = lock(record.data()).id();
        if self.get(id).is_some_and(|r| Arc::ptr_eq(&r, record)) {
            record.write_row(handle);
        }
    }

    /// After a deletion in the tree (locked by the caller): a job whose parent went goes too
    /// (its row with it); what of it went is marked, and its row rewritten.
    pub(super) fn prune(&self, handle: &TreeHandle, tree: &SimTree) {
        lock(&self.0).retain(|&id, record| {
            let changed = {
                let mut data = lock(record.data());
                let before = data.clone();
                match data.check(tree) {
                    Ok(Some(_)) => *data != before,
                    _ => {
                        record.dropped();
                        if handle.stored() {
                            handle.persist(J::Data::delete_row(handle.id, id));
                        }
                        return false;
                    }
                }
            };
            if changed {
                record.write_row(handle);
            }
            true
        });
    }

    /// Brings back a tree's stored or imported jobs: each is checked against the tree (one that
    /// no longer fits is left out with a warning, since the tree itself is sound); a replicate
    /// still pending is measured if its node finished, or ends with its node's status — but a
    /// node `interrupted` stays pending when `cut_stay_pending` (its job is carried on and runs
    /// it again); `make` builds the record, and its row is rewritten.
    pub(super) fn restore(
        &self,
        handle: &TreeHandle,
        jobs: Vec<J::Data>,
        cut_stay_pending: bool,
        make: impl Fn(Metrics, J::Data) -> J,
    ) {
        for mut data in jobs {
            let checked = data.check(&handle.lock());
            let metrics = match checked {
                Ok(Some(m)) => m,
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!(tree = handle.id, id = data.id(), "{} left out: {e}", J::Data::KIND);
                    continue;
                }
            };
            for (cell, children, results) in data.replicates() {
                for (k, &node) in children.iter().enumerate() {
                    let cut =
                        cut_stay_pending && handle.lock().node(node).is_ok_and(|n| n.status == NodeStatus::Interrupted);
                    if matches!(results[k], Replicate::Pending)
                        && !cut
                        && let Some(r) = settled(handle, &metrics, cell, node)
                    {
                        results[k] = r;
                    }
                }
            }
            let id = data.id();
            let record = make(metrics, data);
            record.write_row(handle);
            lock(&self.0).insert(id, Arc::new(record));
        }
    }
}

/// Stored rows read back: those that do not parse are left out with a warning.
pub(super) fn parse_rows<D: JobData>(tree: u64, bodies: &[String]) -> Vec<D> {
    bodies
        .iter()
        .filter_map(|b| match serde_json::from_str::<D>(b) {
            Ok(d) => Some(d),
            Err(e) => {
                tracing::warn!(tree, "a stored {} is unreadable: {e}", D::KIND);
                None
            }
        })
        .collect()
}

/// An export's jobs of one kind, checked against the tree imported with them: any that does not
/// parse or fit refuses the import (a 422 naming it as `field[i]`).
pub(super) fn imported<D: JobData>(
    field: &str,
    raw: Vec<serde_json::Value>,
    tree: &SimTree,
) -> Result<Vec<D>, super::WorkbenchError> {
    raw.into_iter()
        .enumerate()
        .map(|(i, v)| {
            let bad = |problem| super::WorkbenchError::BadExport { field: field.to_string(), index: i, problem };
            let mut data: D = serde_path_to_error::deserialize(v).map_err(|e| bad(ExportProblem::Decode(e)))?;
            match data.check(tree).map_err(|e| bad(ExportProblem::Mismatch(Box::new(e))))? {
                Some(_) => Ok(data),
                None => Err(bad(ExportProblem::NoParent(data.parent()))),
            }
        })
        .collect()
}

/// Where one replicate of a cell stands.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Replicate {
    Pending,
    /// The metrics' values, in the sweep's order.
    Done(Vec<Value>),
    /// Failed, cancelled or deleted: no values, since a partial run would bias its cell.
    Ended(String),
}

/// The metrics of a finished replicate: the events of its cell's ops and of its run, and the
/// state it ended in (the parent's history is not part of the cell's outcome).
pub(super) fn measure(handle: &TreeHandle, metrics: &[(String, Metric)], cell: NodeId, node: NodeId) -> Replicate {
    let taken = {
        let mut t = handle.lock();
        (|| Ok::<_, TreeError>((t.log(cell)?, t.log(node)?, t.sim(node)?)))()
    };
    let Ok((cell_log, run_log, sim)) = taken else {
        return Replicate::Ended("deleted before it was measured".into());
    };
    let entries: Vec<String> = cell_log.entries().into_iter().chain(run_log.entries()).collect();
    let events = events_from_entries(entries.iter().map(String::as_str));
    Replicate::Done(metrics.iter().map(|(_, m)| m.of(&events, &sim)).collect())
}

/// What a replicate's run gave when it ended (`None`: its task ended without a result, the
/// runtime shutting down): its metrics when it is done, else why it has none.
pub(super) fn replicate_of(
    handle: &TreeHandle,
    metrics: &[(String, Metric)],
    cell: NodeId,
    ran: Option<RunResult>,
) -> Replicate {
    match ran {
        None => Replicate::Ended("the server is shutting down".into()),
        Some(r) if r.deleted => Replicate::Ended("deleted while running".into()),
        Some(r) if r.status == NodeStatus::Done => measure(handle, metrics, cell, r.node),
        Some(r) if r.status == NodeStatus::Cancelled => Replicate::Ended("cancelled".into()),
        Some(r) => Replicate::Ended(r.error.unwrap_or_else(|| "failed".into())),
    }
}

/// A replicate pending in a stored row, once its tree is read back: measured if its node
/// finished, ended with its node's status otherwise; `None` while it still runs.
pub(super) fn settled(
    handle: &TreeHandle,
    metrics: &[(String, Metric)],
    cell: NodeId,
    node: NodeId,
) -> Option<Replicate> {
    let status = handle.lock().node(node).map(|n| (n.status, n.error.clone()));
    Some(match status {
        Ok((NodeStatus::Done, _)) => measure(handle, metrics, cell, node),
        Ok((NodeStatus::Running, _)) => return None,
        Ok((status, error)) => Replicate::Ended(error.unwrap_or_else(|| format!("{status:?}").to_lowercase())),
        Err(_) => Replicate::Ended("deleted".into()),
    })
}

/// A replicate's run as a job laid out in a tree starts it: attached here and to be started, or
/// already running (a job this server adopted from the last one) and waited for.
pub(super) enum Step {
    Run(Pending),
    Await(NodeId),
}

/// How a replicate's run ended, as [`Core::start_step`] learns it.
pub(super) enum Ran {
    /// A run this server started (`None`: its task ended without a result).
    Here(Option<RunResult>),
    /// A run adopted from the last server: its end is in the tree now.
    Adopted(NodeId),
}

impl Core {
    /// Starts `step` (its run, or the wait for an adopted run's end); gives the replicate's
    /// node and a future of how its run ended.
    pub(super) fn start_step(
        &self,
        handle: &Arc<TreeHandle>,
        step: Step,
    ) -> (NodeId, impl std::future::Future<Output = Ran> + Send + 'static) {
        let (node, run, ended) = match step {
            Step::Run(p) => (p.id, Some(self.spawn(handle, p)), None),
            Step::Await(node) => (node, None, lock(&handle.runs).get(&node).map(|r| r.ended.clone())),
        };
        let ran = async move {
            match (run, ended) {
                (Some(run), _) => Ran::Here(run.await.ok()),
                (None, Some(mut ended)) => {
                    let _ = ended.wait_for(|e| *e).await;
                    Ran::Adopted(node)
                }
                (None, None) => Ran::Adopted(node),
            }
        };
        (node, ran)
    }
}

/// What a replicate of `cell` gave, however its run ended (see [`replicate_of`], [`settled`]).
pub(super) fn outcome(handle: &TreeHandle, metrics: &[(String, Metric)], cell: NodeId, ran: Ran) -> Replicate {
    match ran {
        Ran::Here(ran) => replicate_of(handle, metrics, cell, ran),
        Ran::Adopted(node) => {
            settled(handle, metrics, cell, node).unwrap_or_else(|| Replicate::Ended("its run was lost".into()))
        }
    }
}
