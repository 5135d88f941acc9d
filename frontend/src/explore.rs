//! Explorations in the web UI, the pure part (tested natively): the form that makes the body of
//! `POST …/explore` (one axis, read as the sweep form reads it, an objective and a budget), the
//! words of a candidate's row and where the race stands. See `docs/explore.md`.

use indexmap::IndexMap;
use serde_json::{Value, json};
use simtree_shared::{ExploreStatus, ExploreTable};

use crate::ops::Kind;
use crate::sweep::SweepForm;

/// The exploration form's fields as typed.
#[derive(Clone, Debug, PartialEq)]
pub struct ExploreForm {
    /// The axis, the first round's replicates, turns and seed, as in the sweep form.
    pub axis: SweepForm,
    /// One sweep metric reduction (`max:globalVariable.infectedCount`).
    pub metric: String,
    /// `min` or `max`.
    pub goal: String,
    /// Runs the exploration may start (empty: none).
    pub runs: String,
    /// Dollars it may spend (empty: none).
    pub money: String,
}

/// The i18n keys of [`ExploreForm::to_body`]'s own errors (the i18n test checks them).
pub const FORM_ERRORS: [&str; 3] = ["explore.errMetric", "explore.errBudget", "explore.errMoney"];

impl ExploreForm {
    /// An exploration that runs as it is on the tree's kind: the sweep example's axis with more
    /// values, its first metric, the lowest (ABM) or highest (others) value wanted.
    pub fn example(kind: Kind) -> ExploreForm {
        let mut axis = SweepForm::example(kind);
        let goal = match kind {
            Kind::Abm => {
                axis.values = "0.01, 0.05, 0.1, 0.3".into();
                "min"
            }
            Kind::Trading => {
                axis.values = "3, 5, 10, 20".into();
                "max"
            }
            Kind::Social => {
                axis.values = "rain, sun, snow".into();
                "max"
            }
        };
        let metric = axis
            .metrics
            .lines()
            .next()
            .and_then(|l| l.split_once('='))
            .map_or(String::new(), |(_, spec)| spec.trim().to_string());
        ExploreForm { axis, metric, goal: goal.into(), runs: "20".into(), money: String::new() }
    }

    /// The body of `POST …/explore` from `parent`, or the i18n key of the first field at fault.
    /// The server checks the rest (the op, the metric's kind, the limits) and names the field.
    pub fn to_body(&self, parent: u64) -> Result<Value, &'static str> {
        let metric = self.metric.trim();
        if metric.is_empty() {
            return Err("explore.errMetric");
        }
        let mut axis = self.axis.clone();
        axis.metrics = format!("objective = {metric}");
        let file = axis.to_file()?;
        let runs = match self.runs.trim() {
            "" => None,
            r => Some(r.parse::<u64>().ok().filter(|n| *n > 0).ok_or("explore.errBudget")?),
        };
        let money = match self.money.trim() {
            "" => None,
            m => Some(m.parse::<f64>().ok().filter(|x| x.is_finite() && *x > 0.0).ok_or("explore.errMoney")?),
        };
        if runs.is_none() && money.is_none() {
            return Err("explore.errBudget");
        }
        let mut budget = serde_json::Map::new();
        if let Some(r) = runs {
            budget.insert("runs".into(), json!(r));
        }
        if let Some(m) = money {
            budget.insert("money".into(), json!(m));
        }
        Ok(json!({
            "parent": parent, "turns": file["turns"], "seed": file["seed"],
            "replicates": file["replicates"], "space": file["axes"],
            "objective": {"metric": metric, "goal": if self.goal == "max" { "max" } else { "min" }},
            "budget": budget,
        }))
    }
}

/// A candidate's axis values, `rate=0.01 · x=2 · model=a` (a text value without its quotes).
pub fn point_text(point: &IndexMap<String, Value>) -> String {
    point
        .iter()
        .map(|(k, v)| match v {
            Value::String(s) => format!("{k}={s}"),
            v => format!("{k}={v}"),
        })
        .collect::<Vec<_>>()
        .join(" · ")
}

/// A number as the table shows it: four significant figures at most, no trailing zeros.
fn figure(x: f64) -> String {
    let digits = if x == 0.0 { 0 } else { (3 - x.abs().log10().floor() as i32).clamp(0, 6) as usize };
    let s = format!("{x:.digits$}");
    if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s }
}

/// `mean [lo, hi]`, `mean` without an interval, `–` without a value.
pub fn mean_text(mean: Option<f64>, ci95: Option<[f64; 2]>) -> String {
    match (mean, ci95) {
        (Some(m), Some([lo, hi])) => format!("{} [{}, {}]", figure(m), figure(lo), figure(hi)),
        (Some(m), None) => figure(m),
        (None, _) => "–".into(),
    }
}

/// The i18n key of a status.
pub fn status_key(s: ExploreStatus) -> &'static str {
    match s {
        ExploreStatus::Running => "explore.running",
        ExploreStatus::Done => "explore.done",
        ExploreStatus::Cancelled => "explore.cancelled",
        ExploreStatus::Interrupted => "explore.interrupted",
    }
}

/// The candidates in the order the race left them: alive first, then the later dropped, each
/// group in the space's order (the table's rows).
pub fn race_order(table: &ExploreTable) -> Vec<usize> {
    let mut order: Vec<usize> = (0..table.candidates.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(table.candidates[i].dropped_after.unwrap_or(u32::MAX)));
    order
}

/// Puts a freshly read table into the list (appending a new exploration, replacing a known one).
pub fn merge(list: &mut Vec<ExploreTable>, table: ExploreTable) {
    match list.iter_mut().find(|t| t.explore == table.explore) {
        Some(old) => *old = table,
        None => list.push(table),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use simtree_shared::CandidateRow;

    #[test]
    fn the_example_makes_a_body_the_server_reads() {
        let f = ExploreForm::example(Kind::Abm);
        let body = f.to_body(4).unwrap();
        assert_eq!(body["parent"], 4);
        assert_eq!(body["objective"], json!({"metric": "max:globalVariable.infectedCount", "goal": "min"}));
        assert_eq!(body["space"][0]["values"], json!([0.01, 0.05, 0.1, 0.3]));
        assert_eq!(body["space"][0]["op"]["name"], "infectionRate");
        assert_eq!(body["budget"], json!({"runs": 20}));
        assert_eq!((body["turns"].clone(), body["replicates"].clone()), (json!(40), json!(2)));
        let social = ExploreForm::example(Kind::Social).to_body(0).unwrap();
        assert_eq!(social["objective"]["metric"], "count:action_end");
        assert_eq!(social["space"][0]["values"], json!(["rain", "sun", "snow"]));
    }

    #[test]
    fn bad_fields_name_their_key() {
        let mut f = ExploreForm::example(Kind::Abm);
        f.runs = String::new();
        assert_eq!(f.to_body(0), Err("explore.errBudget"));
        f.money = "-1".into();
        assert_eq!(f.to_body(0), Err("explore.errMoney"));
        f.money = "0.5".into();
        assert_eq!(f.to_body(0).unwrap()["budget"], json!({"money": 0.5}));
        f.runs = "0".into();
        assert_eq!(f.to_body(0), Err("explore.errBudget"));
        f.runs = "5".into();
        f.metric = " ".into();
        assert_eq!(f.to_body(0), Err("explore.errMetric"));
        f.metric = "max:x".into();
        f.axis.values = String::new();
        assert_eq!(f.to_body(0), Err("sweep.errValues"));
    }

    fn row(point: f64, dropped_after: Option<u32>) -> CandidateRow {
        CandidateRow {
            point: serde_json::from_value(json!({"rate": point})).unwrap(),
            n: 2,
            mean: Some(1.0),
            ci95: None,
            alive: dropped_after.is_none(),
            dropped_after,
            node: 1,
            children: vec![],
            pending: 0,
            failed: 0,
        }
    }

    #[test]
    fn rows_read_in_the_order_the_race_left_them() {
        let table = ExploreTable {
            explore: 0,
            parent: 0,
            turns: 1,
            seed: 0,
            objective: simtree_shared::Objective { metric: "max:x".into(), goal: simtree_shared::ExploreGoal::Min },
            status: ExploreStatus::Done,
            reason: None,
            round: 2,
            runs_used: 6,
            money_used: None,
            tokens_used: 0,
            budget: Default::default(),
            candidates: vec![row(0.1, Some(1)), row(0.2, None), row(0.3, Some(2))],
            best: None,
        };
        assert_eq!(race_order(&table), vec![1, 2, 0]);
        assert_eq!(point_text(&table.candidates[0].point), "rate=0.1");
        assert_eq!(mean_text(Some(13.6667), Some([5.0, 22.25])), "13.67 [5, 22.25]");
        assert_eq!(mean_text(Some(693.0), None), "693");
        assert_eq!(mean_text(None, None), "–");
    }
}
