//! Line charts as SVG polylines (pure, tested natively): the equity curve of a trading node and
//! its buy-and-hold benchmark share one value axis.

/// Scales several series into a `width × height` box (with a margin) on a common value range and
/// returns each as an SVG `points` string, plus the (min, max) of the axis.
pub fn polylines(series: &[&[f64]], width: f64, height: f64, margin: f64) -> (Vec<String>, (f64, f64)) {
    let all = series.iter().flat_map(|s| s.iter().copied()).filter(|v| v.is_finite());
    let (lo, hi) = all.fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if lo > hi {
        return (series.iter().map(|_| String::new()).collect(), (0.0, 0.0));
    }
    let span = if hi > lo { hi - lo } else { 1.0 };
    let lines = series
        .iter()
        .map(|s| {
            let n = s.len().max(2) - 1;
            s.iter()
                .enumerate()
                .filter(|(_, v)| v.is_finite())
                .map(|(i, v)| {
                    let x = margin + (width - 2.0 * margin) * i as f64 / n as f64;
                    let y = height - margin - (height - 2.0 * margin) * (v - lo) / span;
                    format!("{x:.1},{y:.1}")
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    (lines, (lo, hi))
}

/// A percentage with one decimal (`0.0123` → `1.2%`).
pub fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "–".into(), |v| format!("{:.1}%", v * 100.0))
}

/// The numeric tracked variables of an agent-based model over its steps, from `abm_step`
/// entries (`{step, values}`), in first-seen order; non-numeric values (lists, maps) are skipped.
pub fn abm_series(entries: &[simtree_shared::LogEntry]) -> Vec<(String, Vec<f64>)> {
    let mut out: Vec<(String, Vec<f64>)> = Vec::new();
    for e in entries.iter().filter(|e| e.kind == "abm_step") {
        let Some(values) = e.data["values"].as_object() else {
            continue;
        };
        for (name, v) in values {
            let Some(x) = v.as_f64() else { continue };
            match out.iter_mut().find(|(n, _)| n == name) {
                Some((_, xs)) => xs.push(x),
                None => out.push((name.clone(), vec![x])),
            }
        }
    }
    out
}

/// A short label for a sourceName (`globalVariable.infectedCount` → `infectedCount`).
pub fn short_name(source: &str) -> &str {
    source.rsplit('.').next().unwrap_or(source)
}

/// Series colours, cycled.
pub const COLOURS: [&str; 6] = ["#1e4976", "#e65100", "#1b5e20", "#5e35b1", "#6d4c41", "#b00020"];

/// The structure of an abm-quant model for display: topology, global variables and, per agent
/// type (from attribute sourceNames `agent.<Type>.agentAttribute.<name>`), its attributes.
pub fn abm_structure(model: &serde_json::Value) -> AbmStructure {
    let topology = model["environment"]["topology"]["type"]
        .as_str()
        .unwrap_or("none")
        .to_string();
    let globals = model["globalVariables"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| g["name"].as_str().map(str::to_string))
        .collect();
    let mut agents: Vec<(String, Vec<String>)> = Vec::new();
    let defs = model["agents"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g.as_array().cloned().unwrap_or_default());
    for def in defs {
        for attr in def["agentAttributes"].as_array().into_iter().flatten() {
            let source = attr["sourceName"].as_str().unwrap_or("");
            let mut parts = source.split('.');
            let (Some("agent"), Some(kind)) = (parts.next(), parts.next()) else {
                continue;
            };
            let name = attr["name"].as_str().unwrap_or("").to_string();
            match agents.iter_mut().find(|(k, _)| k == kind) {
                Some((_, attrs)) => attrs.push(name),
                None => agents.push((kind.to_string(), vec![name])),
            }
        }
    }
    AbmStructure {
        topology,
        globals,
        agents,
    }
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

    #[test]
    fn abm_series_and_structure() {
        let step = |n: u64, i: u64| simtree_shared::LogEntry {
            kind: "abm_step".into(),
            data: json!({"step": n, "values": {"globalVariable.infected": i, "agent.P.status": ["S"]}}),
            node: 1,
        };
        let other = simtree_shared::LogEntry {
            kind: "x".into(),
            data: json!({}),
            node: 1,
        };
        let s = abm_series(&[step(0, 1), other, step(1, 4)]);
        assert_eq!(s, vec![("globalVariable.infected".to_string(), vec![1.0, 4.0])]);
        assert_eq!(short_name("globalVariable.infected"), "infected");
        let model = json!({
            "environment": {"topology": {"type": "grid"}},
            "globalVariables": [{"name": "rate"}],
            "agents": [[{"agentAttributes": [{"name": "status", "sourceName": "agent.Tree.agentAttribute.status"}]}]]
        });
        let st = abm_structure(&model);
        assert_eq!((st.topology.as_str(), st.globals), ("grid", vec!["rate".to_string()]));
        assert_eq!(st.agents, vec![("Tree".to_string(), vec!["status".to_string()])]);
    }

    #[test]
    fn series_share_one_axis() {
        let a = [100.0, 110.0, 105.0];
        let b = [100.0, 90.0];
        let (lines, (lo, hi)) = polylines(&[&a, &b], 200.0, 100.0, 10.0);
        assert_eq!((lo, hi), (90.0, 110.0));
        assert_eq!(lines[0], "10.0,50.0 100.0,10.0 190.0,30.0");
        assert_eq!(lines[1], "10.0,50.0 190.0,90.0");
        let (empty, _) = polylines(&[&[]], 10.0, 10.0, 1.0);
        assert_eq!(empty, vec![String::new()]);
        assert_eq!(pct(Some(0.0123)), "1.2%");
        assert_eq!(pct(None), "–");
    }
}
