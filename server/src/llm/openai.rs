//! The `openai` dialect: Chat Completions (`POST {base}/chat/completions`) as OpenAI and every
//! OpenAI-compatible server (vLLM, Ollama, llama.cpp, LM Studio, OpenRouter) speak it.
//!
//! Request: `model`, `messages` as given (an assistant's tool calls as `tool_calls`, tool results
//! as `tool` messages with their `tool_call_id`), `temperature`, `top_p`, `max_tokens` (the older name,
//! which compatible servers all accept), penalties only when non-zero; `tools` as functions with
//! `tool_choice`; a response schema as `response_format` json_schema with `strict: true` (or
//! `json_object` + `schema` for llama-cpp-python, see [`OpenAiJsonMode`]). Auth is
//! `Authorization: Bearer <key>`, omitted when no key is configured (local servers).
//!
//! Response: the first choice's content (trimmed), its `tool_calls` (arguments parsed from their
//! JSON string), `message.refusal` or `finish_reason: content_filter` as a refusal, and `usage`.
//!
//! Streaming: `stream: true` with `stream_options.include_usage` (OpenAI, vLLM and llama.cpp's
//! server send the usage in a last chunk); the chunks' deltas — content, refusal, tool calls by
//! index with their arguments in pieces, the finish reason — are put back together into the
//! body above ([`OpenAiStream`]), and `data: [DONE]` ends the stream.

use serde_json::{Map, Value, json};

use super::chat::{CacheHow, CacheUse, ChatRequest, ChatResponse, Message, ToolCall, ToolChoice, Usage};
use super::config::{Dialect, LlmConfig, OpenAiJsonMode};
use super::wire::{StreamError, StreamReader, Wire, event_json, put_sampling};
use super::{LlmError, schema};

/// The Chat Completions mapping.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct OpenAiWire;

/// A message as Chat Completions has it: `{role, content}`, plus an assistant's `tool_calls`
/// (arguments as a JSON string, ids as given or `call_<n>`) or a `tool` message's `tool_call_id`.
fn message(m: &Message) -> Value {
    let mut out = Map::new();
    out.insert("role".into(), json!(m.role.as_str()));
    // An assistant message that only calls tools has null content, as OpenAI writes it.
    let content =
        if m.content.is_empty() && !m.tool_calls().is_empty() { Value::Null } else { json!(m.content.as_ref()) };
    out.insert("content".into(), content);
    if !m.tool_calls().is_empty() {
        let calls: Vec<Value> = m
            .tool_calls()
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let arguments = match &c.arguments {
                    Value::String(raw) => raw.clone(),
                    v => v.to_string(),
                };
                json!({"id": c.id.clone().unwrap_or_else(|| format!("call_{i}")), "type": "function",
                       "function": {"name": c.name, "arguments": arguments}})
            })
            .collect();
        out.insert("tool_calls".into(), Value::Array(calls));
    }
    if let Some(id) = m.tool_call_id() {
        out.insert("tool_call_id".into(), json!(id));
    }
    Value::Object(out)
}

/// The `prompt_cache_key` sent with `request`: its hints' key, unless the prompt cache is
/// switched off (a server that refuses fields it does not know).
fn cache_key<'a>(config: &LlmConfig, request: &'a ChatRequest) -> Option<&'a str> {
    request.cache.key.as_deref().filter(|_| config.prompt_cache)
}

impl Wire for OpenAiWire {
    fn dialect(&self) -> Dialect {
        Dialect::OpenAi
    }

    fn url(&self, config: &LlmConfig, _: &ChatRequest) -> String {
        format!("{}/chat/completions", config.endpoint())
    }

    fn headers(&self, config: &LlmConfig) -> Vec<(&'static str, String)> {
        config.api_key.iter().map(|k| ("authorization", format!("Bearer {}", k.expose()))).collect()
    }

    fn body(&self, config: &LlmConfig, request: &ChatRequest) -> Value {
        let messages: Vec<Value> = request.messages.iter().map(message).collect();
        let mut b = Map::new();
        b.insert("model".into(), json!(config.model));
        b.insert("messages".into(), Value::Array(messages));
        put_sampling(
            &mut b,
            config,
            request,
            ["temperature", "top_p", "max_tokens", "frequency_penalty", "presence_penalty"],
        );
        if !request.tools.is_empty() {
            let tools: Vec<Value> = request
                .tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.parameters}})
                })
                .collect();
            b.insert("tools".into(), Value::Array(tools));
            let choice = match &request.tool_choice {
                ToolChoice::Auto => json!("auto"),
                ToolChoice::None => json!("none"),
                ToolChoice::Required => json!("required"),
                ToolChoice::Tool(name) => json!({"type": "function", "function": {"name": name}}),
            };
            b.insert("tool_choice".into(), choice);
        }
        if let Some(key) = cache_key(config, request) {
            b.insert("prompt_cache_key".into(), json!(key));
        }
        if let Some(s) = &request.response_schema {
            let format = match config.openai_json_mode {
                OpenAiJsonMode::JsonSchema => {
                    let mut js = Map::new();
                    js.insert("name".into(), json!(s.name));
                    if let Some(d) = &s.description {
                        js.insert("description".into(), json!(d));
                    }
                    // strict: true needs the strict form (every property required, optional ones
                    // as anyOf-null); a schema written in the OpenAPI style would be refused.
                    js.insert("schema".into(), schema::for_dialect(Dialect::OpenAi, &s.schema));
                    js.insert("strict".into(), json!(true));
                    json!({"type": "json_schema", "json_schema": js})
                }
                OpenAiJsonMode::JsonObject => json!({"type": "json_object", "schema": s.schema}),
            };
            b.insert("response_format".into(), format);
        }
        Value::Object(b)
    }

    fn cache(&self, config: &LlmConfig, request: &ChatRequest) -> CacheUse {
        match cache_key(config, request) {
            Some(key) => CacheUse { how: CacheHow::PromptCacheKey, key: Some(key.to_string()), ..CacheUse::default() },
            None => CacheUse { how: CacheHow::Implicit, ..CacheUse::default() },
        }
    }

    fn stream(&self, config: &LlmConfig, request: &ChatRequest, body: &mut Value) -> Option<String> {
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
        Some(self.url(config, request))
    }

    fn stream_reader(&self) -> Box<dyn StreamReader> {
        Box::new(OpenAiStream::default())
    }

    fn parse(&self, body: &Value) -> Result<ChatResponse, LlmError> {
        let Some(choice) = body.get("choices").and_then(Value::as_array).and_then(|c| c.first()) else {
            if let Some(m) = body.pointer("/error/message").and_then(Value::as_str) {
                return Err(LlmError::Response(format!("provider error: {m}")));
            }
            return Err(LlmError::Response("the response has no choices".into()));
        };
        let message =
            choice.get("message").ok_or_else(|| LlmError::Response("the first choice has no message".into()))?;
        let finish_reason = choice.get("finish_reason").and_then(Value::as_str).map(str::to_string);
        let refusal = match message.get("refusal").and_then(Value::as_str) {
            Some(r) => Some(format!("the model refused: {r}")),
            None if finish_reason.as_deref() == Some("content_filter") => {
                Some("the answer was blocked by the content filter (finish_reason content_filter)".into())
            }
            None => None,
        };
        let mut tool_calls = Vec::new();
        for call in message.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
            let f = call.get("function").unwrap_or(&Value::Null);
            let name = f
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| LlmError::Response("a tool call has no function name".into()))?;
            // Malformed arguments stay the model's raw string: judging a call is the consumer's
            // job (trading rejects that step; structured output reports a non-object).
            let arguments = match f.get("arguments") {
                Some(Value::String(s)) => serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone())),
                Some(v) => v.clone(),
                None => json!({}),
            };
            tool_calls.push(ToolCall {
                id: call.get("id").and_then(Value::as_str).map(str::to_string),
                name: name.to_string(),
                arguments,
            });
        }
        let count = |k: &str| body.pointer(&format!("/usage/{k}")).and_then(Value::as_u64);
        Ok(ChatResponse {
            text: message.get("content").and_then(Value::as_str).unwrap_or("").trim().to_string(),
            tool_calls,
            usage: Usage {
                prompt_tokens: count("prompt_tokens").unwrap_or(0),
                completion_tokens: count("completion_tokens").unwrap_or(0),
                // OpenAI and vLLM report it in the usage; llama.cpp's server in its timings.
                cached_tokens: count("prompt_tokens_details/cached_tokens")
                    .or_else(|| body.pointer("/timings/cache_n").and_then(Value::as_u64))
                    .unwrap_or(0),
                cache_write_tokens: 0,
            },
            refusal,
            finish_reason,
            // The latency, the cut at the limit, retries and cache use: the provider's to set.
            ..ChatResponse::default()
        })
    }
}

/// The most tool calls one streamed reply may make (a chunk's `index` beyond it is refused
/// rather than allocated).
const MAX_STREAMED_CALLS: usize = 64;

/// One Chat Completions stream put back together.
#[derive(Debug, Default)]
pub(crate) struct OpenAiStream {
    content: String,
    refusal: Option<String>,
    /// id, name, arguments as written so far.
    calls: Vec<(Option<String>, String, String)>,
    finish_reason: Option<Value>,
    usage: Option<Value>,
    timings: Option<Value>,
    done: bool,
}

impl StreamReader for OpenAiStream {
    fn event(&mut self, _name: Option<&str>, data: &str) -> Result<String, LlmError> {
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(String::new());
        }
        let chunk = event_json(data)?;
        if let Some(m) = chunk.pointer("/error/message").and_then(Value::as_str) {
            return Err(LlmError::Response(format!("provider error: {m}")));
        }
        if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(u.clone());
        }
        if let Some(t) = chunk.get("timings").filter(|t| t.is_object()) {
            self.timings = Some(t.clone());
        }
        let Some(choice) = chunk.get("choices").and_then(Value::as_array).and_then(|c| c.first()) else {
            return Ok(String::new()); // the usage chunk has no choices
        };
        if let Some(r) = choice.get("finish_reason").filter(|r| !r.is_null()) {
            self.finish_reason = Some(r.clone());
        }
        let delta = choice.get("delta").unwrap_or(&Value::Null);
        if let Some(r) = delta.get("refusal").and_then(Value::as_str) {
            self.refusal.get_or_insert_with(String::new).push_str(r);
        }
        for (k, call) in delta.get("tool_calls").and_then(Value::as_array).into_iter().flatten().enumerate() {
            let i = call.get("index").and_then(Value::as_u64).map_or(k, |i| i as usize);
            if i >= MAX_STREAMED_CALLS {
                return Err(LlmError::Response(format!(
                    "a streamed tool call has index {i}; at most {MAX_STREAMED_CALLS} calls are read"
                )));
            }
            if self.calls.len() <= i {
                self.calls.resize(i + 1, Default::default());
            }
            let slot = &mut self.calls[i];
            if let Some(id) = call.get("id").and_then(Value::as_str) {
                slot.0 = Some(id.to_string());
            }
            let f = call.get("function").unwrap_or(&Value::Null);
            if let Some(name) = f.get("name").and_then(Value::as_str) {
                slot.1.push_str(name);
            }
            if let Some(args) = f.get("arguments").and_then(Value::as_str) {
                slot.2.push_str(args);
            }
        }
        let text = delta.get("content").and_then(Value::as_str).unwrap_or("");
        self.content.push_str(text);
        Ok(text.to_string())
    }

    fn done(&self) -> bool {
        self.done
    }

    fn finish(self: Box<Self>) -> Result<Value, StreamError> {
        if !self.done {
            return Err(StreamError::EndedEarly("[DONE] line"));
        }
        let mut message = Map::new();
        message.insert("role".into(), json!("assistant"));
        message.insert("content".into(), json!(self.content));
        if let Some(r) = self.refusal {
            message.insert("refusal".into(), json!(r));
        }
        if !self.calls.is_empty() {
            let calls: Vec<Value> = self
                .calls
                .into_iter()
                .map(|(id, name, arguments)| {
                    let mut c = json!({"type": "function", "function": {"name": name, "arguments": arguments}});
                    if let Some(id) = id {
                        c["id"] = json!(id);
                    }
                    c
                })
                .collect();
            message.insert("tool_calls".into(), Value::Array(calls));
        }
        let mut body = json!({"choices": [{"index": 0, "message": message,
            "finish_reason": self.finish_reason.unwrap_or(Value::Null)}]});
        if let Some(u) = self.usage {
            body["usage"] = u;
        }
        if let Some(t) = self.timings {
            body["timings"] = t;
        }
        Ok(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_text_tool_calls_usage_and_refusals() {
        let r = OpenAiWire.parse(&vote_body("  hi  ")).unwrap();
        assert_eq!(r.text, "hi");
        assert_eq!(r.tool_calls[0].arguments, json!({"target": "Pia"}));
        assert_eq!(r.tool_calls[0].id.as_deref(), Some("c1"));
        assert_eq!(r.usage.total(), 17);
        assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));

        let r = OpenAiWire
            .parse(&json!({"choices": [{"message": {"tool_calls": [
                {"function": {"name": "vote", "arguments": "{oops"}}]}}]}))
            .unwrap();
        assert_eq!(r.tool_calls[0].arguments, json!("{oops"), "kept for the consumer to judge");
        let r = OpenAiWire
            .parse(&json!({"choices": [{"message": {"content": null}, "finish_reason": "content_filter"}]}))
            .unwrap();
        assert!(r.refusal.unwrap().contains("content filter"));
        assert_eq!(
            OpenAiWire.parse(&json!({"error": {"message": "model not loaded"}})),
            Err(LlmError::Response("provider error: model not loaded".into()))
        );
    }

    /// A reply saying `content` and calling `vote` on Pia, with its usage.
    fn vote_body(content: &str) -> Value {
        json!({
            "choices": [{"message": {"role": "assistant", "content": content,
                "tool_calls": [{"id": "c1", "type": "function",
                    "function": {"name": "vote", "arguments": "{\"target\":\"Pia\"}"}}]},
                "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}
        })
    }

    /// Feeds `events` to a stream reader: the text pieces and the body the stream makes.
    fn streamed(events: &[&str]) -> (Vec<String>, Result<Value, StreamError>) {
        let mut r = OpenAiWire.stream_reader();
        let mut pieces = Vec::new();
        for e in events {
            pieces.push(r.event(None, e).unwrap());
        }
        (pieces, r.finish())
    }

    #[test]
    fn a_stream_reads_as_the_same_response_as_the_plain_body() {
        let plain = OpenAiWire.parse(&vote_body("Hello there")).unwrap();
        let (pieces, got) = streamed(&[
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"lo there"}}],"usage":null}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"vote","arguments":"{\"tar"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"get\":\"Pia\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}}"#,
            "[DONE]",
        ]);
        assert_eq!(OpenAiWire.parse(&got.unwrap()).unwrap(), plain);
        assert_eq!(pieces.concat(), "Hello there");
        let (_, cut) = streamed(&[r#"{"choices":[{"index":0,"delta":{"content":"Hel"}}]}"#]);
        assert_eq!(cut.unwrap_err().to_string(), "the stream ended before its [DONE] line");
        let mut r = OpenAiWire.stream_reader();
        let e = r.event(None, r#"{"choices":[{"delta":{"tool_calls":[{"index":4000000000}]}}]}"#).unwrap_err();
        assert!(e.to_string().contains("at most 64 calls"), "{e}");
        assert!(r.event(None, "{oops").is_err());
    }
}
