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

pub use simtree_shared::abm::{Issue, Severity};

/// All findings for a model.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    pub issues: Vec<Issue>,
}

impl Report {
    pub fn errors(&self) -> impl Iterator<Item = &Issue> {
        self.issues.iter().filter(|i| i.severity == Severity::Error)
    }

    pub fn warnings(&self) -> impl Iterator<Item = &Issue> {
        self.issues.iter().filter(|i| i.severity == Severity::Warning)
    }

    /// No errors (warnings allowed).
    pub fn is_ok(&self) -> bool {
        self.errors().next().is_none()
    }

    /// The findings with `prefix` put before every path (e.g. `model.` inside an envelope).
    pub fn with_prefix(mut self, prefix: &str) -> Self {
        for i in &mut self.issues {
            i.path = format!("{prefix}{}", i.path);
        }
        self
    }

    /// Errors as one line each (for [`super::AbmError::Invalid`]).
    pub fn error_lines(&self) -> Vec<String> {
        self.errors().map(ToString::to_string).collect()
    }
}

/// Validates the model of a document, with paths relative to the document (so `model.…` inside
/// an envelope). A failure envelope has nothing to check.
pub fn validate_document(doc: &AbmDocument) -> Report {
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
const AGENT_BUILTINS: &[&str] = &[
    "model",
    "pos",
    "unique_id",
    "random",
    "rng",
    "remove",
    "agent_type",
    "cell",
    "step",
    "advance",
];
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
const CONTEXT_PARAMS: &[&str] = &[
    "self",
    "agent",
    "a",
    "model",
    "m",
    "env",
    "environment",
    "world",
    "agents",
];

/// Where a value sits, for type checks and for resolving behaviors in calls.
#[derive(Clone, Copy)]
enum Owner<'a> {
    Model,
    Environment,
    Agent(&'a str),
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

    fn error(&mut self, code: &'static str, path: impl Into<String>, message: impl Into<String>) {
        self.push(Severity::Error, code, path.into(), message.into());
    }

    fn warn(&mut self, code: &'static str, path: impl Into<String>, message: impl Into<String>) {
        self.push(Severity::Warning, code, path.into(), message.into());
    }

    fn push(&mut self, severity: Severity, code: &'static str, path: String, message: String) {
        let issue = Issue {
            severity,
            code: code.into(),
            path,
            message,
        };
        if !self.issues.contains(&issue) {
            self.issues.push(issue);
        }
    }

    fn agent_type(&self, name: &str) -> Option<&TypeInfo<'a>> {
        self.types.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }

    // -- declarations: names, sourceNames, agent types --

    fn declare(&mut self, source_name: &'a str, expected: &str, path: &str, name: &str, npath: &str) {
        if !is_identifier(name) {
            self.error(
                "bad-identifier",
                npath,
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
            self.declare(
                &v.source_name,
                &format!("globalVariable.{}", v.name),
                &path,
                &v.name,
                &format!("{path}.name"),
            );
            self.globals.entry(&v.name).or_insert((path.clone(), v.var_type));
        }
        for (i, f) in m.global_functions.items().iter().enumerate() {
            let path = format!("globalFunctions[{i}]");
            self.declare(
                &f.source_name,
                &format!("globalFunction.{}", f.name),
                &path,
                &f.name,
                &format!("{path}.name"),
            );
            self.functions
                .entry(&f.name)
                .or_insert((path.clone(), f.function_inputs.get().map(Vec::as_slice)));
        }
        for (i, a) in m.environment.environment_attributes.items().iter().enumerate() {
            let path = format!("environment.environmentAttributes[{i}]");
            self.declare(
                &a.source_name,
                &format!("environment.environmentAttribute.{}", a.name),
                &path,
                &a.name,
                &format!("{path}.name"),
            );
            self.env_attrs.entry(&a.name).or_insert((path.clone(), a.var_type));
        }
        for (i, b) in m.environment.environment_behaviors.items().iter().enumerate() {
            let path = format!("environment.environmentBehaviors[{i}]");
            self.declare(
                &b.source_name,
                &format!("environment.environmentBehavior.{}", b.name),
                &path,
                &b.name,
                &format!("{path}.name"),
            );
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
                self.error(
                    "agent-type-name",
                    &path,
                    format!("agent type '{name}' is already defined at {other}"),
                );
                continue;
            }
            let mut info = TypeInfo {
                path: path.clone(),
                def: t,
                attributes: HashMap::new(),
                behaviors: HashMap::new(),
            };
            for (k, a) in t.agent_attributes.iter().enumerate() {
                let apath = format!("{path}.agentAttributes[{k}]");
                self.declare(
                    &a.source_name,
                    &format!("agent.{name}.agentAttribute.{}", a.name),
                    &apath,
                    &a.name,
                    &format!("{apath}.name"),
                );
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
                self.declare(
                    &b.source_name,
                    &format!("agent.{name}.agentBehavior.{}", b.name),
                    &bpath,
                    &b.name,
                    &format!("{bpath}.name"),
                );
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
            SourceRef::AgentAttribute { agent, name } => self
                .agent_type(agent)?
                .attributes
                .get(name.as_str())
                .map(|(p, t)| (p.clone(), Some(*t))),
            SourceRef::GlobalFunction(n) => self.functions.get(n.as_str()).map(|(p, _)| (p.clone(), None)),
            SourceRef::EnvironmentBehavior(n) => self.env_behaviors.get(n.as_str()).map(|p| (p.clone(), None)),
            SourceRef::AgentBehavior { agent, name } => self
                .agent_type(agent)?
                .behaviors
                .get(name.as_str())
                .map(|p| (p.clone(), None)),
            SourceRef::InitialCount { agent } => self
                .agent_type(agent)
                .map(|t| (format!("{}.initialCount", t.path), Some(VarType::Integer))),
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
            self.error(
                "unresolved-reference",
                path,
                format!("{} '{text}' is not declared{hint}", r.kind()),
            );
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
        let types: Vec<(String, String, &'a AgentType)> = self
            .types
            .iter()
            .map(|(n, t)| (n.clone(), t.path.clone(), t.def))
            .collect();
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
            self.error(
                "type-mismatch",
                path,
                format!("{} {s} does not fit the declared type {ty}", s.kind()),
            );
        }
    }

    fn call(&mut self, c: &FunctionCall, owner: Owner<'_>, path: &str) {
        let fpath = format!("{path}.function");
        let name = c.function.as_str();
        let inputs = match SourceRef::parse(name) {
            Some(SourceRef::GlobalFunction(n)) => self.functions.get(n.as_str()).map(|f| f.1),
            Some(SourceRef::EnvironmentBehavior(n)) => self.env_behaviors.get(n.as_str()).map(|_| None),
            Some(SourceRef::AgentBehavior { agent, name }) => self
                .agent_type(&agent)
                .and_then(|t| t.behaviors.get(name.as_str()))
                .map(|_| None),
            Some(_) => {
                self.error(
                    "type-mismatch",
                    &fpath,
                    format!("'{name}' names a variable, not a function"),
                );
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
            let takes_context = inputs
                .first()
                .is_some_and(|i| CONTEXT_PARAMS.contains(&i.name.as_str()));
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
            self.order_number(
                &item.order_in_initialization,
                &format!("{path}.orderInInitialization"),
                &mut orders,
            );
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
            match expected {
                None => self.error(
                    "type-mismatch",
                    format!("{path}.sourceName"),
                    format!("a {} cannot be an initialization step", r.kind()),
                ),
                Some(e) if e != item.item_type => self.error(
                    "type-mismatch",
                    format!("{path}.type"),
                    format!(
                        "is {} but '{}' is a {}",
                        json_name(&item.item_type),
                        item.source_name,
                        r.kind()
                    ),
                ),
                _ => {}
            }
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
            match expected {
                None => self.error(
                    "type-mismatch",
                    format!("{path}.sourceName"),
                    format!("a {} cannot be scheduled; schedule behaviors and functions", r.kind()),
                ),
                Some(e) if e != item.item_type => self.error(
                    "type-mismatch",
                    format!("{path}.type"),
                    format!(
                        "is {} but '{}' is a {}",
                        json_name(&item.item_type),
                        item.source_name,
                        r.kind()
                    ),
                ),
                _ => {}
            }
        }
    }

    fn order_number(&mut self, n: &serde_json::Number, path: &str, seen: &mut BTreeSet<u64>) {
        match n.as_u64().filter(|&k| k >= 1) {
            None => self.error("type-mismatch", path, format!("must be a whole number ≥ 1, not {n}")),
            Some(k) if !seen.insert(k) => self.warn(
                "duplicate-order",
                path,
                format!("position {k} is used twice; ties run in list order"),
            ),
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
            let declared = self
                .reference(&rule.source_name, &format!("{path}.sourceName"))
                .and_then(|r| match r {
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
            self.value(
                &rule.value,
                rule_type.or(declared),
                Owner::Model,
                &format!("{path}.value"),
            );
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
            blocks.push((
                format!("environment.environmentBehaviors[{i}].code"),
                &b.code,
                &b.name,
                true,
            ));
        }
        let types: Vec<(String, String, &'a AgentType)> = self
            .types
            .iter()
            .map(|(n, t)| (n.clone(), t.path.clone(), t.def))
            .collect();
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
            for (off, ident) in dotted(&clean, "globalVariable.") {
                if !self.globals.contains_key(ident.as_str()) {
                    self.warn(
                        "undeclared-variable",
                        path,
                        format!(
                            "line {}: globalVariable.{ident} is not declared in globalVariables",
                            line_of(code, off)
                        ),
                    );
                }
            }
            for (off, ident) in dotted(&clean, "globalFunction.") {
                if !self.functions.contains_key(ident.as_str()) {
                    self.error(
                        "unknown-function",
                        path,
                        format!(
                            "line {}: globalFunction.{ident} is not defined in globalFunctions",
                            line_of(code, off)
                        ),
                    );
                }
            }
            for (off, ident) in dotted(&clean, "model.") {
                if !MODEL_BUILTINS.contains(&ident.as_str())
                    && !self.globals.contains_key(ident.as_str())
                    && !assigned_model.contains(&ident)
                {
                    self.warn(
                        "undeclared-variable",
                        path,
                        format!(
                            "line {}: model.{ident} is neither Mesa's nor declared (a global variable is globalVariable.{ident})",
                            line_of(code, off)
                        ),
                    );
                }
            }
            for (off, ident) in dotted(&clean, "environment.") {
                if ident != "model"
                    && !self.env_attrs.contains_key(ident.as_str())
                    && !self.env_behaviors.contains_key(ident.as_str())
                    && !assigned_env.contains(&ident)
                {
                    self.warn(
                        "undeclared-variable",
                        path,
                        format!(
                            "line {}: environment.{ident} is not an environment attribute or behavior",
                            line_of(code, off)
                        ),
                    );
                }
            }
            if *is_env {
                let assigned = assigned_self(&clean);
                for (off, ident) in dotted(&clean, "self.") {
                    if ident != "model"
                        && !self.env_attrs.contains_key(ident.as_str())
                        && !self.env_behaviors.contains_key(ident.as_str())
                        && !assigned.contains(&ident)
                    {
                        self.warn(
                            "undeclared-variable",
                            path,
                            format!(
                                "line {}: self.{ident} is not an environment attribute or behavior",
                                line_of(code, off)
                            ),
                        );
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
            let type_code: String = t
                .agent_behaviors
                .items()
                .iter()
                .map(|b| b.code.as_str())
                .collect::<Vec<_>>()
                .join("\n");
            let assigned = assigned_self(&blank_strings_and_comments(&type_code));
            let mut found = Vec::new();
            for (k, b) in t.agent_behaviors.items().iter().enumerate() {
                let clean = blank_strings_and_comments(&b.code);
                for (off, ident) in dotted(&clean, "self.") {
                    if !attrs.contains(ident.as_str())
                        && !behaviors.contains(ident.as_str())
                        && !AGENT_BUILTINS.contains(&ident.as_str())
                        && !assigned.contains(&ident)
                    {
                        found.push((
                            format!("{tpath}.agentBehaviors[{k}].code"),
                            format!(
                                "line {}: self.{ident} is not an attribute or behavior of {name}",
                                line_of(&b.code, off)
                            ),
                        ));
                    }
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
                format!(
                    "simtree runs python models on Mesa; '{}' can be validated but not run",
                    m.coding_language
                ),
            );
            return false;
        }
        match m.abm_library.get() {
            Some(lib) if !lib.name.eq_ignore_ascii_case("mesa") => {
                self.warn(
                    "not-runnable",
                    "abmLibrary.name",
                    format!(
                        "simtree runs models on Mesa; '{}' code can be validated but not run",
                        lib.name
                    ),
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
            (
                "schedule.steps",
                "Mesa 3 has no model.schedule; use model.steps (shimmed)",
            ),
            (
                "schedule.agents",
                "Mesa 3 has no model.schedule; use model.agents (shimmed)",
            ),
            (
                "schedule.get_agent_count",
                "Mesa 3 has no model.schedule; use len(model.agents) (shimmed)",
            ),
            (
                "schedule.add(",
                "Mesa 3 registers agents when they are created; schedule.add is a no-op in the shim",
            ),
            (
                "schedule.remove(",
                "Mesa 3 removes agents with agent.remove() (shimmed)",
            ),
            (
                "mesa.time",
                "mesa.time was removed in Mesa 3.1; the runner provides a stand-in",
            ),
            (
                "RandomActivation",
                "schedulers were removed in Mesa 3.1; use model.agents.shuffle_do (stand-in provided)",
            ),
            (
                "SimultaneousActivation",
                "schedulers were removed in Mesa 3.1 (stand-in provided)",
            ),
            (
                "StagedActivation",
                "schedulers were removed in Mesa 3.1 (stand-in provided)",
            ),
            (
                "next_id()",
                "Mesa 3 assigns unique_id itself; model.next_id() is shimmed",
            ),
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
            for call in [
                ".get_neighbors(",
                ".get_neighborhood(",
                ".iter_neighbors(",
                ".iter_neighborhood(",
            ] {
                let mut from = 0;
                while let Some(rel) = clean[from..].find(call) {
                    let open = from + rel + call.len();
                    let args = call_args(clean, open);
                    let positional = args
                        .split(',')
                        .filter(|a| !a.contains('=') && !a.trim().is_empty())
                        .count();
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
            .chain(
                m.scheduler
                    .initialization
                    .initialization_order
                    .iter()
                    .map(|i| i.source_name.as_str()),
            )
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
                        format!(
                            "{name}.{} never runs: it is not in the schedule and no code calls it",
                            b.name
                        ),
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
            let code = if path.ends_with("executionMode") {
                "execution-mode"
            } else {
                "unscheduled"
            };
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
        let seeding_step = init.iter().any(|i| {
            matches!(
                i.item_type,
                InitializationType::GlobalFunction | InitializationType::AgentAttribute
            )
        });
        if seeding_step {
            return;
        }
        let mut found = Vec::new();
        for (name, t) in &self.types {
            let code: String = t
                .def
                .agent_behaviors
                .items()
                .iter()
                .map(|b| b.code.as_str())
                .collect::<Vec<_>>()
                .join("\n");
            for (k, a) in t.def.agent_attributes.iter().enumerate() {
                let ValueOrCall::Literal(Scalar::String(start)) = &a.initial_value else {
                    continue;
                };
                if SourceRef::looks_like(start) {
                    continue;
                }
                let waits_for: Vec<String> = compared_literals(&code, &a.name)
                    .into_iter()
                    .filter(|lit| lit != start)
                    .collect();
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
fn compatible(want: VarType, got: VarType) -> bool {
    use VarType::*;
    let numeric = |t| matches!(t, Integer | Float | Number);
    want == got || (numeric(want) && numeric(got))
}

fn json_name<T: Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn code_strings(m: &AbmModel) -> impl Iterator<Item = &str> {
    let globals = m.global_functions.items().iter().map(|f| f.code.as_str());
    let env = m
        .environment
        .environment_behaviors
        .items()
        .iter()
        .map(|b| b.code.as_str());
    let agents = m
        .agent_types()
        .flat_map(|(_, t)| t.agent_behaviors.items().iter().map(|b| b.code.as_str()));
    globals.chain(env).chain(agents)
}

// ---------------------------------------------------------------------------------------------
// A lexical look at Python code.
// ---------------------------------------------------------------------------------------------

/// The code with the contents of string literals and comments replaced by spaces (newlines
/// kept), so that offsets and line numbers stay valid and no match comes from a string.
pub(crate) fn blank_strings_and_comments(code: &str) -> String {
    let b = code.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    out[i] = b' ';
                    i += 1;
                }
            }
            q @ (b'\'' | b'"') => {
                let triple = i + 2 < b.len() && b[i + 1] == q && b[i + 2] == q;
                let delim = if triple { 3 } else { 1 };
                i += delim;
                while i < b.len() {
                    if b[i] == b'\\' {
                        out[i] = b' ';
                        if i + 1 < b.len() && b[i + 1] != b'\n' {
                            out[i + 1] = b' ';
                        }
                        i += 2;
                        continue;
                    }
                    if b[i] == q && (!triple || (i + 2 < b.len() && b[i + 1] == q && b[i + 2] == q)) {
                        i += delim;
                        break;
                    }
                    if b[i] == b'\n' && !triple {
                        break;
                    }
                    if b[i] != b'\n' {
                        out[i] = b' ';
                    }
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    // Only ASCII bytes were replaced by ASCII spaces... except inside strings, where multi-byte
    // characters were blanked byte by byte, which still leaves valid UTF-8 (all spaces).
    String::from_utf8(out).unwrap_or_default()
}

fn is_ident_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Occurrences of `prefix` followed by an identifier, where `prefix` does not continue an
/// identifier on its left (a `.` before it is allowed: `self.model.x` contains `model.x`).
fn dotted(clean: &str, prefix: &str) -> Vec<(usize, String)> {
    let b = clean.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(rel) = clean[from..].find(prefix) {
        let at = from + rel;
        from = at + prefix.len();
        if at > 0 && is_ident_byte(b[at - 1]) {
            continue;
        }
        let end = b[from..]
            .iter()
            .position(|&c| !is_ident_byte(c))
            .map_or(b.len(), |p| from + p);
        if end > from {
            out.push((at, clean[from..end].to_owned()));
        }
    }
    out
}

/// First occurrence of `pattern` not continuing an identifier on either side.
fn find_word(clean: &str, pattern: &str) -> Option<usize> {
    let b = clean.as_bytes();
    let mut from = 0;
    while let Some(rel) = clean[from..].find(pattern) {
        let at = from + rel;
        let end = at + pattern.len();
        let left_ok = at == 0 || !is_ident_byte(b[at - 1]) || !is_ident_byte(pattern.as_bytes()[0]);
        let right_ok =
            end >= b.len() || !is_ident_byte(b[end]) || !is_ident_byte(*pattern.as_bytes().last().unwrap_or(&b' '));
        if left_ok && right_ok {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// Whether the code calls `name(` somewhere other than in its own `def`.
fn calls(clean: &str, name: &str) -> bool {
    let pattern = format!("{name}(");
    let b = clean.as_bytes();
    clean.match_indices(&pattern).any(|(at, _)| {
        let left_ok = at == 0 || !is_ident_byte(b[at - 1]);
        left_ok && !clean[..at].trim_end().ends_with("def")
    })
}

/// Whether the text after `end` is a plain assignment (`=`, not `==`). Augmented ones (`+=`)
/// read the attribute first, so they do not declare it.
fn is_assignment(clean: &str, end: usize) -> bool {
    let rest = clean[end.min(clean.len())..].trim_start_matches([' ', '\t']);
    matches!(rest.as_bytes(), [b'=', next, ..] if *next != b'=')
}

/// Attribute names assigned as `self.<x> = …` anywhere in the code.
fn assigned_self(clean: &str) -> HashSet<String> {
    dotted(clean, "self.")
        .into_iter()
        .filter(|(off, ident)| is_assignment(clean, off + "self.".len() + ident.len()))
        .map(|(_, i)| i)
        .collect()
}

fn defines_function(clean: &str, name: &str) -> bool {
    clean.lines().any(|l| {
        l.trim_start()
            .strip_prefix("def ")
            .is_some_and(|r| r.trim_start().starts_with(&format!("{name}(")))
    })
}

/// The argument text of a call whose `(` ends at `open`, up to the matching `)`.
fn call_args(clean: &str, open: usize) -> &str {
    let b = clean.as_bytes();
    let mut depth = 1;
    let mut i = open;
    while i < b.len() {
        match b[i] {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => {
                depth -= 1;
                if depth == 0 {
                    return &clean[open..i];
                }
            }
            _ => {}
        }
        i += 1;
    }
    &clean[open..]
}

/// String literals compared with `.<attr>` (`x.status == 'I'`, `'I' != n.status`) in raw code.
fn compared_literals(code: &str, attr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let needle = format!(".{attr}");
    for (at, _) in code.match_indices(&needle) {
        let end = at + needle.len();
        if code.as_bytes().get(end).is_some_and(|&c| is_ident_byte(c)) {
            continue;
        }
        let rest = code[end..].trim_start();
        for op in ["==", "!="] {
            if let Some(r) = rest.strip_prefix(op)
                && let Some(lit) = leading_string_literal(r.trim_start())
            {
                out.push(lit);
            }
        }
        let before = code[..at].trim_end();
        let before = before.trim_end_matches(|c: char| is_ident_byte(c as u8) || c == '.');
        let before = before.trim_end();
        for op in ["==", "!="] {
            if let Some(b) = before.strip_suffix(op)
                && let Some(lit) = trailing_string_literal(b.trim_end())
            {
                out.push(lit);
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

fn leading_string_literal(s: &str) -> Option<String> {
    let q = s.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    let rest = &s[1..];
    rest.find(q).map(|end| rest[..end].to_owned())
}

fn trailing_string_literal(s: &str) -> Option<String> {
    let q = s.chars().last().filter(|c| *c == '\'' || *c == '"')?;
    let body = &s[..s.len() - 1];
    body.rfind(q).map(|start| body[start + 1..].to_owned())
}

fn line_of(code: &str, offset: usize) -> usize {
    code[..offset.min(code.len())].matches('\n').count() + 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SEED: &str = include_str!("../../tests/fixtures/abm/seed000_sir_example.json");

    /// The model inside the seed's envelope.
    fn m(v: &mut Value) -> &mut Value {
        &mut v["model"]
    }

    fn seed_value() -> Value {
        serde_json::from_str(SEED).unwrap()
    }

    fn report_of(v: Value) -> Report {
        let doc = AbmDocument::from_value(v).expect("parses");
        validate_document(&doc)
    }

    fn has(r: &Report, sev: Severity, code: &str, path: &str) -> bool {
        r.issues
            .iter()
            .any(|i| i.severity == sev && i.code == code && i.path == path)
    }

    fn listing(r: &Report) -> String {
        r.issues.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n")
    }

    #[test]
    fn the_seed_example_has_two_real_reference_errors() {
        let r = report_of(seed_value());
        let errors: Vec<(&str, &str)> = r.errors().map(|i| (i.code.as_str(), i.path.as_str())).collect();
        assert_eq!(
            errors,
            vec![
                ("unknown-function", "model.agents[0][0].initialCount.function"),
                (
                    "unresolved-reference",
                    "model.terminationCriteria.terminationRules[0].sourceName"
                ),
            ],
            "{}",
            listing(&r)
        );
        let text = listing(&r);
        assert!(text.contains("getTotalPopulation"), "{text}");
        assert!(text.contains("globalVariable.totalPopulation"), "{text}");
        assert!(text.contains("globalVariable.infectedCount"), "{text}");
        // The pitfalls: Mesa-2 idioms under "3.0", and nobody is ever infected.
        let p0 = "model.agents[0][0].agentBehaviors[0].code";
        let p1 = "model.agents[0][0].agentBehaviors[1].code";
        assert!(has(&r, Severity::Warning, "mesa2-idiom", p0), "{text}");
        assert!(has(&r, Severity::Warning, "mesa2-idiom", p1), "{text}");
        assert!(
            has(
                &r,
                Severity::Warning,
                "no-initial-seeding",
                "model.agents[0][0].agentAttributes[0].initialValue"
            ),
            "{text}"
        );
        assert!(text.contains("line 14: 'schedule.time'"), "{text}");
    }

    #[test]
    fn shipped_examples_have_no_errors_or_warnings() {
        for name in ["sir_network.json", "forest_fire.json", "wealth_exchange.json"] {
            let path = format!("{}/../assets/abm/{name}", env!("CARGO_MANIFEST_DIR"));
            let doc = AbmDocument::parse(&std::fs::read_to_string(path).unwrap()).unwrap();
            let r = validate_document(&doc);
            assert!(r.issues.is_empty(), "{name}:\n{}", listing(&r));
        }
    }

    /// Applies `edit` to the seed example and expects exactly the finding (severity, code, path)
    /// among the results.
    fn expect(edit: impl FnOnce(&mut Value), sev: Severity, code: &str, path: &str) -> Report {
        let mut v = seed_value();
        edit(&mut v);
        let r = report_of(v);
        assert!(
            has(&r, sev, code, path),
            "expected {code} at {path}, got:\n{}",
            listing(&r)
        );
        r
    }

    #[test]
    fn each_error_class_is_reported_with_its_path() {
        use Severity::Error;
        expect(
            |v| m(v)["globalVariables"][1]["sourceName"] = json!("globalVariables.infectionRate"),
            Error,
            "source-name-format",
            "model.globalVariables[1].sourceName",
        );
        expect(
            |v| {
                m(v)["globalVariables"][2]["name"] = json!("infectionRate");
                m(v)["globalVariables"][2]["sourceName"] = json!("globalVariable.infectionRate");
            },
            Error,
            "duplicate-source-name",
            "model.globalVariables[2].sourceName",
        );
        expect(
            |v| {
                m(v)["globalVariables"][0]["name"] = json!("total population");
            },
            Error,
            "bad-identifier",
            "model.globalVariables[0].name",
        );
        expect(
            |v| {
                m(v)["agents"][0][0]["agentAttributes"][1]["sourceName"] =
                    json!("agent.People.agentAttribute.infectionTime")
            },
            Error,
            "source-name-format",
            "model.agents[0][0].agentAttributes[1].sourceName",
        );
        expect(
            |v| {
                m(v)["agents"][0][0]["agentAttributes"] = json!([]);
                m(v)["agents"][0][0]["agentBehaviors"] = json!([]);
            },
            Error,
            "agent-type-name",
            "model.agents[0][0]",
        );
        expect(
            |v| {
                m(v)["scheduler"]["schedule"]["scheduleOrder"][1]["sourceName"] =
                    json!("agent.Person.agentBehavior.recover")
            },
            Error,
            "unresolved-reference",
            "model.scheduler.schedule.scheduleOrder[1].sourceName",
        );
        expect(
            |v| {
                m(v)["scheduler"]["initialization"]["initializationOrder"][3]["sourceName"] =
                    json!("agent.Human.initialCount")
            },
            Error,
            "unresolved-reference",
            "model.scheduler.initialization.initializationOrder[3].sourceName",
        );
        expect(
            |v| m(v)["dataAnalytics"]["trackedVariables"][1]["sourceName"] = json!("globalVariable.population"),
            Error,
            "unresolved-reference",
            "model.dataAnalytics.trackedVariables[1].sourceName",
        );
        expect(
            |v| m(v)["globalVariables"][1]["initialValue"] = json!("globalVariable.baseRate"),
            Error,
            "unresolved-reference",
            "model.globalVariables[1].initialValue",
        );
        expect(
            |v| m(v)["globalVariables"][0]["initialValue"] = json!({"function": "computePopulation", "args": []}),
            Error,
            "unknown-function",
            "model.globalVariables[0].initialValue.function",
        );
        expect(
            |v| {
                let code = m(v)["agents"][0][0]["agentBehaviors"][0]["code"]
                    .as_str()
                    .unwrap()
                    .replace(
                        "globalFunction.calculateInfectionProbability",
                        "globalFunction.infectionChance",
                    );
                m(v)["agents"][0][0]["agentBehaviors"][0]["code"] = json!(code);
            },
            Error,
            "unknown-function",
            "model.agents[0][0].agentBehaviors[0].code",
        );
        expect(
            |v| m(v)["scheduler"]["schedule"]["scheduleOrder"][0]["type"] = json!("environmentBehavior"),
            Error,
            "type-mismatch",
            "model.scheduler.schedule.scheduleOrder[0].type",
        );
        expect(
            |v| m(v)["scheduler"]["initialization"]["initializationOrder"][0]["type"] = json!("environmentAttribute"),
            Error,
            "type-mismatch",
            "model.scheduler.initialization.initializationOrder[0].type",
        );
        expect(
            |v| m(v)["globalVariables"][1]["initialValue"] = json!("high"),
            Error,
            "type-mismatch",
            "model.globalVariables[1].initialValue",
        );
        expect(
            |v| m(v)["agents"][0][0]["agentAttributes"][0]["initialValue"] = json!(0),
            Error,
            "type-mismatch",
            "model.agents[0][0].agentAttributes[0].initialValue",
        );
        expect(
            |v| m(v)["agents"][0][0]["initialCount"] = json!(12.5),
            Error,
            "type-mismatch",
            "model.agents[0][0].initialCount",
        );
        expect(
            |v| m(v)["terminationCriteria"]["maxSteps"] = json!(0),
            Error,
            "type-mismatch",
            "model.terminationCriteria.maxSteps",
        );
        expect(
            |v| {
                m(v)["terminationCriteria"]["terminationRules"][0]["sourceName"] =
                    json!("agent.Person.agentAttribute.status");
            },
            Error,
            "type-mismatch",
            "model.terminationCriteria.terminationRules[0].type",
        );
        expect(
            |v| m(v)["scheduler"]["schedule"]["scheduleOrder"][0]["orderInSchedule"] = json!(0),
            Error,
            "type-mismatch",
            "model.scheduler.schedule.scheduleOrder[0].orderInSchedule",
        );
        expect(
            |v| {
                m(v)["dataAnalytics"]["trackedVariables"][0]["sourceName"] =
                    json!("agent.Person.agentBehavior.checkRecovery")
            },
            Error,
            "type-mismatch",
            "model.dataAnalytics.trackedVariables[0].sourceName",
        );
        expect(
            |v| {
                m(v)["agents"][0][0]["agentAttributes"][2]["name"] = json!("unique_id");
                m(v)["agents"][0][0]["agentAttributes"][2]["sourceName"] =
                    json!("agent.Person.agentAttribute.unique_id");
            },
            Error,
            "reserved-name",
            "model.agents[0][0].agentAttributes[2].name",
        );
    }

    #[test]
    fn pitfall_warnings_are_reported_with_their_path() {
        use Severity::Warning;
        let r = expect(
            |v| {
                let code = "def checkRecovery(self):\n    if self.status == 'I' and self.random.random() < globalVariable.recoveryChance:\n        self.status = 'R'\n        self.daysSick += 1";
                m(v)["agents"][0][0]["agentBehaviors"][1]["code"] = json!(code);
            },
            Warning,
            "undeclared-variable",
            "model.agents[0][0].agentBehaviors[1].code",
        );
        let text = listing(&r);
        assert!(text.contains("globalVariable.recoveryChance"), "{text}");
        assert!(text.contains("self.daysSick"), "{text}");
        expect(
            |v| {
                let code = "def checkRecovery(self):\n    if self.status == 'I' and self.random.random() < self.model.recovery_rate:\n        self.status = 'R'";
                m(v)["agents"][0][0]["agentBehaviors"][1]["code"] = json!(code);
            },
            Warning,
            "undeclared-variable",
            "model.agents[0][0].agentBehaviors[1].code",
        );
        expect(
            |v| {
                m(v)["environment"]["topology"]["type"] = json!("grid");
                m(v)["environment"]["topology"]["boundaryConditions"] = json!("torus");
            },
            Warning,
            "mesa2-idiom",
            "model.agents[0][0].agentBehaviors[0].code",
        );
        expect(
            |v| {
                let code = "def calculateInfectionProbability(c, t):\n    return environment.humidity * t";
                m(v)["globalFunctions"][0]["code"] = json!(code);
            },
            Warning,
            "undeclared-variable",
            "model.globalFunctions[0].code",
        );
        expect(
            |v| m(v)["abmLibrary"]["version"] = json!("2.4"),
            Warning,
            "mesa2-idiom",
            "model.abmLibrary.version",
        );
        expect(
            |v| {
                m(v)["environment"]["topology"]["type"] = json!("grid");
            },
            Warning,
            "boundary-conditions",
            "model.environment.topology.boundaryConditions",
        );
        expect(
            |v| {
                let order = m(v)["scheduler"]["schedule"]["scheduleOrder"].as_array_mut().unwrap();
                order.pop();
            },
            Warning,
            "unscheduled",
            "model.agents[0][0].agentBehaviors[1].sourceName",
        );
        expect(
            |v| m(v)["scheduler"]["schedule"]["scheduleOrder"][1]["orderInSchedule"] = json!(1),
            Warning,
            "duplicate-order",
            "model.scheduler.schedule.scheduleOrder[1].orderInSchedule",
        );
        expect(
            |v| {
                let order = m(v)["scheduler"]["initialization"]["initializationOrder"]
                    .as_array_mut()
                    .unwrap();
                order.pop();
            },
            Warning,
            "not-in-initialization",
            "model.agents[0][0].initialCount",
        );
        expect(
            |v| {
                m(v)["agents"][0][0]["initialCount"] =
                    json!({"function": "calculateInfectionProbability", "args": [1, 2, 3]})
            },
            Warning,
            "argument-count",
            "model.agents[0][0].initialCount.args",
        );
        expect(
            |v| {
                let code = "def calculateInfectionProbability(c, t):\n    return np.random.random()";
                m(v)["globalFunctions"][0]["code"] = json!(code);
            },
            Warning,
            "unseeded-random",
            "model.globalFunctions[0].code",
        );
        expect(
            |v| {
                let code = "def infectionChance(c, t):\n    return 1 - (1 - t) ** c";
                m(v)["globalFunctions"][0]["code"] = json!(code);
            },
            Warning,
            "function-name",
            "model.globalFunctions[0].code",
        );
        expect(
            |v| m(v)["agents"][0][0]["agentBehaviors"][0]["executionMode"] = json!("model-once"),
            Warning,
            "execution-mode",
            "model.agents[0][0].agentBehaviors[0].executionMode",
        );
        expect(
            |v| m(v)["codingLanguage"] = json!("julia"),
            Warning,
            "not-runnable",
            "model.codingLanguage",
        );
    }

    #[test]
    fn seeding_through_an_initialization_function_silences_the_seeding_warning() {
        let mut v = seed_value();
        v["model"]["globalFunctions"].as_array_mut().unwrap().push(json!({
            "name": "seed", "sourceName": "globalFunction.seed", "functionDescription": "infect one",
            "executionMode": "model-once",
            "code": "def seed(model):\n    model.random.choice(list(model.agents)).status = 'I'"
        }));
        v["model"]["scheduler"]["initialization"]["initializationOrder"]
            .as_array_mut()
            .unwrap()
            .push(json!({"sourceName": "globalFunction.seed", "type": "globalFunction", "orderInInitialization": 5}));
        let r = report_of(v);
        assert!(
            !r.issues.iter().any(|i| i.code == "no-initial-seeding"),
            "{}",
            listing(&r)
        );
    }

    #[test]
    fn strings_and_comments_are_not_scanned() {
        let code = "def f(self):\n    # globalVariable.ghost in a comment\n    s = 'globalVariable.ghost'\n    t = \"\"\"self.schedule.time\n\"\"\"\n    return globalVariable.real";
        let clean = blank_strings_and_comments(code);
        assert_eq!(clean.len(), code.len());
        let found: Vec<String> = dotted(&clean, "globalVariable.").into_iter().map(|x| x.1).collect();
        assert_eq!(found, vec!["real".to_owned()]);
        assert_eq!(line_of(code, clean.find("globalVariable.real").unwrap()), 6);
        assert!(find_word(&clean, "schedule.time").is_none());
        assert_eq!(
            compared_literals("if n.status == 'I' or 'R' != self.status:", "status"),
            vec!["I", "R"]
        );
        assert!(is_assignment(" = 3", 0) && !is_assignment(" += 1", 0) && !is_assignment(" == 3", 0));
    }
}
