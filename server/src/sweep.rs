//! Counterfactual sweeps: how an outcome depends on a parameter, across seeds.
//!
//! A sweep file names a scenario, axes (an op template with one field varied; several axes form a
//! grid of cells), replicates and named metrics. Replicate `k` of every cell runs with seed
//! `seed + k`, so cells are paired: a difference between two cells comes from the parameter, not
//! from the dice. Each run is a fresh simulator: optional `prefix` turns, then the cell's ops,
//! then `turns` turns; its metrics are reduced from what the run left (events and final state).
//!
//! Each cell but the baseline (the first, or the one `baseline` names) gets a paired effect per
//! metric ([`effect_of`]): the mean of its replicate-by-replicate differences to the baseline with
//! a 95% interval from Student's t (`statrs`) or a seeded percentile bootstrap.
//!
//! The planning ([`SweepPlan::cells`]), the metric reductions ([`Metric`]) and the statistics
//! ([`summarise`], [`paired`]) are pure; [`run`] executes the runs in parallel (up to the machine's cores; a
//! real provider's own concurrency gate still applies) through [`crate::backend`].

use std::collections::BTreeMap;
use std::sync::Arc;

use indexmap::IndexMap;
use serde_json::{Value, json};
use simtree_shared::{CellResult, Effect, IntervalKind, MetricSummary, Op};

use crate::abm::worker::{WorkerConfig, WorkerPool};
use crate::backend::{Backend, BackendError, RunRequest};
use crate::engine::event::{Event, EventType};
use crate::scenario::ScenarioLibrary;
use crate::sim::{ScenarioEntry, Sim, SimError};
use crate::trading::data::MarketData;

pub use simtree_shared::sweep::{Axis, Baseline, SweepSpec};

/// One cell of the grid: a value per axis label and the ops that set them.
#[derive(Clone, Debug, PartialEq)]
pub struct Cell {
    pub(crate) labels: IndexMap<String, Value>,
    pub(crate) ops: Vec<Op>,
}

/// Why a sweep was refused or stopped.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// The specification is wrong; the message names the field (`axes[0].op: …`).
    #[error("{0}")]
    Spec(String),
    /// The scenario is unknown or a run failed.
    #[error(transparent)]
    Sim(#[from] SimError),
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// The ABM workers could not be set up or started.
    #[error("ABM workers: {0}")]
    Abm(String),
    #[error(transparent)]
    Market(#[from] crate::trading::TradingError),
    /// A run's task ended without a result (the runtime is shutting down).
    #[error("a sweep run stopped: {0}")]
    Stopped(String),
}

/// Largest grid a sweep may ask for (cells × replicates).
pub(crate) const MAX_RUNS: u64 = 10_000;

/// What the server does with a [`SweepSpec`] (a wire type of `simtree_shared`): read it with
/// errors that name the field, and plan its grid.
pub trait SweepPlan: Sized {
    /// A sweep file's text; errors name the field (`sweep file: axes[0].values: …`).
    fn parse(text: &str) -> Result<Self, SweepError>;
    /// The same from an already parsed body (the server's route); errors name the field.
    fn from_value(body: Value) -> Result<Self, SweepError>;
    /// The metrics in the file's order, parsed.
    fn metric_list(&self) -> Result<Vec<(String, Metric)>, SweepError>;
    /// The index of the baseline cell in `cells` (the grid of [`SweepPlan::cells`]).
    fn baseline_index(&self, cells: &[Cell]) -> Result<usize, SweepError>;
    /// The grid, first axis slowest; checked (each op well-formed, metrics parse, size bounded).
    fn cells(&self) -> Result<Vec<Cell>, SweepError>;
}

impl SweepPlan for SweepSpec {
    fn parse(text: &str) -> Result<SweepSpec, SweepError> {
        let de = &mut serde_json::Deserializer::from_str(text);
        serde_path_to_error::deserialize(de)
            .map_err(|e| SweepError::Spec(format!("sweep file: {}: {}", e.path(), e.inner())))
    }

    fn from_value(body: Value) -> Result<SweepSpec, SweepError> {
        serde_path_to_error::deserialize(body).map_err(|e| SweepError::Spec(format!("{}: {}", e.path(), e.inner())))
    }

    fn metric_list(&self) -> Result<Vec<(String, Metric)>, SweepError> {
        self.metrics
            .iter()
            .map(|(name, spec)| {
                Metric::parse(spec)
                    .map(|m| (name.clone(), m))
                    .map_err(|e| SweepError::Spec(format!("metrics.{name}: {e}")))
            })
            .collect()
    }

    fn baseline_index(&self, cells: &[Cell]) -> Result<usize, SweepError> {
        match &self.baseline {
            None => Ok(0),
            Some(Baseline::Index(i)) if *i < cells.len() => Ok(*i),
            Some(Baseline::Index(i)) => Err(SweepError::Spec(format!(
                "baseline: cell {i} does not exist; the grid has {} cells, numbered from 0",
                cells.len()
            ))),
            Some(Baseline::Cell(want)) => cells
                .iter()
                .position(|c| {
                    c.labels.len() == want.len()
                        && want.iter().all(|(k, v)| c.labels.get(k).is_some_and(|l| same_value(l, v)))
                })
                .ok_or_else(|| {
                    SweepError::Spec(format!(
                        "baseline: no cell has the axis values {}",
                        serde_json::to_string(want).unwrap_or_default()
                    ))
                }),
        }
    }

    fn cells(&self) -> Result<Vec<Cell>, SweepError> {
        self.metric_list()?;
        let spec = |m: String| SweepError::Spec(m);
        if self.metrics.is_empty() {
            return Err(spec("metrics: name at least one metric".into()));
        }
        let mut cells = vec![Cell { labels: IndexMap::new(), ops: Vec::new() }];
        for (i, axis) in self.axes.iter().enumerate() {
            if axis.values.is_empty() {
                return Err(spec(format!("axes[{i}] ({}): no values", axis.label)));
            }
            let mut next = Vec::with_capacity(cells.len() * axis.values.len());
            for cell in &cells {
                for v in &axis.values {
                    let mut op = axis.op.clone();
                    set_path(&mut op, &axis.field)
                        .map(|slot| *slot = v.clone())
                        .ok_or_else(|| spec(format!("axes[{i}].field {:?}: not a path into the op", axis.field)))?;
                    let op: Op = serde_json::from_value(op).map_err(|e| spec(format!("axes[{i}].op: {e}")))?;
                    let mut c = cell.clone();
                    c.labels.insert(axis.label.clone(), v.clone());
                    c.ops.push(op);
                    next.push(c);
                }
            }
            cells = next;
        }
        let runs = (cells.len() as u64).saturating_mul(self.replicates);
        if self.replicates == 0 || runs > MAX_RUNS {
            return Err(spec(format!(
                "{} cells × {} replicates: a sweep runs between 1 and {MAX_RUNS} simulations",
                cells.len(),
                self.replicates
            )));
        }
        Ok(cells)
    }
}

/// Axis values compared as a user means them: numbers by value (`1` is `1.0`), the rest exactly.
fn same_value(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// The slot at a dotted path (`agent.lookback`, `value`), created when the last key is missing.
fn set_path<'a>(v: &'a mut Value, path: &str) -> Option<&'a mut Value> {
    let mut cur = v;
    for key in path.split('.') {
        cur = cur.as_object_mut()?.entry(key.to_string()).or_insert(Value::Null);
    }
    Some(cur)
}

/// A value inside JSON by a dotted path; numeric parts index arrays, `-1` is the last element.
fn get_path<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = v;
    for key in path.split('.').filter(|k| !k.is_empty()) {
        cur = match cur {
            Value::Array(a) => {
                let i: i64 = key.parse().ok()?;
                let i = if i < 0 { a.len() as i64 + i } else { i };
                a.get(usize::try_from(i).ok()?)?
            }
            _ => cur.get(key)?,
        };
    }
    Some(cur)
}

/// A named reduction of one run to one value.
#[derive(Clone, Debug, PartialEq)]
pub enum Metric {
    /// ABM: a tracked variable over the run's steps.
    Series { reduce: Reduce, var: String },
    /// Trading: an episode metric (top level or the strategy's performance, e.g. `sharpe`).
    Episode(String),
    /// Any kind: how many events of this type the run produced.
    Count(String),
    /// Social: a value of the final scene state by dotted path (`winner`, `past_votes.-1.yes`).
    State(String),
    /// A custom scene: one of its document's metrics, evaluated on the final state.
    Scene(String),
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reduce {
    Max,
    Min,
    Last,
    Mean,
}

impl Metric {
    pub(crate) fn parse(spec: &str) -> Result<Metric, SweepError> {
        let (kind, arg) = spec.split_once(':').ok_or_else(|| {
            SweepError::Spec(format!("{spec:?}: expected kind:argument, e.g. max:globalVariable.infectedCount"))
        })?;
        let arg = arg.trim().to_string();
        if arg.is_empty() {
            return Err(SweepError::Spec(format!("{spec:?}: nothing after {kind:?}")));
        }
        let series = |reduce| Ok(Metric::Series { reduce, var: arg.clone() });
        match kind.trim() {
            "max" => series(Reduce::Max),
            "min" => series(Reduce::Min),
            "last" => series(Reduce::Last),
            "mean" => series(Reduce::Mean),
            "metric" => Ok(Metric::Episode(arg)),
            "count" => Ok(Metric::Count(arg)),
            "state" => Ok(Metric::State(arg)),
            "scene" => Ok(Metric::Scene(arg)),
            other => Err(SweepError::Spec(format!(
                "{spec:?}: unknown kind {other:?} (max, min, last, mean, metric, count, state, scene)"
            ))),
        }
    }

    /// This metric of a finished run: its events and final simulator. `Null` when the run does
    /// not have it (a variable never tracked, a state key missing).
    pub(crate) fn of(&self, events: &[Event], sim: &Sim) -> Value {
        match self {
            Metric::Series { reduce, var } => {
                let xs: Vec<f64> = events
                    .iter()
                    .filter(|e| e.kind == EventType::AbmStep)
                    .filter_map(|e| e.data["values"].get(var)?.as_f64())
                    .collect();
                if xs.is_empty() {
                    return Value::Null;
                }
                let x = match reduce {
                    Reduce::Max => xs.iter().copied().fold(f64::MIN, f64::max),
                    Reduce::Min => xs.iter().copied().fold(f64::MAX, f64::min),
                    Reduce::Last => xs[xs.len() - 1],
                    Reduce::Mean => xs.iter().sum::<f64>() / xs.len() as f64,
                };
                json!(x)
            }
            Metric::Episode(name) => match sim {
                Sim::Trading(t) => {
                    let m = serde_json::to_value(t.metrics()).unwrap_or(Value::Null);
                    get_path(&m, name).or_else(|| get_path(&m["strategy"], name)).cloned().unwrap_or(Value::Null)
                }
                _ => Value::Null,
            },
            Metric::Count(kind) => json!(events.iter().filter(|e| e.kind.as_str() == kind).count()),
            Metric::State(path) => match sim {
                Sim::Social(s) => get_path(&s.scene().state_json(), path).cloned().unwrap_or(Value::Null),
                _ => Value::Null,
            },
            Metric::Scene(name) => match sim {
                Sim::Social(s) => match s.scene() {
                    crate::engine::scenes::Scene::Custom(c) => c.metric(name).unwrap_or(Value::Null),
                    _ => Value::Null,
                },
                _ => Value::Null,
            },
        }
    }
}

/// The summary of one metric's values over a cell's replicates.
pub(crate) fn summarise(values: Vec<Value>) -> MetricSummary {
    let nums: Vec<f64> =
        values.iter().filter_map(|v| v.as_f64().or_else(|| v.as_bool().map(|b| f64::from(u8::from(b))))).collect();
    let mut counts = BTreeMap::new();
    for v in values.iter().filter_map(Value::as_str) {
        *counts.entry(v.to_string()).or_insert(0) += 1;
    }
    let n = nums.len();
    let mean = (n > 0).then(|| nums.iter().sum::<f64>() / n as f64);
    let sd = mean.filter(|_| n > 1).map(|m| {
        let var = nums.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1) as f64;
        var.sqrt()
    });
    MetricSummary { mean, sd, n: if n > 0 { n } else { counts.values().sum() }, values, counts }
}

/// A summary per metric over a cell's runs; `runs[k]` holds replicate `k`'s values in the
/// metrics' order, or `None` while it has none (still running, failed) — then its value is
/// `null` and it does not count in `n`, so `values` stays aligned with the replicates.
pub(crate) fn summarise_runs(
    metrics: &[(String, Metric)],
    runs: &[Option<&Vec<Value>>],
) -> IndexMap<String, MetricSummary> {
    metrics
        .iter()
        .enumerate()
        .map(|(i, (name, _))| {
            let values = runs.iter().map(|r| r.and_then(|r| r.get(i)).cloned().unwrap_or(Value::Null)).collect();
            (name.clone(), summarise(values))
        })
        .collect()
}

/// Where one replicate of a cell stands, for pairing it with the baseline's replicate.
#[derive(Clone, Copy, Debug)]
pub enum Outcome<'a> {
    /// Still running: neither a pair nor dropped yet.
    Pending,
    /// Failed, cancelled or deleted: its pair is dropped.
    Ended,
    /// The metrics' values, in the sweep's order.
    Done(&'a [Value]),
}

/// A metric value as a number: numbers as they are, booleans as 0 and 1 (as [`summarise`]).
fn number(v: &Value) -> Option<f64> {
    v.as_f64().or_else(|| v.as_bool().map(|b| f64::from(u8::from(b))))
}

/// Resamples of the bootstrap interval.
const BOOTSTRAP_RESAMPLES: usize = 2000;

/// The effect of a cell on metric `i` against the baseline: replicate `k` of `cell` paired with
/// replicate `k` of `base` (the same seed). A pair with a side still running is left for later;
/// one with a side that ended without a number is dropped and counted. `seed` drives the
/// bootstrap's resampling (the same seed, the same interval).
pub(crate) fn effect_of(base: &[Outcome], cell: &[Outcome], i: usize, interval: IntervalKind, seed: u64) -> Effect {
    let mut diffs = Vec::with_capacity(cell.len());
    let (mut dropped, mut text) = (0, false);
    for (b, c) in base.iter().zip(cell) {
        match (b, c) {
            (Outcome::Pending, _) | (_, Outcome::Pending) => {}
            (Outcome::Done(b), Outcome::Done(c)) => {
                let (b, c) = (b.get(i).unwrap_or(&Value::Null), c.get(i).unwrap_or(&Value::Null));
                match (number(b), number(c)) {
                    (Some(x), Some(y)) => diffs.push(y - x),
                    _ => {
                        text |= b.is_string() || c.is_string();
                        dropped += 1;
                    }
                }
            }
            _ => dropped += 1,
        }
    }
    let mut effect = paired(&diffs, interval, seed);
    effect.dropped = dropped;
    if text && diffs.is_empty() {
        effect.reason = Some("text values are counted per value and have no difference".into());
    }
    effect
}

/// Mean, standard deviation and 95% interval of paired differences. No pair: nothing; one pair:
/// its difference without an interval; the reason says which.
pub fn paired(diffs: &[f64], interval: IntervalKind, seed: u64) -> Effect {
    let n = diffs.len();
    let mut effect = Effect { n_pairs: n, ..Effect::default() };
    let why = |e: &mut Effect, reason: &str| {
        e.reason = Some(reason.to_string());
    };
    if n == 0 {
        why(&mut effect, "no pair of replicates has a number on both sides yet");
        return effect;
    }
    let mean = diffs.iter().sum::<f64>() / n as f64;
    if !mean.is_finite() {
        why(&mut effect, "the differences are too large to average");
        return effect;
    }
    effect.mean_diff = Some(mean);
    if n == 1 {
        why(&mut effect, "one pair: an interval needs at least two");
        return effect;
    }
    let sd = (diffs.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt();
    if !sd.is_finite() {
        why(&mut effect, "the differences are too large to spread");
        return effect;
    }
    effect.sd_diff = Some(sd);
    // Identical differences (an A/A cell: all zero) have an interval of width zero, exactly.
    let (lo, hi) = if sd == 0.0 {
        (mean, mean)
    } else {
        match interval {
            IntervalKind::T => {
                use statrs::distribution::{ContinuousCDF, StudentsT};
                let Ok(t) = StudentsT::new(0.0, 1.0, (n - 1) as f64) else {
                    why(&mut effect, "no t distribution for these pairs");
                    return effect;
                };
                let half = t.inverse_cdf(0.975) * sd / (n as f64).sqrt();
                (mean - half, mean + half)
            }
            IntervalKind::Bootstrap => bootstrap(diffs, seed),
        }
    };
    if lo.is_finite() && hi.is_finite() {
        effect.ci95 = Some([lo, hi]);
    } else {
        why(&mut effect, "the differences are too large for an interval");
    }
    effect
}

/// The percentile bootstrap of the mean: [`BOOTSTRAP_RESAMPLES`] means of `diffs` resampled with
/// replacement by a generator seeded with `seed`; the 2.5% and 97.5% quantiles (linear between
/// order statistics).
fn bootstrap(diffs: &[f64], seed: u64) -> (f64, f64) {
    let mut rng = crate::engine::rng::Rng::seeded(seed);
    let n = diffs.len();
    let mut means: Vec<f64> =
        (0..BOOTSTRAP_RESAMPLES).map(|_| (0..n).map(|_| diffs[rng.below(n)]).sum::<f64>() / n as f64).collect();
    means.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let pos = q * (means.len() - 1) as f64;
        let (i, frac) = (pos.floor() as usize, pos.fract());
        let next = means[(i + 1).min(means.len() - 1)];
        means[i] + frac * (next - means[i])
    };
    (at(0.025), at(0.975))
}

/// The seed of the bootstrap of one cell and metric: the sweep's first seed mixed with both
/// indices, so every interval has a stream of its own and a re-read gives the same interval.
pub(crate) fn bootstrap_seed(sweep_seed: u64, cell: usize, metric: usize) -> u64 {
    sweep_seed ^ (((cell as u64) << 32) | metric as u64)
}

/// Every metric's effect for `cell` against `base` (see [`effect_of`]).
pub(crate) fn effects(
    metrics: &[(String, Metric)],
    base: &[Outcome],
    cell: &[Outcome],
    interval: IntervalKind,
    seed_of: impl Fn(usize) -> u64,
) -> IndexMap<String, Effect> {
    metrics
        .iter()
        .enumerate()
        .map(|(i, (name, _))| (name.clone(), effect_of(base, cell, i, interval, seed_of(i))))
        .collect()
}

/// Events back from stored log entries (`{type, data, node}`), for reducing a tree node's run;
/// entries of a type this build does not know are skipped (no metric can name them).
pub(crate) fn events_from_entries<'a>(entries: impl IntoIterator<Item = &'a str>) -> Vec<Event> {
    entries.into_iter().filter_map(|e| serde_json::from_str::<Event>(e).ok()).collect()
}

/// What a sweep needs from the outside world.
pub struct Env<'a> {
    pub library: &'a ScenarioLibrary,
    pub backend: &'a Backend,
    /// The folder holding `assets/` (the ABM worker's venv lives there).
    pub root: std::path::PathBuf,
    /// Runs at once (default: the machine's cores).
    pub parallel: usize,
    /// Where ABM model code runs (bubblewrap unless `--unsafe-abm`).
    pub sandbox: crate::abm::Sandbox,
}

/// A fresh simulator of `scenario` with `seed`.
fn fresh(
    library: &ScenarioLibrary,
    scenario: &str,
    seed: u64,
    market: Option<&Arc<MarketData>>,
) -> Result<Sim, SimError> {
    ScenarioEntry::find(library, scenario).and_then(|e| e.instantiate(Some(seed), market))
}

/// Runs every cell × replicate (in parallel) and summarises each cell. `progress` is called after
/// each finished run with (done, total).
pub async fn run(
    spec: &SweepSpec,
    env: &Env<'_>,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<Vec<CellResult>, SweepError> {
    let cells = spec.cells()?;
    let metrics = spec.metric_list()?;
    let baseline = spec.baseline_index(&cells)?;
    let abm = env.library.abm(&spec.scenario).is_some();
    // A custom scene's Python hooks run on the same sandboxed workers as a model's code.
    let hooks = !abm
        && env.library.trading(&spec.scenario).is_none()
        && fresh(env.library, &spec.scenario, spec.seed_of(0), None)?.hook_source().is_some();
    let pool = if abm || hooks {
        crate::abm::venv::ensure_venv(&env.root).map_err(|e| SweepError::Abm(e.to_string()))?;
        let config = WorkerConfig::for_root(&env.root).with_sandbox(env.sandbox);
        Some(Arc::new(WorkerPool::spawn(&config, env.parallel.max(1)).map_err(|e| SweepError::Abm(e.to_string()))?))
    } else {
        None
    };
    let market =
        if env.library.trading(&spec.scenario).is_some() { Some(Arc::new(MarketData::load_default()?)) } else { None };
    let total = cells.len() as u64 * spec.replicates;
    let gate = Arc::new(tokio::sync::Semaphore::new(env.parallel.max(1)));
    let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for (c, cell) in cells.iter().enumerate() {
        for k in 0..spec.replicates {
            let seed = spec.seed_of(k);
            let mut sim = fresh(env.library, &spec.scenario, seed, market.as_ref())?;
            let req = RunRequest {
                scenario: &spec.scenario,
                sim: &sim,
                replay: None,
                budget: None,
                abm: pool.clone(),
                watch: Default::default(),
            };
            let (ctx, _ledger) = crate::backend::run_ctx(env.backend, req)?;
            let (ops, prefix, turns, gate) = (cell.ops.clone(), spec.prefix, spec.turns, gate.clone());
            let metrics = metrics.clone();
            tasks.spawn(async move {
                let _permit = gate.acquire_owned().await.map_err(|e| SweepError::Stopped(e.to_string()))?;
                let mut events: Vec<Event> = Vec::new();
                if prefix > 0 {
                    sim.run(prefix, &ctx, &mut Vec::new()).await?;
                }
                for op in &ops {
                    events.extend(sim.apply_op(op)?);
                }
                sim.run(turns, &ctx, &mut events).await?;
                let values: Vec<Value> = metrics.iter().map(|(_, m)| m.of(&events, &sim)).collect();
                Ok::<_, SweepError>((c, k, values))
            });
        }
    }
    let mut results: BTreeMap<(usize, u64), Vec<Value>> = BTreeMap::new();
    while let Some(joined) = tasks.join_next().await {
        let (c, k, values) = joined.map_err(|e| SweepError::Stopped(e.to_string()))??;
        results.insert((c, k), values);
        progress(done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1, total);
    }
    let outcomes = |c: usize| -> Vec<Outcome> {
        (0..spec.replicates).map(|k| results.get(&(c, k)).map_or(Outcome::Ended, |v| Outcome::Done(v))).collect()
    };
    let base = outcomes(baseline);
    Ok(cells
        .into_iter()
        .enumerate()
        .map(|(c, cell)| {
            let runs: Vec<Option<&Vec<Value>>> = (0..spec.replicates).map(|k| results.get(&(c, k))).collect();
            CellResult {
                cell: cell.labels,
                metrics: summarise_runs(&metrics, &runs),
                effects: if c == baseline {
                    IndexMap::new()
                } else {
                    effects(&metrics, &base, &outcomes(c), spec.interval, |m| bootstrap_seed(spec.seed, c, m))
                },
            }
        })
        .collect())
}

/// A human-readable table: one row per cell, `mean ± sd (n)` per metric, and under every cell but
/// the baseline its effects, `Δ mean_diff [lo, hi] (pairs)`.
pub fn table(results: &[CellResult]) -> String {
    let mut out = String::new();
    for r in results {
        let cell: Vec<String> = r.cell.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let cell = if cell.is_empty() { "(base)".to_string() } else { cell.join(" ") };
        let figures: Vec<String> = r
            .metrics
            .iter()
            .map(|(name, s)| match (s.mean, s.sd) {
                (Some(m), Some(sd)) => format!("{name} {m:.4} ± {sd:.4} (n={})", s.n),
                (Some(m), None) => format!("{name} {m:.4} (n={})", s.n),
                (None, _) if !s.counts.is_empty() => format!("{name} {:?} (n={})", s.counts, s.n),
                (None, _) => format!("{name} - (n=0)"),
            })
            .collect();
        out.push_str(&format!("{cell:<28} {}\n", figures.join("  ")));
        let effects: Vec<String> = r
            .effects
            .iter()
            .map(|(name, e)| match (e.mean_diff, e.ci95) {
                (Some(d), Some([lo, hi])) => format!("Δ{name} {d:+.4} [{lo:.4}, {hi:.4}] (pairs={})", e.n_pairs),
                (Some(d), None) => format!("Δ{name} {d:+.4} (pairs={})", e.n_pairs),
                (None, _) => format!("Δ{name} - ({})", e.reason.as_deref().unwrap_or("no pair")),
            })
            .collect();
        if !effects.is_empty() {
            out.push_str(&format!("{:<28} {}\n", "", effects.join("  ")));
        }
    }
    out
}

/// CSV with one row per run: the cell's labels, the replicate, its seed, then each metric.
pub(crate) fn csv(spec: &SweepSpec, results: &[CellResult]) -> String {
    let Some(first) = results.first() else {
        return String::new();
    };
    use simtree_shared::csv;
    let plain = |v: &Value| csv::value(v).into_owned();
    let mut header: Vec<String> = first.cell.keys().cloned().collect();
    header.extend(["replicate".to_string(), "seed".to_string()]);
    header.extend(first.metrics.keys().cloned());
    let mut out = header.iter().map(|h| csv::text(h)).collect::<Vec<_>>().join(",") + "\n";
    for r in results {
        for k in 0..spec.replicates as usize {
            let seed = spec.seed_of(k as u64);
            let mut row: Vec<String> = r.cell.values().map(plain).collect();
            row.extend([k.to_string(), seed.to_string()]);
            row.extend(r.metrics.values().map(|s| s.values.get(k).map(plain).unwrap_or_default()));
            out.push_str(&(row.join(",") + "\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(axes: Value) -> SweepSpec {
        SweepSpec::parse(
            &json!({"scenario": "sir_network", "turns": 5, "replicates": 2,
                    "axes": axes, "metrics": {"peak": "max:globalVariable.infectedCount"}})
            .to_string(),
        )
        .unwrap()
    }

    #[test]
    fn axes_form_a_grid_first_axis_slowest() {
        let s = spec(json!([
            {"label": "rate", "op": {"op": "abm_set_global", "name": "infectionRate"}, "field": "value", "values": [0.1, 0.2]},
            {"label": "rec", "op": {"op": "abm_set_global", "name": "recoveryRate"}, "field": "value", "values": [1, 2, 3]}
        ]));
        let cells = s.cells().unwrap();
        assert_eq!(cells.len(), 6);
        assert_eq!(cells[1].labels["rate"], json!(0.1));
        assert_eq!(cells[1].labels["rec"], json!(2));
        assert_eq!(cells[5].ops[0], Op::AbmSetGlobal { name: "infectionRate".into(), value: json!(0.2) });
    }

    #[test]
    fn bad_files_are_refused_with_the_place_at_fault() {
        let s = spec(json!([{"label": "x", "op": {"op": "fly"}, "field": "value", "values": [1]}]));
        assert!(s.cells().unwrap_err().to_string().starts_with("axes[0].op"));
        let e =
            SweepSpec::parse(r#"{"scenario": "x", "turns": 1, "metrics": {}, "extra": 1}"#).unwrap_err().to_string();
        assert!(e.contains("extra"), "{e}");
        assert!(Metric::parse("median:x").unwrap_err().to_string().contains("unknown kind"));
        let mut s = spec(json!([]));
        s.replicates = 0;
        assert!(s.cells().is_err());
    }

    #[test]
    fn summaries_give_mean_sd_and_counts() {
        let s = summarise(vec![json!(1.0), json!(3.0)]);
        assert_eq!((s.mean, s.n), (Some(2.0), 2));
        assert!((s.sd.unwrap() - 2f64.sqrt()).abs() < 1e-12);
        let w = summarise(vec![json!("villagers"), json!("werewolves"), json!("villagers")]);
        assert_eq!(w.mean, None);
        assert_eq!(w.counts["villagers"], 2);
        assert_eq!(w.n, 3);
        assert_eq!(get_path(&json!({"v": [{"y": 1}, {"y": 2}]}), "v.-1.y"), Some(&json!(2)));
    }

    fn done(values: &[Value]) -> Outcome<'_> {
        Outcome::Done(values)
    }

    #[test]
    fn effects_are_paired_differences_with_a_t_interval_checked_by_hand() {
        // Replicate 4 failed in the cell (dropped, counted), replicate 5 is still running in the
        // baseline (neither a pair nor dropped).
        let base = [json!([10]), json!([20]), json!([30]), json!([40]), json!([50])];
        let cell = [json!([11]), json!([22]), json!([33]), json!([46])];
        let b: Vec<Outcome> = base.iter().map(|v| done(v.as_array().unwrap())).chain([Outcome::Pending]).collect();
        let c: Vec<Outcome> =
            cell.iter().map(|v| done(v.as_array().unwrap())).chain([Outcome::Ended, done(&[])]).collect();
        let e = effect_of(&b, &c, 0, IntervalKind::T, 0);
        // Differences 1, 2, 3, 6: mean 3; sd √(14/3); t(0.975, 3 df) = 3.182446305284263 (any
        // printed table), so the half-width is 3.182446305284263 × √(14/3) / 2.
        let sd = (14.0f64 / 3.0).sqrt();
        let half = 3.182446305284263 * sd / 2.0;
        assert_eq!((e.mean_diff, e.n_pairs, e.dropped, e.reason.as_deref()), (Some(3.0), 4, 1, None));
        assert!((e.sd_diff.unwrap() - sd).abs() < 1e-12, "{e:?}");
        let [lo, hi] = e.ci95.unwrap();
        assert!((lo - (3.0 - half)).abs() < 1e-9 && (hi - (3.0 + half)).abs() < 1e-9, "{e:?}");
        assert!((hi - 6.437434881858908).abs() < 1e-9, "{e:?}");
    }

    #[test]
    fn an_a_a_cell_has_an_effect_of_exactly_zero_with_either_interval() {
        let runs = [json!([3.7, true]), json!([9.1, false]), json!([0.2, true])];
        let b: Vec<Outcome> = runs.iter().map(|v| done(v.as_array().unwrap())).collect();
        for interval in [IntervalKind::T, IntervalKind::Bootstrap] {
            for m in 0..2 {
                let e = effect_of(&b, &b, m, interval, 42);
                assert_eq!(
                    (e.mean_diff, e.ci95, e.sd_diff, e.n_pairs, e.dropped),
                    (Some(0.0), Some([0.0, 0.0]), Some(0.0), 3, 0)
                );
            }
        }
    }

    #[test]
    fn too_few_pairs_text_and_huge_values_give_no_interval_and_say_why() {
        let one = paired(&[2.5], IntervalKind::T, 0);
        assert_eq!((one.mean_diff, one.ci95, one.n_pairs), (Some(2.5), None, 1));
        assert!(one.reason.unwrap().contains("at least two"));
        let none = paired(&[], IntervalKind::Bootstrap, 0);
        assert_eq!((none.mean_diff, none.ci95, none.n_pairs), (None, None, 0));
        assert!(none.reason.is_some());
        let huge = paired(&[f64::MAX, -f64::MAX, f64::MAX], IntervalKind::T, 0);
        assert_eq!(huge.ci95, None, "{huge:?}");
        assert!(huge.reason.is_some());
        let words = [json!(["villagers"]), json!(["wolves"])];
        let w: Vec<Outcome> = words.iter().map(|v| done(v.as_array().unwrap())).collect();
        let e = effect_of(&w, &w, 0, IntervalKind::T, 0);
        assert_eq!((e.mean_diff, e.n_pairs, e.dropped), (None, 0, 2));
        assert!(e.reason.unwrap().contains("text"));
    }

    #[test]
    fn the_bootstrap_interval_is_seeded_and_brackets_the_mean() {
        let diffs = [0.0, 0.1, 0.2, 0.1, 5.0, 0.3, 0.0, 0.2];
        let a = paired(&diffs, IntervalKind::Bootstrap, 7);
        assert_eq!(a, paired(&diffs, IntervalKind::Bootstrap, 7), "same seed, same interval");
        let [lo, hi] = a.ci95.unwrap();
        let mean = a.mean_diff.unwrap();
        assert!(0.0 <= lo && lo < mean && mean < hi && hi <= 5.0, "{a:?}");
        // Skewed differences: the bootstrap's interval is not symmetric about the mean, t's is.
        let [tlo, thi] = paired(&diffs, IntervalKind::T, 7).ci95.unwrap();
        assert!(((mean - tlo) - (thi - mean)).abs() < 1e-9);
        assert!((mean - lo) < (hi - mean), "{a:?}");
    }

    #[test]
    fn the_baseline_is_the_first_cell_or_the_one_named() {
        let mut s = spec(json!([
            {"label": "rate", "op": {"op": "abm_set_global", "name": "infectionRate"}, "field": "value", "values": [0.1, 0.2, 1]}
        ]));
        let cells = s.cells().unwrap();
        assert_eq!(s.baseline_index(&cells).unwrap(), 0);
        s.baseline = Some(Baseline::Index(2));
        assert_eq!(s.baseline_index(&cells).unwrap(), 2);
        s.baseline = serde_json::from_value(json!({"rate": 0.2})).unwrap();
        assert_eq!(s.baseline_index(&cells).unwrap(), 1);
        s.baseline = serde_json::from_value(json!({"rate": 1.0})).unwrap();
        assert_eq!(s.baseline_index(&cells).unwrap(), 2, "1.0 is the value 1");
        for bad in [json!(3), json!({"rate": 0.5}), json!({"rate": 0.1, "other": 1})] {
            s.baseline = serde_json::from_value(bad).unwrap();
            assert!(s.baseline_index(&cells).unwrap_err().to_string().starts_with("baseline"));
        }
    }
}
