//! One recorded model call: what a node's run paid for, kept with the node so that a replay
//! answers from it and the usage and money are summed from it.

use serde::{Deserialize, Serialize};

/// One recorded call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LlmRecord {
    pub hash: String,
    pub response: String,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub latency_ms: u64,
    /// Prompt tokens the provider served from its cache (absent in records of earlier builds).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cached_tokens: u64,
    /// The model that answered (`dialect:model`), which prices the call; absent in records made
    /// before models were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The provider's HTTP retries before the reply came (transient failures: timeouts, cut
    /// streams, 429, 5xx); absent when none, and in records of earlier builds (read as 0).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub retries: u32,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}
