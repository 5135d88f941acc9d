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
        assert!(!stdout.contains("\"agent_error\""), "{id}: the mock produced an agent error");
        let human = Command::new(simtree_bin()).args(["run", "--scenario", &id, "--turns", "5"]).output().unwrap();
        assert!(human.status.success());
        assert!(String::from_utf8_lossy(&human.stderr).contains("turns run"));
    }
}

#[test]
fn run_also_drives_trading_episodes_and_agent_based_models() {
    for (id, marker) in [("llm_trader", "\"decision_point\""), ("sir_network", "\"abm_step\"")] {
        let out =
            Command::new(simtree_bin()).args(["run", "--scenario", id, "--turns", "3", "--json"]).output().unwrap();
        assert!(out.status.success(), "{id}: {}", String::from_utf8_lossy(&out.stderr));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.lines().count() >= 3 && stdout.contains(marker), "{id}: {stdout}");
    }
}

#[test]
fn unknown_scenario_is_a_clear_error() {
    let out = Command::new(simtree_bin()).args(["run", "--scenario", "chess", "--turns", "1"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown scenario 'chess'") && err.contains("simple_chat"), "{err}");
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
    let out = Command::new(simtree_bin()).args(["--assets", dir.to_str().unwrap(), "scenarios"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("scenarios/broken.json: agents[0].action_space[0]: unknown variant `dance`"), "{err}");
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

/// A throw-away folder, removed on drop.
struct Folder(std::path::PathBuf);

impl Folder {
    fn new(name: &str) -> Folder {
        let dir = std::env::temp_dir().join(format!("simtree-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Folder(dir)
    }

    fn path(&self, name: &str) -> String {
        self.0.join(name).to_string_lossy().into_owned()
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `simtree args…`: (success, stdout, stderr).
fn simtree(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(simtree_bin())
        .args(args)
        .env("RUST_LOG", "warn")
        .env_remove("SIMTREE_DATA")
        .env_remove("SIMTREE_DATABASE_URL")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn shipped_chat(title: &str) -> serde_json::Value {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/scenarios/simple_chat.json");
    let mut doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    doc["title"] = title.into();
    doc
}

#[tokio::test]
async fn scenarios_save_list_and_rm_keep_the_library_of_a_data_folder_with_the_apis_checks() {
    let dir = Folder::new("library");
    let data = dir.path("data");
    let file = dir.path("chat.json");
    let write = |doc: &serde_json::Value| std::fs::write(&file, doc.to_string()).unwrap();
    write(&shipped_chat("Mine"));
    let (ok, out, err) = simtree(&["scenarios", "save", "mine", &file, "--data", &data]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "saved mine version 1");
    write(&shipped_chat("Mine, again"));
    let (ok, out, err) = simtree(&["scenarios", "save", "mine", &file, "--data", &data]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "saved mine version 2", "a second save is the next version");

    // Refusals: the API's messages, a non-zero exit, nothing kept.
    let refused = |args: &[&str], says: &str| {
        let (ok, _, err) = simtree(args);
        assert!(!ok, "{args:?} passed");
        assert!(err.contains(says), "{args:?}: {err}");
    };
    refused(&["scenarios", "save", "evil\u{1b}[31m", &file, "--data", &data], "control characters (found U+001B)");
    refused(&["scenarios", "save", "../../etc", &file, "--data", &data], "not a path");
    refused(&["scenarios", "save", "council", &file, "--data", &data], "read-only");
    let mut bad = shipped_chat("Bad");
    bad["agents"][1]["action_space"] = serde_json::json!(["fly"]);
    write(&bad);
    refused(&["scenarios", "save", "bad", &file, "--data", &data], "agents[1].action_space[0]");
    let mut big = shipped_chat("Big");
    big["description"] = "x".repeat(2 << 20).into();
    write(&big);
    refused(&["scenarios", "save", "big", &file, "--data", &data], "at most 2097152");
    refused(&["scenarios", "save", "missing", &dir.path("nope.json"), "--data", &data], "cannot read");
    refused(&["scenarios", "rm", "council", "--data", &data], "read-only");
    refused(&["scenarios", "rm", "nothing", "--data", &data], "no saved scenario called 'nothing'");

    let (ok, out, err) = simtree(&["scenarios", "list", "--data", &data]);
    assert!(ok, "{err}");
    let mine: Vec<&str> = out.lines().filter(|l| l.starts_with("mine ")).collect();
    assert_eq!(mine.len(), 1, "{out}");
    assert!(mine[0].contains("saved v2") && mine[0].contains("Mine, again"), "{out}");
    assert!(out.lines().any(|l| l.starts_with("council ") && l.contains("shipped")), "{out}");
    assert!(!out.contains("bad") && !out.contains("big"), "{out}");

    // The server on that folder serves what the CLI saved, both versions.
    let s = simtree_e2e::Server::start_with(&["--data", &data]);
    let (_, v1) = s.get("/api/scenarios/mine?version=1").await;
    assert_eq!(v1["document"], shipped_chat("Mine"));
    let (_, list) = s.get("/api/scenarios").await;
    let saved: Vec<&serde_json::Value> = list.as_array().unwrap().iter().filter(|e| e["origin"] == "saved").collect();
    assert_eq!(saved.len(), 1, "{list}");
    assert_eq!((&saved[0]["id"], &saved[0]["version"]), (&"mine".into(), &2.into()));
    drop(s);

    let (ok, out, err) = simtree(&["scenarios", "rm", "mine", "--data", &data]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "removed mine");
    let (_, out, _) = simtree(&["scenarios", "list", "--data", &data]);
    assert!(!out.contains("mine"), "{out}");
}

#[test]
fn run_scenario_file_trades_on_the_dataset_its_document_names() {
    let dir = Folder::new("run-dataset");
    let data = dir.path("data");
    // One ticker, AAA, closing at 10 + day over 12 days.
    let mut csv = String::from("date,ticker,open,high,low,close,volume\n");
    for d in 0..12 {
        let p = 10 + d;
        csv.push_str(&format!("2020-01-{:02},AAA,{p},{p},{p},{p},100\n", d + 1));
    }
    std::fs::write(dir.path("prices.csv"), csv).unwrap();
    let (ok, _, err) = simtree(&["data", "import", "prices", &dir.path("prices.csv"), "--data", &data]);
    assert!(ok, "{err}");
    let doc = serde_json::json!({"title": "Mine", "default_turns": 5, "episode": {
        "episode_id": "mine", "agent_id": "buy_and_hold", "tickers": ["AAA"], "initial_cash": 1000.0,
        "dataset": "prices", "agent": {"kind": "buy_and_hold"}}});
    let file = dir.path("trade.json");
    std::fs::write(&file, doc.to_string()).unwrap();
    let (ok, out, err) = simtree(&["run", "--scenario-file", &file, "--turns", "5", "--json", "--data", &data]);
    assert!(ok, "{err}");
    let values: Vec<f64> = out
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["type"] == "decision_point")
        .map(|e| e["data"]["value"].as_f64().unwrap())
        .collect();
    // Buy and hold: 100 shares at the first close (10), then each day's close adds 100.
    assert_eq!(values, [1000.0, 1100.0, 1200.0, 1300.0, 1400.0], "{out}");
    // Without the dataset the run is refused, naming it.
    let (ok, _, err) = simtree(&["run", "--scenario-file", &file, "--turns", "1", "--data", &dir.path("empty")]);
    assert!(!ok);
    assert!(err.contains("no dataset called 'prices'"), "{err}");
}
