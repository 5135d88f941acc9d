//! Where runs get their answers, decided in one place for the server, the CLI and sweeps.
//!
//! A [`Backend`] is the offline mock or real providers (the `LLM_*` environment plus a settings
//! file's per-scenario and per-agent overrides). [`run_ctx`] turns it into what one run talks to
//! — the chat client, the trading tool model and the ABM workers — with the same rules whoever
//! asks: recorded calls are replayed, a tree created with an offline player (`"llm"` on the create
//! route) stays offline on any backend, and real providers are metered into the run's ledger and
//! charged to its budget. The offline players are served here too ([`OfflineClient`]): the mock
//! is the LLM layer's, the scripted player the engine's, and this module is the lowest one that
//! may name both.

use std::path::Path;
use std::sync::Arc;

use crate::abm::worker::WorkerPool;
use crate::engine::scripted;
use crate::llm::budget::TreeBudget;
use crate::llm::chat::{ChatRequest, ChatResponse, Message, Usage, Watch};
use crate::llm::coalesce::Coalescer;
use crate::llm::config::WarmUpMode;
use crate::llm::ledger::{Ledger, MeteredClient, ReplayClient, RoutingClient};
use crate::llm::record::LlmRecord;
use crate::llm::warmup::WarmUp;
use crate::llm::{
    BoxFuture, ChatProvider, ConfigError, Dialect, LlmClient, LlmConfig, LlmError, LlmSettings, LlmState, Offline,
    ProviderPool, mock,
};
use crate::sim::{RunCtx, Sim};
use crate::trading::agents::MockToolModel;
use crate::trading::provider::{ProviderToolModel, ReplayToolModel};

/// Where runs get their answers: the offline mock, or real providers (metered and recorded).
#[derive(Clone)]
pub enum Backend {
    Mock,
    Provider(Arc<Providers>),
}

impl Backend {
    /// The fan-out of runs from the node keyed `affinity` ended: what providers kept for it
    /// (explicit caches) goes with it.
    pub(crate) async fn end_fan_out(&self, affinity: u64) {
        if let Backend::Provider(providers) = self {
            providers.end_fan_out(affinity).await;
        }
    }
}

/// Why a backend could not be built or could not serve a run; the message names the setting.
#[derive(Debug, thiserror::Error)]
#[error("LLM settings: {0}")]
pub struct BackendError(pub String);

impl From<ConfigError> for BackendError {
    fn from(e: ConfigError) -> Self {
        BackendError(e.to_string())
    }
}

impl Backend {
    /// The backend from the `LLM_*` environment (default: the offline mock) and an optional
    /// settings file with per-scenario and per-agent overrides; `dialect` replaces the
    /// environment's.
    pub(crate) fn from_settings(file: Option<&Path>, dialect: Option<Dialect>) -> Result<Backend, BackendError> {
        let mut base = LlmConfig::from_env()?;
        if let Some(d) = dialect.filter(|d| *d != base.dialect) {
            // The other dialect's default model means nothing to this one.
            if base.model == base.dialect.default_model() {
                base.model = d.default_model().to_string();
            }
            base.dialect = d;
        }
        let settings = match file {
            Some(path) => LlmSettings::from_path(path).map_err(|e| BackendError(format!("{}: {e}", path.display())))?,
            None => LlmSettings::default(),
        };
        let env = |name: &str| std::env::var(name).ok();
        let default = settings.resolve(&base, None, None, &env)?;
        if default.dialect == Dialect::Mock && settings.scenarios.is_empty() {
            return Ok(Backend::Mock);
        }
        eprintln!("simtree: LLM backend {}", default.label());
        Ok(Backend::Provider(Arc::new(Providers::new(base, settings)?)))
    }

    /// The recorded calls a re-run of an advance must replay, or `None` when it can run as it is:
    /// a run without recorded calls on the mock, or on an offline player on any backend, made no
    /// provider calls to begin with.
    pub(crate) fn replay_of(&self, sim: &Sim, records: Vec<LlmRecord>) -> Option<Vec<LlmRecord>> {
        match self {
            _ if records.is_empty() && offline_policy(sim).is_some() => None,
            Backend::Mock if records.is_empty() => None,
            _ => Some(records),
        }
    }
}

impl Backend {
    /// `dialect:model` of what answers `agent` of a run of `sim` (`mock` or `scripted` when
    /// offline), for the calls trace; never a key or a URL.
    pub(crate) fn label(&self, scenario: &str, sim: &Sim, agent: Option<&str>) -> String {
        match (offline_policy(sim), self) {
            (Some(Offline::Scripted), _) => "scripted".into(),
            (Some(Offline::Mock), _) | (None, Backend::Mock) => "mock".into(),
            (None, Backend::Provider(ps)) => {
                let env = |name: &str| std::env::var(name).ok();
                ps.settings
                    .resolve(&ps.base, Some(scenario), agent, &env)
                    .map_or_else(|e| format!("unresolved ({e})"), |c| c.label())
            }
        }
    }
}

/// The offline player a social simulator's tree chose at creation, if any.
fn offline_policy(sim: &Sim) -> Option<Offline> {
    match sim {
        Sim::Social(s) => s.world().llm.offline,
        _ => None,
    }
}

/// What one run needs besides its simulator.
pub(crate) struct RunRequest<'a> {
    /// The scenario's name (settings-file overrides are per scenario).
    pub(crate) scenario: &'a str,
    pub(crate) sim: &'a Sim,
    /// Calls recorded by an earlier run of the same advance, to replay instead of calling out.
    pub(crate) replay: Option<Vec<LlmRecord>>,
    /// The tree's token budget, charged by real providers.
    pub(crate) budget: Option<Arc<TreeBudget>>,
    pub(crate) abm: Option<Arc<WorkerPool>>,
    /// Where replies stream while someone watches the run (real providers that stream, and the
    /// offline players, which show each reply in a few pieces; replays make no call and do not
    /// stream).
    pub(crate) watch: Watch,
}

/// What one run talks to, and the ledger its real calls are recorded in.
pub(crate) fn run_ctx(backend: &Backend, req: RunRequest<'_>) -> Result<(RunCtx, Arc<Ledger>), BackendError> {
    run_ctx_with(backend, req, Arc::new(Ledger::default()))
}

/// [`run_ctx`] recording in `ledger` (a job's: it replays what an interrupted attempt recorded,
/// then goes live, recording each call as it returns; see [`Ledger::resuming`]).
pub(crate) fn run_ctx_with(
    backend: &Backend,
    req: RunRequest<'_>,
    ledger: Arc<Ledger>,
) -> Result<(RunCtx, Arc<Ledger>), BackendError> {
    let watch = req.watch.clone();
    let offline = |default: Offline| RunCtx {
        // The offline players' replies are shown live too (in pieces) while someone watches.
        llm: Arc::new(mock::LiveReplies::new(OfflineClient(default), watch.clone())),
        tools: Arc::new(MockToolModel),
        abm: req.abm.clone(),
    };
    let ctx = match (req.replay, backend) {
        (Some(records), _) => RunCtx {
            llm: Arc::new(ReplayClient::new(&records)),
            tools: Arc::new(ReplayToolModel::new(&records)),
            abm: req.abm.clone(),
        },
        (None, Backend::Mock) => offline(Offline::Mock),
        // A tree created with an offline player stays offline on any backend.
        (None, Backend::Provider(_)) if offline_policy(req.sim).is_some() => offline(Offline::Scripted),
        (None, Backend::Provider(ps)) => ps.run_ctx(req.scenario, req.sim, &ledger, req.budget, req.abm, req.watch)?,
    };
    Ok((ctx, ledger))
}

/// The offline players as one client: the policy the simulator's tree chose
/// ([`LlmState::offline`]), else `self.0`. Requests with a response schema or tools (trading,
/// ABM generation) get the mock's answers under either player, so those kinds behave the same.
#[derive(Clone, Copy, Debug)]
pub struct OfflineClient(pub Offline);

impl OfflineClient {
    fn reply(&self, messages: &[Message], state: &mut LlmState) -> String {
        match state.offline.unwrap_or(self.0) {
            Offline::Mock => mock::reply(messages, state),
            Offline::Scripted => scripted::reply(messages, state),
        }
    }
}

impl LlmClient for OfflineClient {
    fn chat<'a>(&'a self, messages: &'a [Message], state: &'a mut LlmState) -> BoxFuture<'a, Result<String, LlmError>> {
        let reply = self.reply(messages, state);
        Box::pin(async move { Ok(reply) })
    }
}

impl ChatProvider for OfflineClient {
    fn dialect(&self) -> Dialect {
        match self.0 {
            Offline::Mock => Dialect::Mock,
            Offline::Scripted => Dialect::Scripted,
        }
    }

    fn label(&self) -> String {
        let name = self.dialect().as_str();
        format!("{name}:{name}")
    }

    fn chat<'a>(
        &'a self,
        request: &'a ChatRequest,
        state: &'a mut LlmState,
    ) -> BoxFuture<'a, Result<ChatResponse, LlmError>> {
        let plain = request.response_schema.is_none() && request.tools.is_empty();
        let response = if plain && state.offline.unwrap_or(self.0) == Offline::Scripted {
            let text = self.reply(&request.messages, state);
            let words = |s: &str| s.split_whitespace().count() as u64;
            Ok(ChatResponse {
                usage: Usage {
                    prompt_tokens: request.messages.iter().map(|m| words(&m.content)).sum(),
                    completion_tokens: words(&text),
                    cached_tokens: 0,
                    cache_write_tokens: 0,
                },
                text,
                finish_reason: Some("stop".into()),
                ..ChatResponse::default()
            })
        } else {
            mock::respond_to(request, state)
        };
        Box::pin(async move { response })
    }
}

/// Real providers: the server's default configuration with the settings file's per-scenario and
/// per-agent overrides; everything aimed at one endpoint shares one pool gate.
pub struct Providers {
    base: LlmConfig,
    settings: LlmSettings,
    pub(crate) pool: ProviderPool,
    /// The one scripted player every `scripted` setting resolves to (so agents that share it
    /// are not routed apart).
    scripted: Arc<dyn ChatProvider>,
    /// Where identical calls of runs in flight at once meet (`llm::coalesce`).
    coalescer: Arc<Coalescer>,
    /// Where sibling runs' first calls wait for the first of them (`llm::warmup`).
    warm_up: Arc<WarmUp>,
}

impl Providers {
    /// Checks that the default and every override in the settings resolve to a usable provider.
    pub(crate) fn new(base: LlmConfig, settings: LlmSettings) -> Result<Providers, BackendError> {
        let p = Providers {
            base,
            settings,
            pool: ProviderPool::new(),
            scripted: Arc::new(OfflineClient(Offline::Scripted)),
            coalescer: Arc::default(),
            warm_up: Arc::default(),
        };
        p.resolve(None, None)?;
        for (scenario, sec) in &p.settings.scenarios {
            p.resolve(Some(scenario), None)?;
            for agent in sec.agents.keys() {
                p.resolve(Some(scenario), Some(agent))?;
            }
        }
        Ok(p)
    }

    /// What a run of `scenario` talks to: the scenario's provider, metered into `ledger` and
    /// charged to `budget`, with per-agent overrides routed by agent name.
    fn run_ctx(
        &self,
        scenario: &str,
        sim: &Sim,
        ledger: &Arc<Ledger>,
        budget: Option<Arc<TreeBudget>>,
        abm: Option<Arc<WorkerPool>>,
        watch: Watch,
    ) -> Result<RunCtx, BackendError> {
        let default = self.resolve(Some(scenario), None)?;
        let config = self.config(Some(scenario), None)?;
        let coalesce = config.coalesce.then(|| self.coalescer.clone());
        let warm_up =
            (config.warm_up != WarmUpMode::Off).then(|| (self.warm_up.clone(), config.warm_up == WarmUpMode::Serial));
        let metered = |provider: Arc<dyn ChatProvider>| -> Arc<dyn LlmClient> {
            Arc::new(MeteredClient {
                provider,
                ledger: ledger.clone(),
                budget: budget.clone(),
                watch: watch.clone(),
                coalesce: coalesce.clone(),
                warm_up: warm_up.clone(),
            })
        };
        let agents = match sim {
            Sim::Social(s) => s.world().names(),
            _ => Vec::new(),
        };
        let mut by_agent = Vec::new();
        for name in agents {
            let p = self.resolve(Some(scenario), Some(&name))?;
            if !Arc::ptr_eq(&p, &default) {
                by_agent.push((name, metered(p)));
            }
        }
        let llm = if by_agent.is_empty() {
            metered(default.clone())
        } else {
            Arc::new(RoutingClient { default: metered(default.clone()), by_agent })
        };
        let tools = Arc::new(ProviderToolModel { provider: default, ledger: ledger.clone(), budget, watch });
        Ok(RunCtx { llm, tools, abm })
    }

    /// The provider for a scenario and agent (either optional). The scripted player is served
    /// here, not by the pool: it is the engine's.
    pub(crate) fn resolve(
        &self,
        scenario: Option<&str>,
        agent: Option<&str>,
    ) -> Result<Arc<dyn ChatProvider>, BackendError> {
        let config = self.config(scenario, agent)?;
        if config.dialect == Dialect::Scripted {
            config.validate()?;
            return Ok(self.scripted.clone());
        }
        Ok(self.pool.get(&config)?)
    }

    /// Ends the fan-out keyed `affinity`: explicit caches created for it are deleted.
    pub(crate) async fn end_fan_out(&self, affinity: u64) {
        self.pool.end_fan_out(affinity).await;
    }

    /// The settings for a scenario and agent (either optional).
    fn config(&self, scenario: Option<&str>, agent: Option<&str>) -> Result<LlmConfig, BackendError> {
        let env = |name: &str| std::env::var(name).ok();
        Ok(self.settings.resolve(&self.base, scenario, agent, &env)?)
    }
}
