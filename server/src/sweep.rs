//! Counterfactual sweeps: how an outcome depends on a parameter, across seeds.
//!
//! A sweep file names a scenario, axes (an op template with one field varied; several axes form a
//! grid of cells), replicates and named metrics. Replicate `k` of every cell runs with seed
//! `seed + k`, so cells are paired: a difference between two cells comes from the parameter, not
//! from the dice. Each run is a fresh simulator: optional `prefix` turns, then the cell's ops,
//! then `turns` turns; its metrics are reduced from what the run left (events and final state).
//!
//! The planning ([`SweepSpec::cells`]), the metric reductions ([`Metric`]) and the statistics
//! ([`summarise`]) are pure; [`run`] executes the runs in parallel (up to the machine's cores; a
//! real provider's own concurrency gate still applies) through [`crate::backend`].

use std::collections::BTreeMap;
use std::sync::Arc;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use simtree_shared::{CellResult, MetricSummary, Op};

use crate::abm::worker::{WorkerConfig, WorkerPool};
use crate::backend::{Backend, BackendError, RunRequest};
use crate::engine::event::{Event, EventType};
use crate::scenario::ScenarioLibrary;
use crate::sim::{ScenarioEntry, Sim, SimError};
use crate::trading::data::MarketData;

/// A sweep file.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SweepSpec {
    /// The scenario to build (CLI). A server sweep may leave it out: it runs the tree's.
    #[serde(default)]
    pub scenario: String,
    /// Turns (social), decision points (trading) or steps (ABM) run after the cell's ops.
    pub turns: u64,
    #[serde(default = "one")]
    pub replicates: u64,
    /// Seed of replicate 0; replicate `k` uses `seed + k` in every cell.
    #[serde(default)]
    pub seed: u64,
    #[serde(default)]
    pub axes: Vec<Axis>,
    /// Metric name → reduction (`max:<var>`, `metric:sharpe`, `count:<event type>`, `state:<key>`).
    pub metrics: IndexMap<String, String>,
    /// Turns run before the cell's ops are applied (the CLI's branch point).
    #[serde(default)]
    pub prefix: u64,
    /// The node to branch from (server sweeps only; the CLI starts from the scenario's root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<u64>,
}

fn one() -> u64 {
    1
}

/// One axis: an op template whose `field` (a dotted path inside it) takes each of `values`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Axis {
    pub label: String,
    pub op: Value,
    pub field: String,
    pub values: Vec<Value>,
}

/// One cell of the grid: a value per axis label and the ops that set them.
#[derive(Clone, Debug, PartialEq)]
pub struct Cell {
    pub labels: IndexMap<String, Value>,
    pub ops: Vec<Op>,
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
pub const MAX_RUNS: u64 = 10_000;

impl SweepSpec {
    pub fn parse(text: &str) -> Result<SweepSpec, SweepError> {
        let de = &mut serde_json::Deserializer::from_str(text);
        serde_path_to_error::deserialize(de)
            .map_err(|e| SweepError::Spec(format!("sweep file: {}: {}", e.path(), e.inner())))
    }

    /// The same from an already parsed body (the server's route); errors name the field.
    pub fn from_value(body: Value) -> Result<SweepSpec, SweepError> {
        serde_path_to_error::deserialize(body).map_err(|e| SweepError::Spec(format!("{}: {}", e.path(), e.inner())))
    }

    /// The seed of replicate `k`, the same in every cell (the pairing).
    pub fn seed_of(&self, k: u64) -> u64 {
        self.seed.wrapping_add(k)
    }

    /// The metrics in the file's order, parsed.
    pub fn metric_list(&self) -> Result<Vec<(String, Metric)>, SweepError> {
        self.metrics
            .iter()
            .map(|(name, spec)| {
                Metric::parse(spec)
                    .map(|m| (name.clone(), m))
                    .map_err(|e| SweepError::Spec(format!("metrics.{name}: {e}")))
            })
            .collect()
    }

    /// The grid, first axis slowest; checked (each op well-formed, metrics parse, size bounded).
    pub fn cells(&self) -> Result<Vec<Cell>, SweepError> {
        self.metric_list()?;
        let spec = |m: String| SweepError::Spec(m);
        if self.metrics.is_empty() {
            return Err(spec("metrics: name at least one metric".into()));
        }
        let mut cells = vec![Cell {
            labels: IndexMap::new(),
            ops: Vec::new(),
        }];
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
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reduce {
    Max,
    Min,
    Last,
    Mean,
}

impl Metric {
    pub fn parse(spec: &str) -> Result<Metric, SweepError> {
        let (kind, arg) = spec.split_once(':').ok_or_else(|| {
            SweepError::Spec(format!(
                "{spec:?}: expected kind:argument, e.g. max:globalVariable.infectedCount"
            ))
        })?;
        let arg = arg.trim().to_string();
        if arg.is_empty() {
            return Err(SweepError::Spec(format!("{spec:?}: nothing after {kind:?}")));
        }
        let series = |reduce| {
            Ok(Metric::Series {
                reduce,
                var: arg.clone(),
            })
        };
        match kind.trim() {
            "max" => series(Reduce::Max),
            "min" => series(Reduce::Min),
            "last" => series(Reduce::Last),
            "mean" => series(Reduce::Mean),
            "metric" => Ok(Metric::Episode(arg)),
            "count" => Ok(Metric::Count(arg)),
            "state" => Ok(Metric::State(arg)),
            other => Err(SweepError::Spec(format!(
                "{spec:?}: unknown kind {other:?} (max, min, last, mean, metric, count, state)"
            ))),
        }
    }

    /// This metric of a finished run: its events and final simulator. `Null` when the run does
    /// not have it (a variable never tracked, a state key missing).
    pub fn of(&self, events: &[Event], sim: &Sim) -> Value {
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
                    get_path(&m, name)
                        .or_else(|| get_path(&m["strategy"], name))
                        .cloned()
                        .unwrap_or(Value::Null)
                }
                _ => Value::Null,
            },
            Metric::Count(kind) => json!(events.iter().filter(|e| e.kind.as_str() == kind).count()),
            Metric::State(path) => match sim {
                Sim::Social(s) => get_path(&s.scene.state_json(), path).cloned().unwrap_or(Value::Null),
                _ => Value::Null,
            },
        }
    }
}

/// The summary of one metric's values over a cell's replicates.
pub fn summarise(values: Vec<Value>) -> MetricSummary {
    let nums: Vec<f64> = values
        .iter()
        .filter_map(|v| v.as_f64().or_else(|| v.as_bool().map(|b| f64::from(u8::from(b)))))
        .collect();
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
    MetricSummary {
        mean,
        sd,
        n: if n > 0 { n } else { counts.values().sum() },
        values,
        counts,
    }
}

/// A summary per metric over a cell's runs; `runs[k]` holds replicate `k`'s values in the
/// metrics' order, or `None` while it has none (still running, failed) — then its value is
/// `null` and it does not count in `n`, so `values` stays aligned with the replicates.
pub fn summarise_runs(metrics: &[(String, Metric)], runs: &[Option<&Vec<Value>>]) -> IndexMap<String, MetricSummary> {
    metrics
        .iter()
        .enumerate()
        .map(|(i, (name, _))| {
            let values = runs
                .iter()
                .map(|r| r.and_then(|r| r.get(i)).cloned().unwrap_or(Value::Null))
                .collect();
            (name.clone(), summarise(values))
        })
        .collect()
}

/// Events back from stored log entries (`{type, data, node}`), for reducing a tree node's run;
/// entries of a type this build does not know are skipped (no metric can name them).
pub fn events_from_entries<'a>(entries: impl IntoIterator<Item = &'a str>) -> Vec<Event> {
    entries
        .into_iter()
        .filter_map(|e| serde_json::from_str::<Event>(e).ok())
        .collect()
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
    let abm = env.library.abm(&spec.scenario).is_some();
    let pool = if abm {
        crate::abm::venv::ensure_venv(&env.root).map_err(|e| SweepError::Abm(e.to_string()))?;
        let config = WorkerConfig::for_root(&env.root).with_sandbox(env.sandbox);
        Some(Arc::new(
            WorkerPool::spawn(&config, env.parallel.max(1)).map_err(|e| SweepError::Abm(e.to_string()))?,
        ))
    } else {
        None
    };
    let market = if env.library.trading(&spec.scenario).is_some() {
        Some(Arc::new(MarketData::load_default()?))
    } else {
        None
    };
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
            };
            let (ctx, _ledger) = crate::backend::run_ctx(env.backend, req)?;
            let (ops, prefix, turns, gate) = (cell.ops.clone(), spec.prefix, spec.turns, gate.clone());
            let metrics = metrics.clone();
            tasks.spawn(async move {
                let _permit = gate
                    .acquire_owned()
                    .await
                    .map_err(|e| SweepError::Stopped(e.to_string()))?;
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
    Ok(cells
        .into_iter()
        .enumerate()
        .map(|(c, cell)| {
            let runs: Vec<Option<&Vec<Value>>> = (0..spec.replicates).map(|k| results.get(&(c, k))).collect();
            CellResult {
                cell: cell.labels,
                metrics: summarise_runs(&metrics, &runs),
            }
        })
        .collect())
}

/// A human-readable table: one row per cell, `mean ± sd (n)` per metric.
pub fn table(results: &[CellResult]) -> String {
    let mut out = String::new();
    for r in results {
        let cell: Vec<String> = r.cell.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let cell = if cell.is_empty() {
            "(base)".to_string()
        } else {
            cell.join(" ")
        };
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
    }
    out
}

/// CSV with one row per run: the cell's labels, the replicate, its seed, then each metric.
pub fn csv(spec: &SweepSpec, results: &[CellResult]) -> String {
    let Some(first) = results.first() else {
        return String::new();
    };
    let quote = |s: String| {
        if s.contains([',', '"', '\n']) {
            format!("\"{}\"", s.replace('"', "\"\""))
        } else {
            s
        }
    };
    let plain = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        v => v.to_string(),
    };
    let mut header: Vec<String> = first.cell.keys().cloned().collect();
    header.extend(["replicate".to_string(), "seed".to_string()]);
    header.extend(first.metrics.keys().cloned());
    let mut out = header.into_iter().map(quote).collect::<Vec<_>>().join(",") + "\n";
    for r in results {
        for k in 0..spec.replicates as usize {
            let seed = spec.seed_of(k as u64);
            let mut row: Vec<String> = r.cell.values().map(plain).collect();
            row.extend([k.to_string(), seed.to_string()]);
            row.extend(
                r.metrics
                    .values()
                    .map(|s| s.values.get(k).map(plain).unwrap_or_default()),
            );
            out.push_str(&(row.into_iter().map(quote).collect::<Vec<_>>().join(",") + "\n"));
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
        assert_eq!(
            cells[5].ops[0],
            Op::AbmSetGlobal {
                name: "infectionRate".into(),
                value: json!(0.2)
            }
        );
    }

    #[test]
    fn bad_files_are_refused_with_the_place_at_fault() {
        let s = spec(json!([{"label": "x", "op": {"op": "fly"}, "field": "value", "values": [1]}]));
        assert!(s.cells().unwrap_err().to_string().starts_with("axes[0].op"));
        let e = SweepSpec::parse(r#"{"scenario": "x", "turns": 1, "metrics": {}, "extra": 1}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("extra"), "{e}");
        assert!(
            Metric::parse("median:x")
                .unwrap_err()
                .to_string()
                .contains("unknown kind")
        );
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
}
