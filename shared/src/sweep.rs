//! Sweep results on the wire: what `POST …/sweep` answers, the table of `GET …/sweep/{id}` and
//! `simtree sweep --json`, and the progress message on the tree socket.
//!
//! A sweep is a grid of cells (one value per axis) × replicates (replicate `k` of every cell runs
//! with the same seed). Each metric of a cell is summarised over its replicates; `values[k]` stays
//! aligned with replicate `k` (`null` while it runs or when it ended without a value).

use std::collections::BTreeMap;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;

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

/// One cell of `simtree sweep --json`: its axis values and a summary per metric, in the file's
/// order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CellResult {
    pub cell: IndexMap<String, Value>,
    pub metrics: IndexMap<String, MetricSummary>,
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
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FailedRun {
    pub node: u64,
    pub error: String,
}
