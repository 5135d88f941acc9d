//! The files the UI hands out (pure, tested natively): a node's log as JSON Lines, a trading
//! node's equity curve and an ABM node's tracked variables as CSV, a chart as a standalone SVG
//! document, and the names those files get. The browser side (a Blob and a download link) is in
//! `api`.

use simtree_shared::LogEntry;
use simtree_shared::trading::EquityPoint;

use crate::chart::{abm_steps, abm_table};

/// One JSON object per line, as `simtree run --out` writes logs.
pub fn logs_jsonl(entries: &[LogEntry]) -> String {
    entries.iter().filter_map(|e| serde_json::to_string(e).ok()).map(|line| line + "\n").collect()
}

/// A CSV text cell ([`simtree_shared::csv::text`]).
fn cell(text: &str) -> std::borrow::Cow<'_, str> {
    simtree_shared::csv::text(text)
}

/// `date,strategy,buy_and_hold` from a trading view's two curves (joined by date).
pub fn equity_csv(strategy: &[EquityPoint], buy_and_hold: &[EquityPoint]) -> String {
    let mut out = String::from("date,strategy,buy_and_hold\n");
    for p in strategy {
        let b = buy_and_hold.iter().find(|b| b.date == p.date).map(|b| b.value.to_string()).unwrap_or_default();
        out.push_str(&format!("{},{},{b}\n", cell(&p.date), p.value));
    }
    out
}

/// `step,<var>,…` from tracked variables (one column per variable), one row per `steps[i]`, the
/// model's own step number of the series' `i`-th values (step 0 is the state before the first
/// step).
pub fn series_csv(steps: &[String], series: &[(String, Vec<f64>)]) -> String {
    let mut out = String::from("step");
    for (name, _) in series {
        out.push(',');
        out.push_str(&cell(name));
    }
    out.push('\n');
    for (i, step) in steps.iter().enumerate() {
        out.push_str(&cell(step));
        for (_, xs) in series {
            out.push(',');
            // A step without a value (NaN in the series) is an empty cell.
            if let Some(x) = xs.get(i).filter(|x| x.is_finite()) {
                out.push_str(&x.to_string());
            }
        }
        out.push('\n');
    }
    out
}

/// An agent-based node's Series CSV from its log: a row per `abm_step` entry under the model's
/// step number, a column per tracked number, and for a variable tracked per agent its sum and
/// each agent's value ([`abm_table`]).
pub fn abm_series_csv(entries: &[LogEntry]) -> String {
    series_csv(&abm_steps(entries), &abm_table(entries))
}

/// An inline `<svg>` element's markup as a file a viewer opens: with the SVG namespace and an
/// XML declaration.
pub fn svg_document(outer_html: &str) -> String {
    let body = if outer_html.contains("xmlns=") {
        outer_html.to_string()
    } else {
        outer_html.replacen("<svg", "<svg xmlns=\"http://www.w3.org/2000/svg\"", 1)
    };
    format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n{body}\n")
}

/// `simtree-tree3-node7-log.jsonl` and the like.
pub fn file_name(tree: u64, node: Option<u64>, what: &str, ext: &str) -> String {
    match node {
        Some(n) => format!("simtree-tree{tree}-node{n}-{what}.{ext}"),
        None => format!("simtree-tree{tree}-{what}.{ext}"),
    }
}

/// Counts an export's nodes as its bytes arrive (the server streams it node by node, as
/// `{…header…,"nodes":[{…},{…}]}`): the objects that close directly inside the top-level
/// `"nodes"` array. Bytes are scanned one at a time, so a piece may end anywhere, even inside a
/// string or an escape.
#[derive(Clone, Debug, Default)]
pub struct ExportCounter {
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// The last string read at the top level (a key, then maybe its value), while it is read.
    key: Vec<u8>,
    reading_key: bool,
    in_nodes: bool,
    nodes: u64,
}

impl ExportCounter {
    pub fn feed(&mut self, piece: &[u8]) {
        for &b in piece {
            if self.in_string {
                match b {
                    _ if self.escaped => self.escaped = false,
                    b'\\' => self.escaped = true,
                    b'"' => self.in_string = false,
                    _ if self.reading_key => self.key.push(b),
                    _ => {}
                }
                continue;
            }
            match b {
                b'"' => {
                    self.in_string = true;
                    self.reading_key = self.depth == 1;
                    if self.reading_key {
                        self.key.clear();
                    }
                }
                b'{' | b'[' => {
                    self.depth += 1;
                    if self.depth == 2 && b == b'[' && self.key == b"nodes" {
                        self.in_nodes = true;
                    }
                }
                b'}' | b']' => {
                    if self.in_nodes && self.depth == 3 && b == b'}' {
                        self.nodes += 1;
                    }
                    if self.depth == 2 {
                        self.in_nodes = false;
                    }
                    self.depth = self.depth.saturating_sub(1);
                }
                _ => {}
            }
        }
    }

    /// The nodes received whole so far.
    pub fn nodes(&self) -> u64 {
        self.nodes
    }
}

/// A size in bytes for people: `512 B`, `12.3 kB`, `1.2 MB`.
pub fn byte_size(bytes: usize) -> String {
    let b = bytes as f64;
    if bytes < 1000 {
        format!("{bytes} B")
    } else if b < 1e6 {
        format!("{:.1} kB", b / 1e3)
    } else {
        format!("{:.1} MB", b / 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn logs_are_one_object_a_line() {
        let e: LogEntry = serde_json::from_value(json!({"type": "x", "node": 2, "data": {"a": "b\nc"}})).unwrap();
        let text = logs_jsonl(&[e.clone(), e]);
        assert_eq!(text.lines().count(), 2);
        let back: LogEntry = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(back.data["a"], "b\nc");
    }

    #[test]
    fn the_equity_csv_joins_both_curves_by_date() {
        let point = |date: &str, value: f64| EquityPoint { date: date.into(), value };
        let strategy = [point("2012-06-01", 100000.0), point("2012-06-04", 101000.5)];
        assert_eq!(
            equity_csv(&strategy, &[point("2012-06-04", 99000.0)]),
            "date,strategy,buy_and_hold\n2012-06-01,100000,\n2012-06-04,101000.5,99000\n"
        );
    }

    #[test]
    fn the_series_csv_has_a_column_per_variable_and_quotes_odd_names() {
        let steps = ["0".to_string(), "1".to_string()];
        let s = vec![("infected".to_string(), vec![1.0, 2.0]), ("a,b".to_string(), vec![3.0])];
        assert_eq!(series_csv(&steps, &s), "step,infected,\"a,b\"\n0,1,3\n1,2,\n");
        let gap = vec![("x".to_string(), vec![f64::NAN, 2.0])];
        assert_eq!(series_csv(&steps, &gap), "step,x\n0,\n1,2\n");
    }

    /// Issue 38: an ABM node's rows were numbered 1…11 for the model's steps 0…10, and a variable
    /// tracked per agent (each trader's wealth) had no column at all.
    #[test]
    fn an_abm_series_csv_has_the_models_step_numbers_and_each_agents_values() {
        let step = |n: u64, wealth: serde_json::Value| LogEntry {
            kind: "abm_step".into(),
            data: json!({"step": n, "values": {"globalVariable.gini": 0.5, "agent.T.agentAttribute.wealth": wealth}}),
            node: 1,
        };
        let mut log: Vec<LogEntry> = (0..=10).map(|n| step(n, json!([1, 1, 1]))).collect();
        log[10] = step(10, json!([0, 1, 2]));
        let csv = abm_series_csv(&log);
        let rows: Vec<&str> = csv.lines().collect();
        assert_eq!(
            rows[0],
            "step,globalVariable.gini,agent.T.agentAttribute.wealth (sum),agent.T.agentAttribute.wealth[1],\
             agent.T.agentAttribute.wealth[2],agent.T.agentAttribute.wealth[3]"
        );
        assert_eq!(rows.len(), 12, "a header and steps 0 to 10: {csv}");
        assert_eq!(rows[1], "0,0.5,3,1,1,1");
        assert_eq!(rows[11], "10,0.5,3,0,1,2");
    }

    #[test]
    fn the_export_counter_counts_the_nodes_received_whole_wherever_the_pieces_break() {
        let export = json!({
            "format": "simtree-export/1",
            "scenario": "nodes",
            "document": {"nodes": [{"x": 1}], "y": "a \\\" } { \\\\"},
            "nodes": [
                {"id": 0, "log": [{"data": {"text": "} ] \\\" {"}}], "state": {"nodes": []}},
                {"id": 1, "ops": [{"advance": {"turns": 2}}]},
                {"id": 2}
            ]
        })
        .to_string();
        let bytes = export.as_bytes();
        for cut in 0..bytes.len() {
            let mut c = ExportCounter::default();
            c.feed(&bytes[..cut]);
            let early = c.nodes();
            c.feed(&bytes[cut..]);
            assert_eq!(c.nodes(), 3, "cut at {cut}");
            assert!(early <= 3);
        }
        let mut c = ExportCounter::default();
        let first_end = export.find(r#"{"id":1"#).unwrap();
        c.feed(&bytes[..first_end]);
        assert_eq!(c.nodes(), 1, "the first node is whole, the second not begun");
        assert_eq!(byte_size(512), "512 B");
        assert_eq!(byte_size(12_345), "12.3 kB");
        assert_eq!(byte_size(1_234_567), "1.2 MB");
    }

    #[test]
    fn an_svg_file_names_its_namespace_once() {
        let doc = svg_document("<svg width=\"5\"><rect></rect></svg>");
        assert!(doc.starts_with("<?xml"));
        assert_eq!(doc.matches("xmlns=").count(), 1);
        assert_eq!(svg_document("<svg xmlns=\"http://www.w3.org/2000/svg\"></svg>").matches("xmlns=").count(), 1);
        assert_eq!(file_name(3, Some(7), "log", "jsonl"), "simtree-tree3-node7-log.jsonl");
        assert_eq!(file_name(3, None, "export", "json"), "simtree-tree3-export.json");
    }
}
