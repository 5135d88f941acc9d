//! Asking an LLM for a document until it passes its checks: a structured-output call (messages
//! and a response schema in, a JSON object out), the answer checked, and, while it has problems,
//! the problems quoted back for a corrected answer (up to a repair budget). Agent-based models
//! (`abm::generate`) and custom scene documents (`workbench::generate`) are both written this
//! way. The call itself is injected ([`StructuredLlm`]; a plain closure works, and each kind's
//! offline mock is one); [`ProviderStructured`] makes it on any provider through
//! [`super::structured`], which shapes the schema for the provider's dialect.

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use super::chat::{ChatRequest, JsonSchema, Message, Role};
use super::{BoxFuture, ChatProvider, LlmError, LlmState, structured};

/// What the structured-output call receives.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StructuredRequest {
    pub(crate) messages: Vec<Message>,
    /// The response schema (wrapped per provider by [`super::structured`]).
    pub(crate) schema: Value,
    /// The schema's name (OpenAI's `json_schema.name`).
    pub(crate) schema_name: &'static str,
}

impl StructuredRequest {
    /// The last user message: what an offline mock answers to.
    pub(crate) fn last_user_text(&self) -> String {
        self.messages.iter().rev().find(|m| m.role == Role::User).map(|m| m.content.to_string()).unwrap_or_default()
    }
}

/// A structured-output LLM call: messages + schema in, the parsed JSON object out.
pub trait StructuredLlm: Send + Sync {
    fn complete<'a>(&'a self, request: &'a StructuredRequest) -> BoxFuture<'a, Result<Value, LlmError>>;
}

/// Any synchronous closure is a [`StructuredLlm`] (tests, adapters that block).
impl<F> StructuredLlm for F
where
    F: Fn(&StructuredRequest) -> Result<Value, LlmError> + Send + Sync,
{
    fn complete<'a>(&'a self, request: &'a StructuredRequest) -> BoxFuture<'a, Result<Value, LlmError>> {
        let out = self(request);
        Box::pin(async move { out })
    }
}

/// The structured-output call on a real provider: OpenAI json_schema strict, Gemini
/// responseSchema, Anthropic a forced tool, the mock an example of the schema.
pub struct ProviderStructured {
    pub provider: Arc<dyn ChatProvider>,
}

impl StructuredLlm for ProviderStructured {
    fn complete<'a>(&'a self, req: &'a StructuredRequest) -> BoxFuture<'a, Result<Value, LlmError>> {
        Box::pin(async move {
            let schema = JsonSchema::new(req.schema_name, req.schema.clone());
            let request = ChatRequest::new(req.messages.clone());
            structured(&*self.provider, request, schema, &mut LlmState::default()).await
        })
    }
}

/// Why no document passed its checks.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub(crate) enum AskError {
    /// The structured-output call failed (after the provider's retries).
    #[error("the LLM call failed: {0}")]
    Llm(#[source] LlmError),
    /// The last answer still had problems after the allowed repairs, one line each.
    #[error("{}", .0.join("\n"))]
    Invalid(Vec<String>),
}

/// What passed, and how many repairs it took.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Passed<T> {
    pub(crate) value: T,
    pub(crate) repairs: u32,
}

/// Asks `llm` with `req`, checks each answer with `check` (the value, or its problems one line
/// each), and sends the problems back while `max_repairs` allows, asking for the whole corrected
/// `what` ("model", "scenario document").
pub(crate) async fn until_valid<T>(
    llm: &dyn StructuredLlm,
    mut req: StructuredRequest,
    max_repairs: u32,
    what: &str,
    check: impl Fn(&Value) -> Result<T, Vec<String>>,
) -> Result<Passed<T>, AskError> {
    let mut repairs = 0;
    loop {
        let answer = llm.complete(&req).await.map_err(AskError::Llm)?;
        let problems = match check(&answer) {
            Ok(value) => return Ok(Passed { value, repairs }),
            Err(problems) => problems,
        };
        if repairs >= max_repairs {
            return Err(AskError::Invalid(problems));
        }
        repairs += 1;
        req.messages.push(Message::new(Role::Assistant, serde_json::to_string_pretty(&answer).unwrap_or_default()));
        req.messages.push(Message::new(
            Role::User,
            format!(
                "That {what} cannot be used as it is. Fix these problems and answer with the whole corrected {what}:\n{}",
                problems.join("\n")
            ),
        ));
    }
}
