//! The LLM agent on a real provider, and its replay.
//!
//! [`ProviderToolModel`] sends the agent's [`ChatRequest`] as it is — its earlier calls and their
//! results are tool messages, which every dialect sends in its native form — within the tree's
//! token budget, and records the reply in the run's ledger as the JSON of a [`ModelReply`].
//! [`ReplayToolModel`] gives those replies back from a node's recording without calling anyone.
//! Both live here, above the LLM layer: it provides the metering and the recording, the trading
//! agent decides what a reply is.

use std::sync::Arc;

use super::agents::{ModelReply, ToolModel};
use crate::llm::budget::TreeBudget;
use crate::llm::chat::{ChatRequest, ChatResponse, ToolCall, Watch};
use crate::llm::ledger::{Ledger, ReplayClient, metered_call};
use crate::llm::record::LlmRecord;
use crate::llm::{BoxFuture, ChatProvider, LlmClient, LlmError, LlmState};

/// The trading agent's tool-calling model on a real provider, metered and recorded.
pub(crate) struct ProviderToolModel {
    pub(crate) provider: Arc<dyn ChatProvider>,
    pub(crate) ledger: Arc<Ledger>,
    pub(crate) budget: Option<Arc<TreeBudget>>,
    /// Where replies stream while someone watches the run.
    pub(crate) watch: Watch,
}

/// The agent's view of a response: its text and calls, every call with an id (`call_<n>` where
/// the provider gave none) so that the call's result can name it.
fn reply_of(response: &ChatResponse) -> ModelReply {
    ModelReply {
        text: response.text.clone(),
        tool_calls: response
            .tool_calls
            .iter()
            .enumerate()
            .map(|(i, c)| ToolCall { id: Some(c.id.clone().unwrap_or_else(|| format!("call_{i}"))), ..c.clone() })
            .collect(),
    }
}

impl ToolModel for ProviderToolModel {
    fn complete<'a>(&'a self, request: &'a ChatRequest) -> BoxFuture<'a, Result<ModelReply, LlmError>> {
        Box::pin(async move {
            let record = |r: &ChatResponse| serde_json::to_string(&reply_of(r)).unwrap_or_default();
            let budget = self.budget.as_deref();
            let mut state = LlmState::default();
            let request = ChatRequest { watch: self.watch.clone(), ..request.clone() };
            let response = metered_call(&*self.provider, &self.ledger, budget, &request, &mut state, record).await?;
            Ok(reply_of(&response))
        })
    }
}

/// Answers the trading agent from a node's recording (strict: an unrecorded request is an error).
pub(crate) struct ReplayToolModel {
    inner: ReplayClient,
}

impl ReplayToolModel {
    pub(crate) fn new(records: &[LlmRecord]) -> ReplayToolModel {
        ReplayToolModel { inner: ReplayClient::new(records) }
    }
}

impl ToolModel for ReplayToolModel {
    fn complete<'a>(&'a self, request: &'a ChatRequest) -> BoxFuture<'a, Result<ModelReply, LlmError>> {
        Box::pin(async move {
            let text = self.inner.chat(&request.messages, &mut LlmState::default()).await?;
            serde_json::from_str(&text)
                .map_err(|e| LlmError::Response(format!("replay: a recorded reply is unreadable: {e}")))
        })
    }
}
