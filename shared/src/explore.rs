//! Explorations on the wire: the body of `POST …/explore`, what it answers, the table of
//! `GET …/explore/{id}` and the progress message on the tree socket.
//!
//! An exploration searches a space of interventions (the axes of a sweep: every combination is a
//! candidate) for the one that minimises or maximises one metric, spending a budget of runs,
//! tokens or money adaptively by successive halving: every candidate gets a few replicates, the
//! better half keeps going with twice as many, and so on. Replicate `k` of every candidate runs
//! with the same seed, so candidates are compared on the same dice.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Effect;

/// Whether the objective's metric is to be made as small or as large as possible.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ExploreGoal {
    #[default]
    Min,
    Max,
}

/// What an exploration optimises: one metric (a sweep metric spec, `max:globalVariable.x`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Objective {
    pub metric: String,
    pub goal: ExploreGoal,
}

/// What an exploration may spend; at least one cap, each above zero. Runs are counted as they
/// are started; tokens and money as the tree's budget counts them (money is never exceeded).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ExploreBudget {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// US dollars.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub money: Option<f64>,
}

/// The reply to `POST …/explore`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ExploreStarted {
    pub explore: u64,
    /// The candidates' nodes (a branch of `parent` each), in the space's grid order.
    pub candidates: Vec<u64>,
}

/// Where an exploration stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ExploreStatus {
    #[default]
    Running,
    /// It ended: one candidate was left, or the budget could not pay for another round.
    Done,
    Cancelled,
    /// The server stopped while it ran; what finished before is kept.
    Interrupted,
}

/// One candidate of an [`ExploreTable`]: its axis values and its objective over its replicates.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CandidateRow {
    pub point: IndexMap<String, Value>,
    /// Replicates with a value.
    pub n: usize,
    pub mean: Option<f64>,
    /// 95% interval of the mean (Student's t); `null` with fewer than two values.
    pub ci95: Option<[f64; 2]>,
    /// Still in the race (not halved away).
    pub alive: bool,
    /// The round it was dropped after (absent while alive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropped_after: Option<u32>,
    /// The candidate's node (a branch of the exploration's parent).
    pub node: u64,
    /// Its replicates' nodes, replicate `k` (seed `seed + k`) at index `k`.
    pub children: Vec<u64>,
    /// Replicates still running.
    pub pending: usize,
    /// Replicates that ended without a value.
    pub failed: usize,
}

/// The best candidate so far: the best mean among those still alive.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ExploreBest {
    pub point: IndexMap<String, Value>,
    pub mean: f64,
    pub ci95: Option<[f64; 2]>,
    pub n: usize,
    /// The candidate's node: open it to see the branch.
    pub node: u64,
    /// The paired difference (runner-up − best, on the replicates both have) with its 95%
    /// interval: how clearly it beats the next best. Absent with a single candidate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub margin: Option<Effect>,
}

/// `GET …/explore/{id}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ExploreTable {
    pub explore: u64,
    pub parent: u64,
    pub turns: u64,
    /// Seed of replicate 0; replicate `k` uses `seed + k` in every candidate.
    pub seed: u64,
    pub objective: Objective,
    pub status: ExploreStatus,
    /// Why it stopped (absent while running).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Rounds begun (the first is 1).
    pub round: u32,
    /// Runs started so far (each reserved from the budget before it started).
    pub runs_used: u64,
    /// What the exploration's runs' provider calls cost so far (absent with none priced).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub money_used: Option<f64>,
    /// Tokens its runs' provider calls used so far.
    #[serde(default)]
    pub tokens_used: u64,
    pub budget: ExploreBudget,
    pub candidates: Vec<CandidateRow>,
    pub best: Option<ExploreBest>,
}
