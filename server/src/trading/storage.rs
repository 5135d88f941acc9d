//! Experiment storage in the seed's layout:
//!
//! ```text
//! {root}/{run_id}/config.json         the runs' EpisodeConfigs (a JSON list, one per episode)
//! {root}/{run_id}/episode_log.jsonl   one EpisodeLog per line
//! {root}/{run_id}/trade_history.json  a TradeHistory with every episode's trades in order
//! ```
//!
//! (each trade's `case_id` starts with its episode's id). `root` is any folder (the CLI's
//! `--out`, `experiments` by default). Reading a run back checks every file against the models and
//! names the file and line of the first problem.

use std::path::{Path, PathBuf};

use super::TradingError;
use super::models::{EpisodeConfig, EpisodeLog, TradeHistory};

pub(crate) const CONFIG_FILE: &str = "config.json";
pub(crate) const EPISODE_LOG_FILE: &str = "episode_log.jsonl";
pub(crate) const TRADE_HISTORY_FILE: &str = "trade_history.json";

/// A run as stored on disk.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredRun {
    run_id: String,
    pub configs: Vec<EpisodeConfig>,
    pub episode_logs: Vec<EpisodeLog>,
    pub trade_history: TradeHistory,
}

impl StoredRun {
    /// The run as the seed's SimulationLog (versions: this crate's for the simulation).
    #[cfg(test)]
    pub(crate) fn to_simulation_log(&self) -> super::models::SimulationLog {
        super::models::SimulationLog {
            run_id: self.run_id.clone(),
            episode_logs: self.episode_logs.clone(),
            errors: Vec::new(),
            simulation_version: Some(env!("CARGO_PKG_VERSION").to_owned()),
            agent_version: None,
            evaluation_version: None,
        }
    }
}

/// A run id usable as one folder name: letters, digits, `-`, `_`, `.`; not `.` or `..`.
pub(crate) fn check_run_id(run_id: &str) -> Result<(), TradingError> {
    let ok = !run_id.is_empty()
        && run_id != "."
        && run_id != ".."
        && run_id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(TradingError::Config(format!(
            "run_id '{run_id}' must be letters, digits, '-', '_' or '.' (a single folder name)"
        )))
    }
}

/// `{root}/{run_id}`.
pub(crate) fn run_dir(root: &Path, run_id: &str) -> Result<PathBuf, TradingError> {
    check_run_id(run_id)?;
    Ok(root.join(run_id))
}

/// Writes a run. The folder must not exist yet or be empty, so a run is never mixed with another.
pub fn write_run(root: &Path, run_id: &str, logs: &[EpisodeLog]) -> Result<PathBuf, TradingError> {
    let dir = run_dir(root, run_id)?;
    if dir.exists() {
        let occupied = std::fs::read_dir(&dir).map_err(|e| TradingError::storage(&dir, e))?.next().is_some();
        if occupied {
            return Err(TradingError::storage(&dir, "already holds a run; choose another run id or remove it"));
        }
    }
    std::fs::create_dir_all(&dir).map_err(|e| TradingError::storage(&dir, e))?;

    let configs: Vec<&EpisodeConfig> = logs.iter().map(|l| &l.config).collect();
    write(&dir.join(CONFIG_FILE), &to_pretty(&configs)?)?;

    let mut lines = String::new();
    for log in logs {
        lines += &serde_json::to_string(log).map_err(|e| TradingError::storage(&dir, e))?;
        lines.push('\n');
    }
    write(&dir.join(EPISODE_LOG_FILE), &lines)?;

    let trades = TradeHistory {
        trades: logs
            .iter()
            .flat_map(|l| l.decision_point_logs.iter())
            .flat_map(|d| d.execution_result.executed_trades.iter().cloned())
            .collect(),
    };
    write(&dir.join(TRADE_HISTORY_FILE), &to_pretty(&trades)?)?;
    Ok(dir)
}

/// Reads a run back, checking every file against the models.
pub fn read_run(root: &Path, run_id: &str) -> Result<StoredRun, TradingError> {
    let dir = run_dir(root, run_id)?;
    let config_path = dir.join(CONFIG_FILE);
    let configs: Vec<EpisodeConfig> =
        parse(&read(&config_path)?).map_err(|e| TradingError::storage(&config_path, e))?;

    let log_path = dir.join(EPISODE_LOG_FILE);
    let mut episode_logs = Vec::new();
    for (i, line) in read(&log_path)?.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let log: EpisodeLog =
            parse(line).map_err(|e| TradingError::storage(&log_path, format!("line {}: {e}", i + 1)))?;
        episode_logs.push(log);
    }

    let trades_path = dir.join(TRADE_HISTORY_FILE);
    let trade_history: TradeHistory =
        parse(&read(&trades_path)?).map_err(|e| TradingError::storage(&trades_path, e))?;

    if configs.len() != episode_logs.len() || configs.iter().zip(&episode_logs).any(|(c, l)| *c != l.config) {
        return Err(TradingError::storage(
            &config_path,
            format!("does not match the configs of the {} episode logs", episode_logs.len()),
        ));
    }
    Ok(StoredRun { run_id: run_id.to_owned(), configs, episode_logs, trade_history })
}

fn to_pretty<T: serde::Serialize>(v: &T) -> Result<String, TradingError> {
    serde_json::to_string_pretty(v)
        .map(|mut s| {
            s.push('\n');
            s
        })
        .map_err(|e| TradingError::Config(e.to_string()))
}

fn write(path: &Path, text: &str) -> Result<(), TradingError> {
    std::fs::write(path, text).map_err(|e| TradingError::storage(path, e))
}

fn read(path: &Path) -> Result<String, TradingError> {
    std::fs::read_to_string(path).map_err(|e| TradingError::storage(path, e))
}

/// A stored file's JSON that is not its model: the JSON path of the bad field (`.` for the
/// whole text) and serde's message.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {source}")]
struct ParseError {
    path: String,
    source: serde_json::Error,
}

/// Parses JSON into a model; the error gives the JSON path of the bad field.
fn parse<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, ParseError> {
    let de = &mut serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| ParseError { path: e.path().to_string(), source: e.into_inner() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trading::agents::MockToolModel;
    use crate::trading::data::tests::tiny_market;
    use crate::trading::episode::run_episode;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A fresh folder under the system temp dir (removed by the test).
    pub(crate) fn temp_root(tag: &str) -> PathBuf {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "simtree-trading-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn two_logs() -> Vec<EpisodeLog> {
        let market = Arc::new(tiny_market());
        ["llm", "momentum"]
            .iter()
            .map(|agent| {
                let cfg = EpisodeConfig::new(format!("ep-{agent}"), *agent, vec!["A".into(), "B".into()], 1000.0);
                run_episode(market.clone(), cfg, &MockToolModel).unwrap().episode_log()
            })
            .collect()
    }

    #[test]
    fn files_are_written_in_the_seed_layout_and_parse_back() {
        let root = temp_root("layout");
        let logs = two_logs();
        let dir = write_run(&root, "run-1", &logs).unwrap();
        let mut names: Vec<String> =
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        assert_eq!(names, ["config.json", "episode_log.jsonl", "trade_history.json"]);

        // Each file on its own parses into the seed's models.
        let text = std::fs::read_to_string(dir.join(EPISODE_LOG_FILE)).unwrap();
        assert_eq!(text.lines().count(), 2, "one EpisodeLog per line");
        for line in text.lines() {
            let log: EpisodeLog = serde_json::from_str(line).unwrap();
            assert!(log.episode_result.is_some());
        }
        let configs: Vec<EpisodeConfig> =
            serde_json::from_str(&std::fs::read_to_string(dir.join(CONFIG_FILE)).unwrap()).unwrap();
        assert_eq!(configs[1].agent_id, "momentum");
        let trades: TradeHistory =
            serde_json::from_str(&std::fs::read_to_string(dir.join(TRADE_HISTORY_FILE)).unwrap()).unwrap();
        let expected: usize = logs.iter().map(|l| l.episode_result.as_ref().unwrap().trade_history.trades.len()).sum();
        assert_eq!(trades.trades.len(), expected);

        let run = read_run(&root, "run-1").unwrap();
        assert_eq!(run.episode_logs, logs);
        assert_eq!(run.trade_history, trades);
        let sim = run.to_simulation_log();
        assert_eq!(sim.episode_logs.len(), 2);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn existing_runs_and_bad_ids_are_refused() {
        let root = temp_root("refuse");
        let logs = two_logs();
        write_run(&root, "r", &logs).unwrap();
        let err = write_run(&root, "r", &logs).unwrap_err().to_string();
        assert!(err.ends_with("already holds a run; choose another run id or remove it"), "{err}");
        for bad in ["", "..", "a/b", "a b"] {
            assert!(write_run(&root, bad, &logs).is_err(), "{bad:?}");
        }
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn corrupt_files_are_reported_with_path_and_field() {
        let root = temp_root("corrupt");
        let dir = write_run(&root, "r", &two_logs()).unwrap();
        let path = dir.join(EPISODE_LOG_FILE);
        let text = std::fs::read_to_string(&path).unwrap();
        let broken = text.replacen("\"status\":\"accepted\"", "\"status\":\"maybe\"", 1);
        std::fs::write(&path, broken).unwrap();
        let err = read_run(&root, "r").unwrap_err().to_string();
        assert!(err.contains("episode_log.jsonl: line 1:"), "{err}");
        assert!(err.contains("decision_point_logs[0].execution_result.status: unknown variant `maybe`"), "{err}");
        std::fs::write(&path, text.lines().next().unwrap()).unwrap();
        let err = read_run(&root, "r").unwrap_err().to_string();
        assert!(err.contains("does not match the configs"), "{err}");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
