//! Which model an agent talks to, and how: [`LlmConfig`], built from the environment (upstream's
//! variable names, spec §1.13) and refined by a config file ([`LlmSettings`]) whose per-scenario
//! and per-agent [`LlmOverride`]s merge onto it.
//!
//! The API key is an [`ApiKey`]: it has no `Serialize` impl and its `Debug` prints `***`, so a
//! config can be logged, shown in the API or exported without leaking the secret. A config file
//! should name the variable holding the key (`api_key_env`) rather than hold the key itself.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};

/// A configuration problem, naming the variable, file or field at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("LLM config: {field}: {message}")]
pub struct ConfigError {
    /// The environment variable, file path or `scenarios.x.agents.y.field` path.
    field: String,
    message: String,
}

impl ConfigError {
    pub(crate) fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError { field: field.into(), message: message.into() }
    }
}

/// The wire protocol a provider speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dialect {
    /// Chat Completions; any OpenAI-compatible server (vLLM, Ollama, llama.cpp, OpenRouter…).
    #[serde(rename = "openai")]
    OpenAi,
    /// Google's `generateContent`.
    Gemini,
    /// Anthropic's Messages API.
    Anthropic,
    /// The deterministic offline mock (spec §1.14).
    Mock,
    /// The deterministic offline player that follows each scene's rules (`engine/scripted.rs`, served by `crate::backend`).
    Scripted,
}

impl Dialect {
    pub const ALL: [Dialect; 5] =
        [Dialect::OpenAi, Dialect::Gemini, Dialect::Anthropic, Dialect::Mock, Dialect::Scripted];

    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::OpenAi => "openai",
            Dialect::Gemini => "gemini",
            Dialect::Anthropic => "anthropic",
            Dialect::Mock => "mock",
            Dialect::Scripted => "scripted",
        }
    }

    /// The model used when none is configured (upstream's defaults for openai and gemini).
    pub(crate) fn default_model(self) -> &'static str {
        match self {
            Dialect::OpenAi => "gpt-4o-mini",
            Dialect::Gemini => "gemini-2.0-flash-exp",
            Dialect::Anthropic => "claude-3-5-haiku-latest",
            Dialect::Mock => "mock",
            Dialect::Scripted => "scripted",
        }
    }

    /// The public endpoint used when no base URL is configured.
    pub(crate) fn default_base_url(self) -> &'static str {
        match self {
            Dialect::OpenAi => "https://api.openai.com/v1",
            Dialect::Gemini => "https://generativelanguage.googleapis.com/v1beta",
            Dialect::Anthropic => "https://api.anthropic.com/v1",
            Dialect::Mock | Dialect::Scripted => "",
        }
    }

    /// The provider-specific environment variable holding this dialect's key.
    pub(crate) fn key_env(self) -> Option<&'static str> {
        match self {
            Dialect::OpenAi => Some("OPENAI_API_KEY"),
            Dialect::Gemini => Some("GEMINI_API_KEY"),
            Dialect::Anthropic => Some("ANTHROPIC_API_KEY"),
            Dialect::Mock | Dialect::Scripted => None,
        }
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Dialect {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let low = s.trim().to_ascii_lowercase();
        Dialect::ALL
            .into_iter()
            .find(|d| d.as_str() == low)
            .ok_or_else(|| format!("unknown dialect {s:?} (expected one of openai, gemini, anthropic, mock, scripted)"))
    }
}

/// A secret API key. Deliberately not `Serialize`; `Debug` and `Display` print `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key; `None` for an empty or blank one.
    pub fn new(key: impl Into<String>) -> Option<ApiKey> {
        let key = key.into();
        let key = key.trim();
        (!key.is_empty()).then(|| ApiKey(key.to_string()))
    }

    /// The secret itself, for building an auth header. Nothing else should call this.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }

    /// `text` with every occurrence of this key replaced by `***`. Keys shorter than
    /// [`MIN_SECRET_LEN`] are left alone: masking every `x` of an error message because a local
    /// server was given the placeholder key `x` would destroy the text and protect nothing.
    pub(crate) fn redact(&self, text: &str) -> String {
        if self.0.chars().count() >= MIN_SECRET_LEN && text.contains(&self.0) {
            text.replace(&self.0, "***")
        } else {
            text.to_string()
        }
    }
}

/// The shortest key [`ApiKey::redact`] masks. Real provider keys are far longer; a shorter one is
/// a placeholder for a local server that checks nothing.
pub(crate) const MIN_SECRET_LEN: usize = 8;

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(***)")
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl<'de> Deserialize<'de> for ApiKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        ApiKey::new(s).ok_or_else(|| serde::de::Error::custom("api_key must not be empty"))
    }
}

/// How the calls that share a prefix the provider has not cached yet are let go (`LLM_WARM_UP`,
/// see `llm::warmup`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum WarmUpMode {
    /// All together, as they come.
    Off,
    /// The first alone, the others together once it is answered.
    #[default]
    First,
    /// One at a time: each once the one before it is answered (for servers whose parallel
    /// slots do not share a cached prefix, such as llama.cpp's `llama-server`).
    Serial,
}

/// How the OpenAI dialect asks for structured output. Real OpenAI, vLLM and llama.cpp's own
/// server take `json_schema`; llama-cpp-python's server only knows `json_object` with a `schema`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpenAiJsonMode {
    /// `{"type":"json_schema","json_schema":{"name","schema","strict":true}}`.
    #[default]
    JsonSchema,
    /// `{"type":"json_object","schema":…}` (grammar-constrained JSON on llama-cpp-python).
    JsonObject,
}

impl OpenAiJsonMode {
    /// The other form: what to try when a server refuses this one.
    pub(crate) fn other(self) -> OpenAiJsonMode {
        match self {
            OpenAiJsonMode::JsonSchema => OpenAiJsonMode::JsonObject,
            OpenAiJsonMode::JsonObject => OpenAiJsonMode::JsonSchema,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            OpenAiJsonMode::JsonSchema => "json_schema",
            OpenAiJsonMode::JsonObject => "json_object",
        }
    }
}

/// The most servers one model may be spread over.
pub(crate) const MAX_BASE_URLS: usize = 64;

/// The default cap on one provider response body: far above any chat completion, far below what
/// would hurt the server to buffer.
pub(crate) const DEFAULT_MAX_RESPONSE_BYTES: u64 = 8 * 1024 * 1024;

/// Everything needed to build one provider client. Serialises without the key.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LlmConfig {
    pub(crate) dialect: Dialect,
    pub model: String,
    /// `None` means the dialect's public endpoint ([`Dialect::default_base_url`]).
    pub base_url: Option<String>,
    /// Several servers of the same model (`LLM_BASE_URLS`): when not empty, calls are spread
    /// over these instead of `base_url`, each server with its own concurrency and rate limits,
    /// children of one node kept on one server while its load allows (see
    /// [`super::provider::EndpointSet`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub base_urls: Vec<String>,
    /// With several `base_urls`: keep children of one node on one server (default). Off, every
    /// call goes to the least loaded (`LLM_PREFIX_AFFINITY=false`; for comparison, or behind a
    /// gateway that routes by prefix itself).
    pub(crate) prefix_affinity: bool,
    #[serde(skip_serializing)]
    pub api_key: Option<ApiKey>,
    pub temperature: f64,
    pub top_p: f64,
    pub frequency_penalty: f64,
    pub(crate) presence_penalty: f64,
    pub max_tokens: u32,
    /// Deadline of one HTTP attempt, seconds.
    pub timeout_s: f64,
    /// Extra attempts after the first on timeouts, 429 and 5xx.
    pub max_retries: u32,
    /// First backoff, seconds; doubles per retry (with jitter), capped by `max_backoff_s`.
    pub retry_backoff_s: f64,
    /// Longest single wait, seconds, whether from backoff or a server's Retry-After.
    pub(crate) max_backoff_s: f64,
    /// Requests in flight at once against this provider, across every tree.
    pub max_concurrency: usize,
    /// Requests started per second against this provider; `None` for no rate limit.
    pub requests_per_second: Option<f64>,
    /// Sent as the `anthropic-version` header.
    pub(crate) anthropic_version: String,
    /// The form of structured output asked for first. When the server refuses it, the other form
    /// is tried once and remembered for the endpoint (see [`super::provider::Endpoint`]).
    pub openai_json_mode: OpenAiJsonMode,
    /// The largest response body read from the provider; a larger one is an error, never
    /// buffered whole. A streamed reply counts every byte of its stream.
    pub(crate) max_response_bytes: u64,
    /// Stream replies while someone watches the run (`LLM_STREAM`, default on; see
    /// `llm::stream`). Off, every call is a plain request.
    pub(crate) stream: bool,
    /// Ask the provider's prompt cache for help (`LLM_PROMPT_CACHE`, default on; see
    /// `llm::cache`): `prompt_cache_key` on the openai dialect, `cache_control` breakpoints on
    /// anthropic. Off for a server that refuses fields it does not know.
    pub prompt_cache: bool,
    /// Send identical calls that runs of one fan-out have in flight at once to the provider
    /// once (`LLM_COALESCE`, default on; see `llm::coalesce`).
    pub(crate) coalesce: bool,
    /// How the calls that share a prefix the provider has not cached yet go (`LLM_WARM_UP`,
    /// default `first`: the first alone, the others once it is answered; see `llm::warmup`).
    pub(crate) warm_up: WarmUpMode,
}

impl Default for LlmConfig {
    fn default() -> Self {
        LlmConfig::for_dialect(Dialect::Mock)
    }
}

impl LlmConfig {
    /// Upstream's defaults (spec §1.13) for `dialect`, with no key.
    pub fn for_dialect(dialect: Dialect) -> LlmConfig {
        LlmConfig {
            dialect,
            model: dialect.default_model().to_string(),
            base_url: None,
            base_urls: Vec::new(),
            prefix_affinity: true,
            api_key: None,
            temperature: 0.7,
            top_p: 1.0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            max_tokens: 1024,
            timeout_s: 30.0,
            max_retries: 2,
            retry_backoff_s: 1.0,
            max_backoff_s: 30.0,
            max_concurrency: 8,
            requests_per_second: None,
            anthropic_version: "2023-06-01".to_string(),
            openai_json_mode: OpenAiJsonMode::JsonSchema,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            stream: true,
            prompt_cache: true,
            coalesce: true,
            warm_up: WarmUpMode::First,
        }
    }

    /// The configured base URL or the dialect's default, without a trailing slash.
    pub(crate) fn endpoint(&self) -> &str {
        self.base_url.as_deref().unwrap_or(self.dialect.default_base_url()).trim_end_matches('/')
    }

    pub(crate) fn timeout(&self) -> Duration {
        Duration::from_secs_f64(self.timeout_s)
    }

    pub(crate) fn retry_backoff(&self) -> Duration {
        Duration::from_secs_f64(self.retry_backoff_s)
    }

    pub(crate) fn max_backoff(&self) -> Duration {
        Duration::from_secs_f64(self.max_backoff_s)
    }

    /// A short label for errors and accounting, e.g. `openai:gpt-4o-mini`.
    pub(crate) fn label(&self) -> String {
        format!("{}:{}", self.dialect, self.model)
    }

    /// Reads the process environment (see [`LlmConfig::from_lookup`]).
    pub(crate) fn from_env() -> Result<LlmConfig, ConfigError> {
        LlmConfig::from_lookup(&|name| std::env::var(name).ok())
    }

    /// Builds a config from environment-style variables: `LLM_DIALECT` (default `mock`),
    /// `LLM_MODEL`, `LLM_BASE_URL`, `LLM_BASE_URLS` (comma-separated), `LLM_API_KEY` (else the dialect's `OPENAI_API_KEY`,
    /// `GEMINI_API_KEY` or `ANTHROPIC_API_KEY`), `LLM_TEMPERATURE`, `LLM_TOP_P`,
    /// `LLM_FREQUENCY_PENALTY`, `LLM_PRESENCE_PENALTY`, `LLM_MAX_TOKENS`, `LLM_TIMEOUT_S`,
    /// `LLM_MAX_RETRIES`, `LLM_RETRY_BACKOFF_S`, `LLM_MAX_BACKOFF_S`, `LLM_MAX_CONCURRENCY`,
    /// `LLM_REQUESTS_PER_S`, `LLM_ANTHROPIC_VERSION`, `LLM_OPENAI_JSON_MODE`,
    /// `LLM_MAX_RESPONSE_BYTES`, `LLM_PREFIX_AFFINITY`, `LLM_STREAM`, `LLM_PROMPT_CACHE`, `LLM_COALESCE`,
    /// `LLM_WARM_UP`.
    ///
    /// As upstream, an empty or zero numeric setting keeps the default; an unparsable one is an
    /// error naming the variable.
    pub(crate) fn from_lookup(env: &dyn Fn(&str) -> Option<String>) -> Result<LlmConfig, ConfigError> {
        let get = |name: &str| env(name).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        let dialect = match get("LLM_DIALECT") {
            Some(d) => d.parse().map_err(|m| ConfigError::new("LLM_DIALECT", m))?,
            None => Dialect::Mock,
        };
        let mut c = LlmConfig::for_dialect(dialect);
        let o = LlmOverride {
            model: get("LLM_MODEL"),
            base_url: get("LLM_BASE_URL"),
            base_urls: get("LLM_BASE_URLS")
                .map(|v| v.split(',').map(|u| u.trim().to_string()).filter(|u| !u.is_empty()).collect()),
            prefix_affinity: env_bool(&get, "LLM_PREFIX_AFFINITY")?,
            stream: env_bool(&get, "LLM_STREAM")?,
            prompt_cache: env_bool(&get, "LLM_PROMPT_CACHE")?,
            coalesce: env_bool(&get, "LLM_COALESCE")?,
            warm_up: match get("LLM_WARM_UP").map(|v| v.to_ascii_lowercase()).as_deref() {
                None => None,
                Some("off" | "false" | "0") => Some(WarmUpMode::Off),
                Some("first" | "on" | "true" | "1") => Some(WarmUpMode::First),
                Some("serial") => Some(WarmUpMode::Serial),
                Some(other) => {
                    return Err(ConfigError::new("LLM_WARM_UP", format!("{other:?} is not off, first or serial")));
                }
            },
            api_key: get("LLM_API_KEY").and_then(ApiKey::new),
            temperature: env_num(&get, "LLM_TEMPERATURE")?,
            top_p: env_num(&get, "LLM_TOP_P")?,
            frequency_penalty: env_num(&get, "LLM_FREQUENCY_PENALTY")?,
            presence_penalty: env_num(&get, "LLM_PRESENCE_PENALTY")?,
            max_tokens: env_num(&get, "LLM_MAX_TOKENS")?,
            timeout_s: env_num(&get, "LLM_TIMEOUT_S")?,
            max_retries: env_num(&get, "LLM_MAX_RETRIES")?,
            retry_backoff_s: env_num(&get, "LLM_RETRY_BACKOFF_S")?,
            max_backoff_s: env_num(&get, "LLM_MAX_BACKOFF_S")?,
            max_concurrency: env_num(&get, "LLM_MAX_CONCURRENCY")?,
            requests_per_second: env_num(&get, "LLM_REQUESTS_PER_S")?,
            max_response_bytes: env_num(&get, "LLM_MAX_RESPONSE_BYTES")?,
            anthropic_version: get("LLM_ANTHROPIC_VERSION"),
            openai_json_mode: match get("LLM_OPENAI_JSON_MODE").as_deref() {
                None => None,
                Some("json_schema") => Some(OpenAiJsonMode::JsonSchema),
                Some("json_object") => Some(OpenAiJsonMode::JsonObject),
                Some(other) => {
                    return Err(ConfigError::new(
                        "LLM_OPENAI_JSON_MODE",
                        format!("{other:?} is not json_schema or json_object"),
                    ));
                }
            },
            ..LlmOverride::default()
        };
        // Zero means "unset" for upstream's numeric settings; max_retries = 0 is meaningful.
        let o = LlmOverride {
            temperature: o.temperature.filter(|v| *v != 0.0),
            top_p: o.top_p.filter(|v| *v != 0.0),
            max_tokens: o.max_tokens.filter(|v| *v != 0),
            timeout_s: o.timeout_s.filter(|v| *v != 0.0),
            retry_backoff_s: o.retry_backoff_s.filter(|v| *v != 0.0),
            max_concurrency: o.max_concurrency.filter(|v| *v != 0),
            requests_per_second: o.requests_per_second.filter(|v| *v != 0.0),
            max_response_bytes: o.max_response_bytes.filter(|v| *v != 0),
            ..o
        };
        if c.api_key.is_none() && o.api_key.is_none() {
            c.api_key = dialect.key_env().and_then(get).and_then(ApiKey::new);
        }
        c.apply(&o, "env", env)?;
        Ok(c)
    }

    /// This config with `o` applied on top, validated. `env` resolves `api_key_env` and, when the
    /// override switches dialect without giving a key, the new dialect's provider key.
    pub(crate) fn merged(
        &self,
        o: &LlmOverride,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<LlmConfig, ConfigError> {
        let mut c = self.clone();
        c.apply(o, "override", env)?;
        Ok(c)
    }

    fn apply(
        &mut self,
        o: &LlmOverride,
        origin: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<(), ConfigError> {
        if let Some(d) = o.dialect
            && d != self.dialect
        {
            // A different provider: its own defaults, not the old endpoint, model or key.
            let keep = self.clone();
            *self = LlmConfig::for_dialect(d);
            self.api_key = d.key_env().and_then(env).and_then(ApiKey::new);
            self.timeout_s = keep.timeout_s;
            self.max_retries = keep.max_retries;
            self.retry_backoff_s = keep.retry_backoff_s;
            self.max_backoff_s = keep.max_backoff_s;
            self.temperature = keep.temperature;
            self.top_p = keep.top_p;
            self.frequency_penalty = keep.frequency_penalty;
            self.presence_penalty = keep.presence_penalty;
            self.max_tokens = keep.max_tokens;
        }
        macro_rules! set {
            ($($f:ident),*) => { $( if let Some(v) = &o.$f { self.$f = v.clone(); } )* };
        }
        set!(
            model,
            temperature,
            top_p,
            frequency_penalty,
            presence_penalty,
            max_tokens,
            timeout_s,
            max_retries,
            retry_backoff_s,
            max_backoff_s,
            max_concurrency,
            anthropic_version,
            openai_json_mode,
            max_response_bytes,
            prefix_affinity,
            stream,
            prompt_cache,
            coalesce,
            warm_up
        );
        if let Some(u) = &o.base_url {
            self.base_url = Some(u.clone());
        }
        if let Some(us) = &o.base_urls {
            self.base_urls = us.clone();
        }
        if let Some(r) = o.requests_per_second {
            self.requests_per_second = Some(r);
        }
        if let Some(name) = &o.api_key_env {
            self.api_key = Some(env(name).and_then(ApiKey::new).ok_or_else(|| {
                ConfigError::new(
                    format!("{origin}.api_key_env"),
                    format!("environment variable {name} is unset or empty"),
                )
            })?);
        }
        if let Some(k) = &o.api_key {
            self.api_key = Some(k.clone());
        }
        self.validate().map_err(|e| ConfigError::new(format!("{origin}.{}", e.field), e.message))
    }

    /// Checks ranges; the error's field is the config field name.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let bad = |f: &str, m: &str| Err(ConfigError::new(f, m));
        let pos = |v: f64| v.is_finite() && v > 0.0;
        if self.model.trim().is_empty() {
            return bad("model", "must not be empty");
        }
        if let Some(u) = &self.base_url
            && !(u.starts_with("http://") || u.starts_with("https://"))
        {
            return bad("base_url", "must start with http:// or https://");
        }
        if self.base_urls.len() > MAX_BASE_URLS {
            return bad("base_urls", &format!("at most {MAX_BASE_URLS} servers"));
        }
        if let Some(u) = self.base_urls.iter().find(|u| !(u.starts_with("http://") || u.starts_with("https://"))) {
            return bad("base_urls", &format!("{u:?} must start with http:// or https://"));
        }
        if !(self.temperature.is_finite() && (0.0..=2.0).contains(&self.temperature)) {
            return bad("temperature", "must be between 0 and 2");
        }
        if !(self.top_p.is_finite() && self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad("top_p", "must be in (0, 1]");
        }
        for (f, v) in [("frequency_penalty", self.frequency_penalty), ("presence_penalty", self.presence_penalty)] {
            if !(v.is_finite() && (-2.0..=2.0).contains(&v)) {
                return bad(f, "must be between -2 and 2");
            }
        }
        if self.max_tokens == 0 {
            return bad("max_tokens", "must be at least 1");
        }
        if !pos(self.timeout_s) || self.timeout_s > 3600.0 {
            return bad("timeout_s", "must be a positive number of seconds, at most 3600");
        }
        if self.max_retries > 20 {
            return bad("max_retries", "must be at most 20");
        }
        if !(self.retry_backoff_s.is_finite() && self.retry_backoff_s >= 0.0) {
            return bad("retry_backoff_s", "must be a number of seconds >= 0");
        }
        if !pos(self.max_backoff_s) || self.max_backoff_s > 3600.0 {
            return bad("max_backoff_s", "must be a positive number of seconds, at most 3600");
        }
        if self.max_concurrency == 0 || self.max_concurrency > 1024 {
            return bad("max_concurrency", "must be between 1 and 1024");
        }
        if let Some(r) = self.requests_per_second
            && !pos(r)
        {
            return bad("requests_per_second", "must be a positive number");
        }
        if self.max_response_bytes < 1024 {
            return bad("max_response_bytes", "must be at least 1024");
        }
        Ok(())
    }
}

fn env_num<T: FromStr>(get: &dyn Fn(&str) -> Option<String>, name: &str) -> Result<Option<T>, ConfigError> {
    get(name)
        .map(|v| v.parse::<T>().map_err(|_| ConfigError::new(name, format!("{v:?} is not a valid number"))))
        .transpose()
}

/// A yes/no setting: `true`/`1`/`on` or `false`/`0`/`off`; anything else is an error naming it.
fn env_bool(get: &dyn Fn(&str) -> Option<String>, name: &str) -> Result<Option<bool>, ConfigError> {
    match get(name).as_deref() {
        None => Ok(None),
        Some("true" | "1" | "on") => Ok(Some(true)),
        Some("false" | "0" | "off") => Ok(Some(false)),
        Some(other) => Err(ConfigError::new(name, format!("{other:?} is not true or false"))),
    }
}

/// Fields that replace those of a base config; every field optional. Used for the file's
/// `default`, per-scenario and per-agent sections.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmOverride {
    dialect: Option<Dialect>,
    model: Option<String>,
    base_url: Option<String>,
    /// Several servers of one model (see [`LlmConfig::base_urls`]).
    base_urls: Option<Vec<String>>,
    prefix_affinity: Option<bool>,
    /// A literal key (discouraged in files that are shared; prefer `api_key_env`).
    api_key: Option<ApiKey>,
    /// The name of an environment variable holding the key.
    api_key_env: Option<String>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    frequency_penalty: Option<f64>,
    presence_penalty: Option<f64>,
    max_tokens: Option<u32>,
    timeout_s: Option<f64>,
    max_retries: Option<u32>,
    retry_backoff_s: Option<f64>,
    max_backoff_s: Option<f64>,
    max_concurrency: Option<usize>,
    requests_per_second: Option<f64>,
    anthropic_version: Option<String>,
    openai_json_mode: Option<OpenAiJsonMode>,
    max_response_bytes: Option<u64>,
    /// Stream replies while someone watches (see [`LlmConfig::stream`]).
    stream: Option<bool>,
    /// Ask the provider's prompt cache for help (see [`LlmConfig::prompt_cache`]).
    prompt_cache: Option<bool>,
    /// Coalesce identical calls in flight at once (see [`LlmConfig::coalesce`]).
    coalesce: Option<bool>,
    /// How the calls that share a prefix not cached yet go (see [`LlmConfig::warm_up`]).
    warm_up: Option<WarmUpMode>,
}

/// One scenario's section of the config file: its own override plus per-agent ones.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ScenarioLlm {
    #[serde(flatten)]
    llm: LlmOverride,
    /// Keyed by agent name exactly as in the scenario.
    #[serde(default)]
    pub(crate) agents: BTreeMap<String, LlmOverride>,
}

/// A config file (TOML or JSON):
///
/// ```toml
/// [default]
/// dialect = "openai"
/// base_url = "http://127.0.0.1:8765/v1"
/// api_key_env = "MY_LOCAL_KEY"
///
/// [scenarios.council]
/// temperature = 0.2
///
/// [scenarios.council.agents.Host]
/// dialect = "anthropic"
/// model = "claude-3-5-haiku-latest"
/// ```
///
/// Precedence, lowest first: environment, `default`, the scenario's section, the agent's section.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmSettings {
    #[serde(default)]
    default: LlmOverride,
    /// Keyed by scenario name (the scenario file's stem, e.g. `council`).
    #[serde(default)]
    pub(crate) scenarios: BTreeMap<String, ScenarioLlm>,
}

impl LlmSettings {
    /// Reads a `.toml` or `.json` file; errors name the path and, for JSON, the field.
    pub(crate) fn from_path(path: &Path) -> Result<LlmSettings, ConfigError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::new(&shown, format!("cannot read: {e}")))?;
        let parsed = match path.extension().and_then(|e| e.to_str()) {
            Some("toml") => LlmSettings::parse_toml(&text),
            Some("json") => LlmSettings::parse_json(&text),
            _ => {
                return Err(ConfigError::new(&shown, "unknown format (the file name must end in .toml or .json)"));
            }
        };
        parsed.map_err(|e| ConfigError::new(format!("{shown}: {}", e.field), e.message))
    }

    pub(crate) fn parse_toml(text: &str) -> Result<LlmSettings, ConfigError> {
        toml::from_str(text).map_err(|e| {
            let msg = e.message().to_string();
            let at = e
                .span()
                .map(|s| {
                    let line = text[..s.start].matches('\n').count() + 1;
                    format!("line {line}")
                })
                .unwrap_or_else(|| "toml".into());
            ConfigError::new(at, msg)
        })
    }

    pub(crate) fn parse_json(text: &str) -> Result<LlmSettings, ConfigError> {
        let de = &mut serde_json::Deserializer::from_str(text);
        serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            ConfigError::new(path, e.into_inner().to_string())
        })
    }

    /// The config for `agent` in `scenario` (either may be absent): `base` with the file's
    /// default, scenario and agent overrides applied in that order. Errors name the section.
    pub(crate) fn resolve(
        &self,
        base: &LlmConfig,
        scenario: Option<&str>,
        agent: Option<&str>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<LlmConfig, ConfigError> {
        let at = |section: String| {
            move |e: ConfigError| {
                let field = e.field.trim_start_matches("override.").to_string();
                ConfigError::new(format!("{section}.{field}"), e.message)
            }
        };
        let mut c = base.merged(&self.default, env).map_err(at("default".into()))?;
        if let Some(s) = scenario.and_then(|name| self.scenarios.get(name).map(|x| (name, x))) {
            let (name, sec) = s;
            c = c.merged(&sec.llm, env).map_err(at(format!("scenarios.{name}")))?;
            if let Some(a) = agent.and_then(|a| sec.agents.get(a).map(|o| (a, o))) {
                c = c.merged(a.1, env).map_err(at(format!("scenarios.{name}.agents.{}", a.0)))?;
            }
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn env_defaults_to_the_mock_and_reads_upstream_names() {
        let c = LlmConfig::from_lookup(&env(&[])).unwrap();
        assert_eq!(c.dialect, Dialect::Mock);
        assert_eq!(c.model, "mock");
        let c = LlmConfig::from_lookup(&env(&[
            ("LLM_DIALECT", "OpenAI"),
            ("OPENAI_API_KEY", "sk-provider"),
            ("LLM_TIMEOUT_S", "5"),
            ("LLM_MAX_RETRIES", "0"),
            ("LLM_RETRY_BACKOFF_S", "0.25"),
            ("LLM_TEMPERATURE", "0"),
            ("LLM_MAX_TOKENS", ""),
            ("LLM_REQUESTS_PER_S", "2.5"),
        ]))
        .unwrap();
        assert_eq!(c.dialect, Dialect::OpenAi);
        assert_eq!(c.model, "gpt-4o-mini");
        assert_eq!(c.api_key.as_ref().unwrap().expose(), "sk-provider");
        assert_eq!(c.timeout(), Duration::from_secs(5));
        assert_eq!(c.max_retries, 0, "zero retries is a real setting");
        assert_eq!(c.retry_backoff(), Duration::from_millis(250));
        assert_eq!(c.temperature, 0.7, "zero keeps the default, as upstream");
        assert_eq!(c.max_tokens, 1024);
        assert_eq!(c.requests_per_second, Some(2.5));
        assert_eq!(c.endpoint(), "https://api.openai.com/v1");
        // LLM_API_KEY wins over the provider key.
        let c = LlmConfig::from_lookup(&env(&[
            ("LLM_DIALECT", "gemini"),
            ("LLM_API_KEY", "generic"),
            ("GEMINI_API_KEY", "specific"),
            ("LLM_BASE_URL", "http://127.0.0.1:9/v1beta/"),
        ]))
        .unwrap();
        assert_eq!(c.api_key.as_ref().unwrap().expose(), "generic");
        assert_eq!(c.endpoint(), "http://127.0.0.1:9/v1beta");
    }

    #[test]
    fn env_errors_name_the_variable() {
        let e = LlmConfig::from_lookup(&env(&[("LLM_DIALECT", "cohere")])).unwrap_err();
        assert_eq!(e.field, "LLM_DIALECT");
        assert!(e.to_string().contains("cohere"), "{e}");
        let e = LlmConfig::from_lookup(&env(&[("LLM_TIMEOUT_S", "soon")])).unwrap_err();
        assert_eq!(e.field, "LLM_TIMEOUT_S");
        let e = LlmConfig::from_lookup(&env(&[("LLM_TOP_P", "3")])).unwrap_err();
        assert_eq!(e.to_string(), "LLM config: env.top_p: must be in (0, 1]");
        let e = LlmConfig::from_lookup(&env(&[("LLM_BASE_URL", "localhost:1")])).unwrap_err();
        assert_eq!(e.field, "env.base_url");
    }

    #[test]
    fn the_key_is_never_printed_or_serialised() {
        let c = LlmConfig::from_lookup(&env(&[("LLM_DIALECT", "anthropic"), ("ANTHROPIC_API_KEY", "sk-ant-SECRET")]))
            .unwrap();
        let debug = format!("{c:?}");
        assert!(!debug.contains("SECRET"), "{debug}");
        assert!(debug.contains("ApiKey(***)"));
        let json = serde_json::to_string(&c).unwrap();
        assert!(!json.contains("SECRET") && !json.contains("api_key"), "{json}");
        assert_eq!(c.api_key.as_ref().unwrap().to_string(), "***");
    }

    #[test]
    fn redaction_masks_real_keys_and_leaves_short_placeholders_alone() {
        let key = ApiKey::new("sk-live-0123456789").unwrap();
        assert_eq!(key.redact("echo: Bearer sk-live-0123456789!"), "echo: Bearer ***!");
        // A placeholder key `x` (local servers) must not mangle every `x` of an error message.
        let x = ApiKey::new("x").unwrap();
        let text = "unexpected text: expected JSON";
        assert_eq!(x.redact(text), text);
        let seven = ApiKey::new("abcdefg").unwrap();
        assert_eq!(seven.redact("abcdefg"), "abcdefg");
        assert_eq!(ApiKey::new("abcdefgh").unwrap().redact("[abcdefgh]"), "[***]");
    }

    #[test]
    fn the_response_cap_comes_from_the_environment_and_is_checked() {
        let c = LlmConfig::from_lookup(&env(&[])).unwrap();
        assert_eq!(c.max_response_bytes, 8 * 1024 * 1024);
        let c = LlmConfig::from_lookup(&env(&[("LLM_MAX_RESPONSE_BYTES", "65536")])).unwrap();
        assert_eq!(c.max_response_bytes, 65536);
        let e = LlmConfig::from_lookup(&env(&[("LLM_MAX_RESPONSE_BYTES", "10")])).unwrap_err();
        assert_eq!(e.to_string(), "LLM config: env.max_response_bytes: must be at least 1024");
    }

    const FILE: &str = r#"
[default]
dialect = "openai"
base_url = "http://127.0.0.1:8765/v1"
api_key_env = "LOCAL_KEY"
max_concurrency = 2

[scenarios.council]
temperature = 0.2

[scenarios.council.agents.Host]
dialect = "anthropic"
model = "claude-test"
"#;

    #[test]
    fn file_overrides_merge_default_then_scenario_then_agent() {
        let s = LlmSettings::parse_toml(FILE).unwrap();
        let e = env(&[("LOCAL_KEY", "k-local"), ("ANTHROPIC_API_KEY", "k-ant")]);
        let base = LlmConfig::from_lookup(&env(&[])).unwrap();

        let plain = s.resolve(&base, None, None, &e).unwrap();
        assert_eq!(plain.dialect, Dialect::OpenAi);
        assert_eq!(plain.endpoint(), "http://127.0.0.1:8765/v1");
        assert_eq!(plain.api_key.as_ref().unwrap().expose(), "k-local");
        assert_eq!(plain.temperature, 0.7);

        let member = s.resolve(&base, Some("council"), Some("Rep"), &e).unwrap();
        assert_eq!(member.temperature, 0.2);
        assert_eq!(member.max_concurrency, 2);

        let host = s.resolve(&base, Some("council"), Some("Host"), &e).unwrap();
        assert_eq!(host.dialect, Dialect::Anthropic);
        assert_eq!(host.model, "claude-test");
        assert_eq!(host.base_url, None, "a new dialect drops the old endpoint");
        assert_eq!(host.api_key.unwrap().expose(), "k-ant");
        assert_eq!(host.temperature, 0.2, "sampling settings carry over");
    }

    #[test]
    fn json_files_parse_the_same_and_errors_name_the_field() {
        let s = LlmSettings::parse_json(
            r#"{"default": {"dialect": "gemini"}, "scenarios": {"x": {"agents": {"A": {"top_p": 0.5}}}}}"#,
        )
        .unwrap();
        let c = s.resolve(&LlmConfig::default(), Some("x"), Some("A"), &env(&[])).unwrap();
        assert_eq!((c.dialect, c.top_p), (Dialect::Gemini, 0.5));

        let e = LlmSettings::parse_json(r#"{"scenarios": {"x": {"agents": {"A": {"temp": 1}}}}}"#).unwrap_err();
        assert_eq!(e.field, "scenarios.x.agents.A.temp");
        assert!(e.message.contains("unknown field `temp`"), "{e}");
        let e = LlmSettings::parse_toml("[default]\ndialect = \"cohere\"\n").unwrap_err();
        assert_eq!(e.field, "line 2");
        assert!(e.message.contains("cohere"), "{e}");

        let s = LlmSettings::parse_toml("[scenarios.x.agents.A]\ntop_p = 7\n").unwrap();
        let e = s.resolve(&LlmConfig::default(), Some("x"), Some("A"), &env(&[])).unwrap_err();
        assert_eq!(e.field, "scenarios.x.agents.A.top_p");
        let s = LlmSettings::parse_toml("[default]\napi_key_env = \"NOPE\"\n").unwrap();
        let e = s.resolve(&LlmConfig::default(), None, None, &env(&[])).unwrap_err();
        assert_eq!(e.field, "default.api_key_env");
        assert!(e.message.contains("NOPE"));
    }

    #[test]
    fn config_files_are_read_by_extension() {
        let dir = crate::testing::Scratch::new("llm-config");
        let toml_path = dir.join("llm.toml");
        std::fs::write(&toml_path, FILE).unwrap();
        let s = LlmSettings::from_path(&toml_path).unwrap();
        assert!(s.scenarios.contains_key("council"));
        let bad = dir.join("llm.yaml");
        std::fs::write(&bad, "x: 1").unwrap();
        let e = LlmSettings::from_path(&bad).unwrap_err();
        assert!(e.field.ends_with("llm.yaml"), "{e}");
    }
}
