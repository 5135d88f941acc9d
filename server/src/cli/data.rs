//! `simtree data`: check, repair and import into a data folder or database.

use super::*;

#[derive(Debug, Subcommand)]
pub(crate) enum DataCommand {
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
pub(crate) struct DataAt {
    /// The data folder (default: $SIMTREE_DATA, else the platform data folder).
    #[arg(long, env = "SIMTREE_DATA")]
    data: Option<PathBuf>,
    /// A PostgreSQL database instead of a data folder.
    #[arg(long, env = "SIMTREE_DATABASE_URL", hide_env_values = true, conflicts_with = "data")]
    database_url: Option<String>,
}

pub(super) fn data(command: DataCommand) -> Result<(), String> {
    let folder = |d: Option<PathBuf>| d.map_or_else(default_data_dir, Ok);
    match command {
        DataCommand::Check { at } => {
            let (place, report) = match at.database_url {
                Some(url) => {
                    ("postgresql".to_string(), crate::store::check::check_postgres(&url).map_err(|e| e.to_string())?)
                }
                None => {
                    let dir = folder(at.data)?;
                    (dir.display().to_string(), crate::store::check::check(&dir).map_err(|e| e.to_string())?)
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

/// `simtree data import`: the upload route's checks and messages, the store's row.
pub(super) fn data_import(name: String, file: PathBuf, storage: StorageArgs) -> Result<(), String> {
    let shown = file.display();
    crate::trading::dataset::check_dataset_name(&name).map_err(|e| e.to_string())?;
    if name == crate::workbench::SHIPPED_DATASET {
        return Err(format!("'{name}' is the shipped dataset's name; choose another"));
    }
    let len = std::fs::metadata(&file).map_err(|e| format!("cannot read {shown}: {e}"))?.len();
    if len > crate::trading::dataset::MAX_DATASET_BYTES as u64 {
        return Err(format!(
            "{shown}: {len} bytes; a dataset may have at most {}",
            crate::trading::dataset::MAX_DATASET_BYTES
        ));
    }
    let text = std::fs::read_to_string(&file).map_err(|e| format!("cannot read {shown}: {e}"))?;
    let d = crate::trading::dataset::parse_dataset(&text).map_err(|e| format!("{shown}: {e}"))?;
    let store = storage.open()?.ok_or("--ephemeral keeps nothing: name a data folder or database")?;
    let existing = store.read(|db| db.dataset_names()).map_err(|e| e.to_string())?;
    if existing.contains(&name) {
        return Err(format!("a dataset called '{name}' exists; delete it first or choose another name"));
    }
    store.write(crate::store::Write::Dataset { name: name.clone(), body: text });
    store.flush().map_err(|e| e.to_string())?;
    let tickers = d.market.tickers().join(", ");
    println!("dataset {name}: {} rows, {} to {}, tickers {tickers}", d.rows, d.first, d.last);
    Ok(())
}
