//! The lab notebook's wire types: annotations of nodes (title, note, tags, star), the tree's
//! description, and full-text search over a tree's text.
//!
//! Every field is additive to the replies it extends (`…/info`, `…/summaries`, `…/graph`, the
//! tree list): absent when a node carries no annotation, so upstream clients see what they did.

use serde::{Deserialize, Serialize};

use crate::{Graph, Summary};

/// Longest node title, in characters.
pub const MAX_TITLE_CHARS: usize = 200;
/// Longest note, in bytes of UTF-8.
pub const MAX_NOTE_BYTES: usize = 10 * 1024;
/// Most tags on one node.
pub const MAX_TAGS: usize = 32;
/// Longest tag, in characters.
pub const MAX_TAG_CHARS: usize = 64;
/// Longest tree description, in bytes of UTF-8.
pub const MAX_DESCRIPTION_BYTES: usize = 10 * 1024;

/// What a user wrote on a node. Empty fields are left out; a node with nothing written has none.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Annotation {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub starred: bool,
}

impl Annotation {
    /// True when nothing is written (the node then has no annotation at all).
    pub fn is_empty(&self) -> bool {
        self.title.is_none() && self.note.is_none() && self.tags.is_empty() && !self.starred
    }
}

/// The body of `PATCH /devui/simtree/{tree}/node/{n}`: each field given replaces the node's;
/// an empty string or list clears it, a field left out is kept.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct NodePatch {
    /// At most 200 characters, no control characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// At most 10 KiB; no control characters but newline and tab.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// At most 32 tags of 1 to 64 characters, no control characters (duplicates are merged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starred: Option<bool>,
}

/// The body of `PATCH /devui/simtree/{tree}` as the server reads it: a new name, a new
/// description (an empty string clears it), or both. `TreePatch` (name only) is a subset.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct TreeEdit {
    /// 1 to 200 characters, not only spaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// At most 10 KiB; no control characters but newline and tab.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// One entry of `GET …/summaries`: upstream's summary and, when it has one, the node's
/// annotation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NotedSummary {
    #[serde(flatten)]
    pub summary: Summary,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotation: Option<Annotation>,
}

/// An annotated node as the graph lists it: what a drawing needs (label, star, tags), not the
/// note's text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GraphMark {
    pub node: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub starred: bool,
    /// The node carries a note (read it from `…/info`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub noted: bool,
}

/// `GET …/graph`: upstream's graph and, additively, the annotated nodes (`marks`, by id).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NotedGraph {
    #[serde(flatten)]
    pub graph: Graph,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub marks: Vec<GraphMark>,
}

/// Where a search hit's text is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum HitKind {
    /// An event of the node's own log.
    Event,
    /// What an agent's memory took in during the node (its run or its branch ops).
    Memory,
    Title,
    Note,
    Tag,
    /// A question asked at the node and its answer.
    Ask,
    /// A descendant of the node where the text entered, whose agents' memory still holds it.
    Carried,
}

/// One hit of a search: a node, where the text is, a short excerpt around it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SearchHit {
    /// Only in `GET /api/search` (across trees).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree: Option<u64>,
    pub node: u64,
    pub kind: HitKind,
    /// Up to ~160 characters around the first match, the match in `[` `]`.
    pub snippet: String,
    /// Higher is better. A carried hit scores below the node it came from.
    pub score: f64,
    /// For a carried hit: the node where the text entered the timeline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<u64>,
}

/// `GET …/search` and `GET /api/search`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SearchReply {
    pub hits: Vec<SearchHit>,
    /// Hits in all, over every page.
    pub total: u64,
    /// The `offset` of the next page, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<u64>,
}

/// One message of a model call's prompt, in its dialect-neutral text form.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CallMessage {
    pub role: String,
    pub content: String,
}

/// One model call of a node (`GET …/node/{n}/calls`): what the model was sent and said.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NodeCall {
    /// The call's place in the node's run, from 0.
    pub index: u64,
    /// The agent whose turn it was (the `You are …` line of its system prompt), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The prompt, system first.
    pub messages: Vec<CallMessage>,
    /// The model's reply as it came (a trading agent's tool calls written out after its text).
    pub reply: String,
    /// The action the engine read from the reply (social scenes), or why it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<crate::ActionCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parse_error: Option<String>,
    /// 1 for an agent's first call of a step, 2… for the calls that followed a reply that could
    /// not be parsed.
    pub attempt: u32,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// What the call cost in US dollars by the server's price table; absent for a model without
    /// a price (the offline players, a local model) or a call without tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub money: Option<f64>,
    pub latency_ms: u64,
    /// `dialect:model` of the provider that answered (`mock`, `scripted` offline); never a key.
    pub provider: String,
    /// The provider's HTTP retries before it answered (timeouts, dropped or cut streams, 429,
    /// 5xx), from the recording: 0 offline, for interviews, and in recordings of earlier
    /// versions. Unlike `attempt`, which counts calls after unparseable replies.
    #[serde(default)]
    pub retries: u32,
    /// The call is in the node's recording (a real provider's), so a replay answers it.
    pub recorded: bool,
    /// An interview (`POST …/ask`) rather than a call of the node's run; `index` continues the
    /// run's numbering.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ask: bool,
    /// Of the prompt tokens, those the provider served from its cache (from the recording).
    #[serde(default, skip_serializing_if = "crate::is_zero")]
    pub cached_tokens: u64,
    /// Of the prompt tokens, those the provider wrote to its cache (from the recording).
    #[serde(default, skip_serializing_if = "crate::is_zero")]
    pub cache_write_tokens: u64,
    /// What the call asked of the provider's prompt cache (from the recording; absent offline
    /// and in recordings of earlier versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CallCache>,
    /// The call got no reply: the run failed on it, for this reason (the node's failure). Its
    /// prompt is the request that failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
    /// The call was answered by an identical call another run had in flight at the same time:
    /// this run made none and paid nothing for it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub coalesced: bool,
}

/// What a model call asked of its provider's prompt cache.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CallCache {
    /// `prompt_cache_key` (OpenAI's key was sent), `cache_control` (Anthropic's breakpoints were
    /// placed), `cached_content` (the prefix was sent as an explicit cache), `implicit` (nothing to send: the provider caches prefixes by itself, as Gemini
    /// and OpenAI-compatible servers do) or `none` (nothing asked, nothing cached).
    pub how: String,
    /// The `prompt_cache_key` sent: one per tree, node the run started from, and agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Where the `cache_control` breakpoints were put, as prefix lengths in prompt messages
    /// (1: after the system prompt and tools; 0: after the tools).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub breakpoints: Vec<u32>,
    /// The explicit cache the call's prefix was sent as (`cached_content`: Gemini's
    /// `cachedContents/…`, created for a fan-out and deleted after it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_content: Option<String>,
    /// The explicit cache this call created for its fan-out, being the first call to need it:
    /// billed apart from the call's tokens, and part of its `money`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<CreatedCache>,
    /// How long the warm-up gate held the call, in milliseconds, until the first call of its
    /// prefix was answered; absent when it was not held (the first call, a later turn, the gate
    /// off or a provider that has not been seen to cache).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_ms: Option<u64>,
}

/// An explicit prompt cache a call created (Gemini's `cachedContents`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CreatedCache {
    /// The tokens it stores: as the provider counted them at creation, else as the call that
    /// used it was served from it, else the most the prefix could be (one per byte and framing).
    pub tokens: u64,
    /// The lifetime asked for, in seconds: storage is priced for all of it, though the cache is
    /// deleted sooner when its fan-out ends.
    pub ttl_s: u64,
}

/// `GET …/node/{n}/calls`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NodeCalls {
    pub node: u64,
    /// The page asked for (`?offset=&limit=`, 50 by default), in order.
    pub calls: Vec<NodeCall>,
    /// Calls of the node in all: its run's, then the interviews asked at it.
    #[serde(default)]
    pub total: u64,
    /// Why a node has no calls to show, when it has none (a branch, the root, an agent-based
    /// model's steps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Longest question an agent may be asked, in characters.
pub const MAX_QUESTION_CHARS: usize = 4000;
/// Questions one node keeps at most.
pub const MAX_ASKS_PER_NODE: usize = 1000;

/// The body of `POST …/node/{n}/ask`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct AskRequest {
    /// An agent of the node (social scenes).
    pub agent: String,
    /// 1 to 4000 characters; no control characters but newline and tab.
    pub question: String,
}

/// A question asked of an agent at a node, and its answer (`POST …/ask`, `GET …/asks`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Ask {
    /// Its place in the node's ask history, from 0.
    pub seq: u64,
    pub agent: String,
    pub question: String,
    pub answer: String,
    /// Unix milliseconds.
    pub at: u64,
    /// `dialect:model` that answered (`mock`, `scripted` offline).
    pub provider: String,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// What the call cost in US dollars by the server's price table (absent: no call, or a
    /// model without a price).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub money: Option<f64>,
    pub latency_ms: u64,
    /// The hash of the prompt (as replay records key calls): the same interview asked again at
    /// the node is answered from this one, with no model call.
    pub request: String,
    /// Answered from an earlier identical ask (no model call).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
}
