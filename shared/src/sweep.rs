//! Sweeps on the wire: the sweep file and body of `POST …/sweep` ([`SweepSpec`]), what it answers, the table of `GET …/sweep/{id}` and
//! `simtree sweep --json`, and the progress message on the tree socket.
//!
//! A sweep is a grid of cells (one value per axis) × replicates (replicate `k` of every cell runs
//! with the same seed). Each metric of a cell is summarised over its replicates; `values[k]` stays
//! aligned with replicate `k` (`null` while it runs or when it ended without a value).
//!
//! Every cell but the baseline also carries each metric's [`Effect`]: the mean of its
//! replicate-by-replicate differences to the baseline (the same seed on both sides) with a 95%
//! interval. [`table_csv`] writes a table, effects included, one row per cell.

use std::collections::BTreeMap;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;

// ---- The request ----

/// A sweep file (`simtree sweep FILE`) or the body of `POST …/sweep`: the grid, its replicates and
/// its metrics. The server plans and runs it (`simtree_server::sweep::SweepPlan`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
    /// The cell the others' effects are measured against (default: the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<Baseline>,
    /// How the effects' intervals are made: `t` (default) or `bootstrap`.
    #[serde(default)]
    pub interval: IntervalKind,
}

/// Which cell is the baseline: its index in the grid (first axis slowest), or its axis values
/// (`{"rate": 0.01}`; every axis named).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(untagged)]
pub enum Baseline {
    Index(usize),
    Cell(IndexMap<String, Value>),
}

fn one() -> u64 {
    1
}

impl SweepSpec {
    /// The seed of replicate `k`, the same in every cell (the pairing).
    pub fn seed_of(&self, k: u64) -> u64 {
        self.seed.wrapping_add(k)
    }
}

/// One axis: an op template whose `field` (a dotted path inside it) takes each of `values`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Axis {
    pub label: String,
    pub op: Value,
    pub field: String,
    pub values: Vec<Value>,
}

// ---- The results ----

/// Mean, sample standard deviation and count of a metric over a cell's replicates. Booleans count
/// as 0/1; text values (a werewolf winner) get `counts` per value instead of a mean.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MetricSummary {
    pub mean: Option<f64>,
    pub sd: Option<f64>,
    pub n: usize,
    pub values: Vec<Value>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub counts: BTreeMap<String, usize>,
}

/// How a sweep's effect intervals are made: from the t distribution of the paired differences
/// (the default), or by a seeded percentile bootstrap of their mean (for skewed metrics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum IntervalKind {
    #[default]
    T,
    Bootstrap,
}

impl IntervalKind {
    pub fn is_t(&self) -> bool {
        *self == IntervalKind::T
    }
}

/// A cell's effect on one metric against the sweep's baseline cell: replicate `k` of the cell
/// minus replicate `k` of the baseline (both ran with seed `k`), over the pairs where both sides
/// have a number.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Effect {
    /// The mean paired difference (cell − baseline); `null` with no pair.
    pub mean_diff: Option<f64>,
    /// 95% interval of the mean difference; `null` with fewer than two pairs (see `reason`).
    pub ci95: Option<[f64; 2]>,
    /// Pairs where both sides have a number.
    pub n_pairs: usize,
    /// Sample standard deviation of the differences; `null` with fewer than two pairs.
    pub sd_diff: Option<f64>,
    /// Pairs left out because a side ended without a number (failed, cancelled, deleted, or the
    /// metric was missing or text). Pairs still running are neither counted nor dropped.
    pub dropped: usize,
    /// Why `mean_diff` or `ci95` is `null`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// One cell of `simtree sweep --json`: its axis values, a summary per metric in the file's order
/// and, for every cell but the baseline, its effect per metric.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CellResult {
    pub cell: IndexMap<String, Value>,
    pub metrics: IndexMap<String, MetricSummary>,
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub effects: IndexMap<String, Effect>,
}

/// The reply to `POST …/sweep`: the sweep's id, the cell nodes and, per cell, its replicates.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SweepStarted {
    pub sweep: u64,
    pub cells: Vec<u64>,
    /// `children[i]` are the replicates of `cells[i]`, replicate `k` at index `k`.
    pub children: Vec<Vec<u64>>,
    pub total: usize,
}

/// `GET …/sweep/{id}`: per cell its axis values and metric summaries, plus where its runs stand.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SweepTable {
    pub sweep: u64,
    /// The node the cells branch from.
    pub parent: u64,
    pub turns: u64,
    /// The seed of replicate `k`, shared by every cell.
    pub seeds: Vec<u64>,
    /// The metrics' names and definitions (`max:infected`, `count:vote`…), in the file's order.
    #[serde(default)]
    pub metrics: IndexMap<String, String>,
    pub total: usize,
    pub done: usize,
    pub pending: usize,
    pub failed: usize,
    /// The index of the cell every other cell's effects are measured against (0 in tables of
    /// sweeps made before effects).
    #[serde(default)]
    pub baseline: usize,
    /// How the effects' intervals are made.
    #[serde(default)]
    pub interval: IntervalKind,
    pub cells: Vec<CellRow>,
}

/// One row of a [`SweepTable`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CellRow {
    pub cell: IndexMap<String, Value>,
    pub metrics: IndexMap<String, MetricSummary>,
    /// The cell's node (a branch of `parent` with the cell's ops).
    pub node: u64,
    /// Its replicates, replicate `k` at index `k`.
    pub children: Vec<u64>,
    pub pending: usize,
    /// Replicates that ended without a result, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<FailedRun>,
    /// Per metric, the paired effect against the baseline cell; empty for the baseline itself.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub effects: IndexMap<String, Effect>,
    /// What the cell's replicates' provider calls cost in US dollars, by the server's price
    /// table; absent when they made none or any was on a model without a price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub money: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FailedRun {
    pub node: u64,
    pub error: String,
}

/// A sweep's table as CSV, one row per cell: its axis values, then per metric `mean`, `sd`, `n`
/// and the effect against the baseline (`diff`, `ci_lo`, `ci_hi`, `n_pairs`, `sd_diff`,
/// `dropped`; empty on the baseline's row and where there is no figure). Columns are named
/// `<metric>.<figure>`.
pub fn table_csv<'a>(
    metrics: &[String],
    rows: impl IntoIterator<
        Item = (&'a IndexMap<String, Value>, &'a IndexMap<String, MetricSummary>, &'a IndexMap<String, Effect>),
    >,
) -> String {
    let rows: Vec<_> = rows.into_iter().collect();
    let quote = |s: String| crate::csv::text(&s).into_owned();
    let number = |x: Option<f64>| x.map(|x| x.to_string()).unwrap_or_default();
    let axes: Vec<String> = rows.first().map(|r| r.0.keys().cloned().collect()).unwrap_or_default();
    const FIGURES: [&str; 9] = ["mean", "sd", "n", "diff", "ci_lo", "ci_hi", "n_pairs", "sd_diff", "dropped"];
    let mut header: Vec<String> = axes.clone();
    for m in metrics {
        header.extend(FIGURES.iter().map(|f| format!("{m}.{f}")));
    }
    let mut out = header.into_iter().map(quote).collect::<Vec<_>>().join(",") + "\n";
    for (cell, summaries, effects) in rows {
        let mut row: Vec<String> =
            axes.iter().map(|a| cell.get(a).map(|v| crate::csv::value(v).into_owned()).unwrap_or_default()).collect();
        for m in metrics {
            let s = summaries.get(m);
            row.push(number(s.and_then(|s| s.mean)));
            row.push(number(s.and_then(|s| s.sd)));
            row.push(s.map(|s| s.n.to_string()).unwrap_or_default());
            match effects.get(m) {
                Some(e) => {
                    row.push(number(e.mean_diff));
                    row.push(number(e.ci95.map(|c| c[0])));
                    row.push(number(e.ci95.map(|c| c[1])));
                    row.push(e.n_pairs.to_string());
                    row.push(number(e.sd_diff));
                    row.push(e.dropped.to_string());
                }
                None => row.extend(std::iter::repeat_n(String::new(), 6)),
            }
        }
        out.push_str(&(row.join(",") + "\n"));
    }
    out
}

impl SweepTable {
    /// This table as CSV ([`table_csv`]), the metrics in the sweep's order.
    pub fn to_csv(&self) -> String {
        let metrics: Vec<String> = if self.metrics.is_empty() {
            self.cells.first().map(|c| c.metrics.keys().cloned().collect()).unwrap_or_default()
        } else {
            self.metrics.keys().cloned().collect()
        };
        table_csv(&metrics, self.cells.iter().map(|c| (&c.cell, &c.metrics, &c.effects)))
    }
}
