//! The wire types of a trading episode that leave the server: its node view ([`TradingView`])
//! and what the view is made of (portfolio, trades, curves, metrics, the agent), and the payload
//! of a `decision_point` event ([`DecisionEvent`]).
//!
//! The server's trading module uses these types as its own (they are re-exported there), so the
//! JSON the UI reads is the JSON the episode serialises, with the seed's field names. Plain data
//! and a few pure helpers only: no I/O, no market data.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Cash and whole-share positions (ticker → shares) at a decision point.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct PortfolioSnapshot {
    pub cash: f64,
    #[serde(default)]
    pub positions: BTreeMap<String, i64>,
}

impl PortfolioSnapshot {
    pub fn cash_only(cash: f64) -> Self {
        PortfolioSnapshot { cash, positions: BTreeMap::new() }
    }

    /// Shares held of `ticker` (0 when absent).
    pub fn shares(&self, ticker: &str) -> i64 {
        self.positions.get(ticker).copied().unwrap_or(0)
    }

    /// Cash plus every position at `price(ticker)`; a ticker without a price counts as 0.
    pub fn value(&self, price: impl Fn(&str) -> Option<f64>) -> f64 {
        self.cash + self.positions.iter().map(|(t, &n)| n as f64 * price(t).unwrap_or(0.0)).sum::<f64>()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Side {
    Buy,
    Sell,
}

impl Side {
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Buy => "buy",
            Side::Sell => "sell",
        }
    }
}

/// What a piece of case information is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum CaseDataKind {
    Earnings,
    News,
    Other,
}

impl CaseDataKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CaseDataKind::Earnings => "earnings",
            CaseDataKind::News => "news",
            CaseDataKind::Other => "other",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "earnings" => Some(CaseDataKind::Earnings),
            "news" => Some(CaseDataKind::News),
            "other" => Some(CaseDataKind::Other),
            _ => None,
        }
    }
}

/// One information item shown to the agent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CaseDataItem {
    pub kind: CaseDataKind,
    pub content: String,
}

/// One executed fill; `order_index` is the position of its order in `Decision.orders`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ExecutedTrade {
    pub order_index: usize,
    pub ticker: String,
    pub side: Side,
    pub quantity: i64,
    pub price: f64,
    /// The trading day of the fill (the case's cutoff).
    pub timestamp: String,
    pub case_id: String,
}

/// One point of an equity curve: the portfolio's value at a day's close.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EquityPoint {
    pub date: String,
    pub value: f64,
}

/// Return and risk figures of one equity curve.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Performance {
    pub total_return: f64,
    pub annualised_return: f64,
    pub volatility: f64,
    pub sharpe: Option<f64>,
    pub max_drawdown: f64,
}

/// Per-episode evaluation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EpisodeMetrics {
    pub episode_id: String,
    pub agent_id: String,
    /// First and last day of the evaluated curve (`None` before the first decision point).
    pub start_date: Option<String>,
    pub end_date: Option<String>,
    /// Trading days on the curve.
    pub days: usize,
    pub initial_value: f64,
    pub final_value: f64,
    pub strategy: Performance,
    pub buy_and_hold: Performance,
    pub buy_and_hold_final_value: f64,
    pub decision_points: usize,
    pub num_trades: usize,
    pub rejected_decisions: usize,
}

/// The longest lookback a rule-based trader may ask for (longer than any shipped market history).
pub const MAX_LOOKBACK: usize = 100_000;

fn default_lookback() -> usize {
    10
}
fn default_band() -> f64 {
    1.0
}
fn default_history() -> usize {
    2
}

/// An agent and its parameters. Stored in the episode (and its config), swapped by a branch op.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum AgentSpec {
    /// Spends the cash equally on every ticker at the first decision point, then holds.
    BuyAndHold,
    /// Holds the tickers whose close rose over the last `lookback` bars; sells those that fell.
    Momentum {
        #[serde(default = "default_lookback")]
        lookback: usize,
    },
    /// Buys a ticker whose close is more than `band` standard deviations below its mean over the
    /// last `lookback` bars; sells it once the close is back at or above the mean.
    MeanReversion {
        #[serde(default = "default_lookback")]
        lookback: usize,
        #[serde(default = "default_band")]
        band: f64,
    },
    /// Asks a tool-calling model. `system_prompt` replaces the default one; `history` is how many
    /// earlier decision points (the model's calls and their results) stay in the conversation.
    Llm {
        #[serde(default)]
        system_prompt: Option<String>,
        #[serde(default = "default_history")]
        history: usize,
    },
}

impl AgentSpec {
    /// The agent kinds by name (`agent_id` of a config, `--agent` of the CLI).
    pub const KINDS: [&'static str; 4] = ["buy_and_hold", "momentum", "mean_reversion", "llm"];

    /// The default agent of a kind; `-` and `_` are interchangeable.
    pub fn from_kind(kind: &str) -> Result<Self, AgentSpecError> {
        Ok(match kind.replace('-', "_").as_str() {
            "buy_and_hold" => AgentSpec::BuyAndHold,
            "momentum" => AgentSpec::Momentum { lookback: default_lookback() },
            "mean_reversion" => AgentSpec::MeanReversion { lookback: default_lookback(), band: default_band() },
            "llm" => AgentSpec::Llm { system_prompt: None, history: default_history() },
            _ => return Err(AgentSpecError::UnknownKind(kind.to_string())),
        })
    }

    pub fn kind(&self) -> &'static str {
        match self {
            AgentSpec::BuyAndHold => "buy_and_hold",
            AgentSpec::Momentum { .. } => "momentum",
            AgentSpec::MeanReversion { .. } => "mean_reversion",
            AgentSpec::Llm { .. } => "llm",
        }
    }

    pub fn is_llm(&self) -> bool {
        matches!(self, AgentSpec::Llm { .. })
    }

    /// Checks the parameters; the message names the field.
    pub fn validate(&self) -> Result<(), AgentSpecError> {
        match self {
            AgentSpec::Momentum { lookback } | AgentSpec::MeanReversion { lookback, .. }
                if *lookback > MAX_LOOKBACK =>
            {
                Err(AgentSpecError::LookbackTooLong(*lookback))
            }
            AgentSpec::Momentum { lookback } if *lookback == 0 => Err(AgentSpecError::LookbackTooShort(1)),
            AgentSpec::MeanReversion { lookback, .. } if *lookback < 2 => Err(AgentSpecError::LookbackTooShort(2)),
            AgentSpec::MeanReversion { band, .. } if !(band.is_finite() && *band >= 0.0) => {
                Err(AgentSpecError::Band(*band))
            }
            AgentSpec::Llm { system_prompt: Some(p), .. } if p.trim().is_empty() => Err(AgentSpecError::EmptyPrompt),
            _ => Ok(()),
        }
    }
}

/// Why an agent's kind or parameters were refused ([`AgentSpec::from_kind`],
/// [`AgentSpec::validate`]); the message names the field.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum AgentSpecError {
    #[error("unknown agent '{0}' (known: {known})", known = AgentSpec::KINDS.join(", "))]
    UnknownKind(String),
    #[error("agent.lookback must be at most {MAX_LOOKBACK} bars, got {0}")]
    LookbackTooLong(usize),
    /// The least lookback of the kind (1 for momentum, 2 for mean reversion).
    #[error("agent.lookback must be at least {0}")]
    LookbackTooShort(usize),
    #[error("agent.band must be a non-negative number, got {0}")]
    Band(f64),
    #[error("agent.system_prompt must not be empty")]
    EmptyPrompt,
}

/// Everything the UI and the compare view need about an episode at one node (the `trading`
/// variant of a node view).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TradingView {
    pub episode_id: String,
    pub agent_id: String,
    /// The agent now in charge (a branch op may have swapped it).
    pub agent: AgentSpec,
    pub tickers: Vec<String>,
    pub decision_points: usize,
    /// Index of the next decision point (= decision points done).
    pub next_decision_point: usize,
    pub done: bool,
    /// Cutoff of the last decision point done, and of the next one.
    pub current_date: Option<String>,
    pub next_date: Option<String>,
    pub portfolio: PortfolioSnapshot,
    pub portfolio_value: f64,
    pub pending_case_data: Vec<CaseDataItem>,
    pub equity_curve: Vec<EquityPoint>,
    pub buy_and_hold_curve: Vec<EquityPoint>,
    pub trades: Vec<ExecutedTrade>,
    pub metrics: EpisodeMetrics,
}

/// The `data` of a `decision_point` event: the decision point's audit log, then the portfolio
/// after execution and its value at the cutoff day's close.
///
/// The log is the server's whole `DecisionPointLog` (the Case, the agent's raw output, the
/// execution result); it is generic so the server writes its own type and a reader can parse
/// only what it shows ([`DecisionBrief`]), or keep it as a [`Value`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DecisionEvent<Log = Value> {
    pub log: Log,
    pub portfolio: PortfolioSnapshot,
    pub value: f64,
    pub done: bool,
}

impl<Log: Serialize> crate::EventPayload for DecisionEvent<Log> {
    const KIND: crate::EventType = crate::EventType::DecisionPoint;
}

/// What the event panel shows of a decision point's log: its case id, the agent's text and the
/// execution result's message.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DecisionBrief {
    #[serde(default)]
    pub case_id: String,
    /// The decision point's number in the episode (the same number on every branch), by which
    /// two runs' decisions are paired.
    #[serde(default)]
    pub decision_point_idx: Option<u64>,
    #[serde(default)]
    pub agent_output: AgentOutputBrief,
    #[serde(default)]
    pub execution_result: ExecutionBrief,
}

/// The agent's free text in a decision point's log (its tool calls are left out).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AgentOutputBrief {
    #[serde(default)]
    pub text: String,
}

/// The message of a decision point's execution result (why a decision was rejected).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ExecutionBrief {
    #[serde(default)]
    pub message: String,
}
