//! Sweeps inside a tree: the grid of a sweep file ([`SweepSpec`]) laid out as nodes. Each cell
//! is a branch of the sweep's `parent` (the cell's ops applied), each replicate an advance child
//! of its cell; both have edge type `sweep`. Replicate `k` of every cell has its random streams
//! set to the same seed ([`crate::sim::Sim::reseed`]), so cells are paired as in `simtree sweep`.
//!
//! Creating a sweep is all or nothing: the file, the limits and every cell's ops are checked, then
//! the cells and runs are attached under one lock and committed before the reply. The runs are
//! ordinary server-owned runs (the tree socket sees `attached`, `run_start`, `run_finish`); a
//! collector task reduces each finished replicate to the sweep's metrics, stores the result and
//! sends `sweep_progress`, so the table can be read at any time, with runs still going counted as
//! pending.
//!
//! A sweep is kept as [`SweepData`] — layout, metric definitions, baseline, interval method and
//! results — which is also its store row and its entry in an export. Effects are not stored: the
//! table computes them from the results on every read (so sweeps stored before effects existed
//! get them too), and keeps the last ones until a result changes. A tree read back from the store (or imported) gets its
//! sweeps back; a replicate that was still pending is measured then if its node finished, and
//! otherwise ends with the node's status as its reason — except on a database a team shares
//! (runs as jobs), where the next leader carries a sweep whose server died on by itself
//! ([`Core::continue_sweeps`]): it waits for the replicates whose jobs it adopted and runs
//! again, with their seeds, those that were cut short (interrupted), each in its own slot, so
//! no replicate is counted twice.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use simtree_shared::{CellRow, EdgeType, Effect, FailedRun, IntervalKind, SweepStarted, SweepTable, TreeMsg};

use super::job::{Job, JobData, Jobs, Metrics, Ran, Replicate, Step, outcome};
use super::{Core, RequestError, RequestLimit, TreeHandle, WorkbenchError, lock};
use crate::store::Write;
use crate::sweep::{
    MAX_RUNS, Metric, Outcome, SweepError, SweepPlan, SweepSpec, bootstrap_seed, effects, summarise_runs,
};
use crate::tree::{NodeId, SimTree, TreeError};

service!(
    /// Sweeps and explorations laid out in trees: estimated, started, cancelled, resumed, read as tables.
    Studies
);

/// A tree's sweeps by id.
pub(super) type Sweeps = Jobs<SweepRecord>;

/// A sweep as it is stored and exported: its layout, metric definitions and, per replicate, what
/// its run gave.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepData {
    id: u64,
    parent: NodeId,
    turns: u64,
    /// The seed of replicate `k`, shared by every cell.
    seeds: Vec<u64>,
    /// Metric name → definition (`max:<var>`…), in the file's order.
    metrics: IndexMap<String, String>,
    /// The index of the cell the others' effects are measured against (absent in rows written
    /// before effects: the first cell).
    #[serde(default, skip_serializing_if = "is_zero")]
    baseline: usize,
    /// How the effects' intervals are made (absent: `t`).
    #[serde(default, skip_serializing_if = "IntervalKind::is_t")]
    interval: IntervalKind,
    cells: Vec<CellData>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CellData {
    cell: IndexMap<String, Value>,
    node: NodeId,
    /// Replicate `k` is `children[k]`; its result is `results[k]`.
    children: Vec<NodeId>,
    results: Vec<Replicate>,
}

/// A sweep in memory: its data and its metrics, parsed.
pub(super) struct SweepRecord {
    metrics: Vec<(String, Metric)>,
    data: Mutex<SweepData>,
    /// The effects of the last table, per cell, and the (measured, ended) counts they were
    /// computed at. A result only ever moves from pending to measured or ended, or from
    /// measured to ended, and each move raises `measured + 2 × ended`, so equal counts mean
    /// equal results.
    effects: Mutex<Option<((usize, usize), CellEffects)>>,
    /// Read back with replicates pending on a database that other processes share: the server
    /// that collected them died, and this one carries the sweep on ([`Core::continue_sweeps`]).
    orphan: AtomicBool,
}

/// Per cell, each metric's effect against the baseline (empty for the baseline).
type CellEffects = Vec<IndexMap<String, Effect>>;

impl SweepRecord {
    fn new(metrics: Vec<(String, Metric)>, data: SweepData) -> SweepRecord {
        SweepRecord { metrics, data: Mutex::new(data), effects: Mutex::new(None), orphan: AtomicBool::new(false) }
    }
}

impl SweepData {
    /// Checks a sweep read back from the store or an import against the tree it belongs to: its
    /// metrics parse, its grid is within bounds, and every node it names that is still there is
    /// where the layout says. Replicates whose node is gone end as deleted; `None` when the
    /// sweep's parent itself is gone (the sweep went with it).
    fn check_layout(&mut self, tree: &SimTree) -> Result<Option<Vec<(String, Metric)>>, SweepError> {
        let metrics = self
            .metrics
            .iter()
            .map(|(name, m)| {
                Metric::parse(m)
                    .map(|m| (name.clone(), m))
                    .map_err(|e| SweepError::Spec(format!("metrics.{name}: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let runs = self.cells.len() as u64 * self.seeds.len() as u64;
        if self.cells.is_empty() || self.seeds.is_empty() || runs > MAX_RUNS {
            return Err(SweepError::Spec(format!("a sweep has 1 to {MAX_RUNS} runs; this one has {runs}")));
        }
        if self.baseline >= self.cells.len() {
            return Err(SweepError::Spec(format!(
                "baseline: cell {} does not exist; the sweep has {} cells",
                self.baseline,
                self.cells.len()
            )));
        }
        if tree.node(self.parent).is_err() {
            return Ok(None);
        }
        let parent_of = |n: NodeId| tree.node(n).ok().map(|node| node.parent);
        for (i, c) in self.cells.iter_mut().enumerate() {
            let at = |what: String| SweepError::Spec(format!("cells[{i}]: {what}"));
            if c.children.len() != self.seeds.len() || c.results.len() != self.seeds.len() {
                return Err(at(format!("{} replicates expected", self.seeds.len())));
            }
            if c.results.iter().any(|r| matches!(r, Replicate::Done(v) if v.len() != metrics.len())) {
                return Err(at(format!("a result without exactly {} values", metrics.len())));
            }
            let cell_there = match parent_of(c.node) {
                None => false,
                Some(p) if p == Some(self.parent) => true,
                Some(_) => return Err(at(format!("node {} is not a child of node {}", c.node, self.parent))),
            };
            for (k, (&r, result)) in c.children.iter().zip(&mut c.results).enumerate() {
                match parent_of(r) {
                    Some(p) if cell_there && p == Some(c.node) => {}
                    Some(_) => {
                        return Err(at(format!("replicate {k} (node {r}) is not a child of node {}", c.node)));
                    }
                    None => *result = Replicate::Ended("deleted".into()),
                }
            }
        }
        Ok(Some(metrics))
    }
}

impl JobData for SweepData {
    const KIND: &'static str = "sweep";

    fn id(&self) -> u64 {
        self.id
    }

    fn parent(&self) -> NodeId {
        self.parent
    }

    type Mismatch = SweepError;

    fn check(&mut self, tree: &SimTree) -> Result<Option<Metrics>, SweepError> {
        self.check_layout(tree)
    }

    fn replicates(&mut self) -> Vec<(NodeId, &[NodeId], &mut Vec<Replicate>)> {
        self.cells.iter_mut().map(|c| (c.node, c.children.as_slice(), &mut c.results)).collect()
    }

    fn row(tree: u64, id: u64, body: String) -> Write {
        Write::Sweep { tree, id, body }
    }

    fn delete_row(tree: u64, id: u64) -> Write {
        Write::DeleteSweep { tree, id }
    }
}

impl Job for SweepRecord {
    type Data = SweepData;

    fn data(&self) -> &Mutex<SweepData> {
        &self.data
    }
}

/// Brings back a tree's stored or imported sweeps (see [`Jobs::restore`]). When `continues` (a
/// stored tree on a database a team shares, whose server died), a replicate whose run was cut
/// short stays pending, and a sweep with replicates pending waits for
/// [`Core::continue_sweeps`] to carry it on.
pub(super) fn restore_sweeps(handle: &TreeHandle, sweeps: Vec<SweepData>, continues: bool) {
    handle.sweeps.restore(handle, sweeps, continues, |metrics, data| {
        let pending = counts(&data).1 > 0;
        let record = SweepRecord::new(metrics, data);
        record.orphan.store(continues && pending, Ordering::SeqCst);
        record
    });
}

impl Studies<'_> {
    /// Lays out `spec` under its `parent` and starts every replicate; answers once they are
    /// attached and committed, not when they end.
    pub(crate) fn start_sweep(&self, tree: u64, spec: SweepSpec) -> Result<SweepStarted, WorkbenchError> {
        let handle = self.tree(tree)?;
        let parent = spec.parent.ok_or(RequestError::NoParent)?;
        if spec.prefix != 0 {
            return Err(RequestError::SweepPrefix.into());
        }
        let cells = spec.cells()?;
        let metrics = spec.metric_list()?;
        let baseline = spec.baseline_index(&cells)?;
        self.check_turns(spec.turns)?;
        // `cells()` bounds the product, so it cannot overflow.
        let runs = cells.len() * spec.replicates as usize;
        let max = self.limits.max_children_per_request;
        if runs as u64 > max {
            return Err(RequestLimit::SweepRuns { cells: cells.len(), replicates: spec.replicates, runs, max }.into());
        }
        let (cell_ids, pending) = {
            let mut t = handle.lock();
            if !spec.scenario.is_empty() && spec.scenario != t.scenario {
                return Err(
                    RequestError::OtherScenario { runs: t.scenario.clone(), asked: spec.scenario.clone() }.into()
                );
            }
            let nodes = cells.len() + runs;
            self.check_capacity(&t, nodes)?;
            if t.ids_left() < nodes as u64 {
                return Err(TreeError::IdsExhausted.into());
            }
            let cell_ids = t.branch_all(parent, cells.iter().map(|c| c.ops.clone()).collect())?;
            for &c in &cell_ids {
                t.mark_sweep(c)?;
                handle.persist_node(&mut t, c)?;
                handle.send(TreeMsg::Attached(t.node(c)?.attached()));
            }
            // Capacity and ids were checked for every node, so no attach below can fail.
            let mut pending = Vec::with_capacity(runs);
            for &c in &cell_ids {
                for k in 0..spec.replicates {
                    let mut p = Core::attach_run(&handle, &mut t, c, spec.turns, None, EdgeType::Sweep)?;
                    p.reseed(spec.seed_of(k));
                    // A cell's replicates are a fan-out from it (see `LlmState::fan_out`).
                    if spec.replicates > 1 {
                        p.spec.fan_out = Some(spec.replicates);
                    }
                    pending.push(p);
                }
            }
            (cell_ids, pending)
        };
        let per_cell = spec.replicates as usize;
        let children: Vec<Vec<NodeId>> = pending.chunks(per_cell).map(|c| c.iter().map(|p| p.id).collect()).collect();
        let record = handle.sweeps.add(|id| {
            SweepRecord::new(
                metrics,
                SweepData {
                    id,
                    parent,
                    turns: spec.turns,
                    seeds: (0..spec.replicates).map(|k| spec.seed_of(k)).collect(),
                    metrics: spec.metrics.clone(),
                    baseline,
                    interval: spec.interval,
                    cells: cells
                        .into_iter()
                        .zip(&cell_ids)
                        .zip(&children)
                        .map(|((cell, &node), kids)| CellData {
                            cell: cell.labels,
                            node,
                            children: kids.clone(),
                            results: vec![Replicate::Pending; per_cell],
                        })
                        .collect(),
                },
            )
        });
        let sweep = lock(&record.data).id;
        handle.sweeps.persist(&record, &handle);
        handle.flush()?;
        tracing::info!(tree, sweep, runs, "sweep started");
        let steps = pending.into_iter().enumerate().map(|(i, p)| (i / per_cell, i % per_cell, Step::Run(p))).collect();
        self.collect(handle, record, steps);
        Ok(SweepStarted { sweep, cells: cell_ids, children, total: runs })
    }

    /// What `spec` would cost (`?estimate=true`): its cells × replicates runs of `turns` from
    /// `parent`, checked as a start would check them; nothing is made.
    pub(crate) fn estimate_sweep(
        &self,
        tree: u64,
        spec: &SweepSpec,
    ) -> Result<simtree_shared::Estimate, WorkbenchError> {
        let parent = spec.parent.ok_or(RequestError::NoParent)?;
        let cells = spec.cells()?;
        spec.baseline_index(&cells)?;
        let runs = cells.len() as u64 * spec.replicates;
        super::Usage(self.0).estimate(
            tree,
            parent,
            spec.turns,
            runs,
            spec.replicates,
            &format!("sweep of {} cells", cells.len()),
        )
    }

    /// The table of sweep `id` as it stands; `None` when the tree has no such sweep.
    pub(crate) fn sweep_table(&self, tree: u64, id: u64) -> Result<Option<SweepTable>, WorkbenchError> {
        let handle = self.tree(tree)?;
        Ok(handle.sweeps.get(id).map(|r| self.priced(&handle, r.table())))
    }

    /// `table` with each cell's money: what its replicates' recorded calls cost.
    fn priced(&self, handle: &TreeHandle, mut table: SweepTable) -> SweepTable {
        let t = handle.lock();
        for c in &mut table.cells {
            let records = c.children.iter().filter_map(|&n| t.node(n).ok()).flat_map(|n| &n.records);
            c.money = self.prices.money_of(records);
        }
        table
    }
}

impl Core {
    /// Every sweep of a tree as stored, for an export.
    pub(crate) fn sweep_data(&self, tree: u64) -> Result<Vec<SweepData>, WorkbenchError> {
        Ok(self.tree(tree)?.sweeps.data())
    }
}

impl Studies<'_> {
    /// Every sweep of a tree, oldest first.
    pub(crate) fn sweep_tables(&self, tree: u64) -> Result<Vec<SweepTable>, WorkbenchError> {
        let handle = self.tree(tree)?;
        Ok(handle.sweeps.all().iter().map(|r| self.priced(&handle, r.table())).collect())
    }
}

impl Core {
    /// Starts every step (a replicate's run, or the wait for one adopted), then, as each ends
    /// (in whatever order), stores its metrics and announces the sweep's progress. When a
    /// cell's last step ends, its fan-out ends (its explicit caches are deleted).
    fn collect(&self, handle: Arc<TreeHandle>, record: Arc<SweepRecord>, steps: Vec<(usize, usize, Step)>) {
        let cells: Vec<NodeId> = lock(&record.data).cells.iter().map(|c| c.node).collect();
        let mut left = vec![0usize; cells.len()];
        let mut set = tokio::task::JoinSet::new();
        for (c, k, step) in steps {
            left[c] += 1;
            let (_, ran) = self.start_step(&handle, step);
            set.spawn(async move { (c, k, ran.await) });
        }
        let backend = self.backend.clone();
        tokio::spawn(async move {
            while let Some(joined) = set.join_next().await {
                // A step that panicked leaves its cell's caches to expire by themselves.
                let Ok((c, k, ran)) = joined else { continue };
                record_result(&handle, &record, c, k, ran);
                left[c] -= 1;
                if left[c] == 0 {
                    backend.end_fan_out(crate::sim::affinity_of(handle.id, cells[c])).await;
                }
            }
        });
    }

    /// Carries on, without anyone asking, the sweeps of `handle`'s tree whose server died while
    /// their replicates ran (read back with replicates pending, see [`restore_sweeps`]): the
    /// replicates whose jobs this server adopted (still running on workers) are waited for, and
    /// those cut short (interrupted: they ran in the dead process, or their job was gone) run
    /// again as new children of their cell with their replicate's seed, taking its slot. Each
    /// slot holds one result, so nothing is counted twice.
    pub(super) fn continue_sweeps(&self, handle: &Arc<TreeHandle>) {
        for record in handle.sweeps.all() {
            if !record.orphan.swap(false, Ordering::SeqCst) {
                continue;
            }
            let id = lock(&record.data).id;
            match self.carry_sweep_on(handle, &record) {
                Ok((rerun, awaited)) => {
                    tracing::info!(
                        tree = handle.id,
                        sweep = id,
                        rerun,
                        awaited,
                        "sweep carried on from the last server"
                    )
                }
                Err(e) => {
                    tracing::warn!(tree = handle.id, sweep = id, error = %e, "a sweep the last server ran cannot be carried on; its cut-short replicates end");
                    {
                        let t = handle.lock();
                        let mut d = lock(&record.data);
                        let why = format!("interrupted, and the next server could not run it again: {e}");
                        for (c, k) in pending_slots(&d) {
                            if t.node(d.cells[c].children[k]).is_ok_and(|n| !n.status.is_running()) {
                                d.cells[c].results[k] = Replicate::Ended(why.clone());
                            }
                        }
                    }
                    handle.sweeps.persist(&record, handle);
                }
            }
        }
    }

    /// [`Self::continue_sweeps`] for one sweep: attaches the re-runs (all or none), stores the
    /// row naming them, then starts them and waits for the adopted runs. Gives how many runs
    /// again and how many are waited for.
    fn carry_sweep_on(
        &self,
        handle: &Arc<TreeHandle>,
        record: &Arc<SweepRecord>,
    ) -> Result<(usize, usize), WorkbenchError> {
        let steps = {
            let mut t = handle.lock();
            let mut d = lock(&record.data);
            let slots = pending_slots(&d);
            let cut: Vec<(usize, usize)> = slots
                .iter()
                .copied()
                .filter(|&(c, k)| t.node(d.cells[c].children[k]).is_ok_and(|n| !n.status.is_running()))
                .collect();
            self.check_capacity(&t, cut.len())?;
            if t.ids_left() < cut.len() as u64 {
                return Err(TreeError::IdsExhausted.into());
            }
            if let Some(&(c, _)) = cut.iter().find(|&&(c, _)| t.node(d.cells[c].node).is_err()) {
                return Err(WorkbenchError::CellGone(c));
            }
            // Capacity and ids were checked, and every cell is there: no attach can fail.
            let mut steps = Vec::with_capacity(slots.len());
            for (c, k) in slots {
                let node = d.cells[c].children[k];
                if !cut.contains(&(c, k)) {
                    steps.push((c, k, Step::Await(node)));
                    continue;
                }
                let cell = d.cells[c].node;
                let mut p = Core::attach_run(handle, &mut t, cell, d.turns, None, EdgeType::Sweep)?;
                p.reseed(d.seeds[k]);
                d.cells[c].children[k] = p.id;
                steps.push((c, k, Step::Run(p)));
            }
            steps
        };
        handle.sweeps.persist(record, handle);
        handle.flush()?;
        let rerun = steps.iter().filter(|(_, _, s)| matches!(s, Step::Run(_))).count();
        let awaited = steps.len() - rerun;
        self.collect(handle.clone(), record.clone(), steps);
        Ok((rerun, awaited))
    }
}

/// The (cell, replicate) slots still pending.
fn pending_slots(d: &SweepData) -> Vec<(usize, usize)> {
    d.cells
        .iter()
        .enumerate()
        .flat_map(|(c, cell)| {
            cell.results.iter().enumerate().filter(|(_, r)| matches!(r, Replicate::Pending)).map(move |(k, _)| (c, k))
        })
        .collect()
}

/// Stores what replicate `k` of cell `c` gave and announces the sweep's progress.
fn record_result(handle: &TreeHandle, record: &Arc<SweepRecord>, c: usize, k: usize, ran: Ran) {
    let cell = lock(&record.data).cells[c].node;
    let result = outcome(handle, &record.metrics, cell, ran);
    lock(&record.data).cells[c].results[k] = result;
    handle.sweeps.persist(record, handle);
    let (sweep, (done, pending, failed)) = {
        let d = lock(&record.data);
        (d.id, counts(&d))
    };
    handle.send(TreeMsg::SweepProgress {
        sweep,
        done: done as u64,
        failed: failed as u64,
        total: (done + pending + failed) as u64,
    });
}

impl SweepRecord {
    fn table(&self) -> SweepTable {
        let data = lock(&self.data).clone();
        let (done, pending, failed) = counts(&data);
        let effects = self.effects(&data, (done, failed));
        let cells = data
            .cells
            .into_iter()
            .zip(effects)
            .map(|(c, effects)| {
                let values: Vec<Option<&Vec<Value>>> = c
                    .results
                    .iter()
                    .map(|r| match r {
                        Replicate::Done(v) => Some(v),
                        _ => None,
                    })
                    .collect();
                let failed: Vec<FailedRun> = c
                    .results
                    .iter()
                    .zip(&c.children)
                    .filter_map(|(r, &node)| match r {
                        Replicate::Ended(error) => Some(FailedRun { node, error: error.clone() }),
                        _ => None,
                    })
                    .collect();
                let pending = c.results.iter().filter(|r| matches!(r, Replicate::Pending)).count();
                CellRow {
                    metrics: summarise_runs(&self.metrics, &values),
                    cell: c.cell,
                    node: c.node,
                    children: c.children,
                    pending,
                    failed,
                    effects,
                    money: None,
                }
            })
            .collect();
        SweepTable {
            sweep: data.id,
            parent: data.parent,
            turns: data.turns,
            seeds: data.seeds,
            metrics: data.metrics,
            total: done + pending + failed,
            done,
            pending,
            failed,
            baseline: data.baseline,
            interval: data.interval,
            cells,
        }
    }

    /// Each cell's effects against the baseline (none for the baseline itself), from the last
    /// table's when no result has changed since.
    fn effects(&self, data: &SweepData, at: (usize, usize)) -> CellEffects {
        if let Some((when, effects)) = &*lock(&self.effects)
            && *when == at
        {
            return effects.clone();
        }
        let base = outcomes(&data.cells[data.baseline]);
        let seed = data.seeds.first().copied().unwrap_or(0);
        let all: CellEffects = data
            .cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i == data.baseline {
                    IndexMap::new()
                } else {
                    effects(&self.metrics, &base, &outcomes(c), data.interval, |m| bootstrap_seed(seed, i, m))
                }
            })
            .collect();
        *lock(&self.effects) = Some((at, all.clone()));
        all
    }
}

/// Where each replicate of a cell stands, for pairing.
fn outcomes(c: &CellData) -> Vec<Outcome<'_>> {
    c.results
        .iter()
        .map(|r| match r {
            Replicate::Pending => Outcome::Pending,
            Replicate::Ended(_) => Outcome::Ended,
            Replicate::Done(v) => Outcome::Done(v),
        })
        .collect()
}

/// A sweep's replicates measured, still running and ended without a result.
fn counts(data: &SweepData) -> (usize, usize, usize) {
    let mut n = (0, 0, 0);
    for r in data.cells.iter().flat_map(|c| &c.results) {
        match r {
            Replicate::Done(_) => n.0 += 1,
            Replicate::Pending => n.1 += 1,
            Replicate::Ended(_) => n.2 += 1,
        }
    }
    n
}
