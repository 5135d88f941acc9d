//! The scenario library's wire types (`/api/scenarios`): scenarios users save, in versions,
//! next to the shipped ones.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::SimKind;

/// A saved scenario's version: `{id, version}`, what `POST /api/scenarios` and `PUT
/// /api/scenarios/{id}` answer. Written `id@version` where a scenario is named by text
/// (`POST /devui/simtree {"scenario": "mine@2"}`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct SavedRef {
    pub id: String,
    /// 1 for the first version, one more for each `PUT`.
    pub version: u64,
}

impl std::fmt::Display for SavedRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.id, self.version)
    }
}

/// `POST /api/scenarios`: saves `document` (any kind `POST /devui/simtree` takes inline) as
/// version 1 of scenario `name`. The name is the scenario's id: 1 to 64 of `A-Z a-z 0-9 _ . -`,
/// not starting with `.` or `-`, and no shipped scenario's id.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct NewScenario {
    pub name: String,
    pub document: Value,
}

/// `PUT /api/scenarios/{id}`: the document of the scenario's next version (earlier versions are
/// kept and stay readable).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ScenarioUpdate {
    pub document: Value,
}

/// Where a scenario of the library comes from: shipped with simtree (read-only) or saved by a
/// user (editable, versioned).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ScenarioOrigin {
    #[default]
    Shipped,
    Saved,
}

/// `GET /api/scenarios/{id}` (`?version=N` for an earlier version of a saved one): a scenario's
/// document, shipped or saved.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ScenarioDocument {
    pub id: String,
    pub origin: ScenarioOrigin,
    /// The version shown: the latest unless one was asked for (a shipped scenario has only 1).
    pub version: u64,
    /// Every version kept, oldest first (`[1]` for a shipped scenario).
    pub versions: Vec<u64>,
    pub kind: SimKind,
    pub title: String,
    /// The document, as `POST /devui/simtree {"scenario": …}` takes it.
    pub document: Value,
}

/// `POST /api/documents/check` and `POST /api/documents/preview`: a document as the New page
/// holds it (any kind `POST /devui/simtree` takes inline). Nothing is made or kept.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct DocumentRequest {
    pub document: Value,
}

/// `POST /api/documents/generate`: a custom scene document written from a description in words
/// ("Describe in words"), or — with `last_document` — the document as it stands changed as the
/// description asks. Nothing is made or kept.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct GenerateDocumentRequest {
    pub prompt: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_document: Option<Value>,
}

/// `POST /api/documents/generate` → 200: a document that passes `POST /api/documents/check`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GeneratedDocument {
    pub document: Value,
    /// What was written and why, in the model's words (or the offline mock's).
    pub explanation: String,
    /// How many times the model's answer was sent back with its problems before it passed.
    pub repairs: u32,
    /// Who wrote it: `mock` offline, else the provider's `dialect:model`.
    pub writer: String,
}

/// `POST /api/documents/check` → 200: the document would make a tree. A refusal is a 422 whose
/// `detail` is the one creating the tree would give and whose `path` is the JSON path it names.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ScenarioChecked {
    pub kind: SimKind,
    /// The document's title (empty when it has none).
    pub title: String,
}

/// `POST /api/documents/preview` → one entry per role (per agent where agents have no role):
/// the prompt the first agent of that role sends on its first turn, before anyone has acted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RolePrompt {
    /// The role (`properties.role`), when the agent has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// The agent whose prompt this is.
    pub agent: String,
    /// The other agents of the role, whose prompts differ only where their own name, profile and
    /// style appear.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also: Vec<String>,
    /// The system prompt, then what the agent has heard (as the model receives them).
    pub messages: Vec<crate::CallMessage>,
}

/// The JSON path (inside the document) a document's refusal names: `scenario: agents[0].action_space[1]: unknown …`
/// gives `agents[0].action_space[1]`, a validator's `error[code] model.x.y: …` gives `model.x.y`.
pub fn refusal_path(detail: &str) -> Option<String> {
    let mut rest = detail.strip_prefix("scenario: ").unwrap_or(detail);
    // A trading episode's own checks name paths inside `episode`.
    let within = if let Some(r) = rest.strip_prefix("episode config: ") {
        rest = r;
        "episode."
    } else {
        ""
    };
    if rest.starts_with("error[") || rest.starts_with("warning[") {
        rest = rest.split_once("] ")?.1;
    }
    let (path, _) = rest.split_once(": ")?;
    let is_path =
        !path.is_empty() && path.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '[' | ']'));
    is_path.then(|| format!("{within}{path}"))
}
