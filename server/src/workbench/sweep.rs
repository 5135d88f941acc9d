//! Sweeps inside a tree: the grid of a sweep file ([`SweepSpec`]) laid out as nodes. Each cell
//! is a branch of the sweep's `parent` (the cell's ops applied), each replicate an advance child
//! of its cell. Replicate `k` of every cell has its random streams set to the same seed
//! ([`crate::sim::Sim::reseed`]), so cells are paired as in `simtree sweep`.
//!
//! Creating a sweep is all or nothing: the file, the limits and every cell's ops are checked, then
//! the cells and runs are attached under one lock. The runs are ordinary server-owned runs (the
//! tree socket sees `attached`, `run_start`, `run_finish`); a collector task reduces each finished
//! replicate to the sweep's metrics, so the table can be read at any time, with runs still going
//! counted as pending.

use std::sync::{Arc, Mutex};

use indexmap::IndexMap;
use serde::Serialize;
use serde_json::Value;
use simtree_shared::{NodeStatus, TreeMsg};

use super::{RunResult, TreeHandle, Workbench, WorkbenchError, lock};
use crate::sweep::{Metric, Summary, SweepSpec, events_from_entries, summarise_runs};
use crate::tree::{NodeId, TreeError};

/// A tree's sweeps; a sweep's id is its index.
#[derive(Default)]
pub(super) struct Sweeps(Mutex<Vec<Arc<SweepRecord>>>);

impl Sweeps {
    fn add(&self, make: impl FnOnce(u64) -> SweepRecord) -> Arc<SweepRecord> {
        let mut all = lock(&self.0);
        let record = Arc::new(make(all.len() as u64));
        all.push(record.clone());
        record
    }

    fn get(&self, id: u64) -> Option<Arc<SweepRecord>> {
        lock(&self.0).get(usize::try_from(id).ok()?).cloned()
    }
}

/// What the tree keeps of a sweep: its layout and, per replicate, what its run gave.
struct SweepRecord {
    id: u64,
    parent: NodeId,
    turns: u64,
    seeds: Vec<u64>,
    metrics: Vec<(String, Metric)>,
    cells: Vec<CellLayout>,
    /// `results[cell][k]`: replicate `k` of that cell.
    results: Mutex<Vec<Vec<Replicate>>>,
}

struct CellLayout {
    labels: IndexMap<String, Value>,
    node: NodeId,
    children: Vec<NodeId>,
}

#[derive(Clone)]
enum Replicate {
    Pending,
    /// The metrics' values, in the sweep's order.
    Done(Vec<Value>),
    /// Failed, cancelled or deleted: no values, since a partial run would bias its cell.
    Ended(String),
}

/// The reply to `POST …/sweep`: the sweep's id, the cell nodes and, per cell, its replicates.
#[derive(Debug, Serialize)]
pub struct SweepStarted {
    pub sweep: u64,
    pub cells: Vec<NodeId>,
    /// `children[i]` are the replicates of `cells[i]`, replicate `k` at index `k`.
    pub children: Vec<Vec<NodeId>>,
    pub total: usize,
}

/// `GET …/sweep/{id}`: per cell its axis values and a summary per metric (`simtree sweep
/// --json`'s shape), plus where its runs stand.
#[derive(Debug, Serialize)]
pub struct SweepTable {
    pub sweep: u64,
    pub parent: NodeId,
    pub turns: u64,
    /// The seed of replicate `k`, shared by every cell.
    pub seeds: Vec<u64>,
    pub total: usize,
    pub done: usize,
    pub pending: usize,
    pub failed: usize,
    pub cells: Vec<CellRow>,
}

#[derive(Debug, Serialize)]
pub struct CellRow {
    pub cell: IndexMap<String, Value>,
    /// `values[k]` is replicate `k`'s value, `null` while it runs or when it ended without one.
    pub metrics: IndexMap<String, Summary>,
    pub node: NodeId,
    pub children: Vec<NodeId>,
    pub pending: usize,
    /// Replicates that ended without a result, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<FailedRun>,
}

#[derive(Debug, Serialize)]
pub struct FailedRun {
    pub node: NodeId,
    pub error: String,
}

impl Workbench {
    /// Lays out `spec` under its `parent` and starts every replicate; answers once they are
    /// attached, not when they end.
    pub fn start_sweep(self: &Arc<Self>, tree: u64, spec: SweepSpec) -> Result<SweepStarted, WorkbenchError> {
        let handle = self.tree(tree)?;
        let parent = spec
            .parent
            .ok_or_else(|| WorkbenchError::invalid("parent: name the node the sweep's cells branch from"))?;
        if spec.prefix != 0 {
            return Err(WorkbenchError::invalid(
                "prefix: a sweep in a tree starts at `parent`; advance the tree to the branch point first",
            ));
        }
        let cells = spec.cells().map_err(WorkbenchError::invalid)?;
        let metrics = spec.metric_list().map_err(WorkbenchError::invalid)?;
        self.check_turns(spec.turns)?;
        // `cells()` bounds the product, so it cannot overflow.
        let runs = cells.len() * spec.replicates as usize;
        let max = self.limits.max_children_per_request;
        if runs as u64 > max {
            return Err(WorkbenchError::invalid(format!(
                "replicates: {} cells × {} replicates make {runs} runs; a request may start at most {max} \
                 (see --max-children)",
                cells.len(),
                spec.replicates
            )));
        }
        let (cell_ids, pending) = {
            let mut t = handle.lock();
            if !spec.scenario.is_empty() && spec.scenario != t.scenario {
                return Err(WorkbenchError::invalid(format!(
                    "scenario: this tree runs '{}', not '{}'",
                    t.scenario, spec.scenario
                )));
            }
            let nodes = cells.len() + runs;
            self.check_capacity(&t, nodes)?;
            if t.ids_left() < nodes as u64 {
                return Err(TreeError::IdsExhausted.into());
            }
            let cell_ids = t.branch_all(parent, cells.iter().map(|c| c.ops.clone()).collect())?;
            for &c in &cell_ids {
                handle.send(TreeMsg::Attached(t.node(c)?.attached()));
            }
            // Capacity and ids were checked for every node, so no attach below can fail.
            let mut pending = Vec::with_capacity(runs);
            for &c in &cell_ids {
                for k in 0..spec.replicates {
                    let mut p = Self::attach_run(&handle, &mut t, c, spec.turns, None)?;
                    p.sim.reseed(spec.seed_of(k));
                    pending.push(p);
                }
            }
            (cell_ids, pending)
        };
        let per_cell = spec.replicates as usize;
        let children: Vec<Vec<NodeId>> = pending
            .chunks(per_cell)
            .map(|c| c.iter().map(|p| p.id).collect())
            .collect();
        let record = handle.sweeps.add(|id| SweepRecord {
            id,
            parent,
            turns: spec.turns,
            seeds: (0..spec.replicates).map(|k| spec.seed_of(k)).collect(),
            metrics,
            cells: cells
                .into_iter()
                .zip(&cell_ids)
                .zip(&children)
                .map(|((cell, &node), kids)| CellLayout {
                    labels: cell.labels,
                    node,
                    children: kids.clone(),
                })
                .collect(),
            results: Mutex::new(vec![vec![Replicate::Pending; per_cell]; cell_ids.len()]),
        });
        tracing::info!(tree, sweep = record.id, runs, "sweep started");
        let running: Vec<_> = pending
            .into_iter()
            .enumerate()
            .map(|(i, p)| (i / per_cell, i % per_cell, self.spawn(&handle, p)))
            .collect();
        tokio::spawn(collect(handle, record.clone(), running));
        Ok(SweepStarted {
            sweep: record.id,
            cells: cell_ids,
            children,
            total: runs,
        })
    }

    /// The table of sweep `id` as it stands; `None` when the tree has no such sweep.
    pub fn sweep_table(&self, tree: u64, id: u64) -> Result<Option<SweepTable>, WorkbenchError> {
        Ok(self.tree(tree)?.sweeps.get(id).map(|r| r.table()))
    }
}

/// Waits for every replicate (in whatever order they end) and stores its metrics.
async fn collect(
    handle: Arc<TreeHandle>,
    record: Arc<SweepRecord>,
    running: Vec<(usize, usize, tokio::task::JoinHandle<RunResult>)>,
) {
    let mut set = tokio::task::JoinSet::new();
    for (c, k, run) in running {
        set.spawn(async move { (c, k, run.await) });
    }
    while let Some(joined) = set.join_next().await {
        let Ok((c, k, ran)) = joined else { continue };
        let outcome = match ran {
            Err(_) => Replicate::Ended("the server is shutting down".into()),
            Ok(r) if r.deleted => Replicate::Ended("deleted while running".into()),
            Ok(r) if r.status == NodeStatus::Done => record.measure(&handle, record.cells[c].node, r.node),
            Ok(r) if r.status == NodeStatus::Cancelled => Replicate::Ended("cancelled".into()),
            Ok(r) => Replicate::Ended(r.error.unwrap_or_else(|| "failed".into())),
        };
        lock(&record.results)[c][k] = outcome;
    }
}

impl SweepRecord {
    /// The metrics of a finished replicate: the events of its cell's ops and of its run, and the
    /// state it ended in (the parent's history is not part of the cell's outcome).
    fn measure(&self, handle: &TreeHandle, cell: NodeId, node: NodeId) -> Replicate {
        let taken = {
            let mut t = handle.lock();
            (|| Ok::<_, TreeError>((t.log(cell)?, t.log(node)?, t.sim(node)?)))()
        };
        let Ok((cell_log, run_log, sim)) = taken else {
            return Replicate::Ended("deleted before it was measured".into());
        };
        let entries: Vec<String> = cell_log.entries().into_iter().chain(run_log.entries()).collect();
        let events = events_from_entries(entries.iter().map(String::as_str));
        Replicate::Done(self.metrics.iter().map(|(_, m)| m.of(&events, &sim)).collect())
    }

    fn table(&self) -> SweepTable {
        let results = lock(&self.results).clone();
        let mut totals = (0, 0, 0);
        let cells = self
            .cells
            .iter()
            .zip(&results)
            .map(|(layout, reps)| {
                let values: Vec<Option<&Vec<Value>>> = reps
                    .iter()
                    .map(|r| match r {
                        Replicate::Done(v) => Some(v),
                        _ => None,
                    })
                    .collect();
                let failed: Vec<FailedRun> = reps
                    .iter()
                    .zip(&layout.children)
                    .filter_map(|(r, &node)| match r {
                        Replicate::Ended(error) => Some(FailedRun {
                            node,
                            error: error.clone(),
                        }),
                        _ => None,
                    })
                    .collect();
                let pending = reps.iter().filter(|r| matches!(r, Replicate::Pending)).count();
                totals.0 += values.iter().filter(|v| v.is_some()).count();
                totals.1 += pending;
                totals.2 += failed.len();
                CellRow {
                    cell: layout.labels.clone(),
                    metrics: summarise_runs(&self.metrics, &values),
                    node: layout.node,
                    children: layout.children.clone(),
                    pending,
                    failed,
                }
            })
            .collect();
        SweepTable {
            sweep: self.id,
            parent: self.parent,
            turns: self.turns,
            seeds: self.seeds.clone(),
            total: totals.0 + totals.1 + totals.2,
            done: totals.0,
            pending: totals.1,
            failed: totals.2,
            cells,
        }
    }
}
