//! The `simtree` command line: `run` a scenario and print its event log, `scenarios` to list them.

use std::io::Write;
use std::path::PathBuf;

use clap::{Parser, Subcommand};
use serde_json::Value;

use crate::engine::event::{Event, EventType};
use std::sync::Arc;

use crate::abm::worker::{WorkerConfig, WorkerPool};
use crate::http::{AppState, Backend, Limits};
use crate::llm::Dialect;
use crate::scenario::ScenarioLibrary;
use crate::sim::{RunCtx, ScenarioEntry, Sim};
use crate::trading::data::MarketData;
use simtree_shared::SimKind;

#[derive(Debug, Parser)]
#[command(name = "simtree", version, about = "Branching timelines for multi-agent simulations")]
pub struct Cli {
    /// Folder with scenarios/ (default: $SIMTREE_ASSETS, ./assets, or the checkout's assets).
    #[arg(long, global = true)]
    pub assets: Option<PathBuf>,
    /// Run agent-based model code without the bubblewrap sandbox, with your user's access to
    /// files, network and environment (for machines where bwrap cannot start).
    #[arg(long, global = true)]
    pub unsafe_abm: bool,
    #[command(subcommand)]
    pub command: Command,
}

// Parsed once per process: the size of the `serve` variant costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a scenario headless and print its event log (the LLM as `serve` configures it).
    Run(RunArgs),
    /// Run a sweep file: every cell of its grid × replicates (paired seeds), in parallel; print
    /// mean, sd and n of each metric per cell.
    Sweep {
        /// The sweep file (JSON: scenario, turns, replicates, seed, axes, metrics, prefix).
        file: PathBuf,
        /// One JSON line per cell instead of a table.
        #[arg(long)]
        json: bool,
        /// Also write one CSV row per run to this file.
        #[arg(long)]
        csv: Option<PathBuf>,
        /// Runs at once (default: the machine's cores).
        #[arg(long)]
        parallel: Option<usize>,
        /// The LLM dialect, overriding LLM_DIALECT (social and trading scenarios).
        #[arg(long)]
        llm: Option<Dialect>,
        /// LLM settings file (TOML or JSON) layered over the LLM_* environment variables.
        #[arg(long)]
        llm_config: Option<PathBuf>,
    },
    /// List the shipped scenarios (no subcommand), or list, save and remove the scenarios saved
    /// in a data folder's library (what `/api/scenarios` serves; not while a server uses the
    /// same data folder).
    Scenarios {
        #[command(subcommand)]
        command: Option<ScenariosCommand>,
    },
    /// Agent-based models in sd-ai's abm-quant format.
    Abm {
        #[command(subcommand)]
        command: AbmCommand,
    },
    /// Check or repair a data folder (the server must be stopped), or import a market dataset
    /// into it (what `GET /api/datasets` lists).
    Data {
        #[command(subcommand)]
        command: DataCommand,
    },
    /// Trading episodes on real market data.
    Trade {
        #[command(subcommand)]
        command: TradeCommand,
    },
    /// Serve the HTTP/WebSocket API (DevUI-compatible) with the offline mock LLM.
    Serve {
        /// Address to listen on (port 0 picks a free port; the bound address is printed).
        #[arg(long, default_value = "127.0.0.1:8090")]
        addr: std::net::SocketAddr,
        /// Largest accepted request body in bytes.
        #[arg(long, default_value_t = Limits::default().max_body_bytes)]
        max_body_bytes: usize,
        /// Most turns one request may run.
        #[arg(long, default_value_t = Limits::default().max_turns_per_request)]
        max_turns: u64,
        /// Most children one fan-out request may create.
        #[arg(long, default_value_t = Limits::default().max_children_per_request)]
        max_children: u64,
        /// Most trees the server holds at once.
        #[arg(long, default_value_t = Limits::default().max_trees)]
        max_trees: usize,
        /// Messages a tree socket's watcher may fall behind before it gets a resync (a node socket
        /// never resyncs: it reads what its watcher missed from the node's log).
        #[arg(long, default_value_t = Limits::default().ws_queue)]
        ws_queue: usize,
        /// The web UI's build folder (default: $SIMTREE_STATIC or the checkout's frontend/dist).
        #[arg(long)]
        static_dir: Option<PathBuf>,
        /// LLM settings file (TOML or JSON) layered over the LLM_* environment variables.
        #[arg(long)]
        llm_config: Option<PathBuf>,
        /// Default token budget of every new tree (real providers only; default unlimited).
        #[arg(long)]
        token_budget: Option<u64>,
        /// Provider calls every tree may make (real providers only; default unlimited).
        #[arg(long)]
        call_budget: Option<u64>,
        /// US dollars every tree may spend on priced models, never exceeded (default unlimited;
        /// see docs/providers.md).
        #[arg(long, value_parser = money_arg)]
        money_budget: Option<f64>,
        /// A price table (JSON: model → {prompt, completion} dollars per million tokens) added
        /// to the defaults for well-known models.
        #[arg(long, env = "SIMTREE_PRICES")]
        prices: Option<PathBuf>,
        /// Access token every route but /health requires (Bearer header, cookie or ?token=).
        /// Required when binding a non-loopback address.
        #[arg(long, env = "SIMTREE_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// Another origin (scheme://host[:port]) allowed to call the API and open its sockets,
        /// e.g. a dev server of another client. Repeatable. The server's own origin always is.
        #[arg(long = "allow-origin", value_name = "URL")]
        allow_origin: Vec<String>,
        /// Most nodes one tree may hold.
        #[arg(long, default_value_t = Limits::default().max_nodes_per_tree)]
        max_nodes_per_tree: usize,
        /// Resident memory (MiB) above which new runs are refused and running ones stopped
        /// (0: no budget).
        #[arg(long, default_value_t = Limits::default().max_memory_bytes >> 20)]
        max_memory_mb: u64,
        /// Connections held at once; to make room, the oldest silent one is closed, then a slow
        /// body of the address with the most; one remote address holds at most a quarter, and
        /// /health and /ready are answered beyond it.
        #[arg(long, default_value_t = Limits::default().max_connections)]
        max_connections: usize,
        /// WebSockets open at once; an upgrade beyond it gets 503.
        #[arg(long, default_value_t = Limits::default().max_websockets)]
        max_websockets: usize,
        /// Seconds a WebSocket client may send nothing, pongs included, before it is closed (1001,
        /// saying where to resume); a client that reads is never closed for it.
        #[arg(long, default_value_t = Limits::default().ws_idle.as_secs(), value_parser = clap::value_parser!(u64).range(3..=86_400))]
        ws_idle_secs: u64,
        /// Seconds the runs in flight may take to finish once the server is asked to stop
        /// (SIGTERM, Ctrl-C); the rest are then cancelled and stored as cancelled.
        #[arg(long, env = "SIMTREE_SHUTDOWN_GRACE_SECS",
              default_value_t = crate::http::DEFAULT_SHUTDOWN_GRACE.as_secs(),
              value_parser = clap::value_parser!(u64).range(0..=3600))]
        shutdown_grace_secs: u64,
        /// PostgreSQL: the base URL the other servers on the database reach this one at when it
        /// leads (e.g. http://10.0.0.5:8090); default http://<the bound address>. Required when
        /// binding an unspecified address (0.0.0.0, ::).
        #[arg(long, env = "SIMTREE_ADVERTISE", value_name = "URL")]
        advertise: Option<String>,
        #[command(flatten)]
        storage: StorageArgs,
        #[command(flatten)]
        jobs: ServeJobs,
    },
    /// Take runs queued by `serve --jobs` on a PostgreSQL database and run them (no HTTP).
    /// SIGTERM or ctrl-c hands its unfinished runs back to the queue.
    Worker {
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
    },
}

/// How runs go through the job queue (`serve --jobs`, `worker`).
#[derive(Debug, clap::Args)]
pub struct QueueArgs {
    /// Seconds a claimed run may go without a heartbeat before another process takes it over
    /// (heartbeats come every sixth of that).
    #[arg(long, default_value_t = crate::store::jobs::DEFAULT_LAPSE.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub job_lapse_secs: u64,
    /// Times a run is tried before it is given up and its node fails (a run whose process
    /// dies every time is not retried forever). The server's value applies to the runs it queues.
    #[arg(long, default_value_t = crate::store::jobs::DEFAULT_MAX_ATTEMPTS,
          value_parser = clap::value_parser!(u64).range(1..=100))]
    pub job_attempts: u64,
}

impl QueueArgs {
    fn config(&self, url: &str) -> crate::workbench::jobs::JobsConfig {
        crate::workbench::jobs::JobsConfig {
            url: url.to_string(),
            lapse: std::time::Duration::from_secs(self.job_lapse_secs),
            max_attempts: self.job_attempts,
        }
    }
}

/// `serve`'s job queue flags.
#[derive(Debug, clap::Args)]
pub struct ServeJobs {
    /// PostgreSQL: send runs through the job queue, where `simtree worker` processes (and this
    /// server, unless --no-worker) take them. The default with --database-url (the flag stays for
    /// scripts that name it); with SQLite every run stays in this process.
    #[arg(long, requires = "database_url", conflicts_with = "no_jobs")]
    pub jobs: bool,
    /// PostgreSQL: keep every run in this process, without the job queue (as with SQLite).
    #[arg(long)]
    pub no_jobs: bool,
    /// PostgreSQL: run no jobs in this process (only `simtree worker` processes do).
    #[arg(long, requires = "database_url", conflicts_with = "no_jobs")]
    pub no_worker: bool,
    #[command(flatten)]
    pub queue: QueueArgs,
}

/// Where `serve` keeps its trees.
#[derive(Debug, clap::Args)]
pub struct StorageArgs {
    /// Folder of the embedded database (default: $SIMTREE_DATA, else the platform data folder,
    /// e.g. ~/.local/share/simtree).
    #[arg(long, env = "SIMTREE_DATA")]
    pub data: Option<PathBuf>,
    /// Keep trees in memory only: they die with the process.
    #[arg(long, conflicts_with_all = ["data", "database_url"])]
    pub ephemeral: bool,
    /// A PostgreSQL database instead of the embedded one (postgres://user@host:port/db).
    #[arg(long, env = "SIMTREE_DATABASE_URL", hide_env_values = true, conflicts_with = "data")]
    pub database_url: Option<String>,
    /// Memory (MiB) for the live simulators and logs of stored trees; others are read back from
    /// the store when used (0: no limit).
    #[arg(long, default_value_t = Limits::default().cache_bytes >> 20)]
    pub cache_mb: usize,
    /// Largest import in bytes (imports stream into the store; `--max-body-bytes` does not apply).
    #[arg(long, default_value_t = Limits::default().max_import_bytes)]
    pub max_import_bytes: u64,
    /// PostgreSQL: length of the server lease in seconds (one server per database). It is
    /// renewed every sixth of that; a server that died without releasing it holds the database
    /// until it lapses.
    #[arg(long, env = "SIMTREE_LEASE_SECS", default_value_t = crate::store::lease::DEFAULT_LEASE.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub lease_secs: u64,
}

impl StorageArgs {
    /// Opens the store these flags name (`None` for `--ephemeral`).
    pub fn open(&self) -> Result<Option<crate::store::Store>, String> {
        if self.ephemeral {
            return Ok(None);
        }
        if let Some(url) = &self.database_url {
            let lease = std::time::Duration::from_secs(self.lease_secs);
            return crate::store::Store::open_postgres_with(url, Some(lease))
                .map(Some)
                .map_err(|e| format!("cannot open the PostgreSQL database: {e}"));
        }
        let dir = match &self.data {
            Some(d) => d.clone(),
            None => default_data_dir()?,
        };
        crate::store::Store::open_sqlite(&dir)
            .map(Some)
            .map_err(|e| format!("cannot open the data folder {}: {e}", dir.display()))
    }
}

/// `$XDG_DATA_HOME/simtree`, else `~/.local/share/simtree` (`%APPDATA%` and `~/Library/Application
/// Support` on other systems).
fn default_data_dir() -> Result<PathBuf, String> {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    let base = if cfg!(target_os = "windows") {
        env("APPDATA")
    } else if cfg!(target_os = "macos") {
        env("HOME").map(|h| h.join("Library/Application Support"))
    } else {
        env("XDG_DATA_HOME").or_else(|| env("HOME").map(|h| h.join(".local/share")))
    };
    base.map(|b| b.join("simtree"))
        .ok_or_else(|| "no data folder: set --data, SIMTREE_DATA or HOME (or use --ephemeral)".to_string())
}

#[derive(Debug, Subcommand)]
pub enum AbmCommand {
    /// Check a model file: errors and warnings with their JSON paths (exit 1 on errors).
    Validate { file: PathBuf },
    /// Print the LLM response schema in one provider's wrapping.
    Schema {
        #[arg(long)]
        provider: String,
    },
    /// Run a model on the Python/Mesa worker and print the tracked variables per step.
    Run {
        file: PathBuf,
        #[arg(long, default_value_t = 100)]
        steps: u64,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// JSON lines instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Create the worker's Python venv (.venv-abm with Mesa) when missing.
    Setup,
}

#[derive(Debug, Subcommand)]
pub enum ScenariosCommand {
    /// Every scenario: the shipped ones, then the ones saved in the data folder (with their
    /// latest version).
    List {
        #[command(flatten)]
        storage: StorageArgs,
    },
    /// Check a scenario document (any kind `simtree run --scenario-file` takes) and save it as
    /// NAME: version 1 of a new scenario, or the next version of a saved one. The checks and
    /// messages are `POST /api/scenarios`'s and `PUT /api/scenarios/NAME`'s.
    Save {
        name: String,
        file: PathBuf,
        #[command(flatten)]
        storage: StorageArgs,
    },
    /// Remove a saved scenario, every version (trees made from it keep their copy).
    Rm {
        name: String,
        #[command(flatten)]
        storage: StorageArgs,
    },
}

#[derive(Debug, Subcommand)]
pub enum DataCommand {
    /// Verify every stored row of a data folder: journal, database pages, each tree's nodes,
    /// states, chunks and logs. Prints one line per problem; exit 1 when there is one.
    Check {
        #[command(flatten)]
        at: DataAt,
    },
    /// Apply what a damaged journal holds intact (the groups before the damage) and set the
    /// journal aside, renamed, so the server starts again. Damaged rows are left to `check`.
    /// (PostgreSQL has no journal: nothing to apply.)
    Repair {
        #[command(flatten)]
        at: DataAt,
    },
    /// Check a CSV (`date,ticker,open,high,low,close,volume[,adj_close]`) and keep it in the
    /// store as dataset NAME, as `POST /api/datasets?name=NAME` does (not while a server uses
    /// the same data folder).
    Import {
        name: String,
        file: PathBuf,
        #[command(flatten)]
        storage: StorageArgs,
    },
}

/// The store `simtree data check|repair` looks at.
#[derive(Debug, clap::Args)]
pub struct DataAt {
    /// The data folder (default: $SIMTREE_DATA, else the platform data folder).
    #[arg(long, env = "SIMTREE_DATA")]
    data: Option<PathBuf>,
    /// A PostgreSQL database instead of a data folder.
    #[arg(long, env = "SIMTREE_DATABASE_URL", hide_env_values = true, conflicts_with = "data")]
    database_url: Option<String>,
}

fn data(command: DataCommand) -> Result<(), String> {
    let folder = |d: Option<PathBuf>| d.map_or_else(default_data_dir, Ok);
    match command {
        DataCommand::Check { at } => {
            let (place, report) = match at.database_url {
                Some(url) => (
                    "postgresql".to_string(),
                    crate::store::check::check_postgres(&url).map_err(|e| e.to_string())?,
                ),
                None => {
                    let dir = folder(at.data)?;
                    (
                        dir.display().to_string(),
                        crate::store::check::check(&dir).map_err(|e| e.to_string())?,
                    )
                }
            };
            for p in &report.problems {
                println!("{p}");
            }
            let summary = format!(
                "{place}: {} tree(s), {} node(s), {} journal group(s) to apply",
                report.trees, report.nodes, report.pending
            );
            match report.problems.len() {
                0 => {
                    println!("{summary}: no problems");
                    Ok(())
                }
                n => Err(format!("{summary}: {n} problem(s)")),
            }
        }
        DataCommand::Repair { at } => {
            let done = match at.database_url {
                Some(url) => crate::store::check::repair_postgres(&url).map_err(|e| e.to_string())?,
                None => crate::store::check::repair(&folder(at.data)?).map_err(|e| e.to_string())?,
            };
            println!("{done}");
            Ok(())
        }
        DataCommand::Import { name, file, storage } => data_import(name, file, storage),
    }
}

#[derive(Debug, Subcommand)]
pub enum TradeCommand {
    /// Run one episode with a baseline or the (mock) LLM agent; print metrics and write the
    /// experiment folder (`config.json`, `episode_log.jsonl`, `trade_history.json`).
    Run(crate::trading::cli::TradeRunArgs),
}

/// Runs the CLI; returns the process exit code.
pub fn main_with(cli: Cli) -> i32 {
    match run(cli) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("simtree: {e}");
            1
        }
    }
}

fn run(cli: Cli) -> Result<(), String> {
    let assets = match cli.assets {
        Some(dir) => dir,
        None => crate::embedded::assets_dir().map_err(|e| e.to_string())?,
    };
    let sandbox = crate::abm::Sandbox::from_unsafe_flag(cli.unsafe_abm);
    if let Command::Trade {
        command: TradeCommand::Run(args),
    } = cli.command
    {
        return crate::trading::cli::trade_run(args).map(|out| print!("{out}"));
    }
    if let Command::Abm { command } = cli.command {
        return abm(command, &assets, sandbox);
    }
    if let Command::Data { command } = cli.command {
        return data(command);
    }
    let library = ScenarioLibrary::load_assets(&assets).map_err(|e| e.to_string())?;
    match cli.command {
        Command::Trade { .. } | Command::Abm { .. } | Command::Data { .. } => Ok(()),
        Command::Scenarios { command: Some(command) } => scenarios(command, library, &assets),
        Command::Scenarios { command: None } => {
            for e in ScenarioEntry::all(&library) {
                let s = e.summary();
                // A social scenario shows its scene's name; the other kinds their kind.
                let what = match e {
                    ScenarioEntry::Social(social) => social.scene.name.clone(),
                    _ => s.kind.as_str().to_string(),
                };
                println!("{:<22} {:<12} {}", s.id, what, s.title);
            }
            Ok(())
        }
        Command::Serve {
            addr,
            max_body_bytes,
            max_turns,
            max_children,
            max_trees,
            ws_queue,
            static_dir,
            llm_config,
            token_budget,
            call_budget,
            money_budget,
            prices,
            token,
            allow_origin,
            max_nodes_per_tree,
            max_memory_mb,
            max_connections,
            max_websockets,
            ws_idle_secs,
            shutdown_grace_secs,
            advertise,
            storage,
            jobs,
        } => {
            let access = access_policy(addr, token, allow_origin)?;
            // Checked now: a bad LLM setting stops the start, not a later takeover.
            backend(llm_config.as_deref())?;
            let limits = Limits {
                max_body_bytes,
                max_turns_per_request: max_turns,
                max_children_per_request: max_children,
                max_trees,
                ws_queue,
                token_budget,
                call_budget,
                money_budget,
                max_nodes_per_tree,
                max_memory_bytes: max_memory_mb << 20,
                max_connections,
                cache_bytes: storage.cache_mb << 20,
                max_import_bytes: storage.max_import_bytes,
                max_websockets,
                ws_idle: std::time::Duration::from_secs(ws_idle_secs),
            };
            // Runs are jobs on PostgreSQL unless `--no-jobs`.
            let queue = match (!jobs.no_jobs, &storage.database_url) {
                (true, Some(url)) => Some(jobs.queue.config(url)),
                _ => None,
            };
            // The server's own worker: a workbench of its own that reads trees from the store
            // as jobs name them, like `simtree worker` — on a leader and a follower alike.
            let own_worker = match &queue {
                Some(config) if !jobs.no_worker => Some((
                    worker_bench(&library, &assets, sandbox, llm_config.as_deref(), &config.url)?,
                    config.clone(),
                )),
                _ => None,
            };
            let static_dir = static_dir.unwrap_or_else(crate::http::default_static_dir);
            if !static_dir.join("index.html").exists() {
                eprintln!(
                    "simtree: no web UI in {} (build it with `cargo xtask dist`); serving the API only",
                    static_dir.display()
                );
            }
            let plan = Arc::new(LeaderPlan {
                library,
                assets,
                sandbox,
                llm_config,
                prices,
                limits,
                storage,
                queue,
                static_dir,
                access: Arc::new(access),
                shutdown_grace: std::time::Duration::from_secs(shutdown_grace_secs),
            });
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            rt.block_on(serve_fleet(plan, addr, advertise, own_worker))
        }
        Command::Worker {
            database_url,
            concurrency,
            llm_config,
            queue,
        } => {
            let wb = worker_bench(&library, &assets, sandbox, llm_config.as_deref(), &database_url)?;
            let cores = std::thread::available_parallelism().map_or(1, usize::from);
            let concurrency = concurrency.map_or(cores, |c| c as usize);
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            eprintln!("simtree: worker taking runs from the job queue, {concurrency} at a time");
            rt.block_on(async {
                let sharing = share_endpoint_load(&wb.backend, &database_url).await;
                let worked = wb
                    .work(
                        queue.config(&database_url),
                        concurrency,
                        "worker",
                        crate::http::stop_requested(),
                    )
                    .await;
                if let Some((stop, task)) = sharing {
                    stop.notify_one();
                    let _ = task.await;
                }
                worked.map_err(|e| e.to_string())
            })
        }
        Command::Run(args) => run_headless(&library, &assets, sandbox, args),
        Command::Sweep {
            file,
            json,
            csv,
            parallel,
            llm,
            llm_config,
        } => {
            let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
            let spec = <crate::sweep::SweepSpec as crate::sweep::SweepPlan>::parse(&text)
                .map_err(|e| format!("{}: {e}", file.display()))?;
            let backend =
                crate::backend::Backend::from_settings(llm_config.as_deref(), llm).map_err(|e| e.to_string())?;
            let cores = std::thread::available_parallelism().map_or(1, usize::from);
            let env = crate::sweep::Env {
                library: &library,
                backend: &backend,
                root: assets.join(".."),
                parallel: parallel.unwrap_or(cores),
                sandbox,
            };
            let bar = {
                use std::io::IsTerminal;
                std::io::stderr().is_terminal().then(indicatif::ProgressBar::no_length)
            };
            let progress = |done: u64, total: u64| {
                if let Some(b) = &bar {
                    b.set_length(total);
                    b.set_position(done);
                }
            };
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            let results = rt
                .block_on(crate::sweep::run(&spec, &env, &progress))
                .map_err(|e| e.to_string())?;
            if let Some(b) = bar {
                b.finish_and_clear();
            }
            if let Some(path) = csv {
                std::fs::write(&path, crate::sweep::csv(&spec, &results))
                    .map_err(|e| format!("{}: {e}", path.display()))?;
            }
            let mut out = std::io::stdout().lock();
            let text = if json {
                results
                    .iter()
                    .map(|r| serde_json::to_string(r).unwrap_or_default() + "\n")
                    .collect()
            } else {
                crate::sweep::table(&results)
            };
            // A reader that went away (`| head`) is not an error.
            match out.write_all(text.as_bytes()) {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.to_string()),
                _ => Ok(()),
            }
        }
    }
}

/// A workbench on the store `storage` names (the shipped market data, the uploaded datasets and
/// the saved scenarios in it), for commands that change the data folder as the server would.
fn workbench_on(
    storage: &StorageArgs,
    library: ScenarioLibrary,
    assets: &std::path::Path,
) -> Result<crate::workbench::Workbench, String> {
    let store = storage
        .open()?
        .ok_or("--ephemeral keeps nothing: name a data folder or database")?;
    let mut wb = crate::workbench::Workbench::new(library, Backend::Mock, Limits::default());
    wb.use_assets(assets);
    wb.attach_store(store).map_err(|e| e.to_string())?;
    Ok(wb)
}

/// `simtree scenarios list|save|rm`: the library routes' checks and messages, on the data folder.
fn scenarios(command: ScenariosCommand, library: ScenarioLibrary, assets: &std::path::Path) -> Result<(), String> {
    match command {
        ScenariosCommand::List { storage } => {
            let wb = workbench_on(&storage, library, assets)?;
            let mut out = std::io::stdout().lock();
            for s in wb.scenario_list() {
                let origin = match s.version {
                    Some(v) => format!("saved v{v}"),
                    None => "shipped".to_string(),
                };
                let line = format!("{:<22} {:<8} {:<10} {}", s.id, s.kind.as_str(), origin, s.title);
                if writeln!(out, "{line}").is_err() {
                    break;
                }
            }
            Ok(())
        }
        ScenariosCommand::Save { name, file, storage } => {
            let (_, doc) = read_scenario_file(&file)?;
            let wb = workbench_on(&storage, library, assets)?;
            let saved = if wb.library.contains(&name) {
                wb.update_scenario(&name, &doc)
            } else {
                wb.save_scenario(&name, &doc)
            }
            .map_err(|e| format!("{}: {e}", file.display()))?;
            println!("saved {} version {}", saved.id, saved.version);
            Ok(())
        }
        ScenariosCommand::Rm { name, storage } => {
            let wb = workbench_on(&storage, library, assets)?;
            wb.delete_scenario(&name).map_err(|e| e.to_string())?;
            println!("removed {name}");
            Ok(())
        }
    }
}

/// `simtree data import`: the upload route's checks and messages, the store's row.
fn data_import(name: String, file: PathBuf, storage: StorageArgs) -> Result<(), String> {
    let shown = file.display();
    crate::trading::dataset::check_dataset_name(&name).map_err(|e| e.to_string())?;
    if name == crate::workbench::SHIPPED_DATASET {
        return Err(format!("'{name}' is the shipped dataset's name; choose another"));
    }
    let len = std::fs::metadata(&file)
        .map_err(|e| format!("cannot read {shown}: {e}"))?
        .len();
    if len > crate::trading::dataset::MAX_DATASET_BYTES as u64 {
        return Err(format!(
            "{shown}: {len} bytes; a dataset may have at most {}",
            crate::trading::dataset::MAX_DATASET_BYTES
        ));
    }
    let text = std::fs::read_to_string(&file).map_err(|e| format!("cannot read {shown}: {e}"))?;
    let d = crate::trading::dataset::parse_dataset(&text).map_err(|e| format!("{shown}: {e}"))?;
    let store = storage
        .open()?
        .ok_or("--ephemeral keeps nothing: name a data folder or database")?;
    let existing = store.read(|db| db.datasets()).map_err(|e| e.to_string())?;
    if existing.iter().any(|(n, _)| *n == name) {
        return Err(format!(
            "a dataset called '{name}' exists; delete it first or choose another name"
        ));
    }
    store.write(crate::store::Write::Dataset {
        name: name.clone(),
        body: text,
    });
    store.flush().map_err(|e| e.to_string())?;
    let tickers = d.market.tickers().join(", ");
    println!(
        "dataset {name}: {} rows, {} to {}, tickers {tickers}",
        d.rows, d.first, d.last
    );
    Ok(())
}

/// The options of `simtree run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Scenario id (file stem in assets/scenarios).
    #[arg(long, required_unless_present = "scenario_file", conflicts_with = "scenario_file")]
    pub scenario: Option<String>,
    /// A scenario document of your own instead: a social scenario, a trading scenario or an
    /// agent-based model (checked as `POST /devui/simtree` checks it).
    #[arg(long)]
    pub scenario_file: Option<PathBuf>,
    /// Turns to run (default: the scenario's default_turns).
    #[arg(long)]
    pub turns: Option<u64>,
    /// Seed for the simulator's RNG (default: the scenario's seed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Print JSON lines instead of human-readable lines.
    #[arg(long)]
    pub json: bool,
    /// The LLM dialect, overriding LLM_DIALECT: mock, scripted, openai, gemini or anthropic.
    #[arg(long)]
    pub llm: Option<Dialect>,
    /// LLM settings file (TOML or JSON) layered over the LLM_* environment variables.
    #[arg(long)]
    pub llm_config: Option<PathBuf>,
    /// Folder to write the run to: tree.json (importable with POST /devui/simtree/import),
    /// log.jsonl, usage.json and records.json.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The data folder a trading document's `episode.dataset` is read from (default:
    /// $SIMTREE_DATA, else the platform data folder; opened only for such a document).
    #[arg(long, env = "SIMTREE_DATA")]
    pub data: Option<PathBuf>,
    /// A PostgreSQL database to read `episode.dataset` from instead of a data folder.
    #[arg(long, env = "SIMTREE_DATABASE_URL", hide_env_values = true, conflicts_with = "data")]
    pub database_url: Option<String>,
}

/// `simtree run`: one advance of a fresh tree, printed as it happens. Output stops quietly when
/// the reader goes away (`| head`); the run itself still finishes so `--out` is complete.
fn run_headless(
    library: &ScenarioLibrary,
    assets: &std::path::Path,
    sandbox: crate::abm::Sandbox,
    a: RunArgs,
) -> Result<(), String> {
    use std::io::IsTerminal;
    let backend = crate::backend::Backend::from_settings(a.llm_config.as_deref(), a.llm).map_err(|e| e.to_string())?;
    let (scenario, document) = match &a.scenario_file {
        Some(file) => {
            let (label, doc) = read_scenario_file(file)?;
            (label, Some(doc))
        }
        None => (a.scenario.clone().unwrap_or_default(), None),
    };
    let (sim, default_turns, abm) = match (&document, &a.scenario_file) {
        (Some(doc), Some(file)) => {
            let user = crate::scenario::UserScenario::from_document(&scenario, doc)
                .map_err(|e| format!("{}: {e}", file.display()))?;
            let market = match crate::workbench::dataset_of(doc) {
                Some(name) if name != crate::workbench::SHIPPED_DATASET => {
                    Some(uploaded_market(&a, name).map_err(|e| format!("{}: {e}", file.display()))?)
                }
                _ => None,
            };
            build_sim_of((&user).into(), a.seed, assets, sandbox, market)
                .map_err(|e| format!("{}: {e}", file.display()))?
        }
        _ => build_sim(library, &scenario, a.seed, assets, sandbox)?,
    };
    let turns = a.turns.unwrap_or(default_turns);
    let req = crate::backend::RunRequest {
        scenario: &scenario,
        sim: &sim,
        replay: None,
        budget: None,
        abm,
        watch: Default::default(),
    };
    let (ctx, ledger) = crate::backend::run_ctx(&backend, req).map_err(|e| e.to_string())?;
    let counted = Arc::new(crate::headless::Counted::new(ctx.llm.clone()));
    let ctx = RunCtx {
        llm: counted.clone(),
        ..ctx
    };
    let initial = sim.fork().initial_events();
    let mut tree = crate::tree::SimTree::new(&scenario, sim);
    tree.document = document.map(Arc::new);

    let progress = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(turns);
        let style = indicatif::ProgressStyle::with_template("{bar:30} turn {pos}/{len} {msg} {elapsed}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
        bar.set_style(style);
        bar
    });
    let mut out = std::io::BufWriter::new(std::io::stdout());
    let mut closed = None;
    let json = a.json;
    let mut print = |e: &Event| {
        if closed.is_some() {
            return;
        }
        let line = if json {
            serde_json::to_string(e).unwrap_or_default()
        } else {
            human_line(e)
        };
        if let Err(err) = writeln!(out, "{line}") {
            closed = Some(err);
        }
    };
    for e in &initial {
        print(e);
    }
    let mut sink = |e: Event| {
        if let Some(bar) = &progress
            && crate::sim::counts_as_turn(&e)
        {
            bar.inc(1);
            bar.set_message(format!(
                "· {} calls · ~{} tokens",
                counted.calls.load(std::sync::atomic::Ordering::Relaxed),
                counted.words.load(std::sync::atomic::Ordering::Relaxed)
            ));
        }
        print(&e);
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let mut finished = rt
        .block_on(crate::headless::advance(tree, turns, &ctx, &ledger, &mut sink))
        .map_err(|e| e.to_string())?;
    if let Some(bar) = progress {
        bar.finish_and_clear();
    }
    let broken = match closed {
        Some(err) if err.kind() != std::io::ErrorKind::BrokenPipe => return Err(err.to_string()),
        Some(_) => true,
        None => out.flush().is_err(),
    };
    if let Some(dir) = &a.out {
        write_run(dir, &mut finished)?;
    }
    if let Some(e) = &finished.error {
        return Err(e.clone());
    }
    if !json && !broken {
        let sim = finished.sim();
        let turns = sim.as_deref().map_or(0, Sim::turns);
        let kind = sim.as_deref().map_or("", Sim::kind);
        eprintln!("-- {turns} turns run ({kind})");
    }
    Ok(())
}

/// Writes a finished run to `dir`: the tree export, the run's log lines, its usage and records.
fn write_run(dir: &std::path::Path, run: &mut crate::headless::Finished) -> Result<(), String> {
    let fail = |what: &str, e: &dyn std::fmt::Display| format!("{}: cannot write {what}: {e}", dir.display());
    std::fs::create_dir_all(dir).map_err(|e| fail("the folder", &e))?;
    let export = run.export().map_err(|e| e.to_string())?;
    let put = |name: &str, text: String| std::fs::write(dir.join(name), text).map_err(|e| fail(name, &e));
    put(
        "tree.json",
        serde_json::to_string(&export).map_err(|e| fail("tree.json", &e))?,
    )?;
    let mut log = String::new();
    run.tree
        .for_each_log_entry(run.node, |l| {
            log.push_str(l);
            log.push('\n');
        })
        .map_err(|e| fail("log.jsonl", &e))?;
    put("log.jsonl", log)?;
    let usage = crate::llm::ledger::UsageTotals::of(&run.records);
    put(
        "usage.json",
        serde_json::to_string_pretty(&usage).map_err(|e| fail("usage.json", &e))?,
    )?;
    put(
        "records.json",
        serde_json::to_string(&run.records).map_err(|e| fail("records.json", &e))?,
    )
}

fn abm(command: AbmCommand, assets: &std::path::Path, sandbox: crate::abm::Sandbox) -> Result<(), String> {
    use crate::abm::cli as c;
    let root = assets.join("..");
    let (mut out, mut err) = (std::io::stdout(), std::io::stderr());
    match command {
        AbmCommand::Validate { file } => match c::validate_file(&file, &mut out).map_err(|e| e.to_string())? {
            true => Ok(()),
            false => Err(format!("{}: the model has errors", file.display())),
        },
        AbmCommand::Schema { provider } => c::print_schema(&provider, &mut out).map_err(|e| e.to_string()),
        AbmCommand::Run {
            file,
            steps,
            seed,
            json,
        } => {
            let options = c::RunOptions {
                steps,
                seed,
                json,
                root,
                limits: Default::default(),
                sandbox,
            };
            c::run_file(&file, &options, &mut out, &mut err)
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
        AbmCommand::Setup => crate::abm::venv::ensure_venv(&root)
            .map(|p| eprintln!("ABM worker python: {}", p.display()))
            .map_err(|e| e.to_string()),
    }
}

/// With PostgreSQL, shares the limits of the backend's LLM endpoints with every other process on
/// the database (see [`crate::llm::endpoints`]); call it inside the runtime that runs the calls.
/// Notify the handle to stop (the process then leaves the board). Without real providers, or when
/// the board cannot be set up (said on stderr), each endpoint's limit is this process's alone.
pub async fn share_endpoint_load(
    backend: &Backend,
    database_url: &str,
) -> Option<(Arc<tokio::sync::Notify>, tokio::task::JoinHandle<()>)> {
    let Backend::Provider(providers) = backend else {
        return None;
    };
    let holder = crate::store::lease::Lease::this_process(crate::store::lease::DEFAULT_LEASE).holder;
    match crate::store::load::PgBoard::connect(database_url, holder).await {
        Ok(board) => providers.pool.share_load(Arc::new(board)),
        Err(e) => {
            eprintln!("simtree: LLM endpoint limits are not shared with other processes: {e}");
            None
        }
    }
}

/// What `serve` builds to lead its database: at start-up, and again when a follower takes over
/// from a leader whose lease lapsed ([`lead`], the one place both go through).
struct LeaderPlan {
    library: ScenarioLibrary,
    assets: PathBuf,
    sandbox: crate::abm::Sandbox,
    llm_config: Option<PathBuf>,
    prices: Option<PathBuf>,
    limits: Limits,
    storage: StorageArgs,
    queue: Option<crate::workbench::jobs::JobsConfig>,
    static_dir: PathBuf,
    access: Arc<crate::http::Access>,
    shutdown_grace: std::time::Duration,
}

/// A leading server's app and the tasks it started beside its router.
struct Leader {
    app: Arc<AppState>,
    sharing: Option<(Arc<tokio::sync::Notify>, tokio::task::JoinHandle<()>)>,
}

impl Leader {
    /// Stops what [`lead`] started beside the router (the endpoint-load board), then closes the
    /// store: its last writes are committed and the lease released before the process ends,
    /// whatever connections still hold the app.
    async fn stop(self) {
        if let Some((stop, task)) = self.sharing {
            stop.notify_one();
            let _ = task.await;
        }
        if let Some(store) = self.app.wb.store.clone() {
            let closed = tokio::task::spawn_blocking(move || store.close(std::time::Duration::from_secs(30))).await;
            if !matches!(closed, Ok(true)) {
                eprintln!("simtree: the store did not close in time; its lease lapses by itself");
            }
        }
    }
}

/// The leader's app of `plan`, built as a starting server builds it: the workbench on its store
/// (with PostgreSQL, taking the lease `me`: while another process holds it, who does), the job
/// queue, then — in the runtime — the endpoint-load board, the job dispatch and the cache sweep.
async fn lead(
    plan: Arc<LeaderPlan>,
    me: Option<crate::store::lease::Lease>,
) -> Result<Result<Leader, crate::store::lease::Holder>, String> {
    let built = {
        let plan = plan.clone();
        tokio::task::spawn_blocking(move || build_leader(&plan, me))
            .await
            .map_err(|e| e.to_string())??
    };
    let app = match built {
        Ok(app) => Arc::new(app),
        Err(holder) => return Ok(Err(holder)),
    };
    let sharing = match &plan.storage.database_url {
        Some(url) => share_endpoint_load(&app.wb.backend, url).await,
        None => None,
    };
    if plan.queue.is_some() {
        tokio::spawn(app.wb.clone().dispatch_jobs());
    }
    // Live simulators of stored trees are a cache: keep it within --cache-mb.
    tokio::spawn(app.wb.clone().sweep_cache());
    Ok(Ok(Leader { app, sharing }))
}

/// The blocking part of [`lead`]: the workbench, its store and its job queue.
fn build_leader(
    plan: &LeaderPlan,
    me: Option<crate::store::lease::Lease>,
) -> Result<Result<AppState, crate::store::lease::Holder>, String> {
    let mut wb = crate::workbench::Workbench::new(
        plan.library.clone(),
        backend(plan.llm_config.as_deref())?,
        plan.limits.clone(),
    );
    if let Some(path) = &plan.prices {
        wb.prices = Arc::new(crate::llm::price::PriceTable::load(path).map_err(|e| e.to_string())?);
    }
    wb.abm_sandbox = plan.sandbox;
    wb.use_assets(&plan.assets);
    let store = match (&plan.storage.database_url, me) {
        (Some(url), Some(me)) => match crate::store::Store::lead_postgres(url, Some(me))
            .map_err(|e| format!("cannot open the PostgreSQL database: {e}"))?
        {
            Ok(store) => Some(store),
            Err(holder) => return Ok(Err(holder)),
        },
        _ => plan.storage.open()?,
    };
    // The queue before the trees: it reads the runs the last leader left to jobs, which are
    // adopted; `attach_store` then marks only the other runs in flight interrupted.
    if let Some(config) = &plan.queue {
        wb.enable_jobs(config.clone()).map_err(|e| e.to_string())?;
        eprintln!("simtree: runs go through the job queue");
    }
    if let Some(store) = store {
        eprintln!("simtree: trees are kept in {}", store.location);
        wb.attach_store(store).map_err(|e| e.to_string())?;
    } else {
        eprintln!("simtree: --ephemeral: trees are kept in memory only");
    }
    let mut app = AppState::new(wb);
    app.access = plan.access.clone();
    app.shutdown_grace = plan.shutdown_grace;
    app.static_dir = plan.static_dir.clone();
    Ok(Ok(app))
}

/// The base URL other servers reach this one at: `--advertise`, else the bound address (not
/// when that is unspecified: 0.0.0.0 names no machine to another one).
fn advertised(advertise: Option<String>, bound: std::net::SocketAddr) -> Result<String, String> {
    match advertise {
        Some(url) => {
            let url = url.trim_end_matches('/').to_string();
            let parsed = url.parse::<axum::http::Uri>().ok();
            let ok = parsed.as_ref().is_some_and(|u| {
                u.scheme_str() == Some("http")
                    && u.host().is_some_and(|h| !h.is_empty())
                    && u.path().trim_matches('/').is_empty()
                    && u.query().is_none()
            });
            if !ok {
                return Err(format!(
                    "--advertise {url}: expected http://host[:port] (the address other servers reach this one at)"
                ));
            }
            Ok(url)
        }
        None if bound.ip().is_unspecified() => Err(format!(
            "serving on {bound} with a PostgreSQL database: pass --advertise http://<this machine's address>:{} \
             (or set SIMTREE_ADVERTISE) so that the other servers on the database can reach this one when it leads",
            bound.port()
        )),
        None => Ok(format!("http://{bound}")),
    }
}

/// `serve`: binds, then leads the database — or, with PostgreSQL while another server holds its
/// lease, follows that server (forwarding to it; `http/fleet.rs`) and takes over in place when
/// the lease lapses. Runs the own job worker either way.
async fn serve_fleet(
    plan: Arc<LeaderPlan>,
    addr: std::net::SocketAddr,
    advertise: Option<String>,
    own_worker: Option<(Arc<crate::workbench::Workbench>, crate::workbench::jobs::JobsConfig)>,
) -> Result<(), String> {
    let listener = crate::http::bind(addr)
        .await
        .map_err(|e| format!("cannot serve on {addr}: {e}"))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    let me = match &plan.storage.database_url {
        Some(_) => {
            let mut me =
                crate::store::lease::Lease::this_process(std::time::Duration::from_secs(plan.storage.lease_secs));
            me.address = Some(advertised(advertise, bound)?);
            Some(me)
        }
        None => None,
    };
    let host = crate::store::lease::Lease::this_process(crate::store::lease::DEFAULT_LEASE).host;
    let (door, leader, following) = match lead(plan.clone(), me.clone()).await? {
        Ok(leader) => {
            if let Some(me) = &me {
                eprintln!(
                    "simtree: this server leads the database (others reach it at {})",
                    me.address.as_deref().unwrap_or("?")
                );
            }
            (
                Arc::new(crate::http::fleet::Door::leader(leader.app.clone(), &host)),
                Some(leader),
                None,
            )
        }
        Err(holder) => {
            eprintln!(
                "simtree: this PostgreSQL database is already served by another simtree ({}): this server follows it \
                 — requests to /api, /devui and /openapi.json are forwarded there — and takes over when its lease \
                 lapses, in {} s at the latest unless renewed",
                holder.describe_at(),
                holder.left_ms().div_ceil(1000)
            );
            let door = Arc::new(crate::http::fleet::Door::new(
                plan.access.clone(),
                plan.static_dir.clone(),
                plan.limits.max_websockets,
                plan.limits.max_connections,
                &host,
            ));
            door.follow(holder);
            door.probe_leader().await;
            let me = me.ok_or("a follower without a lease")?;
            let url = plan.storage.database_url.clone().unwrap_or_default();
            let probe = tokio::task::spawn_blocking(move || crate::store::Store::open_postgres_with(&url, None))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("cannot open the PostgreSQL database: {e}"))?;
            let task = tokio::spawn(follow(plan.clone(), door.clone(), Arc::new(probe), me));
            (door, None, Some(task))
        }
    };
    // Signals are caught from before the listening line on (see `http::stop_requested`).
    let stop = crate::http::stop_requested();
    // The own worker goes on through the shutdown's grace period (the runs it holds may finish
    // then) and stops once the server has.
    let (stop_worker, worker_stop) = tokio::sync::oneshot::channel::<()>();
    let worker = own_worker.map(|(wb, config)| {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        tokio::spawn(wb.work(config, cores, "serve", async move {
            let _ = worker_stop.await;
        }))
    });
    crate::http::announce(bound, &plan.access);
    let served = crate::http::serve(listener, door, stop).await;
    let _ = stop_worker.send(());
    if let Some(w) = worker {
        // Its claims are handed back before the process ends.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), w).await;
    }
    let leader = match following {
        Some(task) if task.is_finished() => task.await.ok().flatten(),
        Some(task) => {
            task.abort();
            None
        }
        None => leader,
    };
    if let Some(leader) = leader {
        leader.stop().await;
    }
    served.map_err(|e| format!("cannot serve on {addr}: {e}"))
}

/// A follower's heartbeat: every beat of the lease it reads the lease row (where the leader is
/// now) and probes the leader; once the lease is free or lapsed it tries to take it and, if it
/// gets it, becomes the leader in place. A forward that failed makes it look at once.
async fn follow(
    plan: Arc<LeaderPlan>,
    door: Arc<crate::http::fleet::Door>,
    probe: Arc<crate::store::Store>,
    me: crate::store::lease::Lease,
) -> Option<Leader> {
    let mut beat = tokio::time::interval(me.heartbeat());
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = beat.tick() => {}
            () = door.stale.notified() => {}
        }
        let read = {
            let probe = probe.clone();
            tokio::task::spawn_blocking(move || probe.read(|db| db.lease_holder())).await
        };
        let holder = match read {
            Ok(Ok(h)) => {
                door.database(None);
                h
            }
            Ok(Err(e)) => {
                door.database(Some(e.to_string()));
                continue;
            }
            Err(e) => {
                door.database(Some(e.to_string()));
                continue;
            }
        };
        match holder {
            Some(h) if !h.lapsed() && h.holder != me.holder => {
                door.follow(h);
                door.probe_leader().await;
            }
            _ => match take_over(&plan, &door, &me).await {
                Ok(Ok(leader)) => {
                    door.lead(leader.app.clone());
                    eprintln!(
                        "simtree: took over the database: this server leads it now (others reach it at {})",
                        me.address.as_deref().unwrap_or("?")
                    );
                    return Some(leader);
                }
                Ok(Err(h)) => {
                    door.follow(h);
                    door.probe_leader().await;
                }
                Err(e) => {
                    eprintln!("simtree: could not take over the database: {e}");
                    door.database(Some(e));
                }
            },
        }
    }
}

/// [`lead`] from a follower: while it takes the lease and builds the leader, requests other
/// followers forward here are told to retry (see `Door::taking_over`).
async fn take_over(
    plan: &Arc<LeaderPlan>,
    door: &crate::http::fleet::Door,
    me: &crate::store::lease::Lease,
) -> Result<Result<Leader, crate::store::lease::Holder>, String> {
    door.taking_over(true);
    let led = lead(plan.clone(), Some(me.clone())).await;
    if !matches!(led, Ok(Ok(_))) {
        door.taking_over(false);
    }
    led
}

/// The workbench of a process that runs jobs (`worker`, or a server's own worker): the store
/// opened without the server lease (it writes only its jobs' nodes, fenced by their claims).
fn worker_bench(
    library: &ScenarioLibrary,
    assets: &std::path::Path,
    sandbox: crate::abm::Sandbox,
    llm_config: Option<&std::path::Path>,
    url: &str,
) -> Result<std::sync::Arc<crate::workbench::Workbench>, String> {
    let mut wb = crate::workbench::Workbench::new(library.clone(), backend(llm_config)?, Limits::default());
    wb.abm_sandbox = sandbox;
    wb.use_assets(assets);
    let store = crate::store::Store::open_postgres_with(url, None)
        .map_err(|e| format!("cannot open the PostgreSQL database: {e}"))?;
    wb.attach_store_for_jobs(store).map_err(|e| e.to_string())?;
    Ok(std::sync::Arc::new(wb))
}

/// The LLM backend of `serve` (see [`crate::backend::Backend::from_settings`]).
fn backend(file: Option<&std::path::Path>) -> Result<Backend, String> {
    crate::backend::Backend::from_settings(file, None).map_err(|e| e.to_string())
}

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

/// A fresh simulation of any kind from the library, its default turn count, and (for
/// agent-based models) a worker pool.
fn build_sim(
    library: &ScenarioLibrary,
    id: &str,
    seed: Option<u64>,
    assets: &std::path::Path,
    sandbox: crate::abm::Sandbox,
) -> Result<(Sim, u64, Option<Arc<WorkerPool>>), String> {
    build_sim_of(ScenarioEntry::find(library, id)?, seed, assets, sandbox, None)
}

/// The uploaded dataset `name` of the data folder (or database) `simtree run` names, checked as
/// the server checks it when it loads it.
fn uploaded_market(a: &RunArgs, name: &str) -> Result<Arc<MarketData>, String> {
    let storage = StorageArgs {
        data: a.data.clone(),
        ephemeral: false,
        database_url: a.database_url.clone(),
        cache_mb: 0,
        max_import_bytes: 0,
        lease_secs: crate::store::lease::DEFAULT_LEASE.as_secs(),
    };
    let store = storage.open()?.ok_or("no store to read the dataset from")?;
    let rows = store.read(|db| db.datasets()).map_err(|e| e.to_string())?;
    let (_, text) = rows.into_iter().find(|(n, _)| n == name).ok_or_else(|| {
        format!(
            "scenario: episode.dataset: no dataset called '{name}' in {} (see simtree data import)",
            store.location
        )
    })?;
    let d = crate::trading::dataset::parse_dataset(&text).map_err(|e| format!("dataset '{name}': {e}"))?;
    Ok(Arc::new(d.market))
}

/// Largest scenario file `--scenario-file` reads (the server's default body limit is 2 MiB).
const MAX_SCENARIO_FILE_BYTES: u64 = 16 << 20;

/// A scenario document from a file: its id (the file stem) and its JSON.
fn read_scenario_file(path: &std::path::Path) -> Result<(String, Value), String> {
    let shown = path.display();
    let len = std::fs::metadata(path)
        .map_err(|e| format!("cannot read {shown}: {e}"))?
        .len();
    if len > MAX_SCENARIO_FILE_BYTES {
        return Err(format!(
            "{shown}: {len} bytes; a scenario file may have at most {MAX_SCENARIO_FILE_BYTES}"
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
    let doc = serde_json::from_str(&text).map_err(|e| format!("{shown}: not valid JSON: {e}"))?;
    let id = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "document".into());
    Ok((id, doc))
}

/// [`build_sim`] for an entry in hand (a library scenario or a user's document); a trading
/// episode runs on `market` when given, else on the shipped data.
fn build_sim_of(
    entry: ScenarioEntry<'_>,
    seed: Option<u64>,
    assets: &std::path::Path,
    sandbox: crate::abm::Sandbox,
    market: Option<Arc<MarketData>>,
) -> Result<(Sim, u64, Option<Arc<WorkerPool>>), String> {
    let market = match (entry.kind(), market) {
        (SimKind::Trading, Some(m)) => Some(m),
        (SimKind::Trading, None) => Some(Arc::new(MarketData::load_default().map_err(|e| e.to_string())?)),
        _ => None,
    };
    let pool = match entry.kind() {
        SimKind::Abm => {
            let root = assets.join("..");
            crate::abm::venv::ensure_venv(&root).map_err(|e| e.to_string())?;
            let config = WorkerConfig::for_root(&root).with_sandbox(sandbox);
            Some(Arc::new(WorkerPool::spawn(&config, 1).map_err(|e| e.to_string())?))
        }
        _ => None,
    };
    Ok((entry.instantiate(seed, market.as_ref())?, entry.default_turns(), pool))
}

/// One readable line per event.
pub fn human_line(e: &Event) -> String {
    let d = &e.data;
    match e.kind {
        EventType::SystemBroadcast => format!("[broadcast] {}", s(d, "text")),
        EventType::AgentProcessStart => format!("[step] {} step {}", s(d, "agent"), d["step"]),
        EventType::AgentProcessEnd => format!("[decided] {} {}", s(d, "agent"), d["actions"]),
        EventType::ActionStart => format!("[action] {} {}", s(d, "agent"), d["action"]),
        EventType::ActionEnd => format!(
            "[result] {} {} {}",
            s(d, "agent"),
            if d["success"] == Value::Bool(true) {
                "ok"
            } else {
                "failed"
            },
            d["summary"].as_str().unwrap_or("-")
        ),
        EventType::AgentCtxDelta => {
            format!(
                "[ctx] {} <{}> {}",
                s(d, "agent"),
                s(d, "role"),
                s(d, "content").replace('\n', "\\n")
            )
        }
        EventType::PlanUpdate => format!("[plan] {} {}", s(d, "agent"), d["plan"]),
        EventType::EmotionUpdate => format!("[emotion] {} {}", s(d, "agent"), s(d, "emotion")),
        EventType::LandlordDeal => format!("[deal] bottom {}", d["bottom"]),
        EventType::DecisionPoint => format!("[decision] {} value {}", d["log"]["case_id"], d["value"]),
        EventType::AbmStep => format!("[step {}] {}", d["step"], d["values"]),
        EventType::AgentError => format!("[error] {} step {}: {}", s(d, "agent"), d["step"], s(d, "error")),
        EventType::Counterfactual => format!("[what if] {}", d["ops"]),
    }
}

/// The access policy of `serve`: a non-loopback address needs a token (anyone on the network
/// could otherwise drive the server); origins must be `scheme://host[:port]`.
fn access_policy(
    addr: std::net::SocketAddr,
    token: Option<String>,
    allow_origin: Vec<String>,
) -> Result<crate::http::Access, String> {
    let token = token.filter(|t| !t.is_empty());
    if !addr.ip().is_loopback() && token.is_none() {
        return Err(format!(
            "refusing to serve on {addr} without a token: anyone who can reach that address could \
             run simulations and import trees. Pass --token <secret> (or set SIMTREE_TOKEN), or bind \
             a loopback address such as 127.0.0.1"
        ));
    }
    if let Some(t) = &token
        && (t.len() < 8 || t.chars().any(|c| !c.is_ascii_graphic() || c == ';' || c == '&'))
    {
        return Err("--token must be at least 8 printable characters without ';' or '&'".into());
    }
    let mut origins = Vec::new();
    for o in allow_origin {
        let o = o.trim_end_matches('/').to_string();
        let valid = (o.starts_with("http://") || o.starts_with("https://"))
            && !o.split("://").nth(1).unwrap_or("").is_empty()
            && !o.split("://").nth(1).unwrap_or("").contains('/');
        if !valid {
            return Err(format!(
                "--allow-origin {o}: expected scheme://host[:port], e.g. http://localhost:5173"
            ));
        }
        origins.push(o);
    }
    Ok(crate::http::Access {
        token,
        allowed_origins: origins,
        loopback_host_only: addr.ip().is_loopback(),
    })
}

/// `--money-budget`: a finite, non-negative number of dollars.
fn money_arg(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("{text:?} is not an amount of dollars (a number ≥ 0)")),
    }
}

#[cfg(test)]
mod tests {
    use super::advertised;

    #[test]
    fn the_advertised_address_is_a_plain_http_base_url_and_never_an_unspecified_one() {
        let bound: std::net::SocketAddr = "127.0.0.1:8090".parse().unwrap();
        assert_eq!(advertised(None, bound).unwrap(), "http://127.0.0.1:8090");
        let v6: std::net::SocketAddr = "[::1]:9000".parse().unwrap();
        assert_eq!(advertised(None, v6).unwrap(), "http://[::1]:9000");
        for any in ["0.0.0.0:8090", "[::]:8090"] {
            let e = advertised(None, any.parse().unwrap()).unwrap_err();
            assert!(e.contains("--advertise http://") && e.contains(":8090"), "{e}");
        }
        let wild: std::net::SocketAddr = "0.0.0.0:8090".parse().unwrap();
        assert_eq!(
            advertised(Some("http://10.0.0.5:8090/".into()), wild).unwrap(),
            "http://10.0.0.5:8090"
        );
        for bad in [
            "https://10.0.0.5:8090",
            "10.0.0.5:8090",
            "http://",
            "http://host/path",
            "http://host/?q=1",
            "http://ho st",
            "",
        ] {
            assert!(advertised(Some(bad.into()), wild).is_err(), "{bad:?}");
        }
    }
}
