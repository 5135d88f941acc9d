//! Explorations: a budgeted search of an intervention space for the candidate that minimises or
//! maximises one metric.
//!
//! The space is a sweep's axes ([`crate::sweep::Axis`]); every combination of their values is a
//! candidate (a cell of the grid, at most [`MAX_CANDIDATES`]). The budget is spent by
//! **successive halving** ([`next_round`], [`survivors`]):
//!
//! 1. round 1: every candidate runs `replicates` replicates;
//! 2. the candidates are ranked by their mean (goal `min`: smallest first), and the better half
//!    (rounded up) stays in the race;
//! 3. each survivor runs as many new replicates as it has, doubling its count; back to 2, until one
//!    candidate is left.
//!
//! A round that the budget cannot pay in full gives each survivor the same smaller number of new
//! replicates (what the runs left divided by the survivors allows); when that is zero the
//! exploration stops. Replicate `k` of every candidate runs with seed `seed + k`, so candidates
//! are always compared on the same dice (paired). This module is pure: the specification, its
//! checks, the schedule and the ranking; `workbench::explore` lays the runs out in a tree.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use simtree_shared::{Effect, ExploreBudget, ExploreGoal, IntervalKind, Objective};

use crate::sweep::{Axis, Cell, Metric, SweepPlan, SweepSpec, paired};

/// Most candidates a space may hold.
pub(crate) const MAX_CANDIDATES: usize = 64;
/// Most replicates of the first round.
pub(crate) const MAX_FIRST_REPLICATES: u64 = 100;

/// The body of `POST …/explore`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExploreSpec {
    /// The node every candidate branches from.
    pub(crate) parent: u64,
    /// Turns (steps, decision points) each replicate runs after its candidate's ops.
    pub(crate) turns: u64,
    /// Seed of replicate 0; replicate `k` uses `seed + k` in every candidate.
    #[serde(default)]
    pub(crate) seed: u64,
    pub(crate) objective: Objective,
    /// Sweep axes; every combination of their values is a candidate.
    space: Vec<Axis>,
    /// Replicates of every candidate in the first round (default 2).
    #[serde(default = "two")]
    pub(crate) replicates: u64,
    pub(crate) budget: ExploreBudget,
}

fn two() -> u64 {
    2
}

/// Why an exploration was refused; the message names the field at fault.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ExploreError(pub String);

fn bad(m: impl Into<String>) -> ExploreError {
    ExploreError(m.into())
}

impl ExploreSpec {
    /// Reads a body; errors name the field.
    pub(crate) fn from_value(body: serde_json::Value) -> Result<ExploreSpec, ExploreError> {
        serde_path_to_error::deserialize(body).map_err(|e| bad(format!("{}: {}", e.path(), e.inner())))
    }

    /// The objective's metric, parsed.
    pub(crate) fn metric(&self) -> Result<Metric, ExploreError> {
        Metric::parse(&self.objective.metric).map_err(|e| bad(format!("objective.metric: {e}")))
    }

    /// The candidates (the space's grid, first axis slowest) and the objective's metric, after
    /// every check but the tree's: the space is not empty and holds at most
    /// [`MAX_CANDIDATES`], each op is well-formed, the metric parses, the replicates and the
    /// budget are within bounds.
    pub(crate) fn check(&self) -> Result<(Vec<Cell>, Metric), ExploreError> {
        let metric = self.metric()?;
        if self.space.is_empty() {
            return Err(bad("space: name at least one axis (an op with a field and its values)"));
        }
        if !(1..=MAX_FIRST_REPLICATES).contains(&self.replicates) {
            return Err(bad(format!(
                "replicates: {} replicates per candidate in the first round; give 1 to {MAX_FIRST_REPLICATES}",
                self.replicates
            )));
        }
        let b = &self.budget;
        if b.runs.is_none() && b.tokens.is_none() && b.money.is_none() {
            return Err(bad("budget: give at least one of runs, tokens or money"));
        }
        if b.runs == Some(0) {
            return Err(bad("budget.runs: must be at least 1"));
        }
        if let Some(runs) = b.runs
            && runs > crate::sweep::MAX_RUNS
        {
            return Err(bad(format!(
                "budget.runs: {runs} runs; an exploration runs at most {}",
                crate::sweep::MAX_RUNS
            )));
        }
        if b.tokens == Some(0) {
            return Err(bad("budget.tokens: must be at least 1"));
        }
        if let Some(m) = b.money
            && !(m.is_finite() && m > 0.0)
        {
            return Err(bad("budget.money: must be a number of dollars above 0"));
        }
        // The grid's size is checked before any op is built, so a huge space costs nothing.
        let size =
            self.space.iter().try_fold(1usize, |n, a| n.checked_mul(a.values.len()).filter(|&n| n <= MAX_CANDIDATES));
        match size {
            Some(0) => {
                let i = self.space.iter().position(|a| a.values.is_empty()).unwrap_or(0);
                return Err(bad(format!("space[{i}]: no values")));
            }
            None => {
                return Err(bad(format!(
                    "space: more than {MAX_CANDIDATES} candidates (the product of the axes' values); \
                     an exploration weighs at most {MAX_CANDIDATES}"
                )));
            }
            Some(_) => {}
        }
        let grid = SweepSpec {
            scenario: String::new(),
            turns: self.turns,
            replicates: 1,
            seed: self.seed,
            axes: self.space.clone(),
            metrics: IndexMap::from([("objective".to_string(), self.objective.metric.clone())]),
            prefix: 0,
            parent: None,
            baseline: None,
            interval: IntervalKind::T,
        };
        let cells = grid.cells().map_err(|e| {
            let e = e.to_string();
            bad(e.strip_prefix("axes").map_or(e.clone(), |rest| format!("space{rest}")))
        })?;
        Ok((cells, metric))
    }

    /// The most runs this exploration may start: its runs budget, or without one the whole
    /// schedule down to one candidate.
    pub(crate) fn run_cap(&self, candidates: usize) -> u64 {
        let schedule = worst_case_runs(candidates, self.replicates, u64::MAX);
        self.budget.runs.map_or(schedule, |r| r.min(schedule))
    }

    /// The seed of replicate `k`.
    pub(crate) fn seed_of(&self, k: u64) -> u64 {
        self.seed.wrapping_add(k)
    }
}

/// How many candidates stay in the race after a round among `alive`: the better half, rounded up.
pub(crate) fn survivors(alive: usize) -> usize {
    alive.div_ceil(2).max(1)
}

/// New replicates for each of `alive` candidates in the next round, which have `have`
/// replicates each (0 before the first round), with `runs_left` runs of the budget left; 0
/// means stop (one candidate is left after a round, or the budget cannot give each one more).
pub(crate) fn next_round(alive: usize, have: u64, first: u64, runs_left: u64) -> u64 {
    if alive == 0 || (have > 0 && alive <= 1) {
        return 0;
    }
    let want = if have == 0 { first } else { have };
    want.min(runs_left / alive as u64)
}

/// Runs the whole schedule starts for `candidates` with `first` replicates in round 1 and at
/// most `cap` runs.
pub(crate) fn worst_case_runs(candidates: usize, first: u64, cap: u64) -> u64 {
    let (mut alive, mut have, mut used) = (candidates, 0u64, 0u64);
    loop {
        let add = next_round(alive, have, first, cap - used);
        if add == 0 {
            return used;
        }
        used += add * alive as u64;
        have += add;
        alive = survivors(alive);
    }
}

/// Mean and 95% interval (Student's t) of a candidate's values.
pub(crate) fn mean_ci(values: &[f64]) -> Effect {
    paired(values, IntervalKind::T, 0)
}

/// Orders candidates best first by their mean for `goal`; those without a mean come last; ties
/// keep the grid's order.
pub(crate) fn rank(means: &[(usize, Option<f64>)], goal: ExploreGoal) -> Vec<usize> {
    let mut order: Vec<(usize, Option<f64>)> = means.to_vec();
    order.sort_by(|a, b| match (a.1, b.1) {
        (Some(x), Some(y)) => {
            let o = match goal {
                ExploreGoal::Min => x.total_cmp(&y),
                ExploreGoal::Max => y.total_cmp(&x),
            };
            o.then(a.0.cmp(&b.0))
        }
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.0.cmp(&b.0),
    });
    order.into_iter().map(|(i, _)| i).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(body: serde_json::Value) -> Result<ExploreSpec, ExploreError> {
        ExploreSpec::from_value(body)
    }

    fn body(values: serde_json::Value) -> serde_json::Value {
        json!({"parent": 0, "turns": 5, "objective": {"metric": "max:globalVariable.infectedCount", "goal": "min"},
               "space": [{"label": "rate", "op": {"op": "abm_set_global", "name": "infectionRate"},
                          "field": "value", "values": values}],
               "replicates": 2, "budget": {"runs": 40}})
    }

    #[test]
    fn the_schedule_halves_and_doubles_and_never_passes_the_cap() {
        // 8 candidates × 2, 4 × 2 more, 2 × 4 more, then one is left: 16 + 8 + 8.
        assert_eq!(worst_case_runs(8, 2, u64::MAX), 32);
        assert_eq!(worst_case_runs(1, 3, u64::MAX), 3);
        assert_eq!(worst_case_runs(5, 1, u64::MAX), 5 + 3 + 2 * 2);
        for cap in 0..40 {
            assert!(worst_case_runs(8, 2, cap) <= cap);
        }
        // A round the budget cannot pay in full gives each survivor what it can: 16, then 4 × 1.
        assert_eq!(worst_case_runs(8, 2, 21), 20);
        assert_eq!(next_round(4, 2, 2, 5), 1);
        assert_eq!(next_round(4, 2, 2, 3), 0);
        assert_eq!(next_round(1, 8, 2, 100), 0, "one candidate left after a round");
        assert_eq!(next_round(1, 0, 2, 100), 2, "a single candidate still runs its first round");
    }

    #[test]
    fn ranking_follows_the_goal_and_puts_missing_means_last() {
        let m = [(0, Some(3.0)), (1, None), (2, Some(1.0)), (3, Some(3.0))];
        assert_eq!(rank(&m, ExploreGoal::Min), vec![2, 0, 3, 1]);
        assert_eq!(rank(&m, ExploreGoal::Max), vec![0, 3, 2, 1]);
        assert_eq!(survivors(5), 3);
        assert_eq!(survivors(1), 1);
    }

    #[test]
    fn bad_bodies_are_refused_naming_the_field() {
        let check = |b: serde_json::Value| spec(b).and_then(|s| s.check().map(|_| ())).unwrap_err().to_string();
        assert!(check(body(json!([]))).starts_with("space[0]: no values"));
        let mut b = body(json!([0.1]));
        b["space"] = json!([]);
        assert!(check(b).starts_with("space:"));
        let many: Vec<f64> = (0..65).map(|i| i as f64).collect();
        assert!(check(body(json!(many))).contains("at most 64"));
        let mut b = body(json!([0.1]));
        b["space"] = json!(
            (0..70)
                .map(|_| json!({"label": "x", "op": {"op": "abm_set_global", "name": "x"},
                                                   "field": "value", "values": [1, 2]}))
                .collect::<Vec<_>>()
        );
        assert!(check(b).contains("at most 64"), "2^70 candidates are refused without building them");
        for (field, value, want) in [
            ("replicates", json!(0), "replicates"),
            ("replicates", json!(1_000_000), "replicates"),
            ("budget", json!({}), "budget:"),
            ("budget", json!({"runs": 0}), "budget.runs"),
            ("budget", json!({"runs": 9_223_372_036_854_775_808u64}), "budget.runs"),
            ("budget", json!({"money": 0.0}), "budget.money"),
            ("budget", json!({"money": -1.0}), "budget.money"),
            ("budget", json!({"tokens": 0}), "budget.tokens"),
            ("objective", json!({"metric": "median:x", "goal": "min"}), "objective.metric"),
        ] {
            let mut b = body(json!([0.1, 0.2]));
            b[field] = value;
            let e = check(b);
            assert!(e.starts_with(want), "{field}: {e}");
        }
        let mut b = body(json!([0.1]));
        b["objective"]["goal"] = json!("best");
        assert!(spec(b).unwrap_err().to_string().starts_with("objective.goal"));
        let mut b = body(json!([0.1]));
        b["space"][0]["op"] = json!({"op": "fly"});
        assert!(check(b).starts_with("space[0].op"));
    }

    #[test]
    fn a_good_body_gives_its_candidates_and_its_cap() {
        let s = spec(body(json!([0.1, 0.2, 0.3]))).unwrap();
        let (cells, _) = s.check().unwrap();
        assert_eq!(cells.len(), 3);
        assert_eq!(s.run_cap(3), 6 + 2 * 2);
        assert_eq!(s.seed_of(3), 3);
    }
}
