//! custom (`custom_scene`): a scene whose setting, roles, variables, actions, phases, tallies,
//! outcomes and metrics are the document's own ([`CustomScene`], its `scene.config`).
//!
//! The document is checked and its expressions compiled once ([`check`]); the scene keeps them
//! beside its state, which is plain data (the phase, the pass and turn, who acts in this pass,
//! every variable, every agent's role, standing and variables, the votes, the outcome), so a
//! custom scene forks, branches, replays and exports as the shipped scenes do. Who acts is the
//! phase's (the scenario's ordering is `controlled`): each pass gives every actor of the phase one
//! turn; a turn ends with one successful action (or `yield`), unless the action says the turn
//! goes on (`ends_turn: false`, then the scenario's `max_steps_per_turn` bounds it). An action is legal when its
//! roles, phases and `when` allow it; its parameters are read strictly (every field, no other,
//! each of its type and range); every expression of an action sees the state as it was before
//! the action; its effects apply together or, if one fails, not at all.

pub mod check;
pub mod expr;

use std::sync::Arc;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use simtree_shared::ActionResult;
use simtree_shared::custom::{
    ActionDef, Actors, CustomScene, Effect, ParamDef, ParamType, PhaseDef, PhaseEnd, Style, TallyKind, TurnOrder,
    VarType, Visibility,
};

pub use self::check::Refused;
use self::check::{CustomError, coerce};
use self::expr::{Programs, Scope};
use super::{SceneError, SceneRules};
use crate::engine::action::{ActionKind, Handled, Outcome};
use crate::engine::agent::Agent;
use crate::engine::event::SceneEvent;
use crate::engine::hooks::{self, Hook, HookCall, HookError, MAX_HOOK_EFFECTS};
use crate::engine::parse::ActionCall;
use crate::engine::prompt::{OwnAction, SceneText};
use crate::engine::world::World;

/// The sentence every custom scene's description ends with; the scripted player knows a custom
/// scene by it.
pub const MARKER: &str = "Of the actions listed under Available Actions, the latest status line says which are open \
     now; each takes exactly the fields its usage shows.";

/// The sentence in its place when the document turns status lines off (`status_lines: false`).
pub(crate) const MARKER_QUIET: &str = "Each action listed under Available Actions takes exactly the fields its usage shows; \
     one that is not open now is refused with the reason.";

/// Whether a system prompt is a custom scene's (it carries one of the two closing sentences).
pub(crate) fn marks(system: &str) -> bool {
    system.contains(MARKER) || system.contains(MARKER_QUIET)
}

/// Where a status line lists the moves open to its agent now (last in the line), and the agents
/// still in the game once someone is out (up to the next `;`).
pub(crate) const OPEN_NOW: &str = "moves open now: ";
pub(crate) const IN_THE_GAME: &str = "in the game: ";

/// One agent as the scene sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Member {
    role: String,
    alive: bool,
    muted: bool,
    /// Its per-agent variables.
    vars: IndexMap<String, Value>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CustomState {
    time: i64,
    phase: String,
    /// The pass over the phase's actors, from 1.
    round: u32,
    /// Turns taken in the phase.
    turn: u64,
    /// Who acts in this pass, in order, and the index of the next.
    queue: Vec<String>,
    next: usize,
    /// Agents who have taken an action in this phase.
    acted: Vec<String>,
    /// The shared variables.
    vars: IndexMap<String, Value>,
    /// Every agent, by name, in the scenario's order.
    agents: IndexMap<String, Member>,
    /// Per tally, each voter's choice.
    votes: IndexMap<String, IndexMap<String, Value>>,
    /// How the scene ended; `None` while it runs.
    outcome: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(try_from = "Stored")]
pub struct Custom {
    name: String,
    initial_event: String,
    /// Boxed: the scene enum stays as small as the shipped scenes'.
    state: Box<CustomState>,
    pub(crate) config: Arc<CustomScene>,
    #[serde(skip)]
    programs: Arc<Programs>,
    /// The phase changed during the turn running now (its pass starts afresh).
    #[serde(skip)]
    moved: bool,
    /// Whose turn is running now (for a `continue` phase entered during it).
    #[serde(skip)]
    turn_of: Option<String>,
}

/// A custom scene as it is stored: read back through the same checks as a new document.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Stored {
    name: String,
    initial_event: String,
    state: CustomState,
    config: CustomScene,
}

impl TryFrom<Stored> for Custom {
    type Error = CustomError;

    fn try_from(s: Stored) -> Result<Self, CustomError> {
        let programs = check::check(&s.config)?;
        Ok(Custom {
            name: s.name,
            initial_event: s.initial_event,
            state: Box::new(s.state),
            config: Arc::new(s.config),
            programs: Arc::new(programs),
            moved: false,
            turn_of: None,
        })
    }
}

/// Where an effect list sends the scene.
#[derive(Clone, Debug, PartialEq)]
enum Flow {
    Goto(String),
    End(String),
}

/// What an action says and reveals, delivered once all its effects succeeded.
enum Line {
    Say(String),
    Reveal(String),
    /// For the actor alone.
    Tell(String),
}

/// A failed action or effect: the message the actor reads.
type Fail = Refused;

impl Custom {
    /// Reads and checks a document (`scene.config`); errors name the path inside it.
    pub(crate) fn new(name: String, initial_event: String, config: Value) -> Result<Custom, SceneError> {
        let doc: CustomScene = super::parse_config(config)?;
        let programs = check::check(&doc)?;
        let vars = doc
            .variables
            .iter()
            .filter(|v| !v.per_agent)
            .map(|v| (v.name.clone(), coerce(v.ty, &v.initial).unwrap_or(Value::Null)))
            .collect();
        let votes = doc.tallies.iter().map(|t| (t.name.clone(), IndexMap::new())).collect();
        Ok(Custom {
            name,
            initial_event,
            state: Box::new(CustomState {
                time: 1080,
                phase: String::new(),
                round: 1,
                turn: 0,
                queue: Vec::new(),
                next: 0,
                acted: Vec::new(),
                vars,
                agents: IndexMap::new(),
                votes,
                outcome: None,
            }),
            config: Arc::new(doc),
            programs: Arc::new(programs),
            moved: false,
            turn_of: None,
        })
    }

    fn doc(&self) -> &CustomScene {
        &self.config
    }

    fn phase_def(&self) -> Option<&PhaseDef> {
        self.doc().phases.iter().find(|p| p.name == self.state.phase)
    }

    /// The value of metric `name` now (`None` for a name the document does not define; `null`
    /// when it cannot be evaluated).
    pub(crate) fn metric(&self, name: &str) -> Option<Value> {
        let m = self.doc().metrics.iter().find(|m| m.name == name)?;
        Some(self.scope(&self.state, None).eval(&m.value).unwrap_or(Value::Null))
    }

    /// The `scene_var_set` op: a variable set to a value of its type (`agent` for a per-agent one).
    pub(crate) fn set_var(&mut self, name: &str, value: &Value, agent: Option<&str>) -> Result<(), Refused> {
        let def = self.doc().variables.iter().find(|v| v.name == name).ok_or_else(|| {
            let names: Vec<&str> = self.doc().variables.iter().map(|v| v.name.as_str()).collect();
            Refused(format!("unknown variable '{name}' (variables: {})", names.join(", ")))
        })?;
        let value = coerce(def.ty, value).map_err(|m| Refused(format!("value: {m}")))?;
        match (def.per_agent, agent) {
            (false, None) => {
                self.state.vars.insert(name.to_string(), value);
            }
            (false, Some(_)) => return Err(Refused(format!("'{name}' is shared: leave `agent` out"))),
            (true, None) => return Err(Refused(format!("'{name}' is per agent: say whose with `agent`"))),
            (true, Some(a)) => {
                let m = self.member_mut(a)?;
                m.vars.insert(name.to_string(), value);
            }
        }
        Ok(())
    }

    /// The `agent_role_set` op: an agent takes another role of the document.
    pub(crate) fn set_role(&mut self, agent: &str, role: &str) -> Result<(), Refused> {
        if !self.doc().roles.iter().any(|r| r.name == role) {
            let names: Vec<&str> = self.doc().roles.iter().map(|r| r.name.as_str()).collect();
            return Err(Refused(format!("unknown role '{role}' (roles: {})", names.join(", "))));
        }
        self.member_mut(agent)?.role = role.to_string();
        Ok(())
    }

    fn member_mut(&mut self, agent: &str) -> Result<&mut Member, Refused> {
        let names = self.state.agents.keys().cloned().collect::<Vec<_>>().join(", ");
        self.state.agents.get_mut(agent).ok_or_else(|| Refused(format!("unknown agent '{agent}' (agents: {names})")))
    }

    // ---- the view expressions see ----

    fn member_view(state: &CustomState, name: &str, m: &Member) -> Value {
        json!({
            "name": name,
            "role": m.role,
            "alive": m.alive,
            "muted": m.muted,
            "acted": state.acted.iter().any(|a| a == name),
            "vars": m.vars,
        })
    }

    fn tally_view(&self, state: &CustomState) -> Value {
        let mut out = serde_json::Map::new();
        for t in &self.doc().tallies {
            let voters: Vec<&String> = state
                .agents
                .iter()
                .filter(|(_, m)| m.alive && (t.voters.is_empty() || t.voters.contains(&m.role)))
                .map(|(n, _)| n)
                .collect();
            let empty = IndexMap::new();
            let votes = state.votes.get(&t.name).unwrap_or(&empty);
            let cast: Vec<&Value> = voters.iter().filter_map(|v| votes.get(*v)).collect();
            let mut counts: IndexMap<String, u64> = IndexMap::new();
            for v in &cast {
                *counts.entry(choice_key(v)).or_default() += 1;
            }
            let top = counts.values().copied().max().unwrap_or(0);
            let leaders: Vec<&String> = counts.iter().filter(|(_, c)| **c == top).map(|(k, _)| k).collect();
            let n = voters.len() as u64;
            let all = n > 0 && cast.len() as u64 == n;
            let decided = match t.kind {
                TallyKind::Majority => top * 2 > n,
                TallyKind::Unanimity => all && counts.len() == 1,
                TallyKind::Plurality => all && leaders.len() == 1,
                TallyKind::Sum => all,
            };
            let winner = if decided && t.kind != TallyKind::Sum {
                leaders.first().map(|s| s.as_str()).unwrap_or("")
            } else {
                ""
            };
            let ints: Option<i64> = cast.iter().map(|v| v.as_i64()).sum();
            let sum = match ints {
                Some(i) => json!(i),
                None => json!(cast.iter().filter_map(|v| v.as_f64()).sum::<f64>()),
            };
            out.insert(
                t.name.clone(),
                json!({
                    "votes": votes,
                    "cast": cast.len(),
                    "voters": n,
                    "counts": counts,
                    "winner": winner,
                    "decided": decided,
                    "sum": sum,
                }),
            );
        }
        Value::Object(out)
    }

    /// A scope over `state` for `actor` (`None`: a phase's effects, endings, metrics).
    fn scope(&self, state: &CustomState, actor: Option<&str>) -> Scope<'_> {
        Scope::new(&self.programs, self.bindings(state, actor))
    }

    /// The names expressions see, over `state` for `actor`.
    fn bindings(&self, state: &CustomState, actor: Option<&str>) -> Vec<(&'static str, Value)> {
        let me = actor.and_then(|a| state.agents.get(a).map(|m| Self::member_view(state, a, m))).unwrap_or_else(
            || json!({"name": "", "role": "", "alive": false, "muted": false, "acted": false, "vars": {}}),
        );
        let agents: Vec<Value> = state.agents.iter().map(|(n, m)| Self::member_view(state, n, m)).collect();
        let by_name: serde_json::Map<String, Value> =
            state.agents.keys().cloned().zip(agents.iter().cloned()).collect();
        vec![
            ("vars", json!(state.vars)),
            ("me", me),
            ("agents", Value::Array(agents)),
            ("agent", Value::Object(by_name)),
            ("phase", json!(state.phase)),
            ("round", json!(state.round)),
            ("turn", json!(state.turn)),
            ("tallies", self.tally_view(state)),
            ("params", json!({})),
        ]
    }

    // ---- hooks ----

    /// Whether the document carries Python hooks.
    pub(crate) fn has_hooks(&self) -> bool {
        self.config.hooks.is_some()
    }

    /// The state as a hook reads it: the names expressions see but `me` and `params`, and the
    /// outcome.
    fn hook_view(&self, state: &CustomState) -> Value {
        let mut view: serde_json::Map<String, Value> = self
            .bindings(state, None)
            .into_iter()
            .filter(|(name, _)| !matches!(*name, "me" | "params"))
            .map(|(name, value)| (name.to_string(), value))
            .collect();
        view.insert("outcome".into(), json!(state.outcome));
        Value::Object(view)
    }

    /// Calls `hook` on `state` if the document defines it and no hook of this turn failed yet:
    /// its effects, checked and compiled. A failure is kept in `world.hook_failure`.
    fn call_hook(
        &self,
        hook: Hook,
        state: &CustomState,
        arg: Option<Value>,
        world: &mut World,
    ) -> Option<(Vec<Effect>, Programs)> {
        let source = &self.config.hooks.as_ref()?.source;
        if world.hook_failure.is_some() || !hooks::defines(source, hook) {
            return None;
        }
        let answer = self.hook_answer(hook, source, state, arg, world);
        answer.map_err(|e| world.hook_failure = Some(e)).ok()
    }

    fn hook_answer(
        &self,
        hook: Hook,
        source: &str,
        state: &CustomState,
        arg: Option<Value>,
        world: &mut World,
    ) -> Result<(Vec<Effect>, Programs), HookError> {
        let name = hook.name();
        let seed = world.rng.next_u64();
        let runner = world.hooks.runner().ok_or(HookError::NoRunner { hook: name })?;
        let call = HookCall { source, hook, state: self.hook_view(state), arg, seed };
        let answer = runner.call(&call).map_err(|e| HookError::Call { hook: name, message: e.0 })?;
        let items = match answer {
            Value::Null => Vec::new(),
            Value::Array(items) => items,
            other => {
                return Err(HookError::NotAList { hook: name, got: check::short(&other) });
            }
        };
        if items.len() > MAX_HOOK_EFFECTS {
            return Err(HookError::TooMany { hook: name, count: items.len() });
        }
        let bad = |index: usize, message: String| HookError::Effect { hook: name, index, message };
        let effects = items
            .into_iter()
            .enumerate()
            .map(|(i, v)| serde_json::from_value::<Effect>(v).map_err(|e| bad(i, e.to_string())))
            .collect::<Result<Vec<_>, _>>()?;
        if hook == Hook::Outcome
            && let Some(i) = effects.iter().position(|e| matches!(e, Effect::Goto(_)))
        {
            return Err(bad(i, "goto: the scene is ending; an outcome hook may end it otherwise, not go on".into()));
        }
        let programs = check::hook_effects(self.doc(), &effects, hook == Hook::OnAction)
            .map_err(|(i, e)| bad(i, e.to_string()))?;
        Ok((effects, programs))
    }

    /// Applies a hook's effects to `state` one by one, every expression seeing the state the
    /// hook was given (and `params`, the action's); the first refused one fails the hook.
    fn apply_hook(
        &self,
        hook: Hook,
        (effects, programs): &(Vec<Effect>, Programs),
        state: &mut CustomState,
        actor: Option<&str>,
        params: Option<&Value>,
        lines: &mut Vec<Line>,
    ) -> Result<Option<Flow>, HookError> {
        let mut scope = Scope::new(programs, self.bindings(state, actor));
        if let Some(p) = params {
            scope.bind("params", p);
        }
        let mut flow = None;
        for (index, e) in effects.iter().enumerate() {
            let f = self
                .apply(&scope, state, actor, std::slice::from_ref(e), lines)
                .map_err(|r| HookError::Effect { hook: hook.name(), index, message: r.0 })?;
            flow = flow.or(f);
        }
        Ok(flow)
    }

    /// A hook without an actor (`on_phase_end`, `outcome`) run on the scene's state: its effects
    /// kept and its reveals announced, or nothing changed and the failure kept.
    fn run_state_hook(
        &mut self,
        hook: Hook,
        state: CustomState,
        arg: Option<Value>,
        world: &mut World,
    ) -> Option<Flow> {
        let answer = self.call_hook(hook, &state, arg, world)?;
        let mut next = state;
        let mut lines = Vec::new();
        match self.apply_hook(hook, &answer, &mut next, None, None, &mut lines) {
            Ok(flow) => {
                *self.state = next;
                self.announce(lines, world);
                flow
            }
            Err(e) => {
                world.hook_failure.get_or_insert(e);
                None
            }
        }
    }

    /// Says a phase's or a hook's lines to everyone.
    fn announce(&self, lines: Vec<Line>, world: &mut World) {
        let time = Some(self.state.time);
        for Line::Reveal(text) | Line::Say(text) | Line::Tell(text) in lines {
            world.broadcast(&self.revealed(text), time, None);
        }
    }

    /// A `reveal` as everyone reads it.
    fn revealed(&self, text: String) -> SceneEvent {
        match self.doc().style {
            Style::Custom => SceneEvent::public_with("Reveal", text),
            Style::Chat => SceneEvent::public(text),
        }
    }

    // ---- actions ----

    /// Whether `a` is legal for `agent` now (standing, role, phase, `when`, muting).
    fn legal(&self, scope: &Scope, agent: &str, a: &ActionDef) -> bool {
        let Some(m) = self.state.agents.get(agent) else {
            return false;
        };
        m.alive
            && self.state.outcome.is_none()
            && (a.roles.is_empty() || a.roles.contains(&m.role))
            && (a.phases.is_empty() || a.phases.contains(&self.state.phase))
            && !(m.muted && a.effects.iter().any(|e| matches!(e, Effect::Say(_))))
            && a.when.as_deref().is_none_or(|w| scope.bool(w).unwrap_or(false))
    }

    /// The actions `agent`'s role may ever take (the prompt's stable catalogue; which of them
    /// are open now is said in each turn's status line, so the prompt's start never changes).
    fn role_actions(&self, agent: &str) -> Vec<&ActionDef> {
        let Some(m) = self.state.agents.get(agent) else {
            return Vec::new();
        };
        self.doc().actions.iter().filter(|a| a.roles.is_empty() || a.roles.contains(&m.role)).collect()
    }

    fn legal_actions(&self, agent: &str) -> Vec<&ActionDef> {
        let scope = self.scope(&self.state, Some(agent));
        self.doc().actions.iter().filter(|a| self.legal(&scope, agent, a)).collect()
    }

    /// The usage block of an action: how to write it and what each field takes.
    fn usage(&self, a: &ActionDef) -> String {
        let fields: String = a.params.iter().map(|p| format!("<{0}>…</{0}>", p.name)).collect();
        let mut s = format!("- To {}:\n<Action name=\"{}\">{fields}</Action>\n", a.name, a.name);
        for p in &a.params {
            s.push_str(&format!("  <{}>: {}\n", p.name, self.param_spec(p)));
            if !p.description.is_empty() {
                s.push_str(&format!("    {}\n", p.description.replace('\n', " ")));
            }
        }
        s
    }

    fn param_spec(&self, p: &ParamDef) -> String {
        let (min, max) = (p.min.unwrap_or(0.0), p.max.unwrap_or(0.0));
        match p.ty {
            ParamType::Enum => format!("one of {}", p.values.as_deref().unwrap_or_default().join(" | ")),
            ParamType::Int => format!("a whole number from {} to {}", min.ceil(), max.floor()),
            ParamType::Number => format!("a number from {min} to {max}"),
            ParamType::String => format!("text of at most {} characters", p.max_length.unwrap_or(0)),
            // Every agent, out of the game or not: the prompt's start stays the same; who is
            // still in is said in the status line.
            ParamType::Agent => format!(
                "the name of one of {}",
                self.state.agents.keys().map(String::as_str).collect::<Vec<_>>().join(" | ")
            ),
        }
    }

    /// The fields of `call` read against `a`'s parameters, strictly.
    fn params(&self, a: &ActionDef, call: &ActionCall) -> Result<Value, Fail> {
        if let Some(extra) = call.fields.keys().find(|k| !a.params.iter().any(|p| &p.name == *k)) {
            let fields: Vec<&str> = a.params.iter().map(|p| p.name.as_str()).collect();
            return Err(Refused(if fields.is_empty() {
                format!("{} takes no fields, but <{extra}> was given.", a.name)
            } else {
                format!("<{extra}> is not a field of {} (its fields: {}).", a.name, fields.join(", "))
            }));
        }
        let mut out = serde_json::Map::new();
        for p in &a.params {
            let raw = call
                .fields
                .get(&p.name)
                .ok_or_else(|| Refused(format!("{} needs the field <{}>: {}.", a.name, p.name, self.param_spec(p))))?;
            let bad = || {
                Refused(format!(
                    "<{}> must be {}; got '{}'.",
                    p.name,
                    self.param_spec(p),
                    raw.chars().take(80).collect::<String>()
                ))
            };
            let (min, max) = (p.min.unwrap_or(0.0), p.max.unwrap_or(0.0));
            let value = match p.ty {
                ParamType::Enum => match p.values.as_deref().unwrap_or_default().iter().find(|v| *v == raw) {
                    Some(v) => json!(v),
                    None => return Err(bad()),
                },
                ParamType::Int => match raw.trim().parse::<i64>() {
                    Ok(i) if (i as f64) >= min && (i as f64) <= max => json!(i),
                    _ => return Err(bad()),
                },
                ParamType::Number => match raw.trim().parse::<f64>() {
                    Ok(f) if f.is_finite() && f >= min && f <= max => json!(f),
                    _ => return Err(bad()),
                },
                ParamType::String => {
                    if raw.chars().count() > p.max_length.unwrap_or(0) as usize {
                        return Err(bad());
                    }
                    json!(raw)
                }
                ParamType::Agent => match self.state.agents.get(raw.trim()) {
                    Some(m) if m.alive => json!(raw.trim()),
                    _ => return Err(bad()),
                },
            };
            out.insert(p.name.clone(), value);
        }
        Ok(Value::Object(out))
    }

    /// Runs one of the document's actions for agent `actor`.
    fn act(&mut self, actor: usize, a: &ActionDef, call: &ActionCall, world: &mut World) -> Handled {
        let name = world.agents[actor].name.clone();
        self.turn_of = Some(name.clone());
        let fail = |world: &mut World, msg: String| {
            world.feedback(actor, &msg);
            Ok(Outcome::fail(ActionResult::error(msg), format!("{name} failed to {}", a.name)))
        };
        let mut scope = self.scope(&self.state, Some(&name));
        if !self.legal(&scope, &name, a) {
            return fail(world, format!("{} is not possible for you now.", a.name));
        }
        let params = match self.params(a, call) {
            Ok(p) => p,
            Err(msg) => return fail(world, msg.0),
        };
        scope.bind("params", &params);
        for r in &a.require {
            match scope.bool(&r.check) {
                Ok(true) => {}
                Ok(false) => return fail(world, r.message.clone()),
                Err(e) => return fail(world, e.to_string()),
            }
        }
        let mut next = self.state.clone();
        let mut lines = Vec::new();
        let flow = match self.apply(&scope, &mut next, Some(&name), &a.effects, &mut lines) {
            Ok(flow) => flow,
            Err(msg) => return fail(world, msg.0),
        };
        let shown = match &a.summary {
            Some(x) => match scope.string(x) {
                Ok(text) => text,
                Err(e) => return fail(world, e.to_string()),
            },
            None => summary(&name, a, &params),
        };
        drop(scope);
        let action = json!({"actor": name, "name": a.name, "params": params});
        let flow = match self.call_hook(Hook::OnAction, &next, Some(action), world) {
            Some(answer) => {
                match self.apply_hook(Hook::OnAction, &answer, &mut next, Some(&name), Some(&params), &mut lines) {
                    Ok(f) => flow.or(f),
                    Err(e) => {
                        world.hook_failure.get_or_insert(e);
                        return fail(world, format!("the hook of {} failed", a.name));
                    }
                }
            }
            None if world.hook_failure.is_some() => return fail(world, format!("the hook of {} failed", a.name)),
            None => flow,
        };
        self.state = next;
        if !self.state.acted.contains(&name) {
            self.state.acted.push(name.clone());
        }
        let audience = self.audience(actor, a, &params, world);
        let time = Some(self.state.time);
        let mut shown = shown;
        let mut result = ActionResult::Done {};
        let mut said = false;
        for line in lines {
            match line {
                Line::Say(message) => {
                    let sender = name.clone();
                    let event = match self.doc().style {
                        Style::Custom => SceneEvent::Speak { sender, message },
                        Style::Chat => {
                            if !said && a.summary.is_none() {
                                shown = format!("{name}: {message}");
                            }
                            if !said {
                                result = ActionResult::Message { message: message.clone() };
                            }
                            SceneEvent::Message { sender, message }
                        }
                    };
                    said = true;
                    world.feedback(actor, &event.line(time));
                    world.broadcast(&event, time, Some(&audience));
                }
                Line::Reveal(text) => world.broadcast(&self.revealed(text), time, None),
                Line::Tell(text) => world.feedback(actor, &text),
            }
        }
        if !said && self.doc().style == Style::Custom {
            let mut to = audience.clone();
            to.push(actor);
            world.broadcast(&SceneEvent::public_with("Action", shown.clone()), time, Some(&to));
        }
        // A move to another phase or an end closes the turn whatever the action says.
        let mut ends_turn = a.ends_turn || flow.is_some();
        self.follow(flow, world);
        if self.state.outcome.is_none() && !self.check_endings(world) {
            ends_turn |= self.end_phase_if_due(world);
        }
        let ends_turn = ends_turn || self.state.outcome.is_some();
        Ok(Outcome::ok(result, shown, ends_turn))
    }

    /// Ends the phase now if it ends `as_soon_as` its condition holds and it does.
    fn end_phase_if_due(&mut self, world: &mut World) -> bool {
        let Some(def) = self.phase_def().cloned() else {
            return false;
        };
        let PhaseEnd::AsSoonAs(x) = &def.ends else {
            return false;
        };
        if !self.scope(&self.state, None).bool(x).unwrap_or(false) {
            return false;
        }
        let flow = self.leave(&def, world);
        self.follow(Some(flow), world);
        true
    }

    /// The agents besides the actor who see an action.
    fn audience(&self, actor: usize, a: &ActionDef, params: &Value, world: &World) -> Vec<usize> {
        let role = |i: usize| self.state.agents.get(&world.agents[i].name).map(|m| m.role.as_str()).unwrap_or("");
        let moderator = |i: usize| self.doc().roles.iter().any(|r| r.moderator && r.name == role(i));
        (0..world.agents.len())
            .filter(|&i| i != actor)
            .filter(|&i| match &a.visibility {
                Visibility::Public => true,
                Visibility::PrivateTo(p) => params[p].as_str() == Some(world.agents[i].name.as_str()),
                Visibility::Roles(roles) => roles.iter().any(|r| r == role(i)),
                Visibility::Moderator => moderator(i),
            })
            .collect()
    }

    /// Applies `effects` to `state` (a copy), every expression evaluated in `scope`.
    fn apply(
        &self,
        scope: &Scope,
        state: &mut CustomState,
        actor: Option<&str>,
        effects: &[Effect],
        lines: &mut Vec<Line>,
    ) -> Result<Option<Flow>, Fail> {
        let mut flow = None;
        let err = |e: expr::ExprError| Refused(e.to_string());
        for effect in effects {
            match effect {
                Effect::Say(text) => {
                    if actor.and_then(|a| state.agents.get(a)).is_some_and(|m| m.muted) {
                        return Err(Refused("You are muted and cannot speak.".into()));
                    }
                    lines.push(Line::Say(scope.string(text).map_err(err)?));
                }
                Effect::Tell(text) => lines.push(Line::Tell(scope.string(text).map_err(err)?)),
                Effect::Reveal(text) => lines.push(Line::Reveal(scope.string(text).map_err(err)?)),
                Effect::Set(asg) | Effect::Add(asg) => {
                    let add = matches!(effect, Effect::Add(_));
                    let def =
                        self.doc().variables.iter().find(|v| v.name == asg.var).expect("checked with the document");
                    let value = scope.eval(&asg.value).map_err(err)?;
                    let change = |old: Option<&Value>| -> Result<Value, Fail> {
                        let new = if add { added(def.ty, old, &value)? } else { value.clone() };
                        coerce(def.ty, &new).map_err(|m| Refused(format!("{}: {m}", asg.var)))
                    };
                    if def.per_agent {
                        for who in targets(scope, asg.agent.as_deref(), actor)? {
                            let m = member(state, &who)?;
                            let new = change(m.vars.get(&asg.var))?;
                            m.vars.insert(asg.var.clone(), new);
                        }
                    } else {
                        let new = change(state.vars.get(&asg.var))?;
                        state.vars.insert(asg.var.clone(), new);
                    }
                }
                Effect::Transfer(t) => {
                    let def = self.doc().variables.iter().find(|v| v.name == t.var).expect("checked with the document");
                    let amount = scope.eval(&t.amount).map_err(err)?;
                    let n = amount.as_f64().filter(|n| *n >= 0.0).ok_or_else(|| {
                        Refused(format!("a transfer's amount must be a number of at least 0, not {amount}"))
                    })?;
                    let from = one_target(scope, t.from.as_deref(), actor)?;
                    let to = one_target(scope, Some(&t.to), actor)?;
                    member(state, &to)?;
                    let giver = member(state, &from)?;
                    let has = giver.vars.get(&t.var).and_then(Value::as_f64).unwrap_or(0.0);
                    if has < n {
                        return Err(Refused(format!("{from} has only {has} {}, not {n}.", t.var)));
                    }
                    let less = added(def.ty, giver.vars.get(&t.var), &negate(&amount))?;
                    giver
                        .vars
                        .insert(t.var.clone(), coerce(def.ty, &less).map_err(|m| Refused(format!("{}: {m}", t.var)))?);
                    let taker = member(state, &to)?;
                    let more = added(def.ty, taker.vars.get(&t.var), &amount)?;
                    taker
                        .vars
                        .insert(t.var.clone(), coerce(def.ty, &more).map_err(|m| Refused(format!("{}: {m}", t.var)))?);
                }
                Effect::Vote(v) => {
                    let choice = scope.eval(&v.choice).map_err(err)?;
                    if !matches!(choice, Value::String(_) | Value::Number(_) | Value::Bool(_)) {
                        return Err(Refused(format!("a vote is a string, number or boolean, not {choice}")));
                    }
                    let voter = actor.ok_or_else(|| Refused("a vote needs a voter".into()))?;
                    state.votes.entry(v.tally.clone()).or_default().insert(voter.to_string(), choice);
                }
                Effect::ClearVotes(t) => {
                    state.votes.entry(t.clone()).or_default().clear();
                }
                Effect::Eliminate(x) | Effect::Mute(x) | Effect::Unmute(x) => {
                    for who in targets(scope, Some(x), actor)? {
                        let m = member(state, &who)?;
                        match effect {
                            Effect::Eliminate(_) => m.alive = false,
                            Effect::Mute(_) => m.muted = true,
                            _ => m.muted = false,
                        }
                    }
                }
                Effect::Goto(p) => {
                    flow.get_or_insert(Flow::Goto(p.clone()));
                }
                Effect::End(o) => {
                    flow.get_or_insert(Flow::End(o.clone()));
                }
            }
        }
        Ok(flow)
    }

    /// Runs a phase's effects (no actor) now; a failing effect changes nothing and is announced.
    fn run_phase_effects(&mut self, effects: &[Effect], world: &mut World) -> Option<Flow> {
        if effects.is_empty() {
            return None;
        }
        let scope = self.scope(&self.state, None);
        let mut next = self.state.clone();
        let mut lines = Vec::new();
        let result = self.apply(&scope, &mut next, None, effects, &mut lines);
        drop(scope);
        let time = Some(self.state.time);
        match result {
            Ok(flow) => {
                self.state = next;
                self.announce(lines, world);
                flow
            }
            Err(msg) => {
                let text = format!("phase {}: an effect failed and nothing changed: {msg}", self.state.phase);
                world.broadcast(&SceneEvent::public_with("Error", text), time, None);
                None
            }
        }
    }

    // ---- phases ----

    /// Goes where `flow` says (a phase, possibly through others, or the end).
    fn follow(&mut self, flow: Option<Flow>, world: &mut World) {
        let Some(mut flow) = flow else { return };
        // A phase entered or left at once may lead on; a document whose phases only hand over to
        // each other without a turn stops here rather than spin.
        for _ in 0..=self.doc().phases.len() * 2 + 2 {
            match flow {
                Flow::End(outcome) => return self.finish(outcome, world),
                Flow::Goto(phase) => match self.enter(&phase, world) {
                    Some(next) => flow = next,
                    None => return,
                },
            }
        }
        self.state.queue.clear();
        let text = "the phases hand over to each other without a turn; the scene stops here";
        world.broadcast(&SceneEvent::public_with("Error", text), Some(self.state.time), None);
    }

    /// Enters `phase`; returns where to go on when it is over before anyone acts.
    fn enter(&mut self, phase: &str, world: &mut World) -> Option<Flow> {
        self.moved = true;
        let s = &mut self.state;
        s.phase = phase.to_string();
        s.round = 1;
        s.turn = 0;
        s.acted.clear();
        s.queue.clear();
        s.next = 0;
        let def = self.phase_def().cloned().expect("phases are checked with the document");
        let text =
            if def.description.is_empty() { def.name.clone() } else { format!("{}: {}", def.name, def.description) };
        if def.announce {
            world.broadcast(&SceneEvent::public_with("Phase", text), Some(self.state.time), None);
        }
        if let Some(flow) = self.run_phase_effects(&def.on_enter, world) {
            return Some(flow);
        }
        if self.check_endings(world) {
            return None;
        }
        self.start_pass(&def, world);
        if def.order == TurnOrder::Continue
            && let Some(last) = self.turn_of.as_deref().and_then(|n| world.agent_index(n))
        {
            let place = |n: &String| world.agent_index(n).unwrap_or(usize::MAX);
            let first = self.state.queue.iter().position(|n| place(n) > last).unwrap_or(0);
            self.state.queue.rotate_left(first);
        }
        if self.state.queue.is_empty() {
            return Some(self.leave(&def, world));
        }
        None
    }

    /// Fills the queue for a pass over the phase's actors.
    fn start_pass(&mut self, def: &PhaseDef, world: &mut World) {
        let alive = |n: &String| self.state.agents.get(n).is_some_and(|m| m.alive);
        let mut queue: Vec<String> = match &def.actors {
            Actors::All => self.state.agents.keys().filter(|n| alive(n)).cloned().collect(),
            Actors::Roles(roles) => self
                .state
                .agents
                .iter()
                .filter(|(n, m)| alive(n) && roles.contains(&m.role))
                .map(|(n, _)| n.clone())
                .collect(),
            Actors::Expr(x) => {
                let names = self.scope(&self.state, None).eval(x);
                let mut seen = Vec::new();
                for n in names.ok().and_then(|v| v.as_array().cloned()).unwrap_or_default() {
                    if let Some(n) = n.as_str().map(str::to_string)
                        && alive(&n)
                        && !seen.contains(&n)
                    {
                        seen.push(n);
                    }
                }
                seen
            }
        };
        if def.order == TurnOrder::Random {
            world.rng.shuffle(&mut queue);
        }
        self.state.queue = queue;
        self.state.next = 0;
    }

    /// The phase is over: its exit effects, then the first transition that holds.
    fn leave(&mut self, def: &PhaseDef, world: &mut World) -> Flow {
        let exit = self.run_phase_effects(&def.on_exit, world);
        let state = (*self.state).clone();
        let hooked = self.run_state_hook(Hook::OnPhaseEnd, state, Some(json!(def.name)), world);
        if let Some(flow) = exit.or(hooked) {
            return flow;
        }
        let scope = self.scope(&self.state, None);
        let t = def
            .next
            .iter()
            .find(|t| t.when.as_deref().is_none_or(|w| scope.bool(w).unwrap_or(false)))
            .or(def.next.last())
            .expect("a phase has a transition (checked)");
        match (&t.goto, &t.end) {
            (_, Some(o)) => Flow::End(o.clone()),
            (Some(g), _) => Flow::Goto(g.clone()),
            _ => Flow::End(self.doc().outcomes[0].clone()),
        }
    }

    /// Ends the scene if one of the document's endings holds.
    fn check_endings(&mut self, world: &mut World) -> bool {
        if self.doc().endings.is_empty() {
            return false;
        }
        let scope = self.scope(&self.state, None);
        let hit = self.doc().endings.iter().find(|e| scope.bool(&e.when).unwrap_or(false)).map(|e| e.outcome.clone());
        drop(scope);
        match hit {
            Some(outcome) => {
                self.finish(outcome, world);
                true
            }
            None => false,
        }
    }

    fn finish(&mut self, outcome: String, world: &mut World) {
        let mut state = (*self.state).clone();
        state.outcome = Some(outcome.clone());
        let outcome = match self.run_state_hook(Hook::Outcome, state, None, world) {
            Some(Flow::End(other)) => other,
            _ => outcome,
        };
        if self.doc().style == Style::Custom {
            world.broadcast(
                &SceneEvent::public_with("Outcome", format!("the scene ends: {outcome}")),
                Some(self.state.time),
                None,
            );
        }
        self.state.outcome = Some(outcome);
        self.state.queue.clear();
        self.state.next = 0;
    }

    /// After a turn: the pass moves on; the phase ends when its rule says so.
    fn after_turn(&mut self, world: &mut World) {
        if self.state.outcome.is_some() || std::mem::take(&mut self.moved) {
            return;
        }
        let Some(def) = self.phase_def().cloned() else { return };
        self.state.turn += 1;
        self.state.next += 1;
        if self.check_endings(world) {
            return;
        }
        let mut over = match &def.ends {
            PhaseEnd::AllActed => self.state.queue.iter().all(|n| self.state.acted.contains(n)),
            PhaseEnd::When(x) | PhaseEnd::AsSoonAs(x) => self.scope(&self.state, None).bool(x).unwrap_or(false),
            PhaseEnd::Rounds(_) => false,
        };
        if !over && self.state.next >= self.state.queue.len() {
            let passes = self.state.round;
            over = passes >= def.max_rounds || matches!(def.ends, PhaseEnd::Rounds(n) if passes >= n);
            if !over {
                self.state.round += 1;
                self.start_pass(&def, world);
                over = self.state.queue.is_empty();
            }
        }
        if over {
            let flow = self.leave(&def, world);
            self.follow(Some(flow), world);
            self.moved = false;
        }
    }

    /// The status line an agent reads at the start of its turn.
    fn status(&self, agent: &str) -> String {
        let Some(m) = self.state.agents.get(agent) else {
            return String::new();
        };
        let mut s = format!("phase {}, pass {}; your role: {}", self.state.phase, self.state.round, m.role);
        if !m.alive {
            s.push_str("; you are out of the game");
        } else if m.muted {
            s.push_str("; you are muted");
        }
        let shown =
            |per_agent: bool| self.doc().variables.iter().filter(move |v| v.per_agent == per_agent && !v.hidden);
        let yours: Vec<String> =
            shown(true).filter_map(|v| Some(format!("{} = {}", v.name, m.vars.get(&v.name)?))).collect();
        let shared: Vec<String> =
            shown(false).filter_map(|v| Some(format!("{} = {}", v.name, self.state.vars.get(&v.name)?))).collect();
        if !yours.is_empty() {
            s.push_str(&format!("; yours: {}", yours.join(", ")));
        }
        if !shared.is_empty() {
            s.push_str(&format!("; shared: {}", shared.join(", ")));
        }
        if let Some(p) = self.phase_def().filter(|p| !p.description.is_empty()) {
            s.push_str(&format!("; {}", p.description.replace('\n', " ")));
        }
        if self.state.agents.values().any(|m| !m.alive) {
            let alive: Vec<&str> = self.state.agents.iter().filter(|(_, m)| m.alive).map(|(n, _)| n.as_str()).collect();
            s.push_str(&format!("; {IN_THE_GAME}{}", alive.join(" | ")));
        }
        if m.alive && self.state.outcome.is_none() {
            // `yield` (the engine's) is always open.
            let mut open: Vec<&str> = self.legal_actions(agent).iter().map(|a| a.name.as_str()).collect();
            open.push("yield");
            s.push_str(&format!("; {OPEN_NOW}{}", open.join(" | ")));
        }
        s
    }
}

/// How a choice is counted: a string as itself, anything else as its JSON.
fn choice_key(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The action as its audience reads it: `Ann: offer (amount: 40)`.
fn summary(name: &str, a: &ActionDef, params: &Value) -> String {
    let fields: Vec<String> =
        a.params.iter().filter_map(|p| Some(format!("{}: {}", p.name, choice_key(params.get(&p.name)?)))).collect();
    if fields.is_empty() {
        format!("{name}: {}", a.name)
    } else {
        format!("{name}: {} ({})", a.name, fields.join(", "))
    }
}

fn member<'s>(state: &'s mut CustomState, who: &str) -> Result<&'s mut Member, Fail> {
    state.agents.get_mut(who).ok_or_else(|| Refused(format!("there is no agent named '{who}'")))
}

/// The agents an effect names: a string or a list of strings (the actor when none is given).
fn targets(scope: &Scope, text: Option<&str>, actor: Option<&str>) -> Result<Vec<String>, Fail> {
    let Some(text) = text else {
        return actor.map(|a| vec![a.to_string()]).ok_or_else(|| Refused("no agent is named".into()));
    };
    match scope.eval(text).map_err(|e| Refused(e.to_string()))? {
        Value::String(s) => Ok(vec![s]),
        Value::Array(items) => items
            .into_iter()
            .map(|v| match v {
                Value::String(s) => Ok(s),
                other => Err(Refused(format!("'{text}' gives {other}, not an agent's name"))),
            })
            .collect(),
        other => Err(Refused(format!("'{text}' gives {other}, not an agent's name or a list of names"))),
    }
}

fn one_target(scope: &Scope, text: Option<&str>, actor: Option<&str>) -> Result<String, Fail> {
    match targets(scope, text, actor)?.as_slice() {
        [one] => Ok(one.clone()),
        many => Err(Refused(format!("a transfer names one agent on each side, not {}", many.len()))),
    }
}

fn negate(v: &Value) -> Value {
    match (v.as_i64(), v.as_f64()) {
        (Some(i), _) => json!(-i),
        (None, Some(f)) => json!(-f),
        _ => v.clone(),
    }
}

/// `old + value` for a variable of type `ty`: numbers add, a list takes an item or a list.
fn added(ty: VarType, old: Option<&Value>, value: &Value) -> Result<Value, Fail> {
    let old = old.cloned().unwrap_or(Value::Null);
    match ty {
        VarType::Int => {
            let (a, b) = (old.as_i64().unwrap_or(0), value.as_i64());
            b.and_then(|b| a.checked_add(b))
                .map(Value::from)
                .ok_or_else(|| Refused(format!("cannot add {value} to the whole number {a}")))
        }
        VarType::Number => {
            let (a, b) = (old.as_f64().unwrap_or(0.0), value.as_f64());
            b.map(|b| json!(a + b)).ok_or_else(|| Refused(format!("cannot add {value} to the number {a}")))
        }
        VarType::List => {
            let mut items = old.as_array().cloned().unwrap_or_default();
            match value {
                Value::Array(more) => items.extend(more.iter().cloned()),
                one => items.push(one.clone()),
            }
            Ok(Value::Array(items))
        }
        VarType::String | VarType::Bool => Err(Refused(format!("a {} does not add", ty.name()))),
    }
}

impl SceneRules for Custom {
    clock_and_opening!();
    fn text(&self) -> SceneText {
        let doc = self.doc();
        SceneText {
            description: format!(
                "{}\n\n{}",
                doc.setting.trim_end(),
                if doc.status_lines { MARKER } else { MARKER_QUIET }
            ),
            guidelines: doc.rules.clone(),
            ..SceneText::default()
        }
    }
    fn text_for(&self, agent: &Agent) -> SceneText {
        let mut text = self.text();
        let Some(m) = self.state.agents.get(&agent.name) else {
            return text;
        };
        let role = self.doc().roles.iter().find(|r| r.name == m.role);
        let mut own = format!("Your role: {}.", m.role);
        if let Some(r) = role.filter(|r| !r.instructions.is_empty()) {
            own.push('\n');
            own.push_str(&r.instructions);
        }
        text.guidelines = if text.guidelines.is_empty() { own } else { format!("{}\n\n{own}", text.guidelines) };
        text.own_actions = self
            .role_actions(&agent.name)
            .into_iter()
            .map(|a| OwnAction { name: a.name.clone(), description: a.description.clone(), usage: self.usage(a) })
            .collect();
        text
    }
    fn scene_actions(&self, _agent: &Agent) -> Vec<ActionKind> {
        vec![ActionKind::Yield]
    }
    fn pre_run(&mut self, world: &mut World) -> Result<(), SceneError> {
        let doc = Arc::clone(&self.config);
        for (i, agent) in world.agents.iter().enumerate() {
            let path = format!("agents[{i}].properties.role");
            let role = agent.role().ok_or_else(|| {
                SceneError::Custom(CustomError {
                    path: path.clone(),
                    message: format!(
                        "every agent of a custom scene names its role (the roles: {})",
                        doc.roles.iter().map(|r| r.name.as_str()).collect::<Vec<_>>().join(", ")
                    ),
                })
            })?;
            check::check_role(&doc, &path, role)?;
            if let Some(j) = agent.action_space.iter().position(|a| *a != ActionKind::Yield) {
                return Err(SceneError::Custom(CustomError {
                    path: format!("agents[{i}].action_space[{j}]"),
                    message: "a custom scene's actions are its document's: leave action_space out".into(),
                }));
            }
            let vars = doc
                .variables
                .iter()
                .filter(|v| v.per_agent)
                .map(|v| (v.name.clone(), coerce(v.ty, &v.initial).unwrap_or(Value::Null)))
                .collect();
            self.state
                .agents
                .insert(agent.name.clone(), Member { role: role.to_string(), alive: true, muted: false, vars });
        }
        let first = doc.phases[0].name.clone();
        self.follow(Some(Flow::Goto(first)), world);
        self.moved = false;
        if let Some(e) = world.hook_failure.take() {
            return Err(SceneError::Custom(CustomError {
                path: "hooks.source".into(),
                message: format!(
                    "the scene would run a hook while it is built (its first phase ends before anyone acts): {e}"
                ),
            }));
        }
        Ok(())
    }
    fn should_skip_turn(&self, agent: &Agent) -> bool {
        !self.state.agents.get(&agent.name).is_some_and(|m| m.alive)
    }
    fn is_complete(&self) -> bool {
        self.state.outcome.is_some()
    }
    fn status_prompt(&self, agent: &Agent) -> String {
        if !self.doc().status_lines {
            return String::new();
        }
        self.status(&agent.name)
    }
    fn controlled_next(&self, _world: &World) -> Option<String> {
        if self.state.outcome.is_some() {
            return None;
        }
        self.state.queue.get(self.state.next).cloned()
    }
    fn handle_own(&mut self, actor: usize, call: &ActionCall, world: &mut World) -> Option<Handled> {
        let doc = Arc::clone(&self.config);
        let a = doc.actions.iter().find(|a| a.name == call.name)?;
        Some(self.act(actor, a, call, world))
    }
    fn post_turn(&mut self, actor: usize, world: &mut World) {
        self.turn_of = Some(world.agents[actor].name.clone());
        self.set_time(self.time().saturating_add(self.minutes_per_turn()));
        self.after_turn(world);
    }
}

#[cfg(test)]
mod tests;
