//! The `gemini` dialect: `POST {base}/models/{model}:generateContent`.
//!
//! Request: system messages become `systemInstruction` (upstream sent them as a user turn; the
//! API has had a proper field for a long time), the rest `contents` with roles `user`/`model`:
//! an assistant's tool calls as `functionCall` parts of its `model` turn, and tool results as
//! `functionResponse` parts (consecutive results in one `user` turn, named after the call they
//! answer, the result under `output`);
//! sampling in `generationConfig` (`temperature`, `topP`, `maxOutputTokens`, penalties only when
//! non-zero); a response schema as `responseMimeType: application/json` plus `responseSchema`
//! (converted by [`schema::to_gemini`], which also sets `propertyOrdering`); tools as
//! `functionDeclarations` with `toolConfig.functionCallingConfig`. The key travels in the
//! `x-goog-api-key` header, never in the URL, so no error or log line can carry it.
//!
//! Response: the first candidate's text parts joined (thought parts skipped), its
//! `functionCall`s, `usageMetadata`; a blocked prompt (`promptFeedback.blockReason`) or a
//! safety-type `finishReason` is a refusal.
//!
//! Streaming: `:streamGenerateContent?alt=sse`, whose events are partial responses; their parts
//! are joined, the last finish reason and usage kept ([`GeminiStream`]). The stream has no end
//! marker: it ends with the body, and one that ends before a finish reason is incomplete.

use serde_json::{Map, Value, json};

use super::LlmError;
use super::chat::{CacheHow, CacheUse, ChatRequest, ChatResponse, Message, Role, ToolChoice, Usage};
use super::config::{Dialect, LlmConfig};
use super::schema;
use super::wire::{ExplicitCache, StreamError, StreamReader, Wire, event_json, put_sampling, tool_call};

/// Finish reasons that mean a filter withheld the answer.
const BLOCKED: [&str; 6] = ["SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY"];

/// The generateContent mapping.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct GeminiWire;

/// The conversation as `contents` (system messages go to `systemInstruction`).
fn contents(messages: &[Message]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for m in messages {
        match m.role {
            Role::System => {}
            Role::Tool => {
                let part = json!({"functionResponse": {
                    "name": called_name(messages, m.tool_call_id()),
                    "response": {"output": json_or_text(&m.content)}}});
                // Results of one turn's calls travel together, in one user turn.
                let last = out.last_mut().filter(|c| c["parts"][0].get("functionResponse").is_some());
                match last.and_then(|c| c["parts"].as_array_mut()) {
                    Some(parts) => parts.push(part),
                    None => out.push(json!({"role": "user", "parts": [part]})),
                }
            }
            Role::Assistant if !m.tool_calls().is_empty() => {
                let mut parts = Vec::new();
                if !m.content.is_empty() {
                    parts.push(json!({"text": m.content.as_ref()}));
                }
                for c in m.tool_calls() {
                    parts.push(json!({"functionCall": {"name": c.name, "args": c.arguments_object()}}));
                }
                out.push(json!({"role": "model", "parts": parts}));
            }
            role => {
                let role = if role == Role::Assistant { "model" } else { "user" };
                out.push(json!({"role": role, "parts": [{"text": m.content.as_ref()}]}));
            }
        }
    }
    out
}

/// The name of the call `id` answers (Gemini matches results to calls by name), found among the
/// assistant's calls; `unknown` when no call has that id.
fn called_name<'a>(messages: &'a [Message], id: Option<&str>) -> &'a str {
    messages
        .iter()
        .flat_map(|m| m.tool_calls())
        .find(|c| c.id.is_some() && c.id.as_deref() == id)
        .map_or("unknown", |c| c.name.as_str())
}

/// A tool result as JSON when it is JSON, else as its text.
fn json_or_text(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| json!(text))
}

impl Wire for GeminiWire {
    fn dialect(&self) -> Dialect {
        Dialect::Gemini
    }

    fn url(&self, config: &LlmConfig, _: &ChatRequest) -> String {
        let model = config.model.trim_start_matches("models/");
        format!("{}/models/{model}:generateContent", config.endpoint())
    }

    fn headers(&self, config: &LlmConfig) -> Vec<(&'static str, String)> {
        config.api_key.iter().map(|k| ("x-goog-api-key", k.expose().to_string())).collect()
    }

    fn body(&self, config: &LlmConfig, request: &ChatRequest) -> Value {
        let mut b = Map::new();
        match &request.cache.cached {
            // The cached content holds the system instruction and the first messages: only the
            // rest is sent (a request naming a cache may not set its own system instruction).
            Some((name, len)) => {
                let rest = contents(&request.messages[(*len).min(request.messages.len())..]);
                b.insert("contents".into(), Value::Array(rest));
                b.insert("cachedContent".into(), json!(name));
            }
            None => {
                b.insert("contents".into(), Value::Array(contents(&request.messages)));
                if let Some(sys) = request.system_text() {
                    b.insert("systemInstruction".into(), json!({"parts": [{"text": sys}]}));
                }
            }
        }
        let mut g = Map::new();
        put_sampling(
            &mut g,
            config,
            request,
            ["temperature", "topP", "maxOutputTokens", "frequencyPenalty", "presencePenalty"],
        );
        if let Some(s) = &request.response_schema {
            g.insert("responseMimeType".into(), json!("application/json"));
            g.insert("responseSchema".into(), schema::to_gemini(&s.schema));
        }
        b.insert("generationConfig".into(), Value::Object(g));
        if !request.tools.is_empty() {
            let decls: Vec<Value> = request
                .tools
                .iter()
                .map(|t| {
                    json!({"name": t.name, "description": t.description,
                           "parameters": schema::to_gemini(&t.parameters)})
                })
                .collect();
            b.insert("tools".into(), json!([{"functionDeclarations": decls}]));
            let cfg = match &request.tool_choice {
                ToolChoice::Auto => json!({"mode": "AUTO"}),
                ToolChoice::None => json!({"mode": "NONE"}),
                ToolChoice::Required => json!({"mode": "ANY"}),
                ToolChoice::Tool(name) => json!({"mode": "ANY", "allowedFunctionNames": [name]}),
            };
            b.insert("toolConfig".into(), json!({"functionCallingConfig": cfg}));
        }
        Value::Object(b)
    }

    fn stream(&self, config: &LlmConfig, _request: &ChatRequest, _body: &mut Value) -> Option<String> {
        let model = config.model.trim_start_matches("models/");
        Some(format!("{}/models/{model}:streamGenerateContent?alt=sse", config.endpoint()))
    }

    fn stream_reader(&self) -> Box<dyn StreamReader> {
        Box::new(GeminiStream::default())
    }

    fn cache(&self, _config: &LlmConfig, request: &ChatRequest) -> CacheUse {
        match &request.cache.cached {
            Some((name, len)) => CacheUse {
                how: CacheHow::CachedContent,
                cached_content: Some(name.clone()),
                cached_messages: *len as u32,
                ..CacheUse::default()
            },
            None => CacheUse { how: CacheHow::Implicit, ..CacheUse::default() },
        }
    }

    fn explicit_cache(&self) -> Option<&dyn ExplicitCache> {
        Some(self)
    }

    fn parse(&self, body: &Value) -> Result<ChatResponse, LlmError> {
        let count = |k: &str| body.pointer(&format!("/usageMetadata/{k}")).and_then(Value::as_u64).unwrap_or(0);
        let usage = Usage {
            prompt_tokens: count("promptTokenCount"),
            // Thinking models bill their thoughts as output.
            completion_tokens: count("candidatesTokenCount") + count("thoughtsTokenCount"),
            // Implicit caching: Gemini serves repeated prefixes by itself and says how many.
            cached_tokens: count("cachedContentTokenCount"),
            cache_write_tokens: 0,
        };
        let Some(cand) = body.get("candidates").and_then(Value::as_array).and_then(|c| c.first()) else {
            if let Some(reason) = body.pointer("/promptFeedback/blockReason").and_then(Value::as_str) {
                return Ok(ChatResponse {
                    usage,
                    refusal: Some(format!("the prompt was blocked by the safety filter (blockReason {reason})")),
                    finish_reason: Some(reason.to_string()),
                    ..ChatResponse::default()
                });
            }
            return Err(LlmError::Response("the response has no candidates".into()));
        };
        let finish_reason = cand.get("finishReason").and_then(Value::as_str).map(str::to_string);
        let refusal = finish_reason
            .as_deref()
            .filter(|r| BLOCKED.contains(r))
            .map(|r| format!("the answer was blocked by the safety filter (finishReason {r})"));
        let mut text = String::new();
        let mut tool_calls = Vec::new();
        for part in cand.pointer("/content/parts").and_then(Value::as_array).into_iter().flatten() {
            if part.get("thought").and_then(Value::as_bool) == Some(true) {
                continue;
            }
            if let Some(t) = part.get("text").and_then(Value::as_str) {
                text.push_str(t);
            }
            if let Some(call) = part.get("functionCall") {
                tool_calls.push(tool_call(call, "args", "a functionCall part")?);
            }
        }
        Ok(ChatResponse {
            text: text.trim().to_string(),
            tool_calls,
            usage,
            refusal,
            finish_reason,
            // The latency, the cut at the limit, retries and cache use: the provider's to set.
            ..ChatResponse::default()
        })
    }
}

/// `cachedContents`: `POST {base}/cachedContents` with the model, the system instruction and
/// the first messages as `contents`, and a `ttl`; the answer's `name` (`cachedContents/…`) is
/// sent as `cachedContent` by the calls that use it; `DELETE {base}/{name}` removes it.
impl ExplicitCache for GeminiWire {
    /// Gemini 2.5's documented minimums: 4,096 tokens for Pro models, 1,024 for the others.
    fn minimum_tokens(&self, config: &LlmConfig) -> u64 {
        if config.model.contains("pro") { 4096 } else { 1024 }
    }

    fn create(&self, config: &LlmConfig, request: &ChatRequest, len: usize, ttl_s: u64) -> (String, Value) {
        let prefix = &request.messages[..len.min(request.messages.len())];
        let model = config.model.trim_start_matches("models/");
        let mut b = Map::new();
        b.insert("model".into(), json!(format!("models/{model}")));
        b.insert("contents".into(), Value::Array(contents(prefix)));
        if let Some(sys) = request.system_text() {
            b.insert("systemInstruction".into(), json!({"parts": [{"text": sys}]}));
        }
        b.insert("ttl".into(), json!(format!("{ttl_s}s")));
        (format!("{}/cachedContents", config.endpoint()), Value::Object(b))
    }

    fn name(&self, answer: &Value) -> Option<String> {
        answer.get("name").and_then(Value::as_str).filter(|n| n.starts_with("cachedContents/")).map(str::to_string)
    }

    /// A cached content's `usageMetadata.totalTokenCount`.
    fn tokens(&self, answer: &Value) -> Option<u64> {
        answer.pointer("/usageMetadata/totalTokenCount").and_then(Value::as_u64)
    }

    fn delete_url(&self, config: &LlmConfig, name: &str) -> String {
        format!("{}/{name}", config.endpoint())
    }
}

/// One `streamGenerateContent` stream put back together.
#[derive(Debug, Default)]
pub(crate) struct GeminiStream {
    parts: Vec<Value>,
    finish_reason: Option<Value>,
    usage: Option<Value>,
    feedback: Option<Value>,
    candidate: bool,
}

impl StreamReader for GeminiStream {
    fn event(&mut self, _name: Option<&str>, data: &str) -> Result<String, LlmError> {
        let chunk = event_json(data)?;
        if let Some(m) = chunk.pointer("/error/message").and_then(Value::as_str) {
            return Err(LlmError::Response(format!("provider error: {m}")));
        }
        if let Some(u) = chunk.get("usageMetadata") {
            self.usage = Some(u.clone());
        }
        if let Some(f) = chunk.get("promptFeedback") {
            self.feedback = Some(f.clone());
        }
        let Some(cand) = chunk.get("candidates").and_then(Value::as_array).and_then(|c| c.first()) else {
            return Ok(String::new());
        };
        self.candidate = true;
        if let Some(r) = cand.get("finishReason").filter(|r| !r.is_null()) {
            self.finish_reason = Some(r.clone());
        }
        let mut shown = String::new();
        for part in cand.pointer("/content/parts").and_then(Value::as_array).into_iter().flatten() {
            if part.get("thought").and_then(Value::as_bool) != Some(true)
                && let Some(t) = part.get("text").and_then(Value::as_str)
            {
                shown.push_str(t);
            }
            self.parts.push(part.clone());
        }
        Ok(shown)
    }

    fn done(&self) -> bool {
        false
    }

    fn finish(self: Box<Self>) -> Result<Value, StreamError> {
        let blocked = self.feedback.as_ref().and_then(|f| f.get("blockReason")).is_some();
        if self.finish_reason.is_none() && !blocked {
            return Err(StreamError::EndedEarly("finishReason"));
        }
        let mut body = Map::new();
        if self.candidate {
            body.insert(
                "candidates".into(),
                json!([{"content": {"role": "model", "parts": self.parts}, "finishReason": self.finish_reason}]),
            );
        }
        for (k, v) in [("usageMetadata", self.usage), ("promptFeedback", self.feedback)] {
            if let Some(v) = v {
                body.insert(k.into(), v);
            }
        }
        Ok(Value::Object(body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_reads_as_the_same_response_as_the_plain_body() {
        let plain = GeminiWire
            .parse(&json!({
                "candidates": [{"content": {"role": "model", "parts": [
                    {"text": "Hello there."},
                    {"functionCall": {"name": "vote", "args": {"target": "Pia"}}}]},
                    "finishReason": "STOP"}],
                "usageMetadata": {"promptTokenCount": 12, "candidatesTokenCount": 5}
            }))
            .unwrap();
        let mut r = GeminiWire.stream_reader();
        let mut shown = String::new();
        for e in [
            r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"Hello "}]}}],"usageMetadata":{"promptTokenCount":12}}"#,
            r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"thinking","thought":true},{"text":"there."}]}}]}"#,
            r#"{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"vote","args":{"target":"Pia"}}}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":12,"candidatesTokenCount":5}}"#,
        ] {
            shown.push_str(&r.event(None, e).unwrap());
        }
        assert_eq!(shown, "Hello there.");
        assert_eq!(GeminiWire.parse(&r.finish().unwrap()).unwrap(), plain);
        let mut cut = GeminiWire.stream_reader();
        cut.event(None, r#"{"candidates":[{"content":{"parts":[{"text":"Hel"}]}}]}"#).unwrap();
        assert_eq!(cut.finish().unwrap_err().to_string(), "the stream ended before its finishReason");
        let mut blocked = GeminiWire.stream_reader();
        blocked.event(None, r#"{"promptFeedback":{"blockReason":"SAFETY"}}"#).unwrap();
        let r = GeminiWire.parse(&blocked.finish().unwrap()).unwrap();
        assert!(r.refusal.unwrap().contains("SAFETY"));
    }

    #[test]
    fn parses_parts_function_calls_usage_and_blocks() {
        let r = GeminiWire
            .parse(&json!({
                "candidates": [{"content": {"role": "model", "parts": [
                    {"text": "thinking…", "thought": true},
                    {"text": "Hello "}, {"text": "there. "},
                    {"functionCall": {"name": "vote", "args": {"target": "Pia"}}}]},
                    "finishReason": "STOP"}],
                "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 4, "thoughtsTokenCount": 2}
            }))
            .unwrap();
        assert_eq!(r.text, "Hello there.");
        assert_eq!(r.tool_calls[0].arguments, json!({"target": "Pia"}));
        assert_eq!((r.usage.prompt_tokens, r.usage.completion_tokens), (9, 6));
        assert_eq!(r.refusal, None);

        let r = GeminiWire
            .parse(&json!({"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},
                           "usageMetadata": {"promptTokenCount": 7}}))
            .unwrap();
        assert_eq!(
            r.refusal.as_deref(),
            Some("the prompt was blocked by the safety filter (blockReason PROHIBITED_CONTENT)")
        );
        assert_eq!(r.usage.prompt_tokens, 7);
        let r = GeminiWire.parse(&json!({"candidates": [{"finishReason": "SAFETY"}]})).unwrap();
        assert!(r.refusal.unwrap().contains("finishReason SAFETY"));
        assert_eq!(
            GeminiWire.parse(&json!({"candidates": []})),
            Err(LlmError::Response("the response has no candidates".into()))
        );
    }
}
