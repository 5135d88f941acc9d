//! werewolf (upstream `werewolf_scene`): a social-deduction game with a night/day cycle
//! (spec §1.10.3, actions §1.6.5).
//!
//! At night the werewolves pick a victim by vote, the seer inspects one player and the witch may
//! save the victim or poison someone (each potion once). The night ends after a fixed number of
//! turns (`len(roles) + 1`, skipped turns included); at dawn the deaths are announced. By day
//! everyone talks, then the moderator opens and closes a lynch vote. Speech reaches only the
//! players allowed to hear it in the current phase, so this scene replaces the base delivery.
//!
//! The scene logic is upstream's, including its win check, which counts only roles that are
//! exactly `werewolf` and exactly `villager`. Upstream's built-in roster gives villagers no role, so
//! its game ends after the first night (spec §1.14.4); our scenario file
//! (`assets/scenarios/werewolf.json`) gives villagers the explicit role `villager` instead, which
//! makes the game playable without changing the rules here.
//!
//! Deliberate differences from upstream:
//! * `config` serialises as upstream's `{moderators}`; `role_map` is accepted when building and
//!   moved into `state.roles` (where upstream keeps it too), so a clone rebuilds the same scene.
//! * `phase` is a closed enum (`night`, `day_discussion`, `day_voting`): patching the state with
//!   another phase string is rejected instead of freezing the game.
//! * `vote_lynch` failure summaries embed the action map as Python prints a dict; our rendering
//!   escapes quotes, backslashes and ASCII control characters as Python does, but leaves other
//!   non-printable Unicode characters as they are (Python would write `\u…` escapes).
//!
//! Upstream's werewolf handlers already return full 5-tuples on every path, so there is no
//! "exception instead of a failure" to fix here; a missing `target` is an ordinary failure with
//! feedback, as upstream.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use super::{SceneError, SceneRules};
use crate::engine::action::{ActionCtx, ActionKind, ActionResult, ActionSpec, Handled, Outcome};
use crate::engine::agent::Agent;
use crate::engine::event::SceneEvent;
use crate::engine::parse::ActionCall;
use crate::engine::prompt::SceneText;
use crate::engine::pyrepr::py_str_repr;
use crate::engine::scenes::handle_common;
use crate::engine::world::World;

/// Scene configuration in a scenario file: `{"role_map": {name: role}, "moderators": [names]}`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Player name → role (`werewolf`, `seer`, `witch`, `villager`, …). Moved into `state.roles`
    /// by [`Werewolf::new`]; agents missing here get their `properties.role`.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    role_map: IndexMap<String, String>,
    /// Players who run the game: they never skip a turn, hear the wolves and the witch at night and
    /// are told every secret night action. Anyone named "moderator" (any case) also counts as one,
    /// except for those notices, which go to this list only (as upstream).
    #[serde(default)]
    moderators: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Night,
    DayDiscussion,
    DayVoting,
}

impl Phase {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Phase::Night => "night",
            Phase::DayDiscussion => "day_discussion",
            Phase::DayVoting => "day_voting",
        }
    }
}

/// A witch's remaining potions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Potions {
    heals_left: i64,
    poisons_left: i64,
}

impl Default for Potions {
    fn default() -> Self {
        Potions { heals_left: 1, poisons_left: 1 }
    }
}

/// What a witch prepared tonight.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WitchAction {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    poison_target: Option<String>,
}

/// Upstream's state dict, key for key and in the same order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct State {
    pub(crate) time: i64,
    pub(crate) phase: Phase,
    /// Dawns so far; 0 during the first night.
    day_count: i64,
    roles: IndexMap<String, String>,
    alive: Vec<String>,
    /// Voter → target, in the order voters first voted (ties go to the target voted first).
    night_kill_votes: IndexMap<String, String>,
    lynch_votes: IndexMap<String, String>,
    /// Created on a witch's first potion; absent means "both potions left" to the actions but
    /// shows as `0/0` in the status line, as upstream.
    witch_uses: IndexMap<String, Potions>,
    witch_saved: bool,
    witch_actions: IndexMap<String, WitchAction>,
    /// Turns taken (or skipped) this night, one entry per turn.
    night_spoken: Vec<String>,
    pub(crate) complete: bool,
    winner: Option<String>,
    /// Upstream adds this key (always empty) at the first dawn that does not end the game; nothing
    /// reads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    day_spoken: Option<Vec<String>>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Werewolf {
    name: String,
    initial_event: String,
    /// Boxed so the `Scene` enum stays small next to the chat scenes.
    state: Box<State>,
    config: Config,
}

pub(crate) const DESCRIPTION: &str = "This is a game of Werewolf, a hidden-role deduction game that alternates between night and day. \
Each day has two parts: open discussion first, then voting, which the Moderator opens and closes. \
At night the werewolves agree on one player to eliminate, the Seer may learn one player's true side, and the Witch may rescue the victim or poison someone, with one potion of each kind for the whole game.";

pub(crate) const GUIDELINES: &str = "- Werewolf players: work together quietly, keep your identity hidden, and cast your kill vote at night; you get a single chance to talk and vote each night.\n\
- The Seer: choose each night's inspection carefully and steer the day's talk without exposing your role.\n\
- The Witch: weigh rescuing the victim against poisoning a suspect; each potion can be used only once.\n\
- Villagers: draw conclusions from what people say and how they vote; do not add confusion.\n\
- Only the werewolves may talk at night.\n\
- There is no kill on the first night.\n\
- From the second night on, the werewolves jointly pick one player to kill.\n\
- In the day discussion everyone speaks once, in the announced order, and answers questions put to them briefly.\n\
- Nobody talks while voting is open; cast your lynch vote before you yield.";

impl Werewolf {
    pub(crate) fn new(name: String, initial_event: String, config: Config) -> Self {
        let mut config = config;
        let roles = std::mem::take(&mut config.role_map);
        let state = Box::new(State {
            time: 1080,
            phase: Phase::Night,
            day_count: 0,
            roles,
            alive: Vec::new(),
            night_kill_votes: IndexMap::new(),
            lynch_votes: IndexMap::new(),
            witch_uses: IndexMap::new(),
            witch_saved: false,
            witch_actions: IndexMap::new(),
            night_spoken: Vec::new(),
            complete: false,
            winner: None,
            day_spoken: None,
        });
        Werewolf { name, initial_event, state, config }
    }

    /// Listed as a moderator, or simply called "moderator" (any case), as upstream.
    pub(crate) fn is_moderator(&self, name: &str) -> bool {
        self.config.moderators.iter().any(|m| m == name) || name.to_lowercase() == "moderator"
    }

    /// Who may hear `speaker` right now (besides the speaker): upstream's phase rules.
    fn hears(&self, speaker: &str, listener: &str) -> bool {
        let s = &self.state;
        if s.phase != Phase::Night {
            return s.is_alive(listener) || self.is_moderator(listener);
        }
        if self.is_moderator(speaker) && s.is_alive(listener) {
            return true;
        }
        match s.role(speaker) {
            Some("werewolf") => {
                s.is_alive(listener) && (s.role(listener) == Some("werewolf") || self.is_moderator(listener))
            }
            Some("witch") => self.is_moderator(listener),
            _ => false,
        }
    }

    /// Indices of the agents named in `names`, in map order (unknown names are ignored).
    fn indices<'a>(&self, world: &World, names: impl IntoIterator<Item = &'a String>) -> Vec<usize> {
        let names: Vec<&String> = names.into_iter().collect();
        let named = |(i, a): (usize, &Agent)| names.contains(&&a.name).then_some(i);
        world.agents.iter().enumerate().filter_map(named).collect()
    }

    /// A secret night action reported to the configured moderators.
    fn tell_moderators(&self, world: &mut World, content: String) {
        let receivers = self.indices(world, &self.config.moderators);
        let event = SceneEvent::public_with("Event", content);
        world.broadcast(&event, Some(self.state.time), Some(&receivers));
    }

    /// A public announcement to everyone.
    fn announce(&self, world: &mut World, content: String) {
        world.broadcast(&SceneEvent::public(content), Some(self.state.time), None);
    }

    /// Dawn: deaths, the announcement, a fresh day and the win check.
    fn resolve_night(&mut self, world: &mut World) {
        let s = &self.state;
        let mut deaths: Vec<String> = s.night_victim().filter(|_| !s.witch_saved).into_iter().collect();
        let poisoned: Vec<String> = s
            .witch_actions
            .values()
            .filter_map(|a| a.poison_target.clone())
            .filter(|t| !t.is_empty() && s.is_alive(t))
            // Upstream only drops a poison target that is also the wolves' victim.
            .filter(|t| !deaths.contains(t))
            .collect();
        deaths.extend(poisoned);
        for d in &deaths {
            self.state.kill(d);
        }
        let text = match deaths.as_slice() {
            [] => "The night ends. At dawn, no one died.".to_string(),
            [one] => format!("The night ends. At dawn, {one} was found dead."),
            many => format!("The night ends. At dawn, multiple bodies were found: {}", many.join(", ")),
        };
        self.announce(world, text);
        let s = &mut self.state;
        s.night_kill_votes.clear();
        s.witch_saved = false;
        s.witch_actions.clear();
        s.phase = Phase::DayDiscussion;
        s.day_count += 1;
        s.lynch_votes.clear();
        if let Some(winner) = s.check_win() {
            self.announce(world, format!("Game over: {winner} win."));
        } else {
            self.state.day_spoken = Some(Vec::new());
        }
    }

    /// End of the day vote: a majority of the living lynches; otherwise a unique plurality leader.
    fn resolve_lynch(&mut self, world: &mut World) {
        let s = &self.state;
        let counts =
            tally(s.lynch_votes.iter().filter(|(v, t)| s.is_alive(v) && s.is_alive(t)).map(|(_, t)| t.as_str()));
        let need = s.alive.len() / 2 + 1;
        let majority = counts.iter().find(|(_, c)| *c >= need).map(|(t, _)| t.to_string());
        let lynched = majority.or_else(|| {
            let top = counts.iter().map(|(_, c)| *c).max()?;
            let mut leaders = counts.iter().filter(|(_, c)| *c == top);
            match (leaders.next(), leaders.next()) {
                (Some((t, _)), None) => Some(t.to_string()),
                _ => None,
            }
        });
        let text = match lynched {
            Some(x) => {
                self.state.kill(&x);
                format!("By vote, {x} was lynched. Night begins.")
            }
            None => "No lynch today. Night begins.".to_string(),
        };
        self.announce(world, text);
    }

    fn vote_lynch(&mut self, ctx: &ActionCtx, world: &mut World) -> Result<Outcome, Refusal> {
        let name = ctx.actor_name(world).to_string();
        if self.state.phase != Phase::DayVoting {
            return Err(Refusal("You can only vote during the voting phase.", "wrong_phase"));
        }
        if !self.state.is_alive(&name) {
            return Err(Refusal("You are dead and cannot act.", "dead"));
        }
        let Some(target) = living_target(&self.state, ctx.call) else {
            return Err(Refusal("Provide a living 'target' to vote.", "invalid_target"));
        };
        self.state.lynch_votes.insert(name.clone(), target.clone());
        let s = &self.state;
        let tally = s.lynch_votes.iter().filter(|(v, t)| **t == target && s.is_alive(v)).count();
        self.announce(world, format!("{name} voted to lynch {target}."));
        let summary = format!("{name} voted to lynch {target}");
        let tally = tally as u64;
        Ok(Outcome::ok(ActionResult::Tally { target, tally }, summary, true))
    }

    fn night_kill(&mut self, ctx: &ActionCtx, world: &mut World) -> Result<Outcome, Refusal> {
        let name = ctx.actor_name(world).to_string();
        if self.state.phase != Phase::Night {
            return Err(Refusal("Night kill can only be cast at night.", "wrong_phase"));
        }
        if !self.state.is_live_wolf(&name) {
            let feedback = "Only living werewolves can vote a night kill.";
            return Err(Refusal(feedback, "not_werewolf_or_dead"));
        }
        if self.state.day_count == 0 {
            let feedback = "First night has no kills; discuss with fellow wolves.";
            return Err(Refusal(feedback, "first_night"));
        }
        let Some(target) = living_target(&self.state, ctx.call).filter(|t| self.state.role(t) != Some("werewolf"))
        else {
            return Err(Refusal("Provide a living non-werewolf 'target'.", "invalid_target"));
        };
        self.state.night_kill_votes.insert(name.clone(), target.clone());
        // Every werewolf hears it, dead or alive, and so do the moderators.
        let s = &self.state;
        let wolves = s.roles.iter().filter(|(_, r)| *r == "werewolf").map(|(n, _)| n);
        let receivers = self.indices(world, wolves.chain(&self.config.moderators));
        let content = format!("{name} voted night kill to {target}.");
        world.broadcast(&SceneEvent::public_with("Event", content), Some(s.time), Some(&receivers));
        let tally = s.night_kill_votes.iter().filter(|(v, t)| **t == target && s.is_live_wolf(v));
        let tally = tally.count() as u64;
        let summary = format!("{name} voted night kill: {target}");
        Ok(Outcome::ok(ActionResult::Tally { target, tally }, summary, true))
    }

    /// Refuses by day (`wrong_phase`, telling `by_day`) or when `name` is not a living `role`.
    fn night_role(&self, name: &str, role: &str, by_day: &'static str, only: Refusal) -> Result<(), Refusal> {
        if self.state.phase != Phase::Night {
            return Err(Refusal(by_day, "wrong_phase"));
        }
        if !self.state.is_alive(name) || self.state.role(name) != Some(role) {
            return Err(only);
        }
        Ok(())
    }

    /// Refuses anyone but a moderator, then any phase but `phase`: opening the vote belongs to
    /// the discussion, closing it to the vote.
    fn moderator_in(&self, name: &str, phase: Phase) -> Result<(), Refusal> {
        let (only, elsewhen) = match phase {
            Phase::DayDiscussion => {
                ("Only the moderator can open voting.", "Open voting only during discussion phase.")
            }
            _ => ("Only the moderator can close voting.", "Close voting only during voting phase."),
        };
        if !self.is_moderator(name) {
            return Err(Refusal(only, "not_moderator"));
        }
        if self.state.phase != phase {
            return Err(Refusal(elsewhen, "wrong_phase"));
        }
        Ok(())
    }

    fn inspect(&mut self, ctx: &ActionCtx, world: &mut World) -> Result<Outcome, Refusal> {
        let name = ctx.actor_name(world).to_string();
        let only = Refusal("Only a living Seer can inspect.", "not_seer_or_dead");
        self.night_role(&name, "seer", "You can only inspect at night.", only)?;
        let Some(target) = living_target(&self.state, ctx.call) else {
            return Err(Refusal("Provide a living 'target' to inspect.", "invalid_target"));
        };
        let is_wolf = self.state.role(&target) == Some("werewolf");
        let verdict = if is_wolf { "a werewolf" } else { "not a werewolf" };
        world.feedback(ctx.actor, &format!("Inspection result: {target} is {verdict}."));
        let note = format!("{name} inspected {target} ({})", if is_wolf { "werewolf" } else { "not" });
        self.tell_moderators(world, note.clone());
        let result = ActionResult::Inspected { target, is_werewolf: is_wolf };
        Ok(Outcome::ok(result, note, true))
    }

    fn witch_save(&mut self, ctx: &ActionCtx, world: &mut World) -> Result<Outcome, Refusal> {
        let name = ctx.actor_name(world).to_string();
        let only = Refusal("Only a living Witch can save.", "not_witch_or_dead");
        self.night_role(&name, "witch", "You can only use save at night.", only)?;
        let uses = self.state.witch_uses.entry(name.clone()).or_default();
        if uses.heals_left <= 0 {
            return Err(Refusal("You have already used your save potion.", "no_heal_left"));
        }
        uses.heals_left -= 1;
        self.state.witch_saved = true;
        world.feedback(ctx.actor, "You prepare the save potion for tonight's victim.");
        self.tell_moderators(world, format!("{name} prepared a save potion."));
        let summary = format!("{name} used witch save");
        Ok(Outcome::ok(ActionResult::Saved { saved: true }, summary, true))
    }

    fn witch_poison(&mut self, ctx: &ActionCtx, world: &mut World) -> Result<Outcome, Refusal> {
        let name = ctx.actor_name(world).to_string();
        let only = Refusal("Only a living Witch can poison.", "not_witch_or_dead");
        self.night_role(&name, "witch", "You can only poison at night.", only)?;
        let Some(target) = living_target(&self.state, ctx.call).filter(|t| *t != name) else {
            let feedback = "Provide a living 'target' other than yourself.";
            return Err(Refusal(feedback, "invalid_target"));
        };
        let uses = self.state.witch_uses.entry(name.clone()).or_default();
        if uses.poisons_left <= 0 {
            return Err(Refusal("You have already used your poison potion.", "no_poison_left"));
        }
        uses.poisons_left -= 1;
        let action = self.state.witch_actions.entry(name.clone()).or_default();
        action.poison_target = Some(target.clone());
        world.feedback(ctx.actor, &format!("You prepared a poison targeting {target}."));
        self.tell_moderators(world, format!("{name} prepared a poison targeting {target}."));
        let summary = format!("{name} prepared poison for {target}");
        Ok(Outcome::ok(ActionResult::PoisonPrepared { target }, summary, true))
    }

    fn open_voting(&mut self, ctx: &ActionCtx, world: &mut World) -> Result<Outcome, Refusal> {
        let name = ctx.actor_name(world).to_string();
        self.moderator_in(&name, Phase::DayDiscussion)?;
        self.state.phase = Phase::DayVoting;
        self.state.lynch_votes.clear();
        self.announce(world, "Voting is now open.".to_string());
        let summary = format!("{name} opened voting");
        Ok(Outcome::ok(ActionResult::VotingOpened { opened: true }, summary, true))
    }

    fn close_voting(&mut self, ctx: &ActionCtx, world: &mut World) -> Result<Outcome, Refusal> {
        let name = ctx.actor_name(world).to_string();
        self.moderator_in(&name, Phase::DayVoting)?;
        self.resolve_lynch(world);
        self.state.lynch_votes.clear();
        self.state.phase = Phase::Night;
        if let Some(winner) = self.state.check_win() {
            self.announce(world, format!("Game over: {winner} win."));
        }
        let summary = format!("{name} closed voting");
        Ok(Outcome::ok(ActionResult::VotingClosed { closed: true }, summary, true))
    }
}

impl State {
    pub(crate) fn is_alive(&self, name: &str) -> bool {
        self.alive.iter().any(|n| n == name)
    }

    pub(crate) fn role(&self, name: &str) -> Option<&str> {
        self.roles.get(name).map(String::as_str)
    }

    fn is_live_wolf(&self, name: &str) -> bool {
        self.is_alive(name) && self.role(name) == Some("werewolf")
    }

    fn kill(&mut self, name: &str) {
        if let Some(i) = self.alive.iter().position(|n| n == name) {
            self.alive.remove(i);
        }
    }

    /// The wolves' choice tonight: the target most voted by living wolves (the first one voted for
    /// on a tie), unless it is the first night or the target is dead or a wolf.
    pub(crate) fn night_victim(&self) -> Option<String> {
        let votes = tally(self.night_kill_votes.iter().filter(|(v, _)| self.is_live_wolf(v)).map(|(_, t)| t.as_str()));
        let top = votes.iter().map(|(_, c)| *c).max()?;
        let (candidate, _) = votes.iter().find(|(_, c)| *c == top)?;
        (self.day_count != 0 && self.is_alive(candidate) && self.role(candidate) != Some("werewolf"))
            .then(|| candidate.to_string())
    }

    /// Upstream's win check: only roles exactly `werewolf` and exactly `villager` count. Records
    /// the winner and completes the game when a side has won.
    pub(crate) fn check_win(&mut self) -> Option<String> {
        let count = |role: &str| self.alive.iter().filter(|n| self.role(n) == Some(role)).count();
        let winner = match (count("werewolf"), count("villager")) {
            (0, 0) => "no one",
            (0, _) => "villagers",
            (_, 0) => "werewolves",
            _ => return None,
        };
        self.complete = true;
        self.winner = Some(winner.to_string());
        Some(winner.to_string())
    }
}

/// Votes per target, in the order targets first appear (Python's `Counter`).
fn tally<'a>(targets: impl Iterator<Item = &'a str>) -> Vec<(&'a str, usize)> {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for t in targets {
        match counts.iter_mut().find(|(x, _)| *x == t) {
            Some((_, c)) => *c += 1,
            None => counts.push((t, 1)),
        }
    }
    counts
}

/// The call's optional `target` when it names a living player.
fn living_target(state: &State, call: &ActionCall) -> Option<String> {
    call.get("target").filter(|t| !t.is_empty() && state.is_alive(t)).map(str::to_string)
}

/// Why an action was refused: the actor's feedback line and the result's `error` code.
#[derive(Debug)]
struct Refusal(&'static str, &'static str);

/// Upstream's summary of a refused action: `vote_lynch` quotes the whole action map, the others
/// just name the action.
fn refusal_summary(ctx: &ActionCtx, name: &str) -> String {
    match ctx.kind {
        ActionKind::VoteLynch => format!("{name} failed to vote: {}", py_action_repr(ctx.call)),
        kind => format!("{name} {} failed", kind.name()),
    }
}

/// The action map as Python prints a dict (`{'action': 'vote_lynch', 'target': 'Ronan'}`);
/// upstream puts it in `vote_lynch`'s failure summaries.
fn py_action_repr(call: &ActionCall) -> String {
    let mut parts = vec![format!("'action': {}", py_str_repr(&call.name))];
    parts.extend(call.fields.iter().map(|(k, v)| format!("{}: {}", py_str_repr(k), py_str_repr(v))));
    format!("{{{}}}", parts.join(", "))
}

impl SceneRules for Werewolf {
    clock_and_opening!();
    fn text(&self) -> SceneText {
        SceneText::plain(DESCRIPTION, GUIDELINES, String::new())
    }
    fn scene_actions(&self, _agent: &Agent) -> Vec<ActionKind> {
        vec![ActionKind::Speak, ActionKind::VoteLynch, ActionKind::Yield]
    }

    fn initialize_agent(&mut self, agent: &mut Agent) {
        if !self.state.is_alive(&agent.name) {
            self.state.alive.push(agent.name.clone());
        }
        if !self.state.roles.contains_key(&agent.name)
            && let Some(role) = agent.role().filter(|r| !r.is_empty())
        {
            self.state.roles.insert(agent.name.clone(), role.to_string());
        }
    }

    /// Tells each configured moderator the full roster and every secret role.
    fn pre_run(&mut self, world: &mut World) -> Result<(), SceneError> {
        let roles: Vec<String> = self.state.roles.iter().map(|(n, r)| format!("{n} is {r}")).collect();
        let hint =
            format!("You are the Moderator. Players: {}. Roles: {}.", world.names().join(", "), roles.join(", "));
        for m in &self.config.moderators {
            let receivers = self.indices(world, [m]);
            let event = SceneEvent::public_with("System", hint.clone());
            world.broadcast(&event, Some(self.state.time), Some(&receivers));
        }
        Ok(())
    }

    fn should_skip_turn(&self, agent: &Agent) -> bool {
        if self.is_moderator(&agent.name) {
            return false;
        }
        if !self.state.is_alive(&agent.name) {
            return true;
        }
        self.state.phase == Phase::Night && !matches!(self.state.role(&agent.name), Some("werewolf" | "seer" | "witch"))
    }

    fn is_complete(&self) -> bool {
        self.state.complete
    }

    fn status_prompt(&self, agent: &Agent) -> String {
        if self.is_moderator(&agent.name) {
            return String::new();
        }
        let s = &self.state;
        let alive = s.is_alive(&agent.name);
        let mut lines = vec![
            "--- Status ---".to_string(),
            format!("Phase: {} (day {})", s.phase.as_str(), s.day_count),
            format!("Alive: {}", if alive { "True" } else { "False" }),
        ];
        if s.role(&agent.name) == Some("witch") {
            let (h, p) = s.witch_uses.get(&agent.name).map_or((0, 0), |u| (u.heals_left, u.poisons_left));
            lines.push(format!("Witch potions (save/poison): {h}/{p}"));
            if s.phase == Phase::Night {
                lines.push(format!("Tonight's victim: {}", s.night_victim().as_deref().unwrap_or("none")));
            }
        }
        if s.phase == Phase::DayVoting {
            let vote = s.lynch_votes.get(&agent.name).filter(|_| alive).map_or("none", String::as_str);
            lines.push(format!("Vote: {vote}"));
        }
        lines.join("\n") + "\n"
    }

    fn handle(&mut self, ctx: &ActionCtx, world: &mut World) -> Handled {
        let handled = match ctx.kind {
            ActionKind::VoteLynch => self.vote_lynch(ctx, world),
            ActionKind::NightKill => self.night_kill(ctx, world),
            ActionKind::Inspect => self.inspect(ctx, world),
            ActionKind::WitchSave => self.witch_save(ctx, world),
            ActionKind::WitchPoison => self.witch_poison(ctx, world),
            ActionKind::OpenVoting => self.open_voting(ctx, world),
            ActionKind::CloseVoting => self.close_voting(ctx, world),
            _ => return handle_common(self, ctx, world),
        };
        // Every refusal is an ordinary failure: feedback for the actor, `{error}` as the result.
        Ok(handled.unwrap_or_else(|Refusal(feedback, error)| {
            world.feedback(ctx.actor, feedback);
            let summary = refusal_summary(ctx, ctx.actor_name(world));
            Outcome::fail(ActionResult::error(error), summary)
        }))
    }

    /// Speech goes only to those allowed to hear it in this phase, listeners first and the speaker
    /// last, with no `system_broadcast` record (upstream feeds the lines directly).
    fn deliver_message(&mut self, event: &SceneEvent, sender: usize, world: &mut World) {
        let line = event.line(Some(self.state.time));
        let Some(speaker) = world.agents.get(sender).map(|a| a.name.clone()) else {
            return;
        };
        let listeners: Vec<usize> =
            (0..world.agents.len()).filter(|&i| i != sender && self.hears(&speaker, &world.agents[i].name)).collect();
        for i in listeners {
            world.feedback(i, &line);
        }
        world.feedback(sender, &line);
    }

    /// The clock, then the night's turn count: after `len(roles) + 1` night turns (skipped ones
    /// included) dawn breaks.
    fn post_turn(&mut self, actor: usize, world: &mut World) {
        self.state.time += self.minutes_per_turn();
        if self.state.phase != Phase::Night {
            return;
        }
        if let Some(agent) = world.agents.get(actor) {
            self.state.night_spoken.push(agent.name.clone());
        }
        if self.state.night_spoken.len() == self.state.roles.len() + 1 {
            self.resolve_night(world);
            self.state.night_spoken.clear();
        }
    }
}

/// The prompt text of the actions this scene adds, for the catalogue in `scenes/mod.rs`.
pub(crate) const ACTIONS: &[(ActionKind, ActionSpec)] = &[
    (
        ActionKind::VoteLynch,
        ActionSpec {
            desc: "once voting is open in the day, vote for the player you want lynched; one vote per day",
            instruction: "- To vote for a lynch during the day:\n<Action name=\"vote_lynch\"><target>player name</target></Action>\n",
        },
    ),
    (
        ActionKind::NightKill,
        ActionSpec {
            desc: "at night, the werewolves vote for the player they will kill",
            instruction: "- Werewolves only, at night: vote for tonight's kill:\n<Action name=\"night_kill\"><target>player name</target></Action>\n",
        },
    ),
    (
        ActionKind::Inspect,
        ActionSpec {
            desc: "at night, the Seer checks one player and learns whether they are a werewolf",
            instruction: "- Seer only, at night: check a player:\n<Action name=\"inspect\"><target>player name</target></Action>\n",
        },
    ),
    (
        ActionKind::WitchSave,
        ActionSpec {
            desc: "at night, the Witch rescues tonight's victim; usable once per game",
            instruction: "- Witch only, at night: rescue tonight's victim (one use per game):\n<Action name=\"witch_save\" />\n",
        },
    ),
    (
        ActionKind::WitchPoison,
        ActionSpec {
            desc: "at night, the Witch poisons one player; usable once per game",
            instruction: "- Witch only, at night: poison a player (one use per game):\n<Action name=\"witch_poison\"><target>player name</target></Action>\n",
        },
    ),
    (
        ActionKind::OpenVoting,
        ActionSpec {
            desc: "the Moderator ends the day discussion and opens voting",
            instruction: "- Moderator only: open voting once the discussion is over:\n<Action name=\"open_voting\" />\n",
        },
    ),
    (
        ActionKind::CloseVoting,
        ActionSpec {
            desc: "the Moderator closes voting, settles the lynch and ends the day",
            instruction: "- Moderator only: close voting and end the day:\n<Action name=\"close_voting\" />\n",
        },
    ),
];

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::engine::event::{Event, EventType};
    use crate::engine::ordering::Ordering;
    use crate::engine::scenes::testing::{mock_run, passed};
    use crate::engine::scenes::{Refused, Scene, check_refusal, check_refusals};
    use crate::engine::simulator::Simulator;
    use crate::llm::MockClient;
    use crate::scenario::Scenario;

    const ROSTER: [(&str, Option<&str>); 9] = [
        ("Moderator", None),
        ("Elena", Some("werewolf")),
        ("Bram", Some("witch")),
        ("Ronan", Some("seer")),
        ("Mira", Some("werewolf")),
        ("Pia", Some("villager")),
        ("Taro", Some("villager")),
        ("Ava", Some("villager")),
        ("Niko", Some("werewolf")),
    ];

    /// The scenario file's roster, roles given through `properties.role`.
    fn game() -> Simulator {
        game_with(&ROSTER, Config { role_map: IndexMap::new(), moderators: vec!["Moderator".into()] })
    }

    /// A fresh build, its initial broadcasts still queued.
    fn build(roster: &[(&str, Option<&str>)], config: Config) -> Simulator {
        let agents = roster
            .iter()
            .map(|(name, role)| {
                let mut a = Agent::new(*name, vec![]);
                a.properties.insert("role".into(), role.map_or(Value::Null, Value::from));
                a
            })
            .collect();
        let scene = Scene::Werewolf(Werewolf::new("werewolf_village".into(), "Night falls.".into(), config));
        Simulator::in_order(agents, scene).unwrap()
    }

    fn game_with(roster: &[(&str, Option<&str>)], config: Config) -> Simulator {
        let mut sim = build(roster, config);
        sim.world.pending.clear();
        sim
    }

    fn ww(sim: &Simulator) -> &Werewolf {
        match &sim.scene {
            Scene::Werewolf(w) => w,
            _ => unreachable!(),
        }
    }

    fn st(sim: &mut Simulator) -> &mut State {
        match &mut sim.scene {
            Scene::Werewolf(w) => &mut w.state,
            _ => unreachable!(),
        }
    }

    fn idx(sim: &Simulator, name: &str) -> usize {
        sim.world.agent_index(name).unwrap()
    }

    /// Runs one action of `who` straight through the scene.
    fn act(sim: &mut Simulator, who: &str, call: ActionCall) -> Outcome {
        crate::engine::scenes::act_as(sim.scene.rules_mut(), &mut sim.world, who, &call).unwrap()
    }

    fn target(action: &str, t: &str) -> ActionCall {
        ActionCall::new(action).with("target", t)
    }

    /// Feedback lines given since the last call, as (agent, line).
    fn lines(sim: &mut Simulator) -> Vec<(String, String)> {
        sim.world
            .take_out()
            .into_iter()
            .filter(|e: &Event| e.kind == EventType::AgentCtxDelta)
            .map(|e| (e.data["agent"].as_str().unwrap().to_string(), e.data["content"].as_str().unwrap().to_string()))
            .collect()
    }

    /// Who received `text` since the last call, in order.
    fn receivers(lines: &[(String, String)], text: &str) -> Vec<String> {
        lines.iter().filter(|(_, l)| l == text).map(|(a, _)| a.clone()).collect()
    }

    /// Night `day_count`: Elena votes to kill `victim`, the witch Bram makes `witch`'s call if
    /// any, then the nine turns to dawn. The lines given since the calls.
    fn dawn(sim: &mut Simulator, day_count: i64, victim: &str, witch: Option<ActionCall>) -> Vec<(String, String)> {
        night(sim, day_count);
        act(sim, "Elena", target("night_kill", victim));
        if let Some(call) = witch {
            act(sim, "Bram", call);
        }
        lines(sim);
        end_turns(sim, 9);
        lines(sim)
    }

    /// Asserts that all nine players, the dead too, received `text`.
    fn all_hear(lines: &[(String, String)], text: &str) {
        assert_eq!(receivers(lines, text).len(), 9, "{text}");
    }

    /// The queued `system_broadcast` records, drained.
    fn broadcasts(sim: &mut Simulator) -> Vec<Value> {
        sim.world.pending.drain(..).map(|e| e.data).collect()
    }

    fn night(sim: &mut Simulator, day_count: i64) {
        let s = st(sim);
        s.phase = Phase::Night;
        s.day_count = day_count;
    }

    /// Ends `n` turns of the moderator (who never skips) through `post_turn`.
    fn end_turns(sim: &mut Simulator, n: usize) {
        let m = idx(sim, "Moderator");
        for _ in 0..n {
            sim.scene.rules_mut().post_turn(m, &mut sim.world);
        }
    }

    /// `who` tries `call`, which the game refuses as `expected` says ([`check_refusal`]).
    fn refused_as(sim: &mut Simulator, who: &str, call: ActionCall, expected: Refused) {
        let Scene::Werewolf(w) = &mut sim.scene else { unreachable!() };
        check_refusal(w, &mut sim.world, who, &call, expected);
    }

    /// `who` tries `call`, which the game refuses with `error` and the usual summary, telling
    /// `who` alone `told`.
    fn refused(sim: &mut Simulator, who: &str, call: ActionCall, error: &str, told: &str) {
        let summary = format!("{who} {} failed", call.name);
        refused_as(sim, who, call, Refused::error(error, &summary, told));
    }

    /// [`check_refusals`]: each row `(who, action, error, told)` is refused.
    fn refusals(sim: &mut Simulator, rows: &[(&str, &str, &str, &str)]) {
        let Scene::Werewolf(w) = &mut sim.scene else { unreachable!() };
        check_refusals(w, &mut sim.world, rows);
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn initial_state_roles_and_moderator_roster() {
        // role_map wins over properties; Pia's explicit entry stays, the rest come from properties.
        let config = Config {
            role_map: [("Elena".to_string(), "werewolf".to_string()), ("Pia".into(), "baker".into())]
                .into_iter()
                .collect(),
            moderators: vec!["Moderator".into()],
        };
        let mut sim = build(&ROSTER, config);
        let s = &ww(&sim).state;
        assert_eq!(s.time, 1080);
        assert_eq!(s.phase, Phase::Night);
        assert_eq!(s.alive, names(&ROSTER.map(|(n, _)| n)));
        let roles: Vec<(&str, &str)> = s.roles.iter().map(|(n, r)| (n.as_str(), r.as_str())).collect();
        assert_eq!(
            roles,
            [
                ("Elena", "werewolf"),
                ("Pia", "baker"),
                ("Bram", "witch"),
                ("Ronan", "seer"),
                ("Mira", "werewolf"),
                ("Taro", "villager"),
                ("Ava", "villager"),
                ("Niko", "werewolf")
            ]
        );
        assert!(!s.roles.contains_key("Moderator"), "a null role records nothing");
        // Scene actions follow the agent's own.
        let elena = &sim.world.agents[1];
        assert_eq!(elena.action_space, vec![ActionKind::Speak, ActionKind::VoteLynch, ActionKind::Yield]);
        // pre_run: the initial event for all, then the private roster for the moderator only.
        let queued = broadcasts(&mut sim);
        assert_eq!(queued.len(), 2);
        let roster = "You are the Moderator. Players: Moderator, Elena, Bram, Ronan, Mira, Pia, Taro, Ava, Niko. \
                      Roles: Elena is werewolf, Pia is baker, Bram is witch, Ronan is seer, Mira is werewolf, \
                      Taro is villager, Ava is villager, Niko is werewolf.";
        assert_eq!(queued[1]["text"], format!("System: {roster}"));
        assert_eq!(queued[1]["recipients"], json!(["Moderator"]));
        assert_eq!(queued[1]["type"], "PublicEvent");
        let memory = sim.world.agents[0].short_memory.last().unwrap().content.to_string();
        assert!(memory.ends_with(&format!("[18:00] System: {roster}")), "{memory}");
        let elena_memory = sim.world.agents[1].short_memory.last().unwrap().content.to_string();
        assert!(!elena_memory.contains("Roles:"));
    }

    #[test]
    fn night_kill_records_votes_tells_the_wolves_and_tallies_live_wolves() {
        let mut sim = game();
        night(&mut sim, 1);
        lines(&mut sim);
        let o = act(&mut sim, "Elena", target("night_kill", "Pia"));
        passed(&o, ActionResult::Tally { target: "Pia".into(), tally: 1 }, "Elena voted night kill: Pia");
        let got = lines(&mut sim);
        // Every wolf (the voter too) and the moderator, in map order.
        assert_eq!(
            receivers(&got, "[18:00] Event: Elena voted night kill to Pia."),
            names(&["Moderator", "Elena", "Mira", "Niko"])
        );
        assert_eq!(got.len(), 4);
        let b = broadcasts(&mut sim);
        assert_eq!(b[0]["text"], "Event: Elena voted night kill to Pia.");
        assert_eq!(b[0]["sender"], Value::Null);

        let o = act(&mut sim, "Mira", target("night_kill", "Pia"));
        assert_eq!(o.result_json(), json!({"target": "Pia", "tally": 2}));
        // A dead wolf still hears the pack but its vote no longer counts.
        st(&mut sim).kill("Elena");
        lines(&mut sim);
        let o = act(&mut sim, "Niko", target("night_kill", "Pia"));
        assert_eq!(o.result_json(), json!({"target": "Pia", "tally": 2}));
        let got = lines(&mut sim);
        assert_eq!(
            receivers(&got, "[18:00] Event: Niko voted night kill to Pia."),
            names(&["Moderator", "Elena", "Mira", "Niko"])
        );
        // A later vote replaces the earlier one.
        act(&mut sim, "Niko", target("night_kill", "Taro"));
        assert_eq!(ww(&sim).state.night_kill_votes.get("Niko").map(String::as_str), Some("Taro"));
        assert_eq!(ww(&sim).state.night_kill_votes.len(), 3);
    }

    #[test]
    fn night_kill_checks_in_order() {
        let mut sim = game();
        lines(&mut sim);
        #[rustfmt::skip]
        let cases: [(&str, ActionCall, Phase, i64, &str, &str); 7] = [
            ("Elena", target("night_kill", "Pia"), Phase::DayDiscussion, 1, "Night kill can only be cast at night.", "wrong_phase"),
            ("Pia", target("night_kill", "Taro"), Phase::Night, 1, "Only living werewolves can vote a night kill.", "not_werewolf_or_dead"),
            ("Elena", target("night_kill", "Pia"), Phase::Night, 0, "First night has no kills; discuss with fellow wolves.", "first_night"),
            ("Elena", target("night_kill", "Mira"), Phase::Night, 1, "Provide a living non-werewolf 'target'.", "invalid_target"),
            ("Elena", target("night_kill", "Nobody"), Phase::Night, 1, "Provide a living non-werewolf 'target'.", "invalid_target"),
            ("Elena", ActionCall::new("night_kill"), Phase::Night, 1, "Provide a living non-werewolf 'target'.", "invalid_target"),
            ("Elena", target("night_kill", ""), Phase::Night, 1, "Provide a living non-werewolf 'target'.", "invalid_target"),
        ];
        for (who, call, phase, day, feedback, error) in cases {
            st(&mut sim).phase = phase;
            st(&mut sim).day_count = day;
            refused(&mut sim, who, call, error, feedback);
        }
        st(&mut sim).kill("Elena");
        assert_eq!(act(&mut sim, "Elena", target("night_kill", "Pia")).result_json()["error"], "not_werewolf_or_dead");
        st(&mut sim).kill("Pia");
        assert_eq!(act(&mut sim, "Mira", target("night_kill", "Pia")).result_json()["error"], "invalid_target");
        assert!(ww(&sim).state.night_kill_votes.is_empty());
        assert!(broadcasts(&mut sim).is_empty());
    }

    #[test]
    fn inspect_tells_the_seer_and_the_moderator() {
        let mut sim = game();
        lines(&mut sim);
        let o = act(&mut sim, "Ronan", target("inspect", "Elena"));
        passed(
            &o,
            ActionResult::Inspected { target: "Elena".into(), is_werewolf: true },
            "Ronan inspected Elena (werewolf)",
        );
        assert_eq!(
            lines(&mut sim),
            vec![
                ("Ronan".into(), "Inspection result: Elena is a werewolf.".into()),
                ("Moderator".into(), "[18:00] Event: Ronan inspected Elena (werewolf)".into())
            ]
        );
        let o = act(&mut sim, "Ronan", target("inspect", "Bram"));
        assert_eq!(o.result_json(), json!({"target": "Bram", "is_werewolf": false}));
        assert_eq!(o.summary.as_deref(), Some("Ronan inspected Bram (not)"));
        assert_eq!(lines(&mut sim)[0].1, "Inspection result: Bram is not a werewolf.");

        #[rustfmt::skip]
        let fails = [
            ("Ronan", "Elena", Some(Phase::DayDiscussion), "You can only inspect at night.", "wrong_phase"),
            ("Pia", "Elena", None, "Only a living Seer can inspect.", "not_seer_or_dead"),
            ("Ronan", "Ghost", None, "Provide a living 'target' to inspect.", "invalid_target"),
        ];
        for (who, t, phase, feedback, error) in fails {
            st(&mut sim).phase = phase.unwrap_or(Phase::Night);
            refused(&mut sim, who, target("inspect", t), error, feedback);
        }
    }

    #[test]
    fn witch_save_uses_the_single_heal() {
        let mut sim = game();
        lines(&mut sim);
        st(&mut sim).phase = Phase::DayVoting;
        refused(&mut sim, "Bram", ActionCall::new("witch_save"), "wrong_phase", "You can only use save at night.");
        st(&mut sim).phase = Phase::Night;
        let o = act(&mut sim, "Ronan", ActionCall::new("witch_save"));
        assert_eq!(o.result_json(), json!({"error": "not_witch_or_dead"}));
        assert_eq!(lines(&mut sim), vec![("Ronan".into(), "Only a living Witch can save.".into())]);
        assert!(ww(&sim).state.witch_uses.is_empty());

        let o = act(&mut sim, "Bram", ActionCall::new("witch_save"));
        passed(&o, ActionResult::Saved { saved: true }, "Bram used witch save");
        assert_eq!(
            lines(&mut sim),
            vec![
                ("Bram".into(), "You prepare the save potion for tonight's victim.".into()),
                ("Moderator".into(), "[18:00] Event: Bram prepared a save potion.".into())
            ]
        );
        let s = &ww(&sim).state;
        assert!(s.witch_saved);
        assert_eq!(s.witch_uses["Bram"], Potions { heals_left: 0, poisons_left: 1 });

        refused(
            &mut sim,
            "Bram",
            ActionCall::new("witch_save"),
            "no_heal_left",
            "You have already used your save potion.",
        );
    }

    #[test]
    fn witch_poison_marks_a_target_once() {
        let mut sim = game();
        lines(&mut sim);
        #[rustfmt::skip]
        let fails = [
            (Phase::DayDiscussion, "Bram", Some("Elena"), "You can only poison at night.", "wrong_phase"),
            (Phase::Night, "Elena", Some("Pia"), "Only a living Witch can poison.", "not_witch_or_dead"),
            (Phase::Night, "Bram", Some("Bram"), "Provide a living 'target' other than yourself.", "invalid_target"),
            (Phase::Night, "Bram", Some("Ghost"), "Provide a living 'target' other than yourself.", "invalid_target"),
            (Phase::Night, "Bram", None, "Provide a living 'target' other than yourself.", "invalid_target"),
        ];
        for (phase, who, t, feedback, error) in fails {
            st(&mut sim).phase = phase;
            let call = t.map_or(ActionCall::new("witch_poison"), |t| target("witch_poison", t));
            refused(&mut sim, who, call, error, feedback);
        }
        let o = act(&mut sim, "Bram", target("witch_poison", "Elena"));
        passed(&o, ActionResult::PoisonPrepared { target: "Elena".into() }, "Bram prepared poison for Elena");
        assert_eq!(
            lines(&mut sim),
            vec![
                ("Bram".into(), "You prepared a poison targeting Elena.".into()),
                ("Moderator".into(), "[18:00] Event: Bram prepared a poison targeting Elena.".into())
            ]
        );
        let s = &ww(&sim).state;
        assert_eq!(s.witch_uses["Bram"], Potions { heals_left: 1, poisons_left: 0 });
        assert_eq!(s.witch_actions["Bram"].poison_target.as_deref(), Some("Elena"));
        refused(
            &mut sim,
            "Bram",
            target("witch_poison", "Mira"),
            "no_poison_left",
            "You have already used your poison potion.",
        );
        // The save potion is still there after the poison.
        assert!(act(&mut sim, "Bram", ActionCall::new("witch_save")).success);
    }

    #[test]
    fn dawn_comes_after_len_roles_plus_one_night_turns() {
        let mut sim = game();
        night(&mut sim, 1);
        act(&mut sim, "Elena", target("night_kill", "Pia"));
        lines(&mut sim);
        broadcasts(&mut sim);
        // 8 roles → the ninth turn ends the night.
        end_turns(&mut sim, 8);
        assert_eq!(ww(&sim).state.night_spoken.len(), 8);
        assert_eq!(ww(&sim).state.phase, Phase::Night);
        assert_eq!(ww(&sim).state.time, 1080 + 8 * 3);
        end_turns(&mut sim, 1);
        let s = &ww(&sim).state;
        assert_eq!(s.time, 1107);
        assert_eq!(s.phase, Phase::DayDiscussion);
        assert_eq!(s.day_count, 2);
        assert!(s.night_spoken.is_empty() && s.night_kill_votes.is_empty() && s.lynch_votes.is_empty());
        assert!(!s.is_alive("Pia"));
        assert_eq!(s.day_spoken, Some(vec![]));
        let got = lines(&mut sim);
        let text = "[18:27] Public Event: The night ends. At dawn, Pia was found dead.";
        // The dead hear it too.
        all_hear(&got, text);
        assert_eq!(broadcasts(&mut sim)[0]["text"], "Public Event: The night ends. At dawn, Pia was found dead.");
        // Day turns do not count toward the next night.
        end_turns(&mut sim, 3);
        assert!(ww(&sim).state.night_spoken.is_empty());
    }

    #[test]
    fn dawn_with_victim_and_poison_lists_both() {
        let mut sim = game();
        let got = dawn(&mut sim, 1, "Pia", Some(target("witch_poison", "Niko")));
        all_hear(&got, "[18:27] Public Event: The night ends. At dawn, multiple bodies were found: Pia, Niko");
        let s = &ww(&sim).state;
        assert!(!s.is_alive("Pia") && !s.is_alive("Niko"));
        assert!(s.witch_actions.is_empty());
        assert_eq!(s.witch_uses["Bram"].poisons_left, 0, "potions are not restored at dawn");
    }

    #[test]
    fn dawn_with_a_save_kills_no_one_and_poisoning_the_victim_counts_once() {
        let mut sim = game();
        let got = dawn(&mut sim, 1, "Pia", Some(ActionCall::new("witch_save")));
        all_hear(&got, "[18:27] Public Event: The night ends. At dawn, no one died.");
        assert!(ww(&sim).state.is_alive("Pia"));
        assert!(!ww(&sim).state.witch_saved);

        let got = dawn(&mut sim, 2, "Taro", Some(target("witch_poison", "Taro")));
        all_hear(&got, "[18:54] Public Event: The night ends. At dawn, Taro was found dead.");
    }

    #[test]
    fn no_votes_on_the_first_night_means_no_death() {
        let mut sim = game();
        lines(&mut sim);
        end_turns(&mut sim, 9);
        all_hear(&lines(&mut sim), "[18:27] Public Event: The night ends. At dawn, no one died.");
        assert_eq!(ww(&sim).state.day_count, 1);
        assert!(!ww(&sim).is_complete());
    }

    #[test]
    fn victim_is_the_first_target_on_a_tie_and_counts_only_live_wolves() {
        let mut sim = game();
        night(&mut sim, 1);
        act(&mut sim, "Elena", target("night_kill", "Pia"));
        act(&mut sim, "Mira", target("night_kill", "Taro"));
        assert_eq!(ww(&sim).state.night_victim().as_deref(), Some("Pia"));
        act(&mut sim, "Niko", target("night_kill", "Taro"));
        assert_eq!(ww(&sim).state.night_victim().as_deref(), Some("Taro"));
        st(&mut sim).kill("Niko");
        assert_eq!(ww(&sim).state.night_victim().as_deref(), Some("Pia"));
        st(&mut sim).day_count = 0;
        assert_eq!(ww(&sim).state.night_victim(), None, "never on the first night");
    }

    #[test]
    fn moderator_opens_and_closes_the_vote() {
        let mut sim = game();
        lines(&mut sim);
        #[rustfmt::skip]
        let rows = [
            ("Elena", "open_voting", "not_moderator", "Only the moderator can open voting."),
            ("Moderator", "open_voting", "wrong_phase", "Open voting only during discussion phase."),
            ("Moderator", "close_voting", "wrong_phase", "Close voting only during voting phase."),
            ("Pia", "close_voting", "not_moderator", "Only the moderator can close voting."),
        ];
        refusals(&mut sim, &rows);

        // A vote before voting opens is refused, with the action map in Python's notation.
        st(&mut sim).phase = Phase::DayDiscussion;
        refused_as(
            &mut sim,
            "Pia",
            target("vote_lynch", "Elena"),
            Refused::error(
                "wrong_phase",
                "Pia failed to vote: {'action': 'vote_lynch', 'target': 'Elena'}",
                "You can only vote during the voting phase.",
            ),
        );

        st(&mut sim).lynch_votes.insert("Pia".into(), "Elena".into());
        let o = act(&mut sim, "Moderator", ActionCall::new("open_voting"));
        passed(&o, ActionResult::VotingOpened { opened: true }, "Moderator opened voting");
        assert_eq!(ww(&sim).state.phase, Phase::DayVoting);
        assert!(ww(&sim).state.lynch_votes.is_empty());
        all_hear(&lines(&mut sim), "[18:00] Public Event: Voting is now open.");

        let o = act(&mut sim, "Pia", target("vote_lynch", "Elena"));
        passed(&o, ActionResult::Tally { target: "Elena".into(), tally: 1 }, "Pia voted to lynch Elena");
        all_hear(&lines(&mut sim), "[18:00] Public Event: Pia voted to lynch Elena.");
        assert_eq!(act(&mut sim, "Taro", target("vote_lynch", "Elena")).result_json()["tally"], 2);
        st(&mut sim).kill("Pia");
        assert_eq!(
            act(&mut sim, "Ava", target("vote_lynch", "Elena")).result_json()["tally"],
            2,
            "dead voters drop out"
        );
        lines(&mut sim);
        let o = act(&mut sim, "Pia", target("vote_lynch", "Mira"));
        assert_eq!(o.result_json(), json!({"error": "dead"}));
        assert_eq!(lines(&mut sim), vec![("Pia".into(), "You are dead and cannot act.".into())]);
        refused_as(
            &mut sim,
            "Taro",
            ActionCall::new("vote_lynch"),
            Refused::error(
                "invalid_target",
                "Taro failed to vote: {'action': 'vote_lynch'}",
                "Provide a living 'target' to vote.",
            ),
        );
        assert_eq!(act(&mut sim, "Taro", target("vote_lynch", "Pia")).result_json()["error"], "invalid_target");

        let o = act(&mut sim, "Moderator", ActionCall::new("close_voting"));
        passed(&o, ActionResult::VotingClosed { closed: true }, "Moderator closed voting");
        // 8 alive need 5: no majority; Elena leads alone with 2 live votes.
        all_hear(&lines(&mut sim), "[18:00] Public Event: By vote, Elena was lynched. Night begins.");
        let s = &ww(&sim).state;
        assert_eq!(s.phase, Phase::Night);
        assert!(s.lynch_votes.is_empty());
        assert!(!s.is_alive("Elena"));
        assert!(!s.complete);
    }

    /// Lynch votes as (voter, target).
    type Votes<'a> = &'a [(&'a str, &'a str)];

    fn lynch(votes: Votes, dead: &[&str]) -> (Simulator, Vec<(String, String)>) {
        let mut sim = game();
        for (v, t) in votes {
            st(&mut sim).lynch_votes.insert(v.to_string(), t.to_string());
        }
        for d in dead {
            st(&mut sim).kill(d);
        }
        st(&mut sim).phase = Phase::DayVoting;
        lines(&mut sim);
        act(&mut sim, "Moderator", ActionCall::new("close_voting"));
        let got = lines(&mut sim);
        (sim, got)
    }

    #[test]
    fn lynch_by_majority_plurality_or_not_at_all() {
        // (votes, the dead, who is lynched)
        #[rustfmt::skip]
        let rows: [(Votes, &[&str], Option<&str>); 6] = [
            // 9 alive need 5; a majority is taken even when listed after a leader-to-be.
            (&[("Pia", "Mira"), ("Elena", "Taro"), ("Bram", "Taro"), ("Ronan", "Taro"), ("Ava", "Taro"), ("Niko", "Taro")], &[], Some("Taro")),
            // Plurality: 3 against 2.
            (&[("Pia", "Mira"), ("Taro", "Mira"), ("Ava", "Mira"), ("Elena", "Ronan"), ("Niko", "Ronan")], &[], Some("Mira")),
            // A tie at the top lynches no one.
            (&[("Pia", "Mira"), ("Taro", "Mira"), ("Elena", "Ronan"), ("Niko", "Ronan")], &[], None),
            // No votes at all.
            (&[], &[], None),
            // Votes of the dead and for the dead are ignored: Mira's 2 dead votes leave Ronan ahead.
            (&[("Pia", "Mira"), ("Taro", "Mira"), ("Elena", "Ronan")], &["Pia", "Taro"], Some("Ronan")),
            (&[("Elena", "Pia"), ("Niko", "Pia"), ("Mira", "Taro")], &["Pia"], Some("Taro")),
        ];
        for (votes, dead, lynched) in rows {
            let (sim, got) = lynch(votes, dead);
            let s = &ww(&sim).state;
            match lynched {
                Some(name) => {
                    all_hear(&got, &format!("[18:00] Public Event: By vote, {name} was lynched. Night begins."));
                    assert!(!s.is_alive(name), "{votes:?}");
                    assert_eq!(s.alive.len(), 8 - dead.len(), "{votes:?}: only {name} dies");
                }
                None => {
                    all_hear(&got, "[18:00] Public Event: No lynch today. Night begins.");
                    assert_eq!(s.alive.len(), 9 - dead.len(), "{votes:?}");
                }
            }
        }
    }

    #[test]
    fn win_checks() {
        // Lynching the last wolf: villagers win.
        let (sim, got) = lynch(&[("Pia", "Niko")], &["Elena", "Mira"]);
        all_hear(&got, "[18:00] Public Event: Game over: villagers win.");
        assert!(ww(&sim).is_complete());
        assert_eq!(ww(&sim).state.winner.as_deref(), Some("villagers"));
        // The last villager killed at night: werewolves win, and no day begins.
        let mut sim = game();
        for d in ["Pia", "Taro"] {
            st(&mut sim).kill(d);
        }
        let got = dawn(&mut sim, 1, "Ava", None);
        all_hear(&got, "[18:27] Public Event: Game over: werewolves win.");
        let pos = |t: &str| got.iter().position(|(a, l)| a == "Moderator" && l.contains(t)).unwrap();
        assert!(pos("Ava was found dead") < pos("Game over"));
        let s = &ww(&sim).state;
        assert!(s.complete);
        assert_eq!(s.winner.as_deref(), Some("werewolves"));
        assert_eq!(s.day_spoken, None);
        // Both sides gone at once: no one wins.
        let mut s = ww(&game()).state.clone();
        s.alive.retain(|n| !matches!(s.roles.get(n).map(String::as_str), Some("werewolf" | "villager")));
        assert_eq!(s.check_win().as_deref(), Some("no one"));
        assert!(s.complete);
        // Both sides alive: nothing happens.
        let mut s = ww(&game()).state.clone();
        assert_eq!(s.check_win(), None);
        assert!(!s.complete && s.winner.is_none());
    }

    #[test]
    fn upstream_roster_without_villager_roles_ends_at_the_first_dawn() {
        // Upstream's builder gives villagers no role: the win check finds no villagers (spec §1.14.4).
        let roster: Vec<(&str, Option<&str>)> =
            ROSTER.iter().map(|(n, r)| (*n, r.filter(|r| *r != "villager"))).collect();
        let mut sim = game_with(&roster, Config { role_map: IndexMap::new(), moderators: vec!["Moderator".into()] });
        assert_eq!(ww(&sim).state.roles.len(), 5);
        end_turns(&mut sim, 6);
        assert_eq!(ww(&sim).state.winner.as_deref(), Some("werewolves"));
    }

    #[test]
    fn who_skips_a_turn() {
        let mut sim = game();
        let skip = |sim: &Simulator, n: &str| ww(sim).should_skip_turn(&sim.world.agents[idx(sim, n)]);
        for (n, skips) in [("Moderator", false), ("Elena", false), ("Bram", false), ("Ronan", false), ("Pia", true)] {
            assert_eq!(skip(&sim, n), skips, "{n} at night");
        }
        st(&mut sim).phase = Phase::DayDiscussion;
        assert!(!skip(&sim, "Pia"));
        st(&mut sim).kill("Pia");
        st(&mut sim).kill("Moderator");
        assert!(skip(&sim, "Pia"), "the dead skip");
        assert!(!skip(&sim, "Moderator"), "moderators never skip");
        // Anyone called "moderator" counts as one, listed or not.
        let w = Werewolf::new("x".into(), "".into(), Config::default());
        assert!(w.is_moderator("MODERATOR") && !w.is_moderator("Mod"));
    }

    /// Lines of `text` spoken by `who` in `phase`: who heard it, in order.
    fn heard(sim: &mut Simulator, phase: Phase, who: &str) -> Vec<String> {
        st(sim).phase = phase;
        lines(sim);
        let o = act(sim, who, ActionCall::new("speak").with("message", "hi"));
        assert_eq!(o, Outcome::ok(ActionResult::Message { message: "hi".into() }, format!("{who} said: hi"), false));
        assert!(sim.world.pending.is_empty(), "speech queues no system_broadcast");
        receivers(&lines(sim), &format!("[18:00] {who}: hi"))
    }

    #[test]
    fn speech_reaches_whoever_may_hear_it_in_this_phase() {
        let mut sim = game();
        st(&mut sim).kill("Mira");
        // Listeners in map order, then the speaker.
        assert_eq!(
            heard(&mut sim, Phase::Night, "Moderator"),
            names(&["Elena", "Bram", "Ronan", "Pia", "Taro", "Ava", "Niko", "Moderator"])
        );
        assert_eq!(heard(&mut sim, Phase::Night, "Niko"), names(&["Moderator", "Elena", "Niko"]));
        assert_eq!(heard(&mut sim, Phase::Night, "Bram"), names(&["Moderator", "Bram"]));
        assert_eq!(heard(&mut sim, Phase::Night, "Ronan"), names(&["Ronan"]));
        assert_eq!(heard(&mut sim, Phase::Night, "Pia"), names(&["Pia"]));
        st(&mut sim).kill("Moderator");
        // By day: the living and the moderators (even a dead one), never the dead Mira.
        let day = names(&["Moderator", "Elena", "Bram", "Ronan", "Taro", "Ava", "Niko", "Pia"]);
        assert_eq!(heard(&mut sim, Phase::DayDiscussion, "Pia"), day);
        assert_eq!(heard(&mut sim, Phase::DayVoting, "Pia"), day);
        // Only the listener has to be alive: a dead moderator still reaches every living player.
        assert_eq!(
            heard(&mut sim, Phase::Night, "Moderator"),
            names(&["Elena", "Bram", "Ronan", "Pia", "Taro", "Ava", "Niko", "Moderator"])
        );
        // Empty speech is refused by the shared handler.
        lines(&mut sim);
        let o = act(&mut sim, "Pia", ActionCall::new("speak"));
        assert_eq!(o.summary.as_deref(), Some("Pia failed to speak"));
        assert_eq!(lines(&mut sim), vec![("Pia".into(), "Missing message.".into())]);
    }

    #[test]
    fn status_prompt_lines() {
        let mut sim = game();
        let status = |sim: &Simulator, n: &str| ww(sim).status_prompt(&sim.world.agents[idx(sim, n)]);
        assert_eq!(status(&sim, "Moderator"), "");
        assert_eq!(status(&sim, "Pia"), "--- Status ---\nPhase: night (day 0)\nAlive: True\n");
        assert_eq!(
            status(&sim, "Bram"),
            "--- Status ---\nPhase: night (day 0)\nAlive: True\nWitch potions (save/poison): 0/0\nTonight's victim: none\n"
        );
        night(&mut sim, 1);
        act(&mut sim, "Elena", target("night_kill", "Pia"));
        act(&mut sim, "Bram", ActionCall::new("witch_save"));
        assert_eq!(
            status(&sim, "Bram"),
            "--- Status ---\nPhase: night (day 1)\nAlive: True\nWitch potions (save/poison): 0/1\nTonight's victim: Pia\n"
        );
        st(&mut sim).phase = Phase::DayVoting;
        st(&mut sim).lynch_votes.insert("Pia".into(), "Niko".into());
        assert_eq!(
            status(&sim, "Bram"),
            "--- Status ---\nPhase: day_voting (day 1)\nAlive: True\nWitch potions (save/poison): 0/1\nVote: none\n"
        );
        assert_eq!(status(&sim, "Pia"), "--- Status ---\nPhase: day_voting (day 1)\nAlive: True\nVote: Niko\n");
        st(&mut sim).kill("Pia");
        assert_eq!(status(&sim, "Pia"), "--- Status ---\nPhase: day_voting (day 1)\nAlive: False\nVote: none\n");
        st(&mut sim).phase = Phase::DayDiscussion;
        assert_eq!(status(&sim, "Ronan"), "--- Status ---\nPhase: day_discussion (day 1)\nAlive: True\n");
    }

    #[test]
    fn state_and_config_round_trip_like_upstream() {
        let mut sim = game();
        night(&mut sim, 1);
        act(&mut sim, "Elena", target("night_kill", "Pia"));
        act(&mut sim, "Bram", target("witch_poison", "Niko"));
        let json = serde_json::to_value(&sim.scene).unwrap();
        assert_eq!(json["type"], "werewolf_scene");
        assert_eq!(json["config"], json!({"moderators": ["Moderator"]}));
        let keys: Vec<&str> = json["state"].as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "time",
                "phase",
                "day_count",
                "roles",
                "alive",
                "night_kill_votes",
                "lynch_votes",
                "witch_uses",
                "witch_saved",
                "witch_actions",
                "night_spoken",
                "complete",
                "winner"
            ]
        );
        assert_eq!(json["state"]["witch_uses"], json!({"Bram": {"heals_left": 1, "poisons_left": 0}}));
        assert_eq!(json["state"]["witch_actions"], json!({"Bram": {"poison_target": "Niko"}}));
        let back: Scene = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(serde_json::to_value(&back).unwrap(), json);
        // Patching goes through the typed state.
        let mut scene = back;
        let patch = json!({"phase": "day_voting", "day_count": 3}).as_object().unwrap().clone();
        scene.patch_state(&patch).unwrap();
        assert_eq!(scene.state_json()["phase"], "day_voting");
        let bad = json!({"phase": "dusk"}).as_object().unwrap().clone();
        assert!(scene.patch_state(&bad).is_err());
        // The key upstream adds at the first ordinary dawn appears then.
        end_turns(&mut sim, 9);
        assert_eq!(sim.scene.state_json()["day_spoken"], json!([]));
    }

    #[test]
    fn python_repr_of_action_maps() {
        let call = ActionCall::new("vote_lynch").with("target", "O'Neil").with("note", "a\\b\n");
        assert_eq!(py_action_repr(&call), r#"{'action': 'vote_lynch', 'target': "O'Neil", 'note': 'a\\b\n'}"#);
        assert_eq!(py_str_repr("it's \"x\""), r#"'it\'s "x"'"#);
    }

    #[test]
    fn prose_carries_the_mock_trigger_words_upstream_has() {
        let scene = format!("{DESCRIPTION}\n{GUIDELINES}").to_lowercase();
        assert!(scene.contains("werewolf") && scene.contains("voting") && scene.contains("vote"));
        assert!(!scene.contains("you are"), "only the name line may say 'You are'");
        for kind in [ActionKind::VoteLynch, ActionKind::NightKill, ActionKind::OpenVoting, ActionKind::CloseVoting] {
            let desc = crate::engine::scenes::action_spec(kind).desc;
            assert!(desc.contains("vote") || desc.contains("voting"), "{}", kind.name());
        }
        assert!(crate::engine::scenes::action_spec(ActionKind::Inspect).desc.contains("werewolf"));
        for kind in [ActionKind::WitchSave, ActionKind::WitchPoison] {
            let text = format!(
                "{} {}",
                crate::engine::scenes::action_spec(kind).desc,
                crate::engine::scenes::action_spec(kind).instruction
            )
            .to_lowercase();
            assert!(!text.contains("vote") && !text.contains("werewolf"), "{}", kind.name());
        }
    }

    #[test]
    fn scenario_file_matches_the_builder() {
        let sc = Scenario::shipped("werewolf");
        assert_eq!(sc.default_turns, 400);
        let Ordering::Cycled { names: order, .. } = &sc.ordering else { panic!("cycled ordering expected") };
        assert_eq!(order.len(), 27);
        let all = names(&ROSTER.map(|(n, _)| n));
        let mut expected = names(&["Elena", "Mira", "Niko", "Elena", "Mira", "Niko", "Ronan", "Bram"]);
        expected.extend(all.iter().cloned().chain(all.iter().cloned()));
        expected.push("Moderator".into());
        assert_eq!(order, &expected);
        let sim = sc.build(None).unwrap();
        assert_eq!(sim.world.names(), all);
        let w = ww(&sim);
        assert_eq!(w.state.roles.len(), 8);
        for a in &sim.world.agents {
            assert_eq!(a.role(), w.state.role(&a.name), "{}: properties.role and role_map agree", a.name);
            assert_eq!(&*a.style, "concise and natural");
            let profile = match a.role() {
                None => "You are the Moderator",
                Some("werewolf") => "You are a Werewolf",
                Some("seer") => "You are the Seer",
                Some("witch") => "You are the Witch",
                _ => "You are a Villager",
            };
            assert!(a.user_profile.starts_with(profile), "{}", a.name);
        }
        assert_eq!(
            sim.world.agents[0].action_space,
            vec![
                ActionKind::OpenVoting,
                ActionKind::CloseVoting,
                ActionKind::Speak,
                ActionKind::VoteLynch,
                ActionKind::Yield
            ]
        );
        assert_eq!(
            w.initial_event,
            "Welcome to Werewolf. Participants: Moderator, Elena, Bram, Ronan, Mira, Pia, Taro, Ava, Niko. \
             Roles are assigned privately.\nNight has fallen. Please close your eyes."
        );
    }

    #[test]
    fn mock_run_of_the_scenario_reaches_day_one() {
        let (mut sim, events) = mock_run("werewolf", 30);
        let s = &ww(&sim).state;
        // Nine night turns (the wolves twice, seer, witch, moderator), then the day.
        assert_eq!(s.day_count, 1);
        assert_eq!(s.phase, Phase::DayDiscussion);
        assert_eq!(s.alive.len(), 9);
        let dawn = events
            .iter()
            .filter(|e| e.kind == EventType::SystemBroadcast)
            .filter(|e| e.data["text"] == "Public Event: The night ends. At dawn, no one died.")
            .count();
        assert_eq!(dawn, 1);
        // A longer run keeps going without panicking.
        let (report, _) = sim.run_blocking(60, &MockClient);
        assert_eq!(report.unwrap().turns, 60);
    }
}
