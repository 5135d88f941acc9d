//! Checks an [`AbmModel`] beyond its JSON shape: names, references, types, and the pitfalls
//! LLM-written models are known to fall into. Every finding names the JSON path it is about.
//!
//! Errors (the model cannot be run as written):
//! `source-name-format`, `duplicate-source-name`, `bad-identifier`, `agent-type-name`,
//! `unresolved-reference`, `unknown-function`, `type-mismatch`, `reserved-name`.
//!
//! Warnings (it runs, but probably not as meant; the runner's fallbacks are named):
//! `mesa2-idiom` (Mesa-2 code under a Mesa-3 target), `undeclared-variable` (code uses a variable
//! or attribute no one declares), `no-initial-seeding` (every agent starts alike, so a spreading
//! process never starts), `not-in-initialization`, `unscheduled`, `duplicate-order`,
//! `argument-count`, `function-name`, `execution-mode`, `unseeded-random`, `boundary-conditions`,
//! `not-runnable`.
//!
//! Code strings are scanned lexically (strings and comments blanked first), not parsed: the
//! checks look for dotted names such as `globalVariable.x`, `self.x`, `model.x` and known idioms.

use std::collections::{BTreeSet, HashMap, HashSet};

use serde::Serialize;
use serde_json::Value;

use super::model::{
    AbmDocument, AbmModel, AgentType, FunctionCall, FunctionInput, InitializationType, Maybe, Scalar, ScheduleType,
    SourceRef, TopologyType, ValueOrCall, VarType, is_identifier,
};

mod python;

pub(crate) use python::blank_strings_and_comments;
use python::*;
pub use simtree_shared::abm::{Issue, Severity};

/// All findings for a model.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    pub(crate) issues: Vec<Issue>,
}

impl Report {
    pub(crate) fn errors(&self) -> impl Iterator<Item = &Issue> {
        self.issues.iter().filter(|i| i.severity == Severity::Error)
    }

    pub(crate) fn warnings(&self) -> impl Iterator<Item = &Issue> {
        self.issues.iter().filter(|i| i.severity == Severity::Warning)
    }

    /// No errors (warnings allowed).
    pub(crate) fn is_ok(&self) -> bool {
        self.errors().next().is_none()
    }

    /// The findings with `prefix` put before every path (e.g. `model.` inside an envelope).
    pub(crate) fn with_prefix(mut self, prefix: &str) -> Self {
        for i in &mut self.issues {
            i.path = format!("{prefix}{}", i.path);
        }
        self
    }

    /// Errors as one line each (for [`super::AbmError::Invalid`]).
    pub(crate) fn error_lines(&self) -> Vec<String> {
        self.errors().map(ToString::to_string).collect()
    }
}

/// Validates the model of a document, with paths relative to the document (so `model.…` inside
/// an envelope). A failure envelope has nothing to check.
pub(crate) fn validate_document(doc: &AbmDocument) -> Report {
    match doc.model() {
        Some(m) => validate(m).with_prefix(doc.model_path_prefix()),
        None => Report::default(),
    }
}

/// Validates a model; paths are relative to the model object.
pub fn validate(model: &AbmModel) -> Report {
    let mut v = Validator::new(model);
    v.declarations();
    v.values();
    v.scheduler();
    v.termination_and_analytics();
    v.code();
    v.pitfalls();
    let mut issues = v.issues;
    issues.sort_by_key(|i| i.severity);
    Report { issues }
}

/// Mesa's own attributes and methods on an agent (Mesa 3, plus what the runner adds).
const AGENT_BUILTINS: &[&str] =
    &["model", "pos", "unique_id", "random", "rng", "remove", "agent_type", "cell", "step", "advance"];
/// Attribute names an agent type may not declare (the runner refuses them).
const RESERVED_AGENT_ATTRIBUTES: &[&str] = &["model", "unique_id", "random", "rng", "agent_type", "remove"];
/// What model code may use on the model object (Mesa 3 API plus the runner's additions).
const MODEL_BUILTINS: &[&str] = &[
    "steps",
    "agents",
    "agents_by_type",
    "agent_types",
    "random",
    "rng",
    "grid",
    "space",
    "G",
    "network",
    "schedule",
    "running",
    "time",
    "globalVariable",
    "environment",
    "register_agent",
    "deregister_agent",
    "remove_all_agents",
    "reset_randomizer",
    "reset_rng",
    "run_model",
    "step",
    "next_id",
    "create_agent",
    "agents_of",
    "terminated",
];
/// Parameter names the runner fills with a context object when a call lacks arguments.
const CONTEXT_PARAMS: &[&str] = &["self", "agent", "a", "model", "m", "env", "environment", "world", "agents"];

/// Where a value sits, for type checks and for resolving behaviors in calls.
#[derive(Clone, Copy)]
enum Owner<'a> {
    Model,
    Environment,
    Agent(&'a str),
}

/// The code of all the behaviors of an agent type, one after another.
fn behavior_code(t: &AgentType) -> String {
    let code: Vec<&str> = t.agent_behaviors.items().iter().map(|b| b.code.as_str()).collect();
    code.join("\n")
}

struct TypeInfo<'a> {
    path: String,
    def: &'a AgentType,
    attributes: HashMap<&'a str, (String, VarType)>,
    behaviors: HashMap<&'a str, String>,
}

struct Validator<'a> {
    m: &'a AbmModel,
    issues: Vec<Issue>,
    /// sourceName → path of its declaration.
    declared: HashMap<&'a str, String>,
    globals: HashMap<&'a str, (String, VarType)>,
    functions: HashMap<&'a str, (String, Option<&'a [FunctionInput]>)>,
    env_attrs: HashMap<&'a str, (String, VarType)>,
    env_behaviors: HashMap<&'a str, String>,
    types: Vec<(String, TypeInfo<'a>)>,
}

impl<'a> Validator<'a> {
    fn new(m: &'a AbmModel) -> Self {
        Validator {
            m,
            issues: Vec::new(),
            declared: HashMap::new(),
            globals: HashMap::new(),
            functions: HashMap::new(),
            env_attrs: HashMap::new(),
            env_behaviors: HashMap::new(),
            types: Vec::new(),
        }
    }

    /// The agent types as (name, path, definition), a list the checks can hold while they
    /// report.
    fn type_list(&self) -> Vec<(String, String, &'a AgentType)> {
        self.types.iter().map(|(n, t)| (n.clone(), t.path.clone(), t.def)).collect()
    }

    fn error(&mut self, code: &'static str, path: impl Into<String>, message: impl Into<String>) {
        self.push(Severity::Error, code, path.into(), message.into());
    }

    fn warn(&mut self, code: &'static str, path: impl Into<String>, message: impl Into<String>) {
        self.push(Severity::Warning, code, path.into(), message.into());
    }

    fn push(&mut self, severity: Severity, code: &'static str, path: String, message: String) {
        let issue = Issue { severity, code: code.into(), path, message };
        if !self.issues.contains(&issue) {
            self.issues.push(issue);
        }
    }

    fn agent_type(&self, name: &str) -> Option<&TypeInfo<'a>> {
        self.types.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }

    // -- declarations: names, sourceNames, agent types --

    /// The declaration at `path` of `name`, whose sourceName must be `kind` then the name.
    fn declare(&mut self, source_name: &'a str, kind: &str, path: &str, name: &str) {
        let expected = format!("{kind}{name}");
        if !is_identifier(name) {
            self.error(
                "bad-identifier",
                format!("{path}.name"),
                format!("'{name}' is not a valid identifier (letters, digits, underscore)"),
            );
        }
        if source_name != expected {
            self.error(
                "source-name-format",
                format!("{path}.sourceName"),
                format!("is '{source_name}', expected '{expected}'"),
            );
        }
        if let Some(first) = self.declared.get(source_name) {
            let first = first.clone();
            self.error(
                "duplicate-source-name",
                format!("{path}.sourceName"),
                format!("'{source_name}' is already declared at {first}"),
            );
        } else {
            self.declared.insert(source_name, path.to_owned());
        }
    }

    fn declarations(&mut self) {
        let m = self.m;
        for (i, v) in m.global_variables.items().iter().enumerate() {
            let path = format!("globalVariables[{i}]");
            self.declare(&v.source_name, "globalVariable.", &path, &v.name);
            self.globals.entry(&v.name).or_insert((path.clone(), v.var_type));
        }
        for (i, f) in m.global_functions.items().iter().enumerate() {
            let path = format!("globalFunctions[{i}]");
            self.declare(&f.source_name, "globalFunction.", &path, &f.name);
            self.functions.entry(&f.name).or_insert((path.clone(), f.function_inputs.get().map(Vec::as_slice)));
        }
        for (i, a) in m.environment.environment_attributes.items().iter().enumerate() {
            let path = format!("environment.environmentAttributes[{i}]");
            self.declare(&a.source_name, "environment.environmentAttribute.", &path, &a.name);
            self.env_attrs.entry(&a.name).or_insert((path.clone(), a.var_type));
        }
        for (i, b) in m.environment.environment_behaviors.items().iter().enumerate() {
            let path = format!("environment.environmentBehaviors[{i}]");
            self.declare(&b.source_name, "environment.environmentBehavior.", &path, &b.name);
            self.env_behaviors.entry(&b.name).or_insert(path.clone());
        }
        for ((g, i), t) in m.agent_types() {
            let path = format!("agents[{g}][{i}]");
            let Some(name) = t.name() else {
                self.error(
                    "agent-type-name",
                    &path,
                    "the agent type has no attribute or behavior whose sourceName names it \
                     (agent.<Type>.…); the format has no other place for its name",
                );
                continue;
            };
            if let Some((_, other)) = self.types.iter().find(|(n, _)| *n == name) {
                let other = other.path.clone();
                self.error("agent-type-name", &path, format!("agent type '{name}' is already defined at {other}"));
                continue;
            }
            let mut info =
                TypeInfo { path: path.clone(), def: t, attributes: HashMap::new(), behaviors: HashMap::new() };
            for (k, a) in t.agent_attributes.iter().enumerate() {
                let apath = format!("{path}.agentAttributes[{k}]");
                self.declare(&a.source_name, &format!("agent.{name}.agentAttribute."), &apath, &a.name);
                if RESERVED_AGENT_ATTRIBUTES.contains(&a.name.as_str()) {
                    self.error(
                        "reserved-name",
                        format!("{apath}.name"),
                        format!("'{}' is Mesa's own agent attribute; choose another name", a.name),
                    );
                } else if a.name == "pos" {
                    self.warn(
                        "reserved-name",
                        format!("{apath}.name"),
                        "'pos' belongs to Mesa; the runner uses its initial value only to place the agent",
                    );
                }
                info.attributes.entry(&a.name).or_insert((apath.clone(), a.var_type));
            }
            for (k, b) in t.agent_behaviors.items().iter().enumerate() {
                let bpath = format!("{path}.agentBehaviors[{k}]");
                self.declare(&b.source_name, &format!("agent.{name}.agentBehavior."), &bpath, &b.name);
                info.behaviors.entry(&b.name).or_insert(bpath);
            }
            self.types.push((name, info));
        }
    }

    // -- references --

    /// Resolves a sourceName to its declaration: (path, type, kind). `None` if undeclared.
    fn resolve(&self, r: &SourceRef) -> Option<(String, Option<VarType>)> {
        match r {
            SourceRef::GlobalVariable(n) => self.globals.get(n.as_str()).map(|(p, t)| (p.clone(), Some(*t))),
            SourceRef::EnvironmentAttribute(n) => self.env_attrs.get(n.as_str()).map(|(p, t)| (p.clone(), Some(*t))),
            SourceRef::AgentAttribute { agent, name } => {
                self.agent_type(agent)?.attributes.get(name.as_str()).map(|(p, t)| (p.clone(), Some(*t)))
            }
            SourceRef::GlobalFunction(n) => self.functions.get(n.as_str()).map(|(p, _)| (p.clone(), None)),
            SourceRef::EnvironmentBehavior(n) => self.env_behaviors.get(n.as_str()).map(|p| (p.clone(), None)),
            SourceRef::AgentBehavior { agent, name } => {
                self.agent_type(agent)?.behaviors.get(name.as_str()).map(|p| (p.clone(), None))
            }
            SourceRef::InitialCount { agent } => {
                self.agent_type(agent).map(|t| (format!("{}.initialCount", t.path), Some(VarType::Integer)))
            }
        }
    }

    /// Checks a sourceName field: parseable and declared. Returns the parsed reference when
    /// both hold.
    fn reference(&mut self, text: &str, path: &str) -> Option<SourceRef> {
        let Some(r) = SourceRef::parse(text) else {
            self.error(
                "unresolved-reference",
                path,
                format!("'{text}' is not a sourceName (globalVariable.x, agent.T.agentAttribute.x, …)"),
            );
            return None;
        };
        if self.resolve(&r).is_none() {
            let hint = match &r {
                SourceRef::AgentAttribute { agent, .. }
                | SourceRef::AgentBehavior { agent, .. }
                | SourceRef::InitialCount { agent }
                    if self.agent_type(agent).is_none() =>
                {
                    format!(" (there is no agent type '{agent}')")
                }
                _ => String::new(),
            };
            self.error("unresolved-reference", path, format!("{} '{text}' is not declared{hint}", r.kind()));
            return None;
        }
        Some(r)
    }

    // -- values --

    fn values(&mut self) {
        let m = self.m;
        for (i, v) in m.global_variables.items().iter().enumerate() {
            let path = format!("globalVariables[{i}].initialValue");
            self.value(&v.initial_value, Some(v.var_type), Owner::Model, &path);
        }
        for (i, v) in m.environment.environment_attributes.items().iter().enumerate() {
            let path = format!("environment.environmentAttributes[{i}].initialValue");
            self.value(&v.initial_value, Some(v.var_type), Owner::Environment, &path);
        }
        let types = self.type_list();
        for (name, path, t) in &types {
            for (k, a) in t.agent_attributes.iter().enumerate() {
                let p = format!("{path}.agentAttributes[{k}].initialValue");
                self.value(&a.initial_value, Some(a.var_type), Owner::Agent(name), &p);
            }
            let p = format!("{path}.initialCount");
            self.value(&t.initial_count, Some(VarType::Integer), Owner::Model, &p);
            if let ValueOrCall::Literal(Scalar::Number(n)) = &t.initial_count
                && n.as_u64().is_none()
            {
                self.error("type-mismatch", &p, format!("must be a whole number ≥ 0, not {n}"));
            }
        }
    }

    /// Checks one value against its declared type and resolves its references and calls.
    fn value(&mut self, v: &ValueOrCall, ty: Option<VarType>, owner: Owner<'_>, path: &str) {
        match v {
            ValueOrCall::Literal(s) => self.literal(s, ty, path),
            ValueOrCall::Call(c) => self.call(c, owner, path),
        }
    }

    fn literal(&mut self, s: &Scalar, ty: Option<VarType>, path: &str) {
        if let Scalar::String(text) = s {
            if SourceRef::looks_like(text) {
                let Some(r) = self.reference(text, path) else {
                    return;
                };
                if matches!(
                    r,
                    SourceRef::GlobalFunction(_) | SourceRef::EnvironmentBehavior(_) | SourceRef::AgentBehavior { .. }
                ) {
                    self.error(
                        "type-mismatch",
                        path,
                        format!("'{text}' is a function; call it with {{\"function\": …, \"args\": […]}}"),
                    );
                    return;
                }
                if let (Some(want), Some((_, Some(got)))) = (ty, self.resolve(&r))
                    && !compatible(want, got)
                {
                    self.warn(
                        "type-mismatch",
                        path,
                        format!("'{text}' is declared {got} but this value is declared {want}"),
                    );
                }
                return;
            }
            if text.starts_with("self.") || text.starts_with("model.") {
                // A framework reference, evaluated by the runner.
                return;
            }
        }
        let Some(ty) = ty else { return };
        let json = s.to_json();
        let fits = ty.admits(&json)
            || matches!((ty, s), (VarType::Array | VarType::Object, Scalar::String(t))
                if serde_json::from_str::<Value>(t).is_ok_and(|v| ty.admits(&v)));
        if !fits {
            self.error("type-mismatch", path, format!("{} {s} does not fit the declared type {ty}", s.kind()));
        }
    }

    fn call(&mut self, c: &FunctionCall, owner: Owner<'_>, path: &str) {
        let fpath = format!("{path}.function");
        let name = c.function.as_str();
        let inputs = match SourceRef::parse(name) {
            Some(SourceRef::GlobalFunction(n)) => self.functions.get(n.as_str()).map(|f| f.1),
            Some(SourceRef::EnvironmentBehavior(n)) => self.env_behaviors.get(n.as_str()).map(|_| None),
            Some(SourceRef::AgentBehavior { agent, name }) => {
                self.agent_type(&agent).and_then(|t| t.behaviors.get(name.as_str())).map(|_| None)
            }
            Some(_) => {
                self.error("type-mismatch", &fpath, format!("'{name}' names a variable, not a function"));
                return;
            }
            None => self.functions.get(name).map(|f| f.1).or_else(|| {
                let own = match owner {
                    Owner::Environment => self.env_behaviors.contains_key(name),
                    Owner::Agent(t) => self.agent_type(t).is_some_and(|t| t.behaviors.contains_key(name)),
                    Owner::Model => false,
                };
                own.then_some(None)
            }),
        };
        let Some(inputs) = inputs else {
            let fallback = name
                .strip_prefix("get")
                .filter(|rest| !rest.is_empty())
                .map(|rest| {
                    let mut c = rest.chars();
                    let first = c.next().map(|f| f.to_ascii_lowercase()).unwrap_or_default();
                    format!("{first}{}", c.as_str())
                })
                .filter(|var| self.globals.contains_key(var.as_str()));
            let note = match fallback {
                Some(var) => format!(
                    "; the runner would fall back to globalVariable.{var}, but say so: use \"globalVariable.{var}\""
                ),
                None => String::new(),
            };
            self.error(
                "unknown-function",
                &fpath,
                format!("function '{name}' is not defined in globalFunctions{note}"),
            );
            return;
        };
        for (k, a) in c.args.iter().enumerate() {
            self.literal(a, None, &format!("{path}.args[{k}]"));
        }
        if let Some(inputs) = inputs {
            let required = inputs.iter().filter(|i| !i.optional).count();
            let takes_context = inputs.first().is_some_and(|i| CONTEXT_PARAMS.contains(&i.name.as_str()));
            let given = c.args.len() + usize::from(takes_context && c.args.len() < required);
            if given > inputs.len() || given < required {
                self.warn(
                    "argument-count",
                    format!("{path}.args"),
                    format!(
                        "{} argument(s) given, '{name}' declares {} ({required} required)",
                        c.args.len(),
                        inputs.len()
                    ),
                );
            }
        }
    }

    // -- scheduler --

    fn scheduler(&mut self) {
        let m = self.m;
        let init = &m.scheduler.initialization.initialization_order;
        let mut orders = BTreeSet::new();
        let mut counted = HashSet::new();
        for (i, item) in init.iter().enumerate() {
            let path = format!("scheduler.initialization.initializationOrder[{i}]");
            self.order_number(&item.order_in_initialization, &format!("{path}.orderInInitialization"), &mut orders);
            let Some(r) = self.reference(&item.source_name, &format!("{path}.sourceName")) else {
                continue;
            };
            let expected = match &r {
                SourceRef::GlobalVariable(_) => Some(InitializationType::GlobalVariable),
                SourceRef::EnvironmentAttribute(_) => Some(InitializationType::EnvironmentAttribute),
                SourceRef::AgentAttribute { .. } => Some(InitializationType::AgentAttribute),
                SourceRef::GlobalFunction(_) => Some(InitializationType::GlobalFunction),
                SourceRef::InitialCount { agent } => {
                    counted.insert(agent.clone());
                    Some(InitializationType::InitialCount)
                }
                _ => None,
            };
            let refused = format!("a {} cannot be an initialization step", r.kind());
            self.step_type(&path, expected, &item.item_type, &item.source_name, &r, refused);
        }
        for (name, t) in &self.types {
            if !counted.contains(name) {
                let path = format!("{}.initialCount", t.path);
                self.issues.push(Issue {
                    severity: Severity::Warning,
                    code: "not-in-initialization".into(),
                    path,
                    message: format!(
                        "agent.{name}.initialCount is not in scheduler.initialization; the runner creates these agents after the listed steps"
                    ),
                });
            }
        }
        let schedule = &m.scheduler.schedule.schedule_order;
        let mut orders = BTreeSet::new();
        for (i, item) in schedule.iter().enumerate() {
            let path = format!("scheduler.schedule.scheduleOrder[{i}]");
            self.order_number(&item.order_in_schedule, &format!("{path}.orderInSchedule"), &mut orders);
            let Some(r) = self.reference(&item.source_name, &format!("{path}.sourceName")) else {
                continue;
            };
            let expected = match &r {
                SourceRef::AgentBehavior { .. } => Some(ScheduleType::AgentBehavior),
                SourceRef::EnvironmentBehavior(_) => Some(ScheduleType::EnvironmentBehavior),
                SourceRef::GlobalFunction(_) => Some(ScheduleType::GlobalFunction),
                _ => None,
            };
            let refused = format!("a {} cannot be scheduled; schedule behaviors and functions", r.kind());
            self.step_type(&path, expected, &item.item_type, &item.source_name, &r, refused);
        }
    }

    /// A scheduler step's `type` against what its `sourceName` is: `expected` is the type that
    /// source allows (`None`: it cannot be such a step, `refused` says why).
    fn step_type<T: PartialEq + Serialize>(
        &mut self,
        path: &str,
        expected: Option<T>,
        given: &T,
        source_name: &str,
        r: &SourceRef,
        refused: String,
    ) {
        match expected {
            None => self.error("type-mismatch", format!("{path}.sourceName"), refused),
            Some(e) if e != *given => self.error(
                "type-mismatch",
                format!("{path}.type"),
                format!("is {} but '{source_name}' is a {}", json_name(given), r.kind()),
            ),
            _ => {}
        }
    }

    fn order_number(&mut self, n: &serde_json::Number, path: &str, seen: &mut BTreeSet<u64>) {
        match n.as_u64().filter(|&k| k >= 1) {
            None => self.error("type-mismatch", path, format!("must be a whole number ≥ 1, not {n}")),
            Some(k) if !seen.insert(k) => {
                self.warn("duplicate-order", path, format!("position {k} is used twice; ties run in list order"))
            }
            _ => {}
        }
    }

    // -- termination and analytics --

    fn termination_and_analytics(&mut self) {
        let m = self.m;
        let tc = &m.termination_criteria;
        if tc.max_steps.as_u64().is_none_or(|n| n == 0) {
            self.error(
                "type-mismatch",
                "terminationCriteria.maxSteps",
                format!("must be a whole number ≥ 1, not {}", tc.max_steps),
            );
        }
        for (i, rule) in tc.termination_rules.items().iter().enumerate() {
            let path = format!("terminationCriteria.terminationRules[{i}]");
            let declared = self.reference(&rule.source_name, &format!("{path}.sourceName")).and_then(|r| match r {
                SourceRef::GlobalVariable(_)
                | SourceRef::EnvironmentAttribute(_)
                | SourceRef::AgentAttribute { .. } => self.resolve(&r).and_then(|x| x.1),
                other => {
                    self.error(
                        "type-mismatch",
                        format!("{path}.sourceName"),
                        format!("a {} cannot be watched; name a variable or attribute", other.kind()),
                    );
                    None
                }
            });
            let rule_type = match rule.value_type.as_str() {
                "integer" => Some(VarType::Integer),
                "float" => Some(VarType::Float),
                "number" => Some(VarType::Number),
                "string" => Some(VarType::String),
                "boolean" => Some(VarType::Boolean),
                "array" => Some(VarType::Array),
                "object" => Some(VarType::Object),
                other => {
                    self.warn(
                        "type-mismatch",
                        format!("{path}.type"),
                        format!("'{other}' is not one of integer, float, number, string, boolean, array, object"),
                    );
                    None
                }
            };
            if let (Some(d), Some(t)) = (declared, rule_type)
                && !compatible(d, t)
            {
                self.error(
                    "type-mismatch",
                    format!("{path}.type"),
                    format!("is {t} but '{}' is declared {d}", rule.source_name),
                );
            }
            self.value(&rule.value, rule_type.or(declared), Owner::Model, &format!("{path}.value"));
        }
        for (i, tv) in m.tracked_variables().iter().enumerate() {
            let path = format!("dataAnalytics.trackedVariables[{i}].sourceName");
            if let Some(r) = self.reference(&tv.source_name, &path) {
                match r {
                    SourceRef::GlobalVariable(_)
                    | SourceRef::EnvironmentAttribute(_)
                    | SourceRef::AgentAttribute { .. } => {}
                    other => self.error(
                        "type-mismatch",
                        &path,
                        format!("a {} cannot be tracked; name a variable or attribute", other.kind()),
                    ),
                }
            }
        }
    }

    // -- code --

    fn code(&mut self) {
        let m = self.m;
        let mesa3 = self.mesa3_target();
        let grid = m.environment.topology.topology_type == TopologyType::Grid;
        // (path, code, function name, is an environment behavior)
        let mut blocks: Vec<(String, &'a str, &'a str, bool)> = Vec::new();
        for (i, f) in m.global_functions.items().iter().enumerate() {
            blocks.push((format!("globalFunctions[{i}].code"), &f.code, &f.name, false));
        }
        for (i, b) in m.environment.environment_behaviors.items().iter().enumerate() {
            blocks.push((format!("environment.environmentBehaviors[{i}].code"), &b.code, &b.name, true));
        }
        let types = self.type_list();
        for (_, path, t) in &types {
            for (k, b) in t.agent_behaviors.items().iter().enumerate() {
                blocks.push((format!("{path}.agentBehaviors[{k}].code"), &b.code, &b.name, false));
            }
        }
        let all_code: String = blocks.iter().map(|b| b.1).collect::<Vec<_>>().join("\n");
        let all_clean = blank_strings_and_comments(&all_code);
        let assigned_model: HashSet<String> = dotted(&all_clean, "model.")
            .into_iter()
            .filter(|(off, ident)| is_assignment(&all_clean, off + "model.".len() + ident.len()))
            .map(|(_, i)| i)
            .collect();
        let assigned_env: HashSet<String> = dotted(&all_clean, "environment.")
            .into_iter()
            .filter(|(off, ident)| is_assignment(&all_clean, off + "environment.".len() + ident.len()))
            .map(|(_, i)| i)
            .collect();
        for (path, code, fname, is_env) in &blocks {
            let clean = blank_strings_and_comments(code);
            if !defines_function(&clean, fname) {
                self.warn(
                    "function-name",
                    path,
                    format!("the code does not define '{fname}' (def {fname}(…)); the runner uses the function it does define"),
                );
            }
            let unknown = |prefix: &str, known: &dyn Fn(&str) -> bool| unknown_refs(code, &clean, prefix, known);
            let model =
                |i: &str| MODEL_BUILTINS.contains(&i) || self.globals.contains_key(i) || assigned_model.contains(i);
            let environment =
                |i: &str| i == "model" || self.env_attrs.contains_key(i) || self.env_behaviors.contains_key(i);
            let assigned = if *is_env { assigned_self(&clean) } else { HashSet::new() };
            let refs = [
                ("globalVariable.", unknown("globalVariable.", &|i| self.globals.contains_key(i))),
                ("globalFunction.", unknown("globalFunction.", &|i| self.functions.contains_key(i))),
                ("model.", unknown("model.", &model)),
                ("environment.", unknown("environment.", &|i| environment(i) || assigned_env.contains(i))),
                (
                    "self.",
                    if *is_env { unknown("self.", &|i| environment(i) || assigned.contains(i)) } else { Vec::new() },
                ),
            ];
            for (prefix, found) in refs {
                for (line, ident) in found {
                    let what = format!("line {line}: {prefix}{ident}");
                    match prefix {
                        "globalVariable." => {
                            self.warn("undeclared-variable", path, format!("{what} is not declared in globalVariables"))
                        }
                        "globalFunction." => {
                            self.error("unknown-function", path, format!("{what} is not defined in globalFunctions"))
                        }
                        "model." => self.warn(
                            "undeclared-variable",
                            path,
                            format!(
                                "{what} is neither Mesa's nor declared (a global variable is globalVariable.{ident})"
                            ),
                        ),
                        _ => self.warn(
                            "undeclared-variable",
                            path,
                            format!("{what} is not an environment attribute or behavior"),
                        ),
                    }
                }
            }
            if find_word(&clean, "np.random.").is_some() || find_word(&clean, "numpy.random.").is_some() {
                self.warn(
                    "unseeded-random",
                    path,
                    "numpy's global random generator is neither seeded per model nor saved in snapshots; use self.random, model.random or model.rng",
                );
            }
            if mesa3 {
                self.mesa2_idioms(path, code, &clean, grid);
            }
        }
        // Agent behaviors: self.<x> must be an attribute or behavior of their type.
        for (name, tpath, t) in &types {
            let info = self.agent_type(name).expect("listed above");
            let attrs: HashSet<&str> = info.attributes.keys().copied().collect();
            let behaviors: HashSet<&str> = info.behaviors.keys().copied().collect();
            let type_code = behavior_code(t);
            let assigned = assigned_self(&blank_strings_and_comments(&type_code));
            let mut found = Vec::new();
            let known = |i: &str| {
                attrs.contains(i) || behaviors.contains(i) || AGENT_BUILTINS.contains(&i) || assigned.contains(i)
            };
            for (k, b) in t.agent_behaviors.items().iter().enumerate() {
                let clean = blank_strings_and_comments(&b.code);
                for (line, ident) in unknown_refs(&b.code, &clean, "self.", &known) {
                    found.push((
                        format!("{tpath}.agentBehaviors[{k}].code"),
                        format!("line {line}: self.{ident} is not an attribute or behavior of {name}"),
                    ));
                }
            }
            for (p, msg) in found {
                self.warn("undeclared-variable", p, msg);
            }
        }
    }

    fn mesa3_target(&mut self) -> bool {
        let m = self.m;
        if !m.coding_language.eq_ignore_ascii_case("python") {
            self.warn(
                "not-runnable",
                "codingLanguage",
                format!("simtree runs python models on Mesa; '{}' can be validated but not run", m.coding_language),
            );
            return false;
        }
        match m.abm_library.get() {
            Some(lib) if !lib.name.eq_ignore_ascii_case("mesa") => {
                self.warn(
                    "not-runnable",
                    "abmLibrary.name",
                    format!("simtree runs models on Mesa; '{}' code can be validated but not run", lib.name),
                );
                false
            }
            Some(lib) => match lib.version.get().map(String::as_str) {
                Some(v) if v.starts_with('1') || v.starts_with('2') => {
                    self.warn(
                        "mesa2-idiom",
                        "abmLibrary.version",
                        format!("declares Mesa {v}; simtree runs Mesa 3.3 with a shim for the common Mesa-2 idioms"),
                    );
                    false
                }
                _ => true,
            },
            None => true,
        }
    }

    fn mesa2_idioms(&mut self, path: &str, code: &str, clean: &str, grid: bool) {
        const SHIMMED: &[(&str, &str)] = &[
            (
                "schedule.time",
                "Mesa 3 has no model.schedule; use model.steps (the runner's shim keeps Mesa 2's numbering)",
            ),
            ("schedule.steps", "Mesa 3 has no model.schedule; use model.steps (shimmed)"),
            ("schedule.agents", "Mesa 3 has no model.schedule; use model.agents (shimmed)"),
            ("schedule.get_agent_count", "Mesa 3 has no model.schedule; use len(model.agents) (shimmed)"),
            ("schedule.add(", "Mesa 3 registers agents when they are created; schedule.add is a no-op in the shim"),
            ("schedule.remove(", "Mesa 3 removes agents with agent.remove() (shimmed)"),
            ("mesa.time", "mesa.time was removed in Mesa 3.1; the runner provides a stand-in"),
            (
                "RandomActivation",
                "schedulers were removed in Mesa 3.1; use model.agents.shuffle_do (stand-in provided)",
            ),
            ("SimultaneousActivation", "schedulers were removed in Mesa 3.1 (stand-in provided)"),
            ("StagedActivation", "schedulers were removed in Mesa 3.1 (stand-in provided)"),
            ("next_id()", "Mesa 3 assigns unique_id itself; model.next_id() is shimmed"),
            ("model.time", "Mesa 3.3 has no model.time; use model.steps (shimmed)"),
        ];
        const UNSHIMMED: &[(&str, &str)] = &[
            (
                "__init__(unique_id",
                "Mesa 3 agents are created as Agent(model); the unique_id argument is gone (not shimmed)",
            ),
            (
                "(unique_id, model",
                "Mesa 3 agents are created as Agent(model); the unique_id argument is gone (not shimmed)",
            ),
        ];
        for (pattern, advice) in SHIMMED.iter().chain(UNSHIMMED) {
            if let Some(off) = find_word(clean, pattern) {
                self.warn(
                    "mesa2-idiom",
                    path,
                    format!("line {}: '{pattern}' is Mesa 2 style: {advice}", line_of(code, off)),
                );
            }
        }
        if grid {
            for call in [".get_neighbors(", ".get_neighborhood(", ".iter_neighbors(", ".iter_neighborhood("] {
                let mut from = 0;
                while let Some(rel) = clean[from..].find(call) {
                    let open = from + rel + call.len();
                    let args = call_args(clean, open);
                    let positional = args.split(',').filter(|a| !a.contains('=') && !a.trim().is_empty()).count();
                    if !args.contains("moore") && positional < 2 {
                        self.warn(
                            "mesa2-idiom",
                            path,
                            format!(
                                "line {}: {}…) without `moore`: Mesa 3 grids require it (the runner defaults it to True, i.e. Moore)",
                                line_of(code, from + rel),
                                &call[1..]
                            ),
                        );
                    }
                    from = open;
                }
            }
        }
    }

    // -- pitfalls that need the whole model --

    fn pitfalls(&mut self) {
        let m = self.m;
        let topo = &m.environment.topology;
        match (topo.topology_type, &topo.boundary_conditions) {
            (TopologyType::Grid, Maybe::Absent | Maybe::Null) => self.warn(
                "boundary-conditions",
                "environment.topology.boundaryConditions",
                "a grid without boundaryConditions; the runner uses fixed edges",
            ),
            (TopologyType::None | TopologyType::Network, Maybe::Set(_)) => self.warn(
                "boundary-conditions",
                "environment.topology.boundaryConditions",
                "boundaryConditions only apply to grids; ignored",
            ),
            _ => {}
        }
        // Everything that runs: scheduled, initialization functions, or called from code/values.
        let all_code: String = code_strings(m).collect::<Vec<_>>().join("\n");
        let clean = blank_strings_and_comments(&all_code);
        let scheduled: HashSet<&str> = m
            .scheduler
            .schedule
            .schedule_order
            .iter()
            .map(|i| i.source_name.as_str())
            .chain(m.scheduler.initialization.initialization_order.iter().map(|i| i.source_name.as_str()))
            .collect();
        let values_json = serde_json::to_string(m).unwrap_or_default();
        let called = |name: &str| calls(&clean, name) || values_json.contains(&format!("\"function\":\"{name}\""));
        let mut unscheduled = Vec::new();
        for (name, t) in &self.types {
            for (k, b) in t.def.agent_behaviors.items().iter().enumerate() {
                let path = format!("{}.agentBehaviors[{k}]", t.path);
                if !scheduled.contains(b.source_name.as_str()) && !called(&b.name) {
                    unscheduled.push((
                        format!("{path}.sourceName"),
                        format!("{name}.{} never runs: it is not in the schedule and no code calls it", b.name),
                    ));
                }
                if b.execution_mode != super::model::ExecutionMode::PerAgent {
                    unscheduled.push((
                        format!("{path}.executionMode"),
                        "agent behaviors are called once per agent of their type; the mode is ignored".to_owned(),
                    ));
                }
            }
        }
        for (path, msg) in unscheduled {
            let code = if path.ends_with("executionMode") { "execution-mode" } else { "unscheduled" };
            self.warn(code, path, msg);
        }
        for (i, b) in m.environment.environment_behaviors.items().iter().enumerate() {
            if !scheduled.contains(b.source_name.as_str()) && !called(&b.name) {
                self.warn(
                    "unscheduled",
                    format!("environment.environmentBehaviors[{i}].sourceName"),
                    format!("{} never runs: it is not in the schedule and no code calls it", b.name),
                );
            }
        }
        for (i, f) in m.global_functions.items().iter().enumerate() {
            if !scheduled.contains(f.source_name.as_str()) && !called(&f.name) {
                self.warn(
                    "unscheduled",
                    format!("globalFunctions[{i}].sourceName"),
                    format!("{} is never called, scheduled or used in initialization", f.name),
                );
            }
        }
        self.no_initial_seeding();
    }

    /// Every agent starts in the same state, no set-up code changes that, and the behaviors
    /// react only to agents in *another* state: nothing can ever happen.
    fn no_initial_seeding(&mut self) {
        let m = self.m;
        let init = &m.scheduler.initialization.initialization_order;
        let seeding_step = init
            .iter()
            .any(|i| matches!(i.item_type, InitializationType::GlobalFunction | InitializationType::AgentAttribute));
        if seeding_step {
            return;
        }
        let mut found = Vec::new();
        for (name, t) in &self.types {
            let code = behavior_code(t.def);
            for (k, a) in t.def.agent_attributes.iter().enumerate() {
                let ValueOrCall::Literal(Scalar::String(start)) = &a.initial_value else {
                    continue;
                };
                if SourceRef::looks_like(start) {
                    continue;
                }
                let waits_for: Vec<String> =
                    compared_literals(&code, &a.name).into_iter().filter(|lit| lit != start).collect();
                if !waits_for.is_empty() {
                    found.push((
                        format!("{}.agentAttributes[{k}].initialValue", t.path),
                        format!(
                            "every {name} starts with {} = '{start}' and no initialization step (a global function or an agent attribute) changes that, yet the behaviors look for {}: the process can never start; add a seeding function to scheduler.initialization",
                            a.name,
                            waits_for.iter().map(|w| format!("'{w}'")).collect::<Vec<_>>().join(", ")
                        ),
                    ));
                }
            }
        }
        for (p, msg) in found {
            self.warn("no-initial-seeding", p, msg);
        }
    }
}

/// Whether a value declared `got` may stand where `want` is declared.
/// Each `prefix<name>` in `clean` (the code with strings and comments blanked) whose name
/// `known` does not accept, as (line in `code`, name).
fn unknown_refs(code: &str, clean: &str, prefix: &str, known: &dyn Fn(&str) -> bool) -> Vec<(usize, String)> {
    dotted(clean, prefix)
        .into_iter()
        .filter(|(_, ident)| !known(ident))
        .map(|(off, ident)| (line_of(code, off), ident))
        .collect()
}

fn compatible(want: VarType, got: VarType) -> bool {
    use VarType::*;
    let numeric = |t| matches!(t, Integer | Float | Number);
    want == got || (numeric(want) && numeric(got))
}

fn json_name<T: Serialize>(v: &T) -> String {
    serde_json::to_value(v).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
}

fn code_strings(m: &AbmModel) -> impl Iterator<Item = &str> {
    let globals = m.global_functions.items().iter().map(|f| f.code.as_str());
    let env = m.environment.environment_behaviors.items().iter().map(|b| b.code.as_str());
    let agents = m.agent_types().flat_map(|(_, t)| t.agent_behaviors.items().iter().map(|b| b.code.as_str()));
    globals.chain(env).chain(agents)
}

#[cfg(test)]
mod tests;
