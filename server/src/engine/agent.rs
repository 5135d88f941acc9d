//! An agent: persona, action space, short-term memory, plan, emotion — and `process`, which makes
//! exactly one decision (one LLM call, retried on unparseable output).
//!
//! Persona strings are `Arc<str>` and the memory is persistent, so cloning an agent costs the same
//! however long it has been talking.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use simtree_shared::{CtxDelta, EmotionUpdate, PlanUpdate, PlanUpdateKind};

use super::action::ActionKind;
use super::event::Event;
use super::memory::{Message, Role, ShortTermMemory};
use super::parse::{self, ActionCall, ParseError};
use super::plan::PlanState;
use crate::llm::{LlmClient, LlmError, LlmState};

/// Upstream's `MAX_REPEAT`: parse retries, so a decision makes at most `max_repeat + 1` calls.
pub(crate) const MAX_REPEAT: u32 = 3;

fn default_language() -> Arc<str> {
    "en".into()
}
fn default_max_repeat() -> u32 {
    MAX_REPEAT
}
fn default_emotion() -> String {
    "neutral".into()
}

/// Serialised with upstream's field names (spec §1.3.3).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Agent {
    pub name: String,
    #[serde(default)]
    pub(crate) user_profile: Arc<str>,
    #[serde(default)]
    pub(crate) style: Arc<str>,
    #[serde(default)]
    pub(crate) initial_instruction: Arc<str>,
    #[serde(default)]
    pub(crate) role_prompt: Arc<str>,
    #[serde(default = "default_language")]
    pub(crate) language: Arc<str>,
    pub(crate) action_space: Vec<ActionKind>,
    #[serde(default)]
    pub short_memory: ShortTermMemory,
    #[serde(default)]
    last_history_length: usize,
    #[serde(default = "default_max_repeat")]
    pub(crate) max_repeat: u32,
    #[serde(default)]
    pub(crate) properties: Map<String, Value>,
    #[serde(default)]
    pub(crate) plan_state: PlanState,
    #[serde(default = "default_emotion")]
    pub(crate) emotion: String,
    /// Upstream crashes when this is missing (spec §0.1); we default to false.
    #[serde(default)]
    pub(crate) emotion_enabled: bool,
    /// The emotion and plan go in the last message of each prompt instead of the system
    /// prompt (a tree created with `prompt_layout: state_last`), so that a plan change keeps the
    /// rest of the prompt a prefix the provider has cached. Off, and absent from stored agents,
    /// by default: the prompts are SocialSim4's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) state_last: bool,
}

/// Why a decision failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AgentError {
    #[error("no usable response after {attempts} attempts: {last}")]
    Unparseable { attempts: u32, last: ParseError },
    #[error(transparent)]
    Llm(#[from] LlmError),
}

/// What `process` produced.
#[derive(Debug, PartialEq)]
pub enum Decision {
    /// Nothing new happened since the agent last spoke: no LLM call was made (upstream's EMPTY).
    Idle,
    /// The LLM answered; zero or one action.
    Acted(Vec<ActionCall>),
}

impl Agent {
    pub(crate) fn new(name: impl Into<String>, action_space: Vec<ActionKind>) -> Self {
        Agent {
            name: name.into(),
            user_profile: "".into(),
            style: "".into(),
            initial_instruction: "".into(),
            role_prompt: "".into(),
            language: default_language(),
            action_space,
            short_memory: ShortTermMemory::new(),
            last_history_length: 0,
            max_repeat: MAX_REPEAT,
            properties: Map::new(),
            plan_state: PlanState::default(),
            emotion: default_emotion(),
            emotion_enabled: false,
            state_last: false,
        }
    }

    /// Appends environment feedback to memory and returns its `agent_ctx_delta` event, which
    /// carries the unmerged line even when memory merged it into the previous entry.
    pub(crate) fn add_env_feedback(&mut self, text: &str) -> Event {
        self.short_memory.append(Role::User, text);
        self.ctx_delta(Role::User, text)
    }

    fn ctx_delta(&self, role: Role, content: &str) -> Event {
        Event::of(&CtxDelta { agent: self.name.clone(), role: role.as_str().to_string(), content: content.to_string() })
    }

    /// `properties.map_xy` as integer coordinates, when present.
    pub(crate) fn map_xy(&self) -> Option<(i64, i64)> {
        let xy = self.properties.get("map_xy")?.as_array()?;
        Some((xy.first()?.as_i64()?, xy.get(1)?.as_i64()?))
    }

    /// `properties.role` when it is a string.
    pub(crate) fn role(&self) -> Option<&str> {
        self.properties.get("role").and_then(Value::as_str)
    }

    /// Makes one decision (spec §1.3.2), with the prompt `prompt` writes for this agent as it is
    /// now: its system prompt and, for an agent whose state goes last, the state message. Events
    /// (`emotion_update`, `plan_update`, the assistant `agent_ctx_delta`) are pushed to `out` in
    /// upstream's order.
    pub(crate) async fn process(
        &mut self,
        prompt: impl FnOnce(&Agent) -> (String, Option<String>),
        llm: &dyn LlmClient,
        llm_state: &mut LlmState,
        out: &mut Vec<Event>,
        initiative: bool,
    ) -> Result<Decision, AgentError> {
        if self.short_memory.len() == self.last_history_length && !initiative {
            return Ok(Decision::Idle);
        }
        let (system, state) = prompt(self);
        let mut ctx = Vec::with_capacity(self.short_memory.len() + 2);
        ctx.push(Message::new(Role::System, system));
        ctx.extend(self.short_memory.iter().cloned());
        let last_is_assistant = ctx.len() >= 2 && ctx.last().is_some_and(|m| m.role == Role::Assistant);
        if initiative || last_is_assistant {
            // Stored (and merged) but never emitted as a delta, as upstream.
            self.short_memory.append(Role::User, "Continue.");
            ctx.push(Message::new(Role::User, "Continue."));
        }
        if let Some(state) = state {
            // Read by this call only, never stored: the next prompt has the state of then.
            state_last(&mut ctx, state);
        }
        let attempts = self.max_repeat + 1;
        let mut attempt = 0;
        let (output, actions, plan) = loop {
            attempt += 1;
            llm_state.speaker = Some(self.name.clone());
            let output = llm.chat(&ctx, llm_state).await;
            llm_state.speaker = None;
            let output = output?;
            match Self::parse_response(&output, self.emotion_enabled) {
                Ok((actions, plan, emotion)) => {
                    if let Some(emotion) = emotion {
                        self.emotion = emotion.clone();
                        out.push(Event::of(&EmotionUpdate { agent: self.name.clone(), emotion }));
                    }
                    break (output, actions, plan);
                }
                Err(e) if attempt >= attempts => {
                    return Err(AgentError::Unparseable { attempts, last: e });
                }
                Err(_) => continue,
            }
        };
        if let Some(plan) = plan {
            self.plan_state = plan.clone();
            out.push(Event::of(&PlanUpdate { agent: self.name.clone(), kind: PlanUpdateKind::Replace, plan }));
        }
        self.short_memory.append(Role::Assistant, &output);
        out.push(self.ctx_delta(Role::Assistant, &output));
        self.last_history_length = self.short_memory.len();
        Ok(Decision::Acted(actions))
    }

    /// Parses one response: the action (from the Action section, else the whole text), the plan
    /// update and, when enabled, the emotion update.
    #[allow(clippy::type_complexity)]
    fn parse_response(
        output: &str,
        emotion_enabled: bool,
    ) -> Result<(Vec<ActionCall>, Option<PlanState>, Option<String>), ParseError> {
        let sections = parse::split_sections(output);
        let action = match parse::parse_action(sections.action)? {
            Some(a) => Some(a),
            None => parse::parse_action(output)?,
        };
        let plan = parse::parse_plan_update(sections.plan_update)?;
        let emotion = if emotion_enabled { parse::parse_emotion(sections.emotion_update) } else { None };
        Ok((action.into_iter().collect(), plan, emotion))
    }
}

/// Puts an agent's state message last in its context `ctx`: into its last user message, or as
/// one of its own.
pub(crate) fn state_last(ctx: &mut Vec<Message>, state: String) {
    match ctx.last_mut().filter(|m| m.role == Role::User) {
        Some(last) => *last = Message::new(Role::User, format!("{}\n\n{state}", last.content)),
        None => ctx.push(Message::new(Role::User, state)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::event::EventType;
    use crate::llm::{BoxFuture, LlmClient};
    use serde_json::json;
    use std::sync::Mutex;

    /// The system prompt of an agent in no scene.
    fn no_scene(agent: &Agent) -> (String, Option<String>) {
        crate::engine::prompt::agent_prompt(agent, &crate::engine::prompt::SceneText::default())
    }

    /// Answers with canned replies in order and records each request.
    struct Script {
        replies: Mutex<Vec<String>>,
        seen: Mutex<Vec<Vec<Message>>>,
    }

    impl Script {
        fn new(replies: &[&str]) -> Self {
            let mut r: Vec<String> = replies.iter().map(|s| s.to_string()).collect();
            r.reverse();
            Script { replies: Mutex::new(r), seen: Mutex::new(Vec::new()) }
        }
    }

    impl LlmClient for Script {
        fn chat<'a>(&'a self, messages: &'a [Message], _: &'a mut LlmState) -> BoxFuture<'a, Result<String, LlmError>> {
            self.seen.lock().unwrap().push(messages.to_vec());
            let reply = self.replies.lock().unwrap().pop().unwrap_or_default();
            Box::pin(async move { Ok(reply) })
        }
    }

    fn run<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
    }

    const GOOD: &str = "--- Thoughts ---\nx\n--- Plan ---\n1. y\n--- Action ---\n<Action name=\"yield\" />\n--- Plan Update ---\n<Strategy>calm</Strategy>";

    #[test]
    fn idle_without_new_input_and_one_call_otherwise() {
        let mut a = Agent::new("Ann", vec![ActionKind::Yield]);
        let llm = Script::new(&[GOOD]);
        let (mut st, mut out) = (LlmState::default(), Vec::new());
        assert_eq!(run(a.process(no_scene, &llm, &mut st, &mut out, false)).unwrap(), Decision::Idle);
        a.add_env_feedback("hello");
        let d = run(a.process(no_scene, &llm, &mut st, &mut out, false)).unwrap();
        assert_eq!(d, Decision::Acted(vec![ActionCall::new("yield")]));
        assert_eq!(llm.seen.lock().unwrap().len(), 1);
        // plan_update precedes the assistant delta.
        let kinds: Vec<_> = out.iter().map(|e| e.kind).collect();
        assert_eq!(kinds, vec![EventType::PlanUpdate, EventType::AgentCtxDelta]);
        assert_eq!(a.plan_state.strategy, "calm");
        assert_eq!(a.last_history_length, 2);
        let prompt = &llm.seen.lock().unwrap()[0][0];
        assert!(prompt.content.starts_with("\nYou are Ann.\n"));
    }

    #[test]
    fn retries_the_same_request_then_gives_up() {
        let mut a = Agent::new("Ann", vec![ActionKind::Yield]);
        a.add_env_feedback("hi");
        let two = "--- Action ---\n<Action name=\"yield\"></Action><Action name=\"yield\"></Action>";
        let llm = Script::new(&[two, two, two, two, GOOD]);
        let (mut st, mut out) = (LlmState::default(), Vec::new());
        let err = run(a.process(no_scene, &llm, &mut st, &mut out, false)).unwrap_err();
        assert!(matches!(err, AgentError::Unparseable { attempts: 4, .. }), "{err}");
        let seen = llm.seen.lock().unwrap();
        assert_eq!(seen.len(), 4);
        assert!(seen.iter().all(|req| req == &seen[0]), "retries resend the same context");
        assert!(out.is_empty());
        assert_eq!(a.short_memory.len(), 1, "a failed decision stores nothing");
    }

    #[test]
    fn an_assistant_tail_gets_a_continue_nudge_that_is_not_emitted() {
        let mut a = Agent::new("Ann", vec![ActionKind::Yield]);
        a.short_memory.append(Role::Assistant, "earlier");
        let llm = Script::new(&[GOOD]);
        let (mut st, mut out) = (LlmState::default(), Vec::new());
        run(a.process(no_scene, &llm, &mut st, &mut out, false)).unwrap();
        let req = &llm.seen.lock().unwrap()[0];
        assert_eq!(req.last().unwrap().content.as_ref(), "Continue.");
        assert!(out.iter().all(|e| e.data["content"] != "Continue."));
        assert_eq!(a.short_memory.iter().nth(1).unwrap().content.as_ref(), "Continue.");
    }

    #[test]
    fn emotion_update_only_when_enabled() {
        let reply =
            "--- Action ---\n<Action name=\"yield\" />\n--- Plan Update ---\nno change\n--- Emotion Update ---\nTrust";
        let mut a = Agent::new("Ann", vec![ActionKind::Yield]);
        a.emotion_enabled = true;
        a.add_env_feedback("hi");
        let llm = Script::new(&[reply]);
        let (mut st, mut out) = (LlmState::default(), Vec::new());
        run(a.process(no_scene, &llm, &mut st, &mut out, false)).unwrap();
        assert_eq!(a.emotion, "Trust");
        assert_eq!(out[0].kind, EventType::EmotionUpdate);
        assert!(llm.seen.lock().unwrap()[0][0].content.contains("Your current emotion is neutral."));
    }

    #[test]
    fn the_whole_text_is_a_fallback_for_the_action() {
        let mut a = Agent::new("Ann", vec![ActionKind::Yield]);
        a.add_env_feedback("hi");
        let llm = Script::new(&["I yield. <Action name=\"yield\" />"]);
        let (mut st, mut out) = (LlmState::default(), Vec::new());
        let d = run(a.process(no_scene, &llm, &mut st, &mut out, false)).unwrap();
        assert_eq!(d, Decision::Acted(vec![ActionCall::new("yield")]));
    }

    #[test]
    fn missing_emotion_enabled_defaults_to_false() {
        let a: Agent = serde_json::from_value(json!({"name": "A", "action_space": ["yield"]})).unwrap();
        assert!(!a.emotion_enabled);
        assert_eq!(a.max_repeat, 3);
        assert_eq!(a.language.as_ref(), "en");
    }
}
