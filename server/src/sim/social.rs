//! The social kind at a tree node: what the seam asks of the engine's [`Simulator`] — a branch
//! op applied to its agents or scene (spec §2.3), its agents' context as the state, the scene
//! state as the view, and the seed a run draws from.

use simtree_shared::{NodeState, Op, SocialView};

use super::SimError;
use crate::engine::Simulator;
use crate::engine::branch::OpError;
use crate::engine::event::{Event, EventSink};
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
    s.reseed(seed);
}

/// Applies one branch op (spec §2.3, the engine's [`Simulator::apply_op`]); returns the events it
/// produced. Errors name what is wrong.
pub(super) fn apply_op(sim: &mut Simulator, op: &Op) -> Result<Vec<Event>, SimError> {
    sim.apply_op(op).map_err(|e| match e {
        OpError::Bad(m) => SimError::BadOp(m),
        OpError::Foreign(name) => SimError::WrongOp("a social scene", name.to_string()),
    })
}

/// Where each agent's memory ends: its entry count and the length of its last entry (an
/// append may extend the last entry rather than add one).
pub(super) fn memory_marks(sim: &Simulator) -> Vec<(usize, usize)> {
    sim.world()
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
    for (i, a) in sim.world().agents.iter().enumerate() {
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
    SocialView { scene: s.scene().type_name().to_string(), state: s.scene().state_json(), about: Some(s.scene_about()) }
}

/// A turn is one agent's: one decision per step, up to `max_steps_per_turn` steps; a moderated
/// ordering may ask its moderator once more when the queue runs empty.
/// The request an interview of agent `name` sends (the engine's [`Simulator::interview`]).
pub(super) fn interview(s: &Simulator, name: &str, question: &str) -> Result<ChatRequest, SimError> {
    let messages = s.interview(name, question).ok_or_else(|| {
        SimError::Interview(format!("no agent '{name}' here (agents: {})", s.world().names().join(", ")))
    })?;
    Ok(ChatRequest::new(messages))
}

pub(super) fn call_shape(s: &Simulator) -> super::CallShape {
    let moderated = u64::from(matches!(s.world().ordering, crate::engine::ordering::Ordering::LlmModerated { .. }));
    let most = u64::from(s.max_steps_per_turn()) + moderated;
    super::CallShape {
        least: 1,
        most,
        why: format!("a turn is one of {} agents acting: 1 to {most} calls", s.world().agents.len()),
    }
}
