//! Trading episodes end to end on the committed real market data: every baseline over several
//! months, the LLM agent on the offline mock model, the experiment folder written and read back,
//! and `trade run` as the CLI calls it.

use std::path::PathBuf;
use std::sync::Arc;

use simtree::trading::agents::{AgentSpec, MockToolModel};
use simtree::trading::cli::{TradeRunArgs, trade_run};
use simtree::trading::data::MarketData;
use simtree::trading::episode::{StepReport, TradingEpisode, TradingOp};
use simtree::trading::metrics::evaluate_log;
use simtree::trading::models::{CaseDataItem, CaseDataKind, DecisionStatus, EpisodeConfig, EpisodeLog, Side};
use simtree::trading::storage::{read_run, write_run};

fn market() -> Arc<MarketData> {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../assets/data/market"));
    Arc::new(MarketData::load_dir(&dir).expect("the committed market data loads"))
}

fn config(id: &str, agent: &str, tickers: &[&str], from: &str, to: &str) -> EpisodeConfig {
    let mut c = EpisodeConfig::new(id, agent, tickers.iter().map(|t| t.to_string()).collect(), 100_000.0);
    c.start_date = Some(from.into());
    c.end_date = Some(to.into());
    c
}

fn temp_root(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("simtree-trading-it-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Runs an episode to the end, checking every step's Case against its cutoff on the way.
fn run_checked(market: &Arc<MarketData>, cfg: EpisodeConfig) -> TradingEpisode {
    run_with_reports(market, cfg).0
}

fn run_with_reports(market: &Arc<MarketData>, cfg: EpisodeConfig) -> (TradingEpisode, Vec<StepReport>) {
    let mut ep = TradingEpisode::new(market.clone(), cfg).unwrap();
    let n = ep.num_decision_points();
    let reports = ep.run_blocking(n, &MockToolModel).unwrap();
    assert_eq!(reports.len(), n);
    for (i, r) in reports.iter().enumerate() {
        let cutoff = r.case.information_cutoff_timestamp.clone().unwrap();
        assert_eq!(r.case.case_id, format!("{}:{i}", ep.config().episode_id));
        for (t, sd) in &r.case.stock_data {
            assert!(
                sd.daily_bars.iter().all(|b| b.timestamp <= cutoff),
                "{t}: a bar after {cutoff} in {}",
                r.case.case_id
            );
            assert_eq!(sd.current_price, market.close(t, &cutoff).unwrap(), "{t} {cutoff}");
        }
        for item in &r.case.case_data.items {
            assert!(item.content[..10] <= *cutoff, "future item {item:?} at {cutoff}");
        }
    }
    assert!(ep.is_done());
    (ep, reports)
}

#[test]
fn buy_and_hold_on_real_data_matches_hand_computed_figures() {
    let market = market();
    let ep = run_checked(&market, config("bh", "buy_and_hold", &["AAPL"], "2012-06-01", "2012-12-31"));
    let m = ep.metrics();
    // Figures computed independently from daily_ohlcv.csv: 178 AAPL at 560.99 on 2012-06-01,
    // valued at the 2012-12-31 close of 532.1729, 146 trading days.
    assert_eq!(m.days, 146);
    assert_eq!(m.decision_points, 146);
    assert_eq!(ep.portfolio().shares("AAPL"), 178);
    assert!((m.final_value - 94_870.556_2).abs() < 1e-6, "{m:?}");
    assert!((m.strategy.total_return - -0.051_294_437_999_999_89).abs() < 1e-9);
    assert!((m.strategy.sharpe.unwrap() - -0.186_074_063_748_693_62).abs() < 1e-9);
    assert!((m.strategy.volatility - 0.280_937_164_259_364_94).abs() < 1e-9);
    assert!((m.strategy.max_drawdown - 0.273_877_758_824_938_87).abs() < 1e-9);
    assert_eq!(m.strategy, m.buy_and_hold, "the agent is the benchmark");
    assert_eq!((m.num_trades, m.rejected_decisions), (1, 0));
}

#[test]
fn every_baseline_runs_months_of_real_data_without_rejections() {
    let market = market();
    let tickers = ["AAPL", "GOOG", "IBM", "MSFT"];
    for agent in ["buy_and_hold", "momentum", "mean_reversion"] {
        let ep = run_checked(&market, config(agent, agent, &tickers, "2012-06-01", "2012-10-31"));
        let m = ep.metrics();
        let log = ep.episode_log();
        assert_eq!(m.rejected_decisions, 0, "{agent}: {:?}", log.decision_point_logs);
        assert!(m.num_trades >= 4, "{agent} traded only {} times", m.num_trades);
        assert!(log.decision_point_logs.iter().all(|d| d.execution_result.status == DecisionStatus::Accepted));
        // The final value is the final portfolio at the last close.
        let last = m.end_date.clone().unwrap();
        assert_eq!(last, "2012-10-31");
        let valued = ep.portfolio().value(|t| market.close(t, &last));
        assert!((valued - m.final_value).abs() < 1e-6, "{agent}");
        assert!(ep.portfolio().cash >= 0.0);
        // The stored log alone reproduces the live metrics.
        assert_eq!(evaluate_log(&log, &market).unwrap(), m, "{agent}");
        // Same benchmark for every agent on the same window.
        assert!(m.buy_and_hold.total_return.is_finite());
    }
    let momentum = run_checked(&market, config("m", "momentum", &tickers, "2012-06-01", "2012-10-31"));
    let sells = momentum.trade_history().trades.iter().filter(|t| t.side == Side::Sell).count();
    assert!(sells > 0, "momentum should exit some positions over five months");
}

#[test]
fn mock_llm_episode_runs_offline_with_tool_results_fed_back() {
    let market = market();
    let mut cfg = config("llm", "llm", &["AAPL", "MSFT"], "2012-09-04", "2012-11-30");
    cfg.decision_interval = Some(5);
    let (ep, reports) = run_with_reports(&market, cfg);
    let log = ep.episode_log();
    assert!(log.decision_point_logs.len() >= 12);
    for d in &log.decision_point_logs {
        assert_eq!(d.agent_output["tool_calls"][0]["name"], "submit_decision");
        assert!(d.extracted_decision.is_some());
        assert!(d.execution_result.is_accepted(), "{}", d.execution_result.message);
    }
    assert!(ep.metrics().num_trades > 0);
    // The agent remembers its last exchanges, each answered with the DecisionResult.
    let memory = ep.memory();
    assert_eq!(memory.len(), 2);
    assert!(memory[1].results[0].content.contains("\"status\":\"accepted\""));
    // Microsoft's results of 2012-10-18 came after the close: shown once, in the first Case cut
    // off after that day; Google's same-day release is outside this universe.
    let showing: Vec<&str> = reports
        .iter()
        .filter(|r| r.case.case_data.items.iter().any(|i| i.content.starts_with("2012-10-18 (after the close) MSFT")))
        .map(|r| r.case.information_cutoff_timestamp.as_deref().unwrap())
        .collect();
    assert_eq!(showing.len(), 1);
    assert!(showing[0] > "2012-10-18");
    assert!(reports.iter().all(|r| { r.case.case_data.items.iter().all(|i| !i.content.contains(" GOOG: ")) }));
}

#[test]
fn branch_ops_change_the_course_of_an_episode() {
    let market = market();
    let cfg = config("br", "llm", &["AAPL", "MSFT"], "2012-06-01", "2012-08-31");
    let mut a = TradingEpisode::new(market.clone(), cfg).unwrap();
    a.run_blocking(10, &MockToolModel).unwrap();
    let mut b = a.clone();
    b.apply_op(&TradingOp::CaseDataInject {
        item: CaseDataItem {
            kind: CaseDataKind::News,
            content: "Synthetic: MSFT announces a surprise dividend.".into(),
        },
    })
    .unwrap();
    b.apply_op(&TradingOp::AgentSwap { agent: AgentSpec::from_kind("momentum").unwrap() }).unwrap();
    let ra = a.run_blocking(1, &MockToolModel).unwrap().remove(0);
    let rb = b.run_blocking(1, &MockToolModel).unwrap().remove(0);
    assert!(!ra.case.case_data.items.iter().any(|i| i.content.starts_with("Synthetic")));
    assert!(rb.case.case_data.items.iter().any(|i| i.content.starts_with("Synthetic")));
    assert_eq!(ra.case.case_id, rb.case.case_id);
    a.run_blocking(100, &MockToolModel).unwrap();
    b.run_blocking(100, &MockToolModel).unwrap();
    let (va, vb) = (a.view(), b.view());
    assert_eq!(va.equity_curve.len(), vb.equity_curve.len());
    assert_eq!(va.equity_curve[..10], vb.equity_curve[..10], "shared history");
    assert_ne!(va.metrics.strategy, vb.metrics.strategy);
    assert_eq!(va.metrics.buy_and_hold, vb.metrics.buy_and_hold);
}

#[test]
fn experiment_folder_round_trips() {
    let market = market();
    let logs: Vec<EpisodeLog> = ["momentum", "llm"]
        .iter()
        .map(|agent| {
            run_checked(&market, config(agent, agent, &["IBM", "GOOG"], "2012-07-02", "2012-09-28")).episode_log()
        })
        .collect();
    let root = temp_root("store");
    let dir = write_run(&root, "run-a", &logs).unwrap();
    assert!(dir.join("config.json").is_file());
    let run = read_run(&root, "run-a").unwrap();
    // Exactly equal, floats included (serde_json's float_roundtrip feature).
    assert_eq!(run.episode_logs, logs);
    assert_eq!(run.configs.len(), 2);
    let trades: usize = logs.iter().map(|l| l.episode_result.as_ref().unwrap().trade_history.trades.len()).sum();
    assert_eq!(run.trade_history.trades.len(), trades);
    for log in &run.episode_logs {
        let m = evaluate_log(log, &market).unwrap();
        assert_eq!(m.decision_points, log.decision_point_logs.len());
    }
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn trade_run_prints_metrics_and_writes_the_folder() {
    let root = temp_root("cli");
    let mut args = TradeRunArgs::new("momentum", &["AAPL", "MSFT"], "2012-06-01", "2012-12-31");
    args.out = root.clone();
    let out = trade_run(args.clone()).unwrap();
    for needle in [
        "episode momentum-AAPL-MSFT-2012-06-01-2012-12-31 (agent momentum)",
        "2012-06-01 to 2012-12-31, 146 trading days",
        "total return",
        "sharpe",
        "max drawdown",
        "buy & hold",
        "rejected decisions: 0",
    ] {
        assert!(out.contains(needle), "missing {needle:?} in\n{out}");
    }
    let run = read_run(&root, "momentum-AAPL-MSFT-2012-06-01-2012-12-31").unwrap();
    assert_eq!(run.configs[0].initial_cash, 100_000.0);
    assert_eq!(run.configs[0].agent, Some(AgentSpec::Momentum { lookback: 10 }));
    // A second run gets a fresh folder.
    let again = trade_run(args).unwrap();
    assert!(again.contains("momentum-AAPL-MSFT-2012-06-01-2012-12-31-2"), "{again}");
    std::fs::remove_dir_all(&root).unwrap();
}
