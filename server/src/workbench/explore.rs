//! Explorations inside a tree: the successive halving of [`crate::explore`] laid out as nodes.
//! Each candidate is a branch of the exploration's `parent` (its ops applied), each replicate an
//! advance child of its candidate reseeded to `seed + k`; both have edge type `explore`, so the
//! graph shows (and a client can filter) what an exploration made.
//!
//! Starting is all or nothing (the body, the limits and every candidate's ops are checked, the
//! candidates attached and committed before the reply); the rounds are then driven by a task the
//! server owns. A round's runs are reserved (counted in `runs_used`) when they are attached,
//! before any starts, so the runs budget is never passed; the token and money caps are a budget
//! of the exploration's own within the tree's ([`TreeBudget::inside`]; with jobs on, booked in
//! the database as a part of the tree's book, so its replicates run on any process), which refuses a provider
//! call that might pass them. After every replicate the row is rewritten and `explore_progress`
//! goes out on the tree socket.
//!
//! A row read back after a restart is `interrupted` if it was running: what finished is kept
//! (replicates whose node finished are measured then) and nothing resumes by itself — except on
//! a database a team shares (runs as jobs): there the next leader carries it on by itself
//! ([`Core::continue_explores`]), waiting for the replicates whose jobs it adopted and
//! running again, within the reservation already counted, those that were cut short.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use simtree_shared::{
    CandidateRow, EdgeType, ExploreBest, ExploreBudget, ExploreGoal, ExploreStarted, ExploreStatus, ExploreTable,
    IntervalKind, NodeStatus, Objective, TreeMsg,
};

use super::job::{Job, JobData, Jobs, Metrics, Replicate, Step, outcome};
use super::sweep::Studies;
use super::{Core, MoneyShortfall, RequestLimit, TreeHandle, WorkbenchError, lock};
use crate::explore::{ExploreSpec, MAX_CANDIDATES, mean_ci, next_round, rank, survivors};
use crate::llm::budget::{Limits as BudgetLimits, TreeBudget};
use crate::store::Write;
use crate::store::jobs::BudgetKey;
use crate::sweep::{MAX_RUNS, Metric, paired};
use crate::tree::{NodeId, SimTree, TreeError};

/// A tree's explorations by id.
pub(super) type Explores = Jobs<ExploreRecord>;

/// An exploration as it is stored: its candidates, their replicates and results, and where
/// the schedule stands.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExploreData {
    id: u64,
    parent: NodeId,
    turns: u64,
    seed: u64,
    objective: Objective,
    /// Replicates of every candidate in the first round.
    replicates: u64,
    budget: ExploreBudget,
    /// The most runs it may start (its runs budget or its whole schedule).
    run_cap: u64,
    status: ExploreStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    round: u32,
    /// The last round whose candidates were ranked (absent in rows written before resuming
    /// existed: inferred when one is resumed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ranked: Option<u32>,
    runs_used: u64,
    candidates: Vec<CandidateData>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CandidateData {
    point: IndexMap<String, Value>,
    node: NodeId,
    /// Replicate `k` (seed `seed + k`) is `children[k]`; its result `results[k]`.
    children: Vec<NodeId>,
    results: Vec<Replicate>,
    /// The round after which it was halved away.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dropped_after: Option<u32>,
}

/// An exploration in memory.
pub(super) struct ExploreRecord {
    /// The objective, as the sweep's measuring wants it (one metric).
    metrics: Vec<(String, Metric)>,
    data: Mutex<ExploreData>,
    /// Set to stop it (a cancel, or its parent deleted).
    stop: AtomicBool,
    /// The exploration's token/money caps, within the tree's budget (`None`: the tree's alone).
    budget: Option<Arc<TreeBudget>>,
    /// Turns true when its driver has stopped.
    finished: tokio::sync::watch::Sender<bool>,
    /// Read back `running` on a database that other processes share: the server that drove it
    /// died, and this one carries it on ([`Core::continue_explores`]).
    orphan: AtomicBool,
}

impl ExploreRecord {
    fn new(metrics: Metrics, data: ExploreData, budget: Option<Arc<TreeBudget>>) -> ExploreRecord {
        ExploreRecord {
            metrics,
            data: Mutex::new(data),
            stop: AtomicBool::new(false),
            budget,
            finished: tokio::sync::watch::channel(false).0,
            orphan: AtomicBool::new(false),
        }
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    fn progress(&self, handle: &TreeHandle) {
        let d = lock(&self.data);
        handle.send(TreeMsg::ExploreProgress {
            explore: d.id,
            status: d.status,
            round: d.round,
            runs_used: d.runs_used,
            alive: d.candidates.iter().filter(|c| c.dropped_after.is_none()).count(),
        });
    }
}

/// A candidate's objective values (replicates with a number), in replicate order with their
/// replicate index.
fn values(c: &CandidateData) -> Vec<(usize, f64)> {
    c.results
        .iter()
        .enumerate()
        .filter_map(|(k, r)| match r {
            Replicate::Done(v) => number(v.first()?).map(|x| (k, x)),
            _ => None,
        })
        .collect()
}

fn number(v: &Value) -> Option<f64> {
    v.as_f64().or_else(|| v.as_bool().map(|b| f64::from(u8::from(b))))
}

fn mean_of(c: &CandidateData) -> Option<f64> {
    let v: Vec<f64> = values(c).into_iter().map(|(_, x)| x).collect();
    mean_ci(&v).mean_diff
}

impl ExploreData {
    /// The table of `GET …/explore/{id}` (money and tokens are the workbench's to add).
    fn table(&self) -> ExploreTable {
        let candidates: Vec<CandidateRow> = self
            .candidates
            .iter()
            .map(|c| {
                let v: Vec<f64> = values(c).into_iter().map(|(_, x)| x).collect();
                let e = mean_ci(&v);
                CandidateRow {
                    point: c.point.clone(),
                    n: v.len(),
                    mean: e.mean_diff,
                    ci95: e.ci95,
                    alive: c.dropped_after.is_none(),
                    dropped_after: c.dropped_after,
                    node: c.node,
                    children: c.children.clone(),
                    pending: c.results.iter().filter(|r| matches!(r, Replicate::Pending)).count(),
                    failed: c.results.iter().filter(|r| matches!(r, Replicate::Ended(_))).count(),
                }
            })
            .collect();
        ExploreTable {
            explore: self.id,
            parent: self.parent,
            turns: self.turns,
            seed: self.seed,
            objective: self.objective.clone(),
            status: self.status,
            reason: self.reason.clone(),
            round: self.round,
            runs_used: self.runs_used,
            money_used: None,
            tokens_used: 0,
            budget: self.budget,
            best: self.best(&candidates),
            candidates,
        }
    }

    /// The best candidate: the best mean among those still alive (the last to be dropped when
    /// none is), with its margin over the runner-up — the next in the order the race left them
    /// (alive first, then the later dropped), by mean.
    fn best(&self, rows: &[CandidateRow]) -> Option<ExploreBest> {
        let goal = self.objective.goal;
        let mut order: Vec<usize> = (0..rows.len()).filter(|&i| rows[i].mean.is_some()).collect();
        let means: Vec<(usize, Option<f64>)> = order.iter().map(|&i| (i, rows[i].mean)).collect();
        let by_mean = rank(&means, goal);
        let place: BTreeMap<usize, usize> = by_mean.iter().enumerate().map(|(p, &i)| (i, p)).collect();
        // Alive first, then by the round each was dropped after (later first), then by mean.
        order.sort_by_key(|&i| {
            let dropped = self.candidates[i].dropped_after.map_or(u32::MAX, |r| r);
            (std::cmp::Reverse(dropped), place[&i])
        });
        let (&b, rest) = order.split_first()?;
        let row = &rows[b];
        let margin = rest.first().map(|&r| {
            let best: BTreeMap<usize, f64> = values(&self.candidates[b]).into_iter().collect();
            let diffs: Vec<f64> = values(&self.candidates[r])
                .into_iter()
                .filter_map(|(k, x)| {
                    let y = best.get(&k)?;
                    Some(match goal {
                        ExploreGoal::Min => x - y,
                        ExploreGoal::Max => y - x,
                    })
                })
                .collect();
            paired(&diffs, IntervalKind::T, 0)
        });
        Some(ExploreBest {
            point: row.point.clone(),
            mean: row.mean?,
            ci95: row.ci95,
            n: row.n,
            node: row.node,
            margin,
        })
    }

    /// Checks a row read back (or imported) against its tree; `None` when its parent is gone.
    /// Its bounds hold (candidates, runs, one value per result), and every node it names that
    /// is still there is where the layout says. Replicates and candidates whose node went end
    /// as deleted.
    fn check_layout(&mut self, tree: &SimTree) -> Result<Option<Metric>, RowMismatch> {
        let metric = Metric::parse(&self.objective.metric).map_err(RowMismatch::Metric)?;
        if self.candidates.is_empty() || self.candidates.len() > MAX_CANDIDATES {
            return Err(RowMismatch::Candidates(self.candidates.len()));
        }
        if self.run_cap > MAX_RUNS || self.runs_used > self.run_cap {
            return Err(RowMismatch::Runs { used: self.runs_used, cap: self.run_cap });
        }
        if self.ranked.is_some_and(|r| r > self.round) {
            return Err(RowMismatch::Ranked);
        }
        if tree.node(self.parent).is_err() {
            return Ok(None);
        }
        let parent_of = |n: NodeId| tree.node(n).ok().map(|node| node.parent);
        for (i, c) in self.candidates.iter_mut().enumerate() {
            if c.children.len() != c.results.len() {
                return Err(RowMismatch::Replicates(i));
            }
            if c.children.len() as u64 > self.run_cap {
                return Err(RowMismatch::TooMany { i, cap: self.run_cap });
            }
            if c.results.iter().any(|r| matches!(r, Replicate::Done(v) if v.len() != 1)) {
                return Err(RowMismatch::Values(i));
            }
            let there = match parent_of(c.node) {
                None => false,
                Some(p) if p == Some(self.parent) => true,
                Some(_) => {
                    return Err(RowMismatch::NotAChild { i, node: c.node, parent: self.parent });
                }
            };
            if !there && c.dropped_after.is_none() {
                c.dropped_after = Some(self.round);
            }
            for (k, (&n, r)) in c.children.iter().zip(&mut c.results).enumerate() {
                match parent_of(n) {
                    Some(p) if there && p == Some(c.node) => {}
                    Some(_) => {
                        return Err(RowMismatch::ReplicateNotAChild { i, k, node: n, parent: c.node });
                    }
                    None => {
                        if !matches!(r, Replicate::Ended(_)) {
                            *r = Replicate::Ended("deleted".into());
                        }
                    }
                }
            }
        }
        Ok(Some(metric))
    }
}

/// Why a stored or imported exploration's row does not fit its tree.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RowMismatch {
    #[error("objective.metric: {0}")]
    Metric(crate::sweep::SweepError),
    #[error("candidates: {0} of them; an exploration has 1 to {MAX_CANDIDATES}")]
    Candidates(usize),
    #[error("runs_used: {used} of a cap of {cap} (at most {MAX_RUNS})")]
    Runs { used: u64, cap: u64 },
    #[error("ranked: a round after the current one")]
    Ranked,
    #[error("candidates[{0}]: its replicates and results disagree")]
    Replicates(usize),
    #[error("candidates[{i}]: more replicates than the cap of {cap} runs")]
    TooMany { i: usize, cap: u64 },
    #[error("candidates[{0}]: a result without exactly one value")]
    Values(usize),
    #[error("candidates[{i}]: node {node} is not a child of node {parent}")]
    NotAChild { i: usize, node: NodeId, parent: NodeId },
    #[error("candidates[{i}]: replicate {k} (node {node}) is not a child of node {parent}")]
    ReplicateNotAChild { i: usize, k: usize, node: NodeId, parent: NodeId },
}

/// Why an exploration ends instead of starting another round (its `reason`, as stored).
#[derive(Debug, thiserror::Error)]
enum RoundEnd {
    #[error("one candidate is left")]
    OneLeft,
    #[error("the run budget cannot pay for another round ({used} of {cap} runs used)")]
    RunsSpent { used: u64, cap: u64 },
    /// Round `round` could not be attached (the tree's capacity, its ids, a run refused).
    #[error("round {round} could not start: {why}")]
    CannotStart { round: u32, why: WorkbenchError },
    #[error("candidate {0}'s node is gone")]
    CandidateGone(usize),
}

impl JobData for ExploreData {
    const KIND: &'static str = "exploration";

    fn id(&self) -> u64 {
        self.id
    }

    fn parent(&self) -> NodeId {
        self.parent
    }

    type Mismatch = RowMismatch;

    fn check(&mut self, tree: &SimTree) -> Result<Option<Metrics>, RowMismatch> {
        Ok(self.check_layout(tree)?.map(objective))
    }

    fn replicates(&mut self) -> Vec<(NodeId, &[NodeId], &mut Vec<Replicate>)> {
        self.candidates.iter_mut().map(|c| (c.node, c.children.as_slice(), &mut c.results)).collect()
    }

    fn row(tree: u64, id: u64, body: String) -> Write {
        Write::Explore { tree, id, body }
    }

    fn delete_row(tree: u64, id: u64) -> Write {
        Write::DeleteExplore { tree, id }
    }
}

impl Job for ExploreRecord {
    type Data = ExploreData;

    fn data(&self) -> &Mutex<ExploreData> {
        &self.data
    }

    /// Its driver starts no other round.
    fn dropped(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// The objective as the sweep's measuring wants it: one metric.
fn objective(metric: Metric) -> Metrics {
    vec![("objective".to_string(), metric)]
}

impl Explores {
    /// Stops every exploration (its tree is being deleted): none starts another round.
    pub(super) fn stop_all(&self) {
        for r in self.all() {
            r.dropped();
        }
    }
}

/// Brings back a tree's stored or imported explorations (see [`Jobs::restore`]); one that was
/// running reads as interrupted, unless `continues` (a stored tree on a database shared by a
/// team, whose server died): then it stays running and waits for
/// [`Core::continue_explores`] to carry it on.
pub(super) fn restore_explores(handle: &TreeHandle, explores: Vec<ExploreData>, continues: bool) {
    handle.explores.restore(handle, explores, false, |metrics, mut data| {
        let orphan = data.status == ExploreStatus::Running && continues;
        if data.status == ExploreStatus::Running && !continues {
            data.status = ExploreStatus::Interrupted;
            data.reason = Some("the server stopped while it ran; what finished before is kept".into());
        }
        let record = ExploreRecord::new(metrics, data, None);
        record.orphan.store(orphan, Ordering::SeqCst);
        if !orphan {
            record.finished.send_replace(true);
        }
        record
    });
}

impl Core {
    /// Checks an exploration as a start would: its body, its tree, its parent and the limits;
    /// gives its candidates (cells) and its metric, and the most runs it may start.
    fn check_explore(
        &self,
        tree: u64,
        spec: &ExploreSpec,
    ) -> Result<(Vec<crate::sweep::Cell>, Metric, u64), WorkbenchError> {
        let (cells, metric) = spec.check()?;
        self.check_turns(spec.turns)
            .map_err(|_| RequestLimit::ExploreTurns { max: self.limits.max_turns_per_request })?;
        let handle = self.tree(tree)?;
        handle.lock().node(spec.parent)?;
        let cap = spec.run_cap(cells.len());
        let max = self.limits.max_children_per_request;
        if cap > max {
            return Err(RequestLimit::ExploreRuns { cap, max }.into());
        }
        Ok((cells, metric, cap))
    }
}

impl Studies<'_> {
    /// What `spec` may cost at most (`?estimate=true`): its cap of runs of `turns` from
    /// `parent`, with a warning when its money cannot pay for one call of each candidate (a
    /// start would be refused) or is below the estimate. Nothing is made.
    pub(crate) async fn estimate_explore(
        &self,
        tree: u64,
        spec: &ExploreSpec,
    ) -> Result<simtree_shared::Estimate, WorkbenchError> {
        let (cells, _, cap) = self.check_explore(tree, spec)?;
        let mut e = super::Usage(self.0).estimate(
            tree,
            spec.parent,
            spec.turns,
            cap,
            // A round's replicates of a candidate are a fan-out; at most cap / FAN_OUT_SHARED of
            // them are large enough to store their prefix in an explicit cache.
            crate::llm::cache::FAN_OUT_SHARED,
            &format!("exploration of {} candidates", cells.len()),
        )?;
        e.basis = format!("the worst case: all {cap} runs it may start. {}", e.basis);
        e.warning = match self.explore_money_shortfall(tree, spec).await? {
            Some(why) => Some(format!("a start would be refused: {why}")),
            None => match (self.explore_money(tree, spec)?, e.money) {
                (Some((left, whose)), Some(m)) if m > left => Some(format!(
                    "{whose} (${left:.4}) is below this estimate (${m:.4}): the exploration ends when its money \
                     is spent, before its schedule does"
                )),
                _ => None,
            },
        };
        Ok(e)
    }
}

impl Core {
    /// Exploration `id`'s own token and money caps (`budget`), charged within its tree's budget;
    /// `None` when it has neither. With jobs on they are booked in the database (part of the
    /// tree's book), so its replicates run as jobs on any process and charge them together.
    fn explore_budget(&self, handle: &TreeHandle, id: u64, budget: ExploreBudget) -> Option<Arc<TreeBudget>> {
        let limits = BudgetLimits { tokens: budget.tokens, calls: None, money: budget.money };
        (!limits.is_empty()).then(|| {
            let own = self.booked_budget(BudgetKey::explore(handle.id, id), limits);
            Arc::new(own.inside(handle.budget.clone()))
        })
    }

    /// The money an exploration may spend and whose it is: its own `budget.money`, or what the
    /// tree's money budget has left when that is less; `None` when neither caps money.
    fn explore_money(&self, tree: u64, spec: &ExploreSpec) -> Result<Option<(f64, &'static str)>, WorkbenchError> {
        let left = self.tree(tree)?.budget.as_ref().and_then(|b| b.money_left());
        Ok(match (spec.budget.money, left) {
            (Some(own), Some(tree)) if tree < own => Some((tree, "what the tree's money budget has left")),
            (Some(own), _) => Some((own, "budget.money")),
            (None, Some(tree)) => Some((tree, "what the tree's money budget has left")),
            (None, None) => None,
        })
    }

    /// Why the money `spec` may spend cannot pay for one provider call of each candidate — the
    /// first call of its first replicate, at what a money cap holds before the call runs — or
    /// cannot bound those calls at all; `None` when it can (or nothing caps money). Such an
    /// exploration would have every call refused and measure nothing.
    async fn explore_money_shortfall(
        &self,
        tree: u64,
        spec: &ExploreSpec,
    ) -> Result<Option<MoneyShortfall>, WorkbenchError> {
        let Some((left, whose)) = self.explore_money(tree, spec)? else {
            return Ok(None);
        };
        let (cells, _, _) = self.check_explore(tree, spec)?;
        let branches: Vec<Vec<simtree_shared::Op>> = cells.into_iter().map(|c| c.ops).collect();
        let holds = self.first_call_holds(tree, spec.parent, &branches, spec.seed_of(0)).await?;
        if let Some((i, why)) = holds.iter().enumerate().find_map(|(i, h)| Some((i, h.as_ref()?.as_ref().err()?))) {
            return Ok(Some(MoneyShortfall::Unbounded { candidate: i, why: why.clone() }));
        }
        let priced: Vec<f64> = holds.into_iter().flatten().flatten().collect();
        let need: f64 = priced.iter().sum();
        if priced.is_empty() || need <= left {
            return Ok(None);
        }
        let most = priced.iter().copied().fold(0.0, f64::max);
        Ok(Some(MoneyShortfall::TooLittle { whose, left, n: priced.len(), most, need }))
    }
}

impl Studies<'_> {
    /// Attaches the candidates under `parent`, commits them and starts the rounds; answers
    /// before any run ends. Refused when its money cannot pay for one call of each candidate.
    pub(crate) async fn start_explore(&self, tree: u64, spec: ExploreSpec) -> Result<ExploreStarted, WorkbenchError> {
        self.check_explore(tree, &spec)?;
        if let Some(why) = self.explore_money_shortfall(tree, &spec).await? {
            return Err(why.into());
        }
        let (cells, metric, cap) = self.check_explore(tree, &spec)?;
        let handle = self.tree(tree)?;
        let parent = spec.parent;
        let cell_ids = {
            let mut t = handle.lock();
            let nodes = cells.len() + cap as usize;
            self.check_capacity(&t, nodes)?;
            if t.ids_left() < nodes as u64 {
                return Err(TreeError::IdsExhausted.into());
            }
            let ids = t.branch_all(parent, cells.iter().map(|c| c.ops.clone()).collect())?;
            for &c in &ids {
                t.mark_edge(c, EdgeType::Explore)?;
                handle.persist_node(&mut t, c)?;
                handle.send(TreeMsg::Attached(t.node(c)?.attached()));
            }
            ids
        };
        let record = handle.explores.add(|id| {
            let budget = self.explore_budget(&handle, id, spec.budget);
            let data = ExploreData {
                id,
                parent,
                turns: spec.turns,
                seed: spec.seed,
                objective: spec.objective.clone(),
                replicates: spec.replicates,
                budget: spec.budget,
                run_cap: cap,
                status: ExploreStatus::Running,
                reason: None,
                round: 0,
                ranked: Some(0),
                runs_used: 0,
                candidates: cells
                    .into_iter()
                    .zip(&cell_ids)
                    .map(|(c, &node)| CandidateData {
                        point: c.labels,
                        node,
                        children: Vec::new(),
                        results: Vec::new(),
                        dropped_after: None,
                    })
                    .collect(),
            };
            ExploreRecord::new(objective(metric), data, budget)
        });
        handle.explores.persist(&record, &handle);
        handle.flush()?;
        let explore = lock(&record.data).id;
        tracing::info!(tree, explore, cap, "exploration started");
        tokio::spawn(drive(Arc::clone(self.0), handle, record, None));
        Ok(ExploreStarted { explore, candidates: cell_ids })
    }

    /// Stops a running exploration: no new round starts and its running replicates are
    /// cancelled. Answers once it reads as cancelled.
    pub(crate) async fn cancel_explore(&self, tree: u64, id: u64) -> Result<ExploreTable, WorkbenchError> {
        let handle = self.tree(tree)?;
        let record = handle.explores.get(id).ok_or(WorkbenchError::ExplorationNotFound { tree, id })?;
        let pending: Vec<NodeId> = {
            let d = lock(&record.data);
            if d.status != ExploreStatus::Running {
                return Err(WorkbenchError::ExplorationNotRunning { id, status: d.status });
            }
            record.stop.store(true, Ordering::SeqCst);
            d.candidates
                .iter()
                .flat_map(|c| c.children.iter().zip(&c.results))
                .filter(|(_, r)| matches!(r, Replicate::Pending))
                .map(|(&n, _)| n)
                .collect()
        };
        for mut ended in handle.cancel(pending) {
            let _ = ended.wait_for(|e| *e).await;
        }
        let mut finished = record.finished.subscribe();
        let _ = tokio::time::timeout(std::time::Duration::from_secs(30), finished.wait_for(|f| *f)).await;
        Ok(self.explore_table_of(&handle, &record))
    }

    /// Carries an interrupted exploration on (see docs/explore.md): the replicates of its last
    /// round that the stop interrupted run again (same seeds, counted once: `runs_used` already
    /// holds them), that round is ranked, and the halving goes on within the original budget. The
    /// token and money caps start from what its recorded calls already used. Answers once the
    /// re-runs are attached and committed (409 when it is not interrupted).
    pub(crate) fn resume_explore(&self, tree: u64, id: u64) -> Result<ExploreTable, WorkbenchError> {
        let handle = self.tree(tree)?;
        let old = handle.explores.get(id).ok_or(WorkbenchError::ExplorationNotFound { tree, id })?;
        let record = self.carry_on(&handle, &old, ExploreStatus::Interrupted)?;
        tracing::info!(tree, explore = id, "exploration resumed");
        Ok(self.explore_table_of(&handle, &record))
    }
}

impl Core {
    /// Carries on, without anyone asking, the explorations of `handle`'s tree whose server died
    /// while they ran (read back `running`, see [`restore_explores`]): as a resume does, and
    /// waiting for the replicates whose jobs this server adopted (still running on workers)
    /// instead of running them again.
    pub(super) fn continue_explores(self: &Arc<Self>, handle: &Arc<TreeHandle>) {
        for record in handle.explores.all() {
            if !record.orphan.swap(false, Ordering::SeqCst) {
                continue;
            }
            let id = lock(&record.data).id;
            match self.carry_on(handle, &record, ExploreStatus::Running) {
                Ok(_) => tracing::info!(tree = handle.id, explore = id, "exploration carried on from the last server"),
                Err(e) => {
                    tracing::warn!(tree = handle.id, explore = id, error = %e, "an exploration the last server ran cannot be carried on; it reads as interrupted");
                    let mut d = lock(&record.data);
                    d.status = ExploreStatus::Interrupted;
                    d.reason =
                        Some(format!("the server stopped while it ran, and the next could not carry it on: {e}"));
                    drop(d);
                    record.write_row(handle);
                    record.finished.send_replace(true);
                }
            }
        }
    }

    /// Starts a new driver for exploration `old`, which must be `expected` (interrupted for a
    /// resume, running for one whose server died): the replicates of its last round that were
    /// cut short (interrupted) run again (same seeds, counted once: `runs_used` already holds
    /// them), those still running are waited for, that round is ranked, and the halving goes on
    /// within the original budget. The token and money caps start from what its recorded calls
    /// already used. Returns once the re-runs are attached and committed.
    fn carry_on(
        self: &Arc<Self>,
        handle: &Arc<TreeHandle>,
        old: &Arc<ExploreRecord>,
        expected: ExploreStatus,
    ) -> Result<Arc<ExploreRecord>, WorkbenchError> {
        let spent = self.explore_table_of(handle, old);
        let (record, rerun) = {
            let mut t = handle.lock();
            let mut d = lock(&old.data).clone();
            let id = d.id;
            // A resume that came first (under this same lock) has replaced the record.
            let current = handle.explores.get(id).is_some_and(|r| Arc::ptr_eq(&r, old));
            if !current || d.status != expected {
                return Err(WorkbenchError::ExplorationNotInterrupted { id, status: d.status });
            }
            let ranked = d.ranked.unwrap_or_else(|| inferred_ranked(&d));
            // The replicates of the round not yet ranked that the stop cut short, and those
            // still running (adopted jobs).
            let of_round = |status: NodeStatus| -> Vec<(usize, usize)> {
                if ranked >= d.round {
                    return Vec::new();
                }
                d.candidates
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| c.dropped_after.is_none() && t.node(c.node).is_ok())
                    .flat_map(|(i, c)| {
                        let t = &t;
                        c.children.iter().enumerate().filter_map(move |(k, &n)| {
                            let hit = t.node(n).is_ok_and(|n| n.status == status);
                            hit.then_some((i, k))
                        })
                    })
                    .collect()
            };
            let cut = of_round(NodeStatus::Interrupted);
            let running = of_round(NodeStatus::Running);
            self.check_capacity(&t, cut.len())?;
            if t.ids_left() < cut.len() as u64 {
                return Err(TreeError::IdsExhausted.into());
            }
            let budget = self.explore_budget(handle, id, d.budget);
            if let Some(b) = &budget {
                b.already_spent(spent.tokens_used, spent.money_used.unwrap_or(0.0));
            }
            // Capacity and ids were checked, and every candidate is there: no attach can fail.
            let mut runs = Vec::with_capacity(cut.len() + running.len());
            for (i, k) in cut {
                let cell = d.candidates[i].node;
                let mut p = Core::attach_run(handle, &mut t, cell, d.turns, None, EdgeType::Explore)?;
                p.reseed(d.seed.wrapping_add(k as u64));
                p.budget = budget.clone();
                d.candidates[i].children[k] = p.id;
                d.candidates[i].results[k] = Replicate::Pending;
                runs.push((i, k, d.candidates[i].node, Step::Run(p)));
            }
            for (i, k) in running {
                let node = d.candidates[i].children[k];
                d.candidates[i].results[k] = Replicate::Pending;
                runs.push((i, k, d.candidates[i].node, Step::Await(node)));
            }
            d.status = ExploreStatus::Running;
            d.reason = None;
            d.ranked = Some(ranked);
            let unranked = ranked < d.round;
            let record = Arc::new(ExploreRecord::new(old.metrics.clone(), d, budget));
            handle.explores.replace(id, record.clone());
            (record, unranked.then_some(runs))
        };
        handle.explores.persist(&record, handle);
        handle.flush()?;
        tokio::spawn(drive(self.clone(), handle.clone(), record.clone(), rerun));
        Ok(record)
    }
}

impl Studies<'_> {
    pub(crate) fn explore_table(&self, tree: u64, id: u64) -> Result<Option<ExploreTable>, WorkbenchError> {
        let handle = self.tree(tree)?;
        Ok(handle.explores.get(id).map(|r| self.explore_table_of(&handle, &r)))
    }
}

impl Core {
    /// Every exploration of a tree as stored, for an export.
    pub(crate) fn explore_data(&self, tree: u64) -> Result<Vec<ExploreData>, WorkbenchError> {
        Ok(self.tree(tree)?.explores.data())
    }
}

impl Studies<'_> {
    /// Every exploration of a tree, oldest first.
    pub(crate) fn explore_tables(&self, tree: u64) -> Result<Vec<ExploreTable>, WorkbenchError> {
        let handle = self.tree(tree)?;
        Ok(handle.explores.all().iter().map(|r| self.explore_table_of(&handle, r)).collect())
    }
}

impl Core {
    /// The table with what the exploration's runs' recorded provider calls used and cost.
    fn explore_table_of(&self, handle: &TreeHandle, record: &ExploreRecord) -> ExploreTable {
        let mut table = lock(&record.data).table();
        let t = handle.lock();
        let records: Vec<_> = table
            .candidates
            .iter()
            .flat_map(|c| &c.children)
            .filter_map(|&n| t.node(n).ok())
            .flat_map(|n| &n.records)
            .collect();
        table.tokens_used = records.iter().map(|r| r.prompt_tokens + r.completion_tokens).sum();
        table.money_used = self.prices.money_of(records.iter().copied());
        table
    }
}

/// Runs the rounds of an exploration until one candidate is left, the budget cannot pay for
/// another round, or it is stopped; then records how it ended.
/// `resumed`: the runs of a round that was attached before the server stopped, to finish (and
/// rank) before any other round.
async fn drive(wb: Arc<Core>, handle: Arc<TreeHandle>, record: Arc<ExploreRecord>, mut resumed: Option<Vec<RoundRun>>) {
    let reason = loop {
        if record.stopped() {
            break None;
        }
        let round = match resumed.take().map_or_else(|| attach_round(&wb, &handle, &record), |r| Ok(Some(r))) {
            Ok(Some(round)) => round,
            Ok(None) => break None,
            Err(why) => break Some(why.to_string()),
        };
        handle.explores.persist(&record, &handle);
        if let Err(e) = handle.flush_async().await {
            tracing::error!(tree = handle.id, "an exploration's round could not be stored: {e}");
        }
        record.progress(&handle);
        let mut set = tokio::task::JoinSet::new();
        let mut nodes = Vec::with_capacity(round.len());
        for (c, k, cell, step) in round {
            let (node, ran) = wb.start_step(&handle, step);
            nodes.push(node);
            set.spawn(async move { (c, k, cell, ran.await) });
        }
        // A cancel that came while the round was being started reaches its runs here.
        if record.stopped() {
            handle.cancel(nodes);
        }
        let mut cells = std::collections::BTreeSet::new();
        while let Some(joined) = set.join_next().await {
            let Ok((c, k, cell, ran)) = joined else { continue };
            cells.insert(cell);
            lock(&record.data).candidates[c].results[k] = outcome(&handle, &record.metrics, cell, ran);
            handle.explores.persist(&record, &handle);
            record.progress(&handle);
        }
        // The round's fan-outs ended: what providers kept for them (explicit caches) goes.
        for cell in cells {
            wb.backend.end_fan_out(crate::sim::affinity_of(handle.id, cell)).await;
        }
        if record.stopped() {
            break None;
        }
        let unmeasured = halve(&record);
        handle.explores.persist(&record, &handle);
        record.progress(&handle);
        // A refused call means the caps cannot pay for calls like those of this round: another
        // round would only make runs that fail.
        let refused = record.budget.as_ref().map_or(0, |b| b.refusals());
        let refusals = format!("{refused} provider calls were refused by its token or money budget");
        if !unmeasured.is_empty() {
            let d = lock(&record.data);
            break Some(format!(
                "round {} left candidates without a measurement: {}; {}. A candidate with no measurement \
                 is not ranked, so the race ends here, unranked",
                d.round,
                points(&d, &unmeasured),
                if refused > 0 { refusals } else { "their runs failed".to_string() }
            ));
        }
        if refused > 0 {
            break Some(format!("{refusals}: another round would only make runs that fail"));
        }
    };
    {
        let mut d = lock(&record.data);
        if record.stopped() {
            d.status = ExploreStatus::Cancelled;
            d.reason = Some("cancelled".into());
        } else {
            d.status = ExploreStatus::Done;
            d.reason = reason;
        }
    }
    handle.explores.persist(&record, &handle);
    if let Err(e) = handle.flush_async().await {
        tracing::error!(tree = handle.id, "an exploration's end could not be stored: {e}");
    }
    record.progress(&handle);
    record.finished.send_replace(true);
    tracing::info!(tree = handle.id, explore = lock(&record.data).id, "exploration ended");
}

/// One run of a round: the candidate's index, the replicate's index, the candidate's node and
/// the run.
type RoundRun = (usize, usize, NodeId, Step);

/// Attaches the next round's runs (reserving them: `runs_used` counts them before any starts);
/// `Ok(None)` when stopped, `Err` with the reason the exploration ends.
fn attach_round(wb: &Core, handle: &TreeHandle, record: &ExploreRecord) -> Result<Option<Vec<RoundRun>>, RoundEnd> {
    let mut t = handle.lock();
    let mut d = lock(&record.data);
    if record.stopped() {
        return Ok(None);
    }
    let alive: Vec<usize> = (0..d.candidates.len()).filter(|&i| d.candidates[i].dropped_after.is_none()).collect();
    let have = alive.first().map_or(0, |&i| d.candidates[i].children.len() as u64);
    let add = next_round(alive.len(), have, d.replicates, d.run_cap.saturating_sub(d.runs_used));
    if add == 0 {
        return Err(if alive.len() <= 1 {
            RoundEnd::OneLeft
        } else {
            RoundEnd::RunsSpent { used: d.runs_used, cap: d.run_cap }
        });
    }
    let n = alive.len() * add as usize;
    let refuse = |why: WorkbenchError| RoundEnd::CannotStart { round: d.round + 1, why };
    wb.check_capacity(&t, n).map_err(refuse)?;
    if t.ids_left() < n as u64 {
        return Err(refuse(TreeError::IdsExhausted.into()));
    }
    // Every candidate is still there (checked under the lock), so no attach below can fail.
    if let Some(&c) = alive.iter().find(|&&c| t.node(d.candidates[c].node).is_err()) {
        return Err(RoundEnd::CandidateGone(c));
    }
    let (turns, seed) = (d.turns, d.seed);
    let mut runs = Vec::with_capacity(n);
    for &c in &alive {
        let cell = d.candidates[c].node;
        for k in have..have + add {
            let mut p = Core::attach_run(handle, &mut t, cell, turns, None, EdgeType::Explore)
                .map_err(|why| RoundEnd::CannotStart { round: d.round + 1, why })?;
            p.reseed(seed.wrapping_add(k));
            p.budget = record.budget.clone();
            // A candidate's replicates of one round are a fan-out from it (see `LlmState::fan_out`).
            if add > 1 {
                p.spec.fan_out = Some(add);
            }
            d.candidates[c].children.push(p.id);
            d.candidates[c].results.push(Replicate::Pending);
            runs.push((c, k as usize, cell, Step::Run(p)));
        }
    }
    d.runs_used += n as u64;
    d.round += 1;
    Ok(Some(runs))
}

/// The last round ranked, for a row written before `ranked` was stored: halving drops at least
/// one candidate of two or more, so a round some candidate was dropped after is ranked (a
/// candidate dropped because its node was deleted counts too: a round that lost one cannot be
/// told from a ranked one, and is taken as ranked).
fn inferred_ranked(d: &ExploreData) -> u32 {
    let dropped_now = d.candidates.iter().any(|c| c.dropped_after == Some(d.round));
    if dropped_now || d.round == 0 { d.round } else { d.round - 1 }
}

/// Keeps the better half of the candidates alive (by mean, for the goal); the rest are marked
/// dropped after this round. A candidate without a measurement is never ranked: when one is
/// alive, nothing is dropped and it is returned (with the others like it) for the exploration to
/// end on.
fn halve(record: &ExploreRecord) -> Vec<usize> {
    let mut d = lock(&record.data);
    let alive: Vec<(usize, Option<f64>)> = (0..d.candidates.len())
        .filter(|&i| d.candidates[i].dropped_after.is_none())
        .map(|i| (i, mean_of(&d.candidates[i])))
        .collect();
    let unmeasured: Vec<usize> = alive.iter().filter(|(_, m)| m.is_none()).map(|(i, _)| *i).collect();
    if !unmeasured.is_empty() {
        return unmeasured;
    }
    let keep = survivors(alive.len());
    let order = rank(&alive, d.objective.goal);
    let round = d.round;
    for &i in &order[keep..] {
        d.candidates[i].dropped_after = Some(round);
    }
    d.ranked = Some(round);
    Vec::new()
}

/// Candidates by their point (`rate=0.3, news="rain"`), for a reason.
fn points(d: &ExploreData, which: &[usize]) -> String {
    which
        .iter()
        .map(|&i| {
            let point: Vec<String> = d.candidates[i].point.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("{i} ({})", point.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(results: Vec<Replicate>) -> CandidateData {
        CandidateData {
            point: IndexMap::from([("rate".to_string(), Value::from(results.len()))]),
            node: 1,
            children: (0..results.len() as u64).collect(),
            results,
            dropped_after: None,
        }
    }

    fn record(candidates: Vec<CandidateData>) -> ExploreRecord {
        let data = ExploreData {
            id: 0,
            parent: 0,
            turns: 1,
            seed: 0,
            objective: Objective { metric: "count:action_end".into(), goal: ExploreGoal::Min },
            replicates: 2,
            budget: ExploreBudget::default(),
            run_cap: 100,
            status: ExploreStatus::Running,
            reason: None,
            round: 1,
            ranked: Some(0),
            runs_used: 6,
            candidates,
        };
        ExploreRecord::new(objective(Metric::parse("count:action_end").unwrap()), data, None)
    }

    /// Issue 38: a round whose calls were all refused left candidates without a measurement,
    /// and halving dropped one of them as if it had ranked last.
    #[test]
    fn a_candidate_without_a_measurement_is_never_ranked() {
        let done = |x: f64| Replicate::Done(vec![Value::from(x)]);
        let refused = || Replicate::Ended("failed".into());
        let r = record(vec![
            candidate(vec![done(3.0), done(4.0)]),
            candidate(vec![refused(), refused()]),
            candidate(vec![done(1.0), refused()]),
        ]);
        assert_eq!(halve(&r), vec![1], "the unmeasured candidate is named");
        let d = lock(&r.data);
        assert!(d.candidates.iter().all(|c| c.dropped_after.is_none()), "nothing dropped");
        assert_eq!(d.ranked, Some(0), "the round is not ranked");
        assert_eq!(points(&d, &[1]), "1 (rate=2)");
        drop(d);
        // Every candidate measured: the better half stays, ranked by mean.
        let r = record(vec![
            candidate(vec![done(3.0), done(4.0)]),
            candidate(vec![done(9.0), refused()]),
            candidate(vec![done(1.0), refused()]),
        ]);
        assert_eq!(halve(&r), Vec::<usize>::new());
        let d = lock(&r.data);
        let dropped: Vec<Option<u32>> = d.candidates.iter().map(|c| c.dropped_after).collect();
        assert_eq!(dropped, [None, Some(1), None]);
    }
}
