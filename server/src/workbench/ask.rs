//! Interviews: `POST …/node/{n}/ask` asks one agent a question with exactly the context it has
//! at node n (its system prompt and memory there), in one model call. The timeline does not
//! change — no node, no event, no memory: the call runs on a copy of the node's LLM state, and
//! what is kept is the ask in the node's history (`GET …/asks`), durable before the reply. A
//! real provider's call goes through the tree's metered client (its budget is checked and
//! charged) and its record joins the node's records, so usage counts it; the same interview
//! asked again at the node is answered from the history with no call (the record's replay).
//! Social agents and LLM trading agents can be interviewed (the seam's `Sim::interview` builds
//! the request); a rule-based trader or an agent-based model is refused with a 422.

use simtree_shared::{Ask, AskRequest, MAX_ASKS_PER_NODE};

use super::notebook::Notebook;
use super::{Full, WorkbenchError};
use crate::backend::RunRequest;
use crate::llm::chat::Message;
use crate::llm::ledger::request_hash;
use crate::sim::{Sim, SimError};
use crate::store::{Write, now_ms};
use crate::tree::{NodeId, TreeError, notebook};

impl Notebook<'_> {
    /// Asks `req.agent` at `node` `req.question`; the answer, stored with the node.
    pub(crate) async fn ask(&self, tree: u64, node: NodeId, req: &AskRequest) -> Result<Ask, WorkbenchError> {
        let question = notebook::question(&req.question)?;
        let handle = self.tree(tree)?;
        let (sim, scenario, earlier) = {
            let mut t = handle.lock();
            let n = t.node(node)?;
            if n.status.is_running() {
                return Err(TreeError::Running(node).into());
            }
            let earlier = t.asks.get(&node).cloned().unwrap_or_default();
            if earlier.len() >= MAX_ASKS_PER_NODE {
                return Err(Full::Asks { node, max: MAX_ASKS_PER_NODE }.into());
            }
            (t.sim(node)?, t.scenario.clone(), earlier)
        };
        let request = sim.interview(&req.agent, &question).map_err(|e| match e {
            source @ SimError::Interview(_) => WorkbenchError::Interview { node, source },
            other => other.into(),
        })?;
        self.writable()?;
        let hash = request_hash(&request.messages);
        let provider = self.backend.label(&scenario, &sim, Some(&req.agent));
        let mut ask = Ask {
            seq: earlier.len() as u64,
            agent: req.agent.clone(),
            question,
            answer: String::new(),
            at: now_ms(),
            provider,
            prompt_tokens: 0,
            completion_tokens: 0,
            money: None,
            latency_ms: 0,
            request: hash.clone(),
            replayed: false,
        };
        let mut record = None;
        match earlier.iter().find(|a| a.request == hash) {
            Some(before) => {
                ask.answer.clone_from(&before.answer);
                ask.replayed = true;
            }
            None => {
                let req = RunRequest {
                    scenario: &scenario,
                    sim: &sim,
                    replay: None,
                    budget: handle.budget.clone(),
                    abm: None,
                    watch: Default::default(),
                };
                let (ctx, ledger) = crate::backend::run_ctx(&self.backend, req)?;
                let failed = WorkbenchError::InterviewUnanswered;
                ask.answer = match &*sim {
                    // A copy of the node's LLM state: the timeline's counters do not move.
                    Sim::Social(s) => {
                        ctx.llm.chat(&request.messages, &mut s.world().llm.clone()).await.map_err(failed)?
                    }
                    // The trader's model answers in text; a call it made anyway is shown as
                    // its text form and executes nothing.
                    _ => {
                        let reply = ctx.tools.complete(&request).await.map_err(failed)?;
                        let said = Message::assistant_calls(reply.text, reply.tool_calls);
                        said.flat().1.into_owned()
                    }
                };
                record = ledger.take().pop();
                if let Some(r) = &record {
                    (ask.prompt_tokens, ask.completion_tokens, ask.latency_ms) =
                        (r.prompt_tokens, r.completion_tokens, r.latency_ms);
                    ask.money = self.prices.money_of([r]);
                }
            }
        }
        let stored = {
            let mut t = handle.lock();
            t.node(node)?;
            if let Some(r) = record.clone() {
                t.record_call(node, r)?;
                handle.persist_row(&t, node);
            }
            // Numbered under the lock: two interviews at once take the next numbers in turn.
            let list = t.asks.entry(node).or_default();
            ask.seq = list.len() as u64;
            list.push(ask.clone());
            handle.persist(Write::Ask {
                tree,
                node,
                seq: ask.seq,
                body: serde_json::to_string(&ask).unwrap_or_default(),
            });
            drop(t);
            handle.flush()
        };
        if let Err(e) = stored {
            let mut t = handle.lock();
            if let Some(list) = t.asks.get_mut(&node) {
                list.retain(|a| a.seq != ask.seq);
            }
            if record.is_some() {
                t.unrecord_call(node);
                handle.persist_row(&t, node);
            }
            return Err(e);
        }
        Ok(ask)
    }

    /// `GET …/node/{n}/asks`: the node's ask history, oldest first.
    pub(crate) fn asks(&self, tree: u64, node: NodeId) -> Result<Vec<Ask>, WorkbenchError> {
        let handle = self.tree(tree)?;
        let t = handle.lock();
        t.node(node)?;
        Ok(t.asks.get(&node).cloned().unwrap_or_default())
    }
}
