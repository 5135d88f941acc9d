//! The social kind at a tree node: what the seam asks of the engine's [`Simulator`] — a branch
//! op applied to its agents or scene (spec §2.3), its agents' context as the state, the scene
//! state as the view, and the seed a run draws from.

use simtree_shared::{NodeState, Op, SocialView};

use super::{SimError, op_name};
use crate::engine::Simulator;
use crate::engine::event::{Event, EventSink, SceneEvent};
use crate::engine::memory::Role;
use crate::engine::plan::PlanState;
use crate::engine::scenes::Scene;
use crate::engine::scenes::custom::Custom;
use crate::llm::LlmClient;
use crate::llm::chat::ChatRequest;

/// Runs `turns` turns of the scene.
pub(super) async fn run(
    s: &mut Simulator,
    turns: u64,
    llm: &dyn LlmClient,
    sink: &mut (dyn EventSink + Send),
) -> Result<(), SimError> {
    s.run(turns, llm, sink).await?;
    Ok(())
}

/// The scenario's initial broadcasts, waiting since construction: the root's log.
pub(super) fn initial_events(s: &mut Simulator) -> Vec<Event> {
    let mut events: Vec<Event> = Vec::new();
    s.flush_pending(&mut events);
    events
}

/// The world's RNG (turn order, scene rules) and the seed the `scripted` player draws from.
pub(super) fn reseed(s: &mut Simulator, seed: u64) {
    s.world.rng = crate::engine::rng::Rng::seeded(seed);
    s.world.llm.seed = seed;
}

/// Applies one branch op (spec §2.3); returns the events it produced. Errors name what is wrong.
pub(super) fn apply_op(sim: &mut Simulator, op: &Op) -> Result<Vec<Event>, SimError> {
    let agent_index = |sim: &Simulator, name: &str| {
        sim.world.agent_index(name).ok_or_else(|| {
            SimError::BadOp(format!(
                "unknown agent '{name}' (agents: {})",
                sim.world.names().join(", ")
            ))
        })
    };
    match op {
        Op::AgentCtxAppend { name, role, content } => {
            let i = agent_index(sim, name)?;
            let role = Role::parse_memory_role(role)
                .ok_or_else(|| SimError::BadOp(format!("role must be 'user' or 'assistant', not '{role}'")))?;
            sim.world.agents[i].short_memory.append(role, content);
        }
        Op::AgentPlanReplace { name, plan_state } => {
            let i = agent_index(sim, name)?;
            sim.world.agents[i].plan_state = PlanState::clone(plan_state);
        }
        Op::AgentPropsPatch { name, updates } => {
            let i = agent_index(sim, name)?;
            let props = &mut sim.world.agents[i].properties;
            for (k, v) in updates {
                props.insert(k.clone(), v.clone());
            }
        }
        Op::SceneStatePatch { updates } => sim
            .scene
            .patch_state(updates)
            .map_err(|e| SimError::BadOp(e.to_string()))?,
        Op::PublicBroadcast { text } => sim.broadcast(&SceneEvent::public(text.clone())),
        Op::SceneVarSet { name, value, agent } => custom(sim, op)?
            .set_var(name, value, agent.as_deref())
            .map_err(|e| SimError::BadOp(e.0))?,
        Op::AgentRoleSet { name, role } => {
            let i = agent_index(sim, name)?;
            custom(sim, op)?
                .set_role(name, role)
                .map_err(|e| SimError::BadOp(e.0))?;
            // The agent's properties say its role too, as in the document it came from.
            sim.world.agents[i]
                .properties
                .insert("role".into(), serde_json::Value::String(role.clone()));
        }
        Op::SceneProseSet { prose } => {
            if prose.is_empty() {
                return Err(SimError::BadOp(
                    "scene_prose_set: give at least one part of the prose (description, rules, examples or actions)"
                        .into(),
                ));
            }
            sim.set_prose(prose)
                .map_err(|e| SimError::BadOp(format!("scene_prose_set: {e}")))?;
        }
        Op::Advance { .. } => {
            return Err(SimError::BadOp(
                "Unknown op: advance (use the advance routes to run turns)".into(),
            ));
        }
        other => return Err(SimError::WrongOp("a social scene", op_name(other))),
    }
    let mut events = sim.world.take_out();
    sim.world.flush_pending();
    events.extend(sim.world.take_out());
    Ok(events)
}

/// The custom scene an op of custom scenes applies to.
fn custom<'s>(sim: &'s mut Simulator, op: &Op) -> Result<&'s mut Custom, SimError> {
    match &mut sim.scene {
        Scene::Custom(c) => Ok(c),
        other => Err(SimError::BadOp(format!(
            "{} applies to custom scenes only, and this is a {} scene",
            op.name(),
            other.kind()
        ))),
    }
}

/// Where each agent's memory ends: its entry count and the length of its last entry (an
/// append may extend the last entry rather than add one).
pub(super) fn memory_marks(sim: &Simulator) -> Vec<(usize, usize)> {
    sim.world
        .agents
        .iter()
        .map(|a| {
            let m = &a.short_memory;
            (m.len(), m.last().map_or(0, |e| e.content.len()))
        })
        .collect()
}

/// The text agents' memories took in since `marks` (memories only grow), one entry a line.
pub(super) fn memory_since(sim: &Simulator, marks: &[(usize, usize)]) -> String {
    let mut out = String::new();
    for (i, a) in sim.world.agents.iter().enumerate() {
        let (count, last) = marks.get(i).copied().unwrap_or((0, 0));
        for (k, m) in a.short_memory.iter_from(count.saturating_sub(1)).enumerate() {
            let text = match (count, k) {
                (1.., 0) => m.content.get(last..).unwrap_or(""),
                _ => &m.content,
            };
            if !text.trim().is_empty() {
                out.push_str(text.trim_start_matches('\n'));
                out.push('\n');
            }
        }
    }
    out
}

/// Every agent with its role, plan and short memory.
pub(super) fn state(sim: &Simulator) -> NodeState {
    sim.node_state()
}

/// The scene's type and state.
pub(super) fn view(s: &Simulator) -> SocialView {
    SocialView {
        scene: s.scene.type_name().to_string(),
        state: s.scene.state_json(),
        about: Some(s.scene_about()),
    }
}

/// A turn is one agent's: one decision per step, up to `max_steps_per_turn` steps; a moderated
/// ordering may ask its moderator once more when the queue runs empty.
/// The request an interview of agent `name` sends (the engine's [`Simulator::interview`]).
pub(super) fn interview(s: &Simulator, name: &str, question: &str) -> Result<ChatRequest, SimError> {
    let messages = s.interview(name, question).ok_or_else(|| {
        SimError::Interview(format!(
            "no agent '{name}' here (agents: {})",
            s.world.names().join(", ")
        ))
    })?;
    Ok(ChatRequest::new(messages))
}

pub(super) fn call_shape(s: &Simulator) -> super::CallShape {
    let moderated = u64::from(matches!(
        s.world.ordering,
        crate::engine::ordering::Ordering::LlmModerated { .. }
    ));
    let most = u64::from(s.max_steps_per_turn) + moderated;
    super::CallShape {
        least: 1,
        most,
        why: format!(
            "a turn is one of {} agents acting: 1 to {most} calls",
            s.world.agents.len()
        ),
    }
}
