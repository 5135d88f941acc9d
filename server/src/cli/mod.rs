//! The `simtree` command line, and only that: each subcommand's flags (a file each: `run`, `data`,
//! `abm`, `scenarios`, `table`; `serve` and `worker` here), parsed into what the module doing the
//! work takes — [`crate::fleet`] for a server's and a worker's life on their database,
//! [`crate::headless`] for a run, [`crate::sweep`] for a sweep — and its result printed. Errors
//! are the line printed before exit status 1, hence `String`.

use std::io::Write;
use std::path::PathBuf;

use clap::{Parser, Subcommand};
use serde_json::Value;

use crate::engine::event::{Event, EventType};
use std::sync::Arc;

use crate::fleet::{LeaderPlan, StoreSite};
use crate::http::{Backend, Limits};
use crate::llm::Dialect;
use crate::scenario::ScenarioLibrary;
use crate::sim::{RunCtx, ScenarioEntry, Sim};
use crate::trading::data::MarketData;

mod abm;
mod data;
mod run;
mod scenarios;
mod table;

use abm::*;
use data::*;
use run::*;
use scenarios::*;
use table::*;

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
    /// Write a long-format table of a running server's sweep (one row per run, step and
    /// variable) or of a tree's log (one row per entry), as CSV or NDJSON.
    Table(TableArgs),
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
        /// An origin (scheme://host[:port]) whose pages may show the web UI in a frame, e.g. a
        /// Jupyter server for `tree.show()`. Repeatable. By default no page may (clickjacking).
        #[arg(long = "allow-framing", value_name = "URL")]
        allow_framing: Vec<String>,
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
    /// Agent-based-model runs this process takes from the queue at once: the Python/Mesa
    /// workers of its pool (default: the machine's cores; 0: it takes none). A server's own
    /// worker takes them only while no `simtree worker` offers any.
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=256))]
    pub abm_workers: Option<u64>,
}

impl QueueArgs {
    fn config(&self, url: &str) -> crate::workbench::jobs::JobsConfig {
        crate::workbench::jobs::JobsConfig {
            url: url.to_string(),
            lapse: std::time::Duration::from_secs(self.job_lapse_secs),
            max_attempts: self.job_attempts,
            abm_workers: self.abm_workers.map_or_else(
                || std::thread::available_parallelism().map_or(1, usize::from),
                |n| n as usize,
            ),
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
    /// Where these flags keep the trees (the default data folder when none is named).
    pub fn site(&self) -> Result<StoreSite, String> {
        if self.ephemeral {
            return Ok(StoreSite::Memory);
        }
        if let Some(url) = &self.database_url {
            return Ok(StoreSite::Postgres {
                url: url.clone(),
                lease: std::time::Duration::from_secs(self.lease_secs),
            });
        }
        Ok(StoreSite::Folder(match &self.data {
            Some(d) => d.clone(),
            None => default_data_dir()?,
        }))
    }

    /// Opens the store these flags name (`None` for `--ephemeral`).
    pub fn open(&self) -> Result<Option<crate::store::Store>, String> {
        self.site()?.open().map_err(|e| e.to_string())
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
    if let Command::Table(args) = cli.command {
        return table(args);
    }
    let library = ScenarioLibrary::load_assets(&assets).map_err(|e| e.to_string())?;
    match cli.command {
        Command::Trade { .. } | Command::Abm { .. } | Command::Data { .. } | Command::Table(_) => Ok(()),
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
            allow_framing,
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
            let access = access_policy(addr, token, allow_origin, allow_framing)?;
            // Checked now: a bad LLM setting stops the start, not a later takeover.
            crate::fleet::backend(llm_config.as_deref()).map_err(|e| e.to_string())?;
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
                    crate::fleet::worker_bench(&library, &assets, sandbox, llm_config.as_deref(), &config.url)
                        .map_err(|e| e.to_string())?,
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
                storage: storage.site()?,
                queue,
                static_dir,
                access: Arc::new(access),
                shutdown_grace: std::time::Duration::from_secs(shutdown_grace_secs),
            });
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            rt.block_on(crate::fleet::serve(plan, addr, advertise, own_worker))
                .map_err(|e| e.to_string())
        }
        Command::Worker {
            database_url,
            concurrency,
            llm_config,
            queue,
        } => {
            let wb = crate::fleet::worker_bench(&library, &assets, sandbox, llm_config.as_deref(), &database_url)
                .map_err(|e| e.to_string())?;
            let cores = std::thread::available_parallelism().map_or(1, usize::from);
            let concurrency = concurrency.map_or(cores, |c| c as usize);
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            eprintln!("simtree: worker taking runs from the job queue, {concurrency} at a time");
            rt.block_on(crate::fleet::run_worker(wb, queue.config(&database_url), concurrency))
                .map_err(|e| e.to_string())
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

/// The access policy of `serve`: a non-loopback address needs a token (anyone on the network
/// could otherwise drive the server); origins must be `scheme://host[:port]`.
fn access_policy(
    addr: std::net::SocketAddr,
    token: Option<String>,
    allow_origin: Vec<String>,
    allow_framing: Vec<String>,
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
    Ok(crate::http::Access {
        token,
        allowed_origins: origins("--allow-origin", allow_origin, "http://localhost:5173")?,
        loopback_host_only: addr.ip().is_loopback(),
        framing_origins: origins("--allow-framing", allow_framing, "http://localhost:8888")?,
    })
}

/// The origins given with `flag`, each `scheme://host[:port]` (a trailing `/` dropped); a
/// refusal shows `example`. Nothing else may reach a header: no path, space or quote.
fn origins(flag: &str, given: Vec<String>, example: &str) -> Result<Vec<String>, String> {
    given
        .into_iter()
        .map(|o| {
            let o = o.trim_end_matches('/').to_string();
            let rest = o
                .strip_prefix("http://")
                .or_else(|| o.strip_prefix("https://"))
                .unwrap_or("");
            let valid = !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_graphic() && !b"/'\";,".contains(&b));
            if valid {
                Ok(o)
            } else {
                Err(format!("{flag} {o}: expected scheme://host[:port], e.g. {example}"))
            }
        })
        .collect()
}

/// `--money-budget`: a finite, non-negative number of dollars.
fn money_arg(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("{text:?} is not an amount of dollars (a number ≥ 0)")),
    }
}
