//! The wire types of an agent-based model that leave the server: its node view ([`AbmView`]),
//! the branch patches and termination it carries, the payload of an `abm_step` event
//! ([`AbmStep`]), and [`AbmOutline`], the part of an abm-quant model the UI reads.
//!
//! The model itself travels as JSON ([`AbmView::model`]): its full Rust form lives with the
//! server's validator, which keeps its property order and optional-field states exactly.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A counterfactual change applied to a running model (a branch op).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "target", rename_all = "camelCase")]
pub enum AbmPatch {
    /// Set a global variable.
    GlobalVariable { name: String, value: Value },
    /// Set an environment attribute.
    EnvironmentAttribute { name: String, value: Value },
    /// Set an attribute of every agent of a type, or of the one with `agentId`.
    #[serde(rename_all = "camelCase")]
    AgentAttribute {
        agent_type: String,
        name: String,
        value: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent_id: Option<u64>,
    },
}

impl AbmPatch {
    /// The new value.
    pub fn value(&self) -> &Value {
        match self {
            AbmPatch::GlobalVariable { value, .. }
            | AbmPatch::EnvironmentAttribute { value, .. }
            | AbmPatch::AgentAttribute { value, .. } => value,
        }
    }

    /// The sourceName the patch writes (for logs and edge labels).
    pub fn source_name(&self) -> String {
        match self {
            AbmPatch::GlobalVariable { name, .. } => format!("globalVariable.{name}"),
            AbmPatch::EnvironmentAttribute { name, .. } => format!("environment.environmentAttribute.{name}"),
            AbmPatch::AgentAttribute { agent_type, name, .. } => format!("agent.{agent_type}.agentAttribute.{name}"),
        }
    }
}

/// Why a model stopped.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Termination {
    /// `rule` (a termination rule fired), `maxSteps`, or `running` (model code set
    /// `model.running = False`).
    pub reason: String,
    /// The rule's sourceName for `rule`.
    pub source_name: Option<String>,
}

/// The `abm` variant of a node view.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AbmView {
    /// The abm-quant model specification (seed 000's JSON).
    pub model: Value,
    pub seed: u64,
    /// Steps run from the seed to this node.
    pub steps: u64,
    /// Set once the model has stopped; advancing it further runs nothing.
    pub terminated: Option<Termination>,
    /// Branch patches waiting for the next step.
    pub pending: Vec<AbmPatch>,
    /// Size of the pickled state this server holds for the node; `null` when it has none.
    pub snapshot_bytes: Option<u64>,
}

impl AbmView {
    /// What the UI reads of the model; an empty outline when the model does not parse as one.
    pub fn outline(&self) -> AbmOutline {
        serde_json::from_value(self.model.clone()).unwrap_or_default()
    }
}

/// The `data` of an `abm_step` event: the tracked variables (by sourceName) at one step.
/// Model-level values are plain JSON; agent-level ones are arrays ordered by agent id.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AbmStep {
    pub step: u64,
    pub values: Map<String, Value>,
}

impl crate::EventPayload for AbmStep {
    const KIND: crate::EventType = crate::EventType::AbmStep;
}

/// The parts of an abm-quant model the UI shows and edits: its topology, global variables,
/// environment attributes and agent types' attributes. Other fields are ignored.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct AbmOutline {
    #[serde(default)]
    pub global_variables: Option<Vec<AbmVariable>>,
    #[serde(default)]
    pub environment: AbmEnvironmentOutline,
    /// Groups of agent types (an array of arrays).
    #[serde(default)]
    pub agents: Vec<Vec<AbmAgentOutline>>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct AbmEnvironmentOutline {
    #[serde(default)]
    pub topology: AbmTopologyOutline,
    #[serde(default)]
    pub environment_attributes: Option<Vec<AbmVariable>>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AbmTopologyOutline {
    /// `none`, `grid` or `network`.
    #[serde(rename = "type", default)]
    pub kind: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct AbmAgentOutline {
    #[serde(default)]
    pub agent_attributes: Vec<AbmVariable>,
}

/// A declared variable: a global, an environment attribute or an agent attribute.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct AbmVariable {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// The declared type (`integer`, `number`, `boolean`, `string`, …).
    #[serde(rename = "type", default)]
    pub var_type: String,
    /// A literal, a reference or a function call (`{functionName, …}`).
    #[serde(default)]
    pub initial_value: Value,
    /// `globalVariable.<name>`, `environment.environmentAttribute.<name>` or
    /// `agent.<Type>.agentAttribute.<name>`.
    #[serde(default)]
    pub source_name: String,
}

impl AbmOutline {
    /// Every agent attribute with its agent type (from its sourceName
    /// `agent.<Type>.agentAttribute.<name>`), in declaration order; attributes whose sourceName
    /// does not name a type are skipped.
    pub fn agent_attributes(&self) -> impl Iterator<Item = (&str, &AbmVariable)> {
        self.agents.iter().flatten().flat_map(|def| &def.agent_attributes).filter_map(|v| {
            let mut parts = v.source_name.split('.');
            match (parts.next(), parts.next()) {
                (Some("agent"), Some(kind)) => Some((kind, v)),
                _ => None,
            }
        })
    }
}

// ---- Generating and checking a model (`/api/abm/generate`, `/api/abm/validate`) ----

/// The body of `POST /api/abm/generate`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GenerateRequest {
    pub prompt: String,
    /// The model to iterate on, as the client holds it (passed to the LLM verbatim).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_model: Option<Value>,
}

/// Explanation and title returned beside a generated model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct SupportingInfo {
    pub explanation: String,
    pub title: String,
}

/// The reply of `POST /api/abm/generate` that has a model (sd-ai's envelope, `success: true`).
/// The server writes its own model type as `M`; a reader may keep the model as JSON.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Generated<M = Value> {
    pub success: bool,
    pub model: M,
    pub supporting_info: SupportingInfo,
}

/// The reply of `POST /api/abm/generate` without a model (`success: false`) and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct GenerateFailed {
    pub success: bool,
    pub message: String,
}

/// How serious a validator's finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

/// One finding of the model validator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Issue {
    pub severity: Severity,
    /// The class of finding, e.g. `unresolved-reference`.
    pub code: String,
    /// JSON path, e.g. `terminationCriteria.terminationRules[0].sourceName`.
    pub path: String,
    pub message: String,
}

impl std::fmt::Display for Issue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{sev}[{}] {}: {}", self.code, self.path, self.message)
    }
}

/// The reply of `POST /api/abm/validate`: `ok` when no finding is an error.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Validation {
    pub ok: bool,
    pub issues: Vec<Issue>,
}
