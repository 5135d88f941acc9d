//! A node's model calls as they were (`GET …/node/{n}/calls`): the "why did it say that" view.
//!
//! Prompts are not stored per call: an agent's prompt holds its whole memory, so storing each
//! would make a chain's rows quadratic. Runs are deterministic and every real call is recorded
//! on its node (the replay record), so the node's advance is run again from its parent's state,
//! answered by that record (or by the offline player that answered it first), on a private copy
//! that is thrown away; each call is captured on the way. Nothing is stored, announced or paid.

use std::sync::{Arc, Mutex};

use simtree_shared::{CallCache, CallMessage, CreatedCache, NodeCall, NodeCalls, NodeStatus, Op};

use super::notebook::Notebook;
use super::{RequestError, WorkbenchError};
use crate::backend::RunRequest;
use crate::engine::Event;
use crate::engine::parse;
use crate::llm::chat::{CacheUse, ChatRequest, Message};
use crate::llm::ledger::request_hash;
use crate::llm::record::LlmRecord;
use crate::llm::{BoxFuture, LlmClient, LlmError, LlmState};
use crate::sim::{RunCtx, Sim};
use crate::trading::agents::{ModelReply, ToolModel};
use crate::tree::{NodeId, TreeError};

/// Calls a page shows by default, and at most.
pub(crate) const DEFAULT_CALLS_PAGE: u64 = 50;
pub(crate) const MAX_CALLS_PAGE: u64 = 200;

/// One call of the run again: what every call keeps (its request hash, agent and reply, to
/// match records and count attempts), and its prompt only when it is on the page asked for
/// (a prompt holds the agent's whole memory: keeping every one would be quadratic).
struct Seen {
    hash: String,
    agent: Option<String>,
    reply: String,
    messages: Option<Vec<Message>>,
    /// No reply came: the run (run again) failed on this call.
    failed: bool,
}

/// The calls seen so far, and which of them are kept whole.
struct Capture {
    window: std::ops::Range<usize>,
    calls: Vec<Seen>,
}

impl Capture {
    fn push(&mut self, messages: &[Message], agent: Option<String>, reply: Result<String, ()>) {
        let whole = self.window.contains(&self.calls.len());
        self.calls.push(Seen {
            hash: request_hash(messages),
            agent,
            failed: reply.is_err(),
            reply: reply.unwrap_or_default(),
            messages: whole.then(|| messages.to_vec()),
        });
    }
}

type Captured = Arc<Mutex<Capture>>;

/// A client that passes calls on and keeps what they were.
struct Tap {
    inner: Arc<dyn LlmClient>,
    seen: Captured,
}

impl LlmClient for Tap {
    fn chat<'a>(&'a self, messages: &'a [Message], state: &'a mut LlmState) -> BoxFuture<'a, Result<String, LlmError>> {
        Box::pin(async move {
            // A call that fails is kept too: it is the request a failed run could not get past.
            let reply = self.inner.chat(messages, state).await;
            let kept = reply.as_ref().map_err(|_| ()).cloned();
            lock(&self.seen).push(messages, state.speaker.clone(), kept);
            reply
        })
    }
}

/// The same for a trading agent's tool-calling model.
struct ToolTap {
    inner: Arc<dyn ToolModel>,
    seen: Captured,
}

impl ToolModel for ToolTap {
    fn complete<'a>(&'a self, request: &'a ChatRequest) -> BoxFuture<'a, Result<ModelReply, LlmError>> {
        Box::pin(async move {
            let reply = self.inner.complete(request).await;
            let kept = reply.as_ref().map_err(|_| ()).map(|reply| {
                let mut text = reply.text.clone();
                for c in &reply.tool_calls {
                    text.push_str(&format!("\n[called {} with {}]", c.name, c.arguments));
                }
                text
            });
            lock(&self.seen).push(&request.messages, None, kept);
            reply
        })
    }
}

/// A prompt message in its dialect-neutral text form (what the replay hash covers).
pub(super) fn call_message(m: &Message) -> CallMessage {
    let (role, content) = m.flat();
    CallMessage { role: role.as_str().to_string(), content: content.into_owned() }
}

/// What a recorded call asked of its provider's prompt cache, as the wire shows it.
fn call_cache(c: &CacheUse) -> CallCache {
    CallCache {
        how: c.how.as_str().to_string(),
        key: c.key.clone(),
        breakpoints: c.breakpoints.clone(),
        cached_content: c.cached_content.clone(),
        created: c.created.map(|c| CreatedCache { tokens: c.tokens, ttl_s: c.ttl_s }),
        held_ms: c.held_ms,
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The action the engine reads from a social agent's reply, or why it reads none.
fn action_of(reply: &str) -> (Option<simtree_shared::ActionCall>, Option<String>) {
    let sections = parse::split_sections(reply);
    let parsed = match parse::parse_action(sections.action) {
        Ok(None) => parse::parse_action(reply),
        other => other,
    };
    match parsed {
        Ok(Some(a)) => (Some(a), None),
        Ok(None) => (None, Some("the reply holds no action".into())),
        Err(e) => (None, Some(e.to_string())),
    }
}

impl Notebook<'_> {
    /// `GET …/node/{n}/calls`: every model call of the node's run, in order, then the
    /// interviews asked at it (their prompts built again from the node's state).
    pub(crate) async fn calls(
        &self,
        tree: u64,
        node: NodeId,
        offset: Option<u64>,
        limit: Option<u64>,
    ) -> Result<NodeCalls, WorkbenchError> {
        let limit = limit.unwrap_or(DEFAULT_CALLS_PAGE);
        if !(1..=MAX_CALLS_PAGE).contains(&limit) {
            return Err(RequestError::PageLimit { limit, max: MAX_CALLS_PAGE }.into());
        }
        let offset = usize::try_from(offset.unwrap_or(0)).unwrap_or(usize::MAX);
        let window = offset..offset.saturating_add(limit as usize);
        let mut out = self.run_calls(tree, node, window.clone()).await?;
        let handle = self.tree(tree)?;
        let (asks, sim) = {
            let mut t = handle.lock();
            let asks = t.asks.get(&node).cloned().unwrap_or_default();
            if asks.is_empty() {
                return Ok(out);
            }
            (asks, t.sim(node)?)
        };
        // Interviews come after the run's calls, numbered on from them.
        let first = out.total;
        out.total += asks.len() as u64;
        out.note = None;
        for (k, a) in asks.into_iter().enumerate() {
            if !window.contains(&(first as usize + k)) {
                continue;
            }
            let messages = sim.interview(&a.agent, &a.question).map(|r| r.messages).unwrap_or_default();
            out.calls.push(NodeCall {
                index: first + k as u64,
                agent: Some(a.agent),
                messages: messages.iter().map(call_message).collect(),
                reply: a.answer,
                action: None,
                parse_error: None,
                attempt: 1,
                prompt_tokens: a.prompt_tokens,
                completion_tokens: a.completion_tokens,
                money: a.money,
                latency_ms: a.latency_ms,
                provider: a.provider,
                retries: 0,
                recorded: !a.replayed && a.prompt_tokens + a.completion_tokens > 0,
                ask: true,
                cached_tokens: 0,
                cache_write_tokens: 0,
                cache: None,
                coalesced: false,
                failed: None,
            });
        }
        Ok(out)
    }

    /// The calls of the node's own run.
    async fn run_calls(
        &self,
        tree: u64,
        node: NodeId,
        window: std::ops::Range<usize>,
    ) -> Result<NodeCalls, WorkbenchError> {
        let handle = self.tree(tree)?;
        let none = |note: String| NodeCalls { node, calls: Vec::new(), note: Some(note), total: 0 };
        let (parent, seed, turns, records, scenario, status, done, error) = {
            let mut t = handle.lock();
            let n = t.node(node)?;
            if n.status.is_running() {
                return Err(TreeError::Running(node).into());
            }
            let (Some(parent), [Op::Advance { turns }]) = (n.parent, n.ops.as_slice()) else {
                return Ok(none(format!("node {node} was not made by an advance: it called no model")));
            };
            let (turns, records, status, done) = (*turns, n.records.clone(), n.status, n.turns);
            let error = n.error.clone();
            let seed = t.sim(node).ok().and_then(|s| s.seed());
            (t.sim(parent)?, seed, turns, records, t.scenario.clone(), status, done, error)
        };
        if matches!(*parent, Sim::Abm(_)) {
            return Ok(none("an agent-based model's steps call no language model".into()));
        }
        self.check_turns(turns)?;
        let mut sim = parent.fork();
        // A fan-out's child ran from its own seed.
        if let Some(seed) = seed.filter(|s| Some(*s) != parent.seed()) {
            sim.reseed(seed);
        }
        // A stopped run is run again only as far as it went (its last whole turn): past that
        // there is nothing recorded, and an offline player would go on to the turns asked for.
        // A failed run fails again at the same call, so it runs as asked.
        let turns = match status {
            NodeStatus::Cancelled | NodeStatus::Interrupted => turns.min(done.saturating_sub(sim.turns())),
            _ => turns,
        };
        let replay = self.backend.replay_of(&sim, records.clone());
        // A custom scene's hooks run again as they ran (they call no model).
        let abm = sim.hook_source().and_then(|_| self.abm_pool().ok());
        let req = RunRequest {
            scenario: &scenario,
            sim: &sim,
            replay,
            budget: None,
            abm: abm.clone(),
            watch: Default::default(),
        };
        let (ctx, _) = crate::backend::run_ctx(&self.backend, req)?;
        let seen: Captured = Arc::new(Mutex::new(Capture { window, calls: Vec::new() }));
        let tapped = RunCtx {
            llm: Arc::new(Tap { inner: ctx.llm, seen: seen.clone() }),
            tools: Arc::new(ToolTap { inner: ctx.tools, seen: seen.clone() }),
            abm,
        };
        let mut sink = |_: Event| {};
        // A run that failed fails again at the same call: the calls before it are what it sent.
        let _ = sim.run(turns, &tapped, &mut sink).await;
        let social = matches!(sim, Sim::Social(_));
        let seen = std::mem::take(&mut lock(&seen).calls);
        Ok(NodeCalls {
            node,
            total: seen.len() as u64,
            calls: self.described(&scenario, &sim, seen, &records, social, error.as_deref()),
            note: None,
        })
    }

    /// Captured calls as the wire shows them (those of the page), with tokens and latency from
    /// the recording.
    fn described(
        &self,
        scenario: &str,
        sim: &Sim,
        seen: Vec<Seen>,
        records: &[LlmRecord],
        social: bool,
        error: Option<&str>,
    ) -> Vec<NodeCall> {
        let mut used = vec![false; records.len()];
        let mut out: Vec<NodeCall> = Vec::new();
        // The agent of the previous call, whether its reply held no action, and its attempt.
        let mut prev: Option<(Option<String>, bool, u32)> = None;
        for (i, call) in seen.into_iter().enumerate() {
            let record = records
                .iter()
                .enumerate()
                .find(|(k, r)| !used[*k] && r.hash == call.hash && r.failed == call.failed)
                .map(|(k, r)| {
                    used[k] = true;
                    r
                });
            let (action, parse_error) = if social && !call.failed { action_of(&call.reply) } else { (None, None) };
            // Why a failed call failed is the node's own reason (the run again fails on its
            // missing record, which says less).
            let failed = call.failed.then(|| error.unwrap_or("no reply").to_string());
            let attempt = match &prev {
                Some((agent, true, n)) if *agent == call.agent => n + 1,
                _ => 1,
            };
            prev = Some((call.agent.clone(), parse_error.is_some(), attempt));
            let Some(messages) = call.messages else {
                continue;
            };
            out.push(NodeCall {
                index: i as u64,
                provider: self.backend.label(scenario, sim, call.agent.as_deref()),
                agent: call.agent,
                messages: messages.iter().map(call_message).collect(),
                reply: call.reply,
                action,
                parse_error,
                attempt,
                prompt_tokens: record.map_or(0, |r| r.prompt_tokens),
                completion_tokens: record.map_or(0, |r| r.completion_tokens),
                money: record.and_then(|r| self.prices.money_of([r])),
                latency_ms: record.map_or(0, |r| r.latency_ms),
                retries: record.map_or(0, |r| r.retries),
                recorded: record.is_some(),
                ask: false,
                cached_tokens: record.map_or(0, |r| r.cached_tokens),
                cache_write_tokens: record.map_or(0, |r| r.cache_write_tokens),
                cache: record.and_then(|r| r.cache.as_ref()).map(call_cache),
                coalesced: record.is_some_and(|r| r.coalesced),
                failed,
            });
        }
        out
    }
}
