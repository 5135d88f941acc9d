//! What runs cost after they ran: a node's status, usage and provenance, and a tree's usage
//! summed with its budget. The usage is the recorded calls' totals, priced by the price table;
//! estimates before a run are in `workbench::estimate`.

use simtree_shared::{Budget, MoneyBudget, NodeInfo, NodeStatus, UsageReply};

use super::WorkbenchError;
use crate::llm::ledger::UsageTotals;
use crate::llm::price::Tally;
use crate::tree::NodeId;

service!(
    /// What runs cost: estimates before a run, usage and provenance after.
    Usage
);

impl Usage<'_> {
    /// A node's status, failure reason, usage, seed, annotation and (once it ended) provenance.
    pub(crate) fn node_info(&self, tree: u64, node: NodeId) -> Result<NodeInfo, WorkbenchError> {
        let handle = self.tree(tree)?;
        let mut info = {
            let mut t = handle.lock();
            t.node(node)?;
            let seed = t.sim(node).ok().and_then(|s| s.seed());
            let n = t.node(node)?;
            NodeInfo {
                id: n.id,
                status: n.status,
                error: n.error.clone(),
                usage: usage_of(UsageTotals::of(&n.records), self.prices.tally(&n.records)),
                recorded_calls: n.records.len() as u64,
                seed,
                annotation: t.notes.get(&node).cloned(),
                provenance: None,
            }
        };
        // A running node's simulator is its parent's until it ends: no provenance while it runs.
        if info.status != NodeStatus::Running {
            info.provenance = Some(self.provenance(tree, node)?);
        }
        Ok(info)
    }

    /// The usage summed over a tree, and its budget (tokens, calls, money) with what is spent.
    pub(crate) fn tree_usage(&self, tree: u64) -> Result<UsageReply, WorkbenchError> {
        let handle = self.tree(tree)?;
        let (total, money) = {
            let t = handle.lock();
            (t.usage(), self.prices.tally(t.records()))
        };
        let b = handle.budget.as_deref();
        let limits = b.map(|b| b.limits()).unwrap_or_default();
        Ok(UsageReply {
            usage: usage_of(total, money),
            budget: b.zip(limits.tokens).map(|(b, limit)| Budget { limit, spent: b.spent() }),
            call_budget: b.zip(limits.calls).map(|(b, limit)| Budget { limit, spent: b.calls() }),
            money_budget: b.zip(limits.money).map(|(b, limit)| MoneyBudget { limit, spent: b.money_spent() }),
        })
    }
}

/// The wire form of recorded totals and their price.
fn usage_of(t: UsageTotals, tally: Option<Tally>) -> simtree_shared::Usage {
    simtree_shared::Usage {
        calls: t.calls,
        prompt_tokens: t.prompt_tokens,
        completion_tokens: t.completion_tokens,
        latency_ms: t.latency_ms,
        cached_tokens: t.cached_tokens,
        money: tally.map(|m| m.money),
        cache_write_tokens: t.cache_write_tokens,
        saved: tally.map(|m| m.saved).filter(|s| *s != 0.0),
        coalesced_calls: t.coalesced,
        cacheable_share: (t.repeated_tokens > 0 && t.prompt_tokens > 0)
            .then(|| t.repeated_tokens as f64 / t.prompt_tokens as f64),
    }
}
