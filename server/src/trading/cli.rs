//! `simtree trade run`: one episode over the committed market data, its metrics printed and its
//! experiment folder written.
//!
//! ```text
//! simtree trade run --agent momentum --tickers AAPL,MSFT --from 2012-06-01 --to 2012-12-31 \
//!     [--cash 100000] [--out experiments] [--run-id ID] [--every 1] [--lookback 20] [--data DIR]
//! ```
//!
//! The `llm` agent runs on the offline mock model here; real providers come with the provider
//! layer. [`TradeRunArgs`] derives `clap::Args`, so the top-level CLI can mount it as is.

use std::path::PathBuf;
use std::sync::Arc;

use super::agents::{AgentSpec, MockToolModel};
use super::data::{MarketData, default_market_dir};
use super::episode::run_episode;
use super::metrics::format_metrics;
use super::models::EpisodeConfig;
use super::storage::{self, write_run};

/// Arguments of `simtree trade run`.
#[derive(Clone, Debug, PartialEq, clap::Args)]
pub struct TradeRunArgs {
    /// buy_and_hold, momentum, mean_reversion or llm (offline mock model).
    #[arg(long)]
    agent: String,
    /// Comma-separated tickers, e.g. AAPL,MSFT.
    #[arg(long, value_delimiter = ',', required = true)]
    tickers: Vec<String>,
    /// First day of the window (YYYY-MM-DD).
    #[arg(long)]
    from: String,
    /// Last day of the window (YYYY-MM-DD, inclusive).
    #[arg(long)]
    to: String,
    /// Initial cash.
    #[arg(long, default_value_t = 100_000.0)]
    cash: f64,
    /// Folder that receives {run_id}/.
    #[arg(long, default_value = "experiments")]
    pub out: PathBuf,
    /// Run id (default: agent-tickers-from-to, with -2, -3… if taken).
    #[arg(long)]
    run_id: Option<String>,
    /// Trading days between decision points.
    #[arg(long, default_value_t = 1)]
    every: u32,
    /// Daily bars per ticker shown in each Case.
    #[arg(long, default_value_t = 20)]
    lookback: u32,
    /// Folder with daily_ohlcv.csv and events.csv (default: assets/data/market).
    #[arg(long)]
    data: Option<PathBuf>,
}

impl TradeRunArgs {
    /// The arguments with the command's defaults (tests and callers that build them by hand).
    pub fn new(agent: &str, tickers: &[&str], from: &str, to: &str) -> Self {
        TradeRunArgs {
            agent: agent.to_owned(),
            tickers: tickers.iter().map(|t| t.to_string()).collect(),
            from: from.to_owned(),
            to: to.to_owned(),
            cash: 100_000.0,
            out: PathBuf::from("experiments"),
            run_id: None,
            every: 1,
            lookback: 20,
            data: None,
        }
    }
}

/// Runs the episode, writes `{out}/{run_id}/` and returns the text to print.
pub fn trade_run(args: TradeRunArgs) -> Result<String, String> {
    let agent = AgentSpec::from_kind(&args.agent).map_err(|m| format!("--agent: {m}"))?;
    let tickers: Vec<String> = args.tickers.iter().map(|t| t.trim().to_uppercase()).filter(|t| !t.is_empty()).collect();
    if tickers.is_empty() {
        return Err("--tickers: name at least one ticker".into());
    }
    let run_id = match &args.run_id {
        Some(id) => {
            storage::check_run_id(id).map_err(|e| format!("--run-id: {e}"))?;
            id.clone()
        }
        None => free_run_id(&args, agent.kind(), &tickers),
    };
    let dir = match args.data.clone() {
        Some(dir) => dir,
        None => default_market_dir().map_err(|e| e.to_string())?,
    };
    let market = Arc::new(MarketData::load_dir(&dir).map_err(|e| e.to_string())?);
    let mut config = EpisodeConfig::new(run_id.clone(), agent.kind(), tickers, args.cash);
    config.start_date = Some(args.from.clone());
    config.end_date = Some(args.to.clone());
    config.decision_interval = Some(args.every);
    config.lookback_days = Some(args.lookback);
    config.agent = Some(agent);
    let episode = run_episode(market, config, &MockToolModel).map_err(|e| e.to_string())?;
    let written = write_run(&args.out, &run_id, &[episode.episode_log()]).map_err(|e| e.to_string())?;
    Ok(format!(
        "{}wrote {} ({}, {}, {})\n",
        format_metrics(&episode.metrics()),
        written.display(),
        storage::CONFIG_FILE,
        storage::EPISODE_LOG_FILE,
        storage::TRADE_HISTORY_FILE
    ))
}

/// `agent-TICKERS-from-to`, suffixed `-2`, `-3`… when that folder is taken.
fn free_run_id(args: &TradeRunArgs, kind: &str, tickers: &[String]) -> String {
    let base: String = format!("{kind}-{}-{}-{}", tickers.join("-"), args.from, args.to)
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '_' })
        .collect();
    let mut id = base.clone();
    let mut n = 1;
    while args.out.join(&id).exists() {
        n += 1;
        id = format!("{base}-{n}");
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: TradeRunArgs,
    }

    #[test]
    fn parses_the_documented_command_line() {
        let w = Wrapper::try_parse_from([
            "trade",
            "--agent",
            "momentum",
            "--tickers",
            "AAPL,MSFT",
            "--from",
            "2012-06-01",
            "--to",
            "2012-12-31",
        ])
        .unwrap();
        assert_eq!(w.args, TradeRunArgs::new("momentum", &["AAPL", "MSFT"], "2012-06-01", "2012-12-31"));
        let w = Wrapper::try_parse_from([
            "trade",
            "--agent",
            "llm",
            "--tickers",
            "IBM",
            "--from",
            "a",
            "--to",
            "b",
            "--cash",
            "5000",
            "--out",
            "/tmp/x",
            "--every",
            "5",
        ])
        .unwrap();
        assert_eq!((w.args.cash, w.args.every), (5000.0, 5));
        assert_eq!(w.args.out, PathBuf::from("/tmp/x"));
        assert!(Wrapper::try_parse_from(["trade", "--agent", "llm"]).is_err());
    }

    #[test]
    fn bad_arguments_are_named() {
        let err = trade_run(TradeRunArgs::new("oracle", &["AAPL"], "2012-06-01", "2012-07-01")).unwrap_err();
        assert!(err.starts_with("--agent: unknown agent 'oracle'"), "{err}");
        let mut a = TradeRunArgs::new("momentum", &["AAPL"], "2012-06-01", "2012-07-01");
        a.run_id = Some("../escape".into());
        assert!(trade_run(a).unwrap_err().starts_with("--run-id:"));
        let mut a = TradeRunArgs::new("momentum", &["TSLA"], "2012-06-01", "2012-07-01");
        a.out = std::env::temp_dir().join("simtree-trading-cli-never-written");
        let err = trade_run(a).unwrap_err();
        assert!(err.contains("unknown ticker 'TSLA'"), "{err}");
    }
}
