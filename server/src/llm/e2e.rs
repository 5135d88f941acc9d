//! An end-to-end smoke check against a real OpenAI-compatible server — in practice SmolLM2-135M
//! behind llama-cpp-python's server (commands in docs/providers.md). It checks the protocol's shape,
//! never the content: a small model's answers are fluent nonsense.
//!
//! Used by the real-model tests in `tests/tests/real_llm.rs`, which `cargo xtask test` runs.

use std::time::Instant;

use serde_json::{Value, json};

use super::chat::{ChatRequest, JsonSchema, Message, Role};
use super::config::{Dialect, LlmConfig};
use super::provider::{build_provider, structured_response};
use super::{LlmClient, LlmError, LlmState, ProviderClient};

/// What the smoke run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct SmokeReport {
    /// The plain chat answer (through the engine's `LlmClient` path).
    pub text: String,
    /// The structured answer, validated against its schema.
    pub structured: Value,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub seconds: f64,
    /// Completion tokens over wall time of both calls (prompt processing included).
    pub tokens_per_s: f64,
}

/// A config for a local llama-cpp-python server: model alias `smollm2`, a generous timeout for a
/// contended CPU, no retries. The structured-output form is left at its default (`json_schema`),
/// which that server refuses: the provider finds `json_object` + `schema` by itself.
pub fn local_config(base_url: &str) -> LlmConfig {
    let mut c = LlmConfig::for_dialect(Dialect::OpenAi);
    c.model = "smollm2".into();
    c.base_url = Some(base_url.to_string());
    c.max_tokens = 64;
    c.temperature = 0.2;
    c.timeout_s = 180.0;
    c.max_retries = 0;
    c.max_concurrency = 1;
    c
}

/// One plain chat through [`ProviderClient`] (the engine's path) and one [`structured_response`]
/// call; errors if either breaks the protocol (no text, no usage, invalid JSON).
pub async fn smoke(config: &LlmConfig) -> Result<SmokeReport, LlmError> {
    let provider = build_provider(config).map_err(|e| LlmError::Request(e.to_string()))?;
    let mut state = LlmState::default();
    let start = Instant::now();

    let usage = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = usage.clone();
    let client = ProviderClient::new(provider.clone()).with_observer(move |r| {
        if let Ok(resp) = r.result {
            seen.lock().unwrap_or_else(|p| p.into_inner()).push(resp.usage);
        }
    });
    let messages = [
        Message::new(Role::System, "You are Ada. Answer in one short sentence."),
        Message::new(Role::User, "What colour is the sky on a clear day?"),
    ];
    let text = client.chat(&messages, &mut state).await?;
    if text.is_empty() {
        return Err(LlmError::Response("the plain chat returned no text".into()));
    }
    let plain = usage.lock().unwrap_or_else(|p| p.into_inner())[0];
    if plain.prompt_tokens == 0 || plain.completion_tokens == 0 {
        return Err(LlmError::Response(format!("the plain chat reported no token usage: {plain:?}")));
    }

    let schema = JsonSchema::new(
        "answer",
        json!({"type": "object", "properties": {"colour": {"type": "string"}},
               "required": ["colour"]}),
    );
    let request = ChatRequest::new(vec![
        Message::new(Role::System, "Reply with JSON only."),
        Message::new(Role::User, "Name the colour of grass as {\"colour\": …}."),
    ]);
    let (structured, resp) = structured_response(provider.as_ref(), request, schema, &mut state).await?;

    let seconds = start.elapsed().as_secs_f64();
    let completion_tokens = plain.completion_tokens + resp.usage.completion_tokens;
    Ok(SmokeReport {
        text,
        structured,
        prompt_tokens: plain.prompt_tokens + resp.usage.prompt_tokens,
        completion_tokens,
        seconds,
        tokens_per_s: completion_tokens as f64 / seconds.max(1e-9),
    })
}
