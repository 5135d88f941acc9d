//! Trading episodes (seed 003): an agent manages a portfolio over real daily prices, one decision
//! point at a time.
//!
//! At each decision point the episode builds a [`models::Case`] (market data up to the cutoff
//! date, dated facts, the current portfolio), invokes the agent with it, extracts the agent's
//! `submit_decision` tool call, executes it all-or-nothing (sells before buys) and hands the
//! [`models::DecisionResult`] back to the agent as the tool's result.
//!
//! * [`models`] — the seed's data models with its JSON field names;
//! * [`data`] — the committed market CSV and curated events, and Case building without look-ahead;
//! * [`execution`] — `execute_decision`, the all-or-nothing order book rules;
//! * [`agents`] — the agent interface, the rule-based baselines and the tool-calling LLM agent;
//! * [`episode`] — [`episode::TradingEpisode`], the cloneable state the tree steps turn by turn;
//! * [`metrics`] — returns, risk and the buy-and-hold benchmark;
//! * [`storage`] — `experiments/{run_id}/` in the seed's layout;
//! * [`cli`] — `simtree trade run`.

pub mod agents;
mod append_log;
pub mod cli;
pub mod data;
pub mod dataset;
pub mod episode;
pub mod execution;
pub mod metrics;
pub mod models;
pub mod provider;
pub mod storage;

pub use append_log::AppendLog;

use std::path::PathBuf;

use crate::llm::LlmError;

/// Everything that can go wrong in the trading area, each with the input it concerns.
#[derive(Debug, thiserror::Error)]
pub enum TradingError {
    /// A data file is malformed: which file, which line, what is wrong.
    #[error("{file}:{line}: {message}")]
    Data { file: String, line: usize, message: String },
    /// An episode configuration cannot be run; the message names the field.
    #[error("episode config: {0}")]
    Config(String),
    /// `step` was called after the last decision point.
    #[error("episode {episode_id} is finished ({points} decision points)")]
    Finished { episode_id: String, points: usize },
    /// The episode was deserialised without its market data (see `TradingEpisode::attach_market`).
    #[error("episode {0} has no market data attached")]
    NoMarket(String),
    /// The LLM behind an agent failed; the step did not happen.
    #[error("agent {agent}: {source}")]
    Model {
        agent: String,
        #[source]
        source: LlmError,
    },
    #[error("{path}: {message}")]
    Storage { path: PathBuf, message: String },
    /// The shipped market data could not be found or extracted.
    #[error(transparent)]
    Assets(#[from] crate::embedded::EmbedError),
}

impl TradingError {
    pub(crate) fn storage(path: impl Into<PathBuf>, message: impl ToString) -> Self {
        TradingError::Storage { path: path.into(), message: message.to_string() }
    }
}
