//! Long-format tables for clients in any language: a sweep's runs (one row per run × step ×
//! variable, BehaviorSpace style) and a subtree's log (one row per entry along its paths), as
//! CSV or NDJSON, read a page at a time.
//!
//! A table is planned first ([`Table`]: its columns, its row count and where each row comes
//! from, read from the tree at that moment), then its rows are made one at a time from the
//! nodes' logs, so a page is streamed, never held whole. A page counts rows from `offset`, at
//! most `limit` of them; a log that grows while a page is read (a run still going) is read as far
//! as the plan counted it, so a page and its count agree. A node deleted meanwhile is left out.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use serde_json::{Map, Value};

use super::{RequestError, TreeHandle, WorkbenchError};
use crate::tree::NodeId;

service!(
    /// Trees and their data in and out: exports, imports and long-format tables.
    Transfer
);

/// Rows a page holds when `limit` is not given, and at most.
pub(crate) const MAX_TABLE_ROWS: u64 = 100_000;

/// The fixed columns of a sweep's runs table; the cell's axis values come between `cell` and
/// `replicate` (an axis named like one of these is written `param:<name>`).
pub(crate) const RUN_COLUMNS: [&str; 8] = ["run", "cell", "replicate", "seed", "node", "step", "variable", "value"];

/// The columns of a log table.
pub(crate) const EVENT_COLUMNS: [&str; 8] = ["node", "seq", "step", "time", "agent", "kind", "text", "data"];

/// How a table is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TableFormat {
    /// A header line, then one line per row; text is quoted where it must be, objects and lists
    /// are written as JSON, an empty cell is a missing value.
    Csv,
    /// One JSON object per line, keyed by column.
    Ndjson,
}

impl TableFormat {
    /// `csv` (the default) or `ndjson`.
    pub(crate) fn parse(given: Option<&str>) -> Result<TableFormat, WorkbenchError> {
        one_of("format", given, &[("csv", TableFormat::Csv), ("ndjson", TableFormat::Ndjson)])
    }

    pub(crate) fn media_type(self) -> &'static str {
        match self {
            TableFormat::Csv => "text/csv; charset=utf-8",
            TableFormat::Ndjson => "application/x-ndjson",
        }
    }
}

/// Which rows of a table a request wants: from `offset`, at most `limit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Page {
    offset: u64,
    limit: u64,
}

impl Page {
    /// `limit` is 1 to [`MAX_TABLE_ROWS`] (default: the most).
    pub(crate) fn new(offset: Option<u64>, limit: Option<u64>) -> Result<Page, WorkbenchError> {
        let limit = limit.unwrap_or(MAX_TABLE_ROWS);
        if !(1..=MAX_TABLE_ROWS).contains(&limit) {
            return Err(RequestError::PageLimit { limit, max: MAX_TABLE_ROWS }.into());
        }
        Ok(Page { offset: offset.unwrap_or(0), limit })
    }

    /// The offset of the page after this one in a table of `total` rows, if there is one.
    pub(crate) fn next(&self, total: u64) -> Option<u64> {
        let end = self.offset.saturating_add(self.limit);
        (end < total).then_some(end)
    }
}

/// Which entries a log table holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Every entry on a root path through the node: its ancestors', its own and its
    /// descendants', each once.
    Subtree,
    /// The node's root path only: its full log.
    Path,
}

impl Scope {
    /// `subtree` (the default) or `path`.
    pub(crate) fn parse(given: Option<&str>) -> Result<Scope, WorkbenchError> {
        one_of("scope", given, &[("subtree", Scope::Subtree), ("path", Scope::Path)])
    }
}

/// The option of parameter `name` called `given` (none: the first), or a refusal naming them.
fn one_of<T: Copy>(name: &str, given: Option<&str>, options: &[(&'static str, T)]) -> Result<T, WorkbenchError> {
    let Some(given) = given else {
        return Ok(options[0].1);
    };
    options.iter().find(|(n, _)| *n == given).map(|(_, v)| *v).ok_or_else(|| {
        RequestError::NotOneOf {
            name: name.to_string(),
            given: given.to_string(),
            options: options.iter().map(|(n, _)| *n).collect(),
        }
        .into()
    })
}

/// A table ready to be read: its columns and row count, and where its rows come from.
pub(crate) struct Table {
    pub(crate) columns: Vec<String>,
    pub(crate) total: u64,
    handle: Arc<TreeHandle>,
    source: Source,
}

enum Source {
    Runs(Vec<Run>),
    Events(Vec<LogPart>),
}

/// One run of a sweep: the columns every row of it shares, its metric rows, and how many
/// entries of its own log (and series rows in them) the plan counted.
struct Run {
    head: Vec<Value>,
    node: NodeId,
    metrics: Vec<(String, Value)>,
    entries: usize,
    series: u64,
}

/// One node's own entries in a log table.
struct LogPart {
    node: NodeId,
    parent: Option<NodeId>,
    entries: usize,
}

impl Table {
    /// Makes the rows of `page`, in order, handing each to `row`; stops early when `row` says
    /// false (the reader went away).
    pub(crate) fn read(&self, page: Page, mut row: impl FnMut(&[Value]) -> bool) -> Result<(), WorkbenchError> {
        let mut cursor = Cursor { skip: page.offset, left: page.limit.min(self.total.saturating_sub(page.offset)) };
        if cursor.left == 0 {
            return Ok(());
        }
        match &self.source {
            Source::Runs(runs) => self.read_runs(runs, &mut cursor, &mut row),
            Source::Events(parts) => self.read_events(parts, &mut cursor, &mut row),
        }
    }

    fn read_runs(
        &self,
        runs: &[Run],
        cursor: &mut Cursor,
        row: &mut impl FnMut(&[Value]) -> bool,
    ) -> Result<(), WorkbenchError> {
        for run in runs {
            let size = run.metrics.len() as u64 + run.series;
            if cursor.skip >= size {
                cursor.skip -= size;
                continue;
            }
            for (name, value) in &run.metrics {
                let cells = [&run.head[..], &[Value::Null, name.clone().into(), value.clone()]].concat();
                if !cursor.take(&cells, row) {
                    return Ok(());
                }
            }
            if run.series == 0 {
                continue;
            }
            let Some(entries) = own_entries(&self.handle, run.node, run.entries)? else {
                continue;
            };
            for e in &entries {
                for (step, name, value) in series_of(e) {
                    let cells = [&run.head[..], &[step, name.into(), value]].concat();
                    if !cursor.take(&cells, row) {
                        return Ok(());
                    }
                }
            }
        }
        Ok(())
    }

    fn read_events(
        &self,
        parts: &[LogPart],
        cursor: &mut Cursor,
        row: &mut impl FnMut(&[Value]) -> bool,
    ) -> Result<(), WorkbenchError> {
        // Each node starts where its parent ended (parents come first: their ids are smaller).
        let mut ends: HashMap<NodeId, Carry> = HashMap::new();
        for part in parts {
            let start = part.parent.and_then(|p| ends.get(&p).cloned()).unwrap_or_default();
            let Some(entries) = own_entries(&self.handle, part.node, part.entries)? else {
                continue;
            };
            let mut carry = start;
            for e in &entries {
                let cells = carry.row(e, part.node);
                if !cursor.take(&cells, row) {
                    return Ok(());
                }
            }
            ends.insert(part.node, carry);
        }
        Ok(())
    }
}

/// Where a page stands: rows still to skip, rows still to give.
struct Cursor {
    skip: u64,
    left: u64,
}

impl Cursor {
    /// Gives `cells` to `row` unless it is skipped; false once the page is full or the reader
    /// went away.
    fn take(&mut self, cells: &[Value], row: &mut impl FnMut(&[Value]) -> bool) -> bool {
        if self.skip > 0 {
            self.skip -= 1;
            return true;
        }
        if self.left == 0 {
            return false;
        }
        self.left -= 1;
        row(cells) && self.left > 0
    }
}

/// The first `count` own entries of `node`, parsed; `None` when the node is gone.
fn own_entries(handle: &TreeHandle, node: NodeId, count: usize) -> Result<Option<Vec<Value>>, WorkbenchError> {
    let texts = {
        let mut t = handle.lock();
        let log = match t.log(node) {
            Ok(log) => log,
            Err(crate::tree::TreeError::NodeNotFound(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let mut texts = Vec::with_capacity(count.min(log.len()));
        log.for_each(|e| {
            if texts.len() < count {
                texts.push(e.to_string());
            }
        });
        texts
    };
    // Entries are JSON the server wrote (or an import checked); one that is not reads as null.
    Ok(Some(texts.iter().map(|s| serde_json::from_str(s).unwrap_or(Value::Null)).collect()))
}

/// What a log table carries from entry to entry along a path: the entry's position on the path,
/// the simulation step and the scene clock.
#[derive(Clone, Debug, Default)]
struct Carry {
    seq: u64,
    step: Option<i64>,
    time: Value,
}

impl Carry {
    /// The row of `entry` (of `node`), and the carry moved past it.
    ///
    /// `step` is the turn for social scenes (a turn starts with an agent's
    /// `agent_process_start` of step 1), the decision point (from 1) for trading, the model's
    /// step for agent-based models; `time` the scene clock (`data.time`); both carry forward.
    fn row(&mut self, entry: &Value, node: NodeId) -> Vec<Value> {
        let kind = entry.get("type").and_then(Value::as_str).unwrap_or("");
        let empty = Map::new();
        let data = entry.get("data").and_then(Value::as_object).unwrap_or(&empty);
        match kind {
            "agent_process_start" if data.get("step").and_then(Value::as_i64) == Some(1) => {
                self.step = Some(self.step.unwrap_or(0) + 1);
            }
            "decision_point" => {
                let idx = data.get("log").and_then(|l| l.get("decision_point_idx")).and_then(Value::as_i64);
                self.step = Some(idx.map_or(self.step.unwrap_or(0) + 1, |i| i + 1));
            }
            "abm_step" => {
                if let Some(s) = data.get("step").and_then(Value::as_i64) {
                    self.step = Some(s);
                }
            }
            _ => {}
        }
        if let Some(t) = data.get("time").filter(|t| t.is_number()) {
            self.time = t.clone();
        }
        let agent = ["agent", "sender"]
            .iter()
            .filter_map(|k| data.get(*k))
            .find(|v| !v.is_null() && v.as_str() != Some(""))
            .cloned()
            .unwrap_or(Value::Null);
        let node = entry.get("node").and_then(Value::as_u64).unwrap_or(node);
        let cells = vec![
            node.into(),
            self.seq.into(),
            self.step.map_or(Value::Null, Value::from),
            self.time.clone(),
            agent,
            kind.into(),
            text_of(kind, data),
            Value::Object(data.clone()),
        ];
        self.seq += 1;
        cells
    }
}

/// The readable part of a log entry, by its type: a message, a memory line, an action's
/// summary, a trade's result; lists and objects as compact JSON.
fn text_of(kind: &str, data: &Map<String, Value>) -> Value {
    let field = |k: &str| data.get(k).cloned().unwrap_or(Value::Null);
    let json = |v: Option<&Value>| v.map_or(Value::Null, |v| Value::String(v.to_string()));
    match kind {
        "system_broadcast" => field("text"),
        "agent_ctx_delta" => field("content"),
        "action_end" => field("summary"),
        "action_start" => {
            let action = data.get("action");
            match action.and_then(|a| a.get("message")).filter(|m| m.as_str().is_some_and(|s| !s.is_empty())) {
                Some(m) => m.clone(),
                None => json(action),
            }
        }
        "agent_process_end" => json(data.get("actions")),
        "plan_update" => json(data.get("plan")),
        "emotion_update" => field("emotion"),
        "agent_error" => field("error"),
        "decision_point" => data
            .get("log")
            .and_then(|l| l.get("execution_result"))
            .and_then(|r| r.get("message"))
            .cloned()
            .unwrap_or(Value::Null),
        "abm_step" => json(data.get("values")),
        "counterfactual" => json(data.get("ops")),
        _ => Value::Null,
    }
}

/// `(step, variable, value)` of one run's own log entry: an agent-based model's tracked
/// variables at an `abm_step` (per-agent lists left out), a trading episode's `value` and
/// `cash` at a decision point (`step` from 1).
fn series_of(entry: &Value) -> Vec<(Value, String, Value)> {
    let data = entry.get("data");
    let get = |k: &str| data.and_then(|d| d.get(k));
    match entry.get("type").and_then(Value::as_str) {
        Some("abm_step") => {
            let step = get("step").cloned().unwrap_or(Value::Null);
            get("values")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .filter(|(_, v)| !v.is_array() && !v.is_object())
                .map(|(k, v)| (step.clone(), k.clone(), v.clone()))
                .collect()
        }
        Some("decision_point") => {
            let idx = get("log").and_then(|l| l.get("decision_point_idx")).and_then(Value::as_i64);
            let step = Value::from(idx.unwrap_or(0) + 1);
            let cash = get("portfolio").and_then(|p| p.get("cash")).cloned();
            vec![
                (step.clone(), "value".into(), get("value").cloned().unwrap_or(Value::Null)),
                (step, "cash".into(), cash.unwrap_or(Value::Null)),
            ]
        }
        _ => Vec::new(),
    }
}

/// An axis label as a column: itself, unless a fixed column has that name.
fn param_column(name: &str) -> String {
    if RUN_COLUMNS.contains(&name) { format!("param:{name}") } else { name.to_string() }
}

impl Transfer<'_> {
    /// The runs of sweep `id` of `tree` in long format: per run (cells in the grid's order,
    /// replicates within) its metric rows (`step` empty), then with `series` its own steps'
    /// variables. `None` when the tree has no such sweep.
    pub(crate) fn sweep_runs_table(&self, tree: u64, id: u64, series: bool) -> Result<Option<Table>, WorkbenchError> {
        let Some(table) = super::Studies(self.0).sweep_table(tree, id)? else {
            return Ok(None);
        };
        let handle = self.tree(tree)?;
        let mut params: Vec<String> = Vec::new();
        for c in &table.cells {
            for k in c.cell.keys() {
                if !params.contains(k) {
                    params.push(k.clone());
                }
            }
        }
        let names: Vec<String> = table.metrics.keys().cloned().collect();
        let mut runs = Vec::new();
        for (i, c) in table.cells.iter().enumerate() {
            let cell_names: Vec<String> =
                if names.is_empty() { c.metrics.keys().cloned().collect() } else { names.clone() };
            for (k, &node) in c.children.iter().enumerate() {
                let mut head: Vec<Value> = vec![(runs.len() as u64).into(), (i as u64).into()];
                head.extend(params.iter().map(|p| c.cell.get(p).cloned().unwrap_or(Value::Null)));
                head.push((k as u64).into());
                head.push(table.seeds.get(k).map_or(Value::Null, |&s| s.into()));
                head.push(node.into());
                let metrics = cell_names
                    .iter()
                    .map(|m| {
                        let v = c.metrics.get(m).and_then(|s| s.values.get(k)).cloned();
                        (m.clone(), v.unwrap_or(Value::Null))
                    })
                    .collect();
                let (entries, counted) = if series {
                    match own_entries(&handle, node, usize::MAX)? {
                        Some(es) => (es.len(), es.iter().map(|e| series_of(e).len() as u64).sum()),
                        None => (0, 0),
                    }
                } else {
                    (0, 0)
                };
                runs.push(Run { head, node, metrics, entries, series: counted });
            }
        }
        let total = runs.iter().map(|r| r.metrics.len() as u64 + r.series).sum();
        let mut columns: Vec<String> = vec!["run".into(), "cell".into()];
        columns.extend(params.iter().map(|p| param_column(p)));
        columns.extend(RUN_COLUMNS[2..].iter().map(|c| c.to_string()));
        Ok(Some(Table { columns, total, handle, source: Source::Runs(runs) }))
    }

    /// The log of `tree` around `node` in long format, one row per entry (see [`Scope`]), in
    /// node order and, within a node, in the log's order.
    pub(crate) fn log_table(&self, tree: u64, node: NodeId, scope: Scope) -> Result<Table, WorkbenchError> {
        let handle = self.tree(tree)?;
        let (path, below): (Vec<NodeId>, BTreeSet<NodeId>) = {
            let t = handle.lock();
            let path = t.path(node)?;
            let mut below = BTreeSet::new();
            if scope == Scope::Subtree {
                let mut stack = t.node(node)?.children.clone();
                while let Some(n) = stack.pop() {
                    if let Ok(x) = t.node(n) {
                        stack.extend(x.children.iter().copied());
                        below.insert(n);
                    }
                }
            }
            (path, below)
        };
        let mut order: BTreeMap<NodeId, Option<NodeId>> = BTreeMap::new();
        {
            let t = handle.lock();
            for &n in path.iter().chain(&below) {
                order.insert(n, t.node(n).ok().and_then(|x| x.parent));
            }
        }
        let mut parts = Vec::with_capacity(order.len());
        for (n, parent) in order {
            let entries = match handle.lock().log(n) {
                Ok(log) => log.len(),
                Err(crate::tree::TreeError::NodeNotFound(_)) => continue,
                Err(e) => return Err(e.into()),
            };
            parts.push(LogPart { node: n, parent, entries });
        }
        let total = parts.iter().map(|p| p.entries as u64).sum();
        Ok(Table {
            columns: EVENT_COLUMNS.iter().map(|c| c.to_string()).collect(),
            total,
            handle,
            source: Source::Events(parts),
        })
    }
}

/// Writes a table's header line (CSV only; NDJSON has none).
pub(crate) fn write_header(format: TableFormat, columns: &[String], out: &mut Vec<u8>) {
    if format == TableFormat::Csv {
        let cells: Vec<Value> = columns.iter().map(|c| Value::String(c.clone())).collect();
        write_csv_line(&cells, out);
    }
}

/// Writes one row.
pub(crate) fn write_row(format: TableFormat, columns: &[String], cells: &[Value], out: &mut Vec<u8>) {
    match format {
        TableFormat::Csv => write_csv_line(cells, out),
        TableFormat::Ndjson => {
            let object: Map<String, Value> = columns.iter().cloned().zip(cells.iter().cloned()).collect();
            // A map of JSON values always serialises.
            let _ = serde_json::to_writer(&mut *out, &Value::Object(object));
            out.push(b'\n');
        }
    }
}

fn write_csv_line(cells: &[Value], out: &mut Vec<u8>) {
    for (i, cell) in cells.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(simtree_shared::csv::value(cell).as_bytes());
    }
    out.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rows(entries: &[Value]) -> Vec<Vec<Value>> {
        let mut carry = Carry::default();
        entries.iter().map(|e| carry.row(e, 0)).collect()
    }

    #[test]
    fn step_and_time_carry_forward_and_text_is_read_by_type() {
        let log = [
            json!({"type": "system_broadcast", "data": {"text": "Hello", "time": 5}, "node": 0}),
            json!({"type": "agent_process_start", "data": {"agent": "Ann", "step": 1}, "node": 0}),
            json!({"type": "action_start", "data": {"agent": "Ann", "action": {"action": "yield"}}, "node": 1}),
            json!({"type": "agent_process_start", "data": {"agent": "Bo", "step": 2}, "node": 1}),
            json!({"type": "agent_process_start", "data": {"agent": "Bo", "step": 1, "time": 7.5}, "node": 1}),
            json!({"type": "decision_point", "data": {"log": {"decision_point_idx": 4,
                   "execution_result": {"message": "bought"}}}, "node": 2}),
            json!({"type": "abm_step", "data": {"step": 9, "values": {"x": 1}}, "node": 2}),
        ];
        let got: Vec<_> = rows(&log)
            .into_iter()
            .map(|r| (r[0].clone(), r[1].clone(), r[2].clone(), r[3].clone(), r[4].clone(), r[6].clone()))
            .collect();
        let want = vec![
            (json!(0), json!(0), Value::Null, json!(5), Value::Null, json!("Hello")),
            (json!(0), json!(1), json!(1), json!(5), json!("Ann"), Value::Null),
            (json!(1), json!(2), json!(1), json!(5), json!("Ann"), json!("{\"action\":\"yield\"}")),
            (json!(1), json!(3), json!(1), json!(5), json!("Bo"), Value::Null),
            (json!(1), json!(4), json!(2), json!(7.5), json!("Bo"), Value::Null),
            (json!(2), json!(5), json!(5), json!(7.5), Value::Null, json!("bought")),
            (json!(2), json!(6), json!(9), json!(7.5), Value::Null, json!("{\"x\":1}")),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn series_keep_scalars_and_trading_value_and_cash() {
        let abm = json!({"type": "abm_step", "data": {"step": 3, "values": {"a": 1, "per_agent": [1, 2], "b": "x"}}});
        assert_eq!(series_of(&abm), vec![(json!(3), "a".into(), json!(1)), (json!(3), "b".into(), json!("x"))]);
        let trade = json!({"type": "decision_point", "data": {"value": 10.5, "portfolio": {"cash": 2.0},
                           "log": {"decision_point_idx": 0}}});
        assert_eq!(
            series_of(&trade),
            vec![(json!(1), "value".into(), json!(10.5)), (json!(1), "cash".into(), json!(2.0))]
        );
    }

    #[test]
    fn csv_quotes_what_it_must_and_ndjson_keys_by_column() {
        let columns: Vec<String> = ["a", "b", "c", "d"].iter().map(|s| s.to_string()).collect();
        let cells = [json!("x,\"y\""), Value::Null, json!(1.5), json!({"k": [1]})];
        let mut out = Vec::new();
        write_header(TableFormat::Csv, &columns, &mut out);
        write_row(TableFormat::Csv, &columns, &cells, &mut out);
        assert_eq!(String::from_utf8(out).unwrap(), "a,b,c,d\n\"x,\"\"y\"\"\",,1.5,\"{\"\"k\"\":[1]}\"\n");
        let mut out = Vec::new();
        write_header(TableFormat::Ndjson, &columns, &mut out);
        write_row(TableFormat::Ndjson, &columns, &cells, &mut out);
        assert_eq!(String::from_utf8(out).unwrap(), "{\"a\":\"x,\\\"y\\\"\",\"b\":null,\"c\":1.5,\"d\":{\"k\":[1]}}\n");
    }

    #[test]
    fn pages_are_bounded_and_say_what_follows() {
        assert!(Page::new(None, Some(0)).is_err());
        assert!(Page::new(None, Some(MAX_TABLE_ROWS + 1)).is_err());
        let p = Page::new(Some(10), Some(5)).unwrap();
        assert_eq!(p.next(16), Some(15));
        assert_eq!(p.next(15), None);
        assert_eq!(Page::new(None, None).unwrap().limit, MAX_TABLE_ROWS);
        assert!(TableFormat::parse(Some("xlsx")).is_err());
        assert!(Scope::parse(Some("all")).is_err());
    }
}
