//! Sweeps in the web UI, the pure part (tested natively): the words of a sweep's table (a cell's
//! axis values, a metric's `mean ± sd (n)` or its counts, a cell's effect against the baseline
//! `+3.2 ± 1.1`), what the per-metric chart and the effects' forest plot draw, and
//! the sweep form — one axis, replicates, turns, seed, metrics — turned into the sweep file the
//! server reads (`POST …/sweep`, see the README's "Sweeps").
//!
//! The form fills its fields with a working example for the tree's kind, so a first sweep is one
//! click; the JSON expert mode starts from the same file and can say anything the server accepts
//! (several axes, a grid).

use serde_json::{Map, Value, json};
use simtree_shared::{CellRow, Effect, MetricSummary, SweepTable};

use crate::chart::{Axis, value_label};
use crate::ops::Kind;

/// An axis value or a metric value as text: numbers as the chart writes them, strings unquoted.
pub fn value_text(v: &Value) -> String {
    match v {
        Value::Number(n) => n.as_f64().map_or_else(|| n.to_string(), value_label),
        Value::String(s) => s.clone(),
        Value::Null => "–".into(),
        other => other.to_string(),
    }
}

/// A cell's axis values as one label: `rate=0.3`, `rate=0.3 · k=2` (a sweep without axes has
/// one cell, `–`).
pub fn cell_label(row: &CellRow) -> String {
    if row.cell.is_empty() {
        return "–".into();
    }
    row.cell.iter().map(|(axis, v)| format!("{axis}={}", value_text(v))).collect::<Vec<_>>().join(" · ")
}

/// A metric over a cell's replicates: `45.5 ± 3.54 (n=2)`, text values counted
/// (`landlord 2 · farmers 1 (n=3)`), `–` before any replicate has a value.
pub fn summary_text(m: &MetricSummary) -> String {
    if !m.counts.is_empty() {
        let counts = m.counts.iter().map(|(v, c)| format!("{v} {c}")).collect::<Vec<_>>().join(" · ");
        return format!("{counts} (n={})", m.n);
    }
    match (m.mean, m.sd) {
        (Some(mean), Some(sd)) => format!("{} ± {} (n={})", value_label(mean), value_label(sd), m.n),
        (Some(mean), None) => format!("{} (n={})", value_label(mean), m.n),
        _ => "–".into(),
    }
}

/// A difference with its sign: `+3.2`, `-0.5`, `0`.
fn signed(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v > 0.0 {
        format!("+{}", value_label(v))
    } else {
        value_label(v)
    }
}

/// A cell's effect on a metric against the baseline: `+673 ± 32.3` (an interval symmetric about
/// the difference, Student's t), `+673 [641, 705]` (a bootstrap's, not symmetric), the bare
/// difference with one pair, `–` with none. The interval's absence is explained by
/// [`Effect::reason`], shown as the cell's title.
pub fn effect_text(e: &Effect) -> String {
    let Some(d) = e.mean_diff else { return "–".into() };
    match e.ci95 {
        Some([lo, hi]) => {
            let (below, above) = (d - lo, hi - d);
            if (below - above).abs() <= 1e-9 * (1.0 + d.abs()) {
                format!("{} ± {}", signed(d), value_label(above))
            } else {
                format!("{} [{}, {}]", signed(d), value_label(lo), value_label(hi))
            }
        }
        None => signed(d),
    }
}

/// The title of an effect's table cell: pairs, dropped pairs and why an interval is missing.
pub fn effect_title(e: &Effect) -> String {
    let mut t = format!("n_pairs={} dropped={}", e.n_pairs, e.dropped);
    if let Some(sd) = e.sd_diff {
        t.push_str(&format!(" sd_diff={}", value_label(sd)));
    }
    if let Some(r) = &e.reason {
        t.push_str(" · ");
        t.push_str(r);
    }
    t
}

/// One row of a forest plot: a cell other than the baseline, its mean paired difference and
/// interval (NaN where there is none).
#[derive(Clone, Debug, PartialEq)]
pub struct ForestRow {
    /// The cell's index in the table (to select its node).
    pub cell: usize,
    pub label: String,
    pub diff: f64,
    pub lo: f64,
    pub hi: f64,
}

/// The forest plot of one metric: a row per non-baseline cell on one axis that always holds 0
/// (no effect), so an interval crossing the zero line reads as "not distinguishable from the
/// baseline".
#[derive(Clone, Debug, PartialEq)]
pub struct ForestPlot {
    pub rows: Vec<ForestRow>,
    pub axis: Axis,
    /// The baseline cell's label (the plot's caption names it).
    pub baseline: String,
}

impl ForestPlot {
    /// The plot of `metric`; `None` when no cell has a difference yet (a text metric, nothing
    /// measured, a sweep of one cell).
    pub fn of(table: &SweepTable, metric: &str) -> Option<ForestPlot> {
        let rows: Vec<ForestRow> = table
            .cells
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != table.baseline)
            .map(|(i, c)| {
                let e = c.effects.get(metric);
                let ci = e.and_then(|e| e.ci95);
                ForestRow {
                    cell: i,
                    label: cell_label(c),
                    diff: e.and_then(|e| e.mean_diff).unwrap_or(f64::NAN),
                    lo: ci.map_or(f64::NAN, |c| c[0]),
                    hi: ci.map_or(f64::NAN, |c| c[1]),
                }
            })
            .collect();
        if !rows.iter().any(|r| r.diff.is_finite()) {
            return None;
        }
        let pick = |f: fn(&ForestRow) -> f64| rows.iter().map(f).collect::<Vec<f64>>();
        let axis = Axis::over(&[&[0.0], &pick(|r| r.diff), &pick(|r| r.lo), &pick(|r| r.hi)], 5)?;
        let baseline = table.cells.get(table.baseline).map(cell_label).unwrap_or_default();
        Some(ForestPlot { rows, axis, baseline })
    }

    /// Where value `v` falls between `left` and `right` (SVG x).
    pub fn x(&self, v: f64, left: f64, right: f64) -> f64 {
        let span = self.axis.hi - self.axis.lo;
        if span <= 0.0 {
            return left;
        }
        left + (v - self.axis.lo) / span * (right - left)
    }
}

/// What the chart of one metric plots: per cell its label, mean and sd (NaN while unknown) and
/// the replicates' values that are numbers (booleans as 0/1, as the server counts them).
#[derive(Clone, Debug, PartialEq)]
pub struct MetricPlot {
    pub labels: Vec<String>,
    pub mean: Vec<f64>,
    pub sd: Vec<f64>,
    pub values: Vec<Vec<f64>>,
}

impl MetricPlot {
    /// The plot of `metric`; `None` when no cell has a numeric mean (a text metric such as a
    /// winner, which the table shows as counts).
    pub fn of(table: &SweepTable, metric: &str) -> Option<MetricPlot> {
        let summaries: Vec<Option<&MetricSummary>> = table.cells.iter().map(|c| c.metrics.get(metric)).collect();
        if !summaries.iter().flatten().any(|m| m.mean.is_some()) {
            return None;
        }
        let number = |v: &Value| v.as_f64().or_else(|| v.as_bool().map(|b| f64::from(u8::from(b))));
        Some(MetricPlot {
            labels: table.cells.iter().map(cell_label).collect(),
            mean: summaries.iter().map(|m| m.and_then(|m| m.mean).unwrap_or(f64::NAN)).collect(),
            sd: summaries.iter().map(|m| m.and_then(|m| m.sd.or(m.mean.map(|_| 0.0))).unwrap_or(f64::NAN)).collect(),
            values: summaries
                .iter()
                .map(|m| m.map(|m| m.values.iter().filter_map(number).collect()).unwrap_or_default())
                .collect(),
        })
    }

    /// The band's bounds, mean − sd and mean + sd per cell.
    pub fn bounds(&self) -> (Vec<f64>, Vec<f64>) {
        let lo = self.mean.iter().zip(&self.sd).map(|(m, s)| m - s).collect();
        let hi = self.mean.iter().zip(&self.sd).map(|(m, s)| m + s).collect();
        (lo, hi)
    }
}

/// The sweep form's fields, as typed (numbers are parsed when the file is made).
#[derive(Clone, Debug, PartialEq)]
pub struct SweepForm {
    pub label: String,
    /// The op template, JSON.
    pub op: String,
    /// The dotted path inside the op that takes each value.
    pub field: String,
    /// Comma-separated; each is read as JSON (`0.3`, `true`, `"x"`), else taken as text.
    pub values: String,
    pub replicates: String,
    pub turns: String,
    pub seed: String,
    /// One `name = reduction` per line (`peak = max:globalVariable.infectedCount`).
    pub metrics: String,
}

impl SweepForm {
    /// A sweep that runs as it is on the tree's kind (the README's examples).
    pub fn example(kind: Kind) -> SweepForm {
        let (label, op, field, values, turns, metrics) = match kind {
            Kind::Abm => (
                "rate",
                json!({"op": "abm_set_global", "name": "infectionRate"}),
                "value",
                "0.01, 0.3",
                "40",
                "peak = max:globalVariable.infectedCount",
            ),
            Kind::Trading => (
                "lookback",
                json!({"op": "agent_swap", "agent": {"kind": "momentum"}}),
                "agent.lookback",
                "3, 10",
                "15",
                "value = metric:final_value\ntrades = metric:num_trades",
            ),
            Kind::Social => {
                ("news", json!({"op": "public_broadcast"}), "text", "rain, sun", "2", "actions = count:action_end")
            }
        };
        SweepForm {
            label: label.into(),
            op: op.to_string(),
            field: field.into(),
            values: values.into(),
            replicates: "2".into(),
            turns: turns.into(),
            seed: "1".into(),
            metrics: metrics.into(),
        }
    }

    /// The sweep file (without `parent`), or the i18n key of the first field at fault.
    pub fn to_file(&self) -> Result<Value, &'static str> {
        let op: Value = serde_json::from_str(&self.op).map_err(|_| "sweep.errOp")?;
        if !op.is_object() {
            return Err("sweep.errOp");
        }
        let values: Vec<Value> = self
            .values
            .split(',')
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(|v| serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.to_string())))
            .collect();
        if values.is_empty() {
            return Err("sweep.errValues");
        }
        let count = |text: &str, min: u64| text.trim().parse::<u64>().ok().filter(|n| *n >= min);
        let replicates = count(&self.replicates, 1).ok_or("sweep.errReplicates")?;
        let turns = count(&self.turns, 0).ok_or("sweep.errTurns")?;
        let seed = if self.seed.trim().is_empty() { 0 } else { count(&self.seed, 0).ok_or("sweep.errSeed")? };
        let mut metrics = Map::new();
        for line in self.metrics.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let (name, spec) = line.split_once('=').ok_or("sweep.errMetrics")?;
            let (name, spec) = (name.trim(), spec.trim());
            if name.is_empty() || spec.is_empty() {
                return Err("sweep.errMetrics");
            }
            metrics.insert(name.to_string(), Value::String(spec.to_string()));
        }
        if metrics.is_empty() {
            return Err("sweep.errMetrics");
        }
        Ok(json!({
            "turns": turns, "replicates": replicates, "seed": seed,
            "axes": [{"label": self.label.trim(), "op": op, "field": self.field.trim(), "values": values}],
            "metrics": metrics,
        }))
    }
}

/// Puts a freshly read table into the list: a new sweep is appended, a known one replaced unless
/// the list already holds a table further along (two reads in flight may answer out of order).
pub fn merge_table(list: &mut Vec<SweepTable>, table: SweepTable) {
    match list.iter_mut().find(|t| t.sweep == table.sweep) {
        Some(old) if old.done + old.failed <= table.done + table.failed => *old = table,
        Some(_) => {}
        None => list.push(table),
    }
}

/// The i18n keys of [`SweepForm::to_file`]'s errors (the i18n test checks they are translated).
pub const FORM_ERRORS: [&str; 7] = [
    "sweep.errOp",
    "sweep.errValues",
    "sweep.errReplicates",
    "sweep.errTurns",
    "sweep.errSeed",
    "sweep.errMetrics",
    "sweep.errJson",
];

/// The body of `POST …/sweep`: a sweep file (the form's or the expert mode's text) with `parent`
/// set to the node the cells branch from; `None` when the text is not a JSON object.
pub fn with_parent(file: &str, parent: u64) -> Option<Value> {
    let mut body: Value = serde_json::from_str(file).ok()?;
    body.as_object_mut()?.insert("parent".into(), json!(parent));
    Some(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn summary(mean: Option<f64>, sd: Option<f64>, values: Value) -> MetricSummary {
        let values = values.as_array().cloned().unwrap_or_default();
        MetricSummary { mean, sd, n: values.iter().filter(|v| !v.is_null()).count(), values, counts: BTreeMap::new() }
    }

    fn row(rate: f64, peak: MetricSummary) -> CellRow {
        CellRow {
            cell: [("rate".to_string(), json!(rate))].into_iter().collect(),
            metrics: [("peak".to_string(), peak)].into_iter().collect(),
            node: 1,
            children: vec![2, 3],
            pending: 0,
            failed: vec![],
            effects: Default::default(),
            money: None,
        }
    }

    fn table(cells: Vec<CellRow>) -> SweepTable {
        SweepTable {
            sweep: 0,
            parent: 0,
            turns: 40,
            seeds: vec![1, 2],
            metrics: Default::default(),
            total: 4,
            done: 3,
            pending: 1,
            failed: 0,
            baseline: 0,
            interval: Default::default(),
            cells,
        }
    }

    #[test]
    fn a_table_reads_as_cells_and_summaries() {
        let r = row(0.3, summary(Some(45.5), Some(3.5355), json!([43, 48])));
        assert_eq!(cell_label(&r), "rate=0.3");
        assert_eq!(summary_text(&r.metrics["peak"]), "45.5 ± 3.54 (n=2)");
        assert_eq!(summary_text(&summary(Some(7.0), None, json!([7, null]))), "7 (n=1)");
        assert_eq!(summary_text(&summary(None, None, json!([null, null]))), "–");
        let mut winners = summary(None, None, json!(["farmers", "landlord", "farmers"]));
        winners.counts = [("farmers".to_string(), 2), ("landlord".to_string(), 1)].into();
        assert_eq!(summary_text(&winners), "farmers 2 · landlord 1 (n=3)");
        assert_eq!(value_text(&json!("rain")), "rain");
        assert_eq!(value_text(&json!(1_250_000)), "1,250,000");
    }

    #[test]
    fn a_metric_plots_per_cell_with_its_band_and_replicates() {
        let t = table(vec![
            row(0.01, summary(Some(3.0), Some(1.0), json!([2, 4]))),
            // One replicate still running: its mean so far, no spread, its one value.
            row(0.3, summary(Some(40.0), None, json!([40, null]))),
        ]);
        let p = MetricPlot::of(&t, "peak").unwrap();
        assert_eq!(p.labels, ["rate=0.01", "rate=0.3"]);
        assert_eq!((p.mean.clone(), p.sd.clone()), (vec![3.0, 40.0], vec![1.0, 0.0]));
        assert_eq!(p.values, [vec![2.0, 4.0], vec![40.0]]);
        assert_eq!(p.bounds(), (vec![2.0, 40.0], vec![4.0, 40.0]));
        assert_eq!(MetricPlot::of(&t, "nope"), None, "an unknown metric has nothing to plot");
        let waiting = table(vec![row(0.01, summary(None, None, json!([null, null])))]);
        assert_eq!(MetricPlot::of(&waiting, "peak"), None, "nothing measured yet");
    }

    #[test]
    fn a_late_answer_does_not_undo_progress() {
        let mut list = vec![table(vec![])];
        let mut ahead = table(vec![]);
        ahead.done = 4;
        merge_table(&mut list, ahead.clone());
        assert_eq!(list[0].done, 4);
        merge_table(&mut list, table(vec![]));
        assert_eq!(list[0].done, 4, "an older read (done 3) arriving late is ignored");
        let mut other = table(vec![]);
        other.sweep = 1;
        merge_table(&mut list, other);
        assert_eq!(list.iter().map(|t| t.sweep).collect::<Vec<_>>(), [0, 1]);
    }

    #[test]
    fn the_form_makes_the_sweep_file_and_names_the_field_at_fault() {
        let f = SweepForm::example(Kind::Abm);
        assert_eq!(
            f.to_file().unwrap(),
            json!({"turns": 40, "replicates": 2, "seed": 1,
                   "axes": [{"label": "rate", "op": {"op": "abm_set_global", "name": "infectionRate"},
                             "field": "value", "values": [0.01, 0.3]}],
                   "metrics": {"peak": "max:globalVariable.infectedCount"}})
        );
        let text = SweepForm::example(Kind::Social).to_file().unwrap();
        assert_eq!(text["axes"][0]["values"], json!(["rain", "sun"]), "bare words are text");
        let two = SweepForm::example(Kind::Trading).to_file().unwrap();
        let names: Vec<&String> = two["metrics"].as_object().unwrap().keys().collect();
        assert_eq!(names, ["value", "trades"], "metrics keep the form's order");

        let broken = |edit: fn(&mut SweepForm)| {
            let mut f = SweepForm::example(Kind::Abm);
            edit(&mut f);
            f.to_file().unwrap_err()
        };
        assert_eq!(broken(|f| f.op = "{op:".into()), "sweep.errOp");
        assert_eq!(broken(|f| f.op = "[1]".into()), "sweep.errOp");
        assert_eq!(broken(|f| f.values = " , ".into()), "sweep.errValues");
        assert_eq!(broken(|f| f.replicates = "0".into()), "sweep.errReplicates");
        assert_eq!(broken(|f| f.turns = "x".into()), "sweep.errTurns");
        assert_eq!(broken(|f| f.seed = "-1".into()), "sweep.errSeed");
        assert_eq!(broken(|f| f.metrics = "peak max:x".into()), "sweep.errMetrics");
        assert_eq!(broken(|f| f.metrics = "\n".into()), "sweep.errMetrics");

        let body = with_parent(&f.to_file().unwrap().to_string(), 7).unwrap();
        assert_eq!((body["parent"].clone(), body["turns"].clone()), (json!(7), json!(40)));
        assert_eq!(with_parent("[1]", 7), None);
        assert_eq!(with_parent("{", 7), None);
    }

    fn effect(diff: Option<f64>, ci95: Option<[f64; 2]>, n_pairs: usize) -> Effect {
        Effect { mean_diff: diff, ci95, n_pairs, sd_diff: None, dropped: 0, reason: None }
    }

    #[test]
    fn effects_read_as_a_signed_difference_with_its_interval() {
        assert_eq!(effect_text(&effect(Some(673.0), Some([640.7, 705.3]), 3)), "+673 ± 32.3");
        assert_eq!(effect_text(&effect(Some(-2.5), Some([-4.0, -0.5]), 8)), "-2.5 [-4, -0.5]");
        assert_eq!(effect_text(&effect(Some(0.0), Some([0.0, 0.0]), 3)), "0 ± 0");
        assert_eq!(effect_text(&effect(Some(4.0), None, 1)), "+4");
        assert_eq!(effect_text(&effect(None, None, 0)), "–");
        let mut e = effect(Some(4.0), None, 1);
        e.dropped = 2;
        e.reason = Some("one pair: an interval needs at least two".into());
        assert_eq!(effect_title(&e), "n_pairs=1 dropped=2 · one pair: an interval needs at least two");
    }

    /// Two cells of two replicates each, the second's `peak` 37 [30, 44] above the first's.
    fn two_cells() -> SweepTable {
        let mut t = table(vec![
            row(0.01, summary(Some(3.0), Some(1.0), json!([2, 4]))),
            row(0.3, summary(Some(40.0), Some(1.0), json!([39, 41]))),
        ]);
        t.cells[1].effects.insert("peak".into(), effect(Some(37.0), Some([30.0, 44.0]), 2));
        t
    }

    #[test]
    fn the_forest_plot_has_a_row_per_cell_but_the_baseline_and_always_shows_zero() {
        let mut t = two_cells();
        t.cells.push(row(0.5, summary(Some(45.0), None, json!([45, null]))));
        t.cells[2].effects.insert("peak".into(), effect(Some(41.0), None, 1));
        let p = ForestPlot::of(&t, "peak").unwrap();
        assert_eq!(p.baseline, "rate=0.01");
        assert_eq!(p.rows.iter().map(|r| r.cell).collect::<Vec<_>>(), [1, 2]);
        assert_eq!((p.rows[0].diff, p.rows[0].lo, p.rows[0].hi), (37.0, 30.0, 44.0));
        assert!(p.rows[1].lo.is_nan(), "one pair: a dot without a whisker");
        assert!(p.axis.lo <= 0.0 && p.axis.hi >= 44.0, "{:?}", p.axis);
        assert_eq!(p.x(p.axis.lo, 10.0, 110.0), 10.0);
        assert_eq!(p.x(p.axis.hi, 10.0, 110.0), 110.0);
        assert_eq!(ForestPlot::of(&t, "nope"), None);
        t.baseline = 1;
        let p = ForestPlot::of(&t, "peak").unwrap();
        assert_eq!(p.rows.iter().map(|r| r.cell).collect::<Vec<_>>(), [0, 2], "the named baseline has no row");
    }

    #[test]
    fn the_table_downloads_as_csv_with_its_effects() {
        let mut t = two_cells();
        t.metrics.insert("peak".into(), "max:infected".into());
        t.cells[1].effects.get_mut("peak").unwrap().sd_diff = Some(0.5);
        assert_eq!(
            t.to_csv(),
            "rate,peak.mean,peak.sd,peak.n,peak.diff,peak.ci_lo,peak.ci_hi,peak.n_pairs,peak.sd_diff,peak.dropped\n\
             0.01,3,1,2,,,,,,\n\
             0.3,40,1,2,37,30,44,2,0.5,0\n"
        );
    }
}
