//! Model generation with sd-ai's contract: `{prompt, lastModel?}` in, the API envelope out.
//!
//! The messages are: a system prompt (how to write a model in this format), then — when the
//! caller iterates on an earlier model — that model as an assistant message followed by a user
//! message asking to build on it, then the user's prompt. The structured-output call itself is
//! injected ([`StructuredLlm`]; a plain closure works); [`ProviderStructured`] makes it on any
//! LLM provider through the one structured-output API (`llm::structured`), which shapes the
//! schema for the provider's dialect. The messages are the LLM layer's own (`llm::chat`). The
//! answer is parsed strictly and validated before it is returned; when it has errors,
//! the LLM gets one chance (by default) to repair them, with the findings quoted back.
//! [`MockAbmLlm`] answers offline with one of the shipped example models, picked, titled and
//! given its number of steps by the description's words.

use serde_json::Value;

use super::model::{AbmResponse, LlmAbmResponse, SupportingInfo};
use super::schema::{SCHEMA_NAME, response_schema};
use super::validate::validate;
use crate::llm::ask::{AskError, until_valid};
use crate::llm::chat::{Message, Role};
use crate::llm::{BoxFuture, LlmError};

pub use crate::llm::ask::{ProviderStructured, StructuredLlm, StructuredRequest};
pub use simtree_shared::abm::GenerateRequest;

/// Prompts and the repair budget; the defaults are this module's prompts and one repair.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenerateOptions {
    system_prompt: String,
    assistant_prompt: String,
    /// How many times an answer with validation errors is sent back to be fixed.
    max_repairs: u32,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            system_prompt: SYSTEM_PROMPT.to_owned(),
            assistant_prompt: ASSISTANT_PROMPT.to_owned(),
            max_repairs: 1,
        }
    }
}

/// How the model is to be written; aimed at the mistakes the validator finds most.
pub(crate) const SYSTEM_PROMPT: &str = "\
You build agent-based simulation models. The user describes a system; you answer with one \
complete model in the required JSON structure, plus a short explanation and a title.

Work in this order:
1. Decide who the agents are (each agent type), what they carry (attributes) and what they do \
each step (behaviors).
2. Decide the world: its topology (none, grid or network) and any properties of its own.
3. Decide the model-wide parameters and counters (global variables) and helper functions.
4. Decide how the model is set up (initialization order), what happens in one step (schedule \
order), when it stops, and what is worth recording.

Rules for a model that runs:
- Every sourceName is exact: globalVariable.<name>, globalFunction.<name>, \
environment.environmentAttribute.<name>, environment.environmentBehavior.<name>, \
agent.<AgentType>.agentAttribute.<name>, agent.<AgentType>.agentBehavior.<name>, and \
agent.<AgentType>.initialCount in the initialization order. The agent type's name exists only in \
these sourceNames, so use one spelling throughout.
- Declare everything you use. Code reads and writes globalVariable.<name> and calls \
globalFunction.<name>(...); both must be declared. An agent's self.<name> must be one of its \
attributes or behaviors (or Mesa's own: model, pos, unique_id, random). A value written as \
{\"function\": name, \"args\": [...]} must name a declared function.
- A termination rule watches a declared variable; some scheduled code must keep that variable \
up to date (for example a counting function at the end of each step).
- Seed the starting conditions. If all agents start alike (everyone susceptible, every tree \
unburnt), add a global function to the initialization order that changes a few of them.
- Write code for Mesa 3 when the library is Mesa: agents are created as Agent(model), the step \
count is model.steps, all agents are model.agents, and there is no model.schedule, no mesa.time \
and no next_id(). Grid neighbourhood calls pass moore explicitly. Use self.random or \
model.random for chance, never numpy's global generator.
- Each code field is one complete function definition whose name is the element's name. \
Behaviors take the agent (or the environment) as self; global functions used as steps take \
the model as their first parameter.";

/// Sent after the previous model when iterating.
pub(crate) const ASSISTANT_PROMPT: &str = "\
The model above is the one you gave before. Build on it: change what the request below asks for, \
keep everything else as it is, and explain what you changed.";

/// Builds the message list of sd-ai's contract.
pub(crate) fn messages(options: &GenerateOptions, prompt: &str, last_model: Option<&Value>) -> Vec<Message> {
    let mut out = vec![Message::new(Role::System, options.system_prompt.as_str())];
    if let Some(last) = last_model {
        let text = serde_json::to_string_pretty(last).unwrap_or_default();
        out.push(Message::new(Role::Assistant, text));
        if !options.assistant_prompt.is_empty() {
            out.push(Message::new(Role::User, options.assistant_prompt.as_str()));
        }
    }
    out.push(Message::new(Role::User, prompt));
    out
}

/// Generates a model: never fails as a Rust error; every failure is the `{success: false,
/// message}` envelope, as sd-ai answers.
pub async fn generate(llm: &dyn StructuredLlm, request: &GenerateRequest, options: &GenerateOptions) -> AbmResponse {
    match generate_model(llm, request, options).await {
        Ok(r) => AbmResponse::Success {
            model: Box::new(r.model),
            supporting_info: SupportingInfo { explanation: r.explanation, title: r.title },
        },
        Err(e) => AbmResponse::Failure { message: e.to_string() },
    }
}

/// Why generation gave no model; the message is the `{success: false, message}` envelope's.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub(crate) enum GenerateError {
    #[error("the prompt is empty")]
    EmptyPrompt,
    /// The structured-output call failed (after the provider's retries).
    #[error("the LLM call failed: {0}")]
    Llm(#[source] LlmError),
    /// The last answer still had problems after the allowed repairs, one line each.
    #[error("the generated model is not valid:\n{}", .0.join("\n"))]
    Invalid(Vec<String>),
}

/// The generation loop: ask, parse, validate, and ask for repairs while errors remain.
async fn generate_model(
    llm: &dyn StructuredLlm,
    request: &GenerateRequest,
    options: &GenerateOptions,
) -> Result<LlmAbmResponse, GenerateError> {
    if request.prompt.trim().is_empty() {
        return Err(GenerateError::EmptyPrompt);
    }
    let req = StructuredRequest {
        messages: messages(options, &request.prompt, request.last_model.as_ref()),
        schema: response_schema(),
        schema_name: SCHEMA_NAME,
    };
    match until_valid(llm, req, options.max_repairs, "model", check_answer).await {
        Ok(passed) => Ok(passed.value),
        Err(AskError::Llm(e)) => Err(GenerateError::Llm(e)),
        Err(AskError::Invalid(problems)) => Err(GenerateError::Invalid(problems)),
    }
}

/// Parses an LLM answer strictly and validates its model: the response, or the problems (one
/// line each, with JSON paths).
pub(crate) fn check_answer(answer: &Value) -> Result<LlmAbmResponse, Vec<String>> {
    let parsed: LlmAbmResponse = serde_path_to_error::deserialize(answer.clone()).map_err(|e| {
        let path = e.path().to_string();
        vec![format!("{path}: {}", e.into_inner())]
    })?;
    let report = validate(&parsed.model).with_prefix("model.");
    if report.is_ok() { Ok(parsed) } else { Err(report.error_lines()) }
}

/// An offline stand-in for the LLM: answers with one of the shipped example models, picked by
/// keywords of the prompt (fire/forest/grid → forest fire; wealth/money/market/trade → wealth
/// exchange; anything else → the SIR network), titled and run for as many steps as it says.
#[derive(Clone, Copy, Debug, Default)]
pub struct MockAbmLlm;

/// The shipped examples the offline generator starts from, each with the words that pick it
/// (the first one a word of the description starts with wins; the last is the fallback).
const MOCK_TEMPLATES: [(&str, &str, &[&str]); 3] = [
    (
        include_str!("../../../assets/abm/forest_fire.json"),
        "Forest Fire on a Grid",
        &["fire", "forest", "grid", "burn", "tree"],
    ),
    (
        include_str!("../../../assets/abm/wealth_exchange.json"),
        "Random Wealth Exchange",
        &["wealth", "money", "market", "trade", "econom", "inequal"],
    ),
    (
        include_str!("../../../assets/abm/sir_network.json"),
        "SIR Epidemic on a Contact Network",
        &["sir", "epidem", "infect", "disease", "virus", "network"],
    ),
];

/// The most words of a description a title keeps (a title of the offline generator's).
const MOCK_TITLE_WORDS: usize = 7;

impl MockAbmLlm {
    /// The answer for a prompt, decided by its words alone (no model is called): the shipped
    /// example whose keywords it holds, titled with the description's first sentence, run for
    /// the number of steps it names ("for 50 steps"), with an explanation saying all that.
    pub fn answer(prompt: &str) -> Value {
        let p = prompt.to_lowercase();
        let said: Vec<&str> = p.split(|c: char| !c.is_alphanumeric()).collect();
        let picked = MOCK_TEMPLATES
            .iter()
            .find_map(|(text, title, words)| {
                // A keyword is a word's start ("econom": economy, economics).
                let found: Vec<&str> =
                    words.iter().copied().filter(|w| said.iter().any(|s| s.starts_with(w))).collect();
                (!found.is_empty()).then_some((*text, *title, found))
            })
            .unwrap_or_else(|| {
                let (text, title, _) = MOCK_TEMPLATES[MOCK_TEMPLATES.len() - 1];
                (text, title, Vec::new())
            });
        let (text, example, found) = picked;
        let doc = super::model::AbmDocument::parse(text).expect("shipped examples parse");
        let model = doc.model().expect("shipped examples hold a model").clone();
        let title = mock_title(prompt).unwrap_or_else(|| example.to_owned());
        let why = match found.as_slice() {
            [] => "default, since no example's keyword is in the description".to_string(),
            words => {
                format!("the description's {}", words.iter().map(|w| format!("\"{w}\"")).collect::<Vec<_>>().join(", "))
            }
        };
        let steps = mock_steps(&said);
        let mut explanation = format!(
            "Offline generator (no model was called): the shipped example \"{example}\", picked by {why}, titled from the description"
        );
        if let Some(n) = steps {
            explanation.push_str(&format!(", run for at most {n} steps as it asks"));
        }
        explanation.push('.');
        let mut answer = serde_json::to_value(LlmAbmResponse { model, explanation, title }).unwrap_or(Value::Null);
        if let (Some(n), Some(max)) = (steps, answer.pointer_mut("/model/terminationCriteria/maxSteps")) {
            *max = Value::from(n);
        }
        answer
    }
}

/// The description's first clause, at most [`MOCK_TITLE_WORDS`] words with no small word at
/// the end ("for", "of"…), capitalised; `None` when it has no word.
fn mock_title(prompt: &str) -> Option<String> {
    const SMALL: [&str; 12] = ["a", "an", "and", "at", "by", "for", "in", "of", "on", "the", "to", "with"];
    let clause = prompt.split(['.', ',', ':', ';', '!', '?', '\n']).next().unwrap_or_default();
    let mut words: Vec<&str> = clause.split_whitespace().take(MOCK_TITLE_WORDS).collect();
    while words.len() > 1 && words.last().is_some_and(|w| SMALL.contains(&w.to_lowercase().as_str())) {
        words.pop();
    }
    let title = words.join(" ");
    let mut chars = title.chars();
    let first = chars.next()?;
    Some(first.to_uppercase().chain(chars).collect())
}

/// The steps a description asks for: a number from 1 to 100,000 just before "step(s)",
/// "round(s)", "day(s)" or "tick(s)" (`said`: its lowercase words).
fn mock_steps(said: &[&str]) -> Option<u64> {
    const UNITS: [&str; 8] = ["step", "steps", "round", "rounds", "day", "days", "tick", "ticks"];
    let words: Vec<&str> = said.iter().copied().filter(|w| !w.is_empty()).collect();
    words.windows(2).find_map(|pair| {
        let n: u64 = pair[0].parse().ok()?;
        (UNITS.contains(&pair[1]) && (1..=100_000).contains(&n)).then_some(n)
    })
}

impl StructuredLlm for MockAbmLlm {
    fn complete<'a>(&'a self, request: &'a StructuredRequest) -> BoxFuture<'a, Result<Value, LlmError>> {
        let prompt = request.last_user_text();
        Box::pin(async move { Ok(MockAbmLlm::answer(&prompt)) })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    fn request(prompt: &str) -> GenerateRequest {
        GenerateRequest { prompt: prompt.into(), last_model: None }
    }

    #[tokio::test]
    async fn the_mock_answers_with_a_valid_model_that_follows_the_description() {
        for (prompt, example, title, steps) in [
            (
                "write me an SIR abm network model using python and mesa",
                "SIR Epidemic",
                "Write me an SIR abm network model",
                200,
            ),
            (
                "a forest fire spreading on a grid. Run it for 40 steps",
                "Forest Fire",
                "A forest fire spreading on a grid",
                40,
            ),
            ("agents trading money at random", "Wealth", "Agents trading money at random", 300),
            ("birds flocking for 25 ticks", "SIR Epidemic", "Birds flocking for 25 ticks", 25),
            ("a wildfire, burning for 30 days", "Forest Fire", "A wildfire", 30),
            ("people on a network of contacts", "SIR Epidemic", "People on a network of contacts", 200),
        ] {
            let r = generate(&MockAbmLlm, &request(prompt), &GenerateOptions::default()).await;
            match r {
                AbmResponse::Success { model, supporting_info } => {
                    assert_eq!(supporting_info.title, title, "{prompt}");
                    let why = &supporting_info.explanation;
                    assert!(why.starts_with("Offline generator") && why.contains(example), "{why}");
                    let model = serde_json::to_value(&*model).unwrap();
                    assert_eq!(model["terminationCriteria"]["maxSteps"], steps, "{prompt}");
                    let model = serde_json::from_value(model).unwrap();
                    assert!(validate(&model).is_ok());
                }
                AbmResponse::Failure { message } => panic!("{prompt}: {message}"),
            }
        }
        // The same words, the same answer.
        assert_eq!(MockAbmLlm::answer("a forest fire"), MockAbmLlm::answer("a forest fire"));
        assert_eq!(mock_title("   "), None);
    }

    #[test]
    fn messages_follow_the_contract() {
        let opts = GenerateOptions::default();
        let plain = messages(&opts, "build X", None);
        assert_eq!(plain.iter().map(|m| m.role).collect::<Vec<_>>(), [Role::System, Role::User]);
        assert_eq!(&*plain[1].content, "build X");
        let last = serde_json::json!({"codingLanguage": "python"});
        let iter = messages(&opts, "now add births", Some(&last));
        assert_eq!(
            iter.iter().map(|m| m.role).collect::<Vec<_>>(),
            [Role::System, Role::Assistant, Role::User, Role::User]
        );
        assert!(iter[1].content.contains("\"codingLanguage\": \"python\""));
        assert_eq!(&*iter[2].content, ASSISTANT_PROMPT);
        assert_eq!(&*iter[3].content, "now add births");
    }

    #[tokio::test]
    async fn an_invalid_answer_is_sent_back_once_then_reported() {
        // The seed's own example has two reference errors: the closure returns it every time.
        let seed: Value =
            serde_json::from_str(include_str!("../../tests/fixtures/abm/seed000_sir_example.json")).unwrap();
        let answer = serde_json::json!({
            "model": seed["model"], "explanation": "x", "title": "SIR"
        });
        let seen = Mutex::new(Vec::new());
        let llm = |req: &StructuredRequest| -> Result<Value, LlmError> {
            seen.lock().unwrap().push(req.messages.clone());
            Ok(answer.clone())
        };
        let r = generate(&llm, &request("SIR please"), &GenerateOptions::default()).await;
        let AbmResponse::Failure { message } = r else { panic!("expected a failure") };
        assert!(message.contains("model.agents[0][0].initialCount.function"), "{message}");
        assert!(message.contains("globalVariable.infectedCount"), "{message}");
        let seen = seen.into_inner().unwrap();
        assert_eq!(seen.len(), 2, "one repair round");
        let repair = &seen[1].last().unwrap().content;
        assert!(repair.contains("getTotalPopulation"), "{repair}");
        // The schema travels with every call.
        assert_eq!(serde_json::to_value(AbmResponse::Failure { message }).unwrap()["success"], false);
    }

    #[tokio::test]
    async fn a_repaired_answer_is_accepted() {
        let calls = Mutex::new(0);
        let llm = |req: &StructuredRequest| -> Result<Value, LlmError> {
            let mut n = calls.lock().unwrap();
            *n += 1;
            assert_eq!(req.schema_name, SCHEMA_NAME);
            if *n == 1 {
                Ok(serde_json::json!({"model": {"codingLanguage": "python"}, "explanation": "", "title": ""}))
            } else {
                Ok(MockAbmLlm::answer("fire"))
            }
        };
        let r = generate(&llm, &request("fire"), &GenerateOptions::default()).await;
        assert!(matches!(r, AbmResponse::Success { .. }), "{r:?}");
        assert_eq!(*calls.lock().unwrap(), 2);
    }

    #[tokio::test]
    async fn llm_errors_and_empty_prompts_become_failure_envelopes() {
        let llm =
            |_: &StructuredRequest| -> Result<Value, LlmError> { Err(LlmError::Request("connection refused".into())) };
        let r = generate(&llm, &request("x"), &GenerateOptions::default()).await;
        assert!(matches!(&r, AbmResponse::Failure { message } if message.contains("connection refused")));
        let r = generate(&MockAbmLlm, &request("  "), &GenerateOptions::default()).await;
        assert!(matches!(&r, AbmResponse::Failure { message } if message.contains("empty")));
    }

    #[test]
    fn the_request_body_is_camel_case() {
        let r: GenerateRequest = serde_json::from_str(r#"{"prompt": "p", "lastModel": {"a": 1}}"#).unwrap();
        assert_eq!(r.last_model, Some(serde_json::json!({"a": 1})));
        assert!(serde_json::from_str::<GenerateRequest>(r#"{"promt": "p"}"#).is_err());
    }
}
