//! Provider prompt caches: what a call may tell its provider so that the part of its prompt sent
//! before is served from the provider's cache, at a lower price and sooner.
//!
//! In a simulation tree nearly every prompt repeats an earlier one: an agent's prompt on one turn
//! starts with its prompt on the turn before (its memory only grows), and the children of one
//! node start from that node's memories. This module finds those repeats without reading the
//! engine's prompts: per agent, the simulator's [`LlmState`] keeps the length and a hash of the
//! prefix its last prompt fixed (every message but the last, which the next turn may still
//! extend), and [`LlmState::start_run`] copies it aside as the prompt at the fork when a run
//! starts from a node. [`plan`] checks which of those prefixes the new prompt really repeats
//! (byte for byte, by hash) and gives the dialects [`CacheHints`]:
//!
//! - the openai dialect sends `prompt_cache_key`, one per (tree, node the run started from,
//!   agent): OpenAI routes requests with one key to one cache;
//! - the anthropic dialect places `cache_control` breakpoints after the tools and system prompt,
//!   after the prompt at the fork and after the prompt of the last turn (three of the four
//!   Anthropic allows);
//! - Gemini caches prefixes by itself (implicit caching) and reports the tokens it served
//!   (`cachedContentTokenCount`); for the runs of a fan-out of [`FAN_OUT_SHARED`] or more, the
//!   agent's prompt at the fork is named as a [`SharedPrefix`], which the provider stores once as
//!   an explicit cached content (see `provider::HttpProvider`) and deletes when the fan-out
//!   ends.
//!
//! What each call asked is recorded with it ([`super::chat::CacheUse`]), as is an estimate of
//! the tokens that repeat a prefix sent before (the tree's "cacheable share").

use serde::{Deserialize, Serialize};

use super::LlmState;
use super::budget::messages_bound;
use super::chat::{CacheHints, Message, SharedPrefix};

/// A prefix of a prompt: its length in messages (system included), a hash of its text, the
/// bytes of its text ([`text_bytes`]) and the most tokens it can count as
/// ([`messages_bound`]): what an explicit cache of it may cost, foreseen by estimates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Prefix {
    len: usize,
    hash: u64,
    pub(crate) bytes: u64,
    pub(crate) bound: u64,
}

/// The bytes of `messages`' text, which a provider's minimum for an explicit cache is checked
/// against.
pub(crate) fn text_bytes(messages: &[Message]) -> u64 {
    messages.iter().map(|m| m.content.len() as u64).sum()
}

/// What one agent's earlier calls sent, as prefixes later prompts may repeat.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sent {
    /// The prefix fixed by the agent's last call before the run started (at the fork).
    pub(crate) fork: Option<Prefix>,
    /// The prefix fixed by the agent's last call.
    pub(crate) last: Option<Prefix>,
    /// Whether the agent has made a call in the run under way: its first call of a run shares
    /// its prefix with the same call of every sibling run (see `llm::warmup`).
    #[serde(skip)]
    pub(crate) called: bool,
}

/// The hashes of every prefix of `messages`: `out[n]` covers the first `n` messages, each by its
/// dialect-neutral text ([`Message::flat`]), as the replay hash does.
fn prefix_hashes(messages: &[Message]) -> Vec<u64> {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut out = Vec::with_capacity(messages.len() + 1);
    out.push(h);
    for m in messages {
        let (role, content) = m.flat();
        for &b in role.as_str().as_bytes().iter().chain([0u8].iter()).chain(content.as_bytes()) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
        out.push(h);
    }
    out
}

/// The `prompt_cache_key` of a call: the run's affinity (a hash of the tree and the node the run
/// started from) and a hash of the agent's name, so no name leaves in clear.
pub fn key(affinity: u64, agent: Option<&str>) -> String {
    match agent {
        Some(name) => {
            let h = prefix_hashes(&[Message::new(super::chat::Role::User, name)])[1];
            format!("simtree-{affinity:016x}-{:08x}", h as u32)
        }
        None => format!("simtree-{affinity:016x}"),
    }
}

/// The hints for a call of `messages` by the agent whose turn it is (`state.speaker`), and the
/// prefix this prompt fixes for the agent's next one, remembered in `state`.
pub fn plan(messages: &[Message], state: &mut LlmState) -> CacheHints {
    let key = (state.affinity != 0).then(|| key(state.affinity, state.speaker.as_deref()));
    let Some(agent) = state.speaker.clone() else {
        return CacheHints { key, ..CacheHints::default() };
    };
    let hashes = prefix_hashes(messages);
    let sent = state.prefixes.entry(agent).or_default();
    let mut prefixes: Vec<usize> = [sent.fork, sent.last]
        .into_iter()
        .flatten()
        .filter(|p| p.len > 0 && p.len < messages.len() && hashes[p.len] == p.hash)
        .map(|p| p.len)
        .collect();
    prefixes.sort_unstable();
    prefixes.dedup();
    // The prompt at the fork, when this prompt repeats it, is what every sibling run sends.
    let shared = sent
        .fork
        .filter(|f| u64::from(state.fan_out) >= FAN_OUT_SHARED && prefixes.contains(&f.len))
        .zip(key.as_ref())
        .map(|(f, key)| SharedPrefix {
            name: format!("{key}-{:016x}", f.hash),
            affinity: state.affinity,
            len: f.len,
            runs: u64::from(state.fan_out),
        });
    // Every message but the last is fixed: the next turn's prompt starts with them (the last
    // may still grow, as memory merges lines of one role into one message).
    if let Some(len) = messages.len().checked_sub(1).filter(|n| *n > 0) {
        sent.last = Some(Prefix {
            len,
            hash: hashes[len],
            bytes: text_bytes(&messages[..len]),
            bound: messages_bound(&messages[..len]),
        });
    }
    CacheHints { key, prefixes, shared, ..CacheHints::default() }
}

/// The smallest fan-out whose runs share an explicitly cached prefix: creating one costs a call
/// and its storage, which fewer runs do not repay.
pub const FAN_OUT_SHARED: u64 = 4;

/// The share of `messages`' bytes that repeat the longest prefix in `hints` (0 without one).
pub(crate) fn repeated_share(messages: &[Message], hints: &CacheHints) -> f64 {
    let Some(&len) = hints.prefixes.last() else {
        return 0.0;
    };
    let bytes = |ms: &[Message]| ms.iter().map(|m| m.flat().1.len() + 1).sum::<usize>();
    let all = bytes(messages);
    if all == 0 {
        return 0.0;
    }
    bytes(&messages[..len.min(messages.len())]) as f64 / all as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::chat::Role;

    fn prompt(turns: &[&str]) -> Vec<Message> {
        let mut m = vec![Message::new(Role::System, "You are Ann.")];
        for (i, t) in turns.iter().enumerate() {
            let role = if i % 2 == 0 { Role::User } else { Role::Assistant };
            m.push(Message::new(role, *t));
        }
        m
    }

    fn speaking(affinity: u64) -> LlmState {
        LlmState { affinity, speaker: Some("Ann".into()), ..LlmState::default() }
    }

    #[test]
    fn a_later_turn_repeats_the_last_prompt_but_its_last_message() {
        let mut st = speaking(7);
        let first = plan(&prompt(&["hi"]), &mut st);
        assert_eq!(first.prefixes, Vec::<usize>::new(), "nothing was sent before");
        assert_eq!(first.key.as_deref(), Some(key(7, Some("Ann")).as_str()));
        // Next turn: the user line grew by merging, then the agent answered and heard more.
        let next = plan(&prompt(&["hi\nmore", "ok", "news"]), &mut st);
        assert_eq!(next.prefixes, vec![1], "only the system prompt is the same");
        let third = plan(&prompt(&["hi\nmore", "ok", "news", "fine", "again"]), &mut st);
        assert_eq!(third.prefixes, vec![3]);
        assert!(repeated_share(&prompt(&["hi\nmore", "ok", "news", "fine", "again"]), &third) > 0.5);
    }

    #[test]
    fn children_of_a_node_repeat_its_prompt_at_the_fork_and_their_own_last_turn() {
        let mut parent = speaking(0);
        let _ = plan(&prompt(&["a", "b", "c"]), &mut parent);
        assert_eq!(plan(&prompt(&["a"]), &mut speaking(0)).key, None, "no run, no key");
        let mut child = parent.clone();
        child.start_run(99);
        let one = plan(&prompt(&["a", "b", "c", "d", "e"]), &mut child);
        assert_eq!(one.prefixes, vec![3]);
        let two = plan(&prompt(&["a", "b", "c", "d", "e", "f", "g"]), &mut child);
        assert_eq!(two.prefixes, vec![3, 5], "the fork and the last turn");
        // Another agent's prompts are its own; a prompt that changed early repeats nothing.
        let mut other = child.clone();
        other.speaker = Some("Bo".into());
        assert!(plan(&prompt(&["a", "b", "c", "d"]), &mut other).prefixes.is_empty());
        let changed = [
            vec![Message::new(Role::System, "You are Ann. Plan: new")],
            prompt(&["a", "b", "c", "d", "e", "f", "g", "h"])[1..].to_vec(),
        ]
        .concat();
        assert!(plan(&changed, &mut child).prefixes.is_empty());
        assert_ne!(key(99, Some("Ann")), key(99, Some("Bo")));
        assert_ne!(key(99, Some("Ann")), key(98, Some("Ann")));
    }

    #[test]
    fn a_fan_out_of_four_names_the_prompt_at_the_fork_as_shared() {
        let mut parent = speaking(0);
        let _ = plan(&prompt(&["a", "b", "c"]), &mut parent);
        for (fan_out, shared) in [(0, false), (3, false), (4, true), (8, true)] {
            let mut child = parent.clone();
            child.start_run(99);
            child.fan_out = fan_out;
            let hints = plan(&prompt(&["a", "b", "c", "d", "e"]), &mut child);
            assert_eq!(hints.shared.is_some(), shared, "a fan-out of {fan_out}");
            if let Some(s) = hints.shared {
                assert_eq!((s.len, s.affinity, s.runs), (3, 99, u64::from(fan_out)));
                assert!(s.name.starts_with(&key(99, Some("Ann"))), "{}", s.name);
            }
        }
        let mut child = parent.clone();
        child.start_run(99);
        assert_eq!(child.fan_out, 0, "a run starts alone");
    }
}
