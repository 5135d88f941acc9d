//! The checks a custom scene's document passes before anything is built: every bound, every name
//! and reference, every expression compiled once, the phase graph (each phase entered from the
//! first, an end reachable from each). A problem is a [`CustomError`] naming its JSON path inside
//! the scene's `config` (`actions[3].when`), so nothing half-checked is ever stored or run.

use std::collections::HashSet;

use serde_json::Value;
use simtree_shared::custom::{
    ActionDef, Actors, CustomScene, Effect, HOOK_NAMES, Hooks, ParamType, PhaseDef, PhaseEnd, VarDef, VarType,
    Visibility,
};
use simtree_shared::scene::MAX_PROSE_CHARS;

use super::expr::{MAX_LIST_LEN, MAX_STRING_CHARS, PARSE_STACK, Programs};
use crate::engine::hooks::{Hook, MAX_HOOK_SOURCE_CHARS, defines};

/// The most roles, variables, actions, phases, tallies, outcomes, endings or metrics.
pub(crate) const MAX_ITEMS: usize = 100;
/// The most parameters, effects, requirements, transitions or enum values of one item.
pub(crate) const MAX_PER_ITEM: usize = 20;
/// The most characters of a name.
pub(crate) const MAX_NAME_CHARS: usize = 40;
/// The most passes a phase may last (`rounds`, `max_rounds`).
pub(crate) const MAX_ROUNDS: u32 = 1000;
/// The most characters a `string` parameter may allow.
pub(crate) const MAX_PARAM_CHARS: u32 = 4000;

/// Why an action, an effect or a branch op was refused: the message the actor (or the op's
/// sender) reads.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// A refused document: where (a JSON path inside the scene's `config`) and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct CustomError {
    pub(crate) path: String,
    pub(crate) message: String,
}

fn err<T>(path: impl Into<String>, message: impl Into<String>) -> Result<T, CustomError> {
    Err(CustomError { path: path.into(), message: message.into() })
}

/// An agent's role is one of the document's.
pub(crate) fn check_role(doc: &CustomScene, path: &str, role: &str) -> Result<(), CustomError> {
    known(path, "role", role, doc.roles.iter().map(|r| r.name.clone()))
}

/// Checks `doc` and compiles its expressions, on a thread of its own with the parser's stack
/// ([`PARSE_STACK`]).
pub(crate) fn check(doc: &CustomScene) -> Result<Programs, CustomError> {
    on_parse_stack(|| {
        let mut c = Checker { doc, programs: Programs::default() };
        c.all().map(|()| c.programs)
    })?
}

/// The effects a hook returned, checked as a document's are (an actor's when `actor`, else a
/// phase's) and their expressions compiled, on a thread with the parser's stack. The error
/// names the effect's index and its field (`2`, `set.var: no variable is named 'x'…`).
pub(crate) fn hook_effects(
    doc: &CustomScene,
    effects: &[Effect],
    actor: bool,
) -> Result<Programs, (usize, CustomError)> {
    let who = if actor { Who::Actor } else { Who::Phase };
    on_parse_stack(|| {
        let mut c = Checker { doc, programs: Programs::default() };
        for (k, e) in effects.iter().enumerate() {
            c.effect("", e, who).map_err(|mut e| {
                e.path = e.path.trim_start_matches('.').to_string();
                (k, e)
            })?;
        }
        Ok(c.programs)
    })
    .unwrap_or_else(|e| Err((0, e)))
}

/// Runs `f` on a thread of its own with the parser's stack ([`PARSE_STACK`]).
fn on_parse_stack<R: Send>(f: impl FnOnce() -> R + Send) -> Result<R, CustomError> {
    std::thread::scope(|s| {
        let running =
            std::thread::Builder::new().name("custom-scene-check".into()).stack_size(PARSE_STACK).spawn_scoped(s, f);
        match running {
            Ok(handle) => handle.join().or_else(|_| err("", "the check failed")),
            Err(e) => err("", format!("no thread to check on: {e}")),
        }
    })
}

struct Checker<'a> {
    doc: &'a CustomScene,
    programs: Programs,
}

/// Whether an effect list runs with an actor (an action's) or without (a phase's).
#[derive(Clone, Copy, PartialEq)]
enum Who {
    Actor,
    Phase,
}

fn count<T>(path: &str, list: &[T], max: usize, what: &str) -> Result<(), CustomError> {
    if list.len() > max {
        return err(path, format!("{} {what}; at most {max}", list.len()));
    }
    Ok(())
}

fn text(path: &str, s: &str) -> Result<(), CustomError> {
    let chars = s.chars().count();
    if chars > MAX_PROSE_CHARS {
        return err(path, format!("{chars} characters; at most {MAX_PROSE_CHARS}"));
    }
    Ok(())
}

fn name(path: &str, n: &str) -> Result<(), CustomError> {
    let ok = !n.is_empty()
        && n.chars().count() <= MAX_NAME_CHARS
        && n.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && n.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !ok {
        return err(
            path,
            format!(
                "'{}' is not a name: use lower-case letters, digits and _, starting with a letter, at most {MAX_NAME_CHARS} characters",
                n.chars().take(60).collect::<String>()
            ),
        );
    }
    Ok(())
}

/// Names unique within a list; `names[i]` is at `path[i].name` (or `path[i]` when `field` is
/// empty).
fn unique<'n>(path: &str, field: &str, names: impl Iterator<Item = &'n str>) -> Result<(), CustomError> {
    let mut seen = HashSet::new();
    for (i, n) in names.enumerate() {
        let at = if field.is_empty() { format!("{path}[{i}]") } else { format!("{path}[{i}].{field}") };
        name(&at, n)?;
        if !seen.insert(n) {
            return err(at, format!("'{n}' is named twice"));
        }
    }
    Ok(())
}

fn known(path: &str, what: &str, name: &str, names: impl Iterator<Item = String>) -> Result<(), CustomError> {
    let names: Vec<String> = names.collect();
    if !names.iter().any(|n| n == name) {
        return err(path, format!("no {what} is named '{name}' (the {what}s: {})", names.join(", ")));
    }
    Ok(())
}

/// A value of `ty` with `value`'s content, as it is kept: an int as an integer, a number as a
/// float; lists of scalars and strings within their bounds.
pub(crate) fn coerce(ty: VarType, value: &Value) -> Result<Value, Refused> {
    let want = || Refused(format!("{} is not a value of type {}", short(value), ty.name()));
    match (ty, value) {
        (VarType::Int, Value::Number(n)) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Ok(Value::from(i)),
            (None, Some(f)) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(Value::from(f as i64)),
            _ => Err(want()),
        },
        (VarType::Number, Value::Number(n)) => {
            n.as_f64().and_then(serde_json::Number::from_f64).map(Value::Number).ok_or_else(want)
        }
        (VarType::String, Value::String(s)) => {
            let chars = s.chars().count();
            if chars > MAX_STRING_CHARS {
                return Err(Refused(format!("{chars} characters; a string value may have at most {MAX_STRING_CHARS}")));
            }
            Ok(value.clone())
        }
        (VarType::Bool, Value::Bool(_)) => Ok(value.clone()),
        (VarType::List, Value::Array(items)) => {
            if items.len() > MAX_LIST_LEN {
                return Err(Refused(format!("{} items; a list may have at most {MAX_LIST_LEN}", items.len())));
            }
            for item in items {
                match item {
                    Value::String(s) if s.chars().count() > MAX_STRING_CHARS => {
                        return Err(Refused(format!("a list item has more than {MAX_STRING_CHARS} characters")));
                    }
                    Value::String(_) | Value::Number(_) | Value::Bool(_) => {}
                    other => {
                        return Err(Refused(format!("{} is not a number, string or boolean list item", short(other))));
                    }
                }
            }
            Ok(value.clone())
        }
        _ => Err(want()),
    }
}

pub(super) fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 60 { format!("{}...", s.chars().take(57).collect::<String>()) } else { s }
}

impl Checker<'_> {
    fn expr(&mut self, path: &str, text: &str) -> Result<(), CustomError> {
        self.programs.add(text).map_err(|e| CustomError { path: path.to_string(), message: e.to_string() })
    }

    fn role(&self, path: &str, role: &str) -> Result<(), CustomError> {
        known(path, "role", role, self.doc.roles.iter().map(|r| r.name.clone()))
    }

    fn phase(&self, path: &str, phase: &str) -> Result<(), CustomError> {
        known(path, "phase", phase, self.doc.phases.iter().map(|p| p.name.clone()))
    }

    fn outcome(&self, path: &str, outcome: &str) -> Result<(), CustomError> {
        known(path, "outcome", outcome, self.doc.outcomes.iter().cloned())
    }

    fn var(&self, path: &str, var: &str) -> Result<&VarDef, CustomError> {
        known(path, "variable", var, self.doc.variables.iter().map(|v| v.name.clone()))?;
        Ok(self.doc.variables.iter().find(|v| v.name == var).expect("just found"))
    }

    fn all(&mut self) -> Result<(), CustomError> {
        let d = self.doc;
        text("setting", &d.setting)?;
        text("rules", &d.rules)?;
        for (path, len, what) in [
            ("roles", d.roles.len(), "roles"),
            ("variables", d.variables.len(), "variables"),
            ("actions", d.actions.len(), "actions"),
            ("phases", d.phases.len(), "phases"),
            ("tallies", d.tallies.len(), "tallies"),
            ("outcomes", d.outcomes.len(), "outcomes"),
            ("endings", d.endings.len(), "endings"),
            ("metrics", d.metrics.len(), "metrics"),
        ] {
            if len > MAX_ITEMS {
                return err(path, format!("{len} {what}; a custom scene may have at most {MAX_ITEMS}"));
            }
        }
        for (path, empty) in [
            ("roles", d.roles.is_empty()),
            ("actions", d.actions.is_empty()),
            ("phases", d.phases.is_empty()),
            ("outcomes", d.outcomes.is_empty()),
        ] {
            if empty {
                return err(path, "name at least one");
            }
        }
        unique("roles", "name", d.roles.iter().map(|r| r.name.as_str()))?;
        for (i, r) in d.roles.iter().enumerate() {
            text(&format!("roles[{i}].instructions"), &r.instructions)?;
        }
        unique("variables", "name", d.variables.iter().map(|v| v.name.as_str()))?;
        for (i, v) in d.variables.iter().enumerate() {
            coerce(v.ty, &v.initial).or_else(|m| err(format!("variables[{i}].initial"), m.0))?;
        }
        unique("actions", "name", d.actions.iter().map(|a| a.name.as_str()))?;
        if let Some(i) = d.actions.iter().position(|a| a.name == "yield") {
            return err(
                format!("actions[{i}].name"),
                "'yield' is every agent's own action (it ends the turn); name yours otherwise",
            );
        }
        unique("phases", "name", d.phases.iter().map(|p| p.name.as_str()))?;
        unique("tallies", "name", d.tallies.iter().map(|t| t.name.as_str()))?;
        unique("outcomes", "", d.outcomes.iter().map(String::as_str))?;
        unique("metrics", "name", d.metrics.iter().map(|m| m.name.as_str()))?;
        for (i, t) in d.tallies.iter().enumerate() {
            count(&format!("tallies[{i}].voters"), &t.voters, MAX_PER_ITEM, "roles")?;
            for (j, r) in t.voters.iter().enumerate() {
                self.role(&format!("tallies[{i}].voters[{j}]"), r)?;
            }
        }
        for (i, a) in d.actions.iter().enumerate() {
            self.action(&format!("actions[{i}]"), a)?;
        }
        for (i, p) in d.phases.iter().enumerate() {
            self.phase_def(&format!("phases[{i}]"), p)?;
        }
        for (i, e) in d.endings.iter().enumerate() {
            self.expr(&format!("endings[{i}].when"), &e.when)?;
            self.outcome(&format!("endings[{i}].outcome"), &e.outcome)?;
        }
        for (i, m) in d.metrics.iter().enumerate() {
            self.expr(&format!("metrics[{i}].value"), &m.value)?;
            text(&format!("metrics[{i}].description"), &m.description)?;
        }
        if let Some(h) = &d.hooks {
            self.hooks(h)?;
        }
        self.graph()
    }

    fn action(&mut self, path: &str, a: &ActionDef) -> Result<(), CustomError> {
        if a.description.contains(['\n', '\r']) || a.description.chars().count() > 500 {
            return err(
                format!("{path}.description"),
                "one line of at most 500 characters (it is the action's line in the list)",
            );
        }
        count(&format!("{path}.params"), &a.params, MAX_PER_ITEM, "parameters")?;
        count(&format!("{path}.effects"), &a.effects, MAX_PER_ITEM, "effects")?;
        count(&format!("{path}.require"), &a.require, MAX_PER_ITEM, "requirements")?;
        count(&format!("{path}.roles"), &a.roles, MAX_ITEMS, "roles")?;
        count(&format!("{path}.phases"), &a.phases, MAX_ITEMS, "phases")?;
        unique(&format!("{path}.params"), "name", a.params.iter().map(|p| p.name.as_str()))?;
        for (j, p) in a.params.iter().enumerate() {
            let at = format!("{path}.params[{j}]");
            text(&format!("{at}.description"), &p.description)?;
            let (values, range, length) =
                (p.values.is_some(), p.min.is_some() || p.max.is_some(), p.max_length.is_some());
            match p.ty {
                ParamType::Enum => {
                    let vs = p.values.as_deref().unwrap_or_default();
                    if vs.is_empty() || range || length {
                        return err(at, "an enum parameter has `values` (at least one) and nothing else");
                    }
                    count(&format!("{at}.values"), vs, MAX_PER_ITEM, "values")?;
                    unique(&format!("{at}.values"), "", vs.iter().map(String::as_str))?;
                }
                ParamType::Int | ParamType::Number => {
                    let (Some(min), Some(max)) = (p.min, p.max) else {
                        return err(at, "an int or number parameter has `min` and `max`");
                    };
                    if values || length || min > max || !min.is_finite() || !max.is_finite() {
                        return err(at, "`min` must be at most `max`, and nothing but the range is given");
                    }
                }
                ParamType::String => match p.max_length {
                    Some(1..=MAX_PARAM_CHARS) if !values && !range => {}
                    _ => {
                        return err(
                            at,
                            format!("a string parameter has `max_length` from 1 to {MAX_PARAM_CHARS} and nothing else"),
                        );
                    }
                },
                ParamType::Agent => {
                    if values || range || length {
                        return err(at, "an agent parameter takes no `values`, range or `max_length`");
                    }
                }
            }
        }
        for (j, r) in a.roles.iter().enumerate() {
            self.role(&format!("{path}.roles[{j}]"), r)?;
        }
        for (j, ph) in a.phases.iter().enumerate() {
            self.phase(&format!("{path}.phases[{j}]"), ph)?;
        }
        if let Some(w) = &a.when {
            self.expr(&format!("{path}.when"), w)?;
        }
        if let Some(x) = &a.summary {
            self.expr(&format!("{path}.summary"), x)?;
        }
        for (j, r) in a.require.iter().enumerate() {
            self.expr(&format!("{path}.require[{j}].check"), &r.check)?;
            text(&format!("{path}.require[{j}].message"), &r.message)?;
        }
        match &a.visibility {
            Visibility::PrivateTo(param) => {
                if !a.params.iter().any(|p| &p.name == param && p.ty == ParamType::Agent) {
                    return err(
                        format!("{path}.visibility.private_to"),
                        format!("'{param}' is not an agent parameter of {}", a.name),
                    );
                }
            }
            Visibility::Roles(roles) => {
                for (j, r) in roles.iter().enumerate() {
                    self.role(&format!("{path}.visibility.roles[{j}]"), r)?;
                }
            }
            Visibility::Public | Visibility::Moderator => {}
        }
        if !a.ends_turn
            && let Some(k) = a.effects.iter().position(|e| matches!(e, Effect::Goto(_) | Effect::End(_)))
        {
            return err(
                format!("{path}.ends_turn"),
                format!(
                    "false, but effects[{k}] moves the phase or ends the scene, which always ends the turn: leave ends_turn out"
                ),
            );
        }
        self.effects(&format!("{path}.effects"), &a.effects, Who::Actor)
    }

    fn effects(&mut self, path: &str, effects: &[Effect], who: Who) -> Result<(), CustomError> {
        count(path, effects, MAX_PER_ITEM, "effects")?;
        for (k, e) in effects.iter().enumerate() {
            self.effect(&format!("{path}[{k}]"), e, who)?;
        }
        Ok(())
    }

    fn effect(&mut self, at: &str, e: &Effect, who: Who) -> Result<(), CustomError> {
        {
            match e {
                Effect::Say(t) => {
                    if who == Who::Phase {
                        return err(format!("{at}.say"), "a phase has no speaker: use reveal");
                    }
                    self.expr(&format!("{at}.say"), t)?;
                }
                Effect::Tell(t) => {
                    if who == Who::Phase {
                        return err(format!("{at}.tell"), "a phase has no actor to tell: use reveal");
                    }
                    self.expr(&format!("{at}.tell"), t)?;
                }
                Effect::Reveal(t) => self.expr(&format!("{at}.reveal"), t)?,
                Effect::Set(a) | Effect::Add(a) => {
                    let op = if matches!(e, Effect::Set(_)) { "set" } else { "add" };
                    let v = self.var(&format!("{at}.{op}.var"), &a.var)?;
                    if op == "add" && matches!(v.ty, VarType::String | VarType::Bool) {
                        return err(
                            format!("{at}.add.var"),
                            format!("'{}' is a {}: only numbers and lists add", v.name, v.ty.name()),
                        );
                    }
                    match (&a.agent, v.per_agent) {
                        (Some(_), false) => {
                            return err(format!("{at}.{op}.agent"), format!("'{}' is shared, not per agent", v.name));
                        }
                        (None, true) if who == Who::Phase => {
                            return err(
                                format!("{at}.{op}.agent"),
                                format!("'{}' is per agent and a phase has no actor: say whose", v.name),
                            );
                        }
                        _ => {}
                    }
                    self.expr(&format!("{at}.{op}.value"), &a.value)?;
                    if let Some(agent) = &a.agent {
                        self.expr(&format!("{at}.{op}.agent"), agent)?;
                    }
                }
                Effect::Transfer(t) => {
                    let v = self.var(&format!("{at}.transfer.var"), &t.var)?;
                    if !v.per_agent || !matches!(v.ty, VarType::Int | VarType::Number) {
                        return err(format!("{at}.transfer.var"), format!("'{}' is not a per-agent number", v.name));
                    }
                    match &t.from {
                        Some(from) => self.expr(&format!("{at}.transfer.from"), from)?,
                        None if who == Who::Phase => {
                            return err(format!("{at}.transfer.from"), "a phase has no actor: say who gives");
                        }
                        None => {}
                    }
                    self.expr(&format!("{at}.transfer.to"), &t.to)?;
                    self.expr(&format!("{at}.transfer.amount"), &t.amount)?;
                }
                Effect::Vote(v) => {
                    if who == Who::Phase {
                        return err(format!("{at}.vote"), "a phase has no voter");
                    }
                    known(
                        &format!("{at}.vote.tally"),
                        "tally",
                        &v.tally,
                        self.doc.tallies.iter().map(|t| t.name.clone()),
                    )?;
                    self.expr(&format!("{at}.vote.choice"), &v.choice)?;
                }
                Effect::ClearVotes(t) => {
                    known(&format!("{at}.clear_votes"), "tally", t, self.doc.tallies.iter().map(|t| t.name.clone()))?;
                }
                Effect::Eliminate(x) => self.expr(&format!("{at}.eliminate"), x)?,
                Effect::Mute(x) => self.expr(&format!("{at}.mute"), x)?,
                Effect::Unmute(x) => self.expr(&format!("{at}.unmute"), x)?,
                Effect::Goto(p) => self.phase(&format!("{at}.goto"), p)?,
                Effect::End(o) => self.outcome(&format!("{at}.end"), o)?,
            }
        }
        Ok(())
    }

    fn hooks(&self, hooks: &Hooks) -> Result<(), CustomError> {
        let chars = hooks.source.chars().count();
        if chars > MAX_HOOK_SOURCE_CHARS {
            return err(
                "hooks.source",
                format!("{chars} characters; hook source may have at most {MAX_HOOK_SOURCE_CHARS}"),
            );
        }
        if !Hook::ALL.into_iter().any(|h| defines(&hooks.source, h)) {
            return err(
                "hooks.source",
                format!("defines none of the hooks {} (each is a top-level `def`)", HOOK_NAMES.join(", ")),
            );
        }
        Ok(())
    }

    fn phase_def(&mut self, path: &str, p: &PhaseDef) -> Result<(), CustomError> {
        text(&format!("{path}.description"), &p.description)?;
        match &p.actors {
            Actors::All => {}
            Actors::Roles(roles) => {
                if roles.is_empty() {
                    return err(format!("{path}.actors.roles"), "name at least one role");
                }
                count(&format!("{path}.actors.roles"), roles, MAX_ITEMS, "roles")?;
                for (j, r) in roles.iter().enumerate() {
                    self.role(&format!("{path}.actors.roles[{j}]"), r)?;
                }
            }
            Actors::Expr(x) => self.expr(&format!("{path}.actors.expr"), x)?,
        }
        match &p.ends {
            PhaseEnd::Rounds(n) if !(1..=MAX_ROUNDS).contains(n) => {
                return err(format!("{path}.ends.rounds"), format!("{n}; from 1 to {MAX_ROUNDS}"));
            }
            PhaseEnd::When(x) => self.expr(&format!("{path}.ends.when"), x)?,
            PhaseEnd::AsSoonAs(x) => self.expr(&format!("{path}.ends.as_soon_as"), x)?,
            _ => {}
        }
        if !(1..=MAX_ROUNDS).contains(&p.max_rounds) {
            return err(format!("{path}.max_rounds"), format!("{}; from 1 to {MAX_ROUNDS}", p.max_rounds));
        }
        self.effects(&format!("{path}.on_enter"), &p.on_enter, Who::Phase)?;
        self.effects(&format!("{path}.on_exit"), &p.on_exit, Who::Phase)?;
        if p.next.is_empty() {
            return err(format!("{path}.next"), "say where the scene goes when the phase ends");
        }
        count(&format!("{path}.next"), &p.next, MAX_PER_ITEM, "transitions")?;
        for (j, t) in p.next.iter().enumerate() {
            let at = format!("{path}.next[{j}]");
            match (&t.goto, &t.end) {
                (Some(g), None) => self.phase(&format!("{at}.goto"), g)?,
                (None, Some(o)) => self.outcome(&format!("{at}.end"), o)?,
                _ => return err(at, "give exactly one of `goto` and `end`"),
            }
            if let Some(w) = &t.when {
                self.expr(&format!("{at}.when"), w)?;
            }
        }
        if p.next.last().is_some_and(|t| t.when.is_some()) {
            return err(
                format!("{path}.next[{}].when", p.next.len() - 1),
                "the last transition must have no condition, so the phase always has somewhere to go",
            );
        }
        Ok(())
    }

    /// Every phase is entered from the first, and from every phase entered an end is
    /// reachable (unless the document's `endings` may end it anywhere).
    fn graph(&self) -> Result<(), CustomError> {
        let phases = &self.doc.phases;
        let index = |name: &str| phases.iter().position(|p| p.name == name);
        let goto_end = |effects: &[Effect], out: &mut Vec<usize>, ends: &mut bool| {
            for e in effects {
                match e {
                    Effect::Goto(p) => out.extend(index(p)),
                    Effect::End(_) => *ends = true,
                    _ => {}
                }
            }
        };
        // Edges and whether a phase can end the scene itself.
        let mut edges = vec![Vec::new(); phases.len()];
        let mut ends = vec![false; phases.len()];
        for (i, p) in phases.iter().enumerate() {
            goto_end(&p.on_enter, &mut edges[i], &mut ends[i]);
            goto_end(&p.on_exit, &mut edges[i], &mut ends[i]);
            for t in &p.next {
                if let Some(g) = &t.goto {
                    edges[i].extend(index(g));
                }
                ends[i] |= t.end.is_some();
            }
            for a in &self.doc.actions {
                if a.phases.is_empty() || a.phases.contains(&p.name) {
                    goto_end(&a.effects, &mut edges[i], &mut ends[i]);
                }
            }
        }
        let reach = |from: usize| {
            let mut seen = vec![false; phases.len()];
            let mut stack = vec![from];
            while let Some(i) = stack.pop() {
                if !std::mem::replace(&mut seen[i], true) {
                    stack.extend(edges[i].iter().copied());
                }
            }
            seen
        };
        let entered = reach(0);
        if let Some(i) = entered.iter().position(|e| !e) {
            return err(
                format!("phases[{i}]"),
                format!(
                    "'{}' is never entered: no transition or goto leads to it from '{}'",
                    phases[i].name, phases[0].name
                ),
            );
        }
        if self.doc.endings.is_empty() {
            for (i, p) in phases.iter().enumerate() {
                let from_here = reach(i);
                if !from_here.iter().zip(&ends).any(|(r, e)| *r && *e) {
                    return err(
                        format!("phases[{i}]"),
                        format!("from '{}' no end can be reached: the scene would never end", p.name),
                    );
                }
            }
        }
        Ok(())
    }
}
