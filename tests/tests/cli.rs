//! The `simtree run` command completes for every shipped scenario with the mock, in both output
//! modes, and rejects bad input with a clear message and a non-zero exit.

use std::process::Command;

use simtree_e2e::simtree_bin;

fn scenario_ids() -> Vec<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/scenarios");
    let mut ids: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    ids.sort();
    ids
}

#[test]
fn run_completes_for_every_shipped_scenario() {
    let ids = scenario_ids();
    assert!(ids.len() >= 6, "{ids:?}");
    for id in ids {
        let out = Command::new(simtree_bin())
            .args(["run", "--scenario", &id, "--turns", "30", "--json", "--seed", "5"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{id}: {}", String::from_utf8_lossy(&out.stderr));
        let stdout = String::from_utf8(out.stdout).unwrap();
        let lines: Vec<&str> = stdout.lines().collect();
        assert!(!lines.is_empty(), "{id}: no events");
        for line in &lines {
            let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{id}: {e}: {line}"));
            assert!(v["type"].is_string() && v["data"].is_object(), "{id}: {line}");
        }
        assert!(
            !stdout.contains("\"agent_error\""),
            "{id}: the mock produced an agent error"
        );
        let human = Command::new(simtree_bin())
            .args(["run", "--scenario", &id, "--turns", "5"])
            .output()
            .unwrap();
        assert!(human.status.success());
        assert!(String::from_utf8_lossy(&human.stderr).contains("turns run"));
    }
}

#[test]
fn run_also_drives_trading_episodes_and_agent_based_models() {
    for (id, marker) in [("llm_trader", "\"decision_point\""), ("sir_network", "\"abm_step\"")] {
        let out = Command::new(simtree_bin())
            .args(["run", "--scenario", id, "--turns", "3", "--json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{id}: {}", String::from_utf8_lossy(&out.stderr));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.lines().count() >= 3 && stdout.contains(marker), "{id}: {stdout}");
    }
}

#[test]
fn unknown_scenario_is_a_clear_error() {
    let out = Command::new(simtree_bin())
        .args(["run", "--scenario", "chess", "--turns", "1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown scenario 'chess'") && err.contains("simple_chat"),
        "{err}"
    );
}

#[test]
fn a_malformed_scenario_file_is_rejected_with_its_name_and_field() {
    let dir = std::env::temp_dir().join(format!("simtree-bad-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("scenarios")).unwrap();
    std::fs::write(
        dir.join("scenarios/broken.json"),
        r#"{"scene": {"type": "simple_chat", "name": "r"}, "agents": [{"name": "A", "action_space": ["dance"]}]}"#,
    )
    .unwrap();
    let out = Command::new(simtree_bin())
        .args(["--assets", dir.to_str().unwrap(), "scenarios"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("scenarios/broken.json: agents[0].action_space[0]: unknown variant `dance`"),
        "{err}"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn trade_run_prints_metrics_and_writes_the_experiment_folder() {
    let out_dir = std::env::temp_dir().join(format!("simtree-exp-{}", std::process::id()));
    let out = Command::new(simtree_bin())
        .args([
            "trade",
            "run",
            "--agent",
            "momentum",
            "--tickers",
            "AAPL,MSFT",
            "--from",
            "2012-06-01",
            "--to",
            "2012-12-31",
        ])
        .arg("--out")
        .arg(&out_dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("total return") && text.contains("buy & hold"), "{text}");
    let run = std::fs::read_dir(&out_dir).unwrap().next().unwrap().unwrap().path();
    for f in ["config.json", "episode_log.jsonl", "trade_history.json"] {
        assert!(run.join(f).exists(), "{f} missing");
    }
    let bad = Command::new(simtree_bin())
        .args(["trade", "run", "--agent", "astrology", "--tickers", "AAPL"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(!String::from_utf8_lossy(&bad.stderr).is_empty());
    std::fs::remove_dir_all(out_dir).ok();
}
