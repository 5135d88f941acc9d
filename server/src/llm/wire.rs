//! The seam between the shared HTTP client (`provider::HttpProvider`) and one dialect: a
//! [`Wire`] says how to shape a request and read a response, and nothing else. Dialect files
//! (`openai.rs`, `gemini.rs`, `anthropic.rs`) depend on this and on the chat vocabulary only;
//! the provider names them once, in its constructor table (`provider::build_provider`).

use serde_json::Value;

use super::LlmError;
use super::chat::{ChatRequest, ChatResponse};
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
}
