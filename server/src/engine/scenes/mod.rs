//! Scenes: the environment agents act in — its state, its rules, the actions it adds, how it
//! delivers messages and what a turn does to it (spec §1.7, §1.10).
//!
//! Each scene lives in its own file as a struct implementing [`SceneRules`]; [`Scene`] is the
//! closed set of them, serialised as upstream's `{type, name, initial_event, state, config}`.
//! A scene's `state` is a typed struct; [`Scene::patch_state`] applies a JSON patch through it, so
//! a bad key or a wrong type is an error that changes nothing.
//!
//! This module is also where the scenes meet the action registry: each scene file lists the
//! prompt text of the actions it adds (`ACTIONS`), and [`ActionKind::spec`] looks an action up in
//! those lists and the shared one. The registry (`engine/action.rs`) names no scene.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::action::{ActionCtx, ActionKind, ActionSpec, Handled, SHARED_ACTIONS};
use super::agent::Agent;
use super::event::SceneEvent;
use super::memory::Message;
use super::parse::ActionCall;
use super::prompt::SceneText;
use super::world::World;
use shared::SharedActionScene;
pub(crate) use shared::handle_common;
pub use simtree_shared::SceneKind;
use simtree_shared::scene::COMMON_ACTIONS;
use simtree_shared::{ActionInfo, SceneTypeInfo};

/// The [`SceneRules`] methods every scene writes alike: its clock is `state.time` and its
/// opening event `initial_event`.
macro_rules! clock_and_opening {
    () => {
        fn time(&self) -> i64 {
            self.state.time
        }
        fn set_time(&mut self, minutes: i64) {
            self.state.time = minutes;
        }
        fn initial_event(&self) -> &str {
            &self.initial_event
        }
    };
}

pub mod council;
pub mod custom;
pub mod landlord;
mod shared;
pub mod simple_chat;
pub mod village;
pub mod werewolf;

/// The rules every scene provides. Defaults are upstream's base-class behaviour.
/// Why a scene could not be built, set up for its agents or patched. The messages are the ones
/// users read (a scenario's `scene.config` error, a refused `scene_state_patch`), so each names
/// the field or value at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SceneError {
    /// The config does not deserialise: the JSON path of the offending field (`None` when the
    /// config as a whole is wrong) and serde's message.
    #[error("{}{message}", path.as_deref().map(|p| format!("{p}: ")).unwrap_or_default())]
    Config { path: Option<String>, message: String },
    /// Landlord: a deck count other than one or two.
    #[error("num_decks must be 1 or 2, got {0}")]
    Decks(u64),
    /// Landlord: a table of other than four players.
    #[error("the landlord scene needs exactly 4 agents, got {0}")]
    Players(usize),
    /// Council: `config.chair` names no agent of the scene.
    #[error("scene.config.chair: '{0}' is not an agent of this scene")]
    UnknownChair(String),
    /// Village: a map side of zero or beyond the limit (`what` is `width` or `height`).
    #[error("map {what} must be between 1 and {max}, got {side}", max = village::MAX_SIDE)]
    MapSide { what: &'static str, side: i64 },
    /// Village: a tile that costs less than nothing to enter.
    #[error("tile ({x}, {y}) has a negative movement_cost {cost}")]
    NegativeCost { x: i64, y: i64, cost: i64 },
    /// Village: two places with one name.
    #[error("location '{0}' is listed twice")]
    DuplicateLocation(String),
    /// A state patch names a key the scene's state does not have.
    #[error("unknown scene state key '{key}' (known: {})", known.join(", "))]
    UnknownStateKey { key: String, known: Vec<String> },
    /// A state patch whose result is not a valid state (serde's message, naming the field).
    #[error("invalid scene state: {0}")]
    InvalidState(String),
    /// A custom scene's document or agents, refused at a path inside the document.
    #[error(transparent)]
    Custom(#[from] custom::check::CustomError),
    /// The scene could not be written as JSON to patch it, or has no `state` (neither happens
    /// with the built-in scenes).
    #[error("{0}")]
    Unpatchable(String),
}

pub trait SceneRules {
    /// Scene time in minutes (1080 = 18:00).
    fn time(&self) -> i64;
    fn set_time(&mut self, minutes: i64);
    /// Minutes added by the base `post_turn`.
    fn minutes_per_turn(&self) -> i64 {
        3
    }
    fn initial_event(&self) -> &str;
    /// Scenario description, behaviour guidelines and examples for the system prompt.
    fn text(&self) -> SceneText;
    /// The text of `agent`'s prompt: the scene's, unless what it shows depends on the agent
    /// (a custom scene's role instructions and the actions legal for it now).
    fn text_for(&self, _agent: &Agent) -> SceneText {
        self.text()
    }
    /// Actions the scene adds to every agent's action space (after the agent's own).
    fn scene_actions(&self, agent: &Agent) -> Vec<ActionKind>;
    fn initialize_agent(&mut self, _agent: &mut Agent) {}
    /// Runs once after the initial broadcast when a simulation is built.
    fn pre_run(&mut self, _world: &mut World) -> Result<(), SceneError> {
        Ok(())
    }
    fn should_skip_turn(&self, _agent: &Agent) -> bool {
        false
    }
    fn is_complete(&self) -> bool {
        false
    }
    /// Private status shown to an agent at the start of its turn (empty = none).
    fn status_prompt(&self, _agent: &Agent) -> String {
        String::new()
    }
    /// The next agent for the `controlled` ordering.
    fn controlled_next(&self, _world: &World) -> Option<String> {
        None
    }
    /// Speaking range (Manhattan) for `talk_to`, where the scene has a map.
    fn chat_range(&self) -> Option<i64> {
        None
    }
    /// Executes one action of the acting agent's action space.
    fn handle(&mut self, ctx: &ActionCtx, world: &mut World) -> Handled {
        handle_common(self, ctx, world)
    }
    /// Executes an action the scene defines itself (a custom scene's), by name; `None` for any
    /// other name, which the registry's actions then handle.
    fn handle_own(&mut self, _actor: usize, _call: &ActionCall, _world: &mut World) -> Option<Handled> {
        None
    }
    /// An LLM request the simulator should make before `handle` (its answer arrives as
    /// `ctx.llm_reply`). Only council's `request_brief` needs one.
    fn llm_request(&self, _ctx: &ActionCtx, _world: &World) -> Option<Vec<Message>> {
        None
    }
    /// The sender reads its own line, then everyone else gets it via `broadcast`.
    fn deliver_message(&mut self, event: &SceneEvent, sender: usize, world: &mut World) {
        let time = Some(self.time());
        world.feedback(sender, &event.line(time));
        world.broadcast(event, time, None);
    }
    fn post_turn(&mut self, _actor: usize, _world: &mut World) {
        self.set_time(self.time().saturating_add(self.minutes_per_turn()));
    }
}

/// The shared handlers see a scene through its rules.
impl<T: SceneRules + ?Sized> SharedActionScene for T {
    fn time(&self) -> i64 {
        SceneRules::time(self)
    }
    fn chat_range(&self) -> Option<i64> {
        SceneRules::chat_range(self)
    }
    fn deliver_message(&mut self, event: &SceneEvent, sender: usize, world: &mut World) {
        SceneRules::deliver_message(self, event, sender, world)
    }
}

/// Every action's prompt text: the shared actions', then each scene's.
const CATALOGUE: [&[(ActionKind, ActionSpec)]; 5] =
    [SHARED_ACTIONS, council::ACTIONS, landlord::ACTIONS, village::ACTIONS, werewolf::ACTIONS];

/// An action's default prompt text, from the catalogue of the shared and the scenes' actions.
pub(crate) fn action_spec(kind: ActionKind) -> &'static ActionSpec {
    CATALOGUE
        .iter()
        .flat_map(|list| *list)
        .find(|(k, _)| *k == kind)
        .map(|(_, spec)| spec)
        .expect("every action kind is in the catalogue (checked by a test)")
}

/// What `GET /api/scene-types` shows of each scene type a document is offered: its actions and
/// its default prose, as a scene of the type with its default `config` has them (a custom scene
/// has no default `config`, so no default prose: its document writes all of it).
pub(crate) fn scene_types() -> Vec<SceneTypeInfo> {
    SceneKind::OFFERED
        .into_iter()
        .map(|kind| {
            let text = match kind {
                SceneKind::Custom => SceneText::default(),
                _ => Scene::build(kind, String::new(), String::new(), Value::Null)
                    .map(|s| s.rules().text())
                    .expect("every shipped scene type builds with its default config (checked by a test)"),
            };
            SceneTypeInfo {
                kind,
                summary: kind.summary().to_string(),
                actions: kind
                    .catalogue()
                    .map(|a| ActionInfo {
                        name: a,
                        common: COMMON_ACTIONS.contains(&a),
                        description: action_spec(a).desc.to_string(),
                        usage: action_spec(a).instruction.to_string(),
                    })
                    .collect(),
                description: text.description,
                rules: text.guidelines,
                examples: text.examples,
            }
        })
        .collect()
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum Scene {
    #[serde(rename = "simple_chat_scene", alias = "emotional_conflict_scene")]
    SimpleChat(simple_chat::SimpleChat),
    #[serde(rename = "council_scene")]
    Council(council::Council),
    #[serde(rename = "werewolf_scene")]
    Werewolf(werewolf::Werewolf),
    #[serde(rename = "landlord_scene")]
    Landlord(landlord::Landlord),
    #[serde(rename = "village_scene")]
    Village(village::Village),
    #[serde(rename = "custom_scene")]
    Custom(custom::Custom),
}

macro_rules! each_scene {
    ($self:expr, $s:ident => $body:expr) => {
        match $self {
            Scene::SimpleChat($s) => $body,
            Scene::Council($s) => $body,
            Scene::Werewolf($s) => $body,
            Scene::Landlord($s) => $body,
            Scene::Village($s) => $body,
            Scene::Custom($s) => $body,
        }
    };
}

impl Scene {
    /// Builds a scene from a scenario's `scene` block. `config` is scene-specific; unknown or
    /// ill-typed keys are errors naming the field.
    pub(crate) fn build(
        kind: SceneKind,
        name: String,
        initial_event: String,
        config: Value,
    ) -> Result<Scene, SceneError> {
        Ok(match kind {
            SceneKind::SimpleChat | SceneKind::EmotionalConflict => {
                Scene::SimpleChat(simple_chat::SimpleChat::new(name, initial_event, parse_config(config)?))
            }
            SceneKind::Council => Scene::Council(council::Council::new(name, initial_event, parse_config(config)?)),
            SceneKind::Werewolf => Scene::Werewolf(werewolf::Werewolf::new(name, initial_event, parse_config(config)?)),
            SceneKind::Landlord => {
                Scene::Landlord(landlord::Landlord::new(name, initial_event, parse_config(config)?)?)
            }
            SceneKind::Village => Scene::Village(village::Village::new(name, initial_event, parse_config(config)?)),
            SceneKind::Custom => Scene::Custom(custom::Custom::new(name, initial_event, config)?),
        })
    }

    /// The scene's type as documents name it.
    pub(crate) fn kind(&self) -> SceneKind {
        match self {
            Scene::SimpleChat(_) => SceneKind::SimpleChat,
            Scene::Council(_) => SceneKind::Council,
            Scene::Werewolf(_) => SceneKind::Werewolf,
            Scene::Landlord(_) => SceneKind::Landlord,
            Scene::Village(_) => SceneKind::Village,
            Scene::Custom(_) => SceneKind::Custom,
        }
    }

    /// Upstream's scene type string (`simple_chat_scene`, …).
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Scene::SimpleChat(_) => "simple_chat_scene",
            Scene::Council(_) => "council_scene",
            Scene::Werewolf(_) => "werewolf_scene",
            Scene::Landlord(_) => "landlord_scene",
            Scene::Village(_) => "village_scene",
            Scene::Custom(_) => "custom_scene",
        }
    }

    pub(crate) fn rules(&self) -> &dyn SceneRules {
        each_scene!(self, s => s)
    }

    pub(crate) fn rules_mut(&mut self) -> &mut dyn SceneRules {
        each_scene!(self, s => s)
    }

    /// The scene's `state` as JSON.
    pub fn state_json(&self) -> Value {
        let full = serde_json::to_value(self).unwrap_or(Value::Null);
        full.get("state").cloned().unwrap_or(Value::Null)
    }

    /// Shallow-assigns `updates` into the scene state. Every key must already exist and the result
    /// must still be a valid state; otherwise nothing changes.
    pub(crate) fn patch_state(&mut self, updates: &Map<String, Value>) -> Result<(), SceneError> {
        let mut full = serde_json::to_value(&*self).map_err(|e| SceneError::Unpatchable(e.to_string()))?;
        let state = full
            .get_mut("state")
            .and_then(Value::as_object_mut)
            .ok_or_else(|| SceneError::Unpatchable("scene has no state".into()))?;
        for (k, v) in updates {
            if !state.contains_key(k) {
                return Err(SceneError::UnknownStateKey { key: k.clone(), known: state.keys().cloned().collect() });
            }
            state.insert(k.clone(), v.clone());
        }
        *self = serde_json::from_value(full).map_err(|e| SceneError::InvalidState(e.to_string()))?;
        Ok(())
    }
}

/// Tests: runs `call` as agent `actor` straight through a scene's handler.
#[cfg(test)]
pub(crate) fn act_as<S: SceneRules + ?Sized>(
    scene: &mut S,
    world: &mut World,
    actor: &str,
    call: &crate::engine::parse::ActionCall,
) -> Handled {
    let kind = ActionKind::from_name(&call.name).expect("a registered action");
    let actor = world.agent_index(actor).expect("an agent of the test world");
    scene.handle(&ActionCtx { call, kind, actor, llm_reply: None }, world)
}

/// Tests: what a scene must answer to an action it refuses (see [`check_refusal`]).
#[cfg(test)]
pub struct Refused<'a> {
    /// The action's result as it is logged: `{"error": code, …}`.
    result: Value,
    /// The outcome's summary.
    summary: &'a str,
    /// The one line the actor alone is told.
    told: &'a str,
}

#[cfg(test)]
impl<'a> Refused<'a> {
    /// The usual refusal, whose result is its error code alone.
    pub(crate) fn error(error: &str, summary: &'a str, told: &'a str) -> Refused<'a> {
        Refused { result: serde_json::json!({ "error": error }), summary, told }
    }
}

/// Tests: `actor` tries `call` and `scene` refuses it as `expected` says: a failed outcome with
/// that error and summary, that one line told to the actor and to no one else, nothing queued
/// for a broadcast, and the scene (its state) as it was. `row` names the case in a failure.
#[cfg(test)]
pub(crate) fn check_refusal<S: SceneRules + Serialize + ?Sized>(
    scene: &mut S,
    world: &mut World,
    actor: &str,
    call: &crate::engine::parse::ActionCall,
    expected: Refused,
) {
    use super::event::EventType;
    let row = format!("{actor} {call:?}");
    world.take_out();
    let before = (serde_json::to_value(&*scene).unwrap(), world.pending.len());
    let outcome = act_as(scene, world, actor, call).unwrap_or_else(|e| panic!("{row}: {e}"));
    assert_eq!(
        (outcome.success, outcome.pass_control, outcome.summary.as_deref(), outcome.result_json()),
        (false, false, Some(expected.summary), expected.result),
        "{row}: (success, pass_control, summary, result)"
    );
    let told: Vec<(String, String)> = world
        .take_out()
        .into_iter()
        .filter(|e| e.kind == EventType::AgentCtxDelta)
        .map(|e| (e.data["agent"].to_string(), e.data["content"].as_str().unwrap_or_default().to_string()))
        .collect();
    let want = (Value::from(actor).to_string(), expected.told.to_string());
    assert_eq!(told, [want], "{row}: who was told what");
    let after = (serde_json::to_value(&*scene).unwrap(), world.pending.len());
    assert_eq!(before, after, "{row}: a refusal changes nothing");
}

/// Tests: [`check_refusal`] for each row `(actor, action, error, told)` of a table: an action
/// without parameters, refused with the usual summary `"{actor} {action} failed"`.
#[cfg(test)]
pub(crate) fn check_refusals<S: SceneRules + Serialize + ?Sized>(
    scene: &mut S,
    world: &mut World,
    rows: &[(&str, &str, &str, &str)],
) {
    for &(actor, action, error, told) in rows {
        let summary = format!("{actor} {action} failed");
        let call = crate::engine::parse::ActionCall::new(action);
        check_refusal(scene, world, actor, &call, Refused::error(error, &summary, told));
    }
}

/// Tests: runs of the shipped scenarios.
#[cfg(test)]
mod testing {
    use crate::engine::action::{ActionResult, Outcome};
    use crate::engine::event::{Event, EventType};
    use crate::engine::simulator::Simulator;

    /// The shipped scenario `id` run for `turns` turns with the mock model: every turn runs, the
    /// scene is not over and no agent errs. The simulator and the events.
    pub(crate) fn mock_run(id: &str, turns: u64) -> (Simulator, Vec<Event>) {
        let mut sim = crate::scenario::Scenario::shipped(id).build(None).unwrap();
        let (report, events) = sim.run_blocking(turns, &crate::llm::MockClient);
        let report = report.unwrap();
        assert_eq!(report.turns, turns);
        assert!(!report.complete);
        assert!(events.iter().all(|e| e.kind != EventType::AgentError), "no agent errors");
        (sim, events)
    }

    /// Asserts that `o` succeeded with `result` and `summary` and ended the actor's turn.
    #[track_caller]
    pub(crate) fn passed(o: &Outcome, result: ActionResult, summary: &str) {
        assert_eq!(*o, Outcome::ok(result, summary, true));
    }

    /// The summaries of the `action_end` events, in order ("-" for one without).
    pub(crate) fn summaries(events: &[Event]) -> Vec<String> {
        events
            .iter()
            .filter(|e| e.kind == EventType::ActionEnd)
            .map(|e| e.data["summary"].as_str().unwrap_or("-").to_string())
            .collect()
    }
}

/// Deserialises a scene config, naming the offending field on error.
pub(crate) fn parse_config<T: DeserializeOwned>(config: Value) -> Result<T, SceneError> {
    let config = if config.is_null() { Value::Object(Map::new()) } else { config };
    serde_path_to_error::deserialize(config).map_err(|e| {
        let path = e.path().to_string();
        SceneError::Config { path: (path != ".").then_some(path), message: e.inner().to_string() }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catalogue_has_each_action_exactly_once() {
        let listed: Vec<ActionKind> = CATALOGUE.iter().flat_map(|l| l.iter().map(|(k, _)| *k)).collect();
        assert_eq!(listed.len(), ActionKind::ALL.len());
        for kind in ActionKind::ALL {
            assert_eq!(listed.iter().filter(|k| *k == kind).count(), 1, "{}", kind.name());
            assert!(!action_spec(*kind).instruction.is_empty());
        }
    }

    /// The prompt text each scene file lists is for exactly the actions the shared catalogue
    /// gives its type, and the actions a scene adds to every agent are in that catalogue.
    #[test]
    fn each_scene_lists_the_prompt_text_of_its_catalogue() {
        let kinds = |list: &[(ActionKind, ActionSpec)]| list.iter().map(|(k, _)| *k).collect::<Vec<_>>();
        assert_eq!(kinds(SHARED_ACTIONS), COMMON_ACTIONS);
        for (scene, list) in [
            (SceneKind::Council, council::ACTIONS),
            (SceneKind::Landlord, landlord::ACTIONS),
            (SceneKind::Village, village::ACTIONS),
            (SceneKind::Werewolf, werewolf::ACTIONS),
        ] {
            assert_eq!(kinds(list), scene.own_actions(), "{scene}");
        }
        let agent = Agent::new("A", vec![]);
        for info in scene_types() {
            assert!(!info.summary.is_empty(), "{}", info.kind);
            if info.kind == SceneKind::Custom {
                let names: Vec<_> = info.actions.iter().map(|a| a.name).collect();
                assert_eq!(names, [ActionKind::Yield], "a custom scene's actions are its document's");
                continue;
            }
            let scene = Scene::build(info.kind, String::new(), String::new(), Value::Null).unwrap();
            for a in scene.rules().scene_actions(&agent) {
                assert!(info.kind.offers(a), "{} adds {a}", info.kind);
            }
            assert!(!info.description.is_empty() && !info.rules.is_empty(), "{}", info.kind);
        }
    }
}
