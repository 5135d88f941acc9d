//! The `anthropic` dialect: the Messages API (`POST {base}/messages`).
//!
//! Request: system messages joined into the top-level `system`, the rest as `messages` (an
//! assistant's tool calls as `tool_use` blocks after its text, tool results as `tool_result`
//! blocks, consecutive results in one `user` message);
//! `max_tokens` (required by the API), `temperature`, and `top_p` only when it is not 1 (recent
//! models reject both together). Tools as `{name, description, input_schema}` with `tool_choice`
//! `auto`/`none`/`any`/`tool`. Anthropic has no JSON mode, so a response schema becomes one more
//! tool named like the schema and a forced `tool_choice: {type: tool, name}` — the model must
//! answer by "calling" it, and its `input` is the structured value. Headers: `x-api-key` and
//! `anthropic-version` (configurable, default `2023-06-01`).
//!
//! Prompt cache: Anthropic caches nothing unasked. With the prompt cache on (the default), up to
//! four `cache_control` breakpoints are placed ([`breakpoints`]): after the tools and system
//! prompt (the system prompt then takes the block form), and after each prefix the request's
//! hints say an earlier call sent (the agent's prompt at the fork and on its last turn), on the
//! last block of that prefix's last message.
//!
//! Response: text blocks joined, `tool_use` blocks as tool calls, `usage` (cache reads and
//! writes count as prompt tokens, and are kept apart too, as they are priced apart),
//! `stop_reason: refusal` as a refusal.
//!
//! Streaming: `stream: true`; the events (`message_start` with the input usage,
//! `content_block_start`/`_delta` with text and tool input JSON in pieces, `message_delta` with the
//! stop reason and output usage, `message_stop`) are put back together into the message above
//! ([`AnthropicStream`]).

use serde_json::{Map, Value, json};

use super::LlmError;
use super::chat::{CacheHow, CacheUse, ChatRequest, ChatResponse, Message, Role, ToolChoice, Usage};
use super::config::{Dialect, LlmConfig};
use super::wire::{StreamError, StreamReader, Wire, event_json, tool_call};

/// The Messages mapping.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct AnthropicWire;

/// The breakpoint Anthropic caches a prefix up to.
fn ephemeral() -> Value {
    json!({"type": "ephemeral"})
}

/// The most `cache_control` breakpoints one request may carry.
const MAX_BREAKPOINTS: usize = 4;

/// Where `request` gets `cache_control` breakpoints, as prefix lengths in messages: after the
/// system prompt (which Anthropic caches with the tools before it), or after the tools when there
/// is no system prompt; then after each prefix an earlier call sent (the request's hints: the
/// prompt at the fork, the prompt of the last turn). None when the prompt cache is off.
pub(crate) fn breakpoints(config: &LlmConfig, request: &ChatRequest) -> Vec<u32> {
    if !config.prompt_cache {
        return Vec::new();
    }
    let ms = &request.messages;
    let system = ms.iter().take_while(|m| m.role == Role::System).count();
    let mut out = Vec::new();
    if system > 0 && ms[..system].iter().any(|m| !m.content.is_empty()) {
        out.push(system as u32);
    } else if !request.tools.is_empty() || request.response_schema.is_some() {
        out.push(0);
    }
    for &p in &request.cache.prefixes {
        // A breakpoint goes on the prefix's last message, which must be a non-empty one of the
        // conversation (empty text blocks are refused).
        if p <= system || p >= ms.len() {
            continue;
        }
        let last = &ms[p - 1];
        if !last.content.is_empty() || !last.tool_calls().is_empty() || last.role == Role::Tool {
            out.push(p as u32);
        }
    }
    out.truncate(MAX_BREAKPOINTS);
    out
}

/// The conversation as `messages` (system messages go to `system`). Plain text keeps the short
/// string form of `content`; tool calls and results need the block form, and so does a message
/// that ends a cached prefix (its index is in `marks`: its last block carries `cache_control`).
fn messages(messages: &[Message], marks: &[usize]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let marked = marks.contains(&i);
        match m.role {
            Role::System => {}
            Role::Tool => {
                let mut block = json!({"type": "tool_result",
                    "tool_use_id": m.tool_call_id().unwrap_or_default(), "content": m.content.as_ref()});
                if marked {
                    block["cache_control"] = ephemeral();
                }
                // Every result of one turn's calls goes back in the one user message after it.
                let last = out
                    .last_mut()
                    .filter(|x| x["content"][0]["type"] == "tool_result")
                    .and_then(|x| x["content"].as_array_mut());
                match last {
                    Some(blocks) => blocks.push(block),
                    None => out.push(json!({"role": "user", "content": [block]})),
                }
            }
            Role::Assistant if !m.tool_calls().is_empty() => {
                let mut blocks = Vec::new();
                if !m.content.is_empty() {
                    blocks.push(json!({"type": "text", "text": m.content.as_ref()}));
                }
                for (n, c) in m.tool_calls().iter().enumerate() {
                    let id = c.id.clone().unwrap_or_else(|| format!("call_{n}"));
                    blocks.push(json!({"type": "tool_use", "id": id, "name": c.name, "input": c.arguments_object()}));
                }
                if let (true, Some(last)) = (marked, blocks.last_mut()) {
                    last["cache_control"] = ephemeral();
                }
                out.push(json!({"role": "assistant", "content": blocks}));
            }
            role if marked => out.push(json!({"role": role.as_str(), "content": [
                {"type": "text", "text": m.content.as_ref(), "cache_control": ephemeral()}]})),
            role => out.push(json!({"role": role.as_str(), "content": m.content.as_ref()})),
        }
    }
    out
}

impl Wire for AnthropicWire {
    fn dialect(&self) -> Dialect {
        Dialect::Anthropic
    }

    fn url(&self, config: &LlmConfig, _: &ChatRequest) -> String {
        format!("{}/messages", config.endpoint())
    }

    fn headers(&self, config: &LlmConfig) -> Vec<(&'static str, String)> {
        let mut h: Vec<(&'static str, String)> =
            config.api_key.iter().map(|k| ("x-api-key", k.expose().to_string())).collect();
        h.push(("anthropic-version", config.anthropic_version.clone()));
        h
    }

    fn body(&self, config: &LlmConfig, request: &ChatRequest) -> Value {
        let points = breakpoints(config, request);
        // A prefix of n messages ends with message n - 1; 0 (after the tools) marks the last tool.
        let marks: Vec<usize> = points.iter().filter(|&&p| p > 0).map(|&p| p as usize - 1).collect();
        let messages = messages(&request.messages, &marks);
        let mut b = Map::new();
        b.insert("model".into(), json!(config.model));
        b.insert("max_tokens".into(), json!(request.max_tokens.unwrap_or(config.max_tokens)));
        if let Some(sys) = request.system_text() {
            // Cached, the system prompt takes the block form that carries the breakpoint.
            let cached = marks.iter().any(|&i| request.messages[i].role == Role::System);
            let system =
                if cached { json!([{"type": "text", "text": sys, "cache_control": ephemeral()}]) } else { json!(sys) };
            b.insert("system".into(), system);
        }
        b.insert("messages".into(), Value::Array(messages));
        b.insert("temperature".into(), json!(request.temperature.unwrap_or(config.temperature)));
        let top_p = request.top_p.unwrap_or(config.top_p);
        if top_p != 1.0 {
            b.insert("top_p".into(), json!(top_p));
        }
        let mut tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
            .collect();
        let choice = if let Some(s) = &request.response_schema {
            let description = s.description.clone().unwrap_or_else(|| {
                "Give your answer by calling this tool with arguments matching its schema.".to_string()
            });
            tools.push(json!({"name": s.name, "description": description, "input_schema": s.schema}));
            Some(json!({"type": "tool", "name": s.name}))
        } else if tools.is_empty() {
            None
        } else {
            Some(match &request.tool_choice {
                ToolChoice::Auto => json!({"type": "auto"}),
                ToolChoice::None => json!({"type": "none"}),
                ToolChoice::Required => json!({"type": "any"}),
                ToolChoice::Tool(name) => json!({"type": "tool", "name": name}),
            })
        };
        if points.first() == Some(&0)
            && let Some(last) = tools.last_mut()
        {
            last["cache_control"] = ephemeral();
        }
        if !tools.is_empty() {
            b.insert("tools".into(), Value::Array(tools));
        }
        if let Some(c) = choice {
            b.insert("tool_choice".into(), c);
        }
        Value::Object(b)
    }

    fn cache(&self, config: &LlmConfig, request: &ChatRequest) -> CacheUse {
        let breakpoints = breakpoints(config, request);
        CacheUse {
            how: if breakpoints.is_empty() { CacheHow::None } else { CacheHow::CacheControl },
            breakpoints,
            ..CacheUse::default()
        }
    }

    fn stream(&self, config: &LlmConfig, request: &ChatRequest, body: &mut Value) -> Option<String> {
        body["stream"] = json!(true);
        Some(self.url(config, request))
    }

    fn stream_reader(&self) -> Box<dyn StreamReader> {
        Box::new(AnthropicStream::default())
    }

    fn parse(&self, body: &Value) -> Result<ChatResponse, LlmError> {
        if body.get("type").and_then(Value::as_str) == Some("error") {
            let m = body.pointer("/error/message").and_then(Value::as_str).unwrap_or("unknown error");
            return Err(LlmError::Response(format!("provider error: {m}")));
        }
        let count = |k: &str| body.pointer(&format!("/usage/{k}")).and_then(Value::as_u64).unwrap_or(0);
        let usage = Usage {
            prompt_tokens: count("input_tokens")
                + count("cache_creation_input_tokens")
                + count("cache_read_input_tokens"),
            completion_tokens: count("output_tokens"),
            cached_tokens: count("cache_read_input_tokens"),
            cache_write_tokens: count("cache_creation_input_tokens"),
        };
        let stop_reason = body.get("stop_reason").and_then(Value::as_str).map(str::to_string);
        let refusal =
            (stop_reason.as_deref() == Some("refusal")).then(|| "the model refused (stop_reason refusal)".to_string());
        let blocks = body.get("content").and_then(Value::as_array).filter(|c| !c.is_empty());
        let Some(blocks) = blocks else {
            if refusal.is_some() {
                return Ok(ChatResponse { usage, refusal, finish_reason: stop_reason, ..ChatResponse::default() });
            }
            return Err(LlmError::Response("the response has no content".into()));
        };
        let mut text = String::new();
        let mut tool_calls = Vec::new();
        for block in blocks {
            match block.get("type").and_then(Value::as_str) {
                Some("text") => text.push_str(block.get("text").and_then(Value::as_str).unwrap_or("")),
                Some("tool_use") => tool_calls.push(tool_call(block, "input", "a tool_use block")?),
                _ => {} // thinking and other block kinds carry no answer
            }
        }
        Ok(ChatResponse {
            text: text.trim().to_string(),
            tool_calls,
            usage,
            refusal,
            finish_reason: stop_reason,
            // The latency, the cut at the limit, retries and cache use: the provider's to set.
            ..ChatResponse::default()
        })
    }
}

/// The most content blocks one streamed message may have (a larger `index` is refused rather
/// than allocated).
const MAX_STREAMED_BLOCKS: usize = 64;

/// One Messages stream put back together.
#[derive(Debug, Default)]
pub(crate) struct AnthropicStream {
    /// Each block as it started, with its text or its tool input JSON as written so far.
    blocks: Vec<(Value, String)>,
    usage: Map<String, Value>,
    stop_reason: Option<Value>,
    done: bool,
}

impl StreamReader for AnthropicStream {
    fn event(&mut self, _name: Option<&str>, data: &str) -> Result<String, LlmError> {
        let e = event_json(data)?;
        let usage = |u: Option<&Value>, into: &mut Map<String, Value>| {
            for (k, v) in u.and_then(Value::as_object).into_iter().flatten() {
                if !v.is_null() {
                    into.insert(k.clone(), v.clone());
                }
            }
        };
        let index = || {
            let i = e.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
            if i < MAX_STREAMED_BLOCKS {
                Ok(i)
            } else {
                Err(LlmError::Response(format!(
                    "a streamed content block has index {i}; at most {MAX_STREAMED_BLOCKS} are read"
                )))
            }
        };
        match e.get("type").and_then(Value::as_str).unwrap_or("") {
            "error" => {
                let m = e.pointer("/error/message").and_then(Value::as_str).unwrap_or("unknown error");
                return Err(LlmError::Response(format!("provider error: {m}")));
            }
            "message_start" => usage(e.pointer("/message/usage"), &mut self.usage),
            "content_block_start" => {
                let i = index()?;
                if self.blocks.len() <= i {
                    self.blocks.resize(i + 1, (Value::Null, String::new()));
                }
                let block = e.get("content_block").cloned().unwrap_or(Value::Null);
                let text = block.get("text").and_then(Value::as_str).unwrap_or("").to_string();
                self.blocks[i] = (block, text.clone());
                return Ok(text);
            }
            "content_block_delta" => {
                let i = index()?;
                let Some((block, written)) = self.blocks.get_mut(i) else {
                    return Err(LlmError::Response(format!("a delta for block {i}, which never started")));
                };
                let delta = e.get("delta").unwrap_or(&Value::Null);
                let piece = match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => delta.get("text"),
                    Some("input_json_delta") => delta.get("partial_json"),
                    _ => None, // thinking and signatures carry no answer
                };
                let piece = piece.and_then(Value::as_str).unwrap_or("");
                written.push_str(piece);
                let shown = block.get("type").and_then(Value::as_str) == Some("text");
                return Ok(if shown { piece.to_string() } else { String::new() });
            }
            "message_delta" => {
                if let Some(r) = e.pointer("/delta/stop_reason").filter(|r| !r.is_null()) {
                    self.stop_reason = Some(r.clone());
                }
                usage(e.get("usage"), &mut self.usage);
            }
            "message_stop" => self.done = true,
            _ => {} // ping, content_block_stop
        }
        Ok(String::new())
    }

    fn done(&self) -> bool {
        self.done
    }

    fn finish(self: Box<Self>) -> Result<Value, StreamError> {
        if !self.done {
            return Err(StreamError::EndedEarly("message_stop event"));
        }
        let content: Vec<Value> = self
            .blocks
            .into_iter()
            .filter(|(b, _)| !b.is_null())
            .map(|(mut block, written)| {
                match block.get("type").and_then(Value::as_str) {
                    Some("text") => block["text"] = json!(written),
                    Some("tool_use") => {
                        block["input"] = match written.trim() {
                            "" => block.get("input").cloned().unwrap_or_else(|| json!({})),
                            raw => serde_json::from_str(raw).unwrap_or_else(|_| json!(raw)),
                        }
                    }
                    _ => {}
                }
                block
            })
            .collect();
        Ok(json!({"type": "message", "role": "assistant", "content": content,
                  "stop_reason": self.stop_reason, "usage": self.usage}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::chat::{CacheHints, ToolCall, ToolSpec};

    /// Without a system prompt the first breakpoint goes on the last tool; a prefix ending in a
    /// tool result or an assistant's calls is marked on that message's last block.
    #[test]
    fn breakpoints_follow_tools_tool_results_and_calls() {
        let call = ToolCall { id: Some("c1".into()), name: "vote".into(), arguments: json!({}) };
        let mut request = ChatRequest::new(vec![
            Message::new(Role::User, "Decide."),
            Message::assistant_calls("", vec![call.clone()]),
            Message::tool_result(&call, "done"),
            Message::new(Role::User, "Again."),
        ]);
        request.tools =
            vec![ToolSpec { name: "vote".into(), description: "Vote.".into(), parameters: json!({"type": "object"}) }];
        request.cache = CacheHints { key: None, prefixes: vec![2, 3, 4], ..CacheHints::default() };
        let config = LlmConfig::for_dialect(Dialect::Anthropic);
        assert_eq!(breakpoints(&config, &request), vec![0, 2, 3], "not past the prompt's end");
        let body = AnthropicWire.body(&config, &request);
        let ephemeral = json!({"type": "ephemeral"});
        assert_eq!(body["tools"][0]["cache_control"], ephemeral);
        assert_eq!(body["messages"][1]["content"][0]["cache_control"], ephemeral, "{body}");
        assert_eq!(body["messages"][2]["content"][0]["cache_control"], ephemeral, "{body}");
        assert_eq!(body["messages"][3]["content"], json!("Again."));
        assert!(body.get("system").is_none());
        let off = LlmConfig { prompt_cache: false, ..config };
        assert!(!AnthropicWire.body(&off, &request).to_string().contains("cache_control"));
        assert_eq!(AnthropicWire.cache(&off, &request).how, CacheHow::None);
    }

    #[test]
    fn a_stream_reads_as_the_same_response_as_the_plain_message() {
        let plain = AnthropicWire
            .parse(&json!({
                "type": "message", "role": "assistant",
                "content": [{"type": "text", "text": "Voting now."},
                            {"type": "tool_use", "id": "tu_1", "name": "vote", "input": {"target": "Pia"}}],
                "stop_reason": "tool_use",
                "usage": {"input_tokens": 20, "cache_read_input_tokens": 5, "output_tokens": 8}
            }))
            .unwrap();
        let mut r = AnthropicWire.stream_reader();
        let mut shown = String::new();
        for e in [
            r#"{"type":"message_start","message":{"content":[],"usage":{"input_tokens":20,"cache_read_input_tokens":5,"output_tokens":1}}}"#,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"ping"}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Voting"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" now."}}"#,
            r#"{"type":"content_block_stop","index":0}"#,
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"tu_1","name":"vote","input":{}}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"target\":"}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":" \"Pia\"}"}}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":8}}"#,
            r#"{"type":"message_stop"}"#,
        ] {
            shown.push_str(&r.event(None, e).unwrap());
        }
        assert!(r.done());
        assert_eq!(shown, "Voting now.", "the tool input is not shown as text");
        assert_eq!(AnthropicWire.parse(&r.finish().unwrap()).unwrap(), plain);
        let mut cut = AnthropicWire.stream_reader();
        cut.event(None, r#"{"type":"message_start","message":{}}"#).unwrap();
        assert_eq!(cut.finish().unwrap_err().to_string(), "the stream ended before its message_stop event");
        let mut bad = AnthropicWire.stream_reader();
        let e = bad
            .event(None, r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#)
            .unwrap_err();
        assert_eq!(e, LlmError::Response("provider error: Overloaded".into()));
        assert!(bad.event(None, r#"{"type":"content_block_start","index":99999999999}"#).is_err());
    }

    #[test]
    fn parses_blocks_usage_and_refusals() {
        let r = AnthropicWire
            .parse(&json!({
                "type": "message", "role": "assistant",
                "content": [{"type": "thinking", "thinking": "…"}, {"type": "text", "text": "Voting now."},
                            {"type": "tool_use", "id": "tu_1", "name": "vote", "input": {"target": "Pia"}}],
                "stop_reason": "tool_use",
                "usage": {"input_tokens": 20, "cache_read_input_tokens": 5, "output_tokens": 8}
            }))
            .unwrap();
        assert_eq!(r.text, "Voting now.");
        assert_eq!(r.tool_calls[0].name, "vote");
        assert_eq!(r.tool_calls[0].id.as_deref(), Some("tu_1"));
        assert_eq!((r.usage.prompt_tokens, r.usage.completion_tokens), (25, 8));
        let r = AnthropicWire.parse(&json!({"content": [], "stop_reason": "refusal"})).unwrap();
        assert_eq!(r.refusal.as_deref(), Some("the model refused (stop_reason refusal)"));
        assert_eq!(
            AnthropicWire.parse(&json!({"content": [], "stop_reason": "end_turn"})),
            Err(LlmError::Response("the response has no content".into()))
        );
        assert_eq!(
            AnthropicWire
                .parse(&json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})),
            Err(LlmError::Response("provider error: Overloaded".into()))
        );
    }
}
