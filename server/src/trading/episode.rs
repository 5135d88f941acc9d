//! The episode: the seed's simulation-invokes-agent loop as a cloneable state stepped one
//! decision point at a time.
//!
//! [`TradingEpisode::step`] is one turn: build the Case for the next decision point with the
//! current portfolio and the id `{episode_id}:{idx}` → invoke the agent → extract its decision →
//! `execute_decision` → hand the DecisionResult back to the agent as its tool result → log. A
//! failing model call leaves the state untouched. [`TradingEpisode::apply_op`] applies the trading
//! branch ops ([`TradingOp`]) between steps.
//!
//! Cloning is cheap at any length: the calendar is shared (`Arc`), the growing parts (decision
//! logs, trades, holdings) are [`AppendLog`]s, and the LLM agent's memory is a few `Arc`ed
//! exchanges (capped at its `history` setting). The market data is shared too and is not serialised: an episode read back
//! from JSON must get it again with [`TradingEpisode::attach_market`].

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::agents::{self, AgentSpec, Exchange, ModelReply, ToolModel};
use super::data::{CaseWindow, DateError, MarketData, Schedule, build_case, check_date};
use super::execution::execute_decision;
use super::metrics::{self, EpisodeMetrics, Holding};
use super::models::{
    AgentInvocation, Case, CaseDataItem, DecisionPointLog, DecisionResult, EpisodeConfig, EpisodeLog, EpisodeResult,
    ExecutedTrade, PortfolioSnapshot, TradeHistory,
};
use super::{AppendLog, TradingError};
use crate::llm::chat::ChatRequest;
use simtree_shared::trading::AgentSpecError;
pub use simtree_shared::trading::TradingView;

/// Daily bars per ticker in a Case unless the config says otherwise.
pub(crate) const DEFAULT_LOOKBACK: u32 = 20;

/// A branch op on a trading episode (applied between decision points): the trading ops of
/// `simtree_shared::Op`, read and checked by their types there.
#[derive(Clone, Debug, PartialEq)]
pub enum TradingOp {
    /// Sets the cash and/or the share count of some tickers (0 removes a position). No trade is
    /// recorded; metrics treat the change as a deposit or withdrawal, not as a return.
    PortfolioPatch { cash: Option<f64>, positions: std::collections::BTreeMap<String, i64> },
    /// Adds an information item to the next Case (after the curated ones).
    CaseDataInject { item: CaseDataItem },
    /// Replaces the agent (its memory starts empty).
    AgentSwap { agent: AgentSpec },
    /// Replaces the LLM agent's system prompt (the agent must be `llm`).
    AgentPromptReplace { system_prompt: String },
}

/// Why a branch op was refused ([`TradingEpisode::apply_op`]); the message names the op's field.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum OpError {
    #[error("portfolio_patch: give cash and/or positions")]
    EmptyPatch,
    #[error("portfolio_patch.cash must be a non-negative amount, got {0}")]
    Cash(f64),
    #[error("portfolio_patch.positions.{ticker}: not in the episode's tickers ({})", .tickers.join(", "))]
    UnknownTicker { ticker: String, tickers: Vec<String> },
    #[error("portfolio_patch.positions.{ticker}: shares must be 0 or more, got {shares}")]
    NegativeShares { ticker: String, shares: i64 },
    #[error("case_data_inject: the episode is finished; no Case is left to show it")]
    Finished,
    #[error("case_data_inject.item.content must not be empty")]
    EmptyContent,
    /// The new agent's settings are out of range (the agent's own check says which).
    #[error("agent_swap: {0}")]
    Agent(AgentSpecError),
    /// A prompt for an agent kind that has none (`buy_and_hold`, …).
    #[error("agent_prompt_replace: the agent is {0}, which has no prompt (use agent_swap)")]
    NoPrompt(&'static str),
    #[error("agent_prompt_replace.system_prompt must not be empty")]
    EmptyPrompt,
}

/// Why an episode read from outside (an import) cannot run on its market
/// ([`TradingEpisode::check_consistent`]).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ConsistencyError {
    #[error("the episode has no trading days")]
    NoDays,
    #[error("decision point day index {index} is beyond the {days} trading days")]
    PointBeyondDays { index: usize, days: usize },
    #[error("decision points must be in increasing day order")]
    PointsOutOfOrder,
    #[error("next decision point {next} is beyond the {points} decision points")]
    NextBeyondPoints { next: usize, points: usize },
    #[error("unknown ticker '{0}'")]
    UnknownTicker(String),
    #[error("trading days must be YYYY-MM-DD dates")]
    Day(#[source] DateError),
    /// The agent's settings are out of range (the agent's own check says which).
    #[error(transparent)]
    Agent(AgentSpecError),
    #[error("portfolio cash must be a non-negative amount, got {0}")]
    Cash(f64),
}

/// What one decision point produced.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepReport {
    /// The Case as built (with its metadata; the agent saw `case.for_agent()`).
    pub case: Case,
    pub(crate) log: DecisionPointLog,
    /// The portfolio after execution and its value at the cutoff day's close.
    pub(crate) portfolio: PortfolioSnapshot,
    pub(crate) value: f64,
    /// No decision point is left.
    pub(crate) done: bool,
}

/// One trading episode's state. See the module docs.
#[derive(Clone, Serialize, Deserialize)]
pub struct TradingEpisode {
    /// The starting configuration with every optional setting filled in.
    config: EpisodeConfig,
    agent: AgentSpec,
    days: Arc<[String]>,
    points: Arc<[usize]>,
    next: usize,
    portfolio: PortfolioSnapshot,
    pending: Vec<CaseDataItem>,
    memory: Vec<Arc<Exchange>>,
    holdings: AppendLog<Holding>,
    trades: AppendLog<ExecutedTrade>,
    logs: AppendLog<DecisionPointLog>,
    rejected: usize,
    #[serde(skip)]
    market: Arc<MarketData>,
}

impl std::fmt::Debug for TradingEpisode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TradingEpisode")
            .field("episode_id", &self.config.episode_id)
            .field("agent", &self.agent)
            .field("next", &self.next)
            .field("of", &self.points.len())
            .field("portfolio", &self.portfolio)
            .finish_non_exhaustive()
    }
}

impl PartialEq for TradingEpisode {
    /// Same state (the shared market data is not compared).
    fn eq(&self, o: &Self) -> bool {
        self.config == o.config
            && self.agent == o.agent
            && self.days == o.days
            && self.points == o.points
            && self.next == o.next
            && self.portfolio == o.portfolio
            && self.pending == o.pending
            && self.memory == o.memory
            && self.holdings == o.holdings
            && self.trades == o.trades
            && self.logs == o.logs
            && self.rejected == o.rejected
    }
}

/// Fills in and checks a config's settings against `market`; errors name the field.
pub(crate) fn resolve_config(market: &MarketData, config: &EpisodeConfig) -> Result<EpisodeConfig, TradingError> {
    let bad = |m: String| TradingError::Config(m);
    let mut c = config.clone();
    if c.episode_id.trim().is_empty() {
        return Err(bad("episode_id must not be empty".into()));
    }
    if c.tickers.is_empty() {
        return Err(bad("tickers must name at least one ticker".into()));
    }
    for (i, t) in c.tickers.iter().enumerate() {
        if market.bars(t).is_none() {
            return Err(bad(format!(
                "tickers[{i}]: unknown ticker '{t}' (market data has {})",
                market.tickers().join(", ")
            )));
        }
        if c.tickers[..i].contains(t) {
            return Err(bad(format!("tickers[{i}]: '{t}' is listed twice")));
        }
    }
    if !(c.initial_cash.is_finite() && c.initial_cash > 0.0) {
        return Err(bad(format!("initial_cash must be a positive amount, got {}", c.initial_cash)));
    }
    let agent = match &c.agent {
        Some(a) => a.clone(),
        None => AgentSpec::from_kind(&c.agent_id).map_err(|m| bad(format!("agent_id: {m}")))?,
    };
    agent.validate().map_err(|e| bad(e.to_string()))?;
    c.agent = Some(agent);
    let all_days = market.trading_days(&c.tickers, None, None);
    let (Some(first), Some(last)) = (all_days.first(), all_days.last()) else {
        return Err(bad(format!("tickers {} share no trading day", c.tickers.join(", "))));
    };
    for (field, value) in [("start_date", &c.start_date), ("end_date", &c.end_date)] {
        if let Some(v) = value {
            check_date(v).map_err(|m| bad(format!("{field}: {m}")))?;
        }
    }
    let start = c.start_date.get_or_insert_with(|| first.clone()).clone();
    let end = c.end_date.get_or_insert_with(|| last.clone()).clone();
    if start > end {
        return Err(bad(format!("start_date {start} is after end_date {end}")));
    }
    if *c.decision_interval.get_or_insert(1) == 0 {
        return Err(bad("decision_interval must be at least 1".into()));
    }
    if *c.lookback_days.get_or_insert(DEFAULT_LOOKBACK) == 0 {
        return Err(bad("lookback_days must be at least 1".into()));
    }
    Ok(c)
}

impl TradingEpisode {
    /// A fresh episode: all cash, no decision point done yet.
    pub fn new(market: Arc<MarketData>, config: EpisodeConfig) -> Result<Self, TradingError> {
        let config = resolve_config(&market, &config)?;
        let schedule = Schedule::new(
            &market,
            &config.tickers,
            config.start_date.as_deref().unwrap_or_default(),
            config.end_date.as_deref().unwrap_or_default(),
            config.decision_interval.unwrap_or(1) as usize,
        )?;
        let portfolio = PortfolioSnapshot::cash_only(config.initial_cash);
        let mut holdings = AppendLog::new();
        holdings.push(Holding { date: schedule.days[0].clone(), portfolio: portfolio.clone() });
        Ok(TradingEpisode {
            agent: config.agent.clone().expect("resolved"),
            config,
            days: schedule.days.into(),
            points: schedule.points.into(),
            next: 0,
            portfolio,
            pending: Vec::new(),
            memory: Vec::new(),
            holdings,
            trades: AppendLog::new(),
            logs: AppendLog::new(),
            rejected: 0,
            market,
        })
    }

    /// Checks an episode read from an untrusted export against the market it will run on: every
    /// index in range, the schedule increasing, the agent and the portfolio valid. An episode
    /// built by [`TradingEpisode::new`] always passes.
    pub(crate) fn check_consistent(&self) -> Result<(), ConsistencyError> {
        if self.days.is_empty() {
            return Err(ConsistencyError::NoDays);
        }
        if let Some(&bad) = self.points.iter().find(|&&i| i >= self.days.len()) {
            return Err(ConsistencyError::PointBeyondDays { index: bad, days: self.days.len() });
        }
        if !self.points.windows(2).all(|w| w[0] < w[1]) {
            return Err(ConsistencyError::PointsOutOfOrder);
        }
        if self.next > self.points.len() {
            return Err(ConsistencyError::NextBeyondPoints { next: self.next, points: self.points.len() });
        }
        if let Some(t) = self.config.tickers.iter().find(|t| self.market.bars(t).is_none()) {
            return Err(ConsistencyError::UnknownTicker(t.clone()));
        }
        if let Some(e) = self.days.iter().find_map(|d| check_date(d).err()) {
            return Err(ConsistencyError::Day(e));
        }
        self.agent.validate().map_err(ConsistencyError::Agent)?;
        let cash = self.portfolio.cash;
        if !(cash.is_finite() && cash >= 0.0) {
            return Err(ConsistencyError::Cash(cash));
        }
        Ok(())
    }

    /// Re-attaches the market data after deserialisation (it is shared, not serialised).
    pub(crate) fn attach_market(&mut self, market: Arc<MarketData>) {
        self.market = market;
    }

    pub fn market(&self) -> &Arc<MarketData> {
        &self.market
    }

    pub fn config(&self) -> &EpisodeConfig {
        &self.config
    }

    pub(crate) fn agent(&self) -> &AgentSpec {
        &self.agent
    }

    pub fn portfolio(&self) -> &PortfolioSnapshot {
        &self.portfolio
    }

    /// Decision points of the whole episode.
    pub fn num_decision_points(&self) -> usize {
        self.points.len()
    }

    /// Decision points done so far (the index of the next one).
    pub(crate) fn decision_points_done(&self) -> usize {
        self.next
    }

    pub fn is_done(&self) -> bool {
        self.next >= self.points.len()
    }

    /// The LLM agent's remembered exchanges (empty for rule-based agents).
    pub fn memory(&self) -> &[Arc<Exchange>] {
        &self.memory
    }

    /// The request an interview of the agent sends now (see [`agents::interview_request`]);
    /// `None` for a rule-based agent.
    pub(crate) fn interview(&self, question: &str) -> Option<ChatRequest> {
        agents::interview_request(&self.agent, &self.memory, question)
    }

    /// Runs the next decision point. On a model error nothing changes.
    pub(crate) async fn step(&mut self, model: &dyn ToolModel) -> Result<StepReport, TradingError> {
        if self.is_done() {
            return Err(TradingError::Finished {
                episode_id: self.config.episode_id.clone(),
                points: self.points.len(),
            });
        }
        if self.market.tickers().is_empty() {
            return Err(TradingError::NoMarket(self.config.episode_id.clone()));
        }
        let idx = self.next;
        let episode_id = self.config.episode_id.clone();
        let case_id = format!("{episode_id}:{idx}");
        let cutoff = self.days[self.points[idx]].clone();
        let window = CaseWindow {
            cutoff: &cutoff,
            previous_cutoff: idx.checked_sub(1).map(|p| self.days[self.points[p]].as_str()),
            lookback: self.config.lookback_days.unwrap_or(DEFAULT_LOOKBACK) as usize,
        };
        let template = self.market.case_template(&self.config.tickers, window)?;
        let mut case = build_case(template, &self.portfolio, case_id.clone(), idx as u32);
        case.case_data.items.extend(self.pending.iter().cloned());
        let invocation = AgentInvocation {
            case,
            episode_id,
            agent_id: self.config.agent_id.clone(),
            steps_remaining: Some((self.points.len() - idx - 1) as u32),
        };
        let reply = agents::invoke(&self.agent, &self.memory, &invocation, model)
            .await
            .map_err(|source| TradingError::Model { agent: self.agent.kind().to_owned(), source })?;

        // From here on nothing can fail: the state changes all at once.
        let case = invocation.case;
        let extracted = agents::extract_decision(&reply.tool_calls);
        let (result, portfolio) = match &extracted.decision {
            Ok(decision) => execute_decision(decision, &case, &self.portfolio),
            Err(why) => (
                DecisionResult::rejected(format!(
                    "rejected, nothing executed: invalid submit_decision arguments: {why}"
                )),
                self.portfolio.clone(),
            ),
        };
        if !result.is_accepted() {
            self.rejected += 1;
        }
        for t in &result.executed_trades {
            self.trades.push(t.clone());
        }
        self.portfolio = portfolio;
        self.holdings.push(Holding { date: cutoff.clone(), portfolio: self.portfolio.clone() });
        if let AgentSpec::Llm { history, .. } = &self.agent {
            self.memory.push(Arc::new(Exchange {
                case_id: case_id.clone(),
                results: agents::tool_results(&reply, extracted.call, &result),
                reply: reply.clone(),
            }));
            let excess = self.memory.len().saturating_sub(*history);
            self.memory.drain(..excess);
        }
        self.pending.clear();
        let log = DecisionPointLog {
            case_id,
            decision_point_idx: idx as u32,
            agent_output: agent_output(&reply),
            extracted_decision: extracted.decision.ok(),
            execution_result: result,
        };
        self.logs.push(log.clone());
        self.next += 1;
        let value = self.portfolio.value(|t| case.price(t));
        Ok(StepReport { case, log, portfolio: self.portfolio.clone(), value, done: self.is_done() })
    }

    /// Runs up to `max_steps` decision points (fewer if the episode ends first).
    pub(crate) async fn run(
        &mut self,
        max_steps: usize,
        model: &dyn ToolModel,
    ) -> Result<Vec<StepReport>, TradingError> {
        let mut reports = Vec::new();
        while reports.len() < max_steps && !self.is_done() {
            reports.push(self.step(model).await?);
            // Let other tasks run (and a cancellation land) between decision points.
            tokio::task::yield_now().await;
        }
        Ok(reports)
    }

    /// [`TradingEpisode::run`] on a private current-thread runtime (CLI and tests).
    pub fn run_blocking(&mut self, max_steps: usize, model: &dyn ToolModel) -> Result<Vec<StepReport>, TradingError> {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .map_err(|e| TradingError::Config(format!("cannot start a runtime: {e}")))?
            .block_on(self.run(max_steps, model))
    }

    /// Applies one branch op; on error nothing changes and the message names the field.
    pub fn apply_op(&mut self, op: &TradingOp) -> Result<(), OpError> {
        match op {
            TradingOp::PortfolioPatch { cash, positions } => {
                if cash.is_none() && positions.is_empty() {
                    return Err(OpError::EmptyPatch);
                }
                if let Some(c) = cash
                    && !(c.is_finite() && *c >= 0.0)
                {
                    return Err(OpError::Cash(*c));
                }
                for (t, &n) in positions {
                    if !self.config.tickers.contains(t) {
                        return Err(OpError::UnknownTicker { ticker: t.clone(), tickers: self.config.tickers.clone() });
                    }
                    if n < 0 {
                        return Err(OpError::NegativeShares { ticker: t.clone(), shares: n });
                    }
                }
                if let Some(c) = cash {
                    self.portfolio.cash = *c;
                }
                for (t, &n) in positions {
                    if n == 0 {
                        self.portfolio.positions.remove(t);
                    } else {
                        self.portfolio.positions.insert(t.clone(), n);
                    }
                }
                let date = self.current_date().unwrap_or(&self.days[0]).to_owned();
                self.holdings.push(Holding { date, portfolio: self.portfolio.clone() });
                Ok(())
            }
            TradingOp::CaseDataInject { item } => {
                if self.is_done() {
                    return Err(OpError::Finished);
                }
                if item.content.trim().is_empty() {
                    return Err(OpError::EmptyContent);
                }
                self.pending.push(item.clone());
                Ok(())
            }
            TradingOp::AgentSwap { agent } => {
                agent.validate().map_err(OpError::Agent)?;
                self.agent = agent.clone();
                self.memory.clear();
                Ok(())
            }
            TradingOp::AgentPromptReplace { system_prompt } => {
                let AgentSpec::Llm { system_prompt: p, .. } = &mut self.agent else {
                    return Err(OpError::NoPrompt(self.agent.kind()));
                };
                if system_prompt.trim().is_empty() {
                    return Err(OpError::EmptyPrompt);
                }
                *p = Some(system_prompt.clone());
                Ok(())
            }
        }
    }

    /// Cutoff of the last decision point done.
    fn current_date(&self) -> Option<&str> {
        self.next.checked_sub(1).map(|i| self.days[self.points[i]].as_str())
    }

    /// The trading days evaluated so far: up to the last decision point done, or the whole window
    /// once the episode is finished.
    fn evaluated_days(&self) -> &[String] {
        if self.is_done() {
            &self.days
        } else {
            match self.next.checked_sub(1) {
                Some(i) => &self.days[..=self.points[i]],
                None => &[],
            }
        }
    }

    pub fn metrics(&self) -> EpisodeMetrics {
        metrics::episode_metrics(
            &self.market,
            &self.config,
            self.evaluated_days(),
            &self.holdings.to_vec(),
            self.next,
            self.trades.len(),
            self.rejected,
        )
    }

    pub fn trade_history(&self) -> TradeHistory {
        TradeHistory { trades: self.trades.to_vec() }
    }

    pub(crate) fn decision_point_logs(&self) -> Vec<DecisionPointLog> {
        self.logs.to_vec()
    }

    /// The seed's EpisodeLog; `episode_result` is set once the episode is finished.
    pub fn episode_log(&self) -> EpisodeLog {
        EpisodeLog {
            config: self.config.clone(),
            decision_point_logs: self.decision_point_logs(),
            episode_result: self.is_done().then(|| EpisodeResult {
                trade_history: self.trade_history(),
                final_portfolio: self.portfolio.clone(),
            }),
        }
    }

    /// The state for the UI: portfolio, curves, trades and metrics.
    pub fn view(&self) -> TradingView {
        let days = self.evaluated_days();
        let holdings = self.holdings.to_vec();
        let curve = metrics::equity(&self.market, days, &holdings);
        let bench = days
            .first()
            .map(|d| {
                metrics::equity(
                    &self.market,
                    days,
                    &metrics::buy_and_hold_holdings(&self.market, &self.config.tickers, d, self.config.initial_cash),
                )
            })
            .unwrap_or_default();
        let value_day = self.current_date().unwrap_or(&self.days[0]);
        TradingView {
            episode_id: self.config.episode_id.clone(),
            agent_id: self.config.agent_id.clone(),
            agent: self.agent.clone(),
            tickers: self.config.tickers.clone(),
            decision_points: self.points.len(),
            next_decision_point: self.next,
            done: self.is_done(),
            current_date: self.current_date().map(str::to_owned),
            next_date: self.points.get(self.next).map(|&i| self.days[i].clone()),
            portfolio: self.portfolio.clone(),
            portfolio_value: self.portfolio.value(|t| self.market.close(t, value_day)),
            pending_case_data: self.pending.clone(),
            equity_curve: curve.points,
            buy_and_hold_curve: bench.points,
            trades: self.trades.to_vec(),
            metrics: self.metrics(),
        }
    }
}

fn agent_output(reply: &ModelReply) -> serde_json::Value {
    serde_json::to_value(reply).unwrap_or_default()
}

/// Runs a whole episode and returns it (the CLI's and the tests' one-liner).
pub(crate) fn run_episode(
    market: Arc<MarketData>,
    config: EpisodeConfig,
    model: &dyn ToolModel,
) -> Result<TradingEpisode, TradingError> {
    let mut episode = TradingEpisode::new(market, config)?;
    let n = episode.num_decision_points();
    episode.run_blocking(n, model)?;
    Ok(episode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::LlmError;
    use crate::llm::chat::{ChatRequest, ToolCall};
    use crate::trading::agents::{FnToolModel, MockToolModel, SUBMIT_DECISION};
    use crate::trading::data::tests::tiny_market;
    use crate::trading::models::{CaseDataKind, DecisionStatus, Order, Side};
    use serde_json::json;

    fn config(agent: &str) -> EpisodeConfig {
        EpisodeConfig::new("ep", agent, vec!["A".into(), "B".into()], 1000.0)
    }

    fn episode(agent: &str) -> TradingEpisode {
        TradingEpisode::new(Arc::new(tiny_market()), config(agent)).unwrap()
    }

    /// A model that answers with the given tool calls and records the requests it saw.
    type Seen = Arc<std::sync::Mutex<Vec<ChatRequest>>>;

    fn scripted(calls: Vec<Vec<ToolCall>>) -> (impl ToolModel, Seen) {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        let model = FnToolModel(move |req: &ChatRequest| {
            let mut seen = log.lock().unwrap();
            let i = seen.len();
            seen.push(req.clone());
            Ok(ModelReply { text: format!("reply {i}"), tool_calls: calls.get(i).cloned().unwrap_or_default() })
        });
        (model, seen)
    }

    fn submit(id: &str, orders: serde_json::Value) -> ToolCall {
        ToolCall { id: Some(id.into()), name: SUBMIT_DECISION.into(), arguments: json!({ "orders": orders }) }
    }

    #[test]
    fn new_fills_in_the_config_and_checks_it() {
        let e = episode("momentum");
        let c = e.config();
        assert_eq!(c.start_date.as_deref(), Some("2020-01-01"));
        assert_eq!(c.end_date.as_deref(), Some("2020-01-07"));
        assert_eq!((c.decision_interval, c.lookback_days), (Some(1), Some(DEFAULT_LOOKBACK)));
        assert_eq!(c.agent, Some(AgentSpec::Momentum { lookback: 10 }));
        assert_eq!(e.num_decision_points(), 4, "the days both tickers trade");

        let market = Arc::new(tiny_market());
        let err = |c: EpisodeConfig| TradingEpisode::new(market.clone(), c).unwrap_err().to_string();
        let mut c = config("momentum");
        c.tickers.push("Z".into());
        assert_eq!(err(c), "episode config: tickers[2]: unknown ticker 'Z' (market data has A, B)");
        assert!(err(config("oracle")).contains("agent_id: unknown agent 'oracle'"));
        let mut c = config("momentum");
        c.initial_cash = -1.0;
        assert!(err(c).contains("initial_cash must be a positive amount"));
        let mut c = config("momentum");
        c.start_date = Some("2020-01-08".into());
        assert!(err(c).contains("start_date 2020-01-08 is after end_date 2020-01-07"));
        let mut c = config("momentum");
        c.end_date = Some("2020-1-8".into());
        assert!(err(c).contains("end_date: '2020-1-8' is not a date"));
        let mut c = config("momentum");
        c.start_date = Some("2020-01-04".into());
        c.end_date = Some("2020-01-05".into());
        assert!(err(c).contains("no trading day of A, B between 2020-01-04 and 2020-01-05"));
        let mut c = config("momentum");
        c.decision_interval = Some(0);
        assert!(err(c).contains("decision_interval must be at least 1"));
    }

    #[test]
    fn the_loop_builds_cases_with_the_current_portfolio_and_ids() {
        let (model, seen) = scripted(vec![
            vec![submit("c0", json!([{"ticker": "A", "side": "buy", "quantity": 10}]))],
            vec![],
            vec![submit("c2", json!([{"ticker": "A", "side": "sell", "quantity": 50}]))],
            vec![
                submit("c3", json!([{"ticker": "A", "side": "sell", "quantity": 4}])),
                submit("c3b", json!([{"ticker": "B", "side": "buy", "quantity": 1}])),
            ],
        ]);
        let mut e = episode("llm");
        let reports = e.run_blocking(10, &model).unwrap();
        assert_eq!(reports.len(), 4);
        assert!(e.is_done());
        let ids: Vec<&str> = reports.iter().map(|r| r.case.case_id.as_str()).collect();
        assert_eq!(ids, ["ep:0", "ep:1", "ep:2", "ep:3"]);
        // Decision 0 bought 10 A at 10; the next Case shows it.
        assert_eq!(reports[1].case.portfolio.shares("A"), 10);
        assert_eq!(reports[1].case.portfolio.cash, 900.0);
        assert_eq!(reports[0].case.decision_point_idx, Some(0));
        // No call → accepted hold.
        assert_eq!(reports[1].log.extracted_decision, Some(Default::default()));
        assert!(reports[1].log.execution_result.is_accepted());
        // Selling 50 of 10 held → rejected with the rule.
        let r2 = &reports[2].log.execution_result;
        assert_eq!(r2.status, DecisionStatus::Rejected);
        assert!(r2.message.contains("sell A: 50 shares requested but only 10 held"), "{}", r2.message);
        // Two calls → the last (buy 1 B) only.
        assert_eq!(reports[3].log.extracted_decision.as_ref().unwrap().orders, vec![Order::new("B", Side::Buy, 1)]);
        assert_eq!(e.portfolio().shares("A"), 10);
        assert_eq!(e.portfolio().shares("B"), 1);
        // steps_remaining counts down to 0 in the prompt.
        let requests = seen.lock().unwrap();
        assert!(requests[0].messages.last().unwrap().content.contains("3 more decision points"));
        assert!(requests[3].messages.last().unwrap().content.contains("This is the last decision point."));
        // The DecisionResult of step 2 went back to the agent as the tool result of call c2.
        let tool_msg = requests[3]
            .messages
            .iter()
            .find(|m| m.tool_call_id() == Some("c2"))
            .expect("the rejected call's result is in the next prompt");
        let back: DecisionResult = serde_json::from_str(&tool_msg.content).unwrap();
        assert_eq!(&back, r2);
        // Steps after the end fail.
        let err = e.run_blocking(1, &model).map(|r| r.len()).unwrap();
        assert_eq!(err, 0);
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let err = rt.block_on(e.step(&model)).unwrap_err().to_string();
        assert_eq!(err, "episode ep is finished (4 decision points)");
        // The log and the metrics agree on what happened.
        let log = e.episode_log();
        assert_eq!(log.decision_point_logs.len(), 4);
        let result = log.episode_result.unwrap();
        assert_eq!(result.final_portfolio, *e.portfolio());
        assert_eq!(result.trade_history.trades.len(), 2);
        let m = e.metrics();
        assert_eq!((m.num_trades, m.rejected_decisions, m.decision_points), (2, 1, 4));
    }

    #[test]
    fn invalid_arguments_reject_the_step() {
        let (model, _) = scripted(vec![vec![ToolCall {
            id: Some("x".into()),
            name: SUBMIT_DECISION.into(),
            arguments: json!({"orders": [{"ticker": "A", "side": "buy", "quantity": 2.5}]}),
        }]]);
        let mut e = episode("llm");
        let r = e.run_blocking(1, &model).unwrap().remove(0);
        assert_eq!(r.log.extracted_decision, None);
        assert!(
            r.log
                .execution_result
                .message
                .starts_with("rejected, nothing executed: invalid submit_decision arguments: orders[0].quantity:"),
            "{}",
            r.log.execution_result.message
        );
        assert_eq!(e.portfolio().cash, 1000.0);
        assert_eq!(e.metrics().rejected_decisions, 1);
    }

    #[test]
    fn a_model_error_changes_nothing() {
        let failing = FnToolModel(|_: &ChatRequest| Err(LlmError::Request("offline".into())));
        let mut e = episode("llm");
        e.apply_op(&TradingOp::CaseDataInject {
            item: CaseDataItem { kind: CaseDataKind::News, content: "rumour".into() },
        })
        .unwrap();
        let before = e.clone();
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let err = rt.block_on(e.step(&failing)).unwrap_err().to_string();
        assert_eq!(err, "agent llm: LLM request failed: offline");
        assert_eq!(e, before);
    }

    #[test]
    fn clones_and_stored_copies_continue_identically() {
        let mut a = episode("llm");
        a.run_blocking(2, &MockToolModel).unwrap();
        let stored = serde_json::to_string(&a).unwrap();
        let mut b = a.clone();
        a.run_blocking(2, &MockToolModel).unwrap();
        assert_eq!(b.decision_points_done(), 2, "a clone does not see the original's steps");
        b.run_blocking(2, &MockToolModel).unwrap();
        assert_eq!(a, b, "same state, same model → same result");

        let mut back: TradingEpisode = serde_json::from_str(&stored).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let err = rt.block_on(back.step(&MockToolModel)).unwrap_err().to_string();
        assert_eq!(err, "episode ep has no market data attached");
        back.attach_market(Arc::new(tiny_market()));
        back.run_blocking(2, &MockToolModel).unwrap();
        assert_eq!(back, a);
        assert_eq!(back.metrics(), a.metrics());
    }

    #[test]
    fn ops_patch_inject_and_swap() {
        let (model, seen) = scripted(vec![vec![], vec![]]);
        let mut e = episode("llm");
        e.run_blocking(1, &model).unwrap();

        // Patch: validated all or nothing.
        let bad = TradingOp::PortfolioPatch { cash: Some(5.0), positions: [("Z".to_string(), 1)].into() };
        assert!(e.apply_op(&bad).unwrap_err().to_string().contains("positions.Z: not in the episode's tickers (A, B)"));
        assert_eq!(e.portfolio().cash, 1000.0, "a failed op changes nothing");
        let neg = TradingOp::PortfolioPatch { cash: None, positions: [("A".to_string(), -1)].into() };
        assert_eq!(
            e.apply_op(&neg).unwrap_err().to_string(),
            "portfolio_patch.positions.A: shares must be 0 or more, got -1"
        );
        assert!(
            e.apply_op(&TradingOp::PortfolioPatch { cash: Some(f64::NAN), positions: Default::default() }).is_err()
        );
        e.apply_op(&TradingOp::PortfolioPatch { cash: Some(500.0), positions: [("A".to_string(), 7)].into() }).unwrap();
        assert_eq!(e.portfolio().cash, 500.0);
        assert_eq!(e.portfolio().shares("A"), 7);

        // Inject: shown in the next Case only, after the curated items.
        let item = CaseDataItem { kind: CaseDataKind::News, content: "A wins a big contract".into() };
        e.apply_op(&TradingOp::CaseDataInject { item: item.clone() }).unwrap();
        assert_eq!(e.view().pending_case_data, vec![item.clone()]);
        let r = e.run_blocking(1, &model).unwrap().remove(0);
        assert_eq!(r.case.case_data.items.last(), Some(&item));
        assert_eq!(r.case.portfolio.shares("A"), 7, "the patched portfolio reaches the Case");
        assert!(seen.lock().unwrap()[1].messages.last().unwrap().content.contains("A wins a big contract"));
        assert!(e.view().pending_case_data.is_empty());

        // Prompt and agent swaps.
        e.apply_op(&TradingOp::AgentPromptReplace { system_prompt: "Only buy B.".into() }).unwrap();
        assert_eq!(e.agent(), &AgentSpec::Llm { system_prompt: Some("Only buy B.".into()), history: 2 });
        assert!(!e.memory().is_empty());
        e.apply_op(&TradingOp::AgentSwap { agent: AgentSpec::BuyAndHold }).unwrap();
        assert!(e.memory().is_empty());
        let err = e.apply_op(&TradingOp::AgentPromptReplace { system_prompt: "x".into() }).unwrap_err();
        assert_eq!(
            err.to_string(),
            "agent_prompt_replace: the agent is buy_and_hold, which has no prompt (use agent_swap)"
        );
        let r = e.run_blocking(1, &model).unwrap().remove(0);
        assert!(r.log.agent_output["tool_calls"][0]["id"].as_str().unwrap().starts_with("buy_and_hold-"));
        e.run_blocking(1, &model).unwrap();
        assert!(e.apply_op(&TradingOp::CaseDataInject { item }).unwrap_err().to_string().contains("finished"));
    }

    #[test]
    fn view_shows_progress_curves_and_trades() {
        let mut e = episode("buy_and_hold");
        let v = e.view();
        assert_eq!((v.next_decision_point, v.decision_points, v.done), (0, 4, false));
        assert!(v.equity_curve.is_empty() && v.current_date.is_none());
        assert_eq!(v.next_date.as_deref(), Some("2020-01-01"));
        assert_eq!(v.portfolio_value, 1000.0);
        e.run_blocking(2, &MockToolModel).unwrap();
        let v = e.view();
        assert_eq!(v.current_date.as_deref(), Some("2020-01-02"));
        assert_eq!(v.equity_curve.len(), 2);
        // The agent is buy-and-hold, so its curve is the benchmark's.
        assert_eq!(v.equity_curve, v.buy_and_hold_curve);
        assert_eq!(v.trades.len(), 2);
        assert_eq!(v.metrics.strategy, v.metrics.buy_and_hold);
        // 50 A at 10 + 10 B at 50 = 1000; at day 2: 50 × 11 + 10 × 51 = 1060.
        assert_eq!(v.portfolio_value, 1060.0);
        assert!((v.metrics.strategy.total_return - 0.06).abs() < 1e-12);
        e.run_blocking(5, &MockToolModel).unwrap();
        let v = e.view();
        assert!(v.done && v.next_date.is_none());
        assert_eq!(v.equity_curve.len(), 4);
    }

    #[test]
    fn decision_interval_spaces_the_points() {
        let mut c = config("momentum");
        c.decision_interval = Some(3);
        let mut e = TradingEpisode::new(Arc::new(tiny_market()), c).unwrap();
        assert_eq!(e.num_decision_points(), 2);
        let reports = e.run_blocking(9, &MockToolModel).unwrap();
        let cutoffs: Vec<_> = reports.iter().map(|r| r.case.information_cutoff_timestamp.clone().unwrap()).collect();
        assert_eq!(cutoffs, ["2020-01-01", "2020-01-07"]);
        // The second case summarises the bars since the first cutoff.
        let s = reports[1].case.stock_data["A"].interval_summary.clone().unwrap();
        assert_eq!((s.open, s.close), (10.0, 14.0));
        // Metrics cover every day of the window once finished.
        assert_eq!(e.metrics().days, 4);
    }
}
