//! Rule hooks: the Python a custom scene's document may carry where its declarations end
//! (`on_action`, `on_phase_end`, `outcome`; docs/scenarios.md, "Hooks").
//!
//! The engine never runs them. It asks a [`HookRunner`] that the run's caller puts into the
//! world ([`Hooks`], as the LLM client is handed to `Simulator::run`): the server's is the
//! sandboxed Python worker pool (`sim::hooks`). A call carries the hook's source, the scene's
//! state as JSON and a seed drawn from the simulation's seeded generator, so a hook that is a
//! function of its arguments (the worker gives it a fresh namespace and `random.Random(seed)`)
//! answers the same on a replay or a fork. What it answers is read here, as effects of the
//! document's own closed set: anything else stops the turn with a [`HookError`], and the turn is
//! undone (`Simulator::run`).

use std::sync::Arc;

use serde_json::Value;

/// The most characters of a document's hook source.
pub(crate) const MAX_HOOK_SOURCE_CHARS: usize = 20_000;

/// The most effects one hook call may return.
pub(crate) const MAX_HOOK_EFFECTS: usize = 50;

/// Which hook is called.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hook {
    /// After an action's own effects, with the action (`{actor, name, params}`).
    OnAction,
    /// When a phase ends, after its `on_exit` effects, with the phase's name.
    OnPhaseEnd,
    /// When the scene ends, with the outcome it is ending with in `state.outcome`.
    Outcome,
}

impl Hook {
    pub const ALL: [Hook; 3] = [Hook::OnAction, Hook::OnPhaseEnd, Hook::Outcome];

    /// The Python function's name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Hook::OnAction => "on_action",
            Hook::OnPhaseEnd => "on_phase_end",
            Hook::Outcome => "outcome",
        }
    }
}

/// One call of a hook.
#[derive(Clone, Debug)]
pub(crate) struct HookCall<'a> {
    /// The document's whole hook source.
    pub(crate) source: &'a str,
    pub(crate) hook: Hook,
    /// The scene's state (`vars`, `agents`, `agent`, `phase`, `round`, `turn`, `tallies`,
    /// `outcome`).
    pub(crate) state: Value,
    /// The action (`on_action`) or the phase's name (`on_phase_end`); `None` for `outcome`.
    pub(crate) arg: Option<Value>,
    /// The seed of the hook's `rng` (`random.Random(seed)`).
    pub(crate) seed: u64,
}

/// Why a runner gave no answer: the message names the bound that stopped the hook, or what
/// the hook raised.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct HookCallFailed(pub String);

/// What runs hooks. Implementations block until the hook has answered or been stopped.
pub(crate) trait HookRunner: Send + Sync {
    /// The hook's return value as JSON (`null` when it returned `None` or the source does not
    /// define it).
    fn call(&self, call: &HookCall<'_>) -> Result<Value, HookCallFailed>;
}

/// The runner a run was given, if any (never stored: a simulator read back has none until its
/// next run is given one).
#[derive(Clone, Default)]
pub(crate) struct Hooks(Option<Arc<dyn HookRunner>>);

impl Hooks {
    pub(crate) fn new(runner: Arc<dyn HookRunner>) -> Hooks {
        Hooks(Some(runner))
    }

    pub(crate) fn runner(&self) -> Option<&dyn HookRunner> {
        self.0.as_deref()
    }
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Hooks(runner)" } else { "Hooks(none)" })
    }
}

/// Why a hook stopped its turn.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HookError {
    #[error(
        "hook {hook}: this scene has Python hooks, and they run only in the sandboxed Python worker, which this run does not have"
    )]
    NoRunner { hook: &'static str },
    #[error("hook {hook} failed: {message}")]
    Call { hook: &'static str, message: String },
    #[error("hook {hook} returned {got}; a hook returns a list of effects (or None)")]
    NotAList { hook: &'static str, got: String },
    #[error("hook {hook} returned {0} effects; at most {MAX_HOOK_EFFECTS}", .count)]
    TooMany { hook: &'static str, count: usize },
    #[error("hook {hook}, effect [{index}]: {message}")]
    Effect { hook: &'static str, index: usize, message: String },
}

/// Whether `source` defines `hook` as a top-level function (`def NAME(` at the start of a line:
/// the form the document check requires).
pub(crate) fn defines(source: &str, hook: Hook) -> bool {
    let name = hook.name();
    source.lines().any(|l| {
        l.strip_prefix("def ")
            .and_then(|rest| rest.trim_start().strip_prefix(name))
            .is_some_and(|rest| rest.trim_start().starts_with('('))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hook_is_defined_by_a_top_level_def() {
        let src = "import math\n\ndef on_phase_end(state, phase, rng):\n    def on_action(x):\n        pass\n";
        assert!(defines(src, Hook::OnPhaseEnd));
        assert!(!defines(src, Hook::OnAction), "a nested def is not a hook");
        assert!(!defines(src, Hook::Outcome));
        assert!(defines("def  outcome (state, rng): return []", Hook::Outcome));
        assert!(!defines("def outcomes(state, rng): return []", Hook::Outcome));
    }
}
