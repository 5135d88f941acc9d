//! The mutable world a scene acts on: the agents, the ordering, the deferred event queue, the
//! seeded RNG and the LLM-side state (the mock's counters).
//!
//! It is the simulator minus its scene, so scene handlers can take `&mut self` (the scene) and
//! `&mut World` at once. Events produced while handling are buffered in `out` and handed to the
//! caller's sink by the simulator at each step boundary, in emission order.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use simtree_shared::Broadcast;

use super::agent::Agent;
use super::event::{Event, EventPayload, SceneEvent};
use super::hooks::{HookError, Hooks};
use super::ordering::Ordering;
use super::rng::Rng;
use crate::llm::LlmState;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct World {
    /// Agents in map order (the order of the scenario file).
    pub agents: Vec<Agent>,
    pub(crate) ordering: Ordering,
    /// Upstream's FIFO of deferred events (`system_broadcast`s), flushed at step boundaries.
    pub(crate) pending: VecDeque<Event>,
    pub(crate) rng: Rng,
    pub llm: LlmState,
    /// Events emitted immediately but not yet handed to a sink. Always empty between runs.
    #[serde(skip)]
    pub(crate) out: Vec<Event>,
    /// What runs a custom scene's Python hooks during this run (given by the run's caller).
    #[serde(skip)]
    pub(crate) hooks: Hooks,
    /// The first hook failure of the turn running now; the simulator undoes the turn and ends
    /// the run with it.
    #[serde(skip)]
    pub(crate) hook_failure: Option<HookError>,
}

impl World {
    pub(crate) fn new(agents: Vec<Agent>, ordering: Ordering, seed: u64) -> Self {
        World {
            agents,
            ordering,
            pending: VecDeque::new(),
            rng: Rng::seeded(seed),
            llm: LlmState { seed, ..LlmState::default() },
            out: Vec::new(),
            hooks: Hooks::default(),
            hook_failure: None,
        }
    }

    pub(crate) fn agent_index(&self, name: &str) -> Option<usize> {
        self.agents.iter().position(|a| a.name == name)
    }

    pub fn agent(&self, name: &str) -> Option<&Agent> {
        self.agents.iter().find(|a| a.name == name)
    }

    pub(crate) fn names(&self) -> Vec<String> {
        self.agents.iter().map(|a| a.name.clone()).collect()
    }

    /// Emits an event now (it reaches the sink at the next step boundary, in order).
    pub(crate) fn emit<P: EventPayload>(&mut self, payload: &P) {
        self.out.push(Event::of(payload));
    }

    /// Queues an event until the next flush (upstream's `emit_event_later`).
    pub(crate) fn emit_later<P: EventPayload>(&mut self, payload: &P) {
        self.pending.push_back(Event::of(payload));
    }

    /// Moves every deferred event to the output, in FIFO order.
    pub(crate) fn flush_pending(&mut self) {
        self.out.extend(self.pending.drain(..));
    }

    /// Takes the buffered output events.
    pub(crate) fn take_out(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.out)
    }

    /// Gives an agent a line of environment feedback (memory + `agent_ctx_delta`).
    pub(crate) fn feedback(&mut self, agent: usize, text: &str) {
        let delta = self.agents[agent].add_env_feedback(text);
        self.out.push(delta);
    }

    /// Delivers a scene event to every agent except its sender (optionally only to `receivers`),
    /// then queues a `system_broadcast` record. `time` is the scene time at emission.
    pub(crate) fn broadcast(&mut self, event: &SceneEvent, time: Option<i64>, receivers: Option<&[usize]>) {
        let line = event.line(time);
        let mut recipients = Vec::new();
        for i in 0..self.agents.len() {
            if event.sender() == Some(self.agents[i].name.as_str()) {
                continue;
            }
            if receivers.is_some_and(|r| !r.contains(&i)) {
                continue;
            }
            self.feedback(i, &line);
            recipients.push(self.agents[i].name.clone());
        }
        self.emit_later(&Broadcast {
            time,
            class: event.class(),
            sender: event.sender().map(str::to_string),
            recipients,
            text: event.line(None),
        });
    }

    /// Manhattan distance between two agents' `properties.map_xy`, when both have one.
    pub(crate) fn distance(&self, a: usize, b: usize) -> Option<i64> {
        let (ax, ay) = self.agents[a].map_xy()?;
        let (bx, by) = self.agents[b].map_xy()?;
        Some((ax - bx).abs() + (ay - by).abs())
    }
}
