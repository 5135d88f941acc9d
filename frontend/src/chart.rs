//! Line charts, the pure part (tested natively): value axes with "nice" ticks, the plot frame
//! that maps a series' points to SVG coordinates, the point nearest the cursor for the hover
//! read-out, and what the trading and ABM views plot (equity curves, tracked variables).
//!
//! Every series of one chart shares both axes: the x axis is the point's index (a decision
//! point, a step) so that a compared node's series lines up with the selected one's, and the
//! y axis spans all series, widened to whole ticks.

use serde_json::Value;
use simtree_shared::LogEntry;
use simtree_shared::abm::{AbmOutline, AbmStep};

/// A value axis: its range (widened to whole ticks) and the ticks, `step` apart.
#[derive(Clone, Debug, PartialEq)]
pub struct Axis {
    pub lo: f64,
    pub hi: f64,
    pub step: f64,
    pub ticks: Vec<f64>,
}

/// The 1, 2 or 5 × 10^k nearest above `raw` (a tick step people read at a glance).
fn nice_step(raw: f64) -> f64 {
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let nice = if norm <= 1.0 {
        1.0
    } else if norm <= 2.0 {
        2.0
    } else if norm <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

impl Axis {
    /// An axis over every finite value of `series` with at most about `max_ticks` ticks; `None`
    /// when there is nothing to plot. A flat series gets a range around its value.
    pub fn over(series: &[&[f64]], max_ticks: usize) -> Option<Axis> {
        let all = series.iter().flat_map(|s| s.iter().copied()).filter(|v| v.is_finite());
        let (mut lo, mut hi) = all.fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
        if lo > hi {
            return None;
        }
        if hi == lo {
            let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
            (lo, hi) = (lo - pad, hi + pad);
        }
        let step = nice_step((hi - lo) / max_ticks.max(2).saturating_sub(1) as f64);
        let (lo, hi) = ((lo / step).floor() * step, (hi / step).ceil() * step);
        let count = ((hi - lo) / step).round() as usize;
        // Multiples of the step, rounded so that 0.1 + 0.2 reads as 0.3.
        let ticks = (0..=count).map(|k| ((lo / step).round() + k as f64) * step).collect();
        Some(Axis { lo, hi, step, ticks })
    }
}

/// A tick's text: as many decimals as the step needs, thousands grouped (`1,250,000`, `0.05`).
pub fn tick_label(v: f64, step: f64) -> String {
    let decimals = (-step.log10().floor()).clamp(0.0, 6.0) as usize;
    let text = if decimals == 0 { crate::ops::grouped(v.round()) } else { format!("{v:.decimals$}") };
    // A value that rounds to zero reads as 0, not -0.
    match text.strip_prefix('-') {
        Some(rest) if rest.chars().all(|c| c == '0' || c == '.') => rest.to_string(),
        _ => text,
    }
}

/// A value in the hover read-out: whole numbers grouped, fractions to three significant places
/// below 100 and two decimals above (`1,184,500.25`, `0.0512`, `34`).
pub fn value_label(v: f64) -> String {
    if !v.is_finite() {
        return "–".into();
    }
    if v.fract() == 0.0 || v.abs() >= 100.0 {
        return crate::ops::grouped(v);
    }
    let decimals = (2.0 - v.abs().log10().floor()).clamp(0.0, 8.0) as usize;
    let s = format!("{v:.decimals$}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// About `max` indices of `0..n` at a nice spacing (always starting at 0): the x axis ticks.
pub fn index_ticks(n: usize, max: usize) -> Vec<usize> {
    if n == 0 {
        return Vec::new();
    }
    let step = nice_step(((n - 1) as f64 / max.max(2).saturating_sub(1) as f64).max(1.0)) as usize;
    (0..n).step_by(step.max(1)).collect()
}

/// Where the plot sits in its SVG: the whole size and the margins kept for the axis labels.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Frame {
    pub width: f64,
    pub height: f64,
    pub left: f64,
    pub right: f64,
    pub top: f64,
    pub bottom: f64,
}

impl Frame {
    /// The x of point `i` of `n` (a single point sits at the left edge).
    pub fn x(&self, i: usize, n: usize) -> f64 {
        let span = self.width - self.left - self.right;
        self.left + span * i as f64 / n.saturating_sub(1).max(1) as f64
    }

    /// The y of value `v` on `axis`.
    pub fn y(&self, v: f64, axis: &Axis) -> f64 {
        let span = self.height - self.top - self.bottom;
        self.height - self.bottom - span * (v - axis.lo) / (axis.hi - axis.lo)
    }

    /// A series as an SVG `points` string, on `n` shared x positions (non-finite values skipped).
    pub fn points(&self, values: &[f64], n: usize, axis: &Axis) -> String {
        self.points_at(values, axis, |i| self.x(i, n))
    }

    /// A series as an SVG `points` string with point `i` at `x(i)` (non-finite values skipped).
    pub fn points_at(&self, values: &[f64], axis: &Axis, x: impl Fn(usize) -> f64) -> String {
        values
            .iter()
            .enumerate()
            .filter(|(_, v)| v.is_finite())
            .map(|(i, &v)| format!("{:.1},{:.1}", x(i), self.y(v, axis)))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The SVG `points` of a band's polygon: along `hi` left to right, back along `lo`; points
    /// where either bound is not finite are left out.
    pub fn band(&self, lo: &[f64], hi: &[f64], axis: &Axis, x: impl Fn(usize) -> f64) -> String {
        let kept: Vec<usize> =
            (0..lo.len().min(hi.len())).filter(|&i| lo[i].is_finite() && hi[i].is_finite()).collect();
        let along = kept.iter().map(|&i| (i, hi[i]));
        let back = kept.iter().rev().map(|&i| (i, lo[i]));
        along.chain(back).map(|(i, v)| format!("{:.1},{:.1}", x(i), self.y(v, axis))).collect::<Vec<_>>().join(" ")
    }

    /// The centre of slot `i` of `n` equal slots across the plot: the x of a category (a sweep's
    /// cell), which unlike [`Frame::x`] keeps a margin on both sides.
    pub fn slot_x(&self, i: usize, n: usize) -> f64 {
        let span = self.width - self.left - self.right;
        self.left + span * (i as f64 + 0.5) / n.max(1) as f64
    }

    /// The slot under the cursor's x among `n` (clamped to the first and last).
    pub fn slot_at(&self, x: f64, n: usize) -> Option<usize> {
        if n == 0 {
            return None;
        }
        let span = self.width - self.left - self.right;
        let i = ((x - self.left) / span * n as f64).floor();
        Some(i.clamp(0.0, (n - 1) as f64) as usize)
    }

    /// The index of the point nearest to the cursor's x (in SVG units) among `n`.
    pub fn nearest(&self, x: f64, n: usize) -> Option<usize> {
        if n == 0 {
            return None;
        }
        let span = self.width - self.left - self.right;
        let i = ((x - self.left) / span * n.saturating_sub(1) as f64).round();
        Some(i.clamp(0.0, (n - 1) as f64) as usize)
    }
}

/// Mean and sample standard deviation of each point over several series (the replicates or
/// compared nodes overlaid on one chart): point `i` counts only the series that have a finite
/// value there, so a shorter run leaves the later means to the others. The sd is 0 where one
/// series remains and NaN where none does.
pub fn mean_sd(series: &[&[f64]]) -> (Vec<f64>, Vec<f64>) {
    let n = series.iter().map(|s| s.len()).max().unwrap_or(0);
    (0..n)
        .map(|i| {
            let xs: Vec<f64> = series.iter().filter_map(|s| s.get(i).copied().filter(|v| v.is_finite())).collect();
            let k = xs.len() as f64;
            if xs.is_empty() {
                return (f64::NAN, f64::NAN);
            }
            let mean = xs.iter().sum::<f64>() / k;
            let var = if xs.len() > 1 { xs.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (k - 1.0) } else { 0.0 };
            (mean, var.sqrt())
        })
        .unzip()
}

/// One tracked variable over several overlaid runs: its mean per point and the mean ± sd band.
#[derive(Clone, Debug, PartialEq)]
pub struct MeanBand {
    pub name: String,
    pub mean: Vec<f64>,
    pub lo: Vec<f64>,
    pub hi: Vec<f64>,
    /// How many runs track the variable.
    pub runs: usize,
}

/// Per variable (in first-seen order), the mean and band over every run that tracks it.
pub fn mean_bands(runs: &[&[Tracked]]) -> Vec<MeanBand> {
    let mut names: Vec<&str> = Vec::new();
    for (name, _) in runs.iter().flat_map(|r| r.iter()) {
        if !names.contains(&name.as_str()) {
            names.push(name);
        }
    }
    names
        .into_iter()
        .map(|name| {
            let series: Vec<&[f64]> =
                runs.iter().filter_map(|r| r.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_slice())).collect();
            let (mean, sd) = mean_sd(&series);
            MeanBand {
                name: name.to_string(),
                lo: mean.iter().zip(&sd).map(|(m, s)| m - s).collect(),
                hi: mean.iter().zip(&sd).map(|(m, s)| m + s).collect(),
                mean,
                runs: series.len(),
            }
        })
        .collect()
}

/// A fill of a trading episode, as a chart marks it.
#[derive(Clone, Debug, PartialEq)]
pub struct Trade {
    /// The trading day (`2012-06-04`).
    pub date: String,
    pub buy: bool,
    pub ticker: String,
    pub quantity: i64,
    pub price: f64,
}

/// A trade's marker: the chart point it sits on, how many markers of the same point are below
/// it (they stack), and its hover text.
#[derive(Clone, Debug, PartialEq)]
pub struct Mark {
    pub index: usize,
    pub buy: bool,
    pub stack: usize,
    pub text: String,
}

/// The markers of `trades` on a chart whose point `i` is the day `dates[i]`: each on the last
/// point not after its day (ISO dates compare as text); a trade before the first point has none.
pub fn trade_marks(dates: &[String], trades: &[Trade]) -> Vec<Mark> {
    let mut marks: Vec<Mark> = Vec::new();
    for t in trades {
        let Some(index) = dates.iter().rposition(|d| d.as_str() <= t.date.as_str()) else {
            continue;
        };
        let stack = marks.iter().filter(|m| m.index == index && m.buy == t.buy).count();
        let side = if t.buy { "buy" } else { "sell" };
        marks.push(Mark {
            index,
            buy: t.buy,
            stack,
            text: format!(
                "{} {side} {} {} @ {}",
                t.date,
                crate::ops::grouped(t.quantity as f64),
                t.ticker,
                value_label(t.price)
            ),
        });
    }
    marks
}

/// A percentage with one decimal (`0.0123` → `1.2%`).
pub fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "–".into(), |v| format!("{:.1}%", v * 100.0))
}

/// A tracked variable (its sourceName) and its value at each step.
pub type Tracked = (String, Vec<f64>);

/// The `abm_step` entries of a log, read as their payload (entries of another shape skipped).
pub fn abm_steps_of(entries: &[LogEntry]) -> impl DoubleEndedIterator<Item = AbmStep> + '_ {
    entries.iter().filter_map(LogEntry::payload_of::<AbmStep>)
}

/// The numeric tracked variables of an agent-based model over its steps, from `abm_step`
/// entries (`{step, values}`), in first-seen order, as the chart draws them: model-level numbers
/// as they are and, for a variable tracked per agent (a list of numbers, ordered by agent id),
/// its sum over the agents (`wealth (sum)`) and, when there are at most
/// [`CHART_AGENTS`] agents, each agent's line (`wealth[1]`, the first agent by id). Other
/// values (lists of text, maps) are skipped.
pub fn abm_series(entries: &[LogEntry]) -> Vec<Tracked> {
    abm_columns(entries, CHART_AGENTS)
}

/// Agents up to which the chart draws a line per agent; above, only their sum.
pub const CHART_AGENTS: usize = 8;

/// [`abm_series`] with every agent's own series whatever their number: the Series CSV's columns.
pub fn abm_table(entries: &[LogEntry]) -> Vec<Tracked> {
    abm_columns(entries, usize::MAX)
}

/// The suffix of the series summing a per-agent variable over its agents.
pub const SUM_SUFFIX: &str = " (sum)";

/// The numbers one tracked value gives, by series name: a number as itself; a list of numbers
/// (a per-agent variable) as its sum and, up to `per_agent` agents, each agent's value.
fn numbers_of(name: &str, value: &Value, per_agent: usize) -> Vec<(String, f64)> {
    if let Some(x) = value.as_f64() {
        return vec![(name.to_string(), x)];
    }
    let Some(list) = value.as_array() else {
        return Vec::new();
    };
    let Some(xs) = list.iter().map(Value::as_f64).collect::<Option<Vec<f64>>>() else {
        return Vec::new();
    };
    let mut out = vec![(format!("{name}{SUM_SUFFIX}"), xs.iter().sum())];
    if xs.len() <= per_agent {
        out.extend(xs.iter().enumerate().map(|(i, x)| (format!("{name}[{}]", i + 1), *x)));
    }
    out
}

fn abm_columns(entries: &[LogEntry], per_agent: usize) -> Vec<Tracked> {
    let mut out: Vec<Tracked> = Vec::new();
    for (i, step) in abm_steps_of(entries).enumerate() {
        for (name, v) in &step.values {
            for (name, x) in numbers_of(name, v, per_agent) {
                match out.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, xs)) => xs.push(x),
                    // A variable first reported at a later step has no value at the earlier ones.
                    None => out.push((name, [vec![f64::NAN; i], vec![x]].concat())),
                }
            }
        }
        // The k-th value of every series is the k-th step's: a step without a number for a
        // variable leaves a gap (NaN, not drawn) rather than pulling later values back.
        for (_, xs) in &mut out {
            xs.resize(i + 1, f64::NAN);
        }
    }
    out
}

/// The step number of each `abm_step` entry (the x of [`abm_series`]' points).
pub fn abm_steps(entries: &[LogEntry]) -> Vec<String> {
    abm_steps_of(entries).map(|s| s.step.to_string()).collect()
}

/// The variables tracked per agent at a node's last step, as the details' table shows them:
/// the variables' names, and per agent (the k-th by id, from 1) its value of each as text.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AgentTable {
    pub names: Vec<String>,
    pub rows: Vec<Vec<String>>,
    /// The sum over the agents of each variable that is all numbers (else `None`).
    pub sums: Vec<Option<f64>>,
    pub step: u64,
}

/// The [`AgentTable`] of a log's last `abm_step`; `None` when nothing is tracked per agent.
pub fn agent_table(entries: &[LogEntry]) -> Option<AgentTable> {
    let last = abm_steps_of(entries).next_back()?;
    let lists: Vec<(&String, &Vec<Value>)> = last.values.iter().filter_map(|(k, v)| Some((k, v.as_array()?))).collect();
    if lists.is_empty() {
        return None;
    }
    let agents = lists.iter().map(|(_, l)| l.len()).max().unwrap_or(0);
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    Some(AgentTable {
        names: lists.iter().map(|(k, _)| (*k).clone()).collect(),
        rows: (0..agents)
            .map(|i| lists.iter().map(|(_, l)| l.get(i).map(text).unwrap_or_default()).collect())
            .collect(),
        sums: lists.iter().map(|(_, l)| l.iter().map(Value::as_f64).sum::<Option<f64>>()).collect(),
        step: last.step,
    })
}

/// A short label for a sourceName (`globalVariable.infectedCount` → `infectedCount`).
pub fn short_name(source: &str) -> &str {
    source.rsplit('.').next().unwrap_or(source)
}

/// Series colours, cycled.
pub const COLOURS: [&str; 6] = ["#1e4976", "#e65100", "#1b5e20", "#5e35b1", "#6d4c41", "#b00020"];

/// The structure of an abm-quant model for display: topology, global variables and, per agent
/// type (from attribute sourceNames `agent.<Type>.agentAttribute.<name>`), its attributes.
pub fn abm_structure(model: &AbmOutline) -> AbmStructure {
    let topology = match model.environment.topology.kind.as_str() {
        "" => "none".to_string(),
        t => t.to_string(),
    };
    let globals = model.global_variables.iter().flatten().map(|g| g.name.clone()).collect();
    let mut agents: Vec<(String, Vec<String>)> = Vec::new();
    for (kind, attr) in model.agent_attributes() {
        match agents.iter_mut().find(|(k, _)| k == kind) {
            Some((_, attrs)) => attrs.push(attr.name.clone()),
            None => agents.push((kind.to_string(), vec![attr.name.clone()])),
        }
    }
    AbmStructure { topology, globals, agents }
}

/// What [`abm_structure`] finds.
#[derive(Clone, Debug, PartialEq)]
pub struct AbmStructure {
    pub topology: String,
    pub globals: Vec<String>,
    /// Agent type → its attribute names.
    pub agents: Vec<(String, Vec<String>)>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A 200 × 100 plot with a 20-unit margin on the left and 10 above and below.
    const TEST_FRAME: Frame = Frame { width: 220.0, height: 120.0, left: 20.0, right: 0.0, top: 10.0, bottom: 10.0 };

    #[test]
    fn abm_series_and_structure() {
        let step = |n: u64, i: u64| LogEntry {
            kind: "abm_step".into(),
            data: json!({"step": n, "values": {"globalVariable.infected": i, "agent.P.status": ["S"]}}),
            node: 1,
        };
        let other = LogEntry { kind: "x".into(), data: json!({}), node: 1 };
        let s = abm_series(&[step(0, 1), other.clone(), step(1, 4)]);
        assert_eq!(s, vec![("globalVariable.infected".to_string(), vec![1.0, 4.0])]);
        assert_eq!(abm_steps(&[step(0, 1), other, step(1, 4)]), ["0", "1"]);
        // A variable reported from the second step on, one missing at the third: each value
        // stays at its own step.
        let late = |n: u64, values: serde_json::Value| LogEntry {
            kind: "abm_step".into(),
            data: json!({"step": n, "values": values}),
            node: 1,
        };
        let s = abm_series(&[late(1, json!({"a": 1})), late(2, json!({"a": 2, "b": 20})), late(3, json!({"a": 3}))]);
        let text: Vec<(String, String)> = s.iter().map(|(n, xs)| (n.clone(), format!("{xs:?}"))).collect();
        assert_eq!(text, [("a".into(), "[1.0, 2.0, 3.0]".into()), ("b".into(), "[NaN, 20.0, NaN]".into())]);
        assert_eq!(short_name("globalVariable.infected"), "infected");
        let model = json!({
            "environment": {"topology": {"type": "grid"}},
            "globalVariables": [{"name": "rate"}],
            "agents": [[{"agentAttributes": [{"name": "status", "sourceName": "agent.Tree.agentAttribute.status"}]}]]
        });
        let st = abm_structure(&serde_json::from_value(model).unwrap());
        assert_eq!((st.topology.as_str(), st.globals), ("grid", vec!["rate".to_string()]));
        assert_eq!(st.agents, vec![("Tree".to_string(), vec!["status".to_string()])]);
    }

    /// Issue 38: a variable tracked per agent (a list of numbers at each step) was dropped from
    /// the chart, so "total wealth stays 200" could not be checked on screen.
    #[test]
    fn a_variable_tracked_per_agent_is_summed_and_drawn_per_agent_when_few() {
        let step = |n: u64, wealth: serde_json::Value| LogEntry {
            kind: "abm_step".into(),
            data: json!({"step": n, "values": {"agent.T.agentAttribute.wealth": wealth, "agent.T.agentAttribute.mood": ["a", "b"]}}),
            node: 1,
        };
        let log = [step(0, json!([100, 100])), step(1, json!([150.5, 49.5]))];
        let text = |s: Vec<Tracked>| s.into_iter().map(|(n, xs)| format!("{n}={xs:?}")).collect::<Vec<_>>();
        assert_eq!(
            text(abm_series(&log)),
            [
                "agent.T.agentAttribute.wealth (sum)=[200.0, 200.0]",
                "agent.T.agentAttribute.wealth[1]=[100.0, 150.5]",
                "agent.T.agentAttribute.wealth[2]=[100.0, 49.5]"
            ]
        );
        assert_eq!(short_name("agent.T.agentAttribute.wealth (sum)"), "wealth (sum)");
        // Many agents: the chart draws their sum only; the CSV's table keeps every agent.
        let many = [step(0, json!(vec![2; 9]))];
        assert_eq!(text(abm_series(&many)), ["agent.T.agentAttribute.wealth (sum)=[18.0]"]);
        assert_eq!(abm_table(&many).len(), 1 + 9);
        // The details' table: the last step, agent by agent, with each numeric variable's sum.
        let table = agent_table(&log).unwrap();
        assert_eq!(table.step, 1);
        assert_eq!(table.names, ["agent.T.agentAttribute.wealth", "agent.T.agentAttribute.mood"]);
        assert_eq!(table.rows, [["150.5", "a"], ["49.5", "b"]]);
        assert_eq!(table.sums, [Some(200.0), None]);
        assert_eq!(agent_table(&log[..0]), None);
    }

    #[test]
    fn axes_have_nice_ticks_and_readable_labels() {
        let a = Axis::over(&[&[93.0, 110.0], &[101.0]], 6).unwrap();
        assert_eq!((a.lo, a.hi, a.step), (90.0, 110.0, 5.0));
        assert_eq!(a.ticks, [90.0, 95.0, 100.0, 105.0, 110.0]);
        let money = Axis::over(&[&[1_000_000.0, 1_184_500.0]], 5).unwrap();
        assert_eq!(money.step, 50_000.0);
        assert_eq!(tick_label(money.ticks[1], money.step), "1,050,000");
        let rate = Axis::over(&[&[0.0, 0.31]], 5).unwrap();
        assert_eq!(
            rate.ticks.iter().map(|&v| tick_label(v, rate.step)).collect::<Vec<_>>(),
            ["0.0", "0.1", "0.2", "0.3", "0.4"]
        );
        let flat = Axis::over(&[&[5.0, 5.0]], 5).unwrap();
        assert!(flat.lo < 5.0 && flat.hi > 5.0, "a flat line sits inside its axis");
        assert_eq!(Axis::over(&[&[], &[f64::NAN]], 5), None);
        assert_eq!(tick_label(-0.0000001, 0.1), "0.0");
        assert_eq!(index_ticks(30, 7), [0, 5, 10, 15, 20, 25]);
        assert_eq!(index_ticks(30, 4), [0, 10, 20]);
        assert_eq!(index_ticks(3, 6), [0, 1, 2]);
        assert!(index_ticks(0, 6).is_empty());
    }

    #[test]
    fn trades_sit_on_their_day_and_stack() {
        let dates: Vec<String> = ["2012-06-01", "2012-06-04", "2012-06-05"].map(String::from).to_vec();
        let trade = |date: &str, buy: bool| Trade {
            date: date.into(),
            buy,
            ticker: "AAPL".into(),
            quantity: 1250,
            price: 564.29,
        };
        let marks = trade_marks(
            &dates,
            &[
                trade("2012-06-04", true),
                trade("2012-06-04", true),
                trade("2012-06-04", false),
                trade("2012-06-09", false),
                trade("2012-05-30", true),
            ],
        );
        let at: Vec<(usize, bool, usize)> = marks.iter().map(|m| (m.index, m.buy, m.stack)).collect();
        assert_eq!(
            at,
            [(1, true, 0), (1, true, 1), (1, false, 0), (2, false, 0)],
            "a later day sits on the last point; one before the chart has no marker"
        );
        assert_eq!(marks[0].text, "2012-06-04 buy 1,250 AAPL @ 564.29");
        assert_eq!(marks[2].text, "2012-06-04 sell 1,250 AAPL @ 564.29");
    }

    #[test]
    fn mean_and_band_of_overlaid_series() {
        let (mean, sd) = mean_sd(&[&[1.0, 2.0, 10.0], &[3.0, 4.0], &[5.0, f64::NAN]]);
        assert_eq!(mean, [3.0, 3.0, 10.0], "a missing or NaN point counts no series");
        assert_eq!(sd[0], 2.0, "sample sd of 1, 3, 5");
        assert!((sd[1] - 2f64.sqrt()).abs() < 1e-12);
        assert_eq!(sd[2], 0.0, "one series left: no spread");
        let (m, s) = mean_sd(&[&[f64::NAN]]);
        assert!(m[0].is_nan() && s[0].is_nan());
        assert_eq!(mean_sd(&[]), (vec![], vec![]));

        let run =
            |i: f64, s: f64| vec![("infected".to_string(), vec![i, i + 2.0]), ("susceptible".to_string(), vec![s])];
        let bands = mean_bands(&[&run(1.0, 9.0), &run(3.0, 7.0), &[("infected".to_string(), vec![5.0])]]);
        let names: Vec<(&str, usize)> = bands.iter().map(|b| (b.name.as_str(), b.runs)).collect();
        assert_eq!(names, [("infected", 3), ("susceptible", 2)]);
        assert_eq!(bands[0].mean, [3.0, 4.0]);
        assert_eq!(
            (bands[0].lo.clone(), bands[0].hi.clone()),
            (vec![1.0, 4.0 - 2f64.sqrt()], vec![5.0, 4.0 + 2f64.sqrt()])
        );
        assert_eq!((bands[1].mean[0], bands[1].lo[0]), (8.0, 8.0 - 2f64.sqrt()));

        let f = TEST_FRAME;
        let axis = Axis::over(&[&[90.0, 110.0]], 3).unwrap();
        // Along the top bound, then back along the bottom one; a gap drops its point.
        assert_eq!(
            f.band(&[90.0, 95.0, f64::NAN], &[100.0, 110.0, 105.0], &axis, |i| f.x(i, 3)),
            "20.0,60.0 120.0,10.0 120.0,85.0 20.0,110.0"
        );
        // Categories sit in the middle of equal slots, and the cursor finds its slot.
        assert_eq!((f.slot_x(0, 2), f.slot_x(1, 2)), (70.0, 170.0));
        assert_eq!(f.slot_at(119.0, 2), Some(0));
        assert_eq!(f.slot_at(121.0, 2), Some(1));
        assert_eq!(f.slot_at(999.0, 2), Some(1));
        assert_eq!(f.slot_at(0.0, 2), Some(0));
        assert_eq!(f.slot_at(50.0, 0), None);
    }

    #[test]
    fn series_share_the_frame_and_the_cursor_finds_the_nearest_point() {
        let f = TEST_FRAME;
        let axis = Axis::over(&[&[100.0, 110.0, 105.0], &[90.0, 100.0]], 3).unwrap();
        assert_eq!((axis.lo, axis.hi), (90.0, 110.0));
        assert_eq!(f.points(&[100.0, 110.0, 105.0], 3, &axis), "20.0,60.0 120.0,10.0 220.0,35.0");
        // A shorter series keeps the shared x positions (step 1 is step 1 in both).
        assert_eq!(f.points(&[90.0, f64::NAN], 3, &axis), "20.0,110.0");
        assert_eq!(f.nearest(60.0, 3), Some(0));
        assert_eq!(f.nearest(75.0, 3), Some(1));
        assert_eq!(f.nearest(500.0, 3), Some(2), "beyond the plot: the last point");
        assert_eq!(f.nearest(0.0, 3), Some(0));
        assert_eq!(f.nearest(50.0, 0), None);
        assert_eq!(value_label(1_184_500.25), "1,184,500.25");
        assert_eq!(value_label(0.05123), "0.0512");
        assert_eq!(value_label(34.0), "34");
        assert_eq!(value_label(2.5), "2.5");
        assert_eq!(value_label(f64::NAN), "–");
        assert_eq!(pct(Some(0.0123)), "1.2%");
        assert_eq!(pct(None), "–");
    }
}
