//! What the first provider call of a run would hold under a money cap, learned without making
//! it: the run is started on a private copy of its starting state with a probe budget
//! ([`TreeBudget::probe`]), which refuses the call after working out what a money cap would have
//! reserved for it — the prompt at one token per byte, the completion at the provider's
//! `max_tokens`, at the model's price. Nothing is stored, announced or paid.
//!
//! An exploration uses it to refuse a start whose money cannot pay for one call of each
//! candidate: such an exploration would measure nothing (every call refused) yet end as if its
//! budget had been spent on something.

use std::sync::Arc;

use simtree_shared::{Op, SimKind};

use super::{Core, WorkbenchError};
use crate::backend::{Backend, RunRequest};
use crate::engine::Event;
use crate::llm::budget::{TreeBudget, Unbounded};
use crate::tree::NodeId;

/// What the first provider call of one run would hold: dollars, or why its cost has no bound
/// (an unpriced model, a provider without `max_tokens`). `None`: the run calls no provider in
/// its first turn (an offline player, a baseline trading agent, a model step).
pub(crate) type FirstHold = Option<Result<f64, Unbounded>>;

impl Core {
    /// The hold of the first call of a run from `parent` with each of `branches`' ops applied
    /// and reseeded to `seed` (as a replicate would be), in order.
    pub(super) async fn first_call_holds(
        &self,
        tree: u64,
        parent: NodeId,
        branches: &[Vec<Op>],
        seed: u64,
    ) -> Result<Vec<FirstHold>, WorkbenchError> {
        let handle = self.tree(tree)?;
        if handle.kind == SimKind::Abm || matches!(self.backend, Backend::Mock) {
            return Ok(vec![None; branches.len()]);
        }
        let (start, scenario) = {
            let mut t = handle.lock();
            (t.sim(parent)?, t.scenario.clone())
        };
        let mut out = Vec::with_capacity(branches.len());
        for ops in branches {
            let mut sim = start.fork();
            for op in ops {
                sim.apply_op(op)?;
            }
            sim.reseed(seed);
            let probe = Arc::new(TreeBudget::probe(self.prices.clone()));
            let req = RunRequest {
                scenario: &scenario,
                sim: &sim,
                replay: None,
                budget: Some(probe.clone()),
                abm: None,
                watch: Default::default(),
            };
            let (ctx, _) = crate::backend::run_ctx(&self.backend, req)?;
            let mut sink = |_: Event| {};
            // The probe refuses the first call, which ends the run there (or, where a refused call
            // is only logged, after one turn of refused calls).
            let _ = sim.run(1, &ctx, &mut sink).await;
            out.push(probe.probed());
        }
        Ok(out)
    }
}
