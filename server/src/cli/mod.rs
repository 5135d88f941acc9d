//! The `simtree` command line, and only that: each subcommand's flags (a file each: `run`,
//! `sweep`, `serve`, `worker`, `scenarios`, `abm`, `data`, `table`), parsed into what the module
//! doing the work takes — [`crate::fleet`] for a server's and a worker's life on their database,
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
mod serve;
mod sweep;
mod table;
mod worker;

use abm::*;
use data::*;
use run::*;
use scenarios::*;
use serve::*;
use sweep::*;
use table::*;
use worker::*;

#[derive(Debug, Parser)]
#[command(name = "simtree", version, about = "Branching timelines for multi-agent simulations")]
pub struct Cli {
    /// Folder with scenarios/ (default: $SIMTREE_ASSETS, ./assets, or the checkout's assets).
    #[arg(long, global = true)]
    assets: Option<PathBuf>,
    /// Run agent-based model code without the bubblewrap sandbox, with your user's access to
    /// files, network and environment (for machines where bwrap cannot start).
    #[arg(long, global = true)]
    unsafe_abm: bool,
    #[command(subcommand)]
    command: Command,
}

/// The LLM options of the commands that run simulations in their own process (`run`, `sweep`).
#[derive(Debug, clap::Args)]
pub(crate) struct LlmArgs {
    /// The LLM dialect, overriding LLM_DIALECT: mock, scripted, openai, gemini or anthropic
    /// (used by social and trading scenarios).
    #[arg(long)]
    llm: Option<Dialect>,
    /// LLM settings file (TOML or JSON) layered over the LLM_* environment variables.
    #[arg(long)]
    llm_config: Option<PathBuf>,
}

impl LlmArgs {
    /// The LLM backend these options (and the LLM_* environment variables) configure.
    fn backend(&self) -> Result<crate::backend::Backend, String> {
        crate::backend::Backend::from_settings(self.llm_config.as_deref(), self.llm).map_err(|e| e.to_string())
    }
}

// Parsed once per process: the size of the `serve` variant costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run a scenario headless and print its event log (the LLM as `serve` configures it).
    Run(RunArgs),
    /// Run a sweep file: every cell of its grid × replicates (paired seeds), in parallel; print
    /// mean, sd and n of each metric per cell.
    Sweep(SweepArgs),
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
    Serve(ServeArgs),
    /// Take runs queued by `serve --jobs` on a PostgreSQL database and run them (no HTTP).
    /// SIGTERM or ctrl-c hands its unfinished runs back to the queue.
    Worker(WorkerArgs),
}

/// Where `serve` keeps its trees.
#[derive(Debug, clap::Args)]
pub(crate) struct StorageArgs {
    /// Folder of the embedded database (default: $SIMTREE_DATA, else the platform data folder,
    /// e.g. ~/.local/share/simtree).
    #[arg(long, env = "SIMTREE_DATA")]
    data: Option<PathBuf>,
    /// Keep trees in memory only: they die with the process.
    #[arg(long, conflicts_with_all = ["data", "database_url"])]
    ephemeral: bool,
    /// A PostgreSQL database instead of the embedded one (postgres://user@host:port/db).
    #[arg(long, env = "SIMTREE_DATABASE_URL", hide_env_values = true, conflicts_with = "data")]
    database_url: Option<String>,
    /// Memory (MiB) for the live simulators and logs of stored trees; others are read back from
    /// the store when used (0: no limit).
    #[arg(long, default_value_t = Limits::default().cache_bytes >> 20)]
    cache_mb: usize,
    /// Largest import in bytes (imports stream into the store; `--max-body-bytes` does not apply).
    #[arg(long, default_value_t = Limits::default().max_import_bytes)]
    max_import_bytes: u64,
    /// PostgreSQL: length of the server lease in seconds (one server per database). It is
    /// renewed every sixth of that; a server that died without releasing it holds the database
    /// until it lapses.
    #[arg(long, env = "SIMTREE_LEASE_SECS", default_value_t = crate::store::lease::DEFAULT_LEASE.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    lease_secs: u64,
}

impl StorageArgs {
    /// Where these flags keep the trees (the default data folder when none is named).
    pub(crate) fn site(&self) -> Result<StoreSite, String> {
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
    pub(crate) fn open(&self) -> Result<Option<crate::store::Store>, String> {
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
pub(crate) enum TradeCommand {
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
    if let Command::Trade { command: TradeCommand::Run(args) } = cli.command {
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
    let ground = Ground { library, assets, sandbox };
    let library = &ground.library;
    match cli.command {
        Command::Trade { .. } | Command::Abm { .. } | Command::Data { .. } | Command::Table(_) => Ok(()),
        Command::Scenarios { command: Some(command) } => scenarios(command, ground),
        Command::Scenarios { command: None } => {
            for e in ScenarioEntry::all(library) {
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
        Command::Serve(args) => serve(args, ground),
        Command::Worker(args) => worker(args, &ground),
        Command::Run(args) => run_headless(args, &ground),
        Command::Sweep(args) => sweep(args, &ground),
    }
}

/// What the commands that build simulations start from: the shipped scenarios, the assets
/// folder they came from, and where ABM code runs.
struct Ground {
    library: ScenarioLibrary,
    assets: PathBuf,
    sandbox: crate::abm::Sandbox,
}

/// A workbench on the store `storage` names (the shipped market data, the uploaded datasets and
/// the saved scenarios in it), for commands that change the data folder as the server would.
fn workbench_on(
    storage: &StorageArgs,
    library: ScenarioLibrary,
    assets: &std::path::Path,
) -> Result<crate::workbench::Workbench, String> {
    let store = storage.open()?.ok_or("--ephemeral keeps nothing: name a data folder or database")?;
    let mut wb = crate::workbench::Workbench::new(library, Backend::Mock, Limits::default());
    wb.setup().use_assets(assets);
    wb.setup().attach_store(store).map_err(|e| e.to_string())?;
    Ok(wb)
}

/// The multi-thread runtime a command runs its async work on.
fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())
}
