//! LLM access for the engine: one async trait, [`LlmClient`], and the per-simulator state a client
//! may keep ([`LlmState`]).
//!
//! Behind it: the richer [`ChatProvider`] (tools, structured output, usage) with the `openai`,
//! `gemini`, `anthropic` and `mock` dialects, their configuration ([`config`]), the resilience
//! layer shared by the HTTP dialects ([`resilience`]) and [`structured`], the one JSON-output API
//! for trading and ABM code. docs/providers.md says why it is built this way.
//!
//! Everything here speaks one vocabulary, [`chat`]: messages, roles, tool specs, tool calls and
//! tool results, used as they are by the engine, trading, ABM generation, the ledger and every
//! dialect. This layer knows nothing of its consumers; only the offline mock reads what the engine
//! writes into prompts (the agent's name and scene words). The scripted player, which plays the
//! built-in games, is the engine's (`engine::scripted`); `crate::backend` serves both offline
//! players as clients.
//!
//! The engine never talks to a network itself; it hands a list of `{role, content}` messages to a
//! client and gets text back. The state lives in the simulator (not in the client) so that a cloned
//! simulator continues exactly as the original would — this is where the mock keeps its counters.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;

use serde::{Deserialize, Serialize};

pub mod anthropic;
pub mod ask;
pub mod budget;
pub mod cache;
pub mod chat;
pub mod coalesce;
pub mod config;
pub mod e2e;
pub mod endpoints;
pub mod gemini;
pub mod ledger;
pub mod mock;
pub mod openai;
pub mod price;
pub mod provider;
pub mod record;
pub mod resilience;
pub mod schema;
pub mod stream;
pub mod warmup;
pub mod wire;

pub use chat::{ChatRequest, ChatResponse, JsonSchema, Message, Role, ToolCall, ToolChoice, ToolSpec, Usage};
pub use config::{ApiKey, ConfigError, Dialect, LlmConfig, LlmOverride, LlmSettings};
pub use mock::MockClient;
pub use provider::{ChatProvider, ProviderClient, ProviderPool, build_provider, structured};

/// A boxed, sendable future (what an object-safe async trait method returns).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why an LLM call failed after the client's own retries. Ends the run with a visible reason.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LlmError {
    #[error("LLM request failed: {0}")]
    Request(String),
    #[error("LLM response unusable: {0}")]
    Response(String),
    /// The model declined or a provider's safety filter withheld the answer.
    #[error("LLM refused: {0}")]
    Refused(String),
}

/// Per-simulator state of the LLM side, cloned with the simulator.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LlmState {
    /// The mock's call counter per extracted agent name (spec §1.14.1).
    #[serde(default)]
    pub mock_counters: BTreeMap<String, u64>,
    /// The simulator's seed, which the `scripted` dialect draws its choices from (set when the
    /// world is built, so two seeds of one scenario play differently and one seed replays).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub seed: u64,
    /// The offline policy chosen for this simulator when its tree was created (`"llm"` on the
    /// create route); the offline clients answer with it whatever the server's default is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offline: Option<Offline>,
    /// Which server of a model spread over several (`LLM_BASE_URLS`) this simulator's calls
    /// prefer: set when a run starts from the node it starts from, so that siblings forked from
    /// one node, whose prompts share that node's prefix, reach the server that has it cached.
    /// Not stored (each run sets it); 0 means no preference.
    #[serde(skip)]
    pub affinity: u64,
    /// The agent whose turn makes the call in flight (set around each call by the engine, so
    /// that a call is told apart by a value, never by reading its prompt; `None` at rest).
    #[serde(skip)]
    pub speaker: Option<String>,
    /// Per agent, the prefixes of its prompts that earlier calls sent (its prompt at the fork
    /// and on its last turn), which later prompts may repeat and a provider may serve from its
    /// cache (`llm::cache`). Not stored: a simulator read back from the store starts without
    /// them, and its first calls place no breakpoints beyond the system prompt.
    #[serde(skip)]
    pub prefixes: BTreeMap<String, cache::Sent>,
    /// Per agent, which server of a model spread over several served its last call (an index
    /// into `LLM_BASE_URLS`): that server's cache holds the agent's prompt so far, so its next
    /// call, and the calls of its copies in a fan-out's children, go there first (see
    /// `llm::provider::EndpointSet`). Not stored: a simulator read back from the store falls back
    /// to the run's affinity key.
    #[serde(skip)]
    pub served_by: BTreeMap<String, usize>,
    /// How many sibling runs started from the run's node together (a fan-out), 0 when the run
    /// is alone: a fan-out of several may share an explicitly cached prefix (Gemini's
    /// `cachedContents`, see `llm::cache`). Not stored.
    #[serde(skip)]
    pub fan_out: u32,
}

impl LlmState {
    /// Starts a run keyed to `affinity` (a hash of the node it starts from, see
    /// [`LlmState::affinity`]): what each agent sent last becomes its prompt at the fork.
    pub fn start_run(&mut self, affinity: u64) {
        self.affinity = affinity;
        self.fan_out = 0;
        for sent in self.prefixes.values_mut() {
            sent.fork = sent.last;
            sent.called = false;
        }
    }
}

/// The offline policy a simulator runs with when its tree asked for one at creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Offline {
    /// Upstream's mock (spec §1.14): fixed replies, games stall as upstream's do.
    Mock,
    /// The engine's rule-following player (`engine::scripted`).
    Scripted,
}

impl std::str::FromStr for Offline {
    type Err = UnknownOffline;
    fn from_str(s: &str) -> Result<Self, UnknownOffline> {
        match s.trim().to_ascii_lowercase().as_str() {
            "mock" => Ok(Offline::Mock),
            "scripted" => Ok(Offline::Scripted),
            other => Err(UnknownOffline(other.to_string())),
        }
    }
}

/// A tree's `llm` that names no offline player.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown llm {0:?} for a tree (expected mock or scripted; real providers are chosen by the server's LLM settings)"
)]
pub struct UnknownOffline(pub String);

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A chat-completion backend.
pub trait LlmClient: Send + Sync {
    /// Sends `messages` (system first) and returns the assistant's text.
    fn chat<'a>(&'a self, messages: &'a [Message], state: &'a mut LlmState) -> BoxFuture<'a, Result<String, LlmError>>;
}
