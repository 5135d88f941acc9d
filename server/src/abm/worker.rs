//! The Rust side of the Python ABM worker (`assets/python/abm_worker.py`): a long-lived child
//! process speaking JSON lines, with per-call limits, restart on death, and a pool for parallel
//! replicates.
//!
//! Model code is untrusted, so it only ever runs in the child, and the child runs in a sandbox
//! ([`super::sandbox`]: bubblewrap, unless `--unsafe-abm`). The child caps its own address
//! space (`RLIMIT_AS`) and gives every call a CPU-time budget (a soft `RLIMIT_CPU` whose
//! `SIGXCPU` raises inside the model code); this side adds a wall-clock budget per call and, when
//! it expires, SIGKILLs the child's whole process group (and with it the sandbox), so model code
//! that ignores `SIGXCPU` gains nothing. A call can also be cancelled from another thread
//! ([`CancelToken`]): the child is killed the same way within [`CANCEL_POLL`]. A killed child
//! is replaced at once (its imports take seconds); a crashed one on the next call.
//!
//! Models live in the child under handles ([`ModelId`]) allocated here. The durable state of a
//! model is its [`Snapshot`] (a pickle, opaque bytes on this side), so a restart loses nothing
//! that was snapshotted: for each handle this side remembers its last checkpoint (the spec and
//! seed it was loaded from, or the last snapshot taken or restored) and whether it has changed
//! since. After a restart, unchanged handles are re-established transparently; changed ones
//! report [`AbmError::Lost`]. The tree (which keeps every node's snapshot) uses the one-shot
//! [`AbmWorker::advance`], which never leaves state behind in the child. It can also rebuild a
//! state without any snapshot, from the specification, the seed and the recorded history of
//! advances ([`Start::Rebuild`]): the model is deterministic given those, so an imported tree
//! never needs to unpickle bytes it was given.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, TryLockError};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use indexmap::IndexMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use super::AbmError;
use super::model::{AbmModel, VarType};
use super::sandbox::{self, Sandbox};

/// How many lines of the worker's stderr are kept for error messages.
const STDERR_TAIL: usize = 40;

/// The longest stderr line kept (what follows in the same line is skipped).
const STDERR_LINE_BYTES: usize = 2048;

/// The longest answer line read from a worker (snapshots are the long ones); a longer one ends
/// the worker.
const MAX_ANSWER_BYTES: usize = 256 << 20;

/// The next line of `r` without its newline, at most `max` bytes of it: `(bytes, true)` for a
/// whole line, `(first max bytes, false)` for a longer one, whose rest is read and dropped
/// piece by piece (never held). `None` at the end of the stream.
fn bounded_line(r: &mut impl BufRead, max: usize) -> std::io::Result<Option<(Vec<u8>, bool)>> {
    let mut line = Vec::new();
    let mut whole = true;
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            return Ok((!line.is_empty() || !whole).then_some((line, whole)));
        }
        let (piece, found) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        let room = max.saturating_sub(line.len());
        if piece.len() > room {
            whole = false;
        }
        line.extend_from_slice(&piece[..piece.len().min(room)]);
        let used = found.unwrap_or(buf.len());
        r.consume(used);
        if found.is_some() {
            return Ok(Some((line, whole)));
        }
    }
}

/// How often a waiting call looks at its [`CancelToken`]: the bound on how long a cancelled call
/// keeps its worker.
pub(crate) const CANCEL_POLL: Duration = Duration::from_millis(50);

/// How long a new worker may take to start (Python, numpy, Mesa imports: seconds on a loaded
/// machine) before its first call's own budget starts.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// Environment variable overriding the wall-clock budget per call, in seconds (tests use a small
/// one; see the README).
pub(crate) const CALL_TIMEOUT_ENV: &str = "SIMTREE_ABM_CALL_TIMEOUT";

/// Limits applied to every worker process and call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerLimits {
    /// Wall-clock time one call may take before the worker is killed and restarted.
    pub call_timeout: Duration,
    /// CPU seconds one call may use (0: unlimited); the call fails, the worker survives.
    pub cpu_seconds_per_call: u64,
    /// Address-space limit of the worker process in bytes (0: unlimited). Mesa, numpy and
    /// pandas alone map about 1 GiB of address space.
    pub memory_bytes: u64,
}

impl Default for WorkerLimits {
    fn default() -> Self {
        WorkerLimits { call_timeout: Duration::from_secs(120), cpu_seconds_per_call: 60, memory_bytes: 4 << 30 }
    }
}

/// Where the worker's interpreter and script are, its limits, and its sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerConfig {
    /// The Python interpreter (normally `.venv-abm/bin/python`).
    pub python: PathBuf,
    /// `abm_worker.py`.
    pub script: PathBuf,
    pub limits: WorkerLimits,
    pub sandbox: Sandbox,
}

impl WorkerConfig {
    /// The layout of a checkout: `<root>/.venv-abm` and `<root>/assets/python/abm_worker.py`,
    /// sandboxed. `$SIMTREE_PYTHON` overrides the interpreter and `$SIMTREE_ABM_CALL_TIMEOUT`
    /// (seconds) the wall-clock budget per call.
    pub fn for_root(root: &Path) -> Self {
        let python = std::env::var_os("SIMTREE_PYTHON")
            .map(PathBuf::from)
            .unwrap_or_else(|| super::venv::venv_python(&root.join(super::venv::VENV_DIR)));
        let mut limits = WorkerLimits::default();
        if let Some(secs) = std::env::var(CALL_TIMEOUT_ENV).ok().and_then(|v| v.trim().parse::<f64>().ok())
            && secs.is_finite()
            && secs > 0.0
        {
            limits.call_timeout = Duration::from_secs_f64(secs);
        }
        WorkerConfig { python, script: root.join("assets/python/abm_worker.py"), limits, sandbox: Sandbox::default() }
    }

    /// Same, with other limits.
    pub(crate) fn with_limits(mut self, limits: WorkerLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Same, with another sandbox mode.
    pub fn with_sandbox(mut self, sandbox: Sandbox) -> Self {
        self.sandbox = sandbox;
        self
    }
}

/// Asks a call in flight to stop. Clones share the flag. The worker running the call is killed
/// (its process group, and the sandbox with it) and the call answers [`AbmError::Cancelled`].
#[derive(Clone, Debug, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// A guard that cancels when dropped, unless disarmed first: held by an async task, it turns
    /// the task's abortion into the cancellation of its blocking call.
    pub fn cancel_on_drop(&self) -> CancelOnDrop {
        CancelOnDrop(Some(self.clone()))
    }
}

/// See [`CancelToken::cancel_on_drop`].
#[derive(Debug)]
pub struct CancelOnDrop(Option<CancelToken>);

impl CancelOnDrop {
    /// The call finished: dropping the guard no longer cancels.
    pub(crate) fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(t) = self.0.take() {
            t.cancel();
        }
    }
}

/// A model's pickled state: opaque bytes, cheap to clone. Serialized as base64.
#[derive(Clone, PartialEq, Eq)]
pub struct Snapshot(Arc<Vec<u8>>);

impl Snapshot {
    /// Wraps bytes previously obtained from [`Snapshot::as_bytes`].
    pub(crate) fn from_bytes(bytes: Vec<u8>) -> Self {
        Snapshot(Arc::new(bytes))
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn to_base64(&self) -> String {
        B64.encode(self.as_bytes())
    }

    fn from_base64(text: &str) -> Result<Self, BadSnapshot> {
        B64.decode(text).map(Snapshot::from_bytes).map_err(BadSnapshot)
    }
}

/// A snapshot's text that is not base64 (from the worker or a stored state).
#[derive(Debug, thiserror::Error)]
#[error("snapshot is not valid base64: {0}")]
pub(crate) struct BadSnapshot(#[source] base64::DecodeError);

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Snapshot({} bytes)", self.len())
    }
}

impl Serialize for Snapshot {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_base64())
    }
}

impl<'de> Deserialize<'de> for Snapshot {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Snapshot::from_base64(&text).map_err(serde::de::Error::custom)
    }
}

/// A handle on a model living in a worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ModelId(pub u64);

impl std::fmt::Display for ModelId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

pub use simtree_shared::abm::{AbmPatch as Patch, Termination};

/// The server's check of a [`Patch`] (the patch itself is a wire type in `simtree_shared`).
pub trait CheckPatch {
    /// Checks the patch against the model's declarations: the variable exists and the value
    /// fits its declared type. Lets a branch fail before anything runs.
    fn check(&self, model: &AbmModel) -> Result<(), AbmError>;
}

impl CheckPatch for Patch {
    fn check(&self, model: &AbmModel) -> Result<(), AbmError> {
        let (decl, what) = match self {
            Patch::GlobalVariable { name, .. } => (model.global_variable(name), format!("global variable '{name}'")),
            Patch::EnvironmentAttribute { name, .. } => {
                (model.environment_attribute(name), format!("environment attribute '{name}'"))
            }
            Patch::AgentAttribute { agent_type, name, .. } => {
                let t = model
                    .agent_type(agent_type)
                    .ok_or_else(|| AbmError::BadRequest(format!("the model has no agent type '{agent_type}'")))?;
                (
                    t.agent_attributes.iter().find(|a| &a.name == name),
                    format!("attribute '{name}' of agent type {agent_type}"),
                )
            }
        };
        let decl = decl.ok_or_else(|| AbmError::BadRequest(format!("the model declares no {what}")))?;
        let value = self.value();
        // "object" is the format's catch-all (LLMs use it for tuples, lists, records).
        let fits = decl.var_type.admits(value) || (decl.var_type == VarType::Object && !value.is_null());
        if !fits {
            return Err(AbmError::BadRequest(format!(
                "{what} is declared {} but the patch gives {value}",
                decl.var_type
            )));
        }
        Ok(())
    }
}

/// The tracked variables at one step. Model-level values are plain JSON; agent-level ones are
/// arrays ordered by agent id. A model-level reading of an agent attribute is the mean (numbers)
/// or a `{value: count}` object.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    pub step: u64,
    pub values: IndexMap<String, Value>,
}

/// What a `step` call did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepReport {
    /// One record per step run (fewer than asked if the model terminated).
    pub records: Vec<StepRecord>,
    /// The model's step count afterwards.
    pub steps: u64,
    pub terminated: Option<Termination>,
    /// Time spent stepping inside the worker (no IPC), in ms.
    pub elapsed_ms: f64,
    /// Fallbacks the worker applied so far (e.g. an undefined getter replaced by a variable).
    warnings: Vec<String>,
}

/// A model's current state in brief.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelInfo {
    pub steps: u64,
    pub(crate) terminated: Option<Termination>,
    /// Agents alive per type.
    pub agents: IndexMap<String, u64>,
    global_variables: IndexMap<String, Value>,
    pub environment_attributes: IndexMap<String, Value>,
    pub(crate) topology: String,
    /// Edges of the network (network topology only).
    pub edges: Option<u64>,
}

/// A freshly loaded model.
#[derive(Clone, Debug, PartialEq)]
pub struct Loaded {
    pub id: ModelId,
    /// Fallbacks the worker applied while building the model.
    pub warnings: Vec<String>,
    /// The tracked variables after initialization (step 0).
    pub initial: IndexMap<String, Value>,
    pub info: ModelInfo,
}

/// Where a one-shot run starts.
#[derive(Clone, Copy, Debug)]
pub enum Start<'a> {
    /// A fresh model built from its specification with this seed.
    Spec { model: &'a AbmModel, seed: u64 },
    /// A snapshot this server's worker took (never bytes from outside: unpickling runs code).
    Snapshot(&'a Snapshot),
    /// The state reached by building the model with `seed` and running `history` in order: what
    /// a snapshot would hold, recomputed (runs are deterministic given the seed and the plans).
    Rebuild { model: &'a AbmModel, seed: u64, history: &'a [Advance] },
}

/// A one-shot run: patches, then an optional reseed, then `steps` steps. Also the unit of a
/// node's recorded history.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Advance {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patches: Vec<Patch>,
    /// New seed for the model's generators (replicates from one snapshot need distinct ones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reseed: Option<u64>,
    #[serde(default)]
    pub steps: u64,
}

/// The result of a one-shot run.
#[derive(Clone, Debug, PartialEq)]
pub struct Advanced {
    pub report: StepReport,
    /// The state after the run.
    pub(crate) snapshot: Snapshot,
    /// The tracked variables before the first step (after patches).
    pub before: IndexMap<String, Value>,
}

/// The wall-clock bound of one hook call (a hook runs inside a turn, which a client waits
/// for); the worker running a hook past it is killed and replaced.
pub(crate) const HOOK_CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// The CPU seconds one hook call may use.
pub(crate) const HOOK_CPU_SECONDS: u64 = 2;

/// One call of a custom scene's rule hook.
#[derive(Clone, Debug)]
pub(crate) struct HookRequest<'a> {
    pub(crate) source: &'a str,
    /// `on_action`, `on_phase_end` or `outcome`.
    pub(crate) hook: &'a str,
    pub(crate) state: &'a Value,
    pub(crate) arg: Option<&'a Value>,
    pub(crate) seed: u64,
}

/// A hook source as the worker's parser reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum HookSource {
    /// The names of its top-level functions.
    Defines(Vec<String>),
    Syntax {
        line: u64,
        message: String,
    },
}

/// Version information of a running worker.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct WorkerInfo {
    pub pid: u32,
    pub mesa: String,
    pub python: String,
}

/// How waiting for an answer ended.
enum Waited {
    Line(String),
    Died,
    TimedOut,
    Cancelled,
}

/// What this side remembers about a model in the worker.
struct Entry {
    checkpoint: Checkpoint,
    /// Changed since the checkpoint (a restart would lose the change).
    dirty: bool,
    /// Present in the current worker process.
    live: bool,
    /// A call on it failed part-way; only drop is accepted.
    poisoned: bool,
    /// Lost in a restart while dirty.
    lost: bool,
}

#[derive(Clone)]
enum Checkpoint {
    Spec { model: Arc<Value>, seed: u64 },
    Snapshot(Snapshot),
}

/// A running worker process.
struct Proc {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<Option<String>>,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    /// The worker said it finished starting (its first line).
    ready: bool,
    /// The worker's own `pids` cgroup, if the machine offers one (removed after the process).
    _tasks: Option<sandbox::TaskCap>,
}

impl Proc {
    fn spawn(config: &WorkerConfig) -> Result<Proc, AbmError> {
        if !config.script.is_file() {
            return Err(AbmError::Spawn(format!("worker script {} not found", config.script.display())));
        }
        let limits = &config.limits;
        let args = [
            "--memory-mb".to_string(),
            (limits.memory_bytes / (1024 * 1024)).to_string(),
            "--cpu-seconds".to_string(),
            limits.cpu_seconds_per_call.to_string(),
        ];
        let mut cmd = sandbox::worker_command(&config.python, &config.script, config.sandbox, &args)?;
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let program = cmd.get_program().to_string_lossy().into_owned();
        let tasks = sandbox::cap_tasks(&mut cmd);
        let mut child = sandbox::spawn(cmd).map_err(|e| {
            AbmError::Spawn(format!("{program}: {e} (create the venv with `cargo xtask` or abm::venv::ensure_venv)"))
        })?;
        let stdin = child.stdin.take().expect("stdin is piped");
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");
        let (tx, lines) = mpsc::channel();
        let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
        let keep = |tail: &Mutex<VecDeque<String>>, line: String| {
            let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
            if t.len() == STDERR_TAIL {
                t.pop_front();
            }
            t.push_back(line);
        };
        let tail = Arc::clone(&stderr_tail);
        std::thread::spawn(move || {
            let mut out = BufReader::new(stdout);
            // An answer past the bound (model code writing to the protocol's descriptor, say)
            // ends the worker instead of growing this buffer without end.
            while let Ok(Some((line, whole))) = bounded_line(&mut out, MAX_ANSWER_BYTES) {
                let text = match String::from_utf8(line) {
                    Ok(t) if whole => t,
                    Ok(_) => {
                        keep(&tail, format!("simtree: an answer longer than {MAX_ANSWER_BYTES} bytes"));
                        break;
                    }
                    Err(_) => break,
                };
                if tx.send(Some(text)).is_err() {
                    return;
                }
            }
            let _ = tx.send(None);
        });
        let tail = Arc::clone(&stderr_tail);
        std::thread::spawn(move || {
            // Kept by bytes, not lines: a line without end is cut at the bound and the rest of
            // it skipped as it arrives.
            let mut err = BufReader::new(stderr);
            while let Ok(Some((line, whole))) = bounded_line(&mut err, STDERR_LINE_BYTES) {
                let mut text = String::from_utf8_lossy(&line).into_owned();
                if !whole {
                    text.push_str(" …(cut)");
                }
                keep(&tail, text);
            }
        });
        Ok(Proc { child, stdin, lines, stderr_tail, ready: false, _tasks: tasks })
    }

    /// Waits for the next protocol line until `deadline`, in short slices so that a
    /// cancellation is seen within [`CANCEL_POLL`].
    fn wait_line(&self, deadline: Instant, cancel: Option<&CancelToken>) -> Waited {
        loop {
            let slice = deadline.saturating_duration_since(Instant::now()).min(CANCEL_POLL);
            match self.lines.recv_timeout(slice) {
                Err(RecvTimeoutError::Timeout) => {
                    if cancel.is_some_and(CancelToken::is_cancelled) {
                        return Waited::Cancelled;
                    }
                    if Instant::now() >= deadline {
                        return Waited::TimedOut;
                    }
                }
                Ok(Some(text)) => return Waited::Line(text),
                Ok(None) | Err(RecvTimeoutError::Disconnected) => return Waited::Died,
            }
        }
    }

    fn tail(&self) -> String {
        let t = self.stderr_tail.lock().unwrap_or_else(|p| p.into_inner());
        t.iter().cloned().collect::<Vec<_>>().join("\n")
    }

    /// Kills the process (its whole group and sandbox) and describes how it ended.
    fn kill(mut self) -> String {
        sandbox::kill_tree(&mut self.child);
        let status = self.child.wait();
        // Give the stderr thread a moment to drain the last lines.
        std::thread::sleep(Duration::from_millis(20));
        let tail = self.tail();
        let status = match status {
            Ok(s) => s.to_string(),
            Err(e) => format!("unknown status ({e})"),
        };
        if tail.is_empty() {
            status
        } else {
            let last: Vec<&str> = tail.lines().rev().take(8).collect();
            let last: Vec<&str> = last.into_iter().rev().collect();
            format!("{status}; stderr: {}", last.join(" | "))
        }
    }
}

/// One worker process and the models this side has in it.
pub struct AbmWorker {
    config: WorkerConfig,
    proc: Option<Proc>,
    models: HashMap<ModelId, Entry>,
    next_model: u64,
    next_request: u64,
    restarts: u64,
    /// Set by the pool for the duration of a cancellable call.
    cancel: Option<CancelToken>,
}

impl AbmWorker {
    /// Checks that the sandbox can be built here, starts a worker and checks that it answers
    /// (Mesa imported).
    pub fn spawn(config: WorkerConfig) -> Result<Self, AbmError> {
        sandbox::probe(&config.python, config.sandbox)?;
        let mut w = AbmWorker {
            config,
            proc: None,
            models: HashMap::new(),
            next_model: 1,
            next_request: 1,
            restarts: 0,
            cancel: None,
        };
        w.ping()?;
        Ok(w)
    }

    /// The configuration it was started with.
    pub fn config(&self) -> &WorkerConfig {
        &self.config
    }

    /// How many times the process was replaced after dying or being killed.
    pub fn restarts(&self) -> u64 {
        self.restarts
    }

    /// The current process id, if a process is running.
    pub fn pid(&self) -> Option<u32> {
        self.proc.as_ref().map(|p| p.child.id())
    }

    /// Round trip with versions.
    pub fn ping(&mut self) -> Result<WorkerInfo, AbmError> {
        let out = self.request("ping", Map::new(), None)?;
        serde_json::from_value(Value::Object(out)).map_err(|e| AbmError::Protocol(e.to_string()))
    }

    /// Builds a model from its specification (initialization runs in the worker).
    pub fn load(&mut self, model: &AbmModel, seed: u64) -> Result<Loaded, AbmError> {
        let spec = Arc::new(serde_json::to_value(model).map_err(|e| AbmError::Parse(e.to_string()))?);
        let id = self.new_id();
        let out = self.load_into(id, &spec, seed)?;
        self.models.insert(
            id,
            Entry {
                checkpoint: Checkpoint::Spec { model: spec, seed },
                dirty: false,
                live: true,
                poisoned: false,
                lost: false,
            },
        );
        Ok(Loaded {
            id,
            warnings: field(&out, "warnings")?,
            initial: field(&out, "initial")?,
            info: field(&out, "info")?,
        })
    }

    /// Brings a snapshot back as a new live model.
    pub fn restore(&mut self, snapshot: &Snapshot) -> Result<ModelId, AbmError> {
        let id = self.new_id();
        self.restore_into(id, snapshot)?;
        self.models.insert(
            id,
            Entry {
                checkpoint: Checkpoint::Snapshot(snapshot.clone()),
                dirty: false,
                live: true,
                poisoned: false,
                lost: false,
            },
        );
        Ok(id)
    }

    /// Runs up to `n` steps (fewer if the model terminates), returning the tracked variables of
    /// each step.
    pub fn step(&mut self, id: ModelId, n: u64) -> Result<StepReport, AbmError> {
        let mut args = Map::new();
        args.insert("n".into(), n.into());
        let out = self.model_call(id, "step", args, true)?;
        serde_json::from_value(Value::Object(out)).map_err(|e| AbmError::Protocol(e.to_string()))
    }

    /// Pickles the model. The bytes are opaque; give them to [`AbmWorker::restore`] (in any
    /// worker running the same script and Mesa version).
    pub fn snapshot(&mut self, id: ModelId) -> Result<Snapshot, AbmError> {
        let out = self.model_call(id, "snapshot", Map::new(), false)?;
        let data = out
            .get("data")
            .and_then(Value::as_str)
            .ok_or_else(|| AbmError::Protocol("snapshot answer without data".into()))?;
        let snap = Snapshot::from_base64(data).map_err(|e| AbmError::Protocol(e.to_string()))?;
        if let Some(e) = self.models.get_mut(&id) {
            e.checkpoint = Checkpoint::Snapshot(snap.clone());
            e.dirty = false;
        }
        Ok(snap)
    }

    /// Applies a patch; returns how many objects changed (agents for an agent attribute).
    pub fn set(&mut self, id: ModelId, patch: &Patch) -> Result<u64, AbmError> {
        let mut args = Map::new();
        args.insert("patch".into(), serde_json::to_value(patch).map_err(|e| AbmError::Protocol(e.to_string()))?);
        let out = self.model_call(id, "set", args, true)?;
        Ok(out.get("affected").and_then(Value::as_u64).unwrap_or(0))
    }

    /// Reseeds the model's random generators (`random` and numpy's).
    pub(crate) fn reseed(&mut self, id: ModelId, seed: u64) -> Result<(), AbmError> {
        let mut args = Map::new();
        args.insert("seed".into(), seed.into());
        self.model_call(id, "reseed", args, true).map(|_| ())
    }

    /// The model's current state in brief.
    pub fn info(&mut self, id: ModelId) -> Result<ModelInfo, AbmError> {
        let out = self.model_call(id, "info", Map::new(), false)?;
        serde_json::from_value(Value::Object(out)).map_err(|e| AbmError::Protocol(e.to_string()))
    }

    /// Forgets a model (in the worker and here).
    pub fn drop_model(&mut self, id: ModelId) -> Result<(), AbmError> {
        let entry = self.models.remove(&id).ok_or(AbmError::UnknownModel(id.0))?;
        if entry.live && self.proc.is_some() {
            let mut args = Map::new();
            args.insert("handle".into(), id.0.into());
            self.request("drop", args, None)?;
        }
        Ok(())
    }

    /// The handles this side holds.
    pub fn models(&self) -> Vec<ModelId> {
        let mut ids: Vec<ModelId> = self.models.keys().copied().collect();
        ids.sort();
        ids
    }

    /// Stops calls of this worker when `token` is cancelled (until set to `None`).
    pub(crate) fn set_cancel(&mut self, token: Option<CancelToken>) {
        self.cancel = token;
    }

    /// One-shot run for the tree: start (load, restore, or rebuild from the history), apply
    /// patches, reseed, step, take a snapshot, and drop the model again, so that nothing is left
    /// in the worker.
    pub fn advance(&mut self, start: Start<'_>, plan: &Advance) -> Result<Advanced, AbmError> {
        let (id, history) = match start {
            Start::Spec { model, seed } => (self.load(model, seed)?.id, &[][..]),
            Start::Snapshot(s) => (self.restore(s)?, &[][..]),
            Start::Rebuild { model, seed, history } => (self.load(model, seed)?.id, history),
        };
        let result = self.replay(id, history).and_then(|()| self.run_plan(id, plan));
        if self.models.contains_key(&id) {
            // A failed drop (worker died) must not hide the run's own result.
            let _ = self.drop_model(id);
        }
        result
    }

    /// Re-runs recorded advances, discarding their records (only the state they reach matters).
    fn replay(&mut self, id: ModelId, history: &[Advance]) -> Result<(), AbmError> {
        for (i, past) in history.iter().enumerate() {
            let rebuilt = self.prepare(id, past).and_then(|()| self.step(id, past.steps));
            rebuilt.map_err(|e| match e {
                AbmError::Cancelled | AbmError::Timeout(_) => e,
                other => AbmError::BadRequest(format!(
                    "rebuilding the model from its specification failed at recorded advance {} of {}: {other}",
                    i + 1,
                    history.len()
                )),
            })?;
        }
        Ok(())
    }

    /// A plan's patches and reseed.
    fn prepare(&mut self, id: ModelId, plan: &Advance) -> Result<(), AbmError> {
        for p in &plan.patches {
            self.set(id, p)?;
        }
        if let Some(seed) = plan.reseed {
            self.reseed(id, seed)?;
        }
        Ok(())
    }

    fn run_plan(&mut self, id: ModelId, plan: &Advance) -> Result<Advanced, AbmError> {
        self.prepare(id, plan)?;
        let before = self.tracked_now(id)?;
        let report = self.step(id, plan.steps)?;
        let snapshot = self.snapshot(id)?;
        Ok(Advanced { report, snapshot, before })
    }

    /// The tracked variables as they are now (what a `step 0` record would hold).
    fn tracked_now(&mut self, id: ModelId) -> Result<IndexMap<String, Value>, AbmError> {
        let out = self.model_call(id, "collect", Map::new(), false)?;
        field(&out, "values")
    }

    /// Runs one rule hook of a custom scene (`call.hook` of `call.source`) within the hooks'
    /// bounds ([`HOOK_CPU_SECONDS`], [`HOOK_CALL_TIMEOUT`] or the per-call budget if smaller):
    /// what it returned, as JSON (`null` for `None` or a hook the source does not define).
    pub(crate) fn hook(&mut self, call: &HookRequest<'_>) -> Result<Value, AbmError> {
        let mut args = Map::new();
        args.insert("source".into(), call.source.into());
        args.insert("hook".into(), call.hook.into());
        args.insert("state".into(), call.state.clone());
        args.insert("arg".into(), call.arg.cloned().unwrap_or(Value::Null));
        args.insert("seed".into(), call.seed.into());
        args.insert("cpu_seconds".into(), HOOK_CPU_SECONDS.into());
        let timeout = self.config.limits.call_timeout.min(HOOK_CALL_TIMEOUT);
        let mut out = self.request_within("hook", args, None, timeout).map_err(|e| match e {
            AbmError::CpuLimit(_) => AbmError::CpuLimit(HOOK_CPU_SECONDS),
            other => other,
        })?;
        Ok(out.remove("effects").unwrap_or(Value::Null))
    }

    /// Parses a hook source in the worker (it is never run): its top-level functions, or its
    /// syntax error.
    pub(crate) fn hook_check(&mut self, source: &str) -> Result<HookSource, AbmError> {
        let mut args = Map::new();
        args.insert("source".into(), source.into());
        let timeout = self.config.limits.call_timeout.min(HOOK_CALL_TIMEOUT);
        let out = self.request_within("hook_check", args, None, timeout)?;
        if let Some(syntax) = out.get("syntax") {
            return Ok(HookSource::Syntax {
                line: syntax.get("line").and_then(Value::as_u64).unwrap_or(0),
                message: syntax.get("message").and_then(Value::as_str).unwrap_or("").to_string(),
            });
        }
        Ok(HookSource::Defines(field(&out, "defines")?))
    }

    /// Reference timing: a pure-Python loop of `rounds` passes over `objects` objects (ms).
    pub fn bench_python_loop(&mut self, objects: u64, rounds: u64) -> Result<f64, AbmError> {
        let mut args = Map::new();
        args.insert("kind".into(), "python_loop".into());
        args.insert("objects".into(), objects.into());
        args.insert("rounds".into(), rounds.into());
        let out = self.request("bench", args, None)?;
        out.get("ms").and_then(Value::as_f64).ok_or_else(|| AbmError::Protocol("bench answer without ms".into()))
    }

    /// Reference timing: the SIR network model hand-written in Mesa 3 (no specification
    /// layer; Barabási–Albert m=3, 10 initial infections), ms per step.
    pub fn bench_bare_mesa_sir(
        &mut self,
        agents: u64,
        steps: u64,
        seed: u64,
        rates: (f64, f64),
    ) -> Result<f64, AbmError> {
        let mut args = Map::new();
        args.insert("infectionRate".into(), rates.0.into());
        args.insert("recoveryRate".into(), rates.1.into());
        args.insert("kind".into(), "bare_mesa_sir".into());
        args.insert("agents".into(), agents.into());
        args.insert("steps".into(), steps.into());
        args.insert("seed".into(), seed.into());
        let out = self.request("bench", args, None)?;
        out.get("msPerStep")
            .and_then(Value::as_f64)
            .ok_or_else(|| AbmError::Protocol("bench answer without msPerStep".into()))
    }

    // -- internals --

    fn new_id(&mut self) -> ModelId {
        let id = ModelId(self.next_model);
        self.next_model += 1;
        id
    }

    fn load_into(&mut self, id: ModelId, spec: &Value, seed: u64) -> Result<Map<String, Value>, AbmError> {
        let mut args = Map::new();
        args.insert("handle".into(), id.0.into());
        args.insert("model".into(), spec.clone());
        args.insert("seed".into(), seed.into());
        self.request("load", args, Some(id))
    }

    fn restore_into(&mut self, id: ModelId, snapshot: &Snapshot) -> Result<(), AbmError> {
        let mut args = Map::new();
        args.insert("handle".into(), id.0.into());
        args.insert("data".into(), snapshot.to_base64().into());
        self.request("restore", args, Some(id)).map(|_| ())
    }

    /// A call on one model: re-establishes it after a restart if it can, marks it dirty for
    /// mutating calls, and poisoned when the call failed part-way.
    fn model_call(
        &mut self,
        id: ModelId,
        op: &str,
        mut args: Map<String, Value>,
        mutates: bool,
    ) -> Result<Map<String, Value>, AbmError> {
        let entry = self.models.get(&id).ok_or(AbmError::UnknownModel(id.0))?;
        if entry.poisoned {
            return Err(AbmError::Poisoned(id.0));
        }
        if entry.lost {
            return Err(AbmError::Lost(id.0));
        }
        if !entry.live || self.proc.is_none() {
            let checkpoint = entry.checkpoint.clone();
            match checkpoint {
                Checkpoint::Spec { model, seed } => {
                    self.load_into(id, &model, seed)?;
                }
                Checkpoint::Snapshot(s) => self.restore_into(id, &s)?,
            }
            if let Some(e) = self.models.get_mut(&id) {
                e.live = true;
            }
        }
        args.insert("handle".into(), id.0.into());
        if mutates && let Some(e) = self.models.get_mut(&id) {
            e.dirty = true;
        }
        let result = self.request(op, args, Some(id));
        if let Err(err) = &result
            && let Some(e) = self.models.get_mut(&id)
        {
            match err {
                AbmError::ModelCode { .. }
                | AbmError::CpuLimit(_)
                | AbmError::MemoryLimit(_)
                | AbmError::Poisoned(_)
                    if mutates =>
                {
                    e.poisoned = true
                }
                _ => {}
            }
        }
        result
    }

    /// Sends one request and waits for its answer within the per-call budget.
    fn request(
        &mut self,
        op: &str,
        args: Map<String, Value>,
        about: Option<ModelId>,
    ) -> Result<Map<String, Value>, AbmError> {
        let timeout = self.config.limits.call_timeout;
        self.request_within(op, args, about, timeout)
    }

    /// Sends one request and waits for its answer, handling death and timeouts.
    fn request_within(
        &mut self,
        op: &str,
        mut args: Map<String, Value>,
        about: Option<ModelId>,
        timeout: Duration,
    ) -> Result<Map<String, Value>, AbmError> {
        if self.cancel.as_ref().is_some_and(CancelToken::is_cancelled) {
            return Err(AbmError::Cancelled);
        }
        if self.proc.is_none() {
            self.proc = Some(Proc::spawn(&self.config)?);
        }
        self.await_ready()?;
        let rid = self.next_request;
        self.next_request += 1;
        args.insert("id".into(), rid.into());
        args.insert("op".into(), op.into());
        let mut line = Value::Object(args).to_string();
        line.push('\n');
        let proc = self.proc.as_mut().expect("spawned above");
        if let Err(e) = proc.stdin.write_all(line.as_bytes()).and_then(|_| proc.stdin.flush()) {
            let how = self.lose_process();
            return Err(AbmError::WorkerDied(format!("cannot write a request ({e}); {how}")));
        }
        let deadline = Instant::now() + timeout;
        let proc = self.proc.as_ref().expect("still running");
        let answer = match proc.wait_line(deadline, self.cancel.as_ref()) {
            Waited::Line(text) => {
                let v: Value = serde_json::from_str(&text)
                    .map_err(|e| AbmError::Protocol(format!("answer is not JSON ({e}): {}", clip(&text))))?;
                // Requests are strictly one at a time and a timed-out process is replaced, so
                // an answer to another request is a protocol fault.
                if v.get("id").and_then(Value::as_u64) != Some(rid) {
                    return Err(AbmError::Protocol(format!("answer for another request: {}", clip(&text))));
                }
                v
            }
            Waited::Died => {
                let how = self.lose_process();
                return Err(AbmError::WorkerDied(how));
            }
            Waited::TimedOut => {
                self.abandon_call(about);
                return Err(AbmError::Timeout(timeout));
            }
            Waited::Cancelled => {
                self.abandon_call(about);
                return Err(AbmError::Cancelled);
            }
        };
        let Value::Object(mut out) = answer else {
            return Err(AbmError::Protocol("answer is not an object".into()));
        };
        if out.get("ok") == Some(&Value::Bool(true)) {
            out.remove("ok");
            out.remove("id");
            return Ok(out);
        }
        let err = out.remove("error").unwrap_or(Value::Null);
        let kind = err.get("kind").and_then(Value::as_str).unwrap_or("internal");
        let message = err.get("message").and_then(Value::as_str).unwrap_or("no message").to_owned();
        let traceback = err.get("traceback").and_then(Value::as_str).map(str::to_owned);
        let id = about.map(|m| m.0).unwrap_or(0);
        Err(match kind {
            "cpu_limit" => AbmError::CpuLimit(self.config.limits.cpu_seconds_per_call),
            "memory_limit" => {
                AbmError::MemoryLimit(format!("{} MiB address space", self.config.limits.memory_bytes >> 20))
            }
            "model_error" | "spec_error" => AbmError::ModelCode { message, traceback },
            "poisoned" => AbmError::Poisoned(id),
            "unknown_model" => AbmError::UnknownModel(id),
            "bad_request" => AbmError::BadRequest(message),
            _ => AbmError::Protocol(message),
        })
    }

    /// Waits for a new process's `ready` line (its imports done), so that start-up time does not
    /// count against the first call's budget.
    fn await_ready(&mut self) -> Result<(), AbmError> {
        let Some(proc) = self.proc.as_mut() else {
            return Ok(());
        };
        if proc.ready {
            return Ok(());
        }
        let waited = proc.wait_line(Instant::now() + STARTUP_TIMEOUT, self.cancel.as_ref());
        let failure = match waited {
            Waited::Line(text) => {
                let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                if v.get("ready") == Some(&Value::Bool(true)) {
                    proc.ready = true;
                    return Ok(());
                }
                AbmError::Protocol(format!("expected the worker's ready line, got: {}", clip(&text)))
            }
            Waited::Died => AbmError::WorkerDied(format!("while starting: {}", self.describe_death())),
            Waited::TimedOut => AbmError::Spawn(format!("the worker did not start within {STARTUP_TIMEOUT:?}")),
            Waited::Cancelled => AbmError::Cancelled,
        };
        self.lose_process();
        Err(failure)
    }

    /// Kills the process and describes its end (for errors).
    fn describe_death(&mut self) -> String {
        self.proc.take().map(Proc::kill).unwrap_or_default()
    }

    /// Kills the process in the middle of a call (timeout, cancel); the model the call was about
    /// is lost with whatever the call did to it. The replacement process is started at once, so
    /// its imports (seconds) overlap the wait for the next call; should that fail, the next call
    /// tries again and reports why.
    fn abandon_call(&mut self, about: Option<ModelId>) {
        self.lose_process();
        self.proc = Proc::spawn(&self.config).ok();
        if let Some(id) = about
            && let Some(e) = self.models.get_mut(&id)
        {
            e.dirty = true;
            e.lost = true;
        }
    }

    /// Kills the process (if still there) and marks every model as gone from it; dirty ones
    /// become lost. Returns a description of the process's end.
    fn lose_process(&mut self) -> String {
        let how = self.proc.take().map(Proc::kill).unwrap_or_default();
        self.restarts += 1;
        for e in self.models.values_mut() {
            e.live = false;
            if e.dirty {
                e.lost = true;
            }
        }
        how
    }
}

impl Drop for AbmWorker {
    fn drop(&mut self) {
        if let Some(mut p) = self.proc.take() {
            // Closing stdin ends the worker's loop; kill it if it does not go quietly.
            drop(p.stdin);
            let deadline = Instant::now() + Duration::from_millis(500);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = p.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            sandbox::kill_tree(&mut p.child);
        }
    }
}

/// Several workers, for running replicates in parallel.
pub struct WorkerPool {
    workers: Vec<Mutex<AbmWorker>>,
    next: AtomicUsize,
}

impl WorkerPool {
    /// Starts `size` workers (at least one).
    pub fn spawn(config: &WorkerConfig, size: usize) -> Result<Self, AbmError> {
        let workers = (0..size.max(1))
            .map(|_| AbmWorker::spawn(config.clone()).map(Mutex::new))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(WorkerPool { workers, next: AtomicUsize::new(0) })
    }

    pub fn size(&self) -> usize {
        self.workers.len()
    }

    /// How many workers are free right now (not running a call).
    pub fn idle(&self) -> usize {
        self.workers.iter().filter(|w| !matches!(w.try_lock(), Err(TryLockError::WouldBlock))).count()
    }

    /// Runs `f` on a worker: a free one if there is one, else the next in turn (waiting for
    /// it).
    pub fn with_worker<R>(&self, f: impl FnOnce(&mut AbmWorker) -> R) -> R {
        let mut guard = match self.workers.iter().find_map(try_lock) {
            Some(g) => g,
            None => {
                let i = self.next.fetch_add(1, Ordering::Relaxed) % self.workers.len();
                self.workers[i].lock().unwrap_or_else(|p| p.into_inner())
            }
        };
        guard.set_cancel(None);
        f(&mut guard)
    }

    /// Runs `f` on the first worker to be free, unless `cancel` fires first. While `f` runs,
    /// cancelling kills the worker's process (the call answers [`AbmError::Cancelled`]) and the
    /// worker is free again within [`CANCEL_POLL`]; its process restarts with the next call.
    pub fn with_worker_cancellable<R>(
        &self,
        cancel: &CancelToken,
        f: impl FnOnce(&mut AbmWorker) -> Result<R, AbmError>,
    ) -> Result<R, AbmError> {
        let mut guard = loop {
            if cancel.is_cancelled() {
                return Err(AbmError::Cancelled);
            }
            if let Some(g) = self.workers.iter().find_map(try_lock) {
                break g;
            }
            std::thread::sleep(CANCEL_POLL / 5);
        };
        guard.set_cancel(Some(cancel.clone()));
        let out = f(&mut guard);
        guard.set_cancel(None);
        out
    }

    /// Runs one replicate per seed from the same start, spread over the workers in parallel.
    /// From a spec, each replicate is built with its seed; from a snapshot, each is reseeded
    /// after the plan's patches. Results come back in the order of `seeds`.
    pub fn replicates(&self, start: Start<'_>, plan: &Advance, seeds: &[u64]) -> Vec<Result<Advanced, AbmError>> {
        let n = self.workers.len();
        let mut slots: Vec<Option<Result<Advanced, AbmError>>> = vec![None; seeds.len()];
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..n)
                .map(|k| {
                    let worker = &self.workers[k];
                    scope.spawn(move || {
                        let mut guard = worker.lock().unwrap_or_else(|p| p.into_inner());
                        guard.set_cancel(None);
                        let mut out = Vec::new();
                        for (i, &seed) in seeds.iter().enumerate().skip(k).step_by(n) {
                            let (start, plan) = match start {
                                Start::Spec { model, .. } => (Start::Spec { model, seed }, plan.clone()),
                                other => (other, Advance { reseed: Some(seed), ..plan.clone() }),
                            };
                            out.push((i, guard.advance(start, &plan)));
                        }
                        out
                    })
                })
                .collect();
            for h in handles {
                // A panicked thread leaves its slots empty; they are reported below.
                if let Ok(results) = h.join() {
                    for (i, r) in results {
                        slots[i] = Some(r);
                    }
                }
            }
        });
        slots
            .into_iter()
            .map(|s| s.unwrap_or_else(|| Err(AbmError::Protocol("replicate thread panicked".into()))))
            .collect()
    }
}

/// The worker if it is free (a worker whose holder panicked is free too: its state is per call).
fn try_lock(w: &Mutex<AbmWorker>) -> Option<std::sync::MutexGuard<'_, AbmWorker>> {
    match w.try_lock() {
        Ok(g) => Some(g),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

fn field<T: for<'de> Deserialize<'de>>(out: &Map<String, Value>, key: &str) -> Result<T, AbmError> {
    let v = out.get(key).cloned().unwrap_or(Value::Null);
    serde_json::from_value(v).map_err(|e| AbmError::Protocol(format!("field {key}: {e}")))
}

fn clip(text: &str) -> String {
    let mut s: String = text.chars().take(200).collect();
    if s.len() < text.len() {
        s.push('…');
    }
    s
}

/// Names a sourceName would resolve to in a patch (used by callers that accept sourceNames).
#[cfg(test)]
pub(crate) fn patch_for(source_name: &str, value: Value, agent_id: Option<u64>) -> Result<Patch, AbmError> {
    use super::model::SourceRef;
    match SourceRef::parse(source_name) {
        Some(SourceRef::GlobalVariable(name)) => Ok(Patch::GlobalVariable { name, value }),
        Some(SourceRef::EnvironmentAttribute(name)) => Ok(Patch::EnvironmentAttribute { name, value }),
        Some(SourceRef::AgentAttribute { agent, name }) => {
            Ok(Patch::AgentAttribute { agent_type: agent, name, value, agent_id })
        }
        _ => Err(AbmError::BadRequest(format!(
            "'{source_name}' is not the sourceName of a global variable, environment attribute or agent attribute"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lines_are_read_by_bytes() {
        // A 8-byte buffer: lines cross buffer ends, and a long line is cut, its rest skipped.
        let text = b"short\n0123456789abcdef\n\nlast".to_vec();
        let mut r = BufReader::with_capacity(8, &text[..]);
        let mut got = Vec::new();
        while let Some((line, whole)) = bounded_line(&mut r, 10).unwrap() {
            got.push((String::from_utf8(line).unwrap(), whole));
        }
        let want = [("short", true), ("0123456789", false), ("", true), ("last", true)];
        assert_eq!(got, want.map(|(l, w)| (l.to_string(), w)));
    }

    #[test]
    fn patches_have_a_camel_case_wire_form() {
        let p = Patch::AgentAttribute {
            agent_type: "Person".into(),
            name: "status".into(),
            value: json!("I"),
            agent_id: Some(3),
        };
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(
            v,
            json!({"target": "agentAttribute", "agentType": "Person", "name": "status", "value": "I", "agentId": 3})
        );
        assert_eq!(serde_json::from_value::<Patch>(v).unwrap(), p);
        let g: Patch = serde_json::from_value(json!({"target": "globalVariable", "name": "x", "value": 1})).unwrap();
        assert_eq!(g.source_name(), "globalVariable.x");
        assert!(serde_json::from_value::<Patch>(json!({"target": "planet", "name": "x"})).is_err());
    }

    #[test]
    fn patches_are_checked_against_the_declarations() {
        let text = include_str!("../../../assets/abm/sir_network.json");
        let doc = super::super::AbmDocument::parse(text).unwrap();
        let model = doc.model().unwrap();
        let ok = patch_for("globalVariable.infectionRate", json!(0.2), None).unwrap();
        ok.check(model).unwrap();
        let wrong_type = patch_for("globalVariable.infectionRate", json!("high"), None).unwrap();
        let e = wrong_type.check(model).unwrap_err().to_string();
        assert!(e.contains("declared number"), "{e}");
        let unknown = patch_for("globalVariable.nope", json!(1), None).unwrap();
        assert!(unknown.check(model).unwrap_err().to_string().contains("nope"));
        let agent = patch_for("agent.Person.agentAttribute.status", json!("I"), Some(1)).unwrap();
        agent.check(model).unwrap();
        let bad_type = patch_for("agent.Robot.agentAttribute.status", json!("I"), None).unwrap();
        assert!(bad_type.check(model).unwrap_err().to_string().contains("Robot"));
        let int = patch_for("globalVariable.initialInfected", json!(2.5), None).unwrap();
        assert!(int.check(model).is_err());
        assert!(patch_for("globalFunction.countStates", json!(1), None).is_err());
    }

    #[test]
    fn snapshots_serialize_as_base64() {
        let s = Snapshot::from_bytes(vec![0, 1, 2, 250]);
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v, json!("AAEC+g=="));
        assert_eq!(serde_json::from_value::<Snapshot>(v).unwrap(), s);
        assert!(serde_json::from_value::<Snapshot>(json!("%%")).is_err());
    }
}
