//! The server's runner of custom scenes' Python hooks: the ABM worker pool, whose workers run in
//! the bubblewrap sandbox (or unsandboxed with `--unsafe-abm`), behind the engine's
//! [`HookRunner`]. A hook call blocks its run's task while the worker answers (at most the
//! hooks' wall-time bound); on the server's multi-thread runtime the thread is handed over
//! first, so other tasks go on meanwhile.
//!
//! The document check uses the same workers to parse a hook source (`ast.parse`, never run).

use std::sync::Arc;

use serde_json::Value;

use crate::abm::AbmError;
use crate::abm::worker::{CancelToken, HookRequest, HookSource, WorkerPool};
use crate::engine::Simulator;
use crate::engine::hooks::{Hook, HookCall, HookCallFailed, HookRunner, Hooks};
use crate::engine::scenes::Scene;
use crate::engine::scenes::custom::check::CustomError;

/// Hooks run on a worker of the pool; cancelling the token kills a call in progress.
pub(crate) struct PoolHooks(pub Arc<WorkerPool>, pub CancelToken);

impl HookRunner for PoolHooks {
    fn call(&self, call: &HookCall<'_>) -> Result<Value, HookCallFailed> {
        let req = HookRequest {
            source: call.source,
            hook: call.hook.name(),
            state: &call.state,
            arg: call.arg.as_ref(),
            seed: call.seed,
        };
        off_the_runtime(|| self.0.with_worker_cancellable(&self.1, |w| w.hook(&req)))
            .map_err(|e| HookCallFailed(stopped(e)))
    }
}

/// Runs blocking `f` without holding a worker thread of a multi-thread runtime.
fn off_the_runtime<R>(f: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// A worker's failure as the bound that stopped the hook, or what the hook raised.
fn stopped(e: AbmError) -> String {
    match e {
        AbmError::CpuLimit(s) => format!("stopped at its CPU-time bound ({s} s per call)"),
        AbmError::Timeout(d) => format!(
            "stopped at its wall-time bound ({}s per call); the worker was killed and replaced",
            d.as_secs_f64()
        ),
        AbmError::MemoryLimit(m) => format!("stopped at its memory bound ({m})"),
        AbmError::ModelCode { message, traceback } => match traceback {
            Some(tb) => format!("raised {message}\n{tb}"),
            None => format!("raised {message}"),
        },
        other => other.to_string(),
    }
}

/// Gives a social simulator the pool's workers as its hook runner (a scene without hooks never
/// calls it), its calls stopped by `cancel`.
pub fn give(sim: &mut Simulator, pool: Option<&Arc<WorkerPool>>, cancel: &CancelToken) {
    sim.set_hooks(pool.map_or_else(Hooks::default, |p| Hooks::new(Arc::new(PoolHooks(p.clone(), cancel.clone())))));
}

/// The hook source of a simulator's custom scene, if it has one.
pub(crate) fn source(sim: &Simulator) -> Option<&str> {
    match sim.scene() {
        Scene::Custom(c) => c.config.hooks.as_ref().map(|h| h.source.as_str()),
        _ => None,
    }
}

/// Why a hook source was refused by the worker's parser, at `hooks.source` in the scene's
/// config.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HookSourceError {
    #[error(transparent)]
    Refused(#[from] CustomError),
    /// The worker could not parse it (it is not running, say).
    #[error("the hook source could not be checked: {0}")]
    Worker(#[from] AbmError),
}

/// Parses `source` in a worker of `pool` (never runs it): valid Python defining at least one
/// hook as a top-level function.
pub(crate) fn check_source(pool: &WorkerPool, source: &str) -> Result<(), HookSourceError> {
    let refused = |message: String| HookSourceError::Refused(CustomError { path: "hooks.source".into(), message });
    match off_the_runtime(|| pool.with_worker(|w| w.hook_check(source)))? {
        HookSource::Syntax { line, message } => Err(refused(format!("not valid Python: line {line}: {message}"))),
        HookSource::Defines(names) if !Hook::ALL.iter().any(|h| names.iter().any(|n| n == h.name())) => {
            Err(refused(format!(
                "defines none of the hooks on_action, on_phase_end, outcome as a top-level function (it defines: {})",
                if names.is_empty() { "nothing".to_string() } else { names.join(", ") }
            )))
        }
        HookSource::Defines(_) => Ok(()),
    }
}
