//! The seam between the shared HTTP client (`provider::HttpProvider`) and one dialect: a
//! [`Wire`] says how to shape a request and read a response, and nothing else. Dialect files
//! (`openai.rs`, `gemini.rs`, `anthropic.rs`) depend on this and on the chat vocabulary only;
//! the provider names them once, in its constructor table (`provider::build_provider`).

use serde_json::{Map, Value, json};

use super::LlmError;
use super::chat::{CacheHow, CacheUse, ChatRequest, ChatResponse, ToolCall};
use super::config::{Dialect, LlmConfig};

/// How one HTTP dialect shapes requests and reads responses. Pure: no I/O.
pub trait Wire: Send + Sync + 'static {
    fn dialect(&self) -> Dialect;
    /// The full URL for this request.
    fn url(&self, config: &LlmConfig, request: &ChatRequest) -> String;
    /// Headers besides `content-type`, auth included (never logged).
    fn headers(&self, config: &LlmConfig) -> Vec<(&'static str, String)>;
    fn body(&self, config: &LlmConfig, request: &ChatRequest) -> Value;
    /// Reads a 2xx JSON body. `latency_ms` is filled in by the caller.
    fn parse(&self, body: &Value) -> Result<ChatResponse, LlmError>;

    /// What [`Wire::body`] asks of the provider's prompt cache for this request (recorded with
    /// the call). By default nothing: the provider caches by itself.
    fn cache(&self, _config: &LlmConfig, _request: &ChatRequest) -> CacheUse {
        CacheUse { how: CacheHow::Implicit, ..CacheUse::default() }
    }

    /// Streaming: turns `body` (from [`Wire::body`]) into the request for an event stream and
    /// returns the URL to send it to; `None` when the dialect does not stream.
    fn stream(&self, _config: &LlmConfig, _request: &ChatRequest, _body: &mut Value) -> Option<String> {
        None
    }

    /// A reader for one streamed reply (only called after [`Wire::stream`] said yes).
    fn stream_reader(&self) -> Box<dyn StreamReader> {
        unreachable!("only dialects that stream are asked for a stream reader")
    }

    /// The provider's explicit prompt caches, when it has them (Gemini's `cachedContents`).
    fn explicit_cache(&self) -> Option<&dyn ExplicitCache> {
        None
    }
}

/// A provider's explicit prompt caches: resources created for a prefix, sent by name, deleted
/// when no longer needed. Pure, as [`Wire`]: the provider does the calls.
pub trait ExplicitCache: Send + Sync {
    /// The fewest prompt tokens the provider caches explicitly (a smaller prefix is refused).
    fn minimum_tokens(&self, config: &LlmConfig) -> u64;
    /// The URL and body that create a cache of the first `len` messages of `request`, kept for
    /// at most `ttl_s` seconds.
    fn create(&self, config: &LlmConfig, request: &ChatRequest, len: usize, ttl_s: u64) -> (String, Value);
    /// The created cache's name, from the creating call's answer.
    fn name(&self, answer: &Value) -> Option<String>;
    /// The tokens the created cache holds, from the creating call's answer, when it says.
    fn tokens(&self, answer: &Value) -> Option<u64>;
    /// The URL that deletes the cache `name` (with `DELETE`).
    fn delete_url(&self, config: &LlmConfig, name: &str) -> String;
}

/// Reads one streamed reply, event by event, into the JSON body the same reply would have had
/// unstreamed (which [`Wire::parse`] then reads as always). Pure: no I/O. Every part it keeps is
/// bounded by the bytes read, which the provider caps.
pub trait StreamReader: Send {
    /// One event (its `event:` name and its data): the text it adds to the reply (may be
    /// empty), or an error the stream reported.
    fn event(&mut self, name: Option<&str>, data: &str) -> Result<String, LlmError>;
    /// Whether the stream said it is complete (read no further).
    fn done(&self) -> bool;
    /// The reply as the plain JSON body, or why the stream is incomplete (it ended before its
    /// end marker: a failed attempt).
    fn finish(self: Box<Self>) -> Result<Value, StreamError>;
}

/// Why a streamed reply cannot be read whole. The provider takes it as a failed attempt, worth
/// another (a plain call's cut-off body would be one too).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    /// The stream ended before the dialect's end marker (`[DONE] line`, `message_stop event`,
    /// `finishReason`).
    #[error("the stream ended before its {0}")]
    EndedEarly(&'static str),
}

/// A stream event's data as JSON, or an error quoting its start.
/// Writes a request's sampling settings into `body` under a dialect's `keys` (temperature,
/// top-p, output limit, frequency penalty, presence penalty): the request's own values, else
/// the configuration's; the penalties only when they are not zero.
pub(crate) fn put_sampling(body: &mut Map<String, Value>, config: &LlmConfig, request: &ChatRequest, keys: [&str; 5]) {
    let [temperature, top_p, max_tokens, frequency, presence] = keys;
    body.insert(temperature.into(), json!(request.temperature.unwrap_or(config.temperature)));
    body.insert(top_p.into(), json!(request.top_p.unwrap_or(config.top_p)));
    body.insert(max_tokens.into(), json!(request.max_tokens.unwrap_or(config.max_tokens)));
    for (key, penalty) in [(frequency, config.frequency_penalty), (presence, config.presence_penalty)] {
        if penalty != 0.0 {
            body.insert(key.into(), json!(penalty));
        }
    }
}

/// A call as Anthropic's `tool_use` blocks and Gemini's `functionCall` parts write it: its
/// `name`, an optional `id`, and the arguments object under `arguments` (`{}` when absent).
/// `what` names the block in the error when it has no name.
pub(crate) fn tool_call(call: &Value, arguments: &str, what: &str) -> Result<ToolCall, LlmError> {
    let text = |key: &str| call.get(key).and_then(Value::as_str).map(str::to_string);
    Ok(ToolCall {
        name: text("name").ok_or_else(|| LlmError::Response(format!("{what} has no name")))?,
        id: text("id"),
        arguments: call.get(arguments).cloned().unwrap_or_else(|| json!({})),
    })
}

pub(crate) fn event_json(data: &str) -> Result<Value, LlmError> {
    serde_json::from_str(data).map_err(|e| {
        let start: String = data.chars().take(120).collect();
        LlmError::Response(format!("a stream event is not JSON ({e}); it starts {start:?}"))
    })
}
