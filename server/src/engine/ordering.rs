//! Orderings: who acts next (spec §1.9).
//!
//! An ordering is plain data stored in the simulator state, so every policy survives cloning and
//! export — including `llm_moderated`, which upstream cannot rebuild (spec §0.6): its moderator is
//! referenced by name and its queue is part of the state. `random` draws from the simulator's
//! seeded RNG instead of a private unseeded one.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::agent::Agent;
use super::rng::Rng;

/// Instruction the moderator receives (after `[System] `) when the schedule runs empty.
pub(crate) const MODERATOR_INSTRUCTION: &str = "The schedule is empty. Decide who should act next: respond with exactly one schedule_order action whose <order> lists the next speakers, separated by commas, e.g. <Action name=\"schedule_order\"><order>Alice, Bob</order></Action>";

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Ordering {
    /// Round-robin over the agent names frozen when the simulation is built.
    Sequential {
        #[serde(default)]
        names: Vec<String>,
        #[serde(default)]
        idx: usize,
    },
    /// Same as sequential (upstream's placeholder for an asynchronous policy).
    Asynchronous {
        #[serde(default)]
        names: Vec<String>,
        #[serde(default)]
        idx: usize,
    },
    /// Round-robin over a given list; duplicates allowed, non-agents are picked and skipped.
    Cycled {
        names: Vec<String>,
        #[serde(default)]
        idx: usize,
    },
    /// A uniform choice among the current agents on every pick.
    Random,
    /// The scene decides (`Scene::controlled_next`), e.g. whose turn it is at the card table.
    Controlled,
    /// A moderator agent schedules speakers with `schedule_order` whenever the queue runs empty.
    LlmModerated {
        moderator: String,
        #[serde(default)]
        names: Vec<String>,
        #[serde(default)]
        queue: VecDeque<String>,
    },
}

/// The result of one pick.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Pick {
    /// This name acts (it may not be an agent: the simulator then skips without counting a turn).
    Name(String),
    /// The moderated queue is empty: the simulator must ask the moderator, then pick again.
    NeedsModerator,
    /// No one can be picked (no valid name at all); the run stops instead of spinning forever.
    Stuck,
}

impl Ordering {
    /// Freezes the name lists that default to "all agents" (upstream's `set_simulation`).
    pub(crate) fn attach(&mut self, agents: &[Agent]) {
        let all = || agents.iter().map(|a| a.name.clone()).collect::<Vec<_>>();
        if let Ordering::Sequential { names, .. }
        | Ordering::Asynchronous { names, .. }
        | Ordering::LlmModerated { names, .. } = self
            && names.is_empty()
        {
            *names = all();
        }
    }

    /// Registry name, as upstream serialises it.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Ordering::Sequential { .. } => "sequential",
            Ordering::Asynchronous { .. } => "asynchronous",
            Ordering::Cycled { .. } => "cycled",
            Ordering::Random => "random",
            Ordering::Controlled => "controlled",
            Ordering::LlmModerated { .. } => "llm_moderated",
        }
    }

    /// Picks the next name. `controlled` is the scene's choice, consulted only by `Controlled`.
    pub(crate) fn pick(&mut self, agents: &[Agent], rng: &mut Rng, controlled: Option<String>) -> Pick {
        let is_agent = |n: &str| agents.iter().any(|a| a.name == n);
        match self {
            Ordering::Sequential { names, idx } | Ordering::Asynchronous { names, idx } => {
                for _ in 0..names.len() {
                    let name = &names[*idx % names.len()];
                    *idx = (*idx + 1) % names.len();
                    if is_agent(name) {
                        return Pick::Name(name.clone());
                    }
                }
                Pick::Stuck
            }
            Ordering::Cycled { names, idx } => {
                if names.is_empty() {
                    return Pick::Stuck;
                }
                let name = names[*idx % names.len()].clone();
                *idx = (*idx + 1) % names.len();
                Pick::Name(name)
            }
            Ordering::Random => {
                if agents.is_empty() {
                    return Pick::Stuck;
                }
                Pick::Name(agents[rng.below(agents.len())].name.clone())
            }
            Ordering::Controlled => match controlled {
                Some(name) if is_agent(&name) => Pick::Name(name),
                _ => Pick::Stuck,
            },
            Ordering::LlmModerated { queue, .. } => match queue.pop_front() {
                Some(name) => Pick::Name(name),
                None => Pick::NeedsModerator,
            },
        }
    }

    /// After the moderator was asked: an empty queue falls back to all names once.
    pub(crate) fn fill_if_empty(&mut self) {
        if let Ordering::LlmModerated { names, queue, .. } = self
            && queue.is_empty()
        {
            queue.extend(names.iter().cloned());
        }
    }

    /// Hook after each turn (no built-in policy needs it; kept for upstream's interface).
    pub(crate) fn post_turn(&mut self, _name: &str) {}

    pub(crate) fn can_schedule(&self) -> bool {
        matches!(self, Ordering::LlmModerated { .. })
    }

    pub(crate) fn queue_is_empty(&self) -> bool {
        match self {
            Ordering::LlmModerated { queue, .. } => queue.is_empty(),
            _ => true,
        }
    }

    /// Appends names to the moderated queue (callers pass only agent names).
    pub(crate) fn add_to_queue(&mut self, more: &[String]) {
        if let Ordering::LlmModerated { queue, .. } = self {
            queue.extend(more.iter().cloned());
        }
    }

    pub(crate) fn moderator(&self) -> Option<&str> {
        match self {
            Ordering::LlmModerated { moderator, .. } => Some(moderator),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::action::ActionKind;

    fn agents(names: &[&str]) -> Vec<Agent> {
        names.iter().map(|n| Agent::new(*n, vec![ActionKind::Yield])).collect()
    }

    fn picks(o: &mut Ordering, a: &[Agent], n: usize) -> Vec<String> {
        let mut rng = Rng::seeded(1);
        (0..n)
            .map(|_| match o.pick(a, &mut rng, None) {
                Pick::Name(s) => s,
                other => format!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn sequential_cycles_over_the_frozen_names_and_skips_removed_agents() {
        let mut a = agents(&["A", "B", "C"]);
        let mut o = Ordering::Sequential { names: vec![], idx: 0 };
        o.attach(&a);
        assert_eq!(picks(&mut o, &a, 4), ["A", "B", "C", "A"]);
        a.remove(2);
        assert_eq!(picks(&mut o, &a, 3), ["B", "A", "B"]);
        assert_eq!(picks(&mut o, &[], 1), ["Stuck"]);
    }

    #[test]
    fn cycled_yields_listed_names_even_when_not_agents() {
        let a = agents(&["A", "B"]);
        let mut o = Ordering::Cycled { names: vec!["A".into(), "A".into(), "Z".into()], idx: 0 };
        assert_eq!(picks(&mut o, &a, 4), ["A", "A", "Z", "A"]);
    }

    #[test]
    fn random_is_seeded_and_reproducible_after_clone() {
        let a = agents(&["A", "B", "C", "D"]);
        let mut rng = Rng::seeded(9);
        let mut o = Ordering::Random;
        let first: Vec<_> = (0..20).map(|_| o.pick(&a, &mut rng, None)).collect();
        let mut rng2 = Rng::seeded(9);
        let again: Vec<_> = (0..20).map(|_| o.pick(&a, &mut rng2, None)).collect();
        assert_eq!(first, again);
        let distinct: std::collections::HashSet<_> = first.iter().map(|p| format!("{p:?}")).collect();
        assert!(distinct.len() > 1);
    }

    #[test]
    fn controlled_follows_the_scene_and_stops_when_it_has_no_one() {
        let a = agents(&["A", "B"]);
        let mut o = Ordering::Controlled;
        let mut rng = Rng::seeded(1);
        assert_eq!(o.pick(&a, &mut rng, Some("B".into())), Pick::Name("B".into()));
        assert_eq!(o.pick(&a, &mut rng, Some("Z".into())), Pick::Stuck);
        assert_eq!(o.pick(&a, &mut rng, None), Pick::Stuck);
    }

    #[test]
    fn moderated_queue_asks_then_falls_back_and_survives_clone() {
        let a = agents(&["M", "A", "B"]);
        let mut o = Ordering::LlmModerated { moderator: "M".into(), names: vec![], queue: VecDeque::new() };
        o.attach(&a);
        let mut rng = Rng::seeded(1);
        assert_eq!(o.pick(&a, &mut rng, None), Pick::NeedsModerator);
        o.add_to_queue(&["B".into()]);
        let mut copy = o.clone();
        assert_eq!(o.pick(&a, &mut rng, None), Pick::Name("B".into()));
        assert_eq!(copy.pick(&a, &mut rng, None), Pick::Name("B".into()));
        o.fill_if_empty();
        assert_eq!(picks(&mut o, &a, 4), ["M", "A", "B", "NeedsModerator"]);
        let json = serde_json::to_value(&copy).unwrap();
        assert_eq!(serde_json::from_value::<Ordering>(json).unwrap(), copy);
    }
}
