//! "Describe in words" for scenes the user writes (`POST /api/documents/generate`): a custom
//! scene document from a description, written by the server's model (the offline mock without
//! one), checked exactly as `POST /api/documents/check` checks it, and sent back with its
//! problems until it passes or the repair budget is spent (`llm::ask`, the loop agent-based
//! models are generated with).
//!
//! A generated document never carries Python hooks: code the model wrote is not run, even in the
//! sandbox, before a person has read it. The mock answers with the shipped custom game closest
//! to the description, titled and described in the user's words; asked to build on a document,
//! it keeps that document (the user's edits) and takes the new description.

use serde_json::{Value, json};
use simtree_shared::{GenerateDocumentRequest, GeneratedDocument};

use super::check::Scenarios;
use super::{WorkbenchError, error::RequestError};
use crate::backend::Backend;
use crate::llm::ask::{AskError, ProviderStructured, StructuredLlm, StructuredRequest, until_valid};
use crate::llm::chat::{Message, Role};
use crate::llm::{BoxFuture, LlmError};

/// The longest description taken.
pub(crate) const MAX_PROMPT_CHARS: usize = 20_000;
/// How many times a document with problems is sent back.
const MAX_REPAIRS: u32 = 2;

/// The shipped custom games: the mock's answers and the prompt's worked example.
const JURY: &str = include_str!("../../../assets/scenarios/custom_jury.json");
const PUBLIC_GOODS: &str = include_str!("../../../assets/scenarios/custom_public_goods.json");
const ULTIMATUM: &str = include_str!("../../../assets/scenarios/custom_ultimatum.json");
const TOWN_HALL: &str = include_str!("../../../assets/scenarios/custom_town_hall.json");

/// How a custom scene document is written; the worked example follows it.
const SYSTEM_PROMPT: &str = "\
You design multi-agent social scenes for an LLM simulation workbench. The user describes a \
situation; you answer with one complete scenario document in JSON whose scene has \
\"type\": \"custom\". Agents are played by language models that read the setting, the rules, \
their role's instructions and the actions open to them, and answer with one action per turn.

The document has: title, description, scene {type: \"custom\", name, initial_event, config}, \
agents [{name, style, user_profile, properties: {role}}] and optionally default_turns.
scene.config has:
- setting and rules: prose every agent reads.
- roles: [{name, instructions, moderator?}]; every agent's properties.role names one.
- variables: [{name, type: int|number|string|bool|list, initial, per_agent?}].
- tallies: [{name, kind: majority|unanimity|plurality|sum, voters?: [role]}].
- actions: [{name, description, params: [{name, type: enum|int|number|string|agent, values?, \
min?, max?, max_length?, description?}], roles?, phases?, when?, require?: [{check, message}], \
visibility?: public | {private_to: param} | {roles: [..]} | moderator, effects: [..]}].
- effects, each an object with one key: say (text), reveal (text), set {var, value, agent?}, \
add {var, value, agent?}, transfer {var, amount, to, from?}, vote {tally, choice}, clear_votes \
(tally), eliminate (agent), mute (agent), unmute (agent), goto (phase), end (outcome).
- phases: [{name, description, actors: all | {roles: [..]} | an expression, order?, end: \
{turns: n} | {all_acted: true} | {when: expression}, on_enter?, on_exit?, next?}].
- outcomes: the names the scene can end with; endings decide them.
- metrics: [{name, value, description}] numbers sweeps and explorations can read.
Every value, condition and text with expressions is CEL over: vars, me, agents, agent, phase, \
round, turn, tallies, params. Strings in effects are CEL expressions: quote literal text, e.g. \
\"'I accept.'\" or \"'I offer ' + string(params.amount) + ' coins.'\".
Use only names you declare; every phase must be reachable and the scene must be able to end. \
Do not write hooks. Answer with an object of two fields: document_json, the whole document as \
JSON text, and explanation, a few sentences on the scene and the choices you made.

A complete, valid example:
";

/// The response schema: the document as JSON text, and a few sentences on it. Text, not an
/// object: a strict structured-output mode (OpenAI's) allows no free-form object, and a custom
/// scene's config is too rich to state as a strict schema; its problems are found by the check
/// after the answer, each at its path.
fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "document_json": {"type": "string", "description": "the whole scenario document as JSON text"},
            "explanation": {"type": "string", "description": "what the scene is and the choices made, in a few sentences"}
        },
        "required": ["document_json", "explanation"]
    })
}

/// The document inside an answer: its `document_json` parsed (an answer that is the document
/// itself is taken too).
fn document_of(answer: &Value) -> Result<Value, Vec<String>> {
    let problem = |p: String| vec![p];
    match answer.get("document_json") {
        Some(Value::String(text)) => {
            serde_json::from_str(text).map_err(|e| problem(format!("document_json: not a JSON document: {e}")))
        }
        Some(_) => Err(problem("document_json: must be the document as JSON text".into())),
        None if answer.get("scene").is_some() => Ok(answer.clone()),
        None => Err(problem("document_json: missing".into())),
    }
}

/// The messages: how to write a document (with the example), then — when building on one — the
/// document as it stands and a request to change only what the description asks, then the
/// description.
fn messages(prompt: &str, last: Option<&Value>) -> Vec<Message> {
    let mut out = vec![Message::new(Role::System, format!("{SYSTEM_PROMPT}{ULTIMATUM}"))];
    if let Some(last) = last {
        out.push(Message::new(Role::Assistant, serde_json::to_string_pretty(last).unwrap_or_default()));
        out.push(Message::new(
            Role::User,
            "The document above is the one you gave before, possibly edited since. Build on it: \
             change what the request below asks for and keep everything else as it is.",
        ));
    }
    out.push(Message::new(Role::User, prompt));
    out
}

/// The offline writer: the shipped custom game closest to the description (by its words), in
/// the user's title and description; building on a document, that document with the new
/// description.
pub(crate) struct MockSceneWriter;

impl MockSceneWriter {
    pub(crate) fn answer(prompt: &str, last: Option<&Value>) -> Value {
        let mut doc = match last {
            Some(last) => last.clone(),
            None => {
                let p = prompt.to_lowercase();
                let has = |words: &[&str]| words.iter().any(|w| p.contains(w));
                let text = if has(&["jury", "juror", "verdict", "trial", "court", "guilty"]) {
                    JURY
                } else if has(&["contribut", "public good", "pot", "commons", "donat", "free rid"]) {
                    PUBLIC_GOODS
                } else if has(&["ultimatum", "offer", "split", "bargain", "propos", "divide"]) {
                    ULTIMATUM
                } else {
                    TOWN_HALL
                };
                serde_json::from_str(text).unwrap_or(Value::Null)
            }
        };
        let first = prompt.split(['.', '\n']).next().unwrap_or(prompt).trim();
        if let Some(o) = doc.as_object_mut() {
            if last.is_none() {
                o.insert("title".into(), json!(first.chars().take(80).collect::<String>()));
            }
            o.insert("description".into(), json!(prompt.trim().chars().take(1_000).collect::<String>()));
        }
        doc
    }
}

impl StructuredLlm for MockSceneWriter {
    fn complete<'a>(&'a self, request: &'a StructuredRequest) -> BoxFuture<'a, Result<Value, LlmError>> {
        // The document built on is the assistant message before the last user message.
        let last = request
            .messages
            .iter()
            .rev()
            .find(|m| m.role == Role::Assistant)
            .and_then(|m| serde_json::from_str::<Value>(m.content.as_ref()).ok())
            .and_then(|v| document_of(&v).ok());
        let prompt = request.last_user_text();
        let document = MockSceneWriter::answer(&prompt, last.as_ref());
        Box::pin(async move {
            Ok(json!({
                "document_json": document.to_string(),
                "explanation": "Offline mock: the shipped custom game closest to the description, under its words; \
                                no LLM was called. Edit it, or run with a provider for a document written for it."
            }))
        })
    }
}

impl Scenarios<'_> {
    /// `POST /api/documents/generate`: a custom scene document that passes the document check.
    pub(crate) async fn generate_document(
        &self,
        req: GenerateDocumentRequest,
    ) -> Result<GeneratedDocument, WorkbenchError> {
        let chars = req.prompt.trim().chars().count();
        if chars == 0 {
            return Err(RequestError::EmptyPrompt.into());
        }
        if chars > MAX_PROMPT_CHARS {
            return Err(RequestError::PromptLength { chars, max: MAX_PROMPT_CHARS }.into());
        }
        if req.last_document.as_ref().is_some_and(|d| !d.is_object()) {
            return Err(RequestError::LastDocumentNotObject.into());
        }
        let request = StructuredRequest {
            messages: messages(&req.prompt, req.last_document.as_ref()),
            schema: schema(),
            schema_name: "scenario_document",
        };
        let wb = std::sync::Arc::clone(self.0);
        let check = move |answer: &Value| -> Result<(Value, String), Vec<String>> {
            let explanation = answer["explanation"].as_str().unwrap_or_default().to_string();
            let answer = &document_of(answer)?;
            if answer.pointer("/scene/config/hooks").is_some() {
                return Err(vec![
                    "scene.config.hooks: leave hooks out; the user writes them after reading the document".into(),
                ]);
            }
            if answer.pointer("/scene/type").and_then(Value::as_str) != Some("custom") {
                return Err(vec!["scene.type: must be \"custom\"".into()]);
            }
            Scenarios(&wb)
                .check_document(answer)
                .map(|_| (answer.clone(), explanation))
                .map_err(|e| vec![e.to_string()])
        };
        let (writer, passed) = match &self.backend {
            Backend::Mock => {
                ("mock".to_string(), until_valid(&MockSceneWriter, request, MAX_REPAIRS, "document", check).await)
            }
            Backend::Provider(ps) => {
                let provider = ps.resolve(None, None)?;
                let label = provider.label();
                let llm = ProviderStructured { provider };
                (label, until_valid(&llm, request, MAX_REPAIRS, "document", check).await)
            }
        };
        let passed = passed.map_err(|e| match e {
            AskError::Llm(e) => WorkbenchError::GenerateFailed(e),
            AskError::Invalid(problems) => WorkbenchError::GeneratedInvalid(problems),
        })?;
        let (document, explanation) = passed.value;
        Ok(GeneratedDocument { document, explanation, repairs: passed.repairs, writer })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mock_picks_the_closest_game_and_takes_the_users_words() {
        for (prompt, name) in [
            ("Twelve jurors deliberate a verdict. They vote until unanimous.", "jury"),
            ("Players contribute to a common pot each round.", "public_goods"),
            ("A proposer offers a split of a prize.", "ultimatum"),
            ("Residents discuss a new park.", "town_hall"),
        ] {
            let doc = MockSceneWriter::answer(prompt, None);
            assert_eq!(doc["scene"]["type"], "custom");
            assert!(doc["scene"]["name"].as_str().unwrap().contains(name), "{prompt}: {}", doc["scene"]["name"]);
            assert_eq!(doc["title"], prompt.split('.').next().unwrap());
            assert_eq!(doc["description"], prompt);
        }
        let mut edited = MockSceneWriter::answer("A jury.", None);
        edited["agents"][0]["name"] = json!("Edited");
        let again = MockSceneWriter::answer("Make it a civil case.", Some(&edited));
        assert_eq!(again["agents"][0]["name"], "Edited", "building on a document keeps its edits");
        assert_eq!(again["description"], "Make it a civil case.");
        assert_eq!(again["title"], edited["title"]);
    }
}
