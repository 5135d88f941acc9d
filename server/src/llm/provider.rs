//! The rich provider interface: [`ChatProvider`] takes a [`ChatRequest`] (messages plus tools,
//! tool choice, a response schema and sampling overrides) and returns a [`ChatResponse`] (text,
//! tool calls, token usage, latency, refusal). The engine's text-only [`LlmClient`] is served by
//! wrapping any provider in a [`ProviderClient`]; trading and ABM code asks for JSON through
//! [`structured`].
//!
//! The three HTTP dialects share one client, [`HttpProvider`]: a dialect ([`Wire`], in `wire.rs`)
//! only says how to shape the request and read the response; timeouts, retries, the shared [`Gate`], status
//! handling, the response size cap and key redaction live here once. [`build_provider`] turns an
//! [`LlmConfig`] into a provider, and a [`ProviderPool`] hands out one provider — one
//! [`Endpoint`]: its gate and what was learned about the server — per endpoint.
//!
//! Secrets: the key is redacted (when long enough to be a real key, see [`ApiKey::redact`]) from
//! every error and from everything a response carries (text, tool calls, refusal) before anyone
//! sees it, so a provider that echoes the key cannot get it into logs, records or exports.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use serde_json::Value;

use super::budget::messages_bound;
use super::cache::{self, FAN_OUT_SHARED};
use super::chat::{CacheCreated, CacheUse, ChatRequest, ChatResponse, JsonSchema, Message, StreamSink};
use super::config::{ApiKey, ConfigError, Dialect, LlmConfig, OpenAiJsonMode};
use super::endpoints::{LoadBoard, Sharing, share_load};
use super::resilience::{Failure, Gate, RetryPolicy, retry_after, with_retries};
use super::stream::{Scrubber, SseParser};
use super::wire::{ExplicitCache, Wire};
use super::{BoxFuture, LlmClient, LlmError, LlmState, MockClient, anthropic, gemini, openai, schema};

impl ChatResponse {
    /// `Err(LlmError::Refused)` for a refusal, else the response.
    pub(crate) fn into_result(self) -> Result<ChatResponse, LlmError> {
        match &self.refusal {
            Some(r) => Err(LlmError::Refused(r.clone())),
            None => Ok(self),
        }
    }
}

/// A model behind some dialect. Implementations are shared (`Arc`) by every tree and node; the
/// per-simulator `state` is only used by the mock (its call counters).
pub trait ChatProvider: Send + Sync {
    fn dialect(&self) -> Dialect;

    /// `dialect:model`, for errors and accounting.
    fn label(&self) -> String;

    /// The most completion tokens a call may produce when the request sets none (the
    /// configuration's `max_tokens`); `None` when unknown. A money budget needs it to bound a
    /// call's cost before making it.
    fn max_tokens(&self) -> Option<u32> {
        None
    }

    fn chat<'a>(
        &'a self,
        request: &'a ChatRequest,
        state: &'a mut LlmState,
    ) -> BoxFuture<'a, Result<ChatResponse, LlmError>>;

    /// The fan-out of runs keyed `affinity` ended: what the provider keeps for it (explicit
    /// caches) is removed. Nothing to do for most.
    fn end_fan_out(&self, _affinity: u64) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }

    /// Whether the plain calls of a fan-out of `runs` runs store a shared prefix of `bytes`
    /// bytes of text in an explicit cache, and for how many seconds at most; `None` for most.
    fn stores_prefix(&self, _bytes: u64, _runs: u64) -> Option<u64> {
        None
    }
}

/// Everything one call produced, handed to a [`ProviderClient`]'s observer (accounting and
/// recording hook).
#[derive(Debug)]
pub struct CallRecord<'a> {
    pub provider: String,
    pub request: &'a ChatRequest,
    pub result: &'a Result<ChatResponse, LlmError>,
}

type Observer = Arc<dyn Fn(&CallRecord<'_>) + Send + Sync>;

/// Serves the engine's text-only [`LlmClient`] from any [`ChatProvider`]: the messages become a
/// plain [`ChatRequest`], the response text comes back, a refusal becomes
/// [`LlmError::Refused`].
#[derive(Clone)]
pub struct ProviderClient {
    provider: Arc<dyn ChatProvider>,
    observer: Option<Observer>,
}

impl ProviderClient {
    pub fn new(provider: Arc<dyn ChatProvider>) -> ProviderClient {
        ProviderClient { provider, observer: None }
    }

    /// Calls `f` after every call, success or failure.
    pub fn with_observer(mut self, f: impl Fn(&CallRecord<'_>) + Send + Sync + 'static) -> ProviderClient {
        self.observer = Some(Arc::new(f));
        self
    }

    pub fn provider(&self) -> &Arc<dyn ChatProvider> {
        &self.provider
    }
}

impl std::fmt::Debug for ProviderClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderClient").field("provider", &self.provider.label()).finish_non_exhaustive()
    }
}

impl LlmClient for ProviderClient {
    fn chat<'a>(&'a self, messages: &'a [Message], state: &'a mut LlmState) -> BoxFuture<'a, Result<String, LlmError>> {
        Box::pin(async move {
            let request = ChatRequest::new(messages.to_vec());
            let result = self.provider.chat(&request, state).await;
            if let Some(f) = &self.observer {
                f(&CallRecord { provider: self.provider.label(), request: &request, result: &result });
            }
            Ok(result?.into_result()?.text)
        })
    }
}

/// Asks `provider` for JSON matching `schema` and returns it, validated.
///
/// Each dialect uses its native mechanism (OpenAI `response_format` json_schema strict, Gemini
/// `responseSchema`, Anthropic a forced tool call, the mock a generated example); the answer is
/// taken from a tool call named like the schema if there is one, else parsed from the text (a
/// Markdown code fence around it is tolerated). A refusal, non-JSON text or a value that fails
/// [`schema::validate`] is an error naming the provider and, for a mismatch, the JSON path.
pub async fn structured(
    provider: &dyn ChatProvider,
    request: ChatRequest,
    schema: JsonSchema,
    state: &mut LlmState,
) -> Result<Value, LlmError> {
    structured_response(provider, request, schema, state).await.map(|(v, _)| v)
}

/// [`structured`], also returning the full response (for its usage and latency).
pub async fn structured_response(
    provider: &dyn ChatProvider,
    mut request: ChatRequest,
    schema: JsonSchema,
    state: &mut LlmState,
) -> Result<(Value, ChatResponse), LlmError> {
    let label = provider.label();
    request.response_schema = Some(schema.clone());
    let response = provider.chat(&request, state).await?.into_result()?;
    // A reply cut at max_tokens is the likely cause of any defect below; say so, with the limit.
    let cut = |e: String| match response.cut_at_max_tokens {
        Some(limit) => LlmError::Response(format!(
            "{label}: structured output for {} was cut off at the max_tokens limit ({limit} tokens) \
             before the JSON was complete; raise max_tokens (LLM_MAX_TOKENS). Detail: {e}",
            schema.name
        )),
        None => LlmError::Response(format!("{label}: {e}")),
    };
    let value = match response.tool_calls.iter().find(|c| c.name == schema.name) {
        Some(call) => call.arguments.clone(),
        None => parse_json_text(&response.text).map_err(|e| {
            cut(format!(
                "structured output for {} is not JSON ({e}); text starts {:?}",
                schema.name,
                excerpt(&response.text, 120)
            ))
        })?,
    };
    schema::validate(&schema.schema, &value)
        .map_err(|e| cut(format!("structured output does not match schema {}: {e}", schema.name)))?;
    Ok((value, response))
}

fn parse_json_text(text: &str) -> Result<Value, serde_json::Error> {
    let t = text.trim();
    let unfenced = t
        .strip_prefix("```json")
        .or_else(|| t.strip_prefix("```"))
        .and_then(|r| r.trim_end().strip_suffix("```"))
        .unwrap_or(t);
    serde_json::from_str(unfenced.trim())
}

/// The first `max` characters of `s`, marked when cut.
pub(crate) fn excerpt(s: &str, max: usize) -> String {
    let mut out: String = s.chars().take(max).collect();
    if s.chars().count() > max {
        out.push('…');
    }
    out
}

/// What every provider aimed at one endpoint shares: the [`Gate`] (so the limits hold across
/// trees, scenarios and per-agent overrides) and what was learned about the server — for the
/// openai dialect, which form of structured output it accepts, found out once from a refusal.
pub struct Endpoint {
    gate: Arc<Gate>,
    json_mode: Mutex<Option<OpenAiJsonMode>>,
    /// Set when a streamed reply of this server came without token counts: its calls are not
    /// streamed again, so that usage, budgets and recordings keep their counts.
    streams_without_usage: std::sync::atomic::AtomicBool,
    /// Set when this server refused `prompt_cache_key` (a field it does not know): it is not
    /// sent to it again.
    refuses_cache_key: std::sync::atomic::AtomicBool,
    /// The explicit caches created on this server for fan-outs, by shared prefix name: the
    /// fan-out's affinity and the cache's name once created (`None`: creating it failed, and
    /// the fan-out's calls go without).
    explicit: Mutex<HashMap<String, (u64, ExplicitCell)>>,
}

/// One explicit cache, created once by the first call that needs it while the others wait.
type ExplicitCell = Arc<tokio::sync::OnceCell<Option<String>>>;

/// How long an explicit cache lives at most: it is deleted when its fan-out ends, and expires by
/// itself if that never comes (a process that stopped, a run taken by a worker elsewhere).
const EXPLICIT_TTL_S: u64 = 3600;

impl Endpoint {
    pub(crate) fn from_config(config: &LlmConfig) -> Endpoint {
        Endpoint {
            gate: Arc::new(Gate::from_config(config)),
            json_mode: Mutex::new(None),
            streams_without_usage: Default::default(),
            refuses_cache_key: Default::default(),
            explicit: Default::default(),
        }
    }

    pub fn gate(&self) -> &Arc<Gate> {
        &self.gate
    }

    fn lock_explicit(&self) -> std::sync::MutexGuard<'_, HashMap<String, (u64, ExplicitCell)>> {
        self.explicit.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The structured-output form this server accepted after refusing the configured one.
    pub(crate) fn learned_json_mode(&self) -> Option<OpenAiJsonMode> {
        *self.json_mode.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn learn_json_mode(&self, mode: OpenAiJsonMode) {
        *self.json_mode.lock().unwrap_or_else(|p| p.into_inner()) = Some(mode);
    }
}

/// One HTTP provider: a dialect, its config, a connection pool and the endpoint it shares.
pub struct HttpProvider<W: Wire> {
    config: LlmConfig,
    wire: W,
    http: reqwest::Client,
    endpoint: Arc<Endpoint>,
    policy: RetryPolicy,
}

/// How an attempt ended when it did not fail outright.
enum Reply {
    Done(Box<ChatResponse>),
    /// The server refused the request's `response_format` (a 400, 422 or 500 whose body names
    /// it): the other form may work. Carries the server's reason.
    FormatRefused(String),
    /// The server refused `prompt_cache_key` (a 400 or 422 whose body names it): the request
    /// works without it. Carries the server's reason.
    CacheKeyRefused(String),
}

impl<W: Wire> HttpProvider<W> {
    /// A provider with its own endpoint state built from the config's limits.
    pub fn new(config: LlmConfig, wire: W) -> Result<HttpProvider<W>, ConfigError> {
        let endpoint = Arc::new(Endpoint::from_config(&config));
        HttpProvider::with_endpoint(config, wire, endpoint)
    }

    /// A provider sharing `endpoint` with others (the same server under different settings).
    pub(crate) fn with_endpoint(
        config: LlmConfig,
        wire: W,
        endpoint: Arc<Endpoint>,
    ) -> Result<HttpProvider<W>, ConfigError> {
        config.validate()?;
        let http = reqwest::Client::builder().build().map_err(|e| ConfigError::new("http client", e.to_string()))?;
        Ok(HttpProvider { policy: RetryPolicy::from_config(&config), config, wire, http, endpoint })
    }

    pub fn config(&self) -> &LlmConfig {
        &self.config
    }

    pub fn gate(&self) -> &Arc<Gate> {
        &self.endpoint.gate
    }

    /// Redacts the key from `msg` (a proxy or server could echo a header back).
    fn scrub(&self, msg: String) -> String {
        match &self.config.api_key {
            Some(k) => k.redact(&msg),
            None => msg,
        }
    }

    /// Reads the body, at most `max_response_bytes` of it: a larger one is refused as soon as it
    /// is known to be larger (by its Content-Length, else while streaming), never buffered whole.
    async fn read_body(&self, resp: &mut reqwest::Response) -> Result<Vec<u8>, Failure> {
        let cap = self.config.max_response_bytes;
        let too_big = |what: String| {
            Failure::Fatal(LlmError::Response(format!(
                "the response body is {what}, larger than max_response_bytes = {cap} bytes \
                 (LLM_MAX_RESPONSE_BYTES); it was not read further"
            )))
        };
        if let Some(n) = resp.content_length().filter(|n| *n > cap) {
            return Err(too_big(format!("{n} bytes")));
        }
        let mut out = Vec::new();
        loop {
            let chunk = resp.chunk().await.map_err(|e| Failure::Transient {
                reason: self.scrub(format!("reading the response failed: {e}")),
                retry_after: None,
            })?;
            let Some(chunk) = chunk else { return Ok(out) };
            if (out.len() + chunk.len()) as u64 > cap {
                return Err(too_big(format!("over {} bytes", out.len() + chunk.len())));
            }
            out.extend_from_slice(&chunk);
        }
    }

    /// Reads a `text/event-stream` body: each piece of text goes to `sink` (the key masked) as
    /// it comes, and the events are put back together into the body a plain call would have
    /// had. Every byte counts against `max_response_bytes`; a stream that ends before its end
    /// marker is a failed attempt (retried like a dropped connection), one that never ends is
    /// cut off by the attempt's timeout.
    async fn read_stream(&self, resp: &mut reqwest::Response, sink: &dyn StreamSink) -> Result<Value, Failure> {
        let cap = self.config.max_response_bytes;
        let fatal = |m: String| Failure::Fatal(LlmError::Response(self.scrub(m)));
        let mut parser = SseParser::default();
        let mut reader = self.wire.stream_reader();
        let mut scrub = Scrubber::new(self.config.api_key.as_ref());
        let mut read = 0u64;
        sink.start();
        loop {
            let chunk = resp.chunk().await.map_err(|e| Failure::Transient {
                reason: self.scrub(format!("reading the stream failed: {e}")),
                retry_after: None,
            })?;
            let ended = chunk.is_none();
            let events = match chunk {
                Some(chunk) => {
                    read += chunk.len() as u64;
                    if read > cap {
                        return Err(fatal(format!(
                            "the streamed response is over {read} bytes, larger than max_response_bytes = \
                             {cap} bytes (LLM_MAX_RESPONSE_BYTES); it was cut off"
                        )));
                    }
                    parser.feed(&chunk).map_err(|e| fatal(e.to_string()))?
                }
                None => parser.finish().map_err(|e| fatal(e.to_string()))?.into_iter().collect(),
            };
            for event in events {
                let piece = reader
                    .event(event.name.as_deref(), &event.data)
                    .map_err(|e| Failure::Fatal(self.scrub_error(e)))?;
                let safe = scrub.push(&piece);
                if !safe.is_empty() {
                    sink.text(&safe);
                }
                if reader.done() {
                    break;
                }
            }
            if ended || reader.done() {
                let rest = scrub.flush();
                if !rest.is_empty() {
                    sink.text(&rest);
                }
                let body =
                    reader.finish().map_err(|why| Failure::Transient { reason: why.to_string(), retry_after: None })?;
                sink.end();
                return Ok(body);
            }
        }
    }

    fn scrub_error(&self, e: LlmError) -> LlmError {
        match e {
            LlmError::Request(m) => LlmError::Request(self.scrub(m)),
            LlmError::Response(m) => LlmError::Response(self.scrub(m)),
            LlmError::Refused(m) => LlmError::Refused(self.scrub(m)),
        }
    }

    /// A 2xx body read as the dialect's response, the key masked in it.
    fn done(&self, json: &Value) -> Result<Reply, Failure> {
        let response = self.wire.parse(json).map_err(|e| Failure::Fatal(self.scrub_error(e)))?;
        Ok(Reply::Done(Box::new(match &self.config.api_key {
            Some(k) => redact_response(k, response),
            None => response,
        })))
    }

    async fn attempt(&self, url: &str, body: &Value, sink: Option<&dyn StreamSink>) -> Result<Reply, Failure> {
        let mut req = self.http.post(url).json(body);
        for (name, value) in self.wire.headers(&self.config) {
            req = req.header(name, value);
        }
        let mut resp = req.send().await.map_err(|e| Failure::Transient {
            reason: self.scrub(format!("connection failed: {e}")),
            retry_after: None,
        })?;
        let status = resp.status();
        let wait = retry_after(resp.headers(), SystemTime::now());
        let streamed = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
        if let (true, true, Some(sink)) = (status.is_success(), streamed, sink) {
            let json = self.read_stream(&mut resp, sink).await?;
            let reply = self.done(&json)?;
            if let Reply::Done(r) = &reply
                && r.usage.total() == 0
            {
                tracing::warn!(
                    provider = %self.label(),
                    "a streamed reply came without token counts; this server's calls are no longer streamed"
                );
                self.endpoint.streams_without_usage.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            return Ok(reply);
        }
        // A server that ignored the request to stream answers with a plain body.
        let bytes = self.read_body(&mut resp).await?;
        if !status.is_success() {
            let reason = self.scrub(format!("HTTP {status}{}", error_detail(&bytes)));
            // llama-cpp-python answers an unknown response_format with a 500 validation error,
            // others with 400 or 422: not worth retrying as is, but the other form may work.
            let text = String::from_utf8_lossy(&bytes);
            // A server that refuses fields it does not know names the cache key.
            if body.get("prompt_cache_key").is_some()
                && text.contains("prompt_cache_key")
                && matches!(status.as_u16(), 400 | 422)
            {
                return Ok(Reply::CacheKeyRefused(reason));
            }
            let names_format = text.contains("response_format");
            if body.get("response_format").is_some() && names_format && matches!(status.as_u16(), 400 | 422 | 500) {
                return Ok(Reply::FormatRefused(reason));
            }
            return Err(if status.as_u16() == 429 || status.as_u16() == 408 || status.is_server_error() {
                Failure::Transient { reason, retry_after: wait }
            } else {
                Failure::Fatal(LlmError::Request(reason))
            });
        }
        let json: Value = serde_json::from_slice(&bytes).map_err(|e| {
            Failure::Fatal(LlmError::Response(self.scrub(format!(
                "malformed JSON in the response body ({e}); body starts {:?}",
                excerpt(&String::from_utf8_lossy(&bytes), 120)
            ))))
        })?;
        self.done(&json)
    }

    /// Sends `request` with structured output asked for in `mode` (only the openai dialect has
    /// modes), retrying transient failures.
    /// Streamed when the request's watch is wanted, `stream` is on, the dialect streams and
    /// the server has not been seen to stream without token counts.
    /// A server that refuses `prompt_cache_key` is sent the request again without it, and never
    /// the key again.
    async fn send(&self, url: &str, request: &ChatRequest, mode: OpenAiJsonMode) -> Result<Reply, LlmError> {
        loop {
            let refuses_key = self.endpoint.refuses_cache_key.load(std::sync::atomic::Ordering::Relaxed);
            let adjusted;
            let config = if mode == self.config.openai_json_mode && !refuses_key {
                &self.config
            } else {
                let mut c = self.config.clone();
                c.openai_json_mode = mode;
                c.prompt_cache &= !refuses_key;
                adjusted = c;
                &adjusted
            };
            match self.send_as(url, request, config).await? {
                Reply::CacheKeyRefused(reason) if !refuses_key => {
                    tracing::warn!(
                        provider = %self.label(),
                        %reason,
                        "the server refuses prompt_cache_key; it is no longer sent to this server"
                    );
                    self.endpoint.refuses_cache_key.store(true, std::sync::atomic::Ordering::Relaxed);
                }
                Reply::CacheKeyRefused(reason) => return Err(LlmError::Request(reason)),
                Reply::Done(mut r) => {
                    r.cache = Some(self.wire.cache(config, request));
                    return Ok(Reply::Done(r));
                }
                other => return Ok(other),
            }
        }
    }

    /// [`Self::send`] with `config` as it stands.
    async fn send_as(&self, url: &str, request: &ChatRequest, config: &LlmConfig) -> Result<Reply, LlmError> {
        let mut body = self.wire.body(config, request);
        let sink = request.watch.wanted().filter(|_| {
            self.config.stream && !self.endpoint.streams_without_usage.load(std::sync::atomic::Ordering::Relaxed)
        });
        let stream_url = sink.and_then(|_| self.wire.stream(&self.config, request, &mut body));
        let (url, sink) = match &stream_url {
            Some(u) => (u.as_str(), sink),
            None => (url, None),
        };
        let tried = std::sync::atomic::AtomicU32::new(0);
        let reply = with_retries(&self.label(), &self.policy, self.config.timeout(), &self.endpoint.gate, || {
            tried.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.attempt(url, &body, sink)
        })
        .await?;
        // The attempts before the one that answered were retried.
        Ok(match reply {
            Reply::Done(mut r) => {
                r.retries = tried.into_inner().saturating_sub(1);
                Reply::Done(r)
            }
            other => other,
        })
    }
}

/// `r` with the key masked in everything the provider wrote.
fn redact_response(key: &ApiKey, mut r: ChatResponse) -> ChatResponse {
    fn walk(key: &ApiKey, v: &mut Value) {
        match v {
            Value::String(s) => *s = key.redact(s),
            Value::Array(items) => items.iter_mut().for_each(|x| walk(key, x)),
            Value::Object(map) => map.values_mut().for_each(|x| walk(key, x)),
            _ => {}
        }
    }
    r.text = key.redact(&r.text);
    r.refusal = r.refusal.map(|x| key.redact(&x));
    for call in &mut r.tool_calls {
        call.name = key.redact(&call.name);
        call.id = call.id.as_deref().map(|x| key.redact(x));
        walk(key, &mut call.arguments);
    }
    r
}

/// `: message` from a provider's JSON error body (`{"error": {"message": …}}` in all three
/// dialects), else a short excerpt of the raw body.
fn error_detail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let msg = serde_json::from_slice::<Value>(bytes)
        .ok()
        .and_then(|v| v.pointer("/error/message").or(v.pointer("/message")).and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| text.trim().to_string());
    if msg.is_empty() { String::new() } else { format!(": {}", excerpt(&msg, 300)) }
}

/// The explicit cache a call names: its name and how many messages it holds, and, for the call
/// that created it, what it was created with.
struct Named {
    name: String,
    len: usize,
    created: Option<Creation>,
}

/// A cache a call created: the tokens the provider said it holds (when it said) and the most it
/// can hold (the prefix's bound, which the budget held).
#[derive(Clone, Copy)]
struct Creation {
    reported: Option<u64>,
    bound: u64,
}

impl<W: Wire> HttpProvider<W> {
    /// One call, its shared prefix sent as an explicit cache when one serves it; a call that
    /// fails so is sent again as plain text (the cache may have expired), and the cache is
    /// not used again. The call that created the cache records it and settles it with the
    /// request's budget.
    async fn call(&self, request: &ChatRequest, start: Instant) -> Result<ChatResponse, LlmError> {
        let Some(named) = self.explicit_cache(request).await else {
            return self.call_as(request, start).await;
        };
        let mut by_name = request.clone();
        by_name.cache.cached = Some((named.name.clone(), named.len));
        let (mut result, used) = match self.call_as(&by_name, start).await {
            Err(e) if !matches!(e, LlmError::Refused(_)) => {
                tracing::warn!(provider = %self.label(), error = %e, cache = %named.name,
                    "a call naming an explicit cache failed; it goes again without");
                if let Some(shared) = &request.cache.shared {
                    self.endpoint.lock_explicit().remove(&shared.name);
                }
                (self.call_as(request, start).await, false)
            }
            other => (other, true),
        };
        if let Some(c) = named.created {
            // What the cache holds: as the provider counted it, else as the call that used it
            // was served from it, else at most; never more than the most the prefix can be,
            // which the budget held (a count above it is not believed).
            let served = result.as_ref().ok().filter(|_| used).map(|r| r.usage.cached_tokens);
            let tokens = c.reported.or(served.filter(|n| *n > 0)).unwrap_or(c.bound).min(c.bound);
            if let Some(budget) = request.cache.spend.budget() {
                budget.settle(tokens, EXPLICIT_TTL_S).await;
            }
            if let Ok(r) = &mut result {
                r.cache.get_or_insert_with(CacheUse::default).created =
                    Some(CacheCreated { tokens, ttl_s: EXPLICIT_TTL_S });
            }
        }
        result
    }

    /// The explicit cache for `request`'s shared prefix, created by the first call of the
    /// fan-out that asks: only for a dialect that has them, with the prompt cache on, for a
    /// plain request of a fan-out of [`FAN_OUT_SHARED`] or more whose prefix is above the
    /// provider's minimum (estimated at four bytes a token), and when the request's budget
    /// admits storing it.
    async fn explicit_cache(&self, request: &ChatRequest) -> Option<Named> {
        let ec = self.wire.explicit_cache()?;
        let shared = request.cache.shared.as_ref()?;
        let plain = request.tools.is_empty() && request.response_schema.is_none();
        let prefix = request.messages.get(..shared.len)?;
        if !plain || self.stores_prefix(cache::text_bytes(prefix), shared.runs).is_none() {
            return None;
        }
        let cell = self
            .endpoint
            .lock_explicit()
            .entry(shared.name.clone())
            .or_insert_with(|| (shared.affinity, Arc::default()))
            .1
            .clone();
        let bound = messages_bound(prefix);
        let mut created = None;
        let mine = &mut created;
        let name = cell
            .get_or_init(move || async move {
                let made = self.create_explicit(ec, request, shared.len, bound).await;
                *mine = made.as_ref().map(|&(_, reported)| Creation { reported, bound });
                made.map(|(name, _)| name)
            })
            .await
            .clone()?;
        Some(Named { name, len: shared.len, created })
    }

    /// Creates an explicit cache of the first `len` messages of `request` (at most `bound`
    /// tokens), once the request's budget holds what that may cost: its name and the tokens the
    /// provider says it holds, or `None` (logged) when the budget or the server refuses or the
    /// server cannot be reached.
    async fn create_explicit(
        &self,
        ec: &dyn ExplicitCache,
        request: &ChatRequest,
        len: usize,
        bound: u64,
    ) -> Option<(String, Option<u64>)> {
        let budget = request.cache.spend.budget();
        if let Some(b) = budget
            && !b.hold(bound, EXPLICIT_TTL_S).await
        {
            tracing::info!(provider = %self.label(),
                "the tree's budget cannot hold an explicit prompt cache; the fan-out's calls go without");
            return None;
        }
        let (url, body) = ec.create(&self.config, request, len, EXPLICIT_TTL_S);
        let made = match self.explicit_request(self.http.post(&url).json(&body)).await {
            Ok(answer) => ec
                .name(&answer)
                .map(|name| (name, ec.tokens(&answer)))
                .ok_or_else(|| "the answer names no cache".to_string()),
            Err(e) => Err(e.to_string()),
        };
        match made {
            Ok(made) => Some(made),
            Err(why) => {
                tracing::warn!(provider = %self.label(), reason = %why,
                    "an explicit prompt cache could not be created; the fan-out's calls go without");
                if let Some(b) = budget {
                    b.settle(0, EXPLICIT_TTL_S).await;
                }
                None
            }
        }
    }

    /// Sends a request of the explicit-cache API (with the dialect's headers, within the
    /// attempt timeout): its JSON answer, or why not (the key masked).
    async fn explicit_request(&self, req: reqwest::RequestBuilder) -> Result<Value, LlmError> {
        let failed = |e: reqwest::Error| LlmError::Request(self.scrub(e.to_string()));
        let mut req = req.timeout(self.config.timeout());
        for (name, value) in self.wire.headers(&self.config) {
            req = req.header(name, value);
        }
        let resp = req.send().await.map_err(failed)?;
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(failed)?;
        if !status.is_success() {
            return Err(LlmError::Request(self.scrub(format!("HTTP {status}{}", error_detail(&bytes)))));
        }
        Ok(serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    /// Deletes the explicit caches created for the fan-out keyed `affinity`.
    async fn delete_explicit(&self, affinity: u64) {
        let Some(ec) = self.wire.explicit_cache() else { return };
        let cells: Vec<ExplicitCell> = {
            let mut map = self.endpoint.lock_explicit();
            let keys: Vec<String> = map.iter().filter(|(_, (a, _))| *a == affinity).map(|(k, _)| k.clone()).collect();
            keys.iter().filter_map(|k| map.remove(k)).map(|(_, c)| c).collect()
        };
        for name in cells.iter().filter_map(|c| c.get().cloned().flatten()) {
            let url = ec.delete_url(&self.config, &name);
            if let Err(why) = self.explicit_request(self.http.delete(&url)).await {
                tracing::warn!(provider = %self.label(), cache = %name, reason = %why,
                    "an explicit prompt cache could not be deleted; it expires by itself");
            }
        }
    }

    /// One call: the request in the structured-output form the endpoint takes (switching once
    /// when the server refuses it), retries included.
    async fn call_as(&self, request: &ChatRequest, start: Instant) -> Result<ChatResponse, LlmError> {
        let url = self.wire.url(&self.config, request);
        let label = self.label();
        let first = self.endpoint.learned_json_mode().unwrap_or(self.config.openai_json_mode);
        let switchable = request.response_schema.is_some() && self.wire.dialect() == Dialect::OpenAi;
        let mut response = *match self.send(&url, request, first).await? {
            Reply::Done(r) => r,
            Reply::FormatRefused(reason) if switchable => {
                let other = first.other();
                match self.send(&url, request, other).await? {
                    Reply::Done(r) => {
                        self.endpoint.learn_json_mode(other);
                        r
                    }
                    Reply::FormatRefused(again) | Reply::CacheKeyRefused(again) => {
                        return Err(LlmError::Request(format!(
                            "{label}: the server refuses both forms of structured output \
                             (response_format {}: {reason}; {}: {again})",
                            first.as_str(),
                            other.as_str()
                        )));
                    }
                }
            }
            Reply::FormatRefused(reason) | Reply::CacheKeyRefused(reason) => {
                return Err(LlmError::Request(format!("{label}: {reason}")));
            }
        };
        response.latency_ms = start.elapsed().as_millis() as u64;
        if matches!(response.finish_reason.as_deref(), Some("length" | "MAX_TOKENS" | "max_tokens")) {
            response.cut_at_max_tokens = Some(request.max_tokens.unwrap_or(self.config.max_tokens));
        }
        response.refusal = response.refusal.map(|r| format!("{label}: {r}"));
        Ok(response)
    }
}

impl<W: Wire> ChatProvider for HttpProvider<W> {
    fn dialect(&self) -> Dialect {
        self.wire.dialect()
    }

    fn label(&self) -> String {
        self.config.label()
    }

    fn max_tokens(&self) -> Option<u32> {
        Some(self.config.max_tokens)
    }

    fn end_fan_out(&self, affinity: u64) -> BoxFuture<'_, ()> {
        Box::pin(self.delete_explicit(affinity))
    }

    /// With the prompt cache on, a dialect that has explicit caches stores the prefix of a
    /// fan-out of [`FAN_OUT_SHARED`] or more whose text is above the provider's minimum
    /// (estimated at four bytes a token), for [`EXPLICIT_TTL_S`].
    fn stores_prefix(&self, bytes: u64, runs: u64) -> Option<u64> {
        let ec = self.wire.explicit_cache()?;
        let fits = self.config.prompt_cache && runs >= FAN_OUT_SHARED && bytes / 4 >= ec.minimum_tokens(&self.config);
        fits.then_some(EXPLICIT_TTL_S)
    }

    /// Logs one line per call — `debug` with the latency and tokens, `warn` for a failure or a
    /// refusal (each retry has its own `warn`, see `resilience`) — with the dialect and model but
    /// never the key or the prompt.
    fn chat<'a>(
        &'a self,
        request: &'a ChatRequest,
        _state: &'a mut LlmState,
    ) -> BoxFuture<'a, Result<ChatResponse, LlmError>> {
        Box::pin(async move {
            let start = Instant::now();
            let result = self.call(request, start).await;
            let (dialect, model) = (self.wire.dialect().as_str(), self.config.model.as_str());
            let ms = start.elapsed().as_millis() as u64;
            match &result {
                Ok(r) if r.refusal.is_none() => tracing::debug!(
                    dialect,
                    model,
                    ms,
                    prompt_tokens = r.usage.prompt_tokens,
                    completion_tokens = r.usage.completion_tokens,
                    finish_reason = r.finish_reason.as_deref().unwrap_or(""),
                    "LLM call"
                ),
                // The refusal's text is the model's and may quote the prompt: only its reason.
                Ok(r) => tracing::warn!(
                    dialect,
                    model,
                    ms,
                    finish_reason = r.finish_reason.as_deref().unwrap_or(""),
                    "LLM call refused"
                ),
                Err(e) => tracing::warn!(dialect, model, ms, error = %e, "LLM call failed"),
            }
            result
        })
    }
}

/// A provider for `config` with its own endpoint state.
pub fn build_provider(config: &LlmConfig) -> Result<Arc<dyn ChatProvider>, ConfigError> {
    build_for(config, Arc::new(Endpoint::from_config(config)))
}

/// The constructor table: the one place that names the dialects (they depend on `chat` and
/// `wire`, never on this module).
fn build_for(config: &LlmConfig, endpoint: Arc<Endpoint>) -> Result<Arc<dyn ChatProvider>, ConfigError> {
    let c = config.clone();
    let e = endpoint;
    Ok(match config.dialect {
        Dialect::OpenAi => Arc::new(HttpProvider::with_endpoint(c, openai::OpenAiWire, e)?),
        Dialect::Gemini => Arc::new(HttpProvider::with_endpoint(c, gemini::GeminiWire, e)?),
        Dialect::Anthropic => Arc::new(HttpProvider::with_endpoint(c, anthropic::AnthropicWire, e)?),
        Dialect::Mock => {
            config.validate()?;
            Arc::new(MockClient)
        }
        // The scripted player is the engine's; `crate::backend` serves it, never the pool.
        Dialect::Scripted => {
            return Err(ConfigError::new(
                "LLM_DIALECT",
                "the scripted player is an offline player served by the backend, not a provider",
            ));
        }
    })
}

/// Whether calls of `dialect` go to a server (and count against its limits).
fn networked(dialect: Dialect) -> bool {
    matches!(dialect, Dialect::OpenAi | Dialect::Gemini | Dialect::Anthropic)
}

/// One model served by several servers. Each call goes to one member: the member that served the
/// calling agent's last call ([`LlmState::served_by`]), while it has a free slot — its prompt
/// cache holds that agent's prompt so far, which the next prompt extends; siblings forked from
/// one node inherit it, so their byte-identical prompts meet the cache that has their prefix.
/// Otherwise the member a hash of the simulator's affinity key ([`LlmState::affinity`], set from
/// the node a run starts from) ranks first, while it has a free slot; else the least loaded
/// (in-flight requests over its limit; ties taken in turn). Without an agent or a key, the least
/// loaded. Load counts the calls in flight at a member from every process when the pool shares
/// its limits through a load board ([`ProviderPool::share_load`]), else this process's.
pub(crate) struct EndpointSet {
    label: String,
    members: Vec<(Arc<dyn ChatProvider>, Arc<Gate>)>,
    /// Whether the affinity key is followed (else: always the least loaded).
    affinity: bool,
    /// Where the next search for the least loaded starts: ties go round.
    next: std::sync::atomic::AtomicUsize,
}

impl EndpointSet {
    pub fn new(label: String, members: Vec<(Arc<dyn ChatProvider>, Arc<Gate>)>) -> EndpointSet {
        EndpointSet { label, members, affinity: true, next: Default::default() }
    }

    /// The member a call goes to now: `last` (the member that served the agent's last call)
    /// while it has a free slot, else the one affinity `key` ranks first while it has one,
    /// else the least loaded.
    pub(crate) fn choose(&self, last: Option<usize>, key: u64) -> usize {
        let load = |i: usize| {
            let g = &self.members[i].1;
            g.in_flight_everywhere() as f64 / g.limit() as f64
        };
        if let Some(i) = last.filter(|&i| i < self.members.len() && load(i) < 1.0) {
            return i;
        }
        if key != 0 {
            // Rendezvous hashing: every key has its own order of the members, stable when a
            // member is added or removed.
            let rank = |i: usize| {
                let mut z = key ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                z ^ (z >> 31)
            };
            if let Some(first) = (0..self.members.len()).max_by_key(|&i| rank(i))
                && load(first) < 1.0
            {
                return first;
            }
        }
        let n = self.members.len();
        let start = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        (0..n).map(|k| (start + k) % n).min_by(|&a, &b| load(a).total_cmp(&load(b))).unwrap_or(0)
    }
}

impl ChatProvider for EndpointSet {
    fn dialect(&self) -> Dialect {
        self.members.first().map_or(Dialect::Mock, |(p, _)| p.dialect())
    }

    fn label(&self) -> String {
        self.label.clone()
    }

    fn chat<'a>(
        &'a self,
        request: &'a ChatRequest,
        state: &'a mut LlmState,
    ) -> BoxFuture<'a, Result<ChatResponse, LlmError>> {
        let i = if self.affinity {
            let last = state.speaker.as_ref().and_then(|a| state.served_by.get(a)).copied();
            self.choose(last, state.affinity)
        } else {
            self.choose(None, 0)
        };
        if let Some(agent) = &state.speaker {
            state.served_by.insert(agent.clone(), i);
        }
        self.members[i].0.chat(request, state)
    }

    fn end_fan_out(&self, affinity: u64) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            for (member, _) in &self.members {
                member.end_fan_out(affinity).await;
            }
        })
    }

    /// The members serve one model alike.
    fn stores_prefix(&self, bytes: u64, runs: u64) -> Option<u64> {
        self.members.first()?.0.stores_prefix(bytes, runs)
    }
}

/// Hands out providers so that everything aimed at one endpoint shares one [`Endpoint`]: the
/// concurrency and rate limits hold across trees, scenarios and per-agent overrides, and a
/// structured-output form learned once is used by all. The limits of the first config seen for
/// an endpoint win. Providers are cached per full config.
#[derive(Default)]
pub struct ProviderPool {
    inner: Mutex<PoolInner>,
    /// Set when the endpoints' limits are shared with other processes ([`Self::share_load`]).
    sharing: std::sync::OnceLock<Arc<Sharing>>,
}

#[derive(Default)]
struct PoolInner {
    endpoints: HashMap<(Dialect, String), Arc<Endpoint>>,
    providers: Vec<(LlmConfig, Arc<dyn ChatProvider>)>,
}

impl ProviderPool {
    pub fn new() -> ProviderPool {
        ProviderPool::default()
    }

    /// The provider for `config`, built on first use. A config with several `base_urls` gets an
    /// [`EndpointSet`] over one provider per server (each with its own [`Endpoint`]).
    pub fn get(&self, config: &LlmConfig) -> Result<Arc<dyn ChatProvider>, ConfigError> {
        if !config.base_urls.is_empty() {
            let members = config
                .base_urls
                .iter()
                .map(|u| {
                    let one = LlmConfig { base_url: Some(u.clone()), base_urls: Vec::new(), ..config.clone() };
                    let provider = self.get(&one)?;
                    let gate = self.gate_for(&one).unwrap_or_else(|| Arc::new(Gate::from_config(&one)));
                    Ok((provider, gate))
                })
                .collect::<Result<Vec<_>, ConfigError>>()?;
            let mut set = EndpointSet::new(config.label(), members);
            set.affinity = config.prefix_affinity;
            return Ok(Arc::new(set));
        }
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, p)) = inner.providers.iter().find(|(c, _)| c == config) {
            return Ok(p.clone());
        }
        let key = (config.dialect, config.endpoint().to_string());
        let endpoint = inner
            .endpoints
            .entry(key)
            .or_insert_with(|| {
                let e = Arc::new(Endpoint::from_config(config));
                if let Some(s) = self.sharing.get().filter(|_| networked(config.dialect)) {
                    s.add(config.endpoint(), e.gate.clone());
                }
                e
            })
            .clone();
        let p = build_for(config, endpoint)?;
        inner.providers.push((config.clone(), p.clone()));
        Ok(p)
    }

    /// Shares every endpoint's limit with the other processes on `board` (see
    /// [`super::endpoints`]): the endpoints built so far and those built later. Call it once,
    /// inside the runtime that runs the calls; notify the returned handle to stop sharing (the
    /// process then leaves the board).
    pub fn share_load(
        &self,
        board: Arc<dyn LoadBoard>,
    ) -> Option<(Arc<tokio::sync::Notify>, tokio::task::JoinHandle<()>)> {
        let sharing = Arc::new(Sharing::new(board));
        self.sharing.set(sharing.clone()).ok()?;
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        for ((dialect, url), e) in &inner.endpoints {
            if networked(*dialect) {
                sharing.add(url, e.gate.clone());
            }
        }
        drop(inner);
        Some(share_load(sharing))
    }

    /// Ends the fan-out keyed `affinity` on every provider built (see
    /// [`ChatProvider::end_fan_out`]).
    pub(crate) async fn end_fan_out(&self, affinity: u64) {
        let providers: Vec<Arc<dyn ChatProvider>> = {
            let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            inner.providers.iter().map(|(_, p)| p.clone()).collect()
        };
        for p in providers {
            p.end_fan_out(affinity).await;
        }
    }

    /// The gate shared by every provider for this config's endpoint, if one was built.
    pub(crate) fn gate_for(&self, config: &LlmConfig) -> Option<Arc<Gate>> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.endpoints.get(&(config.dialect, config.endpoint().to_string())).map(|e| e.gate.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::chat::{Role, ToolCall, Usage};
    use serde_json::json;

    /// Answers every request with a fixed response.
    struct Canned(ChatResponse);

    impl ChatProvider for Canned {
        fn dialect(&self) -> Dialect {
            Dialect::Mock
        }
        fn label(&self) -> String {
            "canned:test".into()
        }
        fn chat<'a>(
            &'a self,
            _: &'a ChatRequest,
            _: &'a mut LlmState,
        ) -> BoxFuture<'a, Result<ChatResponse, LlmError>> {
            let r = self.0.clone();
            Box::pin(async move { Ok(r) })
        }
    }

    fn schema() -> JsonSchema {
        JsonSchema::new(
            "vote",
            json!({"type": "object", "properties": {"target": {"type": "string"}},
                   "required": ["target"], "additionalProperties": false}),
        )
    }

    fn text(t: &str) -> Canned {
        Canned(ChatResponse { text: t.into(), ..ChatResponse::default() })
    }

    #[tokio::test]
    async fn structured_reads_text_or_tool_calls_and_validates() {
        let mut st = LlmState::default();
        let req = ChatRequest::new(vec![Message::new(Role::User, "who?")]);
        let v =
            structured(&text("```json\n{\"target\": \"Ronan\"}\n```"), req.clone(), schema(), &mut st).await.unwrap();
        assert_eq!(v, json!({"target": "Ronan"}));

        let tool = Canned(ChatResponse {
            tool_calls: vec![ToolCall { id: None, name: "vote".into(), arguments: json!({"target": "Pia"}) }],
            ..ChatResponse::default()
        });
        let v = structured(&tool, req.clone(), schema(), &mut st).await.unwrap();
        assert_eq!(v, json!({"target": "Pia"}));

        let e = structured(&text("I pick Ronan"), req.clone(), schema(), &mut st).await.unwrap_err();
        assert!(
            e.to_string().starts_with("LLM response unusable: canned:test: structured output for vote is not JSON"),
            "{e}"
        );
        let e = structured(&text("{\"target\": 3}"), req.clone(), schema(), &mut st).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "LLM response unusable: canned:test: structured output does not match schema vote: $.target: expected string, got integer"
        );
        let refused = Canned(ChatResponse {
            refusal: Some("canned:test: the model refused: no".into()),
            ..ChatResponse::default()
        });
        let e = structured(&refused, req, schema(), &mut st).await.unwrap_err();
        assert_eq!(e, LlmError::Refused("canned:test: the model refused: no".into()));
    }

    #[tokio::test]
    async fn the_adapter_returns_text_and_reports_every_call() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let client = ProviderClient::new(Arc::new(Canned(ChatResponse {
            text: "hello".into(),
            usage: Usage { prompt_tokens: 3, completion_tokens: 1, cached_tokens: 0, cache_write_tokens: 0 },
            ..ChatResponse::default()
        })))
        .with_observer(move |r| {
            let usage = r.result.as_ref().map(|x| x.usage).unwrap_or_default();
            log.lock().unwrap().push((r.provider.clone(), r.request.messages.len(), usage));
        });
        let mut st = LlmState::default();
        let out = LlmClient::chat(&client, &[Message::new(Role::User, "hi")], &mut st).await.unwrap();
        assert_eq!(out, "hello");
        assert_eq!(
            *seen.lock().unwrap(),
            vec![(
                "canned:test".to_string(),
                1,
                Usage { prompt_tokens: 3, completion_tokens: 1, cached_tokens: 0, cache_write_tokens: 0 }
            )]
        );
    }

    #[test]
    fn the_pool_shares_one_gate_per_endpoint() {
        let pool = ProviderPool::new();
        let mut a = LlmConfig::for_dialect(Dialect::OpenAi);
        a.base_url = Some("http://127.0.0.1:1/v1".into());
        a.max_concurrency = 3;
        let mut b = a.clone();
        b.temperature = 0.1;
        b.max_concurrency = 9;
        let pa = pool.get(&a).unwrap();
        let pb = pool.get(&b).unwrap();
        assert!(Arc::ptr_eq(&pa, &pool.get(&a).unwrap()), "cached per config");
        assert!(!Arc::ptr_eq(&pa, &pb));
        let gate = pool.gate_for(&b).unwrap();
        assert_eq!(gate.limit(), 3, "the first config's limits hold for the endpoint");
        let mut c = a.clone();
        c.base_url = Some("http://127.0.0.1:2/v1".into());
        pool.get(&c).unwrap();
        assert!(!Arc::ptr_eq(&gate, &pool.gate_for(&c).unwrap()));
        assert_eq!(pool.get(&LlmConfig::default()).unwrap().label(), "mock:mock");
    }

    #[test]
    fn error_details_come_from_the_json_error_or_the_raw_body() {
        assert_eq!(
            error_detail(br#"{"error": {"message": "Rate limit reached", "type": "x"}}"#),
            ": Rate limit reached"
        );
        assert_eq!(error_detail(b"  upstream down  "), ": upstream down");
        assert_eq!(error_detail(b""), "");
    }
}
