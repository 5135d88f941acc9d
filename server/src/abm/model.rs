//! The sd-ai `abm-quant` model format (seed 000) as Rust types, and the API envelope around it.
//!
//! Field names, their order and every enum follow the seed, so that a document read here and
//! written back is the same JSON text (property order included): optional fields remember whether
//! they were absent, `null` or set ([`Maybe`]), numbers keep their integer/float form
//! (`serde_json::Number`), and values that may be a literal or a function call keep which one they
//! were ([`ValueOrCall`]). Parsing is strict: an unknown field or a wrong shape is an error naming
//! its JSON path.
//!
//! The doc comments on the fields double as the descriptions of the LLM response schema
//! (`schema.rs` generates the schema from these types), so they are written for a model author.
//! Two orderings differ from seed 001's zod schema and are kept as seed 000 documents them:
//! `terminationCriteria` lists `maxSteps` before `terminationRules`, and `topology` lists
//! `description` before `type`.

use std::borrow::Cow;
use std::fmt;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Number, Value};

pub use simtree_shared::abm::SupportingInfo;
use simtree_shared::abm::{GenerateFailed, Generated};

use super::AbmError;

// ---------------------------------------------------------------------------------------------
// Building blocks: tri-state optional fields, scalars, value-or-function-call unions.
// ---------------------------------------------------------------------------------------------

/// An optional field that remembers how it was written: left out, written as `null`, or set.
///
/// Every optional field of the format uses it with
/// `#[serde(default, skip_serializing_if = "Maybe::is_absent")]`, which is what makes a round
/// trip lossless (`"boundaryConditions": null` stays `null`; a missing `dataAnalytics` stays
/// missing).
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Maybe<T> {
    /// The field was not in the document.
    #[default]
    Absent,
    /// The field was `null`.
    Null,
    /// The field had a value.
    Set(T),
}

impl<T> Maybe<T> {
    /// True when the field was left out (used to skip it on output).
    pub(crate) fn is_absent(&self) -> bool {
        matches!(self, Maybe::Absent)
    }

    /// The value, if any (absent and `null` both read as `None`).
    pub(crate) fn get(&self) -> Option<&T> {
        match self {
            Maybe::Set(v) => Some(v),
            _ => None,
        }
    }

    /// Mutable access to the value, if any.
    pub fn get_mut(&mut self) -> Option<&mut T> {
        match self {
            Maybe::Set(v) => Some(v),
            _ => None,
        }
    }
}

impl<T> Maybe<Vec<T>> {
    /// The list, or an empty slice when absent or `null`.
    pub(crate) fn items(&self) -> &[T] {
        self.get().map(Vec::as_slice).unwrap_or(&[])
    }
}

impl<T> From<Option<T>> for Maybe<T> {
    fn from(v: Option<T>) -> Self {
        v.map_or(Maybe::Null, Maybe::Set)
    }
}

impl<T: Serialize> Serialize for Maybe<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Maybe::Set(v) => v.serialize(s),
            // Absent fields are skipped by `skip_serializing_if`; if one is serialized anyway
            // (e.g. inside a tuple), null is the closest JSON.
            Maybe::Absent | Maybe::Null => s.serialize_none(),
        }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Maybe<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // A present field reaches this point; `null` becomes Null, anything else must be a T.
        Ok(Option::<T>::deserialize(d)?.into())
    }
}

impl<T: JsonSchema> JsonSchema for Maybe<T> {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        format!("Nullable_{}", T::schema_name()).into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        // The seed's converted form: the inner schema plus `nullable: true`; the field is left
        // out of `required` because every Maybe field carries `#[serde(default)]`.
        let mut schema = generator.subschema_for::<T>();
        schema.insert("nullable".into(), true.into());
        schema
    }
}

/// A literal the format allows where a value is expected: string, number or boolean.
#[derive(Clone, Debug, PartialEq)]
pub enum Scalar {
    String(String),
    Number(Number),
    Bool(bool),
}

impl Scalar {
    /// The literal as a JSON value.
    pub(crate) fn to_json(&self) -> Value {
        match self {
            Scalar::String(s) => Value::String(s.clone()),
            Scalar::Number(n) => Value::Number(n.clone()),
            Scalar::Bool(b) => Value::Bool(*b),
        }
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Scalar::String(s) => Some(s),
            _ => None,
        }
    }

    /// A short description of the literal's JSON kind, for messages.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Scalar::String(_) => "a string",
            Scalar::Number(n) if n.is_f64() => "a float",
            Scalar::Number(_) => "an integer",
            Scalar::Bool(_) => "a boolean",
        }
    }
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.to_json())
    }
}

impl Serialize for Scalar {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Scalar::String(v) => s.serialize_str(v),
            Scalar::Number(n) => n.serialize(s),
            Scalar::Bool(b) => s.serialize_bool(*b),
        }
    }
}

/// Shared visitor for scalars; `allow_call` lets [`ValueOrCall`] accept a `{function, args}`
/// object as well.
struct ScalarVisitor {
    allow_call: bool,
}

/// What [`ScalarVisitor`] found.
enum Visited {
    Scalar(Scalar),
    Call(FunctionCall),
}

impl<'de> Visitor<'de> for ScalarVisitor {
    type Value = Visited;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.allow_call {
            f.write_str("a string, number, boolean or a function call {\"function\", \"args\"}")
        } else {
            f.write_str("a string, number or boolean")
        }
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Visited, E> {
        Ok(Visited::Scalar(Scalar::Bool(v)))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Visited, E> {
        Ok(Visited::Scalar(Scalar::Number(v.into())))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Visited, E> {
        Ok(Visited::Scalar(Scalar::Number(v.into())))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Visited, E> {
        Number::from_f64(v).map(|n| Visited::Scalar(Scalar::Number(n))).ok_or_else(|| E::custom("number is not finite"))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Visited, E> {
        Ok(Visited::Scalar(Scalar::String(v.to_owned())))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Visited, E> {
        Ok(Visited::Scalar(Scalar::String(v)))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Visited, A::Error> {
        if !self.allow_call {
            return Err(de::Error::invalid_type(de::Unexpected::Map, &self));
        }
        let call = FunctionCall::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(Visited::Call(call))
    }
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match d.deserialize_any(ScalarVisitor { allow_call: false })? {
            Visited::Scalar(s) => Ok(s),
            Visited::Call(_) => unreachable!("calls are refused when allow_call is false"),
        }
    }
}

impl JsonSchema for Scalar {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "Scalar".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "anyOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}]
        })
    }
}

/// A call of a function defined in the model, used to compute a value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FunctionCall {
    /// Name of the function to call: one of the model's global functions (or, in an attribute
    /// of an agent or of the environment, one of its behaviors).
    pub(crate) function: String,
    /// Arguments in order: literals, or the sourceName of a variable or attribute whose value
    /// is passed.
    pub(crate) args: Vec<Scalar>,
}

/// A value that is either a literal (which may be a sourceName reference such as
/// `"globalVariable.population"`) or a function call.
#[derive(Clone, Debug, PartialEq)]
pub enum ValueOrCall {
    Literal(Scalar),
    Call(FunctionCall),
}

impl ValueOrCall {
    /// The value as JSON (what the worker receives).
    pub(crate) fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

impl Serialize for ValueOrCall {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ValueOrCall::Literal(l) => l.serialize(s),
            ValueOrCall::Call(c) => c.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for ValueOrCall {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match d.deserialize_any(ScalarVisitor { allow_call: true })? {
            Visited::Scalar(s) => ValueOrCall::Literal(s),
            Visited::Call(c) => ValueOrCall::Call(c),
        })
    }
}

impl JsonSchema for ValueOrCall {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "ValueOrCall".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let scalar = generator.subschema_for::<Scalar>();
        let call = generator.subschema_for::<FunctionCall>();
        json_schema!({ "anyOf": [scalar, call] })
    }
}

// ---------------------------------------------------------------------------------------------
// Enums of the format.
// ---------------------------------------------------------------------------------------------

/// Data type of a variable, attribute or parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum VarType {
    Integer,
    Float,
    Number,
    String,
    Boolean,
    Array,
    Object,
}

impl VarType {
    /// The name used in the format.
    pub fn as_str(self) -> &'static str {
        match self {
            VarType::Integer => "integer",
            VarType::Float => "float",
            VarType::Number => "number",
            VarType::String => "string",
            VarType::Boolean => "boolean",
            VarType::Array => "array",
            VarType::Object => "object",
        }
    }

    /// Whether a JSON value fits this type (integers fit float/number; arrays and objects only
    /// their own types).
    pub(crate) fn admits(self, v: &Value) -> bool {
        match (self, v) {
            (VarType::Integer, Value::Number(n)) => {
                n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
            }
            (VarType::Float | VarType::Number, Value::Number(_)) => true,
            (VarType::String, Value::String(_)) => true,
            (VarType::Boolean, Value::Bool(_)) => true,
            (VarType::Array, Value::Array(_)) => true,
            (VarType::Object, Value::Object(_)) => true,
            _ => false,
        }
    }
}

impl fmt::Display for VarType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a function or behavior is invoked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum ExecutionMode {
    // Plain comments, not doc comments: schemars would turn documented variants into a
    // `oneOf` of constants instead of the seed's `enum`.
    // Once for every agent, with the agent as `self`.
    PerAgent,
    // Once per call, in the model's context.
    ModelOnce,
    // Once per call, with access to whole collections of agents.
    ModelBatch,
}

/// The spatial structure agents live in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum TopologyType {
    None,
    Grid,
    Network,
}

/// What happens at the edge of a grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum BoundaryConditions {
    Fixed,
    Torus,
}

/// What an initialization step sets up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) enum InitializationType {
    AgentAttribute,
    EnvironmentAttribute,
    GlobalVariable,
    GlobalFunction,
    InitialCount,
}

/// What a schedule entry runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) enum ScheduleType {
    AgentBehavior,
    EnvironmentBehavior,
    GlobalFunction,
}

/// Whether a tracked variable is recorded once per step or once per agent per step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum CollectionLevel {
    Model,
    Agent,
}

/// When in a step a tracked variable is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum CheckTime {
    StartOfStep,
    EndOfStep,
}

// ---------------------------------------------------------------------------------------------
// The model.
// ---------------------------------------------------------------------------------------------

/// A complete agent-based model specification.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AbmModel {
    /// Programming language of every code field in the model, e.g. 'python'.
    pub(crate) coding_language: String,
    /// The agent-based modelling library the code is written for (e.g. mesa for python).
    #[serde(default, skip_serializing_if = "Maybe::is_absent")]
    pub(crate) abm_library: Maybe<AbmLibrary>,
    /// Helper functions shared by the whole model (not owned by an agent type or the
    /// environment), e.g. to compute initial values or run model-wide updates each step.
    #[serde(default, skip_serializing_if = "Maybe::is_absent")]
    pub(crate) global_functions: Maybe<Vec<GlobalFunction>>,
    /// Model-wide variables, readable and writable from any code as `globalVariable.<name>`.
    #[serde(default, skip_serializing_if = "Maybe::is_absent")]
    pub global_variables: Maybe<Vec<Variable>>,
    /// The world the agents live in.
    pub(crate) environment: Environment,
    /// The agent types, as groups of types (an array of arrays).
    pub(crate) agents: Vec<Vec<AgentType>>,
    /// When the simulation stops.
    pub(crate) termination_criteria: TerminationCriteria,
    /// What is set up before the first step, and what runs in each step, in order.
    pub(crate) scheduler: Scheduler,
    /// The variables recorded while the model runs.
    #[serde(default, skip_serializing_if = "Maybe::is_absent")]
    pub data_analytics: Maybe<DataAnalytics>,
}

/// The library (and version) model code targets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct AbmLibrary {
    /// Library name, compatible with codingLanguage (python: mesa, agentpy; julia: Agents.jl;
    /// java: MASON or Repast; netlogo: NetLogo).
    pub(crate) name: String,
    /// Library version such as '3.x' or '3.3'. It decides the idioms the code may use: Mesa 3
    /// creates agents as Agent(model) and counts steps in model.steps; it has no model.schedule.
    #[serde(default, skip_serializing_if = "Maybe::is_absent")]
    pub(crate) version: Maybe<String>,
}

/// A model-wide helper function.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct GlobalFunction {
    /// Function name; the code must define a function of this name.
    pub(crate) name: String,
    /// 'globalFunction.' followed by the name.
    pub(crate) source_name: String,
    /// What the function does, in plain words (no code).
    function_description: String,
    /// Parameters of the function, in order.
    #[serde(default, skip_serializing_if = "Maybe::is_absent")]
    pub(crate) function_inputs: Maybe<Vec<FunctionInput>>,
    /// Values the function returns.
    #[serde(default, skip_serializing_if = "Maybe::is_absent")]
    function_outputs: Maybe<Vec<FunctionOutput>>,
    execution_mode: ExecutionMode,
    /// The full function definition (signature, docstring, body) in codingLanguage. It may use
    /// globalVariable.<name> and globalFunction.<name> and nothing undeclared.
    pub(crate) code: String,
}

/// A parameter of a function or behavior.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct FunctionInput {
    /// Parameter name as written in the signature.
    pub(crate) name: String,
    /// What the parameter is for.
    description: String,
    #[serde(rename = "type")]
    var_type: VarType,
    /// Whether callers may leave the parameter out.
    pub(crate) optional: bool,
    /// Value used when an optional parameter is left out.
    #[serde(default, skip_serializing_if = "Maybe::is_absent")]
    default_value: Maybe<Scalar>,
}

/// A value returned by a function or behavior.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct FunctionOutput {
    /// Name of the returned value.
    name: String,
    /// What the value means.
    description: String,
    #[serde(rename = "type")]
    var_type: VarType,
}

/// A variable: a global variable, an environment attribute or an agent attribute (the three
/// share one structure and differ in their sourceName).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Variable {
    /// Name, usable as an identifier in code.
    pub name: String,
    /// What the variable represents and why the model needs it.
    description: String,
    #[serde(rename = "type")]
    pub(crate) var_type: VarType,
    /// Starting value: a literal, the sourceName of another variable, a framework reference
    /// such as 'self.unique_id', or a function call evaluated at initialization.
    pub initial_value: ValueOrCall,
    /// Fully qualified name: 'globalVariable.<name>',
    /// 'environment.environmentAttribute.<name>' or 'agent.<AgentType>.agentAttribute.<name>'.
    pub(crate) source_name: String,
}

/// The simulated world.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Environment {
    /// Name of the world, e.g. 'forest' or 'town'.
    name: String,
    /// What the world represents, in plain words.
    description: String,
    pub(crate) topology: Topology,
    /// Properties of the world itself, each with a type and a starting value.
    #[serde(default, skip_serializing_if = "Maybe::is_absent")]
    pub(crate) environment_attributes: Maybe<Vec<Variable>>,
    /// Functions that update the world; called with the environment as `self`.
    #[serde(default, skip_serializing_if = "Maybe::is_absent")]
    pub(crate) environment_behaviors: Maybe<Vec<EnvironmentBehavior>>,
}

/// The spatial structure of the environment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Topology {
    /// The structure in plain words, e.g. 'a wrap-around grid' or 'a scale-free social network'.
    description: String,
    /// none (agents have no location), grid or network.
    #[serde(rename = "type")]
    pub(crate) topology_type: TopologyType,
    /// For grids only: fixed edges or wrap-around (torus).
    #[serde(default, skip_serializing_if = "Maybe::is_absent")]
    pub(crate) boundary_conditions: Maybe<BoundaryConditions>,
}

/// A behavior of the environment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct EnvironmentBehavior {
    /// Behavior name; the code must define a function of this name.
    pub(crate) name: String,
    /// What the behavior does to the world, in plain words.
    description: String,
    /// Parameters after `self`.
    #[serde(default, skip_serializing_if = "Maybe::is_absent")]
    inputs: Maybe<Vec<FunctionInput>>,
    /// Values the behavior returns.
    #[serde(default, skip_serializing_if = "Maybe::is_absent")]
    outputs: Maybe<Vec<FunctionOutput>>,
    execution_mode: ExecutionMode,
    /// The full function definition, taking the environment as `self` (self.model is the
    /// model).
    pub(crate) code: String,
    /// 'environment.environmentBehavior.' followed by the name.
    pub(crate) source_name: String,
}

/// One agent type.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct AgentType {
    /// Properties every agent of this type carries. Their sourceNames name the type:
    /// 'agent.<AgentType>.agentAttribute.<name>'.
    pub(crate) agent_attributes: Vec<Variable>,
    /// How many agents of this type exist at the start: an integer, a reference to a global
    /// variable, or a function call.
    pub(crate) initial_count: ValueOrCall,
    /// What agents of this type do; each is called with the agent as `self`.
    #[serde(default, skip_serializing_if = "Maybe::is_absent")]
    pub(crate) agent_behaviors: Maybe<Vec<AgentBehavior>>,
}

/// A behavior of an agent type.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct AgentBehavior {
    /// Behavior name; the code must define a function of this name.
    pub(crate) name: String,
    /// What the agent does, in plain words.
    description: String,
    /// Parameters after `self`.
    #[serde(default, skip_serializing_if = "Maybe::is_absent")]
    inputs: Maybe<Vec<FunctionInput>>,
    /// Values the behavior returns.
    #[serde(default, skip_serializing_if = "Maybe::is_absent")]
    outputs: Maybe<Vec<FunctionOutput>>,
    pub(crate) execution_mode: ExecutionMode,
    /// 'agent.<AgentType>.agentBehavior.' followed by the name.
    pub(crate) source_name: String,
    /// The full function definition, taking the agent as `self` (self.model is the model,
    /// self.random its seeded random generator).
    pub(crate) code: String,
}

/// When the simulation stops.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct TerminationCriteria {
    /// Upper bound on the number of steps; the run stops there if no rule fired before.
    #[schemars(with = "f64")]
    pub(crate) max_steps: Number,
    /// Rules that end the run early when a watched variable reaches a value.
    #[serde(default, skip_serializing_if = "Maybe::is_absent")]
    pub(crate) termination_rules: Maybe<Vec<TerminationRule>>,
}

/// Stop when the variable named by sourceName equals value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct TerminationRule {
    /// sourceName of the watched variable or attribute (it must be declared, and code must keep
    /// it up to date).
    pub(crate) source_name: String,
    /// What the rule means.
    description: String,
    /// Data type of the value.
    #[serde(rename = "type")]
    pub(crate) value_type: String,
    pub(crate) value: ValueOrCall,
}

/// Set-up and per-step order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Scheduler {
    pub(crate) initialization: Initialization,
    pub(crate) schedule: Schedule,
}

/// What is set up before the first step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Initialization {
    /// The set-up sequence in plain words.
    description: String,
    /// Set-up steps; include a global function that seeds the starting conditions (for example
    /// the first infected agents) when every agent would otherwise start alike.
    pub(crate) initialization_order: Vec<InitializationItem>,
}

/// One set-up step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct InitializationItem {
    /// What is set up: a variable's sourceName, 'agent.<AgentType>.initialCount' to create the
    /// agents, or a global function's sourceName to run it.
    pub(crate) source_name: String,
    #[serde(rename = "type")]
    pub(crate) item_type: InitializationType,
    /// Position in the sequence, from 1.
    #[schemars(with = "f64")]
    pub(crate) order_in_initialization: Number,
}

/// What runs in each step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Schedule {
    /// The per-step sequence in plain words.
    description: String,
    /// The operations of one step, in order.
    pub(crate) schedule_order: Vec<ScheduleItem>,
}

/// One operation of a step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ScheduleItem {
    /// sourceName of the behavior or global function to run.
    pub(crate) source_name: String,
    #[serde(rename = "type")]
    pub(crate) item_type: ScheduleType,
    /// Position in the step, from 1.
    #[schemars(with = "f64")]
    pub(crate) order_in_schedule: Number,
}

/// The variables recorded while the model runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DataAnalytics {
    #[serde(default, skip_serializing_if = "Maybe::is_absent")]
    pub tracked_variables: Maybe<Vec<TrackedVariable>>,
}

/// A variable recorded every step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TrackedVariable {
    /// Why the variable is recorded.
    description: String,
    /// sourceName of a global variable, environment attribute or agent attribute.
    pub source_name: String,
    collection_level: CollectionLevel,
    check_time: CheckTime,
}

// ---------------------------------------------------------------------------------------------
// Around the model: the LLM's answer and the API envelope.
// ---------------------------------------------------------------------------------------------

/// What the LLM is asked to return (the root of the response schema).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LlmAbmResponse {
    pub(crate) model: AbmModel,
    /// Markdown. Explain briefly, in plain language, why the model is built this way and what
    /// changed from the previous model if there was one. Do not mention JSON or restate the
    /// request.
    pub(crate) explanation: String,
    /// A title of at most seven words summing up the explanation.
    pub(crate) title: String,
}

/// The sd-ai API envelope: `{success: true, model, supportingInfo}` or
/// `{success: false, message}`.
#[derive(Clone, Debug, PartialEq)]
pub enum AbmResponse {
    Success { model: Box<AbmModel>, supporting_info: SupportingInfo },
    Failure { message: String },
}

impl Serialize for AbmResponse {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            AbmResponse::Success { model, supporting_info } => {
                Generated { success: true, model, supporting_info: supporting_info.clone() }.serialize(s)
            }
            AbmResponse::Failure { message } => {
                GenerateFailed { success: false, message: message.clone() }.serialize(s)
            }
        }
    }
}

impl<'de> Deserialize<'de> for AbmResponse {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // The `success` flag decides the shape; buffer once, then parse the right one strictly.
        let v = Value::deserialize(d)?;
        match v.get("success") {
            Some(Value::Bool(true)) => {
                let w: Generated<AbmModel> = serde_json::from_value(v).map_err(de::Error::custom)?;
                Ok(AbmResponse::Success { model: Box::new(w.model), supporting_info: w.supporting_info })
            }
            Some(Value::Bool(false)) => {
                let w: GenerateFailed = serde_json::from_value(v).map_err(de::Error::custom)?;
                Ok(AbmResponse::Failure { message: w.message })
            }
            _ => Err(de::Error::custom("`success` must be true or false")),
        }
    }
}

/// A model file as found on disk: the API envelope, the LLM's `{model, explanation, title}`, or
/// a bare model.
#[derive(Clone, Debug, PartialEq)]
pub enum AbmDocument {
    Envelope(AbmResponse),
    LlmResponse(Box<LlmAbmResponse>),
    Bare(Box<AbmModel>),
}

impl AbmDocument {
    /// Parses any of the three forms strictly; errors name the JSON path of the bad field.
    pub fn parse(text: &str) -> Result<Self, AbmError> {
        let v: Value = serde_json::from_str(text).map_err(|e| AbmError::Parse(format!("not valid JSON: {e}")))?;
        Self::from_value(v)
    }

    /// Like [`AbmDocument::parse`], from an already parsed JSON value.
    pub(crate) fn from_value(v: Value) -> Result<Self, AbmError> {
        let obj = v.as_object().ok_or_else(|| AbmError::Parse("a model document must be a JSON object".into()))?;
        if obj.contains_key("success") {
            if obj.get("success") == Some(&Value::Bool(true)) {
                // Parse the success form with path tracking (the envelope's own Deserialize
                // would lose the path inside the model).
                let w: Generated<AbmModel> = parse_at(v)?;
                Ok(AbmDocument::Envelope(AbmResponse::Success {
                    model: Box::new(w.model),
                    supporting_info: w.supporting_info,
                }))
            } else {
                Ok(AbmDocument::Envelope(parse_at(v)?))
            }
        } else if obj.contains_key("model") {
            Ok(AbmDocument::LlmResponse(Box::new(parse_at(v)?)))
        } else {
            Ok(AbmDocument::Bare(Box::new(parse_at(v)?)))
        }
    }

    /// The model inside, if any (a failure envelope has none).
    pub fn model(&self) -> Option<&AbmModel> {
        match self {
            AbmDocument::Envelope(AbmResponse::Success { model, .. }) => Some(model),
            AbmDocument::Envelope(AbmResponse::Failure { .. }) => None,
            AbmDocument::LlmResponse(r) => Some(&r.model),
            AbmDocument::Bare(m) => Some(m),
        }
    }

    /// The JSON path prefix of the model inside the document (`"model."` or `""`).
    pub(crate) fn model_path_prefix(&self) -> &'static str {
        match self {
            AbmDocument::Bare(_) => "",
            _ => "model.",
        }
    }

    /// The document as JSON, in the form it was read.
    pub fn to_value(&self) -> Value {
        let r = match self {
            AbmDocument::Envelope(e) => serde_json::to_value(e),
            AbmDocument::LlmResponse(r) => serde_json::to_value(r),
            AbmDocument::Bare(m) => serde_json::to_value(m),
        };
        r.unwrap_or(Value::Null)
    }
}

/// Deserializes with the JSON path of the first error in the message.
fn parse_at<T: for<'de> Deserialize<'de>>(v: Value) -> Result<T, AbmError> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." || path.is_empty() {
            AbmError::Parse(inner.to_string())
        } else {
            AbmError::Parse(format!("{path}: {inner}"))
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Names: sourceNames and the agent types they imply.
// ---------------------------------------------------------------------------------------------

/// What a sourceName points at, parsed from its text.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum SourceRef {
    GlobalVariable(String),
    GlobalFunction(String),
    EnvironmentAttribute(String),
    EnvironmentBehavior(String),
    AgentAttribute { agent: String, name: String },
    AgentBehavior { agent: String, name: String },
    InitialCount { agent: String },
}

impl SourceRef {
    /// Parses a sourceName; `None` if it has none of the format's shapes.
    pub(crate) fn parse(s: &str) -> Option<SourceRef> {
        let parts: Vec<&str> = s.split('.').collect();
        let ident = |p: &str| is_identifier(p);
        match parts.as_slice() {
            ["globalVariable", n] if ident(n) => Some(SourceRef::GlobalVariable(n.to_string())),
            ["globalFunction", n] if ident(n) => Some(SourceRef::GlobalFunction(n.to_string())),
            ["environment", "environmentAttribute", n] if ident(n) => {
                Some(SourceRef::EnvironmentAttribute(n.to_string()))
            }
            ["environment", "environmentBehavior", n] if ident(n) => {
                Some(SourceRef::EnvironmentBehavior(n.to_string()))
            }
            ["agent", a, "agentAttribute", n] if ident(a) && ident(n) => {
                Some(SourceRef::AgentAttribute { agent: a.to_string(), name: n.to_string() })
            }
            ["agent", a, "agentBehavior", n] if ident(a) && ident(n) => {
                Some(SourceRef::AgentBehavior { agent: a.to_string(), name: n.to_string() })
            }
            ["agent", a, "initialCount"] if ident(a) => Some(SourceRef::InitialCount { agent: a.to_string() }),
            _ => None,
        }
    }

    /// True if the text starts like a sourceName (used to tell references from plain strings).
    pub(crate) fn looks_like(s: &str) -> bool {
        ["globalVariable.", "globalFunction.", "environment.", "agent."].iter().any(|p| s.starts_with(p))
            && !s.contains(char::is_whitespace)
    }

    /// The kind of element, for messages.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            SourceRef::GlobalVariable(_) => "global variable",
            SourceRef::GlobalFunction(_) => "global function",
            SourceRef::EnvironmentAttribute(_) => "environment attribute",
            SourceRef::EnvironmentBehavior(_) => "environment behavior",
            SourceRef::AgentAttribute { .. } => "agent attribute",
            SourceRef::AgentBehavior { .. } => "agent behavior",
            SourceRef::InitialCount { .. } => "initial count",
        }
    }
}

/// A Python-style identifier (ASCII letters, digits, underscore; not starting with a digit).
pub(crate) fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl AgentType {
    /// The type's name as its sourceNames give it (`agent.<Name>.…`), from the first attribute
    /// or behavior that has one. The format has no name field of its own.
    pub(crate) fn name(&self) -> Option<String> {
        let attrs = self.agent_attributes.iter().map(|a| a.source_name.as_str());
        let behaviors = self.agent_behaviors.items().iter().map(|b| b.source_name.as_str());
        attrs.chain(behaviors).find_map(|s| match SourceRef::parse(s)? {
            SourceRef::AgentAttribute { agent, .. } | SourceRef::AgentBehavior { agent, .. } => Some(agent),
            _ => None,
        })
    }
}

impl AbmModel {
    /// Every agent type with its position in the nested `agents` array.
    pub(crate) fn agent_types(&self) -> impl Iterator<Item = ((usize, usize), &AgentType)> {
        self.agents.iter().enumerate().flat_map(|(g, group)| group.iter().enumerate().map(move |(i, t)| ((g, i), t)))
    }

    /// The agent type whose sourceNames say `agent.<name>.…`.
    pub(crate) fn agent_type(&self, name: &str) -> Option<&AgentType> {
        self.agent_types().map(|(_, t)| t).find(|t| t.name().as_deref() == Some(name))
    }

    /// The declared global variable of that name.
    pub(crate) fn global_variable(&self, name: &str) -> Option<&Variable> {
        self.global_variables.items().iter().find(|v| v.name == name)
    }

    /// The declared environment attribute of that name.
    pub(crate) fn environment_attribute(&self, name: &str) -> Option<&Variable> {
        self.environment.environment_attributes.items().iter().find(|v| v.name == name)
    }

    /// The tracked variables (empty if none are declared).
    pub(crate) fn tracked_variables(&self) -> &[TrackedVariable] {
        self.data_analytics.get().map(|d| d.tracked_variables.items()).unwrap_or(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(text: &str) -> String {
        let doc = AbmDocument::parse(text).expect("parses");
        serde_json::to_string(&doc.to_value()).unwrap()
    }

    fn compact(text: &str) -> String {
        serde_json::to_string(&serde_json::from_str::<Value>(text).unwrap()).unwrap()
    }

    #[test]
    fn seed_example_round_trips_byte_for_byte() {
        let text = include_str!("../../tests/fixtures/abm/seed000_sir_example.json");
        // Compact text comparison, so property order counts (Value equality would not).
        assert_eq!(round_trip(text), compact(text));
        let doc = AbmDocument::parse(text).unwrap();
        assert!(matches!(doc, AbmDocument::Envelope(AbmResponse::Success { .. })));
        let model = doc.model().unwrap();
        assert_eq!(model.agents.len(), 1);
        assert_eq!(model.agents[0][0].name().as_deref(), Some("Person"));
        // null vs absent survives.
        assert_eq!(model.environment.topology.boundary_conditions, Maybe::Null);
        assert!(model.global_functions.get().is_some());
    }

    #[test]
    fn shipped_examples_round_trip() {
        for name in ["sir_network.json", "forest_fire.json", "wealth_exchange.json"] {
            let path = format!("{}/../assets/abm/{name}", env!("CARGO_MANIFEST_DIR"));
            let text = std::fs::read_to_string(&path).unwrap();
            assert_eq!(round_trip(&text), compact(&text), "{name}");
        }
    }

    #[test]
    fn absent_null_and_set_are_kept_apart() {
        let base = r#"{"description":"d","type":"grid"}"#;
        let with_null = r#"{"description":"d","type":"grid","boundaryConditions":null}"#;
        let set = r#"{"description":"d","type":"grid","boundaryConditions":"torus"}"#;
        for text in [base, with_null, set] {
            let t: Topology = serde_json::from_str(text).unwrap();
            assert_eq!(serde_json::to_string(&t).unwrap(), text);
        }
        let t: Topology = serde_json::from_str(set).unwrap();
        assert_eq!(t.boundary_conditions, Maybe::Set(BoundaryConditions::Torus));
    }

    #[test]
    fn numbers_keep_integer_or_float_form() {
        for text in ["1000", "0.3", "-1", "1.0", "true", "\"S\""] {
            let v: ValueOrCall = serde_json::from_str(text).unwrap();
            assert_eq!(serde_json::to_string(&v).unwrap(), text);
        }
        let v: ValueOrCall = serde_json::from_str(r#"{"function":"f","args":[1,"x",false]}"#).expect("call");
        assert!(matches!(v, ValueOrCall::Call(ref c) if c.function == "f" && c.args.len() == 3));
    }

    #[test]
    fn every_enum_spelling_is_accepted_and_written_back() {
        type Case = (&'static str, fn(&str) -> Result<String, serde_json::Error>);
        let cases: &[Case] = &[
            ("[\"integer\",\"float\",\"number\",\"string\",\"boolean\",\"array\",\"object\"]", |t| {
                serde_json::to_string(&serde_json::from_str::<Vec<VarType>>(t)?)
            }),
            ("[\"per-agent\",\"model-once\",\"model-batch\"]", |t| {
                serde_json::to_string(&serde_json::from_str::<Vec<ExecutionMode>>(t)?)
            }),
            ("[\"none\",\"grid\",\"network\"]", |t| {
                serde_json::to_string(&serde_json::from_str::<Vec<TopologyType>>(t)?)
            }),
            ("[\"fixed\",\"torus\"]", |t| serde_json::to_string(&serde_json::from_str::<Vec<BoundaryConditions>>(t)?)),
            (
                "[\"agentAttribute\",\"environmentAttribute\",\"globalVariable\",\"globalFunction\",\"initialCount\"]",
                |t| serde_json::to_string(&serde_json::from_str::<Vec<InitializationType>>(t)?),
            ),
            ("[\"agentBehavior\",\"environmentBehavior\",\"globalFunction\"]", |t| {
                serde_json::to_string(&serde_json::from_str::<Vec<ScheduleType>>(t)?)
            }),
            ("[\"model\",\"agent\"]", |t| serde_json::to_string(&serde_json::from_str::<Vec<CollectionLevel>>(t)?)),
            ("[\"start-of-step\",\"end-of-step\"]", |t| {
                serde_json::to_string(&serde_json::from_str::<Vec<CheckTime>>(t)?)
            }),
        ];
        for (text, f) in cases {
            assert_eq!(&f(text).unwrap(), text);
        }
        assert!(serde_json::from_str::<VarType>("\"int\"").is_err());
    }

    #[test]
    fn strict_parsing_names_the_path() {
        let text = include_str!("../../tests/fixtures/abm/seed000_sir_example.json");
        let mut v: Value = serde_json::from_str(text).unwrap();
        v["model"]["agents"][0][0]["agentBehaviors"][1]["executionMode"] = "sometimes".into();
        let err = AbmDocument::from_value(v).unwrap_err().to_string();
        assert!(err.contains("model.agents[0][0].agentBehaviors[1].executionMode"), "{err}");
        assert!(err.contains("sometimes"), "{err}");

        let mut v: Value = serde_json::from_str(text).unwrap();
        v["model"]["scheduler"]["schedule"]["colour"] = "red".into();
        let err = AbmDocument::from_value(v).unwrap_err().to_string();
        assert!(err.contains("model.scheduler.schedule"), "{err}");
        assert!(err.contains("colour"), "{err}");

        let mut v: Value = serde_json::from_str(text).unwrap();
        v["model"]["globalVariables"][0]["initialValue"] = serde_json::json!([1, 2]);
        let err = AbmDocument::from_value(v).unwrap_err().to_string();
        assert!(err.contains("model.globalVariables[0].initialValue"), "{err}");

        let mut v: Value = serde_json::from_str(text).unwrap();
        v["model"]["agents"][0][0]["initialCount"] = serde_json::json!({"function": "f"});
        let err = AbmDocument::from_value(v).unwrap_err().to_string();
        assert!(err.contains("model.agents[0][0].initialCount"), "{err}");
        assert!(err.contains("args"), "{err}");
    }

    #[test]
    fn failure_envelope_round_trips() {
        let text = r#"{"success":false,"message":"the LLM refused"}"#;
        assert_eq!(round_trip(text), text);
        let r: AbmResponse = serde_json::from_str(text).unwrap();
        assert_eq!(r, AbmResponse::Failure { message: "the LLM refused".into() });
        assert!(serde_json::from_str::<AbmResponse>(r#"{"success":"yes"}"#).is_err());
    }

    #[test]
    fn source_names_parse() {
        assert_eq!(
            SourceRef::parse("agent.Person.agentAttribute.status"),
            Some(SourceRef::AgentAttribute { agent: "Person".into(), name: "status".into() })
        );
        assert_eq!(
            SourceRef::parse("agent.Person.initialCount"),
            Some(SourceRef::InitialCount { agent: "Person".into() })
        );
        assert_eq!(SourceRef::parse("globalVariable.a b"), None);
        assert_eq!(SourceRef::parse("globalVariable.x.y"), None);
        assert_eq!(SourceRef::parse("population"), None);
    }
}
