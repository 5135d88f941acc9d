//! One tree node's simulation, of any kind the tree holds: a social scene (the engine's
//! [`Simulator`]) or a trading episode ([`TradingEpisode`]). The tree only needs what is common —
//! fork, run N turns into an event sink, apply a branch op, a state view — and this enum gives
//! exactly that, delegating to each kind.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use simtree_shared::abm::{AbmStep, AbmView};
use simtree_shared::trading::DecisionEvent;
use simtree_shared::{AgentErrorEvent, AgentState, MemoryLine, NodeState, NodeView, Op, SocialView};

use crate::abm::model::AbmModel;
use crate::abm::worker::{Advance, CancelToken, CheckPatch, Patch, Snapshot, Start, Termination, WorkerPool};
use crate::chunks::AppendList;
use crate::engine::Simulator;
use crate::engine::event::{Event, EventSink, EventType, SceneEvent};
use crate::engine::memory::Role;
use crate::engine::plan::PlanState;
use crate::llm::LlmClient;
use crate::trading::agents::ToolModel;
use crate::trading::data::MarketData;
use crate::trading::episode::{TradingEpisode, TradingOp};

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Sim {
    Social(Simulator),
    Trading(TradingEpisode),
    Abm(AbmSim),
}

/// What a run talks to: the chat client (social scenes), the tool-calling model (trading) and
/// the Python/Mesa workers (agent-based models).
#[derive(Clone)]
pub struct RunCtx {
    pub llm: Arc<dyn LlmClient>,
    pub tools: Arc<dyn ToolModel>,
    pub abm: Option<Arc<WorkerPool>>,
}

/// An agent-based model at one node: the specification (shared), the history of advances that
/// led here from the seed (shared), the pickled model state after the node's run (a cache), and
/// patches waiting for the next run. The tracked series are the node's `abm_step` log entries,
/// so cloning stays cheap at any step count.
///
/// The specification, seed and history determine the state; the snapshot only saves recomputing
/// it. A snapshot is a pickle, and unpickling runs code, so only snapshots this server's worker
/// produced are ever loaded: the field is never serialized nor read from JSON, and a node
/// without one (imported, or [`AbmSim::distrust`]ed) is rebuilt in the worker by re-running its
/// history.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AbmSim {
    pub model: Arc<AbmModel>,
    pub seed: u64,
    /// The state after the node's run, as this server's worker pickled it; `None` before the
    /// first run and on imported nodes.
    #[serde(skip)]
    pub snapshot: Option<Snapshot>,
    /// Every advance from the freshly built model to this node's state, in order.
    #[serde(default)]
    pub history: AppendList<Advance>,
    pub steps: u64,
    #[serde(default)]
    pub terminated: Option<Termination>,
    /// Branch ops, applied in the worker right before the next step.
    #[serde(default)]
    pub pending: Vec<Patch>,
    /// A new seed for the next run (replicates of one parent get distinct seeds).
    #[serde(default)]
    pub reseed: Option<u64>,
}

/// The most model steps an imported node's history may replay when it is rebuilt.
pub const MAX_REBUILD_STEPS: u64 = 1_000_000;

impl AbmSim {
    /// Checks an imported node's history before it is ever replayed: every recorded patch fits
    /// the model, the steps add up to the node's (an export from before histories existed, with
    /// steps but no history, cannot be rebuilt and is refused), and the total is bounded.
    pub fn check_imported(&self) -> Result<(), String> {
        let mut total: u64 = 0;
        for (i, adv) in self.history.iter().enumerate() {
            for p in adv.patches.iter().chain(&self.pending) {
                p.check(&self.model).map_err(|e| format!("history[{i}]: {e}"))?;
            }
            total = total.saturating_add(adv.steps);
        }
        if total > MAX_REBUILD_STEPS {
            return Err(format!(
                "the history replays {total} steps; at most {MAX_REBUILD_STEPS} can be rebuilt"
            ));
        }
        if self.steps > total {
            return Err(format!(
                "the model is at step {} but its history records only {total} steps (exports of \
                 agent-based models from before histories were recorded cannot be rebuilt)",
                self.steps
            ));
        }
        Ok(())
    }

    pub fn new(model: AbmModel, seed: u64) -> AbmSim {
        AbmSim {
            model: Arc::new(model),
            seed,
            snapshot: None,
            history: AppendList::new(),
            steps: 0,
            terminated: None,
            pending: Vec::new(),
            reseed: None,
        }
    }

    /// Forgets the snapshot, so the next run rebuilds the state from the specification and the
    /// history. For states that came from outside (imports): their snapshot is never loaded.
    pub fn distrust(&mut self) {
        self.snapshot = None;
    }

    /// Runs the pending patches, reseed and `steps` steps in a worker. Dropping the future (the
    /// run's task aborted: node deleted or cancelled) kills the worker's process, so the worker
    /// is free for other runs within [`crate::abm::worker::CANCEL_POLL`].
    async fn run(
        &mut self,
        steps: u64,
        pool: Arc<WorkerPool>,
        sink: &mut (dyn EventSink + Send),
    ) -> Result<(), String> {
        let plan = Advance {
            patches: self.pending.clone(),
            reseed: self.reseed,
            steps,
        };
        let (model, seed, snapshot) = (self.model.clone(), self.seed, self.snapshot.clone());
        let fresh = self.history.is_empty();
        // The worker replays a plain slice; only a rebuild (no snapshot) needs it.
        let history = if snapshot.is_none() {
            self.history.to_vec()
        } else {
            Vec::new()
        };
        let cancel = CancelToken::new();
        let on_drop = cancel.cancel_on_drop();
        let job_plan = plan.clone();
        let done = tokio::task::spawn_blocking(move || {
            pool.with_worker_cancellable(&cancel, |w| {
                let start = match &snapshot {
                    Some(s) => Start::Snapshot(s),
                    None if fresh => Start::Spec { model: &model, seed },
                    None => Start::Rebuild {
                        model: &model,
                        seed,
                        history: &history,
                    },
                };
                w.advance(start, &job_plan)
            })
        })
        .await;
        on_drop.disarm();
        let done = done
            .map_err(|e| format!("the ABM worker task failed: {e}"))?
            .map_err(|e| e.to_string())?;
        self.pending.clear();
        self.reseed = None;
        self.history.push(plan);
        let step = |step: u64, values: &indexmap::IndexMap<String, Value>| {
            let values = values.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            Event::of(EventType::AbmStep, &AbmStep { step, values })
        };
        if fresh {
            sink.emit(step(0, &done.before));
        }
        for r in &done.report.records {
            sink.emit(step(r.step, &r.values));
        }
        self.snapshot = Some(done.snapshot);
        self.steps = done.report.steps;
        self.terminated = done.report.terminated;
        Ok(())
    }
}

/// Events that mark one turn of progress: a social turn's first step, a trading decision point,
/// an agent-based model's step. (Skipped social turns leave no event, so a count may stop short.)
pub fn counts_as_turn(e: &Event) -> bool {
    match e.kind {
        EventType::AgentProcessStart => e.data["step"] == 1,
        EventType::DecisionPoint | EventType::AbmStep => true,
        _ => false,
    }
}

impl Sim {
    pub fn kind(&self) -> &'static str {
        match self {
            Sim::Social(_) => "social",
            Sim::Trading(_) => "trading",
            Sim::Abm(_) => "abm",
        }
    }

    /// A copy for a new child node (social: `turns` reset as upstream's clone does).
    pub fn fork(&self) -> Sim {
        match self {
            Sim::Social(s) => Sim::Social(s.fork()),
            Sim::Trading(t) => Sim::Trading(t.clone()),
            Sim::Abm(a) => Sim::Abm(a.clone()),
        }
    }

    /// Upstream's per-node `turns` (social), or decision points done (trading).
    pub fn turns(&self) -> u64 {
        match self {
            Sim::Social(s) => s.turns,
            Sim::Trading(t) => t.decision_points_done() as u64,
            Sim::Abm(a) => a.steps,
        }
    }

    /// Makes sibling runs of one parent differ: agent-based replicates get their own seed.
    /// Social scenes and trading episodes are deterministic by design and stay identical.
    pub fn replicate(&mut self, salt: u64) {
        if let Sim::Abm(a) = self {
            a.reseed = Some(
                a.seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(salt.wrapping_mul(1442695040888963407) | 1),
            );
        }
    }

    /// Puts the random streams a run draws from at `seed`, whatever the state came from, so that
    /// runs of different cells with one seed are paired. Social scenes: the world's RNG (turn
    /// order, scene rules) and the seed the `scripted` player draws from; the `mock` dialect is
    /// deterministic by counters and real providers sample on their side, so neither follows the
    /// seed. Agent-based models: the worker reseeds the model before the next step. Trading
    /// episodes hold no random state: their replicates are identical.
    pub fn reseed(&mut self, seed: u64) {
        match self {
            Sim::Social(s) => {
                s.world.rng = crate::engine::rng::Rng::seeded(seed);
                s.world.llm.seed = seed;
            }
            Sim::Abm(a) => a.reseed = Some(seed),
            Sim::Trading(_) => {}
        }
    }

    /// Events waiting from construction (a scenario's initial broadcasts): the root's log.
    pub fn initial_events(&mut self) -> Vec<Event> {
        match self {
            Sim::Social(s) => {
                let mut events: Vec<Event> = Vec::new();
                s.flush_pending(&mut events);
                events
            }
            Sim::Trading(_) | Sim::Abm(_) => Vec::new(),
        }
    }

    /// Checks a simulator read from an untrusted export (after [`Sim::attach`]): its fields within
    /// the engine's limits, its indices in range.
    pub fn check_imported(&self) -> Result<(), String> {
        match self {
            Sim::Social(s) => s.check_limits(),
            Sim::Trading(t) => t.check_consistent(),
            Sim::Abm(a) => a.check_imported(),
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
    pub fn attach(&mut self, market: Option<&Arc<MarketData>>) {
        if let (Sim::Trading(t), Some(m)) = (self, market) {
            t.attach_market(m.clone());
        }
    }

    /// Runs `turns` turns (social) or decision points (trading), streaming events into `sink`.
    pub async fn run(&mut self, turns: u64, ctx: &RunCtx, sink: &mut (dyn EventSink + Send)) -> Result<(), String> {
        match self {
            Sim::Social(s) => s
                .run(turns, &*ctx.llm, sink)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string()),
            Sim::Trading(t) => {
                for _ in 0..turns {
                    if t.is_done() {
                        break;
                    }
                    match t.step(&*ctx.tools).await {
                        Ok(r) => sink.emit(Event::of(
                            EventType::DecisionPoint,
                            &DecisionEvent {
                                log: &r.log,
                                portfolio: r.portfolio,
                                value: r.value,
                                done: r.done,
                            },
                        )),
                        Err(e) => {
                            let error = e.to_string();
                            sink.emit(Event::of(
                                EventType::AgentError,
                                &AgentErrorEvent {
                                    agent: t.config().agent_id.clone(),
                                    step: t.decision_points_done() as u64 + 1,
                                    error: error.clone(),
                                },
                            ));
                            return Err(error);
                        }
                    }
                    tokio::task::yield_now().await;
                }
                Ok(())
            }
            Sim::Abm(a) => {
                let pool = ctx
                    .abm
                    .clone()
                    .ok_or("agent-based models need the Python worker, which is not available")?;
                a.run(turns, pool, sink).await
            }
        }
    }

    /// Applies one branch op; returns the events it produced. Nothing changes on error.
    pub fn apply_op(&mut self, op: &Op) -> Result<Vec<Event>, String> {
        match self {
            Sim::Social(s) => apply_social_op(s, op),
            Sim::Trading(t) => {
                let op = trading_op(op)?;
                t.apply_op(&op)?;
                Ok(Vec::new())
            }
            Sim::Abm(a) => {
                let patch = match op.clone() {
                    Op::AbmSetGlobal { name, value } => Patch::GlobalVariable { name, value },
                    Op::AbmSetEnvironment { name, value } => Patch::EnvironmentAttribute { name, value },
                    Op::AbmSetAgent {
                        agent_type,
                        name,
                        value,
                        agent_id,
                    } => Patch::AgentAttribute {
                        agent_type,
                        name,
                        value,
                        agent_id,
                    },
                    other => return Err(format!("Unknown op for an agent-based model: {}", op_name(&other))),
                };
                patch.check(&a.model).map_err(|e| e.to_string())?;
                a.pending.push(patch);
                Ok(Vec::new())
            }
        }
    }

    /// `GET …/state`: the agents and their context.
    pub fn state(&self) -> NodeState {
        match self {
            Sim::Social(sim) => NodeState {
                turns: sim.turns,
                agents: sim
                    .world
                    .agents
                    .iter()
                    .map(|a| AgentState {
                        name: a.name.clone(),
                        role: a.role().map(str::to_string),
                        plan_state: serde_json::to_value(&a.plan_state).unwrap_or(Value::Null),
                        short_memory: a
                            .short_memory
                            .iter()
                            .map(|m| MemoryLine {
                                role: m.role.as_str().to_string(),
                                content: m.content.to_string(),
                            })
                            .collect(),
                        emotion: a.emotion.clone(),
                    })
                    .collect(),
            },
            Sim::Trading(t) => {
                let mut memory = Vec::new();
                for ex in t.memory() {
                    let reply = serde_json::to_string(&ex.reply).unwrap_or_default();
                    memory.push(MemoryLine {
                        role: "assistant".into(),
                        content: reply,
                    });
                    for r in &ex.results {
                        memory.push(MemoryLine {
                            role: "tool".into(),
                            content: r.content.to_string(),
                        });
                    }
                }
                NodeState {
                    turns: t.decision_points_done() as u64,
                    agents: vec![AgentState {
                        name: t.config().agent_id.clone(),
                        role: Some("trader".into()),
                        plan_state: serde_json::to_value(t.agent()).unwrap_or(Value::Null),
                        short_memory: memory,
                        emotion: String::new(),
                    }],
                }
            }
            Sim::Abm(a) => NodeState {
                turns: a.steps,
                agents: Vec::new(),
            },
        }
    }

    /// The kind-specific view: scene state (social), portfolio, equity curve, trades and
    /// metrics (trading), or the model and its progress (agent-based).
    pub fn view(&self) -> NodeView {
        match self {
            Sim::Social(s) => NodeView::Social(SocialView {
                scene: s.scene.type_name().to_string(),
                state: s.scene.state_json(),
            }),
            Sim::Trading(t) => NodeView::Trading(Box::new(t.view())),
            Sim::Abm(a) => NodeView::Abm(AbmView {
                model: serde_json::to_value(&*a.model).unwrap_or(Value::Null),
                seed: a.seed,
                steps: a.steps,
                terminated: a.terminated.clone(),
                pending: a.pending.clone(),
                snapshot_bytes: a.snapshot.as_ref().map(|s| s.len() as u64),
            }),
        }
    }
}

/// The trading op a shared [`Op`] stands for.
fn trading_op(op: &Op) -> Result<TradingOp, String> {
    let v = serde_json::to_value(op).map_err(|e| e.to_string())?;
    match op {
        Op::PortfolioPatch { .. }
        | Op::CaseDataInject { .. }
        | Op::AgentSwap { .. }
        | Op::AgentPromptReplace { .. } => serde_json::from_value(v).map_err(|e| format!("{e}")),
        other => Err(format!("Unknown op for a trading episode: {}", op_name(other))),
    }
}

fn op_name(op: &Op) -> String {
    serde_json::to_value(op)
        .ok()
        .and_then(|v| v["op"].as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Applies one branch op to a social simulator (spec §2.3). Errors name what is wrong.
fn apply_social_op(sim: &mut Simulator, op: &Op) -> Result<Vec<Event>, String> {
    let agent_index = |sim: &Simulator, name: &str| {
        sim.world
            .agent_index(name)
            .ok_or_else(|| format!("unknown agent '{name}' (agents: {})", sim.world.names().join(", ")))
    };
    match op {
        Op::AgentCtxAppend { name, role, content } => {
            let i = agent_index(sim, name)?;
            let role = Role::parse_memory_role(role)
                .ok_or_else(|| format!("role must be 'user' or 'assistant', not '{role}'"))?;
            sim.world.agents[i].short_memory.append(role, content);
        }
        Op::AgentPlanReplace { name, plan_state } => {
            let i = agent_index(sim, name)?;
            let plan: PlanState = serde_json::from_value(plan_state.clone()).map_err(|e| format!("plan_state: {e}"))?;
            sim.world.agents[i].plan_state = plan;
        }
        Op::AgentPropsPatch { name, updates } => {
            let i = agent_index(sim, name)?;
            let props = &mut sim.world.agents[i].properties;
            for (k, v) in updates {
                props.insert(k.clone(), v.clone());
            }
        }
        Op::SceneStatePatch { updates } => sim.scene.patch_state(updates)?,
        Op::PublicBroadcast { text } => sim.broadcast(&SceneEvent::public(text.clone())),
        Op::Advance { .. } => return Err("Unknown op: advance (use the advance routes to run turns)".into()),
        other => return Err(format!("Unknown op for a social scene: {}", op_name(other))),
    }
    let mut events = sim.world.take_out();
    sim.world.flush_pending();
    events.extend(sim.world.take_out());
    Ok(events)
}
