//! Per-run metering, recording and replay of LLM calls.
//!
//! Every run of a tree node gets its own client: [`MeteredClient`] (a real provider: checks the
//! tree's token budget, charges usage, records `request hash → response, tokens, latency` in a
//! [`Ledger`]), [`ReplayClient`] (answers from a node's records with zero provider calls; a
//! request that was not recorded fails loudly), or the mock (deterministic, nothing to record).
//! Records live on the node, so they travel with tree export/import.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::provider::{ChatProvider, ChatRequest, NativeMessage, NativeRole};
use super::resilience::TokenBudget;
use super::{BoxFuture, LlmClient, LlmError, LlmState};
use crate::abm::generate::{Role as AbmRole, StructuredLlm, StructuredRequest};
use crate::engine::memory::{Message, Role};
use crate::trading::agents::{ChatRole, ModelReply, ToolCall as TradingToolCall, ToolModel, ToolRequest};

/// A stable hash of a request's messages (FNV-1a 64 over role and content), as hex.
pub fn request_hash(messages: &[Message]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    for m in messages {
        eat(m.role.as_str().as_bytes());
        eat(&[0]);
        eat(m.content.as_bytes());
        eat(&[0xff]);
    }
    format!("{h:016x}")
}

/// One recorded call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LlmRecord {
    pub hash: String,
    pub response: String,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub latency_ms: u64,
}

/// Sums of calls, tokens and latency (per node, per tree).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageTotals {
    pub calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub latency_ms: u64,
}

impl UsageTotals {
    pub fn of(records: &[LlmRecord]) -> UsageTotals {
        records.iter().fold(UsageTotals::default(), |mut t, r| {
            t.calls += 1;
            t.prompt_tokens += r.prompt_tokens;
            t.completion_tokens += r.completion_tokens;
            t.latency_ms += r.latency_ms;
            t
        })
    }

    pub fn add(&mut self, other: &UsageTotals) {
        self.calls += other.calls;
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.latency_ms += other.latency_ms;
    }
}

/// The records of one run, in call order.
#[derive(Debug, Default)]
pub struct Ledger {
    records: Mutex<Vec<LlmRecord>>,
}

impl Ledger {
    fn push(&self, r: LlmRecord) {
        self.records.lock().unwrap_or_else(|p| p.into_inner()).push(r);
    }

    pub fn take(&self) -> Vec<LlmRecord> {
        std::mem::take(&mut *self.records.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// A real provider behind the tree's budget, recording every successful call.
pub struct MeteredClient {
    pub provider: Arc<dyn ChatProvider>,
    pub ledger: Arc<Ledger>,
    pub budget: Option<Arc<TokenBudget>>,
}

impl LlmClient for MeteredClient {
    fn chat<'a>(&'a self, messages: &'a [Message], state: &'a mut LlmState) -> BoxFuture<'a, Result<String, LlmError>> {
        Box::pin(async move {
            if let Some(b) = &self.budget {
                b.check()?;
            }
            let started = Instant::now();
            let request = ChatRequest::new(messages.to_vec());
            let result = self.provider.chat(&request, state).await;
            if let (Ok(r), Some(b)) = (&result, &self.budget) {
                b.charge(&r.usage);
            }
            let response = result?.into_result()?;
            self.ledger.push(LlmRecord {
                hash: request_hash(messages),
                response: response.text.clone(),
                prompt_tokens: response.usage.prompt_tokens,
                completion_tokens: response.usage.completion_tokens,
                latency_ms: started.elapsed().as_millis() as u64,
            });
            Ok(response.text)
        })
    }
}

/// Answers from recorded calls only (strict): the same request gets the same answers in the
/// same order; an unknown request is an error naming its hash.
pub struct ReplayClient {
    answers: Mutex<HashMap<String, VecDeque<String>>>,
}

impl ReplayClient {
    pub fn new(records: &[LlmRecord]) -> ReplayClient {
        let mut answers: HashMap<String, VecDeque<String>> = HashMap::new();
        for r in records {
            answers.entry(r.hash.clone()).or_default().push_back(r.response.clone());
        }
        ReplayClient {
            answers: Mutex::new(answers),
        }
    }
}

impl LlmClient for ReplayClient {
    fn chat<'a>(
        &'a self,
        messages: &'a [Message],
        _state: &'a mut LlmState,
    ) -> BoxFuture<'a, Result<String, LlmError>> {
        let hash = request_hash(messages);
        let answer = self
            .answers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(&hash)
            .and_then(VecDeque::pop_front);
        Box::pin(async move {
            answer.ok_or_else(|| {
                LlmError::Request(format!(
                    "strict replay: no recorded answer for request {hash}; this run asks something the recording never saw"
                ))
            })
        })
    }
}

/// The trading agent's tool-calling model on a real provider: metered and recorded like
/// [`MeteredClient`]. Earlier tool calls and their results travel as native tool messages where
/// the dialect has them (openai), else as text; the answer's tool calls come back as the trading
/// agent expects them.
pub struct ProviderToolModel {
    pub provider: Arc<dyn ChatProvider>,
    pub ledger: Arc<Ledger>,
    pub budget: Option<Arc<TokenBudget>>,
}

/// A tool-calling request in native form (roles, calls and call ids kept).
fn native_messages(req: &ToolRequest) -> Vec<NativeMessage> {
    req.messages
        .iter()
        .map(|m| NativeMessage {
            role: match m.role {
                ChatRole::System => NativeRole::System,
                ChatRole::User => NativeRole::User,
                ChatRole::Assistant => NativeRole::Assistant,
                ChatRole::Tool => NativeRole::Tool,
            },
            content: m.content.clone(),
            tool_calls: m
                .tool_calls
                .iter()
                .map(|c| super::ToolCall {
                    id: Some(c.id.clone()),
                    name: c.name.clone(),
                    arguments: c.arguments.clone(),
                })
                .collect(),
            tool_call_id: m.tool_call_id.clone(),
        })
        .collect()
}

/// A tool-calling request as plain chat messages (what dialects without tool messages get, and
/// what is hashed for replay).
fn tool_messages(req: &ToolRequest) -> Vec<Message> {
    req.messages
        .iter()
        .map(|m| match m.role {
            ChatRole::System => Message::new(Role::System, m.content.as_str()),
            ChatRole::User => Message::new(Role::User, m.content.as_str()),
            ChatRole::Tool => Message::new(Role::User, format!("Tool result: {}", m.content)),
            ChatRole::Assistant => {
                let mut text = m.content.clone();
                for c in &m.tool_calls {
                    text.push_str(&format!("\n[called {} with {}]", c.name, c.arguments));
                }
                Message::new(Role::Assistant, text)
            }
        })
        .collect()
}

/// Answers a trading agent's tool-calling requests from a node's recording (strict, like
/// [`ReplayClient`]); the recorded response is the model's reply as JSON.
pub struct ReplayToolModel {
    inner: ReplayClient,
}

impl ReplayToolModel {
    pub fn new(records: &[LlmRecord]) -> ReplayToolModel {
        ReplayToolModel {
            inner: ReplayClient::new(records),
        }
    }
}

impl ToolModel for ReplayToolModel {
    fn complete<'a>(&'a self, req: &'a ToolRequest) -> BoxFuture<'a, Result<ModelReply, LlmError>> {
        Box::pin(async move {
            let messages = tool_messages(req);
            let text = self.inner.chat(&messages, &mut LlmState::default()).await?;
            serde_json::from_str(&text)
                .map_err(|e| LlmError::Response(format!("replay: a recorded reply is unreadable: {e}")))
        })
    }
}

impl ToolModel for ProviderToolModel {
    fn complete<'a>(&'a self, req: &'a ToolRequest) -> BoxFuture<'a, Result<ModelReply, LlmError>> {
        Box::pin(async move {
            if let Some(b) = &self.budget {
                b.check()?;
            }
            let messages = tool_messages(req);
            let mut request = ChatRequest::new(messages.clone());
            request.native = native_messages(req);
            request.tools = req
                .tools
                .iter()
                .map(|t| super::ToolSpec {
                    name: t.name.clone(),
                    description: t.description.clone(),
                    parameters: t.parameters.clone(),
                })
                .collect();
            let started = Instant::now();
            let result = self.provider.chat(&request, &mut LlmState::default()).await;
            if let (Ok(r), Some(b)) = (&result, &self.budget) {
                b.charge(&r.usage);
            }
            let response = result?.into_result()?;
            let reply = ModelReply {
                text: response.text.clone(),
                tool_calls: response
                    .tool_calls
                    .iter()
                    .enumerate()
                    .map(|(i, c)| TradingToolCall {
                        id: c.id.clone().unwrap_or_else(|| format!("call_{i}")),
                        name: c.name.clone(),
                        arguments: c.arguments.clone(),
                    })
                    .collect(),
            };
            self.ledger.push(LlmRecord {
                hash: request_hash(&messages),
                response: serde_json::to_string(&reply).unwrap_or_default(),
                prompt_tokens: response.usage.prompt_tokens,
                completion_tokens: response.usage.completion_tokens,
                latency_ms: started.elapsed().as_millis() as u64,
            });
            Ok(reply)
        })
    }
}

/// Sends each agent's calls to its own client (per-agent provider overrides), recognising the
/// agent by the first line of the system prompt (`You are {name}.`); others go to `default`.
pub struct RoutingClient {
    pub default: Arc<dyn LlmClient>,
    pub by_agent: Vec<(String, Arc<dyn LlmClient>)>,
}

impl RoutingClient {
    fn pick(&self, messages: &[Message]) -> &Arc<dyn LlmClient> {
        let system = messages
            .iter()
            .find(|m| m.role == Role::System)
            .map(|m| m.content.as_ref())
            .unwrap_or("");
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

/// sd-ai's structured-output call (ABM generation) on a real provider, through the one
/// engine-level [`super::structured`] API: OpenAI json_schema strict, Gemini responseSchema,
/// Anthropic forced tool.
pub struct ProviderStructured {
    pub provider: Arc<dyn ChatProvider>,
}

impl StructuredLlm for ProviderStructured {
    fn complete<'a>(&'a self, req: &'a StructuredRequest) -> BoxFuture<'a, Result<serde_json::Value, LlmError>> {
        Box::pin(async move {
            let messages = req
                .messages
                .iter()
                .map(|m| {
                    let role = match m.role {
                        AbmRole::System => Role::System,
                        AbmRole::User => Role::User,
                        AbmRole::Assistant => Role::Assistant,
                    };
                    Message::new(role, m.content.as_str())
                })
                .collect();
            let schema = super::JsonSchema::new(req.schema_name, req.schema.clone());
            super::structured(
                &*self.provider,
                ChatRequest::new(messages),
                schema,
                &mut LlmState::default(),
            )
            .await
        })
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
            by_agent: vec![
                ("Rep. Li Na".into(), Arc::new(Fixed("li"))),
                ("Ann".into(), Arc::new(Fixed("ann"))),
            ],
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
}
