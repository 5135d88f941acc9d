//! What a run would cost before it runs (`?estimate=true` on the run routes): expected provider
//! calls, prompt and completion tokens, and money by the price table. Nothing is run and no node
//! is made.
//!
//! Calls come from the tree's own history when it has one — the calls its recorded runs made per
//! turn — and otherwise from the simulation's structure at the parent ([`Sim::call_shape`]: the
//! fewest calls a turn makes). Tokens per call are the means of the tree's recorded calls; a tree
//! without any has no basis for tokens, and the estimate says so rather than guessing. Runs
//! answered offline (the mock, the scripted player, a replay) make no provider calls. `basis`
//! spells out which of these the figures rest on.

use simtree_shared::{Estimate, NodeStatus, SimKind};

use super::{RequestLimit, Usage, WorkbenchError};
use crate::backend::Backend;
use crate::llm::cache::Prefix;
use crate::sim::{ABM_CALLS, CallShape, Sim};
use crate::tree::{NodeId, SimTree};

/// The tree's recorded history: turns run by nodes that called a provider, and their calls.
struct History {
    turns: u64,
    calls: u64,
    prompt: u64,
    completion: u64,
    /// Of the prompt tokens, those served from and written to providers' caches.
    cached: u64,
    cache_write: u64,
}

impl History {
    fn of(t: &SimTree) -> History {
        let mut h = History { turns: 0, calls: 0, prompt: 0, completion: 0, cached: 0, cache_write: 0 };
        for n in t.nodes().filter(|n| n.status == NodeStatus::Done && !n.records.is_empty()) {
            // `turns` counts from the root: the node's own run is what it added to its parent's.
            let before = n.parent.and_then(|p| t.node(p).ok()).map_or(0, |p| p.turns);
            h.turns += n.turns.saturating_sub(before);
            // An interview's call joins the node's records (usage counts it) but is no turn's.
            let asked: Vec<&str> = t.asks.get(&n.id).into_iter().flatten().map(|a| a.request.as_str()).collect();
            for r in n.records.iter().filter(|r| !r.failed && !asked.contains(&r.hash.as_str())) {
                h.calls += 1;
                h.prompt += r.prompt_tokens;
                h.completion += r.completion_tokens;
                h.cached += r.cached_tokens;
                h.cache_write += r.cache_write_tokens;
            }
        }
        h
    }
}

impl Usage<'_> {
    /// The cost of `runs` runs of `turns` turns each from `parent` (an advance: 1 run; a fan-out:
    /// its count; a sweep: cells × replicates), without running them, in fan-outs of `fan_out`
    /// runs each (an advance: 1; a fan-out: its count; a sweep: the replicates of a cell). `what`
    /// names the request in the basis.
    ///
    /// A fan-out whose provider stores each agent's prompt at the fork in an explicit cache
    /// (Gemini's, see `llm::cache`) is charged the most each may cost (its prefix's bound,
    /// written and stored for its lifetime), once per fan-out and agent, so that an estimate
    /// is not below what the run then spends on them.
    pub(crate) fn estimate(
        &self,
        tree: u64,
        parent: NodeId,
        turns: u64,
        runs: u64,
        fan_out: u64,
        what: &str,
    ) -> Result<Estimate, WorkbenchError> {
        self.check_turns(turns)?;
        let max = self.limits.max_children_per_request;
        if runs > max {
            return Err(RequestLimit::Runs { what: what.to_string(), runs, max }.into());
        }
        let handle = self.tree(tree)?;
        let (shape, offline, history, scenario, forks) = {
            let mut t = handle.lock();
            t.node(parent)?;
            // A model step makes no call: an agent-based node is not rebuilt (which could mean
            // re-running its steps) only to be told so.
            let sim = match handle.kind {
                SimKind::Abm => None,
                _ => Some(t.sim(parent)?),
            };
            let offline = match (&self.backend, sim.as_deref()) {
                (Backend::Mock, _) => Some("the mock"),
                (Backend::Provider(_), Some(Sim::Social(s))) if s.world().llm.offline.is_some() => {
                    Some("the tree's offline player")
                }
                _ => None,
            };
            // Each agent's last prompt but its last message: its prompt at the fork.
            let forks: Vec<(String, Prefix)> = match sim.as_deref() {
                Some(Sim::Social(s)) => s
                    .world()
                    .llm
                    .prefixes
                    .iter()
                    .filter_map(|(agent, sent)| Some((agent.clone(), sent.last?)))
                    .collect(),
                _ => Vec::new(),
            };
            let shape = sim.map_or_else(|| CallShape::none(ABM_CALLS), |s| s.call_shape());
            (shape, offline, History::of(&t), t.scenario.clone(), forks)
        };
        let total_turns = runs.saturating_mul(turns);
        let head = format!("{what}: {runs} run(s) × {turns} turn(s)");
        if let Some(who) = offline {
            return Ok(Estimate {
                calls: 0,
                prompt_tokens: 0,
                completion_tokens: 0,
                money: None,
                basis: format!("{head}; answered by {who}: no provider calls, no cost"),
                warning: None,
            });
        }
        let model = match &self.backend {
            Backend::Provider(p) => p.resolve(Some(&scenario), None).ok().map(|p| p.label()),
            Backend::Mock => None,
        };
        let (calls, calls_basis) = if history.turns > 0 && history.calls > 0 {
            let per_turn = history.calls as f64 / history.turns as f64;
            (
                (per_turn * total_turns as f64).ceil() as u64,
                format!(
                    "{per_turn:.2} calls per turn, as the tree's recorded runs made ({} calls in {} turns)",
                    history.calls, history.turns
                ),
            )
        } else {
            (
                shape.least.saturating_mul(total_turns),
                format!("{} per turn by the scenario's structure ({}; no recorded runs yet)", shape.least, shape.why),
            )
        };
        let (prompt, completion, tokens_basis) = if history.calls > 0 {
            let mean = |n: u64| n as f64 / history.calls as f64;
            let (p, c) = (mean(history.prompt), mean(history.completion));
            (
                (p * calls as f64).round() as u64,
                (c * calls as f64).round() as u64,
                format!(
                    "{p:.0} prompt and {c:.0} completion tokens per call, the means of its {} recorded calls",
                    history.calls
                ),
            )
        } else if calls == 0 {
            (0, 0, "no calls, no tokens".to_string())
        } else {
            (
                0,
                0,
                "tokens unknown: the tree has no recorded call to measure them by (advance once, then ask again)"
                    .to_string(),
            )
        };
        let price = model.as_deref().and_then(|m| self.prices.price(m));
        // The recorded calls' shares of cached and cache-written prompt tokens hold for the
        // calls to come, each priced as the table says.
        let share = |n: u64| match history.prompt {
            0 => 0,
            all => (prompt as f64 * n as f64 / all as f64).round() as u64,
        };
        let usage = crate::llm::chat::Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            cached_tokens: share(history.cached),
            cache_write_tokens: share(history.cache_write),
        };
        let stores = self.stores(&scenario, &forks, runs / fan_out.max(1), fan_out);
        let money = price
            .map(|p| p.cost_of(&usage))
            .filter(|_| history.calls > 0 || calls == 0)
            .zip(stores.money)
            .map(|(calls, stores)| calls + stores);
        let money_basis = match (&model, price) {
            (Some(m), Some(p)) => format!(
                "{m} at ${} / ${} per million prompt / completion tokens{}",
                p.prompt,
                p.completion,
                match usage.cached_tokens + usage.cache_write_tokens {
                    0 => String::new(),
                    _ => format!(
                        ", {} prompt tokens read from cache at ${} and {} written at ${}, as in the recorded calls",
                        usage.cached_tokens,
                        p.cached.unwrap_or(p.prompt),
                        usage.cache_write_tokens,
                        p.cache_write.unwrap_or(p.prompt)
                    ),
                }
            ),
            (Some(m), None) => format!("{m} has no price: money unknown"),
            (None, _) => "no provider: money unknown".into(),
        };
        Ok(Estimate {
            calls,
            prompt_tokens: prompt,
            completion_tokens: completion,
            money,
            basis: format!(
                "{head}; calls: {calls_basis}; tokens: {tokens_basis}; money: {money_basis}{}",
                stores.basis
            ),
            warning: None,
        })
    }

    /// What `fan_outs` fan-outs of `fan_out` runs may spend on explicit caches of the agents'
    /// prompts at the fork (`forks`): each agent's provider says whether it stores one.
    fn stores(&self, scenario: &str, forks: &[(String, Prefix)], fan_outs: u64, fan_out: u64) -> Stores {
        let mut out = Stores { money: Some(0.0), basis: String::new() };
        let Backend::Provider(providers) = &self.backend else {
            return out;
        };
        let (mut caches, mut tokens) = (0u64, 0u64);
        for (agent, prefix) in forks {
            let Ok(provider) = providers.resolve(Some(scenario), Some(agent)) else {
                continue;
            };
            let Some(ttl_s) = provider.stores_prefix(prefix.bytes, fan_out) else {
                continue;
            };
            caches += fan_outs;
            tokens += prefix.bound * fan_outs;
            let price = self.prices.price(&provider.label());
            out.money = out.money.zip(price).map(|(m, p)| m + p.stored(prefix.bound, ttl_s) * fan_outs as f64);
        }
        if caches > 0 {
            out.basis = format!(
                "; explicit caches: up to {caches} created (each agent's prompt at the fork, once per fan-out \
                 of {fan_out}), at most {tokens} tokens written and stored for their lifetime{}",
                out.money.map_or_else(|| ", unpriced".to_string(), |m| format!(", ${m:.6}"))
            );
        }
        out
    }
}

/// What a request's fan-outs may spend on explicit caches: money (`None` when a provider that
/// stores one has no price) and the basis's words for it (empty when none is created).
struct Stores {
    money: Option<f64>,
    basis: String,
}
