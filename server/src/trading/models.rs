//! The data models of seed 003, with the JSON shapes Pydantic would emit for them.
//!
//! Field names are the seed's, snake_case. Optional fields of the seed (`interval_summary`,
//! `steps_remaining`, the version fields, the Case metadata) are written as `null` when unset, as
//! Pydantic's `model_dump` does, and may be missing on input. Unknown fields are rejected so a typo
//! in a hand-written file or a tool call is reported instead of silently ignored.
//!
//! Extensions beyond the seed are few and marked: [`EpisodeConfig`] carries optional run settings
//! (window, decision interval, lookback, agent parameters) that are left out of the JSON when unset,
//! so a config holding only the seed's four fields reads and writes exactly as the seed has it.
//! [`ExecutedTrade`] names its fill (ticker, side, quantity, price, date, case) besides the seed's
//! `order_index`.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use simtree_shared::trading::AgentSpec;
pub use simtree_shared::trading::{CaseDataItem, CaseDataKind, ExecutedTrade, PortfolioSnapshot, Side};

// ---------------------------------------------------------------------------------------------
// case.py — Case & market data
// ---------------------------------------------------------------------------------------------

/// One day's OHLCV bar; `timestamp` is the trading day, `YYYY-MM-DD`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PricePoint {
    pub timestamp: String,
    open: f64,
    high: f64,
    low: f64,
    pub(crate) close: f64,
    pub(crate) volume: u64,
}

impl PricePoint {
    /// The bar of one day.
    pub(crate) fn daily(date: &str, open: f64, high: f64, low: f64, close: f64, volume: u64) -> PricePoint {
        PricePoint { timestamp: date.to_owned(), open, high, low, close, volume }
    }
}

/// Open/high/low/close/volume over the bars since the previous decision point (a lighter payload
/// than the daily bars).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct IntervalPriceSummary {
    pub(crate) open: f64,
    pub(crate) high: f64,
    pub(crate) low: f64,
    pub(crate) close: f64,
    pub(crate) volume: u64,
}

impl IntervalPriceSummary {
    /// The summary of a run of bars (oldest first); `None` for no bars.
    pub(crate) fn of(bars: &[PricePoint]) -> Option<Self> {
        let (first, last) = (bars.first()?, bars.last()?);
        Some(IntervalPriceSummary {
            open: first.open,
            high: bars.iter().map(|b| b.high).fold(f64::MIN, f64::max),
            low: bars.iter().map(|b| b.low).fold(f64::MAX, f64::min),
            close: last.close,
            volume: bars.iter().map(|b| b.volume).sum(),
        })
    }
}

/// Per-ticker market data in a Case.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StockData {
    /// The close of the cutoff day; orders execute at this price.
    pub current_price: f64,
    /// The most recent bars up to and including the cutoff day, oldest first.
    pub daily_bars: Vec<PricePoint>,
    #[serde(default)]
    pub(crate) interval_summary: Option<IntervalPriceSummary>,
}

/// The information items of a Case (any number, possibly none).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaseData {
    #[serde(default)]
    pub items: Vec<CaseDataItem>,
}

/// Everything the agent decides on at one decision point.
///
/// `decision_point_idx` and `information_cutoff_timestamp` are metadata for the simulation and the
/// audit; [`Case::for_agent`] leaves them out of what the agent sees.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// `{episode_id}:{decision_point_idx}`; required.
    pub case_id: String,
    /// The tradable universe: an order for any other ticker rejects the decision.
    pub(crate) tickers: Vec<String>,
    #[serde(default)]
    pub case_data: CaseData,
    pub stock_data: BTreeMap<String, StockData>,
    pub(crate) portfolio: PortfolioSnapshot,
    #[serde(default)]
    pub(crate) decision_point_idx: Option<u32>,
    /// The last trading day whose data the case may hold (`YYYY-MM-DD`).
    #[serde(default)]
    pub information_cutoff_timestamp: Option<String>,
}

/// The agent-facing payload of a [`Case`]: everything but the metadata.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct AgentCase<'a> {
    case_id: &'a str,
    tickers: &'a [String],
    case_data: &'a CaseData,
    stock_data: &'a BTreeMap<String, StockData>,
    portfolio: &'a PortfolioSnapshot,
}

impl Case {
    /// What the agent is shown (the seed's `case.for_agent()`): no decision index, no cutoff.
    pub(crate) fn for_agent(&self) -> AgentCase<'_> {
        AgentCase {
            case_id: &self.case_id,
            tickers: &self.tickers,
            case_data: &self.case_data,
            stock_data: &self.stock_data,
            portfolio: &self.portfolio,
        }
    }

    /// The execution price of `ticker` (its `current_price`), when the case has one.
    pub(crate) fn price(&self, ticker: &str) -> Option<f64> {
        self.stock_data.get(ticker).map(|s| s.current_price)
    }
}

// ---------------------------------------------------------------------------------------------
// portfolio.py
// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// decision.py — agent output & execution
// ---------------------------------------------------------------------------------------------

/// One order. `quantity` is a whole number of shares; zero or negative values parse (so the
/// rejection can name them) and are refused by execution.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Order {
    pub(crate) ticker: String,
    pub(crate) side: Side,
    #[serde(deserialize_with = "whole_number")]
    pub(crate) quantity: i64,
}

impl Order {
    pub(crate) fn new(ticker: impl Into<String>, side: Side, quantity: i64) -> Self {
        Order { ticker: ticker.into(), side, quantity }
    }
}

/// The agent's output: orders to execute together; no orders = hold.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Decision {
    #[serde(default)]
    pub(crate) orders: Vec<Order>,
}

impl Decision {
    pub(crate) fn hold() -> Self {
        Decision::default()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DecisionStatus {
    Accepted,
    Rejected,
}

/// The result of `submit_decision`: all orders executed (`accepted`) or none (`rejected`, with the
/// reason in `message`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionResult {
    pub status: DecisionStatus,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub(crate) executed_trades: Vec<ExecutedTrade>,
}

impl DecisionResult {
    pub(crate) fn rejected(message: impl Into<String>) -> Self {
        DecisionResult { status: DecisionStatus::Rejected, message: message.into(), executed_trades: Vec::new() }
    }

    pub fn is_accepted(&self) -> bool {
        self.status == DecisionStatus::Accepted
    }
}

// ---------------------------------------------------------------------------------------------
// episode.py
// ---------------------------------------------------------------------------------------------

/// Episode parameters. The seed's fields come first; the rest are this project's optional run
/// settings, omitted from the JSON when unset (the episode fills them in when it starts, so a
/// stored config says exactly what ran).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EpisodeConfig {
    pub episode_id: String,
    pub(crate) agent_id: String,
    pub tickers: Vec<String>,
    pub initial_cash: f64,
    /// First trading day of the window (`YYYY-MM-DD`, inclusive; default: the data's first day).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_date: Option<String>,
    /// Last day of the window (inclusive; default: the data's last day).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_date: Option<String>,
    /// Trading days between decision points (default 1: every day).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision_interval: Option<u32>,
    /// Daily bars per ticker in each Case (default 20).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) lookback_days: Option<u32>,
    /// The agent and its parameters (default: the kind named by `agent_id`, default parameters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentSpec>,
    /// An uploaded market dataset to trade on (`GET /api/datasets`; default: the shipped data).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) dataset: Option<String>,
}

impl EpisodeConfig {
    /// A config with only the seed's fields set.
    pub fn new(
        episode_id: impl Into<String>,
        agent_id: impl Into<String>,
        tickers: Vec<String>,
        initial_cash: f64,
    ) -> Self {
        EpisodeConfig {
            episode_id: episode_id.into(),
            agent_id: agent_id.into(),
            tickers,
            initial_cash,
            start_date: None,
            end_date: None,
            decision_interval: None,
            lookback_days: None,
            agent: None,
            dataset: None,
        }
    }
}

/// Every fill of an episode, in execution order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TradeHistory {
    #[serde(default)]
    pub trades: Vec<ExecutedTrade>,
}

/// The final outcome of an episode.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EpisodeResult {
    pub trade_history: TradeHistory,
    pub(crate) final_portfolio: PortfolioSnapshot,
}

// ---------------------------------------------------------------------------------------------
// agents.py
// ---------------------------------------------------------------------------------------------

/// What an agent is invoked with at one decision point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AgentInvocation {
    pub(crate) case: Case,
    pub(crate) episode_id: String,
    pub(crate) agent_id: String,
    /// Decision points left after this one.
    #[serde(default)]
    pub(crate) steps_remaining: Option<u32>,
}

/// The decision parsed from an agent's output.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentInvocationResult {
    decision: Decision,
}

// ---------------------------------------------------------------------------------------------
// experiment.py — logging & storage
// ---------------------------------------------------------------------------------------------

/// The audit of one decision point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionPointLog {
    pub(crate) case_id: String,
    pub(crate) decision_point_idx: u32,
    /// The agent's raw output (its text and tool calls), for debugging.
    #[serde(default)]
    pub agent_output: Value,
    /// The decision taken from the last `submit_decision` call; `null` when its arguments were
    /// not a valid Decision.
    #[serde(default)]
    pub extracted_decision: Option<Decision>,
    pub execution_result: DecisionResult,
}

/// The audit of a whole episode.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EpisodeLog {
    pub(crate) config: EpisodeConfig,
    #[serde(default)]
    pub decision_point_logs: Vec<DecisionPointLog>,
    /// `null` until the episode has run its last decision point.
    #[serde(default)]
    pub episode_result: Option<EpisodeResult>,
}

/// The run-level log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimulationLog {
    pub(crate) run_id: String,
    #[serde(default)]
    pub(crate) episode_logs: Vec<EpisodeLog>,
    #[serde(default)]
    pub(crate) errors: Vec<String>,
    #[serde(default)]
    pub(crate) simulation_version: Option<String>,
    #[serde(default)]
    pub(crate) agent_version: Option<String>,
    #[serde(default)]
    pub(crate) evaluation_version: Option<String>,
}

/// Reads a whole number that may come as `10` or `10.0` (models often write the latter, and
/// Pydantic accepts it for an `int`), refusing fractions and anything else.
fn whole_number<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    use serde::de::Error;
    match Value::deserialize(d)? {
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                return Ok(i);
            }
            match n.as_f64() {
                Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(f as i64),
                _ => Err(D::Error::custom(format!("expected a whole number of shares, got {n}"))),
            }
        }
        other => Err(D::Error::custom(format!("expected a whole number of shares, got {other}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::DeserializeOwned;
    use serde_json::json;

    /// Parses hand-written JSON into `T` and checks it writes back to the same JSON value.
    fn round_trip<T: Serialize + DeserializeOwned + std::fmt::Debug + PartialEq>(v: Value) -> T {
        let parsed: T = serde_json::from_value(v.clone()).expect("parses");
        assert_eq!(serde_json::to_value(&parsed).unwrap(), v, "writes back the same JSON");
        let again: T = serde_json::from_value(serde_json::to_value(&parsed).unwrap()).unwrap();
        assert_eq!(again, parsed);
        parsed
    }

    fn bar(day: &str, close: f64) -> Value {
        json!({"timestamp": day, "open": close - 1.0, "high": close + 2.0, "low": close - 2.0,
               "close": close, "volume": 1000})
    }

    fn case_json() -> Value {
        json!({
            "case_id": "ep1:3",
            "tickers": ["AAPL", "MSFT"],
            "case_data": {"items": [
                {"kind": "earnings", "content": "2012-04-24 AAPL: results published"},
                {"kind": "news", "content": "a headline"},
                {"kind": "other", "content": "a note"}
            ]},
            "stock_data": {
                "AAPL": {"current_price": 600.5,
                         "daily_bars": [bar("2012-04-23", 571.7), bar("2012-04-24", 600.5)],
                         "interval_summary": {"open": 570.7, "high": 602.5, "low": 569.7,
                                              "close": 600.5, "volume": 2000}},
                "MSFT": {"current_price": 32.0, "daily_bars": [bar("2012-04-24", 32.0)],
                         "interval_summary": null}
            },
            "portfolio": {"cash": 1000.25, "positions": {"AAPL": 3}},
            "decision_point_idx": 3,
            "information_cutoff_timestamp": "2012-04-24"
        })
    }

    fn trade_json(i: usize, side: &str) -> Value {
        json!({"order_index": i, "ticker": "AAPL", "side": side, "quantity": 2, "price": 600.5,
               "timestamp": "2012-04-24", "case_id": "ep1:3"})
    }

    #[test]
    fn case_round_trips_and_for_agent_drops_the_metadata() {
        let case: Case = round_trip(case_json());
        assert_eq!(case.decision_point_idx, Some(3));
        assert_eq!(case.case_data.items[0].kind, CaseDataKind::Earnings);
        assert_eq!(case.price("AAPL"), Some(600.5));
        let agent = serde_json::to_value(case.for_agent()).unwrap();
        let mut expected = case_json();
        let obj = expected.as_object_mut().unwrap();
        obj.remove("decision_point_idx");
        obj.remove("information_cutoff_timestamp");
        assert_eq!(agent, expected);
    }

    #[test]
    fn case_optional_metadata_may_be_missing_but_case_id_may_not() {
        let mut v = case_json();
        v.as_object_mut().unwrap().remove("decision_point_idx");
        v.as_object_mut().unwrap().remove("information_cutoff_timestamp");
        let case: Case = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(case.decision_point_idx, None);
        v.as_object_mut().unwrap().remove("case_id");
        let err = serde_json::from_value::<Case>(v).unwrap_err().to_string();
        assert!(err.contains("missing field `case_id`"), "{err}");
    }

    #[test]
    fn small_models_round_trip() {
        round_trip::<PricePoint>(bar("2012-03-01", 10.0));
        round_trip::<CaseDataItem>(json!({"kind": "news", "content": "x"}));
        round_trip::<PortfolioSnapshot>(json!({"cash": 5.5, "positions": {}}));
        let d: Decision = round_trip(json!({"orders": [
            {"ticker": "AAPL", "side": "sell", "quantity": 1},
            {"ticker": "MSFT", "side": "buy", "quantity": 10}]}));
        assert_eq!(d.orders[0].side, Side::Sell);
        round_trip::<Decision>(json!({"orders": []}));
        round_trip::<ExecutedTrade>(trade_json(0, "buy"));
        let r: DecisionResult = round_trip(json!({"status": "rejected",
            "message": "order 0: ticker XYZ not in case universe (AAPL, MSFT)",
            "executed_trades": []}));
        assert!(!r.is_accepted());
        round_trip::<DecisionResult>(
            json!({"status": "accepted", "message": "ok", "executed_trades": [trade_json(1, "sell")]}),
        );
        round_trip::<AgentInvocationResult>(json!({"decision": {"orders": []}}));
    }

    #[test]
    fn decision_quantities_accept_integral_floats_and_refuse_fractions() {
        let d: Decision =
            serde_json::from_value(json!({"orders": [{"ticker": "A", "side": "buy", "quantity": 10.0}]})).unwrap();
        assert_eq!(d.orders[0].quantity, 10);
        let neg: Decision =
            serde_json::from_value(json!({"orders": [{"ticker": "A", "side": "buy", "quantity": -3}]})).unwrap();
        assert_eq!(neg.orders[0].quantity, -3, "negative parses; execution rejects it");
        for bad in [json!(1.5), json!("10"), json!(null)] {
            let err = serde_json::from_value::<Decision>(
                json!({"orders": [{"ticker": "A", "side": "buy", "quantity": bad}]}),
            )
            .unwrap_err()
            .to_string();
            assert!(err.contains("whole number"), "{err}");
        }
        let err =
            serde_json::from_value::<Decision>(json!({"orders": [{"ticker": "A", "side": "hold", "quantity": 1}]}))
                .unwrap_err()
                .to_string();
        assert!(err.contains("unknown variant `hold`"), "{err}");
    }

    #[test]
    fn episode_models_round_trip() {
        let cfg: EpisodeConfig = round_trip(json!({"episode_id": "ep1", "agent_id": "momentum",
            "tickers": ["AAPL", "MSFT"], "initial_cash": 100000.0}));
        assert_eq!(cfg, EpisodeConfig::new("ep1", "momentum", vec!["AAPL".into(), "MSFT".into()], 1e5));
        let full: EpisodeConfig = round_trip(json!({"episode_id": "ep1", "agent_id": "momentum",
            "tickers": ["AAPL"], "initial_cash": 5.0, "start_date": "2012-06-01",
            "end_date": "2012-12-31", "decision_interval": 5, "lookback_days": 20,
            "agent": {"kind": "momentum", "lookback": 10}}));
        assert_eq!(full.decision_interval, Some(5));
        let history = json!({"trades": [trade_json(0, "sell"), trade_json(1, "buy")]});
        round_trip::<TradeHistory>(history.clone());
        let result = json!({"trade_history": history,
                            "final_portfolio": {"cash": 1.0, "positions": {"AAPL": 2}}});
        round_trip::<EpisodeResult>(result.clone());
        round_trip::<AgentInvocation>(json!({"case": case_json(), "episode_id": "ep1",
            "agent_id": "llm", "steps_remaining": 4}));
        let inv: AgentInvocation =
            serde_json::from_value(json!({"case": case_json(), "episode_id": "ep1", "agent_id": "llm"})).unwrap();
        assert_eq!(inv.steps_remaining, None);

        let dp = json!({"case_id": "ep1:3", "decision_point_idx": 3,
            "agent_output": {"text": "thinking", "tool_calls": []},
            "extracted_decision": {"orders": []},
            "execution_result": {"status": "accepted", "message": "hold", "executed_trades": []}});
        let invalid = json!({"case_id": "ep1:4", "decision_point_idx": 4, "agent_output": null,
            "extracted_decision": null,
            "execution_result": {"status": "rejected", "message": "bad", "executed_trades": []}});
        round_trip::<DecisionPointLog>(dp.clone());
        let log = json!({"config": {"episode_id": "ep1", "agent_id": "momentum",
            "tickers": ["AAPL"], "initial_cash": 10.0},
            "decision_point_logs": [dp, invalid], "episode_result": result});
        round_trip::<EpisodeLog>(log.clone());
        let sim: SimulationLog = round_trip(json!({"run_id": "r1", "episode_logs": [log],
            "errors": ["ep2: no data"], "simulation_version": "0.1.0", "agent_version": null,
            "evaluation_version": null}));
        assert_eq!(sim.episode_logs[0].decision_point_logs.len(), 2);
        let bare: SimulationLog = serde_json::from_value(json!({"run_id": "r"})).unwrap();
        assert!(bare.simulation_version.is_none() && bare.errors.is_empty());
    }

    #[test]
    fn cash_amounts_read_back_exactly() {
        // Without serde_json's `float_roundtrip` this reads back as …96915.
        let p: PortfolioSnapshot = serde_json::from_str(r#"{"cash": 108.14999999996917, "positions": {}}"#).unwrap();
        assert_eq!(p.cash, 108.149_999_999_969_17);
        assert_eq!(serde_json::to_string(&p).unwrap(), r#"{"cash":108.14999999996917,"positions":{}}"#);
    }

    #[test]
    fn unknown_fields_are_named() {
        let err = serde_json::from_value::<Order>(json!({"ticker": "A", "side": "buy", "quantity": 1, "qty": 2}))
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `qty`"), "{err}");
    }

    #[test]
    fn interval_summary_spans_its_bars() {
        let bars: Vec<PricePoint> = [bar("d1", 10.0), bar("d2", 14.0), bar("d3", 12.0)]
            .into_iter()
            .map(|v| serde_json::from_value(v).unwrap())
            .collect();
        let s = IntervalPriceSummary::of(&bars).unwrap();
        assert_eq!((s.open, s.high, s.low, s.close, s.volume), (9.0, 16.0, 8.0, 12.0, 3000));
        assert!(IntervalPriceSummary::of(&[]).is_none());
    }
}
