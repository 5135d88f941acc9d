//! `simtree sweep` end to end: an SIR epidemic swept over its infection rate (the faster
//! disease peaks higher, and a second run of the file gives the same numbers), a trading
//! episode swept over its agent's lookback, and a card game swept over a scene-state value.

use std::process::Command;

use serde_json::{Value, json};
use simtree_e2e::simtree_bin;

/// Runs `simtree sweep --json` on `spec`; returns one JSON value per cell.
fn sweep(name: &str, spec: &Value, env: &[(&str, &str)]) -> Vec<Value> {
    let path = std::env::temp_dir().join(format!("simtree-sweep-{}-{name}.json", std::process::id()));
    std::fs::write(&path, spec.to_string()).unwrap();
    let mut cmd = Command::new(simtree_bin());
    cmd.arg("sweep").arg(&path).arg("--json").env_remove("LLM_DIALECT");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn mean(cell: &Value, metric: &str) -> f64 {
    cell["metrics"][metric]["mean"].as_f64().unwrap_or_else(|| panic!("{metric}: {cell}"))
}

#[test]
fn a_faster_epidemic_peaks_higher_and_the_same_file_gives_the_same_numbers() {
    let spec = json!({
        "scenario": "sir_network", "turns": 40, "replicates": 3, "seed": 1,
        "axes": [{"label": "rate", "op": {"op": "abm_set_global", "name": "infectionRate"},
                  "field": "value", "values": [0.01, 0.3]}],
        "metrics": {"peak": "max:globalVariable.infectedCount"}
    });
    let first = sweep("sir", &spec, &[]);
    assert_eq!(first.len(), 2);
    assert_eq!(first[0]["cell"], json!({"rate": 0.01}));
    assert_eq!(first[1]["metrics"]["peak"]["n"], 3);
    let (slow, fast) = (mean(&first[0], "peak"), mean(&first[1], "peak"));
    assert!(fast > slow, "peak at rate 0.3 ({fast}) should exceed rate 0.01 ({slow})");
    // The paired effect against the first cell: with every pair complete, the mean difference is
    // the difference of the means; the baseline has none.
    let e = &first[1]["effects"]["peak"];
    assert!((e["mean_diff"].as_f64().unwrap() - (fast - slow)).abs() < 1e-9, "{e}");
    assert_eq!((e["n_pairs"].as_u64(), e["dropped"].as_u64()), (Some(3), Some(0)), "{e}");
    assert!(e["ci95"][0].as_f64().unwrap() < e["ci95"][1].as_f64().unwrap(), "{e}");
    assert!(first[0].get("effects").is_none(), "{}", first[0]);
    assert_eq!(sweep("sir-again", &spec, &[]), first, "a sweep is reproducible");
}

#[test]
fn a_trading_sweep_over_the_agents_lookback_runs_end_to_end() {
    let spec = json!({
        "scenario": "momentum_tech", "turns": 15, "replicates": 2,
        "axes": [{"label": "lookback", "op": {"op": "agent_swap", "agent": {"kind": "momentum"}},
                  "field": "agent.lookback", "values": [3, 10]}],
        "metrics": {"value": "metric:final_value", "trades": "metric:num_trades"}
    });
    let cells = sweep("trading", &spec, &[]);
    assert_eq!(cells.len(), 2);
    for c in &cells {
        assert!(mean(c, "value") > 0.0, "{c}");
        assert_eq!(c["metrics"]["value"]["sd"], 0.0, "trading episodes are deterministic");
    }
    assert_ne!(cells[0]["metrics"]["trades"], cells[1]["metrics"]["trades"], "the lookback matters");
}

#[test]
fn a_social_sweep_over_a_scene_state_value_runs_end_to_end() {
    let spec = json!({
        "scenario": "landlord", "turns": 600, "replicates": 2, "seed": 5,
        "axes": [{"label": "stakes", "op": {"op": "scene_state_patch", "updates": {}},
                  "field": "updates.score_multiplier", "values": [1, 8]}],
        "metrics": {"multiplier": "state:score_multiplier", "winner": "state:winner_team",
                    "plays": "count:action_end"}
    });
    let cells = sweep("social", &spec, &[("LLM_DIALECT", "scripted")]);
    assert_eq!(cells.len(), 2);
    let raised = cells[1]["metrics"]["multiplier"]["values"].as_array().unwrap();
    assert!(raised.iter().all(|m| m.as_u64().unwrap() >= 8), "the patched stakes hold: {raised:?}");
    assert!(mean(&cells[0], "multiplier") < 8.0);
    for c in &cells {
        assert_eq!(c["metrics"]["winner"]["n"], 2, "every game ended with a winner: {c}");
        assert!(mean(c, "plays") > 20.0, "{c}");
    }
}
