//! Agent-based models in sd-ai's `abm-quant` format: read, check, describe to an LLM, generate,
//! and run for real.
//!
//! * [`model`] — the format's types (seed 000) and the API envelope, with a lossless JSON round
//!   trip;
//! * [`validate`] — reference, naming and type checks plus warnings for known LLM pitfalls, each
//!   naming a JSON path;
//! * [`schema`] — the LLM response schema generated from the types, in the OpenAI, Gemini and
//!   Claude wrappings (seed 001);
//! * [`generate`] — the generation contract (prompts, previous model, validation of the answer)
//!   over an injected structured-output LLM call, with an offline mock;
//! * [`worker`] — the long-lived Python worker that runs models on real Mesa 3 (JSON lines,
//!   per-call limits, restart on death, pickled snapshots as opaque bytes) and a pool of them;
//! * [`sandbox`] — the bubblewrap sandbox the worker runs in (or `--unsafe-abm` without one);
//! * [`venv`] — creation of the worker's virtualenv (`.venv-abm/`);
//! * [`cli`] — what `simtree abm validate | schema | run` do, for the top-level CLI to call.
//!
//! Untrusted model code never runs in this process: it is exec'd by `assets/python/abm_worker.py`
//! in a sandboxed child process with CPU-time, memory and wall-clock limits.

pub mod cli;
pub mod generate;
pub mod model;
pub mod sandbox;
pub mod schema;
mod seccomp;
pub mod validate;
pub mod venv;
pub mod worker;

pub use model::{AbmDocument, AbmModel, AbmResponse, LlmAbmResponse, SupportingInfo};
pub use sandbox::Sandbox;
pub use validate::{Issue, Report, Severity, validate};
pub use worker::{
    AbmWorker, Advance, Advanced, CheckPatch, ModelId, ModelInfo, Patch, Snapshot, Start, StepRecord, StepReport,
    WorkerConfig, WorkerLimits, WorkerPool,
};

use std::time::Duration;

/// Everything that can go wrong in the ABM area, with messages written for the person reading
/// them.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AbmError {
    /// The document is not valid JSON or does not have the format's shape (path in the text).
    #[error("{0}")]
    Parse(String),
    /// The model parsed but failed validation; one line per error.
    #[error("the model has {} error(s):\n{}", .0.len(), .0.join("\n"))]
    Invalid(Vec<String>),
    /// The Python worker could not be started (no python, no venv, missing script).
    #[error("cannot start the ABM worker: {0}")]
    Spawn(String),
    /// The bubblewrap sandbox cannot be built on this machine; model code does not run.
    #[error(
        "the sandbox for model code cannot start: {0}. Agent-based models run only inside it; install bubblewrap (`cargo xtask setup`) or start simtree with --unsafe-abm to run model code unsandboxed, with your user's access to files, network and environment"
    )]
    Sandbox(String),
    /// The run was cancelled (its node deleted or stopped); the worker running it was killed.
    #[error("the run was cancelled; its worker was stopped")]
    Cancelled,
    /// The worker sent something that is not a valid answer.
    #[error("ABM worker protocol error: {0}")]
    Protocol(String),
    /// Model code raised an exception; `traceback` points into the model's code strings.
    #[error("model code failed: {message}{}", .traceback.as_deref().map(|t| format!("\n{t}")).unwrap_or_default())]
    ModelCode { message: String, traceback: Option<String> },
    /// A call used more CPU time than its budget; the model it ran is discarded.
    #[error("CPU time limit exceeded ({0} s per call); the model was stopped and discarded")]
    CpuLimit(u64),
    /// A call hit the worker's memory limit; the model it ran is discarded.
    #[error("memory limit exceeded ({0}); the model was stopped and discarded")]
    MemoryLimit(String),
    /// A call took longer than the per-call timeout; the worker was killed and restarted.
    #[error("the call did not finish within {0:?}; the worker was killed and restarted")]
    Timeout(Duration),
    /// The worker process died during a call; it was restarted.
    #[error("the ABM worker died ({0}); it was restarted")]
    WorkerDied(String),
    /// A model handle whose live state was lost (its worker died after it changed).
    #[error(
        "model {0} was lost when its worker restarted (it had changed since its last snapshot); restore it from a snapshot"
    )]
    Lost(u64),
    /// A model that failed mid-call and so is in an inconsistent state.
    #[error("model {0} failed during an earlier call and is in an inconsistent state; restore it from a snapshot")]
    Poisoned(u64),
    /// A model handle this worker does not know.
    #[error("unknown model handle {0}")]
    UnknownModel(u64),
    /// A request the worker (or this side) refuses, e.g. a patch naming an unknown variable.
    #[error("{0}")]
    BadRequest(String),
    /// The LLM call behind generation failed.
    #[error("LLM call failed: {0}")]
    Llm(String),
    /// Reading a file or running a setup command failed.
    #[error("{0}")]
    Io(String),
}
