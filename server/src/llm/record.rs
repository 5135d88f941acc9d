//! One recorded model call: what a node's run paid for, kept with the node so that a replay
//! answers from it and the usage and money are summed from it.
//!
//! Records are stored with their nodes and travel in exports, so every field added after the
//! first is optional: absent in records of earlier builds, read as its default, and left out
//! when it holds the default (a record without cache use is written as before).

use serde::{Deserialize, Serialize};

use super::chat::{CacheUse, Usage};

/// One recorded call.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LlmRecord {
    pub(crate) hash: String,
    pub(crate) response: String,
    pub prompt_tokens: u64,
    pub(crate) completion_tokens: u64,
    pub(crate) latency_ms: u64,
    /// Prompt tokens the provider served from its cache (absent in records of earlier builds).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cached_tokens: u64,
    /// The model that answered (`dialect:model`), which prices the call; absent in records made
    /// before models were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) model: Option<String>,
    /// The provider's HTTP retries before the reply came (transient failures: timeouts, cut
    /// streams, 429, 5xx); absent when none, and in records of earlier builds (read as 0).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub(crate) retries: u32,
    /// Prompt tokens the provider wrote to its cache (Anthropic bills them above the prompt
    /// price).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
    /// What the call asked of the provider's prompt cache: the key, the breakpoints, or that
    /// the provider caches by itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheUse>,
    /// Of the prompt tokens, about how many repeat a prefix an earlier call of the same agent
    /// sent (its prompt at the fork, or on its last turn): the cacheable part, estimated from
    /// the prefix's share of the prompt's bytes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub repeated_tokens: u64,
    /// The answer came from an identical call another run of the tree had in flight at the
    /// same time (coalesced): this run made no call and paid nothing for it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) coalesced: bool,
    /// No answer came: the call failed after it had created an explicit cache for its fan-out,
    /// which the provider bills whatever became of the call. The record carries that cost (its
    /// `cache.created`, no tokens, no response); it is no call a replay answers or usage counts
    /// in `calls`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) failed: bool,
}

impl LlmRecord {
    /// The tokens the call used, as the provider reported them.
    pub(crate) fn usage(&self) -> Usage {
        Usage {
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            cached_tokens: self.cached_tokens,
            cache_write_tokens: self.cache_write_tokens,
        }
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}
