//! The simulator: a scene plus a world, and the turn loop that drives them (spec §1.11).
//!
//! `run(n)` picks an agent with the ordering, shows it its status, lets it take up to
//! `max_steps_per_turn` steps (one LLM decision and at most one action each) and advances the
//! scene. Events reach the caller's sink in upstream's order (spec §7.2). A simulator is plain data:
//! `clone()` is cheap (persistent memories, small scene states) and independent of history length.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use simtree_shared::scene::ProseError;
use simtree_shared::{
    ActionEnd, ActionStart, AgentErrorEvent, AgentProcessEnd, AgentProcessStart, AgentState, MemoryLine, NodeState,
    PhaseAbout, SceneAbout, SceneProse, StepActions,
};

use super::action::{ActionCtx, ActionKind, Handled, Outcome};
use super::agent::{Agent, AgentError, Decision};
use super::event::{Event, EventPayload, EventSink, SceneEvent};
use super::hooks::HookError;
use super::ordering::{MODERATOR_INSTRUCTION, Ordering, Pick};
use super::parse::ActionCall;
use super::prompt::SceneText;
use super::scenes::{Scene, SceneError};
use super::world::World;
use crate::llm::chat::{Message, Role};
use crate::llm::{LlmClient, LlmError};

/// Upstream's default `max_steps_per_turn`.
pub(crate) const DEFAULT_MAX_STEPS: u32 = 5;

/// The most steps one turn may take. Scenario files and imported states beyond it are refused:
/// a turn is the unit a client waits for, and a turn of a billion steps never ends.
pub(crate) const MAX_STEPS_PER_TURN: u32 = 100;

///
/// Its parts are written only inside the engine: from outside, a branch op is
/// [`Simulator::apply_op`], a reseed [`Simulator::reseed`], and the rest is read through
/// [`Simulator::world`] and [`Simulator::scene`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Simulator {
    pub(in crate::engine) scene: Scene,
    pub(in crate::engine) world: World,
    pub(in crate::engine) max_steps_per_turn: u32,
    pub(in crate::engine) emotion_enabled: bool,
    /// Upstream's `turns`: non-skipped turns executed by the most recent `run` call (not
    /// cumulative; a fork starts at 0). Kept for the DevUI's summaries.
    pub(in crate::engine) turns: u64,
    /// Every turn ever run on this timeline, skipped ones included.
    #[serde(default)]
    pub(in crate::engine) total_turns: u64,
    /// The scenario document's own prose for its scene, in place of the scene's defaults in
    /// every prompt (absent, and not written, when the document gives none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::engine) prose: Option<Arc<SceneProse>>,
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunReport {
    /// Turns counted by this call (skipped turns included, as upstream's local counter).
    pub turns: u64,
    /// The scene reported completion.
    pub complete: bool,
    /// The ordering could not pick anyone (the run stopped early instead of spinning).
    pub(crate) stuck: bool,
}

/// A run that could not continue.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The LLM backend failed after its retries.
    #[error("{agent}: {source}")]
    Llm {
        agent: String,
        #[source]
        source: LlmError,
    },
    /// A custom scene's Python hook failed or answered what is not an effect; the turn it ran
    /// in was undone.
    #[error(transparent)]
    Hook(#[from] HookError),
}

/// A simulator from outside (an import) beyond what the engine runs.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    #[error("max_steps_per_turn must be between 1 and {MAX_STEPS_PER_TURN}, got {0}")]
    StepsPerTurn(u32),
    /// The scene's prose names an action its scene does not have, or is too long.
    #[error(transparent)]
    Prose(#[from] ProseError),
}

/// Why a simulation could not be built from its agents, scene and ordering.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BuildError {
    #[error("a simulation needs at least one agent")]
    NoAgents,
    #[error("duplicate agent name '{0}'")]
    DuplicateAgent(String),
    #[error("the llm_moderated ordering's moderator '{0}' is not an agent")]
    UnknownModerator(String),
    /// The scene refused its agents (its `pre_run`).
    #[error(transparent)]
    Scene(#[from] SceneError),
}

/// Construction-time settings.
#[derive(Clone, Debug)]
pub struct SimOptions {
    pub(crate) max_steps_per_turn: u32,
    pub(crate) emotion_enabled: bool,
    pub(crate) seed: u64,
    /// The document's prose for its scene (see [`Simulator::prose`]).
    pub(crate) prose: Option<Arc<SceneProse>>,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions { max_steps_per_turn: DEFAULT_MAX_STEPS, emotion_enabled: false, seed: 0, prose: None }
    }
}

impl Simulator {
    /// A simulator whose agents take turns in list order, with the default options (for tests).
    #[cfg(test)]
    pub(crate) fn in_order(agents: Vec<Agent>, scene: Scene) -> Result<Self, BuildError> {
        let ordering = Ordering::Sequential { names: vec![], idx: 0 };
        Self::build(agents, scene, ordering, SimOptions::default())
    }

    /// Builds a fresh simulation: every agent is initialised by the scene and gets the scene's
    /// actions it lacks, the scene's initial event is broadcast, then the scene's `pre_run` runs.
    /// Builder-time deltas are dropped; the queued `system_broadcast`s stay pending (they become
    /// the root node's log), as upstream.
    pub(crate) fn build(
        agents: Vec<Agent>,
        mut scene: Scene,
        ordering: Ordering,
        opts: SimOptions,
    ) -> Result<Self, BuildError> {
        if agents.is_empty() {
            return Err(BuildError::NoAgents);
        }
        let mut agents = agents;
        for i in 0..agents.len() {
            if agents[..i].iter().any(|a| a.name == agents[i].name) {
                return Err(BuildError::DuplicateAgent(agents[i].name.clone()));
            }
        }
        if let Some(m) = ordering.moderator()
            && !agents.iter().any(|a| a.name == m)
        {
            return Err(BuildError::UnknownModerator(m.to_string()));
        }
        let rules = scene.rules_mut();
        for agent in &mut agents {
            agent.emotion_enabled |= opts.emotion_enabled;
            rules.initialize_agent(agent);
            for kind in rules.scene_actions(agent) {
                if !agent.action_space.contains(&kind) {
                    agent.action_space.push(kind);
                }
            }
        }
        let mut ordering = ordering;
        ordering.attach(&agents);
        let mut sim = Simulator {
            world: World::new(agents, ordering, opts.seed),
            scene,
            max_steps_per_turn: opts.max_steps_per_turn.max(1),
            emotion_enabled: opts.emotion_enabled,
            turns: 0,
            total_turns: 0,
            prose: opts.prose,
        };
        let initial = SceneEvent::public(sim.scene.rules().initial_event().to_string());
        sim.broadcast(&initial);
        sim.scene.rules_mut().pre_run(&mut sim.world)?;
        sim.world.take_out();
        Ok(sim)
    }

    /// Broadcasts a public event at the current scene time (builder announcements and the
    /// `public_broadcast` branch op). Deltas go to the output buffer; drain them with
    /// [`Simulator::drain`] or drop them with `world.take_out()`.
    pub(crate) fn broadcast(&mut self, event: &SceneEvent) {
        let time = Some(self.scene.rules().time());
        self.world.broadcast(event, time, None);
    }

    /// A copy for a new tree node: same state, `turns` reset as upstream's clone does.
    pub fn fork(&self) -> Self {
        let mut s = self.clone();
        s.turns = 0;
        s
    }

    pub fn is_complete(&self) -> bool {
        self.scene.rules().is_complete()
    }

    /// Sends buffered events to `sink`, in order.
    pub(crate) fn drain(&mut self, sink: &mut (dyn EventSink + Send)) {
        for e in self.world.take_out() {
            sink.emit(e);
        }
    }

    /// Flushes the deferred queue to `sink` (e.g. a fresh scenario's initial broadcasts).
    pub fn flush_pending(&mut self, sink: &mut (dyn EventSink + Send)) {
        self.world.flush_pending();
        self.drain(sink);
    }

    /// Runs `max_turns` turns to completion on a private current-thread runtime and returns the
    /// events (tests, benchmarks and the CLI; the server awaits [`Simulator::run`] instead).
    pub fn run_blocking(&mut self, max_turns: u64, llm: &dyn LlmClient) -> (Result<RunReport, RunError>, Vec<Event>) {
        let mut events = Vec::new();
        let rt = tokio::runtime::Builder::new_current_thread().build().expect("a current-thread runtime");
        let report = rt.block_on(self.run(max_turns, llm, &mut events));
        (report, events)
    }

    fn emit<P: EventPayload>(&mut self, payload: &P) {
        self.world.emit(payload);
    }

    /// Runs up to `max_turns` turns.
    pub async fn run(
        &mut self,
        max_turns: u64,
        llm: &dyn LlmClient,
        sink: &mut (dyn EventSink + Send),
    ) -> Result<RunReport, RunError> {
        let result = self.run_inner(max_turns, llm, sink).await;
        self.drain(sink);
        result
    }

    async fn run_inner(
        &mut self,
        max_turns: u64,
        llm: &dyn LlmClient,
        sink: &mut (dyn EventSink + Send),
    ) -> Result<RunReport, RunError> {
        let mut report = RunReport { turns: 0, complete: false, stuck: false };
        // Names picked that are not agents (cycled orderings) do not count as turns; a bound keeps
        // a list of only stale names from spinning forever.
        let mut misses = 0usize;
        while report.turns < max_turns {
            if self.is_complete() {
                report.complete = true;
                break;
            }
            let Some(name) = self.pick(llm, sink).await? else {
                report.stuck = true;
                break;
            };
            let Some(idx) = self.world.agent_index(&name) else {
                misses += 1;
                if misses > 10_000 {
                    report.stuck = true;
                    break;
                }
                continue;
            };
            misses = 0;
            // A scene with hooks runs each turn as a whole or not at all: its events are held
            // back, and a hook's failure puts the simulator back as the turn found it.
            let before = self.has_hooks().then(|| self.clone());
            let mut held: Vec<Event> = Vec::new();
            let turn_sink: &mut (dyn EventSink + Send) = if before.is_some() { &mut held } else { &mut *sink };
            let skipped = self.turn(idx, &name, llm, turn_sink).await;
            if let Some(failure) = self.world.hook_failure.take()
                && let Some(before) = before
            {
                *self = before;
                return Err(RunError::Hook(failure));
            }
            for event in held {
                sink.emit(event);
            }
            let skipped = skipped?;
            report.turns += 1;
            self.total_turns += 1;
            if skipped {
                continue;
            }
            self.turns = report.turns;
            if sink.wants_state() {
                sink.state(self.node_state());
            }
            // Let the executor run other tasks (and cancel this one) between turns: with the mock
            // LLM a run never waits on anything otherwise.
            yield_now().await;
        }
        report.complete |= self.is_complete();
        Ok(report)
    }

    /// `GET …/state`: the turns run and each agent's role, plan, memory and emotion.
    pub(crate) fn node_state(&self) -> NodeState {
        NodeState {
            turns: self.turns,
            agents: self
                .world
                .agents
                .iter()
                .map(|a| AgentState {
                    name: a.name.clone(),
                    role: a.role().map(str::to_string),
                    plan_state: serde_json::to_value(&a.plan_state).unwrap_or(serde_json::Value::Null),
                    short_memory: a
                        .short_memory
                        .iter()
                        .map(|m| MemoryLine { role: m.role.as_str().to_string(), content: m.content.to_string() })
                        .collect(),
                    emotion: a.emotion.clone(),
                    properties: a.properties.clone(),
                })
                .collect(),
        }
    }

    /// Checks a simulator read from an untrusted export against the engine's limits.
    pub(crate) fn check_limits(&self) -> Result<(), LimitError> {
        if !(1..=MAX_STEPS_PER_TURN).contains(&self.max_steps_per_turn) {
            return Err(LimitError::StepsPerTurn(self.max_steps_per_turn));
        }
        if let Some(prose) = &self.prose {
            prose.check(self.scene.kind())?;
        }
        Ok(())
    }

    /// Whether the scene calls Python hooks (its turns are then run whole or undone).
    fn has_hooks(&self) -> bool {
        matches!(&self.scene, Scene::Custom(c) if c.has_hooks())
    }

    /// One turn of agent `idx`: its status line, then its steps unless the scene skips it
    /// (`Ok(true)`). Events go to `sink`; a hook's failure stops the turn where it happened.
    async fn turn(
        &mut self,
        idx: usize,
        name: &str,
        llm: &dyn LlmClient,
        sink: &mut (dyn EventSink + Send),
    ) -> Result<bool, RunError> {
        let status = self.scene.rules().status_prompt(&self.world.agents[idx]);
        if !status.is_empty() {
            let line = SceneEvent::Status { data: status }.line(Some(self.scene.rules().time()));
            self.world.feedback(idx, &line);
        }
        let skipped = self.scene.rules().should_skip_turn(&self.world.agents[idx]);
        if !skipped {
            self.world.flush_pending();
            let taken = self.take_turn(idx, llm, sink).await;
            if self.world.hook_failure.is_some() {
                return Ok(false);
            }
            taken?;
        }
        self.end_turn(idx, name);
        self.drain(sink);
        Ok(skipped)
    }

    fn end_turn(&mut self, idx: usize, name: &str) {
        self.scene.rules_mut().post_turn(idx, &mut self.world);
        self.world.flush_pending();
        self.world.ordering.post_turn(name);
    }

    /// Up to `max_steps_per_turn` decisions of one agent.
    async fn take_turn(
        &mut self,
        idx: usize,
        llm: &dyn LlmClient,
        sink: &mut (dyn EventSink + Send),
    ) -> Result<(), RunError> {
        let agent_name = self.world.agents[idx].name.clone();
        for step in 1..=self.max_steps_per_turn {
            self.emit(&AgentProcessStart { agent: agent_name.clone(), step: step.into() });
            self.drain(sink);
            let process_end = |actions| AgentProcessEnd { agent: agent_name.clone(), step: step.into(), actions };
            let actions = match self.decide(idx, llm, false).await {
                Ok(Decision::Idle) => {
                    self.emit(&process_end(StepActions::Idle {}));
                    break;
                }
                Ok(Decision::Acted(actions)) => {
                    self.emit(&process_end(StepActions::Acted(actions.clone())));
                    actions
                }
                Err(AgentError::Llm(source)) => {
                    self.agent_error(&agent_name, step, &source.to_string());
                    return Err(RunError::Llm { agent: agent_name, source });
                }
                Err(e @ AgentError::Unparseable { .. }) => {
                    // Upstream swallows the exception and consumes the step.
                    self.agent_error(&agent_name, step, &e.to_string());
                    continue;
                }
            };
            if actions.is_empty() {
                break;
            }
            let mut yielded = false;
            for call in &actions {
                self.emit(&ActionStart { agent: agent_name.clone(), action: call.clone() });
                let handled = self.act(idx, call, llm).await?;
                if self.world.hook_failure.is_some() {
                    return Ok(());
                }
                match handled {
                    Ok(outcome) => {
                        let pass_control = outcome.pass_control;
                        self.emit(&action_end(&agent_name, call, outcome));
                        self.world.flush_pending();
                        if pass_control {
                            yielded = true;
                            break;
                        }
                    }
                    Err(e) => {
                        self.agent_error(&agent_name, step, &e.0);
                        break;
                    }
                }
            }
            self.drain(sink);
            if yielded {
                break;
            }
            // Steps of one turn can be many; let other tasks (and a cancel) in between them.
            yield_now().await;
        }
        Ok(())
    }

    fn agent_error(&mut self, agent: &str, step: u32, error: &str) {
        self.emit(&AgentErrorEvent { agent: agent.to_string(), step: step.into(), error: error.to_string() });
    }

    /// The scene's part of agent `idx`'s system prompt: its own text with the document's prose
    /// in place.
    pub(crate) fn prompt_text(&self, idx: usize) -> SceneText {
        self.scene
            .rules()
            .text_for(&self.world.agents[idx])
            .with_prose(self.prose.as_ref())
            .with_catalogue(super::scenes::action_spec)
    }

    /// Agent `idx`'s system prompt and memory, as its next decision sends them.
    fn context(&self, idx: usize) -> Vec<Message> {
        let agent = &self.world.agents[idx];
        let text = self.prompt_text(idx);
        let (system, state) = super::prompt::agent_prompt(agent, &text);
        let mut ctx = Vec::with_capacity(agent.short_memory.len() + 2);
        ctx.push(Message::new(Role::System, system));
        ctx.extend(agent.short_memory.iter().cloned());
        if let Some(state) = state {
            super::agent::state_last(&mut ctx, state);
        }
        ctx
    }

    /// The prompt an interview of agent `name` sends: exactly the context its next decision
    /// would see (its system prompt and memory), then `question` as a user turn (merged into a
    /// last user entry, as memory merges). `None` for an unknown agent. Nothing changes.
    pub(crate) fn interview(&self, name: &str, question: &str) -> Option<Vec<Message>> {
        let idx = self.world.agent_index(name)?;
        let mut ctx = self.context(idx);
        let turn = format!(
            "[Interview] {question}\nAnswer the interviewer in your own words. This is a question, not a turn: take no action."
        );
        match ctx.last_mut() {
            Some(last) if last.role == Role::User => {
                *last = Message::new(Role::User, format!("{}\n{turn}", last.content));
            }
            _ => ctx.push(Message::new(Role::User, turn)),
        }
        Some(ctx)
    }

    /// The prompt agent `idx` would send if its turn came now: the scene's status line given
    /// and deferred events delivered first, as [`Simulator::run`] does before a turn. On a
    /// fresh simulator that is its first prompt, before anyone has acted. Nothing changes.
    pub(crate) fn opening_prompt(&self, idx: usize) -> Vec<Message> {
        let mut sim = self.clone();
        let status = sim.scene.rules().status_prompt(&sim.world.agents[idx]);
        if !status.is_empty() {
            let line = SceneEvent::Status { data: status }.line(Some(sim.scene.rules().time()));
            sim.world.feedback(idx, &line);
        }
        sim.world.flush_pending();
        sim.context(idx)
    }

    /// The agents, who acts next, the random stream and the LLM state (read only).
    pub fn world(&self) -> &World {
        &self.world
    }

    /// The scene and its state (read only).
    pub fn scene(&self) -> &Scene {
        &self.scene
    }

    /// The document's own prose for the scene, if it (or a `scene_prose_set`) gave any.
    pub fn prose(&self) -> Option<&SceneProse> {
        self.prose.as_deref()
    }

    /// Turns counted by the most recent run (upstream's `turns`).
    pub(crate) fn turns(&self) -> u64 {
        self.turns
    }

    /// The most steps one agent's turn may take.
    pub(crate) fn max_steps_per_turn(&self) -> u32 {
        self.max_steps_per_turn
    }

    /// Puts the world's random stream (turn order, scene rules) and the seed the `scripted`
    /// player draws from at `seed`.
    pub(crate) fn reseed(&mut self, seed: u64) {
        self.world.rng = super::rng::Rng::seeded(seed);
        self.world.llm.seed = seed;
    }

    /// Drops the events not yet handed to a sink (a builder's announcements: they wait in the
    /// pending queue as the root's log).
    pub(crate) fn discard_output(&mut self) {
        self.world.take_out();
    }

    /// What runs the custom scene's Python hooks during the next runs.
    pub(crate) fn set_hooks(&mut self, hooks: super::hooks::Hooks) {
        self.world.hooks = hooks;
    }

    /// The offline player the agents' calls go to (`None`: the run's LLM client).
    pub(crate) fn set_offline(&mut self, offline: Option<crate::llm::Offline>) {
        self.world.llm.offline = offline;
    }

    /// Lays every agent's prompts out with its emotion and plan last (see
    /// `prompt::state_message`), for a tree created so.
    pub fn set_state_last(&mut self) {
        for agent in &mut self.world.agents {
            agent.state_last = true;
        }
    }

    /// How the agents' prompts are laid out: with the state last when any agent's is (a tree's
    /// agents are laid out alike, from its creation on).
    pub(crate) fn prompt_layout(&self) -> simtree_shared::PromptLayout {
        if self.world.agents.iter().any(|a| a.state_last) {
            simtree_shared::PromptLayout::StateLast
        } else {
            simtree_shared::PromptLayout::Upstream
        }
    }

    /// Keys the calls of the run about to start to `affinity` (see `LlmState::start_run`).
    pub(crate) fn start_run(&mut self, affinity: u64) {
        self.world.llm.start_run(affinity);
    }

    /// Tells the run's calls how many sibling runs start from its node (see `LlmState::fan_out`).
    pub(crate) fn set_fan_out(&mut self, n: u32) {
        self.world.llm.fan_out = n;
    }

    /// The `scene_prose_set` op: each part of `given` replaces that part of the prose the
    /// prompts carry from now on; the rest stays. Refused (nothing changed) when `given` names an
    /// action the scene does not have, or a part is too long.
    pub(crate) fn set_prose(&mut self, given: &SceneProse) -> Result<(), ProseError> {
        given.check(self.scene.kind())?;
        let prose = self.prose.as_deref().cloned().unwrap_or_default().merged(given);
        self.prose = (!prose.is_empty()).then(|| Arc::new(prose));
        Ok(())
    }

    /// What the scene tells its agents: its prose as the prompts carry it (the document's in
    /// place of the type's), and a custom scene's roles, phases and outcomes.
    pub(crate) fn scene_about(&self) -> SceneAbout {
        let text = self.scene.rules().text().with_prose(self.prose.as_ref());
        let mut about = SceneAbout {
            kind: self.scene.kind(),
            description: text.description,
            rules: text.guidelines,
            examples: text.examples,
            roles: Vec::new(),
            phases: Vec::new(),
            outcomes: Vec::new(),
        };
        if let Scene::Custom(c) = &self.scene {
            about.roles.clone_from(&c.config.roles);
            about.phases = c
                .config
                .phases
                .iter()
                .map(|p| PhaseAbout { name: p.name.clone(), description: p.description.clone() })
                .collect();
            about.outcomes.clone_from(&c.config.outcomes);
        }
        about
    }

    /// One `process` call of agent `idx`.
    async fn decide(&mut self, idx: usize, llm: &dyn LlmClient, initiative: bool) -> Result<Decision, AgentError> {
        let text = self.prompt_text(idx);
        let World { agents, llm: state, out, .. } = &mut self.world;
        agents[idx].process(|a| super::prompt::agent_prompt(a, &text), llm, state, out, initiative).await
    }

    /// Runs one action through the agent's action space and the scene. The outer error is an LLM
    /// failure (ends the run); the inner one an action that could not execute (step consumed).
    async fn act(&mut self, idx: usize, call: &ActionCall, llm: &dyn LlmClient) -> Result<Handled, RunError> {
        if let Some(handled) = self.scene.rules_mut().handle_own(idx, call, &mut self.world) {
            return Ok(handled);
        }
        let Some(kind) = self.world.agents[idx].action_space.iter().copied().find(|k| k.name() == call.name) else {
            return Ok(Ok(Outcome::silent()));
        };
        let mut ctx = ActionCtx { call, kind, actor: idx, llm_reply: None };
        if let Some(request) = self.scene.rules().llm_request(&ctx, &self.world) {
            let agent = self.world.agents[idx].name.clone();
            self.world.llm.speaker = Some(agent.clone());
            let reply = llm.chat(&request, &mut self.world.llm).await;
            self.world.llm.speaker = None;
            let reply = reply.map_err(|source| RunError::Llm { agent, source })?;
            ctx.llm_reply = Some(reply);
        }
        Ok(self.scene.rules_mut().handle(&ctx, &mut self.world))
    }

    /// Next agent name from the ordering; asks the moderator when a moderated queue runs empty.
    async fn pick(
        &mut self,
        llm: &dyn LlmClient,
        sink: &mut (dyn EventSink + Send),
    ) -> Result<Option<String>, RunError> {
        for _ in 0..2 {
            let controlled = matches!(self.world.ordering, Ordering::Controlled)
                .then(|| self.scene.rules().controlled_next(&self.world))
                .flatten();
            let World { ordering, agents, rng, .. } = &mut self.world;
            match ordering.pick(agents, rng, controlled) {
                Pick::Name(n) => return Ok(Some(n)),
                Pick::Stuck => return Ok(None),
                Pick::NeedsModerator => {
                    self.ask_moderator(llm).await?;
                    self.world.ordering.fill_if_empty();
                    self.drain(sink);
                }
            }
        }
        Ok(None)
    }

    /// The moderator refill of the `llm_moderated` ordering (spec §1.9): one initiative decision
    /// whose `schedule_order` action fills the queue; its `action_end` is logged without a start.
    async fn ask_moderator(&mut self, llm: &dyn LlmClient) -> Result<(), RunError> {
        let Some(moderator) = self.world.ordering.moderator().map(str::to_string) else {
            return Ok(());
        };
        let Some(idx) = self.world.agent_index(&moderator) else {
            return Ok(());
        };
        self.world.feedback(idx, &format!("[System] {MODERATOR_INSTRUCTION}"));
        let actions = match self.decide(idx, llm, true).await {
            Ok(Decision::Acted(actions)) => actions,
            Ok(Decision::Idle) => Vec::new(),
            Err(AgentError::Llm(source)) => {
                return Err(RunError::Llm { agent: moderator, source });
            }
            Err(e) => {
                self.agent_error(&moderator, 0, &e.to_string());
                return Ok(());
            }
        };
        let Some(call) = actions.iter().find(|a| a.name == ActionKind::ScheduleOrder.name()) else {
            self.agent_error(&moderator, 0, "the moderator did not answer with a schedule_order action");
            return Ok(());
        };
        match self.act(idx, call, llm).await? {
            Ok(outcome) => self.emit(&action_end(&moderator, call, outcome)),
            Err(e) => self.agent_error(&moderator, 0, &e.0),
        }
        Ok(())
    }
}

/// A runtime-agnostic `yield`: pending once, ready when polled again.
async fn yield_now() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            std::task::Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    })
    .await
}

fn action_end(agent: &str, call: &ActionCall, o: Outcome) -> ActionEnd {
    ActionEnd {
        agent: agent.to_string(),
        action: call.clone(),
        success: o.success,
        result: o.result,
        summary: o.summary,
        pass_control: o.pass_control,
    }
}

/// Collects events into JSON lines (used by the CLI and tests).
pub fn event_json(e: &Event) -> String {
    serde_json::to_string(e).unwrap_or_default()
}
