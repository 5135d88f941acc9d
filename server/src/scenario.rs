//! Scenarios are data: one JSON file per scenario in `assets/scenarios/`, turned into a fresh
//! [`Simulator`]. Dropping a new file in the folder adds a scenario; a malformed file is rejected
//! with its file name and the JSON path of the offending field.
//!
//! ```json
//! { "title": "…", "description": "…",
//!   "scene": {"type": "council", "name": "council", "initial_event": "…", "config": {},
//!             "prose": {"description": "…", "rules": "…", "actions": {"vote": {"description": "…"}}}},
//!   "agents": [{"name": "Host", "style": "…", "user_profile": "…", "action_space": ["vote"]}],
//!   "ordering": {"kind": "sequential"}, "max_steps_per_turn": 5, "default_turns": 120,
//!   "seed": 0, "broadcasts": ["Participants: …"] }
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use simtree_shared::SceneProse;

use crate::engine::action::ActionKind;
use crate::engine::agent::{Agent, MAX_REPEAT};
use crate::engine::event::SceneEvent;
use crate::engine::ordering::Ordering;
use crate::engine::scenes::{Scene, SceneError, SceneKind};
use crate::engine::simulator::{DEFAULT_MAX_STEPS, MAX_STEPS_PER_TURN, SimOptions, Simulator};

/// A scenario that failed to load or build.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("{file}: {message}")]
    Invalid { file: String, message: String },
    #[error("cannot read {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("unknown scenario '{0}'")]
    Unknown(String),
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SceneSpec {
    #[serde(rename = "type")]
    pub(crate) kind: SceneKind,
    pub(crate) name: String,
    #[serde(default)]
    initial_event: String,
    #[serde(default)]
    pub(crate) config: Value,
    /// The document's own prose for the scene, part by part in place of the type's defaults.
    #[serde(default, skip_serializing_if = "SceneProse::is_empty")]
    prose: SceneProse,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AgentSpec {
    name: String,
    #[serde(default)]
    user_profile: String,
    #[serde(default)]
    style: String,
    #[serde(default)]
    initial_instruction: String,
    #[serde(default)]
    role_prompt: String,
    #[serde(default)]
    language: Option<String>,
    #[serde(default)]
    action_space: Vec<ActionKind>,
    #[serde(default)]
    properties: Map<String, Value>,
    #[serde(default)]
    emotion_enabled: Option<bool>,
    #[serde(default)]
    max_repeat: Option<u32>,
}

fn default_ordering() -> Ordering {
    Ordering::Sequential { names: vec![], idx: 0 }
}
fn default_steps() -> u32 {
    DEFAULT_MAX_STEPS
}
fn default_turns() -> u64 {
    50
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// File stem; filled in by the loader.
    #[serde(default, skip_serializing)]
    pub(crate) id: String,
    #[serde(default)]
    pub(crate) title: String,
    #[serde(default)]
    pub(crate) description: String,
    pub(crate) scene: SceneSpec,
    agents: Vec<AgentSpec>,
    #[serde(default = "default_ordering")]
    pub(crate) ordering: Ordering,
    #[serde(default = "default_steps")]
    pub(crate) max_steps_per_turn: u32,
    #[serde(default = "default_turns")]
    pub(crate) default_turns: u64,
    #[serde(default)]
    seed: u64,
    #[serde(default)]
    emotion_enabled: bool,
    /// Public announcements made after construction (upstream builders' extra broadcasts).
    #[serde(default)]
    broadcasts: Vec<String>,
}

impl Scenario {
    /// Parses one scenario file's text; `file` names it in errors.
    pub fn from_json(file: &str, text: &str) -> Result<Scenario, ScenarioError> {
        let invalid = |message: String| ScenarioError::Invalid { file: file.to_string(), message };
        let de = &mut serde_json::Deserializer::from_str(text);
        let mut scenario: Scenario = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            invalid(if path == "." { e.inner().to_string() } else { format!("{path}: {}", e.inner()) })
        })?;
        scenario.id = Path::new(file).file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        if scenario.agents.is_empty() {
            return Err(invalid("agents: a scenario needs at least one agent".into()));
        }
        scenario.check_catalogue(file)?;
        if !(1..=MAX_STEPS_PER_TURN).contains(&scenario.max_steps_per_turn) {
            return Err(invalid(format!(
                "max_steps_per_turn: must be between 1 and {MAX_STEPS_PER_TURN}, got {}",
                scenario.max_steps_per_turn
            )));
        }
        // Building once validates the scene config and cross-references (moderator, roles, map).
        scenario.build(None).map_err(|e| match e {
            ScenarioError::Invalid { message, .. } => invalid(message),
            other => other,
        })?;
        Ok(scenario)
    }

    /// Every agent's actions are its scene type's, and the scene's prose names only those.
    fn check_catalogue(&self, file: &str) -> Result<(), ScenarioError> {
        let scene = self.scene.kind;
        let invalid = |message: String| ScenarioError::Invalid { file: file.to_string(), message };
        for (i, agent) in self.agents.iter().enumerate() {
            if let Some((j, a)) = agent.action_space.iter().enumerate().find(|(_, a)| !scene.offers(**a)) {
                return Err(invalid(format!(
                    "agents[{i}].action_space[{j}]: {a} is not an action of the {scene} scene (its actions: {})",
                    simtree_shared::scene::list(scene)
                )));
            }
        }
        self.scene.prose.check(scene).map_err(|e| invalid(format!("scene.{e}")))
    }

    pub fn load_file(path: &Path) -> Result<Scenario, ScenarioError> {
        let (text, file, _) = read_asset(path, "scenarios")?;
        Scenario::from_json(&file, &text)
    }

    /// A scenario shipped in `assets/scenarios/<id>.json`, for tests.
    #[cfg(test)]
    pub(crate) fn shipped(id: &str) -> Scenario {
        let path = crate::embedded::assets_dir().unwrap().join(format!("scenarios/{id}.json"));
        Scenario::load_file(&path).unwrap()
    }

    /// Builds a fresh simulator; `seed` overrides the file's seed.
    pub fn build(&self, seed: Option<u64>) -> Result<Simulator, ScenarioError> {
        let invalid = |message: String| ScenarioError::Invalid { file: format!("scenarios/{}.json", self.id), message };
        let agents = self.agents.iter().map(AgentSpec::to_agent).collect();
        let s = &self.scene;
        let scene =
            Scene::build(s.kind, s.name.clone(), s.initial_event.clone(), s.config.clone()).map_err(|e| match e {
                // A custom scene's document names the path inside it.
                SceneError::Custom(c) => invalid(format!("scene.config.{c}")),
                SceneError::Config { path: Some(p), message } if s.kind == SceneKind::Custom => {
                    invalid(format!("scene.config.{}: {message}", p.trim_start_matches('.')))
                }
                e => invalid(format!("scene.config: {e}")),
            })?;
        let ordering = match (s.kind, &self.ordering) {
            (SceneKind::Custom, Ordering::Sequential { names, idx: 0 }) if names.is_empty() => Ordering::Controlled,
            (SceneKind::Custom, Ordering::Controlled) => Ordering::Controlled,
            (SceneKind::Custom, other) => {
                return Err(invalid(format!(
                    "ordering: a custom scene's phases say who acts; leave `ordering` out (got {})",
                    other.name()
                )));
            }
            (_, other) => other.clone(),
        };
        let opts = SimOptions {
            max_steps_per_turn: self.max_steps_per_turn,
            emotion_enabled: self.emotion_enabled,
            seed: seed.unwrap_or(self.seed),
            prose: (!s.prose.is_empty()).then(|| Arc::new(s.prose.clone())),
        };
        let mut sim = Simulator::build(agents, scene, ordering, opts).map_err(|e| invalid(e.to_string()))?;
        for text in &self.broadcasts {
            sim.broadcast(&SceneEvent::public(text.clone()));
        }
        sim.discard_output();
        Ok(sim)
    }
}

impl AgentSpec {
    fn to_agent(&self) -> Agent {
        let mut a = Agent::new(self.name.clone(), self.action_space.clone());
        a.user_profile = Arc::from(self.user_profile.as_str());
        a.style = Arc::from(self.style.as_str());
        a.initial_instruction = Arc::from(self.initial_instruction.as_str());
        a.role_prompt = Arc::from(self.role_prompt.as_str());
        if let Some(lang) = self.language.as_deref().filter(|l| !l.is_empty()) {
            a.language = Arc::from(lang);
        }
        a.properties = self.properties.clone();
        a.emotion_enabled = self.emotion_enabled.unwrap_or(false);
        a.max_repeat = self.max_repeat.unwrap_or(MAX_REPEAT);
        a
    }
}

/// A trading episode as a shipped scenario (`assets/trading/<id>.json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TradingScenario {
    #[serde(default, skip_serializing)]
    pub(crate) id: String,
    #[serde(default)]
    pub(crate) title: String,
    #[serde(default)]
    pub(crate) description: String,
    /// Decision points to run by default.
    #[serde(default = "default_turns")]
    pub(crate) default_turns: u64,
    pub episode: crate::trading::models::EpisodeConfig,
}

impl TradingScenario {
    pub(crate) fn load_file(path: &Path) -> Result<TradingScenario, ScenarioError> {
        let (text, file, id) = read_asset(path, "trading")?;
        let de = &mut serde_json::Deserializer::from_str(&text);
        let mut s: TradingScenario = serde_path_to_error::deserialize(de)
            .map_err(|e| ScenarioError::Invalid { file, message: format!("{}: {}", e.path(), e.inner()) })?;
        s.id = id;
        Ok(s)
    }
}

/// An asset file's text, its name for messages (`folder/name.json`) and its id (the stem).
fn read_asset(path: &Path, folder: &str) -> Result<(String, String, String), ScenarioError> {
    let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Io { path: path.into(), source })?;
    let name = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    let id = path.file_stem().map(|x| x.to_string_lossy().into_owned()).unwrap_or_default();
    Ok((text, format!("{folder}/{name}"), id))
}

/// An agent-based model shipped in `assets/abm/<id>.json` (sd-ai envelope or bare model).
#[derive(Clone, Debug)]
pub struct AbmScenario {
    pub(crate) id: String,
    pub(crate) title: String,
    pub(crate) description: String,
    pub(crate) model: crate::abm::model::AbmModel,
}

impl AbmScenario {
    pub(crate) fn load_file(path: &Path) -> Result<AbmScenario, ScenarioError> {
        let (text, file, id) = read_asset(path, "abm")?;
        let doc = crate::abm::model::AbmDocument::parse(&text)
            .map_err(|e| ScenarioError::Invalid { file: file.clone(), message: e.to_string() })?;
        let model = doc.model().cloned().ok_or_else(|| ScenarioError::Invalid {
            file,
            message: "the file holds a failure envelope, not a model".into(),
        })?;
        let info: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        let text_of = |key: &str| abm_text(&info, key);
        let title = text_of("title");
        let description = text_of("explanation");
        Ok(AbmScenario { title: if title.is_empty() { id.clone() } else { title }, id, description, model })
    }
}

/// A text field (`title`, `explanation`) of an agent-based model document in any of its three
/// shapes: the API envelope (under `supportingInfo`), an LLM answer (`{model, explanation,
/// title}`) or a bare model (none: empty).
pub(crate) fn abm_text(doc: &Value, key: &str) -> String {
    doc["supportingInfo"][key].as_str().or(doc[key].as_str()).unwrap_or_default().to_string()
}

/// The scenarios of the assets folder, sorted by id: social scenes, trading episodes and
/// agent-based models.
#[derive(Clone, Debug, Default)]
pub struct ScenarioLibrary {
    pub(crate) scenarios: Vec<Scenario>,
    pub(crate) trading: Vec<TradingScenario>,
    pub(crate) abm: Vec<AbmScenario>,
}

impl ScenarioLibrary {
    /// Loads every `*.json` in `dir`; the first malformed file is an error.
    pub fn load_dir(dir: &Path) -> Result<Self, ScenarioError> {
        let scenarios = json_files(dir)?.iter().map(|p| Scenario::load_file(p)).collect::<Result<_, _>>()?;
        Ok(ScenarioLibrary { scenarios, trading: Vec::new(), abm: Vec::new() })
    }

    /// Loads `assets/scenarios` and, when present, `assets/trading` and `assets/abm`.
    pub fn load_assets(assets: &Path) -> Result<Self, ScenarioError> {
        let mut lib = ScenarioLibrary::load_dir(&assets.join("scenarios"))?;
        let (trading, abm) = (assets.join("trading"), assets.join("abm"));
        if trading.is_dir() {
            lib.trading =
                json_files(&trading)?.iter().map(|p| TradingScenario::load_file(p)).collect::<Result<_, _>>()?;
        }
        if abm.is_dir() {
            lib.abm = json_files(&abm)?.iter().map(|p| AbmScenario::load_file(p)).collect::<Result<_, _>>()?;
        }
        Ok(lib)
    }

    pub(crate) fn abm(&self, id: &str) -> Option<&AbmScenario> {
        self.abm.iter().find(|s| s.id == id)
    }

    pub fn trading(&self, id: &str) -> Option<&TradingScenario> {
        self.trading.iter().find(|s| s.id == id)
    }

    pub fn get(&self, id: &str) -> Result<&Scenario, ScenarioError> {
        self.scenarios.iter().find(|s| s.id == id).ok_or_else(|| ScenarioError::Unknown(id.to_string()))
    }

    pub fn ids(&self) -> Vec<&str> {
        self.scenarios
            .iter()
            .map(|s| s.id.as_str())
            .chain(self.trading.iter().map(|s| s.id.as_str()))
            .chain(self.abm.iter().map(|s| s.id.as_str()))
            .collect()
    }
}

/// The `*.json` files of a folder, sorted.
fn json_files(dir: &Path) -> Result<Vec<PathBuf>, ScenarioError> {
    let entries = std::fs::read_dir(dir).map_err(|source| ScenarioError::Io { path: dir.into(), source })?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    Ok(paths)
}

/// Agents a social scenario brought by a user may have (every agent is an LLM call per step).
pub(crate) const MAX_DOCUMENT_AGENTS: usize = 500;
/// Agents an agent-based model brought by a user may start with, where its counts are literals
/// or global variables (counts computed by code are bounded by the worker's memory limit).
pub(crate) const MAX_DOCUMENT_ABM_AGENTS: u64 = 5000;

/// A scenario a user brought as a document (`POST /devui/simtree` with `{"scenario": {…}}`,
/// `simtree run --scenario-file`), checked by the same code as the shipped files. Which kind it
/// is follows from its shape: `scene` makes a social scenario, `episode` a trading one, anything
/// else is read as an agent-based model document (sd-ai envelope, `{model, …}` or bare).
#[derive(Clone, Debug)]
pub enum UserScenario {
    Social(Scenario),
    Trading(TradingScenario),
    Abm(AbmScenario),
}

impl UserScenario {
    /// Parses and checks `doc`; `id` becomes the scenario's id. Errors name the JSON path inside
    /// the document (prefixed `scenario.` for social and trading documents, as the request
    /// holds it; an ABM finding carries the validator's path).
    pub fn from_document(id: &str, doc: &Value) -> Result<UserScenario, ScenarioError> {
        let invalid = |message: String| ScenarioError::Invalid { file: "scenario".into(), message };
        let obj = doc.as_object().ok_or_else(|| invalid("a scenario document must be a JSON object".into()))?;
        if obj.contains_key("scene") {
            if let Some(n) = obj.get("agents").and_then(Value::as_array).map(Vec::len)
                && n > MAX_DOCUMENT_AGENTS
            {
                return Err(invalid(format!("agents: {n} agents; a scenario may have at most {MAX_DOCUMENT_AGENTS}")));
            }
            let mut s = Scenario::from_json("scenario", &doc.to_string())?;
            s.id = id.to_string();
            return Ok(UserScenario::Social(s));
        }
        if obj.contains_key("episode") {
            let mut s: TradingScenario =
                serde_path_to_error::deserialize(doc).map_err(|e| invalid(format!("{}: {}", e.path(), e.inner())))?;
            s.id = id.to_string();
            return Ok(UserScenario::Trading(s));
        }
        let parsed = crate::abm::model::AbmDocument::from_value(doc.clone()).map_err(|e| invalid(e.to_string()))?;
        let model = parsed
            .model()
            .cloned()
            .ok_or_else(|| invalid("the document holds a failure envelope, not a model".into()))?;
        let report = crate::abm::validate::validate_document(&parsed);
        if !report.is_ok() {
            return Err(invalid(report.error_lines().join("; ")));
        }
        let agents = abm_initial_agents(&model);
        if agents > MAX_DOCUMENT_ABM_AGENTS {
            return Err(invalid(format!(
                "{}agents: the model starts with {agents} agents; at most {MAX_DOCUMENT_ABM_AGENTS}",
                parsed.model_path_prefix()
            )));
        }
        let text = |key: &str| abm_text(doc, key);
        let title = text("title");
        Ok(UserScenario::Abm(AbmScenario {
            id: id.to_string(),
            title: if title.is_empty() { id.to_string() } else { title },
            description: text("explanation"),
            model,
        }))
    }

    /// The document's own title, if it has one (a tree made from it is named after it).
    pub(crate) fn title(&self) -> &str {
        match self {
            UserScenario::Social(s) => &s.title,
            UserScenario::Trading(t) => &t.title,
            UserScenario::Abm(a) => &a.title,
        }
    }
}

/// Agents a model starts with, counting the types whose `initialCount` is a number or names a
/// global variable with a numeric initial value.
fn abm_initial_agents(model: &crate::abm::model::AbmModel) -> u64 {
    let globals = model.global_variables.items();
    let count = |v: &Value| match v {
        Value::Number(n) => n.as_f64().map(|f| f.max(0.0) as u64),
        Value::String(name) => globals
            .iter()
            .find(|g| &g.source_name == name)
            .and_then(|g| g.initial_value.to_json().as_f64())
            .map(|f| f.max(0.0) as u64),
        _ => None,
    };
    model.agents.iter().flatten().filter_map(|t| count(&t.initial_count.to_json())).fold(0u64, u64::saturating_add)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use serde_json::json;

    use super::*;
    use crate::llm::chat::Message;
    use crate::llm::{BoxFuture, LlmClient, LlmError, LlmState, MockClient};

    fn council_doc() -> Value {
        let path = crate::embedded::assets_dir().unwrap().join("scenarios/council.json");
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    fn refusal(doc: &Value) -> String {
        UserScenario::from_document("doc", doc).unwrap_err().to_string()
    }

    #[test]
    fn an_agent_holds_only_its_scene_types_actions() {
        let mut doc = council_doc();
        doc["agents"][1]["action_space"] = json!(["vote", "send_message", "night_kill", "play_cards"]);
        assert_eq!(
            refusal(&doc),
            "scenario: agents[1].action_space[2]: night_kill is not an action of the council scene (its actions: \
             speak, send_message, talk_to, yield, web_search, view_page, schedule_order, start_voting, \
             finish_meeting, request_brief, voting_status, vote)"
        );
        doc["agents"][1]["action_space"] = json!(["vote"]);
        doc["scene"]["prose"] = json!({"actions": {"inspect": {"description": "look"}}});
        assert!(
            refusal(&doc)
                .starts_with("scenario: scene.prose.actions.inspect: inspect is not an action of the council scene"),
            "{}",
            refusal(&doc)
        );
        doc["scene"]["prose"] = json!({"actions": {"vote": {"description": "two\nlines"}}});
        assert!(refusal(&doc).contains("scene.prose.actions.vote.description: must be one line"));
        doc["scene"]["prose"] = json!({"scenery": "x"});
        assert!(refusal(&doc).starts_with("scenario: scene.prose.scenery: unknown field `scenery`"));
    }

    /// Passes every call to the mock and keeps each system prompt it was sent.
    #[derive(Default)]
    struct Prompts(Mutex<Vec<String>>);

    impl LlmClient for Prompts {
        fn chat<'a>(
            &'a self,
            messages: &'a [Message],
            state: &'a mut LlmState,
        ) -> BoxFuture<'a, Result<String, LlmError>> {
            self.0.lock().unwrap().push(messages[0].content.to_string());
            MockClient.chat(messages, state)
        }
    }

    fn first_prompt(doc: &Value) -> String {
        let UserScenario::Social(s) = UserScenario::from_document("doc", doc).unwrap() else { unreachable!() };
        let mut sim = s.build(None).unwrap();
        let prompts = Prompts::default();
        let (report, _) = sim.run_blocking(1, &prompts);
        report.unwrap();
        let first = prompts.0.lock().unwrap()[0].clone();
        let asked = sim.fork().interview("Host", "q").unwrap();
        assert!(asked[0].content.contains(&first[first.find("\n\nLanguage").unwrap()..]));
        first
    }

    #[test]
    fn a_documents_prose_replaces_the_scene_types_in_every_prompt() {
        let mut doc = council_doc();
        let default = first_prompt(&doc);
        assert!(default.contains("chamber of a legislative council") && default.contains("follow the Host"));
        assert!(default.contains("- start_voting: (Host) open a voting round on a titled question\n"));

        doc["agents"][0]["user_profile"] = json!("The foreperson of the jury.");
        doc["scene"]["prose"] = json!({
            "description": "A jury room: twelve jurors deliberate on the case they heard.",
            "rules": "- Weigh the evidence; the foreperson calls the vote.",
            "actions": {"start_voting": {"description": "(foreperson) call for a verdict", "usage": "- To call for a verdict:\n<Action name=\"start_voting\"><title>verdict</title></Action>"}}
        });
        let own = first_prompt(&doc);
        assert!(!own.contains("legislative") && !own.contains("Host chairs") && !own.contains("follow the Host"));
        assert!(!own.contains("Chat guidelines"), "the rules replace the chat room's too");
        assert!(own.contains("\n\nA jury room: twelve jurors deliberate on the case they heard.\n\n- Weigh the evidence; the foreperson calls the vote.\n\nAction Space:"));
        assert!(own.contains("- start_voting: (foreperson) call for a verdict\n"));
        assert!(own.contains("Usage:\n- To call for a verdict:\n<Action name=\"start_voting\"><title>verdict</title></Action>\n- To close"));
        // What the document left alone keeps the default.
        assert!(own.contains("- finish_meeting: (Host) close the council session; this ends the scene\n"));
    }

    #[test]
    fn shipped_scenarios_keep_to_their_catalogues() {
        let lib = ScenarioLibrary::load_dir(&crate::embedded::assets_dir().unwrap().join("scenarios")).unwrap();
        assert_eq!(lib.scenarios.len(), 12);
        for s in &lib.scenarios {
            assert!(s.scene.prose.is_empty(), "{}", s.id);
            assert!(s.build(None).unwrap().prose().is_none(), "{}", s.id);
        }
    }
}
