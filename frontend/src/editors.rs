//! What the branch editor's forms turn into ops (pure, tested natively).
//!
//! The forms show the things a node can change — an ABM model's declared globals, environment and
//! agent attributes, a social scene's state keys, a trading episode's portfolio, information items
//! and agent — each with its type and current value. This module lists those fields from the node
//! view (and, for an ABM, the tracked values of its last step), parses what the user typed by the
//! field's type (the message is shown inline under the input), and builds the op the server
//! expects. Custom JSON stays the expert mode beside these forms.

use std::collections::{HashMap, HashSet};

use indexmap::IndexMap;
use serde_json::{Map, Value};
use simtree_shared::abm::{AbmOutline, AbmVariable};
use simtree_shared::trading::{CaseDataItem, CaseDataKind};
use simtree_shared::{LogEntry, Op, PlanState, Verbatim};

use crate::chart::abm_steps_of;

use crate::ops::Kind;

/// How a form that is still untouched says why Apply waits: the branch editor shows it as a hint,
/// not as an error.
pub const NOTHING_YET: &str = "nothing to change";

/// The op kinds the editor offers for a tree of `kind` (custom JSON last, for every kind).
pub fn op_kinds(kind: Kind) -> &'static [&'static str] {
    match kind {
        Kind::Social => &[
            "public_broadcast",
            "agent_ctx_append",
            "agent_plan_replace",
            "agent_props_patch",
            "scene_state_patch",
            "scene_prose_set",
            "custom",
        ],
        Kind::Trading => &["portfolio_patch", "case_data_inject", "agent_swap", "agent_prompt_replace", "custom"],
        Kind::Abm => &["abm_set_global", "abm_set_environment", "abm_set_agent", "custom"],
    }
}

/// The type of an editable value, from a model declaration or a current value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldType {
    Integer,
    Number,
    Text,
    Bool,
    /// Lists, maps and anything else: typed as JSON.
    Json,
}

impl FieldType {
    /// From an abm-quant declaration's `type` (`integer`, `number`, `string`, `boolean`, …).
    pub fn of_decl(ty: &str) -> FieldType {
        match ty {
            "integer" | "int" => FieldType::Integer,
            "number" | "float" => FieldType::Number,
            "string" | "str" => FieldType::Text,
            "boolean" | "bool" => FieldType::Bool,
            _ => FieldType::Json,
        }
    }

    /// From a value (a scene state key has no declaration, only its current value).
    pub fn of_value(v: &Value) -> FieldType {
        match v {
            Value::Number(n) if n.is_i64() || n.is_u64() => FieldType::Integer,
            Value::Number(_) => FieldType::Number,
            Value::String(_) => FieldType::Text,
            Value::Bool(_) => FieldType::Bool,
            _ => FieldType::Json,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            FieldType::Integer => "integer",
            FieldType::Number => "number",
            FieldType::Text => "text",
            FieldType::Bool => "true/false",
            FieldType::Json => "JSON",
        }
    }
}

/// One editable value: its name, type, what it holds now and a description.
#[derive(Clone, Debug, PartialEq)]
pub struct Field {
    pub name: String,
    pub ty: FieldType,
    /// The value the input starts from: the current one, else the declared initial value.
    pub current: Value,
    /// What the node holds now, in words (per-agent values are summarised: `S×958, I×30`).
    pub now: String,
    pub description: String,
}

/// Equal values, numbers by value (`1000` and `1000.0` are the same).
fn same_value(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// How a value is written in the input (strings without quotes).
pub fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Parses what was typed as a value of type `ty`; the error says what was expected.
pub fn parse_value(ty: FieldType, text: &str) -> Result<Value, String> {
    let t = text.trim();
    match ty {
        FieldType::Integer => {
            t.parse::<i64>().map(Value::from).map_err(|_| format!("expected a whole number, got '{t}'"))
        }
        FieldType::Number => t
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite())
            .map(Value::from)
            .ok_or_else(|| format!("expected a number, got '{t}'")),
        FieldType::Bool => match t {
            "true" => Ok(Value::Bool(true)),
            "false" => Ok(Value::Bool(false)),
            _ => Err(format!("expected true or false, got '{t}'")),
        },
        FieldType::Text => Ok(Value::String(text.to_string())),
        FieldType::Json => serde_json::from_str(t).map_err(|e| format!("invalid JSON: {e}")),
    }
}

/// The tracked values of the last `abm_step` entry (sourceName → value).
pub fn last_abm_values(entries: &[LogEntry]) -> Map<String, Value> {
    abm_steps_of(entries).next_back().map(|s| s.values).unwrap_or_default()
}

/// The agents of `agent_type` the node has, by id, each with its value of `attr` (or of the
/// type's first attribute tracked per agent) at the node's last step: the choices of the
/// agent-id picker.
///
/// The log carries per-agent lists ordered by id but not the ids themselves. Mesa numbers agents
/// 1, 2, … as they are made, so the ids are certain only for a model with one agent type whose
/// population is the same at the first and the last step; any other model (or a node with no
/// step yet) gets `None`, and the id stays a free entry.
pub fn abm_agent_ids(
    model: &AbmOutline,
    entries: &[LogEntry],
    agent_type: &str,
    attr: &str,
) -> Option<Vec<(u64, String)>> {
    let types: Vec<String> = crate::chart::abm_structure(model).agents.into_iter().map(|(k, _)| k).collect();
    if types != [agent_type] {
        return None;
    }
    let mut steps = abm_steps_of(entries);
    let first = steps.next()?;
    let last = steps.next_back().unwrap_or_else(|| first.clone());
    let prefix = format!("agent.{agent_type}.agentAttribute.");
    let values = &last.values;
    let (key, list) = values
        .get_key_value(&format!("{prefix}{attr}"))
        .filter(|(_, v)| v.is_array())
        .or_else(|| values.iter().find(|(k, v)| k.starts_with(&prefix) && v.is_array()))?;
    let list = list.as_array()?;
    let at_first = first.values.get(key)?.as_array()?.len();
    if at_first != list.len() {
        return None;
    }
    Some((1..).zip(list.iter().map(value_text)).collect())
}

/// An ABM model's editable fields: globals, environment attributes and, per agent type, its
/// attributes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AbmFields {
    pub globals: Vec<Field>,
    pub environment: Vec<Field>,
    pub agents: Vec<(String, Vec<Field>)>,
}

/// A per-agent list in a few words: one value when all agree, else counts (`S×958, I×30`).
fn summarise(values: &[Value]) -> (Option<Value>, String) {
    let mut counts: Vec<(Value, usize)> = Vec::new();
    for v in values {
        match counts.iter_mut().find(|(x, _)| x == v) {
            Some((_, n)) => *n += 1,
            None => counts.push((v.clone(), 1)),
        }
    }
    match counts.as_slice() {
        [] => (None, "no agents".into()),
        [(one, _)] => (Some(one.clone()), value_text(one)),
        _ => {
            counts.sort_by_key(|c| std::cmp::Reverse(c.1));
            let parts: Vec<String> = counts.iter().take(4).map(|(v, n)| format!("{}×{n}", value_text(v))).collect();
            let more = if counts.len() > 4 { ", …" } else { "" };
            (None, format!("{}{more}", parts.join(", ")))
        }
    }
}

fn field(decl: &AbmVariable, values: &Map<String, Value>, set: Option<&(Value, bool)>) -> Option<Field> {
    if decl.name.is_empty() {
        return None;
    }
    let initial = decl.initial_value.clone();
    let tracked = values.get(&decl.source_name);
    let (current, now) = match (set, tracked) {
        // Set by a branch op with no step since (or never tracked): the op's value holds.
        (Some((v, false)), _) | (Some((v, true)), None) => (v.clone(), value_text(v)),
        (_, Some(Value::Array(list))) => {
            let (one, words) = summarise(list);
            (one.unwrap_or_else(|| initial.clone()), words)
        }
        (_, Some(v)) => (v.clone(), value_text(v)),
        (None, None) => (initial.clone(), format!("{} (initial)", value_text(&initial))),
    };
    Some(Field {
        name: decl.name.clone(),
        ty: FieldType::of_decl(&decl.var_type),
        current,
        now,
        description: decl.description.clone(),
    })
}

/// What the branch ops on a node's root path set of an agent-based model's globals and
/// environment (`abm_set_global`, `abm_set_environment`): the last value of each name, and
/// whether the model stepped after it (then a tracked value of the step is the newer).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AbmSets {
    pub globals: HashMap<String, (Value, bool)>,
    pub environment: HashMap<String, (Value, bool)>,
}

/// The [`AbmSets`] of the node whose root path is `path` (root first), from each node's ops and
/// the log's steps (`entries`, each naming the node it belongs to).
pub fn abm_sets(path: &[u64], ops: &HashMap<u64, Vec<Op>>, entries: &[LogEntry]) -> AbmSets {
    let stepped: HashSet<u64> =
        entries.iter().filter(|e| e.event_type() == Some(simtree_shared::EventType::AbmStep)).map(|e| e.node).collect();
    let mut sets = AbmSets::default();
    for n in path {
        for op in ops.get(n).into_iter().flatten() {
            match op {
                Op::AbmSetGlobal { name, value } => {
                    sets.globals.insert(name.clone(), (value.clone(), false));
                }
                Op::AbmSetEnvironment { name, value } => {
                    sets.environment.insert(name.clone(), (value.clone(), false));
                }
                _ => {}
            }
        }
        if stepped.contains(n) {
            for v in sets.globals.values_mut().chain(sets.environment.values_mut()) {
                v.1 = true;
            }
        }
    }
    sets
}

/// The fields of an abm-quant `model`, with the current values: set by a branch op since the
/// last step (`sets`), else from `values` (see [`last_abm_values`]) where tracked, else the
/// declared initial values.
pub fn abm_fields(model: &AbmOutline, values: &Map<String, Value>, sets: &AbmSets) -> AbmFields {
    let list = |v: &Option<Vec<AbmVariable>>, set: &HashMap<String, (Value, bool)>| -> Vec<Field> {
        v.iter().flatten().filter_map(|d| field(d, values, set.get(&d.name))).collect()
    };
    let mut agents: Vec<(String, Vec<Field>)> = Vec::new();
    for (kind, decl) in model.agent_attributes() {
        let Some(f) = field(decl, values, None) else { continue };
        match agents.iter_mut().find(|(k, _)| k == kind) {
            Some((_, fs)) => fs.push(f),
            None => agents.push((kind.to_string(), vec![f])),
        }
    }
    AbmFields {
        globals: list(&model.global_variables, &sets.globals),
        environment: list(&model.environment.environment_attributes, &sets.environment),
        agents,
    }
}

/// A social scene's state keys with their types (from the current values).
pub fn social_fields(state: &Value) -> Vec<Field> {
    state
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| Field {
            name: k.clone(),
            ty: FieldType::of_value(v),
            current: v.clone(),
            now: value_text(v),
            description: String::new(),
        })
        .collect()
}

/// The scene-state patch: the JSON object typed (the expert part), plus the picked key when its
/// typed value differs from the current one. Keys in the JSON win.
pub fn scene_patch(json_text: &str, picked: Option<(&Field, &str)>) -> Result<Op, String> {
    let text = json_text.trim();
    let mut updates = if text.is_empty() {
        Map::new()
    } else {
        match serde_json::from_str::<Value>(text).map_err(|e| format!("invalid JSON: {e}"))? {
            Value::Object(m) => m,
            _ => return Err("the patch must be a JSON object of key → value".into()),
        }
    };
    if let Some((f, typed)) = picked {
        let v = parse_value(f.ty, typed).map_err(|e| format!("{}: {e}", f.name))?;
        if v != f.current && !updates.contains_key(&f.name) {
            updates.insert(f.name.clone(), v);
        }
    }
    if updates.is_empty() {
        return Err(format!("{NOTHING_YET}: pick a key and type a new value"));
    }
    Ok(Op::SceneStatePatch { updates })
}

/// The `scene_prose_set` the prose form sends: each part typed differently from what the node's
/// prompts carry now (`now`: description, rules, examples), the rest left as it is.
pub fn prose_set(now: [&str; 3], typed: [&str; 3]) -> Result<Op, String> {
    let changed = |i: usize| (typed[i] != now[i]).then(|| typed[i].to_string());
    let prose = simtree_shared::SceneProse {
        description: changed(0),
        rules: changed(1),
        examples: changed(2),
        actions: IndexMap::new(),
    };
    if prose.is_empty() {
        return Err(format!("{NOTHING_YET}: edit the description, the rules or the examples"));
    }
    Ok(Op::SceneProseSet { prose })
}

/// The shape an agent's plan has, as the plan editor shows it.
pub const PLAN_SCHEMA: &str = r#"{"goals": [{"id": "g1", "desc": "…", "priority": "normal", "status": "pending"}], "milestones": [{"id": "m1", "desc": "…", "status": "pending"}], "strategy": "…", "notes": "…"}"#;

/// The plan an `agent_plan_replace` sends, from the plan editor's JSON: an agent's plan
/// ([`simtree_shared::PlanState`]; every key optional), where a goal or a milestone may also be
/// written as plain text (its `desc`). The error names the part that does not fit and the shape.
pub fn plan_from_text(text: &str) -> Result<Verbatim<PlanState>, String> {
    let mut v: Value = serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))?;
    for key in ["goals", "milestones"] {
        if let Some(Value::Array(items)) = v.get_mut(key) {
            for item in items.iter_mut() {
                if let Value::String(s) = item {
                    *item = Value::Object(Map::from_iter([("desc".to_string(), Value::String(s.clone()))]));
                }
            }
        }
    }
    // Checked against the plan's type, sent as written (a plan set by a branch round-trips).
    Verbatim::try_from(v).map_err(|e| format!("not a plan: {e}; expected {PLAN_SCHEMA}"))
}

/// `portfolio_patch` from the cash input (empty = unchanged) and `(ticker, shares)` inputs
/// (empty = unchanged, 0 = sell all).
pub fn portfolio_patch(cash: &str, positions: &[(String, String)]) -> Result<Op, String> {
    let cash = cash.trim();
    let cash = if cash.is_empty() {
        None
    } else {
        let c = cash
            .replace(',', "")
            .parse::<f64>()
            .ok()
            .filter(|c| c.is_finite() && *c >= 0.0)
            .ok_or_else(|| format!("cash: expected an amount of 0 or more, got '{cash}'"))?;
        Some(c)
    };
    let mut positions_map = IndexMap::new();
    for (ticker, shares) in positions {
        let s = shares.trim();
        if s.is_empty() {
            continue;
        }
        let n = s
            .parse::<u64>()
            .ok()
            .and_then(|n| i64::try_from(n).ok())
            .ok_or_else(|| format!("{ticker}: expected a whole number of shares (0 or more), got '{s}'"))?;
        positions_map.insert(ticker.clone(), n);
    }
    if cash.is_none() && positions_map.is_empty() {
        return Err(format!("{NOTHING_YET}: set the cash or a position"));
    }
    Ok(Op::PortfolioPatch { cash, positions: positions_map })
}

/// `case_data_inject` of a `news`/`earnings`/`other` item. The item has no date field, so a date
/// is written at the start of the content, as the data set's own items are (`2012-04-24 AAPL: …`).
pub fn news_item(kind: &str, date: &str, content: &str) -> Result<Op, String> {
    let content = content.trim();
    if content.is_empty() {
        return Err("the item needs some content".into());
    }
    let date = date.trim();
    let text = if date.is_empty() { content.to_string() } else { format!("{date} {content}") };
    let kind = CaseDataKind::parse(kind).ok_or_else(|| format!("unknown item kind '{kind}'"))?;
    Ok(Op::CaseDataInject { item: CaseDataItem { kind, content: text } })
}

/// `agent_swap` to a kind with its parameters (empty = the server's default).
pub fn agent_swap(kind: &str, lookback: &str, band: &str, history: &str, prompt: &str) -> Result<Op, String> {
    // `kind` plus the parameters given; the server fills in the others.
    let mut agent = Map::new();
    agent.insert("kind".into(), kind.into());
    let whole = |name: &str, text: &str| -> Result<Option<u64>, String> {
        let t = text.trim();
        if t.is_empty() {
            return Ok(None);
        }
        t.parse::<u64>()
            .ok()
            .filter(|n| *n >= 1 || name == "history")
            .map(Some)
            .ok_or_else(|| format!("{name}: expected a whole number, got '{t}'"))
    };
    match kind {
        "buy_and_hold" => {}
        "momentum" | "mean_reversion" => {
            if let Some(n) = whole("lookback", lookback)? {
                agent.insert("lookback".into(), n.into());
            }
            if kind == "mean_reversion" && !band.trim().is_empty() {
                let b = parse_value(FieldType::Number, band).map_err(|e| format!("band: {e}"))?;
                agent.insert("band".into(), b);
            }
        }
        "llm" => {
            if let Some(n) = whole("history", history)? {
                agent.insert("history".into(), n.into());
            }
            if !prompt.trim().is_empty() {
                agent.insert("system_prompt".into(), prompt.into());
            }
        }
        other => return Err(format!("unknown agent kind '{other}'")),
    }
    let agent = Verbatim::try_from(Value::Object(agent)).map_err(|e| format!("agent: {e}"))?;
    Ok(Op::AgentSwap { agent })
}

/// `agent_prompt_replace`; the server refuses an empty prompt, so the form does first.
pub fn prompt_replace(prompt: &str) -> Result<Op, String> {
    if prompt.trim().is_empty() {
        return Err("the prompt must not be empty".into());
    }
    Ok(Op::AgentPromptReplace { system_prompt: prompt.to_string() })
}

/// Which ABM declaration an op sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AbmTarget {
    Global,
    Environment,
    Agent,
}

/// `abm_set_global` / `abm_set_environment` / `abm_set_agent` of `field` to what was typed; an
/// agent op takes its type and, optionally, one agent's id.
pub fn abm_op(target: AbmTarget, field: &Field, typed: &str, agent_type: &str, agent_id: &str) -> Result<Op, String> {
    let value = parse_value(field.ty, typed).map_err(|e| format!("{}: {e}", field.name))?;
    let name = field.name.clone();
    // A global or an environment value set to what it is already would branch a copy.
    if target != AbmTarget::Agent && same_value(&value, &field.current) {
        return Err(format!("{NOTHING_YET}: {name} is {} already", value_text(&value)));
    }
    Ok(match target {
        AbmTarget::Global => Op::AbmSetGlobal { name, value },
        AbmTarget::Environment => Op::AbmSetEnvironment { name, value },
        AbmTarget::Agent => {
            let id = agent_id.trim();
            let agent_id = if id.is_empty() {
                None
            } else {
                Some(id.parse::<u64>().map_err(|_| format!("agent id: expected a whole number, got '{id}'"))?)
            };
            Op::AbmSetAgent { agent_type: agent_type.to_string(), name, value, agent_id }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// An op as the server receives it.
    fn wire(op: Result<Op, String>) -> Value {
        serde_json::to_value(op.unwrap()).unwrap()
    }

    fn sir() -> AbmOutline {
        serde_json::from_value(sir_json()).unwrap()
    }

    fn sir_json() -> Value {
        json!({
            "globalVariables": [
                {"name": "infectionRate", "type": "number", "initialValue": 0.05, "sourceName": "globalVariable.infectionRate", "description": "chance"},
                {"name": "infectedCount", "type": "integer", "initialValue": 0, "sourceName": "globalVariable.infectedCount"}
            ],
            "environment": {"environmentAttributes": [
                {"name": "density", "type": "number", "initialValue": 0.6, "sourceName": "environment.environmentAttribute.density"}
            ]},
            "agents": [[{"agentAttributes": [
                {"name": "status", "type": "string", "initialValue": "S", "sourceName": "agent.Person.agentAttribute.status"}
            ]}]]
        })
    }

    fn step(values: Value) -> LogEntry {
        serde_json::from_value(json!({"type": "abm_step", "node": 1, "data": {"step": 3, "values": values}})).unwrap()
    }

    #[test]
    fn abm_fields_come_from_the_declarations_with_the_last_steps_values() {
        let logs = [
            step(json!({"globalVariable.infectedCount": 5})),
            step(
                json!({"globalVariable.infectedCount": 30, "agent.Person.agentAttribute.status": ["S", "I", "S", "R", "S"]}),
            ),
        ];
        let f = abm_fields(&sir(), &last_abm_values(&logs), &AbmSets::default());
        let names: Vec<&str> = f.globals.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(names, ["infectionRate", "infectedCount"]);
        assert_eq!(f.globals[0].ty, FieldType::Number);
        assert_eq!(f.globals[0].current, json!(0.05), "untracked: the initial value");
        assert_eq!(f.globals[0].now, "0.05 (initial)");
        assert_eq!(f.globals[1].current, json!(30), "tracked: the last step's value");
        assert_eq!(f.environment[0].name, "density");
        let (kind, attrs) = &f.agents[0];
        assert_eq!(kind, "Person");
        assert_eq!(attrs[0].now, "S×3, I×1, R×1", "a per-agent list is summarised");
        assert_eq!(attrs[0].current, json!("S"), "mixed values start from the initial one");
    }

    #[test]
    fn agent_ids_come_from_the_per_agent_lists_when_they_are_certain() {
        let logs = [
            step(json!({"agent.Person.agentAttribute.status": ["S", "S", "S"]})),
            step(json!({"agent.Person.agentAttribute.status": ["S", "I", "R"], "globalVariable.infectedCount": 1})),
        ];
        let ids = abm_agent_ids(&sir(), &logs, "Person", "infectionTime").unwrap();
        assert_eq!(ids, [(1, "S".into()), (2, "I".into()), (3, "R".into())], "another tracked list serves");
        assert_eq!(abm_agent_ids(&sir(), &logs[..1], "Person", "status").unwrap().len(), 3);
        assert_eq!(abm_agent_ids(&sir(), &logs, "Tree", "status"), None, "not a type of the model");
        assert_eq!(abm_agent_ids(&sir(), &[], "Person", "status"), None, "no step yet");
        let shrunk = [logs[0].clone(), step(json!({"agent.Person.agentAttribute.status": ["S", "I"]}))];
        assert_eq!(abm_agent_ids(&sir(), &shrunk, "Person", "status"), None, "agents came or went");
        let mut two = sir_json();
        two["agents"][0]
            .as_array_mut()
            .unwrap()
            .push(json!({"agentAttributes": [{"name": "x", "sourceName": "agent.Cell.agentAttribute.x"}]}));
        let two: AbmOutline = serde_json::from_value(two).unwrap();
        assert_eq!(abm_agent_ids(&two, &logs, "Person", "status"), None, "two types share the numbering");
    }

    #[test]
    fn values_are_parsed_by_their_type_with_readable_errors() {
        assert_eq!(parse_value(FieldType::Integer, " 12 "), Ok(json!(12)));
        assert!(parse_value(FieldType::Integer, "1.5").unwrap_err().contains("whole number"));
        assert_eq!(parse_value(FieldType::Number, "0.6"), Ok(json!(0.6)));
        assert!(parse_value(FieldType::Number, "NaN").is_err());
        assert_eq!(parse_value(FieldType::Bool, "true"), Ok(json!(true)));
        assert!(parse_value(FieldType::Bool, "yes").is_err());
        assert_eq!(parse_value(FieldType::Text, "I"), Ok(json!("I")));
        assert!(parse_value(FieldType::Json, "{").unwrap_err().starts_with("invalid JSON"));
    }

    #[test]
    fn abm_ops_carry_name_type_and_optional_agent_id() {
        let f = abm_fields(&sir(), &Map::new(), &AbmSets::default());
        let g = wire(abm_op(AbmTarget::Global, &f.globals[0], "0.6", "", ""));
        assert_eq!(g, json!({"op": "abm_set_global", "name": "infectionRate", "value": 0.6}));
        let e = wire(abm_op(AbmTarget::Environment, &f.environment[0], "0.7", "", ""));
        assert_eq!(e["op"], "abm_set_environment");
        let a = wire(abm_op(AbmTarget::Agent, &f.agents[0].1[0], "R", "Person", "7"));
        assert_eq!(
            a,
            json!({"op": "abm_set_agent", "agent_type": "Person", "name": "status", "value": "R", "agent_id": 7})
        );
        assert!(abm_op(AbmTarget::Agent, &f.agents[0].1[0], "R", "Person", "x").is_err());
        assert!(abm_op(AbmTarget::Global, &f.globals[0], "high", "", "").unwrap_err().starts_with("infectionRate"));
        // The value it has already is no change (numbers compared by value).
        let now = value_text(&f.globals[0].current);
        let same = abm_op(AbmTarget::Global, &f.globals[0], &now, "", "").unwrap_err();
        assert!(same.starts_with(NOTHING_YET), "{same}");
    }

    #[test]
    fn a_global_set_by_a_branch_is_what_the_node_holds_until_a_step_tracks_it() {
        let mut ops = HashMap::new();
        let set = |name: &str, value: Value| vec![Op::AbmSetGlobal { name: name.into(), value }];
        ops.insert(1, set("infectionRate", json!(0.6)));
        ops.insert(2, set("infectedCount", json!(99)));
        // Node 1 steps after its op: the untracked rate stays 0.6, the tracked count is the step's.
        let logs = [step(json!({"globalVariable.infectedCount": 30}))];
        let at = |path: &[u64]| {
            let sets = abm_sets(path, &ops, &logs);
            abm_fields(&sir(), &last_abm_values(&logs), &sets).globals
        };
        let one = at(&[0, 1]);
        assert_eq!((one[0].current.clone(), one[0].now.as_str()), (json!(0.6), "0.6"));
        assert_eq!(one[1].current, json!(30));
        let two = at(&[0, 1, 2]);
        assert_eq!(two[1].now, "99", "set after the last step: the op's value");
        // The rate can be set back to its initial value on node 1.
        let back = wire(abm_op(AbmTarget::Global, &one[0], "0.05", "", ""));
        assert_eq!(back["value"], json!(0.05));
        assert!(abm_op(AbmTarget::Global, &one[0], "0.6", "", "").is_err());
        let root = abm_fields(&sir(), &Map::new(), &abm_sets(&[0], &ops, &[])).globals;
        assert_eq!(root[0].now, "0.05 (initial)");
    }

    #[test]
    fn a_plan_takes_goals_as_objects_or_text_and_names_the_shape_when_wrong() {
        let plan = plan_from_text(r#"{"goals": ["win the vote", {"id": "g2", "desc": "rest"}], "strategy": "listen"}"#)
            .unwrap();
        let plan = plan.json();
        assert_eq!(plan["goals"][0], json!({"desc": "win the vote"}));
        assert_eq!(plan["goals"][1]["id"], "g2");
        assert_eq!(plan["strategy"], "listen");
        let wrong = plan_from_text(r#"{"goals": [1]}"#).unwrap_err();
        assert!(wrong.contains("expected {\"goals\""), "{wrong}");
        assert!(plan_from_text(r#"{"goal": []}"#).unwrap_err().contains("goal"));
        assert!(plan_from_text("{").unwrap_err().starts_with("invalid JSON"));
    }

    #[test]
    fn a_prose_set_sends_only_the_parts_typed_differently() {
        let now = ["the chamber", "follow the Host", ""];
        assert!(prose_set(now, now).unwrap_err().starts_with(NOTHING_YET));
        assert_eq!(
            wire(prose_set(now, ["a jury room", "follow the Host", ""])),
            json!({"op": "scene_prose_set", "prose": {"description": "a jury room"}})
        );
        // Emptying a part is a change too: the prompts then carry no such text.
        assert_eq!(
            wire(prose_set(now, ["the chamber", "", "an example"])),
            json!({"op": "scene_prose_set", "prose": {"rules": "", "examples": "an example"}})
        );
    }

    #[test]
    fn a_scene_patch_takes_the_changed_key_and_the_json() {
        let fields = social_fields(&json!({"time": 1080, "topic": "rain"}));
        assert_eq!(fields[0].ty, FieldType::Integer);
        assert_eq!(fields[1].ty, FieldType::Text);
        let time = &fields[0];
        assert_eq!(
            wire(scene_patch("{}", Some((time, "1200")))),
            json!({"op": "scene_state_patch", "updates": {"time": 1200}})
        );
        // The unchanged picked key is left out; the JSON's keys are taken as typed.
        assert_eq!(wire(scene_patch(r#"{"topic": "sun"}"#, Some((time, "1080"))))["updates"], json!({"topic": "sun"}));
        assert!(scene_patch("{}", Some((time, "1080"))).unwrap_err().starts_with("nothing"));
        assert!(scene_patch("{}", Some((time, "noon"))).unwrap_err().starts_with("time"));
        assert!(scene_patch("[1]", None).is_err());
    }

    #[test]
    fn trading_forms_build_the_servers_ops() {
        assert_eq!(
            wire(portfolio_patch("500,000", &[("AAPL".into(), "10".into()), ("MSFT".into(), "".into())])),
            json!({"op": "portfolio_patch", "cash": 500000.0, "positions": {"AAPL": 10}})
        );
        assert!(portfolio_patch("", &[]).unwrap_err().starts_with("nothing"));
        assert!(portfolio_patch("-5", &[]).unwrap_err().starts_with("cash"));
        assert!(portfolio_patch("", &[("AAPL".into(), "2.5".into())]).unwrap_err().starts_with("AAPL"));
        assert_eq!(
            wire(news_item("news", "2012-06-01", "Apple recalls phones"))["item"],
            json!({"kind": "news", "content": "2012-06-01 Apple recalls phones"})
        );
        assert!(news_item("news", "", "  ").is_err());
        assert_eq!(
            wire(agent_swap("mean_reversion", "20", "1.5", "", ""))["agent"],
            json!({"kind": "mean_reversion", "lookback": 20, "band": 1.5})
        );
        assert_eq!(wire(agent_swap("buy_and_hold", "9", "", "", ""))["agent"], json!({"kind": "buy_and_hold"}));
        assert_eq!(
            wire(agent_swap("llm", "", "", "2", "Be careful."))["agent"],
            json!({"kind": "llm", "history": 2, "system_prompt": "Be careful."})
        );
        assert!(agent_swap("momentum", "0", "", "", "").is_err());
        assert!(prompt_replace(" ").is_err());
        assert_eq!(wire(prompt_replace("Hold."))["system_prompt"], "Hold.");
    }

    #[test]
    fn every_kind_offers_its_own_ops_and_custom_json() {
        for k in [Kind::Social, Kind::Trading, Kind::Abm] {
            assert_eq!(op_kinds(k).last(), Some(&"custom"));
        }
        assert!(op_kinds(Kind::Trading).contains(&"case_data_inject"));
        assert!(!op_kinds(Kind::Abm).contains(&"public_broadcast"));
    }
}
