//! The chat vocabulary every part of simtree speaks to a model in: [`Message`]s with a [`Role`],
//! the [`ToolSpec`]s a model may call, the [`ToolCall`]s it makes and the tool results that answer
//! them, and one dialect-neutral [`ChatRequest`] / [`ChatResponse`] pair.
//!
//! It sits at the bottom of the LLM layer and depends on nothing else in the crate, so the engine
//! (agents' prompts and memories), trading (the tool-calling agent), ABM generation, the ledger,
//! the dialects and the offline players all use these same types and nothing translates between
//! them.
//!
//! A conversation is one list of messages. Most are plain text (`{"role":"user","content":"…"}`,
//! the form the engine stores in its memories and upstream writes). A tool-calling conversation
//! adds two kinds: an assistant message carrying the `tool_calls` it made, and a `tool` message
//! carrying the result of the call named by `tool_call_id`. Each dialect sends those in its own
//! native form (OpenAI `tool_calls`/`tool`, Gemini `functionCall`/`functionResponse`, Anthropic
//! `tool_use`/`tool_result`). [`Message::flat`] writes any message as plain text, for the uses
//! that must not depend on a dialect: the replay hash and the offline mock's token count.

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Who speaks a message, as the chat APIs name it; `tool` carries the result of a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

impl Role {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }

    /// Parses a role name; only `user` and `assistant` may be stored in an agent's memory.
    pub(crate) fn parse_memory_role(s: &str) -> Option<Role> {
        match s {
            "user" => Some(Role::User),
            "assistant" => Some(Role::Assistant),
            _ => None,
        }
    }
}

/// One message. Plain text serialises as `{"role", "content"}` alone; the tool fields appear
/// only when set (an assistant's calls, or the call a `tool` message answers).
///
/// The tool fields live behind one box: agents' memories hold many plain messages and few tool
/// messages, so a plain one stays a role and a shared string (32 bytes; checked by a test).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "MessageWire", into = "MessageWire")]
pub struct Message {
    pub role: Role,
    pub content: Arc<str>,
    tools: Option<Box<ToolFields>>,
}

/// The rarely set part of a [`Message`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct ToolFields {
    calls: Vec<ToolCall>,
    call_id: Option<String>,
}

/// A [`Message`] as JSON: the tool fields flat beside `role` and `content`.
#[derive(Serialize, Deserialize)]
struct MessageWire {
    role: Role,
    content: Arc<str>,
    /// The calls an assistant message made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<ToolCall>,
    /// For a `tool` message: the id of the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<String>,
}

impl From<MessageWire> for Message {
    fn from(w: MessageWire) -> Message {
        Message::with_tools(w.role, w.content, w.tool_calls, w.tool_call_id)
    }
}

impl From<Message> for MessageWire {
    fn from(m: Message) -> MessageWire {
        let tools = m.tools.map(|t| *t).unwrap_or_default();
        MessageWire { role: m.role, content: m.content, tool_calls: tools.calls, tool_call_id: tools.call_id }
    }
}

impl Message {
    /// A plain text message.
    pub fn new(role: Role, content: impl Into<Arc<str>>) -> Self {
        Message { role, content: content.into(), tools: None }
    }

    fn with_tools(role: Role, content: Arc<str>, calls: Vec<ToolCall>, call_id: Option<String>) -> Self {
        let tools = (!calls.is_empty() || call_id.is_some()).then(|| Box::new(ToolFields { calls, call_id }));
        Message { role, content, tools }
    }

    /// An assistant message with the calls it made (`content` may be empty).
    pub fn assistant_calls(content: impl Into<Arc<str>>, calls: Vec<ToolCall>) -> Self {
        Message::with_tools(Role::Assistant, content.into(), calls, None)
    }

    /// The result of `call`, as a `tool` message.
    pub fn tool_result(call: &ToolCall, content: impl Into<Arc<str>>) -> Self {
        Message::with_tools(Role::Tool, content.into(), Vec::new(), call.id.clone())
    }

    /// The calls an assistant message made (none for any other message).
    pub(crate) fn tool_calls(&self) -> &[ToolCall] {
        self.tools.as_ref().map_or(&[], |t| &t.calls)
    }

    /// For a `tool` message: the id of the call it answers.
    pub(crate) fn tool_call_id(&self) -> Option<&str> {
        self.tools.as_ref()?.call_id.as_deref()
    }

    /// The message as plain text, the same under every dialect: a tool result becomes the user
    /// line `Tool result: …`, and each call of an assistant message is appended to its text as
    /// `[called NAME with ARGS]`. Plain messages come back unchanged.
    pub(crate) fn flat(&self) -> (Role, Cow<'_, str>) {
        match self.role {
            Role::Tool => (Role::User, Cow::Owned(format!("Tool result: {}", self.content))),
            Role::Assistant if !self.tool_calls().is_empty() => {
                let mut text = self.content.to_string();
                for c in self.tool_calls() {
                    text.push_str(&format!("\n[called {} with {}]", c.name, c.arguments));
                }
                (Role::Assistant, Cow::Owned(text))
            }
            role => (role, Cow::Borrowed(&self.content)),
        }
    }
}

/// A function the model may call: its name, what it is for, and a JSON Schema for its arguments.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

/// A call the model made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call's id (OpenAI and Anthropic give one; Gemini may not, and callers that need one,
    /// like the trading agent, fill it in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub name: String,
    /// The arguments as parsed JSON; a string when the model wrote something that is not JSON
    /// (judging a call is its consumer's job).
    pub arguments: Value,
}

impl ToolCall {
    /// The arguments as the JSON object Gemini's `args` and Anthropic's `input` must be: as they
    /// are when they are one, else parsed from the model's raw string, else wrapped as
    /// `{"arguments": …}` so nothing the model wrote is lost.
    pub(crate) fn arguments_object(&self) -> Value {
        match &self.arguments {
            Value::Object(_) => self.arguments.clone(),
            Value::String(s) => match serde_json::from_str::<Value>(s) {
                Ok(v @ Value::Object(_)) => v,
                _ => serde_json::json!({"arguments": self.arguments}),
            },
            other => serde_json::json!({"arguments": other}),
        }
    }
}

/// Whether and which tool the model must call.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides.
    #[default]
    Auto,
    /// No tool calls.
    None,
    /// Some tool must be called.
    Required,
    /// This tool must be called.
    Tool(String),
}

/// A named JSON Schema for structured output (see `llm::schema` for the portable subset).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JsonSchema {
    /// `^[a-zA-Z0-9_-]{1,64}$` — it becomes a function/tool name in some dialects.
    pub(crate) name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) description: Option<String>,
    pub schema: Value,
}

impl JsonSchema {
    pub fn new(name: impl Into<String>, schema: Value) -> JsonSchema {
        JsonSchema { name: name.into(), description: None, schema }
    }
}

/// Where a streamed reply's text goes while it arrives (a run's watchers). Called on the
/// provider's task: it must return quickly and never block.
pub(crate) trait StreamSink: Send + Sync {
    /// Whether anyone watches now: a call streams only then.
    fn wanted(&self) -> bool;
    /// Whether a person has this very run open (not only its tree): an offline reply is paced
    /// for them only, so a watched fan-out is not slowed child by child.
    fn paced(&self) -> bool {
        self.wanted()
    }
    /// The agent whose turn makes the calls that follow (`None`: no agent's), for those who
    /// watch to see who is writing.
    fn speaker(&self, _agent: Option<&str>) {}
    /// An attempt of a call starts streaming: text sent before (a failed attempt's) is void.
    fn start(&self);
    /// More of the reply's text.
    fn text(&self, piece: &str);
    /// The attempt's reply is complete.
    fn end(&self);
}

/// A request's optional [`StreamSink`]. It is not part of what a request asks: two requests are
/// equal whatever their watches, and a watch is never serialised.
#[derive(Clone, Default)]
pub struct Watch(Option<Arc<dyn StreamSink>>);

impl Watch {
    pub(crate) fn new(sink: Arc<dyn StreamSink>) -> Watch {
        Watch(Some(sink))
    }

    /// The sink, when there is one and someone watches.
    pub(crate) fn wanted(&self) -> Option<&dyn StreamSink> {
        self.0.as_deref().filter(|s| s.wanted())
    }
}

impl PartialEq for Watch {
    fn eq(&self, _: &Watch) -> bool {
        true
    }
}

impl fmt::Debug for Watch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() { "Watch(on)" } else { "Watch(off)" })
    }
}

/// One chat request, dialect-neutral.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// The conversation, system first (several system messages are joined), with any tool calls
    /// and results in place.
    pub messages: Vec<Message>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    #[serde(default)]
    pub tool_choice: ToolChoice,
    /// Ask for JSON matching this schema (what `llm::structured` sets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_schema: Option<JsonSchema>,
    /// Override the provider config's sampling settings for this request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Where the reply's text goes while it streams (`llm::stream`); not part of the request.
    #[serde(skip)]
    pub(crate) watch: Watch,
    /// What the provider's prompt cache may be told (`llm::cache`); not part of the request
    /// either: the same conversation asks the same whatever its hints.
    #[serde(skip)]
    pub(crate) cache: CacheHints,
}

/// Where a request's prompt repeats what earlier calls sent, and the key its calls share: set
/// by the per-run client from the simulator's state (`llm::cache::hints`), read by the
/// dialects to ask their provider's prompt cache for it (OpenAI `prompt_cache_key`, Anthropic
/// `cache_control` breakpoints).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CacheHints {
    /// One key per (tree, node the run started from, agent): the children of one node and the
    /// turns of one agent share it.
    pub(crate) key: Option<String>,
    /// Lengths, in messages from the start (system included), of prefixes of this prompt that
    /// an earlier call of the same agent sent byte for byte: its prompt at the fork and its
    /// prompt on its last turn. Ascending, each shorter than the prompt.
    pub prefixes: Vec<usize>,
    /// The prefix every run of the call's fan-out sends (the agent's prompt at the fork), when
    /// the run is one of a fan-out: a provider with explicit caches may store it once for all.
    pub(crate) shared: Option<SharedPrefix>,
    /// Set by the provider: the explicit cache (its name) that holds the first `len` messages,
    /// which the dialect then sends by name instead of as text.
    pub(crate) cached: Option<(String, usize)>,
    /// What pays for an explicit cache this call may create (the tree's budget, if any) and is
    /// told what it cost; none: nothing caps it or asks.
    pub spend: Spend,
}

/// What may pay for storing a prefix in a provider's explicit cache (a tree's budget), asked
/// by the provider before it creates one and told afterwards what the cache cost. One per call:
/// it keeps the hold between the two.
pub(crate) trait StoreBudget: Send + Sync {
    /// Holds the most that storing at most `tokens` tokens for `ttl_s` seconds can cost; `false`
    /// when the budget refuses (the cache is then not created).
    fn hold(&self, tokens: u64, ttl_s: u64) -> Pin<Box<dyn Future<Output = bool> + Send + '_>>;
    /// Ends the hold: `tokens` were stored for `ttl_s` seconds (0: nothing was stored).
    fn settle(&self, tokens: u64, ttl_s: u64) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}

/// A request's optional [`StoreBudget`]. Like [`Watch`], not part of what a request asks: two
/// hints are equal whatever their budgets.
#[derive(Clone, Default)]
pub struct Spend(Option<Arc<dyn StoreBudget>>);

impl Spend {
    pub(crate) fn new(budget: Arc<dyn StoreBudget>) -> Spend {
        Spend(Some(budget))
    }

    pub(crate) fn budget(&self) -> Option<&dyn StoreBudget> {
        self.0.as_deref()
    }
}

impl PartialEq for Spend {
    fn eq(&self, _: &Spend) -> bool {
        true
    }
}

impl Eq for Spend {}

impl fmt::Debug for Spend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() { "Spend(budget)" } else { "Spend(none)" })
    }
}

/// A prefix the sibling runs of one fan-out all send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SharedPrefix {
    /// Names the prefix: the runs' cache key (tree, node, agent) and a hash of the prefix.
    pub(crate) name: String,
    /// The runs' affinity (tree and node they start from): the fan-out whose end deletes it.
    pub(crate) affinity: u64,
    /// Its length in messages from the start (system included).
    pub(crate) len: usize,
    /// How many runs the fan-out started.
    pub(crate) runs: u64,
}

/// How a call asked the provider's prompt cache for help, recorded with the call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheHow {
    /// Nothing was asked, and the provider caches nothing unasked (Anthropic with the prompt
    /// cache switched off).
    #[default]
    None,
    /// Nothing to send: the provider caches prefixes by itself (Gemini's implicit caching, an
    /// OpenAI-compatible server without `prompt_cache_key`, llama.cpp's slots).
    Implicit,
    /// OpenAI's `prompt_cache_key` was sent.
    PromptCacheKey,
    /// Anthropic's `cache_control` breakpoints were placed.
    CacheControl,
    /// The prefix was sent by name, as an explicit cache created for a fan-out (Gemini's
    /// `cachedContents`).
    CachedContent,
}

impl CacheHow {
    /// The name as it is written in records and on the wire.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CacheHow::None => "none",
            CacheHow::Implicit => "implicit",
            CacheHow::PromptCacheKey => "prompt_cache_key",
            CacheHow::CacheControl => "cache_control",
            CacheHow::CachedContent => "cached_content",
        }
    }
}

/// What one call asked of the provider's prompt cache.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheUse {
    pub how: CacheHow,
    /// The `prompt_cache_key` sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Where `cache_control` breakpoints were put, as prefix lengths in messages from the start
    /// (1: after the system prompt, which follows the tools; 0: after the tools when there is
    /// no system prompt).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub breakpoints: Vec<u32>,
    /// The explicit cache the prefix was sent as (`cachedContents/…`), and how many messages
    /// it held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cached_content: Option<String>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) cached_messages: u32,
    /// The explicit cache this call created for its fan-out (it was the first to need it), which
    /// the provider bills apart from the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<CacheCreated>,
    /// How long the warm-up gate held the call (milliseconds) until the first call of its
    /// prefix was answered (`llm::warmup`); absent when it was not held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_ms: Option<u64>,
}

/// An explicit cache a call created: the tokens it stores (as the provider counted them, else as
/// the calls that used it reported them, else at most) and the lifetime asked for, which is what
/// storage is billed for (the cache is deleted sooner when its fan-out ends, so this is the most).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheCreated {
    pub tokens: u64,
    pub ttl_s: u64,
}

impl ChatRequest {
    /// A request with these messages and nothing else.
    pub fn new(messages: Vec<Message>) -> ChatRequest {
        ChatRequest { messages, ..ChatRequest::default() }
    }

    /// The system text (all system messages joined by a blank line), if any.
    pub(crate) fn system_text(&self) -> Option<String> {
        let parts: Vec<&str> =
            self.messages.iter().filter(|m| m.role == Role::System).map(|m| m.content.as_ref()).collect();
        (!parts.is_empty()).then(|| parts.join("\n\n"))
    }
}

/// Tokens one call used, as the provider reported them (0 when it did not).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Of the prompt tokens, those the server read from its prompt cache (when it says).
    #[serde(default)]
    pub(crate) cached_tokens: u64,
    /// Of the prompt tokens, those the server wrote to its prompt cache, which some providers
    /// bill above the prompt price (Anthropic's `cache_creation_input_tokens`).
    #[serde(default)]
    pub(crate) cache_write_tokens: u64,
}

impl Usage {
    pub(crate) fn total(&self) -> u64 {
        self.prompt_tokens + self.completion_tokens
    }
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, o: Usage) {
        self.prompt_tokens += o.prompt_tokens;
        self.completion_tokens += o.completion_tokens;
        self.cached_tokens += o.cached_tokens;
        self.cache_write_tokens += o.cache_write_tokens;
    }
}

/// What came back.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    /// The assistant text, trimmed (empty when the model only called tools).
    pub text: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    pub usage: Usage,
    /// Wall time of the whole call, retries and waits included.
    pub latency_ms: u64,
    /// Set when the model refused or a safety filter blocked the answer; `text` is then empty
    /// or partial. The provider layer turns it into `LlmError::Refused`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) refusal: Option<String>,
    /// The provider's stop/finish reason as it spelled it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// Set when the reply stopped because it reached the completion limit: that limit
    /// (`max_tokens`). The text is then cut off, which matters for JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cut_at_max_tokens: Option<u32>,
    /// Attempts that failed transiently (a timeout, a dropped or cut stream, 429, 5xx) and were
    /// retried before this reply came: the provider's HTTP retries. 0 offline and in replays.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) retries: u32,
    /// What the call asked of the provider's prompt cache (set by the HTTP provider; `None`
    /// offline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cache: Option<CacheUse>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_plain_message_stays_small() {
        // Role + Arc<str> + one pointer to the rare tool fields.
        assert!(std::mem::size_of::<Message>() <= 32, "{}", std::mem::size_of::<Message>());
        let call = ToolCall { id: Some("c1".into()), name: "f".into(), arguments: json!({}) };
        let back: Message =
            serde_json::from_value(json!({"role": "tool", "content": "ok", "tool_call_id": "c1"})).unwrap();
        assert_eq!(back, Message::tool_result(&call, "ok"));
        assert_eq!((back.tool_call_id(), back.tool_calls().len()), (Some("c1"), 0));
    }

    #[test]
    fn cache_use_names_are_those_serde_writes() {
        for how in [CacheHow::None, CacheHow::Implicit, CacheHow::PromptCacheKey, CacheHow::CacheControl] {
            assert_eq!(serde_json::to_value(how).unwrap(), json!(how.as_str()));
        }
    }

    #[test]
    fn plain_messages_serialise_as_role_and_content_only() {
        let m = Message::new(Role::User, "x");
        assert_eq!(serde_json::to_string(&m).unwrap(), r#"{"role":"user","content":"x"}"#);
        let back: Message = serde_json::from_str(r#"{"role":"assistant","content":"y"}"#).unwrap();
        assert_eq!(back, Message::new(Role::Assistant, "y"));
    }

    #[test]
    fn tool_messages_keep_their_calls_and_flatten_to_text() {
        let call = ToolCall { id: Some("c1".into()), name: "vote".into(), arguments: json!({"target": "Pia"}) };
        let asked = Message::assistant_calls("Voting.", vec![call.clone()]);
        let answer = Message::tool_result(&call, "ok");
        assert_eq!(
            serde_json::to_value(&answer).unwrap(),
            json!({"role": "tool", "content": "ok", "tool_call_id": "c1"})
        );
        assert_eq!(
            asked.flat(),
            (Role::Assistant, Cow::Owned::<str>("Voting.\n[called vote with {\"target\":\"Pia\"}]".into()))
        );
        assert_eq!(answer.flat(), (Role::User, Cow::Owned::<str>("Tool result: ok".into())));
        assert!(matches!(Message::new(Role::User, "u").flat().1, Cow::Borrowed("u")));
    }
}
