//! What a branch does to a social simulation (spec §2.3): the ops that append to an agent's
//! memory, replace its plan, patch its properties or the scene's state, broadcast an event, set a
//! custom scene's variable or an agent's role, or rewrite the scene's prose. Here, inside the
//! engine, so that nothing outside it writes the simulator's agents or scene; the tree's seam
//! (`sim::social`) only names the ops and reads the events back.

use simtree_shared::Op;

use super::event::{Event, SceneEvent};
use super::memory::Role;
use super::plan::PlanState;
use super::scenes::Scene;
use super::scenes::custom::Custom;
use super::simulator::Simulator;

/// Why an op was refused; nothing changed.
#[derive(Debug, thiserror::Error)]
pub enum OpError {
    /// The op does not fit this simulation (an unknown agent, a wrong value, …).
    #[error("{0}")]
    Bad(String),
    /// An op of another kind of simulation (trading, agent-based), by name.
    #[error("{0} is not an op of a social scene")]
    Foreign(&'static str),
}

impl Simulator {
    /// Applies one branch op; returns the events it produced. Nothing changes on error.
    pub fn apply_op(&mut self, op: &Op) -> Result<Vec<Event>, OpError> {
        match op {
            Op::AgentCtxAppend { name, role, content } => {
                let i = self.agent(name)?;
                let role = Role::parse_memory_role(role)
                    .ok_or_else(|| OpError::Bad(format!("role must be 'user' or 'assistant', not '{role}'")))?;
                self.world.agents[i].short_memory.append(role, content);
            }
            Op::AgentPlanReplace { name, plan_state } => {
                let i = self.agent(name)?;
                self.world.agents[i].plan_state = PlanState::clone(plan_state);
            }
            Op::AgentPropsPatch { name, updates } => {
                let i = self.agent(name)?;
                let props = &mut self.world.agents[i].properties;
                for (k, v) in updates {
                    props.insert(k.clone(), v.clone());
                }
            }
            Op::SceneStatePatch { updates } => {
                self.scene.patch_state(updates).map_err(|e| OpError::Bad(e.to_string()))?
            }
            Op::PublicBroadcast { text } => self.broadcast(&SceneEvent::public(text.clone())),
            Op::SceneVarSet { name, value, agent } => {
                self.custom(op)?.set_var(name, value, agent.as_deref()).map_err(|e| OpError::Bad(e.0))?
            }
            Op::AgentRoleSet { name, role } => {
                let i = self.agent(name)?;
                self.custom(op)?.set_role(name, role).map_err(|e| OpError::Bad(e.0))?;
                // The agent's properties say its role too, as in the document it came from.
                self.world.agents[i].properties.insert("role".into(), serde_json::Value::String(role.clone()));
            }
            Op::SceneProseSet { prose } => {
                if prose.is_empty() {
                    return Err(OpError::Bad(
                        "scene_prose_set: give at least one part of the prose (description, rules, examples or actions)"
                            .into(),
                    ));
                }
                self.set_prose(prose).map_err(|e| OpError::Bad(format!("scene_prose_set: {e}")))?;
            }
            Op::Advance { .. } => {
                return Err(OpError::Bad("Unknown op: advance (use the advance routes to run turns)".into()));
            }
            other => return Err(OpError::Foreign(other.name())),
        }
        let mut events = self.world.take_out();
        self.world.flush_pending();
        events.extend(self.world.take_out());
        Ok(events)
    }

    /// The index of agent `name`, or why there is none.
    fn agent(&self, name: &str) -> Result<usize, OpError> {
        self.world
            .agent_index(name)
            .ok_or_else(|| OpError::Bad(format!("unknown agent '{name}' (agents: {})", self.world.names().join(", "))))
    }

    /// The custom scene an op of custom scenes applies to.
    fn custom(&mut self, op: &Op) -> Result<&mut Custom, OpError> {
        match &mut self.scene {
            Scene::Custom(c) => Ok(c),
            other => Err(OpError::Bad(format!(
                "{} applies to custom scenes only, and this is a {} scene",
                op.name(),
                other.kind()
            ))),
        }
    }
}
