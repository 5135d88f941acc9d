//! Per-run metering, recording and replay of LLM calls.
//!
//! Every run of a tree node gets its own client: [`MeteredClient`] (a real provider: reserves the
//! call within the tree's budget, charges usage, records `request hash → response, tokens, latency` in a
//! [`Ledger`]), [`ReplayClient`] (answers from a node's records with zero provider calls; a
//! request that was not recorded fails loudly), or the mock (deterministic, nothing to record).
//! Records live on the node, so they travel with tree export/import.
//!
//! Other kinds meter and replay their own requests with the same pieces: [`metered_call`] for a
//! full [`ChatRequest`] (the trading agent's tool calls, recorded in its own reply form), and a
//! [`ReplayClient`] asked with the request's messages. The hash covers each message's
//! dialect-neutral text ([`Message::flat`]), so a recording replays under any dialect.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::budget::{Hold, TreeBudget};
use super::cache;
use super::chat::{CacheCreated, CacheUse, ChatRequest, ChatResponse, Message, Role, Spend, StoreBudget, Watch};
use super::coalesce::{CallKey, Coalescer, Turn};
use super::config::Dialect;
use super::provider::ChatProvider;
use super::record::LlmRecord;
use super::warmup::{Entered, WarmKey, WarmUp};
use super::{BoxFuture, LlmClient, LlmError, LlmState};

/// A stable hash of a request's messages (FNV-1a 64 over the role and content of each message's
/// flat text form), as hex.
pub(crate) fn request_hash(messages: &[Message]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    for m in messages {
        let (role, content) = m.flat();
        eat(role.as_str().as_bytes());
        eat(&[0]);
        eat(content.as_bytes());
        eat(&[0xff]);
    }
    format!("{h:016x}")
}

/// Sums of calls, tokens and latency (per node, per tree).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct UsageTotals {
    pub(crate) calls: u64,
    pub(crate) prompt_tokens: u64,
    pub(crate) completion_tokens: u64,
    pub(crate) latency_ms: u64,
    #[serde(default)]
    pub(crate) cached_tokens: u64,
    #[serde(default)]
    pub(crate) cache_write_tokens: u64,
    /// Prompt tokens that repeat a prefix an earlier call sent (estimated, see
    /// [`LlmRecord::repeated_tokens`]).
    #[serde(default)]
    pub(crate) repeated_tokens: u64,
    /// Calls answered by an identical call in flight for another run (see `llm::coalesce`);
    /// counted in `calls` too, but not paid.
    #[serde(default)]
    pub(crate) coalesced: u64,
}

impl UsageTotals {
    pub(crate) fn of(records: &[LlmRecord]) -> UsageTotals {
        records.iter().fold(UsageTotals::default(), |mut t, r| {
            t.add(&UsageTotals {
                calls: u64::from(!r.failed),
                prompt_tokens: r.prompt_tokens,
                completion_tokens: r.completion_tokens,
                latency_ms: r.latency_ms,
                cached_tokens: r.cached_tokens,
                cache_write_tokens: r.cache_write_tokens,
                repeated_tokens: r.repeated_tokens,
                coalesced: u64::from(r.coalesced),
            });
            t
        })
    }

    pub(crate) fn add(&mut self, other: &UsageTotals) {
        self.calls += other.calls;
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.latency_ms += other.latency_ms;
        self.cached_tokens += other.cached_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
        self.repeated_tokens += other.repeated_tokens;
        self.coalesced += other.coalesced;
    }
}

/// Where a run's records go as each call returns, before its answer is used (a job's recording
/// in the store, so that a re-run after a crash does not pay for them again).
pub(crate) type RecordSink = Arc<dyn Fn(LlmRecord) -> BoxFuture<'static, ()> + Send + Sync>;

/// The records of one run, in call order.
#[derive(Default)]
pub struct Ledger {
    records: Mutex<Vec<LlmRecord>>,
    /// Calls an earlier attempt of the same run recorded: answered from here first ("replay what
    /// is recorded, then go live"), by request hash in order; a request not among them is sent.
    earlier: Mutex<HashMap<String, VecDeque<LlmRecord>>>,
    sink: Option<RecordSink>,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger").field("records", &self.records).field("sink", &self.sink.is_some()).finish()
    }
}

impl Ledger {
    /// A ledger that answers first from `earlier` (an interrupted attempt's records) and hands
    /// each new record to `sink` before the call's answer is used.
    pub(crate) fn resuming(earlier: Vec<LlmRecord>, sink: Option<RecordSink>) -> Ledger {
        let mut by_hash: HashMap<String, VecDeque<LlmRecord>> = HashMap::new();
        // A failed call answered nothing, but what it paid for is this run's too.
        let (failed, answered): (Vec<LlmRecord>, Vec<LlmRecord>) = earlier.into_iter().partition(|r| r.failed);
        for r in answered {
            by_hash.entry(r.hash.clone()).or_default().push_back(r);
        }
        Ledger { records: Mutex::new(failed), earlier: Mutex::new(by_hash), sink }
    }

    fn push(&self, r: LlmRecord) {
        self.records.lock().unwrap_or_else(|p| p.into_inner()).push(r);
    }

    /// The earlier attempt's answer to the request `hash`, if it recorded one not yet used
    /// (then it is this run's record too, as if the call had been made).
    fn earlier(&self, hash: &str) -> Option<LlmRecord> {
        let r = self.earlier.lock().unwrap_or_else(|p| p.into_inner()).get_mut(hash).and_then(VecDeque::pop_front)?;
        self.push(r.clone());
        Some(r)
    }

    pub fn take(&self) -> Vec<LlmRecord> {
        std::mem::take(&mut *self.records.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// A real provider behind the tree's budget, recording every successful call.
pub struct MeteredClient {
    pub provider: Arc<dyn ChatProvider>,
    pub ledger: Arc<Ledger>,
    pub budget: Option<Arc<TreeBudget>>,
    /// Where replies stream while someone watches the run.
    pub watch: Watch,
    /// Where identical calls of runs from one node meet (`None`: coalescing is off).
    pub coalesce: Option<Arc<Coalescer>>,
    /// Where the first calls of sibling runs wait for the first of them to warm the provider's
    /// cache, and whether they then go one at a time (`None`: the warm-up gate is off).
    pub warm_up: Option<(Arc<WarmUp>, bool)>,
}

impl LlmClient for MeteredClient {
    fn chat<'a>(&'a self, messages: &'a [Message], state: &'a mut LlmState) -> BoxFuture<'a, Result<String, LlmError>> {
        Box::pin(async move {
            let hash = request_hash(messages);
            if let Some(earlier) = self.ledger.earlier(&hash) {
                return Ok(earlier.response);
            }
            if let Some(sink) = self.watch.wanted() {
                sink.speaker(state.speaker.as_deref());
            }
            let mut request = ChatRequest {
                watch: self.watch.clone(),
                cache: cache::plan(messages, state),
                ..ChatRequest::new(messages.to_vec())
            };
            // A prefix the provider may store for the fan-out is paid from the tree's budget,
            // and what it cost is known here even when the call then fails.
            let store = request.cache.shared.is_some().then(|| {
                Arc::new(StoreHold {
                    budget: self.budget.clone(),
                    model: self.provider.label(),
                    hold: Mutex::new(None),
                    created: Mutex::new(None),
                })
            });
            if let Some(store) = &store {
                request.cache.spend = Spend::new(store.clone());
            }
            // Only calls that reach a server are shared: an offline provider keeps per-run
            // state (the mock's counters) that a shared answer would skip.
            let networked = matches!(self.provider.dialect(), Dialect::OpenAi | Dialect::Gemini | Dialect::Anthropic);
            let run = networked && state.affinity != 0;
            // An agent's first call of a run shares its prefix with the sibling runs' (held by
            // the warm-up gate until the first of them is answered).
            let first = match (run, state.speaker.as_ref()) {
                (true, Some(agent)) => {
                    state.prefixes.get_mut(agent).is_some_and(|s| !std::mem::replace(&mut s.called, true))
                }
                _ => false,
            };
            let warm = state.speaker.clone().filter(|_| first).map(|agent| WarmKey {
                provider: self.provider.label(),
                affinity: state.affinity,
                agent,
            });
            let coalescer = self.coalesce.as_ref().filter(|_| run);
            let Some(coalescer) = coalescer else {
                let answer = self.call(&request, state, warm).await;
                let (text, record) = self.failed(answer, &request, store.as_deref()).await?;
                self.ledger.keep(record).await;
                return Ok(text);
            };
            let key = CallKey { provider: self.provider.label(), affinity: state.affinity, seed: state.seed, hash };
            loop {
                match coalescer.join(key.clone()) {
                    Turn::Lead(leader) => {
                        let answer = self.call(&request, state, warm.clone()).await;
                        leader.finish(&answer);
                        let (text, record) = self.failed(answer, &request, store.as_deref()).await?;
                        self.ledger.keep(record).await;
                        return Ok(text);
                    }
                    Turn::Wait(rx) => {
                        // The leader was cancelled: ask again (and perhaps lead).
                        let Ok(answer) = rx.await else { continue };
                        let (text, mut record) = answer?;
                        // What the leader's call created, and its wait at the warm-up gate,
                        // were the leader's.
                        if let Some(c) = &mut record.cache {
                            c.created = None;
                            c.held_ms = None;
                        }
                        self.ledger.keep(LlmRecord { coalesced: true, ..record }).await;
                        return Ok(text);
                    }
                }
            }
        })
    }
}

impl MeteredClient {
    /// `answer`, and when it is a failure of a call that created an explicit cache (the
    /// provider bills it whatever became of the call), a record of the failed call that carries
    /// the cache, kept first: the money the budget was charged for it is in usage too.
    async fn failed(
        &self,
        answer: Result<(String, LlmRecord), LlmError>,
        request: &ChatRequest,
        store: Option<&StoreHold>,
    ) -> Result<(String, LlmRecord), LlmError> {
        if answer.is_err()
            && let Some(created) = store.and_then(StoreHold::created)
        {
            self.ledger
                .keep(LlmRecord {
                    hash: request_hash(&request.messages),
                    model: Some(self.provider.label()),
                    cache: Some(CacheUse { created: Some(created), ..CacheUse::default() }),
                    failed: true,
                    ..LlmRecord::default()
                })
                .await;
        }
        answer
    }

    /// One metered call: the reply's text and its record, not yet kept. With `warm` (an
    /// agent's first call of a run), it first passes the warm-up gate; a wait there is
    /// recorded with the call's cache use.
    async fn call(
        &self,
        request: &ChatRequest,
        state: &mut LlmState,
        warm: Option<WarmKey>,
    ) -> Result<(String, LlmRecord), LlmError> {
        let gate = self.warm_up.as_ref().map(|(gate, _)| gate);
        let entered = match (&self.warm_up, warm) {
            (Some((gate, serial)), Some(key)) => gate.enter(key, *serial).await,
            _ => Entered::default(),
        };
        let lead = entered.lead;
        let budget = self.budget.as_deref();
        let mut result = metered_record(&*self.provider, budget, request, state, |r| r.text.clone()).await;
        if let (Some(held), Ok((_, record))) = (entered.held, &mut result) {
            record.cache.get_or_insert_with(CacheUse::default).held_ms = Some(held.as_millis() as u64);
        }
        if let (Some(gate), Ok((_, record))) = (gate, &result)
            && record.cached_tokens > 0
        {
            gate.saw_cache(&self.provider.label());
        }
        if let Some(lead) = lead {
            lead.finish(result.is_ok());
        }
        let (response, record) = result?;
        Ok((response.text, record))
    }
}

/// What pays for the explicit cache one call may create for its fan-out: the tree's budget
/// when it has one ([`TreeBudget::reserve_store`]), which keeps the hold between the
/// provider's ask and its end; and what the cache cost, which the call's record carries even
/// when the call fails.
struct StoreHold {
    budget: Option<Arc<TreeBudget>>,
    model: String,
    hold: Mutex<Option<Hold>>,
    created: Mutex<Option<CacheCreated>>,
}

impl StoreHold {
    /// The cache the call created, once the provider said what it cost.
    fn created(&self) -> Option<CacheCreated> {
        *self.created.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl StoreBudget for StoreHold {
    fn hold(&self, tokens: u64, ttl_s: u64) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            let Some(budget) = &self.budget else { return true };
            match budget.reserve_store(&self.model, tokens, ttl_s).await {
                Ok(h) => {
                    *self.hold.lock().unwrap_or_else(|p| p.into_inner()) = Some(h);
                    true
                }
                Err(e) => {
                    tracing::info!(model = %self.model, reason = %e, "no explicit prompt cache within the budget");
                    false
                }
            }
        })
    }

    fn settle(&self, tokens: u64, ttl_s: u64) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if tokens > 0 {
                *self.created.lock().unwrap_or_else(|p| p.into_inner()) = Some(CacheCreated { tokens, ttl_s });
            }
            let hold = self.hold.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let (Some(budget), Some(h)) = (&self.budget, hold) {
                budget.settle_store(&self.model, h, tokens, ttl_s).await;
            }
        })
    }
}

impl Ledger {
    /// Hands `record` to the sink (before its answer is used), then keeps it.
    async fn keep(&self, record: LlmRecord) {
        if let Some(sink) = &self.sink {
            sink(record.clone()).await;
        }
        self.push(record);
    }
}

/// One call of `provider` within the tree's `budget` (checked before, charged after), recorded
/// in `ledger` under the hash of the request's messages as `record(response)` — the form a replay
/// gives back. A refusal is an error and is not recorded.
pub(crate) async fn metered_call(
    provider: &dyn ChatProvider,
    ledger: &Ledger,
    budget: Option<&TreeBudget>,
    request: &ChatRequest,
    state: &mut LlmState,
    record: impl FnOnce(&ChatResponse) -> String,
) -> Result<ChatResponse, LlmError> {
    let (response, recorded) = metered_record(provider, budget, request, state, record).await?;
    ledger.keep(recorded).await;
    Ok(response)
}

/// [`metered_call`] without keeping the record: the response and what would be recorded.
async fn metered_record(
    provider: &dyn ChatProvider,
    budget: Option<&TreeBudget>,
    request: &ChatRequest,
    state: &mut LlmState,
    record: impl FnOnce(&ChatResponse) -> String,
) -> Result<(ChatResponse, LlmRecord), LlmError> {
    let model = provider.label();
    let hold = match budget {
        Some(b) => Some(b.reserve(&model, request, provider.max_tokens()).await?),
        None => None,
    };
    let started = Instant::now();
    let result = provider.chat(request, state).await;
    if let (Some(b), Some(hold)) = (budget, hold) {
        b.settle(&model, hold, result.as_ref().ok().map(|r| &r.usage)).await;
    }
    let response = result?.into_result()?;
    let usage = response.usage;
    let repeated = cache::repeated_share(&request.messages, &request.cache);
    let recorded = LlmRecord {
        hash: request_hash(&request.messages),
        response: record(&response),
        prompt_tokens: usage.prompt_tokens,
        completion_tokens: usage.completion_tokens,
        latency_ms: started.elapsed().as_millis() as u64,
        cached_tokens: usage.cached_tokens,
        model: Some(model),
        retries: response.retries,
        cache_write_tokens: usage.cache_write_tokens,
        cache: response.cache.clone(),
        repeated_tokens: (usage.prompt_tokens as f64 * repeated).round() as u64,
        coalesced: false,
        failed: false,
    };
    Ok((response, recorded))
}

/// Answers from recorded calls only (strict): the same request gets the same answers in the
/// same order; an unknown request is an error naming its hash.
pub(crate) struct ReplayClient {
    answers: Mutex<HashMap<String, VecDeque<String>>>,
}

impl ReplayClient {
    pub(crate) fn new(records: &[LlmRecord]) -> ReplayClient {
        let mut answers: HashMap<String, VecDeque<String>> = HashMap::new();
        for r in records.iter().filter(|r| !r.failed) {
            answers.entry(r.hash.clone()).or_default().push_back(r.response.clone());
        }
        ReplayClient { answers: Mutex::new(answers) }
    }
}

impl LlmClient for ReplayClient {
    fn chat<'a>(
        &'a self,
        messages: &'a [Message],
        _state: &'a mut LlmState,
    ) -> BoxFuture<'a, Result<String, LlmError>> {
        let hash = request_hash(messages);
        let answer =
            self.answers.lock().unwrap_or_else(|p| p.into_inner()).get_mut(&hash).and_then(VecDeque::pop_front);
        Box::pin(async move {
            answer.ok_or_else(|| {
                LlmError::Request(format!(
                    "strict replay: no recorded answer for request {hash}; this run asks something the recording never saw"
                ))
            })
        })
    }
}

/// Sends each agent's calls to its own client (per-agent provider overrides), recognising the
/// agent by the first line of the system prompt (`You are {name}.`); others go to `default`.
pub(crate) struct RoutingClient {
    pub(crate) default: Arc<dyn LlmClient>,
    pub(crate) by_agent: Vec<(String, Arc<dyn LlmClient>)>,
}

impl RoutingClient {
    fn pick(&self, messages: &[Message]) -> &Arc<dyn LlmClient> {
        let system = messages.iter().find(|m| m.role == Role::System).map(|m| m.content.as_ref()).unwrap_or("");
        let line = system.trim_start_matches('\n').lines().next().unwrap_or("");
        self.by_agent
            .iter()
            .find(|(name, _)| line.strip_prefix("You are ").and_then(|r| r.strip_suffix('.')) == Some(name.as_str()))
            .map_or(&self.default, |(_, c)| c)
    }
}

impl LlmClient for RoutingClient {
    fn chat<'a>(&'a self, messages: &'a [Message], state: &'a mut LlmState) -> BoxFuture<'a, Result<String, LlmError>> {
        self.pick(messages).chat(messages, state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_depend_on_roles_and_contents() {
        let a = [Message::new(Role::System, "s"), Message::new(Role::User, "u")];
        let b = [Message::new(Role::System, "s"), Message::new(Role::Assistant, "u")];
        let c = [Message::new(Role::System, "su")];
        assert_eq!(request_hash(&a), request_hash(&a.clone()));
        assert_ne!(request_hash(&a), request_hash(&b));
        assert_ne!(request_hash(&a), request_hash(&c));
    }

    /// Recordings made before tool messages were native hashed the conversation written out as
    /// text; a native conversation hashes the same, so those recordings still replay.
    #[test]
    fn tool_messages_hash_as_their_text_form() {
        use crate::llm::ToolCall;
        let call = ToolCall {
            id: Some("c1".into()),
            name: "submit_decision".into(),
            arguments: serde_json::json!({"orders": []}),
        };
        let native = [
            Message::new(Role::System, "s"),
            Message::assistant_calls("Holding.", vec![call.clone()]),
            Message::tool_result(&call, "{}"),
        ];
        let text = [
            Message::new(Role::System, "s"),
            Message::new(Role::Assistant, "Holding.\n[called submit_decision with {\"orders\":[]}]"),
            Message::new(Role::User, "Tool result: {}"),
        ];
        assert_eq!(request_hash(&native), request_hash(&text));
        // Recordings on stored nodes depend on the exact value.
        assert_eq!(request_hash(&text[..1]), "1fe3ce2f351748ee");
    }

    struct Fixed(&'static str);

    impl LlmClient for Fixed {
        fn chat<'a>(&'a self, _: &'a [Message], _: &'a mut LlmState) -> BoxFuture<'a, Result<String, LlmError>> {
            let s = self.0.to_string();
            Box::pin(async move { Ok(s) })
        }
    }

    #[test]
    fn routing_picks_the_agent_named_on_the_first_line() {
        let r = RoutingClient {
            default: Arc::new(Fixed("default")),
            by_agent: vec![("Rep. Li Na".into(), Arc::new(Fixed("li"))), ("Ann".into(), Arc::new(Fixed("ann")))],
        };
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let ask = |system: &str| {
            let m = [Message::new(Role::System, system), Message::new(Role::User, "hi")];
            rt.block_on(r.chat(&m, &mut LlmState::default())).unwrap()
        };
        assert_eq!(ask("\nYou are Rep. Li Na.\nYou speak…"), "li");
        assert_eq!(ask("\nYou are Ann.\n"), "ann");
        assert_eq!(ask("\nYou are Annabel.\n"), "default");
        assert_eq!(ask("no name"), "default");
    }

    #[test]
    fn replay_answers_in_order_and_refuses_the_unknown() {
        let m = [Message::new(Role::User, "q")];
        let rec = |resp: &str| LlmRecord {
            hash: request_hash(&m),
            response: resp.into(),
            prompt_tokens: 1,
            completion_tokens: 2,
            latency_ms: 3,
            model: None,
            ..LlmRecord::default()
        };
        let client = ReplayClient::new(&[rec("one"), rec("two")]);
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let mut st = LlmState::default();
        assert_eq!(rt.block_on(client.chat(&m, &mut st)).unwrap(), "one");
        assert_eq!(rt.block_on(client.chat(&m, &mut st)).unwrap(), "two");
        let err = rt.block_on(client.chat(&m, &mut st)).unwrap_err();
        assert!(err.to_string().contains("strict replay"));
        assert_eq!(UsageTotals::of(&[rec("a"), rec("b")]).completion_tokens, 4);
    }

    /// A failed call's record (it carries an explicit cache its call created) answers no
    /// replay, counts as no call, and an interrupted run's is carried into the next attempt.
    #[test]
    fn a_failed_record_answers_nothing_and_is_carried_on() {
        let m = [Message::new(Role::User, "q")];
        let failed = LlmRecord {
            hash: request_hash(&m),
            cache: Some(CacheUse { created: Some(CacheCreated { tokens: 9, ttl_s: 60 }), ..CacheUse::default() }),
            failed: true,
            ..LlmRecord::default()
        };
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let replay = ReplayClient::new(std::slice::from_ref(&failed));
        assert!(rt.block_on(replay.chat(&m, &mut LlmState::default())).is_err());
        assert_eq!(UsageTotals::of(std::slice::from_ref(&failed)).calls, 0);
        let ledger = Ledger::resuming(vec![failed.clone()], None);
        assert_eq!(ledger.earlier(&failed.hash), None, "no answer");
        assert_eq!(ledger.take(), vec![failed]);
    }

    #[test]
    fn retries_are_recorded_additively_and_old_records_read_as_none() {
        let old = r#"{"hash":"h","response":"r","prompt_tokens":1,"completion_tokens":2,"latency_ms":3}"#;
        let r: LlmRecord = serde_json::from_str(old).unwrap();
        assert_eq!(r.retries, 0);
        assert_eq!(serde_json::to_string(&r).unwrap(), old, "none: written as before");
        let retried = LlmRecord { retries: 2, ..r };
        let text = serde_json::to_string(&retried).unwrap();
        assert!(text.ends_with(r#","retries":2}"#), "{text}");
        assert_eq!(serde_json::from_str::<LlmRecord>(&text).unwrap(), retried);
    }
}
