//! One tree node's simulation, of any kind the tree holds: a social scene (the engine's
//! [`Simulator`]), a trading episode ([`TradingEpisode`]) or an agent-based model ([`AbmSim`]).
//! The tree only needs what is common — fork, run N turns into an event sink, apply a branch
//! op, a state and a view — and [`Sim`] gives exactly that: each method is one line per kind
//! that hands over to the kind's own file (`sim/social.rs`, `sim/trading.rs`, `sim/abm.rs`),
//! and every failure crosses the seam as a [`SimError`].
//!
//! A fourth kind plugs in here: a variant, its file beside the others, and one arm per method.

mod abm;
mod entry;
pub mod hooks;
mod social;
mod trading;

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use simtree_shared::{NodeState, NodeView, Op, SimKind};

pub use abm::{AbmImportError, AbmSim, MAX_REBUILD_STEPS};
pub(crate) use entry::ABM_DEFAULT_STEPS;
pub use entry::ScenarioEntry;

use crate::abm::AbmError;
use crate::abm::worker::{CancelToken, WorkerPool};
use crate::engine::Simulator;
use crate::engine::event::{Event, EventSink, EventType};
use crate::engine::simulator::{LimitError, RunError};
use crate::llm::LlmClient;
use crate::llm::chat::ChatRequest;
use crate::trading::TradingError;
use crate::trading::agents::ToolModel;
use crate::trading::data::MarketData;
use crate::trading::episode::{ConsistencyError, TradingEpisode};

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Sim {
    Social(Simulator),
    Trading(TradingEpisode),
    Abm(AbmSim),
}

/// The LLM calls one turn makes by a simulation's structure: at least `least`, at most `most`
/// (parse retries aside), and in words why.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct CallShape {
    pub(crate) least: u64,
    most: u64,
    pub(crate) why: String,
}

/// Why a model step is estimated at no call.
pub(crate) const ABM_CALLS: &str = "a model step makes no LLM call";

impl CallShape {
    pub(crate) fn none(why: &str) -> CallShape {
        CallShape { least: 0, most: 0, why: why.into() }
    }
}

/// The seed of the `index`-th child of a fan-out from a state seeded with `parent`: a
/// SplitMix64 step over both, so siblings get unrelated streams and the same fan-out gives the
/// same seeds again. Kept below 2^53, so a browser reads it exactly.
/// The key of the runs started from node `parent` of tree `tree` (see [`Sim::set_affinity`]).
pub(crate) fn affinity_of(tree: u64, parent: u64) -> u64 {
    child_seed(tree, parent) | 1
}

pub(crate) fn child_seed(parent: u64, index: u64) -> u64 {
    let mut z = parent ^ index.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) & ((1 << 53) - 1)
}

/// What a run talks to: the chat client (social scenes), the tool-calling model (trading) and
/// the Python/Mesa workers (agent-based models).
#[derive(Clone)]
pub struct RunCtx {
    pub llm: Arc<dyn LlmClient>,
    pub tools: Arc<dyn ToolModel>,
    pub abm: Option<Arc<WorkerPool>>,
}

/// Why a branch op was refused or a run stopped. The messages are the ones users read (a 422's
/// `detail`, a failed node's reason), so each names what went wrong and with which input.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// An op of another kind (`Unknown op for a trading episode: public_broadcast`).
    #[error("Unknown op for {0}: {1}")]
    WrongOp(&'static str, String),
    /// An op of this kind whose target or value is wrong; the message names the field.
    #[error("{0}")]
    BadOp(String),
    /// A social run stopped: an agent's LLM call failed after its retries.
    #[error(transparent)]
    Social(#[from] RunError),
    /// A trading decision point failed (its model call); the episode is as before it.
    #[error(transparent)]
    Trading(#[from] TradingError),
    /// The agent-based model's worker refused or failed the run.
    #[error(transparent)]
    Abm(#[from] AbmError),
    /// The blocking task that drove the worker died.
    #[error("the ABM worker task failed: {0}")]
    WorkerTask(String),
    #[error("agent-based models need the Python worker, which is not available")]
    NoWorker,
    /// A scenario that is not in the library or does not build.
    #[error("{0}")]
    Scenario(String),
    #[error("no market data is installed (assets/data/market)")]
    NoMarket,
    /// An interview that cannot be asked here (an unknown agent, one with no model to ask).
    #[error("{0}")]
    Interview(String),
}

/// Why a simulator read from an export was refused ([`Sim::check_imported`]). The import names
/// the node; the message names the field and the value.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// A social simulator beyond the engine's limits.
    #[error(transparent)]
    Social(#[from] LimitError),
    /// A trading episode that does not fit its market or contradicts itself (the episode's own
    /// check says which field).
    #[error(transparent)]
    Trading(#[from] ConsistencyError),
    /// An agent-based model whose history cannot be replayed.
    #[error(transparent)]
    Abm(#[from] AbmImportError),
}

/// For callers that report a failure as text (the CLI, sweeps, a node's `error`).
impl From<SimError> for String {
    fn from(e: SimError) -> String {
        e.to_string()
    }
}

/// An op's wire name (`public_broadcast`), for "unknown op" messages.
fn op_name(op: &Op) -> String {
    op.name().to_string()
}

/// Events that mark one turn of progress: a social turn's first step, a trading decision point,
/// an agent-based model's step. (Skipped social turns leave no event, so a count may stop short.)
pub(crate) fn counts_as_turn(e: &Event) -> bool {
    match e.kind {
        EventType::AgentProcessStart => e.data["step"] == 1,
        EventType::DecisionPoint | EventType::AbmStep => true,
        _ => false,
    }
}

impl Sim {
    /// The kind's wire name (`social`, `trading`, `abm`).
    pub(crate) fn kind(&self) -> &'static str {
        self.sim_kind().as_str()
    }

    /// The kind as the wire names it.
    pub(crate) fn sim_kind(&self) -> SimKind {
        match self {
            Sim::Social(_) => SimKind::Social,
            Sim::Trading(_) => SimKind::Trading,
            Sim::Abm(_) => SimKind::Abm,
        }
    }

    /// A copy for a new child node (social: `turns` reset as upstream's clone does).
    /// The simulator a child of node `parent` of tree `tree` runs: this one forked, its calls
    /// keyed to the parent (children of one node share its prompts up to where they diverge,
    /// so a model spread over several servers sends them to one: see [`Self::set_affinity`]).
    pub(crate) fn fork_child(&self, tree: u64, parent: u64) -> Sim {
        let mut sim = self.fork();
        sim.set_affinity(affinity_of(tree, parent));
        sim
    }

    pub fn fork(&self) -> Sim {
        match self {
            Sim::Social(s) => Sim::Social(s.fork()),
            Sim::Trading(t) => Sim::Trading(t.clone()),
            Sim::Abm(a) => Sim::Abm(a.clone()),
        }
    }

    /// Upstream's per-node `turns` (social), decision points done (trading), steps (ABM).
    pub fn turns(&self) -> u64 {
        match self {
            Sim::Social(s) => s.turns(),
            Sim::Trading(t) => t.decision_points_done() as u64,
            Sim::Abm(a) => a.steps,
        }
    }

    /// The seed this state's random streams were last set from (`None`: a trading episode,
    /// which holds no random state). Shown in a node's info, so a fan-out child's is on record.
    pub(crate) fn seed(&self) -> Option<u64> {
        match self {
            Sim::Social(s) => Some(s.world().llm.seed),
            Sim::Abm(a) => Some(a.current_seed()),
            Sim::Trading(_) => None,
        }
    }

    /// Makes the `index`-th child of a fan-out differ from its siblings, reproducibly: its random
    /// streams are set from a seed derived from this state's seed and `index` (see
    /// [`child_seed`]). Social scenes: the world's RNG (orderings) and the scripted player; the
    /// mock is deterministic by its counters, so mock children of a sequential scene stay alike.
    /// Agent-based models: the worker reseeds the model before the next step. Trading episodes
    /// hold no random state.
    pub fn replicate(&mut self, index: u64) {
        if let Some(seed) = self.seed() {
            self.reseed(child_seed(seed, index));
        }
    }

    /// Keys the calls of the run about to start to `key` (a hash of the node it starts from):
    /// a model spread over several servers sends them to one server while its load allows (see
    /// `llm::provider::EndpointSet`). Social scenes only: trading calls carry no simulator state.
    pub fn set_affinity(&mut self, key: u64) {
        if let Sim::Social(s) = self {
            s.start_run(key);
        }
    }

    /// Tells the run it starts with `n - 1` siblings from its node (a fan-out of `n`), whose
    /// calls may share an explicitly cached prefix. Social scenes only, as [`Self::set_affinity`].
    pub(crate) fn set_fan_out(&mut self, n: u64) {
        if let Sim::Social(s) = self {
            s.set_fan_out(u32::try_from(n).unwrap_or(u32::MAX));
        }
    }

    /// Puts the random streams a run draws from at `seed`, whatever the state came from, so that
    /// runs of different cells with one seed are paired. Social scenes: the world's RNG and the
    /// `scripted` player's seed (the `mock` dialect is deterministic by counters and real
    /// providers sample on their side, so neither follows the seed). Agent-based models: the
    /// worker reseeds the model before the next step. Trading episodes hold no random state:
    /// their replicates are identical.
    pub(crate) fn reseed(&mut self, seed: u64) {
        match self {
            Sim::Social(s) => social::reseed(s, seed),
            Sim::Abm(a) => a.reseed = Some(seed),
            Sim::Trading(_) => {}
        }
    }

    /// Events waiting from construction (a scenario's initial broadcasts): the root's log.
    pub(crate) fn initial_events(&mut self) -> Vec<Event> {
        match self {
            Sim::Social(s) => social::initial_events(s),
            Sim::Trading(_) | Sim::Abm(_) => Vec::new(),
        }
    }

    /// Checks a simulator read from an untrusted export (after [`Sim::attach`]): its fields within
    /// the engine's limits, its indices in range.
    pub fn check_imported(&self) -> Result<(), ImportError> {
        match self {
            Sim::Social(s) => Ok(s.check_limits()?),
            Sim::Trading(t) => t.check_consistent().map_err(ImportError::Trading),
            Sim::Abm(a) => Ok(a.check_imported()?),
        }
    }

    /// Drops any state that could not be recomputed from the node's own description, for nodes
    /// that came from outside (imports): an agent-based model's snapshot.
    pub fn distrust(&mut self) {
        if let Sim::Abm(a) = self {
            a.distrust();
        }
    }

    /// Re-attaches shared data that is not serialised (the market of a trading episode).
    pub(crate) fn attach(&mut self, market: Option<&Arc<MarketData>>) {
        if let (Sim::Trading(t), Some(m)) = (self, market) {
            t.attach_market(m.clone());
        }
    }

    /// Runs `turns` turns (social), decision points (trading) or steps (ABM), streaming events
    /// into `sink`.
    pub async fn run(&mut self, turns: u64, ctx: &RunCtx, sink: &mut (dyn EventSink + Send)) -> Result<(), SimError> {
        self.run_cancellable(turns, ctx, sink, &CancelToken::new()).await
    }

    /// [`Sim::run`], where cancelling `cancel` (from another task) stops a custom scene's Python
    /// hook call in progress: its worker is killed and the hook fails as cancelled.
    pub(crate) async fn run_cancellable(
        &mut self,
        turns: u64,
        ctx: &RunCtx,
        sink: &mut (dyn EventSink + Send),
        cancel: &CancelToken,
    ) -> Result<(), SimError> {
        match self {
            Sim::Social(s) => {
                hooks::give(s, ctx.abm.as_ref(), cancel);
                social::run(s, turns, &*ctx.llm, sink).await
            }
            Sim::Trading(t) => trading::run(t, turns, &*ctx.tools, sink).await,
            Sim::Abm(a) => a.run(turns, ctx.abm.clone(), sink).await,
        }
    }

    /// The Python hook source of a custom scene's document (run only on the ABM workers).
    pub(crate) fn hook_source(&self) -> Option<&str> {
        match self {
            Sim::Social(s) => hooks::source(s),
            Sim::Trading(_) | Sim::Abm(_) => None,
        }
    }

    /// Applies one branch op; returns the events it produced. Nothing changes on error.
    pub fn apply_op(&mut self, op: &Op) -> Result<Vec<Event>, SimError> {
        match self {
            Sim::Social(s) => social::apply_op(s, op),
            Sim::Trading(t) => trading::apply_op(t, op),
            Sim::Abm(a) => a.apply_op(op),
        }
    }

    /// Where the agents' memories end now, for [`Sim::memory_since`] (social scenes; the other
    /// kinds keep no agent memory the search reads).
    pub(crate) fn memory_marks(&self) -> Vec<(usize, usize)> {
        match self {
            Sim::Social(s) => social::memory_marks(s),
            Sim::Trading(_) | Sim::Abm(_) => Vec::new(),
        }
    }

    /// What the agents' memories took in since `marks` were taken of this state or an
    /// ancestor's (memories only grow), as text to search.
    pub(crate) fn memory_since(&self, marks: &[(usize, usize)]) -> String {
        match self {
            Sim::Social(s) => social::memory_since(s, marks),
            Sim::Trading(_) | Sim::Abm(_) => String::new(),
        }
    }

    /// `GET …/state`: the agents and their context.
    pub fn state(&self) -> NodeState {
        match self {
            Sim::Social(s) => social::state(s),
            Sim::Trading(t) => trading::state(t),
            Sim::Abm(a) => a.state(),
        }
    }

    /// The request an interview of `agent` sends at this state: exactly the context its next
    /// decision would see, then `question` as an interview turn. Nothing changes.
    pub(crate) fn interview(&self, agent: &str, question: &str) -> Result<ChatRequest, SimError> {
        match self {
            Sim::Social(s) => social::interview(s, agent, question),
            Sim::Trading(t) => trading::interview(t, agent, question),
            Sim::Abm(_) => {
                Err(SimError::Interview("an agent-based model has no language-model agents to interview".into()))
            }
        }
    }

    /// How many LLM calls a turn of this simulation makes, by its structure (for estimates).
    pub(crate) fn call_shape(&self) -> CallShape {
        match self {
            Sim::Social(s) => social::call_shape(s),
            Sim::Trading(t) => trading::call_shape(t),
            Sim::Abm(_) => CallShape::none(ABM_CALLS),
        }
    }

    /// `GET …/view`: the scene state (social), the portfolio, curves, trades and metrics
    /// (trading), or the model and its progress (agent-based).
    pub fn view(&self) -> NodeView {
        match self {
            Sim::Social(s) => NodeView::Social(social::view(s)),
            Sim::Trading(t) => NodeView::Trading(Box::new(t.view())),
            Sim::Abm(a) => NodeView::Abm(a.view()),
        }
    }
}
