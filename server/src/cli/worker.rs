//! `simtree worker`: a process that takes runs from a PostgreSQL database's job queue
//! ([`crate::fleet::run_worker`]), and the queue's flags it shares with `serve`.

use super::*;

/// The options of `simtree worker`.
#[derive(Debug, clap::Args)]
pub(crate) struct WorkerArgs {
    /// The PostgreSQL database the server queues runs in.
    #[arg(long, env = "SIMTREE_DATABASE_URL", hide_env_values = true)]
    database_url: String,
    /// Runs at once (default: the machine's cores).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1024))]
    concurrency: Option<u64>,
    /// LLM settings file (TOML or JSON) layered over the LLM_* environment variables.
    #[arg(long)]
    llm_config: Option<PathBuf>,
    #[command(flatten)]
    queue: QueueArgs,
}

/// How runs go through the job queue (`serve --jobs`, `worker`).
#[derive(Debug, clap::Args)]
pub(crate) struct QueueArgs {
    /// Seconds a claimed run may go without a heartbeat before another process takes it over
    /// (heartbeats come every sixth of that).
    #[arg(long, default_value_t = crate::store::jobs::DEFAULT_LAPSE.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    job_lapse_secs: u64,
    /// Times a run is tried before it is given up and its node fails (a run whose process
    /// dies every time is not retried forever). The server's value applies to the runs it queues.
    #[arg(long, default_value_t = crate::store::jobs::DEFAULT_MAX_ATTEMPTS,
          value_parser = clap::value_parser!(u64).range(1..=100))]
    job_attempts: u64,
    /// Agent-based-model runs this process takes from the queue at once: the Python/Mesa
    /// workers of its pool (default: the machine's cores; 0: it takes none). A server's own
    /// worker takes them only while no `simtree worker` offers any.
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=256))]
    abm_workers: Option<u64>,
}

impl QueueArgs {
    pub(super) fn config(&self, url: &str) -> crate::workbench::jobs::JobsConfig {
        crate::workbench::jobs::JobsConfig {
            url: url.to_string(),
            lapse: std::time::Duration::from_secs(self.job_lapse_secs),
            max_attempts: self.job_attempts,
            abm_workers: self
                .abm_workers
                .map_or_else(|| std::thread::available_parallelism().map_or(1, usize::from), |n| n as usize),
            nearby: Default::default(),
        }
    }
}

/// `simtree worker`: runs jobs until SIGTERM or ctrl-c.
pub(super) fn worker(a: WorkerArgs, g: &Ground) -> Result<(), String> {
    let WorkerArgs { database_url, concurrency, llm_config, queue } = a;
    let wb = crate::fleet::worker_bench(&g.library, &g.assets, g.sandbox, llm_config.as_deref(), &database_url)
        .map_err(|e| e.to_string())?;
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let concurrency = concurrency.map_or(cores, |c| c as usize);
    let rt = runtime()?;
    eprintln!("simtree: worker taking runs from the job queue, {concurrency} at a time");
    rt.block_on(crate::fleet::run_worker(wb, queue.config(&database_url), concurrency)).map_err(|e| e.to_string())
}
